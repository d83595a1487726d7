//! The PodGroup families (kube-scheduler v1.37's `metrics.go`), registered
//! only with the `GenericWorkload` gate on, under upstream's names, labels,
//! buckets and help: the group cycle's attempts and durations, and
//! workload-aware preemption's attempts and victims.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::prom::{Counter, Exposition, Histogram, exponential_buckets};

/// How a group cycle ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupResult {
    /// The group's pods went to their binding cycles.
    Scheduled,
    /// The group did not fit; preemption made room, it waits for it.
    WaitingOnPreemption,
    /// The group did not fit.
    Unschedulable,
    /// An internal error.
    Error,
}

impl GroupResult {
    const ALL: [GroupResult; 4] = [
        Self::Scheduled,
        Self::WaitingOnPreemption,
        Self::Unschedulable,
        Self::Error,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::WaitingOnPreemption => "waiting_on_preemption",
            Self::Unschedulable => "unschedulable",
            Self::Error => "error",
        }
    }
}

/// The status codes workload preemption's `result` label takes.
pub const PREEMPTION_RESULTS: [&str; 4] = [
    "Success",
    "Unschedulable",
    "UnschedulableAndUnresolvable",
    "Error",
];

#[derive(Debug)]
struct ProfileGroups {
    profile: Arc<str>,
    attempts: [Counter; 4],
    durations: [Histogram; 4],
}

/// The families.
#[derive(Debug)]
pub struct PodGroupMetrics {
    profiles: RwLock<Vec<Arc<ProfileGroups>>>,
    /// scheduler_podgroup_scheduling_algorithm_duration_seconds.
    pub algorithm_duration: Histogram,
    /// scheduler_workload_preemption_attempts_total, by [`PREEMPTION_RESULTS`].
    pub preemption_attempts: [Counter; 4],
    /// scheduler_workload_preemption_victims.
    pub preemption_victims: Histogram,
    /// scheduler_preemption_workload_disruptions{preemptor="podgroup"}.
    pub workload_disruptions: Histogram,
}

impl Default for PodGroupMetrics {
    fn default() -> Self {
        let b = exponential_buckets(0.001, 2.0, 15);
        Self {
            profiles: RwLock::default(),
            algorithm_duration: Histogram::seconds(&b),
            preemption_attempts: Default::default(),
            preemption_victims: Histogram::new(&exponential_buckets(1.0, 2.0, 11), 1.0),
            workload_disruptions: Histogram::new(&exponential_buckets(1.0, 2.0, 11), 1.0),
        }
    }
}

impl PodGroupMetrics {
    /// Records a finished group cycle of `profile`.
    pub fn attempt(&self, profile: &Arc<str>, result: GroupResult, took: Duration) {
        let p = {
            let read = self.profiles.read();
            read.iter().find(|p| p.profile == *profile).cloned()
        };
        let p = p.unwrap_or_else(|| {
            let mut w = self.profiles.write();
            if let Some(p) = w.iter().find(|p| p.profile == *profile) {
                return p.clone();
            }
            let b = exponential_buckets(0.001, 2.0, 15);
            let p = Arc::new(ProfileGroups {
                profile: profile.clone(),
                attempts: Default::default(),
                durations: std::array::from_fn(|_| Histogram::seconds(&b)),
            });
            w.push(p.clone());
            p
        });
        p.attempts[result as usize].inc();
        p.durations[result as usize].observe_duration(took);
    }

    /// Group cycles of `profile` that ended with `result`.
    pub fn attempts(&self, profile: &str, result: GroupResult) -> u64 {
        self.profiles
            .read()
            .iter()
            .find(|p| &*p.profile == profile)
            .map_or(0, |p| p.attempts[result as usize].get())
    }

    /// Records a workload preemption attempt ending with `code` (a status
    /// code's name).
    pub fn preemption_attempt(&self, code: &str) {
        if let Some(i) = PREEMPTION_RESULTS.iter().position(|c| *c == code) {
            self.preemption_attempts[i].inc();
        }
    }

    /// Writes the families.
    pub fn render(&self, e: &mut Exposition) {
        let profiles = self.profiles.read().clone();
        e.family(
            "scheduler_podgroup_schedule_attempts_total",
            "counter",
            "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
        );
        for p in &profiles {
            for r in GroupResult::ALL {
                e.sample(
                    "scheduler_podgroup_schedule_attempts_total",
                    &[("profile", &p.profile), ("result", r.label())],
                    p.attempts[r as usize].get(),
                );
            }
        }
        e.family(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "histogram",
            "Pod group scheduling attempt latency in seconds",
        );
        for p in &profiles {
            for r in GroupResult::ALL {
                let h = &p.durations[r as usize];
                if h.count() > 0 {
                    e.histogram(
                        "scheduler_podgroup_scheduling_attempt_duration_seconds",
                        &[("profile", &p.profile), ("result", r.label())],
                        h,
                    );
                }
            }
        }
        e.family(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            "histogram",
            "Pod group scheduling algorithm latency in seconds",
        );
        e.histogram(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            &[],
            &self.algorithm_duration,
        );
        e.family(
            "scheduler_workload_preemption_attempts_total",
            "counter",
            "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
        );
        for (i, r) in PREEMPTION_RESULTS.iter().enumerate() {
            let n = self.preemption_attempts[i].get();
            if n > 0 {
                e.sample(
                    "scheduler_workload_preemption_attempts_total",
                    &[("result", r)],
                    n,
                );
            }
        }
        e.family(
            "scheduler_workload_preemption_victims",
            "histogram",
            "Number of pod preemption victims caused by workload preemption.",
        );
        e.histogram(
            "scheduler_workload_preemption_victims",
            &[],
            &self.preemption_victims,
        );
        e.family(
            "scheduler_preemption_workload_disruptions",
            "histogram",
            "Number of workload preemption units being preempted. A single preemption unit can be all pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of DisruptionMode=single).",
        );
        if self.workload_disruptions.count() > 0 {
            e.histogram(
                "scheduler_preemption_workload_disruptions",
                &[("preemptor", "podgroup")],
                &self.workload_disruptions,
            );
        }
    }
}
