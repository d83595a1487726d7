//! [`Connection`]: berthd's side of one extender's stream.
//!
//! A task dials the extender, opens the `Session` stream, sends `Open`,
//! waits for `Hello` (checking the protocol version and that every
//! configured point is served), subscribes the stream to the node feed,
//! then reads answers until the stream ends. Then it fails every call in
//! flight at once, settles the pods waiting at Permit on this extender, and
//! dials again with capped exponential backoff and jitter.
//!
//! Calls go through a tower stack, outermost first:
//!
//! 1. the circuit breaker ([`super::breaker`]): after enough failed calls
//!    in a row, calls fail at once for a cool-down instead of each waiting
//!    out its timeout on a hung extender;
//! 2. the concurrency limit, shedding ([`super::shed`]): a call finding
//!    `maxConcurrentCalls` calls in flight fails at once instead of queueing
//!    behind them;
//! 3. the per-call timeout;
//! 4. [`RawCall`]: puts the request on the current stream *at once* (the
//!    cycle's pod first, once per stream), so a caller may start a call,
//!    do other work, and await the answer later; the answer is checked
//!    against the request ([`Reply`]) before the caller sees it.
//!
//! Every message from the extender that berthd cannot use (an answer to an
//! unknown, answered or abandoned request, a decision for a reservation
//! not waiting or already decided, an answer of the wrong shape) is a WARN
//! naming the extender and is counted in
//! `berth_extender_protocol_errors_total{extender,kind}`.
//!
//! Permit: a `PermitDecision` may overtake the Wait answer it decides (the
//! extender decided while its answer was on its way); it is kept while that
//! Permit request is awaited, and applied when the answer says Wait.
//!
//! Unreserves are kept in an outbox until acknowledged: sent at once,
//! re-sent on every new stream and periodically while unacknowledged. They
//! bypass the breaker: an Unreserve is owed whatever the extender's health.

mod backoff;
mod calls;
mod ids;
mod inner;
mod messages;
mod permit_book;
mod recent;
mod session;
mod stream;
mod unreserves;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::extender::v1::{self as pb, Hello};
use futures::FutureExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use self::backoff::{HEALTHY_SESSION, jitter, next_backoff};
pub use self::backoff::{INITIAL_BACKOFF, MAX_BACKOFF};
use self::calls::RawCall;
pub use self::calls::{CallRequest, Subject};
use self::inner::Inner;
pub use self::inner::{Dial, OnBack};
use self::permit_book::PermitBook;
use self::session::CYCLE_END_DELAY;
pub use self::stream::PROTOCOL_VERSION;
use super::answers::Answer;
pub use super::answers::{NeededPods, Reply};
use super::breaker::{Breaker, CircuitBreaker, CircuitBreakerLayer};
pub use super::call_error::CallError;
use super::feed::NodeFeed;
use super::shed::{Shed, ShedLayer};
use super::stats::{Stats, kind, point_slot, result_slot};
use crate::config::ExtenderConfig;
use crate::framework::Handle;
use crate::metrics::ExtenderMetrics;
use crate::outage::Outage;

/// Whether a failed call says the extender is unhealthy (what the circuit
/// breaker counts), and what went wrong: no answer in time, no stream or a
/// broken one, an answer out of protocol. An extender answering `Error`
/// (on purpose, for this pod), a call shed by berthd's own limit or
/// refused by the breaker do not count.
fn against_the_extender(timeout: Duration) -> super::breaker::Classify {
    Arc::new(move |e: &BoxError| {
        if e.is::<tower::timeout::error::Elapsed>() {
            return Some(CallError::Timeout(timeout).to_string());
        }
        match e.downcast_ref::<CallError>() {
            Some(CallError::Remote(_) | CallError::Overloaded(_) | CallError::CircuitOpen(_)) => {
                None
            }
            _ => Some(e.to_string()),
        }
    })
}

/// berthd's side of one extender.
pub struct Connection {
    inner: Arc<Inner>,
    stack: CallStack,
    created: Instant,
}

type CallStack = CircuitBreaker<Shed<tower::timeout::Timeout<RawCall>>>;

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("name", &self.inner.name)
            .field("endpoint", &self.inner.cfg.endpoint)
            .field("connected", &self.inner.session.read().is_some())
            .finish()
    }
}

