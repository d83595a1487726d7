//! One trait per extension point of the Scheduling Framework.
//!
//! A plugin is one value implementing [`Plugin`] and the extension-point
//! traits it serves; [`Plugin`]'s `as_*` methods expose those (use the
//! [`extension_points!`](crate::extension_points) macro). The framework
//! never asks whether a plugin is native or remote.
//!
//! Which points run where:
//! * scheduling cycle (serial, one pod at a time): PreFilter, Filter (fanned
//!   out over nodes on the CPU pool), PostFilter, PreScore, Score and
//!   NormalizeScore (fanned out), Reserve, Permit;
//! * binding cycle (concurrent tasks): waiting at Permit, PreBind, Bind,
//!   PostBind;
//! * Unreserve: from whichever side failed after Reserve;
//! * QueueSort and PreEnqueue: from the queue, outside any cycle;
//! * group cycle (a PodGroup's pods, `GenericWorkload` on): PlacementFeasible
//!   before the first pod and after each; PodGroupPostFilter once when the
//!   group does not fit; GroupPermit (berth's) once when it does, before its
//!   pods' own Reserve and Permit.
//!
//! Points a remote plugin may serve over the network are `async`; Filter
//! and Score, called once per node on the CPU pool, are not. A plugin whose
//! verdicts come from elsewhere (a remote extender) judges all nodes at
//! once instead, through [`BatchFilter`] and [`BatchScore`]: one call per
//! cycle, not one round trip per node.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::batch_call::BatchFilterCall;
use super::cycle_state::CycleState;
use super::events::ClusterEventWithHint;
use super::handle::NominatedPods;
use super::status::Status;
use super::types::{
    GroupAttempt, NodeScore, NodeToStatus, PlacedPod, PlacementProgress, PodGroupCycleInfo,
    PodGroupPostFilterResult, PostFilterResult, PreFilterResult, ProposedAssignment, QueuedEntity,
    QueuedPodInfo,
};
use crate::cache::NodeInfo;
use crate::cache::Snapshot;
use crate::model::PodInfo;
use crate::model::PodRef;

/// Every plugin: a name and the extension points it serves.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's name, as configured (e.g. `NodeResourcesFit`).
    fn name(&self) -> &'static str;

    /// Whether this plugin's Filter verdict and Score for `pod` on a node
    /// depend only on the pod's scheduling signature (its requests, host
    /// ports, tolerations, node selector and affinity, images and
    /// `nodeName`), the node's `NodeInfo`, the plugin's args and the
    /// snapshot's image counts. Then a pod with the same signature gets the
    /// same answer on a node that did not change, and the scheduler reuses
    /// it (batching identical pods). A plugin that reads anything else
    /// (other nodes, other objects, another process) keeps the default.
    fn node_local(&self, _pod: &PodInfo) -> bool {
        false
    }

    /// The plugin as a QueueSort plugin.
    fn as_queue_sort(self: Arc<Self>) -> Option<Arc<dyn QueueSortPlugin>> {
        None
    }
    /// The plugin as a PreEnqueue plugin.
    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        None
    }
    /// The plugin as a PreFilter plugin.
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        None
    }
    /// The plugin as a Filter plugin.
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        None
    }
    /// The plugin as a PostFilter plugin.
    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        None
    }
    /// The plugin as a PreScore plugin.
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        None
    }
    /// The plugin as a Score plugin.
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        None
    }
    /// The plugin as a Reserve plugin.
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        None
    }
    /// The plugin as a Permit plugin.
    fn as_permit(self: Arc<Self>) -> Option<Arc<dyn PermitPlugin>> {
        None
    }
    /// The plugin as a PreBind plugin.
    fn as_pre_bind(self: Arc<Self>) -> Option<Arc<dyn PreBindPlugin>> {
        None
    }
    /// The plugin as a Bind plugin.
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        None
    }
    /// The plugin as a PostBind plugin.
    fn as_post_bind(self: Arc<Self>) -> Option<Arc<dyn PostBindPlugin>> {
        None
    }
    /// The plugin as a PlacementFeasible plugin (group cycles).
    fn as_placement_feasible(self: Arc<Self>) -> Option<Arc<dyn PlacementFeasiblePlugin>> {
        None
    }
    /// The plugin as a PodGroupPostFilter plugin (group cycles).
    fn as_pod_group_post_filter(self: Arc<Self>) -> Option<Arc<dyn PodGroupPostFilterPlugin>> {
        None
    }
    /// The plugin as a GroupPermit plugin (group cycles; berth's point).
    fn as_group_permit(self: Arc<Self>) -> Option<Arc<dyn GroupPermitPlugin>> {
        None
    }

    /// Whether the framework prefixes this plugin's errors with its own
    /// words (`running "X" filter plugin: ...`), as upstream does for
    /// plugins. Upstream's HTTP extenders are not plugins there and their
    /// errors reach the pod as the extender worded them; berth runs them as
    /// plugins that answer `false`, for their batch Filter and Bind errors.
    fn wraps_errors(&self) -> bool {
        true
    }

    /// The cluster events that may make a pod this plugin rejected
    /// schedulable, with hints. `None` (the default) means the plugin does
    /// not say, and every event is assumed to matter; `Some(vec![])` means
    /// no event does (only the periodic flush moves the pod).
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        None
    }
}

