//! The values handlers receive and return: statuses, the cycle's pod, nodes,
//! reservations and the per-point results.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::extender::v1 as pb;
use k8s_openapi::api::core::v1::{Node, Pod};

pub use pb::{Code, ExtensionPoint, ScoreNormalization};

/// A Scheduling Framework status: a code and, for rejections and errors, the
/// reasons users see (in the pod's condition and events).
///
/// Word reasons as kube-scheduler does, so that berthd's aggregated message
/// reads naturally: "node(s) didn't have a GPU with enough free memory".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The outcome.
    pub code: Code,
    /// Human-readable reasons; empty for success.
    pub reasons: Vec<String>,
}

impl Default for Status {
    fn default() -> Self {
        Self::success()
    }
}

impl Status {
    /// A status with `code` and one reason.
    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        Self {
            code,
            reasons: vec![reason.into()],
        }
    }

    /// Success, no reasons.
    pub fn success() -> Self {
        Self {
            code: Code::Success,
            reasons: Vec::new(),
        }
    }

    /// `CODE_SKIP`: the plugin has nothing to do (PreFilter, PreScore, Bind).
    pub fn skip() -> Self {
        Self {
            code: Code::Skip,
            reasons: Vec::new(),
        }
    }

    /// `CODE_UNSCHEDULABLE` with `reason`: the pod does not fit; preemption
    /// may help.
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE` with `reason`: the pod does not
    /// fit and preemption cannot help.
    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// `CODE_ERROR` with `reason`: an internal error; the attempt fails and
    /// the pod is retried with backoff.
    pub fn error(reason: impl Into<String>) -> Self {
        Self::new(Code::Error, reason)
    }

    /// Adds a reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reasons.push(reason.into());
        self
    }

    /// Whether the code is `CODE_SUCCESS`.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Whether the code is one of the two rejections (`CODE_UNSCHEDULABLE`,
    /// `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE`).
    pub fn is_rejection(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    pub(crate) fn into_proto(self) -> pb::Status {
        pb::Status {
            code: self.code as i32,
            reasons: self.reasons,
        }
    }

    pub(crate) fn from_proto(s: pb::Status) -> Self {
        Self {
            // A code this SDK does not know is an error: it is not success
            // and not a rejection it could reason about.
            code: Code::try_from(s.code).unwrap_or(Code::Error),
            reasons: s.reasons,
        }
    }
}

/// Whether a handler's status has a code its point allows; the error
/// answer saying so otherwise.
pub(crate) fn check_code(point: &str, s: &Status, allowed: &[Code]) -> Result<(), String> {
    if allowed.contains(&s.code) {
        Ok(())
    } else {
        Err(format!(
            "the {point} handler answered {}, which {point} does not allow",
            s.code.as_str_name()
        ))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code.as_str_name())?;
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.reasons.join(", "))?;
        }
        Ok(())
    }
}

/// Who a pod is: namespace, name and uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodIdentity {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl fmt::Display for PodIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The pod a scheduling cycle is about: parsed once from the cycle's
/// `CycleStart` and shared (cheaply cloned) by every request of the cycle.
#[derive(Debug, Clone)]
pub struct CyclePod {
    cycle_id: u64,
    identity: PodIdentity,
    object: Arc<Pod>,
}

impl CyclePod {
    /// A cycle's pod; namespace, name and uid are taken from the pod's
    /// metadata (empty when missing). Mostly for unit tests of handlers.
    pub fn new(cycle_id: u64, pod: Pod) -> Self {
        let identity = PodIdentity {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        Self::from_parts(cycle_id, identity, Arc::new(pod))
    }

    /// A cycle's pod with an explicit identity (what `CycleStart` carries).
    pub fn from_parts(cycle_id: u64, identity: PodIdentity, object: Arc<Pod>) -> Self {
        Self {
            cycle_id,
            identity,
            object,
        }
    }

    /// The cycle's id (unique on its stream).
    pub fn cycle_id(&self) -> u64 {
        self.cycle_id
    }

    /// Namespace, name and uid.
    pub fn identity(&self) -> &PodIdentity {
        &self.identity
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        &self.identity.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.identity.name
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.identity.uid
    }

    /// The v1 Pod.
    pub fn object(&self) -> &Pod {
        &self.object
    }

    /// The v1 Pod, shared.
    pub fn arc(&self) -> &Arc<Pod> {
        &self.object
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(self.object.metadata.labels.as_ref(), key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(self.object.metadata.annotations.as_ref(), key)
    }
}

fn lookup<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(String::as_str)
}

/// A node named in a request, with its object from the session's node table
/// when the extender asked for nodes (see `ExtenderBuilder::wants_nodes`).
#[derive(Debug, Clone)]
pub struct NodeRef<'a> {
    name: &'a str,
    id: u32,
    object: Option<Cow<'a, Arc<Node>>>,
}

impl<'a> NodeRef<'a> {
    /// A node reference (for unit tests of per-node handlers).
    pub fn new(name: &'a str, object: Option<Arc<Node>>) -> Self {
        Self {
            name,
            id: 0,
            object: object.map(Cow::Owned),
        }
    }

    /// A reference to a node of the session's table.
    pub(crate) fn of(entry: &'a crate::nodes::NodeEntry) -> Self {
        Self {
            name: &entry.name,
            id: entry.id,
            object: entry.node.as_ref().map(Cow::Borrowed),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The id berthd named the node by in the request (0 for references
    /// made with [`NodeRef::new`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The v1 Node, if the node table has it (it always does when the
    /// extender wants nodes: berthd sends a node before naming it).
    pub fn object(&self) -> Option<&Node> {
        self.object.as_deref().map(|a| &**a)
    }

    /// The v1 Node, shared.
    pub fn arc(&self) -> Option<&Arc<Node>> {
        self.object.as_deref()
    }
}

/// A node's status: in a Filter answer, a rejected node; in a PostFilter
/// request, why a node was rejected and by which plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's name.
    pub node: String,
    /// The rejection (`CODE_UNSCHEDULABLE`, `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE`
    /// or `CODE_ERROR`) and its reasons.
    pub status: Status,
    /// In PostFilter requests: the plugin that rejected the node. Ignored in
    /// answers.
    pub plugin: String,
}

impl NodeStatus {
    /// A rejection of `node`.
    pub fn new(node: impl Into<String>, status: Status) -> Self {
        Self {
            node: node.into(),
            status,
            plugin: String::new(),
        }
    }
}

/// A Reserve or Permit request's reservation: the node chosen and the id
/// that a later Unreserve or PermitDecision names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The reservation id.
    pub id: String,
    /// The node the pod is assumed on.
    pub node: String,
}

/// What this process saw of a reservation before its Unreserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorReserve {
    /// The Reserve handler returned success for this reservation.
    Succeeded,
    /// The Reserve handler returned a non-success status, an error, or
    /// panicked: it may have reserved part of what it tracks.
    Failed,
    /// No Reserve of this reservation was seen by this process (the Reserve
    /// request was lost, the process restarted, or the reservation was
    /// forgotten because the SDK's memory of reservations is bounded).
    Unseen,
}

/// An Unreserve: undo a reservation. Self-contained: it may arrive on a later
/// stream than its Reserve, after the cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreservation {
    /// The reservation id, as in the Reserve.
    pub id: String,
    /// The node of the reservation.
    pub node: String,
    /// The pod.
    pub pod: PodIdentity,
    /// What this process saw of the reservation's Reserve.
    pub prior: PriorReserve,
}

/// PreFilter's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PreFilterResult {
    /// Success, `CODE_SKIP` (Filter is then not called this cycle), or a
    /// rejection of the pod on every node.
    pub status: Status,
    /// With success: only these nodes are considered in this cycle.
    pub node_names: Option<Vec<String>>,
}

impl PreFilterResult {
    /// Success; every node is considered.
    pub fn success() -> Self {
        Self::default()
    }

    /// `CODE_SKIP`: this extender has nothing to do for the pod; its Filter
    /// is not called this cycle.
    pub fn skip() -> Self {
        Status::skip().into()
    }

    /// Success, considering only `nodes`.
    pub fn restrict(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            status: Status::success(),
            node_names: Some(nodes.into_iter().map(Into::into).collect()),
        }
    }
}

impl From<Status> for PreFilterResult {
    fn from(status: Status) -> Self {
        Self {
            status,
            node_names: None,
        }
    }
}

/// PostFilter's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PostFilterResult {
    /// Success with a nominated node, or `CODE_UNSCHEDULABLE` when the
    /// extender cannot help.
    pub status: Status,
    /// With success: the node the pod should go to once room is made.
    pub nominated_node: Option<String>,
}

impl PostFilterResult {
    /// Success, nominating `node`.
    pub fn nominate(node: impl Into<String>) -> Self {
        Self {
            status: Status::success(),
            nominated_node: Some(node.into()),
        }
    }

    /// The extender cannot help (`CODE_UNSCHEDULABLE` with `reason`).
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Status::unschedulable(reason).into()
    }
}

impl From<Status> for PostFilterResult {
    fn from(status: Status) -> Self {
        Self {
            status,
            nominated_node: None,
        }
    }
}

/// Permit's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitOutcome {
    /// The pod goes on to binding.
    Allow,
    /// The pod is rejected (a `CODE_UNSCHEDULABLE`,
    /// `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE` or `CODE_ERROR` status); berthd
    /// then sends Unreserve.
    Reject(Status),
    /// The pod waits until the extender decides through a
    /// [`PermitDecider`](crate::PermitDecider), or until this timeout passes
    /// (berthd caps it at 15 minutes, then rejects the pod and sends
    /// Unreserve).
    Wait(Duration),
}

impl PermitOutcome {
    /// A rejection (`CODE_UNSCHEDULABLE`) with `reason`.
    pub fn reject(reason: impl Into<String>) -> Self {
        Self::Reject(Status::unschedulable(reason))
    }
}

/// An error a handler returns: the SDK answers the request with
/// `Response.error` carrying its message (berthd then skips the extender if
/// it is ignorable, else fails the scheduling attempt with that message).
///
/// Any `std::error::Error` converts into it with `?`; other messages through
/// [`HandlerError::msg`].
pub struct HandlerError {
    message: String,
}

impl HandlerError {
    /// An error with `message`.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }

    /// The message sent to berthd.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(e: E) -> Self {
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Self { message }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HandlerError({:?})", self.message)
    }
}

/// What handlers return.
pub type HandlerResult<T> = Result<T, HandlerError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn handler_error_keeps_the_source_chain() {
        let e: HandlerError = Outer(std::io::Error::other("inner")).into();
        assert_eq!(e.message(), "outer: inner");
    }

    #[test]
    fn unknown_codes_become_errors() {
        let s = Status::from_proto(pb::Status {
            code: 99,
            reasons: vec!["x".into()],
        });
        assert_eq!(s.code, Code::Error);
        assert_eq!(s.to_string(), "CODE_ERROR: x");
    }

    #[test]
    fn cycle_pod_reads_labels_and_annotations() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.labels = Some([("a".to_string(), "1".to_string())].into());
        let p = CyclePod::new(7, pod);
        assert_eq!(p.label("a"), Some("1"));
        assert_eq!(p.label("b"), None);
        assert_eq!(p.annotation("a"), None);
        assert_eq!(p.identity().to_string(), "ns/p");
        assert_eq!(p.cycle_id(), 7);
    }
}
