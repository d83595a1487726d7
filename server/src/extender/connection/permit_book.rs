//! [`PermitBook`]: the Permit requests and waits of one extender, and the
//! decisions that came before the Permit answer they decide.

use std::collections::HashMap;
use std::sync::Arc;

use super::recent::Recent;

/// A decision that came before the Permit answer it decides.
#[derive(Debug, Clone)]
pub(super) struct EarlyDecision {
    pub(super) allow: bool,
    pub(super) reasons: Vec<String>,
}

/// The Permit requests and waits of one extender.
#[derive(Default)]
pub(super) struct PermitBook {
    /// Permit requests awaiting their answer, by reservation: the pod, and
    /// a decision that came first.
    pub(super) asked: HashMap<String, (Arc<str>, Option<EarlyDecision>)>,
    /// Reservations whose Permit answered Wait, awaiting a decision: the
    /// pod.
    pub(super) waiting: HashMap<String, Arc<str>>,
    /// Reservations decided lately, and whether they were allowed.
    pub(super) decided: Recent<String, bool>,
}
