use serde_json::{Value, json};

use super::*;
use crate::cache::ObjectKind;
use crate::framework::{Code, EventObject};
use crate::plugins::volume_helpers::testing::{claim_vol, class, handle, node_with, put, pv, pvc};
use crate::testing::{make_node, make_pod};

type Want = (Code, &'static str);

const EBS: &str = "ebs.csi.aws.com";
const GCE: &str = "pd.csi.storage.gke.io";

fn csi_node(name: &str, drivers: Value) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
           "metadata": {"name": name}, "spec": {"drivers": drivers}})
}

fn fixture() -> Handle {
    let h = handle();
    put(
        &h,
        ObjectKind::CsiNode,
        csi_node(
            "limited",
            json!([
                {"name": EBS, "nodeID": "i-1", "allocatable": {"count": 2}},
                {"name": GCE, "nodeID": "g-1", "allocatable": {"count": 1}},
                {"name": "free.csi", "nodeID": "f-1"}
            ]),
        ),
    );
    put(
        &h,
        ObjectKind::CsiNode,
        csi_node("unlimited", json!([{"name": EBS, "nodeID": "i-2"}])),
    );
    for (name, driver) in [
        ("ebs-0", EBS),
        ("ebs-1", EBS),
        ("ebs-2", EBS),
        ("gce-0", GCE),
        ("gce-1", GCE),
        ("free-0", "free.csi"),
    ] {
        put(
            &h,
            ObjectKind::PersistentVolume,
            pv(
                name,
                json!({}),
                json!({"csi": {"driver": driver, "volumeHandle": format!("h-{name}")}}),
            ),
        );
        put(
            &h,
            ObjectKind::PersistentVolumeClaim,
            pvc(&format!("c-{name}"), json!({"volumeName": name}), json!({})),
        );
    }
    put(
        &h,
        ObjectKind::PersistentVolume,
        pv("host", json!({}), json!({"hostPath": {"path": "/x"}})),
    );
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        pvc("c-host", json!({"volumeName": "host"}), json!({})),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("csi", EBS, Some("WaitForFirstConsumer")),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class(
            "in-tree",
            "kubernetes.io/aws-ebs",
            Some("WaitForFirstConsumer"),
        ),
    );
    let claims = [
        ("c-unbound", json!({"storageClassName": "csi"})),
        ("c-unbound-2", json!({"storageClassName": "csi"})),
        ("c-in-tree", json!({"storageClassName": "in-tree"})),
        ("c-no-class", json!({})),
        ("c-missing-class", json!({"storageClassName": "ghost"})),
        (
            "c-lost-pv",
            json!({"volumeName": "ghost", "storageClassName": "csi"}),
        ),
    ];
    for (name, spec) in claims {
        put(
            &h,
            ObjectKind::PersistentVolumeClaim,
            pvc(name, spec, json!({})),
        );
    }
    // The claim of pod "eph"'s ephemeral volume "scratch", owned by it.
    let mut eph = pvc("eph-scratch", json!({"storageClassName": "csi"}), json!({}));
    eph["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "eph", "uid": "uid-default-eph", "controller": true}]);
    put(&h, ObjectKind::PersistentVolumeClaim, eph);
    h
}

fn pod(name: &str, claims: &[&str]) -> PodInfo {
    let vols: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| claim_vol(&format!("v{i}"), c))
        .collect();
    make_pod(name).spec("volumes", json!(vols)).build()
}

fn ephemeral_pod(name: &str) -> PodInfo {
    make_pod(name)
        .spec(
            "volumes",
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "csi"}}}}]),
        )
        .build()
}

