//! `berthctl get`: objects of the embedded cluster, as tables or as
//! Kubernetes JSON/YAML.

use crate::Client;
use anyhow::Result;
use serde_json::{Value, json};

use crate::cli::Rpc;
use crate::cli::output::{Output, emit, render};
use crate::cli::quantity::{format_bytes, format_cpu, percent};
use crate::cli::table::Table;

/// Which table a kind gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindClass {
    /// Nodes, with what their pods request.
    Node,
    /// Pods, with where they are.
    Pod,
    /// ResourceClaims, with their state and devices.
    ResourceClaim,
    /// ResourceSlices, with their node, driver, pool and devices.
    ResourceSlice,
    /// Anything else the server stores: namespace and name.
    Other,
}

/// Classifies a kind as kubectl users type it (`nodes`, `no`, `Pod`, `po`).
/// Anything else is passed to the server as typed, which knows the rest.
pub fn classify(kind: &str) -> KindClass {
    match kind.to_ascii_lowercase().as_str() {
        "node" | "nodes" | "no" => KindClass::Node,
        "pod" | "pods" | "po" => KindClass::Pod,
        "resourceclaim" | "resourceclaims" => KindClass::ResourceClaim,
        "resourceslice" | "resourceslices" => KindClass::ResourceSlice,
        _ => KindClass::Other,
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, p| &v[*p]).as_str().unwrap_or("")
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// `berthctl get KIND [NAME]`.
pub async fn run(
    client: &mut Client,
    format: Output,
    kind: &str,
    name: Option<&str>,
    namespace: &str,
) -> Result<()> {
    if format == Output::Table && classify(kind) == KindClass::Node {
        // The server sums each node's pods (in the scheduler's cache);
        // nothing but the summary crosses the wire.
        let nodes = client.node_usage(name.unwrap_or("")).await.rpc()?;
        if nodes.is_empty() {
            eprintln!("No resources found.");
            return Ok(());
        }
        return emit(&usage_table(&nodes));
    }
    let items = match name {
        Some(n) => vec![client.get(kind, namespace, n).await.rpc()?],
        None => client.list(kind, namespace).await.rpc()?,
    };
    if format != Output::Table {
        let v = if name.is_some() {
            items.into_iter().next().unwrap_or_default()
        } else {
            json!({
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"resourceVersion": ""},
                "items": items,
            })
        };
        return emit(&render(format, &v)?);
    }
    if items.is_empty() {
        eprintln!("No resources found.");
        return Ok(());
    }
    let text = match classify(kind) {
        KindClass::Pod => pods_table(&items),
        KindClass::ResourceClaim => claims_table(&items),
        KindClass::ResourceSlice => slices_table(&items),
        // Node tables were answered above, from the server's summary.
        KindClass::Node | KindClass::Other => objects_table(&items),
    };
    emit(&text)
}

/// Nodes as the server summarized them: requested/allocatable CPU, memory
/// and pods, status, taints, zone.
pub fn usage_table(nodes: &[crate::pb::NodeUsage]) -> String {
    let mut t = Table::new(["NAME", "STATUS", "CPU", "MEMORY", "PODS", "TAINTS", "ZONE"]);
    for n in nodes {
        let mut status = match n.ready.as_str() {
            "True" => "Ready",
            "False" => "NotReady",
            _ => "Unknown",
        }
        .to_string();
        if n.unschedulable {
            status.push_str(",SchedulingDisabled");
        }
        t.row([
            n.node.clone(),
            status,
            format!(
                "{}/{} ({})",
                format_cpu(n.cpu_requested_milli),
                format_cpu(n.cpu_allocatable_milli),
                percent(n.cpu_requested_milli, n.cpu_allocatable_milli)
            ),
            format!(
                "{}/{} ({})",
                format_bytes(n.memory_requested_bytes),
                format_bytes(n.memory_allocatable_bytes),
                percent(n.memory_requested_bytes, n.memory_allocatable_bytes)
            ),
            format!("{}/{}", n.pods, n.pods_allocatable),
            if n.taints.is_empty() {
                "<none>".into()
            } else {
                n.taints.join(",")
            },
            or_none(&n.zone),
        ]);
    }
    t.render()
}

