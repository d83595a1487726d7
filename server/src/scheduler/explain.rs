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
}

fn verdict_of(s: &Status) -> Verdict {
    match s.code() {
        Code::Success => Verdict::Feasible,
        Code::UnschedulableAndUnresolvable => Verdict::Unresolvable,
        Code::Error => Verdict::Error,
        _ => Verdict::Unschedulable,
    }
}

impl Scheduler {
    pub(super) fn profile_for(
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
    pub async fn dry_run(
        &self,
        pod: PodInfo,
        profile: Option<&str>,
        all_nodes: bool,
    ) -> Result<DryRunReport, UnknownProfile> {
        let fw = self.profile_for(profile, &pod)?;
        let snapshot = Arc::new(self.snapshot());
        let nominated = self.shared.handle.nominated_pods();
        let mut state = CycleState::with_snapshot(snapshot.clone());
        state.dry_run = true;
        let all = snapshot.list();
        let mut report = DryRunReport {
            profile: fw.profile_name().clone(),
            selected: None,
            message: String::new(),
            pre_filter: Vec::new(),
            pre_score: Vec::new(),
            nodes: all
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
                })
                .collect(),
            evaluated: 0,
            feasible: 0,
            preemption: None,
        };
        if all.is_empty() {
            report.message = NO_NODES_AVAILABLE.into();
            return Ok(report);
        }

        let mut outcomes = Vec::new();
        let (restriction, status, with_nodes) =
            fw.run_pre_filter_recorded(&mut state, &pod, all, &mut |plugin,
                                                                    s,
                                                                    r: Option<
                &PreFilterResult,
            >| {
                outcomes.push(PluginOutcome {
                    plugin,
                    status: s.clone(),
                    node_names: r.and_then(|r| r.node_names.as_ref()).map(|n| {
                        let mut v: Vec<String> = n.iter().map(|s| s.to_string()).collect();
                        v.sort();
                        v
                    }),
                });
            })
            .await;
        report.pre_filter = outcomes;
        let mut diagnosis = Diagnosis {
            unschedulable_plugins: with_nodes.clone(),
            ..Default::default()
        };
        if !status.is_success() {
            if !status.is_rejected() {
                report.message = status.message();
                return Ok(report);
            }
            diagnosis.pre_filter_msg = Some(status.message());
            diagnosis.add_plugin_status(&status);
            diagnosis.node_to_status.set_absent_nodes_status(status);
            self.explain_failure(&fw, &state, &pod, &snapshot, diagnosis, &mut report)
                .await;
            return Ok(report);
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
                let filters = self.filter_node(&fw, &state, &pod, node, &nominated, all_nodes);
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
                    fw.explain_node(&state, &pod, node, &rejecting)
                };
                let nr = &mut report.nodes[i];
                nr.details = details;
                nr.filters = filters;
                nr.verdict = verdict_of(&decisive);
                if decisive.code() == Code::Error {
                    // As in a cycle, a Filter error ends it: no node is
                    // chosen and preemption is not tried.
                    report.message = decisive.message();
                    return Ok(report);
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
            let batch = fw.batch_filter_names();
            let mut nodes: Vec<Arc<NodeInfo>> = feasible.iter().map(|&i| all[i].clone()).collect();
            let mut rejected: Vec<(&'static str, Arc<str>, Status)> = Vec::new();
            let outcome = fw
                .run_batch_filters(&state, &pod, &mut nodes, &mut |plugin, node, s| {
                    rejected.push((plugin, Arc::from(node.name()), s));
                })
                .await;
            if let Err(s) = outcome {
                report.message = s.message();
                return Ok(report);
            }
            feasible.retain(|&i| {
                let nr = &mut report.nodes[i];
                let failed = rejected.iter().find(|(_, n, _)| *n == nr.name);
                for (name, verdict) in nr.filters.iter_mut() {
                    if !batch.contains(name) || *verdict != FilterVerdict::NotEvaluated {
                        continue;
                    }
                    match failed {
                        Some((p, _, s)) if p == name => *verdict = FilterVerdict::Ran(s.clone()),
                        Some(_) => {}
                        None => *verdict = FilterVerdict::Ran(Status::success()),
                    }
                    if failed.is_some_and(|(p, _, _)| p == name) {
                        break;
                    }
                }
                match failed {
                    Some((_, _, s)) => {
                        nr.verdict = verdict_of(s);
                        diagnosis.add_plugin_status(s);
                        diagnosis.node_to_status.set(nr.name.clone(), s.clone());
                        false
                    }
                    None => true,
                }
            });
        }
        report.feasible = feasible.len();
        if feasible.is_empty() {
            self.explain_failure(&fw, &state, &pod, &snapshot, diagnosis, &mut report)
                .await;
            return Ok(report);
        }

        let nodes: Vec<Arc<NodeInfo>> = feasible.iter().map(|&i| all[i].clone()).collect();
        let mut best = feasible[0];
        if fw.has_score_plugins() {
            let mut outcomes = Vec::new();
            let s = fw
                .run_pre_score_recorded(&mut state, &pod, &nodes, &mut |plugin, s| {
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
                return Ok(report);
            }
            let scores = match fw.run_score(&state, &pod, &nodes).await {
                Ok(r) => r,
                Err(s) => {
                    report.message = s.message();
                    return Ok(report);
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
        report.nodes[best].details = fw.explain_node(&state, &pod, &all[best], &[]);
        let node = report.nodes[best].name.clone();
        report.message = format!(
            "Successfully assigned {}/{} to {node}",
            pod.namespace, pod.name
        );
        report.selected = Some(node);
        Ok(report)
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
            let (result, s) = fw
                .run_post_filter(state, pod, &diagnosis.node_to_status)
                .await;
            preemption.message = s.message();
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
        drop(state);
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
                });
            }
        }
        Ok(())
    }

    /// The outcome: each pod in order, and every node afterwards.
    pub fn finish(self) -> SimulationReport {
        let nodes = self
            .snapshot
            .list()
            .iter()
            .map(|n| NodeUse {
                placed: self.placed_on.get(n.name()).copied().unwrap_or(0),
                node: n.clone(),
            })
            .collect();
        SimulationReport {
            pods: self.out,
            groups: self.groups,
            nodes,
        }
    }
}
