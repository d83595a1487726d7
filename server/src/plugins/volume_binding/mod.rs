//! VolumeBinding: binds and provisions a pod's PersistentVolumeClaims as
//! part of scheduling it.
//!
//! * PreFilter sorts the pod's claims (a missing, lost or deleted claim is
//!   `UnschedulableAndUnresolvable`; an unbound claim that should already be
//!   bound rejects the pod with "pod has unbound immediate
//!   PersistentVolumeClaims"); a pod without claims is skipped; bound local
//!   volumes narrow the nodes.
//! * Filter: bound volumes' node affinity must match; each unbound
//!   `WaitForFirstConsumer` claim needs a static volume (smallest fit) or a
//!   provisioner allowed on the node.
//! * Reserve assumes the decisions in memory, so the next pods do not pick
//!   the same volumes; Unreserve drops them.
//! * PreBind writes them (the volume's `claimRef`, the claim's
//!   `volume.kubernetes.io/selected-node`) and waits, up to
//!   `bindTimeoutSeconds`, for the PV controller to bind every claim.
//!
//! * Filter also checks, for a claim to provision whose provisioner is a
//!   CSIDriver with `storageCapacity: true`, that a CSIStorageCapacity of
//!   its class reachable from the node (`nodeTopology`) has room for it
//!   (`maximumVolumeSize`, else `capacity`): "node(s) did not have enough
//!   free storage" otherwise.
//! * PreScore and Score (StorageCapacityScoring, beta and on in v1.37):
//!   each node scores by the utilization its volumes would reach, per
//!   storage class, through `shape` (default: emptier is better), averaged
//!   over the classes: the static volumes chosen (request over the
//!   volume's capacity) if any, else the claims to provision (requests over
//!   the CSIStorageCapacity found). With the gate off, PreScore skips.
//!   berth skips it too for pods without claims, where upstream scores
//!   every node 0: the same placements.
//!
//! In-tree-to-CSI translation is not modelled.

mod args;
pub mod binder;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

pub use args::*;
use binder::{Binder, PodVolumeClaims, PodVolumes};

use crate::cache::{KubeObject, NodeInfo};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, EventObject, EventResource,
    FilterPlugin, Handle, MAX_NODE_SCORE, Plugin, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, QueueingHint, ReservePlugin, ScorePlugin, StateKey, Status,
};
use crate::model::PodInfo;
use crate::plugins::names::VOLUME_BINDING;
use crate::plugins::node_resources::{broken_linear, utilization};
use crate::plugins::volume_helpers::{
    ANN_MIGRATED_PLUGINS, annotation, claim_queueing_hint, not_found, pod_volumes, volume_claim,
    volume_is_for_pod,
};

/// The reason a pod with unbound immediate claims is rejected.
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

const STATE_KEY: StateKey<State> = StateKey::new("VolumeBinding");

/// The highest score of a shape point (upstream's MaxCustomPriorityScore).
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

/// The cycle's state, shared by the clones of the cycle state (as upstream
/// shares one pointer).
#[derive(Debug, Clone, Default)]
struct State {
    all_bound: bool,
    claims: Arc<PodVolumeClaims>,
    /// Decisions by node, for nodes where something is to be bound.
    by_node: Arc<Mutex<HashMap<String, PodVolumes>>>,
}

/// The VolumeBinding plugin.
pub struct VolumeBinding {
    handle: Handle,
    binder: Binder,
    /// StorageCapacityScoring's shape as `(utilization, score × 10)`;
    /// `None` with the gate off (PreScore skips).
    scorer: Option<Vec<(i64, i64)>>,
}

impl VolumeBinding {
    /// Builds the plugin.
    pub fn new(args: VolumeBindingArgs, handle: &Handle) -> Self {
        let timeout = Duration::from_secs(args.bind_timeout_seconds.max(0).unsigned_abs());
        let scorer = handle.features().enable_storage_capacity_scoring.then(|| {
            args.shape
                .unwrap_or_else(default_shape)
                .iter()
                .map(|p| {
                    (
                        i64::from(p.utilization),
                        i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                    )
                })
                .collect()
        });
        Self {
            handle: handle.clone(),
            binder: Binder::new(handle, timeout),
            scorer,
        }
    }

