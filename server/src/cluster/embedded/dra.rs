//! What kube-controller-manager's resourceclaim controller (and the
//! garbage collector, for the claims it made) do, for the embedded
//! cluster, as recorded from v1.36:
//!
//! * a pod naming a `resourceClaimTemplateName` gets a claim made from the
//!   template: `generateName: <pod>-<podClaimName>-`, annotation
//!   `resource.kubernetes.io/pod-claim-name: <podClaimName>`, a controller
//!   owner reference to the pod, the template's spec, labels and
//!   annotations; the pod's `status.resourceClaimStatuses` then names it.
//!   A template that does not exist yet is retried when one is stored;
//! * when a pod is gone (or finished), claims reserved for it lose that
//!   reservation; a claim left with none is deallocated (`status: {}`,
//!   one write) and loses the scheduler's delete-protection finalizer;
//! * a claim made for a pod that is gone is deleted (garbage collection).

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodResourceClaimStatus, PodStatus};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimStatus};

use super::{Store, meta_spec};
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::{ClusterChange, WatchEvent};
use crate::model::PodObject;
use crate::model::dra::{FINALIZER, POD_CLAIM_NAME_ANNOTATION, claim_from_template};

/// After an object other than a pod was stored: a new template may let
/// waiting pods have their claims; a claim may name pods that are gone.
pub(super) fn object_changed(s: &mut Store, key: &(ObjectKind, String, String)) {
    match key.0 {
        ObjectKind::ResourceClaimTemplate => {
            let waiting: Vec<(String, String)> = s
                .pods
                .iter()
                .filter(|((ns, _), p)| *ns == key.1 && needs_claims(p))
                .map(|(k, _)| k.clone())
                .collect();
            for k in waiting {
                make_claims(s, &k);
            }
        }
        ObjectKind::ResourceClaim => release(s, key),
        _ => {}
    }
}

/// After a pod was created or changed.
pub(super) fn pod_changed(s: &mut Store, key: &(String, String)) {
    let Some(pod) = s.pods.get(key) else {
        return;
    };
    let (needs, finished) = (needs_claims(pod), finished(pod.status()));
    if needs {
        make_claims(s, key);
    }
    if finished && let Some(pod) = s.pods.get(key) {
        let pod = meta_spec(pod);
        release_for_pod(s, &pod);
    }
}

/// After a pod went away.
pub(super) fn pod_removed(s: &mut Store, pod: &Pod) {
    release_for_pod(s, pod);
}

