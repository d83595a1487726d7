//! Scenario files, one per plugin family, run through the real berthd.
//!
//! Each file under `tests/scenarios/` is Kubernetes YAML: the cluster's
//! objects, and optionally a `KubeSchedulerConfiguration` document. Pods say
//! what must happen to them with annotations:
//!
//! * `berth.dev/expect-node: n1` — bound to that node;
//! * `berth.dev/expect-node-in: "n1,n2"` — bound to one of them;
//! * `berth.dev/expect-pending: "<phrase>"` — still pending, its
//!   PodScheduled condition's message containing the phrase;
//! * `berth.dev/expect-gone: "true"` — deleted (e.g. a preemption victim);
//! * `berth.dev/expect-gated: "<phrase>"` — held by a PreEnqueue plugin
//!   (the queue's `Gated`), its last failure containing the phrase.
//!
//! Any object may carry `berth.dev/stage: "N"` (N ≥ 1): it is left out of
//! the cluster berthd starts with and applied through the Cluster API at
//! the N-th idle point (a claim created after the pod that needs it).
//!
//! A remote extender in the configuration's `berthExtenders` whose
//! `endpoint` reads `extender:NAME ARGS...` is one of the example
//! extenders, started with those arguments for the scenario (e.g. a PreBind
//! that fails on purpose).
//!
//! The runner waits for berthd's idle summary and checks; if a scenario is
//! still moving (pods ready, backing off or in flight) or has stages left,
//! it waits for the next idle point, else it reports what is unmet.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use berth_client::pb::QueueName;
use berth_e2e::{Berthd, Extender, workspace_root};
use serde_json::Value;

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn key(p: &Value) -> String {
    format!(
        "{}/{}",
        p["metadata"]["namespace"].as_str().unwrap_or("default"),
        p["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// The stage an object belongs to (0: the initial cluster).
fn stage(obj: &Value) -> u32 {
    annotation(obj, "berth.dev/stage")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Checks every expectation; returns the unmet ones.
fn unmet(expected: &[Value], pods: &[Value], queue: &[berth_client::pb::QueuedPod]) -> Vec<String> {
    let live: BTreeMap<String, &Value> = pods.iter().map(|p| (key(p), p)).collect();
    let mut problems = Vec::new();
    for want in expected.iter().filter(|o| o["kind"] == "Pod") {
        let k = key(want);
        let got = live.get(&k);
        let node = got.and_then(|p| p["spec"]["nodeName"].as_str());
        if let Some(n) = annotation(want, "berth.dev/expect-node")
            && node != Some(n)
        {
            problems.push(format!("{k}: expected on {n}, is on {node:?}"));
        }
        if let Some(set) = annotation(want, "berth.dev/expect-node-in")
            && !node.is_some_and(|n| set.split(',').any(|s| s.trim() == n))
        {
            problems.push(format!("{k}: expected on one of {set}, is on {node:?}"));
        }
        if let Some(phrase) = annotation(want, "berth.dev/expect-pending") {
            let message = got
                .and_then(|p| p["status"]["conditions"].as_array())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                })
                .and_then(|c| c["message"].as_str());
            match (node, message) {
                (None, Some(m)) if m.contains(phrase) => {}
                _ => problems.push(format!(
                    "{k}: expected pending with {phrase:?}, is on {node:?} with {message:?}"
                )),
            }
        }
        if annotation(want, "berth.dev/expect-gone").is_some() && got.is_some() {
            problems.push(format!("{k}: expected deleted, still there"));
        }
        if let Some(phrase) = annotation(want, "berth.dev/expect-gated") {
            let entry = queue
                .iter()
                .find(|q| format!("{}/{}", q.namespace, q.name) == k);
            match entry {
                Some(q) if q.queue() == QueueName::Gated && q.last_failure.contains(phrase) => {}
                other => problems.push(format!(
                    "{k}: expected gated with {phrase:?}, queued as {:?}",
                    other.map(|q| (q.queue(), q.last_failure.clone()))
                )),
            }
        }
    }
    problems
}

async fn run(file: &str) -> Result<()> {
    run_with(file, &[]).await
}

/// Runs a scenario with berthd's `extra` flags too.
async fn run_with(file: &str, extra: &[&str]) -> Result<()> {
    let path = workspace_root().join("tests/scenarios").join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(serde::Deserialize::deserialize)
        .collect::<Result<Vec<Value>, _>>()?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let (configs, objects): (Vec<Value>, Vec<Value>) = docs
        .into_iter()
        .partition(|d| d["kind"] == "KubeSchedulerConfiguration");
    let initial: Vec<&Value> = objects.iter().filter(|o| stage(o) == 0).collect();
    let last_stage = objects.iter().map(stage).max().unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "berth-scenario-{}-{}-{}",
        std::process::id(),
        file.replace('/', "_"),
        extra.len()
    ));
    std::fs::create_dir_all(&dir)?;
    let cluster = dir.join("cluster.json");
    std::fs::write(
        &cluster,
        serde_json::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": initial}),
        )?,
    )?;
    let mut args: Vec<String> = vec![
        "--seed".into(),
        "1".into(),
        "--cluster".into(),
        cluster.display().to_string(),
    ];
    let mut extenders = Vec::new();
    if let Some(cfg) = configs.first() {
        let mut cfg = cfg.clone();
        for e in cfg
            .get_mut("berthExtenders")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(spec) = e["endpoint"]
                .as_str()
                .and_then(|s| s.strip_prefix("extender:"))
            else {
                continue;
            };
            let mut words = spec.split_whitespace();
            let name = words.next().context("extender: needs a name")?.to_string();
            let args: Vec<&str> = words.collect();
            let ext = Extender::start(&name, &args).await?;
            e["endpoint"] = Value::String(ext.endpoint());
            extenders.push(ext);
        }
        let p = dir.join("config.yaml");
        std::fs::write(&p, serde_yaml::to_string(&cfg)?)?;
        args.extend(["--config".into(), p.display().to_string()]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut berthd = Berthd::start(&argv).await?;
    let mut client = berthd.client().await?;
    // Check at each idle point until everything holds; a scenario that
    // settles with expectations unmet fails with them (when no further idle
    // point comes, berthd's log guard ends the wait).
    let mut last = vec!["berthd never went idle".to_string()];
    let mut applied = 0;
    for _ in 0..20 {
        if let Err(e) = berthd.wait_idle().await {
            last.push(format!("({e})"));
            break;
        }
        if applied < last_stage {
            applied += 1;
            let docs: Vec<Value> = objects
                .iter()
                .filter(|o| stage(o) == applied)
                .cloned()
                .collect();
            client
                .apply(&docs, "")
                .await
                .with_context(|| format!("applying stage {applied}"))?;
            continue;
        }
        // The queue first, the pods after: the scheduler may move between
        // the two reads, and a queue that was settled before the listing
        // makes the listing final. (The other order raced: a preemptor was
        // bound between an unbound listing and a queue without it, and the
        // runner took the scenario for settled with the preemptor unbound.)
        //
        // Settled means nothing ready, backing off or in flight, and no
        // preemptor waiting for its victims' deletions (which move it when
        // they arrive): no further idle point would come without a new
        // event.
        let queue = client.get_queue("").await?;
        let moving = queue.iter().any(|p| {
            matches!(
                p.queue(),
                QueueName::Active | QueueName::Backoff | QueueName::InFlight
            ) || !p.nominated_node_name.is_empty()
        });
        let pods = client.list("Pod", "").await?;
        last = unmet(&objects, &pods, &queue);
        if last.is_empty() {
            break;
        }
        if !moving {
            break;
        }
    }
    if !last.is_empty() {
        // The test harness shows a failing test's stdout: the queue and
        // berthd's whole log say what the scheduler did and in which order.
        for p in client.get_queue("").await? {
            println!("queue: {p:?}");
        }
        berthd.signal("TERM")?;
        let seen = berthd.seen.clone();
        let (_, rest) = berthd.wait_exit().await?;
        for line in seen.iter().chain(&rest) {
            println!("{line}");
        }
    } else {
        berthd.stop().await?;
    }
    drop(extenders);
    std::fs::remove_dir_all(&dir).ok();
    if !last.is_empty() {
        bail!("{}: {}", Path::new(file).display(), last.join("; "));
    }
    Ok(())
}

