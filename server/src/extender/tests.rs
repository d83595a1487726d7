//! The scheduler side of the extender protocol against a scripted extender
//! served by a real gRPC server: on a loopback port, or, for the tests that
//! run on tokio's paused clock (timeouts, the circuit breaker, a decision
//! racing its Wait), over an in-memory connection (see [`in_memory`]), so
//! that no real I/O lets the paused clock jump while a message is in
//! flight.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::extender::v1::{
    self as pb, ExtenderMessage, SchedulerMessage, extender_message, extender_server,
    request::Kind, response, scheduler_message::Message,
};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::cluster::embedded::EmbeddedCluster;
use crate::config;
use crate::plugins::in_tree_registry;
use crate::scheduler::{Decision, Decisions, Options, Scheduler};
use crate::testing::{NodeBuilder, PodBuilder, make_node, make_pod};

mod dry_run;
mod groups;
mod pod_feed;
mod preemption;

/// What the scripted extender does.
#[derive(Clone, Default)]
struct Script {
    points: Vec<pb::ExtensionPoint>,
    wants_nodes: bool,
    /// Hello sets wants_pods.
    wants_pods: bool,
    /// The protocol version Hello declares (default: berthd's).
    version: Option<pb::ProtocolVersion>,
    /// Never answer Open with Hello.
    silent: bool,
    /// Permit: send the decision (allow) before the Wait answer.
    decide_before_wait: bool,
    /// Answer every request twice, and answer a request id never sent.
    duplicate_and_unknown: bool,
    /// Filter: these nodes are rejected.
    reject: Vec<&'static str>,
    /// Filter: answer about a node that was not asked about.
    garbage: bool,
    /// Score per node (others 0).
    scores: HashMap<&'static str, i64>,
    /// Reserve answers this code.
    reserve: Option<pb::Code>,
    /// Permit answers Wait; the test decides through `decide`.
    permit_wait: bool,
    /// Close the stream instead of acknowledging the first N Unreserves.
    drop_on_unreserve: usize,
    /// Never answer these request kinds.
    hang: Vec<&'static str>,
    /// PlacementFeasible answers this code (default success), with the
    /// reason "scripted placement" unless success.
    placement: Option<pb::Code>,
    /// GroupPermit answers this code (default success).
    group_permit: Option<pb::Code>,
    /// PodGroupPostFilter answers this code (default unschedulable) and,
    /// with success, nominates every pod of the request to this node.
    group_post_filter: Option<(pb::Code, Option<&'static str>)>,
    /// PodGroupPostFilter nominates a pod uid not in the cycle.
    group_post_filter_garbage: bool,
    /// Hello sets preemption_filter.
    preemption_filter: bool,
    /// Hello sets filter_ignores_pods.
    filter_ignores_pods: bool,
    /// PreemptionFilter, per node: rejected, or the pods (by name) it
    /// needs gone; any other node fits once the victims are gone.
    what_if: HashMap<&'static str, WhatIf>,
}

/// The scripted extender's PreemptionFilter verdict on a node.
#[derive(Clone, Debug)]
enum WhatIf {
    Reject,
    Needs(Vec<&'static str>),
}

fn kind_name(k: &Kind) -> &'static str {
    match k {
        Kind::PreFilter(_) => "PreFilter",
        Kind::Filter(_) => "Filter",
        Kind::PostFilter(_) => "PostFilter",
        Kind::PreScore(_) => "PreScore",
        Kind::Score(_) => "Score",
        Kind::NormalizeScore(_) => "NormalizeScore",
        Kind::Reserve(_) => "Reserve",
        Kind::Unreserve(_) => "Unreserve",
        Kind::Permit(_) => "Permit",
        Kind::PreBind(_) => "PreBind",
        Kind::Bind(_) => "Bind",
        Kind::PostBind(_) => "PostBind",
        Kind::PlacementFeasible(_) => "PlacementFeasible",
        Kind::PodGroupPostFilter(_) => "PodGroupPostFilter",
        Kind::GroupPermit(_) => "GroupPermit",
        Kind::PreemptionFilter(_) => "PreemptionFilter",
    }
}

#[derive(Clone, Default)]
struct Fake {
    script: Arc<Mutex<Script>>,
    /// The node table berthd streamed: id -> name.
    names: Arc<Mutex<HashMap<u32, String>>>,
    /// Pods' names by uid, from the cycles' starts.
    pods: Arc<Mutex<HashMap<String, String>>>,
    /// Requests received, by kind.
    received: Arc<Mutex<HashMap<&'static str, usize>>>,
    /// Everything received, as short lines.
    log: Arc<Mutex<Vec<String>>>,
    /// Each received line, as it comes.
    lines: Arc<Mutex<Option<mpsc::UnboundedSender<String>>>>,
    /// Sends Permit decisions on the live stream.
    decider: Arc<Mutex<Option<mpsc::UnboundedSender<ExtenderMessage>>>>,
    unreserves_dropped: Arc<Mutex<usize>>,
    /// Bumped to end every open stream (the extender going away).
    kill: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Fake {
    /// Ends every open stream, as an extender going away would.
    fn kill(&self) {
        self.kill.send_modify(|g| *g += 1);
    }

    fn listen(&self) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.lines.lock() = Some(tx);
        rx
    }
}

/// Waits until the extender received a line starting with `prefix`.
async fn until(lines: &mut mpsc::UnboundedReceiver<String>, prefix: &str) -> String {
    loop {
        let line = lines.recv().await.expect("fake extender running");
        if line.starts_with(prefix) {
            return line;
        }
    }
}

impl Fake {
    fn note(&self, line: String) {
        if let Some(tx) = self.lines.lock().as_ref() {
            let _ = tx.send(line.clone());
        }
        self.log.lock().push(line);
    }

    fn name_of(&self, id: u32) -> String {
        self.names
            .lock()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("unknown-id-{id}"))
    }

    fn pod_name(&self, uid: &str) -> String {
        self.pods
            .lock()
            .get(uid)
            .cloned()
            .unwrap_or_else(|| format!("unknown-uid-{uid}"))
    }

