//! Runs one workload through the real scheduler: the embedded cluster as
//! cluster source and binder, `Scheduler::start` with the workload's
//! profile, the real queue, cache and framework.
//!
//! 1. The nodes and the existing pods (unbound) go into the embedded
//!    cluster; the scheduler starts and places the existing pods, unmeasured.
//! 2. The measured pods (built beforehand) are created one after the other
//!    from a blocking thread while the scheduler runs, as scheduler_perf
//!    creates them through the API server. Pods that never fit are spread
//!    evenly through that stream.
//! 3. Throughput is the measured pods bound divided by the wall-clock time
//!    from the creation of the first measured pod to the end of the last
//!    Bind. The scheduler is idle when the first pod is created, so it pops
//!    it at once: this is "first pop to last bind", plus at most one
//!    hand-off.
//! 4. Attempt latencies come from the scheduler's own histograms
//!    ([`berth_server::scheduler::SchedulerMetrics`]), restricted to the
//!    measured stretch: from the pop to the end of Bind for the attempts
//!    that bound a pod.
//!
//! The run ends when every measured pod is bound and every pod that never
//! fits has been tried and parked among the unschedulable pods. If the
//! scheduler goes idle before that, a barrier pod (no requests) is created:
//! once it has been decided, every earlier cluster change has reached the
//! scheduler; idle again with no progress means the workload is stuck, and
//! the run fails with the pending pods' last failure messages.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use berth_server::cluster::ClusterSource;
use berth_server::cluster::embedded::EmbeddedCluster;
use berth_server::model::{NodeSpec, PodInfo};
use berth_server::queue::QueueName;
use berth_server::scheduler::{EventKind, Options, Scheduler};
use k8s_openapi::api::core::v1::Pod;

use crate::objects::{self, PodTemplate};
use crate::profile;
pub use crate::run::{RunOptions, RunResult};
pub use crate::usage::{cpu_seconds, cpu_seconds_from, memory_mib};
use crate::workloads::{Gangs, Workload};

/// A measured stretch shorter than this, in seconds, says little on its
/// own: a 500-node workload places its 1000 pods in about 0.1 s, and on a
/// shared 2-core machine two such runs a minute apart differed by a fifth.
pub const SHORT_RUN_SECONDS: f64 = 1.0;

/// How many times a workload with a short measured stretch runs.
pub const RUNS_WHEN_SHORT: usize = 5;

/// The median of `first` and `more` by pods/s (the upper one of an even
/// count), with every run's pods/s recorded in it.
pub fn median_run(first: RunResult, more: Vec<RunResult>) -> RunResult {
    if more.is_empty() {
        return first;
    }
    let mut runs = more;
    runs.push(first);
    runs.sort_by(|a, b| a.pods_per_second.total_cmp(&b.pods_per_second));
    let all: Vec<f64> = runs.iter().map(|r| r.pods_per_second).collect();
    let mut median = runs.swap_remove(all.len() / 2);
    median.runs_pods_per_second = all;
    median
}

/// A pod the run creates, and what must become of it.
struct Planned {
    pod: Pod,
    must_bind: bool,
}

/// The measured stream: the measured pods, with the pods that never fit
/// spread evenly among them; for a gang workload, gang after gang (see
/// [`gang_stream`]).
fn measured_stream(w: &Workload) -> Vec<Planned> {
    if let Some(gangs) = w.gangs {
        return gang_stream(w, gangs).1;
    }
    let (template, ns) = w.measured;
    let n = w.size.measured;
    let u = w.size.unschedulable;
    let mut out = Vec::with_capacity(n + u);
    let mut placed_u = 0;
    for i in 0..n {
        // Unschedulable pod k goes before measured pod (k+1)*n/(u+1).
        while placed_u < u && i >= (placed_u + 1) * n / (u + 1) {
            out.push(Planned {
                pod: w
                    .unschedulable
                    .pod(ns, &format!("{}-{placed_u}", w.unschedulable.stem())),
                must_bind: false,
            });
            placed_u += 1;
        }
        out.push(Planned {
            pod: template.pod(ns, &format!("{}-{i}", template.stem())),
            must_bind: true,
        });
    }
    while placed_u < u {
        out.push(Planned {
            pod: w
                .unschedulable
                .pod(ns, &format!("{}-{placed_u}", w.unschedulable.stem())),
            must_bind: false,
        });
        placed_u += 1;
    }
    out
}

