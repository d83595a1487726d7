//! The Kubernetes objects other than nodes and pods that berth reads, as
//! one type: [`KubeObject`] (a shared pointer to the decoded object) of an
//! [`ObjectKind`] (namespaces, volumes and their classes, CSI nodes,
//! disruption budgets, the workload objects whose selectors default
//! topology spreading, Dynamic Resource Allocation's `resource.k8s.io/v1`
//! objects, DeviceTaintRules, CSI drivers and storage capacities,
//! PriorityClasses, and the workload API's PodGroups and Workloads), with
//! their decoding and their API names. The scheduler's store of them is
//! the cache's `ObjectStore`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::EventResource;

/// The label the API server puts on every namespace, with its name.
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";

/// The kinds an [`ObjectStore`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// v1 Namespace.
    Namespace,
    /// v1 PersistentVolume.
    PersistentVolume,
    /// v1 PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// storage.k8s.io/v1 StorageClass.
    StorageClass,
    /// storage.k8s.io/v1 CSINode.
    CsiNode,
    /// policy/v1 PodDisruptionBudget.
    PodDisruptionBudget,
    /// v1 Service.
    Service,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// v1 ReplicationController.
    ReplicationController,
    /// resource.k8s.io/v1 DeviceClass.
    DeviceClass,
    /// resource.k8s.io/v1 ResourceClaim.
    ResourceClaim,
    /// resource.k8s.io/v1 ResourceClaimTemplate.
    ResourceClaimTemplate,
    /// resource.k8s.io/v1 ResourceSlice.
    ResourceSlice,
    /// scheduling.k8s.io/v1beta1 PodGroup.
    PodGroup,
    /// scheduling.k8s.io/v1beta1 Workload (kept, never read by plugins).
    Workload,
    /// resource.k8s.io/v1 DeviceTaintRule.
    DeviceTaintRule,
    /// storage.k8s.io/v1 CSIDriver.
    CsiDriver,
    /// storage.k8s.io/v1 CSIStorageCapacity.
    CsiStorageCapacity,
    /// scheduling.k8s.io/v1 PriorityClass.
    PriorityClass,
}

impl ObjectKind {
    /// Every kind.
    pub const ALL: [ObjectKind; 20] = [
        Self::Namespace,
        Self::PersistentVolume,
        Self::PersistentVolumeClaim,
        Self::StorageClass,
        Self::CsiNode,
        Self::PodDisruptionBudget,
        Self::Service,
        Self::ReplicaSet,
        Self::StatefulSet,
        Self::ReplicationController,
        Self::DeviceClass,
        Self::ResourceClaim,
        Self::ResourceClaimTemplate,
        Self::ResourceSlice,
        Self::PodGroup,
        Self::Workload,
        Self::DeviceTaintRule,
        Self::CsiDriver,
        Self::CsiStorageCapacity,
        Self::PriorityClass,
    ];

    /// `(apiVersion, kind)` as objects carry them.
    pub fn type_meta(&self) -> (&'static str, &'static str) {
        match self {
            Self::Namespace => ("v1", "Namespace"),
            Self::PersistentVolume => ("v1", "PersistentVolume"),
            Self::PersistentVolumeClaim => ("v1", "PersistentVolumeClaim"),
            Self::StorageClass => ("storage.k8s.io/v1", "StorageClass"),
            Self::CsiNode => ("storage.k8s.io/v1", "CSINode"),
            Self::PodDisruptionBudget => ("policy/v1", "PodDisruptionBudget"),
            Self::Service => ("v1", "Service"),
            Self::ReplicaSet => ("apps/v1", "ReplicaSet"),
            Self::StatefulSet => ("apps/v1", "StatefulSet"),
            Self::ReplicationController => ("v1", "ReplicationController"),
            Self::DeviceClass => ("resource.k8s.io/v1", "DeviceClass"),
            Self::ResourceClaim => ("resource.k8s.io/v1", "ResourceClaim"),
            Self::ResourceClaimTemplate => ("resource.k8s.io/v1", "ResourceClaimTemplate"),
            Self::ResourceSlice => ("resource.k8s.io/v1", "ResourceSlice"),
            Self::PodGroup => ("scheduling.k8s.io/v1beta1", "PodGroup"),
            Self::Workload => ("scheduling.k8s.io/v1beta1", "Workload"),
            Self::DeviceTaintRule => ("resource.k8s.io/v1", "DeviceTaintRule"),
            Self::CsiDriver => ("storage.k8s.io/v1", "CSIDriver"),
            Self::CsiStorageCapacity => ("storage.k8s.io/v1", "CSIStorageCapacity"),
            Self::PriorityClass => ("scheduling.k8s.io/v1", "PriorityClass"),
        }
    }

