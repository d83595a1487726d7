//! The scoring strategies of NodeResourcesFit, as upstream computes them.
//!
//! Each strategy turns, per scored resource, what the node would have
//! requested with the pod (`requested`) and its allocatable (`capacity`)
//! into a 0-100 score, then takes the weighted mean over resources the node
//! has (capacity > 0).

use super::args::UtilizationShapePoint;
use crate::framework::MAX_NODE_SCORE;

/// The highest score a RequestedToCapacityRatio shape point may give;
/// shape scores are scaled by `MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE`.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
const MAX_UTILIZATION: i64 = 100;

/// A scoring strategy with its resource weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scorer {
    /// Prefers nodes with the most free capacity.
    LeastAllocated,
    /// Prefers the fullest nodes.
    MostAllocated,
    /// A broken-linear function of utilization, points scaled to 0-100.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

impl Scorer {
    /// Builds the RequestedToCapacityRatio scorer from the args' shape.
    pub fn requested_to_capacity_ratio(shape: &[UtilizationShapePoint]) -> Self {
        Self::RequestedToCapacityRatio(
            shape
                .iter()
                .map(|p| {
                    (
                        i64::from(p.utilization),
                        i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                    )
                })
                .collect(),
        )
    }

    /// The node's score from per-resource `requested`, `capacity` and
    /// `weights` (same length; capacity 0 means "not scored").
    pub fn score(&self, requested: &[i64], capacity: &[i64], weights: &[i64]) -> i64 {
        let mut node_score = 0i64;
        let mut weight_sum = 0i64;
        for i in 0..requested.len() {
            if capacity[i] == 0 {
                continue;
            }
            let s = match self {
                Self::LeastAllocated => least_requested(requested[i], capacity[i]),
                Self::MostAllocated => most_requested(requested[i], capacity[i]),
                Self::RequestedToCapacityRatio(shape) => {
                    let s = broken_linear(shape, utilization(requested[i], capacity[i]));
                    // Resources scoring 0 do not pull the mean down.
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            node_score += s * weights[i];
            weight_sum += weights[i];
        }
        if weight_sum == 0 {
            return 0;
        }
        match self {
            Self::RequestedToCapacityRatio(_) => {
                (node_score as f64 / weight_sum as f64).round() as i64
            }
            _ => node_score / weight_sum,
        }
    }
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    // Pods without requests count default amounts, so the sum may exceed
    // the capacity.
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// Requested over capacity in per cent (100 when over or without capacity).
pub fn utilization(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        MAX_UTILIZATION
    } else {
        requested * MAX_UTILIZATION / capacity
    }
}

/// Upstream's `BuildBrokenLinearFunction`: the score at utilization `p` on
/// the line through the `(utilization, score)` points.
pub fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (u0, s0) = shape[i - 1];
            return s0 + (s - s0) * (p - u0) / (u - u0);
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_allocated() {
        // cpu: (4000-3000)*100/4000 = 25; memory: (10000-5000)*100/10000 = 50
        let s = Scorer::LeastAllocated.score(&[3000, 5000], &[4000, 10000], &[1, 1]);
        assert_eq!(s, 37);
        // Weighted: (25*3 + 50*1)/4 = 31
        assert_eq!(
            Scorer::LeastAllocated.score(&[3000, 5000], &[4000, 10000], &[3, 1]),
            31
        );
        // Over capacity scores 0; missing resources are left out.
        assert_eq!(
            Scorer::LeastAllocated.score(&[5000, 0], &[4000, 0], &[1, 1]),
            0
        );
        assert_eq!(Scorer::LeastAllocated.score(&[0, 0], &[0, 0], &[1, 1]), 0);
    }

    #[test]
    fn most_allocated() {
        assert_eq!(
            Scorer::MostAllocated.score(&[3000, 5000], &[4000, 10000], &[1, 1]),
            62
        );
        assert_eq!(
            Scorer::MostAllocated.score(&[6000, 5000], &[4000, 10000], &[1, 1]),
            75
        );
    }

    #[test]
    fn requested_to_capacity_ratio() {
        let shape = [
            UtilizationShapePoint {
                utilization: 0,
                score: 10,
            },
            UtilizationShapePoint {
                utilization: 100,
                score: 0,
            },
        ];
        let s = Scorer::requested_to_capacity_ratio(&shape);
        // utilization 75% -> 25, 50% -> 50
        assert_eq!(s.score(&[3000, 5000], &[4000, 10000], &[1, 1]), 38);
        // A full resource scores 0 and is left out of the mean.
        assert_eq!(s.score(&[4000, 5000], &[4000, 10000], &[1, 1]), 50);
        let bin_pack = Scorer::requested_to_capacity_ratio(&[
            UtilizationShapePoint {
                utilization: 0,
                score: 0,
            },
            UtilizationShapePoint {
                utilization: 100,
                score: 10,
            },
        ]);
        assert_eq!(bin_pack.score(&[3000, 5000], &[4000, 10000], &[1, 1]), 63);
    }

    #[test]
    fn broken_linear_edges() {
        let shape = [(10, 0), (50, 100)];
        assert_eq!(broken_linear(&shape, 0), 0);
        assert_eq!(broken_linear(&shape, 30), 50);
        assert_eq!(broken_linear(&shape, 90), 100);
    }
}