/// A gang workload's PodGroups (created before measuring) and its
/// measured stream: the pods of each gang one after the other, the gangs
/// that cannot fit spread evenly among the others (gang `k` of those
/// before fitting gang `(k+1)*fit/(never_fit+1)`). Fitting gang `j` is
/// `gang-j` (pods `gang-j-0`, ...); the others are `never-fit-k`, whose
/// last pod asks for more CPU than any node has.
fn gang_stream(w: &Workload, gangs: Gangs) -> (Vec<serde_json::Value>, Vec<Planned>) {
    let (template, ns) = w.measured;
    let mut groups = Vec::with_capacity(gangs.fit + gangs.never_fit);
    let mut out = Vec::with_capacity(w.size.measured + w.size.unschedulable);
    let mut add = |name: String, size: usize, fits: bool| {
        groups.push(objects::pod_group(ns, &name, size));
        for i in 0..size {
            let too_big = !fits && i + 1 == size;
            out.push(Planned {
                pod: objects::gang_member(template, ns, &format!("{name}-{i}"), &name, too_big),
                must_bind: fits,
            });
        }
    };
    let mut placed = 0;
    for j in 0..gangs.fit {
        while placed < gangs.never_fit && j >= (placed + 1) * gangs.fit / (gangs.never_fit + 1) {
            add(format!("never-fit-{placed}"), gangs.size(placed), false);
            placed += 1;
        }
        add(format!("gang-{j}"), gangs.size(j), true);
    }
    while placed < gangs.never_fit {
        add(format!("never-fit-{placed}"), gangs.size(placed), false);
        placed += 1;
    }
    (groups, out)
}

fn key(pod: &Pod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// How often the harness looks at the scheduler's progress while it waits.
/// It is not woken by each attempt: waking this thread twice a pod cost the
/// scheduler's worker a futex wake-up each time (about 10 µs of its CPU a
/// pod on 2 cores), inside the stretch being measured. No figure depends
/// on it: the stretch ends at the last bind's own time stamp.
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// Waits for the scheduler to reach a goal, detecting stalls.
struct Waiter<'a> {
    scheduler: &'a Scheduler,
    cluster: &'a Arc<EmbeddedCluster>,
    deadline: tokio::time::Instant,
    /// Barrier pods bound so far (counted in the scheduler's total).
    barriers_bound: u64,
    barriers: usize,
    /// The pods that never fit are in gangs: see [`Waiter::parked`].
    gangs: bool,
}

