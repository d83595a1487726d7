//! Extended resources backed by DRA (DRAExtendedResource, beta and on by
//! default in v1.36): a pod asking for `example.com/gpu: 1` (or for a
//! class's implicit `deviceclass.resource.kubernetes.io/<class>`) where a
//! DeviceClass declares that name gets a device of the class, on nodes that
//! do not offer the resource through a device plugin.
//!
//! As upstream does it:
//! * PreFilter adds one special claim to the pod's claims: the one an
//!   earlier attempt created (annotated and owned by the pod), or an
//!   in-memory one named `<extended-resources>` without requests;
//! * Filter works out, per node, which of those resources the node lacks
//!   (allocatable 0): the claim's requests for that node are made from the
//!   containers asking for them (`container-<i>-request-<j>`, init
//!   containers' needs met by later long-lived containers' requests where
//!   they can be) and allocated together with the pod's own claims; a node
//!   offering them all needs nothing from DRA. A claim left from an
//!   earlier attempt makes every node fail, and PostFilter deletes it;
//! * PreBind creates the claim (`generateName: <pod>-extended-resources-`),
//!   writes its allocation and reservation like any claim's, and records it
//!   in the pod's `status.extendedResourceClaimStatus`; Unreserve deletes
//!   a claim it created.
//!
//! The node variants of the claim (one per set of resources left to DRA,
//! usually one) and their allocators are built once per cycle, when a
//! node first needs them.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ContainerExtendedResourceRequest};
use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use parking_lot::Mutex;

use super::allocator::Allocator;
use crate::cache::dra::{DraStore, is_dra_extended_resource};
use crate::model::dra::Claim;
use crate::model::quantity::Quantity;
use crate::model::{NodeSpec, PodInfo};

/// The name of the claim before PreBind creates it (not a valid name, so it
/// cannot clash with a real claim).
pub(super) const IN_MEMORY_NAME: &str = "<extended-resources>";
/// The annotation marking a claim made for a pod's extended resources.
pub(super) const CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// The special claim's per-cycle state.
#[derive(Debug)]
pub(super) struct Extended {
    /// Its index in the pod's claims (the last).
    pub index: usize,
    /// The pod's requests DRA may serve: resource name and class, sorted
    /// by name.
    resources: Vec<(String, Arc<str>)>,
    /// Node variants by the set of resources left to DRA (bit i:
    /// `resources[i]`).
    variants: Mutex<HashMap<u64, Arc<Variant>>>,
    /// The variant of the node Reserve chose.
    pub chosen: Mutex<Option<Arc<Variant>>>,
    /// The claim PreBind created.
    pub created: Mutex<Option<Arc<api::ResourceClaim>>>,
}

/// The special claim as one set of nodes needs it.
#[derive(Debug, Default)]
pub(super) struct Variant {
    /// The claim with its requests; `None` when the node offers every
    /// resource itself.
    pub object: Option<Arc<api::ResourceClaim>>,
    /// Which request serves which container's resource.
    pub mappings: Vec<ContainerExtendedResourceRequest>,
    /// The allocator for the pod's own claims to allocate and this one
    /// (`None`: use the plugin's allocator for the pod's own claims).
    pub allocator: Option<Allocator>,
    /// Why that allocator could not be prepared.
    pub fatal: Option<String>,
}

impl Extended {
    /// The special claim for `pod`, if it asks for a resource a DeviceClass
    /// backs: the one an earlier attempt created, or an in-memory one.
    pub fn prepare(dra: &DraStore, pod: &PodInfo, index: usize) -> Option<(Self, Arc<Claim>)> {
        let mut resources: Vec<(String, Arc<str>)> = pod
            .requests
            .scalar
            .iter()
            .filter(|(_, q)| *q != 0)
            .filter_map(|(name, _)| {
                let name = name.as_str().to_string();
                if !is_dra_extended_resource(&name) {
                    return None;
                }
                let class = dra.class_for_extended_resource(&name)?;
                Some((name, class.name.clone()))
            })
            .collect();
        if resources.is_empty() {
            return None;
        }
        resources.sort();
        let existing = dra.claims().into_iter().find(|c| {
            *c.namespace == *pod.namespace
                && c.controller.as_ref().is_some_and(|o| o.uid == pod.uid)
                && c.object
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(CLAIM_ANNOTATION))
                    .is_some_and(|v| v == "true")
        });
        let claim =
            existing.unwrap_or_else(|| dra.parse_unstored_claim(Arc::new(in_memory_claim(pod))));
        Some((
            Self {
                index,
                resources,
                variants: Mutex::default(),
                chosen: Mutex::default(),
                created: Mutex::default(),
            },
            claim,
        ))
    }

    /// Which resources `node` leaves to DRA (it offers none of them).
    pub fn mask(&self, node: &NodeSpec) -> u64 {
        let mut mask = 0;
        for (i, (name, _)) in self.resources.iter().enumerate().take(64) {
            if node
                .allocatable
                .scalar(crate::model::ResourceName::intern(name))
                == 0
            {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The variant for `mask`, built by `build` the first time.
    pub fn variant(&self, mask: u64, build: impl FnOnce(Variant) -> Variant) -> Arc<Variant> {
        let mut variants = self.variants.lock();
        variants
            .entry(mask)
            .or_insert_with(|| {
                let base = Variant {
                    object: None,
                    mappings: Vec::new(),
                    allocator: None,
                    fatal: None,
                };
                Arc::new(build(base))
            })
            .clone()
    }

    /// The claim's requests and mappings for the resources in `mask`.
    pub fn requests_for(
        &self,
        pod: &PodInfo,
        mask: u64,
    ) -> (
        Vec<api::DeviceRequest>,
        Vec<ContainerExtendedResourceRequest>,
    ) {
        let wanted: Vec<(&str, &str)> = self
            .resources
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, (n, c))| (n.as_str(), &**c))
            .collect();
        requests_and_mappings(pod, &wanted)
    }
}

