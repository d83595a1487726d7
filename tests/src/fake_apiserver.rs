//! A stand-in Kubernetes API server for tests: an in-process HTTP/1.1
//! server on 127.0.0.1 that answers as the kube-apiserver v1.36 recorded in
//! `tests/k8s-api/` answered (status codes, `Status` bodies, list and
//! watch shapes), so berthd's kube mode can be tested without a cluster.
//!
//! It keeps objects of any resource by path (`/api/v1/...`,
//! `/apis/<group>/<version>/...`) with UIDs and a global resourceVersion,
//! and serves:
//!
//! * the `/version` and discovery of one release, v1.36 as recorded or
//!   v1.37 ([`crate::fake_discovery`], [`FakeApiServer::start_serving`]),
//!   and `404 the server could not find the requested resource` for a
//!   resource that release does not serve (as v1.36 answers for
//!   DeviceTaintRules and v1beta1 PodGroups);
//! * lists (namespace, `fieldSelector`, equality-based `labelSelector`,
//!   `limit`/`continue` paging) with the
//!   list's resourceVersion;
//! * watches as chunked JSON lines from a resourceVersion (replaying what
//!   happened since, then live events), a `BOOKMARK` after the replay when
//!   `allowWatchBookmarks` is set, and an `ERROR` event with a 410 `Status`
//!   ("too old resource version") for a resourceVersion older than the last
//!   [`FakeApiServer::compact`];
//! * create (409 AlreadyExists), get, replace (409 Conflict on a stale
//!   resourceVersion), status patches (strategic merge with conditions
//!   merged by type, or merge patch), delete with a UID precondition (a
//!   bound pod is only marked terminating, as there is no kubelet), and
//!   `pods/binding` (201, 409 already assigned or stale UID, 404; staged
//!   with [`FakeApiServer::before_binding`]: a race, an error status, or
//!   the binding stored and the connection dropped without an answer);
//! * Leases like any other object (create, get, replace with conflicts);
//! * `pods/portforward` over WebSocket, to the pod's `status.podIP`
//!   ([`crate::portforward`]);
//! * `metadata.generateName` on create (a deterministic suffix);
//! * `scheduling.k8s.io/v1beta1` PodGroups as v1.37 creates them (status
//!   `{}`, `disruptionMode` defaulted to `single`, the protection
//!   finalizer), their `status` patched by strategic merge (conditions by
//!   type, `$` directives ignored);
//! * `resource.k8s.io/v1` objects: a ResourceClaim's `PUT` keeps its
//!   status and a `PUT` of its `status` keeps the rest, and strategic merge
//!   patches of `reservedFor` merge by UID (`$patch: delete` removes one),
//!   a UID in the patch's metadata being a precondition.
//!
//! With users added ([`FakeApiServer::add_user`]) it authenticates as the
//! API server does (a bearer token it does not know, or none: 401
//! `Unauthorized`) and authorizes as its RBAC authorizer does: each user's
//! ClusterRole and Role rules (API groups, resources with subresources,
//! verbs, `resourceNames`), refusals answered 403 `Forbidden` with the
//! recorded message naming the user, verb, resource, group and namespace
//! (a refused watch gets the `Status` as its whole answer). Discovery is
//! open to every authenticated user, as `system:discovery` makes it. It
//! also authorizes a ResourceClaim status write that changes
//! `status.allocation` or `status.reservedFor` as v1.36 does
//! (DRAResourceClaimGranularStatusAuthorization): the verb on
//! `resourceclaims/binding` at the cluster scope, else the recorded 422
//! (`dra-claim-allocate-forbidden-binding`).
//!
//! Tests can replay an API server restart as recorded
//! ([`FakeApiServer::replay_restart`], `apiserver-restart-sequence`):
//! connections refused, then accepted and held, then every request
//! refused 403 for a moment (the authorizer's caches not filled yet), then
//! answered again.
//!
//! Tests can take the whole server down ([`FakeApiServer::go_down`]:
//! every connection closed unanswered) and bring it back, drop every watch
//! connection and hold new ones back
//! ([`FakeApiServer::hold_watches`]), change objects meanwhile, compact the
//! history (so resuming watchers get 410 Gone and relist), then release
//! them. Every request is recorded (method, path, query, content type,
//! body), and tests wait for requests, never for time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

pub use crate::fake_discovery::{Release, Serving};

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query parameters, decoded.
    pub query: BTreeMap<String, String>,
    /// The Content-Type header.
    pub content_type: Option<String>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The status answered.
    pub status: u16,
}

/// What happens to a pod just before its binding is handled, to stage the
/// races a scheduler must survive.
#[derive(Debug, Clone)]
pub enum BeforeBinding {
    /// The pod is deleted (its binding then answers 404).
    Delete,
    /// Another scheduler binds it to this node first (409 already
    /// assigned).
    BindTo(String),
    /// The binding is answered with this status (a `Status` body), after
    /// binding the pod first when `commit` (a 504 whose write went
    /// through, as a timed-out API server may answer).
    Fail {
        /// The HTTP status answered.
        code: u16,
        /// Whether the binding was stored anyway.
        commit: bool,
    },
    /// The binding is stored, then the connection is dropped without an
    /// answer, and the watches with it (the API server killed just after
    /// it persisted the write): new watches wait for
    /// [`FakeApiServer::release_watches`].
    DropAnswer,
    /// Nothing is stored and the server goes down (as
    /// [`FakeApiServer::go_down`]) before answering.
    GoDown,
    /// The binding is stored and answered 201, then the server goes down
    /// (as [`FakeApiServer::go_down`]): what the scheduler writes after the
    /// binding (its event) finds no server.
    GoDownAfter,
}

/// What the server does instead of answering: drops the connection.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped without an answer")
    }
}

impl std::error::Error for Dropped {}

/// The status that stands for "no answer": the connection is dropped.
const NO_ANSWER: u16 = 0;
/// The status that stands for "the server goes down now".
const GO_DOWN: u16 = 1;
/// The status that stands for "answered 201, then the server goes down".
const BOUND_THEN_DOWN: u16 = 2;

/// Where a resource lives: `api/v1/pods`, `apis/coordination.k8s.io/v1/leases`.
type Resource = String;
/// (resource, namespace, name).
type Key = (Resource, String, String);

struct Change {
    rv: u64,
    resource: Resource,
    namespace: String,
    kind: &'static str,
    object: Value,
    old: Option<Value>,
}

struct Watcher {
    resource: Resource,
    namespace: Option<String>,
    selector: Vec<FieldTerm>,
    tx: mpsc::UnboundedSender<Bytes>,
}

#[derive(Default)]
struct State {
    rv: u64,
    uid: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    /// Watches from before this resourceVersion get 410 Gone.
    compacted: u64,
    watchers: Vec<Watcher>,
    requests: Vec<Recorded>,
    before_binding: BTreeMap<(String, String), BeforeBinding>,
    /// Users by bearer token; empty: no authentication or authorization.
    users: BTreeMap<String, User>,
}

/// One rule of a Role or ClusterRole, as RBAC's `PolicyRule`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// API groups (`""` the core group, `*` all).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources, `pods/binding` for a subresource, `*` all.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names the rule is limited to (none: all).
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Verbs, `*` all.
    pub verbs: Vec<String>,
}

impl PolicyRule {
    /// Rules from the `rules` of a Role or ClusterRole (as JSON).
    pub fn from_role(role: &Value) -> Result<Vec<Self>> {
        Ok(serde_json::from_value(role["rules"].clone())?)
    }

    /// Whether this rule lets `verb` act on `resource` (`pods/binding`) of
    /// `group`, for an object named `name` (none for create and list).
    pub fn grants(&self, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        any(&self.api_groups, group)
            && any(&self.resources, resource)
            && any(&self.verbs, verb)
            && (self.resource_names.is_empty()
                || name.is_some_and(|n| self.resource_names.iter().any(|x| x == n)))
    }
}

/// A user the server knows by token, with what RBAC grants it.
#[derive(Debug, Clone)]
struct User {
    name: String,
    /// ClusterRoles bound with ClusterRoleBindings: every namespace.
    cluster: Vec<PolicyRule>,
    /// Roles bound with RoleBindings: their namespace only.
    namespaced: Vec<(String, Vec<PolicyRule>)>,
}

