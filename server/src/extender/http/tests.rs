//! The HTTP extender's JSON (what berth sends, what it accepts back) and its
//! verdicts against a real HTTP server on a loopback port.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;
use crate::cache::NodeInfo;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config::extenders::{RawHttpExtender, resolve_http_extenders};
use crate::framework::Parallelizer;
use crate::testing::{make_node, make_pod};

fn nodes(names: &[&str]) -> Vec<Arc<NodeInfo>> {
    names
        .iter()
        .map(|n| Arc::new(NodeInfo::new(Arc::new(make_node(n).cpu("4").build()))))
        .collect()
}

fn to_json(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap()
}

#[test]
fn filter_args_carry_full_nodes_or_only_names() {
    let pod = make_pod("web").uid("u-1").req_cpu("1").build();
    let ns = nodes(&["a", "b"]);
    let full = wire::ExtenderArgs {
        pod: &pod.pod,
        nodes: Some(wire::NodeList {
            metadata: serde_json::Map::new(),
            items: ns.iter().map(|n| &*n.node().unwrap().node).collect(),
        }),
        node_names: None,
    };
    let v = to_json(&full);
    assert_eq!(v["Pod"]["metadata"]["name"], "web");
    assert_eq!(v["Pod"]["metadata"]["uid"], "u-1");
    assert_eq!(v["Nodes"]["metadata"], json!({}));
    assert_eq!(v["Nodes"]["items"][1]["metadata"]["name"], "b");
    assert_eq!(v["Nodes"]["items"][0]["status"]["allocatable"]["cpu"], "4");
    assert_eq!(v["NodeNames"], Value::Null);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["NodeNames", "Nodes", "Pod"]);

    let names = wire::ExtenderArgs {
        pod: &pod.pod,
        nodes: None,
        node_names: Some(vec!["a", "b"]),
    };
    let v = to_json(&names);
    assert_eq!(v["Nodes"], Value::Null);
    assert_eq!(v["NodeNames"], json!(["a", "b"]));
}

#[test]
fn binding_and_preemption_args_use_upstreams_keys() {
    let v = to_json(&wire::ExtenderBindingArgs {
        pod_name: "web",
        pod_namespace: "shop",
        pod_uid: "u-1",
        node: "a",
    });
    assert_eq!(
        v,
        json!({"PodName": "web", "PodNamespace": "shop", "PodUID": "u-1", "Node": "a"})
    );
    let victim = make_pod("low").uid("u-9").node("a").build();
    let pod = make_pod("high").build();
    let meta = wire::ExtenderPreemptionArgs {
        pod: &pod.pod,
        node_name_to_victims: None,
        node_name_to_meta_victims: Some(BTreeMap::from([(
            "a",
            wire::MetaVictims {
                pods: vec![wire::MetaPod { uid: "u-9" }],
                num_pdb_violations: 1,
            },
        )])),
    };
    let v = to_json(&meta);
    assert_eq!(v["NodeNameToVictims"], Value::Null);
    assert_eq!(
        v["NodeNameToMetaVictims"],
        json!({"a": {"Pods": [{"UID": "u-9"}], "NumPDBViolations": 1}})
    );
    let full = wire::ExtenderPreemptionArgs {
        pod: &pod.pod,
        node_name_to_victims: Some(BTreeMap::from([(
            "a",
            wire::Victims {
                pods: vec![&victim.pod],
                num_pdb_violations: 0,
            },
        )])),
        node_name_to_meta_victims: None,
    };
    let v = to_json(&full);
    assert_eq!(v["NodeNameToMetaVictims"], Value::Null);
    assert_eq!(
        v["NodeNameToVictims"]["a"]["Pods"][0]["metadata"]["name"],
        "low"
    );
    assert_eq!(v["NodeNameToVictims"]["a"]["NumPDBViolations"], 0);
}

