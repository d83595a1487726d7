//! Dynamic Resource Allocation (`resource.k8s.io/v1`), pre-parsed.
//!
//! DeviceClasses, ResourceClaims and ResourceSlices are turned once, when
//! stored, into the compact forms the allocator reads: names shared as
//! `Arc<str>`, quantities (capacities, counters, capacity requests) as
//! integers of nano units, versions parsed, node selectors parsed, CEL
//! selectors compiled (one [`Selector`] per distinct expression, shared
//! through [`SelectorCache`]). Each device gets a `slot` (its identity,
//! `driver/pool/device`, as a small integer the allocator indexes by) and a
//! `key` (this version of it, for remembering selector verdicts).
//!
//! Nothing here allocates or parses while scheduling.

pub mod cel;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock, Weak};

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

pub use self::cel::{Selector, SelectorError};
use super::quantity::Quantity;
use super::{InvalidObject, NodeSelector};

/// The finalizer the scheduler puts on claims it allocates.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// The annotation the resourceclaim controller puts on claims it makes
/// from a pod's template: the pod's name for the claim.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// The claim the resourceclaim controller makes for a pod's
/// `resourceClaimTemplateName` entry `pod_claim`: named `name` (from
/// `generateName: <pod>-<podClaim>-`), annotated with the pod claim's name,
/// controlled by the pod, with the template's labels, annotations and spec.
pub fn claim_from_template(
    pod: &k8s_openapi::api::core::v1::Pod,
    pod_claim: &str,
    template: &api::ResourceClaimTemplate,
    name: String,
) -> api::ResourceClaim {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let tspec = template.spec.clone().unwrap_or_default();
    let tmeta = tspec.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(POD_CLAIM_NAME_ANNOTATION.into(), pod_claim.into());
    api::ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name),
            generate_name: Some(format!("{pod_name}-{pod_claim}-")),
            namespace: pod.metadata.namespace.clone(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name,
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: tspec.spec,
        status: Some(api::ResourceClaimStatus::default()),
    }
}
/// Most devices one claim's allocation may hold.
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;
/// Most alternatives a `firstAvailable` request may list (and the base of
/// DynamicResources' score).
pub const FIRST_AVAILABLE_MAX_SIZE: i64 = 8;

/// A quantity in nano units (value × 10⁹), exact for what the API accepts.
pub type Nano = i128;

/// `(driver, pool)`.
pub type PoolKey = (Arc<str>, Arc<str>);

/// `(driver, pool, device)`.
pub type DeviceKey = (Arc<str>, Arc<str>, Arc<str>);

/// A claim's controller: `(apiVersion, kind, name, uid)` of its owner
/// reference with `controller: true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRef {
    /// apiVersion.
    pub api_version: Arc<str>,
    /// kind.
    pub kind: Arc<str>,
    /// name.
    pub name: Arc<str>,
    /// uid.
    pub uid: Arc<str>,
}

fn nano(q: &K8sQuantity, path: &str) -> Result<Nano, InvalidObject> {
    Quantity::parse(&q.0)
        .and_then(|q| q.nano_value())
        .map_err(|e| InvalidObject::new(path, e.to_string()))
}

/// A name split at its first `/`: `(domain, id)`, the domain defaulting to
/// the driver's name (how upstream qualifies attribute and capacity names).
pub fn qualify(name: &str, driver: &str) -> (Arc<str>, Arc<str>) {
    match name.split_once('/') {
        Some((d, id)) => (Arc::from(d), Arc::from(id)),
        None => (Arc::from(driver), Arc::from(name)),
    }
}

/// A semantic version (semver 2.0), as device attributes carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semver {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// Pre-release identifiers (`1.0.0-rc.1` → `["rc", "1"]`).
    pub pre: Vec<Arc<str>>,
    /// The text as published.
    pub text: Arc<str>,
}

