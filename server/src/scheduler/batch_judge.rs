//! A Filter and Score plugin served in batches, as a remote extender's
//! are, for the scheduler's tests: its verdicts and scores are functions of
//! the pod and the node, it answers its Filter call (with the scores) ahead
//! of the per-node plugins, and it records what it was asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cache::NodeInfo;
use crate::framework::{
    BatchFilter, BatchFilterAnswer, BatchFilterCall, BatchScore, CycleState, FilterPlugin,
    NodeWindow, Registry, ScorePlugin, Status,
};
use crate::model::PodInfo;

/// What the plugin was asked: per Filter call, the pod, the cycle it was
/// asked under and the first node of the window; and how many calls were
/// dropped unanswered.
#[derive(Debug, Default)]
pub(super) struct Asked {
    pub calls: Mutex<Vec<(String, u64, String)>>,
    pub dropped: AtomicUsize,
}

/// The plugin.
#[derive(Clone)]
pub(super) struct BatchJudge {
    pub name: &'static str,
    /// Whether the pod may go to the node.
    pub passes: fn(&PodInfo, &NodeInfo) -> bool,
    /// The node's raw score for the pod.
    pub score: fn(&PodInfo, &NodeInfo) -> i64,
    /// See [`BatchFilter::looks_ahead`].
    pub looks_ahead: bool,
    pub asked: Arc<Asked>,
}

impl BatchJudge {
    /// Registers the plugin under its name (each profile built gets this
    /// one, sharing `asked`).
    pub fn register(self, registry: &mut Registry) {
        let name = self.name;
        registry
            .register(name, move |_: crate::framework::NoArgs, _| Ok(self.clone()))
            .unwrap();
    }
}

/// The number a name ends with (`n017` → 17).
pub(super) fn number(name: &str) -> u64 {
    name.trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0)
}

impl crate::framework::Plugin for BatchJudge {
    fn name(&self) -> &'static str {
        self.name
    }
    crate::extension_points!(filter, score);
}

impl FilterPlugin for BatchJudge {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if (self.passes)(pod, node) {
            Status::success()
        } else {
            Status::unschedulable("judged out")
        }
    }
    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        Some(self)
    }
}

/// Counts its call as dropped unless the call answered.
struct Answered(Arc<Asked>, bool);

impl Drop for Answered {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait::async_trait]
impl BatchFilter for BatchJudge {
    async fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, Status> {
        Ok(nodes.iter().map(|n| self.filter(state, pod, n)).collect())
    }

    fn start_filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: NodeWindow<'_>,
        with_scores: bool,
    ) -> Option<BatchFilterCall> {
        let first = nodes.iter().next().map(|n| n.name().to_string());
        self.asked.calls.lock().push((
            pod.name.to_string(),
            state.token().id(),
            first.unwrap_or_default(),
        ));
        let statuses: Vec<Status> = nodes.iter().map(|n| self.filter(state, pod, n)).collect();
        let scores = with_scores.then(|| nodes.iter().map(|n| (self.score)(pod, n)).collect());
        let answered = Answered(self.asked.clone(), false);
        Some(Box::pin(async move {
            let mut answered = answered;
            answered.1 = true;
            let mut answer = BatchFilterAnswer::from_statuses(statuses);
            answer.scores = scores;
            Ok(answer)
        }))
    }

    fn looks_ahead(&self) -> bool {
        self.looks_ahead
    }
}

impl ScorePlugin for BatchJudge {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok((self.score)(pod, node))
    }
    fn as_batch(&self) -> Option<&dyn BatchScore> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl BatchScore for BatchJudge {
    async fn score_nodes(
        &self,
        _: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status> {
        Ok(nodes.iter().map(|n| (self.score)(pod, n)).collect())
    }
    async fn score_prefetched(
        &self,
        _: &CycleState,
        _: &PodInfo,
        _: &[Arc<NodeInfo>],
        raw: Vec<i64>,
    ) -> Result<Vec<i64>, Status> {
        Ok(raw)
    }
}
