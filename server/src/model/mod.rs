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
pub mod objects;
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

/// A map keyed by pod UID. The hash is foldhash's (several times SipHash's
/// speed on a UID, seeded per map): the scheduler looks pods up by UID a
/// few times in every cycle, and UIDs are the API server's, not a
/// client's free choice.
pub type UidMap<V> = std::collections::HashMap<std::sync::Arc<str>, V, foldhash::fast::RandomState>;

/// A map keyed by node name, hashed as [`UidMap`] is: the cache and each
/// snapshot look a node up by name for every pod assumed, and a group
/// cycle's trial does so twice more a pod. Node names are the cluster's,
/// not a client's free choice.
pub type NodeNameMap<V> = UidMap<V>;

/// A Kubernetes object that cannot be used, with the field at fault (and,
/// as the API server reports them, every other field at fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidObject {
    /// The JSON path of the offending field inside the object, for example
    /// `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
    /// The other fields at fault, as (path, message), in the order the
    /// API server's validation finds them.
    pub also: Vec<(String, String)>,
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
            also: Vec::new(),
        }
    }

    /// Every error, the first one first, as (path, message).
    pub fn errors(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once((self.path.as_str(), self.message.as_str()))
            .chain(self.also.iter().map(|(p, m)| (p.as_str(), m.as_str())))
    }

    /// The errors with each path under `field` (a request field such as
    /// `pod` or `objects[0]`), as the API server lists several: one as
    /// `field.path: message`, more as `[a, b]`.
    pub fn under(&self, field: &str) -> String {
        let one = |path: &str, message: &str| match (field.is_empty(), path.is_empty()) {
            (_, true) if field.is_empty() => message.to_string(),
            (_, true) => format!("{field}: {message}"),
            (true, false) => format!("{path}: {message}"),
            (false, false) if path.starts_with('[') => format!("{field}{path}: {message}"),
            (false, false) => format!("{field}.{path}: {message}"),
        };
        let all: Vec<String> = self.errors().map(|(p, m)| one(p, m)).collect();
        if all.len() == 1 {
            all.into_iter().next().unwrap_or_default()
        } else {
            format!("[{}]", all.join(", "))
        }
    }
}

impl std::fmt::Display for InvalidObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.under(""))
    }
}

impl std::error::Error for InvalidObject {}
