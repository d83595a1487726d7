//! Strict decoding of Kubernetes JSON, as the API server's strict field
//! validation (`kubectl apply --validate=strict`, the default) decodes it:
//! a field the type does not have is an error naming its path
//! (`spec.nodeSelektor: unknown field "nodeSelektor"`), not silently
//! dropped; and before anything is decoded, an object is checked against
//! the sizes the API server could ever store.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::InvalidObject;

/// The largest object accepted, in bytes of JSON: etcd's default request
/// limit (`--max-request-bytes`, 1.5 MiB), so no larger object can exist in
/// a Kubernetes cluster.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The deepest nesting of objects and lists accepted in an object (the
/// object itself is level 1). Kubernetes objects need about 12; the gRPC
/// API refuses deeper Structs before decoding them, at the same depth.
pub const MAX_DEPTH: usize = 32;

/// Counts the bytes a JSON value serializes to, without keeping them.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `value` as compact JSON.
pub fn json_size(value: &Value) -> usize {
    let mut c = Counter(0);
    // Writing a Value to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

/// Appends a map key to a path: `.key`, or `[key]` for keys that are not
/// plain words (`metadata.labels[app.kubernetes.io/name]`).
pub fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(key);
        path.push(']');
    }
}

/// Refuses an object larger than [`MAX_OBJECT_BYTES`] or nested deeper
/// than [`MAX_DEPTH`], naming the deepest path.
pub fn check_bounds(value: &Value) -> Result<(), InvalidObject> {
    check_depth(value)?;
    let size = json_size(value);
    if size > MAX_OBJECT_BYTES {
        return Err(InvalidObject::new(
            "",
            format!(
                "Too long: the object is {size} bytes of JSON, may not be more than {MAX_OBJECT_BYTES} bytes (the largest request etcd stores by default)"
            ),
        ));
    }
    Ok(())
}

/// Refuses nesting deeper than [`MAX_DEPTH`], naming where. Iterative, so
/// that no input can exhaust the stack; paths are built only to name a
/// refusal.
pub fn check_depth(value: &Value) -> Result<(), InvalidObject> {
    // (value, depth of the container it is in)
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = stack.pop() {
        let children: &mut dyn Iterator<Item = &Value> = match v {
            Value::Object(m) => &mut m.values(),
            Value::Array(a) => &mut a.iter(),
            _ => continue,
        };
        if depth + 1 > MAX_DEPTH {
            return Err(InvalidObject::new(
                path_to_depth(value, MAX_DEPTH + 1).unwrap_or_default(),
                format!(
                    "nested too deeply: Kubernetes objects may nest objects and lists at most {MAX_DEPTH} levels deep"
                ),
            ));
        }
        for c in children {
            if matches!(c, Value::Object(_) | Value::Array(_)) {
                stack.push((c, depth + 1));
            }
        }
    }
    Ok(())
}

/// The path of the first container found at nesting level `level`.
fn path_to_depth(value: &Value, level: usize) -> Option<String> {
    let mut stack: Vec<(&Value, usize, String)> = vec![(value, 1, String::new())];
    while let Some((v, depth, path)) = stack.pop() {
        if !matches!(v, Value::Object(_) | Value::Array(_)) {
            continue;
        }
        if depth == level {
            return Some(path);
        }
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let mut p = path.clone();
                    push_key(&mut p, k);
                    stack.push((c, depth + 1, p));
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    stack.push((c, depth + 1, format!("{path}[{i}]")));
                }
            }
            _ => {}
        }
    }
    None
}

/// Renders serde_ignored's path in our field-path style.
fn ignored_path(p: &serde_ignored::Path<'_>, out: &mut String) {
    use serde_ignored::Path;
    match p {
        Path::Root => {}
        Path::Seq { parent, index } => {
            ignored_path(parent, out);
            out.push_str(&format!("[{index}]"));
        }
        Path::Map { parent, key } => {
            ignored_path(parent, out);
            push_key(out, key);
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent, out),
    }
}