impl Semver {
    /// Parses `MAJOR.MINOR.PATCH[-PRE][+BUILD]` strictly (no leading zeros,
    /// no `v` prefix), as upstream's semver library does.
    pub fn parse(s: &str) -> Option<Self> {
        let (core, _build) = match s.split_once('+') {
            Some((c, b)) => {
                if b.is_empty() || !b.split('.').all(ident_ok) {
                    return None;
                }
                (c, Some(b))
            }
            None => (s, None),
        };
        let (core, pre) = match core.split_once('-') {
            Some((c, p)) => {
                if p.is_empty() || !p.split('.').all(ident_ok) {
                    return None;
                }
                let pre: Vec<Arc<str>> = p.split('.').map(Arc::from).collect();
                if pre
                    .iter()
                    .any(|x| numeric(x) && x.len() > 1 && x.starts_with('0'))
                {
                    return None;
                }
                (c, pre)
            }
            None => (core, Vec::new()),
        };
        let mut parts = core.split('.');
        let mut num = || -> Option<u64> {
            let p = parts.next()?;
            if !numeric(p) || (p.len() > 1 && p.starts_with('0')) {
                return None;
            }
            p.parse().ok()
        };
        let (major, minor, patch) = (num()?, num()?, num()?);
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
            pre,
            text: Arc::from(s),
        })
    }

    /// Precedence as semver 2.0 orders versions (build metadata ignored).
    pub fn cmp_precedence(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let o = match (numeric(a), numeric(b)) {
                            (true, true) => a
                                .parse::<u64>()
                                .unwrap_or(0)
                                .cmp(&b.parse::<u64>().unwrap_or(0)),
                            (true, false) => Ordering::Less,
                            (false, true) => Ordering::Greater,
                            (false, false) => a.cmp(b),
                        };
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

fn numeric(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn ident_ok(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A device attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(Arc<str>),
    /// `version`.
    Version(Semver),
    /// A list (`ints`, `strings`, ...): only with DRAListTypeAttributes,
    /// alpha and off in v1.36; such an attribute matches no constraint and
    /// is not visible to CEL.
    Unsupported,
}

/// A device attribute, qualified.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    /// The domain (the driver's name when the attribute has none).
    pub domain: Arc<str>,
    /// The identifier inside the domain.
    pub id: Arc<str>,
    /// The name as published (`model` or `gpu.example.com/model`).
    pub name: Arc<str>,
    /// The value.
    pub value: AttrValue,
}

/// How a shared device's capacity may be requested.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestPolicy {
    /// What a request that names no amount consumes.
    pub default: Option<Nano>,
    /// The only amounts allowed (ascending).
    pub valid_values: Vec<Nano>,
    /// `(min, max, step)` of the allowed amounts.
    pub valid_range: Option<(Nano, Option<Nano>, Option<Nano>)>,
}

/// A device capacity, qualified.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// The domain (the driver's name when the capacity has none).
    pub domain: Arc<str>,
    /// The identifier inside the domain.
    pub id: Arc<str>,
    /// The name as published: what requests and results use.
    pub name: Arc<str>,
    /// The amount.
    pub value: cel::CelQuantity,
    /// The request policy (consumable capacity).
    pub policy: Option<RequestPolicy>,
}

/// A device taint's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTaintEffect {
    /// Keeps new allocations off the device.
    NoSchedule,
    /// NoSchedule, and evicts pods using it.
    NoExecute,
    /// Informational.
    None,
    /// An effect this version does not know (ignored, as upstream).
    Other,
}

/// A device taint.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTaint {
    /// Key.
    pub key: Arc<str>,
    /// Value.
    pub value: Arc<str>,
    /// Effect.
    pub effect: DeviceTaintEffect,
    /// The effect as published.
    pub effect_name: Arc<str>,
}

/// A request's toleration of device taints.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceToleration {
    /// Key (empty: any).
    pub key: Arc<str>,
    /// `Exists` (else `Equal`; an unknown operator tolerates nothing).
    pub operator: Arc<str>,
    /// Value for `Equal`.
    pub value: Arc<str>,
    /// Effect (empty: any).
    pub effect: Arc<str>,
}

