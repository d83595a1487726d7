//! berthd in kube mode (`--kubeconfig`) against the stand-in API server
//! (`berth_e2e::fake_apiserver`), which answers as the kube-apiserver v1.36
//! recorded in `shared/k8s-api/`. What berthd sends is compared with the
//! recorded requests and with the events upstream kube-scheduler wrote:
//! field names and values, not timestamps.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use berth_client::ClientError;
use berth_e2e::fake_apiserver::{BeforeBinding, FakeApiServer, Recorded, recording};
use berth_e2e::{Berthd, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

/// A directory for one test's files, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berth-kube-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node(name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    })
}

fn pod(name: &str, cpu: &str, scheduler: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "demo"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    })
}

/// The fake with `nodes` and `pods`, and berthd watching it.
async fn start(
    tag: &str,
    nodes: &[Value],
    pods: &[Value],
) -> Result<(FakeApiServer, Berthd, TempDir)> {
    let fake = FakeApiServer::start().await?;
    for n in nodes {
        fake.create("/api/v1/nodes", n.clone())?;
    }
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    for p in pods {
        fake.create(PODS, p.clone())?;
    }
    let dir = TempDir::new(tag)?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut berthd = Berthd::start(&["--kubeconfig", &path, "--seed", "1"]).await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    Ok((fake, berthd, dir))
}

fn is_binding_of(r: &Recorded, name: &str) -> bool {
    r.method == "POST" && r.path == format!("{PODS}/{name}/binding")
}

fn is_event(r: &Recorded, reason: &str, pod: &str) -> bool {
    r.method == "POST"
        && r.path == "/apis/events.k8s.io/v1/namespaces/default/events"
        && r.body["reason"] == reason
        && r.body["regarding"]["name"] == pod
}

/// The keys of a JSON object, nested ones as `a.b`.
fn keys(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        if let Some(o) = v.as_object() {
            for (k, v) in o {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                walk(v, &p, out);
            }
        }
    }
    walk(v, "", &mut out);
    out
}

/// An event as upstream's scheduler wrote it, less what the API server
/// adds (uid, resourceVersion, creation time, managed fields, deprecated
/// fields).
fn upstream_event(reason: &str) -> Result<Value> {
    let rec = recording("upstream-scheduler-events")?;
    let mut e = rec["response"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["reason"] == reason)
        .cloned()
        .context("recorded event")?;
    let o = e.as_object_mut().context("event object")?;
    for k in [
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        o.remove(k);
    }
    let meta = e["metadata"].as_object_mut().context("metadata")?;
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(k);
    }
    Ok(e)
}

