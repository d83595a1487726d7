//! PodGroup gangs through the real berthd on its embedded cluster
//! (`--cluster` YAML with PodGroups, `--feature-gates=GenericWorkload=true`),
//! driven by the gRPC client and the real berthctl.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_e2e::{Berthd, berthctl_path, berthd_path, cpu_ticks, http_get, message, metric_sum};
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
            *m == "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor"
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
            && cond["message"]
                == "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor",
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

fn pod_group(name: &str, min: i32) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
    })
}

/// Writes `objects` as one YAML stream (`---` between documents).
fn yaml_file(dir: &TempDir, name: &str, objects: &[Value]) -> Result<String> {
    let mut text = String::new();
    for o in objects {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(o)?);
    }
    let path = dir.0.join(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

async fn grpcurl(addr: &str, method: &str, body: &Value) -> Result<std::process::Output> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(berth_e2e::grpcurl_path()?)
            .args(["-plaintext", "-d", &body.to_string(), addr, method])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("grpcurl hung")??;
    Ok(out)
}

/// Issue 26 item 4: a gang explained before it runs, through berthd,
/// berthctl and grpcurl. Nothing is created by any of it.
#[tokio::test]
async fn a_gang_is_explained_before_it_runs() -> Result<()> {
    let (berthd, dir) = start("dryrun", "GenericWorkload=true").await?;
    let addr = berthd.addr.clone();
    let mut client = berthd.client().await?;

    // A PodGroup and its pods that fit: where each would go.
    let mut fits = vec![pod_group("job", 4)];
    fits.extend((0..4).map(|i| member(&format!("job-{i}"), "job", "1")));
    let file = yaml_file(&dir, "job.yaml", &fits)?;
    let out = berthctl(&addr, &["dry-run", "-f", &file]).await?;
    ensure!(
        out.starts_with(
            "PodGroup default/job, profile default-scheduler: fits, 4 of 4 pods placed\n"
        ),
        "{out}"
    );
    ensure!(
        out.lines()
            .filter(|l| l.contains("job-") && l.contains(" g-"))
            .count()
            == 4,
        "{out}"
    );

    // One that cannot fit: which pod could not be placed and why per node,
    // the group's message as its condition would carry it.
    let mut big = vec![pod_group("big", 5)];
    big.extend((0..5).map(|i| member(&format!("big-{i}"), "big", "3500m")));
    let file = yaml_file(&dir, "big.yaml", &big)?;
    let json: Value =
        serde_json::from_str(&berthctl(&addr, &["dry-run", "-f", &file, "-o", "json"]).await?)?;
    let g = &json["podGroup"];
    ensure!(g["fits"].as_bool() != Some(true), "{json}");
    ensure!(
        g["message"]
            == "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor",
        "{json}"
    );
    let pods = g["pods"].as_array().context("pods")?;
    ensure!(pods.len() == 5, "{json}");
    let unplaced: Vec<&Value> = pods.iter().filter(|p| p["placed"] != true).collect();
    ensure!(unplaced.len() == 1, "{json}");
    ensure!(
        unplaced[0]["message"] == "0/4 nodes are available: 4 Insufficient cpu.",
        "{json}"
    );
    let rejections = unplaced[0]["rejections"].as_array().context("rejections")?;
    ensure!(rejections.len() == 4, "{json}");
    for r in rejections {
        ensure!(
            r["plugin"] == "NodeResourcesFit" && r["reasons"] == json!(["Insufficient cpu"]),
            "{r}"
        );
    }
    for p in pods.iter().filter(|p| p["placed"] == true) {
        ensure!(
            p["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("pod group is unschedulable, minCount (5)")),
            "{p}"
        );
    }
    let table = berthctl(&addr, &["dry-run", "-f", &file]).await?;
    ensure!(table.contains("fits no node:"), "{table}");

    // grpcurl, the same request by hand.
    let body = json!({"podGroup": pod_group("job", 4), "groupPods": fits[1..]});
    let out = grpcurl(&addr, "berth.v1.Scheduler/DryRun", &body).await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(resp["podGroup"]["fits"] == true, "{resp}");

    // A pod of a group already in the cluster: the three gated members of
    // `train` and this fourth one would all go now.
    let members: Vec<Value> = (0..3)
        .map(|i| member(&format!("train-{i}"), "train", "1"))
        .collect();
    client.apply(&members, "").await?;
    let body = json!({"pod": member("train-3", "train", "1")});
    let out = grpcurl(&addr, "berth.v1.Scheduler/DryRun", &body).await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: Value = serde_json::from_slice(&out.stdout)?;
    let g = &resp["podGroup"];
    ensure!(g["name"] == "train" && g["fits"] == true, "{resp}");
    ensure!(g["pods"].as_array().map(Vec::len) == Some(4), "{resp}");

    // A bad request names the field.
    let mut stray = member("stray", "other", "1");
    stray["metadata"]["name"] = json!("stray");
    let body = json!({"podGroup": pod_group("job", 4), "groupPods": [stray]});
    let out = grpcurl(&addr, "berth.v1.Scheduler/DryRun", &body).await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && err.contains("InvalidArgument")
            && err.contains("group_pods[0].spec.schedulingGroup.podGroupName: Invalid value"),
        "{err}"
    );

    // Simulate places many gangs, each all or nothing: `a` takes 2 CPUs on
    // each node, `b` (3 each) then fits nowhere; `c` fits in what is left.
    let mut many = Vec::new();
    for (name, cpu) in [("a", "2"), ("b", "3"), ("c", "1")] {
        many.push(pod_group(name, 4));
        many.extend((0..4).map(|i| member(&format!("{name}-{i}"), name, cpu)));
    }
    let file = yaml_file(&dir, "many.yaml", &many)?;
    let sim: Value =
        serde_json::from_str(&berthctl(&addr, &["simulate", "-f", &file, "-o", "json"]).await?)?;
    let groups = sim["podGroups"].as_array().context("podGroups")?;
    let verdicts: Vec<(String, bool)> = groups
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or("").to_string(),
                g["fits"] == true,
            )
        })
        .collect();
    ensure!(
        verdicts == [("a".into(), true), ("b".into(), false), ("c".into(), true)],
        "{sim}"
    );
    ensure!(sim["scheduled"] == 8 && sim["unschedulable"] == 4, "{sim}");
    let table = berthctl(&addr, &["simulate", "-f", &file]).await?;
    ensure!(table.contains("PODGROUP"), "{table}");

    // Nothing of it was created.
    for name in ["job-0", "big-0", "a-0"] {
        ensure!(
            client.get("pods", "default", name).await.is_err(),
            "{name} created"
        );
    }
    Ok(())
}

