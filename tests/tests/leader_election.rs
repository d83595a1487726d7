//! Two berthd replicas in kube mode against one stand-in API server
//! (`berth_e2e::fake_apiserver`): only the Lease holder binds pods; when
//! it is killed (SIGKILL: no release), the standby takes the Lease over
//! once it has seen it unchanged for the lease duration, and binds what
//! comes next; no pod is bound twice. Short durations keep it quick.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::FakeApiServer;
use berth_e2e::{Berthd, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/berth";

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berth-leader-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    })
}

async fn replica(kubeconfig: &str) -> Result<Berthd> {
    Berthd::start(&[
        "--kubeconfig",
        kubeconfig,
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ])
    .await
}

fn is_scheduled(l: &Value, pod: &str) -> bool {
    message(l) == "scheduled" && l["fields"]["pod"] == format!("default/{pod}")
}

/// The first log line satisfying `pred`, among those read already (the
/// election starts before berthd serves) or those to come.
async fn logged(b: &mut Berthd, pred: impl Fn(&Value) -> bool) -> Result<Value> {
    if let Some(l) = b.seen.iter().find(|l| pred(l)) {
        return Ok(l.clone());
    }
    b.wait_for(pred).await
}

/// The bindings (201 or not) made for `pod`.
fn bindings(fake: &FakeApiServer, pod: &str) -> Vec<u16> {
    fake.requests_to("POST", &format!("/pods/{pod}/binding"))
        .iter()
        .map(|r| r.status)
        .collect()
}

#[tokio::test]
async fn only_the_leader_binds_and_a_standby_takes_over_a_killed_leader() -> Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create(
        "/api/v1/nodes",
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
            },
        }),
    )?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    let dir = TempDir::new("handover")?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let kubeconfig = kubeconfig.display().to_string();

    // A takes the absent Lease.
    let mut a = replica(&kubeconfig).await?;
    let acquired = logged(&mut a, |l| {
        message(l) == "successfully acquired lease kube-system/berth"
    })
    .await?;
    let a_id = acquired["fields"]["identity"]
        .as_str()
        .context("identity")?
        .to_string();
    let lease = fake.get(LEASE).context("no lease")?;
    assert_eq!(lease["spec"]["holderIdentity"], a_id.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3);
    assert_eq!(lease["spec"]["leaseTransitions"], 0);

    // B starts and finds it held (its reads are the only GETs of the Lease
    // that succeed: A's one read found nothing, and A renews by updates).
    let mut b = replica(&kubeconfig).await?;
    let attempting = logged(&mut b, |l| {
        message(l) == "attempting to acquire leader lease kube-system/berth..."
    })
    .await?;
    let b_id = attempting["fields"]["identity"]
        .as_str()
        .context("identity")?
        .to_string();
    ensure!(a_id != b_id, "both replicas are {a_id}");
    fake.wait_for_requests(2, |r| {
        r.method == "GET" && r.path == LEASE && r.status == 200
    })
    .await?;

    // Pods are bound by A, once each.
    for p in ["p1", "p2", "p3"] {
        fake.create(PODS, pod(p))?;
    }
    for p in ["p1", "p2", "p3"] {
        logged(&mut a, |l| is_scheduled(l, p)).await?;
    }

    // A dies without releasing. B takes over when the Lease has not changed
    // for the lease duration, as B saw it.
    a.signal("KILL")?;
    let (status, _) = a.wait_exit().await?;
    ensure!(!status.success());
    ensure!(
        !b.seen
            .iter()
            .any(|l| message(l) == "successfully acquired lease kube-system/berth"),
        "the standby led while the leader lived"
    );
    b.wait_for(|l| message(l) == "successfully acquired lease kube-system/berth")
        .await?;
    // When: a lease duration after B last saw the Lease change, on B's own
    // clock. That is pinned with paused time, not here on a wall clock a
    // loaded machine stretches (leader::tests::a_fresh_lease_of_another_
    // holder_is_waited_out_on_the_local_clock_then_taken_over).
    // B scheduled nothing while it was a standby.
    ensure!(
        !b.seen.iter().any(|l| message(l) == "scheduled"),
        "the standby scheduled"
    );
    let lease = fake.get(LEASE).context("no lease")?;
    assert_eq!(lease["spec"]["holderIdentity"], b_id.as_str());
    assert_eq!(lease["spec"]["leaseTransitions"], 1);

    // B binds what comes next; nothing was bound twice.
    for p in ["p4", "p5"] {
        fake.create(PODS, pod(p))?;
    }
    for p in ["p4", "p5"] {
        logged(&mut b, |l| is_scheduled(l, p)).await?;
    }
    for p in ["p1", "p2", "p3", "p4", "p5"] {
        assert_eq!(bindings(&fake, p), [201], "bindings of {p}");
    }

    // SIGTERM: B releases the Lease on its way out.
    b.signal("TERM")?;
    let (status, lines) = b.wait_exit().await?;
    ensure!(status.success(), "exit {status}");
    ensure!(
        lines.iter().any(|l| message(l) == "leader lease released"),
        "{:#?}",
        lines.iter().map(message).collect::<Vec<_>>()
    );
    let lease = fake.get(LEASE).context("no lease")?;
    assert_eq!(lease["spec"]["holderIdentity"], "");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    Ok(())
}
