//! Outages a person can read (issue 24, finding 5), through the real
//! berthd against the stand-in API server taken down mid-run: the first
//! binding takes the server down, every other binding and every watch
//! fails meanwhile. The log has one line when it goes down, a summary per
//! interval while it lasts, one line when it is back, and no line per
//! attempt; afterwards every pod is bound once. Lines are counted, not
//! timed: the test waits for berthd's own lines and the server's refusals.

use anyhow::{Result, ensure};
use berth_e2e::fake_apiserver::{BeforeBinding, FakeApiServer, ready_node};
use berth_e2e::{Berthd, TempDir, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    })
}

fn level(l: &Value) -> &str {
    l["level"].as_str().unwrap_or("")
}

#[tokio::test]
async fn an_api_server_outage_is_a_line_down_summaries_and_a_line_back() -> Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create("/api/v1/nodes", ready_node("n1", "8", "32Gi"))?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    let names: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    for n in &names {
        fake.create(PODS, pod(n))?;
    }
    // The first binding takes the server down before it stores anything.
    fake.before_binding("default", "p0", BeforeBinding::GoDown);
    let dir = TempDir::new("outage")?;
    std::fs::create_dir_all(&dir.0)?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &path,
        "--leader-elect=false",
        "--outage-summary-interval=1s",
    ])
    .await?;

    berthd
        .wait_for(|l| message(l).contains(" is down: "))
        .await?;
    // Many attempts fail meanwhile (watches, the bindings' questions).
    fake.wait_refused(40).await?;
    berthd
        .wait_for(|l| message(l).contains(" still down after "))
        .await?;
    fake.come_back();
    berthd
        .wait_for(|l| message(l).contains(" is back after "))
        .await?;
    // Every pod is bound, once. berthd says it is back before any later
    // success is logged, but a binding under way can be answered as it
    // comes back: the lines read so far count too.
    let scheduled = |l: &Value| {
        (message(l) == "scheduled").then(|| l["fields"]["pod"].as_str().unwrap_or("").to_string())
    };
    let mut bound: std::collections::BTreeSet<String> =
        berthd.seen.iter().filter_map(scheduled).collect();
    let all_bound = if bound.len() == names.len() {
        Ok(Value::Null)
    } else {
        berthd
            .wait_for(|l| {
                bound.extend(scheduled(l));
                bound.len() == names.len()
            })
            .await
    };
    if let Err(e) = all_bound {
        // Once in a full suite run this timed out; say which pods were
        // left and what berthd said last, to find out why.
        let tail: Vec<&Value> = berthd.seen.iter().rev().take(60).collect();
        anyhow::bail!("{e}: bound only {bound:?}; berthd's last lines, newest first: {tail:#?}");
    }
    for n in &names {
        let bindings: Vec<u16> = fake
            .requests_to("POST", &format!("/{n}/binding"))
            .iter()
            .map(|r| r.status)
            .filter(|s| *s == 201)
            .collect();
        ensure!(bindings == [201], "{n}: {bindings:?}");
    }
    berthd.signal("TERM")?;
    let (_, lines) = berthd.exit_with_all_lines().await?;

    let down: Vec<&Value> = lines
        .iter()
        .filter(|l| message(l).contains(" is down: "))
        .collect();
    let summaries: Vec<&Value> = lines
        .iter()
        .filter(|l| message(l).contains(" still down after "))
        .collect();
    let back: Vec<&Value> = lines
        .iter()
        .filter(|l| message(l).contains(" is back after "))
        .collect();
    ensure!(down.len() == 1, "{down:#?}");
    ensure!(level(down[0]) == "WARN");
    ensure!(
        message(down[0]).starts_with("the API server 127.0.0.1:")
            && message(down[0])
                .contains("bindings, status writes and events fail and are retried with backoff"),
        "{}",
        message(down[0])
    );
    ensure!(back.len() == 1, "{back:#?}");
    ensure!(!summaries.is_empty());
    for s in &summaries {
        ensure!(
            message(s).contains(" attempts failed and ")
                && message(s).contains(" pods wait to be scheduled and "),
            "{}",
            message(s)
        );
    }
    // docs/operations.md quotes the three lines: held to these.
    for l in [down[0], summaries[0], back[0]] {
        berth_e2e::page_shows_like(
            "docs/operations.md",
            &format!("{} {}", level(l), message(l)),
        )?;
    }
    // Between the first line and the last, nothing at WARN or above but
    // the summaries: no line per attempt.
    let start = lines
        .iter()
        .position(|l| message(l).contains(" is down: "))
        .unwrap_or(0);
    let end = lines
        .iter()
        .position(|l| message(l).contains(" is back after "))
        .unwrap_or(0);
    let noise: Vec<&Value> = lines[start + 1..end]
        .iter()
        .filter(|l| matches!(level(l), "WARN" | "ERROR"))
        .filter(|l| !message(l).contains(" still down after "))
        .collect();
    ensure!(noise.is_empty(), "{noise:#?}");
    // Nor after it, for the pods whose bindings the outage failed: they
    // are requeued quietly and bound.
    let after: Vec<&Value> = lines[end..]
        .iter()
        .filter(|l| matches!(level(l), "WARN" | "ERROR"))
        .collect();
    ensure!(after.is_empty(), "{after:#?}");
    Ok(())
}
