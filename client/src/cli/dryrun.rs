//! `berthctl dry-run`: where a pod would go and why, as a node × plugin
//! matrix.

use crate::answer::describe;
use crate::pb::{DryRunResponse, NodeResult, NodeVerdict, PluginResult};
use crate::{Client, ClientError, Conclusion, pb};
use anyhow::{Result, bail};

use crate::cli::files::{Doc, Source, locate_field};
use crate::cli::output::{Output, emit, emit_proto};
use crate::cli::table::Table;
use crate::cli::{Rpc, RpcError};

/// `berthctl dry-run -f POD_FILE`; the exit code the answer asks for
/// ([`Conclusion::exit_code`]: non-zero when it is incomplete).
pub async fn run(
    client: &mut Client,
    format: Output,
    src: &Source,
    docs: &[Doc],
    all_nodes: bool,
    profile: &str,
) -> Result<u8> {
    let is_group = |d: &&Doc| d.value["kind"].as_str() == Some("PodGroup");
    if let Some(group) = docs.iter().find(is_group) {
        // A PodGroup and its pods: the gang is dry-run as a whole.
        if docs.iter().filter(is_group).count() > 1 {
            bail!(
                "{}: expected one PodGroup and its pods, found several PodGroups",
                src.name
            );
        }
        let pods: Vec<serde_json::Value> = docs
            .iter()
            .filter(|d| !is_group(d))
            .map(|d| d.value.clone())
            .collect();
        let resp = client
            .dry_run_group(&group.value, &pods, profile)
            .await
            .rpc()?;
        if format != Output::Table {
            return emit_proto(format, &resp).map(|()| 0);
        }
        return emit(&render(&resp, "")).map(|()| 0);
    }
    let [doc] = docs else {
        bail!(
            "{}: expected exactly one pod (or a PodGroup and its pods), found {} objects",
            src.name,
            docs.len()
        );
    };
    let resp = match client.dry_run(&doc.value, profile, all_nodes).await {
        Ok(r) => r,
        Err(ClientError::Status(s)) => {
            return Err(RpcError {
                code: s.code(),
                message: locate_field(s.message(), "pod", &[doc]),
            }
            .into());
        }
        Err(e) => return Err(e).rpc(),
    };
    if format != Output::Table {
        emit_proto(format, &resp)?;
    } else {
        let ns = Some(doc.namespace()).filter(|n| !n.is_empty());
        let pod = format!(
            "{}/{}",
            ns.unwrap_or("default"),
            doc.value["metadata"]["name"].as_str().unwrap_or("")
        );
        emit(&render(&resp, &pod))?;
    }
    let conclusion = Conclusion::of_dry_run(&resp);
    if let Some(w) = conclusion.warning() {
        eprintln!("warning: {}: {w}", src.name);
    }
    Ok(conclusion.exit_code())
}

/// Short column names for plugins: their capitals (NodeResourcesFit ->
/// NRF; the legend under the table spells them out), or, for a name
/// without two capitals (an extender's, such as `label-tier`), the whole
/// name; made unique with a digit.
pub fn abbreviate(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let caps: String = n.chars().filter(char::is_ascii_uppercase).collect();
        let base = if caps.len() >= 2 { caps } else { n.clone() };
        let mut a = base.clone();
        let mut i = 2;
        while out.contains(&a) {
            a = format!("{base}{i}");
            i += 1;
        }
        out.push(a);
    }
    out
}

fn verdict(n: &NodeResult) -> NodeVerdict {
    NodeVerdict::try_from(n.verdict).unwrap_or(NodeVerdict::Unspecified)
}

