//! One stream's life: dialing, `Open` and the extender's `Hello` (its
//! protocol version and points checked against the configuration), the
//! node feed subscribed, the extender's messages read until the stream
//! ends, and the end: calls in flight failed, pods waiting at Permit on
//! this extender settled, Unreserves in flight due again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use berth_proto::extender::v1::{
    self as pb, Hello, Open, ProtocolVersion, SchedulerMessage, extender_client::ExtenderClient,
    extender_message, scheduler_message,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use super::ids::{IdMap, IdSet};
use super::inner::{Dial, Inner};
use super::recent::Recent;
use super::session::{Pending, Session};
use crate::extender::call_error::CallError;
use crate::framework::ExtensionPoint;

/// The largest message either side may send.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// The protocol version berthd speaks.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::ProtocolVersion2;

fn proto_point(p: ExtensionPoint) -> pb::ExtensionPoint {
    use pb::ExtensionPoint as P;
    match p {
        ExtensionPoint::PreFilter => P::PreFilter,
        ExtensionPoint::Filter => P::Filter,
        ExtensionPoint::PostFilter => P::PostFilter,
        ExtensionPoint::PreScore => P::PreScore,
        ExtensionPoint::Score => P::Score,
        ExtensionPoint::Reserve => P::Reserve,
        ExtensionPoint::Permit => P::Permit,
        ExtensionPoint::PreBind => P::PreBind,
        ExtensionPoint::Bind => P::Bind,
        ExtensionPoint::PostBind => P::PostBind,
        ExtensionPoint::PlacementFeasible => P::PlacementFeasible,
        ExtensionPoint::PodGroupPostFilter => P::PodGroupPostFilter,
        ExtensionPoint::GroupPermit => P::GroupPermit,
        ExtensionPoint::PreEnqueue
        | ExtensionPoint::QueueSort
        | ExtensionPoint::PreFilterExtensionAddPod
        | ExtensionPoint::PreFilterExtensionRemovePod
        | ExtensionPoint::ScoreExtensionNormalize
        | ExtensionPoint::Unreserve => P::Unspecified,
    }
}

fn point_field(p: i32) -> String {
    ExtensionPoint::EVERY
        .into_iter()
        .find(|e| {
            let proto = proto_point(*e);
            proto != pb::ExtensionPoint::Unspecified && proto as i32 == p
        })
        .map_or_else(|| format!("(unknown point {p})"), |e| e.field().to_string())
}

