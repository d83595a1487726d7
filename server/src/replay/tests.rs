//! Replay of small traces made here, through the real scheduler.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::recording::format::{Deleted, Header, Placed, VERSION};
use crate::recording::{Body, Object, Record, Writer};

fn node(name: &str, cpu: &str) -> Object {
    Object::Node(Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .unwrap(),
    ))
}

fn pod(name: &str, cpu: &str) -> Object {
    Object::Pod(Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]},
        }))
        .unwrap(),
    ))
}

fn rec(t: u64, body: Body) -> Record {
    Record { t, body }
}

fn trace(source: &str, records: &[Record]) -> Reader {
    let header = Header {
        berth_trace: VERSION,
        started: "2026-01-01T00:00:00Z".into(),
        source: source.into(),
        segment: 0,
        seed: Some(3),
        profiles: vec![],
    };
    let mut w = Writer::new(Vec::new(), &header).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    Reader::new(std::io::Cursor::new(w.finish().unwrap())).unwrap()
}

fn config(strategy: &str) -> SchedulerConfig {
    let text = format!(
        r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: {strategy}
"#
    );
    let registry = crate::plugins::in_tree_registry();
    crate::config::parse(&text, &|n| registry.contains(n)).unwrap()
}

fn run(reader: Reader, configs: &[(&str, &str)], options: ReplayOptions) -> Report {
    let candidates = configs
        .iter()
        .map(|(name, strategy)| Candidate {
            name: name.to_string(),
            config: config(strategy),
        })
        .collect();
    let mut progress = Vec::new();
    let report = replay(
        reader,
        candidates,
        options,
        &mut |p| progress.push(p.clone()),
        &AtomicBool::new(false),
    )
    .unwrap();
    let last = progress.last().unwrap();
    assert!(last.read_all && last.configs.iter().all(|c| c.done));
    report
}

/// Two nodes; pods arrive over a minute, some leave, one never fits.
fn day() -> Vec<Record> {
    let mut r = vec![
        rec(0, Body::Add(node("small", "2"))),
        rec(0, Body::Add(node("large", "8"))),
        rec(0, Body::Synced),
    ];
    for i in 0..6u64 {
        r.push(rec(
            1_000_000 * (i + 1),
            Body::Add(pod(&format!("p{i}"), "1")),
        ));
    }
    r.push(rec(
        10_000_000,
        Body::Delete(Deleted {
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "p0".into(),
            uid: "uid-p0".into(),
            preempted: false,
        }),
    ));
    r.push(rec(20_000_000, Body::Add(pod("huge", "64"))));
    r.push(rec(60_000_000, Body::Add(pod("late", "1"))));
    r
}

#[test]
fn two_configurations_replay_side_by_side() {
    let report = run(
        trace("generated", &day()),
        &[("least", "LeastAllocated"), ("most", "MostAllocated")],
        ReplayOptions {
            bind_latency: Duration::from_millis(50),
            cores: 2,
            ..ReplayOptions::default()
        },
    );
    assert_eq!(report.seed, 3, "the trace's seed");
    assert_eq!(report.records, 12);
    for c in &report.configs {
        assert_eq!(c.arrived, 8, "{}", c.name);
        assert_eq!(c.scheduled, 7, "{}", c.name);
        assert_eq!(c.pending, 1, "{}", c.name);
        assert_eq!(c.deleted_pending, 0);
        assert_eq!(c.pending_reasons, [("Insufficient cpu".to_string(), 1)]);
        assert!(c.failed_attempts >= 1);
        // Each pod was bound one binding's latency after it arrived.
        assert_eq!(c.time_to_schedule.count, 7);
        assert_eq!(c.time_to_schedule.p50, 50_000, "{:?}", c.time_to_schedule);
        assert_eq!(c.time_to_schedule.max, 50_000);
        assert_eq!(c.refused_records, 0, "{:?}", c.first_refusal);
        // The last record came at 60 s; the huge pod still backs off
        // after, within the settling time.
        assert!(c.simulated_micros >= 60_050_000, "{}", c.simulated_micros);
        let s = &c.series;
        assert!(!s.t.is_empty());
        assert_eq!(s.utilization[0].0, "cpu");
        assert_eq!(*s.pending.last().unwrap(), 1);
        assert_eq!(*s.running.last().unwrap(), 6);
    }
    // LeastAllocated spreads onto the small node too; MostAllocated packs
    // the large one.
    let cmp = &report.comparisons;
    assert_eq!(cmp.len(), 1, "no recorded column for a generated trace");
    assert_eq!(cmp[0].compared, 7);
    assert!(cmp[0].different_node > 0, "{cmp:?}");
    let most = &report.configs[1];
    let cpu = &most.series.utilization[0].1;
    assert!((cpu.last().unwrap() - 6.0 / 10.0).abs() < 1e-9, "{cpu:?}");
}

