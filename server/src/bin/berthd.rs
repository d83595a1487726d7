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
use berth_server::cluster::ObjectKind;
use berth_server::cluster::embedded::{
    EmbeddedCluster, SAMPLE_CLUSTER, parse_objects, read_objects,
};
use berth_server::cluster::kube::{self as kube_source, KubeCluster, KubeOptions, discovery};
use berth_server::config::{self, LeaderElection, parse_go_duration};
use berth_server::features::{FeatureGates, Followed, GATES, OLDEST, RELEASE, Serves, Stage};
use berth_server::leader::{ElectionConfig, Outcome, default_identity};
use berth_server::observe::health::{HealthChecks, Scope};
use berth_server::observe::telemetry::{self, TraceConfig};
use berth_server::plugins::in_tree_registry;
use berth_server::recording::{Recorder, RecorderOptions};
use berth_server::scheduler::{Options, Scheduler};
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

/// mimalloc: the scheduling loop allocates and frees many small, short-lived
/// buffers, and measured faster with it than with glibc's allocator
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

    /// Tokio worker threads (default: TOKIO_WORKER_THREADS if set, else one
    /// fewer than the cores, at least one: the scheduling loop is serial
    /// and Filter/Score fan out on a pool of their own).
    #[arg(long, value_name = "N")]
    worker_threads: Option<usize>,

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

    /// Elect a leader before scheduling (kube mode only; the embedded
    /// cluster never elects). Default: leaderElection.leaderElect (true).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    leader_elect: Option<bool>,

    /// How long a standby waits, after it last saw the Lease change, before
    /// taking it over (Go duration; default 15s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    leader_elect_lease_duration: Option<Duration>,

    /// How long the leader keeps trying to renew before it gives up
    /// leadership (Go duration; default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    leader_elect_renew_deadline: Option<Duration>,

    /// Time between acquire and renew attempts (Go duration; default 2s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    leader_elect_retry_period: Option<Duration>,

    /// The lock kind; only "leases" is supported.
    #[arg(long, value_name = "KIND")]
    leader_elect_resource_lock: Option<String>,

    /// The Lease's name (default "berth", not kube-scheduler's, so that the
    /// two never take each other's lease).
    #[arg(long, value_name = "NAME")]
    leader_elect_resource_name: Option<String>,

    /// The Lease's namespace (default "kube-system").
    #[arg(long, value_name = "NAMESPACE")]
    leader_elect_resource_namespace: Option<String>,

    /// Requests per second berthd's API clients send on average (each
    /// client has its own bucket: the scheduler's, events', leader
    /// election's). As kube-scheduler's flag, it applies only without
    /// --config (then set clientConnection.qps). Default 50; negative: no
    /// limit.
    #[arg(long, value_name = "QPS", allow_negative_numbers = true)]
    kube_api_qps: Option<f32>,

    /// Requests each API client may send at once above --kube-api-qps. As
    /// kube-scheduler's flag, it applies only without --config (then set
    /// clientConnection.burst). Default 100.
    #[arg(long, value_name = "N")]
    kube_api_burst: Option<i32>,

    /// The content type of requests to the API server: application/json, or
    /// application/vnd.kubernetes.protobuf (accepted; berth speaks JSON). As
    /// kube-scheduler's flag, it applies only without --config.
    #[arg(long, value_name = "TYPE")]
    kube_api_content_type: Option<String>,

    /// How long a replica that took the leader Lease may lead without its
    /// cache synced (an informer refused or failing) before it gives the
    /// Lease up for a standby that can serve, and campaigns again only once
    /// it has synced (Go duration; 0s: never give it up).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    cache_sync_timeout: Duration,

    /// Feature gates, as kube-scheduler takes them: `Name=true,Name2=false`
    /// (may be given more than once). Defaults are those of the API
    /// server's own release in kube mode (v1.36 or v1.37), else v1.37's.
    #[arg(long, value_name = "Name=bool,...")]
    feature_gates: Vec<String>,

    /// How long the API server may refuse a request (403, or a 422 naming a
    /// missing permission) before berthd names the missing RBAC rule: a
    /// starting API server refuses permitted requests for a moment
    /// (Go duration; 0s: name it at once).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    forbidden_grace: Duration,

    /// While the API server or a remote extender is down, how often berthd
    /// logs a summary of the outage (attempts failed and skipped, pods
    /// waiting), between its one line when it goes down and its one line
    /// when it is back (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    outage_summary_interval: Duration,

    /// While pods or PodGroups keep failing for the reason they failed
    /// before (each such attempt is logged at DEBUG only), how often berthd
    /// logs one line counting those attempts and what still waits, and why
    /// (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    failure_summary_interval: Duration,

    /// Record every change the scheduler sees, and its decisions, to this
    /// trace file (gzip JSON lines; `berthctl replay` plays it back). See
    /// docs/replay.md.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,

    /// Rotate the trace once it holds this many MiB (compressed): it
    /// becomes FILE.1, and a new FILE starts with the state as it stands.
    /// 0: never.
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "record")]
    record_max_mib: u64,

    /// How many rotated trace files to keep (FILE.1 ... FILE.N).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "record")]
    record_keep: usize,

    /// On SIGTERM/SIGINT, how long in-flight binding cycles get to bind or
    /// Unreserve before berthd exits anyway (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    shutdown_timeout: Duration,
}

