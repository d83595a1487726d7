//! DefaultPreemptionArgs: how many candidate nodes to dry-run.

use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};

/// DefaultPreemption's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DefaultPreemptionArgs {
    /// The least share of nodes (per cent) to dry-run preemption on.
    pub min_candidate_nodes_percentage: i32,
    /// The least number of nodes to dry-run preemption on.
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        Self {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl PluginArgs for DefaultPreemptionArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "DefaultPreemptionArgs")
    }
}

impl ValidateArgs for DefaultPreemptionArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let pct = self.min_candidate_nodes_percentage;
        let abs = self.min_candidate_nodes_absolute;
        if !(0..=100).contains(&pct) {
            return Err(ConfigError::invalid(
                join_path(path, "minCandidateNodesPercentage"),
                pct,
                "not in valid range [0, 100]",
            ));
        }
        if abs < 0 {
            return Err(ConfigError::invalid(
                join_path(path, "minCandidateNodesAbsolute"),
                abs,
                "not in valid range [0, inf)",
            ));
        }
        if pct == 0 && abs == 0 {
            return Err(ConfigError::invalid(
                path.to_string(),
                "minCandidateNodesPercentage and minCandidateNodesAbsolute",
                "both minCandidateNodesPercentage and minCandidateNodesAbsolute cannot be zero",
            ));
        }
        Ok(())
    }
}

impl DefaultPreemptionArgs {
    /// How many candidates to find among `num_nodes` potential nodes.
    pub fn num_candidates(&self, num_nodes: usize) -> usize {
        let n = num_nodes as i64 * i64::from(self.min_candidate_nodes_percentage) / 100;
        (n.max(i64::from(self.min_candidate_nodes_absolute)) as usize).min(num_nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_validation() {
        let a = DefaultPreemptionArgs::parse(None, "a").unwrap();
        assert_eq!(
            (
                a.min_candidate_nodes_percentage,
                a.min_candidate_nodes_absolute
            ),
            (10, 100)
        );
        let a =
            DefaultPreemptionArgs::parse(Some(&json!({"minCandidateNodesPercentage": 50})), "a")
                .unwrap();
        assert_eq!(
            (
                a.min_candidate_nodes_percentage,
                a.min_candidate_nodes_absolute
            ),
            (50, 100)
        );
        for (v, want) in [
            (
                json!({"minCandidateNodesPercentage": 101}),
                "a.minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
            ),
            (
                json!({"minCandidateNodesAbsolute": -1}),
                "a.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
            ),
            (
                json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
                "a: Invalid value: minCandidateNodesPercentage and minCandidateNodesAbsolute: both minCandidateNodesPercentage and minCandidateNodesAbsolute cannot be zero",
            ),
        ] {
            assert_eq!(
                DefaultPreemptionArgs::parse(Some(&v), "a")
                    .unwrap_err()
                    .to_string(),
                want
            );
        }
    }

    #[test]
    fn candidate_counts() {
        let a = DefaultPreemptionArgs::default();
        assert_eq!(a.num_candidates(50), 50);
        assert_eq!(a.num_candidates(5000), 500);
        let a = DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 0,
            min_candidate_nodes_absolute: 3,
        };
        assert_eq!(a.num_candidates(5000), 3);
    }
}
