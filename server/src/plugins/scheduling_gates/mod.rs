//! SchedulingGates: a pod with `spec.schedulingGates` waits outside the
//! active queue until every gate is removed.

use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventResource, NoArgs, Plugin,
    PreEnqueuePlugin, QueueingHint, Status,
};
use crate::model::PodInfo;
use crate::plugins::names::SCHEDULING_GATES;

/// The SchedulingGates plugin.
#[derive(Debug, Default)]
pub struct SchedulingGates;

impl SchedulingGates {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        SCHEDULING_GATES
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        // Only the removal of the pod's last gate can let it in.
        Some(vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            ),
            |pod, _old, new| {
                Ok(match new.and_then(|n| n.as_pod()) {
                    Some(p) if p.uid == pod.uid => QueueingHint::Queue,
                    _ => QueueingHint::Skip,
                })
            },
        )])
    }
    extension_points!(pre_enqueue);
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = pod.scheduling_gates.iter().map(|g| &**g).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::make_pod;

    #[test]
    fn gates_hold_the_pod() {
        let p = SchedulingGates;
        assert!(p.pre_enqueue(&make_pod("free").build()).is_success());
        let s = p.pre_enqueue(
            &make_pod("gated")
                .gate("example.com/foo")
                .gate("bar")
                .build(),
        );
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "waiting for scheduling gates: [example.com/foo bar]"
        );
    }
}