impl User {
    fn allows(&self, verb: &str, t: &Target) -> bool {
        let resource = match &t.subresource {
            Some(sub) => format!("{}/{sub}", t.plural),
            None => t.plural.clone(),
        };
        let name = t.name.as_deref();
        self.cluster
            .iter()
            .any(|r| r.grants(verb, t.group(), &resource, name))
            || t.namespace.as_ref().is_some_and(|ns| {
                self.namespaced
                    .iter()
                    .filter(|(n, _)| n == ns)
                    .flat_map(|(_, rules)| rules)
                    .any(|r| r.grants(verb, t.group(), &resource, name))
            })
    }
}

/// The RBAC verb of a request.
fn rbac_verb(method: &str, t: &Target, watching: bool) -> &'static str {
    match (method, t.name.is_some()) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

/// The 403 the API server answers `user` for `verb` on `t`.
fn forbidden(user: &str, verb: &str, t: &Target) -> Value {
    let resource = match &t.subresource {
        Some(sub) => format!("{}/{sub}", t.plural),
        None => t.plural.clone(),
    };
    let subject = match &t.name {
        Some(n) => format!("{} {n:?}", t.qualified()),
        None => t.qualified(),
    };
    let scope = match &t.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".into(),
    };
    let mut d = serde_json::Map::new();
    if let Some(n) = &t.name {
        d.insert("name".into(), json!(n));
    }
    if !t.group().is_empty() {
        d.insert("group".into(), json!(t.group()));
    }
    d.insert("kind".into(), json!(t.plural));
    status_body(
        403,
        "Forbidden",
        &format!(
            "{subject} is forbidden: User {user:?} cannot {verb} resource {resource:?} in API group {:?} {scope}",
            t.group()
        ),
        Value::Object(d),
    )
}

impl State {
    /// The user a request's bearer token names, when users are known.
    fn user(&self, authorization: Option<&str>) -> Option<&User> {
        authorization
            .and_then(|a| a.strip_prefix("Bearer "))
            .and_then(|token| self.users.get(token.trim()))
    }

    /// Authentication and authorization: `None` when the request may go
    /// on, else the answer.
    fn authorize(
        &self,
        method: &str,
        path: &str,
        watching: bool,
        authorization: Option<&str>,
    ) -> Option<(u16, Value)> {
        if self.users.is_empty() {
            return None;
        }
        let user = authorization
            .and_then(|a| a.strip_prefix("Bearer "))
            .and_then(|token| self.users.get(token.trim()));
        let Some(user) = user else {
            return Some((
                401,
                status_body(401, "Unauthorized", "Unauthorized", Value::Null),
            ));
        };
        // Discovery (`/version`, `/api`, `/apis/<group>/<version>`), which
        // names no resource: open to every authenticated user
        // (system:discovery).
        let t = Target::parse(path)?;
        let verb = rbac_verb(method, &t, watching);
        if user.allows(verb, &t) {
            None
        } else {
            Some((403, forbidden(&user.name, verb, &t)))
        }
    }
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on each recorded request.
    recorded: watch::Sender<usize>,
    /// True while new watches are held back.
    held: watch::Sender<bool>,
    /// True while the server is down: connections are closed at once,
    /// unanswered.
    down: watch::Sender<bool>,
    /// Connections closed unanswered while down.
    refused: watch::Sender<usize>,
    /// True while every request is held unanswered (a restarting server
    /// that accepts connections before it serves).
    holding: watch::Sender<bool>,
    /// Requests held so far.
    held_requests: watch::Sender<usize>,
    /// True while the authorizer is not ready: every resource request is
    /// refused 403, as a starting server refuses them.
    authorizer_starting: watch::Sender<bool>,
    /// 403s answered while the authorizer was starting.
    starting_refusals: watch::Sender<usize>,
    discovery: BTreeMap<String, Value>,
    /// What `discovery` says is served, indexed.
    served: crate::fake_discovery::Served,
}

/// The stand-in API server; stops when dropped.
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// How long a wait for a request may take before the test fails; a guard,
/// never what a test waits for.
const GUARD: Duration = Duration::from_secs(60);

/// The directory of the recorded v1.36 traffic: the `BERTH_K8S_RECORDINGS`
/// variable, else the copy kept in the repository (`tests/k8s-api`), else
/// the first `shared/k8s-api` found beside the workspace or one of its
/// ancestors.
pub fn recordings_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("BERTH_K8S_RECORDINGS") {
        return Some(PathBuf::from(d));
    }
    let kept = crate::workspace_root().join("tests/k8s-api");
    if kept.join("INDEX.tsv").is_file() {
        return Some(kept);
    }
    crate::workspace_root()
        .ancestors()
        .map(|a| a.join("shared/k8s-api"))
        .find(|d| d.join("INDEX.tsv").is_file())
}

/// One recorded request/response pair (`<name>.json`) from
/// [`recordings_dir`].
pub fn recording(name: &str) -> Result<Value> {
    let dir = recordings_dir().ok_or_else(|| {
        anyhow!("the recorded API traffic (tests/k8s-api) was not found; set BERTH_K8S_RECORDINGS")
    })?;
    let path = dir.join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The rules of the built-in roles kube-scheduler v1.37 runs with
/// (`system:kube-scheduler` and `system:volume-scheduler`, bound to the user
/// system:kube-scheduler in every cluster): the v1.36 recordings, plus the
/// read access to DeviceTaintRules that the bootstrap policy grants whenever
/// DRADeviceTaintRules is on (off by default in v1.36, GA in v1.37).
pub fn kube_scheduler_rules() -> Result<Vec<PolicyRule>> {
    let mut rules = Vec::new();
    for name in [
        "clusterrole-system-kube-scheduler",
        "clusterrole-system-volume-scheduler",
    ] {
        rules.extend(PolicyRule::from_role(&recording(name)?["body"])?);
    }
    rules.push(PolicyRule {
        api_groups: vec!["resource.k8s.io".into()],
        resources: vec!["devicetaintrules".into()],
        resource_names: Vec::new(),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
    });
    Ok(rules)
}

/// A Ready node as a kubelet registers it: `cpu` and `memory` as both
/// capacity and allocatable, 110 pods, the hostname label.
pub fn ready_node(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    })
}

// ---------------------------------------------------------------------------
// Paths and resources

/// A request path taken apart.
#[derive(Debug, Clone)]
struct Target {
    /// `api/v1` or `apis/<group>/<version>`.
    group_version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn parse(path: &str) -> Option<Self> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (gv, rest) = match *segs.first()? {
            "api" if segs.len() >= 2 => (format!("api/{}", segs[1]), &segs[2..]),
            "apis" if segs.len() >= 3 => (format!("apis/{}/{}", segs[1], segs[2]), &segs[3..]),
            _ => return None,
        };
        let (namespace, rest) = if rest.len() >= 3 && rest[0] == "namespaces" {
            (Some(rest[1].to_string()), &rest[2..])
        } else {
            (None, rest)
        };
        Some(Self {
            group_version: gv,
            plural: rest.first()?.to_string(),
            namespace,
            name: rest.get(1).map(|s| s.to_string()),
            subresource: rest.get(2).map(|s| s.to_string()),
        })
    }

    fn resource(&self) -> Resource {
        format!("{}/{}", self.group_version, self.plural)
    }

    fn group(&self) -> &str {
        match self.group_version.split('/').collect::<Vec<_>>()[..] {
            ["apis", g, _] => g,
            _ => "",
        }
    }

    fn api_version(&self) -> String {
        match self.group_version.split('/').collect::<Vec<_>>()[..] {
            ["apis", g, v] => format!("{g}/{v}"),
            [_, v] => v.to_string(),
            _ => String::new(),
        }
    }

    /// `pods` or `leases.coordination.k8s.io`, as messages name resources.
    fn qualified(&self) -> String {
        match self.group() {
            "" => self.plural.clone(),
            g => format!("{}.{g}", self.plural),
        }
    }
}

