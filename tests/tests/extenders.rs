//! The example extenders (and the `faulty` test tool) as real processes,
//! driven through the real berthd: each test starts the extenders it needs
//! on loopback ports, berthd with a configuration naming them, applies pods
//! and waits on what berthd, the extenders and the cluster say (log lines,
//! scheduling events, RPC answers), never on time.
//!
//! Every test ends with the same accounting: each pod is either bound, with
//! exactly one Scheduled event, or unbound and in berthd's queue with none;
//! and each reservation an extender saw was either undone by an Unreserve
//! it saw too, or is the attempt that bound the pod.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use berth_client::pb::EventType;
use berth_e2e::{Extender, message};
use serde_json::{Value, json};

mod support;
use support::*;

// ---------------------------------------------------------------------------
// gpu-share

/// Three nodes: gpu-a with two 16 GiB GPUs, gpu-b with one 8 GiB GPU, and
/// cpu-1 without any. None advertises example.com/gpu-mem.
const GPU_CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: gpu-a
  annotations: {example.com/gpu-memory-mib: "16384"}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "50", example.com/gpu: "2"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: gpu-b
  annotations: {example.com/gpu-memory-mib: "8192"}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "50", example.com/gpu: "1"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: cpu-1
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "50"}
  conditions: [{type: Ready, status: "True"}]
"#;

/// The state file as JSON.
fn ledger(path: &std::path::Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// gpu-share places GPU pods as its Score says (the fullest GPU that fits
/// wins; the profile scores with gpu-share alone), a pod no single GPU fits
/// stays pending with its reason, and its ledger is exact after a pod failed
/// at PreBind (volume-prebind, every 2nd provisioning) and was retried: the
/// failed attempt's reservation was released at both extenders.
#[tokio::test]
async fn gpu_share_bin_packs_and_keeps_an_exact_ledger() -> Result<()> {
    let state = std::env::temp_dir().join(format!(
        "berth-extenders-{}-gpu-ledger.json",
        std::process::id()
    ));
    let gpu = Extender::start("gpu-share", &["--state-file", &state.display().to_string()]).await?;
    let vol = Extender::start("volume-prebind", &["--fail-every", "2"]).await?;
    let config = format!(
        r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: gpu-share}}]}}
    score:
      disabled: [{{name: "*"}}]
      enabled: [{{name: gpu-share}}]
    reserve: {{enabled: [{{name: gpu-share}}, {{name: volume-prebind}}]}}
    preBind: {{enabled: [{{name: volume-prebind}}]}}
    postBind: {{enabled: [{{name: gpu-share}}, {{name: volume-prebind}}]}}
berthExtenders:
- name: gpu-share
  endpoint: {}
  points: [filter, score, reserve, postBind]
  managedResources: [{{name: example.com/gpu-mem, ignoredByScheduler: true}}]
- name: volume-prebind
  endpoint: {}
  points: [reserve, preBind, postBind]
