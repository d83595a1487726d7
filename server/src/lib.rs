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
pub mod framework;
pub mod leader;
pub mod model;
pub mod observe;
pub mod plugins;
pub mod prom;
pub mod queue;
pub mod rng;
pub mod scheduler;
pub mod testing;
