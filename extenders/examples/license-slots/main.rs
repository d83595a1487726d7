//! license-slots: a Filter extender whose verdict depends on the pods on a
//! node, and so on what preemption would evict.
//!
//! A node offers `example.com/license-slots: N` license slots (its label;
//! none without it). A pod annotated `example.com/license` takes one. The
//! Filter passes a pod needing a license only on a node with a free slot:
//! fewer pods needing one on it than its slots, counted from berthd's pod
//! feed (`wants_pods`). Any other node is rejected, resolvable
//! (`node(s) had no free license slot`): evicting a pod that holds a slot
//! frees it.
//!
//! When a pod preempts, berthd asks this Filter the what-if once per
//! attempt (`PreemptionFilterRequest`); the SDK answers it with the same
//! `filter` on a pod table without the pods that would be evicted, so a
//! node where evicting the victims frees no slot is no candidate, and one
//! where another pod holds the slot gets that pod evicted instead.

#[path = "../common.rs"]
mod common;

use std::sync::Arc;

use anyhow::Result;
use berth_extender::*;
use clap::Parser;

/// The node label offering license slots.
const SLOTS_LABEL: &str = "example.com/license-slots";
/// The pod annotation asking for a license.
const LICENSE_ANNOTATION: &str = "example.com/license";

/// Keeps pods needing a license to nodes with a free slot.
#[derive(Debug, Parser)]
#[command(name = "license-slots", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,
}

struct LicenseSlots;

fn needs_license(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LICENSE_ANNOTATION))
}

fn slots(node: &NodeRef<'_>) -> usize {
    node.object()
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(SLOTS_LABEL))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Filter for LicenseSlots {
    fn filter(&self, cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        if !needs_license(pod.object()) {
            return Status::success();
        }
        let used = cx
            .pods()
            .on_node(node.name())
            .iter()
            .filter(|p| p.uid != pod.uid() && needs_license(&p.object))
            .count();
        if used < slots(node) {
            Status::success()
        } else {
            Status::unschedulable("node(s) had no free license slot")
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let extender = ExtenderBuilder::new("license-slots")
        .filter(Arc::new(LicenseSlots))
        .wants_nodes(true)
        .wants_pods(true)
        .build();
    args.common.serve(extender).await
}
