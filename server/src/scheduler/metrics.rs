//! Counters and latency histograms of the scheduling loop, cheap enough to
//! be always on (a few relaxed atomic adds per attempt).
//!
//! What is measured, with upstream's metric each mirrors:
//!
//! * attempt latency of pods that got bound: from the pop that started the
//!   attempt to the end of its Bind (`scheduler_scheduling_attempt_duration_seconds`
//!   with `result=scheduled`);
//! * attempt latency of failed attempts: from the pop to the pod being back
//!   in the queue with its status written (`result=unschedulable|error`);
//! * scheduling-cycle latency of attempts that found a node: from the pop to
//!   the hand-off to the binding cycle, the serial part that bounds
//!   throughput (close to `scheduling_algorithm_duration_seconds` plus
//!   Reserve and Permit).
//!
//! Readers take a [`MetricsSnapshot`] and subtract an earlier one to look at
//! one stretch of time ([`MetricsSnapshot::since`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Sub-buckets per power of two: values are kept to within 1/16 (6.25%).
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets for every `u64` nanosecond value.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// The bucket of `v` (nanoseconds): exact below 16, then 16 buckets per
/// power of two.
fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as usize) * SUB as usize + sub as usize
}

/// The largest value in bucket `i`.
fn bucket_upper(i: usize) -> u64 {
    let sub_len = SUB as usize;
    if i < sub_len {
        return i as u64;
    }
    let exp = (i / sub_len) as u32 + SUB_BITS - 1;
    let sub = (i % sub_len) as u64;
    let low = (SUB + sub) << (exp - SUB_BITS);
    low.saturating_add((1u64 << (exp - SUB_BITS)) - 1)
}

/// A lock-free latency histogram with log-linear buckets.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration.
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
    sum_ns: u64,
}

impl std::fmt::Debug for HistogramSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistogramSnapshot")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .finish()
    }
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl HistogramSnapshot {
    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The mean, or zero when empty.
    pub fn mean(&self) -> Duration {
        match self.count() {
            0 => Duration::ZERO,
            n => Duration::from_nanos(self.sum_ns / n),
        }
    }

    /// The `q` quantile (`0.0..=1.0`), as the upper bound of the bucket
    /// holding it (at most 6.25% above the true value); zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        let n = self.count();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(bucket_upper(i));
            }
        }
        Duration::from_nanos(bucket_upper(BUCKETS - 1))
    }

    /// The largest recorded duration, to bucket precision.
    pub fn max(&self) -> Duration {
        self.counts
            .iter()
            .rposition(|&c| c > 0)
            .map_or(Duration::ZERO, |i| Duration::from_nanos(bucket_upper(i)))
    }

    /// What was recorded after `earlier` (a snapshot of the same histogram).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            counts: self
                .counts
                .iter()
                .zip(&earlier.counts)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }
}

/// The scheduler's counters and latency histograms.
pub struct SchedulerMetrics {
    base: Instant,
    scheduled: AtomicU64,
    unschedulable: AtomicU64,
    errors: AtomicU64,
    preempted: AtomicU64,
    /// Nanoseconds after `base` of the last successful bind (0: none).
    last_scheduled_ns: AtomicU64,
    attempt_scheduled: Histogram,
    attempt_failed: Histogram,
    cycle_scheduled: Histogram,
    progress: Notify,
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            scheduled: AtomicU64::new(0),
            unschedulable: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            preempted: AtomicU64::new(0),
            last_scheduled_ns: AtomicU64::new(0),
            attempt_scheduled: Histogram::default(),
            attempt_failed: Histogram::default(),
            cycle_scheduled: Histogram::default(),
            progress: Notify::new(),
        }
    }
}