fn pod_status(p: &Value) -> String {
    let phase = str_at(p, &["status", "phase"]);
    if !str_at(p, &["spec", "nodeName"]).is_empty() {
        return match phase {
            "Succeeded" | "Failed" => phase.to_string(),
            _ => "Scheduled".into(),
        };
    }
    p["status"]["conditions"]
        .as_array()
        .and_then(|c| {
            c.iter()
                .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
        })
        .map(|c| str_at(c, &["reason"]))
        .filter(|r| !r.is_empty())
        .unwrap_or("Pending")
        .to_string()
}

/// Pods with their node, scheduling status and priority.
pub fn pods_table(pods: &[Value]) -> String {
    let mut t = Table::new(["NAMESPACE", "NAME", "NODE", "STATUS", "PRIORITY"]).right(4);
    for p in pods {
        t.row([
            str_at(p, &["metadata", "namespace"]).to_string(),
            str_at(p, &["metadata", "name"]).to_string(),
            or_none(str_at(p, &["spec", "nodeName"])),
            pod_status(p),
            p["spec"]["priority"].as_i64().unwrap_or(0).to_string(),
        ]);
    }
    t.render()
}

/// Any other kind: namespace (if namespaced) and name.
pub fn objects_table(items: &[Value]) -> String {
    let namespaced = items
        .iter()
        .any(|o| !str_at(o, &["metadata", "namespace"]).is_empty());
    let mut t = if namespaced {
        Table::new(["NAMESPACE", "NAME"])
    } else {
        Table::new(["NAME"])
    };
    for o in items {
        let name = str_at(o, &["metadata", "name"]).to_string();
        if namespaced {
            t.row([str_at(o, &["metadata", "namespace"]).to_string(), name]);
        } else {
            t.row([name]);
        }
    }
    t.render()
}

/// ResourceClaims as kubectl lists them (STATE: pending, allocated,
/// reserved, deleted), with where their devices are.
pub fn claims_table(items: &[Value]) -> String {
    let mut t = Table::new(["NAMESPACE", "NAME", "STATE", "NODE", "DEVICES"]);
    for c in items {
        let status = &c["status"];
        let mut state = Vec::new();
        if status["allocation"].is_object() {
            state.push("allocated");
        }
        if status["reservedFor"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            state.push("reserved");
        }
        if !str_at(c, &["metadata", "deletionTimestamp"]).is_empty() {
            state.push("deleted");
        }
        if state.is_empty() {
            state.push("pending");
        }
        let node = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
            ["values"][0]
            .as_str()
            .unwrap_or("");
        let devices: Vec<String> = status["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{}/{}", str_at(r, &["pool"]), str_at(r, &["device"])))
            .collect();
        t.row([
            str_at(c, &["metadata", "namespace"]).to_string(),
            str_at(c, &["metadata", "name"]).to_string(),
            state.join(","),
            or_none(node),
            or_none(&devices.join(",")),
        ]);
    }
    t.render()
}