fn kind_of(plural: &str) -> String {
    match plural {
        "pods" => "Pod",
        "nodes" => "Node",
        "namespaces" => "Namespace",
        "persistentvolumes" => "PersistentVolume",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        "storageclasses" => "StorageClass",
        "csinodes" => "CSINode",
        "poddisruptionbudgets" => "PodDisruptionBudget",
        "services" => "Service",
        "replicasets" => "ReplicaSet",
        "statefulsets" => "StatefulSet",
        "replicationcontrollers" => "ReplicationController",
        "leases" => "Lease",
        "events" => "Event",
        "deviceclasses" => "DeviceClass",
        "resourceclaims" => "ResourceClaim",
        "resourceclaimtemplates" => "ResourceClaimTemplate",
        "resourceslices" => "ResourceSlice",
        "podgroups" => "PodGroup",
        "workloads" => "Workload",
        "devicetaintrules" => "DeviceTaintRule",
        "csidrivers" => "CSIDriver",
        "csistoragecapacities" => "CSIStorageCapacity",
        "priorityclasses" => "PriorityClass",
        other => return other.trim_end_matches('s').to_string(),
    }
    .to_string()
}

/// A `Status` body as the API server writes it.
fn status_body(code: u16, reason: &str, message: &str, details: Value) -> Value {
    let mut v = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "code": code,
    });
    if code >= 300 {
        v["message"] = json!(message);
        v["reason"] = json!(reason);
        if !details.is_null() {
            v["details"] = details;
        }
    }
    v
}

fn details(t: &Target, name: &str, kind: Option<&str>) -> Value {
    let mut d = json!({"name": name});
    if !t.group().is_empty() {
        d["group"] = json!(t.group());
    }
    d["kind"] = json!(kind.map_or(t.plural.clone(), str::to_string));
    d
}

fn not_found(t: &Target, name: &str) -> (u16, Value) {
    (
        404,
        status_body(
            404,
            "NotFound",
            &format!("{} {name:?} not found", t.qualified()),
            details(t, name, None),
        ),
    )
}

// ---------------------------------------------------------------------------
// Field selectors

#[derive(Debug, Clone)]
struct FieldTerm {
    path: String,
    value: String,
    equal: bool,
}

fn parse_selector(s: &str) -> Vec<FieldTerm> {
    s.split(',')
        .filter(|t| !t.is_empty())
        .filter_map(|t| {
            if let Some((p, v)) = t.split_once("!=") {
                Some(FieldTerm {
                    path: p.into(),
                    value: v.into(),
                    equal: false,
                })
            } else if let Some((p, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Some(FieldTerm {
                    path: p.into(),
                    value: v.into(),
                    equal: true,
                })
            } else {
                None
            }
        })
        .collect()
}

fn field(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for part in path.split('.') {
        v = &v[part];
    }
    v.as_str().unwrap_or("").to_string()
}

fn matches(obj: &Value, selector: &[FieldTerm]) -> bool {
    selector
        .iter()
        .all(|t| (field(obj, &t.path) == t.value) == t.equal)
}

/// Whether `obj`'s labels satisfy an equality-based label selector
/// (`k=v`, `k==v`, `k!=v`; a label that is absent is not equal to any
/// value), as `labelSelector` filters lists. Keys are whole (they hold
/// dots and slashes), unlike field paths.
fn matches_labels(obj: &Value, selector: &[FieldTerm]) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector.iter().all(|t| {
        let value = labels.get(&t.path).and_then(Value::as_str);
        (value == Some(t.value.as_str())) == t.equal
    })
}

// ---------------------------------------------------------------------------
// Patches

fn merge_patch(target: &mut Value, patch: &Value, strategic: bool) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in p {
        // Directives (`$setElementOrder/...`) order lists; the stand-in
        // keeps the stored order.
        if strategic && k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            if let Some(o) = target.as_object_mut() {
                o.remove(k);
            }
            continue;
        }
        // reservedFor merges by uid; `$patch: delete` removes an entry (as
        // kube-scheduler's Unreserve sends it).
        if strategic && k == "reservedFor" && v.is_array() {
            let mut list = target[k.as_str()].as_array().cloned().unwrap_or_default();
            for e in v.as_array().into_iter().flatten() {
                if e["$patch"] == "delete" {
                    list.retain(|x| x["uid"] != e["uid"]);
                } else {
                    match list.iter_mut().find(|x| x["uid"] == e["uid"]) {
                        Some(x) => merge_patch(x, e, true),
                        None => list.push(e.clone()),
                    }
                }
            }
            if list.is_empty() {
                if let Some(o) = target.as_object_mut() {
                    o.remove(k);
                }
            } else {
                target[k.as_str()] = Value::Array(list);
            }
            continue;
        }
        if strategic && k == "conditions" && v.is_array() {
            let list = target[k.as_str()].as_array().cloned().unwrap_or_default();
            let mut list = list;
            for c in v.as_array().into_iter().flatten() {
                match list.iter_mut().find(|x| x["type"] == c["type"]) {
                    Some(x) => merge_patch(x, c, true),
                    None => list.push(c.clone()),
                }
            }
            target[k.as_str()] = Value::Array(list);
            continue;
        }
        match target.get_mut(k.as_str()) {
            Some(t) if v.is_object() => merge_patch(t, v, strategic),
            _ => {
                let mut nv = json!({});
                if v.is_object() {
                    merge_patch(&mut nv, v, strategic);
                } else {
                    nv = v.clone();
                }
                target[k.as_str()] = nv;
            }
        }
    }
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Civil date from days since the epoch (proleptic Gregorian).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

// ---------------------------------------------------------------------------
// The store

impl State {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record_change(&mut self, t: &Target, kind: &'static str, object: Value, old: Option<Value>) {
        let rv = self.rv;
        let change = Change {
            rv,
            resource: t.resource(),
            namespace: t.namespace.clone().unwrap_or_default(),
            kind,
            object,
            old,
        };
        self.watchers.retain(|w| match watch_line(w, &change) {
            Some(line) => w.tx.send(line).is_ok(),
            None => !w.tx.is_closed(),
        });
        self.history.push(change);
    }

    fn key(t: &Target, name: &str) -> Key {
        (
            t.resource(),
            t.namespace.clone().unwrap_or_default(),
            name.to_string(),
        )
    }

