//! The SchedulingWithExtender workload's Filter+Score logic, and the three
//! ways it is served:
//!
//! * [`NativeBenchPlugin`]: a framework plugin in the scheduler's process;
//! * [`RemoteBench`]: a berth remote extender written with the
//!   berth-extender SDK (the `berth-bench-extender --protocol grpc`
//!   process), reached over the `berth.extender.v1.Extender/Session` stream
//!   with one batched Filter request per cycle that brings the scores too
//!   (protocol version 2: nodes named by id, the request sent while the
//!   native Filter plugins run);
//! * [`serve_http`]: kube-scheduler's HTTP JSON extender protocol (extender
//!   v1: `filter` and `prioritize` verbs; `berth-bench-extender --protocol
//!   http`), the way a minimal extender without a node cache of its own
//!   answers: it decodes the pod and the candidate nodes, and sends back
//!   the nodes that pass.
//!
//! The logic:
//!
//! * Filter: a node labelled `bench.berth.dev/reject=true` is rejected (no
//!   workload node is, so the check runs and passes everywhere);
//! * Score: [`priority_of`] a node named `node-<n>` is `10 - (n mod 11)`,
//!   on the extender protocol's 0..=10 scale; the native plugin and the gRPC
//!   extender give it times 10 ([`score_of`], the framework's 0..=100),
//!   which is what berth makes of an HTTP extender's priority at weight 1.

use std::collections::BTreeMap;
use std::convert::Infallible;

use berth_extender::{
    Context as ExtenderContext, CyclePod, HandlerResult, NodeRef, Status as ExtenderStatus,
};
use berth_server::cache::NodeInfo;
use berth_server::extension_points;
use berth_server::framework::{CycleState, FilterPlugin, Plugin, ScorePlugin, Status};
use berth_server::model::PodInfo;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};

/// The name of the extender workload's plugin (and remote extender).
pub const EXTENDER_NAME: &str = "BenchExtender";
/// Nodes with this label set to `true` are rejected by its Filter.
pub const REJECT_LABEL: &str = "bench.berth.dev/reject";
/// Why a node is rejected.
pub const REJECT_REASON: &str = "node(s) were rejected by the benchmark";

/// The Filter verdict, from the node's reject label.
pub fn passes(reject_label: Option<&str>) -> bool {
    reject_label != Some("true")
}

/// A node's priority on the extender protocol's scale (0..=10), from its
/// name: `10 - (n mod 11)` for `node-<n>`, 10 for other names.
pub fn priority_of(node_name: &str) -> i64 {
    let digits = node_name.rsplit('-').next().unwrap_or("");
    10 - digits.parse::<i64>().map_or(0, |n| n % 11)
}

/// A node's score on the framework's scale (0..=100).
pub fn score_of(node_name: &str) -> i64 {
    priority_of(node_name) * 10
}

/// The logic as a native plugin.
#[derive(Debug, Default)]
pub struct NativeBenchPlugin;

impl Plugin for NativeBenchPlugin {
    fn name(&self) -> &'static str {
        EXTENDER_NAME
    }
    extension_points!(filter, score);
}

impl FilterPlugin for NativeBenchPlugin {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let label = node.node().and_then(|n| n.labels.get(REJECT_LABEL));
        if passes(label) {
            Status::success()
        } else {
            Status::unresolvable(REJECT_REASON)
        }
    }
}

impl ScorePlugin for NativeBenchPlugin {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(score_of(node.name()))
    }
}

/// The logic as a berth remote extender, through the SDK.
#[derive(Debug, Default)]
pub struct RemoteBench;

impl berth_extender::Filter for RemoteBench {
    fn filter(&self, _: &ExtenderContext, _: &CyclePod, node: &NodeRef<'_>) -> ExtenderStatus {
        let label = node
            .object()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(REJECT_LABEL))
            .map(String::as_str);
        if passes(label) {
            ExtenderStatus::success()
        } else {
            ExtenderStatus::unresolvable(REJECT_REASON)
        }
    }
}

impl berth_extender::Score for RemoteBench {
    fn score(&self, _: &ExtenderContext, _: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        Ok(score_of(node.name()))
    }
}

