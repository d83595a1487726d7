//! [`NodeFeed`]: the node table extenders follow, with the compact id each
//! node is named by in requests.
//!
//! The scheduler's event handlers apply every node change here *before*
//! the cache sees it (and put the id the feed assigned into the node the
//! cache keeps), and each change is queued on every subscribed stream at
//! once; a stream's requests are queued on the same channel later. So an
//! extender always knows a node's id (and, if it wants them, its object)
//! before any request naming it.
//!
//! Ids are assigned in order from 1 when a node name is first seen and
//! never reused while the process runs: a node deleted and created again
//! gets a new id, so a request built from an older snapshot can never name
//! another node than it meant.
//!
//! The feed also keeps the pods placed on the nodes, bound or assumed, as
//! the cache counts them (the cache tells it, [`PlacementSink`]), each
//! with an id of its own, and streams them to the extenders whose Hello
//! sets `wants_pods`: the table when they subscribe, before NodesSynced,
//! then each change once (PodUpsert, PodDelete). A pod's JSON is encoded
//! only when a stream that wants pods is there to take it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use berth_proto::extender::v1::{
    NodeDelete, NodeUpsert, NodesSynced, PodDelete, PodUpsert, SchedulerMessage,
    scheduler_message::Message,
};
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedSender;

use crate::cache::PlacementSink;
use crate::cluster::WatchEvent;
use crate::model::PodRef;

/// The current nodes and the streams that follow them.
#[derive(Default)]
pub struct NodeFeed {
    inner: Mutex<Inner>,
}

/// One node of the table.
struct Entry {
    id: u32,
    node: Arc<Node>,
    /// The node's Kubernetes JSON, encoded the first time a stream that
    /// wants node objects needs it.
    json: OnceLock<Arc<[u8]>>,
}

impl Entry {
    fn json(&self, name: &str) -> Arc<[u8]> {
        self.json
            .get_or_init(|| match serde_json::to_vec(&*self.node) {
                Ok(v) => v.into(),
                Err(e) => {
                    tracing::error!(node = name, error = %e, "cannot encode node for extenders");
                    Arc::from(&b""[..])
                }
            })
            .clone()
    }
}

struct Subscriber {
    tx: UnboundedSender<SchedulerMessage>,
    /// Whether the stream wants node objects (and every change).
    wants_nodes: bool,
    /// Whether the stream wants the pods on the nodes.
    wants_pods: bool,
}

/// One pod of the table.
struct PodEntry {
    id: u32,
    /// The id of its node as last sent (0 while the feed does not know the
    /// node).
    node_id: u32,
    pod: PodRef,
    assumed: bool,
}

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<String, Entry>,
    /// The last id assigned.
    last_id: u32,
    subscribers: Vec<Subscriber>,
    /// Whether the cluster's initial listing has been applied: until then
    /// `NodesSynced` is held back, since the nodes are still arriving.
    synced: bool,
    /// The pods placed on nodes, by uid.
    pods: HashMap<Arc<str>, PodEntry>,
    /// The uids of the pods on each node, by node name: a pod placed on a
    /// node the feed does not know yet (a watch can deliver the pod first)
    /// is sent again with the node's id when the node arrives.
    pods_on: HashMap<Arc<str>, HashSet<Arc<str>>>,
    /// The last pod id assigned.
    last_pod_id: u32,
}

impl Inner {
    /// Whether a stream wants pods (else no pod message is built).
    fn wants_pods(&self) -> bool {
        self.subscribers.iter().any(|s| s.wants_pods)
    }

    /// Queues `m` on every stream that wants pods, dropping the closed
    /// ones.
    fn send_pods(&mut self, m: &SchedulerMessage) {
        self.subscribers
            .retain(|s| !s.wants_pods || s.tx.send(m.clone()).is_ok());
    }

    fn unindex(&mut self, node: Option<&Arc<str>>, uid: &Arc<str>) {
        if let Some(node) = node
            && let Some(uids) = self.pods_on.get_mut(node)
        {
            uids.remove(uid);
            if uids.is_empty() {
                self.pods_on.remove(node);
            }
        }
    }
}

