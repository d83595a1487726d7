//! KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`): parse,
//! default, validate. A configuration that works for kube-scheduler works
//! here; every error names the field path.
//!
//! Plugin lists are merged with the defaults as upstream merges them: per
//! extension point (and `multiPoint`), the default plugins stay in order
//! unless disabled (`"*"` disables all), a default plugin the user enables
//! again is replaced in place (e.g. to change its weight), and the user's
//! other plugins follow. Plugin arguments are parsed and validated by each
//! plugin's typed `Args` when the profile is built (by
//! the framework's plugin registry).

mod defaults;
mod duration;
mod error;
pub mod extenders;
pub mod plugin_names;
mod points;
mod types;

use std::collections::HashSet;
use std::time::Duration;

pub use defaults::*;
pub use duration::{go_duration, parse_go_duration};
pub use error::{ConfigError, join_path};
pub use extenders::{ExtenderConfig, HttpExtenderConfig, ManagedResource};
pub use points::ExtensionPoint;
pub use types::*;

use crate::features::FeatureGates;

/// The only apiVersion accepted.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The kind accepted.
pub const KIND: &str = "KubeSchedulerConfiguration";

/// client-go's leader election JitterFactor: a standby retries acquiring
/// the Lease every retryPeriod × up to this factor, so the renew deadline
/// must leave room for one such retry.
pub const JITTER_FACTOR: f64 = 1.2;

/// A plugin enabled or disabled at an extension point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Its Score weight, if given.
    pub weight: Option<i32>,
    /// Where it was configured (`profiles[0].plugins.filter.enabled[1]`), or
    /// where the default came in.
    pub path: String,
}

/// The plugins enabled and disabled at one extension point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSet {
    /// Enabled, in order.
    pub enabled: Vec<PluginRef>,
    /// Disabled (`"*"` for all).
    pub disabled: Vec<PluginRef>,
}

impl PluginSet {
    /// Whether `name` (or `"*"`) is disabled.
    pub fn is_disabled(&self, name: &str) -> bool {
        self.disabled
            .iter()
            .any(|p| p.name == name || p.name == "*")
    }

    /// Whether every plugin is disabled.
    pub fn all_disabled(&self) -> bool {
        self.disabled.iter().any(|p| p.name == "*")
    }
}

/// Where a [`PinnedPlugin`] goes in its point's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Before every plugin the profile enables there.
    First,
    /// After every plugin the profile enables there.
    Last,
}

/// A plugin the scheduler places at a point of every profile, outside the
/// profile's own plugin sets: upstream's HTTP extenders, which kube-scheduler
/// consults after all Filter plugins, beside the Score plugins, and before
/// the Bind plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPlugin {
    /// The point.
    pub point: ExtensionPoint,
    /// The plugin (its path names the configuration entry it comes from).
    pub plugin: PluginRef,
    /// Where in the point's list.
    pub placement: Placement,
    /// Its Score weight (Score only).
    pub weight: i64,
}

/// A profile's plugin sets after merging with the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugins {
    points: [PluginSet; ExtensionPoint::ALL.len()],
    /// Plugins enabled at every point they implement.
    pub multi_point: PluginSet,
    /// Plugins placed around the profile's own, in order.
    pub pinned: Vec<PinnedPlugin>,
}

impl Plugins {
    /// The set at one extension point.
    pub fn get(&self, point: ExtensionPoint) -> &PluginSet {
        // The points that are not profile lists have no set: empty.
        static NONE: PluginSet = PluginSet {
            enabled: Vec::new(),
            disabled: Vec::new(),
        };
        self.points.get(point as usize).unwrap_or(&NONE)
    }

    fn get_mut(&mut self, point: ExtensionPoint) -> &mut PluginSet {
        &mut self.points[point as usize]
    }
}

/// Arguments for one plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The plugin's name.
    pub name: String,
    /// The args as given (None: defaults).
    pub args: Option<serde_json::Value>,
    /// Where the args are (`profiles[0].pluginConfig[1].args`).
    pub path: String,
}

