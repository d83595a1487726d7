//! A fake berthd for the SDK's tests: it serves an extender on a loopback
//! port and speaks the protocol to it through the real generated client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use berth_extender::proto::{
    self as pb, extender_client::ExtenderClient, extender_message::Message as Out, request::Kind,
    response::Result as Reply, scheduler_message::Message as In,
};
use berth_extender::{Extender, ServeError};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// How long a test waits for an answer before declaring the extender hung
/// (a guard only: tests wait for messages, not for time).
pub const GUARD: Duration = Duration::from_secs(20);

/// An extender served on 127.0.0.1.
pub struct Served {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), ServeError>>>,
}

impl Served {
    pub async fn start(ext: Extender) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(ext.serve_with_incoming_shutdown(listener, async move {
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            stop: Some(stop),
            server: Some(server),
        })
    }

    pub async fn session(&self) -> Result<Session> {
        Session::open(self.addr).await
    }

    /// Triggers the graceful shutdown and waits for `serve` to return.
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let server = self.server.take().context("already shut down")?;
        tokio::time::timeout(GUARD, server)
            .await
            .map_err(|_| anyhow!("serve did not return after shutdown"))???;
        Ok(())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.abort();
        }
    }
}

/// One Session stream, from berthd's side.
pub struct Session {
    tx: Option<mpsc::UnboundedSender<pb::SchedulerMessage>>,
    rx: tonic::Streaming<pb::ExtenderMessage>,
    /// Messages read but not yet taken.
    buffered: Vec<Out>,
    pub hello: pb::Hello,
}

impl Session {
    /// Connects, sends Open and reads Hello.
    pub async fn open(addr: SocketAddr) -> Result<Self> {
        let mut s = Self::connect(addr, Some(open())).await?;
        match s.next().await? {
            Out::Hello(h) => s.hello = h,
            other => bail!("expected Hello first, got {other:?}"),
        }
        Ok(s)
    }

    /// Connects and sends `first` (if any) without reading.
    pub async fn connect(addr: SocketAddr, first: Option<In>) -> Result<Self> {
        let mut client = ExtenderClient::connect(format!("http://{addr}")).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(m) = first {
            tx.send(pb::SchedulerMessage { message: Some(m) })?;
        }
        let resp = client.session(UnboundedReceiverStream::new(rx)).await?;
        Ok(Self {
            tx: Some(tx),
            rx: resp.into_inner(),
            buffered: Vec::new(),
            hello: pb::Hello::default(),
        })
    }

    pub fn send(&self, m: In) -> Result<()> {
        self.send_raw(pb::SchedulerMessage { message: Some(m) })
    }

    pub fn send_raw(&self, m: pb::SchedulerMessage) -> Result<()> {
        self.tx
            .as_ref()
            .context("the session was closed")?
            .send(m)
            .map_err(|_| anyhow!("the stream is gone"))
    }

    pub fn request(&self, id: u64, cycle_id: u64, kind: Kind) -> Result<()> {
        self.send(In::Request(pb::Request {
            id,
            cycle_id,
            timeout: Some(prost_duration(Duration::from_secs(30))),
            kind: Some(kind),
        }))
    }

    pub fn request_with_timeout(
        &self,
        id: u64,
        cycle_id: u64,
        timeout: Duration,
        kind: Kind,
    ) -> Result<()> {
        self.send(In::Request(pb::Request {
            id,
            cycle_id,
            timeout: Some(prost_duration(timeout)),
            kind: Some(kind),
        }))
    }

    /// Ends berthd's side of the stream.
    pub fn close(&mut self) {
        self.tx = None;
    }

    /// The next message from the extender (buffered ones first).
    pub async fn next(&mut self) -> Result<Out> {
        if !self.buffered.is_empty() {
            return Ok(self.buffered.remove(0));
        }
        self.read().await?.context("the extender ended the stream")
    }

    /// Reads one message from the stream; None when it ended cleanly.
    pub async fn read(&mut self) -> Result<Option<Out>> {
        let m = tokio::time::timeout(GUARD, self.rx.message())
            .await
            .map_err(|_| anyhow!("no message from the extender within {GUARD:?}"))??;
        match m {
            None => Ok(None),
            Some(m) => Ok(Some(m.message.context("an empty ExtenderMessage")?)),
        }
    }