impl DeviceToleration {
    /// Whether this toleration tolerates `taint`, as upstream decides.
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        if !self.effect.is_empty() && *self.effect != *taint.effect_name {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match &*self.operator {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// Counters a device consumes from one of its pool's counter sets.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterConsumption {
    /// The counter set.
    pub counter_set: Arc<str>,
    /// Counter name and amount.
    pub counters: Vec<(Arc<str>, Nano)>,
}

/// A counter set published by a pool (partitionable devices).
#[derive(Debug, Clone, PartialEq)]
pub struct CounterSet {
    /// Its name, unique in the pool.
    pub name: Arc<str>,
    /// Counter name and available amount.
    pub counters: Vec<(Arc<str>, Nano)>,
}

/// Where a device may be used, when its slice selects nodes per device.
#[derive(Debug, Clone)]
pub enum NodeSelection {
    /// One node.
    Name(Arc<str>),
    /// Every node.
    All,
    /// Nodes matching a selector.
    Selector(NodeSelector),
    /// Nothing known was set (a future field): matches no node.
    Unknown,
}

impl NodeSelection {
    /// Whether a node (by labels and name) is selected.
    pub fn matches(&self, labels: &crate::model::Labels, name: &str) -> bool {
        match self {
            Self::Name(n) => &**n == name,
            Self::All => true,
            Self::Selector(s) => s.matches(labels, name),
            Self::Unknown => false,
        }
    }
}

/// One device of a ResourceSlice.
#[derive(Debug)]
pub struct Device {
    /// Its name, unique in the pool.
    pub name: Arc<str>,
    /// The publishing driver.
    pub driver: Arc<str>,
    /// The pool.
    pub pool: Arc<str>,
    /// `driver/pool/device` as an index into allocation state.
    pub slot: u32,
    /// This version of the device (new for every stored slice).
    pub key: u64,
    /// Attributes.
    pub attributes: Vec<Attr>,
    /// Capacities.
    pub capacity: Vec<Capacity>,
    /// Taints (DRADeviceTaints).
    pub taints: Vec<DeviceTaint>,
    /// Counters consumed (DRAPartitionableDevices).
    pub consumes_counters: Vec<CounterConsumption>,
    /// `allowMultipleAllocations` (DRAConsumableCapacity).
    pub allow_multiple_allocations: bool,
    /// `bindingConditions` (DRADeviceBindingConditions).
    pub binding_conditions: Vec<Arc<str>>,
    /// `bindingFailureConditions`.
    pub binding_failure_conditions: Vec<Arc<str>>,
    /// `bindsToNode`.
    pub binds_to_node: bool,
    /// Per-device node selection, when the slice uses it.
    pub node_selection: Option<NodeSelection>,
    /// The CEL `device` value, built on first use.
    pub(crate) cel_value: OnceLock<::cel::Value>,
}

impl Device {
    /// The attribute named `name` (fully qualified `domain/id`), looked up
    /// as upstream's matchAttribute does: the exact name first, then, if the
    /// domain is the driver's, the bare identifier.
    pub fn lookup_attribute(&self, name: &str) -> Option<&AttrValue> {
        if let Some(a) = self.attributes.iter().find(|a| &*a.name == name) {
            return Some(&a.value);
        }
        let (domain, id) = name.split_once('/')?;
        if domain != &*self.driver {
            return None;
        }
        self.attributes
            .iter()
            .find(|a| &*a.name == id)
            .map(|a| &a.value)
    }

    /// `driver/pool/device`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.name)
    }
}

/// Where a slice's devices may be used.
#[derive(Debug, Clone)]
pub enum SliceNodes {
    /// One node (`spec.nodeName`).
    Name(Arc<str>),
    /// Every node (`spec.allNodes`).
    All,
    /// Nodes matching `spec.nodeSelector`.
    Selector(NodeSelector),
    /// Each device says (`spec.perDeviceNodeSelection`).
    PerDevice,
    /// Nothing set: only counter sets, or a future field.
    Unset,
}

/// A ResourceSlice, pre-parsed.
#[derive(Debug)]
pub struct Slice {
    /// metadata.name.
    pub name: Arc<str>,
    /// spec.driver.
    pub driver: Arc<str>,
    /// spec.pool.name.
    pub pool: Arc<str>,
    /// spec.pool.generation.
    pub generation: i64,
    /// spec.pool.resourceSliceCount.
    pub slice_count: i64,
    /// Where the devices may be used.
    pub nodes: SliceNodes,
    /// Devices, in published order.
    pub devices: Vec<Device>,
    /// Counter sets.
    pub shared_counters: Vec<CounterSet>,
    /// `spec.nodeSelector` as published (for allocation results).
    pub raw_node_selector: Option<k8s_openapi::api::core::v1::NodeSelector>,
    /// Each device's `nodeSelector` as published, with per-device node
    /// selection.
    pub raw_device_node_selectors: Vec<Option<k8s_openapi::api::core::v1::NodeSelector>>,
}

impl Slice {
    /// The node name, when the slice is for one node.
    pub fn node_name(&self) -> Option<&str> {
        match &self.nodes {
            SliceNodes::Name(n) => Some(n),
            _ => None,
        }
    }
}

/// A request's device count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationMode {
    /// Exactly this many.
    ExactCount(i64),
    /// Every matching device.
    All,
    /// A mode this version does not know.
    Unknown,
}

