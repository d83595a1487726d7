//! The scheduler: the loop that pops pods and runs their scheduling cycles
//! (one at a time), the binding cycles it spawns (concurrently), and the
//! handlers that feed cluster changes into the cache and the queue.

mod algorithm;
#[cfg(test)]
mod batch_judge;
mod batching;
mod evaluations;
mod event_handlers;
mod explain;
mod explain_group;
#[cfg(test)]
mod group_tests;
mod idle;
#[cfg(test)]
mod look_ahead_tests;
pub mod metrics;
mod pod_group_cycle;
#[cfg(test)]
mod release_tests;
pub mod repeats;
mod schedule_one;
mod schedule_one_podgroup;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};

pub use crate::framework::FitError;
pub use algorithm::{
    Algorithm, FastRng, Feasible, NO_NODES_AVAILABLE, ScheduleError, ScheduleResult,
    num_feasible_nodes_to_find,
};
pub use explain::{
    DryRunReport, NodeReport, NodeUse, PluginNote, PluginOutcome, PreemptionReport, ScoreRow,
    SimulatedPod, Simulation, SimulationReport, UnknownProfile, Verdict,
};
pub use explain_group::{
    GroupDryRunReport, GroupMembers, GroupPodReport, GroupPreemptionReport, SimulatedGroup,
};
pub use metrics::{HistogramSnapshot, MetricsSnapshot, SchedulerMetrics};

use crate::cache::{Cache, Snapshot};
use crate::cluster::ClusterSource;
use crate::config::{ConfigError, SchedulerConfig};
use crate::extender::http::HttpExtenders;
use crate::extender::{Extenders, NodeFeed};
use crate::features::FeatureGates;
use crate::framework::{EventRecorder, Framework, Handle, Parallelizer, PodEvent, Registry};
use crate::model::PodInfo;
use crate::queue::{QueueConfig, QueueCounts, SchedulingQueue};

/// What happened to a pod in a scheduling attempt, in brief (the view
/// tests and the idle summary use; [`SchedulingEvent`] has the details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Bound to a node.
    Scheduled {
        /// `namespace/name`.
        pod: String,
        /// The node.
        node: String,
    },
    /// Not placed; requeued.
    Failed {
        /// `namespace/name`.
        pod: String,
        /// `Unschedulable` or `SchedulerError`.
        reason: String,
        /// The message, as in the FailedScheduling event.
        message: String,
    },
}

/// A pod as events name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    /// metadata.namespace.
    pub namespace: Arc<str>,
    /// metadata.name.
    pub name: Arc<str>,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// spec.priority.
    pub priority: i32,
}

impl From<&PodInfo> for PodIdentity {
    fn from(p: &PodInfo) -> Self {
        Self {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            priority: p.priority,
        }
    }
}

impl PodIdentity {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A pod was bound.
    Scheduled,
    /// A scheduling attempt failed.
    Failed,
    /// A pod was evicted by preemption.
    Preempted,
    /// A pod is reserved and waits at Permit.
    Waiting,
}

/// Something the scheduler did, as `WatchEvents` streams it.
#[derive(Debug, Clone)]
pub struct SchedulingEvent {
    /// What happened.
    pub kind: EventKind,
    /// To which pod.
    pub pod: PodIdentity,
    /// The node involved.
    pub node: Option<Arc<str>>,
    /// The explanation (failure message, Permit wait).
    pub message: String,
    /// For failures: `Unschedulable` or `SchedulerError`.
    pub reason: &'static str,
    /// For preemptions: the preemptor.
    pub preemptor: Option<PodIdentity>,
    /// When.
    pub time: SystemTime,
}

impl SchedulingEvent {
    fn new(kind: EventKind, pod: &PodInfo) -> Self {
        Self {
            kind,
            pod: pod.into(),
            node: None,
            message: String::new(),
            reason: "",
            preemptor: None,
            time: SystemTime::now(),
        }
    }

    /// The decision this event is, if it is one.
    pub fn decision(&self) -> Option<Decision> {
        match self.kind {
            EventKind::Scheduled => Some(Decision::Scheduled {
                pod: self.pod.key(),
                node: self.node.as_deref().unwrap_or("").to_string(),
            }),
            EventKind::Failed => Some(Decision::Failed {
                pod: self.pod.key(),
                reason: self.reason.to_string(),
                message: self.message.clone(),
            }),
            EventKind::Preempted | EventKind::Waiting => None,
        }
    }
}

