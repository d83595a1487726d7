//! [`Framework`]: one profile's plugins and the rules for running them.
//!
//! Built once per profile from the merged configuration and the registry:
//! each plugin is instantiated once with its args, then placed at every
//! extension point it is enabled for (explicitly or through `multiPoint`).
//!
//! The rules, in the order a pod meets them:
//! * PreFilter: plugins in order. `Skip` removes the plugin's Filter and
//!   AddPod/RemovePod from this cycle. `UnschedulableAndUnresolvable` ends
//!   the cycle at once; `Unschedulable` is remembered and the remaining
//!   PreFilters still run (preemption needs their state); any other failure
//!   is an error. Results narrowing the nodes are intersected; an empty
//!   intersection rejects the pod.
//! * Filter, per node: plugins in order; the first that does not succeed
//!   decides the node. Batch plugins (remote extenders) then judge the
//!   nodes that passed, all at once, in order. With nominated pods of equal or higher priority on
//!   the node, the filters run twice: with those pods added (through
//!   AddPod) and without them; the node must pass both.
//! * PostFilter: in order, until one succeeds or says the pod is
//!   unresolvable.
//! * PreScore: `Skip` removes the plugin's Score from this cycle.
//! * Score: every plugin on every node, then each plugin's NormalizeScore;
//!   a score outside [0, 100] after that aborts the cycle; a node's total is
//!   the sum of weight × score.
//! * Reserve: in order until one fails; on any failure from here on,
//!   Unreserve runs on every Reserve plugin, in reverse order.
//! * Permit: any rejection rejects; `Wait` parks the pod with one timer per
//!   waiting plugin (at most 15 minutes); it proceeds when all allow.
//! * PreBind: in order until one fails. Bind: in order until one does not
//!   `Skip`. PostBind: informational.
//!
//! * Group cycles (a PodGroup's pods together, `GenericWorkload` on):
//!   PlacementFeasible runs before the first pod and after each, every
//!   enabled plugin that judges placements in order: an error or an
//!   `Unschedulable` decides, else any `Wait` does, else `Success` (also
//!   with no plugin). PodGroupPostFilter runs once when the group ends
//!   exactly `Unschedulable`: in order, until one succeeds, says the group
//!   is unresolvable or fails; the others' messages are collected.
//!   GroupPermit (berth's) runs once when the group fits, before its pods
//!   are assumed: the first that does not succeed rejects the placement.
//!
//! The runners live by family: [`build`] (instantiating and placing the
//! plugins), `filtering` (PreFilter, Filter, PostFilter), `scoring`
//! (PreScore, Score), `binding` (Reserve, Permit, PreBind, Bind, PostBind),
//! `group` (PlacementFeasible, PodGroupPostFilter, GroupPermit).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tracing::Instrument;

use parking_lot::Mutex;

use super::ExtensionPoint;
use super::batch_call::{AheadCall, BatchFilterAnswer, BatchFiltersAhead};
use super::cycle_state::{CycleState, PluginMask, PrefetchedScores, WindowVerdicts};
use super::events::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventResource, wildcard_registrations,
};
use super::handle::{Handle, NominatedPods};
use super::interface::*;
use super::parallelize::WorkCost;
use super::registry::Registry;
use super::status::{Code, Status};
use super::types::{
    MAX_NODE_SCORE, MAX_TOTAL_SCORE, MIN_NODE_SCORE, NodeScore, NodeToStatus, PostFilterResult,
    PreFilterResult,
};
use super::waiting_pods::MAX_PERMIT_TIMEOUT;
use crate::cache::NodeInfo;
use crate::config::{ConfigError, Placement, PluginRef, Profile};
use crate::metrics::{FrameworkMetrics, Metrics};
use crate::model::{PodInfo, PodRef};

struct PreFilterEntry {
    plugin: Arc<dyn PreFilterPlugin>,
    /// The same plugin's position among the Filter plugins.
    filter_index: Option<usize>,
}

struct PreScoreEntry {
    plugin: Arc<dyn PreScorePlugin>,
    /// The same plugin's position among the Score plugins.
    score_index: Option<usize>,
}

struct ScoreEntry {
    plugin: Arc<dyn ScorePlugin>,
    weight: i64,
    /// Whether its scores must be in [MIN_NODE_SCORE, MAX_NODE_SCORE].
    /// Upstream's HTTP extenders' scores are not checked (they are added to
    /// the total as the extender scaled them).
    checked: bool,
}

/// The events a plugin registered for (or, if it did not say, all).
#[derive(Debug, Clone)]
pub struct PluginEvents {
    /// The plugin.
    pub plugin: &'static str,
    /// Its registrations.
    pub events: Vec<ClusterEventWithHint>,
}

/// One Filter plugin's verdict on a node, as explanations report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterVerdict {
    /// The plugin ran.
    Ran(Status),
    /// Its PreFilter skipped it for this pod.
    Skipped,
    /// An earlier plugin already rejected the node.
    NotEvaluated,
    /// The plugin could not judge the node: a batch plugin (a remote
    /// extender) failed as a whole (down, timed out, answered out of
    /// protocol). The status says why.
    Unknown(Status),
    /// A batch plugin of an ignorable extender failed and was skipped: the
    /// node passes, as the scheduler passes it; the text says what failed.
    Ignored(String),
}

