//! The node search of one scheduling cycle: PreFilter, the sampled Filter
//! over nodes, PreScore/Score, and the choice among the best nodes.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

pub use crate::rng::FastRng;

use super::batching::Batch;
use super::evaluations::{self, FilterTally};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    BatchFiltersAhead, Code, CycleState, CycleToken, Diagnosis, ExtensionPoint, FitError,
    Framework, NodeWindow, NominatedPods, Status,
};
use crate::model::{PodInfo, PodRef};
use crate::queue::SchedulingQueue;

/// Below this many nodes, every node is evaluated.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

/// What upstream says when the cluster has no nodes.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// How many feasible nodes to look for before stopping, out of `num_nodes`:
/// all below 100 nodes; otherwise the configured percentage (0: adaptive,
/// `50 - nodes/125` per cent, at least 5), and at least 100 nodes.
pub fn num_feasible_nodes_to_find(percentage: i32, num_nodes: usize) -> usize {
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_nodes;
    }
    let n = num_nodes as i64;
    let mut p = i64::from(percentage);
    if p == 0 {
        p = (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    let found = (n * p / 100) as usize;
    found.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// What judging a node in the Filter search found (see
/// [`super::batching`]).
enum Judged {
    /// Every plugin's verdict, kept whole.
    Whole(Status),
    /// The kept plugins' verdict (to keep), and the verdict of the plugins
    /// after them when it passed.
    Prefix(Status, Option<Status>),
    /// The verdict of the plugins after those a kept verdict passed.
    Rest(Status),
}

/// The snapshot positions of the `feasible` nodes, found at `offsets` from
/// `start` in `nodes` (the snapshot's list) by the per-node Filter plugins,
/// of which the batch Filter plugins may have left out some (keeping the
/// order); empty if they do not match, which turns score reuse off.
fn kept_positions(
    nodes: &[Arc<NodeInfo>],
    start: usize,
    offsets: &[usize],
    feasible: &[Arc<NodeInfo>],
) -> Vec<usize> {
    let n = nodes.len();
    let mut out = Vec::with_capacity(feasible.len());
    let mut left = feasible.iter().peekable();
    for &o in offsets {
        let at = (start + o) % n;
        if left.next_if(|f| Arc::ptr_eq(f, &nodes[at])).is_some() {
            out.push(at);
        }
    }
    if left.next().is_some() {
        return Vec::new();
    }
    out
}

/// Runs the batch Filter plugins on the nodes the per-node ones kept,
/// recording rejections in `diagnosis`.
async fn run_batch_filters(
    fw: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &mut Vec<Arc<NodeInfo>>,
    diagnosis: &mut Diagnosis,
) -> Result<(), ScheduleError> {
    if !fw.has_batch_filters() {
        return Ok(());
    }
    fw.run_batch_filters(state, pod, nodes, &mut |_, node, s| {
        diagnosis.add_plugin_status(&s);
        diagnosis.node_to_status.set(Arc::from(node.name()), s);
    })
    .await
    .map_err(ScheduleError::Error)
}

/// What the per-node Filter plugins passed: how many nodes were evaluated,
/// and each passing node's position in the evaluation order.
type Passed = (usize, Vec<usize>);

/// Why no node was chosen.
#[derive(Debug, Clone)]
pub enum ScheduleError {
    /// The cluster has no nodes.
    NoNodesAvailable,
    /// No node fits.
    Fit(Box<FitError>),
    /// A plugin failed.
    Error(Status),
}

/// The outcome of a successful search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    /// The chosen node.
    pub suggested_host: Arc<str>,
    /// Nodes evaluated by Filter.
    pub evaluated_nodes: usize,
    /// Nodes that passed Filter.
    pub feasible_nodes: usize,
}

/// The search state that lives across cycles.
#[derive(Debug)]
pub struct Algorithm {
    /// Where the next search starts in the node list, so all nodes get their
    /// turn.
    pub next_start_node_index: usize,
    /// The global percentageOfNodesToScore (0: adaptive).
    pub percentage_of_nodes_to_score: i32,
    rng: FastRng,
    /// Nodes evaluated per feasible node found, as last seen (smoothed):
    /// how far past the wanted count the sampling window sent ahead to
    /// batch Filter plugins reaches.
    evaluated_per_feasible: f64,
    /// Verdicts and raw scores kept for the next pod with the same
    /// signature.
    batch: Batch,
    /// The queue whose next pods batch Filter calls are sent ahead for
    /// (`None`: never; see [`Algorithm::with_look_ahead`]).
    look_ahead_queue: Option<Arc<SchedulingQueue>>,
    /// The calls sent ahead, for the queue's next pods in their order.
    ahead: VecDeque<LookAhead>,
    /// Calls sent ahead that their cycle used, and that were dropped.
    look_aheads: (u64, u64),
    /// How far the search's start moves per cycle (smoothed; `None` before
    /// the first search), and how much that varies: where the windows of
    /// pods further ahead start.
    start_step: Option<f64>,
    start_step_spread: f64,
    /// Searches run so far (the look-ahead's clock).
    cycles: u64,
}

/// Pods whose batch Filter calls are sent ahead together: one write on an
/// extender's stream for all of them, which is most of what a call costs
/// (`berth-bench --workload ExtenderTransport`), and one wake-up of the
/// extender.
const LOOK_AHEAD_BATCH: usize = 8;

/// More calls are sent ahead once no more than this many are left unused,
/// so that the first pod of the new ones is that many cycles away when
/// they leave: the extender answers a write's requests in one write once
/// it has judged them all, so the round trip of a batch, with the
/// extender's wake-up, is several cycles long. Sent later, the cycle that
/// needed the first answer parked berthd's worker until it came, and on a
/// 2-core machine each such park and wake-up cost berthd more CPU than the
/// cycle itself. Measured with `berth-bench --workload
/// SchedulingWithExtender` on 2 cores, the values alternating within each
/// round: with 8 and 8 the gRPC extender kept 79 to 87% of native
/// throughput at 500 nodes (median of 5 to 6 rounds) against 67 to 75%
/// with 4 and 2, and 86 to 103% at 5000 nodes against 60%; 8 and 2, 4 and
/// 4, or 16 and 8 gained less.
const LOOK_AHEAD_LOW: usize = 8;

/// Batch Filter calls sent for a pod expected soon, before its cycle
/// started, while an earlier cycle waited for its own verdicts.
#[derive(Debug)]
struct LookAhead {
    /// When they were sent ([`Algorithm::cycles`]).
    cycle: u64,
    /// The pod (this very object: an update replaces it).
    pod: PodRef,
    /// The context the calls were made under; the pod's cycle adopts it.
    token: Arc<CycleToken>,
    /// In a mutex only so that the loop holding it is `Sync` (the calls are
    /// futures, `Send` only); never contended.
    calls: parking_lot::Mutex<BatchFiltersAhead>,
    /// The window sent: the node list's version and length, and where in
    /// it the window started.
    tree_version: u64,
    nodes: usize,
    start: usize,
}

/// The feasible nodes found and what was learned about the others.
pub struct Feasible<'s> {
    /// Feasible nodes, in evaluation order: borrowed from the snapshot when
    /// they are a run of its list (every node evaluated was feasible and
    /// the search did not wrap around), which spares a cycle touching each
    /// node's counts twice (clone and drop) on top of what it reads.
    pub nodes: Cow<'s, [Arc<NodeInfo>]>,
    /// Rejections.
    pub diagnosis: Diagnosis,
    /// Nodes evaluated (feasible or not).
    pub evaluated: usize,
    /// Each feasible node's position in the snapshot's node list, when the
    /// search kept its verdicts (batching); empty otherwise.
    pub positions: Vec<usize>,
}

