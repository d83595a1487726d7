//! The scheduler's view of Dynamic Resource Allocation objects, kept
//! pre-parsed ([`crate::model::dra`]) beside the other objects.
//!
//! It plays the parts of upstream's DRA manager:
//!
//! * device classes by name, and which class backs each extended resource;
//! * ResourceSlices, indexed ([`SliceIndex`]) by the node they publish for;
//!   the index is rebuilt lazily, on the first read after a slice changed;
//! * ResourceClaims as an *assume cache*: the version the watch delivered,
//!   or a newer one the scheduler itself wrote (after PreBind) until the
//!   watch catches up; and the *in-flight* allocations, made in Reserve and
//!   not yet written;
//! * which devices are allocated (counted over the claims above: a device
//!   is busy while any claim's effective version or in-flight allocation
//!   holds it, except for admin access), and how much of each shared
//!   device's capacity is consumed. [`DraStore::allocated_state`] copies
//!   that once per scheduling cycle.
//!
//! Invariant: `counts[slot]` is the number of (effective claim, in-flight
//! claim) allocations holding the device exclusively; it changes only in
//! [`Inner::account`], called with the before and after of every change.

mod pools;
mod taint_rules;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;
use parking_lot::RwLock;

pub use pools::{Pool, pools_for};

use crate::model::dra::{
    Claim, Class, DeviceSlots, Nano, PoolKey, SelectorCache, Slice, SliceNodes, parse_claim,
    parse_class,
};

type ClaimKey = (Arc<str>, Arc<str>);

/// Slices by where they apply, for the allocator.
#[derive(Debug, Default)]
pub struct SliceIndex {
    /// Slices published for one node (`spec.nodeName`, no counter sets).
    pub by_node: HashMap<Arc<str>, Vec<Arc<Slice>>>,
    /// Every other slice: for all nodes, by node selector, per device, or
    /// holding counter sets (which every node of the pool needs).
    pub shared: Vec<Arc<Slice>>,
    /// Every slice, by `(driver, pool)`, in name order: to tell complete,
    /// incomplete and outdated pools apart, and for the devices of a pool
    /// that consume counters elsewhere.
    pub by_pool: HashMap<PoolKey, Vec<Arc<Slice>>>,
    /// How many slices there are.
    pub len: usize,
    /// Pools by node, filled as nodes are asked for (see [`pools_for`]).
    node_pools: RwLock<HashMap<Arc<str>, Arc<[Pool]>>>,
}

impl SliceIndex {
    fn build(slices: &BTreeMap<Arc<str>, Arc<Slice>>) -> Self {
        let mut ix = Self {
            len: slices.len(),
            ..Default::default()
        };
        for s in slices.values() {
            match (&s.nodes, s.shared_counters.is_empty()) {
                (SliceNodes::Name(n), true) => {
                    ix.by_node.entry(n.clone()).or_default().push(s.clone())
                }
                _ => ix.shared.push(s.clone()),
            }
            ix.by_pool
                .entry((s.driver.clone(), s.pool.clone()))
                .or_default()
                .push(s.clone());
        }
        ix
    }
}

/// The prefix of the extended resource name every DeviceClass backs
/// implicitly (`deviceclass.resource.kubernetes.io/<class name>`).
pub const IMPLICIT_EXTENDED_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// Whether a pod's request for `name` may be served by DRA: an extended
/// resource, or a class's implicit name.
pub fn is_dra_extended_resource(name: &str) -> bool {
    crate::model::resource::is_extended_resource(name)
        || name.starts_with(IMPLICIT_EXTENDED_RESOURCE_PREFIX)
}

/// Which devices are allocated, as of the start of a scheduling cycle.
#[derive(Debug, Clone, Default)]
pub struct AllocatedState {
    /// Exclusive allocations per device slot (0: free).
    pub counts: Vec<u32>,
    /// Capacity consumed from shared devices (allowMultipleAllocations),
    /// per slot, by capacity name.
    pub consumed: HashMap<u32, Vec<(Arc<str>, Nano)>>,
}

