//! Record and replay, end to end: berthd records a run on its embedded
//! cluster (objects applied over the API, as a user would), and
//! `berthctl replay` plays the trace through two configurations on another
//! berthd. The report's counts are checked against what was applied, and
//! the configuration the recorded berthd ran, with its seed, places every
//! pod where the recording did.
//!
//! The HTML report is opened in a real headless Chromium (Debian's
//! `chromium`, which tests/run.sh installs), and its screenshot must show
//! every configuration's line.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_client::pb::EventType;
use berth_e2e::{Berthd, Events, TempDir, bench_path, berthctl_path};
use serde_json::Value;
use tokio::process::Command;

const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n3, labels: {kubernetes.io/hostname: n3}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"#;

fn pod(name: &str, cpu: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: {cpu}, memory: 100Mi}}}}}}]\n{extra}---\n"
    )
}

const LEAST: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n";
const MOST: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: MostAllocated\n";

fn scheduled(events: &Events) -> usize {
    events
        .all()
        .iter()
        .filter(|e| e.r#type == EventType::Scheduled as i32)
        .count()
}

/// Runs berthctl with `args`; its stdout, or the failure with stderr.
async fn berthctl(args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        Command::new(berthctl_path()?)
            .args(args)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .context("berthctl hung")??;
    ensure!(
        out.status.success(),
        "berthctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn n(v: &Value) -> u64 {
    // Canonical proto3 JSON: 64-bit integers as strings, zero left out.
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(x) => x.as_u64().unwrap_or(0),
        _ => 0,
    }
}

/// Records a run of berthd on its embedded cluster: nodes, then pods in
/// steps (a batch, one that never fits, a high-priority one that preempts,
/// deletions, late arrivals), each step waited for. Returns the trace's
/// path and the victims.
async fn record(dir: &TempDir) -> Result<(String, Vec<String>)> {
    let trace = dir.path().join("day.trace.gz").display().to_string();
    let berthd = Berthd::start(&["--empty-cluster", "--seed", "7", "--record", &trace]).await?;
    let mut client = berthd.client().await?;
    let events = Events::watch(&mut client).await?;
    client.apply(&[], NODES).await?;
    let batch: String = (0..8).map(|i| pod(&format!("web-{i}"), "1", "")).collect();
    client.apply(&[], &batch).await?;
    events
        .wait_until("8 pods scheduled", |_| scheduled(&events) >= 8)
        .await?;
    client.apply(&[], &pod("huge", "64", "")).await?;
    events
        .wait_count(EventType::Failed, "default", "huge", 1)
        .await?;
    // Only n1 may take it, and only by evicting: one candidate node.
    let vip = pod(
        "vip",
        "3",
        "  priorityClassName: high\n  nodeSelector: {kubernetes.io/hostname: n1}\n",
    );
    client.apply(&[], &vip).await?;
    events
        .wait_count(EventType::Scheduled, "default", "vip", 1)
        .await?;
    let victims: Vec<String> = events
        .all()
        .iter()
        .filter(|e| e.r#type == EventType::Preempted as i32)
        .filter_map(|e| e.pod.as_ref().map(|p| p.name.clone()))
        .collect();
    ensure!(!victims.is_empty(), "vip preempted nobody");
    // Two pods that are still running leave.
    let gone: Vec<String> = (0..8)
        .map(|i| format!("web-{i}"))
        .filter(|p| !victims.contains(p))
        .take(2)
        .collect();
    for p in &gone {
        client.delete("Pod", "default", p).await?;
    }
    let late: String = (0..2)
        .map(|i| pod(&format!("late-{i}"), "500m", ""))
        .collect();
    client.apply(&[], &late).await?;
    events
        .wait_count(EventType::Scheduled, "default", "late-1", 1)
        .await?;
    events
        .wait_count(EventType::Scheduled, "default", "late-0", 1)
        .await?;
    drop(events);
    let status = berthd.stop().await?;
    ensure!(status.success(), "berthd exited {status}");
    Ok((trace, victims))
}

#[tokio::test]
async fn a_recorded_day_replays_through_two_configurations() -> Result<()> {
    let dir = TempDir::new("replay")?;
    let (trace, victims) = record(&dir).await?;
    let least = dir.write("least.yaml", LEAST)?;
    let most = dir.write("most.yaml", MOST)?;
    let html = dir.path().join("report.html").display().to_string();

    // Replayed on another berthd, whose own (empty) cluster is untouched.
    let replayer = Berthd::start(&["--empty-cluster"]).await?;
    let out = berthctl(&[
        "-s",
        &replayer.addr,
        "replay",
        &trace,
        "--config",
        &least,
        "--config",
        &most,
        "-o",
        "json",
        "--html",
        &html,
    ])
    .await?;
    let report: Value = serde_json::from_str(&out)?;
    let configs = report["configs"].as_array().context("configs")?;
    ensure!(configs.len() == 2, "{report}");
    // What was applied: 8 + huge + vip + 2 late pods, all pending on
    // arrival; all but huge were bound in the recording.
    ensure!(n(&report["recordedScheduled"]) == 11, "{report}");
    for c in configs {
        let name = c["name"].as_str().unwrap_or("");
        ensure!(n(&c["arrived"]) == 12, "{name}: arrived {c}");
        ensure!(n(&c["scheduled"]) == 11, "{name}: scheduled {c}");
        ensure!(n(&c["pending"]) == 1, "{name}: pending {c}");
        ensure!(n(&c["deletedPending"]) == 0, "{name}: {c}");
        ensure!(
            c["pendingReasons"][0]["reason"] == "Insufficient cpu",
            "{name}: reasons {c}"
        );
        ensure!(n(&c["preemptors"]) == 1, "{name}: preemptors {c}");
        ensure!(n(&c["refusedRecords"]) == 0, "{name}: {c}");
        ensure!(
            c["series"]["tMicros"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{name}: no samples"
        );
    }
    // The configuration berthd ran, with its seed (from the trace), places
    // every pod where the recording did, evicting the same victims.
    ensure!(
        n(&configs[0]["victims"]) == victims.len() as u64,
        "victims {} vs recorded {victims:?}",
        configs[0]["victims"]
    );
    let vs_recorded = report["comparisons"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["a"] == "least" && c["b"] == "recorded"))
        .context("least vs recorded")?;
    ensure!(
        n(&vs_recorded["sameNode"]) == 11
            && n(&vs_recorded["differentNode"]) == 0
            && n(&vs_recorded["onlyA"]) == 0
            && n(&vs_recorded["onlyB"]) == 0,
        "the recording's placements not reproduced: {vs_recorded}"
    );
    ensure!(Path::new(&html).exists(), "no HTML report");

    // The table, as a user reads it.
    let table = berthctl(&[
        "-s",
        &replayer.addr,
        "replay",
        &trace,
        "--config",
        &least,
        "--config",
        &most,
    ])
    .await?;
    for want in [
        "pods arrived",
        "still pending",
        "time to schedule p99",
        "Insufficient cpu",
        "least   recorded",
    ] {
        ensure!(table.contains(want), "no {want:?} in:\n{table}");
    }
    // Nothing the replay did reached the replaying berthd's cluster.
    let mut c = replayer.client().await?;
    ensure!(c.list("Pod", "").await?.is_empty(), "the replay wrote pods");
    Ok(())
}

#[tokio::test]
async fn a_bad_trace_or_configuration_is_refused_naming_why() -> Result<()> {
    let dir = TempDir::new("replay-bad")?;
    let bad = dir.write("bad.trace", "hello\n")?;
    let least = dir.write("least.yaml", LEAST)?;
    let wrong = dir.write("wrong.yaml", &LEAST.replace("profiles", "profilez"))?;
    let berthd = Berthd::start(&["--empty-cluster"]).await?;
    let run = |args: Vec<String>| async move {
        let out = Command::new(berthctl_path()?)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await?;
        anyhow::Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        ))
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let (code, err) = run(s(&["-s", &berthd.addr, "replay", &bad, "--config", &least])).await?;
    ensure!(code == Some(1), "{code:?} {err}");
    ensure!(
        err.contains("InvalidArgument") && err.contains("line 1: not a berth trace header"),
        "{err}"
    );
    let good = dir.path().join("good.trace.gz").display().to_string();
    generate(&good, 20).await?;
    let (code, err) = run(s(&[
        "-s",
        &berthd.addr,
        "replay",
        &good,
        "--config",
        &wrong,
    ]))
    .await?;
    ensure!(code == Some(1), "{code:?} {err}");
    ensure!(
        err.contains("start.configs[0].config_yaml") && err.contains("profilez"),
        "{err}"
    );
    Ok(())
}

/// A generated trace: the bench's default pods on 4 nodes over an hour.
async fn generate(out: &str, pods: usize) -> Result<()> {
    let status = Command::new(bench_path()?)
        .args([
            "trace",
            "--nodes",
            "4",
            "--pods",
            &pods.to_string(),
            "--duration",
            "1h",
            "--lifetime",
            "20m",
            "--template",
            "default=3,low-priority=1",
            "--seed",
            "1",
            "-o",
            out,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await?;
    ensure!(status.success(), "berth-bench trace: {status}");
    Ok(())
}

/// Debian's chromium (tests/run.sh installs it), or CHROMIUM.
fn chromium() -> Result<String> {
    if let Ok(c) = std::env::var("CHROMIUM") {
        return Ok(c);
    }
    for c in ["chromium", "chromium-browser"] {
        if std::process::Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Ok(c.to_string());
        }
    }
    bail!("chromium is required (tests/run.sh installs Debian's chromium), or set CHROMIUM")
}

#[tokio::test]
async fn the_html_report_renders_its_plots_in_headless_chromium() -> Result<()> {
    let browser = chromium()?;
    let dir = TempDir::new("replay-html")?;
    let trace = dir.path().join("day.trace.gz").display().to_string();
    generate(&trace, 300).await?;
    let least = dir.write("least.yaml", LEAST)?;
    let most = dir.write("most.yaml", MOST)?;
    let html = dir.path().join("report.html");
    let berthd = Berthd::start(&["--empty-cluster"]).await?;
    berthctl(&[
        "-s",
        &berthd.addr,
        "replay",
        &trace,
        "--config",
        &least,
        "--config",
        &most,
        "--html",
        &html.display().to_string(),
    ])
    .await?;
    let png = dir.path().join("shot.png");
    let profile = dir.path().join("chromium-profile");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                &format!("--user-data-dir={}", profile.display()),
                &format!("--screenshot={}", png.display()),
                "--window-size=860,1900",
                &format!("file://{}", html.display()),
            ])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .context("chromium hung")??;
    ensure!(
        png.exists(),
        "chromium made no screenshot ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Each configuration's line colour is drawn: the plots rendered.
    let img = image_pixels(&png)?;
    let near = |p: [u8; 3], c: [u8; 3]| {
        p.iter()
            .zip(c)
            .all(|(a, b)| (*a as i32 - b as i32).abs() <= 12)
    };
    for (name, colour) in [("least", [0x00, 0x72, 0xB2]), ("most", [0xE6, 0x9F, 0x00])] {
        let count = img.iter().filter(|p| near(**p, colour)).count();
        ensure!(
            count > 500,
            "{name}'s line: {count} pixels of its colour in the screenshot"
        );
    }
    Ok(())
}

/// The screenshot's pixels (RGB).
fn image_pixels(path: &Path) -> Result<Vec<[u8; 3]>> {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path)?));
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut buf)?;
    let bytes = &buf[..info.buffer_size()];
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => bail!("unexpected PNG colour type {other:?}"),
    };
    Ok(bytes
        .chunks_exact(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect())
}