/// berthd on [`CLUSTER`] plus `extra` objects, with GenericWorkload on,
/// its HTTP endpoints, and repeated failures summarized every second.
async fn start_observed(tag: &str, extra: &[Value]) -> Result<(Berthd, TempDir)> {
    let dir = std::env::temp_dir().join(format!("berth-gang-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dir = TempDir(dir);
    let mut text = CLUSTER.to_string();
    for o in extra {
        text.push_str(&format!("- {o}\n"));
    }
    let file = dir.0.join("cluster.yaml");
    std::fs::write(&file, text)?;
    let file = file.display().to_string();
    let mut berthd = Berthd::start(&[
        "--cluster",
        &file,
        "--seed",
        "1",
        "--feature-gates",
        "GenericWorkload=true",
        "--http-listen",
        "127.0.0.1:0",
        "--failure-summary-interval",
        "1s",
    ])
    .await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced"))
        .await?;
    Ok((berthd, dir))
}

/// Applies the five pods of `huge` (3.5 CPUs each: four nodes hold four)
/// and waits until each has failed once.
async fn huge_fails(berthd: &Berthd) -> Result<()> {
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    let pods: Vec<Value> = (0..5)
        .map(|i| member(&format!("huge-{i}"), "huge", "3500m"))
        .collect();
    client.apply(&pods, "").await?;
    let mut failed = std::collections::BTreeSet::new();
    while failed.len() < 5 {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("no event")??
            .context("stream ended")?;
        if e.r#type() == berth_client::EventType::Failed {
            failed.insert(e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default());
        }
    }
    Ok(())
}

/// What berthd's own counters say at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counters {
    /// `scheduler_schedule_attempts_total`, every result.
    pod_attempts: f64,
    /// `scheduler_podgroup_schedule_attempts_total`, every result.
    group_attempts: f64,
}

