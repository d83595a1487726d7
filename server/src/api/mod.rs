//! The gRPC services berthd serves on one port: `berth.v1.Scheduler`,
//! `berth.v1.Cluster`, `grpc.health.v1.Health` (per service) and server
//! reflection (v1 and v1alpha, so that every grpcurl can list and describe
//! the services without proto files). With a [`TlsConfig`] the port speaks
//! TLS only, and with a client CA it requires client certificates (mTLS).

mod cluster;
mod convert;
mod error;
mod scheduler;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use berth_proto::v1::cluster_server::ClusterServer;
use berth_proto::v1::scheduler_server::SchedulerServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

pub use cluster::ClusterApi;
pub use error::ApiError;
pub use scheduler::{SchedulerApi, dry_run_response};
pub use tls::{TlsConfig, TlsError, TlsFiles};

use crate::cluster::embedded::EmbeddedCluster;
use crate::scheduler::Scheduler;

/// Largest request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

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

/// Serves every service on `listener` until `shutdown` completes, over TLS
/// when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    scheduler: Scheduler,
    cluster: Arc<EmbeddedCluster>,
    tls: Option<TlsConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SchedulerServer<SchedulerApi>>().await;
    health.set_serving::<ClusterServer<ClusterApi>>().await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(berth_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(berth_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let scheduler_svc = SchedulerServer::new(SchedulerApi::new(scheduler))
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let cluster_svc =
        ClusterServer::new(ClusterApi::new(cluster)).max_decoding_message_size(MAX_REQUEST_BYTES);
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        server = server.tls_config(tls.server_config())?;
    }
    server
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(scheduler_svc)
        .add_service(cluster_svc)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

/// Binds `addr`, returning the listener and the address actually bound
/// (useful with port 0).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}
