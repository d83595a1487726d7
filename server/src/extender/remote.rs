//! [`RemotePlugin`]: a remote extender as a framework plugin, at the points
//! its configuration lists.
//!
//! * Pods that request none of the extender's managed resources never reach
//!   it: PreFilter and PreScore answer `Skip`, Filter passes every node,
//!   Score gives 0, Reserve/Permit/PreBind succeed, Bind skips.
//! * Filter and Score are batched: one request per cycle for all nodes,
//!   which are named by the ids the node feed gave them. The framework may
//!   send Filter ahead, with the sampled candidates, before its own Filter
//!   plugins run ([`BatchFilter::start_filter_nodes`]), asking for the
//!   scores in the same round trip when the profile scores with this
//!   extender and does not run its PreScore.
//! * A failed call (no stream, timeout, shed, refused by the open circuit
//!   breaker, an error answer, an answer that does not fit) of an
//!   `ignorable` extender is skipped: Filter passes, Score gives 0,
//!   PreFilter/PreScore skip, Reserve/PreBind succeed, Permit allows, Bind
//!   skips (the next binder binds). Of any other extender it fails the
//!   attempt with an error naming the extender, the point and what was
//!   wrong.
//! * Reserve sends a reservation id (`<pod uid>/<cycle>`); Unreserve sends
//!   the same id, at least once, also when Reserve itself failed.
//! * The group points (PlacementFeasible, PodGroupPostFilter, GroupPermit)
//!   are in [`group`](self::group): a group cycle is a cycle whose subject
//!   is the PodGroup and its pods.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_proto::extender::v1::{self as pb, request};

use super::connection::{CallError, CallRequest, Connection, Reply, Subject};
use crate::cache::NodeInfo;
use crate::framework::{
    BatchFilter, BatchFilterAnswer, BatchFilterCall, BatchScore, BindPlugin, Code, CycleState,
    CycleToken, ExtensionPoint, FilterPlugin, GroupPermitPlugin, KnownVerdicts, MAX_NODE_SCORE,
    MIN_NODE_SCORE, NodeToStatus, NodeWindow, PermitPlugin, PlacementFeasiblePlugin, Plugin,
    PluginFailure, PodGroupCycleInfo, PodGroupPostFilterPlugin, PostBindPlugin, PostFilterPlugin,
    PostFilterResult, PreBindPlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    PreemptionCandidate, PreemptionVerdict, ProfileFilters, ReservePlugin, ScorePlugin, Status,
};
use crate::model::PodInfo;

/// A remote extender serving the points its configuration lists.
pub struct RemotePlugin {
    conn: Arc<Connection>,
}

impl std::fmt::Debug for RemotePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RemotePlugin")
            .field(&self.conn.name())
            .finish()
    }
}

fn code_of(c: i32) -> Code {
    match pb::Code::try_from(c) {
        Ok(pb::Code::Success) => Code::Success,
        Ok(pb::Code::Error) => Code::Error,
        Ok(pb::Code::Unschedulable) => Code::Unschedulable,
        Ok(pb::Code::UnschedulableAndUnresolvable) => Code::UnschedulableAndUnresolvable,
        Ok(pb::Code::Wait) => Code::Wait,
        Ok(pb::Code::Skip) => Code::Skip,
        Err(_) => Code::Error,
    }
}

fn proto_code(c: Code) -> pb::Code {
    match c {
        Code::Success => pb::Code::Success,
        Code::Unschedulable | Code::Pending => pb::Code::Unschedulable,
        Code::UnschedulableAndUnresolvable => pb::Code::UnschedulableAndUnresolvable,
        Code::Wait => pb::Code::Wait,
        Code::Skip => pb::Code::Skip,
        Code::Error => pb::Code::Error,
    }
}

/// The reservation id of a pod's cycle.
pub fn reservation_id(pod: &PodInfo, state: &CycleState) -> String {
    format!("{}/{}", pod.uid, state.token().id())
}

/// An answer of another kind than its request (the connection checks
/// answers against requests, so this cannot come from an extender).
fn mismatch(r: &Reply) -> CallError {
    CallError::Malformed(format!("an answer of another kind than asked: {r:?}"))
}

