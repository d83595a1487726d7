//! Replay: a trace (recorded by `berthd --record`, or generated) played
//! through candidate configurations, each on its own copy of the cluster,
//! in simulated time (ARCHITECTURE decision 20).
//!
//! # How a configuration is played
//!
//! Each configuration runs on a thread of its own, in a tokio runtime
//! whose clock is paused: the real scheduler ([`Scheduler`], its queue
//! with its backoff and flush timers, its binding cycles and Permit waits)
//! runs on it unchanged, over an embedded cluster ([`ReplayCluster`]).
//! A paused clock moves only when every task waits for a timer, and then
//! jumps to the earliest one: it is a discrete-event simulation, in which
//! a scheduling cycle takes no simulated time, a binding takes
//! `bind_latency`, a pod waits its backoff, and a day passes as fast as
//! the scheduler can do the day's work.
//!
//! The driver is one task among the scheduler's: before each record it
//! sleeps until the record's time (so everything due before it, backoffs
//! expiring, bindings landing, runs first), then applies it to the copy,
//! as the API server would have: pods arrive, nodes come and go, pods
//! leave when the trace says they were deleted, and pods bound to a node
//! that is gone are deleted as the pod garbage collector would (see
//! [`ReplayCluster`]; they are counted, not recreated). Records the driver waits
//! for are read on another thread; while it waits, it blocks its runtime
//! so that no simulated time passes for want of the next record.
//!
//! The records up to the trace's `synced` are the first state: applied
//! before the scheduler starts, so that it lists them as its informers
//! would. A pending pod of one of the configuration's profiles is the
//! configuration's to place: a binding the trace records for it is the
//! recorded scheduler's decision and is not applied, nor is the deletion of
//! a pod the recorded scheduler evicted (the configuration preempts on its
//! own). Pods of other schedulers are bound as the trace says.
//!
//! After the last record, the simulation goes on until nothing is left to
//! try (no pod active or backing off, no binding under way), at most
//! `settle` of simulated time.
//!
//! The trace is read once and shared between the configurations through
//! bounded channels: memory follows the live cluster, not the trace.

mod cluster;
mod collect;
pub mod report;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use tokio::time::Instant;

pub use cluster::ReplayCluster;
pub use collect::reasons_of;
pub use report::{Comparison, ConfigReport, Percentiles, Report, Series};

use crate::cluster::embedded::{EmbeddedCluster, Kind};
use crate::config::SchedulerConfig;
use crate::model::PodInfo;
use crate::recording::format::{Body, Object, kind_named};
use crate::recording::{FormatError, Reader, Record};
use crate::scheduler::{Options, Scheduler};
use collect::Collector;
use report::Comparator;

/// How many records go down a configuration's channel at once.
const BATCH: usize = 512;
/// How many batches may wait in a configuration's channel.
const QUEUED_BATCHES: usize = 16;

/// A configuration to replay.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its name in the report (its file's name, say).
    pub name: String,
    /// The configuration.
    pub config: SchedulerConfig,
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// How long a binding takes, in simulated time.
    pub bind_latency: Duration,
    /// The seed for breaking ties (None: the trace's, else 1).
    pub seed: Option<u64>,
    /// Cores to use: configurations run one per core, and a configuration
    /// alone gets the rest for its Filter and Score.
    pub cores: usize,
    /// How long, in simulated time, the schedulers may go on after the
    /// last record while pods are still being tried.
    pub settle: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            bind_latency: Duration::ZERO,
            seed: None,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            settle: Duration::from_secs(600),
        }
    }
}

/// Where a replay stands.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Records read from the trace.
    pub records_read: u64,
    /// Whether the whole trace was read.
    pub read_all: bool,
    /// Each configuration.
    pub configs: Vec<ConfigProgress>,
    /// Wall-clock time since the replay began.
    pub elapsed: Duration,
}

/// Where one configuration stands.
#[derive(Debug, Clone, Default)]
pub struct ConfigProgress {
    /// Its name.
    pub name: String,
    /// Records applied.
    pub records: u64,
    /// Simulated time reached (microseconds since the first state).
    pub simulated_micros: u64,
    /// Whether it finished.
    pub done: bool,
}

#[derive(Default)]
struct Shared {
    records: AtomicU64,
    simulated: AtomicU64,
    done: AtomicBool,
}

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace could not be read.
    #[error("trace: {0}")]
    Trace(#[from] FormatError),
    /// A configuration could not be started or failed.
    #[error("configuration {name:?}: {message}")]
    Config {
        /// Its name.
        name: String,
        /// Why.
        message: String,
    },
    /// No configuration was given.
    #[error("no configuration to replay")]
    NoConfig,
    /// The caller gave up.
    #[error("replay cancelled")]
    Cancelled,
}

