//! kube-scheduler's extender protocol on the wire
//! (`k8s.io/kube-scheduler/extender/v1`): the JSON berth sends and the JSON
//! it accepts back.
//!
//! The Go types carry no JSON tags, so their keys are the Go field names
//! (`Pod`, `NodeNames`, `FailedNodes`, ...) and an absent pointer, map or
//! slice is `null`. What berth sends uses exactly those keys. What it reads
//! back is matched as Go's decoder matches it: the exact key first, else any
//! key equal to it ignoring ASCII case; `null` is the zero value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::model::PodObject as Pod;
use serde::Serialize;
use serde_json::{Map, Value};

/// upstream's `MaxExtenderPriority`: extenders score 0..=10.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// A `v1.NodeList` as Go marshals it (no kind or apiVersion; empty list
/// metadata).
#[derive(Debug, Serialize)]
pub struct NodeList<'a> {
    /// Always `{}`.
    pub metadata: Map<String, Value>,
    /// The nodes.
    pub items: Vec<&'a Node>,
}

/// `ExtenderArgs`: the Filter and Prioritize request.
#[derive(Debug, Serialize)]
pub struct ExtenderArgs<'a> {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: &'a Pod,
    /// The candidate nodes in full, unless the extender caches nodes.
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList<'a>>,
    /// The candidate node names, when the extender caches nodes.
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<&'a str>>,
}

/// `Victims`: full pods.
#[derive(Debug, Serialize)]
pub struct Victims<'a> {
    /// The pods to evict.
    #[serde(rename = "Pods")]
    pub pods: Vec<&'a Pod>,
    /// How many of the evictions violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `MetaPod`.
#[derive(Debug, Serialize)]
pub struct MetaPod<'a> {
    /// The pod's UID.
    #[serde(rename = "UID")]
    pub uid: &'a str,
}

/// `MetaVictims`: pods by UID.
#[derive(Debug, Serialize)]
pub struct MetaVictims<'a> {
    /// The pods to evict.
    #[serde(rename = "Pods")]
    pub pods: Vec<MetaPod<'a>>,
    /// How many of the evictions violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionArgs`: exactly one of the maps is set.
#[derive(Debug, Serialize)]
pub struct ExtenderPreemptionArgs<'a> {
    /// The preemptor.
    #[serde(rename = "Pod")]
    pub pod: &'a Pod,
    /// Victims in full (extenders without a node cache).
    #[serde(rename = "NodeNameToVictims")]
    pub node_name_to_victims: Option<BTreeMap<&'a str, Victims<'a>>>,
    /// Victims by UID (node-cache-capable extenders).
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: Option<BTreeMap<&'a str, MetaVictims<'a>>>,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Serialize)]
pub struct ExtenderBindingArgs<'a> {
    /// The pod's name.
    #[serde(rename = "PodName")]
    pub pod_name: &'a str,
    /// The pod's namespace.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: &'a str,
    /// The pod's UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: &'a str,
    /// The node chosen.
    #[serde(rename = "Node")]
    pub node: &'a str,
}

/// `ExtenderFilterResult`, read back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FilterResult {
    /// The names of the nodes in `Nodes.items`, when `Nodes` was not null.
    pub nodes: Option<Vec<String>>,
    /// `NodeNames`, when not null.
    pub node_names: Option<Vec<String>>,
    /// `FailedNodes`: node -> reason.
    pub failed_nodes: BTreeMap<String, String>,
    /// `FailedAndUnresolvableNodes`: node -> reason.
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// `Error`.
    pub error: String,
}

/// One `HostPriority`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPriority {
    /// `Host`.
    pub host: String,
    /// `Score`.
    pub score: i64,
}

/// `MetaVictims`, read back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MetaVictimsResult {
    /// The pod UIDs.
    pub pods: Vec<String>,
    /// `NumPDBViolations`.
    pub num_pdb_violations: i64,
}

/// Why an answer cannot be read; the text says where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(msg.into()))
}

/// The value under `key`, matched as Go's decoder does.
fn field<'v>(obj: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    obj.get(key).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// An object, or `None` for `null`.
fn object<'v>(v: &'v Value, what: &str) -> Result<Option<&'v Map<String, Value>>, WireError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(o) => Ok(Some(o)),
        other => bad(format!("{what}: expected an object, got {}", kind(other))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string(v: Option<&Value>, what: &str) -> Result<String, WireError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => bad(format!("{what}: expected a string, got {}", kind(other))),
    }
}

fn integer(v: Option<&Value>, what: &str) -> Result<i64, WireError> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Ok(i),
            None => bad(format!("{what}: {n} is not a 64-bit integer")),
        },
        Some(other) => bad(format!("{what}: expected a number, got {}", kind(other))),
    }
}

fn array<'v>(v: Option<&'v Value>, what: &str) -> Result<Option<&'v Vec<Value>>, WireError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => bad(format!("{what}: expected an array, got {}", kind(other))),
    }
}

