//! A PodGroup's way through the framework (kube-scheduler v1.37's
//! `scheduleOnePodGroup`), on the loop, serial like a pod's cycle:
//!
//! 1. the snapshot is brought up to date; the group's PodGroup is the one
//!    the scheduler holds now (none: the attempt fails, nothing written
//!    on the group);
//! 2. the group is validated ([`validate_group_cycle`]); a violation fails
//!    every pod with a `SchedulerError` and the PodGroup with the same;
//! 3. pods being deleted or already assumed are dropped from the attempt;
//!    with none left the attempt ends there;
//! 4. the group algorithm ([`GroupCycle`]) places the pods in the snapshot
//!    and undoes it; pods it did not reach share the group's status;
//! 5. when the group fits, berth's GroupPermit plugins see the whole
//!    placement; when it ends exactly `Unschedulable`, PodGroupPostFilter
//!    runs once (workload-aware preemption): on success the group waits
//!    for preemption, its pods nominated where it found room; its message
//!    is appended to the group's;
//! 6. each pod in order: a group error fails it with its own error (or the
//!    group's); a pod placed in a group that fits is assumed, Reserved and
//!    Permitted for real (GangScheduling's Permit holds all but the last
//!    pod of a gang) and goes to its binding cycle; a pod placed in a group
//!    that does not fit fails with `pod group is unschedulable, <group
//!    message>` (or, waiting on preemption, the group's message and its
//!    nomination); a pod that did not fit fails with its own message;
//! 7. the PodGroup's `PodGroupInitiallyScheduled` condition is written
//!    (never from `True` back to `False`), the group's metrics recorded,
//!    and the queue told the attempt is over.

use std::sync::Arc;

use tokio::time::Instant;

use super::pod_group_cycle::{
    GroupCycle, GroupResult, POD_GROUP_UNSCHEDULABLE, PodOutcome, validate_group_cycle,
};
use super::schedule_one::{Failure, Loop, failure_handler, record, spawn_binding};
use super::{FastRng, Shared};
use crate::cache::Snapshot;
use crate::framework::{
    Code, CycleState, EventType, Framework, NominatedPods, NominatingInfo, PodGroupCycleInfo,
    PodGroupSchedulingFunc, ProposedAssignment, QueuedPodGroupInfo, QueuedPodInfo, Status,
    TRACE_TARGET,
};
use crate::metrics::GroupResult as GroupMetricResult;
use crate::model::pod_group::{
    REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE, next_condition,
};
use crate::model::{PodGroupInfo, PodRef};

/// Re-runs the group's algorithm for PodGroupPostFilter plugins, on the
/// snapshot they changed, with a search state of its own.
pub(super) struct ReRun<'a> {
    pub(super) fw: &'a Framework,
    pub(super) info: &'a PodGroupCycleInfo,
    pub(super) nominated: &'a NominatedPods,
    pub(super) snapshot: Arc<Snapshot>,
    pub(super) percentage: i32,
    pub(super) seed: u64,
}

#[async_trait::async_trait]
impl PodGroupSchedulingFunc for ReRun<'_> {
    fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    async fn schedule(&self, snapshot: Arc<Snapshot>) -> (Vec<ProposedAssignment>, Status) {
        let mut algorithm = super::Algorithm::new(self.percentage, FastRng::new(self.seed));
        let group_state = CycleState::default();
        let cycle = GroupCycle {
            fw: self.fw,
            info: self.info,
            group_state: &group_state,
            nominated: self.nominated,
            dry_run: false,
            publish: None,
            sample: &|| false,
        };
        let mut snapshot = snapshot;
        let r = cycle.run(&mut algorithm, &mut snapshot).await;
        (r.assignments(), r.status)
    }
}

/// What PodGroupPostFilter left for the submission.
#[derive(Default)]
struct PostFilter {
    waiting_on_preemption: bool,
    nominations: Vec<(Arc<str>, Arc<str>)>,
    eviction: Option<crate::framework::Eviction>,
}

