//! kube-scheduler's metrics (pkg/scheduler/metrics), with upstream's names,
//! labels and buckets, resolved to array slots when the scheduler starts:
//! recording is an array index and a few relaxed atomic adds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::prom::{Counter, Exposition, Histogram, exponential_buckets};
use crate::framework::{Code, ExtensionPoint, Framework};

/// Upstream samples plugin execution times in this share of scheduling
/// cycles (pluginMetricsSamplePercent); berth samples every tenth cycle.
pub const PLUGIN_METRICS_SAMPLE_EVERY: u64 = 10;

/// The `extension_point` label values, as upstream spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Point {
    PreFilter,
    Filter,
    PreFilterExtensionAddPod,
    PreFilterExtensionRemovePod,
    PostFilter,
    PreScore,
    Score,
    ScoreExtensionNormalize,
    PreBind,
    Bind,
    PostBind,
    Reserve,
    Unreserve,
    Permit,
}

impl Point {
    /// Every point, in slot order.
    pub const ALL: [Point; 14] = [
        Self::PreFilter,
        Self::Filter,
        Self::PreFilterExtensionAddPod,
        Self::PreFilterExtensionRemovePod,
        Self::PostFilter,
        Self::PreScore,
        Self::Score,
        Self::ScoreExtensionNormalize,
        Self::PreBind,
        Self::Bind,
        Self::PostBind,
        Self::Reserve,
        Self::Unreserve,
        Self::Permit,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::PreFilter => "PreFilter",
            Self::Filter => "Filter",
            Self::PreFilterExtensionAddPod => "PreFilterExtensionAddPod",
            Self::PreFilterExtensionRemovePod => "PreFilterExtensionRemovePod",
            Self::PostFilter => "PostFilter",
            Self::PreScore => "PreScore",
            Self::Score => "Score",
            Self::ScoreExtensionNormalize => "ScoreExtensionNormalize",
            Self::PreBind => "PreBind",
            Self::Bind => "Bind",
            Self::PostBind => "PostBind",
            Self::Reserve => "Reserve",
            Self::Unreserve => "Unreserve",
            Self::Permit => "Permit",
        }
    }

    /// The profile's extension point whose plugin list this point runs.
    fn plugins_of(self) -> ExtensionPoint {
        match self {
            Self::PreFilter
            | Self::PreFilterExtensionAddPod
            | Self::PreFilterExtensionRemovePod => ExtensionPoint::PreFilter,
            Self::Filter => ExtensionPoint::Filter,
            Self::PostFilter => ExtensionPoint::PostFilter,
            Self::PreScore => ExtensionPoint::PreScore,
            Self::Score | Self::ScoreExtensionNormalize => ExtensionPoint::Score,
            Self::PreBind => ExtensionPoint::PreBind,
            Self::Bind => ExtensionPoint::Bind,
            Self::PostBind => ExtensionPoint::PostBind,
            Self::Reserve | Self::Unreserve => ExtensionPoint::Reserve,
            Self::Permit => ExtensionPoint::Permit,
        }
    }
}

const CODES: [Code; 7] = [
    Code::Success,
    Code::Error,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Wait,
    Code::Skip,
    Code::Pending,
];

fn code_slot(c: Code) -> usize {
    match c {
        Code::Success => 0,
        Code::Error => 1,
        Code::Unschedulable => 2,
        Code::UnschedulableAndUnresolvable => 3,
        Code::Wait => 4,
        Code::Skip => 5,
        Code::Pending => 6,
    }
}

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
    /// `Point::ALL.len() × CODES.len()`.
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
            points: (0..Point::ALL.len() * CODES.len())
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
    point: Point,
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
}

impl FrameworkMetrics {
    /// Records an extension point's run.
    #[inline]
    pub fn point(&self, p: Point, code: Code, took: Duration) {
        self.profile.points[p as usize * CODES.len() + code_slot(code)].observe_duration(took);
    }

    /// Records one plugin's run (in sampled cycles).
    #[inline]
    pub fn plugin(&self, p: Point, index: usize, code: Code, took: Duration) {
        if let Some(m) = self.plugins[p as usize].get(index) {
            m.by_code[code_slot(code)].observe_duration(took);
        }
    }
}

/// The scheduler's Prometheus metrics.
#[derive(Debug)]
pub struct Metrics {
    profiles: parking_lot::RwLock<Vec<Arc<ProfileMetrics>>>,
    plugins: parking_lot::RwLock<Vec<Arc<PluginMetrics>>>,
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
            cycles: AtomicU64::new(0),
            algorithm_duration: Histogram::seconds(&attempt_buckets()),
            preemption_attempts: Counter::default(),
            preemption_victims: Histogram::new(&exponential_buckets(1.0, 2.0, 7), 1.0),
            pod_scheduling_attempts: Histogram::new(&exponential_buckets(1.0, 2.0, 5), 1.0),
            sli_duration: (0..SLI_ATTEMPT_LABELS)
                .map(|_| Histogram::seconds(&sli))
                .collect(),
        }
    }
}

