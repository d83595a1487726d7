//! The Kubernetes cluster source: a real API server is the source of truth.
//!
//! One kube-rs watcher per kind (nodes, pods, namespaces, volumes, claims,
//! storage classes, CSI nodes, disruption budgets, the owners default
//! spreading looks at: services, replica sets, stateful sets, replication
//! controllers, and DRA's device classes, resource claims and resource
//! slices) feeds one reflector, [`Mirror`], that keeps the last object
//! seen under each key and turns the watchers' events into the same
//! [`ClusterChange`]s the embedded cluster emits:
//!
//! * the first complete listing of every kind is delivered as additions,
//!   then [`ClusterChange::Synced`];
//! * after that an applied object is `Added` or `Modified { old, new }`
//!   (old is the last object seen, an unchanged resourceVersion is not a
//!   change), a deleted one `Deleted`;
//! * a relist (a 410 Gone, or a watch that could not resume) is compared
//!   with what was seen: changed objects come as `Modified`, vanished ones
//!   as `Deleted`, new ones as `Added`, so nothing is lost or doubled;
//! * a dropped watch connection resumes from the last resourceVersion.
//!
//! Pods are watched as upstream's scheduler watches them: every pod except
//! the finished ones (`status.phase!=Succeeded,status.phase!=Failed`).
//! The scheduler queues only unassigned pods whose `spec.schedulerName` is
//! one of its profiles; assigned pods of every scheduler fill its cache.
//!
//! Writes go to the API as upstream's scheduler sends them (see
//! [`writes`]).

pub mod access;
mod client;
pub mod discovery;
mod events;
mod permits;
pub mod refusals;
mod slim;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

pub use client::{
    ClientOptions, LONG_THROTTLE, MAX_RETRIES, RestMetrics, THROTTLE_LOG_EVERY, TokenBucket,
    api_outage, rest_metrics,
};
pub use events::{EVENT_BURST, EVENT_REFILL_EVERY};
pub use slim::{LAST_APPLIED, SlimNode, SlimPod, strip_meta};

use super::{ClusterChange, WatchEvent};
use crate::cache::{KubeObject, ObjectKind};
use crate::model::{PodInfo, PodRef};

/// The kinds other than nodes and pods that kube mode watches: every kind
/// of [`ObjectKind::ALL`] but ResourceClaimTemplates, which only the
/// resourceclaim controller reads, and PriorityClasses, which only the API
/// server's admission reads (kube-scheduler watches neither).
/// DeviceTaintRules are watched only under the DRADeviceTaintRules gate
/// ([`KubeOptions::device_taint_rules`]), as upstream registers their
/// informer only then.
pub const KUBE_WATCHED: [ObjectKind; 16] = [
    ObjectKind::Namespace,
    ObjectKind::PersistentVolume,
    ObjectKind::PersistentVolumeClaim,
    ObjectKind::StorageClass,
    ObjectKind::CsiNode,
    ObjectKind::PodDisruptionBudget,
    ObjectKind::Service,
    ObjectKind::ReplicaSet,
    ObjectKind::StatefulSet,
    ObjectKind::ReplicationController,
    ObjectKind::DeviceClass,
    ObjectKind::ResourceClaim,
    ObjectKind::ResourceSlice,
    ObjectKind::DeviceTaintRule,
    ObjectKind::CsiDriver,
    ObjectKind::CsiStorageCapacity,
];

/// Upstream's field selector for the scheduler's pod informer: finished
/// pods hold no resources and are never scheduled.
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Why the Kubernetes source could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The in-cluster configuration (service account) is missing or bad.
    #[error("in-cluster configuration: {0}")]
    InCluster(String),
    /// The client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
}

/// What the source is told to watch and how it reports.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// The name of this replica, for events' `reportingInstance`
    /// (`<scheduler name>-<identity>`); default: the host name.
    pub identity: String,
    /// The rate limits of the scheduler's client and of the events client
    /// (each has its own bucket, as kube-scheduler's two clientsets).
    pub client: ClientOptions,
    /// Watch `scheduling.k8s.io/v1beta1` PodGroups (kube-scheduler starts
    /// that informer only with the `GenericWorkload` gate on: a cluster
    /// without the beta API serves none).
    pub watch_pod_groups: bool,
    /// Whether to watch DeviceTaintRules (the DRADeviceTaintRules gate:
    /// resource.k8s.io/v1 serves them from v1.37 on).
    pub device_taint_rules: bool,
    /// Kinds the API server does not serve ([`discovery::plan`]): not
    /// watched, whatever the options above say.
    pub unserved: BTreeSet<ObjectKind>,
}

