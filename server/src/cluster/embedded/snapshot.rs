//! Loading a cluster file as the snapshot of a cluster it is.
//!
//! Objects are stored with their status as written (claims' allocations
//! and reservations, volumes' and claims' binding, pods' nodes), whatever
//! their order in the file: the controllers the embedded cluster plays run
//! once the whole file is in, not on each object as it is read (a claim
//! read before the pod it is reserved for would otherwise be released).
//! Then they repair what a cluster's controllers would: a reservation for a
//! pod that does not exist is dropped (and a claim left with none
//! deallocated), template claims are made for pods that have none. What no
//! cluster can hold is refused, naming the objects: one device allocated
//! to two claims.
//!
//! A pod written without a UID gets the one a claim's reservation or owner
//! reference names it by, so a hand-written file need not repeat UIDs.

use std::collections::HashMap;
use std::sync::Arc;

use super::{LoadError, Store, dra};
use crate::cache::{KubeObject, ObjectKind};
use crate::model::PodObject;

type ObjKey = (ObjectKind, String, String);

/// Runs after every object of the file is stored. `origins` says where
/// each object came from, for errors.
pub(super) fn finish_load(
    s: &mut Store,
    origins: &HashMap<ObjKey, String>,
) -> Result<(), LoadError> {
    adopt_uids(s);
    check_allocations(s, origins)?;
    s.loading = false;
    let claims: Vec<ObjKey> = s
        .objects
        .keys()
        .filter(|k| k.0 == ObjectKind::ResourceClaim)
        .cloned()
        .collect();
    for k in &claims {
        dra::object_changed(s, k);
    }
    let pods: Vec<(String, String)> = s.pods.keys().cloned().collect();
    for k in &pods {
        dra::pod_changed(s, k);
    }
    Ok(())
}

/// Gives pods stored without a UID the one claims name them by.
fn adopt_uids(s: &mut Store) {
    let generated = std::mem::take(&mut s.generated_uids);
    if generated.is_empty() {
        return;
    }
    let mut named: HashMap<(String, String), String> = HashMap::new();
    for ((kind, ns, _), o) in &s.objects {
        let (ObjectKind::ResourceClaim, KubeObject::ResourceClaim(c)) = (kind, o) else {
            continue;
        };
        let reserved = c
            .status
            .as_ref()
            .and_then(|st| st.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.resource == "pods")
            .map(|r| (r.name.clone(), r.uid.clone()));
        let owners = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == "Pod")
            .map(|o| (o.name.clone(), o.uid.clone()));
        for (name, uid) in reserved.chain(owners) {
            let key = (ns.clone(), name);
            if generated.contains(&key) && !uid.is_empty() {
                named.entry(key).or_insert(uid);
            }
        }
    }
    for (key, uid) in named {
        if let Some(p) = s.pods.get(&key) {
            let mut p = p.to_pod();
            p.metadata.uid = Some(uid);
            s.pods.insert(key, PodObject::shared(Arc::new(p)));
        }
    }
}

/// Refuses a device allocated to two claims (neither with admin access,
/// which may share, nor a share of a device that allows several).
fn check_allocations(s: &Store, origins: &HashMap<ObjKey, String>) -> Result<(), LoadError> {
    let mut holder: HashMap<(String, String, String), &ObjKey> = HashMap::new();
    for (key, o) in &s.objects {
        let KubeObject::ResourceClaim(c) = o else {
            continue;
        };
        let results = c
            .status
            .as_ref()
            .and_then(|st| st.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_deref())
            .unwrap_or(&[]);
        for r in results {
            if r.admin_access == Some(true) || r.share_id.is_some() {
                continue;
            }
            let device = (r.driver.clone(), r.pool.clone(), r.device.clone());
            if let Some(other) = holder.get(&device)
                && *other != key
            {
                let name = |k: &ObjKey| format!("ResourceClaim {}/{}", k.1, k.2);
                return Err(LoadError::Invalid {
                    origin: origins.get(key).cloned().unwrap_or_default(),
                    message: format!(
                        "{} and {} are both allocated device {}/{}/{}: a device serves one claim",
                        name(other),
                        name(key),
                        device.0,
                        device.1,
                        device.2
                    ),
                });
            }
            holder.insert(device, key);
        }
    }
    Ok(())
}