/// Releases the claims the pod used or owned.
fn release_for_pod(s: &mut Store, pod: &Pod) {
    let Some(uid) = pod.metadata.uid.as_deref() else {
        return;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let keys: Vec<(ObjectKind, String, String)> = s
        .objects
        .range((ObjectKind::ResourceClaim, ns.to_string(), String::new())..)
        .take_while(|((k, n, _), _)| *k == ObjectKind::ResourceClaim && n == ns)
        .filter(|(_, o)| match o {
            KubeObject::ResourceClaim(c) => {
                owned_by(c, uid)
                    || c.status
                        .as_ref()
                        .and_then(|st| st.reserved_for.as_ref())
                        .is_some_and(|r| r.iter().any(|r| r.uid == uid))
            }
            _ => false,
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        release(s, &k);
    }
}

/// Whether the pod named by a reservation or owner reference is still
/// there (same UID) and not finished.
fn pod_live(s: &Store, namespace: &str, name: &str, uid: &str) -> bool {
    s.pods
        .get(&(namespace.to_string(), name.to_string()))
        .is_some_and(|p| meta_spec(p).metadata.uid.as_deref() == Some(uid) && !finished(p.status()))
}

fn finished(status: Option<&PodStatus>) -> bool {
    matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a pod has template claims its status does not name yet.
fn needs_claims(pod: &PodObject) -> bool {
    let p = meta_spec(pod);
    if p.metadata.deletion_timestamp.is_some() || finished(pod.status()) {
        return false;
    }
    let statuses = pod
        .status()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    p.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.resource_claim_template_name.is_some()
                && !statuses.into_iter().flatten().any(|s| s.name == c.name)
        })
}

/// Five characters as the API server's generateName appends them.
pub(super) fn suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    let mut v = h.finish();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(v % ALPHABET.len() as u64) as usize] as char;
            v /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn make_claims(s: &mut Store, key: &(String, String)) {
    let Some(stored) = s.pods.get(key).cloned() else {
        return;
    };
    let pod = stored.get();
    let (ns, pod_name) = key.clone();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut statuses: Vec<PodResourceClaimStatus> = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.clone())
        .unwrap_or_default();
    let mut made = false;
    for c in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(template_name) = &c.resource_claim_template_name else {
            continue;
        };
        if statuses.iter().any(|st| st.name == c.name) {
            continue;
        }
        // A claim made earlier for this pod (its status write lost) is
        // reused, as the controller looks for one before making another.
        // Only names with the generateName prefix can be one.
        let prefix = format!("{pod_name}-{}-", c.name);
        let existing = s
            .objects
            .range((ObjectKind::ResourceClaim, ns.clone(), prefix.clone())..)
            .take_while(|((k, n, name), _)| {
                *k == ObjectKind::ResourceClaim && *n == ns && name.starts_with(&prefix)
            })
            .find_map(|(_, o)| match o {
                KubeObject::ResourceClaim(rc)
                    if owned_by(rc, &uid)
                        && rc
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION))
                            == Some(&c.name) =>
                {
                    rc.metadata.name.clone()
                }
                _ => None,
            });
        let name = match existing {
            Some(n) => n,
            None => {
                let Some(KubeObject::ResourceClaimTemplate(t)) = s
                    .objects
                    .get(&(
                        ObjectKind::ResourceClaimTemplate,
                        ns.clone(),
                        template_name.clone(),
                    ))
                    .cloned()
                else {
                    tracing::debug!(pod = %format!("{ns}/{pod_name}"), template = %template_name,
                        "resource claim template not found; waiting for it");
                    continue;
                };
                let generate = prefix;
                let mut name = format!("{generate}{}", suffix());
                while s
                    .objects
                    .contains_key(&(ObjectKind::ResourceClaim, ns.clone(), name.clone()))
                {
                    name = format!("{generate}{}", suffix());
                }
                let claim = claim_from_template(&pod, &c.name, &t, name.clone());
                if let Err(e) = s.put_object(KubeObject::ResourceClaim(Arc::new(claim)), None) {
                    tracing::warn!(error = %e, "creating a resource claim failed");
                    continue;
                }
                name
            }
        };
        statuses.push(PodResourceClaimStatus {
            name: c.name.clone(),
            resource_claim_name: Some(name),
        });
        made = true;
    }
    if made {
        // A status write, as the claim controller's.
        let mut status = pod.status.clone().unwrap_or_default();
        status.resource_claim_statuses = Some(statuses);
        let new = stored.with_status(Some(status), s.next_rv());
        s.pods.insert(key.clone(), new.clone());
        s.emit(ClusterChange::Pod(WatchEvent::Modified {
            old: stored,
            new,
        }));
    }
}

fn owned_by(c: &ResourceClaim, pod_uid: &str) -> bool {
    c.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "Pod" && o.uid == pod_uid)
}