    /// The resource name the API serves this kind under (`namespaces`,
    /// `resourceclaims`), as RBAC rules and paths name it.
    pub fn plural(&self) -> &'static str {
        match self {
            Self::Namespace => "namespaces",
            Self::PersistentVolume => "persistentvolumes",
            Self::PersistentVolumeClaim => "persistentvolumeclaims",
            Self::StorageClass => "storageclasses",
            Self::CsiNode => "csinodes",
            Self::PodDisruptionBudget => "poddisruptionbudgets",
            Self::Service => "services",
            Self::ReplicaSet => "replicasets",
            Self::StatefulSet => "statefulsets",
            Self::ReplicationController => "replicationcontrollers",
            Self::DeviceClass => "deviceclasses",
            Self::ResourceClaim => "resourceclaims",
            Self::ResourceClaimTemplate => "resourceclaimtemplates",
            Self::ResourceSlice => "resourceslices",
            Self::PodGroup => "podgroups",
            Self::Workload => "workloads",
            Self::DeviceTaintRule => "devicetaintrules",
            Self::CsiDriver => "csidrivers",
            Self::CsiStorageCapacity => "csistoragecapacities",
            Self::PriorityClass => "priorityclasses",
        }
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &'static str {
        match self.type_meta().0.rsplit_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(&self) -> bool {
        !matches!(
            self,
            Self::Namespace
                | Self::PersistentVolume
                | Self::StorageClass
                | Self::CsiNode
                | Self::DeviceClass
                | Self::ResourceSlice
                | Self::DeviceTaintRule
                | Self::CsiDriver
                | Self::PriorityClass
        )
    }

    /// The kind from an object's `kind` field (or a plural / short name).
    pub fn parse(s: &str) -> Option<Self> {
        let lower = s.to_ascii_lowercase();
        Self::ALL.into_iter().find(|k| {
            lower == k.type_meta().1.to_ascii_lowercase()
                || lower == k.plural()
                || Some(lower.as_str()) == k.short_name()
        })
    }

    fn short_name(&self) -> Option<&'static str> {
        Some(match self {
            Self::Namespace => "ns",
            Self::PersistentVolume => "pv",
            Self::PersistentVolumeClaim => "pvc",
            Self::StorageClass => "sc",
            Self::PodDisruptionBudget => "pdb",
            Self::Service => "svc",
            Self::ReplicaSet => "rs",
            Self::StatefulSet => "sts",
            Self::ReplicationController => "rc",
            Self::PriorityClass => "pc",
            Self::CsiNode
            | Self::CsiDriver
            | Self::CsiStorageCapacity
            | Self::DeviceTaintRule
            | Self::DeviceClass
            | Self::ResourceClaim
            | Self::ResourceClaimTemplate
            | Self::ResourceSlice
            | Self::PodGroup
            | Self::Workload => return None,
        })
    }

    /// The resource plugins register events for, if any.
    pub fn event_resource(&self) -> Option<EventResource> {
        match self {
            Self::PersistentVolume => Some(EventResource::PersistentVolume),
            Self::PersistentVolumeClaim => Some(EventResource::PersistentVolumeClaim),
            Self::StorageClass => Some(EventResource::StorageClass),
            Self::CsiNode => Some(EventResource::CsiNode),
            Self::PodDisruptionBudget => Some(EventResource::PodDisruptionBudget),
            Self::DeviceClass => Some(EventResource::DeviceClass),
            Self::ResourceClaim => Some(EventResource::ResourceClaim),
            Self::ResourceSlice => Some(EventResource::ResourceSlice),
            Self::PodGroup => Some(EventResource::PodGroup),
            Self::DeviceTaintRule => Some(EventResource::DeviceTaintRule),
            Self::CsiDriver => Some(EventResource::CsiDriver),
            Self::CsiStorageCapacity => Some(EventResource::CsiStorageCapacity),
            _ => None,
        }
    }
}

