//! One device of a ResourceSlice, pre-parsed ([`Device`]), and its
//! parts: attributes, capacities (with their request policies), taints,
//! the counters it consumes, and where it may be used when its slice
//! selects nodes per device.

use std::sync::{Arc, OnceLock};

use super::nano::{CelQuantity, Nano};
use super::semver::Semver;
use crate::model::NodeSelector;

/// A name split at its first `/`: `(domain, id)`, the domain defaulting to
/// the driver's name (how upstream qualifies attribute and capacity names).
pub fn qualify(name: &str, driver: &str) -> (Arc<str>, Arc<str>) {
    match name.split_once('/') {
        Some((d, id)) => (Arc::from(d), Arc::from(id)),
        None => (Arc::from(driver), Arc::from(name)),
    }
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
    pub value: CelQuantity,
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
