//! The reading side of a session: each message from berthd taken in
//! order (nodes, pods, cycles, requests, cancels), requests dispatched to
//! their handlers in tasks of their own.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use berth_proto::extender::v1 as pb;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use pb::request::Kind;
use pb::response::Result as Reply;
use pb::scheduler_message::Message as In;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::context::Context;
use crate::groups::{self, CycleGroup};
use crate::nodes::{Nodes, Table};
use crate::permit_decider::PermitDecider;
use crate::pods::{PlacedPod, Pods};
use crate::points::{
    Bind, CycleHooks, Filter, Permit, PostBind, PostFilter, PreBind, PreFilter, PreScore, Reserve,
    Score,
};
use crate::preemption::{CandidatePod, PreemptionCandidate};
use crate::reservations::UnreserveStart;
use crate::session_core::{PermitRunning, SessionCore};
use crate::types::check_code;
use crate::types::{
    Code, CyclePod, NodeRef, NodeStatus, PermitOutcome, PodIdentity, Reservation,
    ScoreNormalization, Status, Unreservation,
};

use super::checks::*;
use super::core::*;

pub(super) type CycleSlot = Result<Arc<CyclePod>, String>;

pub(super) struct Reader {
    pub(super) shared: Arc<Shared>,
    pub(super) core: Arc<SessionCore>,
    pub(super) nodes: Nodes,
    pub(super) pods: Pods,
    pub(super) cycles: HashMap<u64, CycleSlot>,
    /// Group cycles' groups (GroupCycleStart), until their CycleEnd.
    pub(super) groups: HashMap<u64, Result<Arc<CycleGroup>, String>>,
    pub(super) inflight: Arc<Mutex<HashMap<u64, InFlight>>>,
    /// Cancelled when the session ends; every request's token is a child.
    pub(super) token: CancellationToken,
    pub(super) scheduler: Arc<str>,
}

impl Reader {
    pub(super) fn close(self) {
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

    pub(super) fn on_message(&mut self, m: pb::SchedulerMessage) {
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
