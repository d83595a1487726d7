//! What a replay reports, per configuration and side by side.

use std::collections::HashMap;
use std::sync::Arc;

/// One configuration's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigReport {
    /// The configuration's name (its file's, or as given).
    pub name: String,
    /// Pods of its profiles that arrived (created pending) during the
    /// replay, and those pending in the trace's first state.
    pub arrived: u64,
    /// Of those, how many were bound.
    pub scheduled: u64,
    /// Still pending at the end.
    pub pending: u64,
    /// Deleted (as the trace says) before they were bound.
    pub deleted_pending: u64,
    /// Bound to a node that left, and so deleted by the pod garbage
    /// collector (nothing recreates them: controllers are not replayed).
    pub deleted_with_node: u64,
    /// Why the pods still pending are: each reason of their last failed
    /// attempt, with how many pods it held back, most first.
    pub pending_reasons: Vec<(String, u64)>,
    /// Time from arrival to binding, in simulated time (microseconds).
    pub time_to_schedule: Percentiles,
    /// Scheduling attempts that failed.
    pub failed_attempts: u64,
    /// Pods that preempted others.
    pub preemptors: u64,
    /// Pods evicted for them.
    pub victims: u64,
    /// PodGroups seen with members of its profiles.
    pub gangs: u64,
    /// PodGroups all of whose pods were bound.
    pub gangs_whole: u64,
    /// PodGroups some but not all of whose pods were bound.
    pub gangs_partial: u64,
    /// Samples over simulated time.
    pub series: Series,
    /// Records of the trace applied.
    pub records: u64,
    /// Records the copy refused (an object an API server would not take).
    pub refused_records: u64,
    /// Why the first refused record was.
    pub first_refusal: Option<String>,
    /// Simulated time replayed (microseconds).
    pub simulated_micros: u64,
    /// Wall-clock time the replay took (microseconds).
    pub wall_micros: u64,
}

/// p50, p99 and max, in microseconds (0 with no samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// How many samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

/// State sampled over simulated time: one entry per sample in each
/// vector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// When (microseconds of simulated time).
    pub t: Vec<u64>,
    /// Pods pending (of the configuration's profiles).
    pub pending: Vec<u64>,
    /// Pods bound, all schedulers'.
    pub running: Vec<u64>,
    /// Per resource (`cpu`, `memory`, `pods`, then extended resources as
    /// nodes announce them): requested by bound pods over allocatable on
    /// schedulable nodes, in [0, 1].
    pub utilization: Vec<(String, Vec<f64>)>,
    /// The most CPU free on one schedulable node (millicores): the largest
    /// pod (by CPU) that would still fit.
    pub largest_free_cpu_milli: Vec<i64>,
    /// The most memory free on one schedulable node (bytes).
    pub largest_free_memory: Vec<i64>,
    /// How scattered free CPU is: 1 - (largest free on a node / free in
    /// all), in [0, 1].
    pub cpu_fragmentation: Vec<f64>,
}

/// Two columns compared pod by pod: configurations, or the recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// The first column's name.
    pub a: String,
    /// The second's.
    pub b: String,
    /// Pods either placed.
    pub compared: u64,
    /// Placed by both on the same node.
    pub same_node: u64,
    /// Placed by both on different nodes.
    pub different_node: u64,
    /// Placed only by `a`.
    pub only_a: u64,
    /// Placed only by `b`.
    pub only_b: u64,
}

/// The whole report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Each configuration, in the order given.
    pub configs: Vec<ConfigReport>,
    /// Every pair of configurations; with a recorded trace, each
    /// configuration against the recording (named `recorded`) as well.
    pub comparisons: Vec<Comparison>,
    /// The recorded scheduler's placements, when the trace holds its
    /// decisions.
    pub recorded_scheduled: Option<u64>,
    /// Records read from the trace.
    pub records: u64,
    /// Segments read.
    pub segments: u32,
    /// The seed the schedulers broke ties with.
    pub seed: u64,
}

/// A log-linear histogram of durations (microseconds): 64 buckets per
/// power of two, so percentiles are within 1.1% of the truth, in
/// bounded memory however long the trace.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: HashMap<u32, u64>,
    count: u64,
    max: u64,
}

impl Histogram {
    fn bucket(v: u64) -> u32 {
        if v < 64 {
            return v as u32;
        }
        let exp = 63 - v.leading_zeros(); // >= 6
        let mantissa = (v >> (exp - 6)) & 63;
        (exp - 5) * 64 + mantissa as u32
    }

    /// The largest value bucket `b` holds.
    fn upper(b: u32) -> u64 {
        if b < 64 {
            return b as u64;
        }
        let exp = b / 64 + 5;
        let mantissa = (b % 64) as u64;
        ((65 + mantissa) << (exp - 6)) - 1
    }

