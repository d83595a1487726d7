//! Events through `events.k8s.io/v1`, written as client-go's events
//! broadcaster writes kube-scheduler's (`k8s.io/client-go/tools/events`).
//!
//! `reportingController` is the profile's scheduler name (upstream writes
//! `default-scheduler`, its profile's name; a berth profile named `berth`
//! writes `berth`), `reportingInstance` is `<scheduler name>-<host name>`.
//!
//! Recording never blocks the scheduler and never loses an event:
//!
//! * **Series.** Events are keyed as client-go keys them: type, action,
//!   reason, reporting controller and instance, the regarded object with
//!   its resourceVersion (the note is not part of the key; berth, as
//!   upstream's scheduler, writes no related object). The first event of a key is created (`POST`, named
//!   `<pod>.<unix nanos in hex>`). The second becomes a series: the event
//!   is patched with `series: {count: 2, lastObservedTime}` (a strategic
//!   merge patch of `series` only). Later ones only count, in memory.
//!   Every [`FINISH_EVERY`] the series last observed more than that long
//!   ago get their final count written and are forgotten (as are plain
//!   events that old); every [`REFRESH_EVERY`] every open series is
//!   written again. A failing pod whose status patch changed its
//!   resourceVersion starts a new key, so upstream's pattern shows: a
//!   `POST` on the first failure, another on the second, a series patch
//!   on the third.
//! * **Spam filter.** Per regarded pod, a token bucket of [`EVENT_BURST`]
//!   regaining one every [`EVENT_REFILL_EVERY`] (client-go's event spam
//!   filter's defaults). An event over the limit is not dropped: it counts
//!   into the series of the pod's latest event with the same reason.
//! * **Writes** are concurrent (at most [`WRITERS`] at once, each waiting
//!   for the events client's own token bucket, so bindings, on the
//!   scheduler's client, never wait behind events). A pod's success
//!   (`Scheduled`, a Normal event) takes the next free writer ahead of
//!   failures queued before it, so that after an outage the successes are
//!   not starved by the burst of `FailedScheduling`; a writer is held for
//!   one request, never across a retry's pause. One write per event is in
//!   flight at a time; a change meanwhile is written after it. A transport
//!   failure is retried [`MAX_TRIES`] times, [`RETRY_AFTER`] apart (each
//!   at DEBUG: the API server's outage reporter says it is down), and so
//!   is a 403 (an API server that is starting refuses for a moment; the
//!   refusal reporter names the rule if it lasts, see
//!   [`super::refusals`]); a patch of an event the API no longer has
//!   creates it again; another answer refusing the event is logged with
//!   the pod, verb and code, and the write given up, as client-go gives up.
//! * **Flush.** [`EventSink::flush`] (a leader that lost its Lease, or
//!   shutdown) wakes the writers waiting to retry and retries every
//!   [`FLUSH_RETRY`] until every event recorded so far is written or the
//!   time given is up, so the events of the last pods bound outlive the
//!   Lease when the API server answers in time.
//! * **Memory.** An event keeps its own small copy of what it writes (not
//!   the pod), and at most [`MAX_CACHED`] plain events are remembered for
//!   series; the oldest written ones are forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::permits::Permits;

use crate::framework::{EventType, PodEvent};

/// Tokens each pod's spam-filter bucket holds.
pub const EVENT_BURST: u32 = 25;
/// How often a pod's bucket regains a token.
pub const EVENT_REFILL_EVERY: Duration = Duration::from_secs(300);
/// How often finished series are written and old events forgotten
/// (client-go's finishTime).
pub const FINISH_EVERY: Duration = Duration::from_secs(6 * 60);
/// How often open series are written again (client-go's refreshTime).
pub const REFRESH_EVERY: Duration = Duration::from_secs(30 * 60);
/// Writes in flight at once.
pub const WRITERS: usize = 16;
/// Attempts of a write that fails in transport (client-go's
/// maxTriesPerEvent).
pub const MAX_TRIES: u32 = 12;
/// The pause between them (client-go's sleepDuration).
pub const RETRY_AFTER: Duration = Duration::from_secs(10);
/// The pause between retries while flushing.
pub const FLUSH_RETRY: Duration = Duration::from_millis(200);
/// Plain events remembered for series at most.
pub const MAX_CACHED: usize = 16_384;
/// Buckets kept before full ones are forgotten.
const MAX_BUCKETS: usize = 4096;

