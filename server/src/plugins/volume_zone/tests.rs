use serde_json::{Value, json};

use super::*;
use crate::cache::ObjectKind;
use crate::framework::{Code, EventObject};
use crate::plugins::volume_helpers::testing::{claim_vol, class, handle, node_with, put, pv, pvc};
use crate::testing::{make_node, make_pod};

type Label = (&'static str, &'static str);

const BZ: &str = LABEL_FAILURE_DOMAIN_BETA_ZONE;
const BR: &str = LABEL_FAILURE_DOMAIN_BETA_REGION;

fn fixture() -> Handle {
    let h = handle();
    let vols = [
        ("vol-beta-zone", json!({BZ: "us-west1-a"})),
        (
            "vol-beta-region-zone",
            json!({BR: "us-west1", BZ: "us-west1-b"}),
        ),
        ("vol-ga-zone", json!({LABEL_ZONE: "us-west1-a"})),
        ("vol-ga-region", json!({LABEL_REGION: "us-west1"})),
        ("vol-multi", json!({LABEL_ZONE: "us-west1-a__us-west1-b"})),
        ("vol-bad", json!({LABEL_ZONE: "us-west1-a____"})),
        ("vol-plain", json!({"other": "x"})),
    ];
    for (name, labels) in vols {
        put(
            &h,
            ObjectKind::PersistentVolume,
            pv(name, labels, json!({})),
        );
        put(
            &h,
            ObjectKind::PersistentVolumeClaim,
            pvc(
                &format!("pvc-{name}"),
                json!({"volumeName": name}),
                json!({}),
            ),
        );
    }
    put(
        &h,
        ObjectKind::StorageClass,
        class("wffc", "p", Some("WaitForFirstConsumer")),
    );
    put(
        &h,
        ObjectKind::StorageClass,
        class("immediate", "p", Some("Immediate")),
    );
    put(&h, ObjectKind::StorageClass, class("nomode", "p", None));
    let claims = [
        ("pvc-no-class", json!({})),
        ("pvc-empty-class", json!({"storageClassName": ""})),
        ("pvc-wffc", json!({"storageClassName": "wffc"})),
        ("pvc-immediate", json!({"storageClassName": "immediate"})),
        ("pvc-nomode", json!({"storageClassName": "nomode"})),
        ("pvc-missing-class", json!({"storageClassName": "ghost"})),
        ("pvc-missing-pv", json!({"volumeName": "ghost"})),
    ];
    for (name, spec) in claims {
        put(
            &h,
            ObjectKind::PersistentVolumeClaim,
            pvc(name, spec, json!({})),
        );
    }
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

#[tokio::test]
async fn pre_filter_errors_and_skips() {
    let h = fixture();
    let pl = VolumeZone::new(NoArgs, &h);
    let cases = [
        ("no volumes", vec![], Code::Skip, ""),
        ("wait for first consumer", vec!["pvc-wffc"], Code::Skip, ""),
        (
            "volume without topology",
            vec!["pvc-vol-plain"],
            Code::Skip,
            "",
        ),
        (
            "malformed label ignored",
            vec!["pvc-vol-bad"],
            Code::Skip,
            "",
        ),
        (
            "bound with topology",
            vec!["pvc-vol-ga-zone"],
            Code::Success,
            "",
        ),
        (
            "wffc and bound",
            vec!["pvc-wffc", "pvc-vol-ga-zone"],
            Code::Success,
            "",
        ),
        (
            "claim without name",
            vec![""],
            Code::UnschedulableAndUnresolvable,
            "PersistentVolumeClaim had no name",
        ),
        (
            "missing claim",
            vec!["nope"],
            Code::UnschedulableAndUnresolvable,
            "persistentvolumeclaim \"nope\" not found",
        ),
        (
            "unbound without class",
            vec!["pvc-no-class"],
            Code::UnschedulableAndUnresolvable,
            "PersistentVolumeClaim had no pv name and storageClass name",
        ),
        (
            "unbound with empty class",
            vec!["pvc-empty-class"],
            Code::UnschedulableAndUnresolvable,
            "PersistentVolumeClaim had no pv name and storageClass name",
        ),
        (
            "missing class",
            vec!["pvc-missing-class"],
            Code::UnschedulableAndUnresolvable,
            "storageclass.storage.k8s.io \"ghost\" not found",
        ),
        (
            "class without binding mode",
            vec!["pvc-nomode"],
            Code::UnschedulableAndUnresolvable,
            "VolumeBindingMode not set for StorageClass \"nomode\"",
        ),
        (
            "unbound immediate claim",
            vec!["pvc-immediate"],
            Code::UnschedulableAndUnresolvable,
            "PersistentVolume had no name",
        ),
        (
            "missing volume",
            vec!["pvc-missing-pv"],
            Code::UnschedulableAndUnresolvable,
            "persistentvolume \"ghost\" not found",
        ),
    ];
    for (name, claims, code, msg) in cases {
        let mut st = CycleState::new();
        let (_, s) = pl.pre_filter(&mut st, &pod_with(&claims), &[]).await;
        assert_eq!((s.code(), s.message().as_str()), (code, msg), "{name}");
    }
}

#[tokio::test]
async fn filter_matches_node_topology() {
    let h = fixture();
    let pl = VolumeZone::new(NoArgs, &h);
    type Case = (&'static str, Vec<&'static str>, Vec<Label>, bool);
    let cases: Vec<Case> = vec![
        (
            "beta volume, beta node",
            vec!["pvc-vol-beta-zone"],
            vec![(BZ, "us-west1-a")],
            true,
        ),
        (
            "beta volume, GA node",
            vec!["pvc-vol-beta-zone"],
            vec![(LABEL_ZONE, "us-west1-a")],
            true,
        ),
        (
            "beta volume, other zone",
            vec!["pvc-vol-beta-zone"],
            vec![(BZ, "us-west1-b")],
            false,
        ),
        (
            "beta label wins over GA label on the node",
            vec!["pvc-vol-beta-zone"],
            vec![(BZ, "us-west1-b"), (LABEL_ZONE, "us-west1-a")],
            false,
        ),
        (
            "node without topology labels",
            vec!["pvc-vol-beta-zone"],
            vec![("other", "x")],
            true,
        ),
        ("node without labels", vec!["pvc-vol-ga-zone"], vec![], true),
        (
            "GA volume, GA node",
            vec!["pvc-vol-ga-zone"],
            vec![(LABEL_ZONE, "us-west1-a")],
            true,
        ),
        (
            "GA volume, beta node only",
            vec!["pvc-vol-ga-zone"],
            vec![(BZ, "us-west1-a")],
            false,
        ),
        (
            "GA volume, node region only",
            vec!["pvc-vol-ga-zone"],
            vec![(LABEL_REGION, "us-west1")],
            false,
        ),
        (
            "region and zone both match",
            vec!["pvc-vol-beta-region-zone"],
            vec![(BR, "us-west1"), (BZ, "us-west1-b")],
            true,
        ),
        (
            "region matches, zone does not",
            vec!["pvc-vol-beta-region-zone"],
            vec![(BR, "us-west1"), (BZ, "us-west1-a")],
            false,
        ),
        (
            "GA region",
            vec!["pvc-vol-ga-region"],
            vec![(LABEL_REGION, "us-west1")],
            true,
        ),
        (
            "GA region mismatch",
            vec!["pvc-vol-ga-region"],
            vec![(LABEL_REGION, "eu")],
            false,
        ),
        (
            "multi-zone first",
            vec!["pvc-vol-multi"],
            vec![(LABEL_ZONE, "us-west1-a")],
            true,
        ),
        (
            "multi-zone second",
            vec!["pvc-vol-multi"],
            vec![(LABEL_ZONE, "us-west1-b")],
            true,
        ),
        (
            "multi-zone other",
            vec!["pvc-vol-multi"],
            vec![(LABEL_ZONE, "us-west1-c")],
            false,
        ),
        (
            "every volume must match",
            vec!["pvc-vol-ga-zone", "pvc-vol-multi"],
            vec![(LABEL_ZONE, "us-west1-b")],
            false,
        ),
    ];
    for (name, claims, labels, fits) in cases {
        let pod = pod_with(&claims);
        let mut nb = make_node("n");
        for (k, v) in &labels {
            nb = nb.label(k, v);
        }
        let node = node_with(nb.build(), vec![]);
        let mut st = CycleState::new();
        let (_, pre) = pl.pre_filter(&mut st, &pod, &[]).await;
        assert!(pre.is_success(), "{name}: {pre:?}");
        let s = pl.filter(&st, &pod, &node);
        if fits {
            assert!(s.is_success(), "{name}: {s:?}");
        } else {
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
            assert_eq!(s.message(), ERR_REASON_CONFLICT, "{name}");
        }
        // Without PreFilter state, Filter works it out itself.
        let again = pl.filter(&CycleState::new(), &pod, &node);
        assert_eq!(again.code(), s.code(), "{name}: fallback");
    }
    let empty = make_pod("e").build();
    let node = node_with(make_node("n").label(LABEL_ZONE, "x").build(), vec![]);
    assert!(pl.filter(&CycleState::new(), &empty, &node).is_success());
}

fn obj(kind: ObjectKind, v: Value) -> Option<EventObject> {
    Some(EventObject::Object(KubeObject::from_json(kind, v).unwrap()))
}

#[test]
fn hints() {
    let h = handle();
    let regs = VolumeZone::new(NoArgs, &h).events_to_register().unwrap();
    let events: Vec<_> = regs.iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            ClusterEvent::new(EventResource::StorageClass, ActionType::ADD),
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL
            ),
            ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD | ActionType::UPDATE
            ),
            ClusterEvent::new(
                EventResource::PersistentVolume,
                ActionType::ADD | ActionType::UPDATE
            ),
        ]
    );
    assert!(regs[1].hint.is_none());
    let pod = pod_with(&["data"]);

    let sc = regs[0].hint.as_ref().unwrap();
    let cls = |m: Option<&str>| obj(ObjectKind::StorageClass, class("c", "p", m));
    assert_eq!(
        sc(&pod, None, cls(Some("WaitForFirstConsumer")).as_ref()).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        sc(&pod, None, cls(Some("Immediate")).as_ref()).unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(
        sc(&pod, None, cls(None).as_ref()).unwrap(),
        QueueingHint::Skip
    );

    let claim = regs[2].hint.as_ref().unwrap();
    let c = |ns: &str, name: &str| {
        obj(
            ObjectKind::PersistentVolumeClaim,
            json!({"metadata": {"name": name, "namespace": ns}, "spec": {}}),
        )
    };
    assert_eq!(
        claim(&pod, None, c("default", "data").as_ref()).unwrap(),
        QueueingHint::Queue
    );
    assert_eq!(
        claim(&pod, None, c("default", "x").as_ref()).unwrap(),
        QueueingHint::Skip
    );
    assert_eq!(
        claim(&pod, None, c("other", "data").as_ref()).unwrap(),
        QueueingHint::Skip
    );

    let vol = regs[3].hint.as_ref().unwrap();
    let v = |labels: Value| obj(ObjectKind::PersistentVolume, pv("v", labels, json!({})));
    let a = v(json!({LABEL_ZONE: "a"}));
    let b = v(json!({LABEL_ZONE: "b"}));
    let a_other = v(json!({LABEL_ZONE: "a", "x": "y"}));
    assert_eq!(
        vol(&pod, None, a.as_ref()).unwrap(),
        QueueingHint::Queue,
        "created"
    );
    assert_eq!(
        vol(&pod, a.as_ref(), b.as_ref()).unwrap(),
        QueueingHint::Queue,
        "zone changed"
    );
    assert_eq!(
        vol(&pod, a.as_ref(), a_other.as_ref()).unwrap(),
        QueueingHint::Skip,
        "other label"
    );
    assert!(vol(&pod, None, None).is_err());
}
