//! The group algorithm and validation, as upstream's
//! TestPodGroupSchedulingAlgorithm and TestValidatePodGroup have them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::json;

use super::*;
use crate::cache::{Cache, NodeInfo};
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{FilterPlugin, NoArgs, Parallelizer, PlacementFeasiblePlugin, Plugin};
use crate::model::PodGroupInfo;
use crate::plugins::in_tree_registry;
use crate::scheduler::FastRng;
use crate::testing::{make_node, make_pod};

/// PlacementFeasible answering from a script (Success once it runs out).
struct ScriptedPf(Arc<Mutex<VecDeque<Status>>>);

impl Plugin for ScriptedPf {
    fn name(&self) -> &'static str {
        "ScriptedPf"
    }
    crate::extension_points!(placement_feasible);
}

#[async_trait]
impl PlacementFeasiblePlugin for ScriptedPf {
    async fn placement_feasible(
        &self,
        _: &CycleState,
        _: &PodGroupCycleInfo,
        _: PlacementProgress,
        _: &[crate::framework::PlacedPod],
    ) -> Status {
        self.0.lock().pop_front().unwrap_or_default()
    }
}

/// Filter failing the named pods with the given status.
struct FakeFilter(Arc<HashMap<String, Status>>);

impl Plugin for FakeFilter {
    fn name(&self) -> &'static str {
        "FakePodGroupPlugin"
    }
    crate::extension_points!(filter);
}

impl FilterPlugin for FakeFilter {
    fn filter(&self, _: &CycleState, pod: &PodInfo, _: &NodeInfo) -> Status {
        self.0.get(&*pod.name).cloned().unwrap_or_default()
    }
}

