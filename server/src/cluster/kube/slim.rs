//! What the watches deliver, decoded into what berth keeps.
//!
//! Upstream's scheduler strips managed fields in its informers' transform;
//! berth goes further and never builds them: pods and nodes are decoded
//! straight from the watch's JSON into [`SlimPod`] and [`SlimNode`], which
//! skip (without allocating) every field the scheduler never reads:
//!
//! * every object: `metadata.managedFields` and the
//!   `kubectl.kubernetes.io/last-applied-configuration` annotation (a
//!   copy of the whole object as last applied);
//! * pods: of the spec, the volumes no scheduling plugin reads (projected
//!   service account tokens, config maps, secrets, the downward API,
//!   empty dirs: in k8s-openapi's types a volume takes 3 KiB whatever it
//!   holds) and, of each container, what only the kubelet reads (command,
//!   arguments, environment, probes, lifecycle hooks, mounts, working
//!   directory); of the status, only what scheduling reads (phase,
//!   conditions, nominated node, start time, resource claim statuses and
//!   the allocated resources of in-place resizes), and of each container
//!   status only its name, allocated resources and resources;
//! * nodes: of the status, capacity, allocatable, images (ImageLocality),
//!   declared features (NodeDeclaredFeatures), the phase, and each
//!   condition's type, status and reason (heartbeats and messages change
//!   without meaning anything to the scheduler).
//!
//! Objects of other kinds are decoded whole and stripped of the same
//! metadata ([`strip_meta`]). The mirror then keeps one copy of each
//! object; the cache and the queue share it. A pod is parsed into its
//! `PodInfo` as it arrives, and its decoded object packed (see
//! [`crate::model::PodObject`]): the mirror keeps that `PodInfo`, which is
//! what the cache and the queue hold.
//!
//! Because heartbeats and managed fields are gone, a change that only
//! touched them decodes to the object berth already has: the mirror
//! takes its new resourceVersion and tells the scheduler nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition,
    PodSpec, PodStatus, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// The annotation kubectl apply keeps the last applied object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no scheduler reads from an object's metadata.
pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// `ObjectMeta` without its managed fields (never decoded).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(m: WireMeta) -> Self {
        let mut meta = ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        };
        strip_meta(&mut meta);
        meta
    }
}

/// The parts of a container status an in-place resize shows.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainerStatus {
    name: String,
    allocated_resources: Option<BTreeMap<String, Quantity>>,
    resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
}

impl From<WireContainerStatus> for ContainerStatus {
    fn from(c: WireContainerStatus) -> Self {
        ContainerStatus {
            name: c.name,
            allocated_resources: c.allocated_resources,
            resources: c.resources,
            ..ContainerStatus::default()
        }
    }
}

/// The pod status fields scheduling reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WirePodStatus {
    allocated_resources: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<PodCondition>>,
    container_statuses: Option<Vec<WireContainerStatus>>,
    extended_resource_claim_status:
        Option<k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus>,
    init_container_statuses: Option<Vec<WireContainerStatus>>,
    nominated_node_name: Option<String>,
    phase: Option<String>,
    resource_claim_statuses: Option<Vec<k8s_openapi::api::core::v1::PodResourceClaimStatus>>,
    resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    start_time: Option<Time>,
}

impl From<WirePodStatus> for PodStatus {
    fn from(s: WirePodStatus) -> Self {
        let statuses = |v: Option<Vec<WireContainerStatus>>| {
            v.map(|v| v.into_iter().map(Into::into).collect())
        };
        PodStatus {
            allocated_resources: s.allocated_resources,
            conditions: s.conditions,
            container_statuses: statuses(s.container_statuses),
            extended_resource_claim_status: s.extended_resource_claim_status,
            init_container_statuses: statuses(s.init_container_statuses),
            nominated_node_name: s.nominated_node_name,
            phase: s.phase,
            resource_claim_statuses: s.resource_claim_statuses,
            resources: s.resources,
            start_time: s.start_time,
            ..PodStatus::default()
        }
    }
}

