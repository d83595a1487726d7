//! NodeVolumeLimits (upstream's CSI limits plugin): a node takes no more
//! CSI volumes of a driver than its CSINode allows
//! (`spec.drivers[].allocatable.count`).
//!
//! Volumes are counted once per node by `<driver>/<volumeHandle>`: a
//! claim's bound PersistentVolume gives `spec.csi.driver` and
//! `volumeHandle`; an unbound claim (or one whose volume is missing) counts
//! for its StorageClass's provisioner under a handle unique to the claim;
//! generic ephemeral volumes count through their claims. A volume the pod
//! shares with a pod already on the node takes no new slot.
//!
//! With VolumeLimitScaling (beta, on in v1.37), a node whose CSINode does
//! not list a driver of the pod's volumes whose CSIDriver sets
//! `preventPodSchedulingIfMissing` is refused ("<driver> CSI driver is not
//! installed on the node"), before any limit is counted.
//!
//! Left out, as berth has no CSI translation library or VolumeAttachment
//! objects: in-tree volumes migrated to CSI (inline or through PVs, and
//! in-tree provisioners, are not counted) and attachments not tied to a
//! pod on the node.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::CSINode;
use smallvec::SmallVec;

use crate::cache::{KubeObject, NodeInfo, ObjectStore};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventResource, FilterPlugin,
    Handle, NoArgs, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint, StateKey, Status,
};
use crate::model::PodInfo;
use crate::plugins::names::NODE_VOLUME_LIMITS;
use crate::plugins::volume_helpers::{
    claim_class, claim_queueing_hint, claim_volume_name, not_found, pod_volumes, volume_claim,
    volume_is_for_pod,
};

/// The reason a node whose limit would be exceeded is rejected.
pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

/// The reason a node lacking a driver that must be there is rejected
/// (VolumeLimitScaling), after the driver's name.
pub const ERR_REASON_DRIVER_NOT_INSTALLED: &str = "CSI driver is not installed on the node";

const STATE_KEY: StateKey<Arc<PreFilterState>> = StateKey::new("PreFilterNodeVolumeLimits");

/// An attachable volume: `<driver>/<handle>` and its driver.
type Attachable = (String, String);

/// What PreFilter worked out once for the cycle.
#[derive(Debug)]
struct PreFilterState {
    /// The pod's attachable volumes, or why the pod cannot be placed.
    new_volumes: Result<Vec<Attachable>, Status>,
    /// The attachable volumes of the pods on the nodes, by pod UID.
    existing: HashMap<Arc<str>, Result<Vec<Attachable>, Status>>,
    /// Drivers' limits by node name.
    limits: HashMap<String, Vec<(String, i64)>>,
    /// Drivers of the pod's volumes whose CSIDriver sets
    /// `preventPodSchedulingIfMissing` (VolumeLimitScaling), in volume order.
    required_drivers: Vec<String>,
    /// The drivers each CSINode lists, by node name (only when some driver
    /// is required).
    installed: HashMap<String, Vec<String>>,
}

/// The NodeVolumeLimits plugin.
pub struct NodeVolumeLimits {
    handle: Handle,
    /// Makes the handles of unbound claims unlike any real handle.
    random_volume_id_prefix: String,
    /// VolumeLimitScaling, read once when the plugin is built.
    enable_volume_limit_scaling: bool,
}

