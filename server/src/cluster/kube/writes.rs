//! The scheduler's writes, sent as upstream kube-scheduler sends them:
//!
//! * bind: `POST pods/{name}/binding` with a `v1 Binding` carrying the
//!   pod's UID (201 on success; 409 when already bound or replaced, 404
//!   when gone: the pod is then read again so the mirror, and with it the
//!   scheduler's requeue decision, sees why, and nothing is retried
//!   blindly);
//! * `PodScheduled=False`: a strategic merge patch of the status
//!   subresource; `status.nominatedNodeName`: a merge patch of it;
//! * preemption victims: a status patch adding the `DisruptionTarget`
//!   condition, then `DELETE` with a UID precondition;
//! * other objects (volume binding, DRA claims): `PUT` with the
//!   resourceVersion read (409 Conflict when stale), `PUT` of a claim's
//!   `status` subresource, and a strategic merge patch of it that removes
//!   one `reservedFor` entry (Unreserve).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::KubeCluster;
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::{ClusterChange, ClusterSource, PodScheduledCondition};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::PodInfo;

const JSON: &str = "application/json";
const STRATEGIC_MERGE: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";

/// The API error as one of the errors the scheduler tells apart.
pub(super) fn cluster_error(e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) if s.code == 404 => ClusterError::NotFound(s.message),
        kube::Error::Api(s) if s.code == 409 => ClusterError::Conflict(s.message),
        kube::Error::Api(s) => ClusterError::Other(format!("{} ({})", s.message, s.code)),
        other => ClusterError::Other(other.to_string()),
    }
}

fn pod_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{name}")
}

/// Where an object of `kind` lives in the API.
fn object_path(kind: ObjectKind, namespace: &str, name: &str) -> String {
    let (group, plural) = match kind {
        ObjectKind::Namespace => ("/api/v1", "namespaces"),
        ObjectKind::PersistentVolume => ("/api/v1", "persistentvolumes"),
        ObjectKind::PersistentVolumeClaim => ("/api/v1", "persistentvolumeclaims"),
        ObjectKind::StorageClass => ("/apis/storage.k8s.io/v1", "storageclasses"),
        ObjectKind::CsiNode => ("/apis/storage.k8s.io/v1", "csinodes"),
        ObjectKind::PodDisruptionBudget => ("/apis/policy/v1", "poddisruptionbudgets"),
        ObjectKind::Service => ("/api/v1", "services"),
        ObjectKind::ReplicaSet => ("/apis/apps/v1", "replicasets"),
        ObjectKind::StatefulSet => ("/apis/apps/v1", "statefulsets"),
        ObjectKind::ReplicationController => ("/api/v1", "replicationcontrollers"),
        ObjectKind::DeviceClass => ("/apis/resource.k8s.io/v1", "deviceclasses"),
        ObjectKind::ResourceClaim => ("/apis/resource.k8s.io/v1", "resourceclaims"),
        ObjectKind::ResourceClaimTemplate => ("/apis/resource.k8s.io/v1", "resourceclaimtemplates"),
        ObjectKind::ResourceSlice => ("/apis/resource.k8s.io/v1", "resourceslices"),
    };
    if kind.namespaced() {
        format!("{group}/namespaces/{namespace}/{plural}/{name}")
    } else {
        format!("{group}/{plural}/{name}")
    }
}

/// An RFC 3339 time with seconds, as `metav1.Time` is written.
fn now_time() -> Value {
    let now =
        k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now()).unwrap_or_default();
    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
        .unwrap_or(Value::Null)
}

impl KubeCluster {
    pub(super) async fn send(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> Result<Value, ClusterError> {
        let body = serde_json::to_vec(body).map_err(|e| ClusterError::Other(e.to_string()))?;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, JSON)
            .body(body)
            .map_err(|e| ClusterError::Other(e.to_string()))?;
        self.client
            .request::<Value>(req)
            .await
            .map_err(cluster_error)
    }

    /// Reads the pod again after a write the API refused, so the mirror
    /// knows it is gone or bound before the scheduler decides whether to
    /// requeue it.
    async fn reread_pod(&self, pod: &PodInfo) {
        let req = http::Request::get(pod_path(&pod.namespace, &pod.name))
            .header(http::header::ACCEPT, JSON)
            .body(Vec::new());
        let Ok(req) = req else { return };
        match self.client.request::<Pod>(req).await {
            Ok(p) => self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, Some(p)),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, None)
            }
            Err(e) => {
                tracing::debug!(pod = %pod.key(), error = %e, "re-reading the pod failed")
            }
        }
    }

    /// The `PodScheduled=False` condition patch, keeping the transition
    /// time when the condition was already False.
    fn condition_patch(&self, pod: &PodInfo, c: &PodScheduledCondition) -> Value {
        let known = self.get_pod_inner(&pod.namespace, &pod.name);
        let transition = known
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(now_time);
        json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": c.reason,
            "message": c.message,
            "lastProbeTime": null,
            "lastTransitionTime": transition,
        }]}})
    }
}

