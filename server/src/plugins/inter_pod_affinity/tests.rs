//! InterPodAffinity's behaviour, case by case, with the verdicts and scores
//! upstream gives.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::filtering::{PRE_FILTER_KEY, PreFilterState};
use super::scoring::{PRE_SCORE_KEY, PreScoreState, normalize};
use super::*;
use crate::cache::{KubeObject, NodeInfo, ObjectKind, Snapshot};
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{
    Code, CycleState, FilterPlugin, NodeScore, Parallelizer, PluginArgs, PreFilterExtensions,
    PreFilterPlugin, PreScorePlugin, ScoreExtensions, ScorePlugin, Status,
};
use crate::model::NodeSpec;
use crate::testing::{PodBuilder, make_node, make_pod};

const ZONE: &str = "zone";
const HOST: &str = "hostname";

// ---------------------------------------------------------------------------
// Builders.

/// A pod's `spec.affinity` (pod affinity and anti-affinity parts).
#[derive(Default, Clone)]
struct Aff {
    req: Vec<Value>,
    anti: Vec<Value>,
    pref: Vec<Value>,
    pref_anti: Vec<Value>,
}

impl Aff {
    fn req(mut self, t: Value) -> Self {
        self.req.push(t);
        self
    }
    fn anti(mut self, t: Value) -> Self {
        self.anti.push(t);
        self
    }
    fn pref(mut self, weight: i32, t: Value) -> Self {
        self.pref
            .push(json!({"weight": weight, "podAffinityTerm": t}));
        self
    }
    fn pref_anti(mut self, weight: i32, t: Value) -> Self {
        self.pref_anti
            .push(json!({"weight": weight, "podAffinityTerm": t}));
        self
    }
    fn json(&self) -> Value {
        let section = |req: &[Value], pref: &[Value]| {
            let mut m = Map::new();
            if !req.is_empty() {
                m.insert(
                    "requiredDuringSchedulingIgnoredDuringExecution".into(),
                    json!(req),
                );
            }
            if !pref.is_empty() {
                m.insert(
                    "preferredDuringSchedulingIgnoredDuringExecution".into(),
                    json!(pref),
                );
            }
            Value::Object(m)
        };
        json!({
            "podAffinity": section(&self.req, &self.pref),
            "podAntiAffinity": section(&self.anti, &self.pref_anti),
        })
    }
}

trait WithAff {
    fn aff(self, a: Aff) -> Self;
}

impl WithAff for PodBuilder {
    fn aff(self, a: Aff) -> Self {
        self.spec("affinity", a.json())
    }
}

/// A term selecting pods labelled `app=<app>` within `key` domains.
fn term(key: &str, app: &str) -> Value {
    term_sel(key, json!({"matchLabels": {"app": app}}))
}

/// A term with any label selector.
fn term_sel(key: &str, selector: Value) -> Value {
    json!({"labelSelector": selector, "topologyKey": key})
}

/// `t` with `namespaces`.
fn in_ns(mut t: Value, namespaces: &[&str]) -> Value {
    t["namespaces"] = json!(namespaces);
    t
}

/// `t` with a `namespaceSelector`.
fn ns_sel(mut t: Value, selector: Value) -> Value {
    t["namespaceSelector"] = selector;
    t
}

/// n1, n2 in zone z1, n3 in zone z2, n4 without a zone; all with a
/// hostname label.
fn nodes() -> Vec<NodeSpec> {
    vec![
        make_node("n1").label(ZONE, "z1").label(HOST, "n1").build(),
        make_node("n2").label(ZONE, "z1").label(HOST, "n2").build(),
        make_node("n3").label(ZONE, "z2").label(HOST, "n3").build(),
        make_node("n4").label(HOST, "n4").build(),
    ]
}

/// [`nodes`] and n5, without any label.
fn nodes_and_bare() -> Vec<NodeSpec> {
    let mut n = nodes();
    n.push(make_node("n5").build());
    n
}

/// A snapshot of `nodes` with each pod on the node it names.
fn snapshot(nodes: &[NodeSpec], pods: &[PodInfo]) -> Arc<Snapshot> {
    let infos = nodes
        .iter()
        .map(|n| {
            let mut info = NodeInfo::new(Arc::new(n.clone()));
            for p in pods {
                if p.node_name.as_deref() == Some(&*n.name) {
                    info.add_pod(Arc::new(p.clone()));
                }
            }
            info
        })
        .collect();
    Arc::new(Snapshot::from_nodes(infos))
}

struct Env {
    handle: Handle,
    pl: InterPodAffinity,
}

impl Env {
    /// A plugin with `args` over `nodes` running `pods`, with the labelled
    /// `namespaces`.
    fn new(
        args: Value,
        nodes: &[NodeSpec],
        pods: &[PodInfo],
        namespaces: &[(&str, Value)],
    ) -> Self {
        let cluster = EmbeddedCluster::new();
        let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
        for (name, labels) in namespaces {
            let ns = KubeObject::from_json(
                ObjectKind::Namespace,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
            )
            .unwrap();
            handle.objects().upsert(ns);
        }
        handle.set_snapshot(snapshot(nodes, pods));
        let args = InterPodAffinityArgs::parse(Some(&args), "args").unwrap();
        let pl = InterPodAffinity::new(args, &handle);
        Self { handle, pl }
    }

    fn set_pods(&self, nodes: &[NodeSpec], pods: &[PodInfo]) {
        self.handle.set_snapshot(snapshot(nodes, pods));
    }

    /// PreFilter's state, or `None` when it skips.
    async fn pre_filter(&self, pod: &PodInfo) -> Option<CycleState> {
        let mut state = CycleState::with_snapshot(self.handle.snapshot());
        let all = self.handle.snapshot().list().to_vec();
        let (result, status) = self.pl.pre_filter(&mut state, pod, &all).await;
        assert!(result.is_none(), "InterPodAffinity never narrows the nodes");
        if status.is_skip() {
            assert!(state.read(&PRE_FILTER_KEY).is_none());
            return None;
        }
        assert!(status.is_success(), "{status:?}");
        Some(state)
    }

