//! The embedded cluster as the scheduler's source of objects: watch
//! events from its store ([`ClusterSource`]).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use super::{EmbeddedCluster, set_condition};
use crate::cluster::writes;
use crate::cluster::{ClusterChange, ClusterSource, PodScheduledCondition, WatchEvent};
use crate::framework::ClusterError;
use crate::model::{PodInfo, PodObject};

#[async_trait]
impl ClusterSource for EmbeddedCluster {
    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterChange> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.store.lock();
        // Objects pods refer to come first, as informers would have them
        // synced before the scheduler starts.
        for o in s.objects.values() {
            let _ = tx.send(ClusterChange::Object(WatchEvent::Added(o.clone())));
        }
        for n in s.nodes.values() {
            let _ = tx.send(ClusterChange::Node(WatchEvent::Added(n.clone())));
        }
        for p in s.pods.values() {
            let _ = tx.send(ClusterChange::Pod(WatchEvent::Added(p.clone())));
        }
        let _ = tx.send(ClusterChange::Synced);
        s.subscribers.push(tx);
        rx
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.store
            .lock()
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .map(PodObject::get)
    }

    async fn set_unschedulable(
        &self,
        pod: &PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        self.update_pod_status(&pod.namespace, &pod.name, |meta, status| {
            if meta.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            let c = writes::pod_scheduled_false(
                status.conditions.as_deref().unwrap_or_default(),
                meta.generation,
                &condition,
            );
            set_condition(status, c);
            if let Some(n) = nominated_node {
                status.nominated_node_name = n;
            }
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "embedded"
    }
}
