//! InterPodAffinity's PreScore, Score and NormalizeScore.

use std::sync::Arc;

use async_trait::async_trait;

use super::{InterPodAffinity, TopologyCounts, merge_namespaces, term_matches};
use crate::cache::NodeInfo;
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeScore, PreScorePlugin, ScoreExtensions, ScorePlugin, StateKey,
    Status,
};
use crate::model::{AffinityTerm, Labels, PodInfo};

/// Per domain, the summed weights; shared by every clone of the state.
#[derive(Debug, Clone)]
pub(super) struct PreScoreState(pub(super) Arc<TopologyCounts>);

pub(super) const PRE_SCORE_KEY: StateKey<PreScoreState> = StateKey::new("PreScoreInterPodAffinity");

/// A weight to add to a domain: the topology key, the node's value, the
/// signed weight.
type Hit<'a> = (&'a Arc<str>, &'a str, i64);

/// What scoring one existing pod needs besides the pod itself.
struct Scorer<'a> {
    incoming: &'a PodInfo,
    namespace_labels: &'a Labels,
    /// The incoming pod's preferred affinity terms (namespaces merged).
    affinity: &'a [(i32, AffinityTerm)],
    /// The incoming pod's preferred anti-affinity terms (namespaces merged).
    anti_affinity: &'a [(i32, AffinityTerm)],
    hard_weight: i32,
}

impl<'a> Scorer<'a> {
    /// The weights `existing`, on a node with `labels`, adds to domains.
    fn existing_pod(&self, existing: &'a PodInfo, labels: &'a Labels, out: &mut Vec<Hit<'a>>) {
        if labels.is_empty() {
            return;
        }
        let mut hit = |term: &'a AffinityTerm, weight: i64| {
            if let Some(v) = labels.get(&term.topology_key) {
                out.push((&term.topology_key, v, weight));
            }
        };
        // The incoming pod's preferences toward the existing pod.
        for (w, t) in self.affinity {
            if term_matches(t, existing) {
                hit(t, i64::from(*w));
            }
        }
        for (w, t) in self.anti_affinity {
            if term_matches(t, existing) {
                hit(t, -i64::from(*w));
            }
        }
        // The existing pod's terms toward the incoming pod.
        let theirs = &existing.placement;
        let matches = |t: &AffinityTerm| {
            t.matches(
                &self.incoming.namespace,
                &self.incoming.labels,
                self.namespace_labels,
            )
        };
        if self.hard_weight > 0 {
            for t in &theirs.pod_affinity.required {
                if matches(t) {
                    hit(t, i64::from(self.hard_weight));
                }
            }
        }
        for wt in &theirs.pod_affinity.preferred {
            if matches(&wt.term) {
                hit(&wt.term, i64::from(wt.weight));
            }
        }
        for wt in &theirs.pod_anti_affinity.preferred {
            if matches(&wt.term) {
                hit(&wt.term, -i64::from(wt.weight));
            }
        }
    }
}

#[async_trait]
impl PreScorePlugin for InterPodAffinity {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        let placement = &pod.placement;
        let has_preferred = !placement.pod_affinity.preferred.is_empty()
            || !placement.pod_anti_affinity.preferred.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_preferred {
            return Status::skip();
        }
        let snapshot = state.snapshot().clone();
        // Without preferred terms of its own, only pods with terms of
        // theirs can score the incoming pod.
        let nodes: Vec<&Arc<NodeInfo>> = if has_preferred {
            snapshot.list().iter().collect()
        } else {
            snapshot.have_pods_with_affinity().collect()
        };
        let objects = self.handle.objects();
        let merge = |terms: &[crate::model::WeightedAffinityTerm]| -> Vec<(i32, AffinityTerm)> {
            terms
                .iter()
                .map(|wt| (wt.weight, merge_namespaces(&wt.term, objects)))
                .collect()
        };
        let affinity = merge(&placement.pod_affinity.preferred);
        let anti_affinity = merge(&placement.pod_anti_affinity.preferred);
        let namespace_labels = objects.namespace_labels(&pod.namespace);
        let scorer = Scorer {
            incoming: pod,
            namespace_labels: &namespace_labels,
            affinity: &affinity,
            anti_affinity: &anti_affinity,
            hard_weight: self.args.hard_pod_affinity_weight,
        };

        let mut hits: Vec<Vec<Hit<'_>>> = vec![Vec::new(); nodes.len()];
        self.handle.parallelizer().for_each_mut_measured(
            &self.pre_score_cost,
            &mut hits,
            |i, out| {
                let info: &NodeInfo = nodes[i];
                let Some(node) = info.node() else {
                    return;
                };
                let pods = if has_preferred {
                    info.pods()
                } else {
                    info.pods_with_affinity()
                };
                for existing in pods {
                    scorer.existing_pod(existing, &node.labels, out);
                }
            },
        );
        if hits.iter().all(Vec::is_empty) {
            return Status::skip();
        }
        let mut scores = TopologyCounts::default();
        for (k, v, w) in hits.iter().flatten() {
            scores.accumulate(k, v, *w);
        }
        state.write(&PRE_SCORE_KEY, PreScoreState(Arc::new(scores)));
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.require(&PRE_SCORE_KEY)?;
        let Some(node) = node.node() else {
            return Err(Status::error("node not found"));
        };
        let mut score = 0;
        for (key, values) in s.0.iter() {
            if let Some(v) = node.labels.get(key) {
                score += values.get(v).copied().unwrap_or(0);
            }
        }
        Ok(score)
    }

    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        Some(self)
    }
}

impl ScoreExtensions for InterPodAffinity {
    fn normalize_score(
        &self,
        state: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore<'_>],
    ) -> Status {
        let s = match state.require(&PRE_SCORE_KEY) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if s.0.is_empty() {
            return Status::success();
        }
        normalize(scores);
        Status::success()
    }
}

/// Rescales to 0..=100 between the lowest and the highest score; all 0
/// when they are equal.
pub(super) fn normalize(scores: &mut [NodeScore<'_>]) {
    let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    let diff = max - min;
    for s in scores {
        s.score = if diff > 0 {
            (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
        } else {
            0
        };
    }
}
