//! PodGroup entities in the scheduling queue (`GenericWorkload` on), as
//! kube-scheduler v1.37 queues them.
//!
//! A pod is a group member iff the gate is on and it names a PodGroup
//! (`spec.schedulingGroup.podGroupName`). Every member of one group waits
//! inside one entity, which is queued, popped and scheduled as a whole:
//!
//! ```text
//!  member added ─┬─ PodGroup not observed ──▶ incomplete ── PodGroup added ──┐
//!                ├─ its group is being scheduled ──▶ pending ── cycle ends ──┤
//!                └─ joins the group's entity (or a new one) ◀────────────────┘
//!                        │ PreEnqueue over every member
//!                        ▼
//!            activeQ / backoffQ / gated ── pop ──▶ group cycle
//! ```
//!
//! * PreEnqueue runs for every member; any rejection gates the whole
//!   entity, which then moves only on events its gating plugin registered
//!   for (hints evaluated per member: the best wins) or after 5 minutes.
//! * A member added to an entity already queued re-runs PreEnqueue on the
//!   entity, which stays where it was (activeQ, or backoffQ while backing
//!   off) unless PreEnqueue now holds it (or releases a gated one).
//! * When the group's cycle ends ([`SchedulingQueue::add_attempted_pod_group`]),
//!   the members left (failed in the cycle, or arrived meanwhile) become
//!   the entity again: after a success straight into activeQ with the
//!   entity's old timestamp; after a failure with its counters moved (an
//!   error: consecutive errors; otherwise unschedulable attempts), a new
//!   timestamp and its backoff. With no member left the entity is gone.
//! * A group that failed with an error waits out its backoff in backoffQ.
//!   A group that was rejected rests as an unschedulable pod does: among
//!   the unschedulable entities, unless something that may help happened
//!   during its cycle (a member arrived, or an event that one of the
//!   plugins that rejected it registered for and whose hint accepts), in
//!   which case it goes to backoffQ. The plugins that rejected it are the
//!   group point that refused it (GangScheduling's PlacementFeasible, a
//!   GroupPermit) and those that rejected its pods; each event is judged
//!   by their hints for each member, the best answer winning. Here
//!   berth parts from upstream v1.37, which sends every failed group to
//!   backoffQ and pops it again whenever activeQ is empty: a gang that
//!   cannot fit was retried thousands of times a second on an idle
//!   scheduler.
//! * A resting group moves on such an event, when a member is added or
//!   changes in a way its rejectors watch, when its PodGroup changes as
//!   they watch for (GangScheduling: a lower `minCount`), when a remote
//!   extender that rejected it or failed it comes back, or after 5
//!   minutes; to backoffQ while its backoff lasts, else to activeQ.
//! * Groups are popped from backoffQ only once their backoff is over,
//!   never early because activeQ is empty (pods still are, as upstream's
//!   SchedulerPopFromBackoffQ does: they get there only after an event).
//! * Activating a member activates its group; deleting the last member
//!   drops the entity.

use std::sync::Arc;

use tokio::time::Instant;

use super::SchedulingQueue;
use super::backoff::{backoff_duration, backoff_for, backoff_order, is_error};
use super::group_state::{Place, Popped};
use super::heap::KeyedHeap;
use super::inner::{
    INCOMING_ACTIVE, INCOMING_BACKOFF, INCOMING_UNSCHEDULABLE, Inner, NO_MARKER, POD_UPDATE,
    Recorded, Strategy,
};
use crate::framework::{
    ClusterEvent, EventObject, QueuedEntity, QueuedPodGroupInfo, QueuedPodInfo, QueueingHint,
    Status,
};
use crate::model::{GroupKey, PodInfo, PodRef};

impl Inner {
    /// The group `pod` is a member of, when groups are on.
    pub(super) fn group_of(&self, pod: &PodInfo) -> Option<GroupKey> {
        self.groups.manager.as_ref()?;
        pod.scheduling_group
            .as_ref()
            .map(|g| GroupKey::new(pod.namespace.clone(), g.clone()))
    }

