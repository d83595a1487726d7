//! [`Connection`]: berthd's side of one extender's stream.
//!
//! A task dials the extender, opens the `Session` stream, sends `Open`,
//! waits for `Hello` (checking the protocol version and that every
//! configured point is served), subscribes the stream to the node feed if
//! asked, then reads answers until the stream ends. Then it fails every
//! call in flight at once, settles the pods waiting at Permit on this
//! extender, and dials again with capped exponential backoff and jitter.
//!
//! Calls go through a tower stack: load shedding (a call finding the
//! extender at its concurrency limit fails at once instead of queueing),
//! the concurrency limit, and the per-call timeout. A call sends the cycle's
//! pod once per stream (`CycleStart`) before its first request; the cycle's
//! token sends `CycleEnd` when the cycle is over.
//!
//! Unreserves are kept in an outbox until acknowledged: sent at once,
//! re-sent on every new stream and periodically while unacknowledged.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use berth_proto::extender::v1::{
    self as pb, ExtenderMessage, Hello, Open, ProtocolVersion, SchedulerMessage,
    extender_client::ExtenderClient, extender_message, request, response, scheduler_message,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::feed::NodeFeed;
use crate::config::ExtenderConfig;
use crate::framework::{CycleToken, ExtensionPoint, Handle};
use crate::metrics::ExtenderMetrics;
use crate::model::PodInfo;

/// The first reconnect delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A stream that lived this long resets the backoff.
const HEALTHY_SESSION: Duration = Duration::from_secs(10);
/// The largest message either side may send.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Why a call to an extender failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No stream is open (the extender is down or still being dialed).
    #[error("not connected")]
    NotConnected,
    /// The stream broke while the call was in flight.
    #[error("the stream broke")]
    Disconnected,
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Too many calls in flight; this one was shed.
    #[error("overloaded: more than {0} calls in flight")]
    Overloaded(usize),
    /// The extender answered with an error.
    #[error("extender error: {0}")]
    Remote(String),
    /// The answer does not fit the request.
    #[error("malformed answer: {0}")]
    Malformed(String),
}

/// Counters, for logs and tests.
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls made.
    pub calls: AtomicU64,
    /// Calls that failed (of any kind).
    pub failures: AtomicU64,
    /// Failures skipped because the extender is ignorable.
    pub skipped: AtomicU64,
    /// Unreserves acknowledged.
    pub unreserves_acked: AtomicU64,
}

/// The index of a request's extension point in
/// [`crate::metrics::EXTENDER_POINTS`].
fn point_slot(kind: &request::Kind) -> usize {
    match kind {
        request::Kind::PreFilter(_) => 0,
        request::Kind::Filter(_) => 1,
        request::Kind::PostFilter(_) => 2,
        request::Kind::PreScore(_) => 3,
        request::Kind::Score(_) => 4,
        request::Kind::NormalizeScore(_) => 5,
        request::Kind::Reserve(_) => 6,
        request::Kind::Unreserve(_) => 7,
        request::Kind::Permit(_) => 8,
        request::Kind::PreBind(_) => 9,
        request::Kind::Bind(_) => 10,
        request::Kind::PostBind(_) => 11,
    }
}

/// The index of a call's outcome in
/// [`crate::metrics::EXTENDER_RESULTS`].
fn result_slot(r: &Answer) -> usize {
    match r {
        Ok(_) => 0,
        Err(CallError::Remote(_) | CallError::Malformed(_)) => 1,
        Err(CallError::Timeout(_)) => 2,
        Err(CallError::Overloaded(_)) => 3,
        Err(CallError::NotConnected | CallError::Disconnected) => 4,
    }
}

type Answer = Result<response::Result, CallError>;

/// A call waiting for its answer.
struct Pending {
    answer: oneshot::Sender<Answer>,
    /// For Permit calls: the reservation and pod, registered as waiting
    /// when the answer says Wait (before the answer is delivered, so that
    /// a decision right behind it finds them).
    permit: Option<(String, Arc<str>)>,
}