impl Default for KubeOptions {
    fn default() -> Self {
        Self {
            identity: super::hostname(),
            client: ClientOptions::default(),
            watch_pod_groups: false,
            device_taint_rules: true,
            unserved: BTreeSet::new(),
        }
    }
}

impl KubeOptions {
    /// The kinds of [`KUBE_WATCHED`] these options watch.
    pub fn watched(&self) -> Vec<ObjectKind> {
        KUBE_WATCHED
            .into_iter()
            .filter(|k| *k != ObjectKind::DeviceTaintRule || self.device_taint_rules)
            .chain(self.watch_pod_groups.then_some(ObjectKind::PodGroup))
            .filter(|k| !self.unserved.contains(k))
            .collect()
    }
}

/// The configuration for the cluster a kubeconfig file's current context
/// names.
pub async fn config_from_kubeconfig(path: &std::path::Path) -> Result<kube::Config, KubeError> {
    let err = |message: String| KubeError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))
}

/// The configuration from the pod's service account
/// (`KUBERNETES_SERVICE_HOST` and the mounted token), as a scheduler running
/// in the cluster uses.
pub fn config_in_cluster() -> Result<kube::Config, KubeError> {
    kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))
}

/// A client for `config` with its own token bucket of `options`'s qps and
/// burst (see [`client`]).
pub fn client(config: kube::Config, options: &ClientOptions) -> Result<kube::Client, KubeError> {
    client::build_client(config, options)
}

/// What a watcher watches: the sort order is the order of the initial
/// delivery (objects pods refer to first, then nodes, then pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Res {
    Object(ObjectKind),
    Node,
    Pod,
}

impl Res {
    /// The resource as the API names it in messages: `nodes`,
    /// `resourceslices.resource.k8s.io`.
    fn qualified(self) -> String {
        match self {
            Res::Node => "nodes".into(),
            Res::Pod => "pods".into(),
            Res::Object(k) if k.group().is_empty() => k.plural().into(),
            Res::Object(k) => format!("{}.{}", k.plural(), k.group()),
        }
    }

    /// (group, resource), as RBAC rules name it.
    fn rbac(self) -> (&'static str, &'static str) {
        match self {
            Res::Node => ("", "nodes"),
            Res::Pod => ("", "pods"),
            Res::Object(k) => (k.group(), k.plural()),
        }
    }
}

/// An object as the mirror keeps it.
#[derive(Debug, Clone)]
enum Obj {
    Node(Arc<Node>),
    /// A pod, parsed, its object packed: the one copy berth keeps, shared
    /// with the cache and the queue.
    Pod(PodRef),
    /// A pod the scheduler cannot use (logged when seen): kept to follow
    /// its versions, never sent.
    InvalidPod(Arc<Pod>),
    Other(KubeObject),
}

type Key = (Res, String, String);

impl Obj {
    /// A pod as decoded from the wire: parsed and packed, or kept as it is
    /// when it does not parse.
    fn pod(p: Pod) -> Obj {
        match PodInfo::packed(p) {
            Ok(info) => Obj::Pod(Arc::new(info)),
            Err((e, p)) => {
                let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                let name = p.metadata.name.as_deref().unwrap_or("<unnamed>");
                tracing::error!(pod = %format!("{ns}/{name}"), error = %e, "ignoring invalid pod");
                Obj::InvalidPod(Arc::new(*p))
            }
        }
    }