impl PlacementSink for NodeFeed {
    fn placed(&self, pod: &PodRef, assumed: bool) {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let node_id = pod
            .node_name
            .as_deref()
            .and_then(|n| inner.nodes.get(n))
            .map_or(0, |e| e.id);
        let moved_from = match inner.pods.get_mut(&pod.uid) {
            Some(e) => {
                let old = std::mem::replace(&mut e.pod, pod.clone());
                e.node_id = node_id;
                e.assumed = assumed;
                (old.node_name != pod.node_name).then_some(old.node_name.clone())
            }
            None => {
                inner.last_pod_id = inner.last_pod_id.wrapping_add(1).max(1);
                let entry = PodEntry {
                    id: inner.last_pod_id,
                    node_id,
                    pod: pod.clone(),
                    assumed,
                };
                inner.pods.insert(pod.uid.clone(), entry);
                Some(None)
            }
        };
        if let Some(old) = moved_from {
            inner.unindex(old.as_ref(), &pod.uid);
            if let Some(node) = &pod.node_name {
                inner
                    .pods_on
                    .entry(node.clone())
                    .or_default()
                    .insert(pod.uid.clone());
            }
        }
        if inner.wants_pods() {
            let m = pod_upsert(&inner.pods[&pod.uid]);
            inner.send_pods(&m);
        }
    }

    fn removed(&self, pod: &PodRef) {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let Some(e) = inner.pods.remove(&pod.uid) else {
            return;
        };
        inner.unindex(e.pod.node_name.as_ref(), &pod.uid);
        if inner.wants_pods() {
            inner.send_pods(&message(Message::PodDelete(PodDelete {
                id: e.id,
                node_id: e.node_id,
                uid: pod.uid.to_string(),
            })));
        }
    }
}

impl std::fmt::Debug for NodeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("NodeFeed")
            .field("nodes", &inner.nodes.len())
            .field("subscribers", &inner.subscribers.len())
            .finish()
    }
}

fn message(m: Message) -> SchedulerMessage {
    SchedulerMessage { message: Some(m) }
}

fn upsert(name: &str, entry: &Entry, with_object: bool) -> SchedulerMessage {
    message(Message::NodeUpsert(NodeUpsert {
        name: name.to_string(),
        node: if with_object {
            entry.json(name).to_vec()
        } else {
            Vec::new()
        },
        id: entry.id,
    }))
}

fn pod_upsert(e: &PodEntry) -> SchedulerMessage {
    let p = &e.pod;
    message(Message::PodUpsert(PodUpsert {
        id: e.id,
        node_id: e.node_id,
        node: p.node_name.as_deref().unwrap_or("").to_string(),
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        uid: p.uid.to_string(),
        assumed: e.assumed,
        pod: p.pod.to_json(),
    }))
}

fn nodes_synced(n: usize) -> SchedulerMessage {
    message(Message::NodesSynced(NodesSynced { nodes: n as u32 }))
}

impl NodeFeed {
    /// A feed with no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a node change; the node's id (0 for a node without a name,
    /// which no request can name either).
    pub fn apply(&self, e: &WatchEvent<Arc<Node>>) -> u32 {
        match e {
            WatchEvent::Added(n) | WatchEvent::Modified { new: n, .. } => self.upsert(n),
            WatchEvent::Deleted(n) => n
                .metadata
                .name
                .as_deref()
                .map_or(0, |name| self.delete(name)),
        }
    }

    /// A node was added or changed; its id.
    pub fn upsert(&self, node: &Arc<Node>) -> u32 {
        let Some(name) = node.metadata.name.as_deref().filter(|n| !n.is_empty()) else {
            return 0;
        };
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let (id, added) = match inner.nodes.get_mut(name) {
            Some(e) => {
                e.node = node.clone();
                e.json = OnceLock::new();
                (e.id, false)
            }
            None => {
                inner.last_id = inner.last_id.wrapping_add(1).max(1);
                let entry = Entry {
                    id: inner.last_id,
                    node: node.clone(),
                    json: OnceLock::new(),
                };
                inner.nodes.insert(name.to_string(), entry);
                (inner.last_id, true)
            }
        };
        if !inner.subscribers.is_empty() {
            let entry = &inner.nodes[name];
            inner.subscribers.retain(|s| {
                if !(added || s.wants_nodes) {
                    return true;
                }
                s.tx.send(upsert(name, entry, s.wants_nodes)).is_ok()
            });
        }
        if added && let Some(uids) = inner.pods_on.get(name) {
            // Pods placed before their node arrived (or on a node of this
            // name deleted since) are named by the node's new id.
            let mut changed = Vec::new();
            for uid in uids {
                if let Some(e) = inner.pods.get_mut(uid)
                    && e.node_id != id
                {
                    e.node_id = id;
                    changed.push((e.id, uid.clone()));
                }
            }
            if !changed.is_empty() && inner.wants_pods() {
                changed.sort_unstable();
                let ms: Vec<_> = changed
                    .iter()
                    .map(|(_, uid)| pod_upsert(&inner.pods[uid]))
                    .collect();
                for m in &ms {
                    inner.send_pods(m);
                }
            }
        }
        id
    }

