//! [`Recorder`]: `berthd --record FILE`.
//!
//! The scheduler hands every change its event handler takes and every
//! decision it records to [`Observer`]; the recorder turns them into
//! records on a thread of its own (encoding and compressing off the
//! scheduling loop: the loop only sends `Arc`s down a channel) and appends
//! them to FILE.
//!
//! Rotation: when FILE passes `max_bytes`, it is closed and renamed
//! FILE.1 (FILE.1 becomes FILE.2, ...; at most `keep` old segments are
//! kept), and a new FILE starts with a header and the cluster's state as
//! the recorder knows it (every object, as `add`, then `synced`), so that
//! every segment replays alone, and the segments in order replay as one.
//! To that end the writer keeps each live object's last JSON: as much
//! memory as the cluster's objects take once encoded.
//!
//! The file is flushed (a gzip sync point) at most once a second while
//! records come, so a recording cut short (berthd killed) still reads up
//! to its last second.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;

use super::format::{self, Body, Deleted, Header, Placed, PodKey, Preempted, Unplaced};
use super::observer::Observer;
use crate::cache::KubeObject;
use crate::cluster::{ClusterChange, WatchEvent};
use crate::framework::PodEvent;
use crate::model::PodRef;

/// How to record.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// The file (its rotated segments are FILE.1, FILE.2, ...).
    pub path: PathBuf,
    /// Rotate once the file holds this many (compressed) bytes; 0: never.
    pub max_bytes: u64,
    /// How many rotated segments to keep.
    pub keep: usize,
    /// `embedded` or `kube`.
    pub source: &'static str,
    /// The scheduler's `--seed`.
    pub seed: Option<u64>,
    /// The scheduler names of its profiles.
    pub profiles: Vec<String>,
}

/// Why recording could not start.
#[derive(Debug, thiserror::Error)]
#[error("--record {path}: {source}")]
pub struct RecordError {
    path: String,
    source: std::io::Error,
}

/// An object as the scheduler received it.
enum Obj {
    Node(Arc<Node>),
    Pod(Arc<Pod>),
    /// A pod kube mode decoded and packed.
    PodInfo(PodRef),
    Other(KubeObject),
}

impl Obj {
    fn json(&self) -> Vec<u8> {
        match self {
            Self::Node(n) => serde_json::to_vec(&**n).unwrap_or_default(),
            Self::Pod(p) => serde_json::to_vec(&**p).unwrap_or_default(),
            Self::PodInfo(p) => p.pod.to_json(),
            Self::Other(o) => serde_json::to_vec(&o.to_json()).unwrap_or_default(),
        }
    }

    /// (kind, namespace, name, uid).
    fn key(&self) -> (&'static str, String, String, String) {
        let meta = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
                m.uid.clone().unwrap_or_default(),
            )
        };
        match self {
            Self::Node(n) => {
                let (ns, name, uid) = meta(&n.metadata);
                ("Node", ns, name, uid)
            }
            Self::Pod(p) => {
                let (ns, name, uid) = meta(&p.metadata);
                ("Pod", ns, name, uid)
            }
            Self::PodInfo(p) => (
                "Pod",
                p.namespace.to_string(),
                p.name.to_string(),
                p.uid.to_string(),
            ),
            Self::Other(o) => {
                let (ns, name, uid) = meta(o.metadata());
                let ns = if o.kind().namespaced() {
                    ns
                } else {
                    String::new()
                };
                (o.kind().type_meta().1, ns, name, uid)
            }
        }
    }

    fn node_name(&self) -> Option<String> {
        match self {
            Self::Pod(p) => p.spec.as_ref().and_then(|s| s.node_name.clone()),
            Self::PodInfo(p) => p.node_name.as_deref().map(str::to_string),
            _ => None,
        }
    }
}

enum Item {
    Add(Obj),
    /// `old` and `new`: the writer records it only if what scheduling
    /// reads changed.
    Update(Obj, Obj),
    Delete(Obj),
    Synced,
    Decision(Body),
}

enum Msg {
    Item(u64, Item),
    Close(mpsc::Sender<()>),
}

