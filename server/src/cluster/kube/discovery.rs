//! What the API server is and serves, read once before anything else in
//! kube mode: its version (`GET /version`), which decides the release
//! berth follows and so the feature gates' defaults
//! ([`crate::features::follow`]), and the API groups, versions and
//! resources it serves (`GET /api`, `/apis`, and the resource list of each
//! group version berth reads), which decide what is watched:
//!
//! * a kind the server serves is watched when the gate that reads it (if
//!   any, [`gate_of`]) is on;
//! * a kind it does not serve is not watched, said in one INFO line naming
//!   the kind, the group version berth reads and the gate that would read
//!   it ([`Plan::notes`]);
//! * a kind whose gate was turned on by `--feature-gates` but that the
//!   server does not serve stops startup ([`NotServed`]), naming the kind,
//!   the versions of its group the server serves and the server's version:
//!   asked for explicitly, it would otherwise never sync.
//!
//! upstream kube-scheduler starts its informers without asking (an
//! informer of a kind the server lacks never syncs); its emulation version
//! is its own binary's unless `--emulated-version` says otherwise. berth
//! follows the API server's instead (ARCHITECTURE.md, decision 13).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::cache::ObjectKind;
use crate::features::{Feature, FeatureGates};

/// The API server's `/version`, as berth reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `gitVersion` (`v1.36.2`).
    pub git_version: String,
    /// The minor version the server emulates (`emulationMinor` when it
    /// says, else `minor`; a `+` suffix as some providers add is ignored).
    pub minor: u16,
}

impl ServerVersion {
    /// From a `/version` answer.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let number = |key: &str| -> Option<u16> {
            let s = v.get(key)?.as_str()?;
            s.trim_end_matches('+').parse().ok()
        };
        let git_version = v
            .get("gitVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let major = number("emulationMajor").or_else(|| number("major"));
        let minor = number("emulationMinor").or_else(|| number("minor"));
        match (major, minor) {
            (Some(1), Some(minor)) => Ok(Self { git_version, minor }),
            _ => Err(format!(
                "/version names no Kubernetes 1.x version (major {:?}, minor {:?}, gitVersion {git_version:?})",
                v.get("major"),
                v.get("minor")
            )),
        }
    }
}

/// What the server serves: its version, the versions of each API group
/// (`""` the core group), and the resources of the group versions berth
/// reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The server's version.
    pub version: ServerVersion,
    /// Served versions by group, as `/api` and `/apis` list them.
    pub groups: BTreeMap<String, Vec<String>>,
    /// Resource names (with subresources) by group version (`v1`,
    /// `resource.k8s.io/v1`), for the group versions berth reads that the
    /// server serves.
    pub resources: BTreeMap<String, BTreeSet<String>>,
}

impl Discovery {
    /// Whether the server serves `kind` at the group version berth reads.
    pub fn serves(&self, kind: ObjectKind) -> bool {
        let (gv, _) = kind.type_meta();
        self.resources
            .get(gv)
            .is_some_and(|r| r.contains(kind.plural()))
    }

    /// The versions of `group` the server serves (empty: none).
    pub fn versions_of(&self, group: &str) -> &[String] {
        self.groups.get(group).map_or(&[], Vec::as_slice)
    }
}

/// Why discovery failed (the caller retries: the server may be starting).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A request was not answered, or answered with an error.
    #[error("GET {path}: {source}")]
    Request {
        /// The path asked.
        path: String,
        /// What happened.
        #[source]
        source: kube::Error,
    },
    /// An answer could not be read.
    #[error("GET {path}: {message}")]
    Answer {
        /// The path asked.
        path: String,
        /// What was wrong with it.
        message: String,
    },
}

impl DiscoveryError {
    /// The API's status code, when it answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Request {
                source: kube::Error::Api(s),
                ..
            } => Some(s.code),
            _ => None,
        }
    }
}

/// `GET path` as JSON; `None` for a 404 (not served).
async fn get(client: &kube::Client, path: &str) -> Result<Option<Value>, DiscoveryError> {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| DiscoveryError::Answer {
            path: path.into(),
            message: e.to_string(),
        })?;
    match client.request::<Value>(req).await {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(DiscoveryError::Request {
            path: path.into(),
            source,
        }),
    }
}

