//! What the scheduler writes to the embedded cluster, answered as the API
//! server answers: bindings, nominations, statuses and conditions, claims
//! and PodGroups, evictions ([`ClusterClient`]), and events
//! ([`EventRecorder`]).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PodCondition;

use super::events::{MAX_EVENTS, StoredEvent};
use super::{EmbeddedCluster, Kind, now_time, set_condition};
use super::{dra, volumes};
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::writes;
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::PodInfo;

#[async_trait]
impl ClusterClient for EmbeddedCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        let name = &*pod.name;
        let uid = &*pod.uid;
        // The new version shares the metadata and spec of the one it
        // replaces, with its own nodeName and status (a whole copy of the
        // pod per binding cost more than the rest of the write).
        self.write_pod(&pod.namespace, &pod.name, |s, old| {
            let base = super::meta_spec(old);
            let actual_uid = base.metadata.uid.as_deref().unwrap_or_default();
            if actual_uid != uid {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods {name:?}: Precondition failed: UID in precondition: {uid}, UID in object meta: {actual_uid}"
                )));
            }
            if let Some(existing) = old.node_name().filter(|n| !n.is_empty()) {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods/binding {name:?}: pod {name} is already assigned to node {existing:?}"
                )));
            }
            let mut status = old.status().cloned().unwrap_or_default();
            // As the API server since v1.35 (ClearingNominatedNodeNameAfterBinding):
            // a bound pod's nomination is over.
            status.nominated_node_name = None;
            set_condition(
                &mut status,
                PodCondition {
                    type_: "PodScheduled".into(),
                    status: "True".into(),
                    last_transition_time: Some(now_time()),
                    ..Default::default()
                },
            );
            Ok(old.bound(node, Some(status), s.next_rv()))
        })
    }

    async fn delete_pod(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        self.evict(pod, message).await
    }

    async fn set_nominated_node_name(
        &self,
        pod: &PodInfo,
        node: Option<&str>,
    ) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        self.update_pod_status(&pod.namespace, &pod.name, |meta, status| {
            if meta.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            status.nominated_node_name = node.map(str::to_string);
            Ok(())
        })
    }

    async fn update_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let mut s = self.store.lock();
        let rv = obj.metadata().resource_version.clone().unwrap_or_default();
        // A claim's status is written through its subresource only.
        let obj = match (&obj, s.objects.get(&obj.key())) {
            (KubeObject::ResourceClaim(new), Some(KubeObject::ResourceClaim(old))) => {
                let mut c = (**new).clone();
                c.status = old.status.clone();
                KubeObject::ResourceClaim(Arc::new(c))
            }
            _ => obj,
        };
        let stored = s.put_object(obj, Some(&rv))?;
        volumes::reconcile(&mut s);
        dra::object_changed(&mut s, &stored.key());
        Ok(stored)
    }

    async fn update_object_status(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let mut s = self.store.lock();
        let rv = obj.metadata().resource_version.clone().unwrap_or_default();
        let obj = match (&obj, s.objects.get(&obj.key())) {
            (KubeObject::ResourceClaim(new), Some(KubeObject::ResourceClaim(old))) => {
                let mut c = (**old).clone();
                c.status = new.status.clone();
                c.metadata.resource_version = new.metadata.resource_version.clone();
                KubeObject::ResourceClaim(Arc::new(c))
            }
            (KubeObject::ResourceClaim(_), None) => {
                return Err(ClusterError::NotFound(format!(
                    "resourceclaims.resource.k8s.io {:?} not found",
                    obj.key().2
                )));
            }
            _ => {
                return Err(ClusterError::Unsupported(format!(
                    "the embedded cluster keeps no status subresource for {}",
                    obj.kind().type_meta().1
                )));
            }
        };
        let stored = s.put_object(obj, Some(&rv))?;
        dra::object_changed(&mut s, &stored.key());
        Ok(stored)
    }

    async fn get_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<KubeObject, ClusterError> {
        self.object(kind, namespace, name).ok_or_else(|| {
            let (_, k) = kind.type_meta();
            ClusterError::NotFound(format!("{} {name:?} not found", k.to_ascii_lowercase()))
        })
    }

    async fn remove_claim_reservation(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ClusterError> {
        let mut s = self.store.lock();
        let key = (
            ObjectKind::ResourceClaim,
            namespace.to_string(),
            name.to_string(),
        );
        let Some(KubeObject::ResourceClaim(old)) = s.objects.get(&key).cloned() else {
            return Err(ClusterError::NotFound(format!(
                "resourceclaims.resource.k8s.io {name:?} not found"
            )));
        };
        let uid = old.metadata.uid.clone().unwrap_or_default();
        if uid != claim_uid {
            return Err(ClusterError::Conflict(format!(
                "Operation cannot be fulfilled on resourceclaims.resource.k8s.io {name:?}: Precondition failed: UID in precondition: {claim_uid}, UID in object meta: {uid}"
            )));
        }
        let mut c = (*old).clone();
        if let Some(st) = c.status.as_mut() {
            if let Some(r) = st.reserved_for.as_mut() {
                r.retain(|r| r.uid != consumer_uid);
            }
            if st.reserved_for.as_ref().is_some_and(Vec::is_empty) {
                st.reserved_for = None;
            }
        }
        s.put_object(KubeObject::ResourceClaim(Arc::new(c)), None)?;
        dra::object_changed(&mut s, &key);
        Ok(())
    }

    async fn create_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let mut s = self.store.lock();
        let obj = match obj.metadata().name.as_deref() {
            Some(n) if !n.is_empty() => obj,
            _ => {
                let generate = obj.metadata().generate_name.clone().unwrap_or_default();
                let (kind, namespace, _) = obj.key();
                let mut name = format!("{generate}{}", dra::suffix());
                while s
                    .objects
                    .contains_key(&(kind, namespace.clone(), name.clone()))
                {
                    name = format!("{generate}{}", dra::suffix());
                }
                obj.with_metadata(|m| m.name = Some(name))
            }
        };
        if s.objects.contains_key(&obj.key()) {
            let (kind, _, name) = obj.key();
            return Err(ClusterError::Conflict(format!(
                "{} {name:?} already exists",
                kind.type_meta().1.to_ascii_lowercase()
            )));
        }
        let stored = s.put_object(obj, None)?;
        dra::object_changed(&mut s, &stored.key());
        Ok(stored)
    }

    async fn set_pod_group_condition(
        &self,
        group: &crate::model::PodGroupInfo,
        condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    ) -> Result<(), ClusterError> {
        let mut s = self.store.lock();
        let key = (
            ObjectKind::PodGroup,
            group.key.namespace.to_string(),
            group.key.name.to_string(),
        );
        let Some(KubeObject::PodGroup(stored)) = s.objects.get(&key).cloned() else {
            return Err(ClusterError::NotFound(format!(
                "podgroups.scheduling.k8s.io {:?} not found",
                &*group.key.name
            )));
        };
        // What the status subresource's merge of the patch gives: the
        // condition replaced by type, the others kept.
        let mut pg = (*stored).clone();
        let status = pg.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
            Some(c) => *c = condition,
            None => conditions.push(condition),
        }
        s.put_object(KubeObject::PodGroup(Arc::new(pg)), None)?;
        Ok(())
    }

    async fn delete_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ClusterError> {
        if self.delete(Kind::Object(kind), namespace, name) {
            Ok(())
        } else {
            Err(ClusterError::NotFound(format!(
                "{} {name:?} not found",
                kind.type_meta().1.to_ascii_lowercase()
            )))
        }
    }

    async fn set_extended_resource_claim_status(
        &self,
        pod: &PodInfo,
        status: k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        self.update_pod_status(&pod.namespace, &pod.name, |meta, s| {
            if meta.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            s.extended_resource_claim_status = Some(status);
            Ok(())
        })
    }
}