/// One way of satisfying a request: an `exactly` request, or one of the
/// alternatives of a `firstAvailable` request.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// The request's (or sub-request's) name.
    pub name: Arc<str>,
    /// The device class.
    pub class: Arc<str>,
    /// Count.
    pub mode: AllocationMode,
    /// The mode as written (for messages).
    pub mode_name: Arc<str>,
    /// The request's own selectors.
    pub selectors: Vec<Arc<Selector>>,
    /// Tolerations of device taints.
    pub tolerations: Vec<DeviceToleration>,
    /// Capacity requested from shared devices, by capacity name.
    pub capacity: Vec<(Arc<str>, Nano)>,
    /// adminAccess (`None` when unset).
    pub admin_access: Option<bool>,
    /// The tolerations as published, for allocation results.
    pub raw_tolerations: Vec<api::DeviceToleration>,
}

impl RequestSpec {
    /// Whether admin access was asked for.
    pub fn admin(&self) -> bool {
        self.admin_access == Some(true)
    }
}

/// A claim's request.
#[derive(Debug, Clone)]
pub enum Request {
    /// `exactly`.
    Exact(RequestSpec),
    /// `firstAvailable`, in order of preference.
    FirstAvailable {
        /// The request's name.
        name: Arc<str>,
        /// The alternatives.
        subrequests: Vec<RequestSpec>,
    },
    /// Neither (a future request type).
    Unknown {
        /// The request's name.
        name: Arc<str>,
    },
}

impl Request {
    /// The request's name.
    pub fn name(&self) -> &Arc<str> {
        match self {
            Self::Exact(s) => &s.name,
            Self::FirstAvailable { name, .. } | Self::Unknown { name } => name,
        }
    }
}

/// A claim constraint.
#[derive(Debug, Clone)]
pub enum Constraint {
    /// All devices share the attribute's value.
    MatchAttribute {
        /// Requests it applies to (empty: all).
        requests: Vec<Arc<str>>,
        /// Fully qualified attribute name.
        attribute: Arc<str>,
    },
    /// All devices have distinct values.
    DistinctAttribute {
        /// Requests it applies to (empty: all).
        requests: Vec<Arc<str>>,
        /// Fully qualified attribute name.
        attribute: Arc<str>,
    },
    /// Neither (a future constraint type).
    Unknown,
}

/// One allocated device, as a claim's status records it.
#[derive(Debug, Clone)]
pub struct AllocatedDevice {
    /// The request (`req` or `req/sub`).
    pub request: Arc<str>,
    /// `driver/pool/device`.
    pub slot: u32,
    /// Driver.
    pub driver: Arc<str>,
    /// Pool.
    pub pool: Arc<str>,
    /// Device.
    pub device: Arc<str>,
    /// Allocated for admin access: does not make the device busy.
    pub admin_access: bool,
    /// Share ID: one of several allocations of a shared device.
    pub share_id: Option<Arc<str>>,
    /// Capacity consumed from a shared device.
    pub consumed: Vec<(Arc<str>, Nano)>,
    /// Binding conditions copied from the device.
    pub binding_conditions: Vec<Arc<str>>,
    /// Binding failure conditions copied from the device.
    pub binding_failure_conditions: Vec<Arc<str>>,
}

/// A consumer a claim is reserved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// `pods`, usually.
    pub resource: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// UID.
    pub uid: Arc<str>,
}

/// A ResourceClaim, pre-parsed.
#[derive(Debug)]
pub struct Claim {
    /// The object, for writes and the API.
    pub object: Arc<api::ResourceClaim>,
    /// metadata.namespace.
    pub namespace: Arc<str>,
    /// metadata.name.
    pub name: Arc<str>,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.resourceVersion as a number (0 when absent or not one).
    pub resource_version: u64,
    /// Requests.
    pub requests: Vec<Request>,
    /// Constraints.
    pub constraints: Vec<Constraint>,
    /// The allocation, if allocated.
    pub allocation: Option<Vec<AllocatedDevice>>,
    /// The allocation's node selector.
    pub allocation_nodes: Option<NodeSelector>,
    /// Who the claim is reserved for.
    pub reserved_for: Vec<Consumer>,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// The controller owner reference: `(apiVersion, kind, name, uid)`.
    pub controller: Option<ControllerRef>,
    /// Why the spec cannot be used, if it cannot.
    pub invalid: Option<String>,
}

impl Claim {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether the claim is reserved for the pod with `uid`.
    pub fn reserved_for_pod(&self, uid: &str) -> bool {
        self.reserved_for.iter().any(|c| &*c.uid == uid)
    }

