//! What-if evaluations of PodGroups (GenericWorkload): a dry run that says
//! whether a gang fits as a whole, where each pod would go, and otherwise
//! which pods could not be placed and why on each node; and gangs placed
//! all or nothing inside a simulation.
//!
//! The group runs the loop's own algorithm ([`GroupCycle`]: PlacementFeasible
//! before and after each pod, every placement undone unless the whole group
//! fits) on a copy of the state, with the cycle marked a dry run; when it
//! ends `Unschedulable`, PodGroupPostFilter says what workload-aware
//! preemption would do (it evicts nothing in a dry run). When the group
//! fits, its GroupPermit plugins are asked as a what-if (remote ones with
//! `dry_run` set): a group one would refuse is not called a fit, and
//! PodGroupPostFilter does not follow a refusal (as in the loop). The
//! pods' own Reserve and Permit are not run, as a pod's dry run runs no
//! Permit. Each pod's message is the one its FailedScheduling event would
//! carry after a real cycle.

use std::sync::Arc;

use super::Scheduler;
use super::algorithm::{Algorithm, ScheduleError};
use super::explain::UnknownProfile;
use super::pod_group_cycle::{
    GroupCycle, GroupResult, POD_GROUP_UNSCHEDULABLE, PodOutcome, validate_group_cycle,
};
use super::schedule_one_podgroup::ReRun;
use crate::cache::{Snapshot, group_key_of};
use crate::config::DEFAULT_SCHEDULER_NAME;
use crate::framework::{Code, CycleState, Framework, NominatedPods, PodGroupCycleInfo, Status};
use crate::model::{PodGroupInfo, PodInfo, PodRef};

/// One pod of a group in a dry run.
#[derive(Debug, Clone)]
pub struct GroupPodReport {
    /// The pod.
    pub pod: PodRef,
    /// Where it would go (only when the group fits), or where workload
    /// preemption would nominate it.
    pub node: Option<Arc<str>>,
    /// Whether the group algorithm found it a node (even if the group as a
    /// whole does not fit).
    pub placed: bool,
    /// Its FailedScheduling message when it would not be bound; empty
    /// when it would.
    pub message: String,
    /// When no node fitted the pod itself: each node's status (the
    /// rejecting plugin and its reasons), in listing order.
    pub rejections: Vec<(Arc<str>, Status)>,
}

/// What workload-aware preemption would do for the group.
#[derive(Debug, Clone, Default)]
pub struct GroupPreemptionReport {
    /// Whether it found room (the group would wait for its victims).
    pub found: bool,
    /// The pods it would evict.
    pub victims: Vec<PodRef>,
    /// The PodGroupPostFilter message (`pod group preemption: ...`).
    pub message: String,
}

/// A PodGroup's dry run.
#[derive(Debug, Clone)]
pub struct GroupDryRunReport {
    /// The profile used.
    pub profile: Arc<str>,
    /// The PodGroup.
    pub group: Arc<PodGroupInfo>,
    /// Whether the group fits as a whole now.
    pub fits: bool,
    /// The group's status code (`Success`, `Unschedulable`, `Error`...).
    pub code: Code,
    /// The message its `PodGroupInitiallyScheduled` condition would carry
    /// (empty when it fits).
    pub message: String,
    /// Its pods evaluated, in order.
    pub pods: Vec<GroupPodReport>,
    /// Its pods already assumed or bound.
    pub scheduled: usize,
    /// When it does not fit and PodGroupPostFilter ran.
    pub preemption: Option<GroupPreemptionReport>,
    /// When a PreEnqueue plugin holds the group (a gang with fewer than
    /// `minCount` pods): its status, naming it. The group waits: no cycle
    /// was tried, and each pod's message is this one.
    pub pre_enqueue: Option<Status>,
}

/// A PodGroup's pods as the scheduler knows them.
#[derive(Debug, Clone, Default)]
pub struct GroupMembers {
    /// The PodGroup, once seen.
    pub pod_group: Option<Arc<PodGroupInfo>>,
    /// Its pods not yet scheduled.
    pub unscheduled: Vec<PodRef>,
    /// Its pods assumed or bound.
    pub scheduled: Vec<PodRef>,
}

