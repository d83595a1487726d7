//! [`Registry`]: named plugin factories.
//!
//! A factory receives the plugin's typed arguments (parsed from the
//! profile's `pluginConfig`, defaulted and validated by the args type) and
//! the [`Handle`]. Names are unique.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::handle::Handle;
use super::interface::Plugin;
use crate::config::ConfigError;
use crate::features::Features;

/// A plugin's arguments: parsed from `pluginConfig[].args`, with defaults
/// for what is left out and validation naming the field path.
pub trait PluginArgs: Sized + Send + Sync + 'static {
    /// Parses `args` (`None`: all defaults). `path` is where the args are in
    /// the configuration, for error messages.
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError>;

    /// Parses `args` under the feature gates in force: args whose defaults
    /// or validation depend on a gate (as upstream's do, through the global
    /// gate) override this; the others are [`PluginArgs::parse`].
    fn parse_gated(
        args: Option<&serde_json::Value>,
        path: &str,
        features: &Features,
    ) -> Result<Self, ConfigError> {
        let _ = features;
        Self::parse(args, path)
    }
}

/// Arguments of plugins that take none: only `{}` (or nothing) is accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoArgs;

impl PluginArgs for NoArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        match args {
            None | Some(serde_json::Value::Null) => Ok(NoArgs),
            Some(serde_json::Value::Object(m))
                if m.keys().all(|k| k == "apiVersion" || k == "kind") =>
            {
                Ok(NoArgs)
            }
            Some(_) => Err(ConfigError::new(path, "this plugin takes no arguments")),
        }
    }
}

/// Validation for args types parsed with [`parse_args`].
pub trait ValidateArgs {
    /// Checks the args, naming fields relative to `path`.
    fn validate(&self, path: &str) -> Result<(), ConfigError>;
}

/// Parses args of a serde type with `Default` (for omitted fields, via
/// `#[serde(default)]`) and validates them. `apiVersion` and `kind` fields,
/// which upstream's typed args carry, are accepted; `kind` must be
/// `expected_kind`.
pub fn parse_args<T>(
    args: Option<&serde_json::Value>,
    path: &str,
    expected_kind: &str,
) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Default + ValidateArgs,
{
    let value = match args {
        None | Some(serde_json::Value::Null) => T::default(),
        Some(serde_json::Value::Object(map)) => {
            let mut map = map.clone();
            if let Some(kind) = map.remove("kind")
                && kind.as_str() != Some(expected_kind)
            {
                return Err(ConfigError::new(
                    format!("{path}.kind"),
                    format!("expected {expected_kind:?}, got {kind}"),
                ));
            }
            map.remove("apiVersion");
            serde_path_to_error::deserialize(serde_json::Value::Object(map))
                .map_err(|e| ConfigError::from_serde(path, e))?
        }
        Some(other) => {
            return Err(ConfigError::new(
                path,
                format!("must be an object, got {other}"),
            ));
        }
    };
    value.validate(path)?;
    Ok(value)
}

/// Builds a plugin from its raw args and the handle.
pub type PluginFactory = Arc<
    dyn Fn(Option<&serde_json::Value>, &str, &Handle) -> Result<Arc<dyn Plugin>, ConfigError>
        + Send
        + Sync,
>;

/// A name was registered twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a plugin named {0} already exists")]
pub struct DuplicatePlugin(pub String);

/// Plugin factories by name.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.factories.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a plugin whose factory takes typed args `A`.
    pub fn register<A, P, F>(&mut self, name: &str, factory: F) -> Result<(), DuplicatePlugin>
    where
        A: PluginArgs,
        P: Plugin,
        F: Fn(A, &Handle) -> Result<P, String> + Send + Sync + 'static,
    {
        let plugin_name = name.to_string();
        self.register_factory(
            name,
            Arc::new(move |args, path, handle| {
                let args = A::parse_gated(args, path, handle.features())?;
                let plugin = factory(args, handle).map_err(|e| {
                    ConfigError::new(path, format!("initializing plugin {plugin_name:?}: {e}"))
                })?;
                Ok(Arc::new(plugin) as Arc<dyn Plugin>)
            }),
        )
    }

    /// Registers a factory that handles its raw args itself.
    pub fn register_factory(
        &mut self,
        name: &str,
        factory: PluginFactory,
    ) -> Result<(), DuplicatePlugin> {
        if self.factories.contains_key(name) {
            return Err(DuplicatePlugin(name.to_string()));
        }
        self.factories.insert(name.to_string(), factory);
        Ok(())
    }

    /// Removes a plugin.
    pub fn unregister(&mut self, name: &str) -> bool {
        self.factories.remove(name).is_some()
    }

    /// Adds every plugin of `other`.
    pub fn merge(&mut self, other: Registry) -> Result<(), DuplicatePlugin> {
        for (name, f) in other.factories {
            self.register_factory(&name, f)?;
        }
        Ok(())
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// The factory for `name`.
    pub fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}
