use serde_json::{Value, json};

use super::*;
use crate::framework::{Code, PluginArgs};
use crate::testing::{NodeBuilder, make_node, make_pod};

fn plugin(args: Value) -> NodeAffinity {
    NodeAffinity::new(NodeAffinityArgs::parse(Some(&args), "args").unwrap()).unwrap()
}

/// A pod with the given `spec.nodeSelector` (null: none) and
/// `spec.affinity.nodeAffinity` (null: none).
fn pod(selector: Value, affinity: Value) -> PodInfo {
    let mut b = make_pod("p");
    if !selector.is_null() {
        b = b.spec("nodeSelector", selector);
    }
    if !affinity.is_null() {
        b = b.spec("affinity", json!({ "nodeAffinity": affinity }));
    }
    b.build()
}

fn required(terms: Value) -> Value {
    json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}})
}

fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({"key": key, "operator": op})
    } else {
        json!({"key": key, "operator": op, "values": values})
    }
}

fn name_field(op: &str, name: &str) -> Value {
    json!({"key": "metadata.name", "operator": op, "values": [name]})
}

fn node(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
    let mut b: NodeBuilder = make_node(name);
    for (k, v) in labels {
        b = b.label(k, v);
    }
    NodeInfo::new(Arc::new(b.build()))
}

#[test]
fn filter_verdicts() {
    let n1 = node("n1", &[("zone", "a"), ("cores", "16"), ("gpu", "")]);
    let cases: Vec<(&str, PodInfo, bool)> = vec![
        ("nothing to match", pod(Value::Null, Value::Null), true),
        (
            "nodeSelector matches",
            pod(json!({"zone": "a", "cores": "16"}), Value::Null),
            true,
        ),
        (
            "nodeSelector value differs",
            pod(json!({"zone": "b"}), Value::Null),
            false,
        ),
        (
            "nodeSelector key missing",
            pod(json!({"disk": "ssd"}), Value::Null),
            false,
        ),
        (
            "empty-valued label matches an empty value",
            pod(json!({"gpu": ""}), Value::Null),
            true,
        ),
        (
            "In",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "In", &["b", "a"])]}])),
            ),
            true,
        ),
        (
            "In, other values",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "In", &["b", "c"])]}])),
            ),
            false,
        ),
        (
            "NotIn",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "NotIn", &["b"])]}])),
            ),
            true,
        ),
        (
            "NotIn the node's value",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "NotIn", &["a"])]}])),
            ),
            false,
        ),
        (
            "NotIn on an absent key",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("disk", "NotIn", &["ssd"])]}])),
            ),
            true,
        ),
        (
            "Exists",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("gpu", "Exists", &[])]}])),
            ),
            true,
        ),
        (
            "Exists on an absent key",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("disk", "Exists", &[])]}])),
            ),
            false,
        ),
        (
            "DoesNotExist",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("disk", "DoesNotExist", &[])]}])),
            ),
            true,
        ),
        (
            "DoesNotExist on a present key",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "DoesNotExist", &[])]}])),
            ),
            false,
        ),
        (
            "Gt",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])),
            ),
            true,
        ),
        (
            "Gt, equal is not greater",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("cores", "Gt", &["16"])]}])),
            ),
            false,
        ),
        (
            "Lt",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("cores", "Lt", &["32"])]}])),
            ),
            true,
        ),
        (
            "Lt, smaller bound",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("cores", "Lt", &["8"])]}])),
            ),
            false,
        ),
        (
            "Gt on a non-integer label",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("zone", "Gt", &["1"])]}])),
            ),
            false,
        ),
        (
            "Gt on an absent label",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [expr("disk", "Gt", &["1"])]}])),
            ),
            false,
        ),
        (
            "expressions of a term are ANDed",
            pod(
                Value::Null,
                required(json!([{"matchExpressions": [
                    expr("zone", "In", &["a"]),
                    expr("cores", "Lt", &["8"])
                ]}])),
            ),
            false,
        ),
        (
            "terms are ORed",
            pod(
                Value::Null,
                required(json!([
                    {"matchExpressions": [expr("zone", "In", &["b"])]},
                    {"matchExpressions": [expr("cores", "Gt", &["8"])]}
                ])),
            ),
            true,
        ),
        (
            "matchFields In the node's name",
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("In", "n1")]}])),
            ),
            true,
        ),
        (
            "matchFields In another name",
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("In", "n2")]}])),
            ),
            false,
        ),
        (
            "matchFields NotIn another name",
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("NotIn", "n2")]}])),
            ),
            true,
        ),
        (
            "matchFields and matchExpressions ANDed",
            pod(
                Value::Null,
                required(json!([{
                    "matchFields": [name_field("In", "n1")],
                    "matchExpressions": [expr("zone", "In", &["b"])]
                }])),
            ),
            false,
        ),
        (
            "no terms match nothing",
            pod(Value::Null, required(json!([]))),
            false,
        ),
        (
            "an empty term matches nothing",
            pod(Value::Null, required(json!([{}]))),
            false,
        ),
        (
            "an empty term ORed with a matching one",
            pod(
                Value::Null,
                required(json!([{}, {"matchExpressions": [expr("zone", "In", &["a"])]}])),
            ),
            true,
        ),
        (
            "nodeSelector and affinity both hold",
            pod(
                json!({"zone": "a"}),
                required(json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])),
            ),
            true,
        ),
        (
            "affinity holds but nodeSelector does not",
            pod(
                json!({"zone": "b"}),
                required(json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])),
            ),
            false,
        ),
        (
            "nodeSelector holds but affinity does not",
            pod(
                json!({"zone": "a"}),
                required(json!([{"matchExpressions": [expr("cores", "Gt", &["32"])]}])),
            ),
            false,
        ),
        (
            "preferred terms never filter",
            pod(
                Value::Null,
                json!({"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", &["b"])]}}
                ]}),
            ),
            true,
        ),
    ];
    let pl = plugin(json!({}));
    let st = CycleState::new();
    for (name, p, fits) in cases {
        let s = pl.filter(&st, &p, &n1);
        if fits {
            assert!(s.is_success(), "{name}: {s:?}");
        } else {
            assert_eq!(
                (s.code(), s.message().as_str()),
                (Code::UnschedulableAndUnresolvable, ERR_REASON_POD),
                "{name}"
            );
        }
    }
}