impl PostFilter {
    fn nomination(&self, pod: &PodRef) -> Option<NominatingInfo> {
        self.nominations
            .iter()
            .find(|(uid, _)| *uid == pod.uid)
            .map(|(_, node)| NominatingInfo::Override(Some(node.clone())))
    }
}

impl Loop {
    /// Schedules one PodGroup entity (see the module doc).
    pub(super) async fn schedule_one_pod_group(&mut self, g: QueuedPodGroupInfo) {
        let shared = self.shared.clone();
        let start = Instant::now();
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "pod_group_cycle",
            group = %g.key,
            pods = g.pods.len(),
            attempt = g.attempts,
        );
        let _enter = span.enter();
        shared.handle.set_snapshot(Snapshot::empty());
        shared
            .cache
            .lock()
            .update_snapshot(Arc::make_mut(&mut self.snapshot));
        shared.handle.set_snapshot(self.snapshot.clone());
        drop(_enter);

        let state = shared.pod_groups.as_ref().and_then(|m| m.get(&g.key));
        let Some(pod_group) = state.as_ref().and_then(|s| s.pod_group.clone()) else {
            let err = format!("podgroup.scheduling.k8s.io {:?} not found", &*g.key.name);
            return fail_before(&shared, g, None, err, start).await;
        };
        let scheduled = state.map(|s| s.scheduled_pods()).unwrap_or_default();
        let mut info = PodGroupCycleInfo {
            group: pod_group.clone(),
            pods: g.pods.iter().map(|q| q.pod.clone()).collect(),
            scheduled,
        };
        if let Err(e) =
            validate_group_cycle(&info, &shared.profiles, shared.pod_group_preemption_policy)
        {
            return fail_before(&shared, g, Some(pod_group), e, start).await;
        }
        let fw = shared
            .profiles
            .get(&info.pods[0].scheduler_name)
            .cloned()
            .expect("validated");

        // Pods being deleted or assumed already are not tried again.
        let mut queued: Vec<QueuedPodInfo> = Vec::with_capacity(g.pods.len());
        for q in &g.pods {
            if q.pod.terminating {
                record(
                    &fw,
                    &q.pod,
                    EventType::Warning,
                    "FailedScheduling",
                    "Scheduling",
                    &format!("skip schedule deleting pod: {}", q.pod.key()),
                );
                shared.queue.done(&q.pod.uid);
            } else if shared.cache.lock().is_assumed(&q.pod.uid) {
                shared.queue.done(&q.pod.uid);
            } else {
                queued.push(q.clone());
            }
        }
        if queued.is_empty() {
            end_attempt(&shared, g, &Status::success());
            return;
        }
        info.pods = queued.iter().map(|q| q.pod.clone()).collect();

        let nominated = shared.handle.nominated_pods();
        let group_state = CycleState::default();
        let prom = shared.prom.clone();
        let sample = move || prom.sample_cycle();
        let cycle = GroupCycle {
            fw: &fw,
            info: &info,
            group_state: &group_state,
            nominated: &nominated,
            dry_run: false,
            publish: Some(&shared.handle),
            sample: &sample,
        };
        let mut result = cycle.run(&mut self.algorithm, &mut self.snapshot).await;
        if let Some(m) = shared.prom.pod_groups() {
            m.algorithm_duration.observe_duration(start.elapsed());
        }

        // berth's GroupPermit sees the whole placement once. Its rejection
        // is not for want of room: no PodGroupPostFilter follows it.
        let mut permit_rejected = false;
        if result.status.is_success() && fw.has_group_permit_plugins() {
            let placement = result.assignments();
            let s = fw.run_group_permit(&group_state, &info, &placement).await;
            if !s.is_success() {
                permit_rejected = true;
                result.status = s;
            }
        }

