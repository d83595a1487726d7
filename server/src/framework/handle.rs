//! [`Handle`]: what plugins reach beyond their arguments.
//!
//! Given to every plugin factory; lives as long as the scheduler. Through it
//! a plugin reaches the snapshot of the cycle in progress, the pods waiting
//! at Permit, the cluster (to bind), the event recorder and the CPU pool.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;

use super::extender::PreemptionExtender;
use super::parallelize::Parallelizer;
use super::waiting_pods::WaitingPods;
use crate::cache::{KubeObject, ObjectKind, ObjectStore, Snapshot};
use crate::features::Features;
use crate::model::PodInfo;

/// Why a write to the cluster failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The object does not exist (any more).
    #[error("{0}")]
    NotFound(String),
    /// The write conflicts with the object's state (e.g. already bound).
    #[error("{0}")]
    Conflict(String),
    /// Writes are not accepted here.
    #[error("{0}")]
    Unsupported(String),
    /// Anything else (network, server errors).
    #[error("{0}")]
    Other(String),
}

/// The writes plugins make to the cluster.
#[async_trait]
pub trait ClusterClient: Send + Sync {
    /// Binds `pod` to `node` (the `pods/binding` subresource).
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError>;

    /// Evicts a preemption victim: sets its `DisruptionTarget` condition
    /// (reason `PreemptionByScheduler`, with `message`), then deletes it with
    /// a UID precondition.
    async fn delete_pod(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError>;

    /// Replaces an object (as a PUT does); fails with `Conflict` if its
    /// resourceVersion is stale. Returns the stored object.
    async fn update_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError>;

    /// Sets (or with `None` clears) the pod's `status.nominatedNodeName`.
    async fn set_nominated_node_name(
        &self,
        pod: &PodInfo,
        node: Option<&str>,
    ) -> Result<(), ClusterError>;

    /// Replaces an object's status (a PUT of its `status` subresource: the
    /// rest of the object is kept as stored); `Conflict` if its
    /// resourceVersion is stale. Returns the stored object.
    async fn update_object_status(&self, obj: KubeObject) -> Result<KubeObject, ClusterError>;

    /// Reads an object as the cluster has it now.
    async fn get_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<KubeObject, ClusterError>;

    /// Removes the consumer with `consumer_uid` from a ResourceClaim's
    /// `status.reservedFor`, as kube-scheduler's Unreserve does (a patch of
    /// the status with the claim's UID as precondition, so it needs no
    /// fresh copy of the claim).
    async fn remove_claim_reservation(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ClusterError>;

    /// Creates an object (a POST; `metadata.generateName` is honoured when
    /// no name is set). Returns the stored object.
    async fn create_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError>;

    /// Deletes an object.
    async fn delete_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ClusterError>;

    /// Sets the pod's `status.extendedResourceClaimStatus` (the claim
    /// DynamicResources made for its extended resources, and which of its
    /// requests serves which container's resource).
    async fn set_extended_resource_claim_status(
        &self,
        pod: &PodInfo,
        status: k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), ClusterError>;
}

/// The type of a Kubernetes event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// The longest event note the API accepts; longer ones are cut with " ...".
pub const NOTE_LENGTH_LIMIT: usize = 1024;

/// An event about a pod, as kube-scheduler records them.
#[derive(Debug, Clone)]
pub struct PodEvent {
    /// The pod the event is about.
    pub pod: Arc<PodInfo>,
    /// A pod the event relates to (the preemptor, for `Preempted`).
    pub related: Option<Arc<PodInfo>>,
    /// The reporting controller: the profile's scheduler name.
    pub controller: Arc<str>,
    /// Normal or Warning.
    pub event_type: EventType,
    /// e.g. `Scheduled`, `FailedScheduling`.
    pub reason: &'static str,
    /// e.g. `Binding`, `Scheduling`.
    pub action: &'static str,
    /// The human message, at most [`NOTE_LENGTH_LIMIT`] bytes.
    pub note: String,
}

impl PodEvent {
    /// An event; the note is truncated as upstream truncates it.
    pub fn new(
        pod: Arc<PodInfo>,
        controller: Arc<str>,
        event_type: EventType,
        reason: &'static str,
        action: &'static str,
        note: &str,
    ) -> Self {
        Self {
            pod,
            related: None,
            controller,
            event_type,
            reason,
            action,
            note: truncate_note(note),
        }
    }
}

impl PodEvent {
    /// Names the pod the event relates to.
    pub fn with_related(mut self, related: Arc<PodInfo>) -> Self {
        self.related = Some(related);
        self
    }
}

/// Cuts `note` to [`NOTE_LENGTH_LIMIT`] bytes, ending it with " ...".
pub fn truncate_note(note: &str) -> String {
    if note.len() <= NOTE_LENGTH_LIMIT {
        return note.to_string();
    }
    let mut end = NOTE_LENGTH_LIMIT - 4;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ...", &note[..end])
}

/// Where events go (the embedded store, or events.k8s.io in a cluster).
pub trait EventRecorder: Send + Sync {
    /// Records an event; must not block.
    fn record(&self, event: PodEvent);
}

/// Pods nominated to nodes (by preemption), by node name.
pub type NominatedPods = HashMap<Arc<str>, Vec<Arc<PodInfo>>>;

/// The queue's record of nominated pods.
pub trait PodNominator: Send + Sync {
    /// The nominated pods, as an immutable map (replaced, not changed, when
    /// nominations change; reading it is one `Arc` clone).
    fn nominated_pods(&self) -> Arc<NominatedPods>;
}

struct Inner {
    snapshot: RwLock<Arc<Snapshot>>,
    waiting_pods: WaitingPods,
    cluster: Arc<dyn ClusterClient>,
    events: Arc<dyn EventRecorder>,
    parallelizer: Parallelizer,
    nominator: RwLock<Option<Arc<dyn PodNominator>>>,
    objects: Arc<ObjectStore>,
    extenders: RwLock<Arc<[Arc<dyn PreemptionExtender>]>>,
    features: Features,
}

/// The plugins' way to the rest of the scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Handle(Arc<Inner>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("nodes", &self.snapshot().num_nodes())
            .field("waiting_pods", &self.0.waiting_pods.len())
            .field("parallelizer", &self.0.parallelizer)
            .finish()
    }
}

