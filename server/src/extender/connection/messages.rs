//! What the extender sends on the stream, taken in: each answer matched
//! to its request (or reported as unknown, duplicate or late), Permit
//! decisions applied to the waiting pods, or kept until the Wait answer
//! they overtook.

use std::sync::Arc;

use berth_proto::extender::v1::{self as pb, ExtenderMessage, extender_message, response};

use super::inner::Inner;
use super::permit_book::EarlyDecision;
use super::session::{Ended, Session};
use crate::extender::call_error::CallError;
use crate::extender::stats::kind;

impl Inner {
    fn apply_decision(&self, uid: &Arc<str>, reservation: &str, allow: bool, reasons: &[String]) {
        let waiting = self.handle.waiting_pods();
        if allow {
            waiting.allow_or_remember(uid, self.name);
        } else {
            let message = if reasons.is_empty() {
                format!("rejected by extender {:?} at Permit", self.name)
            } else {
                reasons.join(", ")
            };
            waiting.reject_or_remember(uid, self.name, &message);
        }
        tracing::debug!(extender = self.name, reservation, allow, "Permit decided");
    }

    /// A decision for a pod at Permit on this extender.
    fn permit_decision(&self, d: pb::PermitDecision) {
        let mut book = self.permits.lock();
        if let Some(uid) = book.waiting.remove(&d.reservation_id) {
            book.decided.insert(d.reservation_id.clone(), d.allow);
            drop(book);
            self.apply_decision(&uid, &d.reservation_id, d.allow, &d.reasons);
            return;
        }
        let verdict = if d.allow { "allow" } else { "reject" };
        if let Some((_, early)) = book.asked.get_mut(&d.reservation_id) {
            if early.is_none() {
                *early = Some(EarlyDecision {
                    allow: d.allow,
                    reasons: d.reasons,
                });
                tracing::debug!(
                    extender = self.name,
                    reservation = %d.reservation_id,
                    "a Permit decision before its Wait answer: kept until the answer"
                );
                return;
            }
            drop(book);
            self.protocol_error(
                kind::REPEATED_DECISION,
                format!(
                    "a second PermitDecision ({verdict}) for reservation {} before its Permit answer; the first stands",
                    d.reservation_id
                ),
            );
            return;
        }
        if let Some(&first) = book.decided.get(&d.reservation_id) {
            drop(book);
            let how = if first == d.allow {
                "repeats"
            } else {
                "contradicts"
            };
            self.protocol_error(
                kind::REPEATED_DECISION,
                format!(
                    "a PermitDecision ({verdict}) for reservation {}, which was already decided: it {how} the first, which stands",
                    d.reservation_id
                ),
            );
            return;
        }
        drop(book);
        self.protocol_error(
            kind::UNKNOWN_RESERVATION,
            format!(
                "a PermitDecision ({verdict}) for reservation {}, which does not wait at Permit on this extender (never asked, timed out, or unreserved); dropped",
                d.reservation_id
            ),
        );
    }

    fn on_response(&self, session: &Session, r: pb::Response) {
        let Some(p) = session.pending.lock().remove(&r.id) else {
            let ended = session.ended.lock().get(&r.id).copied();
            match ended {
                Some(Ended::Abandoned) => tracing::debug!(
                    extender = self.name,
                    id = r.id,
                    "answer to a request berthd no longer needed"
                ),
                Some(Ended::TimedOut) => self.protocol_error(
                    kind::LATE_RESPONSE,
                    format!(
                        "an answer to request {} after berthd stopped waiting for it ({:?}); dropped",
                        r.id, self.cfg.timeout
                    ),
                ),
                Some(Ended::Answered) => self.protocol_error(
                    kind::DUPLICATE_RESPONSE,
                    format!(
                        "a second answer to request {}; dropped, the first stands",
                        r.id
                    ),
                ),
                None => self.protocol_error(
                    kind::UNKNOWN_REQUEST_ID,
                    format!(
                        "an answer to request {}, which berthd never sent on this stream; dropped",
                        r.id
                    ),
                ),
            }
            return;
        };
        session.ended.lock().insert(r.id, Ended::Answered);
        let answer = match r.result {
            Some(result) => Ok(result),
            None => Err(CallError::Malformed("a response without a result".into())),
        };
        if let Some(reservation) = &p.permit {
            let asked = self.permits.lock().asked.remove(reservation);
            let waits = match &answer {
                Ok(response::Result::Permit(pb::PermitResponse {
                    status: Some(s),
                    wait_timeout: Some(t),
                })) => s.code == pb::Code::Wait as i32 && (t.seconds > 0 || t.nanos > 0),
                _ => false,
            };
            if let Some((uid, early)) = asked {
                match (waits, early) {
                    (true, Some(d)) => {
                        self.permits
                            .lock()
                            .decided
                            .insert(reservation.clone(), d.allow);
                        self.apply_decision(&uid, reservation, d.allow, &d.reasons);
                    }
                    (true, None) => {
                        self.permits
                            .lock()
                            .waiting
                            .insert(reservation.clone(), uid);
                    }
                    (false, Some(d)) => self.protocol_error(
                        kind::UNUSED_DECISION,
                        format!(
                            "a PermitDecision ({}) for reservation {reservation} came before its Permit answer, which did not say Wait; the answer stands",
                            if d.allow { "allow" } else { "reject" }
                        ),
                    ),
                    (false, None) => {}
                }
            }
        }
        let _ = p.answer.send(answer);
    }

    pub(super) fn on_message(&self, session: &Session, m: ExtenderMessage) {
        match m.message {
            Some(extender_message::Message::Response(r)) => self.on_response(session, r),
            Some(extender_message::Message::PermitDecision(d)) => self.permit_decision(d),
            Some(extender_message::Message::Hello(_)) => self.protocol_error(
                kind::UNEXPECTED_MESSAGE,
                "a second Hello on the stream; ignored".into(),
            ),
            None => self.protocol_error(
                kind::UNEXPECTED_MESSAGE,
                "a message without content (of a kind this berthd does not know?); ignored".into(),
            ),
        }
    }
}
