//! [`SessionCore`]: the part of a session that outlives the reader's
//! borrow: the outbound sender and the Permit bookkeeping (Permit handlers
//! running, pods waiting for a decision, decisions made while their
//! handler ran). Handlers' deciders hold it weakly, so the outbound stream
//! ends once the session's tasks are gone. [`DecisionError`] says why a
//! decision could not be sent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use berth_proto::extender::v1 as pb;
use parking_lot::Mutex;
use pb::response::Result as Reply;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::types::{Code, Status};

/// What the session's outbound stream carries.
pub(crate) type Outbound = Result<pb::ExtenderMessage, tonic::Status>;

/// A decision made while the Permit handler of its reservation still ran.
#[derive(Debug)]
pub(crate) struct Decision {
    pub(crate) allow: bool,
    pub(crate) reasons: Vec<String>,
}

impl Decision {
    pub(crate) fn status(self) -> pb::Status {
        if self.allow {
            Status::success().into_proto()
        } else {
            Status {
                code: Code::Unschedulable,
                reasons: self.reasons,
            }
            .into_proto()
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct PermitBook {
    /// Reservations whose Permit handler runs, with a decision made
    /// meanwhile.
    pub(crate) running: HashMap<String, Option<Decision>>,
    /// Reservations whose Permit answered Wait and await a decision.
    pub(crate) waiting: HashSet<String>,
}

/// The part of a session that outlives the reader's borrow: the outbound
/// sender and the Permit bookkeeping. Handlers' deciders hold it weakly, so
/// the outbound stream ends once the session's tasks are gone.
#[derive(Debug)]
pub(crate) struct SessionCore {
    pub(crate) id: u64,
    pub(crate) out: mpsc::UnboundedSender<Outbound>,
    pub(crate) permits: Mutex<PermitBook>,
    pub(crate) closed: AtomicBool,
}

impl SessionCore {
    pub(crate) fn new(id: u64, out: mpsc::UnboundedSender<Outbound>) -> Arc<Self> {
        Arc::new(Self {
            id,
            out,
            permits: Mutex::default(),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn send(&self, m: pb::extender_message::Message) -> bool {
        self.out
            .send(Ok(pb::ExtenderMessage { message: Some(m) }))
            .is_ok()
    }

    pub(crate) fn respond(&self, id: u64, result: Reply) {
        self.send(pb::extender_message::Message::Response(pb::Response {
            id,
            result: Some(result),
        }));
    }

    pub(crate) fn respond_error(&self, id: u64, message: String) {
        warn!(request = id, error = %message, "request failed");
        self.respond(id, Reply::Error(pb::Error { message }));
    }

    pub(crate) fn decide(
        &self,
        reservation_id: &str,
        allow: bool,
        reasons: Vec<String>,
    ) -> Result<(), DecisionError> {
        if self.is_closed() {
            return Err(DecisionError::SessionClosed);
        }
        let mut book = self.permits.lock();
        if let Some(slot) = book.running.get_mut(reservation_id) {
            *slot = Some(Decision { allow, reasons });
            return Ok(());
        }
        if !book.waiting.remove(reservation_id) {
            return Err(DecisionError::NotWaiting(reservation_id.to_string()));
        }
        // Sent under the lock, like Permit answers, so that order holds.
        let sent = self.send(pb::extender_message::Message::PermitDecision(
            pb::PermitDecision {
                reservation_id: reservation_id.to_string(),
                allow,
                reasons,
            },
        ));
        drop(book);
        if sent {
            debug!(
                session = self.id,
                reservation = reservation_id,
                allow,
                "permit decision sent"
            );
            Ok(())
        } else {
            Err(DecisionError::SessionClosed)
        }
    }

    /// Answers a Permit request, turning a Wait into the decision made
    /// meanwhile if there is one.
    pub(crate) fn deliver_permit(&self, id: u64, reservation_id: &str, result: Reply) {
        let mut book = self.permits.lock();
        let decided = book.running.remove(reservation_id).flatten();
        let result = match result {
            Reply::Permit(p)
                if p.status
                    .as_ref()
                    .is_some_and(|s| s.code == Code::Wait as i32) =>
            {
                match decided {
                    Some(d) => Reply::Permit(pb::PermitResponse {
                        status: Some(d.status()),
                        wait_timeout: None,
                    }),
                    None => {
                        book.waiting.insert(reservation_id.to_string());
                        Reply::Permit(p)
                    }
                }
            }
            other => {
                if decided.is_some() {
                    debug!(
                        reservation = reservation_id,
                        "a decision made while the permit handler ran is moot: it did not wait"
                    );
                }
                other
            }
        };
        // Under the lock: a decision for this reservation cannot overtake
        // the Wait it decides.
        self.respond(id, result);
    }
}

/// Removes a Permit's "running" mark if its task goes away unanswered
/// (cancelled, or the session ended).
pub(crate) struct PermitRunning {
    pub(crate) core: Arc<SessionCore>,
    pub(crate) reservation_id: String,
}

impl Drop for PermitRunning {
    fn drop(&mut self) {
        self.core
            .permits
            .lock()
            .running
            .remove(&self.reservation_id);
    }
}

/// Why a Permit decision could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// The session the Permit came in on has ended.
    #[error("the session of this permit has ended")]
    SessionClosed,
    /// No pod of that reservation waits at Permit on this session (never
    /// answered Wait, already decided, or unreserved since).
    #[error("no pod waits at permit with reservation {0}")]
    NotWaiting(String),
}
