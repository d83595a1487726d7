//! VolumeRestrictions: volumes that cannot be shared.
//!
//! * Inline disks attached to one node at a time conflict with the same disk
//!   used by another pod on the node: a GCE PD (unless every user mounts it
//!   read-only), an AWS EBS volume (always), an ISCSI target with the same
//!   IQN and a Ceph RBD image with a common monitor, the same pool and image
//!   (unless every user mounts it read-only). "node(s) had no available
//!   disk", `Unschedulable`.
//! * A PersistentVolumeClaim with the `ReadWriteOncePod` access mode may be
//!   used by one pod in the whole cluster. PreFilter counts the pods already
//!   using the pod's RWOP claims; AddPod/RemovePod keep the count right for
//!   preemption, which can free the claim (`Unschedulable`).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Volume};

use crate::cache::{KubeObject, NodeInfo, pvc_key};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventResource, FilterPlugin,
    Handle, NoArgs, Plugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, QueueingHint,
    StateKey, Status,
};
use crate::model::PodInfo;
use crate::plugins::names::VOLUME_RESTRICTIONS;
use crate::plugins::volume_helpers::{claim_has_access_mode, not_found, pod_volumes};

/// The reason a node with a conflicting inline disk is rejected.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// The reason every node is rejected while a `ReadWriteOncePod` claim of
/// the pod is in use.
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// The access mode allowing one pod only.
const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

const PRE_FILTER_STATE_KEY: StateKey<PreFilterState> = StateKey::new("PreFilterVolumeRestrictions");

/// What PreFilter computed.
#[derive(Debug, Clone)]
struct PreFilterState {
    /// Names of the pod's claims with the ReadWriteOncePod access mode.
    rwop_claims: Arc<[String]>,
    /// How many references to those claims other pods hold.
    conflicting_refs: i64,
}

impl PreFilterState {
    /// References to the RWOP claims that `pod` holds (claims are compared
    /// by name, as upstream does).
    fn refs_of(&self, pod: &PodInfo) -> i64 {
        pod_volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter(|c| self.rwop_claims.contains(&c.claim_name))
            .count() as i64
    }
}

/// The VolumeRestrictions plugin.
pub struct VolumeRestrictions {
    handle: Handle,
}

impl VolumeRestrictions {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs, handle: &Handle) -> Self {
        Self {
            handle: handle.clone(),
        }
    }

    fn rwop_claims(&self, pod: &PodInfo) -> Result<Vec<String>, Status> {
        let mut names: Vec<String> = Vec::new();
        for v in pod_volumes(pod) {
            let Some(c) = &v.persistent_volume_claim else {
                continue;
            };
            let pvc: Arc<PersistentVolumeClaim> = self
                .handle
                .objects()
                .persistent_volume_claim(&pod.namespace, &c.claim_name)
                .ok_or_else(|| {
                    Status::unresolvable(not_found("persistentvolumeclaim", &c.claim_name))
                })?;
            if claim_has_access_mode(&pvc, READ_WRITE_ONCE_POD) && !names.contains(&c.claim_name) {
                names.push(c.claim_name.clone());
            }
        }
        Ok(names)
    }
}

/// Whether the volume is of a kind whose conflicts this plugin checks.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether `volume` conflicts with a volume of `other`.
fn is_volume_conflict(volume: &Volume, other: &PodInfo) -> bool {
    pod_volumes(other).iter().any(|ev| {
        if let (Some(d), Some(e)) = (&volume.gce_persistent_disk, &ev.gce_persistent_disk)
            && d.pd_name == e.pd_name
            && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.aws_elastic_block_store, &ev.aws_elastic_block_store)
            && d.volume_id == e.volume_id
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.iscsi, &ev.iscsi)
            && d.iqn == e.iqn
            && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
        {
            return true;
        }
        if let (Some(d), Some(e)) = (&volume.rbd, &ev.rbd) {
            let overlap = d.monitors.iter().any(|m| e.monitors.contains(m));
            if overlap
                && d.pool.as_deref().unwrap_or("rbd") == e.pool.as_deref().unwrap_or("rbd")
                && d.image == e.image
                && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
            {
                return true;
            }
        }
        false
    })
}

