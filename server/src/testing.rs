//! Fluent builders for pods and nodes, for the unit tests (compiled only
//! into them):
//! `make_pod("web").req_cpu("500m").node("n1").build()`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Map, Value, json};

use crate::model::{NodeSpec, PodInfo};

/// Starts a pod named `name` in namespace `default` with one container.
pub fn make_pod(name: &str) -> PodBuilder {
    PodBuilder {
        name: name.to_string(),
        namespace: "default".into(),
        uid: None,
        labels: BTreeMap::new(),
        requests: Map::new(),
        extra: Map::new(),
        ports: Vec::new(),
        tolerations: Vec::new(),
        gates: Vec::new(),
        status: Map::new(),
    }
}

/// Starts a node named `name` with no resources.
pub fn make_node(name: &str) -> NodeBuilder {
    NodeBuilder {
        name: name.to_string(),
        labels: BTreeMap::new(),
        allocatable: Map::new(),
        taints: Vec::new(),
        unschedulable: false,
    }
}

/// Builds a pod; see [`make_pod`].
#[derive(Debug, Clone)]
pub struct PodBuilder {
    name: String,
    namespace: String,
    uid: Option<String>,
    labels: BTreeMap<String, String>,
    requests: Map<String, Value>,
    extra: Map<String, Value>,
    ports: Vec<Value>,
    tolerations: Vec<Value>,
    gates: Vec<Value>,
    status: Map<String, Value>,
}

impl PodBuilder {
    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }
    /// Sets the UID (default: `uid-<namespace>-<name>`).
    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = Some(uid.into());
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    /// Requests CPU.
    pub fn req_cpu(self, q: &str) -> Self {
        self.req("cpu", q)
    }
    /// Requests memory.
    pub fn req_memory(self, q: &str) -> Self {
        self.req("memory", q)
    }
    /// Requests any resource.
    pub fn req(mut self, name: &str, q: &str) -> Self {
        self.requests.insert(name.into(), json!(q));
        self
    }
    /// Sets spec.priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.extra.insert("priority".into(), json!(p));
        self
    }
    /// Sets spec.nodeName (bound).
    pub fn node(mut self, n: &str) -> Self {
        self.extra.insert("nodeName".into(), json!(n));
        self
    }
    /// Sets spec.schedulerName.
    pub fn scheduler(mut self, s: &str) -> Self {
        self.extra.insert("schedulerName".into(), json!(s));
        self
    }
    /// Adds a TCP host port.
    pub fn host_port(mut self, port: i32) -> Self {
        self.ports
            .push(json!({"containerPort": port, "hostPort": port}));
        self
    }
    /// Adds a toleration.
    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        let mut t = Map::new();
        if !key.is_empty() {
            t.insert("key".into(), json!(key));
        }
        t.insert("operator".into(), json!(operator));
        if !value.is_empty() {
            t.insert("value".into(), json!(value));
        }
        if !effect.is_empty() {
            t.insert("effect".into(), json!(effect));
        }
        self.tolerations.push(Value::Object(t));
        self
    }
    /// Adds a scheduling gate.
    pub fn gate(mut self, name: &str) -> Self {
        self.gates.push(json!({"name": name}));
        self
    }
    /// Sets status.nominatedNodeName.
    pub fn nominated(mut self, node: &str) -> Self {
        self.status.insert("nominatedNodeName".into(), json!(node));
        self
    }
    /// Sets spec.schedulingGroup.podGroupName (a member of that PodGroup).
    pub fn group(mut self, pod_group: &str) -> Self {
        self.extra
            .insert("schedulingGroup".into(), json!({"podGroupName": pod_group}));
        self
    }
    /// Sets any spec field.
    pub fn spec(mut self, key: &str, v: Value) -> Self {
        self.extra.insert(key.into(), v);
        self
    }

    /// The Kubernetes object.
    pub fn object(&self) -> Pod {
        let mut container = Map::new();
        container.insert("name".into(), json!("c"));
        container.insert("image".into(), json!("registry.k8s.io/pause:3.10"));
        if !self.requests.is_empty() {
            // Extended resources and hugepages cannot be overcommitted: the
            // API server wants their limits, equal to the requests.
            let limits: Map<String, Value> = self
                .requests
                .iter()
                .filter(|(k, _)| {
                    crate::model::resource::is_extended_resource(k)
                        || crate::model::resource::is_hugepages_resource(k)
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if limits.is_empty() {
                container.insert("resources".into(), json!({"requests": self.requests}));
            } else {
                container.insert(
                    "resources".into(),
                    json!({"requests": self.requests, "limits": limits}),
                );
            }
        }
        if !self.ports.is_empty() {
            container.insert("ports".into(), Value::Array(self.ports.clone()));
        }
        let mut spec = self.extra.clone();
        spec.insert("containers".into(), json!([container]));
        if !self.tolerations.is_empty() {
            spec.insert("tolerations".into(), Value::Array(self.tolerations.clone()));
        }
        if !self.gates.is_empty() {
            spec.insert("schedulingGates".into(), Value::Array(self.gates.clone()));
        }
        let uid = self
            .uid
            .clone()
            .unwrap_or_else(|| format!("uid-{}-{}", self.namespace, self.name));
        let v = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": uid, "labels": self.labels},
            "spec": spec,
            "status": self.status,
        });
        serde_json::from_value(v).expect("builder makes valid pods")
    }

    /// The parsed pod.
    pub fn build(&self) -> PodInfo {
        PodInfo::new(Arc::new(self.object())).expect("builder makes valid pods")
    }
}