/// Orders the active queue. Exactly one per profile, the same in all.
/// The queue holds entities: pods, and (with `GenericWorkload`) PodGroups
/// whose pods are scheduled together.
pub trait QueueSortPlugin: Plugin {
    /// Whether `a` should be popped before `b`.
    fn less(&self, a: QueuedEntity<'_>, b: QueuedEntity<'_>) -> bool;

    /// [`QueueSortPlugin::less`] for two pods.
    fn less_pods(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        self.less(QueuedEntity::Pod(a), QueuedEntity::Pod(b))
    }
}

/// Holds pods out of the active queue until they are ready (scheduling
/// gates). Not success: the pod waits among the unschedulable pods.
pub trait PreEnqueuePlugin: Plugin {
    /// Whether `pod` may enter the active queue.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Pre-processes the pod once per cycle, may narrow the candidate nodes or
/// reject the pod outright.
#[async_trait]
pub trait PreFilterPlugin: Plugin {
    /// Runs once per cycle. `nodes` are all nodes of the snapshot. `Skip`
    /// means this plugin's Filter (and AddPod/RemovePod) need not run.
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status);

    /// Incremental updates of the PreFilter state, if the plugin keeps one
    /// that depends on other pods.
    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }
}

/// Keeps a PreFilter state consistent when pods are added to or removed from
/// a node in a what-if evaluation (nominated pods, preemption victims). May
/// be called on cloned states, several times before a Filter.
pub trait PreFilterExtensions: Send + Sync {
    /// `pod_to_add` would run on `node`.
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
    /// `pod_to_remove` would no longer run on `node`.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
}

/// Decides whether the pod can run on one node. Called concurrently across
/// nodes; must not block.
pub trait FilterPlugin: Plugin {
    /// The verdict for `node`.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Plugins that judge nodes in batches return themselves here. The
    /// runtime then never calls [`FilterPlugin::filter`] on them: it calls
    /// [`BatchFilter::filter_nodes`] once per cycle, after every per-node
    /// plugin, with the nodes that passed those (as kube-scheduler does with
    /// its extenders). Preemption's what-if asks them too, once per
    /// attempt with every candidate ([`BatchFilter::filter_preemption`]).
    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        None
    }

    /// Dry runs only: what the plugin can tell about `node` beyond its
    /// status, on a node it `rejected` (why) or on the node the pod would
    /// go to (what it would get there). Never called by the scheduler.
    fn explain(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _rejected: bool,
    ) -> Vec<NodeDetail> {
        Vec::new()
    }
}

/// A Filter plugin's detail about one node in a dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDetail {
    /// Something the node cannot give the pod: one request of one claim,
    /// or, with both empty, something about the node's devices as a whole.
    Unsatisfied {
        /// `namespace/name` of the claim.
        claim: String,
        /// The request (`request/subrequest` for a firstAvailable one).
        request: String,
        /// Why.
        reason: String,
    },
    /// A device the pod would be allocated on the node.
    Device {
        /// `namespace/name` of the claim.
        claim: String,
        /// The request it would satisfy.
        request: String,
        /// Its driver.
        driver: String,
        /// Its pool.
        pool: String,
        /// Its name.
        device: String,
    },
}

/// Filter over a whole list of nodes at once.
#[async_trait]
pub trait BatchFilter: Send + Sync {
    /// One status per node of `nodes`, in order; `Err` fails the call as a
    /// whole (the scheduling attempt fails with that error).
    async fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, Status>;