/// A gang in a simulation: fits all together, or none of it is placed.
#[derive(Debug, Clone)]
pub struct SimulatedGroup {
    /// The PodGroup.
    pub group: Arc<PodGroupInfo>,
    /// Whether it was placed.
    pub fits: bool,
    /// Pods placed.
    pub placed: usize,
    /// The group's message when it was not.
    pub message: String,
}

impl Scheduler {
    /// The PodGroup `pod` belongs to as the scheduler knows it (with
    /// GenericWorkload on), with its other pods not yet scheduled and those
    /// assumed or bound.
    pub fn pod_group_of(
        &self,
        pod: &PodInfo,
    ) -> Option<(Arc<PodGroupInfo>, Vec<PodRef>, Vec<PodRef>)> {
        let m = self.pod_group_members(&group_key_of(pod)?)?;
        let others = m
            .unscheduled
            .into_iter()
            .filter(|p| p.name != pod.name)
            .collect();
        Some((m.pod_group?, others, m.scheduled))
    }

    /// The group `key` as the scheduler knows it (with GenericWorkload on).
    pub fn pod_group_members(&self, key: &crate::model::GroupKey) -> Option<GroupMembers> {
        let state = self.shared.pod_groups.as_ref()?.get(key)?;
        Some(GroupMembers {
            pod_group: state.pod_group.clone(),
            unscheduled: state.unscheduled_pods(),
            scheduled: state.scheduled_pods(),
        })
    }

    /// Whether PodGroups are scheduled as groups (GenericWorkload on).
    pub fn schedules_pod_groups(&self) -> bool {
        self.shared.pod_groups.is_some()
    }

    /// Dry-runs `group` with `pods` (its pods to place, in order) and
    /// `scheduled` (its pods already assumed or bound), with `profile`
    /// (default: the first pod's schedulerName), on a copy of the state.
    pub async fn dry_run_group(
        &self,
        group: Arc<PodGroupInfo>,
        pods: Vec<PodRef>,
        scheduled: Vec<PodRef>,
        profile: Option<&str>,
    ) -> Result<GroupDryRunReport, UnknownProfile> {
        let fw = match pods.first() {
            Some(first) => self.profile_for(profile, first)?,
            None => {
                let name = profile.unwrap_or(DEFAULT_SCHEDULER_NAME);
                self.shared
                    .profiles
                    .get(name)
                    .cloned()
                    .ok_or_else(|| UnknownProfile {
                        name: name.to_string(),
                        available: String::new(),
                    })?
            }
        };
        let mut snapshot = Arc::new(self.snapshot());
        let nominated = self.shared.handle.nominated_pods();
        let info = PodGroupCycleInfo {
            group: group.clone(),
            pods,
            scheduled,
        };
        let mut report = GroupDryRunReport {
            profile: fw.profile_name().clone(),
            group: group.clone(),
            fits: false,
            code: Code::Error,
            message: String::new(),
            pods: Vec::new(),
            scheduled: info.scheduled.len(),
            preemption: None,
            pre_enqueue: None,
        };
        // As the queue would: a gang short of pods waits before any cycle,
        // counting the pods given and those scheduled already.
        if let Some(s) = held_by_pre_enqueue(&fw, &info) {
            report.code = s.code();
            report.message = s.message();
            report.pods = info
                .pods
                .iter()
                .map(|p| GroupPodReport {
                    pod: p.clone(),
                    node: None,
                    placed: false,
                    message: report.message.clone(),
                    rejections: Vec::new(),
                })
                .collect();
            report.pre_enqueue = Some(s);
            return Ok(report);
        }
        if let Err(e) = validate_group_cycle(
            &info,
            &self.shared.profiles,
            self.shared.pod_group_preemption_policy,
        ) {
            report.message = e.clone();
            report.pods = info
                .pods
                .iter()
                .map(|p| GroupPodReport {
                    pod: p.clone(),
                    node: None,
                    placed: false,
                    message: e.clone(),
                    rejections: Vec::new(),
                })
                .collect();
            return Ok(report);
        }
        let mut algorithm = self.algorithm();
        let (mut result, permit_refused) =
            run_group(&fw, &info, &nominated, &mut algorithm, &mut snapshot).await;
        let mut preemption = None;
        let mut nominations: Vec<(Arc<str>, Arc<str>)> = Vec::new();
        if result.status.code() == Code::Unschedulable
            && !permit_refused
            && fw.has_pod_group_post_filter_plugins()
        {
            let rerun = ReRun {
                fw: &fw,
                info: &info,
                nominated: &nominated,
                snapshot: snapshot.clone(),
                percentage: self.shared.percentage_of_nodes_to_score,
                seed: 0x5eed,
            };
            let mut state = CycleState::default();
            state.dry_run = true;
            let attempt = result.attempt();
            let (r, s) = fw
                .run_pod_group_post_filter(&state, &info, &attempt, &rerun)
                .await;
            let mut p = GroupPreemptionReport {
                found: s.is_success(),
                message: s.message(),
                ..Default::default()
            };
            if let Some(r) = r {
                p.victims = r.victims;
                if s.is_success() {
                    nominations = r.nominations;
                }
            }
            if s.is_error() {
                result.status = s;
            } else {
                result.status.push_reason(s.message());
            }
            preemption = Some(p);
        }
        report.code = result.status.code();
        report.fits = result.status.is_success();
        if !report.fits {
            report.message = result.status.message();
        }
        let waiting = preemption.as_ref().is_some_and(|p| p.found);
        report.pods = pod_reports(&snapshot, &info, result, &nominations, waiting);
        report.preemption = preemption;
        Ok(report)
    }
}

