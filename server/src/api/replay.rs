//! `Scheduler/Replay`: the trace comes in chunks, the replay runs on
//! threads of its own (one per configuration, see [`crate::replay`]),
//! progress and then the report go back.
//!
//! Bounded before it allocates: at most [`MAX_CONFIGS`] configurations of
//! at most [`MAX_CONFIG_BYTES`] each, one replay at a time (a replay takes
//! every core: a second is RESOURCE_EXHAUSTED), and the trace read no
//! faster than the replay plays it (its chunks wait in a channel of
//! [`QUEUED_CHUNKS`]). A client that goes away stops the replay.

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use berth_proto::v1 as pb;
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::ApiError;
use crate::features::FeatureGates;
use crate::recording::Reader;
use crate::replay::{self, Candidate, ReplayError, ReplayOptions};

/// At most this many configurations in one replay.
pub const MAX_CONFIGS: usize = 8;
/// A configuration's YAML is at most this long.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Trace chunks waiting to be read.
const QUEUED_CHUNKS: usize = 16;

/// The answers' stream.
pub type ReplayStream = Pin<Box<dyn Stream<Item = Result<pb::ReplayResponse, Status>> + Send>>;

fn invalid(s: String) -> Status {
    ApiError::InvalidArgument(s).into()
}

fn duration(
    d: &Option<prost_types::Duration>,
    field: &str,
    default: Duration,
) -> Result<Duration, Status> {
    match d {
        None => Ok(default),
        Some(d) if d.seconds >= 0 && d.nanos >= 0 => {
            Ok(Duration::from_secs(d.seconds as u64) + Duration::from_nanos(d.nanos as u64))
        }
        Some(_) => Err(invalid(format!(
            "{field}: Invalid value: must not be negative"
        ))),
    }
}

fn pb_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Checks `start` and parses its configurations.
pub fn candidates(start: &pb::ReplayStart) -> Result<Vec<Candidate>, Status> {
    if start.configs.is_empty() {
        return Err(invalid(
            "start.configs: Required value: at least one configuration".into(),
        ));
    }
    if start.configs.len() > MAX_CONFIGS {
        return Err(invalid(format!(
            "start.configs: Too many: {}: at most {MAX_CONFIGS} configurations",
            start.configs.len()
        )));
    }
    let registry = crate::plugins::in_tree_registry();
    let known = |name: &str| registry.contains(name);
    let mut out: Vec<Candidate> = Vec::new();
    for (i, c) in start.configs.iter().enumerate() {
        let field = format!("start.configs[{i}]");
        if c.name.is_empty() {
            return Err(invalid(format!("{field}.name: Required value")));
        }
        if out.iter().any(|o| o.name == c.name) {
            return Err(invalid(format!(
                "{field}.name: Duplicate value: {:?}",
                c.name
            )));
        }
        if c.config_yaml.len() > MAX_CONFIG_BYTES {
            return Err(invalid(format!(
                "{field}.config_yaml: Too long: at most {MAX_CONFIG_BYTES} bytes"
            )));
        }
        let gates = FeatureGates::from_flags(&c.feature_gates)
            .map_err(|e| invalid(format!("{field}.feature_gates: {e}")))?;
        let config = if c.config_yaml.trim().is_empty() {
            crate::config::default_config_gated(&known, &gates)
        } else {
            crate::config::parse_gated(&c.config_yaml, &known, &gates)
                .map_err(|e| invalid(format!("{field}.config_yaml: {e}")))?
        };
        out.push(Candidate {
            name: c.name.clone(),
            config,
        });
    }
    Ok(out)
}

