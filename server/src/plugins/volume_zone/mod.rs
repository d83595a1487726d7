//! VolumeZone: a pod's bound volumes must be in the node's zone and
//! region.
//!
//! PreFilter reads the topology labels (`topology.kubernetes.io/zone` and
//! `region`, and their legacy `failure-domain.beta.kubernetes.io` forms;
//! `a__b` means zones a and b) of the volumes bound to the pod's claims.
//! Unbound claims of a `WaitForFirstConsumer` class are left to
//! VolumeBinding. Filter rejects a node whose label (or, for a legacy key,
//! the GA label) is missing or not among the volume's values; nodes without
//! any topology label fit (single-zone clusters).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolume;

use crate::cache::{KubeObject, NodeInfo};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventResource, FilterPlugin,
    Handle, NoArgs, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint, StateKey, Status,
};
use crate::model::PodInfo;
use crate::model::node::{LABEL_REGION, LABEL_ZONE};
use crate::plugins::names::VOLUME_ZONE;
use crate::plugins::volume_helpers::{
    LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE, WAIT_FOR_FIRST_CONSUMER,
    claim_class, claim_volume_name, label_zones_to_set, not_found, pod_volumes,
};

/// The reason a node outside the volumes' zones is rejected.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const PRE_FILTER_STATE_KEY: StateKey<Arc<[PvTopology]>> = StateKey::new("PreFilterVolumeZone");

/// The topology labels, legacy ones first.
const TOPOLOGY_LABELS: [&str; 4] = [
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_ZONE,
    LABEL_REGION,
];

fn translate_to_ga_label(label: &str) -> &str {
    match label {
        LABEL_FAILURE_DOMAIN_BETA_REGION => LABEL_REGION,
        LABEL_FAILURE_DOMAIN_BETA_ZONE => LABEL_ZONE,
        other => other,
    }
}

/// One topology label of a volume and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PvTopology {
    pv_name: String,
    key: &'static str,
    values: Vec<String>,
}

/// The topology labels of `pv`; malformed values are ignored.
fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let labels = pv.metadata.labels.as_ref();
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|key| {
            let value = labels?.get(*key)?;
            let values = label_zones_to_set(value)?;
            Some(PvTopology {
                pv_name: pv.metadata.name.clone().unwrap_or_default(),
                key,
                values,
            })
        })
        .collect()
}

/// The VolumeZone plugin.
pub struct VolumeZone {
    handle: Handle,
}

impl VolumeZone {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs, handle: &Handle) -> Self {
        Self {
            handle: handle.clone(),
        }
    }

    /// The topologies of the volumes bound to the pod's claims.
    fn pv_topologies_of(&self, pod: &PodInfo) -> Result<Vec<PvTopology>, Status> {
        let objects = self.handle.objects();
        let mut out = Vec::new();
        for v in pod_volumes(pod) {
            let Some(c) = &v.persistent_volume_claim else {
                continue;
            };
            let name = c.claim_name.as_str();
            if name.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
            }
            let pvc = objects
                .persistent_volume_claim(&pod.namespace, name)
                .ok_or_else(|| Status::unresolvable(not_found("persistentvolumeclaim", name)))?;
            let pv_name = claim_volume_name(&pvc);
            if pv_name.is_empty() {
                let class_name = claim_class(&pvc);
                if class_name.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let class = objects.storage_class("", class_name).ok_or_else(|| {
                    Status::unresolvable(not_found("storageclass.storage.k8s.io", class_name))
                })?;
                match class.volume_binding_mode.as_deref() {
                    None => {
                        return Err(Status::unresolvable(format!(
                            "VolumeBindingMode not set for StorageClass {class_name:?}"
                        )));
                    }
                    // Unbound volumes are VolumeBinding's business.
                    Some(WAIT_FOR_FIRST_CONSUMER) => continue,
                    Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
                }
            }
            let pv = objects
                .persistent_volume("", pv_name)
                .ok_or_else(|| Status::unresolvable(not_found("persistentvolume", pv_name)))?;
            out.extend(pv_topologies(&pv));
        }
        Ok(out)
    }
}

/// Whether `pod` uses the claim `namespace/name` (not through ephemeral
/// volumes, as upstream).
fn pod_uses_claim(pod: &PodInfo, namespace: Option<&str>, name: Option<&str>) -> bool {
    namespace == Some(&*pod.namespace)
        && pod_volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .any(|c| Some(c.claim_name.as_str()) == name)
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        VOLUME_ZONE
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // A new WaitForFirstConsumer class lets unbound claims wait
            // (the mode is immutable: updates do not matter).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::StorageClass, ActionType::ADD),
                |_, _, new| match new.and_then(|n| n.as_object()) {
                    Some(KubeObject::StorageClass(sc)) => Ok(
                        if sc.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER) {
                            QueueingHint::Queue
                        } else {
                            QueueingHint::Skip
                        },
                    ),
                    _ => Err("unexpected objects in isSchedulableAfterStorageClassAdded".into()),
                },
            ),
            // A new node, or new zone labels on one.
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            )),
            // The pod's claim appeared or got its volume.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                |pod, _, new| match new.and_then(|n| n.as_object()) {
                    Some(KubeObject::PersistentVolumeClaim(pvc)) => Ok(
                        if pod_uses_claim(
                            pod,
                            pvc.metadata.namespace.as_deref(),
                            pvc.metadata.name.as_deref(),
                        ) {
                            QueueingHint::Queue
                        } else {
                            QueueingHint::Skip
                        },
                    ),
                    _ => Err(
                        "unexpected objects in isSchedulableAfterPersistentVolumeClaimChange"
                            .into(),
                    ),
                },
            ),
            // A new volume, or new topology labels on one.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolume,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                |_, old, new| {
                    let as_pv = |o: Option<&crate::framework::EventObject>| match o
                        .and_then(|o| o.as_object())
                    {
                        Some(KubeObject::PersistentVolume(pv)) => Some(pv.clone()),
                        _ => None,
                    };
                    let Some(new) = as_pv(new) else {
                        return Err(
                            "unexpected objects in isSchedulableAfterPersistentVolumeChange".into(),
                        );
                    };
                    Ok(match as_pv(old) {
                        None => QueueingHint::Queue,
                        Some(old) if pv_topologies(&old) != pv_topologies(&new) => {
                            QueueingHint::Queue
                        }
                        Some(_) => QueueingHint::Skip,
                    })
                },
            ),
        ])
    }

    extension_points!(pre_filter, filter);
}

#[async_trait]
impl PreFilterPlugin for VolumeZone {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match self.pv_topologies_of(pod) {
            Err(s) => (None, s),
            Ok(t) if t.is_empty() => (None, Status::skip()),
            Ok(t) => {
                state.write(&PRE_FILTER_STATE_KEY, t.into());
                (None, Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod_volumes(pod).is_empty() {
            return Status::success();
        }
        let computed;
        let topologies: &[PvTopology] = match state.read(&PRE_FILTER_STATE_KEY) {
            Some(t) => t,
            // Without PreFilter, work it out here.
            None => match self.pv_topologies_of(pod) {
                Ok(t) => {
                    computed = t;
                    &computed
                }
                Err(s) => return s,
            },
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        if !TOPOLOGY_LABELS.iter().any(|k| n.labels.contains_key(k)) {
            // Single-zone clusters leave nodes unlabelled.
            return Status::success();
        }
        for t in topologies {
            let value = n
                .labels
                .get(t.key)
                .or_else(|| n.labels.get(translate_to_ga_label(t.key)));
            if !value.is_some_and(|v| t.values.iter().any(|x| x == v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