impl AllocatedState {
    /// Whether the device is held exclusively.
    pub fn in_use(&self, slot: u32) -> bool {
        self.counts.get(slot as usize).is_some_and(|c| *c > 0)
    }

    /// Whether the device is held at all (exclusively or a share of it).
    pub fn allocated(&self, slot: u32) -> bool {
        self.in_use(slot) || self.consumed.contains_key(&slot)
    }
}

/// How many allocations share a device, and what they consume together.
type SharedUse = (u32, Vec<(Arc<str>, Nano)>);

#[derive(Debug, Default)]
struct Inner {
    selectors: SelectorCache,
    slots: DeviceSlots,
    classes: HashMap<Arc<str>, Arc<Class>>,
    invalid_classes: HashMap<Arc<str>, String>,
    claims: HashMap<ClaimKey, Arc<Claim>>,
    assumed: HashMap<ClaimKey, Arc<Claim>>,
    in_flight: HashMap<Arc<str>, Arc<Claim>>,
    slices: BTreeMap<Arc<str>, Arc<Slice>>,
    /// The slices as the cluster has them, to parse again when the taint
    /// rules change.
    raw_slices: BTreeMap<Arc<str>, Arc<api::ResourceSlice>>,
    /// DeviceTaintRules by name.
    taint_rules: BTreeMap<Arc<str>, Arc<api::DeviceTaintRule>>,
    /// Whether the rules apply (the DRADeviceTaintRules gate).
    ignore_taint_rules: bool,
    index: Option<Arc<SliceIndex>>,
    counts: Vec<u32>,
    /// Shared devices: how many allocations share each, and what they
    /// consume together.
    shares: HashMap<u32, SharedUse>,
}

impl Inner {
    fn effective(&self, key: &ClaimKey) -> Option<&Arc<Claim>> {
        self.assumed.get(key).or_else(|| self.claims.get(key))
    }

    /// Adds (`sign` 1) or removes (`sign` -1) a claim's allocation from the
    /// device counts.
    fn account(&mut self, claim: Option<&Arc<Claim>>, sign: i64) {
        let Some(devices) = claim.and_then(|c| c.allocation.as_ref()) else {
            return;
        };
        for d in devices {
            if d.admin_access {
                continue;
            }
            if d.share_id.is_some() {
                let entry = self.shares.entry(d.slot).or_default();
                entry.0 = entry.0.saturating_add_signed(sign as i32);
                for (name, q) in &d.consumed {
                    match entry.1.iter_mut().find(|(n, _)| n == name) {
                        Some((_, v)) => *v += q * sign as i128,
                        None => entry.1.push((name.clone(), q * sign as i128)),
                    }
                }
                if entry.0 == 0 {
                    self.shares.remove(&d.slot);
                }
                continue;
            }
            let i = d.slot as usize;
            if self.counts.len() <= i {
                self.counts.resize(i + 1, 0);
            }
            self.counts[i] = self.counts[i].saturating_add_signed(sign as i32);
        }
    }

    /// Replaces the claim under `key` in one of the two maps, keeping the
    /// counts in step with the effective version.
    fn change(&mut self, key: ClaimKey, f: impl FnOnce(&mut Self)) {
        let before = self.effective(&key).cloned();
        f(self);
        let after = self.effective(&key).cloned();
        let same = match (&before, &after) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.account(before.as_ref(), -1);
            self.account(after.as_ref(), 1);
        }
    }
}

/// DRA objects, pre-parsed, with the allocation bookkeeping the
/// DynamicResources plugin shares across cycles.
#[derive(Debug, Default)]
pub struct DraStore {
    inner: RwLock<Inner>,
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ClaimKey {
    (
        Arc::from(meta.namespace.as_deref().unwrap_or("default")),
        Arc::from(meta.name.as_deref().unwrap_or("")),
    )
}

impl DraStore {
    /// A DeviceClass was added or updated.
    pub fn upsert_class(&self, class: Arc<api::DeviceClass>) {
        let mut s = self.inner.write();
        let name: Arc<str> = Arc::from(class.metadata.name.as_deref().unwrap_or(""));
        match parse_class(&mut s.selectors, class) {
            Ok(c) => {
                s.invalid_classes.remove(&name);
                s.classes.insert(name, Arc::new(c));
            }
            Err(e) => {
                tracing::warn!(class = %name, error = %e, "device class cannot be used");
                s.classes.remove(&name);
                s.invalid_classes.insert(name, e.to_string());
            }
        }
    }

