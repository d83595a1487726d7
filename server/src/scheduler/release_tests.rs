//! The scheduler end to end in process under v1.37's rules (and v1.36's,
//! where a gate brings them back): what a Filter error does to the cycle,
//! how pods get their priority from PriorityClasses. Paused time; tests
//! wait on the decision stream.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::features::FeatureGates;
use crate::plugins::in_tree_registry;

struct Env {
    cluster: Arc<EmbeddedCluster>,
    decisions: Decisions,
    _scheduler: Scheduler,
}

impl Env {
    async fn start(gates: FeatureGates, objects: Vec<serde_json::Value>) -> Self {
        let cluster = EmbeddedCluster::new();
        for o in objects {
            cluster.apply(o).unwrap();
        }
        let registry = in_tree_registry();
        let cfg = config::default_config_gated(&|n| registry.contains(n), &gates);
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
        Self {
            cluster,
            decisions,
            _scheduler: scheduler,
        }
    }

    async fn next(&mut self) -> Decision {
        self.decisions.recv().await.expect("scheduler running")
    }
}

fn node(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
}

fn slice(node: &str, devices: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu")},
        "spec": {"driver": "gpu.example.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

#[tokio::test(start_paused = true)]
async fn a_filter_error_ends_the_cycle_with_that_error() {
    // The class reads an attribute the device on n2 lacks: evaluating it
    // there is a CEL runtime error, which fails the whole cycle as
    // upstream's framework fails it, even though n1 would fit.
    let model = json!({"model": {"string": "a100"}});
    let mut env = Env::start(
        FeatureGates::default(),
        vec![
            node("n1"),
            node("n2"),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "a100"},
                   "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].model == 'a100'"}}]}}),
            slice("n1", json!([{"name": "gpu-0", "attributes": model}])),
            slice("n2", json!([{"name": "gpu-0"}])),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "gpu", "namespace": "default"},
                   "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100"}}]}}}),
        ],
    )
    .await;
    env.cluster
        .apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                      "spec": {"containers": [{"name": "c", "image": "x"}],
                               "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}}))
        .unwrap();
    match env.next().await {
        Decision::Failed {
            pod,
            reason,
            message,
            ..
        } => {
            assert_eq!(pod, "default/p");
            assert_eq!(reason, "SchedulerError");
            assert!(
                message.starts_with("running \"DynamicResources\" filter plugin: ")
                    && message.contains("CEL runtime error: no such key: model"),
                "{message}"
            );
        }
        other => panic!("the pod was placed: {other:?}"),
    }
    assert!(
        env.cluster
            .get_pod("default", "p")
            .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
            .is_none()
    );
    // A dry run of the same pod ends there too: no node chosen, the error
    // as its answer, whatever node it judged first.
    for all_nodes in [false, true] {
        let mut dry: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": "default", "uid": "dry"},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}}))
        .unwrap();
        crate::model::admission::admit_pod(&mut dry).unwrap();
        let info = crate::model::PodInfo::new(Arc::new(dry)).unwrap();
        let report = env._scheduler.dry_run(info, None, all_nodes).await.unwrap();
        assert_eq!(report.selected, None, "all_nodes {all_nodes}");
        assert!(
            report
                .message
                .contains("CEL runtime error: no such key: model"),
            "{}",
            report.message
        );
        assert!(report.preemption.is_none());
    }
}

fn class(name: &str, value: i32, default: bool) -> serde_json::Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
           "value": value, "globalDefault": default})
}