    fn group_less(&self) -> impl Fn(&QueuedPodGroupInfo, &QueuedPodGroupInfo) -> bool + use<> {
        let sort = self.sort.clone();
        move |a, b| sort.less(QueuedEntity::Group(a), QueuedEntity::Group(b))
    }

    fn group_backoff_less(
        &self,
    ) -> impl Fn(&QueuedPodGroupInfo, &QueuedPodGroupInfo) -> bool + use<> {
        let sort = self.sort.clone();
        move |a, b| {
            a.backoff_expiration < b.backoff_expiration
                || (a.backoff_expiration == b.backoff_expiration
                    && sort.less(QueuedEntity::Group(a), QueuedEntity::Group(b)))
        }
    }

    fn count_group_incoming(&mut self, queue: u8, event: ClusterEvent) {
        *self.groups.incoming.entry((queue, event)).or_default() += 1;
    }

    /// Takes the entity with `entity_key` out of wherever it waits.
    fn take_group(&mut self, entity_key: &str) -> Option<(QueuedPodGroupInfo, Place)> {
        let less = self.group_less();
        if let Some(g) = self.groups.active.remove(entity_key, &less) {
            return Some((g, Place::Active));
        }
        let bless = self.group_backoff_less();
        if let Some(g) = self
            .groups
            .backoff
            .remove(entity_key, &bless)
            .or_else(|| self.groups.error_backoff.remove(entity_key, &bless))
        {
            return Some((g, Place::Backoff));
        }
        self.remove_group_unschedulable(entity_key)
            .map(|g| (g, Place::Unschedulable))
    }

    fn insert_group_unschedulable(&mut self, g: QueuedPodGroupInfo) {
        let since = g
            .flush_timestamp
            .map_or(g.timestamp, |f| f.max(g.timestamp));
        let key = g.entity_key.clone();
        self.remove_group_unschedulable(&key);
        self.flush_at
            .insert((since + self.cfg.max_in_unschedulable, key.clone()));
        self.groups.unschedulable.insert(key, g);
    }

    pub(super) fn remove_group_unschedulable(
        &mut self,
        entity_key: &str,
    ) -> Option<QueuedPodGroupInfo> {
        let g = self.groups.unschedulable.remove(entity_key)?;
        let since = g
            .flush_timestamp
            .map_or(g.timestamp, |f| f.max(g.timestamp));
        self.flush_at
            .remove(&(since + self.cfg.max_in_unschedulable, g.entity_key.clone()));
        Some(g)
    }

    /// PreEnqueue over every member (each profile's plugins, the gating
    /// plugin first); a rejection gates the entity and `None` is returned.
    fn group_pre_enqueue(
        &mut self,
        mut g: QueuedPodGroupInfo,
        event: ClusterEvent,
    ) -> Option<QueuedPodGroupInfo> {
        let mut rejected: Option<(usize, Status)> = None;
        for (i, m) in g.pods.iter().enumerate() {
            let Some(fw) = self.framework(&m.pod) else {
                continue;
            };
            let s = fw.run_pre_enqueue(&m.pod, g.gating_plugin);
            if !s.is_success() {
                rejected = Some((i, s));
                break;
            }
        }
        let Some((i, s)) = rejected else {
            g.gating_plugin = None;
            return Some(g);
        };
        let plugin = s.plugin().unwrap_or("PreEnqueue");
        g.gating_plugin = Some(plugin);
        // The members share one message; a gate that holds as members
        // arrive sets it only on those that lack it (this runs per member
        // added).
        let text = s.message();
        let message = match g.pods.first().and_then(|m| m.last_failure.clone()) {
            Some(m) if *m == *text => m,
            _ => Arc::from(text),
        };
        tracing::debug!(group = %g.key, pod = %g.pods[i].pod.key(), plugin, "pod group gated: {message}");
        for m in &mut g.pods {
            if !m
                .last_failure
                .as_ref()
                .is_some_and(|f| Arc::ptr_eq(f, &message))
            {
                m.last_failure = Some(message.clone());
            }
        }
        self.insert_group_unschedulable(g);
        self.count_group_incoming(INCOMING_UNSCHEDULABLE, event);
        None
    }

