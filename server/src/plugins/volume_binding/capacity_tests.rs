//! v1.37's VolumeBinding: the node-affinity reason, CSIStorageCapacity at
//! Filter and StorageCapacityScoring at PreScore and Score, each run under
//! v1.37's gates and v1.36's.

use serde_json::{Value, json};

use super::*;
use crate::cache::ObjectKind;
use crate::cluster::embedded::EmbeddedCluster;
use crate::features::Features;
use crate::framework::Parallelizer;
use crate::framework::PluginArgs;
use crate::plugins::volume_helpers::testing::{claim_vol, class, node_with, put, pv, pvc};
use crate::testing::{make_node, make_pod};

const DRIVER: &str = "csi.example.com";

fn v136() -> Features {
    Features {
        enable_storage_capacity_scoring: false,
        ..Features::default()
    }
}

fn handle_with(features: Features) -> Handle {
    let c = EmbeddedCluster::new();
    Handle::with_features(c.clone(), c, Parallelizer::inline(), features)
}

fn zone_node(name: &str, zone: &str) -> Arc<NodeInfo> {
    Arc::new(node_with(
        make_node(name)
            .label("topology.kubernetes.io/zone", zone)
            .build(),
        vec![],
    ))
}

fn pod_with(claims: &[&str]) -> PodInfo {
    let vols: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| claim_vol(&format!("v{i}"), c))
        .collect();
    make_pod("p").spec("volumes", json!(vols)).build()
}

fn wait_claim(name: &str, class: &str, size: Option<&str>) -> Value {
    let mut spec = json!({"storageClassName": class, "accessModes": ["ReadWriteOnce"]});
    if let Some(s) = size {
        spec["resources"] = json!({"requests": {"storage": s}});
    }
    pvc(name, spec, json!({"phase": "Pending"}))
}

fn capacity(
    name: &str,
    class: &str,
    zone: Option<&str>,
    capacity: &str,
    max: Option<&str>,
) -> Value {
    let mut c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": class, "capacity": capacity});
    if let Some(z) = zone {
        c["nodeTopology"] = json!({"matchLabels": {"topology.kubernetes.io/zone": z}});
    }
    if let Some(m) = max {
        c["maximumVolumeSize"] = json!(m);
    }
    c
}

/// A driver that publishes capacities (`storageCapacity: true`) or not,
/// class `fast` provisioned by it, class `plain` by a driver with no
/// CSIDriver object, and capacities: zone a 5Gi, zone b 100Gi (but at most
/// 8Gi per volume), zone c 40Gi, zone d 100Gi, one without topology.
fn world(features: Features, storage_capacity: bool) -> Handle {
    let h = handle_with(features);
    put(
        &h,
        ObjectKind::CsiDriver,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
               "spec": {"storageCapacity": storage_capacity}}),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("fast", DRIVER, Some("WaitForFirstConsumer")),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("plain", "other.example.com", Some("WaitForFirstConsumer")),
    );
    for c in [
        capacity("a", "fast", Some("a"), "5Gi", None),
        capacity("b", "fast", Some("b"), "100Gi", Some("8Gi")),
        capacity("c", "fast", Some("c"), "40Gi", None),
        capacity("d", "fast", Some("d"), "100Gi", None),
        capacity("nowhere", "fast", None, "1Ti", None),
        capacity("other-class", "plain", Some("a"), "1Ti", None),
    ] {
        put(&h, ObjectKind::CsiStorageCapacity, c);
    }
    for c in [
        wait_claim("ten", "fast", Some("10Gi")),
        wait_claim("two", "fast", Some("2Gi")),
        wait_claim("sizeless", "fast", None),
        wait_claim("plain", "plain", Some("10Gi")),
    ] {
        put(&h, ObjectKind::PersistentVolumeClaim, c);
    }
    h
}

async fn filter_on(pl: &VolumeBinding, pod: &PodInfo, node: &NodeInfo) -> Status {
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, pod, &[]).await;
    assert!(pre.is_success(), "{pre:?}");
    pl.filter(&st, pod, node)
}

#[tokio::test]
async fn a_bound_volume_elsewhere_gives_v1_37s_reason() {
    let h = handle_with(Features::default());
    let mut v = pv(
        "pv-a",
        json!({}),
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/x"},
               "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}}),
    );
    v["status"]["phase"] = json!("Bound");
    put(&h, ObjectKind::PersistentVolume, v);
    let mut c = pvc(
        "data",
        json!({"volumeName": "pv-a"}),
        json!({"phase": "Bound"}),
    );
    c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    put(&h, ObjectKind::PersistentVolumeClaim, c);
    let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
    let s = filter_on(&pl, &pod_with(&["data"]), &zone_node("n", "b")).await;
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.reasons(),
        ["node(s) didn't match PersistentVolume's node affinity"]
    );
}

