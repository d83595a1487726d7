//! What the PersistentVolume controller and a dynamic provisioner do, for
//! the embedded cluster, so that the scheduler's volume binding completes
//! as it would in a real cluster:
//!
//! * a volume nobody claims is `Available`;
//! * a volume whose `claimRef` names an unbound claim binds it: the claim
//!   gets `spec.volumeName`, phase `Bound` and the controller's
//!   `pv.kubernetes.io/bind-completed` annotation; the volume phase `Bound`;
//! * a claim pre-bound through `spec.volumeName` gets that volume's
//!   `claimRef`;
//! * a claim the scheduler annotated with `volume.kubernetes.io/selected-node`
//!   whose StorageClass has a provisioner gets a new volume of its size
//!   (`pvc-<claim uid>`), which then binds it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec,
    PersistentVolumeStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Store;
use crate::cache::{KubeObject, ObjectKind};

/// Set by the scheduler on claims it wants provisioned on a node.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the controller once a claim is bound.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set by the controller on what it bound.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set by the provisioner on volumes it made.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The provisioner name of storage classes without dynamic provisioning.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The stored objects of one kind (a range of the ordered store, not a
/// scan of every object).
fn of_kind(s: &Store, kind: ObjectKind) -> impl Iterator<Item = &KubeObject> {
    s.objects
        .range((kind, String::new(), String::new())..)
        .take_while(move |((k, _, _), _)| *k == kind)
        .map(|(_, o)| o)
}

fn pvs(s: &Store) -> Vec<Arc<PersistentVolume>> {
    of_kind(s, ObjectKind::PersistentVolume)
        .filter_map(|o| match o {
            KubeObject::PersistentVolume(pv) => Some(pv.clone()),
            _ => None,
        })
        .collect()
}

fn pvcs(s: &Store) -> Vec<Arc<PersistentVolumeClaim>> {
    of_kind(s, ObjectKind::PersistentVolumeClaim)
        .filter_map(|o| match o {
            KubeObject::PersistentVolumeClaim(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn claim(s: &Store, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
    match s.objects.get(&(
        ObjectKind::PersistentVolumeClaim,
        ns.to_string(),
        name.to_string(),
    )) {
        Some(KubeObject::PersistentVolumeClaim(c)) => Some(c.clone()),
        _ => None,
    }
}

fn volume(s: &Store, name: &str) -> Option<Arc<PersistentVolume>> {
    match s.objects.get(&(
        ObjectKind::PersistentVolume,
        String::new(),
        name.to_string(),
    )) {
        Some(KubeObject::PersistentVolume(v)) => Some(v.clone()),
        _ => None,
    }
}

fn bound(c: &PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn put(s: &mut Store, obj: KubeObject) {
    if let Err(e) = s.put_object(obj, None) {
        tracing::warn!(error = %e, "embedded volume controller");
    }
}

/// Binds `pv` and its claim `c` to each other.
fn bind(s: &mut Store, pv: &PersistentVolume, c: &PersistentVolumeClaim) {
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let mut claim = c.clone();
    claim.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name);
    let ann = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(ANN_BIND_COMPLETED.into(), "yes".into());
    ann.insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    let status = claim.status.get_or_insert_with(Default::default);
    status.phase = Some("Bound".into());
    status.capacity = pv.spec.as_ref().and_then(|s| s.capacity.clone());
    status.access_modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
    put(
        s,
        KubeObject::PersistentVolumeClaim(Arc::new(claim.clone())),
    );

    let mut vol = pv.clone();
    let spec = vol.spec.get_or_insert_with(Default::default);
    spec.claim_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    });
    vol.status = Some(PersistentVolumeStatus {
        phase: Some("Bound".into()),
        ..Default::default()
    });
    put(s, KubeObject::PersistentVolume(Arc::new(vol)));
}

/// One round of the controllers; returns whether anything changed.
fn step(s: &mut Store) -> bool {
    // Volumes nobody claims are Available, as the controller marks them.
    for pv in pvs(s) {
        let claimed = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some();
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if !claimed && phase.is_none_or(|p| p == "Pending") {
            let mut vol = (*pv).clone();
            vol.status = Some(PersistentVolumeStatus {
                phase: Some("Available".into()),
                ..Default::default()
            });
            put(s, KubeObject::PersistentVolume(Arc::new(vol)));
            return true;
        }
    }
    // Volumes claiming an unbound claim bind it.
    for pv in pvs(s) {
        let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            continue;
        };
        let (Some(ns), Some(name)) = (r.namespace.as_deref(), r.name.as_deref()) else {
            continue;
        };
        let Some(c) = claim(s, ns, name) else {
            continue;
        };
        if r.uid
            .as_deref()
            .is_some_and(|u| Some(u) != c.metadata.uid.as_deref())
        {
            continue;
        }
        let pv_name = pv.metadata.name.as_deref().unwrap_or("");
        let claimed_other = c
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty() && v != pv_name);
        if !bound(&c) && !claimed_other {
            bind(s, &pv, &c);
            return true;
        }
    }
    for c in pvcs(s) {
        if bound(&c) {
            continue;
        }
        let spec = c.spec.clone().unwrap_or_default();
        // Claims naming their volume.
        if let Some(v) = spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
            if let Some(pv) = volume(s, v) {
                let free = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_none();
                if free {
                    bind(s, &pv, &c);
                    return true;
                }
            }
            continue;
        }
        // Claims the scheduler chose a node for: provision.
        let selected = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_SELECTED_NODE));
        let Some(_node) = selected else { continue };
        let Some(class_name) = spec.storage_class_name.as_deref() else {
            continue;
        };
        let Some(KubeObject::StorageClass(class)) = s
            .objects
            .get(&(
                ObjectKind::StorageClass,
                String::new(),
                class_name.to_string(),
            ))
            .cloned()
        else {
            continue;
        };
        if class.provisioner == NO_PROVISIONER {
            continue;
        }
        let uid = c.metadata.uid.clone().unwrap_or_default();
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(format!("pvc-{uid}")),
                annotations: Some(BTreeMap::from([(
                    ANN_PROVISIONED_BY.to_string(),
                    class.provisioner.clone(),
                )])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                capacity: spec.resources.as_ref().and_then(|r| r.requests.clone()),
                access_modes: spec.access_modes.clone(),
                storage_class_name: Some(class_name.to_string()),
                persistent_volume_reclaim_policy: Some(
                    class
                        .reclaim_policy
                        .clone()
                        .unwrap_or_else(|| "Delete".into()),
                ),
                volume_mode: spec.volume_mode.clone(),
                ..Default::default()
            }),
            status: None,
        };
        put(s, KubeObject::PersistentVolume(Arc::new(pv.clone())));
        let Some(stored) = volume(s, &format!("pvc-{uid}")) else {
            continue;
        };
        bind(s, &stored, &c);
        return true;
    }
    false
}

/// Runs the controllers until nothing changes.
pub(super) fn reconcile(s: &mut Store) {
    for _ in 0..1000 {
        if !step(s) {
            return;
        }
    }
    tracing::warn!("embedded volume controller did not settle");
}