async fn counters(berthd: &Berthd) -> Result<Counters> {
    let (status, text) = http_get(&berthd.http_addr()?, "/metrics").await?;
    ensure!(status == 200, "/metrics: {status}");
    Ok(Counters {
        pod_attempts: metric_sum(&text, "scheduler_schedule_attempts_total", &[]),
        group_attempts: metric_sum(&text, "scheduler_podgroup_schedule_attempts_total", &[]),
    })
}

/// How long the idle window lasts: what is counted over it is the
/// process's own CPU time, log lines and attempt counters, never how long
/// anything took.
const IDLE_WINDOW: Duration = Duration::from_secs(5);

/// Issue 34 item 1, done when: an idle berthd holding a gang that cannot
/// fit rests. Over a window its own counters say it did nothing: no
/// scheduling attempt (`scheduler_schedule_attempts_total`,
/// `scheduler_podgroup_schedule_attempts_total`), no log line, and well
/// under 1% of a core (`/proc/PID/stat`). Before, it retried the gang
/// about 1,000 times a second and logged each attempt. A node that fits
/// the pod that did not fit wakes it, and the gang binds whole.
#[tokio::test]
async fn an_idle_berthd_holding_a_gang_that_cannot_fit_rests() -> Result<()> {
    let (mut berthd, _dir) = start_observed("idle", &[]).await?;
    huge_fails(&berthd).await?;
    berthd.wait_idle().await?;
    let pid = berthd.pid().context("berthd exited")?;
    let before = counters(&berthd).await?;
    berthd.finish_idle_summary().await?;
    let ticks = cpu_ticks(pid)?;
    let lines = berthd.seen.len();
    tokio::time::sleep(IDLE_WINDOW).await;
    let used = cpu_ticks(pid)? - ticks;
    berthd.read_available();
    let logged: Vec<&Value> = berthd.seen[lines..].iter().collect();
    let after = counters(&berthd).await?;
    ensure!(
        after == before,
        "attempts during the idle window: {before:?} -> {after:?}"
    );
    ensure!(logged.is_empty(), "logged while idle: {logged:#?}");
    // CLK_TCK is 100 on Linux: 1% of the window is `IDLE_WINDOW` in
    // hundredths of a second, over a hundred.
    let one_percent = IDLE_WINDOW.as_millis() as u64 / 1000;
    ensure!(
        used < one_percent,
        "{used} CPU ticks in {IDLE_WINDOW:?} ({one_percent} is 1% of a core)"
    );
    eprintln!("idle: {used} CPU ticks, 0 log lines, 0 attempts in {IDLE_WINDOW:?}");

    // A fifth node: NodeResourcesFit's hint accepts it for the pod that
    // fitted nowhere, and the gang is retried and bound whole.
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client
        .apply(
            &[
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "g-4"},
                "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}),
            ],
            "",
        )
        .await?;
    let mut bound = std::collections::BTreeSet::new();
    while bound.len() < 5 {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("no event")??
            .context("stream ended")?;
        if e.r#type() == berth_client::EventType::Scheduled {
            bound.insert(e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default());
        }
    }
    berthd.stop().await?;
    Ok(())
}

