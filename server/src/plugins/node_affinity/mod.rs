//! NodeAffinity: a node is feasible if it matches the pod's
//! `spec.nodeSelector` and required node affinity (and the profile's added
//! affinity); feasible nodes score the weights of the preferred terms they
//! match, normalized to 0-100.
//!
//! The pod's selector and affinity are parsed once with the pod
//! ([`crate::model::Placement`]), so PreFilter and PreScore have nothing to
//! compute beyond deciding whether Filter and Score are needed at all and
//! which nodes a `metadata.name` field selector pins the pod to.

mod args;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

pub use args::{NodeAffinityArgs, validate_label_value};

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventObject, EventResource,
    FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, QueueingHint, ScoreExtensions, ScorePlugin, Status,
};
use crate::model::{NodeSelector, NodeSelectorTerm, NodeSpec, Operator, PodInfo};
use crate::plugins::helper::default_normalize_score;
use crate::plugins::names::NODE_AFFINITY;

/// The reason a node not matching the pod's selector or affinity is rejected.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// The reason a node not matching the profile's added affinity is rejected.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// The reason a pod whose required terms pin it to disjoint node names is
/// rejected at PreFilter.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// The field a node selector term's `matchFields` may select on.
const NODE_NAME_FIELD: &str = "metadata.name";

/// The NodeAffinity plugin.
#[derive(Debug, Default)]
pub struct NodeAffinity {
    added_required: Option<Arc<NodeSelector>>,
    added_preferred: Option<Vec<(i32, NodeSelectorTerm)>>,
}

impl NodeAffinity {
    /// Builds the plugin from its (validated) args.
    pub fn new(args: NodeAffinityArgs) -> Result<Self, String> {
        let added = args.parsed("").map_err(|e| e.to_string())?;
        Ok(Self {
            added_required: added.required.map(Arc::new),
            added_preferred: added.preferred,
        })
    }
}

/// Whether `node` matches the added required affinity, if there is one.
fn matches_added(added: Option<&NodeSelector>, node: &NodeSpec) -> bool {
    added.is_none_or(|s| s.matches(&node.labels, &node.name))
}

/// The node names the pod's required terms pin it to: per term, the
/// intersection of its `metadata.name In` field selectors; across terms (ORed)
/// the union. `None` when some term does not pin names (any node may match).
fn pinned_node_names(required: &NodeSelector) -> Option<HashSet<Arc<str>>> {
    let mut union: HashSet<Arc<str>> = HashSet::new();
    for term in &required.terms {
        let mut term_names: Option<HashSet<Arc<str>>> = None;
        for r in term
            .fields
            .iter()
            .filter(|r| &*r.key == NODE_NAME_FIELD && r.op == Operator::In)
        {
            let values: HashSet<Arc<str>> = r.values.iter().cloned().collect();
            term_names = Some(match term_names {
                None => values,
                Some(names) => names.intersection(&values).cloned().collect(),
            });
        }
        union.extend(term_names?);
    }
    Some(union)
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NODE_AFFINITY
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let added = self.added_required.clone();
        Some(vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ),
            move |pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>| {
                let new = new
                    .and_then(EventObject::as_node)
                    .ok_or("expected a node in the event")?;
                if !matches_added(added.as_deref(), new) {
                    return Ok(QueueingHint::Skip);
                }
                let placement = &pod.placement;
                if !placement.node_matches(&new.labels, &new.name) {
                    return Ok(QueueingHint::Skip);
                }
                // Added, or updated from not matching to matching.
                Ok(match old.and_then(EventObject::as_node) {
                    Some(o) if placement.node_matches(&o.labels, &o.name) => QueueingHint::Skip,
                    _ => QueueingHint::Queue,
                })
            },
        )])
    }

    extension_points!(pre_filter, filter, pre_score, score);
}

#[async_trait]
impl PreFilterPlugin for NodeAffinity {
    async fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let placement = &pod.placement;
        let required = placement.node_affinity.required.as_ref();
        if required.is_none() && self.added_required.is_none() && placement.node_selector.is_empty()
        {
            return (None, Status::skip());
        }
        let Some(names) = required.and_then(pinned_node_names) else {
            return (None, Status::success());
        };
        if names.is_empty() {
            // Terms exist and every one pins names, but no name survives.
            if required.is_some_and(|r| !r.terms.is_empty()) {
                return (None, Status::unresolvable(ERR_REASON_CONFLICT));
            }
            return (None, Status::success());
        }
        (
            Some(PreFilterResult {
                node_names: Some(names),
            }),
            Status::success(),
        )
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        if !matches_added(self.added_required.as_deref(), n) {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        if !pod.placement.node_matches(&n.labels, &n.name) {
            return Status::unresolvable(ERR_REASON_POD);
        }
        Status::success()
    }
}

#[async_trait]
impl PreScorePlugin for NodeAffinity {
    async fn pre_score(&self, _: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        if pod.placement.node_affinity.preferred.is_empty() && self.added_preferred.is_none() {
            return Status::skip();
        }
        Status::success()
    }
}

/// The sum of the weights of the `terms` the node matches.
fn preferred_score(terms: &[(i32, NodeSelectorTerm)], node: &NodeSpec) -> i64 {
    terms
        .iter()
        .filter(|(_, t)| t.matches(&node.labels, &node.name))
        .map(|(w, _)| i64::from(*w))
        .sum()
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        let added = self
            .added_preferred
            .as_deref()
            .map_or(0, |t| preferred_score(t, n));
        Ok(added + preferred_score(&pod.placement.node_affinity.preferred, n))
    }

    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        Some(self)
    }
}

impl ScoreExtensions for NodeAffinity {
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests;
