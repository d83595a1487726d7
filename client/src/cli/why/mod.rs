//! `why POD`: what berth's scheduler says about one pod now. The pod comes
//! from wherever the client reads pods (berthctl: berthd's Cluster service;
//! kubectl berth: the API server), whichever scheduler owns it; berth then
//! answers with its queue's record of the pod (when it is berth's) and a
//! dry run of the pod as it stands: per node the first plugin that rejected
//! it and why, what preemption would do, what claims and volumes lack.
//!
//! The answers are read generically where they may grow: node verdicts by
//! their enum names, and fields of the queue entry and of the dry run that
//! this module does not know are shown as they come.

use crate::pb::{DryRunResponse, NodeResult, NodeVerdict, PodGroupDryRun, QueueName, QueuedPod};
use crate::{Client, Conclusion};
use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::cli::Rpc;
use crate::cli::dryrun::{claim_lines, filter_cell, preemption, sorted};
use crate::cli::output::{Output, dynamic, render as render_value};
use crate::cli::table::Table;

/// The scheduler a pod without `spec.schedulerName` has.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What berth says about one pod.
#[derive(Debug, Clone)]
pub struct Why {
    /// The pod as read, Kubernetes JSON.
    pub pod: Value,
    /// The profile berth judged it with.
    pub profile: String,
    /// berth's queue entry for the pod, when berth's queue holds it.
    pub queue: Option<QueuedPod>,
    /// The dry run of the pod now; `None` when the pod is already bound or
    /// finished.
    pub dry_run: Option<DryRunResponse>,
}

impl Why {
    /// Whether the pod would be scheduled now: it is bound already, or a
    /// node fits it and nothing (scheduling gates) holds it back. An
    /// incomplete dry run (a plugin or extender that applies could not
    /// run) never says it fits.
    pub fn fits(&self) -> bool {
        match &self.dry_run {
            None => true,
            Some(d) => Conclusion::of_dry_run(d) == Conclusion::Fits && gates(&self.pod).is_empty(),
        }
    }

    /// The messages the dry run's answer says itself (a group's, its
    /// pods'): a pod's condition or queue entry repeating one of them is
    /// not said again.
    fn said_by_dry_run(&self) -> Vec<String> {
        let Some(g) = self.dry_run.as_ref().and_then(|d| d.pod_group.as_ref()) else {
            return Vec::new();
        };
        let mut said = vec![
            g.message.clone(),
            format!("{POD_GROUP_UNSCHEDULABLE}, {}", g.message),
        ];
        said.extend(g.pods.iter().map(|p| p.message.clone()));
        said.retain(|m| !m.is_empty());
        said
    }
}

/// The error upstream puts before a gang's reason on the pods it placed.
const POD_GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

fn gates(pod: &Value) -> Vec<&str> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default()
}

/// The pod's `PodScheduled` condition, if it has one.
fn scheduled_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
}

/// The profile to judge `pod` with: `requested` if given (it must be one of
/// berth's), else the pod's own schedulerName when berth serves it, else
/// berth's only profile.
fn choose_profile(pod: &Value, requested: &str, profiles: &[String]) -> Result<String> {
    let list = profiles.join(", ");
    if !requested.is_empty() {
        if profiles.iter().any(|p| p == requested) {
            return Ok(requested.to_string());
        }
        bail!("berth has no profile {requested:?} (its profiles: {list})");
    }
    let own = match str_at(pod, &["spec", "schedulerName"]) {
        "" => DEFAULT_SCHEDULER,
        s => s,
    };
    if profiles.iter().any(|p| p == own) {
        return Ok(own.to_string());
    }
    match profiles {
        [only] => Ok(only.clone()),
        _ => bail!(
            "the pod's scheduler {own:?} is not one of berth's profiles ({list}): say which to ask with --profile"
        ),
    }
}

