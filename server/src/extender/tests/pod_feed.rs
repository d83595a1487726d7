//! The pod feed (issue 28, item 6): an extender whose Hello sets
//! `wants_pods` gets the pods placed on the nodes, assumed then bound,
//! each change once, and their removal; one that does not (every
//! extender written before) gets no pod message and works as before.

use super::*;

fn filter_only(endpoint: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter]
  timeout: 10s
"
    )
}

fn pod_lines(fake: &Fake) -> Vec<String> {
    fake.log
        .lock()
        .iter()
        .filter(|l| l.starts_with("pod"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn an_extender_that_wants_pods_follows_them_assumed_bound_and_gone() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        wants_pods: true,
        reject: vec!["n1", "n2"],
        ..Default::default()
    };
    let mut lines = fake.listen();
    let (endpoint, _stop) = serve(fake.clone()).await;
    // A pod bound before the extender connects is in the initial table.
    let nodes = three_nodes();
    let mut env = start(&filter_only(&endpoint), nodes, vec![]).await;
    until(&mut lines, "synced").await;
    env.cluster.apply_pod(make_pod("p").object()).unwrap();
    assert_eq!(env.next().await, scheduled("p", "n3"));
    until(&mut lines, "pod #1 p on n3#3").await;
    // Assumed first (the scheduling cycle), then bound (the watch): the
    // same id, sent again only because it changed.
    assert_eq!(
        pod_lines(&fake)[..2],
        ["pod #1 p on n3#3 assumed", "pod #1 p on n3#3"]
    );
    assert!(
        env.cluster
            .delete(crate::cluster::embedded::Kind::Pod, "default", "p")
    );
    let gone = until(&mut lines, "pod-delete").await;
    assert_eq!(gone, "pod-delete #1 from #3");
    assert_eq!(pod_lines(&fake).len(), 3, "{:?}", pod_lines(&fake));

    // A new stream gets the table as it is, before NodesSynced.
    env.cluster.apply_pod(make_pod("q").object()).unwrap();
    assert_eq!(env.next().await, scheduled("q", "n3"));
    until(&mut lines, "pod #2 q on n3#3").await;
    fake.log.lock().clear();
    fake.kill();
    until(&mut lines, "synced").await;
    let log = fake.log.lock().clone();
    let synced = log.iter().position(|l| l.starts_with("synced")).unwrap();
    let q = log.iter().position(|l| l == "pod #2 q on n3#3").unwrap();
    assert!(q < synced, "{log:?}");
}

#[tokio::test]
async fn an_extender_written_before_the_pod_feed_gets_no_pod_message() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        reject: vec!["n1"],
        ..Default::default()
    };
    let mut lines = fake.listen();
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&filter_only(&endpoint), three_nodes(), vec![]).await;
    env.cluster.apply_pod(make_pod("p").object()).unwrap();
    assert!(matches!(env.next().await, Decision::Scheduled { node, .. } if node != "n1"));
    until(&mut lines, "end").await;
    assert!(
        env.cluster
            .delete(crate::cluster::embedded::Kind::Pod, "default", "p")
    );
    env.cluster.apply_pod(make_pod("q").object()).unwrap();
    assert!(matches!(env.next().await, Decision::Scheduled { .. }));
    until(&mut lines, "end").await;
    assert!(pod_lines(&fake).is_empty(), "{:?}", fake.log.lock());
}