impl Waiter<'_> {
    /// Waits until `bound` pods (barriers aside) have been bound in total
    /// and at least `parked` pods wait among the unschedulable ones, once
    /// `applied` says every pod was created.
    async fn wait(&mut self, bound: u64, parked: usize, applied: &AtomicBool) -> Result<()> {
        let metrics = self.scheduler.metrics().clone();
        let mut at_barrier: Option<(u64, u64)> = None;
        loop {
            let scheduled = metrics.scheduled() - self.barriers_bound;
            let is_applied = applied.load(Ordering::Acquire);
            if is_applied && scheduled >= bound && (parked == 0 || self.parked(parked)) {
                return Ok(());
            }
            if is_applied && self.scheduler.is_idle() {
                let progress = (scheduled, metrics.unschedulable() + metrics.errors());
                if at_barrier == Some(progress) {
                    bail!(
                        "the scheduler is idle with {scheduled} of {bound} pods bound: {}",
                        self.pending_report()
                    );
                }
                self.barrier().await?;
                at_barrier = Some((
                    metrics.scheduled() - self.barriers_bound,
                    metrics.unschedulable() + metrics.errors(),
                ));
                continue;
            }
            if tokio::time::Instant::now() >= self.deadline {
                bail!(
                    "gave up after the guard timeout with {scheduled} of {bound} pods bound: {}",
                    self.pending_report()
                );
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Whether at least `parked` pods that never fit wait after a failure:
    /// among the unschedulable pods; for gangs, in any queue (a gang that
    /// does not fit goes to backoffQ after each attempt, never to the
    /// unschedulable pods, and backoffQ is popped whenever activeQ is
    /// empty, as upstream's queue does with SchedulerPopFromBackoffQ).
    fn parked(&self, parked: usize) -> bool {
        if !self.gangs {
            return self.scheduler.queue_counts().unschedulable >= parked;
        }
        let failed = self
            .scheduler
            .queue()
            .list()
            .iter()
            .filter(|e| e.info.last_failure.is_some())
            .count();
        failed >= parked
    }

    /// Creates a pod that fits anywhere and waits for the scheduler's
    /// decision on it: every cluster change made before has then reached
    /// the scheduler.
    async fn barrier(&mut self) -> Result<()> {
        let mut events = self.scheduler.events();
        let name = format!("barrier-{}", self.barriers);
        self.barriers += 1;
        let mut pod = PodTemplate::Default.pod("bench-barrier", &name);
        if let Some(spec) = pod.spec.as_mut() {
            for c in &mut spec.containers {
                c.resources = None;
            }
        }
        self.cluster
            .apply_pod(pod)
            .map_err(|e| anyhow!("creating the barrier pod: {e}"))?;
        loop {
            let e = tokio::time::timeout_at(self.deadline, events.recv())
                .await
                .map_err(|_| anyhow!("no decision on the barrier pod before the guard timeout"))?;
            match e {
                Ok(e) if &*e.pod.name == name.as_str() => match e.kind {
                    EventKind::Scheduled => {
                        self.barriers_bound += 1;
                        return Ok(());
                    }
                    EventKind::Failed => return Ok(()),
                    _ => {}
                },
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    bail!("the scheduler stopped")
                }
            }
        }
    }

    fn pending_report(&self) -> String {
        let pending = self.scheduler.queue().list();
        let mut lines: Vec<String> = pending
            .iter()
            .take(5)
            .map(|e| {
                format!(
                    "{} ({:?}): {}",
                    e.info.pod.key(),
                    e.queue,
                    e.info.last_failure.as_deref().unwrap_or("not attempted")
                )
            })
            .collect();
        if pending.len() > 5 {
            lines.push(format!("and {} more", pending.len() - 5));
        }
        format!("{} pending: {}", pending.len(), lines.join("; "))
    }
}

/// Runs `w` on the current tokio runtime.
pub async fn run(w: &Workload, opts: &RunOptions) -> Result<RunResult> {
    if w.profile == crate::workloads::Profile::Kube {
        return crate::kube::run(w, opts).await;
    }
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let cluster = EmbeddedCluster::new();
    for i in 0..w.size.nodes {
        cluster
            .apply_node(objects::node(i, w.zones))
            .map_err(|e| anyhow!("creating node {i}: {e}"))?;
    }
    if w.devices_per_node > 0 {
        use berth_server::cache::KubeObject;
        let mut objects = vec![KubeObject::DeviceClass(Arc::new(objects::device_class()))];
        for ns in [w.existing.1, w.measured.1] {
            objects.push(KubeObject::ResourceClaimTemplate(Arc::new(
                objects::claim_template(ns),
            )));
        }
        for i in 0..w.size.nodes {
            objects.push(KubeObject::ResourceSlice(Arc::new(
                objects::resource_slice(i, w.devices_per_node),
            )));
        }
        for o in objects {
            cluster
                .apply_object(o)
                .map_err(|e| anyhow!("creating a DRA object: {e}"))?;
        }
    }
    for (template, ns) in [w.existing, w.measured] {
        if template == PodTemplate::Replicated {
            for o in objects::deployment_objects(ns) {
                cluster
                    .apply(o)
                    .map_err(|e| anyhow!("creating the Deployment's objects: {e}"))?;
            }
        }
    }
    if let Some(gangs) = w.gangs {
        // As upstream's createPodGroups: the PodGroups exist before their
        // pods are created (and before measuring).
        let (groups, _) = gang_stream(w, gangs);
        cluster
            .apply(objects::namespace(w.measured.1))
            .map_err(|e| anyhow!("creating the gangs' namespace: {e}"))?;
        for g in groups {
            cluster
                .apply(g)
                .map_err(|e| anyhow!("creating a PodGroup: {e}"))?;
        }
    }
    let existing = w.existing_pods();
    for i in 0..existing.count {
        let name = format!("{}-init-{i}", existing.template.stem());
        cluster
            .apply_pod(existing.template.pod(existing.namespace, &name))
            .map_err(|e| anyhow!("creating pod {name}: {e}"))?;
    }
    let stream = measured_stream(w);
    let (rss_before, _) = memory_mib();

    let mut setup = profile::setup(w.profile, w.gangs.is_some()).await?;
    if let Some(p) = opts.parallelism {
        setup.config.parallelism = p.max(1);
    }
    let source: Arc<dyn ClusterSource> = cluster.clone();
    let scheduler = Scheduler::start(
        &setup.config,
        &setup.registry,
        source,
        Options {
            seed: Some(opts.seed),
            ..Options::default()
        },
    )
    .map_err(|e| anyhow!("starting the scheduler: {e}"))?;
    setup.ready(&scheduler).await?;
    let mut waiter = Waiter {
        scheduler: &scheduler,
        cluster: &cluster,
        deadline,
        barriers_bound: 0,
        barriers: 0,
        gangs: w.gangs.is_some(),
    };
    let setup_start = Instant::now();
    scheduler.wait_synced().await;
    let all_applied = AtomicBool::new(true);
    waiter
        .wait(existing.count as u64, 0, &all_applied)
        .await
        .context("placing the existing pods")?;
    let setup_seconds = setup_start.elapsed().as_secs_f64();

    let must_bind: Vec<(String, String)> = stream
        .iter()
        .filter(|p| p.must_bind)
        .map(|p| key(&p.pod))
        .collect();
    let must_wait: Vec<(String, String)> = stream
        .iter()
        .filter(|p| !p.must_bind)
        .map(|p| key(&p.pod))
        .collect();
    let before = scheduler.metrics().snapshot();
    let bound_before = scheduler.metrics().scheduled() - waiter.barriers_bound;
    let applied = Arc::new(AtomicBool::new(false));
    perf_ctl("enable");
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let creator = {
        let cluster = cluster.clone();
        let applied = applied.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            for p in stream {
                let (ns, name) = key(&p.pod);
                cluster
                    .apply_pod(p.pod)
                    .map_err(|e| anyhow!("creating pod {ns}/{name}: {e}"))?;
            }
            applied.store(true, Ordering::Release);
            Ok(())
        })
    };
    let churning = Arc::new(AtomicBool::new(w.churn));
    let churner = w.churn.then(|| {
        tokio::spawn(churn(
            cluster.clone(),
            w.zones,
            w.size.nodes,
            churning.clone(),
        ))
    });
    let waited = waiter
        .wait(
            bound_before + must_bind.len() as u64,
            must_wait.len(),
            &applied,
        )
        .await;
    churning.store(false, Ordering::Release);
    if let Some(c) = churner {
        c.await.context("the churner panicked")??;
    }
    creator.await.context("the pod creator panicked")??;
    waited.context("scheduling the measured pods")?;
    let measured = scheduler.metrics().snapshot().since(&before);
    let cpu = cpu_seconds() - cpu_before;
    perf_ctl("disable");
    let (_, peak) = memory_mib();
    let end = measured
        .last_scheduled_at
        .filter(|_| !must_bind.is_empty())
        .unwrap_or(start);
    let seconds = end.saturating_duration_since(start).as_secs_f64();
    scheduler.stop();

    verify(&cluster, &scheduler, w, &must_bind, &must_wait)?;
    drop(setup);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let attempts = &measured.attempt_scheduled;
    Ok(RunResult {
        workload: w.name.clone(),
        nodes: w.size.nodes,
        existing_pods: existing.count,
        measured_pods: must_bind.len(),
        unschedulable_pods: must_wait.len(),
        pods_per_second: if seconds > 0.0 {
            must_bind.len() as f64 / seconds
        } else {
            0.0
        },
        measured_seconds: seconds,
        attempt_p50_ms: ms(attempts.quantile(0.5)),
        attempt_p90_ms: ms(attempts.quantile(0.9)),
        attempt_p99_ms: ms(attempts.quantile(0.99)),
        attempt_mean_ms: ms(attempts.mean()),
        cycle_p99_ms: ms(measured.cycle_scheduled.quantile(0.99)),
        cpu_us_per_pod: if must_bind.is_empty() {
            0.0
        } else {
            cpu * 1e6 / must_bind.len() as f64
        },
        failed_attempts: measured.unschedulable + measured.errors,
        preempted_pods: measured.preempted,
        setup_seconds,
        rss_before_scheduler_mib: rss_before,
        peak_rss_mib: peak,
        groups: w.gangs.map_or(0, |g| g.fit),
        groups_per_second: match w.gangs {
            Some(g) if seconds > 0.0 => g.fit as f64 / seconds,
            _ => 0.0,
        },
        runs_pods_per_second: Vec::new(),
        kube: None,
    })
}

