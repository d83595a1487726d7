//! One Session stream: the handshake, the node cache, the cycles' pods, and
//! the dispatch of requests to handlers, each in its own task.

mod checks;
mod core;
mod reader;

use std::collections::HashMap;
use std::sync::Arc;

use berth_proto::extender::v1 as pb;
use parking_lot::Mutex;
use pb::scheduler_message::Message as In;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::nodes::Nodes;
use crate::pods::Pods;
use crate::session_core::SessionCore;

pub(crate) use self::core::{Handlers, Shared};
use self::reader::*;

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
