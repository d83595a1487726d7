//! kube-scheduler's HTTP extenders (`extenders:` in the configuration)
//! through the real berthd: a small HTTP server in the test speaks
//! upstream's extender JSON (`k8s.io/kube-scheduler/extender/v1`), and
//! placements follow its filter and priorities, its failure reasons reach
//! the pending pod's condition, its bind verb binds each pod exactly once,
//! and an unreachable ignorable extender is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use berth_client::pb::{EventType, SchedulingEvent};
use berth_e2e::{Berthd, TempDir, message};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};

/// A guard against a hung process or stream; never what a test waits for.
const GUARD: Duration = Duration::from_secs(120);

/// Four nodes of one size.
const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n3}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n4}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
"#;

/// The reason the extender gives for n4 (unresolvable).
const DRAINED: &str = "n4 is drained by the extender";

/// What the extender received: (path, JSON body), in order.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// The extender: an HTTP server on a loopback port.
struct Extender {
    addr: String,
    seen: Seen,
}

impl Extender {
    /// The requests made to `verb`.
    fn requests(&self, verb: &str) -> Vec<Value> {
        let path = format!("/sched/{verb}");
        self.seen
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|(p, _)| *p == path)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The candidate node names of an ExtenderArgs, and whether they came as
/// names (`NodeNames`) rather than objects (`Nodes`).
fn candidates(args: &Value) -> (Vec<String>, bool) {
    if let Some(names) = args["NodeNames"].as_array() {
        let names = names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect();
        return (names, true);
    }
    let names = args["Nodes"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    (names, false)
}

/// The filter verb: n4 is unresolvable; a pod annotated
/// `example.com/only: NODE` fits only there; a pod annotated
/// `example.com/error: TEXT` gets `Error: TEXT`. Answers in the mode it was
/// asked in (names, or node objects).
fn filter(args: &Value) -> Value {
    let annotations = &args["Pod"]["metadata"]["annotations"];
    if let Some(text) = annotations["example.com/error"].as_str() {
        return json!({"Nodes": null, "NodeNames": null, "FailedNodes": null,
            "FailedAndUnresolvableNodes": null, "Error": text});
    }
    let only = annotations["example.com/only"].as_str();
    let (names, by_name) = candidates(args);
    let mut kept = Vec::new();
    let mut failed = Map::new();
    let mut unresolvable = Map::new();
    for n in names {
        if n == "n4" {
            unresolvable.insert(n, json!(DRAINED));
        } else if only.is_some_and(|o| o != n) {
            failed.insert(n, json!(format!("node(s) are not {}", only.unwrap_or(""))));
        } else {
            kept.push(n);
        }
    }
    let (nodes, node_names) = if by_name {
        (Value::Null, json!(kept))
    } else {
        let items: Vec<Value> = args["Nodes"]["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| {
                n["metadata"]["name"]
                    .as_str()
                    .is_some_and(|name| kept.iter().any(|k| k == name))
            })
            .cloned()
            .collect();
        (json!({"metadata": {}, "items": items}), Value::Null)
    };
    json!({"Nodes": nodes, "NodeNames": node_names, "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable, "Error": ""})
}

/// The prioritize verb: n3 10, n2 5, others 0 (of MaxExtenderPriority 10).
fn prioritize(args: &Value) -> Value {
    let (names, _) = candidates(args);
    let list: Vec<Value> = names
        .iter()
        .map(|n| {
            let score = match n.as_str() {
                "n3" => 10,
                "n2" => 5,
                _ => 0,
            };
            json!({"Host": n, "Score": score})
        })
        .collect();
    json!(list)
}

/// The preempt verb: keeps only n2's candidate, with the victims it was
/// given (by UID).
fn preempt(args: &Value) -> Value {
    let kept: Map<String, Value> = args["NodeNameToMetaVictims"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(node, _)| *node == "n2")
        .map(|(node, v)| (node.clone(), v.clone()))
        .collect();
    json!({"NodeNameToMetaVictims": kept})
}

/// How the extender answers a verb's path and arguments (None: 404).
type Verbs = Arc<dyn Fn(&str, &Value) -> Option<Value> + Send + Sync>;

/// Starts the extender on a loopback port.
async fn start_extender() -> Result<Extender> {
    start_extender_with(Arc::new(|path, args| match path {
        "/sched/filter" => Some(filter(args)),
        "/sched/prioritize" => Some(prioritize(args)),
        "/sched/bind" => Some(json!({"Error": ""})),
        "/sched/preempt" => Some(preempt(args)),
        _ => None,
    }))
    .await
}

/// Starts an extender answering with `verbs` on a loopback port.
async fn start_extender_with(verbs: Verbs) -> Result<Extender> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            let verbs = verbs.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let log = log.clone();
                        let verbs = verbs.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let body = match req.into_body().collect().await {
                                Ok(b) => b.to_bytes(),
                                Err(_) => Bytes::new(),
                            };
                            let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let answer = verbs(&path, &args);
                            if let Ok(mut s) = log.lock() {
                                s.push((path, args));
                            }
                            let resp = match answer {
                                Some(v) => {
                                    hyper::Response::new(Full::new(Bytes::from(v.to_string())))
                                }
                                None => {
                                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                    *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                    r
                                }
                            };
                            Ok::<_, Infallible>(resp)
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    Ok(Extender { addr, seen })
}

async fn start_berthd(dir: &TempDir, extenders: &str) -> Result<Berthd> {
    let cluster = dir.write("cluster.yaml", NODES)?;
    let config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n{extenders}"
    );
    let cfg = dir.write("config.yaml", &config)?;
    Berthd::start(&["--cluster", &cluster, "--config", &cfg, "--seed", "1"]).await
}

fn pod(name: &str, annotations: Value) -> Value {
    sized_pod(name, annotations, "100m", 0)
}

fn sized_pod(name: &str, annotations: Value, cpu: &str, priority: i32) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"priority": priority, "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
    })
}

