//! [`NodeFeed`]: the nodes, as Kubernetes JSON, for extenders that asked
//! for them.
//!
//! The scheduler's event handlers apply every node change here *before*
//! the cache sees it, and each change is queued on every subscribed stream
//! at once; a stream's requests are queued on the same channel later. So
//! an extender always has a node before any request naming it.

use std::collections::BTreeMap;
use std::sync::Arc;

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

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<String, Arc<[u8]>>,
    subscribers: Vec<UnboundedSender<SchedulerMessage>>,
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

fn upsert(name: &str, json: &[u8]) -> SchedulerMessage {
    message(Message::NodeUpsert(NodeUpsert {
        name: name.to_string(),
        node: json.to_vec(),
    }))
}

fn nodes_synced(n: usize) -> SchedulerMessage {
    message(Message::NodesSynced(NodesSynced { nodes: n as u32 }))
}

impl Inner {
    fn publish(&mut self, m: impl Fn() -> SchedulerMessage) {
        self.subscribers.retain(|tx| tx.send(m()).is_ok());
    }
}

impl NodeFeed {
    /// A feed with no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a node change.
    pub fn apply(&self, e: &WatchEvent<Arc<Node>>) {
        match e {
            WatchEvent::Added(n) | WatchEvent::Modified { new: n, .. } => self.upsert(n),
            WatchEvent::Deleted(n) => {
                if let Some(name) = n.metadata.name.as_deref() {
                    self.delete(name);
                }
            }
        }
    }

    /// A node was added or changed.
    pub fn upsert(&self, node: &Node) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let json: Arc<[u8]> = match serde_json::to_vec(node) {
            Ok(v) => v.into(),
            Err(e) => {
                tracing::error!(node = name, error = %e, "cannot encode node for extenders");
                return;
            }
        };
        let mut inner = self.inner.lock();
        if !inner.subscribers.is_empty() {
            inner.publish(|| upsert(name, &json));
        }
        inner.nodes.insert(name.to_string(), json);
    }

    /// A node was removed.
    pub fn delete(&self, name: &str) {
        let mut inner = self.inner.lock();
        if inner.nodes.remove(name).is_some() && !inner.subscribers.is_empty() {
            inner.publish(|| {
                message(Message::NodeDelete(NodeDelete {
                    name: name.to_string(),
                }))
            });
        }
    }

    /// Queues every current node on `tx`, then `NodesSynced` (at once if
    /// the cluster's initial listing has been applied, else when
    /// [`NodeFeed::mark_synced`] is called), and every later change, until
    /// `tx` closes.
    pub fn subscribe(&self, tx: UnboundedSender<SchedulerMessage>) {
        let mut inner = self.inner.lock();
        for (name, json) in &inner.nodes {
            if tx.send(upsert(name, json)).is_err() {
                return;
            }
        }
        if inner.synced && tx.send(nodes_synced(inner.nodes.len())).is_err() {
            return;
        }
        inner.subscribers.push(tx);
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
        let n = inner.nodes.len();
        inner.publish(|| nodes_synced(n));
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
                Some(Message::NodeUpsert(u)) => format!("upsert {}", u.name),
                Some(Message::NodeDelete(d)) => format!("delete {}", d.name),
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
        feed.apply(&WatchEvent::Added(n1.clone()));
        feed.mark_synced();
        let (tx, mut first) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx);
        assert_eq!(kinds(&mut first), ["upsert n1", "synced 1"]);
        feed.apply(&WatchEvent::Added(n2.clone()));
        feed.apply(&WatchEvent::Modified {
            old: n1.clone(),
            new: n1.clone(),
        });
        feed.apply(&WatchEvent::Deleted(n2));
        assert_eq!(kinds(&mut first), ["upsert n2", "upsert n1", "delete n2"]);
        assert_eq!(feed.len(), 1);

        // The JSON is the Kubernetes object.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx);
        let Some(Message::NodeUpsert(u)) = rx.try_recv().unwrap().message else {
            panic!("expected an upsert");
        };
        let back: Node = serde_json::from_slice(&u.node).unwrap();
        assert_eq!(back, *n1);

        // Closed subscribers are dropped.
        drop(first);
        drop(rx);
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n3").object())));
        assert_eq!(feed.inner.lock().subscribers.len(), 0);
    }

    #[test]
    fn a_stream_that_subscribes_before_the_cluster_is_listed_gets_nodes_synced_after_it() {
        let feed = NodeFeed::new();
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n1").object())));
        let (tx, mut early) = tokio::sync::mpsc::unbounded_channel();
        feed.subscribe(tx);
        assert_eq!(kinds(&mut early), ["upsert n1"]);
        feed.apply(&WatchEvent::Added(Arc::new(make_node("n2").object())));
        feed.mark_synced();
        assert_eq!(kinds(&mut early), ["upsert n2", "synced 2"]);
        // Only once.
        feed.mark_synced();
        assert!(kinds(&mut early).is_empty());
    }
}