/// Issue 34, logs proportional to changes: a gang retried after an event
/// that did not help (a small bound pod deleted) fails as before; berthd
/// logs no new INFO line per pod or for the group, and the repeats are
/// summarized once, with what still waits and why.
#[tokio::test]
async fn a_failure_repeating_itself_is_summarized_not_logged_again() -> Result<()> {
    let small = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "small", "namespace": "default"},
        "spec": {"nodeName": "g-0", "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "100m"}}}]}});
    let (mut berthd, _dir) = start_observed("repeat", &[small]).await?;
    huge_fails(&berthd).await?;
    berthd.wait_idle().await?;
    let first = counters(&berthd).await?;
    berthd.read_available();
    let lines = berthd.seen.len();
    berthctl(&berthd.addr, &["delete", "pod", "small"]).await?;
    let summary = berthd
        .wait_for(|l| message(l).starts_with("still unschedulable"))
        .await?;
    let again = counters(&berthd).await?;
    ensure!(
        again.group_attempts == first.group_attempts + 1.0,
        "one more group cycle: {first:?} -> {again:?}"
    );
    let text = message(&summary);
    ensure!(
        text == "still unschedulable: 6 attempts repeated their last failure in the last 1s: 5 pods wait: 4 for \"pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor\", 1 for \"0/4 nodes are available: 4 Insufficient cpu.\"",
        "{summary}"
    );
    // docs/gang-scheduling.md quotes it at the default interval.
    berth_e2e::page_shows(
        "docs/gang-scheduling.md",
        &text.replace("in the last 1s:", "in the last 60s:"),
    )?;
    let info: Vec<&Value> = berthd.seen[lines..]
        .iter()
        .filter(|l| {
            let m = message(l);
            m.starts_with("unschedulable:") || m.starts_with("Unable to schedule a pod group")
        })
        .collect();
    ensure!(info.is_empty(), "failures logged again: {info:#?}");
    berthd.stop().await?;
    Ok(())
}

/// berthctl with `args`: its exit code and stdout.
async fn berthctl_exit(addr: &str, args: &[&str]) -> Result<(i32, String)> {
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
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout)?,
    ))
}

/// Issue 34 item 2: a pod whose PodGroup does not exist, and a pod of a
/// gang that lacks members, wait with GangScheduling's PreEnqueue message
/// everywhere berth answers about them: DryRun (grpcurl), Simulate
/// (berthctl), GetQueue, and `berthctl why` (exit 1), never as a fit.
#[tokio::test]
async fn a_pod_waiting_for_its_gang_is_said_to_wait_everywhere() -> Result<()> {
    let (berthd, dir) = start("waits", "GenericWorkload=true").await?;
    let addr = berthd.addr.clone();
    let mut client = berthd.client().await?;
    let mut pods = vec![member("ghost-0", "ghost", "1")];
    pods.extend((0..3).map(|i| member(&format!("train-{i}"), "train", "1")));
    client.apply(&pods, "").await?;
    let ghost = "waiting for pods's pod group \"ghost\" to appear in scheduling queue";
    let short = "waiting for minCount pods from a gang to appear in scheduling queue";
    let queue = client.get_queue("default").await?;
    for (pod, want) in [("ghost-0", ghost), ("train-0", short)] {
        let q = queue
            .iter()
            .find(|q| q.name == pod)
            .with_context(|| format!("{pod} not queued: {queue:?}"))?;
        ensure!(q.last_failure == want, "GetQueue {pod}: {q:?}");

        let live = client.get("pods", "default", pod).await?;
        let out = grpcurl(&addr, "berth.v1.Scheduler/DryRun", &json!({"pod": live})).await?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let resp: Value = serde_json::from_slice(&out.stdout)?;
        let g = &resp["podGroup"];
        ensure!(
            resp["message"] == want
                && g["fits"] != true
                && g["preEnqueue"]["plugin"] == "GangScheduling"
                && g["preEnqueue"]["reasons"] == json!([want])
                && resp["selectedNode"].is_null(),
            "DryRun {pod}: {resp}"
        );

        let file = yaml_file(
            &dir,
            &format!("{pod}.yaml"),
            &[member(
                pod,
                live["spec"]["schedulingGroup"]["podGroupName"]
                    .as_str()
                    .unwrap_or_default(),
                "1",
            )],
        )?;
        let sim: Value = serde_json::from_str(
            &berthctl(&addr, &["simulate", "-f", &file, "-o", "json"]).await?,
        )?;
        let placed = &sim["pods"][0];
        ensure!(
            placed["node"].is_null() && placed["reason"] == want,
            "Simulate {pod}: {sim}"
        );

        let (code, text) = berthctl_exit(&addr, &["why", pod]).await?;
        ensure!(code == 1, "why {pod} exit {code}:\n{text}");
        ensure!(
            text.contains(&format!("Now: waits: GangScheduling holds it, {want}")),
            "why {pod}:\n{text}"
        );
        ensure!(
            !text.contains("fits") && !text.contains("Successfully"),
            "why {pod}:\n{text}"
        );
    }
    let (_, text) = berthctl_exit(&addr, &["why", "train-0"]).await?;
    ensure!(
        text.contains("Gang default/train needs 4 pods (minCount): 3 exist, 0 placed.\n")
            && text.contains("(1 more pod needed)"),
        "{text}"
    );
    Ok(())
}

