//! Pods nominated to nodes (by preemption), so that other pods do not take
//! the room their preemptions are making.

use std::sync::Arc;

use crate::framework::{NominatedPods, NominatingInfo};
use crate::model::PodRef;

/// Nominations by node, kept as an immutable map replaced on change, so a
/// scheduling cycle reads all of them with one `Arc` clone.
#[derive(Debug, Default)]
pub(crate) struct Nominator {
    by_node: Arc<NominatedPods>,
    pod_to_node: crate::model::UidMap<Arc<str>>,
}

impl Nominator {
    pub fn snapshot(&self) -> Arc<NominatedPods> {
        self.by_node.clone()
    }

    /// Records `pod`'s nomination: the one `info` overrides, or (with `Noop`
    /// or none) the pod's own `status.nominatedNodeName`. Bound pods are not
    /// nominated.
    pub fn add(&mut self, pod: &PodRef, info: Option<&NominatingInfo>) {
        self.delete(&pod.uid);
        let node = match info {
            Some(NominatingInfo::Override(n)) => n.clone(),
            Some(NominatingInfo::Noop) | None => pod.nominated_node_name.clone(),
        };
        let Some(node) = node.filter(|n| !n.is_empty()) else {
            return;
        };
        if pod.node_name.is_some() {
            return;
        }
        self.pod_to_node.insert(pod.uid.clone(), node.clone());
        Arc::make_mut(&mut self.by_node)
            .entry(node)
            .or_default()
            .push(pod.clone());
    }

    /// Updates the nomination after the pod changed: a nomination the
    /// scheduler made stays unless the new pod says otherwise.
    pub fn update(&mut self, old: &PodRef, new: &PodRef) {
        let keep = if old.nominated_node_name.is_none() && new.nominated_node_name.is_none() {
            self.pod_to_node.get(&old.uid).cloned()
        } else {
            None
        };
        match keep {
            Some(node) => self.add(new, Some(&NominatingInfo::Override(Some(node)))),
            None => self.add(new, None),
        }
    }

    pub fn delete(&mut self, uid: &str) {
        let Some(node) = self.pod_to_node.remove(uid) else {
            return;
        };
        let map = Arc::make_mut(&mut self.by_node);
        if let Some(pods) = map.get_mut(&node) {
            pods.retain(|p| &*p.uid != uid);
            if pods.is_empty() {
                map.remove(&node);
            }
        }
    }

    pub fn node_of(&self, uid: &str) -> Option<&Arc<str>> {
        self.pod_to_node.get(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;

    #[test]
    fn nominations() {
        let mut n = Nominator::default();
        let p = Arc::new(make_pod("p").nominated("n1").build());
        n.add(&p, None);
        assert_eq!(n.snapshot().get("n1").map(Vec::len), Some(1));
        // Override moves it.
        n.add(&p, Some(&NominatingInfo::Override(Some("n2".into()))));
        assert!(n.snapshot().get("n1").is_none());
        assert_eq!(n.node_of(&p.uid).map(|s| &**s), Some("n2"));
        // An update without a nomination keeps the scheduler's.
        let q = Arc::new(make_pod("p").label("x", "y").build());
        let plain = Arc::new(make_pod("p").build());
        n.update(&plain, &q);
        assert_eq!(n.node_of(&p.uid).map(|s| &**s), Some("n2"));
        // Clearing.
        n.add(&p, Some(&NominatingInfo::Override(None)));
        assert!(n.snapshot().is_empty());
        // Bound pods are not nominated.
        n.add(
            &Arc::new(make_pod("b").node("n1").nominated("n1").build()),
            None,
        );
        assert!(n.snapshot().is_empty());
    }
}