fn pod(name: &str, cpu: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

fn priority_of(cluster: &EmbeddedCluster, name: &str) -> Option<i32> {
    cluster
        .get_pod("default", name)
        .and_then(|p| p.spec.as_ref().and_then(|s| s.priority))
}

#[tokio::test(start_paused = true)]
async fn pods_take_their_priority_from_their_priority_class() {
    // In a cluster file, the class may come after the pods that name it.
    let text = [
        pod("low", "4", json!({"nodeName": "n1"})),
        pod(
            "critical",
            "1",
            json!({"priorityClassName": "system-node-critical"}),
        ),
        node("n1"),
        class("high", 1000, false),
        class("batch", 10, true),
    ]
    .iter()
    .map(|v| serde_yaml::to_string(v).unwrap())
    .collect::<Vec<_>>()
    .join("---\n");
    let cluster = EmbeddedCluster::from_objects(
        crate::cluster::embedded::parse_objects(&text, "cluster.yaml").unwrap(),
    )
    .unwrap();
    // The global default class for a pod naming none; the built-in class.
    assert_eq!(priority_of(&cluster, "low"), Some(10));
    assert_eq!(priority_of(&cluster, "critical"), Some(2_000_001_000));

    // A class that does not exist: the API server's Forbidden.
    let e = cluster
        .apply(pod("lost", "1", json!({"priorityClassName": "nope"})))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "pods \"lost\" is forbidden: no PriorityClass with name nope was found"
    );
    let e = EmbeddedCluster::from_objects(
        crate::cluster::embedded::parse_objects(
            &serde_yaml::to_string(&pod("lost", "1", json!({"priorityClassName": "nope"})))
                .unwrap(),
            "f.yaml",
        )
        .unwrap(),
    )
    .err()
    .unwrap();
    assert!(
        e.to_string()
            .contains("pods \"lost\" is forbidden: no PriorityClass with name nope was found"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_naming_only_a_high_class_preempts_in_a_cycle_and_a_dry_run() {
    let mut env = Env::start(
        FeatureGates::default(),
        vec![
            node("n1"),
            class("high", 1000, false),
            pod("low", "4", json!({"nodeName": "n1"})),
        ],
    )
    .await;
    // A dry run of the pod as a user gives it: priority from its class,
    // so preemption finds the node.
    let mut dry: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(pod("high", "2", json!({"priorityClassName": "high"}))).unwrap();
    crate::model::admission::admit_pod(&mut dry).unwrap();
    env._scheduler.admit_priority(&mut dry).unwrap();
    dry.metadata.uid = Some("dry".into());
    let info = crate::model::PodInfo::new(Arc::new(dry)).unwrap();
    assert_eq!(info.priority, 1000);
    let report = env._scheduler.dry_run(info, None, false).await.unwrap();
    let p = report.preemption.expect("preemption tried");
    assert_eq!(p.nominated_node.as_deref(), Some("n1"), "{}", p.message);

    // The same pod created: it preempts, then binds.
    env.cluster
        .apply(pod("high", "2", json!({"priorityClassName": "high"})))
        .unwrap();
    assert_eq!(priority_of(&env.cluster, "high"), Some(1000));
    match env.next().await {
        Decision::Failed { pod, message, .. } => {
            assert_eq!(pod, "default/high");
            assert!(
                message.ends_with(
                    "preemption: found a potential placement for pod on node n1, preempting 1 victims"
                ),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    match env.next().await {
        Decision::Scheduled { pod, node } => {
            assert_eq!((pod.as_str(), node.as_str()), ("default/high", "n1"))
        }
        other => panic!("{other:?}"),
    }
}

/// A claim allocated `gpu-0` of n1's 4 devices and reserved for `holder`
/// (or `reserved_for`'s pod), as a snapshot of a cluster holds it.
fn allocated_claim(name: &str, device: &str, reserved_for: (&str, &str)) -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": name, "namespace": "default", "finalizers": ["resource.kubernetes.io/delete-protection"]},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    "status": {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
        },
        "reservedFor": [{"resource": "pods", "name": reserved_for.0, "uid": reserved_for.1}]
    }})
}

fn dra_file(order: &[usize], extra: Vec<serde_json::Value>) -> String {
    let gpus: Vec<serde_json::Value> = (0..4)
        .map(|i| json!({"name": format!("gpu-{i}")}))
        .collect();
    let mut holder = pod(
        "holder",
        "1",
        json!({"nodeName": "n1",
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}]}),
    );
    holder["metadata"]["uid"] = json!("uid-holder");
    holder["status"] = json!({"phase": "Running"});
    let base = [
        allocated_claim("held", "gpu-0", ("holder", "uid-holder")),
        holder,
        node("n1"),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
               "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}),
        slice("n1", json!(gpus)),
    ];
    order
        .iter()
        .map(|&i| base[i].clone())
        .chain(extra)
        .map(|v| serde_yaml::to_string(&v).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

fn load(text: &str) -> Result<Arc<EmbeddedCluster>, String> {
    EmbeddedCluster::from_objects(
        crate::cluster::embedded::parse_objects(text, "cluster.yaml").unwrap(),
    )
    .map_err(|e| e.to_string())
}

fn claim_status(c: &EmbeddedCluster, name: &str) -> serde_json::Value {
    c.object(crate::cache::ObjectKind::ResourceClaim, "default", name)
        .map(|o| o.to_json()["status"].clone())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_cluster_file_s_claim_allocations_hold_whatever_the_order() {
    for order in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 0, 3, 4, 2]] {
        let cluster = load(&dra_file(&order, vec![])).unwrap();
        let st = claim_status(&cluster, "held");
        assert_eq!(
            st["allocation"]["devices"]["results"][0]["device"], "gpu-0",
            "{order:?}: {st}"
        );
        assert_eq!(st["reservedFor"][0]["uid"], "uid-holder", "{order:?}");

        // A pod asking for all 4 devices of n1 does not fit: one is taken.
        let registry = in_tree_registry();
        let cfg = config::default_config(&|n| registry.contains(n));
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
        let mut decisions = scheduler.decisions();
        scheduler.wait_synced().await;
        cluster
            .apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "four", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 4}}]}}}))
            .unwrap();
        cluster
            .apply(pod(
                "greedy",
                "1",
                json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "four"}]}),
            ))
            .unwrap();
        match decisions.recv().await.unwrap() {
            Decision::Failed { pod, message, .. } => {
                assert_eq!(pod, "default/greedy");
                assert!(
                    message.contains("cannot allocate all claims"),
                    "{order:?}: {message}"
                );
            }
            other => panic!("{order:?}: {other:?}"),
        }
    }
}