/// Issue 34 item 3: `why` for a gang in plain words: the gang, its
/// minCount, how many pods exist and are placed, which pod fails where and
/// why, what preemption would do, each once; raw JSON only with `-o json`.
#[tokio::test]
async fn why_explains_a_gang_in_plain_words() -> Result<()> {
    let (berthd, _dir) = start_observed("why", &[]).await?;
    huge_fails(&berthd).await?;
    let (code, text) = berthctl_exit(&berthd.addr, &["why", "huge-0"]).await?;
    ensure!(code == 1, "exit {code}:\n{text}");
    let gang = text
        .split_once("\n\n")
        .map(|(_, g)| g)
        .context("no blank line before the gang")?;
    let want = "\
Gang default/huge needs 5 pods (minCount): 5 exist, 0 placed.
Now: does not fit: minCount (5) cannot be satisfied: 4 scheduled, 0 remaining.
POD                 RESULT
huge-1              placed, undone with the group
huge-2              placed, undone with the group
huge-3              placed, undone with the group
huge-4              placed, undone with the group
huge-0 (this pod)   fits no node: 0/4 nodes are available: 4 Insufficient cpu.
Preemption would not help: No preemption victims found for incoming preemptor.

huge-0 fits no node:
NODE   PLUGIN             REASON
g-0    NodeResourcesFit   Insufficient cpu
g-1    NodeResourcesFit   Insufficient cpu
g-2    NodeResourcesFit   Insufficient cpu
g-3    NodeResourcesFit   Insufficient cpu
";
    ensure!(gang == want, "got:\n{gang}\nwanted:\n{want}");
    for once in [
        "minCount (5) cannot be satisfied",
        "No preemption victims found",
        "pod group preemption",
    ] {
        ensure!(
            text.matches(once).count() <= 1,
            "{once:?} said more than once:\n{text}"
        );
    }
    ensure!(!text.contains('{'), "raw JSON in the table output:\n{text}");
    let (_, json) = berthctl_exit(&berthd.addr, &["why", "huge-0", "-o", "json"]).await?;
    let v: Value = serde_json::from_str(&json)?;
    ensure!(
        v["fits"] == false && v["dryRun"]["podGroup"]["minCount"] == 5,
        "{v}"
    );
    berthd.stop().await?;
    Ok(())
}
