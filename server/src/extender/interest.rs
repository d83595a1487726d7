//! Which pods an extender is asked about: those requesting a resource it
//! manages, or every pod when it manages none. Remote and HTTP extenders
//! share this rule.

use crate::config::extenders::ManagedResource;
use crate::model::PodInfo;

/// Whether the pod requests (or limits) one of `managed`, in a container or
/// an init container; with none managed, every pod interests the extender.
/// Remote and HTTP extenders share this (upstream's `IsInterested`).
pub fn requests_managed(pod: &PodInfo, managed: &[ManagedResource]) -> bool {
    if managed.is_empty() {
        return true;
    }
    // A packed pod (kube mode) decodes here, once per cycle of a pod
    // this extender manages resources for.
    let object = pod.pod.get();
    let Some(spec) = object.spec.as_ref() else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        .flat_map(|list| list.keys())
        .any(|k| managed.iter().any(|m| m.name == *k))
}
