//! PodGroups scheduled as groups (GenericWorkload on), in process:
//! embedded cluster, real queue, cache and framework, paused time. The
//! cases of issue 26's "done when" and upstream's schedule_one_podgroup
//! tests that need the whole scheduler.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::features::{Feature, FeatureGates};
use crate::plugins::in_tree_registry;
use crate::testing::{PodBuilder, make_node, make_pod};

struct Env {
    cluster: Arc<EmbeddedCluster>,
    scheduler: Scheduler,
    decisions: Decisions,
}

fn pod_group(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn gang(name: &str, min: i32) -> Value {
    pod_group(
        name,
        json!({"schedulingPolicy": {"gang": {"minCount": min}}}),
    )
}

/// Four nodes of 4 CPUs; `objects` (PodGroups) then `pods` applied before
/// the scheduler starts, with GenericWorkload as given.
async fn start(generic_workload: bool, objects: Vec<Value>, pods: Vec<PodBuilder>) -> Env {
    let cluster = EmbeddedCluster::new();
    for i in 0..4 {
        cluster
            .apply_node(
                make_node(&format!("g-{i}"))
                    .cpu("4")
                    .memory("16Gi")
                    .object(),
            )
            .unwrap();
    }
    for o in objects {
        cluster.apply(o).unwrap();
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
    }
    let registry = in_tree_registry();
    let gates = FeatureGates::default().with(Feature::GenericWorkload, generic_workload);
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
    let decisions = scheduler.decisions();
    scheduler.wait_synced().await;
    Env {
        cluster,
        scheduler,
        decisions,
    }
}

fn member(name: &str, group: &str, cpu: &str) -> PodBuilder {
    make_pod(name).req_cpu(cpu).group(group)
}

impl Env {
    async fn decisions(&mut self, n: usize) -> Vec<Decision> {
        let mut v = Vec::new();
        while v.len() < n {
            v.push(self.decisions.recv().await.expect("scheduler running"));
        }
        v.sort_by_key(|d| match d {
            Decision::Scheduled { pod, .. } | Decision::Failed { pod, .. } => pod.clone(),
        });
        v
    }

    /// Lets the scheduler's tasks run until `done` holds (paused time: no
    /// clock is waited on, only other tasks).
    async fn until(&self, what: &str, done: impl Fn(&Scheduler) -> bool) {
        for _ in 0..10_000 {
            if done(&self.scheduler) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never: {what} (queue {:?})", self.scheduler.queue_counts());
    }

    fn condition(&self, name: &str) -> Option<(String, String, String)> {
        let KubeObject::PodGroup(pg) =
            self.cluster.object(ObjectKind::PodGroup, "default", name)?
        else {
            return None;
        };
        let c = pg
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodGroupInitiallyScheduled")?
            .clone();
        Some((c.status, c.reason, c.message))
    }
}

fn scheduled(d: &Decision) -> bool {
    matches!(d, Decision::Scheduled { .. })
}

/// Issue 26, done when: a gang with minCount 4 whose fourth pod arrives
/// late is bound only after it arrives, all four together.
#[tokio::test(start_paused = true)]
async fn a_gang_waits_for_its_last_pod_then_binds_all_together() {
    let pods = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    let mut env = start(true, vec![gang("train", 4)], pods).await;
    env.until("three members gated", |s| s.queue_counts().gated == 3)
        .await;
    assert_eq!(
        env.scheduler.metrics().snapshot().scheduled,
        0,
        "none bound"
    );
    assert_eq!(
        env.condition("train"),
        None,
        "no status written while gated"
    );
    env.cluster
        .apply_pod(member("train-3", "train", "1").object())
        .unwrap();
    let got = env.decisions(4).await;
    assert!(got.iter().all(scheduled), "{got:?}");
    assert_eq!(
        env.condition("train"),
        Some(("True".into(), "Scheduled".into(), String::new()))
    );
    let m = env.scheduler.prometheus().pod_groups().unwrap();
    assert_eq!(
        m.attempts("default-scheduler", crate::metrics::GroupResult::Scheduled),
        1
    );
}

/// Issue 26, done when: a gang that cannot fit as a whole leaves every pod
/// unbound, with upstream's messages (Appendix B, trace 2).
#[tokio::test(start_paused = true)]
async fn a_gang_that_cannot_fit_leaves_every_pod_unbound() {
    let pods = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    let mut env = start(true, vec![gang("huge", 5)], pods).await;
    let got = env.decisions(5).await;
    // Appendix B trace 2: DefaultPreemption's PodGroupPostFilter finds
    // nothing of lower priority, and says so after the group's reason.
    let placed_msg = "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor";
    let mut placed = 0;
    for d in &got {
        let Decision::Failed {
            reason, message, ..
        } = d
        else {
            panic!("bound: {d:?}")
        };
        assert_eq!(reason, "Unschedulable");
        if message == placed_msg {
            placed += 1;
        } else {
            assert_eq!(message, "0/4 nodes are available: 4 Insufficient cpu.");
        }
    }
    assert_eq!(placed, 4, "{got:?}");
    assert_eq!(
        env.condition("huge"),
        Some((
            "False".into(),
            "Unschedulable".into(),
            "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor".into()
        ))
    );
    let m = env.scheduler.prometheus().pod_groups().unwrap();
    assert_eq!(
        m.preemption_attempts[2].get(),
        1,
        "UnschedulableAndUnresolvable"
    );
    assert_eq!(m.preemption_victims.count(), 0);
    // Nothing stayed assumed: a pod alone fits right after.
    env.cluster
        .apply_pod(make_pod("solo").req_cpu("3500m").object())
        .unwrap();
    loop {
        if let Decision::Scheduled { pod, .. } = env.decisions.recv().await.unwrap() {
            assert_eq!(pod, "default/solo");
            break;
        }
    }
}

/// Group cycles of `default-scheduler` that ended unschedulable.
fn unschedulable_cycles(env: &Env) -> u64 {
    env.scheduler.prometheus().pod_groups().unwrap().attempts(
        "default-scheduler",
        crate::metrics::GroupResult::Unschedulable,
    )
}

/// Issue 34 item 1: a gang that cannot fit rests among the unschedulable
/// entities (no retry however long nothing changes, short of the 5-minute
/// flush) until an event its rejectors' hints accept: here a node that
/// fits the pod that did not fit.
#[tokio::test(start_paused = true)]
async fn a_gang_that_cannot_fit_rests_until_a_node_is_added() {
    let pods = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    let mut env = start(true, vec![gang("huge", 5)], pods).await;
    env.decisions(5).await;
    env.until("resting", |s| s.queue_counts().unschedulable == 5)
        .await;
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(unschedulable_cycles(&env), 1, "never retried meanwhile");
    assert_eq!(env.scheduler.queue_counts().unschedulable, 5);
    env.cluster
        .apply_node(make_node("g-4").cpu("4").memory("16Gi").object())
        .unwrap();
    let got = env.decisions(5).await;
    assert!(got.iter().all(scheduled), "{got:?}");
    assert_eq!(unschedulable_cycles(&env), 1);
}

/// A resting gang moves when its PodGroup's minCount is lowered
/// (GangScheduling's hint), not when it changes otherwise.
#[tokio::test(start_paused = true)]
async fn a_resting_gang_moves_when_its_min_count_is_lowered() {
    let pods = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    let mut env = start(true, vec![gang("huge", 5)], pods).await;
    env.decisions(5).await;
    env.until("resting", |s| s.queue_counts().unschedulable == 5)
        .await;
    // Labels only: GangScheduling's hint skips it.
    let mut labelled = gang("huge", 5);
    labelled["metadata"]["labels"] = json!({"team": "ml"});
    env.cluster.apply(labelled).unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(unschedulable_cycles(&env), 1);
    env.cluster.apply(gang("huge", 4)).unwrap();
    let got = env.decisions(5).await;
    assert_eq!(got.iter().filter(|d| scheduled(d)).count(), 4, "{got:?}");
    env.until("the fifth resting", |s| s.queue_counts().unschedulable == 1)
        .await;
    let cycles = unschedulable_cycles(&env);
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(
        unschedulable_cycles(&env),
        cycles,
        "the fifth pod rests too"
    );
}

#[tokio::test(start_paused = true)]
async fn pods_created_before_their_pod_group_wait_then_go_together() {
    let mut env = start(true, vec![], vec![member("ghost-0", "ghost", "1")]).await;
    env.until("incomplete", |s| s.queue_counts().incomplete == 1)
        .await;
    env.cluster.apply(gang("ghost", 1)).unwrap();
    let got = env.decisions(1).await;
    assert!(scheduled(&got[0]), "{got:?}");
    assert_eq!(env.condition("ghost").unwrap().0, "True");
}

#[tokio::test(start_paused = true)]
async fn a_priority_mismatch_fails_the_group_with_a_scheduler_error() {
    let group = pod_group(
        "prio",
        json!({"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": 100}),
    );
    let mut env = start(true, vec![group], vec![member("p-0", "prio", "1")]).await;
    let got = env.decisions(1).await;
    let want = "all pods in a single pod group should have the same priority as the pod group's priority, got 0 and 100";
    assert_eq!(
        got[0],
        Decision::Failed {
            pod: "default/p-0".into(),
            reason: "SchedulerError".into(),
            message: want.into(),
        }
    );
    assert_eq!(
        env.condition("prio"),
        Some(("False".into(), "SchedulerError".into(), want.into()))
    );
}

#[tokio::test(start_paused = true)]
async fn a_basic_group_places_what_fits() {
    let group = pod_group("web", json!({"schedulingPolicy": {"basic": {}}}));
    let pods = vec![member("w-0", "web", "1"), member("w-1", "web", "5")];
    let mut env = start(true, vec![group], pods).await;
    let got = env.decisions(2).await;
    assert!(scheduled(&got[0]), "{got:?}");
    assert_eq!(
        got[1],
        Decision::Failed {
            pod: "default/w-1".into(),
            reason: "Unschedulable".into(),
            message: "0/4 nodes are available: 4 Insufficient cpu.".into(),
        }
    );
    assert_eq!(env.condition("web").unwrap().0, "True");
}

#[tokio::test(start_paused = true)]
async fn with_generic_workload_off_members_are_scheduled_alone() {
    let pods = (0..2)
        .map(|i| member(&format!("t-{i}"), "train", "1"))
        .collect();
    let mut env = start(false, vec![gang("train", 4)], pods).await;
    let got = env.decisions(2).await;
    assert!(got.iter().all(scheduled), "{got:?}");
    assert_eq!(env.condition("train"), None, "status untouched");
    assert!(env.scheduler.prometheus().pod_groups().is_none());
}

#[cfg(test)]
#[path = "group_preemption_tests.rs"]
mod preemption;
