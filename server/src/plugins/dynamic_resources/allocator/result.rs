//! Allocation results, as the claim's `status.allocation` records them:
//! one entry per device (`request`, `driver`, `pool`, `device`, admin
//! access, the request's tolerations, share ID and consumed capacity for
//! shared devices, binding conditions), the classes' and the claim's
//! opaque configuration for the requests it applies to, and the node
//! selector: the node itself when any device is local to it (or binds to
//! it), else what the slices' node selectors require, else none.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::claims::ClaimToAllocate;
use super::search::Run;
use crate::model::dra::{Nano, SliceNodes};

/// One allocated device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceResult {
    /// `request` or `request/subrequest`.
    pub request: String,
    /// Driver.
    pub driver: Arc<str>,
    /// Pool.
    pub pool: Arc<str>,
    /// Device.
    pub device: Arc<str>,
    /// Device slot (for bookkeeping).
    pub slot: u32,
    /// Admin access was asked for.
    pub admin_access: bool,
    /// The request's tolerations.
    pub tolerations: Vec<api::DeviceToleration>,
    /// Share ID, for a shared device.
    pub share_id: Option<String>,
    /// Capacity consumed, for a shared device.
    pub consumed: Vec<(Arc<str>, Nano)>,
    /// The device's binding conditions.
    pub binding_conditions: Vec<Arc<str>>,
    /// The device's binding failure conditions.
    pub binding_failure_conditions: Vec<Arc<str>>,
}

/// One claim's allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAllocation {
    /// Devices, in the order they were picked.
    pub devices: Vec<DeviceResult>,
    /// Configuration from classes and the claim.
    pub config: Vec<api::DeviceAllocationConfiguration>,
    /// Where the allocation may be used.
    pub node_selector: Option<core::NodeSelector>,
}

fn quantity(q: Nano) -> K8sQuantity {
    const NANO: Nano = 1_000_000_000;
    if q % NANO == 0 {
        K8sQuantity(format!("{}", q / NANO))
    } else {
        K8sQuantity(format!("{q}n"))
    }
}

impl ClaimAllocation {
    /// The allocation as the API writes it (no timestamp yet).
    pub fn to_api(&self) -> api::AllocationResult {
        api::AllocationResult {
            allocation_timestamp: None,
            devices: Some(api::DeviceAllocationResult {
                config: (!self.config.is_empty()).then(|| self.config.clone()),
                results: Some(
                    self.devices
                        .iter()
                        .map(|d| api::DeviceRequestAllocationResult {
                            request: d.request.clone(),
                            driver: d.driver.to_string(),
                            pool: d.pool.to_string(),
                            device: d.device.to_string(),
                            admin_access: d.admin_access.then_some(true),
                            tolerations: (!d.tolerations.is_empty()).then(|| d.tolerations.clone()),
                            share_id: d.share_id.clone(),
                            skip_node_operations: None,
                            consumed_capacity: (!d.consumed.is_empty()).then(|| {
                                d.consumed
                                    .iter()
                                    .map(|(n, q)| (n.to_string(), quantity(*q)))
                                    .collect::<BTreeMap<_, _>>()
                            }),
                            binding_conditions: (!d.binding_conditions.is_empty()).then(|| {
                                d.binding_conditions.iter().map(|s| s.to_string()).collect()
                            }),
                            binding_failure_conditions: (!d.binding_failure_conditions.is_empty())
                                .then(|| {
                                    d.binding_failure_conditions
                                        .iter()
                                        .map(|s| s.to_string())
                                        .collect()
                                }),
                        })
                        .collect(),
                ),
            }),
            node_selector: self.node_selector.clone(),
        }
    }
}