/// One scheduling profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Pods with this `spec.schedulerName` are scheduled by this profile.
    pub scheduler_name: String,
    /// Overrides the global percentage for this profile.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Plugin sets, merged with the defaults.
    pub plugins: Plugins,
    /// Plugin arguments.
    pub plugin_config: Vec<PluginConfig>,
    /// `profiles[i]`.
    pub path: String,
}

impl Profile {
    /// The args given for `plugin`, with their path.
    pub fn args_for(&self, plugin: &str) -> Option<&PluginConfig> {
        self.plugin_config.iter().find(|c| c.name == plugin)
    }
}

/// Leader election settings (used in kube mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Whether to elect a leader before scheduling.
    pub leader_elect: bool,
    /// How long a lease is valid.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
    /// Only `leases` is supported.
    pub resource_lock: String,
    /// The Lease's name (berth's default is `berth`, so that it can run
    /// beside kube-scheduler without taking its lease).
    pub resource_name: String,
    /// The Lease's namespace.
    pub resource_namespace: String,
}

impl LeaderElection {
    /// Checks the settings as upstream does (component-base's validation,
    /// plus client-go's check that the renew deadline outlasts a jittered
    /// retry). Nothing is checked when `leaderElect` is false. Used after
    /// flags override the file, too.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.leader_elect {
            return Ok(());
        }
        let go = go_duration;
        for (field, d) in [
            ("leaseDuration", self.lease_duration),
            ("renewDeadline", self.renew_deadline),
            ("retryPeriod", self.retry_period),
        ] {
            if d.is_zero() {
                return Err(ConfigError::invalid(
                    format!("leaderElection.{field}"),
                    go(d),
                    "must be greater than zero",
                ));
            }
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::invalid(
                "leaderElection.leaseDuration",
                go(self.lease_duration),
                "LeaseDuration must be greater than RenewDeadline",
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::invalid(
                "leaderElection.renewDeadline",
                go(self.renew_deadline),
                "renewDeadline must be greater than retryPeriod*JitterFactor (1.2)",
            ));
        }
        if self.resource_lock != "leases" {
            return Err(ConfigError::invalid(
                "leaderElection.resourceLock",
                &self.resource_lock,
                "resourceLock value must be \"leases\"",
            ));
        }
        for (field, v) in [
            ("resourceName", &self.resource_name),
            ("resourceNamespace", &self.resource_namespace),
        ] {
            if v.is_empty() {
                return Err(ConfigError::invalid(
                    format!("leaderElection.{field}"),
                    "",
                    &format!("{field} is required"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_lock: "leases".into(),
            resource_name: "berth".into(),
            resource_namespace: "kube-system".into(),
        }
    }
}

/// The JSON content type, which berth reads and writes.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// The protobuf content type, upstream's default for the scheduler.
pub const CONTENT_TYPE_PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `clientConnection` (componentbaseconfig.ClientConnectionConfiguration),
/// with kube-scheduler's defaults: 50 requests per second, bursts of 100.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    /// The kubeconfig file, if given.
    pub kubeconfig: Option<String>,
    /// The Accept header berth sends (empty: the content type).
    pub accept_content_types: String,
    /// The content type berth sends. berth speaks JSON only; upstream's
    /// protobuf is accepted and served as JSON (berthd says so at start).
    pub content_type: String,
    /// Requests per second each client may send on average (client-go's
    /// token bucket); negative: no limit.
    pub qps: f32,
    /// How many requests a client may send at once above `qps`.
    pub burst: i32,
}

impl Default for ClientConnection {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            accept_content_types: String::new(),
            content_type: CONTENT_TYPE_JSON.into(),
            qps: 50.0,
            burst: 100,
        }
    }
}

