//! The gRPC codec of berth's public services (`berth.v1`): prost's
//! encoding, with every message checked before prost decodes it.
//!
//! Kubernetes objects travel as `google.protobuf.Struct`, which nests
//! three protobuf messages per JSON object (Struct, map entry, Value) and
//! two per list. Prost stops at 100 nested messages, so a Struct about 33
//! objects deep failed as INTERNAL with a kilobyte of repeated
//! `Struct.fields: Value.kind:`. Here the wire bytes are walked first, with
//! the message's descriptor, and JSON nesting deeper than [`MAX_DEPTH`] is
//! refused as INVALID_ARGUMENT naming where (`pod.spec.a.b[0].c: ...`);
//! bytes that are not a valid message are INVALID_ARGUMENT too (the caller
//! sent them). The walk allocates nothing but the path of the deepest
//! point, and it stops at the first refusal.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::OnceLock;

use bytes::Buf;
use prost::Message;
use prost_reflect::{DescriptorPool, Kind, MessageDescriptor};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// The deepest nesting of JSON objects and lists accepted in a Kubernetes
/// object (the object itself is level 1). Kubernetes objects need about
/// 12; prost's own limit sits near 33.
pub const MAX_DEPTH: usize = 32;

/// A codec for a service of `berth.v1`: `T` is encoded, `U` decoded.
#[derive(Debug)]
pub struct ApiCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ApiCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for ApiCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + prost::Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ApiDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ApiDecoder(PhantomData)
    }
}

/// Checks, then decodes, a message of type `U`.
#[derive(Debug)]
pub struct ApiDecoder<U>(PhantomData<U>);

impl<U: Message + prost::Name + Default> Decoder for ApiDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        check(&U::full_name(), &bytes).map_err(Status::invalid_argument)?;
        U::decode(bytes)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed {}: {e}", U::NAME)))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// The messages worth walking, by full name: those from which a
/// `google.protobuf.Struct`, `Value` or `ListValue` can be reached. Any
/// other message cannot nest deeper than its own fixed schema, so prost
/// decodes it unchecked (a DryRun answer, a queue listing).
fn walked() -> &'static HashMap<String, MessageDescriptor> {
    static WALKED: OnceLock<HashMap<String, MessageDescriptor>> = OnceLock::new();
    WALKED.get_or_init(|| {
        let Ok(pool) = DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET) else {
            return HashMap::new();
        };
        let messages: Vec<MessageDescriptor> = pool.all_messages().collect();
        let mut reach: HashMap<String, MessageDescriptor> = messages
            .iter()
            .filter(|m| {
                matches!(
                    m.full_name(),
                    "google.protobuf.Struct"
                        | "google.protobuf.Value"
                        | "google.protobuf.ListValue"
                )
            })
            .map(|m| (m.full_name().to_string(), m.clone()))
            .collect();
        // Until nothing more reaches one (each round adds at least one
        // message, or ends).
        loop {
            let more: Vec<&MessageDescriptor> = messages
                .iter()
                .filter(|m| !reach.contains_key(m.full_name()))
                .filter(|m| {
                    m.fields().any(|f| match f.kind() {
                        Kind::Message(sub) => reach.contains_key(sub.full_name()),
                        _ => false,
                    })
                })
                .collect();
            if more.is_empty() {
                break reach;
            }
            for m in more {
                reach.insert(m.full_name().to_string(), m.clone());
            }
        }
    })
}

/// Checks the encoded message `bytes` of the type named `full_name`
/// (e.g. `berth.v1.DryRunRequest`): `Err` with the path and the problem
/// when a Struct inside nests deeper than [`MAX_DEPTH`]. Bytes that do not
/// parse are left to prost to refuse.
pub fn check(full_name: &str, bytes: &[u8]) -> Result<(), String> {
    let Some(desc) = walked().get(full_name) else {
        return Ok(());
    };
    let mut path = Vec::new();
    match walk_message(desc, bytes, &mut path, 0) {
        Walk::TooDeep => Err(format!(
            "{}: nested too deeply: Kubernetes objects may nest objects and lists at most {MAX_DEPTH} levels deep",
            render(&path)
        )),
        Walk::Ok | Walk::Malformed => Ok(()),
    }
}

/// One step of a path into a message: a field, a list index or a map key
/// (borrowed from the message's bytes: the walk allocates no key).
#[derive(Debug, Clone)]
enum Step<'a> {
    Field(String),
    Index(usize),
    Key(&'a [u8]),
}

/// `pod.spec.containers[0].resources`, keys that are not plain words in
/// brackets (`metadata.labels[app.kubernetes.io/name]`).
fn render(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
            Step::Key(k) => {
                let k = String::from_utf8_lossy(k);
                let plain = !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if plain {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&k);
                } else {
                    out.push_str(&format!("[{k}]"));
                }
            }
        }
    }
    out
}

enum Walk {
    Ok,
    TooDeep,
    /// Not a valid encoding: prost will say why.
    Malformed,
}

