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
mod snapshot;
mod volumes;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use load::{LoadError, LoadedObject, parse_objects, read_objects};

use super::{ClusterChange, ClusterSource, PodScheduledCondition, WatchEvent, writes};
use crate::cache::{KubeObject, ObjectKind};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::{InvalidObject, NodeSpec, PodInfo, admission};

/// The built-in sample cluster berthd loads when no `--cluster` is given
/// (`server/sample/cluster.yaml`).
pub const SAMPLE_CLUSTER: &str = include_str!("../../../sample/cluster.yaml");

/// The kinds the embedded cluster stores, for messages.
pub fn supported_kinds() -> String {
    ["Node", "Pod"]
        .into_iter()
        .chain(ObjectKind::ALL.iter().map(|k| k.type_meta().1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many events the store keeps (oldest dropped first).
const MAX_EVENTS: usize = 10_000;

/// An object the store refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The object is not one the store holds.
    #[error("kind {kind:?} is not supported by the embedded cluster (supported: {supported})", kind = .0, supported = supported_kinds())]
    UnsupportedKind(String),
    /// The object does not parse as its kind.
    #[error("{0}")]
    Malformed(String),
    /// The object is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidObject),
    /// The object's namespace does not exist (the API server's 404).
    #[error("metadata.namespace: namespaces {0:?} not found")]
    NamespaceNotFound(String),
    /// Admission refused the object (the API server's 403), e.g. a pod
    /// naming a PriorityClass that does not exist.
    #[error(transparent)]
    Forbidden(#[from] crate::model::priority::PriorityRefused),
}

/// What an apply did to an object, as kubectl reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It did not exist.
    Created,
    /// It existed and changed.
    Configured,
    /// It existed as given: nothing was written.
    Unchanged,
}

/// An object decoded, defaulted and validated, ready to store.
#[derive(Debug, Clone)]
pub enum Admitted {
    /// A node.
    Node(Box<Node>),
    /// A pod.
    Pod(Box<Pod>),
    /// Any other stored kind.
    Object(KubeObject),
}

impl Admitted {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Node(_) => Kind::Node,
            Self::Pod(_) => Kind::Pod,
            Self::Object(o) => Kind::Object(o.kind()),
        }
    }

    /// The namespace it must live in, if namespaced (`default` when unset).
    fn namespace(&self) -> Option<String> {
        let (meta, namespaced) = match self {
            Self::Node(_) => return None,
            Self::Pod(p) => (&p.metadata, true),
            Self::Object(o) => (o.metadata(), o.kind().namespaced()),
        };
        namespaced.then(|| {
            meta.namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into())
        })
    }

    /// The namespace this object creates, if it is a Namespace.
    fn defines_namespace(&self) -> Option<String> {
        match self {
            Self::Object(KubeObject::Namespace(ns)) => ns.metadata.name.clone(),
            _ => None,
        }
    }
}

