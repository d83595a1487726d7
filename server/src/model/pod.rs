//! [`PodInfo`]: a pod as the scheduler reads it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodResourceClaimStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::affinity::Placement;
use super::pod_object::PodObject;
use super::quantity::Quantity;
use super::resource::{self, DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, Resource};
use super::taint::{TaintEffect, Toleration, TolerationOperator};
use super::{InvalidObject, Labels};

/// The scheduler name of pods that do not name one.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A shared, immutable pod.
pub type PodRef = Arc<PodInfo>;

/// A transport protocol of a host port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// A port a container binds on its node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// The host IP; `0.0.0.0` when unset, meaning every address.
    pub ip: Arc<str>,
    /// The protocol.
    pub protocol: Protocol,
    /// The port number.
    pub port: i32,
}

/// Where one of a pod's `spec.resourceClaims` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// `resourceClaimName`: an existing claim.
    Claim(Arc<str>),
    /// `resourceClaimTemplateName`: the resourceclaim controller makes a
    /// claim and records its name in `status.resourceClaimStatuses`:
    /// `None` until it has, `Some(None)` when it decided no claim is
    /// needed, `Some(Some(name))` once made.
    Template {
        /// The template.
        template: Arc<str>,
        /// What `status.resourceClaimStatuses` says.
        generated: Option<Option<Arc<str>>>,
    },
    /// Neither (a future field).
    Unsupported,
}

/// One entry of a pod's `spec.resourceClaims`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    /// The name the pod's containers use for it.
    pub name: Arc<str>,
    /// Where the claim comes from.
    pub source: ClaimSource,
}

/// A pod, pre-parsed for scheduling. Built once per add or update of the pod.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The Kubernetes object, kept for the edges (the API, extenders,
    /// writes): shared with whoever made it, or packed (see
    /// [`PodObject`]).
    pub pod: PodObject,
    /// metadata.generation (the PodScheduled condition's
    /// observedGeneration).
    pub generation: Option<i64>,
    /// A container or init container has a restart rule with the action
    /// `RestartAllContainers` (NodeDeclaredFeatures).
    pub restarts_all_containers: bool,
    /// spec.hostNetwork is true and spec.hostUsers false
    /// (NodeDeclaredFeatures).
    pub host_network_in_user_namespace: bool,
    /// metadata.uid, the pod's identity in the cache and the queue.
    pub uid: Arc<str>,
    /// metadata.namespace.
    pub namespace: Arc<str>,
    /// metadata.name.
    pub name: Arc<str>,
    /// spec.priority (0 when unset).
    pub priority: i32,
    /// spec.schedulerName (`default-scheduler` when unset).
    pub scheduler_name: Arc<str>,
    /// spec.nodeName: set once the pod is bound (or assumed).
    pub node_name: Option<Arc<str>>,
    /// status.nominatedNodeName.
    pub nominated_node_name: Option<Arc<str>>,
    /// The effective resource requests, computed as upstream does: the larger
    /// of the init containers' and the app containers' needs, sidecars
    /// counted in both, plus the pod overhead.
    pub requests: Resource,
    /// CPU and memory requests where containers that request none count as
    /// 100m and 200Mi: what scoring uses, so that empty pods still spread.
    pub non_zero_milli_cpu: i64,
    /// See [`PodInfo::non_zero_milli_cpu`].
    pub non_zero_memory: i64,
    /// metadata.labels.
    pub labels: Labels,
    /// Host ports used by the pod's containers and sidecars.
    pub host_ports: Vec<HostPort>,
    /// spec.tolerations.
    pub tolerations: Vec<Toleration>,
    /// spec.schedulingGates names.
    pub scheduling_gates: Vec<Arc<str>>,
    /// spec.preemptionPolicy is `Never`.
    pub preemption_never: bool,
    /// Node selector, affinities and spread constraints, pre-parsed.
    pub placement: Arc<Placement>,
    /// Names of the PersistentVolumeClaims the pod uses (in its namespace),
    /// including those of generic ephemeral volumes (`<pod>-<volume>`).
    pub pvc_claims: Vec<Arc<str>>,
    /// The images the pod runs (init containers, app containers, image
    /// volumes), normalized as node statuses name them: a name without a
    /// tag gets `:latest`.
    pub images: Vec<Arc<str>>,
    /// metadata.deletionTimestamp is set.
    pub terminating: bool,
    /// spec.resourceClaims, with what status.resourceClaimStatuses says
    /// about claims made from templates.
    pub resource_claims: Vec<PodClaim>,
    /// spec.schedulingGroup.podGroupName: the PodGroup (in the pod's
    /// namespace) the pod belongs to. Honoured only with the
    /// `GenericWorkload` gate on; otherwise the pod is scheduled alone.
    pub scheduling_group: Option<Arc<str>>,
}

