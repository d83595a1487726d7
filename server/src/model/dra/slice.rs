//! ResourceSlices, pre-parsed ([`Slice`], [`parse_slice`]): where their
//! devices may be used, the devices themselves with their quantities
//! parsed, the pool's counter sets; and the stable slot each
//! `driver/pool/device` gets ([`DeviceSlots`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::resource::v1 as api;

use super::device::{
    Attr, AttrValue, Capacity, CounterConsumption, CounterSet, Device, DeviceTaint,
    DeviceTaintEffect, NodeSelection, RequestPolicy, qualify,
};
use super::nano::{CelQuantity, Nano, nano};
use super::semver::Semver;
use crate::model::{InvalidObject, NodeSelector};

/// `(driver, pool)`.
pub type PoolKey = (Arc<str>, Arc<str>);

/// `(driver, pool, device)`.
pub type DeviceKey = (Arc<str>, Arc<str>, Arc<str>);

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
                value: CelQuantity(nano(&c.value, &format!("{cpath}.value"))?),
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