    fn create(&mut self, t: &Target, mut obj: Value) -> (u16, Value) {
        let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty()
            && let Some(prefix) = obj["metadata"]["generateName"].as_str()
        {
            // A deterministic stand-in for the API's random suffix.
            const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
            let mut n = self.uid + 1;
            let suffix: String = (0..5)
                .map(|_| {
                    let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                    n /= ALPHABET.len() as u64;
                    c
                })
                .collect();
            name = format!("{prefix}{suffix}");
            obj["metadata"]["name"] = json!(name);
        }
        if name.is_empty() {
            return (
                422,
                status_body(422, "Invalid", "metadata.name: Required value", json!({})),
            );
        }
        let key = Self::key(t, &name);
        if self.objects.contains_key(&key) {
            return (
                409,
                status_body(
                    409,
                    "AlreadyExists",
                    &format!("{} {name:?} already exists", t.qualified()),
                    details(t, &name, None),
                ),
            );
        }
        let rv = self.next_rv();
        self.uid += 1;
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(kind_of(&t.plural));
        let meta = &mut obj["metadata"];
        if meta["uid"].as_str().is_none_or(str::is_empty) {
            meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012x}", self.uid));
        }
        meta["resourceVersion"] = json!(rv.to_string());
        meta["creationTimestamp"] = json!(now_rfc3339());
        if let Some(ns) = &t.namespace {
            meta["namespace"] = json!(ns);
        }
        if t.plural == "pods" {
            if obj["status"]["phase"].is_null() {
                obj["status"]["phase"] = json!("Pending");
            }
            // Pods have a generation since v1.33 (the PodScheduled
            // condition's observedGeneration refers to it).
            obj["metadata"]["generation"] = json!(1);
        }
        if t.plural == "podgroups" {
            // As v1.37's PodGroup strategy and defaults: the status starts
            // empty, disruptionMode defaults to single, and the protection
            // finalizer is added (no metadata.generation, as recorded).
            obj["status"] = json!({});
            if obj["spec"]["disruptionMode"].is_null() {
                obj["spec"]["disruptionMode"] = json!({"single": {}});
            }
            obj["metadata"]["finalizers"] = json!(["scheduling.k8s.io/podgroup-protection"]);
        }
        self.objects.insert(key, obj.clone());
        self.record_change(t, "ADDED", obj.clone(), None);
        (201, obj)
    }

    fn replace(&mut self, t: &Target, name: &str, mut obj: Value) -> (u16, Value) {
        let key = Self::key(t, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return not_found(t, name);
        };
        // Kinds with a status subresource: a PUT of the object keeps the
        // stored status, a PUT of `status` keeps everything else.
        if t.plural == "resourceclaims" {
            let rv = obj["metadata"]["resourceVersion"].clone();
            if t.subresource.as_deref() == Some("status") {
                let status = obj["status"].clone();
                obj = old.clone();
                obj["status"] = status;
                obj["metadata"]["resourceVersion"] = rv;
            } else {
                obj["status"] = old["status"].clone();
            }
        }
        let want = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !want.is_empty() && want != old["metadata"]["resourceVersion"].as_str().unwrap_or("") {
            return (
                409,
                status_body(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                        t.qualified()
                    ),
                    details(t, name, None),
                ),
            );
        }
        let rv = self.next_rv();
        obj["apiVersion"] = old["apiVersion"].clone();
        obj["kind"] = old["kind"].clone();
        obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
        obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if let Some(ns) = &t.namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        self.objects.insert(key, obj.clone());
        self.record_change(t, "MODIFIED", obj.clone(), Some(old));
        (200, obj)
    }

    fn modify(&mut self, t: &Target, name: &str, f: impl FnOnce(&mut Value)) -> (u16, Value) {
        let key = Self::key(t, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return not_found(t, name);
        };
        let mut obj = old.clone();
        f(&mut obj);
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.insert(key, obj.clone());
        self.record_change(t, "MODIFIED", obj.clone(), Some(old));
        (200, obj)
    }

    fn remove(&mut self, t: &Target, name: &str) -> Option<Value> {
        let obj = self.objects.remove(&Self::key(t, name))?;
        let rv = self.next_rv();
        let mut last = obj.clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record_change(t, "DELETED", last.clone(), Some(obj));
        Some(last)
    }

    fn delete(&mut self, t: &Target, name: &str, options: &Value) -> (u16, Value) {
        let key = Self::key(t, name);
        let Some(obj) = self.objects.get(&key).cloned() else {
            return not_found(t, name);
        };
        let actual = obj["metadata"]["uid"].as_str().unwrap_or("");
        if let Some(want) = options["preconditions"]["uid"].as_str()
            && want != actual
        {
            return (
                409,
                status_body(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {} {name:?}: Precondition failed: UID in precondition: {want}, UID in object meta: {actual}",
                        t.qualified()
                    ),
                    details(t, name, None),
                ),
            );
        }
        let bound = !obj["spec"]["nodeName"].as_str().unwrap_or("").is_empty();
        if t.plural == "pods" && bound && options["gracePeriodSeconds"].as_i64() != Some(0) {
            // No kubelet: the pod is only marked terminating.
            return self.modify(t, name, |p| {
                p["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
            });
        }
        match self.remove(t, name) {
            Some(last) => (200, last),
            None => not_found(t, name),
        }
    }

    fn bind(&mut self, t: &Target, name: &str, binding: &Value) -> (u16, Value) {
        let ns = t.namespace.clone().unwrap_or_default();
        if let Some(action) = self.before_binding.remove(&(ns, name.to_string())) {
            match action {
                BeforeBinding::Fail { code, commit } => {
                    if commit {
                        self.bind(t, name, binding);
                    }
                    let reason = match code {
                        504 => "Timeout",
                        503 => "ServiceUnavailable",
                        429 => "TooManyRequests",
                        _ => "InternalError",
                    };
                    return (
                        code,
                        status_body(
                            code,
                            reason,
                            "the server was unable to return a response in the time allotted, but may still be processing the request",
                            json!({}),
                        ),
                    );
                }
                BeforeBinding::Delete => {
                    self.remove(t, name);
                }
                BeforeBinding::GoDown => return (GO_DOWN, Value::Null),
                BeforeBinding::GoDownAfter => {
                    let (code, body) = self.bind(t, name, binding);
                    return if code == 201 {
                        (BOUND_THEN_DOWN, body)
                    } else {
                        (code, body)
                    };
                }
                BeforeBinding::DropAnswer => {
                    // Dies with it: the watchers hear nothing of it.
                    self.watchers.clear();
                    self.bind(t, name, binding);
                    return (NO_ANSWER, Value::Null);
                }
                BeforeBinding::BindTo(node) => {
                    let uid = self
                        .objects
                        .get(&Self::key(t, name))
                        .map(|p| p["metadata"]["uid"].clone())
                        .unwrap_or(Value::Null);
                    let other =
                        json!({"metadata": {"name": name, "uid": uid}, "target": {"name": node}});
                    self.bind(t, name, &other);
                }
            }
        }
        let key = Self::key(t, name);
        let Some(pod) = self.objects.get(&key).cloned() else {
            return not_found(t, name);
        };
        let actual = pod["metadata"]["uid"].as_str().unwrap_or("");
        if let Some(want) = binding["metadata"]["uid"].as_str()
            && want != actual
        {
            return (
                409,
                status_body(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on pods {name:?}: StorageError: invalid object, Code: 4, Key: /registry/pods/{}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {want}, UID in object meta: {actual}",
                        t.namespace.as_deref().unwrap_or("")
                    ),
                    json!({"name": name, "kind": "pods"}),
                ),
            );
        }
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return (
                409,
                status_body(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on pods/binding {name:?}: pod {name} is already assigned to node {node:?}"
                    ),
                    json!({"name": name, "kind": "pods/binding"}),
                ),
            );
        }
        let node = binding["target"]["name"].as_str().unwrap_or("").to_string();
        self.modify(t, name, |p| {
            p["spec"]["nodeName"] = json!(node);
            // v1.35+ (ClearingNominatedNodeNameAfterBinding, on by default).
            if let Some(status) = p["status"].as_object_mut() {
                status.remove("nominatedNodeName");
            }
            merge_patch(
                &mut p["status"],
                &json!({"conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}]}),
                true,
            );
        });
        (201, status_body(201, "", "", Value::Null))
    }

    fn list(&self, t: &Target, query: &BTreeMap<String, String>) -> Value {
        let selector = parse_selector(query.get("fieldSelector").map_or("", String::as_str));
        let labels = parse_selector(query.get("labelSelector").map_or("", String::as_str));
        let resource = t.resource();
        // Objects of one resource are adjacent in the map (the key starts
        // with the resource); only the page's are copied.
        let items: Vec<&Value> = self
            .objects
            .range((resource.clone(), String::new(), String::new())..)
            .take_while(|((r, _, _), _)| *r == resource)
            .filter(|((_, ns, _), _)| t.namespace.as_ref().is_none_or(|want| want == ns))
            .map(|(_, o)| o)
            .filter(|o| matches(o, &selector) && matches_labels(o, &labels))
            .collect();
        let start: usize = query
            .get("continue")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let limit: usize = query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let page: Vec<Value> = items
            .iter()
            .skip(start)
            .take(limit)
            .map(|o| {
                let mut o = (*o).clone();
                if let Some(m) = o.as_object_mut() {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                o
            })
            .collect();
        let mut meta = json!({"resourceVersion": self.rv.to_string()});
        let next = start.saturating_add(page.len());
        if next < items.len() {
            meta["continue"] = json!(next.to_string());
            meta["remainingItemCount"] = json!(items.len() - next);
        }
        json!({
            "kind": format!("{}List", kind_of(&t.plural)),
            "apiVersion": t.api_version(),
            "metadata": meta,
            "items": page,
        })
    }
}

/// The watch line `change` makes for `w`, if any: objects entering or
/// leaving the selector are ADDED or DELETED, as the API server sends them.
fn watch_line(w: &Watcher, c: &Change) -> Option<Bytes> {
    if w.resource != c.resource || w.namespace.as_ref().is_some_and(|n| *n != c.namespace) {
        return None;
    }
    let now = matches(&c.object, &w.selector);
    let before = c.old.as_ref().is_some_and(|o| matches(o, &w.selector));
    let kind = match (c.kind, before, now) {
        ("DELETED", true, _) => "DELETED",
        ("DELETED", false, _) => return None,
        ("ADDED", _, true) => "ADDED",
        ("MODIFIED", true, true) => "MODIFIED",
        ("MODIFIED", false, true) => "ADDED",
        ("MODIFIED", true, false) => "DELETED",
        _ => return None,
    };
    Some(watch_event_line(kind, &c.object))
}

/// One line of a watch: `{"type":...,"object":...}` with `type` first, as
/// the API server writes it (a JSON map would sort `object` first, and
/// clients then have to buffer the object before they know its event).
fn watch_event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    // Writing a Value to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut line, object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

// ---------------------------------------------------------------------------
// HTTP

/// The bodies the stand-in answers with.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query());
    if method == "GET" && path.ends_with("/portforward") {
        return Ok(port_forward(&shared, req, &path));
    }
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut rec = Recorded {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        content_type,
        body: body.clone(),
        status: 0,
    };
    if *shared.down.borrow() {
        shared.refused.send_modify(|n| *n += 1);
        return Err(Dropped);
    }
    if *shared.holding.borrow() {
        // Accepted, not answered until the server serves (or goes down).
        shared.held_requests.send_modify(|n| *n += 1);
        let mut holding = shared.holding.subscribe();
        let _ = holding.wait_for(|h| !*h).await;
        if *shared.down.borrow() {
            return Err(Dropped);
        }
    }
    let watching =
        method == "GET" && matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    let target = Target::parse(&path);
    if *shared.authorizer_starting.borrow()
        && let Some(t) = &target
    {
        // The authorizer's caches are not filled yet: an ordinary RBAC
        // refusal, whoever asks (`forbidden-during-apiserver-start`).
        let user = shared
            .state
            .lock()
            .user(authorization.as_deref())
            .map_or_else(|| "system:anonymous".to_string(), |u| u.name.clone());
        let out = forbidden(&user, rbac_verb(&method, t, watching), t);
        rec.status = 403;
        record(&shared, rec);
        shared.starting_refusals.send_modify(|n| *n += 1);
        return Ok(json_response(403, &out));
    }
    let refused = shared
        .state
        .lock()
        .authorize(&method, &path, watching, authorization.as_deref());
    if let Some((status, out)) = refused {
        rec.status = status;
        record(&shared, rec);
        return Ok(json_response(status, &out));
    }
    if let Some(t) = &target {
        let served = match &t.subresource {
            Some(sub) => shared
                .served
                .serves(&t.group_version, &format!("{}/{sub}", t.plural)),
            None => shared.served.serves(&t.group_version, &t.plural),
        };
        if !served {
            rec.status = 404;
            record(&shared, rec);
            return Ok(json_response(404, &not_served()));
        }
    }
    let user = shared.state.lock().user(authorization.as_deref()).cloned();
    if watching {
        rec.status = 200;
        record(&shared, rec);
        return Ok(start_watch(shared, &path, &query).await);
    }
    let (status, out) = answer(
        &shared,
        &method,
        &path,
        &query,
        rec.content_type.as_deref(),
        &body,
        user.as_ref(),
    );
    rec.status = status;
    record(&shared, rec);
    if status == NO_ANSWER {
        return Err(Dropped);
    }
    Ok(json_response(status, &out))
}