/// What the Filter plugins made of a node: "ok", "not evaluated", or each
/// rejecting plugin with its reasons.
pub fn filter_cell(n: &NodeResult) -> String {
    match verdict(n) {
        NodeVerdict::Feasible => "ok".into(),
        NodeVerdict::NotEvaluated => "not evaluated".into(),
        NodeVerdict::Unknown => format!("unknown: {}", n.reason),
        v => {
            let failures: Vec<String> = n
                .filters
                .iter()
                .filter(|f| {
                    !matches!(
                        f.code.as_str(),
                        "Success" | "Skip" | "NotEvaluated" | "Ignored"
                    )
                })
                .map(|f| {
                    if f.reasons.is_empty() {
                        format!("{}: {}", f.plugin, f.code)
                    } else {
                        format!("{}: {}", f.plugin, f.reasons.join(", "))
                    }
                })
                .collect();
            let text = if failures.is_empty() {
                "rejected".to_string()
            } else {
                failures.join("; ")
            };
            if v == NodeVerdict::Error {
                format!("error: {text}")
            } else {
                text
            }
        }
    }
}

/// Feasible nodes by total score (the selected one first among equals),
/// then those that could not be judged, rejected ones, then those not
/// evaluated; by name within each.
pub fn sorted(nodes: &[NodeResult]) -> Vec<&NodeResult> {
    let mut v: Vec<&NodeResult> = nodes.iter().collect();
    v.sort_by_key(|n| {
        let rank = match verdict(n) {
            NodeVerdict::Feasible => (0, -n.total_score, !n.selected),
            NodeVerdict::Unknown => (1, 0, true),
            NodeVerdict::NotEvaluated => (3, 0, true),
            _ => (2, 0, true),
        };
        (rank, n.node.as_str())
    });
    v
}

/// Plugin-level results worth showing: failures, restrictions to a node set;
/// skips on one line.
pub fn plugin_lines(title: &str, results: &[PluginResult]) -> String {
    let mut lines = Vec::new();
    let mut skipped = Vec::new();
    for r in results {
        match r.code.as_str() {
            "Skip" => skipped.push(r.plugin.as_str()),
            "Success" if r.node_names.is_empty() => {}
            "Success" => {
                let shown: Vec<&str> = r.node_names.iter().take(5).map(String::as_str).collect();
                let more = if r.node_names.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                };
                lines.push(format!(
                    "  {}: restricted to {} node{} ({}{more})",
                    r.plugin,
                    r.node_names.len(),
                    if r.node_names.len() == 1 { "" } else { "s" },
                    shown.join(", ")
                ));
            }
            code => {
                let reasons = if r.reasons.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.reasons.join(", "))
                };
                lines.push(format!("  {}: {code}{reasons}", r.plugin));
            }
        }
    }
    if !skipped.is_empty() {
        lines.push(format!("  skipped: {}", skipped.join(", ")));
    }
    if lines.is_empty() {
        return String::new();
    }
    format!("{title}:\n{}\n", lines.join("\n"))
}

/// What preemption would do, as one line: the node the pod would be
/// nominated to and the pods evicted, or why it cannot help.
pub fn preemption(p: &pb::Preemption) -> String {
    if p.nominated_node.is_empty() {
        return format!("Preemption would not help: {}\n", p.message);
    }
    let mut s = format!(
        "Preemption: the pod would be nominated to {}, evicting {} pod{}:\n",
        p.nominated_node,
        p.victims.len(),
        if p.victims.len() == 1 { "" } else { "s" }
    );
    for v in &p.victims {
        s.push_str(&format!(
            "  {}/{} (priority {})\n",
            v.namespace, v.name, v.priority
        ));
    }
    s
}