    /// Each node's verdict, as a letter (see [`letter`]), or `None` when
    /// PreFilter skips.
    async fn verdicts(&self, pod: &PodInfo) -> Option<Vec<&'static str>> {
        let state = self.pre_filter(pod).await?;
        Some(self.filter_all(&state, pod))
    }

    fn filter_all(&self, state: &CycleState, pod: &PodInfo) -> Vec<&'static str> {
        self.handle
            .snapshot()
            .list()
            .iter()
            .map(|n| letter(&self.pl.filter(state, pod, n)))
            .collect()
    }

    /// Raw and normalized scores of every node, or `None` when PreScore
    /// skips.
    async fn scores(&self, pod: &PodInfo) -> Option<(Vec<i64>, Vec<i64>)> {
        let mut state = CycleState::with_snapshot(self.handle.snapshot());
        let all = self.handle.snapshot().list().to_vec();
        let status = self.pl.pre_score(&mut state, pod, &all).await;
        if status.is_skip() {
            assert!(state.read(&PRE_SCORE_KEY).is_none());
            return None;
        }
        assert!(status.is_success(), "{status:?}");
        let raw: Vec<i64> = all
            .iter()
            .map(|n| self.pl.score(&state, pod, n).unwrap())
            .collect();
        let mut scores: Vec<NodeScore<'_>> = all
            .iter()
            .zip(&raw)
            .map(|(n, s)| NodeScore {
                name: n.name(),
                score: *s,
            })
            .collect();
        let s = self.pl.normalize_score(&state, pod, &mut scores);
        assert!(s.is_success(), "{s:?}");
        Some((raw, scores.iter().map(|s| s.score).collect()))
    }
}

/// A Filter verdict as a letter: "" fits, "A" the pod's affinity is not
/// met, "N" its anti-affinity is violated, "E" an existing pod's
/// anti-affinity rejects it. Checks each reason's code.
fn letter(s: &Status) -> &'static str {
    if s.is_success() {
        return "";
    }
    match (s.code(), s.message().as_str()) {
        (Code::UnschedulableAndUnresolvable, REASON_AFFINITY_RULES_NOT_MATCH) => "A",
        (Code::Unschedulable, REASON_ANTI_AFFINITY_RULES_NOT_MATCH) => "N",
        (Code::Unschedulable, REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH) => "E",
        _ => panic!("unexpected status {s:?}"),
    }
}

fn db(name: &str, node: &str) -> PodBuilder {
    make_pod(name).label("app", "db").node(node)
}

// ---------------------------------------------------------------------------
// Filter.

struct FilterCase {
    name: &'static str,
    existing: Vec<PodBuilder>,
    pod: PodBuilder,
    namespaces: Vec<(&'static str, Value)>,
    /// Per node n1..n4; `None`: PreFilter skips (every node fits).
    want: Option<[&'static str; 4]>,
}

fn case(
    name: &'static str,
    existing: Vec<PodBuilder>,
    pod: PodBuilder,
    want: Option<[&'static str; 4]>,
) -> FilterCase {
    FilterCase {
        name,
        existing,
        pod,
        namespaces: vec![],
        want,
    }
}

async fn run_filter_cases(cases: Vec<FilterCase>) {
    for c in cases {
        let pods: Vec<PodInfo> = c.existing.iter().map(PodBuilder::build).collect();
        let env = Env::new(json!({}), &nodes(), &pods, &c.namespaces);
        let got = env.verdicts(&c.pod.build()).await;
        assert_eq!(got, c.want.map(|w| w.to_vec()), "{}", c.name);
    }
}

#[tokio::test]
async fn required_affinity() {
    let p = || make_pod("p");
    run_filter_cases(vec![
        case(
            "no terms anywhere: PreFilter skips",
            vec![db("db1", "n1")],
            p(),
            None,
        ),
        case(
            "zone affinity: every node of the zone with a match",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(term(ZONE, "db"))),
            Some(["", "", "A", "A"]),
        ),
        case(
            "hostname affinity: only the node with a match",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(term(HOST, "db"))),
            Some(["", "A", "A", "A"]),
        ),
        case(
            "matching pods in two zones",
            vec![db("db1", "n1"), db("db2", "n3")],
            p().aff(Aff::default().req(term(ZONE, "db"))),
            Some(["", "", "", "A"]),
        ),
        case(
            "a matching pod on a node without the key counts nowhere",
            vec![db("db1", "n4")],
            p().aff(Aff::default().req(term(ZONE, "db"))),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "no pod matches and the pod does not match its own term",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(term(ZONE, "cache"))),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "first pod of a group: it matches its own term, nodes with the key fit",
            vec![db("db1", "n1")],
            p().label("app", "cache")
                .aff(Aff::default().req(term(ZONE, "cache"))),
            Some(["", "", "", "A"]),
        ),
        case(
            "not the first pod: only the domains with a match",
            vec![make_pod("c1").label("app", "cache").node("n3")],
            p().label("app", "cache")
                .aff(Aff::default().req(term(ZONE, "cache"))),
            Some(["A", "A", "", "A"]),
        ),
        case(
            "the exception needs the pod to match all its own terms",
            vec![],
            p().label("app", "cache").aff(
                Aff::default()
                    .req(term(ZONE, "cache"))
                    .req(term_sel(ZONE, json!({"matchLabels": {"tier": "fe"}}))),
            ),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "the exception needs the pod in its own terms' namespaces",
            vec![],
            p().label("app", "cache")
                .aff(Aff::default().req(in_ns(term(ZONE, "cache"), &["other"]))),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "one pod must match every term: two pods matching one each do not",
            vec![
                db("db1", "n1"),
                make_pod("fe1").label("tier", "fe").node("n1"),
            ],
            p().aff(
                Aff::default()
                    .req(term(ZONE, "db"))
                    .req(term_sel(ZONE, json!({"matchLabels": {"tier": "fe"}}))),
            ),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "one pod matching every term",
            vec![
                db("db1", "n1"),
                make_pod("dbfe").label("app", "db").label("tier", "fe").node("n3"),
            ],
            p().aff(
                Aff::default()
                    .req(term(ZONE, "db"))
                    .req(term_sel(ZONE, json!({"matchLabels": {"tier": "fe"}}))),
            ),
            Some(["A", "A", "", "A"]),
        ),
        case(
            "terms over two keys: every term's domain must hold a match",
            vec![make_pod("dbfe").label("app", "db").label("tier", "fe").node("n1")],
            p().aff(
                Aff::default()
                    .req(term(ZONE, "db"))
                    .req(term_sel(HOST, json!({"matchLabels": {"tier": "fe"}}))),
            ),
            Some(["", "A", "A", "A"]),
        ),
        case(
            "match expressions",
            vec![db("db1", "n3")],
            p().aff(Aff::default().req(term_sel(
                ZONE,
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]}),
            ))),
            Some(["A", "A", "", "A"]),
        ),
        case(
            "a term without a label selector matches no pod",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(json!({"topologyKey": ZONE}))),
            Some(["A", "A", "A", "A"]),
        ),
    ])
    .await;
}

