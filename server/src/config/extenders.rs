//! Extender configuration: berth's remote extenders (`berthExtenders`, its
//! own field beside upstream's) and kube-scheduler's HTTP extenders
//! (`extenders`, upstream's `Extender` type, unchanged).
//!
//! ```yaml
//! berthExtenders:
//! - name: gpu-share                 # the plugin name profiles enable
//!   endpoint: http://127.0.0.1:7070 # https:// with `tls`
//!   points: [filter, score, reserve]
//!   timeout: 2s                     # per call (default 5s)
//!   ignorable: false
//!   maxConcurrentCalls: 64          # more in flight are shed
//!   startupTimeout: 30s             # scheduling waits this long for it at start
//!   circuitBreaker: {consecutiveFailures: 5, coolDown: 10s}
//!   managedResources: [{name: example.com/gpu-mem, ignoredByScheduler: true}]
//!   tls: {caFile: ca.pem, certFile: client.pem, keyFile: client-key.pem}
//! ```

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;

use super::ExtensionPoint;
use super::{ConfigError, parse_go_duration};

/// The per-call timeout when none is given (upstream's extender default).
pub const DEFAULT_EXTENDER_TIMEOUT: Duration = Duration::from_secs(5);
/// Calls in flight to one extender beyond which new ones are shed.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 64;
/// How long scheduling waits at start for an extender's handshake.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Consecutive failed calls that open an extender's circuit breaker.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// How long an open circuit breaker fails calls at once before it lets one
/// probe through.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_secs(10);

/// The extension points a remote extender may serve.
pub const REMOTE_POINTS: [ExtensionPoint; 13] = [
    ExtensionPoint::PreFilter,
    ExtensionPoint::Filter,
    ExtensionPoint::PostFilter,
    ExtensionPoint::PreScore,
    ExtensionPoint::Score,
    ExtensionPoint::Reserve,
    ExtensionPoint::Permit,
    ExtensionPoint::PreBind,
    ExtensionPoint::Bind,
    ExtensionPoint::PostBind,
    ExtensionPoint::PlacementFeasible,
    ExtensionPoint::PodGroupPostFilter,
    ExtensionPoint::GroupPermit,
];

/// A `berthExtenders` entry as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawBerthExtender {
    pub name: Option<String>,
    pub endpoint: Option<String>,
    #[serde(default)]
    pub points: Vec<String>,
    pub timeout: Option<String>,
    pub ignorable: Option<bool>,
    pub max_concurrent_calls: Option<i64>,
    pub startup_timeout: Option<String>,
    pub circuit_breaker: Option<RawCircuitBreaker>,
    #[serde(default)]
    pub managed_resources: Vec<RawManagedResource>,
    pub tls: Option<RawExtenderTls>,
}

/// A remote extender's circuit breaker, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawCircuitBreaker {
    pub consecutive_failures: Option<i64>,
    pub cool_down: Option<String>,
}

/// upstream's `ExtenderManagedResource`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawManagedResource {
    pub name: Option<String>,
    #[serde(default)]
    pub ignored_by_scheduler: bool,
}

/// TLS towards a remote extender.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawExtenderTls {
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub server_name: Option<String>,
}

/// upstream's `Extender` (an HTTP extender), field for field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawHttpExtender {
    pub url_prefix: Option<String>,
    pub filter_verb: Option<String>,
    pub preempt_verb: Option<String>,
    pub prioritize_verb: Option<String>,
    pub weight: Option<i64>,
    pub bind_verb: Option<String>,
    #[serde(rename = "enableHTTPS")]
    pub enable_https: Option<bool>,
    pub tls_config: Option<RawHttpExtenderTls>,
    #[serde(rename = "httpTimeout")]
    pub http_timeout: Option<String>,
    pub node_cache_capable: Option<bool>,
    #[serde(default)]
    pub managed_resources: Vec<RawManagedResource>,
    pub ignorable: Option<bool>,
}

/// upstream's `ExtenderTLSConfig`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RawHttpExtenderTls {
    pub insecure: Option<bool>,
    pub server_name: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub ca_file: Option<String>,
    pub cert_data: Option<String>,
    pub key_data: Option<String>,
    pub ca_data: Option<String>,
}