    fn meta(&self) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
        match self {
            Obj::Node(n) => Some(&n.metadata),
            Obj::Pod(_) => None,
            Obj::InvalidPod(p) => Some(&p.metadata),
            Obj::Other(o) => Some(o.metadata()),
        }
    }

    fn key(&self) -> Key {
        match self {
            Obj::Node(n) => (
                Res::Node,
                String::new(),
                n.metadata.name.clone().unwrap_or_default(),
            ),
            Obj::Pod(p) => (Res::Pod, p.namespace.to_string(), p.name.to_string()),
            Obj::InvalidPod(p) => (
                Res::Pod,
                p.metadata
                    .namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "default".into()),
                p.metadata.name.clone().unwrap_or_default(),
            ),
            Obj::Other(o) => {
                let (k, ns, name) = o.key();
                (Res::Object(k), ns, name)
            }
        }
    }

    /// Whether `other` is this object at another resourceVersion with
    /// nothing else changed (pods and nodes, as berth keeps them).
    fn same_but_version(&self, other: &Obj) -> bool {
        fn meta_eq(a: &ObjectMeta, b: &ObjectMeta) -> bool {
            a.uid == b.uid
                && a.generation == b.generation
                && a.labels == b.labels
                && a.annotations == b.annotations
                && a.deletion_timestamp == b.deletion_timestamp
                && a.deletion_grace_period_seconds == b.deletion_grace_period_seconds
                && a.finalizers == b.finalizers
                && a.owner_references == b.owner_references
                && a.name == b.name
                && a.namespace == b.namespace
                && a.generate_name == b.generate_name
                && a.creation_timestamp == b.creation_timestamp
        }
        match (self, other) {
            (Obj::Node(a), Obj::Node(b)) => {
                meta_eq(&a.metadata, &b.metadata) && a.spec == b.spec && a.status == b.status
            }
            (Obj::Pod(a), Obj::Pod(b)) => a.uid == b.uid && a.pod.same_but_version(&b.pod),
            (Obj::InvalidPod(a), Obj::InvalidPod(b)) => {
                meta_eq(&a.metadata, &b.metadata) && a.spec == b.spec && a.status == b.status
            }
            _ => false,
        }
    }

    /// A pod's object, decoded.
    fn decoded_pod(&self) -> Option<Arc<Pod>> {
        match self {
            Obj::Pod(p) => Some(p.pod.get()),
            Obj::InvalidPod(p) => Some(p.clone()),
            _ => None,
        }
    }

    fn rv(&self) -> Option<&str> {
        match self {
            Obj::Pod(p) => p.pod.resource_version(),
            o => o.meta().and_then(|m| m.resource_version.as_deref()),
        }
    }

    fn uid(&self) -> Option<&str> {
        match self {
            Obj::Pod(p) => Some(&p.uid),
            o => o.meta().and_then(|m| m.uid.as_deref()),
        }
    }

    /// What the scheduler hears of `e`: nothing when a pod on either side
    /// does not parse.
    fn change(e: WatchEvent<Obj>) -> Option<ClusterChange> {
        fn map<T>(e: WatchEvent<Obj>, f: impl Fn(Obj) -> Option<T>) -> Option<WatchEvent<T>> {
            Some(match e {
                WatchEvent::Added(o) => WatchEvent::Added(f(o)?),
                WatchEvent::Modified { old, new } => WatchEvent::Modified {
                    old: f(old)?,
                    new: f(new)?,
                },
                WatchEvent::Deleted(o) => WatchEvent::Deleted(f(o)?),
            })
        }
        let res = match &e {
            WatchEvent::Added(o) | WatchEvent::Deleted(o) | WatchEvent::Modified { new: o, .. } => {
                o.key().0
            }
        };
        // One key always holds one kind; only a pod that does not parse
        // (kept as `InvalidPod`) makes a map fail.
        match res {
            Res::Node => map(e, |o| match o {
                Obj::Node(n) => Some(n),
                _ => None,
            })
            .map(ClusterChange::Node),
            Res::Pod => map(e, |o| match o {
                Obj::Pod(p) => Some(p),
                _ => None,
            })
            .map(ClusterChange::PodInfo),
            Res::Object(_) => map(e, |o| match o {
                Obj::Other(x) => Some(x),
                _ => None,
            })
            .map(ClusterChange::Object),
        }
    }
}

/// Whether `new` is a later version than `old`, by resourceVersion. They
/// are opaque strings, but the API server's are integers; anything else is
/// taken as newer (a change).
fn newer(old: Option<&str>, new: Option<&str>) -> bool {
    match (
        old.and_then(|s| s.parse::<u64>().ok()),
        new.and_then(|s| s.parse::<u64>().ok()),
    ) {
        (Some(o), Some(n)) => n > o,
        _ => old != new,
    }
}

