//! [`Pods`]: a session's pod table, for extenders that ask for the pod feed
//! ([`ExtenderBuilder::wants_pods`](crate::ExtenderBuilder::wants_pods)).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use berth_proto::extender::v1 as pb;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;

/// A pod placed on a node, as berthd's cache counts it: bound, or assumed
/// (a scheduling cycle chose the node; the binding is not confirmed yet).
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedPod {
    /// The pod's id in the feed (the same for every change of the pod).
    pub id: u32,
    /// The name of its node.
    pub node: String,
    /// The id of its node in the session's node table (0 while berthd does
    /// not know the node; the pod is sent again once it does).
    pub node_id: u32,
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// Whether it is assumed rather than bound.
    pub assumed: bool,
    /// The v1 Pod (parsed once).
    pub object: Arc<Pod>,
}

impl PlacedPod {
    /// The pod of a `PodUpsert`, or why its JSON is not a v1 Pod.
    pub(crate) fn from_proto(u: pb::PodUpsert) -> Result<Self, serde_json::Error> {
        let object = serde_json::from_slice::<Pod>(&u.pod)?;
        Ok(Self {
            id: u.id,
            node: u.node,
            node_id: u.node_id,
            namespace: u.namespace,
            name: u.name,
            uid: u.uid,
            assumed: u.assumed,
            object: Arc::new(object),
        })
    }
}

/// The pods placed on the nodes, as berthd streamed them on this session:
/// empty unless the extender asked for the pod feed. berthd sends every
/// placed pod before `NodesSynced`, then each change once, so the table is
/// complete once [`Nodes::is_synced`](crate::Nodes::is_synced) is true.
///
/// Cheap to clone (a shared handle).
///
/// In a preemption what-if the table handlers see is a view without the
/// pods berthd asks about as gone ([`Pods::without`]): every method below
/// leaves them out.
#[derive(Debug, Clone, Default)]
pub struct Pods {
    inner: Arc<RwLock<PodsInner>>,
    /// Pods (by feed id) this view leaves out.
    gone: Option<Arc<HashSet<u32>>>,
}

#[derive(Debug, Default)]
struct PodsInner {
    by_id: HashMap<u32, Arc<PlacedPod>>,
    /// Pod ids by node name.
    on_node: HashMap<String, BTreeSet<u32>>,
}

impl PodsInner {
    fn unindex(&mut self, node: &str, id: u32) {
        if let Some(ids) = self.on_node.get_mut(node) {
            ids.remove(&id);
            if ids.is_empty() {
                self.on_node.remove(node);
            }
        }
    }
}

impl Pods {
    /// A table holding `pods`: for unit tests of handlers.
    pub fn from_pods(pods: impl IntoIterator<Item = PlacedPod>) -> Self {
        let this = Self::default();
        for p in pods {
            this.upsert(p);
        }
        this
    }

    /// Whether this view leaves the pod with feed id `id` out.
    fn is_gone(&self, id: u32) -> bool {
        self.gone.as_ref().is_some_and(|g| g.contains(&id))
    }

    /// This table without the pods with feed ids `ids` (what a preemption
    /// what-if asks about as gone); the view shares the table.
    pub fn without(&self, ids: impl IntoIterator<Item = u32>) -> Self {
        let mut gone: HashSet<u32> = self.gone.as_deref().cloned().unwrap_or_default();
        gone.extend(ids.into_iter().filter(|id| *id != 0));
        Self {
            inner: self.inner.clone(),
            gone: Some(Arc::new(gone)),
        }
    }

    /// The pods on the node named `node` (bound and assumed), by id.
    pub fn on_node(&self, node: &str) -> Vec<Arc<PlacedPod>> {
        let inner = self.inner.read();
        inner
            .on_node
            .get(node)
            .into_iter()
            .flatten()
            .filter(|id| !self.is_gone(**id))
            .filter_map(|id| inner.by_id.get(id).cloned())
            .collect()
    }

    /// How many pods are on the node named `node`.
    pub fn count_on(&self, node: &str) -> usize {
        let inner = self.inner.read();
        let Some(ids) = inner.on_node.get(node) else {
            return 0;
        };
        match &self.gone {
            None => ids.len(),
            Some(g) => ids.iter().filter(|id| !g.contains(id)).count(),
        }
    }

    /// The pod with feed id `id`.
    pub fn get(&self, id: u32) -> Option<Arc<PlacedPod>> {
        if self.is_gone(id) {
            return None;
        }
        self.inner.read().by_id.get(&id).cloned()
    }

    /// Every pod, by id.
    pub fn all(&self) -> Vec<Arc<PlacedPod>> {
        let inner = self.inner.read();
        let mut out: Vec<_> = inner
            .by_id
            .values()
            .filter(|p| !self.is_gone(p.id))
            .cloned()
            .collect();
        out.sort_unstable_by_key(|p| p.id);
        out
    }

    /// How many pods the table has.
    pub fn len(&self) -> usize {
        let inner = self.inner.read();
        match &self.gone {
            None => inner.by_id.len(),
            Some(g) => inner.by_id.keys().filter(|id| !g.contains(id)).count(),
        }
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A pod placed or changed; returns the pod it replaced.
    pub(crate) fn upsert(&self, p: PlacedPod) -> Option<Arc<PlacedPod>> {
        let mut inner = self.inner.write();
        let old = inner.by_id.insert(p.id, Arc::new(p.clone()));
        if let Some(o) = &old {
            inner.unindex(&o.node, o.id);
        }
        inner.on_node.entry(p.node).or_default().insert(p.id);
        old
    }

    /// A pod left its node; returns it, if the table had it.
    pub(crate) fn remove(&self, id: u32) -> Option<Arc<PlacedPod>> {
        let mut inner = self.inner.write();
        let old = inner.by_id.remove(&id)?;
        inner.unindex(&old.node, id);
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(id: u32, name: &str, node: &str) -> PlacedPod {
        PlacedPod {
            id,
            node: node.into(),
            node_id: 1,
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            assumed: false,
            object: Arc::new(Pod::default()),
        }
    }

    #[test]
    fn the_table_follows_placements_moves_and_removals() {
        let pods = Pods::from_pods([placed(1, "a", "n1"), placed(2, "b", "n1")]);
        assert_eq!(pods.count_on("n1"), 2);
        // A pod that moves leaves its old node's list.
        let old = pods.upsert(placed(2, "b", "n2")).unwrap();
        assert_eq!(old.node, "n1");
        assert_eq!(pods.count_on("n1"), 1);
        assert_eq!(pods.on_node("n2")[0].name, "b");
        assert_eq!(pods.remove(1).unwrap().name, "a");
        assert!(pods.remove(1).is_none());
        assert_eq!(pods.count_on("n1"), 0);
        assert!(!pods.inner.read().on_node.contains_key("n1"));
        assert_eq!(pods.len(), 1);
        assert_eq!(pods.all()[0].id, 2);
    }

    #[test]
    fn a_pod_upsert_is_parsed_once_into_a_v1_pod() {
        let u = pb::PodUpsert {
            id: 7,
            node_id: 3,
            node: "n3".into(),
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            assumed: true,
            pod: br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}"#
                .to_vec(),
        };
        let p = PlacedPod::from_proto(u.clone()).unwrap();
        assert_eq!(p.object.metadata.name.as_deref(), Some("p"));
        assert!(p.assumed);
        assert_eq!((p.id, p.node_id, p.node.as_str()), (7, 3, "n3"));
        let bad = pb::PodUpsert {
            pod: b"not json".to_vec(),
            ..u
        };
        assert!(PlacedPod::from_proto(bad).is_err());
    }
}