impl ClientConnection {
    /// Checks the values as upstream's validation does, with berth's own
    /// rule that the content types be ones it can speak.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.burst < 0 {
            return Err(ConfigError::invalid(
                "clientConnection.burst",
                self.burst,
                "must be non-negative",
            ));
        }
        if !self.qps.is_finite() {
            return Err(ConfigError::invalid(
                "clientConnection.qps",
                self.qps,
                "must be a finite number",
            ));
        }
        if ![CONTENT_TYPE_JSON, CONTENT_TYPE_PROTOBUF].contains(&self.content_type.as_str()) {
            return Err(ConfigError::new(
                "clientConnection.contentType",
                format!(
                    "Unsupported value: {:?}: supported values: {CONTENT_TYPE_JSON:?}, {CONTENT_TYPE_PROTOBUF:?}",
                    self.content_type
                ),
            ));
        }
        for (i, t) in self
            .accept_content_types
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .enumerate()
        {
            if ![CONTENT_TYPE_JSON, CONTENT_TYPE_PROTOBUF].contains(&t) {
                return Err(ConfigError::new(
                    "clientConnection.acceptContentTypes",
                    format!(
                        "Unsupported value: {t:?} (entry {i}): supported values: {CONTENT_TYPE_JSON:?}, {CONTENT_TYPE_PROTOBUF:?}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether protobuf was asked for (berth then speaks JSON).
    pub fn wants_protobuf(&self) -> bool {
        self.content_type == CONTENT_TYPE_PROTOBUF
            || self.accept_content_types.contains(CONTENT_TYPE_PROTOBUF)
    }
}

fn resolve_client_connection(raw: RawClientConnection) -> Result<ClientConnection, ConfigError> {
    let d = ClientConnection::default();
    // Upstream defaults zero values, so `qps: 0` and `burst: 0` mean the
    // defaults, as in kube-scheduler.
    let c = ClientConnection {
        kubeconfig: raw.kubeconfig.filter(|k| !k.is_empty()),
        accept_content_types: raw.accept_content_types.unwrap_or_default(),
        content_type: raw
            .content_type
            .filter(|t| !t.is_empty())
            .unwrap_or(d.content_type),
        qps: raw.qps.filter(|q| *q != 0.0).unwrap_or(d.qps),
        burst: raw.burst.filter(|b| *b != 0).unwrap_or(d.burst),
    };
    c.validate()?;
    Ok(c)
}

/// The validated, defaulted configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// Threads for Filter/Score fan-out (capped at the machine's cores).
    pub parallelism: usize,
    /// Percentage of nodes to find feasible before stopping; 0: adaptive.
    pub percentage_of_nodes_to_score: i32,
    /// The first backoff.
    pub pod_initial_backoff: Duration,
    /// The backoff's cap.
    pub pod_max_backoff: Duration,
    /// The profiles, by schedulerName.
    pub profiles: Vec<Profile>,
    /// Leader election.
    pub leader_election: LeaderElection,
    /// How berth talks to the API server (kube mode).
    pub client_connection: ClientConnection,
    /// Remote (streaming gRPC) extenders, each a plugin by its name.
    pub extenders: Vec<ExtenderConfig>,
    /// kube-scheduler's HTTP extenders.
    pub http_extenders: Vec<HttpExtenderConfig>,
    /// The feature gates in force (`--feature-gates`; not a field of the
    /// file, as for kube-scheduler): they choose the default plugins, and
    /// plugins read them once when they are built.
    pub feature_gates: FeatureGates,
}

/// Parses a KubeSchedulerConfiguration YAML (or JSON) document.
/// `plugin_known` tells which plugin names exist, so that defaults only
/// enable existing plugins.
pub fn parse(
    text: &str,
    plugin_known: &dyn Fn(&str) -> bool,
) -> Result<SchedulerConfig, ConfigError> {
    parse_gated(text, plugin_known, &FeatureGates::default())
}

/// [`parse`] under the given feature gates.
pub fn parse_gated(
    text: &str,
    plugin_known: &dyn Fn(&str) -> bool,
    gates: &FeatureGates,
) -> Result<SchedulerConfig, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(text);
    let raw: RawConfiguration = serde_path_to_error::deserialize(de)
        .map_err(|e| not_a_configuration(ConfigError::from_serde("", e)))?;
    resolve_gated(raw, plugin_known, gates)
}

/// Words the errors of a document that is not a configuration at all (not
/// YAML, or not a mapping of fields) as such, instead of the decoder's
/// `?: invalid type: map, expected field identifier`.
fn not_a_configuration(e: ConfigError) -> ConfigError {
    const WHAT: &str = "not a KubeSchedulerConfiguration";
    if e.path == "?" {
        let found = e
            .message
            .strip_prefix("invalid type: ")
            .and_then(|m| m.split_once(", expected field identifier"))
            .map_or("not a string", |(t, _)| t);
        let at = e.message.rfind(" (line ").map_or("", |i| &e.message[i..]);
        return ConfigError::new(
            "",
            format!("{WHAT}: a mapping key is itself a {found}, not a field name{at}"),
        );
    }
    if !e.path.is_empty() {
        return e;
    }
    if let Some(rest) = e.message.strip_prefix("invalid type: ")
        && let Some((found, _)) = rest.split_once(", expected struct RawConfiguration")
    {
        return ConfigError::new(
            "",
            format!(
                "{WHAT}: expected a mapping of its fields (apiVersion, kind, profiles, ...), found {found}"
            ),
        );
    }
    if e.message.contains("while scanning") || e.message.contains("while parsing") {
        return ConfigError::new("", format!("not valid YAML: {}", e.message));
    }
    e
}

/// The configuration used when none is given: one `default-scheduler`
/// profile with the default plugins.
pub fn default_config(plugin_known: &dyn Fn(&str) -> bool) -> SchedulerConfig {
    default_config_gated(plugin_known, &FeatureGates::default())
}

/// [`default_config`] under the given feature gates.
pub fn default_config_gated(
    plugin_known: &dyn Fn(&str) -> bool,
    gates: &FeatureGates,
) -> SchedulerConfig {
    let raw = RawConfiguration {
        api_version: Some(API_VERSION.into()),
        kind: Some(KIND.into()),
        ..Default::default()
    };
    resolve_gated(raw, plugin_known, gates).expect("the default configuration is valid")
}

/// Defaults and validates a parsed document (under v1.37's default gates).
pub fn resolve(
    raw: RawConfiguration,
    plugin_known: &dyn Fn(&str) -> bool,
) -> Result<SchedulerConfig, ConfigError> {
    resolve_gated(raw, plugin_known, &FeatureGates::default())
}

/// Defaults and validates a parsed document under the given gates.
pub fn resolve_gated(
    raw: RawConfiguration,
    plugin_known: &dyn Fn(&str) -> bool,
    gates: &FeatureGates,
) -> Result<SchedulerConfig, ConfigError> {
    match raw.api_version.as_deref() {
        Some(API_VERSION) => {}
        None => return Err(ConfigError::required("apiVersion")),
        Some(other) => {
            return Err(ConfigError::new(
                "apiVersion",
                format!("Unsupported value: {other:?}: supported values: {API_VERSION:?}"),
            ));
        }
    }
    match raw.kind.as_deref() {
        Some(KIND) => {}
        None => return Err(ConfigError::required("kind")),
        Some(other) => {
            return Err(ConfigError::new(
                "kind",
                format!("Unsupported value: {other:?}: supported values: {KIND:?}"),
            ));
        }
    }
    let http_extenders = extenders::resolve_http_extenders(raw.extenders)?;
    let remote = extenders::resolve_berth_extenders(raw.berth_extenders, plugin_known)?;
    // Remote extenders are plugins too, under their configured names.
    let known = |name: &str| plugin_known(name) || remote.iter().any(|e| e.name == name);
    let plugin_known: &dyn Fn(&str) -> bool = &known;

    let parallelism = raw.parallelism.unwrap_or(DEFAULT_PARALLELISM);
    if parallelism <= 0 {
        return Err(ConfigError::invalid(
            "parallelism",
            parallelism,
            "should be an integer value greater than zero",
        ));
    }
    let percentage = raw.percentage_of_nodes_to_score.unwrap_or(0);
    validate_percentage("percentageOfNodesToScore", percentage)?;

    let initial = raw
        .pod_initial_backoff_seconds
        .unwrap_or(DEFAULT_POD_INITIAL_BACKOFF_SECONDS);
    if initial <= 0 {
        return Err(ConfigError::invalid(
            "podInitialBackoffSeconds",
            initial,
            "must be greater than 0",
        ));
    }
    let max = raw
        .pod_max_backoff_seconds
        .unwrap_or(DEFAULT_POD_MAX_BACKOFF_SECONDS);
    if max < initial {
        return Err(ConfigError::invalid(
            "podMaxBackoffSeconds",
            max,
            "must be greater than or equal to PodInitialBackoffSeconds",
        ));
    }

    let leader_election = resolve_leader_election(raw.leader_election.unwrap_or_default())?;

    let mut raw_profiles = raw.profiles;
    if raw_profiles.is_empty() {
        raw_profiles.push(RawProfile::default());
    }
    if raw_profiles.len() == 1 && raw_profiles[0].scheduler_name.is_none() {
        raw_profiles[0].scheduler_name = Some(DEFAULT_SCHEDULER_NAME.into());
    }
    let mut names = HashSet::new();
    let mut profiles = Vec::with_capacity(raw_profiles.len());
    for (i, rp) in raw_profiles.into_iter().enumerate() {
        let path = format!("profiles[{i}]");
        let name = match rp.scheduler_name.as_deref() {
            None | Some("") => return Err(ConfigError::required(format!("{path}.schedulerName"))),
            Some(n) => n.to_string(),
        };
        if !names.insert(name.clone()) {
            return Err(ConfigError::duplicate(
                format!("{path}.schedulerName"),
                &name,
            ));
        }
        if let Some(p) = rp.percentage_of_nodes_to_score {
            validate_percentage(&format!("{path}.percentageOfNodesToScore"), p)?;
        }
        let plugins = resolve_plugins(rp.plugins.unwrap_or_default(), &path, plugin_known, gates);
        let mut seen = HashSet::new();
        let mut plugin_config = Vec::new();
        for (j, pc) in rp.plugin_config.into_iter().enumerate() {
            let pc_path = format!("{path}.pluginConfig[{j}]");
            if !seen.insert(pc.name.clone()) {
                return Err(ConfigError::duplicate(pc_path, &pc.name));
            }
            if !plugin_known(&pc.name) {
                return Err(ConfigError::new(
                    format!("{pc_path}.name"),
                    format!("plugin {:?} does not exist", pc.name),
                ));
            }
            plugin_config.push(PluginConfig {
                name: pc.name,
                args: pc.args,
                path: format!("{pc_path}.args"),
            });
        }
        profiles.push(Profile {
            scheduler_name: name,
            percentage_of_nodes_to_score: rp.percentage_of_nodes_to_score,
            plugins,
            plugin_config,
            path,
        });
    }

    // A remote extender enabled at a point its configuration does not list
    // would only fail once the profile is built (after dialing it): name
    // the list to change here.
    for p in &profiles {
        for point in ExtensionPoint::ALL {
            for r in &p.plugins.get(point).enabled {
                let Some((i, e)) = remote.iter().enumerate().find(|(_, e)| e.name == r.name) else {
                    continue;
                };
                if !e.points.contains(&point) {
                    let listed: Vec<&str> = e.points.iter().map(|p| p.field()).collect();
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} does not extend {} plugin: berthExtenders[{i}].points is [{}]; add {} to it (and to the points the extender's Hello declares) or remove the plugin from this list",
                            r.name,
                            point.interface(),
                            listed.join(", "),
                            point.field()
                        ),
                    ));
                }
            }
        }
    }

    // Upstream's HTTP extenders apply to every profile: their Filter after
    // all Filter plugins (in configuration order), their scores beside the
    // Score plugins', and their binding before the Bind plugins.
    for p in &mut profiles {
        p.plugins.pinned = pinned_http_extenders(&http_extenders);
    }

    // Resources extenders manage and the scheduler should ignore are
    // NodeResourcesFit's ignoredResources in every profile, as upstream
    // arranges it.
    let ignored: Vec<&str> = http_extenders
        .iter()
        .flat_map(|e| &e.managed_resources)
        .chain(remote.iter().flat_map(|e| &e.managed_resources))
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| r.name.as_str())
        .collect();
    if !ignored.is_empty() {
        for p in &mut profiles {
            add_ignored_resources(p, &ignored)?;
        }
    }

    Ok(SchedulerConfig {
        extenders: remote,
        http_extenders,
        parallelism: parallelism as usize,
        percentage_of_nodes_to_score: percentage,
        pod_initial_backoff: Duration::from_secs(initial as u64),
        pod_max_backoff: Duration::from_secs(max as u64),
        profiles,
        leader_election,
        client_connection: resolve_client_connection(raw.client_connection.unwrap_or_default())?,
        feature_gates: gates.clone(),
    })
}

