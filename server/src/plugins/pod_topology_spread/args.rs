//! PodTopologySpreadArgs: upstream's fields, defaults and validation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sLabelSelector;
use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};
use crate::plugins::node_resources::validate_qualified_name;

/// Pods without constraints get the built-in defaults (hostname and zone,
/// `ScheduleAnyway`).
pub const SYSTEM_DEFAULTING: &str = "System";
/// Pods without constraints get `defaultConstraints`.
pub const LIST_DEFAULTING: &str = "List";

/// `DoNotSchedule`, as the API spells it.
pub const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// `ScheduleAnyway`, as the API spells it.
pub const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";

/// One default constraint: a `v1.TopologySpreadConstraint` without a
/// selector (the selector is deduced, per pod, from the Services,
/// ReplicationControllers, ReplicaSets and StatefulSets selecting it).
///
/// Every field is optional here so that what is missing is reported by
/// validation, with upstream's messages, rather than by the parser.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DefaultConstraint {
    /// The largest allowed difference in matching pods between domains.
    pub max_skew: i32,
    /// The node label defining domains.
    pub topology_key: String,
    /// `DoNotSchedule` (Filter) or `ScheduleAnyway` (Score).
    pub when_unsatisfiable: String,
    /// Must be absent: validation rejects it.
    pub label_selector: Option<K8sLabelSelector>,
    /// The fewest eligible domains assumed (1 when unset).
    pub min_domains: Option<i32>,
    /// `Honor` (the default) or `Ignore`.
    pub node_affinity_policy: Option<String>,
    /// `Honor` or `Ignore` (the default).
    pub node_taints_policy: Option<String>,
    /// Accepted as the API has it; without effect, since the selector of a
    /// default constraint is always replaced by the deduced one.
    pub match_label_keys: Option<Vec<String>>,
}

/// PodTopologySpread's arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PodTopologySpreadArgs {
    /// The constraints applied to pods that have none, with `List`.
    pub default_constraints: Vec<DefaultConstraint>,
    /// `System` (the default) or `List`.
    pub defaulting_type: String,
}

impl Default for PodTopologySpreadArgs {
    fn default() -> Self {
        Self {
            default_constraints: Vec::new(),
            defaulting_type: SYSTEM_DEFAULTING.into(),
        }
    }
}

impl PodTopologySpreadArgs {
    /// Whether the built-in defaults apply.
    pub fn system_defaulted(&self) -> bool {
        self.defaulting_type == SYSTEM_DEFAULTING
    }

    fn apply_defaults(&mut self) {
        if self.defaulting_type.is_empty() {
            self.defaulting_type = SYSTEM_DEFAULTING.into();
        }
    }
}

impl PluginArgs for PodTopologySpreadArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        let mut a = parse_args::<Self>(args, path, "PodTopologySpreadArgs")?;
        a.apply_defaults();
        Ok(a)
    }
}