#[test]
fn added_affinity_is_enforced_first() {
    let pl = plugin(
        json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr("pool", "In", &["batch"])]}]}}}),
    );
    let st = CycleState::new();
    let batch = node("b", &[("pool", "batch"), ("zone", "a")]);
    let web = node("w", &[("pool", "web"), ("zone", "a")]);
    let cases = [
        (
            "matches both",
            pod(json!({"zone": "a"}), Value::Null),
            &batch,
            None,
        ),
        (
            "pod's own selector fails",
            pod(json!({"zone": "b"}), Value::Null),
            &batch,
            Some(ERR_REASON_POD),
        ),
        (
            "added affinity fails",
            pod(Value::Null, Value::Null),
            &web,
            Some(ERR_REASON_ENFORCED),
        ),
        (
            "both fail: the added affinity is reported",
            pod(json!({"zone": "b"}), Value::Null),
            &web,
            Some(ERR_REASON_ENFORCED),
        ),
    ];
    for (name, p, n, want) in cases {
        let s = pl.filter(&st, &p, n);
        match want {
            None => assert!(s.is_success(), "{name}: {s:?}"),
            Some(reason) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.message(), reason, "{name}");
            }
        }
    }
    assert!(
        pl.filter(&st, &pod(Value::Null, Value::Null), &NodeInfo::default())
            .is_error(),
        "deleted node"
    );
}

