//! faulty: a test tool, not an example to copy. It misbehaves on purpose at
//! the points it is told to, so that tests can check what berthd does when
//! an extender hangs, fails or answers nonsense:
//!
//! - `--hang POINT,...`: requests of these points are never answered (berthd
//!   times out and sends `Cancel`);
//! - `--error POINT,...`: they are answered with `Response.error`;
//! - `--garbage POINT,...`: they are answered with something that does not
//!   fit the request: Filter rejects a node that was not asked about, Score
//!   answers one score too many, any other point gets an answer of another
//!   kind.
//!
//! A point may carry its own pod filter, `POINT=REGEX` (the regular
//! expression cannot contain a comma): the fault applies only to pods whose
//! name matches it (unanchored); `--pods REGEX` is the filter of points given
//! without one (default: every pod). One point may have several faults for
//! different pods (`--hang reserve=^a- --garbage reserve=^b-`); the first
//! given that matches a pod applies (hang, then error, then garbage). Every other
//! request gets a neutral answer (Filter passes every node, and so does
//! preemption's what-if, whose faults are `filter`'s; Score gives 0,
//! PreFilter/PreScore/Reserve/Permit/PreBind succeed, Bind skips, PostFilter
//! cannot help), and Unreserve is acknowledged unless `unreserve` is one of
//! the faulty points.
//!
//! It speaks the protocol itself rather than through the SDK, because the
//! SDK refuses to send a malformed answer. Every message it receives is
//! logged (one line each, at info), so that tests can count requests per
//! pod and match each Unreserve to its Reserve.

// serve() is for extenders built with the SDK; this one serves the protocol
// itself and uses only the flags and the logging.
#[path = "../common.rs"]
#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Result, bail};
use berth_extender::proto::{
    self as pb, extender_message, extender_server::Extender as ExtenderRpc,
    extender_server::ExtenderServer, request::Kind, response::Result as Reply, scheduler_message,
};
use berth_extender::{CancellationToken, shutdown_signal};
use clap::{Parser, ValueEnum};
use regex::Regex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tracing::{Instrument, info, info_span, warn};

/// A point a fault can be injected at (`unreserve` included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
#[value(rename_all = "camelCase")]
enum Point {
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Unreserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
    PlacementFeasible,
    PodGroupPostFilter,
    GroupPermit,
}

impl Point {
    /// The extension point declared in Hello (Unreserve comes with Reserve).
    fn declared(self) -> pb::ExtensionPoint {
        use pb::ExtensionPoint as E;
        match self {
            Point::PreFilter => E::PreFilter,
            Point::Filter => E::Filter,
            Point::PostFilter => E::PostFilter,
            Point::PreScore => E::PreScore,
            Point::Score => E::Score,
            Point::Reserve | Point::Unreserve => E::Reserve,
            Point::Permit => E::Permit,
            Point::PreBind => E::PreBind,
            Point::Bind => E::Bind,
            Point::PostBind => E::PostBind,
            Point::PlacementFeasible => E::PlacementFeasible,
            Point::PodGroupPostFilter => E::PodGroupPostFilter,
            Point::GroupPermit => E::GroupPermit,
        }
    }
}

/// What happens to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Hang,
    Error,
    Garbage,
}

impl Fault {
    fn as_str(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Hang => "hang",
            Fault::Error => "error",
            Fault::Garbage => "garbage",
        }
    }
}

/// An extender that misbehaves on purpose (a test tool).
#[derive(Debug, Parser)]
#[command(name = "faulty", version)]
struct Args {
    #[command(flatten)]
    common: common::Common,

    /// The name sent in Hello.
    #[arg(long, default_value = "faulty")]
    name: String,

    /// The points declared in Hello (default: all thirteen); berthd may enable
    /// the extender only at these.
    #[arg(long, value_enum, value_delimiter = ',')]
    points: Vec<Point>,