/// The pod as a dry run takes it: without its managed fields (the server
/// never reads them, and they are most of a live pod's size).
fn for_dry_run(pod: &Value) -> Value {
    let mut pod = pod.clone();
    if let Some(meta) = pod["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    pod
}

/// Asks berth about `pod`. `profile` empty: as [`choose_profile`] says.
/// `all_nodes`: every Filter plugin on every node (for the wide view).
pub async fn ask(client: &mut Client, pod: Value, profile: &str, all_nodes: bool) -> Result<Why> {
    let profiles = client.profiles().await.rpc()?;
    let profile = choose_profile(&pod, profile, &profiles)?;
    let namespace = str_at(&pod, &["metadata", "namespace"]);
    let uid = str_at(&pod, &["metadata", "uid"]);
    let name = str_at(&pod, &["metadata", "name"]);
    let queue = client
        .get_queue(namespace)
        .await
        .rpc()?
        .into_iter()
        .find(|q| {
            if uid.is_empty() {
                q.name == name
            } else {
                q.uid == uid
            }
        });
    let finished = matches!(str_at(&pod, &["status", "phase"]), "Succeeded" | "Failed");
    let bound = !str_at(&pod, &["spec", "nodeName"]).is_empty();
    let dry_run = if bound || finished {
        None
    } else {
        Some(
            client
                .dry_run(&for_dry_run(&pod), &profile, all_nodes)
                .await
                .rpc()?,
        )
    };
    Ok(Why {
        pod,
        profile,
        queue,
        dry_run,
    })
}

/// A node verdict's name, from the enum ("NODE_VERDICT_NOT_EVALUATED" ->
/// "not evaluated"), so that verdicts added later read as they are named.
pub fn verdict_name(v: i32) -> String {
    match NodeVerdict::try_from(v) {
        Ok(v) => v
            .as_str_name()
            .trim_start_matches("NODE_VERDICT_")
            .to_lowercase()
            .replace('_', " "),
        Err(_) => format!("verdict {v}"),
    }
}

fn queue_name(q: i32) -> String {
    match QueueName::try_from(q) {
        Ok(QueueName::InFlight) => {
            "in flight (being scheduled or bound, or waiting at Permit)".into()
        }
        Ok(q) => q
            .as_str_name()
            .trim_start_matches("QUEUE_NAME_")
            .to_lowercase()
            .replace('_', " "),
        Err(_) => format!("queue {q}"),
    }
}

/// Fields of a proto message (as proto3 JSON) that are set and not in
/// `known`, as `key: value` lines: what a newer berthd adds reads as it
/// comes.
fn other_fields(v: &Value, known: &[&str], indent: &str) -> String {
    let Some(obj) = v.as_object() else {
        return String::new();
    };
    let mut out = String::new();
    for (k, v) in obj {
        if known.contains(&k.as_str()) || v.is_array() {
            continue;
        }
        let text = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!("{indent}{k}: {text}\n"));
    }
    out
}

/// The first plugin that rejected a node, and its reasons.
fn rejection(n: &NodeResult) -> (String, String) {
    let failures: Vec<_> = n
        .filters
        .iter()
        .filter(|f| !matches!(f.code.as_str(), "Success" | "Skip" | "NotEvaluated"))
        .collect();
    match failures.first() {
        None => (String::new(), String::new()),
        Some(f) => {
            let reason = if f.reasons.is_empty() {
                f.code.clone()
            } else {
                f.reasons.join(", ")
            };
            (f.plugin.clone(), reason)
        }
    }
}

/// Why PreFilter left a node out, when it did: the first PreFilter plugin
/// that narrowed the search to a set of nodes without it (its name, and
/// what it kept), or the PreFilter plugin that rejected the pod outright.
fn excluded_by<'a>(d: &'a DryRunResponse, node: &str) -> Option<(&'a str, String)> {
    for r in &d.pre_filter {
        match r.code.as_str() {
            "Skip" => {}
            "Success" => {
                if r.node_names.is_empty() || r.node_names.iter().any(|n| n == node) {
                    continue;
                }
                let kept = match r.node_names.as_slice() {
                    [one] => format!("only {one}"),
                    many => format!("{} nodes", many.len()),
                };
                let why = narrowed_by(&r.plugin);
                let why = if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                };
                return Some((&r.plugin, format!("PreFilter kept {kept}{why}")));
            }
            code => {
                let reason = if r.reasons.is_empty() {
                    code.to_string()
                } else {
                    r.reasons.join(", ")
                };
                return Some((&r.plugin, format!("PreFilter: {reason}")));
            }
        }
    }
    None
}