#[tokio::test]
async fn limits() {
    let h = fixture();
    let pl = NodeVolumeLimits::new(NoArgs, &h);
    let fits = (Code::Success, "");
    let exceeds = (Code::Unschedulable, ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
    type Case = (&'static str, &'static str, Vec<PodInfo>, PodInfo, Want);
    let cases: Vec<Case> = vec![
        (
            "room left",
            "limited",
            vec![pod("a", &["c-ebs-0"])],
            pod("p", &["c-ebs-1"]),
            fits,
        ),
        (
            "limit reached",
            "limited",
            vec![pod("a", &["c-ebs-0"]), pod("b", &["c-ebs-1"])],
            pod("p", &["c-ebs-2"]),
            exceeds,
        ),
        (
            "two new volumes over the limit",
            "limited",
            vec![pod("a", &["c-ebs-0"])],
            pod("p", &["c-ebs-1", "c-ebs-2"]),
            exceeds,
        ),
        (
            "volume shared with a pod on the node",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-ebs-1"]),
            fits,
        ),
        (
            "volume used by two pods counts once",
            "limited",
            vec![pod("a", &["c-ebs-0"]), pod("b", &["c-ebs-0"])],
            pod("p", &["c-ebs-1"]),
            fits,
        ),
        (
            "same claim twice in the pod counts once",
            "limited",
            vec![pod("a", &["c-ebs-0"])],
            pod("p", &["c-ebs-1", "c-ebs-1"]),
            fits,
        ),
        (
            "unbound claim counts for its provisioner",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-unbound"]),
            exceeds,
        ),
        (
            "unbound claims on the node count",
            "limited",
            vec![pod("a", &["c-unbound", "c-unbound-2"])],
            pod("p", &["c-ebs-0"]),
            exceeds,
        ),
        (
            "claim of a missing volume counts through its class",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-lost-pv"]),
            exceeds,
        ),
        (
            "in-tree provisioner not counted",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-in-tree"]),
            fits,
        ),
        (
            "claim without class not counted",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-no-class"]),
            fits,
        ),
        (
            "claim of a missing class not counted",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-missing-class"]),
            fits,
        ),
        (
            "non-CSI volume not counted",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-host"]),
            fits,
        ),
        (
            "limits are per driver",
            "limited",
            vec![pod("a", &["c-gce-0"])],
            pod("p", &["c-ebs-0", "c-ebs-1"]),
            fits,
        ),
        (
            "other driver at its limit",
            "limited",
            vec![pod("a", &["c-gce-0"])],
            pod("p", &["c-gce-1"]),
            exceeds,
        ),
        (
            "driver without allocatable count",
            "limited",
            vec![],
            pod("p", &["c-free-0"]),
            fits,
        ),
        (
            "CSINode without counts",
            "unlimited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-ebs-2"]),
            fits,
        ),
        (
            "node without CSINode",
            "other",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            pod("p", &["c-ebs-2"]),
            fits,
        ),
        (
            "existing pod's missing claim ignored",
            "limited",
            vec![pod("a", &["c-ebs-0", "nope"])],
            pod("p", &["c-ebs-1"]),
            fits,
        ),
        (
            "ephemeral volume counts",
            "limited",
            vec![pod("a", &["c-ebs-0", "c-ebs-1"])],
            ephemeral_pod("eph"),
            exceeds,
        ),
        (
            "missing claim of the new pod",
            "limited",
            vec![],
            pod("p", &["nope"]),
            (
                Code::UnschedulableAndUnresolvable,
                "looking up PVC default/nope: persistentvolumeclaim \"nope\" not found",
            ),
        ),
        (
            "ephemeral claim not owned by the pod",
            "limited",
            vec![],
            ephemeral_pod("eph").clone_with_uid("other-uid"),
            (
                Code::Error,
                "PVC default/eph-scratch was not created for pod default/eph (pod is not owner)",
            ),
        ),
    ];
    for (name, node_name, existing, p, (code, msg)) in cases {
        let node = Arc::new(node_with(make_node(node_name).build(), existing));
        let mut st = CycleState::new();
        let (_, pre) = pl
            .pre_filter(&mut st, &p, std::slice::from_ref(&node))
            .await;
        assert!(pre.is_success(), "{name}: {pre:?}");
        let s = pl.filter(&st, &p, &node);
        assert_eq!((s.code(), s.message().as_str()), (code, msg), "{name}");
    }
}

trait WithUid {
    fn clone_with_uid(&self, uid: &str) -> PodInfo;
}

impl WithUid for PodInfo {
    fn clone_with_uid(&self, uid: &str) -> PodInfo {
        let mut p = (*self.pod.get()).clone();
        p.metadata.uid = Some(uid.into());
        PodInfo::new(Arc::new(p)).unwrap()
    }
}

