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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

pub use super::decode::{MAX_DEPTH, MAX_OBJECT_BYTES};
use super::decode::{check_bounds, decode_strict};
use super::validation::{NameRule, validate_meta, validate_pod};
use super::{InvalidObject, defaults};

/// Defaults and validates a pod as the API server would on create.
pub fn admit_pod(pod: &mut Pod) -> Result<(), InvalidObject> {
    defaults::apply_pod_defaults(pod);
    validate_pod(pod)
}

/// Validates a node as the API server would on create, for what the
/// scheduler relies on (name, labels, annotations).
pub fn admit_node(node: &Node) -> Result<(), InvalidObject> {
    validate_meta(&node.metadata, false, NameRule::Subdomain)
}

/// Validates the metadata of an object of another kind: `namespaced` says
/// whether it lives in a namespace; namespaces and services are named by
/// DNS labels (`label_name`), the rest by DNS subdomains.
pub fn admit_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    label_name: bool,
) -> Result<(), InvalidObject> {
    let rule = if label_name {
        NameRule::Label
    } else {
        NameRule::Subdomain
    };
    validate_meta(meta, namespaced, rule)
}

/// A pod from its JSON: bounded, strictly decoded, defaulted, validated.
pub fn pod_from_json(value: Value) -> Result<Pod, InvalidObject> {
    check_bounds(&value)?;
    let mut pod: Pod = decode_strict(value)?;
    admit_pod(&mut pod)?;
    Ok(pod)
}

/// A node from its JSON: bounded, strictly decoded, validated.
pub fn node_from_json(value: Value) -> Result<Node, InvalidObject> {
    check_bounds(&value)?;
    let node: Node = decode_strict(value)?;
    admit_node(&node)?;
    Ok(node)
}
