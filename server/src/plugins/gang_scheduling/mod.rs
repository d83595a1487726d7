//! GangScheduling: PodGroups' `minCount` (KEP-4671), in the default
//! profile with `GenericWorkload` on, as kube-scheduler v1.37 has it.
//!
//! A gang's pods are scheduled together: `minCount` of them must be
//! scheduled (assumed or bound) at the same time, or none is. The group
//! cycle places the pods; this plugin says when a placement is enough:
//!
//! * PreEnqueue: a member whose PodGroup is not known waits for it; a gang
//!   member waits until at least `minCount` of the gang's pods are known
//!   (queued, assumed or bound). Basic groups pass.
//! * PlacementFeasible (in the group cycle, before the first pod and after
//!   each): `Unschedulable` once `minCount` can no longer be reached,
//!   `Wait` while it is not reached yet, `Success` once it is (a basic
//!   group counts as `minCount` 1).
//! * Permit (each pod, for real, as the group's pods are assumed one by
//!   one): below `minCount` scheduled pods, the pod waits (5 minutes at
//!   most) and the group's pending pods are activated; the pod that
//!   reaches `minCount` allows every waiting assumed pod of the gang.
//!
//! Events: a pod of the same group added (pending or bound), the PodGroup
//! added, or its `minCount` lowered.
//!
//! Coscheduling (labels and annotations, Permit only) is a different
//! plugin, not in the default profile; a pod naming a PodGroup is a member
//! of that group whatever labels it carries (see docs/gang-scheduling.md).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache::PodGroupManager;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, EventObject, EventResource,
    Handle, NoArgs, PermitPlugin, PlacedPod, PlacementFeasiblePlugin, PlacementProgress, Plugin,
    PodGroupCycleInfo, PreEnqueuePlugin, QueueingHint, Status,
};
use crate::model::{GroupKey, GroupPolicy, PodGroupInfo, PodInfo, PodRef};
use crate::plugins::names::GANG_SCHEDULING;

/// How long a gang member waits at Permit for the rest of its gang.
pub const PERMIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

pub use crate::model::pod_group::{WAITING_FOR_MIN_COUNT_PODS, waiting_for_pod_group};
/// Waiting at Permit for enough pods of the gang to be scheduled.
pub const WAITING_FOR_MIN_COUNT_SCHEDULED: &str =
    "waiting for minCount pods from a gang to be scheduled";

/// The GangScheduling plugin.
pub struct GangScheduling {
    handle: Handle,
    groups: Arc<PodGroupManager>,
}

impl GangScheduling {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs, handle: &Handle) -> Self {
        Self {
            handle: handle.clone(),
            groups: handle.pod_groups().clone(),
        }
    }
}

fn key_of(pod: &PodInfo) -> Option<GroupKey> {
    crate::cache::group_key_of(pod)
}

fn pod_group_of(
    o: Option<&EventObject>,
) -> Option<&Arc<k8s_openapi::api::scheduling::v1beta1::PodGroup>> {
    match o?.as_object()? {
        crate::cache::KubeObject::PodGroup(pg) => Some(pg),
        _ => None,
    }
}

fn object_key(pg: &k8s_openapi::api::scheduling::v1beta1::PodGroup) -> GroupKey {
    GroupKey::new(
        pg.metadata.namespace.as_deref().unwrap_or("default"),
        pg.metadata.name.as_deref().unwrap_or(""),
    )
}

fn hint(queue: bool) -> Result<QueueingHint, String> {
    Ok(if queue {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

/// A pod of the same group was added (pending or bound).
fn after_pod_added(
    pod: &PodInfo,
    _: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let added = new.and_then(|n| n.as_pod()).and_then(key_of);
    hint(key_of(pod).is_some_and(|k| Some(k) == added))
}

/// The pod's PodGroup was added.
fn after_pod_group_added(
    pod: &PodInfo,
    _: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let added = pod_group_of(new).map(|pg| object_key(pg));
    hint(key_of(pod).is_some_and(|k| Some(k) == added))
}

/// The pod's PodGroup changed: only a lower `minCount` may help (a change
/// that is not gang to gang is unexpected and requeues, as upstream).
fn after_pod_group_updated(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let (Some(old), Some(new)) = (pod_group_of(old), pod_group_of(new)) else {
        return Ok(QueueingHint::Queue);
    };
    if key_of(pod) != Some(object_key(new)) {
        return hint(false);
    }
    match (
        &old.spec.scheduling_policy.gang,
        &new.spec.scheduling_policy.gang,
    ) {
        (Some(o), Some(n)) => hint(n.min_count < o.min_count),
        _ => hint(true),
    }
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        GANG_SCHEDULING
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        // spec.schedulingGroup is immutable: no Pod/Update.
        Some(vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::UnscheduledPod, ActionType::ADD),
                after_pod_added,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD),
                after_pod_added,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PodGroup, ActionType::ADD),
                after_pod_group_added,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PodGroup, ActionType::UPDATE),
                after_pod_group_updated,
            ),
        ])
    }

    extension_points!(pre_enqueue, permit, placement_feasible);
}

