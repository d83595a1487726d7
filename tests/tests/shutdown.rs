//! Graceful shutdown of the real berthd (embedded cluster): SIGTERM stops
//! scheduling, drains binding cycles (pods waiting at Permit are rejected
//! so that they Unreserve), stops gRPC and exits 0, saying so in its logs.
//! Also: leader-election flags are validated as upstream validates the
//! configuration.

use anyhow::{Context, Result, bail, ensure};
use berth_client::pb::EventType;
use berth_e2e::{Berthd, TempDir, berthd_path, message};
use serde_json::Value;
use tokio_stream::StreamExt;

/// Whether `wanted` appear in `lines`' messages in this order (others may
/// come between).
fn in_order(lines: &[Value], wanted: &[&str]) -> bool {
    let mut w = wanted.iter().peekable();
    for l in lines {
        if w.peek().is_some_and(|m| message(l) == **m) {
            w.next();
        }
    }
    w.peek().is_none()
}

fn messages(lines: &[Value]) -> Vec<&str> {
    lines.iter().map(message).collect()
}

#[tokio::test]
async fn sigterm_drains_stops_serving_and_exits_zero() -> Result<()> {
    let mut berthd = Berthd::start(&[]).await?;
    berthd.wait_idle().await?;
    berthd.signal("TERM")?;
    let (status, lines) = berthd.wait_exit().await?;
    ensure!(status.success(), "exit {status}: {:#?}", messages(&lines));
    ensure!(
        in_order(
            &lines,
            &[
                "received SIGTERM: shutting down",
                "scheduling stopped; draining binding cycles",
                "binding cycles drained",
                "gRPC server stopped",
                "shutdown complete",
            ]
        ),
        "{:#?}",
        messages(&lines)
    );
    // The embedded cluster never elects: no lease to release.
    ensure!(
        !lines.iter().any(|l| message(l).contains("lease")),
        "{:#?}",
        messages(&lines)
    );
    Ok(())
}

/// Coscheduling with a gang of 3 of which only 2 exist: both wait at
/// Permit (for 10 minutes, unless something ends it).
const GANG: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
    queueSort:
      disabled: [{name: PrioritySort}]
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 600}
";

const GANG_NODE: &str = "\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: '4', memory: 8Gi, pods: '110'}}
";

const GANG_PODS: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: g-0
  labels: {scheduling.x-k8s.io/pod-group: g}
  annotations: {scheduling.x-k8s.io/min-member: '3'}
spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: g-1
  labels: {scheduling.x-k8s.io/pod-group: g}
  annotations: {scheduling.x-k8s.io/min-member: '3'}
spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
";

#[tokio::test]
async fn sigterm_rejects_pods_waiting_at_permit_so_they_unreserve() -> Result<()> {
    let dir = TempDir::new("gang")?;
    let config = dir.write("config.yaml", GANG)?;
    let cluster = dir.write("cluster.yaml", GANG_NODE)?;
    let berthd = Berthd::start(&["--config", &config, "--cluster", &cluster]).await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("").await?;
    client.apply(&[], GANG_PODS).await?;
    // Both pods reach Permit and wait.
    let mut waiting = std::collections::BTreeSet::new();
    while waiting.len() < 2 {
        let e = events.next().await.context("event stream ended")??;
        match e.r#type() {
            EventType::Waiting => {
                waiting.insert(e.pod.context("pod")?.name);
            }
            other => bail!("unexpected {other:?} before shutdown: {}", e.message),
        }
    }
    berthd.signal("TERM")?;
    // Nothing binds. (The event stream may end, with the gRPC server, before
    // it carries the failures: the log below is the record.)
    while let Some(e) = events.next().await {
        let Ok(e) = e else { break };
        ensure!(e.r#type() != EventType::Scheduled, "{e:?}");
    }
    let (status, lines) = berthd.wait_exit().await?;
    ensure!(status.success(), "exit {status}: {:#?}", messages(&lines));
    // Their binding cycles end as rejected, now, not in 10 minutes.
    let msg = "0/1 nodes are available: 1 scheduler is shutting down.";
    let mut failed: Vec<(String, String)> = lines
        .iter()
        .filter_map(|l| {
            let text = message(l).strip_prefix("unschedulable: ")?;
            Some((l["fields"]["pod"].as_str()?.to_string(), text.to_string()))
        })
        .collect();
    // Both fail: the one shutdown rejects first, and the other either by the
    // shutdown too or, if Coscheduling got there first, because a member of
    // its group failed (upstream's coscheduling rejects the whole group).
    failed.sort();
    let pods: Vec<&str> = failed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(pods, ["default/g-0", "default/g-1"]);
    let shut = failed.iter().filter(|(_, m)| m == msg).count();
    assert!(shut >= 1, "{failed:?}");
    for (pod, m) in &failed {
        let sibling = if pod == "default/g-0" { "g-1" } else { "g-0" };
        let group = format!(
            "0/1 nodes are available: 1 rejected: member default/{sibling} of pod group default/g failed."
        );
        assert!(m == msg || *m == group, "{pod}: {m}");
    }
    let drained = lines
        .iter()
        .find(|l| message(l) == "binding cycles drained")
        .context("no 'binding cycles drained'")?;
    // The shutdown may also reject a pod that the group's failure is
    // rejecting at the same moment: the first rejection is the one it gets.
    let rejected_waiting = drained["fields"]["rejected_waiting"]
        .as_u64()
        .context("rejected_waiting")? as usize;
    assert!((shut..=2).contains(&rejected_waiting), "{rejected_waiting}");
    let rejected = lines
        .iter()
        .filter(|l| message(l) == "rejecting pod waiting at Permit: scheduler is shutting down")
        .count();
    assert_eq!(rejected, rejected_waiting);
    Ok(())
}

/// Runs berthd expecting it to refuse to start; returns its stderr.
async fn refused(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(berthd_path()?)
        .args(["--listen", "127.0.0.1:0", "--empty-cluster"])
        .args(args)
        .output()
        .await?;
    ensure!(!out.status.success(), "berthd started with {args:?}");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn leader_election_flags_override_the_file_and_are_validated() -> Result<()> {
    let err = refused(&["--leader-elect-renew-deadline", "20s"]).await?;
    ensure!(
        err.contains(
            "leaderElection.leaseDuration: Invalid value: 15s: LeaseDuration must be greater than RenewDeadline"
        ),
        "{err}"
    );
    let err = refused(&["--leader-elect-resource-lock", "endpoints"]).await?;
    ensure!(
        err.contains(
            "leaderElection.resourceLock: Invalid value: endpoints: resourceLock value must be \"leases\""
        ),
        "{err}"
    );
    // A file that would be invalid, made valid by a flag.
    let dir = TempDir::new("flags")?;
    let config = dir.write(
        "config.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaseDuration: 30s\n  renewDeadline: 20s\n",
    )?;
    let err = refused(&["--config", &config, "--leader-elect-lease-duration", "20s"]).await?;
    ensure!(
        err.contains("leaderElection.leaseDuration: Invalid value: 20s"),
        "{err}"
    );
    let berthd = Berthd::start(&[
        "--empty-cluster",
        "--config",
        &config,
        "--leader-elect-renew-deadline",
        "10s",
    ])
    .await?;
    ensure!(berthd.stop().await?.success());
    Ok(())
}