/// Whether none of the pod's volumes conflicts with those of `pods`.
fn satisfies_volume_conflicts<'a, I>(pod: &PodInfo, pods: I) -> bool
where
    I: Iterator<Item = &'a PodInfo> + Clone,
{
    pod_volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| pods.clone().all(|ev| !is_volume_conflict(v, ev)))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        VOLUME_RESTRICTIONS
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // Pods holding a conflicting disk or the claim went away.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE),
                |pod, old, _| {
                    let Some(deleted) = old.and_then(|o| o.as_pod()) else {
                        return Err("unexpected objects in isSchedulableAfterPodDeleted".into());
                    };
                    Ok(schedulable_after_pod_deleted(pod, deleted))
                },
            ),
            // A new node may fit.
            ClusterEventWithHint::always(ClusterEvent::NODE_ADD),
            // The claim the pod needs was created.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                |pod, _, new| {
                    let Some(KubeObject::PersistentVolumeClaim(pvc)) =
                        new.and_then(|n| n.as_object())
                    else {
                        return Err(
                            "unexpected objects in isSchedulableAfterPersistentVolumeClaimChange"
                                .into(),
                        );
                    };
                    if pvc.metadata.namespace.as_deref() != Some(&*pod.namespace) {
                        return Ok(QueueingHint::Skip);
                    }
                    let name = pvc.metadata.name.as_deref().unwrap_or("");
                    let used = pod_volumes(pod)
                        .iter()
                        .filter_map(|v| v.persistent_volume_claim.as_ref())
                        .any(|c| c.claim_name == name);
                    Ok(if used {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    })
                },
            ),
        ])
    }

    extension_points!(pre_filter, filter);
}

/// The hint for a deleted pod: it may have held a conflicting disk or one
/// of the pod's claims (a possible ReadWriteOncePod holder; the claim is
/// not fetched to keep hints cheap).
fn schedulable_after_pod_deleted(pod: &PodInfo, deleted: &PodInfo) -> QueueingHint {
    if deleted.namespace != pod.namespace {
        return QueueingHint::Skip;
    }
    if !satisfies_volume_conflicts(pod, std::iter::once(deleted)) {
        return QueueingHint::Queue;
    }
    let claims: Vec<&str> = pod_volumes(pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
        .collect();
    let shares = pod_volumes(deleted)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .any(|c| claims.contains(&c.claim_name.as_str()));
    if shares {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

#[async_trait]
impl PreFilterPlugin for VolumeRestrictions {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let needs_check = pod_volumes(pod).iter().any(needs_restrictions_check);
        let claims = match self.rwop_claims(pod) {
            Ok(c) => c,
            Err(s) => return (None, s),
        };
        // At most one pod uses a ReadWriteOncePod claim: count each claim in
        // use anywhere once.
        let conflicting_refs = claims
            .iter()
            .filter(|c| {
                let key = pvc_key(&pod.namespace, c);
                nodes.iter().any(|n| n.pvc_ref_count(&key) > 0)
            })
            .count() as i64;
        if !needs_check && conflicting_refs == 0 {
            return (None, Status::skip());
        }
        state.write(
            &PRE_FILTER_STATE_KEY,
            PreFilterState {
                rwop_claims: claims.into(),
                conflicting_refs,
            },
        );
        (None, Status::success())
    }

    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        pod_to_add: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_STATE_KEY) {
            Some(s) => {
                s.conflicting_refs += s.refs_of(pod_to_add);
                Status::success()
            }
            None => missing_state(),
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        pod_to_remove: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_STATE_KEY) {
            Some(s) => {
                s.conflicting_refs -= s.refs_of(pod_to_remove);
                Status::success()
            }
            None => missing_state(),
        }
    }
}

fn missing_state() -> Status {
    Status::error(format!(
        "cannot read {:?} from cycleState",
        PRE_FILTER_STATE_KEY.name()
    ))
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(pod, node.pods().iter().map(|p| &**p)) {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        let Some(s) = state.read(&PRE_FILTER_STATE_KEY) else {
            // PreFilter skips pods without claims; a Filter run without it
            // (a dry run) has nothing more to check for them.
            if pod.pvc_claims.is_empty() {
                return Status::success();
            }
            return missing_state();
        };
        if s.conflicting_refs > 0 {
            return Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
