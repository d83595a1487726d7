//! PodGroup entities in the queue (upstream's queue tests for groups,
//! transposed), with tokio's paused time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::super::*;
use crate::cache::PodGroupManager;
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{Handle, Parallelizer, Status};
use crate::model::{GroupKey, PodGroupInfo};
use crate::testing::{default_profiles, make_pod};

struct Env {
    q: Arc<SchedulingQueue>,
    groups: Arc<PodGroupManager>,
}

fn env() -> Env {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let profiles = default_profiles(&handle);
    let groups = Arc::new(PodGroupManager::default());
    let q = SchedulingQueue::new(QueueConfig::default(), profiles).with_pod_groups(groups.clone());
    tokio::spawn(q.clone().run());
    Env { q, groups }
}

fn pod_group(name: &str, priority: i32) -> Arc<PodGroupInfo> {
    let obj = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": priority},
    }))
    .unwrap();
    Arc::new(PodGroupInfo::new(Arc::new(obj)).unwrap())
}

fn member(name: &str, group: &str) -> PodRef {
    Arc::new(make_pod(name).group(group).build())
}

impl Env {
    fn observe(&self, name: &str, priority: i32) {
        self.groups.set_pod_group(pod_group(name, priority));
        self.q.pod_group_observed(&GroupKey::new("default", name));
    }

    async fn pop_group(&self) -> QueuedPodGroupInfo {
        match self.q.pop_entity().await.unwrap() {
            Popped::Group(g) => g,
            Popped::Pod(p) => panic!("popped pod {}", p.pod.name),
        }
    }