/// The scheduler's decisions, as they are made.
#[derive(Debug)]
pub struct Decisions(broadcast::Receiver<SchedulingEvent>);

impl Decisions {
    /// The next decision (skipping other events); `None` once the scheduler
    /// is gone.
    pub async fn recv(&mut self) -> Option<Decision> {
        loop {
            match self.0.recv().await {
                Ok(e) => {
                    if let Some(d) = e.decision() {
                        return Some(d);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// Forwards events to the cluster and turns the preemption plugin's
/// `Preempted` events into scheduling events.
struct EventTee {
    inner: Arc<dyn EventRecorder>,
    events: broadcast::Sender<SchedulingEvent>,
    metrics: Arc<SchedulerMetrics>,
    observer: Option<Arc<dyn crate::recording::Observer>>,
}

impl EventRecorder for EventTee {
    fn record(&self, e: PodEvent) {
        if let Some(o) = &self.observer {
            o.event(&e);
        }
        if e.reason == "Preempted" {
            self.metrics.record_preempted();
            let mut ev = SchedulingEvent::new(EventKind::Preempted, &e.pod);
            ev.node = e.pod.node_name.clone();
            ev.message = e.note.clone();
            ev.preemptor = e.related.as_deref().map(PodIdentity::from);
            let _ = self.events.send(ev);
        }
        self.inner.record(e);
    }
}

/// Scheduler-wide settings not in the KubeSchedulerConfiguration.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long an assumed pod whose binding finished may stay unconfirmed
    /// (`Duration::ZERO`: forever, as upstream).
    pub assumed_pod_ttl: Duration,
    /// Seed for tie-breaking (None: from the clock).
    pub seed: Option<u64>,
    /// Leadership: the loop pops pods only while this is true, and stops
    /// popping the moment it turns false (None: always the leader, as in
    /// the embedded cluster mode).
    pub leader: Option<watch::Receiver<bool>>,
    /// Identical pods reuse each other's per-node Filter verdicts and raw
    /// scores on nodes that did not change (placements are those of the
    /// unbatched path; see `scheduler/batching.rs`). On by default; off
    /// too when the OpportunisticBatching gate is.
    pub batching: bool,
    /// Batch Filter calls of remote extenders that allow it are sent for
    /// the queue's next pod while the current cycle waits for its own
    /// (see [`Algorithm::with_look_ahead`]). On by default.
    pub look_ahead: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            assumed_pod_ttl: Duration::ZERO,
            seed: None,
            leader: None,
            batching: true,
            look_ahead: true,
        }
    }
}

/// What [`Scheduler::shutdown`] left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Whether the scheduling cycle running at the time finished in time.
    pub cycle_finished: bool,
    /// Pods waiting at Permit that were rejected (and so Unreserved).
    pub rejected_waiting: usize,
    /// Binding cycles still running when the bound ran out (0: all done).
    pub unfinished_bindings: usize,
}

/// The message pods waiting at Permit are rejected with on shutdown.
pub const SHUTDOWN_REJECT_MESSAGE: &str = "scheduler is shutting down";

/// State shared by the loop, the binding tasks and the event handlers.
pub(crate) struct Shared {
    pub profiles: HashMap<Arc<str>, Arc<Framework>>,
    /// The PodGroups, when the `GenericWorkload` gate is on (`None`: pods
    /// naming a group are scheduled alone, as upstream with the gate off).
    pub pod_groups: Option<Arc<crate::cache::PodGroupManager>>,
    /// PodGroupPreemptionPolicy: a group's pods must share its preemption
    /// policy (off: they must share one).
    pub pod_group_preemption_policy: bool,
    pub cache: Mutex<Cache>,
    pub queue: Arc<SchedulingQueue>,
    pub cluster: Arc<dyn ClusterSource>,
    pub handle: Handle,
    pub events: broadcast::Sender<SchedulingEvent>,
    /// Binding cycles not finished yet.
    pub bindings_in_flight: AtomicUsize,
    /// Notified whenever a binding cycle ends.
    pub binding_done: tokio::sync::Notify,
    /// Held by the loop while it runs a scheduling cycle.
    pub cycle: tokio::sync::Mutex<()>,
    /// Decisions made, for the idle summary.
    pub decided: AtomicU64,
    pub last_summary: AtomicU64,
    /// Wakes the idle summary's reporter.
    pub idle: tokio::sync::Notify,
    /// Failures that repeated themselves since their last summary.
    pub repeats: repeats::Repeats,
    /// Where the loop's next node search starts, for dry runs to match it.
    pub next_start_node_index: AtomicUsize,
    /// The global percentageOfNodesToScore.
    pub percentage_of_nodes_to_score: i32,
    /// The remote extenders.
    pub extenders: Arc<Extenders>,
    /// Upstream's HTTP extenders (`extenders:`).
    pub http_extenders: Arc<HttpExtenders>,
    /// Where node changes go for extenders, before the cache sees them.
    pub node_feed: Option<Arc<NodeFeed>>,
    /// Counters and latencies.
    pub metrics: Arc<SchedulerMetrics>,
    /// kube-scheduler's Prometheus metrics.
    pub prom: Arc<crate::metrics::Metrics>,
    /// The feature gates in force, for `kubernetes_feature_enabled`.
    pub feature_gates: FeatureGates,
    /// Sees every change the event handler takes (`--record`, replay).
    pub observer: Option<Arc<dyn crate::recording::Observer>>,
}

/// A running scheduler's public face.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
    synced: watch::Receiver<bool>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("profiles", &self.shared.profiles.keys().collect::<Vec<_>>())
            .field("queue", &self.shared.queue.counts())
            .finish()
    }
}