/// The reflector: the last object seen under each key, and who wants to
/// hear about changes.
#[derive(Default)]
struct MirrorState {
    objects: BTreeMap<Key, Obj>,
    /// Listings in progress, by watcher.
    listing: BTreeMap<Res, BTreeMap<Key, Obj>>,
    /// Watchers whose first listing is complete.
    listed: BTreeSet<Res>,
    /// How many watchers there are.
    watchers: usize,
    /// What the watchers watch, in the order readiness names them.
    watched: Vec<Res>,
    /// Every watcher's first listing has been delivered.
    synced: bool,
    /// Why a watcher whose listing has not completed is stuck (its last
    /// error), until it lists.
    trouble: BTreeMap<Res, String>,
    subscribers: Vec<mpsc::UnboundedSender<ClusterChange>>,
}

impl MirrorState {
    fn emit(&mut self, e: WatchEvent<Obj>) {
        if !self.synced {
            return;
        }
        let Some(change) = Obj::change(e) else { return };
        self.subscribers.retain(|s| s.send(change.clone()).is_ok());
    }

    fn dump(&self, tx: &mpsc::UnboundedSender<ClusterChange>) {
        for o in self.objects.values() {
            if let Some(c) = Obj::change(WatchEvent::Added(o.clone())) {
                let _ = tx.send(c);
            }
        }
        let _ = tx.send(ClusterChange::Synced);
    }

    /// An object applied (added or modified).
    fn apply(&mut self, new: Obj) {
        let key = new.key();
        match self.objects.get(&key).cloned() {
            Some(old) if old.rv() == new.rv() && old.rv().is_some() => {}
            Some(old) if old.same_but_version(&new) => {
                // Only what berth does not keep changed (a heartbeat, the
                // managed fields): the new version, and no news.
                self.objects.insert(key, new);
            }
            Some(old) if old.uid() != new.uid() => {
                // Replaced under the same name: a different object.
                self.objects.insert(key, new.clone());
                self.emit(WatchEvent::Deleted(old));
                self.emit(WatchEvent::Added(new));
            }
            Some(old) => {
                self.objects.insert(key, new.clone());
                self.emit(WatchEvent::Modified { old, new });
            }
            None => {
                self.objects.insert(key, new.clone());
                self.emit(WatchEvent::Added(new));
            }
        }
    }

    /// An object deleted (its final state).
    fn delete(&mut self, last: Obj) {
        if self.objects.remove(&last.key()).is_some() {
            self.emit(WatchEvent::Deleted(last));
        }
    }

    /// A watcher's listing completed: what it did not list is gone.
    fn relisted(&mut self, res: Res, listed: BTreeMap<Key, Obj>) {
        let gone: Vec<Obj> = self
            .objects
            .range((res, String::new(), String::new())..)
            .take_while(|(k, _)| k.0 == res)
            .filter(|(k, _)| !listed.contains_key(*k))
            .map(|(_, o)| o.clone())
            .collect();
        for o in gone {
            self.delete(o);
        }
        for (_, o) in listed {
            self.apply(o);
        }
        if self.listed.insert(res) && self.listed.len() == self.watchers && !self.synced {
            self.synced = true;
            let subs = std::mem::take(&mut self.subscribers);
            for s in &subs {
                self.dump(s);
            }
            self.subscribers = subs;
        }
    }

    fn on_watch_event(&mut self, res: Res, e: watcher::Event<Obj>) {
        match e {
            watcher::Event::Init => {
                self.listing.insert(res, BTreeMap::new());
            }
            watcher::Event::InitApply(o) => {
                self.listing.entry(res).or_default().insert(o.key(), o);
            }
            watcher::Event::InitDone => {
                if self.trouble.remove(&res).is_some() {
                    // A refusal said is ended by the reporter's own line;
                    // the outage reporter speaks for the rest.
                    tracing::debug!(resource = %res.qualified(), "listed {} after all: its watch works now", res.qualified());
                }
                refusals::global().allowed(&watch_key(res));
                let listed = self.listing.remove(&res).unwrap_or_default();
                self.relisted(res, listed);
            }
            watcher::Event::Apply(o) => self.apply(o),
            watcher::Event::Delete(o) => self.delete(o),
        }
    }
}

/// The key a watcher's refusals are counted under: `list` (its rule
/// grants get, list and watch together).
fn watch_key(res: Res) -> refusals::Key {
    let (group, resource) = res.rbac();
    refusals::Key::new("list", group, resource)
}

