//! [`Snapshot`]: the cluster as one scheduling cycle sees it.
//!
//! Taken from the cache at the start of each cycle and immutable during it.
//! Updating a snapshot copies only the nodes whose generation moved since the
//! last update (an `Arc` clone each: the cache copies a `NodeInfo` on write
//! only while a snapshot shares it). Dry-runs and simulations clone the
//! snapshot and change their clone.

use std::collections::HashMap;
use std::sync::Arc;

use super::node_info::NodeInfo;
use crate::model::PodRef;

/// Nodes in listing order, with an index by name.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(crate) list: Vec<Arc<NodeInfo>>,
    pub(crate) index: HashMap<Arc<str>, usize>,
    pub(crate) generation: u64,
    pub(crate) tree_version: u64,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// A snapshot of the given nodes, in order (for tests and simulations).
    pub fn from_nodes(nodes: Vec<NodeInfo>) -> Self {
        let mut s = Self::default();
        for n in nodes {
            let name: Arc<str> = Arc::from(n.name());
            s.index.insert(name, s.list.len());
            s.list.push(Arc::new(n));
        }
        s
    }

    /// Every node, in listing order (zones interleaved).
    pub fn list(&self) -> &[Arc<NodeInfo>] {
        &self.list
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
        true
    }
}