/// A resource an extender manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedResource {
    /// The extended resource's name.
    pub name: String,
    /// NodeResourcesFit does not check it.
    pub ignored_by_scheduler: bool,
}

/// TLS files for a remote extender connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtenderTls {
    /// PEM CA bundle to verify the extender with (default: the system's
    /// roots are not used; a CA is required for https endpoints).
    pub ca_file: Option<String>,
    /// PEM client certificate (mutual TLS).
    pub cert_file: Option<String>,
    /// PEM client key (mutual TLS).
    pub key_file: Option<String>,
    /// Overrides the name the certificate is checked against.
    pub server_name: Option<String>,
    /// `berthExtenders[i].tls`, for errors reading the files.
    pub path: String,
}

/// When an extender's calls stop being tried: after `consecutive_failures`
/// failed calls in a row (no answer in time, no stream, an answer out of
/// protocol) calls fail at once for `cool_down`, then one probe call is let
/// through; its success closes the breaker, its failure opens it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreakerConfig {
    /// Failed calls in a row that open it; 0 never opens it.
    pub consecutive_failures: u32,
    /// How long it stays open before a probe.
    pub cool_down: Duration,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: DEFAULT_BREAKER_FAILURES,
            cool_down: DEFAULT_BREAKER_COOL_DOWN,
        }
    }
}

/// A remote (streaming gRPC) extender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtenderConfig {
    /// The plugin name profiles enable it by.
    pub name: String,
    /// `http://host:port` or `https://host:port`.
    pub endpoint: String,
    /// The points it serves.
    pub points: Vec<ExtensionPoint>,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Skip it (instead of failing the attempt) when it is down, slow or
    /// wrong.
    pub ignorable: bool,
    /// Calls in flight beyond which new ones are shed.
    pub max_concurrent_calls: usize,
    /// How long scheduling waits at start for the extender's handshake
    /// (its Hello, and the node list sent to it); zero: not at all.
    pub startup_timeout: Duration,
    /// When its calls stop being tried.
    pub circuit_breaker: CircuitBreakerConfig,
    /// Consulted only for pods requesting one of these (empty: all pods).
    pub managed_resources: Vec<ManagedResource>,
    /// TLS settings (https endpoints).
    pub tls: Option<ExtenderTls>,
    /// `berthExtenders[i]`.
    pub path: String,
}

/// An HTTP extender (kube-scheduler's protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpExtenderConfig {
    /// The plugin name it runs under in berth: `HTTPExtender(<urlPrefix>)`,
    /// with `#<index>` appended when an earlier extender has the same
    /// `urlPrefix`.
    pub name: String,
    /// Where the verbs are (`urlPrefix`).
    pub url_prefix: String,
    /// The verbs; empty when not served.
    pub filter_verb: String,
    /// See above.
    pub preempt_verb: String,
    /// See above.
    pub prioritize_verb: String,
    /// See above.
    pub bind_verb: String,
    /// Weight of its priorities.
    pub weight: i64,
    /// Use https.
    pub enable_https: bool,
    /// TLS settings.
    pub tls: Option<HttpExtenderTls>,
    /// Per-call timeout.
    pub http_timeout: Duration,
    /// Send node names only (the extender caches nodes itself).
    pub node_cache_capable: bool,
    /// See [`ExtenderConfig::managed_resources`].
    pub managed_resources: Vec<ManagedResource>,
    /// See [`ExtenderConfig::ignorable`].
    pub ignorable: bool,
    /// `extenders[i]`.
    pub path: String,
}

/// upstream's `ExtenderTLSConfig`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpExtenderTls {
    /// Skip verifying the server.
    pub insecure: bool,
    /// Overrides the name the certificate is checked against.
    pub server_name: Option<String>,
    /// PEM files.
    pub cert_file: Option<String>,
    /// See above.
    pub key_file: Option<String>,
    /// See above.
    pub ca_file: Option<String>,
    /// Inline PEM data (base64 in the YAML, as upstream's `[]byte`).
    pub cert_data: Option<Vec<u8>>,
    /// See above.
    pub key_data: Option<Vec<u8>>,
    /// See above.
    pub ca_data: Option<Vec<u8>>,
}