#[tokio::test]
async fn pods_are_bound_once_as_upstream_binds_them_and_other_schedulers_pods_are_left_alone()
-> Result<()> {
    let (fake, mut berthd, _dir) = start(
        "bind",
        &[node("n1", "4")],
        &[
            pod("web-1", "100m", "default-scheduler"),
            pod("web-2", "100m", "default-scheduler"),
            pod("theirs", "100m", "other-scheduler"),
        ],
    )
    .await?;
    // A pod another scheduler already placed counts in the cache.
    fake.wait_for_requests(2, |r| {
        is_event(r, "Scheduled", "web-1") || is_event(r, "Scheduled", "web-2")
    })
    .await?;
    berthd.wait_idle().await?;

    // One binding per pod, shaped as the recorded one.
    let recorded = recording("binding-ok")?;
    for name in ["web-1", "web-2"] {
        let bindings = fake.requests_to("POST", &format!("/{name}/binding"));
        ensure!(bindings.len() == 1, "{name} bound {} times", bindings.len());
        let b = &bindings[0];
        ensure!(b.status == 201);
        ensure!(b.content_type.as_deref() == Some("application/json"));
        ensure!(
            keys(&b.body) == keys(&recorded["request"]["body"]),
            "binding body {} has other fields than the recorded {}",
            b.body,
            recorded["request"]["body"]
        );
        let uid = fake.get(&format!("{PODS}/{name}")).context("pod")?["metadata"]["uid"].clone();
        ensure!(
            b.body
                == json!({"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": "default", "uid": uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}),
            "{}",
            b.body
        );
        let stored = fake.get(&format!("{PODS}/{name}")).context("pod")?;
        ensure!(stored["spec"]["nodeName"] == "n1");
    }

    // The Scheduled event has upstream's fields and wording.
    let upstream = upstream_event("Scheduled")?;
    let event = fake
        .requests()
        .into_iter()
        .find(|r| is_event(r, "Scheduled", "web-1"))
        .context("Scheduled event")?;
    let e = &event.body;
    let mut want_keys = keys(&upstream);
    want_keys.extend(["apiVersion".to_string(), "kind".to_string()]);
    ensure!(
        keys(e) == want_keys,
        "event fields {:?} differ from upstream's {want_keys:?}",
        keys(e)
    );
    ensure!(
        e["note"] == "Successfully assigned default/web-1 to n1",
        "{e}"
    );
    ensure!(e["action"] == upstream["action"] && e["type"] == upstream["type"]);
    ensure!(e["reportingController"] == "default-scheduler");
    ensure!(
        e["reportingInstance"]
            .as_str()
            .is_some_and(|i| i.starts_with("default-scheduler-")),
        "{e}"
    );
    ensure!(e["regarding"]["kind"] == "Pod" && e["regarding"]["apiVersion"] == "v1");
    ensure!(
        e["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("web-1.")),
        "{e}"
    );
    ensure!(event.status == 201, "the fake accepted the event");

    // The other scheduler's pod: no binding, no event, no status write.
    ensure!(
        fake.requests()
            .iter()
            .all(|r| !r.path.contains("/pods/theirs"))
    );
    ensure!(
        !fake
            .requests()
            .iter()
            .any(|r| r.body["regarding"]["name"] == "theirs")
    );

    // The pod informer excludes finished pods, as upstream's does.
    let pod_lists: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/pods")
        .collect();
    ensure!(
        pod_lists
            .iter()
            .all(|r| r.query.get("fieldSelector").map(String::as_str)
                == Some("status.phase!=Succeeded,status.phase!=Failed")),
        "{pod_lists:?}"
    );
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn an_unschedulable_pod_gets_failed_scheduling_and_pod_scheduled_false_as_upstream()
-> Result<()> {
    let (fake, mut berthd, _dir) = start(
        "unsched",
        &[node("n1", "1")],
        &[pod("huge", "4", "default-scheduler")],
    )
    .await?;
    let event = fake
        .wait_for_request(|r| is_event(r, "FailedScheduling", "huge"))
        .await?;
    let patch = fake
        .wait_for_request(|r| r.method == "PATCH" && r.path == format!("{PODS}/huge/status"))
        .await?;
    berthd.wait_idle().await?;

    // The condition patch: as recorded (strategic merge on status).
    let recorded = recording("pod-status-unschedulable")?;
    ensure!(patch.content_type.as_deref() == recorded["request"]["contentType"].as_str());
    ensure!(
        keys(&patch.body) == keys(&recorded["request"]["body"]),
        "{} vs {}",
        patch.body,
        recorded["request"]["body"]
    );
    let cond = &patch.body["status"]["conditions"][0];
    let rec_cond = &recorded["request"]["body"]["status"]["conditions"][0];
    ensure!(
        keys(cond) == keys(rec_cond),
        "condition fields {cond} vs recorded {rec_cond}"
    );
    ensure!(cond["type"] == "PodScheduled" && cond["status"] == "False");
    ensure!(cond["reason"] == "Unschedulable");
    ensure!(cond["lastProbeTime"].is_null());
    let rec_time = rec_cond["lastTransitionTime"]
        .as_str()
        .context("recorded time")?;
    ensure!(
        cond["lastTransitionTime"]
            .as_str()
            .is_some_and(|t| t.len() == rec_time.len() && t.ends_with('Z')),
        "{cond}"
    );
    let msg = cond["message"].as_str().context("message")?;
    ensure!(
        msg.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{msg}"
    );
    // The API server took it.
    let stored = fake.get(&format!("{PODS}/huge")).context("pod")?;
    ensure!(stored["status"]["conditions"][0]["reason"] == "Unschedulable");

    // The event: upstream's fields, reason, action, type; its note is the
    // condition's message.
    let upstream = upstream_event("FailedScheduling")?;
    let e = &event.body;
    let mut want_keys = keys(&upstream);
    want_keys.extend(["apiVersion".to_string(), "kind".to_string()]);
    ensure!(keys(e) == want_keys, "{:?} vs {want_keys:?}", keys(e));
    for k in ["action", "reason", "type", "reportingController"] {
        ensure!(
            e[k] == upstream[k],
            "{k}: {} vs upstream {}",
            e[k],
            upstream[k]
        );
    }
    ensure!(e["note"] == msg, "{e}");
    // Shaped as the recorded event create, too.
    let created = recording("event-create")?;
    ensure!(e["apiVersion"] == created["request"]["body"]["apiVersion"]);
    ensure!(e["kind"] == "Event");
    ensure!(fake.requests_to("POST", "/huge/binding").is_empty());
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_binding_that_finds_the_pod_gone_or_taken_is_not_retried_and_frees_its_room() -> Result<()>
{
    let (fake, mut berthd, _dir) = start("race", &[node("n1", "1")], &[]).await?;

    // Deleted between the scheduler's choice and its binding: 404.
    fake.before_binding("default", "gone", BeforeBinding::Delete);
    fake.create(PODS, pod("gone", "1", "default-scheduler"))?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "gone")).await?;
    ensure!(b.status == 404);
    berthd
        .wait_for(|l| {
            message(l) == "pod doesn't exist any more; not requeued"
                && l["fields"]["pod"] == "default/gone"
        })
        .await?;
    // Its room is free again: the assumed pod was forgotten.
    fake.create(PODS, pod("next", "1", "default-scheduler"))?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "next")).await?;
    ensure!(b.status == 201 && b.body["target"]["name"] == "n1");

    // Bound by someone else first: 409 already assigned.
    fake.create("/api/v1/nodes", node("n2", "1"))?;
    fake.before_binding("default", "taken", BeforeBinding::BindTo("n2".into()));
    fake.create(PODS, pod("taken", "1", "default-scheduler"))?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "taken")).await?;
    ensure!(b.status == 409, "{b:?}");
    berthd
        .wait_for(|l| {
            message(l) == "pod has been assigned to node; not requeued"
                && l["fields"]["pod"] == "default/taken"
        })
        .await?;
    // The cache holds it where it really is: a third pod finds no room.
    fake.create(PODS, pod("third", "1", "default-scheduler"))?;
    let e = fake
        .wait_for_request(|r| is_event(r, "FailedScheduling", "third"))
        .await?;
    ensure!(
        e.body["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("0/2 nodes are available: 2 Insufficient cpu.")),
        "{}",
        e.body
    );
    berthd.wait_idle().await?;

    // Nothing was retried.
    for name in ["gone", "next", "taken"] {
        let n = fake.requests_to("POST", &format!("/{name}/binding")).len();
        ensure!(n == 1, "{name}: {n} binding requests");
    }
    ensure!(fake.requests_to("POST", "/third/binding").is_empty());
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn watches_resume_after_a_dropped_connection_and_a_410_relist_loses_no_pod() -> Result<()> {
    let (fake, mut berthd, _dir) = start(
        "watch",
        &[node("n1", "4")],
        &[pod("stuck", "100", "default-scheduler")],
    )
    .await?;
    fake.wait_for_request(|r| is_event(r, "FailedScheduling", "stuck"))
        .await?;
    let lists = |fake: &FakeApiServer| {
        fake.requests()
            .iter()
            .filter(|r| {
                r.method == "GET" && r.path == "/api/v1/pods" && !r.query.contains_key("watch")
            })
            .count()
    };
    ensure!(lists(&fake) == 1);

    // Every watch connection dropped; a pod created before they return.
    fake.hold_watches();
    fake.create(PODS, pod("while-away", "100m", "default-scheduler"))?;
    fake.release_watches();
    let b = fake
        .wait_for_request(|r| is_binding_of(r, "while-away"))
        .await?;
    ensure!(b.status == 201);
    ensure!(
        lists(&fake) == 1,
        "resumed from its resourceVersion, no relist"
    );
    let resumed = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods" && r.query.contains_key("watch"))
        .collect::<Vec<_>>();
    ensure!(resumed.len() >= 2, "a second pod watch");
    ensure!(
        resumed
            .iter()
            .all(|r| r.query.get("resourceVersion").is_some_and(|v| v != "0")
                && r.query.get("allowWatchBookmarks").map(String::as_str) == Some("true")),
        "{resumed:?}"
    );

    // Dropped again; meanwhile a pod comes, another goes, and the history
    // is compacted: the watchers get 410 Gone and relist.
    let mut client = berthd.client().await?;
    ensure!(client.get("Pod", "default", "stuck").await.is_ok());
    fake.hold_watches();
    fake.create(PODS, pod("after-gone", "100m", "default-scheduler"))?;
    fake.delete_now(&format!("{PODS}/stuck"))?;
    fake.compact();
    fake.release_watches();
    let b = fake
        .wait_for_request(|r| is_binding_of(r, "after-gone"))
        .await?;
    ensure!(b.status == 201);
    ensure!(lists(&fake) >= 2, "relisted after 410");
    // Berth saw the deletion it missed, through the relist: the relist's
    // differences are applied at once, before the new pod could be bound.
    match client.get("Pod", "default", "stuck").await {
        Err(ClientError::Status(s)) if s.code() == tonic::Code::NotFound => {}
        other => anyhow::bail!("stuck should be gone from berth's view: {other:?}"),
    }
    berthd.wait_idle().await?;
    for name in ["while-away", "after-gone"] {
        let n = fake.requests_to("POST", &format!("/{name}/binding")).len();
        ensure!(n == 1, "{name}: bound {n} times");
    }
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn the_cluster_service_reads_the_real_cluster_and_refuses_writes() -> Result<()> {
    let (_fake, berthd, _dir) = start("grpc", &[node("n1", "4")], &[]).await?;
    let mut client = berthd.client().await?;
    let nodes = client.list("Node", "").await?;
    ensure!(nodes.len() == 1 && nodes[0]["metadata"]["name"] == "n1");
    let err = client
        .apply(&[pod("p", "100m", "default-scheduler")], "")
        .await
        .expect_err("writes are refused");
    match err {
        ClientError::Status(s) => {
            ensure!(s.code() == tonic::Code::FailedPrecondition, "{s:?}");
            ensure!(s.message().contains("Kubernetes API"), "{}", s.message());
        }
        other => anyhow::bail!("{other:?}"),
    }
    let err = client.delete("Node", "", "n1").await.expect_err("refused");
    ensure!(
        matches!(err, ClientError::Status(ref s) if s.code() == tonic::Code::FailedPrecondition)
    );
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn preemption_nominates_the_preemptor_and_deletes_the_victim_as_upstream() -> Result<()> {
    let mut victim = pod("low", "1", "other-scheduler");
    victim["spec"]["nodeName"] = json!("n1");
    victim["spec"]["priority"] = json!(0);
    let (fake, mut berthd, _dir) = start("preempt", &[node("n1", "1")], &[victim]).await?;
    let victim_uid = fake.get(&format!("{PODS}/low")).context("victim")?["metadata"]["uid"].clone();
    let mut high = pod("high", "1", "default-scheduler");
    high["spec"]["priority"] = json!(1000);
    fake.create(PODS, high)?;

    // The victim: DisruptionTarget condition, then DELETE with its UID.
    let delete = fake
        .wait_for_request(|r| r.method == "DELETE" && r.path == format!("{PODS}/low"))
        .await?;
    let recorded = recording("pod-delete-victim")?;
    ensure!(
        keys(&delete.body) == keys(&recorded["request"]["body"]),
        "{}",
        delete.body
    );
    ensure!(delete.body["preconditions"]["uid"] == victim_uid);
    ensure!(delete.body["kind"] == "DeleteOptions" && delete.status == 200);
    let disruption = fake
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.path == format!("{PODS}/low/status"))
        .context("DisruptionTarget patch before the delete")?;
    let c = &disruption.body["status"]["conditions"][0];
    ensure!(c["type"] == "DisruptionTarget" && c["status"] == "True");
    ensure!(c["reason"] == "PreemptionByScheduler", "{c}");
    ensure!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("default-scheduler: preempting")),
        "{c}"
    );

    // The preemptor is nominated (merge patch, as recorded) and the victim
    // gets the Preempted event naming it.
    let nominated = fake
        .wait_for_request(|r| {
            r.method == "PATCH"
                && r.path == format!("{PODS}/high/status")
                && r.body["status"].get("nominatedNodeName").is_some()
        })
        .await?;
    let rec = recording("pod-nominated-node")?;
    ensure!(nominated.content_type.as_deref() == rec["request"]["contentType"].as_str());
    ensure!(
        nominated.body == json!({"status": {"nominatedNodeName": "n1"}}),
        "{}",
        nominated.body
    );
    let preempted = fake
        .wait_for_request(|r| is_event(r, "Preempted", "low"))
        .await?;
    ensure!(preempted.body["type"] == "Normal" && preempted.body["action"] == "Preempting");
    ensure!(
        preempted.body["related"]["name"] == "high",
        "{}",
        preempted.body
    );

    // No kubelet here: the victim only turned terminating. Once it is gone
    // the preemptor is bound where it was nominated.
    ensure!(fake.requests_to("POST", "/high/binding").is_empty());
    fake.delete_now(&format!("{PODS}/low"))?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "high")).await?;
    ensure!(b.status == 201 && b.body["target"]["name"] == "n1");
    berthd.wait_idle().await?;
    ensure!(fake.requests_to("POST", "/high/binding").len() == 1);
    berthd.stop().await?;
    Ok(())
}
