//! Workload-aware preemption (KEP-5710, v1.37) through the whole
//! scheduler: a PodGroup that does not fit makes room by DefaultPreemption's
//! PodGroupPostFilter, the group's priority ordering the victims. The cases
//! of upstream's workload-aware preemption integration tests ("Full
//! PodGroup Preemption", single versus all) and the note's Appendix B
//! trace 5, on four nodes of 4 CPUs.

use serde_json::{Value, json};

use super::*;

/// A PodGroup with a gang policy of `min`, `priority`, and `all` as its
/// disruption mode when asked.
fn group(name: &str, min: i32, priority: i32, all: bool) -> Value {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": min}}, "priority": priority});
    if all {
        spec["disruptionMode"] = json!({"all": {}});
    }
    pod_group(name, spec)
}

/// A pod bound to `node` already.
fn running(name: &str, node: &str, cpu: &str, priority: i32) -> PodBuilder {
    make_pod(name).req_cpu(cpu).priority(priority).node(node)
}

fn pod_names(env: &Env) -> Vec<String> {
    let mut v: Vec<String> = env
        .cluster
        .pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    v.sort();
    v
}

impl Env {
    /// Decisions in arrival order until `n` pods were bound; a group that
    /// keeps failing (no preemption made room) fails the test after a few
    /// attempts instead of retrying forever.
    async fn until_bound(&mut self, n: usize) -> Vec<Decision> {
        let mut v = Vec::new();
        while v.iter().filter(|d| scheduled(d)).count() < n {
            assert!(v.len() < 40, "never bound: {v:?}");
            v.push(self.decisions.recv().await.expect("scheduler running"));
        }
        v
    }

    fn preempted_notes(&self) -> Vec<String> {
        self.cluster
            .events()
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Preempted"))
            .filter_map(|e| e.note.clone())
            .collect()
    }

    fn group_uid(&self, name: &str) -> String {
        let Some(KubeObject::PodGroup(pg)) =
            self.cluster.object(ObjectKind::PodGroup, "default", name)
        else {
            panic!("no PodGroup {name}")
        };
        pg.metadata.uid.clone().expect("uid")
    }
}

/// Appendix B trace 5 ("Full PodGroup Preemption"): gang `a` (priority 0,
/// `disruptionMode: all`) fills the four nodes; gang `b` (priority 1000,
/// four pods of 3500m) evicts `a` as one unit, waits on the preemption,
/// then binds all four.
#[tokio::test(start_paused = true)]
async fn a_gang_preempts_a_lower_priority_all_group_as_one_unit() {
    let mut pods: Vec<PodBuilder> = (0..4)
        .map(|i| running(&format!("a-{i}"), &format!("g-{i}"), "3500m", 0).group("a"))
        .collect();
    pods.extend((0..4).map(|i| member(&format!("b-{i}"), "b", "3500m").priority(1000)));
    let mut env = start(
        true,
        vec![group("a", 4, 0, true), group("b", 4, 1000, false)],
        pods,
    )
    .await;
    let b_uid = env.group_uid("b");
    let got = env.until_bound(4).await;
    let failed: Vec<&Decision> = got.iter().filter(|d| !scheduled(d)).collect();
    assert_eq!(failed.len(), 4, "one failed attempt first: {got:?}");
    let group_msg = "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, pod group preemption: found a placement for podgroup, preempting 4 victims";
    for d in &failed {
        let Decision::Failed {
            pod,
            reason,
            message,
        } = d
        else {
            unreachable!()
        };
        assert_eq!(reason, "Unschedulable");
        if pod == "default/b-0" {
            assert_eq!(message, "0/4 nodes are available: 4 Insufficient cpu.");
        } else {
            assert_eq!(message, group_msg, "{pod}");
        }
    }
    assert_eq!(pod_names(&env), ["b-0", "b-1", "b-2", "b-3"]);
    let note = format!("Preempted by podgroup {b_uid} on node cluster");
    assert_eq!(env.preempted_notes(), vec![note; 4]);
    assert_eq!(
        env.condition("b"),
        Some(("True".into(), "Scheduled".into(), String::new())),
        "False (waiting on preemption) first, then True"
    );
    let m = env.scheduler.prometheus().pod_groups().unwrap();
    use crate::metrics::GroupResult as R;
    assert_eq!(m.attempts("default-scheduler", R::WaitingOnPreemption), 1);
    assert_eq!(m.attempts("default-scheduler", R::Scheduled), 1);
    assert_eq!(m.preemption_attempts[0].get(), 1, "Success");
    assert_eq!(m.preemption_victims.count(), 1);
    assert_eq!(m.preemption_victims.sum(), 4.0, "four pods");
    assert_eq!(m.workload_disruptions.sum(), 1.0, "one unit");
}