#[tokio::test]
async fn required_anti_affinity() {
    let p = || make_pod("p");
    run_filter_cases(vec![
        case(
            "zone anti-affinity: the whole zone of a match is out",
            vec![db("db1", "n1")],
            p().aff(Aff::default().anti(term(ZONE, "db"))),
            Some(["N", "N", "", ""]),
        ),
        case(
            "hostname anti-affinity: only the node of a match is out",
            vec![db("db1", "n1")],
            p().aff(Aff::default().anti(term(HOST, "db"))),
            Some(["N", "", "", ""]),
        ),
        case(
            "anti-affinity matching no pod",
            vec![db("db1", "n1")],
            p().aff(Aff::default().anti(term(ZONE, "cache"))),
            Some(["", "", "", ""]),
        ),
        case(
            "each anti-affinity term on its own",
            vec![
                db("db1", "n1"),
                make_pod("c1").label("app", "cache").node("n3"),
            ],
            p().aff(
                Aff::default()
                    .anti(term(HOST, "db"))
                    .anti(term(ZONE, "cache")),
            ),
            Some(["N", "", "N", ""]),
        ),
        case(
            "affinity is checked before anti-affinity",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(term(ZONE, "db")).anti(term(HOST, "db"))),
            Some(["N", "", "A", "A"]),
        ),
        case(
            "a pod matching its own anti-affinity is not kept from anywhere by itself",
            vec![],
            p().label("app", "db")
                .aff(Aff::default().anti(term(ZONE, "db"))),
            Some(["", "", "", ""]),
        ),
    ])
    .await;
}

#[tokio::test]
async fn existing_pods_anti_affinity() {
    let web = || make_pod("p").label("app", "web");
    let guard = |node: &str, key: &str| {
        make_pod("guard")
            .node(node)
            .aff(Aff::default().anti(term(key, "web")))
    };
    run_filter_cases(vec![
        case(
            "an existing pod's hostname anti-affinity",
            vec![guard("n3", HOST)],
            web(),
            Some(["", "", "E", ""]),
        ),
        case(
            "an existing pod's zone anti-affinity",
            vec![guard("n1", ZONE)],
            web(),
            Some(["E", "E", "", ""]),
        ),
        case(
            "an existing pod's anti-affinity not matching the pod: PreFilter skips",
            vec![guard("n1", ZONE)],
            make_pod("p").label("app", "db"),
            None,
        ),
        case(
            "an existing pod's anti-affinity on a node without the key: PreFilter skips",
            vec![guard("n4", ZONE)],
            web(),
            None,
        ),
        case(
            "existing pods' anti-affinity is checked after the pod's own terms",
            vec![guard("n3", HOST), db("db1", "n1")],
            web().aff(Aff::default().anti(term(ZONE, "db"))),
            Some(["N", "N", "E", ""]),
        ),
        case(
            "existing anti-affinity in the pod's own namespace by default",
            vec![guard("n3", HOST).namespace("other")],
            web(),
            None,
        ),
        case(
            "existing anti-affinity listing the pod's namespace",
            vec![
                make_pod("guard")
                    .namespace("other")
                    .node("n3")
                    .aff(Aff::default().anti(in_ns(term(HOST, "web"), &["default"]))),
            ],
            web(),
            Some(["", "", "E", ""]),
        ),
    ])
    .await;
}

#[tokio::test]
async fn namespaces_and_namespace_selectors() {
    let p = || make_pod("p");
    let other_db = || db("db1", "n1").namespace("other");
    let team_a = || vec![("other", json!({"team": "a"})), ("third", json!({}))];
    let cases = vec![
        case(
            "terms select the pod's own namespace by default",
            vec![other_db()],
            p().aff(Aff::default().req(term(ZONE, "db"))),
            Some(["A", "A", "A", "A"]),
        ),
        case(
            "a namespaces list",
            vec![other_db()],
            p().aff(Aff::default().req(in_ns(term(ZONE, "db"), &["other"]))),
            Some(["", "", "A", "A"]),
        ),
        case(
            "a namespaces list without the pod's namespace",
            vec![other_db()],
            p().aff(Aff::default().req(in_ns(term(ZONE, "db"), &["third"]))),
            Some(["A", "A", "A", "A"]),
        ),
        FilterCase {
            namespaces: team_a(),
            ..case(
                "a namespace selector picking the namespace",
                vec![other_db()],
                p().aff(Aff::default().req(ns_sel(
                    term(ZONE, "db"),
                    json!({"matchLabels": {"team": "a"}}),
                ))),
                Some(["", "", "A", "A"]),
            )
        },
        FilterCase {
            namespaces: team_a(),
            ..case(
                "a namespace selector not picking it",
                vec![other_db()],
                p().aff(Aff::default().req(ns_sel(
                    term(ZONE, "db"),
                    json!({"matchLabels": {"team": "b"}}),
                ))),
                Some(["A", "A", "A", "A"]),
            )
        },
        case(
            "an empty namespace selector selects every namespace",
            vec![other_db()],
            p().aff(Aff::default().req(ns_sel(term(ZONE, "db"), json!({})))),
            Some(["", "", "A", "A"]),
        ),
        case(
            "a namespace selector picks among the known namespaces only",
            vec![other_db()],
            p().aff(Aff::default().req(ns_sel(
                term(ZONE, "db"),
                json!({"matchLabels": {"kubernetes.io/metadata.name": "other"}}),
            ))),
            // Namespaces are picked among the known ones: "other" is not.
            Some(["A", "A", "A", "A"]),
        ),
        FilterCase {
            namespaces: team_a(),
            ..case(
                "a namespace selector on the name label",
                vec![other_db()],
                p().aff(Aff::default().req(ns_sel(
                    term(ZONE, "db"),
                    json!({"matchLabels": {"kubernetes.io/metadata.name": "other"}}),
                ))),
                Some(["", "", "A", "A"]),
            )
        },
        FilterCase {
            namespaces: team_a(),
            ..case(
                "namespaces and a namespace selector add up",
                vec![other_db(), db("db3", "n3").namespace("third")],
                p().aff(Aff::default().req(ns_sel(
                    in_ns(term(ZONE, "db"), &["third"]),
                    json!({"matchLabels": {"team": "a"}}),
                ))),
                Some(["", "", "", "A"]),
            )
        },
        case(
            "anti-affinity with an empty namespace selector",
            vec![other_db()],
            p().aff(Aff::default().anti(ns_sel(term(ZONE, "db"), json!({})))),
            Some(["N", "N", "", ""]),
        ),
        FilterCase {
            namespaces: team_a(),
            ..case(
                "anti-affinity with a namespace selector",
                vec![other_db(), db("db3", "n3").namespace("third")],
                p().aff(Aff::default().anti(ns_sel(
                    term(HOST, "db"),
                    json!({"matchLabels": {"team": "a"}}),
                ))),
                Some(["N", "", "", ""]),
            )
        },
        FilterCase {
            namespaces: vec![("default", json!({"team": "web"}))],
            ..case(
                "an existing pod's namespace selector matches the incoming pod's namespace labels",
                vec![
                    make_pod("guard")
                        .namespace("other")
                        .node("n3")
                        .aff(Aff::default().anti(ns_sel(
                            term(HOST, "web"),
                            json!({"matchLabels": {"team": "web"}}),
                        ))),
                ],
                p().label("app", "web"),
                Some(["", "", "E", ""]),
            )
        },
        FilterCase {
            namespaces: vec![("default", json!({"team": "db"}))],
            ..case(
                "an existing pod's namespace selector not matching the incoming pod's namespace",
                vec![
                    make_pod("guard")
                        .namespace("other")
                        .node("n3")
                        .aff(Aff::default().anti(ns_sel(
                            term(HOST, "web"),
                            json!({"matchLabels": {"team": "web"}}),
                        ))),
                ],
                p().label("app", "web"),
                None,
            )
        },
    ];
    run_filter_cases(cases).await;
}