/// The first decision (bound, or failed) about each pod of `names`.
async fn decisions(
    stream: &mut tonic::Streaming<SchedulingEvent>,
    names: &[&str],
) -> Result<BTreeMap<String, SchedulingEvent>> {
    let mut out = BTreeMap::new();
    let read = async {
        while out.len() < names.len() {
            let Some(e) = stream.message().await? else {
                bail!(
                    "the event stream ended with decisions for only {:?}",
                    out.keys()
                );
            };
            let Some(name) = e.pod.as_ref().map(|p| p.name.clone()) else {
                continue;
            };
            let decided = matches!(e.r#type(), EventType::Scheduled | EventType::Failed);
            if decided && names.contains(&name.as_str()) && !out.contains_key(&name) {
                out.insert(name, e);
            }
        }
        Ok(())
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("no decision for every pod of {names:?} within {GUARD:?}"))??;
    Ok(out)
}

fn scheduled_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
}

/// Reads pod `name` until it satisfies `pred`, looking again after each
/// change the Pod watch reports.
async fn pod_update(
    client: &mut berth_client::Client,
    watch: &mut tonic::Streaming<berth_client::WatchEvent>,
    name: &str,
    pred: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let read = async {
        loop {
            let pod = client.get("Pod", "default", name).await?;
            if pred(&pod) {
                return Ok(pod);
            }
            if watch.message().await?.is_none() {
                bail!("the Pod watch ended before the expected update of {name}: {pod}");
            }
        }
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("no expected update of pod {name} within {GUARD:?}"))?
}

