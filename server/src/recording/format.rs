//! The trace format, version 1: JSON lines, gzip-compressed (a plain,
//! uncompressed file reads as well). See [`super`] for the records.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::cache::{KubeObject, ObjectKind};

/// The format's version; a reader refuses any other.
pub const VERSION: u32 = 1;

/// The first line of every segment of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    /// Always [`VERSION`].
    pub berth_trace: u32,
    /// When the recording began (RFC 3339, UTC).
    pub started: String,
    /// Where the changes came from: `embedded`, `kube` or `generated`.
    pub source: String,
    /// The segment's number: 0 for the first file of a recording, then one
    /// more per rotation.
    #[serde(default)]
    pub segment: u32,
    /// The seed of the scheduler that was recorded (its `--seed`), if it
    /// had one: replay uses it unless told otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The scheduler names of the recorded scheduler's profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<String>,
}

/// A pod as a record names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodKey {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    #[serde(default)]
    pub uid: String,
}

impl PodKey {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An object that went away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    /// Its kind (`Pod`, `Node`, `PersistentVolumeClaim`, ...).
    pub kind: String,
    /// metadata.namespace (empty for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// A pod the scheduler evicted to make room (it carried the
    /// `DisruptionTarget` condition with reason `PreemptionByScheduler`):
    /// its deletion was the recorded scheduler's decision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preempted: bool,
}

/// A pod and a node: a binding seen, or a placement decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placed {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    #[serde(default)]
    pub uid: String,
    /// The node.
    pub node: String,
}

/// A scheduling attempt that placed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unplaced {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    #[serde(default)]
    pub uid: String,
    /// The FailedScheduling event's message.
    pub message: String,
}

/// A preemption victim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preempted {
    /// metadata.namespace of the victim.
    pub namespace: String,
    /// metadata.name of the victim.
    pub name: String,
    /// metadata.uid of the victim.
    #[serde(default)]
    pub uid: String,
    /// The node it ran on.
    #[serde(default)]
    pub node: String,
    /// The pod it made room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptor: Option<PodKey>,
}

/// A Kubernetes object of a record.
#[derive(Debug, Clone)]
pub enum Object {
    /// A node.
    Node(Arc<Node>),
    /// A pod.
    Pod(Arc<Pod>),
    /// Any other kind berth reads.
    Other(KubeObject),
}

impl Object {
    /// Decodes an object from its JSON (its `kind` says which type).
    pub fn from_json(raw: &str) -> Result<Self, FormatError> {
        #[derive(Deserialize)]
        struct TypeMeta<'a> {
            #[serde(borrow, default)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        let meta: TypeMeta = serde_json::from_str(raw).map_err(FormatError::json)?;
        let kind = meta.kind.unwrap_or_default();
        match kind.as_ref() {
            "Node" => Ok(Self::Node(Arc::new(
                serde_json::from_str(raw).map_err(FormatError::json)?,
            ))),
            "Pod" => Ok(Self::Pod(Arc::new(
                serde_json::from_str(raw).map_err(FormatError::json)?,
            ))),
            other => {
                let Some(k) = kind_named(other) else {
                    return Err(FormatError::Invalid(format!(
                        "an object of kind {other:?}, which berth does not read"
                    )));
                };
                let value: serde_json::Value =
                    serde_json::from_str(raw).map_err(FormatError::json)?;
                KubeObject::from_json(k, value)
                    .map(Self::Other)
                    .map_err(|e| FormatError::Invalid(format!("a {other}: {e}")))
            }
        }
    }

    /// The object's kind, as its JSON names it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Node(_) => "Node",
            Self::Pod(_) => "Pod",
            Self::Other(o) => o.kind().type_meta().1,
        }
    }
}

/// The object kind (other than Node and Pod) whose JSON `kind` is `name`.
pub fn kind_named(name: &str) -> Option<ObjectKind> {
    ObjectKind::ALL
        .into_iter()
        .find(|k| k.type_meta().1 == name)
}

