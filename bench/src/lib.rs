//! berth's benchmarks: scheduler_perf-style workloads run through the real
//! scheduler ([`runner`], the `berth-bench` binary), and the pieces the
//! criterion micro-benchmarks (`benches/`) share.

pub mod api;
pub mod extender;
pub mod extender_process;
pub mod kube;
pub mod objects;
pub mod profile;
pub mod report;
pub mod run;
pub mod runner;
pub mod trace;
pub mod transport;
pub mod usage;
pub mod workloads;
