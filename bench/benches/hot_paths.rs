//! criterion micro-benchmarks of the scheduler's hot paths:
//!
//! * `filter/<Plugin>` and `score/<Plugin>`: each Filter and Score plugin of
//!   the default profile over one NodeInfo (a node with 20 pods, in a
//!   snapshot of 100 such nodes), after its PreFilter/PreScore, alone in a
//!   profile of its own; the pod is the scheduler_perf template that makes
//!   the plugin work (anti-affinity for InterPodAffinity, spreading for
//!   PodTopologySpread, node affinity for NodeAffinity, the default pod
//!   otherwise);
//! * `snapshot/update_1pct_of_5000`: the cycle's snapshot update after 50
//!   of 5000 nodes changed (a pod added to each);
//! * `queue/push_pop_100k`: 100,000 pods added to the scheduling queue, then
//!   popped (and marked done) in priority order;
//! * `construct/*`: PodInfo from each pod template, NodeInfo from a node;
//! * `record/update_check/*`: what `berthd --record` does for each pod or
//!   node update it sees, to tell whether what scheduling reads changed:
//!   a kubelet's status update of a bound pod (its IPs, container statuses
//!   and conditions) and a node's heartbeat (its conditions), which change
//!   nothing scheduling reads, so the whole of both sides is compared; as
//!   the recorder does it (`raw`) and as values (`values`, what it did
//!   before and falls back to).
//!
//! Run: `cargo bench -p berth-bench --bench hot_paths` (add a filter, e.g.
//! `-- filter/`, to run some).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_bench::objects::{self, PodTemplate};
use berth_server::cache::{Cache, NodeInfo, Snapshot};
use berth_server::cluster::embedded::EmbeddedCluster;
use berth_server::config;
use berth_server::framework::{CycleState, ExtensionPoint, Framework, Handle, Parallelizer};
use berth_server::model::{NodeSpec, PodInfo, PodRef};
use berth_server::plugins::in_tree_registry;
use berth_server::queue::{QueueConfig, SchedulingQueue};
use berth_server::scheduler::build_profiles;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;

const ZONES: &[&str] = &["zone1", "zone2", "zone3"];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A pod of `template` with a uid, bound to `node` if given.
fn pod(template: PodTemplate, ns: &str, name: &str, node: Option<&str>) -> PodInfo {
    let mut p: Pod = template.pod(ns, name);
    p.metadata.uid = Some(format!("uid-{ns}-{name}"));
    if let (Some(n), Some(spec)) = (node, p.spec.as_mut()) {
        spec.node_name = Some(n.to_string());
    }
    PodInfo::new(Arc::new(p)).expect("templates are valid pods")
}

fn node_spec(i: usize) -> Arc<NodeSpec> {
    Arc::new(NodeSpec::new(Arc::new(objects::node(i, ZONES))).expect("a valid node"))
}

/// Node `i` with 20 pods of mixed templates (so affinity and spreading
/// have pods to count).
fn busy_node(i: usize) -> NodeInfo {
    let spec = node_spec(i);
    let mut info = NodeInfo::new(spec.clone());
    let templates = [
        (PodTemplate::Default, "default"),
        (PodTemplate::PodAffinity, "sched-0"),
        (PodTemplate::TopologySpreading, "default"),
        (PodTemplate::Default, "default"),
    ];
    for k in 0..20 {
        let (t, ns) = templates[k % templates.len()];
        let name = format!("existing-{i}-{k}");
        info.add_pod(Arc::new(pod(t, ns, &name, Some(&spec.name))));
    }
    info
}

/// A framework with the default profile's QueueSort and Bind and only
/// `plugin` besides.
fn single_plugin_framework(plugin: &str, handle: &Handle) -> Arc<Framework> {
    let registry = in_tree_registry();
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: only
  plugins:
    multiPoint:
      disabled: [{{name: '*'}}]
      enabled: [{{name: PrioritySort}}, {{name: DefaultBinder}}, {{name: {plugin}}}]
"
    );
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).expect("a valid profile");
    build_profiles(&cfg, &registry, handle)
        .expect("the profile builds")
        .into_values()
        .next()
        .expect("one profile")
}

fn default_framework(handle: &Handle) -> Arc<Framework> {
    let registry = in_tree_registry();
    let cfg = config::default_config(&|n| registry.contains(n));
    build_profiles(&cfg, &registry, handle)
        .expect("the default profile builds")
        .into_values()
        .next()
        .expect("one profile")
}