/// `disruptionMode: single` loses only the pods in the way; `all` loses
/// every pod of the group even when two would do.
#[tokio::test(start_paused = true)]
async fn single_mode_victims_are_pods_all_mode_victims_are_the_whole_group() {
    for (all, left) in [(false, 2usize), (true, 0)] {
        let mut pods: Vec<PodBuilder> = (0..4)
            .map(|i| running(&format!("a-{i}"), &format!("g-{i}"), "3500m", 0).group("a"))
            .collect();
        pods.extend((0..2).map(|i| member(&format!("b-{i}"), "b", "3500m").priority(1000)));
        let mut env = start(
            true,
            vec![group("a", 4, 0, all), group("b", 2, 1000, false)],
            pods,
        )
        .await;
        env.until_bound(2).await;
        let a_left = pod_names(&env)
            .iter()
            .filter(|n| n.starts_with("a-"))
            .count();
        assert_eq!(a_left, left, "disruptionMode all: {all}");
        let m = env.scheduler.prometheus().pod_groups().unwrap();
        assert_eq!(m.preemption_victims.sum(), (4 - left) as f64);
        let units = if all { 1.0 } else { 2.0 };
        assert_eq!(m.workload_disruptions.sum(), units, "all: {all}");
    }
}

/// Only units of strictly lower priority are victims, and a pod of a
/// PodGroup counts with its group's priority (here 2000, its own 0).
#[tokio::test(start_paused = true)]
async fn equal_priority_pods_and_higher_priority_groups_are_no_victims() {
    let mut pods: Vec<PodBuilder> = (0..2)
        .map(|i| running(&format!("peer-{i}"), &format!("g-{i}"), "3500m", 1000))
        .collect();
    pods.extend(
        (2..4).map(|i| running(&format!("vip-{i}"), &format!("g-{i}"), "3500m", 0).group("vip")),
    );
    pods.push(member("b-0", "b", "3500m").priority(1000));
    let mut env = start(
        true,
        vec![group("vip", 2, 2000, false), group("b", 1, 1000, false)],
        pods,
    )
    .await;
    let got = env.decisions(1).await;
    assert_eq!(
        got[0],
        Decision::Failed {
            pod: "default/b-0".into(),
            reason: "Unschedulable".into(),
            message: "0/4 nodes are available: 4 Insufficient cpu.".into(),
        }
    );
    assert_eq!(
        env.condition("b"),
        Some((
            "False".into(),
            "Unschedulable".into(),
            "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor".into()
        ))
    );
    assert_eq!(pod_names(&env).len(), 5, "nothing evicted");
}

/// A member with `preemptionPolicy: Never` (PodGroupPreemptionPolicy off)
/// makes the group not eligible.
#[tokio::test(start_paused = true)]
async fn a_group_whose_pods_never_preempt_is_not_eligible() {
    let mut pods: Vec<PodBuilder> = (0..4)
        .map(|i| running(&format!("low-{i}"), &format!("g-{i}"), "3500m", 0))
        .collect();
    pods.push(
        member("b-0", "b", "3500m")
            .priority(1000)
            .spec("preemptionPolicy", json!("Never")),
    );
    let mut env = start(true, vec![group("b", 1, 1000, false)], pods).await;
    env.decisions(1).await;
    let (_, _, message) = env.condition("b").unwrap();
    assert_eq!(
        message,
        "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining, pod group preemption: not eligible due to preemptionPolicy=Never."
    );
    assert_eq!(pod_names(&env).len(), 5, "nothing evicted");
    let m = env.scheduler.prometheus().pod_groups().unwrap();
    assert_eq!(m.preemption_attempts[1].get(), 1, "Unschedulable");
}