        let mut post = PostFilter::default();
        if result.status.code() == Code::Unschedulable
            && !permit_rejected
            && fw.has_pod_group_post_filter_plugins()
        {
            let rerun = ReRun {
                fw: &fw,
                info: &info,
                nominated: &nominated,
                snapshot: self.snapshot.clone(),
                percentage: shared.percentage_of_nodes_to_score,
                seed: u64::from(g.attempts),
            };
            let attempt = result.attempt();
            let (r, s) = fw
                .run_pod_group_post_filter(&group_state, &info, &attempt, &rerun)
                .await;
            if let Some(m) = shared.prom.pod_groups() {
                m.preemption_attempt(s.code().as_str());
                if let Some(r) = r.as_ref().filter(|r| !r.victims.is_empty()) {
                    m.preemption_victims.observe(r.victims.len() as u64);
                    m.workload_disruptions.observe(r.units as u64);
                }
            }
            if s.is_success() {
                post.waiting_on_preemption = true;
                if let Some(r) = r {
                    post.nominations = r.nominations;
                    post.eviction = r.eviction;
                }
            }
            if s.is_error() {
                result.status = s;
            } else {
                result.status.push_reason(s.message());
            }
        }
        submit(&shared, &fw, g, queued, &info, result, post, start).await;
    }
}

/// Fails every pod of the group before its cycle ran (a snapshot or
/// validation error): `SchedulerError` for each pod (nomination cleared)
/// and, when the PodGroup is known, for the group.
async fn fail_before(
    shared: &Arc<Shared>,
    g: QueuedPodGroupInfo,
    group: Option<Arc<PodGroupInfo>>,
    err: String,
    start: Instant,
) {
    tracing::error!(group = %g.key, "error scheduling pod group: {err}");
    for q in &g.pods {
        match shared.profiles.get(&q.pod.scheduler_name).cloned() {
            Some(fw) => {
                failure_handler(
                    shared,
                    &fw,
                    q.clone(),
                    Failure::from_status(Status::error(err.clone())),
                    start,
                )
                .await
            }
            None => {
                // No profile to speak for the pod: it goes back as failed.
                let mut q = q.clone();
                q.unschedulable_plugins.clear();
                if let Err(e) = shared.queue.add_unschedulable_if_not_present(q) {
                    tracing::error!(error = %e, "requeue failed");
                }
            }
        }
    }
    if let Some(group) = group {
        write_condition(shared, &group, false, REASON_SCHEDULER_ERROR, &err).await;
    }
    end_attempt(shared, g, &Status::error(err));
}