    fn placements(&self, p: &[pb::Placement]) -> String {
        p.iter()
            .map(|p| format!("{}@{}", self.pod_name(&p.uid), self.name_of(p.node_id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn received(&self, kind: &str) -> usize {
        self.received.lock().get(kind).copied().unwrap_or(0)
    }

    fn answer(&self, id: u64, kind: &Kind) -> Option<response::Result> {
        let s = self.script.lock().clone();
        if s.hang.contains(&kind_name(kind)) {
            return None;
        }
        let status = |c: pb::Code| {
            Some(pb::Status {
                code: c as i32,
                reasons: if c == pb::Code::Success {
                    vec![]
                } else {
                    vec![format!("scripted {c:?}")]
                },
            })
        };
        let _ = id;
        Some(match kind {
            Kind::PreFilter(_) => response::Result::PreFilter(pb::PreFilterResponse {
                status: status(pb::Code::Success),
                node_names: None,
            }),
            Kind::Filter(f) => {
                let mut rejected: Vec<pb::NodeStatus> = f
                    .node_ids
                    .iter()
                    .filter(|n| s.reject.contains(&self.name_of(**n).as_str()))
                    .map(|n| pb::NodeStatus {
                        node_id: *n,
                        code: pb::Code::Unschedulable as i32,
                        reasons: vec!["node(s) didn't have a free widget".into()],
                        plugin: String::new(),
                    })
                    .collect();
                if s.garbage {
                    rejected.push(pb::NodeStatus {
                        node_id: 999_999,
                        code: pb::Code::Unschedulable as i32,
                        reasons: vec![],
                        plugin: String::new(),
                    });
                }
                let scores = if f.score {
                    f.node_ids
                        .iter()
                        .map(|n| {
                            s.scores
                                .get(self.name_of(*n).as_str())
                                .copied()
                                .unwrap_or(0)
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                response::Result::Filter(pb::FilterResponse { rejected, scores })
            }
            Kind::Score(sc) => response::Result::Score(pb::ScoreResponse {
                scores: sc
                    .node_ids
                    .iter()
                    .map(|n| {
                        s.scores
                            .get(self.name_of(*n).as_str())
                            .copied()
                            .unwrap_or(0)
                    })
                    .collect(),
            }),
            Kind::PreScore(_) => response::Result::PreScore(pb::PreScoreResponse {
                status: status(pb::Code::Success),
            }),
            Kind::Reserve(_) => response::Result::Reserve(pb::ReserveResponse {
                status: status(s.reserve.unwrap_or(pb::Code::Success)),
            }),
            Kind::Unreserve(_) => response::Result::Unreserve(pb::UnreserveResponse {}),
            Kind::Permit(_) if s.permit_wait => response::Result::Permit(pb::PermitResponse {
                status: status(pb::Code::Wait),
                wait_timeout: Some(prost_types::Duration {
                    seconds: 600,
                    nanos: 0,
                }),
            }),
            Kind::Permit(_) => response::Result::Permit(pb::PermitResponse {
                status: status(pb::Code::Success),
                wait_timeout: None,
            }),
            Kind::PreBind(_) => response::Result::PreBind(pb::PreBindResponse {
                status: status(pb::Code::Success),
            }),
            Kind::Bind(_) => response::Result::Bind(pb::BindResponse {
                status: status(pb::Code::Skip),
            }),
            Kind::PostBind(_) => response::Result::PostBind(pb::PostBindResponse {}),
            Kind::PostFilter(_) | Kind::NormalizeScore(_) => response::Result::Error(pb::Error {
                message: "not scripted".into(),
            }),
            Kind::PlacementFeasible(_) => {
                let c = s.placement.unwrap_or(pb::Code::Success);
                response::Result::PlacementFeasible(pb::PlacementFeasibleResponse {
                    status: Some(pb::Status {
                        code: c as i32,
                        reasons: if c == pb::Code::Success {
                            vec![]
                        } else {
                            vec!["scripted placement".into()]
                        },
                    }),
                })
            }
            Kind::GroupPermit(_) => response::Result::GroupPermit(pb::GroupPermitResponse {
                status: status(s.group_permit.unwrap_or(pb::Code::Success)),
            }),
            Kind::PreemptionFilter(r) => {
                let mut out = pb::PreemptionFilterResponse::default();
                for c in &r.candidates {
                    match s.what_if.get(self.name_of(c.node_id).as_str()) {
                        None => {}
                        Some(WhatIf::Reject) => out.rejected.push(pb::NodeStatus {
                            node_id: c.node_id,
                            code: pb::Code::Unschedulable as i32,
                            reasons: vec!["node(s) had no free widget".into()],
                            plugin: String::new(),
                        }),
                        Some(WhatIf::Needs(names)) => out.needed.push(pb::NeededEvictions {
                            node_id: c.node_id,
                            uids: c
                                .pods
                                .iter()
                                .filter(|p| names.contains(&p.name.as_str()))
                                .map(|p| p.uid.clone())
                                .collect(),
                            reasons: vec!["the victims hold no widget".into()],
                        }),
                    }
                }
                response::Result::PreemptionFilter(out)
            }
            Kind::PodGroupPostFilter(r) => {
                let (c, node) = s
                    .group_post_filter
                    .unwrap_or((pb::Code::Unschedulable, None));
                let mut nominations: Vec<pb::Nomination> = match node {
                    Some(n) if c == pb::Code::Success => r
                        .pods
                        .iter()
                        .map(|p| pb::Nomination {
                            uid: p.uid.clone(),
                            node: n.into(),
                        })
                        .collect(),
                    _ => vec![],
                };
                if s.group_post_filter_garbage {
                    nominations.push(pb::Nomination {
                        uid: "not-a-pod-of-the-cycle".into(),
                        node: "n1".into(),
                    });
                }
                response::Result::PodGroupPostFilter(pb::PodGroupPostFilterResponse {
                    status: status(c),
                    nominations,
                })
            }
        })
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ExtenderMessage, tonic::Status>> + Send>>;

fn out(m: extender_message::Message) -> ExtenderMessage {
    ExtenderMessage { message: Some(m) }
}

#[tonic::async_trait]
impl extender_server::Extender for Fake {
    type SessionStream = Outbound;

    async fn session(
        &self,
        req: tonic::Request<tonic::Streaming<SchedulerMessage>>,
    ) -> Result<tonic::Response<Outbound>, tonic::Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::unbounded_channel::<ExtenderMessage>();
        *self.decider.lock() = Some(tx.clone());
        let fake = self.clone();
        let mut killed = self.kill.subscribe();
        let mut killed_out = self.kill.subscribe();
        tokio::spawn(async move {
            loop {
                let m = tokio::select! {
                    m = inbound.message() => match m {
                        Ok(Some(m)) => m,
                        _ => break,
                    },
                    _ = killed.changed() => break,
                };
                match m.message {
                    Some(Message::Open(o)) => {
                        fake.note(format!("open {}", o.extender_name));
                        let s = fake.script.lock().clone();
                        if s.silent {
                            continue;
                        }
                        let _ = tx.send(out(extender_message::Message::Hello(pb::Hello {
                            name: "fake".into(),
                            protocol_version: s.version.unwrap_or(crate::extender::PROTOCOL_VERSION)
                                as i32,
                            points: s.points.iter().map(|p| *p as i32).collect(),
                            score_normalization: 0,
                            wants_nodes: s.wants_nodes,
                            wants_pods: s.wants_pods,
                            preemption_filter: s.preemption_filter,
                            filter_ignores_pods: s.filter_ignores_pods,
                        })));
                    }
                    Some(Message::NodeUpsert(n)) => {
                        fake.names.lock().insert(n.id, n.name.clone());
                        fake.note(format!("node {}", n.name))
                    }
                    Some(Message::NodeDelete(n)) => {
                        fake.names.lock().remove(&n.id);
                        fake.note(format!("node-delete {}", n.name))
                    }
                    Some(Message::NodesSynced(n)) => fake.note(format!("synced {}", n.nodes)),
                    Some(Message::PodUpsert(p)) => fake.note(format!(
                        "pod #{} {} on {}#{}{}",
                        p.id,
                        p.name,
                        p.node,
                        p.node_id,
                        if p.assumed { " assumed" } else { "" }
                    )),
                    Some(Message::PodDelete(p)) => {
                        fake.note(format!("pod-delete #{} from #{}", p.id, p.node_id))
                    }
                    Some(Message::CycleStart(c)) => {
                        fake.pods.lock().insert(c.uid.clone(), c.name.clone());
                        fake.note(format!("start {}", c.name))
                    }
                    Some(Message::GroupCycleStart(g)) => {
                        let mut pods = fake.pods.lock();
                        for p in g.pods.iter().chain(&g.scheduled) {
                            pods.insert(p.uid.clone(), p.name.clone());
                        }
                        drop(pods);
                        let valid = serde_json::from_slice::<
                            k8s_openapi::api::scheduling::v1beta1::PodGroup,
                        >(&g.pod_group)
                        .is_ok()
                            && g.pods.iter().all(|p| {
                                serde_json::from_slice::<k8s_openapi::api::core::v1::Pod>(&p.pod)
                                    .is_ok()
                            });
                        let names = |m: &[pb::GroupMember]| {
                            m.iter()
                                .map(|p| {
                                    if p.node.is_empty() {
                                        p.name.clone()
                                    } else {
                                        format!("{}@{}", p.name, p.node)
                                    }
                                })
                                .collect::<Vec<_>>()
                                .join(",")
                        };
                        fake.note(format!(
                            "group-start {} pods={} scheduled={}{}",
                            g.name,
                            names(&g.pods),
                            names(&g.scheduled),
                            if valid { "" } else { " INVALID-JSON" }
                        ))
                    }
                    Some(Message::CycleEnd(_)) => fake.note("end".into()),
                    Some(Message::Cancel(_)) => fake.note("cancel".into()),
                    Some(Message::Request(r)) => {
                        let Some(kind) = r.kind else { continue };
                        *fake.received.lock().entry(kind_name(&kind)).or_default() += 1;
                        let names = |ids: &[u32]| {
                            ids.iter()
                                .map(|i| fake.name_of(*i))
                                .collect::<Vec<_>>()
                                .join(",")
                        };
                        let detail = match &kind {
                            Kind::Filter(f) if f.score => format!("{} +score", names(&f.node_ids)),
                            Kind::Filter(f) => names(&f.node_ids),
                            Kind::Score(f) => names(&f.node_ids),
                            Kind::Unreserve(u) => u.name.clone(),
                            Kind::Reserve(u) => u.node.clone(),
                            Kind::Permit(p) => p.reservation_id.clone(),
                            Kind::PlacementFeasible(p) => format!(
                                "{}/{} placed={} failed={}",
                                p.scheduled,
                                p.remaining,
                                fake.placements(&p.placed),
                                p.failed
                            ),
                            Kind::GroupPermit(p) => fake.placements(&p.placement),
                            Kind::PreemptionFilter(p) => format!(
                                "{}{}",
                                if p.dry_run { "dry-run " } else { "" },
                                p.candidates
                                    .iter()
                                    .map(|c| format!(
                                        "{}[{}]",
                                        fake.name_of(c.node_id),
                                        c.pods
                                            .iter()
                                            .map(|p| format!(
                                                "{}{}",
                                                p.name,
                                                if p.victim { "*" } else { "" }
                                            ))
                                            .collect::<Vec<_>>()
                                            .join(",")
                                    ))
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            ),
                            Kind::PostFilter(p) if p.dry_run => "dry-run".into(),
                            Kind::PodGroupPostFilter(p) => format!(
                                "{}{} [{}]",
                                if p.dry_run { "dry-run " } else { "" },
                                p.pods
                                    .iter()
                                    .map(|a| if a.node.is_empty() {
                                        format!("{}:{}", fake.pod_name(&a.uid), a.message)
                                    } else {
                                        format!("{}@{}", fake.pod_name(&a.uid), a.node)
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                p.status
                                    .as_ref()
                                    .map(|s| s.reasons.join(", "))
                                    .unwrap_or_default()
                            ),
                            _ => String::new(),
                        };
                        fake.note(
                            format!("{} {detail}", kind_name(&kind))
                                .trim_end()
                                .to_string(),
                        );
                        if matches!(kind, Kind::Unreserve(_)) {
                            let mut dropped = fake.unreserves_dropped.lock();
                            if *dropped < fake.script.lock().drop_on_unreserve {
                                *dropped += 1;
                                // Close the stream without answering.
                                drop(dropped);
                                fake.kill();
                                return;
                            }
                        }
                        let s = fake.script.lock().clone();
                        if let (true, Kind::Permit(p)) = (s.decide_before_wait, &kind) {
                            // Decided at once, sent before the Wait answer.
                            let _ = tx.send(out(extender_message::Message::PermitDecision(
                                pb::PermitDecision {
                                    reservation_id: p.reservation_id.clone(),
                                    allow: true,
                                    reasons: vec![],
                                },
                            )));
                        }
                        if let Some(result) = fake.answer(r.id, &kind) {
                            let times = if s.duplicate_and_unknown { 2 } else { 1 };
                            for _ in 0..times {
                                let _ = tx.send(out(extender_message::Message::Response(
                                    pb::Response {
                                        id: r.id,
                                        result: Some(result.clone()),
                                    },
                                )));
                            }
                            if s.duplicate_and_unknown {
                                let _ = tx.send(out(extender_message::Message::Response(
                                    pb::Response {
                                        id: r.id + 1_000_000,
                                        result: Some(result),
                                    },
                                )));
                            }
                        }
                    }
                    None => {}
                }
            }
        });
        let outbound = futures::StreamExt::take_until(
            UnboundedReceiverStream::new(rx).map(Ok),
            Box::pin(async move {
                let _ = killed_out.changed().await;
            }),
        );
        Ok(tonic::Response::new(Box::pin(outbound)))
    }
}

/// The scripted extender on a loopback port; dropping the stop sender
/// stops it.
async fn serve(fake: Fake) -> (String, oneshot::Sender<()>) {
    serve_with(fake, None).await
}

async fn serve_with(
    fake: Fake,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).unwrap();
    }
    tokio::spawn(
        builder
            .add_service(extender_server::ExtenderServer::new(fake))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );
    (format!("{scheme}://{addr}"), stop)
}

/// Extenders served in memory: a real tonic server and client over
/// `tokio::io::duplex` pairs instead of TCP, for tests on the paused clock.
pub(super) mod in_memory {
    use std::collections::HashMap;
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use berth_proto::extender::v1::extender_server;
    use futures::FutureExt;
    use parking_lot::Mutex;
    use tokio::io::DuplexStream;
    use tokio::sync::mpsc;
    use tokio_stream::StreamExt;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::Fake;
    use crate::extender::Dial;

    static SERVERS: LazyLock<Mutex<HashMap<String, mpsc::UnboundedSender<DuplexStream>>>> =
        LazyLock::new(Default::default);
    static NEXT: AtomicUsize = AtomicUsize::new(1);

    /// Serves `fake` in memory; the endpoint to configure.
    pub(super) fn serve(fake: Fake) -> String {
        let endpoint = format!(
            "http://in-memory-{}.invalid:1",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = mpsc::unbounded_channel::<DuplexStream>();
        SERVERS.lock().insert(endpoint.clone(), tx);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(extender_server::ExtenderServer::new(fake))
                .serve_with_incoming(UnboundedReceiverStream::new(rx).map(Ok::<_, std::io::Error>)),
        );
        endpoint
    }

    /// How berthd reaches an in-memory extender, if `endpoint` is one.
    pub(in crate::extender) fn dialer(endpoint: &str) -> Option<Dial> {
        let server = SERVERS.lock().get(endpoint)?.clone();
        let endpoint = tonic::transport::Endpoint::from_shared(endpoint.to_string()).ok()?;
        Some(std::sync::Arc::new(move || {
            let server = server.clone();
            let endpoint = endpoint.clone();
            async move {
                let connector = tower::service_fn(move |_: http::Uri| {
                    let (client, served) = tokio::io::duplex(1 << 20);
                    let sent = server.send(served);
                    async move {
                        sent.map_err(|_| {
                            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "stopped")
                        })?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(client))
                    }
                });
                endpoint.connect_with_connector(connector).await
            }
            .boxed()
        }))
    }
}

struct Env {
    cluster: Arc<EmbeddedCluster>,
    scheduler: Scheduler,
    decisions: Decisions,
}

impl Env {
    async fn next(&mut self) -> Decision {
        self.decisions.recv().await.expect("scheduler running")
    }
}

const POINTS: &str =
    "[preFilter, filter, preScore, score, reserve, permit, preBind, bind, postBind]";

fn config(endpoint: &str, extra: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: widgets, weight: 5}}]
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: {POINTS}
  timeout: 10s
{extra}"
    )
}

/// Starts a scheduler on `nodes` with the pods already there: its first
/// cycles run as soon as it starts scheduling.
async fn start_with_pods(yaml: &str, nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Env {
    let cluster = EmbeddedCluster::new();
    for n in nodes {
        cluster.apply_node(n.object()).unwrap();
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
    }
    let registry = in_tree_registry();
    let known = |n: &str| registry.contains(n);
    let cfg = config::parse(yaml, &known).unwrap();
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            seed: Some(1),
            ..Options::default()
        },
    )
    .unwrap();
    let decisions = scheduler.decisions();
    Env {
        cluster,
        scheduler,
        decisions,
    }
}

/// Starts a scheduler on `nodes`, waits for the extender's stream (unless
/// the endpoint is unreachable on purpose), then adds the pods.
async fn start(yaml: &str, nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Env {
    let cluster = EmbeddedCluster::new();
    for n in nodes {
        cluster.apply_node(n.object()).unwrap();
    }
    let registry = in_tree_registry();
    let known = |n: &str| registry.contains(n);
    let cfg = config::parse(yaml, &known).unwrap();
    let scheduler = Scheduler::start(
        &cfg,
        &registry,
        cluster.clone(),
        Options {
            assumed_pod_ttl: Duration::ZERO,
            seed: Some(1),
            leader: None,
            batching: true,
            look_ahead: true,
        },
    )
    .unwrap();
    let decisions = scheduler.decisions();
    scheduler.wait_synced().await;
    // Let the extender connect before pods arrive, so that the first cycle
    // already talks to it.
    let conn = scheduler.extenders().connections()[0].clone();
    if conn.config().endpoint.contains("127.0.0.1:1") {
        // Deliberately unreachable.
    } else {
        let mut connected = conn.connected();
        connected.wait_for(|n| *n > 0).await.unwrap();
    }
    for p in pods {
        cluster.apply_pod(p.object()).unwrap();
    }
    Env {
        cluster,
        scheduler,
        decisions,
    }
}

fn all_points() -> Vec<pb::ExtensionPoint> {
    use pb::ExtensionPoint as P;
    vec![
        P::PreFilter,
        P::Filter,
        P::PreScore,
        P::Score,
        P::Reserve,
        P::Permit,
        P::PreBind,
        P::Bind,
        P::PostBind,
    ]
}

fn three_nodes() -> Vec<NodeBuilder> {
    ["n1", "n2", "n3"]
        .iter()
        .map(|n| make_node(n).cpu("4").memory("8Gi"))
        .collect()
}

fn scheduled(pod: &str, node: &str) -> Decision {
    Decision::Scheduled {
        pod: format!("default/{pod}"),
        node: node.into(),
    }
}

#[tokio::test]
async fn filter_and_score_are_one_batched_call_each_and_decide_the_node() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        wants_nodes: true,
        reject: vec!["n1"],
        scores: HashMap::from([("n2", 10), ("n3", 90)]),
        ..Default::default()
    };
    let mut lines = fake.listen();
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(
        &config(&endpoint, ""),
        three_nodes(),
        vec![make_pod("p").req_cpu("1")],
    )
    .await;
    assert_eq!(env.next().await, scheduled("p", "n3"));
    until(&mut lines, "end").await;
    let log: Vec<String> = fake
        .log
        .lock()
        .iter()
        .map(|l| {
            if l.starts_with("Permit ") {
                "<permit>".to_string()
            } else {
                l.clone()
            }
        })
        .collect();
    assert_eq!(
        log,
        [
            "open widgets",
            "node n1",
            "node n2",
            "node n3",
            "synced 3",
            "start p",
            "PreFilter",
            "Filter n1,n2,n3",
            "PreScore",
            "Score n2,n3",
            "Reserve n3",
            "<permit>",
            "PreBind",
            "PostBind",
            "end",
        ],
        "the pod once, then one request per point; DefaultBinder, first in \
         multiPoint's bind list, binds; the cycle's end is announced"
    );
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason.as_deref() == Some("Scheduled"))
    );
    drop(env.scheduler);
}