impl Inner {
    /// The stream ended: fail what is in flight, settle waiting pods.
    fn end_session(&self, session: &Arc<Session>) {
        session.closed.store(true, Ordering::SeqCst);
        {
            let mut current = self.session.write();
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, session)) {
                *current = None;
                self.metrics.connected.set(0);
            }
        }
        let pending: Vec<Pending> = session.pending.lock().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.answer.send(Err(CallError::Disconnected));
        }
        let waiting: Vec<(String, Arc<str>)> = self.permits.lock().waiting.drain().collect();
        let pods = self.handle.waiting_pods();
        for (_, uid) in waiting {
            if self.cfg.ignorable {
                pods.allow_or_remember(&uid, self.name);
            } else {
                pods.reject_or_remember(
                    &uid,
                    self.name,
                    &format!(
                        "extender {:?} disconnected while the pod waited at Permit",
                        self.name
                    ),
                );
            }
        }
        // Unreserves in flight on the dead stream are due again.
        for entry in self.unreserves.lock().values_mut() {
            entry.2 = false;
        }
    }

    /// Checks the extender's declaration against the configuration.
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        if hello.protocol_version == ProtocolVersion::ProtocolVersion1 as i32 {
            return Err(format!(
                "it speaks protocol version 1, which berthd no longer accepts: berthd speaks version {v}, where requests name nodes by the ids NodeUpsert assigns (FilterRequest, PreScoreRequest, ScoreRequest and NormalizeScoreRequest carry node_ids, FilterResponse and PostFilterRequest name nodes by NodeStatus.node_id), every extender gets the node table, and FilterRequest.score asks for scores with the verdicts (FilterResponse.scores); update it to extender.proto version {v} (the header lists the changes) and declare PROTOCOL_VERSION_{v} in Hello",
                v = PROTOCOL_VERSION as i32
            ));
        }
        if hello.protocol_version != PROTOCOL_VERSION as i32 {
            return Err(format!(
                "it speaks protocol version {}, berthd speaks version {}: declare PROTOCOL_VERSION_{} in Hello",
                hello.protocol_version, PROTOCOL_VERSION as i32, PROTOCOL_VERSION as i32
            ));
        }
        let missing: Vec<&str> = self
            .cfg
            .points
            .iter()
            .filter(|p| !hello.points.contains(&(proto_point(**p) as i32)))
            .map(|p| p.field())
            .collect();
        if !missing.is_empty() {
            let declared: Vec<String> = hello.points.iter().map(|p| point_field(*p)).collect();
            return Err(format!(
                "it does not serve {} configured at {}.points, which must list only points the extender declares in its Hello (it declares [{}])",
                missing.join(", "),
                self.cfg.path,
                declared.join(", ")
            ));
        }
        Ok(())
    }

    /// Dials, handshakes and serves one stream until it ends.
    pub(super) async fn session_once(self: &Arc<Self>, dial: &Dial) -> Result<(), String> {
        // A replay's clock waits for the connection (see crate::sim_clock).
        let hold = crate::sim_clock::hold();
        let channel: Channel = dial().await.map_err(|e| {
            format!(
                "cannot connect to {}: {}",
                self.cfg.endpoint,
                error_chain(&e)
            )
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(SchedulerMessage {
            message: Some(scheduler_message::Message::Open(Open {
                protocol_version: PROTOCOL_VERSION as i32,
                extender_name: self.name.to_string(),
                scheduler: concat!("berthd/", env!("CARGO_PKG_VERSION")).to_string(),
            })),
        });
        let mut client = ExtenderClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let handshake = async {
            let mut inbound = client
                .session(UnboundedReceiverStream::new(rx))
                .await
                .map_err(|s| format!("opening the stream: {}", s.message()))?
                .into_inner();
            let first = inbound
                .message()
                .await
                .map_err(|s| format!("reading Hello: {}", s.message()))?;
            match first.and_then(|m| m.message) {
                Some(extender_message::Message::Hello(h)) => Ok((inbound, h)),
                Some(_) => Err("the first message is not Hello".to_string()),
                None => Err("the stream closed before Hello".to_string()),
            }
        };
        let (mut inbound, hello) = tokio::time::timeout(self.cfg.timeout, handshake)
            .await
            .map_err(|_| format!("no Hello within {:?}", self.cfg.timeout))??;
        drop(hold);
        self.check_hello(&hello)
            .map_err(|e| format!("its Hello was refused: {e}"))?;
        let session = Arc::new(Session {
            tx: tx.clone(),
            hello,
            pending: Mutex::new(IdMap::default()),
            ended: Mutex::new(Recent::default()),
            cycles: Mutex::new(IdSet::default()),
            ended_cycles: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        });
        // Every extender follows the node table (ids name nodes in
        // requests); the objects go to those that want them.
        self.feed
            .subscribe(tx, session.hello.wants_nodes, session.hello.wants_pods);
        *self.session.write() = Some(session.clone());
        *self.last_error.lock() = None;
        self.metrics.sessions.inc();
        self.metrics.connected.set(1);
        self.breaker
            .reset("a new stream opened (the extender is back)");
        self.connected.send_replace(self.metrics.sessions.get());
        tracing::info!(
            extender = self.name,
            endpoint = %self.cfg.endpoint,
            remote_name = %session.hello.name,
            wants_nodes = session.hello.wants_nodes,
            wants_pods = session.hello.wants_pods,
            "extender connected"
        );
        self.outage.succeeded();
        if let Some(back) = self.on_back.get() {
            back(self.name);
        }
        self.flush_unreserves();
        let result = loop {
            match inbound.message().await {
                Ok(Some(m)) => self.on_message(&session, m),
                Ok(None) => break Ok(()),
                Err(s) => break Err(format!("stream error: {}", s.message())),
            }
        };
        self.end_session(&session);
        result
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}
