//! The recorder's tests: which updates count as changes for scheduling,
//! and what the scheduler sees recorded, rotated with its state, and read
//! back segment by segment.

use super::*;
use crate::model::PodObject;
use crate::recording::format::Object;
use crate::recording::{Body, Reader};

fn pod(name: &str, node: Option<&str>, condition: Option<(&str, &str)>) -> PodObject {
    let mut v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")},
        "spec": {"containers": [{"name": "c"}]},
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = n.into();
    }
    if let Some((t, r)) = condition {
        v["status"] =
            serde_json::json!({"conditions": [{"type": t, "status": "True", "reason": r}]});
    }
    PodObject::shared(Arc::new(serde_json::from_value(v).unwrap()))
}

/// The raw check agrees with comparing the views as values, on
/// updates that change only what scheduling does not read and on ones
/// that change what it does, pods and nodes alike.
#[test]
fn an_update_counts_only_when_what_scheduling_reads_changed() {
    let base = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u",
            "resourceVersion": "1", "labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": "Pending"},
    });
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": "1"},
        "spec": {"unschedulable": false},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4"}},
    });
    type Edit = fn(&mut serde_json::Value);
    let cases: Vec<(&str, &serde_json::Value, Edit, bool)> = vec![
        ("nothing", &base, |_| {}, false),
        (
            "resourceVersion",
            &base,
            |v| v["metadata"]["resourceVersion"] = "2".into(),
            false,
        ),
        (
            "managedFields",
            &base,
            |v| v["metadata"]["managedFields"] = serde_json::json!([{"manager": "k"}]),
            false,
        ),
        (
            "podIP and containerStatuses",
            &base,
            |v| {
                v["status"]["podIP"] = "10.0.0.1".into();
                v["status"]["containerStatuses"] =
                    serde_json::json!([{"name": "c", "ready": true}]);
            },
            false,
        ),
        (
            "a condition",
            &base,
            |v| {
                v["status"]["conditions"] = serde_json::json!([{"type": "Ready", "status": "True"}])
            },
            false,
        ),
        (
            "status emptied of what is not read",
            &base,
            |v| {
                v["status"] = serde_json::json!({"podIP": "10.0.0.1"});
            },
            true,
        ),
        (
            "status gone",
            &base,
            |v| {
                v.as_object_mut().unwrap().remove("status");
            },
            true,
        ),
        (
            "phase",
            &base,
            |v| v["status"]["phase"] = "Running".into(),
            true,
        ),
        (
            "a label",
            &base,
            |v| v["metadata"]["labels"]["app"] = "b".into(),
            true,
        ),
        (
            "a label added",
            &base,
            |v| v["metadata"]["labels"]["tier"] = "x".into(),
            true,
        ),
        (
            "the spec",
            &base,
            |v| v["spec"]["priority"] = 5.into(),
            true,
        ),
        ("a top-level field", &base, |v| v["extra"] = 1.into(), true),
        (
            "heartbeat",
            &node,
            |v| v["status"]["conditions"][0]["lastHeartbeatTime"] = "now".into(),
            false,
        ),
        (
            "cordoned",
            &node,
            |v| v["spec"]["unschedulable"] = true.into(),
            true,
        ),
        (
            "allocatable",
            &node,
            |v| v["status"]["allocatable"]["cpu"] = "8".into(),
            true,
        ),
    ];
    for (what, before, edit, changed) in cases {
        let mut after = before.clone();
        edit(&mut after);
        let (a, b) = (
            serde_json::to_vec(before).unwrap(),
            serde_json::to_vec(&after).unwrap(),
        );
        assert_eq!(scheduling_changed(&a, &b), changed, "{what}");
        assert_eq!(
            scheduling_view(&a) != scheduling_view(&b),
            changed,
            "{what}, as values"
        );
        assert!(
            RawView::parse(&a).is_some() && RawView::parse(&b).is_some(),
            "{what}"
        );
    }
    // "status emptied": the old view has a phase, the new none: both
    // ways say changed. Keys with escapes go the value way.
    let escaped = br#"{"metadata":{"name":"p","a\u0062":1}}"#;
    assert!(RawView::parse(escaped).is_none());
    assert!(!scheduling_changed(
        escaped,
        br#"{"metadata":{"name":"p","ab":1,"resourceVersion":"2"}}"#
    ));
}

