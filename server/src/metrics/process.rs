//! Process-wide families recorded from places that hold no scheduler
//! handle, with upstream's names, labels and help (as component-base and
//! the DRA library register them globally):
//!
//! * `leader_election_master_status{name}` and
//!   `leader_election_slowpath_total{name}` (component-base's leader
//!   election metrics, `name` the Lease's);
//! * `dynamic_resource_allocation_resourceclaim_creates_total{status,
//!   admin_access}` (v1.37's name for the claims DynamicResources creates
//!   for extended resources);
//! * `scheduler_event_handling_duration_seconds{event}` (how long the
//!   scheduler's event handlers took per cluster event).

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use parking_lot::Mutex;

use crate::prom::{Counter, Exposition, Histogram, exponential_buckets};

#[derive(Default)]
struct Leader {
    /// By Lease name: (leading, slow-path attempts).
    leases: BTreeMap<String, (bool, u64)>,
}

#[derive(Default)]
struct Process {
    leader: Mutex<Leader>,
    /// `[admin_access false, true]` x `[success, failure]`.
    claims: [[Counter; 2]; 2],
    events: Mutex<BTreeMap<&'static str, Histogram>>,
}

static PROCESS: LazyLock<Process> = LazyLock::new(Process::default);

/// Whether this process leads on the Lease `name` (component-base's
/// `leader_election_master_status`).
pub fn leader_status(name: &str, leading: bool) {
    PROCESS
        .leader
        .lock()
        .leases
        .entry(name.to_string())
        .or_default()
        .0 = leading;
}

/// The elector read the Lease instead of updating it blindly
/// (component-base's `leader_election_slowpath_total`).
pub fn leader_slowpath(name: &str) {
    PROCESS
        .leader
        .lock()
        .leases
        .entry(name.to_string())
        .or_default()
        .1 += 1;
}

/// A ResourceClaim created by the scheduler, or a creation that failed.
pub fn resource_claim_created(ok: bool, admin_access: bool) {
    if crate::sim_clock::is_simulated() {
        return;
    }
    PROCESS.claims[usize::from(admin_access)][usize::from(!ok)].inc();
}

/// The event handlers took `took` for one cluster event labelled `event`
/// (upstream's labels: `NodeAdd`, `AssignedPodUpdate`, ...).
pub fn event_handled(event: &'static str, took: Duration) {
    // A replay's schedulers are not this process's (crate::replay).
    if crate::sim_clock::is_simulated() {
        return;
    }
    PROCESS
        .events
        .lock()
        .entry(event)
        .or_insert_with(|| Histogram::seconds(&exponential_buckets(0.0001, 2.0, 12)))
        .observe_duration(took);
}

/// Writes the families.
pub fn render(e: &mut Exposition) {
    let leases: Vec<(String, (bool, u64))> = PROCESS
        .leader
        .lock()
        .leases
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    e.family(
        "leader_election_master_status",
        "gauge",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
    );
    for (name, (leading, _)) in &leases {
        e.sample(
            "leader_election_master_status",
            &[("name", name)],
            u64::from(*leading),
        );
    }
    e.family(
        "leader_election_slowpath_total",
        "counter",
        "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.",
    );
    for (name, (_, slow)) in &leases {
        e.sample("leader_election_slowpath_total", &[("name", name)], *slow);
    }
    e.family(
        "dynamic_resource_allocation_resourceclaim_creates_total",
        "counter",
        "Number of ResourceClaims creation requests, categorized by creation status and admin access",
    );
    for (ai, admin) in ["false", "true"].iter().enumerate() {
        for (si, status) in ["success", "failure"].iter().enumerate() {
            let n = PROCESS.claims[ai][si].get();
            if n > 0 {
                e.sample(
                    "dynamic_resource_allocation_resourceclaim_creates_total",
                    &[("admin_access", admin), ("status", status)],
                    n,
                );
            }
        }
    }
    e.family(
        "scheduler_event_handling_duration_seconds",
        "histogram",
        "Event handling latency in seconds.",
    );
    for (event, h) in PROCESS.events.lock().iter() {
        e.histogram(
            "scheduler_event_handling_duration_seconds",
            &[("event", event)],
            h,
        );
    }
}