#[tokio::test]
async fn skip_and_what_if_pods() {
    let h = fixture();
    let pl = NodeVolumeLimits::new(NoArgs, &h);
    let mut st = CycleState::new();
    let plain = make_pod("plain")
        .spec("volumes", json!([{"name": "e", "emptyDir": {}}]))
        .build();
    let (_, pre) = pl.pre_filter(&mut st, &plain, &[]).await;
    assert!(pre.is_skip());

    // A pod added to the node after PreFilter (a nominated pod) counts.
    let node = Arc::new(node_with(
        make_node("limited").build(),
        vec![pod("a", &["c-ebs-0"])],
    ));
    let p = pod("p", &["c-ebs-1"]);
    let mut st = CycleState::new();
    let (_, pre) = pl
        .pre_filter(&mut st, &p, std::slice::from_ref(&node))
        .await;
    assert!(pre.is_success());
    assert!(pl.filter(&st, &p, &node).is_success());
    let mut more = (*node).clone();
    more.add_pod(Arc::new(pod("b", &["c-ebs-2"])));
    assert_eq!(
        pl.filter(&st, &p, &more).message(),
        ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED
    );
    assert!(
        pl.filter(&CycleState::new(), &p, &node).is_error(),
        "no state"
    );
}

fn obj(kind: ObjectKind, v: Value) -> Option<EventObject> {
    Some(EventObject::Object(KubeObject::from_json(kind, v).unwrap()))
}

#[test]
fn hints() {
    let h = handle();
    let regs = NodeVolumeLimits::new(NoArgs, &h)
        .events_to_register()
        .unwrap();
    let events: Vec<_> = regs.iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            ClusterEvent::new(EventResource::CsiNode, ActionType::ADD),
            ClusterEvent::new(EventResource::CsiNode, ActionType::UPDATE),
            ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE),
            ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
            // VolumeLimitScaling (on in v1.37).
            ClusterEvent::new(
                EventResource::CsiDriver,
                ActionType::UPDATE | ActionType::DELETE
            ),
        ]
    );
    assert!(regs[0].hint.is_none());
    let p = pod("p", &["data"]);

    let csi = regs[1].hint.as_ref().unwrap();
    let n = |count: Option<i32>| {
        let d = match count {
            Some(c) => json!([{"name": EBS, "nodeID": "x", "allocatable": {"count": c}}]),
            None => json!([{"name": EBS, "nodeID": "x"}]),
        };
        obj(ObjectKind::CsiNode, csi_node("n", d))
    };
    assert_eq!(
        csi(&p, n(Some(1)).as_ref(), n(Some(2)).as_ref()).unwrap(),
        QueueingHint::Queue,
        "raised"
    );
    assert_eq!(
        csi(&p, n(Some(2)).as_ref(), n(Some(1)).as_ref()).unwrap(),
        QueueingHint::Skip,
        "lowered"
    );
    assert_eq!(
        csi(&p, n(Some(1)).as_ref(), n(None).as_ref()).unwrap(),
        QueueingHint::Queue,
        "limit dropped"
    );
    assert_eq!(
        csi(&p, n(None).as_ref(), n(Some(1)).as_ref()).unwrap(),
        QueueingHint::Skip,
        "limit added"
    );
    let with_drivers = |names: &[&str]| {
        let d: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "nodeID": "x"}))
            .collect();
        obj(ObjectKind::CsiNode, csi_node("n", json!(d)))
    };
    assert_eq!(
        csi(
            &p,
            with_drivers(&[GCE]).as_ref(),
            with_drivers(&[GCE, EBS]).as_ref()
        )
        .unwrap(),
        QueueingHint::Queue,
        "a driver was installed (VolumeLimitScaling)"
    );

    let del = regs[2].hint.as_ref().unwrap();
    let bound = |claims: &[&str]| {
        let vols: Vec<Value> = claims.iter().map(|c| claim_vol("v", c)).collect();
        Some(EventObject::Pod(Arc::new(
            make_pod("d").node("n").spec("volumes", json!(vols)).build(),
        )))
    };
    assert_eq!(
        del(&p, bound(&["x"]).as_ref(), None).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        del(&p, bound(&[]).as_ref(), None).unwrap(),
        QueueingHint::Skip
    );
    let eph = Some(EventObject::Pod(Arc::new(
        make_pod("d")
            .node("n")
            .spec("volumes", json!([{"name": "s", "ephemeral": {}}]))
            .build(),
    )));
    assert_eq!(del(&p, eph.as_ref(), None).unwrap(), QueueingHint::Queue);

    let add = regs[3].hint.as_ref().unwrap();
    let c = |ns: &str, name: &str| {
        obj(
            ObjectKind::PersistentVolumeClaim,
            json!({"metadata": {"name": name, "namespace": ns}, "spec": {}}),
        )
    };
    assert_eq!(
        add(&p, None, c("default", "data").as_ref()).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        add(&p, None, c("default", "x").as_ref()).unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(
        add(&p, None, c("o", "data").as_ref()).unwrap(),
        QueueingHint::Skip
    );
    let e = ephemeral_pod("eph");
    assert_eq!(
        add(&e, None, c("default", "eph-scratch").as_ref()).unwrap(),
        QueueingHint::Queue
    );
}