/// A remote extender named by a configuration takes part in the replay's
/// cycles as in berthd's: quota-core admits team-a's labelled pods within
/// its 2000m quota, so the third is refused with its reason, while the
/// configuration without it binds all three.
#[tokio::test]
async fn a_remote_extender_takes_part_in_its_configurations_cycles() -> Result<()> {
    let core = berth_e2e::Extender::start("quota-core", &["--quota", "team-a=2000"]).await?;
    let dir = TempDir::new("replay-extender")?;
    let node = |name: &str| {
        format!(
            r#"{{"t":0,"add":{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}","uid":"uid-{name}"}},"status":{{"allocatable":{{"cpu":"4","memory":"16Gi","pods":"110"}},"conditions":[{{"type":"Ready","status":"True"}}]}}}}}}"#
        )
    };
    let pod = |i: u64| {
        format!(
            r#"{{"t":{},"add":{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"a{i}","namespace":"team-a","uid":"uid-a{i}","labels":{{"quota-core.example.com/app":"batch"}}}},"spec":{{"containers":[{{"name":"c","resources":{{"requests":{{"cpu":"1000m"}}}}}}]}}}}}}"#,
            i * 1_000_000
        )
    };
    let lines = [
        r#"{"berthTrace":1,"started":"2026-03-01T09:00:00Z","source":"generated"}"#.to_string(),
        r#"{"t":0,"add":{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}}}"#
            .to_string(),
        node("n1"),
        node("n2"),
        r#"{"t":0,"synced":{}}"#.to_string(),
        pod(1),
        pod(2),
        pod(3),
    ];
    let trace = dir.write("quota.trace", &(lines.join("\n") + "\n"))?;
    let plain = dir.write("plain.yaml", LEAST)?;
    let quota = dir.write(
        "quota.yaml",
        &format!(
            "{LEAST}  plugins:\n    preFilter: {{enabled: [{{name: quota-core}}]}}\n    filter: {{enabled: [{{name: quota-core}}]}}\n    reserve: {{enabled: [{{name: quota-core}}]}}\n    postBind: {{enabled: [{{name: quota-core}}]}}\nberthExtenders:\n- name: quota-core\n  endpoint: {}\n  points: [preFilter, filter, reserve, postBind]\n  timeout: 5s\n",
            core.endpoint()
        ),
    )?;
    let berthd = Berthd::start(&["--empty-cluster"]).await?;
    let out = berthctl(&[
        "-s",
        &berthd.addr,
        "replay",
        &trace,
        "--config",
        &plain,
        "--config",
        &quota,
        "-o",
        "json",
    ])
    .await?;
    let report: Value = serde_json::from_str(&out)?;
    let c = &report["configs"];
    ensure!(n(&c[0]["scheduled"]) == 3, "plain: {}", c[0]);
    ensure!(
        n(&c[1]["scheduled"]) == 2 && n(&c[1]["pending"]) == 1,
        "quota: {}",
        c[1]
    );
    let reason = c[1]["pendingReasons"][0]["reason"].as_str().unwrap_or("");
    ensure!(
        reason.contains("namespace team-a over quota"),
        "quota's reason: {reason}"
    );
    Ok(())
}

