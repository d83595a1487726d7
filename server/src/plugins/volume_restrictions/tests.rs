use serde_json::{Value, json};

use super::*;
use crate::cache::ObjectKind;
use crate::framework::{Code, EventObject};
use crate::plugins::volume_helpers::testing::{claim_vol, handle, node_with, put, pvc};
use crate::testing::{make_node, make_pod};

fn pod(name: &str, volumes: Value) -> PodInfo {
    make_pod(name).spec("volumes", volumes).build()
}

fn gce(pd: &str, ro: bool) -> Value {
    json!([{"name": "v", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}])
}
fn aws(id: &str, ro: bool) -> Value {
    json!([{"name": "v", "awsElasticBlockStore": {"volumeID": id, "readOnly": ro}}])
}
fn iscsi(iqn: &str, ro: bool) -> Value {
    json!([{"name": "v", "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": ro}}])
}
fn rbd(mons: &[&str], pool: Option<&str>, image: &str, ro: bool) -> Value {
    let mut r = json!({"monitors": mons, "image": image, "readOnly": ro});
    if let Some(p) = pool {
        r["pool"] = json!(p);
    }
    json!([{"name": "v", "rbd": r}])
}

async fn run(
    pl: &VolumeRestrictions,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
) -> (CycleState, Status, Vec<Status>) {
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, pod, nodes).await;
    let filters = if pre.is_success() {
        nodes.iter().map(|n| pl.filter(&st, pod, n)).collect()
    } else {
        Vec::new()
    };
    (st, pre, filters)
}