/// SchedulingWithMixedChurn's churn, in upstream's `recreate` mode: every
/// tick, the objects of the previous tick are deleted and a new set is
/// created (see [`objects::churn_objects`]), until `on` is cleared; the
/// last set is deleted at the end. Churned nodes are numbered after the
/// workload's `nodes` so they take the next zones round robin.
async fn churn(
    cluster: Arc<EmbeddedCluster>,
    zones: &'static [&'static str],
    nodes: usize,
    on: Arc<AtomicBool>,
) -> Result<()> {
    use berth_server::cluster::embedded::Kind;
    let mut tick = 0;
    let mut previous: Vec<(Kind, String, String)> = Vec::new();
    let mut interval = tokio::time::interval(CHURN_INTERVAL);
    while on.load(Ordering::Acquire) {
        interval.tick().await;
        for (kind, ns, name) in previous.drain(..) {
            cluster.delete(kind, &ns, &name);
        }
        let (node, pod, others) = objects::churn_objects(nodes + tick, zones);
        let node_name = cluster
            .apply_node(node)
            .map_err(|e| anyhow!("churn: creating a node: {e}"))?;
        previous.push((Kind::Node, String::new(), node_name));
        let (ns, name) = cluster
            .apply_pod(pod)
            .map_err(|e| anyhow!("churn: creating a pod: {e}"))?;
        previous.push((Kind::Pod, ns, name));
        for o in others {
            previous.push(
                cluster
                    .apply(o)
                    .map_err(|e| anyhow!("churn: creating an object: {e}"))?,
            );
        }
        tick += 1;
    }
    for (kind, ns, name) in previous {
        cluster.delete(kind, &ns, &name);
    }
    Ok(())
}