impl Algorithm {
    /// A fresh search state.
    pub fn new(percentage_of_nodes_to_score: i32, rng: FastRng) -> Self {
        Self {
            next_start_node_index: 0,
            percentage_of_nodes_to_score,
            rng,
            evaluated_per_feasible: 1.0,
            batch: Batch::new(false),
            look_ahead_queue: None,
            ahead: VecDeque::new(),
            look_aheads: (0, 0),
            start_step: None,
            start_step_spread: 0.0,
            cycles: 0,
        }
    }

    /// With a queue, the calls of batch Filter plugins that allow it
    /// ([`Framework::can_look_ahead`]: remote extenders whose answers do
    /// not hang on the cycle before) are sent for the queue's next pods
    /// while the current cycle waits for its own verdicts, so that the
    /// round trips of later pods overlap the cycles before them: up to
    /// [`LOOK_AHEAD_BATCH`] pods' at once (one write on the stream), once
    /// no more than [`LOOK_AHEAD_LOW`] are left. Each goes with the window
    /// of candidates that pod's cycle is expected to take: for the next
    /// pod the very window (the search's start and reach are final once
    /// the current cycle's Filter ran); for pods further on, the start
    /// moved by what the start moved per cycle lately, widened on both
    /// sides by how much that varied (the whole node list once that covers
    /// it). A cycle uses the calls sent for its pod (the very object: an
    /// update replaces it) if the node list did not change since; the
    /// nodes of its window that the window sent missed are asked in a
    /// second call. Calls for pods that are no longer next are dropped
    /// (cancelled). The verdicts are the extender's for the same pod and
    /// nodes, asked a few cycles earlier.
    pub fn with_look_ahead(mut self, queue: Option<Arc<SchedulingQueue>>) -> Self {
        self.look_ahead_queue = queue;
        self
    }

