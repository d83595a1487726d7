//! The volume binder: which of a pod's claims are bound, which static
//! volumes or provisioning can satisfy the unbound ones on a node, the
//! in-memory assumptions that keep the next pods off the volumes chosen,
//! and the API writes that make the PV controller finish the job.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use parking_lot::Mutex;

use crate::cache::{KubeObject, ObjectStore};
use crate::framework::Handle;
use crate::model::quantity::Quantity;
use crate::model::{LabelSelector, Labels, PodInfo};
use crate::plugins::volume_helpers::{
    ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, NOT_SUPPORTED_PROVISIONER,
    VolumeNodeAffinity, WAIT_FOR_FIRST_CONSUMER, annotation, claim_class, claim_volume_name,
    labels_of, match_topology_selector_terms, pod_volumes, resource_version, volume_claim,
    volume_class, volume_is_for_pod,
};

/// The node's labels do not satisfy a bound volume's node affinity
/// (v1.37's words; v1.36 said "node(s) had volume node affinity
/// conflict").
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// No CSIStorageCapacity the node can reach has room for a claim to
/// provision.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// No static volume fits and provisioning is impossible on the node.
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// A claim is bound to a volume that does not exist.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

mod capacity;

pub use capacity::{CapacityCheck, RoomFor};

/// The hostname label, whose `In` values name the nodes of local volumes.
const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// Bytes of `storage` in a resource list (0 when absent or malformed).
fn storage_bytes(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    list.and_then(|l| l.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value().unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn claim_key(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or("default"),
        pvc.metadata.name.as_deref().unwrap_or("")
    )
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

/// Whether the claim is bound and the controller finished binding it.
pub fn is_claim_fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(pvc).is_empty() && annotation(&pvc.metadata, ANN_BIND_COMPLETED).is_some()
}

/// Whether the volume's claimRef names `pvc` (and its UID, when set).
fn is_volume_bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name.as_deref() == pvc.metadata.name.as_deref()
        && r.namespace.as_deref() == pvc.metadata.namespace.as_deref()
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == pvc.metadata.uid.as_deref())
}

/// A claim waiting for the scheduler, pre-parsed.
#[derive(Debug, Clone)]
pub struct UnboundClaim {
    /// The claim (from the assume cache).
    pub pvc: Arc<PersistentVolumeClaim>,
    request: i64,
    /// Whether the claim asks for `storage` at all (no request: no
    /// capacity check).
    has_request: bool,
    class: String,
    /// Where provisioning the claim would find room, when its driver
    /// publishes CSIStorageCapacity (filled at PreFilter).
    capacity: CapacityCheck,
    /// `None`: no selector; `Err`: a selector that does not parse.
    selector: Option<Result<LabelSelector, String>>,
    selected_node: Option<String>,
}

impl UnboundClaim {
    fn new(pvc: Arc<PersistentVolumeClaim>) -> Self {
        let spec = pvc.spec.as_ref();
        let requests = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref());
        let request = storage_bytes(requests);
        let has_request = requests.is_some_and(|r| r.contains_key("storage"));
        let selector = spec.and_then(|s| s.selector.as_ref()).map(|sel| {
            LabelSelector::parse(Some(sel), "spec.selector").map_err(|e| {
                format!(
                    "error creating internal label selector for claim: {}: {e}",
                    claim_key(&pvc)
                )
            })
        });
        Self {
            request,
            has_request,
            capacity: CapacityCheck::Unchecked,
            class: claim_class(&pvc).to_string(),
            selector,
            selected_node: annotation(&pvc.metadata, ANN_SELECTED_NODE).map(String::from),
            pvc,
        }
    }

    fn volume_mode(&self) -> &str {
        self.pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_mode.as_deref())
            .unwrap_or("Filesystem")
    }

    fn access_modes(&self) -> &[String] {
        self.pvc
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.as_deref())
            .unwrap_or(&[])
    }
}

/// A volume that may be bound to a waiting claim, pre-parsed.
#[derive(Debug, Clone)]
pub struct CandidateVolume {
    /// The volume (from the assume cache).
    pub pv: Arc<PersistentVolume>,
    capacity: i64,
    labels: Labels,
    affinity: VolumeNodeAffinity,
}

