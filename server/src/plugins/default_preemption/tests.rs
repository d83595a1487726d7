//! Preemption: which victims, which node, what happens to them.

use serde_json::json;

use super::*;
use crate::cache::{KubeObject, ObjectKind, Snapshot};
use crate::cluster::ClusterSource;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::framework::build_profiles;
use crate::framework::{Framework, Parallelizer};
use crate::plugins::in_tree_registry;
use crate::scheduler::{Algorithm, FastRng};
use crate::testing::{PodBuilder, make_node, make_pod};

struct Env {
    cluster: Arc<EmbeddedCluster>,
    fw: Arc<Framework>,
    snapshot: Snapshot,
}

/// Nodes with `(name, cpu)` and pods `(builder)` already bound; the
/// default profile (with DefaultPreemption) over them.
fn env(
    nodes: &[(&str, &str)],
    pods: Vec<PodBuilder>,
    pdbs: Vec<serde_json::Value>,
    args: serde_json::Value,
) -> Env {
    let cluster = EmbeddedCluster::new();
    let mut infos = Vec::new();
    for (name, cpu) in nodes {
        let spec = make_node(name).cpu(cpu).memory("64Gi");
        cluster.apply_node(spec.object()).unwrap();
        infos.push(NodeInfo::new(Arc::new(spec.build())));
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
        let stored = PodInfo::new(cluster.get_pod("default", &p.build().name).unwrap()).unwrap();
        let node = stored.node_name.clone().unwrap();
        infos
            .iter_mut()
            .find(|n| n.name() == &*node)
            .unwrap()
            .add_pod(Arc::new(stored));
    }
    let registry = in_tree_registry();
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: DefaultPreemption\n    args: {args}\n"
    );
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).unwrap();
    let handle = Handle::new(cluster.clone(), cluster.clone(), Parallelizer::inline());
    for pdb in pdbs {
        handle
            .objects()
            .upsert(KubeObject::from_json(ObjectKind::PodDisruptionBudget, pdb).unwrap());
    }
    let fw = build_profiles(&cfg, &registry, &handle)
        .unwrap()
        .into_values()
        .next()
        .unwrap();
    let snapshot = Snapshot::from_nodes(infos);
    handle.set_snapshot(Arc::new(snapshot.clone()));
    Env {
        cluster,
        fw,
        snapshot,
    }
}

fn low(name: &str, node: &str, cpu: &str, prio: i32) -> PodBuilder {
    make_pod(name)
        .node(node)
        .req_cpu(cpu)
        .priority(prio)
        .label("app", name)
}

impl Env {
    /// Runs the search and, as the scheduler does when nothing fits, PostFilter.
    async fn preempt(&self, pod: &PodInfo) -> (Option<PostFilterResult>, Status) {
        let mut alg = Algorithm::new(0, FastRng::new(1));
        let mut state = CycleState::with_snapshot(Arc::new(self.snapshot.clone()));
        let found = alg
            .find_nodes_that_fit(
                &self.fw,
                &mut state,
                pod,
                &self.snapshot,
                &Default::default(),
            )
            .await
            .ok()
            .unwrap();
        assert!(
            found.nodes.is_empty(),
            "the pod must not fit anywhere for these tests"
        );
        let (mut result, status) = self
            .fw
            .run_post_filter(&state, pod, &found.diagnosis.node_to_status)
            .await;
        // The scheduler evicts once the nomination is written.
        if let Some(eviction) = result.as_mut().and_then(|r| r.eviction.take()) {
            eviction.run().await.unwrap();
        }
        (result, status)
    }

    fn pods(&self) -> Vec<String> {
        self.cluster
            .pods()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }
}

fn nominated(r: &Option<PostFilterResult>) -> Option<String> {
    match r.as_ref().map(|r| &r.nominating_info) {
        Some(NominatingInfo::Override(n)) => n.as_deref().map(str::to_string),
        _ => None,
    }
}

#[tokio::test]
async fn evicts_the_fewest_least_important_pods() {
    let e = env(
        &[("n1", "4")],
        vec![
            low("a", "n1", "1", 1),
            low("b", "n1", "1", 2),
            low("c", "n1", "1", 3),
            low("d", "n1", "1", 4),
        ],
        vec![],
        json!({}),
    );
    let pod = make_pod("p").req_cpu("2").priority(10).build();
    let (r, s) = e.preempt(&pod).await;
    assert!(s.is_success(), "{s:?}");
    assert_eq!(nominated(&r).as_deref(), Some("n1"));
    // d and c (more important) are reprieved; b and a go.
    assert_eq!(e.pods(), ["c", "d"]);
    let events: Vec<_> = e
        .cluster
        .events()
        .into_iter()
        .map(|ev| (ev.reason.unwrap(), ev.note.unwrap()))
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].0, "Preempted");
    assert_eq!(
        events[0].1,
        format!("Preempted by pod {} on node n1", pod.uid)
    );
}

