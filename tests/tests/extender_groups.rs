//! Remote extenders at PodGroup gangs' group cycles, through the real
//! berthd (embedded cluster, `--feature-gates=GenericWorkload=true`) and
//! real extender processes (issue 26, item 3):
//!
//! * the Python `gang_quota.py` at GroupPermit refuses a gang over its CPU
//!   cap as a whole, and lets a smaller one through;
//! * the Rust `gang-zone` example at PlacementFeasible and Filter keeps a
//!   gang in one zone;
//! * extenders written before the group points, unchanged, keep working
//!   when their pods are scheduled in group cycles: the Python `label_tier.py`
//!   with its code generated from the protocol file as it was before them
//!   (`tests/fixtures/proto-before-group-points`), and the Rust
//!   `gang-permit` example.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use berth_client::EventType;
use berth_e2e::python::PyExtender;
use berth_e2e::{Berthd, Extender, TempDir, cpu_ticks as berthd_e2e_cpu, message, workspace_root};
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(120);

fn node(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
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

fn cluster(objects: &[Value]) -> String {
    serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))
        .unwrap_or_default()
}

/// A configuration enabling each `(name, endpoint, points)` extender by
/// multiPoint in the default profile.
fn config(extenders: &[(&str, String, &str)]) -> String {
    let mut enabled = Vec::new();
    let mut entries = String::new();
    for (name, endpoint, points) in extenders {
        enabled.push(format!("{{name: {name}}}"));
        entries.push_str(&format!(
            "- name: {name}\n  endpoint: {endpoint}\n  points: {points}\n  timeout: 10s\n"
        ));
    }
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{}]
berthExtenders:
{entries}",
        enabled.join(", ")
    )
}

/// berthd with GenericWorkload on, once every extender said Hello.
async fn start(dir: &TempDir, objects: &[Value], cfg: &str, extenders: &[&str]) -> Result<Berthd> {
    let cluster = dir.write("cluster.json", &cluster(objects))?;
    let cfg = dir.write("config.yaml", cfg)?;
    let mut berthd = Berthd::start(&[
        "--cluster",
        &cluster,
        "--config",
        &cfg,
        "--seed",
        "1",
        "--feature-gates",
        "GenericWorkload=true",
    ])
    .await?;
    // In whatever order they connect (a wait consumes the lines it reads).
    let mut waiting: Vec<&str> = extenders.to_vec();
    berthd
        .wait_for(|l| {
            if message(l) == "extender connected" {
                let name = l["fields"]["extender"].as_str().unwrap_or_default();
                waiting.retain(|w| *w != name);
            }
            waiting.is_empty()
        })
        .await?;
    Ok(berthd)
}

/// Applies `pods` and reads events until each has a Scheduled or a Failed
/// one: the first of each, by pod name (node, or message).
async fn outcomes(berthd: &Berthd, pods: &[Value]) -> Result<BTreeMap<String, (bool, String)>> {
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client.apply(pods, "").await?;
    let mut out = BTreeMap::new();
    while out.len() < pods.len() {
        let e = tokio::time::timeout(GUARD, events.message())
            .await
            .context("no event")??
            .context("the event stream ended")?;
        let pod = e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default();
        match e.r#type() {
            EventType::Scheduled => {
                out.entry(pod).or_insert((true, e.node.clone()));
            }
            EventType::Failed => {
                out.entry(pod).or_insert((false, e.message.clone()));
            }
            _ => {}
        }
    }
    Ok(out)
}