/// One object of a kind the store holds.
#[derive(Debug, Clone)]
pub enum KubeObject {
    /// A namespace.
    Namespace(Arc<Namespace>),
    /// A persistent volume.
    PersistentVolume(Arc<PersistentVolume>),
    /// A persistent volume claim.
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    /// A storage class.
    StorageClass(Arc<StorageClass>),
    /// A CSI node.
    CsiNode(Arc<CSINode>),
    /// A disruption budget.
    PodDisruptionBudget(Arc<PodDisruptionBudget>),
    /// A service.
    Service(Arc<Service>),
    /// A replica set.
    ReplicaSet(Arc<ReplicaSet>),
    /// A stateful set.
    StatefulSet(Arc<StatefulSet>),
    /// A replication controller.
    ReplicationController(Arc<ReplicationController>),
    /// A device class.
    DeviceClass(Arc<DeviceClass>),
    /// A resource claim.
    ResourceClaim(Arc<ResourceClaim>),
    /// A resource claim template.
    ResourceClaimTemplate(Arc<ResourceClaimTemplate>),
    /// A resource slice.
    ResourceSlice(Arc<ResourceSlice>),
    /// A pod group.
    PodGroup(Arc<PodGroup>),
    /// A workload.
    Workload(Arc<Workload>),
    /// A device taint rule.
    DeviceTaintRule(Arc<DeviceTaintRule>),
    /// A CSI driver.
    CsiDriver(Arc<CSIDriver>),
    /// A CSI storage capacity.
    CsiStorageCapacity(Arc<CSIStorageCapacity>),
    /// A priority class.
    PriorityClass(Arc<PriorityClass>),
}

macro_rules! each_object {
    ($obj:expr, $o:ident => $body:expr) => {
        match $obj {
            KubeObject::Namespace($o) => $body,
            KubeObject::PersistentVolume($o) => $body,
            KubeObject::PersistentVolumeClaim($o) => $body,
            KubeObject::StorageClass($o) => $body,
            KubeObject::CsiNode($o) => $body,
            KubeObject::PodDisruptionBudget($o) => $body,
            KubeObject::Service($o) => $body,
            KubeObject::ReplicaSet($o) => $body,
            KubeObject::StatefulSet($o) => $body,
            KubeObject::ReplicationController($o) => $body,
            KubeObject::DeviceClass($o) => $body,
            KubeObject::ResourceClaim($o) => $body,
            KubeObject::ResourceClaimTemplate($o) => $body,
            KubeObject::ResourceSlice($o) => $body,
            KubeObject::PodGroup($o) => $body,
            KubeObject::Workload($o) => $body,
            KubeObject::DeviceTaintRule($o) => $body,
            KubeObject::CsiDriver($o) => $body,
            KubeObject::CsiStorageCapacity($o) => $body,
            KubeObject::PriorityClass($o) => $body,
        }
    };
}

