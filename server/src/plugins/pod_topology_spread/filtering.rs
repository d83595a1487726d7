//! PreFilter, AddPod/RemovePod and Filter: the `DoNotSchedule` constraints.
//!
//! PreFilter counts, per constraint and domain, the matching pods on the
//! nodes that count (they have every topology key and pass the
//! constraint's node inclusion policies) and keeps the two smallest domains
//! of each constraint. Filter then rejects a node whose domain, with the
//! pod, would exceed the smallest domain (0 when there are fewer domains
//! than `minDomains`) by more than `maxSkew`.

use std::sync::Arc;

use async_trait::async_trait;

use super::domains::{DomainCounts, SpreadKey};
use super::{
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH, PodTopologySpread,
    has_all_keys, node_included,
};
use crate::cache::NodeInfo;
use crate::framework::{
    CycleState, FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult, StateKey,
    Status,
};
use crate::model::{PodInfo, SpreadConstraint, WhenUnsatisfiable};

/// The smallest count a domain starts from in the critical paths: upstream's
/// `math.MaxInt32`.
const UNSET_MATCH_NUM: i64 = i32::MAX as i64;

/// One of the two tracked domains of a constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CriticalPath {
    /// The domain (topology value).
    pub(super) value: Arc<str>,
    /// Its matching pods.
    pub(super) match_num: i64,
}

/// The two domains with the fewest matching pods: `[0]` always holds the
/// minimum; `[1]` is at least `[0]` but, after AddPod/RemovePod, not
/// necessarily the second smallest (enough for preemption, which evaluates
/// one node at a time on its own copy of the state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CriticalPaths(pub(super) [CriticalPath; 2]);

impl CriticalPaths {
    pub(super) fn new() -> Self {
        let unset = || CriticalPath {
            value: Arc::from(""),
            match_num: UNSET_MATCH_NUM,
        };
        Self([unset(), unset()])
    }

    /// The two smallest domains of `domains` (the first met among equals).
    fn of(domains: &DomainCounts) -> Self {
        let mut best: [Option<(&Arc<str>, i64)>; 2] = [None, None];
        for (value, &num) in domains.iter() {
            if best[0].is_none_or(|(_, b)| num < b) {
                best[1] = best[0];
                best[0] = Some((value, num));
            } else if best[1].is_none_or(|(_, b)| num < b) {
                best[1] = Some((value, num));
            }
        }
        let mut paths = Self::new();
        for (slot, found) in paths.0.iter_mut().zip(best) {
            if let Some((value, match_num)) = found {
                *slot = CriticalPath {
                    value: value.clone(),
                    match_num,
                };
            }
        }
        paths
    }

    /// Records that domain `value` now has `num` matching pods.
    pub(super) fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let tracked = if *p[0].value == *value {
            Some(0)
        } else if *p[1].value == *value {
            Some(1)
        } else {
            None
        };
        match tracked {
            Some(i) => {
                p[i].match_num = num;
                if p[0].match_num > p[1].match_num {
                    p.swap(0, 1);
                }
            }
            None if num < p[0].match_num => {
                p[1] = p[0].clone();
                p[0] = CriticalPath {
                    value: Arc::from(value),
                    match_num: num,
                };
            }
            None if num < p[1].match_num => {
                p[1] = CriticalPath {
                    value: Arc::from(value),
                    match_num: num,
                };
            }
            None => {}
        }
    }
}

/// What PreFilter computed; cloned (deeply, but for the constraints) for
/// preemption's what-ifs.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    /// The pod's `DoNotSchedule` constraints.
    pub(super) constraints: Arc<[SpreadConstraint]>,
    /// Whether the pod itself matches each constraint's selector.
    pub(super) self_match: Arc<[bool]>,
    /// Per constraint: matching pods per domain (every domain of a node that
    /// counts, even with 0 pods).
    pub(super) counts: Vec<DomainCounts>,
    /// Per constraint: the two smallest domains.
    pub(super) critical_paths: Vec<CriticalPaths>,
}

