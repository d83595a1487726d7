//! InterPodAffinity's PreFilter, AddPod/RemovePod and Filter.

use std::sync::Arc;

use async_trait::async_trait;
use smallvec::SmallVec;

use super::tallies::{ExistingKey, IncomingKey, NodeHits};
use super::{InterPodAffinity, TopologyCounts, matches_all_terms, merge_namespaces, term_matches};
use crate::cache::NodeInfo;
use crate::framework::{
    CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, StateKey,
    Status,
};
use crate::model::{AffinityTerm, Labels, PodInfo};

/// The incoming pod's required affinity is not met on the node.
pub const REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// The incoming pod's required anti-affinity is violated on the node.
pub const REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";
/// An existing pod's required anti-affinity rejects the incoming pod.
pub const REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// What does not change once PreFilter has run: the incoming pod's
/// required terms (namespace selectors merged) and its namespace's labels.
#[derive(Debug)]
pub(super) struct IncomingTerms {
    /// Required affinity terms.
    pub(super) affinity: Vec<AffinityTerm>,
    /// Required anti-affinity terms.
    pub(super) anti_affinity: Vec<AffinityTerm>,
    /// The labels of the incoming pod's namespace, for the existing pods'
    /// namespace selectors.
    pub(super) namespace_labels: Labels,
    /// Whether the incoming pod matches all its own affinity terms (the
    /// first pod of a group that attracts itself may go anywhere).
    pub(super) matches_own_affinity: bool,
}

/// PreFilter's counts, kept right by AddPod/RemovePod.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    /// Per domain: existing pods with a required anti-affinity term the
    /// incoming pod matches.
    pub(super) existing_anti_affinity: TopologyCounts,
    /// Per domain: existing pods matching all the incoming pod's required
    /// affinity terms (counted once per term).
    pub(super) affinity: TopologyCounts,
    /// Per domain: existing pods matching the incoming pod's required
    /// anti-affinity terms (counted once per matching term).
    pub(super) anti_affinity: TopologyCounts,
    /// Shared by every clone.
    pub(super) terms: Arc<IncomingTerms>,
}

pub(super) const PRE_FILTER_KEY: StateKey<PreFilterState> =
    StateKey::new("PreFilterInterPodAffinity");

impl PreFilterState {
    /// Adds (`delta` 1) or removes (-1) `other`, on `node`, to the counts.
    fn update_with_pod(
        &mut self,
        incoming: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        let Some(node) = node.node() else {
            return;
        };
        let labels = &node.labels;
        for t in &other.placement.pod_anti_affinity.required {
            if t.matches(
                &incoming.namespace,
                &incoming.labels,
                &self.terms.namespace_labels,
            ) && let Some(v) = labels.get(&t.topology_key)
            {
                self.existing_anti_affinity
                    .update(&t.topology_key, v, delta);
            }
        }
        if matches_all_terms(&self.terms.affinity, other) {
            for t in &self.terms.affinity {
                if let Some(v) = labels.get(&t.topology_key) {
                    self.affinity.update(&t.topology_key, v, delta);
                }
            }
        }
        for t in &self.terms.anti_affinity {
            if term_matches(t, other)
                && let Some(v) = labels.get(&t.topology_key)
            {
                self.anti_affinity.update(&t.topology_key, v, delta);
            }
        }
    }

    /// The incoming pod's required affinity holds on a node with `labels`.
    fn satisfies_pod_affinity(&self, labels: &Labels) -> bool {
        let mut pods_exist = true;
        for t in &self.terms.affinity {
            let Some(v) = labels.get(&t.topology_key) else {
                // Every topology key must be on the node.
                return false;
            };
            if self.affinity.get(&t.topology_key, v) <= 0 {
                pods_exist = false;
            }
        }
        // No pod anywhere matches yet: the pod may start the group if it
        // matches its own terms.
        pods_exist || (self.affinity.is_empty() && self.terms.matches_own_affinity)
    }

    /// The incoming pod's required anti-affinity holds on a node with
    /// `labels`.
    fn satisfies_pod_anti_affinity(&self, labels: &Labels) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        self.terms.anti_affinity.iter().all(|t| {
            labels
                .get(&t.topology_key)
                .is_none_or(|v| self.anti_affinity.get(&t.topology_key, v) <= 0)
        })
    }

    /// No existing pod's required anti-affinity rejects the incoming pod on
    /// a node with `labels`.
    fn satisfies_existing_pods_anti_affinity(&self, labels: &Labels) -> bool {
        self.existing_anti_affinity.iter().all(|(key, values)| {
            labels
                .get(key)
                .is_none_or(|v| values.get(v).is_none_or(|n| *n <= 0))
        })
    }
}