    /// Starts judging `nodes` now, without waiting for the verdicts, and
    /// with `score` asks for the nodes' raw scores in the same call (for
    /// [`BatchScore::score_prefetched`]). The framework sends this with the
    /// cycle's sampled candidates before the per-node plugins run, awaits it
    /// after them, and uses only the verdicts of the nodes those plugins
    /// kept, so the outcome is that of [`BatchFilter::filter_nodes`] on
    /// them; the call must therefore judge each node on its own. `None`
    /// (the default): the plugin is only asked through `filter_nodes`.
    fn start_filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: NodeWindow<'_>,
        score: bool,
    ) -> Option<BatchFilterCall> {
        let _ = (state, pod, nodes, score);
        None
    }

    /// Whether [`BatchFilter::start_filter_nodes`] may be sent for the next
    /// pod in the queue while the current pod's cycle still waits for its
    /// own verdicts (the scheduler's look-ahead): the call then leaves
    /// before that pod's cycle starts, with the candidates its sampling
    /// will take if the node list does not change, and is dropped if
    /// another pod or another window comes. Only for plugins whose answers
    /// do not depend on the earlier pod's cycle (what Reserve, Permit or
    /// PostFilter would tell them). `false` (the default): never sent ahead
    /// of its cycle.
    fn looks_ahead(&self) -> bool {
        false
    }

    /// Preemption's what-if: one verdict per candidate of `candidates`, in
    /// order (see [`PreemptionCandidate`], [`PreemptionVerdict`]); `Err`
    /// when the plugin cannot judge any (it then fails as a whole: every
    /// candidate is refused with that status). `known` gives the verdicts
    /// this plugin gave earlier in the same cycle, where there are some.
    /// The default asks [`BatchFilter::filter_nodes`] about the candidate
    /// nodes as they are, victims still there: a node it rejects is no
    /// candidate, a node it passes needs nothing more evicted. For a plugin
    /// whose verdicts depend on the pods that can only refuse a candidate
    /// it would accept once the victims are gone, never accept one it would
    /// refuse.
    async fn filter_preemption(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        candidates: &[PreemptionCandidate<'_>],
        known: &KnownVerdicts<'_>,
    ) -> Result<Vec<PreemptionVerdict>, Status> {
        let _ = known;
        let nodes: Vec<Arc<NodeInfo>> = candidates.iter().map(|c| c.node.clone()).collect();
        let statuses = self.filter_nodes(state, pod, &nodes).await?;
        Ok(statuses
            .into_iter()
            .map(|s| {
                if s.is_success() {
                    PreemptionVerdict::Needs(Vec::new())
                } else {
                    PreemptionVerdict::Rejected(s)
                }
            })
            .collect())
    }

    /// Whether [`BatchFilter::filter_preemption`] reads the verdicts this
    /// plugin gave earlier in the cycle ([`KnownVerdicts`]): its calls the
    /// cycle did not need are then kept for preemption to read instead of
    /// being cancelled. Default: `false`.
    fn reuses_cycle_verdicts(&self) -> bool {
        false
    }

    /// Whether preemption's what-if asks this plugin at all (the default).
    /// kube-scheduler's HTTP extenders say no: their `preemptVerb` is their
    /// say in preemption, as upstream.
    fn judges_preemption(&self) -> bool {
        true
    }
}

/// A candidate node of preemption's what-if, as a batch Filter plugin is
/// asked about it ([`BatchFilter::filter_preemption`]).
#[derive(Debug, Clone, Copy)]
pub struct PreemptionCandidate<'a> {
    /// The node as it is (every pod still on it).
    pub node: &'a Arc<NodeInfo>,
    /// Every pod preemption may evict for it, the most important first
    /// (the order victims are reprieved in): the node's pods of lower
    /// priority than the preemptor and, for a PodGroup evicted whole, its
    /// pods on other nodes. Never empty.
    pub pods: &'a [PodRef],
    /// Per pod of `pods`: whether the profile's per-node Filter plugins
    /// need it evicted (the victims they chose).
    pub victims: &'a [bool],
}

/// A batch Filter plugin's verdict on a preemption candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreemptionVerdict {
    /// The pod fits once the victims are gone (and with more of the pods
    /// gone).
    Victims,
    /// The pod fits once these pods are gone (positions in
    /// [`PreemptionCandidate::pods`], ascending; empty: none), and with any
    /// more of them gone.
    Needs(Vec<usize>),
    /// The pod does not fit even with every pod gone; or, with a
    /// `Code::Error` status, the plugin could not judge the node. Either
    /// way the node is no candidate.
    Rejected(Status),
}