#[tokio::test]
async fn an_unreachable_extender_fails_the_attempt_unless_ignorable() {
    let endpoint = "http://127.0.0.1:1";
    let mut env = start(
        &config(endpoint, "  ignorable: false\n  startupTimeout: 0s\n"),
        three_nodes(),
        vec![make_pod("p")],
    )
    .await;
    match env.next().await {
        Decision::Failed {
            reason, message, ..
        } => {
            assert_eq!(reason, "SchedulerError");
            assert!(
                message.contains("extender \"widgets\" failed at PreFilter: not connected"),
                "{message}"
            );
        }
        d => panic!("expected a failure, got {d:?}"),
    }

    let mut env = start(
        &config(endpoint, "  ignorable: true\n  startupTimeout: 0s\n"),
        three_nodes(),
        vec![make_pod("p")],
    )
    .await;
    assert!(matches!(env.next().await, Decision::Scheduled { .. }));
    let conn = &env.scheduler.extenders().connections()[0];
    assert!(conn.metrics().skipped.get() >= 1);
}

#[tokio::test]
async fn garbage_answers_are_failures_not_verdicts() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        garbage: true,
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    match env.next().await {
        Decision::Failed { message, .. } => assert!(
            message.contains(
                "malformed answer: a verdict for node id 999999, which was not asked about"
            ),
            "{message}"
        ),
        d => panic!("expected a failure, got {d:?}"),
    }
}

