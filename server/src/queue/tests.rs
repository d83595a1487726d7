//! The queue's moves, with tokio's paused time: no test sleeps for real.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{ActionType, EventResource, Handle, Parallelizer};
use crate::testing::{NodeBuilder, PodBuilder, default_profiles, make_node, make_pod};

fn new_queue(cfg: QueueConfig) -> Arc<SchedulingQueue> {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let profiles = default_profiles(&handle);
    let q = SchedulingQueue::new(cfg, profiles);
    tokio::spawn(q.clone().run());
    q
}

fn queue() -> Arc<SchedulingQueue> {
    new_queue(QueueConfig::default())
}

fn pod(b: PodBuilder) -> PodRef {
    Arc::new(b.build())
}

fn node(b: NodeBuilder) -> Option<EventObject> {
    Some(EventObject::Node(Arc::new(b.build())))
}

/// Lets spawned tasks (the timer task) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Fails a popped pod as rejected by `plugins` (empty: an error).
fn fail(q: &SchedulingQueue, mut info: QueuedPodInfo, plugins: &[&'static str]) {
    info.unschedulable_plugins = plugins.iter().copied().collect();
    q.add_unschedulable_if_not_present(info).unwrap();
}

#[tokio::test(start_paused = true)]
async fn active_queue_pops_by_priority_then_arrival() {
    let q = queue();
    q.add(pod(make_pod("low").priority(1)));
    tokio::time::advance(Duration::from_millis(1)).await;
    q.add(pod(make_pod("high-late").priority(10)));
    q.add(pod(make_pod("mid").priority(5)));
    tokio::time::advance(Duration::from_millis(1)).await;
    q.add(pod(make_pod("high-later").priority(10)));
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(q.pop().await.unwrap().pod.name.to_string());
    }
    assert_eq!(order, ["high-late", "high-later", "mid", "low"]);
}

/// Pods queued at one instant (a simulated clock ticks in whole
/// milliseconds: a replay's burst of arrivals) come out in the order they
/// came, as their distinct timestamps would order them on a real clock.
#[tokio::test(start_paused = true)]
async fn pods_queued_at_one_instant_pop_in_the_order_they_came() {
    let q = queue();
    let names: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
    for n in &names {
        q.add(pod(make_pod(n)));
    }
    let mut order = Vec::new();
    for _ in 0..names.len() {
        order.push(q.pop().await.unwrap().pod.name.to_string());
    }
    assert_eq!(order, names);
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_to_the_maximum() {
    let q = queue();
    q.add(pod(make_pod("p")));
    let mut info = q.pop().await.unwrap();
    assert_eq!(info.attempts, 1);
    let mut waits = Vec::new();
    for _ in 0..6 {
        fail(&q, info, &[]);
        let start = Instant::now();
        info = q.pop().await.unwrap();
        waits.push(start.elapsed().as_secs());
    }
    assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
    assert_eq!(info.attempts, 7);
    assert_eq!(info.consecutive_errors_count, 6);
}

#[tokio::test(start_paused = true)]
async fn backoff_follows_the_configured_seconds() {
    let q = new_queue(QueueConfig {
        initial_backoff: Duration::from_secs(3),
        max_backoff: Duration::from_secs(20),
        ..QueueConfig::default()
    });
    q.add(pod(make_pod("p")));
    let mut info = q.pop().await.unwrap();
    let mut waits = Vec::new();
    for _ in 0..5 {
        fail(&q, info, &[]);
        let start = Instant::now();
        info = q.pop().await.unwrap();
        waits.push(start.elapsed().as_secs());
    }
    assert_eq!(waits, [3, 6, 12, 20, 20]);
}

#[tokio::test(start_paused = true)]
async fn rejected_pods_wait_for_an_event_their_plugin_registered_for() {
    let q = queue();
    q.add(pod(make_pod("big").req_cpu("8")));
    let info = q.pop().await.unwrap();
    fail(&q, info, &["NodeResourcesFit"]);
    settle().await;
    assert_eq!(
        q.counts().unschedulable,
        1,
        "no event seen in flight: stays unschedulable"
    );

    // A node too small even when empty: NodeResourcesFit's hint skips it.
    q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        node(make_node("small").cpu("4")),
        None,
    );
    assert_eq!(q.counts().unschedulable, 1);
    // An event no rejecting plugin registered for.
    q.move_all_to_active_or_backoff(
        ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL),
        node(make_node("big").cpu("16")),
        node(make_node("big").cpu("16").label("a", "b")),
        None,
    );
    assert_eq!(q.counts().unschedulable, 1);
    // A node that can hold it: moved, to backoffQ since its backoff runs.
    q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        node(make_node("big").cpu("16")),
        None,
    );
    assert_eq!(q.counts().backoff, 1);
    // Nothing else to do: popped without waiting out the backoff.
    let start = Instant::now();
    let info = q.pop().await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(info.unschedulable_count, 1);
}