/// Decodes `value` as `T`, refusing fields `T` does not have. Errors carry
/// the field's path inside the object.
pub fn decode_strict<T: DeserializeOwned>(value: Value) -> Result<T, InvalidObject> {
    let mut unknown: Option<String> = None;
    // Decoded from a borrow, so that a type error can be decoded again,
    // tracking the path, only then (the common, valid case pays nothing
    // for paths).
    let result: Result<T, _> = serde_ignored::deserialize(&value, |path| {
        if unknown.is_none() {
            let mut p = String::new();
            ignored_path(&path, &mut p);
            unknown = Some(p);
        }
    });
    match result {
        Err(e) => {
            let mut track = serde_path_to_error::Track::new();
            let again: Result<T, _> =
                T::deserialize(serde_path_to_error::Deserializer::new(&value, &mut track));
            let message = match again {
                Err(e) => e.to_string(),
                Ok(_) => e.to_string(),
            };
            let path = track.path().to_string();
            let path = if path == "." { String::new() } else { path };
            Err(InvalidObject::new(path, message))
        }
        Ok(_) if unknown.is_some() => {
            let path = unknown.unwrap_or_default();
            let name = path
                .rsplit(['.', '['])
                .next()
                .unwrap_or(&path)
                .trim_end_matches(']')
                .to_string();
            Err(InvalidObject::new(
                path,
                format!("unknown field \"{name}\""),
            ))
        }
        Ok(t) => Ok(t),
    }
}

/// The first field of `input` that `output` (the same object decoded and
/// encoded again) lacks: a field the object's type does not have. For
/// kinds decoded leniently; a field given as `null` counts as absent.
pub fn unknown_field(input: &Value, output: &Value) -> Option<String> {
    let mut stack: Vec<(&Value, &Value, String)> = vec![(input, output, String::new())];
    while let Some((i, o, path)) = stack.pop() {
        match (i, o) {
            (Value::Object(im), Value::Object(om)) => {
                for (k, iv) in im {
                    let mut p = path.clone();
                    push_key(&mut p, k);
                    match om.get(k) {
                        Some(ov) => stack.push((iv, ov, p)),
                        None if iv.is_null() => {}
                        None => return Some(p),
                    }
                }
            }
            (Value::Array(ia), Value::Array(oa)) => {
                for (n, (iv, ov)) in ia.iter().zip(oa).enumerate() {
                    stack.push((iv, ov, format!("{path}[{n}]")));
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named_by_path() {
        let cases = [
            (
                json!({"metadata": {"name": "p"}, "spec": {"nodeSelektor": {"a": "b"}, "containers": [{"name": "c"}]}}),
                "spec.nodeSelektor: unknown field \"nodeSelektor\"",
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}, {"name": "d", "resourcez": {}}]}}),
                "spec.containers[1].resourcez: unknown field \"resourcez\"",
            ),
            (
                json!({"metadata": {"name": "p", "lables": {}}, "spec": {"containers": [{"name": "c"}]}}),
                "metadata.lables: unknown field \"lables\"",
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "extra": null}),
                "extra: unknown field \"extra\"",
            ),
        ];
        for (v, want) in cases {
            let e = decode_strict::<Pod>(v).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
        // Arbitrary keys of maps are data, not fields.
        let ok = json!({"metadata": {"name": "p", "labels": {"nodeSelektor": "x"}},
            "spec": {"nodeSelector": {"any/key": "v"}, "containers": [{"name": "c"}]}});
        assert!(decode_strict::<Pod>(ok).is_ok());
        let e = decode_strict::<Node>(json!({"metadata": {"name": "n"}, "spec": {"tanits": []}}))
            .unwrap_err();
        assert_eq!(e.to_string(), "spec.tanits: unknown field \"tanits\"");
    }

    #[test]
    fn type_errors_keep_their_path() {
        let e = decode_strict::<Pod>(json!({"spec": {"priority": "high"}})).unwrap_err();
        assert_eq!(e.path, "spec.priority");
        assert!(e.message.starts_with("invalid type: string \"high\""));
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let mut v = json!("leaf");
        for _ in 0..MAX_DEPTH {
            v = json!({ "a": v });
        }
        assert!(check_bounds(&v).is_ok());
        let deeper = json!({ "b": [v] });
        let e = check_bounds(&deeper).unwrap_err();
        assert_eq!(e.path, format!("b[0]{}", ".a".repeat(MAX_DEPTH - 2)));
        assert!(e.message.starts_with("nested too deeply"), "{e}");
        let big = json!({"metadata": {"annotations": {"x": "y".repeat(MAX_OBJECT_BYTES)}}});
        let e = check_bounds(&big).unwrap_err();
        assert!(e.message.starts_with("Too long: the object is"), "{e}");
    }

    #[test]
    fn round_trip_finds_fields_a_type_lacks() {
        let input = json!({"spec": {"a": 1, "b": [{"c": 1, "d": 2}], "n": null}});
        let output = json!({"spec": {"a": 1, "b": [{"c": 1}]}});
        assert_eq!(
            unknown_field(&input, &output).as_deref(),
            Some("spec.b[0].d")
        );
        assert_eq!(unknown_field(&output, &output), None);
    }
}
