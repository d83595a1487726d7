//! PodGroup gangs through the real berthd on its embedded cluster
//! (`--cluster` YAML with PodGroups, `--feature-gates=GenericWorkload=true`),
//! driven by the gRPC client and the real berthctl.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_e2e::{Berthd, berthctl_path, berthd_path, message};
use serde_json::{Value, json};
use tokio::process::Command;

const GUARD: Duration = Duration::from_secs(120);

const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: g-0}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: g-1}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: g-2}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: g-3}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: train, namespace: default}
  spec: {schedulingPolicy: {gang: {minCount: 4}}}
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: huge, namespace: default}
  spec: {schedulingPolicy: {gang: {minCount: 5}}}
"#;

fn member(name: &str, group: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "trainer",
                "resources": {"requests": {"cpu": cpu}}}],
        },
    })
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn berthctl(addr: &str, args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(berthctl_path()?)
            .arg("--server")
            .arg(addr)
            .args(args)
            .env_remove("BERTH_SERVER")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("berthctl hung")??;
    if !out.status.success() {
        bail!(
            "berthctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

async fn start(tag: &str, gates: &str) -> Result<(Berthd, TempDir)> {
    let dir = std::env::temp_dir().join(format!("berth-gang-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dir = TempDir(dir);
    let file = dir.0.join("cluster.yaml");
    std::fs::write(&file, CLUSTER)?;
    let file = file.display().to_string();
    let mut berthd =
        Berthd::start(&["--cluster", &file, "--seed", "1", "--feature-gates", gates]).await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced"))
        .await?;
    Ok((berthd, dir))
}

/// Issue 26, done when: through berthd, a gang with minCount 4 whose fourth
/// pod arrives late is bound only after it arrives, all four together; the
/// PodGroup's condition says so.
#[tokio::test]
async fn a_late_fourth_pod_completes_the_gang() -> Result<()> {
    let (mut berthd, _dir) = start("late", "GenericWorkload=true").await?;
    let mut client = berthd.client().await?;
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    client.apply(&pods, "").await?;
    let addr = berthd.addr.clone();
    let queue = berthctl(&addr, &["queue"]).await?;
    ensure!(
        queue
            .lines()
            .filter(|l| l.contains("train-") && l.contains("gated"))
            .count()
            == 3,
        "{queue}"
    );
    client.apply(&[member("train-3", "train", "1")], "").await?;
    berthd.wait_idle().await?;
    for i in 0..4 {
        let pod = client.get("pods", "default", &format!("train-{i}")).await?;
        ensure!(
            pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n.starts_with("g-")),
            "train-{i} not bound: {pod}"
        );
    }
    let pg: Value = serde_json::from_str(
        &berthctl(&addr, &["get", "podgroups", "train", "-o", "json"]).await?,
    )?;
    let cond = &pg["status"]["conditions"][0];
    ensure!(
        cond["type"] == "PodGroupInitiallyScheduled"
            && cond["status"] == "True"
            && cond["reason"] == "Scheduled",
        "{pg}"
    );
    ensure!(
        pg["spec"]["disruptionMode"] == json!({"single": {}}),
        "{pg}"
    );
    berthd.stop().await?;
    Ok(())
}

/// Issue 26, done when: a gang that cannot fit as a whole leaves every pod
/// unbound with upstream's message.
#[tokio::test]
async fn a_gang_that_cannot_fit_leaves_every_pod_unbound() -> Result<()> {
    let (berthd, _dir) = start("nofit", "GenericWorkload=true").await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    let pods: Vec<Value> = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    client.apply(&pods, "").await?;
    let mut failed = std::collections::BTreeMap::new();
    while failed.len() < 5 {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("no event")??
            .context("stream ended")?;
        let pod = e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default();
        ensure!(
            e.r#type() != berth_client::EventType::Scheduled,
            "bound: {e:?}"
        );
        if e.r#type() == berth_client::EventType::Failed {
            failed.entry(pod).or_insert(e.message.clone());
        }
    }
    let placed = failed
        .values()
        .filter(|m| {
            *m == "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining"
        })
        .count();
    ensure!(placed == 4, "{failed:?}");
    ensure!(
        failed
            .values()
            .any(|m| m == "0/4 nodes are available: 4 Insufficient cpu."),
        "{failed:?}"
    );
    let pg = client.get("podgroups", "default", "huge").await?;
    let cond = &pg["status"]["conditions"][0];
    ensure!(
        cond["status"] == "False"
            && cond["reason"] == "Unschedulable"
            && cond["message"] == "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining",
        "{pg}"
    );
    for i in 0..5 {
        let pod = client.get("pods", "default", &format!("huge-{i}")).await?;
        ensure!(pod["spec"]["nodeName"].is_null(), "huge-{i} bound: {pod}");
    }
    Ok(())
}

#[test]
fn gates_merged_into_generic_workload_are_unknown() -> Result<()> {
    // v1.37 merged GangScheduling and WorkloadAwarePreemption into
    // GenericWorkload: the old names stop startup, as kube-scheduler's do.
    for gate in ["GangScheduling", "WorkloadAwarePreemption"] {
        let out = std::process::Command::new(berthd_path()?)
            .args(["--empty-cluster", "--listen", "127.0.0.1:0"])
            .arg(format!("--feature-gates={gate}=true"))
            .env("RUST_BACKTRACE", "0")
            .output()?;
        ensure!(!out.status.success(), "{gate} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            stderr.contains(&format!("unrecognized feature gate: {gate}")),
            "{stderr}"
        );
    }
    Ok(())
}