"#,
        gpu.endpoint(),
        vol.endpoint()
    );
    let mut s = start(
        "gpu",
        GPU_CLUSTER,
        &config,
        &["gpu-share", "volume-prebind"],
    )
    .await?;

    // One at a time, each seeing the ledger the ones before left:
    // (pod, MiB, node, GPU) as best fit and bin-packing have it.
    let plan = [
        // gpu-b's 8 GiB GPU ends fuller (73) than one of gpu-a's (36).
        ("p1", 6000, "gpu-b", 0),
        // gpu-b has 2192 MiB left: gpu-a.
        ("p2", 4000, "gpu-a", 0),
        // gpu-a's GPU 0 fits it with 384 MiB to spare: 97.
        ("p3", 12000, "gpu-a", 0),
        // gpu-b is left with 192 MiB (97) rather than gpu-a's GPU 1 (12).
        ("p4", 2000, "gpu-b", 0),
    ];
    for (name, mib, node, gpu_index) in plan {
        s.apply(&[with_gpu_mem(pod("ml", name), mib)]).await?;
        assert_eq!(s.bound("ml", name).await?, node, "{name}");
        let line = gpu
            .wait_for(|l| log_message_starts(l, &format!("committed pod=ml/{name} ")))
            .await?;
        assert_eq!(line["fields"]["gpu"], gpu_index, "{name}: {line}");
    }

    // 20000 MiB fits no single GPU, whatever the node's total.
    s.apply(&[with_gpu_mem(pod("ml", "big"), 20000)]).await?;
    let failed = s.failed("ml", "big", 1).await?;
    assert_eq!(
        failed,
        "0/3 nodes are available: 3 node(s) didn't have a GPU with enough free memory. \
         no new claims to deallocate, preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    );
    assert_eq!(
        s.condition("ml", "big").await?,
        ("Unschedulable".into(), failed)
    );

    // v1 is the 1st provisioning (fine), v2 the 2nd (fails at PreBind, then
    // is retried as the 3rd, fine). Both fit only gpu-a's GPU 1.
    let v1 = annotated(
        with_gpu_mem(pod("ml", "v1"), 1000),
        "example.com/volume-size",
        "1Gi",
    );
    s.apply(&[v1]).await?;
    assert_eq!(s.bound("ml", "v1").await?, "gpu-a");
    let v2 = annotated(
        with_gpu_mem(pod("ml", "v2"), 1000),
        "example.com/volume-size",
        "1Gi",
    );
    s.apply(&[v2]).await?;
    let failure = s.failed("ml", "v2", 1).await?;
    assert!(
        failure.contains(r#"extender "volume-prebind" failed at PreBind"#)
            && failure.contains("attempt 2 is a multiple of --fail-every 2"),
        "{failure}"
    );
    assert_eq!(s.bound("ml", "v2").await?, "gpu-a");
    gpu.wait_for(|l| log_message_starts(l, "committed pod=ml/v2 "))
        .await?;

    // The failed attempt of v2 was undone at gpu-share (released) and
    // volume-prebind (Unreserve received), and it was the only one.
    let released: Vec<Value> = gpu
        .lines()
        .into_iter()
        .filter(|l| log_message_starts(l, "released "))
        .collect();
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(
        message(&released[0]),
        "released pod=ml/v2 node=gpu-a gpu=1 mib=1000 used=1000"
    );
    let first_attempt = field(&released[0], "reservation").to_string();
    vol.wait_until("v2's Unreserve", |l| {
        reservations(l, "Unreserve", "ml/v2").contains(&first_attempt)
    })
    .await?;

    // The ledger: exactly the six bound pods, committed.
    let mut want = BTreeMap::new();
    for (name, mib, node, gpu_index) in plan
        .into_iter()
        .chain([("v1", 1000, "gpu-a", 1), ("v2", 1000, "gpu-a", 1)])
    {
        let uid = s.uid("ml", name).await?;
        want.insert(uid, (format!("ml/{name}"), node, gpu_index, mib));
    }
    let l = ledger(&state)?;
    assert_eq!(
        l["used"],
        json!({"gpu-a": [16000, 2000], "gpu-b": [8000]}),
        "{l:#}"
    );
    let allocations = l["allocations"].as_object().context("allocations")?;
    assert_eq!(allocations.len(), want.len(), "{l:#}");
    for (uid, (pod, node, gpu_index, mib)) in &want {
        let a = &allocations[uid];
        assert_eq!(
            (&a["pod"], &a["node"], &a["gpu"], &a["mib"], &a["committed"]),
            (
                &json!(pod),
                &json!(node),
                &json!(gpu_index),
                &json!(mib),
                &json!(true)
            ),
            "{uid}: {l:#}"
        );
    }
    let v2_uid = s.uid("ml", "v2").await?;
    assert_ne!(allocations[&v2_uid]["reservation"], first_attempt.as_str());

    let names = ["p1", "p2", "p3", "p4", "big", "v1", "v2"];
    let pods: Vec<(&str, &str)> = names.iter().map(|n| ("ml", *n)).collect();
    let placed = s.accounting(&pods).await?;
    assert_eq!(placed["ml/big"], None);
    every_rejected_reservation_undone(&gpu, &placed).await?;
    every_rejected_reservation_undone(&vol, &placed).await?;
    s.stop().await?;
    std::fs::remove_file(&state).ok();
    Ok(())
}

// ---------------------------------------------------------------------------
// volume-prebind, gang-permit, quota-core

/// volume-prebind failing PreBind for pods named flaky-*: the pod is
/// retried with backoff (never bound, never lost), each failed attempt is
/// unreserved, other pods bind; once the extender runs without the fault,
/// the pod binds, once.
#[tokio::test]
async fn volume_prebind_failure_retries_the_pod_and_unreserves_each_attempt() -> Result<()> {
    let mut vol = Extender::start("volume-prebind", &["--fail-pods", "^flaky-"]).await?;
    let cfg = config(
        "    reserve: {enabled: [{name: volume-prebind}]}\n    \
         preBind: {enabled: [{name: volume-prebind}]}\n    \
         postBind: {enabled: [{name: volume-prebind}]}",
        &format!(
            "- name: volume-prebind\n  endpoint: {}\n  points: [reserve, preBind, postBind]\n  timeout: 5s",
            vol.endpoint()
        ),
    );
    let mut s = start("volume", &plain_nodes(2), &cfg, &["volume-prebind"]).await?;
    let sized =
        |name: &str, size: &str| annotated(pod("default", name), "example.com/volume-size", size);
    s.apply(&[
        sized("flaky-0", "5Gi"),
        sized("ok-0", "1Gi"),
        pod("default", "plain"),
    ])
    .await?;

    let node = s.bound("default", "ok-0").await?;
    vol.wait_for(|l| {
        message(l) == format!("provisioned volume pod=default/ok-0 node={node} size=1Gi")
    })
    .await?;
    s.bound("default", "plain").await?;

    // Two failed attempts: each named the extender and the reason, each
    // was unreserved.
    let failure = s.failed("default", "flaky-0", 2).await?;
    assert!(
        failure.starts_with(
            r#"running PreBind plugin "volume-prebind": extender "volume-prebind" failed at PreBind: "#
        )
            && failure.ends_with(
                "volume provisioning failed for pod default/flaky-0: its name matches --fail-pods ^flaky-"
            ),
        "{failure}"
    );
    let (reason, condition) = s.condition("default", "flaky-0").await?;
    assert_eq!(reason, "SchedulerError");
    assert!(
        condition.contains(r#"extender "volume-prebind""#),
        "{condition}"
    );
    vol.wait_count(2, "provisioning failures of flaky-0", |l| {
        log_message_starts(l, "provisioning failed pod=default/flaky-0 ")
    })
    .await?;
    vol.wait_until("both failed attempts of flaky-0 unreserved", |l| {
        all_undone_at_some_point(l, "default/flaky-0", 2)
    })
    .await?;
    let lines = vol.lines();
    assert_eq!(count(&lines, "provisioned volume pod=default/flaky-0 "), 0);
    assert_eq!(count(&lines, "provisioned volume pod=default/plain "), 0);
    let pods = [
        ("default", "flaky-0"),
        ("default", "ok-0"),
        ("default", "plain"),
    ];
    let placed = s.accounting(&pods).await?;
    assert_eq!(placed["default/flaky-0"], None);

    // Without the fault, the next retry provisions and binds it, once.
    vol.restart_with::<&str>(&[]).await?;
    wait_reconnected(&mut s.berthd, "volume-prebind").await?;
    let node = s.bound("default", "flaky-0").await?;
    vol.wait_for(|l| {
        message(l) == format!("provisioned volume pod=default/flaky-0 node={node} size=5Gi")
    })
    .await?;
    let placed = s.accounting(&pods).await?;
    assert!(placed.values().all(Option::is_some), "{placed:?}");
    every_rejected_reservation_undone(&vol, &placed).await?;
    let lines = vol.lines();
    assert_eq!(count(&lines, "provisioned volume pod=default/flaky-0 "), 1);
    assert_eq!(count(&lines, "provisioned volume pod=default/ok-0 "), 1);
    s.stop().await
}

/// gang-permit: the members of a group of three wait at Permit until the
/// third is reserved, then all bind; a group that can never complete is
/// rejected at its wait timeout, each member is unreserved and goes back to
/// the queue.
#[tokio::test]
async fn gang_permit_holds_a_group_until_complete_and_rejects_an_incomplete_one() -> Result<()> {
    let gang = Extender::start("gang-permit", &["--wait-timeout", "8s"]).await?;
    let cfg = config(
        "    reserve: {enabled: [{name: gang-permit}]}\n    \
         permit: {enabled: [{name: gang-permit}]}",
        &format!(
            "- name: gang-permit\n  endpoint: {}\n  points: [reserve, permit]\n  timeout: 5s",
            gang.endpoint()
        ),
    );
    let mut s = start("gang", &plain_nodes(2), &cfg, &["gang-permit"]).await?;
    let member = |group: &str, name: &str, min: &str| {
        annotated(
            labelled(pod("default", name), "pod-group.example.com/name", group),
            "pod-group.example.com/min-member",
            min,
        )
    };
    // The incomplete group first: its clock runs while the other completes.
    s.apply(&[member("lone", "lone-0", "3"), member("lone", "lone-1", "3")])
        .await?;
    s.apply(&[member("job", "job-0", "3"), member("job", "job-1", "3")])
        .await?;
    for name in ["lone-0", "lone-1", "job-0", "job-1"] {
        s.events
            .wait_count(EventType::Waiting, "default", name, 1)
            .await?;
    }
    gang.wait_until("two job members waiting", |l| {
        l.iter().any(|l| {
            log_message_starts(l, "member waiting group=default/job ")
                && message(l).ends_with("reserved=2/3")
        })
    })
    .await?;
    // Held: neither is bound while the group is short of one.
    for name in ["job-0", "job-1"] {
        assert!(
            s.events
                .of(EventType::Scheduled, "default", name)
                .is_empty()
        );
        assert_eq!(
            s.pod("default", name).await?["spec"]["nodeName"],
            Value::Null
        );
    }
    s.apply(&[member("job", "job-2", "3")]).await?;
    for name in ["job-0", "job-1", "job-2"] {
        s.bound("default", name).await?;
    }
    gang.wait_for(|l| {
        message(l) == "group complete group=default/job pod=default/job-2 reserved=3/3"
    })
    .await?;
    let lines = gang.lines();
    for name in ["job-0", "job-1"] {
        assert_eq!(
            count(
                &lines,
                &format!("member allowed group=default/job pod=default/{name}")
            ),
            1
        );
    }

    // The lone group times out at Permit: rejected, unreserved, requeued.
    for name in ["lone-0", "lone-1"] {
        let failure = s.failed("default", name, 1).await?;
        assert!(failure.contains("gang-permit"), "{name}: {failure}");
        gang.wait_until(&format!("{name}'s Unreserve"), |l| {
            all_undone_at_some_point(l, &format!("default/{name}"), 1)
        })
        .await?;
    }
    gang.wait_for(|l| log_message_starts(l, "member unreserved group=default/lone "))
        .await?;
    let pods = [
        ("default", "lone-0"),
        ("default", "lone-1"),
        ("default", "job-0"),
        ("default", "job-1"),
        ("default", "job-2"),
    ];
    let placed = s.accounting(&pods).await?;
    assert_eq!(placed["default/lone-0"], None);
    assert_eq!(placed["default/lone-1"], None);
    s.stop().await
}

/// quota-core: its pods (labelled) in team-a are admitted within the
/// 2000m quota and placed where the core chose; the next one is refused
/// with the quota reason; other pods skip it at PreFilter and never reach
/// its Filter; a bound pod's admission becomes bound usage at PostBind
/// (counted once); a cycle berthd's own Filter ends releases its admission.
#[tokio::test]
async fn quota_core_admits_within_quota_and_leaves_other_pods_alone() -> Result<()> {
    let core = Extender::start("quota-core", &["--quota", "team-a=2000"]).await?;
    let cfg = config(
        "    preFilter: {enabled: [{name: quota-core}]}\n    \
         filter: {enabled: [{name: quota-core}]}\n    \
         reserve: {enabled: [{name: quota-core}]}\n    \
         postBind: {enabled: [{name: quota-core}]}",
        &format!(
            "- name: quota-core\n  endpoint: {}\n  points: [preFilter, filter, reserve, postBind]\n  timeout: 5s",
            core.endpoint()
        ),
    );
    let mut s = start("quota", &plain_nodes(2), &cfg, &["quota-core"]).await?;
    let app = |ns: &str, name: &str, cpu: &str| {
        with_cpu(
            labelled(pod(ns, name), "quota-core.example.com/app", "batch"),
            cpu,
        )
    };

    // n1 and n2 have 4000m free each: a1 goes to n1 (first by name), then
    // n2 has the most free.
    for (name, node, used) in [("a1", "n1", 1000), ("a2", "n2", 2000)] {
        s.apply(&[app("team-a", name, "1000m")]).await?;
        assert_eq!(s.bound("team-a", name).await?, node);
        core.wait_for(|l| {
            message(l)
                == format!(
                    "bound pod=team-a/{name} node={node} cpu=1000m namespace=team-a used={used}m/2000m"
                )
        })
        .await?;
    }
    s.apply(&[app("team-a", "a3", "500m")]).await?;
    let failure = s.failed("team-a", "a3", 1).await?;
    let reason = "namespace team-a over quota: requested 500m, used 2000m of 2000m";
    assert!(failure.contains(reason), "{failure}");
    assert_eq!(s.condition("team-a", "a3").await?.1, failure);

    // Pods without the label: scheduled as usual, skipped at PreFilter.
    s.apply(&[pod("team-a", "web"), pod("default", "web")])
        .await?;
    s.bound("team-a", "web").await?;
    s.bound("default", "web").await?;

    // A pod berthd's own Filter rejects everywhere: admitted on the node
    // the core picked, released at the end of the cycle.
    let mut picky = app("team-b", "picky", "100m");
    picky["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    s.apply(&[picky]).await?;
    core.wait_for(|l| {
        message(l)
            == "released pod=team-b/picky cpu=100m namespace=team-b used=0m/unlimited (the cycle ended unreserved)"
    })
    .await?;

    let lines = core.lines();
    for pod in ["team-a/web", "default/web"] {
        assert_eq!(requests(&lines, "PreFilter", pod).len(), 1, "{pod}");
        assert_eq!(requests(&lines, "Filter", pod).len(), 0, "{pod}");
    }
    for pod in ["team-a/a1", "team-a/a2"] {
        assert_eq!(requests(&lines, "Filter", pod).len(), 1, "{pod}");
        // Bound: the admission moved to bound usage, never released.
        assert_eq!(count(&lines, &format!("released pod={pod} ")), 0, "{pod}");
    }
    assert_eq!(count(&lines, "admitted pod=team-a/a3 "), 0);
    let pods = [
        ("team-a", "a1"),
        ("team-a", "a2"),
        ("team-a", "a3"),
        ("team-a", "web"),
        ("default", "web"),
        ("team-b", "picky"),
    ];
    let placed = s.accounting(&pods).await?;
    assert_eq!(placed["team-a/a3"], None);
    assert_eq!(placed["team-b/picky"], None);
    every_rejected_reservation_undone(&core, &placed).await?;
    s.stop().await
}

// ---------------------------------------------------------------------------
// managedResources

/// With gpu-share managing example.com/gpu-mem (ignoredByScheduler), pods
/// without it never reach gpu-share, and pods with it fit although no node
/// advertises it. The control: the same resource not ignored makes
/// NodeResourcesFit refuse the GPU pod, and an extender without
/// managedResources sees every pod.
#[tokio::test]
async fn managed_resources_route_pods_and_hide_the_resource_from_node_resources_fit() -> Result<()>
{
    let gpu = Extender::start("gpu-share", &[]).await?;
    let entry = |name: &str, managed: &str| {
        format!(
            "- name: {name}\n  endpoint: {}\n  points: [filter, score, reserve, postBind]\n  timeout: 5s\n{managed}",
            gpu.endpoint()
        )
    };
    let plugins = |name: &str| {
        format!(
            "    filter: {{enabled: [{{name: {name}}}]}}\n    \
             score: {{enabled: [{{name: {name}}}]}}\n    \
             reserve: {{enabled: [{{name: {name}}}]}}\n    \
             postBind: {{enabled: [{{name: {name}}}]}}"
        )
    };
    let managed = "  managedResources: [{name: example.com/gpu-mem, ignoredByScheduler: true}]";
    let cfg = config(&plugins("gpu-share"), &entry("gpu-share", managed));
    let mut s = start("managed", GPU_CLUSTER, &cfg, &["gpu-share"]).await?;
    s.apply(&[
        with_gpu_mem(pod("ml", "train"), 4000),
        pod("ml", "cpu-a"),
        pod("ml", "cpu-b"),
    ])
    .await?;
    let node = s.bound("ml", "train").await?;
    assert!(node == "gpu-a" || node == "gpu-b", "{node}");
    s.bound("ml", "cpu-a").await?;
    s.bound("ml", "cpu-b").await?;
    gpu.wait_for(|l| log_message_starts(l, "committed pod=ml/train "))
        .await?;
    let lines = gpu.lines();
    assert_eq!(
        count(&lines, "cycle started cycle="),
        1,
        "only train's cycle"
    );
    assert_eq!(requests(&lines, "Filter", "ml/train").len(), 1);
    for p in ["ml/cpu-a", "ml/cpu-b"] {
        assert!(
            !lines.iter().any(|l| field(l, "pod") == p),
            "{p} reached gpu-share"
        );
    }
    s.accounting(&[("ml", "train"), ("ml", "cpu-a"), ("ml", "cpu-b")])
        .await?;
    every_rejected_reservation_undone(
        &gpu,
        &BTreeMap::from([("ml/train".to_string(), Some(node))]),
    )
    .await?;
    s.stop().await?;

    // The control, on another berthd: gpu-mem managed but not ignored by
    // the scheduler (profile default-scheduler), and an extender without
    // managedResources (profile all-pods).
    let not_ignored =
        "  managedResources: [{name: example.com/gpu-mem, ignoredByScheduler: false}]";
    let cfg = format!(
        "{}- schedulerName: all-pods\n  plugins:\n{}\n",
        config(
            &plugins("gpu-share"),
            &format!(
                "{}\n{}",
                entry("gpu-share", not_ignored),
                entry("gpu-share-all", "")
            )
        )
        .replace("berthExtenders:", "BERTH_EXTENDERS:")
        .split("BERTH_EXTENDERS:")
        .next()
        .unwrap_or_default(),
        plugins("gpu-share-all")
    ) + &format!(
        "berthExtenders:\n{}\n{}\n",
        entry("gpu-share", not_ignored),
        entry("gpu-share-all", "")
    );
    let mut c = start(
        "managed-control",
        GPU_CLUSTER,
        &cfg,
        &["gpu-share", "gpu-share-all"],
    )
    .await?;
    let mut all = pod("ctl", "cpu-c");
    all["spec"]["schedulerName"] = "all-pods".into();
    c.apply(&[with_gpu_mem(pod("ctl", "train"), 4000), all])
        .await?;
    let failure = c.failed("ctl", "train", 1).await?;
    assert!(
        failure.contains("Insufficient example.com/gpu-mem"),
        "{failure}"
    );
    c.bound("ctl", "cpu-c").await?;
    let lines = gpu.lines();
    assert_eq!(requests(&lines, "Filter", "ctl/cpu-c").len(), 1);
    // train's Filter may have been asked (berthd sends it with the
    // candidates before its own plugins run), but its verdicts never
    // counted: every node was already out for NodeResourcesFit.
    assert!(requests(&lines, "Reserve", "ctl/train").is_empty());
    c.stop().await
}