/// How often SchedulingWithMixedChurn recreates its objects.
const CHURN_INTERVAL: Duration = Duration::from_millis(20);

/// Checks the end state: the measured pods bound, the pods that never fit
/// pending among the unschedulable ones with their failure recorded, no
/// node given more than it has, and the workload's placement rules held.
fn verify(
    cluster: &EmbeddedCluster,
    scheduler: &Scheduler,
    w: &Workload,
    must_bind: &[(String, String)],
    must_wait: &[(String, String)],
) -> Result<()> {
    let pods: HashMap<(String, String), Arc<Pod>> =
        cluster.pods().into_iter().map(|p| (key(&p), p)).collect();
    let node_of = |k: &(String, String)| {
        pods.get(k)
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.clone())
    };
    let unbound: Vec<_> = must_bind
        .iter()
        .filter(|k| node_of(k).is_none())
        .take(3)
        .collect();
    ensure!(unbound.is_empty(), "measured pods not bound: {unbound:?}");
    let parked: HashMap<(String, String), bool> = scheduler
        .queue()
        .list()
        .into_iter()
        .map(|e| {
            (
                (
                    e.info.pod.namespace.to_string(),
                    e.info.pod.name.to_string(),
                ),
                (e.queue == QueueName::Unschedulable || w.gangs.is_some())
                    && e.info.last_failure.is_some(),
            )
        })
        .collect();
    for k in must_wait {
        ensure!(pods.contains_key(k), "pod {k:?} that never fits is gone");
        ensure!(node_of(k).is_none(), "pod {k:?} that never fits was bound");
        ensure!(
            parked.get(k) == Some(&true),
            "pod {k:?} that never fits is not waiting among the unschedulable pods after a failure"
        );
    }

    // No node holds more than it has.
    let nodes: HashMap<String, NodeSpec> = cluster
        .nodes()
        .into_iter()
        .filter_map(|n| NodeSpec::new(n).ok().map(|s| (s.name.to_string(), s)))
        .collect();
    let mut used: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    let mut infos = Vec::new();
    for p in pods.values() {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let info = PodInfo::new(p.clone()).map_err(|e| anyhow!("{e}"))?;
        let u = used.entry(node.clone()).or_default();
        u.0 += info.requests.milli_cpu;
        u.1 += info.requests.memory;
        u.2 += 1;
        infos.push((node, info));
    }
    for (node, (cpu, mem, count)) in &used {
        // A churned node may be gone with pods still bound to it (upstream's
        // pod garbage collector would delete them later).
        if w.churn && node.starts_with("churn-node-") && !nodes.contains_key(node) {
            continue;
        }
        let spec = nodes
            .get(node)
            .ok_or_else(|| anyhow!("pods bound to unknown node {node}"))?;
        let a = &spec.allocatable;
        ensure!(
            *cpu <= a.milli_cpu && *mem <= a.memory && *count <= a.allowed_pod_number,
            "node {node} is overcommitted: {cpu}m CPU, {mem} bytes, {count} pods"
        );
    }

    if w.devices_per_node > 0 {
        verify_claims(cluster, &infos)?;
    }

    // The placement rules of the templates.
    let zone_of = |node: &str| {
        nodes
            .get(node)
            .and_then(|n| n.labels.get(objects::ZONE_LABEL).map(str::to_string))
            .unwrap_or_default()
    };
    let with_label = |color: &'static str| -> Vec<&str> {
        infos
            .iter()
            .filter(|(_, p)| p.labels.get("color").is_some_and(|c| c == color))
            .map(|(n, _)| n.as_str())
            .collect()
    };
    match w.measured.0 {
        PodTemplate::PodAntiAffinity => {
            let mut per_node: HashMap<&str, usize> = HashMap::new();
            for n in with_label("green") {
                *per_node.entry(n).or_default() += 1;
            }
            ensure!(
                per_node.values().all(|&c| c == 1),
                "pods with anti-affinity share a node"
            );
        }
        PodTemplate::TopologySpreading => {
            let mut per_zone: BTreeMap<String, i64> =
                w.zones.iter().map(|z| (z.to_string(), 0)).collect();
            for n in with_label("blue") {
                *per_zone.entry(zone_of(n)).or_default() += 1;
            }
            let (min, max) = (
                per_zone.values().min().copied().unwrap_or(0),
                per_zone.values().max().copied().unwrap_or(0),
            );
            ensure!(
                max - min <= 5,
                "spreading pods are skewed beyond 5: {per_zone:?}"
            );
        }
        PodTemplate::NodeAffinity => {
            for (n, _) in &infos {
                let z = zone_of(n);
                ensure!(z == "zone1" || z == "zone2", "pod on {n} in zone {z:?}");
            }
        }
        _ => {}
    }
    Ok(())
}

