//! The builder, the built extender, and serving it over gRPC.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use berth_proto::extender::v1 as pb;
use pb::extender_server::{Extender as ExtenderRpc, ExtenderServer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::groups::{GroupPermit, PlacementFeasible, PodGroupPostFilter};
use crate::points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
use crate::reservations::ReservationBook;
use crate::session::{self, Handlers, Shared};
use crate::session_core::{Outbound, SessionCore};
use crate::types::{ExtensionPoint, ScoreNormalization};

/// Largest message accepted from berthd, in bytes (node objects can be big).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How many reservation ids the SDK remembers by default (see [`Reserve`]).
pub const DEFAULT_RESERVATION_MEMORY: usize = 100_000;

/// Builds an [`Extender`] from the handlers of the points it serves.
///
/// ```
/// # use berth_extender::*;
/// # struct Gpu;
/// # impl Filter for Gpu {
/// #     fn filter(&self, _: &Context, _: &CyclePod, _: &NodeRef<'_>) -> Status { Status::success() }
/// # }
/// let extender = ExtenderBuilder::new("gpu").filter(Gpu).wants_nodes(true).build();
/// assert_eq!(extender.points(), &[ExtensionPoint::Filter]);
/// ```
pub struct ExtenderBuilder {
    name: String,
    handlers: Handlers,
    wants_nodes: bool,
    wants_pods: bool,
    reservation_memory: usize,
}

impl ExtenderBuilder {
    /// An extender called `name` (what berthd logs and reports in reasons)
    /// serving nothing yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            handlers: Handlers::default(),
            wants_nodes: false,
            wants_pods: false,
            reservation_memory: DEFAULT_RESERVATION_MEMORY,
        }
    }

    /// Serves PreFilter.
    pub fn pre_filter(mut self, h: impl PreFilter) -> Self {
        self.handlers.pre_filter = Some(Arc::new(h));
        self
    }

    /// Serves Filter.
    pub fn filter(mut self, h: impl Filter) -> Self {
        self.handlers.filter = Some(Arc::new(h));
        self
    }

    /// Serves PostFilter.
    pub fn post_filter(mut self, h: impl PostFilter) -> Self {
        self.handlers.post_filter = Some(Arc::new(h));
        self
    }

    /// Serves PreScore.
    pub fn pre_score(mut self, h: impl PreScore) -> Self {
        self.handlers.pre_score = Some(Arc::new(h));
        self
    }

    /// Serves Score (and NormalizeScore, with
    /// [`ScoreNormalization::Extender`]).
    pub fn score(mut self, h: impl Score) -> Self {
        self.handlers.score = Some(Arc::new(h));
        self
    }

    /// Serves Reserve and Unreserve.
    pub fn reserve(mut self, h: impl Reserve) -> Self {
        self.handlers.reserve = Some(Arc::new(h));
        self
    }

    /// Serves Permit.
    pub fn permit(mut self, h: impl Permit) -> Self {
        self.handlers.permit = Some(Arc::new(h));
        self
    }

    /// Serves PlacementFeasible (group cycles).
    pub fn placement_feasible(mut self, h: impl PlacementFeasible) -> Self {
        self.handlers.groups.placement_feasible = Some(Arc::new(h));
        self
    }

    /// Serves PodGroupPostFilter (group cycles).
    pub fn pod_group_post_filter(mut self, h: impl PodGroupPostFilter) -> Self {
        self.handlers.groups.pod_group_post_filter = Some(Arc::new(h));
        self
    }

    /// Serves GroupPermit (group cycles; berth's point).
    pub fn group_permit(mut self, h: impl GroupPermit) -> Self {
        self.handlers.groups.group_permit = Some(Arc::new(h));
        self
    }

    /// Serves PreBind.
    pub fn pre_bind(mut self, h: impl PreBind) -> Self {
        self.handlers.pre_bind = Some(Arc::new(h));
        self
    }

    /// Serves Bind.
    pub fn bind(mut self, h: impl Bind) -> Self {
        self.handlers.bind = Some(Arc::new(h));
        self
    }

    /// Serves PostBind.
    pub fn post_bind(mut self, h: impl PostBind) -> Self {
        self.handlers.post_bind = Some(Arc::new(h));
        self
    }

    /// Notifies `h` of cycles starting and ending (declares nothing).
    pub fn cycle_hooks(mut self, h: impl CycleHooks) -> Self {
        self.handlers.hooks = Some(Arc::new(h));
        self
    }

    /// Whether berthd should stream node objects into the sessions' node
    /// caches ([`Context::nodes`](crate::Context::nodes)). Default: false.
    pub fn wants_nodes(mut self, wants: bool) -> Self {
        self.wants_nodes = wants;
        self
    }

    /// Whether berthd should stream the pods placed on the nodes, bound or
    /// assumed, into the sessions' pod tables
    /// ([`Context::pods`](crate::Context::pods)). Default: false (the
    /// table stays empty).
    pub fn wants_pods(mut self, wants: bool) -> Self {
        self.wants_pods = wants;
        self
    }

    /// How many reservation ids to remember for Unreserve idempotence
    /// (default [`DEFAULT_RESERVATION_MEMORY`], at least 1).
    pub fn reservation_memory(mut self, ids: usize) -> Self {
        self.reservation_memory = ids;
        self
    }

    /// The extender. Its handshake declares exactly the points registered.
    pub fn build(self) -> Extender {
        let h = &self.handlers;
        let points: Vec<ExtensionPoint> = [
            (h.pre_filter.is_some(), ExtensionPoint::PreFilter),
            (h.filter.is_some(), ExtensionPoint::Filter),
            (h.post_filter.is_some(), ExtensionPoint::PostFilter),
            (h.pre_score.is_some(), ExtensionPoint::PreScore),
            (h.score.is_some(), ExtensionPoint::Score),
            (h.reserve.is_some(), ExtensionPoint::Reserve),
            (h.permit.is_some(), ExtensionPoint::Permit),
            (h.pre_bind.is_some(), ExtensionPoint::PreBind),
            (h.bind.is_some(), ExtensionPoint::Bind),
            (h.post_bind.is_some(), ExtensionPoint::PostBind),
            (
                h.groups.placement_feasible.is_some(),
                ExtensionPoint::PlacementFeasible,
            ),
            (
                h.groups.pod_group_post_filter.is_some(),
                ExtensionPoint::PodGroupPostFilter,
            ),
            (h.groups.group_permit.is_some(), ExtensionPoint::GroupPermit),
        ]
        .into_iter()
        .filter_map(|(served, p)| served.then_some(p))
        .collect();
        if points.is_empty() {
            warn!(extender = %self.name, "the extender serves no extension point");
        }
        let normalization = h
            .score
            .as_ref()
            .map_or(ScoreNormalization::None, |s| s.normalization());
        Extender {
            shared: Arc::new(Shared {
                name: self.name,
                handlers: self.handlers,
                wants_nodes: self.wants_nodes,
                wants_pods: self.wants_pods,
                normalization,
                points,
                reservations: ReservationBook::new(self.reservation_memory),
                next_session: AtomicU64::new(1),
            }),
        }
    }
}