pub use crate::framework::build_profiles;

impl Scheduler {
    /// The remote extenders.
    pub fn extenders(&self) -> &Arc<Extenders> {
        &self.shared.extenders
    }

    /// Upstream's HTTP extenders.
    pub fn http_extenders(&self) -> &Arc<HttpExtenders> {
        &self.shared.http_extenders
    }

    /// Builds the scheduler over `cluster` and starts its tasks on the
    /// current tokio runtime: the event handler, the queue's timers, the
    /// scheduling loop (once the cluster's initial state is in the cache)
    /// and the assumed-pod cleanup.
    pub fn start(
        config: &SchedulerConfig,
        registry: &Registry,
        cluster: Arc<dyn ClusterSource>,
        options: Options,
    ) -> Result<Self, ConfigError> {
        Self::start_observed(config, registry, cluster, options, None)
    }

    /// [`Scheduler::start`], with `observer` shown every cluster change the
    /// event handler takes and every event the scheduler records, in the
    /// order they happen (`berthd --record`, and replay's reports).
    pub fn start_observed(
        config: &SchedulerConfig,
        registry: &Registry,
        cluster: Arc<dyn ClusterSource>,
        options: Options,
        observer: Option<Arc<dyn crate::recording::Observer>>,
    ) -> Result<Self, ConfigError> {
        let parallelizer = Parallelizer::new(config.parallelism).map_err(|e| {
            ConfigError::new("parallelism", format!("cannot start the CPU pool: {e}"))
        })?;
        let (events, _) = broadcast::channel(4096);
        let metrics = Arc::new(SchedulerMetrics::default());
        let recorder = Arc::new(EventTee {
            inner: cluster.clone(),
            events: events.clone(),
            metrics: metrics.clone(),
            observer: observer.clone(),
        });
        let features = config.feature_gates.features();
        let handle = Handle::with_features(cluster.clone(), recorder, parallelizer, features);
        let extenders = Arc::new(Extenders::start(config, &handle)?);
        let mut registry = registry.clone();
        extenders.register(&mut registry)?;
        let http_extenders = Arc::new(HttpExtenders::new(&config.http_extenders, &handle)?);
        http_extenders.register(&mut registry, &handle)?;
        // Plugins that break ties (preemption's candidate offset) take the
        // scheduler's seed when it has one.
        let profiles =
            crate::rng::with_seed(options.seed, || build_profiles(config, &registry, &handle))?;
        let prom = Arc::new(crate::metrics::Metrics::default());
        if features.enable_generic_workload {
            prom.register_pod_groups();
        }
        for fw in profiles.values() {
            fw.attach_metrics(&prom);
        }
        let queue = SchedulingQueue::new(
            QueueConfig {
                initial_backoff: config.pod_initial_backoff,
                max_backoff: config.pod_max_backoff,
                ..QueueConfig::default()
            },
            profiles.clone(),
        );
        let queue = match features.enable_generic_workload {
            true => queue.with_pod_groups(handle.pod_groups().clone()),
            false => queue,
        };
        handle.set_nominator(queue.clone());
        // GenericWorkload, read once: PodGroups are tracked, and their pods
        // scheduled as groups, only with the gate on.
        let pod_groups = features
            .enable_generic_workload
            .then(|| handle.pod_groups().clone());
        let mut cache = Cache::new(options.assumed_pod_ttl);
        if let Some(feed) = extenders.feed() {
            cache.set_placement_sink(feed);
        }
        if let Some(groups) = &pod_groups {
            cache = cache.with_pod_groups(groups.clone());
        }
        // An extender back from an outage: the pods that failed only
        // because of it are retried at once, not after their backoff.
        let q = queue.clone();
        extenders.on_back(Arc::new(move |name: &'static str| {
            let moved = q.activate_failed_by(name);
            if moved > 0 {
                tracing::info!(extender = name, pods = moved, "extender {name:?} is back: {moved} pods that failed because of it are retried now");
            }
        }));
        let shared = Arc::new(Shared {
            profiles,
            pod_groups,
            pod_group_preemption_policy: config
                .feature_gates
                .enabled(crate::features::Feature::PodGroupPreemptionPolicy),
            cache: Mutex::new(cache),
            queue: queue.clone(),
            cluster: cluster.clone(),
            handle,
            events,
            bindings_in_flight: AtomicUsize::new(0),
            binding_done: tokio::sync::Notify::new(),
            cycle: tokio::sync::Mutex::new(()),
            decided: AtomicU64::new(0),
            last_summary: AtomicU64::new(0),
            idle: tokio::sync::Notify::new(),
            repeats: repeats::Repeats::default(),
            next_start_node_index: AtomicUsize::new(0),
            percentage_of_nodes_to_score: config.percentage_of_nodes_to_score,
            node_feed: extenders.feed(),
            extenders,
            http_extenders,
            metrics,
            prom,
            feature_gates: config.feature_gates.clone(),
            observer,
        });
        let (synced_tx, synced) = watch::channel(false);
        tokio::spawn(event_handlers::run(
            shared.clone(),
            cluster.subscribe(),
            synced_tx,
        ));
        tokio::spawn(queue.clone().run());
        tokio::spawn(idle::report(shared.clone()));
        tokio::spawn(repeats::report(shared.clone()));
        if !options.assumed_pod_ttl.is_zero() {
            tokio::spawn(cleanup_assumed_pods(shared.clone()));
        }
        let rng = options
            .seed
            .map_or_else(FastRng::from_entropy, FastRng::new);
        let algorithm = Algorithm::new(config.percentage_of_nodes_to_score, rng)
            .with_batching(options.batching && features.enable_opportunistic_batching)
            .with_look_ahead(options.look_ahead.then(|| queue.clone()));
        let mut ready = synced.clone();
        let loop_shared = shared.clone();
        let leader = options.leader.clone();
        tokio::spawn(async move {
            // Like kube-scheduler's WaitForCacheSync: schedule only once the
            // cache holds the cluster as it was at start.
            if ready.wait_for(|s| *s).await.is_err() {
                return;
            }
            // And, with remote extenders, once each has said Hello and been
            // sent the nodes (or its startupTimeout passed): the first
            // cycles must not run without them.
            loop_shared.extenders.wait_started().await;
            schedule_one::Loop::new(loop_shared, algorithm)
                .run(leader)
                .await;
        });
        Ok(Self { shared, synced })
    }

    /// Whether the cluster's initial state is in the cache.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// The API server's Priority admission for a pod that reached berth
    /// without one (DryRun, Simulate), against the PriorityClasses the
    /// cluster holds.
    pub fn admit_priority(
        &self,
        pod: &mut k8s_openapi::api::core::v1::Pod,
    ) -> Result<(), crate::model::priority::PriorityRefused> {
        let classes = self.shared.handle.objects().priority_classes("");
        crate::model::priority::admit_priority(pod, classes.iter().map(|c| &**c))
    }

    /// The feature gates in force.
    pub fn feature_gates(&self) -> &FeatureGates {
        &self.shared.feature_gates
    }

    /// kube-scheduler's metrics, as `/metrics` shows them.
    pub fn prometheus(&self) -> &Arc<crate::metrics::Metrics> {
        &self.shared.prom
    }

    /// Waits until the cluster's initial state is in the cache.
    pub async fn wait_synced(&self) {
        let mut s = self.synced.clone();
        let _ = s.wait_for(|s| *s).await;
    }

    /// Scheduling decisions as they are made.
    pub fn decisions(&self) -> Decisions {
        Decisions(self.shared.events.subscribe())
    }

    /// Every scheduling event as it happens.
    pub fn events(&self) -> broadcast::Receiver<SchedulingEvent> {
        self.shared.events.subscribe()
    }

    /// The scheduling queue.
    pub fn queue(&self) -> &Arc<SchedulingQueue> {
        &self.shared.queue
    }

    /// The scheduler cache's (nodes, pods, assumed pods), as upstream's
    /// `scheduler_cache_size` counts them.
    pub fn cache_sizes(&self) -> (usize, usize, usize) {
        let c = self.shared.cache.lock();
        (c.node_count(), c.pod_count(), c.assumed_count())
    }

    /// The queue's counts.
    pub fn queue_counts(&self) -> QueueCounts {
        self.shared.queue.counts()
    }

    /// The framework handle (waiting pods, snapshot).
    pub fn handle(&self) -> &Handle {
        &self.shared.handle
    }

    /// The profiles by scheduler name.
    pub fn profiles(&self) -> &HashMap<Arc<str>, Arc<Framework>> {
        &self.shared.profiles
    }

    /// A fresh snapshot of the cache.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new();
        self.shared.cache.lock().update_snapshot(&mut s);
        s
    }

    /// Binding cycles still running.
    pub fn bindings_in_flight(&self) -> usize {
        self.shared.bindings_in_flight.load(Ordering::SeqCst)
    }

    /// Counters and attempt latencies.
    pub fn metrics(&self) -> &Arc<SchedulerMetrics> {
        &self.shared.metrics
    }

    /// Whether nothing is queued to be tried (in activeQ or backoffQ), being
    /// tried, or being bound. Pods may still wait among the unschedulable
    /// ones, and cluster changes not yet seen may queue more.
    pub fn is_idle(&self) -> bool {
        let c = self.shared.queue.counts();
        c.active + c.backoff + c.in_flight == 0
            && self.shared.bindings_in_flight.load(Ordering::SeqCst) == 0
    }

    /// Stops popping pods.
    pub fn stop(&self) {
        self.shared.queue.close();
    }

    /// Stops scheduling for good and drains, within `bound`: no more pods
    /// are popped, the scheduling cycle under way finishes, pods waiting at
    /// Permit are rejected (so their Unreserve runs; nothing new can come
    /// to allow them), and the binding cycles in flight are given until the
    /// bound to bind or Unreserve.
    pub async fn shutdown(&self, bound: Duration) -> Drained {
        let deadline = tokio::time::Instant::now() + bound;
        self.stop();
        let cycle_finished = tokio::time::timeout_at(deadline, self.shared.cycle.lock())
            .await
            .is_ok();
        let waiting = self.shared.handle.waiting_pods().list();
        for w in &waiting {
            tracing::info!(pod = %w.pod().key(), node = %w.node(), "rejecting pod waiting at Permit: {SHUTDOWN_REJECT_MESSAGE}");
            w.reject(None, SHUTDOWN_REJECT_MESSAGE);
        }
        loop {
            let done = self.shared.binding_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            let left = self.bindings_in_flight();
            if left == 0 {
                break;
            }
            tokio::select! {
                _ = done => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        Drained {
            cycle_finished,
            rejected_waiting: waiting.len(),
            unfinished_bindings: self.bindings_in_flight(),
        }
    }
}

/// Expires assumed pods whose binding finished but was never confirmed
/// within the TTL, checking every second as upstream does.
async fn cleanup_assumed_pods(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !shared.queue.is_closed() {
        tick.tick().await;
        let expired = shared
            .cache
            .lock()
            .cleanup_expired(tokio::time::Instant::now());
        for pod in expired {
            shared.queue.move_all_to_active_or_backoff(
                crate::framework::ClusterEvent::ASSIGNED_POD_DELETE,
                Some(crate::framework::EventObject::Pod(pod)),
                None,
                None,
            );
        }
    }
}
