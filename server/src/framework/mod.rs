//! The Scheduling Framework: the plugin API and the runtime that runs it.
//!
//! * [`interface`]: one trait per extension point;
//! * [`Status`], [`CycleState`], [`Handle`]: what plugins get and return;
//! * [`Registry`]: named plugin factories with typed args;
//! * [`Framework`]: a profile's plugins, run in configured order with the
//!   framework's rules (short-circuits, skips, weights, Unreserve).

mod cycle_state;
mod events;
mod extender;
mod handle;
pub mod interface;
mod parallelize;
mod registry;
mod runtime;
mod status;
mod types;
mod waiting_pods;

pub use cycle_state::{CycleState, CycleToken, PluginMask, StateData, StateKey};
pub use events::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
    QueueingHintFn, node_scheduling_property_changes, pod_scheduling_property_changes,
    wildcard_registrations,
};
pub use extender::{ExtenderError, NodeVictims, PreemptionExtender, Victims};
pub use handle::{
    ClusterClient, ClusterError, EventRecorder, EventType, Handle, NOTE_LENGTH_LIMIT,
    NominatedPods, PodEvent, PodNominator, truncate_note,
};
pub use interface::*;
pub use parallelize::{Parallelizer, WorkCost};
pub use registry::{
    DuplicatePlugin, NoArgs, PluginArgs, PluginFactory, Registry, ValidateArgs, parse_args,
};
pub use runtime::{BatchFiltersAhead, FilterVerdict, Framework, PluginEvents, ScoreResult};
pub use status::{Code, Reason, Status};
pub use types::*;
pub use waiting_pods::{MAX_PERMIT_TIMEOUT, WaitingPod, WaitingPods, go_duration};

/// The target of berth's trace spans (a scheduling attempt's, its binding
/// cycle's and each extension point's): `observe::telemetry` exports them
/// and keeps them out of the logs.
pub const TRACE_TARGET: &str = "berth::trace";

/// The extension points a profile configures, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtensionPoint {
    /// Before a pod enters activeQ.
    PreEnqueue,
    /// Orders activeQ.
    QueueSort,
    /// Once per cycle, before filtering.
    PreFilter,
    /// Per node.
    Filter,
    /// When no node fits.
    PostFilter,
    /// Once per cycle, before scoring.
    PreScore,
    /// Per feasible node.
    Score,
    /// After a node is chosen.
    Reserve,
    /// Last in the scheduling cycle.
    Permit,
    /// Before binding.
    PreBind,
    /// Binding.
    Bind,
    /// After binding.
    PostBind,
}

impl ExtensionPoint {
    /// Every point, in order.
    pub const ALL: [ExtensionPoint; 12] = [
        Self::PreEnqueue,
        Self::QueueSort,
        Self::PreFilter,
        Self::Filter,
        Self::PostFilter,
        Self::PreScore,
        Self::Score,
        Self::Reserve,
        Self::Permit,
        Self::PreBind,
        Self::Bind,
        Self::PostBind,
    ];

    /// The field name in a profile's `plugins`.
    pub fn field(&self) -> &'static str {
        match self {
            Self::PreEnqueue => "preEnqueue",
            Self::QueueSort => "queueSort",
            Self::PreFilter => "preFilter",
            Self::Filter => "filter",
            Self::PostFilter => "postFilter",
            Self::PreScore => "preScore",
            Self::Score => "score",
            Self::Reserve => "reserve",
            Self::Permit => "permit",
            Self::PreBind => "preBind",
            Self::Bind => "bind",
            Self::PostBind => "postBind",
        }
    }

    /// The interface name, as upstream's messages name it.
    pub fn interface(&self) -> &'static str {
        match self {
            Self::PreEnqueue => "PreEnqueuePlugin",
            Self::QueueSort => "QueueSortPlugin",
            Self::PreFilter => "PreFilterPlugin",
            Self::Filter => "FilterPlugin",
            Self::PostFilter => "PostFilterPlugin",
            Self::PreScore => "PreScorePlugin",
            Self::Score => "ScorePlugin",
            Self::Reserve => "ReservePlugin",
            Self::Permit => "PermitPlugin",
            Self::PreBind => "PreBindPlugin",
            Self::Bind => "BindPlugin",
            Self::PostBind => "PostBindPlugin",
        }
    }
}