#[tokio::test]
async fn a_dry_run_names_the_victims_and_evicts_nothing() {
    let e = env(
        &[("n1", "2")],
        vec![low("a", "n1", "1", 1), low("b", "n1", "1", 2)],
        vec![],
        json!({}),
    );
    let pod = make_pod("p").req_cpu("2").priority(10).build();
    let mut alg = Algorithm::new(0, FastRng::new(1));
    let mut state = CycleState::with_snapshot(Arc::new(e.snapshot.clone()));
    state.dry_run = true;
    let found = alg
        .find_nodes_that_fit(&e.fw, &mut state, &pod, &e.snapshot, &Default::default())
        .await
        .ok()
        .unwrap();
    let (r, s) =
        e.fw.run_post_filter(&state, &pod, &found.diagnosis.node_to_status)
            .await;
    assert!(s.is_success());
    let r = r.unwrap();
    let mut victims: Vec<String> = r.victims.iter().map(|v| v.name.to_string()).collect();
    victims.sort();
    assert_eq!(victims, ["a", "b"]);
    assert_eq!(e.pods(), ["a", "b"], "nothing evicted");
    assert!(e.cluster.events().is_empty());
}

#[tokio::test]
async fn only_lower_priority_pods_are_victims() {
    let e = env(
        &[("n1", "2")],
        vec![low("same", "n1", "2", 10)],
        vec![],
        json!({}),
    );
    let pod = make_pod("p").req_cpu("2").priority(10).build();
    let (r, s) = e.preempt(&pod).await;
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    assert_eq!(nominated(&r), None);
    assert_eq!(e.pods(), ["same"]);
}

#[tokio::test]
async fn preemption_policy_never_does_not_preempt() {
    let e = env(
        &[("n1", "2")],
        vec![low("a", "n1", "2", 1)],
        vec![],
        json!({}),
    );
    let pod = make_pod("p")
        .req_cpu("2")
        .priority(10)
        .spec("preemptionPolicy", json!("Never"))
        .build();
    let (r, s) = e.preempt(&pod).await;
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."
    );
    assert!(r.is_none());
    assert_eq!(e.pods(), ["a"]);
}

#[tokio::test]
async fn unresolvable_nodes_are_not_candidates() {
    // Too big for any node even when empty: every node is unresolvable.
    let e = env(
        &[("n1", "2"), ("n2", "2")],
        vec![low("a", "n1", "1", 1)],
        vec![],
        json!({}),
    );
    let pod = make_pod("p").req_cpu("8").priority(10).build();
    let (r, s) = e.preempt(&pod).await;
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        r.unwrap().nominating_info,
        NominatingInfo::Override(None),
        "any old nomination is cleared"
    );
}

#[tokio::test]
async fn nodes_needing_fewer_budget_violations_win() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "protect-a", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}}, "status": {"disruptionsAllowed": 0}});
    // a (on n1) is the least important victim anywhere, but protected.
    let e = env(
        &[("n1", "2"), ("n2", "2")],
        vec![low("a", "n1", "2", 1), low("b", "n2", "2", 5)],
        vec![pdb],
        json!({}),
    );
    let (r, s) = e
        .preempt(&make_pod("p").req_cpu("2").priority(10).build())
        .await;
    assert!(s.is_success());
    assert_eq!(nominated(&r).as_deref(), Some("n2"));
    assert_eq!(e.pods(), ["a"]);
}

#[tokio::test]
async fn a_budget_with_disruptions_left_is_no_violation() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "protect-a", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}}, "status": {"disruptionsAllowed": 1}});
    let e = env(
        &[("n1", "2"), ("n2", "2")],
        vec![low("a", "n1", "2", 1), low("b", "n2", "2", 5)],
        vec![pdb],
        json!({}),
    );
    let (r, _) = e
        .preempt(&make_pod("p").req_cpu("2").priority(10).build())
        .await;
    assert_eq!(
        nominated(&r).as_deref(),
        Some("n1"),
        "then the lowest-priority victim decides"
    );
}

