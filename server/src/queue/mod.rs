//! The scheduling queue: activeQ, backoffQ and the unschedulable pods.
//!
//! Where a pending pod is, and what moves it:
//!
//! ```text
//!            add / update                    pop
//!  (new) ───────────────────▶ activeQ ───────────────▶ in flight (being scheduled)
//!    │   PreEnqueue fails       ▲   ▲                        │ fails
//!    ▼                          │   │ backoff ends           ▼
//!  unschedulable ◀──────────────┼── backoffQ ◀── an event may help (or an error)
//!  (gated, or rejected with     │       ▲
//!   no event that may help)     │       │ event whose hint says Queue, still backing off
//!    └──── event whose hint says Queue, backoff over; or 5 min stay ──┘
//! ```
//!
//! * activeQ is ordered by the profiles' QueueSort plugin (the same in all).
//! * A pod that failed waits `initial × 2^(n-1)` capped at the maximum
//!   (1 s doubling to 10 s by default), n counting its unschedulable
//!   attempts, or its consecutive errors after an error. A pod that failed
//!   with an error (no plugin rejected it) always goes through backoff.
//! * A pod rejected by plugins goes to the unschedulable pods, unless an
//!   event arrived while it was being scheduled that one of the rejecting
//!   plugins registered for and whose hint says it may help: then to
//!   backoffQ (or straight to activeQ if its backoff is over, or if the
//!   plugin had answered `Pending`).
//! * A cluster event moves each unschedulable pod that one of its rejecting
//!   plugins registered for, when that plugin's hint agrees.
//! * Unschedulable pods are flushed after 5 minutes (to backoffQ or activeQ).
//! * When activeQ is empty, pop takes the head of backoffQ without waiting
//!   out its backoff (upstream's SchedulerPopFromBackoffQ, on by default);
//!   pods that failed with an error are never popped early.
//! * PreEnqueue plugins run before a pod enters activeQ (or backoffQ); a
//!   pod they hold (scheduling gates) waits among the unschedulable pods
//!   until an event their hint accepts, such as its last gate's removal.
//! * Unlike upstream, which checks on 1 s and 30 s tickers, backoff and the
//!   5-minute stay end at their exact times (a timer per next deadline).
//!
//! With `GenericWorkload` on, the queue holds entities: pods scheduled
//! alone, and PodGroups whose pods are scheduled together in one group
//! cycle (see [`groups`] for their rules). activeQ, backoffQ and the
//! unschedulable entities hold both kinds, in two heaps each whose heads
//! QueueSort compares at pop.

mod groups;
mod heap;
mod nominator;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use heap::KeyedHeap;
use nominator::Nominator;

use crate::framework::{
    ActionType, ClusterEvent, EventObject, EventResource, Framework, NominatedPods, NominatingInfo,
    PodNominator, QueueSortPlugin, QueuedEntity, QueuedPodGroupInfo, QueuedPodInfo, QueueingHint,
    pod_scheduling_property_changes,
};
use crate::model::{GroupKey, PodInfo, PodRef};

pub use groups::Popped;

/// How long a pod may stay among the unschedulable pods before it is
/// retried anyway.
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// Queue timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// The first backoff (podInitialBackoffSeconds).
    pub initial_backoff: Duration,
    /// The backoff's cap (podMaxBackoffSeconds).
    pub max_backoff: Duration,
    /// The longest stay among the unschedulable pods.
    pub max_in_unschedulable: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
        }
    }
}

/// Where a pending pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueName {
    /// activeQ.
    Active,
    /// backoffQ.
    Backoff,
    /// The unschedulable pods.
    Unschedulable,
    /// Among the unschedulable pods, held by a PreEnqueue plugin.
    Gated,
    /// Popped: in its scheduling cycle, or in its binding cycle until it
    /// is bound or requeued.
    InFlight,
    /// A member of a PodGroup not observed yet: waits for the PodGroup.
    Incomplete,
    /// A member of a PodGroup whose group cycle is running: joins the
    /// group's entity when that cycle ends.
    Pending,
}

/// A pending pod as listed by [`SchedulingQueue::list`].
#[derive(Debug, Clone)]
pub struct QueueEntry {
    /// Which queue.
    pub queue: QueueName,
    /// The pod and its history (for in-flight pods, as of its pop).
    pub info: QueuedPodInfo,
}

/// Counts of pending pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// In activeQ.
    pub active: usize,
    /// In backoffQ.
    pub backoff: usize,
    /// Among the unschedulable pods, not gated.
    pub unschedulable: usize,
    /// Held by PreEnqueue plugins.
    pub gated: usize,
    /// Being scheduled.
    pub in_flight: usize,
    /// Members of PodGroups not observed yet.
    pub incomplete: usize,
    /// Members waiting for their group's cycle to end.
    pub pending: usize,
}

/// Counts of queued entities by kind (`scheduler_queued_entities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityCounts {
    /// In activeQ: (pods, groups).
    pub active: (usize, usize),
    /// In backoffQ.
    pub backoff: (usize, usize),
    /// Among the unschedulable entities, not gated.
    pub unschedulable: (usize, usize),
    /// Held by PreEnqueue plugins.
    pub gated: (usize, usize),
}

/// Why an operation on the queue was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The pod is already queued.
    #[error("pod {0} is already present in the {1}")]
    AlreadyPresent(String, &'static str),
}

