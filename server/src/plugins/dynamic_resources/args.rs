//! DynamicResourcesArgs: upstream's fields, defaults and validation.

use std::time::Duration;

use serde::Deserialize;

use crate::config::parse_go_duration;
use crate::config::{ConfigError, join_path};
use crate::framework::{PluginArgs, ValidateArgs, parse_args};

/// Upstream's default `filterTimeout`: how long Filter may search one
/// node's devices (DRASchedulerFilterTimeout, on by default).
pub const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's default `bindingTimeout`: how long PreBind waits for
/// devices' binding conditions (DRADeviceBindingConditions).
pub const DEFAULT_BINDING_TIMEOUT: Duration = Duration::from_secs(600);

/// DynamicResources' arguments, as written (durations in Go's syntax).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DynamicResourcesArgs {
    /// How long Filter may spend allocating for one node; `0s` turns the
    /// limit off.
    pub filter_timeout: Option<String>,
    /// How long PreBind waits for binding conditions.
    pub binding_timeout: Option<String>,
}

impl DynamicResourcesArgs {
    /// The filter timeout (`None`: no limit).
    pub fn filter_timeout(&self) -> Option<Duration> {
        match &self.filter_timeout {
            None => Some(DEFAULT_FILTER_TIMEOUT),
            Some(t) => parse_go_duration(t).ok().filter(|d| !d.is_zero()),
        }
    }

    /// The binding timeout.
    pub fn binding_timeout(&self) -> Duration {
        self.binding_timeout
            .as_deref()
            .and_then(|t| parse_go_duration(t).ok())
            .unwrap_or(DEFAULT_BINDING_TIMEOUT)
    }
}

impl PluginArgs for DynamicResourcesArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args(args, path, "DynamicResourcesArgs")
    }
}

impl ValidateArgs for DynamicResourcesArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        if let Some(t) = &self.filter_timeout {
            parse_go_duration(t).map_err(|_| {
                ConfigError::invalid(
                    join_path(path, "filterTimeout"),
                    t,
                    "must be zero or a positive duration",
                )
            })?;
        }
        if let Some(t) = &self.binding_timeout {
            match parse_go_duration(t) {
                Ok(d) if !d.is_zero() => {}
                _ => {
                    return Err(ConfigError::invalid(
                        join_path(path, "bindingTimeout"),
                        t,
                        "must be positive",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_validation() {
        let d = DynamicResourcesArgs::parse(None, "args").unwrap();
        assert_eq!(d.filter_timeout(), Some(DEFAULT_FILTER_TIMEOUT));
        assert_eq!(d.binding_timeout(), DEFAULT_BINDING_TIMEOUT);
        let off =
            DynamicResourcesArgs::parse(Some(&json!({"filterTimeout": "0s"})), "args").unwrap();
        assert_eq!(off.filter_timeout(), None);
        let set = DynamicResourcesArgs::parse(
            Some(&json!({"filterTimeout": "2s", "bindingTimeout": "1m"})),
            "args",
        )
        .unwrap();
        assert_eq!(set.filter_timeout(), Some(Duration::from_secs(2)));
        assert_eq!(set.binding_timeout(), Duration::from_secs(60));
        let err = DynamicResourcesArgs::parse(Some(&json!({"bindingTimeout": "0s"})), "args")
            .unwrap_err()
            .to_string();
        assert!(err.contains("args.bindingTimeout"), "{err}");
        let err = DynamicResourcesArgs::parse(Some(&json!({"filterTimeout": "-1s"})), "args")
            .unwrap_err()
            .to_string();
        assert!(err.contains("args.filterTimeout"), "{err}");
        assert!(DynamicResourcesArgs::parse(Some(&json!({"nope": 1})), "args").is_err());
    }
}
