//! The embedded cluster: an in-memory store of Kubernetes objects, the
//! default cluster source, so that berth runs with no cluster at all.
//!
//! It behaves like the API server where the scheduler can tell: objects
//! get UIDs, resourceVersions and creation timestamps; a binding sets
//! `spec.nodeName` and the `PodScheduled=True` condition and fails as the
//! API server fails (404 for a missing pod, 409 for a bound one or a stale
//! UID); every change is delivered to subscribers as a watch event; events
//! are kept as `events.k8s.io/v1` objects.
//!
//! This file holds the store and the cluster's own face (load, apply,
//! delete, read). Admission is in `admit`, what the scheduler writes in
//! `client`, what it watches in `source`, the kept events in `events`, and
//! what the API server's neighbours would do (DRA's and volumes'
//! controllers) in `dra` and `volumes`.

mod admit;
mod client;
mod dra;
mod events;
pub mod load;
mod snapshot;
mod source;
#[cfg(test)]
mod tests;
mod volumes;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use admit::{Admitted, Applied, ApplyError, Kind, admit, supported_kinds};
use admit::{pod_group_write, validate_stored_kind};
use events::StoredEvent;
pub use load::{LoadError, LoadedObject, parse_objects, read_objects};

use super::{ClusterChange, WatchEvent};
use crate::cache::{KubeObject, ObjectKind};
use crate::framework::ClusterError;
use crate::model::{NodeSpec, PodInfo, PodObject, admission};

/// The built-in sample cluster berthd loads when no `--cluster` is given
/// (`server/sample/cluster.yaml`).
pub const SAMPLE_CLUSTER: &str = include_str!("../../../sample/cluster.yaml");

/// The namespaces a Kubernetes API server creates at start.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-node-lease", "kube-public", "kube-system"];

#[derive(Default)]
struct Store {
    nodes: BTreeMap<String, Arc<Node>>,
    /// Pods: shared objects; a status write's shares the version it was
    /// written over (see [`PodObject`]), never packed.
    pods: BTreeMap<(String, String), PodObject>,
    /// Every other kind, by kind, namespace and name.
    objects: BTreeMap<(ObjectKind, String, String), KubeObject>,
    resource_version: u64,
    next_uid: u64,
    subscribers: Vec<mpsc::UnboundedSender<ClusterChange>>,
    events: VecDeque<StoredEvent>,
    /// While a cluster file is loaded: the controllers wait for the whole
    /// file (see `snapshot`).
    loading: bool,
    /// Pods given a UID at load because the file had none.
    generated_uids: std::collections::HashSet<(String, String)>,
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

    fn has_namespace(&self, ns: &str) -> bool {
        self.objects
            .contains_key(&(ObjectKind::Namespace, String::new(), ns.to_string()))
    }

