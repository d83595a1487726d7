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

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

pub use super::decode::{MAX_DEPTH, MAX_OBJECT_BYTES};
use super::decode::{check_bounds, decode_strict};
pub use super::validation::{ObjectRef, validate_object};
use super::validation::{validate_node, validate_pod};
use super::{InvalidObject, defaults};

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