    fn move_group_to_active(
        &mut self,
        g: QueuedPodGroupInfo,
        now: Instant,
        event: ClusterEvent,
    ) -> bool {
        let Some(mut g) = self.group_pre_enqueue(g, event) else {
            return false;
        };
        self.count_group_incoming(INCOMING_ACTIVE, event);
        g.initial_attempt_timestamp.get_or_insert(now);
        let less = self.group_less();
        self.groups.active.push(g, &less);
        true
    }

    fn push_group_backoff(&mut self, g: QueuedPodGroupInfo) {
        let less = self.group_backoff_less();
        if g.consecutive_errors_count > 0 {
            self.groups.error_backoff.push(g, &less);
        } else {
            self.groups.backoff.push(g, &less);
        }
    }

    /// Requeues an entity: backoffQ while it backs off (unless
    /// `Immediately`), activeQ otherwise, through PreEnqueue either way.
    pub(super) fn requeue_group(
        &mut self,
        g: QueuedPodGroupInfo,
        strategy: Strategy,
        now: Instant,
        event: ClusterEvent,
    ) -> bool {
        let backing_off = g.backoff_expiration.is_some_and(|e| e > now);
        match strategy {
            Strategy::Skip => {
                self.insert_group_unschedulable(g);
                self.count_group_incoming(INCOMING_UNSCHEDULABLE, event);
                false
            }
            Strategy::AfterBackoff if backing_off => match self.group_pre_enqueue(g, event) {
                Some(g) => {
                    self.push_group_backoff(g);
                    self.count_group_incoming(INCOMING_BACKOFF, event);
                    true
                }
                None => false,
            },
            _ => self.move_group_to_active(g, now, event),
        }
    }

    /// Puts a member where its group is (see the module doc). Returns
    /// whether an entity became poppable.
    pub(super) fn add_group_member(
        &mut self,
        key: GroupKey,
        mut q: QueuedPodInfo,
        now: Instant,
        event: ClusterEvent,
    ) -> bool {
        self.groups.member_of.insert(q.pod.uid.clone(), key.clone());
        let manager = self.groups.manager.clone().expect("groups on");
        let Some(pod_group) = manager.pod_group(&key) else {
            // Said as GangScheduling's PreEnqueue says it (upstream v1.36
            // holds such a pod there; v1.37's queue, as berth's, apart).
            q.last_failure = Some(Arc::from(
                crate::model::pod_group::waiting_for_pod_group(&key.name).as_str(),
            ));
            self.groups.incomplete.entry(key).or_default().push(q);
            return false;
        };
        if self.groups.in_flight.as_ref() == Some(&key) {
            self.groups.pending.push(q);
            return false;
        }
        let entity_key = format!("podgroup/{key}");
        match self.take_group(&entity_key) {
            Some((mut g, place)) => {
                g.pods.push(q);
                g.pod_group = Some(pod_group);
                let strategy = match place {
                    Place::Active => Strategy::Immediately,
                    Place::Backoff | Place::Unschedulable => Strategy::AfterBackoff,
                };
                self.requeue_group(g, strategy, now, event)
            }
            None => {
                let mut g = QueuedPodGroupInfo::new(key, Some(pod_group), now);
                g.pods.push(q);
                self.move_group_to_active(g, now, event)
            }
        }
    }