    /// Never answer requests of these points (POINT or POINT=REGEX, see
    /// --pods).
    #[arg(long, value_delimiter = ',', value_parser = parse_spec)]
    hang: Vec<Spec>,

    /// Answer requests of these points with an error (POINT or
    /// POINT=REGEX).
    #[arg(long, value_delimiter = ',', value_parser = parse_spec)]
    error: Vec<Spec>,

    /// Answer requests of these points with something that does not fit
    /// (Filter: a node not asked about; Score: one score too many; others:
    /// an answer of another kind) (POINT or POINT=REGEX).
    #[arg(long, value_delimiter = ',', value_parser = parse_spec)]
    garbage: Vec<Spec>,

    /// Misbehave only for pods whose name matches this regular expression
    /// (unanchored), at the points given without their own (POINT=REGEX);
    /// the default is every pod.
    #[arg(long)]
    pods: Option<Regex>,
}

/// A faulty point, and the pods it misbehaves for (None: see --pods).
#[derive(Debug, Clone)]
struct Spec {
    point: Point,
    pods: Option<Regex>,
}

fn parse_spec(s: &str) -> Result<Spec, String> {
    let (point, pods) = match s.split_once('=') {
        Some((p, re)) => (p, Some(Regex::new(re).map_err(|e| e.to_string())?)),
        None => (s, None),
    };
    let point = Point::from_str(point.trim(), false)?;
    Ok(Spec { point, pods })
}

/// The resolved configuration, shared by every session.
struct Config {
    hello: pb::Hello,
    /// point -> the faults and the pods each applies to (None: every pod);
    /// the first that matches a pod applies.
    faults: HashMap<Point, Vec<(Fault, Option<Regex>)>>,
}

impl Config {
    fn from_args(a: &Args) -> Result<Self> {
        let mut faults = HashMap::new();
        for (list, fault) in [
            (&a.hang, Fault::Hang),
            (&a.error, Fault::Error),
            (&a.garbage, Fault::Garbage),
        ] {
            for spec in list {
                let pods = spec.pods.clone().or_else(|| a.pods.clone());
                let rules: &mut Vec<(Fault, Option<Regex>)> = faults.entry(spec.point).or_default();
                if rules.iter().any(|(_, p)| p.is_none()) {
                    bail!(
                        "{:?} already misbehaves for every pod; --{} for it would never apply",
                        spec.point,
                        fault.as_str()
                    );
                }
                rules.push((fault, pods));
            }
        }
        let declared: Vec<Point> = if a.points.is_empty() {
            Point::value_variants().to_vec()
        } else {
            a.points.clone()
        };
        let mut points: Vec<i32> = declared.iter().map(|p| p.declared() as i32).collect();
        points.sort_unstable();
        points.dedup();
        Ok(Self {
            hello: pb::Hello {
                name: a.name.clone(),
                protocol_version: pb::ProtocolVersion::ProtocolVersion2 as i32,
                points,
                score_normalization: pb::ScoreNormalization::None as i32,
                wants_nodes: false,
                wants_pods: false,
                // Faults at `filter` apply to preemption's what-if too.
                preemption_filter: declared.contains(&Point::Filter),
                filter_ignores_pods: false,
            },
            faults,
        })
    }

    fn fault(&self, point: Point, pod_name: &str) -> Fault {
        self.faults
            .get(&point)
            .and_then(|rules| {
                rules
                    .iter()
                    .find(|(_, pods)| pods.as_ref().is_none_or(|re| re.is_match(pod_name)))
            })
            .map_or(Fault::None, |(f, _)| *f)
    }
}

type Outbound = Result<pb::ExtenderMessage, tonic::Status>;

/// The tonic service: one session per stream.
struct Faulty {
    cfg: Arc<Config>,
    stop: CancellationToken,
    next_session: AtomicU64,
}

#[tonic::async_trait]
impl ExtenderRpc for Faulty {
    type SessionStream = UnboundedReceiverStream<Outbound>;

