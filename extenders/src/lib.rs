//! SDK for writing berth remote extenders in Rust.
//!
//! A remote extender is a process that serves some extension points of the
//! Kubernetes Scheduling Framework for `berthd`, over the one bidirectional
//! stream of `berth.extender.v1.Extender/Session` (berthd dials the
//! extender). With this crate an author implements only the traits of the
//! points served ([`PreFilter`], [`Filter`], [`PostFilter`], [`PreScore`],
//! [`Score`], [`Reserve`], [`Permit`], [`PreBind`], [`Bind`], [`PostBind`],
//! and for PodGroups' group cycles [`PlacementFeasible`],
//! [`PodGroupPostFilter`] and [`GroupPermit`]),
//! registers them with an [`ExtenderBuilder`], and serves. The SDK does the
//! rest of the protocol:
//!
//! - the handshake: `Hello` declares exactly the points registered, the
//!   score normalization and whether node objects are wanted;
//! - one session per stream (berthd reconnecting gets a fresh session, nodes
//!   are streamed again); state that must survive that lives in the author's
//!   handler values, which every session shares;
//! - the session's node cache (each `NodeUpsert` parsed once into a shared
//!   [`k8s_openapi`] `Node`, [`Context::nodes`]) and the cycles' pods (each
//!   `CycleStart` parsed once into a [`CyclePod`], dropped at `CycleEnd`);
//! - with [`ExtenderBuilder::wants_pods`], the session's pod table: the pods
//!   placed on each node, bound or assumed ([`Context::pods`]), kept from
//!   berthd's pod feed (`PodUpsert`, `PodDelete`);
//! - concurrent dispatch: each request runs in its own task, answers go back
//!   in any order, so a slow Permit or PreBind does not hold up the next
//!   cycle's Filter;
//! - `Cancel` and the request's timeout drop the handler's future (and
//!   cancel [`Context::cancellation`]); handler errors and panics become
//!   error answers, never a crashed session; malformed requests are answered
//!   with an error;
//! - batched Filter and Score with per-node defaults, answers checked
//!   (no node that was not asked about, scores in range) before they go out;
//! - preemption's what-if (`PreemptionFilterRequest`) answered from the
//!   Filter handler's per-node verdict on a pod table without the evicted
//!   pods (see [`preemption`]);
//! - Unreserve idempotence and ordering by reservation id (see [`Reserve`]);
//! - Permit waits decided later through a [`PermitDecider`];
//! - gRPC health (`grpc.health.v1`) and server reflection beside the
//!   service, and graceful shutdown.
//!
//! # Example
//!
//! An extender that keeps pods off nodes labelled `example.com/drain=true`
//! and prefers nodes with fewer pods of the same app it reserved:
//!
//! ```no_run
//! use std::collections::HashMap;
//! use std::sync::Arc;
//!
//! use berth_extender::*;
//! use parking_lot::Mutex;
//!
//! #[derive(Default)]
//! struct Drain {
//!     /// node -> how many pods this extender reserved there.
//!     placed: Mutex<HashMap<String, i64>>,
//! }
//!
//! impl Filter for Drain {
//!     fn filter(&self, _cx: &Context, _pod: &CyclePod, node: &NodeRef<'_>) -> Status {
//!         let draining = node
//!             .object()
//!             .and_then(|n| n.metadata.labels.as_ref())
//!             .is_some_and(|l| l.get("example.com/drain").is_some_and(|v| v == "true"));
//!         if draining {
//!             Status::unresolvable("node(s) are being drained")
//!         } else {
//!             Status::success()
//!         }
//!     }
//! }
//!
//! impl Score for Drain {
//!     fn score(&self, _cx: &Context, _pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
//!         let placed = self.placed.lock().get(node.name()).copied().unwrap_or(0);
//!         Ok(100 - placed.min(100))
//!     }
//! }
//!
//! #[async_trait]
//! impl Reserve for Drain {
//!     async fn reserve(&self, _cx: &Context, _pod: &CyclePod, r: &Reservation) -> HandlerResult<Status> {
//!         *self.placed.lock().entry(r.node.clone()).or_default() += 1;
//!         Ok(Status::success())
//!     }
//!
//!     async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
//!         // Called once per reservation id; tolerate one never reserved here.
//!         if u.prior == PriorReserve::Succeeded {
//!             if let Some(n) = self.placed.lock().get_mut(&u.node) {
//!                 *n -= 1;
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), ServeError> {
//!     let drain = Arc::new(Drain::default());
//!     ExtenderBuilder::new("drain")
//!         .filter(drain.clone())
//!         .score(drain.clone())
//!         .reserve(drain)
//!         .wants_nodes(true)
//!         .build()
//!         .serve("127.0.0.1:7070".parse().expect("a valid address"))
//!         .await
//! }
//! ```
//!
//! berthd enables it like a native plugin, by name, in a profile's plugin
//! lists, and finds it through its `berthExtenders` configuration (see the
//! crate's README).

#![warn(missing_docs)]

mod candidates;
mod context;
mod groups;
mod nodes;
mod permit_decider;
mod pods;
mod points;
pub mod preemption;
mod reservations;
pub mod resources;
mod server;
mod session;
mod session_core;
mod types;

pub use async_trait::async_trait;
pub use context::Context;
pub use groups::{
    CycleGroup, GroupAttempt, GroupMember, GroupPermit, GroupPostFilterResult, Placement,
    PlacementFeasible, PlacementProgress, PodAttempt, PodGroupPostFilter,
};
pub use nodes::Nodes;
pub use permit_decider::PermitDecider;
pub use pods::{PlacedPod, Pods};
pub use points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
pub use preemption::{CandidatePod, PreemptionCandidate, PreemptionVerdict};
pub use server::{
    DEFAULT_RESERVATION_MEMORY, Extender, ExtenderBuilder, MAX_MESSAGE_BYTES, ServeError,
    SessionService, shutdown_signal,
};
pub use session_core::DecisionError;
pub use types::{
    Code, CyclePod, ExtensionPoint, HandlerError, HandlerResult, NodeRef, NodeStatus,
    PermitOutcome, PodIdentity, PostFilterResult, PreFilterResult, PriorReserve, Reservation,
    ScoreNormalization, Status, Unreservation,
};

/// The protocol's generated types, for tests and tools that speak it
/// directly (for example a fake scheduler driving an extender).
pub use berth_proto::extender::v1 as proto;

/// Kubernetes API types as handlers receive them.
pub use k8s_openapi;

/// The cancellation token of [`Context::cancellation`] and
/// [`Extender::service`].
pub use tokio_util::sync::CancellationToken;