/// The status of the profile's GangScheduling PreEnqueue for the group
/// with the pods in `info` (queued and scheduled): `Some` when it holds it.
fn held_by_pre_enqueue(fw: &Framework, info: &PodGroupCycleInfo) -> Option<Status> {
    let gang = crate::plugins::names::GANG_SCHEDULING;
    if !fw
        .plugin_names(crate::config::ExtensionPoint::PreEnqueue)
        .contains(&gang)
    {
        return None;
    }
    let s = crate::plugins::gang_scheduling::quorum_status(
        &info.group,
        info.pods.len() + info.scheduled.len(),
    );
    (!s.is_success()).then(|| s.with_plugin(gang))
}

/// The group's algorithm as the loop runs it, as a what-if; when the
/// group fits, its GroupPermit plugins are asked too (with the cycle state
/// marked a dry run, so remote ones get `dry_run`): a group one of them
/// would refuse does not fit (the second value says a GroupPermit refused
/// it).
pub(super) async fn run_group(
    fw: &Framework,
    info: &PodGroupCycleInfo,
    nominated: &NominatedPods,
    algorithm: &mut Algorithm,
    snapshot: &mut Arc<Snapshot>,
) -> (GroupResult, bool) {
    let mut group_state = CycleState::default();
    group_state.dry_run = true;
    let cycle = GroupCycle {
        fw,
        info,
        group_state: &group_state,
        nominated,
        dry_run: true,
        publish: None,
        sample: &|| false,
    };
    let mut result = cycle.run(algorithm, snapshot).await;
    if result.status.is_success() && fw.has_group_permit_plugins() {
        let placement = result.assignments();
        let s = fw.run_group_permit(&group_state, info, &placement).await;
        if !s.is_success() {
            result.status = s;
            return (result, true);
        }
    }
    (result, false)
}

/// Each pod's report, worded as the loop's submission words its failure.
fn pod_reports(
    snapshot: &Snapshot,
    info: &PodGroupCycleInfo,
    result: GroupResult,
    nominations: &[(Arc<str>, Arc<str>)],
    waiting_on_preemption: bool,
) -> Vec<GroupPodReport> {
    let group = result.status;
    let group_message = group.message();
    info.pods
        .iter()
        .map(|pod| {
            let r = result.pods.iter().find(|r| r.pod.uid == pod.uid);
            let nominated = nominations
                .iter()
                .find(|(uid, _)| *uid == pod.uid)
                .map(|(_, n)| n.clone());
            let mut out = GroupPodReport {
                pod: pod.clone(),
                node: nominated.clone(),
                placed: false,
                message: String::new(),
                rejections: Vec::new(),
            };
            match r.map(|r| &r.outcome) {
                None => out.message = group_message.clone(),
                Some(PodOutcome::Placed(found)) => {
                    out.placed = true;
                    if group.is_success() {
                        out.node = Some(found.suggested_host.clone());
                    } else if !group.is_rejected() || waiting_on_preemption {
                        out.message = group_message.clone();
                    } else {
                        out.message = format!("{POD_GROUP_UNSCHEDULABLE}, {group_message}");
                    }
                }
                Some(o) => {
                    out.message = if !group.is_success() && !group.is_rejected() && !o.is_error() {
                        group_message.clone()
                    } else {
                        o.message()
                    };
                    if let PodOutcome::Failed(ScheduleError::Fit(fit)) = o {
                        out.rejections = snapshot
                            .list()
                            .iter()
                            .map(|n| {
                                let name: Arc<str> = Arc::from(n.name());
                                let s = fit.diagnosis.node_to_status.get(&name).clone();
                                (name, s)
                            })
                            .collect();
                    }
                }
            }
            out
        })
        .collect()
}

