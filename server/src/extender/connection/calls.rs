//! A call's way out: [`CallRequest`] and [`Subject`] (what a call
//! needs), [`RawCall`] (the innermost service of the stack), putting a
//! request on the current stream (the cycle's pod, or group, first, once
//! per stream), and ending a call that is dropped before its answer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use berth_proto::extender::v1::{self as pb, request, scheduler_message};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::Service;

use super::inner::Inner;
use super::session::{Ended, Pending, Session};
use crate::extender::answers::{Asked, CallFuture, Reply, check};
use crate::extender::call_error::CallError;
use crate::extender::stats::kind;
use crate::framework::{CycleToken, PodGroupCycleInfo};
use crate::model::PodInfo;

/// What a call needs: its cycle, what the cycle schedules and the
/// request. The pod (or group) is sent (once per stream and cycle) when the
/// call is made, so it is borrowed.
pub struct CallRequest<'a> {
    /// The cycle the call belongs to.
    pub cycle: &'a Arc<CycleToken>,
    /// The pod, or the group, the cycle schedules.
    pub subject: Subject<'a>,
    /// The request.
    pub kind: request::Kind,
}

/// What a cycle schedules: one pod, or a PodGroup's pods (a group cycle).
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// A pod's cycle (`CycleStart`).
    Pod(&'a PodInfo),
    /// A group cycle (`GroupCycleStart`).
    Group(&'a PodGroupCycleInfo),
}

fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// The innermost service: puts a request on the current stream at once and
/// returns the future of its checked answer.
#[derive(Clone)]
pub struct RawCall(pub(super) Arc<Inner>);

impl<'a> Service<CallRequest<'a>> for RawCall {
    type Response = Reply;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CallRequest<'a>) -> CallFuture {
        self.0.stats.calls.fetch_add(1, Ordering::Relaxed);
        match self.0.send(req) {
            Ok(f) => f,
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Ends a call that is dropped before its answer: forgets it, tells the
/// extender to stop (`Cancel`), and remembers how it ended.
struct PendingGuard {
    inner: Arc<Inner>,
    session: Arc<Session>,
    id: u64,
    deadline: Instant,
    permit: Option<String>,
    answered: bool,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.answered || self.session.pending.lock().remove(&self.id).is_none() {
            return;
        }
        let how = if Instant::now() >= self.deadline {
            Ended::TimedOut
        } else {
            Ended::Abandoned
        };
        self.session.ended.lock().insert(self.id, how);
        let _ = self
            .session
            .send(scheduler_message::Message::Cancel(pb::Cancel {
                id: self.id,
            }));
        if let Some(reservation) = &self.permit {
            let early = self.inner.permits.lock().asked.remove(reservation);
            if let Some((_, Some(_))) = early {
                self.inner.protocol_error(
                    kind::UNUSED_DECISION,
                    format!(
                        "a PermitDecision for reservation {reservation} came before the Permit answer, which never came; dropped"
                    ),
                );
            }
        }
    }
}

impl Inner {
    /// Sends the cycle's pod (or group) on `session` if it has not seen
    /// the cycle.
    fn ensure_cycle(
        self: &Arc<Self>,
        session: &Session,
        cycle: &Arc<CycleToken>,
        subject: Subject<'_>,
    ) -> Result<(), CallError> {
        let id = cycle.id();
        if !session.cycles.lock().insert(id) {
            return Ok(());
        }
        let start = match subject {
            Subject::Pod(pod) => scheduler_message::Message::CycleStart(pb::CycleStart {
                cycle_id: id,
                pod: pod.pod.to_json(),
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
            }),
            Subject::Group(g) => {
                scheduler_message::Message::GroupCycleStart(self.group_cycle_start(id, g))
            }
        };
        session.send(start)?;
        let weak: Weak<Inner> = Arc::downgrade(self);
        cycle.on_end(move |id| {
            if let Some(inner) = weak.upgrade() {
                inner.end_cycle(id);
            }
        });
        Ok(())
    }

    fn group_cycle_start(&self, cycle_id: u64, g: &PodGroupCycleInfo) -> pb::GroupCycleStart {
        let member = |p: &PodInfo| {
            let node = p.node_name.as_deref().unwrap_or_default();
            pb::GroupMember {
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                uid: p.uid.to_string(),
                pod: p.pod.to_json(),
                node: node.to_string(),
                node_id: self.feed.id_of(node).unwrap_or(0),
            }
        };
        let group = &g.group;
        pb::GroupCycleStart {
            cycle_id,
            // A PodGroup the scheduler holds always serializes.
            pod_group: serde_json::to_vec(&*group.object).unwrap_or_default(),
            namespace: group.key.namespace.to_string(),
            name: group.key.name.to_string(),
            uid: group.uid.to_string(),
            pods: g.pods.iter().map(|p| member(p)).collect(),
            scheduled: g.scheduled.iter().map(|p| member(p)).collect(),
        }
    }

    fn end_cycle(&self, id: u64) {
        if let Some(s) = self.current()
            && s.cycles.lock().remove(&id)
        {
            s.ended_cycles.lock().push(id);
            if !self.cycle_end_due.swap(true, Ordering::AcqRel) {
                self.cycle_end_kick.notify_one();
            }
        }
    }

    /// Puts one request on `session` now; the future waits for its answer
    /// (no timeout here: the caller's layer has it) and checks it.
    pub(super) fn request(
        self: &Arc<Self>,
        session: Arc<Session>,
        cycle_id: u64,
        kind: request::Kind,
        permit: Option<(String, Arc<str>)>,
    ) -> Result<CallFuture, CallError> {
        if session.closed.load(Ordering::SeqCst) {
            return Err(CallError::Disconnected);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let asked = Asked::of(&kind);
        let (tx, rx) = oneshot::channel();
        let reservation = permit.as_ref().map(|(r, _)| r.clone());
        if let Some((r, uid)) = permit {
            self.permits.lock().asked.insert(r, (uid, None));
        }
        session.pending.lock().insert(
            id,
            Pending {
                answer: tx,
                permit: reservation.clone(),
            },
        );
        let mut guard = PendingGuard {
            inner: self.clone(),
            session: session.clone(),
            id,
            deadline: Instant::now() + self.cfg.timeout,
            permit: reservation,
            answered: false,
        };
        if let Err(e) = session.send(scheduler_message::Message::Request(pb::Request {
            id,
            cycle_id,
            timeout: Some(prost_duration(self.cfg.timeout)),
            kind: Some(kind),
        })) {
            guard.answered = true;
            session.pending.lock().remove(&id);
            if let Some(r) = &guard.permit {
                self.permits.lock().asked.remove(r);
            }
            return Err(e);
        }
        let inner = self.clone();
        // A replay's clock waits for the answer (see crate::sim_clock).
        let hold = crate::sim_clock::hold();
        Ok(Box::pin(async move {
            let raw = rx.await.unwrap_or(Err(CallError::Disconnected));
            drop(hold);
            guard.answered = true;
            let mut unusable = None;
            let checked = check(&asked, &guard.session.hello, raw, &mut unusable);
            if let Some(why) = unusable {
                inner.protocol_error(
                    kind::MALFORMED_RESPONSE,
                    format!("part of the answer to {} request {id}: {why}", asked.name()),
                );
                inner
                    .breaker
                    .record_failure(format!("malformed answer: {why}"));
            }
            if let Err(CallError::Malformed(why)) = &checked {
                inner.metrics.protocol_error(kind::MALFORMED_RESPONSE);
                tracing::warn!(
                    extender = inner.name,
                    kind = "malformed_response",
                    request = id,
                    "extender {:?} answered {} request {id} out of protocol: {why}",
                    inner.name,
                    asked.name()
                );
            }
            checked
        }))
    }

    fn send(self: &Arc<Self>, req: CallRequest<'_>) -> Result<CallFuture, CallError> {
        let session = self.current().ok_or_else(|| self.not_connected())?;
        self.ensure_cycle(&session, req.cycle, req.subject)?;
        let permit = match (&req.kind, req.subject) {
            (request::Kind::Permit(p), Subject::Pod(pod)) => {
                Some((p.reservation_id.clone(), pod.uid.clone()))
            }
            _ => None,
        };
        self.request(session, req.cycle.id(), req.kind, permit)
    }
}