/// One open stream.
struct Session {
    tx: mpsc::UnboundedSender<SchedulerMessage>,
    hello: Hello,
    pending: Mutex<HashMap<u64, Pending>>,
    cycles: Mutex<HashSet<u64>>,
    closed: AtomicBool,
}

impl Session {
    fn send(&self, m: scheduler_message::Message) -> Result<(), CallError> {
        self.tx
            .send(SchedulerMessage { message: Some(m) })
            .map_err(|_| CallError::Disconnected)
    }
}

/// What a call needs: its cycle, its pod and the request.
#[derive(Clone)]
pub struct CallRequest {
    /// The cycle the call belongs to.
    pub cycle: Arc<CycleToken>,
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// The request.
    pub kind: request::Kind,
}

/// The shared state of a connection.
struct Inner {
    cfg: ExtenderConfig,
    name: &'static str,
    handle: Handle,
    feed: Arc<NodeFeed>,
    session: RwLock<Option<Arc<Session>>>,
    next_id: AtomicU64,
    /// Unacknowledged Unreserves by reservation id: (cycle, request, in
    /// flight).
    unreserves: Mutex<BTreeMap<String, (u64, pb::UnreserveRequest, bool)>>,
    unreserve_kick: Notify,
    /// Pods waiting at Permit on this extender: reservation id -> pod UID.
    waiting: Mutex<HashMap<String, Arc<str>>>,
    stats: Stats,
    metrics: ExtenderMetrics,
    connected: tokio::sync::watch::Sender<u64>,
    /// The outbox's length, for whoever waits for it to drain.
    outbox_len: tokio::sync::watch::Sender<usize>,
}

/// berthd's side of one extender.
pub struct Connection {
    inner: Arc<Inner>,
    stack: CallStack,
}

type CallStack =
    tower::load_shed::LoadShed<tower::limit::ConcurrencyLimit<tower::timeout::Timeout<RawCall>>>;

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("name", &self.inner.name)
            .field("endpoint", &self.inner.cfg.endpoint)
            .field("connected", &self.inner.session.read().is_some())
            .finish()
    }
}

fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn proto_point(p: ExtensionPoint) -> pb::ExtensionPoint {
    use pb::ExtensionPoint as P;
    match p {
        ExtensionPoint::PreFilter => P::PreFilter,
        ExtensionPoint::Filter => P::Filter,
        ExtensionPoint::PostFilter => P::PostFilter,
        ExtensionPoint::PreScore => P::PreScore,
        ExtensionPoint::Score => P::Score,
        ExtensionPoint::Reserve => P::Reserve,
        ExtensionPoint::Permit => P::Permit,
        ExtensionPoint::PreBind => P::PreBind,
        ExtensionPoint::Bind => P::Bind,
        ExtensionPoint::PostBind => P::PostBind,
        ExtensionPoint::PreEnqueue | ExtensionPoint::QueueSort => P::Unspecified,
    }
}

/// The innermost service: sends a request on the current stream and waits
/// for its answer.
#[derive(Clone)]
pub struct RawCall(Arc<Inner>);

impl Service<CallRequest> for RawCall {
    type Response = response::Result;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CallRequest) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { inner.call(req).await })
    }
}

/// Removes a call's pending entry and tells the extender to stop, unless
/// the answer came.
struct PendingGuard<'a> {
    session: &'a Session,
    id: u64,
    answered: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if !self.answered && self.session.pending.lock().remove(&self.id).is_some() {
            let _ = self
                .session
                .send(scheduler_message::Message::Cancel(pb::Cancel {
                    id: self.id,
                }));
        }
    }
}

impl Inner {
    fn current(&self) -> Option<Arc<Session>> {
        self.session.read().clone()
    }