    async fn session(
        &self,
        request: tonic::Request<tonic::Streaming<pb::SchedulerMessage>>,
    ) -> Result<tonic::Response<Self::SessionStream>, tonic::Status> {
        let id = self.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let session = Session {
            cfg: self.cfg.clone(),
            tx,
            cycles: HashMap::new(),
        };
        tokio::spawn(
            session
                .run(request.into_inner(), self.stop.clone())
                .instrument(info_span!("session", id)),
        );
        Ok(tonic::Response::new(UnboundedReceiverStream::new(rx)))
    }
}

/// One stream's state: the pods of the cycles started on it.
struct Session {
    cfg: Arc<Config>,
    tx: mpsc::UnboundedSender<Outbound>,
    /// cycle id -> (namespace/name, name).
    cycles: HashMap<u64, (String, String)>,
}

fn status(code: pb::Code, reason: Option<&str>) -> Option<pb::Status> {
    Some(pb::Status {
        code: code as i32,
        reasons: reason.map(str::to_string).into_iter().collect(),
    })
}

fn point_of(kind: &Kind) -> (Point, &'static str) {
    match kind {
        Kind::PreFilter(_) => (Point::PreFilter, "PreFilter"),
        Kind::Filter(_) => (Point::Filter, "Filter"),
        Kind::PostFilter(_) => (Point::PostFilter, "PostFilter"),
        Kind::PreScore(_) => (Point::PreScore, "PreScore"),
        Kind::Score(_) => (Point::Score, "Score"),
        Kind::NormalizeScore(_) => (Point::Score, "NormalizeScore"),
        Kind::Reserve(_) => (Point::Reserve, "Reserve"),
        Kind::Unreserve(_) => (Point::Unreserve, "Unreserve"),
        Kind::Permit(_) => (Point::Permit, "Permit"),
        Kind::PreBind(_) => (Point::PreBind, "PreBind"),
        Kind::Bind(_) => (Point::Bind, "Bind"),
        Kind::PostBind(_) => (Point::PostBind, "PostBind"),
        Kind::PlacementFeasible(_) => (Point::PlacementFeasible, "PlacementFeasible"),
        Kind::PodGroupPostFilter(_) => (Point::PodGroupPostFilter, "PodGroupPostFilter"),
        Kind::GroupPermit(_) => (Point::GroupPermit, "GroupPermit"),
        Kind::PreemptionFilter(_) => (Point::Filter, "PreemptionFilter"),
    }
}

/// The neutral answer to a request.
fn neutral(kind: &Kind) -> Reply {
    match kind {
        Kind::PreFilter(_) => Reply::PreFilter(pb::PreFilterResponse {
            status: status(pb::Code::Success, None),
            node_names: None,
        }),
        Kind::Filter(f) => Reply::Filter(pb::FilterResponse {
            rejected: vec![],
            scores: if f.score {
                vec![0; f.node_ids.len()]
            } else {
                vec![]
            },
        }),
        Kind::PostFilter(_) => Reply::PostFilter(pb::PostFilterResponse {
            status: status(pb::Code::Unschedulable, Some("faulty cannot help")),
            nominated_node: String::new(),
        }),
        Kind::PreScore(_) => Reply::PreScore(pb::PreScoreResponse {
            status: status(pb::Code::Success, None),
        }),
        Kind::Score(s) => Reply::Score(pb::ScoreResponse {
            scores: vec![0; s.node_ids.len()],
        }),
        Kind::NormalizeScore(n) => Reply::NormalizeScore(pb::NormalizeScoreResponse {
            scores: vec![0; n.node_ids.len()],
        }),
        Kind::Reserve(_) => Reply::Reserve(pb::ReserveResponse {
            status: status(pb::Code::Success, None),
        }),
        Kind::Unreserve(_) => Reply::Unreserve(pb::UnreserveResponse {}),
        Kind::Permit(_) => Reply::Permit(pb::PermitResponse {
            status: status(pb::Code::Success, None),
            wait_timeout: None,
        }),
        Kind::PreBind(_) => Reply::PreBind(pb::PreBindResponse {
            status: status(pb::Code::Success, None),
        }),
        Kind::Bind(_) => Reply::Bind(pb::BindResponse {
            status: status(pb::Code::Skip, None),
        }),
        Kind::PostBind(_) => Reply::PostBind(pb::PostBindResponse {}),
        Kind::PlacementFeasible(_) => Reply::PlacementFeasible(pb::PlacementFeasibleResponse {
            status: status(pb::Code::Success, None),
        }),
        Kind::PodGroupPostFilter(_) => Reply::PodGroupPostFilter(pb::PodGroupPostFilterResponse {
            status: status(pb::Code::Unschedulable, Some("faulty cannot help")),
            nominations: vec![],
        }),
        Kind::GroupPermit(_) => Reply::GroupPermit(pb::GroupPermitResponse {
            status: status(pb::Code::Success, None),
        }),
        // Every candidate fits once its victims are gone.
        Kind::PreemptionFilter(_) => {
            Reply::PreemptionFilter(pb::PreemptionFilterResponse::default())
        }
    }
}