/// What a batch Filter plugin answered about nodes earlier in the same
/// cycle, for [`BatchFilter::filter_preemption`] to reuse (a plugin whose
/// verdicts do not depend on the pods on a node).
pub struct KnownVerdicts<'a> {
    pub(super) plugin: &'static str,
    pub(super) filtered: Option<&'a NodeToStatus>,
    pub(super) window: Option<&'a super::cycle_state::WindowVerdicts>,
    pub(super) snapshot: Option<&'a Snapshot>,
}

impl KnownVerdicts<'_> {
    /// None known.
    pub fn none() -> KnownVerdicts<'static> {
        KnownVerdicts {
            plugin: "",
            filtered: None,
            window: None,
            snapshot: None,
        }
    }

    /// The plugin's verdict on `node` in this cycle, if it gave one: a
    /// rejection the cycle recorded for the node in its name, or its answer
    /// about the candidates it was sent at Filter.
    pub fn get(&self, node: &NodeInfo) -> Option<Status> {
        if let Some(s) = self
            .filtered
            .and_then(|f| f.recorded(node.name()))
            .filter(|s| !self.plugin.is_empty() && s.plugin() == Some(self.plugin))
        {
            return Some(s.clone());
        }
        let (w, snapshot) = (self.window?, self.snapshot?);
        if w.nodes != snapshot.num_nodes() || w.nodes == 0 {
            return None;
        }
        let pos = snapshot.position(node.name())?;
        let offset = (pos + w.nodes - w.start % w.nodes) % w.nodes;
        if offset >= w.len {
            return None;
        }
        Some(
            match w.rejected.binary_search_by_key(&offset, |(at, _)| *at) {
                Ok(i) => w.rejected[i].1.clone(),
                Err(_) => Status::success(),
            },
        )
    }
}

/// Nodes in the order a cycle evaluates them: a rotation of the node list,
/// as two slices.
#[derive(Debug, Clone, Copy)]
pub struct NodeWindow<'a> {
    /// From the cycle's start index to the end of the list.
    pub head: &'a [Arc<NodeInfo>],
    /// From the start of the list.
    pub tail: &'a [Arc<NodeInfo>],
}

impl<'a> NodeWindow<'a> {
    /// The first `len` nodes of `nodes` taken from `start` on, wrapping.
    pub fn rotated(nodes: &'a [Arc<NodeInfo>], start: usize, len: usize) -> Self {
        let start = if nodes.is_empty() {
            0
        } else {
            start % nodes.len()
        };
        let len = len.min(nodes.len());
        let head = &nodes[start..(start + len).min(nodes.len())];
        let tail = &nodes[..len - head.len()];
        Self { head, tail }
    }

    /// A window over `nodes`, in their order.
    pub fn of(nodes: &'a [Arc<NodeInfo>]) -> Self {
        Self {
            head: nodes,
            tail: &[],
        }
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The nodes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a Arc<NodeInfo>> + 'a {
        self.head.iter().chain(self.tail.iter())
    }
}

/// Score over a whole list of nodes at once.
#[async_trait]
pub trait BatchScore: Send + Sync {
    /// One score per node of `nodes`, in order (in [0, 100] unless the
    /// plugin normalizes); `Err` fails the scheduling attempt.
    async fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status>;

    /// What [`BatchScore::score_nodes`] would answer for `nodes`, given the
    /// raw scores its Filter call already brought (one per node of
    /// `nodes`, see [`BatchFilter::start_filter_nodes`]): only what is left
    /// to do (normalizing, checking the range). The default asks again.
    async fn score_prefetched(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        raw: Vec<i64>,
    ) -> Result<Vec<i64>, Status> {
        let _ = raw;
        self.score_nodes(state, pod, nodes).await
    }
}

/// What a PostFilter plugin runs through the profile of its cycle: the
/// profile's Filter plugins (and PreFilter's AddPod and RemovePod) on
/// what-if node states, as upstream's plugins do through their framework
/// handle. The framework running the cycle is the one implementation; the
/// plugin API depends on this, not on the framework.
#[async_trait]
pub trait ProfileFilters: Send + Sync {
    /// The profile's scheduler name.
    fn profile_name(&self) -> &Arc<str>;

    /// Runs AddPod of every PreFilter plugin with extensions (not skipped).
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status;