/// How a pod that may have become schedulable is requeued (ordered: a
/// larger strategy wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strategy {
    Skip,
    AfterBackoff,
    Immediately,
}

enum Recorded {
    /// A pod popped at this point; events after it concern it.
    Marker,
    /// A marker whose pod is done.
    Done,
    Event(ClusterEvent, Option<EventObject>, Option<EventObject>),
}

struct Inner {
    cfg: QueueConfig,
    profiles: HashMap<Arc<str>, Arc<Framework>>,
    sort: Arc<dyn QueueSortPlugin>,
    active: KeyedHeap,
    /// Pods rejected by plugins, waiting out their backoff.
    backoff: KeyedHeap,
    /// Pods that failed with an error, waiting out their backoff.
    error_backoff: KeyedHeap,
    unschedulable: HashMap<Arc<str>, QueuedPodInfo>,
    /// When each unschedulable pod is to be flushed.
    flush_at: BTreeSet<(Instant, Arc<str>)>,
    /// Pods being scheduled: their pod and the sequence number of their
    /// marker in `recorded`.
    in_flight: HashMap<Arc<str>, (QueuedPodInfo, u64)>,
    /// Pods past Permit, in PreBind, Bind or PostBind: no longer tracked
    /// for events (as upstream, which calls Done there), but still listed
    /// as in flight until their binding cycle ends, so that a pod is never
    /// in neither the queue nor the cluster's bound pods.
    binding: HashMap<Arc<str>, QueuedPodInfo>,
    /// Events received while pods were in flight, after their markers.
    recorded: VecDeque<(u64, Recorded)>,
    next_seq: u64,
    nominator: Nominator,
    closed: bool,
    /// Pods that entered each queue, by queue and event.
    incoming: HashMap<(u8, ClusterEvent), u64>,
    /// PodGroup entities (see [`groups`]).
    groups: groups::Groups,
}

const INCOMING_ACTIVE: u8 = 0;
const INCOMING_BACKOFF: u8 = 1;
const INCOMING_UNSCHEDULABLE: u8 = 2;
const INCOMING_QUEUES: [&str; 3] = ["active", "backoff", "unschedulable"];

/// The marker of a pod in flight with its group: never recorded (the
/// group's marker stands for it; sequence numbers start at 1).
const NO_MARKER: u64 = 0;

/// A new pending pod (upstream's `PodAdd` label).
const POD_ADD: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    label: Some("PodAdd"),
};
/// A pending pod changed in a way no plugin's event names.
const POD_UPDATE: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE);

/// The scheduling queue. Shared between the event handlers (add, update,
/// delete, moves), the scheduling loop (pop, failures) and a timer task
/// ([`SchedulingQueue::run`]); every method holds the lock briefly and
/// never across an await.
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    pop_ready: Notify,
    timers_changed: Notify,
}

impl std::fmt::Debug for SchedulingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulingQueue")
            .field("counts", &self.counts())
            .finish()
    }
}

fn backoff_duration(cfg: &QueueConfig, q: &QueuedPodInfo) -> Duration {
    let count = if q.consecutive_errors_count > 0 {
        q.consecutive_errors_count
    } else {
        q.unschedulable_count
    };
    backoff_for(cfg, count)
}

/// `initial × 2^(count-1)`, capped at the maximum (0 for no failure).
fn backoff_for(cfg: &QueueConfig, count: u32) -> Duration {
    if count == 0 || cfg.max_backoff.is_zero() {
        return Duration::ZERO;
    }
    let mut d = cfg.initial_backoff;
    for _ in 1..count {
        d = d.saturating_mul(2);
        if d >= cfg.max_backoff {
            return cfg.max_backoff;
        }
    }
    d.min(cfg.max_backoff)
}

/// backoffQ's order: earliest expiry first, then the QueueSort order.
fn backoff_order(
    sort: &Arc<dyn QueueSortPlugin>,
) -> impl Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + use<> {
    let sort = sort.clone();
    move |a, b| {
        a.backoff_expiration < b.backoff_expiration
            || (a.backoff_expiration == b.backoff_expiration && sort.less_pods(a, b))
    }
}

fn is_backing_off(q: &QueuedPodInfo, now: Instant) -> bool {
    q.backoff_expiration.is_some_and(|e| e > now)
}

fn is_error(q: &QueuedPodInfo) -> bool {
    q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty()
}

impl Inner {
    fn framework(&self, pod: &PodInfo) -> Option<&Arc<Framework>> {
        self.profiles.get(&pod.scheduler_name)
    }

