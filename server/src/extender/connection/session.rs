//! [`Session`]: one open stream to an extender: what is sent on it, the
//! extender's Hello, the calls awaiting their answers and how finished ones
//! ended, the cycles it has seen, and the CycleEnds waiting for a message
//! to travel with.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use berth_proto::extender::v1::{self as pb, Hello, SchedulerMessage, scheduler_message};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::ids::{IdHasher, IdMap, IdSet};
use super::recent::Recent;
use crate::extender::answers::RawAnswer;
use crate::extender::call_error::CallError;

/// A call waiting for its answer.
pub(super) struct Pending {
    pub(super) answer: oneshot::Sender<RawAnswer>,
    /// For Permit calls: the reservation.
    pub(super) permit: Option<String>,
}

/// How a request that is no longer pending ended, to judge a message
/// naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Answered,
    /// berthd stopped waiting (its timeout passed): an answer now is late.
    TimedOut,
    /// Its caller no longer needed it (a Filter sent ahead whose verdicts
    /// were not needed): an answer now is expected, and dropped quietly.
    Abandoned,
}

/// One open stream.
pub(super) struct Session {
    pub(super) tx: mpsc::UnboundedSender<SchedulerMessage>,
    pub(super) hello: Hello,
    pub(super) pending: Mutex<IdMap<Pending>>,
    pub(super) ended: Mutex<Recent<u64, Ended, std::hash::BuildHasherDefault<IdHasher>>>,
    pub(super) cycles: Mutex<IdSet>,
    /// Cycles that ended, whose CycleEnd goes with the next message (or
    /// the flusher's, shortly after).
    pub(super) ended_cycles: Mutex<Vec<u64>>,
    pub(super) closed: AtomicBool,
}

impl Session {
    pub(super) fn send(&self, m: scheduler_message::Message) -> Result<(), CallError> {
        self.flush_cycle_ends();
        self.tx
            .send(SchedulerMessage { message: Some(m) })
            .map_err(|_| CallError::Disconnected)
    }

    /// Queues the CycleEnds due, ahead of whatever is sent next.
    pub(super) fn flush_cycle_ends(&self) {
        let ended = std::mem::take(&mut *self.ended_cycles.lock());
        for cycle_id in ended {
            let _ = self.tx.send(SchedulerMessage {
                message: Some(scheduler_message::Message::CycleEnd(pb::CycleEnd {
                    cycle_id,
                })),
            });
        }
    }
}

/// How long a CycleEnd may wait for another message to travel with: on a
/// busy stream it goes with the next cycle's messages, in the same write.
pub(super) const CYCLE_END_DELAY: Duration = Duration::from_millis(5);