impl PodInfo {
    /// Builds a `PodInfo`, rejecting what the API server would not have
    /// accepted and the scheduler cannot use.
    pub fn new(pod: Arc<Pod>) -> Result<Self, InvalidObject> {
        let object = PodObject::shared(pod.clone());
        Self::build(&pod, object)
    }

    /// Builds a `PodInfo` that keeps `pod` packed (see [`PodObject`]): for
    /// pods decoded from the wire, which nothing else holds.
    /// On failure the pod comes back with the error.
    pub fn packed(pod: Pod) -> Result<Self, (InvalidObject, Box<Pod>)> {
        // Stands in for the object until it is packed (no allocation).
        static PLACEHOLDER: std::sync::LazyLock<Arc<Pod>> = std::sync::LazyLock::new(Arc::default);
        match Self::build(&pod, PodObject::shared(PLACEHOLDER.clone())) {
            Ok(mut info) => {
                info.pod = PodObject::pack(pod);
                Ok(info)
            }
            Err(e) => Err((e, Box::new(pod))),
        }
    }

    /// Builds a `PodInfo` that keeps `object` as it is (shared, patched or
    /// packed); a patched one is read from its materialized copy.
    pub fn from_object(object: PodObject) -> Result<Self, InvalidObject> {
        match object.as_shared() {
            Some(pod) => Self::build(&pod.clone(), object),
            None => Self::build(&object.get(), object),
        }
    }

