use serde_json::{Value, json};

use super::binder::{ERR_REASON_BIND_CONFLICT, ERR_REASON_NODE_CONFLICT, ERR_REASON_PV_NOT_EXIST};
use super::*;
use crate::cache::{ObjectKind, Snapshot};
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::{ClusterChange, ClusterSource, WatchEvent};
use crate::framework::Parallelizer;
use crate::plugins::volume_helpers::testing::{claim_vol, class, handle, node_with, put, pv, pvc};
use crate::plugins::volume_helpers::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE};
use crate::testing::{make_node, make_pod};

type Outcome = Result<&'static str, &'static str>;

fn zone_affinity(zone: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}})
}

fn host_affinity(hosts: &[&str]) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}]}})
}

fn bound_pvc(name: &str, volume: &str) -> Value {
    let mut c = pvc(
        name,
        json!({"volumeName": volume}),
        json!({"phase": "Bound"}),
    );
    c["metadata"]["annotations"] = json!({ANN_BIND_COMPLETED: "yes"});
    c
}

fn wait_pvc(name: &str, class: &str, size: &str, extra: Value) -> Value {
    let mut spec = json!({"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": size}}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            spec[k] = v;
        }
    }
    pvc(name, spec, json!({"phase": "Pending"}))
}

fn static_pv(name: &str, class: &str, size: &str, extra: Value) -> Value {
    let mut spec = json!({"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                          "capacity": {"storage": size}, "hostPath": {"path": "/x"}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            spec[k] = v;
        }
    }
    pv(name, json!({"tier": "gold"}), spec)
}

