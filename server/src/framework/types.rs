//! Values passed between the framework, the queue and plugins.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use super::status::Status;
use crate::model::{GroupKey, PodGroupInfo, PodRef};

/// The lowest score a Score plugin may give after normalization.
pub const MIN_NODE_SCORE: i64 = 0;
/// The highest score a Score plugin may give after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
/// The highest total score a node can have.
pub const MAX_TOTAL_SCORE: i64 = i64::MAX;

/// A pod in the scheduling queue, with its queueing history.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod: PodRef,
    /// When the pod was added to the queue, or last failed: QueueSort's
    /// tie-break, the backoff's base and the unschedulable stay's start.
    pub timestamp: Instant,
    /// Scheduling attempts, counted at each pop.
    pub attempts: u32,
    /// Attempts that ended with the pod rejected by plugins.
    pub unschedulable_count: u32,
    /// Attempts in a row that ended with an error.
    pub consecutive_errors_count: u32,
    /// When the pod first entered activeQ.
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod at its last attempt.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Plugins that returned `Pending` at its last attempt.
    pub pending_plugins: BTreeSet<&'static str>,
    /// The PreEnqueue plugin holding the pod out of activeQ, if any.
    pub gating_plugin: Option<&'static str>,
    /// The message of the last failure, for the queue API and the summary.
    pub last_failure: Option<Arc<str>>,
    /// The plugin whose error ended the last attempt (not a rejection): a
    /// remote extender that was down, whose pods are retried at once when
    /// it is back.
    pub error_plugin: Option<&'static str>,
    /// When the pod's backoff ends, computed when it failed.
    pub backoff_expiration: Option<Instant>,
    /// When the pod last entered the unschedulable pods by a flush, so that
    /// a pod still gated is flushed again only after another full stay.
    pub flush_timestamp: Option<Instant>,
}

impl QueuedPodInfo {
    /// A pod entering the queue now.
    pub fn new(pod: PodRef, now: Instant) -> Self {
        Self {
            pod,
            timestamp: now,
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            error_plugin: None,
            gating_plugin: None,
            last_failure: None,
            backoff_expiration: None,
            flush_timestamp: None,
        }
    }

    /// Whether a PreEnqueue plugin holds the pod.
    pub fn gated(&self) -> bool {
        self.gating_plugin.is_some()
    }
}

/// A PodGroup's pods in the scheduling queue, queued and scheduled as one
/// entity (the `GenericWorkload` gate on): upstream's QueuedPodGroupInfo.
/// The entity has its own history; each member keeps its own too.
#[derive(Debug, Clone)]
pub struct QueuedPodGroupInfo {
    /// The group.
    pub key: GroupKey,
    /// The entity's key in the queue: `podgroup/<namespace>/<name>`.
    pub entity_key: Arc<str>,
    /// The PodGroup as the queue last saw it (`None`: not observed yet).
    pub pod_group: Option<Arc<PodGroupInfo>>,
    /// The members waiting to be scheduled, in the order they joined.
    pub pods: Vec<QueuedPodInfo>,
    /// When the entity was created, or last failed: QueueSort's tie-break,
    /// the backoff's base and the unschedulable stay's start.
    pub timestamp: Instant,
    /// Group cycles, counted at each pop.
    pub attempts: u32,
    /// Group cycles that ended unschedulable.
    pub unschedulable_count: u32,
    /// Group cycles in a row that ended with an error.
    pub consecutive_errors_count: u32,
    /// When the entity first entered activeQ.
    pub initial_attempt_timestamp: Option<Instant>,
    /// The PreEnqueue plugin holding the group out of activeQ, if any.
    pub gating_plugin: Option<&'static str>,
    /// The plugins that rejected the group at its last cycle: the group
    /// point that refused it (PlacementFeasible, GroupPermit) and the
    /// plugins that rejected its pods. Their queueing hints say which
    /// events may make the group schedulable (empty after a rejection no
    /// plugin claimed: any event may).
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Plugins that answered `Pending` for one of its pods at its last
    /// cycle: an event they accept moves the group straight to activeQ.
    pub pending_plugins: BTreeSet<&'static str>,
    /// The plugin whose error ended the last cycle (a remote extender that
    /// was down: the group is retried at once when it is back).
    pub error_plugin: Option<&'static str>,
    /// The group's message at its last failed cycle (its condition's), so
    /// that a failure repeating itself is not logged again.
    pub last_failure: Option<Arc<str>>,
    /// When the entity's backoff ends.
    pub backoff_expiration: Option<Instant>,
    /// When the entity last entered the unschedulable entities by a flush.
    pub flush_timestamp: Option<Instant>,
}

