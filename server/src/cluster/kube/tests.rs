//! Kube mode's mirror: watch events, relists and what they emit.

use super::*;
use crate::testing::make_pod;

/// Pod `name` at resourceVersion `rv`, with a label that changes with
/// it (a change berth keeps).
fn pod(name: &str, rv: &str) -> Obj {
    let mut p = make_pod(name).label("version", rv).object();
    p.metadata.resource_version = Some(rv.into());
    Obj::pod(p)
}

/// A mirror of one (pod) watcher whose empty listing is done, and a
/// subscriber that has heard nothing yet.
fn listed_and_subscribed() -> (MirrorState, mpsc::UnboundedReceiver<ClusterChange>) {
    let mut s = MirrorState {
        watchers: 1,
        ..Default::default()
    };
    s.on_watch_event(Res::Pod, watcher::Event::Init);
    s.on_watch_event(Res::Pod, watcher::Event::InitDone);
    let (tx, rx) = mpsc::unbounded_channel();
    s.subscribers.push(tx);
    (s, rx)
}

fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterChange>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(c) = rx.try_recv() {
        out.push(match c {
            ClusterChange::PodInfo(WatchEvent::Added(p)) => format!(
                "added {}@{}",
                p.name,
                p.pod.resource_version().unwrap_or("")
            ),
            ClusterChange::PodInfo(WatchEvent::Modified { old, new }) => format!(
                "modified {}@{}->{}",
                new.name,
                old.pod.resource_version().unwrap_or(""),
                new.pod.resource_version().unwrap_or("")
            ),
            ClusterChange::PodInfo(WatchEvent::Deleted(p)) => format!("deleted {}", p.name),
            ClusterChange::Synced => "synced".into(),
            other => format!("{other:?}"),
        });
    }
    out
}

#[test]
fn relists_become_the_differences_and_watch_events_keep_the_old_object() {
    let mut s = MirrorState {
        watchers: 1,
        ..Default::default()
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    s.subscribers.push(tx);
    s.on_watch_event(Res::Pod, watcher::Event::Init);
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("a", "1")));
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("b", "2")));
    assert!(drain(&mut rx).is_empty(), "nothing before the listing ends");
    s.on_watch_event(Res::Pod, watcher::Event::InitDone);
    assert_eq!(drain(&mut rx), ["added a@1", "added b@2", "synced"]);

    s.on_watch_event(Res::Pod, watcher::Event::Apply(pod("a", "3")));
    s.on_watch_event(Res::Pod, watcher::Event::Apply(pod("a", "3")));
    assert_eq!(drain(&mut rx), ["modified a@1->3"], "a repeat is no change");

    // A 410 relist: b changed, a vanished, c is new.
    s.on_watch_event(Res::Pod, watcher::Event::Init);
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("b", "5")));
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("c", "6")));
    s.on_watch_event(Res::Pod, watcher::Event::InitDone);
    assert_eq!(
        drain(&mut rx),
        ["deleted a", "modified b@2->5", "added c@6"]
    );
    // The same listing again changes nothing.
    s.on_watch_event(Res::Pod, watcher::Event::Init);
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("b", "5")));
    s.on_watch_event(Res::Pod, watcher::Event::InitApply(pod("c", "6")));
    s.on_watch_event(Res::Pod, watcher::Event::InitDone);
    assert!(drain(&mut rx).is_empty());

    s.on_watch_event(Res::Pod, watcher::Event::Delete(pod("c", "7")));
    s.on_watch_event(Res::Pod, watcher::Event::Delete(pod("c", "7")));
    assert_eq!(drain(&mut rx), ["deleted c"]);
}

#[test]
fn a_new_version_that_changes_nothing_kept_is_no_news() {
    let (mut s, mut rx) = listed_and_subscribed();
    let at = |rv: &str| {
        let mut p = make_pod("a").object();
        p.metadata.resource_version = Some(rv.into());
        Obj::pod(p)
    };
    s.on_watch_event(Res::Pod, watcher::Event::Apply(at("1")));
    // Only the version moved (what changed was dropped at decoding).
    s.on_watch_event(Res::Pod, watcher::Event::Apply(at("2")));
    assert_eq!(drain(&mut rx), ["added a@1"]);
    // The mirror has the new version all the same.
    let key = (Res::Pod, "default".to_string(), "a".to_string());
    assert_eq!(s.objects[&key].rv(), Some("2"));
}

#[test]
fn a_pod_replaced_under_its_name_is_a_deletion_and_an_addition() {
    let (mut s, mut rx) = listed_and_subscribed();
    s.on_watch_event(Res::Pod, watcher::Event::Apply(pod("a", "1")));
    let mut p = make_pod("a").uid("other").object();
    p.metadata.resource_version = Some("2".into());
    s.on_watch_event(Res::Pod, watcher::Event::Apply(Obj::pod(p)));
    assert_eq!(drain(&mut rx), ["added a@1", "deleted a", "added a@2"]);
}

#[test]
fn the_scheduler_gets_the_mirrors_one_packed_copy_and_never_an_invalid_pod() {
    let (mut s, mut rx) = listed_and_subscribed();
    s.on_watch_event(Res::Pod, watcher::Event::Apply(pod("a", "1")));
    let Ok(ClusterChange::PodInfo(WatchEvent::Added(sent))) = rx.try_recv() else {
        panic!("a parsed pod");
    };
    let key = (Res::Pod, "default".to_string(), "a".to_string());
    let Obj::Pod(kept) = &s.objects[&key] else {
        panic!("kept parsed");
    };
    assert!(Arc::ptr_eq(kept, &sent), "one copy, shared");
    assert!(sent.pod.is_packed());
    assert_eq!(
        sent.pod.get().metadata.labels.as_ref().unwrap()["version"],
        "1"
    );

    // A pod with no containers is kept (its versions followed) but
    // never sent: not added, not modified, not deleted.
    let bad = |rv: &str| {
        let mut bad = make_pod("b").label("version", rv).object();
        bad.spec.as_mut().unwrap().containers.clear();
        bad.metadata.resource_version = Some(rv.into());
        Obj::pod(bad)
    };
    s.on_watch_event(Res::Pod, watcher::Event::Apply(bad("2")));
    let key = (Res::Pod, "default".to_string(), "b".to_string());
    assert!(matches!(s.objects[&key], Obj::InvalidPod(_)));
    s.on_watch_event(Res::Pod, watcher::Event::Apply(bad("3")));
    assert_eq!(s.objects[&key].rv(), Some("3"));
    s.on_watch_event(Res::Pod, watcher::Event::Delete(bad("4")));
    assert!(drain(&mut rx).is_empty());
    assert!(!s.objects.contains_key(&key));
}

#[test]
fn resource_versions_compare_as_numbers() {
    assert!(newer(Some("9"), Some("10")));
    assert!(!newer(Some("10"), Some("9")));
    assert!(!newer(Some("10"), Some("10")));
    assert!(newer(Some("x"), Some("y")));
}
