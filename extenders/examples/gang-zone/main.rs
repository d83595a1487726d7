//! gang-zone: keeps every pod of a PodGroup gang in one zone, through the
//! group points (berthd's `GenericWorkload` gate on).
//!
//! berthd evaluates a gang's pods one after another in its group cycle and
//! asks PlacementFeasible after each. This extender learns there where the
//! gang's pods went; its Filter, asked for the next pod of the same cycle,
//! then keeps that pod to the zone (`topology.kubernetes.io/zone`, or the
//! label given) of the gang's first pod. A gang whose pods already run in
//! a zone stays there. PlacementFeasible rejects a placement spanning two
//! zones (it cannot happen through this Filter, but a pod with its own
//! `nodeName`, or a node relabelled in between, could). When the zone
//! cannot take the whole gang, its pods fail there and GangScheduling's
//! `minCount` fails the cycle: berthd retries the gang later, and its
//! first pod may then start in another zone. Pods outside PodGroups pass.
//!
//! Group state lives per group, for its current cycle: made afresh at the
//! cycle's first PlacementFeasible (before any pod of it is filtered), read
//! by the Filter of its pods (which name the group in
//! `spec.schedulingGroup.podGroupName`).

#[path = "../common.rs"]
mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::Result;
use berth_extender::*;
use clap::Parser;
use parking_lot::Mutex;

/// Keeps gangs in one zone, as a berth remote extender.
#[derive(Debug, Parser)]
#[command(name = "gang-zone", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// The node label naming a node's zone.
    #[arg(long, default_value = "topology.kubernetes.io/zone")]
    zone_label: String,
}

/// `namespace/name` of a PodGroup.
type GroupKey = (String, String);

#[derive(Debug, Default)]
struct GroupCycle {
    /// The zone the gang's pods are kept to, once one is placed.
    zone: Option<String>,
}

struct GangZone {
    label: String,
    /// The groups whose cycle is under way, by key (berthd runs one cycle
    /// of a group at a time), with their cycle id.
    cycles: Mutex<HashMap<GroupKey, (u64, GroupCycle)>>,
}

impl GangZone {
    fn zone_of(&self, cx: &Context, node: &str) -> Option<String> {
        let n = cx.nodes().get(node)?;
        n.metadata.labels.as_ref()?.get(&self.label).cloned()
    }

    fn zones_of(&self, cx: &Context, nodes: impl Iterator<Item = String>) -> BTreeSet<String> {
        nodes.filter_map(|n| self.zone_of(cx, &n)).collect()
    }
}

fn group_of(pod: &CyclePod) -> Option<GroupKey> {
    let name = pod
        .object()
        .spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .clone()?;
    Some((pod.namespace().to_string(), name))
}

#[async_trait]
impl PlacementFeasible for GangZone {
    async fn placement_feasible(
        &self,
        cx: &Context,
        group: &CycleGroup,
        progress: &PlacementProgress,
    ) -> HandlerResult<Status> {
        // Where the gang runs and where this cycle put it so far.
        let running = group.scheduled().iter().filter_map(|m| m.node.clone());
        let placed = progress.placed.iter().map(|p| p.node.clone());
        let zones = self.zones_of(cx, running.chain(placed));
        let key = (group.namespace().to_string(), group.name().to_string());
        let mut cycles = self.cycles.lock();
        let entry = cycles
            .entry(key)
            .or_insert_with(|| (group.cycle_id(), GroupCycle::default()));
        if entry.0 != group.cycle_id() {
            *entry = (group.cycle_id(), GroupCycle::default());
        }
        if zones.len() > 1 {
            let zones: Vec<&str> = zones.iter().map(String::as_str).collect();
            return Ok(Status::unschedulable(format!(
                "pod group {}/{} would span zones {}",
                group.namespace(),
                group.name(),
                zones.join(", ")
            )));
        }
        entry.1.zone = zones.into_iter().next();
        Ok(Status::success())
    }
}

impl Filter for GangZone {
    fn filter(&self, _: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        let Some(key) = group_of(pod) else {
            return Status::success();
        };
        let zone = self
            .cycles
            .lock()
            .get(&key)
            .and_then(|(_, c)| c.zone.clone());
        let Some(zone) = zone else {
            return Status::success();
        };
        let here = node
            .object()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(&self.label));
        if here == Some(&zone) {
            Status::success()
        } else {
            Status::unschedulable(format!(
                "node(s) were outside zone {zone} of the pod group's other pods"
            ))
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let zone = Arc::new(GangZone {
        label: args.zone_label.clone(),
        cycles: Mutex::new(HashMap::new()),
    });
    let extender = ExtenderBuilder::new("gang-zone")
        .placement_feasible(zone.clone())
        .filter(zone)
        .wants_nodes(true)
        .build();
    args.common.serve(extender).await
}
