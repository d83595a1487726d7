//! NodeName: a pod that names its node (`spec.nodeName`) fits only there.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    ClusterEvent, ClusterEventWithHint, CycleState, FilterPlugin, NoArgs, Plugin, PreFilterPlugin,
    PreFilterResult, Status,
};
use crate::model::PodInfo;
use crate::plugins::names::NODE_NAME;

/// The reason a node is rejected.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin.
#[derive(Debug, Default)]
pub struct NodeName;

impl NodeName {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NODE_NAME
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        // The named node may appear.
        Some(vec![ClusterEventWithHint::always(ClusterEvent::NODE_ADD)])
    }
    extension_points!(pre_filter, filter);
}

#[async_trait]
impl PreFilterPlugin for NodeName {
    async fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match &pod.node_name {
            // Nothing to check on any node.
            None => (None, Status::skip()),
            Some(name) => (
                Some(PreFilterResult {
                    node_names: Some(HashSet::from([name.clone()])),
                }),
                Status::success(),
            ),
        }
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match &pod.node_name {
            Some(name) if **name != *node.name() => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{make_node, make_pod};

    #[tokio::test]
    async fn fits_only_the_named_node() {
        let n1 = NodeInfo::new(Arc::new(make_node("n1").build()));
        let pl = NodeName;
        let state = CycleState::new();
        let free = make_pod("free").build();
        assert!(pl.filter(&state, &free, &n1).is_success());
        let named = make_pod("named").node("n1").build();
        assert!(pl.filter(&state, &named, &n1).is_success());
        let elsewhere = make_pod("elsewhere").node("n2").build();
        let s = pl.filter(&state, &elsewhere, &n1);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), ERR_REASON);

        let mut st = CycleState::new();
        let (r, s) = pl.pre_filter(&mut st, &free, &[]).await;
        assert!(s.is_skip() && r.is_none());
        let (r, s) = pl.pre_filter(&mut st, &elsewhere, &[]).await;
        assert!(s.is_success());
        assert_eq!(
            r.unwrap().node_names.unwrap(),
            HashSet::from([Arc::from("n2")])
        );
    }
}