/// Where each HTTP extender's plugin goes in a profile.
fn pinned_http_extenders(extenders: &[HttpExtenderConfig]) -> Vec<PinnedPlugin> {
    let mut out = Vec::new();
    for e in extenders {
        let verbs = [
            (&e.filter_verb, ExtensionPoint::Filter, Placement::Last),
            (&e.prioritize_verb, ExtensionPoint::Score, Placement::Last),
            (&e.bind_verb, ExtensionPoint::Bind, Placement::First),
        ];
        for (verb, point, placement) in verbs {
            if verb.is_empty() {
                continue;
            }
            out.push(PinnedPlugin {
                point,
                plugin: PluginRef {
                    name: e.name.clone(),
                    weight: None,
                    path: e.path.clone(),
                },
                placement,
                weight: e.weight,
            });
        }
    }
    out
}

/// Appends `names` to NodeResourcesFit's `ignoredResources` in `profile`.
fn add_ignored_resources(profile: &mut Profile, names: &[&str]) -> Result<(), ConfigError> {
    const FIT: &str = plugin_names::NODE_RESOURCES_FIT;
    let i = match profile.plugin_config.iter().position(|c| c.name == FIT) {
        Some(i) => i,
        None => {
            profile.plugin_config.push(PluginConfig {
                name: FIT.into(),
                args: None,
                path: format!("{}.pluginConfig[{FIT}].args", profile.path),
            });
            profile.plugin_config.len() - 1
        }
    };
    let pc = &mut profile.plugin_config[i];
    let args = pc
        .args
        .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
    let Some(obj) = args.as_object_mut() else {
        return Err(ConfigError::new(&pc.path, "must be an object"));
    };
    let list = obj
        .entry("ignoredResources")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        return Err(ConfigError::new(
            format!("{}.ignoredResources", pc.path),
            "must be a list",
        ));
    };
    for n in names {
        if !list.iter().any(|v| v.as_str() == Some(n)) {
            list.push(serde_json::Value::String((*n).to_string()));
        }
    }
    Ok(())
}

