//! One preemption, two backends, the same writes (issue 35, ARCHITECTURE
//! decision 18): the scene of `preemption-sequence.json` (a pod of
//! priority 1000 preempts one of priority 0 on a full node) run on the
//! embedded cluster (berth's library, in process) and by the real berthd
//! in kube mode against the stand-in API server. What each writes is
//! compared field by field:
//!
//! * the preemptor's `PodScheduled=False` condition and its
//!   `nominatedNodeName` (one status patch in kube mode);
//! * the victim's `DisruptionTarget` condition (a status patch, then the
//!   deletion);
//! * the events: `FailedScheduling` for the preemptor, `Preempted` for the
//!   victim, `Scheduled` once it is bound; every field but the times, the
//!   names derived from them and the uids (the two clusters give their own);
//! * the binding's node.
//!
//! The stand-in keeps what a kube-apiserver v1.36 answers (see
//! `tests/k8s-api/`); it omits what no scheduler write depends on here
//! (admission, the garbage collector, a kubelet: the victim only turns
//! terminating, and the test deletes it for the preemptor to bind).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::{FakeApiServer, Recorded};
use berth_e2e::{Berthd, TempDir, message};
use berth_server::cluster::embedded::EmbeddedCluster;
use berth_server::cluster::{ClusterChange, ClusterSource, WatchEvent};
use berth_server::scheduler::{Decision, Options, Scheduler};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    })
}

fn pod(name: &str, cpu: &str, priority: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "default-scheduler",
            "priority": priority,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}],
        },
    })
}

/// The victim, bound and scheduled as the recording's.
fn victim() -> Value {
    let mut v = pod("victim", "3", 0);
    v["spec"]["nodeName"] = json!("cpu-1");
    v["status"] = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
         "lastTransitionTime": "2026-11-24T06:21:33Z"}
    ]});
    v
}

/// What a backend wrote, normalized for comparison.
#[derive(Debug, Default)]
struct Writes {
    /// The preemptor's PodScheduled condition as written.
    scheduled_false: Value,
    /// Its nominatedNodeName as written with it.
    nominated: Value,
    /// The victim's DisruptionTarget condition.
    disruption_target: Value,
    /// Events by reason, each normalized.
    events: BTreeMap<String, Value>,
    /// The node the preemptor was bound to.
    bound_to: String,
}

/// A condition without its time (which differs between two runs); a null
/// `lastProbeTime` counts as absent (a patch carries it as null, a stored
/// object omits it).
fn condition(c: &Value) -> Value {
    let mut c = c.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("lastTransitionTime");
        if o.get("lastProbeTime").is_some_and(Value::is_null) {
            o.remove("lastProbeTime");
        }
    }
    c
}

/// An event without what differs between two runs: its name and times,
/// the regarded pod's uid and resourceVersion, and the preemptor's uid in
/// a Preempted note.
fn event(e: &Value, uids: &[(&str, &str)]) -> Value {
    let mut e = e.clone();
    let o = e.as_object_mut().expect("an event object");
    for k in [
        "eventTime",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        o.remove(k);
    }
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| k == "namespace");
    }
    if let Some(r) = o.get_mut("regarding").and_then(Value::as_object_mut) {
        r.insert("uid".into(), json!("<uid>"));
        r.insert("resourceVersion".into(), json!("<rv>"));
    }
    if let Some(Value::String(note)) = o.get_mut("note") {
        for (uid, name) in uids {
            *note = note.replace(uid, &format!("<uid of {name}>"));
        }
    }
    e
}

fn only_condition(conditions: &Value, type_: &str) -> Result<Value> {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(condition)
        .with_context(|| format!("no {type_} condition in {conditions}"))
}

/// The embedded cluster, in process: the preemptor's status and the
/// victim's last state as the cluster's own change stream shows them, the
/// events it stored.
async fn embedded() -> Result<Writes> {
    let cluster = EmbeddedCluster::new();
    cluster.apply(node())?;
    cluster.apply(victim())?;
    let mut changes = cluster.subscribe();
    let registry = berth_server::plugins::in_tree_registry();
    let cfg = berth_server::config::default_config(&|n| registry.contains(n));
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            seed: Some(1),
            ..Options::default()
        },
    )?;
    let mut decisions = scheduler.decisions();
    scheduler.wait_synced().await;
    cluster.apply(pod("preemptor", "3", 1000))?;
    loop {
        match decisions.recv().await.context("scheduler running")? {
            Decision::Scheduled { pod, .. } if pod == "default/preemptor" => break,
            _ => {}
        }
    }
    let mut w = Writes::default();
    let uid_of = |name: &str| -> String {
        cluster
            .get_pod("default", name)
            .and_then(|p| p.metadata.uid.clone())
            .unwrap_or_default()
    };
    let preemptor_uid = uid_of("preemptor");
    while let Ok(c) = changes.try_recv() {
        let ClusterChange::Pod(e) = c else { continue };
        let (pod, deleted) = match e {
            WatchEvent::Modified { new, .. } => (new.get(), false),
            WatchEvent::Deleted(p) => (p.get(), true),
            WatchEvent::Added(_) => continue,
        };
        let v = serde_json::to_value(&*pod)?;
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if name == "preemptor"
            && v["status"]["nominatedNodeName"] == "cpu-1"
            && w.nominated.is_null()
        {
            w.nominated = v["status"]["nominatedNodeName"].clone();
            w.scheduled_false = only_condition(&v["status"]["conditions"], "PodScheduled")?;
        }
        if name == "victim" && deleted {
            w.disruption_target = only_condition(&v["status"]["conditions"], "DisruptionTarget")?;
        }
    }
    let victim_uid = w_victim_uid(&cluster);
    let uids = [
        (preemptor_uid.as_str(), "preemptor"),
        (victim_uid.as_str(), "victim"),
    ];
    for e in cluster.events() {
        let v = serde_json::to_value(&e)?;
        let reason = v["reason"].as_str().unwrap_or_default().to_string();
        w.events.entry(reason).or_insert_with(|| event(&v, &uids));
    }
    w.bound_to = cluster
        .get_pod("default", "preemptor")
        .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .unwrap_or_default();
    drop(scheduler);
    Ok(w)
}

