//! `berthctl watch`: scheduling events, or changes to the cluster's objects,
//! one line each as they happen, until Ctrl-C or the server ends the stream.

use crate::pb::{EventType, PodReference, SchedulingEvent, WatchEvent};
use crate::{Client, ClientError};
use anyhow::Result;

use crate::cli::Rpc;
use crate::cli::output::{Output, ProtoMessage, dynamic, emit};

/// A timestamp as local time of day, to the millisecond.
pub fn time_of_day(t: &prost_types::Timestamp) -> String {
    match jiff::Timestamp::new(t.seconds, t.nanos) {
        Ok(ts) => ts
            .to_zoned(jiff::tz::TimeZone::system())
            .strftime("%H:%M:%S%.3f")
            .to_string(),
        Err(_) => format!("{}s", t.seconds),
    }
}

fn now() -> prost_types::Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn pod_name(p: Option<&PodReference>) -> String {
    p.map(|p| format!("{}/{}", p.namespace, p.name))
        .unwrap_or_else(|| "?".into())
}

/// One line for a scheduling event: time, type, pod, then the node or why.
pub fn event_line(e: &SchedulingEvent) -> String {
    let time = e.time.as_ref().map(time_of_day).unwrap_or_default();
    let pod = pod_name(e.pod.as_ref());
    let (kind, detail) = match EventType::try_from(e.r#type).unwrap_or(EventType::Unspecified) {
        EventType::Scheduled => ("SCHEDULED", e.node.clone()),
        EventType::Failed if e.reason.is_empty() => ("FAILED", e.message.clone()),
        EventType::Failed => ("FAILED", format!("{}: {}", e.reason, e.message)),
        EventType::Preempted => (
            "PREEMPTED",
            format!("{} by {}", e.node, pod_name(e.preemptor.as_ref())),
        ),
        EventType::Waiting if e.message.is_empty() => ("WAITING", e.node.clone()),
        EventType::Waiting => ("WAITING", format!("{}: {}", e.node, e.message)),
        EventType::Unspecified => ("?", e.message.clone()),
    };
    format!("{time}  {kind:<9}  {pod}  {detail}")
        .trim_end()
        .to_string()
}

/// One line for an object change: time received, type, kind/namespace/name
/// (and a pod's node).
pub fn change_line(e: &WatchEvent, received: &prost_types::Timestamp) -> String {
    let obj = e
        .object
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or_default();
    let meta = &obj["metadata"];
    let kind = obj["kind"].as_str().unwrap_or("?").to_ascii_lowercase();
    let name = meta["name"].as_str().unwrap_or("");
    let target = match meta["namespace"].as_str().filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    };
    let mut line = format!("{}  {:<8}  {target}", time_of_day(received), e.r#type);
    if let Some(node) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
        && kind == "pod"
    {
        line.push_str(&format!("  node {node}"));
    }
    line
}

fn structured<M: ProtoMessage>(format: Output, msg: &M) -> Result<String> {
    let m = dynamic(msg)?;
    Ok(match format {
        Output::Yaml => format!("---\n{}", serde_yaml::to_string(&m)?),
        _ => format!("{}\n", serde_json::to_string(&m)?),
    })
}

async fn follow<M: ProtoMessage + Default>(
    mut stream: tonic::Streaming<M>,
    line: impl Fn(&M) -> Result<String>,
) -> Result<()> {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            msg = stream.message() => match msg {
                Ok(Some(m)) => emit(&line(&m)?)?,
                Ok(None) => return Ok(()),
                Err(status) => return Err(ClientError::Status(status)).rpc(),
            },
        }
    }
}

/// `berthctl watch [-n NS] [--kind K]`. Once the server has accepted the
/// watch, says so on stderr: events from then on are all shown.
pub async fn run(
    client: &mut Client,
    format: Output,
    server: &str,
    namespace: &str,
    kind: Option<&str>,
) -> Result<()> {
    match kind {
        None => {
            let stream = client.watch_events(namespace).await.rpc()?;
            eprintln!("Watching scheduling events on {server}; Ctrl-C to stop.");
            follow(stream, |e: &SchedulingEvent| match format {
                Output::Table => Ok(format!("{}\n", event_line(e))),
                f => structured(f, e),
            })
            .await
        }
        Some(k) => {
            let k = if matches!(k, "all" | "*") { "" } else { k };
            let stream = client.watch(k, namespace).await.rpc()?;
            eprintln!("Watching object changes on {server}; Ctrl-C to stop.");
            follow(stream, |e: &WatchEvent| match format {
                Output::Table => Ok(format!("{}\n", change_line(e, &now()))),
                f => structured(f, e),
            })
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Option<PodReference> {
        Some(PodReference {
            namespace: "default".into(),
            name: name.into(),
            ..Default::default()
        })
    }

    #[test]
    fn event_lines() {
        let t = prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_000_000,
        };
        let time = time_of_day(&t);
        assert!(time.ends_with(":20.123"), "{time}");
        let scheduled = SchedulingEvent {
            r#type: EventType::Scheduled as i32,
            pod: pod("web"),
            node: "n1".into(),
            time: Some(t),
            ..Default::default()
        };
        assert_eq!(
            event_line(&scheduled),
            format!("{time}  SCHEDULED  default/web  n1")
        );
        let failed = SchedulingEvent {
            r#type: EventType::Failed as i32,
            pod: pod("big"),
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
            time: Some(t),
            ..Default::default()
        };
        assert_eq!(
            event_line(&failed),
            format!(
                "{time}  FAILED     default/big  Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
            )
        );
        let preempted = SchedulingEvent {
            r#type: EventType::Preempted as i32,
            pod: pod("low"),
            node: "n1".into(),
            preemptor: pod("high"),
            time: Some(t),
            ..Default::default()
        };
        assert_eq!(
            event_line(&preempted),
            format!("{time}  PREEMPTED  default/low  n1 by default/high")
        );
    }

    #[test]
    fn change_lines() {
        let t = prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        };
        let ev = WatchEvent {
            r#type: "MODIFIED".into(),
            object: berth_proto::json::to_struct(&serde_json::json!({
                "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"nodeName": "n2"}
            })),
        };
        assert_eq!(
            change_line(&ev, &t),
            format!("{}  MODIFIED  pod/shop/web  node n2", time_of_day(&t))
        );
        let ev = WatchEvent {
            r#type: "DELETED".into(),
            object: berth_proto::json::to_struct(
                &serde_json::json!({"kind": "Node", "metadata": {"name": "n1"}}),
            ),
        };
        assert_eq!(
            change_line(&ev, &t),
            format!("{}  DELETED   node/n1", time_of_day(&t))
        );
    }
}
