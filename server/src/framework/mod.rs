//! The Scheduling Framework: the plugin API and the runtime that runs it.
//!
//! * [`interface`]: one trait per extension point;
//! * [`Status`], [`CycleState`], [`Handle`]: what plugins get and return;
//! * [`Registry`]: named plugin factories with typed args;
//! * [`Framework`]: a profile's plugins, run in configured order with the
//!   framework's rules (short-circuits, skips, weights, Unreserve).

mod batch_call;
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

pub use crate::config::{ExtensionPoint, go_duration};
pub use batch_call::{BatchFilterAnswer, BatchFilterCall, BatchFiltersAhead};
pub use cycle_state::{CycleState, CycleToken, PluginFailure, PluginMask, StateData, StateKey};
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
pub use runtime::{FilterVerdict, Framework, PluginEvents, ScoreResult, build_profiles};
pub use status::{Code, Reason, Status};
pub use types::*;
pub use waiting_pods::{MAX_PERMIT_TIMEOUT, WaitingPod, WaitingPods};

/// The target of berth's trace spans (a scheduling attempt's, its binding
/// cycle's and each extension point's): `observe::telemetry` exports them
/// and keeps them out of the logs.
pub const TRACE_TARGET: &str = "berth::trace";
