//! Outages reported for people: one line when something berthd depends on
//! (the API server, a remote extender) stops answering, a summary every
//! [`summary_every`] (a minute unless set) while it stays down, one line
//! when it is back. The
//! attempts themselves are logged at DEBUG by whoever makes them and
//! counted in their metrics (`rest_client_requests_total{code="<error>"}`,
//! `berth_extender_calls_total`, `berth_extender_skips_total`), so an
//! outage of fourteen minutes is a handful of lines, not one per attempt.
//!
//! ```text
//!            first failure: WARN "<subject> is down: <error>; <what happens meanwhile>"
//!   Up ─────────────────────────────────────────────────────────────────────▶ Down
//!    ▲      every SUMMARY_EVERY while down: WARN "<subject> still down after ...:   │
//!    │            N attempts failed, M skipped since ...; <context>"                 │
//!    └───────────── first success: INFO "<subject> is back after ...: ..." ◀────────┘
//! ```
//!
//! A leaf module: it knows nothing of who reports (the kube client's
//! layer, the extender connection), so both use it alike.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How often an outage that lasts is summarized, unless
/// [`set_summary_every`] says otherwise.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

static SUMMARY_EVERY_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(SUMMARY_EVERY.as_millis() as u64);

/// Sets how often the reporters made from now on summarize an outage
/// (berthd's `--outage-summary-interval`).
pub fn set_summary_every(every: Duration) {
    let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    SUMMARY_EVERY_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// How often the reporters made now summarize an outage.
pub fn summary_every() -> Duration {
    Duration::from_millis(SUMMARY_EVERY_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// Extra words for a summary (how many pods wait), asked when one is
/// written.
pub type Context = Box<dyn Fn() -> String + Send + Sync>;

#[derive(Debug, Default)]
struct Counts {
    failed: u64,
    skipped: u64,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    last_summary: Instant,
    last_error: String,
    /// Since the last summary.
    recent: Counts,
    /// Since the outage began.
    total: Counts,
}

/// One thing berthd depends on, as its outages are reported.
pub struct Outage {
    subject: String,
    summary_every: Duration,
    down: Mutex<Option<Down>>,
    context: Mutex<Option<Context>>,
    outages: std::sync::atomic::AtomicU64,
    /// When the last outage ended.
    ended: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outage")
            .field("subject", &self.subject)
            .field("down", &self.is_down())
            .finish()
    }
}

/// `1m30s`, `14m0s`, `2.5s`: a duration as a person reads it.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h{}m", secs / 3600, (secs % 3600) / 60)
    } else if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl Outage {
    /// The reporter for `subject` ("the API server 10.0.0.1:6443",
    /// `extender "gpu"`), summarizing every [`summary_every`].
    pub fn new(subject: impl Into<String>) -> Arc<Self> {
        Self::with_summary_every(subject, summary_every())
    }

    /// The reporter, summarizing every `every`.
    pub fn with_summary_every(subject: impl Into<String>, every: Duration) -> Arc<Self> {
        Arc::new(Self {
            subject: subject.into(),
            summary_every: every,
            down: Mutex::new(None),
            context: Mutex::new(None),
            outages: std::sync::atomic::AtomicU64::new(0),
            ended: Mutex::new(None),
        })
    }

    /// What the subject is called in the lines.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Sets the words a summary ends with (asked each time one is
    /// written).
    pub fn set_context(&self, context: Context) {
        *self.context.lock() = Some(context);
    }

    /// Whether the subject is down now.
    pub fn is_down(&self) -> bool {
        self.down.lock().is_some()
    }

    /// Whether the subject is down, or came back less than `within` ago
    /// (the attempts that were under way end just after it is back: they
    /// belong to the outage too).
    pub fn down_or_back_within(&self, within: Duration) -> bool {
        self.is_down() || self.ended.lock().is_some_and(|t| t.elapsed() < within)
    }

    /// How many outages began so far.
    pub fn outages(&self) -> u64 {
        self.outages.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An attempt failed because the subject did not answer: the first
    /// failure of an outage is one WARN line with `error` and what happens
    /// meanwhile (`meanwhile` is asked only then); later ones count.
    pub fn failed(&self, error: &str, meanwhile: &dyn Fn() -> String) {
        let now = Instant::now();
        let mut down = self.down.lock();
        match down.as_mut() {
            Some(d) => {
                d.recent.failed += 1;
                d.total.failed += 1;
                if d.last_error != error {
                    d.last_error = error.to_string();
                }
            }
            None => {
                *down = Some(Down {
                    since: now,
                    last_summary: now,
                    last_error: error.to_string(),
                    recent: Counts {
                        failed: 1,
                        skipped: 0,
                    },
                    total: Counts {
                        failed: 1,
                        skipped: 0,
                    },
                });
                drop(down);
                self.outages
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let meanwhile = meanwhile();
                tracing::warn!(
                    subject = %self.subject, error, summary_every = %human(self.summary_every),
                    "{} is down: {error}; {meanwhile}; a summary follows every {} while it lasts",
                    self.subject,
                    human(self.summary_every)
                );
            }
        }
    }

    /// An attempt failed while the subject is down, counted without
    /// starting an outage (a single failure while it is up is its caller's
    /// to report).
    pub fn count_failed(&self) {
        if let Some(d) = self.down.lock().as_mut() {
            d.recent.failed += 1;
            d.total.failed += 1;
        }
    }

    /// An attempt that was not made because the subject is down (a call
    /// refused by an open circuit breaker, an ignorable extender skipped).
    pub fn skipped(&self) {
        if let Some(d) = self.down.lock().as_mut() {
            d.recent.skipped += 1;
            d.total.skipped += 1;
        }
    }

    /// [`Self::failed`] for an attempt sent at `sent`: one sent before the
    /// last outage ended says nothing new (it failed while the subject was
    /// down, and the attempts after it succeed) and only counts, so that
    /// attempts under way when the subject comes back do not begin another
    /// outage.
    pub fn failed_sent_at(&self, sent: Instant, error: &str, meanwhile: &dyn Fn() -> String) {
        let stale = self.ended.lock().is_some_and(|ended| sent < ended);
        if stale && !self.is_down() {
            return;
        }
        self.failed(error, meanwhile);
    }

    /// [`Self::succeeded`] for an attempt sent at `sent`: one sent before
    /// the outage began was answered before it, and does not end it.
    pub fn succeeded_sent_at(&self, sent: Instant) {
        let mut down = self.down.lock();
        if down.as_ref().is_some_and(|d| sent < d.since) {
            return;
        }
        let Some(d) = down.take() else {
            return;
        };
        // Said under the lock: an attempt that succeeds meanwhile waits,
        // so nothing it logs comes before the line that says it is back.
        self.back(d);
    }

    /// The subject answered: the end of an outage, if there was one, is
    /// one INFO line.
    pub fn succeeded(&self) {
        let mut down = self.down.lock();
        let Some(d) = down.take() else {
            return;
        };
        self.back(d);
    }

    fn back(&self, d: Down) {
        *self.ended.lock() = Some(Instant::now());
        let lasted = human(d.since.elapsed());
        tracing::info!(
            subject = %self.subject, lasted = %lasted, failed = d.total.failed, skipped = d.total.skipped,
            "{} is back after {lasted}: {} attempts failed and {} were skipped meanwhile",
            self.subject,
            d.total.failed,
            d.total.skipped
        );
    }

    /// Writes a summary if the subject has been down for a summary period
    /// since the last one. Call it every so often (see [`Self::spawn`]).
    pub fn tick(&self) {
        let now = Instant::now();
        let mut down = self.down.lock();
        let Some(d) = down.as_mut() else { return };
        if now.saturating_duration_since(d.last_summary) < self.summary_every {
            return;
        }
        let (failed, skipped) = (d.recent.failed, d.recent.skipped);
        let since = human(now.saturating_duration_since(d.last_summary));
        let lasted = human(now.saturating_duration_since(d.since));
        let error = d.last_error.clone();
        d.recent = Counts::default();
        d.last_summary = now;
        drop(down);
        let context = self
            .context
            .lock()
            .as_ref()
            .map(|c| format!("; {}", c()))
            .unwrap_or_default();
        tracing::warn!(
            subject = %self.subject, lasted = %lasted, failed, skipped, error = %error,
            "{} still down after {lasted}: {failed} attempts failed and {skipped} were skipped in the last {since}{context}; the last error: {error}",
            self.subject
        );
    }

    /// Summarizes while the returned task runs (until the reporter is
    /// dropped): a tick every tenth of the summary period.
    pub fn spawn(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let every = (self.summary_every / 10).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let Some(o) = weak.upgrade() else { return };
                o.tick();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::testing::Lines;

    /// Attempts under way when the subject goes down or comes back answer
    /// late: an answer to one sent before the outage began does not end
    /// it, and a failure of one sent before it ended does not begin
    /// another (seen as two "is down" lines 5 ms apart).
    #[tokio::test(start_paused = true)]
    async fn answers_to_attempts_sent_before_a_change_do_not_flap_it() {
        use tracing_subscriber::layer::SubscriberExt;
        // A subscriber of its own: callsites first hit without one would be
        // cached as uninteresting for the test beside it.
        let lines = Lines::default();
        let _guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
        let o = Outage::new("the API server");
        let early = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        o.failed_sent_at(Instant::now(), "connection refused", &|| String::new());
        assert!(o.is_down());
        o.succeeded_sent_at(early);
        assert!(
            o.is_down(),
            "an answer to an attempt sent before the outage"
        );
        tokio::time::advance(Duration::from_millis(10)).await;
        let during = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        o.succeeded_sent_at(Instant::now());
        assert!(!o.is_down());
        o.failed_sent_at(during, "connection reset", &|| String::new());
        assert!(
            !o.is_down(),
            "a failure of an attempt sent while it was down"
        );
        assert_eq!(o.outages(), 1);
        o.failed_sent_at(Instant::now(), "connection refused", &|| String::new());
        assert_eq!(o.outages(), 2, "a new attempt's failure is a new outage");
        let lines = lines.0.lock().clone();
        assert_eq!(lines.len(), 3, "down, back, down: {lines:#?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_a_line_down_a_summary_a_minute_and_a_line_back() {
        use tracing_subscriber::layer::SubscriberExt;
        let lines = Lines::default();
        let _guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
        let o = Outage::new("the API server 127.0.0.1:6443");
        let asked = Arc::new(AtomicUsize::new(0));
        let a = asked.clone();
        o.set_context(Box::new(move || {
            a.fetch_add(1, Ordering::SeqCst);
            "42 pods wait".into()
        }));
        o.succeeded();
        assert!(lines.0.lock().is_empty(), "no outage, nothing to say");
        // Fourteen minutes down, an attempt every second, half skipped.
        for s in 0..14 * 60 {
            if s % 2 == 0 {
                o.failed("connection refused", &|| "bindings wait".into());
            } else {
                o.skipped();
            }
            tokio::time::advance(Duration::from_secs(1)).await;
            o.tick();
        }
        o.succeeded();
        let lines = lines.0.lock().clone();
        let warn: Vec<&String> = lines
            .iter()
            .filter(|(l, _)| *l == tracing::Level::WARN)
            .map(|(_, m)| m)
            .collect();
        // One line down, one summary a minute (14), one line back.
        assert_eq!(warn.len(), 1 + 14, "{warn:#?}");
        assert_eq!(
            warn[0],
            "the API server 127.0.0.1:6443 is down: connection refused; bindings wait; a summary follows every 1m0s while it lasts"
        );
        assert_eq!(
            warn[1],
            "the API server 127.0.0.1:6443 still down after 1m0s: 30 attempts failed and 30 were skipped in the last 1m0s; 42 pods wait; the last error: connection refused"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 14);
        let info: Vec<&String> = lines
            .iter()
            .filter(|(l, _)| *l == tracing::Level::INFO)
            .map(|(_, m)| m)
            .collect();
        assert_eq!(
            info,
            [
                "the API server 127.0.0.1:6443 is back after 14m0s: 420 attempts failed and 420 were skipped meanwhile"
            ]
        );
        assert!(!o.is_down());
        assert_eq!(o.outages(), 1);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_millis(2500)), "2.5s");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 120)), "3h2m");
    }
}
