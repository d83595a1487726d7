//! Admission of objects that reach berth without passing an API server:
//! gRPC requests (DryRun, Simulate, Apply), `--cluster` files and the
//! sample cluster. What a Kubernetes API server would have done before the
//! scheduler saw them is done here, in one place:
//!
//! 1. bounds: at most [`MAX_OBJECT_BYTES`] of JSON, [`MAX_DEPTH`] levels;
//! 2. strict decoding: unknown fields are errors naming their path;
//! 3. defaults the scheduler can observe ([`super::defaults`]);
//! 4. validation of what the scheduler relies on ([`super::validation`]).
//!
//! Objects from a real cluster (kube mode) passed the API server and are
//! not admitted again.
//!
//! [`admit`] is the one entry, for every kind: it decodes, defaults and
//! validates an object given as JSON. What the API server does at write
//! time with the stored object at hand is here too ([`pod_group_write`],
//! PodGroups' update strategy); the Priority admission plugin, which reads
//! the stored PriorityClasses, is [`super::priority::admit_priority`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

pub use super::decode::{MAX_DEPTH, MAX_OBJECT_BYTES};
use super::decode::{check_bounds, decode_strict};
use super::objects::{KubeObject, ObjectKind};
pub use super::validation::{ObjectRef, validate_object};
use super::validation::{validate_node, validate_pod};
use super::{InvalidObject, NodeSpec, PodInfo, defaults};

/// Defaults and validates a pod as the API server would on create.
pub fn admit_pod(pod: &mut Pod) -> Result<(), InvalidObject> {
    defaults::apply_pod_defaults(pod);
    validate_pod(pod)
}

/// Validates a node as the API server would on create.
pub fn admit_node(node: &Node) -> Result<(), InvalidObject> {
    validate_node(node)
}

/// Refuses an object whose `apiVersion` or `kind`, when given, is not
/// `api_version` and `kind`, naming the field (the decoder would say only
/// "invalid value: string \"v2\", expected v1").
pub fn check_type_meta(value: &Value, api_version: &str, kind: &str) -> Result<(), InvalidObject> {
    for (field, want) in [("apiVersion", api_version), ("kind", kind)] {
        match value.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == want => {}
            Some(Value::String(s)) => {
                return Err(InvalidObject::new(
                    field,
                    format!("Unsupported value: {s:?}: supported values: {want:?}"),
                ));
            }
            Some(other) => {
                return Err(InvalidObject::new(
                    field,
                    format!("Invalid value: {other}: must be a string, {want:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// A pod from its JSON: bounded, strictly decoded, defaulted, validated.
pub fn pod_from_json(value: Value) -> Result<Pod, InvalidObject> {
    check_bounds(&value)?;
    check_type_meta(&value, "v1", "Pod")?;
    let mut pod: Pod = decode_strict(value)?;
    admit_pod(&mut pod)?;
    Ok(pod)
}

/// A node from its JSON: bounded, strictly decoded, validated.
pub fn node_from_json(value: Value) -> Result<Node, InvalidObject> {
    check_bounds(&value)?;
    check_type_meta(&value, "v1", "Node")?;
    let node: Node = decode_strict(value)?;
    admit_node(&node)?;
    Ok(node)
}

/// The kinds admission takes (and the embedded cluster stores), for
/// messages.
pub fn supported_kinds() -> String {
    ["Node", "Pod"]
        .into_iter()
        .chain(ObjectKind::ALL.iter().map(|k| k.type_meta().1))
        .collect::<Vec<_>>()
        .join(", ")
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

/// Why admission refused an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The object is of no kind berth takes.
    #[error("kind {kind:?} is not supported by the embedded cluster (supported: {supported})", kind = .0, supported = supported_kinds())]
    UnsupportedKind(String),
    /// The object is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidObject),
}

/// Decodes, defaults and validates an object given as JSON, as the API
/// server would before storing it: the one entry for every kind.
pub fn admit(value: Value) -> Result<Admitted, Refused> {
    let kind_text = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    // Nodes and pods are also pre-parsed here, as they will be when
    // stored, so that a batch is refused before any of it is stored.
    match kind_text.as_str() {
        "Node" => {
            let node = node_from_json(value)?;
            NodeSpec::new(Arc::new(node.clone()))?;
            Ok(Admitted::Node(Box::new(node)))
        }
        "Pod" => {
            let pod = pod_from_json(value)?;
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
                return Err(Refused::UnsupportedKind(kind_text));
            };
            check_bounds(&value)?;
            let (api_version, kind_name) = kind.type_meta();
            check_type_meta(&value, api_version, kind_name)?;
            // Other kinds are decoded leniently, then encoded again: a
            // field of the input missing from the result is one the kind
            // does not have.
            let obj = KubeObject::from_json(kind, value.clone())
                .map_err(|e| InvalidObject::new(e.path, e.message))?;
            if let Some(path) = super::decode::unknown_field(&value, &obj.to_json()) {
                let name = path
                    .rsplit(['.', '['])
                    .next()
                    .unwrap_or(&path)
                    .trim_end_matches(']')
                    .to_string();
                return Err(InvalidObject::new(path, format!("unknown field \"{name}\"")).into());
            }
            validate_stored_kind(&obj)?;
            let obj = match obj {
                KubeObject::PodGroup(pg) => {
                    let mut pg = (*pg).clone();
                    super::pod_group::admit_pod_group(&mut pg)?;
                    KubeObject::PodGroup(Arc::new(pg))
                }
                o => o,
            };
            Ok(Admitted::Object(obj))
        }
    }
}

/// Validates an object of a kind other than Node and Pod as the API server
/// does on create ([`validate_object`]).
pub fn validate_stored_kind(obj: &KubeObject) -> Result<(), InvalidObject> {
    use ObjectRef as R;
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
    validate_object(r)
}

/// A PodGroup write as the API server's strategy makes it: on create the
/// status starts empty, on update the spec's immutable fields are checked
/// and the status is kept (only the status subresource changes it).
pub fn pod_group_write(
    old: Option<&KubeObject>,
    obj: KubeObject,
) -> Result<KubeObject, InvalidObject> {
    let KubeObject::PodGroup(new) = &obj else {
        return Ok(obj);
    };
    let mut pg = (**new).clone();
    match old {
        Some(KubeObject::PodGroup(old)) => {
            super::pod_group::validate_pod_group_update(old, &pg)?;
            if pg.spec.disruption_mode.is_none() {
                pg.spec.disruption_mode = old.spec.disruption_mode.clone();
            }
            pg.status = old.status.clone();
        }
        _ => pg.status = Some(Default::default()),
    }
    Ok(KubeObject::PodGroup(Arc::new(pg)))
}