fn strings(v: Option<&Value>, what: &str) -> Result<Option<Vec<String>>, WireError> {
    let Some(a) = array(v, what)? else {
        return Ok(None);
    };
    a.iter()
        .enumerate()
        .map(|(i, v)| string(Some(v), &format!("{what}[{i}]")))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn string_map(v: Option<&Value>, what: &str) -> Result<BTreeMap<String, String>, WireError> {
    let Some(o) = v.map(|v| object(v, what)).transpose()?.flatten() else {
        return Ok(BTreeMap::new());
    };
    o.iter()
        .map(|(k, v)| Ok((k.clone(), string(Some(v), &format!("{what}[{k:?}]"))?)))
        .collect()
}

fn parse(body: &[u8]) -> Result<Value, WireError> {
    serde_json::from_slice(body).or_else(|e| bad(format!("not JSON: {e}")))
}

/// Reads an `ExtenderFilterResult`.
pub fn parse_filter_result(body: &[u8]) -> Result<FilterResult, WireError> {
    let v = parse(body)?;
    let Some(o) = object(&v, "ExtenderFilterResult")? else {
        return Ok(FilterResult::default());
    };
    let nodes = match field(o, "Nodes").map(|v| object(v, "Nodes")).transpose()? {
        None | Some(None) => None,
        Some(Some(list)) => {
            let items = array(field(list, "Items"), "Nodes.items")?;
            let mut names = Vec::new();
            for (i, item) in items.into_iter().flatten().enumerate() {
                let what = format!("Nodes.items[{i}]");
                let meta = object(item, &what)?
                    .and_then(|n| field(n, "metadata"))
                    .map(|m| object(m, &format!("{what}.metadata")))
                    .transpose()?
                    .flatten();
                let name = string(
                    meta.and_then(|m| field(m, "name")),
                    &format!("{what}.metadata.name"),
                )?;
                if name.is_empty() {
                    return bad(format!("{what}: a node without metadata.name"));
                }
                names.push(name);
            }
            Some(names)
        }
    };
    Ok(FilterResult {
        nodes,
        node_names: strings(field(o, "NodeNames"), "NodeNames")?,
        failed_nodes: string_map(field(o, "FailedNodes"), "FailedNodes")?,
        failed_and_unresolvable_nodes: string_map(
            field(o, "FailedAndUnresolvableNodes"),
            "FailedAndUnresolvableNodes",
        )?,
        error: string(field(o, "Error"), "Error")?,
    })
}

/// Reads a `HostPriorityList`.
pub fn parse_host_priority_list(body: &[u8]) -> Result<Vec<HostPriority>, WireError> {
    let v = parse(body)?;
    let Some(list) = array(Some(&v), "HostPriorityList")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let what = format!("HostPriorityList[{i}]");
        let Some(o) = object(item, &what)? else {
            return bad(format!("{what}: null"));
        };
        out.push(HostPriority {
            host: string(field(o, "Host"), &format!("{what}.Host"))?,
            score: integer(field(o, "Score"), &format!("{what}.Score"))?,
        });
    }
    Ok(out)
}

/// Reads an `ExtenderPreemptionResult`: node -> victims by UID.
pub fn parse_preemption_result(
    body: &[u8],
) -> Result<BTreeMap<String, MetaVictimsResult>, WireError> {
    let v = parse(body)?;
    let Some(o) = object(&v, "ExtenderPreemptionResult")? else {
        return Ok(BTreeMap::new());
    };
    let what = "NodeNameToMetaVictims";
    let Some(map) = field(o, what)
        .map(|v| object(v, what))
        .transpose()?
        .flatten()
    else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (node, victims) in map {
        let what = format!("NodeNameToMetaVictims[{node:?}]");
        let mut r = MetaVictimsResult::default();
        if let Some(vo) = object(victims, &what)? {
            r.num_pdb_violations = integer(
                field(vo, "NumPDBViolations"),
                &format!("{what}.NumPDBViolations"),
            )?;
            let pods = array(field(vo, "Pods"), &format!("{what}.Pods"))?;
            for (i, p) in pods.into_iter().flatten().enumerate() {
                let pw = format!("{what}.Pods[{i}]");
                let Some(po) = object(p, &pw)? else {
                    return bad(format!("{pw}: null"));
                };
                r.pods.push(string(field(po, "UID"), &format!("{pw}.UID"))?);
            }
        }
        out.insert(node.clone(), r);
    }
    Ok(out)
}

/// Reads an `ExtenderBindingResult`: its `Error`.
pub fn parse_binding_result(body: &[u8]) -> Result<String, WireError> {
    let v = parse(body)?;
    let Some(o) = object(&v, "ExtenderBindingResult")? else {
        return Ok(String::new());
    };
    string(field(o, "Error"), "Error")
}
