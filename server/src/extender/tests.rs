//! The scheduler side of the extender protocol against a scripted extender
//! served by a real gRPC server on a loopback port.

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

/// What the scripted extender does.
#[derive(Clone, Default)]
struct Script {
    points: Vec<pb::ExtensionPoint>,
    wants_nodes: bool,
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
    }
}

#[derive(Clone, Default)]
struct Fake {
    script: Arc<Mutex<Script>>,
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
                    .nodes
                    .iter()
                    .filter(|n| s.reject.contains(&n.as_str()))
                    .map(|n| pb::NodeStatus {
                        node: n.clone(),
                        code: pb::Code::Unschedulable as i32,
                        reasons: vec!["node(s) didn't have a free widget".into()],
                        plugin: String::new(),
                    })
                    .collect();
                if s.garbage {
                    rejected.push(pb::NodeStatus {
                        node: "no-such-node".into(),
                        code: pb::Code::Unschedulable as i32,
                        reasons: vec![],
                        plugin: String::new(),
                    });
                }
                response::Result::Filter(pb::FilterResponse { rejected })
            }
            Kind::Score(sc) => response::Result::Score(pb::ScoreResponse {
                scores: sc
                    .nodes
                    .iter()
                    .map(|n| s.scores.get(n.as_str()).copied().unwrap_or(0))
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
                        let _ = tx.send(out(extender_message::Message::Hello(pb::Hello {
                            name: "fake".into(),
                            protocol_version: pb::ProtocolVersion::ProtocolVersion1 as i32,
                            points: s.points.iter().map(|p| *p as i32).collect(),
                            score_normalization: 0,
                            wants_nodes: s.wants_nodes,
                        })));
                    }
                    Some(Message::NodeUpsert(n)) => fake.note(format!("node {}", n.name)),
                    Some(Message::NodeDelete(n)) => fake.note(format!("node-delete {}", n.name)),
                    Some(Message::NodesSynced(n)) => fake.note(format!("synced {}", n.nodes)),
                    Some(Message::CycleStart(c)) => fake.note(format!("start {}", c.name)),
                    Some(Message::CycleEnd(_)) => fake.note("end".into()),
                    Some(Message::Cancel(_)) => fake.note("cancel".into()),
                    Some(Message::Request(r)) => {
                        let Some(kind) = r.kind else { continue };
                        let detail = match &kind {
                            Kind::Filter(f) => f.nodes.join(","),
                            Kind::Score(f) => f.nodes.join(","),
                            Kind::Unreserve(u) => u.name.clone(),
                            Kind::Reserve(u) => u.node.clone(),
                            Kind::Permit(p) => p.reservation_id.clone(),
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
                        if let Some(result) = fake.answer(r.id, &kind) {
                            let _ =
                                tx.send(out(extender_message::Message::Response(pb::Response {
                                    id: r.id,
                                    result: Some(result),
                                })));
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
        &config(endpoint, "  ignorable: false\n"),
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
        &config(endpoint, "  ignorable: true\n"),
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
            message.contains("malformed answer: a verdict for node \"no-such-node\""),
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