/// `pods/portforward`: the checks the API server makes, then the WebSocket
/// ([`crate::portforward`]).
fn port_forward(shared: &Shared, req: Request<Incoming>, path: &str) -> Response<Body> {
    let query = req.uri().query().unwrap_or_default().to_string();
    let ports: Vec<String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "ports")
        .map(|(_, v)| decode(v))
        .collect();
    let rec = |status: u16| Recorded {
        method: "GET".into(),
        path: path.to_string(),
        query: parse_query(Some(&query)),
        content_type: None,
        body: Value::Null,
        status,
    };
    let refuse = |status: u16, body: Value| {
        record(shared, rec(status));
        crate::portforward::refusal(status, &body)
    };
    let Some(t) = Target::parse(path).filter(|t| t.resource() == "api/v1/pods") else {
        return refuse(
            404,
            status_body(
                404,
                "NotFound",
                "the server could not find the requested resource",
                json!({}),
            ),
        );
    };
    let name = t.name.clone().unwrap_or_default();
    let Some(pod) = shared
        .state
        .lock()
        .objects
        .get(&State::key(&t, &name))
        .cloned()
    else {
        let (status, body) = not_found(&t, &name);
        return refuse(status, body);
    };
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        let message = format!("pod {name} does not have a host assigned");
        return refuse(400, status_body(400, "BadRequest", &message, json!({})));
    }
    let ports = match crate::portforward::parse_ports(
        &ports.iter().map(String::as_str).collect::<Vec<_>>(),
    ) {
        Ok(p) => p,
        Err(message) => return refuse(400, status_body(400, "BadRequest", &message, json!({}))),
    };
    if !crate::portforward::is_websocket(&req) {
        return refuse(
            400,
            status_body(400, "BadRequest", "Upgrade request required", json!({})),
        );
    }
    let answer = crate::portforward::upgrade(req, &pod, ports);
    record(shared, rec(answer.status().as_u16()));
    answer
}

fn record(shared: &Shared, rec: Recorded) {
    let n = {
        let mut s = shared.state.lock();
        s.requests.push(rec);
        s.requests.len()
    };
    shared.recorded.send_replace(n);
}

/// The 404 of a resource the server does not serve
/// (`discovery-v136-devicetaintrules-404`).
fn not_served() -> Value {
    status_body(
        404,
        "NotFound",
        "the server could not find the requested resource",
        json!({}),
    )
}

/// The 422 a v1.36 API server answers a write of a claim's allocation or
/// reservation by a user without `verb` on `resourceclaims/binding`
/// (`dra-claim-allocate-forbidden-binding`).
fn claim_binding_forbidden(user: &str, verb: &str, name: &str, field: &str) -> Value {
    let why = format!(
        "Forbidden: changing status.allocation or status.reservedFor requires resource=\"resourceclaims/binding\", verb={verb:?} permission: resourceclaims.resource.k8s.io is forbidden: User {user:?} cannot {verb} resource \"resourceclaims/binding\" in API group \"resource.k8s.io\" at the cluster scope"
    );
    status_body(
        422,
        "Invalid",
        &format!("ResourceClaim.resource.k8s.io {name:?} is invalid: {field}: {why}"),
        json!({
            "name": name,
            "group": "resource.k8s.io",
            "kind": "ResourceClaim",
            "causes": [{"reason": "FieldValueForbidden", "message": why, "field": field}],
        }),
    )
}

/// DRAResourceClaimGranularStatusAuthorization: a status write (`PUT` of
/// the whole status, or a patch) of claim `name` that changes its
/// allocation or reservation needs `verb` on `resourceclaims/binding`
/// at the cluster scope; the 422 when `user` lacks it.
fn claim_status_refusal(
    s: &State,
    t: &Target,
    name: &str,
    verb: &str,
    new_status: &Value,
    user: Option<&User>,
) -> Option<(u16, Value)> {
    let user = user?;
    let old = s
        .objects
        .get(&State::key(t, name))
        .map(|o| o["status"].clone())
        .unwrap_or(Value::Null);
    let field = if new_status["allocation"] != old["allocation"] {
        "status.allocation"
    } else if new_status["reservedFor"] != old["reservedFor"] {
        "status.reservedFor"
    } else {
        return None;
    };
    let binding = Target {
        group_version: t.group_version.clone(),
        plural: "resourceclaims".into(),
        namespace: None,
        name: None,
        subresource: Some("binding".into()),
    };
    if user.allows(verb, &binding) {
        return None;
    }
    Some((422, claim_binding_forbidden(&user.name, verb, name, field)))
}

