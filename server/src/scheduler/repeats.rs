//! Failures that repeat themselves, summarized rather than logged each
//! time: the log grows with changes, not with attempts.
//!
//! A pod's failure is logged at INFO when its message differs from the
//! pod's last one (its first failure, or a new reason); a PodGroup's when
//! the group's message differs from its last one. A failure that repeats
//! the last one is logged at DEBUG and counted here (every attempt is in
//! the metrics either way: `scheduler_schedule_attempts_total`,
//! `scheduler_podgroup_schedule_attempts_total`). While repeats are being
//! counted, one INFO line every [`summary_every`] (a minute unless
//! `--failure-summary-interval` says otherwise) says how many attempts
//! repeated themselves and what still waits, and why:
//!
//! ```text
//!   no repeat ──▶ quiet (no timer, no line)
//!   first repeat ──▶ a timer of summary_every ──▶ INFO "still unschedulable:
//!       N attempts repeated their last failure since ...: P pods wait: 4 for
//!       \"<message>\", 1 for \"<message>\"" ──▶ quiet again until the next repeat
//! ```
//!
//! An idle scheduler whose pods rest among the unschedulable ones repeats
//! nothing, so it logs nothing and arms no timer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Shared;
use crate::queue::QueueName;

/// How often repeated failures are summarized, unless
/// [`set_summary_every`] says otherwise.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

static SUMMARY_EVERY_MS: AtomicU64 = AtomicU64::new(SUMMARY_EVERY.as_millis() as u64);

/// Sets how often repeated failures are summarized (berthd's
/// `--failure-summary-interval`), for schedulers started from now on.
pub fn set_summary_every(every: Duration) {
    let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    SUMMARY_EVERY_MS.store(ms, Ordering::Relaxed);
}

/// How often repeated failures are summarized.
pub fn summary_every() -> Duration {
    Duration::from_millis(SUMMARY_EVERY_MS.load(Ordering::Relaxed))
}

/// At most this many reasons are named in a summary; the rest are counted.
const REASONS_SHOWN: usize = 5;

/// Repeated failures since the last summary.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    state: Mutex<Option<Window>>,
    wake: tokio::sync::Notify,
}

#[derive(Debug)]
struct Window {
    since: Instant,
    pods: u64,
    groups: u64,
}

impl Repeats {
    /// A pod's attempt failed as its last one did.
    pub fn pod(&self) {
        self.count(|w| w.pods += 1);
    }

    /// A PodGroup's cycle failed as its last one did.
    pub fn group(&self) {
        self.count(|w| w.groups += 1);
    }

    fn count(&self, f: impl FnOnce(&mut Window)) {
        let mut s = self.state.lock();
        let first = s.is_none();
        let w = s.get_or_insert_with(|| Window {
            since: Instant::now(),
            pods: 0,
            groups: 0,
        });
        f(w);
        drop(s);
        if first {
            self.wake.notify_one();
        }
    }

    fn take(&self) -> Option<Window> {
        self.state.lock().take()
    }
}

/// Writes a summary [`summary_every`] after the first repeat of each
/// window, until the queue closes.
pub(crate) async fn report(shared: Arc<Shared>) {
    let every = summary_every();
    loop {
        shared.repeats.wake.notified().await;
        if shared.queue.is_closed() {
            return;
        }
        tokio::time::sleep(every).await;
        if shared.queue.is_closed() {
            return;
        }
        if let Some(w) = shared.repeats.take() {
            summarize(&shared, &w);
        }
    }
}

fn summarize(shared: &Shared, w: &Window) {
    // What waits now (not what is being tried), by its last failure.
    let mut by_reason: BTreeMap<Arc<str>, usize> = BTreeMap::new();
    let mut waiting = 0usize;
    for e in shared.queue.list() {
        if matches!(e.queue, QueueName::InFlight) {
            continue;
        }
        waiting += 1;
        if let Some(m) = &e.info.last_failure {
            *by_reason.entry(m.clone()).or_default() += 1;
        }
    }
    let mut reasons: Vec<(Arc<str>, usize)> = by_reason.into_iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut why: Vec<String> = reasons
        .iter()
        .take(REASONS_SHOWN)
        .map(|(m, n)| format!("{n} for {m:?}"))
        .collect();
    if reasons.len() > REASONS_SHOWN {
        why.push(format!("{} more reasons", reasons.len() - REASONS_SHOWN));
    }
    let attempts = w.pods + w.groups;
    let took = Instant::now().saturating_duration_since(w.since);
    tracing::info!(
        repeated_pod_attempts = w.pods,
        repeated_group_attempts = w.groups,
        pending = waiting,
        "still unschedulable: {attempts} attempts repeated their last failure in the last {}s: {waiting} pods wait{}",
        took.as_secs(),
        if why.is_empty() {
            String::new()
        } else {
            format!(": {}", why.join(", "))
        }
    );
}
