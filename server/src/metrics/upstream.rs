//! The metric families kube-scheduler v1.37 serves, as upstream declares
//! them (`pkg/scheduler/metrics/metrics.go`, component-base's leader
//! election, workqueue and feature metrics, client-go's REST client
//! metrics, the DRA library's claim metric): name, type, label names and
//! stability, and whether berth serves each.
//!
//! One list, read twice: `/metrics` prefixes each served family's help
//! with its stability (`[STABLE] ...`, as component-base does), and
//! `tests/tests/metrics_upstream.rs` scrapes the real berthd and fails
//! when a family marked served is missing or has other labels, when one
//! marked not served appears, or when berthd serves an upstream-looking
//! family this list does not name. A family added to berth is added here
//! by one entry (issue 25's `kubernetes_feature_enabled`, issue 26's
//! PodGroup families, which the scrape sees with GenericWorkload on).

/// How upstream marks a family's stability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// `ALPHA`.
    Alpha,
    /// `BETA`.
    Beta,
    /// `STABLE`.
    Stable,
    /// Registered raw, with no stability marker in its help (the
    /// Prometheus process collector, as component-base registers it).
    Raw,
}

impl Stability {
    /// As the help prefix writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alpha => "ALPHA",
            Self::Beta => "BETA",
            Self::Stable => "STABLE",
            Self::Raw => "",
        }
    }
}

/// One family upstream serves.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The family's name.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Its label names, sorted.
    pub labels: &'static [&'static str],
    /// Upstream's stability level.
    pub stability: Stability,
    /// `Ok` when berth serves it, else why not.
    pub served: Result<(), &'static str>,
}

use Stability::{Alpha, Beta, Raw, Stable};

const fn served(
    name: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    stability: Stability,
) -> Family {
    Family {
        name,
        kind,
        labels,
        stability,
        served: Ok(()),
    }
}

const fn not_served(
    name: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    stability: Stability,
    why: &'static str,
) -> Family {
    Family {
        name,
        kind,
        labels,
        stability,
        served: Err(why),
    }
}

const NO_WORKQUEUE: &str = "berth has no client-go workqueue (component-base registers the family for the process's workqueues; kube-scheduler's own loop is not one)";
const GATED_OFF: &str =
    "behind a feature gate off by default in v1.37, whose machinery berth does not have";
const NOT_YET: &str = "not recorded by berth yet";

