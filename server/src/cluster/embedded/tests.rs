//! The embedded cluster's store, admission and writes, tested through
//! its public face.

use super::*;
use crate::cluster::{ClusterSource, PodScheduledCondition};
use crate::framework::ClusterClient;
use crate::testing::{make_node, make_pod};

fn pod_json(name: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(make_pod(name).object()).unwrap();
    v["metadata"].as_object_mut().unwrap().remove("uid");
    v
}

#[tokio::test]
async fn binding_behaves_like_the_api_server() {
    let c = EmbeddedCluster::new();
    c.apply(serde_json::to_value(make_node("n1").cpu("1").object()).unwrap())
        .unwrap();
    c.apply(pod_json("p")).unwrap();
    let stored = c.get_pod("default", "p").unwrap();
    let info = PodInfo::new(stored).unwrap();
    assert!(info.uid.starts_with("00000000-"));
    c.bind(&info, "n1").await.unwrap();
    let bound = c.get_pod("default", "p").unwrap();
    assert_eq!(
        bound.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );
    let cond = &bound.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str()),
        ("PodScheduled", "True")
    );

    let again = c.bind(&info, "n1").await.unwrap_err();
    assert_eq!(
        again.to_string(),
        "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
    );
    assert!(matches!(again, ClusterError::Conflict(_)));

    let missing = PodInfo::new(Arc::new(make_pod("missing").object())).unwrap();
    let err = c.bind(&missing, "n1").await.unwrap_err();
    assert_eq!(
        err,
        ClusterError::NotFound("pods \"missing\" not found".into())
    );

    c.apply(pod_json("q")).unwrap();
    let stale = PodInfo::new(Arc::new(make_pod("q").uid("stale").object())).unwrap();
    assert!(matches!(
        c.bind(&stale, "n1").await,
        Err(ClusterError::Conflict(_))
    ));
}

#[tokio::test]
async fn a_status_write_shares_the_version_it_was_written_over() {
    let c = EmbeddedCluster::new();
    c.apply(serde_json::to_value(make_node("n1").cpu("1").object()).unwrap())
        .unwrap();
    c.apply(pod_json("p")).unwrap();
    let mut rx = c.subscribe();
    while !matches!(rx.recv().await, Some(ClusterChange::Synced)) {}
    let before = c.get_pod("default", "p").unwrap();
    let info = PodInfo::new(before.clone()).unwrap();
    c.set_nominated_node_name(&info, Some("n1")).await.unwrap();
    let Some(ClusterChange::Pod(WatchEvent::Modified { old, new })) = rx.recv().await else {
        panic!("the nomination is a change");
    };
    assert!(Arc::ptr_eq(old.base().unwrap(), &before));
    assert!(
        Arc::ptr_eq(new.base().unwrap(), &before),
        "metadata and spec shared, not copied"
    );
    assert_ne!(new.resource_version(), old.resource_version());
    // Read back whole, as the API serves it.
    let now = c.get_pod("default", "p").unwrap();
    assert_eq!(
        now.status.as_ref().unwrap().nominated_node_name.as_deref(),
        Some("n1")
    );
    assert_eq!(
        now.metadata.resource_version.as_deref(),
        new.resource_version()
    );
    assert_eq!(
        (&now.spec, &now.metadata.uid),
        (&before.spec, &before.metadata.uid)
    );
    // A binding over it shares them too, with its nodeName; read back
    // whole: bound, the nomination over, PodScheduled=True.
    c.bind(&info, "n1").await.unwrap();
    let bound = c.get_pod("default", "p").unwrap();
    assert_eq!(
        bound.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );
    let status = bound.status.as_ref().unwrap();
    assert_eq!(status.nominated_node_name, None);
    let conditions = status.conditions.as_ref().unwrap();
    assert_eq!(
        (conditions[0].type_.as_str(), conditions[0].status.as_str()),
        ("PodScheduled", "True")
    );
    let mut rest = (*bound).clone();
    rest.spec.as_mut().unwrap().node_name = None;
    assert_eq!(rest.spec, before.spec, "nothing else of the spec changed");
    let Some(ClusterChange::Pod(WatchEvent::Modified { new, .. })) = rx.recv().await else {
        panic!("the binding is a change");
    };
    assert!(Arc::ptr_eq(new.base().unwrap(), &before));
    assert_eq!(new.node_name(), Some("n1"));
    assert_eq!(new.to_pod(), *bound);
    // Bound once: a second binding is refused, as the API server refuses it.
    assert!(matches!(
        c.bind(&info, "n2").await,
        Err(ClusterError::Conflict(m)) if m.contains("is already assigned to node \"n1\"")
    ));
    // A status write over the bound version keeps its nodeName.
    c.set_nominated_node_name(&info, None).await.unwrap();
    let Some(ClusterChange::Pod(WatchEvent::Modified { new, .. })) = rx.recv().await else {
        panic!("the status write is a change");
    };
    assert_eq!(new.node_name(), Some("n1"));
    let bound = c.get_pod("default", "p").unwrap();
    assert_eq!(
        bound.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );
    // A stale writer is refused, the object untouched.
    let stale = PodInfo::new(Arc::new(make_pod("p").uid("stale").object())).unwrap();
    assert!(matches!(
        c.set_nominated_node_name(&stale, None).await,
        Err(ClusterError::Conflict(_))
    ));
    assert_eq!(c.get_pod("default", "p").unwrap(), bound);
}

