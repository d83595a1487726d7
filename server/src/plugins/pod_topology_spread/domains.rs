//! Matching pods per domain, kept from cycle to cycle.
//!
//! Both PreFilter and PreScore need, per constraint, the pods matching its
//! selector in each domain of the nodes that count. Those counts are an
//! [`Aggregate`] in the plugin's [`NodeMemo`]: every pod of a Deployment
//! asks the same question, and between two of its cycles only the nodes
//! that changed are counted again. The node inclusion policies depend on
//! the incoming pod; when they exclude nodes, the counts are summed from
//! the memo's per-node answers instead of taken whole.

use std::sync::Arc;

use super::{PodTopologySpread, count_matching, node_included};
use crate::cache::NodeInfo;
use crate::model::{InclusionPolicy, LabelSelector, PodInfo, SpreadConstraint};
use crate::plugins::helper::Aggregate;

/// The question: the pods of `namespace` matching `selector`, per value of
/// `topology_key`, on the nodes that have every label in `required`. With
/// `missing_as_empty`, a node without `topology_key` counts in the domain
/// `""` (the system default constraints); without, it does not count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SpreadKey {
    pub(super) namespace: Arc<str>,
    pub(super) selector: LabelSelector,
    pub(super) topology_key: Arc<str>,
    pub(super) required: Vec<Arc<str>>,
    pub(super) missing_as_empty: bool,
}

impl SpreadKey {
    /// One node's answer.
    fn node_domain(&self, info: &NodeInfo) -> NodeDomain {
        let Some(node) = info.node() else {
            return NodeDomain::default();
        };
        if !self.required.iter().all(|k| node.labels.contains_key(k)) {
            return NodeDomain::default();
        }
        let value = match node.labels.get_shared(&self.topology_key) {
            Some(v) => v.clone(),
            None if self.missing_as_empty => Arc::from(""),
            None => return NodeDomain::default(),
        };
        NodeDomain {
            value: Some(value),
            id: 0,
            pods: count_matching(info.pods(), &self.selector, &self.namespace),
        }
    }
}

/// Domain values by id, shared by the memo and the states built from it
/// (copied only when a new domain appears while a state holds them).
#[derive(Debug, Clone, Default)]
pub(super) struct DomainIds {
    ids: crate::plugins::helper::FastMap<Arc<str>, u32>,
    names: Vec<Arc<str>>,
}

impl DomainIds {
    fn id(&self, value: &str) -> Option<usize> {
        self.ids.get(value).map(|&id| id as usize)
    }

    fn intern(ids: &mut Arc<Self>, value: &str) -> usize {
        if let Some(id) = ids.id(value) {
            return id;
        }
        let ids = Arc::make_mut(ids);
        let id = ids.names.len();
        let name: Arc<str> = Arc::from(value);
        ids.names.push(name.clone());
        ids.ids.insert(name, id as u32);
        id
    }
}

/// A node's answer: its domain (`None`: the node does not count) and its
/// matching pods.
#[derive(Debug, Default)]
pub(super) struct NodeDomain {
    value: Option<Arc<str>>,
    id: u32,
    pods: i64,
}

/// Matching pods and counted nodes per domain, over every node.
#[derive(Debug, Default)]
pub(super) struct DomainTotals {
    ids: Arc<DomainIds>,
    pods: Vec<i64>,
    nodes: Vec<u32>,
}

impl Aggregate for DomainTotals {
    type Node = NodeDomain;

    fn add(&mut self, node: &mut NodeDomain) {
        let Some(value) = &node.value else {
            return;
        };
        let id = DomainIds::intern(&mut self.ids, value);
        if id >= self.pods.len() {
            self.pods.resize(id + 1, 0);
            self.nodes.resize(id + 1, 0);
        }
        self.pods[id] += node.pods;
        self.nodes[id] += 1;
        node.id = id as u32;
    }

    fn sub(&mut self, node: &NodeDomain) {
        if node.value.is_some() {
            let id = node.id as usize;
            self.pods[id] -= node.pods;
            self.nodes[id] -= 1;
        }
    }
}

/// Matching pods per domain of the nodes that count (every such domain,
/// even with no pod), for one constraint of one pod.
#[derive(Debug, Clone, Default)]
pub(super) struct DomainCounts {
    ids: Arc<DomainIds>,
    pods: Vec<i64>,
    present: Vec<bool>,
    len: usize,
}

impl DomainCounts {
    fn new(ids: Arc<DomainIds>, pods: Vec<i64>, nodes: &[u32]) -> Self {
        let present: Vec<bool> = nodes.iter().map(|&n| n > 0).collect();
        let len = present.iter().filter(|&&p| p).count();
        Self {
            ids,
            pods,
            present,
            len,
        }
    }

    /// The matching pods of domain `value`; `None` if no counted node is in
    /// it.
    pub(super) fn get(&self, value: &str) -> Option<i64> {
        self.ids
            .id(value)
            .filter(|&id| self.present.get(id) == Some(&true))
            .map(|id| self.pods[id])
    }

    /// The number of domains.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every domain and its matching pods.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &i64)> {
        self.present
            .iter()
            .enumerate()
            .filter(|(_, p)| **p)
            .map(|(id, _)| (&self.ids.names[id], &self.pods[id]))
    }

    /// Adds `delta` pods to domain `value` (counting it from now on);
    /// returns its new count.
    pub(super) fn add(&mut self, value: &str, delta: i64) -> i64 {
        let id = DomainIds::intern(&mut self.ids, value);
        if id >= self.pods.len() {
            self.pods.resize(id + 1, 0);
            self.present.resize(id + 1, false);
        }
        if !self.present[id] {
            self.present[id] = true;
            self.len += 1;
        }
        self.pods[id] += delta;
        self.pods[id]
    }
}

/// Whether the constraint's inclusion policies can leave nodes out for
/// `pod` (otherwise every node with the keys counts).
fn excludes_nodes(c: &SpreadConstraint, pod: &PodInfo) -> bool {
    let p = &pod.placement;
    (c.node_affinity_policy == InclusionPolicy::Honor
        && (!p.node_selector.is_empty() || p.node_affinity.required.is_some()))
        || c.node_taints_policy == InclusionPolicy::Honor
}

impl PodTopologySpread {
    /// The answer to `key` over `nodes` for constraint `c` of `pod`.
    pub(super) fn domain_counts(
        &self,
        key: SpreadKey,
        c: &SpreadConstraint,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> DomainCounts {
        self.counts.with(
            key,
            nodes,
            self.handle.parallelizer(),
            SpreadKey::node_domain,
            |entry| {
                let totals = entry.aggregate();
                if !excludes_nodes(c, pod) {
                    return DomainCounts::new(
                        totals.ids.clone(),
                        totals.pods.clone(),
                        &totals.nodes,
                    );
                }
                let mut pods = vec![0; totals.pods.len()];
                let mut counted = vec![0; totals.pods.len()];
                for (info, answer) in nodes.iter().zip(entry.nodes()) {
                    if answer.value.is_some()
                        && info.node().is_some_and(|n| node_included(c, pod, n))
                    {
                        pods[answer.id as usize] += answer.pods;
                        counted[answer.id as usize] += 1;
                    }
                }
                DomainCounts::new(totals.ids.clone(), pods, &counted)
            },
        )
    }
}