/// A pod as berth keeps it (see the module's doc).
#[derive(Debug, Clone)]
pub struct SlimPod(pub Pod);

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: WireMeta,
            spec: Option<PodSpec>,
            status: Option<WirePodStatus>,
        }
        let w = Wire::deserialize(d)?;
        let mut spec = w.spec;
        if let Some(spec) = spec.as_mut() {
            trim_pod_spec(spec);
        }
        Ok(Self(Pod {
            metadata: w.metadata.into(),
            spec,
            status: w.status.map(Into::into),
        }))
    }
}

/// Whether any scheduling plugin reads the volume: claims, ephemeral
/// claims, image volumes, and the disks VolumeRestrictions and
/// NodeVolumeLimits count (every kind but the ones below).
fn read_by_scheduling(v: &Volume) -> bool {
    v.projected.is_none()
        && v.config_map.is_none()
        && v.secret.is_none()
        && v.downward_api.is_none()
        && v.empty_dir.is_none()
}

/// Drops what only the kubelet reads from a container.
fn trim_container(c: &mut Container) {
    c.command = None;
    c.args = None;
    c.env = None;
    c.env_from = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
    c.volume_mounts = None;
    c.volume_devices = None;
    c.working_dir = None;
}

/// The spec as berth keeps it (see the module's doc).
fn trim_pod_spec(spec: &mut PodSpec) {
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(read_by_scheduling);
        volumes.shrink_to_fit();
        if volumes.is_empty() {
            spec.volumes = None;
        }
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        trim_container(c);
    }
    spec.ephemeral_containers = None;
}

/// A node condition without its heartbeat, transition time and message.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireNodeCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
}

/// The node status fields scheduling reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireNodeStatus {
    allocatable: Option<BTreeMap<String, Quantity>>,
    capacity: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<WireNodeCondition>>,
    declared_features: Option<Vec<String>>,
    images: Option<Vec<k8s_openapi::api::core::v1::ContainerImage>>,
    phase: Option<String>,
}

impl From<WireNodeStatus> for NodeStatus {
    fn from(s: WireNodeStatus) -> Self {
        NodeStatus {
            allocatable: s.allocatable,
            capacity: s.capacity,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| NodeCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        ..NodeCondition::default()
                    })
                    .collect()
            }),
            declared_features: s.declared_features,
            images: s.images,
            phase: s.phase,
            ..NodeStatus::default()
        }
    }
}

/// A node as berth keeps it (see the module's doc).
#[derive(Debug, Clone)]
pub struct SlimNode(pub Node);

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: WireMeta,
            spec: Option<NodeSpec>,
            status: Option<WireNodeStatus>,
        }
        let w = Wire::deserialize(d)?;
        Ok(Self(Node {
            metadata: w.metadata.into(),
            spec: w.spec,
            status: w.status.map(Into::into),
        }))
    }
}

