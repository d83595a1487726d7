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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use berth_proto::extender::v1::{
    self as pb, ExtenderMessage, Hello, Open, ProtocolVersion, SchedulerMessage,
    extender_client::ExtenderClient, extender_message, request, response, scheduler_message,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::answers::{Answer, Asked, CallFuture, RawAnswer, check};
pub use super::answers::{CallError, NeededPods, Reply};
use super::breaker::{Breaker, CircuitBreaker, CircuitBreakerLayer};
use super::feed::NodeFeed;
use super::shed::{Shed, ShedLayer};
use crate::config::ExtenderConfig;
use crate::framework::{CycleToken, ExtensionPoint, Handle, PodGroupCycleInfo};
use crate::metrics::ExtenderMetrics;
use crate::model::PodInfo;
use crate::outage::{Outage, human};

/// The first reconnect delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A stream that lived this long resets the backoff.
const HEALTHY_SESSION: Duration = Duration::from_secs(10);
/// The largest message either side may send.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// How many finished requests (and decided reservations) a connection
/// remembers, to tell a duplicate or late message from an unknown one.
const REMEMBERED: usize = 4096;
/// The protocol version berthd speaks.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::ProtocolVersion2;

/// Counters, for logs and tests (`/metrics` reads [`ExtenderMetrics`]).
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
        request::Kind::PlacementFeasible(_) => 12,
        request::Kind::PodGroupPostFilter(_) => 13,
        request::Kind::GroupPermit(_) => 14,
        request::Kind::PreemptionFilter(_) => 15,
    }
}

/// The index of a call's outcome in [`crate::metrics::EXTENDER_RESULTS`].
fn result_slot<T>(r: &Result<T, CallError>) -> usize {
    match r {
        Ok(_) => 0,
        Err(CallError::Remote(_) | CallError::Malformed(_)) => 1,
        Err(CallError::Timeout(_)) => 2,
        Err(CallError::Overloaded(_)) => 3,
        Err(CallError::NotConnected(_) | CallError::Disconnected) => 4,
        Err(CallError::CircuitOpen(_)) => 5,
    }
}

/// The slots of [`crate::metrics::PROTOCOL_ERROR_KINDS`].
mod kind {
    pub const UNKNOWN_REQUEST_ID: usize = 0;
    pub const DUPLICATE_RESPONSE: usize = 1;
    pub const LATE_RESPONSE: usize = 2;
    pub const UNKNOWN_RESERVATION: usize = 3;
    pub const REPEATED_DECISION: usize = 4;
    pub const UNUSED_DECISION: usize = 5;
    pub const UNEXPECTED_MESSAGE: usize = 6;
    pub const MALFORMED_RESPONSE: usize = 7;
}

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

/// A call waiting for its answer.
struct Pending {
    answer: oneshot::Sender<RawAnswer>,
    /// For Permit calls: the reservation.
    permit: Option<String>,
}

/// How a request that is no longer pending ended, to judge a message
/// naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Answered,
    /// berthd stopped waiting (its timeout passed): an answer now is late.
    TimedOut,
    /// Its caller no longer needed it (a Filter sent ahead whose verdicts
    /// were not needed): an answer now is expected, and dropped quietly.
    Abandoned,
}

/// A hasher for the request and cycle ids berthd assigns (unique, mostly
/// sequential numbers): one multiply instead of SipHash, on the path of
/// every request and answer.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;
type IdSet = HashSet<u64, std::hash::BuildHasherDefault<IdHasher>>;

/// A bounded memory of keys, the oldest forgotten first.
struct Recent<K, V, S = std::collections::hash_map::RandomState> {
    order: VecDeque<K>,
    map: HashMap<K, V, S>,
}