#[tokio::test]
async fn candidate_order_follows_upstream_criteria() {
    // n1: one victim of priority 5; n2: two victims of priority 1 and 2.
    // Lowest highest-priority victim wins: n2.
    let e = env(
        &[("n1", "2"), ("n2", "2")],
        vec![
            low("x", "n1", "2", 5),
            low("y", "n2", "1", 1),
            low("z", "n2", "1", 2),
        ],
        vec![],
        json!({}),
    );
    let (r, _) = e
        .preempt(&make_pod("p").req_cpu("2").priority(10).build())
        .await;
    assert_eq!(nominated(&r).as_deref(), Some("n2"));

    // Same highest priority: the smaller sum of priorities wins, then fewer victims.
    let e = env(
        &[("n1", "2"), ("n2", "2")],
        vec![
            low("x1", "n1", "1", 3),
            low("x2", "n1", "1", 3),
            low("y", "n2", "2", 3),
        ],
        vec![],
        json!({}),
    );
    let (r, _) = e
        .preempt(&make_pod("p").req_cpu("2").priority(10).build())
        .await;
    assert_eq!(
        nominated(&r).as_deref(),
        Some("n2"),
        "one victim of 3 beats two of 3"
    );
}

#[test]
fn pick_prefers_a_node_without_victims() {
    let v = Arc::new(make_pod("v").priority(1).build());
    let cs = [
        Candidate {
            node: "n1".into(),
            victims: vec![v],
            pdb_violations: 0,
        },
        Candidate {
            node: "n2".into(),
            victims: vec![],
            pdb_violations: 0,
        },
    ];
    assert_eq!(&*pick(&cs).unwrap().node, "n2");
    assert!(pick(&[]).is_none());
}

#[test]
fn pick_finds_a_node_when_candidates_tie_down_to_unstarted_victims() {
    // Victims that have not started count as starting "now": the last
    // criterion must see one "now", or no candidate keeps the best value.
    let cs: Vec<Candidate> = ["n1", "n2", "n3"]
        .into_iter()
        .map(|n| Candidate {
            node: n.into(),
            victims: vec![Arc::new(make_pod(&format!("v-{n}")).priority(0).build())],
            pdb_violations: 0,
        })
        .collect();
    for _ in 0..100 {
        assert_eq!(pick(&cs).map(|c| &*c.node), Some("n1"));
    }
}

#[tokio::test]
async fn identical_nodes_with_unstarted_victims_are_preempted() {
    // scheduler_perf's PreemptionBasic in small: every node full of
    // low-priority pods that never started.
    let e = env(
        &[("n1", "4"), ("n2", "4")],
        vec![
            low("a1", "n1", "900m", 0),
            low("a2", "n1", "900m", 0),
            low("a3", "n1", "900m", 0),
            low("a4", "n1", "900m", 0),
            low("b1", "n2", "900m", 0),
            low("b2", "n2", "900m", 0),
            low("b3", "n2", "900m", 0),
            low("b4", "n2", "900m", 0),
        ],
        vec![],
        json!({}),
    );
    let (r, s) = e
        .preempt(&make_pod("p").req_cpu("3").priority(10).build())
        .await;
    assert!(s.is_success(), "{s:?}");
    let node = nominated(&r).expect("a node is nominated");
    let left_on = |n: &str| {
        e.cluster
            .pods()
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n))
            .count()
    };
    assert_eq!(left_on(&node), 1, "three of four victims go");
}

#[test]
fn budgets_split_victims() {
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1, "disruptedPods": {"web-0": "2026-01-01T00:00:00Z"}}}))
        .unwrap();
    let budgets = vec![Budget::from(&pdb).unwrap()];
    let web = |n: &str| Arc::new(make_pod(n).label("app", "web").build());
    let other = Arc::new(make_pod("db").label("app", "db").build());
    let (violating, fine) = split_by_budget(
        &[web("web-0"), web("web-1"), web("web-2"), other.clone()],
        &budgets,
    );
    // web-0 is already being disrupted; web-1 uses the one disruption left.
    let names = |v: &[PodRef]| v.iter().map(|p| p.name.to_string()).collect::<Vec<_>>();
    assert_eq!(names(&violating), ["web-2"]);
    assert_eq!(names(&fine), ["web-0", "web-1", "db"]);
    // An empty selector protects nothing.
    let empty: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": "e", "namespace": "default"},
        "spec": {"selector": {}}, "status": {"disruptionsAllowed": 0}}))
        .unwrap();
    let (violating, _) = split_by_budget(&[web("web-3")], &[Budget::from(&empty).unwrap()]);
    assert!(violating.is_empty());
}

