//! The Python remote extender (`extenders/python/label_tier.py`, written
//! from the .proto alone with grpcio) through the real berthd: its Filter
//! and Score decide placements, its rejection reason reaches the pod's
//! condition, and when the process dies berthd fails the pods it would have
//! judged (or skips it, when `ignorable`), losing none.
//!
//! The interpreter is `BERTH_PYTHON` (tests/run.sh installs the extender's
//! requirements into tests/.venv and sets it), else tests/.venv/bin/python;
//! without either these tests fail, naming tests/run.sh.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use berth_client::pb::{EventType, SchedulingEvent};
use berth_e2e::python::PyExtender;
use berth_e2e::{Berthd, message};
use serde_json::{Value, json};
use tokio::process::Command;

/// A guard against a hung process or stream; never what a test waits for.
const GUARD: Duration = Duration::from_secs(120);

/// The extender's name, in berthd's configuration and in its Hello.
const EXTENDER: &str = "label-tier";

// ---------------------------------------------------------------------------
// Helpers

/// A directory for one test's files, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berth-pyext-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// Writes `text` to `name` in the directory; its path.
    fn write(&self, name: &str, text: &str) -> Result<String> {
        let path = self.0.join(name);
        std::fs::write(&path, text)?;
        Ok(path.display().to_string())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Four nodes of the same size; labels are what the extender judges:
/// the tier (gold 100, silver 50, others 0) and a disk kind.
const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: gold-hdd
  labels: {example.com/tier: gold, disk: hdd}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: silver-ssd
  labels: {example.com/tier: silver, disk: ssd}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: plain-ssd
  labels: {disk: ssd}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: bronze-nvme
  labels: {example.com/tier: bronze, disk: nvme}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
"#;

/// The scheduler configuration: the default profile plus the extender at
/// filter and score. Its weight (50) makes a tier step (50 points) outweigh
/// every default Score plugin together (weights summing to 12, 100 each).
fn config(addr: &str, ignorable: bool) -> String {
    format!(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: {EXTENDER}}}]}}
    score: {{enabled: [{{name: {EXTENDER}, weight: 50}}]}}
berthExtenders:
- name: {EXTENDER}
  endpoint: http://{addr}
  points: [filter, score]
  timeout: 5s
  ignorable: {ignorable}
"#
    )
}

/// Starts a Python extender and a berthd using it, and waits for berthd's
/// "extender connected".
async fn start(tag: &str, ignorable: bool) -> Result<(PyExtender, Berthd, TempDir)> {
    let ext = PyExtender::start("127.0.0.1:0").await?;
    let dir = TempDir::new(tag)?;
    let cluster = dir.write("cluster.yaml", NODES)?;
    let cfg = dir.write("config.yaml", &config(&ext.addr, ignorable))?;
    let mut berthd =
        Berthd::start(&["--cluster", &cluster, "--config", &cfg, "--seed", "1"]).await?;
    let connected = wait_connected(&mut berthd).await?;
    assert_eq!(connected["fields"]["remote_name"], EXTENDER);
    assert_eq!(connected["fields"]["wants_nodes"], true);
    // Written before the pod feed: it does not ask for pods.
    assert_eq!(connected["fields"]["wants_pods"], false);
    assert_eq!(
        connected["fields"]["endpoint"],
        format!("http://{}", ext.addr).as_str()
    );
    Ok((ext, berthd, dir))
}

fn field<'a>(line: &'a Value, name: &str) -> &'a str {
    line["fields"][name].as_str().unwrap_or("")
}

async fn wait_connected(berthd: &mut Berthd) -> Result<Value> {
    berthd
        .wait_for(|l| message(l) == "extender connected" && field(l, "extender") == EXTENDER)
        .await
}

/// Waits until berthd has noticed the extender is gone.
/// berthd's one line for the outage that begins (the attempts after it
/// are DEBUG, summarized while it lasts).
async fn wait_disconnected(berthd: &mut Berthd) -> Result<Value> {
    let down = format!("extender {EXTENDER:?} is down: ");
    berthd
        .wait_for(|l| message(l).starts_with(&down) && l["level"] == "WARN")
        .await
}

/// A pod, optionally asking for a node label through the annotation.
fn pod(name: &str, required_label: Option<&str>) -> Value {
    let mut metadata = json!({"name": name, "namespace": "default"});
    if let Some(l) = required_label {
        metadata["annotations"] = json!({"example.com/required-node-label": l});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    })
}