    /// The `PodInfo` of `new`, a later version of this pod's object. When
    /// `new` differs from the object this was built from only in its status
    /// (a status write: a condition, `nominatedNodeName`), its nodeName (a
    /// binding) and in its resourceVersion or managed fields, nothing of it
    /// is parsed again: this one's fields are kept and the fields read from
    /// what changed (`nominatedNodeName`, `nodeName`) are read again.
    /// Otherwise it is built anew, as [`PodInfo::from_object`] does. A
    /// status write or a binding made over this very version shares its
    /// metadata and spec (see [`PodObject::base`]): nothing is compared then
    /// but the claims' statuses.
    pub fn updated(&self, new: PodObject) -> Result<Self, InvalidObject> {
        fn node_name(p: &Pod) -> Option<&str> {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref())
        }
        fn claim_statuses(s: Option<&PodStatus>) -> Option<&Vec<PodResourceClaimStatus>> {
            s.and_then(|s| s.resource_claim_statuses.as_ref())
        }
        let unchanged_but_status_and_node = match (self.pod.base(), new.base()) {
            (Some(old), Some(base)) => {
                (Arc::ptr_eq(old, base)
                    // A binding written whole changes `nodeName`: seen
                    // before the whole spec is compared.
                    || (node_name(old) == node_name(base)
                        && meta_equal_but_version(&old.metadata, &base.metadata)
                        && old.spec == base.spec))
                    && claim_statuses(self.pod.status()) == claim_statuses(new.status())
            }
            _ => false,
        };
        if !unchanged_but_status_and_node {
            return Self::from_object(new);
        }
        let read = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(Arc::from);
        let nominated_node_name = read(new.status().and_then(|s| s.nominated_node_name.as_deref()));
        let node_name = match new.node_name().filter(|s| !s.is_empty()) {
            n if n == self.node_name.as_deref() => self.node_name.clone(),
            n => read(n),
        };
        Ok(Self {
            pod: new,
            node_name,
            nominated_node_name,
            ..self.clone()
        })
    }

    fn build(pod: &Pod, object: PodObject) -> Result<Self, InvalidObject> {
        let meta = &pod.metadata;
        let name = meta
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidObject::new("metadata.name", "Required value"))?;
        let namespace = meta
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        let uid = meta
            .uid
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidObject::new("metadata.uid", "Required value"))?;
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| InvalidObject::new("spec", "Required value"))?;
        if spec.containers.is_empty() {
            return Err(InvalidObject::new("spec.containers", "Required value"));
        }

        let requests = pod_requests(pod, None)?;
        let non_zero = pod_requests(
            pod,
            Some((DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)),
        )?;

        let mut host_ports = Vec::new();
        let app = spec
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("spec.containers[{i}]"), c));
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, c)| is_sidecar(c))
            .map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
        for (path, c) in app.chain(sidecars) {
            for (j, p) in c.ports.iter().flatten().enumerate() {
                let Some(port) = p.host_port.filter(|p| *p > 0) else {
                    continue;
                };
                let protocol = match p.protocol.as_deref() {
                    None | Some("") | Some("TCP") => Protocol::Tcp,
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    Some(other) => {
                        return Err(InvalidObject::new(
                            format!("{path}.ports[{j}].protocol"),
                            format!(
                                "Unsupported value: \"{other}\": supported values: \"SCTP\", \"TCP\", \"UDP\""
                            ),
                        ));
                    }
                };
                let ip = p
                    .host_ip
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("0.0.0.0");
                host_ports.push(HostPort {
                    ip: Arc::from(ip),
                    protocol,
                    port,
                });
            }
        }

        let mut tolerations = Vec::new();
        for (i, t) in spec.tolerations.iter().flatten().enumerate() {
            let operator = match t.operator.as_deref() {
                None | Some("") | Some("Equal") => TolerationOperator::Equal,
                Some("Exists") => TolerationOperator::Exists,
                Some(other) => {
                    return Err(InvalidObject::new(
                        format!("spec.tolerations[{i}].operator"),
                        format!(
                            "Unsupported value: \"{other}\": supported values: \"Equal\", \"Exists\""
                        ),
                    ));
                }
            };
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                    InvalidObject::new(
                        format!("spec.tolerations[{i}].effect"),
                        format!("Unsupported value: \"{e}\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""),
                    )
                })?),
            };
            tolerations.push(Toleration {
                key: t.key.as_deref().filter(|k| !k.is_empty()).map(Arc::from),
                operator,
                value: Arc::from(t.value.as_deref().unwrap_or("")),
                effect,
            });
        }

        let labels = Labels::from_map(meta.labels.as_ref());
        let placement = Arc::new(Placement::parse(spec, namespace, &labels)?);
        let pvc_claims = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                if let Some(c) = &v.persistent_volume_claim {
                    Some(Arc::from(c.claim_name.as_str()))
                } else {
                    v.ephemeral
                        .as_ref()
                        .map(|_| Arc::from(format!("{name}-{}", v.name).as_str()))
                }
            })
            .collect();
        // Init containers, app containers, then image volumes, each name
        // normalized once here (not per node visited).
        let images = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| c.image.as_deref().unwrap_or(""))
            .chain(
                spec.volumes
                    .iter()
                    .flatten()
                    .filter_map(|v| v.image.as_ref())
                    .map(|i| i.reference.as_deref().unwrap_or("")),
            )
            .map(normalized_image_name)
            .collect();

        let status = pod.status.as_ref();
        let claim_statuses = status.and_then(|s| s.resource_claim_statuses.as_ref());
        let resource_claims = spec
            .resource_claims
            .iter()
            .flatten()
            .map(|c| PodClaim {
                name: Arc::from(c.name.as_str()),
                source: match (&c.resource_claim_name, &c.resource_claim_template_name) {
                    (Some(n), _) => ClaimSource::Claim(Arc::from(n.as_str())),
                    (None, Some(t)) => ClaimSource::Template {
                        template: Arc::from(t.as_str()),
                        generated: claim_statuses
                            .into_iter()
                            .flatten()
                            .find(|s| s.name == c.name)
                            .map(|s| s.resource_claim_name.as_deref().map(Arc::from)),
                    },
                    (None, None) => ClaimSource::Unsupported,
                },
            })
            .collect();
        Ok(Self {
            uid: Arc::from(uid),
            namespace: Arc::from(namespace),
            name: Arc::from(name),
            priority: spec.priority.unwrap_or(0),
            scheduler_name: Arc::from(
                spec.scheduler_name
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .unwrap_or(DEFAULT_SCHEDULER_NAME),
            ),
            node_name: spec
                .node_name
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(Arc::from),
            nominated_node_name: status
                .and_then(|s| s.nominated_node_name.as_deref())
                .filter(|s| !s.is_empty())
                .map(Arc::from),
            non_zero_milli_cpu: non_zero.milli_cpu,
            non_zero_memory: non_zero.memory,
            requests,
            labels,
            host_ports,
            tolerations,
            scheduling_gates: spec
                .scheduling_gates
                .iter()
                .flatten()
                .map(|g| Arc::from(g.name.as_str()))
                .collect(),
            preemption_never: spec.preemption_policy.as_deref() == Some("Never"),
            placement,
            pvc_claims,
            images,
            terminating: meta.deletion_timestamp.is_some(),
            resource_claims,
            scheduling_group: spec
                .scheduling_group
                .as_ref()
                .and_then(|g| g.pod_group_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            generation: meta.generation,
            restarts_all_containers: spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .flat_map(|c| c.restart_policy_rules.iter().flatten())
                .any(|r| r.action == "RestartAllContainers"),
            host_network_in_user_namespace: spec.host_network == Some(true)
                && spec.host_users == Some(false),
            pod: object,
        })
    }

    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A copy of this pod with `spec.nodeName` set: what the cache holds
    /// while a binding is in flight ("assumed"). The Kubernetes object is
    /// shared, not copied.
    pub fn assumed_on(&self, node: &Arc<str>) -> Self {
        Self {
            node_name: Some(node.clone()),
            ..self.clone()
        }
    }
}

