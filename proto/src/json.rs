//! Conversions between `serde_json::Value` and `google.protobuf.Struct`.
//!
//! Kubernetes objects cross the gRPC boundary as `Struct`s so that grpcurl
//! users can type them as plain JSON. Protobuf's `Value` holds numbers as
//! `f64`; integers up to 2^53 survive the round trip exactly, which covers
//! every integer field of the Kubernetes API that is not a quantity (and
//! quantities are strings).

use prost_types::{ListValue, Struct, Value, value::Kind};
use serde_json::{Map, Number};

/// Converts a JSON object into a `Struct`. Returns `None` when `value` is not
/// an object.
pub fn to_struct(value: &serde_json::Value) -> Option<Struct> {
    match value {
        serde_json::Value::Object(map) => Some(map_to_struct(map)),
        _ => None,
    }
}

/// Converts a JSON map into a `Struct`.
pub fn map_to_struct(map: &Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

/// Converts any JSON value into a protobuf `Value`.
pub fn to_value(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        serde_json::Value::Object(map) => Kind::StructValue(map_to_struct(map)),
    };
    Value { kind: Some(kind) }
}

/// Converts a `Struct` back into a JSON object.
pub fn from_struct(s: &Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), from_value(v)))
            .collect(),
    )
}

/// Converts a protobuf `Value` into JSON. Whole numbers within the range an
/// `f64` represents exactly become JSON integers, so that integer fields
/// (replicas, priority, ports) deserialize into integer types.
pub fn from_value(v: &Value) -> serde_json::Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(from_value).collect())
        }
        Some(Kind::StructValue(s)) => from_struct(s),
    }
}

/// The largest integer below which every integer is exactly representable.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53

fn number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() <= MAX_EXACT {
        // In range and whole: the cast is exact.
        serde_json::Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_keeps_integers_integers() {
        let obj = json!({
            "metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"priority": 10, "containers": [{"name": "c", "ports": [{"containerPort": 80}]}],
                     "weight": 0.5, "flag": true, "nothing": null}
        });
        let s = to_struct(&obj).expect("object");
        assert_eq!(from_struct(&s), obj);
    }

    #[test]
    fn non_objects_are_not_structs() {
        assert!(to_struct(&json!([1, 2])).is_none());
        assert!(to_struct(&json!("pod")).is_none());
    }
}
