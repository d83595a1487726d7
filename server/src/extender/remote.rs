//! [`RemotePlugin`]: a remote extender as a framework plugin, at the points
//! its configuration lists.
//!
//! * Pods that request none of the extender's managed resources never reach
//!   it: PreFilter and PreScore answer `Skip`, Filter passes every node,
//!   Score gives 0, Reserve/Permit/PreBind succeed, Bind skips.
//! * Filter and Score are batched: one request per cycle for all nodes.
//! * A failed call (no stream, timeout, shed, an error answer, an answer
//!   that does not fit) of an `ignorable` extender is skipped: Filter passes,
//!   Score gives 0, PreFilter/PreScore skip, Reserve/PreBind succeed, Permit
//!   allows, Bind skips (the next binder binds). Of any other extender it
//!   fails the attempt with an error naming the extender.
//! * Reserve sends a reservation id (`<pod uid>/<cycle>`); Unreserve sends
//!   the same id, at least once, also when Reserve itself failed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_proto::extender::v1::{self as pb, request, response};

use super::connection::{CallError, CallRequest, Connection};
use crate::cache::NodeInfo;
use crate::framework::{
    BatchFilter, BatchScore, BindPlugin, Code, CycleState, ExtensionPoint, FilterPlugin, Framework,
    MAX_NODE_SCORE, MIN_NODE_SCORE, NodeToStatus, PermitPlugin, Plugin, PostBindPlugin,
    PostFilterPlugin, PostFilterResult, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin, Status,
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

fn status_of(s: Option<pb::Status>) -> Status {
    let Some(s) = s else {
        return Status::success();
    };
    let code = code_of(s.code);
    if s.reasons.is_empty() {
        Status::code_only(code)
    } else {
        Status::with_reasons(code, s.reasons.into_iter().map(Into::into))
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

fn malformed<T>(what: impl Into<String>) -> Result<T, CallError> {
    Err(CallError::Malformed(what.into()))
}

/// The reservation id of a pod's cycle.
pub fn reservation_id(pod: &PodInfo, state: &CycleState) -> String {
    format!("{}/{}", pod.uid, state.token().id())
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
        super::requests_managed(pod, &self.conn.config().managed_resources)
    }

    async fn call(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        kind: request::Kind,
    ) -> Result<response::Result, CallError> {
        self.conn
            .call(CallRequest {
                cycle: state.token().clone(),
                pod: Arc::new(pod.clone()),
                kind,
            })
            .await
    }

    /// A failed call: `Ok(fallback)` when the extender is ignorable (logged
    /// and counted), else an error naming the extender.
    fn failed<T>(
        &self,
        point: &str,
        pod: &PodInfo,
        e: CallError,
        fallback: T,
    ) -> Result<T, Status> {
        let name = self.conn.name();
        if self.conn.config().ignorable {
            self.conn.note_skipped();
            tracing::warn!(extender = name, point, pod = %pod.key(), error = %e, "ignorable extender skipped");
            Ok(fallback)
        } else {
            tracing::warn!(extender = name, point, pod = %pod.key(), error = %e, "extender failed");
            Err(Status::error(format!(
                "extender {name:?} failed at {point}: {e}"
            )))
        }
    }

    fn status_or_fail(
        &self,
        point: &str,
        pod: &PodInfo,
        r: Result<Status, CallError>,
        fallback: Status,
    ) -> Status {
        match r {
            Ok(s) if s.is_error() => {
                let e = CallError::Remote(s.message());
                self.failed(point, pod, e, fallback).unwrap_or_else(|s| s)
            }
            Ok(s) => s,
            Err(e) => self.failed(point, pod, e, fallback).unwrap_or_else(|s| s),
        }
    }

    async fn filter_remote(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, CallError> {
        let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        let r = self
            .call(
                state,
                pod,
                request::Kind::Filter(pb::FilterRequest { nodes: names }),
            )
            .await?;
        let response::Result::Filter(f) = r else {
            return malformed("not a Filter answer");
        };
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name(), i))
            .collect();
        let mut out = vec![Status::success(); nodes.len()];
        for rej in f.rejected {
            let Some(&i) = index.get(rej.node.as_str()) else {
                return malformed(format!(
                    "a verdict for node {:?}, which was not asked about",
                    rej.node
                ));
            };
            let code = code_of(rej.code);
            let status = match code {
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    let reasons = if rej.reasons.is_empty() {
                        vec![format!("node(s) didn't pass extender {}", self.conn.name())]
                    } else {
                        rej.reasons
                    };
                    Status::with_reasons(code, reasons.into_iter().map(Into::into))
                }
                Code::Error => return Err(CallError::Remote(rej.reasons.join(", "))),
                other => {
                    return malformed(format!(
                        "a rejection with code {other:?} for node {:?}",
                        rej.node
                    ));
                }
            };
            out[i] = status;
        }
        Ok(out)
    }

    async fn score_remote(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, CallError> {
        let names: Vec<String> = nodes.iter().map(|n| n.name().to_string()).collect();
        let r = self
            .call(
                state,
                pod,
                request::Kind::Score(pb::ScoreRequest {
                    nodes: names.clone(),
                }),
            )
            .await?;
        let response::Result::Score(s) = r else {
            return malformed("not a Score answer");
        };
        if s.scores.len() != nodes.len() {
            return malformed(format!(
                "{} scores for {} nodes",
                s.scores.len(),
                nodes.len()
            ));
        }
        let mode = self
            .conn
            .hello()
            .map_or(pb::ScoreNormalization::None as i32, |h| {
                h.score_normalization
            });
        let mut scores = s.scores;
        match pb::ScoreNormalization::try_from(mode) {
            Ok(pb::ScoreNormalization::Scale) => {
                if scores.iter().any(|v| *v < 0) {
                    return malformed("a negative score");
                }
                let max = scores.iter().copied().max().unwrap_or(0);
                if max > 0 {
                    for v in &mut scores {
                        *v = ((i128::from(*v) * i128::from(MAX_NODE_SCORE)) / i128::from(max))
                            as i64;
                    }
                }
            }
            Ok(pb::ScoreNormalization::Extender) => {
                let r = self
                    .call(
                        state,
                        pod,
                        request::Kind::NormalizeScore(pb::NormalizeScoreRequest {
                            nodes: names,
                            scores,
                        }),
                    )
                    .await?;
                let response::Result::NormalizeScore(n) = r else {
                    return malformed("not a NormalizeScore answer");
                };
                if n.scores.len() != nodes.len() {
                    return malformed(format!(
                        "{} normalized scores for {} nodes",
                        n.scores.len(),
                        nodes.len()
                    ));
                }
                scores = n.scores;
            }
            _ => {}
        }
        if let Some(v) = scores
            .iter()
            .find(|v| !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(*v))
        {
            return malformed(format!(
                "score {v} outside [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}]"
            ));
        }
        Ok(scores)
    }

    async fn simple(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        kind: request::Kind,
    ) -> Result<Status, CallError> {
        // The answer must be of the request's kind: a PostBind answer to a
        // Reserve is nonsense, not a success.
        use request::Kind as K;
        use response::Result as R;
        let asked = match &kind {
            K::PreScore(_) => "PreScore",
            K::Reserve(_) => "Reserve",
            K::PreBind(_) => "PreBind",
            K::Bind(_) => "Bind",
            K::PostBind(_) => "PostBind",
            _ => "",
        };
        let (answered, status) = match self.call(state, pod, kind).await? {
            R::PreScore(p) => ("PreScore", status_of(p.status)),
            R::Reserve(p) => ("Reserve", status_of(p.status)),
            R::PreBind(p) => ("PreBind", status_of(p.status)),
            R::Bind(p) => ("Bind", status_of(p.status)),
            R::PostBind(_) => ("PostBind", Status::success()),
            _ => ("", Status::success()),
        };
        if answered.is_empty() || answered != asked {
            return malformed("an answer of the wrong kind");
        }
        Ok(status)
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
            .await
            .and_then(|r| match r {
                response::Result::PreFilter(p) => Ok(p),
                _ => malformed("not a PreFilter answer"),
            });
        match r {
            Ok(p) => {
                let status = status_of(p.status);
                if status.is_error() {
                    let e = CallError::Remote(status.message());
                    return (
                        None,
                        self.failed("PreFilter", pod, e, Status::success())
                            .unwrap_or_else(|s| s),
                    );
                }
                if status.is_wait() {
                    let e = CallError::Malformed("Wait at PreFilter".into());
                    return (
                        None,
                        self.failed("PreFilter", pod, e, Status::success())
                            .unwrap_or_else(|s| s),
                    );
                }
                let result = p.node_names.map(|n| PreFilterResult {
                    node_names: Some(n.names.into_iter().map(Arc::from).collect()),
                });
                (result, status)
            }
            Err(e) => (
                None,
                self.failed("PreFilter", pod, e, Status::success())
                    .unwrap_or_else(|s| s),
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
        let pass = || vec![Status::success(); nodes.len()];
        if !self.interested(pod) {
            return Ok(pass());
        }
        match self.filter_remote(state, pod, nodes).await {
            Ok(v) => Ok(v),
            Err(e) => self.failed("Filter", pod, e, pass()),
        }
    }
}

#[async_trait]
impl PostFilterPlugin for RemotePlugin {
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        _: &Framework,
    ) -> (Option<PostFilterResult>, Status) {
        let declined =
            || Status::unschedulable(format!("extender {} cannot help", self.conn.name()));
        if !self.interested(pod) {
            return (None, declined());
        }
        let node_statuses = filtered
            .iter()
            .map(|(node, s)| pb::NodeStatus {
                node: node.to_string(),
                code: proto_code(s.code()) as i32,
                reasons: s.reasons().iter().map(|r| r.to_string()).collect(),
                plugin: s.plugin().unwrap_or_default().to_string(),
            })
            .collect();
        let r = self
            .call(
                state,
                pod,
                request::Kind::PostFilter(pb::PostFilterRequest { node_statuses }),
            )
            .await
            .and_then(|r| match r {
                response::Result::PostFilter(p) => Ok(p),
                _ => malformed("not a PostFilter answer"),
            });
        match r {
            Ok(p) => {
                let status = status_of(p.status);
                if status.is_success() && !p.nominated_node.is_empty() {
                    return (
                        Some(PostFilterResult::nominate(Some(Arc::from(
                            p.nominated_node,
                        )))),
                        status,
                    );
                }
                if status.is_success() {
                    return (None, declined());
                }
                (
                    None,
                    self.status_or_fail("PostFilter", pod, Ok(status), declined()),
                )
            }
            Err(e) => (
                None,
                self.failed("PostFilter", pod, e, declined())
                    .unwrap_or_else(|s| s),
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
        let names = nodes.iter().map(|n| n.name().to_string()).collect();
        let r = self
            .simple(
                state,
                pod,
                request::Kind::PreScore(pb::PreScoreRequest { nodes: names }),
            )
            .await;
        self.status_or_fail("PreScore", pod, r, Status::skip())
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
        match self.score_remote(state, pod, nodes).await {
            Ok(v) => Ok(v),
            Err(e) => self.failed("Score", pod, e, vec![0; nodes.len()]),
        }
    }
}

#[async_trait]
impl ReservePlugin for RemotePlugin {
    async fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::success();
        }
        let r = self
            .simple(
                state,
                pod,
                request::Kind::Reserve(pb::ReserveRequest {
                    node: node.to_string(),
                    reservation_id: reservation_id(pod, state),
                }),
            )
            .await;
        self.status_or_fail("Reserve", pod, r, Status::success())
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
            .await
            .and_then(|r| match r {
                response::Result::Permit(p) => Ok(p),
                _ => malformed("not a Permit answer"),
            });
        let p = match r {
            Ok(p) => p,
            Err(e) => {
                let s = self
                    .failed("Permit", pod, e, Status::success())
                    .unwrap_or_else(|s| s);
                return (s, Duration::ZERO);
            }
        };
        let status = status_of(p.status);
        if status.is_wait() {
            let timeout = p
                .wait_timeout
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or_default();
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
        if status.is_error() {
            let e = CallError::Remote(status.message());
            let s = self
                .failed("Permit", pod, e, Status::success())
                .unwrap_or_else(|s| s);
            return (s, Duration::ZERO);
        }
        (status, Duration::ZERO)
    }
}

#[async_trait]
impl PreBindPlugin for RemotePlugin {
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::success();
        }
        let r = self
            .simple(
                state,
                pod,
                request::Kind::PreBind(pb::PreBindRequest {
                    node: node.to_string(),
                }),
            )
            .await;
        self.status_or_fail("PreBind", pod, r, Status::success())
    }
}

#[async_trait]
impl BindPlugin for RemotePlugin {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::skip();
        }
        let r = self
            .simple(
                state,
                pod,
                request::Kind::Bind(pb::BindRequest {
                    node: node.to_string(),
                }),
            )
            .await;
        self.status_or_fail("Bind", pod, r, Status::skip())
    }
}

#[async_trait]
impl PostBindPlugin for RemotePlugin {
    async fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        if !self.interested(pod) {
            return;
        }
        let r = self
            .simple(
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