#[tokio::test]
async fn pods_without_a_managed_resource_never_reach_the_extender() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        reject: vec!["n1", "n2"],
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let nodes = three_nodes()
        .into_iter()
        .map(|n| n.alloc("example.com/widget", "4"))
        .collect();
    let mut env = start(
        &config(
            &endpoint,
            "  managedResources: [{name: example.com/widget, ignoredByScheduler: true}]\n",
        ),
        nodes,
        vec![make_pod("plain")],
    )
    .await;
    assert!(matches!(env.next().await, Decision::Scheduled { .. }));
    assert!(
        !fake.log.lock().iter().any(|l| l.starts_with("start")),
        "{:?}",
        fake.log.lock()
    );
    // A pod requesting the resource does reach it, and only n3 passes.
    env.cluster
        .apply_pod(make_pod("wants").req("example.com/widget", "1").object())
        .unwrap();
    assert_eq!(env.next().await, scheduled("wants", "n3"));
    assert!(fake.log.lock().contains(&"start wants".to_string()));
}

#[tokio::test]
async fn an_unreserve_survives_a_broken_stream_and_is_resent_until_acknowledged() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        reserve: Some(pb::Code::Unschedulable),
        drop_on_unreserve: 1,
        ..Default::default()
    };
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    *fake.lines.lock() = Some(lines_tx);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    assert!(matches!(env.next().await, Decision::Failed { .. }));
    let conn = env.scheduler.extenders().connections()[0].clone();
    // The first Unreserve was swallowed by a closing stream; the next stream
    // carries it again, and the extender's acknowledgement empties the
    // outbox.
    let mut unreserves = 0;
    while unreserves < 2 {
        let line = lines.recv().await.unwrap();
        if line.starts_with("Unreserve") {
            unreserves += 1;
        }
    }
    let mut outbox = conn.outbox();
    outbox.wait_for(|n| *n == 0).await.unwrap();
    assert!(conn.metrics().sessions.get() >= 2);
    let log = fake.log.lock().clone();
    assert!(
        log.iter().filter(|l| l.starts_with("open")).count() >= 2,
        "{log:?}"
    );
}

