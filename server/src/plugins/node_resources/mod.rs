//! Resource plugins: NodeResourcesFit (Filter and Score on requests).

mod args;
mod fit;
mod scoring;

pub use args::*;
pub use fit::{NodeResourcesFit, TOO_MANY_PODS};
pub use scoring::Scorer;
