//! Issue 28, item 4: answers that grow with the work fit the 4 MiB a
//! client takes by default. Before, a Simulate of the documented maximum,
//! 100,000 replicas, built a 12.4 MB answer that grpcurl (and every gRPC
//! client at its default limit) refused after berthd had done the work.
//! Now the first answer holds the summary and the placements that fit,
//! and `continue` tokens fetch the rest; GetQueue pages the same way.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use berth_e2e::{Berthd, grpcurl_path, message};
use serde_json::{Value, json};
use tokio::process::Command;

const GUARD: Duration = Duration::from_secs(600);

/// grpcurl (its default 4 MiB limit) calling `method` with `body`.
async fn grpcurl(addr: &str, method: &str, body: &Value) -> Result<Value> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(grpcurl_path()?)
            .args(["-plaintext", "-d", &body.to_string(), addr, method])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("grpcurl {method} hung"))??;
    ensure!(
        out.status.success(),
        "grpcurl {method}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn count(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

#[tokio::test]
async fn a_simulation_of_100000_replicas_reaches_grpcurl_a_page_at_a_time() -> Result<()> {
    let dir = Dir(std::env::temp_dir().join(format!("berth-big-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let cluster = dir.0.join("cluster.yaml");
    std::fs::write(
        &cluster,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '64', memory: 256Gi, pods: '110'}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: '64', memory: 256Gi, pods: '110'}}\n",
    )?;
    let berthd = Berthd::start(&["--cluster", cluster.to_str().context("path")?]).await?;
    let addr = berthd.addr.clone();
    let pod = json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]}});
    let first = grpcurl(
        &addr,
        "berth.v1.Scheduler/Simulate",
        &json!({"pods": [pod], "replicas": 100_000}),
    )
    .await?;
    // 220 fit; the others each say why not (as the 12.4 MB did).
    assert_eq!(count(&first["scheduled"]), 220, "the summary is whole");
    assert_eq!(count(&first["unschedulable"]), 99_780);
    assert_eq!(first["nodes"].as_array().map(Vec::len), Some(2));
    let mut seen = first["pods"].as_array().context("pods")?.len();
    assert!(
        seen > 0 && seen < 100_000,
        "{seen} placements in the first page"
    );
    assert_eq!(seen as u64 + count(&first["remainingPods"]), 100_000);
    let mut token = first["continue"].as_str().context("continue")?.to_string();
    let mut last = first["pods"][seen - 1]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut pages = 1;
    while !token.is_empty() {
        let page = grpcurl(
            &addr,
            "berth.v1.Scheduler/Simulate",
            &json!({"continue": token}),
        )
        .await?;
        let pods = page["pods"].as_array().context("pods")?;
        // The pages follow on: web-N, then web-(N+1).
        let n: u64 = last.trim_start_matches("web-").parse()?;
        assert_eq!(pods[0]["name"], format!("web-{}", n + 1));
        seen += pods.len();
        last = pods[pods.len() - 1]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        token = page["continue"].as_str().unwrap_or("").to_string();
        pages += 1;
        ensure!(pages < 100, "too many pages");
    }
    assert_eq!(seen, 100_000);
    assert_eq!(last, "web-99999");
    assert!(pages >= 2, "{pages} pages");

    // A limit makes smaller pages; a token is refused with other fields.
    let small = grpcurl(
        &addr,
        "berth.v1.Scheduler/Simulate",
        &json!({"pods": [pod], "replicas": 5, "limit": 2}),
    )
    .await?;
    assert_eq!(small["pods"].as_array().map(Vec::len), Some(2));
    assert_eq!(count(&small["remainingPods"]), 3);

    // berthctl (through the client crate) follows the pages by itself.
    let file = dir.0.join("web.json");
    std::fs::write(&file, pod.to_string())?;
    let out = Command::new(berth_e2e::berthctl_path()?)
        .args(["-s", &addr, "-o", "json", "simulate", "-f"])
        .arg(&file)
        .args(["--replicas", "50000"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(all["pods"].as_array().map(Vec::len), Some(50_000));
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn get_queue_pages_as_lists_do() -> Result<()> {
    let dir = Dir(std::env::temp_dir().join(format!("berth-queue-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let cluster = dir.0.join("cluster.yaml");
    let mut yaml =
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '1', memory: 1Gi, pods: '10'}}\n".to_string();
    for i in 0..5 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: big-{i}, namespace: default}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: '8'}}}}}}]}}\n"
        ));
    }
    std::fs::write(&cluster, yaml)?;
    let mut berthd = Berthd::start(&["--cluster", cluster.to_str().context("path")?]).await?;
    berthd
        .wait_for(|l| message(l).starts_with("scheduler idle") && l["fields"]["pending"] == 5)
        .await?;
    let addr = berthd.addr.clone();
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = grpcurl(
            &addr,
            "berth.v1.Scheduler/GetQueue",
            &json!({"limit": 2, "continue": token}),
        )
        .await?;
        for p in page["pods"].as_array().context("pods")? {
            names.push(p["name"].as_str().unwrap_or("").to_string());
        }
        token = page["continue"].as_str().unwrap_or("").to_string();
        if token.is_empty() {
            break;
        }
        assert!(count(&page["remainingItemCount"]) > 0);
    }
    names.sort();
    assert_eq!(names, ["big-0", "big-1", "big-2", "big-3", "big-4"]);
    assert!(berthd.stop().await?.success());
    Ok(())
}