    /// How many look-ahead calls were used by their cycle, and how many
    /// were dropped.
    pub fn look_aheads(&self) -> (u64, u64) {
        self.look_aheads
    }

    /// The context of the calls sent ahead for `pod`, for its cycle to
    /// adopt.
    pub fn look_ahead_token(&mut self, pod: &PodRef) -> Option<Arc<CycleToken>> {
        self.ahead
            .iter()
            .find(|a| Arc::ptr_eq(&a.pod, pod))
            .map(|a| a.token.clone())
    }

    /// Ends `pod`'s cycle for the look-ahead: calls sent ahead for it and
    /// not used (the cycle ended before its Filter) are dropped.
    pub fn end_cycle(&mut self, pod: &PodRef) {
        self.drop_ahead_unless(|a| !Arc::ptr_eq(&a.pod, pod));
    }

    /// Drops (cancels) the calls sent ahead that `keep` refuses.
    fn drop_ahead_unless(&mut self, keep: impl Fn(&LookAhead) -> bool) {
        let before = self.ahead.len();
        self.ahead.retain(|a| keep(a));
        self.look_aheads.1 += (before - self.ahead.len()) as u64;
    }

    /// Whether calls were sent ahead and not used yet.
    pub fn has_look_ahead(&self) -> bool {
        !self.ahead.is_empty()
    }

    /// Drops (cancels) the calls sent ahead, if any.
    pub fn drop_look_ahead(&mut self) {
        self.look_aheads.1 += self.ahead.len() as u64;
        self.ahead.clear();
    }