/// Steps 6 and 7 of the module doc.
#[allow(clippy::too_many_arguments)]
async fn submit(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    g: QueuedPodGroupInfo,
    queued: Vec<QueuedPodInfo>,
    info: &PodGroupCycleInfo,
    mut result: GroupResult,
    post: PostFilter,
    start: Instant,
) {
    let group_status = result.status.clone();
    let group_message = group_status.message();
    // The group point that refused the group, if one did: the queue's
    // hints for the group (with its pods' rejectors) are its.
    let group_plugin = group_status.plugin();
    let mut scheduled = 0usize;
    // The algorithm went through the queued pods in order: the i-th queued
    // pod is the i-th result when it was reached (no search per pod, which
    // made a gang's submission quadratic in its size).
    for (i, q) in queued.into_iter().enumerate() {
        let at = match result.pods.get(i) {
            Some(r) if r.pod.uid == q.pod.uid => Some(i),
            _ => result.pods.iter().position(|r| r.pod.uid == q.pod.uid),
        };
        // A pod's attempt started its algorithm's duration ago.
        let pod_start = at
            .and_then(|i| Instant::now().checked_sub(result.pods[i].took))
            .unwrap_or(start);
        let pod_result = at.map(|i| &mut result.pods[i]);
        let failure = match (group_status.code(), pod_result) {
            // Not reached by the algorithm: the group's status is its own.
            (_, None) => {
                if group_status.is_rejected() {
                    let mut f = Failure::from_status(group_status.clone());
                    f.nominating = post.nomination(&q.pod).or(f.nominating);
                    f
                } else {
                    Failure::from_status(group_status.clone())
                }
            }
            (code, Some(r)) if code != Code::Success && !group_status.is_rejected() => {
                // A group error: the pod's own error if it had one.
                if r.outcome.is_error() {
                    Failure::from_status(Status::error(r.outcome.message()))
                } else {
                    Failure::from_status(group_status.clone())
                }
            }
            (Code::Success, Some(r)) if matches!(r.outcome, PodOutcome::Placed(_)) => {
                let PodOutcome::Placed(found) = &r.outcome else {
                    unreachable!("matched above")
                };
                let found = found.clone();
                let placed_as = r.assumed.take();
                let trial_node = r.trial_node.take();
                let mut state = std::mem::take(&mut r.state);
                let pod_span = tracing::info_span!(
                    target: TRACE_TARGET,
                    "scheduling_cycle",
                    pod = %q.pod.key(),
                    group = %g.key,
                    result = tracing::field::Empty,
                    node = tracing::field::Empty,
                );
                let attempt = async {
                    // `self` is not at hand: the loop's Reserve and Permit,
                    // as a pod alone gets them.
                    reserve_and_permit(
                        shared, fw, &mut state, &q.pod, &found, placed_as, trial_node,
                    )
                    .await
                };
                match attempt.await {
                    Ok(assumed) => {
                        scheduled += 1;
                        spawn_binding(
                            shared,
                            fw.clone(),
                            state,
                            q,
                            assumed,
                            found,
                            pod_start,
                            pod_span,
                        );
                        continue;
                    }
                    Err(f) => f,
                }
            }
            (_, Some(r)) if matches!(r.outcome, PodOutcome::Placed(_)) => {
                // Placed, but the group does not fit.
                if post.waiting_on_preemption {
                    let mut f = Failure::from_status(group_status.clone());
                    f.nominating = post.nomination(&q.pod).or(f.nominating);
                    f
                } else {
                    let mut s = Status::with_reasons(
                        Code::Unschedulable,
                        [POD_GROUP_UNSCHEDULABLE.into(), group_message.clone().into()],
                    );
                    if let Some(p) = group_plugin {
                        s = s.with_plugin(p);
                    }
                    Failure::from_status(s)
                }
            }
            (_, Some(r)) => {
                // The pod itself did not fit (its FitError, no PostFilter).
                let mut f = pod_failure(&r.outcome);
                if post.waiting_on_preemption
                    && let Some(n) = post.nomination(&q.pod)
                {
                    f.nominating = Some(n);
                }
                f
            }
        };
        failure_handler(shared, fw, q, failure, pod_start).await;
    }
    if let Some(eviction) = post.eviction
        && let Err(e) = eviction.run().await
    {
        tracing::warn!(group = %g.key, error = %e, "pod group preemption failed");
    }
    let (status, reason, metric) = if group_status.is_success() {
        (true, REASON_SCHEDULED, GroupMetricResult::Scheduled)
    } else if group_status.is_rejected() {
        let m = if post.waiting_on_preemption {
            GroupMetricResult::WaitingOnPreemption
        } else {
            GroupMetricResult::Unschedulable
        };
        (false, REASON_UNSCHEDULABLE, m)
    } else {
        (false, REASON_SCHEDULER_ERROR, GroupMetricResult::Error)
    };
    // Logged when it changes; the same failure again is counted and
    // summarized (see `repeats`).
    let repeated =
        !group_status.is_success() && g.last_failure.as_deref() == Some(group_message.as_str());
    match metric {
        GroupMetricResult::Scheduled => {
            tracing::info!(group = %g.key, scheduled_pods = scheduled, unschedulable_pods = g.pods.len() - scheduled, "Successfully scheduled a pod group")
        }
        _ if repeated => {
            shared.repeats.group();
            tracing::debug!(group = %g.key, attempts = g.attempts, "pod group failed as before: {group_message}");
        }
        GroupMetricResult::WaitingOnPreemption => {
            tracing::info!(group = %g.key, "Pod group is waiting for preemption: {group_message}")
        }
        GroupMetricResult::Unschedulable => {
            tracing::info!(group = %g.key, "Unable to schedule a pod group: {group_message}")
        }
        GroupMetricResult::Error => {
            tracing::error!(group = %g.key, "Error scheduling pod group: {group_message}")
        }
    }
    write_condition(shared, &info.group, status, reason, &group_message).await;
    if let Some(m) = shared.prom.pod_groups() {
        m.attempt(fw.profile_name(), metric, start.elapsed());
    }
    end_attempt(shared, g, &group_status);
}