fn node_ids<'a>(nodes: impl Iterator<Item = &'a Arc<NodeInfo>>) -> Vec<u32> {
    nodes.map(|n| n.node().map_or(0, |s| s.feed_id)).collect()
}

/// How an ignorable extender's failure is logged and counted, and how any
/// other's fails the point.
/// Either way the failure is noted in the cycle's token, for dry runs and
/// simulations to report.
#[derive(Clone)]
struct Failure {
    conn: Arc<Connection>,
    namespace: Arc<str>,
    name: Arc<str>,
    token: Arc<CycleToken>,
}

impl Failure {
    fn new(conn: &Arc<Connection>, state: &CycleState, pod: &PodInfo) -> Self {
        Self {
            conn: conn.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            token: state.token().clone(),
        }
    }

    /// For a group cycle: logs name the PodGroup.
    fn for_group(conn: &Arc<Connection>, state: &CycleState, group: &PodGroupCycleInfo) -> Self {
        Self {
            conn: conn.clone(),
            namespace: group.group.key.namespace.clone(),
            name: group.group.key.name.clone(),
            token: state.token().clone(),
        }
    }

    /// `Ok(fallback)` when the extender is ignorable (logged and counted),
    /// else an error naming the extender, the point and what was wrong.
    fn handle<T>(&self, point: &'static str, e: CallError, fallback: T) -> Result<T, Status> {
        self.handle_node(point, e, fallback, None)
    }

    /// [`Failure::handle`] for a failure about one node of a batch.
    fn handle_node<T>(
        &self,
        point: &'static str,
        e: CallError,
        fallback: T,
        node_id: Option<u32>,
    ) -> Result<T, Status> {
        let name = self.conn.name();
        let ignored = self.conn.config().ignorable;
        self.token.note_failure(PluginFailure {
            plugin: name,
            point,
            reason: e.to_string(),
            ignored,
            node_id,
        });
        let pod = format_args!("{}/{}", self.namespace, self.name);
        // While the extender is down its outage reporter speaks (one line
        // down, summaries, one line back): each call is DEBUG and counted,
        // as skipped when it was not even tried.
        let outage = self.conn.outage();
        let down = outage.is_down();
        if down {
            match e {
                CallError::CircuitOpen(_) | CallError::NotConnected(_) => outage.skipped(),
                _ => outage.count_failed(),
            }
        }
        if ignored {
            self.conn.note_skipped();
            if down {
                tracing::debug!(extender = name, point, pod = %pod, error = %e, "ignorable extender skipped");
            } else {
                tracing::warn!(extender = name, point, pod = %pod, error = %e, "ignorable extender skipped");
            }
            Ok(fallback)
        } else {
            if down {
                tracing::debug!(extender = name, point, pod = %pod, error = %e, "extender failed");
            } else {
                tracing::warn!(extender = name, point, pod = %pod, error = %e, "extender failed");
            }
            Err(Status::error(format!(
                "extender {name:?} failed at {point}: {e}"
            )))
        }
    }

    fn status(&self, point: &'static str, e: CallError, fallback: Status) -> Status {
        self.handle(point, e, fallback).unwrap_or_else(|s| s)
    }
}

impl RemotePlugin {
    /// The plugin for `conn`.
    pub fn new(conn: Arc<Connection>) -> Self {
        Self { conn }
    }

    fn serves(&self, p: ExtensionPoint) -> bool {
        self.conn.config().points.contains(&p)
    }

    /// Whether the pod requests (or limits) a managed resource; with none
    /// configured, every pod interests the extender.
    pub fn interested(&self, pod: &PodInfo) -> bool {
        super::interest::requests_managed(pod, &self.conn.config().managed_resources)
    }

    fn call(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        kind: request::Kind,
    ) -> impl std::future::Future<Output = Result<Reply, CallError>> + Send + use<> {
        self.conn.call(CallRequest {
            cycle: state.token(),
            subject: Subject::Pod(pod),
            kind,
        })
    }

    fn failure(&self, state: &CycleState, pod: &PodInfo) -> Failure {
        Failure::new(&self.conn, state, pod)
    }

