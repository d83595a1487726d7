//! The scheduler end to end in process: embedded cluster, real queue,
//! cache and framework, paused time. Tests wait on the scheduler's decision
//! stream, never on the clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use tokio::time::Instant;

use super::*;
use crate::cache::NodeInfo;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::framework::{
    BindPlugin, Code, CycleState, NoArgs, PermitPlugin, Plugin, PreFilterPlugin, PreFilterResult,
    ReservePlugin, Status,
};
use crate::model::PodInfo;
use crate::plugins::in_tree_registry;
use crate::testing::{NodeBuilder, PodBuilder, make_node, make_pod};

/// Counts of calls made to the test plugin, shared with the test.
#[derive(Default)]
struct Calls {
    reserve: AtomicUsize,
    unreserve: AtomicUsize,
    permit: AtomicUsize,
    log: Mutex<Vec<String>>,
    /// While set, Bind waits for `release`.
    hold_binds: std::sync::atomic::AtomicBool,
    release: tokio::sync::Notify,
    binds_started: AtomicUsize,
    bind_started: tokio::sync::Notify,
}

/// A plugin whose behaviour the test sets: Reserve + Permit + Bind.
struct Probe {
    calls: Arc<Calls>,
    reserve: Status,
    permit: (Status, Duration),
    bind: Status,
}

impl Plugin for Probe {
    fn name(&self) -> &'static str {
        "Probe"
    }
    fn events_to_register(&self) -> Option<Vec<crate::framework::ClusterEventWithHint>> {
        // No event helps a pod this plugin rejected; only the flush does.
        Some(Vec::new())
    }
    crate::extension_points!(reserve, permit, bind);
}

#[async_trait]
impl ReservePlugin for Probe {
    async fn reserve(&self, _: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        self.calls.reserve.fetch_add(1, Ordering::SeqCst);
        self.calls
            .log
            .lock()
            .push(format!("reserve {} {node}", pod.name));
        self.reserve.clone()
    }
    async fn unreserve(&self, _: &CycleState, pod: &PodInfo, node: &str) {
        self.calls.unreserve.fetch_add(1, Ordering::SeqCst);
        self.calls
            .log
            .lock()
            .push(format!("unreserve {} {node}", pod.name));
    }
}

#[async_trait]
impl PermitPlugin for Probe {
    async fn permit(&self, _: &CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
        self.calls.permit.fetch_add(1, Ordering::SeqCst);
        self.permit.clone()
    }
}

#[async_trait]
impl BindPlugin for Probe {
    async fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        self.calls.binds_started.fetch_add(1, Ordering::SeqCst);
        self.calls.bind_started.notify_waiters();
        loop {
            let released = self.calls.release.notified();
            if !self.calls.hold_binds.load(Ordering::SeqCst) {
                break;
            }
            released.await;
        }
        self.bind.clone()
    }
}

struct Env {
    cluster: Arc<EmbeddedCluster>,
    scheduler: Scheduler,
    decisions: Decisions,
    calls: Arc<Calls>,
}

struct Setup {
    yaml: String,
    probe: (Status, (Status, Duration), Status),
    ttl: Duration,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
    hold_binds: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            yaml: String::new(),
            probe: (
                Status::success(),
                (Status::success(), Duration::ZERO),
                Status::skip(),
            ),
            ttl: Duration::ZERO,
            leader: None,
            hold_binds: false,
        }
    }
}

async fn start(setup: Setup, nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Env {
    let cluster = EmbeddedCluster::new();
    for n in nodes {
        cluster.apply_node(n.object()).unwrap();
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
    }
    let calls: Arc<Calls> = Arc::default();
    calls.hold_binds.store(setup.hold_binds, Ordering::SeqCst);
    let mut registry = in_tree_registry();
    let (c, (reserve, permit, bind)) = (calls.clone(), setup.probe);
    registry
        .register("Probe", move |_: NoArgs, _| {
            Ok(Probe {
                calls: c.clone(),
                reserve: reserve.clone(),
                permit: permit.clone(),
                bind: bind.clone(),
            })
        })
        .unwrap();
    let cfg = if setup.yaml.is_empty() {
        config::default_config(&|n| registry.contains(n))
    } else {
        config::parse(&setup.yaml, &|n| registry.contains(n)).unwrap()
    };
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            assumed_pod_ttl: setup.ttl,
            seed: Some(1),
            leader: setup.leader,
            batching: true,
            look_ahead: true,
        },
    )
    .unwrap();
    let decisions = scheduler.decisions();
    scheduler.wait_synced().await;
    Env {
        cluster,
        scheduler,
        decisions,
        calls,
    }
}

/// A profile with the default plugins plus the Probe at Reserve, Permit
/// and (first) Bind.
fn with_probe() -> String {
    "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint: {disabled: [{name: DefaultBinder}]}
    reserve: {enabled: [{name: Probe}]}
    permit: {enabled: [{name: Probe}]}
    bind: {enabled: [{name: Probe}, {name: DefaultBinder}]}
"
    .into()
}

impl Env {
    async fn next(&mut self) -> Decision {
        self.decisions.recv().await.expect("scheduler running")
    }

    fn node_of(&self, name: &str) -> Option<String> {
        crate::cluster::ClusterSource::get_pod(&*self.cluster, "default", name)
            .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
    }