impl super::Simulation<'_> {
    /// Places `group`'s `pods` as the loop would, all or nothing: the
    /// group's algorithm on the simulation's state, each pod seeing those
    /// placed before; when the group fits its placed pods stay, otherwise
    /// none does and each pod gets its message. `scheduled`: the group's
    /// pods already assumed or bound.
    pub async fn place_group(
        &mut self,
        group: Arc<PodGroupInfo>,
        pods: Vec<PodRef>,
        scheduled: Vec<PodRef>,
        profile: Option<&str>,
    ) -> Result<(), UnknownProfile> {
        let Some(first) = pods.first() else {
            return Ok(());
        };
        let fw = self.scheduler.profile_for(profile, first)?;
        let info = PodGroupCycleInfo {
            group: group.clone(),
            pods,
            scheduled,
        };
        let name = group.key.name.clone();
        let record = |this: &mut Self, pod: &PodRef, node: Option<Arc<str>>, reason: String| {
            this.push(pod, node, reason, Some(name.clone()));
        };
        if let Some(s) = held_by_pre_enqueue(&fw, &info) {
            let e = s.message();
            for p in &info.pods {
                record(self, p, None, e.clone());
            }
            self.groups.push(SimulatedGroup {
                group,
                fits: false,
                placed: 0,
                message: e,
            });
            return Ok(());
        }
        if let Err(e) = validate_group_cycle(
            &info,
            &self.scheduler.shared.profiles,
            self.scheduler.shared.pod_group_preemption_policy,
        ) {
            for p in &info.pods {
                record(self, p, None, e.clone());
            }
            self.groups.push(SimulatedGroup {
                group,
                fits: false,
                placed: 0,
                message: e,
            });
            return Ok(());
        }
        let nominated = self.nominated.clone();
        let mut snapshot = self.snapshot.clone();
        let (result, _) = run_group(&fw, &info, &nominated, &mut self.alg, &mut snapshot).await;
        self.snapshot = snapshot;
        let fits = result.status.is_success();
        let message = if fits {
            String::new()
        } else {
            result.status.message()
        };
        let reports = pod_reports(&self.snapshot, &info, result, &[], false);
        let mut placed = 0;
        for r in reports {
            match r.node.filter(|_| fits) {
                Some(node) => {
                    Arc::make_mut(&mut self.snapshot).assume_pod(Arc::new(r.pod.assumed_on(&node)));
                    *self.placed_on.entry(node.clone()).or_default() += 1;
                    placed += 1;
                    record(self, &r.pod, Some(node), String::new());
                }
                None => record(self, &r.pod, None, r.message),
            }
        }
        self.groups.push(SimulatedGroup {
            group,
            fits,
            placed,
            message,
        });
        Ok(())
    }
}

impl super::Simulation<'_> {
    fn push(
        &mut self,
        pod: &PodInfo,
        node: Option<Arc<str>>,
        reason: String,
        group: Option<Arc<str>>,
    ) {
        let reason = match &self.last_reason {
            Some(last) if **last == *reason => last.clone(),
            _ => {
                let r: Arc<str> = Arc::from(reason);
                self.last_reason = Some(r.clone());
                r
            }
        };
        self.out.push(super::SimulatedPod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node,
            reason,
            pod_group: group,
            unknown: false,
        });
    }

    /// Records `pod` as not placed, for `reason` (a pod whose PodGroup
    /// exists nowhere waits for it, as GangScheduling's PreEnqueue says).
    pub fn refuse(&mut self, pod: &PodInfo, reason: String) {
        self.push(pod, None, reason, None);
    }
}