fn point_by_field(field: &str) -> Option<ExtensionPoint> {
    REMOTE_POINTS.into_iter().find(|p| p.field() == field)
}

/// Whether `name` is a valid extended resource name for upstream: a
/// qualified name outside the `kubernetes.io/` namespace, or under
/// `requests.`.
fn is_extended_resource_name(name: &str) -> bool {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (p, l),
        None => return false,
    };
    if prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") {
        return false;
    }
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    };
    let local_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && local.as_bytes()[0].is_ascii_alphanumeric()
        && local.as_bytes()[local.len() - 1].is_ascii_alphanumeric();
    dns(prefix) && local_ok
}

fn managed_resources(
    raw: Vec<RawManagedResource>,
    path: &str,
) -> Result<Vec<ManagedResource>, ConfigError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (j, r) in raw.into_iter().enumerate() {
        let p = format!("{path}.managedResources[{j}].name");
        let name = r
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ConfigError::required(&p))?;
        if !is_extended_resource_name(&name) {
            return Err(ConfigError::invalid(
                &p,
                &name,
                "is an invalid extended resource name",
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ConfigError::duplicate(&p, &name));
        }
        out.push(ManagedResource {
            name,
            ignored_by_scheduler: r.ignored_by_scheduler,
        });
    }
    Ok(out)
}

fn timeout(raw: Option<&str>, path: &str) -> Result<Duration, ConfigError> {
    match raw {
        None => Ok(DEFAULT_EXTENDER_TIMEOUT),
        Some(t) => {
            let d = parse_go_duration(t).map_err(|e| ConfigError::new(path, e))?;
            if d.is_zero() {
                Ok(DEFAULT_EXTENDER_TIMEOUT)
            } else {
                Ok(d)
            }
        }
    }
}