/// Per-object token buckets (client-go's event spam filter).
#[derive(Debug)]
pub(super) struct RateLimiter {
    burst: f64,
    refill: Duration,
    buckets: HashMap<Arc<str>, (f64, Instant)>,
}

impl RateLimiter {
    pub(super) fn new(burst: u32, refill: Duration) -> Self {
        Self {
            burst: f64::from(burst),
            refill,
            buckets: HashMap::new(),
        }
    }

    fn tokens_at(&self, (tokens, at): (f64, Instant), now: Instant) -> f64 {
        let gained = now.saturating_duration_since(at).as_secs_f64() / self.refill.as_secs_f64();
        (tokens + gained).min(self.burst)
    }

    /// Takes a token for `key` at `now`; false when its bucket is empty.
    pub(super) fn allow(&mut self, key: &Arc<str>, now: Instant) -> bool {
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(key) {
            let burst = self.burst;
            let full: Vec<Arc<str>> = self
                .buckets
                .iter()
                .filter(|(_, b)| self.tokens_at(**b, now) >= burst)
                .map(|(k, _)| k.clone())
                .collect();
            for k in full {
                self.buckets.remove(&k);
            }
            if self.buckets.len() >= MAX_BUCKETS {
                self.buckets.clear();
            }
        }
        let current = match self.buckets.get(key) {
            Some(b) => self.tokens_at(*b, now),
            None => self.burst,
        };
        if current < 1.0 {
            return false;
        }
        self.buckets.insert(key.clone(), (current - 1.0, now));
        true
    }
}

/// `t` as `metav1.MicroTime` is written.
fn micro_time(t: SystemTime) -> Value {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or_default();
    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        ts,
    ))
    .unwrap_or(Value::Null)
}

/// What makes two events the same event, as client-go's eventKey.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    event_type: EventType,
    action: &'static str,
    reason: &'static str,
    controller: Arc<str>,
    uid: Arc<str>,
    resource_version: Option<Box<str>>,
}

/// An event as it is written: its own copy, not the pod.
#[derive(Debug)]
struct Fixed {
    name: String,
    namespace: Arc<str>,
    pod: Arc<str>,
    uid: Arc<str>,
    resource_version: Option<Box<str>>,
    event_time: SystemTime,
    controller: Arc<str>,
    action: &'static str,
    reason: &'static str,
    event_type: EventType,
    note: String,
}

#[derive(Debug, Clone, Copy)]
struct Series {
    count: u32,
    last_observed: SystemTime,
    /// When it was last observed, on the scheduler's clock.
    last_at: Instant,
}

#[derive(Debug, Default)]
struct Progress {
    /// The API has the event.
    created: bool,
    series: Option<Series>,
    /// Something is to be written.
    dirty: bool,
    /// A writer owns the event (queued or writing).
    queued: bool,
    /// The series is over: forget the event once written.
    finished: bool,
}

#[derive(Debug)]
struct Entry {
    key: EventKey,
    fixed: Fixed,
    recorded_at: Instant,
    progress: Mutex<Progress>,
}

/// One write to the API.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Write {
    /// `POST events` with this body.
    Create { namespace: String, body: Value },
    /// `PATCH events/name` (strategic merge) with this body.
    Patch {
        namespace: String,
        name: String,
        body: Value,
    },
}

/// Why a write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WriteError {
    /// 409 AlreadyExists on a create.
    AlreadyExists,
    /// 404 on a patch.
    NotFound,
    /// No answer (connection refused, reset, timed out): worth retrying.
    Transport(String),
    /// Any other answer: the API refused the event.
    Refused { code: u16, message: String },
}

/// Where event writes go: the API through the events client, or a
/// recorder in tests.
#[async_trait]
pub(super) trait EventApi: Send + Sync + 'static {
    async fn write(&self, w: &Write) -> Result<(), WriteError>;
}

