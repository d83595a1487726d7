//! Where cluster state comes from and where bindings go.
//!
//! A [`ClusterSource`] delivers the cluster as a stream of changes (the
//! current objects first, as additions, then a [`ClusterChange::Synced`]
//! marker, then changes as they happen) and takes the scheduler's writes:
//! bindings, pod status conditions and events.
//!
//! * [`embedded`]: an in-memory store loaded from Kubernetes YAML (the
//!   default, so berth runs without a cluster).
//! * [`kube`]: a real cluster through its API server (kube-rs watchers).

pub mod embedded;
pub mod kube;
pub mod writes;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::sync::mpsc;

pub use crate::cache::{KubeObject, ObjectKind};
use crate::framework::{ClusterClient, ClusterError, EventRecorder};

/// A change to one object.
#[derive(Debug, Clone)]
pub enum WatchEvent<T> {
    /// The object appeared (or was listed at start).
    Added(T),
    /// The object changed.
    Modified {
        /// Before.
        old: T,
        /// After.
        new: T,
    },
    /// The object went away (its last state).
    Deleted(T),
}

/// A change in the cluster.
#[derive(Debug, Clone)]
pub enum ClusterChange {
    /// A node changed.
    Node(WatchEvent<Arc<Node>>),
    /// A pod changed (the embedded cluster: shared objects, a status
    /// write's sharing the version it was written over; see
    /// [`crate::model::PodObject`]).
    Pod(WatchEvent<crate::model::PodObject>),
    /// A pod changed, parsed by the source as it decoded it (kube mode,
    /// whose objects are kept packed: see [`crate::model::PodObject`]).
    /// Invalid pods are not sent.
    PodInfo(WatchEvent<crate::model::PodRef>),
    /// Another object (namespace, volume, storage class, ...) changed.
    Object(WatchEvent<KubeObject>),
    /// Everything that existed at subscription time has been delivered.
    Synced,
}

/// The status condition the scheduler sets on pods it could not place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodScheduledCondition {
    /// `Unschedulable` or `SchedulerError` (or `SchedulingGated`).
    pub reason: String,
    /// The scheduler's message (e.g. "0/5 nodes are available: ...").
    pub message: String,
}

/// A cluster the scheduler works against.
#[async_trait]
pub trait ClusterSource: ClusterClient + EventRecorder {
    /// Subscribes to changes: current state first, then `Synced`, then
    /// changes.
    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterChange>;

    /// The pod as the cluster has it now, if it exists.
    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;

    /// Sets the pod's `PodScheduled=False` condition and, with
    /// `Some(node)`, its `status.nominatedNodeName` (`Some(None)` clears it).
    async fn set_unschedulable(
        &self,
        pod: &crate::model::PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError>;

    /// A human name for logs ("embedded", "kube").
    fn kind(&self) -> &'static str;

    /// Whether the cluster's API server is down, or came back so recently
    /// that the attempts under way during the outage are still ending: its
    /// outage reporter speaks for the writes that fail meanwhile, so their
    /// per-attempt lines go to DEBUG.
    fn unreachable(&self) -> bool {
        false
    }

    /// Whether a failure with this `error` is a refusal (a permission
    /// missing, or not yet granted by an API server that is starting) that
    /// the cluster's refusal reporter speaks for: named once it lasts,
    /// summarized while it does, so the per-attempt lines go to DEBUG.
    fn refusal_reported(&self, _error: &str) -> bool {
        false
    }
}

/// The machine's host name (`HOSTNAME`, else the kernel's), as upstream
/// names its event reporting instance and its leader election identity.
pub fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "berth".into())
}
