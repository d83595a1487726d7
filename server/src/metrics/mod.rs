//! The metrics every layer records into: kube-scheduler's (pkg/scheduler/
//! metrics, with upstream's names, labels and buckets) and berth's own for
//! remote extenders, resolved to array slots when the scheduler starts, so
//! that recording is an array index and a few relaxed atomic adds.
//!
//! This module sits below everything that records (the framework, the
//! scheduler, the extenders) and imports nothing of the crate but the
//! Prometheus primitives of the leaf [`crate::prom`]: callers pass plain
//! slots and names (a framework status code is its `Code as usize`, whose
//! label is [`STATUS_LABELS`] at that index). `observe` renders it.

pub mod build;
pub mod os_process;
pub mod process;
pub mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::ExtensionPoint;
use crate::prom::{Counter, Exposition, Gauge, Histogram, exponential_buckets};

pub mod pod_groups;
pub use pod_groups::{GroupResult, PodGroupMetrics};

/// Upstream samples plugin execution times in this share of scheduling
/// cycles (pluginMetricsSamplePercent); berth samples every tenth cycle.
pub const PLUGIN_METRICS_SAMPLE_EVERY: u64 = 10;

/// The `status` label values, by slot: a framework `Code`'s slot is its
/// discriminant (`Code as usize`), in the order the framework declares them.
pub const STATUS_LABELS: [&str; 7] = [
    "Success",
    "Error",
    "Unschedulable",
    "UnschedulableAndUnresolvable",
    "Wait",
    "Skip",
    "Pending",
];

/// How a scheduling attempt ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// The pod was bound.
    Scheduled,
    /// No node fits (or a plugin rejected it).
    Unschedulable,
    /// An internal error.
    Error,
}

impl AttemptResult {
    const ALL: [AttemptResult; 3] = [Self::Scheduled, Self::Unschedulable, Self::Error];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Unschedulable => "unschedulable",
            Self::Error => "error",
        }
    }
}

fn attempt_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15)
}

/// One profile's attempt and extension point metrics.
#[derive(Debug)]
pub struct ProfileMetrics {
    name: Arc<str>,
    attempts: [Counter; 3],
    attempt_duration: [Histogram; 3],
    /// `ExtensionPoint::METERED.len() × STATUS_LABELS.len()`.
    points: Box<[Histogram]>,
}

impl ProfileMetrics {
    fn new(name: Arc<str>) -> Self {
        let b = attempt_buckets();
        let pb = exponential_buckets(0.0001, 2.0, 12);
        Self {
            name,
            attempts: Default::default(),
            attempt_duration: std::array::from_fn(|_| Histogram::seconds(&b)),
            points: (0..ExtensionPoint::METERED.len() * STATUS_LABELS.len())
                .map(|_| Histogram::seconds(&pb))
                .collect(),
        }
    }

    /// Records a finished attempt.
    #[inline]
    pub fn attempt(&self, result: AttemptResult, took: Duration) {
        self.attempts[result as usize].inc();
        self.attempt_duration[result as usize].observe_duration(took);
    }

    /// Attempts so far with this result.
    pub fn attempts(&self, result: AttemptResult) -> u64 {
        self.attempts[result as usize].get()
    }
}

/// One plugin's execution times at one extension point, by status.
#[derive(Debug)]
pub struct PluginMetrics {
    plugin: &'static str,
    point: ExtensionPoint,
    by_code: Box<[Histogram]>,
}

/// What a framework records into: its profile's metrics and its plugins'
/// slots, by point and position.
#[derive(Debug)]
pub struct FrameworkMetrics {
    /// The profile's metrics.
    pub profile: Arc<ProfileMetrics>,
    /// The scheduler-wide metrics.
    pub global: Arc<Metrics>,
    /// Per point (slot order), per plugin position.
    plugins: Vec<Vec<Arc<PluginMetrics>>>,
    /// scheduler_plugin_evaluation_total's series, per point of
    /// [`EVALUATED_POINTS`], per plugin position.
    evaluations: [Vec<Arc<Evaluations>>; EVALUATED_POINTS.len()],
}