    /// Drops the calls sent ahead that no cycle will use; once few are
    /// left, sends the batch Filter calls for the queue's next pods that
    /// have none (up to [`LOOK_AHEAD_BATCH`] at once), each with the window
    /// its cycle is expected to take.
    fn look_ahead(&mut self, fw: &Framework, current: &PodInfo, snapshot: &Snapshot) {
        if !fw.can_look_ahead() {
            return;
        }
        let Some(queue) = self.look_ahead_queue.clone() else {
            return;
        };
        let all = snapshot.list();
        let n = all.len();
        // Calls over a node list that changed since (their windows no
        // longer name the same nodes), and calls whose pod's cycle should
        // have come by now (the pod was deleted, updated or overtaken).
        let version = snapshot.tree_version();
        let stale = self
            .cycles
            .saturating_sub((LOOK_AHEAD_LOW + LOOK_AHEAD_BATCH + 1) as u64);
        self.drop_ahead_unless(|a| a.tree_version == version && a.nodes == n && a.cycle >= stale);
        if self.ahead.len() > LOOK_AHEAD_LOW || n == 0 {
            return;
        }
        let next = queue.peek_many(self.ahead.len().max(LOOK_AHEAD_LOW) + LOOK_AHEAD_BATCH);
        self.drop_ahead_unless(|a| next.iter().any(|p| Arc::ptr_eq(p, &a.pod)));
        let (first, len) = self.window(fw, n);
        for (j, pod) in next
            .iter()
            .enumerate()
            .take(LOOK_AHEAD_LOW + LOOK_AHEAD_BATCH)
        {
            if pod.uid == current.uid
                || pod.scheduler_name != current.scheduler_name
                || pod.nominated_node_name.is_some()
                || pod.terminating
            {
                // Its cycle would not take the window foreseen (a nominated
                // pod tries its node first), nor would the ones after it,
                // or it is another profile's.
                break;
            }
            if self.ahead.iter().any(|a| Arc::ptr_eq(&a.pod, pod)) {
                continue;
            }
            // Pod `j` (0: the next) starts where `j` more cycles moved the
            // start, give or take what that varied by.
            let slack = if j == 0 {
                0
            } else {
                (j as f64 * (2.0 * self.start_step_spread + 1.0)).ceil() as usize
            };
            let moved = (j as f64 * self.start_step.unwrap_or(0.0)).round() as usize;
            let (start, len) = if len + 2 * slack >= n {
                (0, n)
            } else {
                ((first + moved + n - slack % n) % n, len + 2 * slack)
            };
            let state = CycleState::new();
            let Some(mut calls) =
                fw.start_batch_filters(&state, pod, NodeWindow::rotated(all, start, len))
            else {
                return;
            };
            calls.set_origin(start, n);
            self.ahead.push_back(LookAhead {
                cycle: self.cycles,
                pod: pod.clone(),
                token: state.token().clone(),
                calls: parking_lot::Mutex::new(calls),
                tree_version: snapshot.tree_version(),
                nodes: n,
                start,
            });
        }
    }

    /// The window of candidates sent ahead to batch Filter plugins over `n`
    /// nodes: from the search's start, as far as the sampling is expected
    /// to reach (the count it wants, stretched by the nodes evaluated per
    /// feasible one lately).
    fn window(&self, fw: &Framework, n: usize) -> (usize, usize) {
        let want = self.num_to_find(fw, n);
        let reach = (want as f64 * self.evaluated_per_feasible).ceil() as usize;
        (
            self.next_start_node_index % n.max(1),
            reach.max(want).min(n),
        )
    }

    /// With `on`, identical pods reuse each other's per-node verdicts and
    /// raw scores where nodes did not change (see [`super::batching`]).
    pub fn with_batching(mut self, on: bool) -> Self {
        self.batch = Batch::new(on);
        self
    }

    /// How many Filter verdicts and per-node score rows were reused.
    pub fn reused(&self) -> (u64, u64) {
        (self.batch.reused_verdicts, self.batch.reused_scores)
    }

    /// Finds the best node for `pod`.
    pub async fn schedule_pod(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominated: &NominatedPods,
    ) -> Result<ScheduleResult, ScheduleError> {
        if snapshot.num_nodes() == 0 {
            return Err(ScheduleError::NoNodesAvailable);
        }
        let found = self
            .find_nodes_that_fit(fw, state, pod, snapshot, nominated)
            .await?;
        if found.nodes.is_empty() {
            return Err(ScheduleError::Fit(Box::new(FitError {
                num_all_nodes: snapshot.num_nodes(),
                diagnosis: found.diagnosis,
            })));
        }
        let evaluated = found.evaluated;
        if found.nodes.len() == 1 {
            return Ok(ScheduleResult {
                suggested_host: Arc::from(found.nodes[0].name()),
                evaluated_nodes: evaluated,
                feasible_nodes: 1,
            });
        }
        let totals = self
            .prioritize(fw, state, pod, snapshot, &found.nodes, &found.positions)
            .await?;
        let best = self.select_host(&totals);
        Ok(ScheduleResult {
            suggested_host: Arc::from(found.nodes[best].name()),
            evaluated_nodes: evaluated,
            feasible_nodes: found.nodes.len(),
        })
    }