/// What a preemption extender was asked: per call, (node, victim names).
type Asked = Vec<Vec<(String, Vec<String>)>>;

/// A preemption extender: keeps the candidates on `keep` (or, with
/// `empty`, keeps them without victims), or fails.
struct Narrowing {
    keep: &'static str,
    empty: bool,
    fail: bool,
    ignorable: bool,
    asked: parking_lot::Mutex<Asked>,
}

impl Narrowing {
    fn new(keep: &'static str) -> Self {
        Self {
            keep,
            empty: false,
            fail: false,
            ignorable: false,
            asked: Default::default(),
        }
    }
}

#[async_trait]
impl crate::framework::PreemptionExtender for Narrowing {
    fn name(&self) -> &str {
        "narrowing"
    }
    fn supports_preemption(&self) -> bool {
        true
    }
    fn is_interested(&self, _: &PodInfo) -> bool {
        true
    }
    fn is_ignorable(&self) -> bool {
        self.ignorable
    }
    async fn process_preemption(
        &self,
        _: &PodInfo,
        candidates: &NodeVictims,
        _: &Snapshot,
    ) -> Result<NodeVictims, crate::framework::ExtenderError> {
        self.asked.lock().push(
            candidates
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        v.pods.iter().map(|p| p.name.to_string()).collect(),
                    )
                })
                .collect(),
        );
        if self.fail {
            return Err(crate::framework::ExtenderError("extender down".into()));
        }
        let mut out: NodeVictims = candidates
            .iter()
            .filter(|(n, _)| &***n == self.keep)
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        if self.empty {
            out.values_mut().for_each(|v| v.pods.clear());
        }
        Ok(out)
    }
}

fn two_full_nodes() -> Env {
    env(
        &[("n1", "2"), ("n2", "2")],
        vec![low("a", "n1", "2", 1), low("b", "n2", "2", 1)],
        vec![],
        json!({"minCandidateNodesAbsolute": 100}),
    )
}

#[tokio::test]
async fn extenders_narrow_the_candidates_to_the_ones_they_keep() {
    for keep in ["n1", "n2"] {
        let e = two_full_nodes();
        let ext = Arc::new(Narrowing::new(keep));
        e.fw.handle().set_extenders(vec![ext.clone()]);
        let pod = make_pod("p").req_cpu("2").priority(10).build();
        let (r, s) = e.preempt(&pod).await;
        assert!(s.is_success(), "{s:?}");
        assert_eq!(nominated(&r).as_deref(), Some(keep));
        // It saw both candidates with their victims.
        assert_eq!(
            *ext.asked.lock(),
            [vec![
                ("n1".to_string(), vec!["a".to_string()]),
                ("n2".to_string(), vec!["b".to_string()])
            ]]
        );
        let survivor = if keep == "n1" { "b" } else { "a" };
        assert_eq!(e.pods(), [survivor]);
    }
}

#[tokio::test]
async fn extender_failures_fail_preemption_unless_ignorable() {
    let pod = make_pod("p").req_cpu("2").priority(10).build();

    let e = two_full_nodes();
    let mut failing = Narrowing::new("n1");
    failing.fail = true;
    e.fw.handle().set_extenders(vec![Arc::new(failing)]);
    let (r, s) = e.preempt(&pod).await;
    assert_eq!(s.code(), Code::Error);
    assert_eq!(s.message(), "preemption: extender down");
    assert!(r.is_none());
    assert_eq!(e.pods(), ["a", "b"], "nothing evicted");

    let e = two_full_nodes();
    let mut skipped = Narrowing::new("n1");
    skipped.fail = true;
    skipped.ignorable = true;
    e.fw.handle().set_extenders(vec![Arc::new(skipped)]);
    let (r, s) = e.preempt(&pod).await;
    assert!(s.is_success(), "{s:?}");
    assert!(nominated(&r).is_some());

    // A kept node without victims: an error, or dropped when ignorable
    // (then no candidate is left).
    let e = two_full_nodes();
    let mut empty = Narrowing::new("n1");
    empty.empty = true;
    e.fw.handle().set_extenders(vec![Arc::new(empty)]);
    let (_, s) = e.preempt(&pod).await;
    assert_eq!(
        s.message(),
        "preemption: expected at least one victim pod on node \"n1\""
    );
    let e = two_full_nodes();
    let mut empty = Narrowing::new("n1");
    empty.empty = true;
    empty.ignorable = true;
    e.fw.handle().set_extenders(vec![Arc::new(empty)]);
    let (r, s) = e.preempt(&pod).await;
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: no candidate node for preemption"
    );
    assert!(r.is_none());
    assert_eq!(e.pods(), ["a", "b"]);
}

