//! volume-prebind: "provisions" a volume at PreBind for pods annotated
//! `example.com/volume-size`, and releases it when the attempt is undone.
//!
//! Nothing is really provisioned: the extender records the volume and logs
//! one line per provision ("provisioned volume pod=NS/NAME node=NODE
//! size=SIZE") and per release ("released volume ..."), so tests can count
//! them. `--fail-pods REGEX` and `--fail-every N` make PreBind fail on
//! purpose, to exercise berthd's failure path (Unreserve, retry).

#[path = "../common.rs"]
mod common;
mod plugin;

use std::sync::Arc;

use anyhow::Result;
use berth_extender::ExtenderBuilder;
use clap::Parser;
use regex::Regex;

use plugin::{FailRules, VolumePrebind};

/// Volume provisioning at PreBind, as a berth remote extender.
#[derive(Debug, Parser)]
#[command(name = "volume-prebind", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// Fail PreBind for pods whose name matches this regular expression
    /// (unanchored: use ^...$ for a whole-name match).
    #[arg(long)]
    fail_pods: Option<Regex>,

    /// Fail every Nth provisioning attempt (counting PreBinds of annotated
    /// pods, from 1: with 3, the 3rd, 6th, ... fail).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    fail_every: Option<u64>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let volumes = Arc::new(VolumePrebind::new(FailRules {
        pods: args.fail_pods.clone(),
        every: args.fail_every,
    }));
    let extender = ExtenderBuilder::new("volume-prebind")
        .reserve(volumes.clone())
        .pre_bind(volumes.clone())
        .post_bind(volumes)
        .build();
    args.common.serve(extender).await
}