    /// A DeviceClass went away.
    pub fn remove_class(&self, name: &str) {
        let mut s = self.inner.write();
        s.classes.remove(name);
        s.invalid_classes.remove(name);
    }

    /// The class named `name`.
    pub fn class(&self, name: &str) -> Option<Arc<Class>> {
        self.inner.read().classes.get(name).cloned()
    }

    /// The class backing an extended resource (DRAExtendedResource), as
    /// upstream's extended resource cache resolves it: the implicit
    /// `deviceclass.resource.kubernetes.io/<class>` names that class; an
    /// explicit name goes to the class declaring it in
    /// `extendedResourceName`, the newest one if several do (ties: the
    /// name that sorts first).
    pub fn class_for_extended_resource(&self, resource: &str) -> Option<Arc<Class>> {
        let s = self.inner.read();
        if let Some(class) = resource.strip_prefix(IMPLICIT_EXTENDED_RESOURCE_PREFIX) {
            return s.classes.get(class).cloned();
        }
        s.classes
            .values()
            .filter(|c| c.extended_resource_name.as_deref() == Some(resource))
            .max_by(|a, b| {
                let created = |c: &Class| c.object.metadata.creation_timestamp.clone().map(|t| t.0);
                created(a)
                    .cmp(&created(b))
                    .then_with(|| b.name.cmp(&a.name))
            })
            .cloned()
    }

    /// A ResourceClaim was added or updated (as the watch delivers it).
    pub fn upsert_claim(&self, claim: Arc<api::ResourceClaim>) {
        let key = key_of(&claim.metadata);
        let mut guard = self.inner.write();
        let s = &mut *guard;
        let parsed = Arc::new(parse_claim(&mut s.selectors, &mut s.slots, claim));
        s.change(key.clone(), |s| {
            // A watched version as new as the one the scheduler assumed
            // replaces it (as the assume cache does).
            if s.assumed.get(&key).is_some_and(|a| {
                parsed.uid != a.uid || parsed.resource_version >= a.resource_version
            }) {
                s.assumed.remove(&key);
            }
            s.claims.insert(key.clone(), parsed);
        });
    }

    /// A claim that is not stored (one a dry run imagines), pre-parsed
    /// with the store's selector cache.
    pub fn parse_unstored_claim(&self, claim: Arc<api::ResourceClaim>) -> Arc<Claim> {
        let mut guard = self.inner.write();
        let s = &mut *guard;
        Arc::new(parse_claim(&mut s.selectors, &mut s.slots, claim))
    }

    /// A ResourceClaim went away.
    pub fn remove_claim(&self, namespace: &str, name: &str) {
        let key: ClaimKey = (Arc::from(namespace), Arc::from(name));
        let mut s = self.inner.write();
        s.change(key.clone(), |s| {
            s.claims.remove(&key);
            s.assumed.remove(&key);
        });
    }

    /// The claim as the scheduler knows it: its own newer write if the
    /// watch has not delivered it yet, else the watched one.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<Claim>> {
        let s = self.inner.read();
        let key: ClaimKey = (Arc::from(namespace), Arc::from(name));
        s.effective(&key).cloned()
    }

    /// Every claim (effective versions), unordered.
    pub fn claims(&self) -> Vec<Arc<Claim>> {
        let s = self.inner.read();
        s.claims
            .keys()
            .filter_map(|k| s.effective(k).cloned())
            .collect()
    }

