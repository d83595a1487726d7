//! What the stand-in API server ([`crate::fake_apiserver`]) serves, as a
//! kube-apiserver of one release with its default runtime-config: its
//! `/version`, its discovery documents, and so which resources answer and
//! which are `404 the server could not find the requested resource`.
//!
//! From the recordings (`tests/k8s-api/`):
//!
//! * v1.36: `version-v136`, `discovery_api`, `discovery_apis`,
//!   `discovery_api_v1`, the group versions recorded
//!   (`discovery_apis_*`), `discovery-v136-resource-k8s-io-v1` (no
//!   DeviceTaintRules) and `discovery-v136-scheduling-k8s-io` (only
//!   `scheduling.k8s.io/v1`: PodGroups are not served at v1beta1, recorded
//!   as `discovery-v136-podgroups-v1beta1-404`).
//!
//! Made here, where nothing was recorded (and said so):
//!
//! * v1.37's `/version` (v1.36.2's with the numbers moved on: `v1.37.0`,
//!   emulation 1.37, minimum compatibility 1.36) and its
//!   `resource.k8s.io/v1` (v1.36's with `devicetaintrules`, GA and on by
//!   default in v1.37);
//! * the resource lists of `apps/v1` and `scheduling.k8s.io/v1` (kinds and
//!   verbs as every release since v1.16 serves them), and of
//!   `scheduling.k8s.io/v1beta1` (PodGroups and Workloads) for a server
//!   started with that beta API enabled ([`Serving::with_scheduling_v1beta1`]:
//!   new beta APIs are off by default, and v1.36 has PodGroups only at
//!   v1alpha2).
//!
//! A group version the server does not list, or a resource its list lacks,
//! answers 404 (after authorization, as the API server does); a group
//! version listed but with no resource list here (rbac, batch, ...) serves
//! whatever it is asked.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use crate::fake_apiserver::recording;

/// The Kubernetes release the stand-in answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// v1.36.2, as recorded.
    V136,
    /// v1.37.0 (v1.36's recordings with what v1.37 serves by default).
    V137,
}

/// What the stand-in serves: a release's default APIs, and any beta API
/// enabled on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// The release.
    pub release: Release,
    /// Whether `scheduling.k8s.io/v1beta1` (PodGroups) is enabled, as with
    /// `--runtime-config=scheduling.k8s.io/v1beta1=true`.
    pub scheduling_v1beta1: bool,
}

impl Serving {
    /// v1.36.2 with its defaults.
    pub fn v136() -> Self {
        Self {
            release: Release::V136,
            scheduling_v1beta1: false,
        }
    }

    /// v1.37 with its defaults.
    pub fn v137() -> Self {
        Self {
            release: Release::V137,
            scheduling_v1beta1: false,
        }
    }

    /// The same with `scheduling.k8s.io/v1beta1` (PodGroups) enabled.
    pub fn with_scheduling_v1beta1(mut self) -> Self {
        self.scheduling_v1beta1 = true;
        self
    }
}

impl Default for Serving {
    /// What the tests written before releases mattered expect: v1.37, the
    /// release berth's defaults follow, with PodGroups served (the gang
    /// tests turn GenericWorkload on).
    fn default() -> Self {
        Self::v137().with_scheduling_v1beta1()
    }
}

