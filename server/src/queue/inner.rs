//! The queue's state under its lock: the pods' places (activeQ, backoffQ,
//! the unschedulable pods, in flight), the events recorded while pods are
//! in flight, and the moves between places that a pod's own changes and
//! the cluster's events make (see the module's diagram). The PodGroup side
//! of the same state is in `group_state` and its moves in `groups`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::backoff::{backoff_order, is_backing_off, is_error};
use super::group_state::Groups;
use super::heap::KeyedHeap;
use super::nominator::Nominator;
use super::types::QueueConfig;
use crate::framework::{
    ActionType, ClusterEvent, EventObject, EventResource, Framework, QueueSortPlugin,
    QueuedPodInfo, QueueingHint,
};
use crate::model::PodInfo;

/// How a pod that may have become schedulable is requeued (ordered: a
/// larger strategy wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Strategy {
    Skip,
    AfterBackoff,
    Immediately,
}

pub(super) enum Recorded {
    /// A pod popped at this point; events after it concern it.
    Marker,
    /// A marker whose pod is done.
    Done,
    Event(ClusterEvent, Option<EventObject>, Option<EventObject>),
}

pub(super) struct Inner {
    pub(super) cfg: QueueConfig,
    pub(super) profiles: HashMap<Arc<str>, Arc<Framework>>,
    pub(super) sort: Arc<dyn QueueSortPlugin>,
    pub(super) active: KeyedHeap,
    /// Pods rejected by plugins, waiting out their backoff.
    pub(super) backoff: KeyedHeap,
    /// Pods that failed with an error, waiting out their backoff.
    pub(super) error_backoff: KeyedHeap,
    pub(super) unschedulable: crate::model::UidMap<QueuedPodInfo>,
    /// When each unschedulable pod is to be flushed.
    pub(super) flush_at: BTreeSet<(Instant, Arc<str>)>,
    /// Pods being scheduled: their pod and the sequence number of their
    /// marker in `recorded`.
    pub(super) in_flight: crate::model::UidMap<(QueuedPodInfo, u64)>,
    /// Pods past Permit, in PreBind, Bind or PostBind: no longer tracked
    /// for events (as upstream, which calls Done there), but still listed
    /// as in flight until their binding cycle ends, so that a pod is never
    /// in neither the queue nor the cluster's bound pods.
    pub(super) binding: crate::model::UidMap<QueuedPodInfo>,
    /// Events received while pods were in flight, after their markers.
    pub(super) recorded: VecDeque<(u64, Recorded)>,
    pub(super) next_seq: u64,
    pub(super) nominator: Nominator,
    pub(super) closed: bool,
    /// Pods that entered each queue, by queue and event.
    pub(super) incoming: HashMap<(u8, ClusterEvent), u64, foldhash::fast::RandomState>,
    /// PodGroup entities (see the `groups` module).
    pub(super) groups: Groups,
}

pub(super) const INCOMING_ACTIVE: u8 = 0;
pub(super) const INCOMING_BACKOFF: u8 = 1;
pub(super) const INCOMING_UNSCHEDULABLE: u8 = 2;
pub(super) const INCOMING_QUEUES: [&str; 3] = ["active", "backoff", "unschedulable"];

/// The marker of a pod in flight with its group: never recorded (the
/// group's marker stands for it; sequence numbers start at 1).
pub(super) const NO_MARKER: u64 = 0;

/// A new pending pod (upstream's `PodAdd` label).
pub(super) const POD_ADD: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    label: Some("PodAdd"),
};
/// A pending pod changed in a way no plugin's event names.
pub(super) const POD_UPDATE: ClusterEvent =
    ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE);

impl Inner {
    pub(super) fn framework(&self, pod: &PodInfo) -> Option<&Arc<Framework>> {
        self.profiles.get(&pod.scheduler_name)
    }

    pub(super) fn contains(&self, uid: &str) -> Option<&'static str> {
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

    pub(super) fn insert_unschedulable(&mut self, q: QueuedPodInfo) {
        let since = q
            .flush_timestamp
            .map_or(q.timestamp, |f| f.max(q.timestamp));
        let uid = q.pod.uid.clone();
        self.remove_unschedulable(&uid);
        self.flush_at
            .insert((since + self.cfg.max_in_unschedulable, uid.clone()));
        self.unschedulable.insert(uid, q);
    }

    pub(super) fn remove_unschedulable(&mut self, uid: &str) -> Option<QueuedPodInfo> {
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
    pub(super) fn pre_enqueue(
        &mut self,
        mut q: QueuedPodInfo,
        event: ClusterEvent,
    ) -> Option<QueuedPodInfo> {
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
    pub(super) fn move_to_active(
        &mut self,
        q: QueuedPodInfo,
        now: Instant,
        event: ClusterEvent,
    ) -> bool {
        let Some(mut q) = self.pre_enqueue(q, event) else {
            return false;
        };
        self.count_incoming(INCOMING_ACTIVE, event);
        q.initial_attempt_timestamp.get_or_insert(now);
        self.push_active(q);
        true
    }

    pub(super) fn push_active(&mut self, q: QueuedPodInfo) {
        let sort = self.sort.clone();
        self.active.push(q, &|a, b| sort.less_pods(a, b));
    }

    pub(super) fn push_backoff(&mut self, q: QueuedPodInfo) {
        let less = backoff_order(&self.sort);
        if is_error(&q) {
            self.error_backoff.push(q, &less);
        } else {
            self.backoff.push(q, &less);
        }
    }

    pub(super) fn remove_backoff(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        let less = backoff_order(&self.sort);
        self.backoff
            .remove(uid, &less)
            .or_else(|| self.error_backoff.remove(uid, &less))
    }

    /// Requeues a pod by strategy. Returns whether it went to activeQ or
    /// backoffQ (somewhere it will be popped from).
    pub(super) fn requeue(
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
    pub(super) fn count_incoming(&mut self, queue: u8, event: ClusterEvent) {
        *self.incoming.entry((queue, event)).or_default() += 1;
    }

    /// Whether `event` may make `q` schedulable, by the hints of the plugins
    /// that rejected it.
    pub(super) fn worth_requeuing(
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

    pub(super) fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard()
            || self.profiles.values().any(|fw| {
                fw.events()
                    .iter()
                    .any(|pe| pe.events.iter().any(|r| r.event.matches(event)))
            })
    }

    pub(super) fn record(&mut self, entry: Recorded) -> u64 {
        self.next_seq += 1;
        self.recorded.push_back((self.next_seq, entry));
        self.next_seq
    }

    pub(super) fn move_all(
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

    pub(super) fn done(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        self.binding.remove(uid);
        let (q, seq) = self.in_flight.remove(uid)?;
        self.end_marker(seq);
        Some(q)
    }

    /// Marks the marker `seq` done and drops the events nobody needs any
    /// more: those before the oldest marker still in use.
    pub(super) fn end_marker(&mut self, seq: u64) {
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
    pub(super) fn recording(&self) -> bool {
        !self.in_flight.is_empty() || self.groups.marker.is_some()
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
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
    pub(super) fn flush(&mut self, now: Instant) -> bool {
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
