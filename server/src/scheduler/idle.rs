//! The idle summary: once the scheduler has had nothing to do for a
//! moment ([`IDLE_QUIET`]), one line says how many pods are bound and
//! pending, followed by one line per pending pod whose state is new or
//! changed since the last summary. A burst of pods arriving one at a time
//! is one idle period, not one per pod, and a pod pending for the same
//! reason is not repeated after every event.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;
use crate::queue::QueueName;

/// How long the scheduler must stay idle (nothing queued to try, nothing
/// being tried or bound, no decision made) before the summary is logged.
pub const IDLE_QUIET: Duration = Duration::from_millis(200);

fn is_idle(shared: &Shared) -> bool {
    let c = shared.queue.counts();
    c.active + c.backoff + c.in_flight == 0 && shared.bindings_in_flight.load(Ordering::SeqCst) == 0
}

/// Tells the reporter that the scheduler may have gone idle (a cycle or a
/// binding ended, the loop is about to wait for a pod).
pub(crate) fn maybe_report_idle(shared: &Shared) {
    shared.metrics.notify();
    shared.idle.notify_one();
}

/// Logs the summary once per idle period, until the queue closes.
pub(crate) async fn report(shared: Arc<Shared>) {
    // What the last summary said of each pending pod, by UID.
    let mut said: HashMap<Arc<str>, (QueueName, Option<Arc<str>>)> = HashMap::new();
    loop {
        shared.idle.notified().await;
        if shared.queue.is_closed() {
            return;
        }
        // Wait for a quiet idle stretch; any activity restarts it.
        loop {
            let decided = shared.decided.load(Ordering::SeqCst);
            if decided == shared.last_summary.load(Ordering::SeqCst) || !is_idle(&shared) {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(IDLE_QUIET) => {}
                () = shared.idle.notified() => continue,
            }
            if is_idle(&shared) && shared.decided.load(Ordering::SeqCst) == decided {
                shared.last_summary.store(decided, Ordering::SeqCst);
                summarize(&shared, &mut said);
                break;
            }
        }
    }
}

fn summarize(shared: &Shared, said: &mut HashMap<Arc<str>, (QueueName, Option<Arc<str>>)>) {
    let (nodes, pods) = {
        let cache = shared.cache.lock();
        (cache.node_count(), cache.pod_count())
    };
    let pending = shared.queue.list();
    let mut now: HashMap<Arc<str>, (QueueName, Option<Arc<str>>)> = HashMap::new();
    let mut changed = Vec::new();
    for e in &pending {
        let state = (e.queue, e.info.last_failure.clone());
        if said.get(&e.info.pod.uid) != Some(&state) {
            changed.push(e);
        }
        now.insert(e.info.pod.uid.clone(), state);
    }
    *said = now;
    let unchanged = pending.len() - changed.len();
    if unchanged == 0 {
        tracing::info!(
            nodes,
            bound_pods = pods,
            pending = pending.len(),
            "scheduler idle: {pods} pods on {nodes} nodes, {} pending",
            pending.len()
        );
    } else {
        tracing::info!(
            nodes,
            bound_pods = pods,
            pending = pending.len(),
            unchanged,
            "scheduler idle: {pods} pods on {nodes} nodes, {} pending ({unchanged} as in the last summary)",
            pending.len()
        );
    }
    changed.sort_by_key(|e| e.info.pod.key());
    for e in changed {
        tracing::info!(
            pod = %e.info.pod.key(), queue = ?e.queue, attempts = e.info.attempts,
            "pending: {}", e.info.last_failure.as_deref().unwrap_or("not attempted yet")
        );
    }
}