fn validate_percentage(path: &str, p: i32) -> Result<(), ConfigError> {
    if !(0..=100).contains(&p) {
        return Err(ConfigError::invalid(path, p, "not in valid range [0-100]"));
    }
    Ok(())
}

fn resolve_leader_election(raw: RawLeaderElection) -> Result<LeaderElection, ConfigError> {
    let mut le = LeaderElection::default();
    if let Some(v) = raw.leader_elect {
        le.leader_elect = v;
    }
    let duration =
        |field: &str, text: Option<String>, default: Duration| -> Result<Duration, ConfigError> {
            match text {
                None => Ok(default),
                Some(t) => parse_go_duration(&t)
                    .map_err(|e| ConfigError::new(format!("leaderElection.{field}"), e)),
            }
        };
    le.lease_duration = duration("leaseDuration", raw.lease_duration, le.lease_duration)?;
    le.renew_deadline = duration("renewDeadline", raw.renew_deadline, le.renew_deadline)?;
    le.retry_period = duration("retryPeriod", raw.retry_period, le.retry_period)?;
    if let Some(lock) = raw.resource_lock
        && lock != "leases"
    {
        return Err(ConfigError::invalid(
            "leaderElection.resourceLock",
            &lock,
            "resourceLock value must be \"leases\"",
        ));
    }
    if let Some(n) = raw.resource_name.filter(|n| !n.is_empty()) {
        le.resource_name = n;
    }
    if let Some(n) = raw.resource_namespace.filter(|n| !n.is_empty()) {
        le.resource_namespace = n;
    }
    le.validate()?;
    Ok(le)
}