/// Nodes a batch Filter plugin did not pass, by position, with their status.
type Rejected = Vec<(usize, Status)>;

/// Scores of the feasible nodes, as computed by [`Framework::run_score`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScoreResult {
    /// The Score plugins that ran (not skipped), in order.
    pub plugins: Vec<&'static str>,
    /// Their weights.
    pub weights: Vec<i64>,
    /// Scores as the plugins gave them, node-major: `raw[node * plugins + p]`.
    pub raw: Vec<i64>,
    /// Scores after NormalizeScore, same layout.
    pub normalized: Vec<i64>,
    /// Per node, the sum of weight × normalized score.
    pub totals: Vec<i64>,
}

/// A profile's instantiated plugins, by extension point.
pub struct Framework {
    profile_name: Arc<str>,
    handle: Handle,
    percentage_of_nodes_to_score: Option<i32>,
    queue_sort: Arc<dyn QueueSortPlugin>,
    pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    pre_filter: Vec<PreFilterEntry>,
    filter: Vec<Arc<dyn FilterPlugin>>,
    /// Filter plugins (by position) that judge nodes in batches.
    batch_filter: PluginMask,
    /// Per Filter plugin: the position among the Score plugins of the same
    /// batch plugin when its Filter call may bring its scores (it scores in
    /// this profile, and has no PreScore here to run first).
    fused_score: Vec<Option<usize>>,
    post_filter: Vec<Arc<dyn PostFilterPlugin>>,
    pre_score: Vec<PreScoreEntry>,
    score: Vec<ScoreEntry>,
    reserve: Vec<Arc<dyn ReservePlugin>>,
    permit: Vec<Arc<dyn PermitPlugin>>,
    pre_bind: Vec<Arc<dyn PreBindPlugin>>,
    bind: Vec<Arc<dyn BindPlugin>>,
    post_bind: Vec<Arc<dyn PostBindPlugin>>,
    /// Group cycles: every enabled plugin that judges placements (in
    /// v1.37 only GangScheduling does), in the order they were enabled.
    placement_feasible: Vec<Arc<dyn PlacementFeasiblePlugin>>,
    pod_group_post_filter: Vec<Arc<dyn PodGroupPostFilterPlugin>>,
    /// Enabled plugins that serve berth's GroupPermit.
    group_permit: Vec<Arc<dyn GroupPermitPlugin>>,
    events: Vec<PluginEvents>,
    names: Vec<(ExtensionPoint, Vec<&'static str>)>,
    /// What filtering one node costs, to decide whether to fan out.
    filter_cost: WorkCost,
    /// What scoring one node costs.
    score_cost: WorkCost,
    /// Where this profile's metrics go, once the scheduler attaches them.
    metrics: OnceLock<FrameworkMetrics>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Framework");
        d.field("profile", &self.profile_name);
        for (point, names) in &self.names {
            d.field(point.field(), names);
        }
        d.finish()
    }
}

mod binding;
mod build;
pub use build::build_profiles;

#[async_trait::async_trait]
impl ProfileFilters for Framework {
    fn profile_name(&self) -> &Arc<str> {
        Framework::profile_name(self)
    }

    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        Framework::run_pre_filter_extension_add_pod(self, state, pod, pod_to_add, node)
    }

    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        Framework::run_pre_filter_extension_remove_pod(self, state, pod, pod_to_remove, node)
    }

    fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &NominatedPods,
    ) -> Status {
        Framework::run_filter_with_nominated_pods(self, state, pod, node, nominated)
    }

    fn has_preemption_batch_filters(&self) -> bool {
        Framework::has_preemption_batch_filters(self)
    }

    async fn run_batch_filters_preemption(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        candidates: &[PreemptionCandidate<'_>],
        filtered: &NodeToStatus,
    ) -> Vec<PreemptionVerdict> {
        Framework::run_batch_filters_preemption(self, state, pod, candidates, filtered).await
    }
}

#[cfg(test)]
use build::check_weight;
mod explain;
mod filtering;
mod group;
mod scoring;

impl Framework {
    /// Sets where this profile's metrics go (once; later calls are ignored).
    pub fn set_metrics(&self, m: FrameworkMetrics) {
        let _ = self.metrics.set(m);
    }

    /// Resolves this profile's label sets in `metrics` and records there
    /// from now on (once; later calls are ignored).
    pub fn attach_metrics(&self, metrics: &Arc<Metrics>) {
        let m = metrics.attach(self.profile_name(), &|p| match p {
            ExtensionPoint::PlacementFeasible => {
                self.placement_feasible.iter().map(|p| p.name()).collect()
            }
            _ => self.plugin_names(p.list()).to_vec(),
        });
        self.set_metrics(m);
    }