    /// Creates the namespace `ns` unless it exists.
    fn ensure_namespace(&mut self, ns: &str) {
        if self.has_namespace(ns) {
            return;
        }
        let obj = KubeObject::Namespace(Arc::new(k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some(ns.to_string()),
                labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    ns.to_string(),
                )])),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::core::v1::NamespaceStatus {
                phase: Some("Active".into()),
                ..Default::default()
            }),
            ..Default::default()
        }));
        // A new object with no expected version cannot conflict.
        let _ = self.put_object(obj, None);
    }

    /// Stores an admitted object (creating or replacing it). Returns its
    /// kind, namespace, name and what was done.
    fn put(&mut self, a: Admitted) -> Result<(Kind, String, String, Applied), ApplyError> {
        match a {
            Admitted::Node(node) => {
                let (name, applied) = self.put_node(*node)?;
                Ok((Kind::Node, String::new(), name, applied))
            }
            Admitted::Pod(pod) => {
                let (ns, name, applied) = self.put_pod(*pod)?;
                if !self.loading {
                    dra::pod_changed(self, &(ns.clone(), name.clone()));
                }
                Ok((Kind::Pod, ns, name, applied))
            }
            Admitted::Object(obj) => {
                let kind = obj.kind();
                let old = self.objects.get(&obj.key()).cloned();
                let obj = pod_group_write(old.as_ref(), obj)?;
                let stored = self
                    .put_object(obj, None)
                    .map_err(|e| ApplyError::Malformed(e.to_string()))?;
                if !self.loading {
                    dra::object_changed(self, &stored.key());
                }
                let (_, ns, name) = stored.key();
                let applied = match old {
                    None => Applied::Created,
                    Some(o)
                        if o.metadata().resource_version == stored.metadata().resource_version =>
                    {
                        Applied::Unchanged
                    }
                    Some(_) => Applied::Configured,
                };
                Ok((Kind::Object(kind), ns, name, applied))
            }
        }
    }

    fn put_node(&mut self, mut node: Node) -> Result<(String, Applied), ApplyError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let old = self.nodes.get(&name).cloned();
        node.metadata.uid = old
            .as_ref()
            .and_then(|o| o.metadata.uid.clone())
            .or(node.metadata.uid)
            .or_else(|| Some(self.new_uid()));
        node.metadata.creation_timestamp = old
            .as_ref()
            .and_then(|o| o.metadata.creation_timestamp.clone())
            .or(node.metadata.creation_timestamp)
            .or_else(|| Some(now_time()));
        if let Some(old) = &old {
            node.metadata.resource_version = old.metadata.resource_version.clone();
            if node == **old {
                return Ok((name, Applied::Unchanged));
            }
        }
        node.metadata.resource_version = Some(self.next_rv());
        let node = Arc::new(node);
        NodeSpec::new(node.clone())?;
        self.nodes.insert(name.clone(), node.clone());
        let (change, applied) = match old {
            Some(old) => (WatchEvent::Modified { old, new: node }, Applied::Configured),
            None => (WatchEvent::Added(node), Applied::Created),
        };
        self.emit(ClusterChange::Node(change));
        Ok((name, applied))
    }

    fn put_pod(&mut self, mut pod: Pod) -> Result<(String, String, Applied), ApplyError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ns = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        pod.metadata.namespace = Some(ns.clone());
        let key = (ns.clone(), name.clone());
        let old = self.pods.get(&key).cloned();
        if let Some(old) = old.as_ref().map(PodObject::get) {
            pod.metadata.uid = old.metadata.uid.clone();
            pod.metadata.creation_timestamp = old.metadata.creation_timestamp.clone();
            let old_node = old.spec.as_ref().and_then(|s| s.node_name.clone());
            if let (Some(spec), Some(node)) = (pod.spec.as_mut(), old_node) {
                spec.node_name.get_or_insert(node);
            }
            if pod.status.is_none() {
                pod.status = old.status.clone();
            }
            // The Priority admission on update keeps what it set on create.
            if let (Some(spec), Some(old_spec)) = (pod.spec.as_mut(), old.spec.as_ref()) {
                if spec.priority.is_none() {
                    spec.priority = old_spec.priority;
                }
                if spec.preemption_policy.is_none() {
                    spec.preemption_policy = old_spec.preemption_policy.clone();
                }
                if spec
                    .priority_class_name
                    .as_deref()
                    .is_none_or(str::is_empty)
                {
                    spec.priority_class_name = old_spec.priority_class_name.clone();
                }
            }
            // As the API server since v1.33: the generation moves with the
            // spec.
            let old_generation = old.metadata.generation.unwrap_or(1);
            pod.metadata.generation = Some(if pod.spec == old.spec {
                old_generation
            } else {
                old_generation + 1
            });
            pod.metadata.resource_version = old.metadata.resource_version.clone();
            if pod == *old {
                return Ok((ns, name, Applied::Unchanged));
            }
        } else {
            // The Priority admission plugin runs on create.
            let classes: Vec<Arc<k8s_openapi::api::scheduling::v1::PriorityClass>> = self
                .objects
                .range((ObjectKind::PriorityClass, String::new(), String::new())..)
                .take_while(|((k, _, _), _)| *k == ObjectKind::PriorityClass)
                .filter_map(|(_, o)| match o {
                    KubeObject::PriorityClass(c) => Some(c.clone()),
                    _ => None,
                })
                .collect();
            crate::model::priority::admit_priority(&mut pod, classes.iter().map(|c| &**c))?;
            pod.metadata.generation = Some(1);
            if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
                if self.loading {
                    self.generated_uids.insert(key.clone());
                }
                pod.metadata.uid = Some(self.new_uid());
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
        pod.metadata.resource_version = Some(self.next_rv());
        let pod = Arc::new(pod);
        PodInfo::new(pod.clone())?;
        let pod = PodObject::shared(pod);
        self.pods.insert(key, pod.clone());
        let (change, applied) = match old {
            Some(old) => (WatchEvent::Modified { old, new: pod }, Applied::Configured),
            None => (WatchEvent::Added(pod), Applied::Created),
        };
        self.emit(ClusterChange::Pod(change));
        Ok((ns, name, applied))
    }

    /// Creates or replaces an object, with API server bookkeeping (UID,
    /// creation time, resourceVersion). With `expected_rv`, refuses a stale
    /// write as the API server does (409). Replacing an object with the
    /// same content writes nothing (no new resourceVersion, no event).
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
        if let Some(old) = &old {
            let same = obj.with_metadata(|m| {
                m.uid = Some(uid.clone());
                m.creation_timestamp = Some(created.clone());
                m.resource_version = old.metadata().resource_version.clone();
                m.namespace = namespace.clone();
            });
            if same.to_json() == old.to_json() {
                return Ok(old.clone());
            }
        }
        let rv = self.next_rv();
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
    /// A cluster holding only the namespaces an API server creates at
    /// start ([`SYSTEM_NAMESPACES`]).
    pub fn new() -> Arc<Self> {
        let c = Arc::new(Self::default());
        {
            let mut s = c.store.lock();
            for ns in SYSTEM_NAMESPACES {
                s.ensure_namespace(ns);
            }
        }
        c
    }

    /// A cluster holding `objects` (a `--cluster` file, the sample
    /// cluster); the first invalid one fails the load, naming where it came
    /// from. As these describe a cluster's state rather than requests to
    /// it, a namespace that objects live in but that no document defines
    /// is created, and Namespaces are stored before the rest.
    pub fn from_objects(objects: Vec<LoadedObject>) -> Result<Arc<Self>, LoadError> {
        let cluster = Self::new();
        let mut admitted = Vec::with_capacity(objects.len());
        for o in objects {
            let a = admit(o.value).map_err(|e| LoadError::Invalid {
                origin: o.origin.clone(),
                message: e.to_string(),
            })?;
            admitted.push((o.origin, a));
        }
        // Namespaces first, as kubectl applies a directory's in its order
        // and the objects after them need them; then PriorityClasses, which
        // pods' admission reads, whatever the order of the file.
        admitted.sort_by_key(|(_, a)| match a {
            _ if a.defines_namespace().is_some() => 0,
            Admitted::Object(KubeObject::PriorityClass(_)) => 1,
            _ => 2,
        });
        let mut s = cluster.store.lock();
        for (_, a) in &admitted {
            if let Some(ns) = a.namespace() {
                s.ensure_namespace(&ns);
            }
        }
        s.loading = true;
        let mut origins = std::collections::HashMap::new();
        for (origin, a) in admitted {
            let (kind, ns, name, _) = s.put(a).map_err(|e| LoadError::Invalid {
                origin: origin.clone(),
                message: e.to_string(),
            })?;
            if let Kind::Object(k) = kind {
                origins.insert((k, ns, name), origin);
            }
        }
        snapshot::finish_load(&mut s, &origins)?;
        volumes::reconcile(&mut s);
        drop(s);
        Ok(cluster)
    }

    /// Creates or updates an object given as its JSON, as the gRPC Apply
    /// does (its namespace must exist). Returns its kind, namespace and
    /// name.
    pub fn apply(&self, value: serde_json::Value) -> Result<(Kind, String, String), ApplyError> {
        let (k, ns, name, _) = self.apply_all(vec![value]).map_err(|(_, e)| e)?.remove(0);
        Ok((k, ns, name))
    }

    /// Applies `values` all or none, as the gRPC Apply does: every object
    /// is admitted (strictly decoded, defaulted, validated) and its
    /// namespace checked (existing, or created by an earlier object of the
    /// batch) before any is stored. Returns each object's kind, namespace,
    /// name and what the apply did; or the index of the first refused
    /// object and why.
    #[allow(clippy::type_complexity)]
    pub fn apply_all(
        &self,
        values: Vec<serde_json::Value>,
    ) -> Result<Vec<(Kind, String, String, Applied)>, (usize, ApplyError)> {
        let mut admitted = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            admitted.push(admit(v).map_err(|e| (i, e.into()))?);
        }
        let mut s = self.store.lock();
        let mut batch_namespaces: Vec<String> = Vec::new();
        for (i, a) in admitted.iter().enumerate() {
            if let Some(ns) = a.namespace()
                && !s.has_namespace(&ns)
                && !batch_namespaces.contains(&ns)
            {
                return Err((i, ApplyError::NamespaceNotFound(ns)));
            }
            if let Some(ns) = a.defines_namespace() {
                batch_namespaces.push(ns);
            }
        }
        let mut out = Vec::with_capacity(admitted.len());
        for (i, a) in admitted.into_iter().enumerate() {
            out.push(s.put(a).map_err(|e| (i, e))?);
        }
        volumes::reconcile(&mut s);
        Ok(out)
    }

    /// Checks that `value` would be applied (admitted and its namespace
    /// existing), without storing it.
    pub fn validate(&self, value: serde_json::Value) -> Result<(), ApplyError> {
        let a = admit(value)?;
        if let Some(ns) = a.namespace()
            && !self.store.lock().has_namespace(&ns)
        {
            return Err(ApplyError::NamespaceNotFound(ns));
        }
        Ok(())
    }

    /// Creates or replaces an object of a kind other than Node and Pod (its
    /// namespace is created if missing). The store's controllers then react
    /// (e.g. binding a claimed volume).
    pub fn apply_object(&self, obj: KubeObject) -> Result<KubeObject, ApplyError> {
        let kind = obj.kind();
        validate_stored_kind(&obj)?;
        let mut s = self.store.lock();
        if kind.namespaced() {
            let ns = obj.metadata().namespace.clone().filter(|n| !n.is_empty());
            s.ensure_namespace(ns.as_deref().unwrap_or("default"));
        }
        let key = obj.key();
        s.put(Admitted::Object(obj))?;
        volumes::reconcile(&mut s);
        s.objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApplyError::Malformed("the object was not stored".into()))
    }

    /// Creates or replaces a node (admitted first).
    pub fn apply_node(&self, node: Node) -> Result<String, ApplyError> {
        admission::admit_node(&node)?;
        let (_, _, name, _) = self.store.lock().put(Admitted::Node(Box::new(node)))?;
        Ok(name)
    }

    /// Creates or replaces a pod, defaulted and validated as the API server
    /// would (its namespace is created if missing). An update keeps the
    /// pod's UID, creation time and (unless given) binding and status.
    pub fn apply_pod(&self, mut pod: Pod) -> Result<(String, String), ApplyError> {
        admission::admit_pod(&mut pod)?;
        let a = Admitted::Pod(Box::new(pod));
        let mut s = self.store.lock();
        if let Some(ns) = a.namespace() {
            s.ensure_namespace(&ns);
        }
        let (_, ns, name, _) = s.put(a)?;
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
                        dra::pod_removed(&mut s, &meta_spec(&p));
                        true
                    }
                    None => false,
                }
            }
        }
    }

    /// The store's current resourceVersion.
    pub fn resource_version(&self) -> String {
        self.store.lock().resource_version.to_string()
    }

    /// Every node, by name.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.store.lock().nodes.values().cloned().collect()
    }

    /// Every pod, by namespace and name.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.store
            .lock()
            .pods
            .values()
            .map(PodObject::get)
            .collect()
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
        self.store
            .lock()
            .events
            .iter()
            .map(StoredEvent::to_event)
            .collect()
    }

    /// Writes the pod's status subresource: `f` is given the object's
    /// metadata and its status to change. The new version shares the
    /// metadata and spec of the one it replaces.
    fn update_pod_status(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&ObjectMeta, &mut PodStatus) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        self.write_pod(namespace, name, |s, old| {
            let mut status = old.status().cloned().unwrap_or_default();
            f(&meta_spec(old).metadata, &mut status)?;
            Ok(old.with_status(Some(status), s.next_rv()))
        })
    }

    fn write_pod(
        &self,
        namespace: &str,
        name: &str,
        write: impl FnOnce(&mut Store, &PodObject) -> Result<PodObject, ClusterError>,
    ) -> Result<(), ClusterError> {
        let mut s = self.store.lock();
        let key = (namespace.to_string(), name.to_string());
        let Some(old) = s.pods.get(&key).cloned() else {
            return Err(ClusterError::NotFound(format!("pods {name:?} not found")));
        };
        let new = write(&mut s, &old)?;
        if let Some(slot) = s.pods.get_mut(&key) {
            *slot = new.clone();
        }
        // The claim controller acts on a pod's spec, deletion, phase and
        // claim statuses: a status write that changed neither of the last
        // two (a nomination, a condition) leaves it nothing to do (a
        // binding, which changes the spec, is shown to it).
        let unchanged_for_claims = |a: &PodObject, b: &PodObject| {
            let (sa, sb) = (a.status(), b.status());
            matches!((a.base(), b.base()), (Some(x), Some(y)) if Arc::ptr_eq(x, y))
                && a.node_name() == b.node_name()
                && sa.and_then(|s| s.phase.as_ref()) == sb.and_then(|s| s.phase.as_ref())
                && sa.and_then(|s| s.resource_claim_statuses.as_ref())
                    == sb.and_then(|s| s.resource_claim_statuses.as_ref())
        };
        let claims = !unchanged_for_claims(&old, &new);
        s.emit(ClusterChange::Pod(WatchEvent::Modified { old, new }));
        if claims {
            dra::pod_changed(&mut s, &key);
        }
        Ok(())
    }
}

/// The object whose metadata (but for its resourceVersion) and spec are
/// the stored pod's: shared, never copied (the store keeps no packed pod;
/// one would be decoded). Its status is not the pod's, nor is its nodeName
/// once a binding wrote one: read [`PodObject::status`] and
/// [`PodObject::node_name`].
fn meta_spec(p: &PodObject) -> Arc<Pod> {
    p.base().cloned().unwrap_or_else(|| p.get())
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