    /// A rejection's status; reasons default to one naming the extender.
    fn rejection(&self, point: &str, s: pb::Status) -> Status {
        let code = code_of(s.code);
        let reasons = if s.reasons.is_empty() {
            vec![format!(
                "rejected by extender {} at {point} (no reason given)",
                self.conn.name()
            )]
        } else {
            s.reasons
        };
        Status::with_reasons(code, reasons.into_iter().map(Into::into))
    }

    /// A checked status (success, skip, a rejection) as the framework's.
    fn status_of(&self, point: &str, s: pb::Status) -> Status {
        match code_of(s.code) {
            Code::Success => Status::success(),
            Code::Skip => Status::skip(),
            _ => self.rejection(point, s),
        }
    }

    /// Filter verdicts of the nodes that did not pass, by position in the
    /// request, ascending. An error for a node fails the attempt if that
    /// node is still a candidate (the framework decides), naming the
    /// extender; an ignorable extender's error for a node passes it.
    fn verdicts(
        &self,
        point: &'static str,
        mut rejected: Vec<(usize, pb::NodeStatus)>,
        failure: &Failure,
    ) -> Vec<(usize, Status)> {
        rejected.sort_unstable_by_key(|(i, _)| *i);
        let mut out = Vec::with_capacity(rejected.len());
        for (i, r) in rejected {
            let code = code_of(r.code);
            if code == Code::Error {
                let e = CallError::remote(format!(
                    "for node id {}: {}",
                    r.node_id,
                    r.reasons.join(", ")
                ));
                let s = failure
                    .handle_node(point, e, Status::success(), Some(r.node_id))
                    .unwrap_or_else(|s| s);
                if !s.is_success() {
                    out.push((i, s));
                }
                continue;
            }
            let reasons = if r.reasons.is_empty() {
                vec![format!("node(s) didn't pass extender {}", self.conn.name())]
            } else {
                r.reasons
            };
            out.push((
                i,
                Status::with_reasons(code, reasons.into_iter().map(Into::into)),
            ));
        }
        out
    }

    /// Scores as the framework weighs them, from the checked raw scores of
    /// `nodes` (in range for the declared normalization).
    async fn normalized(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        mut scores: Vec<i64>,
    ) -> Result<Vec<i64>, CallError> {
        match self.conn.score_normalization() {
            pb::ScoreNormalization::Scale => {
                let max = scores.iter().copied().max().unwrap_or(0);
                if max > 0 {
                    for v in &mut scores {
                        *v = ((i128::from(*v) * i128::from(MAX_NODE_SCORE)) / i128::from(max))
                            as i64;
                    }
                }
                Ok(scores)
            }
            pb::ScoreNormalization::Extender => {
                let r = self
                    .call(
                        state,
                        pod,
                        request::Kind::NormalizeScore(pb::NormalizeScoreRequest {
                            node_ids: node_ids(nodes.iter()),
                            scores,
                        }),
                    )
                    .await?;
                match r {
                    Reply::NormalizeScore(v) => Ok(v),
                    other => Err(mismatch(&other)),
                }
            }
            pb::ScoreNormalization::None => Ok(scores),
        }
    }
}

impl Plugin for RemotePlugin {
    fn name(&self) -> &'static str {
        self.conn.name()
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        self.serves(ExtensionPoint::PreFilter).then_some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        self.serves(ExtensionPoint::Filter).then_some(self)
    }
    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        self.serves(ExtensionPoint::PostFilter).then_some(self)
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        self.serves(ExtensionPoint::PreScore).then_some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        self.serves(ExtensionPoint::Score).then_some(self)
    }
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        self.serves(ExtensionPoint::Reserve).then_some(self)
    }
    fn as_permit(self: Arc<Self>) -> Option<Arc<dyn PermitPlugin>> {
        self.serves(ExtensionPoint::Permit).then_some(self)
    }
    fn as_pre_bind(self: Arc<Self>) -> Option<Arc<dyn PreBindPlugin>> {
        self.serves(ExtensionPoint::PreBind).then_some(self)
    }
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        self.serves(ExtensionPoint::Bind).then_some(self)
    }
    fn as_post_bind(self: Arc<Self>) -> Option<Arc<dyn PostBindPlugin>> {
        self.serves(ExtensionPoint::PostBind).then_some(self)
    }
    fn as_placement_feasible(self: Arc<Self>) -> Option<Arc<dyn PlacementFeasiblePlugin>> {
        self.serves(ExtensionPoint::PlacementFeasible)
            .then_some(self)
    }
    fn as_pod_group_post_filter(self: Arc<Self>) -> Option<Arc<dyn PodGroupPostFilterPlugin>> {
        self.serves(ExtensionPoint::PodGroupPostFilter)
            .then_some(self)
    }
    fn as_group_permit(self: Arc<Self>) -> Option<Arc<dyn GroupPermitPlugin>> {
        self.serves(ExtensionPoint::GroupPermit).then_some(self)
    }
}

