//! The embedded cluster: an in-memory store of Kubernetes objects, the
//! default cluster source, so that berth runs with no cluster at all.
//!
//! It behaves like the API server where the scheduler can tell: objects
//! get UIDs, resourceVersions and creation timestamps; a binding sets
//! `spec.nodeName` and the `PodScheduled=True` condition and fails as the
//! API server fails (404 for a missing pod, 409 for a bound one or a stale
//! UID); every change is delivered to subscribers as a watch event; events
//! are kept as `events.k8s.io/v1` objects.

mod dra;
pub mod load;
mod volumes;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use load::{LoadError, LoadedObject, parse_objects, read_objects};

use super::{ClusterChange, ClusterSource, PodScheduledCondition, WatchEvent};
use crate::cache::{KubeObject, ObjectKind};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::{InvalidObject, NodeSpec, PodInfo};

/// The kinds the embedded cluster stores, for messages.
pub const SUPPORTED_KINDS: &str = "Node, Pod, Namespace, PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode, PodDisruptionBudget, Service, ReplicaSet, StatefulSet, ReplicationController, DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice";

/// How many events the store keeps (oldest dropped first).
const MAX_EVENTS: usize = 10_000;

/// An object the store refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The object is not one the store holds.
    #[error("kind {0:?} is not supported by the embedded cluster (supported: {SUPPORTED_KINDS})")]
    UnsupportedKind(String),
    /// The object does not parse as its kind.
    #[error("{0}")]
    Malformed(String),
    /// The object is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidObject),
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

#[derive(Default)]
struct Store {
    nodes: BTreeMap<String, Arc<Node>>,
    pods: BTreeMap<(String, String), Arc<Pod>>,
    /// Every other kind, by kind, namespace and name.
    objects: BTreeMap<(ObjectKind, String, String), KubeObject>,
    resource_version: u64,
    next_uid: u64,
    subscribers: Vec<mpsc::UnboundedSender<ClusterChange>>,
    events: VecDeque<Event>,
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn new_uid(&mut self) -> String {
        self.next_uid += 1;
        // Shaped like a UUID, unique within the store.
        let n = self.next_uid;
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    fn emit(&mut self, change: ClusterChange) {
        self.subscribers.retain(|s| s.send(change.clone()).is_ok());
    }

    /// Creates or replaces an object, with API server bookkeeping (UID,
    /// creation time, resourceVersion). With `expected_rv`, refuses a stale
    /// write as the API server does (409).
    fn put_object(
        &mut self,
        obj: KubeObject,
        expected_rv: Option<&str>,
    ) -> Result<KubeObject, ClusterError> {
        let key = obj.key();
        let old = self.objects.get(&key).cloned();
        if let (Some(want), Some(old)) = (expected_rv, &old) {
            let have = old.metadata().resource_version.as_deref().unwrap_or("");
            if !want.is_empty() && want != have {
                let (_, kind) = key.0.type_meta();
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
                    kind.to_ascii_lowercase(),
                    key.2
                )));
            }
        }
        if expected_rv.is_some() && old.is_none() {
            let (_, kind) = key.0.type_meta();
            return Err(ClusterError::NotFound(format!(
                "{} {:?} not found",
                kind.to_ascii_lowercase(),
                key.2
            )));
        }
        let rv = self.next_rv();
        let uid = old
            .as_ref()
            .and_then(|o| o.metadata().uid.clone())
            .or_else(|| obj.metadata().uid.clone().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| self.new_uid());
        let created = old
            .as_ref()
            .and_then(|o| o.metadata().creation_timestamp.clone())
            .or_else(|| obj.metadata().creation_timestamp.clone())
            .unwrap_or_else(now_time);
        let namespace = key.0.namespaced().then(|| key.1.clone());
        let stored = obj.with_metadata(|m| {
            m.uid = Some(uid);
            m.creation_timestamp = Some(created);
            m.resource_version = Some(rv);
            m.namespace = namespace;
        });
        self.objects.insert(key, stored.clone());
        let change = match old {
            Some(old) => WatchEvent::Modified {
                old,
                new: stored.clone(),
            },
            None => WatchEvent::Added(stored.clone()),
        };
        self.emit(ClusterChange::Object(change));
        Ok(stored)
    }
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap_or_default())
}

/// The embedded cluster.
#[derive(Default)]
pub struct EmbeddedCluster {
    store: Mutex<Store>,
}