/// The sh blocks of docs/replay.md's walk-through, in order, each with the
/// text block that follows it (before the next command), if any.
fn walkthrough() -> Result<Vec<(String, Option<Vec<String>>)>> {
    let page = std::fs::read_to_string(berth_e2e::workspace_root().join("docs/replay.md"))?;
    let section = page
        .split("## From a generated trace to a side-by-side report")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .context("the walk-through section")?;
    let mut out: Vec<(String, Option<Vec<String>>)> = Vec::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        let lang = match l.strip_prefix("```") {
            Some(lang) if !lang.is_empty() => lang.to_string(),
            _ => continue,
        };
        let body: Vec<String> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .map(str::to_string)
            .collect();
        match lang.as_str() {
            "sh" => out.push((body.join("\n"), None)),
            "text" => {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(body);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Whether `shown` (a line of the page, `[..]` for what varies) matches
/// `actual`.
fn line_matches(shown: &str, actual: &str) -> bool {
    let parts: Vec<&str> = shown.split("[..]").collect();
    let mut rest = actual;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            let Some(at) = rest.find(p) else {
                return false;
            };
            rest = &rest[at + p.len()..];
        }
    }
    rest.is_empty() || parts.len() > 1
}

/// docs/replay.md walks a newcomer from a generated trace to a
/// side-by-side report in five commands: they run here as the page shows
/// them (berthd on a free port, which BERTH_SERVER gives berthctl; the
/// build is this test's own), and print what the page shows.
#[tokio::test]
async fn the_replay_page_runs_as_shown() -> Result<()> {
    let steps = walkthrough()?;
    ensure!(steps.len() == 5, "five commands, not {}", steps.len());
    ensure!(
        steps[0]
            .0
            .starts_with("cargo build --release -p berth-server -p berth-client -p berth-bench"),
        "the first command builds the three binaries: {}",
        steps[0].0
    );
    let dir = TempDir::new("replay-docs")?;
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin)?;
    for (name, path) in [
        ("berthctl", berthctl_path()?),
        ("berth-bench", bench_path()?),
        ("berthd", berth_e2e::berthd_path()?),
    ] {
        std::os::unix::fs::symlink(path, bin.join(name))?;
    }
    std::os::unix::fs::symlink(
        berth_e2e::workspace_root().join("server"),
        dir.path().join("server"),
    )?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut berthd: Option<Berthd> = None;
    let mut problems = Vec::new();
    for (command, shown) in &steps[1..] {
        if command.starts_with("berthd ") && command.ends_with(" &") {
            // The page's berthd, on a free port.
            let args: Vec<&str> = command
                .trim_end_matches(" &")
                .split_whitespace()
                .skip(1)
                .collect();
            berthd = Some(Berthd::start(&args).await?);
            continue;
        }
        let server = berthd.as_ref().map(|b| b.addr.clone()).unwrap_or_default();
        let out = tokio::time::timeout(
            Duration::from_secs(600),
            Command::new("sh")
                .args(["-c", command])
                .current_dir(dir.path())
                .env("PATH", &path)
                .env("BERTH_SERVER", &server)
                .stdin(Stdio::null())
                .output(),
        )
        .await
        .with_context(|| format!("{command}: hung"))??;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            problems.push(format!("{command}: {}: {text}", out.status));
            continue;
        }
        // Every line the page shows comes, in order (lines it leaves out
        // may come between).
        if let Some(shown) = shown {
            let actual: Vec<&str> = text.lines().collect();
            let mut at = 0;
            for want in shown.iter().filter(|l| l.trim() != "...") {
                match actual[at..].iter().position(|a| line_matches(want, a)) {
                    Some(i) => at += i + 1,
                    None => {
                        problems.push(format!(
                            "{command}: the page shows {want:?}, berth printed:\n{text}"
                        ));
                        break;
                    }
                }
            }
        }
    }
    ensure!(
        dir.path().join("report.html").exists(),
        "the last command wrote no report.html"
    );
    ensure!(problems.is_empty(), "{}", problems.join("\n\n"));
    Ok(())
}
