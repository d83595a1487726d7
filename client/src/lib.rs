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

use berth_proto::json::{from_struct, to_struct};
use berth_proto::v1::cluster_client::ClusterClient;
use berth_proto::v1::scheduler_client::SchedulerClient;
use berth_proto::v1::{
    ApplyRequest, DeleteRequest, DryRunRequest, GetQueueRequest, GetRequest, ListRequest,
    SimulateRequest, WatchEventsRequest, WatchRequest,
};
use tonic::transport::{Channel, Endpoint};

pub use berth_proto::v1 as pb;
pub use berth_proto::v1::{
    DryRunResponse, EventType, NodeVerdict, ObjectReference, QueueName, QueuedPod, SchedulingEvent,
    SimulateResponse, WatchEvent,
};

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
    /// A value to send is not a JSON object.
    #[error("{0}")]
    Encode(String),
}

fn object(v: &serde_json::Value) -> Result<prost_types::Struct, ClientError> {
    to_struct(v).ok_or_else(|| ClientError::Encode(format!("expected a JSON object, got {v}")))
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

    /// Explains where `pod` (Kubernetes JSON) would be scheduled, without
    /// scheduling it. `profile` empty: the pod's schedulerName.
    pub async fn dry_run(
        &mut self,
        pod: &serde_json::Value,
        profile: &str,
        all_nodes: bool,
    ) -> Result<DryRunResponse, ClientError> {
        let r = self
            .scheduler
            .dry_run(DryRunRequest {
                pod: Some(object(pod)?),
                profile: profile.to_string(),
                all_nodes,
            })
            .await?;
        Ok(r.into_inner())
    }

    /// [`Client::dry_run`] for a typed pod.
    pub async fn dry_run_pod(
        &mut self,
        pod: &k8s_openapi::api::core::v1::Pod,
        profile: &str,
        all_nodes: bool,
    ) -> Result<DryRunResponse, ClientError> {
        let v = serde_json::to_value(pod).map_err(|e| ClientError::Encode(e.to_string()))?;
        self.dry_run(&v, profile, all_nodes).await
    }

    /// Places `objects` (pods, or workloads whose template is placed
    /// `replicas` times) one after another on a copy of the cluster state.
    pub async fn simulate(
        &mut self,
        objects: &[serde_json::Value],
        replicas: u32,
        profile: &str,
    ) -> Result<SimulateResponse, ClientError> {
        let pods = objects.iter().map(object).collect::<Result<_, _>>()?;
        let r = self
            .scheduler
            .simulate(SimulateRequest {
                pods,
                replicas,
                profile: profile.to_string(),
            })
            .await?;
        Ok(r.into_inner())
    }

    /// Streams scheduling events (`namespace` empty: all).
    pub async fn watch_events(
        &mut self,
        namespace: &str,
    ) -> Result<tonic::Streaming<SchedulingEvent>, ClientError> {
        let r = self
            .scheduler
            .watch_events(WatchEventsRequest {
                namespace: namespace.to_string(),
            })
            .await?;
        Ok(r.into_inner())
    }

    /// Creates or updates objects (JSON values and/or YAML text) on the
    /// embedded cluster.
    pub async fn apply(
        &mut self,
        objects: &[serde_json::Value],
        yaml: &str,
    ) -> Result<Vec<ObjectReference>, ClientError> {
        let objects = objects.iter().map(object).collect::<Result<_, _>>()?;
        let r = self
            .cluster
            .apply(ApplyRequest {
                objects,
                yaml: yaml.to_string(),
            })
            .await?;
        Ok(r.into_inner().applied)
    }

    /// Deletes an object from the embedded cluster.
    pub async fn delete(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<ObjectReference, ClientError> {
        let r = self
            .cluster
            .delete(DeleteRequest {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
            .await?;
        Ok(r.into_inner().deleted.unwrap_or_default())
    }

    /// Streams changes to objects of `kind` (empty: all kinds).
    pub async fn watch(
        &mut self,
        kind: &str,
        namespace: &str,
    ) -> Result<tonic::Streaming<WatchEvent>, ClientError> {
        let r = self
            .cluster
            .watch(WatchRequest {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
            })
            .await?;
        Ok(r.into_inner())
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
