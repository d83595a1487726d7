use serde_json::json;

use super::*;
use crate::framework::Code;
use crate::testing::{make_node, make_pod};

fn plugin(args: serde_json::Value) -> NodeResourcesBalancedAllocation {
    NodeResourcesBalancedAllocation::new(
        NodeResourcesBalancedAllocationArgs::parse(Some(&args), "args").unwrap(),
    )
    .unwrap()
}

/// A node with `cpu` and `memory` allocatable (and a few extras), running
/// pods that request the given (cpu, memory); empty strings request nothing.
fn node(cpu: &str, memory: &str, pods: &[(&str, &str)]) -> NodeInfo {
    let mut b = make_node("n")
        .cpu(cpu)
        .alloc("example.com/gpu", "4")
        .alloc("ephemeral-storage", "1000");
    if !memory.is_empty() {
        b = b.memory(memory);
    }
    let mut n = NodeInfo::new(Arc::new(b.build()));
    for (i, (c, m)) in pods.iter().enumerate() {
        let mut p = make_pod(&format!("running-{i}")).node("n");
        if !c.is_empty() {
            p = p.req_cpu(c);
        }
        if !m.is_empty() {
            p = p.req_memory(m);
        }
        n.add_pod(Arc::new(p.build()));
    }
    n
}

/// Runs PreScore then Score; the PreScore code and the score (None when
/// skipped).
async fn run(
    pl: &NodeResourcesBalancedAllocation,
    pod: &PodInfo,
    n: &NodeInfo,
) -> (Code, Option<i64>) {
    let mut st = CycleState::new();
    let s = pl.pre_score(&mut st, pod, &[]).await;
    if s.is_skip() {
        return (Code::Skip, None);
    }
    (s.code(), Some(pl.score(&st, pod, n).unwrap()))
}

#[tokio::test]
async fn scores_the_change_in_balance() {
    let cpu_mem = json!({});
    let with_gpu =
        json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "example.com/gpu"}]});
    let with_storage =
        json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "ephemeral-storage"}]});
    let untracked = json!({"resources": [{"name": "cpu"}, {"name": "pods"}]});
    let only_untracked = json!({"resources": [{"name": "pods"}]});
    let with_fpga =
        json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "example.com/fpga"}]});
    type Case<'a> = (
        &'a str,
        &'a serde_json::Value,
        NodeInfo,
        PodInfo,
        Option<i64>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            // with the pod: cpu 1/4, memory 1/2 -> std 0.125 -> 87; without: 100.
            "empty node made less balanced",
            &cpu_mem,
            node("4", "10000", &[]),
            make_pod("p").req_cpu("1").req_memory("5000").build(),
            Some(68),
        ),
        (
            // without: 1/2, 1/4 -> 87; with: 3/4, 3/4 -> 100.
            "the pod evens the node out",
            &cpu_mem,
            node("4", "10000", &[("2", "2500")]),
            make_pod("p").req_cpu("1").req_memory("5000").build(),
            Some(81),
        ),
        (
            // without: 1/4, 9/10 -> std 0.325 -> 67; with: 1/2, 9/10 -> 80.
            "requesting only cpu still counts memory",
            &cpu_mem,
            node("4", "10000", &[("1", "9000")]),
            make_pod("p").req_cpu("1").build(),
            Some(81),
        ),
        (
            // without: 3/4, 1/10 -> 67; with: 3/4, 1/2 -> 87.
            "requesting only memory",
            &cpu_mem,
            node("4", "10000", &[("3", "1000")]),
            make_pod("p").req_memory("4000").build(),
            Some(85),
        ),
        (
            // with: both over capacity, capped at 1 -> 100; without: 3/4, 9/10 -> 92.
            "fractions are capped at 1",
            &cpu_mem,
            node("4", "10000", &[("3", "9000")]),
            make_pod("p").req_cpu("2").req_memory("5000").build(),
            Some(79),
        ),
        (
            "pods without requests on the node count nothing",
            &cpu_mem,
            node("4", "10000", &[("", ""), ("", "")]),
            make_pod("p").req_cpu("1").req_memory("5000").build(),
            Some(68),
        ),
        (
            "a resource the node lacks is left out",
            &cpu_mem,
            node("4", "", &[]),
            make_pod("p").req_cpu("1").req_memory("5000").build(),
            Some(75),
        ),
        (
            // with: 1/4, 1/2, 1/4 -> std 0.1179 -> 88; without: 100.
            "three resources use the full standard deviation",
            &with_gpu,
            node("4", "10000", &[]),
            make_pod("p")
                .req_cpu("1")
                .req_memory("5000")
                .req("example.com/gpu", "1")
                .build(),
            Some(69),
        ),
        (
            "an extended resource the pod does not request is left out",
            &with_gpu,
            node("4", "10000", &[]),
            make_pod("p").req_cpu("1").req_memory("5000").build(),
            Some(68),
        ),
        (
            "an extended resource the node lacks is left out",
            &with_fpga,
            node("4", "10000", &[]),
            make_pod("p")
                .req_cpu("1")
                .req_memory("5000")
                .req("example.com/fpga", "1")
                .build(),
            Some(68),
        ),
        (
            "ephemeral storage",
            &with_storage,
            node("4", "10000", &[]),
            make_pod("p")
                .req_cpu("2")
                .req("ephemeral-storage", "500")
                .build(),
            Some(75),
        ),
        (
            "untracked resources are never scored",
            &untracked,
            node("4", "10000", &[]),
            make_pod("p").req_cpu("1").build(),
            Some(75),
        ),
        (
            "a pod without requests is skipped",
            &cpu_mem,
            node("4", "10000", &[]),
            make_pod("p").build(),
            None,
        ),
        (
            "a pod requesting only other resources is skipped",
            &cpu_mem,
            node("4", "10000", &[]),
            make_pod("p").req("example.com/gpu", "1").build(),
            None,
        ),
        (
            "nothing requested of untracked resources",
            &only_untracked,
            node("4", "10000", &[]),
            make_pod("p").req_cpu("1").build(),
            None,
        ),
    ];
    for (name, args, n, p, want) in cases {
        let (code, score) = run(&plugin(args.clone()), &p, &n).await;
        assert_eq!(score, want, "{name}");
        assert_eq!(code == Code::Skip, want.is_none(), "{name}");
    }
}

