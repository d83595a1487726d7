//! VolumeBindingArgs: upstream's fields, defaults and validation.
//!
//! `shape` configures Score, which upstream runs only with the
//! StorageCapacityScoring feature gate (beta, on by default in v1.37): with
//! it, `shape` defaults to `[{utilization: 0, score: 10}, {utilization:
//! 100, score: 0}]` (emptier nodes first) and is validated as NodeResourcesFit's
//! RequestedToCapacityRatio shape; without it, any `shape` is refused.

use serde::Deserialize;

use crate::config::{ConfigError, join_path};
use crate::features::Features;
use crate::framework::{PluginArgs, ValidateArgs, parse_args};
use crate::plugins::node_resources::{UtilizationShapePoint, validate_shape};

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

/// `shape`'s default under StorageCapacityScoring.
pub fn default_shape() -> Vec<UtilizationShapePoint> {
    vec![
        UtilizationShapePoint {
            utilization: 0,
            score: 10,
        },
        UtilizationShapePoint {
            utilization: 100,
            score: 0,
        },
    ]
}

impl PluginArgs for VolumeBindingArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        Self::parse_gated(args, path, &Features::default())
    }

    fn parse_gated(
        args: Option<&serde_json::Value>,
        path: &str,
        features: &Features,
    ) -> Result<Self, ConfigError> {
        let mut a: Self = parse_args(args, path, "VolumeBindingArgs")?;
        match (&a.shape, features.enable_storage_capacity_scoring) {
            (None, true) => a.shape = Some(default_shape()),
            (Some(shape), true) => validate_shape(shape, &join_path(path, "shape"))?,
            (Some(shape), false) => {
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
            (None, false) => {}
        }
        Ok(a)
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v136() -> Features {
        Features {
            enable_storage_capacity_scoring: false,
            ..Features::default()
        }
    }

    fn parse(v: serde_json::Value) -> Result<VolumeBindingArgs, ConfigError> {
        VolumeBindingArgs::parse_gated(Some(&v), "profiles[0].pluginConfig[0].args", &v136())
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
            let a = VolumeBindingArgs::parse_gated(args.as_ref(), "x", &v136()).unwrap();
            assert_eq!(a.bind_timeout_seconds, want, "{name}");
            assert_eq!(a.shape, None, "{name}");
            // v1.37 (StorageCapacityScoring on): the default shape.
            let a = VolumeBindingArgs::parse(args.as_ref(), "x").unwrap();
            assert_eq!(a.bind_timeout_seconds, want, "{name}");
            assert_eq!(a.shape, Some(default_shape()), "{name}");
        }
    }

    #[test]
    fn shape_under_storage_capacity_scoring() {
        let path = "profiles[0].pluginConfig[0].args";
        let given =
            json!({"shape": [{"utilization": 0, "score": 0}, {"utilization": 80, "score": 10}]});
        let a = VolumeBindingArgs::parse(Some(&given), path).unwrap();
        assert_eq!(
            a.shape,
            Some(vec![
                UtilizationShapePoint {
                    utilization: 0,
                    score: 0
                },
                UtilizationShapePoint {
                    utilization: 80,
                    score: 10
                }
            ])
        );
        let cases = [
            (
                json!({"shape": []}),
                "profiles[0].pluginConfig[0].args.shape: Required value: at least one point must be specified",
            ),
            (
                json!({"shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}),
                "profiles[0].pluginConfig[0].args.shape[1].utilization: Invalid value: 50: values must be sorted in increasing order",
            ),
            (
                json!({"shape": [{"utilization": 0, "score": 11}]}),
                "profiles[0].pluginConfig[0].args.shape[0].score: Invalid value: 11: not in valid range [0, 10]",
            ),
        ];
        for (args, want) in cases {
            let e = VolumeBindingArgs::parse(Some(&args), path).unwrap_err();
            assert_eq!(e.to_string(), want);
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