impl InterPodAffinity {
    /// Per domain, the existing pods (on `nodes`) with a required
    /// anti-affinity term that `pod` matches.
    fn existing_anti_affinity_counts(
        &self,
        pod: &PodInfo,
        namespace_labels: &Labels,
        nodes: &[Arc<NodeInfo>],
    ) -> TopologyCounts {
        let key = ExistingKey {
            namespace: pod.namespace.clone(),
            labels: pod.labels.clone(),
            namespace_labels: namespace_labels.clone(),
        };
        self.existing_anti.with(
            key,
            nodes,
            self.handle.parallelizer(),
            |q, info| {
                let mut out = NodeHits::default();
                let Some(node) = info.node() else {
                    return out;
                };
                for existing in info.pods_with_required_anti_affinity() {
                    for t in &existing.placement.pod_anti_affinity.required {
                        if t.matches(&q.namespace, &q.labels, &q.namespace_labels) {
                            out.push(0, &t.topology_key, &node.labels, 1);
                        }
                    }
                }
                out
            },
            |e| e.aggregate().tallies[0].clone(),
        )
    }

    /// Per domain, the existing pods (on `nodes`) matching all the incoming
    /// pod's affinity terms, and those matching each of its anti-affinity
    /// terms.
    fn incoming_counts(
        &self,
        terms: &IncomingTerms,
        nodes: &[Arc<NodeInfo>],
    ) -> (TopologyCounts, TopologyCounts) {
        let key = IncomingKey {
            affinity: terms.affinity.clone(),
            anti_affinity: terms.anti_affinity.clone(),
        };
        self.incoming.with(
            key,
            nodes,
            self.handle.parallelizer(),
            |q, info| {
                let mut out = NodeHits::default();
                let Some(node) = info.node() else {
                    return out;
                };
                let mut all_terms = 0;
                let mut each: SmallVec<[i64; 4]> = SmallVec::from_elem(0, q.anti_affinity.len());
                for existing in info.pods() {
                    if matches_all_terms(&q.affinity, existing) {
                        all_terms += 1;
                    }
                    for (n, t) in each.iter_mut().zip(&q.anti_affinity) {
                        if term_matches(t, existing) {
                            *n += 1;
                        }
                    }
                }
                if all_terms > 0 {
                    for t in &q.affinity {
                        out.push(0, &t.topology_key, &node.labels, all_terms);
                    }
                }
                for (&n, t) in each.iter().zip(&q.anti_affinity) {
                    if n > 0 {
                        out.push(1, &t.topology_key, &node.labels, n);
                    }
                }
                out
            },
            |e| {
                let [affinity, anti] = &e.aggregate().tallies;
                (affinity.clone(), anti.clone())
            },
        )
    }
}

#[async_trait]
impl PreFilterPlugin for InterPodAffinity {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let snapshot = state.snapshot().clone();
        let objects = self.handle.objects();
        let placement = &pod.placement;
        let affinity: Vec<AffinityTerm> = placement
            .pod_affinity
            .required
            .iter()
            .map(|t| merge_namespaces(t, objects))
            .collect();
        let anti_affinity: Vec<AffinityTerm> = placement
            .pod_anti_affinity
            .required
            .iter()
            .map(|t| merge_namespaces(t, objects))
            .collect();
        let namespace_labels = objects.namespace_labels(&pod.namespace);

        // Most clusters have no pod with required anti-affinity: then there
        // is nothing to count (and no memo entry to keep).
        let existing_anti_affinity = if snapshot
            .have_pods_with_required_anti_affinity()
            .next()
            .is_none()
        {
            TopologyCounts::default()
        } else {
            self.existing_anti_affinity_counts(pod, &namespace_labels, snapshot.list())
        };

        if existing_anti_affinity.is_empty() && affinity.is_empty() && anti_affinity.is_empty() {
            return (None, Status::skip());
        }

        let matches_own_affinity = matches_all_terms(&affinity, pod);
        let terms = Arc::new(IncomingTerms {
            affinity,
            anti_affinity,
            namespace_labels,
            matches_own_affinity,
        });
        let (affinity, anti_affinity) =
            if terms.affinity.is_empty() && terms.anti_affinity.is_empty() {
                (TopologyCounts::default(), TopologyCounts::default())
            } else {
                self.incoming_counts(&terms, nodes)
            };
        state.write(
            &PRE_FILTER_KEY,
            PreFilterState {
                existing_anti_affinity,
                affinity,
                anti_affinity,
                terms,
            },
        );
        (None, Status::success())
    }

    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_KEY) {
            Some(s) => {
                s.update_with_pod(pod_to_schedule, pod_to_add, node, 1);
                Status::success()
            }
            None => missing_state(),
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_KEY) {
            Some(s) => {
                s.update_with_pod(pod_to_schedule, pod_to_remove, node, -1);
                Status::success()
            }
            None => missing_state(),
        }
    }
}

fn missing_state() -> Status {
    Status::error(format!(
        "reading {:?} from cycleState: not found",
        PRE_FILTER_KEY.name()
    ))
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let s = match state.require(&PRE_FILTER_KEY) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let Some(node) = node.node() else {
            return Status::error("node not found");
        };
        let labels = &node.labels;
        if !s.satisfies_pod_affinity(labels) {
            return Status::unresolvable(REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_pod_anti_affinity(labels) {
            return Status::unschedulable(REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_pods_anti_affinity(labels) {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}