/// What a built-in PreFilter narrows the nodes by (upstream's
/// PreFilterResult carries node names, not a reason).
fn narrowed_by(plugin: &str) -> &'static str {
    match plugin {
        "VolumeBinding" => "the node affinity of the pod's bound local PersistentVolumes",
        "NodeAffinity" => "the pod's required node affinity on metadata.name",
        "NodeName" => "the pod's spec.nodeName",
        _ => "",
    }
}

/// Up to three names, then how many more.
fn some_names(names: &[&str]) -> String {
    let shown = names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        0..=3 => shown,
        n => format!("{shown} and {} more", n - 3),
    }
}

/// The default view of the nodes: one row per verdict, plugin and reason,
/// with how many nodes share it and a few of their names, so that the
/// answer has as many rows as there are reasons, not nodes. The selected
/// node has a row of its own; the other feasible nodes are counted; nodes
/// a PreFilter left out name that plugin and what it kept; nodes the
/// search never reached (it stops once it has enough feasible nodes) are
/// counted.
fn summary_table(d: &DryRunResponse) -> String {
    struct Group<'a> {
        verdict: String,
        plugin: String,
        reason: String,
        nodes: Vec<&'a str>,
    }
    let mut groups: Vec<Group> = Vec::new();
    for n in sorted(&d.nodes) {
        let verdict = NodeVerdict::try_from(n.verdict).unwrap_or(NodeVerdict::Unspecified);
        let (label, plugin, reason) = match verdict {
            NodeVerdict::Feasible if n.selected => (
                "feasible (selected)".to_string(),
                String::new(),
                String::new(),
            ),
            NodeVerdict::Feasible => (verdict_name(n.verdict), String::new(), String::new()),
            NodeVerdict::NotEvaluated => match excluded_by(d, &n.node) {
                Some((plugin, reason)) => ("excluded".to_string(), plugin.to_string(), reason),
                None => (
                    verdict_name(n.verdict),
                    String::new(),
                    "the search stopped once enough nodes were feasible".to_string(),
                ),
            },
            _ => {
                let (plugin, mut reason) = rejection(n);
                if reason.is_empty() {
                    reason = n.reason.clone();
                }
                (verdict_name(n.verdict), plugin, reason)
            }
        };
        match groups
            .iter_mut()
            .find(|g| g.verdict == label && g.plugin == plugin && g.reason == reason)
        {
            Some(g) => g.nodes.push(&n.node),
            None => groups.push(Group {
                verdict: label,
                plugin,
                reason,
                nodes: vec![&n.node],
            }),
        }
    }
    // Within a verdict, the reasons most nodes share first.
    let rank = |g: &Group| match g.verdict.as_str() {
        "feasible (selected)" => 0,
        "feasible" => 1,
        "excluded" => 4,
        "not evaluated" => 5,
        _ if g.verdict == verdict_name(NodeVerdict::Unknown as i32) => 2,
        _ => 3,
    };
    groups.sort_by_key(|g| (rank(g), std::cmp::Reverse(g.nodes.len())));
    let mut t = Table::new(["NODES", "VERDICT", "PLUGIN", "REASON", "WHICH"]).right(0);
    for g in &groups {
        t.row([
            g.nodes.len().to_string(),
            g.verdict.clone(),
            g.plugin.clone(),
            g.reason.clone(),
            some_names(&g.nodes),
        ]);
    }
    let mut out = t.render();
    out.push_str(&claim_lines(d));
    out
}

/// The wide view: every node, its total score and every plugin that
/// rejected it (or the PreFilter that left it out).
fn node_table(d: &DryRunResponse) -> String {
    let mut t = Table::new(["NODE", "VERDICT", "SCORE", "FILTERS"]);
    for n in sorted(&d.nodes) {
        let mut verdict = verdict_name(n.verdict);
        if n.selected {
            verdict.push_str(" (selected)");
        }
        let score = if n.scores.is_empty() {
            String::new()
        } else {
            n.total_score.to_string()
        };
        let filters = match excluded_by(d, &n.node) {
            Some((plugin, reason))
                if NodeVerdict::try_from(n.verdict) == Ok(NodeVerdict::NotEvaluated) =>
            {
                format!("excluded by {plugin}: {reason}")
            }
            _ => filter_cell(n),
        };
        t.row([n.node.clone(), verdict, score, filters]);
    }
    let mut out = t.render();
    out.push_str(&claim_lines(d));
    out
}