/// Validates the `berthExtenders` entries. `plugin_known` tells the native
/// plugin names, which extenders may not take.
pub fn resolve_berth_extenders(
    raw: Vec<RawBerthExtender>,
    plugin_known: &dyn Fn(&str) -> bool,
) -> Result<Vec<ExtenderConfig>, ConfigError> {
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let path = format!("berthExtenders[{i}]");
        let name = r
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ConfigError::required(format!("{path}.name")))?;
        if plugin_known(&name) {
            return Err(ConfigError::invalid(
                format!("{path}.name"),
                format!("{name:?}"),
                "is the name of a built-in plugin",
            ));
        }
        if !names.insert(name.clone()) {
            return Err(ConfigError::duplicate(format!("{path}.name"), &name));
        }
        let endpoint = r
            .endpoint
            .filter(|e| !e.is_empty())
            .ok_or_else(|| ConfigError::required(format!("{path}.endpoint")))?;
        let https = endpoint.starts_with("https://");
        if !(https || endpoint.starts_with("http://"))
            || endpoint
                .parse::<http::Uri>()
                .map_or(true, |u| u.host().is_none())
        {
            return Err(ConfigError::invalid(
                format!("{path}.endpoint"),
                format!("{endpoint:?}"),
                "must be an http:// or https:// URL with a host",
            ));
        }
        if r.points.is_empty() {
            return Err(ConfigError::required(format!("{path}.points")));
        }
        let mut points = Vec::with_capacity(r.points.len());
        for (j, p) in r.points.iter().enumerate() {
            let pp = format!("{path}.points[{j}]");
            let Some(point) = point_by_field(p) else {
                let supported: Vec<&str> = REMOTE_POINTS.iter().map(|p| p.field()).collect();
                return Err(ConfigError::new(
                    pp,
                    format!(
                        "Unsupported value: {p:?}: supported values: {}",
                        supported.join(", ")
                    ),
                ));
            };
            if points.contains(&point) {
                return Err(ConfigError::duplicate(pp, p));
            }
            points.push(point);
        }
        let max = r
            .max_concurrent_calls
            .unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS as i64);
        if max <= 0 {
            return Err(ConfigError::invalid(
                format!("{path}.maxConcurrentCalls"),
                max,
                "must be greater than 0",
            ));
        }
        let tls = match r.tls {
            Some(t) => {
                let tp = format!("{path}.tls");
                if t.cert_file.is_some() != t.key_file.is_some() {
                    return Err(ConfigError::new(
                        tp,
                        "certFile and keyFile must be given together",
                    ));
                }
                if !https {
                    return Err(ConfigError::new(tp, "TLS needs an https:// endpoint"));
                }
                Some(ExtenderTls {
                    ca_file: t.ca_file,
                    cert_file: t.cert_file,
                    key_file: t.key_file,
                    server_name: t.server_name,
                    path: tp,
                })
            }
            None if https => Some(ExtenderTls {
                path: format!("{path}.tls"),
                ..Default::default()
            }),
            None => None,
        };
        let startup_timeout = match r.startup_timeout.as_deref() {
            None => DEFAULT_STARTUP_TIMEOUT,
            Some(t) => parse_go_duration(t)
                .map_err(|e| ConfigError::new(format!("{path}.startupTimeout"), e))?,
        };
        let circuit_breaker = match r.circuit_breaker {
            None => CircuitBreakerConfig::default(),
            Some(b) => {
                let bp = format!("{path}.circuitBreaker");
                let failures = b
                    .consecutive_failures
                    .unwrap_or(i64::from(DEFAULT_BREAKER_FAILURES));
                if !(0..=i64::from(u32::MAX)).contains(&failures) {
                    return Err(ConfigError::invalid(
                        format!("{bp}.consecutiveFailures"),
                        failures,
                        "must be 0 (never open) or more",
                    ));
                }
                let cool_down = match b.cool_down.as_deref() {
                    None => DEFAULT_BREAKER_COOL_DOWN,
                    Some(t) => parse_go_duration(t)
                        .map_err(|e| ConfigError::new(format!("{bp}.coolDown"), e))?,
                };
                if cool_down.is_zero() && failures > 0 {
                    return Err(ConfigError::invalid(
                        format!("{bp}.coolDown"),
                        b.cool_down.unwrap_or_default(),
                        "must be greater than 0 (set consecutiveFailures: 0 to never open the breaker)",
                    ));
                }
                CircuitBreakerConfig {
                    consecutive_failures: failures as u32,
                    cool_down,
                }
            }
        };
        out.push(ExtenderConfig {
            startup_timeout,
            circuit_breaker,
            timeout: timeout(r.timeout.as_deref(), &format!("{path}.timeout"))?,
            managed_resources: managed_resources(r.managed_resources, &path)?,
            name,
            endpoint,
            points,
            ignorable: r.ignorable.unwrap_or(false),
            max_concurrent_calls: max as usize,
            tls,
            path,
        });
    }
    Ok(out)
}

fn base64_field(value: Option<String>, path: &str) -> Result<Option<Vec<u8>>, ConfigError> {
    value
        .map(|v| decode_base64(&v).ok_or_else(|| ConfigError::new(path, "illegal base64 data")))
        .transpose()
}

/// Standard base64 (with padding), as Go encodes `[]byte` in JSON.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    let body = s.trim_end_matches('=');
    if s.len() - body.len() > 2 {
        return None;
    }
    for b in body.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Validates upstream's `extenders` as upstream does: a prioritizing