impl Connection {
    /// A connection for `cfg`, not dialed yet (see [`Connection::start`]).
    pub fn new(cfg: ExtenderConfig, handle: Handle, feed: Arc<NodeFeed>) -> Self {
        // Plugin names are 'static; one per configured extender.
        let name: &'static str = Box::leak(cfg.name.clone().into_boxed_str());
        let (connected, _) = tokio::sync::watch::channel(0);
        let (outbox_len, _) = tokio::sync::watch::channel(0);
        let metrics = Arc::new(ExtenderMetrics::default());
        let outage = Outage::new(format!("extender {name:?}"));
        if tokio::runtime::Handle::try_current().is_ok() {
            outage.spawn();
        }
        let breaker = Breaker::new(name, cfg.circuit_breaker, metrics.clone(), outage.clone());
        let inner = Arc::new(Inner {
            outage,
            on_back: std::sync::OnceLock::new(),
            name,
            handle,
            feed,
            session: RwLock::new(None),
            next_id: AtomicU64::new(1),
            unreserves: Mutex::new(BTreeMap::new()),
            unreserve_kick: Notify::new(),
            cycle_end_due: AtomicBool::new(false),
            cycle_end_kick: Notify::new(),
            permits: Mutex::new(PermitBook::default()),
            stats: Stats::default(),
            metrics,
            breaker: breaker.clone(),
            connected,
            last_error: Mutex::new(None),
            outbox_len,
            cfg,
        });
        let stack = ServiceBuilder::new()
            .layer(CircuitBreakerLayer::new(
                breaker,
                against_the_extender(inner.cfg.timeout),
            ))
            .layer(ShedLayer::new(inner.cfg.max_concurrent_calls))
            .timeout(inner.cfg.timeout)
            .service(RawCall(inner.clone()));
        Self {
            inner,
            stack,
            created: Instant::now(),
        }
    }