#[test]
fn recorded_bindings_of_the_configurations_pods_are_theirs_to_decide() {
    let mut records = day();
    // The recording bound p1 to large and said so; replay decides anew
    // (MostAllocated: on small, which it fills more), and compares.
    records.push(rec(
        2_000_100,
        Body::Scheduled(Placed {
            namespace: "default".into(),
            name: "p1".into(),
            uid: "uid-p1".into(),
            node: "large".into(),
        }),
    ));
    records.push(rec(
        2_000_200,
        Body::Bind(Placed {
            namespace: "default".into(),
            name: "p1".into(),
            uid: "uid-p1".into(),
            node: "large".into(),
        }),
    ));
    records.sort_by_key(|r| r.t);
    let report = run(
        trace("embedded", &records),
        &[("most", "MostAllocated")],
        ReplayOptions::default(),
    );
    let c = &report.configs[0];
    assert_eq!(c.scheduled, 7);
    assert_eq!(report.recorded_scheduled, Some(1));
    let vs = &report.comparisons[0];
    assert_eq!((vs.a.as_str(), vs.b.as_str()), ("most", "recorded"));
    assert_eq!(vs.different_node, 1, "{vs:?}");
    assert_eq!(vs.only_a, 6);
}

fn node_deleted(t: u64, name: &str) -> Record {
    rec(
        t,
        Body::Delete(Deleted {
            kind: "Node".into(),
            namespace: String::new(),
            name: name.into(),
            uid: String::new(),
            preempted: false,
        }),
    )
}

#[test]
fn pods_bound_to_a_node_that_left_are_deleted_with_it() {
    // Two nodes of two CPUs, filled by four pods of one. Node a leaves for
    // good; node b leaves and comes back within the garbage collector's
    // quarantine, so its pods stay. A pod arriving after has no room.
    let mut records = vec![
        rec(0, Body::Add(node("a", "2"))),
        rec(0, Body::Add(node("b", "2"))),
        rec(0, Body::Synced),
    ];
    for i in 0..4u64 {
        records.push(rec(
            1_000_000 * (i + 1),
            Body::Add(pod(&format!("p{i}"), "1")),
        ));
    }
    records.push(node_deleted(10_000_000, "a"));
    records.push(node_deleted(11_000_000, "b"));
    records.push(rec(20_000_000, Body::Add(node("b", "2"))));
    records.push(rec(30_000_000, Body::Add(pod("late", "1"))));
    let report = run(
        trace("generated", &records),
        &[("least", "LeastAllocated")],
        ReplayOptions::default(),
    );
    let c = &report.configs[0];
    assert_eq!(c.refused_records, 0, "{:?}", c.first_refusal);
    assert_eq!(c.arrived, 5);
    assert_eq!(c.scheduled, 4);
    assert_eq!(c.pending, 1);
    assert_eq!(c.deleted_with_node, 2, "a's two pods, not b's");
    // They went when the quarantine ended, 40 s after a left.
    assert!(c.simulated_micros >= 50_000_000, "{}", c.simulated_micros);
    let s = &c.series;
    assert_eq!(*s.running.last().unwrap(), 2);
    let at = |t: u64| s.t.iter().rposition(|&x| x <= t).unwrap();
    assert_eq!(s.running[at(45_000_000)], 4, "{s:?}");
}

