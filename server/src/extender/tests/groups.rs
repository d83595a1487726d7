//! A remote extender at the group points (issue 26, item 3): a PodGroup's
//! cycle sends it `GroupCycleStart`, PlacementFeasible before the first pod
//! and after each, GroupPermit with the whole placement, and
//! PodGroupPostFilter when the group does not fit; its answers decide as a
//! native plugin's would, and its failures follow the extender rules.

use serde_json::{Value, json};

use super::*;
use crate::features::{Feature, FeatureGates};

fn gang(name: &str, min: i32) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
    })
}

fn member(name: &str, group: &str, cpu: &str) -> PodBuilder {
    make_pod(name).req_cpu(cpu).group(group)
}

/// The extender at `points`, enabled in the profile by multiPoint (the
/// group points have no profile list but PodGroupPostFilter's).
fn group_config(endpoint: &str, points: &str, extra: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: widgets}}]
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: {points}
  timeout: 10s
{extra}"
    )
}

/// The extender alone at podGroupPostFilter (DefaultPreemption, which
/// finds no victims here and says so as unresolvable, off), so that its
/// answer is the one that counts.
fn post_filter_only(endpoint: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    podGroupPostFilter:
      enabled: [{{name: widgets}}]
      disabled: [{{name: '*'}}]
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [podGroupPostFilter]
  timeout: 10s
"
    )
}

/// A scheduler with GenericWorkload on, `objects` (PodGroups) applied, the
/// extender connected, then `pods` added.
async fn start_gang(yaml: &str, objects: Vec<Value>, pods: Vec<PodBuilder>) -> Env {
    let cluster = EmbeddedCluster::new();
    for n in three_nodes() {
        cluster.apply_node(n.object()).unwrap();
    }
    for o in objects {
        cluster.apply(o).unwrap();
    }
    let registry = in_tree_registry();
    let gates = FeatureGates::default().with(Feature::GenericWorkload, true);
    let cfg = config::parse_gated(yaml, &|n| registry.contains(n), &gates).unwrap();
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
    let conn = scheduler.extenders().connections()[0].clone();
    if !conn.config().endpoint.contains("127.0.0.1:1") {
        let mut connected = conn.connected();
        connected.wait_for(|n| *n > 0).await.unwrap();
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
    }
    Env {
        cluster,
        scheduler,
        decisions,
    }
}

/// A gang of four pods of 3 CPUs on three 4-CPU nodes: the fourth never
/// fits, so the group does not.
async fn start_unfitting_gang(yaml: &str) -> Env {
    let pods = (0..4)
        .map(|i| member(&format!("w{i}"), "train", "3"))
        .collect();
    start_gang(yaml, vec![gang("train", 4)], pods).await
}

impl Env {
    async fn decisions_sorted(&mut self, n: usize) -> Vec<Decision> {
        let mut v = Vec::new();
        while v.len() < n {
            v.push(self.next().await);
        }
        v.sort_by_key(|d| match d {
            Decision::Scheduled { pod, .. } | Decision::Failed { pod, .. } => pod.clone(),
        });
        v
    }
}

fn failed_message(d: &Decision) -> &str {
    match d {
        Decision::Failed { message, .. } => message,
        other => panic!("not a failure: {other:?}"),
    }
}

