//! GangScheduling's points, as upstream's gangscheduling_test.go has them
//! (TestPreEnqueue, the queueing hints, Permit, PlacementFeasible).

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::cache::KubeObject;
use crate::cluster::embedded::EmbeddedCluster;
use crate::features::{Feature, FeatureGates};
use crate::framework::{Framework, Parallelizer};
use crate::model::PodRef;
use crate::testing::make_pod;

fn pod_group_object(
    name: &str,
    policy: serde_json::Value,
) -> k8s_openapi::api::scheduling::v1beta1::PodGroup {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": policy},
    }))
    .unwrap()
}

fn gang(name: &str, min: i32) -> Arc<PodGroupInfo> {
    Arc::new(
        PodGroupInfo::new(Arc::new(pod_group_object(
            name,
            json!({"gang": {"minCount": min}}),
        )))
        .unwrap(),
    )
}

fn basic(name: &str) -> Arc<PodGroupInfo> {
    Arc::new(PodGroupInfo::new(Arc::new(pod_group_object(name, json!({"basic": {}})))).unwrap())
}

fn member(name: &str, group: &str) -> PodRef {
    Arc::new(make_pod(name).group(group).build())
}

fn handle() -> Handle {
    let cluster = EmbeddedCluster::new();
    Handle::new(cluster.clone(), cluster, Parallelizer::inline())
}

#[test]
fn pre_enqueue() {
    let h = handle();
    let pl = GangScheduling::new(NoArgs, &h);
    let groups = h.pod_groups();
    // (name, known pods of pg1, PodGroup, pod, want)
    assert!(
        pl.pre_enqueue(&make_pod("solo").build()).is_success(),
        "non-gang pod"
    );
    let p1 = member("p1", "pg1");
    let s = pl.pre_enqueue(&p1);
    assert_eq!(
        s.code(),
        Code::UnschedulableAndUnresolvable,
        "PodGroup not created"
    );
    assert_eq!(
        s.message(),
        "waiting for pods's pod group \"pg1\" to appear in scheduling queue"
    );
    groups.set_pod_group(gang("pg1", 3));
    groups.add_unscheduled(&p1);
    groups.add_unscheduled(&member("p2", "pg1"));
    let s = pl.pre_enqueue(&p1);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (
            Code::UnschedulableAndUnresolvable,
            "waiting for minCount pods from a gang to appear in scheduling queue"
        ),
        "2 of minCount 3 known"
    );
    groups.add_unscheduled(&member("p3", "pg1"));
    assert!(pl.pre_enqueue(&p1).is_success(), "3 known");
    groups.set_pod_group(basic("pg2"));
    assert!(
        pl.pre_enqueue(&member("b1", "pg2")).is_success(),
        "basic policy"
    );
}

fn pg_event(pg: k8s_openapi::api::scheduling::v1beta1::PodGroup) -> EventObject {
    EventObject::Object(KubeObject::PodGroup(Arc::new(pg)))
}

#[test]
fn queueing_hints() {
    let p = member("p", "pg1");
    let q = |h: Result<QueueingHint, String>| h.unwrap() == QueueingHint::Queue;
    let added = |pod: PodRef| Some(EventObject::Pod(pod));
    assert!(
        q(after_pod_added(
            &p,
            None,
            added(member("other", "pg1")).as_ref()
        )),
        "same group"
    );
    let bound = Arc::new(make_pod("b").group("pg1").node("n1").build());
    assert!(
        q(after_pod_added(&p, None, added(bound).as_ref())),
        "same group, bound"
    );
    let elsewhere = Arc::new(make_pod("x").namespace("other").group("pg1").build());
    assert!(
        !q(after_pod_added(&p, None, added(elsewhere).as_ref())),
        "other namespace"
    );
    assert!(
        !q(after_pod_added(
            &p,
            None,
            added(member("y", "pg2")).as_ref()
        )),
        "other group"
    );
    let solo = Arc::new(make_pod("solo").build());
    assert!(
        !q(after_pod_added(
            &solo,
            None,
            added(member("z", "pg1")).as_ref()
        )),
        "pod without group"
    );

    let pg =
        |name: &str, min: i32| pg_event(pod_group_object(name, json!({"gang": {"minCount": min}})));
    assert!(q(after_pod_group_added(&p, None, Some(&pg("pg1", 2)))));
    assert!(!q(after_pod_group_added(&p, None, Some(&pg("pg2", 2)))));
    let updated = |old: i32, new: i32, name: &str| {
        q(after_pod_group_updated(
            &p,
            Some(&pg(name, old)),
            Some(&pg(name, new)),
        ))
    };
    assert!(updated(4, 3, "pg1"), "minCount 4 -> 3");
    assert!(!updated(3, 4, "pg1"), "minCount 3 -> 4");
    assert!(!updated(3, 3, "pg1"), "unchanged");
    assert!(!updated(4, 3, "pg2"), "decreased, other group");
}