    /// Upstream's volume capacity scorer: per class, requested over
    /// capacity through the shape; the mean over classes, rounded.
    fn capacity_score(shape: &[(i64, i64)], uses: &[(String, i64, i64)], dynamic: bool) -> i64 {
        // (class, requested, capacity), one entry per class.
        let mut classes: smallvec::SmallVec<[(&str, i64, i64); 4]> = smallvec::SmallVec::new();
        for (class, requested, capacity) in uses {
            match classes.iter_mut().find(|(c, _, _)| c == class) {
                Some(e) => {
                    e.1 = e.1.saturating_add(*requested);
                    // A provisioned claim's capacity is the pool's, the
                    // same for every claim of the class; a static volume's
                    // adds up.
                    e.2 = if dynamic {
                        *capacity
                    } else {
                        e.2.saturating_add(*capacity)
                    };
                }
                None => classes.push((class, *requested, *capacity)),
            }
        }
        if classes.is_empty() {
            return 0;
        }
        let sum: i64 = classes
            .iter()
            .map(|(_, r, c)| broken_linear(shape, utilization(*r, *c)))
            .sum();
        (sum as f64 / classes.len() as f64).round() as i64
    }

    /// The binder (for tests: its poll interval).
    pub fn binder_mut(&mut self) -> &mut Binder {
        &mut self.binder
    }

    /// Whether the pod has claims, or why its claims are unusable.
    fn pod_has_pvcs(&self, pod: &PodInfo) -> Result<bool, String> {
        let mut has = false;
        for vol in pod_volumes(pod) {
            let Some((name, ephemeral)) = volume_claim(pod, vol) else {
                continue;
            };
            has = true;
            let Some(pvc) = self
                .handle
                .objects()
                .persistent_volume_claim(&pod.namespace, &name)
            else {
                return Err(if ephemeral {
                    format!(
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
                    )
                } else {
                    not_found("persistentvolumeclaim", &name)
                });
            };
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                return Err(format!(
                    "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
                    crate::plugins::volume_helpers::claim_volume_name(&pvc)
                ));
            }
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            if ephemeral {
                volume_is_for_pod(pod, &pvc)?;
            }
        }
        Ok(has)
    }
}

fn object(o: Option<&EventObject>) -> Option<&KubeObject> {
    o.and_then(|o| o.as_object())
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        VOLUME_BINDING
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // A missing class appeared, or a class's allowed topologies
            // changed.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::StorageClass,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                |_, old, new| match (object(old), object(new)) {
                    (_, Some(KubeObject::StorageClass(_))) if old.is_none() => {
                        Ok(QueueingHint::Queue)
                    }
                    (Some(KubeObject::StorageClass(o)), Some(KubeObject::StorageClass(n))) => {
                        Ok(if o.allowed_topologies != n.allowed_topologies {
                            QueueingHint::Queue
                        } else {
                            QueueingHint::Skip
                        })
                    }
                    _ => Err("unexpected objects in isSchedulableAfterStorageClassChange".into()),
                },
            ),
            // The pod's claims appeared or changed.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PersistentVolumeClaim,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                |pod, _, new| {
                    claim_queueing_hint(pod, new, "isSchedulableAfterPersistentVolumeClaimChange")
                },
            ),
            // Any volume may be the one.
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::PersistentVolume,
                ActionType::ADD | ActionType::UPDATE,
            )),
            // Node labels decide volume affinity and allowed topologies.
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            )),
            // CSINodes say which in-tree plugins are migrated.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::CsiNode, ActionType::ADD | ActionType::UPDATE),
                |_, old, new| match (object(old), object(new)) {
                    (None, Some(KubeObject::CsiNode(_))) => Ok(QueueingHint::Queue),
                    (Some(KubeObject::CsiNode(o)), Some(KubeObject::CsiNode(n))) => Ok(
                        if annotation(&o.metadata, ANN_MIGRATED_PLUGINS)
                            != annotation(&n.metadata, ANN_MIGRATED_PLUGINS)
                        {
                            QueueingHint::Queue
                        } else {
                            QueueingHint::Skip
                        },
                    ),
                    _ => Err("unexpected objects in isSchedulableAfterCSINodeChange".into()),
                },
            ),
        ])
    }

    extension_points!(pre_filter, filter, pre_score, score, reserve, pre_bind);
}

