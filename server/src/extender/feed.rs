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

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use berth_proto::extender::v1::{
    NodeDelete, NodeUpsert, NodesSynced, SchedulerMessage, scheduler_message::Message,
};
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedSender;

use crate::cluster::WatchEvent;

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
    /// `wants_nodes`), then `NodesSynced` (at once if the cluster's initial
    /// listing has been applied, else when [`NodeFeed::mark_synced`] is
    /// called), and every later change, until `tx` closes.
    pub fn subscribe(&self, tx: UnboundedSender<SchedulerMessage>, wants_nodes: bool) {
        let mut inner = self.inner.lock();
        for (name, entry) in &inner.nodes {
            if tx.send(upsert(name, entry, wants_nodes)).is_err() {
                return;
            }
        }
        if inner.synced && tx.send(nodes_synced(inner.nodes.len())).is_err() {
            return;
        }
        inner.subscribers.push(Subscriber { tx, wants_nodes });
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
    use crate::testing::make_node;

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
        feed.subscribe(tx, true);
        let (tx, mut ids_only) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx, false);
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
        feed.subscribe(tx, true);
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
        feed.subscribe(tx, false);
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
}