#[tokio::test]
async fn a_pod_waits_at_permit_until_the_extender_decides() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        permit_wait: true,
        ..Default::default()
    };
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    *fake.lines.lock() = Some(lines_tx);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    let reservation = loop {
        let line = lines.recv().await.unwrap();
        if let Some(id) = line.strip_prefix("Permit ") {
            break id.to_string();
        }
    };
    // Decide at once: the decision may even overtake the pod's parking.
    let decider = fake.decider.lock().clone().unwrap();
    decider
        .send(out(extender_message::Message::PermitDecision(
            pb::PermitDecision {
                reservation_id: reservation,
                allow: true,
                reasons: vec![],
            },
        )))
        .unwrap();
    assert!(matches!(env.next().await, Decision::Scheduled { .. }));
}

#[tokio::test]
async fn a_pod_waiting_on_an_extender_that_disconnects_is_rejected_and_unreserved() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        permit_wait: true,
        ..Default::default()
    };
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    *fake.lines.lock() = Some(lines_tx);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    loop {
        if lines.recv().await.unwrap().starts_with("Permit ") {
            break;
        }
    }
    // The extender goes away: its stream ends.
    fake.kill();
    match env.next().await {
        Decision::Failed { message, .. } => assert!(
            message.contains("extender \"widgets\" disconnected while the pod waited at Permit"),
            "{message}"
        ),
        d => panic!("expected a failure, got {d:?}"),
    }
    let conn = env.scheduler.extenders().connections()[0].clone();
    assert_eq!(
        conn.pending_unreserves(),
        1,
        "queued until the extender is back"
    );
}

