//! Resource plugins: NodeResourcesFit (Filter and Score on requests) and
//! NodeResourcesBalancedAllocation (Score on balanced usage).

mod args;
mod balanced_allocation;
mod fit;
mod scoring;

pub use args::*;
pub use balanced_allocation::{
    NodeResourcesBalancedAllocation, NodeResourcesBalancedAllocationArgs,
};
pub use fit::{NodeResourcesFit, TOO_MANY_PODS};
pub use scoring::{Scorer, broken_linear, utilization};
