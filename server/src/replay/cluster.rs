//! A configuration's copy of the cluster: the embedded cluster, whose
//! writes (bindings, evictions, claim status, volume binding) are the
//! API server's, with bindings that take simulated time, and the pod
//! garbage collector's deletion of pods bound to a node that is gone.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::embedded::{EmbeddedCluster, Kind};
use crate::cluster::{ClusterChange, ClusterSource, PodScheduledCondition};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::PodInfo;

/// How long kube-controller-manager's pod garbage collector lets a node
/// be gone before it deletes the pods bound to it (its quarantine; it
/// deletes them on its next pass after, every 20 s, which the replay does
/// not model: it deletes them as the quarantine ends).
pub const ORPHAN_QUARANTINE: Duration = Duration::from_secs(40);

/// The embedded cluster, each binding taking `bind_latency` of the
/// (simulated) clock before it is written, as a binding takes a round trip
/// to the API server.
///
/// It also does what the pod garbage collector does in a real cluster: a
/// pod bound to a node that no longer exists is deleted once the node has
/// been gone for [`ORPHAN_QUARANTINE`] (whether it was bound before the
/// node went or its binding landed after, as the API server does not check
/// that a binding's node exists). Nothing recreates those pods: the
/// workload controllers are not replayed; a recorded trace has the pods
/// they made instead, as they arrived.
pub struct ReplayCluster {
    pub(super) inner: Arc<EmbeddedCluster>,
    bind_latency: Duration,
    orphans: Arc<Orphans>,
}

/// The pod garbage collector's part.
struct Orphans {
    inner: Arc<EmbeddedCluster>,
    /// The configuration's schedulers, whose pods are counted.
    profiles: HashSet<Arc<str>>,
    /// Pods of `profiles` deleted with their node.
    deleted: AtomicU64,
    /// Collections waiting for their quarantine to end.
    due: AtomicUsize,
}

impl ReplayCluster {
    /// `inner`, its bindings taking `bind_latency`; the pods of
    /// `profiles` deleted with their node are counted.
    pub fn new(
        inner: Arc<EmbeddedCluster>,
        bind_latency: Duration,
        profiles: HashSet<Arc<str>>,
    ) -> Self {
        Self {
            orphans: Arc::new(Orphans {
                inner: inner.clone(),
                profiles,
                deleted: AtomicU64::new(0),
                due: AtomicUsize::new(0),
            }),
            inner,
            bind_latency,
        }
    }

    /// Deletes the node named `name`, and after [`ORPHAN_QUARANTINE`], if
    /// no node of that name is back, the pods bound to it. Must run on the
    /// configuration's runtime.
    pub fn delete_node(&self, name: &str) {
        if self.inner.delete(Kind::Node, "", name) {
            self.orphans.collect_later(name);
        }
    }

    /// Pods of the configuration's profiles deleted with their node.
    pub fn deleted_with_node(&self) -> u64 {
        self.orphans.deleted.load(Ordering::Relaxed)
    }

    /// Whether a garbage collection is still waiting for its quarantine.
    pub fn collecting(&self) -> bool {
        self.orphans.due.load(Ordering::SeqCst) > 0
    }
}

impl Orphans {
    fn collect_later(self: &Arc<Self>, node: &str) {
        let this = self.clone();
        let node = node.to_string();
        self.due.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::time::sleep(ORPHAN_QUARANTINE).await;
            this.collect(&node);
            this.due.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Deletes the pods bound to `node` if no node of that name exists.
    fn collect(&self, node: &str) {
        if self.inner.node(node).is_some() {
            return;
        }
        let mut orphans: Vec<Arc<Pod>> = self
            .inner
            .pods()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect();
        // In the order of their names, so that a replay deletes them (and
        // its scheduler hears of it) the same way each run.
        orphans.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        for p in orphans {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let name = p.metadata.name.as_deref().unwrap_or("");
            if self.inner.delete(Kind::Pod, ns, name) && self.ours(&p) {
                self.deleted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn ours(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.contains(name)
    }
}

#[async_trait]
impl ClusterClient for ReplayCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        if !self.bind_latency.is_zero() {
            tokio::time::sleep(self.bind_latency).await;
        }
        self.inner.bind(pod, node).await?;
        // The API server takes a binding to a node that is gone (or went
        // while the binding was under way); the garbage collector deletes
        // the pod as any other bound there.
        if self.inner.node(node).is_none() {
            self.orphans.collect_later(node);
        }
        Ok(())
    }

    async fn delete_pod(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        self.inner.delete_pod(pod, message).await
    }

    async fn update_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        self.inner.update_object(obj).await
    }

    async fn set_nominated_node_name(
        &self,
        pod: &PodInfo,
        node: Option<&str>,
    ) -> Result<(), ClusterError> {
        self.inner.set_nominated_node_name(pod, node).await
    }

    async fn update_object_status(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        self.inner.update_object_status(obj).await
    }

    async fn get_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<KubeObject, ClusterError> {
        self.inner.get_object(kind, namespace, name).await
    }

    async fn remove_claim_reservation(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ClusterError> {
        self.inner
            .remove_claim_reservation(namespace, name, claim_uid, consumer_uid)
            .await
    }

    async fn create_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        self.inner.create_object(obj).await
    }

    async fn delete_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ClusterError> {
        self.inner.delete_object(kind, namespace, name).await
    }

    async fn set_pod_group_condition(
        &self,
        group: &crate::model::PodGroupInfo,
        condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    ) -> Result<(), ClusterError> {
        self.inner.set_pod_group_condition(group, condition).await
    }

    async fn set_extended_resource_claim_status(
        &self,
        pod: &PodInfo,
        status: k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), ClusterError> {
        self.inner
            .set_extended_resource_claim_status(pod, status)
            .await
    }
}

impl EventRecorder for ReplayCluster {
    fn record(&self, event: PodEvent) {
        // The report reads the scheduler's events through its observer;
        // the copy keeps none (a day of them is the trace's length).
        drop(event);
    }
}

#[async_trait]
impl ClusterSource for ReplayCluster {
    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterChange> {
        self.inner.subscribe()
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.inner.get_pod(namespace, name)
    }

    async fn set_unschedulable(
        &self,
        pod: &PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError> {
        self.inner
            .set_unschedulable(pod, condition, nominated_node)
            .await
    }

    fn kind(&self) -> &'static str {
        "replay"
    }
}
