//! Output formats, protobuf messages as canonical proto3 JSON, and writing
//! to stdout without panicking when the reader goes away.

use std::io::Write;
use std::sync::OnceLock;

use crate::pb;
use anyhow::{Context, Result, anyhow};
use clap::ValueEnum;
use prost_reflect::{DescriptorPool, DynamicMessage};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable tables and explanations.
    Table,
    /// JSON: protobuf responses as canonical proto3 JSON, objects as
    /// Kubernetes JSON.
    Json,
    /// The same values as YAML.
    Yaml,
}

/// A berth protobuf message and its full name in the descriptor pool.
pub trait ProtoMessage: prost::Message {
    /// e.g. `berth.v1.DryRunResponse`.
    const NAME: &'static str;
}

macro_rules! proto_names {
    ($($t:ident),* $(,)?) => {
        $(impl ProtoMessage for pb::$t {
            const NAME: &'static str = concat!("berth.v1.", stringify!($t));
        })*
    };
}

proto_names!(
    ApplyResponse,
    DeleteResponse,
    DryRunResponse,
    SimulateResponse,
    GetQueueResponse,
    QueuedPod,
    ReplayReport,
    SchedulingEvent,
    WatchEvent,
);

fn pool() -> Result<&'static DescriptorPool> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(berth_proto::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| anyhow!("decoding berth's protobuf descriptors: {e}"))
}

/// A message as a dynamic message, which serializes as canonical proto3
/// JSON: lowerCamelCase names in field order, enums by name, 64-bit
/// integers as strings, default values left out.
pub fn dynamic<M: ProtoMessage>(msg: &M) -> Result<DynamicMessage> {
    let desc = pool()?
        .get_message_by_name(M::NAME)
        .with_context(|| format!("no descriptor for {}", M::NAME))?;
    DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())
        .with_context(|| format!("re-decoding a {}", M::NAME))
}

/// Anything serializable as pretty JSON or YAML text.
pub fn render<T: serde::Serialize>(format: Output, v: &T) -> Result<String> {
    Ok(match format {
        Output::Yaml => serde_yaml::to_string(v)?,
        Output::Json | Output::Table => {
            let mut s = serde_json::to_string_pretty(v)?;
            s.push('\n');
            s
        }
    })
}

/// stdout was closed by its reader (e.g. `berthctl get pods | head`): not an
/// error worth reporting.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
pub struct StdoutClosed;

/// Writes `text` to stdout and flushes it.
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Prints a message in `format` (JSON or YAML).
pub fn emit_proto<M: ProtoMessage>(format: Output, msg: &M) -> Result<()> {
    emit(&render(format, &dynamic(msg)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn proto_json<M: ProtoMessage>(msg: &M) -> Result<Value> {
        Ok(serde_json::to_value(dynamic(msg)?)?)
    }

    #[test]
    fn responses_become_canonical_proto3_json() {
        let resp = pb::DryRunResponse {
            selected_node: "n1".into(),
            profile: "default-scheduler".into(),
            nodes: vec![pb::NodeResult {
                node: "n1".into(),
                verdict: pb::NodeVerdict::Feasible as i32,
                total_score: 42,
                selected: true,
                ..Default::default()
            }],
            feasible_nodes: 1,
            ..Default::default()
        };
        let v = proto_json(&resp).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "selectedNode": "n1",
                "profile": "default-scheduler",
                "nodes": [{"node": "n1", "verdict": "NODE_VERDICT_FEASIBLE", "totalScore": "42", "selected": true}],
                "feasibleNodes": 1,
            })
        );
        let yaml = render(Output::Yaml, &dynamic(&resp).unwrap()).unwrap();
        assert!(
            yaml.starts_with("selectedNode: n1\nprofile: default-scheduler\n"),
            "{yaml}"
        );
        let json = render(Output::Json, &dynamic(&resp).unwrap()).unwrap();
        assert!(
            json.starts_with("{\n  \"selectedNode\": \"n1\",\n  \"profile\""),
            "in field order: {json}"
        );
    }

    #[test]
    fn structs_and_timestamps_are_plain_json() {
        let ev = pb::WatchEvent {
            r#type: "ADDED".into(),
            object: berth_proto::json::to_struct(
                &serde_json::json!({"kind": "Pod", "metadata": {"name": "p"}}),
            ),
        };
        assert_eq!(
            proto_json(&ev).unwrap(),
            serde_json::json!({"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "p"}}})
        );
        let ev = pb::SchedulingEvent {
            r#type: pb::EventType::Scheduled as i32,
            time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 500_000_000,
            }),
            ..Default::default()
        };
        assert_eq!(
            proto_json(&ev).unwrap(),
            serde_json::json!({"type": "EVENT_TYPE_SCHEDULED", "time": "2023-11-14T22:13:20.500Z"})
        );
    }
}
