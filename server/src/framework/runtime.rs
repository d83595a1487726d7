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

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tracing::Instrument;

use parking_lot::Mutex;

use super::ExtensionPoint;
use super::cycle_state::{CycleState, PluginMask, PrefetchedScores};
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
use crate::metrics::{FrameworkMetrics, Metrics, Point};
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

/// The plugins placed at one point, with the configuration entry that
/// placed each.
type PointList<'a> = Vec<(Arc<dyn Plugin>, &'a PluginRef)>;

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

/// Batch Filter calls sent ahead of the per-node plugins, with a cycle's
/// candidates ([`Framework::start_batch_filters`]).
pub struct BatchFiltersAhead {
    calls: Vec<AheadCall>,
    /// How many nodes were sent.
    sent: usize,
}

struct AheadCall {
    filter_index: usize,
    /// The plugin's Score position, when its scores were asked for.
    score_index: Option<usize>,
    call: BatchFilterCall,
}

impl std::fmt::Debug for BatchFiltersAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchFiltersAhead")
            .field("calls", &self.calls.len())
            .field("sent", &self.sent)
            .finish()
    }
}

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

fn implements(p: &Arc<dyn Plugin>, point: ExtensionPoint) -> bool {
    let p = p.clone();
    match point {
        ExtensionPoint::PreEnqueue => p.as_pre_enqueue().is_some(),
        ExtensionPoint::QueueSort => p.as_queue_sort().is_some(),
        ExtensionPoint::PreFilter => p.as_pre_filter().is_some(),
        ExtensionPoint::Filter => p.as_filter().is_some(),
        ExtensionPoint::PostFilter => p.as_post_filter().is_some(),
        ExtensionPoint::PreScore => p.as_pre_score().is_some(),
        ExtensionPoint::Score => p.as_score().is_some(),
        ExtensionPoint::Reserve => p.as_reserve().is_some(),
        ExtensionPoint::Permit => p.as_permit().is_some(),
        ExtensionPoint::PreBind => p.as_pre_bind().is_some(),
        ExtensionPoint::Bind => p.as_bind().is_some(),
        ExtensionPoint::PostBind => p.as_post_bind().is_some(),
    }
}

/// Points whose plugins can reject pods, and so must say which events may
/// make a rejected pod schedulable.
const REJECTING_POINTS: [ExtensionPoint; 5] = [
    ExtensionPoint::PreEnqueue,
    ExtensionPoint::PreFilter,
    ExtensionPoint::Filter,
    ExtensionPoint::Reserve,
    ExtensionPoint::Permit,
];

impl Framework {
    /// Instantiates a profile's plugins and arranges them by extension
    /// point. Every error names the configuration path at fault.
    pub fn new(
        profile: &Profile,
        registry: &Registry,
        handle: &Handle,
    ) -> Result<Self, ConfigError> {
        // Instantiate every plugin the profile enables, once, with its args.
        let mut instances: Vec<(String, Arc<dyn Plugin>)> = Vec::new();
        let multi = &profile.plugins.multi_point;
        let all_refs = ExtensionPoint::ALL
            .iter()
            .flat_map(|p| {
                profile
                    .plugins
                    .get(*p)
                    .enabled
                    .iter()
                    .map(move |r| (Some(*p), r))
            })
            .chain(multi.enabled.iter().map(|r| (None, r)))
            .chain(
                profile
                    .plugins
                    .pinned
                    .iter()
                    .map(|p| (Some(p.point), &p.plugin)),
            );
        for (point, r) in all_refs {
            if instances.iter().any(|(n, _)| *n == r.name) {
                continue;
            }
            let Some(factory) = registry.get(&r.name) else {
                let iface = point.map_or("Plugin", |p| p.interface());
                return Err(ConfigError::new(
                    &r.path,
                    format!("{iface} {:?} does not exist", r.name),
                ));
            };
            let (args, args_path) = match profile.args_for(&r.name) {
                Some(c) => (c.args.as_ref(), c.path.clone()),
                None => (
                    None,
                    format!("{}.pluginConfig[{}].args", profile.path, r.name),
                ),
            };
            let plugin = factory(args, &args_path, handle)?;
            instances.push((r.name.clone(), plugin));
        }
        // Args given for plugins the profile does not enable are still
        // validated, so that typos in them do not go unnoticed.
        for c in &profile.plugin_config {
            if !instances.iter().any(|(n, _)| *n == c.name)
                && let Some(factory) = registry.get(&c.name)
            {
                factory(c.args.as_ref(), &c.path, handle)?;
            }
        }
        let get = |name: &str| {
            instances
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| p.clone())
        };