    fn condition(&self, name: &str) -> Option<(String, String)> {
        let p = crate::cluster::ClusterSource::get_pod(&*self.cluster, "default", name)?;
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled")?
            .clone();
        Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
    }

    fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.action.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn scheduled(pod: &str, node: &str) -> Decision {
    Decision::Scheduled {
        pod: format!("default/{pod}"),
        node: node.into(),
    }
}

#[tokio::test(start_paused = true)]
async fn binds_pods_and_records_upstream_events() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2").memory("4Gi")],
        vec![make_pod("p").req_cpu("1").req_memory("1Gi")],
    )
    .await;
    assert_eq!(env.next().await, scheduled("p", "n1"));
    assert_eq!(env.node_of("p").as_deref(), Some("n1"));
    assert_eq!(
        env.events_for("p"),
        [(
            "Scheduled".into(),
            "Binding".into(),
            "Successfully assigned default/p to n1".into()
        )]
    );
    // The binding's watch event confirms the assumed pod.
    tokio::task::yield_now().await;
    let snap = env.scheduler.snapshot();
    assert_eq!(snap.get("n1").unwrap().requested().milli_cpu, 1000);
}

#[tokio::test(start_paused = true)]
async fn an_unschedulable_pod_gets_its_condition_and_event_then_a_node_event_moves_it() {
    let mut env = start(
        Setup::default(),
        vec![
            make_node("n1").cpu("2"),
            make_node("n2").cpu("1"),
            make_node("cordoned").cpu("8").unschedulable(),
        ],
        vec![make_pod("big").req_cpu("4")],
    )
    .await;
    let msg = "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu. \
               no new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    assert_eq!(
        env.next().await,
        Decision::Failed {
            pod: "default/big".into(),
            reason: "Unschedulable".into(),
            message: msg.into()
        }
    );
    assert_eq!(
        env.condition("big"),
        Some(("Unschedulable".into(), msg.into()))
    );
    assert_eq!(
        env.events_for("big"),
        [("FailedScheduling".into(), "Scheduling".into(), msg.into())]
    );
    tokio::task::yield_now().await;
    assert_eq!(env.scheduler.queue_counts().unschedulable, 1);

    // Uncordoning the big node (an UpdateNodeTaint event NodeUnschedulable
    // registered for) brings the pod back; it lands there.
    env.cluster
        .apply_node(make_node("cordoned").cpu("8").object())
        .unwrap();
    assert_eq!(env.next().await, scheduled("big", "cordoned"));
}

#[tokio::test(start_paused = true)]
async fn pods_that_do_not_fit_together_are_placed_first_come_by_priority() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2")],
        vec![
            make_pod("low").req_cpu("2").priority(1),
            make_pod("high").req_cpu("2").priority(100),
        ],
    )
    .await;
    // Decisions of different pods may arrive in any order (binding is
    // asynchronous).
    let mut got = vec![env.next().await, env.next().await];
    got.sort_by_key(|d| format!("{d:?}"));
    assert_eq!(
        got,
        [
            Decision::Failed {
                pod: "default/low".into(),
                reason: "Unschedulable".into(),
                message: "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: 0/1 nodes are \
                          available: 1 No preemption victims found for incoming pod."
                    .into()
            },
            scheduled("high", "n1"),
        ]
    );
    // Deleting the high-priority pod frees the node: the low one follows.
    env.cluster
        .delete(crate::cluster::embedded::Kind::Pod, "default", "high");
    assert_eq!(env.next().await, scheduled("low", "n1"));
}