impl std::fmt::Debug for EmbeddedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.store.lock();
        f.debug_struct("EmbeddedCluster")
            .field("nodes", &s.nodes.len())
            .field("pods", &s.pods.len())
            .finish()
    }
}

impl EmbeddedCluster {
    /// An empty cluster.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A cluster holding `objects`; the first invalid one fails the load,
    /// naming where it came from.
    pub fn from_objects(objects: Vec<LoadedObject>) -> Result<Arc<Self>, LoadError> {
        let cluster = Self::new();
        for o in objects {
            cluster.apply(o.value).map_err(|e| LoadError::Invalid {
                origin: o.origin,
                message: e.to_string(),
            })?;
        }
        Ok(cluster)
    }

    /// Creates or updates an object given as its JSON. Returns its kind,
    /// namespace and name.
    pub fn apply(&self, value: serde_json::Value) -> Result<(Kind, String, String), ApplyError> {
        let kind_text = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let malformed = |e: serde_json::Error| ApplyError::Malformed(e.to_string());
        match kind_text.as_str() {
            "Node" => {
                let node: Node = serde_json::from_value(value).map_err(malformed)?;
                let name = self.apply_node(node)?;
                Ok((Kind::Node, String::new(), name))
            }
            "Pod" => {
                let pod: Pod = serde_json::from_value(value).map_err(malformed)?;
                let (ns, name) = self.apply_pod(pod)?;
                Ok((Kind::Pod, ns, name))
            }
            other => match ObjectKind::ALL
                .into_iter()
                .find(|k| k.type_meta().1 == other)
            {
                Some(kind) => {
                    let obj = KubeObject::from_json(kind, value).map_err(malformed)?;
                    let (_, ns, name) = self.apply_object(obj)?.key();
                    Ok((Kind::Object(kind), ns, name))
                }
                None => Err(ApplyError::UnsupportedKind(kind_text)),
            },
        }
    }

    /// Checks that `value` would be applied, without storing it.
    pub fn validate(&self, value: serde_json::Value) -> Result<(), ApplyError> {
        let kind_text = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let malformed = |e: serde_json::Error| ApplyError::Malformed(e.to_string());
        match kind_text.as_str() {
            "Node" => {
                let node: Node = serde_json::from_value(value).map_err(malformed)?;
                NodeSpec::new(Arc::new(node))?;
            }
            "Pod" => {
                let mut pod: Pod = serde_json::from_value(value).map_err(malformed)?;
                pod.metadata.uid.get_or_insert_with(|| "validation".into());
                PodInfo::new(Arc::new(pod))?;
            }
            other => match ObjectKind::ALL
                .into_iter()
                .find(|k| k.type_meta().1 == other)
            {
                Some(kind) => {
                    KubeObject::from_json(kind, value).map_err(malformed)?;
                }
                None => return Err(ApplyError::UnsupportedKind(kind_text)),
            },
        }
        Ok(())
    }

    /// Creates or replaces an object of a kind other than Node and Pod. The
    /// store's controllers then react (e.g. binding a claimed volume).
    pub fn apply_object(&self, obj: KubeObject) -> Result<KubeObject, ApplyError> {
        let mut s = self.store.lock();
        let stored = s
            .put_object(obj, None)
            .map_err(|e| ApplyError::Malformed(e.to_string()))?;
        volumes::reconcile(&mut s);
        dra::object_changed(&mut s, &stored.key());
        Ok(stored)
    }

    /// Creates or replaces a node.
    pub fn apply_node(&self, mut node: Node) -> Result<String, ApplyError> {
        let mut s = self.store.lock();
        let name = node.metadata.name.clone().unwrap_or_default();
        let old = s.nodes.get(&name).cloned();
        node.metadata.uid = old
            .as_ref()
            .and_then(|o| o.metadata.uid.clone())
            .or(node.metadata.uid)
            .or_else(|| Some(s.new_uid()));
        node.metadata.creation_timestamp = old
            .as_ref()
            .and_then(|o| o.metadata.creation_timestamp.clone())
            .or(node.metadata.creation_timestamp)
            .or_else(|| Some(now_time()));
        node.metadata.resource_version = Some(s.next_rv());
        let node = Arc::new(node);
        NodeSpec::new(node.clone())?;
        s.nodes.insert(name.clone(), node.clone());
        let change = match old {
            Some(old) => WatchEvent::Modified { old, new: node },
            None => WatchEvent::Added(node),
        };
        s.emit(ClusterChange::Node(change));
        Ok(name)
    }