/// One resource of an `APIResourceList`.
fn resource(name: &str, kind: &str, namespaced: bool, verbs: &[&str]) -> Value {
    json!({
        "name": name,
        "singularName": if name.contains('/') { String::new() } else { kind.to_ascii_lowercase() },
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    })
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

fn resource_list(group_version: &str, resources: Vec<Value>) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

fn body(name: &str) -> Option<Value> {
    recording(name).ok().map(|r| r["response"]["body"].clone())
}

/// The discovery documents `serving` answers, by path.
pub fn documents(serving: &Serving) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut put = |path: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(path.to_string(), v);
        }
    };
    let version = match serving.release {
        Release::V136 => body("version-v136"),
        Release::V137 => body("discovery_version").map(|mut v| {
            v["minor"] = json!("37");
            v["emulationMinor"] = json!("37");
            v["minCompatibilityMinor"] = json!("36");
            v["gitVersion"] = json!("v1.37.0");
            v
        }),
    };
    put("/version", version);
    put("/api", body("discovery_api"));
    put("/api/v1", body("discovery_api_v1"));
    for (path, name) in [
        (
            "/apis/coordination.k8s.io/v1",
            "discovery_apis_coordination-k8s-io_v1",
        ),
        ("/apis/events.k8s.io/v1", "discovery_apis_events-k8s-io_v1"),
        ("/apis/policy/v1", "discovery_apis_policy_v1"),
        (
            "/apis/storage.k8s.io/v1",
            "discovery_apis_storage-k8s-io_v1",
        ),
    ] {
        put(path, body(name));
    }
    let mut resource_v1 = body("discovery-v136-resource-k8s-io-v1");
    if serving.release == Release::V137
        && let Some(list) = resource_v1.as_mut()
        && let Some(r) = list["resources"].as_array_mut()
    {
        r.push(resource(
            "devicetaintrules",
            "DeviceTaintRule",
            false,
            ALL_VERBS,
        ));
    }
    put("/apis/resource.k8s.io/v1", resource_v1);
    put(
        "/apis/apps/v1",
        Some(resource_list(
            "apps/v1",
            vec![
                resource("controllerrevisions", "ControllerRevision", true, ALL_VERBS),
                resource("daemonsets", "DaemonSet", true, ALL_VERBS),
                resource("daemonsets/status", "DaemonSet", true, STATUS_VERBS),
                resource("deployments", "Deployment", true, ALL_VERBS),
                resource("deployments/scale", "Scale", true, STATUS_VERBS),
                resource("deployments/status", "Deployment", true, STATUS_VERBS),
                resource("replicasets", "ReplicaSet", true, ALL_VERBS),
                resource("replicasets/scale", "Scale", true, STATUS_VERBS),
                resource("replicasets/status", "ReplicaSet", true, STATUS_VERBS),
                resource("statefulsets", "StatefulSet", true, ALL_VERBS),
                resource("statefulsets/scale", "Scale", true, STATUS_VERBS),
                resource("statefulsets/status", "StatefulSet", true, STATUS_VERBS),
            ],
        )),
    );
    put(
        "/apis/scheduling.k8s.io/v1",
        Some(resource_list(
            "scheduling.k8s.io/v1",
            vec![resource(
                "priorityclasses",
                "PriorityClass",
                false,
                ALL_VERBS,
            )],
        )),
    );
    let mut scheduling = body("discovery-v136-scheduling-k8s-io");
    let mut apis = body("discovery_apis");
    if serving.scheduling_v1beta1 {
        let beta = json!({"groupVersion": "scheduling.k8s.io/v1beta1", "version": "v1beta1"});
        if let Some(v) = scheduling
            .as_mut()
            .and_then(|s| s["versions"].as_array_mut())
        {
            v.push(beta.clone());
        }
        if let Some(groups) = apis.as_mut().and_then(|a| a["groups"].as_array_mut()) {
            for g in groups
                .iter_mut()
                .filter(|g| g["name"] == "scheduling.k8s.io")
            {
                if let Some(v) = g["versions"].as_array_mut() {
                    v.push(beta.clone());
                }
            }
        }
        put(
            "/apis/scheduling.k8s.io/v1beta1",
            Some(resource_list(
                "scheduling.k8s.io/v1beta1",
                vec![
                    resource("podgroups", "PodGroup", true, ALL_VERBS),
                    resource("podgroups/status", "PodGroup", true, STATUS_VERBS),
                    resource("workloads", "Workload", true, ALL_VERBS),
                ],
            )),
        );
    }
    put("/apis/scheduling.k8s.io", scheduling);
    put("/apis", apis);
    out
}

