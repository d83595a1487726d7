//! The scheduler cache: nodes, the pods on them, and pods assumed on them.
//!
//! Pods move through these states (by UID):
//!
//! ```text
//!                 assume                  add (watch sees it bound)
//!   (unknown) ────────────▶ Assumed ───────────────────────────▶ Added
//!       ▲                     │  │                                │  ▲
//!       │      forget         │  │ finish_binding, then           │  │ update
//!       └─────────────────────┘  │ TTL passes (if TTL > 0)        │  └──┘
//!       ▲                        ▼                                │
//!       │                     Expired ──── add ───▶ Added         │ remove
//!       └───────────────────────────────────────────────────────  ▼
//!                                                             (deleted)
//! ```
//!
//! * `assume`: the scheduling cycle chose a node; the pod counts against it
//!   before the binding is known, so the next cycle does not double-book.
//! * `finish_binding`: the binding cycle returned; from now the TTL runs.
//! * `add` of an assumed pod confirms it (on the node the watch reports).
//! * `forget`: the binding failed; the pod stops counting.
//! * expiry: a pod whose binding finished but whose confirmation never came
//!   within the TTL stops counting. The TTL is 0 (never) by default, as in
//!   kube-scheduler since 1.23: an expired pod that was in fact bound would
//!   let the node be overcommitted until the watch catches up.
//!
//! Every change to a node's [`NodeInfo`] gives it a new generation from one
//! counter; [`Cache::update_snapshot`] copies only nodes whose generation is
//! newer than the snapshot's.

pub mod dra;
mod node_info;
mod node_tree;
pub mod objects;
pub mod pod_groups;
mod snapshot;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use node_info::{DEFAULT_BIND_ALL_HOST_IP, HostPortInfo, NodeInfo, pvc_key};
pub use node_tree::NodeTree;
pub use objects::{KubeObject, ObjectDecodeError, ObjectKind, ObjectStore};
pub use pod_groups::{MemberState, PodGroupManager, PodGroupState, group_key_of};
pub use snapshot::Snapshot;

use crate::model::{NodeSpec, PodRef};

/// A cache operation that contradicts the cache's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `assume` of a pod the cache already holds.
    #[error("pod {0} is in the cache, so can't be assumed")]
    AlreadyInCache(String),
    /// `assume` of a pod without a node.
    #[error("pod {0} has no node to be assumed on")]
    NoNode(String),
    /// `forget` of a pod that is not assumed.
    #[error("pod {0} is not assumed, so it cannot be removed or forgotten")]
    NotAssumed(String),
    /// `forget` naming another node than the one assumed.
    #[error("pod {pod} was assumed on {assumed} but assigned to {assigned}")]
    WrongNode {
        /// The pod.
        pod: String,
        /// Where the cache assumed it.
        assumed: String,
        /// Where the caller says it is.
        assigned: String,
    },
    /// `add` of a pod already added.
    #[error("pod {0} was already in added state")]
    AlreadyAdded(String),
    /// `update` or `remove` of a pod the cache does not hold.
    #[error("pod {0} is not found in scheduler cache")]
    PodNotFound(String),
    /// `remove_node` of an unknown node.
    #[error("node {0} is not found")]
    NodeNotFound(String),
}

#[derive(Debug)]
struct PodState {
    pod: PodRef,
    /// When an assumed pod expires; set by `finish_binding` when the TTL > 0.
    deadline: Option<Instant>,
    binding_finished: bool,
}

#[derive(Debug)]
struct CachedNode {
    info: Arc<NodeInfo>,
    zone: String,
    /// The cache's generation when `info` last changed (kept here, not in
    /// the node's info, so that an info a group cycle's trial built can
    /// become the cache's as it is: see [`TrialNode`]).
    generation: u64,
}

/// A node as a group cycle's trial left it in the cycle's snapshot:
/// `placed` is `base` with one pod added. When the cache still holds
/// `base` for that node as it assumes the same pod (the same `PodRef`),
/// it takes `placed` as its own instead of adding the pod to a copy:
/// the same content, and the version the trial's later pods judged, so
/// that the next snapshot update hands the batching layer a node it has
/// verdicts for instead of a new copy to judge again.
#[derive(Debug, Clone)]
pub struct TrialNode {
    /// The node before the trial placed the pod.
    pub base: Arc<NodeInfo>,
    /// The node with the pod placed.
    pub placed: Arc<NodeInfo>,
}

