//! What a handler's answer must be before it goes back to berthd (a
//! verdict per node asked, scores in range, victims among the candidates),
//! and the shield that keeps a handler running when its request goes away.

use std::collections::{HashMap, HashSet};

use berth_proto::extender::v1 as pb;
use futures::FutureExt;
use futures::future::BoxFuture;
use pb::request::Kind;
use pb::response::Result as Reply;

use crate::nodes::Table;
use crate::preemption::{PreemptionCandidate, PreemptionVerdict};
use crate::types::{Code, ExtensionPoint, NodeRef, NodeStatus, ScoreNormalization};

/// A request's handler at work, as the reader awaits it.
pub(super) type Work = BoxFuture<'static, Result<Reply, String>>;

/// Runs `inner` in a task nothing aborts, and waits for it: dropping the
/// returned future (Cancel, timeout, session end) leaves `inner` running.
pub(super) fn shielded(
    inner: impl Future<Output = Result<Reply, String>> + Send + 'static,
) -> Work {
    let handle = tokio::spawn(inner);
    async move {
        match handle.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => Err(format!(
                "the handler panicked: {}",
                panic_message(&*e.into_panic())
            )),
            Err(e) => Err(format!("the handler's task ended: {e}")),
        }
    }
    .boxed()
}

pub(super) fn point_of(kind: &Kind) -> (ExtensionPoint, &'static str) {
    match kind {
        Kind::PreFilter(_) => (ExtensionPoint::PreFilter, "PreFilter"),
        Kind::Filter(_) => (ExtensionPoint::Filter, "Filter"),
        Kind::PostFilter(_) => (ExtensionPoint::PostFilter, "PostFilter"),
        Kind::PreScore(_) => (ExtensionPoint::PreScore, "PreScore"),
        Kind::Score(_) => (ExtensionPoint::Score, "Score"),
        Kind::NormalizeScore(_) => (ExtensionPoint::Score, "NormalizeScore"),
        Kind::Reserve(_) => (ExtensionPoint::Reserve, "Reserve"),
        Kind::Unreserve(_) => (ExtensionPoint::Reserve, "Unreserve"),
        Kind::Permit(_) => (ExtensionPoint::Permit, "Permit"),
        Kind::PreBind(_) => (ExtensionPoint::PreBind, "PreBind"),
        Kind::Bind(_) => (ExtensionPoint::Bind, "Bind"),
        Kind::PostBind(_) => (ExtensionPoint::PostBind, "PostBind"),
        Kind::PlacementFeasible(_) => (ExtensionPoint::PlacementFeasible, "PlacementFeasible"),
        Kind::PodGroupPostFilter(_) => (ExtensionPoint::PodGroupPostFilter, "PodGroupPostFilter"),
        Kind::GroupPermit(_) => (ExtensionPoint::GroupPermit, "GroupPermit"),
        Kind::PreemptionFilter(_) => (ExtensionPoint::Filter, "PreemptionFilter"),
    }
}

