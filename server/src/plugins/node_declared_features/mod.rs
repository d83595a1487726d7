//! NodeDeclaredFeatures: keeps pods off nodes that do not declare the
//! features the pod needs (`status.declaredFeatures`, reported by the
//! kubelet), as upstream's plugin does (beta, on by default in v1.36).
//!
//! What a pod needs is inferred from its spec by the registry of features
//! (see [`DECLARED_FEATURES`]); in v1.36 two of them matter when a pod is
//! scheduled:
//!
//! * `RestartAllContainersOnContainerExits`: a container (or init
//!   container) with a `restartPolicyRules` entry whose action is
//!   `RestartAllContainers`;
//! * `UserNamespacesHostNetworkSupport`: `hostNetwork: true` with
//!   `hostUsers: false`.
//!
//! The others only concern pod updates (resizes). PreFilter skips pods
//! that need nothing; Filter rejects a node lacking a needed feature as
//! `UnschedulableAndUnresolvable`.

use std::sync::Arc;

use async_trait::async_trait;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventResource, FilterPlugin,
    NoArgs, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint, StateKey, Status,
};
use crate::model::PodInfo;
use crate::model::node::declared_feature_bit;
use crate::plugins::names::NODE_DECLARED_FEATURES;

pub use crate::model::node::DECLARED_FEATURES;

/// The reason a node without the pod's required features is rejected.
pub const ERR_REASON_UNSATISFIED: &str = "node(s) didn't match Pod's required features";

const STATE_KEY: StateKey<u32> = StateKey::new("PreFilterNodeDeclaredFeatures");

/// The features `pod` needs its node to declare, as a bit set.
pub fn required_features(pod: &PodInfo) -> u32 {
    let mut reqs = 0;
    if pod.restarts_all_containers {
        reqs |= declared_feature_bit("RestartAllContainersOnContainerExits").unwrap_or(0);
    }
    if pod.host_network_in_user_namespace {
        reqs |= declared_feature_bit("UserNamespacesHostNetworkSupport").unwrap_or(0);
    }
    reqs
}

/// The NodeDeclaredFeatures plugin.
#[derive(Debug, Default)]
pub struct NodeDeclaredFeatures;

impl NodeDeclaredFeatures {
    /// Builds the plugin (it takes no arguments).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NODE_DECLARED_FEATURES
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_DECLARED_FEATURE,
                ),
                |_, old, new| {
                    let declared = |o: Option<&crate::framework::EventObject>| {
                        o.and_then(|o| o.as_node())
                            .and_then(|n| n.node.status.as_ref())
                            .and_then(|s| s.declared_features.clone())
                    };
                    let Some(_) = new.and_then(|o| o.as_node()) else {
                        return Err("unexpected object in isSchedulableAfterNodeChange".into());
                    };
                    Ok(match old {
                        Some(_) if declared(old) == declared(new) => QueueingHint::Skip,
                        _ => QueueingHint::Queue,
                    })
                },
            ),
            // The pod itself changed what it needs.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE),
                |pod, old, new| {
                    let (Some(o), Some(n)) =
                        (old.and_then(|o| o.as_pod()), new.and_then(|o| o.as_pod()))
                    else {
                        return Err(
                            "unexpected objects in isSchedulableAfterTargetPodUpdate".into()
                        );
                    };
                    if n.uid != pod.uid || required_features(o) == required_features(n) {
                        return Ok(QueueingHint::Skip);
                    }
                    Ok(QueueingHint::Queue)
                },
            ),
        ])
    }

    extension_points!(pre_filter, filter);
}

#[async_trait]
impl PreFilterPlugin for NodeDeclaredFeatures {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let reqs = required_features(pod);
        if reqs == 0 {
            return (None, Status::skip());
        }
        state.write(&STATE_KEY, reqs);
        (None, Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let reqs = match state.read(&STATE_KEY) {
            Some(r) => *r,
            None => required_features(pod),
        };
        if reqs == 0 {
            return Status::success();
        }
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        if n.declared_features & reqs == reqs {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSATISFIED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{make_node, make_pod};
    use serde_json::json;

    fn node(features: &[&str]) -> NodeInfo {
        let mut n = make_node("n").object();
        n.status
            .get_or_insert_with(Default::default)
            .declared_features = Some(features.iter().map(|s| s.to_string()).collect());
        NodeInfo::new(Arc::new(crate::model::NodeSpec::new(Arc::new(n)).unwrap()))
    }

    #[tokio::test]
    async fn pods_need_the_features_their_spec_implies() {
        let plain = make_pod("p").build();
        let mut restart = make_pod("r").object();
        restart.spec.as_mut().unwrap().containers[0].restart_policy_rules = Some(vec![
            serde_json::from_value(json!({"action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [42]}}))
            .unwrap(),
        ]);
        let restart = PodInfo::new(Arc::new(restart)).unwrap();
        let userns = make_pod("u")
            .spec("hostNetwork", json!(true))
            .spec("hostUsers", json!(false))
            .build();
        let host_net_only = make_pod("h").spec("hostNetwork", json!(true)).build();
        let pl = NodeDeclaredFeatures;
        let cases = [
            ("no requirement", &plain, &[][..], Code::Skip, Code::Success),
            (
                "restart rule, feature missing",
                &restart,
                &[][..],
                Code::Success,
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "restart rule, declared",
                &restart,
                &["RestartAllContainersOnContainerExits"][..],
                Code::Success,
                Code::Success,
            ),
            (
                "user namespaces, other feature",
                &userns,
                &["RestartAllContainersOnContainerExits", "Unknown"][..],
                Code::Success,
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "user namespaces, declared",
                &userns,
                &["UserNamespacesHostNetworkSupport"][..],
                Code::Success,
                Code::Success,
            ),
            (
                "host network alone",
                &host_net_only,
                &[][..],
                Code::Skip,
                Code::Success,
            ),
        ];
        for (name, pod, features, pre, filter) in cases {
            let mut state = CycleState::new();
            let (_, s) = pl.pre_filter(&mut state, pod, &[]).await;
            assert_eq!(s.code(), pre, "{name}");
            let s = pl.filter(&state, pod, &node(features));
            assert_eq!(s.code(), filter, "{name}");
            if !s.is_success() {
                assert_eq!(s.message(), ERR_REASON_UNSATISFIED);
            }
        }
    }
}