fn raw_set(plugins: &RawPlugins, point: Option<ExtensionPoint>) -> Option<&RawPluginSet> {
    use ExtensionPoint::*;
    match point {
        None => plugins.multi_point.as_ref(),
        Some(PreEnqueue) => plugins.pre_enqueue.as_ref(),
        Some(QueueSort) => plugins.queue_sort.as_ref(),
        Some(PreFilter) => plugins.pre_filter.as_ref(),
        Some(Filter) => plugins.filter.as_ref(),
        Some(PostFilter) => plugins.post_filter.as_ref(),
        Some(PreScore) => plugins.pre_score.as_ref(),
        Some(Score) => plugins.score.as_ref(),
        Some(Reserve) => plugins.reserve.as_ref(),
        Some(Permit) => plugins.permit.as_ref(),
        Some(PreBind) => plugins.pre_bind.as_ref(),
        Some(Bind) => plugins.bind.as_ref(),
        Some(PostBind) => plugins.post_bind.as_ref(),
        Some(PodGroupPostFilter) => plugins.pod_group_post_filter.as_ref(),
        // Not profile lists (see `ExtensionPoint::ALL`); a phase of a point
        // is configured by its point's list.
        Some(
            PlacementFeasible
            | GroupPermit
            | PreFilterExtensionAddPod
            | PreFilterExtensionRemovePod
            | ScoreExtensionNormalize
            | Unreserve,
        ) => None,
    }
}

