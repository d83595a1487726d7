//! quota-core: an external scheduling core in the style of YuniKorn's plugin
//! mode.
//!
//! Pods labelled `quota-core.example.com/app` are this core's: PreFilter
//! admits one only within its namespace's cpu quota (admitted-in-progress
//! plus bound pods' cpu requests), chooses its node itself (the node with
//! the most cpu free, by the node cache minus what this core has placed
//! there) and restricts the cycle to that node, so berthd's own Filter
//! plugins still validate it; Filter accepts only that node. The admission
//! is released at Unreserve, or at the end of a cycle that never reached
//! Reserve; PostBind turns it into bound usage. Every other pod passes
//! straight through: PreFilter answers CODE_SKIP, so Filter is not called.

#[path = "../common.rs"]
mod common;
mod quota;

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use berth_extender::ExtenderBuilder;
use clap::Parser;

use crate::quota::QuotaCore;

/// A quota-enforcing scheduling core, as a berth remote extender.
#[derive(Debug, Parser)]
#[command(name = "quota-core", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// Per-namespace cpu quotas in millicores: NS=MILLI[,NS=MILLI...], for
    /// example team-a=2000,team-b=500 (500m is accepted too). Namespaces
    /// not listed have no limit.
    #[arg(long, value_parser = parse_quotas, default_value = "")]
    quota: Quotas,
}

#[derive(Debug, Clone, Default)]
struct Quotas(BTreeMap<String, i64>);

fn parse_quotas(s: &str) -> Result<Quotas, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (ns, milli) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not NS=CPU_MILLI"))?;
        let ns = ns.trim();
        if ns.is_empty() {
            return Err(format!("{part:?} has no namespace"));
        }
        let milli = milli.trim();
        let v: i64 = milli
            .strip_suffix('m')
            .unwrap_or(milli)
            .parse()
            .map_err(|_| format!("{part:?}: {milli:?} is not a number of millicores"))?;
        if v < 0 {
            return Err(format!("{part:?}: a quota cannot be negative"));
        }
        if out.insert(ns.to_string(), v).is_some() {
            return Err(format!("namespace {ns} has two quotas"));
        }
    }
    Ok(Quotas(out))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let core = Arc::new(QuotaCore::new(args.quota.0.clone()));
    let extender = ExtenderBuilder::new("quota-core")
        .pre_filter(core.clone())
        .filter(core.clone())
        .reserve(core.clone())
        .post_bind(core.clone())
        .cycle_hooks(core)
        .wants_nodes(true)
        .build();
    args.common.serve(extender).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas() {
        let q = parse_quotas("team-a=2000, team-b=500m").map(|q| q.0);
        assert_eq!(
            q,
            Ok(BTreeMap::from([
                ("team-a".to_string(), 2000),
                ("team-b".to_string(), 500)
            ]))
        );
        assert_eq!(parse_quotas("").map(|q| q.0.len()), Ok(0));
        assert!(parse_quotas("team-a").is_err());
        assert!(parse_quotas("=5").is_err());
        assert!(parse_quotas("a=2cores").is_err());
        assert!(parse_quotas("a=1,a=2").is_err());
        assert!(parse_quotas("a=-1").is_err());
    }
}
