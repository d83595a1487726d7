//! Observability: Prometheus metrics, health checks and tracing.
//!
//! * the metrics themselves live below every layer that records them, in
//!   [`crate::metrics`] over the Prometheus primitives of [`crate::prom`]
//!   (both re-exported here); this module renders them as `/metrics`, with
//!   the kube client's `rest_client_*`;
//! * [`health`]: `/healthz`, `/livez` and `/readyz` with named checks
//!   (others, such as leader election, register theirs);
//! * [`http`]: the HTTP server for both;
//! * [`telemetry`]: log formatting and OTLP span export.

pub mod health;
pub mod http;
pub mod telemetry;

/// The metrics, recorded below this layer (see [`crate::metrics`]).
pub use crate::metrics;
/// The Prometheus primitives, a leaf module below every module that
/// records (see [`crate::prom`]).
pub use crate::prom;

use crate::scheduler::Scheduler;
use prom::Exposition;

/// The whole `/metrics` text for a scheduler.
pub fn render(scheduler: &Scheduler) -> String {
    let mut e = Exposition::new();
    scheduler.prometheus().render(&mut e);

    // component-base's gauge, as every Kubernetes component serves it: one
    // sample per gate, 1 if on, labelled with its stage ("" for GA).
    e.family(
        "kubernetes_feature_enabled",
        "gauge",
        "This metric records the data about the stage and enablement of a k8s feature.",
    );
    for (name, stage, on) in scheduler.feature_gates().all() {
        e.sample(
            "kubernetes_feature_enabled",
            &[("name", name), ("stage", stage.label())],
            u64::from(on),
        );
    }
    metrics::build::render(&mut e, scheduler.feature_gates().release());

    let c = scheduler.queue_counts();
    e.family(
        "scheduler_pending_pods",
        "gauge",
        "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
    );
    let groups = scheduler.prometheus().pod_groups().is_some();
    // `incomplete` and `pending` hold PodGroup members (GenericWorkload):
    // those waiting for their PodGroup, and for their group's cycle to end.
    for (q, n) in [
        ("active", c.active),
        ("backoff", c.backoff),
        ("gated", c.gated),
        ("incomplete", c.incomplete),
        ("pending", c.pending),
        ("unschedulable", c.unschedulable),
    ] {
        e.sample("scheduler_pending_pods", &[("queue", q)], n as u64);
    }
    e.family(
        "scheduler_queued_entities",
        "gauge",
        "Number of queued scheduling entities ('pod' or 'podgroup'; 'pod' stands for individual pods that are not members of any podgroup) by the queue type. 'active' means number of entities in activeQ; 'backoff' means number of entities in backoffQ; 'unschedulable' means number of entities in unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable entities that the scheduler never attempted to schedule because they are gated.",
    );
    let ec = scheduler.queue().entity_counts();
    for (q, (pods, pod_groups)) in [
        ("active", ec.active),
        ("backoff", ec.backoff),
        ("gated", ec.gated),
        ("unschedulable", ec.unschedulable),
    ] {
        e.sample(
            "scheduler_queued_entities",
            &[("queue", q), ("type", "pod")],
            pods as u64,
        );
        if groups {
            e.sample(
                "scheduler_queued_entities",
                &[("queue", q), ("type", "podgroup")],
                pod_groups as u64,
            );
        }
    }
    let (nodes, pods, assumed) = scheduler.cache_sizes();
    e.family(
        "scheduler_cache_size",
        "gauge",
        "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
    );
    for (t, n) in [("assumed_pods", assumed), ("nodes", nodes), ("pods", pods)] {
        e.sample("scheduler_cache_size", &[("type", t)], n as u64);
    }
    e.family(
        "scheduler_inflight_events",
        "gauge",
        "Number of events currently tracked in the scheduling queue.",
    );
    for (event, n) in scheduler.queue().inflight_event_counts() {
        e.sample("scheduler_inflight_events", &[("event", &event)], n);
    }
    e.family(
        "scheduler_queue_incoming_pods_total",
        "counter",
        "Number of pods added to scheduling queues by event and queue type.",
    );
    let incoming = scheduler.queue().incoming_counts();
    for (q, event, n) in &incoming {
        e.sample(
            "scheduler_queue_incoming_pods_total",
            &[("event", event), ("queue", q)],
            *n,
        );
    }
    e.family(
        "scheduler_queue_incoming_entities_total",
        "counter",
        "Number of scheduling entities added to scheduling queues by event, queue type, and entity type. Entity types are either 'pod' (for individual pods that are not members of any podgroup) or 'podgroup'.",
    );
    for (q, event, n) in &incoming {
        e.sample(
            "scheduler_queue_incoming_entities_total",
            &[("event", event), ("queue", q), ("type", "pod")],
            *n,
        );
    }
    if groups {
        for (q, event, n) in scheduler.queue().incoming_group_counts() {
            e.sample(
                "scheduler_queue_incoming_entities_total",
                &[("event", &event), ("queue", q), ("type", "podgroup")],
                n,
            );
        }
    }
    e.family(
        "scheduler_goroutines",
        "gauge",
        "Number of running goroutines split by the work they do such as binding.",
    );
    e.sample(
        "scheduler_goroutines",
        &[("operation", "binding")],
        scheduler.bindings_in_flight() as u64,
    );
    let extenders: Vec<(&str, &metrics::ExtenderMetrics)> = scheduler
        .extenders()
        .connections()
        .iter()
        .map(|c| (c.name(), c.metrics()))
        .collect();
    metrics::render_extenders(&extenders, &mut e);
    crate::cluster::kube::rest_metrics().render(&mut e);
    metrics::process::render(&mut e);
    metrics::os_process::render(&mut e);
    metrics::upstream::with_stability(&e.finish())
}

#[cfg(test)]
mod tests;
