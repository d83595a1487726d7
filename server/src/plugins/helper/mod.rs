//! Helpers several in-tree plugins share.

mod node_memo;

pub use node_memo::{Aggregate, MemoEntry, NodeMemo};

use crate::framework::NodeScore;

/// A hash map keyed by label values, topology domains and the like, read
/// for every node a cycle visits: foldhash, several times SipHash's speed
/// on short strings (seeded at random per map all the same).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Rescales `scores` from `[0, max(scores)]` to `[0, max_priority]` (integer
/// arithmetic, rounding down), then, with `reverse`, flips them
/// (`max_priority - score`). When every score is 0, the scores stay 0, or all
/// become `max_priority` with `reverse`. Scores are assumed non-negative.
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [NodeScore<'_>]) {
    let highest = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if highest == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max_priority;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max_priority * s.score / highest;
        s.score = if reverse {
            max_priority - scaled
        } else {
            scaled
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(raw: &[i64], reverse: bool) -> Vec<i64> {
        let names: Vec<String> = (0..raw.len()).map(|i| format!("n{i}")).collect();
        let mut scores: Vec<NodeScore<'_>> = raw
            .iter()
            .zip(&names)
            .map(|(&score, name)| NodeScore { name, score })
            .collect();
        default_normalize_score(100, reverse, &mut scores);
        scores.iter().map(|s| s.score).collect()
    }

    #[test]
    fn normalizes_like_upstream() {
        let cases: &[(&str, &[i64], bool, &[i64])] = &[
            (
                "scales to the highest",
                &[1, 2, 3, 4, 5],
                false,
                &[20, 40, 60, 80, 100],
            ),
            ("reversed", &[1, 2, 3, 4, 5], true, &[80, 60, 40, 20, 0]),
            ("rounds down", &[1, 3], false, &[33, 100]),
            (
                "reversed rounds the scaled value down first",
                &[1, 3],
                true,
                &[67, 0],
            ),
            ("all zero stays zero", &[0, 0, 0], false, &[0, 0, 0]),
            (
                "all zero reversed is the maximum",
                &[0, 0],
                true,
                &[100, 100],
            ),
            ("one node", &[7], false, &[100]),
            ("no nodes", &[], true, &[]),
            (
                "large raw scores",
                &[1000, 10_000, 20_000],
                false,
                &[5, 50, 100],
            ),
        ];
        for (name, raw, reverse, want) in cases {
            assert_eq!(run(raw, *reverse), *want, "{name}");
        }
    }
}
