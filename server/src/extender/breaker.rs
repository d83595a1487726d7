//! A circuit breaker as a tower layer: after enough failed calls in a row
//! the extender is not called at all for a cool-down, then one probe call
//! decides whether it is back.
//!
//! ```text
//!             N failures in a row              cool-down passed: next call
//!   Closed ───────────────────────────▶ Open ─────────────────────────────▶ HalfOpen
//!     ▲  ▲                               ▲                                  (one probe)
//!     │  └── a new stream (handshake) ───┤                                     │
//!     │                                  └──────── the probe fails ────────────┤
//!     └──────────────────────── the probe succeeds ────────────────────────────┘
//! ```
//!
//! * Closed: calls go through; a success resets the count of failures.
//! * Open: calls fail at once with [`CallError::CircuitOpen`] saying why
//!   and for how long; nothing reaches the extender.
//! * HalfOpen: the first call after the cool-down is the probe; calls made
//!   while it runs fail at once. A probe abandoned by its caller (not a
//!   failure of the extender) lets the next call probe.
//!
//! What counts as a failure is the classifier's to say (the connection
//! counts timeouts, a broken or missing stream and answers out of protocol;
//! an extender answering `Error` on purpose works as designed). A breaker
//! with a threshold of 0 never opens. Its state is published through the
//! extender's metrics; opening is the start of an outage for the
//! extender's outage reporter (one line saying what the breaker does and
//! when it probes), closing its end, and the changes in between are DEBUG.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::call_error::CallError;
use crate::config::extenders::CircuitBreakerConfig;
use crate::metrics::ExtenderMetrics;
use crate::outage::{Outage, human};

/// Whether a failed call says the extender is unhealthy: if so, what went
/// wrong (as the breaker's messages quote it).
pub type Classify = Arc<dyn Fn(&BoxError) -> Option<String> + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

impl Mode {
    fn slot(self) -> u64 {
        match self {
            Mode::Closed => 0,
            Mode::Open { .. } => 1,
            Mode::HalfOpen { .. } => 2,
        }
    }
}

#[derive(Debug)]
struct State {
    mode: Mode,
    /// Failures in a row so far.
    failures: u32,
    /// What the last counted failure was.
    last_error: String,
}

/// The breaker's shared state: every clone of the service, and the
/// connection (which resets it on a new stream), see the same.
#[derive(Debug)]
pub struct Breaker {
    extender: &'static str,
    cfg: CircuitBreakerConfig,
    state: Mutex<State>,
    metrics: Arc<ExtenderMetrics>,
    outage: Arc<Outage>,
}

/// What the breaker decided for one call.
enum Admit {
    Call { probe: bool },
    Refuse(CallError),
}

impl Breaker {
    /// A closed breaker for `extender`.
    pub fn new(
        extender: &'static str,
        cfg: CircuitBreakerConfig,
        metrics: Arc<ExtenderMetrics>,
        outage: Arc<Outage>,
    ) -> Arc<Self> {
        Arc::new(Self {
            extender,
            cfg,
            state: Mutex::new(State {
                mode: Mode::Closed,
                failures: 0,
                last_error: String::new(),
            }),
            metrics,
            outage,
        })
    }

    fn set(&self, st: &mut State, mode: Mode) {
        st.mode = mode;
        self.metrics.circuit_state.set(mode.slot());
    }

    fn admit(&self) -> Admit {
        if self.cfg.consecutive_failures == 0 {
            return Admit::Call { probe: false };
        }
        let mut st = self.state.lock();
        match st.mode {
            Mode::Closed => Admit::Call { probe: false },
            Mode::Open { until } => {
                let now = Instant::now();
                if now < until {
                    return Admit::Refuse(CallError::CircuitOpen(format!(
                        "circuit breaker open after {} failed calls in a row (the last: {}); calls fail at once for {:.1?} more",
                        st.failures,
                        st.last_error,
                        until - now
                    )));
                }
                self.set(&mut st, Mode::HalfOpen { probing: true });
                tracing::debug!(
                    extender = self.extender,
                    "circuit breaker half-open: the next call probes the extender"
                );
                Admit::Call { probe: true }
            }
            Mode::HalfOpen { probing: true } => Admit::Refuse(CallError::CircuitOpen(format!(
                "circuit breaker open after {} failed calls in a row (the last: {}); a probe call is under way, other calls fail at once until it ends",
                st.failures, st.last_error
            ))),
            Mode::HalfOpen { probing: false } => {
                self.set(&mut st, Mode::HalfOpen { probing: true });
                Admit::Call { probe: true }
            }
        }
    }