impl Handle {
    /// A handle over the given parts.
    pub fn new(
        cluster: Arc<dyn ClusterClient>,
        events: Arc<dyn EventRecorder>,
        parallelizer: Parallelizer,
    ) -> Self {
        Self::with_features(cluster, events, parallelizer, Features::default())
    }

    /// A handle whose plugins see `features` (the feature gates in force).
    pub fn with_features(
        cluster: Arc<dyn ClusterClient>,
        events: Arc<dyn EventRecorder>,
        parallelizer: Parallelizer,
        features: Features,
    ) -> Self {
        let objects = Arc::new(ObjectStore::default());
        objects
            .dra()
            .set_taint_rules_enabled(features.enable_dra_device_taint_rules);
        Self(Arc::new(Inner {
            snapshot: RwLock::new(Arc::new(Snapshot::new())),
            waiting_pods: WaitingPods::default(),
            cluster,
            events,
            parallelizer,
            nominator: RwLock::new(None),
            objects,
            extenders: RwLock::new(Arc::new([])),
            features,
        }))
    }

    /// The feature gates plugins read, once, when they are built (never in
    /// a hot loop: a plugin copies what it needs into itself).
    pub fn features(&self) -> &Features {
        &self.0.features
    }

    /// The snapshot of the scheduling cycle in progress (or the last one).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.0.snapshot.read().clone()
    }

    /// Publishes the snapshot of a new cycle.
    pub(crate) fn set_snapshot(&self, snapshot: Arc<Snapshot>) {
        *self.0.snapshot.write() = snapshot;
    }

    /// The pods held at Permit.
    pub fn waiting_pods(&self) -> &WaitingPods {
        &self.0.waiting_pods
    }

    /// The cluster, to bind pods.
    pub fn cluster(&self) -> &Arc<dyn ClusterClient> {
        &self.0.cluster
    }

    /// The event recorder.
    pub fn events(&self) -> &Arc<dyn EventRecorder> {
        &self.0.events
    }

    /// The cluster's other objects: namespaces, volumes, storage classes,
    /// CSI nodes, disruption budgets, workload controllers.
    pub fn objects(&self) -> &Arc<ObjectStore> {
        &self.0.objects
    }

    /// The pods nominated to nodes; empty before the queue is attached.
    pub fn nominated_pods(&self) -> Arc<NominatedPods> {
        match &*self.0.nominator.read() {
            Some(n) => n.nominated_pods(),
            None => Arc::default(),
        }
    }

    /// Attaches the queue's nominator.
    pub(crate) fn set_nominator(&self, nominator: Arc<dyn PodNominator>) {
        *self.0.nominator.write() = Some(nominator);
    }

    /// The CPU pool.
    pub fn parallelizer(&self) -> &Parallelizer {
        &self.0.parallelizer
    }

    /// The extenders preemption consults (upstream's HTTP extenders), in
    /// configuration order.
    pub fn extenders(&self) -> Arc<[Arc<dyn PreemptionExtender>]> {
        self.0.extenders.read().clone()
    }

    /// Sets the extenders preemption consults.
    pub fn set_extenders(&self, extenders: Vec<Arc<dyn PreemptionExtender>>) {
        *self.0.extenders.write() = extenders.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_truncated_like_upstream() {
        let short = "0/3 nodes are available.";
        assert_eq!(truncate_note(short), short);
        let long = "x".repeat(2000);
        let t = truncate_note(&long);
        assert_eq!(t.len(), NOTE_LENGTH_LIMIT);
        assert!(t.ends_with("x ..."));
    }
}