/// Drops a claim's reservations for pods that are gone or finished,
/// deallocates it if none is left, and deletes it if it was made for a pod
/// that is gone.
fn release(s: &mut Store, key: &(ObjectKind, String, String)) {
    let Some(KubeObject::ResourceClaim(c)) = s.objects.get(key).cloned() else {
        return;
    };
    let ns = key.1.clone();
    let reserved = c
        .status
        .as_ref()
        .and_then(|st| st.reserved_for.clone())
        .unwrap_or_default();
    let valid: Vec<_> = reserved
        .iter()
        .filter(|r| r.resource != "pods" || pod_live(s, &ns, &r.name, &r.uid))
        .cloned()
        .collect();
    let mut current = c.clone();
    if valid.len() != reserved.len() {
        let mut next = (*current).clone();
        if valid.is_empty() {
            // One write: allocation, device status and reservations go.
            next.status = Some(ResourceClaimStatus::default());
        } else if let Some(st) = next.status.as_mut() {
            st.reserved_for = Some(valid.clone());
        }
        match s.put_object(KubeObject::ResourceClaim(Arc::new(next)), None) {
            Ok(KubeObject::ResourceClaim(stored)) => current = stored,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "updating a resource claim failed");
                return;
            }
        }
        if valid.is_empty()
            && current
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
        {
            let mut next = (*current).clone();
            if let Some(f) = next.metadata.finalizers.as_mut() {
                f.retain(|f| f != FINALIZER);
            }
            if next.metadata.finalizers.as_ref().is_some_and(Vec::is_empty) {
                next.metadata.finalizers = None;
            }
            match s.put_object(KubeObject::ResourceClaim(Arc::new(next)), None) {
                Ok(KubeObject::ResourceClaim(stored)) => current = stored,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "removing a claim's finalizer failed"),
            }
        }
    }
    // Garbage collection of claims made for pods that are gone.
    let owner_gone = current.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "Pod"
            && s.pods
                .get(&(ns.clone(), o.name.clone()))
                .is_none_or(|p| meta_spec(p).metadata.uid.as_deref() != Some(o.uid.as_str()))
    });
    let reserved_now = current
        .status
        .as_ref()
        .and_then(|st| st.reserved_for.as_ref())
        .is_some_and(|r| !r.is_empty());
    if owner_gone
        && !reserved_now
        && let Some(o) = s.objects.remove(key)
    {
        s.emit(ClusterChange::Object(WatchEvent::Deleted(o)));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::EmbeddedCluster;
    use crate::cache::{KubeObject, ObjectKind};
    use crate::cluster::ClusterSource;
    use crate::framework::ClusterClient;
    use crate::model::PodInfo;

    fn claims(
        c: &EmbeddedCluster,
    ) -> Vec<std::sync::Arc<k8s_openapi::api::resource::v1::ResourceClaim>> {
        c.objects(ObjectKind::ResourceClaim)
            .into_iter()
            .map(|o| match o {
                KubeObject::ResourceClaim(c) => c,
                _ => unreachable!(),
            })
            .collect()
    }

    #[tokio::test]
    async fn claims_from_templates_are_made_owned_recorded_and_released() {
        let c = EmbeddedCluster::new();
        c.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}))
            .unwrap();
        c.apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}))
            .unwrap();
        assert!(claims(&c).is_empty(), "no template yet");
        c.apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "ml"},
            "spec": {"metadata": {"labels": {"team": "a"}},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}))
            .unwrap();
        let made = claims(&c);
        assert_eq!(made.len(), 1);
        let claim = &made[0];
        let name = claim.metadata.name.clone().unwrap();
        assert!(
            name.starts_with("train-gpu-") && name.len() == "train-gpu-".len() + 5,
            "{name}"
        );
        assert_eq!(claim.metadata.generate_name.as_deref(), Some("train-gpu-"));
        assert_eq!(
            claim.metadata.annotations.as_ref().unwrap()["resource.kubernetes.io/pod-claim-name"],
            "gpu"
        );
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["team"], "a");
        let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
        let pod = c.get_pod("ml", "train").unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("Pod", "train", Some(true))
        );
        assert_eq!(Some(&owner.uid), pod.metadata.uid.as_ref());
        let statuses = pod
            .status
            .as_ref()
            .unwrap()
            .resource_claim_statuses
            .as_ref()
            .unwrap();
        assert_eq!(
            statuses[0].resource_claim_name.as_deref(),
            Some(name.as_str())
        );
        // Re-applying the pod does not make a second claim.
        let info = PodInfo::new(pod.clone()).unwrap();
        c.apply(serde_json::to_value(&*pod).unwrap()).unwrap();
        assert_eq!(claims(&c).len(), 1);

        // Allocated and reserved by the scheduler, then the pod goes away:
        // deallocated in one status write, finalizer removed, then the claim
        // is collected.
        let mut allocated = (**claim).clone();
        allocated.metadata.finalizers =
            Some(vec!["resource.kubernetes.io/delete-protection".into()]);
        let stored = c
            .update_object(KubeObject::ResourceClaim(std::sync::Arc::new(allocated)))
            .await
            .unwrap();
        let KubeObject::ResourceClaim(stored) = stored else {
            unreachable!()
        };
        let mut with_status = (*stored).clone();
        with_status.status = Some(serde_json::from_value(json!({
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]}},
            "reservedFor": [{"resource": "pods", "name": "train", "uid": info.uid.to_string()}]})).unwrap());
        c.update_object_status(KubeObject::ResourceClaim(std::sync::Arc::new(with_status)))
            .await
            .unwrap();
        let kept = claims(&c);
        assert!(
            kept[0].status.as_ref().unwrap().allocation.is_some(),
            "the pod is there: kept"
        );
        let mut rx = c.subscribe();
        while !matches!(rx.recv().await, Some(crate::cluster::ClusterChange::Synced)) {}
        assert!(c.delete(super::super::Kind::Pod, "ml", "train"));
        let mut seen = Vec::new();
        while let Ok(change) = rx.try_recv() {
            if let crate::cluster::ClusterChange::Object(e) = change {
                seen.push(match e {
                    crate::cluster::WatchEvent::Modified {
                        new: KubeObject::ResourceClaim(c),
                        ..
                    } => format!(
                        "modified allocated={} finalizers={}",
                        c.status.as_ref().is_some_and(|s| s.allocation.is_some()),
                        c.metadata.finalizers.as_ref().map_or(0, Vec::len)
                    ),
                    crate::cluster::WatchEvent::Deleted(_) => "deleted".into(),
                    other => format!("{other:?}"),
                });
            }
        }
        assert_eq!(
            seen,
            [
                "modified allocated=false finalizers=1",
                "modified allocated=false finalizers=0",
                "deleted"
            ]
        );
        assert!(claims(&c).is_empty());
    }
}
