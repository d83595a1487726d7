//! One Session stream: the handshake, the node cache, the cycles' pods, and
//! the dispatch of requests to handlers, each in its own task.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::extender::v1 as pb;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use pb::request::Kind;
use pb::response::Result as Reply;
use pb::scheduler_message::Message as In;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::context::{Context, DecisionError, Nodes, PermitDecider, Table};
use crate::groups::{self, CycleGroup, GroupHandlers};
use crate::pods::{PlacedPod, Pods};
use crate::points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
use crate::preemption::{CandidatePod, PreemptionCandidate, PreemptionVerdict};
use crate::reservations::{ReservationBook, UnreserveStart};
use crate::types::check_code;
use crate::types::{
    Code, CyclePod, ExtensionPoint, NodeRef, NodeStatus, PermitOutcome, PodIdentity, Reservation,
    ScoreNormalization, Status, Unreservation,
};

/// What the session's outbound stream carries.
pub(crate) type Outbound = Result<pb::ExtenderMessage, tonic::Status>;

/// The handlers registered with the builder.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) pre_filter: Option<Arc<dyn PreFilter>>,
    pub(crate) filter: Option<Arc<dyn Filter>>,
    pub(crate) post_filter: Option<Arc<dyn PostFilter>>,
    pub(crate) pre_score: Option<Arc<dyn PreScore>>,
    pub(crate) score: Option<Arc<dyn Score>>,
    pub(crate) reserve: Option<Arc<dyn Reserve>>,
    pub(crate) permit: Option<Arc<dyn Permit>>,
    pub(crate) pre_bind: Option<Arc<dyn PreBind>>,
    pub(crate) bind: Option<Arc<dyn Bind>>,
    pub(crate) post_bind: Option<Arc<dyn PostBind>>,
    pub(crate) hooks: Option<Arc<dyn CycleHooks>>,
    pub(crate) groups: GroupHandlers,
}

/// What every session of an extender shares.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) handlers: Handlers,
    pub(crate) wants_nodes: bool,
    pub(crate) wants_pods: bool,
    pub(crate) normalization: ScoreNormalization,
    pub(crate) points: Vec<ExtensionPoint>,
    pub(crate) reservations: Arc<ReservationBook>,
    pub(crate) next_session: AtomicU64,
}

impl Shared {
    pub(crate) fn hello(&self) -> pb::Hello {
        pb::Hello {
            name: self.name.clone(),
            protocol_version: pb::ProtocolVersion::ProtocolVersion2 as i32,
            points: self.points.iter().map(|p| *p as i32).collect(),
            score_normalization: self.normalization as i32,
            wants_nodes: self.wants_nodes,
            wants_pods: self.wants_pods,
            preemption_filter: self.handlers.filter.is_some(),
            filter_ignores_pods: self
                .handlers
                .filter
                .as_ref()
                .is_some_and(|f| f.ignores_pods()),
        }
    }
}

/// A decision made while the Permit handler of its reservation still ran.
#[derive(Debug)]
struct Decision {
    allow: bool,
    reasons: Vec<String>,
}

impl Decision {
    fn status(self) -> pb::Status {
        if self.allow {
            Status::success().into_proto()
        } else {
            Status {
                code: Code::Unschedulable,
                reasons: self.reasons,
            }
            .into_proto()
        }
    }
}

#[derive(Debug, Default)]
struct PermitBook {
    /// Reservations whose Permit handler runs, with a decision made
    /// meanwhile.
    running: HashMap<String, Option<Decision>>,
    /// Reservations whose Permit answered Wait and await a decision.
    waiting: HashSet<String>,
}

/// The part of a session that outlives the reader's borrow: the outbound
/// sender and the Permit bookkeeping. Handlers' deciders hold it weakly, so
/// the outbound stream ends once the session's tasks are gone.
#[derive(Debug)]
pub(crate) struct SessionCore {
    id: u64,
    out: mpsc::UnboundedSender<Outbound>,
    permits: Mutex<PermitBook>,
    closed: AtomicBool,
}