/// Appends what the scheduler sees and decides to a trace file (see the
/// module's doc).
pub struct Recorder {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    start: Instant,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    synced: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// Creates (or truncates) the file and starts the writer thread.
    pub fn start(options: RecorderOptions) -> Result<Arc<Self>, RecordError> {
        let shown = options.path.display().to_string();
        let err = |source| RecordError {
            path: shown.clone(),
            source,
        };
        let started = jiff::Timestamp::now().to_string();
        let header = Header {
            berth_trace: format::VERSION,
            started,
            source: options.source.to_string(),
            segment: 0,
            seed: options.seed,
            profiles: options.profiles.clone(),
        };
        let file = open(&options.path).map_err(err)?;
        let writer = format::Writer::new(Counting::new(file), &header).map_err(err)?;
        let (tx, rx) = mpsc::channel();
        let mut w = SegmentWriter {
            options,
            header,
            writer: Some(writer),
            state: BTreeMap::new(),
            bound: HashMap::new(),
            evicted: Default::default(),
            last_t: 0,
        };
        let thread = std::thread::Builder::new()
            .name("berth-recorder".into())
            .spawn(move || w.run(rx))
            .map_err(err)?;
        Ok(Arc::new(Self {
            tx: Mutex::new(Some(tx)),
            start: Instant::now(),
            thread: Mutex::new(Some(thread)),
            synced: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    fn send(&self, item: Item) {
        let t = self.start.elapsed().as_micros() as u64;
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(Msg::Item(t, item));
        }
    }

    /// Writes what is queued, ends the file (its gzip trailer) and stops
    /// the writer; waits at most `bound`. Records after this are dropped.
    pub fn close(&self, bound: Duration) {
        let Some(tx) = self.tx.lock().take() else {
            return;
        };
        let (done_tx, done) = mpsc::channel();
        if tx.send(Msg::Close(done_tx)).is_ok() && done.recv_timeout(bound).is_err() {
            tracing::warn!(
                "the trace writer did not finish within {bound:?}; the file ends at its last flush"
            );
            return;
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close(Duration::from_secs(5));
    }
}

impl Observer for Recorder {
    fn change(&self, change: &ClusterChange) {
        let item = match change {
            ClusterChange::Node(e) => watch(e, |n| Obj::Node(n.clone())),
            ClusterChange::Pod(e) => watch(e, |p| Obj::Pod(p.get())),
            ClusterChange::PodInfo(e) => watch(e, |p| Obj::PodInfo(p.clone())),
            ClusterChange::Object(e) => watch(e, |o| Obj::Other(o.clone())),
            ClusterChange::Synced => {
                // Only the first: a later one (a watch relisted) holds
                // nothing the records before it did not say.
                if self.synced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                Item::Synced
            }
        };
        self.send(item);
    }

    fn event(&self, e: &PodEvent) {
        let pod = &e.pod;
        let key = || PodKey {
            namespace: pod.namespace.to_string(),
            name: pod.name.to_string(),
            uid: pod.uid.to_string(),
        };
        let body = match e.reason {
            "Scheduled" => Body::Scheduled(Placed {
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
                node: pod.node_name.as_deref().unwrap_or("").to_string(),
            }),
            "FailedScheduling" => Body::Unschedulable(Unplaced {
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
                message: e.note.clone(),
            }),
            "Preempted" => {
                let k = key();
                Body::Preempted(Preempted {
                    namespace: k.namespace,
                    name: k.name,
                    uid: k.uid,
                    node: pod.node_name.as_deref().unwrap_or("").to_string(),
                    preemptor: e.related.as_ref().map(|p| PodKey {
                        namespace: p.namespace.to_string(),
                        name: p.name.to_string(),
                        uid: p.uid.to_string(),
                    }),
                })
            }
            _ => return,
        };
        self.send(Item::Decision(body));
    }
}

fn watch<T>(e: &WatchEvent<T>, obj: impl Fn(&T) -> Obj) -> Item {
    match e {
        WatchEvent::Added(o) => Item::Add(obj(o)),
        WatchEvent::Modified { old, new } => Item::Update(obj(old), obj(new)),
        WatchEvent::Deleted(o) => Item::Delete(obj(o)),
    }
}

fn open(path: &Path) -> std::io::Result<BufWriter<File>> {
    Ok(BufWriter::with_capacity(1 << 16, File::create(path)?))
}

/// Counts the bytes written through it (the compressed size).
struct Counting {
    inner: BufWriter<File>,
    bytes: u64,
}

impl Counting {
    fn new(inner: BufWriter<File>) -> Self {
        Self { inner, bytes: 0 }
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The writer thread's state.
struct SegmentWriter {
    options: RecorderOptions,
    header: Header,
    writer: Option<format::Writer<Counting>>,
    /// Each live object's last JSON, by (kind, namespace, name): the state
    /// a new segment starts with.
    state: BTreeMap<(&'static str, String, String), Vec<u8>>,
    /// Pods bound since their JSON was kept: the node to write into it.
    bound: HashMap<(String, String), String>,
    /// Pods the scheduler is evicting (DisruptionTarget by preemption).
    evicted: std::collections::HashSet<(String, String)>,
    last_t: u64,
}

/// Metadata fields no scheduling decision reads but the API server
/// writes on every change.
const VOLATILE_METADATA: [&str; 3] = ["resourceVersion", "managedFields", "generation"];
/// Status fields no scheduling decision reads but the scheduler (or the
/// kubelet) writes.
const VOLATILE_STATUS: [&str; 7] = [
    "conditions",
    "nominatedNodeName",
    "containerStatuses",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
];

/// Whether a pod's or node's update changed what scheduling reads: not
/// when only the [`VOLATILE_METADATA`] and [`VOLATILE_STATUS`] fields
/// changed (an update changing only those is not recorded).
///
/// Both sides come from one encoder (k8s-openapi's field order, maps in
/// key order), so the check compares the JSON's raw fields as bytes,
/// skipping the volatile ones, without building a tree of either side:
/// equal bytes are equal values, and bytes that differ in form only (never
/// from one encoder) would record an update that changes nothing, never
/// lose one. What does not parse so is compared as values.
pub fn scheduling_changed(old: &[u8], new: &[u8]) -> bool {
    if old == new {
        return false;
    }
    match (RawView::parse(old), RawView::parse(new)) {
        (Some(a), Some(b)) => a != b,
        _ => scheduling_changed_as_values(old, new),
    }
}

type RawFields<'a> = BTreeMap<&'a str, &'a serde_json::value::RawValue>;

/// What scheduling reads of an object's JSON, as raw slices of it.
struct RawView<'a> {
    /// The top-level fields but `metadata` and `status`.
    top: RawFields<'a>,
    metadata: Option<RawFields<'a>>,
    /// Without the volatile fields; `None` when none is left.
    status: Option<RawFields<'a>>,
}

impl PartialEq for RawView<'_> {
    fn eq(&self, other: &Self) -> bool {
        fn same(a: &RawFields<'_>, b: &RawFields<'_>) -> bool {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && va.get() == vb.get())
        }
        let both = |a: &Option<RawFields<'_>>, b: &Option<RawFields<'_>>| match (a, b) {
            (Some(a), Some(b)) => same(a, b),
            (None, None) => true,
            _ => false,
        };
        same(&self.top, &other.top)
            && both(&self.metadata, &other.metadata)
            && both(&self.status, &other.status)
    }
}

impl<'a> RawView<'a> {
    fn parse(json: &'a [u8]) -> Option<Self> {
        let mut top: RawFields<'a> = serde_json::from_slice(json).ok()?;
        let object = |v: &'a serde_json::value::RawValue| -> Option<RawFields<'a>> {
            serde_json::from_str(v.get()).ok()
        };
        let metadata = match top.remove("metadata") {
            Some(m) => {
                let mut m = object(m)?;
                for k in VOLATILE_METADATA {
                    m.remove(k);
                }
                Some(m)
            }
            None => None,
        };
        let status = match top.remove("status") {
            Some(s) => {
                let mut s = object(s)?;
                for k in VOLATILE_STATUS {
                    s.remove(k);
                }
                (!s.is_empty()).then_some(s)
            }
            None => None,
        };
        Some(Self {
            top,
            metadata,
            status,
        })
    }
}

/// The check [`scheduling_changed`] falls back to: both sides parsed into
/// values, the volatile fields removed, compared. (Public for the
/// micro-benchmark that compares the two.)
#[doc(hidden)]
pub fn scheduling_changed_as_values(old: &[u8], new: &[u8]) -> bool {
    scheduling_view(old) != scheduling_view(new)
}

/// [`scheduling_changed`]'s view as a value, for JSON it cannot take
/// apart raw (keys with escapes).
fn scheduling_view(json: &[u8]) -> Option<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_slice(json).ok()?;
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for k in VOLATILE_METADATA {
            m.remove(k);
        }
    }
    if let Some(s) = v.get_mut("status").and_then(|s| s.as_object_mut()) {
        for k in VOLATILE_STATUS {
            s.remove(k);
        }
    }
    if let Some(m) = v.as_object_mut()
        && m.get("status")
            .is_some_and(|s| s.as_object().is_some_and(|s| s.is_empty()))
    {
        m.remove("status");
    }
    Some(v)
}

/// Whether a pod's JSON carries the condition the scheduler sets on a
/// preemption victim before deleting it.
fn evicted_by_scheduler(json: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct P {
        #[serde(default)]
        status: Option<S>,
    }
    #[derive(serde::Deserialize)]
    struct S {
        #[serde(default)]
        conditions: Vec<C>,
    }
    #[derive(serde::Deserialize)]
    struct C {
        #[serde(rename = "type")]
        type_: String,
        #[serde(default)]
        reason: Option<String>,
    }
    serde_json::from_slice::<P>(json)
        .ok()
        .and_then(|p| p.status)
        .is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
        })
}