/// The group versions berth reads for `kinds`, by group.
fn group_versions(kinds: &[ObjectKind]) -> BTreeSet<&'static str> {
    kinds.iter().map(|k| k.type_meta().0).collect()
}

/// Reads the server's version and what it serves of `kinds`: `/version`,
/// `/api`, `/apis`, then the resource list of each group version of
/// `kinds` that the server lists.
pub async fn discover(
    client: &kube::Client,
    kinds: &[ObjectKind],
) -> Result<Discovery, DiscoveryError> {
    let answer = |path: &str, message: String| DiscoveryError::Answer {
        path: path.into(),
        message,
    };
    let version = get(client, "/version")
        .await?
        .ok_or_else(|| answer("/version", "404: not found".into()))?;
    let version = ServerVersion::from_json(&version).map_err(|m| answer("/version", m))?;
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(core) = get(client, "/api").await? {
        let versions = core["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        groups.insert(String::new(), versions);
    }
    if let Some(list) = get(client, "/apis").await? {
        for g in list["groups"].as_array().into_iter().flatten() {
            let Some(name) = g["name"].as_str() else {
                continue;
            };
            let versions = g["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_str().map(str::to_string))
                .collect();
            groups.insert(name.to_string(), versions);
        }
    }
    let mut resources = BTreeMap::new();
    for gv in group_versions(kinds) {
        let (group, version) = gv.rsplit_once('/').unwrap_or(("", gv));
        if !groups
            .get(group)
            .is_some_and(|vs| vs.iter().any(|v| v == version))
        {
            continue;
        }
        let path = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{gv}")
        };
        let Some(list) = get(client, &path).await? else {
            continue;
        };
        let names: BTreeSet<String> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        resources.insert(gv.to_string(), names);
    }
    Ok(Discovery {
        version,
        groups,
        resources,
    })
}

/// The rule a refused discovery request needs, as a ClusterRole writes it
/// (the built-in `system:discovery` and `system:public-info-viewer` grant
/// it to every authenticated user).
const DISCOVERY_RULE: &str =
    r#"{nonResourceURLs: ["/version", "/api", "/api/*", "/apis", "/apis/*"], verbs: ["get"]}"#;

/// [`discover`], until the server answers: it may be starting, or
/// unreachable for a while. Between attempts the pause doubles from half a
/// second to ten; what fails is said as the rest of kube mode says it (no
/// answer or a 5xx: the API server's outage reporter; a 403: the refusal
/// reporter, once it lasts; any other answer: one WARN line per distinct
/// error, DEBUG after).
pub async fn discover_until_answered(client: &kube::Client, kinds: &[ObjectKind]) -> Discovery {
    let mut delay = std::time::Duration::from_millis(500);
    let mut said = std::collections::BTreeSet::new();
    loop {
        let e = match discover(client, kinds).await {
            Ok(d) => {
                super::refusals::global().allowed(&super::refusals::Key::new(
                    "get",
                    "",
                    "discovery",
                ));
                return d;
            }
            Err(e) => e,
        };
        let text = match &e {
            DiscoveryError::Request { path, source } => {
                format!("GET {path}: {}", super::client::error_text(source))
            }
            other => other.to_string(),
        };
        match e.code() {
            Some(403) => {
                let key = super::refusals::Key::new("get", "", "discovery");
                if let super::refusals::Verdict::Report(lasted) =
                    super::refusals::global().refused(&key, || DISCOVERY_RULE.to_string(), &text)
                {
                    tracing::error!(
                        code = 403,
                        rule = DISCOVERY_RULE,
                        "forbidden to read the API server's version and discovery: berthd cannot start until its user is granted {DISCOVERY_RULE} (the built-in ClusterRoles system:discovery and system:public-info-viewer grant it to every authenticated user); refused for {}, retried with backoff; {text}",
                        crate::outage::human(lasted)
                    );
                } else {
                    tracing::debug!(code = 403, "discovery refused; retrying: {text}");
                }
            }
            Some(code) if code < 500 && said.insert(text.clone()) => {
                tracing::warn!(
                    code,
                    "cannot read the API server's version and discovery: {text}; retrying with backoff"
                );
            }
            _ => tracing::debug!(error = %text, "discovery failed; retrying"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(10));
    }
}

/// The gate under which berth (as kube-scheduler) reads `kind`, if any.
pub fn gate_of(kind: ObjectKind) -> Option<Feature> {
    match kind {
        ObjectKind::DeviceTaintRule => Some(Feature::DRADeviceTaintRules),
        ObjectKind::PodGroup | ObjectKind::Workload => Some(Feature::GenericWorkload),
        ObjectKind::DeviceClass
        | ObjectKind::ResourceClaim
        | ObjectKind::ResourceClaimTemplate
        | ObjectKind::ResourceSlice => Some(Feature::DynamicResourceAllocation),
        _ => None,
    }
}

/// A kind whose gate `--feature-gates` turned on, that the server does not
/// serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "feature gate {gate}=true needs {resource} at {group_version}, which the API server {server} does not serve (it serves {served}); leave {gate} at its default or enable that API on the server"
)]
pub struct NotServed {
    /// The gate.
    pub gate: &'static str,
    /// The resource, as messages name it (`podgroups.scheduling.k8s.io`).
    pub resource: String,
    /// The group version berth reads it at.
    pub group_version: &'static str,
    /// What the server serves of the group, in words.
    pub served: String,
    /// The server's version.
    pub server: String,
}