/// The scheduling events seen, and readers over them.
struct Events {
    stream: tonic::Streaming<SchedulingEvent>,
    seen: Vec<SchedulingEvent>,
}

impl Events {
    async fn open(berthd: &Berthd) -> Result<Self> {
        let stream = berthd.client().await?.watch_events("default").await?;
        Ok(Self {
            stream,
            seen: Vec::new(),
        })
    }

    /// Reads events until one about pod `name` of a type in `types`.
    async fn next(&mut self, name: &str, types: &[EventType]) -> Result<SchedulingEvent> {
        let read = async {
            while let Some(e) = self.stream.message().await? {
                self.seen.push(e.clone());
                if e.pod.as_ref().is_some_and(|p| p.name == name) && types.contains(&e.r#type()) {
                    return Ok(e);
                }
            }
            bail!("the event stream ended before an event about {name}")
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("no {types:?} event about {name} within {GUARD:?}"))?
    }

    /// The first decision (bound, or failed) about each pod of `names`.
    async fn decisions(&mut self, names: &[&str]) -> Result<BTreeMap<String, SchedulingEvent>> {
        let mut out = BTreeMap::new();
        let read = async {
            while out.len() < names.len() {
                let Some(e) = self.stream.message().await? else {
                    bail!(
                        "the event stream ended with decisions for only {:?}",
                        out.keys()
                    );
                };
                self.seen.push(e.clone());
                let Some(name) = e.pod.as_ref().map(|p| p.name.clone()) else {
                    continue;
                };
                let decided = matches!(e.r#type(), EventType::Scheduled | EventType::Failed);
                if decided && names.contains(&name.as_str()) && !out.contains_key(&name) {
                    out.insert(name, e);
                }
            }
            Ok(())
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("no decision for every pod of {names:?} within {GUARD:?}"))??;
        Ok(out)
    }

    /// How many times pod `name` was bound, over the events seen.
    fn times_bound(&self, name: &str) -> usize {
        self.seen
            .iter()
            .filter(|e| e.r#type() == EventType::Scheduled)
            .filter(|e| e.pod.as_ref().is_some_and(|p| p.name == name))
            .count()
    }
}

/// Each pod's node (None: unbound), from the cluster.
async fn placements(berthd: &Berthd) -> Result<BTreeMap<String, Option<String>>> {
    let pods = berthd.client().await?.list("Pod", "default").await?;
    Ok(pods
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                p["spec"]["nodeName"].as_str().map(str::to_string),
            )
        })
        .collect())
}

/// A pod's PodScheduled condition.
fn scheduled_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
}

/// Reads a Pod watch until pod `name` is in a state that satisfies `pred`;
/// that state. Each change to the pod the watch reports is read back with
/// Get (the watch is the signal; Get gives the JSON).
async fn pod_update(
    client: &mut berth_client::Client,
    watch: &mut tonic::Streaming<berth_client::WatchEvent>,
    name: &str,
    pred: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let read = async {
        loop {
            let pod = client.get("Pod", "default", name).await?;
            if pred(&pod) {
                return Ok(pod);
            }
            // Wait for the next change to any pod before looking again.
            if watch.message().await?.is_none() {
                bail!("the Pod watch ended before the expected update of {name}: {pod}");
            }
        }
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("no expected update of pod {name} within {GUARD:?}"))?
}

/// The names of the pods in berthd's scheduling queue.
async fn queued(berthd: &Berthd) -> Result<Vec<String>> {
    let pods = berthd.client().await?.get_queue("default").await?;
    Ok(pods.into_iter().map(|p| p.name).collect())
}