    /// PreFilter, then Filter over the candidate nodes (the nominated node
    /// first, if the pod has one).
    pub async fn find_nodes_that_fit<'s>(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &'s Snapshot,
        nominated: &NominatedPods,
    ) -> Result<Feasible<'s>, ScheduleError> {
        let all = snapshot.list();
        let mut diagnosis = Diagnosis::default();
        let (pre_result, status, with_nodes) = fw.run_pre_filter(state, pod, all).await;
        evaluations::record_once_each(fw, state, ExtensionPoint::PreFilter, &status);
        diagnosis.unschedulable_plugins = with_nodes.clone();
        if !status.is_success() {
            if !status.is_rejected() {
                return Err(ScheduleError::Error(status));
            }
            diagnosis.pre_filter_msg = Some(status.message());
            diagnosis.add_plugin_status(&status);
            diagnosis.node_to_status.set_absent_nodes_status(status);
            return Ok(Feasible {
                nodes: Cow::Borrowed(&[]),
                diagnosis,
                evaluated: 0,
                positions: Vec::new(),
            });
        }

        // A pod nominated to a node (after preemption) tries it first.
        if let Some(nnn) = pod.nominated_node_name.as_deref()
            && let Some(node) = snapshot.get(nnn)
        {
            let s = fw.run_filter_with_nominated_pods(state, pod, node, nominated);
            if let Some(mut tally) = FilterTally::new(fw, state) {
                tally.node(0..usize::MAX, &s);
                tally.record(fw);
            }
            if s.is_success() {
                let mut nodes = vec![node.clone()];
                run_batch_filters(fw, state, pod, &mut nodes, &mut diagnosis).await?;
                if !nodes.is_empty() {
                    return Ok(Feasible {
                        nodes: Cow::Owned(nodes),
                        diagnosis,
                        evaluated: 1,
                        positions: Vec::new(),
                    });
                }
            }
            if s.code() == Code::Error {
                return Err(ScheduleError::Error(s));
            }
            diagnosis.add_plugin_status(&s);
            diagnosis.node_to_status.set(node.name().into(), s);
        }

        let restricted: Option<Vec<Arc<NodeInfo>>> =
            pre_result.and_then(|r| r.node_names).map(|names| {
                let mut idx: Vec<usize> =
                    names.iter().filter_map(|n| snapshot.position(n)).collect();
                idx.sort_unstable();
                idx.into_iter().map(|i| all[i].clone()).collect()
            });
        if restricted.is_some() {
            let plugins: Vec<&str> = with_nodes.iter().copied().collect();
            diagnosis
                .node_to_status
                .set_absent_nodes_status(Status::unresolvable(format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    plugins.join(" ")
                )));
        }
        let nodes: &[Arc<NodeInfo>] = restricted.as_deref().unwrap_or(all);
        let batching =
            self.batch
                .begin_filter(fw, state, pod, snapshot, nominated, restricted.is_some());
        let start = self.next_start_node_index;
        // Batch Filter plugins (remote extenders) get the candidates the
        // sampling will look at now, so that their round trip overlaps the
        // per-node plugins; their verdicts only count for the nodes those
        // keep, which is what judging the kept nodes afterwards gives.
        self.cycles += 1;
        let sent_ahead = self
            .ahead
            .iter()
            .position(|a| Arc::ptr_eq(&a.token, state.token()))
            .and_then(|at| self.ahead.remove(at));
        // Where this cycle's window starts in the window the calls went
        // with (0 when sent in this cycle).
        let mut shift = 0;
        let ahead = if fw.has_batch_filters() && !nodes.is_empty() {
            let (from, len) = self.window(fw, nodes.len());
            let used = sent_ahead.and_then(|a| {
                // Positions in the node list mean the same only if it did
                // not change; nodes a PreFilter restricted to are not a
                // window.
                let usable = restricted.is_none()
                    && a.tree_version == snapshot.tree_version()
                    && a.nodes == nodes.len();
                if usable {
                    self.look_aheads.0 += 1;
                    shift = (from + nodes.len() - a.start % nodes.len()) % nodes.len();
                    Some(a.calls.into_inner())
                } else {
                    self.look_aheads.1 += 1;
                    None
                }
            });
            used.or_else(|| {
                let mut calls =
                    fw.start_batch_filters(state, pod, NodeWindow::rotated(nodes, from, len))?;
                if restricted.is_none() {
                    calls.set_origin(from, nodes.len());
                }
                Some(calls)
            })
        } else {
            if sent_ahead.is_some() {
                self.look_aheads.1 += 1;
            }
            None
        };
        if ahead.is_some() {
            // Let the requests leave now: the tasks that write them to the
            // network were woken on this thread, and would otherwise wait
            // until the per-node plugins below are done.
            tokio::task::yield_now().await;
        }
        let timer = fw.point_timer(state);
        let passed = self.find_nodes_that_pass_filters(
            fw,
            state,
            pod,
            nodes,
            all.len(),
            nominated,
            &mut diagnosis,
        );
        let code = if passed.is_ok() {
            Code::Success
        } else {
            Code::Error
        };
        fw.point_done(crate::config::ExtensionPoint::Filter, code, timer);
        let (evaluated, offsets) = passed?;
        let n = nodes.len();
        let run = offsets.iter().enumerate().all(|(i, &o)| i == o)
            && restricted.is_none()
            && start + offsets.len() <= n;
        let mut feasible: Cow<'s, [Arc<NodeInfo>]> = if run {
            Cow::Borrowed(&all[start..start + offsets.len()])
        } else {
            Cow::Owned(
                offsets
                    .iter()
                    .map(|o| nodes[(start + o) % n].clone())
                    .collect(),
            )
        };
        if !feasible.is_empty() {
            let observed = evaluated as f64 / feasible.len() as f64;
            self.evaluated_per_feasible = (self.evaluated_per_feasible + observed) / 2.0;
        }
        if restricted.is_none() {
            // A search that went all the way round did not move the start.
            let moved = ((self.next_start_node_index + n - start % n) % n) as f64;
            let step = self.start_step.unwrap_or(moved);
            // The spread falls slowly and rises at once: one pod that
            // moves the start differently in a few widens the windows.
            self.start_step_spread = (self.start_step_spread * 0.9).max((moved - step).abs());
            self.start_step = Some((step + moved) / 2.0);
        }
        if fw.has_batch_filters() {
            if ahead.is_some() {
                // While this cycle waits for its verdicts, later pods'
                // leave.
                self.look_ahead(fw, pod, snapshot);
            }
            // Positions in the window the calls went with.
            let sent: Cow<'_, [usize]> = if shift == 0 {
                Cow::Borrowed(&offsets)
            } else {
                Cow::Owned(offsets.iter().map(|o| (shift + o) % n).collect())
            };
            evaluations::record_batch_filters(fw, state, feasible.len());
            fw.finish_batch_filters(
                state,
                pod,
                ahead,
                feasible.to_mut(),
                &sent,
                &mut |_, node, s| {
                    diagnosis.add_plugin_status(&s);
                    diagnosis.node_to_status.set(Arc::from(node.name()), s);
                },
            )
            .await
            .map_err(ScheduleError::Error)?;
        }
        let positions = if batching && !nodes.is_empty() {
            kept_positions(nodes, start, &offsets, &feasible)
        } else {
            Vec::new()
        };
        Ok(Feasible {
            nodes: feasible,
            diagnosis,
            evaluated,
            positions,
        })
    }

    /// Runs Filter over `nodes`, starting where the last search stopped and
    /// stopping once enough feasible nodes are found. Nodes are evaluated in
    /// parallel, a batch at a time; the result is the same as evaluating
    /// them one by one in order.
    #[allow(clippy::too_many_arguments)]
    fn find_nodes_that_pass_filters(
        &mut self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        num_all_nodes: usize,
        nominated: &NominatedPods,
        diagnosis: &mut Diagnosis,
    ) -> Result<Passed, ScheduleError> {
        let n = nodes.len();
        if n == 0 {
            return Ok((0, Vec::new()));
        }
        let want = self.num_to_find(fw, n);
        let start = self.next_start_node_index;
        let at = |i: usize| &nodes[(start + i) % n];
        if !fw.has_filter_plugins() {
            let take = want.min(n);
            self.next_start_node_index = (start + take) % num_all_nodes;
            return Ok((take, (0..take).collect()));
        }

        let parallelizer = fw.handle().parallelizer();
        // Each feasible node's position in the evaluation order.
        let mut offsets = Vec::with_capacity(want.min(n));
        // The batch's nodes without a kept verdict (see `super::batching`),
        // or whose kept verdict covers only the first plugins and passed,
        // and what judging them found.
        let rest_from = self.batch.rest_from();
        let mut todo: Vec<usize> = Vec::new();
        let mut fresh: Vec<Judged> = Vec::new();
        let mut processed = 0;
        let mut tally = FilterTally::new(fw, state);
        while processed < n && offsets.len() < want {
            // Evaluate at least what is still needed, in batches big enough
            // to keep the pool busy.
            let batch = (want - offsets.len()).max(64).min(n - processed);
            let base = processed;
            let position = move |i: usize| (start + base + i) % n;
            // Kept verdicts are read where they are: a node that did not
            // change costs a pointer comparison, not a judgement or a copy.
            todo.clear();
            todo.extend((0..batch).filter(|&i| {
                match self.batch.verdict(position(i), at(processed + i)) {
                    None => true,
                    Some(kept) => rest_from.is_some() && kept.is_success(),
                }
            }));
            fresh.clear();
            fresh.resize_with(todo.len(), || Judged::Whole(Status::success()));
            let kept = &self.batch;
            parallelizer.for_each_mut_measured(fw.filter_cost(), &mut fresh, |j, slot| {
                let i = todo[j];
                let node = at(processed + i);
                *slot = match rest_from {
                    None => Judged::Whole(
                        fw.run_filter_with_nominated_pods(state, pod, node, nominated),
                    ),
                    // Batching is off with nominated pods: each node's
                    // verdict is its plugins' alone.
                    Some(from) if kept.verdict(position(i), node).is_some() => {
                        Judged::Rest(fw.run_filter_range(state, pod, node, from..usize::MAX))
                    }
                    Some(from) => {
                        let first = fw.run_filter_range(state, pod, node, 0..from);
                        let rest = first
                            .is_success()
                            .then(|| fw.run_filter_range(state, pod, node, from..usize::MAX));
                        Judged::Prefix(first, rest)
                    }
                };
            });
            let mut judged = todo.iter().copied().zip(fresh.drain(..)).peekable();
            for i in 0..batch {
                let node = at(processed + i);
                let status = match judged.next_if(|(t, _)| *t == i) {
                    Some((_, Judged::Whole(status))) => {
                        if let Some(t) = tally.as_mut() {
                            t.node(0..usize::MAX, &status);
                        }
                        self.batch.keep_verdict(position(i), node, &status);
                        status
                    }
                    Some((_, Judged::Prefix(first, rest))) => {
                        if let (Some(t), Some(from)) = (tally.as_mut(), rest_from) {
                            t.node(0..from, &first);
                            if let Some(rest) = &rest {
                                t.node(from..usize::MAX, rest);
                            }
                        }
                        self.batch.keep_verdict(position(i), node, &first);
                        rest.unwrap_or(first)
                    }
                    Some((_, Judged::Rest(status))) => {
                        if let (Some(t), Some(from)) = (tally.as_mut(), rest_from) {
                            t.node(from..usize::MAX, &status);
                        }
                        self.batch.reused_verdicts += 1;
                        status
                    }
                    None => {
                        self.batch.reused_verdicts += 1;
                        match self.batch.verdict(position(i), node) {
                            Some(kept) if kept.is_success() => Status::success(),
                            Some(kept) => kept.clone(),
                            // Not reachable: kept verdicts only change in
                            // `keep_verdict`, for the nodes judged above.
                            None => fw.run_filter_with_nominated_pods(state, pod, node, nominated),
                        }
                    }
                };
                if status.is_success() {
                    offsets.push(processed + i);
                    if offsets.len() == want {
                        processed += i + 1;
                        break;
                    }
                } else if status.code() == Code::Error {
                    return Err(ScheduleError::Error(status));
                } else {
                    diagnosis.add_plugin_status(&status);
                    diagnosis.node_to_status.set(Arc::from(node.name()), status);
                }
                if i + 1 == batch {
                    processed += batch;
                }
            }
        }
        self.next_start_node_index = (start + processed) % num_all_nodes;
        if let Some(t) = tally {
            t.record(fw);
        }
        Ok((processed, offsets))
    }

    /// How many feasible nodes the search looks for among `n`: the
    /// sampling's count (percentageOfNodesToScore), or one when nothing
    /// scores.
    fn num_to_find(&self, fw: &Framework, n: usize) -> usize {
        if !fw.has_score_plugins() {
            // Without scoring, any feasible node will do.
            return 1;
        }
        let percentage = fw
            .percentage_of_nodes_to_score()
            .unwrap_or(self.percentage_of_nodes_to_score);
        num_feasible_nodes_to_find(percentage, n)
    }

    /// Scores the feasible nodes (at `positions` of the snapshot's list,
    /// when the search kept its verdicts); totals in the same order.
    async fn prioritize(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[Arc<NodeInfo>],
        positions: &[usize],
    ) -> Result<Vec<i64>, ScheduleError> {
        if !fw.has_score_plugins() {
            return Ok(vec![1; nodes.len()]);
        }
        let s = fw.run_pre_score(state, pod, nodes).await;
        evaluations::record_once_each(fw, state, ExtensionPoint::PreScore, &s);
        if !s.is_success() {
            return Err(ScheduleError::Error(s));
        }
        let batching =
            positions.len() == nodes.len() && self.batch.begin_score(fw, state, pod, snapshot);
        // The names of nodes at known positions come from the snapshot's
        // list of names, not from the nodes.
        let names: Option<Vec<&str>> = (positions.len() == nodes.len())
            .then(|| positions.iter().map(|&p| snapshot.name_at(p)).collect())
            .flatten();
        debug_assert!(
            names
                .iter()
                .flatten()
                .zip(nodes)
                .all(|(name, node)| *name == node.name()),
            "positions name the nodes"
        );
        let known = if batching {
            self.batch.known_scores(nodes, positions)
        } else {
            Vec::new()
        };
        let reused = known.iter().filter(|k| k.is_some()).count() as u64;
        let result = fw
            .run_score_reusing(state, pod, nodes, &known, names.as_deref())
            .await
            .map_err(ScheduleError::Error)?;
        drop(known);
        evaluations::record_score(fw, state, nodes.len() - reused as usize);
        if batching {
            self.batch.reused_scores += reused;
            self.batch
                .keep_scores(nodes, positions, &result.raw, result.plugins.len());
        }
        Ok(result.totals)
    }

    /// The index of a node with the top score; ties are broken uniformly at
    /// random (reservoir sampling).
    pub fn select_host(&mut self, totals: &[i64]) -> usize {
        let mut best = 0;
        let mut ties = 0u64;
        for (i, &t) in totals.iter().enumerate() {
            if i == 0 || t > totals[best] {
                best = i;
                ties = 1;
            } else if t == totals[best] {
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = i;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests;