    fn names(g: &QueuedPodGroupInfo) -> Vec<String> {
        g.pods.iter().map(|m| m.pod.name.to_string()).collect()
    }
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn pods_wait_for_their_pod_group_then_go_together() {
    let e = env();
    for n in ["a", "b", "c"] {
        e.q.add(member(n, "train"));
    }
    let c = e.q.counts();
    assert_eq!(
        (c.incomplete, c.active),
        (3, 0),
        "incomplete until the PodGroup is seen"
    );
    assert_eq!(e.q.list()[0].queue, QueueName::Incomplete);
    e.observe("train", 0);
    let c = e.q.counts();
    assert_eq!((c.incomplete, c.active), (0, 3));
    assert_eq!(e.q.entity_counts().active, (0, 1), "one entity");
    let g = e.pop_group().await;
    assert_eq!(Env::names(&g), ["a", "b", "c"]);
    assert_eq!(g.attempts, 1);
    assert_eq!(e.q.counts().in_flight, 3, "each member in flight");
}

#[tokio::test(start_paused = true)]
async fn a_member_arriving_during_the_cycle_waits_then_joins() {
    let e = env();
    e.observe("train", 0);
    e.q.add(member("a", "train"));
    let g = e.pop_group().await;
    e.q.add(member("late", "train"));
    assert_eq!(e.q.counts().pending, 1);
    let listed = e.q.list();
    let late = listed.iter().find(|l| &*l.info.pod.name == "late").unwrap();
    assert_eq!(late.queue, QueueName::Pending);
    // `a` was assumed (done by its binding); the group succeeded: the late
    // member is tried at once, the entity keeping its timestamp.
    let t = g.timestamp;
    e.q.done(&g.pods[0].pod.uid);
    tokio::time::advance(Duration::from_secs(3)).await;
    e.q.add_attempted_pod_group(g, &Status::success());
    let g = e.pop_group().await;
    assert_eq!(Env::names(&g), ["late"]);
    assert_eq!(g.timestamp, t, "timestamp kept after a success");
    assert_eq!(g.unschedulable_count, 0);
}

#[tokio::test(start_paused = true)]
async fn activating_the_group_in_flight_records_one_event_per_call() {
    let e = env();
    e.observe("train", 0);
    for n in ["a", "b", "c"] {
        e.q.add(member(n, "train"));
    }
    let g = e.pop_group().await;
    e.q.add(member("late", "train"));
    let force = |e: &Env| {
        e.q.inflight_event_counts()
            .into_iter()
            .find(|(l, _)| l == "ForceActivate")
            .map_or(0, |(_, n)| n)
    };
    // GangScheduling's Permit, pod after pod, activating the rest of the
    // gang (in flight, and one waiting for the cycle to end).
    let rest: Vec<PodRef> = g.pods[1..].iter().map(|m| m.pod.clone()).collect();
    e.q.activate(&rest);
    assert_eq!(force(&e), 1, "one event for the group in flight");
    e.q.activate(&[member("late", "train")]);
    assert_eq!(
        force(&e),
        2,
        "the member waiting for the cycle: the same event"
    );
    // Both kinds in one call: the group's one event, not one for each.
    e.q.activate(&[g.pods[1].pod.clone(), member("late", "train")]);
    assert_eq!(force(&e), 3, "one event a call for the group in flight");
    // Another group's member is still activated as before.
    e.observe("other", 0);
    e.q.add(member("x", "other"));
    e.q.activate(&[member("x", "other")]);
    assert_eq!(e.q.entity_counts().active, (0, 1));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_with_no_member_left_drops_the_entity() {
    let e = env();
    e.observe("train", 0);
    e.q.add(member("a", "train"));
    let g = e.pop_group().await;
    e.q.done(&g.pods[0].pod.uid);
    e.q.add_attempted_pod_group(g, &Status::success());
    let c = e.q.counts();
    assert_eq!(c.active + c.backoff + c.gated + c.in_flight + c.pending, 0);
}

/// Fails every member of a popped group as the group cycle's failure
/// handler does, then ends the attempt with `status`.
fn fail_group(e: &Env, g: QueuedPodGroupInfo, plugin: Option<&'static str>, status: Status) {
    for m in &g.pods {
        let mut m = m.clone();
        m.unschedulable_plugins = plugin.into_iter().collect();
        e.q.add_unschedulable_if_not_present(m).unwrap();
    }
    e.q.add_attempted_pod_group(g, &status);
}

fn big_member(name: &str, group: &str) -> PodRef {
    Arc::new(make_pod(name).req_cpu("3").group(group).build())
}

/// A node of `cpu` CPUs added: the event NodeResourcesFit's hint judges.
fn node_added(e: &Env, cpu: &str) {
    let n = Arc::new(crate::testing::make_node("new").cpu(cpu).build());
    e.q.move_all_to_active_or_backoff(
        ClusterEvent::NODE_ADD,
        None,
        Some(EventObject::Node(n)),
        None,
    );
}

/// What the next pop brings within `wait` (paused time runs ahead to
/// the queue's timers): `None` if nothing.
async fn pop_within(e: &Env, wait: Duration) -> Option<Popped> {
    tokio::time::timeout(wait, e.q.pop_entity())
        .await
        .ok()
        .flatten()
}

/// Issue 34 item 1: a group whose cycle was rejected rests among the
/// unschedulable entities, as an unschedulable pod does; an event its
/// rejectors' hints refuse leaves it there; one they accept moves it.
#[tokio::test(start_paused = true)]
async fn a_rejected_group_rests_until_an_event_its_rejectors_accept() {
    let e = env();
    e.observe("train", 0);
    e.q.add(big_member("a", "train"));
    e.q.add(big_member("b", "train"));
    let g = e.pop_group().await;
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    let c = e.q.counts();
    assert_eq!((c.unschedulable, c.backoff, c.active), (2, 0, 0), "rests");
    assert_eq!(e.q.entity_counts().unschedulable, (0, 1));
    // Nothing else queued: still not retried, however long.
    assert!(pop_within(&e, Duration::from_secs(120)).await.is_none());
    // A node too small for any member: NodeResourcesFit's hint says skip.
    node_added(&e, "2");
    assert_eq!(e.q.counts().unschedulable, 2);
    // One that fits a member: its backoff (1 s) is long over, so activeQ.
    node_added(&e, "4");
    assert_eq!(e.q.counts().active, 2);
    let g = e.pop_group().await;
    assert_eq!(Env::names(&g), ["a", "b"]);
    assert_eq!((g.unschedulable_count, g.consecutive_errors_count), (1, 0));
    assert_eq!(
        g.pods[0].unschedulable_count, 1,
        "each member keeps its history"
    );
}

/// An event that may help, seen while the group was being tried, sends it
/// to backoffQ; a group leaves backoffQ only when its backoff is over, even
/// with nothing else to do (pods may be popped early; groups never).
#[tokio::test(start_paused = true)]
async fn an_event_during_the_cycle_backs_the_group_off_and_its_backoff_is_waited_out() {
    let e = env();
    e.observe("train", 0);
    e.q.add(big_member("a", "train"));
    let g = e.pop_group().await;
    node_added(&e, "4");
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    assert_eq!(e.q.counts().backoff, 1);
    let start = Instant::now();
    let g = e.pop_group().await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "backoff waited out"
    );
    // A member that came during the cycle is news too: backoffQ, 2 s.
    e.q.add(big_member("late", "train"));
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    assert_eq!(e.q.counts().backoff, 2);
    let start = Instant::now();
    let g = e.pop_group().await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(Env::names(&g), ["late", "a"], "in the order they came back");
}

#[tokio::test(start_paused = true)]
async fn failed_groups_errors_back_off_and_count_apart() {
    let e = env();
    e.observe("train", 0);
    e.q.add(member("a", "train"));
    let g = e.pop_group().await;
    fail_group(&e, g, None, Status::error("boom"));
    let start = Instant::now();
    let g = e.pop_group().await;
    assert_eq!((g.unschedulable_count, g.consecutive_errors_count), (0, 1));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    fail_group(&e, g, None, Status::error("boom"));
    let start = Instant::now();
    let g = e.pop_group().await;
    assert_eq!(g.consecutive_errors_count, 2);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // A rejection after errors: the error count resets, and it rests.
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    assert_eq!(e.q.counts().unschedulable, 1);
}

/// A group refused by a remote extender (a GroupPermit) moves when that
/// extender comes back; and any resting group after the 5-minute stay.
#[tokio::test(start_paused = true)]
async fn a_group_rests_until_its_extender_is_back_or_five_minutes_pass() {
    let e = env();
    e.observe("train", 0);
    e.observe("other", 0);
    e.q.add(member("a", "train"));
    let g = e.pop_group().await;
    let mut g2 = g.clone();
    g2.unschedulable_plugins.insert("quota-ext");
    fail_group(&e, g2, None, Status::unschedulable("over quota"));
    assert_eq!(e.q.entity_counts().unschedulable, (0, 1));
    assert_eq!(e.q.activate_failed_by("another-ext"), 0);
    assert_eq!(e.q.activate_failed_by("quota-ext"), 1);
    let g = e.pop_group().await;
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    let start = Instant::now();
    let g = e.pop_group().await;
    assert_eq!(start.elapsed(), DEFAULT_MAX_IN_UNSCHEDULABLE, "flushed");
    assert_eq!(Env::names(&g), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn success_with_a_member_left_goes_straight_to_active_with_the_old_timestamp() {
    let e = env();
    e.observe("train", 0);
    for n in ["p1", "p2", "p3"] {
        e.q.add(member(n, "train"));
    }
    let g = e.pop_group().await;
    let t = g.timestamp;
    tokio::time::advance(Duration::from_secs(5)).await;
    // p1 and p3 assumed, p2 did not fit; the group succeeded.
    e.q.done(&g.pods[0].pod.uid);
    e.q.done(&g.pods[2].pod.uid);
    let mut p2 = g.pods[1].clone();
    p2.unschedulable_plugins.insert("NodeResourcesFit");
    e.q.add_unschedulable_if_not_present(p2).unwrap();
    e.q.add_attempted_pod_group(g, &Status::success());
    let c = e.q.counts();
    assert_eq!((c.active, c.backoff), (1, 0), "p2 back in activeQ");
    let g = e.pop_group().await;
    assert_eq!(Env::names(&g), ["p2"]);
    assert_eq!(g.timestamp, t);
    assert_eq!(g.pods[0].unschedulable_count, 1);
}

#[tokio::test(start_paused = true)]
async fn deleting_members_and_activating_one() {
    let e = env();
    e.observe("train", 0);
    e.q.add(member("a", "train"));
    e.q.add(member("b", "train"));
    let g = e.pop_group().await;
    fail_group(
        &e,
        g,
        Some("NodeResourcesFit"),
        Status::unschedulable("no fit"),
    );
    // Resting among the unschedulable entities.
    e.q.add(Arc::new(make_pod("solo").build()));
    let b = member("b", "train");
    e.q.activate(std::slice::from_ref(&b));
    assert_eq!(
        e.q.entity_counts().active,
        (1, 1),
        "activating a member moves its group"
    );
    e.q.delete(&member("a", "train").uid);
    assert_eq!(e.q.counts().active, 2);
    e.q.delete(&b.uid);
    assert_eq!(
        e.q.entity_counts().active,
        (1, 0),
        "the last member gone: the entity too"
    );
    settle().await;
}

#[tokio::test(start_paused = true)]
async fn queue_sort_orders_groups_and_pods_by_priority_then_time() {
    let e = env();
    e.observe("low", 1);
    e.observe("high", 100);
    e.q.add(member("l1", "low"));
    tokio::time::advance(Duration::from_millis(1)).await;
    e.q.add(Arc::new(make_pod("mid").priority(50).build()));
    e.q.add(member("h1", "high"));
    tokio::time::advance(Duration::from_millis(1)).await;
    e.q.add(Arc::new(make_pod("also-low").priority(1).build()));
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(match e.q.pop_entity().await.unwrap() {
            Popped::Pod(p) => p.pod.name.to_string(),
            Popped::Group(g) => format!("group/{}", g.key.name),
        });
    }
    assert_eq!(order, ["group/high", "mid", "group/low", "also-low"]);
}

#[tokio::test(start_paused = true)]
async fn without_groups_members_are_pods_like_any_other() {
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let q = SchedulingQueue::new(QueueConfig::default(), default_profiles(&handle));
    q.add(member("a", "train"));
    assert_eq!(q.counts().active, 1);
    assert_eq!(q.pop().await.unwrap().pod.name.as_ref(), "a");
}