#[async_trait]
impl EventApi for kube::Client {
    async fn write(&self, w: &Write) -> Result<(), WriteError> {
        let (method, path, content_type, body) = match w {
            Write::Create { namespace, body } => (
                http::Method::POST,
                format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events"),
                "application/json",
                body,
            ),
            Write::Patch {
                namespace,
                name,
                body,
            } => (
                http::Method::PATCH,
                format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}"),
                "application/strategic-merge-patch+json",
                body,
            ),
        };
        let bytes = serde_json::to_vec(body).map_err(|e| WriteError::Refused {
            code: 0,
            message: e.to_string(),
        })?;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .body(bytes)
            .map_err(|e| WriteError::Refused {
                code: 0,
                message: e.to_string(),
            })?;
        match self.request::<serde::de::IgnoredAny>(req).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                Err(WriteError::AlreadyExists)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Err(WriteError::NotFound),
            Err(kube::Error::Api(s)) => Err(WriteError::Refused {
                code: s.code,
                message: s.message,
            }),
            Err(e) => Err(WriteError::Transport(e.to_string())),
        }
    }
}

#[derive(Default)]
struct State {
    cache: HashMap<EventKey, Arc<Entry>>,
    /// Keys in the order they were cached, for forgetting the oldest.
    order: VecDeque<EventKey>,
    /// The latest event of each pod and reason: where spam goes.
    latest: HashMap<(Arc<str>, &'static str), EventKey>,
    spam: Option<RateLimiter>,
}

impl State {
    fn remove(&mut self, key: &EventKey) {
        if self.cache.remove(key).is_some() {
            let l = (key.uid.clone(), key.reason);
            if self.latest.get(&l) == Some(key) {
                self.latest.remove(&l);
            }
        }
    }

    /// Forgets the oldest plain events written, down to [`MAX_CACHED`].
    fn trim(&mut self) {
        let mut kept = VecDeque::new();
        while self.cache.len() > MAX_CACHED {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            let Some(e) = self.cache.get(&key) else {
                continue;
            };
            let p = e.progress.lock();
            let idle = p.created && !p.queued && p.series.is_none();
            drop(p);
            if idle {
                self.remove(&key);
            } else {
                kept.push_back(key);
            }
        }
        while let Some(k) = kept.pop_back() {
            self.order.push_front(k);
        }
    }
}

struct Shared {
    api: Box<dyn EventApi>,
    identity: String,
    state: Mutex<State>,
    writers: Permits,
    runtime: tokio::runtime::Handle,
    /// Where refusals (403) are counted and named.
    refusals: Arc<super::refusals::Refusals>,
    /// Writers running (an event queued or being written).
    pending: std::sync::atomic::AtomicUsize,
    /// Signalled when the last writer ends while flushing, and when a
    /// flush starts (waking the writers waiting to retry).
    flush_signal: tokio::sync::Notify,
    /// A flush has started: retries come every [`FLUSH_RETRY`].
    flushing: std::sync::atomic::AtomicBool,
}

/// Where events go: the cache of events and their series, and the
/// writers.
pub(super) struct EventSink {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("cached", &self.shared.state.lock().cache.len())
            .finish()
    }
}

impl EventSink {
    /// Starts the sink writing through `api`. Must run in a tokio runtime.
    pub(super) fn start(api: impl EventApi, identity: String) -> Self {
        Self::start_with(api, identity, super::refusals::global().clone())
    }