#[test]
fn a_binding_that_lands_on_a_node_gone_is_collected_too() {
    // The pod's binding takes a second; its node leaves meanwhile.
    let records = vec![
        rec(0, Body::Add(node("a", "2"))),
        rec(0, Body::Synced),
        rec(1_000_000, Body::Add(pod("p0", "1"))),
        node_deleted(1_500_000, "a"),
    ];
    let report = run(
        trace("generated", &records),
        &[("least", "LeastAllocated")],
        ReplayOptions {
            bind_latency: Duration::from_secs(1),
            ..ReplayOptions::default()
        },
    );
    let c = &report.configs[0];
    assert_eq!(c.scheduled, 1);
    assert_eq!(c.deleted_with_node, 1);
    assert_eq!(*c.series.running.last().unwrap(), 0);
    assert!(c.simulated_micros >= 42_000_000, "{}", c.simulated_micros);
}

fn pod_with_priority(name: &str, cpu: &str, priority: i32) -> Object {
    Object::Pod(Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {
                "priority": priority,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}],
            },
        }))
        .unwrap(),
    ))
}

/// Ten nodes of four CPUs kept full by pods of one CPU, a quarter of them
/// of high priority (which preempt), arriving every 100 ms and each
/// leaving after 5 to 20 s.
fn crowded_day() -> Vec<Record> {
    let mut r: Vec<Record> = (0..10)
        .map(|i| rec(0, Body::Add(node(&format!("n{i}"), "4"))))
        .collect();
    r.push(rec(0, Body::Synced));
    let mut x = 12345u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    for i in 0..250u64 {
        let t = 1_000_000 + i * 100_000;
        let name = format!("p{i}");
        let priority = if next() % 4 == 0 { 1000 } else { 0 };
        r.push(rec(t, Body::Add(pod_with_priority(&name, "1", priority))));
        let life = 5_000_000 + (next() % 15_000_000);
        r.push(rec(
            t + life,
            Body::Delete(Deleted {
                kind: "Pod".into(),
                namespace: "default".into(),
                name: name.clone(),
                uid: format!("uid-{name}"),
                preempted: false,
            }),
        ));
    }
    r.sort_by_key(|r| r.t);
    r
}

/// Two copies of one configuration, side by side, place every pod alike
/// on a crowded day with preemption: pods queued at one simulated instant
/// come out in the same order however the queue's maps iterate (they
/// differed by a third of the pods before).
#[test]
fn a_configuration_that_preempts_replays_the_same_each_time() {
    {
        let cores = 2;
        let report = run(
            trace("generated", &crowded_day()),
            &[("a", "LeastAllocated"), ("b", "LeastAllocated")],
            ReplayOptions {
                bind_latency: Duration::from_millis(20),
                cores,
                ..ReplayOptions::default()
            },
        );
        let (a, b) = (&report.configs[0], &report.configs[1]);
        assert_eq!(a.refused_records, 0, "{:?}", a.first_refusal);
        assert!(a.victims > 10, "the day preempts: {}", a.victims);
        let cmp = &report.comparisons[0];
        assert_eq!(
            (cmp.different_node, cmp.only_a, cmp.only_b),
            (0, 0, 0),
            "cores {cores}: {cmp:?}"
        );
        assert_eq!(
            (a.scheduled, a.victims, a.failed_attempts),
            (b.scheduled, b.victims, b.failed_attempts)
        );
    }
}

#[test]
fn a_recorded_update_keeps_what_the_copys_scheduler_wrote() {
    let cur: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "uid": "u", "labels": {"v": "1"}},
        "status": {
            "nominatedNodeName": "n1",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }))
    .unwrap();
    // The recording's next version: a label changed, and its own
    // scheduler's nomination elsewhere, which `sanitize` drops.
    let mut next: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "uid": "u", "labels": {"v": "2"}},
        "status": {
            "nominatedNodeName": "n2",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }))
    .unwrap();
    sanitize(&mut next);
    keep_scheduler_status(&cur, &mut next);
    let s = next.status.unwrap();
    assert_eq!(s.nominated_node_name.as_deref(), Some("n1"));
    let conditions = s.conditions.unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].type_, "PodScheduled");
    assert_eq!(next.metadata.labels.unwrap()["v"], "2");
}
