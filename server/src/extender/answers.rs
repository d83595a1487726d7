//! What berthd makes of an extender's answers: [`Reply`] (an answer
//! checked against its request) and [`check`], which holds every rule an answer must meet: the kind asked,
//! the codes each point allows, the nodes a Filter answer may name, the
//! count and range of scores, the nominations a PodGroupPostFilter answer
//! may make. An answer that breaks one fails its request, saying what was
//! wrong.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use berth_proto::extender::v1::{self as pb, Hello, request, response};

use super::call_error::CallError;

/// An answer, checked against its request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// PreFilter's status (success, skip or a rejection) and node names.
    PreFilter(pb::Status, Option<Vec<String>>),
    /// Filter: the rejected nodes by their position in the request, and
    /// the raw scores when they were asked for.
    Filter(Vec<(usize, pb::NodeStatus)>, Option<Vec<i64>>),
    /// PostFilter's answer (a nomination or a rejection).
    PostFilter(pb::PostFilterResponse),
    /// PreScore's status (success or skip).
    PreScore(pb::Status),
    /// One score per requested node, in range for the normalization.
    Score(Vec<i64>),
    /// One score per requested node, in [0, 100].
    NormalizeScore(Vec<i64>),
    /// Reserve's status (success or a rejection).
    Reserve(pb::Status),
    /// Unreserve acknowledged.
    Unreserve,
    /// Permit: allow, reject, or wait (with a timeout).
    Permit(pb::Status, Duration),
    /// PreBind's status (success or a rejection).
    PreBind(pb::Status),
    /// Bind's status (success, skip or a rejection).
    Bind(pb::Status),
    /// PostBind acknowledged.
    PostBind,
    /// PlacementFeasible's status (success, wait or a rejection).
    PlacementFeasible(pb::Status),
    /// PodGroupPostFilter's status (success or a rejection) and, with
    /// success, its nominations (of the cycle's pods, each once).
    PodGroupPostFilter(pb::Status, Vec<pb::Nomination>),
    /// GroupPermit's status (success or a rejection).
    GroupPermit(pb::Status),
    /// PreemptionFilter: the candidates rejected even with every listed
    /// pod gone, by position in the request, and the candidates that need
    /// other pods gone than the victims (by position), with those pods (by
    /// position in the candidate's list) and the reasons.
    PreemptionFilter(Vec<(usize, pb::NodeStatus)>, Vec<NeededPods>),
}

/// What a PreemptionFilter answer says a candidate needs evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededPods {
    /// The candidate, by position in the request.
    pub candidate: usize,
    /// The pods that must be gone, by position in the candidate's list,
    /// ascending.
    pub pods: Vec<usize>,
    /// Why the victims are not enough.
    pub reasons: Vec<String>,
}

pub(super) type Answer = Result<Reply, CallError>;
pub(super) type RawAnswer = Result<response::Result, CallError>;

/// A call's answer, to be awaited.
pub type CallFuture = Pin<Box<dyn Future<Output = Answer> + Send + 'static>>;

/// What a request asked, to check its answer against.
#[derive(Debug)]
pub(super) enum Asked {
    PreFilter,
    Filter {
        ids: Vec<u32>,
        score: bool,
    },
    PostFilter,
    PreScore,
    Score(usize),
    NormalizeScore(usize),
    Reserve,
    Unreserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
    PlacementFeasible,
    /// The uids of the group cycle's pods, which nominations may name.
    PodGroupPostFilter(Vec<String>),
    GroupPermit,
    /// The candidates' node ids and, per candidate, its pods' uids.
    PreemptionFilter {
        ids: Vec<u32>,
        pods: Vec<Vec<String>>,
    },
}