#[allow(clippy::too_many_arguments)]
fn answer(
    shared: &Shared,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
    content_type: Option<&str>,
    body: &Value,
    user: Option<&User>,
) -> (u16, Value) {
    if method == "GET" {
        if let Some(d) = shared.discovery.get(path) {
            return (200, d.clone());
        }
        if let Some(group) = path.strip_prefix("/apis/").filter(|g| !g.contains('/'))
            && let Some(d) = crate::fake_discovery::group_document(&shared.discovery, group)
        {
            return (200, d);
        }
    }
    let Some(t) = Target::parse(path) else {
        return (
            404,
            status_body(
                404,
                "NotFound",
                "the server could not find the requested resource",
                json!({}),
            ),
        );
    };
    let mut s = shared.state.lock();
    match (method, t.name.clone(), t.subresource.as_deref()) {
        ("GET", None, _) => (200, s.list(&t, query)),
        ("GET", Some(name), _) => match s.objects.get(&State::key(&t, &name)) {
            Some(o) => (200, o.clone()),
            None => not_found(&t, &name),
        },
        ("POST", None, _) => s.create(&t, body.clone()),
        ("POST", Some(name), Some("binding")) => {
            let answer = s.bind(&t, &name, body);
            if answer.0 == GO_DOWN {
                shared.down.send_replace(true);
                s.watchers.clear();
                return (NO_ANSWER, Value::Null);
            }
            if answer.0 == NO_ANSWER {
                // The server died: its watches end and new ones wait until
                // the test releases them.
                shared.held.send_replace(true);
                s.watchers.clear();
            }
            if answer.0 == BOUND_THEN_DOWN {
                shared.down.send_replace(true);
                s.watchers.clear();
                return (201, answer.1);
            }
            answer
        }
        ("PUT", Some(name), None | Some("status")) => {
            if t.plural == "resourceclaims"
                && t.subresource.as_deref() == Some("status")
                && let Some(refusal) =
                    claim_status_refusal(&s, &t, &name, "update", &body["status"], user)
            {
                return refusal;
            }
            s.replace(&t, &name, body.clone())
        }
        ("PATCH", Some(name), None | Some("status")) => {
            let strategic = content_type.is_some_and(|c| c.contains("strategic-merge-patch"));
            let body = body.clone();
            // A UID in the patch is a precondition.
            if let Some(want) = body["metadata"]["uid"].as_str() {
                let actual = s
                    .objects
                    .get(&State::key(&t, &name))
                    .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string));
                if let Some(actual) = actual.filter(|a| a != want) {
                    return (
                        409,
                        status_body(
                            409,
                            "Conflict",
                            &format!(
                                "Operation cannot be fulfilled on {} {name:?}: Precondition failed: UID in precondition: {want}, UID in object meta: {actual}",
                                t.qualified()
                            ),
                            details(&t, &name, None),
                        ),
                    );
                }
            }
            if t.plural == "resourceclaims" && t.subresource.as_deref() == Some("status") {
                let mut after = s
                    .objects
                    .get(&State::key(&t, &name))
                    .cloned()
                    .unwrap_or(Value::Null);
                merge_patch(&mut after, &body, strategic);
                if let Some(refusal) =
                    claim_status_refusal(&s, &t, &name, "patch", &after["status"], user)
                {
                    return refusal;
                }
            }
            s.modify(&t, &name, |o| merge_patch(o, &body, strategic))
        }
        ("DELETE", Some(name), None) => s.delete(&t, &name, body),
        _ => (
            405,
            status_body(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                json!({}),
            ),
        ),
    }
}