impl EmbeddedCluster {
    /// What the API server does with preemption's writes (see
    /// [`writes::disruption_target`]): the condition, then the deletion
    /// (immediate here: no kubelet); a victim already terminating is left
    /// alone.
    async fn evict(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        let key = (pod.namespace.to_string(), pod.name.to_string());
        let terminating = self
            .store
            .lock()
            .pods
            .get(&key)
            .is_some_and(|p| super::meta_spec(p).metadata.deletion_timestamp.is_some());
        if terminating {
            return Ok(());
        }
        self.update_pod_status(&pod.namespace, &pod.name, |meta, status| {
            if meta.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods {:?}: Precondition failed: UID in precondition: {uid}",
                    &*pod.name
                )));
            }
            let existing = status.conditions.as_deref().unwrap_or_default();
            if let Some(condition) =
                writes::disruption_target(existing, meta.generation, false, message)
            {
                set_condition(status, condition);
            }
            Ok(())
        })?;
        self.delete(Kind::Pod, &pod.namespace, &pod.name);
        Ok(())
    }
}

impl EventRecorder for EmbeddedCluster {
    fn record(&self, e: PodEvent) {
        tracing::debug!(pod = %e.pod.key(), reason = e.reason, note = %e.note, "event");
        let event = StoredEvent::new(e);
        let mut s = self.store.lock();
        if s.events.len() >= MAX_EVENTS {
            s.events.pop_front();
        }
        s.events.push_back(event);
    }
}