#[tokio::test]
async fn pre_filter_skips_and_pins_node_names() {
    fn names(list: &[&str]) -> Option<HashSet<Arc<str>>> {
        Some(list.iter().map(|n| Arc::from(*n)).collect())
    }
    let zone_a = || json!({"matchExpressions": [expr("zone", "In", &["a"])]});
    type Case = (
        &'static str,
        Value,
        PodInfo,
        Code,
        Option<HashSet<Arc<str>>>,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing to check",
            json!({}),
            pod(Value::Null, Value::Null),
            Code::Skip,
            None,
        ),
        (
            "only preferred terms",
            json!({}),
            pod(
                Value::Null,
                json!({"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": zone_a()}]}),
            ),
            Code::Skip,
            None,
        ),
        (
            "added affinity alone is something to check",
            json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [zone_a()]}}}),
            pod(Value::Null, Value::Null),
            Code::Success,
            None,
        ),
        (
            "nodeSelector alone",
            json!({}),
            pod(json!({"zone": "a"}), Value::Null),
            Code::Success,
            None,
        ),
        (
            "label terms do not pin names",
            json!({}),
            pod(Value::Null, required(json!([zone_a()]))),
            Code::Success,
            None,
        ),
        (
            "no terms",
            json!({}),
            pod(Value::Null, required(json!([]))),
            Code::Success,
            None,
        ),
        (
            "one term pins a name",
            json!({}),
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("In", "n1")]}])),
            ),
            Code::Success,
            names(&["n1"]),
        ),
        (
            "names of several terms are united",
            json!({}),
            pod(
                Value::Null,
                required(json!([
                    {"matchFields": [name_field("In", "n1")]},
                    {"matchFields": [name_field("In", "n2")], "matchExpressions": [expr("zone", "In", &["a"])]}
                ])),
            ),
            Code::Success,
            names(&["n1", "n2"]),
        ),
        (
            "a term without a name field lets every node in",
            json!({}),
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("In", "n1")]}, zone_a()])),
            ),
            Code::Success,
            None,
        ),
        (
            "NotIn does not pin",
            json!({}),
            pod(
                Value::Null,
                required(json!([{"matchFields": [name_field("NotIn", "n1")]}])),
            ),
            Code::Success,
            None,
        ),
        (
            "name fields of one term are intersected",
            json!({}),
            pod(
                Value::Null,
                required(
                    json!([{"matchFields": [name_field("In", "n1"), name_field("In", "n1")]}]),
                ),
            ),
            Code::Success,
            names(&["n1"]),
        ),
        (
            "conflicting name fields",
            json!({}),
            pod(
                Value::Null,
                required(
                    json!([{"matchFields": [name_field("In", "n1"), name_field("In", "n2")]}]),
                ),
            ),
            Code::UnschedulableAndUnresolvable,
            None,
        ),
        (
            "a conflicting term next to a pinning one",
            json!({}),
            pod(
                Value::Null,
                required(json!([
                    {"matchFields": [name_field("In", "n1"), name_field("In", "n2")]},
                    {"matchFields": [name_field("In", "n3")]}
                ])),
            ),
            Code::Success,
            names(&["n3"]),
        ),
    ];
    for (name, args, p, code, want) in cases {
        let pl = plugin(args);
        let (result, s) = pl.pre_filter(&mut CycleState::new(), &p, &[]).await;
        assert_eq!(s.code(), code, "{name}: {s:?}");
        if code == Code::UnschedulableAndUnresolvable {
            assert_eq!(s.message(), ERR_REASON_CONFLICT, "{name}");
        }
        assert_eq!(result.and_then(|r| r.node_names), want, "{name}");
    }
}

fn preferred(terms: Value) -> Value {
    json!({ "preferredDuringSchedulingIgnoredDuringExecution": terms })
}

async fn scores(pl: &NodeAffinity, p: &PodInfo, nodes: &[NodeInfo]) -> (Code, Vec<i64>, Vec<i64>) {
    let mut st = CycleState::new();
    let code = pl.pre_score(&mut st, p, &[]).await.code();
    let raw: Vec<i64> = nodes.iter().map(|n| pl.score(&st, p, n).unwrap()).collect();
    let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
    let mut list: Vec<NodeScore<'_>> = raw
        .iter()
        .zip(&names)
        .map(|(&score, name)| NodeScore { name, score })
        .collect();
    assert!(pl.normalize_score(&st, p, &mut list).is_success());
    (code, raw, list.iter().map(|s| s.score).collect())
}

