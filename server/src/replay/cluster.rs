//! A configuration's copy of the cluster: the embedded cluster, whose
//! writes (bindings, evictions, claim status, volume binding) are the
//! API server's, with bindings that take simulated time.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::{ClusterChange, ClusterSource, PodScheduledCondition};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::PodInfo;

/// The embedded cluster, each binding taking `bind_latency` of the
/// (simulated) clock before it is written, as a binding takes a round trip
/// to the API server.
pub struct ReplayCluster {
    pub(super) inner: Arc<EmbeddedCluster>,
    bind_latency: Duration,
}

impl ReplayCluster {
    /// `inner`, its bindings taking `bind_latency`.
    pub fn new(inner: Arc<EmbeddedCluster>, bind_latency: Duration) -> Self {
        Self {
            inner,
            bind_latency,
        }
    }
}

#[async_trait]
impl ClusterClient for ReplayCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        if !self.bind_latency.is_zero() {
            tokio::time::sleep(self.bind_latency).await;
        }
        self.inner.bind(pod, node).await
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
