//! The look-ahead (see `Algorithm::with_look_ahead`): a batch Filter
//! plugin's calls for the queue's next pods leave while the current cycle
//! waits for its own, several at once. Each test runs the same queue with and without it
//! and compares every placement, and checks that each pod was judged by
//! calls made for it, under its own cycle.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::batch_judge::{Asked, BatchJudge, number};
use super::{Algorithm, FastRng, ScheduleError, build_profiles};
use crate::cache::{Cache, Snapshot};
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::framework::{CycleState, Handle, NominatedPods, Parallelizer};
use crate::model::PodInfo;
use crate::plugins::in_tree_registry;
use crate::queue::{QueueConfig, SchedulingQueue};
use crate::testing::{make_node, make_pod};

/// The batch plugin, looking ahead: its verdicts and scores depend on
/// the pod and the node, so verdicts used for the wrong pod would move
/// placements.
fn judge(asked: &Arc<Asked>) -> BatchJudge {
    BatchJudge {
        name: "Judge",
        passes: |pod, node| !(number(&pod.name) + number(node.name())).is_multiple_of(5),
        score: |pod, node| ((number(&pod.name) + 1) * number(node.name()) % 13) as i64,
        looks_ahead: true,
        asked: asked.clone(),
    }
}

fn node(i: usize) -> Arc<crate::model::NodeSpec> {
    Arc::new(
        make_node(&format!("n{i:03}"))
            .cpu(if i.is_multiple_of(6) { "1" } else { "4" })
            .memory("16Gi")
            .build(),
    )
}

/// What happens before the `i`th pop.
enum Before {
    /// A pod of a higher priority arrives: it is popped first.
    Urgent(Box<PodInfo>),
    /// A node is added (the node list changes).
    Node(usize),
}

type Placements = Vec<(String, Result<String, String>)>;

/// Pops and schedules every pod of `pods` (and the urgent ones) from a
/// real queue, as the scheduling loop does, against 150 nodes, assuming
/// each placement; returns the placements in order, the look-aheads used
/// and dropped, and what the plugin was asked.
async fn run(
    look_ahead: bool,
    pods: &[PodInfo],
    before: Vec<(usize, Before)>,
) -> (Placements, (u64, u64), Arc<Asked>) {
    let asked = Arc::new(Asked::default());
    let mut registry = in_tree_registry();
    judge(&asked).register(&mut registry);
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 30\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    filter:\n      enabled: [{name: Judge}]\n    score:\n      enabled: [{name: Judge, weight: 3}]\n";
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::new(2).unwrap());
    let profiles = build_profiles(&cfg, &registry, &handle).unwrap();
    let fw = profiles.values().next().unwrap().clone();
    let queue = SchedulingQueue::new(QueueConfig::default(), profiles.clone());
    let mut cache = Cache::new(Duration::ZERO);
    for i in 0..150 {
        cache.add_node(node(i));
    }
    for p in pods {
        queue.add(Arc::new(p.clone()));
    }
    let mut alg = Algorithm::new(30, FastRng::new(7))
        .with_batching(true)
        .with_look_ahead(look_ahead.then(|| queue.clone()));
    let nominated = NominatedPods::default();
    let mut before: HashMap<usize, Before> = before.into_iter().collect();
    let mut snap = Snapshot::new();
    let mut placed = Vec::new();
    let mut i = 0;
    loop {
        match before.remove(&i) {
            Some(Before::Urgent(p)) => queue.add(Arc::new(*p)),
            Some(Before::Node(n)) => cache.add_node(node(n)),
            None => {}
        }
        let Some(Some(q)) = futures::FutureExt::now_or_never(queue.pop()) else {
            break;
        };
        i += 1;
        let pod = q.pod.clone();
        cache.update_snapshot(&mut snap);
        let shared = Arc::new(snap.clone());
        let mut state = CycleState::with_snapshot(shared.clone());
        if let Some(token) = alg.look_ahead_token(&pod) {
            state.set_token(token);
        }
        let result = alg
            .schedule_pod(&fw, &mut state, &pod, &shared, &nominated)
            .await;
        alg.end_cycle(&pod);
        let outcome = match result {
            Ok(r) => {
                cache
                    .assume_pod(Arc::new(pod.assumed_on(&r.suggested_host)))
                    .unwrap();
                Ok(r.suggested_host.to_string())
            }
            Err(ScheduleError::Fit(fit)) => Err(fit.to_string()),
            Err(e) => Err(format!("{e:?}")),
        };
        // Each verdict the cycle used came from a call made for this pod,
        // under this cycle.
        let mine = state.token().id();
        assert!(
            asked
                .calls
                .lock()
                .iter()
                .filter(|(_, cycle, _)| *cycle == mine)
                .all(|(name, _, _)| *name == *pod.name),
            "cycle of {} used calls made for another pod",
            pod.name
        );
        placed.push((pod.name.to_string(), outcome));
        queue.done(&pod.uid);
    }
    (placed, alg.look_aheads(), asked)
}