/// Units whose eviction would violate a PodDisruptionBudget are reprieved
/// first: `guarded` (protected, started later) stays, `old` (started
/// earlier, so more important by start time alone) goes.
#[tokio::test(start_paused = true)]
async fn budget_protected_units_are_reprieved_first() {
    let cluster_pods = |name: &str, start: &str, app: &str| -> Value {
        let mut v =
            serde_json::to_value(running(name, "g-0", "2", 0).label("app", app).object()).unwrap();
        v["status"]["startTime"] = json!(start);
        v
    };
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "guarded"}}, "maxUnavailable": 0},
        "status": {"disruptionsAllowed": 0}});
    let mut pods: Vec<PodBuilder> = (1..4)
        .map(|i| running(&format!("busy-{i}"), &format!("g-{i}"), "4", 2000))
        .collect();
    pods.push(member("b-0", "b", "2").priority(1000));
    let objects = vec![
        pdb,
        cluster_pods("guarded", "2026-01-02T00:00:00Z", "guarded"),
        cluster_pods("old", "2026-01-01T00:00:00Z", "old"),
        group("b", 1, 1000, false),
    ];
    let mut env = start(true, objects, pods).await;
    let got = env.until_bound(1).await;
    assert!(
        got.iter()
            .any(|d| matches!(d, Decision::Scheduled { pod, node } if pod == "default/b-0" && node == "g-0")),
        "{got:?}"
    );
    let names = pod_names(&env);
    assert!(names.contains(&"guarded".to_string()), "{names:?}");
    assert!(!names.contains(&"old".to_string()), "{names:?}");
}

/// A dry run of a group that does not fit says what workload preemption
/// would do, and evicts nothing.
#[tokio::test(start_paused = true)]
async fn a_dry_run_tells_the_victims_and_evicts_nothing() {
    let pods: Vec<PodBuilder> = (0..4)
        .map(|i| running(&format!("a-{i}"), &format!("g-{i}"), "3500m", 0).group("a"))
        .collect();
    let env = start(true, vec![group("a", 4, 0, true)], pods).await;
    let b = Arc::new(
        crate::model::PodGroupInfo::new(Arc::new(
            serde_json::from_value(group("b", 4, 1000, false)).unwrap(),
        ))
        .unwrap(),
    );
    let members: Vec<crate::model::PodRef> = (0..4)
        .map(|i| {
            Arc::new(
                member(&format!("b-{i}"), "b", "3500m")
                    .priority(1000)
                    .build(),
            )
        })
        .collect();
    let r = env
        .scheduler
        .dry_run_group(b, members, Vec::new(), None)
        .await
        .unwrap();
    assert!(!r.fits);
    assert_eq!(
        r.message,
        "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, pod group preemption: found a placement for podgroup, preempting 4 victims"
    );
    let p = r.preemption.unwrap();
    assert!(p.found);
    assert_eq!(p.victims.len(), 4);
    assert_eq!(r.pods[0].rejections.len(), 4, "b-0 fits no node");
    assert!(
        r.pods.iter().all(|p| p.node.is_some()),
        "each pod nominated where the placement puts it: {:?}",
        r.pods
    );
    assert_eq!(pod_names(&env).len(), 4, "nothing evicted");
    assert!(env.preempted_notes().is_empty());
}

/// v1.37's single-pod preemption over PodGroups (issue 34, item 7): a pod
/// that preempts judges a victim in a PodGroup by its group's priority
/// (`vip-0`, priority 0 itself, is in a group of priority 2000: spared)
/// and evicts a `disruptionMode: all` group whole or not at all (`a-1`
/// on g-1 and `a-2` on g-2 go together, whichever node is chosen). With
/// GenericWorkload off every pod is a unit of its own, by its own
/// priority: one pod of priority 0 is evicted.
#[tokio::test(start_paused = true)]
async fn a_pod_preempts_pod_group_victims_by_their_group() {
    for generic_workload in [true, false] {
        let pods = vec![
            running("vip-0", "g-0", "3500m", 0).group("vip"),
            running("a-1", "g-1", "3500m", 0).group("a"),
            running("a-2", "g-2", "3500m", 0).group("a"),
            running("s-3", "g-3", "3500m", 5),
            make_pod("p").req_cpu("3500m").priority(100),
        ];
        let mut env = start(
            generic_workload,
            vec![group("vip", 1, 2000, false), group("a", 2, 0, true)],
            pods,
        )
        .await;
        let got = env.until_bound(1).await;
        let Some(Decision::Scheduled { node, .. }) = got.last() else {
            panic!("{got:?}")
        };
        let left = pod_names(&env);
        if generic_workload {
            assert!(node == "g-1" || node == "g-2", "{node}");
            assert_eq!(left, ["p", "s-3", "vip-0"], "the whole group a went");
            let Decision::Failed { message, .. } = &got[0] else {
                panic!("{got:?}")
            };
            assert!(
                message.ends_with(&format!(
                    "preemption: found a potential placement for pod on node {node}, preempting 2 victims"
                )),
                "{message}"
            );
        } else {
            assert_ne!(node, "g-3", "s-3 has the highest priority of the pods");
            assert_eq!(left.len(), 4, "one pod evicted: {left:?}");
            assert!(left.contains(&"s-3".to_string()), "{left:?}");
        }
    }
}
