//! What-if evaluations over copies of the cluster state: a dry run that
//! explains one pod's scheduling cycle plugin by plugin and node by node,
//! and a simulation that places a batch of pods one after another. Neither
//! assumes, reserves, binds or evicts anything, and the live cache is only
//! read.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Scheduler;
use super::algorithm::{
    Algorithm, FastRng, NO_NODES_AVAILABLE, ScheduleError, num_feasible_nodes_to_find,
};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    Code, CycleState, Diagnosis, FilterVerdict, FitError, Framework, NodeDetail, NominatingInfo,
    PreFilterResult, Status,
};
use crate::model::{PodInfo, PodRef};

/// The request named a profile that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile {name:?} not found; profiles: {available}")]
pub struct UnknownProfile {
    /// The profile asked for.
    pub name: String,
    /// The profiles there are.
    pub available: String,
}

/// A plugin's outcome at a per-cycle point.
#[derive(Debug, Clone)]
pub struct PluginOutcome {
    /// The plugin.
    pub plugin: &'static str,
    /// Its status.
    pub status: Status,
    /// PreFilter: the nodes it narrowed the search to.
    pub node_names: Option<Vec<String>>,
}

/// How a node fared in a dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every Filter plugin accepted it.
    Feasible,
    /// Rejected; preemption may help.
    Unschedulable,
    /// Rejected; preemption cannot help.
    Unresolvable,
    /// A plugin failed.
    Error,
    /// Not evaluated (search stopped, or ruled out by PreFilter).
    NotEvaluated,
    /// A Filter that applies could not judge it (an extender down, a
    /// PreFilter error): it may or may not fit ([`NodeReport::reason`]
    /// says why).
    Unknown,
}

/// A plugin that could not run as an answer needs it (the answer is
/// incomplete), or an ignorable extender the answer went without, as the
/// scheduler goes without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginNote {
    /// The plugin or extender ("" when the failure names none).
    pub plugin: &'static str,
    /// The extension point ("PreFilter", "Filter", ...; "" when unknown).
    pub point: &'static str,
    /// What went wrong (the first time, when it went wrong several times).
    pub reason: String,
    /// Filter: the nodes it left unjudged (or, ignored, passed unjudged).
    pub nodes: usize,
    /// Simulations: the pods it happened to.
    pub pods: usize,
}

/// Adds one occurrence to the note of `plugin` at `point`, or a new note.
fn note<'a>(
    notes: &'a mut Vec<PluginNote>,
    plugin: &'static str,
    point: &'static str,
    reason: impl FnOnce() -> String,
) -> &'a mut PluginNote {
    let at = match notes
        .iter()
        .position(|n| n.plugin == plugin && n.point == point)
    {
        Some(i) => i,
        None => {
            notes.push(PluginNote {
                plugin,
                point,
                reason: reason(),
                nodes: 0,
                pods: 0,
            });
            notes.len() - 1
        }
    };
    &mut notes[at]
}

/// One Score plugin's scores of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreRow {
    /// The plugin.
    pub plugin: &'static str,
    /// As given.
    pub raw: i64,
    /// After NormalizeScore.
    pub normalized: i64,
    /// The plugin's weight.
    pub weight: i64,
    /// normalized × weight.
    pub weighted: i64,
}