/// `kube::Resource` for a slim wrapper: the wrapped kind's coordinates.
macro_rules! resource_as {
    ($slim:ident, $kind:ty) => {
        impl kube::Resource for $slim {
            type DynamicType = ();
            type Scope = <$kind as kube::Resource>::Scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

resource_as!(SlimPod, Pod);
resource_as!(SlimNode, Node);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_keep_what_scheduling_reads_and_nothing_of_managed_fields() {
        let rec: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../tests/k8s-api/preemption-preemptor-status.json"
        ))
        .unwrap();
        let mut body = rec["response"]["body"].clone();
        body["metadata"]["annotations"] = json!({LAST_APPLIED: "{\"big\": true}", "keep": "me"});
        body["status"]["podIP"] = json!("10.0.0.1");
        body["status"]["containerStatuses"] = json!([{
            "name": "c", "image": "busybox", "imageID": "docker.io/busybox@sha256:0", "ready": true,
            "restartCount": 3, "started": true, "state": {"running": {"startedAt": "2026-11-24T06:21:34Z"}},
            "allocatedResources": {"cpu": "3"}
        }]);
        let full: Pod = serde_json::from_value(body.clone()).unwrap();
        let slim: SlimPod = serde_json::from_value(body).unwrap();
        let p = slim.0;
        assert!(full.metadata.managed_fields.is_some());
        assert!(p.metadata.managed_fields.is_none());
        assert_eq!(
            p.metadata.annotations,
            Some(BTreeMap::from([("keep".to_string(), "me".to_string())]))
        );
        assert_eq!(p.metadata.name, full.metadata.name);
        assert_eq!(p.metadata.uid, full.metadata.uid);
        assert_eq!(p.metadata.generation, Some(1));
        assert_eq!(p.spec, full.spec, "nothing of this spec is dropped");
        let s = p.status.unwrap();
        let fs = full.status.unwrap();
        assert_eq!(s.conditions, fs.conditions);
        assert_eq!(s.nominated_node_name.as_deref(), Some("cpu-1"));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.pod_ip, None);
        assert_eq!(s.qos_class, None);
        let c = &s.container_statuses.unwrap()[0];
        assert_eq!(c.name, "c");
        assert_eq!(c.allocated_resources.as_ref().unwrap()["cpu"].0, "3");
        assert_eq!((c.restart_count, c.state.is_none()), (0, true));
    }

    #[test]
    fn pod_specs_keep_what_scheduling_reads() {
        let v = json!({
            "metadata": {"name": "p"},
            "spec": {
                "volumes": [
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "cfg", "configMap": {"name": "c"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "disk", "gcePersistentDisk": {"pdName": "pd"}},
                    {"name": "model", "image": {"reference": "registry/model:1"}},
                    {"name": "tmp", "emptyDir": {}},
                ],
                "initContainers": [{"name": "init", "image": "i", "command": ["sh"], "restartPolicy": "Always"}],
                "containers": [{
                    "name": "c", "image": "app:1", "env": [{"name": "A", "value": "x"}],
                    "args": ["--x"], "livenessProbe": {"httpGet": {"port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                }],
                "nodeSelector": {"zone": "a"},
            },
        });
        let p = serde_json::from_value::<SlimPod>(v).unwrap().0;
        let spec = p.spec.unwrap();
        let names: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(names, ["data", "scratch", "disk", "model"]);
        let c = &spec.containers[0];
        assert!(c.env.is_none() && c.args.is_none() && c.liveness_probe.is_none());
        assert!(c.volume_mounts.is_none());
        assert_eq!(c.image.as_deref(), Some("app:1"));
        assert_eq!(
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0,
            "2"
        );
        assert_eq!(c.ports.as_ref().unwrap()[0].host_port, Some(8080));
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert!(init.command.is_none());
        assert_eq!(
            init.restart_policy.as_deref(),
            Some("Always"),
            "sidecars stay sidecars"
        );
        assert_eq!(spec.node_selector.unwrap()["zone"], "a");
    }

    #[test]
    fn nodes_keep_capacity_images_and_condition_states_only() {
        let v = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "a"}, "resourceVersion": "7",
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": true},
            "status": {
                "allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "ready", "lastHeartbeatTime": "2026-11-24T06:00:00Z"}],
                "images": [{"names": ["pause:3.10"], "sizeBytes": 300}],
                "declaredFeatures": ["GuaranteedQoSPodCPUResize"],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k",
                             "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            },
        });
        let n = serde_json::from_value::<SlimNode>(v).unwrap().0;
        assert!(n.metadata.managed_fields.is_none());
        assert_eq!(n.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(n.spec.as_ref().unwrap().unschedulable, Some(true));
        let s = n.status.unwrap();
        assert_eq!(s.allocatable.unwrap()["cpu"].0, "4");
        assert_eq!(s.images.unwrap()[0].size_bytes, Some(300));
        assert_eq!(
            s.declared_features.unwrap(),
            ["GuaranteedQoSPodCPUResize".to_string()]
        );
        let c = &s.conditions.unwrap()[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", "True"));
        assert_eq!(c.reason.as_deref(), Some("KubeletReady"));
        assert!(c.message.is_none() && c.last_heartbeat_time.is_none());
        assert!(s.addresses.is_none() && s.node_info.is_none());
    }

    #[test]
    fn two_heartbeats_decode_to_the_same_node() {
        let at = |t: &str| {
            json!({"metadata": {"name": "n1"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": t}]}})
        };
        let a = serde_json::from_value::<SlimNode>(at("2026-11-24T06:00:00Z")).unwrap();
        let b = serde_json::from_value::<SlimNode>(at("2026-11-24T06:05:00Z")).unwrap();
        assert_eq!(a.0, b.0);
    }
}
