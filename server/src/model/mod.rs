//! berth's compact, pre-parsed views of Kubernetes objects.
//!
//! Kubernetes objects (k8s-openapi types) come in at the edges: the cluster
//! source, YAML files, the gRPC API. Each is turned once into a [`PodInfo`] or
//! a [`NodeSpec`]: quantities parsed to integers, tolerations and ports
//! pre-parsed. The scheduling hot path reads only these.

pub mod affinity;
pub mod dra;
pub mod labels;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod resource;
pub mod selector;
pub mod taint;

pub use affinity::{
    AffinityTerm, InclusionPolicy, NodeAffinity, Placement, PodAffinityTerms, SpreadConstraint,
    WeightedAffinityTerm, WhenUnsatisfiable,
};
pub use labels::Labels;
pub use node::NodeSpec;
pub use pod::{ClaimSource, HostPort, PodClaim, PodInfo, PodRef, Protocol};
pub use resource::{Resource, ResourceName};
pub use selector::{LabelSelector, NodeSelector, NodeSelectorTerm, Operator, Requirement};
pub use taint::{Taint, TaintEffect, Toleration, TolerationOperator};

/// A Kubernetes object that cannot be used, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InvalidObject {
    /// The JSON path of the offending field inside the object, for example
    /// `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidObject {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}