    /// Records a call's outcome.
    fn record(&self, probe: bool, failure: Option<String>) {
        if self.cfg.consecutive_failures == 0 {
            return;
        }
        let mut st = self.state.lock();
        match failure {
            None => {
                st.failures = 0;
                if st.mode != Mode::Closed {
                    self.set(&mut st, Mode::Closed);
                    drop(st);
                    tracing::debug!(
                        extender = self.extender,
                        "circuit breaker closed: the extender answered the probe"
                    );
                    self.outage.succeeded();
                }
            }
            Some(error) => {
                st.failures = st.failures.saturating_add(1);
                st.last_error = error;
                let open = match st.mode {
                    Mode::Closed => st.failures >= self.cfg.consecutive_failures,
                    Mode::HalfOpen { .. } => probe,
                    Mode::Open { .. } => false,
                };
                if open {
                    let until = Instant::now() + self.cfg.cool_down;
                    self.set(&mut st, Mode::Open { until });
                    self.metrics.circuit_opened.inc();
                    let (failures, error) = (st.failures, st.last_error.clone());
                    drop(st);
                    tracing::debug!(
                        extender = self.extender, failures, last_error = %error,
                        "circuit breaker open after {failures} failed calls in a row"
                    );
                    let cool_down = human(self.cfg.cool_down);
                    self.outage.failed(
                        &format!("{failures} calls in a row failed, the last: {error}"),
                        &|| format!("its circuit breaker is open: calls fail at once for {cool_down}, then one call probes it"),
                    );
                }
            }
        }
    }

    /// A probe that ended without an outcome (its caller went away): the
    /// next call probes.
    fn probe_abandoned(&self) {
        let mut st = self.state.lock();
        if st.mode == (Mode::HalfOpen { probing: true }) {
            self.set(&mut st, Mode::HalfOpen { probing: false });
        }
    }

    /// Closes the breaker (a new stream opened: the extender is back).
    pub fn reset(&self, why: &str) {
        let mut st = self.state.lock();
        st.failures = 0;
        if st.mode != Mode::Closed {
            self.set(&mut st, Mode::Closed);
            tracing::debug!(extender = self.extender, "circuit breaker closed: {why}");
        }
    }

    /// Counts a failure found after the call returned (an answer whose
    /// content turned out unusable).
    pub fn record_failure(&self, error: String) {
        self.record(false, Some(error));
    }

    /// The state, as the metrics name it.
    pub fn state_name(&self) -> &'static str {
        crate::metrics::CIRCUIT_STATES[self.state.lock().mode.slot() as usize]
    }

    /// How long the breaker stays open from now (zero unless open).
    pub fn open_for(&self) -> Duration {
        match self.state.lock().mode {
            Mode::Open { until } => until.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        }
    }
}

/// The layer.
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    breaker: Arc<Breaker>,
    classify: Classify,
}

impl CircuitBreakerLayer {
    /// A layer over `breaker`, counting the errors `classify` says are
    /// failures.
    pub fn new(breaker: Arc<Breaker>, classify: Classify) -> Self {
        Self { breaker, classify }
    }
}

impl<S> Layer<S> for CircuitBreakerLayer {
    type Service = CircuitBreaker<S>;

    fn layer(&self, inner: S) -> CircuitBreaker<S> {
        CircuitBreaker {
            inner,
            breaker: self.breaker.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// The service: refuses calls while open, records outcomes.
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    breaker: Arc<Breaker>,
    classify: Classify,
}

impl<S, R> Service<R> for CircuitBreaker<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let probe = match self.breaker.admit() {
            Admit::Refuse(e) => return Box::pin(std::future::ready(Err(e.into()))),
            Admit::Call { probe } => probe,
        };
        let fut = self.inner.call(req);
        let mut outcome = Outcome {
            breaker: self.breaker.clone(),
            probe,
            done: false,
        };
        let classify = self.classify.clone();
        Box::pin(async move {
            let r = fut.await.map_err(Into::into);
            let failure = match &r {
                Err(e) => classify(e),
                Ok(_) => None,
            };
            outcome.done = true;
            outcome.breaker.record(outcome.probe, failure);
            r
        })
    }
}