    fn contains(&self, uid: &str) -> Option<&'static str> {
        if self.active.contains(uid) {
            Some("active queue")
        } else if self.backoff.contains(uid) || self.error_backoff.contains(uid) {
            Some("backoff queue")
        } else if self.unschedulable.contains_key(uid) {
            Some("unschedulable queue")
        } else {
            None
        }
    }

    fn insert_unschedulable(&mut self, q: QueuedPodInfo) {
        let since = q
            .flush_timestamp
            .map_or(q.timestamp, |f| f.max(q.timestamp));
        let uid = q.pod.uid.clone();
        self.remove_unschedulable(&uid);
        self.flush_at
            .insert((since + self.cfg.max_in_unschedulable, uid.clone()));
        self.unschedulable.insert(uid, q);
    }

    fn remove_unschedulable(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        let q = self.unschedulable.remove(uid)?;
        let since = q
            .flush_timestamp
            .map_or(q.timestamp, |f| f.max(q.timestamp));
        self.flush_at
            .remove(&(since + self.cfg.max_in_unschedulable, q.pod.uid.clone()));
        Some(q)
    }

    /// Runs PreEnqueue; a pod held by a plugin is parked among the
    /// unschedulable pods and `None` is returned.
    fn pre_enqueue(&mut self, mut q: QueuedPodInfo, event: ClusterEvent) -> Option<QueuedPodInfo> {
        let Some(fw) = self.framework(&q.pod).cloned() else {
            return Some(q);
        };
        let s = fw.run_pre_enqueue(&q.pod, q.gating_plugin);
        if s.is_success() {
            q.gating_plugin = None;
            return Some(q);
        }
        let plugin = s.plugin().unwrap_or("PreEnqueue");
        q.gating_plugin = Some(plugin);
        q.unschedulable_plugins.insert(plugin);
        q.last_failure = Some(Arc::from(s.message()));
        self.insert_unschedulable(q);
        self.count_incoming(INCOMING_UNSCHEDULABLE, event);
        None
    }

    /// Moves a pod into activeQ, through PreEnqueue. Returns whether it got
    /// there.
    fn move_to_active(&mut self, q: QueuedPodInfo, now: Instant, event: ClusterEvent) -> bool {
        let Some(mut q) = self.pre_enqueue(q, event) else {
            return false;
        };
        self.count_incoming(INCOMING_ACTIVE, event);
        q.initial_attempt_timestamp.get_or_insert(now);
        self.push_active(q);
        true
    }

    fn push_active(&mut self, q: QueuedPodInfo) {
        let sort = self.sort.clone();
        self.active.push(q, &|a, b| sort.less_pods(a, b));
    }

    fn push_backoff(&mut self, q: QueuedPodInfo) {
        let less = backoff_order(&self.sort);
        if is_error(&q) {
            self.error_backoff.push(q, &less);
        } else {
            self.backoff.push(q, &less);
        }
    }

    fn remove_backoff(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        let less = backoff_order(&self.sort);
        self.backoff
            .remove(uid, &less)
            .or_else(|| self.error_backoff.remove(uid, &less))
    }

    /// Requeues a pod by strategy. Returns whether it went to activeQ or
    /// backoffQ (somewhere it will be popped from).
    fn requeue(
        &mut self,
        q: QueuedPodInfo,
        strategy: Strategy,
        now: Instant,
        event: ClusterEvent,
    ) -> bool {
        match strategy {
            Strategy::Skip => {
                self.insert_unschedulable(q);
                self.count_incoming(INCOMING_UNSCHEDULABLE, event);
                false
            }
            Strategy::AfterBackoff if is_backing_off(&q, now) => match self.pre_enqueue(q, event) {
                Some(q) => {
                    self.push_backoff(q);
                    self.count_incoming(INCOMING_BACKOFF, event);
                    true
                }
                None => false,
            },
            _ => self.move_to_active(q, now, event),
        }
    }

    /// Counts a pod entering a queue (scheduler_queue_incoming_pods_total).
    #[inline]
    fn count_incoming(&mut self, queue: u8, event: ClusterEvent) {
        *self.incoming.entry((queue, event)).or_default() += 1;
    }

    /// Whether `event` may make `q` schedulable, by the hints of the plugins
    /// that rejected it.
    fn worth_requeuing(
        &self,
        q: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        if q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty() {
            return Strategy::AfterBackoff;
        }
        if event.is_wildcard() {
            // A wildcard aimed at one pod (ForceActivate) concerns only it.
            return match new {
                Some(EventObject::Pod(p)) if p.uid != q.pod.uid => Strategy::Skip,
                Some(EventObject::Node(_) | EventObject::Object(_)) => Strategy::Skip,
                _ => Strategy::AfterBackoff,
            };
        }
        let Some(fw) = self.framework(&q.pod) else {
            return Strategy::AfterBackoff;
        };
        let mut best = Strategy::Skip;
        for pe in fw.events() {
            let pending = q.pending_plugins.contains(pe.plugin);
            if !pending && !q.unschedulable_plugins.contains(pe.plugin) {
                continue;
            }
            for reg in pe.events.iter().filter(|r| r.event.matches(event)) {
                let hint = match &reg.hint {
                    None => QueueingHint::Queue,
                    Some(f) => f(&q.pod, old, new).unwrap_or_else(|e| {
                        tracing::warn!(plugin = pe.plugin, pod = %q.pod.key(), error = %e,
                            "queueing hint failed; requeueing the pod");
                        QueueingHint::Queue
                    }),
                };
                if hint == QueueingHint::Skip {
                    continue;
                }
                if pending {
                    return Strategy::Immediately;
                }
                best = Strategy::AfterBackoff;
                if q.pending_plugins.is_empty() {
                    return best;
                }
            }
        }
        best
    }

    fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard()
            || self.profiles.values().any(|fw| {
                fw.events()
                    .iter()
                    .any(|pe| pe.events.iter().any(|r| r.event.matches(event)))
            })
    }

    fn record(&mut self, entry: Recorded) -> u64 {
        self.next_seq += 1;
        self.recorded.push_back((self.next_seq, entry));
        self.next_seq
    }

    fn move_all(
        &mut self,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        pre_check: Option<&dyn Fn(&PodInfo) -> bool>,
        now: Instant,
    ) -> bool {
        if !self.is_event_of_interest(event) {
            return false;
        }
        let mut moves = Vec::new();
        for (uid, q) in &self.unschedulable {
            if pre_check.is_some_and(|f| !f(&q.pod)) {
                continue;
            }
            if let Some(gate) = q.gating_plugin {
                // A gated pod moves only on events its gate registered for.
                let relevant = event.is_wildcard()
                    || self.framework(&q.pod).is_some_and(|fw| {
                        fw.events()
                            .iter()
                            .filter(|pe| pe.plugin == gate)
                            .any(|pe| pe.events.iter().any(|r| r.event.matches(event)))
                    });
                if !relevant {
                    continue;
                }
            }
            let strategy = self.worth_requeuing(q, event, old, new);
            if strategy != Strategy::Skip {
                moves.push((q.timestamp, uid.clone(), strategy));
            }
        }
        // In the order they were queued, not the map's (which differs from
        // run to run): pods of one priority queued at one instant (as in a
        // simulation, where a cycle takes no time) then come out of the
        // heaps in the same order each run.
        moves.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut activated = false;
        for (_, uid, strategy) in moves {
            if let Some(q) = self.remove_unschedulable(&uid) {
                activated |= self.requeue(q, strategy, now, *event);
            }
        }
        if !self.groups.unschedulable.is_empty() {
            activated |= self.move_all_groups(event, old, new, pre_check, now);
        }
        if self.recording() {
            self.record(Recorded::Event(*event, old.cloned(), new.cloned()));
        }
        activated
    }

    fn done(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        self.binding.remove(uid);
        let (q, seq) = self.in_flight.remove(uid)?;
        self.end_marker(seq);
        Some(q)
    }

    /// Marks the marker `seq` done and drops the events nobody needs any
    /// more: those before the oldest marker still in use.
    fn end_marker(&mut self, seq: u64) {
        if let Ok(i) = self.recorded.binary_search_by_key(&seq, |(s, _)| *s) {
            self.recorded[i].1 = Recorded::Done;
        }
        while matches!(
            self.recorded.front(),
            Some((_, Recorded::Done | Recorded::Event(..)))
        ) {
            self.recorded.pop_front();
        }
    }

    /// Whether events are to be recorded: a pod or a group is in flight.
    fn recording(&self) -> bool {
        !self.in_flight.is_empty() || self.groups.marker.is_some()
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.backoff.peek().and_then(|q| q.backoff_expiration),
            self.error_backoff.peek().and_then(|q| q.backoff_expiration),
            self.flush_at.first().map(|(t, _)| *t),
            self.next_group_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves pods whose backoff ended to activeQ and flushes pods that
    /// stayed too long among the unschedulable ones. Returns whether any pod
    /// became poppable.
    fn flush(&mut self, now: Instant) -> bool {
        let mut activated = false;
        let less = backoff_order(&self.sort);
        loop {
            let ready = |h: &KeyedHeap| h.peek().is_some_and(|q| !is_backing_off(q, now));
            let q = if ready(&self.error_backoff) {
                self.error_backoff.pop(&less)
            } else if ready(&self.backoff) {
                self.backoff.pop(&less)
            } else {
                break;
            };
            // PreEnqueue ran when the pod entered backoffQ.
            let mut q = q.expect("peeked");
            q.initial_attempt_timestamp.get_or_insert(now);
            self.push_active(q);
            self.count_incoming(INCOMING_ACTIVE, ClusterEvent::BACKOFF_COMPLETE);
            activated = true;
        }
        let due: Vec<Arc<str>> = self
            .flush_at
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, uid)| uid.clone())
            .collect();
        activated |= self.flush_groups(now);
        for uid in due {
            if self.groups.unschedulable.contains_key(&uid) {
                activated |= self.flush_group(&uid, now);
                continue;
            }
            if let Some(mut q) = self.remove_unschedulable(&uid) {
                q.flush_timestamp = Some(now);
                let strategy =
                    self.worth_requeuing(&q, &ClusterEvent::UNSCHEDULABLE_TIMEOUT, None, None);
                activated |= self.requeue(q, strategy, now, ClusterEvent::UNSCHEDULABLE_TIMEOUT);
            }
        }
        activated
    }
}