#[async_trait]
impl PreFilterPlugin for VolumeBinding {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match self.pod_has_pvcs(pod) {
            Err(e) => return (None, Status::unresolvable(e)),
            Ok(false) => {
                state.write(&STATE_KEY, State::default());
                return (None, Status::skip());
            }
            Ok(true) => {}
        }
        let claims = match self.binder.get_pod_volume_claims(pod) {
            Ok(c) => c,
            Err(e) => return (None, Status::error(e)),
        };
        if !claims.unbound_immediate.is_empty() {
            return (None, Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        let result = self
            .binder
            .eligible_nodes(&claims)
            .map(|n| PreFilterResult {
                node_names: Some(n),
            });
        state.write(
            &STATE_KEY,
            State {
                all_bound: false,
                claims: Arc::new(claims),
                by_node: Arc::default(),
            },
        );
        (result, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let st = match state.require(&STATE_KEY) {
            Ok(s) => s,
            // PreFilter skips pods without claims; a Filter run without it
            // (a dry run) has nothing to check for them.
            Err(_) if pod.pvc_claims.is_empty() => return Status::success(),
            Err(s) => return s,
        };
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        match self.binder.find_pod_volumes(&st.claims, &n.name, &n.labels) {
            Err(e) => Status::error(e),
            Ok((_, conflicts)) if !conflicts.is_empty() => Status::with_reasons(
                Code::UnschedulableAndUnresolvable,
                conflicts.reasons().map(Into::into),
            ),
            Ok((volumes, _)) => {
                if !volumes.is_empty() {
                    st.by_node.lock().insert(n.name.to_string(), volumes);
                }
                Status::success()
            }
        }
    }
}

#[async_trait]
impl PreScorePlugin for VolumeBinding {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        if self.scorer.is_none() || pod.pvc_claims.is_empty() {
            return Status::skip();
        }
        match state.require(&STATE_KEY) {
            Ok(_) => Status::success(),
            Err(s) => s,
        }
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(shape) = &self.scorer else {
            return Ok(0);
        };
        let st = state.require(&STATE_KEY)?;
        let by_node = st.by_node.lock();
        let Some(volumes) = by_node.get(node.name()) else {
            return Ok(0);
        };
        Ok(if volumes.static_bindings.is_empty() {
            Self::capacity_score(shape, &volumes.provision_capacity, true)
        } else {
            Self::capacity_score(shape, &volumes.static_capacity, false)
        })
    }
}

#[async_trait]
impl ReservePlugin for VolumeBinding {
    async fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read_mut(&STATE_KEY) else {
            return Status::error(format!(
                "reading {:?} from cycleState: not found",
                STATE_KEY.name()
            ));
        };
        let decided = st.by_node.lock().get(node).cloned();
        match decided {
            Some(volumes) => match self.binder.assume_pod_volumes(pod, node, &volumes) {
                Ok((all_bound, assumed)) => {
                    st.all_bound = all_bound;
                    st.by_node.lock().insert(node.to_string(), assumed);
                    Status::success()
                }
                Err(e) => Status::error(e),
            },
            None => {
                // Nothing to bind on this node.
                st.all_bound = true;
                Status::success()
            }
        }
    }

    async fn unreserve(&self, state: &CycleState, _: &PodInfo, node: &str) {
        let Some(st) = state.read(&STATE_KEY) else {
            return;
        };
        if let Some(volumes) = st.by_node.lock().get(node) {
            self.binder.revert(volumes);
        }
    }
}

#[async_trait]
impl PreBindPlugin for VolumeBinding {
    fn pre_bind_pre_flight(&self, state: &CycleState, _: &PodInfo, _: &str) -> Status {
        match state.read(&STATE_KEY) {
            Some(st) if !st.all_bound => Status::success(),
            _ => Status::skip(),
        }
    }

    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let st = match state.require(&STATE_KEY) {
            Ok(s) => s,
            Err(s) => return s,
        };
        if st.all_bound {
            return Status::success();
        }
        let Some(volumes) = st.by_node.lock().get(node).cloned() else {
            return Status::error(format!("no pod volumes found for node {node:?}"));
        };
        match self.binder.bind_pod_volumes(pod, node, &volumes).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e),
        }
    }
}

#[cfg(test)]
mod capacity_tests;
#[cfg(test)]
mod tests;