impl PreFilterState {
    /// The global minimum of constraint `i`: the smallest domain's count, or
    /// 0 when there are fewer domains than `min_domains`.
    fn min_match_num(&self, i: usize, min_domains: i32) -> i64 {
        if (self.counts[i].len() as i64) < i64::from(min_domains) {
            0
        } else {
            self.critical_paths[i].0[0].match_num
        }
    }

    /// Counts `pod` (`delta` = 1) or uncounts it (-1) on `node`, for the pod
    /// being scheduled, `preemptor`.
    fn update_with_pod(&mut self, pod: &PodInfo, preemptor: &PodInfo, node: &NodeInfo, delta: i64) {
        if pod.namespace != preemptor.namespace {
            return;
        }
        let Some(node) = node.node() else {
            return;
        };
        if !has_all_keys(node, &self.constraints) {
            return;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selector.matches(&pod.labels) || !node_included(c, preemptor, node) {
                continue;
            }
            let value = node.labels.get(&c.topology_key).unwrap_or("");
            let num = self.counts[i].add(value, delta);
            self.critical_paths[i].update(value, num);
        }
    }
}

pub(super) const PRE_FILTER_KEY: StateKey<PreFilterState> =
    StateKey::new("PreFilterPodTopologySpread");

impl PodTopologySpread {
    /// The PreFilter state for `pod` over `nodes`; `None` if the pod has no
    /// `DoNotSchedule` constraint.
    pub(super) fn pre_filter_state(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Option<PreFilterState> {
        let constraints = self
            .source
            .constraints(pod, WhenUnsatisfiable::DoNotSchedule);
        if constraints.is_empty() {
            return None;
        }
        // A node counts only with every constraint's key.
        let required: Vec<Arc<str>> = constraints.iter().map(|c| c.topology_key.clone()).collect();
        let counts: Vec<DomainCounts> = constraints
            .iter()
            .map(|c| {
                let key = SpreadKey {
                    namespace: pod.namespace.clone(),
                    selector: c.selector.clone(),
                    topology_key: c.topology_key.clone(),
                    required: required.clone(),
                    missing_as_empty: false,
                };
                self.domain_counts(key, c, pod, nodes)
            })
            .collect();
        let critical_paths = counts.iter().map(CriticalPaths::of).collect();
        let self_match = constraints
            .iter()
            .map(|c| c.selector.matches(&pod.labels))
            .collect();
        Some(PreFilterState {
            constraints: constraints.into(),
            self_match,
            counts,
            critical_paths,
        })
    }
}

#[async_trait]
impl PreFilterPlugin for PodTopologySpread {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match self.pre_filter_state(pod, nodes) {
            None => (None, Status::skip()),
            Some(s) => {
                state.write(&PRE_FILTER_KEY, s);
                (None, Status::success())
            }
        }
    }

    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_KEY) {
            Some(s) => {
                s.update_with_pod(pod_to_add, pod_to_schedule, node, 1);
                Status::success()
            }
            None => missing_state(state),
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        match state.read_mut(&PRE_FILTER_KEY) {
            Some(s) => {
                s.update_with_pod(pod_to_remove, pod_to_schedule, node, -1);
                Status::success()
            }
            None => missing_state(state),
        }
    }
}

/// The error for AddPod/RemovePod without a PreFilter state.
fn missing_state(state: &CycleState) -> Status {
    state
        .require(&PRE_FILTER_KEY)
        .err()
        .unwrap_or_else(|| Status::error("reading PreFilterPodTopologySpread"))
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let s = match state.require(&PRE_FILTER_KEY) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if s.constraints.is_empty() {
            return Status::success();
        }
        let Some(node) = node.node() else {
            return Status::error("node not found");
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels.get(&c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let min = s.min_match_num(i, c.min_domains);
            let self_match = i64::from(s.self_match[i]);
            let matching = s.counts[i].get(value).unwrap_or(0);
            if matching + self_match - min > i64::from(c.max_skew) {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