/// Plays `trace` through each candidate and reports. Blocks the calling
/// thread (which reads the trace) until every configuration has finished;
/// `progress` is called about five times a second. Stops early, with
/// [`ReplayError::Cancelled`], once `cancel` is set.
pub fn replay(
    mut trace: Reader,
    candidates: Vec<Candidate>,
    options: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
    cancel: &AtomicBool,
) -> Result<Report, ReplayError> {
    if candidates.is_empty() {
        return Err(ReplayError::NoConfig);
    }
    let began = std::time::Instant::now();
    let seed = options.seed.or(trace.header().seed).unwrap_or(1);
    let per_config = (options.cores / candidates.len()).max(1);
    let (placed_tx, placed_rx) = mpsc::channel::<(usize, Arc<str>, Option<Arc<str>>)>();
    let mut names: Vec<String> = candidates.iter().map(|c| c.name.clone()).collect();
    let recorded = trace.header().source != "generated";
    if recorded {
        names.push("recorded".into());
    }
    let recorded_col = names.len() - 1;
    let mut comparator = Comparator::new(names);
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    let mut shared = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let (tx, rx) = mpsc::sync_channel::<Arc<Vec<Record>>>(QUEUED_BATCHES);
        let state = Arc::new(Shared::default());
        let mut config = c.config.clone();
        config.parallelism = per_config;
        let job = Job {
            index: i,
            name: c.name.clone(),
            config,
            seed,
            bind_latency: options.bind_latency,
            settle: options.settle,
            placements: placed_tx.clone(),
            state: state.clone(),
        };
        let t = std::thread::Builder::new()
            .name(format!("berth-replay-{i}"))
            .spawn(move || job.run(rx))
            .map_err(|e| ReplayError::Config {
                name: c.name.clone(),
                message: format!("cannot start its thread: {e}"),
            })?;
        senders.push(tx);
        threads.push(Some(t));
        shared.push(state);
    }
    drop(placed_tx);
    let snapshot = |read: u64, read_all: bool| Progress {
        records_read: read,
        read_all,
        configs: candidates
            .iter()
            .zip(&shared)
            .map(|(c, s)| ConfigProgress {
                name: c.name.clone(),
                records: s.records.load(Ordering::Relaxed),
                simulated_micros: s.simulated.load(Ordering::Relaxed),
                done: s.done.load(Ordering::Relaxed),
            })
            .collect(),
        elapsed: began.elapsed(),
    };
    let mut last_progress = std::time::Instant::now();
    let mut read = 0u64;
    let mut recorded_scheduled = 0u64;
    // Pods the recorded scheduler tried and has not bound (for the
    // comparison's `recorded` column: never bound, if deleted so).
    let mut recorded_trying: HashSet<Arc<str>> = HashSet::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut failed: Option<ReplayError> = None;
    'read: loop {
        let next = trace.next_record();
        let rec = match next {
            Ok(Some(r)) => Some(r),
            Ok(None) => None,
            Err(e) => {
                failed = Some(e.into());
                None
            }
        };
        if let Some(r) = &rec {
            read += 1;
            if recorded {
                match &r.body {
                    Body::Scheduled(p) => {
                        recorded_scheduled += 1;
                        let uid: Arc<str> = Arc::from(p.uid.as_str());
                        recorded_trying.remove(&uid);
                        comparator.decided(recorded_col, uid, Some(Arc::from(p.node.as_str())));
                    }
                    Body::Unschedulable(u) => {
                        recorded_trying.insert(Arc::from(u.uid.as_str()));
                    }
                    Body::Delete(d) if d.kind == "Pod" => {
                        let uid: Arc<str> = Arc::from(d.uid.as_str());
                        if recorded_trying.remove(&uid) {
                            comparator.decided(recorded_col, uid, None);
                        }
                    }
                    _ => {}
                }
            }
        }
        let end = rec.is_none();
        if let Some(r) = rec {
            batch.push(r);
        }
        if batch.len() >= BATCH || (end && !batch.is_empty()) {
            let b = Arc::new(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
            for tx in &senders {
                // Blocks while the configuration is behind: the trace is
                // read no faster than the slowest configuration plays it.
                loop {
                    if cancel.load(Ordering::Relaxed) {
                        failed = Some(ReplayError::Cancelled);
                        break 'read;
                    }
                    match tx.try_send(b.clone()) {
                        Ok(()) => break,
                        Err(mpsc::TrySendError::Full(_)) => {
                            std::thread::sleep(Duration::from_millis(1));
                            if last_progress.elapsed() >= Duration::from_millis(200) {
                                progress(&snapshot(read, false));
                                last_progress = std::time::Instant::now();
                            }
                            while let Ok((col, uid, node)) = placed_rx.try_recv() {
                                comparator.decided(col, uid, node);
                            }
                        }
                        // The configuration stopped (its error is reported
                        // when it is joined).
                        Err(mpsc::TrySendError::Disconnected(_)) => break,
                    }
                }
            }
        }
        while let Ok((col, uid, node)) = placed_rx.try_recv() {
            comparator.decided(col, uid, node);
        }
        if last_progress.elapsed() >= Duration::from_millis(200) {
            progress(&snapshot(read, false));
            last_progress = std::time::Instant::now();
        }
        if end || failed.is_some() {
            break;
        }
    }
    drop(senders);
    let mut reports: Vec<Option<Result<ConfigReport, String>>> = vec![None; threads.len()];
    loop {
        for (i, t) in threads.iter_mut().enumerate() {
            if t.as_ref().is_some_and(|t| t.is_finished())
                && let Some(t) = t.take()
            {
                reports[i] = Some(
                    t.join()
                        .unwrap_or_else(|_| Err("its thread panicked".to_string())),
                );
            }
        }
        while let Ok((col, uid, node)) = placed_rx.try_recv() {
            comparator.decided(col, uid, node);
        }
        if threads.iter().all(Option::is_none) {
            break;
        }
        if cancel.load(Ordering::Relaxed) {
            for s in &shared {
                s.done.store(true, Ordering::Relaxed);
            }
        }
        if last_progress.elapsed() >= Duration::from_millis(200) {
            progress(&snapshot(read, true));
            last_progress = std::time::Instant::now();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    while let Ok((col, uid, node)) = placed_rx.try_recv() {
        comparator.decided(col, uid, node);
    }
    if recorded {
        for uid in recorded_trying {
            comparator.decided(recorded_col, uid, None);
        }
    }
    progress(&snapshot(read, true));
    if let Some(e) = failed {
        return Err(e);
    }
    let mut configs = Vec::new();
    for (c, r) in candidates.iter().zip(reports) {
        match r {
            Some(Ok(r)) => configs.push(r),
            _ if cancel.load(Ordering::Relaxed) => return Err(ReplayError::Cancelled),
            Some(Err(message)) => {
                return Err(ReplayError::Config {
                    name: c.name.clone(),
                    message,
                });
            }
            None => {
                return Err(ReplayError::Config {
                    name: c.name.clone(),
                    message: "it did not finish".into(),
                });
            }
        }
    }
    Ok(Report {
        configs,
        comparisons: comparator.finish(),
        recorded_scheduled: recorded.then_some(recorded_scheduled),
        records: read,
        segments: trace.segments(),
        seed,
    })
}

/// One configuration's replay.
struct Job {
    index: usize,
    name: String,
    config: SchedulerConfig,
    seed: u64,
    bind_latency: Duration,
    settle: Duration,
    placements: collect::Placements,
    state: Arc<Shared>,
}

impl Job {
    fn run(self, rx: mpsc::Receiver<Arc<Vec<Record>>>) -> Result<ConfigReport, String> {
        let state = self.state.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| format!("cannot start its runtime: {e}"))?;
        // The replayed scheduler logs nothing: its decisions are the
        // report's, and berthd's log is the live scheduler's.
        let quiet = tracing::subscriber::NoSubscriber::default();
        // Remote extenders' answers are waited for in real time.
        crate::sim_clock::simulated_here();
        let began = std::time::Instant::now();
        let out = tracing::subscriber::with_default(quiet, || rt.block_on(self.simulate(rx)));
        state.done.store(true, Ordering::Relaxed);
        out.map(|mut r| {
            r.wall_micros = began.elapsed().as_micros() as u64;
            r
        })
    }

    async fn simulate(self, rx: mpsc::Receiver<Arc<Vec<Record>>>) -> Result<ConfigReport, String> {
        let origin = Instant::now();
        let embedded = EmbeddedCluster::new();
        let profiles: HashSet<Arc<str>> = self
            .config
            .profiles
            .iter()
            .map(|p| Arc::from(p.scheduler_name.as_str()))
            .collect();
        let cluster = Arc::new(ReplayCluster::new(
            embedded.clone(),
            self.bind_latency,
            profiles.clone(),
        ));
        let collector = Arc::new(Collector::new(
            self.name.clone(),
            self.index,
            profiles.clone(),
            self.placements.clone(),
            origin,
        ));
        let registry = crate::plugins::in_tree_registry();
        let mut scheduler: Option<Scheduler> = None;
        let mut t0 = 0u64;
        let mut applier = Applier {
            cluster: embedded.clone(),
            replay: cluster.clone(),
            profiles: profiles.clone(),
            victims: HashSet::new(),
            refused: 0,
            first_refusal: None,
        };
        let start = |collector: Arc<Collector>| -> Result<Scheduler, String> {
            let observer: Arc<dyn crate::recording::Observer> = collector;
            Scheduler::start_observed(
                &self.config,
                &registry,
                cluster.clone(),
                Options {
                    seed: Some(self.seed),
                    ..Options::default()
                },
                Some(observer),
            )
            .map_err(|e| e.to_string())
        };
        let mut applied = 0u64;
        loop {
            let batch = match rx.try_recv() {
                Ok(b) => b,
                // Waiting for the reader blocks this runtime on purpose: no
                // simulated time may pass before the next record is known.
                Err(mpsc::TryRecvError::Empty) => match rx.recv() {
                    Ok(b) => b,
                    Err(_) => break,
                },
                Err(mpsc::TryRecvError::Disconnected) => break,
            };
            for rec in batch.iter() {
                if scheduler.is_some() {
                    let at = origin + Duration::from_micros(rec.t.saturating_sub(t0));
                    until(at).await;
                    if self.state.done.load(Ordering::Relaxed) {
                        return Err("cancelled".into());
                    }
                }
                applier.apply(rec, scheduler.is_some()).await;
                applied += 1;
                if matches!(rec.body, Body::Synced) && scheduler.is_none() {
                    t0 = rec.t;
                    let s = start(collector.clone())?;
                    s.wait_synced().await;
                    scheduler = Some(s);
                }
            }
            self.state.records.store(applied, Ordering::Relaxed);
            self.state.simulated.store(
                Instant::now().saturating_duration_since(origin).as_micros() as u64,
                Ordering::Relaxed,
            );
        }
        let scheduler = match scheduler {
            Some(s) => s,
            None => {
                let s = start(collector.clone())?;
                s.wait_synced().await;
                s
            }
        };
        // Let what was under way finish: bindings landing, pods in backoff
        // tried again, pods of nodes gone collected, within `settle`.
        let deadline = Instant::now() + self.settle;
        loop {
            tokio::task::yield_now().await;
            if (scheduler.is_idle() && !cluster.collecting()) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let now = Instant::now().saturating_duration_since(origin).as_micros() as u64;
        self.state.simulated.store(now, Ordering::Relaxed);
        self.state.records.store(applied, Ordering::Relaxed);
        let mut report = collector.state.lock().finish(now);
        report.records = applied;
        report.refused_records = applier.refused;
        report.deleted_with_node = cluster.deleted_with_node();
        report.first_refusal = applier.first_refusal;
        scheduler.stop();
        Ok(report)
    }
}

/// Moves the simulated clock to `at` exactly, letting everything due
/// before it run first. Tokio's timers tick in milliseconds, and records
/// come microseconds apart (a batch of pods applied at once): sleeping to
/// each would give several records one instant, and pods that arrived in
/// order the same queue timestamp. So the clock sleeps to within a
/// millisecond of the record (timers due before fire in order), then
/// advances the rest (a timer due in that last millisecond fires at `at`).
async fn until(at: Instant) {
    const TICK: Duration = Duration::from_millis(1);
    let now = Instant::now();
    if at <= now {
        return;
    }
    if at - now > TICK {
        tokio::time::sleep_until(at - TICK).await;
    }
    let now = Instant::now();
    if at > now {
        tokio::time::advance(at - now).await;
    }
}

/// Applies records to a configuration's copy, as the API server would
/// have (see the module's doc).
struct Applier {
    cluster: Arc<EmbeddedCluster>,
    /// The same, as the scheduler's client (whose garbage collector
    /// deletes the pods of nodes gone).
    replay: Arc<ReplayCluster>,
    profiles: HashSet<Arc<str>>,
    /// Pods the recorded scheduler evicted, whose deletion is its doing.
    victims: HashSet<String>,
    refused: u64,
    first_refusal: Option<String>,
}

impl Applier {
    fn refuse(&mut self, rec: &Record, e: impl std::fmt::Display) {
        self.refused += 1;
        if self.first_refusal.is_none() {
            self.first_refusal = Some(format!("at t={}µs: {e}", rec.t));
        }
    }

    fn ours(&self, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.contains(name)
    }

    async fn apply(&mut self, rec: &Record, _started: bool) {
        use crate::cluster::ClusterSource;
        use crate::framework::ClusterClient;
        let c = &self.cluster;
        let result: Result<(), String> = match &rec.body {
            Body::Add(Object::Node(n)) | Body::Update(Object::Node(n)) => c
                .apply_node((**n).clone())
                .map(drop)
                .map_err(|e| e.to_string()),
            Body::Add(Object::Pod(p)) => {
                let mut pod = (**p).clone();
                sanitize(&mut pod);
                c.apply_pod(pod).map(drop).map_err(|e| e.to_string())
            }
            Body::Update(Object::Pod(p)) => {
                let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                let name = p.metadata.name.as_deref().unwrap_or("");
                match c.get_pod(ns, name) {
                    Some(cur) if cur.metadata.uid == p.metadata.uid => {
                        let mut pod = (**p).clone();
                        sanitize(&mut pod);
                        // The binding, the nomination and the scheduler's
                        // conditions are this copy's, not the recording's:
                        // an update from elsewhere (a label, the kubelet)
                        // must not take back the copy's nomination.
                        let node = cur.spec.as_ref().and_then(|s| s.node_name.clone());
                        pod.spec.get_or_insert_with(Default::default).node_name = node;
                        keep_scheduler_status(&cur, &mut pod);
                        c.apply_pod(pod).map(drop).map_err(|e| e.to_string())
                    }
                    _ => Ok(()),
                }
            }
            Body::Add(Object::Other(o)) | Body::Update(Object::Other(o)) => c
                .apply_object(o.clone())
                .map(drop)
                .map_err(|e| e.to_string()),
            Body::Delete(d) => {
                match d.kind.as_str() {
                    "Pod" => {
                        if !self.victims.remove(&d.uid)
                            && !d.preempted
                            && let Some(cur) = c.get_pod(&d.namespace, &d.name)
                            && (d.uid.is_empty() || cur.metadata.uid.as_deref() == Some(&d.uid))
                        {
                            c.delete(Kind::Pod, &d.namespace, &d.name);
                        }
                    }
                    "Node" => self.replay.delete_node(&d.name),
                    other => {
                        if let Some(k) = kind_named(other) {
                            c.delete(Kind::Object(k), &d.namespace, &d.name);
                        }
                    }
                }
                Ok(())
            }
            Body::Bind(b) => match c.get_pod(&b.namespace, &b.name) {
                Some(cur)
                    if (b.uid.is_empty() || cur.metadata.uid.as_deref() == Some(&b.uid))
                        && cur
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_none()
                        && !self.ours(&cur) =>
                {
                    match PodInfo::new(cur) {
                        Ok(info) => c.bind(&info, &b.node).await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                _ => Ok(()),
            },
            Body::Preempted(p) => {
                self.victims.insert(p.uid.clone());
                Ok(())
            }
            Body::Synced | Body::Scheduled(_) | Body::Unschedulable(_) => Ok(()),
        };
        if let Err(e) = result {
            self.refuse(rec, e);
        }
    }
}

/// Carries what the copy's scheduler wrote on `cur` (its nomination,
/// PodScheduled and DisruptionTarget conditions) over to `pod`, the
/// recording's next version of it, sanitized.
fn keep_scheduler_status(
    cur: &k8s_openapi::api::core::v1::Pod,
    pod: &mut k8s_openapi::api::core::v1::Pod,
) {
    let Some(was) = cur.status.as_ref() else {
        return;
    };
    let ours = |c: &&k8s_openapi::api::core::v1::PodCondition| {
        c.type_ == "PodScheduled" || c.type_ == "DisruptionTarget"
    };
    let kept: Vec<_> = was
        .conditions
        .iter()
        .flatten()
        .filter(ours)
        .cloned()
        .collect();
    if was.nominated_node_name.is_none() && kept.is_empty() {
        return;
    }
    let s = pod.status.get_or_insert_with(Default::default);
    s.nominated_node_name = was.nominated_node_name.clone();
    if !kept.is_empty() {
        s.conditions.get_or_insert_with(Vec::new).extend(kept);
    }
}

/// What the recorded scheduler wrote on a pod, which the replayed one
/// writes for itself: its nomination and PodScheduled condition.
fn sanitize(pod: &mut k8s_openapi::api::core::v1::Pod) {
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    if let Some(s) = pod.status.as_mut() {
        s.nominated_node_name = None;
        if let Some(c) = s.conditions.as_mut() {
            c.retain(|c| c.type_ != "PodScheduled" && c.type_ != "DisruptionTarget");
        }
    }
}

#[cfg(test)]
mod tests;
