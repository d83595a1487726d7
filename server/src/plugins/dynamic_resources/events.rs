//! The cluster events that may make a pod DynamicResources rejected
//! schedulable, with upstream's queueing hints:
//!
//! * a node added, or its labels or allocatable changed (slices may
//!   select nodes by label);
//! * a ResourceClaim added or changed: the pod's own claims appearing or
//!   changing status, or any claim getting deallocated (freeing devices);
//!   not a change of a claim the pod does not use, nor one that leaves the
//!   status as it was (a finalizer added);
//! * the pod itself updated with the claim names the resourceclaim
//!   controller generated, once all its claims exist;
//! * a DeviceClass or ResourceSlice added or changed.

use std::sync::Arc;

use crate::cache::{KubeObject, ObjectStore};
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
};

use super::pod_claims;

pub(super) fn registrations(objects: Arc<ObjectStore>) -> Vec<ClusterEventWithHint> {
    let claims_store = objects.clone();
    vec![
        ClusterEventWithHint::always(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL | ActionType::UPDATE_NODE_ALLOCATABLE,
        )),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::ResourceClaim,
                ActionType::ADD | ActionType::UPDATE,
            ),
            move |pod, old, new| {
                let claim = |o: Option<&EventObject>| match o.and_then(|o| o.as_object()) {
                    Some(KubeObject::ResourceClaim(c)) => Some(c.clone()),
                    _ => None,
                };
                let Some(modified) = claim(new) else {
                    return Err("unexpected object in isSchedulableAfterClaimChange".into());
                };
                let original = claim(old);
                let claims = match pod_claims(claims_store.dra(), pod) {
                    Ok(c) => c,
                    // Still missing claims: not schedulable yet.
                    Err(_) => return Ok(QueueingHint::Skip),
                };
                let uid = modified.metadata.uid.as_deref().unwrap_or("");
                let uses = claims.iter().any(|c| &*c.uid == uid);
                let allocated = |c: &k8s_openapi::api::resource::v1::ResourceClaim| {
                    c.status.as_ref().is_some_and(|s| s.allocation.is_some())
                };
                if original.as_deref().is_some_and(allocated) && !allocated(&modified) {
                    // Deallocated: its devices are free now.
                    return Ok(QueueingHint::Queue);
                }
                if !uses {
                    return Ok(QueueingHint::Skip);
                }
                let Some(original) = original else {
                    return Ok(QueueingHint::Queue);
                };
                if original.status == modified.status {
                    return Ok(QueueingHint::Skip);
                }
                Ok(QueueingHint::Queue)
            },
        ),
        ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
            ),
            move |pod, _, new| {
                let Some(modified) = new.and_then(|o| o.as_pod()) else {
                    return Err("unexpected object in isSchedulableAfterPodChange".into());
                };
                if pod.uid != modified.uid {
                    return Ok(QueueingHint::Skip);
                }
                Ok(match pod_claims(objects.dra(), modified) {
                    Ok(_) => QueueingHint::Queue,
                    Err(_) => QueueingHint::Skip,
                })
            },
        ),
        ClusterEventWithHint::always(ClusterEvent::new(
            EventResource::DeviceClass,
            ActionType::ADD | ActionType::UPDATE,
        )),
        ClusterEventWithHint::always(ClusterEvent::new(
            EventResource::ResourceSlice,
            ActionType::ADD | ActionType::UPDATE,
        )),
    ]
}