    /// Whether the claim has an allocation.
    pub fn allocated(&self) -> bool {
        self.allocation.is_some()
    }
}

/// A DeviceClass, pre-parsed.
#[derive(Debug)]
pub struct Class {
    /// The object.
    pub object: Arc<api::DeviceClass>,
    /// metadata.name.
    pub name: Arc<str>,
    /// Selectors every device of the class satisfies.
    pub selectors: Vec<Arc<Selector>>,
    /// `extendedResourceName` (DRAExtendedResource): pods asking for this
    /// extended resource get devices of this class.
    pub extended_resource_name: Option<Arc<str>>,
}

/// Compiled selectors by expression, shared by every object spelling them
/// the same way, so that a thousand claims from one template compile their
/// selector once (and share its remembered verdicts).
#[derive(Debug, Default)]
pub struct SelectorCache {
    by_expression: HashMap<Arc<str>, Weak<Selector>>,
}

impl SelectorCache {
    /// The compiled form of `expression`.
    pub fn get(&mut self, expression: &str) -> Arc<Selector> {
        if let Some(s) = self.by_expression.get(expression).and_then(Weak::upgrade) {
            return s;
        }
        if self.by_expression.len() > 64 && self.by_expression.len().is_power_of_two() {
            self.by_expression.retain(|_, w| w.strong_count() > 0);
        }
        let s = Arc::new(Selector::compile(expression));
        self.by_expression
            .insert(Arc::from(expression), Arc::downgrade(&s));
        s
    }
}

/// Assigns each `driver/pool/device` a stable slot.
#[derive(Debug, Default)]
pub struct DeviceSlots {
    slots: HashMap<DeviceKey, u32>,
}

impl DeviceSlots {
    /// The slot of a device, assigned on first sight.
    pub fn slot(&mut self, driver: &str, pool: &str, device: &str) -> u32 {
        // The key is built only when the device is new.
        if let Some(&s) = self
            .slots
            .get(&(Arc::from(driver), Arc::from(pool), Arc::from(device)))
        {
            return s;
        }
        let s = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots
            .insert((Arc::from(driver), Arc::from(pool), Arc::from(device)), s);
        s
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no slot was assigned.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

static NEXT_DEVICE_KEY: AtomicU64 = AtomicU64::new(1);

fn selectors(
    cache: &mut SelectorCache,
    sels: Option<&Vec<api::DeviceSelector>>,
    path: &str,
) -> Result<Vec<Arc<Selector>>, InvalidObject> {
    sels.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| match &s.cel {
            Some(c) => Ok(cache.get(&c.expression)),
            None => Err(InvalidObject::new(
                format!("{path}[{i}].cel"),
                "CEL expression empty (unsupported selector type?)",
            )),
        })
        .collect()
}

fn tolerations(ts: Option<&Vec<api::DeviceToleration>>) -> Vec<DeviceToleration> {
    ts.into_iter()
        .flatten()
        .map(|t| DeviceToleration {
            key: Arc::from(t.key.as_deref().unwrap_or("")),
            operator: Arc::from(t.operator.as_deref().unwrap_or("Equal")),
            value: Arc::from(t.value.as_deref().unwrap_or("")),
            effect: Arc::from(t.effect.as_deref().unwrap_or("")),
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn request_spec(
    cache: &mut SelectorCache,
    name: &str,
    class: &str,
    mode: Option<&str>,
    count: Option<i64>,
    sels: Option<&Vec<api::DeviceSelector>>,
    tols: Option<&Vec<api::DeviceToleration>>,
    capacity: Option<&api::CapacityRequirements>,
    admin_access: Option<bool>,
    path: &str,
) -> Result<RequestSpec, InvalidObject> {
    let mode_name = mode.unwrap_or("ExactCount");
    let mode = match mode_name {
        "ExactCount" => AllocationMode::ExactCount(count.unwrap_or(1)),
        "All" => AllocationMode::All,
        _ => AllocationMode::Unknown,
    };
    let mut cap = Vec::new();
    for (k, q) in capacity
        .and_then(|c| c.requests.as_ref())
        .into_iter()
        .flatten()
    {
        cap.push((
            Arc::from(k.as_str()),
            nano(q, &format!("{path}.capacity.requests[{k}]"))?,
        ));
    }
    Ok(RequestSpec {
        name: Arc::from(name),
        class: Arc::from(class),
        mode,
        mode_name: Arc::from(mode_name),
        selectors: selectors(cache, sels, &format!("{path}.selectors"))?,
        tolerations: tolerations(tols),
        capacity: cap,
        admin_access,
        raw_tolerations: tols.cloned().unwrap_or_default(),
    })
}

/// Parses a claim's spec into requests and constraints.
pub fn parse_claim_spec(
    cache: &mut SelectorCache,
    spec: Option<&api::ResourceClaimSpec>,
) -> Result<(Vec<Request>, Vec<Constraint>), InvalidObject> {
    let devices = spec.and_then(|s| s.devices.as_ref());
    let mut requests = Vec::new();
    for (i, r) in devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.devices.requests[{i}]");
        requests.push(match (&r.exactly, &r.first_available) {
            (Some(e), _) => Request::Exact(request_spec(
                cache,
                &r.name,
                &e.device_class_name,
                e.allocation_mode.as_deref(),
                e.count,
                e.selectors.as_ref(),
                e.tolerations.as_ref(),
                e.capacity.as_ref(),
                e.admin_access,
                &format!("{path}.exactly"),
            )?),
            (None, Some(subs)) if !subs.is_empty() => Request::FirstAvailable {
                name: Arc::from(r.name.as_str()),
                subrequests: subs
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        request_spec(
                            cache,
                            &s.name,
                            &s.device_class_name,
                            s.allocation_mode.as_deref(),
                            s.count,
                            s.selectors.as_ref(),
                            s.tolerations.as_ref(),
                            s.capacity.as_ref(),
                            None,
                            &format!("{path}.firstAvailable[{j}]"),
                        )
                    })
                    .collect::<Result<_, _>>()?,
            },
            _ => Request::Unknown {
                name: Arc::from(r.name.as_str()),
            },
        });
    }
    let constraints = devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            let requests = c
                .requests
                .iter()
                .flatten()
                .map(|r| Arc::from(r.as_str()))
                .collect();
            match (&c.match_attribute, &c.distinct_attribute) {
                (Some(a), _) => Constraint::MatchAttribute {
                    requests,
                    attribute: Arc::from(a.as_str()),
                },
                (None, Some(a)) => Constraint::DistinctAttribute {
                    requests,
                    attribute: Arc::from(a.as_str()),
                },
                _ => Constraint::Unknown,
            }
        })
        .collect();
    Ok((requests, constraints))
}