/// A protobuf field as read from the wire.
enum Field<'a> {
    Len(u32, &'a [u8]),
    Other,
}

/// Reads the fields of an encoded message one by one.
struct Fields<'a>(&'a [u8]);

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

impl<'a> Fields<'a> {
    /// The next field; `Some(Err(()))` on bytes that are not a message.
    fn next_field(&mut self) -> Option<Result<Field<'a>, ()>> {
        if self.0.is_empty() {
            return None;
        }
        Some(self.read())
    }

    fn read(&mut self) -> Result<Field<'a>, ()> {
        let key = varint(&mut self.0).ok_or(())?;
        let number = u32::try_from(key >> 3).map_err(|_| ())?;
        match key & 7 {
            0 => varint(&mut self.0).map(|_| Field::Other).ok_or(()),
            1 => self.skip(8).map(|_| Field::Other),
            5 => self.skip(4).map(|_| Field::Other),
            2 => {
                let len = usize::try_from(varint(&mut self.0).ok_or(())?).map_err(|_| ())?;
                let body = self.0.get(..len).ok_or(())?;
                self.0 = &self.0[len..];
                Ok(Field::Len(number, body))
            }
            // Groups (3, 4) are not used by proto3 messages.
            _ => Err(()),
        }
    }

    fn skip(&mut self, n: usize) -> Result<(), ()> {
        self.0 = self.0.get(n..).ok_or(())?;
        Ok(())
    }
}

const STRUCT: &str = "google.protobuf.Struct";
const VALUE: &str = "google.protobuf.Value";
const LIST_VALUE: &str = "google.protobuf.ListValue";

/// Walks a message of our own types, descending into message fields;
/// `depth` is the JSON nesting reached so far.
fn walk_message<'a>(
    desc: &MessageDescriptor,
    bytes: &'a [u8],
    path: &mut Vec<Step<'a>>,
    depth: usize,
) -> Walk {
    // Occurrences so far of each repeated message field, for indices.
    let mut seen: Vec<(u32, usize)> = Vec::new();
    let mut fields = Fields(bytes);
    while let Some(f) = fields.next_field() {
        let Ok(Field::Len(number, body)) = f else {
            if f.is_err() {
                return Walk::Malformed;
            }
            continue;
        };
        let Some(field) = desc.get_field(number) else {
            continue;
        };
        let Kind::Message(sub) = field.kind() else {
            continue;
        };
        path.push(Step::Field(field.json_name().to_string()));
        let indexed = field.is_list();
        if indexed {
            let slot = match seen.iter_mut().find(|(n, _)| *n == number) {
                Some((_, count)) => {
                    *count += 1;
                    *count - 1
                }
                None => {
                    seen.push((number, 1));
                    0
                }
            };
            path.push(Step::Index(slot));
        }
        let result = match sub.full_name() {
            STRUCT => walk_struct(body, path, depth + 1),
            LIST_VALUE => walk_list(body, path, depth + 1),
            VALUE => walk_value(body, path, depth),
            _ if field.is_map() => Walk::Ok,
            _ => walk_message(&sub, body, path, depth),
        };
        if !matches!(result, Walk::Ok) {
            return result;
        }
        if indexed {
            path.pop();
        }
        path.pop();
    }
    Walk::Ok
}

/// A JSON object at nesting level `depth`.
fn walk_struct<'a>(bytes: &'a [u8], path: &mut Vec<Step<'a>>, depth: usize) -> Walk {
    if depth > MAX_DEPTH {
        return Walk::TooDeep;
    }
    let mut fields = Fields(bytes);
    while let Some(f) = fields.next_field() {
        let entry = match f {
            Ok(Field::Len(1, entry)) => entry,
            Ok(_) => continue,
            Err(()) => return Walk::Malformed,
        };
        // A map entry: key (1) and value (2), in either order.
        let (mut key, mut value) = (None, None);
        let mut parts = Fields(entry);
        while let Some(p) = parts.next_field() {
            match p {
                Ok(Field::Len(1, k)) => key = Some(k),
                Ok(Field::Len(2, v)) => value = Some(v),
                Ok(_) => {}
                Err(()) => return Walk::Malformed,
            }
        }
        let Some(value) = value else { continue };
        path.push(Step::Key(key.unwrap_or_default()));
        let result = walk_value(value, path, depth);
        if !matches!(result, Walk::Ok) {
            return result;
        }
        path.pop();
    }
    Walk::Ok
}

/// A JSON list at nesting level `depth`.
fn walk_list<'a>(bytes: &'a [u8], path: &mut Vec<Step<'a>>, depth: usize) -> Walk {
    if depth > MAX_DEPTH {
        return Walk::TooDeep;
    }
    let mut fields = Fields(bytes);
    let mut index = 0;
    while let Some(f) = fields.next_field() {
        let value = match f {
            Ok(Field::Len(1, v)) => v,
            Ok(_) => continue,
            Err(()) => return Walk::Malformed,
        };
        path.push(Step::Index(index));
        index += 1;
        let result = walk_value(value, path, depth);
        if !matches!(result, Walk::Ok) {
            return result;
        }
        path.pop();
    }
    Walk::Ok
}