/// The points whose plugin calls scheduler_plugin_evaluation_total counts,
/// as upstream instruments them.
pub const EVALUATED_POINTS: [ExtensionPoint; 4] = [
    ExtensionPoint::PreFilter,
    ExtensionPoint::Filter,
    ExtensionPoint::PreScore,
    ExtensionPoint::Score,
];

/// How many times one profile called one plugin at one point
/// (scheduler_plugin_evaluation_total).
#[derive(Debug)]
pub struct Evaluations {
    profile: Arc<str>,
    point: ExtensionPoint,
    plugin: &'static str,
    count: Counter,
}

impl FrameworkMetrics {
    /// Counts `n` calls of the plugin at position `index` of `point` (one
    /// of [`EVALUATED_POINTS`]; others are not counted).
    #[inline]
    pub fn evaluated(&self, point: ExtensionPoint, index: usize, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(e) = EVALUATED_POINTS
            .iter()
            .position(|&p| p == point)
            .and_then(|at| self.evaluations[at].get(index))
        {
            e.count.add(n);
        }
    }

    /// Records an extension point's run.
    #[inline]
    pub fn point(&self, p: ExtensionPoint, status: usize, took: Duration) {
        let Some(slot) = p.metered_slot() else { return };
        if let Some(h) = self.profile.points.get(slot * STATUS_LABELS.len() + status) {
            h.observe_duration(took);
        }
    }

    /// Records one plugin's run (in sampled cycles).
    #[inline]
    pub fn plugin(&self, p: ExtensionPoint, index: usize, status: usize, took: Duration) {
        if let Some(h) = p
            .metered_slot()
            .and_then(|slot| self.plugins.get(slot))
            .and_then(|list| list.get(index))
            .and_then(|m| m.by_code.get(status))
        {
            h.observe_duration(took);
        }
    }
}

/// The scheduler's Prometheus metrics.
#[derive(Debug)]
pub struct Metrics {
    profiles: parking_lot::RwLock<Vec<Arc<ProfileMetrics>>>,
    plugins: parking_lot::RwLock<Vec<Arc<PluginMetrics>>>,
    evaluations: parking_lot::RwLock<Vec<Arc<Evaluations>>>,
    cycles: AtomicU64,
    /// scheduler_scheduling_algorithm_duration_seconds.
    pub algorithm_duration: Histogram,
    /// scheduler_preemption_attempts_total.
    pub preemption_attempts: Counter,
    /// scheduler_preemption_victims.
    pub preemption_victims: Histogram,
    /// scheduler_pod_scheduling_attempts.
    pub pod_scheduling_attempts: Histogram,
    /// scheduler_pod_scheduling_sli_duration_seconds, by attempts
    /// (1..=SLI_ATTEMPT_LABELS; more are counted in the last).
    sli_duration: Box<[Histogram]>,
    /// The PodGroup families, registered with GenericWorkload on.
    pod_groups: std::sync::OnceLock<PodGroupMetrics>,
}

/// Distinct `attempts` label values kept for the SLI histogram; pods that
/// took more attempts are counted under the last.
pub const SLI_ATTEMPT_LABELS: usize = 16;

impl Default for Metrics {
    fn default() -> Self {
        let sli = exponential_buckets(0.01, 2.0, 20);
        Self {
            profiles: Default::default(),
            plugins: Default::default(),
            evaluations: Default::default(),
            cycles: AtomicU64::new(0),
            algorithm_duration: Histogram::seconds(&attempt_buckets()),
            preemption_attempts: Counter::default(),
            preemption_victims: Histogram::new(&exponential_buckets(1.0, 2.0, 7), 1.0),
            pod_scheduling_attempts: Histogram::new(&exponential_buckets(1.0, 2.0, 5), 1.0),
            sli_duration: (0..SLI_ATTEMPT_LABELS)
                .map(|_| Histogram::seconds(&sli))
                .collect(),
            pod_groups: std::sync::OnceLock::new(),
        }
    }
}