    /// Removes a member from wherever it waits. Returns whether it was one.
    pub(super) fn remove_group_member(&mut self, uid: &str) -> bool {
        let Some(key) = self.groups.member_of.remove(uid) else {
            return false;
        };
        if let Some(v) = self.groups.incomplete.get_mut(&key) {
            v.retain(|q| &*q.pod.uid != uid);
            if v.is_empty() {
                self.groups.incomplete.remove(&key);
            }
        }
        self.groups.pending.retain(|q| &*q.pod.uid != uid);
        let entity_key = format!("podgroup/{key}");
        if let Some((mut g, place)) = self.take_group(&entity_key) {
            g.pods.retain(|q| &*q.pod.uid != uid);
            if !g.pods.is_empty() {
                // Back where it was, in its place (no PreEnqueue: a member
                // fewer cannot release a gate it did not hold).
                match place {
                    Place::Active => {
                        let less = self.group_less();
                        self.groups.active.push(g, &less);
                    }
                    Place::Backoff => self.push_group_backoff(g),
                    Place::Unschedulable => self.insert_group_unschedulable(g),
                }
            }
        }
        true
    }

    /// A member's pod changed: the new object replaces the old wherever
    /// it waits; a gated entity moves if the gate's hint says the change
    /// may release it. Returns whether an entity became poppable, or
    /// `None` if the pod is not a queued member.
    pub(super) fn update_group_member(
        &mut self,
        old: &PodRef,
        new: &PodRef,
        events: &[ClusterEvent],
        now: Instant,
    ) -> Option<bool> {
        let key = self.groups.member_of.get(&new.uid)?.clone();
        let replace = |v: &mut Vec<QueuedPodInfo>| {
            for q in v.iter_mut().filter(|q| q.pod.uid == new.uid) {
                q.pod = new.clone();
            }
        };
        if let Some(v) = self.groups.incomplete.get_mut(&key) {
            replace(v);
        }
        replace(&mut self.groups.pending);
        let entity_key = format!("podgroup/{key}");
        let Some((mut g, place)) = self.take_group(&entity_key) else {
            return Some(false);
        };
        replace(&mut g.pods);
        match place {
            Place::Active => {
                let less = self.group_less();
                self.groups.active.push(g, &less);
                Some(false)
            }
            Place::Backoff => {
                self.push_group_backoff(g);
                Some(false)
            }
            Place::Unschedulable => {
                let old_obj = EventObject::Pod(old.clone());
                let new_obj = EventObject::Pod(new.clone());
                let mut best = Strategy::Skip;
                let mut why = POD_UPDATE;
                for e in events {
                    best = self.group_worth_requeuing(&g, e, Some(&old_obj), Some(&new_obj));
                    if best != Strategy::Skip {
                        why = *e;
                        break;
                    }
                }
                if best == Strategy::Skip {
                    self.insert_group_unschedulable(g);
                    Some(false)
                } else {
                    Some(self.requeue_group(g, best, now, why))
                }
            }
        }
    }