#[async_trait]
impl PreFilterPlugin for RemotePlugin {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if !self.interested(pod) {
            return (None, Status::skip());
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::PreFilter(pb::PreFilterRequest {}),
            )
            .await;
        match r.and_then(|r| match r {
            Reply::PreFilter(s, names) => Ok((s, names)),
            other => Err(mismatch(&other)),
        }) {
            Ok((s, names)) => {
                let result = names.map(|n| PreFilterResult {
                    node_names: Some(n.into_iter().map(Arc::from).collect()),
                });
                (result, self.status_of("PreFilter", s))
            }
            Err(e) => (
                None,
                self.failure(state, pod)
                    .status("PreFilter", e, Status::success()),
            ),
        }
    }
}

impl FilterPlugin for RemotePlugin {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        // Never called: the runtime uses the batch below.
        Status::success()
    }

    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        Some(self)
    }
}

#[async_trait]
impl BatchFilter for RemotePlugin {
    async fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, Status> {
        match self.start_filter_nodes(state, pod, NodeWindow::of(nodes), false) {
            Some(call) => call.await.map(BatchFilterAnswer::into_statuses),
            None => Ok(vec![Status::success(); nodes.len()]),
        }
    }

    fn start_filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: NodeWindow<'_>,
        score: bool,
    ) -> Option<BatchFilterCall> {
        let n = nodes.len();
        let pass = move || BatchFilterAnswer {
            nodes: n,
            rejected: Vec::new(),
            scores: None,
        };
        if !self.interested(pod) {
            return Some(Box::pin(std::future::ready(Ok(pass()))));
        }
        let call = self.call(
            state,
            pod,
            request::Kind::Filter(pb::FilterRequest {
                node_ids: node_ids(nodes.iter()),
                score,
            }),
        );
        let failure = self.failure(state, pod);
        let this = RemotePlugin::new(self.conn.clone());
        Some(Box::pin(async move {
            match call.await {
                Ok(Reply::Filter(rejected, scores)) => Ok(BatchFilterAnswer {
                    nodes: n,
                    rejected: this.verdicts("Filter", rejected, &failure),
                    scores,
                }),
                Ok(other) => failure.handle("Filter", mismatch(&other), pass()),
                Err(e) => failure.handle("Filter", e, pass()),
            }
        }))
    }

    /// Preemption's what-if, as the extender's Hello allows (see
    /// "Preemption" in the protocol's header): a PreemptionFilterRequest
    /// with every candidate and the pods preemption may evict there; for an
    /// extender whose Filter ignores the pods, the cycle's verdicts (a plain
    /// FilterRequest about the candidates it did not judge); for any other
    /// (written before the what-if), a plain FilterRequest about the
    /// candidates as they are, which can only refuse one.
    async fn filter_preemption(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        candidates: &[PreemptionCandidate<'_>],
        known: &KnownVerdicts<'_>,
    ) -> Result<Vec<PreemptionVerdict>, Status> {
        let nothing = || PreemptionVerdict::Needs(Vec::new());
        if !self.interested(pod) {
            return Ok(vec![nothing(); candidates.len()]);
        }
        let hello = self.conn.hello();
        if hello.as_ref().is_some_and(|h| h.filter_ignores_pods) {
            let mut out: Vec<Option<PreemptionVerdict>> = candidates
                .iter()
                .map(|c| {
                    known.get(c.node).map(|s| {
                        if s.is_success() {
                            nothing()
                        } else {
                            PreemptionVerdict::Rejected(s)
                        }
                    })
                })
                .collect();
            let unknown: Vec<usize> = (0..out.len()).filter(|k| out[*k].is_none()).collect();
            if !unknown.is_empty() {
                let nodes: Vec<Arc<NodeInfo>> = unknown
                    .iter()
                    .map(|k| candidates[*k].node.clone())
                    .collect();
                let statuses = self.filter_nodes(state, pod, &nodes).await?;
                for (k, s) in unknown.into_iter().zip(statuses) {
                    out[k] = Some(if s.is_success() {
                        nothing()
                    } else {
                        PreemptionVerdict::Rejected(s)
                    });
                }
            }
            return Ok(out.into_iter().map(|v| v.unwrap_or_else(nothing)).collect());
        }
        if !hello.is_some_and(|h| h.preemption_filter) {
            let nodes: Vec<Arc<NodeInfo>> = candidates.iter().map(|c| c.node.clone()).collect();
            let statuses = self.filter_nodes(state, pod, &nodes).await?;
            return Ok(statuses
                .into_iter()
                .map(|s| {
                    if s.is_success() {
                        nothing()
                    } else {
                        PreemptionVerdict::Rejected(s)
                    }
                })
                .collect());
        }
        let request = pb::PreemptionFilterRequest {
            candidates: candidates
                .iter()
                .map(|c| {
                    let ids = self.conn.pod_and_node_ids(c.pods);
                    pb::PreemptionCandidate {
                        node_id: c.node.node().map_or(0, |n| n.feed_id),
                        pods: c
                            .pods
                            .iter()
                            .zip(ids)
                            .zip(c.victims)
                            .map(|((p, (id, node_id)), victim)| pb::CandidatePod {
                                id,
                                uid: p.uid.to_string(),
                                namespace: p.namespace.to_string(),
                                name: p.name.to_string(),
                                victim: *victim,
                                node_id,
                            })
                            .collect(),
                    }
                })
                .collect(),
            dry_run: state.dry_run,
        };
        let failure = self.failure(state, pod);
        let point = "PreemptionFilter";
        let pass = || vec![nothing(); candidates.len()];
        match self
            .call(state, pod, request::Kind::PreemptionFilter(request))
            .await
        {
            Ok(Reply::PreemptionFilter(rejected, needed)) => {
                let mut out = vec![PreemptionVerdict::Victims; candidates.len()];
                for n in needed {
                    if tracing::enabled!(tracing::Level::DEBUG) {
                        tracing::debug!(
                            extender = self.conn.name(),
                            pod = %pod.key(),
                            node = candidates[n.candidate].node.name(),
                            needed = n.pods.len(),
                            reasons = %n.reasons.join(", "),
                            "extender needs other pods evicted than the victims"
                        );
                    }
                    out[n.candidate] = PreemptionVerdict::Needs(n.pods);
                }
                for (k, s) in self.verdicts(point, rejected, &failure) {
                    out[k] = PreemptionVerdict::Rejected(s);
                }
                Ok(out)
            }
            Ok(other) => failure.handle(point, mismatch(&other), pass()),
            Err(e) => failure.handle(point, e, pass()),
        }
    }

    /// An extender whose Filter ignores the pods (its Hello says so) is not
    /// asked at preemption: the cycle's verdicts are read instead.
    fn reuses_cycle_verdicts(&self) -> bool {
        self.conn.hello().is_some_and(|h| h.filter_ignores_pods)
    }

    /// An extender's Filter may be asked for the next pod before its cycle
    /// starts unless it serves a point of the scheduling cycle that the
    /// earlier pod reaches after Filter (PostFilter, Reserve, Permit) or
    /// one that comes before Filter in the next pod's (PreFilter, and
    /// PreScore with it): an extender serving those sees them in cycle
    /// order, one pod after the other, as kube-scheduler would call it.
    fn looks_ahead(&self) -> bool {
        use ExtensionPoint as P;
        !self.conn.config().points.iter().any(|p| {
            matches!(
                p,
                P::PreFilter
                    | P::PostFilter
                    | P::PreScore
                    | P::Reserve
                    | P::Permit
                    | P::PlacementFeasible
                    | P::PodGroupPostFilter
                    | P::GroupPermit
            )
        })
    }
}