impl SegmentWriter {
    fn run(&mut self, rx: mpsc::Receiver<Msg>) {
        let mut buf = Vec::with_capacity(1 << 16);
        let mut last_flush = Instant::now();
        let mut dirty = false;
        loop {
            let msg = match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.finish(&mut buf);
                    return;
                }
            };
            match msg {
                Some(Msg::Item(t, item)) => {
                    self.encode(&mut buf, t, item);
                    // Whatever else is queued, in one go.
                    while buf.len() < (1 << 20) {
                        match rx.try_recv() {
                            Ok(Msg::Item(t, item)) => self.encode(&mut buf, t, item),
                            Ok(Msg::Close(done)) => {
                                self.finish(&mut buf);
                                let _ = done.send(());
                                return;
                            }
                            Err(_) => break,
                        }
                    }
                    self.write(&mut buf);
                    dirty = true;
                }
                Some(Msg::Close(done)) => {
                    self.finish(&mut buf);
                    let _ = done.send(());
                    return;
                }
                None => {}
            }
            if dirty && last_flush.elapsed() >= Duration::from_secs(1) {
                if let Some(w) = self.writer.as_mut()
                    && let Err(e) = w.flush()
                {
                    tracing::error!(error = %e, "flushing the trace");
                }
                last_flush = Instant::now();
                dirty = false;
            }
        }
    }

    fn encode(&mut self, buf: &mut Vec<u8>, t: u64, item: Item) {
        self.last_t = t;
        match item {
            Item::Add(o) => {
                let json = o.json();
                let (kind, ns, name, _) = o.key();
                format::write_object(buf, t, "add", &json);
                self.bound.remove(&(ns.clone(), name.clone()));
                self.state.insert((kind, ns, name), json);
            }
            Item::Update(old, new) => {
                let (kind, ns, name, uid) = new.key();
                if kind == "Pod"
                    && old.node_name().is_none()
                    && let Some(node) = new.node_name()
                {
                    format::write_record(
                        buf,
                        t,
                        &Body::Bind(Placed {
                            namespace: ns.clone(),
                            name: name.clone(),
                            uid,
                            node: node.clone(),
                        }),
                    );
                    self.bound.insert((ns, name), node);
                    return;
                }
                let json = new.json();
                if kind == "Pod" && evicted_by_scheduler(&json) {
                    self.evicted.insert((ns.clone(), name.clone()));
                }
                let changed = match kind {
                    "Pod" | "Node" => scheduling_changed(&old.json(), &json),
                    _ => true,
                };
                if changed {
                    format::write_object(buf, t, "update", &json);
                    self.bound.remove(&(ns.clone(), name.clone()));
                    self.state.insert((kind, ns, name), json);
                }
            }
            Item::Delete(o) => {
                let (kind, ns, name, uid) = o.key();
                self.bound.remove(&(ns.clone(), name.clone()));
                self.state.remove(&(kind, ns.clone(), name.clone()));
                let preempted = kind == "Pod"
                    && (self.evicted.remove(&(ns.clone(), name.clone()))
                        || evicted_by_scheduler(&o.json()));
                format::write_record(
                    buf,
                    t,
                    &Body::Delete(Deleted {
                        kind: kind.to_string(),
                        namespace: ns,
                        name,
                        uid,
                        preempted,
                    }),
                );
            }
            Item::Synced => format::write_record(buf, t, &Body::Synced),
            Item::Decision(body) => format::write_record(buf, t, &body),
        }
    }

    fn write(&mut self, buf: &mut Vec<u8>) {
        let Some(w) = self.writer.as_mut() else {
            buf.clear();
            return;
        };
        if let Err(e) = w.write_lines(buf) {
            tracing::error!(error = %e, "writing the trace; recording stops");
            self.writer = None;
        }
        buf.clear();
        if self.options.max_bytes > 0
            && self
                .writer
                .as_ref()
                .is_some_and(|w| w.get_ref().bytes >= self.options.max_bytes)
            && let Err(e) = self.rotate()
        {
            tracing::error!(error = %e, "rotating the trace; recording stops");
            self.writer = None;
        }
    }

    fn finish(&mut self, buf: &mut Vec<u8>) {
        self.write(buf);
        if let Some(w) = self.writer.take() {
            match w.finish() {
                Ok(mut c) => {
                    if let Err(e) = c.flush() {
                        tracing::error!(error = %e, "ending the trace");
                    }
                }
                Err(e) => tracing::error!(error = %e, "ending the trace"),
            }
        }
    }

    /// Ends the current file, shifts the older ones, and starts a new one
    /// with the state as it stands.
    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(w) = self.writer.take() {
            w.finish()?.flush()?;
        }
        let path = &self.options.path;
        let numbered = |n: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        let keep = self.options.keep;
        if keep == 0 {
            std::fs::remove_file(path)?;
        } else {
            let _ = std::fs::remove_file(numbered(keep));
            for n in (1..keep).rev() {
                if numbered(n).exists() {
                    std::fs::rename(numbered(n), numbered(n + 1))?;
                }
            }
            std::fs::rename(path, numbered(1))?;
        }
        self.header.segment += 1;
        let mut w = format::Writer::new(Counting::new(open(path)?), &self.header)?;
        let t = self.last_t;
        let mut buf = Vec::new();
        // Kinds pods need first, then nodes, then pods, as a listing
        // delivers them.
        let order = |kind: &str| match kind {
            "Namespace" | "PriorityClass" => 0,
            "Node" => 2,
            "Pod" => 3,
            _ => 1,
        };
        let mut keys: Vec<_> = self.state.keys().collect();
        keys.sort_by_key(|k| order(k.0));
        for key in keys {
            let json = &self.state[key];
            let patched;
            let json = match self.bound.get(&(key.1.clone(), key.2.clone())) {
                Some(node) if key.0 == "Pod" => {
                    let mut v: serde_json::Value = serde_json::from_slice(json)?;
                    if let Some(spec) = v.get_mut("spec").and_then(|s| s.as_object_mut()) {
                        spec.insert("nodeName".into(), node.clone().into());
                    }
                    patched = serde_json::to_vec(&v)?;
                    &patched
                }
                _ => json,
            };
            format::write_object(&mut buf, t, "add", json);
            if buf.len() >= 1 << 20 {
                w.write_lines(&buf)?;
                buf.clear();
            }
        }
        format::write_record(&mut buf, t, &Body::Synced);
        w.write_lines(&buf)?;
        w.flush()?;
        self.writer = Some(w);
        tracing::info!(path = %path.display(), segment = self.header.segment, "trace rotated");
        Ok(())
    }
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
