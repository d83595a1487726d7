//! Cluster changes into the cache and the queue, as kube-scheduler's event
//! handlers apply them:
//!
//! * nodes: into the cache; each change that matters (added, allocatable,
//!   labels, taints, conditions, uncordoned) moves the unschedulable pods
//!   it may help;
//! * bound pods: into the cache (confirming assumed ones); their deletion
//!   frees room and moves pods;
//! * pending pods of one of our profiles: into the queue; a pod bound
//!   elsewhere leaves it; a pod deleted while waiting at Permit is rejected.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::{mpsc, watch};

use super::Shared;
use crate::cache::KubeObject;
use crate::cluster::{ClusterChange, WatchEvent};
use crate::framework::ActionType;
use crate::framework::{
    ClusterEvent, EventObject, node_scheduling_property_changes, pod_scheduling_property_changes,
};
use crate::model::{GroupKey, NodeSpec, PodGroupInfo, PodInfo, PodObject, PodRef};

pub(crate) async fn run(
    shared: Arc<Shared>,
    mut changes: mpsc::UnboundedReceiver<ClusterChange>,
    synced: watch::Sender<bool>,
) {
    let mut parsed = Parsed::default();
    while let Some(change) = changes.recv().await {
        let started = std::time::Instant::now();
        if let Some(o) = &shared.observer {
            o.change(&change);
        }
        // A pod's change is labelled once parsed (whether it is bound is
        // then known without reading the object again).
        let mut event = match &change {
            ClusterChange::Pod(_) => None,
            other => event_label(other),
        };
        match change {
            ClusterChange::Node(e) => {
                // Extenders learn of a node (and the id requests name it
                // by) before any request can name it.
                let feed_id = shared.node_feed.as_ref().map_or(0, |feed| feed.apply(&e));
                on_node(&shared, e, feed_id)
            }
            ClusterChange::Pod(e) => {
                // Both sides of a change must parse, or it is ignored.
                let parsed_e = match &e {
                    WatchEvent::Added(p) => parsed.added(p).map(WatchEvent::Added),
                    WatchEvent::Modified { old, new } => parsed
                        .modified(old, new)
                        .map(|(old, new)| WatchEvent::Modified { old, new }),
                    WatchEvent::Deleted(p) => parsed.deleted(p).map(WatchEvent::Deleted),
                };
                match parsed_e {
                    Some(pe) => {
                        event = Some(pod_label(&pe));
                        on_pod(&shared, pe);
                    }
                    None => event = event_label(&ClusterChange::Pod(e)),
                }
            }
            ClusterChange::PodInfo(e) => on_pod(&shared, e),
            ClusterChange::Object(e) => on_object(&shared, e),
            ClusterChange::Synced => {
                // Before the scheduler may send an extender any request.
                if let Some(feed) = &shared.node_feed {
                    feed.mark_synced();
                }
                let (nodes, pods) = {
                    let c = shared.cache.lock();
                    (c.node_count(), c.pod_count())
                };
                tracing::info!(
                    nodes,
                    bound_pods = pods,
                    pending = shared.queue.counts().active,
                    "cache synced with the {} cluster",
                    shared.cluster.kind()
                );
                let _ = synced.send(true);
            }
        }
        if let Some(event) = event {
            crate::metrics::process::event_handled(event, started.elapsed());
        }
    }
    tracing::info!("cluster change stream ended");
}

fn action<T>(e: &WatchEvent<T>) -> usize {
    match e {
        WatchEvent::Added(_) => 0,
        WatchEvent::Modified { .. } => 1,
        WatchEvent::Deleted(_) => 2,
    }
}

fn assigned(bound: bool, action: usize) -> &'static str {
    const ASSIGNED: [&str; 3] = ["AssignedPodAdd", "AssignedPodUpdate", "AssignedPodDelete"];
    const UNSCHEDULED: [&str; 3] = [
        "UnscheduledPodAdd",
        "UnscheduledPodUpdate",
        "UnscheduledPodDelete",
    ];
    if bound {
        ASSIGNED[action]
    } else {
        UNSCHEDULED[action]
    }
}

/// [`event_label`] of a parsed pod's change.
fn pod_label(e: &WatchEvent<PodRef>) -> &'static str {
    let p = match e {
        WatchEvent::Added(p) | WatchEvent::Deleted(p) | WatchEvent::Modified { new: p, .. } => p,
    };
    assigned(p.node_name.is_some(), action(e))
}