/// What rejected nodes cannot give the pod, node by node, and the devices
/// its claims would get on the selected node.
pub fn claim_lines(resp: &DryRunResponse) -> String {
    let mut out = String::new();
    let rejected: Vec<&NodeResult> = resp
        .nodes
        .iter()
        .filter(|n| !n.unsatisfied.is_empty())
        .collect();
    if !rejected.is_empty() {
        out.push_str("\nWhy nodes cannot give the pod what it asks for:\n");
        // Nodes with the same reasons share one entry.
        let mut groups: Vec<(Vec<String>, Vec<&str>)> = Vec::new();
        for n in rejected {
            let lines: Vec<String> = n
                .unsatisfied
                .iter()
                .map(|u| {
                    let subject = match (u.claim.is_empty(), u.request.is_empty()) {
                        (true, _) => String::new(),
                        (false, true) => format!("claim {}: ", u.claim),
                        (false, false) => format!("claim {}, request {}: ", u.claim, u.request),
                    };
                    format!("{}: {subject}{}", u.plugin, u.reason)
                })
                .collect();
            match groups.iter_mut().find(|(l, _)| *l == lines) {
                Some((_, nodes)) => nodes.push(&n.node),
                None => groups.push((lines, vec![&n.node])),
            }
        }
        for (lines, mut nodes) in groups {
            nodes.sort();
            let shown = nodes.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            let more = match nodes.len() {
                0..=3 => String::new(),
                n => format!(" and {} more", n - 3),
            };
            out.push_str(&format!("  {shown}{more}:\n"));
            for l in lines {
                out.push_str(&format!("    {l}\n"));
            }
        }
    }
    if let Some(n) = resp
        .nodes
        .iter()
        .find(|n| n.selected && !n.devices.is_empty())
    {
        out.push_str(&format!(
            "\nDevices the pod's claims would get on {}:\n",
            n.node
        ));
        for d in &n.devices {
            out.push_str(&format!(
                "  claim {}, request {}: {}/{}/{}\n",
                d.claim, d.request, d.driver, d.pool, d.device
            ));
        }
    }
    out
}

/// The human explanation of a PodGroup's dry run: the verdict, each pod's
/// node or message, and per node why the pods that fit nowhere did not.
pub fn render_group(profile: &str, g: &pb::PodGroupDryRun) -> String {
    let placed = g.pods.iter().filter(|p| !p.node.is_empty()).count();
    let mut out = if let Some(pre) = &g.pre_enqueue {
        format!(
            "PodGroup {}/{}, profile {profile}: waits ({}): {}",
            g.namespace,
            g.name,
            pre.plugin,
            pre.reasons.join(", ")
        )
    } else if g.fits {
        format!(
            "PodGroup {}/{}, profile {profile}: fits, {placed} of {} pods placed",
            g.namespace,
            g.name,
            g.pods.len()
        )
    } else {
        format!(
            "PodGroup {}/{}, profile {profile}: does not fit ({}): {}",
            g.namespace, g.name, g.code, g.message
        )
    };
    if g.scheduled_pods > 0 {
        out.push_str(&format!(" ({} already scheduled)", g.scheduled_pods));
    }
    out.push('\n');
    let mut t = Table::new(["NAMESPACE", "NAME", "NODE", "MESSAGE"]);
    for p in &g.pods {
        let node = if p.node.is_empty() {
            "<none>".to_string()
        } else {
            p.node.clone()
        };
        t.row([p.namespace.clone(), p.name.clone(), node, p.message.clone()]);
    }
    out.push_str(&t.render());
    for p in g.pods.iter().filter(|p| !p.rejections.is_empty()) {
        out.push_str(&format!("\nPod {}/{} fits no node:\n", p.namespace, p.name));
        let mut t = Table::new(["NODE", "PLUGIN", "CODE", "REASONS"]);
        for r in &p.rejections {
            t.row([
                r.node.clone(),
                r.plugin.clone(),
                r.code.clone(),
                r.reasons.join(", "),
            ]);
        }
        out.push_str(&t.render());
    }
    if let Some(pre) = &g.preemption {
        out.push_str(&format!("\nPreemption: {}\n", pre.message));
        if !pre.victims.is_empty() {
            let names: Vec<String> = pre
                .victims
                .iter()
                .map(|v| format!("{}/{}", v.namespace, v.name))
                .collect();
            out.push_str(&format!("  victims: {}\n", names.join(", ")));
        }
    }
    out
}