/// Whether two versions of an object's metadata are the same but for
/// their resourceVersion and managed fields (every other field compared).
fn meta_equal_but_version(
    a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    // Destructured, so that a field added to ObjectMeta is not missed.
    let k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields: _,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = a;
    *annotations == b.annotations
        && *creation_timestamp == b.creation_timestamp
        && *deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && *deletion_timestamp == b.deletion_timestamp
        && *finalizers == b.finalizers
        && *generate_name == b.generate_name
        && *generation == b.generation
        && *labels == b.labels
        && *name == b.name
        && *namespace == b.namespace
        && *owner_references == b.owner_references
        && *self_link == b.self_link
        && *uid == b.uid
}

/// `image` as a node's status would list it: with `:latest` when it has
/// no tag (a `:` after its last `/`), as upstream's normalizedImageName.
pub fn normalized_image_name(image: &str) -> Arc<str> {
    let tagged = match (image.rfind(':'), image.rfind('/')) {
        (None, _) => false,
        (Some(colon), Some(slash)) => colon > slash,
        (Some(_), None) => true,
    };
    if tagged {
        Arc::from(image)
    } else {
        Arc::from(format!("{image}:latest").as_str())
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Computes a pod's effective requests.
///
/// App containers' requests are summed. Init containers run one at a time
/// before them, so the pod needs the largest of them; restartable init
/// containers (sidecars) keep running, so each one adds to the app
/// containers' sum and to every init container started after it. The pod
/// overhead is added last. With `defaults`, a container that names no CPU or
/// memory request counts as the given milli-CPU and bytes.
fn pod_requests(pod: &Pod, defaults: Option<(i64, i64)>) -> Result<Resource, InvalidObject> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resource::default());
    };
    let mut reqs = Resource::default();
    for (i, c) in spec.containers.iter().enumerate() {
        reqs.add(&container_requests(
            c,
            defaults,
            &format!("spec.containers[{i}]"),
        )?);
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, defaults, &format!("spec.initContainers[{i}]"))?;
        if is_sidecar(c) {
            reqs.add(&r);
            sidecars.add(&r);
            init_max.max_with(&sidecars);
        } else {
            let mut running = r;
            running.add(&sidecars);
            init_max.max_with(&running);
        }
    }
    reqs.max_with(&init_max);
    // Pod-level requests (spec.resources) replace the containers' total for
    // the resources they name (CPU and memory).
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let r = resource_list(pod_level, "spec.resources.requests")?;
        if pod_level.contains_key(resource::CPU) {
            reqs.milli_cpu = r.milli_cpu;
        }
        if pod_level.contains_key(resource::MEMORY) {
            reqs.memory = r.memory;
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&resource_list(overhead, "spec.overhead")?);
    }
    Ok(reqs)
}

