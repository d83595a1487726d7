//! InterPodAffinity's PreScore, Score and NormalizeScore.

use std::sync::Arc;

use async_trait::async_trait;

use super::tallies::{ExistingKey, NodeHits, ScoreKey};
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

impl ScoreKey {
    /// What `existing`, on a node with `labels`, adds to domains.
    fn weigh(&self, existing: &PodInfo, labels: &Labels, out: &mut NodeHits) {
        if labels.is_empty() {
            return;
        }
        let mut hit = |term: &AffinityTerm, weight: i64| {
            out.push(0, &term.topology_key, labels, weight);
        };
        // The incoming pod's preferences toward the existing pod.
        for (w, t) in &self.affinity {
            if term_matches(t, existing) {
                hit(t, i64::from(*w));
            }
        }
        for (w, t) in &self.anti_affinity {
            if term_matches(t, existing) {
                hit(t, -i64::from(*w));
            }
        }
        // The existing pod's terms toward the incoming pod.
        let theirs = &existing.placement;
        let incoming = &self.incoming;
        let matches = |t: &AffinityTerm| {
            t.matches(
                &incoming.namespace,
                &incoming.labels,
                &incoming.namespace_labels,
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
        // Without preferred terms of its own, only pods with terms of theirs
        // can score the incoming pod; most clusters have none.
        if !has_preferred && snapshot.have_pods_with_affinity().next().is_none() {
            return Status::skip();
        }
        let objects = self.handle.objects();
        let merge = |terms: &[crate::model::WeightedAffinityTerm]| -> Vec<(i32, AffinityTerm)> {
            terms
                .iter()
                .map(|wt| (wt.weight, merge_namespaces(&wt.term, objects)))
                .collect()
        };
        let key = ScoreKey {
            incoming: ExistingKey {
                namespace: pod.namespace.clone(),
                labels: pod.labels.clone(),
                namespace_labels: objects.namespace_labels(&pod.namespace),
            },
            affinity: merge(&placement.pod_affinity.preferred),
            anti_affinity: merge(&placement.pod_anti_affinity.preferred),
            hard_weight: self.args.hard_pod_affinity_weight,
            all_pods: has_preferred,
        };
        let (scores, hits) = self.scores.with(
            key,
            snapshot.list(),
            self.handle.parallelizer(),
            |q, info| {
                let mut out = NodeHits::default();
                let Some(node) = info.node() else {
                    return out;
                };
                let pods = if q.all_pods {
                    info.pods()
                } else {
                    info.pods_with_affinity()
                };
                for existing in pods {
                    q.weigh(existing, &node.labels, &mut out);
                }
                out
            },
            |e| (e.aggregate().tallies[0].clone(), e.aggregate().raw),
        );
        if hits == 0 {
            return Status::skip();
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
