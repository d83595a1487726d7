//! The API server's pod defaults that the scheduler can observe
//! (`pkg/apis/core/v1/defaults.go`, `SetDefaults_Pod`), for pods that reach
//! berth without passing an API server. Applied once, by
//! [`super::admission::admit_pod`]:
//!
//! * each container and init container that names `limits` but no
//!   `requests` for a resource requests its limit (a container with `cpu:
//!   64` as its only limit requests 64 CPUs, not nothing);
//! * with pod-level `resources.limits`, the pod-level requests default,
//!   for CPU and memory, to the containers' effective requests when any
//!   container requests the resource, else to the pod-level limit
//!   (PodLevelResources, on by default since v1.34);
//! * with `hostNetwork`, a container port without a `hostPort` uses its
//!   `containerPort` on the host.
//!
//! The other defaults (restart policy, DNS policy, grace periods, pull
//! policies, ...) change nothing the scheduler reads, and
//! `schedulerName` is read as `default-scheduler` when unset.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::quantity::Quantity;
use super::resource::{CPU, MEMORY};

type ResourceList = BTreeMap<String, K8sQuantity>;

/// Requests default to limits, resource by resource.
fn requests_from_limits(c: &mut Container) {
    let Some(resources) = c.resources.as_mut() else {
        return;
    };
    let Some(limits) = resources.limits.as_ref() else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    for (name, limit) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
}

fn request_of(c: &Container, name: &str) -> Option<i64> {
    let q = c.resources.as_ref()?.requests.as_ref()?.get(name)?;
    let parsed = Quantity::parse(&q.0).ok()?;
    if name == CPU {
        parsed.milli_value().ok()
    } else {
        parsed.value().ok()
    }
}

/// The containers' effective request of `name` (milli-CPU or bytes), as
/// the scheduler sums them (app containers and sidecars summed, the largest
/// init container phase), or `None` when no container requests it.
fn containers_request(pod: &Pod, name: &str) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let mut any = false;
    let mut apps: i64 = 0;
    for c in &spec.containers {
        if let Some(v) = request_of(c, name) {
            any = true;
            apps = apps.saturating_add(v);
        }
    }
    let mut sidecars: i64 = 0;
    let mut init_max: i64 = 0;
    for c in spec.init_containers.iter().flatten() {
        let v = request_of(c, name);
        any |= v.is_some();
        let v = v.unwrap_or(0);
        if c.restart_policy.as_deref() == Some("Always") {
            apps = apps.saturating_add(v);
            sidecars = sidecars.saturating_add(v);
            init_max = init_max.max(sidecars);
        } else {
            init_max = init_max.max(v.saturating_add(sidecars));
        }
    }
    any.then_some(apps.max(init_max))
}

fn quantity_text(name: &str, v: i64) -> String {
    if name == CPU {
        if v % 1000 == 0 {
            (v / 1000).to_string()
        } else {
            format!("{v}m")
        }
    } else {
        v.to_string()
    }
}

/// Pod-level requests from the containers' or the pod-level limits.
fn pod_level_requests(pod: &mut Pod) {
    let has_limits = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| !l.is_empty());
    if !has_limits {
        return;
    }
    let mut defaults: Vec<(String, K8sQuantity)> = Vec::new();
    for name in [CPU, MEMORY] {
        if let Some(v) = containers_request(pod, name) {
            defaults.push((name.to_string(), K8sQuantity(quantity_text(name, v))));
        }
    }
    let Some(resources) = pod.spec.as_mut().and_then(|s| s.resources.as_mut()) else {
        return;
    };
    let limits: ResourceList = resources.limits.clone().unwrap_or_default();
    let mut requests = resources.requests.clone().unwrap_or_default();
    for (name, q) in defaults {
        requests.entry(name).or_insert(q);
    }
    for name in [CPU, MEMORY] {
        if let Some(limit) = limits.get(name) {
            requests
                .entry(name.to_string())
                .or_insert_with(|| limit.clone());
        }
    }
    if !requests.is_empty() {
        resources.requests = Some(requests);
    }
}

fn host_network_ports(containers: &mut [Container]) {
    for c in containers {
        for p in c.ports.iter_mut().flatten() {
            if p.host_port.is_none_or(|h| h == 0) {
                p.host_port = Some(p.container_port);
            }
        }
    }
}

/// Applies the defaults above to `pod`.
pub fn apply_pod_defaults(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    for c in spec.containers.iter_mut() {
        requests_from_limits(c);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        requests_from_limits(c);
    }
    if spec.host_network == Some(true) {
        host_network_ports(&mut spec.containers);
        if let Some(init) = spec.init_containers.as_mut() {
            host_network_ports(init);
        }
    }
    pod_level_requests(pod);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaulted(spec: serde_json::Value) -> serde_json::Value {
        let mut pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        apply_pod_defaults(&mut pod);
        serde_json::to_value(&pod).unwrap()["spec"].clone()
    }

    #[test]
    fn requests_default_to_limits_for_every_container_kind() {
        let spec = defaulted(json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "64", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "2Gi"}}},
                {"name": "c"}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"example.com/gpu": "1"}}}]
        }));
        assert_eq!(
            spec["containers"][0]["resources"]["requests"],
            json!({"cpu": "64", "memory": "1Gi"})
        );
        assert_eq!(
            spec["containers"][1]["resources"]["requests"],
            json!({"cpu": "1", "memory": "2Gi"}),
            "a request given stays"
        );
        assert!(spec["containers"][2].get("resources").is_none());
        assert_eq!(
            spec["initContainers"][0]["resources"]["requests"],
            json!({"example.com/gpu": "1"})
        );
    }

    #[test]
    fn pod_level_requests_default_from_containers_then_limits() {
        let spec = defaulted(json!({
            "resources": {"limits": {"cpu": "4", "memory": "8Gi"}},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}
            ]
        }));
        assert_eq!(
            spec["resources"]["requests"],
            json!({"cpu": "1500m", "memory": "8Gi"})
        );
        let untouched = defaulted(
            json!({"resources": {"requests": {"cpu": "1"}}, "containers": [{"name": "a"}]}),
        );
        assert_eq!(untouched["resources"], json!({"requests": {"cpu": "1"}}));
    }

    #[test]
    fn host_network_ports_become_host_ports() {
        let spec = defaulted(json!({
            "hostNetwork": true,
            "containers": [{"name": "a", "ports": [{"containerPort": 8080}, {"containerPort": 53, "hostPort": 5353}]}]
        }));
        assert_eq!(spec["containers"][0]["ports"][0]["hostPort"], json!(8080));
        assert_eq!(spec["containers"][0]["ports"][1]["hostPort"], json!(5353));
        let off =
            defaulted(json!({"containers": [{"name": "a", "ports": [{"containerPort": 8080}]}]}));
        assert!(off["containers"][0]["ports"][0].get("hostPort").is_none());
    }
}