impl NodeVolumeLimits {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs, handle: &Handle) -> Self {
        let s = RandomState::new();
        Self {
            handle: handle.clone(),
            random_volume_id_prefix: format!("{:016x}{:016x}", s.hash_one(1u8), s.hash_one(2u8)),
            enable_volume_limit_scaling: handle.features().enable_volume_limit_scaling,
        }
    }

    /// The pod's attachable volumes. A new pod fails on a claim it cannot
    /// run without; an existing pod's unknown claims are not counted.
    fn attachable_volumes(
        &self,
        objects: &ObjectStore,
        pod: &PodInfo,
        new_pod: bool,
    ) -> Result<Vec<Attachable>, Status> {
        let mut out: Vec<Attachable> = Vec::new();
        for vol in pod_volumes(pod) {
            // Inline volumes count only when migrated to CSI (left out).
            let Some((name, ephemeral)) = volume_claim(pod, vol) else {
                continue;
            };
            if name.is_empty() {
                return Err(Status::error("PersistentVolumeClaim had no name"));
            }
            let Some(pvc) = objects.persistent_volume_claim(&pod.namespace, &name) else {
                if new_pod {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {}/{}: {}",
                        pod.namespace,
                        name,
                        not_found("persistentvolumeclaim", &name)
                    )));
                }
                continue;
            };
            if ephemeral {
                volume_is_for_pod(pod, &pvc).map_err(Status::error)?;
            }
            let Some((driver, handle)) = self.csi_driver_info(objects, &pvc) else {
                continue;
            };
            let unique = format!("{driver}/{handle}");
            if !out.iter().any(|(u, _)| *u == unique) {
                out.push((unique, driver));
            }
        }
        Ok(out)
    }

    /// The CSI driver and volume handle of a claim.
    fn csi_driver_info(
        &self,
        objects: &ObjectStore,
        pvc: &PersistentVolumeClaim,
    ) -> Option<(String, String)> {
        let pv_name = claim_volume_name(pvc);
        if pv_name.is_empty() {
            return self.csi_driver_info_from_class(objects, pvc);
        }
        let Some(pv) = objects.persistent_volume("", pv_name) else {
            // Deleted, or the claim is pre-bound to a volume yet to come.
            return self.csi_driver_info_from_class(objects, pvc);
        };
        let csi = pv.spec.as_ref()?.csi.as_ref()?;
        Some((csi.driver.clone(), csi.volume_handle.clone()))
    }

    /// The provisioner of an unbound claim's class and a handle unique to
    /// the claim.
    fn csi_driver_info_from_class(
        &self,
        objects: &ObjectStore,
        pvc: &PersistentVolumeClaim,
    ) -> Option<(String, String)> {
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            // Immediate binding: bound before scheduling.
            return None;
        }
        let class = objects.storage_class("", class_name)?;
        if class.provisioner.starts_with("kubernetes.io/") {
            // In-tree provisioner: counted only through CSI migration.
            return None;
        }
        let handle = format!(
            "{}-{}/{}",
            self.random_volume_id_prefix,
            pvc.metadata.namespace.as_deref().unwrap_or("default"),
            pvc.metadata.name.as_deref().unwrap_or("")
        );
        Some((class.provisioner.clone(), handle))
    }
}

/// Drivers' limits in a CSINode.
fn volume_limits(csi_node: &CSINode) -> Vec<(String, i64)> {
    csi_node
        .spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), i64::from(count)))
        })
        .collect()
}

/// Whether the deleted pod's volumes may have held attach slots.
fn uses_claims(pod: &PodInfo) -> bool {
    pod_volumes(pod)
        .iter()
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NODE_VOLUME_LIMITS
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let scaling = self.enable_volume_limit_scaling;
        let mut events = vec![
            // Any new CSINode may have room.
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::CsiNode,
                ActionType::ADD,
            )),
            // A driver's limit went up (or away).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CsiNode, ActionType::UPDATE),
                move |_, old, new| {
                    let as_csi = |o: Option<&crate::framework::EventObject>| match o
                        .and_then(|o| o.as_object())
                    {
                        Some(KubeObject::CsiNode(c)) => Some(c.clone()),
                        _ => None,
                    };
                    let (Some(old), Some(new)) = (as_csi(old), as_csi(new)) else {
                        return Err("unexpected objects in isSchedulableAfterCSINodeUpdated".into());
                    };
                    // A driver was installed (VolumeLimitScaling).
                    if scaling
                        && new
                            .spec
                            .drivers
                            .iter()
                            .any(|d| !old.spec.drivers.iter().any(|o| o.name == d.name))
                    {
                        return Ok(QueueingHint::Queue);
                    }
                    let new_limits = volume_limits(&new);
                    let raised =
                        volume_limits(&old).iter().any(|(driver, before)| {
                            match new_limits.iter().find(|(d, _)| d == driver) {
                                Some((_, after)) => after > before,
                                None => true,
                            }
                        });
                    Ok(if raised {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    })
                },
            ),
            // A pod using volumes left a node.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE),
                |_, old, _| {
                    let Some(deleted) = old.and_then(|o| o.as_pod()) else {
                        return Err("unexpected objects in isSchedulableAfterPodDeleted".into());
                    };
                    Ok(if deleted.node_name.is_some() && uses_claims(deleted) {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    })
                },
            ),
            // The pod's claim was created.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                |pod, _, new| claim_queueing_hint(pod, new, "isSchedulableAfterPVCAdded"),
            ),
        ];
        if scaling {
            // A CSIDriver no longer requires itself on the node.
            events.push(ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::CsiDriver,
                ActionType::UPDATE | ActionType::DELETE,
            )));
        }
        Some(events)
    }

    extension_points!(pre_filter, filter);
}