#[tokio::test]
async fn filter_without_pre_filter_state_is_an_error() {
    let env = Env::new(json!({}), &nodes(), &[], &[]);
    let n = env.handle.snapshot().list()[0].clone();
    let s = env
        .pl
        .filter(&CycleState::new(), &make_pod("p").build(), &n);
    assert!(s.is_error(), "{s:?}");
    assert_eq!(
        s.message(),
        "reading \"PreFilterInterPodAffinity\" from cycleState: not found"
    );
    let mut st = CycleState::new();
    let p = make_pod("p").build();
    assert!(env.pl.add_pod(&mut st, &p, &p, &n).is_error());
    assert!(env.pl.remove_pod(&mut st, &p, &p, &n).is_error());
}

// ---------------------------------------------------------------------------
// AddPod / RemovePod.

fn counts(state: &CycleState) -> (TopologyCounts, TopologyCounts, TopologyCounts) {
    let s: &PreFilterState = state.read(&PRE_FILTER_KEY).unwrap();
    (
        s.existing_anti_affinity.clone(),
        s.affinity.clone(),
        s.anti_affinity.clone(),
    )
}

#[tokio::test]
async fn add_and_remove_pod_match_a_fresh_pre_filter() {
    let nodes = nodes();
    let base = vec![
        db("db1", "n1").build(),
        make_pod("c1").label("app", "cache").node("n2").build(),
    ];
    // The incoming pod: affinity to db (zone), anti-affinity to cache
    // (hostname) and to batch (zone); labelled web.
    let incoming = make_pod("p")
        .label("app", "web")
        .aff(
            Aff::default()
                .req(term(ZONE, "db"))
                .anti(term(HOST, "cache"))
                .anti(term(ZONE, "batch")),
        )
        .build();
    let candidates: Vec<(&str, PodInfo)> = vec![
        ("a db pod in the other zone", db("db2", "n3").build()),
        ("a second db pod in the same zone", db("db2", "n2").build()),
        (
            "a db pod on a node without the zone",
            db("db2", "n4").build(),
        ),
        (
            "a cache pod (hostname anti-affinity)",
            make_pod("c2").label("app", "cache").node("n3").build(),
        ),
        (
            "a batch pod (zone anti-affinity)",
            make_pod("b1").label("app", "batch").node("n1").build(),
        ),
        (
            "a pod whose anti-affinity rejects the incoming pod",
            make_pod("guard")
                .node("n3")
                .aff(Aff::default().anti(term(ZONE, "web")))
                .build(),
        ),
        (
            "a pod whose anti-affinity rejects the incoming pod, hostname",
            make_pod("guard")
                .node("n2")
                .aff(Aff::default().anti(term(HOST, "web")))
                .build(),
        ),
        (
            "a pod matching nothing",
            make_pod("x").label("app", "other").node("n1").build(),
        ),
        (
            "a pod in another namespace",
            db("db2", "n3").namespace("other").build(),
        ),
    ];
    for (name, extra) in candidates {
        let mut with = base.clone();
        with.push(extra.clone());
        let env = Env::new(json!({}), &nodes, &base, &[]);
        let node_name = extra.node_name.clone().unwrap();

        // AddPod on the state computed without the pod...
        let mut added = env.pre_filter(&incoming).await.unwrap();
        let before = counts(&added);
        let mut copy = added.clone();
        let target = snapshot(&nodes, &with).get(&node_name).unwrap().clone();
        assert!(
            env.pl
                .add_pod(&mut added, &incoming, &extra, &target)
                .is_success()
        );
        // ... leaves clones alone ...
        assert_eq!(counts(&copy), before, "{name}: clone changed");
        // ... and equals a PreFilter with the pod.
        env.set_pods(&nodes, &with);
        let fresh = env.pre_filter(&incoming).await.unwrap();
        assert_eq!(counts(&added), counts(&fresh), "{name}: add");
        assert_eq!(
            env.filter_all(&added, &incoming),
            env.filter_all(&fresh, &incoming),
            "{name}: add verdicts"
        );

        // RemovePod on the state computed with the pod equals a PreFilter
        // without it.
        let mut removed = fresh.clone();
        assert!(
            env.pl
                .remove_pod(&mut removed, &incoming, &extra, &target)
                .is_success()
        );
        env.set_pods(&nodes, &base);
        let fresh = env.pre_filter(&incoming).await.unwrap();
        assert_eq!(counts(&removed), counts(&fresh), "{name}: remove");
        assert_eq!(counts(&removed), before, "{name}: remove");
        assert_eq!(
            env.filter_all(&removed, &incoming),
            env.filter_all(&fresh, &incoming),
            "{name}: remove verdicts"
        );

        // Removing from the copy what it never had leaves a count to
        // match, not a crash; adding it back restores the state.
        assert!(
            env.pl
                .remove_pod(&mut copy, &incoming, &extra, &target)
                .is_success()
        );
        assert!(
            env.pl
                .add_pod(&mut copy, &incoming, &extra, &target)
                .is_success()
        );
        assert_eq!(counts(&copy), before, "{name}: remove then add");
    }
}