/// The fake's log lines from the group's start on, without node lines.
fn group_lines(fake: &Fake) -> Vec<String> {
    fake.log
        .lock()
        .iter()
        .skip_while(|l| !l.starts_with("group-start"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_gang_reaches_placement_feasible_after_each_pod_and_group_permit_with_its_placement() {
    let fake = Fake::default();
    fake.script.lock().points = vec![
        pb::ExtensionPoint::PlacementFeasible,
        pb::ExtensionPoint::GroupPermit,
    ];
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = group_config(&endpoint, "[placementFeasible, groupPermit]", "");
    let mut lines = fake.listen();
    let mut env = start_gang(
        &yaml,
        vec![gang("train", 2)],
        vec![member("w0", "train", "3"), member("w1", "train", "3")],
    )
    .await;
    let d = env.decisions_sorted(2).await;
    assert!(
        d.iter().all(|d| matches!(d, Decision::Scheduled { .. })),
        "{d:?}"
    );
    let (n0, n1) = match (&d[0], &d[1]) {
        (Decision::Scheduled { node: a, .. }, Decision::Scheduled { node: b, .. }) => {
            (a.clone(), b.clone())
        }
        _ => unreachable!(),
    };
    assert_ne!(n0, n1, "3 CPUs each on 4-CPU nodes");
    // The group cycle's end follows its last request.
    until(&mut lines, "end").await;
    // The group cycle, in order: its start (the PodGroup and its pods),
    // PlacementFeasible before any pod and after each, GroupPermit once
    // with the placement, then the cycle's end. The pods' own cycles send
    // nothing: the extender serves no pod point.
    assert_eq!(
        group_lines(&fake),
        vec![
            "group-start train pods=w0,w1 scheduled=".to_string(),
            "PlacementFeasible 0/2 placed= failed=0".into(),
            format!("PlacementFeasible 1/1 placed=w0@{n0} failed=0"),
            format!("PlacementFeasible 2/0 placed=w0@{n0},w1@{n1} failed=0"),
            format!("GroupPermit w0@{n0},w1@{n1}"),
            "end".into(),
        ]
    );
}

#[tokio::test]
async fn placement_feasible_rejecting_stops_the_cycle_and_binds_no_pod_of_the_gang() {
    let fake = Fake::default();
    {
        let mut s = fake.script.lock();
        s.points = vec![
            pb::ExtensionPoint::PlacementFeasible,
            pb::ExtensionPoint::GroupPermit,
        ];
        s.placement = Some(pb::Code::Unschedulable);
    }
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = group_config(&endpoint, "[placementFeasible, groupPermit]", "");
    let mut env = start_gang(
        &yaml,
        vec![gang("train", 2)],
        vec![member("w0", "train", "1"), member("w1", "train", "1")],
    )
    .await;
    let d = env.decisions_sorted(2).await;
    for d in &d {
        let m = failed_message(d);
        assert!(
            m.contains("pod group is unschedulable") && m.contains("scripted placement"),
            "{m}"
        );
    }
    // Asked once, before any pod: the rejection ends the cycle there.
    assert_eq!(fake.received("PlacementFeasible"), 1);
    assert_eq!(fake.received("GroupPermit"), 0);
    assert!(
        env.cluster.pods().iter().all(|p| p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none())
    );
}

#[tokio::test]
async fn group_permit_rejecting_fails_the_whole_gang_without_preemption() {
    let fake = Fake::default();
    {
        let mut s = fake.script.lock();
        s.points = vec![
            pb::ExtensionPoint::GroupPermit,
            pb::ExtensionPoint::PodGroupPostFilter,
        ];
        s.group_permit = Some(pb::Code::Unschedulable);
        s.group_post_filter = Some((pb::Code::Success, Some("n1")));
    }
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = group_config(&endpoint, "[groupPermit, podGroupPostFilter]", "");
    let mut env = start_gang(
        &yaml,
        vec![gang("train", 2)],
        vec![member("w0", "train", "1"), member("w1", "train", "1")],
    )
    .await;
    let d = env.decisions_sorted(2).await;
    for d in &d {
        assert!(
            failed_message(d).contains("scripted Unschedulable"),
            "{d:?}"
        );
    }
    assert_eq!(fake.received("GroupPermit"), 1);
    // A rejection at GroupPermit is not for want of room.
    assert_eq!(fake.received("PodGroupPostFilter"), 0);
}

#[tokio::test]
async fn pod_group_post_filter_hears_why_the_gang_did_not_fit_and_its_nominations_stand() {
    let fake = Fake::default();
    {
        let mut s = fake.script.lock();
        s.points = vec![pb::ExtensionPoint::PodGroupPostFilter];
        s.group_post_filter = Some((pb::Code::Success, Some("n2")));
    }
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start_unfitting_gang(&post_filter_only(&endpoint)).await;
    let d = env.decisions_sorted(4).await;
    // The pods placed wait for the room being made, with the group's
    // message and the extender's appended; the one that did not fit
    // carries its own.
    for d in &d[..3] {
        assert_eq!(
            failed_message(d),
            "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, extender widgets is making room for the pod group"
        );
    }
    assert_eq!(
        failed_message(&d[3]),
        "0/3 nodes are available: 3 Insufficient cpu."
    );
    let line = fake
        .log
        .lock()
        .iter()
        .find(|l| l.starts_with("PodGroupPostFilter"))
        .cloned()
        .unwrap();
    assert!(
        line.contains("w3:0/3 nodes are available: 3 Insufficient cpu."),
        "{line}"
    );
    assert!(
        line.ends_with("[minCount (4) cannot be satisfied: 3 scheduled, 0 remaining]"),
        "{line}"
    );
    assert!(line.contains("w0@n1, w1@n2, w2@n3, w3:"), "{line}");
    assert!(!line.contains("dry-run"), "{line}");
    // Every pod of the request nominated to n2, as the extender said.
    let nominated: Vec<(String, Option<String>)> = env
        .cluster
        .pods()
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.clone()),
            )
        })
        .collect();
    assert!(
        nominated.iter().all(|(_, n)| n.as_deref() == Some("n2")),
        "{nominated:?}"
    );
}

