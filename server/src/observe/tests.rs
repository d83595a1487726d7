//! The exposition of a real scheduler in process: label sets, values and
//! the well-formedness of every line.

use std::collections::BTreeSet;

use super::metrics::AttemptResult;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::plugins::in_tree_registry;
use crate::scheduler::{Options, Scheduler};
use crate::testing::{make_node, make_pod};

#[tokio::test]
async fn a_scheduler_exposes_upstream_families_with_its_counts() {
    let cluster = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        cluster
            .apply_node(make_node(n).cpu("1").memory("1Gi").pods(10).object())
            .unwrap();
    }
    for (p, cpu) in [("a", "500m"), ("b", "500m"), ("huge", "4")] {
        cluster
            .apply_pod(make_pod(p).req_cpu(cpu).object())
            .unwrap();
    }
    cluster
        .apply_pod(make_pod("held").gate("example.com/wait").object())
        .unwrap();
    let registry = in_tree_registry();
    let cfg = config::default_config(&|n| registry.contains(n));
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            seed: Some(1),
            ..Options::default()
        },
    )
    .unwrap();
    let profile = loop {
        let changed = scheduler.metrics().changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Some(p) = scheduler.prometheus().profile("default-scheduler")
            && p.attempts(AttemptResult::Scheduled) == 2
            && p.attempts(AttemptResult::Unschedulable) == 1
            && scheduler.is_idle()
        {
            break p;
        }
        changed.await;
    };
    assert_eq!(profile.attempts(AttemptResult::Error), 0);
    let text = super::render(&scheduler);
    let lines: BTreeSet<&str> = text.lines().collect();
    for want in [
        r#"scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 2"#,
        r#"scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 1"#,
        r#"scheduler_schedule_attempts_total{profile="default-scheduler",result="error"} 0"#,
        r#"scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="scheduled"} 2"#,
        r#"scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="+Inf"} 1"#,
        r#"scheduler_pending_pods{queue="active"} 0"#,
        r#"scheduler_pending_pods{queue="backoff"} 0"#,
        r#"scheduler_pending_pods{queue="gated"} 1"#,
        r#"scheduler_pending_pods{queue="unschedulable"} 1"#,
        r#"scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 3"#,
        r#"scheduler_queue_incoming_pods_total{event="PodAdd",queue="unschedulable"} 1"#,
        r#"scheduler_queue_incoming_pods_total{event="ScheduleAttemptFailure",queue="unschedulable"} 1"#,
        r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",profile="default-scheduler",status="Success"} 2"#,
        r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="PostFilter",profile="default-scheduler",status="Unschedulable"} 1"#,
        r#"scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreFilter",profile="default-scheduler",status="Success",le="0.0001"} 0"#,
        r#"scheduler_preemption_attempts_total 1"#,
        r#"scheduler_pod_scheduling_attempts_count 2"#,
        r#"scheduler_pod_scheduling_attempts_bucket{le="1"} 2"#,
        r#"scheduler_goroutines{operation="binding"} 0"#,
    ] {
        // Bucket counts at tiny bounds depend on the machine's speed:
        // match those by series only.
        if want.contains("le=\"0.0001\"") {
            let series = want.rsplit_once(' ').unwrap().0;
            assert!(
                lines
                    .iter()
                    .any(|l| l.rsplit_once(' ').unwrap().0 == series),
                "missing series {series}\n{text}"
            );
            continue;
        }
        assert!(lines.contains(want), "missing {want}\n{text}");
    }

    // Well-formed: each family declared once with HELP then TYPE; every
    // sample belongs to the family declared last; label names sorted, `le`
    // last.
    let mut declared: Vec<(String, String)> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if let Some(rest) = l.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            let t = lines.next().unwrap();
            let kind = t
                .strip_prefix(&format!("# TYPE {name} "))
                .unwrap_or_else(|| panic!("TYPE after HELP {name}: {t}"));
            assert!(
                !declared.iter().any(|(n, _)| n == name),
                "{name} declared twice"
            );
            declared.push((name.to_string(), kind.to_string()));
            continue;
        }
        let (name, kind) = declared.last().expect("a sample before any family");
        let series = l.rsplit_once(' ').unwrap().0;
        let metric = series.split('{').next().unwrap();
        let ok = match kind.as_str() {
            "histogram" => [
                format!("{name}_bucket"),
                format!("{name}_sum"),
                format!("{name}_count"),
            ]
            .contains(&metric.to_string()),
            _ => metric == name,
        };
        assert!(ok, "{metric} under family {name} ({kind})");
        if let Some(labels) = series.split_once('{').map(|(_, l)| l) {
            let names: Vec<&str> = labels
                .trim_end_matches('}')
                .split("\",")
                .map(|p| p.split('=').next().unwrap())
                .collect();
            let (le, rest): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| **n == "le");
            let mut sorted = rest.clone();
            sorted.sort();
            assert_eq!(rest, sorted, "{l}");
            if !le.is_empty() {
                assert_eq!(names.last(), Some(&"le"), "{l}");
            }
        }
    }
    scheduler.stop();
}