macro_rules! scenarios {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() -> Result<()> {
                run($file).await
            }
        )*
    };
}

scenarios! {
    node_resources => "node_resources.yaml",
    node_name_and_unschedulable => "node_name_and_unschedulable.yaml",
    scheduling_gates => "scheduling_gates.yaml",
    preemption => "preemption.yaml",
    coscheduling => "coscheduling.yaml",
    taint_toleration => "taint_toleration.yaml",
    node_affinity => "node_affinity.yaml",
    node_ports => "node_ports.yaml",
    image_locality => "image_locality.yaml",
    inter_pod_affinity => "inter_pod_affinity.yaml",
    pod_topology_spread => "pod_topology_spread.yaml",
    volumes => "volumes.yaml",
    dynamic_resources => "dynamic_resources.yaml",
    dynamic_resources_unreserve => "dynamic_resources_unreserve.yaml",
    dynamic_resources_extended => "dynamic_resources_extended.yaml",
}

/// The scenarios' expectations are kube-scheduler v1.36.2's placements
/// (none exercises what v1.37 changed): with the gates set back to v1.36's
/// defaults they hold as they do under v1.37's.
#[tokio::test]
async fn every_scenario_holds_with_v1_36_s_gates() -> Result<()> {
    let flag = format!(
        "--feature-gates={}",
        berth_server::features::previous_release_flag()
    );
    for file in [
        "node_resources.yaml",
        "node_name_and_unschedulable.yaml",
        "scheduling_gates.yaml",
        "preemption.yaml",
        "coscheduling.yaml",
        "taint_toleration.yaml",
        "node_affinity.yaml",
        "node_ports.yaml",
        "image_locality.yaml",
        "inter_pod_affinity.yaml",
        "pod_topology_spread.yaml",
        "volumes.yaml",
        "dynamic_resources.yaml",
        "dynamic_resources_unreserve.yaml",
        "dynamic_resources_extended.yaml",
    ] {
        run_with(file, &[flag.as_str()]).await?;
    }
    Ok(())
}