impl<K: std::hash::Hash + Eq + Clone, V, S: std::hash::BuildHasher + Default> Default
    for Recent<K, V, S>
{
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            map: HashMap::default(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V, S: std::hash::BuildHasher> Recent<K, V, S> {
    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
            if self.order.len() > REMEMBERED
                && let Some(old) = self.order.pop_front()
            {
                self.map.remove(&old);
            }
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }
}

/// One open stream.
struct Session {
    tx: mpsc::UnboundedSender<SchedulerMessage>,
    hello: Hello,
    pending: Mutex<IdMap<Pending>>,
    ended: Mutex<Recent<u64, Ended, std::hash::BuildHasherDefault<IdHasher>>>,
    cycles: Mutex<IdSet>,
    /// Cycles that ended, whose CycleEnd goes with the next message (or
    /// the flusher's, shortly after).
    ended_cycles: Mutex<Vec<u64>>,
    closed: AtomicBool,
}

impl Session {
    fn send(&self, m: scheduler_message::Message) -> Result<(), CallError> {
        self.flush_cycle_ends();
        self.tx
            .send(SchedulerMessage { message: Some(m) })
            .map_err(|_| CallError::Disconnected)
    }

    /// Queues the CycleEnds due, ahead of whatever is sent next.
    fn flush_cycle_ends(&self) {
        let ended = std::mem::take(&mut *self.ended_cycles.lock());
        for cycle_id in ended {
            let _ = self.tx.send(SchedulerMessage {
                message: Some(scheduler_message::Message::CycleEnd(pb::CycleEnd {
                    cycle_id,
                })),
            });
        }
    }
}

/// How long a CycleEnd may wait for another message to travel with: on a
/// busy stream it goes with the next cycle's messages, in the same write.
const CYCLE_END_DELAY: Duration = Duration::from_millis(5);

/// What a call needs: its cycle, what the cycle schedules and the
/// request. The pod (or group) is sent (once per stream and cycle) when the
/// call is made, so it is borrowed.
pub struct CallRequest<'a> {
    /// The cycle the call belongs to.
    pub cycle: &'a Arc<CycleToken>,
    /// The pod, or the group, the cycle schedules.
    pub subject: Subject<'a>,
    /// The request.
    pub kind: request::Kind,
}

/// What a cycle schedules: one pod, or a PodGroup's pods (a group cycle).
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// A pod's cycle (`CycleStart`).
    Pod(&'a PodInfo),
    /// A group cycle (`GroupCycleStart`).
    Group(&'a PodGroupCycleInfo),
}

/// A decision that came before the Permit answer it decides.
#[derive(Debug, Clone)]
struct EarlyDecision {
    allow: bool,
    reasons: Vec<String>,
}

/// The Permit requests and waits of one extender.
#[derive(Default)]
struct PermitBook {
    /// Permit requests awaiting their answer, by reservation: the pod, and
    /// a decision that came first.
    asked: HashMap<String, (Arc<str>, Option<EarlyDecision>)>,
    /// Reservations whose Permit answered Wait, awaiting a decision: the
    /// pod.
    waiting: HashMap<String, Arc<str>>,
    /// Reservations decided lately, and whether they were allowed.
    decided: Recent<String, bool>,
}

/// How a connection reaches its extender: a fresh channel per stream.
pub type Dial =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Channel, tonic::transport::Error>> + Send + Sync>;

/// Told an extender's name when a stream to it opens.
pub type OnBack = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The shared state of a connection.
struct Inner {
    cfg: ExtenderConfig,
    /// Its outages, as people read them (see [`crate::outage`]).
    outage: Arc<Outage>,
    /// Told when a stream opens.
    on_back: std::sync::OnceLock<OnBack>,
    name: &'static str,
    handle: Handle,
    feed: Arc<NodeFeed>,
    session: RwLock<Option<Arc<Session>>>,
    next_id: AtomicU64,
    /// Unacknowledged Unreserves by reservation id: (cycle, request, in
    /// flight).
    unreserves: Mutex<BTreeMap<String, (u64, pb::UnreserveRequest, bool)>>,
    unreserve_kick: Notify,
    /// Set while the flusher is due to send pending CycleEnds.
    cycle_end_due: AtomicBool,
    cycle_end_kick: Notify,
    permits: Mutex<PermitBook>,
    stats: Stats,
    metrics: Arc<ExtenderMetrics>,
    breaker: Arc<Breaker>,
    connected: tokio::sync::watch::Sender<u64>,
    /// Why the last dial or stream failed, for "not connected" errors and
    /// the startup log.
    last_error: Mutex<Option<String>>,
    /// The outbox's length, for whoever waits for it to drain.
    outbox_len: tokio::sync::watch::Sender<usize>,
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
        ExtensionPoint::PlacementFeasible => P::PlacementFeasible,
        ExtensionPoint::PodGroupPostFilter => P::PodGroupPostFilter,
        ExtensionPoint::GroupPermit => P::GroupPermit,
        ExtensionPoint::PreEnqueue
        | ExtensionPoint::QueueSort
        | ExtensionPoint::PreFilterExtensionAddPod
        | ExtensionPoint::PreFilterExtensionRemovePod
        | ExtensionPoint::ScoreExtensionNormalize
        | ExtensionPoint::Unreserve => P::Unspecified,
    }
}