#[tokio::test]
async fn placements_follow_the_http_extenders_filter_scores_and_binding() -> Result<()> {
    let ext = start_extender().await?;
    let dir = TempDir::new("decide")?;
    // Weight 50: n3's 10 becomes 100 × 50 = 5000 points, more than every
    // default Score plugin together.
    let berthd = start_berthd(
        &dir,
        &format!(
            "- urlPrefix: http://{}/sched\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  bindVerb: bind\n  weight: 50\n  nodeCacheCapable: true\n  httpTimeout: 10s\n",
            ext.addr
        ),
    )
    .await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    let mut pod_watch = client.watch("Pod", "default").await?;
    client
        .apply(
            &[
                pod("best", json!({})),
                pod("pinned", json!({"example.com/only": "n1"})),
                pod("drained", json!({"example.com/only": "n4"})),
            ],
            "",
        )
        .await?;
    let decided = decisions(&mut events, &["best", "pinned", "drained"]).await?;
    let outcome = |name: &str| (decided[name].r#type(), decided[name].node.clone());
    assert_eq!(outcome("best"), (EventType::Scheduled, "n3".to_string()));
    assert_eq!(outcome("pinned"), (EventType::Scheduled, "n1".to_string()));
    assert_eq!(outcome("drained").0, EventType::Failed);
    let msg = &decided["drained"].message;
    assert!(
        msg.starts_with("0/4 nodes are available: ")
            && msg.contains(&format!("1 {DRAINED}"))
            && msg.contains("3 node(s) are not n4"),
        "{msg}"
    );

    // The reason reaches the pending pod's condition.
    let drained = pod_update(&mut client, &mut pod_watch, "drained", |p| {
        scheduled_condition(p).is_some_and(|c| c["status"] == "False")
    })
    .await?;
    assert!(drained["spec"]["nodeName"].is_null(), "{drained}");
    let condition = scheduled_condition(&drained).context("a PodScheduled condition")?;
    assert_eq!(condition["reason"], "Unschedulable");
    let text = condition["message"].as_str().unwrap_or("");
    assert!(
        text.contains(DRAINED) && text.contains("3 node(s) are not n4"),
        "{text}"
    );

    // The cluster agrees with the events, and the pods were bound by the
    // extender's bind verb: once each, with their own identity.
    let pods = client.list("Pod", "default").await?;
    let mut uid_and_node = BTreeMap::new();
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let node = p["spec"]["nodeName"].as_str().map(str::to_string);
        uid_and_node.insert(name, (uid, node));
    }
    assert_eq!(uid_and_node["best"].1.as_deref(), Some("n3"));
    assert_eq!(uid_and_node["pinned"].1.as_deref(), Some("n1"));
    let binds = ext.requests("bind");
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for b in &binds {
        let name = b["PodName"].as_str().unwrap_or("").to_string();
        let (uid, node) = &uid_and_node[&name];
        assert_eq!(b["PodNamespace"], "default");
        assert_eq!(b["PodUID"].as_str(), Some(uid.as_str()));
        assert_eq!(b["Node"].as_str(), node.as_deref());
        *per_pod.entry(name).or_default() += 1;
    }
    assert_eq!(
        per_pod,
        BTreeMap::from([("best".to_string(), 1), ("pinned".to_string(), 1)])
    );

    // nodeCacheCapable: every filter and prioritize request named the nodes
    // and carried none in full.
    let filters = ext.requests("filter");
    let prioritizes = ext.requests("prioritize");
    assert!(filters.len() >= 3, "{} filter requests", filters.len());
    assert!(!prioritizes.is_empty());
    for r in filters.iter().chain(&prioritizes) {
        assert!(r["Nodes"].is_null(), "{r}");
        assert!(r["NodeNames"].is_array(), "{r}");
        assert!(r["Pod"]["metadata"]["uid"].is_string(), "{r}");
    }
    // The filter saw every node; prioritize only those that passed it.
    let best_filter = filters
        .iter()
        .find(|r| r["Pod"]["metadata"]["name"] == "best")
        .context("a filter request for best")?;
    let (names, _) = candidates(best_filter);
    assert_eq!(
        names.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from(["n1", "n2", "n3", "n4"].map(String::from))
    );
    let best_prio = prioritizes
        .iter()
        .find(|r| r["Pod"]["metadata"]["name"] == "best")
        .context("a prioritize request for best")?;
    let (names, _) = candidates(best_prio);
    assert_eq!(
        names.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from(["n1", "n2", "n3"].map(String::from))
    );
    Ok(())
}