/// Nodes and pods as the scheduler believes them to be. Owned behind a lock
/// by the scheduler; every method is short and never awaits.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    nodes: crate::model::NodeNameMap<CachedNode>,
    /// Node names by their current generation: the changes since any
    /// generation, in order.
    by_generation: BTreeMap<u64, Arc<str>>,
    next_generation: u64,
    tree: NodeTree,
    /// Moves when nodes are added, removed or change zone: snapshots must
    /// then rebuild their node list.
    tree_version: u64,
    pods: crate::model::UidMap<PodState>,
    assumed: HashSet<Arc<str>>,
    /// How many nodes have each image, for ImageLocality.
    image_nodes: ImageCounts,
    images_version: u64,
    /// PodGroups and where their pods are (`GenericWorkload` on), kept in
    /// step with the pods' transitions here.
    pod_groups: Option<Arc<PodGroupManager>>,
    /// Told of pods' placements, when extenders follow them.
    sink: Option<Arc<dyn PlacementSink>>,
}

/// Told of every change to where pods are placed, bound or assumed (the
/// extenders' pod feed). Called with the cache's lock held: must not call
/// back into the cache, and should be quick.
pub trait PlacementSink: Send + Sync + std::fmt::Debug {
    /// `pod` is placed on its node (newly, or changed: assumed to bound,
    /// a new version of its object, another node).
    fn placed(&self, pod: &PodRef, assumed: bool);
    /// `pod` left the cache (deleted, forgotten, expired).
    fn removed(&self, pod: &PodRef);
}

/// How many nodes have each image: read once per scored node by
/// ImageLocality, so keyed with a fast hash rather than SipHash.
pub type ImageCounts = HashMap<Arc<str>, usize, foldhash::fast::RandomState>;