#[tokio::test]
async fn score_sums_preferred_weights_and_normalizes() {
    let nodes = [
        node("n1", &[("foo", "bar")]),
        node("n2", &[("foo", "bar"), ("key", "value")]),
        node("n3", &[("foo", "bar"), ("key", "value"), ("az", "az1")]),
        node("n4", &[]),
    ];
    let terms = preferred(json!([
        {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
        {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
        {"weight": 5, "preference": {"matchExpressions": [
            expr("foo", "In", &["bar"]), expr("key", "In", &["value"]), expr("az", "In", &["az1"])
        ]}},
        {"weight": 0, "preference": {"matchExpressions": [expr("foo", "Exists", &[])]}},
        {"weight": 7, "preference": {"matchFields": [name_field("In", "n4")]}}
    ]));
    type Case<'a> = (&'a str, Value, PodInfo, Code, [i64; 4], [i64; 4]);
    let cases: Vec<Case<'_>> = vec![
        (
            "no preferences: Score is skipped",
            json!({}),
            pod(Value::Null, Value::Null),
            Code::Skip,
            [0; 4],
            [0; 4],
        ),
        (
            "weights of matching terms add up; zero weights do not count",
            json!({}),
            pod(Value::Null, terms.clone()),
            Code::Success,
            [2, 6, 11, 7],
            [18, 54, 100, 63],
        ),
        (
            "no node matches",
            json!({}),
            pod(
                Value::Null,
                preferred(
                    json!([{"weight": 3, "preference": {"matchExpressions": [expr("x", "Exists", &[])]}}]),
                ),
            ),
            Code::Success,
            [0; 4],
            [0; 4],
        ),
        (
            "added preferred terms add to the pod's",
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 9, "preference": {"matchExpressions": [expr("foo", "DoesNotExist", &[])]}}]}}),
            pod(Value::Null, terms.clone()),
            Code::Success,
            [2, 6, 11, 16],
            [12, 37, 68, 100],
        ),
        (
            "added preferred terms alone",
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [expr("az", "Exists", &[])]}}]}}),
            pod(Value::Null, Value::Null),
            Code::Success,
            [0, 0, 10, 0],
            [0, 0, 100, 0],
        ),
        (
            "added preferred terms of weight zero still run Score",
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 0, "preference": {"matchExpressions": [expr("az", "Exists", &[])]}}]}}),
            pod(Value::Null, Value::Null),
            Code::Success,
            [0; 4],
            [0; 4],
        ),
    ];
    for (name, args, p, code, raw, normalized) in cases {
        let (got_code, got_raw, got_norm) = scores(&plugin(args), &p, &nodes).await;
        assert_eq!(got_code, code, "{name}");
        assert_eq!(got_raw, raw, "{name}");
        assert_eq!(got_norm, normalized, "{name}");
    }
}