#[tokio::test]
async fn python_group_permit_refuses_a_gang_over_its_cpu_cap_as_a_whole() -> Result<()> {
    let mut ext =
        PyExtender::start_script("gang_quota.py", "127.0.0.1:0", &["--max-gang-cpu", "4"]).await?;
    let dir = TempDir::new("xgroups-quota")?;
    let cfg = config(&[(
        "gang-quota",
        format!("http://{}", ext.addr),
        "[groupPermit]",
    )]);
    let objects = [
        node("n0", json!({})),
        node("n1", json!({})),
        node("n2", json!({})),
        gang("big", 3),
        gang("small", 2),
    ];
    let berthd = start(&dir, &objects, &cfg, &["gang-quota"]).await?;
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("big-{i}"), "big", "2"))
        .chain((0..2).map(|i| member(&format!("small-{i}"), "small", "1")))
        .collect();
    let got = outcomes(&berthd, &pods).await?;
    let refused = "pod group default/big requests 6 CPUs, over the 4 CPUs a gang may take in namespace default";
    for i in 0..3 {
        let (bound, said) = &got[&format!("big-{i}")];
        ensure!(!bound && said.contains(refused), "big-{i}: {said}");
    }
    for i in 0..2 {
        ensure!(got[&format!("small-{i}")].0, "small-{i}: {:?}", got);
    }
    let mut client = berthd.client().await?;
    let pg = client.get("podgroups", "default", "big").await?;
    let cond = &pg["status"]["conditions"][0];
    ensure!(
        cond["status"] == "False"
            && cond["message"]
                .as_str()
                .is_some_and(|m| m.contains(refused)),
        "{pg}"
    );
    // The extender saw the group cycles, and nothing it could not read.
    ext.wait_for(|l| {
        l.contains("group permit group=default/big pods=3 allowed=False dry_run=False")
    })
    .await?;
    ext.wait_for(|l| l.contains("group permit group=default/small pods=2 allowed=True"))
        .await?;
    // Issue 34 item 4: a dry run asks GroupPermit as a what-if (dry_run
    // set), and a gang it would refuse is not called a fit.
    let wide: Vec<Value> = (0..3)
        .map(|i| member(&format!("wide-{i}"), "wide", "2"))
        .collect();
    let resp = client.dry_run_group(&gang("wide", 3), &wide, "").await?;
    let g = resp.pod_group.context("no podGroup in the answer")?;
    let refused_wide = "pod group default/wide requests 6 CPUs, over the 4 CPUs a gang may take in namespace default";
    ensure!(!g.fits && g.message.contains(refused_wide), "{g:?}");
    ensure!(
        g.pods
            .iter()
            .all(|p| p.placed && p.node.is_empty() && p.message.contains(refused_wide)),
        "{g:?}"
    );
    ensure!(
        g.preemption.is_none(),
        "no PodGroupPostFilter after a refusal: {g:?}"
    );
    ext.wait_for(|l| {
        l.contains("group permit group=default/wide pods=3 allowed=False dry_run=True")
    })
    .await?;
    ensure!(
        client.get("pods", "default", "wide-0").await.is_err(),
        "the dry run created a pod"
    );
    berthd.stop().await?;
    ext.kill().await?;
    Ok(())
}

/// Issue 34 item 1, for a gang a GroupPermit extender refuses: it rests
/// (over a window, the extender is asked nothing more about it and berthd
/// logs nothing), until the extender comes back after an outage: then it
/// is tried once more, and refused again, and rests again.
#[tokio::test]
async fn a_gang_refused_at_group_permit_rests_until_its_extender_is_back() -> Result<()> {
    let mut ext =
        PyExtender::start_script("gang_quota.py", "127.0.0.1:0", &["--max-gang-cpu", "4"]).await?;
    let addr = ext.addr.clone();
    let dir = TempDir::new("xgroups-rest")?;
    let cfg = config(&[("gang-quota", format!("http://{addr}"), "[groupPermit]")]);
    let objects = [
        node("n0", json!({})),
        node("n1", json!({})),
        node("n2", json!({})),
        gang("big", 3),
    ];
    let mut berthd = start(&dir, &objects, &cfg, &["gang-quota"]).await?;
    let pods: Vec<Value> = (0..3)
        .map(|i| member(&format!("big-{i}"), "big", "2"))
        .collect();
    let got = outcomes(&berthd, &pods).await?;
    ensure!(got.values().all(|(bound, _)| !bound), "{got:?}");
    berthd.wait_idle().await?;
    let refusal = "group permit group=default/big pods=3 allowed=False";
    ext.wait_for(|l| l.contains(refusal)).await?;
    let asked = |ext: &mut PyExtender| {
        while let Ok(l) = ext.lines.try_recv() {
            ext.seen.push(l);
        }
        ext.seen.iter().filter(|l| l.contains(refusal)).count()
    };
    let before = asked(&mut ext);
    // The quiet window starts once the idle summary that follows the
    // refusal has been read whole: its first line says how many pods it
    // lists after it (pending less unchanged), and those lines may still
    // be on their way when the first one is read.
    let refused =
        |l: &Value| message(l).starts_with("pending:") && message(l).contains("over the 4 CPUs");
    if !berthd.seen.iter().any(refused) {
        berthd.wait_for(refused).await?;
    }
    berthd.finish_idle_summary().await?;
    let lines = berthd.seen.len();
    let pid = berthd.pid().context("berthd exited")?;
    let ticks = berthd_e2e_cpu(pid)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = berthd_e2e_cpu(pid)? - ticks;
    berthd.read_available();
    ensure!(
        asked(&mut ext) == before,
        "the refused gang was retried while nothing changed"
    );
    ensure!(
        berthd.seen.len() == lines,
        "logged while idle: {:#?}",
        &berthd.seen[lines..]
    );
    ensure!(used < 3, "{used} CPU ticks in 3s");
    // The extender goes away and comes back: the gang it refused is tried
    // again, at once.
    ext.kill().await?;
    let mut ext =
        PyExtender::start_script("gang_quota.py", &addr, &["--max-gang-cpu", "4"]).await?;
    let back = berthd
        .wait_for(|l| message(l).starts_with("extender \"gang-quota\" is back:"))
        .await?;
    ensure!(back["fields"]["pods"] == 3, "{back}");
    ext.wait_for(|l| l.contains(refusal)).await?;
    berthd.stop().await?;
    ext.kill().await?;
    Ok(())
}