    /// Whether `event` may make the entity schedulable. A gated entity:
    /// the gating plugin's registrations and hints, asked for each member
    /// (the best answer wins, as upstream's isEntityWorthRequeuing). A
    /// rejected one: the hints of the group point that refused it, asked
    /// once (of its first member: they judge the group), and those of the
    /// plugins that rejected each member, asked for that member; a
    /// `Pending` plugin's `Queue` is `Immediately`. A rejection no plugin
    /// claimed: any event may help.
    pub(super) fn group_worth_requeuing(
        &self,
        g: &QueuedPodGroupInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        let named = |m: &QueuedPodInfo| {
            !m.unschedulable_plugins.is_empty() || !m.pending_plugins.is_empty()
        };
        if g.gating_plugin.is_none()
            && g.unschedulable_plugins.is_empty()
            && g.pending_plugins.is_empty()
            && !g.pods.iter().any(named)
        {
            return Strategy::AfterBackoff;
        }
        if event.is_wildcard() {
            return match new {
                Some(EventObject::Pod(p)) if !g.pods.iter().any(|m| m.pod.uid == p.uid) => {
                    Strategy::Skip
                }
                Some(EventObject::Node(_) | EventObject::Object(_)) => Strategy::Skip,
                _ => Strategy::AfterBackoff,
            };
        }
        let Some(fw) = g.pods.first().and_then(|m| self.framework(&m.pod)) else {
            return Strategy::AfterBackoff;
        };
        let ask = |pe: &crate::framework::PluginEvents,
                   f: &Option<crate::framework::QueueingHintFn>,
                   m: &QueuedPodInfo| match f {
            None => QueueingHint::Queue,
            Some(f) => f(&m.pod, old, new).unwrap_or_else(|e| {
                tracing::warn!(plugin = pe.plugin, pod = %m.pod.key(), error = %e,
                    "queueing hint failed; requeueing the pod group");
                QueueingHint::Queue
            }),
        };
        let mut best = Strategy::Skip;
        for pe in fw.events() {
            if let Some(gate) = g.gating_plugin {
                if pe.plugin != gate {
                    continue;
                }
                for reg in pe.events.iter().filter(|r| r.event.matches(event)) {
                    if g.pods
                        .iter()
                        .any(|m| ask(pe, &reg.hint, m) == QueueingHint::Queue)
                    {
                        return Strategy::AfterBackoff;
                    }
                }
                continue;
            }
            // Most plugins registered for other events: they are passed
            // over before any member is looked at (this runs for every
            // resting entity on every cluster event).
            let mut regs = pe
                .events
                .iter()
                .filter(|r| r.event.matches(event))
                .peekable();
            if regs.peek().is_none() {
                continue;
            }
            let group_level = g.unschedulable_plugins.contains(pe.plugin);
            let group_pending = g.pending_plugins.contains(pe.plugin);
            // The members to ask: the first, for a group point's verdict;
            // otherwise those `pe.plugin` rejected. Walked again per
            // registration, not collected.
            let members = || {
                let whole = group_level || group_pending;
                g.pods
                    .iter()
                    .take(if whole { 1 } else { usize::MAX })
                    .filter(move |m| {
                        whole
                            || m.unschedulable_plugins.contains(pe.plugin)
                            || m.pending_plugins.contains(pe.plugin)
                    })
            };
            for reg in regs {
                for m in members() {
                    if ask(pe, &reg.hint, m) != QueueingHint::Queue {
                        continue;
                    }
                    if group_pending || m.pending_plugins.contains(pe.plugin) {
                        return Strategy::Immediately;
                    }
                    best = Strategy::AfterBackoff;
                    if g.pending_plugins.is_empty()
                        && !g.pods.iter().any(|m| !m.pending_plugins.is_empty())
                    {
                        return best;
                    }
                    break;
                }
            }
        }
        best
    }

    /// Moves the resting entities (gated or rejected) `event` may help.
    pub(super) fn move_all_groups(
        &mut self,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        pre_check: Option<&dyn Fn(&PodInfo) -> bool>,
        now: Instant,
    ) -> bool {
        let mut moves = Vec::new();
        for (key, g) in &self.groups.unschedulable {
            if pre_check.is_some_and(|f| !g.pods.iter().any(|m| f(&m.pod))) {
                continue;
            }
            let strategy = self.group_worth_requeuing(g, event, old, new);
            if strategy != Strategy::Skip {
                moves.push((g.timestamp, key.clone(), strategy));
            }
        }
        // In the order they were queued, not the map's (as `move_all`).
        moves.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut activated = false;
        for (_, key, strategy) in moves {
            if let Some(g) = self.remove_group_unschedulable(&key) {
                activated |= self.requeue_group(g, strategy, now, *event);
            }
        }
        activated
    }