#[tokio::test]
async fn a_nomination_of_a_pod_not_in_the_cycle_is_out_of_protocol_and_fails_the_attempt() {
    let fake = Fake::default();
    {
        let mut s = fake.script.lock();
        s.points = vec![pb::ExtensionPoint::PodGroupPostFilter];
        s.group_post_filter = Some((pb::Code::Success, Some("n2")));
        s.group_post_filter_garbage = true;
    }
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start_unfitting_gang(&post_filter_only(&endpoint)).await;
    let d = env.decisions_sorted(4).await;
    for d in &d[..3] {
        let m = failed_message(d);
        assert!(
            m.contains("extender \"widgets\" failed at PodGroupPostFilter")
                && m.contains("not-a-pod-of-the-cycle"),
            "{m}"
        );
    }
    let conn = env.scheduler.extenders().connections()[0].clone();
    let malformed = crate::metrics::PROTOCOL_ERROR_KINDS
        .iter()
        .position(|k| *k == "malformed_response")
        .unwrap();
    assert!(conn.metrics().protocol_errors(malformed) >= 1);
}

#[tokio::test]
async fn a_down_extender_at_placement_feasible_fails_the_gang_unless_it_is_ignorable() {
    for ignorable in [false, true] {
        let yaml = group_config(
            "http://127.0.0.1:1",
            "[placementFeasible]",
            &format!("  ignorable: {ignorable}\n  startupTimeout: 0s\n"),
        );
        let mut env = start_gang(
            &yaml,
            vec![gang("train", 2)],
            vec![member("w0", "train", "1"), member("w1", "train", "1")],
        )
        .await;
        let d = env.decisions_sorted(2).await;
        for d in &d {
            if ignorable {
                assert!(matches!(d, Decision::Scheduled { .. }), "{d:?}");
            } else {
                let m = failed_message(d);
                assert!(
                    m.contains("failed to evaluate placement feasibility: running PlacementFeasible plugin \"widgets\": extender \"widgets\" failed at PlacementFeasible: not connected"),
                    "{m}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_group_dry_run_tells_the_extender_it_is_one() {
    let fake = Fake::default();
    {
        let mut s = fake.script.lock();
        s.points = vec![pb::ExtensionPoint::PodGroupPostFilter];
    }
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = post_filter_only(&endpoint);
    let env = start_gang(&yaml, vec![], vec![]).await;
    let _ = &env.cluster;
    let group = Arc::new(
        crate::model::PodGroupInfo::new(Arc::new(serde_json::from_value(gang("plan", 4)).unwrap()))
            .unwrap(),
    );
    let pods: Vec<crate::model::PodRef> = (0..4)
        .map(|i| {
            Arc::new(
                crate::model::PodInfo::new(Arc::new(
                    member(&format!("p{i}"), "plan", "3").object(),
                ))
                .unwrap(),
            )
        })
        .collect();
    let r = env
        .scheduler
        .dry_run_group(group, pods, vec![], None)
        .await
        .unwrap();
    assert!(!r.fits);
    let line = fake
        .log
        .lock()
        .iter()
        .find(|l| l.starts_with("PodGroupPostFilter"))
        .cloned()
        .unwrap();
    assert!(line.starts_with("PodGroupPostFilter dry-run "), "{line}");
    assert!(
        r.message.contains("extender widgets cannot help")
            || r.message.contains("scripted Unschedulable"),
        "{}",
        r.message
    );
}
