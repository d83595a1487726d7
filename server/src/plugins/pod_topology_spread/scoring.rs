//! PreScore, Score and NormalizeScore: the `ScheduleAnyway` constraints.
//!
//! PreScore finds the domains of the feasible nodes and counts matching pods
//! in them over every node of the snapshot (hostname domains are counted at
//! Score, on the node itself). A node's raw score sums, per constraint, its
//! domain's count weighted by `ln(number of domains + 2)`, plus
//! `maxSkew - 1`; NormalizeScore reverses the range so that the emptiest
//! domains score 100.

use crate::plugins::helper::FastMap;
use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use super::domains::SpreadKey;
use super::{LABEL_HOSTNAME, PodTopologySpread, count_matching, has_all_keys};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeScore, PreScorePlugin, ScoreExtensions, ScorePlugin, StateKey,
    Status,
};
use crate::model::{PodInfo, SpreadConstraint, WhenUnsatisfiable};

/// The raw score NormalizeScore gives nodes it must not score, before
/// turning them to 0.
const INVALID_SCORE: i64 = -1;

/// What PreScore computed.
#[derive(Debug)]
pub(super) struct PreScoreState {
    /// The pod's `ScheduleAnyway` constraints.
    pub(super) constraints: Vec<SpreadConstraint>,
    /// Feasible nodes lacking a topology key (when all are required): they
    /// score 0.
    pub(super) ignored: HashSet<Arc<str>>,
    /// Per constraint: matching pods per domain of the feasible nodes
    /// (empty for hostname constraints, counted at Score).
    pub(super) counts: Vec<FastMap<Arc<str>, i64>>,
    /// Per constraint: `ln(domains + 2)`.
    pub(super) weights: Vec<f64>,
}

pub(super) const PRE_SCORE_KEY: StateKey<Arc<PreScoreState>> =
    StateKey::new("PreScorePodTopologySpread");

/// The weight of a constraint's counts: `ln(size + 2)`, so that the counts
/// of topologies with few domains are not watered down by those with many.
pub(super) fn topology_normalizing_weight(size: usize) -> f64 {
    ((size + 2) as f64).ln()
}

/// A domain's contribution to a node's raw score.
fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    count as f64 * weight + f64::from(max_skew - 1)
}

impl PodTopologySpread {
    /// The PreScore state for `pod` over the feasible nodes `filtered` (and
    /// every node of the snapshot); `None` when there is nothing to score.
    pub(super) fn pre_score_state(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        filtered: &[Arc<NodeInfo>],
    ) -> Option<PreScoreState> {
        let all = snapshot.list();
        if all.is_empty() {
            return None;
        }
        let constraints = self
            .source
            .constraints(pod, WhenUnsatisfiable::ScheduleAnyway);
        if constraints.is_empty() {
            return None;
        }
        // Only the system defaults tolerate nodes lacking a key (no zone
        // label still allows hostname spreading; such nodes form a zone "").
        let require_all = !pod.placement.spread.is_empty() || !self.source.system_defaulted;
        let mut ignored = HashSet::new();
        let mut counts: Vec<FastMap<Arc<str>, i64>> = vec![FastMap::default(); constraints.len()];
        for info in filtered {
            let Some(node) = info.node() else {
                continue;
            };
            if require_all && !has_all_keys(node, &constraints) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if &*c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let value = node.labels.get(&c.topology_key).unwrap_or("");
                if !counts[i].contains_key(value) {
                    counts[i].insert(Arc::from(value), 0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, domains)| {
                let size = if &*c.topology_key == LABEL_HOSTNAME {
                    filtered.len().saturating_sub(ignored.len())
                } else {
                    domains.len()
                };
                topology_normalizing_weight(size)
            })
            .collect();

        let required: Vec<Arc<str>> = if require_all {
            constraints.iter().map(|c| c.topology_key.clone()).collect()
        } else {
            Vec::new()
        };
        for (i, c) in constraints.iter().enumerate() {
            // Hostname domains are counted at Score, on the node itself.
            if &*c.topology_key == LABEL_HOSTNAME || counts[i].is_empty() {
                continue;
            }
            let key = SpreadKey {
                namespace: pod.namespace.clone(),
                selector: c.selector.clone(),
                topology_key: c.topology_key.clone(),
                required: required.clone(),
                missing_as_empty: true,
            };
            // Only domains of feasible nodes are counted.
            let all_counts = self.domain_counts(key, c, pod, all);
            for (value, total) in counts[i].iter_mut() {
                *total = all_counts.get(value).unwrap_or(0);
            }
        }
        Some(PreScoreState {
            constraints,
            ignored,
            counts,
            weights,
        })
    }
}

#[async_trait]
impl PreScorePlugin for PodTopologySpread {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        match self.pre_score_state(state.snapshot(), pod, nodes) {
            None => Status::skip(),
            Some(s) => {
                state.write(&PRE_SCORE_KEY, Arc::new(s));
                Status::success()
            }
        }
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, info: &NodeInfo) -> Result<i64, Status> {
        let s = state.require(&PRE_SCORE_KEY)?;
        let Some(node) = info.node() else {
            return Err(Status::error("node not found"));
        };
        if s.ignored.contains(&*node.name) {
            return Ok(0);
        }
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let count = if &*c.topology_key == LABEL_HOSTNAME {
                count_matching(info.pods(), &c.selector, &pod.namespace)
            } else {
                s.counts[i].get(value).copied().unwrap_or(0)
            };
            score += score_for_count(count, c.max_skew, s.weights[i]);
        }
        Ok(score.round() as i64)
    }

    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        Some(self)
    }
}

impl ScoreExtensions for PodTopologySpread {
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
        let mut min = i64::MAX;
        let mut max = 0;
        for sc in scores.iter_mut() {
            if s.ignored.contains(sc.name) {
                sc.score = INVALID_SCORE;
                continue;
            }
            min = min.min(sc.score);
            max = max.max(sc.score);
        }
        for sc in scores.iter_mut() {
            sc.score = if sc.score == INVALID_SCORE {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - sc.score) / max
            };
        }
        Status::success()
    }
}
