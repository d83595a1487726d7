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
//! * activeQ is ordered by the profiles' QueueSort plugin (the same in all);
//!   pods it ties take their turn in the order they came (see `heap`).
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
//!
//! This file holds the queue's face (add, update, pop, fail, move,
//! activate) over its state, which is in `inner` (pods) and `group_state`
//! (PodGroups, whose moves are in `groups`); `types` has what it is
//! configured with and reports, `backoff` the waits, `heap` the ordered
//! places, `nominator` the nominations, and `listing` the counts and lists.

mod backoff;
mod group_state;
mod groups;
mod heap;
mod inner;
mod listing;
mod nominator;
mod types;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use backoff::{backoff_duration, backoff_order, is_error};
use group_state::Groups;
use heap::KeyedHeap;
use inner::{Inner, POD_ADD, POD_UPDATE, Recorded, Strategy};
use nominator::Nominator;

use crate::framework::{
    ClusterEvent, EventObject, Framework, NominatedPods, NominatingInfo, PodNominator,
    QueuedPodGroupInfo, QueuedPodInfo, pod_scheduling_property_changes,
};
use crate::model::{GroupKey, PodInfo, PodRef};

pub use group_state::Popped;
pub use types::{
    DEFAULT_MAX_IN_UNSCHEDULABLE, EntityCounts, QueueConfig, QueueCounts, QueueEntry, QueueError,
    QueueName,
};

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
                unschedulable: Default::default(),
                flush_at: BTreeSet::new(),
                in_flight: Default::default(),
                binding: Default::default(),
                recorded: VecDeque::new(),
                next_seq: 0,
                nominator: Nominator::default(),
                closed: false,
                incoming: HashMap::default(),
                groups: Groups::default(),
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
                let of_group_in_flight = inner.groups.manager.is_some()
                    && inner.groups.in_flight.as_ref().is_some_and(|k| {
                        pod.scheduling_group.as_ref() == Some(&k.name)
                            && pod.namespace == k.namespace
                    });
                // For the group in flight (GangScheduling's Permit
                // activating the rest of the gang, pod after pod) one
                // activation is enough: a member being scheduled would be
                // skipped below, and one waiting for the cycle to end
                // would only record the same event again.
                if of_group_in_flight && in_flight_group_seen {
                    continue;
                }
                if inner.in_flight.contains_key(&pod.uid) {
                    // Being scheduled: the activation is seen when its
                    // attempt ends.
                    in_flight_group_seen |= of_group_in_flight;
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
