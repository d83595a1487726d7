//! The kube-mode workloads: berthd's real Kubernetes source (watches, the
//! mirror), binder and event writer against a stand-in API server over
//! real HTTP on loopback.
//!
//! The stand-in is `tests/src/fake_apiserver.rs` (the one kube mode's
//! end-to-end tests use: the v1.36 API's lists with paging, watches,
//! bindings, status patches and events), run in a process of its own
//! (this binary with `--serve-apiserver`) so that its CPU and memory are
//! not counted as the scheduler's. It starts with the whole backlog in it:
//! nodes and pending pods shaped as a v1.36 API server stores them
//! (defaulted fields, managed fields, the service account token volume,
//! the owning ReplicaSet), as upstream's scheduler meets them after a
//! restart with a backlog.
//!
//! The scheduler side runs in the workload's process, wired as berthd
//! wires kube mode (`KubeCluster::connect` and `Scheduler::start` with the
//! default profile), so its CPU time and peak RSS are berthd's own.
//! Measured from before the first list to the last pod's `Scheduled`
//! event written: every pod must be bound exactly once and have its
//! event.

use std::io::{BufRead, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use berth_e2e::fake_apiserver::FakeApiServer;
use berth_server::cluster::ClusterSource;
use berth_server::cluster::kube::{ClientOptions, KubeCluster, KubeOptions};
use berth_server::config;
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::{Options, Scheduler};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::run::KubeFigures;
use crate::run::{RunOptions, RunResult};
use crate::usage::{cpu_seconds, memory_mib};
use crate::workloads::Workload;

/// The client rate limit of the kube workloads, as upstream's
/// scheduler_perf raises it: the benchmark measures the scheduler's own
/// cost, not client-go's default of 50 requests per second (the limiter
/// still runs on every request).
pub const BENCH_QPS: f32 = 5000.0;
/// The matching burst.
pub const BENCH_BURST: i32 = 5000;

/// What the stand-in saw, by request kind.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StandInStats {
    /// Every request.
    pub requests: u64,
    /// Successful bindings.
    pub bindings: u64,
    /// Pods with more than one successful binding (must be none).
    pub bound_twice: u64,
    /// Events created, by reason `Scheduled`.
    pub scheduled_events: u64,
    /// Events created, all reasons.
    pub events_created: u64,
    /// Event series patches.
    pub events_patched: u64,
}

// ---------------------------------------------------------------------------
// Objects as a v1.36 API server stores them

const CREATED: &str = "2026-11-24T06:00:00Z";

/// Node `i`: 4 CPUs, 32Gi and 110 pods as scheduler_perf's node template,
/// with what the API server and a kubelet add.
pub fn node_object(i: usize, zones: &[&str]) -> Value {
    let name = format!("node-{i}");
    let zone = zones
        .get(i % zones.len().max(1))
        .copied()
        .unwrap_or("zone1");
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": zone,
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "managedFields": [{
                "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                "time": CREATED, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
                    "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                    "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {},
                    "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}}},
            }, {
                "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                "time": CREATED, "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:allocatable": {"f:cpu": {}, "f:memory": {}, "f:pods": {}},
                    "f:capacity": {"f:cpu": {}, "f:memory": {}, "f:pods": {}},
                    "f:conditions": {"k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {},
                        "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}},
                    "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}},
                    "f:nodeInfo": {"f:architecture": {}, "f:containerRuntimeVersion": {},
                        "f:kernelVersion": {}, "f:kubeletVersion": {}, "f:operatingSystem": {}, "f:osImage": {}}}},
            }],
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", (i / 256) % 256, i % 256)},
        "status": {
            "capacity": {"cpu": "4", "ephemeral-storage": "100Gi", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "ephemeral-storage": "100Gi", "memory": "32Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": CREATED,
                 "lastTransitionTime": CREATED, "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": CREATED,
                 "lastTransitionTime": CREATED, "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": CREATED,
                 "lastTransitionTime": CREATED, "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": CREATED,
                 "lastTransitionTime": CREATED, "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", (i / 256) % 256, i % 256)},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"),
                         "bootID": format!("{i:032x}"), "kernelVersion": "6.1.0-27-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.24",
                         "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "images": [
                {"names": ["registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
                           "registry.k8s.io/pause:3.10"], "sizeBytes": 320368},
                {"names": ["registry.k8s.io/kube-proxy@sha256:8e9cd5a3c4a1c0b3de8a7a1e1e5d1b3c0a4b5f1e9d3b1e2f3a4b5c6d7e8f9a0b1",
                           "registry.k8s.io/kube-proxy:v1.36.2"], "sizeBytes": 30_000_000},
            ],
        },
    })
}