#[test]
fn filter_results_parse_as_gos_decoder_reads_them() {
    // What a Go extender marshals from ExtenderFilterResult.
    let names = br#"{"Nodes":null,"NodeNames":["a"],"FailedNodes":{"b":"no gpu"},"FailedAndUnresolvableNodes":null,"Error":""}"#;
    assert_eq!(
        wire::parse_filter_result(names).unwrap(),
        wire::FilterResult {
            nodes: None,
            node_names: Some(vec!["a".into()]),
            failed_nodes: BTreeMap::from([("b".into(), "no gpu".into())]),
            failed_and_unresolvable_nodes: BTreeMap::new(),
            error: String::new(),
        }
    );
    // Full objects, and keys in another case (Go matches them too).
    let full = br#"{"nodes":{"metadata":{},"items":[{"metadata":{"name":"c","labels":{"x":"y"}},"status":{}}]},"failedAndUnresolvableNodes":{"d":"gone"},"error":null}"#;
    let r = wire::parse_filter_result(full).unwrap();
    assert_eq!(r.nodes, Some(vec!["c".to_string()]));
    assert_eq!(r.node_names, None);
    assert_eq!(r.failed_and_unresolvable_nodes["d"], "gone");
    assert_eq!(
        wire::parse_filter_result(br#"{"Error":"boom"}"#)
            .unwrap()
            .error,
        "boom"
    );
    for (body, want) in [
        (
            &br#"{"NodeNames":"a"}"#[..],
            "NodeNames: expected an array, got a string",
        ),
        (
            br#"{"FailedNodes":{"b":3}}"#,
            "FailedNodes[\"b\"]: expected a string, got a number",
        ),
        (
            br#"{"Nodes":{"items":[{"metadata":{}}]}}"#,
            "Nodes.items[0]: a node without metadata.name",
        ),
        (
            br#"[1]"#,
            "ExtenderFilterResult: expected an object, got an array",
        ),
    ] {
        assert_eq!(wire::parse_filter_result(body).unwrap_err().0, want);
    }
    assert!(
        wire::parse_filter_result(b"<html>")
            .unwrap_err()
            .0
            .starts_with("not JSON: ")
    );
}

#[test]
fn priorities_preemption_and_binding_results_parse() {
    assert_eq!(
        wire::parse_host_priority_list(br#"[{"Host":"a","Score":7},{"host":"b","score":0}]"#)
            .unwrap(),
        [
            wire::HostPriority {
                host: "a".into(),
                score: 7
            },
            wire::HostPriority {
                host: "b".into(),
                score: 0
            }
        ]
    );
    assert_eq!(wire::parse_host_priority_list(b"null").unwrap(), []);
    assert_eq!(
        wire::parse_host_priority_list(br#"[{"Host":"a","Score":1.5}]"#)
            .unwrap_err()
            .0,
        "HostPriorityList[0].Score: 1.5 is not a 64-bit integer"
    );
    let p = wire::parse_preemption_result(
        br#"{"NodeNameToMetaVictims":{"a":{"Pods":[{"UID":"u-1"},{"UID":"u-2"}],"NumPDBViolations":1},"b":null}}"#,
    )
    .unwrap();
    assert_eq!(p["a"].pods, ["u-1", "u-2"]);
    assert_eq!(p["a"].num_pdb_violations, 1);
    assert!(p["b"].pods.is_empty());
    assert_eq!(wire::parse_binding_result(br#"{"Error":""}"#).unwrap(), "");
    assert_eq!(
        wire::parse_binding_result(br#"{"Error":"taken"}"#).unwrap(),
        "taken"
    );
}

/// A loopback HTTP server answering every POST with `answer(path, body)`,
/// recording each request.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

type Answer = Arc<dyn Fn(&str, &Value) -> (u16, String) + Send + Sync>;

async fn serve(answer: Answer) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ext", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        let log = log.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            let (code, out) = answer(&path, &v);
                            log.lock().push((path, v));
                            Ok::<_, Infallible>(
                                hyper::Response::builder()
                                    .status(code)
                                    .body(Full::new(Bytes::from(out)))
                                    .unwrap(),
                            )
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
    Server { url, seen }
}

fn extender(yaml: &str) -> HttpExtender {
    let raw: Vec<RawHttpExtender> = serde_yaml::from_str(yaml).unwrap();
    let cfg = resolve_http_extenders(raw).unwrap().remove(0);
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    HttpExtender::new(cfg, &handle).unwrap()
}

#[tokio::test]
async fn filter_verdicts_follow_the_failed_maps_and_garbage_is_an_error() {
    let server = serve(Arc::new(|path, args| match path {
        "/ext/filter" => {
            // Keeps a, fails b, c unresolvable (in both maps), drops d.
            assert!(args["Nodes"].is_null(), "nodeCacheCapable sends names only");
            (
                200,
                json!({"NodeNames": ["a"], "FailedNodes": {"b": "b is busy", "c": "c busy"}, "FailedAndUnresolvableNodes": {"c": "c is gone"}, "Error": ""}).to_string(),
            )
        }
        "/ext/bad" => (200, "{\"NodeNames\": [\"zz\"]}".into()),
        "/ext/prio" => (200, json!([{"Host": "a", "Score": 3}, {"Host": "b", "Score": 10}, {"Host": "elsewhere", "Score": 9}]).to_string()),
        _ => (404, String::new()),
    }))
    .await;
    let ext = extender(&format!(
        "- {{urlPrefix: '{}/', filterVerb: filter, prioritizeVerb: prio, weight: 2, nodeCacheCapable: true}}",
        server.url
    ));
    let pod = make_pod("web").build();
    let ns = nodes(&["a", "b", "c", "d"]);
    let got = ext.filter_remote(&pod, &ns).await.unwrap();
    let summary: Vec<(Code, Vec<String>)> = got
        .iter()
        .map(|s| {
            (
                s.code(),
                s.reasons().iter().map(|r| r.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (Code::Success, vec![]),
            (Code::Unschedulable, vec!["b is busy".to_string()]),
            (
                Code::UnschedulableAndUnresolvable,
                vec!["c is gone".to_string()]
            ),
            (Code::UnschedulableAndUnresolvable, vec![]),
        ]
    );
    assert_eq!(
        server.seen.lock()[0].1["NodeNames"],
        json!(["a", "b", "c", "d"])
    );

    // Scores are scaled by 10 (MaxNodeScore / MaxExtenderPriority); unknown
    // hosts are ignored. The weight applies in the runtime.
    assert_eq!(
        ext.prioritize_remote(&pod, &ns).await.unwrap(),
        [30, 100, 0, 0]
    );

    let bad = extender(&format!(
        "- {{urlPrefix: '{}', filterVerb: bad, nodeCacheCapable: true}}",
        server.url
    ));
    let e = bad.filter_remote(&pod, &ns).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "extender {:?} answered \"bad\" with an unusable result: it claims a filtered node \"zz\" which is not found in the input node list",
            server.url
        )
    );
    let missing = extender(&format!(
        "- {{urlPrefix: '{}', filterVerb: nope}}",
        server.url
    ));
    assert_eq!(
        missing
            .filter_remote(&pod, &ns)
            .await
            .unwrap_err()
            .to_string(),
        format!(
            "failed nope with extender at URL {}/nope, code 404",
            server.url
        )
    );
    // Full-object mode sends the nodes.
    assert_eq!(
        server.seen.lock()[3].1["Nodes"]["items"][3]["metadata"]["name"],
        "d"
    );
}

#[tokio::test]
async fn an_unreachable_extender_names_the_url_and_ignorable_ones_pass_every_node() {
    // A port nothing listens on: bind, learn it, close.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let pod = make_pod("web").build();
    let ns = nodes(&["a", "b"]);
    let strict = extender(&format!("- {{urlPrefix: 'http://{addr}', filterVerb: f}}"));
    let e = strict
        .filter_remote(&pod, &ns)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&format!("Post \"http://{addr}/f\": ")), "{e}");
    let state = CycleState::default();
    let s = strict.filter_nodes(&state, &pod, &ns).await.unwrap_err();
    assert_eq!(s.code(), Code::Error);
    assert_eq!(strict.stats().failures.load(Ordering::Relaxed), 1);

    let lax = extender(&format!(
        "- {{urlPrefix: 'http://{addr}', filterVerb: f, ignorable: true}}"
    ));
    let v = lax.filter_nodes(&state, &pod, &ns).await.unwrap();
    assert!(v.iter().all(|s| s.is_success()));
    assert_eq!(lax.stats().skipped.load(Ordering::Relaxed), 1);

    // A pod without the managed resource never reaches the extender.
    let managed = extender(&format!(
        "- {{urlPrefix: 'http://{addr}', filterVerb: f, managedResources: [{{name: example.com/gpu}}]}}"
    ));
    let v = managed.filter_nodes(&state, &pod, &ns).await.unwrap();
    assert!(v.iter().all(|s| s.is_success()));
    assert_eq!(managed.stats().calls.load(Ordering::Relaxed), 0);
    let gpu_pod = make_pod("g").req("example.com/gpu", "1").build();
    assert!(managed.interested(&gpu_pod));
}

#[test]
fn tls_files_are_checked_at_startup_naming_the_field() {
    let raw: Vec<RawHttpExtender> = serde_yaml::from_str(
        "- {urlPrefix: 'https://x:1', filterVerb: f, tlsConfig: {caFile: /nonexistent/ca.pem}}",
    )
    .unwrap();
    let cfg = resolve_http_extenders(raw).unwrap().remove(0);
    let cluster = EmbeddedCluster::new();
    let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
    let e = HttpExtender::new(cfg, &handle).unwrap_err().to_string();
    assert!(
        e.starts_with("extenders[0].tlsConfig.caFile: cannot read \"/nonexistent/ca.pem\""),
        "{e}"
    );
}