/// The label upstream's `scheduler_event_handling_duration_seconds` gives
/// a change: `NodeAdd`, `AssignedPodUpdate`, `UnscheduledPodDelete`,
/// `PersistentVolumeClaimAdd`, ... (none for the end of the listing).
fn event_label(change: &ClusterChange) -> Option<&'static str> {
    const NODE: [&str; 3] = ["NodeAdd", "NodeUpdate", "NodeDelete"];
    Some(match change {
        ClusterChange::Node(e) => NODE[action(e)],
        ClusterChange::Pod(e) => {
            let p = match e {
                WatchEvent::Added(p)
                | WatchEvent::Deleted(p)
                | WatchEvent::Modified { new: p, .. } => p,
            };
            let bound = p.node_name().is_some();
            assigned(bound, action(e))
        }
        ClusterChange::PodInfo(e) => pod_label(e),
        ClusterChange::Object(e) => {
            let o = match e {
                WatchEvent::Added(o)
                | WatchEvent::Deleted(o)
                | WatchEvent::Modified { new: o, .. } => o,
            };
            object_label(o.kind(), action(e))
        }
        ClusterChange::Synced => return None,
    })
}

/// `<Kind><Add|Update|Delete>`, as upstream labels events of other kinds.
fn object_label(kind: crate::cache::ObjectKind, action: usize) -> &'static str {
    use crate::cache::ObjectKind as K;
    macro_rules! labels {
        ($($k:ident => $name:literal),* $(,)?) => {
            match kind {
                $(K::$k => [concat!($name, "Add"), concat!($name, "Update"), concat!($name, "Delete")][action],)*
            }
        };
    }
    labels!(
        Namespace => "Namespace",
        PersistentVolume => "PersistentVolume",
        PersistentVolumeClaim => "PersistentVolumeClaim",
        StorageClass => "StorageClass",
        CsiNode => "CSINode",
        PodDisruptionBudget => "PodDisruptionBudget",
        Service => "Service",
        ReplicaSet => "ReplicaSet",
        StatefulSet => "StatefulSet",
        ReplicationController => "ReplicationController",
        DeviceClass => "DeviceClass",
        ResourceClaim => "ResourceClaim",
        ResourceClaimTemplate => "ResourceClaimTemplate",
        ResourceSlice => "ResourceSlice",
        PodGroup => "PodGroup",
        Workload => "Workload",
        DeviceTaintRule => "DeviceTaintRule",
        CsiDriver => "CSIDriver",
        CsiStorageCapacity => "CSIStorageCapacity",
        PriorityClass => "PriorityClass",
    )
}

fn node_spec(node: &Arc<Node>, feed_id: u32) -> Option<Arc<NodeSpec>> {
    match NodeSpec::new(node.clone()) {
        Ok(n) => Some(Arc::new(n.with_feed_id(feed_id))),
        Err(e) => {
            let name = node.metadata.name.as_deref().unwrap_or("<unnamed>");
            tracing::error!(node = name, error = %e, "ignoring invalid node");
            None
        }
    }
}

/// The pods of object events as last parsed, by UID, so that a change is
/// parsed once: its old side is the version parsed before, and a new side
/// that differs only in its status (a status write: a condition, a
/// nomination) is derived from it without parsing (see
/// [`PodInfo::updated`]). Every `PodRef` here is the one handed to the
/// cache and the queue, so the map costs an entry per pod, not a copy.
#[derive(Default)]
struct Parsed {
    by_uid: crate::model::UidMap<PodRef>,
}

impl Parsed {
    fn uid(pod: &PodObject) -> &str {
        pod.base()
            .and_then(|p| p.metadata.uid.as_deref())
            .unwrap_or("")
    }

    /// The parsed version of `pod`, if it is the one kept.
    fn kept(&self, pod: &PodObject) -> Option<PodRef> {
        self.by_uid
            .get(Self::uid(pod))
            .filter(|p| p.pod.resource_version() == pod.resource_version())
            .cloned()
    }

    fn keep(&mut self, p: &PodRef) {
        self.by_uid.insert(p.uid.clone(), p.clone());
    }

    fn added(&mut self, pod: &PodObject) -> Option<PodRef> {
        let p = pod_info(pod)?;
        self.keep(&p);
        Some(p)
    }

    fn modified(&mut self, old: &PodObject, new: &PodObject) -> Option<(PodRef, PodRef)> {
        let old = self.kept(old).or_else(|| pod_info(old))?;
        let new = match old.updated(new.clone()) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                invalid(new, &e);
                return None;
            }
        };
        self.keep(&new);
        Some((old, new))
    }

    fn deleted(&mut self, pod: &PodObject) -> Option<PodRef> {
        let kept = self.kept(pod);
        self.by_uid.remove(Self::uid(pod));
        kept.or_else(|| pod_info(pod))
    }
}