impl KubeObject {
    /// The object's kind.
    pub fn kind(&self) -> ObjectKind {
        match self {
            Self::Namespace(_) => ObjectKind::Namespace,
            Self::PersistentVolume(_) => ObjectKind::PersistentVolume,
            Self::PersistentVolumeClaim(_) => ObjectKind::PersistentVolumeClaim,
            Self::StorageClass(_) => ObjectKind::StorageClass,
            Self::CsiNode(_) => ObjectKind::CsiNode,
            Self::PodDisruptionBudget(_) => ObjectKind::PodDisruptionBudget,
            Self::Service(_) => ObjectKind::Service,
            Self::ReplicaSet(_) => ObjectKind::ReplicaSet,
            Self::StatefulSet(_) => ObjectKind::StatefulSet,
            Self::ReplicationController(_) => ObjectKind::ReplicationController,
            Self::DeviceClass(_) => ObjectKind::DeviceClass,
            Self::ResourceClaim(_) => ObjectKind::ResourceClaim,
            Self::ResourceClaimTemplate(_) => ObjectKind::ResourceClaimTemplate,
            Self::ResourceSlice(_) => ObjectKind::ResourceSlice,
            Self::PodGroup(_) => ObjectKind::PodGroup,
            Self::Workload(_) => ObjectKind::Workload,
            Self::DeviceTaintRule(_) => ObjectKind::DeviceTaintRule,
            Self::CsiDriver(_) => ObjectKind::CsiDriver,
            Self::CsiStorageCapacity(_) => ObjectKind::CsiStorageCapacity,
            Self::PriorityClass(_) => ObjectKind::PriorityClass,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        each_object!(self, o => &o.metadata)
    }

    /// A copy of the object with its metadata changed by `f`.
    pub fn with_metadata(&self, f: impl FnOnce(&mut ObjectMeta)) -> Self {
        fn edit<T: Clone>(o: &Arc<T>, meta: impl FnOnce(&mut T)) -> Arc<T> {
            let mut c = (**o).clone();
            meta(&mut c);
            Arc::new(c)
        }
        match self {
            Self::Namespace(o) => Self::Namespace(edit(o, |c| f(&mut c.metadata))),
            Self::PersistentVolume(o) => Self::PersistentVolume(edit(o, |c| f(&mut c.metadata))),
            Self::PersistentVolumeClaim(o) => {
                Self::PersistentVolumeClaim(edit(o, |c| f(&mut c.metadata)))
            }
            Self::StorageClass(o) => Self::StorageClass(edit(o, |c| f(&mut c.metadata))),
            Self::CsiNode(o) => Self::CsiNode(edit(o, |c| f(&mut c.metadata))),
            Self::PodDisruptionBudget(o) => {
                Self::PodDisruptionBudget(edit(o, |c| f(&mut c.metadata)))
            }
            Self::Service(o) => Self::Service(edit(o, |c| f(&mut c.metadata))),
            Self::ReplicaSet(o) => Self::ReplicaSet(edit(o, |c| f(&mut c.metadata))),
            Self::StatefulSet(o) => Self::StatefulSet(edit(o, |c| f(&mut c.metadata))),
            Self::ReplicationController(o) => {
                Self::ReplicationController(edit(o, |c| f(&mut c.metadata)))
            }
            Self::DeviceClass(o) => Self::DeviceClass(edit(o, |c| f(&mut c.metadata))),
            Self::ResourceClaim(o) => Self::ResourceClaim(edit(o, |c| f(&mut c.metadata))),
            Self::ResourceClaimTemplate(o) => {
                Self::ResourceClaimTemplate(edit(o, |c| f(&mut c.metadata)))
            }
            Self::ResourceSlice(o) => Self::ResourceSlice(edit(o, |c| f(&mut c.metadata))),
            Self::PodGroup(o) => Self::PodGroup(edit(o, |c| f(&mut c.metadata))),
            Self::Workload(o) => Self::Workload(edit(o, |c| f(&mut c.metadata))),
            Self::DeviceTaintRule(o) => Self::DeviceTaintRule(edit(o, |c| f(&mut c.metadata))),
            Self::CsiDriver(o) => Self::CsiDriver(edit(o, |c| f(&mut c.metadata))),
            Self::CsiStorageCapacity(o) => {
                Self::CsiStorageCapacity(edit(o, |c| f(&mut c.metadata)))
            }
            Self::PriorityClass(o) => Self::PriorityClass(edit(o, |c| f(&mut c.metadata))),
        }
    }

    /// `(kind, namespace, name)`; the namespace is empty for cluster-scoped
    /// kinds.
    pub fn key(&self) -> (ObjectKind, String, String) {
        let m = self.metadata();
        let ns = if self.kind().namespaced() {
            m.namespace.clone().unwrap_or_else(|| "default".into())
        } else {
            String::new()
        };
        (self.kind(), ns, m.name.clone().unwrap_or_default())
    }

    /// The object as JSON (with its apiVersion and kind).
    pub fn to_json(&self) -> serde_json::Value {
        each_object!(self, o => serde_json::to_value(&**o).unwrap_or_default())
    }

    /// Parses an object of `kind` from its JSON; an error names the field
    /// at fault (`spec.schedulingPolicy.gang.minCount`).
    pub fn from_json(
        kind: ObjectKind,
        value: serde_json::Value,
    ) -> Result<Self, ObjectDecodeError> {
        let value = &value;
        Ok(match kind {
            ObjectKind::Namespace => Self::Namespace(Arc::new(decode(value)?)),
            ObjectKind::PersistentVolume => Self::PersistentVolume(Arc::new(decode(value)?)),
            ObjectKind::PersistentVolumeClaim => {
                Self::PersistentVolumeClaim(Arc::new(decode(value)?))
            }
            ObjectKind::StorageClass => Self::StorageClass(Arc::new(decode(value)?)),
            ObjectKind::CsiNode => Self::CsiNode(Arc::new(decode(value)?)),
            ObjectKind::PodDisruptionBudget => Self::PodDisruptionBudget(Arc::new(decode(value)?)),
            ObjectKind::Service => Self::Service(Arc::new(decode(value)?)),
            ObjectKind::ReplicaSet => Self::ReplicaSet(Arc::new(decode(value)?)),
            ObjectKind::StatefulSet => Self::StatefulSet(Arc::new(decode(value)?)),
            ObjectKind::ReplicationController => {
                Self::ReplicationController(Arc::new(decode(value)?))
            }
            ObjectKind::DeviceClass => Self::DeviceClass(Arc::new(decode(value)?)),
            ObjectKind::ResourceClaim => Self::ResourceClaim(Arc::new(decode(value)?)),
            ObjectKind::ResourceClaimTemplate => {
                Self::ResourceClaimTemplate(Arc::new(decode(value)?))
            }
            ObjectKind::ResourceSlice => Self::ResourceSlice(Arc::new(decode(value)?)),
            ObjectKind::PodGroup => Self::PodGroup(Arc::new(decode(value)?)),
            ObjectKind::Workload => Self::Workload(Arc::new(decode(value)?)),
            ObjectKind::DeviceTaintRule => Self::DeviceTaintRule(Arc::new(decode(value)?)),
            ObjectKind::CsiDriver => Self::CsiDriver(Arc::new(decode(value)?)),
            ObjectKind::CsiStorageCapacity => Self::CsiStorageCapacity(Arc::new(decode(value)?)),
            ObjectKind::PriorityClass => Self::PriorityClass(Arc::new(decode(value)?)),
        })
    }
}

/// An object that did not decode: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct ObjectDecodeError {
    /// The field's path (`spec.schedulingPolicy.gang.minCount`); empty
    /// for the object itself.
    pub path: String,
    /// serde's words (`invalid type: string "four", expected i32`).
    pub message: String,
}

/// Decodes `T`; on an error, decodes again tracking the path, so that the
/// valid (common) case pays nothing for paths.
fn decode<T: serde::de::DeserializeOwned>(
    value: &serde_json::Value,
) -> Result<T, ObjectDecodeError> {
    T::deserialize(value).map_err(|first| {
        let mut track = serde_path_to_error::Track::new();
        let message =
            match T::deserialize(serde_path_to_error::Deserializer::new(value, &mut track)) {
                Err(e) => e.to_string(),
                Ok(_) => first.to_string(),
            };
        let path = track.path().to_string();
        ObjectDecodeError {
            path: if path == "." { String::new() } else { path },
            message,
        }
    })
}
