//! berth: a Kubernetes scheduler implementing the Scheduling Framework, run
//! as a gRPC service.
//!
//! Data flows one way: cluster source → events → cache + queue → scheduling
//! loop → framework → plugins → binder → cluster source.

#![warn(missing_docs)]

pub mod api;
pub mod cache;
pub mod cluster;
pub mod config;
pub mod extender;
pub mod features;
pub mod framework;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod outage;
pub mod plugins;
pub mod prom;
pub mod queue;
pub mod recording;
pub mod replay;
pub mod rng;
pub mod scheduler;
pub mod sim_clock;
// Builders for unit tests: compiled only into them, never into the product.
#[cfg(test)]
pub(crate) mod testing;

/// How many tokio worker threads berthd runs: `requested` if given (and not
/// zero), else `TOKIO_WORKER_THREADS` if set to a positive number, else one
/// fewer than the cores this process may use, at least one. The scheduling
/// loop is one serial task and Filter and Score fan out on their own pool
/// (`parallelism`), so a worker per core oversubscribes the machine: on 2
/// cores a second worker cost more in cross-thread wake-ups than it gave
/// (SchedulingBasic 5000 nodes 12,000 against 13,500 to 14,900 pods/s, the
/// gRPC extender workload at 5000 nodes 2,800 to 3,800 against 4,600 to
/// 5,200), and it took the core a remote extender on the same machine
/// needed.
pub fn worker_threads(requested: Option<usize>) -> usize {
    if let Some(n) = requested.filter(|n| *n > 0) {
        return n;
    }
    if let Some(n) = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(1).max(1)
}
