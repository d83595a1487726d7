//! The queue's PodGroup side, as state: where each group entity is, the
//! members waiting for their PodGroup, the group in flight (its moves are
//! in `groups`), and what the queue hands the scheduling loop.

use std::collections::HashMap;
use std::sync::Arc;

use super::heap::KeyedHeap;
use crate::framework::{ClusterEvent, QueuedPodGroupInfo, QueuedPodInfo};
use crate::model::GroupKey;

/// What [`SchedulingQueue::pop_entity`] takes.
#[derive(Debug, Clone)]
pub enum Popped {
    /// A pod scheduled alone.
    Pod(QueuedPodInfo),
    /// A PodGroup's members, scheduled together.
    Group(QueuedPodGroupInfo),
}

/// Where an entity was when it was taken out to change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Active,
    Backoff,
    Unschedulable,
}

/// The queue's PodGroup side.
#[derive(Debug, Default)]
pub(super) struct Groups {
    /// Where PodGroups are looked up; `None`: the gate is off and no pod
    /// is a member.
    pub manager: Option<Arc<crate::cache::PodGroupManager>>,
    pub active: KeyedHeap<QueuedPodGroupInfo>,
    /// Groups whose last cycle was rejected, backing off.
    pub backoff: KeyedHeap<QueuedPodGroupInfo>,
    /// Groups whose last cycle failed with an error, backing off (never
    /// popped early).
    pub error_backoff: KeyedHeap<QueuedPodGroupInfo>,
    /// Gated groups, by entity key.
    pub unschedulable: HashMap<Arc<str>, QueuedPodGroupInfo>,
    /// Members whose PodGroup is not observed yet, by group.
    pub incomplete: HashMap<GroupKey, Vec<QueuedPodInfo>>,
    /// The group being scheduled, if any.
    pub in_flight: Option<GroupKey>,
    /// The sequence number of the in-flight group's marker in the
    /// queue's recorded events: the events after it happened during its
    /// cycle. The members themselves carry no marker of their own, so
    /// that the first of them to end its tracking does not drop the
    /// events the group still needs.
    pub marker: Option<u64>,
    /// Members of the group being scheduled that came, or came back,
    /// during its cycle.
    pub pending: Vec<QueuedPodInfo>,
    /// Each queued member's group (in any of the places above).
    pub member_of: crate::model::UidMap<GroupKey>,
    /// Entities that entered each queue, by queue and event.
    pub incoming: HashMap<(u8, ClusterEvent), u64, foldhash::fast::RandomState>,
}