#[test]
fn events_and_hints() {
    let as_node = |name: &str, labels: &[(&str, &str)]| -> Option<EventObject> {
        let mut b = make_node(name);
        for (k, v) in labels {
            b = b.label(k, v);
        }
        Some(EventObject::Node(Arc::new(b.build())))
    };
    let plain = plugin(json!({}));
    let regs = plain.events_to_register().unwrap();
    assert_eq!(regs.len(), 1);
    assert_eq!(
        regs[0].event,
        ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL
        )
    );
    let hint = regs[0].hint.clone().unwrap();
    let enforced = plugin(
        json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr("pool", "In", &["batch"])]}]}}}),
    );
    let enforced_hint = enforced.events_to_register().unwrap()[0]
        .hint
        .clone()
        .unwrap();

    let wants_a = pod(json!({"zone": "a"}), Value::Null);
    let wants_n1 = pod(
        Value::Null,
        required(json!([{"matchFields": [name_field("In", "n1")]}])),
    );
    let any = pod(Value::Null, Value::Null);
    let a = as_node("n1", &[("zone", "a")]);
    let a_batch = as_node("n1", &[("zone", "a"), ("pool", "batch")]);
    let b = as_node("n1", &[("zone", "b")]);
    let other = as_node("n2", &[("zone", "a")]);
    type Case<'a> = (
        &'a str,
        &'a QueueingHintFnRef,
        &'a PodInfo,
        &'a Option<EventObject>,
        &'a Option<EventObject>,
        QueueingHint,
    );
    type QueueingHintFnRef = crate::framework::QueueingHintFn;
    let none = None;
    let cases: Vec<Case<'_>> = vec![
        (
            "matching node added",
            &hint,
            &wants_a,
            &none,
            &a,
            QueueingHint::Queue,
        ),
        (
            "other node added",
            &hint,
            &wants_a,
            &none,
            &b,
            QueueingHint::Skip,
        ),
        (
            "label now matches",
            &hint,
            &wants_a,
            &b,
            &a,
            QueueingHint::Queue,
        ),
        (
            "label no longer matches",
            &hint,
            &wants_a,
            &a,
            &b,
            QueueingHint::Skip,
        ),
        (
            "matched before and after",
            &hint,
            &wants_a,
            &a,
            &a_batch,
            QueueingHint::Skip,
        ),
        (
            "name field matches the added node",
            &hint,
            &wants_n1,
            &none,
            &a,
            QueueingHint::Queue,
        ),
        (
            "name field does not",
            &hint,
            &wants_n1,
            &none,
            &other,
            QueueingHint::Skip,
        ),
        (
            "pod without affinity, node added",
            &hint,
            &any,
            &none,
            &a,
            QueueingHint::Queue,
        ),
        (
            "pod without affinity, node updated",
            &hint,
            &any,
            &a,
            &b,
            QueueingHint::Skip,
        ),
        (
            "added affinity not met",
            &enforced_hint,
            &any,
            &none,
            &a,
            QueueingHint::Skip,
        ),
        (
            "added affinity met",
            &enforced_hint,
            &any,
            &none,
            &a_batch,
            QueueingHint::Queue,
        ),
        (
            "added affinity now met, pod's was already",
            &enforced_hint,
            &wants_a,
            &a,
            &a_batch,
            QueueingHint::Skip,
        ),
    ];
    for (name, h, p, old, new, want) in cases {
        assert_eq!(h(p, old.as_ref(), new.as_ref()).unwrap(), want, "{name}");
    }
    assert!(hint(&any, None, None).is_err(), "no node");
}

#[test]
fn registered_under_upstream_name_with_args() {
    let registry = crate::plugins::in_tree_registry();
    let factory = registry.get(NODE_AFFINITY).expect("registered");
    let handle = crate::framework::Handle::new(
        crate::cluster::embedded::EmbeddedCluster::new(),
        crate::cluster::embedded::EmbeddedCluster::new(),
        crate::framework::Parallelizer::inline(),
    );
    let pl = factory(
        Some(
            &json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr("pool", "In", &["batch"])]}]}}}),
        ),
        "args",
        &handle,
    )
    .unwrap();
    assert_eq!(pl.name(), NODE_AFFINITY);
    let filter = pl.clone().as_filter().unwrap();
    assert_eq!(
        filter
            .filter(
                &CycleState::new(),
                &pod(Value::Null, Value::Null),
                &node("n", &[])
            )
            .message(),
        ERR_REASON_ENFORCED
    );
    assert!(pl.clone().as_pre_filter().is_some());
    assert!(pl.clone().as_pre_score().is_some());
    assert!(pl.as_score().unwrap().score_extensions().is_some());
    let err = factory(
        Some(
            &json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr("pool", "In", &[])]}]}}}),
        ),
        "profiles[0].pluginConfig[2].args",
        &handle,
    )
    .err()
    .unwrap();
    assert_eq!(
        err.path,
        "profiles[0].pluginConfig[2].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"
    );
}
