//! TaintToleration: nodes with `NoSchedule` or `NoExecute` taints the pod
//! does not tolerate are infeasible; among feasible nodes, those with fewer
//! untolerated `PreferNoSchedule` taints score higher.
//!
//! Toleration matching is the model's ([`Toleration::tolerates`]): the
//! `Equal` and `Exists` operators. The numeric `Gt`/`Lt` operators sit behind
//! the `TaintTolerationComparisonOperators` gate, alpha and off by default in
//! v1.36; with it off the API server refuses them, and so does the model's
//! pod parser, so no pod reaching this plugin carries one.

use std::sync::Arc;

use async_trait::async_trait;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventObject, EventResource,
    FilterPlugin, MAX_NODE_SCORE, NoArgs, NodeScore, Plugin, PreScorePlugin, QueueingHint,
    ScoreExtensions, ScorePlugin, StateKey, Status,
};
use crate::model::{PodInfo, Taint, TaintEffect, Toleration, taint};
use crate::plugins::helper::default_normalize_score;
use crate::plugins::names::TAINT_TOLERATION;

/// The reason a node with an untolerated `NoSchedule`/`NoExecute` taint is
/// rejected.
pub const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// The pod's tolerations that can tolerate `PreferNoSchedule` taints: those
/// with that effect or with none (every effect).
#[derive(Debug, Clone)]
struct PreScoreState(Vec<Toleration>);

const PRE_SCORE_KEY: StateKey<PreScoreState> = StateKey::new("PreScoreTaintToleration");

/// The TaintToleration plugin.
#[derive(Debug, Default)]
pub struct TaintToleration;

impl TaintToleration {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

/// Whether a taint keeps pods that do not tolerate it off the node.
fn blocks_scheduling(t: &Taint) -> bool {
    matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
}

/// The first `NoSchedule`/`NoExecute` taint of `taints` that no toleration
/// of `tolerations` tolerates.
fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| blocks_scheduling(t))
        .find(|t| !taint::tolerates(tolerations, t))
}

/// How many `PreferNoSchedule` taints no toleration tolerates.
fn count_intolerable_prefer_no_schedule(taints: &[Taint], tolerations: &[Toleration]) -> i64 {
    taints
        .iter()
        .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
        .filter(|t| !taint::tolerates(tolerations, t))
        .count() as i64
}

/// Requeues the pod when a node appears, or changes its taints, so that it
/// goes from having an untolerated taint to having none.
fn hint_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let new = new
        .and_then(EventObject::as_node)
        .ok_or("expected a node in the event")?;
    let was_untolerated = old
        .and_then(EventObject::as_node)
        .is_none_or(|o| untolerated(&o.taints, &pod.tolerations).is_some());
    let is_untolerated = untolerated(&new.taints, &pod.tolerations).is_some();
    Ok(if was_untolerated && !is_untolerated {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

/// Requeues the pod when its own tolerations change.
fn hint_pod_toleration_change(
    pod: &PodInfo,
    _: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let new = new
        .and_then(EventObject::as_pod)
        .ok_or("expected a pod in the event")?;
    Ok(if new.uid == pod.uid {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        TAINT_TOLERATION
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                hint_node_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION),
                hint_pod_toleration_change,
            ),
        ])
    }

    extension_points!(filter, pre_score, score);
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        match untolerated(&n.taints, &pod.tolerations) {
            None => Status::success(),
            Some(_) => Status::unresolvable(ERR_REASON_UNTOLERATED),
        }
    }
}

#[async_trait]
impl PreScorePlugin for TaintToleration {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        let tolerations = pod
            .tolerations
            .iter()
            .filter(|t| t.effect.is_none_or(|e| e == TaintEffect::PreferNoSchedule))
            .cloned()
            .collect();
        state.write(&PRE_SCORE_KEY, PreScoreState(tolerations));
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.require(&PRE_SCORE_KEY)?;
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        Ok(count_intolerable_prefer_no_schedule(&n.taints, &s.0))
    }

    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        Some(self)
    }
}

impl ScoreExtensions for TaintToleration {
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{NodeBuilder, PodBuilder, make_node, make_pod};

    fn node(taints: &[(&str, &str, &str)]) -> NodeInfo {
        let mut b = make_node("n");
        for (k, v, e) in taints {
            b = b.taint(k, v, e);
        }
        NodeInfo::new(Arc::new(b.build()))
    }

    fn pod(tolerations: &[(&str, &str, &str, &str)]) -> PodInfo {
        let mut b = make_pod("p");
        for (k, op, v, e) in tolerations {
            b = b.toleration(k, op, v, e);
        }
        b.build()
    }

