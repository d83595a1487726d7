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
//!
//! Over TLS (an `https://` address), trusting a private CA and presenting a
//! client certificate for mutual TLS:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use berth_client::{Client, ConnectOptions};
//! let options = ConnectOptions {
//!     ca_cert: Some(std::fs::read("ca.pem")?),
//!     client_identity: Some((std::fs::read("client.pem")?, std::fs::read("client-key.pem")?)),
//!     server_name: None,
//! };
//! let client = Client::connect_with("https://berth.example:50051", &options).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod answer;
pub mod cli;

use berth_proto::json::{from_struct, to_struct};
use berth_proto::v1::cluster_client::ClusterClient;
use berth_proto::v1::scheduler_client::SchedulerClient;
use berth_proto::v1::{
    ApplyRequest, DeleteRequest, DryRunRequest, GetQueueRequest, GetRequest, ListRequest,
    SimulateRequest, WatchEventsRequest, WatchRequest,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub use answer::{Conclusion, EXIT_INCOMPLETE};
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
    /// The TLS options cannot be used (for example a CA that is not PEM).
    #[error("TLS options for {addr}: {message}")]
    Tls {
        /// The address the options were for.
        addr: String,
        /// Why they cannot be used, with the causes.
        message: String,
    },
    /// No connection could be made (including failed TLS handshakes: the
    /// message carries the cause chain, e.g. an unknown issuer).
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

/// How to connect: TLS trust and identity. The default is what
/// [`Client::connect`] does: plaintext for `http://` and bare `host:port`,
/// and TLS trusting the system's roots for `https://`.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// PEM CA certificate(s) to trust for the server's certificate, instead
    /// of the system's roots. Implies TLS, even for a bare `host:port`.
    pub ca_cert: Option<Vec<u8>>,
    /// PEM client certificate chain and private key, presented for mutual
    /// TLS. Implies TLS.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to check the server's certificate against, instead of the
    /// address's host (e.g. "localhost" when dialling 127.0.0.1 with a
    /// certificate that names only localhost). Implies TLS.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for ConnectOptions {
    // Keeps private keys out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("ca_cert", &self.ca_cert.as_ref().map(|c| c.len()))
            .field("client_identity", &self.client_identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl ConnectOptions {
    /// Whether any option asks for TLS.
    fn wants_tls(&self) -> bool {
        self.ca_cert.is_some() || self.client_identity.is_some() || self.server_name.is_some()
    }

    /// Checks that the PEM given holds what each option needs, so that a
    /// wrong file is named here rather than failing the handshake later
    /// with an unrelated-looking reason.
    fn check(&self) -> Result<(), String> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        fn certificates(what: &str, pem: &[u8]) -> Result<(), String> {
            let n = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{what}: not PEM: {e}"))?
                .len();
            if n == 0 {
                return Err(format!(
                    "{what}: no certificate found (expected a PEM \"BEGIN CERTIFICATE\" block)"
                ));
            }
            Ok(())
        }
        if let Some(ca) = &self.ca_cert {
            certificates("CA certificate", ca)?;
        }
        if let Some((cert, key)) = &self.client_identity {
            certificates("client certificate", cert)?;
            PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("client key: no PEM private key found: {e}"))?;
        }
        Ok(())
    }
}

/// An error and its causes, on one line, without repeating a cause already
/// quoted by the message before it.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
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

/// The URI to dial: a bare `host:port` gets `https://` when the options ask
/// for TLS, `http://` otherwise.
fn uri_for(addr: &str, options: &ConnectOptions) -> String {
    if !addr.contains("://") && options.wants_tls() {
        format!("https://{addr}")
    } else {
        normalize_addr(addr)
    }
}

