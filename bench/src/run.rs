//! One run of a workload, as the embedded-cluster runner ([`crate::runner`])
//! and kube mode ([`crate::kube`]) both make it: how to run
//! ([`RunOptions`]) and what it measured ([`RunResult`], with kube mode's
//! own figures, [`KubeFigures`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// The workload's name.
    pub workload: String,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Pods placed before measuring.
    pub existing_pods: usize,
    /// Measured pods (all bound at the end).
    pub measured_pods: usize,
    /// Pods that never fit (all pending at the end).
    pub unschedulable_pods: usize,
    /// Measured pods bound per second, first creation to last bind.
    pub pods_per_second: f64,
    /// That wall-clock time, in seconds.
    pub measured_seconds: f64,
    /// Attempts that bound a pod, pop to end of Bind: median, in ms.
    pub attempt_p50_ms: f64,
    /// 90th percentile, in ms.
    pub attempt_p90_ms: f64,
    /// 99th percentile, in ms.
    pub attempt_p99_ms: f64,
    /// Mean, in ms.
    pub attempt_mean_ms: f64,
    /// Scheduling cycles that found a node (pop to the binding cycle's
    /// start, the serial part): 99th percentile, in ms.
    pub cycle_p99_ms: f64,
    /// CPU time the scheduler's process used per measured pod during the
    /// measured stretch (every thread: scheduling, binding, the embedded
    /// cluster, the pod creator), in microseconds. Less sensitive than
    /// pods/s to other load on the machine. Not counted: an extender
    /// process's CPU.
    pub cpu_us_per_pod: f64,
    /// Failed attempts during the measured stretch.
    pub failed_attempts: u64,
    /// Pods evicted by preemption during the measured stretch.
    pub preempted_pods: u64,
    /// Seconds the scheduler took to place the existing pods (unmeasured).
    pub setup_seconds: f64,
    /// Resident memory once the cluster's objects were built, before the
    /// scheduler started, in MiB.
    pub rss_before_scheduler_mib: f64,
    /// Peak resident memory of the process (VmHWM), in MiB: the scheduler,
    /// the embedded cluster's objects and the harness.
    pub peak_rss_mib: f64,
    /// PodGroup gangs bound whole (the gang workloads; 0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub groups: usize,
    /// Those gangs per second, over the same stretch as pods/s.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub groups_per_second: f64,
    /// Pods/s of each run, lowest first, when the workload ran more than
    /// once (a measured stretch under a second is repeated, see
    /// [`median_run`](crate::runner::median_run)); this result is then the median run's. Empty for a
    /// single run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_pods_per_second: Vec<f64>,
    /// Kube mode's figures (the kube workloads only).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<KubeFigures>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Gives up on a run after this long (a guard against a hung
    /// scheduler; stalls are detected without it).
    pub timeout: Duration,
    /// Seed for the scheduler's tie-breaking.
    pub seed: u64,
    /// Overrides the configuration's `parallelism`.
    pub parallelism: Option<usize>,
    /// The kube workloads record a trace here, as `berthd --record` does
    /// (to measure what recording costs).
    pub record: Option<std::path::PathBuf>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            seed: 1,
            parallelism: None,
            record: None,
        }
    }
}

/// What kube mode cost, beside the usual figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KubeFigures {
    /// Pods bound (once each).
    pub pods_bound: u64,
    /// `Scheduled` events written to the API.
    pub events_written: u64,
    /// Requests berth sent to the API server, per pod (lists, watches,
    /// bindings, status patches, events).
    pub api_requests_per_pod: f64,
    /// Seconds from the scheduler's start to its cache holding the whole
    /// cluster (the initial lists).
    pub sync_seconds: f64,
    /// Seconds from the start to the last event written.
    pub total_seconds: f64,
}