#[tokio::test]
async fn subscribers_get_state_then_changes() {
    let c = EmbeddedCluster::new();
    c.apply(serde_json::to_value(make_node("n1").object()).unwrap())
        .unwrap();
    c.apply(pod_json("p")).unwrap();
    let mut rx = c.subscribe();
    // The API server's own namespaces come first, as objects pods
    // refer to.
    for ns in SYSTEM_NAMESPACES {
        match rx.recv().await {
            Some(ClusterChange::Object(WatchEvent::Added(o))) => {
                assert_eq!(o.metadata().name.as_deref(), Some(ns));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(matches!(
        rx.recv().await,
        Some(ClusterChange::Node(WatchEvent::Added(_)))
    ));
    assert!(matches!(
        rx.recv().await,
        Some(ClusterChange::Pod(WatchEvent::Added(_)))
    ));
    assert!(matches!(rx.recv().await, Some(ClusterChange::Synced)));
    // The same object again changes nothing: no event, as kubectl's
    // "unchanged".
    assert_eq!(
        c.apply_all(vec![pod_json("p")]).unwrap()[0].3,
        Applied::Unchanged
    );
    let mut changed = pod_json("p");
    changed["metadata"]["labels"] = serde_json::json!({"v": "2"});
    assert_eq!(
        c.apply_all(vec![changed]).unwrap()[0].3,
        Applied::Configured
    );
    match rx.recv().await {
        Some(ClusterChange::Pod(WatchEvent::Modified { old, new })) => {
            let (old, new) = (old.get(), new.get());
            assert_eq!(old.metadata.uid, new.metadata.uid, "updates keep the UID");
            assert_ne!(old.metadata.resource_version, new.metadata.resource_version);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(c.delete(Kind::Pod, "default", "p"));
    assert!(matches!(
        rx.recv().await,
        Some(ClusterChange::Pod(WatchEvent::Deleted(_)))
    ));
    assert!(!c.delete(Kind::Pod, "default", "p"));
}

#[test]
fn apply_refuses_what_the_api_server_refuses() {
    use serde_json::json;
    let c = EmbeddedCluster::new();
    let mut p = pod_json("p");
    p["metadata"]["namespace"] = json!("nope");
    let (i, e) = c.apply_all(vec![pod_json("ok"), p.clone()]).unwrap_err();
    assert_eq!(i, 1);
    assert_eq!(
        e.to_string(),
        "metadata.namespace: namespaces \"nope\" not found"
    );
    assert!(c.get_pod("default", "ok").is_none(), "all or nothing");
    // A namespace created earlier in the same batch is there.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nope"}});
    let done = c.apply_all(vec![ns, p]).unwrap();
    assert_eq!(done[1].3, Applied::Created);
    let mut typo = pod_json("t");
    typo["spec"]["nodeSelektor"] = json!({"a": "b"});
    assert_eq!(
        c.apply(typo).unwrap_err().to_string(),
        "spec.nodeSelektor: unknown field \"nodeSelektor\""
    );
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c", "namespace": "default"}, "spec": {"storageClassNme": "x"}});
    assert_eq!(
        c.apply(pvc).unwrap_err().to_string(),
        "spec.storageClassNme: unknown field \"storageClassNme\""
    );
    let mut limited = pod_json("l");
    limited["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "64"}});
    c.apply(limited).unwrap();
    let stored = c.get_pod("default", "l").unwrap();
    let reqs = stored.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .clone()
        .unwrap();
    assert_eq!(
        reqs["cpu"].0, "64",
        "stored defaulted, as the API server stores it"
    );
}

#[test]
fn files_get_the_namespaces_their_objects_live_in() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: shop}\nspec: {containers: [{name: c}]}\n";
    let c = EmbeddedCluster::from_objects(parse_objects(text, "f.yaml").unwrap()).unwrap();
    assert!(c.object(ObjectKind::Namespace, "", "shop").is_some());
    assert!(c.object(ObjectKind::Namespace, "", "kube-system").is_some());
}

#[test]
fn invalid_objects_are_refused_with_their_field() {
    let c = EmbeddedCluster::new();
    let mut v = pod_json("p");
    v["spec"]["containers"][0]["resources"] = serde_json::json!({"requests": {"cpu": "lots"}});
    let err = c.apply(v).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("spec.containers[0].resources.requests.cpu: quantities must match"),
        "{err}"
    );
    assert!(c.pods().is_empty(), "nothing stored");
    let err = c
        .apply(serde_json::json!({"kind": "Deployment"}))
        .unwrap_err();
    assert_eq!(err, ApplyError::UnsupportedKind("Deployment".into()));
}

#[tokio::test]
async fn the_volume_controller_binds_claimed_volumes_and_provisions_selected_claims() {
    use serde_json::json;
    let c = EmbeddedCluster::new();
    c.apply(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "static", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap();
    c.apply(
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}}),
    )
    .unwrap();
    // The scheduler's binder claims the volume through an update.
    let pv = c.object(ObjectKind::PersistentVolume, "", "pv1").unwrap();
    let KubeObject::PersistentVolume(pv) = pv else {
        unreachable!()
    };
    let mut claimed = (*pv).clone();
    claimed.spec.as_mut().unwrap().claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
        namespace: Some("default".into()),
        name: Some("static".into()),
        ..Default::default()
    });
    c.update_object(KubeObject::PersistentVolume(Arc::new(claimed.clone())))
        .await
        .unwrap();
    let Some(KubeObject::PersistentVolumeClaim(pvc)) =
        c.object(ObjectKind::PersistentVolumeClaim, "default", "static")
    else {
        unreachable!()
    };
    assert_eq!(
        pvc.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("pv1")
    );
    assert_eq!(pvc.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    assert_eq!(
        pvc.metadata.annotations.as_ref().unwrap()[volumes::ANN_BIND_COMPLETED],
        "yes"
    );
    // A stale update is refused as the API server refuses it.
    let err = c
        .update_object(KubeObject::PersistentVolume(Arc::new(claimed)))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Conflict(_)), "{err}");

    // Dynamic provisioning once the scheduler picked a node.
    c.apply(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
        "provisioner": "example.com/csi", "volumeBindingMode": "WaitForFirstConsumer"}))
        .unwrap();
    c.apply(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dyn", "namespace": "default", "annotations": {"volume.kubernetes.io/selected-node": "n1"}},
        "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}))
        .unwrap();
    let Some(KubeObject::PersistentVolumeClaim(pvc)) =
        c.object(ObjectKind::PersistentVolumeClaim, "default", "dyn")
    else {
        unreachable!()
    };
    let vol = pvc.spec.as_ref().unwrap().volume_name.clone().unwrap();
    assert!(vol.starts_with("pvc-"));
    let Some(KubeObject::PersistentVolume(pv)) = c.object(ObjectKind::PersistentVolume, "", &vol)
    else {
        unreachable!()
    };
    assert_eq!(
        pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "5Gi"
    );
}