    /// The answer to request `id` (other messages stay buffered).
    pub async fn response(&mut self, id: u64) -> Result<Reply> {
        let pos = self
            .buffered
            .iter()
            .position(|m| matches!(m, Out::Response(r) if r.id == id));
        if let Some(pos) = pos
            && let Out::Response(r) = self.buffered.remove(pos)
        {
            return r.result.context("a response without a result");
        }
        loop {
            let m = self
                .read()
                .await?
                .with_context(|| format!("the stream ended before the answer to {id}"))?;
            match m {
                Out::Response(r) if r.id == id => {
                    return r.result.context("a response without a result");
                }
                other => self.buffered.push(other),
            }
        }
    }

    /// The answer to request `id`, which must be an error: its message.
    pub async fn error(&mut self, id: u64) -> Result<String> {
        match self.response(id).await? {
            Reply::Error(e) => Ok(e.message),
            other => bail!("expected an error for request {id}, got {other:?}"),
        }
    }

    /// The next PermitDecision (other messages stay buffered).
    pub async fn decision(&mut self) -> Result<pb::PermitDecision> {
        let pos = self
            .buffered
            .iter()
            .position(|m| matches!(m, Out::PermitDecision(_)));
        if let Some(pos) = pos
            && let Out::PermitDecision(d) = self.buffered.remove(pos)
        {
            return Ok(d);
        }
        loop {
            match self.read().await?.context("the stream ended")? {
                Out::PermitDecision(d) => return Ok(d),
                other => self.buffered.push(other),
            }
        }
    }

    /// Sends every node, then NodesSynced.
    pub fn nodes(&self, nodes: &[serde_json::Value]) -> Result<()> {
        for n in nodes {
            self.send(node_upsert(n)?)?;
        }
        self.send(In::NodesSynced(pb::NodesSynced {
            nodes: nodes.len() as u32,
        }))
    }

    /// Sends table entries (without objects) for `names`.
    pub fn known(&self, names: &[&str]) -> Result<()> {
        for n in names {
            self.send(node_id_only(n))?;
        }
        Ok(())
    }

    /// Starts cycle `cycle_id` for `pod`.
    pub fn cycle(&self, cycle_id: u64, pod: &serde_json::Value) -> Result<()> {
        let meta = &pod["metadata"];
        self.send(In::CycleStart(pb::CycleStart {
            cycle_id,
            pod: serde_json::to_vec(pod)?,
            namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
        }))
    }
}

pub fn open() -> In {
    In::Open(pb::Open {
        protocol_version: pb::ProtocolVersion::ProtocolVersion2 as i32,
        extender_name: "test".into(),
        scheduler: "fake-berthd/0".into(),
    })
}

pub fn node_upsert(n: &serde_json::Value) -> Result<In> {
    let name = n["metadata"]["name"]
        .as_str()
        .context("node without a name")?
        .to_string();
    Ok(In::NodeUpsert(pb::NodeUpsert {
        id: id(&name),
        name,
        node: serde_json::to_vec(n)?,
    }))
}

/// The id this fake berthd gives the node named `name` (FNV-1a: stable,
/// distinct for the few names a test uses).
pub fn id(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// The ids of `names`.
pub fn ids(names: &[&str]) -> Vec<u32> {
    names.iter().map(|n| id(n)).collect()
}

/// A node table entry without the object (what a stream that does not want
/// nodes gets).
pub fn node_id_only(name: &str) -> In {
    In::NodeUpsert(pb::NodeUpsert {
        id: id(name),
        name: name.into(),
        node: Vec::new(),
    })
}

pub fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

pub fn node(name: &str, labels: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
    })
}

pub fn pod(name: &str, uid: &str, labels: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    })
}

pub fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub fn code(status: &Option<pb::Status>) -> Option<pb::Code> {
    status
        .as_ref()
        .and_then(|s| pb::Code::try_from(s.code).ok())
}