/// Parses a ResourceClaim. A claim whose spec cannot be used is kept (so
/// that pods referencing it are told why), with `invalid` set.
pub fn parse_claim(
    cache: &mut SelectorCache,
    slots: &mut DeviceSlots,
    claim: Arc<api::ResourceClaim>,
) -> Claim {
    let meta = &claim.metadata;
    let (requests, constraints, invalid) = match parse_claim_spec(cache, claim.spec.as_ref()) {
        Ok((r, c)) => (r, c, None),
        Err(e) => (Vec::new(), Vec::new(), Some(e.to_string())),
    };
    let status = claim.status.as_ref();
    let alloc = status.and_then(|s| s.allocation.as_ref());
    let allocation = alloc.map(|a| {
        a.devices
            .as_ref()
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .map(|r| AllocatedDevice {
                request: Arc::from(r.request.as_str()),
                slot: slots.slot(&r.driver, &r.pool, &r.device),
                driver: Arc::from(r.driver.as_str()),
                pool: Arc::from(r.pool.as_str()),
                device: Arc::from(r.device.as_str()),
                admin_access: r.admin_access == Some(true),
                share_id: r.share_id.as_deref().map(Arc::from),
                consumed: r
                    .consumed_capacity
                    .iter()
                    .flatten()
                    .filter_map(|(k, q)| Some((Arc::from(k.as_str()), nano(q, "").ok()?)))
                    .collect(),
                binding_conditions: r
                    .binding_conditions
                    .iter()
                    .flatten()
                    .map(|s| Arc::from(s.as_str()))
                    .collect(),
                binding_failure_conditions: r
                    .binding_failure_conditions
                    .iter()
                    .flatten()
                    .map(|s| Arc::from(s.as_str()))
                    .collect(),
            })
            .collect()
    });
    let allocation_nodes = alloc
        .and_then(|a| a.node_selector.as_ref())
        .and_then(|s| NodeSelector::parse(s, "status.allocation.nodeSelector").ok());
    let reserved_for = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .map(|r| Consumer {
            resource: Arc::from(r.resource.as_str()),
            name: Arc::from(r.name.as_str()),
            uid: Arc::from(r.uid.as_str()),
        })
        .collect();
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| ControllerRef {
            api_version: Arc::from(o.api_version.as_str()),
            kind: Arc::from(o.kind.as_str()),
            name: Arc::from(o.name.as_str()),
            uid: Arc::from(o.uid.as_str()),
        });
    Claim {
        namespace: Arc::from(meta.namespace.as_deref().unwrap_or("default")),
        name: Arc::from(meta.name.as_deref().unwrap_or("")),
        uid: Arc::from(meta.uid.as_deref().unwrap_or("")),
        resource_version: meta
            .resource_version
            .as_deref()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        requests,
        constraints,
        allocation,
        allocation_nodes,
        reserved_for,
        deleting: meta.deletion_timestamp.is_some(),
        controller,
        invalid,
        object: claim,
    }
}