/// ResourceSlices: whose devices, in which pool, how many.
pub fn slices_table(items: &[Value]) -> String {
    let mut t = Table::new(["NAME", "NODE", "DRIVER", "POOL", "DEVICES"]).right(4);
    for s in items {
        let spec = &s["spec"];
        let node = if spec["allNodes"] == true {
            "<all>".to_string()
        } else {
            or_none(str_at(spec, &["nodeName"]))
        };
        t.row([
            str_at(s, &["metadata", "name"]).to_string(),
            node,
            str_at(spec, &["driver"]).to_string(),
            str_at(spec, &["pool", "name"]).to_string(),
            spec["devices"].as_array().map_or(0, Vec::len).to_string(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_classify_like_kubectl() {
        for k in ["no", "node", "Nodes"] {
            assert_eq!(classify(k), KindClass::Node);
        }
        for k in ["po", "pod", "PODS"] {
            assert_eq!(classify(k), KindClass::Pod);
        }
        assert_eq!(classify("pvc"), KindClass::Other);
        assert_eq!(classify("ResourceClaims"), KindClass::ResourceClaim);
        assert_eq!(classify("resourceslice"), KindClass::ResourceSlice);
    }

    #[test]
    fn claims_and_slices_show_state_and_devices() {
        let claims = [
            json!({"metadata": {"namespace": "ml", "name": "a"}, "status": {}}),
            json!({"metadata": {"namespace": "ml", "name": "b"}, "status": {
                "allocation": {"devices": {"results": [
                    {"request": "r", "driver": "d", "pool": "n1", "device": "gpu-0"},
                    {"request": "r", "driver": "d", "pool": "n1", "device": "gpu-1"}]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}),
        ];
        let text = claims_table(&claims);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], ["NAMESPACE", "NAME", "STATE", "NODE", "DEVICES"]);
        assert_eq!(lines[1], ["ml", "a", "pending", "<none>", "<none>"]);
        assert_eq!(
            lines[2],
            ["ml", "b", "allocated,reserved", "n1", "n1/gpu-0,n1/gpu-1"]
        );
        let slices = [json!({"metadata": {"name": "s"}, "spec": {"nodeName": "n1",
            "driver": "d", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}})];
        let text = slices_table(&slices);
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row, ["s", "n1", "d", "n1", "2"]);
    }

    #[test]
    fn nodes_show_the_servers_summary() {
        let nodes = [
            crate::pb::NodeUsage {
                node: "a".into(),
                ready: "True".into(),
                unschedulable: true,
                taints: vec!["gpu=true:NoSchedule".into(), "x:NoExecute".into()],
                zone: "z1".into(),
                cpu_requested_milli: 1500,
                cpu_allocatable_milli: 4000,
                memory_requested_bytes: 2 << 30,
                memory_allocatable_bytes: 16 << 30,
                pods: 2,
                pods_allocatable: 110,
            },
            crate::pb::NodeUsage {
                node: "b".into(),
                ready: "Unknown".into(),
                cpu_allocatable_milli: 2000,
                memory_allocatable_bytes: 4 << 30,
                pods_allocatable: 10,
                ..Default::default()
            },
        ];
        let text = usage_table(&nodes);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["NAME", "STATUS", "CPU", "MEMORY", "PODS", "TAINTS", "ZONE"]
        );
        let cells = |l: &str| {
            l.split("   ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cells(lines[1]),
            [
                "a",
                "Ready,SchedulingDisabled",
                "1.5/4 (37%)",
                "2Gi/16Gi (12%)",
                "2/110",
                "gpu=true:NoSchedule,x:NoExecute",
                "z1"
            ]
        );
        assert_eq!(
            cells(lines[2]),
            [
                "b",
                "Unknown",
                "0/2 (0%)",
                "0/4Gi (0%)",
                "0/10",
                "<none>",
                "<none>"
            ]
        );
    }

    #[test]
    fn pods_show_node_or_why_not() {
        let pods = [
            json!({"metadata": {"namespace": "d", "name": "on"}, "spec": {"nodeName": "n1", "priority": 100}}),
            json!({"metadata": {"namespace": "d", "name": "off"}, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
            json!({"metadata": {"namespace": "d", "name": "new"}}),
        ];
        assert_eq!(
            pods_table(&pods),
            "NAMESPACE   NAME   NODE     STATUS          PRIORITY\n\
             d           on     n1       Scheduled            100\n\
             d           off    <none>   Unschedulable          0\n\
             d           new    <none>   Pending                0\n"
        );
    }
}