#[tokio::test]
async fn the_rust_gang_zone_example_keeps_a_gang_in_one_zone() -> Result<()> {
    let ext = Extender::start("gang-zone", &[]).await?;
    let dir = TempDir::new("xgroups-zone")?;
    let cfg = config(&[("gang-zone", ext.endpoint(), "[placementFeasible, filter]")]);
    let zone = |z: &str| json!({"topology.kubernetes.io/zone": z});
    let objects = [
        node("a1", zone("a")),
        node("b1", zone("b")),
        node("a2", zone("a")),
        node("b2", zone("b")),
        gang("train", 2),
    ];
    let berthd = start(&dir, &objects, &cfg, &["gang-zone"]).await?;
    // Three CPUs each: one pod per node, so the two pods take two nodes.
    let pods = [member("w0", "train", "3"), member("w1", "train", "3")];
    let got = outcomes(&berthd, &pods).await?;
    let nodes: Vec<&str> = got
        .values()
        .map(|(bound, node)| if *bound { node.as_str() } else { "" })
        .collect();
    ensure!(nodes.iter().all(|n| !n.is_empty()), "{got:?}");
    ensure!(nodes[0] != nodes[1], "{got:?}");
    ensure!(
        nodes[0][..1] == nodes[1][..1],
        "the gang spans zones: {got:?}"
    );
    // The extender was asked at each step of the group cycle.
    let asked = ext
        .lines()
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("request PlacementFeasible"))
        })
        .count();
    ensure!(asked >= 3, "PlacementFeasible asked {asked} times");
    berthd.stop().await?;
    ext.stop().await?;
    Ok(())
}

#[tokio::test]
async fn extenders_written_before_the_group_points_work_unchanged_in_group_cycles() -> Result<()> {
    let old_proto = workspace_root().join("tests/fixtures/proto-before-group-points");
    let gen_dir = TempDir::new("xgroups-oldgen")?;
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
    let rust = Extender::start("gang-permit", &[]).await?;
    let dir = TempDir::new("xgroups-old")?;
    let cfg = config(&[
        (
            "label-tier",
            format!("http://{}", py.addr),
            "[filter, score]",
        ),
        ("gang-permit", rust.endpoint(), "[permit]"),
    ]);
    let objects = [
        node("hdd-0", json!({"disk": "hdd"})),
        node("ssd-0", json!({"disk": "ssd"})),
        node("ssd-1", json!({"disk": "ssd"})),
        gang("train", 3),
    ];
    let berthd = start(&dir, &objects, &cfg, &["label-tier", "gang-permit"]).await?;
    // label-tier keeps each pod to ssd nodes (its annotation).
    let pods: Vec<Value> = (0..3)
        .map(|i| {
            let mut p = member(&format!("w{i}"), "train", "1");
            p["metadata"]["annotations"] = json!({"example.com/required-node-label": "disk=ssd"});
            p
        })
        .collect();
    let got = outcomes(&berthd, &pods).await?;
    for (pod, (bound, node)) in &got {
        ensure!(*bound && node.starts_with("ssd-"), "{pod}: {got:?}");
    }
    // Each pod's own cycle reached both, as before the group points.
    for i in 0..3 {
        py.wait_for(|l| l.contains(&format!("filter pod=default/w{i} ")))
            .await?;
        let pod = format!("pod=default/w{i}");
        rust.wait_for(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("request Permit") && m.contains(&pod))
        })
        .await?;
    }
    // Nothing on the stream was beyond them.
    ensure!(
        !py.seen.iter().any(|l| l.contains("empty message")),
        "{:?}",
        py.seen
    );
    berthd.stop().await?;
    py.kill().await?;
    rust.stop().await?;
    Ok(())
}