impl CandidateVolume {
    fn new(pv: Arc<PersistentVolume>) -> Self {
        Self {
            capacity: storage_bytes(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())),
            labels: labels_of(pv.metadata.labels.as_ref()),
            affinity: VolumeNodeAffinity::of(&pv),
            pv,
        }
    }

    fn volume_mode(&self) -> &str {
        self.pv
            .spec
            .as_ref()
            .and_then(|s| s.volume_mode.as_deref())
            .unwrap_or("Filesystem")
    }

    fn phase(&self) -> &str {
        self.pv
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }

    fn has_access_modes(&self, wanted: &[String]) -> bool {
        let have = self
            .pv
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.as_deref())
            .unwrap_or(&[]);
        wanted.iter().all(|m| have.contains(m))
    }
}

/// A bound claim and its volume (`None`: the volume does not exist).
#[derive(Debug, Clone)]
pub struct BoundClaim {
    /// The claim.
    pub pvc: Arc<PersistentVolumeClaim>,
    /// Its volume and the volume's node affinity.
    pub pv: Option<(Arc<PersistentVolume>, VolumeNodeAffinity)>,
}

/// The pod's claims, sorted out at PreFilter.
#[derive(Debug, Clone, Default)]
pub struct PodVolumeClaims {
    /// Bound claims.
    pub bound: Vec<BoundClaim>,
    /// Unbound claims of WaitForFirstConsumer classes, by increasing request.
    pub unbound_delay_binding: Vec<UnboundClaim>,
    /// Unbound claims that should have been bound already.
    pub unbound_immediate: Vec<Arc<PersistentVolumeClaim>>,
    /// Volumes of the waiting claims' classes, by class.
    pub unbound_volumes: HashMap<String, Vec<CandidateVolume>>,
    /// The waiting claims' classes that exist.
    pub classes: HashMap<String, Arc<StorageClass>>,
}

/// The decisions for one node.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Claims to bind to existing volumes: `(volume, claim)`.
    pub static_bindings: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    /// Claims to provision.
    pub dynamic_provisions: Vec<Arc<PersistentVolumeClaim>>,
    /// For the claims to provision that a CSIStorageCapacity has room
    /// for: `(class, requested bytes, the capacity's bytes)`, what Score
    /// reads (upstream's `DynamicProvision.NodeCapacity`).
    pub provision_capacity: Vec<(String, i64, i64)>,
    /// For the static bindings: `(class, requested bytes, the volume's
    /// bytes)`, what Score reads (upstream's `StorageResource`).
    pub static_capacity: Vec<(String, i64, i64)>,
}

impl PodVolumes {
    /// Whether nothing is to be bound or provisioned.
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.dynamic_provisions.is_empty()
    }
}

/// Why a node cannot satisfy the pod's claims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conflicts {
    /// A bound volume's node affinity does not match.
    pub node: bool,
    /// An unbound claim can neither be matched nor provisioned.
    pub bind: bool,
    /// A bound volume does not exist.
    pub pv_not_exist: bool,
    /// No reachable CSIStorageCapacity has room for a claim to provision.
    pub not_enough_space: bool,
}

impl Conflicts {
    /// The reasons, in upstream's order.
    pub fn reasons(&self) -> impl Iterator<Item = &'static str> {
        [
            (self.node, ERR_REASON_NODE_CONFLICT),
            (self.bind, ERR_REASON_BIND_CONFLICT),
            (self.not_enough_space, ERR_REASON_NOT_ENOUGH_SPACE),
            (self.pv_not_exist, ERR_REASON_PV_NOT_EXIST),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, r)| r)
    }

    /// Whether the node is fine.
    pub fn is_empty(&self) -> bool {
        !(self.node || self.bind || self.pv_not_exist || self.not_enough_space)
    }
}

/// Local volumes' node names: for each required term, the intersection of
/// its `kubernetes.io/hostname In` values, united over terms.
fn local_volume_node_names(pv: &PersistentVolume) -> Vec<String> {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Vec::new();
    };
    let mut result: HashSet<String> = HashSet::new();
    for term in &required.node_selector_terms {
        let mut nodes: Option<HashSet<String>> = None;
        for e in term.match_expressions.iter().flatten() {
            if e.key == LABEL_HOSTNAME && e.operator == "In" {
                let vals: HashSet<String> = e.values.iter().flatten().cloned().collect();
                nodes = Some(match nodes {
                    None => vals,
                    Some(n) => n.intersection(&vals).cloned().collect(),
                });
            }
        }
        result.extend(nodes.into_iter().flatten());
    }
    let mut v: Vec<String> = result.into_iter().collect();
    v.sort();
    v
}