impl ValidateArgs for PodTopologySpreadArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let mut args = self.clone();
        args.apply_defaults();
        let dt = args.defaulting_type.as_str();
        let dt_path = join_path(path, "defaultingType");
        if dt != SYSTEM_DEFAULTING && dt != LIST_DEFAULTING {
            return Err(ConfigError::new(
                dt_path,
                format!("Unsupported value: {dt:?}: supported values: \"System\", \"List\""),
            ));
        }
        if dt == SYSTEM_DEFAULTING && !args.default_constraints.is_empty() {
            return Err(ConfigError::invalid(
                dt_path,
                format!("{dt:?}"),
                "when .defaultConstraints are not empty",
            ));
        }
        let list = join_path(path, "defaultConstraints");
        for (i, c) in args.default_constraints.iter().enumerate() {
            let p = format!("{list}[{i}]");
            if c.max_skew <= 0 {
                return Err(ConfigError::invalid(
                    format!("{p}.maxSkew"),
                    c.max_skew,
                    "not in valid range (0, inf)",
                ));
            }
            let key_path = format!("{p}.topologyKey");
            if c.topology_key.is_empty() {
                return Err(ConfigError::new(
                    key_path,
                    "Required value: can not be empty",
                ));
            }
            if let Err(e) = validate_qualified_name(&c.topology_key) {
                return Err(ConfigError::invalid(
                    key_path,
                    format!("{:?}", c.topology_key),
                    &e,
                ));
            }
            let wu_path = format!("{p}.whenUnsatisfiable");
            match c.when_unsatisfiable.as_str() {
                "" => {
                    return Err(ConfigError::new(
                        wu_path,
                        "Required value: can not be empty",
                    ));
                }
                DO_NOT_SCHEDULE | SCHEDULE_ANYWAY => {}
                other => {
                    return Err(ConfigError::new(
                        wu_path,
                        format!(
                            "Unsupported value: {other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                        ),
                    ));
                }
            }
            if c.label_selector.is_some() {
                return Err(ConfigError::new(
                    format!("{p}.labelSelector"),
                    "Forbidden: constraint must not define a selector, as they deduced for each pod",
                ));
            }
            if args.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            }) {
                return Err(ConfigError::duplicate(
                    p,
                    &format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PATH: &str = "profiles[0].pluginConfig[2].args";

    fn parse(v: serde_json::Value) -> Result<PodTopologySpreadArgs, ConfigError> {
        PodTopologySpreadArgs::parse(Some(&v), PATH)
    }

    #[test]
    fn defaults() {
        let cases = [
            ("absent", None),
            ("empty object", Some(json!({}))),
            ("empty defaultingType", Some(json!({"defaultingType": ""}))),
            (
                "typed",
                Some(
                    json!({"kind": "PodTopologySpreadArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"}),
                ),
            ),
        ];
        for (name, v) in cases {
            let a = PodTopologySpreadArgs::parse(v.as_ref(), PATH).unwrap();
            assert_eq!(a.defaulting_type, SYSTEM_DEFAULTING, "{name}");
            assert!(a.system_defaulted(), "{name}");
            assert!(a.default_constraints.is_empty(), "{name}");
        }
    }

    #[test]
    fn list_defaulting_with_constraints() {
        let a = parse(json!({
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "minDomains": 3, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor", "matchLabelKeys": ["app"]},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
            ]
        }))
        .unwrap();
        assert!(!a.system_defaulted());
        assert_eq!(a.default_constraints.len(), 2);
        let c = &a.default_constraints[0];
        assert_eq!(c.max_skew, 1);
        assert_eq!(c.min_domains, Some(3));
        assert_eq!(c.node_affinity_policy.as_deref(), Some("Ignore"));
        assert_eq!(c.node_taints_policy.as_deref(), Some("Honor"));
        assert_eq!(c.match_label_keys, Some(vec!["app".to_string()]));
        // An empty List is allowed: pods without constraints get none.
        assert!(
            parse(json!({"defaultingType": "List"}))
                .unwrap()
                .default_constraints
                .is_empty()
        );
    }

    #[test]
    fn errors_name_the_field() {
        let zone = |extra: serde_json::Value| {
            let mut c =
                json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"});
            for (k, v) in extra.as_object().unwrap() {
                c[k] = v.clone();
            }
            c
        };
        let cases = [
            (
                "unknown defaulting type",
                json!({"defaultingType": "Foo"}),
                "defaultingType: Unsupported value: \"Foo\": supported values: \"System\", \"List\"",
            ),
            (
                "System with constraints (defaultingType left to its default)",
                json!({"defaultConstraints": [zone(json!({}))]}),
                "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty",
            ),
            (
                "System with constraints",
                json!({"defaultingType": "System", "defaultConstraints": [zone(json!({}))]}),
                "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty",
            ),
            (
                "maxSkew zero",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"maxSkew": 0}))]}),
                "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
            ),
            (
                "maxSkew negative",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"maxSkew": -1}))]}),
                "defaultConstraints[0].maxSkew: Invalid value: -1: not in valid range (0, inf)",
            ),
            (
                "topologyKey missing",
                json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}),
                "defaultConstraints[0].topologyKey: Required value: can not be empty",
            ),
            (
                "topologyKey invalid",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"topologyKey": "-zone"}))]}),
                "defaultConstraints[0].topologyKey: Invalid value: \"-zone\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ),
            (
                "whenUnsatisfiable missing",
                json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]}),
                "defaultConstraints[0].whenUnsatisfiable: Required value: can not be empty",
            ),
            (
                "whenUnsatisfiable unknown",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"whenUnsatisfiable": "Sometimes"}))]}),
                "defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Sometimes\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            ),
            (
                "labelSelector given",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"labelSelector": {"matchLabels": {"a": "b"}}}))]}),
                "defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod",
            ),
            (
                "empty labelSelector given",
                json!({"defaultingType": "List", "defaultConstraints": [zone(json!({"labelSelector": {}}))]}),
                "defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod",
            ),
            (
                "repeated key and action",
                json!({"defaultingType": "List", "defaultConstraints": [
                    zone(json!({})),
                    zone(json!({"whenUnsatisfiable": "ScheduleAnyway"})),
                    zone(json!({"maxSkew": 3}))
                ]}),
                "defaultConstraints[2]: Duplicate value: \"{zone, DoNotSchedule}\"",
            ),
            (
                "unknown field",
                json!({"defaultConstraint": []}),
                "defaultConstraint: unknown field `defaultConstraint`, expected `defaultConstraints` or `defaultingType`",
            ),
            (
                "wrong kind",
                json!({"kind": "NodeResourcesFitArgs"}),
                "kind: expected \"PodTopologySpreadArgs\", got \"NodeResourcesFitArgs\"",
            ),
        ];
        for (name, args, want) in cases {
            let got = parse(args).expect_err(name).to_string();
            assert_eq!(got, format!("{PATH}.{want}"), "{name}");
        }
    }
}
