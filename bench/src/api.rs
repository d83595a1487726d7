//! The API workload: berthd's gRPC API as a client meets it. The real
//! `berth_server::api::serve` (the listener berthd uses, TLS off) over the
//! embedded cluster loaded with the built-in sample cluster, its pending
//! pods scheduled first; then the `DryRun` of docs/getting-started.md (a pod of 500m and 1Gi
//! with a zone selector) through the real Rust client over loopback TCP:
//!
//! 1. latency: `dry_runs` calls one after the other on one connection
//!    (after a warm-up), each timed from the call to its answer;
//! 2. throughput: `clients` clients, each on its own connection, each
//!    making `dry_runs` calls back to back; DryRuns per second over the
//!    wall-clock time of the whole batch.
//!
//! The server runs on a runtime of its own (two workers, as berthd has on
//! two cores) and the clients on another, in this one process: on a
//! 2-core machine they share the cores, as a berthd and its clients on one
//! machine would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use berth_server::cluster::ClusterSource;
use berth_server::cluster::embedded::{EmbeddedCluster, SAMPLE_CLUSTER, parse_objects};
use berth_server::config;
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::{Options, Scheduler};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::usage::{cpu_seconds, memory_mib};

/// What the API workload measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiResult {
    /// The workload's name.
    pub workload: String,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Pods in the cluster (bound or pending) while measuring.
    pub pods: usize,
    /// DryRuns timed one after the other on one connection.
    pub sequential_calls: usize,
    /// Their latency, median, in ms.
    pub dry_run_p50_ms: f64,
    /// 90th percentile, in ms.
    pub dry_run_p90_ms: f64,
    /// 99th percentile, in ms.
    pub dry_run_p99_ms: f64,
    /// Concurrent clients, each on its own connection.
    pub clients: usize,
    /// DryRuns they made in all.
    pub concurrent_calls: usize,
    /// DryRuns answered per second with that many clients.
    pub dry_runs_per_second: f64,
    /// CPU time of the process (server and clients) per DryRun during the
    /// concurrent batch, in µs.
    pub cpu_us_per_dry_run: f64,
    /// Peak resident memory of the process (server, cluster, clients), in
    /// MiB.
    pub peak_rss_mib: f64,
}

/// The API workload's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSize {
    /// Timed DryRuns per client.
    pub dry_runs: usize,
    /// Concurrent clients for the throughput figure.
    pub clients: usize,
}

/// The DryRun pod of docs/getting-started.md.
fn web_pod() -> serde_json::Value {
    json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "nodeSelector": {"topology.kubernetes.io/zone": "eu-west-1b"},
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
        }
    })
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// Runs the API workload. Not inside a runtime: it makes its own two.
pub fn run(name: &str, size: ApiSize, seed: u64, timeout: Duration) -> Result<ApiResult> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("berthd")
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    let (addr, cluster, _stop) = server_rt.block_on(start_server(seed, timeout))?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("client")
        .enable_all()
        .build()
        .context("starting the clients' runtime")?;
    let result = client_rt.block_on(async {
        tokio::time::timeout(timeout, measure(&addr, size))
            .await
            .map_err(|_| anyhow!("gave up after the guard timeout"))?
    })?;
    let (_, peak) = memory_mib();
    let (latencies, wall, cpu) = result;
    let concurrent_calls = size.dry_runs * size.clients;
    Ok(ApiResult {
        workload: name.to_string(),
        nodes: cluster.nodes().len(),
        pods: cluster.pods().len(),
        sequential_calls: latencies.len(),
        dry_run_p50_ms: quantile(&latencies, 0.5),
        dry_run_p90_ms: quantile(&latencies, 0.9),
        dry_run_p99_ms: quantile(&latencies, 0.99),
        clients: size.clients,
        concurrent_calls,
        dry_runs_per_second: concurrent_calls as f64 / wall.as_secs_f64().max(1e-9),
        cpu_us_per_dry_run: cpu * 1e6 / concurrent_calls.max(1) as f64,
        peak_rss_mib: peak,
    })
}

/// Starts berthd's API over the sample cluster and waits until the
/// scheduler has placed what it can. Returns the address, the cluster and
/// the sender that stops the server when dropped.
async fn start_server(
    seed: u64,
    timeout: Duration,
) -> Result<(
    String,
    Arc<EmbeddedCluster>,
    tokio::sync::oneshot::Sender<()>,
)> {
    let objects = parse_objects(SAMPLE_CLUSTER, "built-in sample cluster")?;
    let cluster = EmbeddedCluster::from_objects(objects)?;
    let registry = in_tree_registry();
    let cfg = config::default_config(&|n: &str| registry.contains(n));
    let source: Arc<dyn ClusterSource> = cluster.clone();
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        source,
        Options {
            seed: Some(seed),
            ..Options::default()
        },
    )
    .map_err(|e| anyhow!("starting the scheduler: {e}"))?;
    scheduler.wait_synced().await;
    // The sample's pending pods are placed first, so that the DryRuns see
    // a settled cluster (as a user asking after startup does).
    let metrics = scheduler.metrics().clone();
    tokio::time::timeout(timeout, async {
        loop {
            let changed = metrics.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if scheduler.is_idle() && metrics.scheduled() > 0 {
                return;
            }
            changed.await;
        }
    })
    .await
    .map_err(|_| anyhow!("the scheduler did not settle the sample cluster"))?;
    let (listener, addr) = berth_server::api::bind("127.0.0.1:0".parse()?).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(berth_server::api::serve(
        listener,
        scheduler,
        cluster.clone(),
        None,
        async move {
            let _ = stopped.await;
        },
    ));
    Ok((format!("http://{addr}"), cluster, stop))
}

/// The two measurements: per-call latencies on one connection, then the
/// wall-clock time and process CPU time of the concurrent batch.
async fn measure(addr: &str, size: ApiSize) -> Result<(Vec<Duration>, Duration, f64)> {
    let pod = web_pod();
    let mut client = berth_client::Client::connect(addr).await?;
    // Warm-up: connection windows, allocator, caches.
    for _ in 0..(size.dry_runs / 10).max(5) {
        client.dry_run(&pod, "", false).await?;
    }
    let mut latencies = Vec::with_capacity(size.dry_runs);
    for _ in 0..size.dry_runs {
        let t = Instant::now();
        let answer = client.dry_run(&pod, "", false).await?;
        latencies.push(t.elapsed());
        ensure!(
            !answer.selected_node.is_empty(),
            "the DryRun found no node: {}",
            answer.message
        );
    }
    latencies.sort();

    let mut clients = Vec::with_capacity(size.clients);
    for _ in 0..size.clients {
        clients.push(berth_client::Client::connect(addr).await?);
    }
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut c in clients {
        let pod = pod.clone();
        let n = size.dry_runs;
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                c.dry_run(&pod, "", false).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await.context("a client task panicked")??;
    }
    let wall = start.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    Ok((latencies, wall, cpu))
}
