//! An extender outage a person can read (issue 28, item 3), through the
//! real berthd and the real `faulty` test extender killed and restarted:
//! one line when it goes down (what its circuit breaker does, when berthd
//! dials again, what becomes of pods), a summary per interval while it
//! stays down, one line when it is back, no line per failed attempt; and
//! the pods that failed only because of it leave their backoff at its
//! Hello (their backoff here is five minutes: only that move can bind them
//! now). Lines are counted, not timed.

use anyhow::{Result, ensure};
use berth_client::pb::QueueName;
use berth_e2e::{Berthd, Events, Extender, message};
use serde_json::Value;

mod support;
use support::*;

fn level(l: &Value) -> &str {
    l["level"].as_str().unwrap_or("")
}

#[tokio::test]
async fn an_extender_outage_is_a_line_down_summaries_a_line_back_and_its_pods_resume_at_hello()
-> Result<()> {
    let mut faulty = Extender::start("faulty", &[]).await?;
    let cfg = config(
        "    filter: {enabled: [{name: faulty}]}",
        &format!(
            "- name: faulty\n  endpoint: {}\n  points: [filter]\n  timeout: 5s",
            faulty.endpoint()
        ),
    )
    .replace(
        "kind: KubeSchedulerConfiguration\n",
        "kind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 300\npodMaxBackoffSeconds: 300\n",
    );
    let dir = std::env::temp_dir().join(format!("berth-extender-outage-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cluster_file, config_file) = (dir.join("cluster.yaml"), dir.join("config.yaml"));
    std::fs::write(&cluster_file, plain_nodes(3))?;
    std::fs::write(&config_file, cfg)?;
    let mut berthd = Berthd::start(&[
        "--seed",
        "1",
        "--cluster",
        &cluster_file.display().to_string(),
        "--config",
        &config_file.display().to_string(),
        "--outage-summary-interval=1s",
    ])
    .await?;
    wait_connected(&mut berthd, &["faulty"]).await?;
    let mut client = berthd.client().await?;
    let events = Events::watch(&mut client).await?;
    let mut s = Setup {
        berthd,
        client,
        events,
        dir,
    };

    faulty.kill().await?;
    let down = berthd_line(&mut s.berthd, |l| {
        message(l).starts_with(r#"extender "faulty" is down: "#)
    })
    .await?;
    let text = message(&down);
    ensure!(
        text.contains("after 5 failed calls in a row its circuit breaker fails calls at once for 10.0s, then lets one call probe it")
            && text.contains("berthd dials it again in ")
            && text.contains("pods that need it fail their attempt and are retried as soon as it is back (its Hello)"),
        "{text}"
    );
    // Pods arriving meanwhile fail at Filter, each once, into a five-minute
    // backoff.
    let names: Vec<String> = (0..12).map(|i| format!("p{i:02}")).collect();
    let pods: Vec<Value> = names.iter().map(|n| pod("default", n)).collect();
    s.apply(&pods).await?;
    for n in &names {
        let failure = s.failed("default", n, 1).await?;
        ensure!(
            failure.contains(r#"extender "faulty" failed at Filter: not connected"#),
            "{failure}"
        );
    }
    berthd_line(&mut s.berthd, |l| {
        message(l).starts_with(r#"extender "faulty" still down after "#)
    })
    .await?;
    let queue = s.client.get_queue("default").await?;
    ensure!(
        queue
            .iter()
            .filter(|q| q.queue() == QueueName::Backoff)
            .count()
            == names.len(),
        "{queue:#?}"
    );

    // Back: its Hello moves them out of their backoff; all bind.
    faulty.restart_with::<&str>(&[]).await?;
    let resumed = s
        .berthd
        .wait_for(|l| {
            message(l).starts_with(r#"extender "faulty" is back: "#)
                && message(l).ends_with("pods that failed because of it are retried now")
        })
        .await?;
    ensure!(resumed["fields"]["pods"] == names.len(), "{resumed}");
    let queue = s.client.get_queue("default").await?;
    ensure!(
        queue.iter().all(|q| q.queue() != QueueName::Backoff),
        "{queue:#?}"
    );
    for n in &names {
        s.bound("default", n).await?;
    }

    s.berthd.signal("TERM")?;
    let (_, lines) = s.berthd.exit_with_all_lines().await?;
    let of = |prefix: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| message(l).starts_with(prefix))
            .collect()
    };
    ensure!(of(r#"extender "faulty" is down: "#).len() == 1);
    ensure!(of(r#"extender "faulty" is back after "#).len() == 1);
    let summaries = of(r#"extender "faulty" still down after "#);
    ensure!(!summaries.is_empty());
    ensure!(
        summaries
            .iter()
            .all(|l| message(l).contains(" attempts failed and ")
                && message(l).contains(" were skipped ")),
        "{summaries:#?}"
    );
    let start = lines
        .iter()
        .position(|l| message(l).starts_with(r#"extender "faulty" is down: "#))
        .unwrap_or(0);
    let end = lines
        .iter()
        .position(|l| message(l).starts_with(r#"extender "faulty" is back after "#))
        .unwrap_or(0);
    let noise: Vec<&Value> = lines[start + 1..end]
        .iter()
        .filter(|l| matches!(level(l), "WARN" | "ERROR"))
        .filter(|l| !message(l).contains(" still down after "))
        .collect();
    ensure!(noise.is_empty(), "{noise:#?}");
    Ok(())
}