#[tokio::test]
async fn an_unreachable_ignorable_extender_is_skipped_and_an_error_fails_the_pod() -> Result<()> {
    let ext = start_extender().await?;
    // A port nothing listens on.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let dir = TempDir::new("ignorable")?;
    let mut berthd = start_berthd(
        &dir,
        &format!(
            "- urlPrefix: http://{}/sched\n  filterVerb: filter\n- urlPrefix: http://{gone}\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 1\n  ignorable: true\n",
            ext.addr
        ),
    )
    .await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client
        .apply(
            &[
                pod("pinned", json!({"example.com/only": "n2"})),
                pod(
                    "refused",
                    json!({"example.com/error": "extender refuses this pod"}),
                ),
            ],
            "",
        )
        .await?;
    let decided = decisions(&mut events, &["pinned", "refused"]).await?;
    // The live extender decides; the unreachable one is skipped.
    assert_eq!(
        (decided["pinned"].r#type(), decided["pinned"].node.as_str()),
        (EventType::Scheduled, "n2")
    );
    let skipped = berthd
        .wait_for(|l| {
            message(l) == "ignorable extender skipped"
                && l["fields"]["pod"] == "default/pinned"
                && l["fields"]["point"] == "Filter"
        })
        .await?;
    assert_eq!(
        skipped["fields"]["extender"].as_str(),
        Some(format!("HTTPExtender(http://{gone})").as_str())
    );
    let error = skipped["fields"]["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with(&format!("Post \"http://{gone}/filter\": ")),
        "{error}"
    );

    // The live extender is not ignorable: its Error fails the attempt, and
    // its text is the message.
    assert_eq!(decided["refused"].r#type(), EventType::Failed);
    assert!(
        decided["refused"]
            .message
            .contains("extender refuses this pod"),
        "{}",
        decided["refused"].message
    );
    let failed = berthd
        .wait_for(|l| message(l) == "extender failed" && l["fields"]["pod"] == "default/refused")
        .await?;
    assert_eq!(
        failed["fields"]["extender"].as_str(),
        Some(format!("HTTPExtender(http://{}/sched)", ext.addr).as_str())
    );

    // Without nodeCacheCapable the nodes travel in full.
    let filters = ext.requests("filter");
    let pinned = filters
        .iter()
        .find(|r| r["Pod"]["metadata"]["name"] == "pinned")
        .context("a filter request for pinned")?;
    assert!(pinned["NodeNames"].is_null(), "{pinned}");
    let items = pinned["Nodes"]["items"].as_array().context("Nodes.items")?;
    assert_eq!(items.len(), 4);
    assert!(
        items
            .iter()
            .all(|n| n["status"]["allocatable"]["cpu"] == "4")
    );
    Ok(())
}

#[tokio::test]
async fn the_preempt_verb_chooses_where_preemption_happens() -> Result<()> {
    let ext = start_extender().await?;
    let dir = TempDir::new("preempt")?;
    let berthd = start_berthd(
        &dir,
        &format!(
            "- urlPrefix: http://{}/sched\n  filterVerb: filter\n  preemptVerb: preempt\n  bindVerb: bind\n  nodeCacheCapable: true\n",
            ext.addr
        ),
    )
    .await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    // n1..n3 full of low-priority pods (n4 the extender never allows).
    let fillers: Vec<Value> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            sized_pod(
                &format!("filler-{n}"),
                json!({"example.com/only": n}),
                "4",
                0,
            )
        })
        .collect();
    client.apply(&fillers, "").await?;
    let placed = decisions(&mut events, &["filler-n1", "filler-n2", "filler-n3"]).await?;
    for n in ["n1", "n2", "n3"] {
        let e = &placed[&format!("filler-{n}")];
        assert_eq!((e.r#type(), e.node.as_str()), (EventType::Scheduled, n));
    }
    // DefaultPreemption finds a candidate on each of n1..n3; the extender
    // keeps n2 only.
    client
        .apply(&[sized_pod("vip", json!({}), "4", 1000)], "")
        .await?;
    let mut vip = None;
    let read = async {
        while let Some(e) = events.message().await? {
            let name = e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default();
            if name == "vip" && e.r#type() == EventType::Scheduled {
                vip = Some(e);
                break;
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("vip not scheduled within {GUARD:?}"))??;
    let vip = vip.context("the event stream ended before vip was bound")?;
    assert_eq!(vip.node, "n2");
    let mut left: Vec<String> = client
        .list("Pod", "default")
        .await?
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    left.sort();
    assert_eq!(left, ["filler-n1", "filler-n3", "vip"]);

    // It was asked once, with each candidate's victim by UID.
    let asked = ext.requests("preempt");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0]["NodeNameToVictims"].is_null());
    let meta = asked[0]["NodeNameToMetaVictims"]
        .as_object()
        .context("NodeNameToMetaVictims")?;
    assert_eq!(
        meta.keys().map(String::as_str).collect::<Vec<_>>(),
        ["n1", "n2", "n3"]
    );
    for v in meta.values() {
        assert_eq!(v["Pods"].as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v["NumPDBViolations"], 0);
    }
    Ok(())
}