    /// A node was removed; the id it had (0 if unknown).
    pub fn delete(&self, name: &str) -> u32 {
        let mut inner = self.inner.lock();
        let Some(entry) = inner.nodes.remove(name) else {
            return 0;
        };
        let m = message(Message::NodeDelete(NodeDelete {
            name: name.to_string(),
            id: entry.id,
        }));
        inner.subscribers.retain(|s| s.tx.send(m.clone()).is_ok());
        entry.id
    }

    /// Queues every current node on `tx` (with its object if
    /// `wants_nodes`), then, if `wants_pods`, every pod placed on them,
    /// then `NodesSynced` (at once if the cluster's initial listing has
    /// been applied, else when [`NodeFeed::mark_synced`] is called), and
    /// every later change, until `tx` closes.
    pub fn subscribe(
        &self,
        tx: UnboundedSender<SchedulerMessage>,
        wants_nodes: bool,
        wants_pods: bool,
    ) {
        let mut inner = self.inner.lock();
        for (name, entry) in &inner.nodes {
            if tx.send(upsert(name, entry, wants_nodes)).is_err() {
                return;
            }
        }
        if wants_pods {
            let mut pods: Vec<&PodEntry> = inner.pods.values().collect();
            pods.sort_unstable_by_key(|e| e.id);
            for e in pods {
                if tx.send(pod_upsert(e)).is_err() {
                    return;
                }
            }
        }
        if inner.synced && tx.send(nodes_synced(inner.nodes.len())).is_err() {
            return;
        }
        inner.subscribers.push(Subscriber {
            tx,
            wants_nodes,
            wants_pods,
        });
    }

    /// How many pods the feed holds.
    pub fn pod_count(&self) -> usize {
        self.inner.lock().pods.len()
    }

    /// The cluster's initial listing has been applied: streams that
    /// subscribed before get `NodesSynced` now, later ones on subscribing.
    /// Called once, before the scheduler starts scheduling.
    pub fn mark_synced(&self) {
        let mut inner = self.inner.lock();
        if inner.synced {
            return;
        }
        inner.synced = true;
        let m = nodes_synced(inner.nodes.len());
        inner.subscribers.retain(|s| s.tx.send(m.clone()).is_ok());
    }

    /// Whether the cluster's initial listing has been applied.
    pub fn is_synced(&self) -> bool {
        self.inner.lock().synced
    }

    /// The id of the node named `name`, if the feed has it.
    pub fn id_of(&self, name: &str) -> Option<u32> {
        self.inner.lock().nodes.get(name).map(|e| e.id)
    }

    /// The feed ids of `pods` and of their nodes (0 for one the feed does
    /// not hold), in order, under one lock.
    pub fn pod_and_node_ids(&self, pods: &[PodRef]) -> Vec<(u32, u32)> {
        let inner = self.inner.lock();
        pods.iter()
            .map(|p| {
                let id = inner.pods.get(&p.uid).map_or(0, |e| e.id);
                let node = p
                    .node_name
                    .as_deref()
                    .and_then(|n| inner.nodes.get(n))
                    .map_or(0, |e| e.id);
                (id, node)
            })
            .collect()
    }

    /// How many nodes the feed holds.
    pub fn len(&self) -> usize {
        self.inner.lock().nodes.len()
    }