#[tokio::test(start_paused = true)]
async fn backoff_completes_into_active_when_the_queue_is_busy() {
    let q = queue();
    q.add(pod(make_pod("big").req_cpu("8")));
    let info = q.pop().await.unwrap();
    fail(&q, info, &["NodeResourcesFit"]);
    q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        node(make_node("big").cpu("16")),
        None,
    );
    assert_eq!(q.counts().backoff, 1);
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(q.counts().backoff, 1, "1s backoff not over");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!((q.counts().backoff, q.counts().active), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn events_seen_while_in_flight_send_the_pod_to_backoff() {
    let q = queue();
    q.add(pod(make_pod("big").req_cpu("8")));
    let info = q.pop().await.unwrap();
    // While it is being scheduled, a big node appears.
    q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        node(make_node("big").cpu("16")),
        None,
    );
    fail(&q, info, &["NodeResourcesFit"]);
    assert_eq!(
        q.counts().backoff,
        1,
        "the event may have helped: retried after backoff"
    );

    // An irrelevant event in flight changes nothing.
    let info = q.pop().await.unwrap();
    q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        node(make_node("tiny").cpu("1")),
        None,
    );
    fail(&q, info, &["NodeResourcesFit"]);
    assert_eq!(q.counts().unschedulable, 1);
}

#[tokio::test(start_paused = true)]
async fn unschedulable_pods_are_flushed_after_five_minutes() {
    let q = queue();
    q.add(pod(make_pod("big").req_cpu("8")));
    let info = q.pop().await.unwrap();
    fail(&q, info, &["NodeResourcesFit"]);
    let start = Instant::now();
    let info = q.pop().await.unwrap();
    assert_eq!(start.elapsed(), DEFAULT_MAX_IN_UNSCHEDULABLE);
    assert_eq!(info.pod.name.as_ref(), "big");
}