/// The namespaces a Kubernetes API server creates at start.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-node-lease", "kube-public", "kube-system"];

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
            if pod == **old {
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

/// Decodes, defaults and validates an object given as JSON, as the API
/// server would before storing it ([`crate::model::admission`]).
pub fn admit(value: serde_json::Value) -> Result<Admitted, ApplyError> {
    let kind_text = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    // Nodes and pods are also pre-parsed here, as they will be when
    // stored, so that a batch is refused before any of it is stored.
    match kind_text.as_str() {
        "Node" => {
            let node = admission::node_from_json(value)?;
            NodeSpec::new(Arc::new(node.clone()))?;
            Ok(Admitted::Node(Box::new(node)))
        }
        "Pod" => {
            let pod = admission::pod_from_json(value)?;
            let mut probe = pod.clone();
            probe.metadata.uid.get_or_insert_with(|| "admission".into());
            PodInfo::new(Arc::new(probe))?;
            Ok(Admitted::Pod(Box::new(pod)))
        }
        other => {
            let Some(kind) = ObjectKind::ALL
                .into_iter()
                .find(|k| k.type_meta().1 == other)
            else {
                return Err(ApplyError::UnsupportedKind(kind_text));
            };
            crate::model::decode::check_bounds(&value)?;
            let (api_version, kind_name) = kind.type_meta();
            admission::check_type_meta(&value, api_version, kind_name)?;
            // Other kinds are decoded leniently, then encoded again: a
            // field of the input missing from the result is one the kind
            // does not have.
            let obj = KubeObject::from_json(kind, value.clone())
                .map_err(|e| InvalidObject::new(e.path, e.message))?;
            if let Some(path) = crate::model::decode::unknown_field(&value, &obj.to_json()) {
                let name = path
                    .rsplit(['.', '['])
                    .next()
                    .unwrap_or(&path)
                    .trim_end_matches(']')
                    .to_string();
                return Err(InvalidObject::new(path, format!("unknown field \"{name}\"")).into());
            }
            admit_meta(&obj, kind)?;
            let obj = match obj {
                KubeObject::PodGroup(pg) => {
                    let mut pg = (*pg).clone();
                    crate::model::pod_group::admit_pod_group(&mut pg)?;
                    KubeObject::PodGroup(Arc::new(pg))
                }
                o => o,
            };
            Ok(Admitted::Object(obj))
        }
    }
}

/// A PodGroup write as the API server's strategy makes it: on create the
/// status starts empty, on update the spec's immutable fields are checked
/// and the status is kept (only the status subresource changes it).
fn pod_group_write(old: Option<&KubeObject>, obj: KubeObject) -> Result<KubeObject, ApplyError> {
    let KubeObject::PodGroup(new) = &obj else {
        return Ok(obj);
    };
    let mut pg = (**new).clone();
    match old {
        Some(KubeObject::PodGroup(old)) => {
            crate::model::pod_group::validate_pod_group_update(old, &pg)?;
            if pg.spec.disruption_mode.is_none() {
                pg.spec.disruption_mode = old.spec.disruption_mode.clone();
            }
            pg.status = old.status.clone();
        }
        _ => pg.status = Some(Default::default()),
    }
    Ok(KubeObject::PodGroup(Arc::new(pg)))
}

/// Validates an object of a kind other than Node and Pod as the API server
/// does on create ([`admission::validate_object`]).
fn admit_meta(obj: &KubeObject, _kind: ObjectKind) -> Result<(), InvalidObject> {
    use admission::ObjectRef as R;
    let r = match obj {
        KubeObject::Namespace(o) => R::Namespace(o),
        KubeObject::PersistentVolume(o) => R::PersistentVolume(o),
        KubeObject::PersistentVolumeClaim(o) => R::PersistentVolumeClaim(o),
        KubeObject::StorageClass(o) => R::StorageClass(o),
        KubeObject::CsiNode(o) => R::CsiNode(o),
        KubeObject::PodDisruptionBudget(o) => R::PodDisruptionBudget(o),
        KubeObject::Service(o) => R::Service(o),
        KubeObject::ReplicaSet(o) => R::ReplicaSet(o),
        KubeObject::StatefulSet(o) => R::StatefulSet(o),
        KubeObject::ReplicationController(o) => R::ReplicationController(o),
        KubeObject::DeviceClass(o) => R::DeviceClass(o),
        KubeObject::ResourceClaim(o) => R::ResourceClaim(o),
        KubeObject::ResourceClaimTemplate(o) => R::ResourceClaimTemplate(o),
        KubeObject::ResourceSlice(o) => R::ResourceSlice(o),
        KubeObject::DeviceTaintRule(o) => R::DeviceTaintRule(o),
        KubeObject::CsiDriver(o) => R::CsiDriver(o),
        KubeObject::CsiStorageCapacity(o) => R::CsiStorageCapacity(o),
        KubeObject::PriorityClass(o) => R::PriorityClass(o),
        KubeObject::PodGroup(o) => R::PodGroup(o),
        KubeObject::Workload(o) => R::Workload(o),
    };
    admission::validate_object(r)
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
            admitted.push(admit(v).map_err(|e| (i, e))?);
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
        admit_meta(&obj, kind)?;
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
                        dra::pod_removed(&mut s, &p);
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
        self.store
            .lock()
            .events
            .iter()
            .map(StoredEvent::to_event)
            .collect()
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
            let status = p.status.get_or_insert_with(Default::default);
            // As the API server since v1.35 (ClearingNominatedNodeNameAfterBinding):
            // a bound pod's nomination is over.
            status.nominated_node_name = None;
            set_condition(
                status,
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
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        if terminating {
            return Ok(());
        }
        self.update_pod(&pod.namespace, &pod.name, |p| {
            if p.metadata.uid.as_deref() != Some(uid.as_str()) {
                return Err(ClusterError::Conflict(format!(
                    "Operation cannot be fulfilled on pods {:?}: Precondition failed: UID in precondition: {uid}",
                    &*pod.name
                )));
            }
            let existing = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default();
            if let Some(condition) =
                writes::disruption_target(existing, p.metadata.generation, false, message)
            {
                set_condition(p.status.get_or_insert_with(Default::default), condition);
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

/// An event as the store keeps it: what its `events.k8s.io/v1` object is
/// built from when asked for, a tenth of that object's size (the store
/// keeps [`MAX_EVENTS`] of them, and a decoded `Event` is over a
/// kilobyte before its strings).
struct StoredEvent {
    at: k8s_openapi::jiff::Timestamp,
    namespace: Arc<str>,
    name: Arc<str>,
    uid: Arc<str>,
    resource_version: Option<Box<str>>,
    controller: Arc<str>,
    /// `Normal` or `Warning`.
    event_type: &'static str,
    reason: &'static str,
    action: &'static str,
    note: Box<str>,
}

impl StoredEvent {
    fn new(e: PodEvent) -> Self {
        let at = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap_or_default();
        let pod = &e.pod;
        Self {
            at,
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            resource_version: pod.pod.resource_version().map(Box::from),
            controller: e.controller,
            event_type: e.event_type.as_str(),
            reason: e.reason,
            action: e.action,
            note: e.note.into_boxed_str(),
        }
    }

    /// The object, as upstream's scheduler writes it
    /// ([`writes::event_json`], as kube mode creates it), with the
    /// creation time the API server would add.
    fn to_event(&self) -> Event {
        let name = writes::event_name(&self.name, self.at);
        let instance = writes::reporting_instance(&self.controller);
        let body = writes::event_json(&writes::EventFields {
            name: &name,
            at: self.at,
            controller: &self.controller,
            instance: &instance,
            action: self.action,
            reason: self.reason,
            event_type: self.event_type,
            note: &self.note,
            regarding: writes::Regarding {
                namespace: &self.namespace,
                name: &self.name,
                uid: &self.uid,
                resource_version: self.resource_version.as_deref(),
            },
        });
        let mut event: Event = serde_json::from_value(body).unwrap_or_default();
        event.metadata.creation_timestamp = Some(Time(self.at));
        event
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
            let c = writes::pod_scheduled_false(
                status.conditions.as_deref().unwrap_or_default(),
                p.metadata.generation,
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
        // The API server's own namespaces come first, as objects pods
        // refer to.
        for ns in SYSTEM_NAMESPACES {
            match rx.recv().await {
                Some(ClusterChange::Object(WatchEvent::Added(o))) => {
                    assert_eq!(o.metadata().name.as_deref(), Some(ns));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Node(WatchEvent::Added(_)))
        ));
        assert!(matches!(
            rx.recv().await,
            Some(ClusterChange::Pod(WatchEvent::Added(_)))
        ));
        assert!(matches!(rx.recv().await, Some(ClusterChange::Synced)));
        // The same object again changes nothing: no event, as kubectl's
        // "unchanged".
        assert_eq!(
            c.apply_all(vec![pod_json("p")]).unwrap()[0].3,
            Applied::Unchanged
        );
        let mut changed = pod_json("p");
        changed["metadata"]["labels"] = serde_json::json!({"v": "2"});
        assert_eq!(
            c.apply_all(vec![changed]).unwrap()[0].3,
            Applied::Configured
        );
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
    fn apply_refuses_what_the_api_server_refuses() {
        use serde_json::json;
        let c = EmbeddedCluster::new();
        let mut p = pod_json("p");
        p["metadata"]["namespace"] = json!("nope");
        let (i, e) = c.apply_all(vec![pod_json("ok"), p.clone()]).unwrap_err();
        assert_eq!(i, 1);
        assert_eq!(
            e.to_string(),
            "metadata.namespace: namespaces \"nope\" not found"
        );
        assert!(c.get_pod("default", "ok").is_none(), "all or nothing");
        // A namespace created earlier in the same batch is there.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nope"}});
        let done = c.apply_all(vec![ns, p]).unwrap();
        assert_eq!(done[1].3, Applied::Created);
        let mut typo = pod_json("t");
        typo["spec"]["nodeSelektor"] = json!({"a": "b"});
        assert_eq!(
            c.apply(typo).unwrap_err().to_string(),
            "spec.nodeSelektor: unknown field \"nodeSelektor\""
        );
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {"storageClassNme": "x"}});
        assert_eq!(
            c.apply(pvc).unwrap_err().to_string(),
            "spec.storageClassNme: unknown field \"storageClassNme\""
        );
        let mut limited = pod_json("l");
        limited["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "64"}});
        c.apply(limited).unwrap();
        let stored = c.get_pod("default", "l").unwrap();
        let reqs = stored.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .clone()
            .unwrap();
        assert_eq!(
            reqs["cpu"].0, "64",
            "stored defaulted, as the API server stores it"
        );
    }

    #[test]
    fn files_get_the_namespaces_their_objects_live_in() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: shop}\nspec: {containers: [{name: c}]}\n";
        let c = EmbeddedCluster::from_objects(parse_objects(text, "f.yaml").unwrap()).unwrap();
        assert!(c.object(ObjectKind::Namespace, "", "shop").is_some());
        assert!(c.object(ObjectKind::Namespace, "", "kube-system").is_some());
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
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}}),
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