/// The in-memory claim: owned by the pod, annotated, no requests yet, a
/// temporary UID for in-flight bookkeeping.
fn in_memory_claim(pod: &PodInfo) -> api::ResourceClaim {
    api::ResourceClaim {
        metadata: ObjectMeta {
            name: Some(IN_MEMORY_NAME.into()),
            namespace: Some(pod.namespace.to_string()),
            uid: Some(format!("extended-resources/{}", pod.uid)),
            generate_name: Some(format!("{}-extended-resources-", pod.name)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            annotations: Some([(CLAIM_ANNOTATION.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        spec: Some(api::ResourceClaimSpec::default()),
        status: None,
    }
}

/// The whole-unit quantity a container asks of `resource` (0 if none, or
/// not a whole number).
fn container_request(c: &Container, resource: &str) -> i64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .and_then(|q| {
            let nano = q.nano_value().ok()?;
            (nano % 1_000_000_000 == 0).then(|| i64::try_from(nano / 1_000_000_000).ok())?
        })
        .unwrap_or(0)
}

/// One container's request for `resource` of `class`, after what
/// `reusable` requests (of long-lived containers starting with it) already
/// give it; and the mappings of the container to the requests it uses.
fn container_request_and_mappings(
    index: usize,
    c: &Container,
    resource: &str,
    class: &str,
    reusable: &[Option<api::DeviceRequest>],
) -> (
    Option<api::DeviceRequest>,
    Vec<ContainerExtendedResourceRequest>,
) {
    let mut mappings = Vec::new();
    let want = container_request(c, resource);
    if want == 0 {
        return (None, mappings);
    }
    let mapping = |request: &str| ContainerExtendedResourceRequest {
        container_name: c.name.clone(),
        resource_name: resource.to_string(),
        request_name: request.to_string(),
    };
    let mut have = 0;
    for r in reusable.iter().flatten() {
        have += r.exactly.as_ref().and_then(|e| e.count).unwrap_or(0);
        mappings.push(mapping(&r.name));
        if have >= want {
            return (None, mappings);
        }
    }
    // The request's number: the resource's place among the container's
    // requested names, sorted.
    let mut names: Vec<&String> = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(|r| r.keys().collect())
        .unwrap_or_default();
    names.sort();
    let position = names.iter().position(|n| *n == resource).unwrap_or(0);
    let name = format!("container-{index}-request-{position}");
    mappings.push(mapping(&name));
    (
        Some(api::DeviceRequest {
            name,
            exactly: Some(api::ExactDeviceRequest {
                device_class_name: class.to_string(),
                allocation_mode: Some("ExactCount".into()),
                count: Some(want - have),
                ..Default::default()
            }),
            ..Default::default()
        }),
        mappings,
    )
}

/// The special claim's requests for `resources` (name, class), sorted by
/// request name, and which container uses which: regular containers and
/// sidecars get their own requests; an init container first uses the
/// requests of the long-lived containers from its position on, and the
/// biggest remaining init container request serves every init container.
pub(super) fn requests_and_mappings(
    pod: &PodInfo,
    resources: &[(&str, &str)],
) -> (
    Vec<api::DeviceRequest>,
    Vec<ContainerExtendedResourceRequest>,
) {
    let object = pod.pod.get();
    let Some(spec) = object.spec.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    let containers: Vec<&Container> = inits.iter().chain(&spec.containers).collect();
    let short_lived =
        |i: usize| i < inits.len() && containers[i].restart_policy.as_deref() != Some("Always");
    let mut requests = Vec::new();
    let mut mappings = Vec::new();
    let mut sorted: Vec<&(&str, &str)> = resources.iter().collect();
    sorted.sort();
    for &&(resource, class) in &sorted {
        let mut long_requests: Vec<Option<api::DeviceRequest>> = vec![None; containers.len()];
        let mut long_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| !short_lived(*i))
        {
            let (r, m) = container_request_and_mappings(i, c, resource, class, &[]);
            long_requests[i] = r;
            long_mappings.extend(m);
        }
        let mut short_mappings = Vec::new();
        let mut short_names: Vec<String> = Vec::new();
        let mut biggest: Option<api::DeviceRequest> = None;
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(i, _)| short_lived(*i))
        {
            let (r, m) = container_request_and_mappings(i, c, resource, class, &long_requests[i..]);
            if let Some(r) = r {
                short_names.push(r.name.clone());
                let count =
                    |r: &api::DeviceRequest| r.exactly.as_ref().and_then(|e| e.count).unwrap_or(0);
                if biggest.as_ref().is_none_or(|b| count(b) < count(&r)) {
                    biggest = Some(r);
                }
            }
            short_mappings.extend(m);
        }
        if let Some(b) = &biggest
            && short_names.len() > 1
        {
            for m in &mut short_mappings {
                if short_names.contains(&m.request_name) && m.request_name != b.name {
                    m.request_name = b.name.clone();
                }
            }
        }
        requests.extend(biggest);
        requests.extend(long_requests.into_iter().flatten());
        mappings.extend(long_mappings);
        mappings.extend(short_mappings);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    (requests, mappings)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> PodInfo {
        let mut p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": spec,
        }))
        .unwrap();
        p.metadata.uid = Some("u".into());
        PodInfo::new(Arc::new(p)).unwrap()
    }

    type Names = (Vec<(String, i64)>, Vec<(String, String, String)>);

    fn names(
        r: &(
            Vec<api::DeviceRequest>,
            Vec<ContainerExtendedResourceRequest>,
        ),
    ) -> Names {
        (
            r.0.iter()
                .map(|r| (r.name.clone(), r.exactly.as_ref().unwrap().count.unwrap()))
                .collect(),
            r.1.iter()
                .map(|m| {
                    (
                        m.container_name.clone(),
                        m.resource_name.clone(),
                        m.request_name.clone(),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn one_request_per_long_lived_container_and_init_containers_reuse_them() {
        let p = pod(json!({
            "initContainers": [
                {"name": "init-a", "resources": {"requests": {"example.com/gpu": "2"}}},
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"example.com/gpu": "1"}}},
                {"name": "init-b", "resources": {"requests": {"example.com/gpu": "3"}}},
            ],
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}},
                {"name": "none"},
            ],
        }));
        let r = requests_and_mappings(&p, &[("example.com/gpu", "gpu")]);
        let (requests, mappings) = names(&r);
        // init-a (index 0) reuses sidecar's (1) and main's (3) requests,
        // 1 + 1 = 2: enough. init-b (index 2) reuses main's (3) only, and
        // needs 2 more of its own.
        assert_eq!(
            requests,
            [
                ("container-1-request-0".to_string(), 1),
                ("container-2-request-0".to_string(), 2),
                // "cpu" sorts before "example.com/gpu".
                ("container-3-request-1".to_string(), 1),
            ]
        );
        let m = |c: &str, r: &str| {
            (
                "".to_string() + c,
                "example.com/gpu".to_string(),
                r.to_string(),
            )
        };
        assert_eq!(
            mappings,
            [
                m("sidecar", "container-1-request-0"),
                m("main", "container-3-request-1"),
                m("init-a", "container-1-request-0"),
                m("init-a", "container-3-request-1"),
                m("init-b", "container-3-request-1"),
                m("init-b", "container-2-request-0"),
            ]
        );
    }

    #[test]
    fn the_biggest_init_request_serves_every_init_container() {
        let p = pod(json!({
            "initContainers": [
                {"name": "a", "resources": {"requests": {"example.com/gpu": "2"}}},
                {"name": "b", "resources": {"requests": {"example.com/gpu": "4"}}},
            ],
            "containers": [{"name": "main"}],
        }));
        let (requests, mappings) = names(&requests_and_mappings(&p, &[("example.com/gpu", "gpu")]));
        assert_eq!(requests, [("container-1-request-0".to_string(), 4)]);
        assert!(
            mappings.iter().all(|m| m.2 == "container-1-request-0"),
            "{mappings:?}"
        );
    }
}