/// v1.38 (kubernetes#135486): a node where berthd's own plugins need no
/// victim, rejected only by the extender's filter (its GPU is held by a
/// pod of low priority), goes to the preempt verb without victims; the
/// extender names the holder, which is evicted, and the pod binds there
/// once the extender frees the GPU. (Before, berthd failed preemption with
/// "expected at least one victim pod on node".)
#[tokio::test]
async fn the_preempt_verb_names_victims_where_berthd_needs_none() -> Result<()> {
    // The node whose GPU the holder has, until the preempt verb named it.
    let holder_uid: Arc<Mutex<String>> = Arc::default();
    let freed: Arc<Mutex<bool>> = Arc::default();
    let (uid, free) = (holder_uid.clone(), freed.clone());
    let ext = start_extender_with(Arc::new(move |path, args| {
        let wants_gpu = args["Pod"]["metadata"]["annotations"]["example.com/gpu"].is_string();
        match path {
            // The holder goes to n1 (`example.com/only`).
            "/sched/filter" if !wants_gpu => Some(filter(args)),
            "/sched/filter" => {
                let (names, _) = candidates(args);
                let mut failed = Map::new();
                let mut unresolvable = Map::new();
                let mut kept = Vec::new();
                for n in names {
                    if n != "n1" {
                        unresolvable.insert(n, json!("node(s) had no GPU"));
                    } else if !*free.lock().ok()? {
                        failed.insert(n, json!("node(s) had their GPU in use"));
                    } else {
                        kept.push(n);
                    }
                }
                Some(json!({"NodeNames": kept, "FailedNodes": failed,
                    "FailedAndUnresolvableNodes": unresolvable, "Error": ""}))
            }
            "/sched/preempt" => {
                let mut out = args["NodeNameToMetaVictims"].clone();
                if let Some(v) = out.get_mut("n1")
                    && v["Pods"].as_array().is_some_and(Vec::is_empty)
                {
                    v["Pods"] = json!([{"UID": *uid.lock().ok()?}]);
                    *free.lock().ok()? = true;
                }
                Some(json!({"NodeNameToMetaVictims": out}))
            }
            _ => None,
        }
    }))
    .await?;
    let dir = TempDir::new("preempt-placeholder")?;
    let berthd = start_berthd(
        &dir,
        &format!(
            "- urlPrefix: http://{}/sched\n  filterVerb: filter\n  preemptVerb: preempt\n  nodeCacheCapable: true\n",
            ext.addr
        ),
    )
    .await?;
    let mut client = berthd.client().await?;
    let mut events = client.watch_events("default").await?;
    client
        .apply(
            &[sized_pod(
                "holder",
                json!({"example.com/only": "n1"}),
                "1",
                0,
            )],
            "",
        )
        .await?;
    decisions(&mut events, &["holder"]).await?;
    let holder = client.get("Pod", "default", "holder").await?;
    *holder_uid.lock().map_err(|_| anyhow!("lock"))? = holder["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    client
        .apply(
            &[sized_pod("vip", json!({"example.com/gpu": "1"}), "1", 1000)],
            "",
        )
        .await?;
    let mut bound = None;
    let read = async {
        while let Some(e) = events.message().await? {
            let name = e.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default();
            if name == "vip" && e.r#type() == EventType::Scheduled {
                bound = Some(e.node.clone());
                break;
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(GUARD, read)
        .await
        .map_err(|_| anyhow!("vip not scheduled within {GUARD:?}"))??;
    assert_eq!(bound.as_deref(), Some("n1"));
    let left: Vec<String> = client
        .list("Pod", "default")
        .await?
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(left, ["vip"], "the holder was evicted");
    // The preempt verb got n1 alone, without victims.
    let asked = ext.requests("preempt");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0]["NodeNameToMetaVictims"],
        json!({"n1": {"Pods": [], "NumPDBViolations": 0}})
    );
    Ok(())
}