fn point_field(p: i32) -> String {
    ExtensionPoint::EVERY
        .into_iter()
        .find(|e| {
            let proto = proto_point(*e);
            proto != pb::ExtensionPoint::Unspecified && proto as i32 == p
        })
        .map_or_else(|| format!("(unknown point {p})"), |e| e.field().to_string())
}

/// The innermost service: puts a request on the current stream at once and
/// returns the future of its checked answer.
#[derive(Clone)]
pub struct RawCall(Arc<Inner>);

impl<'a> Service<CallRequest<'a>> for RawCall {
    type Response = Reply;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CallRequest<'a>) -> CallFuture {
        self.0.stats.calls.fetch_add(1, Ordering::Relaxed);
        match self.0.send(req) {
            Ok(f) => f,
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Ends a call that is dropped before its answer: forgets it, tells the
/// extender to stop (`Cancel`), and remembers how it ended.
struct PendingGuard {
    inner: Arc<Inner>,
    session: Arc<Session>,
    id: u64,
    deadline: Instant,
    permit: Option<String>,
    answered: bool,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.answered || self.session.pending.lock().remove(&self.id).is_none() {
            return;
        }
        let how = if Instant::now() >= self.deadline {
            Ended::TimedOut
        } else {
            Ended::Abandoned
        };
        self.session.ended.lock().insert(self.id, how);
        let _ = self
            .session
            .send(scheduler_message::Message::Cancel(pb::Cancel {
                id: self.id,
            }));
        if let Some(reservation) = &self.permit {
            let early = self.inner.permits.lock().asked.remove(reservation);
            if let Some((_, Some(_))) = early {
                self.inner.protocol_error(
                    kind::UNUSED_DECISION,
                    format!(
                        "a PermitDecision for reservation {reservation} came before the Permit answer, which never came; dropped"
                    ),
                );
            }
        }
    }
}

impl Inner {
    /// What goes on while the extender is down, as its outage's first
    /// line says: what the breaker does, when berthd dials again, what
    /// becomes of pods.
    fn meanwhile(&self, redial_in: Option<Duration>) -> String {
        let b = &self.cfg.circuit_breaker;
        let breaker = if b.consecutive_failures == 0 {
            "every call is tried (no circuit breaker)".to_string()
        } else {
            format!(
                "after {} failed calls in a row its circuit breaker fails calls at once for {}, then lets one call probe it",
                b.consecutive_failures,
                human(b.cool_down)
            )
        };
        let redial = match redial_in {
            Some(d) => format!(
                "berthd dials it again in {} (backing off up to {})",
                human(d),
                human(MAX_BACKOFF)
            ),
            None => "berthd dials it again if its stream breaks".into(),
        };
        let pods = if self.cfg.ignorable {
            "pods are scheduled without it (ignorable)"
        } else {
            "pods that need it fail their attempt and are retried as soon as it is back (its Hello)"
        };
        format!("{breaker}; {redial}; {pods}")
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.session.read().clone()
    }