impl SessionCore {
    pub(crate) fn new(id: u64, out: mpsc::UnboundedSender<Outbound>) -> Arc<Self> {
        Arc::new(Self {
            id,
            out,
            permits: Mutex::default(),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn send(&self, m: pb::extender_message::Message) -> bool {
        self.out
            .send(Ok(pb::ExtenderMessage { message: Some(m) }))
            .is_ok()
    }

    fn respond(&self, id: u64, result: Reply) {
        self.send(pb::extender_message::Message::Response(pb::Response {
            id,
            result: Some(result),
        }));
    }

    fn respond_error(&self, id: u64, message: String) {
        warn!(request = id, error = %message, "request failed");
        self.respond(id, Reply::Error(pb::Error { message }));
    }

    pub(crate) fn decide(
        &self,
        reservation_id: &str,
        allow: bool,
        reasons: Vec<String>,
    ) -> Result<(), DecisionError> {
        if self.is_closed() {
            return Err(DecisionError::SessionClosed);
        }
        let mut book = self.permits.lock();
        if let Some(slot) = book.running.get_mut(reservation_id) {
            *slot = Some(Decision { allow, reasons });
            return Ok(());
        }
        if !book.waiting.remove(reservation_id) {
            return Err(DecisionError::NotWaiting(reservation_id.to_string()));
        }
        // Sent under the lock, like Permit answers, so that order holds.
        let sent = self.send(pb::extender_message::Message::PermitDecision(
            pb::PermitDecision {
                reservation_id: reservation_id.to_string(),
                allow,
                reasons,
            },
        ));
        drop(book);
        if sent {
            debug!(
                session = self.id,
                reservation = reservation_id,
                allow,
                "permit decision sent"
            );
            Ok(())
        } else {
            Err(DecisionError::SessionClosed)
        }
    }

    /// Answers a Permit request, turning a Wait into the decision made
    /// meanwhile if there is one.
    fn deliver_permit(&self, id: u64, reservation_id: &str, result: Reply) {
        let mut book = self.permits.lock();
        let decided = book.running.remove(reservation_id).flatten();
        let result = match result {
            Reply::Permit(p)
                if p.status
                    .as_ref()
                    .is_some_and(|s| s.code == Code::Wait as i32) =>
            {
                match decided {
                    Some(d) => Reply::Permit(pb::PermitResponse {
                        status: Some(d.status()),
                        wait_timeout: None,
                    }),
                    None => {
                        book.waiting.insert(reservation_id.to_string());
                        Reply::Permit(p)
                    }
                }
            }
            other => {
                if decided.is_some() {
                    debug!(
                        reservation = reservation_id,
                        "a decision made while the permit handler ran is moot: it did not wait"
                    );
                }
                other
            }
        };
        // Under the lock: a decision for this reservation cannot overtake
        // the Wait it decides.
        self.respond(id, result);
    }
}

/// Removes a Permit's "running" mark if its task goes away unanswered
/// (cancelled, or the session ended).
struct PermitRunning {
    core: Arc<SessionCore>,
    reservation_id: String,
}

impl Drop for PermitRunning {
    fn drop(&mut self) {
        self.core
            .permits
            .lock()
            .running
            .remove(&self.reservation_id);
    }
}

struct InFlight {
    abort: AbortHandle,
    token: CancellationToken,
}

/// Serves one stream until berthd closes it, it breaks, or `stop` fires.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut inbound: tonic::Streaming<pb::SchedulerMessage>,
    core: Arc<SessionCore>,
    stop: CancellationToken,
) {
    let span = tracing::info_span!("session", id = core.id);
    async move {
        let first = tokio::select! {
            m = inbound.message() => m,
            _ = stop.cancelled() => return,
        };
        let open = match first {
            Ok(Some(pb::SchedulerMessage {
                message: Some(In::Open(open)),
            })) => open,
            Ok(Some(_)) => {
                warn!("the first message was not Open: closing the stream");
                let _ = core.out.send(Err(tonic::Status::failed_precondition(
                    "the first message of a session must be Open",
                )));
                return;
            }
            Ok(None) => {
                debug!("the stream closed before Open");
                return;
            }
            Err(e) => {
                warn!(error = %e, "the stream broke before Open");
                return;
            }
        };
        if open.protocol_version != pb::ProtocolVersion::ProtocolVersion2 as i32 {
            warn!(
                version = open.protocol_version,
                "berthd speaks another protocol version than this extender (2); it will close the stream"
            );
        }
        info!(
            scheduler = %open.scheduler,
            configured_name = %open.extender_name,
            "session opened"
        );
        core.send(pb::extender_message::Message::Hello(shared.hello()));

        let mut reader = Reader {
            shared,
            core,
            nodes: Nodes::default(),
            pods: Pods::default(),
            cycles: HashMap::new(),
            groups: HashMap::new(),
            inflight: Arc::new(Mutex::new(HashMap::new())),
            token: CancellationToken::new(),
            scheduler: Arc::from(open.scheduler.as_str()),
        };
        loop {
            let msg = tokio::select! {
                biased;
                _ = stop.cancelled() => {
                    info!("the server is shutting down: ending the session");
                    break;
                }
                m = inbound.message() => m,
            };
            match msg {
                Ok(Some(m)) => reader.on_message(m),
                Ok(None) => {
                    info!("berthd closed the session");
                    break;
                }
                Err(e) => {
                    info!(error = %e, "the session's stream broke");
                    break;
                }
            }
        }
        reader.close();
    }
    .instrument(span)
    .await
}

type CycleSlot = Result<Arc<CyclePod>, String>;

struct Reader {
    shared: Arc<Shared>,
    core: Arc<SessionCore>,
    nodes: Nodes,
    pods: Pods,
    cycles: HashMap<u64, CycleSlot>,
    /// Group cycles' groups (GroupCycleStart), until their CycleEnd.
    groups: HashMap<u64, Result<Arc<CycleGroup>, String>>,
    inflight: Arc<Mutex<HashMap<u64, InFlight>>>,
    /// Cancelled when the session ends; every request's token is a child.
    token: CancellationToken,
    scheduler: Arc<str>,
}

type Work = BoxFuture<'static, Result<Reply, String>>;

impl Reader {
    fn close(self) {
        self.core.closed.store(true, Ordering::Release);
        self.token.cancel();
        let inflight: Vec<InFlight> = self.inflight.lock().drain().map(|(_, f)| f).collect();
        for f in &inflight {
            f.abort.abort();
        }
        let mut book = self.core.permits.lock();
        book.waiting.clear();
        book.running.clear();
        drop(book);
        debug!(aborted = inflight.len(), "session closed");
    }

    fn on_message(&mut self, m: pb::SchedulerMessage) {
        let Some(m) = m.message else {
            warn!("a message of a kind this SDK does not know (a newer berthd?): ignored");
            return;
        };
        match m {
            In::Open(_) => warn!("a second Open on the session: ignored"),
            In::NodeUpsert(n) if n.node.is_empty() => self.nodes.upsert(n.id, n.name, None),
            In::NodeUpsert(n) => match serde_json::from_slice::<Node>(&n.node) {
                Ok(node) => self.nodes.upsert(n.id, n.name, Some(Arc::new(node))),
                Err(e) => warn!(
                    node = %n.name,
                    error = %e,
                    "NodeUpsert is not a valid v1 Node: the node table keeps what it had"
                ),
            },
            In::NodeDelete(d) => {
                if !self.nodes.remove(d.id) {
                    debug!(node = %d.name, id = d.id, "NodeDelete of a node not in the table");
                }
            }
            In::NodesSynced(s) => {
                self.nodes.set_synced();
                info!(
                    sent = s.nodes,
                    cached = self.nodes.len(),
                    pods = self.pods.len(),
                    "nodes synced"
                );
            }
            In::PodUpsert(u) => {
                let (ns, name) = (u.namespace.clone(), u.name.clone());
                match PlacedPod::from_proto(u) {
                    Ok(p) => {
                        self.pods.upsert(p);
                    }
                    Err(e) => warn!(
                        pod = %format!("{ns}/{name}"),
                        error = %e,
                        "PodUpsert is not a valid v1 Pod: the pod table keeps what it had"
                    ),
                }
            }
            In::PodDelete(d) => {
                if self.pods.remove(d.id).is_none() {
                    debug!(id = d.id, uid = %d.uid, "PodDelete of a pod not in the table");
                }
            }
            In::CycleStart(c) => self.on_cycle_start(c),
            In::GroupCycleStart(g) => {
                let (id, key) = (g.cycle_id, format!("{}/{}", g.namespace, g.name));
                debug!(cycle = id, group = %key, pods = g.pods.len(), "group cycle started");
                let slot = groups::parse_start(g).map(Arc::new);
                if let Err(e) = &slot {
                    warn!(group = %key, "{e}");
                }
                if self.groups.insert(id, slot).is_some() {
                    warn!(
                        cycle = id,
                        "GroupCycleStart of a cycle already started: replaced"
                    );
                }
            }
            In::CycleEnd(e) if self.groups.remove(&e.cycle_id).is_some() => {}
            In::CycleEnd(e) => match self.cycles.remove(&e.cycle_id) {
                Some(Ok(pod)) => {
                    if let Some(h) = &self.shared.handlers.hooks {
                        let h = h.clone();
                        if let Err(p) =
                            std::panic::catch_unwind(AssertUnwindSafe(|| h.cycle_end(&pod)))
                        {
                            warn!(panic = %panic_message(&*p), "the cycle_end hook panicked");
                        }
                    }
                }
                Some(Err(_)) => {}
                None => debug!(cycle = e.cycle_id, "CycleEnd of an unknown cycle"),
            },
            In::Request(r) => self.on_request(r),
            In::Cancel(c) => {
                let f = self.inflight.lock().remove(&c.id);
                match f {
                    Some(f) => {
                        f.token.cancel();
                        f.abort.abort();
                        debug!(request = c.id, "request cancelled by berthd");
                    }
                    None => debug!(request = c.id, "Cancel of a request not in flight"),
                }
            }
        }
    }

    fn on_cycle_start(&mut self, c: pb::CycleStart) {
        debug!(
            cycle = c.cycle_id, pod = %format_args!("{}/{}", c.namespace, c.name), uid = %c.uid,
            "cycle started cycle={} pod={}/{}", c.cycle_id, c.namespace, c.name
        );
        let slot = match serde_json::from_slice::<Pod>(&c.pod) {
            Ok(pod) => {
                let pod = Arc::new(CyclePod::from_parts(
                    c.cycle_id,
                    PodIdentity {
                        namespace: c.namespace,
                        name: c.name,
                        uid: c.uid,
                    },
                    Arc::new(pod),
                ));
                if let Some(h) = &self.shared.handlers.hooks {
                    let h = h.clone();
                    if let Err(p) =
                        std::panic::catch_unwind(AssertUnwindSafe(|| h.cycle_start(&pod)))
                    {
                        warn!(panic = %panic_message(&*p), "the cycle_start hook panicked");
                    }
                }
                Ok(pod)
            }
            Err(e) => {
                let msg = format!("the pod of cycle {} is not a valid v1 Pod: {e}", c.cycle_id);
                warn!(pod = %format!("{}/{}", c.namespace, c.name), "{msg}");
                Err(msg)
            }
        };
        if self.cycles.insert(c.cycle_id, slot).is_some() {
            warn!(
                cycle = c.cycle_id,
                "CycleStart of a cycle already started: replaced"
            );
        }
    }

    fn on_request(&mut self, r: pb::Request) {
        let id = r.id;
        let Some(kind) = r.kind else {
            self.core.respond_error(
                id,
                "the request has no kind this extender knows (a newer berthd?)".into(),
            );
            return;
        };
        let (point, kind_name) = point_of(&kind);
        if tracing::enabled!(tracing::Level::DEBUG) {
            self.log_request(r.id, r.cycle_id, &kind, kind_name);
        }
        if !self.shared.points.contains(&point) {
            self.core.respond_error(
                id,
                format!(
                    "extender {} does not serve {kind_name} (it declared {:?})",
                    self.shared.name,
                    self.shared
                        .points
                        .iter()
                        .map(|p| p.as_str_name())
                        .collect::<Vec<_>>()
                ),
            );
            return;
        }
        if self.inflight.lock().contains_key(&id) {
            self.core.respond_error(
                id,
                format!("request id {id} is already in flight on this stream"),
            );
            return;
        }
        let timeout = r
            .timeout
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero());
        let cx = Context {
            request_id: id,
            cycle_id: r.cycle_id,
            timeout,
            deadline: timeout.map(|t| Instant::now() + t),
            token: self.token.child_token(),
            nodes: self.nodes.clone(),
            pods: self.pods.clone(),
            decider: PermitDecider {
                session: Arc::downgrade(&self.core),
            },
            session_id: self.core.id,
            scheduler: self.scheduler.clone(),
            dry_run: match &kind {
                Kind::PostFilter(p) => p.dry_run,
                Kind::PodGroupPostFilter(p) => p.dry_run,
                Kind::GroupPermit(p) => p.dry_run,
                Kind::PreemptionFilter(p) => p.dry_run,
                _ => false,
            },
        };

        if let Kind::Unreserve(u) = kind {
            self.core.permits.lock().waiting.remove(&u.reservation_id);
            let work = self.unreserve(cx.clone(), u);
            self.spawn(id, kind_name, cx, None, work);
            return;
        }

        if groups::is_group_kind(&kind) {
            let group = match self.groups.get(&r.cycle_id) {
                Some(Ok(g)) => g.clone(),
                Some(Err(e)) => return self.core.respond_error(id, e.clone()),
                None => {
                    return self.core.respond_error(
                        id,
                        format!(
                            "{kind_name} names group cycle {}, which was not started",
                            r.cycle_id
                        ),
                    );
                }
            };
            match groups::work(&self.shared.handlers.groups, cx.clone(), group, kind) {
                Ok(work) => self.spawn(id, kind_name, cx, None, work),
                Err(e) => self.core.respond_error(id, e),
            }
            return;
        }

        let pod = match self.cycles.get(&r.cycle_id) {
            Some(Ok(pod)) => pod.clone(),
            Some(Err(e)) => {
                self.core.respond_error(id, e.clone());
                return;
            }
            None => {
                self.core.respond_error(
                    id,
                    format!(
                        "{kind_name} names cycle {}, which was not started",
                        r.cycle_id
                    ),
                );
                return;
            }
        };

        let h = &self.shared.handlers;
        let h_score = h.score.clone();
        let mut permit_running = None;
        let c = cx.clone();
        let work: Work = match kind {
            Kind::PreFilter(_) => {
                let Some(h) = h.pre_filter.clone() else {
                    return self.unserved(id, kind_name);
                };
                async move {
                    let r = h.pre_filter(&c, &pod).await.map_err(|e| e.to_string())?;
                    check_code("PreFilter", &r.status, PRE_FILTER_CODES)?;
                    Ok(Reply::PreFilter(pb::PreFilterResponse {
                        status: Some(r.status.into_proto()),
                        node_names: r.node_names.map(|names| pb::NodeNames { names }),
                    }))
                }
                .boxed()
            }
            Kind::Filter(f) => {
                let Some(h) = h.filter.clone() else {
                    return self.unserved(id, kind_name);
                };
                let scorer = match (f.score, h_score) {
                    (false, _) => None,
                    (true, Some(s)) => Some(s),
                    (true, None) => {
                        return self.core.respond_error(
                            id,
                            "Filter asked for scores, but this extender serves no Score".into(),
                        );
                    }
                };
                let Some(table) = self.resolve(id, kind_name, &f.node_ids) else {
                    return;
                };
                let norm = self.shared.normalization;
                async move {
                    let nodes = refs(&table, &f.node_ids);
                    let rejected = h
                        .filter_batch(&c, &pod, &nodes)
                        .await
                        .map_err(|e| e.to_string())?;
                    let rejected = check_filter(&nodes, rejected)?;
                    let mut scores = Vec::new();
                    if let Some(scorer) = scorer {
                        // Only the nodes this Filter passed are scored; the
                        // others' scores are not used.
                        let mut out = vec![0; nodes.len()];
                        let mut passed = vec![true; nodes.len()];
                        for (i, _) in &rejected {
                            passed[*i] = false;
                        }
                        let at: Vec<usize> = (0..nodes.len()).filter(|i| passed[*i]).collect();
                        let passing: Vec<NodeRef<'_>> =
                            at.iter().map(|i| nodes[*i].clone()).collect();
                        let s = scorer
                            .score_batch(&c, &pod, &passing)
                            .await
                            .map_err(|e| e.to_string())?;
                        check_scores(&passing, &s, norm)?;
                        for (i, v) in at.into_iter().zip(s) {
                            out[i] = v;
                        }
                        scores = out;
                    }
                    Ok(Reply::Filter(pb::FilterResponse {
                        rejected: rejected.into_iter().map(|(_, r)| r).collect(),
                        scores,
                    }))
                }
                .boxed()
            }
            Kind::PreemptionFilter(f) => {
                let Some(h) = h.filter.clone() else {
                    return self.unserved(id, kind_name);
                };
                let ids: Vec<u32> = f.candidates.iter().map(|c| c.node_id).collect();
                let Some(table) = self.resolve(id, kind_name, &ids) else {
                    return;
                };
                async move {
                    let candidates: Vec<PreemptionCandidate<'_>> = f
                        .candidates
                        .iter()
                        .filter_map(|c| {
                            Some(PreemptionCandidate {
                                node: NodeRef::of(table.get(c.node_id)?),
                                pods: c
                                    .pods
                                    .iter()
                                    .map(|p| CandidatePod {
                                        id: p.id,
                                        uid: p.uid.clone(),
                                        namespace: p.namespace.clone(),
                                        name: p.name.clone(),
                                        victim: p.victim,
                                        node: table
                                            .get(p.node_id)
                                            .map(|e| e.name.clone())
                                            .unwrap_or_default(),
                                    })
                                    .collect(),
                            })
                        })
                        .collect();
                    let verdicts = h
                        .filter_preemption(&c, &pod, &candidates)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_preemption(&candidates, verdicts)
                }
                .boxed()
            }
            Kind::PostFilter(f) => {
                let Some(h) = h.post_filter.clone() else {
                    return self.unserved(id, kind_name);
                };
                let ids: Vec<u32> = f.node_statuses.iter().map(|s| s.node_id).collect();
                let Some(table) = self.resolve(id, kind_name, &ids) else {
                    return;
                };
                let statuses: Vec<NodeStatus> = f
                    .node_statuses
                    .into_iter()
                    .map(|s| NodeStatus {
                        node: table
                            .get(s.node_id)
                            .map(|e| e.name.clone())
                            .unwrap_or_default(),
                        status: Status::from_proto(pb::Status {
                            code: s.code,
                            reasons: s.reasons,
                        }),
                        plugin: s.plugin,
                    })
                    .collect();
                async move {
                    let r = h
                        .post_filter(&c, &pod, &statuses)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_code("PostFilter", &r.status, POST_FILTER_CODES)?;
                    if r.status.is_success() && r.nominated_node.is_none() {
                        return Err(
                            "the PostFilter handler answered success without a nominated node"
                                .into(),
                        );
                    }
                    Ok(Reply::PostFilter(pb::PostFilterResponse {
                        status: Some(r.status.into_proto()),
                        nominated_node: r.nominated_node.unwrap_or_default(),
                    }))
                }
                .boxed()
            }
            Kind::PreScore(p) => {
                let Some(h) = h.pre_score.clone() else {
                    return self.unserved(id, kind_name);
                };
                let Some(table) = self.resolve(id, kind_name, &p.node_ids) else {
                    return;
                };
                async move {
                    let nodes = refs(&table, &p.node_ids);
                    let s = h
                        .pre_score(&c, &pod, &nodes)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_code("PreScore", &s, PRE_SCORE_CODES)?;
                    Ok(Reply::PreScore(pb::PreScoreResponse {
                        status: Some(s.into_proto()),
                    }))
                }
                .boxed()
            }
            Kind::Score(s) => {
                let Some(h) = h.score.clone() else {
                    return self.unserved(id, kind_name);
                };
                let Some(table) = self.resolve(id, kind_name, &s.node_ids) else {
                    return;
                };
                let norm = self.shared.normalization;
                async move {
                    let nodes = refs(&table, &s.node_ids);
                    let scores = h
                        .score_batch(&c, &pod, &nodes)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_scores(&nodes, &scores, norm)?;
                    Ok(Reply::Score(pb::ScoreResponse { scores }))
                }
                .boxed()
            }
            Kind::NormalizeScore(n) => {
                let Some(h) = h.score.clone() else {
                    return self.unserved(id, kind_name);
                };
                if self.shared.normalization != ScoreNormalization::Extender {
                    self.core.respond_error(
                        id,
                        "NormalizeScore was sent, but this extender declared no extender normalization"
                            .into(),
                    );
                    return;
                }
                if n.node_ids.len() != n.scores.len() {
                    self.core.respond_error(
                        id,
                        format!(
                            "malformed NormalizeScore: {} nodes but {} scores",
                            n.node_ids.len(),
                            n.scores.len()
                        ),
                    );
                    return;
                }
                let Some(table) = self.resolve(id, kind_name, &n.node_ids) else {
                    return;
                };
                async move {
                    let nodes = refs(&table, &n.node_ids);
                    let scores = h
                        .normalize(&c, &pod, &nodes, n.scores)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_scores(&nodes, &scores, ScoreNormalization::None)?;
                    Ok(Reply::NormalizeScore(pb::NormalizeScoreResponse { scores }))
                }
                .boxed()
            }
            Kind::Reserve(r) => {
                let Some(h) = h.reserve.clone() else {
                    return self.unserved(id, kind_name);
                };
                let book = self.shared.reservations.clone();
                let reservation = Reservation {
                    id: r.reservation_id,
                    node: r.node,
                };
                // Registered here, in stream order, so that an Unreserve
                // that follows waits for this Reserve.
                let guard = match book.begin_reserve(&reservation.id) {
                    Ok(g) => g,
                    Err(e) => return self.core.respond_error(id, e),
                };
                // The handler runs in a task of its own that nothing aborts
                // (see `Reserve`): a Cancel only stops the waiting.
                let inner = async move {
                    let r = AssertUnwindSafe(h.reserve(&c, &pod, &reservation))
                        .catch_unwind()
                        .await;
                    let r = match r {
                        Ok(Ok(s)) => check_code("Reserve", &s, RESERVE_CODES).map(|()| s),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(p) => Err(format!(
                            "the Reserve handler panicked: {}",
                            panic_message(&*p)
                        )),
                    };
                    guard.finish(matches!(&r, Ok(s) if s.is_success()));
                    Ok(Reply::Reserve(pb::ReserveResponse {
                        status: Some(r?.into_proto()),
                    }))
                };
                shielded(inner)
            }
            Kind::Permit(p) => {
                let Some(h) = h.permit.clone() else {
                    return self.unserved(id, kind_name);
                };
                let reservation = Reservation {
                    id: p.reservation_id,
                    node: p.node,
                };
                self.core
                    .permits
                    .lock()
                    .running
                    .insert(reservation.id.clone(), None);
                permit_running = Some(PermitRunning {
                    core: self.core.clone(),
                    reservation_id: reservation.id.clone(),
                });
                async move {
                    let outcome = h
                        .permit(&c, &pod, &reservation)
                        .await
                        .map_err(|e| e.to_string())?;
                    let resp = match outcome {
                        PermitOutcome::Allow => pb::PermitResponse {
                            status: Some(Status::success().into_proto()),
                            wait_timeout: None,
                        },
                        PermitOutcome::Reject(s) => {
                            check_code("Permit (reject)", &s, PERMIT_REJECT_CODES)?;
                            pb::PermitResponse {
                                status: Some(s.into_proto()),
                                wait_timeout: None,
                            }
                        }
                        PermitOutcome::Wait(t) => pb::PermitResponse {
                            status: Some(pb::Status {
                                code: Code::Wait as i32,
                                reasons: Vec::new(),
                            }),
                            wait_timeout: Some(
                                prost_types::Duration::try_from(t)
                                    .map_err(|e| format!("wait timeout {t:?}: {e}"))?,
                            ),
                        },
                    };
                    Ok(Reply::Permit(resp))
                }
                .boxed()
            }
            Kind::PreBind(b) => {
                let Some(h) = h.pre_bind.clone() else {
                    return self.unserved(id, kind_name);
                };
                async move {
                    let s = h
                        .pre_bind(&c, &pod, &b.node)
                        .await
                        .map_err(|e| e.to_string())?;
                    check_code("PreBind", &s, PRE_BIND_CODES)?;
                    Ok(Reply::PreBind(pb::PreBindResponse {
                        status: Some(s.into_proto()),
                    }))
                }
                .boxed()
            }
            Kind::Bind(b) => {
                let Some(h) = h.bind.clone() else {
                    return self.unserved(id, kind_name);
                };
                async move {
                    let s = h.bind(&c, &pod, &b.node).await.map_err(|e| e.to_string())?;
                    check_code("Bind", &s, BIND_CODES)?;
                    Ok(Reply::Bind(pb::BindResponse {
                        status: Some(s.into_proto()),
                    }))
                }
                .boxed()
            }
            Kind::PostBind(b) => {
                let Some(h) = h.post_bind.clone() else {
                    return self.unserved(id, kind_name);
                };
                async move {
                    h.post_bind(&c, &pod, &b.node)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(Reply::PostBind(pb::PostBindResponse {}))
                }
                .boxed()
            }
            Kind::Unreserve(_) => return, // handled above
            Kind::PlacementFeasible(_) | Kind::PodGroupPostFilter(_) | Kind::GroupPermit(_) => {
                return; // handled above
            }
        };
        self.spawn(id, kind_name, cx, permit_running, work);
    }

    /// One debug line per request: its kind, pod and reservation, so that
    /// an extender's log tells which pods reached it and which reservations
    /// were undone.
    fn log_request(&self, id: u64, cycle: u64, kind: &Kind, kind_name: &str) {
        let pod = match kind {
            Kind::Unreserve(u) => format!("{}/{}", u.namespace, u.name),
            _ => match self.cycles.get(&cycle) {
                Some(Ok(p)) => p.identity().to_string(),
                _ => String::new(),
            },
        };
        let reservation = match kind {
            Kind::Reserve(x) => x.reservation_id.as_str(),
            Kind::Unreserve(x) => x.reservation_id.as_str(),
            Kind::Permit(x) => x.reservation_id.as_str(),
            _ => "",
        };
        debug!(
            request = id, cycle, kind = kind_name, pod = %pod, reservation,
            "request {kind_name} pod={pod} cycle={cycle} reservation={reservation}"
        );
    }

    /// The node table to resolve `ids` in, or an error answer naming the
    /// first id berthd never sent on this stream.
    fn resolve(&self, id: u64, kind_name: &str, ids: &[u32]) -> Option<Arc<Table>> {
        let table = self.nodes.table();
        match ids.iter().find(|n| table.get(**n).is_none()) {
            None => Some(table),
            Some(unknown) => {
                self.core.respond_error(
                    id,
                    format!(
                        "{kind_name} names node id {unknown}, which is not in this session's node table (no NodeUpsert for it)"
                    ),
                );
                None
            }
        }
    }

    fn unserved(&self, id: u64, kind_name: &str) {
        self.core
            .respond_error(id, format!("{kind_name} has no handler in this extender"));
    }

    fn unreserve(&self, cx: Context, u: pb::UnreserveRequest) -> Work {
        let Some(h) = self.shared.handlers.reserve.clone() else {
            // Unreachable: Unreserve is only accepted when Reserve is served.
            return async { Err("Unreserve has no handler in this extender".to_string()) }.boxed();
        };
        let book = self.shared.reservations.clone();
        let inner = async move {
            let outcome = match book.begin_unreserve(&u.reservation_id).await {
                UnreserveStart::AlreadyDone => {
                    debug!(reservation = %u.reservation_id, "repeated Unreserve acknowledged");
                    Ok(())
                }
                UnreserveStart::Joined(r) => r,
                UnreserveStart::Run(guard) => {
                    let un = Unreservation {
                        id: u.reservation_id,
                        node: u.node,
                        pod: PodIdentity {
                            namespace: u.namespace,
                            name: u.name,
                            uid: u.uid,
                        },
                        prior: guard.prior(),
                    };
                    let r = match AssertUnwindSafe(h.unreserve(&cx, &un)).catch_unwind().await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(p) => Err(format!(
                            "the Unreserve handler panicked: {}",
                            panic_message(&*p)
                        )),
                    };
                    guard.finish(r.clone());
                    r
                }
            };
            outcome.map(|()| Reply::Unreserve(pb::UnreserveResponse {}))
        };
        shielded(inner)
    }