impl QueuedPodGroupInfo {
    /// A new entity for the group `key`, empty.
    pub fn new(key: GroupKey, pod_group: Option<Arc<PodGroupInfo>>, now: Instant) -> Self {
        Self {
            entity_key: Arc::from(format!("podgroup/{key}").as_str()),
            key,
            pod_group,
            pods: Vec::new(),
            timestamp: now,
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            initial_attempt_timestamp: None,
            gating_plugin: None,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            error_plugin: None,
            last_failure: None,
            backoff_expiration: None,
            flush_timestamp: None,
        }
    }

    /// The group's priority: the PodGroup's `spec.priority` (0 unset), or
    /// before it is observed its first member's.
    pub fn priority(&self) -> i32 {
        match &self.pod_group {
            Some(g) => g.priority,
            None => self.pods.first().map_or(0, |p| p.pod.priority),
        }
    }

    /// Whether a PreEnqueue plugin holds the group.
    pub fn gated(&self) -> bool {
        self.gating_plugin.is_some()
    }
}

/// One entity of the scheduling queue, as QueueSort compares them:
/// upstream's QueuedEntityInfo.
#[derive(Debug, Clone, Copy)]
pub enum QueuedEntity<'a> {
    /// A pod scheduled alone.
    Pod(&'a QueuedPodInfo),
    /// A PodGroup's pods, scheduled together.
    Group(&'a QueuedPodGroupInfo),
}

impl<'a> QueuedEntity<'a> {
    /// The priority: the pod's, or the PodGroup's.
    pub fn priority(&self) -> i32 {
        match self {
            Self::Pod(q) => q.pod.priority,
            Self::Group(g) => g.priority(),
        }
    }

    /// The entity's timestamp (entered the queue, or last failed).
    pub fn timestamp(&self) -> Instant {
        match self {
            Self::Pod(q) => q.timestamp,
            Self::Group(g) => g.timestamp,
        }
    }

    /// When the entity first entered activeQ.
    pub fn initial_attempt_timestamp(&self) -> Option<Instant> {
        match self {
            Self::Pod(q) => q.initial_attempt_timestamp,
            Self::Group(g) => g.initial_attempt_timestamp,
        }
    }

    /// The pod, or the group's first member (for plugins that sort by a
    /// pod's labels); `None` for a group without members.
    pub fn pod(&self) -> Option<&'a PodRef> {
        match self {
            Self::Pod(q) => Some(&q.pod),
            Self::Group(g) => g.pods.first().map(|q| &q.pod),
        }
    }
}

/// Whether a nomination replaces the pod's `status.nominatedNodeName`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NominatingInfo {
    /// Keep whatever the pod carries.
    Noop,
    /// Set (or with `None`, clear) the nominated node.
    Override(Option<Arc<str>>),
}

/// What PreFilter learned about the candidate nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// Only these nodes can fit the pod; `None` means any node may.
    pub node_names: Option<HashSet<Arc<str>>>,
}

impl PreFilterResult {
    /// Whether every node is a candidate.
    pub fn all_nodes(&self) -> bool {
        self.node_names.is_none()
    }

    /// Narrows `self` to the nodes also in `other`.
    pub fn merge(&mut self, other: &PreFilterResult) {
        match (&mut self.node_names, &other.node_names) {
            (_, None) => {}
            (None, Some(o)) => self.node_names = Some(o.clone()),
            (Some(s), Some(o)) => s.retain(|n| o.contains(n)),
        }
    }
}

/// The eviction of the victims a PostFilter plugin chose. The scheduler
/// runs it once the preemptor's status (its `PodScheduled=False`
/// condition and its nomination, in one write) has been sent, so that the
/// cluster learns where the preemptor goes before its victims go, as
/// upstream orders it.
pub struct Eviction(
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>,
);