    fn not_connected(&self) -> CallError {
        let why = self.last_error.lock().clone();
        CallError::NotConnected(match why {
            Some(e) => e,
            None => "the first stream is still being opened".into(),
        })
    }

    /// Logs and counts a message berthd cannot use.
    fn protocol_error(&self, kind: usize, what: String) {
        self.metrics.protocol_error(kind);
        tracing::warn!(
            extender = self.name,
            kind = crate::metrics::PROTOCOL_ERROR_KINDS[kind],
            "extender {:?} sent a message berthd cannot use: {what}",
            self.name
        );
    }

    /// Sends the cycle's pod (or group) on `session` if it has not seen
    /// the cycle.
    fn ensure_cycle(
        self: &Arc<Self>,
        session: &Session,
        cycle: &Arc<CycleToken>,
        subject: Subject<'_>,
    ) -> Result<(), CallError> {
        let id = cycle.id();
        if !session.cycles.lock().insert(id) {
            return Ok(());
        }
        let start = match subject {
            Subject::Pod(pod) => scheduler_message::Message::CycleStart(pb::CycleStart {
                cycle_id: id,
                pod: pod.pod.to_json(),
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
            }),
            Subject::Group(g) => {
                scheduler_message::Message::GroupCycleStart(self.group_cycle_start(id, g))
            }
        };
        session.send(start)?;
        let weak: Weak<Inner> = Arc::downgrade(self);
        cycle.on_end(move |id| {
            if let Some(inner) = weak.upgrade() {
                inner.end_cycle(id);
            }
        });
        Ok(())
    }

    fn group_cycle_start(&self, cycle_id: u64, g: &PodGroupCycleInfo) -> pb::GroupCycleStart {
        let member = |p: &PodInfo| {
            let node = p.node_name.as_deref().unwrap_or_default();
            pb::GroupMember {
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                uid: p.uid.to_string(),
                pod: p.pod.to_json(),
                node: node.to_string(),
                node_id: self.feed.id_of(node).unwrap_or(0),
            }
        };
        let group = &g.group;
        pb::GroupCycleStart {
            cycle_id,
            // A PodGroup the scheduler holds always serializes.
            pod_group: serde_json::to_vec(&*group.object).unwrap_or_default(),
            namespace: group.key.namespace.to_string(),
            name: group.key.name.to_string(),
            uid: group.uid.to_string(),
            pods: g.pods.iter().map(|p| member(p)).collect(),
            scheduled: g.scheduled.iter().map(|p| member(p)).collect(),
        }
    }

    fn end_cycle(&self, id: u64) {
        if let Some(s) = self.current()
            && s.cycles.lock().remove(&id)
        {
            s.ended_cycles.lock().push(id);
            if !self.cycle_end_due.swap(true, Ordering::AcqRel) {
                self.cycle_end_kick.notify_one();
            }
        }
    }

