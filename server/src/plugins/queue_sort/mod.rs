//! PrioritySort: entities with higher priority first (a pod's
//! `spec.priority`, a PodGroup's); among equals, the one that entered the
//! queue (or last failed) first.

use crate::extension_points;
use crate::framework::{NoArgs, Plugin, QueueSortPlugin, QueuedEntity};
use crate::plugins::names::PRIORITY_SORT;

/// The PrioritySort plugin.
#[derive(Debug, Default)]
pub struct PrioritySort;

impl PrioritySort {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        PRIORITY_SORT
    }
    fn events_to_register(&self) -> Option<Vec<crate::framework::ClusterEventWithHint>> {
        Some(Vec::new())
    }
    extension_points!(queue_sort);
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: QueuedEntity<'_>, b: QueuedEntity<'_>) -> bool {
        let (pa, pb) = (a.priority(), b.priority());
        pa > pb || (pa == pb && a.timestamp() < b.timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::QueuedPodInfo;
    use crate::testing::make_pod;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn priority_then_arrival() {
        let t0 = Instant::now();
        let q = |name: &str, prio: i32, secs: u64| {
            QueuedPodInfo::new(
                Arc::new(make_pod(name).priority(prio).build()),
                t0 + Duration::from_secs(secs),
            )
        };
        let sort = PrioritySort;
        let cases = [
            ("higher priority first", q("a", 10, 5), q("b", 1, 0), true),
            ("lower priority last", q("a", 1, 0), q("b", 10, 5), false),
            (
                "same priority, earlier first",
                q("a", 5, 1),
                q("b", 5, 2),
                true,
            ),
            (
                "same priority, later last",
                q("a", 5, 2),
                q("b", 5, 1),
                false,
            ),
            ("identical is not less", q("a", 5, 1), q("b", 5, 1), false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(sort.less_pods(&a, &b), want, "{name}");
        }
    }
}