impl PreEnqueuePlugin for GangScheduling {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let Some(key) = key_of(pod) else {
            return Status::success();
        };
        self.groups.with(&key, |state| {
            let Some(pg) = state.and_then(|s| s.pod_group.as_ref()) else {
                return Status::unresolvable(waiting_for_pod_group(&key.name));
            };
            quorum_status(pg, state.map_or(0, |s| s.all_pods_count()))
        })
    }
}

/// PreEnqueue's verdict on a gang of which `known` pods exist (queued,
/// assumed or bound): it waits below `minCount`; a basic group passes.
/// Dry runs and simulations ask it of the pods they are given.
pub fn quorum_status(group: &PodGroupInfo, known: usize) -> Status {
    match group.policy {
        GroupPolicy::Gang { min_count } if known < min_count as usize => {
            Status::unresolvable(WAITING_FOR_MIN_COUNT_PODS)
        }
        _ => Status::success(),
    }
}

#[async_trait]
impl PermitPlugin for GangScheduling {
    async fn permit(&self, _: &CycleState, pod: &PodInfo, _: &str) -> (Status, Duration) {
        let Some(key) = key_of(pod) else {
            return (Status::success(), Duration::ZERO);
        };
        // Read under the group manager's lock, copying only what is acted
        // on after it (a gang's members are many; this runs once per pod).
        enum Step {
            Missing,
            Allow,
            Wait(Option<PodRef>),
            Release(Vec<Arc<str>>),
        }
        let step = self.groups.with(&key, |state| {
            let Some(state) = state else {
                return Step::Missing;
            };
            let Some(pg) = state.pod_group.as_ref() else {
                return Step::Missing;
            };
            let GroupPolicy::Gang { min_count } = pg.policy else {
                return Step::Allow;
            };
            if state.scheduled_pods_count() < min_count as usize {
                // Upstream activates every pending member; the queue holds
                // a gang's members as one entity (GangScheduling runs only
                // with GenericWorkload, as group queueing does), which
                // activating any member moves whole: the first stands for
                // all, with no copy of the others (this runs once per pod
                // of a gang).
                Step::Wait(state.first_unscheduled())
            } else {
                Step::Release(state.assumed_uids())
            }
        });
        match step {
            Step::Missing => (
                Status::error(format!(
                    "failed to get podGroup {key}: podgroup.scheduling.k8s.io {:?} not found",
                    &*key.name
                )),
                Duration::ZERO,
            ),
            Step::Allow => (Status::success(), Duration::ZERO),
            Step::Wait(first_pending) => {
                // The rest of the gang may be waiting in the queue for this
                // pod: let them try now.
                if let Some(p) = first_pending {
                    self.handle.activate(std::slice::from_ref(&p));
                }
                tracing::debug!(pod = %pod.key(), group = %key, "quorum not met for a gang; waiting at Permit");
                (
                    Status::new(Code::Wait, WAITING_FOR_MIN_COUNT_SCHEDULED),
                    PERMIT_TIMEOUT,
                )
            }
            Step::Release(assumed) => {
                let waiting = self.handle.waiting_pods();
                for uid in &assumed {
                    if let Some(w) = waiting.get(uid) {
                        w.allow(GANG_SCHEDULING);
                    }
                }
                (Status::success(), Duration::ZERO)
            }
        }
    }
}

/// `minCount` against the placement's progress.
pub fn placement_status(group: &PodGroupInfo, progress: PlacementProgress) -> Status {
    let min = group.policy.min_count() as usize;
    let PlacementProgress {
        remaining,
        scheduled,
    } = progress;
    if remaining + scheduled < min {
        return Status::unschedulable(format!(
            "minCount ({min}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
        ));
    }
    if scheduled < min {
        return Status::new(
            Code::Wait,
            format!(
                "minCount ({min}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining"
            ),
        );
    }
    Status::success()
}

#[async_trait]
impl PlacementFeasiblePlugin for GangScheduling {
    async fn placement_feasible(
        &self,
        _: &CycleState,
        group: &PodGroupCycleInfo,
        progress: PlacementProgress,
        _: &[PlacedPod],
    ) -> Status {
        placement_status(&group.group, progress)
    }
}

#[cfg(test)]
mod tests;
