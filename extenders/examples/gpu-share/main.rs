//! gpu-share: lets pods share GPUs by memory.
//!
//! Nodes advertise GPUs as the extended resource `example.com/gpu` (a count,
//! in allocatable) and each GPU's memory in the annotation
//! `example.com/gpu-memory-mib`. Pods request `example.com/gpu-mem` (MiB) as
//! an extended resource that berthd manages through this extender
//! (`managedResources`, `ignoredByScheduler: true`). The extender keeps a
//! ledger of the memory used per node per GPU by the pods it reserved:
//! Filter keeps nodes with a GPU that has enough free memory, Score
//! bin-packs (the fuller the best-fitting GPU ends up, the higher), Reserve
//! assigns a GPU, Unreserve frees it, PostBind marks it committed.
//!
//! The ledger is the extender's own and lives in memory: it starts empty,
//! and it never hears of pods that finish or are deleted (the protocol sends
//! no pod events), so committed memory is only freed by a restart. With
//! `--state-file` it is written as JSON after every change.

#[path = "../common.rs"]
mod common;
mod ledger;
mod plugin;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use berth_extender::ExtenderBuilder;
use clap::Parser;

use plugin::GpuShare;

/// Per-GPU memory sharing, as a berth remote extender.
#[derive(Debug, Parser)]
#[command(name = "gpu-share", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// Write the ledger to this file as JSON after every change (and once at
    /// start): {"used": {NODE: [MiB per GPU]}, "allocations": {POD_UID:
    /// {pod, node, gpu, mib, reservation, committed}}}.
    #[arg(long)]
    state_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let gpu = Arc::new(GpuShare::new(args.state_file.clone()));
    let extender = ExtenderBuilder::new("gpu-share")
        .filter(gpu.clone())
        .score(gpu.clone())
        .reserve(gpu.clone())
        .post_bind(gpu)
        .wants_nodes(true)
        .build();
    args.common.serve(extender).await
}