    /// Runs RemovePod of every PreFilter plugin with extensions (not
    /// skipped).
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status;

    /// Runs the Filter plugins on one node, taking into account the pods
    /// nominated to it with at least the pod's priority.
    fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &NominatedPods,
    ) -> Status;

    /// Whether preemption's what-if asks a batch Filter plugin.
    fn has_preemption_batch_filters(&self) -> bool;

    /// Preemption's what-if on the batch Filter plugins (remote
    /// extenders), each asked once about the candidates the ones before it
    /// kept.
    async fn run_batch_filters_preemption(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        candidates: &[PreemptionCandidate<'_>],
        filtered: &NodeToStatus,
    ) -> Vec<PreemptionVerdict>;
}

/// Runs when no node fits (preemption).
#[async_trait]
pub trait PostFilterPlugin: Plugin {
    /// Tries to make the pod schedulable; `filtered` says why each node
    /// failed. `profile` is the framework running the cycle, through which
    /// the plugin re-runs the profile's filters on what-if node states (as
    /// upstream plugins do through their framework handle).
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        profile: &dyn ProfileFilters,
    ) -> (Option<PostFilterResult>, Status);
}

/// Informational, before scoring, with the feasible nodes.
#[async_trait]
pub trait PreScorePlugin: Plugin {
    /// `Skip` means this plugin's Score need not run.
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Status;
}

/// Ranks feasible nodes. Called concurrently across nodes.
pub trait ScorePlugin: Plugin {
    /// The score of `node`; in [0, 100] unless the plugin normalizes.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Normalization of this plugin's scores over all nodes, if any.
    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        None
    }

    /// Plugins that score nodes in batches return themselves here. The
    /// runtime then never calls [`ScorePlugin::score`] on them: it calls
    /// [`BatchScore::score_nodes`] once per cycle, after PreScore, with the
    /// nodes to score; normalization and weights apply as usual.
    fn as_batch(&self) -> Option<&dyn BatchScore> {
        None
    }
}

/// Rescales one plugin's scores after all nodes are scored.
pub trait ScoreExtensions: Send + Sync {
    /// Rewrites `scores` in place; results must land in [0, 100].
    fn normalize_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        scores: &mut [NodeScore<'_>],
    ) -> Status;
}

/// Claims resources for the pod on the chosen node before binding, and
/// releases them if anything later fails.
#[async_trait]
pub trait ReservePlugin: Plugin {
    /// Reserves; a failure aborts the cycle and runs every Unreserve.
    async fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Releases; must be idempotent and must not fail. Runs for every Reserve
    /// plugin, in reverse order, even those whose Reserve did not run.
    async fn unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// Approves, denies or delays the binding.
#[async_trait]
pub trait PermitPlugin: Plugin {
    /// `Success`, a rejection, or `Wait` with how long to wait (capped at
    /// 15 minutes); a waiting pod is allowed or rejected through the
    /// handle's waiting pods.
    async fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Work before binding (e.g. provisioning volumes).
#[async_trait]
pub trait PreBindPlugin: Plugin {
    /// Whether PreBind will have work to do for `pod` on `node`
    /// (upstream's PreBindPreFlight): `Success` if it will, `Skip` if not;
    /// an error fails the binding cycle. When any PreBind plugin has work
    /// (volumes to bind, claims to allocate), the scheduler first sets the
    /// pod's `nominatedNodeName`, so that other components see where it
    /// is about to land while PreBind takes its time. A plugin that cannot
    /// tell answers `Success`.
    fn pre_bind_pre_flight(&self, _state: &CycleState, _pod: &PodInfo, _node: &str) -> Status {
        Status::success()
    }

    /// A failure runs Unreserve and requeues the pod.
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Binds the pod. Tried in order until one does not return `Skip`.
#[async_trait]
pub trait BindPlugin: Plugin {
    /// `Skip` if this plugin does not bind this pod.
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Informational, after a successful bind.
#[async_trait]
pub trait PostBindPlugin: Plugin {
    /// Called once the pod is bound.
    async fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// Judges a PodGroup's placement as its group cycle goes (upstream's
/// internal PlacementFeasible point; GangScheduling's `minCount`): called
/// before the first pod is evaluated and after each.
#[async_trait]
pub trait PlacementFeasiblePlugin: Plugin {
    /// `Success`: the group's constraints are met (the cycle may succeed);
    /// `Wait`: not yet, but still possible (go on); `Unschedulable`: they
    /// can no longer be met (the cycle stops); `Error`. `state` is the
    /// group cycle's (one per cycle, its token naming the cycle); `placed`
    /// are the pods this cycle placed so far, in order.
    async fn placement_feasible(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        progress: PlacementProgress,
        placed: &[PlacedPod],
    ) -> Status;
}

/// Re-runs a PodGroup's algorithm on a changed snapshot, for
/// PodGroupPostFilter plugins (upstream's PodGroupSchedulingFunc).
#[async_trait]
pub trait PodGroupSchedulingFunc: Send + Sync {
    /// The group cycle's snapshot: plugins change a copy of it.
    fn snapshot(&self) -> &Arc<Snapshot>;