impl Asked {
    pub(super) fn of(kind: &request::Kind) -> Self {
        use request::Kind as K;
        match kind {
            K::PreFilter(_) => Self::PreFilter,
            K::Filter(f) => Self::Filter {
                ids: f.node_ids.clone(),
                score: f.score,
            },
            K::PostFilter(_) => Self::PostFilter,
            K::PreScore(_) => Self::PreScore,
            K::Score(s) => Self::Score(s.node_ids.len()),
            K::NormalizeScore(n) => Self::NormalizeScore(n.node_ids.len()),
            K::Reserve(_) => Self::Reserve,
            K::Unreserve(_) => Self::Unreserve,
            K::Permit(_) => Self::Permit,
            K::PreBind(_) => Self::PreBind,
            K::Bind(_) => Self::Bind,
            K::PostBind(_) => Self::PostBind,
            K::PlacementFeasible(_) => Self::PlacementFeasible,
            K::PodGroupPostFilter(r) => {
                Self::PodGroupPostFilter(r.pods.iter().map(|p| p.uid.clone()).collect())
            }
            K::GroupPermit(_) => Self::GroupPermit,
            K::PreemptionFilter(r) => Self::PreemptionFilter {
                ids: r.candidates.iter().map(|c| c.node_id).collect(),
                pods: r
                    .candidates
                    .iter()
                    .map(|c| c.pods.iter().map(|p| p.uid.clone()).collect())
                    .collect(),
            },
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::PreFilter => "PreFilter",
            Self::Filter { .. } => "Filter",
            Self::PostFilter => "PostFilter",
            Self::PreScore => "PreScore",
            Self::Score(_) => "Score",
            Self::NormalizeScore(_) => "NormalizeScore",
            Self::Reserve => "Reserve",
            Self::Unreserve => "Unreserve",
            Self::Permit => "Permit",
            Self::PreBind => "PreBind",
            Self::Bind => "Bind",
            Self::PostBind => "PostBind",
            Self::PlacementFeasible => "PlacementFeasible",
            Self::PodGroupPostFilter(_) => "PodGroupPostFilter",
            Self::GroupPermit => "GroupPermit",
            Self::PreemptionFilter { .. } => "PreemptionFilter",
        }
    }
}

fn result_name(r: &response::Result) -> &'static str {
    use response::Result as R;
    match r {
        R::Error(_) => "Error",
        R::PreFilter(_) => "PreFilter",
        R::Filter(_) => "Filter",
        R::PostFilter(_) => "PostFilter",
        R::PreScore(_) => "PreScore",
        R::Score(_) => "Score",
        R::NormalizeScore(_) => "NormalizeScore",
        R::Reserve(_) => "Reserve",
        R::Unreserve(_) => "Unreserve",
        R::Permit(_) => "Permit",
        R::PreBind(_) => "PreBind",
        R::Bind(_) => "Bind",
        R::PostBind(_) => "PostBind",
        R::PlacementFeasible(_) => "PlacementFeasible",
        R::PodGroupPostFilter(_) => "PodGroupPostFilter",
        R::GroupPermit(_) => "GroupPermit",
        R::PreemptionFilter(_) => "PreemptionFilter",
    }
}

fn code_name(c: i32) -> String {
    pb::Code::try_from(c).map_or_else(
        |_| format!("unknown code {c}"),
        |c| c.as_str_name().to_string(),
    )
}

use pb::Code as C;
const REJECTIONS: &[C] = &[C::Unschedulable, C::UnschedulableAndUnresolvable];
const PRE_FILTER_CODES: &[C] = &[
    C::Success,
    C::Skip,
    C::Unschedulable,
    C::UnschedulableAndUnresolvable,
    C::Error,
];
const DECIDING_CODES: &[C] = &[
    C::Success,
    C::Unschedulable,
    C::UnschedulableAndUnresolvable,
    C::Error,
];
const PRE_SCORE_CODES: &[C] = &[C::Success, C::Skip, C::Error];
const PERMIT_CODES: &[C] = &[
    C::Success,
    C::Unschedulable,
    C::UnschedulableAndUnresolvable,
    C::Wait,
    C::Error,
];
const BIND_CODES: &[C] = PRE_FILTER_CODES;
const PLACEMENT_CODES: &[C] = &[
    C::Success,
    C::Wait,
    C::Unschedulable,
    C::UnschedulableAndUnresolvable,
    C::Error,
];

