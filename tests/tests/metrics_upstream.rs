//! berthd's `/metrics` against kube-scheduler v1.37's families
//! (`berth_server::metrics::upstream::FAMILIES`, one entry per family with
//! upstream's name, type, labels and stability): scraped from the real
//! berthd in kube mode (leader election on, a pod bound, against the
//! stand-in API server, with GenericWorkload on as every other gate berth
//! implements both ways is by default), every family marked served is declared with its
//! type, its help starts with its stability as component-base writes it,
//! and each of its samples has exactly its labels; a family marked not
//! served is absent; and no family under an upstream prefix is served that
//! the list does not name. Adding a family to berth is adding its entry.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::{FakeApiServer, ready_node};
use berth_e2e::{Berthd, http_get, message};
use berth_server::metrics::upstream::{FAMILIES, Stability, UPSTREAM_PREFIXES, family};
use serde_json::json;

/// What a scrape declares: per family its type, help, and the label-name
/// sets of its samples.
#[derive(Debug, Default)]
struct Declared {
    kind: String,
    help: String,
    label_sets: BTreeSet<Vec<String>>,
}

fn parse(text: &str) -> Result<BTreeMap<String, Declared>> {
    let mut out: BTreeMap<String, Declared> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').context("HELP")?;
            current = name.to_string();
            out.entry(current.clone()).or_default().help = help.to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').context("TYPE")?;
            out.entry(name.to_string()).or_default().kind = kind.to_string();
            continue;
        }
        let series = line.rsplit_once(' ').context("sample")?.0;
        let labels: Vec<String> = match series.split_once('{') {
            None => Vec::new(),
            Some((_, l)) => {
                let mut names: Vec<String> = l
                    .trim_end_matches('}')
                    .split("\",")
                    .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_string()))
                    .filter(|k| k != "le")
                    .collect();
                names.sort();
                names
            }
        };
        out.entry(current.clone())
            .or_default()
            .label_sets
            .insert(labels);
    }
    Ok(out)
}

#[tokio::test]
async fn metrics_match_kube_scheduler_v1_37s_names_labels_and_stability() -> Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create("/api/v1/nodes", ready_node("n1", "4", "16Gi"))?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    fake.create(
        "/api/v1/namespaces/default/pods",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m"}}}]},
        }),
    )?;
    let dir = std::env::temp_dir().join(format!("berth-metrics-upstream-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    // Every gate berth implements both ways on (GenericWorkload is the one
    // off by default): the families it registers are listed too.
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &path,
        "--http-listen",
        "127.0.0.1:0",
        "--feature-gates=GenericWorkload=true",
    ])
    .await?;
    berthd
        .wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/p")
        .await?;
    let (status, text) = http_get(&berthd.http_addr()?, "/metrics").await?;
    ensure!(status == 200);
    let declared = parse(&text)?;
    let _ = std::fs::remove_dir_all(&dir);

    let mut problems = Vec::new();
    for f in FAMILIES {
        let got = declared.get(f.name);
        match (f.served, got) {
            (Ok(()), None) => problems.push(format!("{}: listed as served, not declared", f.name)),
            (Ok(()), Some(d)) => {
                if d.kind != f.kind {
                    problems.push(format!(
                        "{}: type {} (upstream: {})",
                        f.name, d.kind, f.kind
                    ));
                }
                if f.stability == Stability::Raw {
                    if d.help.starts_with('[') {
                        problems.push(format!(
                            "{}: help {:?} has a stability marker, which upstream's raw registration has not",
                            f.name, d.help
                        ));
                    }
                } else {
                    let prefix = format!("[{}] ", f.stability.as_str());
                    if !d.help.starts_with(&prefix) {
                        problems.push(format!("{}: help {:?} lacks {prefix:?}", f.name, d.help));
                    }
                }
                let want: Vec<String> = f.labels.iter().map(|l| l.to_string()).collect();
                for set in &d.label_sets {
                    if *set != want {
                        problems.push(format!("{}: labels {set:?} (upstream: {want:?})", f.name));
                    }
                }
            }
            (Err(_), Some(_)) => problems.push(format!(
                "{}: served, but listed as not served: mark it served",
                f.name
            )),
            (Err(_), None) => {}
        }
    }
    for name in declared.keys() {
        if UPSTREAM_PREFIXES.iter().any(|p| name.starts_with(p)) && family(name).is_none() {
            problems.push(format!(
                "{name}: an upstream-looking family that kube-scheduler v1.37 does not serve (or list it)"
            ));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));

    // The families of issue 24's finding 6 have samples here.
    for name in [
        "leader_election_master_status",
        "scheduler_cache_size",
        "scheduler_inflight_events",
        "scheduler_event_handling_duration_seconds",
        "scheduler_queued_entities",
        "scheduler_queue_incoming_entities_total",
    ] {
        ensure!(
            declared.get(name).is_some_and(|d| !d.label_sets.is_empty()),
            "{name} has no samples"
        );
    }
    ensure!(
        text.contains("leader_election_master_status{name=\"berth\"} 1"),
        "{text}"
    );
    ensure!(text.contains("scheduler_cache_size{type=\"nodes\"} 1"));
    ensure!(text.contains("scheduler_pending_pods{queue=\"incomplete\"} 0"));

    // Issue 33's finding 5: the process collector's families, with
    // upstream's help and plausible values, and the build and version
    // families; the release followed (the stand-in answers as v1.37) is
    // version_info's emulation.
    let value = |name: &str| -> Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("no sample {name}"))
    };
    ensure!(
        text.contains("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"),
        "{text}"
    );
    ensure!(text.contains(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\n"
    ));
    let rss = value("process_resident_memory_bytes")?;
    ensure!(rss > 1e6 && rss < 4e9, "resident memory {rss}");
    ensure!(value("process_virtual_memory_bytes")? >= rss);
    ensure!(value("process_cpu_seconds_total")? > 0.0);
    let fds = value("process_open_fds")?;
    ensure!(fds >= 3.0 && fds <= value("process_max_fds")?, "{fds} open");
    let start = value("process_start_time_seconds")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    ensure!(
        start > now - 600.0 && start <= now + 1.0,
        "started at {start}, now {now}"
    );
    ensure!(
        text.contains(
            "version_info{binary=\"1.37\",component=\"kube\",emulation=\"1.37\",min_compat=\"1.36\"} 1"
        ),
        "{text}"
    );
    ensure!(
        text.contains("# HELP kubernetes_build_info [ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.\n"),
        "{text}"
    );
    berthd.stop().await?;
    Ok(())
}
