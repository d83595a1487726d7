//! A typed async client for berth's gRPC API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_client::ClientError> {
//! let mut client = berth_client::Client::connect("http://127.0.0.1:50051").await?;
//! for pod in client.get_queue("").await? {
//!     println!("{}/{}: {}", pod.namespace, pod.name, pod.last_failure);
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

use berth_proto::json::from_struct;
use berth_proto::v1::cluster_client::ClusterClient;
use berth_proto::v1::scheduler_client::SchedulerClient;
use berth_proto::v1::{GetQueueRequest, GetRequest, ListRequest};
use tonic::transport::{Channel, Endpoint};

pub use berth_proto::v1::{QueueName, QueuedPod};

/// What went wrong talking to berthd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a valid URI.
    #[error("invalid server address {addr:?}: {message}")]
    Address {
        /// The address given.
        addr: String,
        /// Why it is invalid.
        message: String,
    },
    /// No connection could be made.
    #[error("cannot connect to berthd at {addr}: {message}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The transport's reason.
        message: String,
    },
    /// The server answered with an error.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
}

/// A connection to berthd.
#[derive(Debug, Clone)]
pub struct Client {
    scheduler: SchedulerClient<Channel>,
    cluster: ClusterClient<Channel>,
    channel: Channel,
}

/// Adds `http://` to a bare `host:port`.
pub fn normalize_addr(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

impl Client {
    /// Connects to berthd at `addr` (`host:port` or a URI).
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        let uri = normalize_addr(addr);
        let endpoint = Endpoint::from_shared(uri.clone()).map_err(|e| ClientError::Address {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
        let channel = endpoint.connect().await.map_err(|e| {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                let text = s.to_string();
                if !message.contains(&text) {
                    message = format!("{message}: {text}");
                }
                source = s.source();
            }
            ClientError::Connect { addr: uri, message }
        })?;
        Ok(Self::from_channel(channel))
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> Self {
        Self {
            scheduler: SchedulerClient::new(channel.clone()),
            cluster: ClusterClient::new(channel.clone()),
            channel,
        }
    }

    /// The underlying channel (for other services on the same port).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// The pods waiting to be scheduled (`namespace` empty: all).
    pub async fn get_queue(&mut self, namespace: &str) -> Result<Vec<QueuedPod>, ClientError> {
        let r = self
            .scheduler
            .get_queue(GetQueueRequest {
                namespace: namespace.to_string(),
            })
            .await?;
        Ok(r.into_inner().pods)
    }

    /// Objects of `kind` ("Node", "Pod") as Kubernetes JSON.
    pub async fn list(
        &mut self,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<serde_json::Value>, ClientError> {
        let r = self
            .cluster
            .list(ListRequest {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
            })
            .await?;
        Ok(r.into_inner().items.iter().map(from_struct).collect())
    }

    /// One object as Kubernetes JSON.
    pub async fn get(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<serde_json::Value, ClientError> {
        let r = self
            .cluster
            .get(GetRequest {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
            .await?;
        Ok(r.into_inner()
            .object
            .as_ref()
            .map(from_struct)
            .unwrap_or_default())
    }

    /// The serving status of `service` by gRPC health checking ("" for the
    /// server as a whole).
    pub async fn health(&self, service: &str) -> Result<bool, ClientError> {
        use tonic_health::pb::health_check_response::ServingStatus;
        let mut h = tonic_health::pb::health_client::HealthClient::new(self.channel.clone());
        let r = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.to_string(),
            })
            .await?;
        Ok(r.into_inner().status() == ServingStatus::Serving)
    }
}