struct Case {
    name: &'static str,
    pf: Vec<Status>,
    filter: Vec<(&'static str, Status)>,
    want: Code,
    want_results: usize,
    want_pods: Vec<Code>,
}

fn group() -> Arc<PodGroupInfo> {
    let obj = serde_json::from_value(json!({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }))
    .unwrap();
    Arc::new(PodGroupInfo::new(Arc::new(obj)).unwrap())
}

async fn run(case: &Case) -> (GroupResult, Arc<Snapshot>) {
    let script = Arc::new(Mutex::new(case.pf.iter().cloned().collect::<VecDeque<_>>()));
    let filters: Arc<HashMap<String, Status>> = Arc::new(
        case.filter
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect(),
    );
    let mut registry = in_tree_registry();
    let s = script.clone();
    registry
        .register("ScriptedPf", move |_: NoArgs, _| Ok(ScriptedPf(s.clone())))
        .unwrap();
    let f = filters.clone();
    registry
        .register("FakePodGroupPlugin", move |_: NoArgs, _| {
            Ok(FakeFilter(f.clone()))
        })
        .unwrap();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint: {enabled: [{name: ScriptedPf}, {name: FakePodGroupPlugin}]}
";
    let cfg = crate::config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let fw = crate::scheduler::build_profiles(&cfg, &registry, &handle)
        .unwrap()
        .remove("default-scheduler")
        .unwrap();
    let mut cache = Cache::new(std::time::Duration::ZERO);
    cache.add_node(Arc::new(
        make_node("node1").cpu("16").memory("64Gi").build(),
    ));
    let mut snapshot = Arc::new(Snapshot::new());
    cache.update_snapshot(Arc::make_mut(&mut snapshot));
    let info = PodGroupCycleInfo {
        group: group(),
        pods: ["p1", "p2", "p3"]
            .iter()
            .map(|n| Arc::new(make_pod(n).req_cpu("1").group("pg").build()))
            .collect(),
        scheduled: Vec::new(),
    };
    let nominated = NominatedPods::default();
    let state = CycleState::default();
    let cycle = GroupCycle {
        fw: &fw,
        info: &info,
        group_state: &state,
        nominated: &nominated,
        dry_run: false,
        publish: None,
        sample: &|| false,
    };
    let mut algorithm = Algorithm::new(0, FastRng::new(1));
    let r = cycle.run(&mut algorithm, &mut snapshot).await;
    (r, snapshot)
}

fn wait() -> Status {
    Status::new(Code::Wait, "waiting")
}

#[tokio::test]
async fn group_algorithm_as_upstream_tests_it() {
    use Code::*;
    let unsched = || Status::unschedulable("no");
    let cases = vec![
        Case {
            name: "all filters pass, no PF script",
            pf: vec![],
            filter: vec![],
            want: Success,
            want_results: 3,
            want_pods: vec![Success; 3],
        },
        Case {
            name: "quorum met before any pod",
            pf: vec![Status::success()],
            filter: vec![],
            want: Success,
            want_results: 3,
            want_pods: vec![Success; 3],
        },
        Case {
            name: "wait, wait, wait, success",
            pf: vec![wait(), wait(), wait(), Status::success()],
            filter: vec![],
            want: Success,
            want_results: 3,
            want_pods: vec![Success; 3],
        },
        Case {
            name: "a final wait is unschedulable",
            pf: vec![wait(), wait(), wait(), wait()],
            filter: vec![],
            want: Unschedulable,
            want_results: 3,
            want_pods: vec![Success; 3],
        },
        Case {
            name: "unschedulable after the first pod stops",
            pf: vec![wait(), unsched()],
            filter: vec![],
            want: Unschedulable,
            want_results: 1,
            want_pods: vec![Success],
        },
        Case {
            name: "unschedulable after the second pod stops",
            pf: vec![wait(), wait(), unsched()],
            filter: vec![],
            want: Unschedulable,
            want_results: 2,
            want_pods: vec![Success; 2],
        },
        Case {
            name: "one pod does not fit, the group does",
            pf: vec![wait(), wait(), wait(), Status::success()],
            filter: vec![("p1", Status::unschedulable("nope"))],
            want: Success,
            want_results: 3,
            want_pods: vec![Unschedulable, Success, Success],
        },
        Case {
            name: "nothing placed is unschedulable",
            pf: vec![
                wait(),
                Status::success(),
                Status::success(),
                Status::success(),
            ],
            filter: ["p1", "p2", "p3"]
                .into_iter()
                .map(|p| (p, Status::unresolvable("nope")))
                .collect(),
            want: Unschedulable,
            want_results: 3,
            want_pods: vec![Unschedulable; 3],
        },
        Case {
            name: "a pod's filter error fails the group",
            pf: vec![],
            filter: vec![("p2", Status::error("filter error for p2"))],
            want: Error,
            want_results: 2,
            want_pods: vec![Success, Error],
        },
        Case {
            name: "a PlacementFeasible error after a pod",
            pf: vec![wait(), Status::success(), Status::error("boom")],
            filter: vec![],
            want: Error,
            want_results: 2,
            want_pods: vec![Success, Success],
        },
        Case {
            name: "unschedulable before the first pod",
            pf: vec![unsched()],
            filter: vec![],
            want: Unschedulable,
            want_results: 0,
            want_pods: vec![],
        },
        Case {
            name: "an error before the first pod",
            pf: vec![Status::error("boom")],
            filter: vec![],
            want: Error,
            want_results: 0,
            want_pods: vec![],
        },
    ];
    for case in &cases {
        let (r, snapshot) = run(case).await;
        assert_eq!(r.status.code(), case.want, "{}: {:?}", case.name, r.status);
        assert_eq!(r.pods.len(), case.want_results, "{}", case.name);
        let codes: Vec<Code> = r
            .pods
            .iter()
            .map(|p| match p.outcome.code() {
                Code::UnschedulableAndUnresolvable => Code::Unschedulable,
                c => c,
            })
            .collect();
        assert_eq!(codes, case.want_pods, "{}", case.name);
        assert!(
            snapshot.get("node1").unwrap().pods().is_empty(),
            "{}: every placement undone",
            case.name
        );
    }
}

#[tokio::test]
async fn group_messages_carry_the_unschedulable_error_as_upstream() {
    let case = |pf: Vec<Status>| Case {
        name: "",
        pf,
        filter: vec![],
        want: Code::Unschedulable,
        want_results: 0,
        want_pods: vec![],
    };
    let (r, _) = run(&case(vec![Status::unschedulable(
        "minCount (3) cannot be satisfied",
    )]))
    .await;
    assert_eq!(
        r.status.message(),
        "pod group is unschedulable, minCount (3) cannot be satisfied",
        "before the first pod: the error first"
    );
    let (r, _) = run(&case(vec![wait(), Status::unschedulable("after a pod")])).await;
    assert_eq!(r.status.message(), "after a pod", "after a pod: as is");
    let (r, _) = run(&case(vec![wait(), wait(), wait(), wait()])).await;
    assert_eq!(r.status.message(), "pod group is unschedulable, waiting");
    let (r, _) = run(&Case {
        filter: vec![("p2", Status::error("filter error for p2"))],
        ..case(vec![])
    })
    .await;
    assert_eq!(
        r.status.message(),
        "failed to schedule other pod from a pod group: running \"FakePodGroupPlugin\" filter plugin: filter error for p2"
    );
    let (r, _) = run(&case(vec![Status::error("boom")])).await;
    assert_eq!(
        r.status.message(),
        "failed to evaluate placement feasibility: running PlacementFeasible plugin \"ScriptedPf\": boom"
    );
}

fn pod(name: &str, scheduler: &str, priority: i32, never: bool) -> PodRef {
    let mut b = make_pod(name)
        .group("pg")
        .priority(priority)
        .scheduler(scheduler);
    if never {
        b = b.spec("preemptionPolicy", json!("Never"));
    }
    Arc::new(b.build())
}

fn group_with(priority: i32, never: bool) -> Arc<PodGroupInfo> {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": priority});
    if never {
        spec["preemptionPolicy"] = json!("Never");
    }
    let obj = serde_json::from_value(json!({
        "metadata": {"name": "pg", "namespace": "default"}, "spec": spec,
    }))
    .unwrap();
    Arc::new(PodGroupInfo::new(Arc::new(obj)).unwrap())
}

/// (name, queued, scheduled, group, PodGroupPreemptionPolicy, want error)
type ValidateCase = (
    &'static str,
    Vec<PodRef>,
    Vec<PodRef>,
    Arc<PodGroupInfo>,
    bool,
    Option<&'static str>,
);

/// Upstream's TestValidatePodGroup, transposed.
#[test]
fn validate_group_cycle_as_upstream_tests_validate_pod_group() {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let profiles = crate::testing::default_profiles(&handle);
    const D: &str = "default-scheduler";
    // (name, queued, scheduled, group, gate, want error)
    let cases: Vec<ValidateCase> = vec![
        (
            "same scheduler names",
            vec![pod("a", D, 0, false), pod("b", D, 0, false)],
            vec![],
            group_with(0, false),
            false,
            None,
        ),
        (
            "different scheduler names",
            vec![pod("a", D, 0, false), pod("b", "other", 0, false)],
            vec![],
            group_with(0, false),
            false,
            Some(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: \"other\" and \"default-scheduler\"",
            ),
        ),
        (
            "profile missing",
            vec![pod("a", "other", 0, false)],
            vec![],
            group_with(0, false),
            false,
            Some("profile not found for scheduler name \"other\""),
        ),
        (
            "no pods to evaluate",
            vec![],
            vec![],
            group_with(0, false),
            false,
            Some("profile not found for scheduler name \"\""),
        ),
        (
            "priorities match the group's",
            vec![pod("a", D, 10, false), pod("b", D, 10, false)],
            vec![],
            group_with(10, false),
            false,
            None,
        ),
        (
            "a pod's priority differs",
            vec![pod("a", D, 9, false), pod("b", D, 10, false)],
            vec![],
            group_with(10, false),
            false,
            Some(
                "all pods in a single pod group should have the same priority as the pod group's priority, got 9 and 10",
            ),
        ),
        (
            "the group's priority differs",
            vec![pod("a", D, 10, false), pod("b", D, 10, false)],
            vec![],
            group_with(9, false),
            false,
            Some(
                "all pods in a single pod group should have the same priority as the pod group's priority, got 10 and 9",
            ),
        ),
        (
            "matches a scheduled pod",
            vec![pod("a", D, 0, false)],
            vec![pod("s", D, 0, false)],
            group_with(0, false),
            false,
            None,
        ),
        (
            "scheduler name differs from a scheduled pod's",
            vec![pod("a", D, 0, false)],
            vec![pod("s", "other", 0, false)],
            group_with(0, false),
            false,
            Some(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: \"other\" and \"default-scheduler\"",
            ),
        ),
        (
            "priority differs from a scheduled pod's",
            vec![pod("a", D, 0, false)],
            vec![pod("s", D, 5, false)],
            group_with(0, false),
            false,
            Some(
                "all pods in a single pod group should have the same priority as the pod group's priority, got 5 and 0",
            ),
        ),
        (
            "gate on: Never/Never with group Never",
            vec![pod("a", D, 0, true), pod("b", D, 0, true)],
            vec![],
            group_with(0, true),
            true,
            None,
        ),
        (
            "gate on: LowerPriority/Never",
            vec![pod("a", D, 0, false), pod("b", D, 0, true)],
            vec![],
            group_with(0, false),
            true,
            Some(
                "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got Never and PreemptLowerPriority",
            ),
        ),
        (
            "gate on: pods LowerPriority, group Never",
            vec![pod("a", D, 0, false), pod("b", D, 0, false)],
            vec![],
            group_with(0, true),
            true,
            Some(
                "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got PreemptLowerPriority and Never",
            ),
        ),
        (
            "gate off: group Never, pods LowerPriority",
            vec![pod("a", D, 0, false), pod("b", D, 0, false)],
            vec![],
            group_with(0, true),
            false,
            None,
        ),
        (
            "gate off: pods LowerPriority/Never",
            vec![pod("a", D, 0, false), pod("b", D, 0, true)],
            vec![],
            group_with(0, false),
            false,
            Some(
                "all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority",
            ),
        ),
    ];
    for (name, pods, scheduled, group, gate, want) in cases {
        let info = PodGroupCycleInfo {
            group,
            pods,
            scheduled,
        };
        let got = validate_group_cycle(&info, &profiles, gate).err();
        assert_eq!(got.as_deref(), want, "{name}");
    }
}