/// DRA workloads: every bound pod's claims are allocated, on its node,
/// reserved for it, and no device is allocated twice.
fn verify_claims(cluster: &EmbeddedCluster, bound: &[(String, PodInfo)]) -> Result<()> {
    use berth_server::cache::{KubeObject, ObjectKind};
    let mut claims = HashMap::new();
    for o in cluster.objects(ObjectKind::ResourceClaim) {
        if let KubeObject::ResourceClaim(c) = o {
            let k = (
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default(),
            );
            claims.insert(k, c);
        }
    }
    let mut devices = std::collections::HashSet::new();
    for (node, pod) in bound {
        let object = pod.pod.get();
        let status = object.status.as_ref();
        let named = status
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .map_or(0, Vec::len);
        ensure!(
            named == pod.resource_claims.len(),
            "{} names {named} of its {} claims",
            pod.key(),
            pod.resource_claims.len()
        );
        for s in status
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
        {
            let name = s.resource_claim_name.clone().unwrap_or_default();
            let claim = claims
                .get(&(pod.namespace.to_string(), name.clone()))
                .with_context(|| format!("claim {name} of {} is gone", pod.key()))?;
            let st = claim.status.as_ref().context("claim without status")?;
            let alloc = st
                .allocation
                .as_ref()
                .with_context(|| format!("claim {name} of {} is not allocated", pod.key()))?;
            ensure!(
                st.reserved_for.iter().flatten().any(|r| r.uid == *pod.uid),
                "claim {name} is not reserved for {}",
                pod.key()
            );
            for r in alloc
                .devices
                .as_ref()
                .and_then(|d| d.results.as_ref())
                .into_iter()
                .flatten()
            {
                ensure!(
                    r.pool == *node,
                    "{}'s device {} is on another node",
                    pod.key(),
                    r.device
                );
                ensure!(
                    devices.insert((r.driver.clone(), r.pool.clone(), r.device.clone())),
                    "device {}/{} is allocated twice",
                    r.pool,
                    r.device
                );
            }
        }
    }
    Ok(())
}