impl Metrics {
    /// Resolves a framework's label sets: its profile's slot and a slot per
    /// (plugin, point), shared between profiles as upstream's series are.
    /// `plugins` names, per point, the plugins a profile runs there, in
    /// order (their positions are the `index` of [`FrameworkMetrics::plugin`]).
    pub fn attach(
        self: &Arc<Self>,
        profile_name: &Arc<str>,
        plugins: &dyn Fn(ExtensionPoint) -> Vec<&'static str>,
    ) -> FrameworkMetrics {
        let profile = {
            let mut profiles = self.profiles.write();
            match profiles.iter().find(|p| p.name == *profile_name) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(ProfileMetrics::new(profile_name.clone()));
                    profiles.push(p.clone());
                    p
                }
            }
        };
        let mut registered = self.evaluations.write();
        let evaluations = EVALUATED_POINTS.map(|point| {
            plugins(point)
                .into_iter()
                .map(|plugin| {
                    let found = registered.iter().find(|e| {
                        e.plugin == plugin && e.point == point && e.profile == *profile_name
                    });
                    match found {
                        Some(e) => e.clone(),
                        None => {
                            let e = Arc::new(Evaluations {
                                profile: profile_name.clone(),
                                point,
                                plugin,
                                count: Counter::default(),
                            });
                            registered.push(e.clone());
                            e
                        }
                    }
                })
                .collect()
        });
        drop(registered);
        let pb = exponential_buckets(0.00001, 1.5, 20);
        let mut all = self.plugins.write();
        let plugins = ExtensionPoint::METERED
            .iter()
            .map(|&point| {
                plugins(point)
                    .into_iter()
                    .map(|plugin| {
                        match all.iter().find(|m| m.plugin == plugin && m.point == point) {
                            Some(m) => m.clone(),
                            None => {
                                let m = Arc::new(PluginMetrics {
                                    plugin,
                                    point,
                                    by_code: (0..STATUS_LABELS.len())
                                        .map(|_| Histogram::seconds(&pb))
                                        .collect(),
                                });
                                all.push(m.clone());
                                m
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        FrameworkMetrics {
            profile,
            global: self.clone(),
            plugins,
            evaluations,
        }
    }

    /// Registers the PodGroup families (GenericWorkload on; once).
    pub fn register_pod_groups(&self) {
        let _ = self.pod_groups.set(PodGroupMetrics::default());
    }

    /// The PodGroup families, when registered.
    pub fn pod_groups(&self) -> Option<&PodGroupMetrics> {
        self.pod_groups.get()
    }

    /// Whether this scheduling cycle records plugin execution times.
    #[inline]
    pub fn sample_cycle(&self) -> bool {
        self.cycles
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PLUGIN_METRICS_SAMPLE_EVERY)
    }

    /// Records a pod bound after `attempts` attempts, `since_first` after
    /// its first attempt began.
    pub fn pod_scheduled(&self, attempts: u32, since_first: Duration) {
        let a = (attempts.max(1) as usize).min(SLI_ATTEMPT_LABELS);
        self.sli_duration[a - 1].observe_duration(since_first);
        self.pod_scheduling_attempts.observe(u64::from(attempts));
    }

    /// scheduler_plugin_evaluation_total for one series, if registered.
    pub fn evaluations(&self, profile: &str, point: ExtensionPoint, plugin: &str) -> Option<u64> {
        self.evaluations
            .read()
            .iter()
            .find(|e| &*e.profile == profile && e.point == point && e.plugin == plugin)
            .map(|e| e.count.get())
    }

    /// The profiles' metrics.
    pub fn profile(&self, name: &str) -> Option<Arc<ProfileMetrics>> {
        self.profiles
            .read()
            .iter()
            .find(|p| &*p.name == name)
            .cloned()
    }

    /// Writes every family. Vector families show only the label sets that
    /// were recorded, except attempts_total, which shows each result.
    pub fn render(&self, e: &mut Exposition) {
        if let Some(g) = self.pod_groups.get() {
            g.render(e);
        }
        let profiles = self.profiles.read().clone();
        e.family(
            "scheduler_schedule_attempts_total",
            "counter",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
        );
        for p in &profiles {
            for r in AttemptResult::ALL {
                e.sample(
                    "scheduler_schedule_attempts_total",
                    &[("profile", &p.name), ("result", r.label())],
                    p.attempts[r as usize].get(),
                );
            }
        }
        e.family(
            "scheduler_scheduling_attempt_duration_seconds",
            "histogram",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
        );
        for p in &profiles {
            for r in AttemptResult::ALL {
                let h = &p.attempt_duration[r as usize];
                if h.count() > 0 {
                    e.histogram(
                        "scheduler_scheduling_attempt_duration_seconds",
                        &[("profile", &p.name), ("result", r.label())],
                        h,
                    );
                }
            }
        }
        e.family(
            "scheduler_scheduling_algorithm_duration_seconds",
            "histogram",
            "Scheduling algorithm latency in seconds",
        );
        e.histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            &[],
            &self.algorithm_duration,
        );
        e.family(
            "scheduler_framework_extension_point_duration_seconds",
            "histogram",
            "Latency for running all plugins of a specific extension point.",
        );
        for p in &profiles {
            for (pi, point) in ExtensionPoint::METERED.iter().enumerate() {
                for (ci, code) in STATUS_LABELS.iter().enumerate() {
                    let h = &p.points[pi * STATUS_LABELS.len() + ci];
                    if h.count() > 0 {
                        e.histogram(
                            "scheduler_framework_extension_point_duration_seconds",
                            &[
                                ("extension_point", point.metric_label()),
                                ("profile", &p.name),
                                ("status", code),
                            ],
                            h,
                        );
                    }
                }
            }
        }
        e.family(
            "scheduler_plugin_execution_duration_seconds",
            "histogram",
            "Duration for running a plugin at a specific extension point.",
        );
        for m in self.plugins.read().iter() {
            for (ci, code) in STATUS_LABELS.iter().enumerate() {
                let h = &m.by_code[ci];
                if h.count() > 0 {
                    e.histogram(
                        "scheduler_plugin_execution_duration_seconds",
                        &[
                            ("extension_point", m.point.metric_label()),
                            ("plugin", m.plugin),
                            ("status", code),
                        ],
                        h,
                    );
                }
            }
        }
        e.family(
            "scheduler_plugin_evaluation_total",
            "counter",
            "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
        );
        for m in self.evaluations.read().iter() {
            e.sample(
                "scheduler_plugin_evaluation_total",
                &[
                    ("extension_point", m.point.metric_label()),
                    ("plugin", m.plugin),
                    ("profile", &m.profile),
                ],
                m.count.get(),
            );
        }
        e.family(
            "scheduler_preemption_attempts_total",
            "counter",
            "Total preemption attempts in the cluster till now",
        );
        e.sample(
            "scheduler_preemption_attempts_total",
            &[],
            self.preemption_attempts.get(),
        );
        e.family(
            "scheduler_preemption_victims",
            "histogram",
            "Number of selected preemption victims",
        );
        e.histogram(
            "scheduler_preemption_victims",
            &[],
            &self.preemption_victims,
        );
        e.family(
            "scheduler_pod_scheduling_attempts",
            "histogram",
            "Number of attempts to successfully schedule a pod.",
        );
        e.histogram(
            "scheduler_pod_scheduling_attempts",
            &[],
            &self.pod_scheduling_attempts,
        );
        e.family(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "histogram",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
        );
        for (i, h) in self.sli_duration.iter().enumerate() {
            if h.count() > 0 {
                let a = (i + 1).to_string();
                e.histogram(
                    "scheduler_pod_scheduling_sli_duration_seconds",
                    &[("attempts", &a)],
                    h,
                );
            }
        }
    }
}

/// The `point` label values of remote extender calls.
pub const EXTENDER_POINTS: [&str; 16] = [
    "PreFilter",
    "Filter",
    "PostFilter",
    "PreScore",
    "Score",
    "NormalizeScore",
    "Reserve",
    "Unreserve",
    "Permit",
    "PreBind",
    "Bind",
    "PostBind",
    "PlacementFeasible",
    "PodGroupPostFilter",
    "GroupPermit",
    "PreemptionFilter",
];

/// The `result` label values of remote extender calls: answered; failed
/// on the extender's side or answered out of protocol; no answer in time;
/// shed at the concurrency limit; no stream; refused at once by the open
/// circuit breaker.
pub const EXTENDER_RESULTS: [&str; 6] = [
    "success",
    "error",
    "timeout",
    "overloaded",
    "unavailable",
    "circuit_open",
];

/// The `kind` label values of `berth_extender_protocol_errors_total`: the
/// messages from an extender that berthd cannot use (each also a WARN
/// naming the extender).
pub const PROTOCOL_ERROR_KINDS: [&str; 8] = [
    // A Response whose id berthd never sent on this stream.
    "unknown_request_id",
    // A second Response for a request already answered.
    "duplicate_response",
    // A Response after berthd stopped waiting (timeout).
    "late_response",
    // A PermitDecision for a reservation not waiting on this extender.
    "unknown_reservation",
    // A PermitDecision for a reservation already decided.
    "repeated_decision",
    // A PermitDecision sent before a Permit answer that was not Wait.
    "unused_decision",
    // A second Hello, or a message without content.
    "unexpected_message",
    // An answer of the wrong kind or shape for its request.
    "malformed_response",
];

/// The states of an extender's circuit breaker, as
/// `berth_extender_circuit_state` shows them (the gauge's value is the
/// index).
pub const CIRCUIT_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// A remote extender's calls by point and result, and their latency by
/// point.
#[derive(Debug)]
pub struct ExtenderCalls {
    /// `EXTENDER_POINTS.len() × EXTENDER_RESULTS.len()`.
    counts: Box<[Counter]>,
    durations: Box<[Histogram]>,
}

impl Default for ExtenderCalls {
    fn default() -> Self {
        let b = exponential_buckets(0.0001, 2.0, 16);
        Self {
            counts: (0..EXTENDER_POINTS.len() * EXTENDER_RESULTS.len())
                .map(|_| Counter::default())
                .collect(),
            durations: (0..EXTENDER_POINTS.len())
                .map(|_| Histogram::seconds(&b))
                .collect(),
        }
    }
}

impl ExtenderCalls {
    /// Records one call (`point` and `result` index the label arrays).
    #[inline]
    pub fn record(&self, point: usize, result: usize, took: Duration) {
        if let Some(c) = self.counts.get(point * EXTENDER_RESULTS.len() + result) {
            c.inc();
        }
        if let Some(h) = self.durations.get(point) {
            h.observe_duration(took);
        }
    }

    /// Calls so far at `point` with `result`.
    pub fn count(&self, point: usize, result: usize) -> u64 {
        self.counts
            .get(point * EXTENDER_RESULTS.len() + result)
            .map_or(0, Counter::get)
    }
}

/// What berthd records about one remote extender.
#[derive(Debug)]
pub struct ExtenderMetrics {
    /// Calls by point and result, and their latency.
    pub calls: ExtenderCalls,
    /// Unusable messages, by [`PROTOCOL_ERROR_KINDS`] slot.
    protocol_errors: Box<[Counter]>,
    /// Failed calls of an ignorable extender that were skipped.
    pub skipped: Counter,
    /// Streams opened (handshakes completed).
    pub sessions: Counter,
    /// 1 while a stream is open.
    pub connected: Gauge,
    /// Unreserves waiting for the extender's acknowledgement.
    pub pending_unreserves: Gauge,
    /// The circuit breaker's state, a [`CIRCUIT_STATES`] slot.
    pub circuit_state: Gauge,
    /// Times the circuit breaker opened.
    pub circuit_opened: Counter,
}

impl Default for ExtenderMetrics {
    fn default() -> Self {
        Self {
            calls: ExtenderCalls::default(),
            protocol_errors: (0..PROTOCOL_ERROR_KINDS.len())
                .map(|_| Counter::default())
                .collect(),
            skipped: Counter::default(),
            sessions: Counter::default(),
            connected: Gauge::default(),
            pending_unreserves: Gauge::default(),
            circuit_state: Gauge::default(),
            circuit_opened: Counter::default(),
        }
    }
}

impl ExtenderMetrics {
    /// Counts an unusable message of `kind` (a [`PROTOCOL_ERROR_KINDS`]
    /// slot).
    #[inline]
    pub fn protocol_error(&self, kind: usize) {
        if let Some(c) = self.protocol_errors.get(kind) {
            c.inc();
        }
    }

    /// Unusable messages so far of `kind`.
    pub fn protocol_errors(&self, kind: usize) -> u64 {
        self.protocol_errors.get(kind).map_or(0, Counter::get)
    }
}

/// Writes berth's own metrics of remote extenders, given by name.
pub fn render_extenders(extenders: &[(&str, &ExtenderMetrics)], e: &mut Exposition) {
    e.family(
        "berth_extender_calls_total",
        "counter",
        "Calls to remote extenders, by extender, extension point and result.",
    );
    for (name, m) in extenders {
        for (pi, point) in EXTENDER_POINTS.iter().enumerate() {
            for (ri, result) in EXTENDER_RESULTS.iter().enumerate() {
                let n = m.calls.count(pi, ri);
                if n > 0 {
                    e.sample(
                        "berth_extender_calls_total",
                        &[("extender", name), ("point", point), ("result", result)],
                        n,
                    );
                }
            }
        }
    }
    e.family(
        "berth_extender_call_duration_seconds",
        "histogram",
        "Latency of calls to remote extenders, by extender and extension point.",
    );
    for (name, m) in extenders {
        for (pi, point) in EXTENDER_POINTS.iter().enumerate() {
            let h = &m.calls.durations[pi];
            if h.count() > 0 {
                e.histogram(
                    "berth_extender_call_duration_seconds",
                    &[("extender", name), ("point", point)],
                    h,
                );
            }
        }
    }
    e.family(
        "berth_extender_protocol_errors_total",
        "counter",
        "Messages from remote extenders that berthd could not use, by extender and kind.",
    );
    for (name, m) in extenders {
        for (ki, kind) in PROTOCOL_ERROR_KINDS.iter().enumerate() {
            let n = m.protocol_errors(ki);
            if n > 0 {
                e.sample(
                    "berth_extender_protocol_errors_total",
                    &[("extender", name), ("kind", kind)],
                    n,
                );
            }
        }
    }
    let per_extender = |e: &mut Exposition,
                        family: &str,
                        kind: &str,
                        help: &str,
                        f: &dyn Fn(&ExtenderMetrics) -> u64| {
        e.family(family, kind, help);
        for (name, m) in extenders {
            e.sample(family, &[("extender", name)], f(m));
        }
    };
    per_extender(
        e,
        "berth_extender_skips_total",
        "counter",
        "Failed calls to ignorable remote extenders that were skipped.",
        &|m| m.skipped.get(),
    );
    per_extender(
        e,
        "berth_extender_stream_reconnects_total",
        "counter",
        "Streams to remote extenders opened after the first.",
        &|m| m.sessions.get().saturating_sub(1),
    );
    per_extender(
        e,
        "berth_extender_pending_unreserves",
        "gauge",
        "Unreserves waiting for the remote extender's acknowledgement.",
        &|m| m.pending_unreserves.get(),
    );
    per_extender(
        e,
        "berth_extender_connected",
        "gauge",
        "Whether the stream to the remote extender is open (1) or not (0).",
        &|m| m.connected.get(),
    );
    per_extender(
        e,
        "berth_extender_circuit_opened_total",
        "counter",
        "Times the remote extender's circuit breaker opened.",
        &|m| m.circuit_opened.get(),
    );
    e.family(
        "berth_extender_circuit_state",
        "gauge",
        "The remote extender's circuit breaker: 1 for its current state, 0 for the others.",
    );
    for (name, m) in extenders {
        let now = m.circuit_state.get() as usize;
        for (si, state) in CIRCUIT_STATES.iter().enumerate() {
            e.sample(
                "berth_extender_circuit_state",
                &[("extender", name), ("state", state)],
                u64::from(si == now),
            );
        }
    }
}