    /// Adds a sample.
    pub fn record(&mut self, v: u64) {
        *self.counts.entry(Self::bucket(v)).or_default() += 1;
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// p50, p99 and the maximum.
    pub fn percentiles(&self) -> Percentiles {
        if self.count == 0 {
            return Percentiles::default();
        }
        let mut buckets: Vec<(u32, u64)> = self.counts.iter().map(|(b, c)| (*b, *c)).collect();
        buckets.sort_unstable();
        let at = |q: f64| {
            let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, c) in &buckets {
                seen += c;
                if seen >= rank {
                    return Self::upper(*b).min(self.max);
                }
            }
            self.max
        };
        Percentiles {
            count: self.count,
            p50: at(0.5),
            p99: at(0.99),
            max: self.max,
        }
    }
}

/// Where each pod went, per column, until every column has said: then the
/// pod is counted in every pair's comparison and forgotten (so the memory
/// held is the pods some configuration has not decided yet, not the
/// trace's).
/// Per column: not decided yet (`None`), or bound to a node or never
/// bound (`Some`).
type Row = Vec<Option<Option<Arc<str>>>>;

pub(crate) struct Comparator {
    names: Vec<String>,
    open: HashMap<Arc<str>, Row>,
    pairs: Vec<Comparison>,
}

impl Comparator {
    pub fn new(names: Vec<String>) -> Self {
        let mut pairs = Vec::new();
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                pairs.push(Comparison {
                    a: names[i].clone(),
                    b: names[j].clone(),
                    ..Default::default()
                });
            }
        }
        Self {
            names,
            open: HashMap::new(),
            pairs,
        }
    }

    /// Column `col` decided pod `uid`: bound to `node`, or never bound.
    pub fn decided(&mut self, col: usize, uid: Arc<str>, node: Option<Arc<str>>) {
        let n = self.names.len();
        if n < 2 {
            return;
        }
        let row = self
            .open
            .entry(uid.clone())
            .or_insert_with(|| vec![None; n]);
        if row[col].is_some() {
            return;
        }
        row[col] = Some(node);
        if row.iter().all(Option::is_some) {
            let row = self.open.remove(&uid).unwrap_or_default();
            self.count(&row);
        }
    }

    fn count(&mut self, row: &[Option<Option<Arc<str>>>]) {
        let mut k = 0;
        for i in 0..row.len() {
            for j in i + 1..row.len() {
                let a = row[i].clone().flatten();
                let b = row[j].clone().flatten();
                let p = &mut self.pairs[k];
                k += 1;
                match (a, b) {
                    (None, None) => continue,
                    (Some(a), Some(b)) if a == b => p.same_node += 1,
                    (Some(_), Some(_)) => p.different_node += 1,
                    (Some(_), None) => p.only_a += 1,
                    (None, Some(_)) => p.only_b += 1,
                }
                p.compared += 1;
            }
        }
    }

    /// Counts the pods some column never decided (as never bound there).
    pub fn finish(mut self) -> Vec<Comparison> {
        let rows: Vec<_> = self.open.drain().map(|(_, r)| r).collect();
        for r in rows {
            self.count(&r);
        }
        self.pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        let p = h.percentiles();
        assert_eq!(p.count, 10_000);
        assert_eq!(p.max, 1_000_000);
        assert!((p.p50 as f64 - 500_000.0).abs() / 500_000.0 < 0.02, "{p:?}");
        assert!((p.p99 as f64 - 990_000.0).abs() / 990_000.0 < 0.02, "{p:?}");
        assert_eq!(Histogram::default().percentiles(), Percentiles::default());
    }

    #[test]
    fn comparisons_count_each_pod_once_per_pair() {
        let mut c = Comparator::new(vec!["a".into(), "b".into(), "recorded".into()]);
        let n = |s: &str| Some(Arc::<str>::from(s));
        c.decided(0, "p1".into(), n("x"));
        c.decided(1, "p1".into(), n("x"));
        c.decided(2, "p1".into(), n("y"));
        c.decided(0, "p2".into(), n("x"));
        c.decided(1, "p2".into(), None);
        c.decided(0, "p3".into(), None);
        let pairs = c.finish();
        assert_eq!(
            pairs[0],
            Comparison {
                a: "a".into(),
                b: "b".into(),
                compared: 2,
                same_node: 1,
                different_node: 0,
                only_a: 1,
                only_b: 0
            }
        );
        assert_eq!(pairs[1].different_node, 1);
        assert_eq!(pairs[1].only_a, 1);
        assert_eq!(pairs[2].b, "recorded");
    }
}