    /// The PodGroup `key` was observed: its incomplete members join an
    /// entity together (so all the pods created before it are tried in
    /// one cycle), and queued entities carry the new object.
    pub(super) fn pod_group_observed(&mut self, key: &GroupKey, now: Instant) -> bool {
        let mut activated = false;
        if let Some(pods) = self.groups.incomplete.remove(key) {
            let event = ClusterEvent::new(
                crate::framework::EventResource::PodGroup,
                crate::framework::ActionType::ADD,
            );
            for mut q in pods {
                q.last_failure = None;
                activated |= self.add_group_member(key.clone(), q, now, event);
            }
        }
        activated
    }

    /// Activates the entity of the group `key` (a member was activated).
    pub(super) fn activate_group(&mut self, key: &GroupKey, pod: &PodRef, now: Instant) -> bool {
        if self.groups.in_flight.as_ref() == Some(key) {
            // Seen when its cycle ends.
            self.record(Recorded::Event(
                ClusterEvent::FORCE_ACTIVATE,
                None,
                Some(EventObject::Pod(pod.clone())),
            ));
            return false;
        }
        let entity_key = format!("podgroup/{key}");
        match self.take_group(&entity_key) {
            Some((g, Place::Active)) => {
                let less = self.group_less();
                self.groups.active.push(g, &less);
                false
            }
            Some((g, _)) => self.move_group_to_active(g, now, ClusterEvent::FORCE_ACTIVATE),
            None => false,
        }
    }

    /// Takes out the entities waiting (not gated) whose last cycle
    /// `plugin` failed or rejected.
    pub(super) fn take_groups_failed_by(&mut self, plugin: &str) -> Vec<QueuedPodGroupInfo> {
        let by = |g: &QueuedPodGroupInfo| {
            !g.gated()
                && (g.error_plugin == Some(plugin)
                    || g.unschedulable_plugins.contains(plugin)
                    || g.pods
                        .iter()
                        .any(|m| m.unschedulable_plugins.contains(plugin)))
        };
        let keys: Vec<Arc<str>> = self
            .groups
            .backoff
            .iter()
            .chain(self.groups.error_backoff.iter())
            .chain(self.groups.unschedulable.values())
            .filter(|g| by(g))
            .map(|g| g.entity_key.clone())
            .collect();
        keys.iter()
            .filter_map(|k| self.take_group(k).map(|(g, _)| g))
            .collect()
    }

    /// Backoff expiries and 5-minute stays of group entities.
    pub(super) fn flush_groups(&mut self, now: Instant) -> bool {
        let mut activated = false;
        let less = self.group_backoff_less();
        loop {
            let ready = |h: &KeyedHeap<QueuedPodGroupInfo>| {
                h.peek()
                    .is_some_and(|g| g.backoff_expiration.is_none_or(|e| e <= now))
            };
            let g = if ready(&self.groups.error_backoff) {
                self.groups.error_backoff.pop(&less)
            } else if ready(&self.groups.backoff) {
                self.groups.backoff.pop(&less)
            } else {
                break;
            };
            let mut g = g.expect("peeked");
            g.initial_attempt_timestamp.get_or_insert(now);
            let active_less = self.group_less();
            self.groups.active.push(g, &active_less);
            self.count_group_incoming(INCOMING_ACTIVE, ClusterEvent::BACKOFF_COMPLETE);
            activated = true;
        }
        activated
    }

    /// A due 5-minute stay of the gated entity `key`.
    pub(super) fn flush_group(&mut self, key: &str, now: Instant) -> bool {
        let Some(mut g) = self.remove_group_unschedulable(key) else {
            return false;
        };
        g.flush_timestamp = Some(now);
        let strategy =
            self.group_worth_requeuing(&g, &ClusterEvent::UNSCHEDULABLE_TIMEOUT, None, None);
        self.requeue_group(g, strategy, now, ClusterEvent::UNSCHEDULABLE_TIMEOUT)
    }

