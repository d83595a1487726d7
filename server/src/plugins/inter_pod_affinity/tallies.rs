//! Per-domain tallies kept from cycle to cycle.
//!
//! PreFilter and PreScore sum, per topology domain, what every existing pod
//! contributes toward the incoming pod. A node's share changes only when
//! the node does, so the sums are [`Aggregate`]s in the plugin's
//! [`NodeMemo`]s, keyed by what the contributions depend on: the incoming
//! pod's terms, or its namespace and labels. The pods of a Deployment ask
//! the same questions; between two of their cycles only the nodes that
//! changed are walked again.

use std::sync::Arc;

use smallvec::SmallVec;

use super::TopologyCounts;
use crate::model::{AffinityTerm, Labels};
use crate::plugins::helper::Aggregate;

/// One node's contribution to a domain: which of the two tallies, the
/// topology key, the node's value, and the amount.
#[derive(Debug)]
pub(super) struct Hit {
    pub(super) tally: usize,
    pub(super) key: Arc<str>,
    pub(super) value: Arc<str>,
    pub(super) amount: i64,
}

/// A node's contributions, and how many raw hits (a pod meeting a term)
/// they came from.
#[derive(Debug, Default)]
pub(super) struct NodeHits {
    pub(super) hits: SmallVec<[Hit; 2]>,
    pub(super) raw: usize,
}

impl NodeHits {
    /// Adds `amount` for the node's domain of `key` (labels `labels`) to
    /// tally `tally`, as one raw hit; a node without the key contributes
    /// nothing.
    pub(super) fn push(&mut self, tally: usize, key: &Arc<str>, labels: &Labels, amount: i64) {
        let Some(value) = labels.get_shared(key) else {
            return;
        };
        self.raw += 1;
        if let Some(h) = self
            .hits
            .iter_mut()
            .find(|h| h.tally == tally && h.key == *key && h.value == *value)
        {
            h.amount += amount;
        } else {
            self.hits.push(Hit {
                tally,
                key: key.clone(),
                value: value.clone(),
                amount,
            });
        }
    }
}

/// Two per-domain tallies over every node, and the raw hits behind them.
#[derive(Debug, Default)]
pub(super) struct Tallies {
    pub(super) tallies: [TopologyCounts; 2],
    pub(super) raw: usize,
}

impl Aggregate for Tallies {
    type Node = NodeHits;

    fn add(&mut self, node: &mut NodeHits) {
        for h in &node.hits {
            self.tallies[h.tally].update(&h.key, &h.value, h.amount);
        }
        self.raw += node.raw;
    }

    fn sub(&mut self, node: &NodeHits) {
        for h in &node.hits {
            self.tallies[h.tally].update(&h.key, &h.value, -h.amount);
        }
        self.raw -= node.raw;
    }
}

/// PreFilter's question about the incoming pod's required terms (namespace
/// selectors merged): tally 0 counts pods matching every affinity term,
/// tally 1 pods matching each anti-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct IncomingKey {
    pub(super) affinity: Vec<AffinityTerm>,
    pub(super) anti_affinity: Vec<AffinityTerm>,
}

/// PreFilter's question about the existing pods' required anti-affinity:
/// which of their terms a pod of `namespace` (labelled `namespace_labels`)
/// with `labels` meets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ExistingKey {
    pub(super) namespace: Arc<str>,
    pub(super) labels: Labels,
    pub(super) namespace_labels: Labels,
}

/// PreScore's question: the weights between the incoming pod (its
/// namespace, labels and preferred terms) and the existing pods; with
/// `all_pods`, every pod is weighed, else only pods with terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ScoreKey {
    pub(super) incoming: ExistingKey,
    pub(super) affinity: Vec<(i32, AffinityTerm)>,
    pub(super) anti_affinity: Vec<(i32, AffinityTerm)>,
    pub(super) hard_weight: i32,
    pub(super) all_pods: bool,
}

/// Equal tallies come out whatever order the nodes were added and removed
/// in, and zero domains leave.
#[cfg(test)]
mod tests {
    use super::*;

    fn labels(zone: &str) -> Labels {
        Labels::from_map(Some(&std::collections::BTreeMap::from([(
            "zone".to_string(),
            zone.to_string(),
        )])))
    }

    #[test]
    fn tallies_add_and_take_back() {
        let key: Arc<str> = Arc::from("zone");
        let node = |zone: &str, n: i64| {
            let mut h = NodeHits::default();
            h.push(0, &key, &labels(zone), n);
            h.push(0, &key, &labels(zone), 1);
            h.push(1, &Arc::from("missing"), &labels(zone), 1);
            h
        };
        let mut t = Tallies::default();
        let (mut a, mut b) = (node("a", 2), node("b", 4));
        t.add(&mut a);
        t.add(&mut b);
        assert_eq!(t.tallies[0].get("zone", "a"), 3);
        assert_eq!(t.tallies[0].get("zone", "b"), 5);
        assert!(t.tallies[1].is_empty());
        assert_eq!(t.raw, 4);
        t.sub(&a);
        t.sub(&b);
        assert!(t.tallies[0].is_empty());
        assert_eq!(t.raw, 0);
    }
}
