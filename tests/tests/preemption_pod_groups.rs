//! v1.37's single-pod preemption over PodGroups (issue 34, item 7) through
//! the real berthd on its embedded cluster (`--feature-gates
//! GenericWorkload=true`): a pod that preempts judges a victim in a
//! PodGroup by the group's priority, and evicts a `disruptionMode: all`
//! group whole or not at all.
//!
//! Four nodes of 4 CPU, each full: `vip-0` (priority 0) of the group `vip`
//! (priority 2000) on g-0; `a-1` and `a-2` (priority 0) of the group `a`
//! (priority 0, `disruptionMode: all`) on g-1 and g-2; `s-3` (priority 5,
//! no group) on g-3. The preemptor `p` (priority 100) needs a whole node.
//! By the pods' own priorities `vip-0` or one pod of `a` would go; by
//! their groups', `vip-0` is spared, and the pod that goes from `a` takes
//! its sibling with it. With GenericWorkload off every pod is a unit of its
//! own: one pod of priority 0 goes.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use berth_client::EventType;
use berth_e2e::{Berthd, TempDir, message};
use serde_json::{Value, json};

/// A guard against a hung test; never what it waits for.
const GUARD: Duration = Duration::from_secs(120);

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn group(name: &str, min: i32, priority: i32, all: bool) -> Value {
    let mut g = json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}, "priority": priority},
    });
    if all {
        g["spec"]["disruptionMode"] = json!({"all": {}});
    }
    g
}

fn pod(name: &str, priority: i32, group: Option<&str>, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "image": "app",
                "resources": {"requests": {"cpu": "3500m"}}}],
        },
    });
    if let Some(g) = group {
        p["spec"]["schedulingGroup"] = json!({"podGroupName": g});
    }
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

fn cluster() -> Value {
    let items = vec![
        node("g-0"),
        node("g-1"),
        node("g-2"),
        node("g-3"),
        group("vip", 1, 2000, false),
        group("a", 2, 0, true),
        pod("vip-0", 0, Some("vip"), Some("g-0")),
        pod("a-1", 0, Some("a"), Some("g-1")),
        pod("a-2", 0, Some("a"), Some("g-2")),
        pod("s-3", 5, None, Some("g-3")),
    ];
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

async fn pod_names(client: &mut berth_client::Client) -> Result<Vec<String>> {
    let mut v: Vec<String> = client
        .list("Pod", "default")
        .await?
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    v.sort();
    Ok(v)
}

/// Creates the preemptor; its first decision's message (the failure that
/// preempted) once it is bound.
async fn schedule(berthd: &Berthd) -> Result<String> {
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client.apply(&[pod("p", 100, None, None)], "").await?;
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
            EventType::Failed if failure.is_none() => failure = Some(e.message.clone()),
            EventType::Scheduled => break,
            _ => {}
        }
    }
    failure.context("the preemptor was bound without preempting")
}

#[tokio::test]
async fn a_pod_preempts_pod_group_victims_by_their_group() -> Result<()> {
    for generic_workload in [true, false] {
        let dir = TempDir::new(&format!("pg-preempt-{generic_workload}"))?;
        let file = dir.write("cluster.json", &serde_json::to_string(&cluster())?)?;
        let gates = format!("GenericWorkload={generic_workload}");
        let mut berthd =
            Berthd::start(&["--cluster", &file, "--seed", "1", "--feature-gates", &gates]).await?;
        berthd
            .wait_for(|l| message(l).starts_with("cache synced"))
            .await?;
        let mut client = berthd.client().await?;

        // The dry run names the victims and evicts nothing.
        let r = client
            .dry_run(&pod("p", 100, None, None), "", false)
            .await?;
        let p = r.preemption.context("preemption's answer")?;
        let mut victims: Vec<String> = p.victims.iter().map(|v| v.name.clone()).collect();
        victims.sort();
        if generic_workload {
            ensure!(victims == ["a-1", "a-2"], "{victims:?} {}", p.message);
            ensure!(
                p.nominated_node == "g-1" || p.nominated_node == "g-2",
                "{}",
                p.nominated_node
            );
            ensure!(
                p.message.ends_with(&format!(
                    "preemption: found a potential placement for pod on node {}, preempting 2 victims",
                    p.nominated_node
                )),
                "{}",
                p.message
            );
        } else {
            ensure!(
                victims.len() == 1 && victims[0] != "s-3",
                "{victims:?} {}",
                p.message
            );
        }
        ensure!(pod_names(&mut client).await?.len() == 4, "nothing evicted");

        // The scheduler's own attempt evicts them and binds the pod.
        let failure = schedule(&berthd).await?;
        let bound = client.get("Pod", "default", "p").await?;
        let node = bound["spec"]["nodeName"].as_str().unwrap_or_default();
        let left = pod_names(&mut client).await?;
        if generic_workload {
            ensure!(node == "g-1" || node == "g-2", "{bound}");
            ensure!(
                left == ["p", "s-3", "vip-0"],
                "the whole group a went: {left:?}"
            );
            ensure!(failure.ends_with("preempting 2 victims"), "{failure}");
        } else {
            ensure!(node != "g-3", "s-3 has the highest priority: {bound}");
            ensure!(left.len() == 4, "one pod evicted: {left:?}");
            ensure!(left.contains(&"s-3".to_string()), "{left:?}");
        }
        berthd.stop().await?;
    }
    Ok(())
}