/// The victim is gone from the embedded cluster by then; its uid is in its
/// Preempted event.
fn w_victim_uid(cluster: &Arc<EmbeddedCluster>) -> String {
    cluster
        .events()
        .iter()
        .find(|e| e.reason.as_deref() == Some("Preempted"))
        .and_then(|e| e.regarding.as_ref().and_then(|r| r.uid.clone()))
        .unwrap_or_default()
}

/// Kube mode: the real berthd against the stand-in; what it sent.
async fn kube() -> Result<Writes> {
    let fake = FakeApiServer::start().await?;
    fake.create("/api/v1/nodes", node())?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    fake.create(PODS, victim())?;
    let dir = TempDir::new("parity")?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut berthd = Berthd::start(&["--kubeconfig", &path, "--seed", "1"]).await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    fake.create(PODS, pod("preemptor", "3", 1000))?;
    fake.wait_for_request(|r| r.method == "DELETE" && r.path == format!("{PODS}/victim"))
        .await?;
    let is_event = |r: &Recorded, reason: &str| {
        r.method == "POST"
            && r.path == "/apis/events.k8s.io/v1/namespaces/default/events"
            && r.body["reason"] == reason
    };
    fake.wait_for_request(|r| is_event(r, "Preempted")).await?;
    // No kubelet: the victim only turned terminating. Once it is gone the
    // preemptor binds.
    fake.delete_now(&format!("{PODS}/victim"))?;
    let binding = fake
        .wait_for_request(|r| r.method == "POST" && r.path == format!("{PODS}/preemptor/binding"))
        .await?;
    fake.wait_for_request(|r| is_event(r, "Scheduled")).await?;
    let uid = |name: &str| -> String {
        fake.requests()
            .iter()
            .find(|r| r.method == "POST" && r.body["regarding"]["name"] == name)
            .and_then(|r| r.body["regarding"]["uid"].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let (preemptor_uid, victim_uid) = (uid("preemptor"), uid("victim"));
    let uids = [
        (preemptor_uid.as_str(), "preemptor"),
        (victim_uid.as_str(), "victim"),
    ];
    let mut w = Writes::default();
    for r in fake.requests() {
        if r.method == "PATCH"
            && r.path == format!("{PODS}/preemptor/status")
            && w.nominated.is_null()
        {
            w.nominated = r.body["status"]["nominatedNodeName"].clone();
            w.scheduled_false = only_condition(&r.body["status"]["conditions"], "PodScheduled")?;
        }
        if r.method == "PATCH" && r.path == format!("{PODS}/victim/status") {
            w.disruption_target =
                only_condition(&r.body["status"]["conditions"], "DisruptionTarget")?;
        }
        if r.method == "POST" && r.path == "/apis/events.k8s.io/v1/namespaces/default/events" {
            let reason = r.body["reason"].as_str().unwrap_or_default().to_string();
            w.events
                .entry(reason)
                .or_insert_with(|| event(&r.body, &uids));
        }
    }
    w.bound_to = binding.body["target"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    berthd.stop().await?;
    Ok(w)
}

#[tokio::test]
async fn a_preemption_writes_the_same_in_the_embedded_cluster_and_in_kube_mode() -> Result<()> {
    let e = embedded().await?;
    let k = kube().await?;
    ensure!(
        e.nominated == "cpu-1" && k.nominated == "cpu-1",
        "{e:?}\n{k:?}"
    );
    ensure!(
        e.scheduled_false == k.scheduled_false,
        "PodScheduled: embedded {} kube {}",
        e.scheduled_false,
        k.scheduled_false
    );
    ensure!(
        e.scheduled_false["observedGeneration"] == 1,
        "{}",
        e.scheduled_false
    );
    ensure!(
        e.disruption_target == k.disruption_target,
        "DisruptionTarget: embedded {} kube {}",
        e.disruption_target,
        k.disruption_target
    );
    ensure!(
        e.disruption_target
            == json!({
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod",
                "observedGeneration": 1,
            }),
        "{}",
        e.disruption_target
    );
    for reason in ["FailedScheduling", "Preempted", "Scheduled"] {
        let (ee, ke) = (e.events.get(reason), k.events.get(reason));
        ensure!(
            ee.is_some() && ee == ke,
            "{reason}: embedded {ee:?} kube {ke:?}"
        );
    }
    ensure!(
        e.events["Preempted"]["note"] == "Preempted by pod <uid of preemptor> on node cpu-1",
        "{}",
        e.events["Preempted"]
    );
    ensure!(e.bound_to == "cpu-1" && k.bound_to == "cpu-1");
    Ok(())
}