fn custom_set(raw: Option<&RawPluginSet>, path: &str) -> PluginSet {
    let Some(raw) = raw else {
        return PluginSet::default();
    };
    let refs = |list: &[RawPlugin], which: &str| {
        list.iter()
            .enumerate()
            .map(|(i, p)| PluginRef {
                name: p.name.clone(),
                weight: p.weight,
                path: format!("{path}.{which}[{i}]"),
            })
            .collect()
    };
    PluginSet {
        enabled: refs(&raw.enabled, "enabled"),
        disabled: refs(&raw.disabled, "disabled"),
    }
}

/// Merges the user's plugin sets with the defaults, point by point.
fn resolve_plugins(
    raw: RawPlugins,
    profile_path: &str,
    plugin_known: &dyn Fn(&str) -> bool,
    gates: &FeatureGates,
) -> Plugins {
    let mut plugins = Plugins::default();
    let default_multi = PluginSet {
        enabled: default_multi_point(gates)
            .into_iter()
            .filter(|(name, _)| plugin_known(name))
            .map(|(name, weight)| PluginRef {
                name: name.to_string(),
                weight,
                path: format!("{profile_path}.plugins.multiPoint (default)"),
            })
            .collect(),
        disabled: Vec::new(),
    };
    plugins.multi_point = merge_plugin_set(
        &default_multi,
        custom_set(
            raw_set(&raw, None),
            &format!("{profile_path}.plugins.multiPoint"),
        ),
    );
    for point in ExtensionPoint::ALL {
        let path = format!("{profile_path}.plugins.{}", point.field());
        *plugins.get_mut(point) = merge_plugin_set(
            &PluginSet::default(),
            custom_set(raw_set(&raw, Some(point)), &path),
        );
    }
    plugins
}

/// Upstream's `mergePluginSet`: defaults in order minus the disabled ones,
/// a default re-enabled by the user replaced in place, then the user's other
/// plugins; `"*"` keeps only the user's.
fn merge_plugin_set(defaults: &PluginSet, custom: PluginSet) -> PluginSet {
    let mut disabled = custom.disabled.clone();
    disabled.extend(defaults.disabled.iter().cloned());
    let all_disabled = disabled.iter().any(|p| p.name == "*");
    let mut used = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !all_disabled {
        for d in &defaults.enabled {
            if disabled.iter().any(|p| p.name == d.name) {
                continue;
            }
            match custom.enabled.iter().position(|c| c.name == d.name) {
                Some(i) => {
                    used[i] = true;
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(d.clone()),
            }
        }
    }
    for (i, c) in custom.enabled.into_iter().enumerate() {
        if !used[i] {
            enabled.push(c);
        }
    }
    PluginSet { enabled, disabled }
}

#[cfg(test)]
mod tests;