/// Pods of a few shapes, some too big for any node.
fn pods(n: usize) -> Vec<PodInfo> {
    (0..n)
        .map(|i| {
            let name = format!("p{i:03}");
            match i % 7 {
                3 => make_pod(&name).req_cpu("5"),
                5 => make_pod(&name).req_cpu("900m").req_memory("1Gi"),
                _ => make_pod(&name).req_cpu("250m"),
            }
            .build()
        })
        .collect()
}

#[tokio::test]
async fn calls_sent_ahead_give_the_placements_of_calls_sent_in_each_cycle() {
    let pods = pods(120);
    let (plain, none, _) = run(false, &pods, Vec::new()).await;
    let (ahead, (used, dropped), asked) = run(true, &pods, Vec::new()).await;
    assert_eq!(none, (0, 0));
    assert_eq!(plain.len(), pods.len());
    assert_eq!(plain, ahead);
    let big = big_ones(&pods);
    assert_eq!(plain.iter().filter(|(_, r)| r.is_err()).count(), big);
    // Every cycle but the first used the calls sent ahead for it, none
    // was dropped, and only the calls for pods no node could take were
    // left unanswered (their verdicts were not needed, as without the
    // look-ahead).
    assert_eq!((used, dropped), (pods.len() as u64 - 1, 0));
    assert_eq!(asked.dropped.load(Ordering::SeqCst), big);
    // Each pod was asked about once, but for twelve: the first calls left
    // together (p001 to p016) before any cycle had moved the search's
    // start differently, and p003 and p010, too big for any node, went
    // all the way round (the start did not move), so the windows of the
    // six pods after each started where theirs did not: the nodes they
    // missed were asked in a second call, under the pod's own cycle.
    // Later windows are wide enough for that.
    assert_eq!(asked_twice(&asked), first_windows_missed());
    assert_eq!(asked.calls.lock().len(), pods.len() + 12);
}

/// The pods of the first calls sent ahead whose windows missed nodes
/// their cycle took (see the test above).
fn first_windows_missed() -> Vec<String> {
    (4..=9).chain(11..=16).map(|i| format!("p{i:03}")).collect()
}

/// The pods the plugin was asked about more than once, in order.
fn asked_twice(asked: &Asked) -> Vec<String> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for (pod, _, _) in asked.calls.lock().iter() {
        *count.entry(pod.clone()).or_default() += 1;
    }
    let mut twice: Vec<String> = count
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(pod, _)| pod)
        .collect();
    twice.sort();
    twice
}

/// How many pods of `pods` fit no node.
fn big_ones(pods: &[PodInfo]) -> usize {
    pods.iter().filter(|p| p.requests.milli_cpu > 4000).count()
}

#[tokio::test]
async fn calls_sent_ahead_survive_a_pod_overtaking_and_are_dropped_when_the_node_list_changes() {
    let pods = pods(40);
    let urgent = || Box::new(make_pod("urgent7").req_cpu("250m").priority(1000).build());
    let before = || vec![(10, Before::Urgent(urgent())), (20, Before::Node(150))];
    let (plain, _, _) = run(false, &pods, before()).await;
    let (ahead, (used, dropped), asked) = run(true, &pods, before()).await;
    assert_eq!(plain, ahead);
    assert!(ahead.iter().any(|(name, r)| name == "urgent7" && r.is_ok()));
    // The pods the urgent one overtook kept their calls and used them.
    // The calls sent before the node came (for p019, whose cycle was the
    // first after it, and the thirteen pods after it) named windows of the
    // old node list: dropped unanswered and asked anew, p019's in its
    // cycle, the others' sent ahead again at once. The pods of the first
    // calls were asked twice for their windows, as in the test above.
    assert_eq!(dropped, 14);
    assert_eq!(asked.dropped.load(Ordering::SeqCst), 14 + big_ones(&pods));
    // Every cycle but the first, the urgent pod's and p019's.
    assert_eq!(used, ahead.len() as u64 - 3);
    let again: Vec<String> = (19..=32).map(|i| format!("p{i:03}")).collect();
    let mut twice = first_windows_missed();
    twice.extend(again);
    assert_eq!(asked_twice(&asked), twice);
    assert_eq!(asked.calls.lock().len(), ahead.len() + 12 + 14);
}