/// What a record says happened.
#[derive(Debug, Clone)]
pub enum Body {
    /// An object appeared (or was there when the segment began).
    Add(Object),
    /// An object changed in a way scheduling may read.
    Update(Object),
    /// An object went away.
    Delete(Deleted),
    /// A pending pod was bound (by whichever scheduler).
    Bind(Placed),
    /// The segment's first state is complete: what follows happened after.
    Synced,
    /// The recorded scheduler bound a pod (its `Scheduled` event).
    Scheduled(Placed),
    /// The recorded scheduler could not place a pod (its
    /// `FailedScheduling` event).
    Unschedulable(Unplaced),
    /// The recorded scheduler evicted a pod to make room (its `Preempted`
    /// event).
    Preempted(Preempted),
}

impl Body {
    /// Whether the record is one of the recorded scheduler's decisions
    /// (which replay compares with, never applies).
    pub fn is_decision(&self) -> bool {
        matches!(
            self,
            Self::Scheduled(_) | Self::Unschedulable(_) | Self::Preempted(_)
        )
    }
}

/// One record: when, and what.
#[derive(Debug, Clone)]
pub struct Record {
    /// Microseconds since the recording began.
    pub t: u64,
    /// What happened.
    pub body: Body,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The bytes are not a trace (or not one this berth reads).
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number within the stream.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A record does not decode.
    #[error("{0}")]
    Invalid(String),
    /// Reading failed.
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
}

impl FormatError {
    fn json(e: serde_json::Error) -> Self {
        Self::Invalid(e.to_string())
    }
}

/// A record line, before its payload is decoded.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    t: u64,
    #[serde(borrow, default)]
    add: Option<&'a RawValue>,
    #[serde(borrow, default)]
    update: Option<&'a RawValue>,
    #[serde(default)]
    delete: Option<Deleted>,
    #[serde(default)]
    bind: Option<Placed>,
    #[serde(default)]
    synced: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    scheduled: Option<Placed>,
    #[serde(default)]
    unschedulable: Option<Unplaced>,
    #[serde(default)]
    preempted: Option<Preempted>,
}

/// Decodes one record line.
pub fn parse_record(line: &str) -> Result<Record, FormatError> {
    let l: Line = serde_json::from_str(line).map_err(FormatError::json)?;
    let mut bodies = Vec::with_capacity(1);
    if let Some(raw) = l.add {
        bodies.push(Body::Add(Object::from_json(raw.get())?));
    }
    if let Some(raw) = l.update {
        bodies.push(Body::Update(Object::from_json(raw.get())?));
    }
    if let Some(d) = l.delete {
        bodies.push(Body::Delete(d));
    }
    if let Some(b) = l.bind {
        bodies.push(Body::Bind(b));
    }
    if l.synced.is_some() {
        bodies.push(Body::Synced);
    }
    if let Some(b) = l.scheduled {
        bodies.push(Body::Scheduled(b));
    }
    if let Some(u) = l.unschedulable {
        bodies.push(Body::Unschedulable(u));
    }
    if let Some(p) = l.preempted {
        bodies.push(Body::Preempted(p));
    }
    match (bodies.pop(), bodies.is_empty()) {
        (Some(body), true) => Ok(Record { t: l.t, body }),
        (None, _) => Err(FormatError::Invalid(
            "a record with nothing in it (add, update, delete, bind, synced, scheduled, unschedulable or preempted)".into(),
        )),
        (Some(_), false) => Err(FormatError::Invalid(
            "a record holds one of add, update, delete, bind, synced, scheduled, unschedulable or preempted, not several".into(),
        )),
    }
}