#[async_trait]
impl PreFilterPlugin for NodeVolumeLimits {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if !uses_claims(pod) {
            return (None, Status::skip());
        }
        let objects = self.handle.objects();
        let new_volumes = self.attachable_volumes(objects, pod, true);
        let mut existing = HashMap::new();
        let mut limits = HashMap::new();
        let mut required_drivers: Vec<String> = Vec::new();
        let mut installed = HashMap::new();
        if self.enable_volume_limit_scaling
            && let Ok(v) = &new_volumes
        {
            for (_, driver) in v {
                let prevent = objects
                    .csi_driver("", driver)
                    .is_some_and(|d| d.spec.prevent_pod_scheduling_if_missing == Some(true));
                if prevent && !required_drivers.contains(driver) {
                    required_drivers.push(driver.clone());
                }
            }
            if !required_drivers.is_empty() {
                for csi in objects.csi_nodes("") {
                    installed.insert(
                        csi.metadata.name.clone().unwrap_or_default(),
                        csi.spec.drivers.iter().map(|d| d.name.clone()).collect(),
                    );
                }
            }
        }
        if new_volumes.as_ref().is_ok_and(|v| !v.is_empty()) {
            for csi in objects.csi_nodes("") {
                let l = volume_limits(&csi);
                if !l.is_empty() {
                    limits.insert(csi.metadata.name.clone().unwrap_or_default(), l);
                }
            }
            for n in nodes.iter().filter(|n| limits.contains_key(n.name())) {
                for p in n.pods().iter().filter(|p| !p.pvc_claims.is_empty()) {
                    existing.insert(p.uid.clone(), self.attachable_volumes(objects, p, false));
                }
            }
        }
        state.write(
            &STATE_KEY,
            Arc::new(PreFilterState {
                new_volumes,
                existing,
                limits,
                required_drivers,
                installed,
            }),
        );
        (None, Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod_volumes(pod).is_empty() {
            return Status::success();
        }
        let st = match state.require(&STATE_KEY) {
            Ok(s) => s,
            Err(s) => return s,
        };
        let new_volumes = match &st.new_volumes {
            Ok(v) if v.is_empty() => return Status::success(),
            Ok(v) => v,
            Err(s) => return s.clone(),
        };
        if !st.required_drivers.is_empty() {
            let on_node = st.installed.get(node.name());
            for driver in &st.required_drivers {
                if !on_node.is_some_and(|ds| ds.contains(driver)) {
                    return Status::unschedulable(format!(
                        "{driver} {ERR_REASON_DRIVER_NOT_INSTALLED}"
                    ));
                }
            }
        }
        let Some(limits) = st.limits.get(node.name()) else {
            return Status::success();
        };
        // The node's volumes, each once.
        let mut resolved: SmallVec<[Vec<Attachable>; 2]> = SmallVec::new();
        for p in node.pods().iter().filter(|p| !p.pvc_claims.is_empty()) {
            if !st.existing.contains_key(&p.uid) {
                // A pod added by a what-if evaluation: resolve it now.
                match self.attachable_volumes(self.handle.objects(), p, false) {
                    Ok(v) => resolved.push(v),
                    Err(s) => return s,
                }
            }
        }
        let mut attached: SmallVec<[(&str, &str); 16]> = SmallVec::new();
        let cached = node.pods().iter().filter_map(|p| st.existing.get(&p.uid));
        for vols in cached {
            let vols = match vols {
                Ok(v) => v,
                Err(s) => return s.clone(),
            };
            for (u, d) in vols {
                if !attached.iter().any(|(x, _)| x == u) {
                    attached.push((u, d));
                }
            }
        }
        for (u, d) in resolved.iter().flatten() {
            if !attached.iter().any(|(x, _)| x == u) {
                attached.push((u, d));
            }
        }
        for (driver, limit) in limits {
            let new = new_volumes
                .iter()
                .filter(|(u, d)| d == driver && !attached.iter().any(|(x, _)| x == u))
                .count() as i64;
            if new == 0 {
                continue;
            }
            let current = attached.iter().filter(|(_, d)| d == driver).count() as i64;
            if current + new > *limit {
                return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
