//! `why`'s answers rendered from made-up responses: every line a reader
//! depends on.

use super::*;
use crate::pb::{self, FilterResult, Preemption};

fn pod(extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db", "namespace": "data", "uid": "u-1",
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    });
    if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            p.insert(k.clone(), v.clone());
        }
    }
    p
}

fn node(name: &str, verdict: NodeVerdict, filters: &[(&str, &str, &[&str])]) -> NodeResult {
    NodeResult {
        node: name.into(),
        verdict: verdict as i32,
        filters: filters
            .iter()
            .map(|(p, c, r)| FilterResult {
                plugin: p.to_string(),
                code: c.to_string(),
                reasons: r.iter().map(|s| s.to_string()).collect(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn the_profile_is_the_flag_then_the_pods_own_then_berths_only_one() {
    let p = pod(json!({"spec": {"schedulerName": "berth", "containers": []}}));
    let berth = vec!["berth".to_string()];
    let two = vec!["a".to_string(), "berth".to_string()];
    assert_eq!(choose_profile(&p, "", &berth).unwrap(), "berth");
    assert_eq!(choose_profile(&p, "a", &two).unwrap(), "a");
    let e = choose_profile(&p, "x", &two).unwrap_err().to_string();
    assert_eq!(e, "berth has no profile \"x\" (its profiles: a, berth)");
    // A pod of another scheduler is asked of berth's only profile...
    let other = pod(json!({}));
    assert_eq!(choose_profile(&other, "", &berth).unwrap(), "berth");
    // ...and, with several, the user says which.
    let e = choose_profile(&other, "", &two).unwrap_err().to_string();
    assert!(
        e.contains("\"default-scheduler\" is not one of berth's profiles (a, berth)"),
        "{e}"
    );
}

#[test]
fn managed_fields_are_not_sent() {
    let p = for_dry_run(&pod(json!({})));
    assert!(p["metadata"].get("managedFields").is_none());
    assert_eq!(p["metadata"]["name"], "db");
}

#[test]
fn verdicts_read_by_their_enum_names() {
    assert_eq!(verdict_name(NodeVerdict::Feasible as i32), "feasible");
    assert_eq!(
        verdict_name(NodeVerdict::NotEvaluated as i32),
        "not evaluated"
    );
    assert_eq!(verdict_name(99), "verdict 99");
}

#[test]
fn a_pod_that_fits_nowhere_names_each_nodes_first_rejecting_plugin() {
    let d = DryRunResponse {
        profile: "default-scheduler".into(),
        message: "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."
            .into(),
        nodes: vec![
            node(
                "b",
                NodeVerdict::Unschedulable,
                &[
                    ("NodeUnschedulable", "Success", &[]),
                    ("NodeResourcesFit", "Unschedulable", &["Insufficient cpu"]),
                ],
            ),
            node(
                "a",
                NodeVerdict::Unresolvable,
                &[
                    (
                        "NodeUnschedulable",
                        "UnschedulableAndUnresolvable",
                        &["node(s) were unschedulable"],
                    ),
                    ("NodeResourcesFit", "NotEvaluated", &[]),
                ],
            ),
        ],
        evaluated_nodes: 2,
        preemption: Some(Preemption {
            message:
                "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
                    .into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let why = Why {
        pod: pod(json!({})),
        profile: "default-scheduler".into(),
        queue: Some(QueuedPod {
            namespace: "data".into(),
            name: "db".into(),
            uid: "u-1".into(),
            queue: QueueName::Unschedulable as i32,
            attempts: 3,
            last_failure: "0/2 nodes are available".into(),
            unschedulable_plugins: vec!["NodeResourcesFit".into()],
            nominated_node_name: "b".into(),
            ..Default::default()
        }),
        dry_run: Some(d),
    };
    assert!(!why.fits());
    let text = render(&why, false).unwrap();
    assert!(
        text.starts_with("Pod data/db, scheduler default-scheduler\n"),
        "{text}"
    );
    assert!(
        text.contains("In berth's queue: unschedulable, 3 attempts\n"),
        "{text}"
    );
    assert!(
        text.contains("  last failure: 0/2 nodes are available\n"),
        "{text}"
    );
    // A field this module does not name reads as it comes.
    assert!(text.contains("  nominatedNodeName: b\n"), "{text}");
    assert!(
        text.contains("Now: does not fit. 0/2 nodes are available: 1 Insufficient cpu"),
        "{text}"
    );
    assert!(
        text.contains("Preemption would not help: preemption: 0/2"),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODES"))
        .map(cells)
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert_eq!(
        rows[1],
        [
            "1",
            "unresolvable",
            "NodeUnschedulable",
            "node(s) were unschedulable",
            "a"
        ],
        "{text}"
    );
    assert_eq!(
        rows[2],
        [
            "1",
            "unschedulable",
            "NodeResourcesFit",
            "Insufficient cpu",
            "b"
        ],
        "{text}"
    );

    let v = to_value(&why).unwrap();
    assert_eq!(v["fits"], false);
    assert_eq!(v["queue"]["queue"], "QUEUE_NAME_UNSCHEDULABLE");
    assert_eq!(
        v["dryRun"]["nodes"][0]["verdict"],
        "NODE_VERDICT_UNSCHEDULABLE"
    );
    assert_eq!(v["pod"]["schedulerName"], "default-scheduler");
}

/// The cells of a table line (columns are separated by 3+ spaces).
fn cells(line: &str) -> Vec<&str> {
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// Issue 36, item 3: at 300 nodes, a pod whose volume pins it to one
/// full node gets a few rows, not 300: the nodes VolumeBinding's
/// PreFilter left out are one row naming it and what it kept.
#[test]
fn nodes_left_out_at_pre_filter_are_one_row_naming_the_plugin() {
    let mut nodes: Vec<NodeResult> = (0..300)
        .map(|i| node(&format!("n-{i:03}"), NodeVerdict::NotEvaluated, &[]))
        .collect();
    nodes[117] = node(
        "n-117",
        NodeVerdict::Unschedulable,
        &[("NodeResourcesFit", "Unschedulable", &["Insufficient cpu"])],
    );
    let d = DryRunResponse {
        message: "0/300 nodes are available: 1 Insufficient cpu, 299 node(s) didn't satisfy plugin(s) [VolumeBinding].".into(),
        pre_filter: vec![
            crate::pb::PluginResult {
                plugin: "NodeAffinity".into(),
                code: "Success".into(),
                ..Default::default()
            },
            crate::pb::PluginResult {
                plugin: "VolumeBinding".into(),
                code: "Success".into(),
                node_names: vec!["n-117".into()],
                ..Default::default()
            },
        ],
        nodes,
        evaluated_nodes: 1,
        ..Default::default()
    };
    let why = Why {
        pod: pod(json!({})),
        profile: "default-scheduler".into(),
        queue: None,
        dry_run: Some(d),
    };
    let text = render(&why, false).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODES"))
        .skip(1)
        .map(cells)
        .collect();
    assert_eq!(
        rows,
        [
            vec![
                "1",
                "unschedulable",
                "NodeResourcesFit",
                "Insufficient cpu",
                "n-117"
            ],
            vec![
                "299",
                "excluded",
                "VolumeBinding",
                "PreFilter kept only n-117 (the node affinity of the pod's bound local PersistentVolumes)",
                "n-000, n-001, n-002 and 296 more"
            ],
        ],
        "{text}"
    );
    assert!(text.lines().count() < 12, "{text}");
    // The wide view lists every node, the excluded ones with the
    // plugin that left them out.
    let wide = render(&why, true).unwrap();
    let listed: Vec<&str> = wide
        .lines()
        .skip_while(|l| !l.starts_with("NODE "))
        .skip(1)
        .collect();
    assert_eq!(listed.len(), 300, "{wide}");
    assert!(
        listed.iter().any(|l| l.starts_with("n-000 ")
            && l.ends_with("excluded by VolumeBinding: PreFilter kept only n-117 (the node affinity of the pod's bound local PersistentVolumes)")),
        "{wide}"
    );
}

#[test]
fn a_gated_pod_does_not_fit_now_even_where_a_node_would_take_it() {
    let why = Why {
        pod: pod(
            json!({"spec": {"containers": [], "schedulingGates": [{"name": "example.com/quota"}]}}),
        ),
        profile: "default-scheduler".into(),
        queue: None,
        dry_run: Some(DryRunResponse {
            selected_node: "a".into(),
            nodes: vec![node(
                "a",
                NodeVerdict::Feasible,
                &[("NodeName", "Success", &[])],
            )],
            feasible_nodes: 1,
            ..Default::default()
        }),
    };
    assert!(!why.fits());
    let text = render(&why, false).unwrap();
    assert!(
        text.contains("Waiting for scheduling gates: [example.com/quota]"),
        "{text}"
    );
    assert!(
        text.contains(
            "Now: gated. Once its gates are removed berth would schedule it to a (1 of 1 nodes feasible)."
        ),
        "{text}"
    );
}

#[test]
fn an_incomplete_dry_run_is_not_a_fit() {
    // Issue 28, item 1, through `why`: a non-ignorable extender down
    // leaves a node unjudged; even with a node selected by an older
    // berthd, the answer says it is incomplete and `why` exits 1.
    let why = Why {
        pod: pod(json!({"spec": {"containers": []}})),
        profile: "default-scheduler".into(),
        queue: None,
        dry_run: Some(DryRunResponse {
            selected_node: String::new(),
            message: "extender \"x\" failed at Filter: not connected".into(),
            nodes: vec![node("a", NodeVerdict::Unknown, &[("x", "Error", &[])])],
            completeness: crate::pb::Completeness::Incomplete as i32,
            incomplete: vec![crate::pb::PluginNote {
                plugin: "x".into(),
                point: "Filter".into(),
                reason: "extender \"x\" failed at Filter: not connected".into(),
                nodes: 1,
                pods: 0,
            }],
            ..Default::default()
        }),
    };
    assert!(!why.fits());
    let text = render(&why, false).unwrap();
    assert!(
        text.contains("Now: cannot tell: the answer is incomplete (x at Filter:"),
        "{text}"
    );
    // The "Now:" line is the answer's completeness: the enum is not
    // printed again beneath it, complete or not.
    assert!(!text.contains("completeness"), "{text}");
    let mut complete = why.clone();
    let d = complete.dry_run.as_mut().unwrap();
    d.completeness = crate::pb::Completeness::Complete as i32;
    d.incomplete.clear();
    d.nodes.clear();
    let text = render(&complete, false).unwrap();
    assert!(text.contains("Now: does not fit."), "{text}");
    assert!(!text.contains("completeness"), "{text}");
    // An answer without `completeness` (an older berthd) with an
    // unknown verdict is incomplete too, even if it selected a node.
    let mut older = why.clone();
    let d = older.dry_run.as_mut().unwrap();
    d.completeness = 0;
    d.selected_node = "a".into();
    assert!(!older.fits());
}

fn group_pod(name: &str, node: &str, placed: bool, message: &str) -> pb::PodGroupPodResult {
    pb::PodGroupPodResult {
        namespace: "ml".into(),
        name: name.into(),
        node: node.into(),
        placed,
        message: message.into(),
        ..Default::default()
    }
}

fn group_why(g: PodGroupDryRun) -> Why {
    Why {
        pod: pod(json!({"metadata": {"name": "w-0", "namespace": "ml"}})),
        profile: "default-scheduler".into(),
        queue: None,
        dry_run: Some(DryRunResponse {
            profile: "default-scheduler".into(),
            message: g.message.clone(),
            pod_group: Some(g),
            ..Default::default()
        }),
    }
}

#[test]
fn a_gang_that_fits_says_where_each_pod_would_go() {
    let why = group_why(PodGroupDryRun {
        namespace: "ml".into(),
        name: "train".into(),
        fits: true,
        code: "Success".into(),
        min_count: 2,
        scheduled_pods: 1,
        pods: vec![
            group_pod("w-1", "n2", true, ""),
            group_pod("w-0", "n1", true, ""),
        ],
        ..Default::default()
    });
    assert!(why.fits());
    let text = render(&why, false).unwrap();
    let gang = text.split_once("\n\n").unwrap().1;
    assert_eq!(
        gang,
        "Gang ml/train needs 2 pods (minCount): 3 exist, 1 placed.\n\
         Now: fits: the whole group would be scheduled.\n\
         POD              NODE   RESULT\n\
         w-1              n2     would be bound\n\
         w-0 (this pod)   n1     would be bound\n"
    );
}

#[test]
fn a_pod_whose_pod_group_is_unknown_waits_and_does_not_fit() {
    let msg = "waiting for pods's pod group \"ghost\" to appear in scheduling queue";
    let why = group_why(PodGroupDryRun {
        namespace: "ml".into(),
        name: "ghost".into(),
        code: "UnschedulableAndUnresolvable".into(),
        message: msg.into(),
        pods: vec![group_pod("w-0", "", false, msg)],
        pre_enqueue: Some(pb::PluginResult {
            plugin: "GangScheduling".into(),
            code: "UnschedulableAndUnresolvable".into(),
            reasons: vec![msg.into()],
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(!why.fits());
    let text = render(&why, false).unwrap();
    assert!(
        text.ends_with(&format!(
            "\n\nPodGroup ml/ghost: not known to berth; 1 pod names it.\n\
             Now: waits: GangScheduling holds it, {msg}.\n"
        )),
        "{text}"
    );
}

#[test]
fn a_bound_pod_fits_and_is_not_dry_run() {
    let why = Why {
        pod: pod(json!({"spec": {"containers": [], "nodeName": "n1"}})),
        profile: "default-scheduler".into(),
        queue: None,
        dry_run: None,
    };
    assert!(why.fits());
    assert!(
        render(&why, false)
            .unwrap()
            .contains("Bound to n1: nothing to explain.")
    );
}