/// What the answer lacks and which ignorable extenders it went without.
pub fn notes(resp: &DryRunResponse) -> String {
    let mut out = String::new();
    if !resp.incomplete.is_empty() {
        out.push_str("INCOMPLETE: some nodes could not be judged; do not conclude the pod fits or does not:\n");
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
    out
}

/// The human explanation of a dry run of `pod` (namespace/name).
pub fn render(resp: &DryRunResponse, pod: &str) -> String {
    if let Some(g) = &resp.pod_group {
        return render_group(&resp.profile, g);
    }
    let mut out = format!("Pod {pod}, profile {}: {}\n", resp.profile, resp.message);
    out.push_str(&format!(
        "{} node{}, {} evaluated, {} feasible.\n",
        resp.nodes.len(),
        if resp.nodes.len() == 1 { "" } else { "s" },
        resp.evaluated_nodes,
        resp.feasible_nodes
    ));
    out.push_str(&notes(resp));
    out.push_str(&plugin_lines("PreFilter", &resp.pre_filter));
    out.push_str(&plugin_lines("PreScore", &resp.pre_score));

    let mut plugins: Vec<String> = Vec::new();
    for n in &resp.nodes {
        for s in &n.scores {
            if !plugins.contains(&s.plugin) {
                plugins.push(s.plugin.clone());
            }
        }
    }
    let short = abbreviate(&plugins);
    let headers = ["".to_string(), "NODE".to_string()]
        .into_iter()
        .chain(short.iter().cloned())
        .chain(["TOTAL".to_string(), "FILTER".to_string()]);
    let mut t = Table::new(headers);
    for i in 0..=plugins.len() {
        t = t.right(2 + i);
    }
    for n in sorted(&resp.nodes) {
        let feasible = verdict(n) == NodeVerdict::Feasible;
        let marker = if n.selected {
            "*"
        } else if n.top_score {
            "+"
        } else {
            ""
        };
        let scores = plugins.iter().map(|p| {
            n.scores
                .iter()
                .find(|s| &s.plugin == p)
                .map(|s| s.weighted.to_string())
                .unwrap_or_default()
        });
        let total = if feasible {
            n.total_score.to_string()
        } else {
            "-".into()
        };
        t.row(
            [marker.to_string(), n.node.clone()]
                .into_iter()
                .chain(scores)
                .chain([total, filter_cell(n)]),
        );
    }
    if !t.is_empty() {
        out.push('\n');
        out.push_str(&t.render());
        out.push('\n');
        let mut marks = Vec::new();
        if resp.nodes.iter().any(|n| n.selected) {
            marks.push("* selected");
        }
        if resp.nodes.iter().any(|n| n.top_score && !n.selected) {
            marks.push("+ tied for the top score");
        }
        let mut legend = marks.join(", ");
        if !plugins.is_empty() {
            if !legend.is_empty() {
                legend.push('\n');
            }
            legend.push_str("Scores are normalized × weight: ");
            let pairs: Vec<String> = short
                .iter()
                .zip(&plugins)
                .map(|(s, p)| format!("{s}={p}"))
                .collect();
            legend.push_str(&pairs.join(" "));
        }
        if !legend.is_empty() {
            out.push_str(&legend);
            out.push('\n');
        }
    }
    out.push_str(&claim_lines(resp));
    if resp.selected_node.is_empty()
        && let Some(p) = &resp.preemption
    {
        out.push('\n');
        out.push_str(&preemption(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{FilterResult, ScoreResult};

    fn filter(plugin: &str, code: &str, reasons: &[&str]) -> FilterResult {
        FilterResult {
            plugin: plugin.into(),
            code: code.into(),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn score(plugin: &str, normalized: i64, weight: i64) -> ScoreResult {
        ScoreResult {
            plugin: plugin.into(),
            raw: normalized,
            normalized,
            weight,
            weighted: normalized * weight,
        }
    }

    fn node(name: &str, verdict: NodeVerdict, scores: Vec<ScoreResult>) -> NodeResult {
        NodeResult {
            node: name.into(),
            verdict: verdict as i32,
            total_score: scores.iter().map(|s| s.weighted).sum(),
            scores,
            ..Default::default()
        }
    }

    fn response() -> DryRunResponse {
        let mut a = node(
            "a",
            NodeVerdict::Feasible,
            vec![
                score("NodeResourcesFit", 40, 1),
                score("TaintToleration", 100, 3),
            ],
        );
        a.filters = vec![filter("NodeResourcesFit", "Success", &[])];
        let mut b = node(
            "b",
            NodeVerdict::Feasible,
            vec![
                score("NodeResourcesFit", 90, 1),
                score("TaintToleration", 100, 3),
            ],
        );
        b.selected = true;
        b.top_score = true;
        let mut c = node("c", NodeVerdict::Unschedulable, vec![]);
        c.filters = vec![
            filter("NodeUnschedulable", "Success", &[]),
            filter("NodeResourcesFit", "Unschedulable", &["Insufficient cpu"]),
            filter("TaintToleration", "NotEvaluated", &[]),
        ];
        let d = node("d", NodeVerdict::NotEvaluated, vec![]);
        let mut e = node("e", NodeVerdict::Unresolvable, vec![]);
        e.filters = vec![filter(
            "TaintToleration",
            "UnschedulableAndUnresolvable",
            &["node(s) had untolerated taint {gpu: true}"],
        )];
        DryRunResponse {
            selected_node: "b".into(),
            profile: "default-scheduler".into(),
            message: "would be assigned default/web to b".into(),
            pre_filter: vec![
                PluginResult {
                    plugin: "NodeAffinity".into(),
                    code: "Success".into(),
                    node_names: vec!["a".into(), "b".into(), "c".into()],
                    ..Default::default()
                },
                PluginResult {
                    plugin: "VolumeBinding".into(),
                    code: "Skip".into(),
                    ..Default::default()
                },
                PluginResult {
                    plugin: "NodeResourcesFit".into(),
                    code: "Success".into(),
                    ..Default::default()
                },
            ],
            nodes: vec![c, a, d, b, e],
            evaluated_nodes: 4,
            feasible_nodes: 2,
            ..Default::default()
        }
    }

    #[test]
    fn the_matrix_ranks_nodes_and_marks_the_selected_one() {
        let text = render(&response(), "default/web");
        let want = "\
Pod default/web, profile default-scheduler: would be assigned default/web to b
5 nodes, 4 evaluated, 2 feasible.
PreFilter:
  NodeAffinity: restricted to 3 nodes (a, b, c)
  skipped: VolumeBinding

    NODE   NRF    TT   TOTAL   FILTER
*   b       90   300     390   ok
    a       40   300     340   ok
    c                      -   NodeResourcesFit: Insufficient cpu
    e                      -   TaintToleration: node(s) had untolerated taint {gpu: true}
    d                      -   not evaluated

* selected
Scores are normalized × weight: NRF=NodeResourcesFit TT=TaintToleration
";
        assert_eq!(text, want, "\n{text}");
    }

    #[test]
    fn no_fit_shows_preemption() {
        let mut r = response();
        r.selected_node.clear();
        r.nodes
            .retain(|n| n.verdict != NodeVerdict::Feasible as i32);
        r.preemption = Some(pb::Preemption {
            nominated_node: "c".into(),
            victims: vec![pb::PodReference {
                namespace: "default".into(),
                name: "low".into(),
                uid: "u".into(),
                priority: -5,
            }],
            message: String::new(),
        });
        let text = render(&r, "default/web");
        assert!(
            text.ends_with(
                "\nPreemption: the pod would be nominated to c, evicting 1 pod:\n  default/low (priority -5)\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("TOTAL   FILTER\n*"),
            "nothing selected:\n{text}"
        );
        r.preemption = Some(pb::Preemption {
            message:
                "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                    .into(),
            ..Default::default()
        });
        assert!(render(&r, "default/web").ends_with(
            "\nPreemption would not help: preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.\n"
        ));
    }

    #[test]
    fn claims_explained_per_node_and_devices_listed() {
        let mut r = response();
        let mut gpu = node("gpu-b", NodeVerdict::Unresolvable, vec![]);
        gpu.unsatisfied = vec![
            pb::Unsatisfied {
                plugin: "DynamicResources".into(),
                claim: "ml/x".into(),
                request: "gpu".into(),
                reason: "needs 2 device(s); 1 in the node's resource pools".into(),
            },
            pb::Unsatisfied {
                plugin: "DynamicResources".into(),
                reason: "resource pool d/p is invalid: duplicate device".into(),
                ..Default::default()
            },
        ];
        let mut gpu_c = gpu.clone();
        gpu_c.node = "gpu-c".into();
        r.nodes.push(gpu_c);
        r.nodes.push(gpu);
        let selected = r.nodes.iter_mut().find(|n| n.selected).unwrap();
        selected.devices = vec![pb::AllocatedDevice {
            claim: "ml/x".into(),
            request: "gpu".into(),
            driver: "gpu.example.com".into(),
            pool: "a".into(),
            device: "gpu-0".into(),
        }];
        let name = selected.node.clone();
        let text = render(&r, "ml/p");
        assert!(
            text.contains(&format!(
                "\nWhy nodes cannot give the pod what it asks for:\n  gpu-b, gpu-c:\n    \
                 DynamicResources: claim ml/x, request gpu: needs 2 device(s); 1 in the node's resource pools\n    \
                 DynamicResources: resource pool d/p is invalid: duplicate device\n\n\
                 Devices the pod's claims would get on {name}:\n  claim ml/x, request gpu: gpu.example.com/a/gpu-0\n"
            )),
            "{text}"
        );
    }

    #[test]
    fn abbreviations_are_unique() {
        let names = [
            "NodeResourcesFit",
            "NodeAffinity",
            "NetworkAware",
            "spread",
            "NodeResourcesBalancedAllocation",
        ]
        .map(String::from);
        assert_eq!(abbreviate(&names), ["NRF", "NA", "NA2", "spread", "NRBA"]);
        // An extender's name is shown whole, not cut to "labe".
        let names = ["TaintToleration", "label-tier"].map(String::from);
        assert_eq!(abbreviate(&names), ["TT", "label-tier"]);
    }

    #[test]
    fn filter_cells() {
        let mut n = node("x", NodeVerdict::Unschedulable, vec![]);
        n.filters = vec![
            filter("A", "Unschedulable", &["r1", "r2"]),
            filter("B", "Skip", &[]),
            filter("C", "Unschedulable", &[]),
        ];
        assert_eq!(filter_cell(&n), "A: r1, r2; C: Unschedulable");
        n.verdict = NodeVerdict::Error as i32;
        n.filters = vec![filter("A", "Error", &["boom"])];
        assert_eq!(filter_cell(&n), "error: A: boom");
    }

    #[test]
    fn unknown_nodes_and_skipped_extenders_are_said_so() {
        let mut r = response();
        r.selected_node.clear();
        r.message = "extender \"quota\" failed at Filter: not connected".into();
        for n in &mut r.nodes {
            if n.verdict == NodeVerdict::Feasible as i32 {
                n.verdict = NodeVerdict::Unknown as i32;
                n.reason = r.message.clone();
                n.scores.clear();
                n.selected = false;
                n.top_score = false;
            }
        }
        r.feasible_nodes = 0;
        r.completeness = pb::Completeness::Incomplete as i32;
        r.incomplete = vec![pb::PluginNote {
            plugin: "quota".into(),
            point: "Filter".into(),
            reason: r.message.clone(),
            nodes: 2,
            pods: 0,
        }];
        r.skipped = vec![pb::PluginNote {
            plugin: "tier".into(),
            point: "Score".into(),
            reason: "timed out after 1s".into(),
            ..Default::default()
        }];
        let text = render(&r, "default/web");
        let want = "\
Pod default/web, profile default-scheduler: extender \"quota\" failed at Filter: not connected
5 nodes, 4 evaluated, 0 feasible.
INCOMPLETE: some nodes could not be judged; do not conclude the pod fits or does not:
  quota at Filter: extender \"quota\" failed at Filter: not connected (2 nodes)
Skipped (ignorable, as the scheduler skips them):
  tier at Score: timed out after 1s
PreFilter:
  NodeAffinity: restricted to 3 nodes (a, b, c)
  skipped: VolumeBinding

   NODE   TOTAL   FILTER
   a          -   unknown: extender \"quota\" failed at Filter: not connected
   b          -   unknown: extender \"quota\" failed at Filter: not connected
   c          -   NodeResourcesFit: Insufficient cpu
   e          -   TaintToleration: node(s) had untolerated taint {gpu: true}
   d          -   not evaluated

";
        assert_eq!(text, want, "\n{text}");
    }
}
