//! Remote extenders: extension points served by other processes.
//!
//! Each `berthExtenders` entry becomes a [`Connection`] (one stream,
//! redialed when it breaks) and a plugin of the same name
//! ([`RemotePlugin`]) that profiles enable like any other, at the points the
//! entry lists. The framework does not know the plugin is remote: it sees a
//! batch Filter/Score plugin and async plugins at the other points. The
//! protocol is `proto/berth/extender/v1/extender.proto`.
//!
//! Startup: the scheduling loop starts only once every extender completed
//! its handshake (Hello, and the node list sent to it) or its
//! `startupTimeout` passed ([`Extenders::wait_started`]); meanwhile
//! [`Extenders::readiness`] says which extender holds scheduling back, and
//! why.

mod answers;
mod breaker;
mod call_error;
mod connection;
mod feed;
pub mod http;
mod interest;
mod remote;
mod shed;
mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;

pub use breaker::Breaker;
pub use connection::{
    CallError, CallRequest, Connection, Dial, INITIAL_BACKOFF, MAX_BACKOFF, NeededPods,
    PROTOCOL_VERSION, Reply, Subject,
};
pub use feed::NodeFeed;
pub use interest::requests_managed;
pub use remote::{RemotePlugin, reservation_id};
pub use stats::Stats;

use crate::config::extenders::ExtenderTls;
use crate::config::{ConfigError, ExtensionPoint, SchedulerConfig};
use crate::framework::{Handle, Plugin, Registry};

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

/// Where scheduling stands with the extenders at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Startup {
    /// Scheduling waits; what each extender still owes.
    Waiting(String),
    /// Scheduling started (every extender ready, or its timeout passed).
    Done,
}

/// The extenders of one scheduler.
#[derive(Debug)]
pub struct Extenders {
    connections: Vec<Arc<Connection>>,
    feed: Arc<NodeFeed>,
    startup: Mutex<Startup>,
}

impl Default for Extenders {
    fn default() -> Self {
        Self {
            connections: Vec::new(),
            feed: Arc::default(),
            startup: Mutex::new(Startup::Done),
        }
    }
}

/// How a connection reaches `cfg`'s endpoint (plaintext or TLS).
fn dialer(cfg: &crate::config::ExtenderConfig) -> Result<Dial, ConfigError> {
    #[cfg(test)]
    if let Some(dial) = tests::in_memory::dialer(&cfg.endpoint) {
        return Ok(dial);
    }
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
    Ok(Arc::new(move || {
        let endpoint = endpoint.clone();
        async move { endpoint.connect().await }.boxed()
    }))
}

impl Extenders {
    /// Creates a connection per configured extender and starts dialing.
    /// Must run inside a tokio runtime. Errors name the configuration field
    /// (a TLS file that cannot be read, an endpoint tonic refuses).
    pub fn start(config: &SchedulerConfig, handle: &Handle) -> Result<Self, ConfigError> {
        let feed = Arc::new(NodeFeed::new());
        let mut connections = Vec::with_capacity(config.extenders.len());
        let groups = config
            .feature_gates
            .enabled(crate::features::Feature::GenericWorkload);
        for cfg in &config.extenders {
            let group_points: Vec<&str> = cfg
                .points
                .iter()
                .filter(|p| {
                    matches!(
                        p,
                        ExtensionPoint::PlacementFeasible
                            | ExtensionPoint::PodGroupPostFilter
                            | ExtensionPoint::GroupPermit
                    )
                })
                .map(|p| p.field())
                .collect();
            if !groups && !group_points.is_empty() {
                tracing::warn!(
                    extender = cfg.name.as_str(),
                    "{}.points lists {}, which run only in PodGroups' group cycles: with the GenericWorkload feature gate off (--feature-gates=GenericWorkload=true turns it on) they are never called",
                    cfg.path,
                    group_points.join(", ")
                );
            }
            let dial = dialer(cfg)?;
            let conn = Arc::new(Connection::new(cfg.clone(), handle.clone(), feed.clone()));
            conn.start(dial);
            connections.push(conn);
        }
        let startup = if connections.is_empty() {
            Startup::Done
        } else {
            Startup::Waiting("the cluster's initial listing is not in the cache yet".into())
        };
        Ok(Self {
            connections,
            feed,
            startup: Mutex::new(startup),
        })
    }

