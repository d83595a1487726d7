//! [`PermitDecider`]: what a handler keeps to decide, later, for pods that
//! wait at Permit.

use std::sync::Weak;

use crate::session_core::{DecisionError, SessionCore};

/// Decides, later, for pods that wait at Permit on the session it came from.
///
/// Obtained from [`Context::permit_decider`]; cloneable and cheap. It holds
/// no strong reference to the session: once the stream is gone, deciding
/// fails with [`DecisionError::SessionClosed`] (berthd has then failed the
/// waiting pods itself).
#[derive(Debug, Clone)]
pub struct PermitDecider {
    pub(crate) session: Weak<SessionCore>,
}

impl PermitDecider {
    /// Sends a `PermitDecision` for the pod whose Permit (reservation
    /// `reservation_id`) answered Wait: allow it (`allow`), or reject it
    /// with `reasons`.
    ///
    /// If that Permit handler is still running, the decision is kept and
    /// becomes its answer when it returns Wait (it is dropped if the handler
    /// allows or rejects by itself).
    pub fn decide(
        &self,
        reservation_id: &str,
        allow: bool,
        reasons: Vec<String>,
    ) -> Result<(), DecisionError> {
        let core = self.session.upgrade().ok_or(DecisionError::SessionClosed)?;
        core.decide(reservation_id, allow, reasons)
    }

    /// Allows the waiting pod of `reservation_id`.
    pub fn allow(&self, reservation_id: &str) -> Result<(), DecisionError> {
        self.decide(reservation_id, true, Vec::new())
    }

    /// Rejects the waiting pod of `reservation_id` with `reason`.
    pub fn reject(
        &self,
        reservation_id: &str,
        reason: impl Into<String>,
    ) -> Result<(), DecisionError> {
        self.decide(reservation_id, false, vec![reason.into()])
    }

    /// Whether the session this decider belongs to is still open.
    pub fn is_open(&self) -> bool {
        self.session.upgrade().is_some_and(|c| !c.is_closed())
    }
}