impl Eviction {
    /// An eviction doing `work`.
    pub fn new(
        work: impl std::future::Future<Output = Result<(), String>> + Send + 'static,
    ) -> Self {
        Self(Box::pin(work))
    }

    /// Evicts; the error says which victim could not be evicted.
    pub async fn run(self) -> Result<(), String> {
        self.0.await
    }
}

impl fmt::Debug for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Eviction")
    }
}

/// What a PostFilter plugin did for the pod.
#[derive(Debug)]
pub struct PostFilterResult {
    /// The node the pod should be nominated to.
    pub nominating_info: NominatingInfo,
    /// The pods to evict to make room (or, in a dry run, that would be).
    pub victims: Vec<PodRef>,
    /// Their eviction, for the scheduler to run after the nomination is
    /// written (none in a dry run).
    pub eviction: Option<Eviction>,
}

impl PostFilterResult {
    /// A result that only nominates (or with `None`, clears the nomination).
    pub fn nominate(node: Option<Arc<str>>) -> Self {
        Self {
            nominating_info: NominatingInfo::Override(node),
            victims: Vec::new(),
            eviction: None,
        }
    }
}

/// One node's score from one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeScore<'a> {
    /// The node's name.
    pub name: &'a str,
    /// The score.
    pub score: i64,
}

/// Why each rejected node was rejected, plus the status of nodes never
/// evaluated (when PreFilter ruled them out).
#[derive(Debug, Clone)]
pub struct NodeToStatus {
    statuses: HashMap<Arc<str>, Status>,
    absent: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        Self {
            statuses: HashMap::new(),
            // Nodes not evaluated at all are treated as unresolvable: no
            // preemption on them can help.
            absent: Status::code_only(super::Code::UnschedulableAndUnresolvable),
        }
    }
}

impl NodeToStatus {
    /// Records a node's status.
    pub fn set(&mut self, node: Arc<str>, status: Status) {
        self.statuses.insert(node, status);
    }

    /// The status of `node`: its recorded one, or the absent-nodes one.
    pub fn get(&self, node: &str) -> &Status {
        self.statuses.get(node).unwrap_or(&self.absent)
    }

    /// The status recorded for `node`, if one was.
    pub fn recorded(&self, node: &str) -> Option<&Status> {
        self.statuses.get(node)
    }

    /// The status given to nodes without a recorded one.
    pub fn absent_nodes_status(&self) -> &Status {
        &self.absent
    }

    /// Sets the status given to nodes without a recorded one.
    pub fn set_absent_nodes_status(&mut self, status: Status) {
        self.absent = status;
    }

    /// The number of recorded nodes.
    pub fn len(&self) -> usize {
        self.statuses.len()
    }

    /// Whether no node is recorded.
    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }

    /// Recorded nodes and their statuses.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Status)> {
        self.statuses.iter()
    }
}

/// Everything learned about why a pod did not fit.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Per-node rejections.
    pub node_to_status: NodeToStatus,
    /// Plugins that rejected the pod (Unschedulable or
    /// UnschedulableAndUnresolvable) on some node or at PreFilter.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Plugins that returned `Pending`.
    pub pending_plugins: BTreeSet<&'static str>,
    /// The message of a PreFilter rejection, if PreFilter rejected the pod.
    pub pre_filter_msg: Option<String>,
    /// The message PostFilter plugins gave, if any.
    pub post_filter_msg: Option<String>,
}

impl Diagnosis {
    /// Records which plugin a rejecting status came from.
    pub fn add_plugin_status(&mut self, status: &Status) {
        let Some(plugin) = status.plugin() else {
            return;
        };
        if status.code() == super::Code::Pending {
            self.pending_plugins.insert(plugin);
        } else if status.is_rejected() {
            self.unschedulable_plugins.insert(plugin);
        }
    }
}

/// No node fits the pod: why, node by node.
#[derive(Debug, Clone)]
pub struct FitError {
    /// Nodes in the cluster.
    pub num_all_nodes: usize,
    /// The reasons.
    pub diagnosis: Diagnosis,
}

