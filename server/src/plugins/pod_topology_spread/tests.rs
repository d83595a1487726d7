//! PodTopologySpread's behaviour, table by table: Filter verdicts, the
//! PreFilter state and its AddPod/RemovePod updates, scores, defaulting and
//! queueing hints. Expected values follow upstream's (its scoring table's
//! cases are reproduced with their expected scores).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::filtering::{CriticalPath, CriticalPaths, PRE_FILTER_KEY, PreFilterState};
use super::scoring::{PRE_SCORE_KEY, topology_normalizing_weight};
use super::*;
use crate::cache::{KubeObject, NodeInfo, ObjectKind, Snapshot};
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{
    Code, CycleState, FilterPlugin, NodeScore, Parallelizer, PluginArgs, PreFilterExtensions,
    PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use crate::testing::{NodeBuilder, PodBuilder, make_node, make_pod};

const ZONE: &str = "zone";
const HOST: &str = LABEL_HOSTNAME;
const DNS: &str = "DoNotSchedule";
const SA: &str = "ScheduleAnyway";

// ---------------------------------------------------------------- helpers

fn exists(key: &str) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": "Exists"}]})
}

/// A constraint; `extra` adds fields (minDomains, policies, matchLabelKeys).
fn tsc(max_skew: i32, key: &str, when: &str, selector: Option<Value>, extra: Value) -> Value {
    let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when});
    if let Some(s) = selector {
        c["labelSelector"] = s;
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c
}

fn hard(max_skew: i32, key: &str, selector: Value) -> Value {
    tsc(max_skew, key, DNS, Some(selector), json!({}))
}

fn soft(max_skew: i32, key: &str, selector: Value) -> Value {
    tsc(max_skew, key, SA, Some(selector), json!({}))
}

/// The incoming pod `p` with `labels` and `constraints`.
fn incoming(labels: &[(&str, &str)], constraints: Vec<Value>) -> PodBuilder {
    let mut b = make_pod("p");
    for (k, v) in labels {
        b = b.label(k, v);
    }
    if !constraints.is_empty() {
        b = b.spec("topologySpreadConstraints", Value::Array(constraints));
    }
    b
}

/// A pod bound to `node`.
fn bound(name: &str, node: &str, labels: &[(&str, &str)]) -> PodInfo {
    bound_in(name, "default", node, labels)
}

fn bound_in(name: &str, ns: &str, node: &str, labels: &[(&str, &str)]) -> PodInfo {
    let mut b = make_pod(name).namespace(ns).node(node);
    for (k, v) in labels {
        b = b.label(k, v);
    }
    b.build()
}

/// `b` with `metadata.<key>` set.
fn with_metadata(b: &PodBuilder, key: &str, v: Value) -> PodInfo {
    let mut obj = serde_json::to_value(b.object()).unwrap();
    obj["metadata"][key] = v;
    PodInfo::new(Arc::new(serde_json::from_value(obj).unwrap())).unwrap()
}

fn terminating(b: &PodBuilder) -> PodInfo {
    with_metadata(b, "deletionTimestamp", json!("2024-01-01T00:00:00Z"))
}

fn owned_by(
    b: &PodBuilder,
    api_version: &str,
    kind: &str,
    name: &str,
    controller: bool,
) -> PodInfo {
    with_metadata(
        b,
        "ownerReferences",
        json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": "owner-uid", "controller": controller}]),
    )
}

fn node(name: &str, labels: &[(&str, &str)]) -> NodeBuilder {
    let mut b = make_node(name).cpu("4").memory("8Gi");
    for (k, v) in labels {
        b = b.label(k, v);
    }
    b
}

/// node-a, node-b in zone1; node-x, node-y in zone2; each with its hostname.
fn four_nodes() -> Vec<NodeBuilder> {
    [
        ("node-a", "zone1"),
        ("node-b", "zone1"),
        ("node-x", "zone2"),
        ("node-y", "zone2"),
    ]
    .into_iter()
    .map(|(n, z)| node(n, &[(ZONE, z), (HOST, n)]))
    .collect()
}

fn snapshot(nodes: &[NodeBuilder], pods: &[PodInfo]) -> Snapshot {
    Snapshot::from_nodes(
        nodes
            .iter()
            .map(|b| {
                let spec = b.build();
                let mut info = NodeInfo::new(Arc::new(spec));
                for p in pods {
                    if p.node_name.as_deref() == Some(info.name()) {
                        info.add_pod(Arc::new(p.clone()));
                    }
                }
                info
            })
            .collect(),
    )
}

fn object(kind: ObjectKind, v: Value) -> KubeObject {
    KubeObject::from_json(kind, v).unwrap()
}

fn replica_set(name: &str, selector: Value) -> KubeObject {
    object(
        ObjectKind::ReplicaSet,
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"selector": selector}}),
    )
}

