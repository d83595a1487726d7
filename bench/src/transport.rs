//! The extender transport workload: what one exchange over a remote
//! extender's gRPC stream costs, with nothing else in it. It gives the
//! floor under SchedulingWithExtender/grpc's figures on this machine.
//!
//! berthd's own client stack (the tonic endpoint its extender connections
//! dial, `TCP_NODELAY`, the `Session` stream of `berth.extender.v1`) talks
//! over loopback TCP to `berth-bench-extender --protocol echo`
//! ([`serve_echo`]), a process of its own that answers every
//! `FilterRequest` at once with a `FilterResponse` scoring each of its node
//! ids, without the SDK, a node table or any logic. An exchange is one
//! FilterRequest of `node_ids` ids (230 is the window berthd sends at 500
//! nodes) and its answer; `per_write` requests leave together (one write,
//! as a scheduler would send the requests of several pods at once), and
//! the next ones only once all of their answers are back.
//!
//! Figures: exchanges per second, the CPU time of this process (the
//! scheduler's side) and of the echo process per exchange, and the round
//! trip from sending a write to its last answer.

use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use berth_extender::proto as pb;
use pb::extender_client::ExtenderClient;
use pb::extender_server::{Extender, ExtenderServer};
use serde::{Deserialize, Serialize};
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tokio_stream::{Stream, StreamExt};

use crate::extender_process::ExtenderProcess;
use crate::usage::{cpu_seconds, cpu_seconds_from};

/// How big the transport workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportSize {
    /// Node ids per FilterRequest.
    pub node_ids: u32,
    /// Requests sent in one write.
    pub per_write: usize,
    /// Exchanges timed (after as many again to warm up).
    pub exchanges: usize,
}

/// What the transport workload measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransportResult {
    /// The workload's name.
    pub workload: String,
    /// Node ids per request.
    pub node_ids: u32,
    /// Requests per write.
    pub per_write: usize,
    /// Exchanges timed.
    pub exchanges: usize,
    /// Exchanges (request and answer) per second.
    pub exchanges_per_second: f64,
    /// CPU time of the scheduler's side (this process) per exchange, µs.
    pub cpu_us_per_exchange: f64,
    /// CPU time of the echo extender process per exchange, µs.
    pub extender_cpu_us_per_exchange: f64,
    /// From sending a write to its last answer, median, ms.
    pub round_trip_p50_ms: f64,
    /// 99th percentile, ms.
    pub round_trip_p99_ms: f64,
}