impl SchedulingQueue {
    /// A queue for the given profiles (by schedulerName). Their QueueSort
    /// plugin must be the same; the first profile's is used.
    pub fn new(cfg: QueueConfig, profiles: HashMap<Arc<str>, Arc<Framework>>) -> Arc<Self> {
        let sort = profiles
            .values()
            .next()
            .map(|fw| fw.queue_sort().clone())
            .expect("at least one profile");
        Arc::new(Self {
            inner: Mutex::new(Inner {
                cfg,
                profiles,
                sort,
                active: KeyedHeap::default(),
                backoff: KeyedHeap::default(),
                error_backoff: KeyedHeap::default(),
                unschedulable: HashMap::new(),
                flush_at: BTreeSet::new(),
                in_flight: HashMap::new(),
                binding: HashMap::new(),
                recorded: VecDeque::new(),
                next_seq: 0,
                nominator: Nominator::default(),
                closed: false,
                incoming: HashMap::new(),
                groups: groups::Groups::default(),
            }),
            pop_ready: Notify::new(),
            timers_changed: Notify::new(),
        })
    }

    fn wake(&self, activated: bool) {
        if activated {
            self.pop_ready.notify_one();
        }
        self.timers_changed.notify_one();
    }

    /// A new pending pod.
    pub fn add(&self, pod: PodRef) {
        let now = Instant::now();
        let activated = {
            let mut inner = self.inner.lock();
            if inner.contains(&pod.uid).is_some()
                || inner.in_flight.contains_key(&pod.uid)
                || inner.groups.member_of.contains_key(&pod.uid)
            {
                drop(inner);
                return self.update(&pod.clone(), pod);
            }
            inner.nominator.add(&pod, None);
            match inner.group_of(&pod) {
                Some(key) => {
                    inner.add_group_member(key, QueuedPodInfo::new(pod, now), now, POD_ADD)
                }
                None => inner.move_to_active(QueuedPodInfo::new(pod, now), now, POD_ADD),
            }
        };
        self.wake(activated);
    }