    pub(super) fn next_group_deadline(&self) -> Option<Instant> {
        [
            self.groups
                .backoff
                .peek()
                .and_then(|g| g.backoff_expiration),
            self.groups
                .error_backoff
                .peek()
                .and_then(|g| g.backoff_expiration),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the next pop takes a group (whose members the look-ahead
    /// does not serve).
    pub(super) fn group_ahead(&self) -> bool {
        match (self.active.peek(), self.groups.active.peek()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(p), Some(g)) => self.sort.less(QueuedEntity::Group(g), QueuedEntity::Pod(p)),
        }
    }

    /// Takes the next entity: the head of activeQ (pods and groups compared
    /// by QueueSort), else of the pods' backoffQ (earliest expiry first).
    /// Groups leave backoffQ only when their backoff is over (see the
    /// module doc).
    pub(super) fn pop_next(&mut self) -> Option<Popped> {
        let sort = self.sort.clone();
        let pod_first = match (self.active.peek(), self.groups.active.peek()) {
            (None, None) => None,
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (Some(p), Some(g)) => Some(!sort.less(QueuedEntity::Group(g), QueuedEntity::Pod(p))),
        };
        match pod_first {
            Some(true) => {
                let less = |a: &QueuedPodInfo, b: &QueuedPodInfo| sort.less_pods(a, b);
                self.active.pop(&less).map(Popped::Pod)
            }
            Some(false) => {
                let less = self.group_less();
                self.groups.active.pop(&less).map(Popped::Group)
            }
            // Nothing else to do: no point waiting out a pod's backoff
            // (errors are never popped early).
            None => self
                .backoff
                .pop(&backoff_order(&self.sort))
                .map(Popped::Pod),
        }
    }

    /// Marks a popped group in flight: its members each get a marker (the
    /// same), so events seen meanwhile are recorded and each member's
    /// `done` ends its own tracking.
    pub(super) fn group_popped(&mut self, g: &mut QueuedPodGroupInfo) {
        g.attempts += 1;
        self.groups.in_flight = Some(g.key.clone());
        self.groups.marker = Some(self.record(Recorded::Marker));
        for m in &mut g.pods {
            m.attempts += 1;
            self.groups.member_of.remove(&m.pod.uid);
            // No marker of its own (see `Groups::marker`).
            self.in_flight
                .insert(m.pod.uid.clone(), (m.clone(), NO_MARKER));
        }
    }

    /// Ends the in-flight group's tracking of events: how the events seen
    /// during its cycle bear on `g` (the best strategy; `Skip` if none may
    /// help), its marker then done.
    fn group_cycle_events(&mut self, g: &QueuedPodGroupInfo) -> Strategy {
        let Some(marker) = self.groups.marker.take() else {
            return Strategy::Skip;
        };
        let mut best = Strategy::Skip;
        for (_, rec) in self.recorded.iter().filter(|(s, _)| *s > marker) {
            if let Recorded::Event(e, old, new) = rec {
                best = best.max(self.group_worth_requeuing(g, e, old.as_ref(), new.as_ref()));
                if best == Strategy::Immediately {
                    break;
                }
            }
        }
        self.end_marker(marker);
        best
    }

    /// A member that failed returns: while its group is in flight it waits
    /// for the cycle to end; otherwise it joins its group's entity.
    pub(super) fn member_failed(
        &mut self,
        key: GroupKey,
        mut q: QueuedPodInfo,
        now: Instant,
    ) -> bool {
        if is_error(&q) {
            q.consecutive_errors_count += 1;
        } else {
            q.unschedulable_count += 1;
            q.consecutive_errors_count = 0;
        }
        q.timestamp = now;
        q.backoff_expiration = Some(now + backoff_duration(&self.cfg, &q));
        let uid = q.pod.uid.clone();
        let activated = self.add_group_member(key, q, now, ClusterEvent::SCHEDULE_ATTEMPT_FAILURE);
        self.done(&uid);
        activated
    }
}

impl SchedulingQueue {
    /// Holds PodGroup members as group entities, looking their PodGroups
    /// up in `manager`: the `GenericWorkload` gate on (read once, here).
    pub fn with_pod_groups(
        self: Arc<Self>,
        manager: Arc<crate::cache::PodGroupManager>,
    ) -> Arc<Self> {
        self.inner.lock().groups.manager = Some(manager);
        self
    }

    /// The PodGroup `key` was added (or changed): members waiting for it
    /// join an entity.
    pub fn pod_group_observed(&self, key: &GroupKey) {
        let activated = {
            let mut inner = self.inner.lock();
            if inner.groups.manager.is_none() {
                return;
            }
            inner.pod_group_observed(key, Instant::now())
        };
        self.wake(activated);
    }

    /// Ends the attempt of a popped group (upstream's
    /// AddAttemptedPodGroupIfNeeded): its members left (failed in the
    /// cycle, or arrived meanwhile) become its entity again, placed by
    /// the attempt's `status` (see the module doc). Members bound or
    /// assumed are not among them.
    pub fn add_attempted_pod_group(&self, mut g: QueuedPodGroupInfo, status: &Status) {
        let now = Instant::now();
        let activated = {
            let mut inner = self.inner.lock();
            if inner.groups.in_flight.as_ref() == Some(&g.key) {
                inner.groups.in_flight = None;
            }
            // Members assumed end their tracking in their binding cycles,
            // the others as they were handed back or dropped.
            let pending = std::mem::take(&mut inner.groups.pending);
            let tried: std::collections::HashSet<Arc<str>> =
                g.pods.iter().map(|m| m.pod.uid.clone()).collect();
            if pending.is_empty() {
                if let Some(m) = inner.groups.marker.take() {
                    inner.end_marker(m);
                }
                false
            } else {
                for m in &pending {
                    inner
                        .groups
                        .member_of
                        .insert(m.pod.uid.clone(), g.key.clone());
                }
                g.pods = pending;
                if let Some(manager) = &inner.groups.manager
                    && let Some(pg) = manager.pod_group(&g.key)
                {
                    g.pod_group = Some(pg);
                }
                if status.is_success() {
                    if let Some(m) = inner.groups.marker.take() {
                        inner.end_marker(m);
                    }
                    // The rest of the group is tried at once, keeping its
                    // place (#139613).
                    inner.requeue_group(
                        g,
                        Strategy::Immediately,
                        now,
                        ClusterEvent::SCHEDULE_ATTEMPT_FAILURE,
                    )
                } else {
                    let error = !status.is_rejected();
                    if error {
                        g.consecutive_errors_count += 1;
                        g.unschedulable_plugins.clear();
                        g.pending_plugins.clear();
                    } else {
                        // The group point's rejection was set by the cycle;
                        // each member keeps its own rejectors.
                        g.unschedulable_count += 1;
                        g.consecutive_errors_count = 0;
                        g.error_plugin = None;
                    }
                    g.timestamp = now;
                    g.flush_timestamp = None;
                    let count = if g.consecutive_errors_count > 0 {
                        g.consecutive_errors_count
                    } else {
                        g.unschedulable_count
                    };
                    g.backoff_expiration = Some(now + backoff_for(&inner.cfg, count));
                    // A member that arrived during the cycle is news the
                    // cycle did not see.
                    let arrived = g.pods.iter().any(|m| !tried.contains(&m.pod.uid));
                    let seen = inner.group_cycle_events(&g);
                    let strategy = if error || arrived {
                        Strategy::AfterBackoff
                    } else {
                        seen
                    };
                    inner.requeue_group(g, strategy, now, ClusterEvent::SCHEDULE_ATTEMPT_FAILURE)
                }
            }
        };
        self.wake(activated);
    }
}

#[cfg(test)]
mod tests;