/// The reflector shared by the watchers, the writes and the readers.
#[derive(Default)]
struct Mirror {
    state: Mutex<MirrorState>,
}

/// What a watcher's error says: the verb that failed, and the API's answer
/// (code, message) when there was one, else what went wrong.
fn watch_error(e: &watcher::Error) -> (&'static str, Result<(u16, String), String>) {
    let api = |e: &kube::Error| match e {
        kube::Error::Api(s) => Ok((s.code, s.message.clone())),
        other => Err(client::error_text(other)),
    };
    match e {
        watcher::Error::InitialListFailed(e) => ("list", api(e)),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch", api(e)),
        watcher::Error::WatchError(s) => ("watch", Ok((s.code, s.message.clone()))),
        watcher::Error::NoResourceVersion => ("watch", Err(e.to_string())),
    }
}

impl Mirror {
    /// A watcher's attempt failed (it retries with backoff). A refusal
    /// (403) is one line naming the rule berthd needs once it has lasted
    /// the grace of [`refusals`] (an API server that is starting refuses
    /// for a moment); every other attempt is DEBUG (the API server's
    /// outage reporter speaks for the ones that got no answer). What went
    /// wrong is kept for readiness until the watcher lists.
    fn watch_failed(&self, res: Res, e: &watcher::Error) {
        let (verb, answer) = watch_error(e);
        let what = res.qualified();
        let trouble = match &answer {
            Ok((403, m)) => format!("forbidden: {m}"),
            Ok((code, m)) => format!("{code}: {m}"),
            Err(m) => m.clone(),
        };
        self.state.lock().trouble.insert(res, trouble.clone());
        match answer {
            Ok((403, message)) => {
                let (group, resource) = res.rbac();
                let rule = || {
                    access::rule_for(group, resource, None)
                        .map_or_else(String::new, |r| r.to_string())
                };
                let reporter = refusals::global();
                match reporter.refused(&watch_key(res), rule, &message) {
                    refusals::Verdict::Report(lasted) => {
                        let rule = rule();
                        tracing::error!(
                            resource = %what, verb, code = 403, %rule,
                            "forbidden to {verb} {what}: the cache cannot sync and nothing is scheduled until berthd's ClusterRole grants {rule}; refused for {}, retried with backoff (a summary follows every {} while it lasts); the API server says: {message}",
                            crate::outage::human(lasted),
                            crate::outage::human(crate::outage::summary_every())
                        );
                    }
                    _ => {
                        tracing::debug!(resource = %what, verb, code = 403, "{verb} {what} refused; retrying with backoff: {message}")
                    }
                }
            }
            Ok((410, _)) => {
                tracing::debug!(resource = %what, verb, "watch of {what} expired (410 Gone); relisting")
            }
            _ => {
                tracing::debug!(resource = %what, verb, error = %trouble, "{verb} {what} failed; retrying with backoff")
            }
        }
    }

    /// The watchers that have not listed their kind yet, each with the
    /// last answer it got: `resourceslices.resource.k8s.io (forbidden:
    /// ...)`, or `(listing)` before any. Only what is watched: a kind left
    /// unwatched (its gate off, or not served) never waits.
    fn unsynced(&self) -> Vec<String> {
        let s = self.state.lock();
        let mut out = Vec::new();
        for &res in &s.watched {
            if s.listed.contains(&res) {
                continue;
            }
            out.push(match s.trouble.get(&res) {
                Some(t) => format!("{} ({t})", res.qualified()),
                None => format!("{} (listing)", res.qualified()),
            });
        }
        out
    }
}

/// A cluster behind a Kubernetes API server.
pub struct KubeCluster {
    client: kube::Client,
    mirror: Arc<Mirror>,
    events: events::EventSink,
    /// The API server's outage reporter (set by [`KubeCluster::connect`]).
    outage: Option<Arc<crate::outage::Outage>>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.mirror.state.lock();
        f.debug_struct("KubeCluster")
            .field("objects", &s.objects.len())
            .field("synced", &s.synced)
            .finish()
    }
}

