//! Why a node cannot take a pod's claims, request by request, for dry
//! runs (the scheduler itself, like upstream's, only says "cannot allocate
//! all claims").
//!
//! For each request (each alternative of a `firstAvailable` one), the
//! node's devices are counted through the same checks the search applies,
//! in order: in a usable pool, of the request's class, matching the
//! request's selectors, usable from this node, not allocated, with no
//! untolerated taint, with room for the capacity asked. The first check
//! that leaves fewer devices than the request needs is the reason. When
//! every request could be satisfied on its own, what is left is the
//! combination: constraints, devices wanted by two requests, counters.

use super::claims::{Allocator, Alternative};
use super::search::taint_prevents;
use crate::cache::dra::pools_for;
use crate::model::NodeSpec;
use crate::model::dra::{AllocationMode, Constraint, Device};

/// One reason: about a request of a claim, or (both empty) about the
/// node's devices as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Why {
    /// `namespace/name` of the claim, or empty.
    pub claim: String,
    /// The request (`request/subrequest`), or empty.
    pub request: String,
    /// The reason.
    pub reason: String,
}

impl Why {
    fn node(reason: String) -> Self {
        Self {
            claim: String::new(),
            request: String::new(),
            reason,
        }
    }
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.claim.is_empty(), self.request.is_empty()) {
            (true, _) => f.write_str(&self.reason),
            (false, true) => write!(f, "claim {}: {}", self.claim, self.reason),
            (false, false) => write!(
                f,
                "claim {}, request {}: {}",
                self.claim, self.request, self.reason
            ),
        }
    }
}

/// One entry per reason; empty when nothing on its own explains the
/// failure.
pub fn explain_node(a: &Allocator, node: &NodeSpec) -> Vec<Why> {
    let pools = pools_for(a.index(), node);
    let mut out = Vec::new();
    if pools.is_empty() {
        out.push(Why::node(
            "no ResourceSlice publishes devices for this node".into(),
        ));
        return out;
    }
    for p in pools.iter() {
        if p.incomplete {
            out.push(Why::node(format!(
                "resource pool {} is incomplete (its driver is publishing a new generation)",
                p.id()
            )));
        } else if let Some(r) = &p.invalid {
            out.push(Why::node(format!(
                "resource pool {} is invalid: {r}",
                p.id()
            )));
        }
    }
    let mut all_single_ok = true;
    for c in a.claims() {
        let key = c.claim.key();
        for alts in &c.requests {
            let mut reasons = Vec::new();
            let mut ok = false;
            for alt in alts {
                match count(a, node, &pools, alt) {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(reason) => reasons.push(Why {
                        claim: key.clone(),
                        request: alt.full_name(),
                        reason,
                    }),
                }
            }
            if !ok {
                all_single_ok = false;
                out.extend(reasons);
            }
        }
    }
    if all_single_ok {
        for c in a.claims() {
            let key = c.claim.key();
            for cons in &c.claim.constraints {
                let reason = match cons {
                    Constraint::MatchAttribute { attribute, .. } => format!(
                        "no devices left that satisfy every request with the same {attribute}"
                    ),
                    Constraint::DistinctAttribute { attribute, .. } => format!(
                        "no devices left that satisfy every request with distinct {attribute}"
                    ),
                    Constraint::Unknown => continue,
                };
                out.push(Why {
                    claim: key.clone(),
                    request: String::new(),
                    reason,
                });
            }
        }
        out.push(Why::node(
            "the requests cannot be satisfied together (they compete for the same devices, or their counters run out)"
                .into(),
        ));
    }
    out
}

fn count(
    a: &Allocator,
    node: &NodeSpec,
    pools: &[crate::cache::dra::Pool],
    alt: &Alternative,
) -> Result<(), String> {
    let need = match alt.spec.mode {
        AllocationMode::ExactCount(n) => n.max(0) as usize,
        _ => 1,
    };
    let want = match alt.spec.mode {
        AllocationMode::ExactCount(n) => format!("{n} device(s)"),
        _ => "all devices (at least one)".into(),
    };
    let devices: Vec<&Device> = pools
        .iter()
        .filter(|p| !p.incomplete && p.invalid.is_none())
        .flat_map(|p| p.slices.iter())
        .flat_map(|s| s.devices.iter())
        .collect();
    let mut steps: Vec<(String, usize)> = Vec::new();
    let mut left: Vec<&Device> = devices;
    steps.push(("in the node's resource pools".into(), left.len()));
    let mut errors = Vec::new();
    let mut filter =
        |what: String, f: &dyn Fn(&Device) -> Result<bool, String>, left: &mut Vec<&Device>| {
            left.retain(|d| match f(d) {
                Ok(b) => b,
                Err(e) => {
                    errors.push(e);
                    false
                }
            });
            steps.push((what, left.len()));
        };
    filter(
        format!("of class {}", alt.class.name),
        &|d| {
            for s in &alt.class.selectors {
                if !s.matches(d).map_err(|e| e.to_string())? {
                    return Ok(false);
                }
            }
            Ok(true)
        },
        &mut left,
    );
    if !alt.spec.selectors.is_empty() {
        filter(
            "matching the request's selectors".into(),
            &|d| {
                for s in &alt.spec.selectors {
                    if !s.matches(d).map_err(|e| e.to_string())? {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
            &mut left,
        );
    }
    if left.iter().any(|d| d.node_selection.is_some()) {
        filter(
            "usable from this node".into(),
            &|d| {
                Ok(d.node_selection
                    .as_ref()
                    .is_none_or(|s| s.matches(&node.labels, &node.name)))
            },
            &mut left,
        );
    }
    if !alt.spec.admin() {
        filter(
            "not allocated".into(),
            &|d| Ok(d.allow_multiple_allocations || !a.allocated().in_use(d.slot)),
            &mut left,
        );
    }
    if left.iter().any(|d| !d.taints.is_empty()) {
        filter(
            "without a taint the request does not tolerate".into(),
            &|d| Ok(!taint_prevents(d, &alt.spec)),
            &mut left,
        );
    }
    if !alt.spec.capacity.is_empty() {
        filter(
            "with the capacity asked for left".into(),
            &|d| {
                let used = a
                    .allocated()
                    .consumed
                    .get(&d.slot)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                Ok(super::capacity::fits(&alt.spec.capacity, &d.capacity, used, |_| 0) == Ok(true))
            },
            &mut left,
        );
    }
    if let Some(e) = errors.first() {
        return Err(e.clone());
    }
    if left.len() >= need && !(alt.spec.mode == AllocationMode::All && left.is_empty()) {
        return Ok(());
    }
    let chain: Vec<String> = steps
        .iter()
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
    Err(format!("needs {want}; {}", chain.join(", ")))
}