impl Metrics {
    /// Resolves a framework's label sets: its profile's slot and a slot per
    /// (plugin, point), shared between profiles as upstream's series are.
    pub fn attach(self: &Arc<Self>, fw: &Framework) -> FrameworkMetrics {
        let profile = {
            let mut profiles = self.profiles.write();
            match profiles.iter().find(|p| p.name == *fw.profile_name()) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(ProfileMetrics::new(fw.profile_name().clone()));
                    profiles.push(p.clone());
                    p
                }
            }
        };
        let pb = exponential_buckets(0.00001, 1.5, 20);
        let mut all = self.plugins.write();
        let plugins = Point::ALL
            .iter()
            .map(|&point| {
                fw.plugin_names(point.plugins_of())
                    .iter()
                    .map(|&plugin| {
                        match all.iter().find(|m| m.plugin == plugin && m.point == point) {
                            Some(m) => m.clone(),
                            None => {
                                let m = Arc::new(PluginMetrics {
                                    plugin,
                                    point,
                                    by_code: (0..CODES.len())
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
        }
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
            for (pi, point) in Point::ALL.iter().enumerate() {
                for (ci, code) in CODES.iter().enumerate() {
                    let h = &p.points[pi * CODES.len() + ci];
                    if h.count() > 0 {
                        e.histogram(
                            "scheduler_framework_extension_point_duration_seconds",
                            &[
                                ("extension_point", point.label()),
                                ("profile", &p.name),
                                ("status", code.as_str()),
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
            for (ci, code) in CODES.iter().enumerate() {
                let h = &m.by_code[ci];
                if h.count() > 0 {
                    e.histogram(
                        "scheduler_plugin_execution_duration_seconds",
                        &[
                            ("extension_point", m.point.label()),
                            ("plugin", m.plugin),
                            ("status", code.as_str()),
                        ],
                        h,
                    );
                }
            }
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
pub const EXTENDER_POINTS: [&str; 12] = [
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
];

/// The `result` label values of remote extender calls.
pub const EXTENDER_RESULTS: [&str; 5] =
    ["success", "error", "timeout", "overloaded", "unavailable"];

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

/// Writes berth's own metrics of remote extenders.
pub fn render_extenders(conns: &[Arc<crate::extender::Connection>], e: &mut Exposition) {
    e.family(
        "berth_extender_calls_total",
        "counter",
        "Calls to remote extenders, by extender, extension point and result.",
    );
    for c in conns {
        let calls = &c.stats().by_point;
        for (pi, point) in EXTENDER_POINTS.iter().enumerate() {
            for (ri, result) in EXTENDER_RESULTS.iter().enumerate() {
                let n = calls.count(pi, ri);
                if n > 0 {
                    e.sample(
                        "berth_extender_calls_total",
                        &[("extender", c.name()), ("point", point), ("result", result)],
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
    for c in conns {
        let calls = &c.stats().by_point;
        for (pi, point) in EXTENDER_POINTS.iter().enumerate() {
            let h = &calls.durations[pi];
            if h.count() > 0 {
                e.histogram(
                    "berth_extender_call_duration_seconds",
                    &[("extender", c.name()), ("point", point)],
                    h,
                );
            }
        }
    }
    let per_extender = |e: &mut Exposition,
                        name: &str,
                        kind: &str,
                        help: &str,
                        f: &dyn Fn(&crate::extender::Connection) -> u64| {
        e.family(name, kind, help);
        for c in conns {
            e.sample(name, &[("extender", c.name())], f(c));
        }
    };
    per_extender(
        e,
        "berth_extender_skips_total",
        "counter",
        "Failed calls to ignorable remote extenders that were skipped.",
        &|c| c.stats().skipped.load(Ordering::Relaxed),
    );
    per_extender(
        e,
        "berth_extender_stream_reconnects_total",
        "counter",
        "Streams to remote extenders opened after the first.",
        &|c| c.stats().sessions.load(Ordering::Relaxed).saturating_sub(1),
    );
    per_extender(
        e,
        "berth_extender_pending_unreserves",
        "gauge",
        "Unreserves waiting for the remote extender's acknowledgement.",
        &|c| c.pending_unreserves() as u64,
    );
    per_extender(
        e,
        "berth_extender_connected",
        "gauge",
        "Whether the stream to the remote extender is open (1) or not (0).",
        &|c| u64::from(c.is_connected()),
    );
}