fn spawn_watcher<K>(
    mirror: Arc<Mirror>,
    api: Api<K>,
    config: watcher::Config,
    res: Res,
    wrap: fn(K) -> Obj,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let stream = watcher::watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(e) => {
                    let e = match e {
                        watcher::Event::Apply(k) => watcher::Event::Apply(wrap(k)),
                        watcher::Event::Delete(k) => watcher::Event::Delete(wrap(k)),
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitApply(k) => watcher::Event::InitApply(wrap(k)),
                        watcher::Event::InitDone => watcher::Event::InitDone,
                    };
                    mirror.state.lock().on_watch_event(res, e);
                }
                Err(e) => mirror.watch_failed(res, &e),
            }
        }
    });
}

impl KubeCluster {
    /// Starts watching the cluster `config` names: the scheduler's client
    /// (watches and writes) and the events client, each with its own rate
    /// limit. Must run inside a tokio runtime.
    pub fn connect(config: kube::Config, options: KubeOptions) -> Result<Arc<Self>, KubeError> {
        let host = config
            .cluster_url
            .authority()
            .map_or_else(String::new, |a| a.to_string());
        let scheduler =
            client::build_client(config.clone(), &options.client.for_purpose("scheduler"))?;
        let events = client::build_client(config, &options.client.for_purpose(""))?;
        refusals::global().spawn();
        let mut cluster = Self::start(scheduler, events, options);
        if let Some(c) = Arc::get_mut(&mut cluster) {
            c.outage = Some(client::api_outage(&host));
        }
        Ok(cluster)
    }

    /// Starts watching the cluster behind `client`, writing events through
    /// `events`. Must run inside a tokio runtime.
    pub fn start(client: kube::Client, events: kube::Client, options: KubeOptions) -> Arc<Self> {
        let mirror = Arc::new(Mirror::default());
        // Counted before any watcher runs: Synced waits for all of them.
        let watched = options.watched();
        {
            let mut s = mirror.state.lock();
            s.watchers = 2 + watched.len();
            s.watched = [Res::Node, Res::Pod]
                .into_iter()
                .chain(watched.iter().map(|k| Res::Object(*k)))
                .collect();
        }
        // Lists from the watch cache (resourceVersion=0), as informers do.
        let config = || watcher::Config::default().any_semantic();
        // Pods and nodes are decoded straight into what berth keeps (see
        // `slim`); other kinds are stripped of the same metadata.
        spawn_watcher(
            mirror.clone(),
            Api::<SlimNode>::all(client.clone()),
            config(),
            Res::Node,
            |n| Obj::Node(Arc::new(n.0)),
        );
        spawn_watcher(
            mirror.clone(),
            Api::<SlimPod>::all(client.clone()),
            config().fields(POD_FIELD_SELECTOR),
            Res::Pod,
            |p| Obj::pod(p.0),
        );
        macro_rules! objects {
            ($($kind:ident => $ty:ty),* $(,)?) => {$(
                if watched.contains(&ObjectKind::$kind) { spawn_watcher(
                    mirror.clone(),
                    Api::<$ty>::all(client.clone()),
                    config(),
                    Res::Object(ObjectKind::$kind),
                    |mut o| {
                        strip_meta(kube::Resource::meta_mut(&mut o));
                        Obj::Other(KubeObject::$kind(Arc::new(o)))
                    },
                ); }
            )*};
        }
        use k8s_openapi::api::{apps, core, policy, resource, storage};
        // Every kind of KUBE_WATCHED, and PodGroups with GenericWorkload.
        objects!(
            Namespace => core::v1::Namespace,
            PersistentVolume => core::v1::PersistentVolume,
            PersistentVolumeClaim => core::v1::PersistentVolumeClaim,
            StorageClass => storage::v1::StorageClass,
            CsiNode => storage::v1::CSINode,
            PodDisruptionBudget => policy::v1::PodDisruptionBudget,
            Service => core::v1::Service,
            ReplicaSet => apps::v1::ReplicaSet,
            StatefulSet => apps::v1::StatefulSet,
            ReplicationController => core::v1::ReplicationController,
            DeviceClass => resource::v1::DeviceClass,
            ResourceClaim => resource::v1::ResourceClaim,
            ResourceSlice => resource::v1::ResourceSlice,
            DeviceTaintRule => resource::v1::DeviceTaintRule,
            CsiDriver => storage::v1::CSIDriver,
            CsiStorageCapacity => storage::v1::CSIStorageCapacity,
            PodGroup => k8s_openapi::api::scheduling::v1beta1::PodGroup,
        );
        let events = events::EventSink::start(events, options.identity);
        Arc::new(Self {
            client,
            mirror,
            events,
            outage: None,
        })
    }