    /// Sends the cycle's pod on `session` if it has not seen the cycle.
    fn ensure_cycle(
        self: &Arc<Self>,
        session: &Session,
        req: &CallRequest,
    ) -> Result<(), CallError> {
        let id = req.cycle.id();
        if !session.cycles.lock().insert(id) {
            return Ok(());
        }
        let pod = serde_json::to_vec(&*req.pod.pod)
            .map_err(|e| CallError::Malformed(format!("encoding the pod: {e}")))?;
        session.send(scheduler_message::Message::CycleStart(pb::CycleStart {
            cycle_id: id,
            pod,
            namespace: req.pod.namespace.to_string(),
            name: req.pod.name.to_string(),
            uid: req.pod.uid.to_string(),
        }))?;
        let weak: Weak<Inner> = Arc::downgrade(self);
        req.cycle.on_end(move |id| {
            if let Some(inner) = weak.upgrade() {
                inner.end_cycle(id);
            }
        });
        Ok(())
    }

    fn end_cycle(&self, id: u64) {
        if let Some(s) = self.current()
            && s.cycles.lock().remove(&id)
        {
            let _ = s.send(scheduler_message::Message::CycleEnd(pb::CycleEnd {
                cycle_id: id,
            }));
        }
    }

    /// Sends one request on the current stream and waits for the answer
    /// (no timeout here: the caller's layer has it).
    async fn request(
        self: &Arc<Self>,
        cycle_id: u64,
        kind: request::Kind,
        permit: Option<(String, Arc<str>)>,
        session: Arc<Session>,
    ) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        session
            .pending
            .lock()
            .insert(id, Pending { answer: tx, permit });
        let mut guard = PendingGuard {
            session: &session,
            id,
            answered: false,
        };
        if session.closed.load(Ordering::SeqCst) {
            return Err(CallError::Disconnected);
        }
        session.send(scheduler_message::Message::Request(pb::Request {
            id,
            cycle_id,
            timeout: Some(prost_duration(self.cfg.timeout)),
            kind: Some(kind),
        }))?;
        let answer = rx.await.map_err(|_| CallError::Disconnected)?;
        guard.answered = true;
        match answer {
            Ok(response::Result::Error(e)) => Err(CallError::Remote(e.message)),
            other => other,
        }
    }

    async fn call(self: Arc<Self>, req: CallRequest) -> Answer {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let session = self.current().ok_or(CallError::NotConnected)?;
        self.ensure_cycle(&session, &req)?;
        let permit = match &req.kind {
            request::Kind::Permit(p) => Some((p.reservation_id.clone(), req.pod.uid.clone())),
            _ => None,
        };
        self.request(req.cycle.id(), req.kind, permit, session)
            .await
    }

    /// Sends every unacknowledged Unreserve not already in flight.
    fn flush_unreserves(self: &Arc<Self>) {
        let Some(session) = self.current() else {
            return;
        };
        let due: Vec<(String, u64, pb::UnreserveRequest)> = {
            let mut outbox = self.unreserves.lock();
            outbox
                .iter_mut()
                .filter(|(_, (_, _, in_flight))| !*in_flight)
                .map(|(id, (cycle, req, in_flight))| {
                    *in_flight = true;
                    (id.clone(), *cycle, req.clone())
                })
                .collect()
        };
        for (id, cycle, req) in due {
            let inner = self.clone();
            let session = session.clone();
            tokio::spawn(async move {
                inner.deliver_unreserve(id, cycle, req, session).await;
            });
        }
    }

    /// One delivery attempt; on acknowledgement the Unreserve leaves the
    /// outbox, otherwise it stays for the next attempt.
    async fn deliver_unreserve(
        self: Arc<Self>,
        id: String,
        cycle: u64,
        req: pb::UnreserveRequest,
        session: Arc<Session>,
    ) -> bool {
        let attempt = self.request(cycle, request::Kind::Unreserve(req), None, session);
        let acked = matches!(
            tokio::time::timeout(self.cfg.timeout, attempt).await,
            Ok(Ok(response::Result::Unreserve(_)))
        );
        let mut outbox = self.unreserves.lock();
        if acked {
            outbox.remove(&id);
            self.stats.unreserves_acked.fetch_add(1, Ordering::Relaxed);
        } else if let Some(entry) = outbox.get_mut(&id) {
            entry.2 = false;
        }
        self.outbox_len.send_replace(outbox.len());
        self.metrics.pending_unreserves.set(outbox.len() as u64);
        drop(outbox);
        if !acked {
            tracing::warn!(extender = self.name, reservation = %id, "Unreserve not acknowledged; will re-send");
        }
        acked
    }

    /// A decision for a pod waiting at Permit on this extender.
    fn permit_decision(&self, d: pb::PermitDecision) {
        let Some(uid) = self.waiting.lock().remove(&d.reservation_id) else {
            tracing::debug!(extender = self.name, reservation = %d.reservation_id, "Permit decision for a pod no longer waiting");
            return;
        };
        let waiting = self.handle.waiting_pods();
        if d.allow {
            waiting.allow_or_remember(&uid, self.name);
        } else {
            let message = if d.reasons.is_empty() {
                format!("rejected by extender {:?}", self.name)
            } else {
                d.reasons.join(", ")
            };
            waiting.reject_or_remember(&uid, self.name, &message);
        }
    }

    /// The stream ended: fail what is in flight, settle waiting pods.
    fn end_session(&self, session: &Arc<Session>) {
        session.closed.store(true, Ordering::SeqCst);
        {
            let mut current = self.session.write();
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, session)) {
                *current = None;
                self.metrics.connected.set(0);
            }
        }
        let pending: Vec<Pending> = session.pending.lock().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.answer.send(Err(CallError::Disconnected));
        }
        let waiting: Vec<(String, Arc<str>)> = self.waiting.lock().drain().collect();
        let pods = self.handle.waiting_pods();
        for (_, uid) in waiting {
            if self.cfg.ignorable {
                pods.allow_or_remember(&uid, self.name);
            } else {
                pods.reject_or_remember(
                    &uid,
                    self.name,
                    &format!(
                        "extender {:?} disconnected while the pod waited at Permit",
                        self.name
                    ),
                );
            }
        }
        // Unreserves in flight on the dead stream are due again.
        for entry in self.unreserves.lock().values_mut() {
            entry.2 = false;
        }
    }

    fn on_message(&self, session: &Session, m: ExtenderMessage) {
        match m.message {
            Some(extender_message::Message::Response(r)) => {
                let Some(p) = session.pending.lock().remove(&r.id) else {
                    tracing::debug!(
                        extender = self.name,
                        id = r.id,
                        "answer to a request no longer awaited"
                    );
                    return;
                };
                let answer = match r.result {
                    Some(result) => Ok(result),
                    None => Err(CallError::Malformed("a response without a result".into())),
                };
                if let (Some((reservation, uid)), Ok(response::Result::Permit(permit))) =
                    (&p.permit, &answer)
                    && permit.status.as_ref().map(|s| s.code) == Some(pb::Code::Wait as i32)
                {
                    self.waiting.lock().insert(reservation.clone(), uid.clone());
                }
                let _ = p.answer.send(answer);
            }
            Some(extender_message::Message::PermitDecision(d)) => self.permit_decision(d),
            Some(extender_message::Message::Hello(_)) => {
                tracing::warn!(
                    extender = self.name,
                    "a second Hello on the stream; ignored"
                );
            }
            None => tracing::warn!(extender = self.name, "an empty message; ignored"),
        }
    }

    /// Checks the extender's declaration against the configuration.
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        if hello.protocol_version != ProtocolVersion::ProtocolVersion1 as i32 {
            return Err(format!(
                "speaks protocol version {}, berthd speaks {}",
                hello.protocol_version,
                ProtocolVersion::ProtocolVersion1 as i32
            ));
        }
        let missing: Vec<&str> = self
            .cfg
            .points
            .iter()
            .filter(|p| !hello.points.contains(&(proto_point(**p) as i32)))
            .map(|p| p.field())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "does not serve {} (configured at {}.points)",
                missing.join(", "),
                self.cfg.path
            ));
        }
        Ok(())
    }

    /// Dials, handshakes and serves one stream until it ends.
    async fn session_once(self: &Arc<Self>, endpoint: &Endpoint) -> Result<(), String> {
        let channel: Channel = endpoint.connect().await.map_err(|e| {
            format!(
                "cannot connect to {}: {}",
                self.cfg.endpoint,
                error_chain(&e)
            )
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(SchedulerMessage {
            message: Some(scheduler_message::Message::Open(Open {
                protocol_version: ProtocolVersion::ProtocolVersion1 as i32,
                extender_name: self.name.to_string(),
                scheduler: concat!("berthd/", env!("CARGO_PKG_VERSION")).to_string(),
            })),
        });
        let mut client = ExtenderClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let handshake = async {
            let mut inbound = client
                .session(UnboundedReceiverStream::new(rx))
                .await
                .map_err(|s| format!("opening the stream: {}", s.message()))?
                .into_inner();
            let first = inbound
                .message()
                .await
                .map_err(|s| format!("reading Hello: {}", s.message()))?;
            match first.and_then(|m| m.message) {
                Some(extender_message::Message::Hello(h)) => Ok((inbound, h)),
                Some(_) => Err("the first message is not Hello".to_string()),
                None => Err("the stream closed before Hello".to_string()),
            }
        };
        let (mut inbound, hello) = tokio::time::timeout(self.cfg.timeout, handshake)
            .await
            .map_err(|_| format!("no Hello within {:?}", self.cfg.timeout))??;
        self.check_hello(&hello)?;
        let session = Arc::new(Session {
            tx: tx.clone(),
            hello,
            pending: Mutex::new(HashMap::new()),
            cycles: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
        });
        if session.hello.wants_nodes {
            self.feed.subscribe(tx);
        }
        *self.session.write() = Some(session.clone());
        self.metrics.sessions.inc();
        self.metrics.connected.set(1);
        let n = self.metrics.sessions.get();
        self.connected.send_replace(n);
        tracing::info!(
            extender = self.name,
            endpoint = %self.cfg.endpoint,
            remote_name = %session.hello.name,
            wants_nodes = session.hello.wants_nodes,
            "extender connected"
        );
        self.flush_unreserves();
        let result = loop {
            match inbound.message().await {
                Ok(Some(m)) => self.on_message(&session, m),
                Ok(None) => break Ok(()),
                Err(s) => break Err(format!("stream error: {}", s.message())),
            }
        };
        self.end_session(&session);
        result
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}

/// A delay in `[d/2, d]`, spread by a cheap random source.
fn jitter(d: Duration, seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let half = d / 2;
    let nanos = half.as_nanos().max(1) as u64;
    half + Duration::from_nanos(*seed % nanos)
}

/// The next reconnect delay after `current`.
pub fn next_backoff(current: Duration) -> Duration {
    (current * 2).min(MAX_BACKOFF)
}

impl Connection {
    /// A connection for `cfg`, not dialed yet (see [`Connection::start`]).
    pub fn new(cfg: ExtenderConfig, handle: Handle, feed: Arc<NodeFeed>) -> Self {
        // Plugin names are 'static; one per configured extender.
        let name: &'static str = Box::leak(cfg.name.clone().into_boxed_str());
        let (connected, _) = tokio::sync::watch::channel(0);
        let (outbox_len, _) = tokio::sync::watch::channel(0);
        let inner = Arc::new(Inner {
            name,
            handle,
            feed,
            session: RwLock::new(None),
            next_id: AtomicU64::new(1),
            unreserves: Mutex::new(BTreeMap::new()),
            unreserve_kick: Notify::new(),
            waiting: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            metrics: ExtenderMetrics::default(),
            connected,
            outbox_len,
            cfg,
        });
        let stack = ServiceBuilder::new()
            .load_shed()
            .concurrency_limit(inner.cfg.max_concurrent_calls)
            .timeout(inner.cfg.timeout)
            .service(RawCall(inner.clone()));
        Self { inner, stack }
    }

    /// Starts dialing (and redialing) `endpoint`, and the Unreserve
    /// re-sender.
    pub fn start(self: &Arc<Self>, endpoint: Endpoint) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut backoff = INITIAL_BACKOFF;
            let mut seed = u64::from(std::process::id()) | 1;
            loop {
                let started = tokio::time::Instant::now();
                match inner.session_once(&endpoint).await {
                    Ok(()) => tracing::warn!(extender = inner.name, "extender closed the stream"),
                    Err(e) => {
                        tracing::warn!(extender = inner.name, error = %e, "extender unavailable")
                    }
                }
                if started.elapsed() >= HEALTHY_SESSION {
                    backoff = INITIAL_BACKOFF;
                }
                tokio::time::sleep(jitter(backoff, &mut seed)).await;
                backoff = next_backoff(backoff);
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

    /// The extender's declaration on the current stream.
    pub fn hello(&self) -> Option<Hello> {
        self.inner.current().map(|s| s.hello.clone())
    }

    /// Changes with each completed handshake (the count of them).
    pub fn connected(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.connected.subscribe()
    }

    /// Makes one call through the timeout, concurrency limit and load
    /// shedding layers.
    pub async fn call(&self, req: CallRequest) -> Answer {
        let point = point_slot(&req.kind);
        let started = std::time::Instant::now();
        let result = match self.stack.clone().ready().await {
            Ok(svc) => svc.call(req).await,
            Err(e) => Err(e),
        };
        let result = result.map_err(|e| self.classify(e));
        self.inner
            .metrics
            .calls
            .record(point, result_slot(&result), started.elapsed());
        result
    }

    fn classify(&self, e: BoxError) -> CallError {
        self.inner.stats.failures.fetch_add(1, Ordering::Relaxed);
        if e.is::<tower::timeout::error::Elapsed>() {
            return CallError::Timeout(self.inner.cfg.timeout);
        }
        if e.is::<tower::load_shed::error::Overloaded>() {
            return CallError::Overloaded(self.inner.cfg.max_concurrent_calls);
        }
        match e.downcast::<CallError>() {
            Ok(c) => *c,
            Err(other) => CallError::Malformed(other.to_string()),
        }
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
        self.inner.waiting.lock().remove(&id);
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
        self.inner.waiting.lock().remove(reservation_id);
    }

    /// The scheduler's pods waiting at Permit.
    pub fn waiting_pods(&self) -> crate::framework::WaitingPods {
        self.inner.handle.waiting_pods().clone()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_stays_within_half() {
        let mut d = INITIAL_BACKOFF;
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(d);
            d = next_backoff(d);
        }
        assert_eq!(seen[0], Duration::from_millis(100));
        assert_eq!(seen[3], Duration::from_millis(800));
        assert_eq!(*seen.last().unwrap(), MAX_BACKOFF);
        let mut seed = 42;
        let draws: Vec<Duration> = (0..100)
            .map(|_| jitter(Duration::from_secs(2), &mut seed))
            .collect();
        assert!(
            draws
                .iter()
                .all(|j| *j >= Duration::from_secs(1) && *j <= Duration::from_secs(2))
        );
        assert!(
            draws.iter().collect::<HashSet<_>>().len() > 50,
            "spread, not constant"
        );
    }
}