impl Args {
    /// kube-scheduler's client flags apply only when no configuration file
    /// is given (there, they are among the deprecated flags the file
    /// replaces); with one, berthd says they are ignored.
    fn apply_client_connection(&self, cc: &mut config::ClientConnection) -> Result<()> {
        let given: Vec<&str> = [
            ("--kube-api-qps", self.kube_api_qps.is_some()),
            ("--kube-api-burst", self.kube_api_burst.is_some()),
            (
                "--kube-api-content-type",
                self.kube_api_content_type.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect();
        if given.is_empty() {
            return Ok(());
        }
        if self.config.is_some() {
            tracing::warn!(
                flags = ?given,
                "ignored because --config is given, as kube-scheduler ignores them; set clientConnection in the configuration"
            );
            return Ok(());
        }
        if let Some(q) = self.kube_api_qps {
            cc.qps = q;
        }
        if let Some(b) = self.kube_api_burst {
            cc.burst = b;
        }
        if let Some(t) = &self.kube_api_content_type {
            cc.content_type = t.clone();
        }
        cc.validate().map_err(|e| {
            let flag = e
                .to_string()
                .replace("clientConnection.qps", "--kube-api-qps")
                .replace("clientConnection.burst", "--kube-api-burst")
                .replace("clientConnection.contentType", "--kube-api-content-type");
            anyhow::anyhow!("{flag}")
        })
    }

    /// Flags override the configuration file, as upstream's do.
    fn apply_leader_election(&self, le: &mut LeaderElection) -> Result<()> {
        if let Some(v) = self.leader_elect {
            le.leader_elect = v;
        }
        if let Some(v) = self.leader_elect_lease_duration {
            le.lease_duration = v;
        }
        if let Some(v) = self.leader_elect_renew_deadline {
            le.renew_deadline = v;
        }
        if let Some(v) = self.leader_elect_retry_period {
            le.retry_period = v;
        }
        if let Some(v) = &self.leader_elect_resource_lock {
            le.resource_lock = v.clone();
        }
        if let Some(v) = &self.leader_elect_resource_name {
            le.resource_name = v.clone();
        }
        if let Some(v) = &self.leader_elect_resource_namespace {
            le.resource_namespace = v.clone();
        }
        le.validate().map_err(|e| anyhow::anyhow!("{e}"))
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

/// `--feature-gates`' long help: the gates one may set, as component-base
/// lists them (GA gates left out), with what berth implements.
fn feature_gates_help() -> String {
    let mut lines = vec![format!(
        "Feature gates, as kube-scheduler takes them: Name=true,Name2=false (may be given more than once). \
         Defaults are those of the API server's own release in kube mode (v1.{OLDEST} or v1.{RELEASE}; berth's newest, v1.{RELEASE}, for a newer one and for the embedded cluster); a value berth does not implement stops startup. Options are (with v1.{RELEASE}'s defaults):"
    )];
    lines.push("AllAlpha=true|false (ALPHA - default=false)".into());
    lines.push("AllBeta=true|false (BETA - default=false)".into());
    for g in GATES {
        let s = g.spec();
        if matches!(s.stage, Stage::Ga | Stage::Deprecated | Stage::PreAlpha) {
            continue;
        }
        let only = match g.serves {
            Serves::Both => String::new(),
            Serves::DefaultOnly => format!(", berth: {} only", s.default),
        };
        lines.push(format!(
            "{}=true|false ({} - default={}{only})",
            g.name,
            s.stage.label(),
            s.default
        ));
    }
    lines.join("\n")
}

fn main() -> Result<()> {
    let help = feature_gates_help();
    let matches = Args::command()
        .mut_arg("feature_gates", |a| a.long_help(help))
        .get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(berth_server::worker_threads(args.worker_threads))
        .enable_all()
        .build()
        .context("starting the tokio runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
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
    let signal = shutdown_signal()?;
    if args.outage_summary_interval.is_zero() {
        anyhow::bail!("--outage-summary-interval: must be greater than zero");
    }
    berth_server::outage::set_summary_every(args.outage_summary_interval);
    if args.failure_summary_interval.is_zero() {
        anyhow::bail!("--failure-summary-interval: must be greater than zero");
    }
    berth_server::scheduler::repeats::set_summary_every(args.failure_summary_interval);

    berth_server::cluster::kube::refusals::set_grace(args.forbidden_grace);

    // As kube-scheduler: a gate that is unknown, malformed or locked stops
    // startup, naming it; so does a value berth does not implement. Checked
    // here, before anything is asked of an API server, when it is wrong at
    // both releases berth knows (a typo), and below against the release
    // followed.
    if let Err(e) = FeatureGates::from_flags(&args.feature_gates)
        && FeatureGates::from_flags_at(OLDEST, &args.feature_gates).is_err()
    {
        return Err(e.into());
    }
    // A configuration file berth refuses at both releases stops startup
    // now too, rather than after the API server has answered.
    let registry = in_tree_registry();
    let known = |name: &str| registry.contains(name);
    let config_text = match &args.config {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    let parse_config = |gates: &FeatureGates| -> Result<config::SchedulerConfig> {
        match (&args.config, &config_text) {
            (Some(path), Some(text)) => config::parse_gated(text, &known, gates)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
            _ => Ok(config::default_config_gated(&known, gates)),
        }
    };
    let at = |release: u16| {
        FeatureGates::from_flags_at(release, &args.feature_gates)
            .unwrap_or_else(|_| FeatureGates::at_release(release))
    };
    if let Err(e) = parse_config(&at(RELEASE))
        && parse_config(&at(OLDEST)).is_err()
    {
        return Err(e);
    }
    let kube_config = match (&args.kubeconfig, args.in_cluster) {
        (Some(path), _) => Some(kube_source::config_from_kubeconfig(path).await?),
        (None, true) => Some(kube_source::config_in_cluster()?),
        (None, false) => None,
    };
    // Kube mode follows the API server's own release, and watches only the
    // kinds it serves (ARCHITECTURE.md, decision 13).
    let watchable: Vec<ObjectKind> = kube_source::KUBE_WATCHED
        .into_iter()
        .chain([ObjectKind::PodGroup])
        .collect();
    let (followed, discovered) = match &kube_config {
        Some(config) => {
            let server = config.cluster_url.to_string();
            tracing::info!(%server, "watching the Kubernetes cluster at {server}");
            let client = kube_source::client(
                config.clone(),
                &kube_source::ClientOptions::default().for_purpose("discovery"),
            )?;
            berth_server::cluster::kube::refusals::global().spawn();
            let d = discovery::discover_until_answered(&client, &watchable).await;
            (
                berth_server::features::follow(d.version.minor, &d.version.git_version),
                Some(d),
            )
        }
        None => (
            Followed {
                release: RELEASE,
                reason: "berth's newest (the embedded cluster has no API server to follow)".into(),
            },
            None,
        ),
    };
    let gates = FeatureGates::from_flags_at(followed.release, &args.feature_gates)?;
    let set: Vec<String> = gates
        .explicitly_set()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    tracing::info!(
        release = %format!("v1.{}", followed.release),
        reason = %followed.reason,
        set = %set.join(","),
        gates = %gates.summary(),
        "feature gates in force: kube-scheduler v1.{}'s defaults, {}",
        followed.release,
        followed.reason
    );
    // What the server does not serve is not watched, said once per kind;
    // a gate turned on for a kind it lacks stops startup.
    let unserved = match &discovered {
        Some(d) => {
            let plan = discovery::plan(d, &gates, &watchable)?;
            for note in &plan.notes {
                tracing::info!("{note}");
            }
            plan.unserved
        }
        None => Default::default(),
    };

    let mut cfg = parse_config(&gates)?;

    args.apply_leader_election(&mut cfg.leader_election)?;
    args.apply_client_connection(&mut cfg.client_connection)?;
    let client_options = kube_source::ClientOptions {
        qps: cfg.client_connection.qps,
        burst: cfg.client_connection.burst,
        purpose: "",
    };
    let election_config = kube_config.clone();
    let mut kube_cluster: Option<Arc<KubeCluster>> = None;
    let (source, backend): (Arc<dyn ClusterSource>, ClusterBackend) = match kube_config {
        Some(config) => {
            if cfg.client_connection.wants_protobuf() {
                tracing::info!(
                    content_type = %cfg.client_connection.content_type,
                    "berth reads and writes the API as application/json; the protobuf content type asked for is served as JSON"
                );
            }
            tracing::info!(
                qps = cfg.client_connection.qps,
                burst = cfg.client_connection.burst,
                "API clients rate-limited to {} requests/s with bursts of {} (each of: scheduler, events, leader election)",
                cfg.client_connection.qps,
                cfg.client_connection.burst
            );
            let kube = KubeCluster::connect(
                config,
                KubeOptions {
                    client: client_options.clone(),
                    watch_pod_groups: gates
                        .enabled(berth_server::features::Feature::GenericWorkload),
                    device_taint_rules: gates
                        .enabled(berth_server::features::Feature::DRADeviceTaintRules),
                    unserved,
                    ..KubeOptions::default()
                },
            )?;
            kube_cluster = Some(kube.clone());
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
    // Kube mode elects a leader (unless leaderElect is off); the embedded
    // cluster never does: it is always the leader. A leader whose cache has
    // not synced within --cache-sync-timeout hands the Lease over.
    let election = match (&election_config, &kube_cluster) {
        (Some(config), Some(kube)) if cfg.leader_election.leader_elect => {
            let client = kube_source::client(
                config.clone(),
                &client_options.for_purpose("leader-election"),
            )?;
            let mut ecfg = ElectionConfig::from_config(&cfg.leader_election, default_identity());
            ecfg.sync_timeout = args.cache_sync_timeout;
            let kube = kube.clone();
            let serving: berth_server::leader::Serving = Arc::new(move || {
                let waiting = kube.unsynced();
                if waiting.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "waiting for informers to sync: {}",
                        waiting.join(", ")
                    ))
                }
            });
            Some(berth_server::leader::Election::start_serving(
                client, ecfg, serving,
            ))
        }
        _ => None,
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
    let recorder = match &args.record {
        Some(path) => {
            let r = Recorder::start(RecorderOptions {
                path: path.clone(),
                max_bytes: args.record_max_mib << 20,
                keep: args.record_keep,
                source: if kube_cluster.is_some() {
                    "kube"
                } else {
                    "embedded"
                },
                seed: args.seed,
                profiles: cfg
                    .profiles
                    .iter()
                    .map(|p| p.scheduler_name.clone())
                    .collect(),
            })?;
            tracing::info!(path = %path.display(), "recording a trace to {}", path.display());
            Some(r)
        }
        None => None,
    };
    let scheduler = Scheduler::start_observed(
        &cfg,
        &registry,
        source,
        Options {
            assumed_pod_ttl: args.assumed_pod_ttl,
            seed: args.seed,
            leader: election.as_ref().map(|e| e.leading()),
            batching: true,
            look_ahead: true,
        },
        recorder
            .clone()
            .map(|r| r as Arc<dyn berth_server::recording::Observer>),
    )
    .map_err(|e| match &args.config {
        Some(p) => anyhow::anyhow!("{}: {e}", p.display()),
        None => anyhow::anyhow!("{e}"),
    })?;
    for p in &cfg.profiles {
        tracing::info!(profile = %p.scheduler_name, "profile ready");
    }
    // An API server outage's summaries say how many pods wait.
    if let Some(o) = kube_cluster.as_ref().and_then(|k| k.api_outage()) {
        let s = scheduler.clone();
        o.set_context(Box::new(move || {
            let c = s.queue_counts();
            format!(
                "{} pods wait to be scheduled and {} bindings are under way",
                c.active + c.backoff + c.unschedulable + c.gated + c.in_flight,
                s.bindings_in_flight()
            )
        }));
    }
    // Only now that the configuration has been accepted: a bad one stops
    // startup before anything claims to serve.
    tracing::info!(%addr, tls = tls_on, mtls = mtls_on, "serving gRPC on {addr}");

    // Health checks: upstream's ping and log, then readiness once the
    // cache holds the cluster, until shutdown starts.
    let health = Arc::new(HealthChecks::new());
    let synced = scheduler.clone();
    let watching = kube_cluster.clone();
    health.register(
        "sched-handler-sync",
        Scope::Ready,
        Arc::new(move || {
            if synced.is_synced() {
                return Ok(());
            }
            // Kube mode says which informers have not listed, and why.
            let waiting = watching.as_ref().map(|k| k.unsynced()).unwrap_or_default();
            if waiting.is_empty() {
                Err("waiting for handlers to sync".into())
            } else {
                Err(format!(
                    "waiting for informers to sync: {}",
                    waiting.join(", ")
                ))
            }
        }),
    );
    // Remote extenders: not ready while scheduling waits for their
    // handshake at start, saying which and why.
    let extenders = scheduler.extenders().clone();
    health.register(
        "extenders",
        Scope::Ready,
        Arc::new(move || extenders.readiness()),
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

    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(berth_server::api::serve(
        listener,
        scheduler.clone(),
        backend,
        tls,
        async move {
            let _ = serving_stopped.await;
        },
    ));
    let lost = async {
        match &election {
            Some(e) => e.lost().await,
            None => std::future::pending().await,
        }
    };
    let signal = tokio::select! {
        s = signal => Some(s),
        () = lost => None,
        r = &mut server => {
            r.context("gRPC server task")??;
            anyhow::bail!("gRPC server stopped by itself");
        }
    };
    let Some(signal) = signal else {
        // As kube-scheduler: a replica that lost its lease exits, and its
        // Deployment restarts it as a standby. In-flight binding cycles get
        // until the lease could pass to another replica (leaseDuration -
        // renewDeadline after the last renewal) at most.
        tracing::error!("leaderelection lost");
        stopping.store(true, Ordering::SeqCst);
        let le = &cfg.leader_election;
        let bound = args
            .shutdown_timeout
            .min(le.lease_duration.saturating_sub(le.renew_deadline));
        let until = tokio::time::Instant::now() + bound;
        drain(&scheduler, bound).await;
        // The events already queued (the Scheduled events of the last pods
        // bound) outlive the Lease, as far as the bound allows.
        if let Some(k) = &kube_cluster {
            flush_events(k, until).await;
        }
        let _ = stop_serving.send(());
        let _ = server.await;
        let _ = http_stop.send(());
        if let Some(r) = &recorder {
            r.close(Duration::from_secs(5));
        }
        telemetry.shutdown();
        std::process::exit(1);
    };
    tracing::info!(signal, "received {signal}: shutting down");
    // Everything below ends by this deadline, whatever a gRPC call does.
    let deadline = tokio::time::Instant::now() + args.shutdown_timeout;
    stopping.store(true, Ordering::SeqCst);
    drain(&scheduler, args.shutdown_timeout).await;
    if let Some(k) = &kube_cluster {
        flush_events(k, deadline).await;
    }
    // Streams end and long calls (Simulate) stop between pods; the server
    // waits for the calls under way until the deadline, no longer.
    let _ = stop_serving.send(());
    match tokio::time::timeout_at(deadline, &mut server).await {
        Ok(r) => {
            r.context("gRPC server task")??;
            tracing::info!("gRPC server stopped");
        }
        Err(_) => tracing::warn!(
            timeout = ?args.shutdown_timeout,
            "gRPC calls still running at the shutdown deadline; not waiting for them"
        ),
    }
    if let Some(e) = election {
        match e.release().await {
            Outcome::Released => tracing::info!("leader lease released"),
            Outcome::ReleaseFailed => {
                tracing::warn!("leader lease not released; it expires by itself")
            }
            Outcome::Stopped => tracing::info!("stopped campaigning; no lease held"),
            Outcome::Lost => {}
        }
    }
    let _ = http_stop.send(());
    if let Some(r) = &recorder {
        r.close(Duration::from_secs(5));
        tracing::info!("trace closed");
    }
    telemetry.shutdown();
    tracing::info!("shutdown complete");
    // Exit now rather than return: returning drops the runtime, which
    // waits for every task to reach its next await, and a call still
    // computing would hold the process past the deadline.
    std::process::exit(0);
}

/// Stops scheduling and lets in-flight binding cycles end within `bound`.
async fn drain(scheduler: &Scheduler, bound: Duration) {
    tracing::info!(in_flight = scheduler.bindings_in_flight(), bound = ?bound, "scheduling stopped; draining binding cycles");
    let d = scheduler.shutdown(bound).await;
    if d.unfinished_bindings == 0 && d.cycle_finished {
        tracing::info!(
            rejected_waiting = d.rejected_waiting,
            "binding cycles drained"
        );
    } else {
        tracing::warn!(
            unfinished = d.unfinished_bindings,
            cycle_finished = d.cycle_finished,
            rejected_waiting = d.rejected_waiting,
            "shutdown bound reached with binding cycles unfinished"
        );
    }
}

/// Writes the events queued so far, until `until` at most (best effort:
/// the API server may not answer in time).
async fn flush_events(kube: &KubeCluster, until: tokio::time::Instant) {
    let within = until.saturating_duration_since(tokio::time::Instant::now());
    let left = kube.flush_events(within).await;
    if left == 0 {
        tracing::info!("events written");
    } else {
        tracing::warn!(
            unwritten = left,
            "{left} events could not be written before the process exits"
        );
    }
}

/// Registers for SIGTERM and SIGINT now (a signal arriving before the
/// returned future is polled is not lost) and waits for either, naming it.
fn shutdown_signal() -> Result<impl std::future::Future<Output = &'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        })
    }
}