async fn start_watch(
    shared: Arc<Shared>,
    path: &str,
    query: &BTreeMap<String, String>,
) -> Response<Body> {
    let Some(t) = Target::parse(path) else {
        return json_response(404, &status_body(404, "NotFound", "not found", json!({})));
    };
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    {
        // Held: wait until released (the connection stays open meanwhile);
        // checked again under the lock, which holding takes too.
        let mut held = shared.held.subscribe();
        let mut s = loop {
            let _ = held.wait_for(|h| !*h).await;
            let s = shared.state.lock();
            if !*shared.held.borrow() {
                break s;
            }
        };
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|r| r.parse().ok())
            .unwrap_or(s.rv);
        let selector = parse_selector(query.get("fieldSelector").map_or("", String::as_str));
        if from < s.compacted && from != 0 {
            let status = status_body(
                410,
                "Expired",
                &format!("too old resource version: {from} ({})", s.compacted),
                json!({}),
            );
            let _ = tx.send(watch_event_line("ERROR", &status));
            drop(tx);
        } else {
            let w = Watcher {
                resource: t.resource(),
                namespace: t.namespace.clone(),
                selector,
                tx,
            };
            let from = if from == 0 { s.rv } else { from };
            for c in s.history.iter().filter(|c| c.rv > from) {
                if let Some(line) = watch_line(&w, c) {
                    let _ = w.tx.send(line);
                }
            }
            if matches!(
                query.get("allowWatchBookmarks").map(String::as_str),
                Some("true" | "1")
            ) {
                let bookmark = json!({
                    "kind": kind_of(&t.plural), "apiVersion": t.api_version(),
                    "metadata": {"resourceVersion": s.rv.to_string()},
                });
                let _ = w.tx.send(watch_event_line("BOOKMARK", &bookmark));
            }
            s.watchers.push(w);
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let b = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(200)
        .header("Content-Type", "application/json")
        .header("Transfer-Encoding", "chunked")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

impl FakeApiServer {
    /// Starts the server on a free loopback port, serving v1.37's APIs
    /// with PodGroups ([`Serving::default`]). Must run in a tokio runtime.
    pub async fn start() -> Result<Self> {
        Self::start_serving(Serving::default()).await
    }

    /// Starts the server answering as `serving` says (a release's version,
    /// discovery and resources).
    pub async fn start_serving(serving: Serving) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            recorded: watch::channel(0).0,
            held: watch::channel(false).0,
            down: watch::channel(false).0,
            refused: watch::channel(0).0,
            holding: watch::channel(false).0,
            held_requests: watch::channel(0).0,
            authorizer_starting: watch::channel(false).0,
            starting_refusals: watch::channel(0).0,
            served: crate::fake_discovery::Served::of(&crate::fake_discovery::documents(&serving)),
            discovery: crate::fake_discovery::documents(&serving),
        });
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let server = shared.clone();
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    c = listener.accept() => c,
                    _ = &mut stopped => break,
                };
                let Ok((stream, _)) = conn else { continue };
                if *server.down.borrow() {
                    server.refused.send_modify(|n| *n += 1);
                    drop(stream);
                    continue;
                }
                let shared = server.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req| handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(Self {
            shared,
            addr,
            _stop: stop,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig pointing at this server to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.url()
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Creates an object at `collection` (e.g. `/api/v1/nodes`,
    /// `/api/v1/namespaces/default/pods`) as a POST would; the stored object.
    pub fn create(&self, collection: &str, obj: Value) -> Result<Value> {
        let t = Target::parse(collection).ok_or_else(|| anyhow!("bad path {collection}"))?;
        let (status, out) = self.shared.state.lock().create(&t, obj);
        if status != 201 {
            return Err(anyhow!("create at {collection}: {status} {out}"));
        }
        Ok(out)
    }

    /// The object at `path` (e.g. `/api/v1/namespaces/default/pods/p`).
    pub fn get(&self, path: &str) -> Option<Value> {
        let t = Target::parse(path)?;
        let name = t.name.clone()?;
        self.shared
            .state
            .lock()
            .objects
            .get(&State::key(&t, &name))
            .cloned()
    }

    /// Deletes the object at `path` at once (a pod's kubelet finished it),
    /// with a DELETED watch event.
    pub fn delete_now(&self, path: &str) -> Result<Value> {
        let t = Target::parse(path).ok_or_else(|| anyhow!("bad path {path}"))?;
        let name = t.name.clone().ok_or_else(|| anyhow!("no name in {path}"))?;
        self.shared
            .state
            .lock()
            .remove(&t, &name)
            .ok_or_else(|| anyhow!("{path} not found"))
    }

    /// Replaces the object at `path` (a PUT) with `obj`, which must carry
    /// the current `resourceVersion` (409 otherwise).
    pub fn replace(&self, path: &str, mut obj: Value, resource_version: &str) -> Result<Value> {
        let t = Target::parse(path).ok_or_else(|| anyhow!("not an API path: {path}"))?;
        let name = t.name.clone().ok_or_else(|| anyhow!("no name in {path}"))?;
        obj["metadata"]["resourceVersion"] = json!(resource_version);
        let (status, out) = self.shared.state.lock().replace(&t, &name, obj);
        if status >= 300 {
            return Err(anyhow!("replacing {path}: {status} {out}"));
        }
        Ok(out)
    }

    /// Authenticates requests by bearer token from now on and authorizes
    /// those with `token` as RBAC authorizes `user` bound to ClusterRoles
    /// with `cluster` rules and to Roles with `namespaced` rules (by
    /// namespace). Requests with no token or an unknown one get 401.
    pub fn add_user(
        &self,
        token: &str,
        user: &str,
        cluster: Vec<PolicyRule>,
        namespaced: Vec<(String, Vec<PolicyRule>)>,
    ) {
        self.shared.state.lock().users.insert(
            token.to_string(),
            User {
                name: user.to_string(),
                cluster,
                namespaced,
            },
        );
    }

    /// Writes a kubeconfig pointing at this server that authenticates with
    /// the bearer `token` to `path`.
    pub fn write_kubeconfig_with_token(&self, path: &Path, token: &str) -> Result<()> {
        self.write_kubeconfig(path)?;
        let text = std::fs::read_to_string(path)?;
        let text = text.replace("  user: {}\n", &format!("  user:\n    token: {token}\n"));
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// The requests the server refused with 403.
    pub fn forbidden_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.status == 403)
            .collect()
    }

    /// Stages a race for the next binding of `namespace/name`.
    pub fn before_binding(&self, namespace: &str, name: &str, action: BeforeBinding) {
        self.shared
            .state
            .lock()
            .before_binding
            .insert((namespace.into(), name.into()), action);
    }

    /// Takes the server down: every connection, new or open, is closed
    /// unanswered (the watches end), until [`Self::come_back`].
    pub fn go_down(&self) {
        self.shared.down.send_replace(true);
        self.shared.state.lock().watchers.clear();
    }

    /// Answers again after [`Self::go_down`].
    pub fn come_back(&self) {
        self.shared.down.send_replace(false);
    }

    /// Replays an API server restart as recorded
    /// (`apiserver-restart-sequence`: connection refused, then 403 while
    /// its authorizer starts, then 200), driven by what the client does
    /// rather than by the recorded milliseconds: down until `refused`
    /// connections were refused; then accepting and holding requests until
    /// one is held (the recording's ~1.3 s before it answers); then every
    /// resource request refused 403 with the recorded words
    /// (`forbidden-during-apiserver-start`) until `forbidden` were (the
    /// recording saw 14 in 0.2 s; give 0 for the restart of three that
    /// answered none); then serving, the held requests answered.
    pub async fn replay_restart(&self, refused: usize, forbidden: usize) -> Result<()> {
        let sequence = recording("apiserver-restart-sequence")?;
        let statuses: Vec<u64> = sequence
            .as_array()
            .context("the restart sequence")?
            .iter()
            .filter_map(|a| a["status"].as_u64())
            .collect();
        ensure!(
            statuses == [0, 403, 200],
            "the recorded restart answers {statuses:?}"
        );
        let before = *self.shared.refused.borrow();
        self.go_down();
        self.wait_refused(before + refused).await?;
        let held = *self.shared.held_requests.borrow();
        self.shared.holding.send_replace(true);
        self.shared.down.send_replace(false);
        let mut rx = self.shared.held_requests.subscribe();
        tokio::time::timeout(GUARD, rx.wait_for(|n| *n > held))
            .await
            .map_err(|_| anyhow!("no request came to the restarted server within {GUARD:?}"))?
            .map_err(|_| anyhow!("server gone"))?;
        let start = *self.shared.starting_refusals.borrow();
        if forbidden > 0 {
            self.shared.authorizer_starting.send_replace(true);
        }
        self.shared.holding.send_replace(false);
        if forbidden > 0 {
            let mut rx = self.shared.starting_refusals.subscribe();
            tokio::time::timeout(GUARD, rx.wait_for(|n| *n >= start + forbidden))
                .await
                .map_err(|_| anyhow!("fewer than {forbidden} refusals within {GUARD:?}"))?
                .map_err(|_| anyhow!("server gone"))?;
            self.shared.authorizer_starting.send_replace(false);
        }
        Ok(())
    }

    /// Waits until `n` connections or requests in all were closed
    /// unanswered while the server was down.
    pub async fn wait_refused(&self, n: usize) -> Result<()> {
        let mut rx = self.shared.refused.subscribe();
        tokio::time::timeout(GUARD, rx.wait_for(|r| *r >= n))
            .await
            .map_err(|_| anyhow!("fewer than {n} refused connections within {GUARD:?}"))?
            .map_err(|_| anyhow!("server gone"))?;
        Ok(())
    }

    /// Ends every open watch connection and holds new watch requests open
    /// without answering until [`Self::release_watches`].
    pub fn hold_watches(&self) {
        self.shared.held.send_replace(true);
        self.shared.state.lock().watchers.clear();
    }

    /// Answers the held watch requests (and new ones) again.
    pub fn release_watches(&self) {
        self.shared.held.send_replace(false);
    }

    /// Ends every open watch connection (watchers resume from their last
    /// resourceVersion).
    pub fn drop_watches(&self) {
        self.shared.state.lock().watchers.clear();
    }

    /// Forgets the history: a watch from an older resourceVersion than the
    /// current one gets `410 Gone` and must relist.
    pub fn compact(&self) {
        let mut s = self.shared.state.lock();
        s.compacted = s.rv + 1;
        s.history.clear();
    }

    /// How many watch connections are open.
    pub fn open_watches(&self) -> usize {
        let mut s = self.shared.state.lock();
        s.watchers.retain(|w| !w.tx.is_closed());
        s.watchers.len()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().requests.clone()
    }

    /// The requests with `method` whose path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }

    /// Waits until a request satisfying `pred` has been received; returns
    /// the first such one. Fails after a guard of a minute.
    pub async fn wait_for_request(&self, pred: impl Fn(&Recorded) -> bool) -> Result<Recorded> {
        let mut rx = self.shared.recorded.subscribe();
        let wait = async {
            loop {
                if let Some(r) = self.shared.state.lock().requests.iter().find(|r| pred(r)) {
                    return Ok(r.clone());
                }
                if rx.changed().await.is_err() {
                    return Err(anyhow!("server gone"));
                }
            }
        };
        tokio::time::timeout(GUARD, wait)
            .await
            .map_err(|_| anyhow!("no matching request within {GUARD:?}"))?
    }

    /// Waits until `n` requests satisfying `pred` have been received.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Result<Vec<Recorded>> {
        let mut rx = self.shared.recorded.subscribe();
        let wait = async {
            loop {
                let found: Vec<Recorded> = self
                    .shared
                    .state
                    .lock()
                    .requests
                    .iter()
                    .filter(|r| pred(r))
                    .cloned()
                    .collect();
                if found.len() >= n {
                    return Ok(found);
                }
                if rx.changed().await.is_err() {
                    return Err(anyhow!("server gone"));
                }
            }
        };
        tokio::time::timeout(GUARD, wait)
            .await
            .map_err(|_| anyhow!("fewer than {n} matching requests within {GUARD:?}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_resources() {
        let t = Target::parse("/api/v1/namespaces/default/pods/p/binding").unwrap();
        assert_eq!(
            (
                t.resource().as_str(),
                t.namespace.as_deref(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            ("api/v1/pods", Some("default"), Some("p"), Some("binding"))
        );
        let t =
            Target::parse("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases").unwrap();
        assert_eq!(t.qualified(), "leases.coordination.k8s.io");
        assert_eq!(t.api_version(), "coordination.k8s.io/v1");
        let t = Target::parse("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!(
            (t.plural.as_str(), t.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
    }

    #[test]
    fn selectors_and_queries_decode() {
        let q = parse_query(Some(
            "fieldSelector=status.phase%21%3DSucceeded%2Cspec.nodeName%3D&watch=true",
        ));
        let sel = parse_selector(&q["fieldSelector"]);
        let pod = json!({"status": {"phase": "Pending"}, "spec": {}});
        assert!(matches(&pod, &sel));
        let bound = json!({"status": {"phase": "Pending"}, "spec": {"nodeName": "n"}});
        assert!(!matches(&bound, &sel));
    }

    #[test]
    fn strategic_patches_merge_conditions_by_type() {
        let mut pod = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}});
        merge_patch(
            &mut pod,
            &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
            true,
        );
        assert_eq!(pod["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(pod["status"]["conditions"][1]["reason"], "Unschedulable");
        merge_patch(
            &mut pod,
            &json!({"status": {"nominatedNodeName": "n2"}}),
            false,
        );
        assert_eq!(pod["status"]["nominatedNodeName"], "n2");
        merge_patch(
            &mut pod,
            &json!({"status": {"nominatedNodeName": null}}),
            false,
        );
        assert!(pod["status"].get("nominatedNodeName").is_none());
    }

    /// The stand-in answers the recorded requests with the recorded
    /// status codes and `Status` bodies.
    #[test]
    fn answers_match_the_recorded_api_server() {
        let mut s = State::default();
        let pods = Target::parse("/api/v1/namespaces/default/pods").unwrap();
        let rec = recording("pod-create").unwrap();
        let (code, pod) = s.create(&pods, rec["request"]["body"].clone());
        assert_eq!(code, rec["response"]["status"].as_u64().unwrap() as u16);
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        let uid = pod["metadata"]["uid"].clone();
        let target =
            Target::parse(&format!("/api/v1/namespaces/default/pods/{name}/binding")).unwrap();

        let bind = |node: &str, uid: &Value| {
            json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        };
        let ok = recording("binding-ok").unwrap();
        assert_eq!(
            s.bind(&target, &name, &bind("cap-node-1", &uid)),
            (201, ok["response"]["body"].clone())
        );

        let again = recording("binding-again-conflict").unwrap();
        let (code, body) = s.bind(&target, &name, &bind("cap-node-1", &uid));
        assert_eq!(code, 409);
        let want = again["response"]["body"]
            .to_string()
            .replace("cap-pod-1", &name);
        assert_eq!(body.to_string(), want);

        let missing = recording("binding-missing-pod").unwrap();
        let t = Target::parse("/api/v1/namespaces/default/pods/missing/binding").unwrap();
        assert_eq!(
            s.bind(&t, "missing", &missing["request"]["body"]),
            (404, missing["response"]["body"].clone())
        );

        // Leases: create, create again, renew, renew with a stale version.
        let leases =
            Target::parse("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases").unwrap();
        let created = recording("lease-create").unwrap();
        let (code, lease) = s.create(&leases, created["request"]["body"].clone());
        assert_eq!(code, 201);
        assert_eq!(lease["spec"], created["response"]["body"]["spec"]);
        let exists = recording("lease-create-exists").unwrap();
        assert_eq!(
            s.create(&leases, exists["request"]["body"].clone()),
            (409, exists["response"]["body"].clone())
        );
        let lease_t =
            Target::parse("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/berth")
                .unwrap();
        let mut renew = lease.clone();
        renew["spec"]["renewTime"] = json!("2026-11-21T00:00:05.000000Z");
        let (code, renewed) = s.replace(&lease_t, "berth", renew.clone());
        assert_eq!(code, 200);
        assert_ne!(
            renewed["metadata"]["resourceVersion"],
            lease["metadata"]["resourceVersion"]
        );
        let stale = recording("lease-renew-stale").unwrap();
        assert_eq!(
            s.replace(&lease_t, "berth", renew),
            (409, stale["response"]["body"].clone())
        );
    }

    /// A user with no role gets the recorded 403s, word for word, and a
    /// request without a known token the recorded 401.
    #[test]
    fn refusals_match_the_recorded_rbac_authorizer() {
        let mut s = State::default();
        s.users.insert(
            "t".into(),
            User {
                name: "system:serviceaccount:kube-system:berth".into(),
                cluster: Vec::new(),
                namespaced: Vec::new(),
            },
        );
        for name in [
            "forbidden-binding",
            "forbidden-lease-get",
            "forbidden-list-resourceslices",
            "forbidden-watch-resourceclaims",
        ] {
            let rec = recording(name).unwrap();
            let path = rec["request"]["path"].as_str().unwrap();
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            let query = parse_query(Some(query));
            let watching = query.get("watch").is_some_and(|w| w == "true");
            let method = rec["request"]["method"].as_str().unwrap();
            let got = s.authorize(method, path, watching, Some("Bearer t"));
            assert_eq!(got, Some((403, rec["response"]["body"].clone())), "{name}");
        }
        let rec = recording("unauthorized-bad-token").unwrap();
        assert_eq!(
            s.authorize("GET", "/api/v1/nodes", false, Some("Bearer nope")),
            Some((401, rec["response"]["body"].clone()))
        );
        // Discovery is open; a rule with resourceNames allows only those.
        assert_eq!(
            s.authorize("GET", "/apis/resource.k8s.io/v1", false, Some("Bearer t")),
            None
        );
        let lease_rule: PolicyRule = serde_json::from_value(json!({
            "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["kube-scheduler"], "verbs": ["get", "update"],
        }))
        .unwrap();
        s.users.get_mut("t").unwrap().namespaced = vec![("kube-system".into(), vec![lease_rule])];
        let lease = |name: &str| {
            s.authorize(
                "GET",
                &format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}"),
                false,
                Some("Bearer t"),
            )
        };
        assert_eq!(lease("kube-scheduler"), None);
        assert_eq!(lease("berth").map(|(c, _)| c), Some(403));
    }

    /// The claim status write recorded against deploy/'s RBAC of the time
    /// (no `resourceclaims/binding`) gets the recorded 422 word for word;
    /// with the rule, the same write goes through.
    #[test]
    fn claim_status_writes_are_authorized_as_v1_36_authorizes_them() {
        let rec = recording("dra-claim-allocate-forbidden-binding").unwrap();
        let path = rec["request"]["path"].as_str().unwrap();
        let t = Target::parse(path).unwrap();
        let name = t.name.clone().unwrap();
        let mut s = State::default();
        let mut claim = rec["request"]["body"].clone();
        claim["status"] = json!({});
        let collection =
            Target::parse("/apis/resource.k8s.io/v1/namespaces/trial/resourceclaims").unwrap();
        assert_eq!(s.create(&collection, claim).0, 201);
        let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
            api_groups: vec!["resource.k8s.io".into()],
            resources: resources.iter().map(|r| r.to_string()).collect(),
            resource_names: Vec::new(),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        };
        let mut user = User {
            name: "system:serviceaccount:kube-system:berth".into(),
            cluster: vec![
                rule(&["resourceclaims"], &["update"]),
                rule(&["resourceclaims/status"], &["get", "patch", "update"]),
            ],
            namespaced: Vec::new(),
        };
        let body = &rec["request"]["body"];
        let refusal = claim_status_refusal(&s, &t, &name, "update", &body["status"], Some(&user));
        assert_eq!(
            refusal,
            Some((422, rec["response"]["body"].clone())),
            "the recorded 422"
        );
        // A namespaced Role does not do: the check is at the cluster scope.
        user.namespaced = vec![(
            "trial".into(),
            vec![rule(&["resourceclaims/binding"], &["update"])],
        )];
        assert!(
            claim_status_refusal(&s, &t, &name, "update", &body["status"], Some(&user)).is_some()
        );
        let ok = recording("dra-claim-allocate-with-binding-rule").unwrap();
        user.cluster
            .push(rule(&["resourceclaims/binding"], &["update", "patch"]));
        assert_eq!(
            claim_status_refusal(&s, &t, &name, "update", &body["status"], Some(&user)),
            None
        );
        assert_eq!(ok["response"]["status"], 200);
        // A write that leaves allocation and reservation alone needs nothing.
        user.cluster.pop();
        assert_eq!(
            claim_status_refusal(&s, &t, &name, "update", &json!({}), Some(&user)),
            None
        );
    }

    /// A starting server refuses with the words of RBAC itself.
    #[test]
    fn a_starting_authorizer_refuses_as_recorded() {
        let rec = recording("forbidden-during-apiserver-start").unwrap();
        let t = Target::parse("/api/v1/nodes").unwrap();
        assert_eq!(
            forbidden("system:serviceaccount:kube-system:berth", "list", &t),
            rec["response"]["body"]
        );
    }

    #[test]
    fn dates_are_rfc3339() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'));
    }
}