/// Classes, volumes and claims shared by the cases.
fn fixture() -> Handle {
    let h = handle();
    put(
        &h,
        ObjectKind::StorageClass,
        class(
            "wait",
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
        ),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("dyn", "csi.example.com", Some("WaitForFirstConsumer")),
    );
    let mut zoned = class(
        "dyn-zone-a",
        "csi.example.com",
        Some("WaitForFirstConsumer"),
    );
    zoned["allowedTopologies"] = json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]);
    put(&h, ObjectKind::StorageClass, zoned);
    put(
        &h,
        ObjectKind::StorageClass,
        class("immediate", "csi.example.com", Some("Immediate")),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("nomode", "csi.example.com", None),
    );

    let objects = [
        (
            ObjectKind::PersistentVolume,
            static_pv(
                "pv-bound-a",
                "",
                "1Gi",
                json!({"nodeAffinity": zone_affinity("a")}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            bound_pvc("bound-a", "pv-bound-a"),
        ),
        (
            ObjectKind::PersistentVolume,
            static_pv(
                "pv-local",
                "",
                "1Gi",
                json!({"nodeAffinity": host_affinity(&["n1", "n2"])}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            bound_pvc("bound-local", "pv-local"),
        ),
        (
            ObjectKind::PersistentVolume,
            static_pv(
                "pv-local-2",
                "",
                "1Gi",
                json!({"nodeAffinity": host_affinity(&["n2", "n3"])}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            bound_pvc("bound-local-2", "pv-local-2"),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            bound_pvc("bound-ghost", "ghost"),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("unbound-immediate", "immediate", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            pvc("no-class", json!({}), json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("missing-class", "ghost", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("prebound", "wait", "1Gi", json!({"volumeName": "pv-small"})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("nomode", "nomode", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            pvc(
                "lost",
                json!({"volumeName": "gone"}),
                json!({"phase": "Lost"}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("wait-1g", "wait", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("wait-1g-b", "wait", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("wait-5g", "wait", "5Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc(
                "wait-rwx",
                "wait",
                "1Gi",
                json!({"accessModes": ["ReadWriteMany"]}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("wait-block", "wait", "1Gi", json!({"volumeMode": "Block"})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc(
                "wait-gold",
                "wait",
                "1Gi",
                json!({"selector": {"matchLabels": {"tier": "gold"}}}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc(
                "wait-silver",
                "wait",
                "1Gi",
                json!({"selector": {"matchLabels": {"tier": "silver"}}}),
            ),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("dyn-1g", "dyn", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolumeClaim,
            wait_pvc("dyn-zone-a", "dyn-zone-a", "1Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolume,
            static_pv("pv-small", "wait", "2Gi", json!({})),
        ),
        (
            ObjectKind::PersistentVolume,
            static_pv("pv-big", "wait", "10Gi", json!({})),
        ),
    ];
    for (kind, v) in objects {
        put(&h, kind, v);
    }
    let mut deleting = pvc("deleting", json!({}), json!({}));
    deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    deleting["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
    put(&h, ObjectKind::PersistentVolumeClaim, deleting);
    h
}

fn pod_with(claims: &[&str]) -> PodInfo {
    let vols: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| claim_vol(&format!("v{i}"), c))
        .collect();
    make_pod("p").spec("volumes", json!(vols)).build()
}

fn plugin(h: &Handle) -> VolumeBinding {
    VolumeBinding::new(VolumeBindingArgs::default(), h)
}

#[tokio::test]
async fn pre_filter() {
    let h = fixture();
    let pl = plugin(&h);
    let unresolvable = Code::UnschedulableAndUnresolvable;
    let cases: Vec<(&str, PodInfo, Code, &str)> = vec![
        ("no volumes", make_pod("p").build(), Code::Skip, ""),
        (
            "volumes without claims",
            make_pod("p")
                .spec("volumes", json!([{"name": "e", "emptyDir": {}}]))
                .build(),
            Code::Skip,
            "",
        ),
        ("bound", pod_with(&["bound-a"]), Code::Success, ""),
        ("waiting", pod_with(&["wait-1g"]), Code::Success, ""),
        (
            "missing claim",
            pod_with(&["nope"]),
            unresolvable,
            "persistentvolumeclaim \"nope\" not found",
        ),
        (
            "ephemeral claim not created yet",
            make_pod("p")
                .spec("volumes", json!([{"name": "s", "ephemeral": {}}]))
                .build(),
            unresolvable,
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-s\"",
        ),
        (
            "lost claim",
            pod_with(&["lost"]),
            unresolvable,
            "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"gone\"",
        ),
        (
            "deleted claim",
            pod_with(&["deleting"]),
            unresolvable,
            "persistentvolumeclaim \"deleting\" is being deleted",
        ),
        (
            "unbound immediate",
            pod_with(&["bound-a", "unbound-immediate"]),
            unresolvable,
            ERR_REASON_UNBOUND_IMMEDIATE,
        ),
        (
            "unbound without class",
            pod_with(&["no-class"]),
            unresolvable,
            ERR_REASON_UNBOUND_IMMEDIATE,
        ),
        (
            "unbound of a missing class",
            pod_with(&["missing-class"]),
            unresolvable,
            ERR_REASON_UNBOUND_IMMEDIATE,
        ),
        (
            "pre-bound claim waits for the controller",
            pod_with(&["prebound"]),
            unresolvable,
            ERR_REASON_UNBOUND_IMMEDIATE,
        ),
        (
            "class without binding mode",
            pod_with(&["nomode"]),
            Code::Error,
            "VolumeBindingMode not set for StorageClass \"nomode\"",
        ),
    ];
    for (name, pod, code, msg) in cases {
        let mut st = CycleState::new();
        let (_, s) = pl.pre_filter(&mut st, &pod, &[]).await;
        assert_eq!((s.code(), s.message().as_str()), (code, msg), "{name}");
        if code == Code::Skip {
            assert!(st.read(&STATE_KEY).is_some(), "{name}: state written");
        }
    }
}

#[tokio::test]
async fn local_volumes_narrow_the_nodes() {
    let h = fixture();
    let pl = plugin(&h);
    let names = |r: Option<PreFilterResult>| {
        r.and_then(|r| r.node_names).map(|n| {
            let mut v: Vec<String> = n.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        })
    };
    type Case = (&'static str, Vec<&'static str>, Option<Vec<&'static str>>);
    let cases: Vec<Case> = vec![
        ("no local volume", vec!["bound-a"], None),
        (
            "one local volume",
            vec!["bound-local"],
            Some(vec!["n1", "n2"]),
        ),
        (
            "two local volumes intersect",
            vec!["bound-local", "bound-local-2"],
            Some(vec!["n2"]),
        ),
        (
            "missing volume: no narrowing",
            vec!["bound-local", "bound-ghost"],
            None,
        ),
    ];
    for (name, claims, want) in cases {
        let mut st = CycleState::new();
        let (r, s) = pl.pre_filter(&mut st, &pod_with(&claims), &[]).await;
        assert!(s.is_success(), "{name}: {s:?}");
        let want = want.map(|w| w.into_iter().map(String::from).collect::<Vec<_>>());
        assert_eq!(names(r), want, "{name}");
    }
}

fn zone_node(name: &str, zone: &str) -> NodeInfo {
    node_with(
        make_node(name)
            .label("topology.kubernetes.io/zone", zone)
            .label("kubernetes.io/hostname", name)
            .build(),
        vec![],
    )
}

/// Runs PreFilter and Filter on one node; the decision stored for it.
async fn filter(
    pl: &VolumeBinding,
    pod: &PodInfo,
    node: &NodeInfo,
) -> (Status, Option<PodVolumes>) {
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, pod, &[]).await;
    assert!(pre.is_success(), "{pre:?}");
    let s = pl.filter(&st, pod, node);
    let decided = st
        .read(&STATE_KEY)
        .unwrap()
        .by_node
        .lock()
        .get(node.name())
        .cloned();
    (s, decided)
}

fn names_of(v: &Option<PodVolumes>) -> (Vec<String>, Vec<String>) {
    let Some(v) = v else {
        return (vec![], vec![]);
    };
    (
        v.static_bindings
            .iter()
            .map(|(pv, pvc)| {
                format!(
                    "{}={}",
                    pvc.metadata.name.as_deref().unwrap(),
                    pv.metadata.name.as_deref().unwrap()
                )
            })
            .collect(),
        v.dynamic_provisions
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect(),
    )
}

#[tokio::test]
async fn filter_cases() {
    let h = fixture();
    // A volume claimed by another claim, one not yet available, one in the
    // wrong zone.
    put(
        &h,
        ObjectKind::PersistentVolume,
        static_pv(
            "pv-claimed",
            "wait",
            "1Gi",
            json!({"claimRef": {"namespace": "default", "name": "other"}}),
        ),
    );
    let mut released = static_pv("pv-released", "wait", "1Gi", json!({}));
    released["status"]["phase"] = json!("Released");
    put(&h, ObjectKind::PersistentVolume, released);
    let pl = plugin(&h);
    let ok = |s: &[&str], d: &[&str]| -> Result<(Vec<String>, Vec<String>), Vec<&'static str>> {
        Ok((
            s.iter().map(|x| x.to_string()).collect(),
            d.iter().map(|x| x.to_string()).collect(),
        ))
    };
    type Want = Result<(Vec<String>, Vec<String>), Vec<&'static str>>;
    let cases: Vec<(&str, Vec<&str>, &str, Want)> = vec![
        (
            "bound volume in the node's zone",
            vec!["bound-a"],
            "a",
            ok(&[], &[]),
        ),
        (
            "bound volume in another zone",
            vec!["bound-a"],
            "b",
            Err(vec![ERR_REASON_NODE_CONFLICT]),
        ),
        (
            "bound to a missing volume",
            vec!["bound-ghost"],
            "a",
            Err(vec![ERR_REASON_PV_NOT_EXIST]),
        ),
        (
            "smallest fitting volume",
            vec!["wait-1g"],
            "a",
            ok(&["wait-1g=pv-small"], &[]),
        ),
        (
            "bigger request takes the big volume",
            vec!["wait-5g"],
            "a",
            ok(&["wait-5g=pv-big"], &[]),
        ),
        (
            "two claims take two volumes, smallest request first",
            vec!["wait-5g", "wait-1g"],
            "a",
            ok(&["wait-1g=pv-small", "wait-5g=pv-big"], &[]),
        ),
        (
            "three claims, two volumes, no provisioner",
            vec!["wait-1g", "wait-1g-b", "wait-5g"],
            "a",
            Err(vec![ERR_REASON_BIND_CONFLICT]),
        ),
        (
            "access modes must be offered",
            vec!["wait-rwx"],
            "a",
            Err(vec![ERR_REASON_BIND_CONFLICT]),
        ),
        (
            "volume mode must match",
            vec!["wait-block"],
            "a",
            Err(vec![ERR_REASON_BIND_CONFLICT]),
        ),
        (
            "selector matches",
            vec!["wait-gold"],
            "a",
            ok(&["wait-gold=pv-small"], &[]),
        ),
        (
            "selector does not match",
            vec!["wait-silver"],
            "a",
            Err(vec![ERR_REASON_BIND_CONFLICT]),
        ),
        (
            "dynamic provisioning",
            vec!["dyn-1g"],
            "b",
            ok(&[], &["dyn-1g"]),
        ),
        (
            "allowed topology matches",
            vec!["dyn-zone-a"],
            "a",
            ok(&[], &["dyn-zone-a"]),
        ),
        (
            "allowed topology does not match",
            vec!["dyn-zone-a"],
            "b",
            Err(vec![ERR_REASON_BIND_CONFLICT]),
        ),
        (
            "static and dynamic together",
            vec!["wait-1g", "dyn-1g", "bound-a"],
            "a",
            ok(&["wait-1g=pv-small"], &["dyn-1g"]),
        ),
        (
            "node and bind conflicts together",
            vec!["bound-a", "dyn-zone-a"],
            "b",
            Err(vec![ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT]),
        ),
    ];
    for (name, claims, zone, want) in cases {
        let node = zone_node("n1", zone);
        let (s, decided) = filter(&pl, &pod_with(&claims), &node).await;
        match want {
            Ok(w) => {
                assert!(s.is_success(), "{name}: {s:?}");
                assert_eq!(names_of(&decided), w, "{name}");
            }
            Err(reasons) => {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.reasons(), reasons.as_slice(), "{name}");
            }
        }
    }
}

#[tokio::test]
async fn volume_affinity_pre_bound_volumes_and_selected_nodes() {
    let h = handle();
    put(
        &h,
        ObjectKind::StorageClass,
        class(
            "wait",
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
        ),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("dyn", "csi.example.com", Some("WaitForFirstConsumer")),
    );
    put(
        &h,
        ObjectKind::PersistentVolume,
        static_pv(
            "pv-zone-a",
            "wait",
            "1Gi",
            json!({"nodeAffinity": zone_affinity("a")}),
        ),
    );
    // Bigger, but pre-bound to the claim "mine" by the user.
    put(
        &h,
        ObjectKind::PersistentVolume,
        static_pv(
            "pv-mine",
            "wait",
            "8Gi",
            json!({"claimRef": {"namespace": "default", "name": "mine"}}),
        ),
    );
    put(
        &h,
        ObjectKind::PersistentVolume,
        static_pv("pv-any", "wait", "2Gi", json!({})),
    );
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        wait_pvc("c", "wait", "1Gi", json!({})),
    );
    put(
        &h,
        ObjectKind::PersistentVolumeClaim,
        wait_pvc("mine", "wait", "1Gi", json!({})),
    );
    let mut selected = wait_pvc("selected", "dyn", "1Gi", json!({}));
    selected["metadata"]["annotations"] = json!({ANN_SELECTED_NODE: "n2"});
    put(&h, ObjectKind::PersistentVolumeClaim, selected);
    let pl = plugin(&h);
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Outcome,
    );
    let cases: Vec<Case> = vec![
        (
            "affinity matches: smallest",
            "c",
            "n1",
            "a",
            Ok("c=pv-zone-a"),
        ),
        (
            "affinity does not match: next",
            "c",
            "n1",
            "b",
            Ok("c=pv-any"),
        ),
        (
            "pre-bound volume wins",
            "mine",
            "n1",
            "a",
            Ok("mine=pv-mine"),
        ),
        (
            "selected node elsewhere",
            "selected",
            "n1",
            "a",
            Err(ERR_REASON_BIND_CONFLICT),
        ),
        ("selected node here", "selected", "n2", "a", Ok("")),
    ];
    for (name, claim, node, zone, want) in cases {
        let (s, decided) = filter(&pl, &pod_with(&[claim]), &zone_node(node, zone)).await;
        match want {
            Ok("") => {
                assert!(s.is_success(), "{name}: {s:?}");
                assert_eq!(names_of(&decided).1, vec![claim.to_string()], "{name}");
            }
            Ok(b) => {
                assert!(s.is_success(), "{name}: {s:?}");
                assert_eq!(names_of(&decided).0, vec![b.to_string()], "{name}");
            }
            Err(r) => assert_eq!(s.reasons(), [r], "{name}"),
        }
    }
}

#[tokio::test]
async fn reserve_keeps_the_next_pod_off_the_volume() {
    let h = fixture();
    let pl = plugin(&h);
    let node = zone_node("n1", "a");
    let p1 = pod_with(&["wait-1g"]);
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, &p1, &[]).await;
    assert!(pre.is_success());
    assert!(pl.filter(&st, &p1, &node).is_success());
    assert!(pl.reserve(&mut st, &p1, "n1").await.is_success());
    assert!(!st.read(&STATE_KEY).unwrap().all_bound);

    // The next pod's claim of the same size gets the big volume.
    let p2 = make_pod("p2")
        .spec("volumes", json!([claim_vol("v", "wait-1g-b")]))
        .build();
    let (_, decided) = filter(&pl, &p2, &node).await;
    assert_eq!(names_of(&decided).0, ["wait-1g-b=pv-big"]);

    // Once the first pod is unreserved, the small one is free again.
    pl.unreserve(&st, &p1, "n1").await;
    let (_, decided) = filter(&pl, &p2, &node).await;
    assert_eq!(names_of(&decided).0, ["wait-1g-b=pv-small"]);

    // A dynamic claim is assumed with the selected node.
    let p3 = pod_with(&["dyn-1g"]);
    let mut st = CycleState::new();
    let _ = pl.pre_filter(&mut st, &p3, &[]).await;
    assert!(pl.filter(&st, &p3, &node).is_success());
    assert!(pl.reserve(&mut st, &p3, "n1").await.is_success());
    let (_, decided) = filter(&pl, &p3, &zone_node("n2", "a")).await;
    assert!(decided.is_none(), "assumed on n1: no decision for n2");
    pl.unreserve(&st, &p3, "n1").await;

    // Pods whose claims are all bound have nothing to bind.
    let p4 = pod_with(&["bound-a"]);
    let mut st = CycleState::new();
    let _ = pl.pre_filter(&mut st, &p4, &[]).await;
    assert!(pl.filter(&st, &p4, &node).is_success());
    assert!(pl.reserve(&mut st, &p4, "n1").await.is_success());
    assert!(st.read(&STATE_KEY).unwrap().all_bound);
    assert!(pl.pre_bind(&st, &p4, "n1").await.is_success());
}

#[test]
fn hints() {
    let h = handle();
    let regs = plugin(&h).events_to_register().unwrap();
    let events: Vec<_> = regs.iter().map(|r| r.event).collect();
    let add_update = ActionType::ADD | ActionType::UPDATE;
    assert_eq!(
        events,
        [
            ClusterEvent::new(EventResource::StorageClass, add_update),
            ClusterEvent::new(EventResource::PersistentVolumeClaim, add_update),
            ClusterEvent::new(EventResource::PersistentVolume, add_update),
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL
            ),
            ClusterEvent::new(EventResource::CsiNode, add_update),
        ]
    );
    assert!(regs[2].hint.is_none() && regs[3].hint.is_none());
    let obj = |kind: ObjectKind, v: Value| {
        Some(EventObject::Object(KubeObject::from_json(kind, v).unwrap()))
    };
    let p = make_pod("p")
        .spec(
            "volumes",
            json!([claim_vol("a", "data"), {"name": "s", "ephemeral": {}}]),
        )
        .build();

    let sc = regs[0].hint.as_ref().unwrap();
    let c1 = obj(
        ObjectKind::StorageClass,
        class("c", "p", Some("WaitForFirstConsumer")),
    );
    let mut topo = class("c", "p", Some("WaitForFirstConsumer"));
    topo["allowedTopologies"] = json!([{"matchLabelExpressions": [{"key": "z", "values": ["a"]}]}]);
    let c2 = obj(ObjectKind::StorageClass, topo);
    let mut labelled = class("c", "p", Some("WaitForFirstConsumer"));
    labelled["metadata"]["labels"] = json!({"x": "y"});
    let c3 = obj(ObjectKind::StorageClass, labelled);
    assert_eq!(
        sc(&p, None, c1.as_ref()).unwrap(),
        QueueingHint::Queue,
        "created"
    );
    assert_eq!(
        sc(&p, c1.as_ref(), c2.as_ref()).unwrap(),
        QueueingHint::Queue,
        "topologies"
    );
    assert_eq!(
        sc(&p, c1.as_ref(), c3.as_ref()).unwrap(),
        QueueingHint::Skip,
        "labels"
    );

    let claim = regs[1].hint.as_ref().unwrap();
    let c = |ns: &str, name: &str| {
        obj(
            ObjectKind::PersistentVolumeClaim,
            json!({"metadata": {"name": name, "namespace": ns}, "spec": {}}),
        )
    };
    assert_eq!(
        claim(&p, None, c("default", "data").as_ref()).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        claim(&p, None, c("default", "p-s").as_ref()).unwrap(),
        QueueingHint::Queue,
        "ephemeral"
    );
    assert_eq!(
        claim(&p, None, c("default", "x").as_ref()).unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(
        claim(&p, None, c("o", "data").as_ref()).unwrap(),
        QueueingHint::Skip
    );

    let csi = regs[4].hint.as_ref().unwrap();
    let n = |ann: Option<&str>| {
        let mut v = json!({"metadata": {"name": "n"}, "spec": {"drivers": []}});
        if let Some(a) = ann {
            v["metadata"]["annotations"] = json!({ANN_MIGRATED_PLUGINS: a});
        }
        obj(ObjectKind::CsiNode, v)
    };
    assert_eq!(
        csi(&p, None, n(None).as_ref()).unwrap(),
        QueueingHint::Queue,
        "created"
    );
    assert_eq!(
        csi(
            &p,
            n(None).as_ref(),
            n(Some("kubernetes.io/aws-ebs")).as_ref()
        )
        .unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        csi(&p, n(Some("x")).as_ref(), n(Some("x")).as_ref()).unwrap(),
        QueueingHint::Skip
    );
}

/// The embedded cluster binds and provisions what PreBind writes; its
/// changes reach the handle's object store as the scheduler's watch would
/// carry them.
#[tokio::test(start_paused = true)]
async fn pre_bind_against_the_embedded_cluster() {
    let cluster = EmbeddedCluster::new();
    let h = Handle::new(cluster.clone(), cluster.clone(), Parallelizer::inline());
    let node = zone_node("n1", "a");
    h.set_snapshot(Arc::new(Snapshot::from_nodes(vec![node.clone()])));
    for v in [
        class(
            "local",
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
        ),
        class("fast", "csi.example.com", Some("WaitForFirstConsumer")),
        static_pv("pv-1", "local", "5Gi", json!({})),
        wait_pvc("static", "local", "1Gi", json!({})),
        wait_pvc("dynamic", "fast", "3Gi", json!({})),
    ] {
        cluster.apply(v).unwrap();
    }
    let mut rx = cluster.subscribe();
    let store = h.clone();
    let forward = tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            if let ClusterChange::Object(e) = c {
                match e {
                    WatchEvent::Added(o) | WatchEvent::Modified { new: o, .. } => {
                        store.objects().upsert(o)
                    }
                    WatchEvent::Deleted(o) => store.objects().remove(&o),
                }
            }
        }
    });
    // Let the forwarder deliver the current objects.
    while h.objects().persistent_volume_claims("").len() < 2 {
        tokio::task::yield_now().await;
    }

    let pl = plugin(&h);
    let pod = pod_with(&["static", "dynamic"]);
    let mut st = CycleState::new();
    let (_, pre) = pl.pre_filter(&mut st, &pod, &[]).await;
    assert!(pre.is_success(), "{pre:?}");
    assert!(pl.filter(&st, &pod, &node).is_success());
    assert!(pl.reserve(&mut st, &pod, "n1").await.is_success());
    let s = pl.pre_bind(&st, &pod, "n1").await;
    assert!(s.is_success(), "{s:?}");

    let claim =
        |name: &str| match cluster.object(ObjectKind::PersistentVolumeClaim, "default", name) {
            Some(KubeObject::PersistentVolumeClaim(c)) => c,
            other => panic!("{other:?}"),
        };
    let static_claim = claim("static");
    assert_eq!(
        static_claim.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("pv-1")
    );
    assert_eq!(
        static_claim.status.as_ref().unwrap().phase.as_deref(),
        Some("Bound")
    );
    let dynamic = claim("dynamic");
    let annotations = dynamic.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations.get(ANN_SELECTED_NODE).map(String::as_str),
        Some("n1")
    );
    let provisioned = dynamic.spec.as_ref().unwrap().volume_name.clone().unwrap();
    assert!(provisioned.starts_with("pvc-"), "{provisioned}");
    assert!(matches!(
        cluster.object(ObjectKind::PersistentVolume, "", &provisioned),
        Some(KubeObject::PersistentVolume(_))
    ));
    match cluster.object(ObjectKind::PersistentVolume, "", "pv-1") {
        Some(KubeObject::PersistentVolume(v)) => {
            let r = v.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
            assert_eq!(r.name.as_deref(), Some("static"));
        }
        other => panic!("{other:?}"),
    }
    forward.abort();
}

/// Without a PV controller nothing gets bound: PreBind gives up after
/// bindTimeoutSeconds; a stale volume fails the write at once.
#[tokio::test(start_paused = true)]
async fn pre_bind_times_out_and_reports_conflicts() {
    let h = fixture();
    h.set_snapshot(Arc::new(Snapshot::from_nodes(vec![zone_node("n1", "a")])));
    let pl = VolumeBinding::new(
        VolumeBindingArgs {
            bind_timeout_seconds: 5,
            shape: None,
        },
        &h,
    );
    // The handle's cluster is empty: the volume does not exist there.
    let pod = pod_with(&["wait-1g"]);
    let mut st = CycleState::new();
    let _ = pl.pre_filter(&mut st, &pod, &[]).await;
    assert!(pl.filter(&st, &pod, &zone_node("n1", "a")).is_success());
    assert!(pl.reserve(&mut st, &pod, "n1").await.is_success());
    let s = pl.pre_bind(&st, &pod, "n1").await;
    assert!(s.is_error(), "{s:?}");
    assert!(s.message().contains("not found"), "{s:?}");

    // The claim is written, but nobody provisions it.
    let cluster = EmbeddedCluster::new();
    let h = Handle::new(cluster.clone(), cluster.clone(), Parallelizer::inline());
    h.set_snapshot(Arc::new(Snapshot::from_nodes(vec![zone_node("n1", "a")])));
    cluster
        .apply(class(
            "nobody",
            "example.com/absent",
            Some("WaitForFirstConsumer"),
        ))
        .unwrap();
    cluster
        .apply(wait_pvc("c", "nobody", "1Gi", json!({})))
        .unwrap();
    for kind in [ObjectKind::StorageClass, ObjectKind::PersistentVolumeClaim] {
        for o in cluster.objects(kind) {
            h.objects().upsert(o);
        }
    }
    let pl = VolumeBinding::new(
        VolumeBindingArgs {
            bind_timeout_seconds: 5,
            shape: None,
        },
        &h,
    );
    let pod = pod_with(&["c"]);
    let mut st = CycleState::new();
    let _ = pl.pre_filter(&mut st, &pod, &[]).await;
    assert!(pl.filter(&st, &pod, &zone_node("n1", "a")).is_success());
    assert!(pl.reserve(&mut st, &pod, "n1").await.is_success());
    let start = tokio::time::Instant::now();
    let s = pl.pre_bind(&st, &pod, "n1").await;
    assert_eq!(s.message(), "binding volumes: context deadline exceeded");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let node = zone_node("n1", "a");
    assert!(
        pl.filter(&CycleState::new(), &make_pod("plain").build(), &node)
            .is_success()
    );
    assert!(
        pl.filter(&CycleState::new(), &pod, &node).is_error(),
        "claims but no state"
    );
    let mut empty = CycleState::new();
    empty.write(&STATE_KEY, State::default());
    assert_eq!(
        pl.pre_bind(&empty, &pod, "n1").await.message(),
        "no pod volumes found for node \"n1\""
    );
}
