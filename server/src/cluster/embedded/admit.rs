//! Admission into the embedded cluster: an object given as JSON decoded,
//! defaulted and validated as the API server would before storing it
//! ([`admit`]), the kinds the store holds ([`Kind`]), and what an apply
//! did or why it was refused.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cache::{KubeObject, ObjectKind};
use crate::model::{InvalidObject, NodeSpec, PodInfo, admission};

/// The kinds the embedded cluster stores, for messages.
pub fn supported_kinds() -> String {
    ["Node", "Pod"]
        .into_iter()
        .chain(ObjectKind::ALL.iter().map(|k| k.type_meta().1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An object the store refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The object is not one the store holds.
    #[error("kind {kind:?} is not supported by the embedded cluster (supported: {supported})", kind = .0, supported = supported_kinds())]
    UnsupportedKind(String),
    /// The object does not parse as its kind.
    #[error("{0}")]
    Malformed(String),
    /// The object is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidObject),
    /// The object's namespace does not exist (the API server's 404).
    #[error("metadata.namespace: namespaces {0:?} not found")]
    NamespaceNotFound(String),
    /// Admission refused the object (the API server's 403), e.g. a pod
    /// naming a PriorityClass that does not exist.
    #[error(transparent)]
    Forbidden(#[from] crate::model::priority::PriorityRefused),
}

/// What an apply did to an object, as kubectl reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It did not exist.
    Created,
    /// It existed and changed.
    Configured,
    /// It existed as given: nothing was written.
    Unchanged,
}

/// An object decoded, defaulted and validated, ready to store.
#[derive(Debug, Clone)]
pub enum Admitted {
    /// A node.
    Node(Box<Node>),
    /// A pod.
    Pod(Box<Pod>),
    /// Any other stored kind.
    Object(KubeObject),
}

impl Admitted {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Node(_) => Kind::Node,
            Self::Pod(_) => Kind::Pod,
            Self::Object(o) => Kind::Object(o.kind()),
        }
    }

    /// The namespace it must live in, if namespaced (`default` when unset).
    pub(super) fn namespace(&self) -> Option<String> {
        let (meta, namespaced) = match self {
            Self::Node(_) => return None,
            Self::Pod(p) => (&p.metadata, true),
            Self::Object(o) => (o.metadata(), o.kind().namespaced()),
        };
        namespaced.then(|| {
            meta.namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into())
        })
    }

    /// The namespace this object creates, if it is a Namespace.
    pub(super) fn defines_namespace(&self) -> Option<String> {
        match self {
            Self::Object(KubeObject::Namespace(ns)) => ns.metadata.name.clone(),
            _ => None,
        }
    }
}

/// A Kubernetes object kind the embedded cluster stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// v1 Node.
    Node,
    /// v1 Pod.
    Pod,
    /// Any other stored kind.
    Object(ObjectKind),
}

impl Kind {
    /// Parses a kind as users type it: `Node`, `nodes`, `pod`, `pvc`, ...
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "node" | "nodes" | "no" => Some(Self::Node),
            "pod" | "pods" | "po" => Some(Self::Pod),
            other => ObjectKind::parse(other).map(Self::Object),
        }
    }
}

