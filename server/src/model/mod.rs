//! berth's compact, pre-parsed views of Kubernetes objects.
//!
//! Kubernetes objects (k8s-openapi types) come in at the edges: the cluster
//! source, YAML files, the gRPC API. Each is turned once into a [`PodInfo`] or
//! a [`NodeSpec`]: quantities parsed to integers, tolerations and ports
//! pre-parsed. The scheduling hot path reads only these.

pub mod admission;
pub mod affinity;
pub mod decode;
pub mod defaults;
pub mod dra;
pub mod event_resource;
pub mod labels;
pub mod node;
pub mod pod;
pub mod pod_group;
pub mod pod_object;
pub mod priority;
pub mod quantity;
pub mod resource;
pub mod selector;
pub mod taint;
pub mod validation;

pub use affinity::{
    AffinityTerm, InclusionPolicy, NodeAffinity, Placement, PodAffinityTerms, SpreadConstraint,
    WeightedAffinityTerm, WhenUnsatisfiable,
};
pub use event_resource::EventResource;
pub use labels::Labels;
pub use node::NodeSpec;
pub use pod::{ClaimSource, HostPort, PodClaim, PodInfo, PodRef, Protocol, normalized_image_name};
pub use pod_group::{GroupKey, GroupPolicy, PodGroupInfo, PreemptionPolicy};
pub use pod_object::PodObject;
pub use resource::{Resource, ResourceName};
pub use selector::{LabelSelector, NodeSelector, NodeSelectorTerm, Operator, Requirement};
pub use taint::{Taint, TaintEffect, Toleration, TolerationOperator};

/// A Kubernetes object that cannot be used, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidObject {
    /// The JSON path of the offending field inside the object, for example
    /// `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// The longest message kept: decoders quote the value they refused, and a
/// megabyte string in the wrong place would otherwise come back whole.
const MAX_MESSAGE: usize = 512;

impl InvalidObject {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if message.len() > MAX_MESSAGE {
            let total = message.len();
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(&format!("... ({total} bytes in all)"));
        }
        Self {
            path: path.into(),
            message,
        }
    }
}

impl std::fmt::Display for InvalidObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for InvalidObject {}