impl fmt::Display for FitError {
    /// Words the failure as kube-scheduler does:
    /// `0/5 nodes are available: 1 node(s) were unschedulable, 4 Insufficient cpu.`
    /// Reasons are counted over nodes and sorted as strings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        let d = &self.diagnosis;
        match d.pre_filter_msg.as_deref().filter(|m| !m.is_empty()) {
            Some(msg) => write!(f, " {msg}.")?,
            None => {
                let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                for (_, status) in d.node_to_status.iter() {
                    for r in status.reasons() {
                        *counts.entry(r).or_default() += 1;
                    }
                }
                let recorded = d.node_to_status.len();
                if recorded < self.num_all_nodes {
                    for r in d.node_to_status.absent_nodes_status().reasons() {
                        *counts.entry(r).or_default() += self.num_all_nodes - recorded;
                    }
                }
                let mut lines: Vec<String> =
                    counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
                lines.sort();
                if !lines.is_empty() {
                    write!(f, " {}.", lines.join(", "))?;
                }
            }
        }
        if let Some(msg) = d.post_filter_msg.as_deref().filter(|m| !m.is_empty()) {
            write!(f, " {msg}")?;
        }
        Ok(())
    }
}

/// How far a group cycle got, as PlacementFeasible judges it: the group's
/// pods still to evaluate in this cycle, and those scheduled (assumed or
/// bound: before this cycle, plus those this cycle placed so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementProgress {
    /// Queued pods not evaluated yet.
    pub remaining: usize,
    /// Pods of the group scheduled.
    pub scheduled: usize,
}

/// A pod a group cycle placed so far (in its snapshot), and the node.
#[derive(Debug, Clone)]
pub struct PlacedPod {
    /// The pod.
    pub pod: PodRef,
    /// Its node.
    pub node: Arc<str>,
}

/// What a group cycle that did not fit found, for PodGroupPostFilter: the
/// group's status and the outcome of each pod it evaluated.
#[derive(Debug, Clone)]
pub struct GroupAttempt {
    /// The group's status (`Unschedulable`, with its reasons).
    pub status: Status,
    /// The pods evaluated, in order (placements already rolled back).
    pub pods: Vec<PodAttempt>,
}

/// One pod's outcome in a [`GroupAttempt`].
#[derive(Debug, Clone)]
pub struct PodAttempt {
    /// The pod.
    pub pod: PodRef,
    /// The node it was placed on, if it fit.
    pub node: Option<Arc<str>>,
    /// Why it did not fit (empty if it did).
    pub message: String,
}

/// A PodGroup in its scheduling cycle, as the group points see it
/// (upstream's PodGroupInfo).
#[derive(Debug, Clone)]
pub struct PodGroupCycleInfo {
    /// The PodGroup, as the cycle's snapshot holds it.
    pub group: Arc<PodGroupInfo>,
    /// Its queued pods, in the order the cycle evaluates them.
    pub pods: Vec<PodRef>,
    /// Its pods assumed or bound when the cycle started.
    pub scheduled: Vec<PodRef>,
}

/// One pod of a group placed by the group algorithm (upstream's
/// ProposedAssignment): the pod, its node, and its cycle state.
pub struct ProposedAssignment {
    /// The pod.
    pub pod: PodRef,
    /// The node the algorithm chose.
    pub node: Arc<str>,
    /// The pod's cycle state (PreFilter's data, for Filter re-runs).
    pub state: super::cycle_state::CycleState,
}

impl fmt::Debug for ProposedAssignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.pod.key(), self.node)
    }
}

/// What a PodGroupPostFilter plugin did for the group.
#[derive(Debug, Default)]
pub struct PodGroupPostFilterResult {
    /// The node each pod (by UID) should be nominated to.
    pub nominations: Vec<(Arc<str>, Arc<str>)>,
    /// The pods to evict to make room.
    pub victims: Vec<PodRef>,
    /// How many units they are (a `disruptionMode: all` group counts one).
    pub units: usize,
    /// Their eviction, run once the group's pods' statuses are written.
    pub eviction: Option<Eviction>,
}