/// A built extender: serve it with [`Extender::serve`] and friends, or mount
/// [`Extender::service`] in a tonic server of your own.
///
/// Cheap to clone; clones share the handlers and the reservation memory.
#[derive(Clone)]
pub struct Extender {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Extender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extender")
            .field("name", &self.shared.name)
            .field("points", &self.shared.points)
            .field("wants_nodes", &self.shared.wants_nodes)
            .field("wants_pods", &self.shared.wants_pods)
            .finish()
    }
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The reflection service could not be built.
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The gRPC server failed.
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

impl Extender {
    /// The extender's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The extension points it declares, in the framework's order.
    pub fn points(&self) -> &[ExtensionPoint] {
        &self.shared.points
    }

    /// Whether it asks berthd for node objects.
    pub fn wants_nodes(&self) -> bool {
        self.shared.wants_nodes
    }

    /// Whether it asks berthd for the pod feed.
    pub fn wants_pods(&self) -> bool {
        self.shared.wants_pods
    }

    /// How its Score answers are normalized.
    pub fn score_normalization(&self) -> ScoreNormalization {
        self.shared.normalization
    }

    /// The handshake it answers `Open` with.
    pub fn hello(&self) -> pb::Hello {
        self.shared.hello()
    }

    /// The `berth.extender.v1.Extender` service alone, to add to a tonic
    /// server of your own. Its sessions end when `stop` is cancelled.
    pub fn service(&self, stop: CancellationToken) -> ExtenderServer<SessionService> {
        ExtenderServer::new(SessionService {
            shared: self.shared.clone(),
            stop,
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Binds `addr` and serves until SIGINT or SIGTERM.
    pub async fn serve(self, addr: SocketAddr) -> Result<(), ServeError> {
        self.serve_with_shutdown(addr, shutdown_signal()).await
    }

    /// Binds `addr` and serves until `signal` completes.
    pub async fn serve_with_shutdown(
        self,
        addr: SocketAddr,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        self.serve_with_incoming_shutdown(listener, signal).await
    }

    /// Serves on `listener` until SIGINT or SIGTERM.
    pub async fn serve_with_incoming(self, listener: TcpListener) -> Result<(), ServeError> {
        self.serve_with_incoming_shutdown(listener, shutdown_signal())
            .await
    }

    /// Serves on `listener` until `signal` completes: the extender service,
    /// `grpc.health.v1.Health` (overall and for `berth.extender.v1.Extender`)
    /// and server reflection (v1 and v1alpha).
    ///
    /// Shutdown is graceful: health turns NOT_SERVING, the listener stops
    /// accepting, every session ends (berthd fails what was in flight and
    /// reconnects elsewhere or later), Reserve and Unreserve handlers still
    /// running finish, and this returns.
    pub async fn serve_with_incoming_shutdown(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<ExtenderServer<SessionService>>().await;
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(berth_proto::extender::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(berth_proto::extender::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;

        let stop = CancellationToken::new();
        let watcher = {
            let stop = stop.clone();
            let health = health.clone();
            let name = self.shared.name.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = signal => {}
                    _ = stop.cancelled() => {}
                }
                info!(extender = %name, "shutting down");
                health
                    .set_not_serving::<ExtenderServer<SessionService>>()
                    .await;
                health
                    .set_service_status("", tonic_health::ServingStatus::NotServing)
                    .await;
                stop.cancel();
            })
        };
        let result = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(self.service(stop.clone()))
            .serve_with_incoming_shutdown(
                // Sessions exchange small messages both ways: without
                // TCP_NODELAY, Nagle's algorithm holds an answer back until
                // the scheduler's delayed ACK (tens of ms on Linux), and a
                // cycle waits that long. tonic sets it only on connections
                // it accepts itself.
                TcpListenerStream::new(listener).map(|conn| {
                    conn.inspect(|s| {
                        if let Err(e) = s.set_nodelay(true) {
                            warn!(error = %e, "cannot set TCP_NODELAY");
                        }
                    })
                }),
                stop.clone().cancelled_owned(),
            )
            .await;
        // If the server failed on its own, end the sessions and the watcher.
        stop.cancel();
        let _ = watcher.await;
        result?;
        Ok(())
    }
}

/// The tonic service behind [`Extender::service`]: one session per
/// `Session` stream.
pub struct SessionService {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

#[tonic::async_trait]
impl ExtenderRpc for SessionService {
    type SessionStream = UnboundedReceiverStream<Outbound>;

    async fn session(
        &self,
        request: tonic::Request<tonic::Streaming<pb::SchedulerMessage>>,
    ) -> Result<tonic::Response<Self::SessionStream>, tonic::Status> {
        if self.stop.is_cancelled() {
            return Err(tonic::Status::unavailable("the extender is shutting down"));
        }
        let id = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let core = SessionCore::new(id, tx);
        tokio::spawn(session::run(
            self.shared.clone(),
            request.into_inner(),
            core,
            self.stop.clone(),
        ));
        Ok(tonic::Response::new(UnboundedReceiverStream::new(rx)))
    }
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the extender");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
