//! ResourceClaims, pre-parsed ([`Claim`], [`parse_claim`]): their
//! requests (exact or `firstAvailable`, with selectors compiled,
//! tolerations and capacity asks), constraints, and the status berth reads:
//! the allocation, who the claim is reserved for, its controller.

use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;

use super::cel::Selector;
use super::device::DeviceTaint;
use super::nano::{Nano, nano};
use super::selectors::{SelectorCache, selectors};
use super::slice::DeviceSlots;
use crate::model::{InvalidObject, NodeSelector};

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