    /// The profile's metrics, if attached.
    pub fn metrics(&self) -> Option<&FrameworkMetrics> {
        self.metrics.get()
    }

    /// Starts timing an extension point (not for dry runs, nor without
    /// metrics).
    #[inline]
    pub fn point_timer(&self, state: &CycleState) -> Option<Instant> {
        (!state.dry_run && self.metrics.get().is_some()).then(Instant::now)
    }

    /// Records an extension point's duration, if timed.
    #[inline]
    pub fn point_done(&self, p: ExtensionPoint, code: Code, started: Option<Instant>) {
        if let (Some(t), Some(m)) = (started, self.metrics.get()) {
            m.point(p, code as usize, t.elapsed());
        }
    }

    /// Starts timing one plugin, in cycles sampled for plugin metrics.
    #[inline]
    fn plugin_timer(&self, state: &CycleState) -> Option<Instant> {
        state.record_plugin_metrics.then(Instant::now)
    }

    /// Like [`Framework::plugin_timer`] for the points that run per node
    /// (Filter, Score, AddPod, RemovePod): in sampled cycles, one node
    /// evaluation in [`PER_NODE_SAMPLE_EVERY`] per thread is timed, so that
    /// a sampled cycle over thousands of nodes stays cheap.
    #[inline]
    fn per_node_timer(&self, state: &CycleState) -> Option<Instant> {
        if !state.record_plugin_metrics {
            return None;
        }
        let due = PER_NODE_TICK.with(|t| {
            let v = t.get().wrapping_add(1);
            t.set(v);
            v % PER_NODE_SAMPLE_EVERY == 0
        });
        due.then(Instant::now)
    }

    #[inline]
    fn plugin_done(&self, p: ExtensionPoint, index: usize, code: Code, started: Option<Instant>) {
        if let (Some(t), Some(m)) = (started, self.metrics.get()) {
            m.plugin(p, index, code as usize, t.elapsed());
        }
    }

    /// The profile's scheduler name.
    pub fn profile_name(&self) -> &Arc<str> {
        &self.profile_name
    }

    /// The handle the plugins were built with.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The profile's own percentageOfNodesToScore, if set.
    pub fn percentage_of_nodes_to_score(&self) -> Option<i32> {
        self.percentage_of_nodes_to_score
    }

    /// The plugin names enabled at `point`, in order.
    pub fn plugin_names(&self, point: ExtensionPoint) -> &[&'static str] {
        self.names
            .iter()
            .find(|(p, _)| *p == point)
            .map_or(&[], |(_, n)| n.as_slice())
    }

    /// The QueueSort plugin.
    pub fn queue_sort(&self) -> &Arc<dyn QueueSortPlugin> {
        &self.queue_sort
    }

    /// The events each rejecting plugin registered for.
    pub fn events(&self) -> &[PluginEvents] {
        &self.events
    }

    /// What filtering one node has cost so far.
    pub fn filter_cost(&self) -> &WorkCost {
        &self.filter_cost
    }

    /// Whether any Filter plugin is enabled.
    pub fn has_filter_plugins(&self) -> bool {
        !self.filter.is_empty()
    }

    /// How many Filter plugins the profile enables.
    pub fn num_filter_plugins(&self) -> usize {
        self.filter.len()
    }

    /// Whether any Score plugin is enabled.
    pub fn has_score_plugins(&self) -> bool {
        !self.score.is_empty()
    }

    /// Whether any PostFilter plugin is enabled.
    pub fn has_post_filter_plugins(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// Runs PreEnqueue plugins, `first` (the plugin that gated the pod last
    /// time) before the others; returns the first failure.
    pub fn run_pre_enqueue(&self, pod: &PodInfo, first: Option<&'static str>) -> Status {
        let ordered = first
            .and_then(|f| self.pre_enqueue.iter().find(|p| p.name() == f))
            .into_iter()
            .chain(self.pre_enqueue.iter().filter(|p| Some(p.name()) != first));
        for p in ordered {
            let s = p.pre_enqueue(pod);
            if !s.is_success() {
                return s.or_plugin(p.name());
            }
        }
        Status::success()
    }
}

/// In cycles sampled for plugin metrics, one per-node plugin run in this
/// many (per thread) is timed.
pub const PER_NODE_SAMPLE_EVERY: u32 = 16;

thread_local! {
    static PER_NODE_TICK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A span for one extension point's run: DEBUG, under the `berth::trace`
/// target, so that it costs one disabled-callsite check unless a tracing
/// exporter asks for extension points.
#[inline]
fn point_span(p: ExtensionPoint) -> tracing::Span {
    tracing::debug_span!(target: super::TRACE_TARGET, "extension_point", extension_point = p.metric_label())
}

/// Formats names as Go prints a string slice: `[A B]`.
fn go_list<'a>(names: impl IntoIterator<Item = &'a &'static str>) -> String {
    let v: Vec<&str> = names.into_iter().copied().collect();
    format!("[{}]", v.join(" "))
}

#[cfg(test)]
mod tests;