#[tokio::test(start_paused = true)]
async fn reserve_failure_unreserves_and_requeues() {
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::unschedulable("no slot"),
                (Status::success(), Duration::ZERO),
                Status::skip(),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    match env.next().await {
        Decision::Failed {
            reason, message, ..
        } => {
            assert_eq!(reason, "Unschedulable");
            assert_eq!(message, "0/1 nodes are available: 1 no slot.");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(*env.calls.log.lock(), ["reserve p n1", "unreserve p n1"]);
    assert_eq!(
        env.calls.permit.load(Ordering::SeqCst),
        0,
        "Permit never ran"
    );
    let snap = env.scheduler.snapshot();
    assert_eq!(
        snap.get("n1").unwrap().pods().len(),
        0,
        "the assumed pod was forgotten"
    );
}

#[tokio::test(start_paused = true)]
async fn permit_timeout_unreserves_and_requeues_the_pod() {
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::code_only(Code::Wait), Duration::from_secs(10)),
                Status::skip(),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    let start = Instant::now();
    match env.next().await {
        Decision::Failed {
            reason, message, ..
        } => {
            assert_eq!(start.elapsed(), Duration::from_secs(10));
            assert_eq!(reason, "Unschedulable");
            assert_eq!(
                message,
                "0/1 nodes are available: 1 rejected due to timeout after waiting 10s at plugin Probe."
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(env.calls.unreserve.load(Ordering::SeqCst), 1);
    assert!(env.node_of("p").is_none());
    // The pod waits among the unschedulable pods; the timed-out plugin is its rejector.
    let q = env.scheduler.queue().list();
    assert_eq!(q.len(), 1);
    assert!(q[0].info.unschedulable_plugins.contains("Probe"));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_pod_binds_once_allowed() {
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::code_only(Code::Wait), Duration::from_secs(60)),
                Status::skip(),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    // Wait until the pod is parked, then allow it.
    let waiting = loop {
        if let Some(w) = env.scheduler.handle().waiting_pods().list().pop() {
            break w;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(&**waiting.node(), "n1");
    tokio::time::advance(Duration::from_secs(30)).await;
    waiting.allow("Probe");
    assert_eq!(env.next().await, scheduled("p", "n1"));
    assert_eq!(env.calls.unreserve.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_while_waiting_is_rejected_and_not_requeued() {
    let env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::code_only(Code::Wait), Duration::from_secs(60)),
                Status::skip(),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    while env.scheduler.handle().waiting_pods().is_empty() {
        tokio::task::yield_now().await;
    }
    env.cluster
        .delete(crate::cluster::embedded::Kind::Pod, "default", "p");
    while env.calls.unreserve.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    while env.scheduler.bindings_in_flight() > 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        env.scheduler.queue_counts(),
        crate::queue::QueueCounts::default()
    );
    assert_eq!(env.scheduler.snapshot().get("n1").unwrap().pods().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn bind_failure_unreserves_and_backs_off_as_an_error() {
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::success(), Duration::ZERO),
                Status::error("binder down"),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    match env.next().await {
        Decision::Failed {
            reason, message, ..
        } => {
            assert_eq!(reason, "SchedulerError");
            assert_eq!(message, "running Bind plugin \"Probe\": binder down");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(env.calls.unreserve.load(Ordering::SeqCst), 1);
    assert_eq!(env.condition("p").unwrap().0, "SchedulerError");
    // Errors are retried after their backoff (1s), and fail again.
    let start = Instant::now();
    assert!(matches!(env.next().await, Decision::Failed { .. }));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let start = Instant::now();
    assert!(matches!(env.next().await, Decision::Failed { .. }));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn an_assumed_pod_never_confirmed_expires_after_its_ttl() {
    // The Probe "binds" without telling the cluster: no confirmation comes.
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::success(), Duration::ZERO),
                Status::success(),
            ),
            ttl: Duration::from_secs(30),
            leader: None,
            hold_binds: false,
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("ghost").req_cpu("2")],
    )
    .await;
    assert_eq!(env.next().await, scheduled("ghost", "n1"));
    assert_eq!(
        env.scheduler
            .snapshot()
            .get("n1")
            .unwrap()
            .requested()
            .milli_cpu,
        2000
    );
    assert_eq!(env.scheduler.bindings_in_flight(), 0);
    env.cluster
        .apply_pod(make_pod("next").req_cpu("2").object())
        .unwrap();
    let start = Instant::now();
    match env.next().await {
        Decision::Failed { pod, .. } => assert_eq!(pod, "default/next"),
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    // When the assumed pod expires, its room is free and `next` fits.
    assert_eq!(env.next().await, scheduled("next", "n1"));
    assert!(
        (30..=31).contains(&start.elapsed().as_secs()),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn gated_pods_wait_until_their_gates_are_removed() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2")],
        vec![make_pod("g").req_cpu("1").gate("example.com/hold")],
    )
    .await;
    tokio::task::yield_now().await;
    assert_eq!(env.scheduler.queue_counts().gated, 1);
    env.cluster
        .apply_pod(make_pod("g").req_cpu("1").object())
        .unwrap();
    assert_eq!(env.next().await, scheduled("g", "n1"));
}

#[tokio::test(start_paused = true)]
async fn pods_of_other_schedulers_are_left_alone() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2")],
        vec![make_pod("theirs").scheduler("volcano"), make_pod("ours")],
    )
    .await;
    assert_eq!(env.next().await, scheduled("ours", "n1"));
    assert!(env.node_of("theirs").is_none());
    assert!(env.condition("theirs").is_none());
}

// --- the node search over many nodes ---

fn framework_for_search(pct: i32) -> (Arc<Framework>, Snapshot) {
    let registry = in_tree_registry();
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: {pct}\n"
    );
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::new(4).unwrap());
    let profiles = build_profiles(&cfg, &registry, &handle).unwrap();
    let fw = profiles.values().next().unwrap().clone();
    // 300 nodes; every third one too small for the pod.
    let nodes = (0..300)
        .map(|i| {
            let cpu = if i % 3 == 2 { "1" } else { "4" };
            NodeInfo::new(Arc::new(make_node(&format!("n{i:03}")).cpu(cpu).build()))
        })
        .collect();
    (fw, Snapshot::from_nodes(nodes))
}

#[tokio::test]
async fn the_search_stops_at_the_sampling_size_and_rotates() {
    let (fw, snap) = framework_for_search(50);
    let pod = make_pod("p").req_cpu("2").build();
    let mut alg = Algorithm::new(50, FastRng::new(1));
    let nominated = Default::default();
    let found = alg
        .find_nodes_that_fit(&fw, &mut CycleState::new(), &pod, &snap, &nominated)
        .await
        .ok()
        .unwrap();
    // 50% of 300 = 150 feasible nodes wanted; every third node is too
    // small, so 225 evaluated (the 225th is feasible: n224).
    assert_eq!(found.nodes.len(), 150);
    assert_eq!(found.evaluated, 224);
    assert_eq!(found.diagnosis.node_to_status.len(), 74);
    assert_eq!(found.nodes[0].name(), "n000");
    assert_eq!(found.nodes[149].name(), "n223");
    assert_eq!(alg.next_start_node_index, 224);

    // The next search starts where this one stopped and wraps around.
    let found = alg
        .find_nodes_that_fit(&fw, &mut CycleState::new(), &pod, &snap, &nominated)
        .await
        .ok()
        .unwrap();
    assert_eq!(found.nodes[0].name(), "n225");
    assert_eq!(found.nodes.last().unwrap().name(), "n148");
    // It started on a node too small (n224), so it evaluated 225 nodes.
    assert_eq!(alg.next_start_node_index, (224 + 225) % 300);
}

/// scheduler_plugin_evaluation_total counts each Filter plugin's calls as
/// upstream's instrumented plugins do: every node the search judged up to
/// the plugin that rejected it, nothing for plugins PreFilter skipped, and
/// nothing in dry runs.
#[tokio::test]
async fn plugin_evaluations_count_the_calls_the_search_made() {
    use crate::framework::ExtensionPoint;
    use crate::metrics::Metrics;
    let (fw, snap) = framework_for_search(50);
    let metrics = Arc::new(Metrics::default());
    fw.attach_metrics(&metrics);
    let pod = make_pod("p").req_cpu("2").build();
    let mut alg = Algorithm::new(50, FastRng::new(1));
    let nominated = Default::default();
    let mut state = CycleState::new();
    let found = alg
        .find_nodes_that_fit(&fw, &mut state, &pod, &snap, &nominated)
        .await
        .ok()
        .unwrap();
    // As in the test above: 224 nodes judged, 74 rejected by
    // NodeResourcesFit, 150 feasible.
    assert_eq!((found.evaluated, found.nodes.len()), (224, 150));
    let profile = fw.profile_name().to_string();
    let count = |point, plugin| metrics.evaluations(&profile, point, plugin).unwrap();
    let filters = fw.plugin_names(ExtensionPoint::Filter);
    let fit = filters
        .iter()
        .position(|n| *n == "NodeResourcesFit")
        .unwrap();
    for (i, name) in filters.iter().enumerate() {
        let want = if state.skip_filter.contains(i) {
            0
        } else if i <= fit {
            224
        } else {
            150
        };
        assert_eq!(count(ExtensionPoint::Filter, name), want, "{name}");
    }
    assert!(!state.skip_filter.is_empty(), "some plugins skipped");
    for name in fw.plugin_names(ExtensionPoint::PreFilter) {
        assert_eq!(count(ExtensionPoint::PreFilter, name), 1, "{name}");
    }

    // A dry run's calls are not counted.
    let before = count(ExtensionPoint::Filter, "NodeResourcesFit");
    let mut dry = CycleState::new();
    dry.dry_run = true;
    alg.find_nodes_that_fit(&fw, &mut dry, &pod, &snap, &nominated)
        .await
        .ok()
        .unwrap();
    assert_eq!(count(ExtensionPoint::Filter, "NodeResourcesFit"), before);
    assert_eq!(count(ExtensionPoint::PreFilter, "NodeResourcesFit"), 1);
}

#[tokio::test]
async fn the_adaptive_percentage_applies_when_none_is_set() {
    let (fw, snap) = framework_for_search(0);
    let pod = make_pod("p").build();
    let mut alg = Algorithm::new(0, FastRng::new(1));
    let found = alg
        .find_nodes_that_fit(
            &fw,
            &mut CycleState::new(),
            &pod,
            &snap,
            &Default::default(),
        )
        .await
        .ok()
        .unwrap();
    // 300 nodes: 50 - 300/125 = 48% -> 144 nodes.
    assert_eq!(found.nodes.len(), 144);
}

#[tokio::test]
async fn the_parallel_search_matches_the_sequential_one() {
    let (fw, snap) = framework_for_search(30);
    let pod = make_pod("p").req_cpu("3").build();
    let nominated = Default::default();
    let mut a = Algorithm::new(30, FastRng::new(1));
    let mut state = CycleState::new();
    let parallel = a
        .find_nodes_that_fit(&fw, &mut state, &pod, &snap, &nominated)
        .await
        .ok()
        .unwrap();
    // Sequential reference: the first 100 feasible nodes in order (30% of
    // 300 is 90, below the minimum of 100).
    let sequential: Vec<&str> = snap
        .list()
        .iter()
        .filter(|n| fw.run_filter(&state, &pod, n).is_success())
        .take(100)
        .map(|n| n.name())
        .collect();
    let got: Vec<&str> = parallel.nodes.iter().map(|n| n.name()).collect();
    assert_eq!(got, sequential);
}

#[tokio::test]
async fn pre_filter_restricts_the_nodes_searched() {
    struct OnlyTwo;
    impl Plugin for OnlyTwo {
        fn name(&self) -> &'static str {
            "OnlyTwo"
        }
        crate::extension_points!(pre_filter);
    }
    #[async_trait]
    impl PreFilterPlugin for OnlyTwo {
        async fn pre_filter(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &[Arc<NodeInfo>],
        ) -> (Option<PreFilterResult>, Status) {
            (
                Some(PreFilterResult {
                    node_names: Some(
                        [Arc::from("n002"), Arc::from("n005"), Arc::from("gone")]
                            .into_iter()
                            .collect(),
                    ),
                }),
                Status::success(),
            )
        }
    }
    let mut registry = in_tree_registry();
    registry
        .register("OnlyTwo", |_: NoArgs, _| Ok(OnlyTwo))
        .unwrap();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: s\n  plugins:\n    preFilter: {enabled: [{name: OnlyTwo}]}\n";
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let fw = build_profiles(&cfg, &registry, &handle)
        .unwrap()
        .into_values()
        .next()
        .unwrap();
    let (_, snap) = framework_for_search(0);
    let mut alg = Algorithm::new(0, FastRng::new(1));
    let pod = make_pod("p").req_cpu("2").build();
    let err = alg
        .schedule_pod(
            &fw,
            &mut CycleState::new(),
            &pod,
            &snap,
            &Default::default(),
        )
        .await
        .unwrap_err();
    // n002 is too small and n005 too: every other node was ruled out by PreFilter.
    match err {
        ScheduleError::Fit(e) => assert_eq!(
            e.to_string(),
            "0/300 nodes are available: 2 Insufficient cpu, 298 node(s) didn't satisfy plugin(s) [OnlyTwo]."
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn pre_bind_failure_unreserves_and_requeues() {
    struct FailingPreBind;
    impl Plugin for FailingPreBind {
        fn name(&self) -> &'static str {
            "FailingPreBind"
        }
        crate::extension_points!(pre_bind);
    }
    #[async_trait]
    impl crate::framework::PreBindPlugin for FailingPreBind {
        async fn pre_bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
            Status::error("volume not ready")
        }
    }
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(make_node("n1").cpu("2").object())
        .unwrap();
    cluster
        .apply_pod(make_pod("p").req_cpu("1").object())
        .unwrap();
    let calls: Arc<Calls> = Arc::default();
    let mut registry = in_tree_registry();
    let c = calls.clone();
    registry
        .register("Probe", move |_: NoArgs, _| {
            Ok(Probe {
                calls: c.clone(),
                reserve: Status::success(),
                permit: (Status::success(), Duration::ZERO),
                bind: Status::skip(),
            })
        })
        .unwrap();
    registry
        .register("FailingPreBind", |_: NoArgs, _| Ok(FailingPreBind))
        .unwrap();
    let yaml = format!(
        "{}    preBind: {{enabled: [{{name: FailingPreBind}}]}}\n",
        with_probe()
    );
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).unwrap();
    let scheduler = Scheduler::start(&cfg, &registry, cluster.clone(), Options::default()).unwrap();
    let mut decisions = scheduler.decisions();
    match decisions.recv().await.unwrap() {
        Decision::Failed {
            reason, message, ..
        } => {
            assert_eq!(reason, "SchedulerError");
            assert_eq!(
                message,
                "running PreBind plugin \"FailingPreBind\": volume not ready"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(*calls.log.lock(), ["reserve p n1", "unreserve p n1"]);
    assert_eq!(
        scheduler.snapshot().get("n1").unwrap().pods().len(),
        0,
        "forgotten"
    );
    assert_eq!(
        scheduler.queue_counts().backoff,
        1,
        "errors go through backoff"
    );
}

#[tokio::test]
async fn a_pre_filter_rejection_ends_the_cycle_before_filter() {
    // NodeName's PreFilter narrows to the named node; a missing one leaves
    // no candidate, and no Filter runs on any node.
    let (fw, snap) = framework_for_search(0);
    let mut alg = Algorithm::new(0, FastRng::new(1));
    let pod = make_pod("p").node("nowhere").build();
    let err = alg
        .schedule_pod(
            &fw,
            &mut CycleState::new(),
            &pod,
            &snap,
            &Default::default(),
        )
        .await
        .unwrap_err();
    match err {
        ScheduleError::Fit(e) => {
            assert_eq!(e.diagnosis.node_to_status.len(), 0, "no node was evaluated");
            assert!(e.diagnosis.unschedulable_plugins.contains("NodeName"));
            assert_eq!(
                e.to_string(),
                "0/300 nodes are available: 300 node(s) didn't satisfy plugin(s) [NodeName]."
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(alg.next_start_node_index, 0, "nothing processed");
}

#[test]
fn the_default_profile_places_plugins_at_upstreams_points() {
    let registry = in_tree_registry();
    let cfg = config::default_config(&|n| registry.contains(n));
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let profiles = build_profiles(&cfg, &registry, &handle).unwrap();
    let fw = &profiles["default-scheduler"];
    use crate::framework::ExtensionPoint::*;
    let cases: [(crate::framework::ExtensionPoint, &[&str]); 12] = [
        (PreEnqueue, &["SchedulingGates", "DynamicResources"]),
        (QueueSort, &["PrioritySort"]),
        (
            PreFilter,
            &[
                "NodeName",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity",
                "DynamicResources",
                "NodeDeclaredFeatures",
            ],
        ),
        (
            Filter,
            &[
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity",
                "DynamicResources",
                "NodeDeclaredFeatures",
            ],
        ),
        (PostFilter, &["DynamicResources", "DefaultPreemption"]),
        // VolumeBinding scores under StorageCapacityScoring (on in v1.37).
        (
            PreScore,
            &[
                "TaintToleration",
                "NodeAffinity",
                "NodeResourcesFit",
                "VolumeBinding",
                "PodTopologySpread",
                "InterPodAffinity",
                "NodeResourcesBalancedAllocation",
            ],
        ),
        (
            Score,
            &[
                "TaintToleration",
                "NodeAffinity",
                "NodeResourcesFit",
                "VolumeBinding",
                "PodTopologySpread",
                "InterPodAffinity",
                "DynamicResources",
                "NodeResourcesBalancedAllocation",
                "ImageLocality",
            ],
        ),
        (Reserve, &["VolumeBinding", "DynamicResources"]),
        (Permit, &[]),
        (PreBind, &["VolumeBinding", "DynamicResources"]),
        (Bind, &["DefaultBinder"]),
        (PostBind, &[]),
    ];
    for (point, want) in cases {
        assert_eq!(fw.plugin_names(point), want, "{point:?}");
    }
}

#[test]
fn multi_point_expansion_overrides_and_disables_per_point() {
    let registry = in_tree_registry();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: s
  plugins:
    filter:
      enabled: [{name: NodeResourcesFit}, {name: NodeUnschedulable}]
      disabled: [{name: NodeName}]
    score:
      enabled: [{name: NodeResourcesFit, weight: 4}]
";
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let fw = Framework::new(&cfg.profiles[0], &registry, &handle).unwrap();
    use crate::framework::ExtensionPoint::*;
    // Re-enabled at the point: those plugins keep the point's own order and
    // come first, then the rest of multiPoint minus what the point disables;
    // NodeName is disabled at Filter but still runs at PreFilter.
    assert_eq!(
        fw.plugin_names(Filter),
        [
            "NodeResourcesFit",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ]
    );
    assert_eq!(fw.plugin_names(PreFilter)[0], "NodeName");
    // The point's weight overrides multiPoint's; the others keep theirs.
    assert_eq!(
        fw.score_weights(),
        [
            ("NodeResourcesFit", 4),
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("DynamicResources", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ]
    );

    // Enabling a plugin twice at one point is an error naming the entry.
    let dup = yaml.replace(
        "{name: NodeResourcesFit}, {name: NodeUnschedulable}",
        "{name: NodeUnschedulable}, {name: NodeUnschedulable}",
    );
    let cfg = config::parse(&dup, &|n| registry.contains(n)).unwrap();
    let err = Framework::new(&cfg.profiles[0], &registry, &handle).unwrap_err();
    assert_eq!(
        err.to_string(),
        "profiles[0].plugins.filter.enabled[1]: plugin \"NodeUnschedulable\" already registered as \"FilterPlugin\""
    );
    // A plugin that does not exist names its entry.
    let unknown = yaml.replace(
        "{name: NodeResourcesFit, weight: 4}",
        "{name: NodeResourcesFitt, weight: 4}",
    );
    let err = config::parse(&unknown, &|n| registry.contains(n))
        .and_then(|c| Framework::new(&c.profiles[0], &registry, &handle).map(|_| ()))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "profiles[0].plugins.score.enabled[0]: ScorePlugin \"NodeResourcesFitt\" does not exist"
    );
    // Bad args stop the profile with the args' path.
    let bad_args = format!(
        "{yaml}  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Foo\n"
    );
    let cfg = config::parse(&bad_args, &|n| registry.contains(n)).unwrap();
    let err = Framework::new(&cfg.profiles[0], &registry, &handle).unwrap_err();
    assert!(err.to_string().starts_with(
        "profiles[0].pluginConfig[0].args.scoringStrategy.type: unknown strategy \"Foo\""
    ));
}

#[test]
fn profiles_must_share_their_queue_sort() {
    struct OtherSort;
    impl Plugin for OtherSort {
        fn name(&self) -> &'static str {
            "OtherSort"
        }
        crate::extension_points!(queue_sort);
    }
    impl crate::framework::QueueSortPlugin for OtherSort {
        fn less(
            &self,
            _: crate::framework::QueuedEntity<'_>,
            _: crate::framework::QueuedEntity<'_>,
        ) -> bool {
            false
        }
    }
    let mut registry = in_tree_registry();
    registry
        .register("OtherSort", |_: NoArgs, _| Ok(OtherSort))
        .unwrap();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: a
- schedulerName: b
  plugins:
    queueSort:
      enabled: [{name: OtherSort}]
      disabled: [{name: \"*\"}]
";
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let err = build_profiles(&cfg, &registry, &handle).unwrap_err();
    assert_eq!(err.path, "profiles[1].plugins.queueSort");
    assert!(
        err.message
            .contains("queueSort must be the same for all profiles"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_preemptor_is_nominated_victims_go_and_it_binds_there() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2")],
        vec![make_pod("low").req_cpu("2").priority(1).node("n1")],
    )
    .await;
    env.cluster
        .apply_pod(make_pod("high").req_cpu("2").priority(100).object())
        .unwrap();
    match env.next().await {
        Decision::Failed { pod, message, .. } => {
            assert_eq!(pod, "default/high");
            // Preemption found a node: v1.37 names it and counts the
            // victims (v1.36 added nothing).
            assert_eq!(
                message,
                "0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential placement for pod on node n1, preempting 1 victims"
            );
        }
        other => panic!("{other:?}"),
    }
    let failed = env
        .events_for("high")
        .into_iter()
        .find(|e| e.0 == "FailedScheduling")
        .expect("a FailedScheduling event");
    assert!(
        failed.2.ends_with(
            "preemption: found a potential placement for pod on node n1, preempting 1 victims"
        ),
        "{failed:?}"
    );
    // The victim is gone, the preemptor nominated, then bound on the node.
    assert_eq!(env.next().await, scheduled("high", "n1"));
    assert!(env.node_of("low").is_none() && env.cluster.get_pod("default", "low").is_none());
    let reasons: Vec<String> = env.events_for("low").into_iter().map(|e| e.0).collect();
    assert_eq!(reasons, ["Preempted"]);
}

#[tokio::test(start_paused = true)]
async fn the_room_a_nomination_holds_is_not_given_to_lower_priority_pods() {
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2")],
        vec![make_pod("high").req_cpu("2").priority(100).nominated("n1")],
    )
    .await;
    // `high` is nominated to n1 and waits there (it fits, so it binds).
    assert_eq!(env.next().await, scheduled("high", "n1"));
    // Now nominate a fresh high-priority pod to a full node, and add a
    // low-priority pod that would fit on a second node only if the
    // nomination were ignored.
    env.cluster
        .apply_node(make_node("n2").cpu("2").object())
        .unwrap();
    env.cluster
        .apply_pod(
            make_pod("blocker")
                .req_cpu("2")
                .priority(1)
                .node("n2")
                .object(),
        )
        .unwrap();
    env.cluster
        .apply_pod(
            make_pod("nominee")
                .req_cpu("2")
                .priority(50)
                .nominated("n2")
                .object(),
        )
        .unwrap();
    // The nominee cannot fit (n2 is full of `blocker` for now): it preempts
    // the blocker and is bound on n2.
    loop {
        if let Decision::Scheduled { pod, node } = env.next().await {
            assert_eq!((pod.as_str(), node.as_str()), ("default/nominee", "n2"));
            break;
        }
    }
    // A late low-priority pod does not get n2's room while nominated:
    // checked through the filter with nominated pods directly.
    let fw = env.scheduler.profiles()["default-scheduler"].clone();
    let mut nominated = crate::framework::NominatedPods::new();
    nominated.insert(
        Arc::from("n2"),
        vec![Arc::new(
            make_pod("nominee2")
                .req_cpu("2")
                .priority(50)
                .nominated("n2")
                .build(),
        )],
    );
    let empty_n2 = NodeInfo::new(Arc::new(make_node("n2").cpu("2").build()));
    let late = make_pod("late").req_cpu("1").priority(1).build();
    let mut st = CycleState::new();
    fw.run_pre_filter(&mut st, &late, &[Arc::new(empty_n2.clone())])
        .await;
    let s = fw.run_filter_with_nominated_pods(&st, &late, &empty_n2, &nominated);
    assert_eq!(s.message(), "Insufficient cpu");
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_pops_and_it_stops_at_once_when_leadership_is_lost() {
    let (leading, rx) = tokio::sync::watch::channel(false);
    let mut env = start(
        Setup {
            leader: Some(rx),
            ..Default::default()
        },
        vec![make_node("n1").cpu("4")],
        vec![make_pod("a").req_cpu("1"), make_pod("b").req_cpu("1")],
    )
    .await;
    // A standby: a minute passes and nothing is popped.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let c = env.scheduler.queue_counts();
    assert_eq!((c.active, c.in_flight), (2, 0));
    assert!(env.node_of("a").is_none() && env.node_of("b").is_none());

    leading.send_replace(true);
    let mut got = vec![env.next().await, env.next().await];
    got.sort_by_key(|d| format!("{d:?}"));
    assert_eq!(got, [scheduled("a", "n1"), scheduled("b", "n1")]);

    // Lost: a pod arriving afterwards is never popped.
    leading.send_replace(false);
    env.cluster
        .apply_pod(make_pod("c").req_cpu("1").object())
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let c = env.scheduler.queue_counts();
    assert_eq!((c.active, c.in_flight), (1, 0));
    assert!(env.node_of("c").is_none());

    // Leading again (a library user may re-elect): it goes on.
    leading.send_replace(true);
    assert_eq!(env.next().await, scheduled("c", "n1"));
}

#[tokio::test(start_paused = true)]
async fn shutdown_rejects_pods_waiting_at_permit_so_they_unreserve() {
    let mut env = start(
        Setup {
            yaml: with_probe(),
            probe: (
                Status::success(),
                (Status::code_only(Code::Wait), Duration::from_secs(600)),
                Status::skip(),
            ),
            ..Default::default()
        },
        vec![make_node("n1").cpu("2")],
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    while env.scheduler.handle().waiting_pods().is_empty() {
        tokio::task::yield_now().await;
    }
    assert_eq!(env.scheduler.bindings_in_flight(), 1);
    let start = Instant::now();
    let drained = env.scheduler.shutdown(Duration::from_secs(30)).await;
    assert_eq!(
        drained,
        Drained {
            cycle_finished: true,
            rejected_waiting: 1,
            unfinished_bindings: 0
        }
    );
    // Nothing waited out a timer: the rejection ends the binding cycle.
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(env.calls.unreserve.load(Ordering::SeqCst), 1);
    match env.next().await {
        Decision::Failed { message, .. } => assert_eq!(
            message,
            "0/1 nodes are available: 1 scheduler is shutting down."
        ),
        other => panic!("{other:?}"),
    }
    assert!(env.node_of("p").is_none());
    assert!(env.scheduler.queue().is_closed());
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_a_stuck_binding_only_the_bound() {
    // A Bind that never answers.
    struct Stuck;
    impl Plugin for Stuck {
        fn name(&self) -> &'static str {
            "Stuck"
        }
        crate::extension_points!(bind);
    }
    #[async_trait]
    impl BindPlugin for Stuck {
        async fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
            std::future::pending().await
        }
    }
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(make_node("n1").cpu("2").object())
        .unwrap();
    cluster
        .apply_pod(make_pod("p").req_cpu("1").object())
        .unwrap();
    let mut registry = in_tree_registry();
    registry
        .register("Stuck", |_: NoArgs, _| Ok(Stuck))
        .unwrap();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint: {disabled: [{name: DefaultBinder}]}
    bind: {enabled: [{name: Stuck}]}
";
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let scheduler = Scheduler::start(&cfg, &registry, cluster.clone(), Options::default()).unwrap();
    scheduler.wait_synced().await;
    while scheduler.bindings_in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let start = Instant::now();
    let drained = scheduler.shutdown(Duration::from_secs(30)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(
        drained,
        Drained {
            cycle_finished: true,
            rejected_waiting: 0,
            unfinished_bindings: 1
        }
    );
}

/// Log lines written while the guard lives (this thread's subscriber: a
/// paused-time test runs every task on its thread).
struct Logs(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let buf = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let w = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || LogWriter(w.clone()))
            .finish();
        (Self(buf), tracing::subscriber::set_default(subscriber))
    }

    fn lines(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

struct LogWriter(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_idle_summary_comes_once_per_idle_period_with_only_what_changed() {
    let (logs, _guard) = Logs::capture();
    let mut env = start(
        Setup::default(),
        vec![make_node("n1").cpu("2").memory("4Gi")],
        vec![make_pod("a").req_cpu("1"), make_pod("big").req_cpu("4")],
    )
    .await;
    let mut decided = [env.next().await, env.next().await];
    decided.sort_by_key(|d| format!("{d:?}"));
    assert!(matches!(&decided[1], Decision::Scheduled { pod, .. } if pod == "default/a"));
    tokio::time::sleep(super::idle::IDLE_QUIET * 10).await;
    let idle = logs.lines("scheduler idle");
    assert_eq!(idle.len(), 1, "{idle:#?}");
    assert!(
        idle[0].contains("scheduler idle: 1 pods on 1 nodes, 1 pending"),
        "{}",
        idle[0]
    );
    let pending = logs.lines("pending: ");
    assert_eq!(pending.len(), 1, "{pending:#?}");
    assert!(pending[0].contains("Insufficient cpu") && pending[0].contains("pod=default/big"));
    assert!(
        logs.lines("latency_ms=")
            .iter()
            .all(|l| l.split("latency_ms=").nth(1).is_some_and(|v| {
                let v = v.split_whitespace().next().unwrap_or("");
                v.split('.').nth(1).is_none_or(|d| d.len() <= 3)
            })),
        "durations are rounded to the microsecond"
    );

    // Another pod: one more idle period; the pending pod did not change,
    // so it is counted, not listed again.
    env.cluster
        .apply_pod(make_pod("c").req_cpu("500m").object())
        .unwrap();
    assert_eq!(env.next().await, scheduled("c", "n1"));
    tokio::time::sleep(super::idle::IDLE_QUIET * 10).await;
    let idle = logs.lines("scheduler idle");
    assert_eq!(idle.len(), 2, "{idle:#?}");
    assert!(
        idle[1].contains("scheduler idle: 2 pods on 1 nodes, 1 pending (1 as in the last summary)"),
        "{}",
        idle[1]
    );
    assert_eq!(logs.lines("pending: ").len(), 1);
}

/// Once 64 binding cycles are past Permit, the loop pops no more pods
/// until one finishes; the rest wait in the queue and are bound after.
#[tokio::test(start_paused = true)]
async fn the_loop_waits_while_bindings_in_flight_are_at_the_bound() {
    let pods: Vec<PodBuilder> = (0..70).map(|i| make_pod(&format!("p{i:02}"))).collect();
    let mut env = start(
        Setup {
            yaml: with_probe(),
            hold_binds: true,
            ..Setup::default()
        },
        vec![make_node("n1").cpu("100").memory("100Gi").pods(200)],
        pods,
    )
    .await;
    let bound = super::schedule_one::MAX_BINDINGS_IN_FLIGHT;
    loop {
        let started = env.calls.bind_started.notified();
        if env.calls.binds_started.load(Ordering::SeqCst) >= bound {
            break;
        }
        started.await;
    }
    // Everything runnable runs before paused time moves on: had the loop
    // gone on, more binds would have started.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.calls.binds_started.load(Ordering::SeqCst), bound);
    assert_eq!(env.scheduler.bindings_in_flight(), bound);
    assert_eq!(env.calls.reserve.load(Ordering::SeqCst), bound);
    env.calls.hold_binds.store(false, Ordering::SeqCst);
    env.calls.release.notify_waiters();
    let mut scheduled = 0;
    while scheduled < 70 {
        if let Decision::Scheduled { .. } = env.next().await {
            scheduled += 1;
        }
    }
    assert_eq!(env.calls.binds_started.load(Ordering::SeqCst), 70);
}
