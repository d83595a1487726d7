//! [`Nodes`]: a session's node table, every node berthd streamed, by the
//! id requests name it by and by name, copied on write so that a request
//! resolves its ids against the table as it was when it came.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use parking_lot::RwLock;

/// A session's node table: every node berthd streamed, by the id requests
/// name it by and by name, with its object (each `NodeUpsert` parsed once)
/// when the extender wants nodes.
///
/// Cheap to clone (a shared handle). berthd always sends a node before a
/// request naming it, so a handler finds every node of its request here.
#[derive(Debug, Clone, Default)]
pub struct Nodes {
    inner: Arc<RwLock<NodesInner>>,
}

/// One node of the table.
#[derive(Debug)]
pub(crate) struct NodeEntry {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) node: Option<Arc<Node>>,
}

/// A hasher for node ids (small integers berthd assigns): one multiply.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Ids below this are kept in a vector indexed by id (berthd assigns ids
/// from 1, in order); larger ones, which only a long churn of nodes
/// reaches, in a map.
const DENSE_IDS: u32 = 1 << 20;

/// The table by id: shared with the requests that use it, copied on write.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    dense: Vec<Option<Arc<NodeEntry>>>,
    sparse: HashMap<u32, Arc<NodeEntry>, BuildHasherDefault<IdHasher>>,
}

impl Table {
    /// The node with id `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&NodeEntry> {
        if id < DENSE_IDS {
            self.dense.get(id as usize)?.as_deref()
        } else {
            self.sparse.get(&id).map(|e| &**e)
        }
    }

    fn insert(&mut self, id: u32, e: NodeEntry) {
        if id < DENSE_IDS {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i] = Some(Arc::new(e));
        } else {
            self.sparse.insert(id, Arc::new(e));
        }
    }

    fn remove(&mut self, id: u32) -> Option<Arc<NodeEntry>> {
        if id < DENSE_IDS {
            self.dense.get_mut(id as usize)?.take()
        } else {
            self.sparse.remove(&id)
        }
    }

    fn values(&self) -> impl Iterator<Item = &NodeEntry> {
        self.dense
            .iter()
            .filter_map(|e| e.as_deref())
            .chain(self.sparse.values().map(|e| &**e))
    }
}

#[derive(Debug, Default)]
struct NodesInner {
    by_id: Arc<Table>,
    by_name: BTreeMap<String, u32>,
    synced: bool,
}

impl Nodes {
    /// A cache holding `nodes` (keyed by `metadata.name`, with ids 1, 2,
    /// ... in order), marked synced: for unit tests of handlers.
    pub fn from_nodes(nodes: impl IntoIterator<Item = Node>) -> Self {
        let this = Self::default();
        for (i, n) in nodes.into_iter().enumerate() {
            let name = n.metadata.name.clone().unwrap_or_default();
            this.upsert(i as u32 + 1, name, Some(Arc::new(n)));
        }
        this.set_synced();
        this
    }

    /// The node named `name`, if the table has its object.
    pub fn get(&self, name: &str) -> Option<Arc<Node>> {
        let inner = self.inner.read();
        let id = inner.by_name.get(name)?;
        inner.by_id.get(*id)?.node.clone()
    }

    /// The id berthd gave the node named `name`.
    pub fn id_of(&self, name: &str) -> Option<u32> {
        self.inner.read().by_name.get(name).copied()
    }

    /// The name of the node with id `id`.
    pub fn name_of(&self, id: u32) -> Option<String> {
        self.inner.read().by_id.get(id).map(|e| e.name.clone())
    }

    /// Whether the table has `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.read().by_name.contains_key(name)
    }

    /// How many nodes the table has.
    pub fn len(&self) -> usize {
        self.inner.read().by_name.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.read().by_name.is_empty()
    }

    /// Whether berthd said every node that existed when the stream opened
    /// has been sent (`NodesSynced`).
    pub fn is_synced(&self) -> bool {
        self.inner.read().synced
    }

    /// The nodes' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.inner.read().by_name.keys().cloned().collect()
    }

    /// Every node whose object the table has, by name (a copy of the map;
    /// the nodes are shared).
    pub fn snapshot(&self) -> BTreeMap<String, Arc<Node>> {
        let inner = self.inner.read();
        inner
            .by_id
            .values()
            .filter_map(|e| Some((e.name.clone(), e.node.clone()?)))
            .collect()
    }

    /// The table as it is now, for resolving a request's ids.
    pub(crate) fn table(&self) -> Arc<Table> {
        self.inner.read().by_id.clone()
    }

    pub(crate) fn upsert(&self, id: u32, name: String, node: Option<Arc<Node>>) {
        let mut inner = self.inner.write();
        if let Some(old) = inner.by_name.insert(name.clone(), id)
            && old != id
        {
            Arc::make_mut(&mut inner.by_id).remove(old);
        }
        Arc::make_mut(&mut inner.by_id).insert(id, NodeEntry { id, name, node });
    }

    pub(crate) fn remove(&self, id: u32) -> bool {
        let mut inner = self.inner.write();
        let Some(e) = Arc::make_mut(&mut inner.by_id).remove(id) else {
            return false;
        };
        inner.by_name.remove(&e.name);
        true
    }

    pub(crate) fn set_synced(&self) {
        self.inner.write().synced = true;
    }
}