/// Objects assumed (written in memory ahead of the API) by key; an assumed
/// version holds until the store has a newer one.
#[derive(Debug, Default)]
struct AssumeCache<T> {
    assumed: Mutex<HashMap<String, Arc<T>>>,
}

impl<T> AssumeCache<T> {
    /// The assumed version of `api`, if it is still ahead.
    fn effective(
        &self,
        key: &str,
        api: Arc<T>,
        meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Arc<T> {
        let mut assumed = self.assumed.lock();
        match assumed.get(key) {
            Some(a) if resource_version(meta(a)) >= resource_version(meta(&api)) => a.clone(),
            Some(_) => {
                // The store caught up: the assumption is spent.
                assumed.remove(key);
                api
            }
            None => api,
        }
    }

    fn assume(
        &self,
        key: String,
        obj: Arc<T>,
        latest: Option<Arc<T>>,
        what: &str,
        meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<(), String> {
        let Some(latest) = latest else {
            return Err(format!("{what} {key:?} not found"));
        };
        let stored = resource_version(meta(&latest));
        let new = resource_version(meta(&obj));
        if new < stored {
            return Err(format!(
                "{what} {key:?} is out of sync (stored: {stored}, assume: {new})"
            ));
        }
        self.assumed.lock().insert(key, obj);
        Ok(())
    }

    fn restore(&self, key: &str) {
        self.assumed.lock().remove(key);
    }
}

/// The binder.
pub struct Binder {
    handle: Handle,
    pvs: AssumeCache<PersistentVolume>,
    pvcs: AssumeCache<PersistentVolumeClaim>,
    /// How long PreBind waits for the claims to be bound.
    pub bind_timeout: Duration,
    /// How often PreBind looks at the claims while it waits.
    pub poll_interval: Duration,
}

impl Binder {
    /// A binder reading the handle's object store.
    pub fn new(handle: &Handle, bind_timeout: Duration) -> Self {
        Self {
            handle: handle.clone(),
            pvs: AssumeCache {
                assumed: Mutex::default(),
            },
            pvcs: AssumeCache {
                assumed: Mutex::default(),
            },
            bind_timeout,
            poll_interval: Duration::from_secs(1),
        }
    }

    fn objects(&self) -> &ObjectStore {
        self.handle.objects()
    }

    /// The volume as assumed, or as the API has it.
    pub fn get_pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        let api = self.objects().persistent_volume("", name)?;
        Some(self.pvs.effective(name, api, |p| &p.metadata))
    }

    /// The claim as assumed, or as the API has it.
    pub fn get_pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let api = self.objects().persistent_volume_claim(namespace, name)?;
        Some(
            self.pvcs
                .effective(&format!("{namespace}/{name}"), api, |p| &p.metadata),
        )
    }

    /// Volumes of a class, assumed versions first.
    fn list_pvs(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        self.objects()
            .persistent_volumes("")
            .into_iter()
            .map(|pv| {
                let name = name_of(&pv.metadata).to_string();
                self.pvs.effective(&name, pv, |p| &p.metadata)
            })
            .filter(|pv| volume_class(pv) == class)
            .collect()
    }

