//! Preemption asks every Filter (issue 35), through the real berthd and real
//! extender processes:
//!
//! * the scene with a license checker written against the protocol
//!   (the Rust SDK's `license-slots` example, and the Python
//!   `license_slots.py`): `n1` is full, runs a pod of low priority and has
//!   no free license slot; `n2` has slots but runs only pods of higher
//!   priority than the preemptor. No victim is named, no node nominated,
//!   and the DryRun says why; nobody is evicted. With `n1`'s slot held by
//!   the pod of low priority instead, evicting it frees the slot: that
//!   victim is chosen, evicted, and the preemptor bound there;
//! * an extender built from an earlier protocol file (the Python
//!   `label_tier.py` generated from `tests/fixtures/proto-before-group-points`),
//!   which knows nothing of the what-if, is asked a plain Filter about the
//!   candidates as they are: the node its labels refuse loses its
//!   candidacy, and its pod is spared.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use berth_client::EventType;
use berth_e2e::python::PyExtender;
use berth_e2e::{Berthd, Extender, TempDir, message, workspace_root};
use serde_json::{Value, json};

/// A guard against a hung test; never what it waits for.
const GUARD: Duration = Duration::from_secs(120);

fn node(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn pod(name: &str, priority: i32, license: bool, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "image": "app",
                "resources": {"requests": {"cpu": "2"}}}],
        },
    });
    if license {
        p["metadata"]["annotations"] = json!({"example.com/license": ""});
    }
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

fn slots(n: u32) -> Value {
    json!({"example.com/license-slots": n.to_string()})
}

/// The scene: `holder_is_low` gives n1's one slot to the pod of low
/// priority (evicting it frees the slot); otherwise n1 offers no slot.
fn scene(holder_is_low: bool) -> Vec<Value> {
    vec![
        node("n1", slots(u32::from(holder_is_low))),
        node("n2", slots(2)),
        pod("low", 1, holder_is_low, Some("n1")),
        pod("high", 100, false, Some("n2")),
    ]
}

fn config(name: &str, endpoint: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: {name}}}]
berthExtenders:
- name: {name}
  endpoint: {endpoint}
  points: [filter]
  timeout: 10s
"
    )
}

/// berthd on `objects`, once the extender said Hello and the pods are
/// bound in its cache.
async fn start(dir: &TempDir, objects: &[Value], cfg: &str, extender: &str) -> Result<Berthd> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let cluster = dir.write("cluster.json", &serde_json::to_string(&list)?)?;
    let cfg = dir.write("config.yaml", cfg)?;
    let mut berthd =
        Berthd::start(&["--cluster", &cluster, "--config", &cfg, "--seed", "1"]).await?;
    berthd
        .wait_for(|l| {
            message(l) == "extender connected" && l["fields"]["extender"].as_str() == Some(extender)
        })
        .await?;
    Ok(berthd)
}

/// What a DryRun of the preemptor says about preemption: the nominated
/// node, the victims, the message.
async fn dry_run(berthd: &Berthd) -> Result<(String, Vec<String>, String)> {
    let mut client = berthd.client().await?;
    let r = client.dry_run(&pod("p", 10, true, None), "", false).await?;
    let p = r
        .preemption
        .context("a DryRun of a pod that fits nowhere says what preemption would do")?;
    ensure!(
        r.completeness == berth_client::pb::Completeness::Complete as i32,
        "{:?}",
        r.incomplete
    );
    Ok((
        p.nominated_node,
        p.victims.iter().map(|v| v.name.clone()).collect(),
        p.message,
    ))
}

/// Creates the preemptor and waits for its first decision (a failure: no
/// node fits before preemption) and, when it `preempts`, for its binding;
/// the failure's message and the pods left.
async fn schedule(berthd: &Berthd, preempts: bool) -> Result<(String, Vec<String>)> {
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client.apply(&[pod("p", 10, true, None)], "").await?;
    let mut failure = None;
    loop {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("no decision for the preemptor")??
            .context("the event stream ended")?;
        if e.pod.as_ref().map(|p| p.name.as_str()) != Some("p") {
            continue;
        }
        match e.r#type() {
            EventType::Failed if failure.is_none() => {
                failure = Some(e.message.clone());
                if !preempts {
                    break;
                }
            }
            EventType::Scheduled => break,
            _ => {}
        }
    }
    let pods = pod_names(&mut client).await?;
    Ok((failure.unwrap_or_default(), pods))
}

