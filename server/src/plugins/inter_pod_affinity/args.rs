//! InterPodAffinityArgs: upstream's fields, defaults and validation.

use serde::{Deserialize, Deserializer};

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};

/// The weight existing pods' required affinity terms give, by default.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;
/// The smallest valid `hardPodAffinityWeight`.
pub const MIN_HARD_POD_AFFINITY_WEIGHT: i32 = 0;
/// The largest valid `hardPodAffinityWeight`.
pub const MAX_HARD_POD_AFFINITY_WEIGHT: i32 = 100;

/// InterPodAffinity's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct InterPodAffinityArgs {
    /// The score a node gets, per existing pod in its domain whose required
    /// affinity term the incoming pod matches. 0 turns that off.
    #[serde(deserialize_with = "weight_or_default")]
    pub hard_pod_affinity_weight: i32,
    /// Leave existing pods' preferred (and required) terms out of scoring
    /// when the incoming pod has no preferred inter-pod terms of its own.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        Self {
            hard_pod_affinity_weight: DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

/// Upstream's field is a pointer: `null` means "use the default".
fn weight_or_default<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    Ok(Option::<i32>::deserialize(d)?.unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT))
}

impl PluginArgs for InterPodAffinityArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "InterPodAffinityArgs")
    }
}

impl ValidateArgs for InterPodAffinityArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let w = self.hard_pod_affinity_weight;
        if !(MIN_HARD_POD_AFFINITY_WEIGHT..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&w) {
            return Err(ConfigError::invalid(
                join_path(path, "hardPodAffinityWeight"),
                w,
                &format!(
                    "not in valid range [{MIN_HARD_POD_AFFINITY_WEIGHT}, {MAX_HARD_POD_AFFINITY_WEIGHT}]"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PATH: &str = "profiles[0].pluginConfig[2].args";

    fn parse(v: serde_json::Value) -> Result<InterPodAffinityArgs, ConfigError> {
        InterPodAffinityArgs::parse(Some(&v), PATH)
    }

    #[test]
    fn defaults_and_given_values() {
        let cases: Vec<(&str, Option<serde_json::Value>, i32, bool)> = vec![
            ("absent", None, 1, false),
            ("empty", Some(json!({})), 1, false),
            (
                "null weight means default",
                Some(json!({"hardPodAffinityWeight": null})),
                1,
                false,
            ),
            (
                "weight 0",
                Some(json!({"hardPodAffinityWeight": 0})),
                0,
                false,
            ),
            (
                "weight 100",
                Some(json!({"hardPodAffinityWeight": 100})),
                100,
                false,
            ),
            (
                "ignore preferred terms",
                Some(json!({"ignorePreferredTermsOfExistingPods": true})),
                1,
                true,
            ),
            (
                "typed",
                Some(
                    json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "InterPodAffinityArgs",
                            "hardPodAffinityWeight": 7, "ignorePreferredTermsOfExistingPods": false}),
                ),
                7,
                false,
            ),
        ];
        for (name, v, weight, ignore) in cases {
            let a = InterPodAffinityArgs::parse(v.as_ref(), PATH).unwrap();
            assert_eq!(a.hard_pod_affinity_weight, weight, "{name}");
            assert_eq!(a.ignore_preferred_terms_of_existing_pods, ignore, "{name}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "negative weight",
                json!({"hardPodAffinityWeight": -1}),
                "profiles[0].pluginConfig[2].args.hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                "weight above 100",
                json!({"hardPodAffinityWeight": 101}),
                "profiles[0].pluginConfig[2].args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]",
            ),
            (
                "unknown field",
                json!({"hardPodAffinityWeights": 1}),
                "profiles[0].pluginConfig[2].args.hardPodAffinityWeights: unknown field `hardPodAffinityWeights`, expected `hardPodAffinityWeight` or `ignorePreferredTermsOfExistingPods`",
            ),
            (
                "wrong kind",
                json!({"kind": "NodeResourcesFitArgs"}),
                "profiles[0].pluginConfig[2].args.kind: expected \"InterPodAffinityArgs\", got \"NodeResourcesFitArgs\"",
            ),
        ];
        for (name, args, want) in cases {
            assert_eq!(parse(args).unwrap_err().to_string(), want, "{name}");
        }
        assert!(parse(json!({"ignorePreferredTermsOfExistingPods": "yes"})).is_err());
    }
}
