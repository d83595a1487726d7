//! `berthctl simulate`: where a batch of pods would go, and what it would
//! do to the nodes that take them.

use crate::answer::describe;
use crate::pb::{SimulateResponse, SimulatedOutcome};
use crate::{Client, ClientError, Conclusion};
use anyhow::{Result, bail};

use crate::cli::files::{Doc, Source, locate_field};
use crate::cli::output::{Output, emit, emit_proto};
use crate::cli::quantity::{format_bytes, format_cpu, percent};
use crate::cli::table::Table;
use crate::cli::{Rpc, RpcError};

/// `berthctl simulate -f FILE...`; the exit code the answer asks for
/// ([`Conclusion::exit_code`]: non-zero when it is incomplete).
pub async fn run(
    client: &mut Client,
    format: Output,
    inputs: &[(Source, Vec<Doc>)],
    replicas: u32,
    profile: &str,
) -> Result<u8> {
    let objects: Vec<serde_json::Value> = inputs
        .iter()
        .flat_map(|(_, docs)| docs.iter().map(|d| d.value.clone()))
        .collect();
    if objects.is_empty() {
        let names: Vec<&str> = inputs.iter().map(|(s, _)| s.name.as_str()).collect();
        bail!("{}: no objects to simulate", names.join(", "));
    }
    let names: Vec<&str> = inputs.iter().map(|(s, _)| s.name.as_str()).collect();
    let resp = match client.simulate(&objects, replicas, profile).await {
        Ok(r) => r,
        Err(ClientError::Status(s)) => {
            let docs: Vec<&Doc> = inputs.iter().flat_map(|(_, d)| d).collect();
            return Err(RpcError {
                code: s.code(),
                message: locate_field(s.message(), "pods", &docs),
            }
            .into());
        }
        Err(e) => return Err(e).rpc(),
    };
    if format != Output::Table {
        emit_proto(format, &resp)?;
    } else {
        emit(&render(&resp))?;
    }
    let conclusion = Conclusion::of_simulation(&resp);
    if let Some(w) = conclusion.warning() {
        eprintln!("warning: {}: {w}", names.join(", "));
    }
    Ok(conclusion.exit_code())
}

/// Placements, the summary line, then the nodes that took pods.
pub fn render(resp: &SimulateResponse) -> String {
    let mut pods = Table::new(["NAMESPACE", "NAME", "NODE", "REASON"]);
    for p in &resp.pods {
        let node = if !p.node.is_empty() {
            p.node.clone()
        } else if p.outcome() == SimulatedOutcome::Unknown {
            "<unknown>".to_string()
        } else {
            "<none>".to_string()
        };
        pods.row([p.namespace.clone(), p.name.clone(), node, p.reason.clone()]);
    }
    let mut out = pods.render();
    if resp.unknown > 0 {
        out.push_str(&format!(
            "\n{} scheduled, {} unschedulable, {} unknown\n",
            resp.scheduled, resp.unschedulable, resp.unknown
        ));
    } else {
        out.push_str(&format!(
            "\n{} scheduled, {} unschedulable\n",
            resp.scheduled, resp.unschedulable
        ));
    }
    if !resp.incomplete.is_empty() {
        out.push_str("INCOMPLETE: some placements could not be judged:\n");
        for n in &resp.incomplete {
            out.push_str(&format!("  {}\n", describe(n)));
        }
    }
    if !resp.skipped.is_empty() {
        out.push_str("Skipped (ignorable, as the scheduler skips them):\n");
        for n in &resp.skipped {
            out.push_str(&format!("  {}\n", describe(n)));
        }
    }
    if !resp.pod_groups.is_empty() {
        let mut groups =
            Table::new(["NAMESPACE", "PODGROUP", "FITS", "PLACED", "MESSAGE"]).right(3);
        for g in &resp.pod_groups {
            groups.row([
                g.namespace.clone(),
                g.name.clone(),
                if g.fits { "yes" } else { "no" }.to_string(),
                g.placed.to_string(),
                g.message.clone(),
            ]);
        }
        out.push('\n');
        out.push_str(&groups.render());
    }
    let mut nodes = Table::new(["NODE", "PLACED", "CPU", "MEMORY", "PODS"]).right(1);
    for n in resp.nodes.iter().filter(|n| n.placed > 0) {
        nodes.row([
            n.node.clone(),
            n.placed.to_string(),
            format!(
                "{} ({}/{})",
                percent(n.cpu_requested_milli, n.cpu_allocatable_milli),
                format_cpu(n.cpu_requested_milli),
                format_cpu(n.cpu_allocatable_milli)
            ),
            format!(
                "{} ({}/{})",
                percent(n.memory_requested_bytes, n.memory_allocatable_bytes),
                format_bytes(n.memory_requested_bytes),
                format_bytes(n.memory_allocatable_bytes)
            ),
            format!("{}/{}", n.pods, n.pods_allocatable),
        ]);
    }
    if !nodes.is_empty() {
        out.push_str("\nAfter the simulation:\n");
        out.push_str(&nodes.render());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{NodeUtilization, SimulatedPod};

    #[test]
    fn placements_summary_and_touched_nodes() {
        let pod = |name: &str, node: &str, reason: &str| SimulatedPod {
            namespace: "default".into(),
            name: name.into(),
            node: node.into(),
            reason: reason.into(),
            pod_group: String::new(),
            outcome: if node.is_empty() {
                SimulatedOutcome::Unschedulable
            } else {
                SimulatedOutcome::Placed
            } as i32,
        };
        let node = |name: &str, placed: u32, cpu: i64| NodeUtilization {
            node: name.into(),
            cpu_requested_milli: cpu,
            cpu_allocatable_milli: 4000,
            memory_requested_bytes: 1 << 30,
            memory_allocatable_bytes: 4 << 30,
            pods: 3,
            pods_allocatable: 110,
            placed,
        };
        let resp = SimulateResponse {
            pods: vec![
                pod("web-0", "n1", ""),
                pod("web-1", "", "0/2 nodes are available: 2 Insufficient cpu."),
            ],
            scheduled: 1,
            unschedulable: 1,
            nodes: vec![node("n1", 1, 3000), node("n2", 0, 0)],
            ..Default::default()
        };
        assert_eq!(
            render(&resp),
            "\
NAMESPACE   NAME    NODE     REASON
default     web-0   n1
default     web-1   <none>   0/2 nodes are available: 2 Insufficient cpu.

1 scheduled, 1 unschedulable

After the simulation:
NODE   PLACED   CPU         MEMORY          PODS
n1          1   75% (3/4)   25% (1Gi/4Gi)   3/110
"
        );
    }

    #[test]
    fn unknown_placements_and_what_could_not_run() {
        let resp = SimulateResponse {
            pods: vec![SimulatedPod {
                namespace: "default".into(),
                name: "web-0".into(),
                reason: "extender \"quota\" failed at Filter: not connected".into(),
                outcome: SimulatedOutcome::Unknown as i32,
                ..Default::default()
            }],
            unknown: 1,
            incomplete: vec![crate::pb::PluginNote {
                plugin: "quota".into(),
                point: "Filter".into(),
                reason: "not connected".into(),
                pods: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            render(&resp),
            "\
NAMESPACE   NAME    NODE        REASON
default     web-0   <unknown>   extender \"quota\" failed at Filter: not connected

0 scheduled, 0 unschedulable, 1 unknown
INCOMPLETE: some placements could not be judged:
  quota at Filter: not connected (1 pod)
"
        );
    }
}
