//! A PodGroup's scheduling algorithm (kube-scheduler v1.37's
//! `podGroupSchedulingDefaultAlgorithm`) and the group's validation: pure
//! work over a snapshot, with no write to the cache, the queue or the
//! cluster, so that the loop and dry runs run the same code.
//!
//! The algorithm, all or nothing, placements assumed as a whole in the
//! snapshot and rolled back as a whole:
//!
//! 1. The group status starts `Unschedulable` (`pod group is
//!    unschedulable`). PlacementFeasible judges the start (pods already
//!    scheduled, pods to place): an error stops (`failed to evaluate
//!    placement feasibility: ...`), so does `Unschedulable` (with the
//!    `pod group is unschedulable` error first).
//! 2. Each queued pod in order gets the pod algorithm (PreFilter, Filter
//!    with nominated pods, Score; never PostFilter), a fresh cycle state
//!    each; a pod that fits is assumed in the snapshot and Reserved, so the
//!    next pods see it. A pod that fails with an error fails the group
//!    (`failed to schedule other pod from a pod group: ...`). After each
//!    pod PlacementFeasible judges again: its answer becomes the group's;
//!    `Unschedulable` stops the cycle (the pods after it are not tried).
//! 3. A final `Wait` becomes `Unschedulable` (error first); anything but
//!    `Success` undoes the placements at once; `Success` with no pod placed
//!    is `Unschedulable` (`pod group is unschedulable`).
//! 4. At the end every placement is undone (Unreserve, then the pod leaves
//!    the snapshot), whatever the outcome: the real assumption of the pods
//!    comes after, pod by pod, in the loop. Each placement keeps the node
//!    the trial built ([`TrialNode`]); the cache takes it over when its own
//!    node did not change meanwhile, so the next cycle's snapshot holds the
//!    node the trial's later pods judged and batching keeps their verdicts
//!    (a copy of the cache's would be judged again).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::algorithm::{Algorithm, ScheduleError, ScheduleResult};
use crate::cache::{Snapshot, TrialNode};
use crate::framework::{
    Code, CycleState, Framework, GroupAttempt, Handle, NominatedPods, PlacedPod, PlacementProgress,
    PodAttempt, PodGroupCycleInfo, ProposedAssignment, Status,
};
use crate::model::{PodInfo, PodRef, PreemptionPolicy};

/// The error upstream attaches to a group's `Unschedulable` status.
pub const POD_GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// What the algorithm found for one pod.
#[derive(Debug)]
pub enum PodOutcome {
    /// A node fits; the pod was assumed there (in the snapshot only).
    Placed(ScheduleResult),
    /// No node fits, or a plugin failed.
    Failed(ScheduleError),
    /// Its Reserve (in the snapshot) failed on the node chosen.
    ReserveFailed(Arc<str>, Status),
}

impl PodOutcome {
    /// The pod's status code: success, rejected, or error.
    pub fn code(&self) -> Code {
        match self {
            Self::Placed(_) => Code::Success,
            Self::Failed(ScheduleError::Fit(_)) => Code::Unschedulable,
            Self::Failed(ScheduleError::NoNodesAvailable) => Code::UnschedulableAndUnresolvable,
            Self::Failed(ScheduleError::Error(s)) => s.code(),
            Self::ReserveFailed(_, s) => s.code(),
        }
    }