#[test]
fn a_cluster_file_is_repaired_as_controllers_would_and_refused_when_impossible() {
    // A reservation for a pod the file does not hold is released, and the
    // claim left with none deallocated, as the resourceclaim controller
    // does.
    let text = dra_file(
        &[2, 3, 4],
        vec![allocated_claim("orphan", "gpu-1", ("gone", "uid-gone"))],
    );
    let cluster = load(&text).unwrap();
    assert_eq!(claim_status(&cluster, "orphan"), json!({}));

    // A pod written without a UID is the one its claim's reservation names.
    let mut holder = pod(
        "holder",
        "1",
        json!({"nodeName": "n1",
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}]}),
    );
    holder["status"] = json!({"phase": "Running"});
    let text = dra_file(&[0, 2, 3, 4], vec![holder]);
    let cluster = load(&text).unwrap();
    assert_eq!(
        claim_status(&cluster, "held")["reservedFor"][0]["uid"],
        "uid-holder"
    );
    assert_eq!(
        cluster
            .get_pod("default", "holder")
            .and_then(|p| p.metadata.uid.clone())
            .as_deref(),
        Some("uid-holder")
    );

    // One device allocated to two claims: refused, naming both.
    let text = dra_file(
        &[0, 1, 2, 3, 4],
        vec![allocated_claim("twice", "gpu-0", ("holder", "uid-holder"))],
    );
    let e = load(&text).unwrap_err();
    assert!(
        e.contains("ResourceClaim default/held and ResourceClaim default/twice are both allocated device gpu.example.com/n1/gpu-0"),
        "{e}"
    );
}