/// Tells the queue the group's attempt is over, with what the queue needs
/// from it: the group point that refused it (its hints), the plugin whose
/// error ended it, its message.
fn end_attempt(shared: &Shared, mut g: QueuedPodGroupInfo, status: &Status) {
    g.unschedulable_plugins.clear();
    g.pending_plugins.clear();
    g.error_plugin = None;
    if status.is_success() {
        g.last_failure = None;
    } else {
        g.last_failure = Some(Arc::from(status.message()));
        if let Some(p) = status.plugin() {
            if status.is_rejected() {
                g.unschedulable_plugins.insert(p);
            } else {
                g.error_plugin = Some(p);
            }
        }
    }
    shared.queue.add_attempted_pod_group(g, status);
}

/// A pod's own failure in the group cycle, worded as for a pod alone
/// (without PostFilter: its FitError has no preemption tail).
fn pod_failure(outcome: &PodOutcome) -> Failure {
    match outcome {
        PodOutcome::Failed(super::ScheduleError::Fit(fit)) => Failure {
            message: fit.to_string(),
            status: Status::code_only(Code::Unschedulable),
            diagnosis: Some(fit.diagnosis.clone()),
            nominating: Some(NominatingInfo::Override(None)),
            eviction: None,
        },
        PodOutcome::Failed(super::ScheduleError::NoNodesAvailable) => {
            Failure::from_status(Status::unresolvable(super::NO_NODES_AVAILABLE))
        }
        PodOutcome::Failed(super::ScheduleError::Error(s)) => Failure::from_status(s.clone()),
        PodOutcome::ReserveFailed(node, s) if s.is_rejected() => {
            Failure::rejected_on(node, s.clone())
        }
        PodOutcome::ReserveFailed(_, s) => Failure::from_status(s.clone()),
        PodOutcome::Placed(_) => Failure::from_status(Status::success()),
    }
}

/// Assume, Reserve, Permit for a pod of a group that fits: the loop's own
/// steps for a pod alone.
async fn reserve_and_permit(
    shared: &Arc<Shared>,
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodRef,
    found: &super::ScheduleResult,
    placed_as: Option<PodRef>,
    trial_node: Option<crate::cache::TrialNode>,
) -> Result<PodRef, Failure> {
    super::schedule_one::reserve_and_permit(shared, fw, state, pod, found, placed_as, trial_node)
        .await
}

/// Writes the group's condition when it changes (never `True` back to
/// `False`); a failed write is logged and scheduling goes on.
async fn write_condition(
    shared: &Shared,
    group: &PodGroupInfo,
    status: bool,
    reason: &str,
    message: &str,
) {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now()).unwrap_or_default(),
    );
    let Some(condition) = next_condition(&group.object, status, reason, message, now) else {
        return;
    };
    if let Err(e) = shared
        .cluster
        .set_pod_group_condition(group, condition)
        .await
    {
        tracing::warn!(group = %group.key, error = %e, "Failed to update PodGroup status");
    }
}
