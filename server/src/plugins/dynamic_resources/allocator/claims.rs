//! The claims to allocate, prepared ([`Allocator::new`]): each request's
//! alternatives with their device classes resolved, and what upstream
//! refuses before any search (an invalid claim, an unknown class or count
//! mode, too many devices, an unknown constraint) as a [`Fatal`] error.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::dra::{AllocatedState, SliceIndex};
use crate::model::dra::{
    ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, Claim, Class, Constraint, Request, RequestSpec,
};

/// One way of satisfying a request, with its class resolved.
#[derive(Debug, Clone)]
pub struct Alternative {
    /// The request or sub-request.
    pub spec: RequestSpec,
    /// The `firstAvailable` request it is an alternative of.
    pub parent: Option<Arc<str>>,
    /// Its device class.
    pub class: Arc<Class>,
}

impl Alternative {
    /// `request` or `request/subrequest`, as results name it.
    pub fn full_name(&self) -> String {
        match &self.parent {
            Some(p) => format!("{p}/{}", self.spec.name),
            None => self.spec.name.to_string(),
        }
    }
}

/// A claim the scheduler must allocate, prepared.
#[derive(Debug, Clone)]
pub struct ClaimToAllocate {
    /// The claim.
    pub claim: Arc<Claim>,
    /// Per request, its alternatives (one for `exactly`).
    pub requests: Vec<Vec<Alternative>>,
}

/// Allocates a pod's claims on nodes, against the state frozen at
/// PreFilter.
#[derive(Debug, Clone)]
pub struct Allocator {
    pub(super) claims: Vec<ClaimToAllocate>,
    pub(super) index: Arc<SliceIndex>,
    pub(super) allocated: Arc<AllocatedState>,
    pub(super) timeout: Option<Duration>,
}

/// The reasons a claim cannot be allocated anywhere (upstream's errors of
/// its allocator): the pod gets an error, not a rejection.
pub type Fatal = String;

impl Allocator {
    /// Prepares claims: resolves classes, checks what upstream checks
    /// before searching. An `Err` is fatal for every node.
    pub fn new(
        claims: &[Arc<Claim>],
        class: impl Fn(&str) -> Option<Arc<Class>>,
        index: Arc<SliceIndex>,
        allocated: Arc<AllocatedState>,
        timeout: Option<Duration>,
    ) -> Result<Self, Fatal> {
        let mut prepared = Vec::with_capacity(claims.len());
        for claim in claims {
            let key = claim.key();
            if let Some(e) = &claim.invalid {
                return Err(format!("claim {key}: {e}"));
            }
            let mut requests = Vec::with_capacity(claim.requests.len());
            let mut min_devices = 0usize;
            for r in &claim.requests {
                let (specs, parent): (Vec<&RequestSpec>, Option<Arc<str>>) = match r {
                    Request::Exact(s) => (vec![s], None),
                    Request::FirstAvailable { name, subrequests } => {
                        (subrequests.iter().collect(), Some(name.clone()))
                    }
                    Request::Unknown { name } => {
                        return Err(format!(
                            "claim {key}, request {name}: missing device class name (unsupported request type?)"
                        ));
                    }
                };
                let mut alts = Vec::with_capacity(specs.len());
                let mut min_for_request = usize::MAX;
                for s in specs {
                    let name = match &parent {
                        Some(p) => format!("{p}/{}", s.name),
                        None => s.name.to_string(),
                    };
                    if s.class.is_empty() {
                        return Err(format!(
                            "claim {key}, request {name}: missing device class name (unsupported request type?)"
                        ));
                    }
                    let Some(c) = class(&s.class) else {
                        return Err(format!(
                            "claim {key}, request {name}: could not retrieve device class {}: deviceclass.resource.k8s.io {:?} not found",
                            s.class, s.class
                        ));
                    };
                    let n = match s.mode {
                        AllocationMode::ExactCount(n) => usize::try_from(n).unwrap_or(usize::MAX),
                        AllocationMode::All => 0,
                        AllocationMode::Unknown => {
                            return Err(format!(
                                "claim {key}, request {name}: unsupported count mode {}",
                                s.mode_name
                            ));
                        }
                    };
                    min_for_request = min_for_request.min(n);
                    alts.push(Alternative {
                        spec: s.clone(),
                        parent: parent.clone(),
                        class: c,
                    });
                }
                min_devices = min_devices.saturating_add(min_for_request);
                requests.push(alts);
            }
            if min_devices > ALLOCATION_RESULTS_MAX_SIZE {
                return Err(format!(
                    "claim {key}: number of requested devices {min_devices} exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                ));
            }
            if claim
                .constraints
                .iter()
                .any(|c| matches!(c, Constraint::Unknown))
            {
                let i = claim
                    .constraints
                    .iter()
                    .position(|c| matches!(c, Constraint::Unknown))
                    .unwrap_or(0);
                return Err(format!(
                    "claim {key}, constraint #{i}: empty constraint (unsupported constraint type?)"
                ));
            }
            prepared.push(ClaimToAllocate {
                claim: claim.clone(),
                requests,
            });
        }
        Ok(Self {
            claims: prepared,
            index,
            allocated,
            timeout,
        })
    }

    /// The claims being allocated.
    pub fn claims(&self) -> &[ClaimToAllocate] {
        &self.claims
    }

    /// The slice index the allocator reads.
    pub fn index(&self) -> &Arc<SliceIndex> {
        &self.index
    }

    /// The allocation state the allocator counts as taken.
    pub fn allocated(&self) -> &AllocatedState {
        &self.allocated
    }
}