fn container_requests(
    c: &Container,
    defaults: Option<(i64, i64)>,
    path: &str,
) -> Result<Resource, InvalidObject> {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let mut r = match requests {
        Some(list) => resource_list(list, &format!("{path}.resources.requests"))?,
        None => Resource::default(),
    };
    if let Some((cpu, memory)) = defaults {
        if !requests.is_some_and(|l| l.contains_key(resource::CPU)) {
            r.milli_cpu = cpu;
        }
        if !requests.is_some_and(|l| l.contains_key(resource::MEMORY)) {
            r.memory = memory;
        }
    }
    Ok(r)
}

fn resource_list(
    list: &BTreeMap<String, K8sQuantity>,
    path: &str,
) -> Result<Resource, InvalidObject> {
    for (name, q) in list {
        match Quantity::parse(&q.0) {
            Ok(parsed) if parsed.is_negative() => {
                return Err(InvalidObject::new(
                    format!("{path}.{name}"),
                    "must be greater than or equal to 0",
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(InvalidObject::new(format!("{path}.{name}"), e.to_string())),
        }
    }
    Resource::from_list(list)
        .map_err(|e| InvalidObject::new(format!("{path}.{}", e.name), e.error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Result<PodInfo, InvalidObject> {
        PodInfo::new(Arc::new(serde_json::from_value(v).unwrap()))
    }

    fn base(spec: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec})
    }

    #[test]
    fn a_status_write_is_read_without_parsing_the_pod_again() {
        let v1: Arc<Pod> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
                "spec": {"containers": [{"name": "c"}],
                         "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
            }))
            .unwrap(),
        );
        let info = PodInfo::new(v1.clone()).unwrap();
        let status = |v: serde_json::Value| Some(serde_json::from_value::<PodStatus>(v).unwrap());
        // A nomination written over this version: the fields are kept (the
        // placement is the same Arc), the nomination and the version read.
        let nominated = info
            .pod
            .with_status(status(json!({"nominatedNodeName": "n1"})), "2".into());
        let after = info.updated(nominated.clone()).unwrap();
        assert_eq!(after.nominated_node_name.as_deref(), Some("n1"));
        assert_eq!(after.pod.resource_version(), Some("2"));
        assert!(Arc::ptr_eq(&after.placement, &info.placement));
        // The claim controller's status write changes what the pod's claims
        // are: parsed again.
        let claimed = nominated.with_status(
            status(json!({"nominatedNodeName": "n1",
                          "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]})),
            "3".into(),
        );
        let after = after.updated(claimed).unwrap();
        assert_eq!(
            after.resource_claims[0].source,
            ClaimSource::Template {
                template: "t".into(),
                generated: Some(Some("p-gpu-x".into()))
            }
        );
        assert_eq!(after.nominated_node_name.as_deref(), Some("n1"));
        // A whole write (a binding) over the patched version: compared, and
        // the binding seen.
        let mut bound = after.pod.to_pod();
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        bound.metadata.resource_version = Some("4".into());
        let whole = after.updated(PodObject::shared(Arc::new(bound))).unwrap();
        assert_eq!(whole.node_name.as_deref(), Some("n1"));
        // A binding written over the patched version (as the embedded
        // cluster writes it): nothing parsed, the node and status read.
        let bound = after.pod.bound(
            "n1",
            status(
                json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]}),
            ),
            "4".into(),
        );
        let after_bound = after.updated(bound.clone()).unwrap();
        assert_eq!(after_bound.node_name.as_deref(), Some("n1"));
        assert_eq!(after_bound.nominated_node_name, None);
        assert!(Arc::ptr_eq(&after_bound.placement, &after.placement));
        assert_eq!(after_bound.resource_claims, whole.resource_claims);
        // A later status write over the bound version keeps the node.
        let later = after_bound
            .updated(bound.with_status(None, "5".into()))
            .unwrap();
        assert_eq!(later.node_name, after_bound.node_name);
        assert_eq!(
            later.pod.to_pod().spec.unwrap().node_name.as_deref(),
            Some("n1")
        );
    }

    #[test]
    fn requests_sum_containers_max_init_add_sidecars_and_overhead() {
        let p = pod(base(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "300m"}}}
            ],
            "initContainers": [
                {"name": "i1", "resources": {"requests": {"cpu": "1", "memory": "50Mi"}}},
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}},
                {"name": "i2", "resources": {"requests": {"cpu": "550m", "memory": "300Mi"}}}
            ],
            "overhead": {"cpu": "10m"}
        })))
        .unwrap();
        // apps + sidecar: 600m, 110Mi; init: max(1000m, 550m+100m) cpu,
        // max(50Mi, 10Mi, 300Mi+10Mi) memory; then +10m overhead.
        assert_eq!(p.requests.milli_cpu, 1010);
        assert_eq!(p.requests.memory, 310 << 20);
        // Non-zero: container b has no memory request, so it counts 200Mi.
        assert_eq!(p.non_zero_memory, 310 << 20);
        assert_eq!(p.non_zero_milli_cpu, 1010);
    }

    #[test]
    fn pod_level_requests_replace_the_containers_total() {
        let p = pod(base(json!({
            "resources": {"requests": {"cpu": "3"}},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b"}
            ],
            "overhead": {"cpu": "100m"}
        })))
        .unwrap();
        assert_eq!(p.requests.milli_cpu, 3100, "pod level plus overhead");
        assert_eq!(
            p.requests.memory,
            1 << 30,
            "memory not set at pod level: the containers' total"
        );
        assert_eq!(p.non_zero_milli_cpu, 3100);
        assert_eq!(p.non_zero_memory, (1 << 30) + DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn empty_requests_count_as_defaults_only_for_scoring() {
        let p = pod(base(json!({"containers": [{"name": "a"}, {"name": "b"}]}))).unwrap();
        assert!(p.requests.is_zero());
        assert_eq!(p.non_zero_milli_cpu, 200);
        assert_eq!(p.non_zero_memory, 400 << 20);
    }

    #[test]
    fn explicit_zero_request_stays_zero() {
        let p = pod(base(
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "0"}}}]}),
        ))
        .unwrap();
        assert_eq!(p.non_zero_milli_cpu, 0);
        assert_eq!(p.non_zero_memory, DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn scheduling_group_names_the_pod_group() {
        let p = make_pod("w").group("train").build();
        assert_eq!(p.scheduling_group.as_deref(), Some("train"));
        assert_eq!(make_pod("solo").build().scheduling_group, None);
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let err = pod(base(json!({"containers": [
            {"name": "a"},
            {"name": "b", "resources": {"requests": {"cpu": "two"}}}
        ]})))
        .unwrap_err();
        assert_eq!(err.path, "spec.containers[1].resources.requests.cpu");
        assert!(
            err.message
                .starts_with("quantities must match the regular expression")
        );
    }

    #[test]
    fn negative_request_is_rejected() {
        let err = pod(base(
            json!({"containers": [{"name": "a", "resources": {"requests": {"memory": "-1Mi"}}}]}),
        ))
        .unwrap_err();
        assert_eq!(err.path, "spec.containers[0].resources.requests.memory");
    }

    #[test]
    fn defaults_and_parsed_fields() {
        let p = pod(json!({
            "metadata": {"name": "p", "uid": "u", "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}]}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "schedulingGates": [{"name": "wait"}],
                "priority": 7
            },
            "status": {"nominatedNodeName": "n1"}
        }))
        .unwrap();
        assert_eq!(&*p.namespace, "default");
        assert_eq!(&*p.scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(p.priority, 7);
        assert_eq!(p.labels.get("app"), Some("web"));
        assert_eq!(p.host_ports.len(), 2);
        assert_eq!(&*p.host_ports[0].ip, "0.0.0.0");
        assert_eq!(p.host_ports[1].protocol, Protocol::Udp);
        assert_eq!(p.tolerations[0].operator, TolerationOperator::Exists);
        assert_eq!(p.scheduling_gates.len(), 1);
        assert_eq!(p.nominated_node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn missing_pieces_are_named() {
        assert_eq!(
            pod(json!({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "a"}]}}))
                .unwrap_err()
                .path,
            "metadata.name"
        );
        assert_eq!(
            pod(json!({"metadata": {"name": "p", "uid": "u"}}))
                .unwrap_err()
                .path,
            "spec"
        );
        assert_eq!(
            pod(json!({"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": []}}))
                .unwrap_err()
                .path,
            "spec.containers"
        );
    }
}