/// What to watch, and the lines that say what is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The kinds not served (not watched, whatever their gate says).
    pub unserved: BTreeSet<ObjectKind>,
    /// One line per kind not served, for the startup log.
    pub notes: Vec<String>,
}

/// `resourceslices.resource.k8s.io`, `namespaces`.
fn qualified(kind: ObjectKind) -> String {
    if kind.group().is_empty() {
        kind.plural().to_string()
    } else {
        format!("{}.{}", kind.plural(), kind.group())
    }
}

/// Which of `kinds` the server `d` does not serve, and what to say about
/// each; an error for one whose gate `gates` has explicitly on.
pub fn plan(d: &Discovery, gates: &FeatureGates, kinds: &[ObjectKind]) -> Result<Plan, NotServed> {
    let mut unserved = BTreeSet::new();
    let mut notes = Vec::new();
    for &kind in kinds {
        if d.serves(kind) {
            continue;
        }
        let (gv, _) = kind.type_meta();
        let group = kind.group();
        let versions = d.versions_of(group);
        let served = match (group, versions) {
            ("", _) => format!("the core group at {}", versions.join(", ")),
            (_, []) => format!("no {group} API"),
            (_, vs) => format!("{group} at {}", vs.join(", ")),
        };
        let gate = gate_of(kind);
        if let Some(g) = gate
            && gates.enabled(g)
            && gates.is_explicit(g)
        {
            return Err(NotServed {
                gate: g.name(),
                resource: qualified(kind),
                group_version: gv,
                served,
                server: d.version.git_version.clone(),
            });
        }
        let why = match gate {
            Some(g) if gates.enabled(g) => {
                format!("{g} is on, but no object of this kind can be seen")
            }
            Some(g) => format!("{g}, which reads them, is off"),
            None => "berth reads them under no gate; the plugins that would see none".into(),
        };
        notes.push(format!(
            "{} ({gv}) is not served by the API server {} (it serves {served}): not watched; {why}",
            qualified(kind),
            d.version.git_version
        ));
        unserved.insert(kind);
    }
    Ok(Plan { unserved, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A v1.36.2 server with its default runtime-config, as recorded
    /// (`discovery-v136-*`, `version-v136`).
    fn v136() -> Discovery {
        let version = ServerVersion::from_json(&json!({
            "major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
            "gitVersion": "v1.36.2",
        }))
        .unwrap();
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        Discovery {
            version,
            groups: [
                ("", vec!["v1"]),
                ("apps", vec!["v1"]),
                ("policy", vec!["v1"]),
                ("storage.k8s.io", vec!["v1"]),
                ("resource.k8s.io", vec!["v1"]),
                ("scheduling.k8s.io", vec!["v1"]),
            ]
            .into_iter()
            .map(|(g, v)| (g.to_string(), v.into_iter().map(String::from).collect()))
            .collect(),
            resources: [
                (
                    "v1",
                    set(&[
                        "namespaces",
                        "persistentvolumes",
                        "persistentvolumeclaims",
                        "services",
                        "replicationcontrollers",
                    ]),
                ),
                ("apps/v1", set(&["replicasets", "statefulsets"])),
                ("policy/v1", set(&["poddisruptionbudgets"])),
                (
                    "storage.k8s.io/v1",
                    set(&[
                        "storageclasses",
                        "csinodes",
                        "csidrivers",
                        "csistoragecapacities",
                    ]),
                ),
                (
                    "resource.k8s.io/v1",
                    set(&[
                        "deviceclasses",
                        "resourceclaims",
                        "resourceclaims/status",
                        "resourceslices",
                    ]),
                ),
            ]
            .into_iter()
            .map(|(g, r)| (g.to_string(), r))
            .collect(),
        }
    }

    fn kinds() -> Vec<ObjectKind> {
        super::super::KUBE_WATCHED
            .into_iter()
            .chain([ObjectKind::PodGroup])
            .collect()
    }

    #[test]
    fn versions_read_as_the_server_emulates_them() {
        let v = ServerVersion::from_json(
            &json!({"major": "1", "minor": "27+", "gitVersion": "v1.27.3-gke.100"}),
        )
        .unwrap();
        assert_eq!(v.minor, 27);
        let v = ServerVersion::from_json(&json!({
            "major": "1", "minor": "37", "emulationMajor": "1", "emulationMinor": "36", "gitVersion": "v1.37.0",
        }))
        .unwrap();
        assert_eq!(v.minor, 36, "the emulated version decides");
        assert!(ServerVersion::from_json(&json!({"major": "2", "minor": "0"})).is_err());
    }

    /// v1.36 with its defaults: DeviceTaintRules and PodGroups are not
    /// served, and both their gates are off: two lines, nothing watched of
    /// them, everything else watched.
    #[test]
    fn kinds_a_v1_36_server_lacks_are_not_watched_and_said_once_each() {
        let gates = FeatureGates::at_release(36);
        let p = plan(&v136(), &gates, &kinds()).unwrap();
        assert_eq!(
            p.unserved.iter().copied().collect::<Vec<_>>(),
            [ObjectKind::PodGroup, ObjectKind::DeviceTaintRule]
        );
        assert_eq!(
            p.notes,
            [
                "devicetaintrules.resource.k8s.io (resource.k8s.io/v1) is not served by the API server v1.36.2 (it serves resource.k8s.io at v1): not watched; DRADeviceTaintRules, which reads them, is off",
                "podgroups.scheduling.k8s.io (scheduling.k8s.io/v1beta1) is not served by the API server v1.36.2 (it serves scheduling.k8s.io at v1): not watched; GenericWorkload, which reads them, is off",
            ]
        );
        // A gate on by default (v1.37's gates against this server) is not
        // an error: the kind is not watched, and the line says so.
        let p = plan(&v136(), &FeatureGates::at_release(37), &kinds()).unwrap();
        assert!(p.notes[0].ends_with(
            "not watched; DRADeviceTaintRules is on, but no object of this kind can be seen"
        ));
    }

    #[test]
    fn a_gate_turned_on_for_a_kind_the_server_lacks_stops_startup() {
        let gates =
            FeatureGates::from_flags_at(36, &["GenericWorkload=true,DRADeviceTaintRules=false"])
                .unwrap();
        let e = plan(&v136(), &gates, &kinds()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "feature gate GenericWorkload=true needs podgroups.scheduling.k8s.io at scheduling.k8s.io/v1beta1, which the API server v1.36.2 does not serve (it serves scheduling.k8s.io at v1); leave GenericWorkload at its default or enable that API on the server"
        );
        let gates = FeatureGates::from_flags_at(36, &["DRADeviceTaintRules=true"]).unwrap();
        let e = plan(&v136(), &gates, &kinds()).unwrap_err();
        assert_eq!(e.resource, "devicetaintrules.resource.k8s.io");
        assert_eq!(e.served, "resource.k8s.io at v1");
    }

    #[test]
    fn a_kind_served_is_not_mentioned() {
        let mut d = v136();
        d.resources
            .get_mut("resource.k8s.io/v1")
            .unwrap()
            .insert("devicetaintrules".into());
        d.groups
            .get_mut("scheduling.k8s.io")
            .unwrap()
            .push("v1beta1".into());
        d.resources.insert(
            "scheduling.k8s.io/v1beta1".into(),
            ["podgroups".to_string()].into_iter().collect(),
        );
        let gates = FeatureGates::from_flags_at(37, &["GenericWorkload=true"]).unwrap();
        let p = plan(&d, &gates, &kinds()).unwrap();
        assert!(p.unserved.is_empty() && p.notes.is_empty(), "{p:?}");
    }
}