/// One node in a dry run.
#[derive(Debug, Clone)]
pub struct NodeReport {
    /// The node.
    pub name: Arc<str>,
    /// Its verdict.
    pub verdict: Verdict,
    /// Each Filter plugin's verdict, in order (empty if not evaluated).
    pub filters: Vec<(&'static str, FilterVerdict)>,
    /// Scores (feasible nodes).
    pub scores: Vec<ScoreRow>,
    /// The node's total.
    pub total: i64,
    /// The node the pod would go to.
    pub selected: bool,
    /// Whether it has the top total (the scheduler picks among those at
    /// random).
    pub top: bool,
    /// What Filter plugins tell beyond their statuses: why the plugins
    /// that rejected the node did, or what the pod would get on the
    /// selected node (DynamicResources: claims' requests, devices).
    pub details: Vec<(&'static str, NodeDetail)>,
    /// With [`Verdict::Unknown`]: why the node could not be judged.
    pub reason: String,
}

/// What preemption would do.
#[derive(Debug, Clone, Default)]
pub struct PreemptionReport {
    /// The node the pod would be nominated to.
    pub nominated_node: Option<Arc<str>>,
    /// The pods that would be evicted.
    pub victims: Vec<PodRef>,
    /// The PostFilter message.
    pub message: String,
}

/// A dry run's explanation.
#[derive(Debug, Clone)]
pub struct DryRunReport {
    /// The profile used.
    pub profile: Arc<str>,
    /// Where the pod would go.
    pub selected: Option<Arc<str>>,
    /// The summary, worded as kube-scheduler's events.
    pub message: String,
    /// PreFilter plugins' outcomes.
    pub pre_filter: Vec<PluginOutcome>,
    /// PreScore plugins' outcomes.
    pub pre_score: Vec<PluginOutcome>,
    /// Every node, in listing order.
    pub nodes: Vec<NodeReport>,
    /// Nodes Filter evaluated.
    pub evaluated: usize,
    /// Nodes that passed.
    pub feasible: usize,
    /// When no node fits: what preemption would do.
    pub preemption: Option<PreemptionReport>,
    /// What could not run: empty when the answer is complete (every
    /// Filter that applies ran on every node it reports, and every later
    /// point that applies ran).
    pub incomplete: Vec<PluginNote>,
    /// Ignorable extenders that failed and were skipped, as the scheduler
    /// skips them.
    pub skipped: Vec<PluginNote>,
}

impl DryRunReport {
    /// Whether every point that applies ran: the answer is the
    /// scheduler's.
    pub fn is_complete(&self) -> bool {
        self.incomplete.is_empty()
    }
}

/// Where a simulated pod went.
#[derive(Debug, Clone)]
pub struct SimulatedPod {
    /// The pod's namespace.
    pub namespace: Arc<str>,
    /// The pod's name.
    pub name: Arc<str>,
    /// Its node, if it fit.
    pub node: Option<Arc<str>>,
    /// Why it did not (empty when it fit).
    pub reason: Arc<str>,
    /// The PodGroup it was placed with, as a gang.
    pub pod_group: Option<Arc<str>>,
    /// Whether where it goes could not be judged (a plugin failed, as an
    /// extender that is down): neither placed nor known not to fit.
    pub unknown: bool,
}

/// A node after a simulation.
#[derive(Debug, Clone)]
pub struct NodeUse {
    /// The node.
    pub node: Arc<NodeInfo>,
    /// Simulated pods placed on it.
    pub placed: u32,
}

/// A simulation's outcome.
#[derive(Debug, Clone)]
pub struct SimulationReport {
    /// Each pod, in order.
    pub pods: Vec<SimulatedPod>,
    /// Each gang placed as a whole, in order.
    pub groups: Vec<super::SimulatedGroup>,
    /// Every node afterwards.
    pub nodes: Vec<NodeUse>,
    /// What could not run, with the pods it happened to: empty when every
    /// pod's placement was judged.
    pub incomplete: Vec<PluginNote>,
    /// Ignorable extenders that failed and were skipped, with the pods.
    pub skipped: Vec<PluginNote>,
}

fn verdict_of(s: &Status) -> Verdict {
    match s.code() {
        Code::Success => Verdict::Feasible,
        Code::UnschedulableAndUnresolvable => Verdict::Unresolvable,
        Code::Error => Verdict::Error,
        _ => Verdict::Unschedulable,
    }
}

/// A node's Filter error: noted as what the answer lacks, and kept as the
/// attempt's error if it is the first.
fn failed_on(incomplete: &mut Vec<PluginNote>, first: &mut Option<Status>, s: &Status) {
    note(incomplete, s.plugin().unwrap_or(""), "Filter", || {
        s.message()
    })
    .nodes += 1;
    first.get_or_insert_with(|| s.clone());
}

/// The ignorable extenders' failures noted in `state`'s token, one note per
/// plugin and point; `nodes_of(plugin)` counts the nodes a Filter one
/// passed unjudged.
fn skipped_notes(state: &CycleState, nodes_of: impl Fn(&str) -> usize) -> Vec<PluginNote> {
    let mut notes = Vec::new();
    for f in state.token().failures(0) {
        if f.ignored {
            note(&mut notes, f.plugin, f.point, || f.reason.clone());
        }
    }
    for n in &mut notes {
        if n.point == "Filter" {
            n.nodes = nodes_of(n.plugin);
        }
    }
    notes
}

impl Scheduler {
    /// The profile a what-if of `pod` runs with: `requested`, else the
    /// pod's schedulerName.
    pub fn profile_for(
        &self,
        requested: Option<&str>,
        pod: &PodInfo,
    ) -> Result<Arc<Framework>, UnknownProfile> {
        let name = requested
            .filter(|p| !p.is_empty())
            .unwrap_or(&pod.scheduler_name);
        self.shared.profiles.get(name).cloned().ok_or_else(|| {
            let mut names: Vec<&str> = self.shared.profiles.keys().map(|k| &**k).collect();
            names.sort();
            UnknownProfile {
                name: name.to_string(),
                available: names.join(", "),
            }
        })
    }

    pub(super) fn algorithm(&self) -> Algorithm {
        let mut a = Algorithm::new(
            self.shared.percentage_of_nodes_to_score,
            FastRng::new(0x5eed),
        );
        a.next_start_node_index = self.shared.next_start_node_index.load(Ordering::Relaxed);
        a
    }

    /// Explains where `pod` would go with `profile` (default: the pod's
    /// schedulerName), on a copy of the current state. With `all_nodes`,
    /// every node is evaluated with every Filter plugin.
    ///
    /// The answer never claims more than was judged: a node is feasible
    /// only if every Filter that applies ran and passed; a node a plugin
    /// could not judge is [`Verdict::Unknown`], and the report says what
    /// could not run ([`DryRunReport::incomplete`]) and which ignorable
    /// extenders were skipped ([`DryRunReport::skipped`]).
    pub async fn dry_run(
        &self,
        pod: PodInfo,
        profile: Option<&str>,
        all_nodes: bool,
    ) -> Result<DryRunReport, UnknownProfile> {
        let fw = self.profile_for(profile, &pod)?;
        let snapshot = Arc::new(self.snapshot());
        let mut state = CycleState::with_snapshot(snapshot.clone());
        state.dry_run = true;
        let mut report = DryRunReport {
            profile: fw.profile_name().clone(),
            selected: None,
            message: String::new(),
            pre_filter: Vec::new(),
            pre_score: Vec::new(),
            nodes: snapshot
                .list()
                .iter()
                .map(|n| NodeReport {
                    name: Arc::from(n.name()),
                    verdict: Verdict::NotEvaluated,
                    filters: Vec::new(),
                    scores: Vec::new(),
                    total: 0,
                    selected: false,
                    top: false,
                    details: Vec::new(),
                    reason: String::new(),
                })
                .collect(),
            evaluated: 0,
            feasible: 0,
            preemption: None,
            incomplete: Vec::new(),
            skipped: Vec::new(),
        };
        self.explain(&fw, &mut state, &pod, &snapshot, all_nodes, &mut report)
            .await;
        report.skipped = skipped_notes(&state, |plugin| {
            report
                .nodes
                .iter()
                .filter(|n| {
                    n.filters
                        .iter()
                        .any(|(p, v)| *p == plugin && matches!(v, FilterVerdict::Ignored(_)))
                })
                .count()
        });
        Ok(report)
    }

    /// The body of [`Scheduler::dry_run`]: fills `report`.
    async fn explain(
        &self,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Arc<Snapshot>,
        all_nodes: bool,
        report: &mut DryRunReport,
    ) {
        let nominated = self.shared.handle.nominated_pods();
        let all = snapshot.list();
        if all.is_empty() {
            report.message = NO_NODES_AVAILABLE.into();
            return;
        }

        let mut outcomes = Vec::new();
        let (restriction, status, with_nodes) = fw
            .run_pre_filter_recorded(
                state,
                pod,
                all,
                &mut |plugin, s, r: Option<&PreFilterResult>| {
                    outcomes.push(PluginOutcome {
                        plugin,
                        status: s.clone(),
                        node_names: r.and_then(|r| r.node_names.as_ref()).map(|n| {
                            let mut v: Vec<String> = n.iter().map(|s| s.to_string()).collect();
                            v.sort();
                            v
                        }),
                    });
                },
            )
            .await;
        report.pre_filter = outcomes;
        let mut diagnosis = Diagnosis {
            unschedulable_plugins: with_nodes.clone(),
            ..Default::default()
        };
        if !status.is_success() {
            if !status.is_rejected() {
                // PreFilter failed: no node can be judged.
                report.message = status.message();
                for nr in &mut report.nodes {
                    nr.verdict = Verdict::Unknown;
                    nr.reason = report.message.clone();
                }
                note(
                    &mut report.incomplete,
                    status.plugin().unwrap_or(""),
                    "PreFilter",
                    || status.message(),
                )
                .nodes = all.len();
                return;
            }
            diagnosis.pre_filter_msg = Some(status.message());
            diagnosis.add_plugin_status(&status);
            diagnosis.node_to_status.set_absent_nodes_status(status);
            self.explain_failure(fw, state, pod, snapshot, diagnosis, report)
                .await;
            return;
        }

        // The candidates: all nodes, or those PreFilter narrowed to.
        let allowed: Option<HashSet<Arc<str>>> = restriction.and_then(|r| r.node_names);
        if allowed.is_some() {
            let plugins: Vec<&str> = with_nodes.iter().copied().collect();
            diagnosis
                .node_to_status
                .set_absent_nodes_status(Status::unresolvable(format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    plugins.join(" ")
                )));
        }
        let candidates: Vec<usize> = (0..all.len())
            .filter(|&i| allowed.as_ref().is_none_or(|a| a.contains(all[i].name())))
            .collect();
        let n = candidates.len();
        let mut feasible: Vec<usize> = Vec::new();
        // The first error a plugin gave (the attempt's error in a real
        // cycle, and so the message).
        let mut first_error: Option<Status> = None;
        if n > 0 {
            let pct = fw
                .percentage_of_nodes_to_score()
                .unwrap_or(self.shared.percentage_of_nodes_to_score);
            let want = if all_nodes {
                usize::MAX
            } else if fw.has_score_plugins() {
                num_feasible_nodes_to_find(pct, n)
            } else {
                1
            };
            let start = if all_nodes {
                0
            } else {
                self.algorithm().next_start_node_index % n
            };
            for k in 0..n {
                if feasible.len() >= want {
                    break;
                }
                let i = candidates[(start + k) % n];
                let node = &all[i];
                let filters = self.filter_node(fw, state, pod, node, &nominated, all_nodes);
                let decisive = filters
                    .iter()
                    .find_map(|(_, v)| match v {
                        FilterVerdict::Ran(s) if !s.is_success() => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                report.evaluated += 1;
                let rejecting: Vec<&str> = filters
                    .iter()
                    .filter_map(|(p, v)| match v {
                        FilterVerdict::Ran(s) if !s.is_success() => Some(*p),
                        _ => None,
                    })
                    .collect();
                let details = if rejecting.is_empty() {
                    Vec::new()
                } else {
                    fw.explain_node(state, pod, node, &rejecting)
                };
                let nr = &mut report.nodes[i];
                nr.details = details;
                nr.filters = filters;
                nr.verdict = verdict_of(&decisive);
                if decisive.code() == Code::Error {
                    // As in a cycle, a Filter error ends it: no node is
                    // chosen, preemption is not tried, and the answer is
                    // incomplete.
                    failed_on(&mut report.incomplete, &mut first_error, &decisive);
                    report.feasible = feasible.len();
                    report.message = decisive.message();
                    return;
                }
                if decisive.is_success() {
                    feasible.push(i);
                } else {
                    diagnosis.add_plugin_status(&decisive);
                    diagnosis.node_to_status.set(nr.name.clone(), decisive);
                }
            }
        }
        if fw.has_batch_filters() && !feasible.is_empty() {
            // Batch plugins (remote extenders) judge the nodes that passed
            // the others, all at once, as in a real cycle.
            let nodes: Vec<Arc<NodeInfo>> = feasible.iter().map(|&i| all[i].clone()).collect();
            let judged = fw.run_batch_filters_each(state, pod, &nodes).await;
            let mut still = Vec::with_capacity(feasible.len());
            for (k, &i) in feasible.iter().enumerate() {
                let nr = &mut report.nodes[i];
                for (plugin, verdicts) in &judged {
                    if let Some(slot) = nr.filters.iter_mut().find(|(p, _)| p == plugin) {
                        slot.1 = verdicts[k].clone();
                    }
                }
                let mut decisive: Option<&Status> = None;
                let mut unknown: Option<(&'static str, &Status)> = None;
                for (plugin, verdicts) in &judged {
                    match &verdicts[k] {
                        FilterVerdict::Ran(s) if !s.is_success() => {
                            decisive = decisive.or(Some(s));
                        }
                        FilterVerdict::Unknown(s) => unknown = unknown.or(Some((plugin, s))),
                        _ => {}
                    }
                }
                match (decisive, unknown) {
                    (Some(s), _) if s.code() == Code::Error => {
                        nr.verdict = Verdict::Error;
                        failed_on(&mut report.incomplete, &mut first_error, s);
                    }
                    (Some(s), _) => {
                        nr.verdict = verdict_of(s);
                        diagnosis.add_plugin_status(s);
                        diagnosis.node_to_status.set(nr.name.clone(), s.clone());
                    }
                    (None, Some((plugin, s))) => {
                        nr.verdict = Verdict::Unknown;
                        nr.reason = s.message();
                        note(&mut report.incomplete, plugin, "Filter", || s.message()).nodes += 1;
                        first_error.get_or_insert_with(|| s.clone());
                    }
                    (None, None) => still.push(i),
                }
            }
            feasible = still;
        }
        report.feasible = feasible.len();
        if let Some(e) = first_error {
            // A real cycle would end here with this error: nothing is
            // selected and preemption is not tried.
            report.message = e.message();
            return;
        }
        if feasible.is_empty() {
            self.explain_failure(fw, state, pod, snapshot, diagnosis, report)
                .await;
            return;
        }

        let nodes: Vec<Arc<NodeInfo>> = feasible.iter().map(|&i| all[i].clone()).collect();
        let mut best = feasible[0];
        if fw.has_score_plugins() {
            let mut outcomes = Vec::new();
            let s = fw
                .run_pre_score_recorded(state, pod, &nodes, &mut |plugin, s| {
                    outcomes.push(PluginOutcome {
                        plugin,
                        status: s.clone(),
                        node_names: None,
                    })
                })
                .await;
            report.pre_score = outcomes;
            if !s.is_success() {
                report.message = s.message();
                note(
                    &mut report.incomplete,
                    s.plugin().unwrap_or(""),
                    "PreScore",
                    || s.message(),
                )
                .nodes = nodes.len();
                return;
            }
            let scores = match fw.run_score(state, pod, &nodes).await {
                Ok(r) => r,
                Err(s) => {
                    report.message = s.message();
                    note(
                        &mut report.incomplete,
                        s.plugin().unwrap_or(""),
                        "Score",
                        || s.message(),
                    )
                    .nodes = nodes.len();
                    return;
                }
            };
            let np = scores.plugins.len();
            let max = scores.totals.iter().copied().max().unwrap_or(0);
            for (k, &i) in feasible.iter().enumerate() {
                let nr = &mut report.nodes[i];
                nr.scores = (0..np)
                    .map(|p| ScoreRow {
                        plugin: scores.plugins[p],
                        raw: scores.raw[k * np + p],
                        normalized: scores.normalized[k * np + p],
                        weight: scores.weights[p],
                        weighted: scores.normalized[k * np + p] * scores.weights[p],
                    })
                    .collect();
                nr.total = scores.totals[k];
                nr.top = nr.total == max;
            }
            best = *feasible
                .iter()
                .find(|&&i| report.nodes[i].top)
                .unwrap_or(&feasible[0]);
        } else {
            for &i in &feasible {
                report.nodes[i].total = 1;
                report.nodes[i].top = true;
            }
        }
        report.nodes[best].selected = true;
        report.nodes[best].details = fw.explain_node(state, pod, &all[best], &[]);
        let node = report.nodes[best].name.clone();
        report.message = format!(
            "Successfully assigned {}/{} to {node}",
            pod.namespace, pod.name
        );
        report.selected = Some(node);
    }

    /// One node's filter verdicts, counting pods nominated to it with at
    /// least the pod's priority as the scheduler does.
    fn filter_node(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &crate::framework::NominatedPods,
        all: bool,
    ) -> Vec<(&'static str, FilterVerdict)> {
        let relevant: Vec<&PodRef> = nominated
            .get(node.name())
            .into_iter()
            .flatten()
            .filter(|np| np.priority >= pod.priority && np.uid != pod.uid)
            .collect();
        if relevant.is_empty() {
            return fw.run_filter_each(state, pod, node, all);
        }
        let mut with = node.clone();
        let mut st = state.clone();
        for np in relevant {
            with.add_pod(np.clone());
            let s = fw.run_pre_filter_extension_add_pod(&mut st, pod, np, &with);
            if !s.is_success() {
                return vec![("AddPod", FilterVerdict::Ran(s))];
            }
        }
        fw.run_filter_each(&st, pod, &with, all)
    }

    /// No node fits: the FitError message and what preemption would do.
    async fn explain_failure(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        mut diagnosis: Diagnosis,
        report: &mut DryRunReport,
    ) {
        let mut preemption = PreemptionReport::default();
        if fw.has_post_filter_plugins() {
            let failed_before = state.token().failure_count();
            let (result, s) = fw
                .run_post_filter(state, pod, &diagnosis.node_to_status)
                .await;
            // An extender that could not judge candidates at preemption's
            // what-if left them out: the answer about preemption is
            // incomplete.
            for f in state.token().failures(failed_before) {
                if !f.ignored {
                    note(&mut report.incomplete, f.plugin, "PostFilter", || {
                        format!("preemption's {}: {}", f.point, f.reason)
                    })
                    .nodes += usize::from(f.node_id.is_some());
                }
            }
            preemption.message = s.message();
            if s.code() == Code::Error {
                note(
                    &mut report.incomplete,
                    s.plugin().unwrap_or(""),
                    "PostFilter",
                    || s.message(),
                );
            }
            if let Some(r) = result {
                if let NominatingInfo::Override(Some(n)) = &r.nominating_info {
                    preemption.nominated_node = Some(n.clone());
                }
                preemption.victims = r.victims;
            }
            diagnosis.post_filter_msg = Some(s.message()).filter(|m| !m.is_empty());
        }
        let fit = FitError {
            num_all_nodes: snapshot.num_nodes(),
            diagnosis,
        };
        report.message = fit.to_string();
        report.preemption = Some(preemption);
    }

    /// A simulation on a copy of the current state: place pods one after
    /// another with [`Simulation::place`], each seeing the earlier ones,
    /// then [`Simulation::finish`]. The caller decides the pace, so it can
    /// stop between pods (a client gone, a deadline passed).
    pub fn simulation(&self) -> Simulation<'_> {
        Simulation {
            scheduler: self,
            placed_on: Default::default(),
            out: Vec::new(),
            snapshot: Arc::new(self.snapshot()),
            nominated: self.shared.handle.nominated_pods(),
            alg: self.algorithm(),
            last_reason: None,
            groups: Vec::new(),
            incomplete: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Places `pods` one after another on a copy of the current state, each
    /// seeing the earlier ones.
    pub async fn simulate(
        &self,
        pods: Vec<PodInfo>,
        profile: Option<&str>,
    ) -> Result<SimulationReport, UnknownProfile> {
        let mut sim = self.simulation();
        for pod in pods {
            sim.place(pod, profile).await?;
        }
        Ok(sim.finish())
    }
}

/// A simulation under way (see [`Scheduler::simulation`]). Only what the
/// report needs is kept of each pod placed; pods that fit nowhere are
/// dropped at once, and their identical reasons share one string.
pub struct Simulation<'a> {
    pub(super) scheduler: &'a Scheduler,
    pub(super) placed_on: std::collections::HashMap<Arc<str>, u32>,
    pub(super) out: Vec<SimulatedPod>,
    pub(super) snapshot: Arc<Snapshot>,
    pub(super) nominated: Arc<crate::framework::NominatedPods>,
    pub(super) alg: Algorithm,
    pub(super) last_reason: Option<Arc<str>>,
    /// The gangs placed (or not), in order.
    pub(super) groups: Vec<super::SimulatedGroup>,
    incomplete: Vec<PluginNote>,
    skipped: Vec<PluginNote>,
}

impl Simulation<'_> {
    /// Pods placed (or found to fit nowhere) so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether no pod was placed yet.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Places one more pod with `profile` (default: its schedulerName).
    pub async fn place(
        &mut self,
        pod: PodInfo,
        profile: Option<&str>,
    ) -> Result<(), UnknownProfile> {
        let fw = self.scheduler.profile_for(profile, &pod)?;
        let pod = Arc::new(pod);
        let mut state = CycleState::with_snapshot(self.snapshot.clone());
        state.dry_run = true;
        let result = self
            .alg
            .schedule_pod(&fw, &mut state, &pod, &self.snapshot, &self.nominated)
            .await;
        let failures = state.token().failures(0);
        drop(state);
        let mut skipped_here = Vec::new();
        for f in failures.iter().filter(|f| f.ignored) {
            let n = note(&mut skipped_here, f.plugin, f.point, || f.reason.clone());
            n.pods = 1;
        }
        for n in skipped_here {
            note(&mut self.skipped, n.plugin, n.point, || n.reason.clone()).pods += 1;
        }
        let mut unknown = false;
        if let Err(ScheduleError::Error(s)) = &result {
            // What failed: the plugin's own note names the point.
            unknown = true;
            let (plugin, point, reason) = failures
                .iter()
                .find(|f| !f.ignored)
                .map(|f| (f.plugin, f.point, f.reason.clone()))
                .unwrap_or_else(|| (s.plugin().unwrap_or(""), "", s.message()));
            note(&mut self.incomplete, plugin, point, || reason).pods += 1;
        }
        match result {
            Ok(r) => {
                Arc::make_mut(&mut self.snapshot)
                    .assume_pod(Arc::new(pod.assumed_on(&r.suggested_host)));
                *self.placed_on.entry(r.suggested_host.clone()).or_default() += 1;
                self.out.push(SimulatedPod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    node: Some(r.suggested_host),
                    reason: Arc::from(""),
                    pod_group: None,
                    unknown: false,
                });
            }
            Err(e) => {
                let reason = match e {
                    ScheduleError::NoNodesAvailable => NO_NODES_AVAILABLE.to_string(),
                    ScheduleError::Fit(f) => f.to_string(),
                    ScheduleError::Error(s) => s.message(),
                };
                let reason = match &self.last_reason {
                    Some(last) if **last == *reason => last.clone(),
                    _ => {
                        let r: Arc<str> = Arc::from(reason);
                        self.last_reason = Some(r.clone());
                        r
                    }
                };
                self.out.push(SimulatedPod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    node: None,
                    reason,
                    pod_group: None,
                    unknown,
                });
            }
        }
        Ok(())
    }

    /// The outcome: each pod in order, and every node afterwards, by
    /// name (the snapshot's order interleaves zones, which reads as no
    /// order at all).
    pub fn finish(self) -> SimulationReport {
        let mut nodes: Vec<NodeUse> = self
            .snapshot
            .list()
            .iter()
            .map(|n| NodeUse {
                placed: self.placed_on.get(n.name()).copied().unwrap_or(0),
                node: n.clone(),
            })
            .collect();
        nodes.sort_by(|a, b| a.node.name().cmp(b.node.name()));
        SimulationReport {
            pods: self.out,
            groups: self.groups,
            nodes,
            incomplete: self.incomplete,
            skipped: self.skipped,
        }
    }
}