/// Tells the breaker when a probe's caller went away before its outcome.
struct Outcome {
    breaker: Arc<Breaker>,
    probe: bool,
    done: bool,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if self.probe && !self.done {
            self.breaker.probe_abandoned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn svc(
        breaker: &Arc<Breaker>,
        fail: Arc<std::sync::atomic::AtomicBool>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    ) -> impl Service<(), Response = (), Error = BoxError> + Clone {
        let inner = tower::service_fn(move |()| {
            let fail = fail.clone();
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if fail.load(std::sync::atomic::Ordering::SeqCst) {
                    Err::<(), BoxError>(CallError::Timeout(Duration::from_secs(1)).into())
                } else {
                    Ok(())
                }
            }
        });
        CircuitBreakerLayer::new(
            breaker.clone(),
            Arc::new(|e: &BoxError| {
                (!matches!(e.downcast_ref::<CallError>(), Some(CallError::Remote(_))))
                    .then(|| e.to_string())
            }),
        )
        .layer(inner)
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_the_threshold_fails_fast_then_probes_once_after_the_cool_down() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let metrics = Arc::new(ExtenderMetrics::default());
        let breaker = Breaker::new(
            "x",
            CircuitBreakerConfig {
                consecutive_failures: 3,
                cool_down: Duration::from_secs(10),
            },
            metrics.clone(),
            Outage::new("extender \"x\""),
        );
        let fail = Arc::new(AtomicBool::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let s = svc(&breaker, fail.clone(), calls.clone());
        for _ in 0..3 {
            assert!(s.clone().oneshot(()).await.is_err());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(breaker.state_name(), "open");
        assert_eq!(metrics.circuit_opened.get(), 1);
        // Open: refused without a call, saying why and for how long.
        let e = s.clone().oneshot(()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "circuit breaker open after 3 failed calls in a row (the last: no answer within 1s); calls fail at once for 10.0s more"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // After the cool-down one probe goes through; it fails: open again.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(s.clone().oneshot(()).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(breaker.state_name(), "open");
        assert_eq!(metrics.circuit_opened.get(), 2);
        // The next probe succeeds: closed, calls go through again.
        tokio::time::advance(Duration::from_secs(10)).await;
        fail.store(false, Ordering::SeqCst);
        assert!(s.clone().oneshot(()).await.is_ok());
        assert_eq!(breaker.state_name(), "closed");
        assert_eq!(metrics.circuit_state.get(), 0);
        assert!(s.clone().oneshot(()).await.is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count_and_a_probe_in_flight_holds_other_calls_back() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let metrics = Arc::new(ExtenderMetrics::default());
        let breaker = Breaker::new(
            "x",
            CircuitBreakerConfig {
                consecutive_failures: 2,
                cool_down: Duration::from_secs(1),
            },
            metrics,
            Outage::new("extender \"x\""),
        );
        let fail = Arc::new(AtomicBool::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let s = svc(&breaker, fail.clone(), calls.clone());
        assert!(s.clone().oneshot(()).await.is_err());
        fail.store(false, Ordering::SeqCst);
        assert!(s.clone().oneshot(()).await.is_ok());
        fail.store(true, Ordering::SeqCst);
        assert!(s.clone().oneshot(()).await.is_err());
        assert_eq!(breaker.state_name(), "closed", "not two in a row");
        assert!(s.clone().oneshot(()).await.is_err());
        assert_eq!(breaker.state_name(), "open");

        // A probe whose caller goes away lets the next call probe.
        tokio::time::advance(Duration::from_secs(1)).await;
        let mut probe = s.clone();
        let pending = probe.ready().await.unwrap().call(());
        assert_eq!(breaker.state_name(), "half_open");
        let other = s.clone().oneshot(()).await.unwrap_err();
        assert!(
            other.to_string().contains("a probe call is under way"),
            "{other}"
        );
        drop(pending);
        fail.store(false, Ordering::SeqCst);
        assert!(s.clone().oneshot(()).await.is_ok());
        assert_eq!(breaker.state_name(), "closed");

        // A reset (a new stream) closes an open breaker at once.
        fail.store(true, Ordering::SeqCst);
        assert!(s.clone().oneshot(()).await.is_err());
        assert!(s.clone().oneshot(()).await.is_err());
        assert_eq!(breaker.state_name(), "open");
        breaker.reset("a new stream");
        assert_eq!(breaker.state_name(), "closed");
    }

    #[tokio::test]
    async fn a_threshold_of_zero_never_opens() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let breaker = Breaker::new(
            "x",
            CircuitBreakerConfig {
                consecutive_failures: 0,
                cool_down: Duration::from_secs(1),
            },
            Arc::new(ExtenderMetrics::default()),
            Outage::new("extender \"x\""),
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let s = svc(&breaker, Arc::new(AtomicBool::new(true)), calls.clone());
        for _ in 0..20 {
            assert!(s.clone().oneshot(()).await.is_err());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 20);
        assert_eq!(breaker.state_name(), "closed");
    }
}
