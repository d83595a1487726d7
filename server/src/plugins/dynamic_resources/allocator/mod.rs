//! The structured-parameters allocator: which devices a node can give a
//! pod's unallocated claims, decided as upstream's allocator decides (the
//! "incubating" variant, which v1.36 picks with its default feature gates:
//! admin access, prioritized lists, partitionable devices, device taints,
//! binding conditions and consumable capacity on; list-typed attributes
//! off).
//!
//! The search is first-fit and exhaustive with early exit: claims in
//! order, their requests in order, each request's devices one at a time,
//! trying candidates in pool order (see [`crate::cache::dra::pools_for`])
//! and, within one request, only in increasing position (combinations,
//! not permutations). A candidate must be free (not allocated, not already
//! picked in this attempt; admin access may reuse devices other claims
//! hold), match its class's and the request's CEL selectors, be usable
//! from the node, fit the request's capacity ask (shared devices), have
//! the counters it consumes left in its pool, tolerate-or-lack taints with
//! NoSchedule/NoExecute effects, and keep every claim constraint
//! satisfiable. A `firstAvailable` request takes the first alternative
//! that leads to a full solution. `All` requests take every matching device
//! of the node's pools (failing when a pool is incomplete or invalid).
//!
//! Filter runs it per node through [`Allocator::check`], which keeps no
//! result and reuses per-thread scratch buffers, so a Filter call allocates
//! nothing once its thread has warmed up. Reserve, Score (for
//! `firstAvailable`) and dry runs run it again on the chosen node with
//! [`Allocator::allocate`]: the input is the cycle's frozen state, so the
//! answer is the one Filter saw.
//!
//! The files: preparing the claims and the [`Allocator`] holding them
//! (`claims.rs`), the search (`search.rs`), the claim constraints it keeps
//! (`constraints.rs`), shared devices' capacity (`capacity.rs`), the
//! allocation results (`result.rs`) and explanations of a node's verdict
//! (`explain.rs`).

mod capacity;
mod claims;
mod constraints;
mod explain;
mod result;
mod search;

pub use claims::{Allocator, Alternative, ClaimToAllocate, Fatal};
pub use explain::{Why, explain_node};
pub use result::{ClaimAllocation, DeviceResult};
pub use search::Outcome;
use search::{Run, SCRATCH, Scratch};

use crate::cache::dra::pools_for;
use crate::model::NodeSpec;

impl Allocator {
    /// Whether the claims fit on `node` (Filter): no result is kept.
    pub fn check(&self, node: &NodeSpec) -> Result<Outcome, Fatal> {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let pools = pools_for(&self.index, node);
            let mut run = Run::new(self, node, &pools, &mut s);
            run.search()
        })
    }

    /// The devices the claims would get on `node`, one allocation per
    /// claim in order; `Ok(None)` if they do not fit.
    pub fn allocate(&self, node: &NodeSpec) -> Result<Option<Vec<ClaimAllocation>>, Fatal> {
        let mut s = Scratch::default();
        let pools = pools_for(&self.index, node);
        let mut run = Run::new(self, node, &pools, &mut s);
        match run.search()? {
            Outcome::Fits { .. } => Ok(Some(result::collect(&run))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