/// extender needs a positive weight, at most one extender binds, and
/// managed resources are extended resource names.
pub fn resolve_http_extenders(
    raw: Vec<RawHttpExtender>,
) -> Result<Vec<HttpExtenderConfig>, ConfigError> {
    let mut out: Vec<HttpExtenderConfig> = Vec::with_capacity(raw.len());
    let mut binders = 0;
    // Upstream refuses a resource managed by two extenders.
    let mut managed_names = HashSet::new();
    for (i, r) in raw.into_iter().enumerate() {
        let path = format!("extenders[{i}]");
        let url_prefix = r.url_prefix.unwrap_or_default();
        if url_prefix.is_empty() {
            return Err(ConfigError::required(format!("{path}.urlPrefix")));
        }
        let prioritize_verb = r.prioritize_verb.unwrap_or_default();
        let weight = r.weight.unwrap_or(0);
        if !prioritize_verb.is_empty() && weight <= 0 {
            return Err(ConfigError::invalid(
                format!("{path}.weight"),
                weight,
                "must have a positive weight applied to it",
            ));
        }
        let bind_verb = r.bind_verb.unwrap_or_default();
        if !bind_verb.is_empty() {
            binders += 1;
            if binders > 1 {
                return Err(ConfigError::invalid(
                    "extenders",
                    format!("found {binders} extenders implementing bind"),
                    "only one extender can implement bind",
                ));
            }
        }
        let tls = match r.tls_config {
            None => None,
            Some(t) => {
                let tp = format!("{path}.tlsConfig");
                Some(HttpExtenderTls {
                    insecure: t.insecure.unwrap_or(false),
                    server_name: t.server_name.filter(|s| !s.is_empty()),
                    cert_file: t.cert_file.filter(|s| !s.is_empty()),
                    key_file: t.key_file.filter(|s| !s.is_empty()),
                    ca_file: t.ca_file.filter(|s| !s.is_empty()),
                    cert_data: base64_field(t.cert_data, &format!("{tp}.certData"))?,
                    key_data: base64_field(t.key_data, &format!("{tp}.keyData"))?,
                    ca_data: base64_field(t.ca_data, &format!("{tp}.caData"))?,
                })
            }
        };
        let enable_https = r.enable_https.unwrap_or(false);
        let scheme_ok = url_prefix.starts_with("http://") || url_prefix.starts_with("https://");
        if !scheme_ok || url_prefix.parse::<http::Uri>().is_err() {
            return Err(ConfigError::invalid(
                format!("{path}.urlPrefix"),
                format!("{url_prefix:?}"),
                "must be an http:// or https:// URL",
            ));
        }
        let managed = managed_resources(r.managed_resources, &path)?;
        for (j, m) in managed.iter().enumerate() {
            if !managed_names.insert(m.name.clone()) {
                return Err(ConfigError::invalid(
                    format!("{path}.managedResources[{j}].name"),
                    format!("{:?}", m.name),
                    "duplicate extender managed resource name",
                ));
            }
        }
        let mut name = format!("HTTPExtender({url_prefix})");
        if out.iter().any(|e| e.name == name) {
            name = format!("{name}#{i}");
        }
        out.push(HttpExtenderConfig {
            name,
            http_timeout: timeout(r.http_timeout.as_deref(), &format!("{path}.httpTimeout"))?,
            managed_resources: managed,
            url_prefix,
            filter_verb: r.filter_verb.unwrap_or_default(),
            preempt_verb: r.preempt_verb.unwrap_or_default(),
            prioritize_verb,
            bind_verb,
            weight,
            enable_https,
            tls,
            node_cache_capable: r.node_cache_capable.unwrap_or(false),
            ignorable: r.ignorable.unwrap_or(false),
            path,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berth(yaml: &str) -> Result<Vec<ExtenderConfig>, ConfigError> {
        let raw: Vec<RawBerthExtender> = serde_yaml::from_str(yaml).unwrap();
        resolve_berth_extenders(raw, &|n| n == "NodeResourcesFit")
    }

    #[test]
    fn a_full_entry_resolves() {
        let got = berth(
            "- name: gpu\n  endpoint: https://gpu.example:7070\n  points: [filter, score, reserve]\n  timeout: 250ms\n  ignorable: true\n  maxConcurrentCalls: 8\n  startupTimeout: 1m\n  circuitBreaker: {consecutiveFailures: 3, coolDown: 2s}\n  managedResources: [{name: example.com/gpu-mem, ignoredByScheduler: true}]\n  tls: {caFile: ca.pem}\n",
        )
        .unwrap();
        assert_eq!(
            got,
            [ExtenderConfig {
                name: "gpu".into(),
                endpoint: "https://gpu.example:7070".into(),
                points: vec![
                    ExtensionPoint::Filter,
                    ExtensionPoint::Score,
                    ExtensionPoint::Reserve
                ],
                timeout: Duration::from_millis(250),
                ignorable: true,
                max_concurrent_calls: 8,
                startup_timeout: Duration::from_secs(60),
                circuit_breaker: CircuitBreakerConfig {
                    consecutive_failures: 3,
                    cool_down: Duration::from_secs(2),
                },
                managed_resources: vec![ManagedResource {
                    name: "example.com/gpu-mem".into(),
                    ignored_by_scheduler: true
                }],
                tls: Some(ExtenderTls {
                    ca_file: Some("ca.pem".into()),
                    path: "berthExtenders[0].tls".into(),
                    ..Default::default()
                }),
                path: "berthExtenders[0]".into(),
            }]
        );
        let defaults = berth("- {name: x, endpoint: 'http://127.0.0.1:1', points: [permit]}\n")
            .unwrap()
            .remove(0);
        assert_eq!(defaults.timeout, DEFAULT_EXTENDER_TIMEOUT);
        assert!(!defaults.ignorable);
        assert_eq!(defaults.max_concurrent_calls, DEFAULT_MAX_CONCURRENT_CALLS);
        assert_eq!(defaults.startup_timeout, Duration::from_secs(30));
        assert_eq!(
            defaults.circuit_breaker,
            CircuitBreakerConfig {
                consecutive_failures: 5,
                cool_down: Duration::from_secs(10)
            }
        );
        assert_eq!(defaults.tls, None);
    }

    #[test]
    fn errors_name_the_field() {
        let base = "endpoint: 'http://127.0.0.1:1', points: [filter]";
        let cases = [
            (
                "- {endpoint: 'http://a:1', points: [filter]}",
                "berthExtenders[0].name: Required value",
            ),
            (
                &*format!("- {{name: NodeResourcesFit, {base}}}"),
                "berthExtenders[0].name: Invalid value: \"NodeResourcesFit\": is the name of a built-in plugin",
            ),
            (
                &*format!("- {{name: a, {base}}}\n- {{name: a, {base}}}"),
                "berthExtenders[1].name: Duplicate value: \"a\"",
            ),
            (
                "- {name: a, points: [filter]}",
                "berthExtenders[0].endpoint: Required value",
            ),
            (
                "- {name: a, endpoint: 'grpc://x:1', points: [filter]}",
                "berthExtenders[0].endpoint: Invalid value: \"grpc://x:1\": must be an http:// or https:// URL with a host",
            ),
            (
                "- {name: a, endpoint: 'http://x:1'}",
                "berthExtenders[0].points: Required value",
            ),
            (
                "- {name: a, endpoint: 'http://x:1', points: [filter, queueSort]}",
                "berthExtenders[0].points[1]: Unsupported value: \"queueSort\": supported values: preFilter, filter, postFilter, preScore, score, reserve, permit, preBind, bind, postBind, placementFeasible, podGroupPostFilter, groupPermit",
            ),
            (
                "- {name: a, endpoint: 'http://x:1', points: [filter, filter]}",
                "berthExtenders[0].points[1]: Duplicate value: \"filter\"",
            ),
            (
                &*format!("- {{name: a, {base}, timeout: soon}}"),
                "berthExtenders[0].timeout: invalid duration \"soon\"",
            ),
            (
                &*format!("- {{name: a, {base}, maxConcurrentCalls: 0}}"),
                "berthExtenders[0].maxConcurrentCalls: Invalid value: 0: must be greater than 0",
            ),
            (
                &*format!("- {{name: a, {base}, startupTimeout: -1s}}"),
                "berthExtenders[0].startupTimeout: invalid duration \"-1s\"",
            ),
            (
                &*format!("- {{name: a, {base}, circuitBreaker: {{consecutiveFailures: -1}}}}"),
                "berthExtenders[0].circuitBreaker.consecutiveFailures: Invalid value: -1: must be 0 (never open) or more",
            ),
            (
                &*format!("- {{name: a, {base}, circuitBreaker: {{coolDown: 0s}}}}"),
                "berthExtenders[0].circuitBreaker.coolDown: Invalid value: 0s: must be greater than 0 (set consecutiveFailures: 0 to never open the breaker)",
            ),
            (
                &*format!("- {{name: a, {base}, managedResources: [{{name: cpu}}]}}"),
                "berthExtenders[0].managedResources[0].name: Invalid value: cpu: is an invalid extended resource name",
            ),
            (
                &*format!("- {{name: a, {base}, tls: {{caFile: x}}}}"),
                "berthExtenders[0].tls: TLS needs an https:// endpoint",
            ),
            (
                "- {name: a, endpoint: 'https://x:1', points: [filter], tls: {certFile: c}}",
                "berthExtenders[0].tls: certFile and keyFile must be given together",
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(berth(yaml).unwrap_err().to_string(), want, "{yaml}");
        }
    }

    #[test]
    fn http_extenders_follow_upstreams_rules() {
        let http = |yaml: &str| {
            let raw: Vec<RawHttpExtender> = serde_yaml::from_str(yaml).unwrap();
            resolve_http_extenders(raw)
        };
        let ok = http(
            "- urlPrefix: http://127.0.0.1:8888/scheduler\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 5\n  bindVerb: bind\n  nodeCacheCapable: true\n  httpTimeout: 3s\n  tlsConfig: {insecure: true, caData: aGVsbG8=}\n",
        )
        .unwrap()
        .remove(0);
        assert_eq!(ok.filter_verb, "filter");
        assert_eq!(ok.weight, 5);
        assert_eq!(ok.http_timeout, Duration::from_secs(3));
        assert!(ok.node_cache_capable);
        let tls = ok.tls.unwrap();
        assert!(tls.insecure);
        assert_eq!(tls.ca_data.as_deref(), Some(&b"hello"[..]));
        assert_eq!(ok.name, "HTTPExtender(http://127.0.0.1:8888/scheduler)");
        // Timeouts: 5s unless given, 0 meaning the default, as upstream.
        let two = http("- {urlPrefix: 'http://a', httpTimeout: 0s}\n- {urlPrefix: 'http://a', filterVerb: f}\n").unwrap();
        assert_eq!(two[0].http_timeout, DEFAULT_EXTENDER_TIMEOUT);
        assert_eq!(two[1].http_timeout, DEFAULT_EXTENDER_TIMEOUT);
        // Plugin names stay unique when two extenders share a prefix.
        assert_eq!(two[0].name, "HTTPExtender(http://a)");
        assert_eq!(two[1].name, "HTTPExtender(http://a)#1");

        for (yaml, want) in [
            (
                "- {filterVerb: f}",
                "extenders[0].urlPrefix: Required value",
            ),
            (
                "- {urlPrefix: 'http://x', prioritizeVerb: p}",
                "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
            ),
            (
                "- {urlPrefix: 'http://x', bindVerb: b}\n- {urlPrefix: 'http://y', bindVerb: b}",
                "extenders: Invalid value: found 2 extenders implementing bind: only one extender can implement bind",
            ),
            (
                "- {urlPrefix: 'http://x', tlsConfig: {caData: '%%%'}}",
                "extenders[0].tlsConfig.caData: illegal base64 data",
            ),
            (
                "- {urlPrefix: 'grpc://x:1', filterVerb: f}",
                "extenders[0].urlPrefix: Invalid value: \"grpc://x:1\": must be an http:// or https:// URL",
            ),
            (
                "- {urlPrefix: 'http://x', httpTimeout: soon}",
                "extenders[0].httpTimeout: invalid duration \"soon\"",
            ),
            (
                "- {urlPrefix: 'http://x'}\n- {urlPrefix: 'http://y', managedResources: [{name: cpu}]}",
                "extenders[1].managedResources[0].name: Invalid value: cpu: is an invalid extended resource name",
            ),
            (
                "- {urlPrefix: 'http://x', managedResources: [{name: example.com/a}]}\n- {urlPrefix: 'http://y', managedResources: [{name: example.com/b}, {name: example.com/a}]}",
                "extenders[1].managedResources[1].name: Invalid value: \"example.com/a\": duplicate extender managed resource name",
            ),
        ] {
            assert_eq!(http(yaml).unwrap_err().to_string(), want, "{yaml}");
        }
    }
}
