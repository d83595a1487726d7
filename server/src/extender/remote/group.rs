//! A remote extender at the group points: PlacementFeasible,
//! PodGroupPostFilter and berth's GroupPermit.
//!
//! A group cycle is a cycle whose subject is the PodGroup and its pods: the
//! first request of the cycle sends `GroupCycleStart`, its end sends
//! `CycleEnd`, as a pod's cycle does. A group none of whose pods to place
//! requests the extender's managed resources never reaches it:
//! PlacementFeasible and GroupPermit succeed, PodGroupPostFilter cannot
//! help. Failures follow the pod points' rules (an ignorable extender is
//! skipped with the same outcomes; any other fails the group's attempt).

use super::*;
use crate::framework::{
    GroupAttempt, PlacedPod, PlacementProgress, PodGroupPostFilterResult, PodGroupSchedulingFunc,
    ProfileFilters, ProposedAssignment,
};

impl RemotePlugin {
    /// Whether a pod the group cycle places interests the extender.
    fn interested_in_group(&self, group: &PodGroupCycleInfo) -> bool {
        group.pods.iter().any(|p| self.interested(p))
    }

    fn call_group(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        kind: request::Kind,
    ) -> impl std::future::Future<Output = Result<Reply, CallError>> + Send + use<> {
        self.conn.call(CallRequest {
            cycle: state.token(),
            subject: Subject::Group(group),
            kind,
        })
    }

    fn group_failure(&self, state: &CycleState, group: &PodGroupCycleInfo) -> Failure {
        Failure::for_group(&self.conn, state, group)
    }

    fn placement(&self, pod: &PodInfo, node: &str) -> pb::Placement {
        pb::Placement {
            uid: pod.uid.to_string(),
            node: node.to_string(),
            node_id: self.conn.node_id(node).unwrap_or(0),
        }
    }
}

#[async_trait]
impl PlacementFeasiblePlugin for RemotePlugin {
    async fn placement_feasible(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        progress: PlacementProgress,
        placed: &[PlacedPod],
    ) -> Status {
        if !self.interested_in_group(group) {
            return Status::success();
        }
        let evaluated = group.pods.len().saturating_sub(progress.remaining);
        let req = pb::PlacementFeasibleRequest {
            scheduled: progress.scheduled as u32,
            remaining: progress.remaining as u32,
            placed: placed
                .iter()
                .map(|p| self.placement(&p.pod, &p.node))
                .collect(),
            failed: evaluated.saturating_sub(placed.len()) as u32,
        };
        let r = self
            .call_group(state, group, request::Kind::PlacementFeasible(req))
            .await;
        let failure = || self.group_failure(state, group);
        match r {
            Ok(Reply::PlacementFeasible(s)) => match code_of(s.code) {
                Code::Success => Status::success(),
                Code::Wait => {
                    let reasons = if s.reasons.is_empty() {
                        vec![format!("waiting for extender {}", self.conn.name())]
                    } else {
                        s.reasons
                    };
                    Status::with_reasons(Code::Wait, reasons.into_iter().map(Into::into))
                }
                _ => self.rejection("PlacementFeasible", s),
            },
            Ok(other) => failure().status("PlacementFeasible", mismatch(&other), Status::success()),
            Err(e) => failure().status("PlacementFeasible", e, Status::success()),
        }
    }
}

#[async_trait]
impl PodGroupPostFilterPlugin for RemotePlugin {
    async fn pod_group_post_filter(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        attempt: &GroupAttempt,
        _: &dyn PodGroupSchedulingFunc,
        _: &dyn ProfileFilters,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let declined =
            || Status::unschedulable(format!("extender {} cannot help", self.conn.name()));
        if !self.interested_in_group(group) {
            return (None, declined());
        }
        let req = pb::PodGroupPostFilterRequest {
            status: Some(pb::Status {
                code: proto_code(attempt.status.code()) as i32,
                reasons: attempt
                    .status
                    .reasons()
                    .iter()
                    .map(|r| r.to_string())
                    .collect(),
            }),
            pods: attempt
                .pods
                .iter()
                .map(|a| {
                    let node = a.node.as_deref().unwrap_or_default();
                    pb::PodAttempt {
                        uid: a.pod.uid.to_string(),
                        node: node.to_string(),
                        node_id: self.conn.node_id(node).unwrap_or(0),
                        message: a.message.clone(),
                    }
                })
                .collect(),
            dry_run: state.dry_run,
        };
        let r = self
            .call_group(state, group, request::Kind::PodGroupPostFilter(req))
            .await;
        let failure = || self.group_failure(state, group);
        let (s, nominations) = match r {
            Ok(Reply::PodGroupPostFilter(s, n)) => (s, n),
            Ok(other) => {
                let s = failure().status("PodGroupPostFilter", mismatch(&other), declined());
                return (None, s);
            }
            Err(e) => return (None, failure().status("PodGroupPostFilter", e, declined())),
        };
        if code_of(s.code) != Code::Success {
            return (None, self.rejection("PodGroupPostFilter", s));
        }
        // Nominated nodes must be nodes berthd has: the others make the
        // answer out of protocol.
        if let Some(n) = nominations
            .iter()
            .find(|n| self.conn.node_id(&n.node).is_none())
        {
            let why = format!(
                "a nomination of node {:?} for pod uid {:?}, a node berthd has not sent",
                n.node, n.uid
            );
            self.conn.report_malformed("PodGroupPostFilter", &why);
            let s = failure().status("PodGroupPostFilter", CallError::Malformed(why), declined());
            return (None, s);
        }
        let reasons = if s.reasons.is_empty() {
            vec![format!(
                "extender {} is making room for the pod group",
                self.conn.name()
            )]
        } else {
            s.reasons
        };
        let result = PodGroupPostFilterResult {
            nominations: nominations
                .into_iter()
                .map(|n| (Arc::from(n.uid), Arc::from(n.node)))
                .collect(),
            ..Default::default()
        };
        (
            Some(result),
            Status::with_reasons(Code::Success, reasons.into_iter().map(Into::into)),
        )
    }
}

#[async_trait]
impl GroupPermitPlugin for RemotePlugin {
    async fn permit_group(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        placement: &[ProposedAssignment],
    ) -> Status {
        if !self.interested_in_group(group) {
            return Status::success();
        }
        let req = pb::GroupPermitRequest {
            placement: placement
                .iter()
                .map(|a| self.placement(&a.pod, &a.node))
                .collect(),
            dry_run: state.dry_run,
        };
        let r = self
            .call_group(state, group, request::Kind::GroupPermit(req))
            .await;
        let failure = || self.group_failure(state, group);
        match r {
            Ok(Reply::GroupPermit(s)) => self.status_of("GroupPermit", s),
            Ok(other) => failure().status("GroupPermit", mismatch(&other), Status::success()),
            Err(e) => failure().status("GroupPermit", e, Status::success()),
        }
    }
}