    /// The API server's outage reporter, for the words its summaries end
    /// with (how many pods wait).
    pub fn api_outage(&self) -> Option<&Arc<crate::outage::Outage>> {
        self.outage.as_ref()
    }

    /// Writes the events recorded so far, within `within` at most (best
    /// effort: a leader that lost its Lease, or shutdown, calls it before
    /// the process exits); the writers still at work when it ended.
    pub async fn flush_events(&self, within: std::time::Duration) -> usize {
        self.events.flush(within).await
    }

    /// Whether every watcher has listed its kind once.
    pub fn is_synced(&self) -> bool {
        self.mirror.state.lock().synced
    }

    /// Why the cache has not synced: each watcher that has not listed its
    /// kind yet, with its last error (empty once synced).
    pub fn unsynced(&self) -> Vec<String> {
        if self.is_synced() {
            return Vec::new();
        }
        self.mirror.unsynced()
    }

    /// Every node seen, by name.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        let s = self.mirror.state.lock();
        s.objects
            .values()
            .filter_map(|o| match o {
                Obj::Node(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        let s = self.mirror.state.lock();
        match s.objects.get(&(Res::Node, String::new(), name.to_string())) {
            Some(Obj::Node(n)) => Some(n.clone()),
            _ => None,
        }
    }

    /// Every (unfinished) pod seen, by namespace and name (decoded: for
    /// the API, not for a scheduling cycle).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let pods: Vec<Obj> = {
            let s = self.mirror.state.lock();
            s.objects
                .range((Res::Pod, String::new(), String::new())..)
                .take_while(|(k, _)| k.0 == Res::Pod)
                .map(|(_, o)| o.clone())
                .collect()
        };
        pods.iter().filter_map(Obj::decoded_pod).collect()
    }

    /// Every object of `kind` seen, by namespace and name.
    pub fn objects(&self, kind: ObjectKind) -> Vec<KubeObject> {
        let s = self.mirror.state.lock();
        s.objects
            .iter()
            .filter(|(k, _)| k.0 == Res::Object(kind))
            .filter_map(|(_, o)| match o {
                Obj::Other(x) => Some(x.clone()),
                _ => None,
            })
            .collect()
    }

    /// One object of `kind` by namespace (empty for cluster-scoped kinds)
    /// and name.
    pub fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<KubeObject> {
        let ns = if !kind.namespaced() {
            ""
        } else if namespace.is_empty() {
            "default"
        } else {
            namespace
        };
        let s = self.mirror.state.lock();
        match s
            .objects
            .get(&(Res::Object(kind), ns.to_string(), name.to_string()))
        {
            Some(Obj::Other(o)) => Some(o.clone()),
            _ => None,
        }
    }

    fn subscribe_inner(&self) -> mpsc::UnboundedReceiver<ClusterChange> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.mirror.state.lock();
        if s.synced {
            s.dump(&tx);
        }
        s.subscribers.push(tx);
        rx
    }

    fn get_pod_inner(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let o = {
            let s = self.mirror.state.lock();
            s.objects
                .get(&(Res::Pod, namespace.to_string(), name.to_string()))
                .cloned()
        };
        o.as_ref().and_then(Obj::decoded_pod)
    }

    /// Takes a pod read from the API (after a write failed because the
    /// mirror was behind) into the mirror, unless the mirror already has a
    /// later version; `None` means the API has no such pod, so a mirrored
    /// one with `uid` is gone.
    fn refresh_pod(&self, namespace: &str, name: &str, uid: &str, fresh: Option<Pod>) {
        let mut s = self.mirror.state.lock();
        let key = (Res::Pod, namespace.to_string(), name.to_string());
        let current = s.objects.get(&key).cloned();
        match (current, fresh) {
            (Some(cur), None) if cur.uid() == Some(uid) => s.delete(cur),
            (Some(cur), Some(p)) => {
                let p = Obj::pod(p);
                if cur.uid() != p.uid() || newer(cur.rv(), p.rv()) {
                    s.apply(p);
                }
            }
            (None, Some(p)) if p.metadata.uid.as_deref() != Some(uid) => {
                s.apply(Obj::pod(p));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
