//! The gRPC services berthd serves on one port: `berth.v1.Scheduler`,
//! `berth.v1.Cluster`, `grpc.health.v1.Health` (per service) and server
//! reflection (v1 and v1alpha, so that every grpcurl can list and describe
//! the services without proto files). With a [`TlsConfig`] the port speaks
//! TLS only, and with a client CA it requires client certificates (mTLS).

mod cluster;
mod convert;
mod error;
pub mod limits;
pub mod paging;
pub mod replay;
mod scheduler;
mod scheduler_groups;
pub mod simulations;
mod tls;

use std::net::SocketAddr;

use berth_proto::v1::cluster_server::ClusterServer;
use berth_proto::v1::scheduler_server::SchedulerServer;
use futures::Stream;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use cluster::{ClusterApi, ClusterBackend};
pub use error::ApiError;
pub use scheduler::{SchedulerApi, dry_run_response};
pub use tls::{TlsConfig, TlsError, TlsFiles};

use crate::scheduler::Scheduler;

/// Largest request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = berth_proto::MAX_REQUEST_BYTES;

/// Largest answer sent, in bytes (what berth's clients accept). Lists are
/// paged far below it; a DryRun of a 15,000-node cluster with every node
/// evaluated is about 8 MiB.
pub const MAX_RESPONSE_BYTES: usize = berth_proto::MAX_RESPONSE_BYTES;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptors.
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The server failed.
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Tells the services' response streams that the server is shutting down.
/// The server waits for every open call to finish before it stops, so a
/// stream that never ends by itself (a client watching events) must end
/// here, or it would hold berthd's shutdown up for as long as the client
/// stays connected.
#[derive(Debug, Clone)]
pub struct Closing(Option<watch::Receiver<bool>>);

impl Closing {
    /// Never closes: for services used outside [`serve`].
    pub fn never() -> Self {
        Self(None)
    }

    /// A handle that closes when `true` is sent.
    pub fn new(rx: watch::Receiver<bool>) -> Self {
        Self(Some(rx))
    }

    /// Whether the server is shutting down.
    fn is_closed(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Resolves once closing (or once the sender is gone).
    async fn wait(self) {
        match self.0 {
            Some(mut rx) => {
                let _ = rx.wait_for(|closing| *closing).await;
            }
            None => std::future::pending().await,
        }
    }

    /// `stream`, ending when the server starts shutting down.
    fn end<S: Stream + Send + 'static>(
        &self,
        stream: S,
    ) -> impl Stream<Item = S::Item> + Send + use<S> {
        futures::StreamExt::take_until(stream, Box::pin(self.clone().wait()))
    }
}

/// Serves every service on `listener` until `shutdown` completes, over TLS
/// when `tls` is given. Open streams end when `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    scheduler: Scheduler,
    cluster: impl Into<ClusterBackend>,
    tls: Option<TlsConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SchedulerServer<SchedulerApi>>().await;
    health.set_serving::<ClusterServer<ClusterApi>>().await;
    // Both reflection services advertise both versions, so that a listing
    // through either (grpcurl up to 1.8 asks v1alpha) shows every service
    // on the port.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(berth_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (closing_tx, closing) = watch::channel(false);
    let closing = Closing::new(closing);
    let scheduler_svc =
        SchedulerServer::new(SchedulerApi::new(scheduler).closing_on(closing.clone()))
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(MAX_RESPONSE_BYTES);
    let cluster_svc = ClusterServer::new(ClusterApi::new(cluster).closing_on(closing))
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .max_encoding_message_size(MAX_RESPONSE_BYTES);
    let shutdown = async move {
        shutdown.await;
        let _ = closing_tx.send(true);
    };
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        server = server.tls_config(tls.server_config())?;
    }
    server
        .layer(limits::ConcurrencyLimits::default())
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(scheduler_svc)
        .add_service(cluster_svc)
        .serve_with_incoming_shutdown(incoming(listener), shutdown)
        .await?;
    Ok(())
}

/// The connections `listener` accepts, each with `TCP_NODELAY` set. tonic
/// sets it only on listeners it binds itself; without it, Nagle's algorithm
/// holds a unary answer's last frame (the trailers) until the client's
/// delayed ACK, about 40 ms later, so every call took 44 ms.
fn incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Binds `addr`, returning the listener and the address actually bound
/// (useful with port 0).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}