fn handle() -> Handle {
    let cluster = EmbeddedCluster::new();
    Handle::new(cluster.clone(), cluster, Parallelizer::inline())
}

/// The template that makes `plugin` do its work at `point`.
fn template_for(plugin: &str, point: ExtensionPoint) -> (PodTemplate, &'static str) {
    match (plugin, point) {
        ("InterPodAffinity", _) => (PodTemplate::PodAntiAffinity, "sched-1"),
        ("PodTopologySpread", ExtensionPoint::Filter) => {
            (PodTemplate::TopologySpreading, "default")
        }
        ("PodTopologySpread", _) => (PodTemplate::PreferredTopologySpreading, "default"),
        ("NodeAffinity", _) => (PodTemplate::NodeAffinity, "default"),
        _ => (PodTemplate::Default, "default"),
    }
}

fn plugins(c: &mut Criterion) {
    let rt = runtime();
    let h = handle();
    let default = default_framework(&h);
    let snapshot = Arc::new(Snapshot::from_nodes((0..100).map(busy_node).collect()));
    let nodes = snapshot.list().to_vec();
    let node = nodes[0].clone();

    let mut group = c.benchmark_group("filter");
    for &name in default.plugin_names(ExtensionPoint::Filter) {
        let fw = single_plugin_framework(name, &h);
        let (t, ns) = template_for(name, ExtensionPoint::Filter);
        let p = pod(t, ns, "incoming", None);
        let mut state = CycleState::with_snapshot(snapshot.clone());
        let (_, status, _) = rt.block_on(fw.run_pre_filter(&mut state, &p, &nodes));
        assert!(status.is_success(), "PreFilter of {name}: {status:?}");
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(fw.run_filter(&state, &p, &node)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("score");
    let one = std::slice::from_ref(&node);
    for &name in default.plugin_names(ExtensionPoint::Score) {
        let fw = single_plugin_framework(name, &h);
        let (t, ns) = template_for(name, ExtensionPoint::Score);
        let p = pod(t, ns, "incoming", None);
        let mut state = CycleState::with_snapshot(snapshot.clone());
        let (_, status, _) = rt.block_on(fw.run_pre_filter(&mut state, &p, &nodes));
        assert!(status.is_success(), "PreFilter of {name}: {status:?}");
        let status = rt.block_on(fw.run_pre_score(&mut state, &p, one));
        assert!(status.is_success(), "PreScore of {name}: {status:?}");
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(rt.block_on(fw.run_score(&state, &p, one))).is_ok())
        });
    }
    group.finish();
}

fn snapshot_update(c: &mut Criterion) {
    const NODES: usize = 5000;
    const CHANGED: usize = NODES / 100;
    let mut cache = Cache::new(Duration::ZERO);
    for i in 0..NODES {
        cache.add_node(node_spec(i));
    }
    let mut snapshot = Snapshot::new();
    cache.update_snapshot(&mut snapshot);
    let mut round = 0usize;
    let mut group = c.benchmark_group("snapshot");
    group.throughput(Throughput::Elements(CHANGED as u64));
    group.bench_function("update_1pct_of_5000", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // 50 nodes spread over the cluster get a pod each (untimed).
                for k in 0..CHANGED {
                    let node = objects::node_name((k * 100 + round) % NODES);
                    let name = format!("p-{round}-{k}");
                    let p = pod(PodTemplate::Default, "default", &name, Some(&node));
                    cache.add_pod(Arc::new(p)).expect("a new pod");
                }
                round += 1;
                let start = Instant::now();
                cache.update_snapshot(&mut snapshot);
                total += start.elapsed();
            }
            black_box(snapshot.generation());
            total
        })
    });
    group.finish();
}