/// `ExtenderArgs` of kube-scheduler's extender v1 protocol (Go field names).
#[derive(Debug, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: Option<Pod>,
    /// The candidate nodes (when the extender is not node-cache capable).
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeItems>,
    /// The candidate nodes' names (when it is).
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList` as the protocol carries it: its items are what matter.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeItems {
    /// The list's metadata, passed through.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The nodes.
    #[serde(default)]
    pub items: Vec<Node>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Default, Serialize)]
pub struct ExtenderFilterResult {
    /// The nodes that pass (node objects in, node objects out).
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeItems>,
    /// The names of the nodes that pass (names in, names out).
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that fail, with why.
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes that fail where preemption would not help.
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// An error, if the call failed.
    #[serde(rename = "Error")]
    pub error: String,
}

/// `HostPriority`.
#[derive(Debug, Serialize)]
pub struct HostPriority {
    /// The node.
    #[serde(rename = "Host")]
    pub host: String,
    /// Its priority, 0..=10.
    #[serde(rename = "Score")]
    pub score: i64,
}

fn node_reject_label(n: &Node) -> Option<&str> {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REJECT_LABEL))
        .map(String::as_str)
}

/// The `filter` verb.
pub fn http_filter(args: ExtenderArgs) -> ExtenderFilterResult {
    let mut out = ExtenderFilterResult::default();
    if let Some(list) = args.nodes {
        let mut passing = Vec::with_capacity(list.items.len());
        for n in list.items {
            if passes(node_reject_label(&n)) {
                passing.push(n);
            } else {
                let name = n.metadata.name.clone().unwrap_or_default();
                out.failed_and_unresolvable_nodes
                    .insert(name, REJECT_REASON.into());
            }
        }
        out.nodes = Some(NodeItems {
            metadata: list.metadata,
            items: passing,
        });
    } else if let Some(names) = args.node_names {
        // Names only: this extender keeps no node cache, so it cannot see
        // labels; every named node passes.
        out.node_names = Some(names);
    }
    out
}

/// The `prioritize` verb.
pub fn http_prioritize(args: ExtenderArgs) -> Vec<HostPriority> {
    let names: Vec<String> = match (args.nodes, args.node_names) {
        (Some(list), _) => list
            .items
            .into_iter()
            .map(|n| n.metadata.name.unwrap_or_default())
            .collect(),
        (None, Some(names)) => names,
        (None, None) => Vec::new(),
    };
    names
        .into_iter()
        .map(|host| HostPriority {
            score: priority_of(&host),
            host,
        })
        .collect()
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn text_response(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r
}

async fn handle_http(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::POST {
        return Ok(text_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST only\n".into(),
        ));
    }
    let verb = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(text_response(
                StatusCode::BAD_REQUEST,
                format!("reading the body: {e}\n"),
            ));
        }
    };
    let args: ExtenderArgs = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return Ok(text_response(
                StatusCode::BAD_REQUEST,
                format!("decoding ExtenderArgs: {e}\n"),
            ));
        }
    };
    let encoded = match verb.as_str() {
        "filter" => serde_json::to_vec(&http_filter(args)),
        "prioritize" => serde_json::to_vec(&http_prioritize(args)),
        other => {
            return Ok(text_response(
                StatusCode::NOT_FOUND,
                format!("unknown verb {other:?}\n"),
            ));
        }
    };
    Ok(match encoded {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(e) => text_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the result: {e}\n"),
        ),
    })
}

/// Serves the HTTP extender on `listener` until the process ends (or
/// accepting fails).
pub async fn serve_http(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        // Small request/response exchanges: do not wait for Nagle.
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle_http))
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects;

    #[test]
    fn the_logic_scores_by_node_number_and_rejects_only_labelled_nodes() {
        assert_eq!(priority_of("node-00000"), 10);
        assert_eq!(priority_of("node-00010"), 0);
        assert_eq!(priority_of("node-00011"), 10);
        assert_eq!(priority_of("odd"), 10);
        assert_eq!(score_of("node-00003"), 70);
        assert!(passes(None));
        assert!(passes(Some("false")));
        assert!(!passes(Some("true")));
    }

    #[test]
    fn http_verbs_answer_in_the_extender_v1_shapes() {
        let mut rejected = objects::node(1, &[]);
        rejected
            .metadata
            .labels
            .get_or_insert_default()
            .insert(REJECT_LABEL.into(), "true".into());
        let nodes = vec![objects::node(0, &[]), rejected, objects::node(2, &[])];
        let pod = objects::PodTemplate::Default.pod("default", "p");
        let wire = serde_json::json!({
            "Pod": pod,
            "Nodes": {"metadata": {}, "items": nodes},
            "NodeNames": null,
        });
        let args: ExtenderArgs = serde_json::from_value(wire.clone()).unwrap();
        let out = serde_json::to_value(http_filter(args)).unwrap();
        let names: Vec<&str> = out["Nodes"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["node-00000", "node-00002"]);
        assert_eq!(
            out["FailedAndUnresolvableNodes"],
            serde_json::json!({"node-00001": REJECT_REASON})
        );
        assert_eq!(out["Error"], "");

        let args: ExtenderArgs = serde_json::from_value(wire).unwrap();
        let out = serde_json::to_value(http_prioritize(args)).unwrap();
        assert_eq!(
            out,
            serde_json::json!([
                {"Host": "node-00000", "Score": 10},
                {"Host": "node-00001", "Score": 9},
                {"Host": "node-00002", "Score": 8},
            ])
        );
    }
}
