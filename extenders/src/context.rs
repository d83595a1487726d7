//! [`Context`]: what a handler knows besides its arguments: the request,
//! the session's node and pod tables, cancellation, and the Permit decider.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::nodes::Nodes;
use crate::permit_decider::PermitDecider;
use crate::pods::Pods;

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
    /// handlers. Its decider answers
    /// [`DecisionError::SessionClosed`](crate::DecisionError::SessionClosed).
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