fn service(name: &str, selector: Option<Value>) -> KubeObject {
    let spec = match selector {
        Some(s) => json!({"selector": s}),
        None => json!({}),
    };
    object(
        ObjectKind::Service,
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
}

fn plugin(args: Value, objects: &[KubeObject]) -> PodTopologySpread {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    for o in objects {
        handle.objects().upsert(o.clone());
    }
    let args = PodTopologySpreadArgs::parse(Some(&args), "args").unwrap();
    PodTopologySpread::new(args, &handle).unwrap()
}

fn list_args(defaults: Vec<Value>) -> Value {
    json!({"defaultingType": "List", "defaultConstraints": defaults})
}

/// PreFilter then Filter on every node: `None` if PreFilter skipped, else
/// each node's name, code and message.
async fn filter_all(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Option<Vec<(String, Code, String)>> {
    let mut st = CycleState::new();
    let (result, s) = pl.pre_filter(&mut st, pod, snap.list()).await;
    assert!(result.is_none());
    if s.is_skip() {
        assert!(st.read(&PRE_FILTER_KEY).is_none(), "no state on Skip");
        return None;
    }
    assert!(s.is_success(), "{s:?}");
    Some(verdicts(pl, &st, pod, snap))
}

fn verdicts(
    pl: &PodTopologySpread,
    st: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Vec<(String, Code, String)> {
    snap.list()
        .iter()
        .map(|n| {
            let s = pl.filter(st, pod, n);
            (n.name().to_string(), s.code(), s.message())
        })
        .collect()
}

// ------------------------------------------------------------------ Filter

struct FilterCase {
    name: &'static str,
    args: Value,
    objects: Vec<KubeObject>,
    pod: PodInfo,
    nodes: Vec<NodeBuilder>,
    pods: Vec<PodInfo>,
    /// Per node: Some(code) after PreFilter; the whole list `None` for Skip.
    want: Option<Vec<(&'static str, Code)>>,
}

impl Default for FilterCase {
    fn default() -> Self {
        Self {
            name: "",
            args: json!({}),
            objects: Vec::new(),
            pod: make_pod("p").build(),
            nodes: four_nodes(),
            pods: Vec::new(),
            want: None,
        }
    }
}

use Code::{Success as OK, Unschedulable as NO, UnschedulableAndUnresolvable as NEVER};

fn all4(a: Code, b: Code, x: Code, y: Code) -> Option<Vec<(&'static str, Code)>> {
    Some(vec![
        ("node-a", a),
        ("node-b", b),
        ("node-x", x),
        ("node-y", y),
    ])
}

/// Three nodes in three zones; `z` in zone3 has the given extra labels and
/// taint.
fn three_zones(z_labels: &[(&str, &str)], taint: Option<&str>) -> Vec<NodeBuilder> {
    let mut z = node("node-z", &[(ZONE, "zone3"), (HOST, "node-z")]);
    for (k, v) in z_labels {
        z = z.label(k, v);
    }
    if let Some(effect) = taint {
        z = z.taint("dedicated", "gpu", effect);
    }
    vec![
        node(
            "node-a",
            &[(ZONE, "zone1"), (HOST, "node-a"), ("env", "prod")],
        ),
        node(
            "node-x",
            &[(ZONE, "zone2"), (HOST, "node-x"), ("env", "prod")],
        ),
        z,
    ]
}

fn three(a: Code, x: Code, z: Code) -> Option<Vec<(&'static str, Code)>> {
    Some(vec![("node-a", a), ("node-x", x), ("node-z", z)])
}

/// One matching pod in zone1 and one in zone2.
fn one_per_zone() -> Vec<PodInfo> {
    vec![
        bound("a1", "node-a", &[("foo", "")]),
        bound("x1", "node-x", &[("foo", "")]),
    ]
}

#[tokio::test]
async fn filter_verdicts() {
    let foo = || exists("foo");
    let zone_foo = |skew| incoming(&[("foo", "")], vec![hard(skew, ZONE, exists("foo"))]);
    let with_extra = |extra: Value| {
        incoming(
            &[("foo", "")],
            vec![tsc(1, ZONE, DNS, Some(exists("foo")), extra)],
        )
    };
    let cases = vec![
        FilterCase {
            name: "no existing pods",
            pod: zone_foo(1).build(),
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "3/2 across zones, maxSkew 1: the fuller zone is rejected",
            pod: zone_foo(1).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("a2", "node-a", &[("foo", "")]),
                bound("b1", "node-b", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
                bound("y2", "node-y", &[("foo", "")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "3/2 across zones, maxSkew 2: both zones fit",
            pod: zone_foo(2).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("a2", "node-a", &[("foo", "")]),
                bound("b1", "node-b", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
                bound("y2", "node-y", &[("foo", "")]),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "the incoming pod not matching its selector adds no skew",
            pod: incoming(&[("app", "db")], vec![hard(1, ZONE, json!({"matchLabels": {"app": "web"}}))]).build(),
            pods: vec![
                bound("a1", "node-a", &[("app", "web")]),
                bound("a2", "node-a", &[("app", "web")]),
                bound("x1", "node-x", &[("app", "web")]),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "matchLabels selector, incoming pod matching",
            pod: incoming(&[("app", "web")], vec![hard(1, ZONE, json!({"matchLabels": {"app": "web"}}))]).build(),
            pods: vec![
                bound("a1", "node-a", &[("app", "web")]),
                bound("a2", "node-a", &[("app", "web")]),
                bound("x1", "node-x", &[("app", "web")]),
                bound("x2", "node-x", &[("app", "db")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "In expression selector",
            pod: incoming(&[("app", "web")], vec![hard(1, ZONE, json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}))]).build(),
            pods: vec![
                bound("a1", "node-a", &[("app", "api")]),
                bound("b1", "node-b", &[("app", "web")]),
                bound("x1", "node-x", &[("app", "db")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "existing pods in another namespace do not count",
            pod: zone_foo(1).build(),
            pods: vec![
                bound_in("a1", "other", "node-a", &[("foo", "")]),
                bound_in("a2", "other", "node-a", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
            ],
            want: all4(OK, OK, NO, NO),
            ..Default::default()
        },
        FilterCase {
            name: "terminating pods do not count",
            pod: zone_foo(1).build(),
            pods: vec![
                terminating(&make_pod("a1").node("node-a").label("foo", "")),
                terminating(&make_pod("a2").node("node-a").label("foo", "")),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "hostname domains",
            pod: incoming(&[("foo", "")], vec![hard(1, HOST, foo())]).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("x1", "node-x", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
            ],
            want: all4(NO, OK, NO, NO),
            ..Default::default()
        },
        FilterCase {
            name: "a node without the topology key is unresolvable, and its pods do not count",
            pod: zone_foo(1).build(),
            nodes: vec![
                node("node-a", &[(ZONE, "zone1")]),
                node("node-b", &[(ZONE, "zone1")]),
                node("node-x", &[(ZONE, "zone2")]),
                node("node-y", &[(HOST, "node-y")]),
            ],
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
                bound("y2", "node-y", &[("foo", "")]),
            ],
            want: all4(NO, NO, OK, NEVER),
            ..Default::default()
        },
        FilterCase {
            name: "two constraints: zone and hostname, spread 1/0/0/1",
            pod: incoming(&[("foo", "")], vec![hard(1, ZONE, foo()), hard(1, HOST, foo())]).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
            ],
            want: all4(NO, OK, OK, NO),
            ..Default::default()
        },
        FilterCase {
            name: "two constraints: a node lacking one key counts for neither",
            pod: incoming(&[("foo", "")], vec![hard(1, ZONE, foo()), hard(1, HOST, foo())]).build(),
            nodes: vec![
                node("node-a", &[(ZONE, "zone1"), (HOST, "node-a")]),
                node("node-b", &[(ZONE, "zone1"), (HOST, "node-b")]),
                node("node-x", &[(ZONE, "zone2"), (HOST, "node-x")]),
                node("node-y", &[(ZONE, "zone2")]),
            ],
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("y1", "node-y", &[("foo", "")]),
                bound("y2", "node-y", &[("foo", "")]),
                bound("y3", "node-y", &[("foo", "")]),
            ],
            want: all4(NO, NO, OK, NEVER),
            ..Default::default()
        },
        FilterCase {
            name: "minDomains above the number of domains: global minimum 0",
            pod: with_extra(json!({"minDomains": 3})).build(),
            pods: one_per_zone(),
            want: all4(NO, NO, NO, NO),
            ..Default::default()
        },
        FilterCase {
            name: "minDomains equal to the number of domains: the real minimum",
            pod: with_extra(json!({"minDomains": 2})).build(),
            pods: one_per_zone(),
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "minDomains unset is 1",
            pod: zone_foo(1).build(),
            pods: one_per_zone(),
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeAffinityPolicy Honor (default): nodes outside the nodeSelector do not count",
            pod: zone_foo(1).spec("nodeSelector", json!({"env": "prod"})).build(),
            nodes: three_zones(&[], None),
            pods: one_per_zone(),
            want: three(OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeAffinityPolicy Honor: nodes outside the required node affinity do not count",
            pod: zone_foo(1)
                .spec("affinity", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}]}}}))
                .build(),
            nodes: three_zones(&[], None),
            pods: one_per_zone(),
            want: three(OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeAffinityPolicy Ignore: every node counts",
            pod: with_extra(json!({"nodeAffinityPolicy": "Ignore"}))
                .spec("nodeSelector", json!({"env": "prod"}))
                .build(),
            nodes: three_zones(&[], None),
            pods: one_per_zone(),
            want: three(NO, NO, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeAffinityPolicy Honor with minDomains: excluded nodes' domains are not eligible",
            pod: with_extra(json!({"minDomains": 3}))
                .spec("nodeSelector", json!({"env": "prod"}))
                .build(),
            nodes: three_zones(&[], None),
            pods: one_per_zone(),
            want: three(NO, NO, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeTaintsPolicy Ignore (default): tainted nodes count",
            pod: zone_foo(1).build(),
            nodes: three_zones(&[], Some("NoSchedule")),
            pods: one_per_zone(),
            want: three(NO, NO, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeTaintsPolicy Honor: nodes with untolerated NoSchedule taints do not count",
            pod: with_extra(json!({"nodeTaintsPolicy": "Honor"})).build(),
            nodes: three_zones(&[], Some("NoSchedule")),
            pods: one_per_zone(),
            want: three(OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeTaintsPolicy Honor: nodes with untolerated NoExecute taints do not count",
            pod: with_extra(json!({"nodeTaintsPolicy": "Honor"})).build(),
            nodes: three_zones(&[], Some("NoExecute")),
            pods: one_per_zone(),
            want: three(OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeTaintsPolicy Honor: tolerated taints count",
            pod: with_extra(json!({"nodeTaintsPolicy": "Honor"}))
                .toleration("dedicated", "Exists", "", "NoSchedule")
                .build(),
            nodes: three_zones(&[], Some("NoSchedule")),
            pods: one_per_zone(),
            want: three(NO, NO, OK),
            ..Default::default()
        },
        FilterCase {
            name: "nodeTaintsPolicy Honor: PreferNoSchedule taints count",
            pod: with_extra(json!({"nodeTaintsPolicy": "Honor"})).build(),
            nodes: three_zones(&[], Some("PreferNoSchedule")),
            pods: one_per_zone(),
            want: three(NO, NO, OK),
            ..Default::default()
        },
        FilterCase {
            name: "matchLabelKeys: only pods of the same revision count",
            pod: incoming(
                &[("foo", ""), ("rev", "2")],
                vec![tsc(1, ZONE, DNS, Some(foo()), json!({"matchLabelKeys": ["rev"]}))],
            )
            .build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", ""), ("rev", "1")]),
                bound("a2", "node-a", &[("foo", ""), ("rev", "1")]),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "without matchLabelKeys every revision counts",
            pod: incoming(&[("foo", ""), ("rev", "2")], vec![hard(1, ZONE, foo())]).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", ""), ("rev", "1")]),
                bound("a2", "node-a", &[("foo", ""), ("rev", "1")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "matchLabelKeys on an empty selector: same-revision pods count",
            pod: incoming(
                &[("rev", "2")],
                vec![tsc(1, ZONE, DNS, Some(json!({})), json!({"matchLabelKeys": ["rev"]}))],
            )
            .build(),
            pods: vec![
                bound("a1", "node-a", &[("rev", "2")]),
                bound("a2", "node-a", &[("rev", "2")]),
                bound("x1", "node-x", &[("rev", "1")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "absent labelSelector matches nothing",
            pod: incoming(&[("foo", "")], vec![tsc(1, ZONE, DNS, None, json!({}))]).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("a2", "node-a", &[("foo", "")]),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "empty labelSelector counts no pods (as upstream)",
            pod: incoming(&[("foo", "")], vec![hard(1, ZONE, json!({}))]).build(),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("a2", "node-a", &[("foo", "")]),
                bound("a3", "node-a", &[]),
            ],
            want: all4(OK, OK, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "ScheduleAnyway only: PreFilter skips",
            pod: incoming(&[("foo", "")], vec![soft(1, ZONE, foo())]).build(),
            want: None,
            ..Default::default()
        },
        FilterCase {
            name: "no constraints, System defaulting (ScheduleAnyway only): PreFilter skips",
            pod: make_pod("p").label("foo", "").build(),
            objects: vec![service("svc", Some(json!({"foo": ""})))],
            want: None,
            ..Default::default()
        },
        FilterCase {
            name: "List defaults: selector from the owning ReplicaSet",
            args: list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            objects: vec![replica_set("rs1", exists("foo"))],
            pod: owned_by(&make_pod("p").label("foo", ""), "apps/v1", "ReplicaSet", "rs1", true),
            pods: vec![
                bound("a1", "node-a", &[("foo", "")]),
                bound("a2", "node-a", &[("foo", "")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "List defaults: selector from a Service",
            args: list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            objects: vec![service("web", Some(json!({"app": "web"})))],
            pod: make_pod("p").label("app", "web").build(),
            pods: vec![
                bound("a1", "node-a", &[("app", "web")]),
                bound("a2", "node-a", &[("app", "web")]),
                bound("x1", "node-x", &[("app", "db")]),
            ],
            want: all4(NO, NO, OK, OK),
            ..Default::default()
        },
        FilterCase {
            name: "List defaults with minDomains",
            args: list_args(vec![tsc(1, ZONE, DNS, None, json!({"minDomains": 3}))]),
            objects: vec![service("web", Some(json!({"app": "web"})))],
            pod: make_pod("p").label("app", "web").build(),
            pods: vec![
                bound("a1", "node-a", &[("app", "web")]),
                bound("x1", "node-x", &[("app", "web")]),
            ],
            want: all4(NO, NO, NO, NO),
            ..Default::default()
        },
        FilterCase {
            name: "List defaults: nothing selects the pod, PreFilter skips",
            args: list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            objects: vec![service("web", Some(json!({"app": "web"})))],
            pod: make_pod("p").label("app", "db").build(),
            want: None,
            ..Default::default()
        },
        FilterCase {
            name: "List defaults are not used when the pod has constraints",
            args: list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            objects: vec![service("web", Some(json!({"app": "web"})))],
            pod: incoming(&[("app", "web")], vec![soft(1, ZONE, exists("app"))]).build(),
            pods: vec![bound("a1", "node-a", &[("app", "web")])],
            want: None,
            ..Default::default()
        },
    ];
    for c in cases {
        let pl = plugin(c.args, &c.objects);
        let snap = snapshot(&c.nodes, &c.pods);
        let got = filter_all(&pl, &c.pod, &snap).await;
        let want = c.want.map(|w| {
            w.into_iter()
                .map(|(n, code)| {
                    let msg = match code {
                        NO => ERR_REASON_CONSTRAINTS_NOT_MATCH,
                        NEVER => ERR_REASON_NODE_LABEL_NOT_MATCH,
                        _ => "",
                    };
                    (n.to_string(), code, msg.to_string())
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(got, want, "{}", c.name);
    }
}

#[test]
fn reasons_are_upstreams() {
    assert_eq!(
        ERR_REASON_CONSTRAINTS_NOT_MATCH,
        "node(s) didn't match pod topology spread constraints"
    );
    assert_eq!(
        ERR_REASON_NODE_LABEL_NOT_MATCH,
        "node(s) didn't match pod topology spread constraints (missing required label)"
    );
}

#[tokio::test]
async fn filter_and_extensions_need_the_prefilter_state() {
    let pl = plugin(json!({}), &[]);
    let pod = incoming(&[("foo", "")], vec![hard(1, ZONE, exists("foo"))]).build();
    let snap = snapshot(&four_nodes(), &[]);
    let mut st = CycleState::new();
    let want = "reading \"PreFilterPodTopologySpread\" from cycleState: not found";
    let s = pl.filter(&st, &pod, &snap.list()[0]);
    assert_eq!((s.code(), s.message().as_str()), (Code::Error, want));
    let other = bound("o", "node-a", &[("foo", "")]);
    let s = pl.add_pod(&mut st, &pod, &other, &snap.list()[0]);
    assert_eq!((s.code(), s.message().as_str()), (Code::Error, want));
    let s = pl.remove_pod(&mut st, &pod, &other, &snap.list()[0]);
    assert_eq!((s.code(), s.message().as_str()), (Code::Error, want));
}

// -------------------------------------------------- PreFilter state, extensions

fn pre_filter_state(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> PreFilterState {
    pl.pre_filter_state(pod, snap.list())
        .expect("pod has DoNotSchedule constraints")
}

fn counts(s: &PreFilterState) -> Vec<HashMap<String, i64>> {
    s.counts
        .iter()
        .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
        .collect()
}

fn mins(s: &PreFilterState) -> Vec<i64> {
    s.critical_paths.iter().map(|p| p.0[0].match_num).collect()
}

fn domain_counts(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test]
async fn pre_filter_state_counts_domains_and_critical_paths() {
    let pl = plugin(json!({}), &[]);
    let pod = incoming(
        &[("foo", "")],
        vec![hard(1, ZONE, exists("foo")), hard(1, HOST, exists("foo"))],
    )
    .build();
    let mut nodes = four_nodes();
    nodes.push(node("node-z", &[(ZONE, "zone3")])); // no hostname: not counted
    let snap = snapshot(
        &nodes,
        &[
            bound("a1", "node-a", &[("foo", "")]),
            bound("a2", "node-a", &[("foo", "")]),
            bound("b1", "node-b", &[("foo", "")]),
            bound("x1", "node-x", &[("foo", "")]),
            bound("z1", "node-z", &[("foo", "")]),
        ],
    );
    let s = pre_filter_state(&pl, &pod, &snap);
    assert_eq!(
        counts(&s),
        vec![
            domain_counts(&[("zone1", 3), ("zone2", 1)]),
            domain_counts(&[("node-a", 2), ("node-b", 1), ("node-x", 1), ("node-y", 0)]),
        ]
    );
    assert_eq!(
        s.critical_paths[0],
        CriticalPaths([
            CriticalPath {
                value: "zone2".into(),
                match_num: 1
            },
            CriticalPath {
                value: "zone1".into(),
                match_num: 3
            },
        ])
    );
    assert_eq!(s.critical_paths[1].0[0].value.as_ref(), "node-y");
    assert_eq!(mins(&s), vec![1, 0]);
    assert_eq!(&*s.self_match, &[true, true]);
}

#[test]
fn critical_paths_track_two_domains_as_upstream() {
    let mut p = CriticalPaths::new();
    for (v, n) in [("a", 3), ("b", 1), ("c", 2)] {
        p.update(v, n);
    }
    let pairs = |p: &CriticalPaths| {
        p.0.iter()
            .map(|c| (c.value.to_string(), c.match_num))
            .collect::<Vec<_>>()
    };
    assert_eq!(pairs(&p), [("b".into(), 1), ("c".into(), 2)]);
    // A tracked domain growing past the other swaps them.
    p.update("b", 4);
    assert_eq!(pairs(&p), [("c".into(), 2), ("b".into(), 4)]);
    // Only two domains are tracked: "a" (3) is now the true minimum, as
    // upstream's structure accepts (preemption works on one node at a time).
    p.update("c", 5);
    assert_eq!(pairs(&p), [("b".into(), 4), ("c".into(), 5)]);
    // An untracked smaller domain takes the first place.
    p.update("d", 0);
    assert_eq!(pairs(&p), [("d".into(), 0), ("b".into(), 4)]);
    // A domain between the two takes the second.
    p.update("e", 2);
    assert_eq!(pairs(&p), [("d".into(), 0), ("e".into(), 2)]);
}

/// What to do to the PreFilter state of `base`.
enum Op {
    Add(Box<PodInfo>),
    Remove(&'static str, &'static str),
}

#[tokio::test]
async fn add_and_remove_pod_match_a_fresh_pre_filter() {
    let base_pods = vec![
        bound("a1", "node-a", &[("foo", "")]),
        bound("b1", "node-b", &[("foo", "")]),
        bound("x1", "node-x", &[("foo", "")]),
    ];
    let two = || {
        incoming(
            &[("foo", "")],
            vec![hard(1, ZONE, exists("foo")), hard(1, HOST, exists("foo"))],
        )
    };
    let honor_taints = || {
        incoming(
            &[("foo", "")],
            vec![tsc(
                1,
                ZONE,
                DNS,
                Some(exists("foo")),
                json!({"nodeTaintsPolicy": "Honor"}),
            )],
        )
    };
    let mut nodes = four_nodes();
    nodes.push(node("node-z", &[(ZONE, "zone3"), (HOST, "node-z")]).taint("k", "v", "NoSchedule"));
    nodes.push(node("node-w", &[(ZONE, "zone3")]));
    let cases: Vec<(&str, PodBuilder, Vec<Op>)> = vec![
        (
            "add a matching pod to the smaller zone",
            two(),
            vec![Op::Add(Box::new(bound("y1", "node-y", &[("foo", "")])))],
        ),
        (
            "add a matching pod to the bigger zone",
            two(),
            vec![Op::Add(Box::new(bound("a2", "node-a", &[("foo", "")])))],
        ),
        (
            "add a pod that does not match",
            two(),
            vec![Op::Add(Box::new(bound("y1", "node-y", &[("bar", "")])))],
        ),
        (
            "add a pod of another namespace",
            two(),
            vec![Op::Add(Box::new(bound_in(
                "y1",
                "other",
                "node-y",
                &[("foo", "")],
            )))],
        ),
        (
            "add a pod to a node lacking a topology key",
            two(),
            vec![Op::Add(Box::new(bound("w1", "node-w", &[("foo", "")])))],
        ),
        (
            "add a pod to a tainted node, taints ignored",
            two(),
            vec![Op::Add(Box::new(bound("z1", "node-z", &[("foo", "")])))],
        ),
        (
            "add a pod to a tainted node, taints honored",
            honor_taints(),
            vec![Op::Add(Box::new(bound("z1", "node-z", &[("foo", "")])))],
        ),
        (
            "add a pod to a node outside the pod's node selector",
            two().spec("nodeSelector", json!({"zone": "zone1"})),
            vec![Op::Add(Box::new(bound("y1", "node-y", &[("foo", "")])))],
        ),
        (
            "remove a pod from the bigger zone",
            two(),
            vec![Op::Remove("node-a", "a1")],
        ),
        (
            "remove the only pod of the smaller zone",
            two(),
            vec![Op::Remove("node-x", "x1")],
        ),
        (
            "add twice then remove",
            two(),
            vec![
                Op::Add(Box::new(bound("y1", "node-y", &[("foo", "")]))),
                Op::Add(Box::new(bound("y2", "node-y", &[("foo", "")]))),
                Op::Remove("node-b", "b1"),
            ],
        ),
    ];
    for (name, pod, ops) in cases {
        let pod = pod.build();
        let pl = plugin(json!({}), &[]);
        let mut pods = base_pods.clone();
        let snap = snapshot(&nodes, &pods);
        let mut st = CycleState::new();
        let (_, s) = pl.pre_filter(&mut st, &pod, snap.list()).await;
        assert!(s.is_success(), "{name}");
        let before = st.read(&PRE_FILTER_KEY).unwrap().clone();
        let mut what_if = st.clone();
        for op in &ops {
            let s = match op {
                Op::Add(p) => {
                    let node = snap.get(p.node_name.as_deref().unwrap()).unwrap();
                    pods.push((**p).clone());
                    pl.add_pod(&mut what_if, &pod, p, node)
                }
                Op::Remove(node, victim) => {
                    let i = pods.iter().position(|p| &*p.name == *victim).unwrap();
                    let p = pods.remove(i);
                    pl.remove_pod(&mut what_if, &pod, &p, snap.get(node).unwrap())
                }
            };
            assert!(s.is_success(), "{name}");
        }
        let fresh_snap = snapshot(&nodes, &pods);
        let fresh = pre_filter_state(&pl, &pod, &fresh_snap);
        let got = what_if.read(&PRE_FILTER_KEY).unwrap();
        assert_eq!(counts(got), counts(&fresh), "{name}: counts");
        assert_eq!(mins(got), mins(&fresh), "{name}: minimum");
        assert_eq!(
            verdicts(&pl, &what_if, &pod, &fresh_snap),
            filter_all(&pl, &pod, &fresh_snap).await.unwrap(),
            "{name}: verdicts"
        );
        // The original state is untouched: the what-if ran on a clone.
        let original = st.read(&PRE_FILTER_KEY).unwrap();
        assert_eq!(counts(original), counts(&before), "{name}: original");
        assert_eq!(original.critical_paths, before.critical_paths, "{name}");
    }
}

#[tokio::test]
async fn preemption_what_if_flips_the_verdict() {
    // zone1 has a matching pod, zone2 none: zone1 is rejected, until that
    // pod is (virtually) removed.
    let pl = plugin(json!({}), &[]);
    let pod = incoming(&[("foo", "")], vec![hard(1, ZONE, exists("foo"))]).build();
    let victim = bound("a1", "node-a", &[("foo", "")]);
    let snap = snapshot(&four_nodes(), std::slice::from_ref(&victim));
    let mut st = CycleState::new();
    pl.pre_filter(&mut st, &pod, snap.list()).await;
    let node_a = snap.get("node-a").unwrap();
    assert_eq!(pl.filter(&st, &pod, node_a).code(), Code::Unschedulable);
    let mut what_if = st.clone();
    assert!(
        pl.remove_pod(&mut what_if, &pod, &victim, node_a)
            .is_success()
    );
    assert!(pl.filter(&what_if, &pod, node_a).is_success());
    assert!(pl.add_pod(&mut what_if, &pod, &victim, node_a).is_success());
    assert_eq!(
        pl.filter(&what_if, &pod, node_a).code(),
        Code::Unschedulable
    );
    assert_eq!(pl.filter(&st, &pod, node_a).code(), Code::Unschedulable);
}

// ------------------------------------------------------------------- Score

struct ScoreCase {
    name: &'static str,
    args: Value,
    objects: Vec<KubeObject>,
    pod: PodInfo,
    /// Feasible nodes (scored).
    nodes: Vec<NodeBuilder>,
    /// Infeasible nodes (in the snapshot only).
    failed: Vec<NodeBuilder>,
    pods: Vec<PodInfo>,
    want: Vec<(&'static str, i64)>,
}

impl Default for ScoreCase {
    fn default() -> Self {
        Self {
            name: "",
            args: json!({}),
            objects: Vec::new(),
            pod: make_pod("p").build(),
            nodes: Vec::new(),
            failed: Vec::new(),
            pods: Vec::new(),
            want: Vec::new(),
        }
    }
}

/// PreScore over `nodes` (with `failed` in the snapshot), Score each node,
/// NormalizeScore. `None` if PreScore skipped.
async fn scores(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    nodes: &[NodeBuilder],
    failed: &[NodeBuilder],
    pods: &[PodInfo],
) -> Option<Vec<(String, i64)>> {
    let all: Vec<NodeBuilder> = nodes.iter().chain(failed).cloned().collect();
    let snap = Arc::new(snapshot(&all, pods));
    let feasible: Vec<Arc<NodeInfo>> = snap.list()[..nodes.len()].to_vec();
    let mut st = CycleState::with_snapshot(snap);
    let s = pl.pre_score(&mut st, pod, &feasible).await;
    if s.is_skip() {
        assert!(st.read(&PRE_SCORE_KEY).is_none());
        return None;
    }
    assert!(s.is_success(), "{s:?}");
    let raw: Vec<i64> = feasible
        .iter()
        .map(|n| pl.score(&st, pod, n).unwrap())
        .collect();
    let mut list: Vec<NodeScore<'_>> = feasible
        .iter()
        .zip(&raw)
        .map(|(n, s)| NodeScore {
            name: n.name(),
            score: *s,
        })
        .collect();
    let ext = pl.score_extensions().unwrap();
    assert!(ext.normalize_score(&st, pod, &mut list).is_success());
    Some(list.iter().map(|s| (s.name.to_string(), s.score)).collect())
}

fn hosts(names: &[&str]) -> Vec<NodeBuilder> {
    names.iter().map(|n| node(n, &[(HOST, n)])).collect()
}

fn zoned(pairs: &[(&str, &str)]) -> Vec<NodeBuilder> {
    pairs
        .iter()
        .map(|(n, z)| node(n, &[(ZONE, z), (HOST, n)]))
        .collect()
}

/// `n` matching (`foo`) pods on `node`, named after it.
fn foo_pods(node: &str, n: usize) -> Vec<PodInfo> {
    (1..=n)
        .map(|i| bound(&format!("{node}-{i}"), node, &[("foo", "")]))
        .collect()
}

fn pods_on(spec: &[(&str, usize)]) -> Vec<PodInfo> {
    spec.iter().flat_map(|(n, c)| foo_pods(n, *c)).collect()
}

#[tokio::test]
async fn score_values_match_upstream() {
    let foo = || exists("foo");
    let bar = || exists("bar");
    let host1 = || incoming(&[("foo", "")], vec![soft(1, HOST, exists("foo"))]);
    let node3 = |extra: Value| {
        incoming(
            &[("foo", "")],
            vec![tsc(1, "node", SA, Some(exists("foo")), extra)],
        )
    };
    let three_nodes = |c_extra: Option<&str>| {
        let mut c = node("node-c", &[("node", "node-c")]);
        if let Some(effect) = c_extra {
            c = c.taint("dedicated", "gpu", effect);
        }
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            c,
        ]
    };
    let abc_pods = || pods_on(&[("node-a", 2), ("node-b", 1), ("node-c", 1)]);
    let zone_ab_xy = || {
        zoned(&[
            ("node-a", "zone1"),
            ("node-b", "zone1"),
            ("node-x", "zone2"),
            ("node-y", "zone2"),
        ])
    };
    let different_selectors_pods = || {
        vec![
            bound("p-a1", "node-a", &[("foo", "")]),
            bound("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
            bound("p-y1", "node-y", &[("foo", "")]),
            bound("p-y2", "node-y", &[("bar", "")]),
        ]
    };
    let node_affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}]}}});
    let cases = vec![
        ScoreCase {
            name: "one constraint on node, no existing pods",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b"]),
            want: vec![("node-a", 100), ("node-b", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, only one node is candidate",
            pod: host1().build(),
            nodes: hosts(&["node-a"]),
            failed: hosts(&["node-b"]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1)]),
            want: vec![("node-a", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, all nodes have the same number of matching pods",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b"]),
            pods: pods_on(&[("node-a", 1), ("node-b", 1)]),
            want: vec![("node-a", 100), ("node-b", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, 2/1/0/3",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            want: vec![
                ("node-a", 20),
                ("node-b", 60),
                ("node-c", 100),
                ("node-d", 0),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, null selector",
            pod: incoming(&[("foo", "")], vec![tsc(1, HOST, SA, None, json!({}))]).build(),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            want: vec![
                ("node-a", 100),
                ("node-b", 100),
                ("node-c", 100),
                ("node-d", 100),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, 2/1/0/3, maxSkew 2",
            pod: incoming(&[("foo", "")], vec![soft(2, HOST, foo())]).build(),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            want: vec![
                ("node-a", 33),
                ("node-b", 66),
                ("node-c", 100),
                ("node-d", 16),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, 4/3/2/1, maxSkew 3",
            pod: incoming(&[("foo", "")], vec![soft(3, HOST, foo())]).build(),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]),
            want: vec![
                ("node-a", 44),
                ("node-b", 66),
                ("node-c", 77),
                ("node-d", 100),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "system defaulting, nodes without zone, pods match a Service",
            objects: vec![service("svc", Some(json!({"foo": ""})))],
            pod: make_pod("p").label("foo", "").build(),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]),
            want: vec![
                ("node-a", 44),
                ("node-b", 66),
                ("node-c", 77),
                ("node-d", 100),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, 4/2/1/~3~",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b", "node-x"]),
            failed: hosts(&["node-y"]),
            pods: pods_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            want: vec![("node-a", 33), ("node-b", 83), ("node-x", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on node, 4/?2?/1/~3~: a node without the key scores 0",
            pod: host1().build(),
            nodes: vec![
                node("node-a", &[(HOST, "node-a")]),
                node("node-b", &[("n", "node-b")]),
                node("node-x", &[(HOST, "node-x")]),
            ],
            failed: hosts(&["node-y"]),
            pods: pods_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            want: vec![("node-a", 16), ("node-b", 0), ("node-x", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "one constraint on zone, 4/2/1/~3~",
            pod: incoming(&[("foo", "")], vec![soft(1, ZONE, foo())]).build(),
            nodes: zoned(&[
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-x", "zone2"),
            ]),
            failed: zoned(&[("node-y", "zone2")]),
            pods: pods_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            want: vec![("node-a", 75), ("node-b", 75), ("node-x", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "two constraints on zone and node, 2/~1~/2/~4~",
            pod: incoming(
                &[("foo", "")],
                vec![soft(1, ZONE, foo()), soft(1, HOST, foo())],
            )
            .build(),
            nodes: zoned(&[("node-a", "zone1"), ("node-x", "zone2")]),
            failed: zoned(&[("node-b", "zone1"), ("node-y", "zone2")]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1), ("node-x", 2), ("node-y", 4)]),
            want: vec![("node-a", 100), ("node-x", 63)],
            ..Default::default()
        },
        ScoreCase {
            name: "two constraints on zone, 2 of 4 nodes candidates",
            pod: incoming(
                &[("foo", ""), ("bar", "")],
                vec![soft(1, ZONE, foo()), soft(1, ZONE, bar())],
            )
            .build(),
            nodes: vec![
                node("node-a", &[(ZONE, "zone1")]),
                node("node-x", &[(ZONE, "zone2")]),
            ],
            failed: vec![
                node("node-b", &[(ZONE, "zone1")]),
                node("node-y", &[(ZONE, "zone2")]),
            ],
            pods: vec![
                bound("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                bound("p-a2", "node-a", &[("foo", "")]),
                bound("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                bound("p-y1", "node-y", &[("foo", "")]),
                bound("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                bound("p-y3", "node-y", &[("foo", "")]),
            ],
            want: vec![("node-a", 85), ("node-x", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "two constraints on zone and node, different selectors",
            pod: incoming(
                &[("foo", ""), ("bar", "")],
                vec![soft(1, ZONE, foo()), soft(1, HOST, bar())],
            )
            .build(),
            nodes: zone_ab_xy(),
            pods: different_selectors_pods(),
            want: vec![
                ("node-a", 60),
                ("node-b", 20),
                ("node-x", 100),
                ("node-y", 60),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "two constraints on zone and node, different selectors, some nodes have 0 pods",
            pod: incoming(
                &[("foo", ""), ("bar", "")],
                vec![soft(1, ZONE, foo()), soft(1, HOST, bar())],
            )
            .build(),
            nodes: zone_ab_xy(),
            pods: vec![
                bound("p-b1", "node-b", &[("bar", "")]),
                bound("p-x1", "node-x", &[("foo", "")]),
                bound("p-y1", "node-y", &[("foo", ""), ("bar", "")]),
            ],
            want: vec![
                ("node-a", 100),
                ("node-b", 60),
                ("node-x", 40),
                ("node-y", 0),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "two constraints on zone and node, different selectors, 3 of 4 candidates",
            pod: incoming(
                &[("foo", ""), ("bar", "")],
                vec![soft(1, ZONE, foo()), soft(1, HOST, bar())],
            )
            .build(),
            nodes: zoned(&[
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-x", "zone2"),
            ]),
            failed: zoned(&[("node-y", "zone2")]),
            pods: different_selectors_pods(),
            want: vec![("node-a", 50), ("node-b", 25), ("node-x", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "existing pods in a different namespace do not count",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b"]),
            pods: vec![
                bound_in("p-a1", "ns1", "node-a", &[("foo", "")]),
                bound("p-a2", "node-a", &[("foo", "")]),
                bound("p-b1", "node-b", &[("foo", "")]),
                bound("p-b2", "node-b", &[("foo", "")]),
            ],
            want: vec![("node-a", 100), ("node-b", 33)],
            ..Default::default()
        },
        ScoreCase {
            name: "terminating pods are excluded",
            pod: host1().build(),
            nodes: hosts(&["node-a", "node-b"]),
            pods: vec![
                terminating(&make_pod("p-a").node("node-a").label("foo", "")),
                bound("p-b", "node-b", &[("foo", "")]),
            ],
            want: vec![("node-a", 100), ("node-b", 0)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeAffinityPolicy honored with nodeSelector",
            pod: node3(json!({}))
                .spec("nodeSelector", json!({"foo": ""}))
                .build(),
            nodes: three_nodes(None),
            pods: abc_pods(),
            want: vec![("node-a", 0), ("node-b", 33), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeAffinityPolicy ignored with nodeSelector",
            pod: node3(json!({"nodeAffinityPolicy": "Ignore"}))
                .spec("nodeSelector", json!({"foo": ""}))
                .build(),
            nodes: three_nodes(None),
            pods: abc_pods(),
            want: vec![("node-a", 66), ("node-b", 100), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeAffinityPolicy honored with nodeAffinity",
            pod: node3(json!({}))
                .spec("affinity", node_affinity.clone())
                .build(),
            nodes: three_nodes(None),
            pods: abc_pods(),
            want: vec![("node-a", 0), ("node-b", 33), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeAffinityPolicy ignored with nodeAffinity",
            pod: node3(json!({"nodeAffinityPolicy": "Ignore"}))
                .spec("affinity", node_affinity.clone())
                .build(),
            nodes: three_nodes(None),
            pods: abc_pods(),
            want: vec![("node-a", 66), ("node-b", 100), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeTaintsPolicy honored",
            pod: node3(json!({"nodeTaintsPolicy": "Honor"})).build(),
            nodes: three_nodes(Some("NoSchedule")),
            pods: abc_pods(),
            want: vec![("node-a", 0), ("node-b", 33), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "NodeTaintsPolicy ignored",
            pod: node3(json!({})).build(),
            nodes: three_nodes(Some("NoSchedule")),
            pods: abc_pods(),
            want: vec![("node-a", 66), ("node-b", 100), ("node-c", 100)],
            ..Default::default()
        },
        ScoreCase {
            name: "matchLabelKeys ANDed with an empty labelSelector",
            pod: incoming(
                &[("foo", ""), ("bar", "")],
                vec![
                    tsc(
                        1,
                        ZONE,
                        SA,
                        Some(json!({})),
                        json!({"matchLabelKeys": ["foo"]}),
                    ),
                    tsc(
                        1,
                        HOST,
                        SA,
                        Some(json!({})),
                        json!({"matchLabelKeys": ["bar"]}),
                    ),
                ],
            )
            .build(),
            nodes: zoned(&[
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-c", "zone2"),
                ("node-d", "zone2"),
            ]),
            pods: vec![
                bound("p-a1", "node-a", &[("foo", "")]),
                bound("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                bound("p-y1", "node-c", &[("foo", "")]),
                bound("p-y2", "node-c", &[("bar", "")]),
            ],
            want: vec![
                ("node-a", 60),
                ("node-b", 20),
                ("node-c", 60),
                ("node-d", 100),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "matchLabelKeys ANDed with a labelSelector",
            pod: incoming(
                &[("foo", ""), ("bar", ""), ("baz", "")],
                vec![
                    soft(1, ZONE, foo()),
                    tsc(1, HOST, SA, Some(bar()), json!({"matchLabelKeys": ["baz"]})),
                ],
            )
            .build(),
            nodes: zoned(&[
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-c", "zone2"),
                ("node-d", "zone2"),
            ]),
            pods: vec![
                bound("p-a1", "node-a", &[("foo", "")]),
                bound("p-b1", "node-b", &[("foo", ""), ("bar", ""), ("baz", "")]),
                bound("p-c1", "node-c", &[("foo", "")]),
                bound("p-c2", "node-c", &[("bar", "")]),
                bound("p-d3", "node-c", &[("bar", ""), ("baz", "")]),
            ],
            want: vec![
                ("node-a", 60),
                ("node-b", 20),
                ("node-c", 60),
                ("node-d", 100),
            ],
            ..Default::default()
        },
        ScoreCase {
            name: "List defaults: ScheduleAnyway constraints with the ReplicaSet's selector",
            args: list_args(vec![
                tsc(1, HOST, SA, None, json!({})),
                tsc(1, "rack", DNS, None, json!({})),
            ]),
            objects: vec![replica_set("rs1", exists("foo"))],
            pod: owned_by(
                &make_pod("p").label("foo", ""),
                "apps/v1",
                "ReplicaSet",
                "rs1",
                true,
            ),
            nodes: hosts(&["node-a", "node-b", "node-c", "node-d"]),
            pods: pods_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            want: vec![
                ("node-a", 20),
                ("node-b", 60),
                ("node-c", 100),
                ("node-d", 0),
            ],
            ..Default::default()
        },
    ];
    for c in cases {
        let pl = plugin(c.args, &c.objects);
        let got = scores(&pl, &c.pod, &c.nodes, &c.failed, &c.pods).await;
        let want: Vec<(String, i64)> = c.want.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        assert_eq!(got, Some(want), "{}", c.name);
    }
}

/// (name, args, objects, pod, feasible nodes)
type SkipCase = (
    &'static str,
    Value,
    Vec<KubeObject>,
    PodInfo,
    Vec<NodeBuilder>,
);

#[tokio::test]
async fn pre_score_skips() {
    let cases: Vec<SkipCase> = vec![
        (
            "the pod has no soft constraints (List, no defaults)",
            list_args(vec![]),
            vec![],
            make_pod("p").build(),
            hosts(&["node-a", "node-b"]),
        ),
        (
            "the pod has only hard constraints (System defaults unused)",
            json!({}),
            vec![service("svc", Some(json!({"foo": ""})))],
            incoming(&[("foo", "")], vec![hard(1, ZONE, exists("foo"))]).build(),
            hosts(&["node-a"]),
        ),
        (
            "default constraints and a ReplicaSet that does not own the pod",
            list_args(vec![tsc(2, "planet", SA, None, json!({}))]),
            vec![replica_set("rs1", exists("tar"))],
            owned_by(
                &make_pod("p").label("foo", "bar").label("baz", "sup"),
                "apps/v1",
                "ReplicaSet",
                "rs2",
                true,
            ),
            vec![node("node-a", &[("planet", "mars")])],
        ),
        (
            "System defaults but nothing selects the pod",
            json!({}),
            vec![service("svc", Some(json!({"app": "other"})))],
            make_pod("p").label("app", "web").build(),
            hosts(&["node-a"]),
        ),
        (
            "no nodes",
            json!({}),
            vec![],
            incoming(&[("foo", "")], vec![soft(1, ZONE, exists("foo"))]).build(),
            vec![],
        ),
    ];
    for (name, args, objects, pod, nodes) in cases {
        let pl = plugin(args, &objects);
        assert_eq!(scores(&pl, &pod, &nodes, &[], &[]).await, None, "{name}");
    }
}

/// The PreScore state: constraints' keys and skews, counts, ignored nodes,
/// weights.
type ScoreStateView = (
    Vec<(String, i32)>,
    Vec<HashMap<String, i64>>,
    Vec<String>,
    Vec<f64>,
);

/// (name, args, objects, pod, feasible nodes, expected state)
type StateCase = (
    &'static str,
    Value,
    Vec<KubeObject>,
    PodInfo,
    Vec<NodeBuilder>,
    ScoreStateView,
);

#[tokio::test]
async fn pre_score_state() {
    let w = topology_normalizing_weight;
    let rs1 = || replica_set("rs1", exists("foo"));
    let rs_pod = || {
        owned_by(
            &make_pod("p").label("foo", "tar").label("baz", "sup"),
            "apps/v1",
            "ReplicaSet",
            "rs1",
            true,
        )
    };
    let cases: Vec<StateCase> = vec![
        (
            "zone and hostname",
            json!({"defaultingType": "List"}),
            vec![],
            incoming(
                &[("foo", "")],
                vec![soft(1, ZONE, exists("foo")), soft(1, HOST, exists("foo"))],
            )
            .build(),
            zoned(&[
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-x", "zone2"),
            ]),
            (
                vec![(ZONE.into(), 1), (HOST.into(), 1)],
                vec![domain_counts(&[("zone1", 0), ("zone2", 0)]), HashMap::new()],
                vec![],
                vec![w(2), w(3)],
            ),
        ),
        (
            "a node without the zone label is ignored",
            json!({"defaultingType": "List"}),
            vec![],
            incoming(
                &[("foo", "")],
                vec![soft(1, ZONE, exists("foo")), soft(1, HOST, exists("bar"))],
            )
            .build(),
            vec![
                node("node-a", &[(ZONE, "zone1"), (HOST, "node-a")]),
                node("node-b", &[(ZONE, "zone1"), (HOST, "node-b")]),
                node("node-x", &[(HOST, "node-x")]),
            ],
            (
                vec![(ZONE.into(), 1), (HOST.into(), 1)],
                vec![domain_counts(&[("zone1", 0)]), HashMap::new()],
                vec!["node-x".into()],
                vec![w(1), w(2)],
            ),
        ),
        (
            "system defaults and a ReplicaSet: nodes without a zone form the zone \"\"",
            json!({"defaultingType": "System"}),
            vec![rs1()],
            rs_pod(),
            vec![
                node("node-a", &[(HOST, "node-a"), (LABEL_ZONE, "mars")]),
                node("node-b", &[(HOST, "node-b"), (LABEL_ZONE, "mars")]),
                node("node-c", &[(HOST, "node-c")]),
                node("node-d", &[(HOST, "node-d")]),
            ],
            (
                vec![(HOST.into(), 3), (LABEL_ZONE.into(), 5)],
                vec![HashMap::new(), domain_counts(&[("mars", 0), ("", 0)])],
                vec![],
                vec![w(4), w(2)],
            ),
        ),
        (
            "List defaults and a ReplicaSet: only ScheduleAnyway defaults score",
            list_args(vec![
                tsc(1, HOST, SA, None, json!({})),
                tsc(2, "rack", DNS, None, json!({})),
                tsc(2, "planet", SA, None, json!({})),
            ]),
            vec![rs1()],
            rs_pod(),
            vec![node(
                "node-a",
                &[("rack", "rack1"), (HOST, "node-a"), ("planet", "mars")],
            )],
            (
                vec![(HOST.into(), 1), ("planet".into(), 2)],
                vec![HashMap::new(), domain_counts(&[("mars", 0)])],
                vec![],
                vec![w(1), w(1)],
            ),
        ),
        (
            "the pod's own constraints win over defaults",
            list_args(vec![tsc(2, "galaxy", SA, None, json!({}))]),
            vec![rs1()],
            owned_by(
                &incoming(
                    &[("foo", "bar"), ("baz", "sup")],
                    vec![
                        hard(1, ZONE, exists("bar")),
                        soft(2, "planet", json!({"matchLabels": {"baz": "sup"}})),
                    ],
                ),
                "apps/v1",
                "ReplicaSet",
                "rs1",
                true,
            ),
            vec![node(
                "node-a",
                &[("planet", "mars"), ("galaxy", "andromeda")],
            )],
            (
                vec![("planet".into(), 2)],
                vec![domain_counts(&[("mars", 0)])],
                vec![],
                vec![w(1)],
            ),
        ),
    ];
    for (name, args, objects, pod, nodes, want) in cases {
        let pl = plugin(args, &objects);
        let snap = Arc::new(snapshot(&nodes, &[]));
        let s = pl.pre_score_state(&snap, &pod, snap.list()).expect(name);
        let mut ignored: Vec<String> = s.ignored.iter().map(|n| n.to_string()).collect();
        ignored.sort();
        let got: ScoreStateView = (
            s.constraints
                .iter()
                .map(|c| (c.topology_key.to_string(), c.max_skew))
                .collect(),
            s.counts
                .iter()
                .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
                .collect(),
            ignored,
            s.weights.clone(),
        );
        assert_eq!(got, want, "{name}");
    }
}

#[tokio::test]
async fn score_needs_the_pre_score_state() {
    let pl = plugin(json!({}), &[]);
    let pod = make_pod("p").build();
    let snap = snapshot(&hosts(&["node-a"]), &[]);
    let st = CycleState::new();
    let want = "reading \"PreScorePodTopologySpread\" from cycleState: not found";
    let err = pl.score(&st, &pod, &snap.list()[0]).unwrap_err();
    assert_eq!(err.message(), want);
    let mut list = vec![NodeScore {
        name: "node-a",
        score: 1,
    }];
    let s = pl
        .score_extensions()
        .unwrap()
        .normalize_score(&st, &pod, &mut list);
    assert_eq!((s.code(), s.message().as_str()), (Code::Error, want));
}

#[test]
fn normalizing_weight_is_ln_of_size_plus_two() {
    assert_eq!(topology_normalizing_weight(0), 2f64.ln());
    assert_eq!(topology_normalizing_weight(3), 5f64.ln());
}

// ------------------------------------------------------------- defaulting

/// Labels a selector must (or must not) match.
type Probe = Vec<(&'static str, &'static str)>;
/// (name, objects, pod, labels that must match and labels that must not;
/// `None`: the selector is empty)
type SelectorCase = (
    &'static str,
    Vec<KubeObject>,
    PodInfo,
    Option<(Probe, Probe)>,
);

#[test]
fn default_selector_from_services_and_controllers() {
    let labels = |pairs: &[(&str, &str)]| {
        let m: std::collections::BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        crate::model::Labels::from_map(Some(&m))
    };
    let pod = || {
        make_pod("p")
            .label("app", "web")
            .label("tier", "fe")
            .label("rev", "7")
    };
    let rc = |name: &str, sel: Value| {
        object(
            ObjectKind::ReplicationController,
            json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"selector": sel}}),
        )
    };
    let sts = |name: &str, sel: Value| {
        object(
            ObjectKind::StatefulSet,
            json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"selector": sel, "serviceName": "s", "template": {}}}),
        )
    };
    let other_ns_svc = object(
        ObjectKind::Service,
        json!({"metadata": {"name": "svc", "namespace": "other"}, "spec": {"selector": {"app": "web"}}}),
    );
    let cases: Vec<SelectorCase> = vec![
        ("nothing selects the pod", vec![], pod().build(), None),
        (
            "a Service selecting the pod",
            vec![service("web", Some(json!({"app": "web"})))],
            pod().build(),
            Some((vec![("app", "web")], vec![("app", "db")])),
        ),
        (
            "Services not selecting the pod, or without a selector, are left out",
            vec![
                service("db", Some(json!({"app": "db"}))),
                service("headless", None),
            ],
            pod().build(),
            None,
        ),
        (
            "a Service with an empty selector selects the pod but adds nothing",
            vec![service("all", Some(json!({})))],
            pod().build(),
            None,
        ),
        (
            "Services of other namespaces are left out",
            vec![other_ns_svc],
            pod().build(),
            None,
        ),
        (
            "two Services are merged",
            vec![
                service("web", Some(json!({"app": "web"}))),
                service("fe", Some(json!({"tier": "fe"}))),
            ],
            pod().build(),
            Some((vec![("app", "web"), ("tier", "fe")], vec![("app", "web")])),
        ),
        (
            "the owning ReplicationController's selector is merged",
            vec![
                service("web", Some(json!({"app": "web"}))),
                rc("rc1", json!({"rev": "7"})),
            ],
            owned_by(&pod(), "v1", "ReplicationController", "rc1", true),
            Some((vec![("app", "web"), ("rev", "7")], vec![("app", "web")])),
        ),
        (
            "the owning ReplicaSet's expressions are added",
            vec![replica_set(
                "rs1",
                json!({"matchExpressions": [{"key": "rev", "operator": "In", "values": ["7", "8"]}]}),
            )],
            owned_by(&pod(), "apps/v1", "ReplicaSet", "rs1", true),
            Some((vec![("rev", "8")], vec![("rev", "9")])),
        ),
        (
            "the owning StatefulSet's selector is added",
            vec![
                service("web", Some(json!({"app": "web"}))),
                sts("ss1", json!({"matchLabels": {"tier": "fe"}})),
            ],
            owned_by(&pod(), "apps/v1", "StatefulSet", "ss1", true),
            Some((vec![("app", "web"), ("tier", "fe")], vec![("tier", "fe")])),
        ),
        (
            "an owner that is not the controller is ignored",
            vec![replica_set("rs1", exists("rev"))],
            owned_by(&pod(), "apps/v1", "ReplicaSet", "rs1", false),
            None,
        ),
        (
            "an owner of another API version is ignored",
            vec![replica_set("rs1", exists("rev"))],
            owned_by(&pod(), "extensions/v1beta1", "ReplicaSet", "rs1", true),
            None,
        ),
        (
            "a Deployment owner is not supported",
            vec![replica_set("rs1", exists("rev"))],
            owned_by(&pod(), "apps/v1", "Deployment", "rs1", true),
            None,
        ),
        (
            "a missing ReplicaSet adds nothing",
            vec![service("web", Some(json!({"app": "web"})))],
            owned_by(&pod(), "apps/v1", "ReplicaSet", "gone", true),
            Some((vec![("app", "web")], vec![])),
        ),
    ];
    for (name, objects, pod, want) in cases {
        let pl = plugin(json!({}), &objects);
        let sel = default_selector(&pl.source.objects, &pod);
        match want {
            None => assert!(sel.is_everything(), "{name}: {sel:?}"),
            Some((yes, no)) => {
                assert!(!sel.is_everything(), "{name}");
                assert!(sel.matches(&pod.labels), "{name}: selects its own pod");
                assert!(sel.matches(&labels(&yes)), "{name}: {yes:?}");
                assert!(!sel.matches(&labels(&no)), "{name}: {no:?}");
            }
        }
    }
}

#[test]
fn system_defaults_are_upstreams() {
    let pl = plugin(json!({}), &[]);
    let d = &pl.source.defaults;
    assert!(pl.source.system_defaulted);
    assert_eq!(
        d.iter()
            .map(|c| (&*c.topology_key, c.max_skew, c.when_unsatisfiable))
            .collect::<Vec<_>>(),
        [
            (HOST, 3, WhenUnsatisfiable::ScheduleAnyway),
            (LABEL_ZONE, 5, WhenUnsatisfiable::ScheduleAnyway),
        ]
    );
    let pl = plugin(
        list_args(vec![tsc(
            2,
            ZONE,
            DNS,
            None,
            json!({"minDomains": 4, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"}),
        )]),
        &[],
    );
    assert!(!pl.source.system_defaulted);
    assert_eq!(
        pl.source.defaults,
        [DefaultSpec {
            max_skew: 2,
            topology_key: ZONE.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            min_domains: 4,
            node_affinity_policy: InclusionPolicy::Ignore,
            node_taints_policy: InclusionPolicy::Honor,
        }]
    );
}

// ------------------------------------------------------------------ hints

#[test]
fn events_registered() {
    let pl = plugin(json!({}), &[]);
    let regs = pl.events_to_register().unwrap();
    let events: Vec<_> = regs.iter().map(|r| (r.event, r.hint.is_some())).collect();
    assert_eq!(
        events,
        [
            (
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD
                        | ActionType::UPDATE_POD_LABEL
                        | ActionType::UPDATE_POD_TOLERATION
                        | ActionType::DELETE
                ),
                true
            ),
            (
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD
                        | ActionType::DELETE
                        | ActionType::UPDATE_NODE_LABEL
                        | ActionType::UPDATE_NODE_TAINT
                ),
                true
            ),
        ]
    );
}

fn pod_event(p: PodInfo) -> Option<EventObject> {
    Some(EventObject::Pod(Arc::new(p)))
}

fn node_event(n: NodeBuilder) -> Option<EventObject> {
    Some(EventObject::Node(Arc::new(n.build())))
}

/// (name, args, pending pod, old object, new object, expected hint)
type PodHintCase = (
    &'static str,
    Value,
    PodInfo,
    Option<EventObject>,
    Option<EventObject>,
    QueueingHint,
);

#[test]
fn pod_event_hints() {
    use QueueingHint::{Queue, Skip};
    let target_b = || incoming(&[("foo", "")], vec![hard(1, ZONE, exists("foo"))]);
    let target = target_b().build();
    let honor_b = || {
        incoming(
            &[("foo", "")],
            vec![tsc(
                1,
                ZONE,
                DNS,
                Some(exists("foo")),
                json!({"nodeTaintsPolicy": "Honor"}),
            )],
        )
    };
    let honor = honor_b().build();
    let soft_only = incoming(&[("foo", "")], vec![soft(1, ZONE, exists("foo"))]).build();
    let rs_owned = owned_by(
        &make_pod("p").label("foo", ""),
        "apps/v1",
        "ReplicaSet",
        "rs1",
        true,
    );
    let cases: Vec<PodHintCase> = vec![
        (
            "a matching pod was bound",
            json!({}),
            target.clone(),
            None,
            pod_event(bound("o", "node-a", &[("foo", "")])),
            Queue,
        ),
        (
            "a non-matching pod was bound",
            json!({}),
            target.clone(),
            None,
            pod_event(bound("o", "node-a", &[("bar", "")])),
            Skip,
        ),
        (
            "an unscheduled matching pod was added",
            json!({}),
            target.clone(),
            None,
            pod_event(make_pod("o").label("foo", "").build()),
            Skip,
        ),
        (
            "a matching pod of another namespace was bound",
            json!({}),
            target.clone(),
            None,
            pod_event(bound_in("o", "other", "node-a", &[("foo", "")])),
            Skip,
        ),
        (
            "a matching bound pod was deleted",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("foo", "")])),
            None,
            Queue,
        ),
        (
            "a non-matching bound pod was deleted",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("bar", "")])),
            None,
            Skip,
        ),
        (
            "a bound pod's labels now match",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("bar", "")])),
            pod_event(bound("o", "node-a", &[("foo", "")])),
            Queue,
        ),
        (
            "a bound pod's labels no longer match",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("foo", "")])),
            pod_event(bound("o", "node-a", &[])),
            Queue,
        ),
        (
            "a bound pod's labels changed without changing the match",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("foo", ""), ("v", "1")])),
            pod_event(bound("o", "node-a", &[("foo", ""), ("v", "2")])),
            Skip,
        ),
        (
            "a bound pod changed, not its labels",
            json!({}),
            target.clone(),
            pod_event(bound("o", "node-a", &[("foo", "")])),
            pod_event(
                make_pod("o")
                    .node("node-a")
                    .label("foo", "")
                    .req_cpu("1")
                    .build(),
            ),
            Skip,
        ),
        (
            "the pod got a toleration, NodeTaintsPolicy Honor",
            json!({}),
            honor.clone(),
            pod_event(honor.clone()),
            pod_event(honor_b().toleration("k", "Exists", "", "").build()),
            Queue,
        ),
        (
            "the pod got a toleration, taints ignored",
            json!({}),
            target.clone(),
            pod_event(target.clone()),
            pod_event(target_b().toleration("k", "Exists", "", "").build()),
            Skip,
        ),
        (
            "a pod with only ScheduleAnyway constraints",
            json!({}),
            soft_only,
            None,
            pod_event(bound("o", "node-a", &[("foo", "")])),
            Skip,
        ),
        (
            "List DoNotSchedule defaults: a pod matching the ReplicaSet's selector",
            list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            rs_owned.clone(),
            None,
            pod_event(bound("o", "node-a", &[("foo", "")])),
            Queue,
        ),
        (
            "List DoNotSchedule defaults: a pod not matching",
            list_args(vec![tsc(1, ZONE, DNS, None, json!({}))]),
            rs_owned,
            None,
            pod_event(bound("o", "node-a", &[("bar", "")])),
            Skip,
        ),
    ];
    for (name, args, pod, old, new, want) in cases {
        let pl = plugin(args, &[replica_set("rs1", exists("foo"))]);
        let regs = pl.events_to_register().unwrap();
        let hint = regs[0].hint.as_ref().unwrap();
        assert_eq!(hint(&pod, old.as_ref(), new.as_ref()), Ok(want), "{name}");
    }
    // Something else than a pod is an error (the pod is then requeued).
    let pl = plugin(json!({}), &[]);
    let regs = pl.events_to_register().unwrap();
    assert!(
        (regs[0].hint.as_ref().unwrap())(&target, None, node_event(node("n", &[])).as_ref())
            .is_err()
    );
}

#[test]
fn node_event_hints() {
    use QueueingHint::{Queue, Skip};
    let target = incoming(&[("foo", "")], vec![hard(1, ZONE, exists("foo"))]).build();
    let zoned_node = |z: &str| node("n", &[(ZONE, z)]);
    let cases: Vec<(&str, Option<EventObject>, Option<EventObject>, QueueingHint)> = vec![
        (
            "a node with the key was added",
            None,
            node_event(zoned_node("z1")),
            Queue,
        ),
        (
            "a node without the key was added",
            None,
            node_event(node("n", &[])),
            Skip,
        ),
        (
            "a node with the key was deleted",
            node_event(zoned_node("z1")),
            None,
            Queue,
        ),
        (
            "a node without the key was deleted",
            node_event(node("n", &[])),
            None,
            Skip,
        ),
        (
            "a node got the key",
            node_event(node("n", &[])),
            node_event(zoned_node("z1")),
            Queue,
        ),
        (
            "a node lost the key",
            node_event(zoned_node("z1")),
            node_event(node("n", &[])),
            Queue,
        ),
        (
            "a node moved to another domain",
            node_event(zoned_node("z1")),
            node_event(zoned_node("z2")),
            Queue,
        ),
        (
            "an unrelated label changed",
            node_event(zoned_node("z1")),
            node_event(zoned_node("z1").label("other", "x")),
            Skip,
        ),
        (
            "a node with the key was tainted",
            node_event(zoned_node("z1")),
            node_event(zoned_node("z1").taint("k", "v", "NoSchedule")),
            Queue,
        ),
        (
            "a node without the key was tainted",
            node_event(node("n", &[])),
            node_event(node("n", &[]).taint("k", "v", "NoSchedule")),
            Skip,
        ),
        (
            "a node with the key was uncordoned (taints unchanged)",
            node_event(zoned_node("z1").unschedulable()),
            node_event(zoned_node("z1")),
            Skip,
        ),
    ];
    let pl = plugin(json!({}), &[]);
    let regs = pl.events_to_register().unwrap();
    let hint = regs[1].hint.as_ref().unwrap();
    for (name, old, new, want) in cases {
        assert_eq!(
            hint(&target, old.as_ref(), new.as_ref()),
            Ok(want),
            "{name}"
        );
    }
    // A pod with no hard constraints: every node "has" all keys.
    let soft_pod = incoming(&[("foo", "")], vec![soft(1, ZONE, exists("foo"))]).build();
    assert_eq!(
        hint(&soft_pod, None, node_event(node("n", &[])).as_ref()),
        Ok(Queue)
    );
    assert!(hint(&target, None, pod_event(make_pod("x").build()).as_ref()).is_err());
}

// --------------------------------------------------------------- registry

#[tokio::test]
async fn registered_under_upstreams_name() {
    let registry = crate::plugins::in_tree_registry();
    assert!(registry.contains("PodTopologySpread"));
    let factory = registry.get("PodTopologySpread").unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let p = factory(None, "args", &handle).unwrap();
    assert_eq!(p.name(), "PodTopologySpread");
    let p: Arc<dyn Plugin> = p;
    assert!(p.clone().as_pre_filter().is_some());
    assert!(p.clone().as_filter().is_some());
    assert!(p.clone().as_pre_score().is_some());
    assert!(p.clone().as_score().is_some());
    assert!(p.as_reserve().is_none());
    let err = match factory(
        Some(
            &json!({"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}),
        ),
        "profiles[0].pluginConfig[0].args",
        &handle,
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("System defaulting with constraints must be rejected"),
    };
    assert_eq!(
        err,
        "profiles[0].pluginConfig[0].args.defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
    );
}

// ------------------------------------------- counts kept across cycles (memo)

/// One plugin kept across a stream of placements and removals (its counts
/// updated only where nodes changed) agrees at every step with a new
/// plugin counting from scratch: PreFilter counts and minima, PreScore
/// counts and verdicts, for hard and soft constraints by zone and
/// by host, a node-affinity-honouring constraint, and system defaults.
#[tokio::test]
async fn counts_kept_across_cycles_match_a_fresh_count() {
    let mut rng = crate::rng::FastRng::new(7);
    let zones = ["zone1", "zone2", "zone3"];
    let mut nodes: Vec<NodeBuilder> = (0..12)
        .map(|i| {
            let name = format!("node-{i}");
            let mut labels = vec![(HOST, name.as_str())];
            // One node without a zone: it counts only for system defaults.
            if i != 11 {
                labels.push((ZONE, zones[i % 3]));
            }
            node(&name, &labels)
        })
        .collect();
    nodes[4] = nodes[4].clone().label("disk", "ssd");
    let mut snap = snapshot(&nodes, &[]);
    let affinity_honoured = tsc(
        2,
        ZONE,
        DNS,
        Some(exists("foo")),
        json!({"nodeAffinityPolicy": "Honor"}),
    );
    let pods = [
        incoming(
            &[("foo", "")],
            vec![hard(1, ZONE, exists("foo")), hard(2, HOST, exists("foo"))],
        )
        .build(),
        incoming(
            &[("foo", "")],
            vec![soft(1, ZONE, exists("foo")), soft(3, HOST, exists("bar"))],
        )
        .build(),
        incoming(&[("foo", "")], vec![affinity_honoured])
            .spec("nodeSelector", json!({"disk": "ssd"}))
            .build(),
        // No constraints of its own: the system defaults, selecting by the
        // Service.
        incoming(&[("foo", "")], vec![]).build(),
    ];
    let objects = [service("svc", Some(json!({"foo": ""})))];
    let kept = plugin(json!({}), &objects);
    let mut placed: Vec<(String, String)> = Vec::new();
    for step in 0..300 {
        if placed.is_empty() || rng.below(4) != 0 {
            let node = format!("node-{}", rng.below(12));
            let labels: &[(&str, &str)] = match rng.below(3) {
                0 => &[("foo", "")],
                1 => &[("bar", "")],
                _ => &[],
            };
            let pod = bound(&format!("p{step}"), &node, labels);
            placed.push((node, pod.uid.to_string()));
            assert!(snap.assume_pod(Arc::new(pod)));
        } else {
            let (node, uid) = placed.swap_remove(rng.below(placed.len() as u64) as usize);
            assert!(snap.remove_pod(&node, &uid));
        }
        if step % 7 != 0 {
            continue;
        }
        let fresh = plugin(json!({}), &objects);
        for pod in &pods {
            let (a, b) = (
                kept.pre_filter_state(pod, snap.list()),
                fresh.pre_filter_state(pod, snap.list()),
            );
            if let (Some(a), Some(b)) = (&a, &b) {
                assert_eq!(counts(a), counts(b), "step {step}");
                assert_eq!(mins(a), mins(b), "step {step}");
            }
            assert_eq!(a.is_some(), b.is_some(), "step {step}");
            assert_eq!(
                filter_all(&kept, pod, &snap).await,
                filter_all(&fresh, pod, &snap).await,
                "step {step}"
            );
            let (a, b) = (
                kept.pre_score_state(&snap, pod, snap.list()),
                fresh.pre_score_state(&snap, pod, snap.list()),
            );
            let view = |s: &Option<super::scoring::PreScoreState>| {
                s.as_ref().map(|s| {
                    s.counts
                        .iter()
                        .map(|m| {
                            let mut v: Vec<(String, i64)> =
                                m.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                            v.sort();
                            v
                        })
                        .collect::<Vec<_>>()
                })
            };
            assert_eq!(view(&a), view(&b), "step {step}");
        }
    }
}
