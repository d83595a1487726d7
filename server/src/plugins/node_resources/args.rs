//! NodeResourcesFitArgs: upstream's fields, defaults and validation.

use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};

/// The scoring strategies.
pub const LEAST_ALLOCATED: &str = "LeastAllocated";
/// Favours the fullest nodes (bin packing).
pub const MOST_ALLOCATED: &str = "MostAllocated";
/// Scores by a piecewise-linear function of utilization.
pub const REQUESTED_TO_CAPACITY_RATIO: &str = "RequestedToCapacityRatio";

/// A resource and its weight in scoring.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// The resource name (`cpu`, `memory`, `example.com/gpu`, ...).
    pub name: String,
    /// Its weight; 0 means 1.
    #[serde(default)]
    pub weight: i64,
}

/// A point of the RequestedToCapacityRatio shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilization in per cent, 0 to 100.
    pub utilization: i32,
    /// Score at that utilization, 0 to 10.
    pub score: i32,
}

/// RequestedToCapacityRatio's parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// The function's points, by increasing utilization.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// How nodes are scored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// `LeastAllocated`, `MostAllocated` or `RequestedToCapacityRatio`.
    #[serde(rename = "type", default)]
    pub strategy_type: String,
    /// The resources scored and their weights (default: cpu and memory, 1 each).
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// Parameters of RequestedToCapacityRatio.
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

/// NodeResourcesFit's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeResourcesFitArgs {
    /// Extended resources the Filter does not check.
    pub ignored_resources: Vec<String>,
    /// Groups (the part before `/`) of extended resources the Filter does
    /// not check.
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored.
    pub scoring_strategy: Option<ScoringStrategy>,
}

fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

impl Default for NodeResourcesFitArgs {
    fn default() -> Self {
        Self {
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
            scoring_strategy: Some(ScoringStrategy {
                strategy_type: LEAST_ALLOCATED.into(),
                resources: default_resources(),
                requested_to_capacity_ratio: None,
            }),
        }
    }
}

impl NodeResourcesFitArgs {
    /// Applies upstream's defaults to given args.
    fn apply_defaults(&mut self) {
        let strategy = self
            .scoring_strategy
            .get_or_insert_with(|| ScoringStrategy {
                strategy_type: LEAST_ALLOCATED.into(),
                resources: Vec::new(),
                requested_to_capacity_ratio: None,
            });
        if strategy.resources.is_empty() {
            strategy.resources = default_resources();
        }
        for r in &mut strategy.resources {
            if r.weight == 0 {
                r.weight = 1;
            }
        }
    }

    /// The scoring strategy (always set once defaulted).
    pub fn strategy(&self) -> &ScoringStrategy {
        self.scoring_strategy.as_ref().expect("defaulted")
    }
}

impl PluginArgs for NodeResourcesFitArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "NodeResourcesFitArgs").map(Self::defaulted)
    }
}

impl ValidateArgs for NodeResourcesFitArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let mut args = self.clone();
        args.apply_defaults();
        for (i, r) in args.ignored_resources.iter().enumerate() {
            if let Err(e) = validate_qualified_name(r) {
                return Err(ConfigError::invalid(
                    join_path(path, &format!("ignoredResources[{i}]")),
                    format!("{r:?}"),
                    &e,
                ));
            }
        }
        for (i, g) in args.ignored_resource_groups.iter().enumerate() {
            let p = join_path(path, &format!("ignoredResourceGroups[{i}]"));
            if g.contains('/') {
                return Err(ConfigError::invalid(
                    p,
                    format!("{g:?}"),
                    "resource group name can't contain '/'",
                ));
            }
            if let Err(e) = validate_qualified_name(g) {
                return Err(ConfigError::invalid(p, format!("{g:?}"), &e));
            }
        }
        let s = args.strategy();
        let sp = join_path(path, "scoringStrategy");
        let supported = [LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO];
        if !supported.contains(&s.strategy_type.as_str()) {
            return Err(ConfigError::new(
                format!("{sp}.type"),
                format!(
                    "unknown strategy {:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
                    s.strategy_type
                ),
            ));
        }
        for (i, r) in s.resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                return Err(ConfigError::invalid(
                    format!("{sp}.resources[{i}].weight"),
                    r.weight,
                    &format!("resource weight of {} not in valid range (0, 100]", r.name),
                ));
            }
        }
        let rp = format!("{sp}.requestedToCapacityRatio");
        match (
            &s.requested_to_capacity_ratio,
            s.strategy_type == REQUESTED_TO_CAPACITY_RATIO,
        ) {
            (None, true) => {
                return Err(ConfigError::new(
                    rp,
                    "Required value: must be specified when type is RequestedToCapacityRatio",
                ));
            }
            (Some(_), false) => {
                return Err(ConfigError::new(
                    rp,
                    "Forbidden: must be nil when type is not RequestedToCapacityRatio",
                ));
            }
            (Some(param), true) => validate_shape(&param.shape, &format!("{rp}.shape"))?,
            (None, false) => {}
        }
        Ok(())
    }
}