/// Tells a `perf record --control fifo:CTL,ACK` (or `perf stat`) started
/// with `--delay=-1` to start or stop counting, so that a profile covers
/// the measured stretch of each run and not the set-up: the FIFOs are
/// named by `BERTH_BENCH_PERF_CTL` and `BERTH_BENCH_PERF_ACK`, and nothing
/// happens without them. `perf`'s acknowledgement is awaited, so what is
/// measured starts after the profile does.
fn perf_ctl(command: &str) {
    use std::io::{Read, Write};
    let (Some(ctl), Some(ack)) = (
        std::env::var_os("BERTH_BENCH_PERF_CTL"),
        std::env::var_os("BERTH_BENCH_PERF_ACK"),
    ) else {
        return;
    };
    let sent = std::fs::OpenOptions::new()
        .write(true)
        .open(&ctl)
        .and_then(|mut f| f.write_all(format!("{command}\n").as_bytes()));
    if let Err(e) = sent {
        eprintln!("berth-bench: telling perf to {command} through {ctl:?}: {e}");
        return;
    }
    let mut reply = [0u8; 5];
    if let Err(e) = std::fs::File::open(&ack).and_then(|mut f| f.read(&mut reply)) {
        eprintln!("berth-bench: waiting for perf's acknowledgement on {ack:?}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pods_per_second: f64, cpu_us_per_pod: f64) -> RunResult {
        RunResult {
            pods_per_second,
            cpu_us_per_pod,
            ..RunResult::default()
        }
    }

    #[test]
    fn the_median_run_keeps_its_own_figures_and_records_every_runs_rate() {
        let m = median_run(
            run(300.0, 3.0),
            vec![
                run(100.0, 1.0),
                run(500.0, 5.0),
                run(200.0, 2.0),
                run(400.0, 4.0),
            ],
        );
        assert_eq!(m.pods_per_second, 300.0);
        assert_eq!(m.cpu_us_per_pod, 3.0, "the median run's own CPU figure");
        assert_eq!(m.runs_pods_per_second, [100.0, 200.0, 300.0, 400.0, 500.0]);

        let even = median_run(run(100.0, 1.0), vec![run(200.0, 2.0)]);
        assert_eq!(even.pods_per_second, 200.0, "the upper one of two");

        let single = median_run(run(100.0, 1.0), Vec::new());
        assert_eq!(single.pods_per_second, 100.0);
        assert!(single.runs_pods_per_second.is_empty(), "one run, no list");
    }
}