/// Builds a node; see [`make_node`].
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    name: String,
    labels: BTreeMap<String, String>,
    allocatable: Map<String, Value>,
    taints: Vec<Value>,
    unschedulable: bool,
}

impl NodeBuilder {
    /// Sets allocatable CPU.
    pub fn cpu(self, q: &str) -> Self {
        self.alloc("cpu", q)
    }
    /// Sets allocatable memory.
    pub fn memory(self, q: &str) -> Self {
        self.alloc("memory", q)
    }
    /// Sets the number of pods the node accepts.
    pub fn pods(self, n: i64) -> Self {
        self.alloc("pods", &n.to_string())
    }
    /// Sets any allocatable resource.
    pub fn alloc(mut self, name: &str, q: &str) -> Self {
        self.allocatable.insert(name.into(), json!(q));
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints
            .push(json!({"key": key, "value": value, "effect": effect}));
        self
    }
    /// Cordons the node.
    pub fn unschedulable(mut self) -> Self {
        self.unschedulable = true;
        self
    }

    /// The Kubernetes object.
    pub fn object(&self) -> Node {
        let mut allocatable = self.allocatable.clone();
        allocatable.entry("pods").or_insert(json!("110"));
        let v = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {"unschedulable": self.unschedulable, "taints": self.taints},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        });
        serde_json::from_value(v).expect("builder makes valid nodes")
    }

    /// The parsed node.
    pub fn build(&self) -> NodeSpec {
        NodeSpec::new(Arc::new(self.object())).expect("builder makes valid nodes")
    }
}

/// A framework handle over a new embedded cluster (its client and event
/// recorder), running parallel work inline.
#[cfg(test)]
pub fn embedded_handle() -> crate::framework::Handle {
    let cluster = crate::cluster::embedded::EmbeddedCluster::new();
    crate::framework::Handle::new(
        cluster.clone(),
        cluster,
        crate::framework::Parallelizer::inline(),
    )
}

/// The default configuration's profiles, built as berthd builds them.
#[cfg(test)]
pub fn default_profiles(
    handle: &crate::framework::Handle,
) -> std::collections::HashMap<Arc<str>, Arc<crate::framework::Framework>> {
    let registry = crate::plugins::in_tree_registry();
    let cfg = crate::config::default_config(&|n| registry.contains(n));
    crate::scheduler::build_profiles(&cfg, &registry, handle).expect("the default profiles build")
}

/// The default profile's framework, built as berthd builds it.
#[cfg(test)]
pub fn default_framework(handle: &crate::framework::Handle) -> Arc<crate::framework::Framework> {
    let registry = crate::plugins::in_tree_registry();
    let cfg = crate::config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
        &|n| registry.contains(n),
    )
    .expect("the default configuration parses");
    crate::scheduler::build_profiles(&cfg, &registry, handle)
        .expect("the default profile builds")
        .into_values()
        .next()
        .expect("one profile")
}

/// A tracing layer keeping each event's level and message, for tests that
/// count what a reporter says (`tracing::subscriber::with_default` or
/// `set_default` with `registry().with(lines.clone())`).
#[derive(Clone, Default)]
pub struct Lines(pub Arc<parking_lot::Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Lines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0.lock().push((*event.metadata().level(), m.0));
    }
}