/// Runs the transport workload against a fresh echo extender process.
pub async fn run(name: &str, size: TransportSize, timeout: Duration) -> Result<TransportResult> {
    if size.per_write == 0 || size.exchanges < size.per_write {
        bail!("the transport workload needs at least one exchange per write");
    }
    let ext = ExtenderProcess::start("echo").await?;
    let pid = ext
        .pid()
        .ok_or_else(|| anyhow!("the echo extender has no pid"))?;
    // As berthd dials an extender (`berth_server::extender`'s dialer).
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", ext.addr))
        .context("the echo extender's address")?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to the echo extender at {}", ext.addr))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut inbound = ExtenderClient::new(channel)
        .session(UnboundedReceiverStream::new(rx))
        .await
        .context("opening the stream")?
        .into_inner();
    let ids: Vec<u32> = (0..size.node_ids).collect();
    let mut next_id = 0u64;
    let mut write = |n: usize| -> Result<()> {
        for _ in 0..n {
            next_id += 1;
            let request = pb::Request {
                id: next_id,
                cycle_id: next_id,
                timeout: None,
                kind: Some(pb::request::Kind::Filter(pb::FilterRequest {
                    node_ids: ids.clone(),
                    score: true,
                })),
            };
            tx.send(pb::SchedulerMessage {
                message: Some(pb::scheduler_message::Message::Request(request)),
            })
            .map_err(|_| anyhow!("the stream closed"))?;
        }
        Ok(())
    };
    let writes = size.exchanges / size.per_write;
    let mut round_trips = Vec::with_capacity(writes);
    let deadline = Instant::now() + timeout;
    let (mut cpu_before, mut ext_before, mut start) = (0.0, 0.0, Instant::now());
    // The first `writes` warm the connection up; the next ones are timed.
    for i in 0..2 * writes {
        if i == writes {
            (cpu_before, ext_before, start) =
                (cpu_seconds(), process_cpu_seconds(pid), Instant::now());
        }
        let sent = Instant::now();
        write(size.per_write)?;
        for _ in 0..size.per_write {
            let answer = tokio::time::timeout_at(deadline.into(), inbound.next())
                .await
                .map_err(|_| anyhow!("no answer within {timeout:?}"))?
                .ok_or_else(|| anyhow!("the echo extender closed the stream"))?
                .context("reading an answer")?;
            match answer.message {
                Some(pb::extender_message::Message::Response(pb::Response {
                    result: Some(pb::response::Result::Filter(f)),
                    ..
                })) if f.scores.len() == ids.len() => {}
                other => bail!("unexpected answer from the echo extender: {other:?}"),
            }
        }
        if i >= writes {
            round_trips.push(sent.elapsed());
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let timed = (writes * size.per_write) as f64;
    let cpu = cpu_seconds() - cpu_before;
    let ext_cpu = process_cpu_seconds(pid) - ext_before;
    round_trips.sort_unstable();
    let at = |q: f64| {
        let i = ((round_trips.len() as f64 * q) as usize).min(round_trips.len() - 1);
        round_trips[i].as_secs_f64() * 1e3
    };
    Ok(TransportResult {
        workload: name.to_string(),
        node_ids: size.node_ids,
        per_write: size.per_write,
        exchanges: writes * size.per_write,
        exchanges_per_second: timed / seconds,
        cpu_us_per_exchange: cpu * 1e6 / timed,
        extender_cpu_us_per_exchange: ext_cpu * 1e6 / timed,
        round_trip_p50_ms: at(0.5),
        round_trip_p99_ms: at(0.99),
    })
}

/// User and system CPU time of process `pid` so far, in seconds.
fn process_cpu_seconds(pid: u32) -> f64 {
    cpu_seconds_from(&format!("/proc/{pid}/stat"))
}

/// The echo extender: answers each FilterRequest on the stream at once,
/// scoring every node id it names; ignores every other message.
#[derive(Debug, Default)]
struct Echo;

type Answers = Pin<Box<dyn Stream<Item = Result<pb::ExtenderMessage, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Extender for Echo {
    type SessionStream = Answers;

    async fn session(
        &self,
        request: tonic::Request<tonic::Streaming<pb::SchedulerMessage>>,
    ) -> Result<tonic::Response<Answers>, tonic::Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(m)) = inbound.next().await {
                let Some(pb::scheduler_message::Message::Request(r)) = m.message else {
                    continue;
                };
                let Some(pb::request::Kind::Filter(f)) = r.kind else {
                    continue;
                };
                let scores = f
                    .node_ids
                    .iter()
                    .map(|&id| i64::from(id % 11) * 10)
                    .collect();
                let answer = pb::ExtenderMessage {
                    message: Some(pb::extender_message::Message::Response(pb::Response {
                        id: r.id,
                        result: Some(pb::response::Result::Filter(pb::FilterResponse {
                            rejected: Vec::new(),
                            scores,
                        })),
                    })),
                };
                if tx.send(Ok(answer)).is_err() {
                    break;
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(
            UnboundedReceiverStream::new(rx),
        )))
    }
}

/// Serves the echo extender on `listener` until the process ends.
pub async fn serve_echo(listener: tokio::net::TcpListener) -> Result<()> {
    // TCP_NODELAY on each connection, as the SDK sets it (tonic sets it
    // only on connections it accepts itself).
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        conn.and_then(|s| {
            s.set_nodelay(true)?;
            Ok(s)
        })
    });
    tonic::transport::Server::builder()
        .add_service(ExtenderServer::new(Echo))
        .serve_with_incoming(incoming)
        .await
        .context("serving the echo extender")
}