    /// Puts one request on `session` now; the future waits for its answer
    /// (no timeout here: the caller's layer has it) and checks it.
    fn request(
        self: &Arc<Self>,
        session: Arc<Session>,
        cycle_id: u64,
        kind: request::Kind,
        permit: Option<(String, Arc<str>)>,
    ) -> Result<CallFuture, CallError> {
        if session.closed.load(Ordering::SeqCst) {
            return Err(CallError::Disconnected);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let asked = Asked::of(&kind);
        let (tx, rx) = oneshot::channel();
        let reservation = permit.as_ref().map(|(r, _)| r.clone());
        if let Some((r, uid)) = permit {
            self.permits.lock().asked.insert(r, (uid, None));
        }
        session.pending.lock().insert(
            id,
            Pending {
                answer: tx,
                permit: reservation.clone(),
            },
        );
        let mut guard = PendingGuard {
            inner: self.clone(),
            session: session.clone(),
            id,
            deadline: Instant::now() + self.cfg.timeout,
            permit: reservation,
            answered: false,
        };
        if let Err(e) = session.send(scheduler_message::Message::Request(pb::Request {
            id,
            cycle_id,
            timeout: Some(prost_duration(self.cfg.timeout)),
            kind: Some(kind),
        })) {
            guard.answered = true;
            session.pending.lock().remove(&id);
            if let Some(r) = &guard.permit {
                self.permits.lock().asked.remove(r);
            }
            return Err(e);
        }
        let inner = self.clone();
        // A replay's clock waits for the answer (see crate::sim_clock).
        let hold = crate::sim_clock::hold();
        Ok(Box::pin(async move {
            let raw = rx.await.unwrap_or(Err(CallError::Disconnected));
            drop(hold);
            guard.answered = true;
            let mut unusable = None;
            let checked = check(&asked, &guard.session.hello, raw, &mut unusable);
            if let Some(why) = unusable {
                inner.protocol_error(
                    kind::MALFORMED_RESPONSE,
                    format!("part of the answer to {} request {id}: {why}", asked.name()),
                );
                inner
                    .breaker
                    .record_failure(format!("malformed answer: {why}"));
            }
            if let Err(CallError::Malformed(why)) = &checked {
                inner.metrics.protocol_error(kind::MALFORMED_RESPONSE);
                tracing::warn!(
                    extender = inner.name,
                    kind = "malformed_response",
                    request = id,
                    "extender {:?} answered {} request {id} out of protocol: {why}",
                    inner.name,
                    asked.name()
                );
            }
            checked
        }))
    }

    fn send(self: &Arc<Self>, req: CallRequest<'_>) -> Result<CallFuture, CallError> {
        let session = self.current().ok_or_else(|| self.not_connected())?;
        self.ensure_cycle(&session, req.cycle, req.subject)?;
        let permit = match (&req.kind, req.subject) {
            (request::Kind::Permit(p), Subject::Pod(pod)) => {
                Some((p.reservation_id.clone(), pod.uid.clone()))
            }
            _ => None,
        };
        self.request(session, req.cycle.id(), req.kind, permit)
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
        let acked = match self.request(session, cycle, request::Kind::Unreserve(req), None) {
            Ok(attempt) => matches!(
                tokio::time::timeout(self.cfg.timeout, attempt).await,
                Ok(Ok(Reply::Unreserve))
            ),
            Err(_) => false,
        };
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

    fn apply_decision(&self, uid: &Arc<str>, reservation: &str, allow: bool, reasons: &[String]) {
        let waiting = self.handle.waiting_pods();
        if allow {
            waiting.allow_or_remember(uid, self.name);
        } else {
            let message = if reasons.is_empty() {
                format!("rejected by extender {:?} at Permit", self.name)
            } else {
                reasons.join(", ")
            };
            waiting.reject_or_remember(uid, self.name, &message);
        }
        tracing::debug!(extender = self.name, reservation, allow, "Permit decided");
    }

    /// A decision for a pod at Permit on this extender.
    fn permit_decision(&self, d: pb::PermitDecision) {
        let mut book = self.permits.lock();
        if let Some(uid) = book.waiting.remove(&d.reservation_id) {
            book.decided.insert(d.reservation_id.clone(), d.allow);
            drop(book);
            self.apply_decision(&uid, &d.reservation_id, d.allow, &d.reasons);
            return;
        }
        let verdict = if d.allow { "allow" } else { "reject" };
        if let Some((_, early)) = book.asked.get_mut(&d.reservation_id) {
            if early.is_none() {
                *early = Some(EarlyDecision {
                    allow: d.allow,
                    reasons: d.reasons,
                });
                tracing::debug!(
                    extender = self.name,
                    reservation = %d.reservation_id,
                    "a Permit decision before its Wait answer: kept until the answer"
                );
                return;
            }
            drop(book);
            self.protocol_error(
                kind::REPEATED_DECISION,
                format!(
                    "a second PermitDecision ({verdict}) for reservation {} before its Permit answer; the first stands",
                    d.reservation_id
                ),
            );
            return;
        }
        if let Some(&first) = book.decided.get(&d.reservation_id) {
            drop(book);
            let how = if first == d.allow {
                "repeats"
            } else {
                "contradicts"
            };
            self.protocol_error(
                kind::REPEATED_DECISION,
                format!(
                    "a PermitDecision ({verdict}) for reservation {}, which was already decided: it {how} the first, which stands",
                    d.reservation_id
                ),
            );
            return;
        }
        drop(book);
        self.protocol_error(
            kind::UNKNOWN_RESERVATION,
            format!(
                "a PermitDecision ({verdict}) for reservation {}, which does not wait at Permit on this extender (never asked, timed out, or unreserved); dropped",
                d.reservation_id
            ),
        );
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
        let waiting: Vec<(String, Arc<str>)> = self.permits.lock().waiting.drain().collect();
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

    fn on_response(&self, session: &Session, r: pb::Response) {
        let Some(p) = session.pending.lock().remove(&r.id) else {
            let ended = session.ended.lock().get(&r.id).copied();
            match ended {
                Some(Ended::Abandoned) => tracing::debug!(
                    extender = self.name,
                    id = r.id,
                    "answer to a request berthd no longer needed"
                ),
                Some(Ended::TimedOut) => self.protocol_error(
                    kind::LATE_RESPONSE,
                    format!(
                        "an answer to request {} after berthd stopped waiting for it ({:?}); dropped",
                        r.id, self.cfg.timeout
                    ),
                ),
                Some(Ended::Answered) => self.protocol_error(
                    kind::DUPLICATE_RESPONSE,
                    format!(
                        "a second answer to request {}; dropped, the first stands",
                        r.id
                    ),
                ),
                None => self.protocol_error(
                    kind::UNKNOWN_REQUEST_ID,
                    format!(
                        "an answer to request {}, which berthd never sent on this stream; dropped",
                        r.id
                    ),
                ),
            }
            return;
        };
        session.ended.lock().insert(r.id, Ended::Answered);
        let answer = match r.result {
            Some(result) => Ok(result),
            None => Err(CallError::Malformed("a response without a result".into())),
        };
        if let Some(reservation) = &p.permit {
            let asked = self.permits.lock().asked.remove(reservation);
            let waits = match &answer {
                Ok(response::Result::Permit(pb::PermitResponse {
                    status: Some(s),
                    wait_timeout: Some(t),
                })) => s.code == pb::Code::Wait as i32 && (t.seconds > 0 || t.nanos > 0),
                _ => false,
            };
            if let Some((uid, early)) = asked {
                match (waits, early) {
                    (true, Some(d)) => {
                        self.permits
                            .lock()
                            .decided
                            .insert(reservation.clone(), d.allow);
                        self.apply_decision(&uid, reservation, d.allow, &d.reasons);
                    }
                    (true, None) => {
                        self.permits
                            .lock()
                            .waiting
                            .insert(reservation.clone(), uid);
                    }
                    (false, Some(d)) => self.protocol_error(
                        kind::UNUSED_DECISION,
                        format!(
                            "a PermitDecision ({}) for reservation {reservation} came before its Permit answer, which did not say Wait; the answer stands",
                            if d.allow { "allow" } else { "reject" }
                        ),
                    ),
                    (false, None) => {}
                }
            }
        }
        let _ = p.answer.send(answer);
    }

    fn on_message(&self, session: &Session, m: ExtenderMessage) {
        match m.message {
            Some(extender_message::Message::Response(r)) => self.on_response(session, r),
            Some(extender_message::Message::PermitDecision(d)) => self.permit_decision(d),
            Some(extender_message::Message::Hello(_)) => self.protocol_error(
                kind::UNEXPECTED_MESSAGE,
                "a second Hello on the stream; ignored".into(),
            ),
            None => self.protocol_error(
                kind::UNEXPECTED_MESSAGE,
                "a message without content (of a kind this berthd does not know?); ignored".into(),
            ),
        }
    }

    /// Checks the extender's declaration against the configuration.
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        if hello.protocol_version == ProtocolVersion::ProtocolVersion1 as i32 {
            return Err(format!(
                "it speaks protocol version 1, which berthd no longer accepts: berthd speaks version {v}, where requests name nodes by the ids NodeUpsert assigns (FilterRequest, PreScoreRequest, ScoreRequest and NormalizeScoreRequest carry node_ids, FilterResponse and PostFilterRequest name nodes by NodeStatus.node_id), every extender gets the node table, and FilterRequest.score asks for scores with the verdicts (FilterResponse.scores); update it to extender.proto version {v} (the header lists the changes) and declare PROTOCOL_VERSION_{v} in Hello",
                v = PROTOCOL_VERSION as i32
            ));
        }
        if hello.protocol_version != PROTOCOL_VERSION as i32 {
            return Err(format!(
                "it speaks protocol version {}, berthd speaks version {}: declare PROTOCOL_VERSION_{} in Hello",
                hello.protocol_version, PROTOCOL_VERSION as i32, PROTOCOL_VERSION as i32
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
            let declared: Vec<String> = hello.points.iter().map(|p| point_field(*p)).collect();
            return Err(format!(
                "it does not serve {} configured at {}.points, which must list only points the extender declares in its Hello (it declares [{}])",
                missing.join(", "),
                self.cfg.path,
                declared.join(", ")
            ));
        }
        Ok(())
    }

    /// Dials, handshakes and serves one stream until it ends.
    async fn session_once(self: &Arc<Self>, dial: &Dial) -> Result<(), String> {
        // A replay's clock waits for the connection (see crate::sim_clock).
        let hold = crate::sim_clock::hold();
        let channel: Channel = dial().await.map_err(|e| {
            format!(
                "cannot connect to {}: {}",
                self.cfg.endpoint,
                error_chain(&e)
            )
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(SchedulerMessage {
            message: Some(scheduler_message::Message::Open(Open {
                protocol_version: PROTOCOL_VERSION as i32,
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
        drop(hold);
        self.check_hello(&hello)
            .map_err(|e| format!("its Hello was refused: {e}"))?;
        let session = Arc::new(Session {
            tx: tx.clone(),
            hello,
            pending: Mutex::new(IdMap::default()),
            ended: Mutex::new(Recent::default()),
            cycles: Mutex::new(IdSet::default()),
            ended_cycles: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        });
        // Every extender follows the node table (ids name nodes in
        // requests); the objects go to those that want them.
        self.feed
            .subscribe(tx, session.hello.wants_nodes, session.hello.wants_pods);
        *self.session.write() = Some(session.clone());
        *self.last_error.lock() = None;
        self.metrics.sessions.inc();
        self.metrics.connected.set(1);
        self.breaker
            .reset("a new stream opened (the extender is back)");
        self.connected.send_replace(self.metrics.sessions.get());
        tracing::info!(
            extender = self.name,
            endpoint = %self.cfg.endpoint,
            remote_name = %session.hello.name,
            wants_nodes = session.hello.wants_nodes,
            wants_pods = session.hello.wants_pods,
            "extender connected"
        );
        self.outage.succeeded();
        if let Some(back) = self.on_back.get() {
            back(self.name);
        }
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

impl Inner {
    fn classify(&self, e: BoxError) -> CallError {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        if e.is::<tower::timeout::error::Elapsed>() {
            return CallError::Timeout(self.cfg.timeout);
        }
        match e.downcast::<CallError>() {
            Ok(c) => *c,
            Err(other) => CallError::Malformed(other.to_string()),
        }
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