    /// Whether the pod failed with an error (not a rejection).
    pub fn is_error(&self) -> bool {
        !matches!(
            self.code(),
            Code::Success | Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The pod's message, as its FailedScheduling event words it.
    pub fn message(&self) -> String {
        match self {
            Self::Placed(_) => String::new(),
            Self::Failed(ScheduleError::Fit(f)) => f.to_string(),
            Self::Failed(ScheduleError::NoNodesAvailable) => {
                super::algorithm::NO_NODES_AVAILABLE.to_string()
            }
            Self::Failed(ScheduleError::Error(s)) => s.message(),
            Self::ReserveFailed(_, s) => s.message(),
        }
    }
}

/// One pod's result in a group cycle.
#[derive(Debug)]
pub struct PodResult {
    /// The pod.
    pub pod: PodRef,
    /// What the algorithm found.
    pub outcome: PodOutcome,
    /// Its cycle state (PreFilter's data, kept for the real Reserve and
    /// Permit and for the binding cycle).
    pub state: CycleState,
    /// How long its algorithm took.
    pub took: std::time::Duration,
    /// The pod as placed (its node set), when it was: what the snapshot
    /// held, and what the real assumption takes over (no copy made twice).
    pub assumed: Option<PodRef>,
    /// Its node as the trial left it, which the real assumption takes over
    /// when nothing changed on the node meanwhile.
    pub trial_node: Option<TrialNode>,
}

/// The group's outcome.
#[derive(Debug)]
pub struct GroupResult {
    /// Success (the placement may go ahead), a rejection or an error.
    pub status: Status,
    /// The pods evaluated, in order (the algorithm may stop early).
    pub pods: Vec<PodResult>,
}

impl GroupResult {
    /// The pods placed, as proposed assignments (their states cloned).
    pub fn assignments(&self) -> Vec<ProposedAssignment> {
        self.pods
            .iter()
            .filter_map(|r| match &r.outcome {
                PodOutcome::Placed(s) => Some(ProposedAssignment {
                    pod: r.pod.clone(),
                    node: s.suggested_host.clone(),
                    state: r.state.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

impl GroupResult {
    /// What the cycle found, for PodGroupPostFilter.
    pub fn attempt(&self) -> GroupAttempt {
        GroupAttempt {
            status: self.status.clone(),
            pods: self
                .pods
                .iter()
                .map(|r| PodAttempt {
                    pod: r.pod.clone(),
                    node: match &r.outcome {
                        PodOutcome::Placed(s) => Some(s.suggested_host.clone()),
                        _ => None,
                    },
                    message: r.outcome.message(),
                })
                .collect(),
        }
    }
}

/// What a group cycle runs with.
pub struct GroupCycle<'a> {
    /// The profile.
    pub fw: &'a Framework,
    /// The group, its pods and those already scheduled.
    pub info: &'a PodGroupCycleInfo,
    /// The group cycle's own state (PlacementFeasible's context).
    pub group_state: &'a CycleState,
    /// Nominated pods.
    pub nominated: &'a NominatedPods,
    /// A what-if evaluation: plugins must not write.
    pub dry_run: bool,
    /// Where the cycle's snapshot is published to plugins while it
    /// changes (the loop's handle; `None` for dry runs).
    pub publish: Option<&'a Handle>,
    /// Samples plugin metrics for a pod's cycle.
    pub sample: &'a (dyn Fn() -> bool + Sync),
}

/// A placement to undo.
struct Revert {
    index: usize,
    node: Arc<str>,
    assumed: PodRef,
}

/// `code` with upstream's group error before `s`'s reasons; the plugin
/// that gave `s` stays named (the queue's hints for the group are its).
fn with_error_first(code: Code, s: &Status) -> Status {
    let out = Status::with_reasons(
        code,
        std::iter::once(POD_GROUP_UNSCHEDULABLE.into()).chain(s.reasons().iter().cloned()),
    );
    match s.plugin() {
        Some(p) => out.with_plugin(p),
        None => out,
    }
}

impl GroupCycle<'_> {
    fn set_snapshot(&self, snapshot: &mut Arc<Snapshot>, f: impl FnOnce(&mut Snapshot)) {
        // Let go of the published reference so the change happens in place.
        if let Some(h) = self.publish {
            h.set_snapshot(Snapshot::empty());
        }
        f(Arc::make_mut(snapshot));
        if let Some(h) = self.publish {
            h.set_snapshot(snapshot.clone());
        }
    }

    /// Runs the algorithm (see the module doc) on `snapshot`, which is as
    /// it was when it returns.
    pub async fn run(
        &self,
        algorithm: &mut Algorithm,
        snapshot: &mut Arc<Snapshot>,
    ) -> GroupResult {
        let mut reverts: Vec<Revert> = Vec::new();
        let mut result = self.place(algorithm, snapshot, &mut reverts).await;
        self.revert(snapshot, &mut result, &mut reverts).await;
        result
    }

    async fn revert(
        &self,
        snapshot: &mut Arc<Snapshot>,
        result: &mut GroupResult,
        reverts: &mut Vec<Revert>,
    ) {
        while let Some(r) = reverts.pop() {
            let pr = &mut result.pods[r.index];
            self.fw.run_unreserve(&pr.state, &r.assumed, &r.node).await;
            self.set_snapshot(snapshot, |s| {
                s.undo_trial_pod(&r.node, &pr.pod.uid, pr.trial_node.as_ref());
            });
        }
    }

    async fn feasible(&self, progress: PlacementProgress, placed: &[PlacedPod]) -> Status {
        self.fw
            .run_placement_feasible(self.group_state, self.info, progress, placed)
            .await
    }

    async fn place(
        &self,
        algorithm: &mut Algorithm,
        snapshot: &mut Arc<Snapshot>,
        reverts: &mut Vec<Revert>,
    ) -> GroupResult {
        let mut out = GroupResult {
            status: Status::new(Code::Unschedulable, POD_GROUP_UNSCHEDULABLE),
            pods: Vec::with_capacity(self.info.pods.len()),
        };
        let mut progress = PlacementProgress {
            remaining: self.info.pods.len(),
            scheduled: self.info.scheduled.len(),
        };
        let mut placed_pods: Vec<PlacedPod> = Vec::new();
        let s = self.feasible(progress, &placed_pods).await;
        match s.code() {
            Code::Success | Code::Wait => out.status = s,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                out.status = with_error_first(Code::Unschedulable, &s);
                return out;
            }
            _ => {
                out.status = Status::error(format!(
                    "failed to evaluate placement feasibility: {}",
                    s.message()
                ));
                return out;
            }
        }
        let mut any_scheduled = false;
        for pod in &self.info.pods {
            let started = Instant::now();
            let mut state = CycleState::with_snapshot(snapshot.clone());
            state.dry_run = self.dry_run;
            state.record_plugin_metrics = (self.sample)();
            let r = algorithm
                .schedule_pod(self.fw, &mut state, pod, snapshot, self.nominated)
                .await;
            state.release_snapshot();
            let mut placed_as = None;
            let mut trial_node = None;
            let outcome = match r {
                Ok(found) => {
                    let node = found.suggested_host.clone();
                    let assumed = Arc::new(pod.assumed_on(&node));
                    self.set_snapshot(snapshot, |s| {
                        trial_node = s.assume_trial_pod(assumed.clone());
                    });
                    state.set_snapshot(snapshot.clone());
                    let s = self.fw.run_reserve(&mut state, &assumed, &node).await;
                    state.release_snapshot();
                    if s.is_success() {
                        placed_pods.push(PlacedPod {
                            pod: pod.clone(),
                            node: node.clone(),
                        });
                        reverts.push(Revert {
                            index: out.pods.len(),
                            node,
                            assumed: assumed.clone(),
                        });
                        placed_as = Some(assumed);
                        PodOutcome::Placed(found)
                    } else {
                        self.fw.run_unreserve(&state, &assumed, &node).await;
                        self.set_snapshot(snapshot, |sn| {
                            sn.undo_trial_pod(&node, &pod.uid, trial_node.as_ref());
                        });
                        trial_node = None;
                        PodOutcome::ReserveFailed(node, s)
                    }
                }
                Err(e) => PodOutcome::Failed(e),
            };
            let placed = matches!(outcome, PodOutcome::Placed(_));
            let error = outcome.is_error().then(|| outcome.message());
            out.pods.push(PodResult {
                pod: pod.clone(),
                outcome,
                state,
                took: started.elapsed(),
                assumed: placed_as,
                trial_node,
            });
            if let Some(msg) = error {
                out.status = Status::error(format!(
                    "failed to schedule other pod from a pod group: {msg}"
                ));
                return out;
            }
            progress.remaining -= 1;
            if placed {
                progress.scheduled += 1;
            }
            let s = self.feasible(progress, &placed_pods).await;
            if !matches!(
                s.code(),
                Code::Success
                    | Code::Wait
                    | Code::Unschedulable
                    | Code::UnschedulableAndUnresolvable
            ) {
                out.status = Status::error(format!(
                    "failed to evaluate placement feasibility: {}",
                    s.message()
                ));
                return out;
            }
            let stop = s.is_rejected();
            out.status = s;
            if stop {
                break;
            }
            any_scheduled |= placed;
        }
        if out.status.is_wait() {
            out.status = with_error_first(Code::Unschedulable, &out.status);
        }
        if !out.status.is_success() {
            let mut result = GroupResult {
                status: std::mem::take(&mut out.status),
                pods: std::mem::take(&mut out.pods),
            };
            self.revert(snapshot, &mut result, reverts).await;
            return result;
        }
        if !any_scheduled {
            out.status = Status::new(Code::Unschedulable, POD_GROUP_UNSCHEDULABLE);
        }
        out
    }
}

/// Checks the group before its cycle (upstream's `validatePodGroup`):
/// every queued pod and every pod of the group already scheduled must
/// share the first queued pod's scheduler name, carry the PodGroup's
/// priority, and share a preemption policy (with the
/// `PodGroupPreemptionPolicy` gate: the group's); the scheduler name must
/// be a profile's. Returns the first violation, in upstream's words.
pub fn validate_group_cycle(
    info: &PodGroupCycleInfo,
    profiles: &HashMap<Arc<str>, Arc<Framework>>,
    group_preemption_policy: bool,
) -> Result<(), String> {
    let reference = info.pods.first();
    let scheduler: &str = reference.map_or("", |p| &p.scheduler_name);
    let first_policy = reference.map(|p| PreemptionPolicy::of_pod(p.preemption_never));
    let group = &info.group;
    let check = |p: &PodInfo| -> Result<(), String> {
        if &*p.scheduler_name != scheduler {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {:?} and {scheduler:?}",
                &*p.scheduler_name
            ));
        }
        if p.priority != group.priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {} and {}",
                p.priority, group.priority
            ));
        }
        let policy = PreemptionPolicy::of_pod(p.preemption_never);
        if group_preemption_policy {
            if policy != group.preemption_policy {
                return Err(format!(
                    "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy, got {} and {}",
                    policy.as_str(),
                    group.preemption_policy.as_str()
                ));
            }
        } else if let Some(first) = first_policy
            && policy != first
        {
            return Err(format!(
                "all pods in a single pod group should have the same preemption policy, got {} and {}",
                policy.as_str(),
                first.as_str()
            ));
        }
        Ok(())
    };
    for p in info.pods.iter().chain(&info.scheduled) {
        check(p)?;
    }
    if !profiles.contains_key(scheduler) {
        return Err(format!(
            "profile not found for scheduler name {scheduler:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "pod_group_cycle_tests.rs"]
mod tests;