    /// Stores the claim as the API answered a write of it, ahead of the
    /// watch. Refused when the cache already holds a newer version.
    pub fn assume_claim(&self, claim: Arc<api::ResourceClaim>) -> Result<(), String> {
        let key = key_of(&claim.metadata);
        let mut guard = self.inner.write();
        let s = &mut *guard;
        let parsed = Arc::new(parse_claim(&mut s.selectors, &mut s.slots, claim));
        if let Some(cur) = s.effective(&key)
            && cur.uid == parsed.uid
            && cur.resource_version > parsed.resource_version
        {
            return Err(format!(
                "ResourceClaim {:?} is out of sync (stored: {}, assume: {})",
                format!("{}/{}", key.0, key.1),
                cur.resource_version,
                parsed.resource_version
            ));
        }
        if !s.claims.contains_key(&key) {
            return Err(format!(
                "could not find ResourceClaim \"{}/{}\"",
                key.0, key.1
            ));
        }
        s.change(key.clone(), |s| {
            s.assumed.insert(key, parsed);
        });
        Ok(())
    }

    /// Stores a claim the scheduler created and wrote, ahead of the watch
    /// (which may not have delivered it yet): its devices count as
    /// allocated from now on; the watched version replaces it once as new.
    pub fn assume_created_claim(&self, claim: Arc<api::ResourceClaim>) {
        let key = key_of(&claim.metadata);
        let mut guard = self.inner.write();
        let s = &mut *guard;
        let parsed = Arc::new(parse_claim(&mut s.selectors, &mut s.slots, claim));
        if s.claims
            .get(&key)
            .is_some_and(|c| c.uid == parsed.uid && c.resource_version >= parsed.resource_version)
        {
            return;
        }
        s.change(key.clone(), |s| {
            s.assumed.insert(key, parsed);
        });
    }

    /// Drops the scheduler's own version of a claim.
    pub fn restore_claim(&self, namespace: &str, name: &str) {
        let key: ClaimKey = (Arc::from(namespace), Arc::from(name));
        let mut s = self.inner.write();
        s.change(key.clone(), |s| {
            s.assumed.remove(&key);
        });
    }

    /// Whether Reserve allocated the claim and PreBind has not written it.
    pub fn claim_has_pending_allocation(&self, uid: &str) -> bool {
        self.inner.read().in_flight.contains_key(uid)
    }

    /// Records an allocation made in Reserve: its devices count as
    /// allocated from now on.
    pub fn signal_pending_allocation(&self, claim: Arc<api::ResourceClaim>) {
        let mut guard = self.inner.write();
        let s = &mut *guard;
        let parsed = Arc::new(parse_claim(&mut s.selectors, &mut s.slots, claim));
        let uid = parsed.uid.clone();
        let old = s.in_flight.insert(uid, parsed.clone());
        s.account(old.as_ref(), -1);
        s.account(Some(&parsed), 1);
    }

    /// Forgets an in-flight allocation; whether there was one.
    pub fn remove_pending_allocation(&self, uid: &str) -> bool {
        let mut s = self.inner.write();
        match s.in_flight.remove(uid) {
            Some(old) => {
                s.account(Some(&old), -1);
                true
            }
            None => false,
        }
    }

    /// A ResourceSlice was added or updated.
    pub fn upsert_slice(&self, slice: &api::ResourceSlice) {
        let mut guard = self.inner.write();
        let s = &mut *guard;
        let name: Arc<str> = Arc::from(slice.metadata.name.as_deref().unwrap_or(""));
        s.raw_slices.insert(name.clone(), Arc::new(slice.clone()));
        s.parse_slice_named(&name);
        s.index = None;
    }

    /// A ResourceSlice went away.
    pub fn remove_slice(&self, name: &str) {
        let mut s = self.inner.write();
        s.raw_slices.remove(name);
        if s.slices.remove(name).is_some() {
            s.index = None;
        }
    }

    /// The slices, indexed; rebuilt here if a slice changed since the last
    /// call.
    pub fn slice_index(&self) -> Arc<SliceIndex> {
        if let Some(ix) = &self.inner.read().index {
            return ix.clone();
        }
        let mut s = self.inner.write();
        if let Some(ix) = &s.index {
            return ix.clone();
        }
        let ix = Arc::new(SliceIndex::build(&s.slices));
        s.index = Some(ix.clone());
        ix
    }