/// A CA and a server certificate for 127.0.0.1, PEM.
fn pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_pem, cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn extenders_are_reached_over_tls_verified_against_the_configured_ca() {
    let (ca, cert, key) = pki();
    let dir = std::env::temp_dir().join(format!("berth-ext-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        reject: vec!["n1", "n2"],
        ..Default::default()
    };
    let tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(cert, key));
    let (endpoint, _stop) = serve_with(fake.clone(), Some(tls)).await;
    let extra = format!("  tls: {{caFile: {:?}}}\n", ca_file.display().to_string());
    let mut env = start(
        &config(&endpoint, &extra),
        three_nodes(),
        vec![make_pod("p")],
    )
    .await;
    assert_eq!(env.next().await, scheduled("p", "n3"));

    // A CA file that is not there stops startup naming the field.
    let registry = in_tree_registry();
    let known = |n: &str| registry.contains(n);
    let missing = format!(
        "  tls: {{caFile: {:?}}}\n",
        dir.join("nope.pem").display().to_string()
    );
    let cfg = config::parse(&config(&endpoint, &missing), &known).unwrap();
    let Err(err) = Scheduler::start(&cfg, &registry, EmbeddedCluster::new(), Options::default())
    else {
        panic!("startup should fail");
    };
    assert!(
        err.to_string()
            .starts_with("berthExtenders[0].tls.caFile: cannot read"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Captures this thread's log lines (a `#[tokio::test]` runtime runs every
/// task on the test's thread) until the guard is dropped.
///
/// One process-wide subscriber writes each event to the buffer of the
/// thread that emitted it, if that thread is capturing: a global subscriber,
/// because callsites first hit with no subscriber at all could otherwise be
/// cached as never enabled while another test captures.
fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, CaptureGuard) {
    use std::cell::RefCell;
    thread_local! {
        static CAPTURE: RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { RefCell::new(None) };
    }
    struct ThreadWriter;
    impl std::io::Write for ThreadWriter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|c| {
                if let Some(buf) = c.borrow().as_ref() {
                    buf.lock().extend_from_slice(b);
                }
            });
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadWriter)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        // Another test binary's setup may have set one: then this module's
        // log assertions cannot hold, and say so by failing.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    let buf = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|c| *c.borrow_mut() = Some(buf.clone()));
    fn stop() {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
    (buf, CaptureGuard(stop))
}

/// Stops a capture when dropped.
struct CaptureGuard(fn());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        (self.0)()
    }
}

fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock()).into_owned()
}

fn failed_message(d: Decision) -> String {
    match d {
        Decision::Failed { message, .. } => message,
        d => panic!("expected a failure, got {d:?}"),
    }
}

/// Issue 13, item 1: an extender already listening when berthd starts is
/// asked from the very first cycle. (Before the startup gate, the first
/// cycles ran before its handshake: `not connected`.)
#[tokio::test]
async fn an_extender_listening_when_berthd_starts_is_asked_from_the_first_cycle() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        reject: vec!["n1", "n2"],
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    // The pods are there before the scheduler starts: nothing waits for
    // the extender but the scheduler itself.
    let mut env = start_with_pods(
        &config(&endpoint, ""),
        three_nodes(),
        vec![make_pod("first"), make_pod("second")],
    )
    .await;
    let mut got = vec![env.next().await, env.next().await];
    got.sort_by_key(|d| format!("{d:?}"));
    assert_eq!(got, [scheduled("first", "n3"), scheduled("second", "n3")]);
    assert_eq!(fake.received("Filter"), 2);
    assert_eq!(env.scheduler.extenders().readiness(), Ok(()));
}