#[async_trait]
impl ClusterClient for KubeCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        let body = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": &*pod.name, "namespace": &*pod.namespace, "uid": &*pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let path = format!("{}/binding", pod_path(&pod.namespace, &pod.name));
        match self.send(http::Method::POST, &path, JSON, &body).await {
            Ok(_) => Ok(()),
            Err(e @ (ClusterError::NotFound(_) | ClusterError::Conflict(_))) => {
                self.reread_pod(pod).await;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn delete_pod(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        let patch = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": now_time(),
        }]}});
        let path = pod_path(&pod.namespace, &pod.name);
        self.send(
            http::Method::PATCH,
            &format!("{path}/status"),
            STRATEGIC_MERGE,
            &patch,
        )
        .await?;
        let options = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": &*pod.uid},
        });
        self.send(http::Method::DELETE, &path, JSON, &options)
            .await
            .map(|_| ())
    }

    async fn update_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, name) = obj.key();
        let path = object_path(kind, &namespace, &name);
        let stored = self
            .send(http::Method::PUT, &path, JSON, &obj.to_json())
            .await?;
        KubeObject::from_json(kind, stored).map_err(|e| ClusterError::Other(e.to_string()))
    }

    async fn set_nominated_node_name(
        &self,
        pod: &PodInfo,
        node: Option<&str>,
    ) -> Result<(), ClusterError> {
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        let patch = json!({"status": {"nominatedNodeName": node}});
        self.send(http::Method::PATCH, &path, MERGE, &patch)
            .await
            .map(|_| ())
    }

    async fn update_object_status(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, name) = obj.key();
        let path = format!("{}/status", object_path(kind, &namespace, &name));
        let stored = self
            .send(http::Method::PUT, &path, JSON, &obj.to_json())
            .await?;
        KubeObject::from_json(kind, stored).map_err(|e| ClusterError::Other(e.to_string()))
    }

    async fn get_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<KubeObject, ClusterError> {
        let req = http::Request::get(object_path(kind, namespace, name))
            .header(http::header::ACCEPT, JSON)
            .body(Vec::new())
            .map_err(|e| ClusterError::Other(e.to_string()))?;
        let got = self
            .client
            .request::<Value>(req)
            .await
            .map_err(cluster_error)?;
        KubeObject::from_json(kind, got).map_err(|e| ClusterError::Other(e.to_string()))
    }

    async fn remove_claim_reservation(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ClusterError> {
        let path = format!(
            "{}/status",
            object_path(ObjectKind::ResourceClaim, namespace, name)
        );
        let patch = json!({
            "metadata": {"uid": claim_uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": consumer_uid}]},
        });
        self.send(http::Method::PATCH, &path, STRATEGIC_MERGE, &patch)
            .await
            .map(|_| ())
    }

    async fn create_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, _) = obj.key();
        let path = object_path(kind, &namespace, "");
        let stored = self
            .send(
                http::Method::POST,
                path.trim_end_matches('/'),
                JSON,
                &obj.to_json(),
            )
            .await?;
        KubeObject::from_json(kind, stored).map_err(|e| ClusterError::Other(e.to_string()))
    }

    async fn delete_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ClusterError> {
        let path = object_path(kind, namespace, name);
        self.send(http::Method::DELETE, &path, JSON, &json!({}))
            .await
            .map(|_| ())
    }

    async fn set_extended_resource_claim_status(
        &self,
        pod: &PodInfo,
        status: k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), ClusterError> {
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        let patch = json!({"status": {"extendedResourceClaimStatus": status}});
        self.send(http::Method::PATCH, &path, STRATEGIC_MERGE, &patch)
            .await
            .map(|_| ())
    }
}

impl EventRecorder for KubeCluster {
    fn record(&self, event: PodEvent) {
        self.events.record(event);
    }
}

#[async_trait]
impl ClusterSource for KubeCluster {
    fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<ClusterChange> {
        self.subscribe_inner()
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.get_pod_inner(namespace, name)
    }

    async fn set_unschedulable(
        &self,
        pod: &PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError> {
        if let Some(node) = &nominated_node {
            self.set_nominated_node_name(pod, node.as_deref()).await?;
        }
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        let patch = self.condition_patch(pod, &condition);
        self.send(http::Method::PATCH, &path, STRATEGIC_MERGE, &patch)
            .await
            .map(|_| ())
    }

    fn kind(&self) -> &'static str {
        "kube"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_live_where_the_api_serves_them() {
        assert_eq!(
            object_path(ObjectKind::PersistentVolume, "", "pv1"),
            "/api/v1/persistentvolumes/pv1"
        );
        assert_eq!(
            object_path(ObjectKind::PersistentVolumeClaim, "ns", "c"),
            "/api/v1/namespaces/ns/persistentvolumeclaims/c"
        );
        assert_eq!(
            object_path(ObjectKind::CsiNode, "", "n"),
            "/apis/storage.k8s.io/v1/csinodes/n"
        );
    }

    #[test]
    fn api_statuses_map_to_the_errors_the_scheduler_handles() {
        let status = |code: u16, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.into(),
                ..Default::default()
            }))
        };
        assert_eq!(
            cluster_error(status(404, "pods \"missing\" not found")),
            ClusterError::NotFound("pods \"missing\" not found".into())
        );
        assert!(matches!(
            cluster_error(status(409, "already assigned")),
            ClusterError::Conflict(_)
        ));
        assert!(matches!(
            cluster_error(status(500, "boom")),
            ClusterError::Other(_)
        ));
    }
}