/// The PodGroup families (GenericWorkload on): upstream's names, labels,
/// buckets and help, and the queue's entity gauges.
#[tokio::test]
async fn pod_group_families_appear_with_generic_workload() {
    use crate::features::{Feature, FeatureGates};
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(make_node("n1").cpu("4").memory("4Gi").pods(10).object())
        .unwrap();
    for (name, min) in [("fits", 2), ("short", 3)] {
        cluster
            .apply(serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
            }))
            .unwrap();
    }
    for (p, g) in [("a", "fits"), ("b", "fits"), ("c", "short")] {
        cluster
            .apply_pod(make_pod(p).req_cpu("1").group(g).object())
            .unwrap();
    }
    cluster
        .apply_pod(make_pod("orphan").req_cpu("1").group("missing").object())
        .unwrap();
    let registry = in_tree_registry();
    let gates = FeatureGates::default().with(Feature::GenericWorkload, true);
    let cfg = config::default_config_gated(&|n| registry.contains(n), &gates);
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            seed: Some(1),
            ..Options::default()
        },
    )
    .unwrap();
    loop {
        let changed = scheduler.metrics().changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if scheduler.metrics().snapshot().scheduled == 2 && scheduler.is_idle() {
            break;
        }
        changed.await;
    }
    let text = super::render(&scheduler);
    let lines: BTreeSet<&str> = text.lines().collect();
    for want in [
        "# HELP scheduler_podgroup_schedule_attempts_total [ALPHA] Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
        "# TYPE scheduler_podgroup_schedule_attempts_total counter",
        r#"scheduler_podgroup_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 1"#,
        r#"scheduler_podgroup_schedule_attempts_total{profile="default-scheduler",result="waiting_on_preemption"} 0"#,
        r#"scheduler_podgroup_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 0"#,
        r#"scheduler_podgroup_schedule_attempts_total{profile="default-scheduler",result="error"} 0"#,
        "# TYPE scheduler_podgroup_scheduling_attempt_duration_seconds histogram",
        r#"scheduler_podgroup_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="scheduled"} 1"#,
        "# HELP scheduler_podgroup_scheduling_algorithm_duration_seconds [ALPHA] Pod group scheduling algorithm latency in seconds",
        "scheduler_podgroup_scheduling_algorithm_duration_seconds_count 1",
        "# TYPE scheduler_workload_preemption_attempts_total counter",
        "# TYPE scheduler_workload_preemption_victims histogram",
        r#"scheduler_pending_pods{queue="gated"} 1"#,
        r#"scheduler_pending_pods{queue="incomplete"} 1"#,
        r#"scheduler_pending_pods{queue="pending"} 0"#,
        r#"scheduler_queued_entities{queue="gated",type="podgroup"} 1"#,
        r#"scheduler_queued_entities{queue="active",type="pod"} 0"#,
        r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="PlacementFeasible",profile="default-scheduler",status="Success"} 1"#,
    ] {
        assert!(lines.contains(want), "missing {want:?} in:\n{text}");
    }
    // Buckets: exponential(0.001, 2, 15) for the durations, (1, 2, 11) for
    // victims.
    for want in [
        r#"scheduler_podgroup_scheduling_algorithm_duration_seconds_bucket{le="0.001"}"#,
        r#"scheduler_podgroup_scheduling_algorithm_duration_seconds_bucket{le="16.384"}"#,
        r#"scheduler_workload_preemption_victims_bucket{le="1024"} 0"#,
    ] {
        assert!(text.contains(want), "missing {want:?}");
    }
    assert!(
        !text.contains(
            r#"scheduler_podgroup_scheduling_algorithm_duration_seconds_bucket{le="32.768"}"#
        ),
        "15 buckets"
    );
}

#[tokio::test]
async fn pod_group_families_are_absent_without_the_gate() {
    let cluster = EmbeddedCluster::new();
    let registry = in_tree_registry();
    let cfg = config::default_config(&|n| registry.contains(n));
    let scheduler = Scheduler::start(&cfg, &registry, cluster, Options::default()).unwrap();
    let text = super::render(&scheduler);
    // v1.37 registers the queue's entity families always (every pod an
    // entity of type `pod`); the group cycle's and workload preemption's
    // only with the gate.
    for name in [
        "scheduler_podgroup_",
        "workload_preemption",
        "type=\"podgroup\"",
    ] {
        assert!(!text.contains(name), "{name} without GenericWorkload");
    }
    assert!(text.contains(r#"scheduler_pending_pods{queue="incomplete"} 0"#));
}