/// The trace's bytes, as the request stream brings them.
struct Chunks {
    rx: mpsc::Receiver<Result<Vec<u8>, String>>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.buf.len() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => {
                    self.buf = b;
                    self.at = 0;
                }
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Runs a Replay call.
pub async fn replay(
    mut requests: Streaming<pb::ReplayRequest>,
    busy: Arc<AtomicBool>,
) -> Result<ReplayStream, Status> {
    let first = requests
        .message()
        .await?
        .ok_or_else(|| invalid("start: Required value: the first message holds start".into()))?;
    let Some(pb::replay_request::Part::Start(start)) = first.part else {
        return Err(invalid(
            "start: Required value: the first message holds start, the trace follows".into(),
        ));
    };
    let candidates = candidates(&start)?;
    let options = ReplayOptions {
        bind_latency: duration(&start.bind_latency, "start.bind_latency", Duration::ZERO)?,
        seed: start.seed,
        settle: duration(
            &start.settle,
            "start.settle",
            ReplayOptions::default().settle,
        )?,
        ..ReplayOptions::default()
    };
    if busy.swap(true, Ordering::SeqCst) {
        return Err(Status::resource_exhausted(
            "a replay is running: berthd runs one at a time (it takes every core); try again when it ends",
        ));
    }
    let (chunk_tx, chunk_rx) = mpsc::channel::<Result<Vec<u8>, String>>(QUEUED_CHUNKS);
    tokio::spawn(async move {
        loop {
            let item = match requests.message().await {
                Ok(Some(m)) => match m.part {
                    Some(pb::replay_request::Part::TraceChunk(b)) => Ok(b),
                    Some(pb::replay_request::Part::Start(_)) => {
                        Err("trace_chunk: start may come only first".to_string())
                    }
                    None => continue,
                },
                Ok(None) => return,
                Err(e) => Err(format!("the request stream failed: {}", e.message())),
            };
            let stop = item.is_err();
            if chunk_tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    let (tx, rx) = mpsc::channel::<Result<pb::ReplayResponse, Status>>(64);
    let cancel = Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    // The next replay may start once this one ends, however it ends.
    struct Busy(Arc<AtomicBool>);
    impl Drop for Busy {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    let busy = Busy(busy);
    tokio::task::spawn_blocking(move || {
        let _busy = busy;
        let chunks = Chunks {
            rx: chunk_rx,
            buf: Vec::new(),
            at: 0,
        };
        let result = Reader::new(chunks)
            .map_err(ReplayError::from)
            .and_then(|reader| {
                let mut progress = |p: &replay::Progress| {
                    if tx.is_closed() {
                        c.store(true, Ordering::Relaxed);
                    }
                    // A slow reader misses progress, never the report.
                    let _ = tx.try_send(Ok(pb::ReplayResponse {
                        msg: Some(pb::replay_response::Msg::Progress(progress_pb(p))),
                    }));
                };
                replay::replay(reader, candidates, options, &mut progress, &c)
            });
        let answer = match result {
            Ok(r) => Ok(pb::ReplayResponse {
                msg: Some(pb::replay_response::Msg::Report(report_pb(&r))),
            }),
            Err(ReplayError::Cancelled) => Err(Status::cancelled("replay cancelled")),
            Err(e @ ReplayError::Trace(_)) => Err(invalid(e.to_string())),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        };
        let _ = tx.blocking_send(answer);
    });
    let stream = ReceiverStream::new(rx).map(|r| r);
    Ok(Box::pin(stream))
}

fn progress_pb(p: &replay::Progress) -> pb::ReplayProgress {
    pb::ReplayProgress {
        records_read: p.records_read,
        read_all: p.read_all,
        configs: p
            .configs
            .iter()
            .map(|c| pb::ReplayConfigProgress {
                name: c.name.clone(),
                records: c.records,
                simulated: Some(pb_duration(Duration::from_micros(c.simulated_micros))),
                done: c.done,
            })
            .collect(),
        elapsed: Some(pb_duration(p.elapsed)),
    }
}

/// The report as the API carries it.
pub fn report_pb(r: &replay::Report) -> pb::ReplayReport {
    pb::ReplayReport {
        configs: r.configs.iter().map(config_pb).collect(),
        comparisons: r
            .comparisons
            .iter()
            .map(|c| pb::ReplayComparison {
                a: c.a.clone(),
                b: c.b.clone(),
                compared: c.compared,
                same_node: c.same_node,
                different_node: c.different_node,
                only_a: c.only_a,
                only_b: c.only_b,
            })
            .collect(),
        recorded_scheduled: r.recorded_scheduled,
        records: r.records,
        segments: r.segments,
        seed: r.seed,
    }
}

fn config_pb(c: &replay::ConfigReport) -> pb::ReplayConfigReport {
    let s = &c.series;
    pb::ReplayConfigReport {
        name: c.name.clone(),
        arrived: c.arrived,
        scheduled: c.scheduled,
        pending: c.pending,
        deleted_pending: c.deleted_pending,
        deleted_with_node: c.deleted_with_node,
        pending_reasons: c
            .pending_reasons
            .iter()
            .map(|(reason, pods)| pb::ReplayReason {
                reason: reason.clone(),
                pods: *pods,
            })
            .collect(),
        time_to_schedule: Some(pb::ReplayPercentiles {
            count: c.time_to_schedule.count,
            p50_micros: c.time_to_schedule.p50,
            p99_micros: c.time_to_schedule.p99,
            max_micros: c.time_to_schedule.max,
        }),
        failed_attempts: c.failed_attempts,
        preemptors: c.preemptors,
        victims: c.victims,
        gangs: c.gangs,
        gangs_whole: c.gangs_whole,
        gangs_partial: c.gangs_partial,
        series: Some(pb::ReplaySeries {
            t_micros: s.t.clone(),
            pending: s.pending.clone(),
            running: s.running.clone(),
            utilization: s
                .utilization
                .iter()
                .map(|(resource, ratio)| pb::ReplayUtilization {
                    resource: resource.clone(),
                    ratio: ratio.clone(),
                })
                .collect(),
            largest_free_cpu_milli: s.largest_free_cpu_milli.clone(),
            largest_free_memory_bytes: s.largest_free_memory.clone(),
            cpu_fragmentation: s.cpu_fragmentation.clone(),
        }),
        records: c.records,
        refused_records: c.refused_records,
        first_refusal: c.first_refusal.clone().unwrap_or_default(),
        simulated: Some(pb_duration(Duration::from_micros(c.simulated_micros))),
        wall: Some(pb_duration(Duration::from_micros(c.wall_micros))),
    }
}