/// A preemption extender (an HTTP extender's `preemptVerb`) that names
/// `victim` on every candidate it gets without victims, passes the others
/// through, and records what it got.
struct Naming {
    victim: Option<&'static str>,
    asked: parking_lot::Mutex<Asked>,
}

#[async_trait]
impl crate::framework::PreemptionExtender for Naming {
    fn name(&self) -> &str {
        "naming"
    }
    fn supports_preemption(&self) -> bool {
        true
    }
    fn is_interested(&self, _: &PodInfo) -> bool {
        true
    }
    fn is_ignorable(&self) -> bool {
        false
    }
    async fn process_preemption(
        &self,
        _: &PodInfo,
        candidates: &NodeVictims,
        snapshot: &Snapshot,
    ) -> Result<NodeVictims, crate::framework::ExtenderError> {
        self.asked.lock().push(
            candidates
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        v.pods.iter().map(|p| p.name.to_string()).collect(),
                    )
                })
                .collect(),
        );
        let mut out = candidates.clone();
        for (node, v) in out.iter_mut() {
            if let (true, Some(name)) = (v.pods.is_empty(), self.victim) {
                let pod = snapshot
                    .get(node)
                    .and_then(|n| n.pods().iter().find(|p| &*p.name == name).cloned());
                v.pods.extend(pod);
            }
        }
        Ok(out)
    }
}

/// v1.38 (kubernetes#135486): a node the cycle rejected (here by a filter
/// extender) where the per-node Filter plugins need no victim is no
/// candidate (`No preemption victims found`) unless an extender that
/// processes preemption is there: it then gets the node without victims
/// and may name some; a node still without victims after the extenders is
/// dropped.
#[tokio::test]
async fn a_node_needing_no_victim_is_left_to_a_preempt_extender_as_v1_38() {
    let pod = make_pod("p").req_cpu("1").priority(10).build();
    // n1 has room for the pod as far as the per-node plugins go; the cycle
    // rejected it for another reason (an extender's Filter).
    let mut filtered = NodeToStatus::default();
    filtered.set(
        Arc::from("n1"),
        Status::unschedulable("node(s) had no free license").with_plugin("license"),
    );
    let run = |e: Env, filtered: NodeToStatus, pod: PodInfo| async move {
        let mut state = CycleState::with_snapshot(Arc::new(e.snapshot.clone()));
        let (_, s, _) =
            e.fw.run_pre_filter(&mut state, &pod, e.snapshot.list())
                .await;
        assert!(s.is_success(), "{s:?}");
        let (mut r, s) = e.fw.run_post_filter(&state, &pod, &filtered).await;
        if let Some(eviction) = r.as_mut().and_then(|r| r.eviction.take()) {
            eviction.run().await.unwrap();
        }
        (r, s, e.pods())
    };
    let env = || {
        env(
            &[("n1", "4")],
            vec![low("a", "n1", "1", 1)],
            vec![],
            json!({}),
        )
    };

    let (r, s, left) = run(env(), filtered.clone(), pod.clone()).await;
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    assert_eq!(nominated(&r), None);
    assert_eq!(left, ["a"]);

    let e = env();
    let ext = Arc::new(Naming {
        victim: Some("a"),
        asked: Default::default(),
    });
    e.fw.handle().set_extenders(vec![ext.clone()]);
    let (r, s, left) = run(e, filtered.clone(), pod.clone()).await;
    assert!(s.is_success(), "{s:?}");
    assert_eq!(nominated(&r).as_deref(), Some("n1"));
    assert_eq!(*ext.asked.lock(), [vec![("n1".to_string(), vec![])]]);
    assert!(left.is_empty(), "the victim it named is evicted: {left:?}");

    // Passed through without victims: dropped after the last extender.
    let e = env();
    e.fw.handle().set_extenders(vec![Arc::new(Naming {
        victim: None,
        asked: Default::default(),
    })]);
    let (r, s, left) = run(e, filtered, pod).await;
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(
        s.message(),
        "no new claims to deallocate, preemption: no candidate node for preemption"
    );
    assert!(r.is_none());
    assert_eq!(left, ["a"]);
}