// ---------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn python_filter_and_score_decide_where_pods_go() -> Result<()> {
    let (mut ext, berthd, _dir) = start("decide", false).await?;
    ext.wait_for(|l| l.contains("session opened scheduler=berthd/"))
        .await?;
    ext.wait_for(|l| l.contains("nodes synced nodes=4 cached=4"))
        .await?;
    let mut events = Events::open(&berthd).await?;
    let mut client = berthd.client().await?;
    let mut pod_watch = client.watch("Pod", "default").await?;

    let pods = [
        pod("anywhere", None),
        pod("needs-ssd", Some("disk=ssd")),
        pod("needs-nvme", Some("disk=nvme")),
        pod("needs-tier", Some("example.com/tier")),
        pod("needs-gpu", Some("gpu=true")),
    ];
    client.apply(&pods, "").await?;
    let names = [
        "anywhere",
        "needs-ssd",
        "needs-nvme",
        "needs-tier",
        "needs-gpu",
    ];
    let decided = events.decisions(&names).await?;
    let node_of = |name: &str| -> (EventType, String) {
        let e = &decided[name];
        (e.r#type(), e.node.clone())
    };
    // Score: gold (100) beats silver (50) beats the rest (0).
    assert_eq!(
        node_of("anywhere"),
        (EventType::Scheduled, "gold-hdd".into())
    );
    assert_eq!(
        node_of("needs-tier"),
        (EventType::Scheduled, "gold-hdd".into())
    );
    // Filter leaves the ssd nodes; score prefers the silver one.
    assert_eq!(
        node_of("needs-ssd"),
        (EventType::Scheduled, "silver-ssd".into())
    );
    // Filter leaves one node.
    assert_eq!(
        node_of("needs-nvme"),
        (EventType::Scheduled, "bronze-nvme".into())
    );

    // No node has gpu=true: pending, with the Python extender's reason.
    let failed = &decided["needs-gpu"];
    assert_eq!(failed.r#type(), EventType::Failed);
    assert_eq!(failed.reason, "Unschedulable");
    assert!(
        failed
            .message
            .starts_with("0/4 nodes are available: 4 node(s) didn't have label gpu=true."),
        "{}",
        failed.message
    );
    ext.wait_for(|l| l.contains("filter pod=default/needs-gpu nodes=4 rejected=4"))
        .await?;
    // An extender that did not ask for pods gets none (the pods assumed
    // and bound so far would have come on the stream before this cycle).
    assert!(
        !ext.seen.iter().any(|l| l.contains("pod placed")),
        "{:#?}",
        ext.seen
    );
    ext.wait_for(|l| {
        l.contains("score pod=default/needs-ssd scores=")
            && l.contains("silver-ssd:50")
            && l.contains("plain-ssd:0")
    })
    .await?;
    // The condition is written after the event: wait for the pod's update.
    let gpu = pod_update(&mut client, &mut pod_watch, "needs-gpu", |p| {
        scheduled_condition(p).is_some_and(|c| c["status"] == "False")
    })
    .await?;
    assert!(gpu["spec"]["nodeName"].is_null(), "{gpu}");
    let condition = scheduled_condition(&gpu).context("a PodScheduled condition")?;
    assert_eq!(condition["reason"], "Unschedulable");
    let text = condition["message"].as_str().unwrap_or("");
    assert!(
        text.contains("4 node(s) didn't have label gpu=true"),
        "{text}"
    );
    assert_eq!(queued(&berthd).await?, ["needs-gpu"]);

    // Node changes reach the extender's cache: plain-ssd turns gold, and a
    // node with gpu=true arrives, which the pending pod then goes to.
    let changed = format!(
        "{}\n---\n{}",
        r#"
apiVersion: v1
kind: Node
metadata:
  name: plain-ssd
  labels: {example.com/tier: gold, disk: ssd}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
"#,
        r#"
apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  labels: {gpu: "true"}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
"#
    );
    client.apply(&[], &changed).await?;
    let gpu = events.next("needs-gpu", &[EventType::Scheduled]).await?;
    assert_eq!(gpu.node, "gpu-1");
    client
        .apply(&[pod("needs-ssd-2", Some("disk=ssd"))], "")
        .await?;
    let ssd = events
        .next("needs-ssd-2", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(
        (ssd.r#type(), ssd.node.as_str()),
        (EventType::Scheduled, "plain-ssd")
    );

    let placed = placements(&berthd).await?;
    assert_eq!(placed.len(), 6);
    for (name, node) in &placed {
        assert!(node.is_some(), "{name} is not bound");
        assert_eq!(events.times_bound(name), 1, "{name}");
    }
    ensure!(queued(&berthd).await?.is_empty());
    berthd.stop().await?;
    Ok(())
}

/// Issue 13, item 1: the extender is listening when berthd starts, and the
/// pods are there from the start (in the cluster file): berthd schedules
/// only once the extender has said Hello and has the nodes, so even the
/// first cycles ask it. Each pod is bound at its first attempt, on the node
/// the extender's Filter and Score pick (before, the first attempts failed
/// with "not connected").
#[tokio::test]
async fn an_extender_listening_when_berthd_starts_decides_the_first_cycles() -> Result<()> {
    let ext = PyExtender::start("127.0.0.1:0").await?;
    let dir = TempDir::new("first-cycles")?;
    let pods: Vec<String> = (0..3)
        .map(|i| {
            serde_yaml::to_string(&pod(&format!("early-{i}"), Some("disk=ssd")))
                .map(|y| format!("---\n{y}"))
        })
        .collect::<Result<_, _>>()?;
    let cluster = dir.write("cluster.yaml", &format!("{NODES}{}", pods.concat()))?;
    let cfg = dir.write("config.yaml", &config(&ext.addr, false))?;
    let mut berthd =
        Berthd::start(&["--cluster", &cluster, "--config", &cfg, "--seed", "1"]).await?;
    for i in 0..3 {
        let name = format!("default/early-{i}");
        let line = berthd
            .wait_for(|l| message(l) == "scheduled" && field(l, "pod") == name)
            .await?;
        assert_eq!(field(&line, "node"), "silver-ssd", "{line}");
        assert_eq!(line["fields"]["attempts"], 1, "{line}");
    }
    assert!(
        !berthd.seen.iter().any(|l| message(l) == "extender failed"),
        "no cycle ran without the extender"
    );
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_dead_extender_fails_pods_until_it_returns_when_not_ignorable() -> Result<()> {
    let (ext, mut berthd, _dir) = start("kill", false).await?;
    let mut events = Events::open(&berthd).await?;
    let mut client = berthd.client().await?;
    client.apply(&[pod("before", Some("disk=ssd"))], "").await?;
    let before = events
        .next("before", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(
        (before.r#type(), before.node.as_str()),
        (EventType::Scheduled, "silver-ssd")
    );

    let addr = ext.addr.clone();
    let status = ext.kill().await?;
    assert!(!status.success(), "{status}");
    let down = wait_disconnected(&mut berthd).await?;
    assert!(
        message(&down).contains(
            "pods that need it fail their attempt and are retried as soon as it is back (its Hello)"
        ),
        "{down}"
    );

    client.apply(&[pod("during", Some("disk=ssd"))], "").await?;
    let failed = events
        .next("during", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(failed.r#type(), EventType::Failed, "{failed:?}");
    assert_eq!(failed.reason, "SchedulerError");
    assert!(
        failed
            .message
            .contains("extender \"label-tier\" failed at Filter: not connected"),
        "{}",
        failed.message
    );
    // Not lost: unbound and in the queue, waiting for a retry.
    let during = client.get("Pod", "default", "during").await?;
    assert!(during["spec"]["nodeName"].is_null(), "{during}");
    assert_eq!(queued(&berthd).await?, ["during"]);

    // The extender comes back on the same address: berthd redials, and the
    // queued pod is placed by its Filter and Score, once.
    let mut ext = PyExtender::start(&addr).await?;
    assert_eq!(ext.addr, addr);
    wait_connected(&mut berthd).await?;
    let placed = events.next("during", &[EventType::Scheduled]).await?;
    assert_eq!(placed.node, "silver-ssd");
    ext.wait_for(|l| l.contains("filter pod=default/during nodes=4 rejected=2"))
        .await?;

    assert_eq!(
        placements(&berthd).await?,
        BTreeMap::from([
            ("before".to_string(), Some("silver-ssd".to_string())),
            ("during".to_string(), Some("silver-ssd".to_string())),
        ])
    );
    assert_eq!(events.times_bound("before"), 1);
    assert_eq!(events.times_bound("during"), 1);
    ensure!(queued(&berthd).await?.is_empty());
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_dead_ignorable_extender_is_skipped() -> Result<()> {
    let (ext, mut berthd, _dir) = start("ignorable", true).await?;
    let mut events = Events::open(&berthd).await?;
    let mut client = berthd.client().await?;
    // While it runs, the extender decides.
    client.apply(&[pod("before", Some("disk=ssd"))], "").await?;
    let before = events
        .next("before", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(
        (before.r#type(), before.node.as_str()),
        (EventType::Scheduled, "silver-ssd")
    );

    ext.kill().await?;
    let down = wait_disconnected(&mut berthd).await?;
    assert!(
        message(&down).contains("pods are scheduled without it (ignorable)"),
        "{down}"
    );

    // No node has gpu=true: with the extender up this pod would stay
    // pending; with it gone and ignorable, its Filter and Score are skipped.
    client
        .apply(&[pod("needs-gpu", Some("gpu=true"))], "")
        .await?;
    let placed = events
        .next("needs-gpu", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(placed.r#type(), EventType::Scheduled, "{placed:?}");
    assert!(
        ["gold-hdd", "silver-ssd", "plain-ssd", "bronze-nvme"].contains(&placed.node.as_str()),
        "{}",
        placed.node
    );
    // The skips are DEBUG while it is down (its summaries count them).
    berthd
        .wait_for(|l| {
            message(l).starts_with("scheduler idle")
                && l["fields"]["bound_pods"] == 2
                && l["fields"]["pending"] == 0
        })
        .await?;
    let placed_pods = placements(&berthd).await?;
    assert_eq!(placed_pods.len(), 2);
    assert_eq!(placed_pods["before"].as_deref(), Some("silver-ssd"));
    assert_eq!(
        placed_pods["needs-gpu"].as_deref(),
        Some(placed.node.as_str())
    );
    assert_eq!(events.times_bound("before"), 1);
    assert_eq!(events.times_bound("needs-gpu"), 1);
    berthd.stop().await?;
    Ok(())
}

/// A command's exit code and output.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(program: PathBuf, args: &[&str]) -> Result<Run> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(&program)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("{} {args:?} hung", program.display()))??;
    Ok(Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// grpcurl's DryRun (grpcurl's default message limit, proto3 JSON) of `pod`.
async fn grpcurl_dry_run(addr: &str, pod: &Value) -> Result<Value> {
    let body = json!({ "pod": pod, "allNodes": true }).to_string();
    let r = run(
        berth_e2e::grpcurl_path()?,
        &["-plaintext", "-d", &body, addr, "berth.v1.Scheduler/DryRun"],
    )
    .await?;
    ensure!(r.code == Some(0), "grpcurl: {}", r.stderr);
    Ok(serde_json::from_str(&r.stdout)?)
}

/// Each node's verdict in a grpcurl DryRun answer.
fn node_verdicts(answer: &Value) -> BTreeMap<String, String> {
    answer["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["node"].as_str().unwrap_or("").to_string(),
                n["verdict"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Issue 28, item 1: with the non-ignorable extender down, a dry run must
/// not say the pod fits. Before, grpcurl got every node
/// NODE_VERDICT_FEASIBLE (gold-hdd too, which the extender rejects) and
/// berthctl listed every node "ok" and exited 0. Now every node the
/// extender could not judge is NODE_VERDICT_UNKNOWN with the reason, the
/// answer is COMPLETENESS_INCOMPLETE naming the extender, and berthctl
/// exits 3 (dry-run and simulate alike).
#[tokio::test]
async fn a_dry_run_while_the_extender_is_down_is_incomplete_not_a_fit() -> Result<()> {
    let (ext, mut berthd, dir) = start("dry-run-down", false).await?;
    let addr = berthd.addr.clone();
    let ssd = pod("web", Some("disk=ssd"));
    let file = dir.write("web.yaml", &serde_yaml::to_string(&ssd)?)?;
    let ctl = berth_e2e::berthctl_path()?;

    // With the extender up: complete; it rejects the nodes without an SSD.
    let up = grpcurl_dry_run(&addr, &ssd).await?;
    assert_eq!(up["completeness"], "COMPLETENESS_COMPLETE", "{up}");
    assert_eq!(up["selectedNode"], "silver-ssd", "{up}");
    assert_eq!(
        node_verdicts(&up)["gold-hdd"],
        "NODE_VERDICT_UNRESOLVABLE",
        "{up}"
    );
    let ok = run(ctl.clone(), &["-s", &addr, "dry-run", "-f", &file]).await?;
    assert_eq!(ok.code, Some(0), "{}{}", ok.stdout, ok.stderr);

    ext.kill().await?;
    wait_disconnected(&mut berthd).await?;

    let down = grpcurl_dry_run(&addr, &ssd).await?;
    assert_eq!(down["completeness"], "COMPLETENESS_INCOMPLETE", "{down}");
    assert!(down["selectedNode"].is_null(), "{down}");
    let verdicts = node_verdicts(&down);
    assert_eq!(verdicts.len(), 4, "{down}");
    assert!(
        verdicts.values().all(|v| v == "NODE_VERDICT_UNKNOWN"),
        "no node judged without the extender: {verdicts:?}"
    );
    for n in down["nodes"].as_array().context("nodes")? {
        let reason = n["reason"].as_str().unwrap_or("");
        assert!(
            reason.contains("extender \"label-tier\" failed at Filter: not connected"),
            "{n}"
        );
        let tier = n["filters"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["plugin"] == EXTENDER))
            .context("the extender's filter result")?;
        assert_eq!(tier["code"], "Unknown", "{n}");
    }
    let incomplete = &down["incomplete"][0];
    assert_eq!(incomplete["plugin"], EXTENDER, "{down}");
    assert_eq!(incomplete["point"], "Filter", "{down}");
    assert_eq!(incomplete["nodes"], 4, "{down}");

    let dry = run(ctl.clone(), &["-s", &addr, "dry-run", "-f", &file]).await?;
    assert_eq!(dry.code, Some(3), "{}{}", dry.stdout, dry.stderr);
    assert!(dry.stdout.contains("INCOMPLETE"), "{}", dry.stdout);
    assert!(
        !dry.stdout.lines().any(|l| l.trim_end().ends_with(" ok")),
        "no node listed ok:\n{}",
        dry.stdout
    );
    let gold = dry
        .stdout
        .lines()
        .find(|l| l.contains("gold-hdd"))
        .context("gold-hdd's row")?;
    assert!(gold.contains("unknown: "), "{gold}");
    assert!(
        dry.stderr
            .contains(&format!("{file}: the answer is incomplete")),
        "{}",
        dry.stderr
    );

    let sim = run(
        ctl.clone(),
        &["-s", &addr, "simulate", "-f", &file, "--replicas", "3"],
    )
    .await?;
    assert_eq!(sim.code, Some(3), "{}{}", sim.stdout, sim.stderr);
    assert!(
        sim.stdout
            .contains("0 scheduled, 0 unschedulable, 3 unknown"),
        "{}",
        sim.stdout
    );
    assert_eq!(sim.stdout.matches("<unknown>").count(), 3, "{}", sim.stdout);

    // `berthctl why` (issue 27's, over the same dry run) does not call the
    // pod a fit either: exit 1, saying it cannot tell.
    berthd.client().await?.apply(&[ssd], "").await?;
    let why = run(ctl, &["-s", &addr, "why", "web"]).await?;
    assert_eq!(why.code, Some(1), "{}{}", why.stdout, why.stderr);
    assert!(
        why.stdout
            .contains("Now: cannot tell: the answer is incomplete (label-tier at Filter:"),
        "{}",
        why.stdout
    );
    berthd.stop().await?;
    Ok(())
}

/// Issue 28, item 1: an ignorable extender that is down is skipped, as the
/// scheduler skips it, and the answer says so (complete: berthctl exits 0).
#[tokio::test]
async fn a_dry_run_names_an_ignorable_extender_it_skipped() -> Result<()> {
    let (ext, mut berthd, dir) = start("dry-run-ignorable", true).await?;
    let addr = berthd.addr.clone();
    ext.kill().await?;
    wait_disconnected(&mut berthd).await?;
    let gpu = pod("gpu", Some("gpu=true"));
    let answer = grpcurl_dry_run(&addr, &gpu).await?;
    assert_eq!(answer["completeness"], "COMPLETENESS_COMPLETE", "{answer}");
    assert!(
        node_verdicts(&answer)
            .values()
            .all(|v| v == "NODE_VERDICT_FEASIBLE"),
        "{answer}"
    );
    let skipped: Vec<(&str, &str)> = answer["skipped"]
        .as_array()
        .context("skipped")?
        .iter()
        .map(|n| {
            (
                n["plugin"].as_str().unwrap_or(""),
                n["point"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(skipped, [(EXTENDER, "Filter"), (EXTENDER, "Score")]);
    let file = dir.write("gpu.yaml", &serde_yaml::to_string(&gpu)?)?;
    let ctl = berth_e2e::berthctl_path()?;
    let dry = run(ctl, &["-s", &addr, "dry-run", "-f", &file]).await?;
    assert_eq!(dry.code, Some(0), "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout.contains(
            "Skipped (ignorable, as the scheduler skips them):\n  label-tier at Filter: "
        ),
        "{}",
        dry.stdout
    );
    berthd.stop().await?;
    Ok(())
}

/// Issue 28, item 6: the Python extender started with `--wants-pods` asks
/// for the pod feed at Hello and gets the pods on the nodes from berthd: a
/// pod bound in the cluster file before NodesSynced, a new pod assumed then
/// bound (the same id), and its removal, each once, with its node.
#[tokio::test]
async fn the_python_extender_that_wants_pods_follows_them_on_their_nodes() -> Result<()> {
    let mut ext = PyExtender::start_with("127.0.0.1:0", &["--wants-pods"]).await?;
    let dir = TempDir::new("pod-feed")?;
    let bound = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: resident, namespace: default, uid: uid-resident}
spec:
  nodeName: plain-ssd
  containers: [{name: c, image: busybox}]
"#;
    let cluster = dir.write("cluster.yaml", &format!("{NODES}{bound}"))?;
    let cfg = dir.write("config.yaml", &config(&ext.addr, false))?;
    let mut berthd =
        Berthd::start(&["--cluster", &cluster, "--config", &cfg, "--seed", "1"]).await?;
    let connected = wait_connected(&mut berthd).await?;
    assert_eq!(connected["fields"]["wants_pods"], true);
    // The table first: the resident pod, before NodesSynced.
    let synced = ext.wait_for(|l| l.contains("nodes synced")).await?;
    assert!(
        synced.contains("nodes synced nodes=4 cached=4 pods=1"),
        "{synced}"
    );
    let resident = ext
        .wait_for(|l| l.contains("pod placed") && l.contains("pod=default/resident"))
        .await?;
    assert!(
        resident.contains("id=1 pod=default/resident node=plain-ssd node_id="),
        "{resident}"
    );
    assert!(
        resident.ends_with(" assumed=false pods_on_node=1"),
        "{resident}"
    );
    // Named by the id berthd gave its node (ids start at 1).
    assert_ne!(word(&resident, "node_id="), "0", "{resident}");
    let at = |line: &str| ext.seen.iter().position(|l| l == line);
    assert!(at(&resident) < at(&synced), "{:#?}", ext.seen);

    // A new pod: assumed on the node the extender's Score picks, then bound.
    let mut events = Events::open(&berthd).await?;
    let mut client = berthd.client().await?;
    client.apply(&[pod("newcomer", None)], "").await?;
    let e = events
        .next("newcomer", &[EventType::Scheduled, EventType::Failed])
        .await?;
    assert_eq!(
        (e.r#type(), e.node.as_str()),
        (EventType::Scheduled, "gold-hdd")
    );
    let assumed = ext
        .wait_for(|l| l.contains("pod=default/newcomer") && l.contains("assumed=true"))
        .await?;
    let bound = ext
        .wait_for(|l| l.contains("pod=default/newcomer") && l.contains("assumed=false"))
        .await?;
    for l in [&assumed, &bound] {
        assert_eq!(word(l, "id="), "2", "{l}");
        assert_eq!(word(l, "node="), "gold-hdd", "{l}");
    }
    let gold = word(&bound, "node_id=");
    assert_eq!(word(&assumed, "node_id="), gold);
    assert_ne!(gold, "0");
    assert_ne!(gold, word(&resident, "node_id="));

    // Deleted: removed once, from its node.
    client.delete("Pod", "default", "newcomer").await?;
    let removed = ext.wait_for(|l| l.contains("pod removed")).await?;
    assert!(
        removed.contains("pod removed id=2 pod=default/newcomer node=gold-hdd node_id="),
        "{removed}"
    );
    assert_eq!(word(&removed, "node_id="), gold);
    // Each change once: two upserts (assumed, bound) and one removal.
    let newcomer: Vec<&String> = ext
        .seen
        .iter()
        .filter(|l| {
            l.contains("pod=default/newcomer")
                && (l.contains("pod placed") || l.contains("pod removed"))
        })
        .collect();
    assert_eq!(newcomer.len(), 3, "{newcomer:#?}");
    berthd.stop().await?;
    Ok(())
}

/// The value of `key` (such as "node_id=") in a `key=value` log line.
fn word<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or("")
}