fn queue_push_pop(c: &mut Criterion) {
    const PODS: usize = 100_000;
    let rt = runtime();
    let h = handle();
    let fw = default_framework(&h);
    let profiles: HashMap<Arc<str>, Arc<Framework>> =
        HashMap::from([(Arc::from("default-scheduler"), fw)]);
    // Priorities vary so that the heap has ordering work to do.
    let pods: Vec<PodRef> = (0..PODS)
        .map(|i| {
            let mut p: Pod = PodTemplate::Default.pod("default", &format!("q-{i}"));
            p.metadata.uid = Some(format!("q-{i}"));
            if let Some(spec) = p.spec.as_mut() {
                spec.priority = Some((i % 7) as i32);
            }
            Arc::new(PodInfo::new(Arc::new(p)).expect("a valid pod"))
        })
        .collect();
    let mut group = c.benchmark_group("queue");
    group.throughput(Throughput::Elements(PODS as u64));
    group.sample_size(10);
    group.bench_function("push_pop_100k", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let queue = SchedulingQueue::new(QueueConfig::default(), profiles.clone());
                let start = Instant::now();
                for p in &pods {
                    queue.add(p.clone());
                }
                rt.block_on(async {
                    for _ in 0..PODS {
                        let q = queue.pop().await.expect("a pod");
                        queue.done(&q.pod.uid);
                    }
                });
                total += start.elapsed();
                queue.close();
            }
            total
        })
    });
    group.finish();
}

fn construction(c: &mut Criterion) {
    let mut group = c.benchmark_group("construct");
    for (t, ns) in [
        (PodTemplate::Default, "default"),
        (PodTemplate::PodAntiAffinity, "sched-0"),
        (PodTemplate::TopologySpreading, "default"),
        (PodTemplate::NodeAffinity, "default"),
    ] {
        let mut p = t.pod(ns, "p");
        p.metadata.uid = Some("uid-p".into());
        let p = Arc::new(p);
        group.bench_function(BenchmarkId::new("PodInfo", t.stem()), |b| {
            b.iter(|| black_box(PodInfo::new(p.clone()).expect("a valid pod")))
        });
    }
    let n = Arc::new(objects::node(7, ZONES));
    group.bench_function("NodeInfo", |b| {
        b.iter(|| {
            let spec = NodeSpec::new(n.clone()).expect("a valid node");
            black_box(NodeInfo::new(Arc::new(spec)))
        })
    });
    group.finish();
}

fn record_update_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("record/update_check");
    // A bound pod as the scheduler left it, then as its kubelet reports
    // it starting: only IPs, container statuses and conditions differ.
    let pod_json = |rv: &str, started: bool| {
        let mut pod = PodTemplate::Default.pod("default", "p");
        pod.metadata.uid = Some("uid-p".into());
        pod.metadata.resource_version = Some(rv.into());
        pod.spec.as_mut().expect("a spec").node_name = Some("node-7".into());
        let mut status = serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True",
                "lastTransitionTime": "2026-03-01T09:00:00Z"}],
        });
        if started {
            status["hostIP"] = "10.0.0.7".into();
            status["hostIPs"] = serde_json::json!([{"ip": "10.0.0.7"}]);
            status["podIP"] = "10.244.7.12".into();
            status["podIPs"] = serde_json::json!([{"ip": "10.244.7.12"}]);
            status["conditions"] = serde_json::json!([
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T09:00:00Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-03-01T09:00:01Z"},
            ]);
            status["containerStatuses"] = serde_json::json!([{"name": "pause", "ready": false,
                "restartCount": 0, "image": "registry.k8s.io/pause:3.10", "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}}}]);
        }
        pod.status = serde_json::from_value(status).expect("a pod status");
        serde_json::to_vec(&pod).expect("a pod encodes")
    };
    let (old_pod, new_pod) = (pod_json("100", false), pod_json("101", true));
    let mut node = objects::node(7, ZONES);
    node.metadata.resource_version = Some("100".into());
    let old_node = serde_json::to_vec(&node).expect("a node encodes");
    node.metadata.resource_version = Some("101".into());
    for c in node
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .into_iter()
        .flatten()
    {
        c.last_heartbeat_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-03-01T09:05:00Z".parse().expect("a time"),
        ));
    }
    let new_node = serde_json::to_vec(&node).expect("a node encodes");
    for (what, old, new) in [("pod", &old_pod, &new_pod), ("node", &old_node, &new_node)] {
        assert!(!berth_server::recording::scheduling_changed(old, new));
        assert!(!berth_server::recording::scheduling_changed_as_values(
            old, new
        ));
        group.bench_function(BenchmarkId::new("raw", what), |b| {
            b.iter(|| black_box(berth_server::recording::scheduling_changed(old, new)))
        });
        group.bench_function(BenchmarkId::new("values", what), |b| {
            b.iter(|| {
                black_box(berth_server::recording::scheduling_changed_as_values(
                    old, new,
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    plugins,
    snapshot_update,
    queue_push_pop,
    construction,
    record_update_check
);
criterion_main!(benches);