    /// Creates or replaces a pod. An update keeps the pod's UID, creation
    /// time and (unless given) binding and status.
    pub fn apply_pod(&self, mut pod: Pod) -> Result<(String, String), ApplyError> {
        let mut s = self.store.lock();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ns = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        pod.metadata.namespace = Some(ns.clone());
        let key = (ns.clone(), name.clone());
        let old = s.pods.get(&key).cloned();
        if let Some(old) = &old {
            pod.metadata.uid = old.metadata.uid.clone();
            pod.metadata.creation_timestamp = old.metadata.creation_timestamp.clone();
            let old_node = old.spec.as_ref().and_then(|s| s.node_name.clone());
            if let (Some(spec), Some(node)) = (pod.spec.as_mut(), old_node) {
                spec.node_name.get_or_insert(node);
            }
            if pod.status.is_none() {
                pod.status = old.status.clone();
            }
        } else {
            if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
                pod.metadata.uid = Some(s.new_uid());
            }
            pod.metadata.creation_timestamp.get_or_insert_with(now_time);
            // As the API server does, a pod created with scheduling gates
            // says why it is not scheduled yet.
            let gated = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty());
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some();
            if gated && !bound {
                set_condition(
                    pod.status.get_or_insert_with(Default::default),
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "False".into(),
                        reason: Some("SchedulingGated".into()),
                        message: Some(
                            "Scheduling is blocked due to non-empty scheduling gates".into(),
                        ),
                        last_transition_time: Some(now_time()),
                        ..Default::default()
                    },
                );
            }
        }
        pod.metadata.resource_version = Some(s.next_rv());
        let pod = Arc::new(pod);
        PodInfo::new(pod.clone())?;
        s.pods.insert(key.clone(), pod.clone());
        let change = match old {
            Some(old) => WatchEvent::Modified { old, new: pod },
            None => WatchEvent::Added(pod),
        };
        s.emit(ClusterChange::Pod(change));
        dra::pod_changed(&mut s, &key);
        Ok((ns, name))
    }

    /// Deletes an object. Returns whether it existed.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        let mut s = self.store.lock();
        match kind {
            Kind::Object(k) => {
                let ns = if !k.namespaced() {
                    ""
                } else if namespace.is_empty() {
                    "default"
                } else {
                    namespace
                };
                match s.objects.remove(&(k, ns.to_string(), name.to_string())) {
                    Some(o) => {
                        s.emit(ClusterChange::Object(WatchEvent::Deleted(o)));
                        true
                    }
                    None => false,
                }
            }
            Kind::Node => match s.nodes.remove(name) {
                Some(n) => {
                    s.emit(ClusterChange::Node(WatchEvent::Deleted(n)));
                    true
                }
                None => false,
            },
            Kind::Pod => {
                let ns = if namespace.is_empty() {
                    "default"
                } else {
                    namespace
                };
                match s.pods.remove(&(ns.to_string(), name.to_string())) {
                    Some(p) => {
                        s.emit(ClusterChange::Pod(WatchEvent::Deleted(p.clone())));
                        dra::pod_removed(&mut s, &p);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    /// Every node, by name.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.store.lock().nodes.values().cloned().collect()
    }

    /// Every pod, by namespace and name.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.store.lock().pods.values().cloned().collect()
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.store.lock().nodes.get(name).cloned()
    }

    /// Every object of `kind` (other than nodes and pods), by namespace and
    /// name.
    pub fn objects(&self, kind: ObjectKind) -> Vec<KubeObject> {
        self.store
            .lock()
            .objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// One object of `kind` by namespace (empty for cluster-scoped kinds)
    /// and name.
    pub fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<KubeObject> {
        let ns = if !kind.namespaced() {
            ""
        } else if namespace.is_empty() {
            "default"
        } else {
            namespace
        };
        self.store
            .lock()
            .objects
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    /// The events recorded so far, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.store.lock().events.iter().cloned().collect()
    }

    fn update_pod(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&mut Pod) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let mut s = self.store.lock();
        let key = (namespace.to_string(), name.to_string());
        let old = s
            .pods
            .get(&key)
            .cloned()
            .ok_or_else(|| ClusterError::NotFound(format!("pods {name:?} not found")))?;
        let mut new = (*old).clone();
        f(&mut new)?;
        new.metadata.resource_version = Some(s.next_rv());
        let new = Arc::new(new);
        s.pods.insert(key.clone(), new.clone());
        s.emit(ClusterChange::Pod(WatchEvent::Modified { old, new }));
        dra::pod_changed(&mut s, &key);
        Ok(())
    }
}

fn set_condition(status: &mut PodStatus, condition: PodCondition) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(c) => {
            let transition = if c.status != condition.status {
                condition.last_transition_time.clone()
            } else {
                c.last_transition_time.clone()
            };
            *c = PodCondition {
                last_transition_time: transition,
                ..condition
            };
        }
        None => conditions.push(condition),
    }
}

