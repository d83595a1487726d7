//! [`Inner`]: the state a connection's tasks, calls and streams share, and
//! what every part asks of it: the current stream, why there is none,
//! reporting a message berthd cannot use, classifying a failed call, and
//! what goes on while the extender is down. How dialing reaches the
//! extender ([`Dial`]) and who is told when it is back ([`OnBack`]) are
//! here too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::extender::v1 as pb;
use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tonic::transport::Channel;
use tower::BoxError;

use super::backoff::MAX_BACKOFF;
use super::permit_book::PermitBook;
use super::session::Session;
use crate::config::ExtenderConfig;
use crate::extender::breaker::Breaker;
use crate::extender::call_error::CallError;
use crate::extender::feed::NodeFeed;
use crate::extender::stats::Stats;
use crate::framework::Handle;
use crate::metrics::ExtenderMetrics;
use crate::outage::{Outage, human};

/// How a connection reaches its extender: a fresh channel per stream.
pub type Dial =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Channel, tonic::transport::Error>> + Send + Sync>;

/// Told an extender's name when a stream to it opens.
pub type OnBack = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The shared state of a connection.
pub(super) struct Inner {
    pub(super) cfg: ExtenderConfig,
    /// Its outages, as people read them (see [`crate::outage`]).
    pub(super) outage: Arc<Outage>,
    /// Told when a stream opens.
    pub(super) on_back: std::sync::OnceLock<OnBack>,
    pub(super) name: &'static str,
    pub(super) handle: Handle,
    pub(super) feed: Arc<NodeFeed>,
    pub(super) session: RwLock<Option<Arc<Session>>>,
    pub(super) next_id: AtomicU64,
    /// Unacknowledged Unreserves by reservation id: (cycle, request, in
    /// flight).
    pub(super) unreserves: Mutex<BTreeMap<String, (u64, pb::UnreserveRequest, bool)>>,
    pub(super) unreserve_kick: Notify,
    /// Set while the flusher is due to send pending CycleEnds.
    pub(super) cycle_end_due: AtomicBool,
    pub(super) cycle_end_kick: Notify,
    pub(super) permits: Mutex<PermitBook>,
    pub(super) stats: Stats,
    pub(super) metrics: Arc<ExtenderMetrics>,
    pub(super) breaker: Arc<Breaker>,
    pub(super) connected: tokio::sync::watch::Sender<u64>,
    /// Why the last dial or stream failed, for "not connected" errors and
    /// the startup log.
    pub(super) last_error: Mutex<Option<String>>,
    /// The outbox's length, for whoever waits for it to drain.
    pub(super) outbox_len: tokio::sync::watch::Sender<usize>,
}

impl Inner {
    /// What goes on while the extender is down, as its outage's first
    /// line says: what the breaker does, when berthd dials again, what
    /// becomes of pods.
    pub(super) fn meanwhile(&self, redial_in: Option<Duration>) -> String {
        let b = &self.cfg.circuit_breaker;
        let breaker = if b.consecutive_failures == 0 {
            "every call is tried (no circuit breaker)".to_string()
        } else {
            format!(
                "after {} failed calls in a row its circuit breaker fails calls at once for {}, then lets one call probe it",
                b.consecutive_failures,
                human(b.cool_down)
            )
        };
        let redial = match redial_in {
            Some(d) => format!(
                "berthd dials it again in {} (backing off up to {})",
                human(d),
                human(MAX_BACKOFF)
            ),
            None => "berthd dials it again if its stream breaks".into(),
        };
        let pods = if self.cfg.ignorable {
            "pods are scheduled without it (ignorable)"
        } else {
            "pods that need it fail their attempt and are retried as soon as it is back (its Hello)"
        };
        format!("{breaker}; {redial}; {pods}")
    }

    pub(super) fn current(&self) -> Option<Arc<Session>> {
        self.session.read().clone()
    }

    pub(super) fn not_connected(&self) -> CallError {
        let why = self.last_error.lock().clone();
        CallError::NotConnected(match why {
            Some(e) => e,
            None => "the first stream is still being opened".into(),
        })
    }

    /// Logs and counts a message berthd cannot use.
    pub(super) fn protocol_error(&self, kind: usize, what: String) {
        self.metrics.protocol_error(kind);
        tracing::warn!(
            extender = self.name,
            kind = crate::metrics::PROTOCOL_ERROR_KINDS[kind],
            "extender {:?} sent a message berthd cannot use: {what}",
            self.name
        );
    }

    pub(super) fn classify(&self, e: BoxError) -> CallError {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        if e.is::<tower::timeout::error::Elapsed>() {
            return CallError::Timeout(self.cfg.timeout);
        }
        match e.downcast::<CallError>() {
            Ok(c) => *c,
            Err(other) => CallError::Malformed(other.to_string()),
        }
    }
}