async fn pod_names(client: &mut berth_client::Client) -> Result<Vec<String>> {
    Ok(client
        .list("Pod", "default")
        .await?
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

/// The scene through berthd with an extender at `endpoint` named `name`.
async fn the_scene(name: &str, endpoint: &str, holder_is_low: bool, tag: &str) -> Result<()> {
    let dir = TempDir::new(tag)?;
    let berthd = start(&dir, &scene(holder_is_low), &config(name, endpoint), name).await?;
    let (nominated, victims, why) = dry_run(&berthd).await?;
    let mut client = berthd.client().await?;
    if holder_is_low {
        ensure!(
            nominated == "n1" && victims == ["low"],
            "{nominated} {victims:?} {why}"
        );
        ensure!(
            why == "preemption: found a potential placement for pod on node n1, preempting 1 victims",
            "{why}"
        );
        let (failure, pods) = schedule(&berthd, true).await?;
        ensure!(failure.ends_with("preempting 1 victims"), "{failure}");
        ensure!(
            !pods.contains(&"low".to_string()),
            "low is evicted: {pods:?}"
        );
        let p = client.get("Pod", "default", "p").await?;
        ensure!(p["spec"]["nodeName"] == "n1", "{p}");
    } else {
        ensure!(
            nominated.is_empty() && victims.is_empty(),
            "{nominated} {victims:?}"
        );
        ensure!(
            why == "no new claims to deallocate, preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 node(s) had no free license slot.",
            "{why}"
        );
        let (failure, pods) = schedule(&berthd, false).await?;
        ensure!(failure.ends_with(&why), "{failure}");
        ensure!(
            pods.contains(&"low".to_string()),
            "nobody evicted: {pods:?}"
        );
        let p = client.get("Pod", "default", "p").await?;
        ensure!(
            p["status"].get("nominatedNodeName").is_none(),
            "no node nominated: {p}"
        );
    }
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn the_rust_sdk_license_extender_keeps_preemption_off_a_node_it_still_rejects() -> Result<()>
{
    let ext = Extender::start("license-slots", &[]).await?;
    the_scene("license", &ext.endpoint(), false, "px-rust-no").await?;
    the_scene("license", &ext.endpoint(), true, "px-rust-yes").await?;
    // The SDK answered the what-if: one request per attempt.
    let asked = ext
        .lines()
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("request PreemptionFilter"))
        })
        .count();
    ensure!(asked >= 4, "PreemptionFilter asked {asked} times");
    ext.stop().await?;
    Ok(())
}

#[tokio::test]
async fn the_python_license_extender_keeps_preemption_off_a_node_it_still_rejects() -> Result<()> {
    for (holder_is_low, tag) in [(false, "px-py-no"), (true, "px-py-yes")] {
        let mut py = PyExtender::start_script("license_slots.py", "127.0.0.1:0", &[]).await?;
        the_scene(
            "license",
            &format!("http://{}", py.addr),
            holder_is_low,
            tag,
        )
        .await?;
        let verdict = if holder_is_low {
            "verdict=victims"
        } else {
            "verdict=rejected"
        };
        py.wait_for(|l| {
            l.contains("preemption_filter pod=default/p node=n1") && l.contains(verdict)
        })
        .await?;
        py.kill().await?;
    }
    Ok(())
}

/// `label_tier.py` generated from the protocol file as it was before the
/// group points (and before the what-if): its Hello declares neither
/// `preemption_filter` nor `filter_ignores_pods`. The preemptor needs an
/// ssd node; both nodes are full of pods of low priority, so both are
/// candidates by berthd's own plugins. berthd asks the extender a plain
/// Filter about them as they are: it refuses the hdd node, so only the ssd
/// node's pod is evicted.
#[tokio::test]
async fn an_extender_built_before_the_what_if_is_asked_about_the_nodes_as_they_are() -> Result<()> {
    let old_proto = workspace_root().join("tests/fixtures/proto-before-group-points");
    let gen_dir = TempDir::new("px-oldgen")?;
    let mut py = PyExtender::start_with(
        "127.0.0.1:0",
        &[
            "--proto-dir",
            &old_proto.display().to_string(),
            "--gen-dir",
            &gen_dir.path().display().to_string(),
        ],
    )
    .await?;
    let dir = TempDir::new("px-old")?;
    let objects = [
        node("ssd-0", json!({"disk": "ssd"})),
        node("hdd-0", json!({"disk": "hdd"})),
        pod("low-ssd", 1, false, Some("ssd-0")),
        pod("low-hdd", 1, false, Some("hdd-0")),
    ];
    let cfg = config("label-tier", &format!("http://{}", py.addr));
    let berthd = start(&dir, &objects, &cfg, "label-tier").await?;
    let mut preemptor = pod("p", 10, false, None);
    preemptor["metadata"]["annotations"] = json!({"example.com/required-node-label": "disk=ssd"});
    let mut client = berthd.client().await?;
    let r = client.dry_run(&preemptor, "", false).await?;
    let p = r.preemption.context("preemption")?;
    ensure!(p.nominated_node == "ssd-0", "{p:?}");
    ensure!(
        p.victims
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            == ["low-ssd"],
        "{p:?}"
    );
    // The cycle's Filter and the what-if's, both plain, both understood.
    py.wait_for(|l| l.contains("filter pod=default/p nodes=2 rejected=1"))
        .await?;
    py.wait_for(|l| l.contains("filter pod=default/p nodes=2 rejected=1"))
        .await?;
    ensure!(
        !py.seen
            .iter()
            .any(|l| l.contains("empty message") || l.contains("request failed")),
        "{:?}",
        py.seen
    );
    // And for real: the ssd node's pod goes, the hdd node's stays.
    let mut events = client.watch_events("default").await?;
    client.apply(&[preemptor], "").await?;
    loop {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("the preemptor was never bound")??
            .context("the event stream ended")?;
        if e.pod.as_ref().map(|p| p.name.as_str()) == Some("p")
            && e.r#type() == EventType::Scheduled
        {
            break;
        }
    }
    let pods = pod_names(&mut client).await?;
    ensure!(
        pods.contains(&"low-hdd".to_string()) && !pods.contains(&"low-ssd".to_string()),
        "{pods:?}"
    );
    berthd.stop().await?;
    py.kill().await?;
    Ok(())
}