/// A random UUID (version 4 layout) for a share of a device.
fn new_share_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let a = h.finish();
    h.write_u64(a);
    let b = h.finish();
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// The allocations of a successful search.
pub(super) fn collect(run: &Run<'_>) -> Vec<ClaimAllocation> {
    let mut out = Vec::with_capacity(run.a.claims.len());
    for (c, claim) in run.a.claims.iter().enumerate() {
        let mut devices = Vec::with_capacity(run.s.picks[c].len());
        let mut local = false;
        let mut term = core::NodeSelectorTerm::default();
        for p in &run.s.picks[c] {
            let alt = run.alt(p.claim, p.request, p.alt);
            let slice = &run.pools[p.loc.pool].slices[p.loc.slice];
            let d = &slice.devices[p.loc.dev];
            devices.push(DeviceResult {
                request: alt.full_name(),
                driver: d.driver.clone(),
                pool: d.pool.clone(),
                device: d.name.clone(),
                slot: d.slot,
                admin_access: alt.spec.admin(),
                tolerations: alt.spec.raw_tolerations.clone(),
                share_id: p.shared.then(new_share_id),
                consumed: p.consumed.clone(),
                binding_conditions: d.binding_conditions.clone(),
                binding_failure_conditions: d.binding_failure_conditions.clone(),
            });
            // Where is the device usable?
            let selector = match (&slice.nodes, &d.node_selection) {
                (SliceNodes::PerDevice, Some(sel)) => match sel {
                    crate::model::dra::NodeSelection::Name(_) => {
                        local = true;
                        None
                    }
                    crate::model::dra::NodeSelection::Selector(_) => {
                        d_raw_selector(slice, p.loc.dev)
                    }
                    _ => None,
                },
                (SliceNodes::Name(_), _) => {
                    local = true;
                    None
                }
                (SliceNodes::Selector(_), _) => slice_raw_selector(slice),
                _ => None,
            };
            if d.binds_to_node {
                local = true;
            }
            if let Some(sel) = selector
                && let Some(t) = sel.node_selector_terms.first()
            {
                for f in t.match_fields.iter().flatten() {
                    add_requirement(&mut term.match_fields, f);
                }
                for e in t.match_expressions.iter().flatten() {
                    add_requirement(&mut term.match_expressions, e);
                }
            }
        }
        let node_selector = if local {
            Some(core::NodeSelector {
                node_selector_terms: vec![core::NodeSelectorTerm {
                    match_fields: Some(vec![core::NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![run.node.name.to_string()]),
                    }]),
                    match_expressions: None,
                }],
            })
        } else if term.match_fields.is_some() || term.match_expressions.is_some() {
            Some(core::NodeSelector {
                node_selector_terms: vec![term],
            })
        } else {
            None
        };
        out.push(ClaimAllocation {
            config: config(claim, &run.s.selected[c]),
            devices,
            node_selector,
        });
    }
    out
}

fn slice_raw_selector(slice: &crate::model::dra::Slice) -> Option<core::NodeSelector> {
    slice.raw_node_selector.clone()
}

fn d_raw_selector(slice: &crate::model::dra::Slice, dev: usize) -> Option<core::NodeSelector> {
    slice.raw_device_node_selectors.get(dev).cloned().flatten()
}

fn add_requirement(
    to: &mut Option<Vec<core::NodeSelectorRequirement>>,
    r: &core::NodeSelectorRequirement,
) {
    let list = to.get_or_insert_with(Vec::new);
    let mut want: Vec<&String> = r.values.iter().flatten().collect();
    want.sort();
    let present = list.iter().any(|e| {
        let mut have: Vec<&String> = e.values.iter().flatten().collect();
        have.sort();
        have.dedup();
        let mut w = want.clone();
        w.dedup();
        e.key == r.key && e.operator == r.operator && have == w
    });
    if !present {
        list.push(r.clone());
    }
}

/// The classes' configurations (each class once, for every request using
/// it) then the claim's, for the requests they name.
fn config(claim: &ClaimToAllocate, selected: &[usize]) -> Vec<api::DeviceAllocationConfiguration> {
    let mut out: Vec<api::DeviceAllocationConfiguration> = Vec::new();
    let mut ranges: Vec<(Arc<str>, usize, usize)> = Vec::new();
    for (r, alts) in claim.requests.iter().enumerate() {
        let Some(alt) = alts.get(selected.get(r).copied().unwrap_or(0)) else {
            continue;
        };
        let name = alt.full_name();
        if let Some((_, start, end)) = ranges.iter().find(|(c, _, _)| *c == alt.class.name) {
            for e in &mut out[*start..*end] {
                e.requests.get_or_insert_with(Vec::new).push(name.clone());
            }
            continue;
        }
        let start = out.len();
        for cfg in alt
            .class
            .object
            .spec
            .iter()
            .flat_map(|s| s.config.iter().flatten())
        {
            out.push(api::DeviceAllocationConfiguration {
                source: "FromClass".into(),
                requests: Some(vec![name.clone()]),
                opaque: cfg.opaque.clone(),
            });
        }
        ranges.push((alt.class.name.clone(), start, out.len()));
    }
    let spec_requests: Vec<&api::DeviceRequest> = claim
        .claim
        .object
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .collect();
    for cfg in claim
        .claim
        .object
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.config.as_ref())
        .into_iter()
        .flatten()
    {
        let names = cfg.requests.as_deref().unwrap_or(&[]);
        let entry = || api::DeviceAllocationConfiguration {
            source: "FromClaim".into(),
            requests: cfg.requests.clone(),
            opaque: cfg.opaque.clone(),
        };
        if names.is_empty() {
            out.push(entry());
            continue;
        }
        for (r, req) in spec_requests.iter().enumerate() {
            if names.contains(&req.name) {
                out.push(entry());
                continue;
            }
            let alts = &claim.requests.get(r);
            let Some(alt) = alts.and_then(|a| a.get(selected.get(r).copied().unwrap_or(0))) else {
                continue;
            };
            if alt.parent.is_some() && names.contains(&alt.full_name()) {
                out.push(entry());
            }
        }
    }
    out
}
