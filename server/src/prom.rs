//! Prometheus text exposition (format 0.0.4) and the lock-free instruments
//! behind it: counters and fixed-bucket histograms, each a handful of
//! relaxed atomics, so that recording never locks, allocates or formats.
//! Label sets are resolved to array slots when the metrics are built.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `count` bucket bounds starting at `start`, each `factor` times the last
/// (as client_golang's ExponentialBuckets computes them, by repeated
/// multiplication, so the printed `le` values are the same).
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b *= factor;
    }
    out
}

/// Formats a float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` does
/// (which client_golang uses for `le` labels and sample values): the
/// shortest representation, with an exponent below 1e-4 and from 1e21 up.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        // Rust prints `1.5e-5`; Go prints `1.5e-05`.
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    format!("{v}")
}

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram over fixed upper bounds. Values are recorded as integers in
/// a unit (nanoseconds for durations, 1 for counts); `scale` converts the
/// unit to what the exposition shows (1e-9 for seconds).
#[derive(Debug)]
pub struct Histogram {
    /// Bucket bounds in the recording unit: a value `v` falls in the first
    /// bucket with `v <= bound`.
    bounds: Box<[u64]>,
    /// The bounds as exposed (`le`), formatted once.
    le: Box<[String]>,
    /// One count per bound plus the `+Inf` bucket (not cumulative).
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    scale: f64,
}

impl Histogram {
    /// A histogram whose exposed bounds are `bounds` (ascending), recording
    /// integer values in units of `scale` exposed units.
    pub fn new(bounds: &[f64], scale: f64) -> Self {
        Self {
            // A bound of 0.1 ms in ns is 100000 (floored: a value equal to
            // the bound, in whole units, still falls in it).
            bounds: bounds
                .iter()
                .map(|b| (b / scale + 1e-6).floor() as u64)
                .collect(),
            le: bounds.iter().map(|b| format_float(*b)).collect(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            scale,
        }
    }

    /// A duration histogram over bounds in seconds.
    pub fn seconds(bounds: &[f64]) -> Self {
        Self::new(bounds, 1e-9)
    }

    /// Records one value in the recording unit.
    #[inline]
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Records a duration (for histograms built with [`Histogram::seconds`]).
    #[inline]
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The sum of the recorded values, in exposed units.
    pub fn sum(&self) -> f64 {
        // Dividing by a power of ten (rather than multiplying by its
        // inverse) keeps sums such as 0.003 free of float noise.
        self.sum.load(Ordering::Relaxed) as f64 / (1.0 / self.scale).round()
    }
}

/// Writes the text exposition format.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// Label pairs of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

fn write_labels(out: &mut String, labels: Labels<'_>, extra: Option<(&str, &str)>) {
    if labels.is_empty() && extra.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(extra) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `# HELP` and `# TYPE` lines of a metric family.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample with an integer value.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, v: u64) {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {v}");
    }

    /// One sample with a float value.
    pub fn sample_f64(&mut self, name: &str, labels: Labels<'_>, v: f64) {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", format_float(v));
    }

    /// A histogram's `_bucket` (cumulative, with `le`), `_sum` and `_count`
    /// samples.
    pub fn histogram(&mut self, name: &str, labels: Labels<'_>, h: &Histogram) {
        let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (i, c) in counts.iter().enumerate() {
            cumulative += c;
            let le = h.le.get(i).map_or("+Inf", String::as_str);
            self.out.push_str(&bucket);
            write_labels(&mut self.out, labels, Some(("le", le)));
            let _ = writeln!(self.out, " {cumulative}");
        }
        self.sample_f64(&format!("{name}_sum"), labels, h.sum());
        self.sample(&format!("{name}_count"), labels, cumulative);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_does() {
        assert_eq!(format_float(0.001), "0.001");
        assert_eq!(format_float(0.0001), "0.0001");
        assert_eq!(format_float(0.00001), "1e-05");
        assert_eq!(format_float(1.5e-5), "1.5e-05");
        assert_eq!(format_float(16.384), "16.384");
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(64.0), "64");
        assert_eq!(format_float(0.0), "0");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(1e21), "1e+21");
        // Repeated multiplication keeps float noise, as Go's does.
        let b = exponential_buckets(0.00001, 1.5, 20);
        assert_eq!(format_float(b[1]), "1.5000000000000002e-05");
        assert_eq!(format_float(b[2]), "2.2500000000000005e-05");
        assert_eq!(b.len(), 20);
        let b = exponential_buckets(0.001, 2.0, 15);
        assert_eq!(format_float(b[14]), "16.384");
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_inf_sum_and_count() {
        let h = Histogram::seconds(&[0.001, 0.002, 0.004]);
        h.observe_duration(Duration::from_micros(500));
        h.observe_duration(Duration::from_millis(1)); // on the bound: le=0.001
        h.observe_duration(Duration::from_micros(1500));
        h.observe_duration(Duration::from_secs(1));
        let mut e = Exposition::new();
        e.family("x_seconds", "histogram", "A test.");
        e.histogram("x_seconds", &[("result", "scheduled")], &h);
        assert_eq!(
            e.finish(),
            "# HELP x_seconds A test.\n\
             # TYPE x_seconds histogram\n\
             x_seconds_bucket{result=\"scheduled\",le=\"0.001\"} 2\n\
             x_seconds_bucket{result=\"scheduled\",le=\"0.002\"} 3\n\
             x_seconds_bucket{result=\"scheduled\",le=\"0.004\"} 3\n\
             x_seconds_bucket{result=\"scheduled\",le=\"+Inf\"} 4\n\
             x_seconds_sum{result=\"scheduled\"} 1.003\n\
             x_seconds_count{result=\"scheduled\"} 4\n"
        );
    }

    #[test]
    fn count_histograms_and_escaped_labels() {
        let h = Histogram::new(&exponential_buckets(1.0, 2.0, 3), 1.0);
        for v in [1, 2, 3, 9] {
            h.observe(v);
        }
        let mut e = Exposition::new();
        e.histogram("v", &[], &h);
        e.sample("c", &[("a", "x\"y\\z\nw")], 7);
        assert_eq!(
            e.finish(),
            "v_bucket{le=\"1\"} 1\nv_bucket{le=\"2\"} 2\nv_bucket{le=\"4\"} 3\nv_bucket{le=\"+Inf\"} 4\n\
             v_sum 15\nv_count 4\nc{a=\"x\\\"y\\\\z\\nw\"} 7\n"
        );
    }
}
