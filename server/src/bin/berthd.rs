//! berthd: the berth scheduler service.
//!
//! With no flags it starts on the embedded cluster loaded with the built-in
//! sample cluster, with kube-scheduler's default profile, and serves gRPC on
//! 127.0.0.1:50051. With `--kubeconfig FILE` or `--in-cluster` it schedules
//! the pods of a real Kubernetes cluster instead.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use berth_server::api::{ClusterBackend, TlsConfig, TlsFiles};
use berth_server::cluster::ClusterSource;
use berth_server::cluster::embedded::{EmbeddedCluster, parse_objects, read_objects};
use berth_server::cluster::kube::{self as kube_source, KubeCluster, KubeOptions};
use berth_server::config::{self, parse_go_duration};
use berth_server::observe::health::{HealthChecks, Scope};
use berth_server::observe::telemetry::{self, TraceConfig};
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::{Options, Scheduler};
use clap::{Parser, ValueEnum};

/// The sample cluster berthd loads when no --cluster is given.
const SAMPLE_CLUSTER: &str = include_str!("../../sample/cluster.yaml");

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TraceLevel {
    /// One span per scheduling attempt (and its binding cycle).
    Info,
    /// Also one span per extension point.
    Debug,
}

/// A Kubernetes scheduler implementing the Scheduling Framework, as a gRPC service.
#[derive(Debug, Parser)]
#[command(name = "berthd", version)]
struct Args {
    /// Address to serve gRPC on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,

    /// A KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) YAML file.
    #[arg(long)]
    config: Option<PathBuf>,

    /// Kubernetes YAML (a file or a directory of files) with the nodes and
    /// pods of the embedded cluster. Default: the built-in sample cluster.
    #[arg(long, conflicts_with = "empty_cluster")]
    cluster: Option<PathBuf>,

    /// Start the embedded cluster empty.
    #[arg(long)]
    empty_cluster: bool,

    /// Schedule the pods of the Kubernetes cluster this kubeconfig file's
    /// current context names, instead of the embedded cluster.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cluster", "empty_cluster", "in_cluster"])]
    kubeconfig: Option<PathBuf>,

    /// Schedule the pods of the Kubernetes cluster berthd runs in, with its
    /// pod's service account (KUBERNETES_SERVICE_HOST and the mounted
    /// token), instead of the embedded cluster.
    #[arg(long, conflicts_with_all = ["cluster", "empty_cluster"])]
    in_cluster: bool,

    /// How long an assumed pod whose binding finished may stay unconfirmed
    /// before it expires (Go duration; 0s = never, as kube-scheduler).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    assumed_pod_ttl: Duration,

    /// Seed for breaking ties between equally scored nodes (default: random).
    #[arg(long)]
    seed: Option<u64>,

    /// Serve gRPC over TLS with this certificate chain (PEM, leaf first).
    /// Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM). Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Require client certificates signed by this CA (PEM): mutual TLS.
    /// Needs --tls-cert and --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,

    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,

    /// Serve Prometheus metrics (/metrics) and health checks (/healthz,
    /// /livez, /readyz) over plain HTTP on this address (port 0 picks a free
    /// port). Off unless given; kube-scheduler's insecure port was 10251.
    #[arg(long, value_name = "ADDR")]
    http_listen: Option<SocketAddr>,

    /// Export trace spans over OTLP/gRPC to this endpoint
    /// (e.g. http://localhost:4317).
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,

