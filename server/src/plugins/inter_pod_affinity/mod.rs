//! InterPodAffinity: required pod affinity and anti-affinity (Filter, with
//! the existing pods' required anti-affinity toward the incoming pod) and
//! preferred terms (Score), counted per topology domain (a node label's
//! key and value).
//!
//! * [`filtering`]: PreFilter counts, per domain, the existing pods whose
//!   required anti-affinity matches the incoming pod and the existing pods
//!   matching the incoming pod's required (anti-)affinity terms; AddPod and
//!   RemovePod keep the counts right; Filter reads them.
//! * [`scoring`]: PreScore sums, per domain, the weights of the preferred
//!   terms (both directions) and of the existing pods' required affinity
//!   terms the incoming pod matches; Score adds up a node's domains;
//!   NormalizeScore rescales to 0..=100.

mod args;
mod filtering;
mod scoring;
mod tallies;
#[cfg(test)]
mod tests;

use crate::plugins::helper::FastMap;
use std::sync::Arc;

pub use args::*;
pub use filtering::{
    REASON_AFFINITY_RULES_NOT_MATCH, REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};

use crate::cache::ObjectStore;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, Handle, Plugin,
    QueueingHint,
};
use crate::model::{AffinityTerm, LabelSelector, Labels, NodeSpec, PodInfo};
use crate::plugins::helper::NodeMemo;
use crate::plugins::names::INTER_POD_AFFINITY;

/// The InterPodAffinity plugin.
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
    handle: Handle,
    /// Per domain, existing pods whose required anti-affinity rejects a
    /// pod of a given namespace and labels (PreFilter).
    existing_anti: NodeMemo<tallies::ExistingKey, tallies::Tallies>,
    /// Per domain, existing pods matching an incoming pod's required
    /// terms (PreFilter).
    incoming: NodeMemo<tallies::IncomingKey, tallies::Tallies>,
    /// Per domain, the weights between an incoming pod and the existing
    /// pods (PreScore).
    scores: NodeMemo<tallies::ScoreKey, tallies::Tallies>,
}

impl std::fmt::Debug for InterPodAffinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterPodAffinity")
            .field("args", &self.args)
            .finish()
    }
}

impl InterPodAffinity {
    /// Builds the plugin from its (validated) args.
    pub fn new(args: InterPodAffinityArgs, handle: &Handle) -> Self {
        Self {
            args,
            handle: handle.clone(),
            existing_anti: NodeMemo::default(),
            incoming: NodeMemo::default(),
            scores: NodeMemo::default(),
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        INTER_POD_AFFINITY
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // A bound pod appearing may satisfy the pod's affinity; one
            // going away, or relabelled, may stop violating its
            // anti-affinity (or start satisfying its affinity).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::AssignedPod,
                    ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
                ),
                pod_change_hint,
            ),
            // A node appearing, or its labels changing, may open a domain.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
                ),
                node_change_hint,
            ),
        ])
    }

    extension_points!(pre_filter, filter, pre_score, score);
}

/// Counts (or weights) per topology domain: topology key, then the key's
/// value on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopologyCounts(FastMap<Arc<str>, FastMap<Arc<str>, i64>>);

impl TopologyCounts {
    /// The count of the domain `key=value`.
    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|values| values.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// Whether no domain has an entry.
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `delta` to `key=value`, keeping the entry even at zero.
    fn accumulate(&mut self, key: &Arc<str>, value: &str, delta: i64) {
        let values = match self.0.get_mut(&**key) {
            Some(v) => v,
            None => self.0.entry(key.clone()).or_default(),
        };
        match values.get_mut(value) {
            Some(n) => *n += delta,
            None => {
                values.insert(Arc::from(value), delta);
            }
        }
    }

    /// Adds `delta` to `key=value`, dropping the entry when it comes to
    /// zero (counts may go down as pods are removed).
    fn update(&mut self, key: &Arc<str>, value: &str, delta: i64) {
        self.accumulate(key, value, delta);
        if let Some(values) = self.0.get_mut(&**key)
            && values.get(value) == Some(&0)
        {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(&**key);
            }
        }
    }

    /// Every `(key, values)` pair.
    fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &FastMap<Arc<str>, i64>)> {
        self.0.iter()
    }
}