impl Client {
    /// Connects to berthd at `addr` (`host:port` or a URI); `https://` uses
    /// TLS trusting the system's roots.
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        Self::connect_with(addr, &ConnectOptions::default()).await
    }

    /// Connects to berthd at `addr` with TLS `options`. TLS is used for
    /// `https://` addresses, and for bare `host:port` when any option is
    /// set; giving TLS options with an `http://` address is an error rather
    /// than a silent plaintext connection.
    pub async fn connect_with(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let uri = uri_for(addr, options);
        let endpoint = Endpoint::from_shared(uri.clone()).map_err(|e| ClientError::Address {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
        let https = uri.starts_with("https://");
        if options.wants_tls() && !https {
            return Err(ClientError::Tls {
                addr: uri,
                message: "TLS options given for a plaintext (http://) address; use https://".into(),
            });
        }
        let endpoint = if https {
            options.check().map_err(|message| ClientError::Tls {
                addr: uri.clone(),
                message,
            })?;
            let mut tls = ClientTlsConfig::new();
            tls = match &options.ca_cert {
                Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
                None => tls.with_native_roots(),
            };
            if let Some((cert, key)) = &options.client_identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            if let Some(name) = &options.server_name {
                tls = tls.domain_name(name.clone());
            }
            endpoint.tls_config(tls).map_err(|e| ClientError::Tls {
                addr: uri.clone(),
                message: error_chain(&e),
            })?
        } else {
            endpoint
        };
        let channel = endpoint.connect().await.map_err(|e| ClientError::Connect {
            addr: uri.clone(),
            message: error_chain(&e),
        })?;
        let client = Self::from_channel(channel);
        if https {
            client.check_tls_accepted(&uri, options).await?;
        }
        Ok(client)
    }

    /// With TLS 1.3 a server refuses a client certificate (or its absence)
    /// only after the client has finished its side of the handshake, so the
    /// refusal would otherwise surface at the first call as a bare
    /// "connection closed". One health check here turns it into a
    /// connection error that says what probably happened. Any answer from
    /// the server, even an error status, means the connection was accepted.
    async fn check_tls_accepted(
        &self,
        uri: &str,
        options: &ConnectOptions,
    ) -> Result<(), ClientError> {
        let Err(status) = self.health("").await else {
            return Ok(());
        };
        let ClientError::Status(status) = status else {
            return Ok(());
        };
        let transport =
            std::error::Error::source(&status).is_some_and(|s| s.is::<tonic::transport::Error>());
        if !transport {
            return Ok(());
        }
        let hint = if options.client_identity.is_some() {
            "the server closed the connection after the TLS handshake (did it refuse the client certificate? it must be signed by a CA given to the server with --tls-client-ca)"
        } else {
            "the server closed the connection after the TLS handshake (does it require a client certificate? give one for mutual TLS)"
        };
        let cause = std::error::Error::source(&status)
            .map(error_chain)
            .unwrap_or_else(|| status.message().to_string());
        Err(ClientError::Connect {
            addr: uri.to_string(),
            message: format!("{hint}: {cause}"),
        })
    }

    /// A client over an existing channel.
    /// Answers up to berthd's largest ([`berth_proto::MAX_RESPONSE_BYTES`])
    /// are accepted (tonic's default, 4 MiB, is less than a DryRun of a
    /// large cluster). Requests are sent whatever their size: berthd says
    /// which are too large.
    pub fn from_channel(channel: Channel) -> Self {
        Self {
            scheduler: SchedulerClient::new(channel.clone())
                .max_decoding_message_size(berth_proto::MAX_RESPONSE_BYTES),
            cluster: ClusterClient::new(channel.clone())
                .max_decoding_message_size(berth_proto::MAX_RESPONSE_BYTES),
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
                ..Default::default()
            })
            .await?;
        Ok(r.into_inner())
    }

    /// Explains whether `pod_group` (a PodGroup, Kubernetes JSON) would be
    /// scheduled now with `pods` (its pods, in order): all of a gang
    /// together or none, where each would go, or why not per node. Needs
    /// berthd's GenericWorkload gate.
    pub async fn dry_run_group(
        &mut self,
        pod_group: &serde_json::Value,
        pods: &[serde_json::Value],
        profile: &str,
    ) -> Result<DryRunResponse, ClientError> {
        let r = self
            .scheduler
            .dry_run(DryRunRequest {
                pod_group: Some(object(pod_group)?),
                group_pods: pods.iter().map(object).collect::<Result<_, _>>()?,
                profile: profile.to_string(),
                ..Default::default()
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

    /// Plays a trace through configurations on berthd (`Scheduler/Replay`):
    /// sends `start`, then `trace`'s bytes in chunks of 1 MiB as berthd
    /// takes them, and calls `progress` with each progress message until
    /// the report comes.
    pub async fn replay(
        &mut self,
        start: pb::ReplayStart,
        mut trace: impl std::io::Read + Send + 'static,
        mut progress: impl FnMut(&pb::ReplayProgress),
    ) -> Result<pb::ReplayReport, ClientError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::ReplayRequest>(4);
        let first = pb::ReplayRequest {
            part: Some(pb::replay_request::Part::Start(start)),
        };
        // The first message goes before the call, so the stream is never
        // empty; the trace is read on a blocking thread as berthd asks.
        let _ = tx.send(first).await;
        let reading = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            loop {
                let mut chunk = vec![0u8; 1 << 20];
                let mut filled = 0;
                while filled < chunk.len() {
                    let n = trace.read(&mut chunk[filled..])?;
                    if n == 0 {
                        break;
                    }
                    filled += n;
                }
                if filled == 0 {
                    return Ok(());
                }
                chunk.truncate(filled);
                let msg = pb::ReplayRequest {
                    part: Some(pb::replay_request::Part::TraceChunk(chunk)),
                };
                if tx.blocking_send(msg).is_err() {
                    return Ok(());
                }
            }
        });
        let mut answers = self
            .scheduler
            .replay(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let mut report = None;
        while let Some(m) = answers.message().await? {
            match m.msg {
                Some(pb::replay_response::Msg::Progress(p)) => progress(&p),
                Some(pb::replay_response::Msg::Report(r)) => report = Some(r),
                None => {}
            }
        }
        match reading.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ClientError::Encode(format!("reading the trace: {e}"))),
            Err(e) => return Err(ClientError::Encode(format!("reading the trace: {e}"))),
        }
        report.ok_or_else(|| ClientError::Encode("berthd ended the replay without a report".into()))
    }

    /// Places `objects` (pods, or workloads whose template is placed
    /// `replicas` times) one after another on a copy of the cluster state.
    /// The answer holds every placement: the pages berthd sends them in
    /// are followed to the end.
    pub async fn simulate(
        &mut self,
        objects: &[serde_json::Value],
        replicas: u32,
        profile: &str,
    ) -> Result<SimulateResponse, ClientError> {
        // PodGroups among the objects are sent apart: their pods are
        // placed as gangs.
        let is_group =
            |o: &&serde_json::Value| o.get("kind").and_then(|k| k.as_str()) == Some("PodGroup");
        let pods = objects
            .iter()
            .filter(|o| !is_group(o))
            .map(object)
            .collect::<Result<_, _>>()?;
        let pod_groups = objects
            .iter()
            .filter(is_group)
            .map(object)
            .collect::<Result<_, _>>()?;
        let mut answer = self
            .scheduler
            .simulate(SimulateRequest {
                pods,
                replicas,
                profile: profile.to_string(),
                pod_groups,
                ..Default::default()
            })
            .await?
            .into_inner();
        while !answer.r#continue.is_empty() {
            let page = self
                .scheduler
                .simulate(SimulateRequest {
                    r#continue: std::mem::take(&mut answer.r#continue),
                    ..Default::default()
                })
                .await?
                .into_inner();
            answer.pods.extend(page.pods);
            answer.r#continue = page.r#continue;
            answer.remaining_pods = page.remaining_pods;
        }
        Ok(answer)
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

    /// The pods waiting to be scheduled (`namespace` empty: all),
    /// following the pages to the end.
    pub async fn get_queue(&mut self, namespace: &str) -> Result<Vec<QueuedPod>, ClientError> {
        let mut pods = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .scheduler
                .get_queue(GetQueueRequest {
                    namespace: namespace.to_string(),
                    limit: 0,
                    r#continue: token,
                })
                .await?
                .into_inner();
            pods.extend(page.pods);
            if page.r#continue.is_empty() {
                return Ok(pods);
            }
            token = page.r#continue;
        }
    }

    /// Every object of `kind` ("Node", "Pod", "pvc", ...) as Kubernetes
    /// JSON, following the list's pages to the end.
    pub async fn list(
        &mut self,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<serde_json::Value>, ClientError> {
        let mut items = Vec::new();
        let mut token = String::new();
        loop {
            let page = self.list_page(kind, namespace, 0, &token).await?;
            items.extend(page.items.iter().map(from_struct));
            if page.r#continue.is_empty() {
                return Ok(items);
            }
            token = page.r#continue;
        }
    }

    /// One page of a list: at most `limit` objects (0: as many as fit in a
    /// page), from the `continue` token of the previous page ("" for the
    /// first).
    pub async fn list_page(
        &mut self,
        kind: &str,
        namespace: &str,
        limit: i64,
        continue_token: &str,
    ) -> Result<pb::ListResponse, ClientError> {
        let r = self
            .cluster
            .list(ListRequest {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
                limit,
                r#continue: continue_token.to_string(),
            })
            .await?;
        Ok(r.into_inner())
    }

    /// What each node's pods request against what it has, as the
    /// scheduler's cache sums it (`name` empty: every node), following the
    /// pages to the end.
    pub async fn node_usage(&mut self, name: &str) -> Result<Vec<pb::NodeUsage>, ClientError> {
        let mut nodes = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .scheduler
                .list_node_usage(pb::ListNodeUsageRequest {
                    name: name.to_string(),
                    limit: 0,
                    r#continue: token,
                })
                .await?
                .into_inner();
            nodes.extend(page.nodes);
            if page.r#continue.is_empty() {
                return Ok(nodes);
            }
            token = page.r#continue;
        }
    }

    /// The scheduler's profiles (their schedulerNames), sorted by name.
    pub async fn profiles(&mut self) -> Result<Vec<String>, ClientError> {
        let r = self
            .scheduler
            .list_profiles(pb::ListProfilesRequest {})
            .await?;
        Ok(r.into_inner()
            .profiles
            .into_iter()
            .map(|p| p.scheduler_name)
            .collect())
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