/// Item 1: an extender that never completes its handshake holds scheduling
/// back for its startupTimeout (the `/readyz` check says which extender
/// and why), then the usual rules apply: a non-ignorable one fails the
/// attempts, naming what is wrong.
#[tokio::test(start_paused = true)]
async fn scheduling_waits_for_a_silent_extender_until_its_startup_timeout_then_fails_attempts() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        silent: true,
        ..Default::default()
    };
    let endpoint = in_memory::serve(fake.clone());
    let (logs, _guard) = capture_logs();
    let started = tokio::time::Instant::now();
    let mut env = start_with_pods(
        &config(&endpoint, "  startupTimeout: 30s\n"),
        three_nodes(),
        vec![make_pod("p")],
    )
    .await;
    env.scheduler.wait_synced().await;
    // Held back, and /readyz says by whom.
    let mut lines = fake.listen();
    until(&mut lines, "open").await;
    let holdup = env.scheduler.extenders().readiness().unwrap_err();
    assert!(
        holdup.starts_with("waiting for extenders before scheduling: widgets: no Hello yet"),
        "{holdup}"
    );
    let message = failed_message(env.next().await);
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "not before the startup timeout: {:?}",
        started.elapsed()
    );
    assert!(
        message.contains(
            "extender \"widgets\" failed at PreFilter: not connected (no Hello within 10s)"
        ),
        "{message}"
    );
    assert_eq!(env.scheduler.extenders().readiness(), Ok(()));
    let log = text(&logs);
    assert!(
        log.contains("extender \"widgets\" not ready after its startupTimeout of 30s: no Hello yet (the last attempt: no Hello within 10s); scheduling starts without it: its points fail the attempts"),
        "{log}"
    );
}

/// Item 1: an extender that speaks the first protocol version is refused
/// at Hello with a message saying what to change.
#[tokio::test(start_paused = true)]
async fn an_extender_of_protocol_version_1_is_refused_saying_what_to_change() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        version: Some(pb::ProtocolVersion::ProtocolVersion1),
        ..Default::default()
    };
    let endpoint = in_memory::serve(fake.clone());
    let (logs, _guard) = capture_logs();
    let mut env = start_with_pods(
        &config(&endpoint, "  startupTimeout: 1s\n"),
        three_nodes(),
        vec![make_pod("p")],
    )
    .await;
    let message = failed_message(env.next().await);
    assert!(
        message.contains("its Hello was refused: it speaks protocol version 1, which berthd no longer accepts: berthd speaks version 2, where requests name nodes by the ids NodeUpsert assigns"),
        "{message}"
    );
    assert!(
        text(&logs).contains("declare PROTOCOL_VERSION_2 in Hello"),
        "{}",
        text(&logs)
    );
}

/// Item 2: a PermitDecision that comes before its Wait answer (a
/// multithreaded extender decided while the answer was on its way) is
/// kept and applied: the pod is bound at once, not after the 10-minute
/// wait the answer asked for.
#[tokio::test(start_paused = true)]
async fn a_permit_decision_before_its_wait_answer_is_kept_until_the_answer() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        permit_wait: true,
        decide_before_wait: true,
        ..Default::default()
    };
    let endpoint = in_memory::serve(fake.clone());
    let started = tokio::time::Instant::now();
    let mut env = start_with_pods(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    assert!(matches!(env.next().await, Decision::Scheduled { .. }));
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "the pod waited out its timeout: {:?}",
        started.elapsed()
    );
    let conn = &env.scheduler.extenders().connections()[0];
    assert_eq!(
        conn.metrics().protocol_errors(5),
        0,
        "the decision was used"
    );
}

/// Item 2: answers berthd cannot use (a second answer to a request, an
/// answer to a request never sent) and decisions for reservations that do
/// not wait, or were already decided, are WARNs naming the extender and
/// counted by kind; the real requests are answered as usual.
#[tokio::test(start_paused = true)]
async fn unusable_messages_are_warned_about_and_counted_by_kind() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        permit_wait: true,
        duplicate_and_unknown: true,
        ..Default::default()
    };
    let (logs, _guard) = capture_logs();
    let mut lines = fake.listen();
    let endpoint = in_memory::serve(fake.clone());
    let mut env = start_with_pods(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    let reservation = loop {
        let line = lines.recv().await.unwrap();
        if let Some(id) = line.strip_prefix("Permit ") {
            break id.to_string();
        }
    };
    let decider = fake.decider.lock().clone().unwrap();
    let decide = |reservation: &str, allow: bool| {
        decider
            .send(out(extender_message::Message::PermitDecision(
                pb::PermitDecision {
                    reservation_id: reservation.into(),
                    allow,
                    reasons: vec![],
                },
            )))
            .unwrap();
    };
    decide("no-such-reservation", true);
    decide(&reservation, true);
    decide(&reservation, false);
    assert_eq!(env.next().await, scheduled("p", "n1"));
    // On the paused clock this returns once nothing is left to do: every
    // message in flight (in memory) has been handled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered: usize = [
        "PreFilter",
        "Filter",
        "PreScore",
        "Score",
        "Reserve",
        "Permit",
        "PreBind",
        "PostBind",
    ]
    .iter()
    .map(|k| fake.received(k))
    .sum();
    assert_eq!(answered, 8, "one request per point");
    let conn = env.scheduler.extenders().connections()[0].clone();
    let got: HashMap<&str, u64> = crate::metrics::PROTOCOL_ERROR_KINDS
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, conn.metrics().protocol_errors(i)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        got,
        HashMap::from([
            ("duplicate_response", 8),
            ("unknown_request_id", 8),
            ("unknown_reservation", 1),
            ("repeated_decision", 1),
        ])
    );
    let log = text(&logs);
    for want in [
        "extender \"widgets\" sent a message berthd cannot use: a second answer to request",
        "extender \"widgets\" sent a message berthd cannot use: an answer to request 1000",
        "extender \"widgets\" sent a message berthd cannot use: a PermitDecision (allow) for reservation no-such-reservation, which does not wait at Permit on this extender",
        "which was already decided: it contradicts the first, which stands",
    ] {
        assert!(log.contains(want), "{want:?} not in:\n{log}");
    }
    let exposition = crate::observe::render(&env.scheduler);
    assert!(
        exposition.contains(
            r#"berth_extender_protocol_errors_total{extender="widgets",kind="repeated_decision"} 1"#
        ),
        "{exposition}"
    );
}