pub(super) const REJECTIONS: [Code; 3] = [
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
pub(super) const PRE_FILTER_CODES: &[Code] = &[
    Code::Success,
    Code::Skip,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
pub(super) const POST_FILTER_CODES: &[Code] = &[
    Code::Success,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
pub(super) const PRE_SCORE_CODES: &[Code] = &[Code::Success, Code::Skip, Code::Error];
pub(super) const RESERVE_CODES: &[Code] = POST_FILTER_CODES;
pub(super) const PERMIT_REJECT_CODES: &[Code] = &REJECTIONS;
pub(super) const PRE_BIND_CODES: &[Code] = POST_FILTER_CODES;
pub(super) const BIND_CODES: &[Code] = PRE_FILTER_CODES;

/// The rejected nodes of a Filter answer, by position in the request and
/// with their ids; refuses a node that was not asked about.
pub(super) fn check_filter(
    asked: &[NodeRef<'_>],
    rejected: Vec<NodeStatus>,
) -> Result<Vec<(usize, pb::NodeStatus)>, String> {
    let index: Option<HashMap<&str, usize>> = (rejected.len() > 16).then(|| {
        asked
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name(), i))
            .collect()
    });
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(rejected.len());
    for r in rejected {
        if r.status.is_success() {
            continue;
        }
        let at = match &index {
            Some(index) => index.get(r.node.as_str()).copied(),
            None => asked.iter().position(|n| n.name() == r.node),
        };
        let Some(at) = at else {
            return Err(format!(
                "the Filter handler rejected node {:?}, which was not in the request",
                r.node
            ));
        };
        if !REJECTIONS.contains(&r.status.code) {
            return Err(format!(
                "the Filter handler answered {} for node {:?}",
                r.status.code.as_str_name(),
                r.node
            ));
        }
        if !seen.insert(at) {
            continue;
        }
        out.push((
            at,
            pb::NodeStatus {
                node_id: asked[at].id(),
                code: r.status.code as i32,
                reasons: r.status.reasons,
                plugin: String::new(),
            },
        ));
    }
    Ok(out)
}

/// The answer to a PreemptionFilter request from its handler's verdicts:
/// one per candidate, rejections with a rejection code, needed pods among
/// the candidate's.
pub(super) fn check_preemption(
    candidates: &[PreemptionCandidate<'_>],
    verdicts: Vec<PreemptionVerdict>,
) -> Result<Reply, String> {
    if verdicts.len() != candidates.len() {
        return Err(format!(
            "the Filter handler answered {} preemption verdicts for {} candidates",
            verdicts.len(),
            candidates.len()
        ));
    }
    let mut out = pb::PreemptionFilterResponse::default();
    for (c, v) in candidates.iter().zip(verdicts) {
        match v {
            PreemptionVerdict::Victims => {}
            PreemptionVerdict::Rejected(s) if s.is_success() => {}
            PreemptionVerdict::Rejected(s) => {
                if !REJECTIONS.contains(&s.code) {
                    return Err(format!(
                        "the Filter handler answered {} for preemption candidate {:?}",
                        s.code.as_str_name(),
                        c.node.name()
                    ));
                }
                out.rejected.push(pb::NodeStatus {
                    node_id: c.node.id(),
                    code: s.code as i32,
                    reasons: s.reasons,
                    plugin: String::new(),
                });
            }
            PreemptionVerdict::Needs { mut uids, reasons } => {
                if let Some(u) = uids.iter().find(|u| !c.pods.iter().any(|p| p.uid == **u)) {
                    return Err(format!(
                        "the Filter handler needs pod uid {u:?} gone from preemption candidate {:?}, which does not list it",
                        c.node.name()
                    ));
                }
                uids.sort_unstable();
                uids.dedup();
                out.needed.push(pb::NeededEvictions {
                    node_id: c.node.id(),
                    uids,
                    reasons,
                });
            }
        }
    }
    Ok(Reply::PreemptionFilter(out))
}

pub(super) fn check_scores(
    nodes: &[NodeRef<'_>],
    scores: &[i64],
    norm: ScoreNormalization,
) -> Result<(), String> {
    if nodes.len() != scores.len() {
        return Err(format!(
            "the handler answered {} scores for {} nodes",
            scores.len(),
            nodes.len()
        ));
    }
    let bad = |ok: &dyn Fn(i64) -> bool, range: &str| match nodes
        .iter()
        .zip(scores)
        .find(|(_, s)| !ok(**s))
    {
        Some((n, s)) => Err(format!(
            "the handler scored node {:?} {s}, outside {range}",
            n.name()
        )),
        None => Ok(()),
    };
    match norm {
        ScoreNormalization::None => bad(&|s| (0..=100).contains(&s), "0..=100"),
        ScoreNormalization::Scale => bad(&|s| s >= 0, "0.."),
        ScoreNormalization::Extender => Ok(()),
    }
}

/// The request's nodes, in order, from the table they were resolved in.
pub(super) fn refs<'t>(table: &'t Table, ids: &[u32]) -> Vec<NodeRef<'t>> {
    ids.iter()
        .filter_map(|id| table.get(*id))
        .map(NodeRef::of)
        .collect()
}

pub(super) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Status;

    #[test]
    fn filter_answers_are_checked() {
        let (a, b) = (NodeRef::new("a", None), NodeRef::new("b", None));
        let asked = vec![a, b];
        let ok = check_filter(
            &asked,
            vec![
                NodeStatus::new("a", Status::unschedulable("no")),
                NodeStatus::new("b", Status::success()),
                NodeStatus::new("a", Status::unschedulable("again")),
            ],
        );
        assert_eq!(
            ok.map(|v| v
                .into_iter()
                .map(|(i, n)| (i, n.reasons))
                .collect::<Vec<_>>()),
            Ok(vec![(0, vec!["no".to_string()])])
        );
        assert!(
            check_filter(
                &asked,
                vec![NodeStatus::new("c", Status::unschedulable("x"))]
            )
            .is_err_and(|e| e.contains("\"c\""))
        );
        assert!(check_filter(&asked, vec![NodeStatus::new("a", Status::skip())]).is_err());
    }

    #[test]
    fn scores_are_checked_against_the_normalization() {
        let nodes = vec![NodeRef::new("a", None), NodeRef::new("b", None)];
        assert!(check_scores(&nodes, &[0, 100], ScoreNormalization::None).is_ok());
        assert!(check_scores(&nodes, &[0, 101], ScoreNormalization::None).is_err());
        assert!(check_scores(&nodes, &[0, 1000], ScoreNormalization::Scale).is_ok());
        assert!(check_scores(&nodes, &[-1, 10], ScoreNormalization::Scale).is_err());
        assert!(check_scores(&nodes, &[-5, 10], ScoreNormalization::Extender).is_ok());
        assert!(check_scores(&nodes, &[1], ScoreNormalization::Extender).is_err());
    }
}