/// Parses a DeviceClass.
pub fn parse_class(
    cache: &mut SelectorCache,
    class: Arc<api::DeviceClass>,
) -> Result<Class, InvalidObject> {
    let spec = class.spec.as_ref();
    Ok(Class {
        name: Arc::from(class.metadata.name.as_deref().unwrap_or("")),
        selectors: selectors(
            cache,
            spec.and_then(|s| s.selectors.as_ref()),
            "spec.selectors",
        )?,
        extended_resource_name: spec
            .and_then(|s| s.extended_resource_name.as_deref())
            .map(Arc::from),
        object: class,
    })
}

fn node_selector(
    s: Option<&k8s_openapi::api::core::v1::NodeSelector>,
    path: &str,
) -> Result<Option<NodeSelector>, InvalidObject> {
    s.map(|s| NodeSelector::parse(s, path)).transpose()
}

fn attr_value(a: &api::DeviceAttribute) -> AttrValue {
    if let Some(i) = a.int {
        AttrValue::Int(i)
    } else if let Some(b) = a.bool {
        AttrValue::Bool(b)
    } else if let Some(s) = &a.string {
        AttrValue::String(Arc::from(s.as_str()))
    } else if let Some(v) = &a.version {
        Semver::parse(v).map_or(AttrValue::Unsupported, AttrValue::Version)
    } else {
        AttrValue::Unsupported
    }
}

fn policy(p: &api::CapacityRequestPolicy, path: &str) -> Result<RequestPolicy, InvalidObject> {
    Ok(RequestPolicy {
        default: p
            .default
            .as_ref()
            .map(|q| nano(q, &format!("{path}.default")))
            .transpose()?,
        valid_values: p
            .valid_values
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, q)| nano(q, &format!("{path}.validValues[{i}]")))
            .collect::<Result<_, _>>()?,
        valid_range: p
            .valid_range
            .as_ref()
            .map(|r| -> Result<_, InvalidObject> {
                Ok((
                    nano(&r.min, &format!("{path}.validRange.min"))?,
                    r.max
                        .as_ref()
                        .map(|q| nano(q, &format!("{path}.validRange.max")))
                        .transpose()?,
                    r.step
                        .as_ref()
                        .map(|q| nano(q, &format!("{path}.validRange.step")))
                        .transpose()?,
                ))
            })
            .transpose()?,
    })
}

fn counters(
    m: &std::collections::BTreeMap<String, api::Counter>,
    path: &str,
) -> Result<Vec<(Arc<str>, Nano)>, InvalidObject> {
    m.iter()
        .map(|(k, c)| {
            Ok((
                Arc::from(k.as_str()),
                nano(&c.value, &format!("{path}[{k}].value"))?,
            ))
        })
        .collect()
}