#[tokio::test]
async fn removing_the_only_match_changes_the_verdicts() {
    // Preemption's view: removing the guard lets the pod in; removing the
    // only db pod makes the first-pod exception apply.
    let nodes = nodes();
    let guard = make_pod("guard")
        .node("n1")
        .aff(Aff::default().anti(term(ZONE, "web")))
        .build();
    let env = Env::new(json!({}), &nodes, std::slice::from_ref(&guard), &[]);
    let web = make_pod("p").label("app", "web").build();
    let mut st = env.pre_filter(&web).await.unwrap();
    assert_eq!(env.filter_all(&st, &web), ["E", "E", "", ""]);
    let n1 = env.handle.snapshot().get("n1").unwrap().clone();
    assert!(env.pl.remove_pod(&mut st, &web, &guard, &n1).is_success());
    assert_eq!(env.filter_all(&st, &web), ["", "", "", ""]);

    let db1 = db("db1", "n1").build();
    env.set_pods(&nodes, std::slice::from_ref(&db1));
    let p = make_pod("p")
        .label("app", "db")
        .aff(Aff::default().req(term(HOST, "db")))
        .build();
    let mut st = env.pre_filter(&p).await.unwrap();
    assert_eq!(env.filter_all(&st, &p), ["", "A", "A", "A"]);
    assert!(env.pl.remove_pod(&mut st, &p, &db1, &n1).is_success());
    assert_eq!(env.filter_all(&st, &p), ["", "", "", ""]);
}

// ---------------------------------------------------------------------------
// Scoring.

