//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods
//! that tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use std::sync::Arc;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventResource, FilterPlugin,
    NoArgs, Plugin, QueueingHint, Status,
};
use crate::model::node::TAINT_NODE_UNSCHEDULABLE;
use crate::model::{PodInfo, Taint, TaintEffect, taint};
use crate::plugins::names::NODE_UNSCHEDULABLE;

/// The reason a cordoned node is rejected.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

/// The NodeUnschedulable plugin.
#[derive(Debug)]
pub struct NodeUnschedulable {
    taint: Taint,
}

impl Default for NodeUnschedulable {
    fn default() -> Self {
        Self {
            taint: Taint {
                key: Arc::from(TAINT_NODE_UNSCHEDULABLE),
                value: Arc::from(""),
                effect: TaintEffect::NoSchedule,
            },
        }
    }
}

impl NodeUnschedulable {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self::default()
    }

    fn tolerates(&self, pod: &PodInfo) -> bool {
        taint::tolerates(&pod.tolerations, &self.taint)
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NODE_UNSCHEDULABLE
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let this = Self::default();
        Some(vec![
            // A schedulable node appears, or a node is uncordoned.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                |_, old, new| {
                    let new_schedulable = new
                        .and_then(|n| n.as_node())
                        .is_some_and(|n| !n.unschedulable);
                    let was_unschedulable = old
                        .and_then(|o| o.as_node())
                        .is_none_or(|o| o.unschedulable);
                    Ok(if new_schedulable && was_unschedulable {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    })
                },
            ),
            // The pod itself now tolerates cordoned nodes.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::UnscheduledPod,
                    ActionType::UPDATE_POD_TOLERATION,
                ),
                move |pod, _, new| {
                    Ok(match new.and_then(|n| n.as_pod()) {
                        Some(p) if p.uid == pod.uid && this.tolerates(p) => QueueingHint::Queue,
                        _ => QueueingHint::Skip,
                    })
                },
            ),
        ])
    }
    extension_points!(filter);
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        if !n.unschedulable || self.tolerates(pod) {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, EventObject};
    use crate::testing::{make_node, make_pod};

    #[test]
    fn cordoned_nodes_take_only_tolerating_pods() {
        let pl = NodeUnschedulable::default();
        let st = CycleState::new();
        let open = NodeInfo::new(Arc::new(make_node("open").build()));
        let cordoned = NodeInfo::new(Arc::new(make_node("cordoned").unschedulable().build()));
        let plain = make_pod("plain").build();
        let tolerant = make_pod("t")
            .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
            .build();
        let tolerate_all = make_pod("all").toleration("", "Exists", "", "").build();
        let wrong_effect = make_pod("w")
            .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoExecute")
            .build();
        assert!(pl.filter(&st, &plain, &open).is_success());
        let s = pl.filter(&st, &plain, &cordoned);
        assert_eq!(
            (s.code(), s.message().as_str()),
            (Code::UnschedulableAndUnresolvable, ERR_REASON_UNSCHEDULABLE)
        );
        assert!(pl.filter(&st, &tolerant, &cordoned).is_success());
        assert!(pl.filter(&st, &tolerate_all, &cordoned).is_success());
        assert!(!pl.filter(&st, &wrong_effect, &cordoned).is_success());
    }

    #[test]
    fn hints() {
        let regs = NodeUnschedulable::default().events_to_register().unwrap();
        let pod = make_pod("p").build();
        let node = |n: crate::testing::NodeBuilder| Some(EventObject::Node(Arc::new(n.build())));
        let node_hint = regs[0].hint.as_ref().unwrap();
        let cordoned = node(make_node("n").unschedulable());
        let open = node(make_node("n"));
        assert_eq!(
            node_hint(&pod, None, open.as_ref()).unwrap(),
            QueueingHint::Queue,
            "schedulable node added"
        );
        assert_eq!(
            node_hint(&pod, None, cordoned.as_ref()).unwrap(),
            QueueingHint::Skip,
            "cordoned node added"
        );
        assert_eq!(
            node_hint(&pod, cordoned.as_ref(), open.as_ref()).unwrap(),
            QueueingHint::Queue,
            "uncordoned"
        );
        assert_eq!(
            node_hint(&pod, open.as_ref(), open.as_ref()).unwrap(),
            QueueingHint::Skip,
            "taint change on open node"
        );

        let pod_hint = regs[1].hint.as_ref().unwrap();
        let tolerant = Some(EventObject::Pod(Arc::new(
            make_pod("p")
                .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "")
                .build(),
        )));
        let other = Some(EventObject::Pod(Arc::new(
            make_pod("q")
                .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "")
                .build(),
        )));
        assert_eq!(
            pod_hint(&pod, None, tolerant.as_ref()).unwrap(),
            QueueingHint::Queue
        );
        assert_eq!(
            pod_hint(&pod, None, other.as_ref()).unwrap(),
            QueueingHint::Skip,
            "another pod"
        );
    }
}
