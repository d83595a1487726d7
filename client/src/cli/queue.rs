//! `berthctl queue`: the pods waiting to be scheduled and why.

use crate::Client;
use crate::pb::{GetQueueResponse, QueueName, QueuedPod};
use anyhow::Result;

use crate::cli::Rpc;
use crate::cli::output::{Output, emit, emit_proto};
use crate::cli::table::Table;

/// `berthctl queue [-n NS]`.
pub async fn run(client: &mut Client, format: Output, namespace: &str) -> Result<()> {
    let pods = client.get_queue(namespace).await.rpc()?;
    if format != Output::Table {
        return emit_proto(
            format,
            &GetQueueResponse {
                pods,
                ..Default::default()
            },
        );
    }
    if pods.is_empty() {
        eprintln!("No pods are waiting.");
        return Ok(());
    }
    emit(&render(&pods))
}

fn queue_name(q: i32) -> &'static str {
    match QueueName::try_from(q).unwrap_or(QueueName::Unspecified) {
        QueueName::Active => "active",
        QueueName::Backoff => "backoff",
        QueueName::Unschedulable => "unschedulable",
        QueueName::Gated => "gated",
        QueueName::InFlight => "in-flight",
        QueueName::Incomplete => "incomplete",
        QueueName::Pending => "pending",
        QueueName::Unspecified => "?",
    }
}

/// Why the pod waits: for a pod held at Permit, who holds it, since when,
/// until when; otherwise its last failure.
fn reason(p: &QueuedPod) -> String {
    let Some(w) = p.permit_wait.as_ref() else {
        return p.last_failure.clone();
    };
    let since = w
        .since
        .as_ref()
        .map(crate::cli::watch::time_of_day)
        .unwrap_or_default();
    let who: Vec<String> = w
        .waiting_for
        .iter()
        .map(|x| match x.until.as_ref() {
            Some(t) => format!("{} (until {})", x.plugin, crate::cli::watch::time_of_day(t)),
            None => x.plugin.clone(),
        })
        .collect();
    format!(
        "waiting at Permit on {} since {since} for {}",
        w.node,
        who.join(", ")
    )
}

/// The queue as a table; BACKOFF-UNTIL and NOMINATED appear when some pod
/// has them.
pub fn render(pods: &[QueuedPod]) -> String {
    let backoff = pods.iter().any(|p| p.backoff_expires_at.is_some());
    let nominated = pods.iter().any(|p| !p.nominated_node_name.is_empty());
    let mut headers = vec!["NAMESPACE", "NAME", "QUEUE", "PRIORITY", "ATTEMPTS"];
    if backoff {
        headers.push("BACKOFF-UNTIL");
    }
    if nominated {
        headers.push("NOMINATED");
    }
    headers.push("REASON");
    let mut t = Table::new(headers).right(3).right(4);
    for p in pods {
        let mut row = vec![
            p.namespace.clone(),
            p.name.clone(),
            queue_name(p.queue).to_string(),
            p.priority.to_string(),
            p.attempts.to_string(),
        ];
        if backoff {
            row.push(
                p.backoff_expires_at
                    .as_ref()
                    .map(crate::cli::watch::time_of_day)
                    .unwrap_or_default(),
            );
        }
        if nominated {
            row.push(p.nominated_node_name.clone());
        }
        row.push(reason(p));
        t.row(row);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, queue: QueueName) -> QueuedPod {
        QueuedPod {
            namespace: "default".into(),
            name: name.into(),
            queue: queue as i32,
            attempts: 1,
            last_failure: "0/3 nodes are available: 3 Insufficient cpu.".into(),
            ..Default::default()
        }
    }

    #[test]
    fn optional_columns_appear_when_used() {
        let plain = render(&[pod("a", QueueName::Unschedulable)]);
        assert_eq!(
            plain,
            "\
NAMESPACE   NAME   QUEUE           PRIORITY   ATTEMPTS   REASON
default     a      unschedulable          0          1   0/3 nodes are available: 3 Insufficient cpu.
"
        );
        let mut b = pod("b", QueueName::Backoff);
        b.backoff_expires_at = Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        });
        b.nominated_node_name = "n2".into();
        let text = render(&[pod("a", QueueName::Unschedulable), b]);
        let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "NAMESPACE",
                "NAME",
                "QUEUE",
                "PRIORITY",
                "ATTEMPTS",
                "BACKOFF-UNTIL",
                "NOMINATED",
                "REASON"
            ]
        );
        let row_b = text.lines().nth(2).unwrap();
        assert!(row_b.contains("backoff"), "{row_b}");
        assert!(row_b.contains("   n2   "), "{row_b}");
        assert!(
            row_b.contains(&crate::cli::watch::time_of_day(&prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0
            })),
            "{row_b}"
        );
    }

    #[test]
    fn a_pod_held_at_permit_says_by_whom_and_until_when() {
        let at = |seconds| prost_types::Timestamp { seconds, nanos: 0 };
        let mut p = pod("first", QueueName::InFlight);
        p.permit_wait = Some(crate::pb::PermitWait {
            node: "n1".into(),
            since: Some(at(0)),
            waiting_for: vec![crate::pb::PermitWaiter {
                plugin: "Coscheduling".into(),
                until: Some(at(600)),
            }],
        });
        let since = crate::cli::watch::time_of_day(&at(0));
        let until = crate::cli::watch::time_of_day(&at(600));
        assert_eq!(
            reason(&p),
            format!("waiting at Permit on n1 since {since} for Coscheduling (until {until})")
        );
    }
}