    /// Runs `work` in its own task, answering its result (or its error,
    /// panic, or timeout) with request `id`.
    fn spawn(
        &self,
        id: u64,
        kind_name: &'static str,
        cx: Context,
        permit_running: Option<PermitRunning>,
        work: Work,
    ) {
        let core = self.core.clone();
        let inflight = self.inflight.clone();
        let token = cx.token.clone();
        let timeout = cx.timeout;
        let span = tracing::debug_span!("request", id, kind = kind_name, cycle = cx.cycle_id);
        let task = async move {
            let permit_running = permit_running;
            // The handler's future is dropped here on a timeout, after its
            // token was cancelled; on a Cancel, the whole task is aborted.
            let mut work = AssertUnwindSafe(work).catch_unwind();
            let outcome = match timeout {
                Some(t) => match tokio::time::timeout(t, &mut work).await {
                    Ok(r) => Some(r),
                    Err(_) => {
                        // Cancel first, so the handler's drop sees it.
                        token.cancel();
                        drop(work);
                        None
                    }
                },
                None => Some(work.await),
            };
            let outcome = match outcome {
                Some(Ok(r)) => r,
                Some(Err(p)) => Err(format!(
                    "the {kind_name} handler panicked: {}",
                    panic_message(&*p)
                )),
                None => Err(format!(
                    "the {kind_name} handler did not answer within the request's timeout of {:?}",
                    timeout.unwrap_or_default()
                )),
            };
            // Gone from the map means berthd cancelled the request (or the
            // session ended): nobody waits for the answer.
            if inflight.lock().remove(&id).is_none() {
                debug!("not answering: the request was cancelled");
                return;
            }
            let result = match outcome {
                Ok(r) => r,
                Err(message) => {
                    warn!(error = %message, "{kind_name} failed");
                    Reply::Error(pb::Error { message })
                }
            };
            let ok = !matches!(result, Reply::Error(_));
            match &permit_running {
                Some(p) => core.deliver_permit(id, &p.reservation_id, result),
                None => core.respond(id, result),
            }
            debug!(
                request = id,
                kind = kind_name,
                ok,
                "answered {kind_name} ok={ok}"
            );
        }
        .instrument(span);
        // Registered under the lock the task takes to deregister, so a task
        // that ends at once cannot leave a stale entry behind.
        let mut map = self.inflight.lock();
        let handle = tokio::spawn(task);
        map.insert(
            id,
            InFlight {
                abort: handle.abort_handle(),
                token: cx.token,
            },
        );
    }
}