        // Per point: explicit plugins, then multiPoint expansion.
        let mut lists: Vec<(ExtensionPoint, PointList<'_>)> = Vec::new();
        for point in ExtensionPoint::ALL {
            let set = profile.plugins.get(point);
            let mut explicit: PointList<'_> = Vec::new();
            for r in &set.enabled {
                let p = get(&r.name).expect("instantiated above");
                if !implements(&p, point) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} does not extend {} plugin",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                if explicit.iter().any(|(_, e)| e.name == r.name) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} already registered as {:?}",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                explicit.push((p, r));
            }
            let mut list = Vec::new();
            if set.all_disabled() {
                list = explicit;
            } else {
                let mut overrides = Vec::new();
                let mut from_multi: PointList<'_> = Vec::new();
                for r in &multi.enabled {
                    let p = get(&r.name).expect("instantiated above");
                    if !implements(&p, point) || set.is_disabled(&r.name) {
                        continue;
                    }
                    if explicit.iter().any(|(_, e)| e.name == r.name) {
                        overrides.push(r.name.clone());
                        continue;
                    }
                    if from_multi.iter().any(|(_, e)| e.name == r.name) {
                        return Err(ConfigError::new(
                            &r.path,
                            format!(
                                "plugin {:?} already registered as {:?}",
                                r.name,
                                point.interface()
                            ),
                        ));
                    }
                    from_multi.push((p, r));
                }
                let (first, rest): (Vec<_>, Vec<_>) = explicit
                    .into_iter()
                    .partition(|(_, e)| overrides.contains(&e.name));
                list.extend(first);
                list.extend(from_multi);
                list.extend(rest);
            }
            // Plugins the scheduler pins around the profile's own.
            let mut first = 0;
            for pin in profile.plugins.pinned.iter().filter(|p| p.point == point) {
                let r = &pin.plugin;
                if list.iter().any(|(_, e)| e.name == r.name) {
                    continue;
                }
                let p = get(&r.name).expect("instantiated above");
                if !implements(&p, point) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} does not extend {} plugin",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                match pin.placement {
                    Placement::First => {
                        list.insert(first, (p, r));
                        first += 1;
                    }
                    Placement::Last => list.push((p, r)),
                }
            }
            lists.push((point, list));
        }
        let list = |point: ExtensionPoint| -> &PointList<'_> {
            &lists
                .iter()
                .find(|(p, _)| *p == point)
                .expect("every point")
                .1
        };
        for (point, l) in &lists {
            if l.len() > PluginMask::CAPACITY {
                return Err(ConfigError::new(
                    format!("{}.plugins.{}", profile.path, point.field()),
                    format!(
                        "at most {} plugins per extension point",
                        PluginMask::CAPACITY
                    ),
                ));
            }
        }

        // Score weights: the Score point's own entry wins over multiPoint's;
        // 0 means 1; the sum of weight × 100 must fit in an i64.
        let mut score = Vec::new();
        let mut total: i64 = 0;
        for (p, r) in list(ExtensionPoint::Score) {
            if let Some(pin) = profile
                .plugins
                .pinned
                .iter()
                .find(|pin| pin.point == ExtensionPoint::Score && pin.plugin.name == r.name)
            {
                let weight = pin.weight.max(1);
                total = check_weight(total, weight).map_err(|m| ConfigError::new(&r.path, m))?;
                score.push(ScoreEntry {
                    plugin: p.clone().as_score().expect("checked"),
                    weight,
                    checked: false,
                });
                continue;
            }
            let configured = profile
                .plugins
                .get(ExtensionPoint::Score)
                .enabled
                .iter()
                .chain(multi.enabled.iter())
                .find(|e| e.name == r.name)
                .map(|e| (e.weight, e.path.clone()))
                .unwrap_or((None, r.path.clone()));
            let weight = match configured.0 {
                Some(w) if w < 0 => {
                    return Err(ConfigError::invalid(
                        format!("{}.weight", configured.1),
                        w,
                        "must be greater than or equal to 0",
                    ));
                }
                Some(0) | None => 1,
                Some(w) => i64::from(w),
            };
            total = check_weight(total, weight).map_err(|m| ConfigError::new(&configured.1, m))?;
            score.push(ScoreEntry {
                plugin: p.clone().as_score().expect("checked"),
                weight,
                checked: true,
            });
        }

        let queue_sort = list(ExtensionPoint::QueueSort);
        if queue_sort.len() != 1 {
            return Err(ConfigError::new(
                format!("{}.plugins.queueSort", profile.path),
                format!(
                    "only one queue sort plugin required for profile with scheduler name {:?}, but got {}",
                    profile.scheduler_name,
                    queue_sort.len()
                ),
            ));
        }
        if list(ExtensionPoint::Bind).is_empty() {
            return Err(ConfigError::new(
                format!("{}.plugins.bind", profile.path),
                format!(
                    "at least one bind plugin is needed for profile with scheduler name {:?}",
                    profile.scheduler_name
                ),
            ));
        }

        let typed = |point: ExtensionPoint| list(point).iter().map(|(p, _)| p.clone());
        let filter: Vec<Arc<dyn FilterPlugin>> = typed(ExtensionPoint::Filter)
            .map(|p| p.as_filter().expect("checked"))
            .collect();
        let filter_names: Vec<&'static str> = filter.iter().map(|p| p.name()).collect();
        let mut batch_filter = PluginMask::default();
        for (i, p) in filter.iter().enumerate() {
            if p.as_batch().is_some() {
                batch_filter.insert(i);
            }
        }
        let score_names: Vec<&'static str> = score.iter().map(|s| s.plugin.name()).collect();
        let pre_score_names: Vec<&'static str> = list(ExtensionPoint::PreScore)
            .iter()
            .map(|(p, _)| p.name())
            .collect();
        let fused_score = filter
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let j = score_names.iter().position(|n| *n == p.name())?;
                let batch_scores = score[j].plugin.as_batch().is_some();
                (batch_filter.contains(i) && batch_scores && !pre_score_names.contains(&p.name()))
                    .then_some(j)
            })
            .collect();

        // Event registrations of the plugins that can reject pods.
        let mut events: Vec<PluginEvents> = Vec::new();
        for point in REJECTING_POINTS {
            for (p, _) in list(point) {
                if events.iter().any(|e| e.plugin == p.name()) {
                    continue;
                }
                let mut registered = p
                    .events_to_register()
                    .unwrap_or_else(wildcard_registrations);
                // A plugin waiting for nodes to appear also wants nodes whose
                // taints change (upstream does the same).
                let node_add = registered.iter().any(|e| {
                    e.event.resource == EventResource::Node
                        && e.event.action.contains(ActionType::ADD)
                });
                let node_taint = registered.iter().any(|e| {
                    e.event.resource == EventResource::Node
                        && e.event.action.contains(ActionType::UPDATE_NODE_TAINT)
                });
                if node_add && !node_taint {
                    registered.push(ClusterEventWithHint::always(ClusterEvent::new(
                        EventResource::Node,
                        ActionType::UPDATE_NODE_TAINT,
                    )));
                }
                events.push(PluginEvents {
                    plugin: p.name(),
                    events: registered,
                });
            }
        }

        let names = lists
            .iter()
            .map(|(point, l)| (*point, l.iter().map(|(p, _)| p.name()).collect()))
            .collect();

        Ok(Self {
            profile_name: Arc::from(profile.scheduler_name.as_str()),
            handle: handle.clone(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            queue_sort: queue_sort[0].0.clone().as_queue_sort().expect("checked"),
            pre_enqueue: typed(ExtensionPoint::PreEnqueue)
                .map(|p| p.as_pre_enqueue().expect("checked"))
                .collect(),
            pre_filter: typed(ExtensionPoint::PreFilter)
                .map(|p| {
                    let filter_index = filter_names.iter().position(|n| *n == p.name());
                    PreFilterEntry {
                        plugin: p.as_pre_filter().expect("checked"),
                        filter_index,
                    }
                })
                .collect(),
            filter,
            batch_filter,
            fused_score,
            post_filter: typed(ExtensionPoint::PostFilter)
                .map(|p| p.as_post_filter().expect("checked"))
                .collect(),
            pre_score: typed(ExtensionPoint::PreScore)
                .map(|p| {
                    let score_index = score_names.iter().position(|n| *n == p.name());
                    PreScoreEntry {
                        plugin: p.as_pre_score().expect("checked"),
                        score_index,
                    }
                })
                .collect(),
            score,
            reserve: typed(ExtensionPoint::Reserve)
                .map(|p| p.as_reserve().expect("checked"))
                .collect(),
            permit: typed(ExtensionPoint::Permit)
                .map(|p| p.as_permit().expect("checked"))
                .collect(),
            pre_bind: typed(ExtensionPoint::PreBind)
                .map(|p| p.as_pre_bind().expect("checked"))
                .collect(),
            bind: typed(ExtensionPoint::Bind)
                .map(|p| p.as_bind().expect("checked"))
                .collect(),
            post_bind: typed(ExtensionPoint::PostBind)
                .map(|p| p.as_post_bind().expect("checked"))
                .collect(),
            events,
            names,
            filter_cost: WorkCost::default(),
            score_cost: WorkCost::default(),
            metrics: OnceLock::new(),
        })
    }

    /// Sets where this profile's metrics go (once; later calls are ignored).
    pub fn set_metrics(&self, m: FrameworkMetrics) {
        let _ = self.metrics.set(m);
    }

    /// Resolves this profile's label sets in `metrics` and records there
    /// from now on (once; later calls are ignored).
    pub fn attach_metrics(&self, metrics: &Arc<Metrics>) {
        let m = metrics.attach(self.profile_name(), &|p| {
            self.plugin_names(metric_point_plugins(p)).to_vec()
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
    pub fn point_done(&self, p: Point, code: Code, started: Option<Instant>) {
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
    fn plugin_done(&self, p: Point, index: usize, code: Code, started: Option<Instant>) {
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

    /// Runs PreFilter plugins. Returns the merged node restriction, the
    /// status, and the plugins that restricted the nodes.
    pub async fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        self.run_pre_filter_recorded(state, pod, nodes, &mut |_, _, _| {})
            .await
    }

    /// [`Framework::run_pre_filter`], also telling `record` each plugin's
    /// status and result as it runs (for explanations).
    pub async fn run_pre_filter_recorded(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status, Option<&PreFilterResult>) + Send),
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        let t = self.point_timer(state);
        let out = self
            .pre_filter_plugins(state, pod, nodes, record)
            .instrument(point_span(Point::PreFilter))
            .await;
        self.point_done(Point::PreFilter, out.1.code(), t);
        out
    }

    async fn pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status, Option<&PreFilterResult>) + Send),
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        let mut result: Option<PreFilterResult> = None;
        let mut with_nodes = BTreeSet::new();
        let mut returned = Status::success();
        for (i, entry) in self.pre_filter.iter().enumerate() {
            let name = entry.plugin.name();
            let t = self.plugin_timer(state);
            let (r, s) = entry.plugin.pre_filter(state, pod, nodes).await;
            self.plugin_done(Point::PreFilter, i, s.code(), t);
            record(name, &s, r.as_ref());
            if s.is_skip() {
                state.skip_pre_filter.insert(i);
                if let Some(fi) = entry.filter_index {
                    state.skip_filter.insert(fi);
                }
                continue;
            }
            if !s.is_success() {
                let s = s.with_plugin(name);
                match s.code() {
                    Code::UnschedulableAndUnresolvable => return (None, s, BTreeSet::new()),
                    Code::Unschedulable | Code::Pending => {
                        returned = s;
                        continue;
                    }
                    _ => {
                        return (
                            None,
                            Status::error(format!(
                                "running PreFilter plugin {name:?}: {}",
                                s.message()
                            ))
                            .with_plugin(name),
                            BTreeSet::new(),
                        );
                    }
                }
            }
            let Some(r) = r.filter(|r| !r.all_nodes()) else {
                continue;
            };
            with_nodes.insert(name);
            match &mut result {
                None => result = Some(r),
                Some(acc) => acc.merge(&r),
            }
            if result
                .as_ref()
                .and_then(|r| r.node_names.as_ref())
                .is_some_and(|n| n.is_empty())
            {
                let msg = if with_nodes.len() == 1 {
                    format!("node(s) didn't satisfy plugin {name}")
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) {} simultaneously",
                        go_list(&with_nodes)
                    )
                };
                return (result, Status::unresolvable(msg), with_nodes);
            }
        }
        if !returned.is_success() {
            return (None, returned, BTreeSet::new());
        }
        (result, returned, with_nodes)
    }

    /// Runs AddPod of every PreFilter plugin with extensions (not skipped).
    pub fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for (i, entry) in self.pre_filter.iter().enumerate() {
            if state.skip_pre_filter.contains(i) {
                continue;
            }
            let Some(ext) = entry.plugin.extensions() else {
                continue;
            };
            let t = self.per_node_timer(state);
            let s = ext.add_pod(state, pod, pod_to_add, node);
            self.plugin_done(Point::PreFilterExtensionAddPod, i, s.code(), t);
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!(
                    "running AddPod on PreFilter plugin {name:?}: {}",
                    s.message()
                ))
                .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Runs RemovePod of every PreFilter plugin with extensions (not skipped).
    pub fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for (i, entry) in self.pre_filter.iter().enumerate() {
            if state.skip_pre_filter.contains(i) {
                continue;
            }
            let Some(ext) = entry.plugin.extensions() else {
                continue;
            };
            let t = self.per_node_timer(state);
            let s = ext.remove_pod(state, pod, pod_to_remove, node);
            self.plugin_done(Point::PreFilterExtensionRemovePod, i, s.code(), t);
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!(
                    "running RemovePod on PreFilter plugin {name:?}: {}",
                    s.message()
                ))
                .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Runs the Filter plugins on one node; the first that does not succeed
    /// decides.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.run_filter_range(state, pod, node, 0..self.filter.len())
    }

    /// [`Framework::run_filter`] for the Filter plugins at `plugins` (their
    /// positions in the profile's order) only: running `0..k` and then, if
    /// that succeeds, `k..` gives the same status as running them all.
    pub fn run_filter_range(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        plugins: std::ops::Range<usize>,
    ) -> Status {
        let to = plugins.end.min(self.filter.len());
        for i in plugins.start.min(to)..to {
            let p = &self.filter[i];
            if state.skip_filter.contains(i) || self.batch_filter.contains(i) {
                continue;
            }
            let t = self.per_node_timer(state);
            let s = p.filter(state, pod, node);
            self.plugin_done(Point::Filter, i, s.code(), t);
            if !s.is_success() {
                return self.filter_failure(p.name(), s);
            }
        }
        Status::success()
    }

    /// Whether any Filter plugin judges nodes in batches.
    pub fn has_batch_filters(&self) -> bool {
        !self.batch_filter.is_empty()
    }

    /// Whether the batch Filter calls may be sent for the next pod before
    /// its cycle starts: every batch Filter plugin of the profile allows it
    /// (see [`BatchFilter::looks_ahead`]).
    pub fn can_look_ahead(&self) -> bool {
        !self.batch_filter.is_empty()
            && self.filter.iter().enumerate().all(|(i, p)| {
                !self.batch_filter.contains(i) || p.as_batch().is_some_and(|b| b.looks_ahead())
            })
    }

    /// The Filter plugins that judge nodes in batches, in order.
    pub fn batch_filter_names(&self) -> Vec<&'static str> {
        self.filter
            .iter()
            .enumerate()
            .filter(|(i, _)| self.batch_filter.contains(*i))
            .map(|(_, p)| p.name())
            .collect()
    }

    /// Runs the batch Filter plugins (those not skipped by their PreFilter)
    /// in order, each on the nodes that passed the ones before; the nodes
    /// passing all are kept in `nodes`, in order, and `reject` is told about
    /// every other (with the status naming the plugin). `Err` when a plugin
    /// fails as a whole or says a node errored.
    pub async fn run_batch_filters(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &mut Vec<Arc<NodeInfo>>,
        reject: &mut (dyn FnMut(&'static str, &Arc<NodeInfo>, Status) + Send),
    ) -> Result<(), Status> {
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) || nodes.is_empty() {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let name = p.name();
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let statuses = batch
                .filter_nodes(state, pod, nodes)
                .await
                .map_err(failure)?;
            if statuses.len() != nodes.len() {
                return Err(Status::error(format!(
                    "running {name:?} filter plugin: {} verdicts for {} nodes",
                    statuses.len(),
                    nodes.len()
                ))
                .with_plugin(name));
            }
            let mut kept = Vec::with_capacity(nodes.len());
            for (node, s) in nodes.drain(..).zip(statuses) {
                if s.is_success() {
                    kept.push(node);
                    continue;
                }
                let s = failure(s);
                if s.code() == Code::Error {
                    return Err(s);
                }
                reject(name, &node, s);
            }
            *nodes = kept;
        }
        Ok(())
    }

    /// Sends the batch Filter plugins' calls for `window` (the cycle's
    /// candidates, in evaluation order) now, before the per-node plugins
    /// run, asking for the scores of plugins that also score in this
    /// profile without a PreScore. [`Framework::finish_batch_filters`]
    /// awaits them. `None` when no batch plugin can be asked ahead.
    pub fn start_batch_filters(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        window: NodeWindow<'_>,
    ) -> Option<BatchFiltersAhead> {
        if self.batch_filter.is_empty() || window.is_empty() {
            return None;
        }
        let mut calls = Vec::new();
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let score = self.fused_score[i];
            if let Some(call) = batch.start_filter_nodes(state, pod, window, score.is_some()) {
                calls.push(AheadCall {
                    filter_index: i,
                    score_index: score,
                    call,
                });
            }
        }
        (!calls.is_empty()).then_some(BatchFiltersAhead {
            calls,
            sent: window.len(),
        })
    }

    /// Runs the batch Filter plugins on `nodes` (those the per-node plugins
    /// kept), as [`Framework::run_batch_filters`] does, using the calls
    /// `ahead` sent: `offsets[k]` is the position of `nodes[k]` in the
    /// window sent (in any order); a node outside the window (at or past
    /// its length) is judged by a second call with such nodes only. The
    /// result (kept nodes, rejections, errors) is that of
    /// `run_batch_filters` on `nodes`: each plugin only counts for the
    /// nodes the plugins before it kept. Scores that came along are kept in
    /// `state` for [`Framework::run_score`] on the nodes kept.
    pub async fn finish_batch_filters(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        ahead: Option<BatchFiltersAhead>,
        nodes: &mut Vec<Arc<NodeInfo>>,
        offsets: &[usize],
        reject: &mut (dyn FnMut(&'static str, &Arc<NodeInfo>, Status) + Send),
    ) -> Result<(), Status> {
        state.prefetched_scores = None;
        let Some(mut ahead) = ahead else {
            return self.run_batch_filters(state, pod, nodes, reject).await;
        };
        let mut offsets = offsets.to_vec();
        // Per Score plugin, a raw score per node of `nodes`.
        let mut fused: Vec<(usize, Vec<i64>)> = Vec::new();
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) || nodes.is_empty() {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let name = p.name();
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let bad_count = |got: usize, want: usize| {
                Status::error(format!(
                    "running {name:?} filter plugin: {got} verdicts for {want} nodes"
                ))
                .with_plugin(name)
            };
            let early = ahead
                .calls
                .iter()
                .position(|c| c.filter_index == i)
                .map(|at| ahead.calls.swap_remove(at));
            // The nodes (by position in `nodes`) this plugin did not pass,
            // ascending, and the raw scores of all of them if they came.
            let (rejected, scores): (Rejected, Option<(usize, Vec<i64>)>) = match early {
                None => {
                    let statuses = batch
                        .filter_nodes(state, pod, nodes)
                        .await
                        .map_err(failure)?;
                    if statuses.len() != nodes.len() {
                        return Err(bad_count(statuses.len(), nodes.len()));
                    }
                    let rejected = statuses
                        .into_iter()
                        .enumerate()
                        .filter(|(_, s)| !s.is_success())
                        .collect();
                    (rejected, None)
                }
                Some(c) => {
                    let mut answer = c.call.await.map_err(failure)?;
                    if !answer.rejected.is_sorted_by_key(|(at, _)| *at) {
                        answer.rejected.sort_by_key(|(at, _)| *at);
                    }
                    if answer.nodes != ahead.sent {
                        return Err(bad_count(answer.nodes, ahead.sent));
                    }
                    // Nodes past the window sent: asked about now.
                    let beyond: Vec<usize> = (0..nodes.len())
                        .filter(|k| offsets[*k] >= ahead.sent)
                        .collect();
                    let rest = if beyond.is_empty() {
                        None
                    } else {
                        let listed: Vec<Arc<NodeInfo>> =
                            beyond.iter().map(|k| nodes[*k].clone()).collect();
                        let call = batch.start_filter_nodes(
                            state,
                            pod,
                            NodeWindow::of(&listed),
                            c.score_index.is_some(),
                        );
                        let rest = match call {
                            Some(call) => call.await.map_err(failure)?,
                            None => BatchFilterAnswer::from_statuses(
                                batch
                                    .filter_nodes(state, pod, &listed)
                                    .await
                                    .map_err(failure)?,
                            ),
                        };
                        if rest.nodes != listed.len() {
                            return Err(bad_count(rest.nodes, listed.len()));
                        }
                        let mut rest = rest;
                        rest.rejected.sort_by_key(|(at, _)| *at);
                        Some(rest)
                    };
                    // Offsets need not ascend (a window sent ahead may
                    // start before the cycle's, and wrap): each is looked
                    // up among the few rejections.
                    let mut rejected = Vec::new();
                    for (k, &o) in offsets.iter().enumerate() {
                        if o >= ahead.sent {
                            continue;
                        }
                        if let Ok(at) = answer.rejected.binary_search_by_key(&o, |(at, _)| *at) {
                            rejected.push((k, answer.rejected[at].1.clone()));
                        }
                    }
                    if let Some(r) = &rest {
                        for (j, s) in &r.rejected {
                            if let Some(k) = beyond.get(*j) {
                                rejected.push((*k, s.clone()));
                            }
                        }
                    }
                    rejected.sort_by_key(|(k, _)| *k);
                    let scores = c.score_index.and_then(|j| {
                        let head = answer.scores.as_ref()?;
                        let tail = match &rest {
                            None => None,
                            Some(r) => Some(r.scores.as_ref()?),
                        };
                        let mut next_beyond = 0;
                        let v = offsets
                            .iter()
                            .map(|&o| {
                                if o < ahead.sent {
                                    head.get(o).copied().unwrap_or(0)
                                } else {
                                    next_beyond += 1;
                                    tail.and_then(|t| t.get(next_beyond - 1).copied())
                                        .unwrap_or(0)
                                }
                            })
                            .collect();
                        Some((j, v))
                    });
                    (rejected, scores)
                }
            };
            if let Some(s) = scores {
                fused.push(s);
            }
            if rejected.is_empty() {
                // Every node passed: nothing to compact.
                continue;
            }
            let mut kept = 0;
            let mut rejected = rejected.into_iter().peekable();
            for k in 0..nodes.len() {
                if let Some((_, s)) = rejected.next_if(|(at, _)| *at == k) {
                    let s = failure(s);
                    if s.code() == Code::Error {
                        return Err(s);
                    }
                    reject(name, &nodes[k], s);
                    continue;
                }
                nodes.swap(kept, k);
                offsets.swap(kept, k);
                for (_, v) in &mut fused {
                    v.swap(kept, k);
                }
                kept += 1;
            }
            nodes.truncate(kept);
            offsets.truncate(kept);
            for (_, v) in &mut fused {
                v.truncate(kept);
            }
        }
        if !fused.is_empty() && !nodes.is_empty() {
            state.prefetched_scores = Some(Arc::new(PrefetchedScores {
                nodes: nodes.iter().map(|n| Arc::as_ptr(n) as usize).collect(),
                scores: fused,
            }));
        }
        Ok(())
    }

    /// The Score plugins and their weights, in order.
    pub fn score_weights(&self) -> Vec<(&'static str, i64)> {
        self.score
            .iter()
            .map(|e| (e.plugin.name(), e.weight))
            .collect()
    }

    fn filter_failure(&self, name: &'static str, s: Status) -> Status {
        if s.is_rejected() {
            s.with_plugin(name)
        } else {
            Status::error(format!("running {name:?} filter plugin: {}", s.message()))
                .with_plugin(name)
        }
    }

    /// What a batch Filter plugin's failing status becomes: a rejection
    /// (or any failure of a plugin that wraps its errors) as Filter
    /// failures are reported, anything else an error naming the plugin.
    fn batch_filter_failure(
        &self,
        name: &'static str,
        wraps: bool,
    ) -> impl Fn(Status) -> Status + Copy + '_ {
        move |s: Status| {
            if wraps || s.is_rejected() {
                self.filter_failure(name, s)
            } else {
                Status::error(s.message()).with_plugin(name)
            }
        }
    }

    /// Runs the Filter plugins on one node, taking into account pods
    /// nominated to it with at least the pod's priority: the node must fit
    /// the pod both with them (they will land there) and without them (they
    /// might not, and the pod must not rely on their absence... nor on
    /// their presence, for affinity).
    pub fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &NominatedPods,
    ) -> Status {
        let Some(candidates) = nominated.get(node.name()) else {
            return self.run_filter(state, pod, node);
        };
        let mut relevant = candidates
            .iter()
            .filter(|np| np.priority >= pod.priority && np.uid != pod.uid)
            .peekable();
        if relevant.peek().is_none() {
            return self.run_filter(state, pod, node);
        }
        let mut node_with = node.clone();
        let mut state_with = state.clone();
        for np in relevant {
            node_with.add_pod(np.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_with, pod, np, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter(&state_with, pod, &node_with);
        if !s.is_success() {
            return s;
        }
        self.run_filter(state, pod, node)
    }

    /// Runs PostFilter plugins (when no node fits).
    pub async fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let t = self.point_timer(state);
        let (r, s) = self
            .post_filter_plugins(state, pod, filtered)
            .instrument(point_span(Point::PostFilter))
            .await;
        self.point_done(Point::PostFilter, s.code(), t);
        if let (Some(_), Some(m)) = (t, self.metrics.get()) {
            m.global.preemption_attempts.inc();
            if let Some(r) = r.as_ref().filter(|_| s.is_success()) {
                m.global.preemption_victims.observe(r.victims.len() as u64);
            }
        }
        (r, s)
    }

    async fn post_filter_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let mut reasons = Vec::new();
        let mut rejector: Option<&'static str> = None;
        let mut last_result: Option<PostFilterResult> = None;
        for (i, p) in self.post_filter.iter().enumerate() {
            let t = self.plugin_timer(state);
            let (r, s) = p.post_filter(state, pod, filtered, self).await;
            self.plugin_done(Point::PostFilter, i, s.code(), t);
            if s.is_success() {
                return (r, s);
            }
            match s.code() {
                Code::UnschedulableAndUnresolvable => return (r, s.with_plugin(p.name())),
                Code::Unschedulable => {
                    reasons.extend(s.reasons().iter().cloned());
                    rejector.get_or_insert(p.name());
                    if let Some(r) = r.filter(|r| r.nominating_info != super::NominatingInfo::Noop)
                    {
                        last_result = Some(r);
                    }
                }
                _ => return (None, Status::error(s.message()).with_plugin(p.name())),
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        if let Some(p) = rejector {
            s = s.with_plugin(p);
        }
        (last_result, s)
    }

    /// Runs PreScore plugins on the feasible nodes.
    pub async fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        self.run_pre_score_recorded(state, pod, nodes, &mut |_, _| {})
            .await
    }

    /// [`Framework::run_pre_score`], also telling `record` each plugin's
    /// status (for explanations).
    pub async fn run_pre_score_recorded(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status) + Send),
    ) -> Status {
        let t = self.point_timer(state);
        let s = self
            .pre_score_plugins(state, pod, nodes, record)
            .instrument(point_span(Point::PreScore))
            .await;
        self.point_done(Point::PreScore, s.code(), t);
        s
    }

    async fn pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status) + Send),
    ) -> Status {
        for (i, entry) in self.pre_score.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = entry.plugin.pre_score(state, pod, nodes).await;
            self.plugin_done(Point::PreScore, i, s.code(), t);
            record(entry.plugin.name(), &s);
            if s.is_skip() {
                if let Some(i) = entry.score_index {
                    state.skip_score.insert(i);
                }
                continue;
            }
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!("running PreScore plugin {name:?}: {}", s.message()))
                    .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Scores the feasible nodes: every (non-skipped) Score plugin on every
    /// node, fanned out over nodes; then NormalizeScore per plugin; then the
    /// range check and the weighted sum.
    pub async fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ScoreResult, Status> {
        self.run_score_reusing(state, pod, nodes, &[], None).await
    }

    /// Like [`Framework::run_score`], but a node whose entry in `known` is
    /// `Some` takes those raw scores (one per Score plugin running this
    /// cycle, in order, as [`ScoreResult::raw`] lays them out) instead of
    /// running the per-node plugins; NormalizeScore and the weights run as
    /// always. `known` may be empty (nothing known).
    /// `names`, when given, are the nodes' names in the same order (read
    /// from the snapshot, so that nodes whose scores are `known` are not
    /// touched).
    pub async fn run_score_reusing(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        known: &[Option<&[i64]>],
        names: Option<&[&str]>,
    ) -> Result<ScoreResult, Status> {
        let t = self.point_timer(state);
        let r = self
            .score_plugins(state, pod, nodes, known, names)
            .instrument(point_span(Point::Score))
            .await;
        let code = r.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
        self.point_done(Point::Score, code, t);
        r
    }

    /// How many of the Filter plugins, from the first in the profile's
    /// order, are node-local for `pod` this cycle, skipped, or batch
    /// plugins (which do not run per node: they judge the nodes the others
    /// pass, afterwards): the position of the first that is none of these,
    /// or the number of Filter plugins. The per-node verdict of those
    /// plugins depends only on the pod and the node, so it can be kept for
    /// the next identical pod even when a later plugin's (spreading,
    /// inter-pod affinity) cannot.
    pub fn node_local_filter_prefix(&self, state: &CycleState, pod: &PodInfo) -> usize {
        self.filter
            .iter()
            .enumerate()
            .position(|(i, p)| {
                !(state.skip_filter.contains(i)
                    || self.batch_filter.contains(i)
                    || p.node_local(pod))
            })
            .unwrap_or(self.filter.len())
    }

    /// The Score plugins still running after PreScore that are node-local
    /// for `pod` (and not batch plugins): their raw score on a node depends
    /// only on the pod and the node, so it can be kept for the next
    /// identical pod while the others score again.
    pub fn score_plugins_node_local(&self, state: &CycleState, pod: &PodInfo) -> PluginMask {
        let mut mask = PluginMask::default();
        for (i, e) in self.score.iter().enumerate() {
            if !state.skip_score.contains(i)
                && e.plugin.as_batch().is_none()
                && e.plugin.node_local(pod)
            {
                mask.insert(i);
            }
        }
        mask
    }

    async fn score_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        known: &[Option<&[i64]>],
        given_names: Option<&[&str]>,
    ) -> Result<ScoreResult, Status> {
        let active: Vec<&ScoreEntry> = self
            .score
            .iter()
            .enumerate()
            .filter(|(i, _)| !state.skip_score.contains(*i))
            .map(|(_, e)| e)
            .collect();
        // Each active plugin's position among all Score plugins.
        let slot: Vec<usize> = (0..self.score.len())
            .filter(|i| !state.skip_score.contains(*i))
            .collect();
        let np = active.len();
        let n = nodes.len();
        let mut raw = vec![0i64; n * np];
        // Scores that came with the batch Filter calls, if they are for
        // exactly these nodes.
        let prefetched = state.prefetched_scores.as_ref().filter(|p| {
            p.nodes.len() == n
                && p.nodes
                    .iter()
                    .zip(nodes)
                    .all(|(a, b)| *a == Arc::as_ptr(b) as usize)
        });
        // Batch plugins first: one call each for all nodes, sent now (the
        // first poll puts a remote request on its way) and awaited after
        // the per-node plugins ran, so that the two overlap.
        type Scores = Result<Vec<i64>, Status>;
        type BatchScores<'f> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Scores> + Send + 'f>>;
        // (position, timer, the call, its answer if it came at once)
        type Started<'f> = (usize, Option<Instant>, BatchScores<'f>, Option<Scores>);
        let mut batches: Vec<Started<'_>> = Vec::new();
        for (pi, e) in active.iter().enumerate() {
            let Some(batch) = e.plugin.as_batch() else {
                continue;
            };
            let t = self.plugin_timer(state);
            let early = prefetched
                .and_then(|p| p.scores.iter().find(|(j, _)| *j == slot[pi]))
                .map(|(_, v)| v.clone());
            let mut f = match early {
                Some(v) => batch.score_prefetched(state, pod, nodes, v),
                None => batch.score_nodes(state, pod, nodes),
            };
            let done = (&mut f).now_or_never();
            batches.push((pi, t, f, done));
        }
        let per_node = active.iter().any(|e| e.plugin.as_batch().is_none());
        let failure: Mutex<Option<Status>> = Mutex::new(None);
        if per_node {
            let parallelizer = self.handle.parallelizer();
            // One chunk of `np` scores per node.
            let mut chunks: Vec<&mut [i64]> = raw.chunks_mut(np).collect();
            // A kept row (see `scheduler::batching`) holds every active
            // plugin's raw score from an identical pod's cycle; only the
            // node-local plugins' are still right.
            let local = if known.is_empty() {
                PluginMask::default()
            } else {
                self.score_plugins_node_local(state, pod)
            };
            parallelizer.for_each_mut_measured(&self.score_cost, &mut chunks, |ni, row| {
                let kept = match known.get(ni) {
                    Some(Some(scores)) if scores.len() == row.len() => {
                        row.copy_from_slice(scores);
                        if local.len() == np {
                            return;
                        }
                        true
                    }
                    _ => false,
                };
                for (pi, e) in active.iter().enumerate() {
                    if e.plugin.as_batch().is_some() || (kept && local.contains(slot[pi])) {
                        continue;
                    }
                    let t = self.per_node_timer(state);
                    let r = e.plugin.score(state, pod, &nodes[ni]);
                    let code = r.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
                    self.plugin_done(Point::Score, slot[pi], code, t);
                    match r {
                        Ok(v) => row[pi] = v,
                        Err(s) => {
                            let mut f = failure.lock();
                            if f.is_none() {
                                *f = Some(Status::error(format!(
                                    "running Score plugins: plugin {:?} failed with: {}",
                                    e.plugin.name(),
                                    s.message()
                                )));
                            }
                            return;
                        }
                    }
                }
            });
        }
        for (pi, t, f, done) in batches {
            let e = active[pi];
            let name = e.plugin.name();
            let scores = match done {
                Some(r) => r,
                None => f.await,
            };
            let code = scores.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
            self.plugin_done(Point::Score, slot[pi], code, t);
            let scores = scores.map_err(|s| {
                Status::error(format!(
                    "running Score plugins: plugin {name:?} failed with: {}",
                    s.message()
                ))
            })?;
            if scores.len() != n {
                return Err(Status::error(format!(
                    "running Score plugins: plugin {name:?} returned {} scores for {n} nodes",
                    scores.len()
                )));
            }
            for (ni, v) in scores.into_iter().enumerate() {
                raw[ni * np + pi] = v;
            }
        }
        if let Some(s) = failure.into_inner() {
            return Err(s);
        }
        let mut normalized = raw.clone();
        // The nodes' names, read once for all the plugins that normalize.
        let given_names = given_names.filter(|g| g.len() == n);
        let mut names: Option<Vec<&str>> = None;
        for (pi, e) in active.iter().enumerate() {
            let Some(ext) = e.plugin.score_extensions() else {
                continue;
            };
            let names: &[&str] = match given_names {
                Some(g) => g,
                None => names.get_or_insert_with(|| nodes.iter().map(|n| n.name()).collect()),
            };
            let mut scores: Vec<NodeScore<'_>> = names
                .iter()
                .enumerate()
                .map(|(ni, &name)| NodeScore {
                    name,
                    score: normalized[ni * np + pi],
                })
                .collect();
            let t = self.plugin_timer(state);
            let s = ext.normalize_score(state, pod, &mut scores);
            self.plugin_done(Point::ScoreExtensionNormalize, slot[pi], s.code(), t);
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    e.plugin.name(),
                    s.message()
                )));
            }
            for (ni, sc) in scores.iter().enumerate() {
                normalized[ni * np + pi] = sc.score;
            }
        }
        let mut totals = vec![0i64; n];
        for (ni, total) in totals.iter_mut().enumerate() {
            for (pi, e) in active.iter().enumerate() {
                let v = normalized[ni * np + pi];
                if !e.checked {
                    *total = total.saturating_add(v.saturating_mul(e.weight));
                    continue;
                }
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&v) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {v}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.plugin.name()
                    )));
                }
                *total += v * e.weight;
            }
        }
        Ok(ScoreResult {
            plugins: active.iter().map(|e| e.plugin.name()).collect(),
            weights: active.iter().map(|e| e.weight).collect(),
            raw,
            normalized,
            totals,
        })
    }

    /// Runs Reserve plugins until one fails.
    pub async fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .reserve_plugins(state, pod, node)
            .instrument(point_span(Point::Reserve))
            .await;
        self.point_done(Point::Reserve, s.code(), t);
        s
    }

    async fn reserve_plugins(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for (i, p) in self.reserve.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.reserve(state, pod, node).await;
            self.plugin_done(Point::Reserve, i, s.code(), t);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!(
                    "running Reserve plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Unreserve on every Reserve plugin, in reverse order.
    pub async fn run_unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        let t = self.point_timer(state);
        async {
            for (i, p) in self.reserve.iter().enumerate().rev() {
                let t = self.plugin_timer(state);
                p.unreserve(state, pod, node).await;
                self.plugin_done(Point::Unreserve, i, Code::Success, t);
            }
        }
        .instrument(point_span(Point::Unreserve))
        .await;
        self.point_done(Point::Unreserve, Code::Success, t);
    }

    /// Runs Permit plugins. A rejection returns at once; if some plugins
    /// asked to wait, the pod is parked among the waiting pods and `Wait` is
    /// returned.
    pub async fn run_permit(&self, state: &CycleState, pod: &PodRef, node: &Arc<str>) -> Status {
        let t = self.point_timer(state);
        let s = self
            .permit_plugins(state, pod, node)
            .instrument(point_span(Point::Permit))
            .await;
        self.point_done(Point::Permit, s.code(), t);
        s
    }

    async fn permit_plugins(&self, state: &CycleState, pod: &PodRef, node: &Arc<str>) -> Status {
        let mut waits: Vec<(&'static str, Duration)> = Vec::new();
        for (i, p) in self.permit.iter().enumerate() {
            let t = self.plugin_timer(state);
            let (s, timeout) = p.permit(state, pod, node).await;
            self.plugin_done(Point::Permit, i, s.code(), t);
            if s.is_success() {
                continue;
            }
            if s.is_rejected() {
                return s.with_plugin(p.name());
            }
            if s.is_wait() {
                waits.push((p.name(), timeout.min(MAX_PERMIT_TIMEOUT)));
                continue;
            }
            return Status::error(format!(
                "running Permit plugin {:?}: {}",
                p.name(),
                s.message()
            ))
            .with_plugin(p.name());
        }
        if waits.is_empty() {
            return Status::success();
        }
        self.handle
            .waiting_pods()
            .add(pod.clone(), node.clone(), waits);
        Status::new(
            Code::Wait,
            format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                &*pod.name
            ),
        )
    }

    /// Waits until a pod parked at Permit is allowed or rejected (success at
    /// once if it is not waiting).
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let s = self.handle.waiting_pods().wait(&pod.uid).await;
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let plugin = s.plugin();
        let mut e = Status::error(format!("waiting on permit for pod: {}", s.message()));
        if let Some(p) = plugin {
            e = e.with_plugin(p);
        }
        e
    }

    /// Asks every PreBind plugin whether it has work for `pod` on `node`:
    /// `Success` if any has, `Skip` if none has (or there are none), the
    /// first error otherwise. A rejection is an error here, as upstream's
    /// RunPreBindPreFlights treats it.
    pub fn run_pre_bind_pre_flights(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Status {
        let mut out = Status::skip();
        for p in &self.pre_bind {
            let s = p.pre_bind_pre_flight(state, pod, node);
            if s.is_skip() {
                continue;
            }
            if !s.is_success() {
                return Status::error(format!(
                    "running PreBindPreFlight {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
            out = Status::success();
        }
        out
    }

    /// Whether `pod` waits at Permit (upstream's WillWaitOnPermit).
    pub fn will_wait_on_permit(&self, pod: &PodInfo) -> bool {
        self.handle.waiting_pods().get(&pod.uid).is_some()
    }

    /// Runs PreBind plugins until one fails.
    pub async fn run_pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .pre_bind_plugins(state, pod, node)
            .instrument(point_span(Point::PreBind))
            .await;
        self.point_done(Point::PreBind, s.code(), t);
        s
    }

    async fn pre_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for (i, p) in self.pre_bind.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.pre_bind(state, pod, node).await;
            self.plugin_done(Point::PreBind, i, s.code(), t);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!(
                    "running PreBind plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Bind plugins in order until one does not `Skip`. If all skip, the
    /// last `Skip` is returned (the pod is not bound).
    pub async fn run_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .bind_plugins(state, pod, node)
            .instrument(point_span(Point::Bind))
            .await;
        self.point_done(Point::Bind, s.code(), t);
        s
    }

    async fn bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let mut last = Status::skip();
        for (i, p) in self.bind.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.bind(state, pod, node).await;
            self.plugin_done(Point::Bind, i, s.code(), t);
            if s.is_skip() {
                last = s.with_plugin(p.name());
                continue;
            }
            if s.is_success() {
                return s;
            }
            if s.is_rejected() {
                return s.with_plugin(p.name());
            }
            if !p.wraps_errors() {
                return Status::error(s.message()).with_plugin(p.name());
            }
            return Status::error(format!(
                "running Bind plugin {:?}: {}",
                p.name(),
                s.message()
            ))
            .with_plugin(p.name());
        }
        last
    }

    /// Runs PostBind plugins (informational).
    pub async fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        let t = self.point_timer(state);
        async {
            for (i, p) in self.post_bind.iter().enumerate() {
                let t = self.plugin_timer(state);
                p.post_bind(state, pod, node).await;
                self.plugin_done(Point::PostBind, i, Code::Success, t);
            }
        }
        .instrument(point_span(Point::PostBind))
        .await;
        self.point_done(Point::PostBind, Code::Success, t);
    }
}