    /// [`Self::start`], counting refusals in `refusals`.
    pub(super) fn start_with(
        api: impl EventApi,
        identity: String,
        refusals: Arc<super::refusals::Refusals>,
    ) -> Self {
        let shared = Arc::new(Shared {
            api: Box::new(api),
            identity,
            state: Mutex::new(State {
                spam: Some(RateLimiter::new(EVENT_BURST, EVENT_REFILL_EVERY)),
                ..State::default()
            }),
            writers: Permits::new(WRITERS),
            runtime: tokio::runtime::Handle::current(),
            refusals,
            pending: std::sync::atomic::AtomicUsize::new(0),
            flush_signal: tokio::sync::Notify::new(),
            flushing: std::sync::atomic::AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        shared
            .runtime
            .spawn(tick(weak, FINISH_EVERY, Shared::finish_series));
        let weak = Arc::downgrade(&shared);
        shared
            .runtime
            .spawn(tick(weak, REFRESH_EVERY, Shared::refresh_series));
        Self { shared }
    }

    pub(super) fn record(&self, e: PodEvent) {
        tracing::debug!(pod = %e.pod.key(), reason = e.reason, note = %e.note, "event");
        self.shared.record(e, SystemTime::now(), Instant::now());
    }

    /// Writes what was recorded so far, within `within` at most: the
    /// writers waiting to retry try again now and every [`FLUSH_RETRY`]
    /// after. Returns how many writers were still at work when it ended
    /// (0: everything was written or given up).
    pub(super) async fn flush(&self, within: Duration) -> usize {
        use std::sync::atomic::Ordering;
        let sh = &self.shared;
        sh.flushing.store(true, Ordering::SeqCst);
        sh.flush_signal.notify_waiters();
        let done = async {
            loop {
                let idle = sh.flush_signal.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if sh.pending.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(within, done).await;
        sh.pending.load(Ordering::SeqCst)
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.shared.state.lock().cache.len()
    }
}

/// Runs `f` every `period` while the sink lives.
async fn tick(weak: Weak<Shared>, period: Duration, f: fn(&Arc<Shared>, SystemTime, Instant)) {
    let mut every = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        every.tick().await;
        let Some(shared) = weak.upgrade() else { return };
        f(&shared, SystemTime::now(), Instant::now());
    }
}

impl Shared {
    fn record(self: &Arc<Self>, e: PodEvent, now: SystemTime, at: Instant) {
        let key = EventKey {
            event_type: e.event_type,
            action: e.action,
            reason: e.reason,
            controller: e.controller.clone(),
            uid: e.pod.uid.clone(),
            resource_version: e.pod.pod.resource_version().map(Box::from),
        };
        let mut st = self.state.lock();
        if let Some(entry) = st.cache.get(&key).cloned() {
            drop(st);
            self.occurred(&entry, now, at);
            return;
        }
        let allowed = st.spam.as_mut().is_none_or(|s| s.allow(&key.uid, at));
        if !allowed
            && let Some(entry) = st
                .latest
                .get(&(key.uid.clone(), key.reason))
                .and_then(|k| st.cache.get(k))
                .cloned()
        {
            drop(st);
            tracing::debug!(pod = %e.pod.key(), reason = e.reason, "event over the spam limit counts into the pod's latest series");
            self.occurred(&entry, now, at);
            return;
        }
        let stamp = k8s_openapi::jiff::Timestamp::try_from(now).unwrap_or_default();
        let entry = Arc::new(Entry {
            fixed: Fixed {
                name: crate::cluster::writes::event_name(&e.pod.name, stamp),
                namespace: e.pod.namespace.clone(),
                pod: e.pod.name.clone(),
                uid: e.pod.uid.clone(),
                resource_version: key.resource_version.clone(),
                event_time: now,
                controller: e.controller.clone(),
                action: e.action,
                reason: e.reason,
                event_type: e.event_type,
                note: e.note,
            },
            key: key.clone(),
            recorded_at: at,
            progress: Mutex::new(Progress {
                dirty: true,
                queued: true,
                ..Progress::default()
            }),
        });
        st.latest.insert((key.uid.clone(), key.reason), key.clone());
        st.order.push_back(key.clone());
        st.cache.insert(key, entry.clone());
        if st.cache.len() > MAX_CACHED {
            st.trim();
        }
        drop(st);
        self.spawn_writer(entry);
    }

    /// Another occurrence of a cached event.
    fn occurred(self: &Arc<Self>, entry: &Arc<Entry>, now: SystemTime, at: Instant) {
        let mut p = entry.progress.lock();
        match &mut p.series {
            Some(s) => {
                s.count = s.count.saturating_add(1);
                s.last_observed = now;
                s.last_at = at;
            }
            None => {
                p.series = Some(Series {
                    count: 2,
                    last_observed: now,
                    last_at: at,
                });
                self.mark_dirty(entry, &mut p);
            }
        }
    }

    /// Wants `entry` written; starts a writer unless one owns it.
    fn mark_dirty(self: &Arc<Self>, entry: &Arc<Entry>, p: &mut Progress) {
        p.dirty = true;
        if !p.queued {
            p.queued = true;
            self.spawn_writer(entry.clone());
        }
    }

    fn spawn_writer(self: &Arc<Self>, entry: Arc<Entry>) {
        use std::sync::atomic::Ordering;
        let shared = self.clone();
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.runtime.spawn(async move {
            shared.clone().write_until_clean(entry).await;
            if shared.pending.fetch_sub(1, Ordering::SeqCst) == 1
                && shared.flushing.load(Ordering::SeqCst)
            {
                shared.flush_signal.notify_waiters();
            }
        });
    }

    /// Writes `entry` until nothing more is wanted.
    async fn write_until_clean(self: Arc<Self>, entry: Arc<Entry>) {
        loop {
            let write = {
                let mut p = entry.progress.lock();
                p.dirty = false;
                self.next_write(&entry, &p)
            };
            let result = self.write_with_retries(&entry, &write).await;
            {
                let mut p = entry.progress.lock();
                match (&write, result) {
                    (_, Ok(())) => p.created = true,
                    (Write::Patch { .. }, Err(WriteError::NotFound)) => {
                        // Gone from the API (events expire): create it
                        // again with its series.
                        p.created = false;
                        p.dirty = true;
                    }
                    (Write::Create { .. }, Err(WriteError::AlreadyExists)) => {
                        // Created meanwhile (by an earlier attempt whose
                        // answer was lost): a series still needs its patch.
                        p.created = true;
                        if p.series.is_some() {
                            p.dirty = true;
                        }
                    }
                    (w, Err(e)) => {
                        let verb = match w {
                            Write::Create { .. } => "POST",
                            Write::Patch { .. } => "PATCH",
                        };
                        let (code, error) = match &e {
                            WriteError::Refused { code, message } => (*code, message.clone()),
                            WriteError::Transport(m) => (0, m.clone()),
                            WriteError::AlreadyExists => (409, "already exists".into()),
                            WriteError::NotFound => (404, "not found".into()),
                        };
                        let pod = format_args!("{}/{}", entry.fixed.namespace, entry.fixed.pod);
                        if code == 0 || code == 403 {
                            // The outage reporter, or the refusal
                            // reporter, speaks for these.
                            tracing::debug!(pod = %pod, reason = entry.fixed.reason, verb, code, %error, "writing event failed; given up");
                        } else {
                            tracing::warn!(
                                pod = %pod, reason = entry.fixed.reason, verb, code,
                                "writing event failed; given up: {code} {verb} event of {pod}: {error}"
                            );
                        }
                        // The API refused it: it will not exist.
                        p.created = matches!(w, Write::Patch { .. });
                    }
                }
                if p.dirty {
                    continue;
                }
                p.queued = false;
                if !p.finished {
                    return;
                }
            }
            // The series is over and written: forget it.
            self.state.lock().remove(&entry.key);
            return;
        }
    }

    async fn write_with_retries(&self, entry: &Entry, write: &Write) -> Result<(), WriteError> {
        use std::sync::atomic::Ordering;
        let mut tries = 1;
        let success = entry.fixed.event_type == EventType::Normal;
        let key = match write {
            Write::Create { .. } => super::refusals::Key::new("create", "events.k8s.io", "events"),
            Write::Patch { .. } => super::refusals::Key::new("patch", "events.k8s.io", "events"),
        };
        loop {
            let written = {
                let _writer = self.writers.acquire(success).await;
                self.api.write(write).await
            };
            let pod = || format!("{}/{}", entry.fixed.namespace, entry.fixed.pod);
            let flushing = self.flushing.load(Ordering::SeqCst);
            match written {
                Err(WriteError::Transport(e)) if tries < MAX_TRIES || flushing => {
                    tracing::debug!(
                        pod = %pod(), reason = entry.fixed.reason, error = %e, tries,
                        "writing event failed; retrying"
                    );
                }
                Err(WriteError::Refused { code: 403, message })
                    if tries < MAX_TRIES || flushing =>
                {
                    let rule = || {
                        super::access::rule_for("events.k8s.io", "events", None)
                            .map_or_else(String::new, |r| r.to_string())
                    };
                    match self.refusals.refused(&key, rule, &message) {
                        super::refusals::Verdict::Report(lasted) => {
                            let rule = rule();
                            tracing::error!(
                                verb = %key.verb, code = 403, resource = "events", %rule,
                                "forbidden to {} events.events.k8s.io (event of {}): its ClusterRole must grant {rule}; refused for {}, events are retried and given up after {MAX_TRIES} tries; the API server says: {message}",
                                key.verb,
                                pod(),
                                crate::outage::human(lasted)
                            );
                        }
                        _ => {
                            tracing::debug!(pod = %pod(), reason = entry.fixed.reason, tries, "writing event refused; retrying: {message}")
                        }
                    }
                }
                other => {
                    if other.is_ok() {
                        self.refusals.allowed(&key);
                    }
                    return other;
                }
            }
            if !flushing {
                tries += 1;
            }
            // A flush starting meanwhile cuts the pause short.
            let woken = self.flush_signal.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let pause = if self.flushing.load(Ordering::SeqCst) {
                FLUSH_RETRY
            } else {
                RETRY_AFTER
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = &mut woken => {}
            }
        }
    }

    /// The write `entry` needs now.
    fn next_write(&self, entry: &Entry, p: &Progress) -> Write {
        let f = &entry.fixed;
        let series = p.series.map(|s| {
            json!({
                "count": s.count,
                "lastObservedTime": micro_time(s.last_observed),
            })
        });
        if p.created {
            return Write::Patch {
                namespace: f.namespace.to_string(),
                name: f.name.clone(),
                body: json!({ "series": series }),
            };
        }
        use crate::cluster::writes;
        let instance = format!("{}-{}", f.controller, self.identity);
        let mut body = writes::event_json(&writes::EventFields {
            name: &f.name,
            at: k8s_openapi::jiff::Timestamp::try_from(f.event_time).unwrap_or_default(),
            controller: &f.controller,
            instance: &instance,
            action: f.action,
            reason: f.reason,
            event_type: f.event_type.as_str(),
            note: &f.note,
            regarding: writes::Regarding {
                namespace: &f.namespace,
                name: &f.pod,
                uid: &f.uid,
                resource_version: f.resource_version.as_deref(),
            },
        });
        if let Some(s) = series {
            body["series"] = s;
        }
        Write::Create {
            namespace: f.namespace.to_string(),
            body,
        }
    }

    /// client-go's finishSeries: series not seen for [`FINISH_EVERY`]
    /// get their last count written and are forgotten; so are plain
    /// events that old.
    fn finish_series(self: &Arc<Self>, _now: SystemTime, at: Instant) {
        let mut st = self.state.lock();
        let mut forget = Vec::new();
        for (k, e) in &st.cache {
            let mut p = e.progress.lock();
            match p.series {
                Some(s)
                    if !p.finished && at.saturating_duration_since(s.last_at) >= FINISH_EVERY =>
                {
                    p.finished = true;
                    self.mark_dirty(e, &mut p);
                }
                None if !p.queued
                    && at.saturating_duration_since(e.recorded_at) >= FINISH_EVERY =>
                {
                    forget.push(k.clone())
                }
                _ => {}
            }
        }
        for k in forget {
            st.remove(&k);
        }
        let State { order, cache, .. } = &mut *st;
        order.retain(|k| cache.contains_key(k));
    }

    /// client-go's refresh: every open series is written again.
    fn refresh_series(self: &Arc<Self>, _now: SystemTime, _at: Instant) {
        let st = self.state.lock();
        for e in st.cache.values() {
            let mut p = e.progress.lock();
            if p.series.is_some() && !p.finished {
                self.mark_dirty(e, &mut p);
            }
        }
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