fn handle_with(features: crate::features::Features) -> Handle {
    let c = crate::cluster::embedded::EmbeddedCluster::new();
    Handle::with_features(
        c.clone(),
        c,
        crate::framework::Parallelizer::inline(),
        features,
    )
}

#[tokio::test]
async fn volume_limit_scaling_refuses_nodes_without_a_required_driver() {
    let on = crate::features::Features::default();
    assert!(on.enable_volume_limit_scaling, "on by default in v1.37");
    let off = crate::features::Features {
        enable_volume_limit_scaling: false,
        ..on
    };
    let missing = (
        Code::Unschedulable,
        "ebs.csi.aws.com CSI driver is not installed on the node",
    );
    let fits = (Code::Success, "");
    // (case, node, the driver's preventPodSchedulingIfMissing, v1.37, v1.36)
    type Case = (&'static str, &'static str, Option<bool>, Want, Want);
    let cases: [Case; 6] = [
        (
            "CSINode without the driver",
            "gce-only",
            Some(true),
            missing,
            fits,
        ),
        ("no CSINode at all", "bare", Some(true), missing, fits),
        ("driver installed", "ebs", Some(true), fits, fits),
        ("driver does not ask", "gce-only", Some(false), fits, fits),
        ("driver field unset", "gce-only", None, fits, fits),
        (
            // The driver check comes before the limits are counted.
            "installed at its limit",
            "ebs-full",
            Some(true),
            (Code::Unschedulable, ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED),
            (Code::Unschedulable, ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED),
        ),
    ];
    for (name, node_name, prevent, want_on, want_off) in cases {
        for (features, want, release) in [(on, want_on, "v1.37"), (off, want_off, "v1.36")] {
            let h = handle_with(features);
            put(
                &h,
                ObjectKind::CsiNode,
                csi_node("gce-only", json!([{"name": GCE, "nodeID": "g"}])),
            );
            put(
                &h,
                ObjectKind::CsiNode,
                csi_node("ebs", json!([{"name": EBS, "nodeID": "e"}])),
            );
            put(
                &h,
                ObjectKind::CsiNode,
                csi_node(
                    "ebs-full",
                    json!([{"name": EBS, "nodeID": "f", "allocatable": {"count": 0}}]),
                ),
            );
            let mut spec = json!({});
            if let Some(p) = prevent {
                spec["preventPodSchedulingIfMissing"] = json!(p);
            }
            put(
                &h,
                ObjectKind::CsiDriver,
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": EBS}, "spec": spec}),
            );
            put(
                &h,
                ObjectKind::PersistentVolume,
                pv(
                    "vol",
                    json!({}),
                    json!({"csi": {"driver": EBS, "volumeHandle": "h"}}),
                ),
            );
            put(
                &h,
                ObjectKind::PersistentVolumeClaim,
                pvc("data", json!({"volumeName": "vol"}), json!({})),
            );
            let pl = NodeVolumeLimits::new(NoArgs, &h);
            let p = pod("p", &["data"]);
            let node = Arc::new(node_with(make_node(node_name).build(), vec![]));
            let mut st = CycleState::new();
            let (_, pre) = pl
                .pre_filter(&mut st, &p, std::slice::from_ref(&node))
                .await;
            assert!(pre.is_success(), "{name} {release}: {pre:?}");
            let s = pl.filter(&st, &p, &node);
            assert_eq!((s.code(), s.message().as_str()), want, "{name} {release}");
        }
    }
}