#[tokio::test(start_paused = true)]
async fn scheduling_gates_hold_pods_until_removed() {
    let q = queue();
    let gated = pod(make_pod("g").gate("example.com/wait"));
    q.add(gated.clone());
    let c = q.counts();
    assert_eq!((c.active, c.gated), (0, 1));
    let entry = &q.list()[0];
    assert_eq!(entry.queue, QueueName::Gated);
    assert_eq!(
        entry.info.last_failure.as_deref(),
        Some("waiting for scheduling gates: [example.com/wait]")
    );

    // Another change keeps it gated.
    let relabelled = pod(make_pod("g").gate("example.com/wait").label("x", "y"));
    q.update(&gated, relabelled.clone());
    assert_eq!(q.counts().gated, 1);
    // The flush does not let it through either.
    tokio::time::advance(DEFAULT_MAX_IN_UNSCHEDULABLE + Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(q.counts().gated, 1);

    // Removing the last gate lets it in, with no backoff (never attempted).
    q.update(&relabelled, pod(make_pod("g").label("x", "y")));
    assert_eq!((q.counts().gated, q.counts().active), (0, 1));
    assert_eq!(q.pop().await.unwrap().attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn an_update_re_evaluates_a_waiting_pod() {
    let q = queue();
    let p = pod(make_pod("p"));
    q.add(p.clone());
    let info = q.pop().await.unwrap();
    fail(&q, info, &["NodeUnschedulable"]);
    assert_eq!(q.counts().unschedulable, 1);
    // A change NodeUnschedulable does not care about.
    let labelled = pod(make_pod("p").label("a", "b"));
    q.update(&p, labelled.clone());
    assert_eq!(q.counts().unschedulable, 1);
    assert_eq!(
        q.list()[0].info.pod.labels.get("a"),
        Some("b"),
        "the stored pod is the new one"
    );
    // Tolerating cordoned nodes may help: requeued.
    let tolerant = pod(make_pod("p").label("a", "b").toleration(
        "node.kubernetes.io/unschedulable",
        "Exists",
        "",
        "NoSchedule",
    ));
    q.update(&labelled, tolerant);
    assert_eq!(q.counts().unschedulable, 0);
    assert_eq!(q.counts().backoff + q.counts().active, 1);
}

#[tokio::test(start_paused = true)]
async fn deleted_pods_leave_every_queue() {
    let q = queue();
    q.add(pod(make_pod("c")));
    let c_info = q.pop().await.unwrap();
    fail(&q, c_info, &[]);
    q.add(pod(make_pod("a")));
    q.add(pod(make_pod("b").gate("x")));
    assert_eq!(q.counts().backoff, 1);
    for name in ["a", "b", "c"] {
        q.delete(&format!("uid-default-{name}"));
    }
    assert_eq!(q.counts(), QueueCounts::default());
}

#[tokio::test(start_paused = true)]
async fn a_pod_already_queued_is_not_added_twice() {
    let q = queue();
    let p = pod(make_pod("p"));
    q.add(p.clone());
    let info = QueuedPodInfo::new(p, Instant::now());
    assert!(matches!(
        q.add_unschedulable_if_not_present(info),
        Err(QueueError::AlreadyPresent(_, "active queue"))
    ));
    assert_eq!(q.counts().active, 1);
}

#[tokio::test(start_paused = true)]
async fn nominated_pods_are_tracked() {
    let q = queue();
    let p = pod(make_pod("preemptor").nominated("n1"));
    q.add(p.clone());
    assert_eq!(q.nominated_pods().get("n1").map(|v| v.len()), Some(1));
    q.add_nominated_pod(&p, &NominatingInfo::Override(Some("n2".into())));
    assert!(q.nominated_pods().get("n1").is_none());
    assert_eq!(q.nominated_node(&p.uid).as_deref(), Some("n2"));
    q.delete(&p.uid);
    assert!(q.nominated_pods().is_empty());
}

#[tokio::test(start_paused = true)]
async fn closing_ends_pop() {
    let q = queue();
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.pop().await })
    };
    settle().await;
    q.close();
    assert!(waiter.await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_binding_pod_stays_listed_in_flight_until_bound_or_requeued() {
    let q = queue();
    let listed = |q: &SchedulingQueue| -> Vec<(String, QueueName)> {
        q.list()
            .into_iter()
            .map(|e| (e.info.pod.name.to_string(), e.queue))
            .collect()
    };
    q.add(pod(make_pod("bound")));
    q.add(pod(make_pod("retried")));
    let bound = q.pop().await.unwrap();
    let retried = q.pop().await.unwrap();
    q.binding_started(&bound.pod.uid);
    q.binding_started(&retried.pod.uid);
    // Past Permit no event is recorded for them, but they are still in
    // flight for whoever asks.
    assert_eq!(q.counts().in_flight, 0);
    let mut both = listed(&q);
    both.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        both,
        [
            ("bound".to_string(), QueueName::InFlight),
            ("retried".to_string(), QueueName::InFlight)
        ]
    );
    q.binding_finished(&bound.pod.uid);
    // A failed bind requeues the pod: it is listed once, in its new queue.
    fail(&q, retried, &[]);
    assert_eq!(listed(&q), [("retried".to_string(), QueueName::Backoff)]);
}
