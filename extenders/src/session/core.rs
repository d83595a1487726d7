//! What a session's tasks share: the handlers, what every session of the
//! extender shares, and the requests in flight. The outbound stream and
//! the Permit book, which handlers' deciders reach too, are in
//! `crate::session_core`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use berth_proto::extender::v1 as pb;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::groups::GroupHandlers;
use crate::points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
use crate::reservations::ReservationBook;
use crate::types::{ExtensionPoint, ScoreNormalization};

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

pub(super) struct InFlight {
    pub(super) abort: AbortHandle,
    pub(super) token: CancellationToken,
}