/// The human answer; `wide` lists every node with its score and every
/// rejecting plugin.
pub fn render(why: &Why, wide: bool) -> Result<String> {
    let pod = &why.pod;
    let ns = str_at(pod, &["metadata", "namespace"]);
    let name = str_at(pod, &["metadata", "name"]);
    let scheduler = match str_at(pod, &["spec", "schedulerName"]) {
        "" => DEFAULT_SCHEDULER,
        s => s,
    };
    let mut out = format!("Pod {ns}/{name}, scheduler {scheduler}");
    if why.profile != scheduler {
        out.push_str(&format!(" (asked of berth's profile {})", why.profile));
    }
    out.push('\n');

    let node = str_at(pod, &["spec", "nodeName"]);
    if !node.is_empty() {
        out.push_str(&format!("Bound to {node}: nothing to explain.\n"));
        return Ok(out);
    }
    let phase = str_at(pod, &["status", "phase"]);
    if matches!(phase, "Succeeded" | "Failed") {
        out.push_str(&format!("{phase}: the pod is finished, not pending.\n"));
        return Ok(out);
    }

    let said = why.said_by_dry_run();
    let new_to_say = |m: &str| !m.is_empty() && !said.iter().any(|s| s == m);
    if let Some(c) = scheduled_condition(pod) {
        let mut line = format!("PodScheduled: {}", str_at(c, &["status"]));
        if let Some(r) = c["reason"].as_str() {
            line.push_str(&format!(" ({r})"));
        }
        if let Some(m) = c["message"].as_str().filter(|m| new_to_say(m)) {
            line.push_str(&format!(": {m}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    let nominated = str_at(pod, &["status", "nominatedNodeName"]);
    if !nominated.is_empty() {
        out.push_str(&format!(
            "Nominated to {nominated} (preemption made room there)\n"
        ));
    }
    let gates = gates(pod);
    if !gates.is_empty() {
        out.push_str(&format!(
            "Waiting for scheduling gates: [{}]: no scheduler tries the pod until they are removed; below, what berth would do then.\n",
            gates.join(", ")
        ));
    }

    match &why.queue {
        Some(q) => {
            out.push_str(&format!(
                "In berth's queue: {}, {} attempt{}\n",
                queue_name(q.queue),
                q.attempts,
                if q.attempts == 1 { "" } else { "s" }
            ));
            let condition = scheduled_condition(pod).and_then(|c| c["message"].as_str());
            if new_to_say(&q.last_failure) && condition != Some(q.last_failure.as_str()) {
                out.push_str(&format!("  last failure: {}\n", q.last_failure));
            }
            if !q.unschedulable_plugins.is_empty() {
                out.push_str(&format!(
                    "  rejected by: {} (a change they watch for retries it)\n",
                    q.unschedulable_plugins.join(", ")
                ));
            }
            // When its backoff ends matters while it waits in backoffQ;
            // elsewhere (unschedulable, gated) a change moves it, and the
            // time only decides which queue it goes to then.
            if q.queue == QueueName::Backoff as i32
                && let Some(t) = &q.backoff_expires_at
            {
                out.push_str(&format!("  its backoff ends at {t}\n"));
            }
            let v = serde_json::to_value(dynamic(q)?)?;
            out.push_str(&other_fields(
                &v,
                &[
                    "namespace",
                    "name",
                    "uid",
                    "queue",
                    "priority",
                    "schedulerName",
                    "attempts",
                    "lastFailure",
                    "backoffExpiresAt",
                ],
                "  ",
            ));
        }
        None if why.profile == scheduler => {
            out.push_str("Not in berth's queue (not seen yet, or just scheduled)\n");
        }
        None => {}
    }

    let Some(d) = &why.dry_run else {
        return Ok(out);
    };
    out.push('\n');
    if let Some(g) = &d.pod_group {
        out.push_str(&render_group(g, name));
        return Ok(out);
    }
    if let Conclusion::Incomplete(lines) = Conclusion::of_dry_run(d) {
        out.push_str(&format!(
            "Now: cannot tell: the answer is incomplete ({}). {}\n",
            lines.join("; "),
            d.message
        ));
    } else if d.selected_node.is_empty() {
        out.push_str(&format!("Now: does not fit. {}\n", d.message));
    } else if !gates.is_empty() {
        // The exit code says "does not fit now": so does the line.
        out.push_str(&format!(
            "Now: gated. Once its gates are removed berth would schedule it to {} ({} of {} nodes feasible).\n",
            d.selected_node,
            d.feasible_nodes,
            d.nodes.len()
        ));
    } else {
        out.push_str(&format!(
            "Now: fits. berth would schedule it to {} ({} of {} nodes feasible).\n",
            d.selected_node,
            d.feasible_nodes,
            d.nodes.len()
        ));
    }
    let v = serde_json::to_value(dynamic(d)?)?;
    out.push_str(&other_fields(
        &v,
        &[
            "selectedNode",
            "profile",
            "message",
            "evaluatedNodes",
            "feasibleNodes",
            "preemption",
            // The "Now:" line above says whether the answer is complete.
            "completeness",
        ],
        "",
    ));
    if let Some(p) = &d.preemption
        && d.selected_node.is_empty()
    {
        out.push_str(&preemption(p));
    }
    let blocked: Vec<_> = d
        .pre_filter
        .iter()
        .filter(|r| !matches!(r.code.as_str(), "Success" | "Skip"))
        .collect();
    for r in blocked {
        out.push_str(&format!(
            "PreFilter {}: {}{}\n",
            r.plugin,
            r.code,
            if r.reasons.is_empty() {
                String::new()
            } else {
                format!(": {}", r.reasons.join(", "))
            }
        ));
    }

    out.push('\n');
    if wide {
        out.push_str(&node_table(d));
    } else {
        out.push_str(&summary_table(d));
    }
    Ok(out)
}

/// A group's answer in plain words, each thing once: the group (its
/// minCount, how many of its pods exist and how many are placed), what it
/// waits for, or whether it fits and where each pod would go or why it
/// would not, what preemption would do, and per node why the pods that fit
/// nowhere do not. `pod` is the name of the pod asked about.
pub fn render_group(g: &PodGroupDryRun, pod: &str) -> String {
    let exist = g.pods.len() + g.scheduled_pods as usize;
    let placed = g.scheduled_pods;
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let unknown = g.min_count == 0 && g.pre_enqueue.is_some();
    let mut out = if unknown {
        format!(
            "PodGroup {}/{}: not known to berth; {} it.\n",
            g.namespace,
            g.name,
            plural(exist, "pod names", "pods name")
        )
    } else if g.min_count > 0 {
        format!(
            "Gang {}/{} needs {} (minCount): {} exist, {placed} placed.\n",
            g.namespace,
            g.name,
            plural(g.min_count as usize, "pod", "pods"),
            exist
        )
    } else {
        format!(
            "PodGroup {}/{} (basic policy): {} exist, {placed} placed.\n",
            g.namespace,
            g.name,
            plural(exist, "pod", "pods")
        )
    };
    if let Some(pre) = &g.pre_enqueue {
        let mut line = String::from("Now: waits: ");
        if !pre.plugin.is_empty() {
            line.push_str(&format!("{} holds it, ", pre.plugin));
        }
        line.push_str(&pre.reasons.join(", "));
        if g.min_count as usize > exist {
            let more = g.min_count as usize - exist;
            line.push_str(&format!(
                " ({more} more {} needed)",
                if more == 1 { "pod" } else { "pods" }
            ));
        }
        out.push_str(&line);
        out.push_str(".\n");
        return out;
    }
    let preemption = g.preemption.as_ref();
    // The group's message carries PodGroupPostFilter's after its own; each
    // is said once, in its place.
    let mut reason = g.message.as_str();
    if let Some(p) = preemption
        && let Some(r) = reason.strip_suffix(p.message.as_str())
    {
        reason = r.trim_end_matches(", ");
    }
    if g.fits {
        out.push_str("Now: fits: the whole group would be scheduled.\n");
    } else if g.code == "Unschedulable" || g.code == "UnschedulableAndUnresolvable" {
        out.push_str(&format!("Now: does not fit: {reason}.\n"));
    } else {
        out.push_str(&format!(
            "Now: cannot be scheduled ({}): {reason}.\n",
            g.code
        ));
    }
    // Nodes only where some pod has one (the group fits, or preemption
    // would nominate): a placement undone has none.
    let nodes = g.pods.iter().any(|p| !p.node.is_empty());
    let mut t = if nodes {
        Table::new(["POD", "NODE", "RESULT"])
    } else {
        Table::new(["POD", "RESULT"])
    };
    for p in &g.pods {
        let name = if p.name == pod {
            format!("{} (this pod)", p.name)
        } else {
            p.name.clone()
        };
        let node = if p.node.is_empty() {
            "-".to_string()
        } else {
            p.node.clone()
        };
        let result = if g.fits && !p.node.is_empty() {
            "would be bound".to_string()
        } else if p.placed {
            "placed, undone with the group".to_string()
        } else if !p.rejections.is_empty() {
            format!("fits no node: {}", p.message)
        } else if p.message == g.message || p.message.is_empty() {
            "not tried".to_string()
        } else {
            p.message.clone()
        };
        if nodes {
            t.row([name, node, result]);
        } else {
            t.row([name, result]);
        }
    }
    out.push_str(&t.render());
    if let Some(p) = preemption.filter(|_| !g.fits) {
        let said = p
            .message
            .strip_prefix("pod group preemption: ")
            .unwrap_or(&p.message);
        if p.found {
            let victims: Vec<String> = p
                .victims
                .iter()
                .map(|v| format!("{}/{}", v.namespace, v.name))
                .collect();
            out.push_str(&format!(
                "Preemption would make room, evicting {}: {said}\n",
                victims.join(", ")
            ));
        } else {
            out.push_str(&format!("Preemption would not help: {said}.\n"));
        }
    }
    for p in g.pods.iter().filter(|p| !p.rejections.is_empty()) {
        out.push_str(&format!("\n{} fits no node:\n", p.name));
        let mut t = Table::new(["NODE", "PLUGIN", "REASON"]);
        for r in &p.rejections {
            let reason = if r.reasons.is_empty() {
                r.code.clone()
            } else {
                r.reasons.join(", ")
            };
            t.row([r.node.clone(), r.plugin.clone(), reason]);
        }
        out.push_str(&t.render());
    }
    out
}

/// The answer as one JSON object (for `-o json` and `-o yaml`): the pod's
/// identity and state, the profile, whether it fits, and berth's queue
/// entry and dry run as proto3 JSON (so fields a newer berthd adds appear).
pub fn to_value(why: &Why) -> Result<Value> {
    let pod = &why.pod;
    let queue = match &why.queue {
        Some(q) => serde_json::to_value(dynamic(q)?)?,
        None => Value::Null,
    };
    let dry_run = match &why.dry_run {
        Some(d) => serde_json::to_value(dynamic(d)?)?,
        None => Value::Null,
    };
    Ok(json!({
        "pod": {
            "namespace": str_at(pod, &["metadata", "namespace"]),
            "name": str_at(pod, &["metadata", "name"]),
            "uid": str_at(pod, &["metadata", "uid"]),
            "schedulerName": match str_at(pod, &["spec", "schedulerName"]) {
                "" => DEFAULT_SCHEDULER,
                s => s,
            },
            "nodeName": str_at(pod, &["spec", "nodeName"]),
            "phase": str_at(pod, &["status", "phase"]),
            "schedulingGates": gates(pod),
            "podScheduled": scheduled_condition(pod).cloned().unwrap_or(Value::Null),
        },
        "profile": why.profile,
        "fits": why.fits(),
        "queue": queue,
        "dryRun": dry_run,
    }))
}

/// Prints the answer in `format` (`wide` for the table with scores).
pub fn print(why: &Why, format: Output, wide: bool) -> Result<()> {
    let text = match format {
        Output::Table => render(why, wide)?,
        Output::Json | Output::Yaml => render_value(format, &to_value(why)?)?,
    };
    crate::cli::output::emit(&text)
}

#[cfg(test)]
mod tests;