fn invalid(pod: &PodObject, e: &crate::model::InvalidObject) {
    let meta = pod.base().map(|p| &p.metadata);
    let ns = meta
        .and_then(|m| m.namespace.as_deref())
        .unwrap_or("default");
    let name = meta.and_then(|m| m.name.as_deref()).unwrap_or("<unnamed>");
    tracing::error!(pod = %format!("{ns}/{name}"), error = %e, "ignoring invalid pod");
}

fn pod_info(pod: &PodObject) -> Option<PodRef> {
    match PodInfo::from_object(pod.clone()) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            invalid(pod, &e);
            None
        }
    }
}

fn on_node(shared: &Shared, e: WatchEvent<Arc<Node>>, feed_id: u32) {
    match e {
        WatchEvent::Added(n) => {
            let Some(n) = node_spec(&n, feed_id) else {
                return;
            };
            shared.cache.lock().add_node(n.clone());
            shared.queue.move_all_to_active_or_backoff(
                ClusterEvent::NODE_ADD,
                None,
                Some(EventObject::Node(n)),
                None,
            );
        }
        WatchEvent::Modified { old, new } => {
            let Some(new) = node_spec(&new, feed_id) else {
                return;
            };
            shared.cache.lock().update_node(new.clone());
            let Some(old) = node_spec(&old, feed_id) else {
                return;
            };
            for event in node_scheduling_property_changes(&old, &new) {
                shared.queue.move_all_to_active_or_backoff(
                    event,
                    Some(EventObject::Node(old.clone())),
                    Some(EventObject::Node(new.clone())),
                    None,
                );
            }
        }
        WatchEvent::Deleted(n) => {
            let Some(n) = node_spec(&n, feed_id) else {
                return;
            };
            shared.queue.move_all_to_active_or_backoff(
                ClusterEvent::NODE_DELETE,
                Some(EventObject::Node(n.clone())),
                None,
                None,
            );
            if let Err(e) = shared.cache.lock().remove_node(&n.name) {
                tracing::error!(error = %e, "scheduler cache RemoveNode failed");
            }
        }
    }
}

/// Other objects go into the handle's object store; changes to the kinds
/// plugins register for move the pods they may help.
fn on_object(shared: &Shared, e: WatchEvent<KubeObject>) {
    if let Some(groups) = &shared.pod_groups
        && let Some(key) = pod_group_changed(groups, &e)
    {
        // Members that waited for it join a group entity.
        shared.queue.pod_group_observed(&key);
    }
    let store = shared.handle.objects();
    let (action, old, new) = match &e {
        WatchEvent::Added(o) => {
            store.upsert(o.clone());
            (ActionType::ADD, None, Some(o))
        }
        WatchEvent::Modified { old, new } => {
            store.upsert(new.clone());
            (ActionType::UPDATE, Some(old), Some(new))
        }
        WatchEvent::Deleted(o) => {
            store.remove(o);
            (ActionType::DELETE, Some(o), None)
        }
    };
    let kind = new.or(old).map(|o| o.kind()).expect("an object");
    if let Some(resource) = kind.event_resource() {
        shared.queue.move_all_to_active_or_backoff(
            ClusterEvent::new(resource, action),
            old.map(|o| EventObject::Object(o.clone())),
            new.map(|o| EventObject::Object(o.clone())),
            None,
        );
    }
}

/// A PodGroup changed: the manager holds it pre-parsed (an invalid one,
/// which an API server would not have stored, is logged and left out).
/// Returns the key of a PodGroup now observed.
fn pod_group_changed(
    groups: &crate::cache::PodGroupManager,
    e: &WatchEvent<KubeObject>,
) -> Option<GroupKey> {
    match e {
        WatchEvent::Added(KubeObject::PodGroup(pg))
        | WatchEvent::Modified {
            new: KubeObject::PodGroup(pg),
            ..
        } => match PodGroupInfo::new(pg.clone()) {
            Ok(info) => {
                let key = info.key.clone();
                groups.set_pod_group(Arc::new(info));
                Some(key)
            }
            Err(e) => {
                let name = pg.metadata.name.as_deref().unwrap_or("<unnamed>");
                tracing::error!(podgroup = name, error = %e, "ignoring invalid PodGroup");
                None
            }
        },
        WatchEvent::Deleted(KubeObject::PodGroup(pg)) => {
            groups.remove_pod_group(&GroupKey::new(
                pg.metadata.namespace.as_deref().unwrap_or("default"),
                pg.metadata.name.as_deref().unwrap_or(""),
            ));
            None
        }
        _ => None,
    }
}