/// Upstream's `validateFunctionShape`: at least one point, utilizations
/// increasing within [0, 100], scores within [0, 10].
pub fn validate_shape(shape: &[UtilizationShapePoint], path: &str) -> Result<(), ConfigError> {
    if shape.is_empty() {
        return Err(ConfigError::new(
            path,
            "Required value: at least one point must be specified",
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if i > 0 && p.utilization <= shape[i - 1].utilization {
            return Err(ConfigError::invalid(
                format!("{path}[{i}].utilization"),
                p.utilization,
                "values must be sorted in increasing order",
            ));
        }
        if !(0..=100).contains(&p.utilization) {
            return Err(ConfigError::invalid(
                format!("{path}[{i}].utilization"),
                p.utilization,
                "not in valid range [0, 100]",
            ));
        }
        if !(0..=10).contains(&p.score) {
            return Err(ConfigError::invalid(
                format!("{path}[{i}].score"),
                p.score,
                "not in valid range [0, 10]",
            ));
        }
    }
    Ok(())
}

/// Checks a Kubernetes qualified name: an optional DNS-subdomain prefix and
/// `/`, then a name of at most 63 alphanumerics, `-`, `_` or `.`, starting
/// and ending alphanumeric.
pub fn validate_qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    if let Some(p) = prefix {
        let dns_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !dns_ok {
            return Err("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
        }
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if !ok {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    Ok(())
}

impl NodeResourcesFitArgs {
    /// The args with upstream's defaults applied.
    pub fn defaulted(mut self) -> Self {
        self.apply_defaults();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<NodeResourcesFitArgs, ConfigError> {
        NodeResourcesFitArgs::parse(Some(&v), "profiles[0].pluginConfig[1].args")
    }

    #[test]
    fn defaults() {
        let a = NodeResourcesFitArgs::parse(None, "x").unwrap();
        assert_eq!(a.strategy().strategy_type, LEAST_ALLOCATED);
        assert_eq!(a.strategy().resources, default_resources());
        let a = parse(
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu"}]}}),
        )
        .unwrap();
        assert_eq!(
            a.strategy().resources,
            vec![ResourceSpec {
                name: "cpu".into(),
                weight: 1
            }]
        );
        let a = parse(
            json!({"kind": "NodeResourcesFitArgs", "apiVersion": "kubescheduler.config.k8s.io/v1",
                             "scoringStrategy": {"type": "MostAllocated"}}),
        )
        .unwrap();
        assert_eq!(a.strategy().resources, default_resources());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                json!({"scoringStrategy": {"type": "Foo"}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.type: unknown strategy \"Foo\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            ),
            (
                json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range (0, 100]",
            ),
            (
                json!({"ignoredResourceGroups": ["example.com/gpu"]}),
                "profiles[0].pluginConfig[1].args.ignoredResourceGroups[0]: Invalid value: \"example.com/gpu\": resource group name can't contain '/'",
            ),
            (
                json!({"ignoredResources": ["-bad"]}),
                "profiles[0].pluginConfig[1].args.ignoredResources[0]: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.requestedToCapacityRatio: Required value: must be specified when type is RequestedToCapacityRatio",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1}, {"utilization": 40, "score": 2}]}}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization: Invalid value: 40: values must be sorted in increasing order",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 11}]}}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.requestedToCapacityRatio.shape[0].score: Invalid value: 11: not in valid range [0, 10]",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated", "requestedToCapacityRatio": {"shape": []}}}),
                "profiles[0].pluginConfig[1].args.scoringStrategy.requestedToCapacityRatio: Forbidden: must be nil when type is not RequestedToCapacityRatio",
            ),
            (
                json!({"ignoredResource": ["x"]}),
                "profiles[0].pluginConfig[1].args.ignoredResource: unknown field `ignoredResource`, expected one of `ignoredResources`, `ignoredResourceGroups`, `scoringStrategy`",
            ),
            (
                json!({"kind": "OtherArgs"}),
                "profiles[0].pluginConfig[1].args.kind: expected \"NodeResourcesFitArgs\", got \"OtherArgs\"",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn qualified_names() {
        for ok in ["gpu", "example.com/gpu", "a_b.c-d"] {
            assert!(validate_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "x-", "Example.com/gpu", "/gpu", &"x".repeat(64)] {
            assert!(validate_qualified_name(bad).is_err(), "{bad}");
        }
    }
}
