//! What a session's tasks share: the handlers, the outbound stream, the
//! session's state (its Permit book, its closing flag) and the requests in
//! flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use berth_proto::extender::v1 as pb;
use parking_lot::Mutex;
use pb::response::Result as Reply;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::context::DecisionError;
use crate::groups::GroupHandlers;
use crate::points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
use crate::reservations::ReservationBook;
use crate::types::{Code, ExtensionPoint, ScoreNormalization, Status};

/// What the session's outbound stream carries.
pub(crate) type Outbound = Result<pb::ExtenderMessage, tonic::Status>;

/// The handlers registered with the builder.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) pre_filter: Option<Arc<dyn PreFilter>>,
    pub(crate) filter: Option<Arc<dyn Filter>>,
    pub(crate) post_filter: Option<Arc<dyn PostFilter>>,
    pub(crate) pre_score: Option<Arc<dyn PreScore>>,
    pub(crate) score: Option<Arc<dyn Score>>,
    pub(crate) reserve: Option<Arc<dyn Reserve>>,
    pub(crate) permit: Option<Arc<dyn Permit>>,
    pub(crate) pre_bind: Option<Arc<dyn PreBind>>,
    pub(crate) bind: Option<Arc<dyn Bind>>,
    pub(crate) post_bind: Option<Arc<dyn PostBind>>,
    pub(crate) hooks: Option<Arc<dyn CycleHooks>>,
    pub(crate) groups: GroupHandlers,
}

/// What every session of an extender shares.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) handlers: Handlers,
    pub(crate) wants_nodes: bool,
    pub(crate) wants_pods: bool,
    pub(crate) normalization: ScoreNormalization,
    pub(crate) points: Vec<ExtensionPoint>,
    pub(crate) reservations: Arc<ReservationBook>,
    pub(crate) next_session: AtomicU64,
}

impl Shared {
    pub(crate) fn hello(&self) -> pb::Hello {
        pb::Hello {
            name: self.name.clone(),
            protocol_version: pb::ProtocolVersion::ProtocolVersion2 as i32,
            points: self.points.iter().map(|p| *p as i32).collect(),
            score_normalization: self.normalization as i32,
            wants_nodes: self.wants_nodes,
            wants_pods: self.wants_pods,
            preemption_filter: self.handlers.filter.is_some(),
            filter_ignores_pods: self
                .handlers
                .filter
                .as_ref()
                .is_some_and(|f| f.ignores_pods()),
        }
    }
}

/// A decision made while the Permit handler of its reservation still ran.
#[derive(Debug)]
pub(super) struct Decision {
    pub(super) allow: bool,
    pub(super) reasons: Vec<String>,
}

impl Decision {
    pub(super) fn status(self) -> pb::Status {
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
pub(super) struct PermitBook {
    /// Reservations whose Permit handler runs, with a decision made
    /// meanwhile.
    pub(super) running: HashMap<String, Option<Decision>>,
    /// Reservations whose Permit answered Wait and await a decision.
    pub(super) waiting: HashSet<String>,
}

/// The part of a session that outlives the reader's borrow: the outbound
/// sender and the Permit bookkeeping. Handlers' deciders hold it weakly, so
/// the outbound stream ends once the session's tasks are gone.
#[derive(Debug)]
pub(crate) struct SessionCore {
    pub(super) id: u64,
    pub(super) out: mpsc::UnboundedSender<Outbound>,
    pub(super) permits: Mutex<PermitBook>,
    pub(super) closed: AtomicBool,
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

    pub(super) fn send(&self, m: pb::extender_message::Message) -> bool {
        self.out
            .send(Ok(pb::ExtenderMessage { message: Some(m) }))
            .is_ok()
    }

    pub(super) fn respond(&self, id: u64, result: Reply) {
        self.send(pb::extender_message::Message::Response(pb::Response {
            id,
            result: Some(result),
        }));
    }

    pub(super) fn respond_error(&self, id: u64, message: String) {
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
    pub(super) fn deliver_permit(&self, id: u64, reservation_id: &str, result: Reply) {
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
pub(super) struct PermitRunning {
    pub(super) core: Arc<SessionCore>,
    pub(super) reservation_id: String,
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

pub(super) struct InFlight {
    pub(super) abort: AbortHandle,
    pub(super) token: CancellationToken,
}
