//! What is counted of an extender's calls: [`Stats`] (for logs and tests)
//! and the slots a call, its outcome and a protocol error take in the
//! extender families of `/metrics` ([`crate::metrics::ExtenderMetrics`]).
//! Remote (gRPC) and HTTP extenders share [`Stats`].

use std::sync::atomic::AtomicU64;

use berth_proto::extender::v1::request;

use super::call_error::CallError;

/// Counters, for logs and tests (`/metrics` reads [`ExtenderMetrics`]).
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls made.
    pub calls: AtomicU64,
    /// Calls that failed (of any kind).
    pub failures: AtomicU64,
    /// Failures skipped because the extender is ignorable.
    pub skipped: AtomicU64,
    /// Unreserves acknowledged.
    pub unreserves_acked: AtomicU64,
}

/// The index of a request's extension point in
/// [`crate::metrics::EXTENDER_POINTS`].
pub(super) fn point_slot(kind: &request::Kind) -> usize {
    match kind {
        request::Kind::PreFilter(_) => 0,
        request::Kind::Filter(_) => 1,
        request::Kind::PostFilter(_) => 2,
        request::Kind::PreScore(_) => 3,
        request::Kind::Score(_) => 4,
        request::Kind::NormalizeScore(_) => 5,
        request::Kind::Reserve(_) => 6,
        request::Kind::Unreserve(_) => 7,
        request::Kind::Permit(_) => 8,
        request::Kind::PreBind(_) => 9,
        request::Kind::Bind(_) => 10,
        request::Kind::PostBind(_) => 11,
        request::Kind::PlacementFeasible(_) => 12,
        request::Kind::PodGroupPostFilter(_) => 13,
        request::Kind::GroupPermit(_) => 14,
        request::Kind::PreemptionFilter(_) => 15,
    }
}

/// The index of a call's outcome in [`crate::metrics::EXTENDER_RESULTS`].
pub(super) fn result_slot<T>(r: &Result<T, CallError>) -> usize {
    match r {
        Ok(_) => 0,
        Err(CallError::Remote(_) | CallError::Malformed(_)) => 1,
        Err(CallError::Timeout(_)) => 2,
        Err(CallError::Overloaded(_)) => 3,
        Err(CallError::NotConnected(_) | CallError::Disconnected) => 4,
        Err(CallError::CircuitOpen(_)) => 5,
    }
}

/// The slots of [`crate::metrics::PROTOCOL_ERROR_KINDS`].
pub(super) mod kind {
    pub const UNKNOWN_REQUEST_ID: usize = 0;
    pub const DUPLICATE_RESPONSE: usize = 1;
    pub const LATE_RESPONSE: usize = 2;
    pub const UNKNOWN_RESERVATION: usize = 3;
    pub const REPEATED_DECISION: usize = 4;
    pub const UNUSED_DECISION: usize = 5;
    pub const UNEXPECTED_MESSAGE: usize = 6;
    pub const MALFORMED_RESPONSE: usize = 7;
}