#[tokio::test]
async fn provisioning_needs_room_in_a_reachable_storage_capacity() {
    let fits = Ok(());
    let no_room = Err("node(s) did not have enough free storage");
    // (case, claim, zone, storageCapacity published, want)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        bool,
        Result<(), &'static str>,
    );
    let cases: [Case; 9] = [
        ("room in the zone", "ten", "c", true, fits),
        ("too little capacity", "ten", "a", true, no_room),
        (
            "maximumVolumeSize below the request",
            "ten",
            "b",
            true,
            no_room,
        ),
        (
            "maximumVolumeSize above the request",
            "two",
            "b",
            true,
            fits,
        ),
        (
            "no capacity for the node (none without topology counts)",
            "ten",
            "z",
            true,
            no_room,
        ),
        (
            "no storage request: nothing to check",
            "sizeless",
            "z",
            true,
            fits,
        ),
        ("driver does not publish capacity", "ten", "a", false, fits),
        ("provisioner without a CSIDriver", "plain", "z", true, fits),
        (
            "another class's capacity does not count",
            "ten",
            "a",
            true,
            no_room,
        ),
    ];
    // CSIStorageCapacity is GA: v1.36 checks it as v1.37 does.
    for features in [Features::default(), v136()] {
        for (name, claim, zone, published, want) in cases {
            let h = world(features, published);
            let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
            let s = filter_on(&pl, &pod_with(&[claim]), &zone_node("n", zone)).await;
            match want {
                Ok(()) => assert!(s.is_success(), "{name}: {s:?}"),
                Err(reason) => {
                    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                    assert_eq!(s.reasons(), [reason], "{name}");
                }
            }
        }
    }
}

/// PreScore then Score on each node (each filtered first), as a cycle
/// runs them; `None` when PreScore skips.
async fn scores(pl: &VolumeBinding, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Option<Vec<i64>> {
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, pod, nodes).await;
    if !pre.is_skip() {
        assert!(pre.is_success(), "{pre:?}");
        for n in nodes {
            let s = pl.filter(&st, pod, n);
            assert!(s.is_success(), "{}: {s:?}", n.name());
        }
    }
    let ps = pl.pre_score(&mut st, pod, nodes).await;
    if ps.is_skip() {
        return None;
    }
    assert!(ps.is_success(), "{ps:?}");
    Some(
        nodes
            .iter()
            .map(|n| pl.score(&st, pod, n).unwrap())
            .collect(),
    )
}

#[tokio::test]
async fn storage_capacity_scoring_prefers_the_emptier_pool_in_v1_37_only() {
    let nodes = [zone_node("in-c", "c"), zone_node("in-d", "d")];
    // v1.37: 10Gi of 40Gi is 25% used (score 75), of 100Gi 10% (90).
    let h = world(Features::default(), true);
    let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
    assert_eq!(
        scores(&pl, &pod_with(&["ten"]), &nodes).await,
        Some(vec![75, 90])
    );
    // Two claims of one class add their requests against the pool: 12Gi.
    assert_eq!(
        scores(&pl, &pod_with(&["ten", "two"]), &nodes).await,
        Some(vec![70, 88])
    );
    // A shape that prefers fuller pools.
    let args = VolumeBindingArgs::parse(
        Some(
            &json!({"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}),
        ),
        "args",
    )
    .unwrap();
    let pl = VolumeBinding::new(args, &h);
    assert_eq!(
        scores(&pl, &pod_with(&["ten"]), &nodes).await,
        Some(vec![25, 10])
    );
    // Nothing to provision with a capacity: every node 0.
    let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
    assert_eq!(
        scores(&pl, &pod_with(&["sizeless"]), &nodes).await,
        Some(vec![0, 0])
    );
    // A pod without claims is not scored.
    assert_eq!(scores(&pl, &make_pod("plain").build(), &nodes).await, None);

    // v1.36: PreScore skips.
    let h = world(v136(), true);
    let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
    assert_eq!(scores(&pl, &pod_with(&["ten"]), &nodes).await, None);
}

#[tokio::test]
async fn static_volumes_score_by_their_own_capacity() {
    let h = handle_with(Features::default());
    put(
        &h,
        ObjectKind::StorageClass,
        class(
            "local",
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
        ),
    );
    for (name, zone, size) in [("pv-c", "c", "20Gi"), ("pv-d", "d", "100Gi")] {
        put(
            &h,
            ObjectKind::PersistentVolume,
            pv(
                name,
                json!({}),
                json!({"storageClassName": "local", "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                       "hostPath": {"path": "/x"},
                       "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}),
            ),
        );
    }
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        wait_claim("ten", "local", Some("10Gi")),
    );
    let pl = VolumeBinding::new(VolumeBindingArgs::default(), &h);
    let nodes = [zone_node("in-c", "c"), zone_node("in-d", "d")];
    // 10Gi of a 20Gi volume: 50% (score 50); of 100Gi: 10% (90).
    assert_eq!(
        scores(&pl, &pod_with(&["ten"]), &nodes).await,
        Some(vec![50, 90])
    );
}