    /// A pending pod changed.
    pub fn update(&self, old: &PodRef, new: PodRef) {
        let now = Instant::now();
        let uid = new.uid.clone();
        let activated = {
            let mut inner = self.inner.lock();
            let events = pod_scheduling_property_changes(old, &new);
            let old_obj = EventObject::Pod(old.clone());
            let new_obj = EventObject::Pod(new.clone());
            if inner.in_flight.contains_key(&uid) {
                for e in events {
                    inner.record(Recorded::Event(
                        e,
                        Some(old_obj.clone()),
                        Some(new_obj.clone()),
                    ));
                }
                return;
            }
            inner.nominator.update(old, &new);
            if let Some(activated) = inner.update_group_member(old, &new, &events, now) {
                activated
            } else if inner.group_of(&new).is_some() {
                // A member not queued (added while the queue missed it).
                let key = inner.group_of(&new).expect("checked");
                inner.nominator.add(&new, None);
                inner.add_group_member(key, QueuedPodInfo::new(new, now), now, POD_UPDATE)
            } else if let Some(mut q) = inner.active.get(&uid).cloned() {
                q.pod = new;
                inner.push_active(q);
                return;
            } else if let Some(mut q) = inner.remove_backoff(&uid) {
                q.pod = new;
                inner.push_backoff(q);
                return;
            } else if let Some(mut q) = inner.remove_unschedulable(&uid) {
                q.pod = new;
                let mut strategy = Strategy::Skip;
                let mut why = events.first().copied().unwrap_or(POD_UPDATE);
                for e in &events {
                    strategy = inner.worth_requeuing(&q, e, Some(&old_obj), Some(&new_obj));
                    if strategy != Strategy::Skip {
                        why = *e;
                        break;
                    }
                }
                if strategy == Strategy::Skip {
                    // It stays where it was: not an incoming pod.
                    inner.insert_unschedulable(q);
                    false
                } else {
                    inner.requeue(q, strategy, now, why)
                }
            } else {
                inner.nominator.add(&new, None);
                inner.move_to_active(QueuedPodInfo::new(new, now), now, POD_UPDATE)
            }
        };
        self.wake(activated);
    }

    /// A pending pod went away (deleted, or bound by someone).
    pub fn delete(&self, uid: &str) {
        let mut inner = self.inner.lock();
        inner.nominator.delete(uid);
        if inner.remove_group_member(uid) {
            return;
        }
        let sort = inner.sort.clone();
        if inner
            .active
            .remove(uid, &|a, b| sort.less_pods(a, b))
            .is_none()
            && inner.remove_backoff(uid).is_none()
        {
            inner.remove_unschedulable(uid);
        }
    }

