//! [`Snapshot`]: the cluster as one scheduling cycle sees it.
//!
//! Taken from the cache at the start of each cycle and immutable during it.
//! Updating a snapshot copies only the nodes whose generation moved since the
//! last update (an `Arc` clone each: the cache copies a `NodeInfo` on write
//! only while a snapshot shares it). Dry-runs and simulations clone the
//! snapshot and change their clone.

use std::sync::Arc;

use super::node_info::NodeInfo;
use crate::model::PodRef;

/// Nodes in listing order, with an index by name.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(crate) list: Vec<Arc<NodeInfo>>,
    /// Each listed node's name, in the list's order: what a cycle reads of
    /// the nodes it reuses, without touching them.
    pub(crate) names: Vec<Arc<str>>,
    pub(crate) index: crate::model::NodeNameMap<usize>,
    pub(crate) generation: u64,
    pub(crate) tree_version: u64,
    /// Positions of nodes with pods that have pod (anti-)affinity terms.
    pub(crate) with_affinity: Vec<usize>,
    /// Positions of nodes with pods that have required anti-affinity terms.
    pub(crate) with_required_anti_affinity: Vec<usize>,
    /// How many nodes have each image.
    pub(crate) image_nodes: Arc<super::ImageCounts>,
    pub(crate) images_version: u64,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// One empty snapshot, shared: what the loop publishes while it changes
    /// its own in place (a reference count, not an allocation, twice for
    /// every pod of a group cycle).
    pub fn empty() -> Arc<Self> {
        static EMPTY: std::sync::OnceLock<Arc<Snapshot>> = std::sync::OnceLock::new();
        EMPTY.get_or_init(Arc::default).clone()
    }

    /// A snapshot of the given nodes, in order (for tests and simulations).
    pub fn from_nodes(nodes: Vec<NodeInfo>) -> Self {
        let mut s = Self::default();
        let mut images = super::ImageCounts::default();
        for n in nodes {
            let name: Arc<str> = Arc::from(n.name());
            let names: std::collections::BTreeSet<&Arc<str>> = n
                .node()
                .into_iter()
                .flat_map(|n| n.images.iter().flat_map(|i| i.names.iter()))
                .collect();
            for name in names {
                *images.entry(name.clone()).or_default() += 1;
            }
            s.index.insert(name.clone(), s.list.len());
            s.names.push(name);
            s.list.push(Arc::new(n));
        }
        s.image_nodes = Arc::new(images);
        s.rebuild_affinity_lists();
        s
    }

    pub(crate) fn rebuild_affinity_lists(&mut self) {
        self.with_affinity = (0..self.list.len())
            .filter(|&i| !self.list[i].pods_with_affinity().is_empty())
            .collect();
        self.with_required_anti_affinity = (0..self.list.len())
            .filter(|&i| !self.list[i].pods_with_required_anti_affinity().is_empty())
            .collect();
    }

    /// Keeps the affinity lists right after the node at `i` changed.
    pub(crate) fn node_changed(&mut self, i: usize) {
        let n = &self.list[i];
        let (a, r) = (
            !n.pods_with_affinity().is_empty(),
            !n.pods_with_required_anti_affinity().is_empty(),
        );
        for (list, want) in [
            (&mut self.with_affinity, a),
            (&mut self.with_required_anti_affinity, r),
        ] {
            match (list.binary_search(&i), want) {
                (Ok(_), true) | (Err(_), false) => {}
                (Ok(at), false) => {
                    list.remove(at);
                }
                (Err(at), true) => list.insert(at, i),
            }
        }
    }

    /// Nodes with pods that have pod affinity or anti-affinity terms.
    pub fn have_pods_with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.with_affinity.iter().map(|&i| &self.list[i])
    }

    /// Nodes with pods that have required pod anti-affinity terms.
    pub fn have_pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.with_required_anti_affinity
            .iter()
            .map(|&i| &self.list[i])
    }

    /// How many nodes have the image `name`.
    pub fn image_num_nodes(&self, name: &str) -> usize {
        self.image_nodes.get(name).copied().unwrap_or(0)
    }

    /// Every node, in listing order (zones interleaved).
    pub fn list(&self) -> &[Arc<NodeInfo>] {
        &self.list
    }

    /// The name of the node at `position` of [`Snapshot::list`].
    pub fn name_at(&self, position: usize) -> Option<&str> {
        self.names.get(position).map(|n| &**n)
    }

    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.list.len()
    }

    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.list[i])
    }

    /// The position of `name` in [`Snapshot::list`].
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The version of the node list (its set and order): it moves when a
    /// node is added or removed, not when one changes.
    pub fn tree_version(&self) -> u64 {
        self.tree_version
    }

    /// The cache generation this snapshot reflects.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Places `pod` (its `node_name` set) on its node in this snapshot only:
    /// how simulations let later pods see earlier placements.
    pub fn assume_pod(&mut self, pod: PodRef) -> bool {
        let Some(node) = pod.node_name.as_deref() else {
            return false;
        };
        let Some(&i) = self.index.get(node) else {
            return false;
        };
        Arc::make_mut(&mut self.list[i]).add_pod(pod);
        self.node_changed(i);
        true
    }

    /// [`Snapshot::assume_pod`] for a group cycle's trial: also returns
    /// the node before and after (a copy is always made, the node before
    /// being held), for the cache to take over if the placement goes ahead
    /// unchanged (see [`TrialNode`](super::TrialNode)).
    pub fn assume_trial_pod(&mut self, pod: PodRef) -> Option<super::TrialNode> {
        let i = *self.index.get(pod.node_name.as_deref()?)?;
        let base = self.list[i].clone();
        self.assume_pod(pod);
        Some(super::TrialNode {
            base,
            placed: self.list[i].clone(),
        })
    }

    /// Undoes [`Snapshot::assume_trial_pod`]: the node goes back to the
    /// version before the pod was placed when it still holds the trial's
    /// (placements are undone last first), with no copy made; otherwise
    /// the pod is removed from it.
    pub fn undo_trial_pod(&mut self, node: &str, uid: &str, trial: Option<&super::TrialNode>) {
        let Some(&i) = self.index.get(node) else {
            return;
        };
        match trial {
            Some(t) if Arc::ptr_eq(&self.list[i], &t.placed) => {
                self.list[i] = t.base.clone();
                self.node_changed(i);
            }
            _ => {
                self.remove_pod(node, uid);
            }
        }
    }

    /// Removes the pod with `uid` from `node` in this snapshot only (dry
    /// runs of preemption).
    pub fn remove_pod(&mut self, node: &str, uid: &str) -> bool {
        let Some(&i) = self.index.get(node) else {
            return false;
        };
        let removed = Arc::make_mut(&mut self.list[i]).remove_pod(uid).is_some();
        self.node_changed(i);
        removed
    }
}
