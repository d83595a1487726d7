//! berthd in kube mode (`--kubeconfig`) against the stand-in API server
//! (`berth_e2e::fake_apiserver`), which answers as the kube-apiserver v1.36
//! recorded in `tests/k8s-api/`. What berthd sends is compared with the
//! recorded requests and with the events upstream kube-scheduler wrote:
//! field names and values, not timestamps.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use berth_client::ClientError;
use berth_e2e::fake_apiserver::{BeforeBinding, FakeApiServer, Recorded, recording};
use berth_e2e::{Berthd, TempDir, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

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
    start_with(tag, nodes, pods, &[], &[]).await
}

/// [`start`] with other objects (collection path, object) created first and
/// more berthd flags.
async fn start_with(
    tag: &str,
    nodes: &[Value],
    pods: &[Value],
    objects: &[(&str, Value)],
    flags: &[&str],
) -> Result<(FakeApiServer, Berthd, TempDir)> {
    let fake = FakeApiServer::start().await?;
    for n in nodes {
        fake.create("/api/v1/nodes", n.clone())?;
    }
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    for (collection, o) in objects {
        fake.create(collection, o.clone())?;
    }
    for p in pods {
        fake.create(PODS, p.clone())?;
    }
    let dir = TempDir::new(tag)?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut args = vec!["--kubeconfig", &path, "--seed", "1"];
    args.extend_from_slice(flags);
    let mut berthd = Berthd::start(&args).await?;
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

    // The condition patch: as v1.36 writes it (strategic merge on status,
    // the condition's observedGeneration the pod's generation).
    let recorded = recording("pod-status-unschedulable-v136")?;
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
    let generation =
        fake.get(&format!("{PODS}/huge")).context("pod")?["metadata"]["generation"].clone();
    ensure!(
        generation == 1 && cond["observedGeneration"] == generation,
        "{cond}"
    );
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
async fn preemption_nominates_the_preemptor_in_one_status_write_before_its_victim_goes()
-> Result<()> {
    let mut victim = pod("low", "1", "other-scheduler");
    victim["spec"]["nodeName"] = json!("n1");
    victim["spec"]["priority"] = json!(0);
    // Bound and scheduled: its patch must give the conditions' order.
    victim["status"] = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-24T06:21:00Z"}
    ]});
    let (fake, mut berthd, _dir) = start("preempt", &[node("n1", "1")], &[victim]).await?;
    let victim_uid = fake.get(&format!("{PODS}/low")).context("victim")?["metadata"]["uid"].clone();
    let mut high = pod("high", "1", "default-scheduler");
    high["spec"]["priority"] = json!(1000);
    fake.create(PODS, high)?;

    let delete = fake
        .wait_for_request(|r| r.method == "DELETE" && r.path == format!("{PODS}/low"))
        .await?;
    let preempted = fake
        .wait_for_request(|r| is_event(r, "Preempted", "low"))
        .await?;
    // Upstream's order: the preemptor's ONE status patch (condition and
    // nomination together), then the victim's DisruptionTarget patch, then
    // its deletion.
    let writes: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" || r.method == "DELETE")
        .collect();
    let order: Vec<String> = writes
        .iter()
        .map(|r| format!("{} {}", r.method, r.path.trim_start_matches(PODS)))
        .collect();
    ensure!(
        order == ["PATCH /high/status", "PATCH /low/status", "DELETE /low"],
        "{order:?}"
    );
    let preemptor = &writes[0];
    let rec = recording("preemption-preemptor-status")?;
    ensure!(preemptor.content_type.as_deref() == rec["request"]["contentType"].as_str());
    ensure!(
        keys(&preemptor.body) == keys(&rec["request"]["body"]),
        "{} vs recorded {}",
        preemptor.body,
        rec["request"]["body"]
    );
    ensure!(preemptor.body["status"]["nominatedNodeName"] == "n1");
    let c = &preemptor.body["status"]["conditions"][0];
    ensure!(
        c["reason"] == "Unschedulable" && c["observedGeneration"] == 1,
        "{c}"
    );

    let disruption = &writes[1];
    let rec = recording("preemption-victim-disruption-target")?;
    ensure!(
        keys(&disruption.body) == keys(&rec["request"]["body"]),
        "{} vs recorded {}",
        disruption.body,
        rec["request"]["body"]
    );
    ensure!(
        disruption.body["status"]["$setElementOrder/conditions"]
            == json!([{"type": "PodScheduled"}, {"type": "DisruptionTarget"}]),
        "{}",
        disruption.body
    );
    let c = &disruption.body["status"]["conditions"][0];
    ensure!(c["type"] == "DisruptionTarget" && c["status"] == "True");
    ensure!(c["reason"] == "PreemptionByScheduler", "{c}");
    ensure!(
        c["message"] == "default-scheduler: preempting to accommodate a higher priority pod",
        "{c}"
    );
    // berth keeps a UID precondition on the deletion (upstream sends none):
    // a pod replaced under the victim's name is never deleted by mistake.
    ensure!(delete.body["preconditions"]["uid"] == victim_uid);
    ensure!(delete.body["kind"] == "DeleteOptions" && delete.status == 200);

    // The Preempted event: as upstream's, no related object; the note names
    // the preemptor.
    let rec = recording("preemption-sequence")?;
    let upstream = rec
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| &e["request"]["body"])
        .find(|b| b["reason"] == "Preempted")
        .context("recorded Preempted event")?;
    let mut want = keys(upstream);
    for k in [
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        want.remove(k);
    }
    ensure!(
        keys(&preempted.body) == want,
        "{:?} vs upstream {want:?}",
        keys(&preempted.body)
    );
    ensure!(preempted.body["type"] == "Normal" && preempted.body["action"] == "Preempting");
    let high_uid =
        fake.get(&format!("{PODS}/high")).context("preemptor")?["metadata"]["uid"].clone();
    ensure!(
        preempted.body["note"]
            == format!(
                "Preempted by pod {} on node n1",
                high_uid.as_str().unwrap_or_default()
            ),
        "{}",
        preempted.body
    );

    // No kubelet here: the victim only turned terminating. Once it is gone
    // the preemptor is bound where it was nominated, and the API server
    // clears the nomination.
    ensure!(fake.requests_to("POST", "/high/binding").is_empty());
    fake.delete_now(&format!("{PODS}/low"))?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "high")).await?;
    ensure!(b.status == 201 && b.body["target"]["name"] == "n1");
    berthd.wait_idle().await?;
    ensure!(fake.requests_to("POST", "/high/binding").len() == 1);
    let high = fake.get(&format!("{PODS}/high")).context("preemptor")?;
    ensure!(high["status"].get("nominatedNodeName").is_none(), "{high}");
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_binding_answered_504_is_settled_by_reading_the_pod_and_bound_exactly_once() -> Result<()>
{
    let (fake, mut berthd, _dir) = start("timeout", &[node("n1", "4")], &[]).await?;
    // Not stored: the scheduler forgets the pod and binds it again later.
    fake.before_binding(
        "default",
        "lost",
        BeforeBinding::Fail {
            code: 504,
            commit: false,
        },
    );
    // Stored, then answered 504: the pod must not be bound twice.
    fake.before_binding(
        "default",
        "kept",
        BeforeBinding::Fail {
            code: 504,
            commit: true,
        },
    );
    fake.create(PODS, pod("lost", "100m", "default-scheduler"))?;
    fake.create(PODS, pod("kept", "100m", "default-scheduler"))?;
    // A 504 may or may not have been stored: berth reads the pod before
    // deciding. The lost binding is retried after its backoff and
    // succeeds; the kept one is found bound and not sent again.
    fake.wait_for_requests(2, |r| is_binding_of(r, "lost"))
        .await?;
    for name in ["lost", "kept"] {
        fake.wait_for_request(|r| is_event(r, "Scheduled", name))
            .await?;
    }
    // The pod not bound can only be learned from a GET; the bound one may
    // be learned from the watch first, which is as good.
    ensure!(!fake.requests_to("GET", "/pods/lost").is_empty());
    berthd.wait_idle().await?;
    let statuses = |name: &str| -> Vec<u16> {
        fake.requests_to("POST", &format!("/{name}/binding"))
            .iter()
            .map(|r| r.status)
            .collect()
    };
    ensure!(statuses("lost") == [504, 201], "{:?}", statuses("lost"));
    let kept = fake.get(&format!("{PODS}/kept")).context("pod")?;
    ensure!(kept["spec"]["nodeName"] == "n1");
    ensure!(statuses("kept") == [504], "{:?}", statuses("kept"));
    // Only the pod whose binding was not stored failed: its event and
    // condition; the bound one got neither.
    ensure!(
        fake.requests()
            .iter()
            .any(|r| is_event(r, "FailedScheduling", "lost"))
    );
    ensure!(
        !fake
            .requests()
            .iter()
            .any(|r| is_event(r, "FailedScheduling", "kept"))
    );
    ensure!(fake.requests_to("PATCH", "/pods/kept/status").is_empty());
    let idle = berthd
        .seen
        .iter()
        .rev()
        .find(|l| message(l).starts_with("scheduler idle"))
        .cloned();
    ensure!(
        idle.as_ref().is_some_and(|l| l["fields"]["pending"] == 0),
        "{idle:?}"
    );
    berthd.stop().await?;
    Ok(())
}