#[async_trait]
impl PostFilterPlugin for RemotePlugin {
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        _: &dyn ProfileFilters,
    ) -> (Option<PostFilterResult>, Status) {
        let declined =
            || Status::unschedulable(format!("extender {} cannot help", self.conn.name()));
        if !self.interested(pod) {
            return (None, declined());
        }
        let node_statuses = filtered
            .iter()
            .filter_map(|(node, s)| {
                Some(pb::NodeStatus {
                    node_id: self.conn.node_id(node)?,
                    code: proto_code(s.code()) as i32,
                    reasons: s.reasons().iter().map(|r| r.to_string()).collect(),
                    plugin: s.plugin().unwrap_or_default().to_string(),
                })
            })
            .collect();
        let r = self
            .call(
                state,
                pod,
                request::Kind::PostFilter(pb::PostFilterRequest {
                    node_statuses,
                    dry_run: state.dry_run,
                }),
            )
            .await;
        match r {
            Ok(Reply::PostFilter(p)) => {
                let s = p.status.unwrap_or_default();
                if s.code == pb::Code::Success as i32 {
                    return (
                        Some(PostFilterResult::nominate(Some(Arc::from(
                            p.nominated_node,
                        )))),
                        Status::success(),
                    );
                }
                (None, self.rejection("PostFilter", s))
            }
            Ok(other) => (
                None,
                self.failure(state, pod)
                    .status("PostFilter", mismatch(&other), declined()),
            ),
            Err(e) => (
                None,
                self.failure(state, pod).status("PostFilter", e, declined()),
            ),
        }
    }
}

