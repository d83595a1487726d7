//! NodeAffinityArgs: upstream's one field and its validation.

use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};
use crate::model::{InvalidObject, NodeSelector, NodeSelectorTerm};
use crate::plugins::node_resources::validate_qualified_name;

/// NodeAffinity's arguments.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeAffinityArgs {
    /// Node affinity applied to every pod this profile schedules, on top of
    /// the pod's own: its required terms must hold as well (Filter), its
    /// preferred terms add to the pod's (Score).
    pub added_affinity: Option<core::NodeAffinity>,
}

/// The added affinity, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct AddedAffinity {
    /// Required terms; `None` when not given.
    pub required: Option<NodeSelector>,
    /// Preferred terms with their weights (zero weights and empty terms left
    /// out); `None` when the list is empty or absent.
    pub preferred: Option<Vec<(i32, NodeSelectorTerm)>>,
}

fn config_error(e: InvalidObject) -> ConfigError {
    ConfigError::new(e.path, e.message)
}

/// Checks what `metav1`'s label requirements check beyond the operator and
/// the number of values: keys are qualified names and values label values.
fn check_expressions(term: &core::NodeSelectorTerm, path: &str) -> Result<(), ConfigError> {
    for (i, e) in term.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        if let Err(msg) = validate_qualified_name(&e.key) {
            return Err(ConfigError::invalid(
                format!("{p}.key"),
                format!("{:?}", e.key),
                &msg,
            ));
        }
        for (j, v) in e.values.iter().flatten().enumerate() {
            if let Err(msg) = validate_label_value(v) {
                return Err(ConfigError::invalid(
                    format!("{p}.values[{j}]"),
                    format!("{v:?}"),
                    &msg,
                ));
            }
        }
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 alphanumerics, `-`, `_` or
/// `.`, starting and ending alphanumeric.
pub fn validate_label_value(v: &str) -> Result<(), String> {
    if v.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let b = v.as_bytes();
    let ok = b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
    if !ok {
        return Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    Ok(())
}

impl NodeAffinityArgs {
    /// Parses the added affinity, naming the field at fault relative to
    /// `path` as upstream does (`addedAffinity.requiredDuringScheduling...
    /// .nodeSelectorTerms[0].matchExpressions[0].values`,
    /// `addedAffinity.preferredDuringScheduling...[0].matchExpressions[0]...`).
    pub(super) fn parsed(&self, path: &str) -> Result<AddedAffinity, ConfigError> {
        let Some(a) = &self.added_affinity else {
            return Ok(AddedAffinity::default());
        };
        let mut out = AddedAffinity::default();
        if let Some(ns) = &a.required_during_scheduling_ignored_during_execution {
            let base = join_path(
                path,
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            );
            let parsed = NodeSelector::parse(ns, &base).map_err(config_error)?;
            for (i, t) in ns.node_selector_terms.iter().enumerate() {
                check_expressions(t, &format!("{base}.nodeSelectorTerms[{i}]"))?;
            }
            out.required = Some(parsed);
        }
        let preferred = a
            .preferred_during_scheduling_ignored_during_execution
            .as_deref()
            .unwrap_or_default();
        if !preferred.is_empty() {
            let base = join_path(
                path,
                "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            );
            let mut terms = Vec::new();
            for (i, t) in preferred.iter().enumerate() {
                let empty = t
                    .preference
                    .match_expressions
                    .as_ref()
                    .is_none_or(Vec::is_empty)
                    && t.preference.match_fields.as_ref().is_none_or(Vec::is_empty);
                if t.weight == 0 || empty {
                    continue;
                }
                let p = format!("{base}[{i}]");
                let term = NodeSelectorTerm::parse(&t.preference, &p).map_err(config_error)?;
                check_expressions(&t.preference, &p)?;
                terms.push((t.weight, term));
            }
            out.preferred = Some(terms);
        }
        Ok(out)
    }
}

impl PluginArgs for NodeAffinityArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "NodeAffinityArgs")
    }
}