struct ScoreCase {
    name: &'static str,
    args: Value,
    existing: Vec<PodBuilder>,
    pod: PodBuilder,
    namespaces: Vec<(&'static str, Value)>,
    /// Raw and normalized scores of n1..n5; `None`: PreScore skips.
    want: Option<([i64; 5], [i64; 5])>,
}

fn score_case(
    name: &'static str,
    existing: Vec<PodBuilder>,
    pod: PodBuilder,
    want: Option<([i64; 5], [i64; 5])>,
) -> ScoreCase {
    ScoreCase {
        name,
        args: json!({}),
        existing,
        pod,
        namespaces: vec![],
        want,
    }
}

async fn run_score_cases(cases: Vec<ScoreCase>) {
    for c in cases {
        let pods: Vec<PodInfo> = c.existing.iter().map(PodBuilder::build).collect();
        let env = Env::new(c.args.clone(), &nodes_and_bare(), &pods, &c.namespaces);
        let got = env.scores(&c.pod.build()).await;
        assert_eq!(
            got,
            c.want.map(|(r, n)| (r.to_vec(), n.to_vec())),
            "{}",
            c.name
        );
    }
}

#[tokio::test]
async fn preferred_terms_of_the_incoming_pod() {
    let p = || make_pod("p");
    run_score_cases(vec![
        score_case(
            "no terms anywhere: PreScore skips",
            vec![db("db1", "n1")],
            p(),
            None,
        ),
        score_case(
            "preferred affinity adds its weight to the domains of matches",
            vec![db("db1", "n1")],
            p().aff(Aff::default().pref(5, term(ZONE, "db"))),
            Some(([5, 5, 0, 0, 0], [100, 100, 0, 0, 0])),
        ),
        score_case(
            "preferred anti-affinity subtracts its weight",
            vec![db("db1", "n1")],
            p().aff(Aff::default().pref_anti(5, term(ZONE, "db"))),
            Some(([-5, -5, 0, 0, 0], [0, 0, 100, 100, 100])),
        ),
        score_case(
            "every matching pod counts",
            vec![db("db1", "n1"), db("db2", "n1"), db("db3", "n3")],
            p().aff(Aff::default().pref(2, term(ZONE, "db"))),
            Some(([4, 4, 2, 0, 0], [100, 100, 50, 0, 0])),
        ),
        score_case(
            "affinity and anti-affinity over two keys",
            vec![
                db("db1", "n1"),
                make_pod("c1").label("app", "cache").node("n1"),
                make_pod("c2").label("app", "cache").node("n3"),
            ],
            p().aff(
                Aff::default()
                    .pref(8, term(ZONE, "db"))
                    .pref_anti(3, term(HOST, "cache")),
            ),
            // min -3, max 8: (8+3)/11, (5+3)/11 = 72.7, (0+3)/11 = 27.3
            Some(([5, 8, -3, 0, 0], [72, 100, 0, 27, 27])),
        ),
        score_case(
            "weights summing to zero still score (all equal)",
            vec![db("db1", "n1")],
            p().aff(
                Aff::default()
                    .pref(5, term(ZONE, "db"))
                    .pref_anti(5, term(ZONE, "db")),
            ),
            Some(([0, 0, 0, 0, 0], [0, 0, 0, 0, 0])),
        ),
        score_case(
            "matches on a node without the key count nowhere",
            vec![db("db1", "n4")],
            p().aff(Aff::default().pref(5, term(ZONE, "db"))),
            None,
        ),
        score_case(
            "a hostname term scores the node without a zone",
            vec![db("db1", "n4")],
            p().aff(Aff::default().pref(5, term(HOST, "db"))),
            Some(([0, 0, 0, 5, 0], [0, 0, 0, 100, 0])),
        ),
        score_case(
            "pods on a node without labels are left out",
            vec![db("db1", "n5")],
            p().aff(Aff::default().pref(5, term(HOST, "db"))),
            None,
        ),
        score_case(
            "required terms of the incoming pod do not score",
            vec![db("db1", "n1")],
            p().aff(Aff::default().req(term(ZONE, "db")).anti(term(HOST, "db"))),
            None,
        ),
        score_case(
            "preferred terms select the pod's own namespace by default",
            vec![db("db1", "n1").namespace("other")],
            p().aff(Aff::default().pref(5, term(ZONE, "db"))),
            None,
        ),
        score_case(
            "a preferred term's namespaces",
            vec![db("db1", "n1").namespace("other")],
            p().aff(Aff::default().pref(5, in_ns(term(ZONE, "db"), &["other"]))),
            Some(([5, 5, 0, 0, 0], [100, 100, 0, 0, 0])),
        ),
        ScoreCase {
            namespaces: vec![("other", json!({"team": "a"}))],
            ..score_case(
                "a preferred term's namespace selector",
                vec![db("db1", "n1").namespace("other")],
                p().aff(Aff::default().pref_anti(
                    5,
                    ns_sel(term(ZONE, "db"), json!({"matchLabels": {"team": "a"}})),
                )),
                Some(([-5, -5, 0, 0, 0], [0, 0, 100, 100, 100])),
            )
        },
        score_case(
            "a preferred term's empty namespace selector",
            vec![db("db1", "n3").namespace("other")],
            p().aff(Aff::default().pref(5, ns_sel(term(ZONE, "db"), json!({})))),
            Some(([0, 0, 5, 0, 0], [0, 0, 100, 0, 0])),
        ),
    ])
    .await;
}

#[tokio::test]
async fn terms_of_existing_pods() {
    let web = || make_pod("p").label("app", "web");
    // Toward app=web: a required affinity on n1 (zone) and a preferred
    // anti-affinity of weight 5 on n3 (zone).
    let toward_web = || {
        vec![
            make_pod("fan")
                .node("n1")
                .aff(Aff::default().req(term(ZONE, "web"))),
            make_pod("hater")
                .node("n3")
                .aff(Aff::default().pref_anti(5, term(ZONE, "web"))),
        ]
    };
    let weighted = |name, weight: i32, want| ScoreCase {
        args: json!({"hardPodAffinityWeight": weight}),
        ..score_case(name, toward_web(), web(), want)
    };
    run_score_cases(vec![
        score_case(
            "an existing pod's preferred affinity toward the pod",
            vec![
                make_pod("fan")
                    .node("n3")
                    .aff(Aff::default().pref(7, term(HOST, "web"))),
            ],
            web(),
            Some(([0, 0, 7, 0, 0], [0, 0, 100, 0, 0])),
        ),
        score_case(
            "an existing pod's preferred anti-affinity toward the pod",
            vec![
                make_pod("hater")
                    .node("n1")
                    .aff(Aff::default().pref_anti(4, term(ZONE, "web"))),
            ],
            web(),
            Some(([-4, -4, 0, 0, 0], [0, 0, 100, 100, 100])),
        ),
        score_case(
            "an existing pod's preferred terms not matching the pod",
            vec![
                make_pod("fan")
                    .node("n3")
                    .aff(Aff::default().pref(7, term(HOST, "db"))),
            ],
            web(),
            None,
        ),
        score_case(
            "an existing pod's required anti-affinity does not score",
            vec![
                make_pod("guard")
                    .node("n3")
                    .aff(Aff::default().anti(term(HOST, "web"))),
            ],
            web(),
            None,
        ),
        // min -5, max w: nodes scoring 0 get 5/(w+5).
        weighted(
            "required affinity scores hardPodAffinityWeight 1 (the default)",
            1,
            Some(([1, 1, -5, 0, 0], [100, 100, 0, 83, 83])),
        ),
        weighted(
            "hardPodAffinityWeight 10",
            10,
            Some(([10, 10, -5, 0, 0], [100, 100, 0, 33, 33])),
        ),
        weighted(
            "hardPodAffinityWeight 0 leaves required terms out",
            0,
            Some(([0, 0, -5, 0, 0], [100, 100, 0, 100, 100])),
        ),
        ScoreCase {
            args: json!({"hardPodAffinityWeight": 0}),
            ..score_case(
                "hardPodAffinityWeight 0 and nothing else: PreScore skips",
                vec![
                    make_pod("fan")
                        .node("n1")
                        .aff(Aff::default().req(term(ZONE, "web"))),
                ],
                web(),
                None,
            )
        },
        ScoreCase {
            namespaces: vec![("default", json!({"team": "web"}))],
            ..score_case(
                "an existing pod's namespace selector matches the pod's namespace labels",
                vec![
                    make_pod("fan")
                        .namespace("other")
                        .node("n3")
                        .aff(Aff::default().pref(
                            7,
                            ns_sel(term(HOST, "web"), json!({"matchLabels": {"team": "web"}})),
                        )),
                ],
                web(),
                Some(([0, 0, 7, 0, 0], [0, 0, 100, 0, 0])),
            )
        },
        score_case(
            "an existing pod's namespace selector not matching",
            vec![
                make_pod("fan")
                    .namespace("other")
                    .node("n3")
                    .aff(Aff::default().pref(
                        7,
                        ns_sel(term(HOST, "web"), json!({"matchLabels": {"team": "web"}})),
                    )),
            ],
            web(),
            None,
        ),
        score_case(
            "an existing pod's terms select its own namespace by default",
            vec![
                make_pod("fan")
                    .namespace("other")
                    .node("n3")
                    .aff(Aff::default().pref(7, term(HOST, "web"))),
            ],
            web(),
            None,
        ),
        score_case(
            "both directions add up",
            vec![
                make_pod("fan")
                    .label("app", "db")
                    .node("n3")
                    .aff(Aff::default().pref(7, term(HOST, "web"))),
            ],
            web().aff(Aff::default().pref(2, term(ZONE, "db"))),
            Some(([0, 0, 9, 0, 0], [0, 0, 100, 0, 0])),
        ),
    ])
    .await;
}

#[tokio::test]
async fn ignore_preferred_terms_of_existing_pods() {
    let web = || make_pod("p").label("app", "web");
    let fans = || {
        vec![
            make_pod("fan")
                .node("n3")
                .aff(Aff::default().pref(7, term(HOST, "web"))),
            make_pod("follower")
                .node("n1")
                .aff(Aff::default().req(term(HOST, "web"))),
        ]
    };
    let ignoring = |name, pod: PodBuilder, want| ScoreCase {
        args: json!({"ignorePreferredTermsOfExistingPods": true}),
        ..score_case(name, fans(), pod, want)
    };
    run_score_cases(vec![
        score_case(
            "by default existing pods' terms score",
            fans(),
            web(),
            Some(([1, 0, 7, 0, 0], [14, 0, 100, 0, 0])),
        ),
        ignoring(
            "ignored when the pod has no preferred terms: PreScore skips",
            web(),
            None,
        ),
        ignoring(
            "ignored also when the pod has only required terms",
            web().aff(Aff::default().req(term(ZONE, "db"))),
            None,
        ),
        ignoring(
            "kept when the pod has preferred terms of its own",
            web().aff(Aff::default().pref(1, term(ZONE, "nothing"))),
            Some(([1, 0, 7, 0, 0], [14, 0, 100, 0, 0])),
        ),
        ignoring(
            "kept when the pod has preferred anti-affinity of its own",
            web().aff(Aff::default().pref_anti(1, term(ZONE, "nothing"))),
            Some(([1, 0, 7, 0, 0], [14, 0, 100, 0, 0])),
        ),
    ])
    .await;
}

#[test]
fn normalization() {
    let cases: Vec<(&str, Vec<i64>, Vec<i64>)> = vec![
        ("positive", vec![10, 20, 30], vec![0, 50, 100]),
        ("around zero", vec![-10, 0, 10], vec![0, 50, 100]),
        ("all negative", vec![-3, -1], vec![0, 100]),
        ("truncated, not rounded", vec![0, 2, 3], vec![0, 66, 100]),
        ("all equal", vec![5, 5], vec![0, 0]),
        ("one node", vec![7], vec![0]),
        ("none", vec![], vec![]),
    ];
    for (name, raw, want) in cases {
        let mut scores: Vec<NodeScore<'_>> = raw
            .iter()
            .map(|s| NodeScore {
                name: "n",
                score: *s,
            })
            .collect();
        normalize(&mut scores);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            want,
            "{name}"
        );
    }
}