#[async_trait]
impl PreScorePlugin for RemotePlugin {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        if !self.interested(pod) {
            return Status::skip();
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::PreScore(pb::PreScoreRequest {
                    node_ids: node_ids(nodes.iter()),
                }),
            )
            .await;
        match r {
            Ok(Reply::PreScore(s)) => self.status_of("PreScore", s),
            Ok(other) => {
                self.failure(state, pod)
                    .status("PreScore", mismatch(&other), Status::skip())
            }
            Err(e) => self
                .failure(state, pod)
                .status("PreScore", e, Status::skip()),
        }
    }
}

impl ScorePlugin for RemotePlugin {
    fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
        // Never called: the runtime uses the batch below.
        Ok(0)
    }

    fn as_batch(&self) -> Option<&dyn BatchScore> {
        Some(self)
    }
}

#[async_trait]
impl BatchScore for RemotePlugin {
    async fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status> {
        if !self.interested(pod) {
            return Ok(vec![0; nodes.len()]);
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::Score(pb::ScoreRequest {
                    node_ids: node_ids(nodes.iter()),
                }),
            )
            .await;
        let r = match r {
            Ok(Reply::Score(v)) => self.normalized(state, pod, nodes, v).await,
            Ok(other) => Err(mismatch(&other)),
            Err(e) => Err(e),
        };
        r.or_else(|e| {
            self.failure(state, pod)
                .handle("Score", e, vec![0; nodes.len()])
        })
    }

    async fn score_prefetched(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        raw: Vec<i64>,
    ) -> Result<Vec<i64>, Status> {
        if !self.interested(pod) {
            return Ok(vec![0; nodes.len()]);
        }
        // The scores came with the Filter answer for more nodes than these;
        // only these nodes' scores must be in range.
        let (ok, range): (fn(i64) -> bool, &str) = match self.conn.score_normalization() {
            pb::ScoreNormalization::Scale => (|v| v >= 0, "0 or more (SCORE_NORMALIZATION_SCALE)"),
            pb::ScoreNormalization::Extender => (|_| true, ""),
            pb::ScoreNormalization::None => (
                |v| (MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&v),
                "[0, 100] (SCORE_NORMALIZATION_NONE)",
            ),
        };
        let r = match raw.iter().find(|v| !ok(**v)) {
            Some(v) => {
                let why = format!("score {v} (in the Filter answer), outside {range}");
                self.conn.report_malformed("Filter", &why);
                Err(CallError::Malformed(why))
            }
            None => self.normalized(state, pod, nodes, raw).await,
        };
        r.or_else(|e| {
            self.failure(state, pod)
                .handle("Score", e, vec![0; nodes.len()])
        })
    }
}