/// Pending pod `i` of a ReplicaSet: scheduler_perf's default pod (100m,
/// 500Mi), as the API server stores it after defaulting and admission.
pub fn pod_object(i: usize) -> Value {
    let name = format!("app-7d4b9c8f6-{i:05}");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default",
            "generateName": "app-7d4b9c8f6-",
            "labels": {"app": "bench", "pod-template-hash": "7d4b9c8f6"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-7d4b9c8f6",
                                 "uid": "2b1f5a3e-5c8e-4e0a-9a4f-3c7b2d9e1f00",
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": CREATED, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                        "f:ownerReferences": {".": {}, "k:{\"uid\":\"2b1f5a3e-5c8e-4e0a-9a4f-3c7b2d9e1f00\"}": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"pause\"}": {".": {}, "f:image": {},
                        "f:imagePullPolicy": {}, "f:name": {},
                        "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                        "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}},
                },
            }],
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
                "defaultMode": 420}}],
            "containers": [{
                "name": "pause", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
            "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    })
}

// ---------------------------------------------------------------------------
// The stand-in process

/// Serves the stand-in with `nodes` nodes and `pods` pending pods: prints
/// `listening on URL` on stdout, then one JSON [`StandInStats`] line per
/// `stats` line read on stdin; returns when stdin closes.
pub async fn serve_apiserver(nodes: usize, pods: usize, zones: &[&str]) -> Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    for i in 0..nodes {
        fake.create("/api/v1/nodes", node_object(i, zones))?;
    }
    for i in 0..pods {
        fake.create("/api/v1/namespaces/default/pods", pod_object(i))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", fake.url())?;
        out.flush()?;
    }
    // stdin is read on a thread of its own; each `stats` line is answered
    // from the runtime, where the stand-in's state lives.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        if line.trim() == "stats" {
            let stats = serde_json::to_string(&stats(&fake))?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{stats}")?;
            out.flush()?;
        }
    }
    Ok(())
}

fn stats(fake: &FakeApiServer) -> StandInStats {
    let mut s = StandInStats::default();
    let mut bound = std::collections::HashMap::<String, u64>::new();
    for r in fake.requests() {
        s.requests += 1;
        let ok = (200..300).contains(&r.status);
        if r.method == "POST" && r.path.ends_with("/binding") && ok {
            s.bindings += 1;
            *bound.entry(r.path.clone()).or_default() += 1;
        }
        if r.path.starts_with("/apis/events.k8s.io/") && ok {
            match r.method.as_str() {
                "POST" => {
                    s.events_created += 1;
                    if r.body["reason"] == "Scheduled" {
                        s.scheduled_events += 1;
                    }
                }
                "PATCH" => s.events_patched += 1,
                _ => {}
            }
        }
    }
    s.bound_twice = bound.values().filter(|n| **n > 1).count() as u64;
    s
}

/// The stand-in process, killed when dropped.
struct StandIn {
    child: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    url: String,
}

impl StandIn {
    fn start(w: &Workload) -> Result<Self> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut child = std::process::Command::new(exe)
            .args([
                "--serve-apiserver",
                "--workload",
                &w.name,
                "--nodes",
                &w.size.nodes.to_string(),
                "--pods",
                &w.size.measured.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the stand-in API server")?;
        let mut stdout = std::io::BufReader::new(child.stdout.take().context("stand-in stdout")?);
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .context("reading the stand-in's first line")?;
        let url = first
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow!("the stand-in said {first:?}"))?
            .trim()
            .to_string();
        Ok(Self { child, stdout, url })
    }