#[async_trait]
impl ClusterClient for EmbeddedCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        let name = pod.name.to_string();
        let uid = pod.uid.to_string();
        self.update_pod(&pod.namespace, &pod.name, |p| {
            let actual_uid = p.metadata.uid.clone().unwrap_or_default();
            if actual_uid != uid {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods {name:?}: Precondition failed: UID in precondition: {uid}, UID in object meta: {actual_uid}"
                )));
            }
            let spec = p.spec.get_or_insert_with(Default::default);
            if let Some(existing) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods/binding {name:?}: pod {name} is already assigned to node {existing:?}"
                )));
            }
            spec.node_name = Some(node.to_string());
            // The API server clears the nomination when it binds
            // (ClearingNominatedNodeNameAfterBinding, on since v1.34).
            if let Some(st) = p.status.as_mut() {
                st.nominated_node_name = None;
            }
            set_condition(
                p.status.get_or_insert_with(Default::default),
                PodCondition {
                    type_: "PodScheduled".into(),
                    status: "True".into(),
                    last_transition_time: Some(now_time()),
                    ..Default::default()
                },
            );
            Ok(())
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
        self.update_pod(&pod.namespace, &pod.name, |p| {
            if p.metadata.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            p.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = node.map(str::to_string);
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
        self.update_pod(&pod.namespace, &pod.name, |p| {
            if p.metadata.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            p.status
                .get_or_insert_with(Default::default)
                .extended_resource_claim_status = Some(status);
            Ok(())
        })
    }
}

impl EmbeddedCluster {
    async fn evict(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        self.update_pod(&pod.namespace, &pod.name, |p| {
            if p.metadata.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods {:?}: Precondition failed: UID in precondition: {uid}",
                    &*pod.name
                )));
            }
            set_condition(
                p.status.get_or_insert_with(Default::default),
                PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some("PreemptionByScheduler".into()),
                    message: Some(message.to_string()),
                    last_transition_time: Some(now_time()),
                    ..Default::default()
                },
            );
            Ok(())
        })?;
        self.delete(Kind::Pod, &pod.namespace, &pod.name);
        Ok(())
    }
}

