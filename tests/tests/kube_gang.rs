//! PodGroup gangs in kube mode (`--feature-gates=GenericWorkload=true`)
//! against the stand-in API server: berthd watches PodGroups, binds a
//! gang's pods together, and writes `PodGroupInitiallyScheduled` as
//! kube-scheduler does, a strategic merge patch of the `status`
//! subresource shaped as the recorded one (v1.36 named the condition
//! `PodGroupScheduled` and served v1alpha2; v1.37 serves v1beta1).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::{FakeApiServer, Recorded, recording};
use berth_e2e::{Berthd, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const PODGROUPS: &str = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups";

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    })
}

fn member(name: &str, group: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    })
}

fn gang(name: &str, min: i32) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
    })
}

async fn start(
    tag: &str,
    groups: &[Value],
    pods: &[Value],
    gates: &str,
) -> Result<(FakeApiServer, Berthd, TempDir)> {
    start_with(tag, groups, pods, gates, None).await
}

/// [`start`] with a scheduler configuration (written to the test's dir).
async fn start_with(
    tag: &str,
    groups: &[Value],
    pods: &[Value],
    gates: &str,
    config: Option<&str>,
) -> Result<(FakeApiServer, Berthd, TempDir)> {
    let fake = FakeApiServer::start().await?;
    for i in 0..4 {
        fake.create("/api/v1/nodes", node(&format!("g-{i}")))?;
    }
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    for g in groups {
        fake.create(PODGROUPS, g.clone())?;
    }
    for p in pods {
        fake.create(PODS, p.clone())?;
    }
    let dir = std::env::temp_dir().join(format!("berth-kube-gang-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dir = TempDir(dir);
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut args = vec![
        "--kubeconfig".to_string(),
        path,
        "--seed".into(),
        "1".into(),
        "--feature-gates".into(),
        gates.into(),
    ];
    if let Some(config) = config {
        let file = dir.0.join("config.yaml");
        std::fs::write(&file, config)?;
        args.push("--config".into());
        args.push(file.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut berthd = Berthd::start(&args).await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    Ok((fake, berthd, dir))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn is_group_status(r: &Recorded, name: &str) -> bool {
    r.method == "PATCH" && r.path == format!("{PODGROUPS}/{name}/status")
}

/// The recorded condition patch's shape: the same keys, the condition as
/// v1.37 names it.
fn check_patch(patch: &Recorded, recorded: &str) -> Result<Value> {
    let rec = recording(recorded)?;
    ensure!(patch.content_type.as_deref() == rec["request"]["contentType"].as_str());
    let cond = patch.body["status"]["conditions"][0].clone();
    let rec_cond = &rec["request"]["body"]["status"]["conditions"][0];
    ensure!(
        keys(&patch.body["status"]) == keys(&rec["request"]["body"]["status"]),
        "{} vs {}",
        patch.body,
        rec["request"]["body"]
    );
    ensure!(
        keys(&cond) == keys(rec_cond),
        "condition {cond} vs recorded {rec_cond}"
    );
    ensure!(cond["type"] == "PodGroupInitiallyScheduled", "{cond}");
    Ok(cond)
}

#[tokio::test]
async fn a_gang_binds_only_once_its_last_pod_arrives_and_its_status_is_patched_as_upstream()
-> Result<()> {
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    let (fake, mut berthd, _dir) =
        start("late", &[gang("train", 4)], &pods, "GenericWorkload=true").await?;
    // The pods were listed before the cache synced: the gang is queued,
    // held by GangScheduling's PreEnqueue.
    let queue = berthd.client().await?.get_queue("default").await?;
    ensure!(queue.len() == 3, "{queue:?}");
    for p in &queue {
        ensure!(p.queue() == berth_client::QueueName::Gated, "{p:?}");
        ensure!(
            p.last_failure == "waiting for minCount pods from a gang to appear in scheduling queue",
            "{p:?}"
        );
    }
    ensure!(
        fake.requests_to("POST", "/binding").is_empty(),
        "three of four: nothing bound"
    );
    ensure!(
        !fake.requests().iter().any(|r| is_group_status(r, "train")),
        "gated groups write nothing"
    );
    let stored = fake
        .get(&format!("{PODGROUPS}/train"))
        .context("podgroup")?;
    ensure!(stored["status"] == json!({}), "{stored}");

    fake.create(PODS, member("train-3", "train", "1"))?;
    let patch = fake
        .wait_for_request(|r| is_group_status(r, "train"))
        .await?;
    let bindings = fake
        .wait_for_requests(4, |r| {
            r.method == "POST" && r.path.ends_with("/binding") && r.status == 201
        })
        .await?;
    ensure!(bindings.len() == 4);
    let cond = check_patch(&patch, "gang-podgroup-status-scheduled")?;
    ensure!(cond["status"] == "True" && cond["reason"] == "Scheduled" && cond["message"] == "");
    ensure!(
        cond.get("observedGeneration").is_none(),
        "no generation on the PodGroup, none observed: {cond}"
    );
    let stored = fake
        .get(&format!("{PODGROUPS}/train"))
        .context("podgroup")?;
    ensure!(
        stored["status"]["conditions"][0]["reason"] == "Scheduled",
        "{stored}"
    );
    berthd.wait_idle().await?;
    ensure!(
        fake.requests()
            .iter()
            .filter(|r| is_group_status(r, "train"))
            .count()
            == 1,
        "written once"
    );
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_gang_that_cannot_fit_is_left_unbound_with_upstreams_messages() -> Result<()> {
    let pods: Vec<Value> = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    let (fake, berthd, _dir) =
        start("nofit", &[gang("huge", 5)], &pods, "GenericWorkload=true").await?;
    let patch = fake
        .wait_for_request(|r| is_group_status(r, "huge"))
        .await?;
    let cond = check_patch(&patch, "gang-podgroup-status-unschedulable")?;
    ensure!(
        cond["status"] == "False" && cond["reason"] == "Unschedulable",
        "{cond}"
    );
    ensure!(
        cond["message"]
            == "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor",
        "{cond}"
    );
    let statuses = fake
        .wait_for_requests(5, |r| {
            r.method == "PATCH" && r.path.starts_with(PODS) && r.path.ends_with("/status")
        })
        .await?;
    let messages: BTreeSet<String> = statuses
        .iter()
        .map(|r| {
            r.body["status"]["conditions"][0]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let want: BTreeSet<String> = [
        "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor",
        "0/4 nodes are available: 4 Insufficient cpu.",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    ensure!(messages == want, "{messages:?}");
    ensure!(fake.requests_to("POST", "/binding").is_empty());
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn with_generic_workload_off_pod_groups_are_not_watched() -> Result<()> {
    let pods: Vec<Value> = (0..2)
        .map(|i| member(&format!("t-{i}"), "train", "1"))
        .collect();
    let (fake, mut berthd, _dir) =
        start("off", &[gang("train", 4)], &pods, "GenericWorkload=false").await?;
    berthd.wait_idle().await?;
    ensure!(
        fake.requests_to("POST", "/binding").len() == 2,
        "scheduled alone"
    );
    // Discovery reads what scheduling.k8s.io serves; nothing else of it.
    ensure!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.starts_with("/apis/scheduling.k8s.io/v1beta1/")),
        "no PodGroup watch, no PodGroup write"
    );
    berthd.stop().await?;
    Ok(())
}

/// Issue 26 item 3 in kube mode: a remote extender (the Python
/// `gang_quota.py`) at GroupPermit refuses a gang over its CPU cap as a
/// whole; berthd binds none of its pods and writes the extender's reason
/// into the PodGroup's condition and the pods' own, as it writes
/// upstream's; a gang within the cap binds.
#[tokio::test]
async fn a_remote_group_permit_refuses_a_gang_and_its_reason_is_written() -> Result<()> {
    let mut ext = berth_e2e::python::PyExtender::start_script(
        "gang_quota.py",
        "127.0.0.1:0",
        &["--max-gang-cpu", "4"],
    )
    .await?;
    let config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: gang-quota}}]
berthExtenders:
- name: gang-quota
  endpoint: http://{}
  points: [groupPermit]
  timeout: 10s
",
        ext.addr
    );
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("big-{i}"), "big", "2"))
        .chain((0..2).map(|i| member(&format!("small-{i}"), "small", "1")))
        .collect();
    let (fake, berthd, _dir) = start_with(
        "groupquota",
        &[gang("big", 3), gang("small", 2)],
        &pods,
        "GenericWorkload=true",
        Some(&config),
    )
    .await?;
    let refused = "pod group default/big requests 6 CPUs, over the 4 CPUs a gang may take in namespace default";
    let patch = fake.wait_for_request(|r| is_group_status(r, "big")).await?;
    let cond = check_patch(&patch, "gang-podgroup-status-unschedulable")?;
    ensure!(
        cond["status"] == "False"
            && cond["reason"] == "Unschedulable"
            && cond["message"]
                .as_str()
                .is_some_and(|m| m.contains(refused)),
        "{cond}"
    );
    let small = fake
        .wait_for_request(|r| is_group_status(r, "small"))
        .await?;
    ensure!(
        small.body["status"]["conditions"][0]["status"] == "True",
        "{}",
        small.body
    );
    let bindings = fake
        .wait_for_requests(2, |r| r.method == "POST" && r.path.ends_with("/binding"))
        .await?;
    ensure!(
        bindings.iter().all(|r| r.path.contains("/small-")),
        "only the small gang binds: {:?}",
        bindings.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let statuses = fake
        .wait_for_requests(3, |r| {
            r.method == "PATCH" && r.path.contains("/pods/big-") && r.path.ends_with("/status")
        })
        .await?;
    for r in &statuses {
        let m = r.body["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap_or_default();
        ensure!(m.contains(refused), "{}: {m}", r.path);
    }
    ext.wait_for(|l| l.contains("group permit group=default/big pods=3 allowed=False"))
        .await?;
    ensure!(
        !fake
            .requests_to("POST", "/binding")
            .iter()
            .any(|r| r.path.contains("/big-")),
        "no pod of the refused gang bound"
    );
    berthd.stop().await?;
    ext.kill().await?;
    Ok(())
}

async fn grpcurl(addr: &str, method: &str, body: &Value) -> Result<Value> {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(berth_e2e::grpcurl_path()?)
            .args(["-plaintext", "-d", &body.to_string(), addr, method])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("grpcurl hung")??;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Issue 26 item 4 in kube mode: DryRun of a pod of a gang the cluster
/// holds (three members gated, waiting for a fourth) answers for the
/// whole gang from the watched PodGroup and pods, and DryRun of a gang
/// that cannot fit says which pod and why; nothing is written to the API
/// server by either.
#[tokio::test]
async fn a_gang_in_the_cluster_is_explained_before_it_runs() -> Result<()> {
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    // Synced (start waits for it): the cache holds the PodGroup and its
    // three members, gated at PreEnqueue, which writes nothing.
    let (fake, berthd, _dir) =
        start("dryrun", &[gang("train", 4)], &pods, "GenericWorkload=true").await?;
    // Writes, leaving out leader election's Lease (it renews on its own).
    let writes = |fake: &FakeApiServer| -> Vec<(String, String)> {
        fake.requests()
            .iter()
            .filter(|r| r.method != "GET" && !r.path.contains("/leases"))
            .map(|r| (r.method.clone(), r.path.clone()))
            .collect()
    };
    let writes_before = writes(&fake);
    let addr = berthd.addr.clone();

    let resp = grpcurl(
        &addr,
        "berth.v1.Scheduler/DryRun",
        &json!({"pod": member("train-3", "train", "1")}),
    )
    .await?;
    let g = &resp["podGroup"];
    ensure!(g["name"] == "train" && g["fits"] == true, "{resp}");
    ensure!(g["pods"].as_array().map(Vec::len) == Some(4), "{resp}");

    let huge: Vec<Value> = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    let body = json!({"podGroup": gang("huge", 5), "groupPods": huge});
    let resp = grpcurl(&addr, "berth.v1.Scheduler/DryRun", &body).await?;
    let g = &resp["podGroup"];
    ensure!(g["fits"] != true, "{resp}");
    ensure!(
        g["message"]
            == "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor",
        "{resp}"
    );
    let unplaced: Vec<&Value> = g["pods"]
        .as_array()
        .context("pods")?
        .iter()
        .filter(|p| p["placed"] != true)
        .collect();
    ensure!(
        unplaced.len() == 1
            && unplaced[0]["message"] == "0/4 nodes are available: 4 Insufficient cpu.",
        "{resp}"
    );

    // A dry run writes nothing: no binding, no status, no event.
    ensure!(writes(&fake) == writes_before, "{:?}", writes(&fake));
    berthd.stop().await?;
    Ok(())
}

/// Issue 34 item 2, through `kubectl berth why` (the operator's face of
/// the same client, reading the pod from the API server): a pod whose
/// PodGroup does not exist, and a pod of a gang short of members, wait
/// with GangScheduling's PreEnqueue message, exit 1, never "fits".
#[tokio::test]
async fn kubectl_berth_why_says_a_pod_waits_for_its_gang() -> Result<()> {
    let mut pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    pods.push(member("ghost-0", "ghost", "1"));
    let (_fake, berthd, dir) =
        start("why", &[gang("train", 4)], &pods, "GenericWorkload=true").await?;
    let kubeconfig = dir.0.join("kubeconfig").display().to_string();
    for (pod, want) in [
        (
            "ghost-0",
            "waiting for pods's pod group \"ghost\" to appear in scheduling queue",
        ),
        (
            "train-0",
            "waiting for minCount pods from a gang to appear in scheduling queue",
        ),
    ] {
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            tokio::process::Command::new(berth_e2e::kubectl_berth_path()?)
                .args([
                    "--kubeconfig",
                    &kubeconfig,
                    "--berth",
                    &berthd.addr,
                    "why",
                    pod,
                ])
                .env_remove("KUBECONFIG")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .context("kubectl-berth hung")??;
        let text = String::from_utf8(out.stdout)?;
        ensure!(
            out.status.code() == Some(1),
            "kubectl berth why {pod}: {}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            text.contains(&format!("Now: waits: GangScheduling holds it, {want}"))
                && !text.contains("fits"),
            "kubectl berth why {pod}:\n{text}"
        );
    }
    berthd.stop().await?;
    Ok(())
}