/// The incoming pod's term with the namespaces its namespace selector picks
/// merged into its namespace list. The selector is then either empty
/// (every namespace) or matches nothing, so matching other pods against it
/// needs no namespace labels.
fn merge_namespaces(term: &AffinityTerm, objects: &ObjectStore) -> AffinityTerm {
    let mut merged = term.clone();
    if merged.namespace_selector.is_everything() {
        return merged;
    }
    if !merged.namespace_selector.is_nothing() {
        for ns in objects.namespaces_matching(&merged.namespace_selector) {
            if !merged.namespaces.iter().any(|n| **n == *ns) {
                merged.namespaces.push(Arc::from(ns.as_str()));
            }
        }
    }
    merged.namespace_selector = LabelSelector::nothing();
    merged
}

/// Whether `pod` matches the (incoming pod's) term, without namespace
/// labels: the incoming pod's selectors were merged into namespace lists.
fn term_matches(term: &AffinityTerm, pod: &PodInfo) -> bool {
    term.matches(&pod.namespace, &pod.labels, &Labels::default())
}

/// Whether `pod` matches every term; `false` when there are none.
fn matches_all_terms(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| term_matches(t, pod))
}

/// An assigned pod was added, relabelled or deleted: does that help a pod
/// this plugin rejected?
fn pod_change_hint(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let original = old.and_then(EventObject::as_pod);
    let modified = new.and_then(EventObject::as_pod);
    if modified.is_some_and(|p| p.node_name.is_none())
        || original.is_some_and(|p| p.node_name.is_none())
    {
        // An unscheduled pod counts nowhere.
        return Ok(QueueingHint::Skip);
    }
    let terms = &pod.placement.pod_affinity.required;
    let anti_terms = &pod.placement.pod_anti_affinity.required;
    let queue = |yes: bool| {
        if yes {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        }
    };
    match (original, modified) {
        // Relabelled: it now satisfies the affinity (one pod must match
        // every term), or it no longer matches the anti-affinity.
        (Some(o), Some(m)) => Ok(queue(
            (!matches_all_terms(terms, o) && matches_all_terms(terms, m))
                || (matches_all_terms(anti_terms, o) && !matches_all_terms(anti_terms, m)),
        )),
        // Added: it may satisfy the affinity.
        (None, Some(m)) => Ok(queue(matches_all_terms(terms, m))),
        // Deleted: it may have been what the anti-affinity rejected.
        (Some(o), None) => Ok(queue(matches_all_terms(anti_terms, o))),
        (None, None) => Err("pod event without a pod".into()),
    }
}

/// A node was added or relabelled: can a topology domain the pod's terms
/// use have opened?
fn node_change_hint(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let Some(modified) = new.and_then(EventObject::as_node) else {
        return Err("node event without the new node".into());
    };
    let original: Option<&NodeSpec> = old.and_then(EventObject::as_node);
    for term in &pod.placement.pod_affinity.required {
        let now = modified.labels.get(&term.topology_key);
        match original {
            // A new node in some domain of the key.
            None if now.is_some() => return Ok(QueueingHint::Queue),
            None => {}
            Some(o) => {
                let before = o.labels.get(&term.topology_key);
                // The node joined a domain, or moved to another one.
                if now.is_some() && before != now {
                    return Ok(QueueingHint::Queue);
                }
            }
        }
    }
    for term in &pod.placement.pod_anti_affinity.required {
        let Some(o) = original else {
            // Any new node may do: one without the key always satisfies
            // anti-affinity, and one with it may be in a domain free of
            // the pods the pod avoids.
            return Ok(QueueingHint::Queue);
        };
        let before = o.labels.get(&term.topology_key);
        let now = modified.labels.get(&term.topology_key);
        // The node left the key's domains (a node without the key always
        // satisfies anti-affinity), or moved to another domain. Joining
        // one cannot help.
        if before.is_some() && before != now {
            return Ok(QueueingHint::Queue);
        }
    }
    Ok(QueueingHint::Skip)
}