/// Issue 24, finding 4: the API server stores a binding and dies before
/// answering, its watches with it. berth asks the server whether the pod
/// is bound before it writes any failure: the pod is bound, so it gets its
/// Scheduled event, never PodScheduled=False or FailedScheduling, and is
/// not bound again.
#[tokio::test]
async fn a_binding_whose_answer_was_lost_is_found_bound_and_never_marked_unschedulable()
-> Result<()> {
    let (fake, mut berthd, _dir) = start("lost-answer", &[node("n1", "4")], &[]).await?;
    // The watches go with the server: only a GET can tell.
    fake.before_binding("default", "p", BeforeBinding::DropAnswer);
    fake.create(PODS, pod("p", "100m", "default-scheduler"))?;
    let event = fake
        .wait_for_request(|r| is_event(r, "Scheduled", "p") || is_event(r, "FailedScheduling", "p"))
        .await?;
    ensure!(event.body["reason"] == "Scheduled", "{}", event.body);
    ensure!(
        event.body["note"] == "Successfully assigned default/p to n1",
        "{}",
        event.body
    );
    // berth asked, and wrote nothing about a failure.
    ensure!(!fake.requests_to("GET", "/pods/p").is_empty());
    let patches = fake.requests_to("PATCH", "/pods/p/status");
    ensure!(patches.is_empty(), "{patches:#?}");
    let bindings: Vec<u16> = fake
        .requests_to("POST", "/p/binding")
        .iter()
        .map(|r| r.status)
        .collect();
    ensure!(bindings == [0], "{bindings:?}");
    let stored = fake.get(&format!("{PODS}/p")).context("pod")?;
    ensure!(stored["spec"]["nodeName"] == "n1");
    let conditions = stored["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        conditions
            .iter()
            .all(|c| c["type"] != "PodScheduled" || c["status"] == "True"),
        "{conditions:?}"
    );
    berthd
        .wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/p")
        .await?;
    fake.release_watches();
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn repeated_failures_become_an_event_series_as_upstream_writes_them() -> Result<()> {
    let (fake, mut berthd, _dir) = start(
        "series",
        &[node("n1", "1")],
        &[pod("big", "2", "default-scheduler")],
    )
    .await?;
    fake.wait_for_request(|r| is_event(r, "FailedScheduling", "big"))
        .await?;
    fake.wait_for_request(|r| r.method == "PATCH" && r.path == format!("{PODS}/big/status"))
        .await?;
    // As in upstream's recording: an assigned pod that comes and goes makes
    // the pod worth retrying, and it fails again with the same message.
    let churn = |i: usize| -> Result<()> {
        let mut filler = pod(&format!("filler-{i}"), "100m", "other-scheduler");
        filler["spec"]["nodeName"] = json!("n1");
        fake.create(PODS, filler)?;
        fake.delete_now(&format!("{PODS}/filler-{i}"))?;
        Ok(())
    };
    churn(0)?;
    fake.wait_for_requests(2, |r| is_event(r, "FailedScheduling", "big"))
        .await?;
    churn(1)?;
    let patch = fake
        .wait_for_request(|r| r.method == "PATCH" && r.path.starts_with("/apis/events.k8s.io/"))
        .await?;
    let posts: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| is_event(r, "FailedScheduling", "big"))
        .collect();
    // Attempt 1 and attempt 2 (after the status patch changed the pod's
    // resourceVersion) are two events; attempt 3 is the second event's
    // series, as upstream's recorder writes them.
    ensure!(posts.len() == 2, "{} events created", posts.len());
    ensure!(
        posts[0].body["regarding"]["resourceVersion"]
            != posts[1].body["regarding"]["resourceVersion"]
    );
    let second = posts[1].body["metadata"]["name"]
        .as_str()
        .context("event name")?;
    ensure!(
        patch.path == format!("/apis/events.k8s.io/v1/namespaces/default/events/{second}"),
        "{}",
        patch.path
    );
    let rec = recording("events-series-update")?;
    ensure!(patch.content_type.as_deref() == rec["request"]["contentType"].as_str());
    ensure!(
        keys(&patch.body) == keys(&rec["request"]["body"]),
        "{}",
        patch.body
    );
    ensure!(patch.body["series"]["count"] == 2, "{}", patch.body);
    ensure!(patch.status == 200);
    // One status patch only: later failures with the same message write
    // no condition, as upstream.
    berthd.wait_idle().await?;
    ensure!(
        fake.requests_to("PATCH", "/big/status").len() == 1,
        "{:?}",
        fake.requests_to("PATCH", "/big/status")
    );
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_pod_whose_volume_is_being_provisioned_is_nominated_while_prebind_waits() -> Result<()> {
    let class = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "late"},
        "provisioner": "example.com/csi",
        "volumeBindingMode": "WaitForFirstConsumer",
    });
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"storageClassName": "late", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"},
    });
    let mut p = pod("db", "100m", "default-scheduler");
    p["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    let (fake, berthd, _dir) = start_with(
        "prebind",
        &[node("n1", "4")],
        &[p],
        &[
            ("/apis/storage.k8s.io/v1/storageclasses", class),
            ("/api/v1/namespaces/default/persistentvolumeclaims", claim),
        ],
        &[],
    )
    .await?;
    // PreBind asks for provisioning: the claim gets its selected node.
    let claim_put = fake
        .wait_for_request(|r| {
            r.method == "PUT" && r.path == "/api/v1/namespaces/default/persistentvolumeclaims/data"
        })
        .await?;
    ensure!(
        claim_put.body["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n1",
        "{}",
        claim_put.body
    );
    // Before that, the pod was nominated to its node, with a strategic
    // merge patch of the status as v1.36 sends it.
    let nominated = fake
        .requests()
        .into_iter()
        .position(|r| r.method == "PATCH" && r.path == format!("{PODS}/db/status"))
        .context("no nomination before PreBind")?;
    let put = fake
        .requests()
        .into_iter()
        .position(|r| r.method == "PUT" && r.path.ends_with("/persistentvolumeclaims/data"))
        .context("claim put")?;
    ensure!(
        nominated < put,
        "nominated at {nominated}, claim written at {put}"
    );
    let rec = recording("dra-pod-nominated-before-bind")?;
    let patch = &fake.requests()[nominated];
    ensure!(patch.content_type.as_deref() == rec["request"]["contentType"].as_str());
    ensure!(
        patch.body == json!({"status": {"nominatedNodeName": "n1"}}),
        "{}",
        patch.body
    );
    // Meanwhile the pod shows where it is going.
    let pending = fake.get(&format!("{PODS}/db")).context("pod")?;
    ensure!(pending["status"]["nominatedNodeName"] == "n1", "{pending}");
    ensure!(fake.requests_to("POST", "/db/binding").is_empty());

    // The provisioner and the PV controller finish: a volume, the claim bound.
    fake.create(
        "/api/v1/persistentvolumes",
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-data", "annotations": {"pv.kubernetes.io/provisioned-by": "example.com/csi"}},
            "spec": {"storageClassName": "late", "accessModes": ["ReadWriteOnce"],
                     "capacity": {"storage": "1Gi"}, "csi": {"driver": "example.com/csi", "volumeHandle": "h"},
                     "claimRef": {"namespace": "default", "name": "data", "uid": claim_put.body["metadata"]["uid"].clone()}},
            "status": {"phase": "Bound"},
        }),
    )?;
    let mut bound = fake
        .get("/api/v1/namespaces/default/persistentvolumeclaims/data")
        .context("claim")?;
    bound["spec"]["volumeName"] = json!("pv-data");
    bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
    bound["status"] =
        json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}});
    let rv = bound["metadata"]["resourceVersion"].clone();
    fake.replace(
        "/api/v1/namespaces/default/persistentvolumeclaims/data",
        bound,
        rv.as_str().unwrap_or_default(),
    )?;
    let b = fake.wait_for_request(|r| is_binding_of(r, "db")).await?;
    ensure!(b.status == 201 && b.body["target"]["name"] == "n1");
    // Bound: the API server cleared the nomination.
    let db = fake.get(&format!("{PODS}/db")).context("pod")?;
    ensure!(db["status"].get("nominatedNodeName").is_none(), "{db}");
    // A pod with nothing to do at PreBind is bound without a nomination.
    fake.create(PODS, pod("plain", "100m", "default-scheduler"))?;
    fake.wait_for_request(|r| is_binding_of(r, "plain")).await?;
    ensure!(fake.requests_to("PATCH", "/plain/status").is_empty());
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn client_go_request_metrics_count_what_berth_sent() -> Result<()> {
    let (fake, mut berthd, _dir) = start_with(
        "restmetrics",
        &[node("n1", "4")],
        &[pod("web", "100m", "default-scheduler")],
        &[],
        &["--http-listen", "127.0.0.1:0"],
    )
    .await?;
    fake.wait_for_request(|r| is_event(r, "Scheduled", "web"))
        .await?;
    berthd.wait_idle().await?;
    let (status, text) = berth_e2e::http_get(&berthd.http_addr()?, "/metrics").await?;
    ensure!(status == 200);
    let host = fake.url().trim_start_matches("http://").to_string();
    // The value of the sample whose name and labels start the line.
    let sample = |prefix: String| -> Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("no sample {prefix} in:\n{text}"))
    };
    // The Lease and the binding were answered before berth went idle; the
    // event's answer may still be on its way.
    let posts = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.status == 201)
        .count() as f64;
    ensure!(posts == 3.0, "lease, binding, event: {posts}");
    for family in [
        format!("rest_client_requests_total{{code=\"201\",host=\"{host}\",method=\"POST\"}}"),
        format!("rest_client_rate_limiter_duration_seconds_count{{host=\"{host}\",verb=\"POST\"}}"),
        format!("rest_client_request_duration_seconds_count{{host=\"{host}\",verb=\"POST\"}}"),
    ] {
        let v = sample(family.clone())?;
        ensure!((2.0..=posts).contains(&v), "{family} {v}");
    }
    ensure!(
        sample(format!(
            "rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}}"
        ))? >= 12.0,
        "every kind's list and watch is counted"
    );
    ensure!(text.contains("# TYPE rest_client_request_duration_seconds histogram"));
    berthd.stop().await?;
    Ok(())
}