impl SchedulerMetrics {
    pub(crate) fn record_scheduled(&self, attempt: Duration) {
        self.attempt_scheduled.record(attempt);
        let at = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_scheduled_ns
            .fetch_max(at.max(1), Ordering::Relaxed);
        self.scheduled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_failed(&self, attempt: Duration, unschedulable: bool) {
        self.attempt_failed.record(attempt);
        let counter = if unschedulable {
            &self.unschedulable
        } else {
            &self.errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_cycle_found_node(&self, cycle: Duration) {
        self.cycle_scheduled.record(cycle);
    }

    pub(crate) fn record_preempted(&self) {
        self.preempted.fetch_add(1, Ordering::Relaxed);
    }

    /// Pods bound so far.
    pub fn scheduled(&self) -> u64 {
        self.scheduled.load(Ordering::Relaxed)
    }

    /// Attempts that ended unschedulable so far.
    pub fn unschedulable(&self) -> u64 {
        self.unschedulable.load(Ordering::Relaxed)
    }

    /// Attempts that ended in an error so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Pods evicted by preemption so far.
    pub fn preempted(&self) -> u64 {
        self.preempted.load(Ordering::Relaxed)
    }

    /// Wakes [`SchedulerMetrics::changed`] waiters: called when an attempt
    /// or a binding has finished, the moments the scheduler may go idle.
    pub(crate) fn notify(&self) {
        self.progress.notify_waiters();
    }

    /// Resolves at the next moment an attempt or a binding finishes. Create
    /// the future (and `enable` it) before checking the state it guards.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.progress.notified()
    }

    /// The counts and histograms now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let last = self.last_scheduled_ns.load(Ordering::Relaxed);
        MetricsSnapshot {
            scheduled: self.scheduled.load(Ordering::Relaxed),
            unschedulable: self.unschedulable.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            preempted: self.preempted.load(Ordering::Relaxed),
            last_scheduled_at: (last > 0).then(|| self.base + Duration::from_nanos(last)),
            attempt_scheduled: self.attempt_scheduled.snapshot(),
            attempt_failed: self.attempt_failed.snapshot(),
            cycle_scheduled: self.cycle_scheduled.snapshot(),
        }
    }
}

/// [`SchedulerMetrics`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Pods bound.
    pub scheduled: u64,
    /// Attempts that ended unschedulable.
    pub unschedulable: u64,
    /// Attempts that ended in an error.
    pub errors: u64,
    /// Pods evicted by preemption.
    pub preempted: u64,
    /// When the last pod was bound.
    pub last_scheduled_at: Option<Instant>,
    /// Attempts that bound their pod: pop to Bind done.
    pub attempt_scheduled: HistogramSnapshot,
    /// Attempts that failed: pop to requeued.
    pub attempt_failed: HistogramSnapshot,
    /// Attempts that found a node: pop to the binding cycle's start.
    pub cycle_scheduled: HistogramSnapshot,
}

impl MetricsSnapshot {
    /// What happened after `earlier` (a snapshot of the same scheduler);
    /// `last_scheduled_at` stays this snapshot's.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            scheduled: self.scheduled - earlier.scheduled.min(self.scheduled),
            unschedulable: self.unschedulable - earlier.unschedulable.min(self.unschedulable),
            errors: self.errors - earlier.errors.min(self.errors),
            preempted: self.preempted - earlier.preempted.min(self.preempted),
            last_scheduled_at: self.last_scheduled_at,
            attempt_scheduled: self.attempt_scheduled.since(&earlier.attempt_scheduled),
            attempt_failed: self.attempt_failed.since(&earlier.attempt_failed),
            cycle_scheduled: self.cycle_scheduled.since(&earlier.cycle_scheduled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_tightly() {
        for v in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            33,
            1000,
            999_999,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket_of(v);
            assert!(b < BUCKETS, "{v}");
            assert!(bucket_upper(b) >= v, "{v}: upper {}", bucket_upper(b));
            if b > 0 {
                assert!(bucket_upper(b - 1) < v, "{v}: previous bucket holds it");
            }
            // Within 1/16 of the value.
            assert!(
                bucket_upper(b) - v <= v / 16,
                "{v}: upper {}",
                bucket_upper(b)
            );
        }
    }

    #[test]
    fn quantiles_and_differences() {
        let h = Histogram::default();
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let before = h.snapshot();
        assert_eq!(before.count(), 100);
        let p50 = before.quantile(0.5);
        assert!(
            p50 >= Duration::from_micros(50) && p50 <= Duration::from_nanos(53_125),
            "{p50:?}"
        );
        let p99 = before.quantile(0.99);
        assert!(
            p99 >= Duration::from_micros(99) && p99 <= Duration::from_nanos(105_200),
            "{p99:?}"
        );
        assert_eq!(before.mean(), Duration::from_nanos(50_500));
        h.record(Duration::from_millis(5));
        let after = h.snapshot().since(&before);
        assert_eq!(after.count(), 1);
        assert!(after.quantile(0.5) >= Duration::from_millis(5));
        assert!(after.max() <= Duration::from_nanos(5_000_000 + 5_000_000 / 16));
        assert_eq!(HistogramSnapshot::default().quantile(0.9), Duration::ZERO);
    }
}