#[async_trait]
impl ReservePlugin for RemotePlugin {
    async fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::success();
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::Reserve(pb::ReserveRequest {
                    node: node.to_string(),
                    reservation_id: reservation_id(pod, state),
                }),
            )
            .await;
        match r {
            Ok(Reply::Reserve(s)) => self.status_of("Reserve", s),
            Ok(other) => {
                self.failure(state, pod)
                    .status("Reserve", mismatch(&other), Status::success())
            }
            Err(e) => self
                .failure(state, pod)
                .status("Reserve", e, Status::success()),
        }
    }

    async fn unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        if !self.interested(pod) {
            return;
        }
        self.conn
            .unreserve(
                state.token().id(),
                pb::UnreserveRequest {
                    node: node.to_string(),
                    reservation_id: reservation_id(pod, state),
                    namespace: pod.namespace.to_string(),
                    name: pod.name.to_string(),
                    uid: pod.uid.to_string(),
                },
            )
            .await;
    }
}

#[async_trait]
impl PermitPlugin for RemotePlugin {
    async fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration) {
        if !self.interested(pod) {
            return (Status::success(), Duration::ZERO);
        }
        let reservation = reservation_id(pod, state);
        let r = self
            .call(
                state,
                pod,
                request::Kind::Permit(pb::PermitRequest {
                    node: node.to_string(),
                    reservation_id: reservation.clone(),
                }),
            )
            .await;
        let (s, timeout) = match r {
            Ok(Reply::Permit(s, timeout)) => (s, timeout),
            Ok(other) => {
                let s =
                    self.failure(state, pod)
                        .status("Permit", mismatch(&other), Status::success());
                return (s, Duration::ZERO);
            }
            Err(e) => {
                let s = self
                    .failure(state, pod)
                    .status("Permit", e, Status::success());
                return (s, Duration::ZERO);
            }
        };
        if s.code == pb::Code::Wait as i32 {
            // The pod's waiting registration ends with its cycle.
            let conn = self.conn.clone();
            let uid = pod.uid.clone();
            state.token().on_end(move |_| {
                conn.forget_waiting(&reservation);
                conn.waiting_pods().forget_early(&uid);
            });
            return (
                Status::new(
                    Code::Wait,
                    format!("waiting for extender {}", self.conn.name()),
                ),
                timeout,
            );
        }
        (self.status_of("Permit", s), Duration::ZERO)
    }
}

#[async_trait]
impl PreBindPlugin for RemotePlugin {
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::success();
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::PreBind(pb::PreBindRequest {
                    node: node.to_string(),
                }),
            )
            .await;
        match r {
            Ok(Reply::PreBind(s)) => self.status_of("PreBind", s),
            Ok(other) => {
                self.failure(state, pod)
                    .status("PreBind", mismatch(&other), Status::success())
            }
            Err(e) => self
                .failure(state, pod)
                .status("PreBind", e, Status::success()),
        }
    }
}

#[async_trait]
impl BindPlugin for RemotePlugin {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::skip();
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::Bind(pb::BindRequest {
                    node: node.to_string(),
                }),
            )
            .await;
        match r {
            Ok(Reply::Bind(s)) => self.status_of("Bind", s),
            Ok(other) => self
                .failure(state, pod)
                .status("Bind", mismatch(&other), Status::skip()),
            Err(e) => self.failure(state, pod).status("Bind", e, Status::skip()),
        }
    }
}

#[async_trait]
impl PostBindPlugin for RemotePlugin {
    async fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        if !self.interested(pod) {
            return;
        }
        let r = self
            .call(
                state,
                pod,
                request::Kind::PostBind(pb::PostBindRequest {
                    node: node.to_string(),
                }),
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(extender = self.conn.name(), pod = %pod.key(), error = %e, "PostBind failed");
        }
    }
}

mod group;