    fn stats(&mut self) -> Result<StandInStats> {
        let stdin = self.child.stdin.as_mut().context("stand-in stdin")?;
        stdin.write_all(b"stats\n")?;
        stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        serde_json::from_str(line.trim()).with_context(|| format!("stand-in stats {line:?}"))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The scheduler side

/// Runs a kube workload: `w.size.nodes` nodes and `w.size.measured` pending
/// pods in the stand-in, berth's kube source and default profile against
/// it.
pub async fn run(w: &Workload, opts: &RunOptions) -> Result<RunResult> {
    let pods = w.size.measured as u64;
    let mut stand_in = tokio::task::block_in_place(|| StandIn::start(w))?;
    let (rss_before, _) = memory_mib();
    let registry = in_tree_registry();
    let known = |n: &str| registry.contains(n);
    let mut cfg = config::default_config(&known);
    cfg.client_connection.qps = BENCH_QPS;
    cfg.client_connection.burst = BENCH_BURST;
    if let Some(p) = opts.parallelism {
        cfg.parallelism = p.max(1);
    }
    let deadline = tokio::time::Instant::now() + opts.timeout;

    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let kube_config = kube::Config::new(
        stand_in
            .url
            .parse()
            .with_context(|| format!("the stand-in's URL {:?}", stand_in.url))?,
    );
    let source = KubeCluster::connect(
        kube_config,
        KubeOptions {
            identity: "berth-bench".into(),
            client: ClientOptions {
                qps: cfg.client_connection.qps,
                burst: cfg.client_connection.burst,
                purpose: "",
            },
            ..KubeOptions::default()
        },
    )?;
    let source: std::sync::Arc<dyn ClusterSource> = source;
    let recorder = match &opts.record {
        Some(path) => Some(berth_server::recording::Recorder::start(
            berth_server::recording::RecorderOptions {
                path: path.clone(),
                max_bytes: 256 << 20,
                keep: 4,
                source: "kube",
                seed: Some(opts.seed),
                profiles: vec!["default-scheduler".into()],
            },
        )?),
        None => None,
    };
    let scheduler = Scheduler::start_observed(
        &cfg,
        &registry,
        source,
        Options {
            seed: Some(opts.seed),
            ..Options::default()
        },
        recorder
            .clone()
            .map(|r| r as std::sync::Arc<dyn berth_server::recording::Observer>),
    )
    .map_err(|e| anyhow!("starting the scheduler: {e}"))?;
    tokio::time::timeout_at(deadline, scheduler.wait_synced())
        .await
        .map_err(|_| anyhow!("the cache did not sync before the guard timeout"))?;
    let sync_seconds = start.elapsed().as_secs_f64();

    // Every pod bound.
    let metrics = scheduler.metrics().clone();
    let mut first_bind: Option<Instant> = None;
    loop {
        let changed = metrics.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let bound = metrics.scheduled();
        if bound > 0 && first_bind.is_none() {
            first_bind = Some(Instant::now());
        }
        if bound >= pods {
            break;
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            bail!("gave up after the guard timeout with {bound} of {pods} pods bound");
        }
    }
    let last_bind = Instant::now();
    // Every Scheduled event written (the writer works behind the binder).
    let stats = loop {
        let s = tokio::task::block_in_place(|| stand_in.stats())?;
        if s.scheduled_events >= pods {
            break s;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "gave up after the guard timeout with {} of {pods} Scheduled events written",
            s.scheduled_events
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The trace written to its end: its writer's CPU counts.
    if let Some(r) = &recorder {
        tokio::task::block_in_place(|| r.close(Duration::from_secs(60)));
    }
    let total = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let (_, peak) = memory_mib();
    scheduler.stop();
    ensure!(
        stats.bindings == pods && stats.bound_twice == 0,
        "{} bindings for {pods} pods, {} pods bound twice",
        stats.bindings,
        stats.bound_twice
    );

    let measured = metrics.snapshot();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let attempts = &measured.attempt_scheduled;
    let bind_span = first_bind
        .map(|f| last_bind.saturating_duration_since(f).as_secs_f64())
        .unwrap_or(0.0);
    Ok(RunResult {
        workload: w.name.clone(),
        nodes: w.size.nodes,
        existing_pods: 0,
        measured_pods: pods as usize,
        unschedulable_pods: 0,
        pods_per_second: if bind_span > 0.0 {
            pods as f64 / bind_span
        } else {
            0.0
        },
        measured_seconds: bind_span,
        attempt_p50_ms: ms(attempts.quantile(0.5)),
        attempt_p90_ms: ms(attempts.quantile(0.9)),
        attempt_p99_ms: ms(attempts.quantile(0.99)),
        attempt_mean_ms: ms(attempts.mean()),
        cycle_p99_ms: ms(measured.cycle_scheduled.quantile(0.99)),
        cpu_us_per_pod: cpu * 1e6 / pods.max(1) as f64,
        failed_attempts: measured.unschedulable + measured.errors,
        preempted_pods: measured.preempted,
        setup_seconds: sync_seconds,
        rss_before_scheduler_mib: rss_before,
        peak_rss_mib: peak,
        groups: 0,
        groups_per_second: 0.0,
        runs_pods_per_second: Vec::new(),
        kube: Some(KubeFigures {
            pods_bound: stats.bindings,
            events_written: stats.scheduled_events,
            api_requests_per_pod: stats.requests as f64 / pods.max(1) as f64,
            sync_seconds,
            total_seconds: total,
        }),
    })
}
