//! How long a failed pod or group waits before it is tried again, and the
//! order backoffQ keeps.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::types::QueueConfig;
use crate::framework::{QueueSortPlugin, QueuedPodInfo};

pub(super) fn backoff_duration(cfg: &QueueConfig, q: &QueuedPodInfo) -> Duration {
    let count = if q.consecutive_errors_count > 0 {
        q.consecutive_errors_count
    } else {
        q.unschedulable_count
    };
    backoff_for(cfg, count)
}

/// `initial × 2^(count-1)`, capped at the maximum (0 for no failure).
pub(super) fn backoff_for(cfg: &QueueConfig, count: u32) -> Duration {
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
pub(super) fn backoff_order(
    sort: &Arc<dyn QueueSortPlugin>,
) -> impl Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + use<> {
    let sort = sort.clone();
    move |a, b| {
        a.backoff_expiration < b.backoff_expiration
            || (a.backoff_expiration == b.backoff_expiration && sort.less_pods(a, b))
    }
}

pub(super) fn is_backing_off(q: &QueuedPodInfo, now: Instant) -> bool {
    q.backoff_expiration.is_some_and(|e| e > now)
}

pub(super) fn is_error(q: &QueuedPodInfo) -> bool {
    q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty()
}