fn codes_text(codes: &[C]) -> String {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str_name()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The status of an answer at `point`, if its code is one the point allows:
/// `CODE_ERROR` becomes the extender's error, anything else not allowed is
/// malformed, saying which code came and which were expected.
fn checked_status(
    point: &str,
    s: Option<pb::Status>,
    allowed: &[C],
) -> Result<pb::Status, CallError> {
    let s = s.unwrap_or_default();
    match C::try_from(s.code) {
        Ok(C::Error) if allowed.contains(&C::Error) => Err(CallError::remote(s.reasons.join(", "))),
        Ok(c) if allowed.contains(&c) => Ok(s),
        _ => Err(CallError::Malformed(format!(
            "{point} answered {}, but {point} answers {}",
            code_name(s.code),
            codes_text(allowed)
        ))),
    }
}

/// Positions of `ids` in the request, for the rejected nodes of an answer.
fn positions(asked: &[u32], rejected: &[pb::NodeStatus]) -> Result<Vec<usize>, String> {
    let unknown = |id: u32| format!("a verdict for node id {id}, which was not asked about");
    let mut out = Vec::with_capacity(rejected.len());
    if rejected.len() <= 16 {
        for r in rejected {
            out.push(
                asked
                    .iter()
                    .position(|&a| a == r.node_id)
                    .ok_or_else(|| unknown(r.node_id))?,
            );
        }
    } else {
        let index: HashMap<u32, usize> = asked.iter().enumerate().map(|(i, &a)| (a, i)).collect();
        for r in rejected {
            out.push(*index.get(&r.node_id).ok_or_else(|| unknown(r.node_id))?);
        }
    }
    let mut seen = out.clone();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two verdicts for node id {}", asked[w[0]]));
    }
    Ok(out)
}