#[test]
fn placement_feasible_follows_min_count() {
    let g = gang("pg", 2);
    let at = |remaining, scheduled| {
        placement_status(
            &g,
            PlacementProgress {
                remaining,
                scheduled,
            },
        )
    };
    let s = at(2, 0);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (
            Code::Wait,
            "minCount (2) is not yet satisfied: 0 scheduled, 2 remaining"
        )
    );
    assert_eq!(at(1, 1).code(), Code::Wait);
    assert!(at(0, 2).is_success());
    let g3 = gang("pg", 3);
    let s = placement_status(
        &g3,
        PlacementProgress {
            remaining: 2,
            scheduled: 0,
        },
    );
    assert_eq!(
        (s.code(), s.message().as_str()),
        (
            Code::Unschedulable,
            "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"
        )
    );
    assert!(
        placement_status(
            &g3,
            PlacementProgress {
                remaining: 1,
                scheduled: 3
            }
        )
        .is_success(),
        "quorum already met by pods bound before"
    );
    let b = basic("pg");
    assert_eq!(
        placement_status(
            &b,
            PlacementProgress {
                remaining: 2,
                scheduled: 0
            }
        )
        .code(),
        Code::Wait
    );
    assert!(
        placement_status(
            &b,
            PlacementProgress {
                remaining: 1,
                scheduled: 1
            }
        )
        .is_success()
    );
    assert_eq!(
        placement_status(
            &b,
            PlacementProgress {
                remaining: 0,
                scheduled: 0
            }
        )
        .code(),
        Code::Unschedulable
    );
}

/// The default profile with GenericWorkload on.
fn framework(h: &Handle) -> Arc<Framework> {
    let registry = crate::plugins::in_tree_registry();
    let gates = FeatureGates::default().with(Feature::GenericWorkload, true);
    let cfg = crate::config::default_config_gated(&|n| registry.contains(n), &gates);
    crate::framework::build_profiles(&cfg, &registry, h)
        .unwrap()
        .into_values()
        .next()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn permit_waits_below_min_count_and_the_last_pod_allows_the_gang() {
    let h = handle();
    let fw = framework(&h);
    assert!(
        fw.plugin_names(crate::config::ExtensionPoint::Permit)
            .contains(&GANG_SCHEDULING)
    );
    assert_eq!(fw.placement_feasible_names(), [GANG_SCHEDULING]);
    let groups = h.pod_groups();
    groups.set_pod_group(gang("pg1", 2));
    let (a, b) = (member("a", "pg1"), member("b", "pg1"));
    for p in [&a, &b] {
        groups.add_unscheduled(p);
    }
    let node: Arc<str> = Arc::from("n1");
    let state = CycleState::default();
    // a assumed: 1 of 2 scheduled, it waits.
    let a_on = Arc::new(a.assumed_on(&node));
    groups.assume(&a_on);
    let s = fw.run_permit(&state, &a_on, &node).await;
    assert!(s.is_wait(), "{s:?}");
    assert_eq!(
        s.message(),
        "one or more plugins asked to wait and no plugin rejected pod \"a\""
    );
    assert!(h.waiting_pods().get(&a.uid).is_some());
    // b assumed: the quorum; b passes and allows a.
    let b_on = Arc::new(b.assumed_on(&node));
    groups.assume(&b_on);
    assert!(fw.run_permit(&state, &b_on, &node).await.is_success());
    assert!(fw.wait_on_permit(&a_on).await.is_success());
    // Basic groups and pods outside groups pass.
    groups.set_pod_group(basic("pg2"));
    let c = Arc::new(member("c", "pg2").assumed_on(&node));
    assert!(fw.run_permit(&state, &c, &node).await.is_success());
    let solo = Arc::new(make_pod("solo").build().assumed_on(&node));
    assert!(fw.run_permit(&state, &solo, &node).await.is_success());
}

/// What Permit asks the queue to activate.
#[derive(Default)]
struct Activations(parking_lot::Mutex<Vec<Vec<String>>>);

impl crate::framework::PodNominator for Activations {
    fn nominated_pods(&self) -> Arc<crate::framework::NominatedPods> {
        Arc::default()
    }

    fn activate(&self, pods: &[PodRef]) {
        let names = pods.iter().map(|p| p.name.to_string()).collect();
        self.0.lock().push(names);
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_member_activates_the_gang_through_its_first_pending_pod() {
    let h = handle();
    let fw = framework(&h);
    let activations = Arc::new(Activations::default());
    h.set_nominator(activations.clone());
    let groups = h.pod_groups();
    groups.set_pod_group(gang("pg1", 3));
    let pods: Vec<PodRef> = ["a", "b", "c"].map(|n| member(n, "pg1")).into();
    for p in &pods {
        groups.add_unscheduled(p);
    }
    let node: Arc<str> = Arc::from("n1");
    let state = CycleState::default();
    // Each member held below the quorum activates the gang once, through
    // the member pending that became known first (the queue moves the
    // gang's entity whole); the member reaching the quorum activates none.
    let mut want: Vec<Vec<String>> = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let on = Arc::new(p.assumed_on(&node));
        groups.assume(&on);
        let s = fw.run_permit(&state, &on, &node).await;
        if let Some(next) = pods.get(i + 1) {
            assert!(s.is_wait(), "{s:?}");
            want.push(vec![next.name.to_string()]);
        } else {
            assert!(s.is_success(), "{s:?}");
        }
        assert_eq!(*activations.0.lock(), want);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_waiting_member_times_out_after_five_minutes() {
    let h = handle();
    let fw = framework(&h);
    h.pod_groups().set_pod_group(gang("pg1", 2));
    let node: Arc<str> = Arc::from("n1");
    let a = Arc::new(member("a", "pg1").assumed_on(&node));
    h.pod_groups().assume(&a);
    assert!(
        fw.run_permit(&CycleState::default(), &a, &node)
            .await
            .is_wait()
    );
    let started = tokio::time::Instant::now();
    let s = fw.wait_on_permit(&a).await;
    assert!(s.is_rejected(), "{s:?}");
    assert_eq!(started.elapsed(), PERMIT_TIMEOUT);
}