impl Cache {
    /// An empty cache whose assumed pods expire `ttl` after their binding
    /// finished (`Duration::ZERO`: never).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            nodes: Default::default(),
            by_generation: BTreeMap::new(),
            next_generation: 0,
            tree: NodeTree::default(),
            tree_version: 1,
            pods: Default::default(),
            assumed: HashSet::new(),
            image_nodes: ImageCounts::default(),
            images_version: 0,
            pod_groups: None,
            sink: None,
        }
    }

    /// Tells `sink` of every placement from now on.
    pub fn set_placement_sink(&mut self, sink: Arc<dyn PlacementSink>) {
        self.sink = Some(sink);
    }

    fn placed(&self, pod: &PodRef, assumed: bool) {
        if let Some(s) = &self.sink {
            s.placed(pod, assumed);
        }
    }

    fn removed(&self, pod: &PodRef) {
        if let Some(s) = &self.sink {
            s.removed(pod);
        }
    }

    /// Keeps `groups` in step with the pods' transitions (the
    /// `GenericWorkload` gate on).
    pub fn with_pod_groups(mut self, groups: Arc<PodGroupManager>) -> Self {
        self.pod_groups = Some(groups);
        self
    }

    /// The PodGroups, when tracked.
    pub fn pod_groups(&self) -> Option<&Arc<PodGroupManager>> {
        self.pod_groups.as_ref()
    }

    /// A pending pod (not bound, not assumed) was seen: a member of its
    /// group, if it names one.
    pub fn add_pending_pod(&self, pod: &PodRef) {
        if let Some(g) = &self.pod_groups
            && pod.scheduling_group.is_some()
            && !self.assumed.contains(&pod.uid)
        {
            g.add_unscheduled(pod);
        }
    }

    /// A pending (or assumed) pod was deleted: it leaves its group.
    pub fn remove_pending_pod(&self, pod: &PodRef) {
        if let Some(g) = &self.pod_groups
            && pod.scheduling_group.is_some()
            && (!self.pods.contains_key(&pod.uid) || self.assumed.contains(&pod.uid))
        {
            g.remove(pod);
        }
    }

    fn groups_of(&self, pod: &PodRef) -> Option<&PodGroupManager> {
        self.pod_groups
            .as_deref()
            .filter(|_| pod.scheduling_group.is_some())
    }

    /// Applies `f` to the node's info (creating a node-less entry if needed)
    /// and gives it a new generation.
    fn mutate_node(&mut self, name: &Arc<str>, f: impl FnOnce(&mut NodeInfo)) {
        self.next_generation += 1;
        let generation = self.next_generation;
        let entry = self
            .nodes
            .entry(name.clone())
            .or_insert_with(|| CachedNode {
                info: Arc::new(NodeInfo::default()),
                zone: String::new(),
                generation: 0,
            });
        f(Arc::make_mut(&mut entry.info));
        self.by_generation.remove(&entry.generation);
        entry.generation = generation;
        self.by_generation.insert(generation, name.clone());
    }

    /// Takes the trial's node for `pod`'s when it is `pod` added to the
    /// node the cache holds (see [`TrialNode`]); returns whether it did.
    fn adopt_trial_node(&mut self, pod: &PodRef, trial: &TrialNode) -> bool {
        let Some(name) = pod.node_name.as_ref() else {
            return false;
        };
        let Some(entry) = self.nodes.get_mut(name) else {
            return false;
        };
        let same = Arc::ptr_eq(&entry.info, &trial.base)
            && trial.placed.pods().len() == trial.base.pods().len() + 1
            && trial
                .placed
                .pods()
                .last()
                .is_some_and(|p| Arc::ptr_eq(p, pod));
        if !same {
            return false;
        }
        self.next_generation += 1;
        entry.info = trial.placed.clone();
        self.by_generation.remove(&entry.generation);
        entry.generation = self.next_generation;
        self.by_generation.insert(entry.generation, name.clone());
        true
    }

    /// Drops a node entry that has neither a node nor pods.
    fn drop_if_empty(&mut self, name: &str) {
        if let Some(entry) = self.nodes.get(name)
            && entry.info.node().is_none()
            && entry.info.pods().is_empty()
        {
            self.by_generation.remove(&entry.generation);
            self.nodes.remove(name);
        }
    }

    fn count_images(&mut self, node: Option<&NodeSpec>, delta: isize) {
        let Some(node) = node else { return };
        if node.images.is_empty() {
            return;
        }
        // A node counts once per name, however many of its images list it.
        let names: std::collections::BTreeSet<&Arc<str>> =
            node.images.iter().flat_map(|i| i.names.iter()).collect();
        for name in names {
            let n = self.image_nodes.entry(name.clone()).or_default();
            *n = n.saturating_add_signed(delta);
            if *n == 0 {
                self.image_nodes.remove(name);
            }
        }
        self.images_version += 1;
    }

    /// Adds a node, or updates it if known.
    pub fn add_node(&mut self, node: Arc<NodeSpec>) {
        let name = node.name.clone();
        let old = self.nodes.get(&name).and_then(|e| e.info.node().cloned());
        if old.as_ref().map(|o| &o.images) != Some(&node.images) {
            self.count_images(old.as_deref(), -1);
            self.count_images(Some(&node), 1);
        }
        let zone = node.zone_key();
        let old_zone = self
            .nodes
            .get(&name)
            .and_then(|e| e.info.node().map(|_| e.zone.clone()));
        if old_zone.as_deref() != Some(zone.as_str()) {
            if let Some(old) = &old_zone {
                self.tree.remove(old, &name);
            }
            self.tree.add(&zone, &name);
            self.tree_version += 1;
        }
        self.mutate_node(&name, |info| info.set_node(Some(node)));
        if let Some(e) = self.nodes.get_mut(&name) {
            e.zone = zone;
        }
    }

    /// Updates a node (same as adding it).
    pub fn update_node(&mut self, node: Arc<NodeSpec>) {
        self.add_node(node);
    }

    /// Removes a node. Its pods stay accounted to a node-less entry until
    /// they are removed, as their deletions arrive separately.
    pub fn remove_node(&mut self, name: &str) -> Result<(), CacheError> {
        let entry = self
            .nodes
            .get(name)
            .filter(|e| e.info.node().is_some())
            .ok_or_else(|| CacheError::NodeNotFound(name.to_string()))?;
        let zone = entry.zone.clone();
        let old = entry.info.node().cloned();
        self.count_images(old.as_deref(), -1);
        let name: Arc<str> = Arc::from(name);
        self.tree.remove(&zone, &name);
        self.tree_version += 1;
        self.mutate_node(&name, |info| info.set_node(None));
        self.drop_if_empty(&name);
        Ok(())
    }

    fn add_pod_to_node(&mut self, pod: PodRef) {
        if let Some(node) = pod.node_name.clone() {
            self.mutate_node(&node, |info| info.add_pod(pod));
        }
    }

    fn remove_pod_from_node(&mut self, pod: &PodRef) {
        if let Some(node) = pod.node_name.clone()
            && self.nodes.contains_key(&node)
        {
            self.mutate_node(&node, |info| {
                info.remove_pod(&pod.uid);
            });
            self.drop_if_empty(&node);
        }
    }

    /// Counts `pod` (its `node_name` set to the chosen node) against its node
    /// while its binding is in flight.
    pub fn assume_pod(&mut self, pod: PodRef) -> Result<(), CacheError> {
        self.assume_placed_pod(pod, None)
    }

    /// [`Cache::assume_pod`] for a pod a group cycle's trial placed:
    /// the node the trial built is taken when it is the same (see
    /// [`TrialNode`]).
    pub fn assume_placed_pod(
        &mut self,
        pod: PodRef,
        trial: Option<&TrialNode>,
    ) -> Result<(), CacheError> {
        if self.pods.contains_key(&pod.uid) {
            return Err(CacheError::AlreadyInCache(pod.key()));
        }
        if pod.node_name.is_none() {
            return Err(CacheError::NoNode(pod.key()));
        }
        if !trial.is_some_and(|t| self.adopt_trial_node(&pod, t)) {
            self.add_pod_to_node(pod.clone());
        }
        if let Some(g) = self.groups_of(&pod) {
            g.assume(&pod);
        }
        self.placed(&pod, true);
        self.assumed.insert(pod.uid.clone());
        self.pods.insert(
            pod.uid.clone(),
            PodState {
                pod,
                deadline: None,
                binding_finished: false,
            },
        );
        Ok(())
    }

    /// Marks the binding of an assumed pod as done; its TTL starts now.
    pub fn finish_binding(&mut self, uid: &str, now: Instant) {
        if !self.assumed.contains(uid) {
            return;
        }
        if let Some(state) = self.pods.get_mut(uid) {
            state.binding_finished = true;
            state.deadline = (!self.ttl.is_zero()).then(|| now + self.ttl);
        }
    }

    /// Stops counting an assumed pod whose binding failed.
    pub fn forget_pod(&mut self, uid: &str, node: &str) -> Result<(), CacheError> {
        let Some(state) = self.pods.get(uid) else {
            return Ok(());
        };
        let assumed_on = state.pod.node_name.as_deref().unwrap_or("");
        if assumed_on != node {
            return Err(CacheError::WrongNode {
                pod: state.pod.key(),
                assumed: assumed_on.to_string(),
                assigned: node.to_string(),
            });
        }
        if !self.assumed.contains(uid) {
            return Err(CacheError::NotAssumed(state.pod.key()));
        }
        let state = self.pods.remove(uid).expect("present above");
        self.assumed.remove(uid);
        self.remove_pod_from_node(&state.pod);
        if let Some(g) = self.groups_of(&state.pod) {
            g.forget(&state.pod);
        }
        self.removed(&state.pod);
        Ok(())
    }

    /// A bound pod was observed: confirms it if assumed (moving it if it was
    /// bound elsewhere), adds it otherwise.
    pub fn add_pod(&mut self, pod: PodRef) -> Result<(), CacheError> {
        match self.pods.get(&pod.uid) {
            Some(_) if self.assumed.contains(&pod.uid) => {
                let old = self.pods.remove(&pod.uid).expect("present").pod;
                self.assumed.remove(&pod.uid);
                if old.node_name != pod.node_name {
                    tracing::warn!(pod = %pod.key(), assumed = ?old.node_name, actual = ?pod.node_name,
                        "pod was added to a different node than it was assumed");
                }
                self.remove_pod_from_node(&old);
            }
            Some(_) => return Err(CacheError::AlreadyAdded(pod.key())),
            None => {}
        }
        self.add_pod_to_node(pod.clone());
        if let Some(g) = self.groups_of(&pod) {
            g.assign(&pod);
        }
        self.placed(&pod, false);
        self.pods.insert(
            pod.uid.clone(),
            PodState {
                pod,
                deadline: None,
                binding_finished: false,
            },
        );
        Ok(())
    }

    /// A bound pod changed.
    pub fn update_pod(&mut self, pod: PodRef) -> Result<(), CacheError> {
        let Some(state) = self.pods.get(&pod.uid) else {
            return Err(CacheError::PodNotFound(pod.key()));
        };
        if self.assumed.contains(&pod.uid) {
            // The watch confirms the assumed pod with its new version.
            return self.add_pod(pod);
        }
        let old = state.pod.clone();
        self.remove_pod_from_node(&old);
        self.add_pod_to_node(pod.clone());
        if let Some(g) = self.groups_of(&pod) {
            g.assign(&pod);
        }
        self.placed(&pod, false);
        let uid = pod.uid.clone();
        self.pods.get_mut(&uid).expect("present").pod = pod;
        Ok(())
    }

    /// A bound (or assumed) pod went away.
    pub fn remove_pod(&mut self, uid: &str) -> Result<PodRef, CacheError> {
        let state = self
            .pods
            .remove(uid)
            .ok_or_else(|| CacheError::PodNotFound(uid.to_string()))?;
        self.assumed.remove(uid);
        self.remove_pod_from_node(&state.pod);
        if let Some(g) = self.groups_of(&state.pod) {
            g.remove(&state.pod);
        }
        self.removed(&state.pod);
        Ok(state.pod)
    }

    /// Whether the pod is assumed (chosen a node, binding not yet observed).
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.assumed.contains(uid)
    }

    /// The pod as the cache holds it.
    pub fn get_pod(&self, uid: &str) -> Option<&PodRef> {
        self.pods.get(uid).map(|s| &s.pod)
    }

    /// Expires assumed pods whose binding finished more than the TTL ago.
    /// Returns the expired pods.
    pub fn cleanup_expired(&mut self, now: Instant) -> Vec<PodRef> {
        let expired: Vec<Arc<str>> = self
            .assumed
            .iter()
            .filter(|uid| {
                self.pods
                    .get(*uid)
                    .is_some_and(|s| s.binding_finished && s.deadline.is_some_and(|d| now >= d))
            })
            .cloned()
            .collect();
        expired
            .into_iter()
            .filter_map(|uid| {
                tracing::warn!(uid = %uid, "assumed pod expired: its binding was never confirmed");
                self.remove_pod(&uid).ok()
            })
            .collect()
    }

    /// The earliest deadline of an assumed pod, to time the next cleanup.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.assumed
            .iter()
            .filter_map(|uid| self.pods.get(uid).and_then(|s| s.deadline))
            .min()
    }

    /// The number of nodes.
    pub fn node_count(&self) -> usize {
        self.tree.len()
    }

    /// The number of pods (bound and assumed).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The number of assumed pods.
    pub fn assumed_count(&self) -> usize {
        self.assumed.len()
    }

    /// Brings `snapshot` up to date, copying only nodes that changed since.
    pub fn update_snapshot(&self, snapshot: &mut Snapshot) {
        let rebuild = snapshot.tree_version != self.tree_version;
        if rebuild {
            snapshot.list.clear();
            snapshot.names.clear();
            snapshot.index.clear();
            for name in self.tree.list() {
                if let Some(e) = self.nodes.get(&name) {
                    snapshot.index.insert(name.clone(), snapshot.list.len());
                    snapshot.names.push(name);
                    snapshot.list.push(e.info.clone());
                }
            }
            snapshot.tree_version = self.tree_version;
            snapshot.rebuild_affinity_lists();
        } else {
            for name in self
                .by_generation
                .range(snapshot.generation + 1..)
                .map(|(_, n)| n)
            {
                if let (Some(&i), Some(e)) = (snapshot.index.get(name), self.nodes.get(name)) {
                    snapshot.list[i] = e.info.clone();
                    snapshot.node_changed(i);
                }
            }
        }
        if snapshot.images_version != self.images_version {
            snapshot.image_nodes = Arc::new(self.image_nodes.clone());
            snapshot.images_version = self.images_version;
        }
        snapshot.generation = self.next_generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    fn node(name: &str, zone: &str) -> Arc<NodeSpec> {
        Arc::new(
            make_node(name)
                .cpu("4")
                .memory("8Gi")
                .label("topology.kubernetes.io/zone", zone)
                .build(),
        )
    }

    fn pod_on(name: &str, node: &str, cpu: &str) -> PodRef {
        Arc::new(make_pod(name).req_cpu(cpu).node(node).build())
    }

    #[test]
    fn a_trial_node_is_taken_over_only_when_it_is_the_same() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", "a"));
        c.add_node(node("n2", "a"));
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        // The trial places p on n1 in its snapshot; the cache assumes the
        // same PodRef: the trial's node becomes the cache's, and the next
        // snapshot update hands out that very node.
        let p = pod_on("p", "n1", "1");
        let trial = snap.assume_trial_pod(p.clone()).unwrap();
        snap.undo_trial_pod("n1", &p.uid, Some(&trial));
        assert!(
            Arc::ptr_eq(snap.get("n1").unwrap(), &trial.base),
            "the trial undoes it, back to the node before"
        );
        c.assume_placed_pod(p.clone(), Some(&trial)).unwrap();
        c.update_snapshot(&mut snap);
        assert!(Arc::ptr_eq(snap.get("n1").unwrap(), &trial.placed));
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 1000);
        assert!(c.is_assumed(&p.uid));

        // The node changed in the cache between the trial and the
        // assumption: the cache adds the pod to its own node.
        let q = pod_on("q", "n2", "1");
        let trial = snap.assume_trial_pod(q.clone()).unwrap();
        snap.remove_pod("n2", &q.uid);
        c.add_pod(pod_on("other", "n2", "2")).unwrap();
        c.assume_placed_pod(q.clone(), Some(&trial)).unwrap();
        c.update_snapshot(&mut snap);
        let n2 = snap.get("n2").unwrap();
        assert!(!Arc::ptr_eq(n2, &trial.placed));
        assert_eq!((n2.requested().milli_cpu, n2.pods().len()), (3000, 2));

        // Another PodRef for the pod than the trial placed: not taken.
        let r = pod_on("r", "n1", "1");
        let trial = snap.assume_trial_pod(r.clone()).unwrap();
        snap.remove_pod("n1", &r.uid);
        let again = Arc::new((*r).clone());
        c.assume_placed_pod(again, Some(&trial)).unwrap();
        c.update_snapshot(&mut snap);
        assert!(!Arc::ptr_eq(snap.get("n1").unwrap(), &trial.placed));
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 2000);

        // Forgetting a taken-over pod releases it as any other.
        c.forget_pod(&p.uid, "n1").unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 1000);
    }

    #[test]
    fn a_trial_is_undone_to_the_nodes_before_without_copies() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", "a"));
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        let before = snap.get("n1").unwrap().clone();
        // Two pods of a trial on one node, undone last first: each undo
        // puts back the version the placement was made over.
        let (p, q) = (pod_on("p", "n1", "1"), pod_on("q", "n1", "1"));
        let tp = snap.assume_trial_pod(p.clone()).unwrap();
        let tq = snap.assume_trial_pod(q.clone()).unwrap();
        assert!(Arc::ptr_eq(&tq.base, &tp.placed));
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 2000);
        snap.undo_trial_pod("n1", &q.uid, Some(&tq));
        assert!(Arc::ptr_eq(snap.get("n1").unwrap(), &tp.placed));
        snap.undo_trial_pod("n1", &p.uid, Some(&tp));
        assert!(Arc::ptr_eq(snap.get("n1").unwrap(), &before));
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 0);

        // The node is no longer the trial's (changed since): the pod is
        // removed from the node as it is, what else changed kept.
        let tp = snap.assume_trial_pod(p.clone()).unwrap();
        let other = pod_on("other", "n1", "2");
        assert!(snap.assume_pod(other.clone()));
        snap.undo_trial_pod("n1", &p.uid, Some(&tp));
        let n1 = snap.get("n1").unwrap();
        assert_eq!((n1.requested().milli_cpu, n1.pods().len()), (2000, 1));
        // Without the trial's node, the pod is removed as well.
        snap.undo_trial_pod("n1", &other.uid, None);
        assert_eq!(snap.get("n1").unwrap().pods().len(), 0);
    }

    #[test]
    fn assume_confirm_forget() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", "a"));
        c.add_node(node("n2", "a"));
        let p = pod_on("p", "n1", "1");
        c.assume_pod(p.clone()).unwrap();
        assert!(c.is_assumed(&p.uid));
        assert_eq!(
            c.assume_pod(p.clone()),
            Err(CacheError::AlreadyInCache(p.key()))
        );
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 1000);

        // Forget on the wrong node is refused; on the right one it releases.
        assert!(matches!(
            c.forget_pod(&p.uid, "n2"),
            Err(CacheError::WrongNode { .. })
        ));
        c.forget_pod(&p.uid, "n1").unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 0);

        // Assume then confirm on another node: the pod moves.
        c.assume_pod(p.clone()).unwrap();
        c.add_pod(pod_on("p", "n2", "1")).unwrap();
        assert!(!c.is_assumed(&p.uid));
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 0);
        assert_eq!(snap.get("n2").unwrap().requested().milli_cpu, 1000);
        assert_eq!(
            c.add_pod(pod_on("p", "n2", "1")),
            Err(CacheError::AlreadyAdded(p.key()))
        );
        assert!(matches!(
            c.forget_pod(&p.uid, "n2"),
            Err(CacheError::NotAssumed(_))
        ));

        c.remove_pod(&p.uid).unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n2").unwrap().pods().len(), 0);
        assert_eq!(c.pod_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn assumed_pods_expire_only_after_binding_finished_and_ttl() {
        let ttl = Duration::from_secs(30);
        let mut c = Cache::new(ttl);
        c.add_node(node("n1", "a"));
        let p = pod_on("p", "n1", "1");
        c.assume_pod(p.clone()).unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(
            c.cleanup_expired(Instant::now()).is_empty(),
            "binding still in flight"
        );

        c.finish_binding(&p.uid, Instant::now());
        assert_eq!(c.next_expiry(), Some(Instant::now() + ttl));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(c.cleanup_expired(Instant::now()).is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        let expired = c.cleanup_expired(Instant::now());
        assert_eq!(expired.len(), 1);
        assert!(!c.is_assumed(&p.uid));
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_ttl_never_expires() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", "a"));
        let p = pod_on("p", "n1", "1");
        c.assume_pod(p.clone()).unwrap();
        c.finish_binding(&p.uid, Instant::now());
        tokio::time::advance(Duration::from_secs(86_400)).await;
        assert!(c.cleanup_expired(Instant::now()).is_empty());
        assert!(c.is_assumed(&p.uid));
    }

    #[test]
    fn snapshot_copies_only_changed_nodes() {
        let mut c = Cache::new(Duration::ZERO);
        for i in 0..10 {
            c.add_node(node(&format!("n{i}"), if i % 2 == 0 { "a" } else { "b" }));
        }
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 10);
        // Zones interleave.
        let names: Vec<&str> = snap.list().iter().map(|n| n.name()).collect();
        assert_eq!(&names[..4], ["n0", "n1", "n2", "n3"]);

        let before: Vec<Arc<NodeInfo>> = snap.list().to_vec();
        c.add_pod(pod_on("p", "n3", "1")).unwrap();
        c.update_snapshot(&mut snap);
        for (old, new) in before.iter().zip(snap.list()) {
            let same = Arc::ptr_eq(old, new);
            assert_eq!(same, new.name() != "n3", "{}", new.name());
        }
        // The snapshot taken before is untouched: copy on write.
        assert_eq!(before[3].requested().milli_cpu, 0);
        assert_eq!(snap.get("n3").unwrap().requested().milli_cpu, 1000);
    }

    #[test]
    fn node_removal_keeps_pods_accounted_until_they_go() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", "a"));
        c.add_node(node("n2", "a"));
        c.add_pod(pod_on("p", "n1", "1")).unwrap();
        c.remove_node("n1").unwrap();
        assert_eq!(
            c.remove_node("n1"),
            Err(CacheError::NodeNotFound("n1".into()))
        );
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 1);
        assert!(snap.get("n1").is_none());
        c.remove_pod(&make_pod("p").build().uid).unwrap();
        assert!(!c.nodes.contains_key("n1"), "empty ghost dropped");
        // The node comes back.
        c.add_node(node("n1", "b"));
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 2);
    }

    #[test]
    fn snapshot_tracks_affinity_pods_and_images() {
        let mut c = Cache::new(Duration::ZERO);
        for i in 0..3 {
            let mut n = make_node(&format!("n{i}")).cpu("4").object();
            n.status.as_mut().unwrap().images =
                Some(vec![k8s_openapi::api::core::v1::ContainerImage {
                    names: Some(vec!["nginx:1".into()]),
                    size_bytes: Some(100),
                }]);
            c.add_node(Arc::new(NodeSpec::new(Arc::new(n)).unwrap()));
        }
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.image_num_nodes("nginx:1"), 3);
        assert_eq!(snap.have_pods_with_affinity().count(), 0);
        let anti = make_pod("anti").node("n1").spec(
            "affinity",
            serde_json::json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}),
        );
        c.add_pod(Arc::new(anti.build())).unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(
            snap.have_pods_with_affinity()
                .map(|n| n.name())
                .collect::<Vec<_>>(),
            ["n1"]
        );
        assert_eq!(snap.have_pods_with_required_anti_affinity().count(), 1);
        c.remove_pod(&anti.build().uid).unwrap();
        c.remove_node("n2").unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.have_pods_with_affinity().count(), 0);
        assert_eq!(snap.image_num_nodes("nginx:1"), 2);
    }

    #[test]
    fn a_node_counts_once_per_image_name() {
        let mut c = Cache::new(Duration::ZERO);
        let image = |names: &[&str]| k8s_openapi::api::core::v1::ContainerImage {
            names: Some(names.iter().map(|n| n.to_string()).collect()),
            size_bytes: Some(100),
        };
        let mut n = make_node("n1").object();
        n.status.as_mut().unwrap().images = Some(vec![
            image(&["app:1", "app:1"]),
            image(&["app:1", "other:2"]),
        ]);
        let spec = Arc::new(NodeSpec::new(Arc::new(n)).unwrap());
        c.add_node(spec.clone());
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.image_num_nodes("app:1"), 1);
        assert_eq!(snap.image_num_nodes("other:2"), 1);
        let from_nodes = Snapshot::from_nodes(vec![NodeInfo::new(spec)]);
        assert_eq!(from_nodes.image_num_nodes("app:1"), 1);
        c.remove_node("n1").unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.image_num_nodes("app:1"), 0);
    }

    #[test]
    fn pod_group_members_follow_assume_forget_bind_and_delete() {
        let groups = Arc::new(PodGroupManager::default());
        let mut c = Cache::new(Duration::ZERO).with_pod_groups(groups.clone());
        c.add_node(node("n1", "a"));
        let key = crate::model::GroupKey::new("default", "g");
        let pending = Arc::new(make_pod("p").group("g").build());
        c.add_pending_pod(&pending);
        let counts = || {
            let s = groups.get(&key).unwrap();
            (s.all_pods_count(), s.scheduled_pods_count())
        };
        assert_eq!(counts(), (1, 0));
        let assumed = Arc::new(pending.assumed_on(&Arc::from("n1")));
        c.assume_pod(assumed.clone()).unwrap();
        assert_eq!(counts(), (1, 1), "assumed counts as scheduled");
        c.forget_pod(&assumed.uid, "n1").unwrap();
        assert_eq!(counts(), (1, 0), "forgotten: pending again");
        c.assume_pod(assumed.clone()).unwrap();
        c.add_pod(Arc::new(make_pod("p").group("g").node("n1").build()))
            .unwrap();
        assert_eq!(
            groups.get(&key).unwrap().state_of(&assumed.uid),
            Some(MemberState::Assigned)
        );
        c.remove_pod(&assumed.uid).unwrap();
        assert!(groups.get(&key).is_none(), "no object, no pods: gone");
    }

    #[test]
    fn pods_may_arrive_before_their_node() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_pod(pod_on("p", "late", "1")).unwrap();
        let mut snap = Snapshot::new();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 0);
        c.add_node(node("late", "a"));
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("late").unwrap().requested().milli_cpu, 1000);
    }
}