/// Checks an answer against its request (and the normalization the
/// extender declared). A part of the answer that is unusable but can be
/// done without is dropped, saying why in `unusable`.
pub(super) fn check(
    asked: &Asked,
    hello: &Hello,
    r: RawAnswer,
    unusable: &mut Option<String>,
) -> Answer {
    use response::Result as R;
    let r = r?;
    if let R::Error(e) = r {
        return Err(CallError::remote(e.message));
    }
    let wrong = |r: &R| {
        Err(CallError::Malformed(format!(
            "a {} answer to a {} request",
            result_name(r),
            asked.name()
        )))
    };
    let count = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(CallError::Malformed(format!(
                "{got} {what} for {want} nodes"
            )))
        }
    };
    match (asked, r) {
        (Asked::PreFilter, R::PreFilter(p)) => {
            let s = checked_status("PreFilter", p.status, PRE_FILTER_CODES)?;
            Ok(Reply::PreFilter(s, p.node_names.map(|n| n.names)))
        }
        (Asked::Filter { ids, score }, R::Filter(f)) => {
            let at = positions(ids, &f.rejected).map_err(CallError::Malformed)?;
            let mut rejected = Vec::with_capacity(at.len());
            for (i, r) in at.into_iter().zip(f.rejected) {
                match C::try_from(r.code) {
                    // An error for one node is that node's verdict: it
                    // fails the attempt only if the node is still a
                    // candidate when this extender's verdicts count.
                    Ok(c) if REJECTIONS.contains(&c) || c == C::Error => rejected.push((i, r)),
                    _ => {
                        return Err(CallError::Malformed(format!(
                            "Filter answered {} for node id {}, but a rejection is {}",
                            code_name(r.code),
                            r.node_id,
                            codes_text(&[
                                C::Unschedulable,
                                C::UnschedulableAndUnresolvable,
                                C::Error
                            ])
                        )));
                    }
                }
            }
            let scores = if *score {
                if f.scores.len() != ids.len() {
                    // The verdicts stand; the scores are asked for again,
                    // with a Score request, as if they had not been asked.
                    *unusable = Some(format!(
                        "{} scores for {} nodes in a Filter answer that asked for them; asking Score separately",
                        f.scores.len(),
                        ids.len()
                    ));
                    None
                } else {
                    Some(f.scores)
                }
            } else if f.scores.is_empty() {
                None
            } else {
                return Err(CallError::Malformed(
                    "scores in a Filter answer that did not ask for them".into(),
                ));
            };
            Ok(Reply::Filter(rejected, scores))
        }
        (Asked::PostFilter, R::PostFilter(p)) => {
            let s = checked_status("PostFilter", p.status.clone(), DECIDING_CODES)?;
            if s.code == C::Success as i32 && p.nominated_node.is_empty() {
                return Err(CallError::Malformed(
                    "PostFilter answered CODE_SUCCESS without a nominated_node".into(),
                ));
            }
            Ok(Reply::PostFilter(p))
        }
        (Asked::PreScore, R::PreScore(p)) => Ok(Reply::PreScore(checked_status(
            "PreScore",
            p.status,
            PRE_SCORE_CODES,
        )?)),
        (Asked::Score(n), R::Score(s)) => {
            count("scores", s.scores.len(), *n)?;
            let (ok, range): (fn(i64) -> bool, &str) =
                match pb::ScoreNormalization::try_from(hello.score_normalization) {
                    Ok(pb::ScoreNormalization::Scale) => {
                        (|v| v >= 0, "0 or more (SCORE_NORMALIZATION_SCALE)")
                    }
                    Ok(pb::ScoreNormalization::Extender) => (|_| true, ""),
                    _ => (
                        |v| (0..=100).contains(&v),
                        "[0, 100] (SCORE_NORMALIZATION_NONE)",
                    ),
                };
            if let Some(v) = s.scores.iter().find(|v| !ok(**v)) {
                return Err(CallError::Malformed(format!("score {v}, outside {range}")));
            }
            Ok(Reply::Score(s.scores))
        }
        (Asked::NormalizeScore(n), R::NormalizeScore(s)) => {
            count("normalized scores", s.scores.len(), *n)?;
            if let Some(v) = s.scores.iter().find(|v| !(0..=100).contains(*v)) {
                return Err(CallError::Malformed(format!(
                    "normalized score {v}, outside [0, 100]"
                )));
            }
            Ok(Reply::NormalizeScore(s.scores))
        }
        (Asked::Reserve, R::Reserve(p)) => Ok(Reply::Reserve(checked_status(
            "Reserve",
            p.status,
            DECIDING_CODES,
        )?)),
        (Asked::Unreserve, R::Unreserve(_)) => Ok(Reply::Unreserve),
        (Asked::Permit, R::Permit(p)) => {
            let s = checked_status("Permit", p.status, PERMIT_CODES)?;
            let mut wait = Duration::ZERO;
            if s.code == C::Wait as i32 {
                wait = p
                    .wait_timeout
                    .and_then(|d| Duration::try_from(d).ok())
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        CallError::Malformed(
                            "Permit answered CODE_WAIT without a positive wait_timeout".into(),
                        )
                    })?;
            }
            Ok(Reply::Permit(s, wait))
        }
        (Asked::PreBind, R::PreBind(p)) => Ok(Reply::PreBind(checked_status(
            "PreBind",
            p.status,
            DECIDING_CODES,
        )?)),
        (Asked::Bind, R::Bind(p)) => Ok(Reply::Bind(checked_status("Bind", p.status, BIND_CODES)?)),
        (Asked::PostBind, R::PostBind(_)) => Ok(Reply::PostBind),
        (Asked::PlacementFeasible, R::PlacementFeasible(p)) => Ok(Reply::PlacementFeasible(
            checked_status("PlacementFeasible", p.status, PLACEMENT_CODES)?,
        )),
        (Asked::PodGroupPostFilter(uids), R::PodGroupPostFilter(p)) => {
            let s = checked_status("PodGroupPostFilter", p.status, DECIDING_CODES)?;
            if s.code != C::Success as i32 && !p.nominations.is_empty() {
                return Err(CallError::Malformed(format!(
                    "PodGroupPostFilter answered {} with nominations, which come only with CODE_SUCCESS",
                    code_name(s.code)
                )));
            }
            let mut seen = HashSet::with_capacity(p.nominations.len());
            for n in &p.nominations {
                if !uids.contains(&n.uid) {
                    return Err(CallError::Malformed(format!(
                        "a nomination for pod uid {:?}, which is not a pod of the cycle",
                        n.uid
                    )));
                }
                if !seen.insert(n.uid.as_str()) {
                    return Err(CallError::Malformed(format!(
                        "two nominations for pod uid {:?}",
                        n.uid
                    )));
                }
                if n.node.is_empty() {
                    return Err(CallError::Malformed(format!(
                        "a nomination for pod uid {:?} without a node",
                        n.uid
                    )));
                }
            }
            Ok(Reply::PodGroupPostFilter(s, p.nominations))
        }
        (Asked::GroupPermit, R::GroupPermit(p)) => Ok(Reply::GroupPermit(checked_status(
            "GroupPermit",
            p.status,
            DECIDING_CODES,
        )?)),
        (Asked::PreemptionFilter { ids, pods }, R::PreemptionFilter(p)) => {
            check_preemption_filter(ids, pods, p)
        }
        (_, other) => wrong(&other),
    }
}