/// In cycles sampled for plugin metrics, one per-node plugin run in this
/// many (per thread) is timed.
pub const PER_NODE_SAMPLE_EVERY: u32 = 16;

thread_local! {
    static PER_NODE_TICK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The extension point whose plugin list a metrics point runs.
fn metric_point_plugins(p: Point) -> ExtensionPoint {
    match p {
        Point::PreFilter | Point::PreFilterExtensionAddPod | Point::PreFilterExtensionRemovePod => {
            ExtensionPoint::PreFilter
        }
        Point::Filter => ExtensionPoint::Filter,
        Point::PostFilter => ExtensionPoint::PostFilter,
        Point::PreScore => ExtensionPoint::PreScore,
        Point::Score | Point::ScoreExtensionNormalize => ExtensionPoint::Score,
        Point::PreBind => ExtensionPoint::PreBind,
        Point::Bind => ExtensionPoint::Bind,
        Point::PostBind => ExtensionPoint::PostBind,
        Point::Reserve | Point::Unreserve => ExtensionPoint::Reserve,
        Point::Permit => ExtensionPoint::Permit,
    }
}

/// A span for one extension point's run: DEBUG, under the `berth::trace`
/// target, so that it costs one disabled-callsite check unless a tracing
/// exporter asks for extension points.
#[inline]
fn point_span(p: Point) -> tracing::Span {
    tracing::debug_span!(target: super::TRACE_TARGET, "extension_point", extension_point = p.label())
}

/// Adds a Score weight to the running total of weight × 100, failing when
/// the total could overflow an i64.
fn check_weight(total: i64, weight: i64) -> Result<i64, String> {
    match weight.checked_mul(MAX_NODE_SCORE) {
        Some(w) if w <= MAX_TOTAL_SCORE - total => Ok(total + w),
        _ => Err("total score of Score plugins could overflow".into()),
    }
}

/// Formats names as Go prints a string slice: `[A B]`.
fn go_list<'a>(names: impl IntoIterator<Item = &'a &'static str>) -> String {
    let v: Vec<&str> = names.into_iter().copied().collect();
    format!("[{}]", v.join(" "))
}

mod explain;
#[cfg(test)]
mod tests;