/// Decodes, defaults and validates an object given as JSON, as the API
/// server would before storing it ([`crate::model::admission`]).
pub fn admit(value: serde_json::Value) -> Result<Admitted, ApplyError> {
    let kind_text = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    // Nodes and pods are also pre-parsed here, as they will be when
    // stored, so that a batch is refused before any of it is stored.
    match kind_text.as_str() {
        "Node" => {
            let node = admission::node_from_json(value)?;
            NodeSpec::new(Arc::new(node.clone()))?;
            Ok(Admitted::Node(Box::new(node)))
        }
        "Pod" => {
            let pod = admission::pod_from_json(value)?;
            let mut probe = pod.clone();
            probe.metadata.uid.get_or_insert_with(|| "admission".into());
            PodInfo::new(Arc::new(probe))?;
            Ok(Admitted::Pod(Box::new(pod)))
        }
        other => {
            let Some(kind) = ObjectKind::ALL
                .into_iter()
                .find(|k| k.type_meta().1 == other)
            else {
                return Err(ApplyError::UnsupportedKind(kind_text));
            };
            crate::model::decode::check_bounds(&value)?;
            let (api_version, kind_name) = kind.type_meta();
            admission::check_type_meta(&value, api_version, kind_name)?;
            // Other kinds are decoded leniently, then encoded again: a
            // field of the input missing from the result is one the kind
            // does not have.
            let obj = KubeObject::from_json(kind, value.clone())
                .map_err(|e| InvalidObject::new(e.path, e.message))?;
            if let Some(path) = crate::model::decode::unknown_field(&value, &obj.to_json()) {
                let name = path
                    .rsplit(['.', '['])
                    .next()
                    .unwrap_or(&path)
                    .trim_end_matches(']')
                    .to_string();
                return Err(InvalidObject::new(path, format!("unknown field \"{name}\"")).into());
            }
            admit_meta(&obj, kind)?;
            let obj = match obj {
                KubeObject::PodGroup(pg) => {
                    let mut pg = (*pg).clone();
                    crate::model::pod_group::admit_pod_group(&mut pg)?;
                    KubeObject::PodGroup(Arc::new(pg))
                }
                o => o,
            };
            Ok(Admitted::Object(obj))
        }
    }
}

/// A PodGroup write as the API server's strategy makes it: on create the
/// status starts empty, on update the spec's immutable fields are checked
/// and the status is kept (only the status subresource changes it).
pub(super) fn pod_group_write(
    old: Option<&KubeObject>,
    obj: KubeObject,
) -> Result<KubeObject, ApplyError> {
    let KubeObject::PodGroup(new) = &obj else {
        return Ok(obj);
    };
    let mut pg = (**new).clone();
    match old {
        Some(KubeObject::PodGroup(old)) => {
            crate::model::pod_group::validate_pod_group_update(old, &pg)?;
            if pg.spec.disruption_mode.is_none() {
                pg.spec.disruption_mode = old.spec.disruption_mode.clone();
            }
            pg.status = old.status.clone();
        }
        _ => pg.status = Some(Default::default()),
    }
    Ok(KubeObject::PodGroup(Arc::new(pg)))
}

/// Validates an object of a kind other than Node and Pod as the API server
/// does on create ([`admission::validate_object`]).
pub(super) fn admit_meta(obj: &KubeObject, _kind: ObjectKind) -> Result<(), InvalidObject> {
    use admission::ObjectRef as R;
    let r = match obj {
        KubeObject::Namespace(o) => R::Namespace(o),
        KubeObject::PersistentVolume(o) => R::PersistentVolume(o),
        KubeObject::PersistentVolumeClaim(o) => R::PersistentVolumeClaim(o),
        KubeObject::StorageClass(o) => R::StorageClass(o),
        KubeObject::CsiNode(o) => R::CsiNode(o),
        KubeObject::PodDisruptionBudget(o) => R::PodDisruptionBudget(o),
        KubeObject::Service(o) => R::Service(o),
        KubeObject::ReplicaSet(o) => R::ReplicaSet(o),
        KubeObject::StatefulSet(o) => R::StatefulSet(o),
        KubeObject::ReplicationController(o) => R::ReplicationController(o),
        KubeObject::DeviceClass(o) => R::DeviceClass(o),
        KubeObject::ResourceClaim(o) => R::ResourceClaim(o),
        KubeObject::ResourceClaimTemplate(o) => R::ResourceClaimTemplate(o),
        KubeObject::ResourceSlice(o) => R::ResourceSlice(o),
        KubeObject::DeviceTaintRule(o) => R::DeviceTaintRule(o),
        KubeObject::CsiDriver(o) => R::CsiDriver(o),
        KubeObject::CsiStorageCapacity(o) => R::CsiStorageCapacity(o),
        KubeObject::PriorityClass(o) => R::PriorityClass(o),
        KubeObject::PodGroup(o) => R::PodGroup(o),
        KubeObject::Workload(o) => R::Workload(o),
    };
    admission::validate_object(r)
}