fn responsible(shared: &Shared, pod: &PodInfo) -> bool {
    shared.profiles.contains_key(&pod.scheduler_name)
}

fn on_pod(shared: &Shared, e: WatchEvent<PodRef>) {
    match e {
        WatchEvent::Added(p) => {
            if p.node_name.is_some() {
                add_assigned(shared, p);
            } else if responsible(shared, &p) {
                shared.cache.lock().add_pending_pod(&p);
                shared.queue.add(p);
            }
        }
        WatchEvent::Modified { old, new } => {
            if old.node_name.is_some() {
                if let Err(e) = shared.cache.lock().update_pod(new.clone()) {
                    tracing::error!(error = %e, "scheduler cache UpdatePod failed");
                }
                for event in pod_scheduling_property_changes(&old, &new) {
                    shared.queue.move_all_to_active_or_backoff(
                        event,
                        Some(EventObject::Pod(old.clone())),
                        Some(EventObject::Pod(new.clone())),
                        None,
                    );
                }
            } else if new.node_name.is_some() {
                // Bound (by us or by someone else): it is no longer pending.
                let uid = new.uid.clone();
                let ours = responsible(shared, &new);
                add_assigned(shared, new);
                if ours {
                    shared.queue.delete(&uid);
                }
            } else if responsible(shared, &new) {
                if old.pod.resource_version() == new.pod.resource_version()
                    && old.pod.resource_version().is_some()
                {
                    return;
                }
                if shared.cache.lock().is_assumed(&new.uid) {
                    if new.terminating && !old.terminating {
                        assumed_pod_deleted(shared, &new);
                    }
                    return;
                }
                shared.cache.lock().add_pending_pod(&new);
                shared.queue.update(&old, new.clone());
                if old.nominated_node_name.is_some()
                    && old.nominated_node_name != new.nominated_node_name
                {
                    // Its nomination held room that is free now.
                    let priority = old.priority;
                    shared.queue.move_all_to_active_or_backoff(
                        ClusterEvent::ASSIGNED_POD_DELETE,
                        Some(EventObject::Pod(old.clone())),
                        None,
                        Some(&|p: &PodInfo| p.priority <= priority),
                    );
                }
            }
        }
        WatchEvent::Deleted(p) => {
            if p.node_name.is_some() {
                if let Err(e) = shared.cache.lock().remove_pod(&p.uid) {
                    tracing::debug!(error = %e, "scheduler cache RemovePod");
                }
                shared.queue.move_all_to_active_or_backoff(
                    ClusterEvent::ASSIGNED_POD_DELETE,
                    Some(EventObject::Pod(p)),
                    None,
                    None,
                );
            } else if responsible(shared, &p) {
                shared.cache.lock().remove_pending_pod(&p);
                shared.queue.delete(&p.uid);
                if shared.cache.lock().is_assumed(&p.uid) {
                    assumed_pod_deleted(shared, &p);
                } else if p.nominated_node_name.is_some() {
                    let priority = p.priority;
                    shared.queue.move_all_to_active_or_backoff(
                        ClusterEvent::ASSIGNED_POD_DELETE,
                        Some(EventObject::Pod(p)),
                        None,
                        Some(&|q: &PodInfo| q.priority <= priority),
                    );
                }
            }
        }
    }
}

fn add_assigned(shared: &Shared, p: PodRef) {
    if let Err(e) = shared.cache.lock().add_pod(p.clone()) {
        tracing::error!(error = %e, "scheduler cache AddPod failed");
    }
    shared.queue.move_all_to_active_or_backoff(
        ClusterEvent::ASSIGNED_POD_ADD,
        None,
        Some(EventObject::Pod(p)),
        None,
    );
}

/// A pod we assumed is going away before its binding was seen: release it.
/// If it waits at Permit, rejecting it lets its binding cycle unreserve and
/// forget it; otherwise forget it here.
fn assumed_pod_deleted(shared: &Shared, p: &PodRef) {
    if !shared.handle.waiting_pods().reject(&p.uid, None, "removed") {
        let node = shared
            .cache
            .lock()
            .get_pod(&p.uid)
            .and_then(|c| c.node_name.clone());
        if let Some(node) = node
            && let Err(e) = shared.cache.lock().forget_pod(&p.uid, &node)
        {
            tracing::error!(error = %e, "scheduler cache ForgetPod failed");
        }
    }
    shared.queue.move_all_to_active_or_backoff(
        ClusterEvent::ASSIGNED_POD_DELETE,
        Some(EventObject::Pod(p.clone())),
        None,
        None,
    );
}