    /// Which spans to export.
    #[arg(long, value_enum, default_value = "info")]
    trace_level: TraceLevel,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let telemetry = telemetry::init(
        match args.log_format {
            LogFormat::Text => telemetry::LogFormat::Text,
            LogFormat::Json => telemetry::LogFormat::Json,
        },
        &TraceConfig {
            otlp_endpoint: args.otlp_endpoint.clone().filter(|e| !e.is_empty()),
            level: match args.trace_level {
                TraceLevel::Info => tracing::Level::INFO,
                TraceLevel::Debug => tracing::Level::DEBUG,
            },
            service_name: "berthd".into(),
        },
    )?;
    if let Some(endpoint) = args.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        tracing::info!(endpoint, "exporting trace spans over OTLP");
    }

    let registry = in_tree_registry();
    let known = |name: &str| registry.contains(name);
    let cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            config::parse(&text, &known).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => config::default_config(&known),
    };

    let kube_config = match (&args.kubeconfig, args.in_cluster) {
        (Some(path), _) => Some(kube_source::config_from_kubeconfig(path).await?),
        (None, true) => Some(kube_source::config_in_cluster()?),
        (None, false) => None,
    };
    let (source, backend): (Arc<dyn ClusterSource>, ClusterBackend) = match kube_config {
        Some(config) => {
            let server = config.cluster_url.to_string();
            tracing::info!(%server, "watching the Kubernetes cluster at {server}");
            let client = kube_source::client(config)?;
            let kube = KubeCluster::start(client, KubeOptions::default());
            (kube.clone(), kube.into())
        }
        None => {
            let objects = match (&args.cluster, args.empty_cluster) {
                (Some(path), _) => read_objects(path)?,
                (None, true) => Vec::new(),
                (None, false) => parse_objects(SAMPLE_CLUSTER, "built-in sample cluster")?,
            };
            let embedded = EmbeddedCluster::from_objects(objects)?;
            (embedded.clone(), embedded.into())
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsConfig::load(&TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca.clone(),
        })?),
        // clap makes each of the two require the other.
        _ => None,
    };

    // Bind first, so the addresses are known before scheduling starts.
    let http = match args.http_listen {
        Some(a) => {
            let (l, addr) = berth_server::observe::http::bind(a)
                .await
                .with_context(|| format!("listening on {a}"))?;
            tracing::info!(%addr, "serving HTTP on {addr}");
            Some(l)
        }
        None => None,
    };
    let (listener, addr) = berth_server::api::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let (tls_on, mtls_on) = (tls.is_some(), tls.as_ref().is_some_and(TlsConfig::mutual));
    tracing::info!(%addr, tls = tls_on, mtls = mtls_on, "serving gRPC on {addr}");
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        source,
        Options {
            assumed_pod_ttl: args.assumed_pod_ttl,
            seed: args.seed,
        },
    )
    .map_err(|e| match &args.config {
        Some(p) => anyhow::anyhow!("{}: {e}", p.display()),
        None => anyhow::anyhow!("{e}"),
    })?;
    for p in &cfg.profiles {
        tracing::info!(profile = %p.scheduler_name, "profile ready");
    }

    // Health checks: upstream's ping and log, then readiness once the
    // cache holds the cluster, until shutdown starts.
    let health = Arc::new(HealthChecks::new());
    let synced = scheduler.clone();
    health.register(
        "sched-handler-sync",
        Scope::Ready,
        Arc::new(move || {
            if synced.is_synced() {
                Ok(())
            } else {
                Err("waiting for handlers to sync".into())
            }
        }),
    );
    let stopping = Arc::new(AtomicBool::new(false));
    let s = stopping.clone();
    health.register(
        "shutdown",
        Scope::Ready,
        Arc::new(move || {
            if s.load(Ordering::SeqCst) {
                Err("process is shutting down".into())
            } else {
                Ok(())
            }
        }),
    );
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(l) = http {
        tokio::spawn(berth_server::observe::http::serve(
            l,
            scheduler.clone(),
            health.clone(),
            async move {
                let _ = http_stopped.await;
            },
        ));
    }

    let stop = scheduler.clone();
    berth_server::api::serve(listener, scheduler, backend, tls, async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        stopping.store(true, Ordering::SeqCst);
        stop.stop();
    })
    .await?;
    let _ = http_stop.send(());
    telemetry.shutdown();
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