/// The node id Filter's garbage answer rejects (never one berthd assigns
/// to a node of a test).
const NO_SUCH_NODE: u32 = 4_000_000_000;

/// An answer that does not fit the request.
fn garbage(kind: &Kind) -> Reply {
    match kind {
        Kind::Filter(f) => Reply::Filter(pb::FilterResponse {
            rejected: vec![pb::NodeStatus {
                node_id: NO_SUCH_NODE,
                code: pb::Code::Unschedulable as i32,
                reasons: vec!["garbage".to_string()],
                plugin: String::new(),
            }],
            scores: if f.score {
                vec![0; f.node_ids.len()]
            } else {
                vec![]
            },
        }),
        Kind::Score(s) => Reply::Score(pb::ScoreResponse {
            scores: vec![0; s.node_ids.len() + 1],
        }),
        Kind::NormalizeScore(n) => Reply::NormalizeScore(pb::NormalizeScoreResponse {
            scores: vec![0; n.node_ids.len() + 1],
        }),
        Kind::PostBind(_) => Reply::Unreserve(pb::UnreserveResponse {}),
        _ => Reply::PostBind(pb::PostBindResponse {}),
    }
}

impl Session {
    async fn run(
        mut self,
        mut inbound: tonic::Streaming<pb::SchedulerMessage>,
        stop: CancellationToken,
    ) {
        loop {
            let m = tokio::select! {
                _ = stop.cancelled() => {
                    info!("shutting down: ending the session");
                    break;
                }
                m = inbound.message() => m,
            };
            match m {
                Ok(Some(m)) => self.on_message(m),
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
    }

    fn send(&self, m: extender_message::Message) {
        let _ = self.tx.send(Ok(pb::ExtenderMessage { message: Some(m) }));
    }

    fn on_message(&mut self, m: pb::SchedulerMessage) {
        use scheduler_message::Message as In;
        match m.message {
            Some(In::Open(o)) => {
                info!(scheduler = %o.scheduler, configured_name = %o.extender_name, "session opened");
                self.send(extender_message::Message::Hello(self.cfg.hello.clone()));
            }
            Some(In::CycleStart(c)) => {
                let pod = format!("{}/{}", c.namespace, c.name);
                info!(cycle = c.cycle_id, pod = %pod, "cycle started cycle={} pod={pod}", c.cycle_id);
                self.cycles.insert(c.cycle_id, (pod, c.name));
            }
            Some(In::GroupCycleStart(g)) => {
                let group = format!("{}/{}", g.namespace, g.name);
                info!(cycle = g.cycle_id, group = %group, "group cycle started cycle={} group={group}", g.cycle_id);
                self.cycles.insert(g.cycle_id, (group, g.name));
            }
            Some(In::CycleEnd(e)) => {
                let pod = self.cycles.remove(&e.cycle_id).map(|p| p.0);
                let pod = pod.unwrap_or_default();
                info!(cycle = e.cycle_id, pod = %pod, "cycle ended cycle={} pod={pod}", e.cycle_id);
            }
            Some(In::Request(r)) => self.on_request(r),
            Some(In::Cancel(c)) => info!(request = c.id, "request cancelled request={}", c.id),
            Some(
                In::NodeUpsert(_)
                | In::NodeDelete(_)
                | In::NodesSynced(_)
                | In::PodUpsert(_)
                | In::PodDelete(_),
            ) => {}
            None => warn!("an empty message: ignored"),
        }
    }

    fn on_request(&mut self, r: pb::Request) {
        let Some(kind) = r.kind else {
            warn!(request = r.id, "a request without a kind");
            return;
        };
        let (point, kind_name) = point_of(&kind);
        let (pod, name, reservation) = match &kind {
            Kind::Unreserve(u) => (
                format!("{}/{}", u.namespace, u.name),
                u.name.clone(),
                u.reservation_id.as_str(),
            ),
            other => {
                let (pod, name) = self.cycles.get(&r.cycle_id).cloned().unwrap_or_default();
                let reservation = match other {
                    Kind::Reserve(x) => x.reservation_id.as_str(),
                    Kind::Permit(x) => x.reservation_id.as_str(),
                    _ => "",
                };
                (pod, name, reservation)
            }
        };
        let mut fault = self.cfg.fault(point, &name);
        // A Filter that asks for the scores too carries Score's fault when
        // Filter has none (berthd then asks no separate Score): a hang or an
        // error fails the whole answer, garbage is one score too many.
        let mut score_garbage = false;
        if let (Fault::None, Kind::Filter(f)) = (fault, &kind)
            && f.score
        {
            match self.cfg.fault(Point::Score, &name) {
                Fault::Garbage => score_garbage = true,
                other => fault = other,
            }
        }
        info!(
            request = r.id, cycle = r.cycle_id, kind = kind_name, pod = %pod, reservation,
            fault = fault.as_str(),
            "request {kind_name} pod={pod} cycle={} reservation={reservation} fault={}",
            r.cycle_id, fault.as_str()
        );
        let result = match fault {
            Fault::Hang => return,
            Fault::Error => Reply::Error(pb::Error {
                message: format!("faulty: an error injected at {kind_name}"),
            }),
            Fault::Garbage => garbage(&kind),
            Fault::None => {
                let mut r = neutral(&kind);
                if let (true, Reply::Filter(f)) = (score_garbage, &mut r) {
                    f.scores.push(0);
                }
                r
            }
        };
        self.send(extender_message::Message::Response(pb::Response {
            id: r.id,
            result: Some(result),
        }));
        info!(request = r.id, kind = kind_name, pod = %pod, reservation, "answered {kind_name} pod={pod} request={}", r.id);
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    args.common.init_logging();
    let cfg = Arc::new(Config::from_args(&args)?);
    let listener = tokio::net::TcpListener::bind(args.common.listen).await?;
    let addr = listener.local_addr()?;
    info!(%addr, "listening on {addr}");
    let stop = CancellationToken::new();
    let service = Faulty {
        cfg,
        stop: stop.clone(),
        next_session: AtomicU64::new(0),
    };
    let signal = {
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            // End the sessions, so that the server's graceful shutdown does
            // not wait for berthd to close its streams.
            stop.cancel();
        }
    };
    tonic::transport::Server::builder()
        .add_service(
            ExtenderServer::new(service)
                .max_decoding_message_size(berth_extender::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(berth_extender::MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), signal)
        .await?;
    info!("stopped");
    Ok(())
}
