//! What the embedded cluster makes of admitted objects: the kinds it
//! stores ([`Kind`]), where an admitted object lives, what an apply did,
//! and why one was refused. Admission itself (decoding, defaulting,
//! validation, for every kind) is the object model's
//! ([`crate::model::admission`]).

use crate::cache::{KubeObject, ObjectKind};
use crate::model::InvalidObject;
use crate::model::admission::Refused;
pub use crate::model::admission::{
    Admitted, admit, pod_group_write, supported_kinds, validate_stored_kind,
};

impl From<Refused> for ApplyError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::UnsupportedKind(kind) => Self::UnsupportedKind(kind),
            Refused::Invalid(e) => Self::Invalid(e),
        }
    }
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
