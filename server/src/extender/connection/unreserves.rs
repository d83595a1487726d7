//! The Unreserve outbox's deliveries. An Unreserve is owed whatever the
//! extender's health: it bypasses the breaker, stays in the outbox until
//! acknowledged, and is re-sent on every new stream and periodically
//! while unacknowledged.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use berth_proto::extender::v1::{self as pb, request};

use super::inner::Inner;
use super::session::Session;
use crate::extender::answers::Reply;

impl Inner {
    /// Sends every unacknowledged Unreserve not already in flight.
    pub(super) fn flush_unreserves(self: &Arc<Self>) {
        let Some(session) = self.current() else {
            return;
        };
        let due: Vec<(String, u64, pb::UnreserveRequest)> = {
            let mut outbox = self.unreserves.lock();
            outbox
                .iter_mut()
                .filter(|(_, (_, _, in_flight))| !*in_flight)
                .map(|(id, (cycle, req, in_flight))| {
                    *in_flight = true;
                    (id.clone(), *cycle, req.clone())
                })
                .collect()
        };
        for (id, cycle, req) in due {
            let inner = self.clone();
            let session = session.clone();
            tokio::spawn(async move {
                inner.deliver_unreserve(id, cycle, req, session).await;
            });
        }
    }

    /// One delivery attempt; on acknowledgement the Unreserve leaves the
    /// outbox, otherwise it stays for the next attempt.
    pub(super) async fn deliver_unreserve(
        self: Arc<Self>,
        id: String,
        cycle: u64,
        req: pb::UnreserveRequest,
        session: Arc<Session>,
    ) -> bool {
        let acked = match self.request(session, cycle, request::Kind::Unreserve(req), None) {
            Ok(attempt) => matches!(
                tokio::time::timeout(self.cfg.timeout, attempt).await,
                Ok(Ok(Reply::Unreserve))
            ),
            Err(_) => false,
        };
        let mut outbox = self.unreserves.lock();
        if acked {
            outbox.remove(&id);
            self.stats.unreserves_acked.fetch_add(1, Ordering::Relaxed);
        } else if let Some(entry) = outbox.get_mut(&id) {
            entry.2 = false;
        }
        self.outbox_len.send_replace(outbox.len());
        self.metrics.pending_unreserves.set(outbox.len() as u64);
        drop(outbox);
        if !acked {
            tracing::warn!(extender = self.name, reservation = %id, "Unreserve not acknowledged; will re-send");
        }
        acked
    }
}