    /// The group's algorithm on `snapshot`, each pod with a fresh cycle
    /// state: the pods it placed and the group's status. Nothing stays
    /// assumed afterwards.
    async fn schedule(&self, snapshot: Arc<Snapshot>) -> (Vec<ProposedAssignment>, Status);
}

/// Runs when a PodGroup's cycle ends `Unschedulable` (workload-aware
/// preemption).
#[async_trait]
pub trait PodGroupPostFilterPlugin: Plugin {
    /// Tries to make the group schedulable. `Success`: it can be (the
    /// result nominates its pods; stops); `UnschedulableAndUnresolvable`:
    /// stops; `Unschedulable`: the next plugin tries; `Error`. `attempt`
    /// is what the cycle found, `profile` the framework running the cycle
    /// (to re-run Filter on what-if node states), `schedule` re-runs the
    /// group's algorithm.
    async fn pod_group_post_filter(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        attempt: &GroupAttempt,
        schedule: &dyn PodGroupSchedulingFunc,
        profile: &dyn ProfileFilters,
    ) -> (Option<PodGroupPostFilterResult>, Status);
}

/// berth's group-level Permit: approves or rejects a PodGroup's placement
/// as a whole, once its cycle found one and before its pods are assumed
/// (where each pod's own Permit runs). Upstream has no such point; it lets
/// an extender see the whole gang at once.
#[async_trait]
pub trait GroupPermitPlugin: Plugin {
    /// `Success` lets the placement go on; a rejection fails the group
    /// (`Unschedulable`: as not fitting; `Error`).
    async fn permit_group(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        placement: &[ProposedAssignment],
    ) -> Status;
}

/// Implements [`Plugin`]'s `as_*` methods for the listed extension points:
/// `extension_points!(pre_filter, filter, score);` inside `impl Plugin`.
#[macro_export]
macro_rules! extension_points {
    ($($point:ident),* $(,)?) => { $( $crate::extension_points!(@one $point); )* };
    (@one queue_sort) => { $crate::extension_points!(@fn as_queue_sort, QueueSortPlugin); };
    (@one pre_enqueue) => { $crate::extension_points!(@fn as_pre_enqueue, PreEnqueuePlugin); };
    (@one pre_filter) => { $crate::extension_points!(@fn as_pre_filter, PreFilterPlugin); };
    (@one filter) => { $crate::extension_points!(@fn as_filter, FilterPlugin); };
    (@one post_filter) => { $crate::extension_points!(@fn as_post_filter, PostFilterPlugin); };
    (@one pre_score) => { $crate::extension_points!(@fn as_pre_score, PreScorePlugin); };
    (@one score) => { $crate::extension_points!(@fn as_score, ScorePlugin); };
    (@one reserve) => { $crate::extension_points!(@fn as_reserve, ReservePlugin); };
    (@one permit) => { $crate::extension_points!(@fn as_permit, PermitPlugin); };
    (@one pre_bind) => { $crate::extension_points!(@fn as_pre_bind, PreBindPlugin); };
    (@one bind) => { $crate::extension_points!(@fn as_bind, BindPlugin); };
    (@one post_bind) => { $crate::extension_points!(@fn as_post_bind, PostBindPlugin); };
    (@one placement_feasible) => { $crate::extension_points!(@fn as_placement_feasible, PlacementFeasiblePlugin); };
    (@one pod_group_post_filter) => { $crate::extension_points!(@fn as_pod_group_post_filter, PodGroupPostFilterPlugin); };
    (@one group_permit) => { $crate::extension_points!(@fn as_group_permit, GroupPermitPlugin); };
    (@fn $method:ident, $trait:ident) => {
        fn $method(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::framework::$trait>> {
            Some(self)
        }
    };
}
