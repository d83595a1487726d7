//! Gang scheduling end to end on the embedded cluster, paused time.

use crate::framework::QueuedPodInfo;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::plugins::in_tree_registry;
use crate::scheduler::{Decision, Options, Scheduler};
use crate::testing::{PodBuilder, make_node, make_pod};

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
    queueSort:
      disabled: [{name: PrioritySort}]
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 10}
";

/// A group member; `start` adds the min-member annotation to grouped pods.
fn member(name: &str, group: &str) -> PodBuilder {
    make_pod(name).req_cpu("1").label(LABEL_POD_GROUP, group)
}

async fn start(
    cpus: &[&str],
    pods: Vec<PodBuilder>,
    min: usize,
) -> (Arc<EmbeddedCluster>, Scheduler) {
    let cluster = EmbeddedCluster::new();
    for (i, c) in cpus.iter().enumerate() {
        cluster
            .apply_node(make_node(&format!("n{i}")).cpu(c).object())
            .unwrap();
    }
    for p in pods {
        let mut obj = p.object();
        if obj
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_POD_GROUP))
        {
            obj.metadata.annotations =
                Some([(ANNOTATION_MIN_MEMBER.to_string(), min.to_string())].into());
        }
        cluster.apply_pod(obj).unwrap();
    }
    let registry = in_tree_registry();
    let cfg = config::parse(CONFIG, &|n| registry.contains(n)).unwrap();
    let s = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            seed: Some(1),
            ..Options::default()
        },
    )
    .unwrap();
    (cluster, s)
}

fn bound(cluster: &EmbeddedCluster) -> BTreeSet<String> {
    cluster
        .pods()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_complete_gang_binds_together() {
    let pods = (0..4).map(|i| member(&format!("g-{i}"), "train")).collect();
    let (cluster, s) = start(&["2", "2"], pods, 4).await;
    let mut d = s.decisions();
    let start = tokio::time::Instant::now();
    let mut scheduled = BTreeSet::new();
    while scheduled.len() < 4 {
        match d.recv().await.unwrap() {
            Decision::Scheduled { pod, .. } => {
                scheduled.insert(pod);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "no member waited out its timeout"
    );
    assert_eq!(bound(&cluster).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn an_incomplete_gang_binds_nothing_and_releases_everything() {
    // Room for 3 of 4 members.
    let pods = (0..4).map(|i| member(&format!("g-{i}"), "train")).collect();
    let (cluster, s) = start(&["2", "1"], pods, 4).await;
    let mut d = s.decisions();
    let mut failed = std::collections::BTreeMap::new();
    while failed.len() < 4 {
        match d.recv().await.unwrap() {
            Decision::Failed { pod, message, .. } => {
                failed.entry(pod).or_insert(message);
            }
            Decision::Scheduled { pod, .. } => panic!("{pod} bound without its gang"),
        }
    }
    assert!(bound(&cluster).is_empty());
    let messages: Vec<&String> = failed.values().collect();
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.contains("Insufficient cpu"))
            .count(),
        1,
        "the member that found no room says why: {messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("rejected due to timeout after waiting 10s at plugin Coscheduling")),
        "{messages:?}"
    );
    // The first member whose wait ends times out; its Unreserve rejects
    // the others still waiting, unless their own waits ended first.
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.contains("at plugin Coscheduling")
                || m.contains("of pod group default/train failed"))
            .count(),
        3,
        "the waiting members were rejected: {messages:?}"
    );
    // Everything they reserved is released: stop retrying, let waiting
    // retries time out (virtual time), and nothing stays assumed.
    s.stop();
    while s.bindings_in_flight() > 0 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(s.snapshot().list().iter().all(|n| n.pods().is_empty()));
    assert!(bound(&cluster).is_empty());
}

#[tokio::test(start_paused = true)]
async fn pods_outside_groups_are_unaffected() {
    let (cluster, s) = start(&["2"], vec![make_pod("solo").req_cpu("1")], 1).await;
    let mut d = s.decisions();
    assert!(matches!(
        d.recv().await.unwrap(),
        Decision::Scheduled { .. }
    ));
    assert_eq!(bound(&cluster), BTreeSet::from(["solo".to_string()]));
}

#[test]
fn queue_sort_keeps_a_group_together() {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(
        cluster.clone(),
        cluster,
        crate::framework::Parallelizer::inline(),
    );
    let plugin = Coscheduling::new(CoschedulingArgs::default(), &handle);
    let t0 = Instant::now();
    let q = |b: PodBuilder, secs: u64| {
        let pod = Arc::new(b.build());
        plugin.pre_enqueue(&pod);
        let mut q = QueuedPodInfo::new(pod, t0 + std::time::Duration::from_secs(secs));
        q.initial_attempt_timestamp = Some(q.timestamp);
        q
    };
    // The group is first seen at t=0; a solo pod arrives at t=1; the
    // group's second member only at t=2: it still sorts before the solo pod.
    let a = q(make_pod("a").label(LABEL_POD_GROUP, "g"), 0);
    let solo = q(make_pod("solo"), 1);
    let b = q(make_pod("b").label(LABEL_POD_GROUP, "g"), 2);
    assert!(plugin.less_pods(&a, &solo));
    assert!(plugin.less_pods(&b, &solo), "b sorts with its group");
    assert!(plugin.less_pods(&a, &b));
    // Priority still comes first.
    let urgent = q(make_pod("urgent").priority(10), 5);
    assert!(plugin.less_pods(&urgent, &a));
}

#[test]
fn args() {
    assert_eq!(
        CoschedulingArgs::parse(None, "a")
            .unwrap()
            .permit_waiting_time_seconds,
        60
    );
    let e =
        CoschedulingArgs::parse(Some(&json!({"permitWaitingTimeSeconds": 0})), "a").unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.permitWaitingTimeSeconds: Invalid value: 0: must be greater than 0"
    );
}
