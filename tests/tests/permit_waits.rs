//! Issue 28, item 5: a pod held at Permit is visible in the queue, with who
//! holds it, since when and until when. Before, `berthctl queue` showed it
//! `in-flight` with an empty reason, and GetQueue had nothing to say.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use berth_client::pb::EventType;
use berth_e2e::{Berthd, berthctl_path, grpcurl_path};
use serde_json::Value;
use tokio::process::Command;

const GUARD: Duration = Duration::from_secs(120);

/// Coscheduling holds a gang's members at Permit until the whole gang is
/// reserved (for at most 10 minutes here).
const CONFIG: &str = "\
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

/// Room for one of the pair only: the first member is reserved and waits
/// at Permit for the second, which fits nowhere.
const CLUSTER: &str = "\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: '1', memory: 8Gi, pods: '10'}}
";

const PAIR: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: first
  namespace: default
  labels: {scheduling.x-k8s.io/pod-group: pair}
  annotations: {scheduling.x-k8s.io/min-member: '2'}
spec: {priority: 10, containers: [{name: c, resources: {requests: {cpu: 600m}}}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: second
  namespace: default
  labels: {scheduling.x-k8s.io/pod-group: pair}
  annotations: {scheduling.x-k8s.io/min-member: '2'}
spec: {containers: [{name: c, resources: {requests: {cpu: 600m}}}]}
";

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn output(program: PathBuf, args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(GUARD, Command::new(&program).args(args).output())
        .await
        .map_err(|_| anyhow!("{} hung", program.display()))??;
    if !out.status.success() {
        bail!(
            "{} {args:?}: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn seconds(t: &Value) -> Result<i64> {
    let text = t.as_str().context("a timestamp")?;
    Ok(text.parse::<jiff::Timestamp>()?.as_second())
}

#[tokio::test]
async fn the_queue_shows_who_holds_a_pod_at_permit_since_when_and_until_when() -> Result<()> {
    let dir = Dir(std::env::temp_dir().join(format!("berth-permit-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let cluster = dir.0.join("cluster.yaml");
    let config = dir.0.join("config.yaml");
    std::fs::write(&cluster, CLUSTER)?;
    std::fs::write(&config, CONFIG)?;
    let berthd = Berthd::start(&[
        "--cluster",
        cluster.to_str().context("path")?,
        "--config",
        config.to_str().context("path")?,
    ])
    .await?;
    let addr = berthd.addr.clone();
    // The signal: the scheduler says the pod waits at Permit.
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client.apply(&[], PAIR).await?;
    let waiting = tokio::time::timeout(GUARD, async {
        while let Some(e) = events.message().await? {
            if e.r#type() == EventType::Waiting {
                return Ok(e);
            }
        }
        bail!("the event stream ended")
    })
    .await
    .map_err(|_| anyhow!("no WAITING event"))??;
    assert_eq!(waiting.pod.as_ref().map(|p| p.name.as_str()), Some("first"));

    // berthctl's table says who holds it and since when.
    let ctl = berthctl_path()?;
    let table = output(ctl.clone(), &["-s", &addr, "queue"]).await?;
    let row = table
        .lines()
        .find(|l| l.contains("first"))
        .context("first in the queue")?;
    assert!(row.contains("in-flight"), "{table}");
    assert!(
        row.contains("waiting at Permit on n1 since ") && row.contains(" for Coscheduling (until "),
        "{table}"
    );

    // And so does GetQueue, to grpcurl: the plugin, since, until.
    let answer: Value = serde_json::from_str(
        &output(
            grpcurl_path()?,
            &[
                "-plaintext",
                "-d",
                "{}",
                &addr,
                "berth.v1.Scheduler/GetQueue",
            ],
        )
        .await?,
    )?;
    let pod = answer["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "first"))
        .context("first in GetQueue")?;
    assert_eq!(pod["queue"], "QUEUE_NAME_IN_FLIGHT", "{answer}");
    let wait = &pod["permitWait"];
    assert_eq!(wait["node"], "n1", "{answer}");
    assert_eq!(wait["waitingFor"][0]["plugin"], "Coscheduling", "{answer}");
    let held = seconds(&wait["waitingFor"][0]["until"])? - seconds(&wait["since"])?;
    assert!(
        (599..=601).contains(&held),
        "until - since = {held}s: {answer}"
    );
    assert!(berthd.stop().await?.success());
    Ok(())
}