#[tokio::test]
async fn score_and_normalize_need_the_pre_score_state() {
    let env = Env::new(json!({}), &nodes(), &[], &[]);
    let n = env.handle.snapshot().list()[0].clone();
    let p = make_pod("p").build();
    let st = CycleState::new();
    assert!(env.pl.score(&st, &p, &n).unwrap_err().is_error());
    let mut scores = vec![NodeScore {
        name: "n1",
        score: 3,
    }];
    assert!(env.pl.normalize_score(&st, &p, &mut scores).is_error());
    // An empty state leaves the scores as they are.
    let mut st = CycleState::new();
    st.write(&PRE_SCORE_KEY, PreScoreState(Arc::default()));
    assert!(env.pl.normalize_score(&st, &p, &mut scores).is_success());
    assert_eq!(scores[0].score, 3);
}

// ---------------------------------------------------------------------------
// Events and hints.

#[test]
fn registered_events() {
    let env = Env::new(json!({}), &[], &[], &[]);
    let regs = env.pl.events_to_register().unwrap();
    let events: Vec<ClusterEvent> = regs.iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            ClusterEvent::new(
                EventResource::AssignedPod,
                ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE
            ),
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL
            ),
        ]
    );
    assert!(regs.iter().all(|r| r.hint.is_some()));
}

/// A hint case: name, pending pod, object before and after, the verdict.
type HintCase<'a, P> = (
    &'a str,
    P,
    Option<EventObject>,
    Option<EventObject>,
    QueueingHint,
);

fn pod_obj(b: PodBuilder) -> Option<EventObject> {
    Some(EventObject::Pod(Arc::new(b.build())))
}

fn node_obj(labels: &[(&str, &str)]) -> Option<EventObject> {
    let mut b = make_node("node-a");
    for (k, v) in labels {
        b = b.label(k, v);
    }
    Some(EventObject::Node(Arc::new(b.build())))
}

#[test]
fn pod_change_hints() {
    let in_sel = |values: &[&str]| json!({"matchExpressions": [{"key": "service", "operator": "In", "values": values}]});
    let affinity = make_pod("p")
        .aff(Aff::default().req(term_sel("region", in_sel(&["securityscan", "value2"]))))
        .build();
    let anti = make_pod("p")
        .aff(Aff::default().anti(term_sel("region", in_sel(&["securityscan", "value2"]))))
        .build();
    let exists = |k: &str| json!({"matchExpressions": [{"key": k, "operator": "Exists"}]});
    let two_terms = make_pod("p")
        .aff(
            Aff::default()
                .req(term_sel(HOST, exists("aaa")))
                .req(term_sel(HOST, exists("bbb"))),
        )
        .build();
    let on = |labels: &[(&str, &str)]| {
        let mut b = make_pod("x").node("fake-node");
        for (k, v) in labels {
            b = b.label(k, v);
        }
        b
    };
    let unscheduled = || make_pod("x").label("service", "securityscan");
    use QueueingHint::{Queue, Skip};
    let cases: Vec<HintCase<&PodInfo>> = vec![
        (
            "add a pod matching the affinity",
            &affinity,
            None,
            pod_obj(on(&[("service", "securityscan")])),
            Queue,
        ),
        (
            "add an unscheduled pod",
            &affinity,
            None,
            pod_obj(unscheduled()),
            Skip,
        ),
        (
            "add a pod not matching the affinity",
            &affinity,
            None,
            pod_obj(on(&[("aaa", "a")])),
            Skip,
        ),
        (
            "update a pod to match the affinity",
            &affinity,
            pod_obj(on(&[("aaa", "a")])),
            pod_obj(on(&[("service", "securityscan")])),
            Queue,
        ),
        (
            "update a pod matching the affinity before and after",
            &affinity,
            pod_obj(on(&[("service", "value2")])),
            pod_obj(on(&[("service", "securityscan")])),
            Skip,
        ),
        (
            "update an unscheduled pod",
            &affinity,
            pod_obj(unscheduled()),
            pod_obj(unscheduled()),
            Skip,
        ),
        (
            "update a pod to stop matching the affinity",
            &affinity,
            pod_obj(on(&[("service", "securityscan")])),
            pod_obj(on(&[("aaa", "a")])),
            Skip,
        ),
        (
            "update a pod to stop matching one of two terms",
            &two_terms,
            pod_obj(on(&[("aaa", "a")])),
            pod_obj(on(&[("service", "securityscan")])),
            Skip,
        ),
        (
            "update a pod to match both terms",
            &two_terms,
            pod_obj(on(&[("aaa", "a")])),
            pod_obj(on(&[("aaa", ""), ("bbb", "")])),
            Queue,
        ),
        (
            "update a pod to stop matching the anti-affinity",
            &anti,
            pod_obj(on(&[("service", "securityscan")])),
            pod_obj(on(&[("service", "aaaa")])),
            Queue,
        ),
        (
            "update a pod to start matching the anti-affinity",
            &anti,
            pod_obj(on(&[("service", "bbb")])),
            pod_obj(on(&[("service", "securityscan")])),
            Skip,
        ),
        (
            "delete a pod not matching the anti-affinity",
            &anti,
            pod_obj(on(&[("aaa", "a")])),
            None,
            Skip,
        ),
        (
            "delete a pod matching the anti-affinity",
            &anti,
            pod_obj(on(&[("service", "securityscan")])),
            None,
            Queue,
        ),
        (
            "delete an unscheduled pod",
            &anti,
            pod_obj(unscheduled()),
            None,
            Skip,
        ),
        (
            "add a pod in another namespace",
            &affinity,
            None,
            pod_obj(on(&[("service", "securityscan")]).namespace("other")),
            Skip,
        ),
    ];
    for (name, pod, old, new, want) in cases {
        assert_eq!(
            pod_change_hint(pod, old.as_ref(), new.as_ref()),
            Ok(want),
            "{name}"
        );
    }
    assert!(pod_change_hint(&affinity, None, None).is_err());
}