#[tokio::test]
async fn evicted_pods_get_the_disruption_condition_then_go() {
    let c = EmbeddedCluster::new();
    c.apply(pod_json("victim")).unwrap();
    let mut rx = c.subscribe();
    while !matches!(rx.recv().await, Some(ClusterChange::Synced)) {}
    let info = PodInfo::new(c.get_pod("default", "victim").unwrap()).unwrap();
    c.delete_pod(
        &info,
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    .await
    .unwrap();
    match rx.recv().await {
        Some(ClusterChange::Pod(WatchEvent::Modified { new, .. })) => {
            let cond = &new.status().unwrap().conditions.as_ref().unwrap()[0];
            assert_eq!(
                (cond.type_.as_str(), cond.reason.as_deref()),
                ("DisruptionTarget", Some("PreemptionByScheduler"))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        rx.recv().await,
        Some(ClusterChange::Pod(WatchEvent::Deleted(_)))
    ));
    assert!(c.get_pod("default", "victim").is_none());
    assert!(
        c.delete_pod(&info, "again").await.is_err(),
        "a deleted pod cannot be evicted"
    );
}

#[test]
fn gated_pods_are_created_with_the_scheduling_gated_condition() {
    let c = EmbeddedCluster::new();
    let mut v = pod_json("g");
    v["spec"]["schedulingGates"] = serde_json::json!([{"name": "x"}]);
    c.apply(v).unwrap();
    let p = c.get_pod("default", "g").unwrap();
    let cond = &p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
    assert_eq!(cond.reason.as_deref(), Some("SchedulingGated"));
    assert_eq!(
        cond.message.as_deref(),
        Some("Scheduling is blocked due to non-empty scheduling gates")
    );
}

#[tokio::test]
async fn unschedulable_condition_and_nomination() {
    let c = EmbeddedCluster::new();
    c.apply(pod_json("p")).unwrap();
    let info = PodInfo::new(c.get_pod("default", "p").unwrap()).unwrap();
    c.set_unschedulable(
        &info,
        PodScheduledCondition {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
        },
        Some(Some("n1".into())),
    )
    .await
    .unwrap();
    let p = c.get_pod("default", "p").unwrap();
    let st = p.status.as_ref().unwrap();
    let cond = &st.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert_eq!(st.nominated_node_name.as_deref(), Some("n1"));
}
