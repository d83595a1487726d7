//! What the queue is configured with and what it reports: its timings,
//! the names of its places, a queued entity as GetQueue lists it, its
//! counts, and its errors.

use std::time::Duration;

use crate::framework::QueuedPodInfo;

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