fn read(paths: &[&Path]) -> Vec<Body> {
    let mut bytes = Vec::new();
    for p in paths {
        bytes.extend(std::fs::read(p).unwrap());
    }
    let mut r = Reader::new(std::io::Cursor::new(bytes)).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec.body);
    }
    out
}

fn names(bodies: &[Body]) -> Vec<String> {
    bodies
        .iter()
        .map(|b| match b {
            Body::Add(Object::Pod(p)) => format!(
                "add {}{}",
                p.metadata.name.as_deref().unwrap_or(""),
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .map(|n| format!("@{n}"))
                    .unwrap_or_default()
            ),
            Body::Update(_) => "update".into(),
            Body::Bind(b) => format!("bind {}@{}", b.name, b.node),
            Body::Delete(d) => format!(
                "delete {}{}",
                d.name,
                if d.preempted { " (preempted)" } else { "" }
            ),
            Body::Synced => "synced".into(),
            Body::Scheduled(p) => format!("scheduled {}", p.name),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn what_the_scheduler_sees_is_recorded_and_rotated_with_its_state() {
    let dir = std::env::temp_dir().join(format!("berth-recorder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gz");
    let rec = Recorder::start(RecorderOptions {
        path: path.clone(),
        max_bytes: 0,
        keep: 2,
        source: "embedded",
        seed: Some(5),
        profiles: vec!["default-scheduler".into()],
    })
    .unwrap();
    let change = |c: ClusterChange| rec.change(&c);
    change(ClusterChange::Pod(WatchEvent::Added(pod("a", None, None))));
    change(ClusterChange::Synced);
    change(ClusterChange::Pod(WatchEvent::Modified {
        old: pod("a", None, None),
        new: pod("a", Some("n1"), None),
    }));
    // Only the scheduler's own writes changed: nothing recorded.
    change(ClusterChange::Pod(WatchEvent::Modified {
        old: pod("a", Some("n1"), None),
        new: pod("a", Some("n1"), Some(("PodScheduled", ""))),
    }));
    // An eviction: its condition, then its deletion.
    change(ClusterChange::Pod(WatchEvent::Modified {
        old: pod("a", Some("n1"), None),
        new: pod(
            "a",
            Some("n1"),
            Some(("DisruptionTarget", "PreemptionByScheduler")),
        ),
    }));
    change(ClusterChange::Pod(WatchEvent::Deleted(pod(
        "a",
        Some("n1"),
        None,
    ))));
    change(ClusterChange::Pod(WatchEvent::Added(pod("b", None, None))));
    change(ClusterChange::Synced);
    rec.close(Duration::from_secs(5));
    let bodies = read(&[&path]);
    assert_eq!(
        names(&bodies),
        [
            "add a",
            "synced",
            "bind a@n1",
            "delete a (preempted)",
            "add b"
        ]
    );

    // Rotation: every segment starts with the state as it stands.
    let rec = Recorder::start(RecorderOptions {
        path: path.clone(),
        max_bytes: 1,
        keep: 2,
        source: "embedded",
        seed: None,
        profiles: vec![],
    })
    .unwrap();
    let change = |c: ClusterChange| rec.change(&c);
    change(ClusterChange::Pod(WatchEvent::Added(pod("a", None, None))));
    change(ClusterChange::Synced);
    rec.close(Duration::from_secs(5));
    drop(rec);
    // However the writer batched its writes (it rotates after each),
    // every file starts with the state, and the files oldest first
    // read as the one stream recorded.
    let files: Vec<PathBuf> = [dir.join("t.gz.2"), dir.join("t.gz.1"), path.clone()]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    assert!(files.len() >= 2, "rotated: {files:?}");
    for f in &files {
        assert_eq!(names(&read(&[f]))[0], "add a", "{}", f.display());
    }
    let all: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    assert_eq!(names(&read(&all)), ["add a", "synced"]);
    let _ = std::fs::remove_dir_all(&dir);
}
