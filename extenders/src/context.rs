//! What a handler knows besides its arguments: the request, the session's
//! node cache, cancellation, and the Permit decider.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    pub(crate) decider: PermitDecider,
    pub(crate) session_id: u64,
    pub(crate) scheduler: Arc<str>,
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
            decider: PermitDecider {
                session: Weak::new(),
            },
            session_id: 0,
            scheduler: Arc::from(""),
        }
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

    /// The session's node cache: every node berthd streamed, parsed once
    /// (empty unless the extender wants nodes).
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
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

/// A session's node cache: name -> Node, each parsed once per `NodeUpsert`.
///
/// Cheap to clone (a shared handle). berthd always sends a node before a
/// request naming it, so a handler finds every node of its request here
/// (when the extender wants nodes).
#[derive(Debug, Clone, Default)]
pub struct Nodes {
    inner: Arc<RwLock<NodesInner>>,
}

#[derive(Debug, Default)]
struct NodesInner {
    map: BTreeMap<String, Arc<Node>>,
    synced: bool,
}

impl Nodes {
    /// A cache holding `nodes` (keyed by `metadata.name`), marked synced:
    /// for unit tests of handlers.
    pub fn from_nodes(nodes: impl IntoIterator<Item = Node>) -> Self {
        let this = Self::default();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            this.upsert(name, Arc::new(n));
        }
        this.set_synced();
        this
    }

    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Node>> {
        self.inner.read().map.get(name).cloned()
    }

    /// Whether the cache has `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.read().map.contains_key(name)
    }

    /// How many nodes the cache has.
    pub fn len(&self) -> usize {
        self.inner.read().map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.read().map.is_empty()
    }

    /// Whether berthd said every node that existed when the stream opened
    /// has been sent (`NodesSynced`).
    pub fn is_synced(&self) -> bool {
        self.inner.read().synced
    }

    /// The nodes' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.inner.read().map.keys().cloned().collect()
    }

    /// Every node, by name (a copy of the map; the nodes are shared).
    pub fn snapshot(&self) -> BTreeMap<String, Arc<Node>> {
        self.inner.read().map.clone()
    }

    pub(crate) fn upsert(&self, name: String, node: Arc<Node>) {
        self.inner.write().map.insert(name, node);
    }

    pub(crate) fn remove(&self, name: &str) -> bool {
        self.inner.write().map.remove(name).is_some()
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
