//! `kubescheduler.config.k8s.io/v1` as written in YAML: every field
//! optional, unknown fields rejected. Field meanings are upstream's (see
//! the KubeSchedulerConfiguration v1 reference); [`super::resolve`] applies
//! the defaults and validation.

#![allow(missing_docs)]

use serde::Deserialize;

/// The raw KubeSchedulerConfiguration document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawConfiguration {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub parallelism: Option<i32>,
    pub leader_election: Option<RawLeaderElection>,
    pub client_connection: Option<RawClientConnection>,
    pub enable_profiling: Option<bool>,
    pub enable_contention_profiling: Option<bool>,
    pub percentage_of_nodes_to_score: Option<i32>,
    pub pod_initial_backoff_seconds: Option<i64>,
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub profiles: Vec<RawProfile>,
    #[serde(default)]
    pub extenders: Vec<super::extenders::RawHttpExtender>,
    pub delay_cache_until_active: Option<bool>,
    /// berth's own: remote (streaming gRPC) extenders.
    #[serde(default)]
    pub berth_extenders: Vec<super::extenders::RawBerthExtender>,
}

/// componentbaseconfig.LeaderElectionConfiguration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLeaderElection {
    pub leader_elect: Option<bool>,
    pub lease_duration: Option<String>,
    pub renew_deadline: Option<String>,
    pub retry_period: Option<String>,
    pub resource_lock: Option<String>,
    pub resource_name: Option<String>,
    pub resource_namespace: Option<String>,
}

/// componentbaseconfig.ClientConnectionConfiguration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawClientConnection {
    pub kubeconfig: Option<String>,
    pub accept_content_types: Option<String>,
    pub content_type: Option<String>,
    pub qps: Option<f32>,
    pub burst: Option<i32>,
}

/// One scheduling profile.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawProfile {
    pub scheduler_name: Option<String>,
    pub percentage_of_nodes_to_score: Option<i32>,
    pub plugins: Option<RawPlugins>,
    #[serde(default)]
    pub plugin_config: Vec<RawPluginConfig>,
}

/// The plugin sets of a profile, per extension point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPlugins {
    pub pre_enqueue: Option<RawPluginSet>,
    pub queue_sort: Option<RawPluginSet>,
    pub pre_filter: Option<RawPluginSet>,
    pub filter: Option<RawPluginSet>,
    pub post_filter: Option<RawPluginSet>,
    pub pre_score: Option<RawPluginSet>,
    pub score: Option<RawPluginSet>,
    pub reserve: Option<RawPluginSet>,
    pub permit: Option<RawPluginSet>,
    pub pre_bind: Option<RawPluginSet>,
    pub bind: Option<RawPluginSet>,
    pub post_bind: Option<RawPluginSet>,
    pub pod_group_post_filter: Option<RawPluginSet>,
    pub multi_point: Option<RawPluginSet>,
}

/// Enabled and disabled plugins at one extension point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPluginSet {
    #[serde(default)]
    pub enabled: Vec<RawPlugin>,
    #[serde(default)]
    pub disabled: Vec<RawPlugin>,
}

/// A plugin reference.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPlugin {
    pub name: String,
    pub weight: Option<i32>,
}

/// Arguments for one plugin.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPluginConfig {
    pub name: String,
    pub args: Option<serde_json::Value>,
}