/// Parses a ResourceSlice; devices get slots from `slots`.
pub fn parse_slice(
    slots: &mut DeviceSlots,
    slice: &api::ResourceSlice,
) -> Result<Slice, InvalidObject> {
    let spec = &slice.spec;
    let driver: Arc<str> = Arc::from(spec.driver.as_str());
    let pool: Arc<str> = Arc::from(spec.pool.name.as_str());
    let nodes = if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        SliceNodes::Name(Arc::from(n))
    } else if spec.all_nodes == Some(true) {
        SliceNodes::All
    } else if let Some(s) = node_selector(spec.node_selector.as_ref(), "spec.nodeSelector")? {
        SliceNodes::Selector(s)
    } else if spec.per_device_node_selection == Some(true) {
        SliceNodes::PerDevice
    } else {
        SliceNodes::Unset
    };
    let per_device = spec.per_device_node_selection == Some(true);
    let mut devices = Vec::new();
    for (i, d) in spec.devices.iter().flatten().enumerate() {
        let path = format!("spec.devices[{i}]");
        let mut attributes: Vec<Attr> = d
            .attributes
            .iter()
            .flatten()
            .map(|(k, v)| {
                let (domain, id) = qualify(k, &driver);
                Attr {
                    domain,
                    id,
                    name: Arc::from(k.as_str()),
                    value: attr_value(v),
                }
            })
            .collect();
        attributes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut capacity = Vec::new();
        for (k, c) in d.capacity.iter().flatten() {
            let (domain, id) = qualify(k, &driver);
            let cpath = format!("{path}.capacity[{k}]");
            capacity.push(Capacity {
                domain,
                id,
                name: Arc::from(k.as_str()),
                value: cel::CelQuantity(nano(&c.value, &format!("{cpath}.value"))?),
                policy: c
                    .request_policy
                    .as_ref()
                    .map(|p| policy(p, &format!("{cpath}.requestPolicy")))
                    .transpose()?,
            });
        }
        let node_selection = per_device.then(|| {
            if let Some(n) = d.node_name.as_deref().filter(|n| !n.is_empty()) {
                NodeSelection::Name(Arc::from(n))
            } else if d.all_nodes == Some(true) {
                NodeSelection::All
            } else if let Some(s) = d
                .node_selector
                .as_ref()
                .and_then(|s| NodeSelector::parse(s, &format!("{path}.nodeSelector")).ok())
            {
                NodeSelection::Selector(s)
            } else {
                NodeSelection::Unknown
            }
        });
        devices.push(Device {
            name: Arc::from(d.name.as_str()),
            driver: driver.clone(),
            pool: pool.clone(),
            slot: slots.slot(&driver, &pool, &d.name),
            key: NEXT_DEVICE_KEY.fetch_add(1, AtomicOrdering::Relaxed),
            attributes,
            capacity,
            taints: d
                .taints
                .iter()
                .flatten()
                .map(|t| DeviceTaint {
                    key: Arc::from(t.key.as_str()),
                    value: Arc::from(t.value.as_deref().unwrap_or("")),
                    effect: match t.effect.as_str() {
                        "NoSchedule" => DeviceTaintEffect::NoSchedule,
                        "NoExecute" => DeviceTaintEffect::NoExecute,
                        "None" => DeviceTaintEffect::None,
                        _ => DeviceTaintEffect::Other,
                    },
                    effect_name: Arc::from(t.effect.as_str()),
                })
                .collect(),
            consumes_counters: d
                .consumes_counters
                .iter()
                .flatten()
                .enumerate()
                .map(|(j, c)| {
                    Ok(CounterConsumption {
                        counter_set: Arc::from(c.counter_set.as_str()),
                        counters: counters(
                            &c.counters,
                            &format!("{path}.consumesCounters[{j}].counters"),
                        )?,
                    })
                })
                .collect::<Result<_, InvalidObject>>()?,
            allow_multiple_allocations: d.allow_multiple_allocations == Some(true),
            binding_conditions: d
                .binding_conditions
                .iter()
                .flatten()
                .map(|s| Arc::from(s.as_str()))
                .collect(),
            binding_failure_conditions: d
                .binding_failure_conditions
                .iter()
                .flatten()
                .map(|s| Arc::from(s.as_str()))
                .collect(),
            binds_to_node: d.binds_to_node == Some(true),
            node_selection,
            cel_value: OnceLock::new(),
        });
    }
    let shared_counters = spec
        .shared_counters
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| {
            Ok(CounterSet {
                name: Arc::from(c.name.as_str()),
                counters: counters(&c.counters, &format!("spec.sharedCounters[{i}].counters"))?,
            })
        })
        .collect::<Result<_, InvalidObject>>()?;
    Ok(Slice {
        name: Arc::from(slice.metadata.name.as_deref().unwrap_or("")),
        driver,
        pool,
        generation: spec.pool.generation,
        slice_count: spec.pool.resource_slice_count,
        raw_node_selector: match nodes {
            SliceNodes::Selector(_) => spec.node_selector.clone(),
            _ => None,
        },
        raw_device_node_selectors: if per_device {
            spec.devices
                .iter()
                .flatten()
                .map(|d| d.node_selector.clone())
                .collect()
        } else {
            Vec::new()
        },
        nodes,
        devices,
        shared_counters,
    })
}

#[cfg(test)]
mod tests;