    /// Which devices are allocated now (a copy, for one cycle).
    pub fn allocated_state(&self) -> AllocatedState {
        let s = self.inner.read();
        AllocatedState {
            counts: s.counts.clone(),
            consumed: s
                .shares
                .iter()
                .map(|(slot, (_, amounts))| (*slot, amounts.clone()))
                .collect(),
        }
    }

    /// How many device slots exist (for sizing per-cycle state).
    pub fn slot_count(&self) -> usize {
        self.inner.read().slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, rv: &str, devices: &[&str]) -> Arc<api::ResourceClaim> {
        let results: Vec<_> = devices
            .iter()
            .map(|d| json!({"request": "r", "driver": "drv", "pool": "p", "device": d}))
            .collect();
        let status = if devices.is_empty() {
            json!({})
        } else {
            json!({"allocation": {"devices": {"results": results}}})
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": rv},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
                "status": status,
            }))
            .unwrap(),
        )
    }

    fn slice() -> api::ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"driver": "drv", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n1", "devices": [{"name": "d0"}, {"name": "d1"}]}
        }))
        .unwrap()
    }

    fn busy(store: &DraStore) -> Vec<&'static str> {
        let st = store.allocated_state();
        let ix = store.slice_index();
        ix.by_node["n1"][0]
            .devices
            .iter()
            .filter(|d| st.in_use(d.slot))
            .map(|d| if &*d.name == "d0" { "d0" } else { "d1" })
            .collect()
    }

    #[test]
    fn allocated_devices_follow_watch_assume_and_in_flight() {
        let store = DraStore::default();
        store.upsert_slice(&slice());
        store.upsert_claim(claim("a", "10", &[]));
        assert!(busy(&store).is_empty());

        // Reserve: in flight.
        store.signal_pending_allocation(claim("a", "10", &["d0"]));
        assert!(store.claim_has_pending_allocation("uid-a"));
        assert_eq!(busy(&store), ["d0"]);

        // PreBind wrote it: assumed, then no longer in flight.
        store.assume_claim(claim("a", "12", &["d0"])).unwrap();
        assert!(store.remove_pending_allocation("uid-a"));
        assert_eq!(busy(&store), ["d0"]);
        assert_eq!(store.claim("ns", "a").unwrap().resource_version, 12);

        // An older watched version does not replace the assumed one...
        store.upsert_claim(claim("a", "11", &[]));
        assert_eq!(busy(&store), ["d0"]);
        // ...the written one does.
        store.upsert_claim(claim("a", "12", &["d0"]));
        assert_eq!(busy(&store), ["d0"]);

        // Deallocation by the controller frees it.
        store.upsert_claim(claim("a", "13", &[]));
        assert!(busy(&store).is_empty());

        // A failed write: restore.
        store.signal_pending_allocation(claim("a", "13", &["d1"]));
        assert_eq!(busy(&store), ["d1"]);
        assert!(store.remove_pending_allocation("uid-a"));
        assert!(!store.remove_pending_allocation("uid-a"));
        assert!(busy(&store).is_empty());

        store.upsert_claim(claim("b", "20", &["d1"]));
        assert_eq!(busy(&store), ["d1"]);
        store.remove_claim("ns", "b");
        assert!(busy(&store).is_empty());
        assert!(
            store.assume_claim(claim("b", "21", &["d1"])).is_err(),
            "a claim the cache does not hold cannot be assumed"
        );
    }

    #[test]
    fn the_index_is_rebuilt_after_slice_changes() {
        let store = DraStore::default();
        store.upsert_slice(&slice());
        let a = store.slice_index();
        assert!(Arc::ptr_eq(&a, &store.slice_index()));
        store.remove_slice("s");
        let b = store.slice_index();
        assert!(b.by_node.is_empty());
        assert_eq!(b.len, 0);
    }
}
