//! gang-permit: coscheduling as a Permit extender.
//!
//! Pods labelled `pod-group.example.com/name` with the annotation
//! `pod-group.example.com/min-member` form a group (per namespace). Each
//! member waits at Permit until min-member pods of its group are reserved;
//! then every waiting member is allowed at once through PermitDecisions. A
//! member whose attempt is undone (Unreserve) no longer counts. Pods without
//! the label are allowed at once.

#[path = "../common.rs"]
mod common;
mod groups;
mod plugin;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use berth_extender::ExtenderBuilder;
use clap::Parser;

use plugin::GangPermit;

/// Coscheduling at Permit, as a berth remote extender.
#[derive(Debug, Parser)]
#[command(name = "gang-permit", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// How long a member waits at Permit for its group (berthd caps it at
    /// 15m). Examples: 30s, 2m, 1500ms.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    wait_timeout: Duration,
}

/// Parses "30s", "2m", "1500ms", "1h" (one number, one unit).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?} has no unit (ms, s, m or h)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} does not start with a number"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m or h)")),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let gang = Arc::new(GangPermit::new(args.wait_timeout));
    let extender = ExtenderBuilder::new("gang-permit")
        .reserve(gang.clone())
        .permit(gang)
        .build();
    args.common.serve(extender).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3d").is_err());
    }
}