impl ValidateArgs for NodeAffinityArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.parsed(path).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PATH: &str = "profiles[0].pluginConfig[0].args";

    fn parse(v: serde_json::Value) -> Result<NodeAffinityArgs, ConfigError> {
        NodeAffinityArgs::parse(Some(&v), PATH)
    }

    #[test]
    fn defaults_and_valid_args() {
        let a = NodeAffinityArgs::parse(None, PATH).unwrap();
        assert_eq!(a, NodeAffinityArgs::default());
        assert_eq!(a.parsed(PATH).unwrap(), AddedAffinity::default());

        let a = parse(json!({
            "kind": "NodeAffinityArgs",
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}},
                    {"weight": 0, "preference": {"matchExpressions": [{"key": "ignored", "operator": "Exists"}]}},
                    {"weight": 3, "preference": {}}
                ]
            }
        }))
        .unwrap();
        let parsed = a.parsed(PATH).unwrap();
        assert_eq!(parsed.required.unwrap().terms.len(), 2);
        let preferred = parsed.preferred.unwrap();
        assert_eq!(preferred.len(), 1, "zero weights and empty terms left out");
        assert_eq!(preferred[0].0, 5);

        let only_zero = parse(json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
        ]}}))
        .unwrap();
        assert_eq!(
            only_zero.parsed(PATH).unwrap().preferred,
            Some(vec![]),
            "a non-empty list is kept even if every term is dropped"
        );
    }

    #[test]
    fn errors_name_the_field() {
        let req = "profiles[0].pluginConfig[0].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        let pref = "profiles[0].pluginConfig[0].args.addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[1]";
        let cases = [
            (
                "unknown operator",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}),
                format!("{req}.matchExpressions[0].operator"),
            ),
            (
                "In without values",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In"}]}]}}}),
                format!("{req}.matchExpressions[0].values"),
            ),
            (
                "Exists with values",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]}]}}}),
                format!("{req}.matchExpressions[0].values"),
            ),
            (
                "Gt with a non-integer",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["many"]}]}]}}}),
                format!("{req}.matchExpressions[0].values[0]"),
            ),
            (
                "Lt with two values",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["1", "2"]}]}]}}}),
                format!("{req}.matchExpressions[0].values"),
            ),
            (
                "invalid key",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "-zone", "operator": "Exists"}]}]}}}),
                format!("{req}.matchExpressions[0].key"),
            ),
            (
                "invalid value",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b c"]}]}]}}}),
                format!("{req}.matchExpressions[0].values[1]"),
            ),
            (
                "field selector with two values",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}),
                format!("{req}.matchFields[0].values"),
            ),
            (
                "field selector with Exists",
                json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]}}}),
                format!("{req}.matchFields[0].values"),
            ),
            (
                "preferred term",
                json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}},
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "b", "operator": "In"}]}}]}}),
                format!("{pref}.matchExpressions[0].values"),
            ),
        ];
        for (name, v, want_path) in cases {
            let err = parse(v).unwrap_err();
            assert_eq!(err.path, want_path, "{name}: {err}");
        }
        let unknown = parse(json!({"addedAfinity": {}})).unwrap_err();
        assert!(unknown.to_string().contains("addedAfinity"), "{unknown}");
        let zero_weight_invalid = parse(
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": [{"key": "b", "operator": "In"}]}}]}}),
        );
        assert!(
            zero_weight_invalid.is_ok(),
            "terms of weight 0 are not parsed, as upstream"
        );
    }

    #[test]
    fn label_values() {
        for (v, ok) in [
            ("", true),
            ("a", true),
            ("a-b_c.d", true),
            ("-a", false),
            ("a.", false),
            ("a b", false),
            (&"x".repeat(63), true),
            (&"x".repeat(64), false),
        ] {
            assert_eq!(validate_label_value(v).is_ok(), ok, "{v:?}");
        }
    }
}