    /// Whether the extender `name` is down now (its outage reporter speaks
    /// for the attempts that fail meanwhile).
    pub fn is_down(&self, name: &str) -> bool {
        self.connections
            .iter()
            .any(|c| c.name() == name && c.outage().is_down())
    }

    /// Calls `f` with an extender's name each time a stream to it opens
    /// (its Hello answered): the scheduler retries the pods that failed
    /// because it was down.
    pub fn on_back(&self, f: connection::OnBack) {
        for c in &self.connections {
            c.set_on_back(f.clone());
        }
    }

    /// Ok once scheduling started; until then, which extender holds it
    /// back and why (the `/readyz` check `extenders`).
    pub fn readiness(&self) -> Result<(), String> {
        match &*self.startup.lock() {
            Startup::Done => Ok(()),
            Startup::Waiting(what) => Err(what.clone()),
        }
    }

    fn holdups(&self, pending: &[Arc<Connection>]) -> String {
        let parts: Vec<String> = pending
            .iter()
            .map(|c| {
                let what = c.startup_holdup().unwrap_or_else(|| "ready".into());
                format!("{}: {what}", c.name())
            })
            .collect();
        format!(
            "waiting for extenders before scheduling: {}",
            parts.join("; ")
        )
    }

    /// Waits until every extender [is started](Connection::is_started) or
    /// its `startupTimeout` (counted from berthd's start) passed, logging
    /// which extender held scheduling back, for how long and why. Called by
    /// the scheduling loop once the cache holds the cluster.
    pub async fn wait_started(&self) {
        let mut pending: Vec<Arc<Connection>> = self.connections.clone();
        let mut announced = false;
        loop {
            let now = tokio::time::Instant::now();
            pending.retain(|c| {
                let waited = now.saturating_duration_since(c.created());
                if c.is_started() {
                    if announced {
                        tracing::info!(
                            extender = c.name(),
                            waited_ms = waited.as_millis() as u64,
                            "extender {:?} ready after {:.0?}",
                            c.name(),
                            waited
                        );
                    }
                    return false;
                }
                let timeout = c.config().startup_timeout;
                if waited >= timeout {
                    let what = c.startup_holdup().unwrap_or_default();
                    let then = if c.config().ignorable {
                        "it is ignorable: its points are skipped while it is away"
                    } else {
                        "its points fail the attempts (the pods are retried with backoff) while it is away"
                    };
                    tracing::warn!(
                        extender = c.name(),
                        startup_timeout = ?timeout,
                        "extender {:?} not ready after its startupTimeout of {timeout:?}: {what}; scheduling starts without it: {then}",
                        c.name()
                    );
                    return false;
                }
                true
            });
            if pending.is_empty() {
                break;
            }
            let holdups = self.holdups(&pending);
            // What /readyz says changes before the log says it, so that
            // whoever reads the log line and asks /readyz gets the same.
            *self.startup.lock() = Startup::Waiting(holdups.clone());
            if !announced {
                tracing::info!("{holdups}");
                announced = true;
            }
            let deadline = pending
                .iter()
                .map(|c| c.created() + c.config().startup_timeout)
                .min()
                .unwrap_or(now);
            let mut changes: Vec<_> = pending.iter().map(|c| c.connected()).collect();
            let changed = futures::future::select_all(
                changes
                    .iter_mut()
                    .map(|rx| Box::pin(async move { rx.changed().await })),
            );
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
                // The last dial error changes what the log and /readyz say.
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        *self.startup.lock() = Startup::Done;
        if announced {
            tracing::info!("extenders ready: scheduling starts");
        }
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