/// What a server serves, indexed for the check every request makes: the
/// group versions it lists (`api/v1`, `apis/apps/v1`) and the resources of
/// those it has a list for.
#[derive(Debug, Clone, Default)]
pub struct Served {
    listed: HashSet<String>,
    resources: HashMap<String, HashSet<String>>,
}

impl Served {
    /// The index of `docs`.
    pub fn of(docs: &BTreeMap<String, Value>) -> Self {
        let mut listed = HashSet::new();
        for v in docs
            .get("/api")
            .and_then(|a| a["versions"].as_array())
            .into_iter()
            .flatten()
        {
            if let Some(v) = v.as_str() {
                listed.insert(format!("api/{v}"));
            }
        }
        for g in docs
            .get("/apis")
            .and_then(|a| a["groups"].as_array())
            .into_iter()
            .flatten()
        {
            for v in g["versions"].as_array().into_iter().flatten() {
                if let Some(gv) = v["groupVersion"].as_str() {
                    listed.insert(format!("apis/{gv}"));
                }
            }
        }
        let mut resources = HashMap::new();
        for (path, doc) in docs {
            if doc["kind"] != "APIResourceList" {
                continue;
            }
            let names = doc["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect();
            resources.insert(path.trim_start_matches('/').to_string(), names);
        }
        Self { listed, resources }
    }

    /// Whether `resource` (a plural, or `plural/subresource`) of
    /// `group_version` (`api/v1`, `apis/resource.k8s.io/v1`) is served:
    /// false for a group version the server does not list and for a
    /// resource its list lacks; true where there is no list to say.
    pub fn serves(&self, group_version: &str, resource: &str) -> bool {
        self.listed.contains(group_version)
            && self
                .resources
                .get(group_version)
                .is_none_or(|r| r.contains(resource))
    }
}

/// [`Served::serves`] of `docs`.
pub fn serves(docs: &BTreeMap<String, Value>, group_version: &str, resource: &str) -> bool {
    Served::of(docs).serves(group_version, resource)
}

/// `/apis/<group>` for a group the list names (the `APIGroup` document),
/// when no recording has it.
pub fn group_document(docs: &BTreeMap<String, Value>, group: &str) -> Option<Value> {
    let apis = docs.get("/apis")?;
    let g = apis["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == group)?;
    let mut g = g.clone();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_36_lacks_device_taint_rules_and_pod_groups_v1_37_serves_device_taint_rules() {
        let v136 = documents(&Serving::v136());
        assert_eq!(v136["/version"]["gitVersion"], "v1.36.2");
        assert!(!serves(
            &v136,
            "apis/resource.k8s.io/v1",
            "devicetaintrules"
        ));
        assert!(serves(&v136, "apis/resource.k8s.io/v1", "resourceslices"));
        assert!(!serves(
            &v136,
            "apis/scheduling.k8s.io/v1beta1",
            "podgroups"
        ));
        assert!(serves(&v136, "api/v1", "pods/binding"));
        assert!(serves(&v136, "apis/apps/v1", "replicasets"));
        assert!(!serves(&v136, "apis/nope.example.com/v1", "things"));
        // Groups without a resource list here serve what they are asked.
        assert!(serves(&v136, "apis/rbac.authorization.k8s.io/v1", "roles"));

        let v137 = documents(&Serving::v137());
        assert_eq!(v137["/version"]["minor"], "37");
        assert_eq!(v137["/version"]["emulationMinor"], "37");
        assert!(serves(&v137, "apis/resource.k8s.io/v1", "devicetaintrules"));
        assert!(!serves(
            &v137,
            "apis/scheduling.k8s.io/v1beta1",
            "podgroups"
        ));
        let beta = documents(&Serving::v137().with_scheduling_v1beta1());
        assert!(serves(
            &beta,
            "apis/scheduling.k8s.io/v1beta1",
            "podgroups/status"
        ));
        assert_eq!(
            beta["/apis/scheduling.k8s.io"]["versions"][1]["version"],
            "v1beta1"
        );
        assert_eq!(
            group_document(&v136, "apps").unwrap()["versions"][0]["groupVersion"],
            "apps/v1"
        );
    }
}