#[test]
fn score_without_pre_score_computes_the_requests() {
    let pl = plugin(json!({}));
    let n = node("4", "10000", &[("2", "2500")]);
    let st = CycleState::new();
    let p = make_pod("p").req_cpu("1").req_memory("5000").build();
    assert_eq!(pl.score(&st, &p, &n).unwrap(), 81);
    assert_eq!(
        pl.score(&st, &make_pod("e").build(), &n).unwrap(),
        0,
        "best-effort pods score 0"
    );
    let none = NodeResourcesBalancedAllocation::new(NodeResourcesBalancedAllocationArgs {
        resources: vec![],
    })
    .unwrap();
    assert!(none.score(&st, &p, &n).unwrap_err().is_error());
}

#[test]
fn balance_of_fractions() {
    let cases: &[(&[f64], i64)] = &[
        (&[], 100),
        (&[0.3], 100),
        (&[0.2, 0.6], 80),
        (&[0.6, 0.2], 80),
        (&[0.5, 0.5, 0.5], 100),
        (&[0.0, 1.0, 0.0, 1.0], 50),
    ];
    for (fractions, want) in cases {
        assert_eq!(balance(fractions.iter().copied()), *want, "{fractions:?}");
    }
}

#[test]
fn args_defaults_and_validation() {
    let parse = |v: serde_json::Value| {
        NodeResourcesBalancedAllocationArgs::parse(Some(&v), "profiles[0].pluginConfig[3].args")
    };
    let cpu_mem = NodeResourcesBalancedAllocationArgs::default();
    assert_eq!(
        NodeResourcesBalancedAllocationArgs::parse(None, "x").unwrap(),
        cpu_mem
    );
    assert_eq!(parse(json!({"resources": []})).unwrap(), cpu_mem);
    assert_eq!(
        parse(json!({"kind": "NodeResourcesBalancedAllocationArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"}))
            .unwrap(),
        cpu_mem
    );
    assert_eq!(
        parse(json!({"resources": [{"name": "cpu", "weight": 0}, {"name": "example.com/gpu"}]}))
            .unwrap()
            .resources,
        vec![
            ResourceSpec {
                name: "cpu".into(),
                weight: 1
            },
            ResourceSpec {
                name: "example.com/gpu".into(),
                weight: 1
            },
        ]
    );
    let cases = [
        (
            json!({"resources": [{"name": "cpu", "weight": 2}]}),
            "profiles[0].pluginConfig[3].args.resources[0].weight: Invalid value: 2: must be 1",
        ),
        (
            json!({"resources": [{"name": "cpu"}, {"name": "memory", "weight": -1}]}),
            "profiles[0].pluginConfig[3].args.resources[1].weight: Invalid value: -1: must be 1",
        ),
        (
            json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "cpu"}]}),
            "profiles[0].pluginConfig[3].args.resources[2].name: Duplicate value: \"cpu\"",
        ),
        (
            json!({"kind": "NodeResourcesFitArgs"}),
            "profiles[0].pluginConfig[3].args.kind: expected \"NodeResourcesBalancedAllocationArgs\", got \"NodeResourcesFitArgs\"",
        ),
    ];
    for (v, want) in cases {
        assert_eq!(parse(v.clone()).unwrap_err().to_string(), want, "{v}");
    }
    assert!(
        parse(json!({"resources": [{"name": "cpu", "wieght": 1}]})).is_err(),
        "unknown fields are refused"
    );
}

#[test]
fn plugin_surface() {
    let pl: Arc<dyn Plugin> = Arc::new(plugin(json!({})));
    assert_eq!(pl.name(), NODE_RESOURCES_BALANCED_ALLOCATION);
    assert!(pl.clone().as_filter().is_none());
    assert!(pl.clone().as_pre_score().is_some());
    assert!(pl.as_score().unwrap().score_extensions().is_none());
}