    #[test]
    fn filter_verdicts() {
        type Taints<'a> = &'a [(&'a str, &'a str, &'a str)];
        type Tols<'a> = &'a [(&'a str, &'a str, &'a str, &'a str)];
        let cases: &[(&str, Taints, Tols, bool)] = &[
            ("no taints, no tolerations", &[], &[], true),
            (
                "NoSchedule taint, no tolerations",
                &[("dedicated", "user1", "NoSchedule")],
                &[],
                false,
            ),
            (
                "NoExecute taint, no tolerations",
                &[("dedicated", "user1", "NoExecute")],
                &[],
                false,
            ),
            (
                "PreferNoSchedule taint never filters",
                &[("dedicated", "user1", "PreferNoSchedule")],
                &[],
                true,
            ),
            (
                "Equal with the same value and effect",
                &[("dedicated", "user1", "NoSchedule")],
                &[("dedicated", "Equal", "user1", "NoSchedule")],
                true,
            ),
            (
                "Equal with another value",
                &[("dedicated", "user1", "NoSchedule")],
                &[("dedicated", "Equal", "user2", "NoSchedule")],
                false,
            ),
            (
                "empty operator means Equal",
                &[("dedicated", "user1", "NoSchedule")],
                &[("dedicated", "", "user1", "NoSchedule")],
                true,
            ),
            (
                "Equal with an empty value matches an empty-valued taint",
                &[("foo", "", "NoSchedule")],
                &[("foo", "Equal", "", "NoSchedule")],
                true,
            ),
            (
                "Exists on the key, any value",
                &[("foo", "bar", "NoSchedule")],
                &[("foo", "Exists", "", "NoSchedule")],
                true,
            ),
            (
                "Exists with an empty key and effect tolerates everything",
                &[("foo", "bar", "NoSchedule"), ("baz", "qux", "NoExecute")],
                &[("", "Exists", "", "")],
                true,
            ),
            (
                "Exists with an empty key but another effect",
                &[("foo", "bar", "NoSchedule")],
                &[("", "Exists", "", "NoExecute")],
                false,
            ),
            (
                "empty toleration effect matches every effect",
                &[("foo", "bar", "NoExecute")],
                &[("foo", "Equal", "bar", "")],
                true,
            ),
            (
                "effect must match",
                &[("foo", "bar", "NoSchedule")],
                &[("foo", "Equal", "bar", "NoExecute")],
                false,
            ),
            (
                "PreferNoSchedule toleration does not tolerate NoSchedule",
                &[("foo", "bar", "NoSchedule")],
                &[("foo", "Equal", "bar", "PreferNoSchedule")],
                false,
            ),
            (
                "another key",
                &[("foo", "bar", "NoSchedule")],
                &[("other", "Exists", "", "")],
                false,
            ),
            (
                "one of two taints untolerated",
                &[("a", "1", "NoSchedule"), ("b", "2", "NoExecute")],
                &[("a", "Equal", "1", "NoSchedule")],
                false,
            ),
            (
                "every blocking taint tolerated by some toleration",
                &[
                    ("a", "1", "NoSchedule"),
                    ("b", "2", "NoExecute"),
                    ("c", "3", "PreferNoSchedule"),
                ],
                &[("a", "Equal", "1", ""), ("b", "Exists", "", "NoExecute")],
                true,
            ),
        ];
        let pl = TaintToleration;
        let st = CycleState::new();
        for (name, taints, tols, fits) in cases {
            let s = pl.filter(&st, &pod(tols), &node(taints));
            if *fits {
                assert!(s.is_success(), "{name}: {s:?}");
            } else {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.message(), ERR_REASON_UNTOLERATED, "{name}");
            }
        }
    }

    #[test]
    fn filter_errors_on_a_deleted_node() {
        let s = TaintToleration.filter(&CycleState::new(), &pod(&[]), &NodeInfo::default());
        assert!(s.is_error());
    }

    async fn scores(pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<i64> {
        let pl = TaintToleration;
        let mut st = CycleState::new();
        assert!(pl.pre_score(&mut st, pod, &[]).await.is_success());
        let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        let mut list: Vec<NodeScore<'_>> = nodes
            .iter()
            .zip(&names)
            .map(|(n, name)| NodeScore {
                name,
                score: pl.score(&st, pod, n).unwrap(),
            })
            .collect();
        assert!(pl.normalize_score(&st, pod, &mut list).is_success());
        list.iter().map(|s| s.score).collect()
    }

    fn named(name: &str, taints: &[(&str, &str, &str)]) -> NodeInfo {
        let mut b: NodeBuilder = make_node(name);
        for (k, v, e) in taints {
            b = b.taint(k, v, e);
        }
        NodeInfo::new(Arc::new(b.build()))
    }

    #[tokio::test]
    async fn score_counts_intolerable_prefer_no_schedule_and_reverses() {
        type Tols<'a> = &'a [(&'a str, &'a str, &'a str, &'a str)];
        let nodes = [
            named("zero", &[]),
            named("one", &[("foo", "bar", "PreferNoSchedule")]),
            named(
                "two",
                &[
                    ("foo", "bar", "PreferNoSchedule"),
                    ("cpu", "slow", "PreferNoSchedule"),
                ],
            ),
            named(
                "blocking-ignored",
                &[("foo", "bar", "NoSchedule"), ("x", "y", "NoExecute")],
            ),
        ];
        let cases: &[(&str, Tols, [i64; 4])] = &[
            ("no tolerations", &[], [100, 50, 0, 100]),
            (
                "PreferNoSchedule toleration of one taint",
                &[("foo", "Equal", "bar", "PreferNoSchedule")],
                [100, 100, 0, 100],
            ),
            (
                "toleration without effect counts for PreferNoSchedule",
                &[("cpu", "Exists", "", "")],
                [100, 0, 0, 100],
            ),
            (
                "NoSchedule toleration does not count",
                &[("foo", "Equal", "bar", "NoSchedule")],
                [100, 50, 0, 100],
            ),
            (
                "tolerating everything",
                &[("", "Exists", "", "")],
                [100, 100, 100, 100],
            ),
        ];
        for (name, tols, want) in cases {
            assert_eq!(scores(&pod(tols), &nodes).await, want, "{name}");
        }
    }

    #[tokio::test]
    async fn pre_score_keeps_only_prefer_no_schedule_tolerations() {
        let p = pod(&[
            ("a", "Exists", "", "NoSchedule"),
            ("b", "Exists", "", "PreferNoSchedule"),
            ("c", "Exists", "", ""),
            ("d", "Exists", "", "NoExecute"),
        ]);
        let mut st = CycleState::new();
        TaintToleration.pre_score(&mut st, &p, &[]).await;
        let kept: Vec<&str> = st
            .read(&PRE_SCORE_KEY)
            .unwrap()
            .0
            .iter()
            .map(|t| t.key.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(kept, ["b", "c"]);
    }

    #[test]
    fn score_without_pre_score_is_an_error() {
        let err = TaintToleration
            .score(&CycleState::new(), &pod(&[]), &named("n", &[]))
            .unwrap_err();
        assert!(err.is_error());
    }

    #[test]
    fn hints() {
        let regs = TaintToleration.events_to_register().unwrap();
        assert_eq!(regs.len(), 2);
        assert_eq!(
            regs[0].event,
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_TAINT
            )
        );
        assert_eq!(
            regs[1].event,
            ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION)
        );
        let node_hint = regs[0].hint.as_ref().unwrap();
        let as_node = |b: NodeBuilder| Some(EventObject::Node(Arc::new(b.build())));
        let tainted = as_node(make_node("n").taint("foo", "bar", "NoSchedule"));
        let soft = as_node(make_node("n").taint("foo", "bar", "PreferNoSchedule"));
        let clean = as_node(make_node("n"));
        let plain = pod(&[]);
        let tolerant = pod(&[("foo", "Exists", "", "")]);
        type Case<'a> = (
            &'a str,
            &'a PodInfo,
            Option<&'a EventObject>,
            &'a Option<EventObject>,
            QueueingHint,
        );
        let node_cases: &[Case<'_>] = &[
            (
                "added without taints",
                &plain,
                None,
                &clean,
                QueueingHint::Queue,
            ),
            (
                "added with an untolerated taint",
                &plain,
                None,
                &tainted,
                QueueingHint::Skip,
            ),
            (
                "added with a tolerated taint",
                &tolerant,
                None,
                &tainted,
                QueueingHint::Queue,
            ),
            (
                "added with a soft taint",
                &plain,
                None,
                &soft,
                QueueingHint::Queue,
            ),
            (
                "taint removed",
                &plain,
                tainted.as_ref(),
                &clean,
                QueueingHint::Queue,
            ),
            (
                "taint softened",
                &plain,
                tainted.as_ref(),
                &soft,
                QueueingHint::Queue,
            ),
            (
                "taint added",
                &plain,
                clean.as_ref(),
                &tainted,
                QueueingHint::Skip,
            ),
            (
                "was already tolerated",
                &tolerant,
                tainted.as_ref(),
                &clean,
                QueueingHint::Skip,
            ),
            (
                "unchanged",
                &plain,
                clean.as_ref(),
                &clean,
                QueueingHint::Skip,
            ),
        ];
        for (name, p, old, new, want) in node_cases {
            assert_eq!(node_hint(p, *old, new.as_ref()).unwrap(), *want, "{name}");
        }
        assert!(node_hint(&plain, None, None).is_err(), "no node");

        let pod_hint = regs[1].hint.as_ref().unwrap();
        let as_pod = |b: PodBuilder| Some(EventObject::Pod(Arc::new(b.build())));
        let same = as_pod(make_pod("p").toleration("foo", "Exists", "", ""));
        let other = as_pod(make_pod("q").toleration("foo", "Exists", "", ""));
        assert_eq!(
            pod_hint(&plain, None, same.as_ref()).unwrap(),
            QueueingHint::Queue,
            "the pod itself"
        );
        assert_eq!(
            pod_hint(&plain, None, other.as_ref()).unwrap(),
            QueueingHint::Skip,
            "another pod"
        );
    }
}