    /// Whether the feed holds no node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    fn kinds(rx: &mut tokio::sync::mpsc::UnboundedReceiver<SchedulerMessage>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            out.push(match m.message {
                Some(Message::NodeUpsert(u)) if u.node.is_empty() => {
                    format!("upsert {}#{}", u.name, u.id)
                }
                Some(Message::NodeUpsert(u)) => format!("upsert {}#{} +object", u.name, u.id),
                Some(Message::NodeDelete(d)) => format!("delete {}#{}", d.name, d.id),
                Some(Message::NodesSynced(s)) => format!("synced {}", s.nodes),
                Some(Message::PodUpsert(p)) => format!(
                    "pod #{} {} on {}#{}{}",
                    p.id,
                    p.name,
                    p.node,
                    p.node_id,
                    if p.assumed { " assumed" } else { "" }
                ),
                Some(Message::PodDelete(p)) => format!("pod-delete #{} from #{}", p.id, p.node_id),
                other => format!("{other:?}"),
            });
        }
        out
    }

    #[test]
    fn a_subscriber_gets_the_nodes_then_the_changes() {
        let feed = NodeFeed::new();
        let n1 = Arc::new(make_node("n1").object());
        let n2 = Arc::new(make_node("n2").object());
        assert_eq!(feed.apply(&WatchEvent::Added(n1.clone())), 1);
        feed.mark_synced();
        let (tx, mut first) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, true, false);
        let (tx, mut ids_only) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, false, false);
        assert_eq!(kinds(&mut first), ["upsert n1#1 +object", "synced 1"]);
        assert_eq!(kinds(&mut ids_only), ["upsert n1#1", "synced 1"]);
        assert_eq!(feed.apply(&WatchEvent::Added(n2.clone())), 2);
        assert_eq!(
            feed.apply(&WatchEvent::Modified {
                old: n1.clone(),
                new: n1.clone(),
            }),
            1,
            "a change keeps the id"
        );
        assert_eq!(feed.apply(&WatchEvent::Deleted(n2.clone())), 2);
        assert_eq!(
            kinds(&mut first),
            ["upsert n2#2 +object", "upsert n1#1 +object", "delete n2#2"]
        );
        assert_eq!(
            kinds(&mut ids_only),
            ["upsert n2#2", "delete n2#2"],
            "a stream without node objects hears of additions and deletions only"
        );
        assert_eq!(feed.len(), 1);
        // A node created again gets a new id: ids are never reused.
        assert_eq!(feed.apply(&WatchEvent::Added(n2.clone())), 3);
        assert_eq!(feed.id_of("n2"), Some(3));

        // The JSON is the Kubernetes object.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, true, false);
        let Some(Message::NodeUpsert(u)) = rx.try_recv().unwrap().message else {
            panic!("expected an upsert");
        };
        let back: Node = serde_json::from_slice(&u.node).unwrap();
        assert_eq!(back, *n1);

        // Closed subscribers are dropped.
        drop(first);
        drop(ids_only);
        drop(rx);
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n4").object())));
        assert_eq!(feed.inner.lock().subscribers.len(), 0);
    }

    #[test]
    fn a_stream_that_subscribes_before_the_cluster_is_listed_gets_nodes_synced_after_it() {
        let feed = NodeFeed::new();
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n1").object())));
        let (tx, mut early) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, false, false);
        assert_eq!(kinds(&mut early), ["upsert n1#1"]);
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n2").object())));
        assert!(!feed.is_synced());
        feed.mark_synced();
        assert!(feed.is_synced());
        assert_eq!(kinds(&mut early), ["upsert n2#2", "synced 2"]);
        // Only once.
        feed.mark_synced();
        assert!(kinds(&mut early).is_empty());
    }

    fn pod(name: &str, node: &str) -> PodRef {
        Arc::new(make_pod(name).uid(name).node(node).build())
    }

    #[test]
    fn a_stream_that_wants_pods_gets_the_table_then_each_change_once() {
        let feed = NodeFeed::new();
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n1").object())));
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n2").object())));
        // Before any stream wants pods, the feed keeps the table only.
        feed.placed(&pod("a", "n1"), false);
        feed.placed(&pod("b", "n2"), true);
        feed.mark_synced();
        let (tx, mut pods) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, false, true);
        let (tx, mut nodes_only) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, true, false);
        assert_eq!(
            kinds(&mut pods),
            [
                "upsert n1#1",
                "upsert n2#2",
                "pod #1 a on n1#1",
                "pod #2 b on n2#2 assumed",
                "synced 2"
            ]
        );
        kinds(&mut nodes_only);

        // Assumed to bound, then moved, then gone: the same id throughout.
        feed.placed(&pod("b", "n2"), false);
        feed.placed(&pod("b", "n1"), false);
        feed.removed(&pod("b", "n1"));
        // Removing what the feed does not hold sends nothing.
        feed.removed(&pod("b", "n1"));
        assert_eq!(
            kinds(&mut pods),
            [
                "pod #2 b on n2#2",
                "pod #2 b on n1#1",
                "pod-delete #2 from #1"
            ]
        );

        // A pod whose node the feed does not know yet is named by node id 0,
        // then again with the id once the node arrives (and only then).
        feed.placed(&pod("c", "n3"), false);
        feed.apply(&WatchEvent::Modified {
            old: Arc::new(make_node("n1").object()),
            new: Arc::new(make_node("n1").object()),
        });
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n3").object())));
        assert_eq!(
            kinds(&mut pods),
            ["pod #3 c on n3#0", "upsert n3#3", "pod #3 c on n3#3"]
        );
        // A node created again under the same name renames its pods.
        feed.apply(&WatchEvent::Deleted(Arc::new(make_node("n3").object())));
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n3").object())));
        feed.removed(&pod("c", "n3"));
        assert_eq!(
            kinds(&mut pods),
            [
                "delete n3#3",
                "upsert n3#4",
                "pod #3 c on n3#4",
                "pod-delete #3 from #4"
            ]
        );
        assert_eq!(feed.pod_count(), 1);
        assert!(!feed.inner.lock().pods_on.contains_key("n3"));

        // A stream that did not ask for pods never gets one.
        assert_eq!(
            kinds(&mut nodes_only),
            [
                "upsert n1#1 +object",
                "upsert n3#3 +object",
                "delete n3#3",
                "upsert n3#4 +object"
            ]
        );
    }
}