/// A JSON value inside a container at nesting level `depth`.
fn walk_value<'a>(bytes: &'a [u8], path: &mut Vec<Step<'a>>, depth: usize) -> Walk {
    let mut fields = Fields(bytes);
    while let Some(f) = fields.next_field() {
        let result = match f {
            Ok(Field::Len(5, s)) => walk_struct(s, path, depth + 1),
            Ok(Field::Len(6, l)) => walk_list(l, path, depth + 1),
            Ok(_) => Walk::Ok,
            Err(()) => Walk::Malformed,
        };
        if !matches!(result, Walk::Ok) {
            return result;
        }
    }
    Walk::Ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::to_struct;
    use crate::v1::{ApplyRequest, DryRunRequest, SimulateRequest};
    use serde_json::{Value as Json, json};

    /// `{"a": {"a": ... {"x": 1}}}`, `levels` objects deep.
    fn nested(levels: usize) -> Json {
        let mut v = json!({"x": 1});
        for _ in 1..levels {
            v = json!({ "a": v });
        }
        v
    }

    fn dry_run(pod: &Json) -> Vec<u8> {
        DryRunRequest {
            pod: to_struct(pod),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn decode<U: Message + prost::Name + Default>(bytes: Vec<u8>) -> Result<U, Status> {
        check(&U::full_name(), &bytes).map_err(Status::invalid_argument)?;
        U::decode(bytes.as_slice()).map_err(|e| Status::invalid_argument(e.to_string()))
    }

    #[test]
    fn only_messages_that_can_carry_a_struct_are_walked() {
        let w = walked();
        for name in [
            "berth.v1.DryRunRequest",
            "berth.v1.ApplyRequest",
            "berth.v1.SimulateRequest",
            "google.protobuf.Struct",
        ] {
            assert!(w.contains_key(name), "{name} is walked");
        }
        for name in ["berth.v1.GetQueueRequest", "berth.v1.GetQueueResponse"] {
            assert!(!w.contains_key(name), "{name} is not walked");
        }
    }

    #[test]
    fn the_deepest_accepted_object_still_decodes_in_prost() {
        let ok = dry_run(&nested(MAX_DEPTH));
        assert!(decode::<DryRunRequest>(ok).is_ok());
        // Lists nest more cheaply in protobuf, objects most dearly: the
        // deepest accepted mix of both decodes too.
        let mut v = json!(1);
        for i in 0..MAX_DEPTH - 1 {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({"k": v})
            };
        }
        let v = json!({ "top": v });
        assert!(decode::<DryRunRequest>(dry_run(&v)).is_ok());
    }

    #[test]
    fn deeper_objects_are_refused_naming_where() {
        let e = decode::<DryRunRequest>(dry_run(&nested(40))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let want = format!(
            "pod{}: nested too deeply: Kubernetes objects may nest objects and lists at most 32 levels deep",
            ".a".repeat(MAX_DEPTH)
        );
        assert_eq!(e.message(), want);
        // Prost alone would have failed (INTERNAL in tonic's codec).
        assert!(DryRunRequest::decode(dry_run(&nested(40)).as_slice()).is_err());
    }

    #[test]
    fn paths_name_list_indices_repeated_fields_and_odd_keys() {
        let mut deep = json!("leaf");
        for _ in 0..MAX_DEPTH {
            deep = json!([deep]);
        }
        let pod = json!({"metadata": {"labels": {"app.kubernetes.io/name": deep}}});
        let req = SimulateRequest {
            pods: vec![
                to_struct(&json!({"ok": 1})).unwrap(),
                to_struct(&pod).unwrap(),
            ],
            ..Default::default()
        };
        let e = decode::<SimulateRequest>(req.encode_to_vec()).unwrap_err();
        let want = format!(
            "pods[1].metadata.labels[app.kubernetes.io/name]{}: nested too deeply",
            "[0]".repeat(MAX_DEPTH - 3)
        );
        assert!(e.message().starts_with(&want), "{}", e.message());
        let req = ApplyRequest {
            objects: vec![to_struct(&nested(50)).unwrap()],
            ..Default::default()
        };
        let e = decode::<ApplyRequest>(req.encode_to_vec()).unwrap_err();
        assert!(e.message().starts_with("objects[0].a.a"), "{}", e.message());
    }

    #[test]
    fn malformed_bytes_are_invalid_argument_not_a_panic() {
        for bytes in [
            vec![0x0a, 0xff],
            vec![0x0a, 0x05, 0x0a],
            vec![0xff; 12],
            vec![0x0b],
        ] {
            let e = decode::<DryRunRequest>(bytes).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
        }
    }
}