    /// Whether the claim's class delays binding until a pod uses it.
    fn is_delay_binding_mode(&self, pvc: &PersistentVolumeClaim) -> Result<bool, String> {
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            return Ok(false);
        }
        let Some(class) = self.objects().storage_class("", class_name) else {
            return Ok(false);
        };
        match class.volume_binding_mode.as_deref() {
            None => Err(format!(
                "VolumeBindingMode not set for StorageClass {class_name:?}"
            )),
            Some(m) => Ok(m == WAIT_FOR_FIRST_CONSUMER),
        }
    }

    /// Sorts the pod's claims into bound, waiting and immediate ones.
    pub fn get_pod_volume_claims(&self, pod: &PodInfo) -> Result<PodVolumeClaims, String> {
        let mut c = PodVolumeClaims::default();
        for vol in pod_volumes(pod) {
            let Some((name, ephemeral)) = volume_claim(pod, vol) else {
                continue;
            };
            let key = format!("{}/{}", pod.namespace, name);
            let pvc = self.get_pvc(&pod.namespace, &name).ok_or_else(|| {
                format!("error getting PVC {key:?}: PersistentVolumeClaim {key:?} not found")
            })?;
            if ephemeral {
                volume_is_for_pod(pod, &pvc)?;
            }
            if is_claim_fully_bound(&pvc) {
                let pv = self.get_pv(claim_volume_name(&pvc)).map(|pv| {
                    let a = VolumeNodeAffinity::of(&pv);
                    (pv, a)
                });
                c.bound.push(BoundClaim { pvc, pv });
            } else if self.is_delay_binding_mode(&pvc)? && claim_volume_name(&pvc).is_empty() {
                c.unbound_delay_binding.push(UnboundClaim::new(pvc));
            } else {
                // Pre-bound claims too: the PV controller binds them.
                c.unbound_immediate.push(pvc);
            }
        }
        // The smallest requests pick first.
        c.unbound_delay_binding.sort_by_key(|u| u.request);
        for u in &c.unbound_delay_binding {
            if !c.unbound_volumes.contains_key(&u.class) {
                let pvs = self
                    .list_pvs(&u.class)
                    .into_iter()
                    .map(CandidateVolume::new)
                    .collect();
                c.unbound_volumes.insert(u.class.clone(), pvs);
            }
            if !u.class.is_empty()
                && !c.classes.contains_key(&u.class)
                && let Some(sc) = self.objects().storage_class("", &u.class)
            {
                c.classes.insert(u.class.clone(), sc);
            }
        }
        for u in &mut c.unbound_delay_binding {
            if let Some(class) = c.classes.get(&u.class) {
                u.capacity = self.capacity_check(u, class);
            }
        }
        Ok(c)
    }

    /// The only nodes the bound local volumes allow, if they say.
    pub fn eligible_nodes(&self, claims: &PodVolumeClaims) -> Option<HashSet<Arc<str>>> {
        let mut eligible: Option<HashSet<Arc<str>>> = None;
        for b in &claims.bound {
            let (pv, _) = b.pv.as_ref()?;
            let names = local_volume_node_names(pv);
            if names.is_empty() {
                continue;
            }
            let set: HashSet<Arc<str>> = names.iter().map(|n| Arc::from(n.as_str())).collect();
            eligible = Some(match eligible {
                None => set,
                Some(e) => e.intersection(&set).cloned().collect(),
            });
        }
        eligible
    }

    /// Whether the node can satisfy the pod's claims: the decisions, or why
    /// not; `Err` when something is broken.
    pub fn find_pod_volumes(
        &self,
        claims: &PodVolumeClaims,
        node_name: &str,
        node_labels: &Labels,
    ) -> Result<(PodVolumes, Conflicts), String> {
        let mut conflicts = Conflicts::default();
        let mut volumes = PodVolumes::default();
        for b in &claims.bound {
            match &b.pv {
                None => {
                    conflicts.pv_not_exist = true;
                    break;
                }
                Some((_, affinity)) if !affinity.matches(node_labels) => {
                    conflicts.node = true;
                    break;
                }
                Some(_) => {}
            }
        }
        if claims.unbound_delay_binding.is_empty() {
            return Ok((volumes, conflicts));
        }
        let mut to_match: Vec<&UnboundClaim> = Vec::new();
        let mut to_provision: Vec<&UnboundClaim> = Vec::new();
        for u in &claims.unbound_delay_binding {
            match &u.selected_node {
                Some(n) if n != node_name => {
                    // Provisioning was already started for another node.
                    conflicts.bind = true;
                    return Ok((volumes, conflicts));
                }
                Some(_) => to_provision.push(u),
                None => to_match.push(u),
            }
        }
        let mut unbound_ok = true;
        if !to_match.is_empty() {
            let mut chosen: Vec<&str> = Vec::new();
            for u in to_match {
                let pvs = claims
                    .unbound_volumes
                    .get(&u.class)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                match find_matching_volume(u, pvs, node_labels, &chosen)? {
                    Some(v) => {
                        chosen.push(name_of(&v.pv.metadata));
                        volumes.static_bindings.push((v.pv.clone(), u.pvc.clone()));
                        volumes
                            .static_capacity
                            .push((u.class.clone(), u.request, v.capacity));
                    }
                    None => {
                        unbound_ok = false;
                        to_provision.push(u);
                    }
                }
            }
        }
        if !to_provision.is_empty() {
            unbound_ok = true;
            for u in to_provision {
                if u.class.is_empty() {
                    return Err(format!("no class for claim {:?}", claim_key(&u.pvc)));
                }
                let Some(class) = claims.classes.get(&u.class) else {
                    return Err(format!("failed to find storage class {:?}", u.class));
                };
                if class.provisioner.is_empty() || class.provisioner == NOT_SUPPORTED_PROVISIONER {
                    unbound_ok = false;
                    volumes.dynamic_provisions.clear();
                    break;
                }
                if !match_topology_selector_terms(class.allowed_topologies.as_ref(), node_labels) {
                    unbound_ok = false;
                    volumes.dynamic_provisions.clear();
                    break;
                }
                if let CapacityCheck::Candidates(room) = &u.capacity {
                    let Some(r) = room.iter().find(|r| r.topology.matches(node_labels)) else {
                        // Provisioning is possible, but not here: no room.
                        conflicts.not_enough_space = true;
                        volumes.dynamic_provisions.clear();
                        volumes.provision_capacity.clear();
                        break;
                    };
                    volumes
                        .provision_capacity
                        .push((u.class.clone(), u.request, r.capacity));
                }
                volumes.dynamic_provisions.push(u.pvc.clone());
            }
        }
        conflicts.bind = !unbound_ok;
        Ok((volumes, conflicts))
    }

    /// Whether all the pod's claims are bound (as assumed).
    fn are_pod_volumes_bound(&self, pod: &PodInfo) -> bool {
        pod_volumes(pod).iter().all(|vol| {
            let Some((name, ephemeral)) = volume_claim(pod, vol) else {
                return true;
            };
            match self.get_pvc(&pod.namespace, &name) {
                Some(pvc) => {
                    (!ephemeral || volume_is_for_pod(pod, &pvc).is_ok())
                        && is_claim_fully_bound(&pvc)
                }
                None => false,
            }
        })
    }

    /// Assumes the node's decisions: volumes pre-bound to their claims,
    /// claims annotated with the node. Returns whether all claims were
    /// bound already (nothing to do), and the decisions as assumed.
    pub fn assume_pod_volumes(
        &self,
        pod: &PodInfo,
        node: &str,
        volumes: &PodVolumes,
    ) -> Result<(bool, PodVolumes), String> {
        if self.are_pod_volumes_bound(pod) {
            return Ok((true, volumes.clone()));
        }
        let mut assumed = PodVolumes::default();
        for (pv, pvc) in &volumes.static_bindings {
            let (new_pv, dirty) = bind_volume_to_claim(pv, pvc);
            if dirty {
                let name = name_of(&new_pv.metadata).to_string();
                let latest = self.get_pv(&name);
                if let Err(e) =
                    self.pvs
                        .assume(name, new_pv.clone(), latest, "PersistentVolume", |p| {
                            &p.metadata
                        })
                {
                    self.revert(&assumed);
                    return Err(e);
                }
            }
            assumed.static_bindings.push((new_pv, pvc.clone()));
        }
        for pvc in &volumes.dynamic_provisions {
            let mut clone = (**pvc).clone();
            clone
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANN_SELECTED_NODE.into(), node.into());
            let clone = Arc::new(clone);
            let key = claim_key(&clone);
            let (ns, name) = key.split_once('/').unwrap_or(("", ""));
            let latest = self.get_pvc(ns, name);
            if let Err(e) = self.pvcs.assume(
                key.clone(),
                clone.clone(),
                latest,
                "PersistentVolumeClaim",
                |p| &p.metadata,
            ) {
                self.revert(&assumed);
                return Err(e);
            }
            assumed.dynamic_provisions.push(clone);
        }
        Ok((false, assumed))
    }

    /// Drops the assumptions of `volumes`.
    pub fn revert(&self, volumes: &PodVolumes) {
        for (pv, _) in &volumes.static_bindings {
            self.pvs.restore(name_of(&pv.metadata));
        }
        for pvc in &volumes.dynamic_provisions {
            self.pvcs.restore(&claim_key(pvc));
        }
    }

    /// Writes the decisions to the API and waits (polling the object store
    /// every `poll_interval`, at most `bind_timeout`) until the PV
    /// controller has bound every claim.
    pub async fn bind_pod_volumes(
        &self,
        pod: &PodInfo,
        node: &str,
        volumes: &PodVolumes,
    ) -> Result<(), String> {
        let written = self.bind_api_update(volumes).await?;
        let wait = async {
            loop {
                tokio::time::sleep(self.poll_interval).await;
                if self.check_bindings(pod, node, &written)? {
                    return Ok::<(), String>(());
                }
            }
        };
        match tokio::time::timeout(self.bind_timeout, wait).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("binding volumes: {e}")),
            Err(_) => Err("binding volumes: context deadline exceeded".into()),
        }
    }

    /// Updates the volumes (claimRef) and claims (selected node); returns
    /// what the API stored. Assumptions not written are reverted on error.
    async fn bind_api_update(&self, volumes: &PodVolumes) -> Result<PodVolumes, String> {
        let mut written = PodVolumes::default();
        let cluster = self.handle.cluster();
        for (i, (pv, pvc)) in volumes.static_bindings.iter().enumerate() {
            match cluster
                .update_object(KubeObject::PersistentVolume(pv.clone()))
                .await
            {
                Ok(KubeObject::PersistentVolume(stored)) => {
                    written.static_bindings.push((stored, pvc.clone()))
                }
                Ok(_) => written.static_bindings.push((pv.clone(), pvc.clone())),
                Err(e) => {
                    self.revert(&PodVolumes {
                        static_bindings: volumes.static_bindings[i..].to_vec(),
                        dynamic_provisions: volumes.dynamic_provisions.clone(),
                        provision_capacity: Vec::new(),
                        static_capacity: Vec::new(),
                    });
                    return Err(e.to_string());
                }
            }
        }
        for (i, pvc) in volumes.dynamic_provisions.iter().enumerate() {
            match cluster
                .update_object(KubeObject::PersistentVolumeClaim(pvc.clone()))
                .await
            {
                Ok(KubeObject::PersistentVolumeClaim(stored)) => {
                    written.dynamic_provisions.push(stored)
                }
                Ok(_) => written.dynamic_provisions.push(pvc.clone()),
                Err(e) => {
                    self.revert(&PodVolumes {
                        static_bindings: Vec::new(),
                        dynamic_provisions: volumes.dynamic_provisions[i..].to_vec(),
                        provision_capacity: Vec::new(),
                        static_capacity: Vec::new(),
                    });
                    return Err(e.to_string());
                }
            }
        }
        Ok(written)
    }

    /// Whether every claim is bound, by the API objects (not assumptions);
    /// `Err` when binding failed and the pod must be retried.
    fn check_bindings(
        &self,
        _pod: &PodInfo,
        node: &str,
        volumes: &PodVolumes,
    ) -> Result<bool, String> {
        let snapshot = self.handle.snapshot();
        let labels = match snapshot.get(node).and_then(|n| n.node()) {
            Some(n) => n.labels.clone(),
            None => {
                return Err(format!(
                    "failed to get node {node:?}: node {node:?} not found"
                ));
            }
        };
        let objects = self.objects();
        let api_pvc = |pvc: &PersistentVolumeClaim| {
            objects.persistent_volume_claim(
                pvc.metadata.namespace.as_deref().unwrap_or("default"),
                name_of(&pvc.metadata),
            )
        };
        for (pv, pvc) in &volumes.static_bindings {
            let name = name_of(&pv.metadata);
            let Some(api_pv) = objects.persistent_volume("", name) else {
                return Err(format!(
                    "failed to check binding: PersistentVolume {name:?} not found"
                ));
            };
            let Some(api_claim) = api_pvc(pvc) else {
                return Err(format!(
                    "failed to check binding: PersistentVolumeClaim {:?} not found",
                    claim_key(pvc)
                ));
            };
            if resource_version(&pv.metadata) > resource_version(&api_pv.metadata) {
                // Our write has not reached the store yet.
                return Ok(false);
            }
            if !VolumeNodeAffinity::of(&api_pv).matches(&labels) {
                return Err(format!(
                    "pv {name:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms"
                ));
            }
            let uid_set = api_pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.as_deref())
                .is_some_and(|u| !u.is_empty());
            if !uid_set {
                return Err(format!("ClaimRef got reset for pv {name:?}"));
            }
            if !is_claim_fully_bound(&api_claim) {
                return Ok(false);
            }
        }
        for claim in &volumes.dynamic_provisions {
            let Some(api_claim) = api_pvc(claim) else {
                return Err(format!(
                    "failed to check provisioning pvc: PersistentVolumeClaim {:?} not found",
                    claim_key(claim)
                ));
            };
            if resource_version(&claim.metadata) > resource_version(&api_claim.metadata) {
                return Ok(false);
            }
            let claim_name = name_of(&api_claim.metadata);
            if api_claim.metadata.annotations.is_none() {
                return Err(format!(
                    "selectedNode annotation reset for PVC {claim_name:?}"
                ));
            }
            if annotation(&api_claim.metadata, ANN_SELECTED_NODE) != Some(node) {
                // The provisioner gave up and asks for another node.
                return Err(format!("provisioning failed for PVC {claim_name:?}"));
            }
            let pv_name = claim_volume_name(&api_claim);
            if !pv_name.is_empty() {
                let Some(pv) = objects.persistent_volume("", pv_name) else {
                    return Ok(false);
                };
                if !VolumeNodeAffinity::of(&pv).matches(&labels) {
                    return Err(format!(
                        "pv {pv_name:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms"
                    ));
                }
            }
            if !is_claim_fully_bound(&api_claim) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The smallest volume that satisfies the claim on the node (or the one
/// pre-bound to it), among `pvs` less those already `chosen`.
fn find_matching_volume<'a>(
    claim: &UnboundClaim,
    pvs: &'a [CandidateVolume],
    node_labels: &Labels,
    chosen: &[&str],
) -> Result<Option<&'a CandidateVolume>, String> {
    let selector = match &claim.selector {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return Err(e.clone()),
    };
    let mut smallest: Option<&CandidateVolume> = None;
    for v in pvs {
        if chosen.contains(&name_of(&v.pv.metadata)) {
            continue;
        }
        let claimed =
            v.pv.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some();
        let bound_to_claim = is_volume_bound_to_claim(&v.pv, &claim.pvc);
        if claimed && !bound_to_claim {
            continue;
        }
        if v.capacity < claim.request {
            continue;
        }
        if v.volume_mode() != claim.volume_mode() {
            continue;
        }
        if v.pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = v.affinity.matches(node_labels);
        if bound_to_claim {
            // A volume pre-bound to the claim is the answer, if the node
            // suits it.
            return Ok(affinity_ok.then_some(v));
        }
        if v.phase() != "Available" {
            continue;
        }
        if selector.is_some_and(|s| !s.matches(&v.labels)) {
            continue;
        }
        if volume_class(&v.pv) != claim.class || !affinity_ok {
            continue;
        }
        if !v.has_access_modes(claim.access_modes()) {
            continue;
        }
        if smallest.is_none_or(|s| s.capacity > v.capacity) {
            smallest = Some(v);
        }
    }
    Ok(smallest)
}

/// The volume with `claimRef` set to the claim (and the bound-by-controller
/// annotation when the scheduler makes the binding); whether it changed.
fn bind_volume_to_claim(
    pv: &Arc<PersistentVolume>,
    pvc: &PersistentVolumeClaim,
) -> (Arc<PersistentVolume>, bool) {
    let set_by_controller = !is_volume_bound_to_claim(pv, pvc);
    let mut clone = (**pv).clone();
    let mut dirty = false;
    let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let same = current.is_some_and(|r| {
        r.name.as_deref() == pvc.metadata.name.as_deref()
            && r.namespace.as_deref() == pvc.metadata.namespace.as_deref()
            && r.uid.as_deref() == pvc.metadata.uid.as_deref()
    });
    if !same {
        clone.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: pvc.metadata.namespace.clone(),
            name: pvc.metadata.name.clone(),
            uid: pvc.metadata.uid.clone(),
            resource_version: pvc.metadata.resource_version.clone(),
            ..Default::default()
        });
        dirty = true;
    }
    if set_by_controller && annotation(&clone.metadata, ANN_BOUND_BY_CONTROLLER).is_none() {
        clone
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    if dirty {
        (Arc::new(clone), true)
    } else {
        (pv.clone(), false)
    }
}