#[test]
fn node_change_hints() {
    let affinity = |key: &str| {
        make_pod("p")
            .aff(Aff::default().req(term_sel(
                key,
                json!({"matchExpressions": [{"key": "service", "operator": "In", "values": ["securityscan", "value2"]}]}),
            )))
            .build()
    };
    let anti = make_pod("p")
        .aff(Aff::default().anti(term_sel(ZONE, json!({"matchLabels": {"another": "label"}}))))
        .build();
    let zone1: &[(&str, &str)] = &[(ZONE, "zone1")];
    use QueueingHint::{Queue, Skip};
    let cases: Vec<HintCase<PodInfo>> = vec![
        // affinity
        (
            "add a node with the affinity's key",
            affinity(ZONE),
            None,
            node_obj(zone1),
            Queue,
        ),
        (
            "add a node without the affinity's key",
            affinity("region"),
            None,
            node_obj(zone1),
            Skip,
        ),
        (
            "update a label other than the key",
            affinity(ZONE),
            node_obj(&[("aaa", "a")]),
            node_obj(&[("aaa", "b")]),
            Skip,
        ),
        (
            "add an unrelated label next to the key",
            affinity(ZONE),
            node_obj(zone1),
            node_obj(&[(ZONE, "zone1"), ("unrelated-label", "unrelated")]),
            Skip,
        ),
        (
            "move to another domain",
            affinity(ZONE),
            node_obj(zone1),
            node_obj(&[(ZONE, "zone2")]),
            Queue,
        ),
        (
            "get the affinity's key",
            affinity(ZONE),
            node_obj(&[("aaa", "a")]),
            node_obj(zone1),
            Queue,
        ),
        (
            "lose the affinity's key",
            affinity(ZONE),
            node_obj(zone1),
            node_obj(&[("aaa", "a")]),
            Skip,
        ),
        // anti-affinity
        (
            "add a node with the anti-affinity's key",
            anti.clone(),
            None,
            node_obj(zone1),
            Queue,
        ),
        (
            "add a node without the anti-affinity's key",
            anti.clone(),
            None,
            node_obj(&[]),
            Queue,
        ),
        (
            "add an unrelated label next to the anti-affinity's key",
            anti.clone(),
            node_obj(zone1),
            node_obj(&[(ZONE, "zone1"), ("unrelated-label", "unrelated")]),
            Skip,
        ),
        (
            "move to another anti-affinity domain",
            anti.clone(),
            node_obj(zone1),
            node_obj(&[(ZONE, "zone2")]),
            Queue,
        ),
        (
            "get the anti-affinity's key",
            anti.clone(),
            node_obj(&[("aaa", "a")]),
            node_obj(zone1),
            Skip,
        ),
        (
            "lose the anti-affinity's key",
            anti.clone(),
            node_obj(zone1),
            node_obj(&[("aaa", "a")]),
            Queue,
        ),
        // neither
        (
            "a pod without required terms",
            make_pod("p").build(),
            None,
            node_obj(zone1),
            Skip,
        ),
    ];
    for (name, pod, old, new, want) in cases {
        assert_eq!(
            node_change_hint(&pod, old.as_ref(), new.as_ref()),
            Ok(want),
            "{name}"
        );
    }
    assert!(node_change_hint(&anti, node_obj(zone1).as_ref(), None).is_err());
}

// ---------------------------------------------------------------------------
// Registration.

#[test]
fn registered_under_its_upstream_name() {
    let registry = crate::plugins::in_tree_registry();
    let factory = registry.get("InterPodAffinity").expect("registered");
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let plugin = factory(Some(&json!({"hardPodAffinityWeight": 5})), "args", &handle).unwrap();
    assert_eq!(plugin.name(), "InterPodAffinity");
    assert!(
        plugin
            .clone()
            .as_pre_filter()
            .is_some_and(|p| p.extensions().is_some())
    );
    assert!(plugin.clone().as_filter().is_some());
    assert!(plugin.clone().as_pre_score().is_some());
    assert!(
        plugin
            .clone()
            .as_score()
            .is_some_and(|p| p.score_extensions().is_some())
    );
    let err = factory(
        Some(&json!({"hardPodAffinityWeight": 101})),
        "args",
        &handle,
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"
    );
}

// ---------------------------------------------------------------------------
// Tallies kept across cycles.

/// One plugin kept across a stream of placements and removals (its tallies
/// updated only where nodes changed) agrees at every step with a new plugin
/// tallying from scratch: PreFilter counts, verdicts, raw and normalized
/// scores, with the incoming pods' terms and the existing pods' required
/// anti-affinity and preferred terms toward them.
#[tokio::test]
async fn tallies_kept_across_cycles_match_a_fresh_tally() {
    let mut rng = crate::rng::FastRng::new(11);
    let nodes = nodes_and_bare();
    let kept = Env::new(json!({}), &nodes, &[], &[]);
    let mut snap = (*kept.handle.snapshot()).clone();
    let incoming = [
        make_pod("p")
            .label("app", "web")
            .aff(
                Aff::default()
                    .req(term(ZONE, "db"))
                    .anti(term(HOST, "cache"))
                    .pref(5, term(ZONE, "cache"))
                    .pref_anti(3, term(HOST, "web")),
            )
            .build(),
        make_pod("q").label("app", "web").build(),
        make_pod("r")
            .label("app", "db")
            .aff(Aff::default().anti(term(ZONE, "db")))
            .build(),
    ];
    let mut placed: Vec<(String, String)> = Vec::new();
    for step in 0..300 {
        if placed.is_empty() || rng.below(4) != 0 {
            let node = format!("n{}", 1 + rng.below(5));
            let app = ["db", "cache", "web"][rng.below(3) as usize];
            let mut b = make_pod(&format!("e{step}")).label("app", app).node(&node);
            b = match rng.below(4) {
                0 => b.aff(Aff::default().anti(term(ZONE, "web"))),
                1 => b.aff(Aff::default().pref(7, term(HOST, "web"))),
                2 => b.aff(Aff::default().req(term(ZONE, "web"))),
                _ => b,
            };
            let pod = b.build();
            placed.push((node, pod.uid.to_string()));
            assert!(snap.assume_pod(Arc::new(pod)));
        } else {
            let (node, uid) = placed.swap_remove(rng.below(placed.len() as u64) as usize);
            assert!(snap.remove_pod(&node, &uid));
        }
        if step % 5 != 0 {
            continue;
        }
        kept.handle.set_snapshot(Arc::new(snap.clone()));
        let fresh = Env::new(json!({}), &[], &[], &[]);
        fresh.handle.set_snapshot(Arc::new(snap.clone()));
        for pod in &incoming {
            let (a, b) = (kept.pre_filter(pod).await, fresh.pre_filter(pod).await);
            assert_eq!(a.is_some(), b.is_some(), "step {step}");
            if let (Some(a), Some(b)) = (&a, &b) {
                assert_eq!(counts(a), counts(b), "step {step}");
                assert_eq!(
                    kept.filter_all(a, pod),
                    fresh.filter_all(b, pod),
                    "step {step}"
                );
            }
            assert_eq!(
                kept.scores(pod).await,
                fresh.scores(pod).await,
                "step {step}"
            );
        }
    }
}