    /// Starts dialing (and redialing) with `dial`, and the Unreserve
    /// re-sender.
    pub fn start(self: &Arc<Self>, dial: Dial) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut backoff = INITIAL_BACKOFF;
            let mut seed = u64::from(std::process::id()) | 1;
            loop {
                let started = tokio::time::Instant::now();
                let error = match inner.session_once(&dial).await {
                    Ok(()) => "the extender closed the stream".to_string(),
                    Err(e) => e,
                };
                if started.elapsed() >= HEALTHY_SESSION {
                    backoff = INITIAL_BACKOFF;
                }
                let delay = jitter(backoff, &mut seed);
                // Each attempt at DEBUG; the outage is one line when it
                // begins, summaries, and one line when it ends.
                tracing::debug!(extender = inner.name, error = %error, redial_in = ?delay, "extender unavailable");
                inner
                    .outage
                    .failed(&error, &|| inner.meanwhile(Some(delay)));
                *inner.last_error.lock() = Some(error);
                tokio::time::sleep(delay).await;
                backoff = next_backoff(backoff);
            }
        });
        let inner = self.inner.clone();
        tokio::spawn(async move {
            // CycleEnds that found no message to travel with.
            loop {
                inner.cycle_end_kick.notified().await;
                tokio::time::sleep(CYCLE_END_DELAY).await;
                inner.cycle_end_due.store(false, Ordering::Release);
                if let Some(s) = inner.current() {
                    s.flush_cycle_ends();
                }
            }
        });
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let every = inner.cfg.timeout.max(Duration::from_secs(1)) * 2;
                tokio::select! {
                    _ = inner.unreserve_kick.notified() => {}
                    _ = tokio::time::sleep(every) => {}
                }
                inner.flush_unreserves();
            }
        });
    }

    /// The configured name (the plugin's name).
    pub fn name(&self) -> &'static str {
        self.inner.name
    }

    /// The configuration.
    pub fn config(&self) -> &ExtenderConfig {
        &self.inner.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// What `/metrics` shows of this extender.
    pub fn metrics(&self) -> &ExtenderMetrics {
        &self.inner.metrics
    }

    /// The circuit breaker's state: `closed`, `open` or `half_open`.
    pub fn circuit_state(&self) -> &'static str {
        self.inner.breaker.state_name()
    }

    /// The extender's declaration on the current stream.
    pub fn hello(&self) -> Option<Hello> {
        self.inner.current().map(|s| s.hello.clone())
    }

    /// The score normalization the extender declared on the current stream.
    pub fn score_normalization(&self) -> pb::ScoreNormalization {
        self.inner
            .current()
            .and_then(|s| pb::ScoreNormalization::try_from(s.hello.score_normalization).ok())
            .unwrap_or(pb::ScoreNormalization::None)
    }

    /// Changes with each completed handshake (the count of them).
    pub fn connected(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.connected.subscribe()
    }

    /// Whether the extender completed a handshake and was sent the node
    /// list (`NodesSynced`) since berthd started: scheduling may count on it.
    pub fn is_started(&self) -> bool {
        self.inner.metrics.sessions.get() > 0 && self.inner.feed.is_synced()
    }

    /// What the extender still owes before it [`is_started`](Self::is_started).
    pub fn startup_holdup(&self) -> Option<String> {
        if self.inner.metrics.sessions.get() == 0 {
            let why = self.inner.last_error.lock().clone();
            return Some(match why {
                Some(e) => format!("no Hello yet (the last attempt: {e})"),
                None => "no Hello yet (dialing)".into(),
            });
        }
        (!self.inner.feed.is_synced())
            .then(|| "NodesSynced not sent yet (the cluster's nodes are still being listed)".into())
    }

    /// When the connection was created (its startup timeout counts from
    /// here).
    pub fn created(&self) -> Instant {
        self.created
    }

    /// Makes one call through the breaker, load shedding, concurrency limit
    /// and timeout layers. The request is on the stream when this returns;
    /// the future is its checked answer.
    pub fn call(&self, req: CallRequest<'_>) -> impl Future<Output = Answer> + Send + use<> {
        let point = point_slot(&req.kind);
        let started = std::time::Instant::now();
        let mut svc = self.stack.clone();
        // Always ready at once: the shedding layer refuses a call over the
        // limit instead of waiting for readiness.
        let fut = match svc.ready().now_or_never() {
            Some(Ok(svc)) => svc.call(req),
            Some(Err(e)) => Box::pin(std::future::ready(Err(e))),
            None => Box::pin(std::future::ready(Err(CallError::Overloaded(
                self.inner.cfg.max_concurrent_calls,
            )
            .into()))),
        };
        let inner = self.inner.clone();
        async move {
            let result = fut.await.map_err(|e| inner.classify(e));
            inner
                .metrics
                .calls
                .record(point, result_slot(&result), started.elapsed());
            result
        }
    }

    /// Tells `f` this extender's name each time a stream to it opens (set
    /// once; later calls are ignored).
    pub fn set_on_back(&self, f: OnBack) {
        let _ = self.inner.on_back.set(f);
    }

    /// This extender's outage reporter.
    pub fn outage(&self) -> &Arc<Outage> {
        &self.inner.outage
    }

    /// What goes on while this extender is down (for the breaker's report).
    pub fn meanwhile(&self) -> String {
        self.inner.meanwhile(None)
    }

    /// Counts an answer found unusable after it was returned (scores out of
    /// range for the nodes they are used for): a protocol error, and a
    /// failure for the circuit breaker.
    pub fn report_malformed(&self, point: &str, why: &str) {
        self.inner.metrics.protocol_error(kind::MALFORMED_RESPONSE);
        self.inner
            .breaker
            .record_failure(format!("malformed answer: {why}"));
        tracing::warn!(
            extender = self.inner.name,
            kind = "malformed_response",
            "extender {:?} answered {point} out of protocol: {why}",
            self.inner.name
        );
    }

    /// Counts a failure that was skipped (ignorable extender).
    pub fn note_skipped(&self) {
        self.inner.stats.skipped.fetch_add(1, Ordering::Relaxed);
        self.inner.metrics.skipped.inc();
    }

    /// Queues an Unreserve until acknowledged and makes a first attempt,
    /// waiting at most the call timeout for it.
    pub async fn unreserve(&self, cycle: u64, req: pb::UnreserveRequest) {
        let id = req.reservation_id.clone();
        {
            let mut outbox = self.inner.unreserves.lock();
            outbox.insert(id.clone(), (cycle, req.clone(), true));
            self.inner.outbox_len.send_replace(outbox.len());
            self.inner
                .metrics
                .pending_unreserves
                .set(outbox.len() as u64);
        }
        self.inner.permits.lock().waiting.remove(&id);
        let Some(session) = self.inner.current() else {
            if let Some(e) = self.inner.unreserves.lock().get_mut(&id) {
                e.2 = false;
            }
            tracing::warn!(extender = self.inner.name, reservation = %id, "extender not connected; Unreserve queued");
            return;
        };
        self.inner
            .clone()
            .deliver_unreserve(id, cycle, req, session)
            .await;
    }

    /// How many Unreserves wait for acknowledgement.
    pub fn pending_unreserves(&self) -> usize {
        self.inner.unreserves.lock().len()
    }

    /// Follows the number of Unreserves waiting for acknowledgement.
    pub fn outbox(&self) -> tokio::sync::watch::Receiver<usize> {
        self.inner.outbox_len.subscribe()
    }

    /// Forgets that a pod waits at Permit on this extender (its cycle
    /// ended).
    pub fn forget_waiting(&self, reservation_id: &str) {
        self.inner.permits.lock().waiting.remove(reservation_id);
    }

    /// The scheduler's pods waiting at Permit.
    pub fn waiting_pods(&self) -> crate::framework::WaitingPods {
        self.inner.handle.waiting_pods().clone()
    }

    /// The id the node feed gave the node named `name`.
    pub fn node_id(&self, name: &str) -> Option<u32> {
        self.inner.feed.id_of(name)
    }

    /// The feed ids of `pods` and of their nodes (0 for one the feed does
    /// not hold), in order.
    pub fn pod_and_node_ids(&self, pods: &[crate::model::PodRef]) -> Vec<(u32, u32)> {
        self.inner.feed.pod_and_node_ids(pods)
    }

    /// Whether a stream is open.
    pub fn is_connected(&self) -> bool {
        self.inner.current().is_some()
    }

    /// Asks the re-sender to try the outbox now.
    pub fn kick_unreserves(&self) {
        self.inner.unreserve_kick.notify_one();
    }
}