/// Writes one record line (with its newline) to `out`. `object` is the
/// object's JSON for `add` and `update`.
pub fn write_object(out: &mut Vec<u8>, t: u64, op: &str, object: &[u8]) {
    out.extend_from_slice(b"{\"t\":");
    out.extend_from_slice(t.to_string().as_bytes());
    out.extend_from_slice(b",\"");
    out.extend_from_slice(op.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
}

/// Writes one record line of a body other than an object's.
pub fn write_record(out: &mut Vec<u8>, t: u64, body: &Body) {
    #[derive(Serialize)]
    struct Out<'a, T: Serialize> {
        t: u64,
        #[serde(flatten)]
        body: std::collections::BTreeMap<&'static str, &'a T>,
    }
    fn put<T: Serialize>(out: &mut Vec<u8>, t: u64, op: &'static str, v: &T) {
        let line = Out {
            t,
            body: std::collections::BTreeMap::from([(op, v)]),
        };
        // These records hold strings only: they always encode.
        let _ = serde_json::to_writer(&mut *out, &line);
        out.push(b'\n');
    }
    match body {
        Body::Add(o) | Body::Update(o) => {
            let op = if matches!(body, Body::Add(_)) {
                "add"
            } else {
                "update"
            };
            write_object(out, t, op, &object_json(o));
        }
        Body::Delete(d) => put(out, t, "delete", d),
        Body::Bind(b) => put(out, t, "bind", b),
        Body::Synced => put(out, t, "synced", &serde_json::json!({})),
        Body::Scheduled(b) => put(out, t, "scheduled", b),
        Body::Unschedulable(u) => put(out, t, "unschedulable", u),
        Body::Preempted(p) => put(out, t, "preempted", p),
    }
}

/// An object's JSON, as a record carries it.
pub fn object_json(o: &Object) -> Vec<u8> {
    match o {
        // k8s-openapi objects always encode (string keys, no floats).
        Object::Node(n) => serde_json::to_vec(&**n).unwrap_or_default(),
        Object::Pod(p) => serde_json::to_vec(&**p).unwrap_or_default(),
        Object::Other(o) => serde_json::to_vec(&o.to_json()).unwrap_or_default(),
    }
}

/// Writes the header line.
pub fn write_header(out: &mut Vec<u8>, h: &Header) {
    let _ = serde_json::to_writer(&mut *out, h);
    out.push(b'\n');
}

/// Reads a trace: one file or several segments one after another (gzip
/// members may be concatenated), compressed or not.
///
/// The first segment's records are all returned: its first state (up to
/// `synced`) and what followed. A later segment begins with the state at
/// its rotation, which the segments before it already reached: that
/// repeated state is skipped, and its changes follow on.
pub struct Reader {
    lines: Box<dyn BufRead + Send>,
    header: Option<Header>,
    line_no: u64,
    buf: String,
    /// Inside a later segment's repeated first state.
    skipping: bool,
    segments: u32,
}

impl Reader {
    /// Starts reading `r`: gzip if it starts with gzip's magic bytes, plain
    /// text otherwise. Reads the first header.
    pub fn new<R: Read + Send + 'static>(r: R) -> Result<Self, FormatError> {
        let mut peek = BufReader::with_capacity(1 << 16, r);
        let gz = {
            let head = peek.fill_buf()?;
            head.len() >= 2 && head[0] == 0x1f && head[1] == 0x8b
        };
        let lines: Box<dyn BufRead + Send> = if gz {
            Box::new(BufReader::with_capacity(
                1 << 16,
                flate2::bufread::MultiGzDecoder::new(peek),
            ))
        } else {
            Box::new(peek)
        };
        let mut reader = Self {
            lines,
            header: None,
            line_no: 0,
            buf: String::new(),
            skipping: false,
            segments: 0,
        };
        match reader.next_line()? {
            Some(line) => {
                let h = parse_header(&line)
                    .map_err(|message| FormatError::Line { line: 1, message })?;
                reader.header = Some(h);
                reader.segments = 1;
            }
            None => {
                return Err(FormatError::Line {
                    line: 1,
                    message: "empty: a trace starts with its header line".into(),
                });
            }
        }
        Ok(reader)
    }

    /// The first segment's header.
    pub fn header(&self) -> &Header {
        // Set by `new`.
        self.header.as_ref().expect("a header")
    }

    /// How many segments were read so far.
    pub fn segments(&self) -> u32 {
        self.segments
    }

    fn next_line(&mut self) -> Result<Option<String>, FormatError> {
        loop {
            self.buf.clear();
            let n = match self.lines.read_line(&mut self.buf) {
                Ok(n) => n,
                // A recording cut short (berthd killed) ends in a gzip
                // member without its trailer: what was flushed before
                // reads, the partial line after it does not.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Ok(None);
            }
            if !self.buf.ends_with('\n') && self.truncated_tail() {
                return Ok(None);
            }
            self.line_no += 1;
            let line = self.buf.trim_end();
            if line.is_empty() {
                continue;
            }
            return Ok(Some(line.to_string()));
        }
    }

    /// Whether the stream ended inside a line (a recording cut short).
    fn truncated_tail(&mut self) -> bool {
        matches!(self.lines.fill_buf(), Ok([]) | Err(_))
            && serde_json::from_str::<serde::de::IgnoredAny>(self.buf.trim_end()).is_err()
    }

    /// The next record; `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        loop {
            let Some(line) = self.next_line()? else {
                return Ok(None);
            };
            let line_no = self.line_no;
            let at = |e: FormatError| match e {
                FormatError::Invalid(message) => FormatError::Line {
                    line: line_no,
                    message,
                },
                e => e,
            };
            if line.starts_with("{\"berthTrace\"") {
                parse_header(&line).map_err(|message| FormatError::Line {
                    line: line_no,
                    message,
                })?;
                self.segments += 1;
                self.skipping = true;
                continue;
            }
            let r = parse_record(&line).map_err(at)?;
            if self.skipping {
                if matches!(r.body, Body::Synced) {
                    self.skipping = false;
                }
                continue;
            }
            return Ok(Some(r));
        }
    }
}

