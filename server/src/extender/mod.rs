//! Remote extenders: extension points served by other processes.
//!
//! Each `berthExtenders` entry becomes a [`Connection`] (one stream,
//! redialed when it breaks) and a plugin of the same name
//! ([`RemotePlugin`]) that profiles enable like any other, at the points the
//! entry lists. The framework does not know the plugin is remote: it sees a
//! batch Filter/Score plugin and async plugins at the other points. The
//! protocol is `proto/berth/extender/v1/extender.proto`.

mod connection;
mod feed;
pub mod http;
mod remote;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use connection::{CallError, CallRequest, Connection, INITIAL_BACKOFF, MAX_BACKOFF, Stats};
pub use feed::NodeFeed;
pub use remote::{RemotePlugin, reservation_id};

use crate::config::extenders::{ExtenderTls, ManagedResource};
use crate::config::{ConfigError, SchedulerConfig};
use crate::framework::{Handle, Plugin, Registry};
use crate::model::PodInfo;

/// Whether the pod requests (or limits) one of `managed`, in a container or
/// an init container; with none managed, every pod interests the extender.
/// Remote and HTTP extenders share this (upstream's `IsInterested`).
pub fn requests_managed(pod: &PodInfo, managed: &[ManagedResource]) -> bool {
    if managed.is_empty() {
        return true;
    }
    let Some(spec) = pod.pod.spec.as_ref() else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        .flat_map(|list| list.keys())
        .any(|k| managed.iter().any(|m| m.name == *k))
}

fn read_pem(path: &str, file: &str, what: &str) -> Result<Vec<u8>, ConfigError> {
    let data = std::fs::read(file)
        .map_err(|e| ConfigError::new(path, format!("cannot read {file:?}: {e}")))?;
    if !String::from_utf8_lossy(&data).contains("-----BEGIN ") {
        return Err(ConfigError::new(
            path,
            format!("{file:?} holds no PEM {what}"),
        ));
    }
    Ok(data)
}

/// The TLS settings of an extender connection; every file is read now, so
/// that a missing or bad one stops startup naming its field.
fn client_tls(tls: &ExtenderTls) -> Result<tonic::transport::ClientTlsConfig, ConfigError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let ca_path = format!("{}.caFile", tls.path);
    let Some(ca) = &tls.ca_file else {
        return Err(ConfigError::new(
            ca_path,
            "Required value: https endpoints are verified against this CA bundle",
        ));
    };
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem(
        &ca_path,
        ca,
        "certificate",
    )?));
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let cert = read_pem(&format!("{}.certFile", tls.path), cert, "certificate")?;
        let key = read_pem(&format!("{}.keyFile", tls.path), key, "private key")?;
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// The extenders of one scheduler.
#[derive(Debug, Default)]
pub struct Extenders {
    connections: Vec<Arc<Connection>>,
    feed: Arc<NodeFeed>,
}

impl Extenders {
    /// Creates a connection per configured extender and starts dialing.
    /// Must run inside a tokio runtime. Errors name the configuration field
    /// (a TLS file that cannot be read, an endpoint tonic refuses).
    pub fn start(config: &SchedulerConfig, handle: &Handle) -> Result<Self, ConfigError> {
        let feed = Arc::new(NodeFeed::new());
        let mut connections = Vec::with_capacity(config.extenders.len());
        for cfg in &config.extenders {
            let endpoint = tonic::transport::Endpoint::from_shared(cfg.endpoint.clone())
                .map_err(|e| ConfigError::new(format!("{}.endpoint", cfg.path), e.to_string()))?
                .connect_timeout(cfg.timeout)
                .tcp_nodelay(true);
            let endpoint = match &cfg.tls {
                Some(tls) => endpoint
                    .tls_config(client_tls(tls)?)
                    .map_err(|e| ConfigError::new(&tls.path, e.to_string()))?,
                None => endpoint,
            };
            let conn = Arc::new(Connection::new(cfg.clone(), handle.clone(), feed.clone()));
            conn.start(endpoint);
            connections.push(conn);
        }
        Ok(Self { connections, feed })
    }

    /// Registers each extender's plugin under its name.
    pub fn register(&self, registry: &mut Registry) -> Result<(), ConfigError> {
        for conn in &self.connections {
            let c = conn.clone();
            let path = conn.config().path.clone();
            registry
                .register_factory(
                    conn.name(),
                    Arc::new(move |args, args_path, _| {
                        if args.is_some_and(|a| !a.is_null()) {
                            return Err(ConfigError::new(
                                args_path,
                                "remote extenders take no plugin args (configure them under berthExtenders)",
                            ));
                        }
                        Ok(Arc::new(RemotePlugin::new(c.clone())) as Arc<dyn Plugin>)
                    }),
                )
                .map_err(|e| ConfigError::new(format!("{path}.name"), e.to_string()))?;
        }
        Ok(())
    }

    /// The node feed extenders that want nodes follow; `None` without
    /// extenders.
    pub fn feed(&self) -> Option<Arc<NodeFeed>> {
        (!self.connections.is_empty()).then(|| self.feed.clone())
    }

    /// The connections, in configuration order.
    pub fn connections(&self) -> &[Arc<Connection>] {
        &self.connections
    }

    /// Whether no extender is configured.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }
}