/// Runs `inner` in a task nothing aborts, and waits for it: dropping the
/// returned future (Cancel, timeout, session end) leaves `inner` running.
fn shielded(inner: impl Future<Output = Result<Reply, String>> + Send + 'static) -> Work {
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

fn point_of(kind: &Kind) -> (ExtensionPoint, &'static str) {
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

const REJECTIONS: [Code; 3] = [
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
const PRE_FILTER_CODES: &[Code] = &[
    Code::Success,
    Code::Skip,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
const POST_FILTER_CODES: &[Code] = &[
    Code::Success,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
const PRE_SCORE_CODES: &[Code] = &[Code::Success, Code::Skip, Code::Error];
const RESERVE_CODES: &[Code] = POST_FILTER_CODES;
const PERMIT_REJECT_CODES: &[Code] = &REJECTIONS;
const PRE_BIND_CODES: &[Code] = POST_FILTER_CODES;
const BIND_CODES: &[Code] = PRE_FILTER_CODES;

/// The rejected nodes of a Filter answer, by position in the request and
/// with their ids; refuses a node that was not asked about.
fn check_filter(
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
fn check_preemption(
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

fn check_scores(
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
fn refs<'t>(table: &'t Table, ids: &[u32]) -> Vec<NodeRef<'t>> {
    ids.iter()
        .filter_map(|id| table.get(*id))
        .map(NodeRef::of)
        .collect()
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
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