fn parse_header(line: &str) -> Result<Header, String> {
    let h: Header = serde_json::from_str(line).map_err(|e| {
        format!(
            "not a berth trace header ({e}); a trace starts with {{\"berthTrace\":{VERSION},...}}"
        )
    })?;
    if h.berth_trace != VERSION {
        return Err(format!(
            "berthTrace: Unsupported value: {}: this berth reads version {VERSION}",
            h.berth_trace
        ));
    }
    Ok(h)
}

/// A trace file being written: gzip, one record per line.
pub struct Writer<W: Write> {
    gz: flate2::write::GzEncoder<W>,
}

impl<W: Write> Writer<W> {
    /// Starts a segment on `w` with `header`.
    pub fn new(w: W, header: &Header) -> std::io::Result<Self> {
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::fast());
        let mut line = Vec::new();
        write_header(&mut line, header);
        gz.write_all(&line)?;
        Ok(Self { gz })
    }

    /// Appends lines already encoded.
    pub fn write_lines(&mut self, lines: &[u8]) -> std::io::Result<()> {
        self.gz.write_all(lines)
    }

    /// Appends a record.
    pub fn write(&mut self, r: &Record) -> std::io::Result<()> {
        let mut line = Vec::new();
        write_record(&mut line, r.t, &r.body);
        self.gz.write_all(&line)
    }

    /// Flushes what is buffered to the underlying writer (a complete,
    /// readable prefix of the stream).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.gz.flush()
    }

    /// Ends the gzip stream and returns the underlying writer.
    pub fn finish(self) -> std::io::Result<W> {
        self.gz.finish()
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        self.gz.get_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            berth_trace: VERSION,
            started: "2026-01-01T00:00:00Z".into(),
            source: "generated".into(),
            segment: 0,
            seed: Some(7),
            profiles: vec!["default-scheduler".into()],
        }
    }

    fn pod(name: &str) -> Object {
        Object::Pod(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")},
                "spec": {"containers": [{"name": "c"}]},
            }))
            .unwrap(),
        ))
    }

    fn roundtrip(records: &[Record], gz: bool) -> Vec<Record> {
        let mut w = Writer::new(Vec::new(), &header()).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        let mut bytes = w.finish().unwrap();
        if !gz {
            let mut plain = String::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_string(&mut plain)
                .unwrap();
            bytes = plain.into_bytes();
        }
        let mut r = Reader::new(std::io::Cursor::new(bytes)).unwrap();
        assert_eq!(r.header(), &header());
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            out.push(rec);
        }
        out
    }

    #[test]
    fn every_record_reads_back_compressed_or_not() {
        let records = vec![
            Record {
                t: 0,
                body: Body::Add(pod("a")),
            },
            Record {
                t: 0,
                body: Body::Synced,
            },
            Record {
                t: 5,
                body: Body::Bind(Placed {
                    namespace: "default".into(),
                    name: "a".into(),
                    uid: "u-a".into(),
                    node: "n1".into(),
                }),
            },
            Record {
                t: 6,
                body: Body::Preempted(Preempted {
                    namespace: "default".into(),
                    name: "a".into(),
                    uid: "u-a".into(),
                    node: "n1".into(),
                    preemptor: Some(PodKey {
                        namespace: "default".into(),
                        name: "b".into(),
                        uid: "u-b".into(),
                    }),
                }),
            },
            Record {
                t: 9,
                body: Body::Delete(Deleted {
                    kind: "Pod".into(),
                    namespace: "default".into(),
                    name: "a".into(),
                    uid: "u-a".into(),
                    preempted: true,
                }),
            },
        ];
        for gz in [true, false] {
            let back = roundtrip(&records, gz);
            assert_eq!(back.len(), records.len());
            assert!(
                matches!(&back[0].body, Body::Add(Object::Pod(p)) if p.metadata.name.as_deref() == Some("a"))
            );
            assert!(matches!(back[1].body, Body::Synced));
            assert!(matches!(&back[2].body, Body::Bind(b) if b.node == "n1" && back[2].t == 5));
            assert!(
                matches!(&back[3].body, Body::Preempted(p) if p.preemptor.as_ref().unwrap().name == "b")
            );
            assert!(
                matches!(&back[4].body, Body::Delete(d) if d.kind == "Pod" && d.uid == "u-a" && d.preempted)
            );
        }
    }

    #[test]
    fn a_later_segment_skips_its_repeated_first_state() {
        let mut all = Vec::new();
        for (seg, recs) in [
            (
                0,
                vec![
                    Record {
                        t: 0,
                        body: Body::Add(pod("a")),
                    },
                    Record {
                        t: 0,
                        body: Body::Synced,
                    },
                    Record {
                        t: 3,
                        body: Body::Add(pod("b")),
                    },
                ],
            ),
            (
                1,
                vec![
                    Record {
                        t: 4,
                        body: Body::Add(pod("a")),
                    },
                    Record {
                        t: 4,
                        body: Body::Add(pod("b")),
                    },
                    Record {
                        t: 4,
                        body: Body::Synced,
                    },
                    Record {
                        t: 8,
                        body: Body::Add(pod("c")),
                    },
                ],
            ),
        ] {
            let mut h = header();
            h.segment = seg;
            let mut w = Writer::new(Vec::new(), &h).unwrap();
            for r in &recs {
                w.write(r).unwrap();
            }
            all.extend(w.finish().unwrap());
        }
        let mut r = Reader::new(std::io::Cursor::new(all)).unwrap();
        let mut names = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            names.push(match rec.body {
                Body::Add(Object::Pod(p)) => p.metadata.name.clone().unwrap(),
                Body::Synced => "synced".into(),
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(names, ["a", "synced", "b", "c"]);
        assert_eq!(r.segments(), 2);
    }

    #[test]
    fn bad_input_says_which_line_and_why() {
        let e = Reader::new(std::io::Cursor::new(b"hello\n".to_vec()))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("line 1: not a berth trace header"),
            "{e}"
        );
        let e = Reader::new(std::io::Cursor::new(
            b"{\"berthTrace\":2,\"started\":\"x\",\"source\":\"kube\"}\n".to_vec(),
        ))
        .err()
        .unwrap();
        assert!(
            e.to_string().contains("berthTrace: Unsupported value: 2"),
            "{e}"
        );
        let text = "{\"berthTrace\":1,\"started\":\"x\",\"source\":\"kube\"}\n{\"t\":1}\n{\"t\":2,\"bind\":{\"namespace\":\"a\"}}\n";
        let mut r = Reader::new(std::io::Cursor::new(text.as_bytes().to_vec())).unwrap();
        let e = r.next_record().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: a record with nothing in it"),
            "{e}"
        );
        let e = r.next_record().unwrap_err();
        assert!(e.to_string().starts_with("line 3: missing field"), "{e}");
    }
}