impl EventRecorder for EmbeddedCluster {
    fn record(&self, e: PodEvent) {
        let now = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap_or_default();
        let pod = &e.pod;
        tracing::debug!(pod = %pod.key(), reason = e.reason, note = %e.note, "event");
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())),
                namespace: Some(pod.namespace.to_string()),
                creation_timestamp: Some(Time(now)),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(e.controller.to_string()),
            reporting_instance: Some(format!("{}-berth", e.controller)),
            action: Some(e.action.to_string()),
            reason: Some(e.reason.to_string()),
            regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace.to_string()),
                name: Some(pod.name.to_string()),
                uid: Some(pod.uid.to_string()),
                resource_version: pod.pod.metadata.resource_version.clone(),
                ..Default::default()
            }),
            related: e
                .related
                .as_ref()
                .map(|r| k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(r.namespace.to_string()),
                    name: Some(r.name.to_string()),
                    uid: Some(r.uid.to_string()),
                    ..Default::default()
                }),
            note: Some(e.note),
            type_: Some(e.event_type.as_str().to_string()),
            ..Default::default()
        };
        let mut s = self.store.lock();
        if s.events.len() >= MAX_EVENTS {
            s.events.pop_front();
        }
        s.events.push_back(event);
    }
}

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
            .cloned()
    }

    async fn set_unschedulable(
        &self,
        pod: &PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError> {
        let uid = pod.uid.to_string();
        self.update_pod(&pod.namespace, &pod.name, |p| {
            if p.metadata.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "pod {} was replaced",
                    pod.key()
                )));
            }
            let status = p.status.get_or_insert_with(Default::default);
            set_condition(
                status,
                PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some(condition.reason),
                    message: Some(condition.message),
                    last_transition_time: Some(now_time()),
                    ..Default::default()
                },
            );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    fn pod_json(name: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(make_pod(name).object()).unwrap();
        v["metadata"].as_object_mut().unwrap().remove("uid");
        v
    }

    #[tokio::test]
    async fn binding_behaves_like_the_api_server() {
        let c = EmbeddedCluster::new();
        c.apply(serde_json::to_value(make_node("n1").cpu("1").object()).unwrap())
            .unwrap();
        c.apply(pod_json("p")).unwrap();
        let stored = c.get_pod("default", "p").unwrap();
        let info = PodInfo::new(stored).unwrap();
        assert!(info.uid.starts_with("00000000-"));
        c.bind(&info, "n1").await.unwrap();
        let bound = c.get_pod("default", "p").unwrap();
        assert_eq!(
            bound.spec.as_ref().unwrap().node_name.as_deref(),
            Some("n1")
        );
        let cond = &bound.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.status.as_str()),
            ("PodScheduled", "True")
        );

        let again = c.bind(&info, "n1").await.unwrap_err();
        assert_eq!(
            again.to_string(),
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
        );
        assert!(matches!(again, ClusterError::Conflict(_)));

        let missing = PodInfo::new(Arc::new(make_pod("missing").object())).unwrap();
        let err = c.bind(&missing, "n1").await.unwrap_err();
        assert_eq!(
            err,
            ClusterError::NotFound("pods \"missing\" not found".into())
        );

        c.apply(pod_json("q")).unwrap();
        let stale = PodInfo::new(Arc::new(make_pod("q").uid("stale").object())).unwrap();
        assert!(matches!(
            c.bind(&stale, "n1").await,
            Err(ClusterError::Conflict(_))
        ));
    }

    #[tokio::test]
    async fn subscribers_get_state_then_changes() {
        let c = EmbeddedCluster::new();
        c.apply(serde_json::to_value(make_node("n1").object()).unwrap())
            .unwrap();
        c.apply(pod_json("p")).unwrap();
        let mut rx = c.subscribe();
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Node(WatchEvent::Added(_)))
        ));
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Pod(WatchEvent::Added(_)))
        ));
        assert!(matches!(rx.recv().await, Some(ClusterChange::Synced)));
        c.apply(pod_json("p")).unwrap();
        match rx.recv().await {
            Some(ClusterChange::Pod(WatchEvent::Modified { old, new })) => {
                assert_eq!(old.metadata.uid, new.metadata.uid, "updates keep the UID");
                assert_ne!(old.metadata.resource_version, new.metadata.resource_version);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(c.delete(Kind::Pod, "default", "p"));
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Pod(WatchEvent::Deleted(_)))
        ));
        assert!(!c.delete(Kind::Pod, "default", "p"));
    }

    #[test]
    fn invalid_objects_are_refused_with_their_field() {
        let c = EmbeddedCluster::new();
        let mut v = pod_json("p");
        v["spec"]["containers"][0]["resources"] = serde_json::json!({"requests": {"cpu": "lots"}});
        let err = c.apply(v).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.containers[0].resources.requests.cpu: quantities must match"),
            "{err}"
        );
        assert!(c.pods().is_empty(), "nothing stored");
        let err = c
            .apply(serde_json::json!({"kind": "Deployment"}))
            .unwrap_err();
        assert_eq!(err, ApplyError::UnsupportedKind("Deployment".into()));
    }

    #[tokio::test]
    async fn the_volume_controller_binds_claimed_volumes_and_provisions_selected_claims() {
        use serde_json::json;
        let c = EmbeddedCluster::new();
        c.apply(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "static", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
            .unwrap();
        c.apply(
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"]}}),
        )
        .unwrap();
        // The scheduler's binder claims the volume through an update.
        let pv = c.object(ObjectKind::PersistentVolume, "", "pv1").unwrap();
        let KubeObject::PersistentVolume(pv) = pv else {
            unreachable!()
        };
        let mut claimed = (*pv).clone();
        claimed.spec.as_mut().unwrap().claim_ref =
            Some(k8s_openapi::api::core::v1::ObjectReference {
                namespace: Some("default".into()),
                name: Some("static".into()),
                ..Default::default()
            });
        c.update_object(KubeObject::PersistentVolume(Arc::new(claimed.clone())))
            .await
            .unwrap();
        let Some(KubeObject::PersistentVolumeClaim(pvc)) =
            c.object(ObjectKind::PersistentVolumeClaim, "default", "static")
        else {
            unreachable!()
        };
        assert_eq!(
            pvc.spec.as_ref().unwrap().volume_name.as_deref(),
            Some("pv1")
        );
        assert_eq!(pvc.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
        assert_eq!(
            pvc.metadata.annotations.as_ref().unwrap()[volumes::ANN_BIND_COMPLETED],
            "yes"
        );
        // A stale update is refused as the API server refuses it.
        let err = c
            .update_object(KubeObject::PersistentVolume(Arc::new(claimed)))
            .await
            .unwrap_err();
        assert!(matches!(err, ClusterError::Conflict(_)), "{err}");

        // Dynamic provisioning once the scheduler picked a node.
        c.apply(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
            "provisioner": "example.com/csi", "volumeBindingMode": "WaitForFirstConsumer"}))
            .unwrap();
        c.apply(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "dyn", "namespace": "default", "annotations": {"volume.kubernetes.io/selected-node": "n1"}},
            "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}))
            .unwrap();
        let Some(KubeObject::PersistentVolumeClaim(pvc)) =
            c.object(ObjectKind::PersistentVolumeClaim, "default", "dyn")
        else {
            unreachable!()
        };
        let vol = pvc.spec.as_ref().unwrap().volume_name.clone().unwrap();
        assert!(vol.starts_with("pvc-"));
        let Some(KubeObject::PersistentVolume(pv)) =
            c.object(ObjectKind::PersistentVolume, "", &vol)
        else {
            unreachable!()
        };
        assert_eq!(
            pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
            "5Gi"
        );
    }

    #[tokio::test]
    async fn evicted_pods_get_the_disruption_condition_then_go() {
        let c = EmbeddedCluster::new();
        c.apply(pod_json("victim")).unwrap();
        let mut rx = c.subscribe();
        while !matches!(rx.recv().await, Some(ClusterChange::Synced)) {}
        let info = PodInfo::new(c.get_pod("default", "victim").unwrap()).unwrap();
        c.delete_pod(
            &info,
            "default-scheduler: preempting to accommodate a higher priority pod",
        )
        .await
        .unwrap();
        match rx.recv().await {
            Some(ClusterChange::Pod(WatchEvent::Modified { new, .. })) => {
                let cond = &new.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
                assert_eq!(
                    (cond.type_.as_str(), cond.reason.as_deref()),
                    ("DisruptionTarget", Some("PreemptionByScheduler"))
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Pod(WatchEvent::Deleted(_)))
        ));
        assert!(c.get_pod("default", "victim").is_none());
        assert!(
            c.delete_pod(&info, "again").await.is_err(),
            "a deleted pod cannot be evicted"
        );
    }

    #[test]
    fn gated_pods_are_created_with_the_scheduling_gated_condition() {
        let c = EmbeddedCluster::new();
        let mut v = pod_json("g");
        v["spec"]["schedulingGates"] = serde_json::json!([{"name": "x"}]);
        c.apply(v).unwrap();
        let p = c.get_pod("default", "g").unwrap();
        let cond = &p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(cond.reason.as_deref(), Some("SchedulingGated"));
        assert_eq!(
            cond.message.as_deref(),
            Some("Scheduling is blocked due to non-empty scheduling gates")
        );
    }

    #[tokio::test]
    async fn unschedulable_condition_and_nomination() {
        let c = EmbeddedCluster::new();
        c.apply(pod_json("p")).unwrap();
        let info = PodInfo::new(c.get_pod("default", "p").unwrap()).unwrap();
        c.set_unschedulable(
            &info,
            PodScheduledCondition {
                reason: "Unschedulable".into(),
                message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
            },
            Some(Some("n1".into())),
        )
        .await
        .unwrap();
        let p = c.get_pod("default", "p").unwrap();
        let st = p.status.as_ref().unwrap();
        let cond = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_deref()),
            ("False", Some("Unschedulable"))
        );
        assert_eq!(st.nominated_node_name.as_deref(), Some("n1"));
    }
}
