//! What a handler knows besides its arguments: the request, the session's
//! node cache, cancellation, and the Permit decider.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pods::Pods;
use crate::session::SessionCore;

/// The context of one request, passed to every handler.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) request_id: u64,
    pub(crate) cycle_id: u64,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) token: CancellationToken,
    pub(crate) nodes: Nodes,
    pub(crate) pods: Pods,
    pub(crate) decider: PermitDecider,
    pub(crate) session_id: u64,
    pub(crate) scheduler: Arc<str>,
    pub(crate) dry_run: bool,
}

impl Context {
    /// A context attached to no session, over `nodes`: for unit tests of
    /// handlers. Its decider answers [`DecisionError::SessionClosed`].
    pub fn standalone(nodes: Nodes) -> Self {
        Self {
            request_id: 0,
            cycle_id: 0,
            timeout: None,
            deadline: None,
            token: CancellationToken::new(),
            nodes,
            pods: Pods::default(),
            decider: PermitDecider {
                session: Weak::new(),
            },
            session_id: 0,
            scheduler: Arc::from(""),
            dry_run: false,
        }
    }

    /// Whether the request is part of a what-if evaluation (berthd's
    /// DryRun or Simulate, as PostFilter, PodGroupPostFilter and
    /// GroupPermit requests say): answer what you would do, and change
    /// nothing (evict no pod, reserve no quota).
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The request's id (unique on its stream).
    pub fn request_id(&self) -> u64 {
        self.request_id
    }

    /// The cycle the request belongs to.
    pub fn cycle_id(&self) -> u64 {
        self.cycle_id
    }

    /// How long berthd waits for the answer, if it said.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// When the SDK stops waiting for the handler (received + timeout).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The session's node table: every node berthd streamed, by id and
    /// name, with its object parsed once when the extender wants nodes.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The session's pod table: the pods placed on each node, bound or
    /// assumed (empty unless the extender asked for them with
    /// [`ExtenderBuilder::wants_pods`](crate::ExtenderBuilder::wants_pods)).
    pub fn pods(&self) -> &Pods {
        &self.pods
    }

    /// This context over `pods` instead: for unit tests of handlers.
    pub fn with_pods(mut self, pods: Pods) -> Self {
        self.pods = pods;
        self
    }

    /// Cancelled when berthd cancels the request, its timeout passes, or the
    /// session ends. Most handlers need not look: the SDK drops their future
    /// then (except Reserve and Unreserve, which run to completion; see
    /// [`Reserve`](crate::Reserve)).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.token
    }

    /// Whether the request was cancelled (see [`Context::cancellation`]).
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// A decider bound to this request's session, to decide later for pods
    /// that wait at Permit (cloneable, keep it beyond the handler).
    pub fn permit_decider(&self) -> PermitDecider {
        self.decider.clone()
    }

    /// The session's number in this process (for logs).
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The scheduler's name and version, as it introduced itself in `Open`
    /// (for example "berthd/0.1.0").
    pub fn scheduler(&self) -> &str {
        &self.scheduler
    }
}

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

/// Decides, later, for pods that wait at Permit on the session it came from.
///
/// Obtained from [`Context::permit_decider`]; cloneable and cheap. It holds
/// no strong reference to the session: once the stream is gone, deciding
/// fails with [`DecisionError::SessionClosed`] (berthd has then failed the
/// waiting pods itself).
#[derive(Debug, Clone)]
pub struct PermitDecider {
    pub(crate) session: Weak<SessionCore>,
}

impl PermitDecider {
    /// Sends a `PermitDecision` for the pod whose Permit (reservation
    /// `reservation_id`) answered Wait: allow it (`allow`), or reject it
    /// with `reasons`.
    ///
    /// If that Permit handler is still running, the decision is kept and
    /// becomes its answer when it returns Wait (it is dropped if the handler
    /// allows or rejects by itself).
    pub fn decide(
        &self,
        reservation_id: &str,
        allow: bool,
        reasons: Vec<String>,
    ) -> Result<(), DecisionError> {
        let core = self.session.upgrade().ok_or(DecisionError::SessionClosed)?;
        core.decide(reservation_id, allow, reasons)
    }

    /// Allows the waiting pod of `reservation_id`.
    pub fn allow(&self, reservation_id: &str) -> Result<(), DecisionError> {
        self.decide(reservation_id, true, Vec::new())
    }

    /// Rejects the waiting pod of `reservation_id` with `reason`.
    pub fn reject(
        &self,
        reservation_id: &str,
        reason: impl Into<String>,
    ) -> Result<(), DecisionError> {
        self.decide(reservation_id, false, vec![reason.into()])
    }

    /// Whether the session this decider belongs to is still open.
    pub fn is_open(&self) -> bool {
        self.session.upgrade().is_some_and(|c| !c.is_closed())
    }
}

/// Why a Permit decision could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// The session the Permit came in on has ended.
    #[error("the session of this permit has ended")]
    SessionClosed,
    /// No pod of that reservation waits at Permit on this session (never
    /// answered Wait, already decided, or unreserved since).
    #[error("no pod waits at permit with reservation {0}")]
    NotWaiting(String),
}