/// Item 3: a Reserve answered with CODE_SKIP fails the attempt with a
/// text saying which code came and which were expected (it was empty).
#[tokio::test]
async fn a_reserve_answered_skip_fails_saying_what_was_answered_and_what_was_expected() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: all_points(),
        reserve: Some(pb::Code::Skip),
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = start(&config(&endpoint, ""), three_nodes(), vec![make_pod("p")]).await;
    let message = failed_message(env.next().await);
    assert!(
        message.contains(r#"running Reserve plugin "widgets": extender "widgets" failed at Reserve: malformed answer: Reserve answered CODE_SKIP, but Reserve answers CODE_SUCCESS, CODE_UNSCHEDULABLE, CODE_UNSCHEDULABLE_AND_UNRESOLVABLE or CODE_ERROR"#),
        "{message}"
    );
}

/// The first decision of each of `n` pods named `p0`..: (pod, decision).
async fn first_decisions(env: &mut Env, n: usize) -> Vec<(String, Decision)> {
    let mut seen: Vec<(String, Decision)> = Vec::new();
    while seen.len() < n {
        let d = env.next().await;
        let pod = match &d {
            Decision::Scheduled { pod, .. } | Decision::Failed { pod, .. } => pod.clone(),
        };
        if !seen.iter().any(|(p, _)| *p == pod) {
            seen.push((pod, d));
        }
    }
    seen
}

/// Item 4: a hung extender costs its timeout for the first calls only; the
/// circuit breaker then fails a non-ignorable extender's attempts at once,
/// saying why: twenty pods are decided in seconds, not twenty timeouts.
#[tokio::test(start_paused = true)]
async fn a_hung_extender_opens_the_circuit_breaker_and_twenty_pods_are_decided_quickly() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        hang: vec!["Filter"],
        ..Default::default()
    };
    let endpoint = in_memory::serve(fake.clone());
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter]
  timeout: 1s
"
    );
    let pods = (0..20).map(|i| make_pod(&format!("p{i:02}"))).collect();
    let started = tokio::time::Instant::now();
    let mut env = start_with_pods(&yaml, three_nodes(), pods).await;
    let decided = first_decisions(&mut env, 20).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "twenty pods took {took:?}: one timeout each?"
    );
    let conn = env.scheduler.extenders().connections()[0].clone();
    assert_eq!(conn.circuit_state(), "open");
    // Only calls sent before the breaker opened reached the extender: the
    // first pod's and the sixteen sent ahead at once while it waited (the
    // look-ahead, after an idle queue); no more were sent ahead while
    // eight or more of those were left unused.
    assert_eq!(
        fake.received("Filter"),
        17,
        "only the calls before the breaker opened reached the extender"
    );
    let messages: Vec<String> = decided
        .into_iter()
        .map(|(_, d)| failed_message(d))
        .collect();
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.contains("failed at Filter: no answer within 1s"))
            .count(),
        17
    );
    let fast: Vec<&String> = messages
        .iter()
        .filter(|m| {
            // 5 failed calls opened it; those under way failed after.
            m.contains("failed at Filter: circuit breaker open after ")
                && m.contains(" failed calls in a row (the last: no answer within 1s); calls fail at once for")
        })
        .collect();
    // The seventeen pods whose calls had left failed on their timeouts,
    // all within the same second (their calls were under way together);
    // the breaker refused the other three at once.
    assert_eq!(fast.len(), 3, "{messages:#?}");
    assert_eq!(conn.metrics().circuit_opened.get(), 1);
}

/// Item 4: an ignorable extender that hangs is skipped at once while the
/// breaker is open: twenty pods are bound quickly.
#[tokio::test(start_paused = true)]
async fn a_hung_ignorable_extender_is_skipped_at_once_while_the_breaker_is_open() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        hang: vec!["Filter"],
        ..Default::default()
    };
    let endpoint = in_memory::serve(fake.clone());
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter]
  timeout: 1s
  ignorable: true
  circuitBreaker: {{consecutiveFailures: 3, coolDown: 1m}}
"
    );
    let pods = (0..20).map(|i| make_pod(&format!("p{i:02}"))).collect();
    let started = tokio::time::Instant::now();
    let mut env = start_with_pods(&yaml, three_nodes(), pods).await;
    let decided = first_decisions(&mut env, 20).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        decided
            .iter()
            .all(|(_, d)| matches!(d, Decision::Scheduled { .. }))
    );
    // The first pod's and the sixteen sent ahead while it waited; the
    // third failure opened the breaker before more were sent.
    assert_eq!(fake.received("Filter"), 17);
    let conn = &env.scheduler.extenders().connections()[0];
    assert_eq!(conn.metrics().skipped.get(), 20);
}

/// Item 6: where the extender serves Filter and Score and the profile runs
/// no PreScore of it, Filter brings the scores: one round trip, and the
/// same node as the sequential path.
#[tokio::test]
async fn filter_brings_the_scores_in_one_round_trip_when_no_pre_score_runs_first() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter, pb::ExtensionPoint::Score],
        reject: vec!["n1"],
        scores: HashMap::from([("n2", 10), ("n3", 90)]),
        ..Default::default()
    };
    let mut lines = fake.listen();
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
    score: {{enabled: [{{name: widgets, weight: 5}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter, score]
"
    );
    let mut env = start(&yaml, three_nodes(), vec![make_pod("p").req_cpu("1")]).await;
    assert_eq!(env.next().await, scheduled("p", "n3"));
    until(&mut lines, "end").await;
    let requests: Vec<String> = fake
        .log
        .lock()
        .iter()
        .filter(|l| l.starts_with("Filter") || l.starts_with("Score"))
        .cloned()
        .collect();
    assert_eq!(requests, ["Filter n1,n2,n3 +score"]);
}