    /// Takes the next entity to schedule (a pod, or a PodGroup's members),
    /// waiting until there is one; `None` once the queue is closed.
    pub async fn pop_entity(&self) -> Option<Popped> {
        loop {
            let notified = self.pop_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut inner = self.inner.lock();
                if inner.closed {
                    return None;
                }
                match inner.pop_next() {
                    Some(Popped::Pod(mut q)) => {
                        q.attempts += 1;
                        let seq = inner.record(Recorded::Marker);
                        inner.in_flight.insert(q.pod.uid.clone(), (q.clone(), seq));
                        return Some(Popped::Pod(q));
                    }
                    Some(Popped::Group(mut g)) => {
                        inner.group_popped(&mut g);
                        return Some(Popped::Group(g));
                    }
                    None => {}
                }
            }
            notified.await;
        }
    }

    /// [`SchedulingQueue::pop_entity`] for a queue that holds no PodGroup
    /// entities (groups off): the next pod.
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            match self.pop_entity().await? {
                Popped::Pod(q) => return Some(q),
                Popped::Group(g) => {
                    // Not expected here; the group goes back as attempted.
                    tracing::error!(group = %g.key, "pop() took a pod group; use pop_entity");
                    self.add_attempted_pod_group(g, &crate::framework::Status::success());
                }
            }
        }
    }

    /// The pod the next [`SchedulingQueue::pop`] would take if nothing
    /// changed before it (the head of activeQ, else of backoffQ), without
    /// taking it: for work sent ahead for it (the scheduler's look-ahead),
    /// which is dropped if another pod comes first.
    pub fn peek(&self) -> Option<PodRef> {
        let inner = self.inner.lock();
        if inner.closed || inner.group_ahead() {
            return None;
        }
        inner
            .active
            .peek()
            .or_else(|| inner.backoff.peek())
            .map(|q| q.pod.clone())
    }

    /// The next `k` pods [`SchedulingQueue::pop`] would take if nothing
    /// changed before (activeQ's in order, then backoffQ's), without taking
    /// them: for work sent ahead for them.
    pub fn peek_many(&self, k: usize) -> Vec<PodRef> {
        let inner = self.inner.lock();
        if inner.closed || inner.group_ahead() {
            return Vec::new();
        }
        let sort = inner.sort.clone();
        let mut out: Vec<PodRef> = inner
            .active
            .first(k, &|a, b| sort.less_pods(a, b))
            .into_iter()
            .map(|q| q.pod.clone())
            .collect();
        if out.len() < k {
            let more = inner.backoff.first(k - out.len(), &backoff_order(&sort));
            out.extend(more.into_iter().map(|q| q.pod.clone()));
        }
        out
    }

    /// Returns a pod that failed to the queue: where to depends on who
    /// rejected it and on the events seen while it was in flight. Also
    /// ends its in-flight tracking.
    pub fn add_unschedulable_if_not_present(&self, mut q: QueuedPodInfo) -> Result<(), QueueError> {
        let now = Instant::now();
        let activated = {
            let mut inner = self.inner.lock();
            let uid = q.pod.uid.clone();
            if let Some(key) = inner.group_of(&q.pod) {
                if inner.groups.member_of.contains_key(&uid) {
                    return Err(QueueError::AlreadyPresent(q.pod.key(), "pod group"));
                }
                let activated = inner.member_failed(key, q, now);
                drop(inner);
                self.wake(activated);
                return Ok(());
            }
            let marker = inner.in_flight.get(&uid).map(|(_, seq)| *seq);
            let result = (|| {
                if let Some(which) = inner.contains(&uid) {
                    return Err(QueueError::AlreadyPresent(q.pod.key(), which));
                }
                if is_error(&q) {
                    q.consecutive_errors_count += 1;
                } else {
                    q.unschedulable_count += 1;
                    q.consecutive_errors_count = 0;
                }
                q.timestamp = now;
                q.flush_timestamp = None;
                q.backoff_expiration = Some(now + backoff_duration(&inner.cfg, &q));
                let strategy = if is_error(&q) {
                    Strategy::AfterBackoff
                } else {
                    let mut best = Strategy::Skip;
                    if let Some(marker) = marker {
                        for (_, rec) in inner.recorded.iter().filter(|(s, _)| *s > marker) {
                            if let Recorded::Event(e, old, new) = rec {
                                best = best.max(inner.worth_requeuing(
                                    &q,
                                    e,
                                    old.as_ref(),
                                    new.as_ref(),
                                ));
                                if best == Strategy::Immediately
                                    || (best == Strategy::AfterBackoff
                                        && q.pending_plugins.is_empty())
                                {
                                    break;
                                }
                            }
                        }
                    } else {
                        best = Strategy::AfterBackoff;
                    }
                    best
                };
                Ok(inner.requeue(q, strategy, now, ClusterEvent::SCHEDULE_ATTEMPT_FAILURE))
            })();
            inner.done(&uid);
            result?
        };
        self.wake(activated);
        Ok(())
    }

    /// Ends the in-flight tracking of a pod that will not come back (bound,
    /// deleted, or handed to its binding cycle).
    pub fn done(&self, uid: &str) {
        self.inner.lock().done(uid);
    }

    /// Ends the in-flight tracking of a pod whose binding cycle goes on past
    /// Permit; [`SchedulingQueue::list`] shows it in flight until
    /// [`SchedulingQueue::binding_finished`] or [`SchedulingQueue::done`], or
    /// until it is queued again.
    pub fn binding_started(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if let Some(q) = inner.done(uid) {
            inner.binding.insert(q.pod.uid.clone(), q);
        }
    }

    /// The binding cycle of a pod handed over by
    /// [`SchedulingQueue::binding_started`] ended.
    pub fn binding_finished(&self, uid: &str) {
        self.inner.lock().binding.remove(uid);
    }

    /// A cluster event: moves the unschedulable pods it may help. `pre_check`
    /// narrows the candidates.
    pub fn move_all_to_active_or_backoff(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        pre_check: Option<&dyn Fn(&PodInfo) -> bool>,
    ) {
        let activated = self.inner.lock().move_all(
            &event,
            old.as_ref(),
            new.as_ref(),
            pre_check,
            Instant::now(),
        );
        self.wake(activated);
    }

    /// Moves the given pods to activeQ now, whatever their backoff.
    pub fn activate(&self, pods: &[PodRef]) {
        let now = Instant::now();
        let mut activated = false;
        {
            let mut inner = self.inner.lock();
            // Members of one group activate its entity once.
            let mut groups_done: Vec<GroupKey> = Vec::new();
            let mut in_flight_group_seen = false;
            for pod in pods {
                if inner.in_flight.contains_key(&pod.uid) {
                    // Being scheduled: the activation is seen when its
                    // attempt ends; for the group in flight (GangScheduling's
                    // Permit activating the rest of the gang, pod after pod)
                    // once is enough.
                    let of_group_in_flight = inner.groups.in_flight.is_some()
                        && inner.group_of(pod).as_ref() == inner.groups.in_flight.as_ref();
                    if of_group_in_flight && std::mem::replace(&mut in_flight_group_seen, true) {
                        continue;
                    }
                    inner.record(Recorded::Event(
                        ClusterEvent::FORCE_ACTIVATE,
                        None,
                        Some(EventObject::Pod(pod.clone())),
                    ));
                    continue;
                }
                if let Some(key) = inner.groups.member_of.get(&pod.uid) {
                    if !groups_done.contains(key) {
                        let key = key.clone();
                        activated |= inner.activate_group(&key, pod, now);
                        groups_done.push(key);
                    }
                    continue;
                }
                let q = inner
                    .remove_unschedulable(&pod.uid)
                    .or_else(|| inner.remove_backoff(&pod.uid));
                match q {
                    Some(q) => {
                        activated |= inner.move_to_active(q, now, ClusterEvent::FORCE_ACTIVATE)
                    }
                    None if inner.in_flight.contains_key(&pod.uid) => {
                        inner.record(Recorded::Event(
                            ClusterEvent::FORCE_ACTIVATE,
                            None,
                            Some(EventObject::Pod(pod.clone())),
                        ));
                    }
                    None => {}
                }
            }
        }
        self.wake(activated);
    }

    /// Moves the pods whose last attempt failed with an error of `plugin`
    /// (an extender that is back) to activeQ at once, out of their backoff
    /// or the unschedulable pods, as a queueing hint for that plugin would;
    /// and the PodGroups it failed or rejected (a GroupPermit extender
    /// coming back is the change a group it refused waits for). Returns
    /// how many pods moved.
    pub fn activate_failed_by(&self, plugin: &str) -> usize {
        let (pods, groups): (Vec<PodRef>, Vec<QueuedPodGroupInfo>) = {
            let mut inner = self.inner.lock();
            let pods = inner
                .backoff
                .iter()
                .chain(inner.error_backoff.iter())
                .chain(inner.unschedulable.values())
                .filter(|q| q.error_plugin == Some(plugin))
                .map(|q| q.pod.clone())
                .collect();
            (pods, inner.take_groups_failed_by(plugin))
        };
        let moved = pods.len() + groups.iter().map(|g| g.pods.len()).sum::<usize>();
        if !groups.is_empty() {
            let now = Instant::now();
            let activated = {
                let mut inner = self.inner.lock();
                let mut activated = false;
                for g in groups {
                    activated |= inner.requeue_group(
                        g,
                        Strategy::Immediately,
                        now,
                        ClusterEvent::FORCE_ACTIVATE,
                    );
                }
                activated
            };
            self.wake(activated);
        }
        if !pods.is_empty() {
            self.activate(&pods);
        }
        moved
    }

    /// Records the node a pod is nominated to (after preemption, or to
    /// clear it after a failure).
    pub fn add_nominated_pod(&self, pod: &PodRef, info: &NominatingInfo) {
        self.inner.lock().nominator.add(pod, Some(info));
    }

    /// Forgets a pod's nomination.
    pub fn delete_nominated_pod_if_exists(&self, uid: &str) {
        self.inner.lock().nominator.delete(uid);
    }

    /// The node a pod is nominated to.
    pub fn nominated_node(&self, uid: &str) -> Option<Arc<str>> {
        self.inner.lock().nominator.node_of(uid).cloned()
    }

    /// Runs the backoff and unschedulable-stay timers until the queue is
    /// closed.
    pub async fn run(self: Arc<Self>) {
        loop {
            let notified = self.timers_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (activated, next, closed) = {
                let mut inner = self.inner.lock();
                let activated = inner.flush(Instant::now());
                (activated, inner.next_deadline(), inner.closed)
            };
            if closed {
                return;
            }
            if activated {
                self.pop_ready.notify_one();
            }
            match next {
                Some(t) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(t) => {}
                        _ = &mut notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Stops the queue: `pop` returns `None`, `run` ends.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.pop_ready.notify_waiters();
        self.pop_ready.notify_one();
        self.timers_changed.notify_one();
    }

    /// Whether [`SchedulingQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// How many pods each queue holds.
    pub fn counts(&self) -> QueueCounts {
        let inner = self.inner.lock();
        let gated = inner.unschedulable.values().filter(|q| q.gated()).count();
        let g = &inner.groups;
        let members = |h: &mut dyn Iterator<Item = &QueuedPodGroupInfo>| -> usize {
            h.map(|g| g.pods.len()).sum()
        };
        let group_gated = members(&mut g.unschedulable.values().filter(|g| g.gated()));
        QueueCounts {
            active: inner.active.len() + members(&mut g.active.iter()),
            backoff: inner.backoff.len()
                + inner.error_backoff.len()
                + members(&mut g.backoff.iter().chain(g.error_backoff.iter())),
            unschedulable: inner.unschedulable.len() - gated
                + members(&mut g.unschedulable.values().filter(|g| !g.gated())),
            gated: gated + group_gated,
            in_flight: inner.in_flight.len(),
            incomplete: g.incomplete.values().map(Vec::len).sum(),
            pending: g.pending.len(),
        }
    }

    /// How many entities each queue holds, pods and groups apart
    /// (`scheduler_queued_entities`).
    pub fn entity_counts(&self) -> EntityCounts {
        let inner = self.inner.lock();
        let g = &inner.groups;
        let gated = inner.unschedulable.values().filter(|q| q.gated()).count();
        let group_gated = g.unschedulable.values().filter(|g| g.gated()).count();
        EntityCounts {
            active: (inner.active.len(), g.active.len()),
            backoff: (
                inner.backoff.len() + inner.error_backoff.len(),
                g.backoff.len() + g.error_backoff.len(),
            ),
            unschedulable: (
                inner.unschedulable.len() - gated,
                g.unschedulable.len() - group_gated,
            ),
            gated: (gated, group_gated),
        }
    }

    /// How many PodGroup entities entered each queue, by queue and event
    /// label, sorted (`scheduler_queue_incoming_entities_total` with
    /// `type="podgroup"`).
    pub fn incoming_group_counts(&self) -> Vec<(&'static str, String, u64)> {
        let mut out: Vec<_> = self
            .inner
            .lock()
            .groups
            .incoming
            .iter()
            .map(|((q, e), n)| (INCOMING_QUEUES[usize::from(*q)], e.label(), *n))
            .collect();
        out.sort();
        out
    }

    /// The cluster events the queue holds for pods in flight (upstream's
    /// `scheduler_inflight_events`), by label, with `PodPopped` for the
    /// pods themselves.
    pub fn inflight_event_counts(&self) -> Vec<(String, u64)> {
        let inner = self.inner.lock();
        let mut by: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for (_, r) in &inner.recorded {
            if let Recorded::Event(e, _, _) = r {
                *by.entry(e.label()).or_default() += 1;
            }
        }
        by.insert("PodPopped".into(), inner.in_flight.len() as u64);
        by.into_iter().collect()
    }

    /// How many pods entered each queue, by queue (`active`, `backoff`,
    /// `unschedulable`) and event label, sorted.
    pub fn incoming_counts(&self) -> Vec<(&'static str, String, u64)> {
        let mut out: Vec<_> = self
            .inner
            .lock()
            .incoming
            .iter()
            .map(|((q, e), n)| (INCOMING_QUEUES[usize::from(*q)], e.label(), *n))
            .collect();
        out.sort();
        out
    }

    /// Every pending pod, activeQ first (in pop order), then backoffQ, the
    /// unschedulable pods and those in flight.
    pub fn list(&self) -> Vec<QueueEntry> {
        let inner = self.inner.lock();
        let sort = inner.sort.clone();
        let mut active: Vec<QueuedEntity<'_>> = inner
            .active
            .iter()
            .map(QueuedEntity::Pod)
            .chain(inner.groups.active.iter().map(QueuedEntity::Group))
            .collect();
        active.sort_by(|a, b| {
            if sort.less(*a, *b) {
                std::cmp::Ordering::Less
            } else if sort.less(*b, *a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let entry = |queue, q: &QueuedPodInfo| QueueEntry {
            queue,
            info: q.clone(),
        };
        let members = |e: QueuedEntity<'_>| -> Vec<QueuedPodInfo> {
            match e {
                QueuedEntity::Pod(q) => vec![q.clone()],
                QueuedEntity::Group(g) => g.pods.clone(),
            }
        };
        let mut out: Vec<QueueEntry> = active
            .into_iter()
            .flat_map(members)
            .map(|q| entry(QueueName::Active, &q))
            .collect();
        out.extend(
            inner
                .backoff
                .iter()
                .chain(inner.error_backoff.iter())
                .chain(
                    inner
                        .groups
                        .backoff
                        .iter()
                        .chain(inner.groups.error_backoff.iter())
                        .flat_map(|g| g.pods.iter()),
                )
                .map(|q| entry(QueueName::Backoff, q)),
        );
        // The pools below are maps: listed in the order their entries
        // entered (then by UID), the same from one call to the next.
        let by_time = |a: &&QueuedPodInfo, b: &&QueuedPodInfo| {
            (a.timestamp, &a.pod.uid).cmp(&(b.timestamp, &b.pod.uid))
        };
        let mut groups: Vec<(&Arc<str>, &QueuedPodGroupInfo)> =
            inner.groups.unschedulable.iter().collect();
        groups.sort_by_key(|(key, _)| *key);
        out.extend(groups.into_iter().flat_map(|(_, g)| {
            let queue = if g.gated() {
                QueueName::Gated
            } else {
                QueueName::Unschedulable
            };
            g.pods.iter().map(move |q| entry(queue, q))
        }));
        let mut incomplete: Vec<(&GroupKey, &Vec<QueuedPodInfo>)> =
            inner.groups.incomplete.iter().collect();
        incomplete.sort_by(|a, b| a.0.cmp(b.0));
        out.extend(
            incomplete
                .into_iter()
                .flat_map(|(_, pods)| pods)
                .map(|q| entry(QueueName::Incomplete, q)),
        );
        out.extend(
            inner
                .groups
                .pending
                .iter()
                .map(|q| entry(QueueName::Pending, q)),
        );
        let mut unschedulable: Vec<&QueuedPodInfo> = inner.unschedulable.values().collect();
        unschedulable.sort_by(by_time);
        out.extend(unschedulable.into_iter().map(|q| {
            entry(
                if q.gated() {
                    QueueName::Gated
                } else {
                    QueueName::Unschedulable
                },
                q,
            )
        }));
        let mut in_flight: Vec<&QueuedPodInfo> = inner
            .in_flight
            .values()
            .map(|(q, _)| q)
            .chain(inner.binding.values())
            .collect();
        in_flight.sort_by(by_time);
        out.extend(in_flight.into_iter().map(|q| entry(QueueName::InFlight, q)));
        out
    }
}

impl PodNominator for SchedulingQueue {
    fn nominated_pods(&self) -> Arc<NominatedPods> {
        self.inner.lock().nominator.snapshot()
    }

    fn activate(&self, pods: &[PodRef]) {
        SchedulingQueue::activate(self, pods);
    }
}

#[cfg(test)]
mod tests;
