//! VolumeBindingArgs: upstream's fields, defaults and validation.
//!
//! `shape` configures Score, which upstream runs only with the
//! StorageCapacityScoring feature gate (alpha, off by default in v1.36);
//! with the gate off, as here, any `shape` is refused.

use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};
use crate::plugins::node_resources::UtilizationShapePoint;

/// Upstream's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// VolumeBinding's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the claims to be bound.
    pub bind_timeout_seconds: i64,
    /// Score by storage utilization (StorageCapacityScoring only).
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        Self {
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            shape: None,
        }
    }
}

impl PluginArgs for VolumeBindingArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args(args, path, "VolumeBindingArgs")
    }
}

impl ValidateArgs for VolumeBindingArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        if self.bind_timeout_seconds < 0 {
            return Err(ConfigError::invalid(
                join_path(path, "bindTimeoutSeconds"),
                self.bind_timeout_seconds,
                "invalid BindTimeoutSeconds, should not be a negative value",
            ));
        }
        if let Some(shape) = &self.shape {
            let points: Vec<String> = shape
                .iter()
                .map(|p| format!("{{Utilization:{} Score:{}}}", p.utilization, p.score))
                .collect();
            return Err(ConfigError::invalid(
                join_path(path, "shape"),
                format!("[{}]", points.join(" ")),
                "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<VolumeBindingArgs, ConfigError> {
        VolumeBindingArgs::parse(Some(&v), "profiles[0].pluginConfig[0].args")
    }

    #[test]
    fn defaults_and_fields() {
        let cases = [
            ("nothing", None, 600),
            ("empty", Some(json!({})), 600),
            (
                "typed",
                Some(
                    json!({"kind": "VolumeBindingArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"}),
                ),
                600,
            ),
            ("set", Some(json!({"bindTimeoutSeconds": 30})), 30),
            ("zero", Some(json!({"bindTimeoutSeconds": 0})), 0),
        ];
        for (name, args, want) in cases {
            let a = VolumeBindingArgs::parse(args.as_ref(), "x").unwrap();
            assert_eq!(a.bind_timeout_seconds, want, "{name}");
            assert_eq!(a.shape, None, "{name}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "negative timeout",
                json!({"bindTimeoutSeconds": -1}),
                "profiles[0].pluginConfig[0].args.bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value",
            ),
            (
                "shape without the feature gate",
                json!({"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}),
                "profiles[0].pluginConfig[0].args.shape: Invalid value: [{Utilization:0 Score:0} {Utilization:100 Score:10}]: unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            ),
            (
                "unknown field",
                json!({"bindTimeout": 1}),
                "profiles[0].pluginConfig[0].args.bindTimeout: unknown field `bindTimeout`, expected `bindTimeoutSeconds` or `shape`",
            ),
            (
                "wrong kind",
                json!({"kind": "NodeResourcesFitArgs"}),
                "profiles[0].pluginConfig[0].args.kind: expected \"VolumeBindingArgs\", got \"NodeResourcesFitArgs\"",
            ),
        ];
        for (name, args, want) in cases {
            assert_eq!(parse(args).unwrap_err().to_string(), want, "{name}");
        }
    }
}