/// The rules of a PreemptionFilter answer: each node named once, among
/// the candidates asked about, rejected with a rejection code (or
/// CODE_ERROR), needing only pods listed for it.
fn check_preemption_filter(
    ids: &[u32],
    pods: &[Vec<String>],
    p: pb::PreemptionFilterResponse,
) -> Answer {
    let malformed = |m: String| Err(CallError::Malformed(m));
    let at = positions(ids, &p.rejected).map_err(CallError::Malformed)?;
    let mut named = vec![false; ids.len()];
    let mut rejected = Vec::with_capacity(at.len());
    for (i, r) in at.into_iter().zip(p.rejected) {
        match C::try_from(r.code) {
            Ok(c) if REJECTIONS.contains(&c) || c == C::Error => {}
            _ => {
                return malformed(format!(
                    "PreemptionFilter answered {} for node id {}, but a rejection is {}",
                    code_name(r.code),
                    r.node_id,
                    codes_text(&[C::Unschedulable, C::UnschedulableAndUnresolvable, C::Error])
                ));
            }
        }
        named[i] = true;
        rejected.push((i, r));
    }
    let mut needed = Vec::with_capacity(p.needed.len());
    for n in p.needed {
        let Some(i) = ids.iter().position(|&a| a == n.node_id) else {
            return malformed(format!(
                "pods needed gone on node id {}, which was not asked about",
                n.node_id
            ));
        };
        if std::mem::replace(&mut named[i], true) {
            return malformed(format!("two verdicts for node id {}", n.node_id));
        }
        let listed = &pods[i];
        let mut at = Vec::with_capacity(n.uids.len());
        for uid in &n.uids {
            let Some(k) = listed.iter().position(|l| l == uid) else {
                return malformed(format!(
                    "pod uid {uid:?} needed gone on node id {}, which was not listed for it",
                    n.node_id
                ));
            };
            at.push(k);
        }
        at.sort_unstable();
        if let Some(w) = at.windows(2).find(|w| w[0] == w[1]) {
            return malformed(format!(
                "pod uid {:?} needed gone twice on node id {}",
                listed[w[0]], n.node_id
            ));
        }
        needed.push(NeededPods {
            candidate: i,
            pods: at,
            reasons: n.reasons,
        });
    }
    Ok(Reply::PreemptionFilter(rejected, needed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: C, reasons: &[&str]) -> Option<pb::Status> {
        Some(pb::Status {
            code: code as i32,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        })
    }

    #[test]
    fn answers_are_checked_against_their_request_and_say_what_was_wrong() {
        use response::Result as R;
        let hello = Hello::default();
        let mut dropped = None;
        let reserve = |code| {
            check(
                &Asked::Reserve,
                &hello,
                Ok(R::Reserve(pb::ReserveResponse {
                    status: status(code, &[]),
                })),
                &mut None,
            )
        };
        assert_eq!(
            reserve(C::Skip).unwrap_err().to_string(),
            "malformed answer: Reserve answered CODE_SKIP, but Reserve answers CODE_SUCCESS, CODE_UNSCHEDULABLE, CODE_UNSCHEDULABLE_AND_UNRESOLVABLE or CODE_ERROR"
        );
        assert_eq!(
            reserve(C::Wait).unwrap_err().to_string(),
            "malformed answer: Reserve answered CODE_WAIT, but Reserve answers CODE_SUCCESS, CODE_UNSCHEDULABLE, CODE_UNSCHEDULABLE_AND_UNRESOLVABLE or CODE_ERROR"
        );
        assert_eq!(
            reserve(C::Error).unwrap_err().to_string(),
            "extender error: (an error without a message)"
        );
        assert!(matches!(reserve(C::Unschedulable), Ok(Reply::Reserve(_))));
        assert_eq!(
            check(
                &Asked::Reserve,
                &hello,
                Ok(R::Reserve(pb::ReserveResponse {
                    status: Some(pb::Status {
                        code: 42,
                        reasons: vec![]
                    })
                })),
                &mut None
            )
            .unwrap_err()
            .to_string(),
            "malformed answer: Reserve answered unknown code 42, but Reserve answers CODE_SUCCESS, CODE_UNSCHEDULABLE, CODE_UNSCHEDULABLE_AND_UNRESOLVABLE or CODE_ERROR"
        );
        assert_eq!(
            check(
                &Asked::Reserve,
                &hello,
                Ok(R::PostBind(pb::PostBindResponse {})),
                &mut None
            )
            .unwrap_err()
            .to_string(),
            "malformed answer: a PostBind answer to a Reserve request"
        );
        assert_eq!(
            check(
                &Asked::Permit,
                &hello,
                Ok(R::Permit(pb::PermitResponse {
                    status: status(C::Wait, &[]),
                    wait_timeout: None
                })),
                &mut None
            )
            .unwrap_err()
            .to_string(),
            "malformed answer: Permit answered CODE_WAIT without a positive wait_timeout"
        );
        assert_eq!(
            check(
                &Asked::PreScore,
                &hello,
                Ok(R::PreScore(pb::PreScoreResponse {
                    status: status(C::Unschedulable, &["x"])
                })),
                &mut None
            )
            .unwrap_err()
            .to_string(),
            "malformed answer: PreScore answered CODE_UNSCHEDULABLE, but PreScore answers CODE_SUCCESS, CODE_SKIP or CODE_ERROR"
        );

        // Filter: rejections by position; unknown, repeated or wrongly
        // coded nodes, and the scores' count, are checked.
        let asked = Asked::Filter {
            ids: vec![7, 3, 9],
            score: true,
        };
        let node = |id, code| pb::NodeStatus {
            node_id: id,
            code: code as i32,
            reasons: vec!["r".into()],
            plugin: String::new(),
        };
        let filter = |rejected, scores| {
            check(
                &asked,
                &hello,
                Ok(R::Filter(pb::FilterResponse { rejected, scores })),
                &mut None,
            )
        };
        match filter(vec![node(9, C::Unschedulable)], vec![1, 2, 3]) {
            Ok(Reply::Filter(r, Some(s))) => {
                assert_eq!(r.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [2]);
                assert_eq!(s, [1, 2, 3]);
            }
            other => panic!("{other:?}"),
        }
        for (rejected, scores, want) in [
            (
                vec![node(4, C::Unschedulable)],
                vec![0, 0, 0],
                "malformed answer: a verdict for node id 4, which was not asked about",
            ),
            (
                vec![node(3, C::Unschedulable), node(3, C::Unschedulable)],
                vec![0, 0, 0],
                "malformed answer: two verdicts for node id 3",
            ),
            (
                vec![node(3, C::Skip)],
                vec![0, 0, 0],
                "malformed answer: Filter answered CODE_SKIP for node id 3, but a rejection is CODE_UNSCHEDULABLE, CODE_UNSCHEDULABLE_AND_UNRESOLVABLE or CODE_ERROR",
            ),
        ] {
            assert_eq!(filter(rejected, scores).unwrap_err().to_string(), want);
        }

        // Scores of the wrong count are dropped, not the verdicts.
        match check(
            &asked,
            &hello,
            Ok(R::Filter(pb::FilterResponse {
                rejected: vec![node(3, C::Unschedulable)],
                scores: vec![1],
            })),
            &mut dropped,
        ) {
            Ok(Reply::Filter(r, None)) => assert_eq!(r.len(), 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            dropped.as_deref(),
            Some(
                "1 scores for 3 nodes in a Filter answer that asked for them; asking Score separately"
            )
        );

        // Score ranges follow the declared normalization.
        let score = |hello: &Hello, scores: Vec<i64>| {
            check(
                &Asked::Score(2),
                hello,
                Ok(R::Score(pb::ScoreResponse { scores })),
                &mut None,
            )
        };
        assert_eq!(
            score(&hello, vec![0, 101]).unwrap_err().to_string(),
            "malformed answer: score 101, outside [0, 100] (SCORE_NORMALIZATION_NONE)"
        );
        let scale = Hello {
            score_normalization: pb::ScoreNormalization::Scale as i32,
            ..Hello::default()
        };
        assert!(score(&scale, vec![0, 1000]).is_ok());
        assert!(score(&scale, vec![-1, 10]).is_err());
    }
}