/// kube-scheduler v1.37's families.
pub const FAMILIES: &[Family] = &[
    // pkg/scheduler/metrics
    served(
        "scheduler_schedule_attempts_total",
        "counter",
        &["profile", "result"],
        Stable,
    ),
    served(
        "scheduler_scheduling_attempt_duration_seconds",
        "histogram",
        &["profile", "result"],
        Stable,
    ),
    served(
        "scheduler_scheduling_algorithm_duration_seconds",
        "histogram",
        &[],
        Beta,
    ),
    served(
        "scheduler_event_handling_duration_seconds",
        "histogram",
        &["event"],
        Alpha,
    ),
    served("scheduler_preemption_victims", "histogram", &[], Stable),
    served(
        "scheduler_preemption_attempts_total",
        "counter",
        &[],
        Stable,
    ),
    served("scheduler_pending_pods", "gauge", &["queue"], Stable),
    served(
        "scheduler_queued_entities",
        "gauge",
        &["queue", "type"],
        Alpha,
    ),
    served("scheduler_inflight_events", "gauge", &["event"], Alpha),
    served("scheduler_goroutines", "gauge", &["operation"], Beta),
    served(
        "scheduler_pod_scheduling_sli_duration_seconds",
        "histogram",
        &["attempts"],
        Beta,
    ),
    served(
        "scheduler_pod_scheduling_attempts",
        "histogram",
        &[],
        Stable,
    ),
    served(
        "scheduler_framework_extension_point_duration_seconds",
        "histogram",
        &["extension_point", "profile", "status"],
        Stable,
    ),
    served(
        "scheduler_plugin_execution_duration_seconds",
        "histogram",
        &["extension_point", "plugin", "status"],
        Beta,
    ),
    served(
        "scheduler_queue_incoming_pods_total",
        "counter",
        &["event", "queue"],
        Stable,
    ),
    served(
        "scheduler_queue_incoming_entities_total",
        "counter",
        &["event", "queue", "type"],
        Alpha,
    ),
    served("scheduler_cache_size", "gauge", &["type"], Alpha),
    not_served(
        "scheduler_pod_scheduled_after_flush_total",
        "counter",
        &[],
        Alpha,
        NOT_YET,
    ),
    not_served(
        "scheduler_permit_wait_duration_seconds",
        "histogram",
        &["result"],
        Beta,
        NOT_YET,
    ),
    not_served(
        "scheduler_unschedulable_pods",
        "gauge",
        &["plugin", "profile"],
        Beta,
        NOT_YET,
    ),
    served(
        "scheduler_plugin_evaluation_total",
        "counter",
        &["extension_point", "plugin", "profile"],
        Beta,
    ),
    not_served(
        "scheduler_queueing_hint_execution_duration_seconds",
        "histogram",
        &["event", "hint", "plugin"],
        Alpha,
        NOT_YET,
    ),
    not_served(
        "scheduler_batch_attempts_total",
        "counter",
        &["profile", "result"],
        Alpha,
        "berth's batching is its own (scheduler/batching.rs), not upstream's node hints",
    ),
    not_served(
        "scheduler_batch_cache_flushed_total",
        "counter",
        &["profile", "reason"],
        Alpha,
        "berth's batching is its own, not upstream's node hints",
    ),
    not_served(
        "scheduler_batch_rescore_attempts_total",
        "counter",
        &["profile"],
        Alpha,
        "berth's batching is its own, not upstream's node hints",
    ),
    not_served(
        "scheduler_batch_rescore_duration_seconds",
        "histogram",
        &["profile"],
        Alpha,
        "berth's batching is its own, not upstream's node hints",
    ),
    not_served(
        "scheduler_get_node_hint_duration_seconds",
        "histogram",
        &["hinted", "profile"],
        Alpha,
        "berth's batching is its own, not upstream's node hints",
    ),
    not_served(
        "scheduler_store_schedule_results_duration_seconds",
        "histogram",
        &["profile"],
        Alpha,
        "berth's batching is its own, not upstream's node hints",
    ),
    // Registered with GenericWorkload on (berthd serves them then; the
    // scrape of tests/tests/metrics_upstream.rs turns it on).
    served(
        "scheduler_podgroup_schedule_attempts_total",
        "counter",
        &["profile", "result"],
        Alpha,
    ),
    served(
        "scheduler_podgroup_scheduling_attempt_duration_seconds",
        "histogram",
        &["profile", "result"],
        Alpha,
    ),
    served(
        "scheduler_podgroup_scheduling_algorithm_duration_seconds",
        "histogram",
        &[],
        Alpha,
    ),
    served(
        "scheduler_workload_preemption_attempts_total",
        "counter",
        &["result"],
        Alpha,
    ),
    served(
        "scheduler_workload_preemption_victims",
        "histogram",
        &[],
        Alpha,
    ),
    served(
        "scheduler_preemption_workload_disruptions",
        "histogram",
        &["preemptor"],
        Alpha,
    ),
    not_served(
        "scheduler_preemption_evaluation_duration_seconds",
        "histogram",
        &["preemptor", "result"],
        Alpha,
        NOT_YET,
    ),
    not_served(
        "scheduler_preemption_execution_duration_seconds",
        "histogram",
        &["preemptor", "result"],
        Alpha,
        NOT_YET,
    ),
    not_served(
        "scheduler_preemption_pdb_violations_total",
        "counter",
        &["preemptor"],
        Alpha,
        NOT_YET,
    ),
    not_served(
        "scheduler_preemption_goroutines_duration_seconds",
        "histogram",
        &["result"],
        Alpha,
        "berth preempts in the failure handler, with no goroutine pool (deprecated in v1.37)",
    ),
    not_served(
        "scheduler_preemption_goroutines_execution_total",
        "counter",
        &["result"],
        Alpha,
        "berth preempts in the failure handler, with no goroutine pool",
    ),
    not_served(
        "scheduler_async_api_call_execution_total",
        "counter",
        &["call_type", "result"],
        Alpha,
        GATED_OFF,
    ),
    not_served(
        "scheduler_async_api_call_execution_duration_seconds",
        "histogram",
        &["call_type", "result"],
        Alpha,
        GATED_OFF,
    ),
    not_served(
        "scheduler_pending_async_api_calls",
        "gauge",
        &["call_type"],
        Alpha,
        GATED_OFF,
    ),
    not_served(
        "scheduler_dra_bindingconditions_allocations_total",
        "counter",
        &["driver", "profile", "status"],
        Alpha,
        GATED_OFF,
    ),
    not_served(
        "scheduler_dra_bindingconditions_wait_duration_seconds",
        "histogram",
        &["driver", "profile", "status"],
        Alpha,
        GATED_OFF,
    ),
    // The DRA library's claim creations (v1.37's name).
    served(
        "dynamic_resource_allocation_resourceclaim_creates_total",
        "counter",
        &["admin_access", "status"],
        Alpha,
    ),
    // component-base: leader election, feature gates, workqueues.
    served("leader_election_master_status", "gauge", &["name"], Alpha),
    served(
        "leader_election_slowpath_total",
        "counter",
        &["name"],
        Alpha,
    ),
    served(
        "kubernetes_feature_enabled",
        "gauge",
        &["name", "stage"],
        Beta,
    ),
    not_served(
        "workqueue_adds_total",
        "counter",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    not_served("workqueue_depth", "gauge", &["name"], Alpha, NO_WORKQUEUE),
    not_served(
        "workqueue_queue_duration_seconds",
        "histogram",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    not_served(
        "workqueue_work_duration_seconds",
        "histogram",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    not_served(
        "workqueue_unfinished_work_seconds",
        "gauge",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    not_served(
        "workqueue_longest_running_processor_seconds",
        "gauge",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    not_served(
        "workqueue_retries_total",
        "counter",
        &["name"],
        Alpha,
        NO_WORKQUEUE,
    ),
    // component-base's build and compatibility versions.
    served(
        "kubernetes_build_info",
        "gauge",
        &[
            "build_date",
            "compiler",
            "git_commit",
            "git_tree_state",
            "git_version",
            "go_version",
            "major",
            "minor",
            "platform",
        ],
        Alpha,
    ),
    served(
        "version_info",
        "gauge",
        &["binary", "component", "emulation", "min_compat"],
        Alpha,
    ),
    // The Prometheus process collector (client_golang's, on Linux), which
    // component-base registers raw.
    served("process_cpu_seconds_total", "counter", &[], Raw),
    served("process_max_fds", "gauge", &[], Raw),
    served("process_network_receive_bytes_total", "counter", &[], Raw),
    served("process_network_transmit_bytes_total", "counter", &[], Raw),
    served("process_open_fds", "gauge", &[], Raw),
    served("process_resident_memory_bytes", "gauge", &[], Raw),
    served("process_start_time_seconds", "gauge", &[], Raw),
    served("process_virtual_memory_bytes", "gauge", &[], Raw),
    served("process_virtual_memory_max_bytes", "gauge", &[], Raw),
    // client-go's REST client.
    served(
        "rest_client_requests_total",
        "counter",
        &["code", "host", "method"],
        Alpha,
    ),
    served(
        "rest_client_request_duration_seconds",
        "histogram",
        &["host", "verb"],
        Alpha,
    ),
    served(
        "rest_client_rate_limiter_duration_seconds",
        "histogram",
        &["host", "verb"],
        Alpha,
    ),
];

/// The prefixes of upstream's family names: a family berth serves under
/// one of them must be in [`FAMILIES`].
pub const UPSTREAM_PREFIXES: &[&str] = &[
    "scheduler_",
    "leader_election_",
    "workqueue_",
    "rest_client_",
    "kubernetes_",
    "dynamic_resource_allocation_",
    "process_",
    "version_info",
];

/// Upstream's entry for `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// `text` (an exposition) with each upstream family's help prefixed by
/// its stability, as component-base writes it (`# HELP x [STABLE] ...`).
pub fn with_stability(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1024);
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
            && let Some(f) = family(name)
            && f.stability != Stability::Raw
            && !help.starts_with('[')
        {
            out.push_str("# HELP ");
            out.push_str(name);
            out.push_str(" [");
            out.push_str(f.stability.as_str());
            out.push_str("] ");
            out.push_str(help);
            continue;
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_each_family_once_with_sorted_labels() {
        let mut names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a family listed twice");
        for f in FAMILIES {
            let mut sorted = f.labels.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, f.labels, "{}", f.name);
            assert!(
                ["counter", "gauge", "histogram"].contains(&f.kind),
                "{}",
                f.name
            );
            assert!(
                UPSTREAM_PREFIXES.iter().any(|p| f.name.starts_with(p)),
                "{}",
                f.name
            );
        }
    }

    #[test]
    fn help_lines_carry_the_stability() {
        let text = "# HELP scheduler_pending_pods Number of pending pods.\n# TYPE scheduler_pending_pods gauge\n# HELP berth_x Ours.\n";
        assert_eq!(
            with_stability(text),
            "# HELP scheduler_pending_pods [STABLE] Number of pending pods.\n# TYPE scheduler_pending_pods gauge\n# HELP berth_x Ours.\n"
        );
    }
}