#[tokio::test]
async fn inline_disk_conflicts() {
    let cases: Vec<(&str, Value, Value, Option<&str>)> = vec![
        ("no volumes", json!([]), gce("a", false), None),
        (
            "gce same disk rw/rw",
            gce("a", false),
            gce("a", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "gce same disk ro/rw",
            gce("a", true),
            gce("a", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "gce same disk rw/ro",
            gce("a", false),
            gce("a", true),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        ("gce same disk ro/ro", gce("a", true), gce("a", true), None),
        ("gce other disk", gce("a", false), gce("b", false), None),
        (
            "aws same volume",
            aws("v1", false),
            aws("v1", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "aws same volume read-only",
            aws("v1", true),
            aws("v1", true),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        ("aws other volume", aws("v1", false), aws("v2", false), None),
        (
            "iscsi same iqn",
            iscsi("iqn.a", false),
            iscsi("iqn.a", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "iscsi same iqn ro/ro",
            iscsi("iqn.a", true),
            iscsi("iqn.a", true),
            None,
        ),
        (
            "iscsi other iqn",
            iscsi("iqn.a", false),
            iscsi("iqn.b", false),
            None,
        ),
        (
            "rbd common monitor, pool, image",
            rbd(&["m1", "m2"], Some("p"), "img", false),
            rbd(&["m2", "m3"], Some("p"), "img", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "rbd ro/ro",
            rbd(&["m1"], Some("p"), "img", true),
            rbd(&["m1"], Some("p"), "img", true),
            None,
        ),
        (
            "rbd no common monitor",
            rbd(&["m1"], Some("p"), "img", false),
            rbd(&["m2"], Some("p"), "img", false),
            None,
        ),
        (
            "rbd other pool",
            rbd(&["m1"], Some("p"), "img", false),
            rbd(&["m1"], Some("q"), "img", false),
            None,
        ),
        (
            "rbd other image",
            rbd(&["m1"], Some("p"), "img", false),
            rbd(&["m1"], Some("p"), "img2", false),
            None,
        ),
        (
            "rbd default pool is rbd",
            rbd(&["m1"], None, "img", false),
            rbd(&["m1"], Some("rbd"), "img", false),
            Some(ERR_REASON_DISK_CONFLICT),
        ),
        (
            "different kinds never conflict",
            gce("a", false),
            aws("a", false),
            None,
        ),
    ];
    let h = handle();
    let pl = VolumeRestrictions::new(NoArgs, &h);
    for (name, new, existing, want) in cases {
        let p = pod("new", new);
        let node = Arc::new(node_with(
            make_node("n").build(),
            vec![pod("old", existing)],
        ));
        let empty = Arc::new(node_with(make_node("m").build(), vec![]));
        let (_, pre, filters) = run(&pl, &p, &[node, empty]).await;
        if !pre.is_success() {
            assert!(pre.is_skip(), "{name}: {pre:?}");
            assert_eq!(want, None, "{name}: skipped");
            continue;
        }
        match want {
            None => assert!(filters[0].is_success(), "{name}: {:?}", filters[0]),
            Some(r) => {
                assert_eq!(filters[0].code(), Code::Unschedulable, "{name}");
                assert_eq!(filters[0].message(), r, "{name}");
            }
        }
        assert!(filters[1].is_success(), "{name}: empty node fits");
    }
}

fn rwop_handle() -> Handle {
    let h = handle();
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        pvc(
            "rwop",
            json!({"accessModes": ["ReadWriteOncePod"]}),
            json!({}),
        ),
    );
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        pvc("rwo", json!({"accessModes": ["ReadWriteOnce"]}), json!({})),
    );
    h
}

#[tokio::test]
async fn read_write_once_pod() {
    let h = rwop_handle();
    let pl = VolumeRestrictions::new(NoArgs, &h);
    let holder = pod("holder", json!([claim_vol("d", "rwop")]));
    let rwo_holder = pod("rwo-holder", json!([claim_vol("d", "rwo")]));
    let other_ns = make_pod("holder")
        .namespace("other")
        .spec("volumes", json!([claim_vol("d", "rwop")]))
        .build();
    struct Case {
        name: &'static str,
        pod: PodInfo,
        existing: Vec<PodInfo>,
        pre: Code,
        pre_msg: &'static str,
        filter: Option<Code>,
    }
    let cases = [
        Case {
            name: "rwop claim unused",
            pod: pod("p", json!([claim_vol("d", "rwop")])),
            existing: vec![],
            pre: Code::Skip,
            pre_msg: "",
            filter: None,
        },
        Case {
            name: "rwop claim used on another node",
            pod: pod("p", json!([claim_vol("d", "rwop")])),
            existing: vec![holder.clone()],
            pre: Code::Success,
            pre_msg: "",
            filter: Some(Code::Unschedulable),
        },
        Case {
            name: "same claim name in another namespace",
            pod: pod("p", json!([claim_vol("d", "rwop")])),
            existing: vec![other_ns],
            pre: Code::Skip,
            pre_msg: "",
            filter: None,
        },
        Case {
            name: "rwo claim may be shared",
            pod: pod("p", json!([claim_vol("d", "rwo")])),
            existing: vec![rwo_holder],
            pre: Code::Skip,
            pre_msg: "",
            filter: None,
        },
        Case {
            name: "missing claim",
            pod: pod("p", json!([claim_vol("d", "nope")])),
            existing: vec![],
            pre: Code::UnschedulableAndUnresolvable,
            pre_msg: "persistentvolumeclaim \"nope\" not found",
            filter: None,
        },
        Case {
            name: "no claims",
            pod: pod("p", json!([{"name": "e", "emptyDir": {}}])),
            existing: vec![holder.clone()],
            pre: Code::Skip,
            pre_msg: "",
            filter: None,
        },
    ];
    for c in cases {
        let busy = Arc::new(node_with(make_node("busy").build(), c.existing));
        let free = Arc::new(node_with(make_node("free").build(), vec![]));
        let (_, pre, filters) = run(&pl, &c.pod, &[busy, free]).await;
        assert_eq!(pre.code(), c.pre, "{}: {pre:?}", c.name);
        assert_eq!(pre.message(), c.pre_msg, "{}", c.name);
        if let Some(code) = c.filter {
            for f in &filters {
                assert_eq!(f.code(), code, "{}: every node", c.name);
                assert_eq!(
                    f.message(),
                    ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
                    "{}",
                    c.name
                );
            }
        }
    }
}

#[tokio::test]
async fn preemption_can_free_the_claim() {
    let h = rwop_handle();
    let pl = VolumeRestrictions::new(NoArgs, &h);
    let holder = pod(
        "holder",
        json!([claim_vol("d", "rwop"), claim_vol("e", "rwo")]),
    );
    let node = Arc::new(node_with(make_node("n").build(), vec![holder.clone()]));
    let p = pod("p", json!([claim_vol("d", "rwop")]));
    let (mut st, pre, filters) = run(&pl, &p, std::slice::from_ref(&node)).await;
    assert!(pre.is_success());
    assert!(!filters[0].is_success());
    let ext = pl.extensions().unwrap();
    assert!(ext.remove_pod(&mut st, &p, &holder, &node).is_success());
    assert!(pl.filter(&st, &p, &node).is_success(), "victim removed");
    let unrelated = pod("u", json!([claim_vol("e", "rwo")]));
    assert!(ext.add_pod(&mut st, &p, &unrelated, &node).is_success());
    assert!(pl.filter(&st, &p, &node).is_success(), "rwo user added");
    assert!(ext.add_pod(&mut st, &p, &holder, &node).is_success());
    assert_eq!(
        pl.filter(&st, &p, &node).message(),
        ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
        "holder back"
    );
    let mut empty = CycleState::new();
    assert!(ext.add_pod(&mut empty, &p, &holder, &node).is_error());
    assert!(
        pl.filter(&empty, &p, &node).is_error(),
        "no PreFilter state"
    );
}

#[test]
fn hints() {
    let h = handle();
    let regs = VolumeRestrictions::new(NoArgs, &h)
        .events_to_register()
        .unwrap();
    let events: Vec<_> = regs.iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE),
            ClusterEvent::NODE_ADD,
            ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
        ]
    );
    assert!(regs[1].hint.is_none());
    let target = pod(
        "p",
        json!([claim_vol("d", "data"), {"name": "g", "gcePersistentDisk": {"pdName": "disk"}}]),
    );
    let pod_hint = regs[0].hint.as_ref().unwrap();
    let deleted = |p: PodInfo| Some(EventObject::Pod(Arc::new(p)));
    let cases = [
        (
            "conflicting disk",
            deleted(pod("x", gce("disk", false))),
            QueueingHint::Queue,
        ),
        (
            "read-only disk still conflicts with rw",
            deleted(pod("x", gce("disk", true))),
            QueueingHint::Queue,
        ),
        (
            "same claim",
            deleted(pod("x", json!([claim_vol("v", "data")]))),
            QueueingHint::Queue,
        ),
        (
            "unrelated",
            deleted(pod("x", json!([claim_vol("v", "other")]))),
            QueueingHint::Skip,
        ),
        (
            "other namespace",
            deleted(
                make_pod("x")
                    .namespace("o")
                    .spec("volumes", gce("disk", false))
                    .build(),
            ),
            QueueingHint::Skip,
        ),
    ];
    for (name, old, want) in cases {
        assert_eq!(
            pod_hint(&target, old.as_ref(), None).unwrap(),
            want,
            "{name}"
        );
    }
    assert!(pod_hint(&target, None, None).is_err());

    let pvc_hint = regs[2].hint.as_ref().unwrap();
    let claim = |ns: &str, name: &str| {
        Some(EventObject::Object(
            KubeObject::from_json(
                ObjectKind::PersistentVolumeClaim,
                json!({"metadata": {"name": name, "namespace": ns}, "spec": {}}),
            )
            .unwrap(),
        ))
    };
    let cases = [
        (
            "the pod's claim",
            claim("default", "data"),
            QueueingHint::Queue,
        ),
        (
            "another claim",
            claim("default", "other"),
            QueueingHint::Skip,
        ),
        ("another namespace", claim("o", "data"), QueueingHint::Skip),
    ];
    for (name, new, want) in cases {
        assert_eq!(
            pvc_hint(&target, None, new.as_ref()).unwrap(),
            want,
            "{name}"
        );
    }
}
