//! berthd's observability through the real binary: `/metrics` scraped over
//! HTTP agrees with what the scheduler did (its logs and its queue), the
//! health endpoints answer as Kubernetes components do, and scheduling
//! spans reach an OTLP collector.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail, ensure};
use berth_e2e::{Berthd, http_get as get, message};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::mpsc;

/// A parsed exposition: samples by `name{sorted labels}`, and the declared
/// type of each family.
#[derive(Debug, Default)]
struct Scrape {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Result<Self> {
        let mut s = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').context("HELP line")?;
                s.helps.insert(name.into(), help.into());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').context("TYPE line")?;
                ensure!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "type {kind}"
                );
                s.types.insert(name.into(), kind.into());
                continue;
            }
            ensure!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line {line:?}"
            );
            let (series, value) = line.rsplit_once(' ').context("sample line")?;
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().with_context(|| format!("value in {line:?}"))?,
            };
            // Normalise the label order.
            let key = match series.split_once('{') {
                None => series.to_string(),
                Some((name, labels)) => {
                    let labels = labels.strip_suffix('}').context("label close")?;
                    let mut pairs: Vec<&str> = labels.split("\",").collect();
                    for p in &mut pairs {
                        *p = p.trim_end_matches('"');
                    }
                    pairs.sort();
                    let joined: Vec<String> = pairs.iter().map(|p| format!("{p}\"")).collect();
                    format!("{name}{{{}}}", joined.join(","))
                }
            };
            ensure!(
                s.samples.insert(key.clone(), value).is_none(),
                "duplicate series {key}"
            );
        }
        Ok(s)
    }

    /// A sample by name and labels (any order), zero when absent.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        l.sort();
        let key = if l.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", l.join(","))
        };
        self.samples.get(&key).copied().unwrap_or(0.0)
    }

    /// Sum of every sample of `name` whose labels include all of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(k, _)| {
                k.split('{').next() == Some(name)
                    && labels
                        .iter()
                        .all(|(lk, lv)| k.contains(&format!("{lk}=\"{lv}\"")))
            })
            .map(|(_, v)| v)
            .sum()
    }
}

#[tokio::test]
async fn metrics_match_what_the_scheduler_did() -> Result<()> {
    let mut b = Berthd::start(&["--http-listen", "127.0.0.1:0", "--seed", "7"]).await?;
    let http = b.http_addr()?;
    b.wait_idle().await?;
    let scheduled_lines = b.seen.iter().filter(|l| message(l) == "scheduled").count() as f64;
    let unschedulable_lines = b
        .seen
        .iter()
        .filter(|l| message(l).starts_with("unschedulable: "))
        .count() as f64;
    let queue = b.client().await?.get_queue("").await?;
    let (status, text) = get(&http, "/metrics").await?;
    assert_eq!(status, 200);
    let m = Scrape::parse(&text)?;

    // Every family kube-scheduler dashboards use is declared, with its type.
    for (name, kind) in [
        ("scheduler_schedule_attempts_total", "counter"),
        ("scheduler_scheduling_attempt_duration_seconds", "histogram"),
        (
            "scheduler_scheduling_algorithm_duration_seconds",
            "histogram",
        ),
        ("scheduler_pending_pods", "gauge"),
        (
            "scheduler_framework_extension_point_duration_seconds",
            "histogram",
        ),
        ("scheduler_plugin_execution_duration_seconds", "histogram"),
        ("scheduler_preemption_attempts_total", "counter"),
        ("scheduler_preemption_victims", "histogram"),
        ("scheduler_queue_incoming_pods_total", "counter"),
        ("scheduler_pod_scheduling_sli_duration_seconds", "histogram"),
        ("scheduler_pod_scheduling_attempts", "histogram"),
        ("berth_extender_calls_total", "counter"),
        ("berth_extender_pending_unreserves", "gauge"),
    ] {
        assert_eq!(m.types.get(name).map(String::as_str), Some(kind), "{name}");
        assert!(m.helps.contains_key(name), "{name} has no HELP");
    }

    // Attempts: one per "scheduled" and "unschedulable" log line.
    let profile = ("profile", "default-scheduler");
    let scheduled = m.get(
        "scheduler_schedule_attempts_total",
        &[profile, ("result", "scheduled")],
    );
    let unschedulable = m.get(
        "scheduler_schedule_attempts_total",
        &[profile, ("result", "unschedulable")],
    );
    assert!(scheduled > 100.0, "{scheduled}");
    assert_eq!(scheduled, scheduled_lines);
    assert!(unschedulable > 0.0);
    assert_eq!(unschedulable, unschedulable_lines);
    assert_eq!(
        m.get(
            "scheduler_schedule_attempts_total",
            &[profile, ("result", "error")]
        ),
        0.0
    );
    // Failed attempts are those of the pods still pending plus the extra
    // attempts of the pods that were bound.
    let pending_attempts: f64 = queue.iter().map(|p| f64::from(p.attempts)).sum();
    let extra = m.get("scheduler_pod_scheduling_attempts_sum", &[])
        - m.get("scheduler_pod_scheduling_attempts_count", &[]);
    assert_eq!(unschedulable, pending_attempts + extra);
    assert_eq!(
        m.get("scheduler_pod_scheduling_attempts_count", &[]),
        scheduled
    );
    assert_eq!(
        m.sum("scheduler_pod_scheduling_sli_duration_seconds_count", &[]),
        scheduled
    );

    // Histograms: +Inf bucket = count = the counter.
    for result in ["scheduled", "unschedulable"] {
        let l = [profile, ("result", result)];
        let n = m.get("scheduler_schedule_attempts_total", &l);
        assert_eq!(
            m.get("scheduler_scheduling_attempt_duration_seconds_count", &l),
            n
        );
        assert_eq!(
            m.get(
                "scheduler_scheduling_attempt_duration_seconds_bucket",
                &[profile, ("result", result), ("le", "+Inf")]
            ),
            n
        );
        // Upstream's layout: 1ms doubling 15 times.
        assert!(
            m.samples.contains_key(&format!(
                "scheduler_scheduling_attempt_duration_seconds_bucket{{le=\"16.384\",profile=\"default-scheduler\",result=\"{result}\"}}"
            )),
            "le=16.384 bucket"
        );
        assert!(m.get("scheduler_scheduling_attempt_duration_seconds_sum", &l) > 0.0);
    }
    // Every attempt ran PreFilter; every bound pod went through Bind.
    let point = |p: &str, s: &str| {
        m.get(
            "scheduler_framework_extension_point_duration_seconds_count",
            &[("extension_point", p), profile, ("status", s)],
        )
    };
    assert_eq!(
        m.sum(
            "scheduler_framework_extension_point_duration_seconds_count",
            &[("extension_point", "PreFilter")]
        ),
        scheduled + unschedulable
    );
    assert_eq!(point("Bind", "Success"), scheduled);
    assert_eq!(point("Reserve", "Success"), scheduled);
    // Each unschedulable attempt ran PostFilter (preemption) once.
    assert_eq!(
        m.sum(
            "scheduler_framework_extension_point_duration_seconds_count",
            &[("extension_point", "PostFilter")]
        ),
        unschedulable
    );
    assert_eq!(
        m.get("scheduler_preemption_attempts_total", &[]),
        unschedulable
    );
    // Plugin timings are sampled: one cycle in ten.
    // The first PreFilter plugin runs in every cycle, so its count is the
    // largest.
    let sampled = m
        .samples
        .iter()
        .filter(|(k, _)| {
            k.starts_with("scheduler_plugin_execution_duration_seconds_count{")
                && k.contains("extension_point=\"PreFilter\"")
        })
        .fold(BTreeMap::<String, f64>::new(), |mut acc, (k, v)| {
            let plugin = k.split("plugin=\"").nth(1).unwrap_or("").split('"').next();
            *acc.entry(plugin.unwrap_or("").to_string()).or_default() += v;
            acc
        })
        .into_values()
        .fold(0.0, f64::max);
    let attempts = scheduled + unschedulable;
    assert_eq!(sampled, (attempts / 10.0).ceil(), "sampled PreFilter runs");
    // Evaluations are counted in every cycle: the first PreFilter plugin
    // ran once per attempt, and Filter and Score plugins ran per node.
    let evaluations = |point: &str| -> Vec<f64> {
        m.samples
            .iter()
            .filter(|(k, _)| {
                k.starts_with("scheduler_plugin_evaluation_total{")
                    && k.contains(&format!("extension_point=\"{point}\""))
                    && k.contains("profile=\"default-scheduler\"")
            })
            .map(|(_, v)| *v)
            .collect()
    };
    assert_eq!(
        evaluations("PreFilter").into_iter().fold(0.0, f64::max),
        attempts,
        "PreFilter evaluations"
    );
    assert!(evaluations("Filter").into_iter().fold(0.0, f64::max) >= attempts);
    assert!(evaluations("Score").into_iter().fold(0.0, f64::max) >= scheduled);

    // Queue gauges match GetQueue.
    let count = |q: i32| queue.iter().filter(|p| p.queue == q).count() as f64;
    use berth_client::QueueName;
    for (label, q) in [
        ("active", QueueName::Active),
        ("backoff", QueueName::Backoff),
        ("unschedulable", QueueName::Unschedulable),
        ("gated", QueueName::Gated),
    ] {
        assert_eq!(
            m.get("scheduler_pending_pods", &[("queue", label)]),
            count(q as i32),
            "{label}"
        );
    }
    assert!(count(QueueName::Unschedulable as i32) > 0.0);
    // Every pod came in once as PodAdd (gated ones to unschedulable), and
    // each failure sent one back.
    let added = m.get(
        "scheduler_queue_incoming_pods_total",
        &[("event", "PodAdd"), ("queue", "active")],
    ) + m.get(
        "scheduler_queue_incoming_pods_total",
        &[("event", "PodAdd"), ("queue", "unschedulable")],
    );
    assert_eq!(added, scheduled + queue.len() as f64);
    assert_eq!(
        m.sum(
            "scheduler_queue_incoming_pods_total",
            &[("event", "ScheduleAttemptFailure")]
        ),
        unschedulable
    );

    // Health endpoints.
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(get(&http, path).await?, (200, "ok".to_string()), "{path}");
    }
    assert_eq!(
        get(&http, "/readyz?verbose").await?,
        (
            200,
            "[+]ping ok\n[+]log ok\n[+]sched-handler-sync ok\n[+]extenders ok\n[+]shutdown ok\nreadyz check passed\n"
                .to_string()
        )
    );
    assert_eq!(
        get(&http, "/livez?verbose").await?.1,
        "[+]ping ok\n[+]log ok\nlivez check passed\n"
    );
    assert_eq!(
        get(&http, "/readyz/sched-handler-sync").await?,
        (200, "ok".into())
    );
    assert_eq!(get(&http, "/livez/sched-handler-sync").await?.0, 404);
    assert_eq!(get(&http, "/nothing").await?.0, 404);
    b.stop().await?;
    Ok(())
}

/// While scheduling waits at start for a remote extender's handshake,
/// `/readyz` fails its `extenders` check, saying which extender and why
/// (issue 13, item 1).
#[tokio::test]
async fn readyz_says_which_extender_holds_scheduling_back() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("berth-readyz-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: default-scheduler\n  plugins:\n    \
         filter: {enabled: [{name: away}]}\n\
         berthExtenders:\n- name: away\n  endpoint: http://127.0.0.1:1\n  points: [filter]\n  \
         startupTimeout: 1h\n",
    )?;
    let mut b = Berthd::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--empty-cluster",
        "--config",
        cfg.to_str().context("path")?,
    ])
    .await?;
    let http = b.http_addr()?;
    b.wait_for(|l| {
        message(l).starts_with("waiting for extenders before scheduling: away: no Hello yet")
    })
    .await?;
    let (status, body) = get(&http, "/readyz/extenders").await?;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with(
            "internal server error: waiting for extenders before scheduling: away: no Hello yet ("
        ),
        "{body}"
    );
    let (status, body) = get(&http, "/readyz?verbose").await?;
    assert_eq!(status, 500);
    assert!(
        body.contains(
            "[-]extenders failed: waiting for extenders before scheduling: away: no Hello yet ("
        ),
        "{body}"
    );
    b.stop().await?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// An OTLP trace collector that hands every exported span to a channel.
struct Collector(mpsc::UnboundedSender<Span>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    let _ = self.0.send(s);
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(v) => Some(v.clone()),
            AnyValue::IntValue(v) => Some(v.to_string()),
            _ => None,
        }
    })
}

#[tokio::test]
async fn scheduling_spans_reach_an_otlp_collector() -> Result<()> {
    let (endpoint, mut rx, server) = collector().await?;
    let mut b = Berthd::start(&["--otlp-endpoint", &endpoint, "--seed", "7"]).await?;
    b.wait_idle().await?;
    let bound: Vec<String> = b
        .seen
        .iter()
        .filter(|l| message(l) == "scheduled")
        .filter_map(|l| l["fields"]["pod"].as_str().map(str::to_string))
        .collect();
    let failed = b
        .seen
        .iter()
        .filter(|l| message(l).starts_with("unschedulable: "))
        .count();
    // Stopping flushes the exporter's buffer.
    let status = b.stop().await?;
    ensure!(status.success(), "berthd exited with {status}");
    let mut spans: Vec<Span> = Vec::new();
    while let Ok(s) = rx.try_recv() {
        spans.push(s);
    }
    server.abort();

    let cycles: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "scheduling_cycle")
        .collect();
    assert_eq!(cycles.len(), bound.len() + failed, "one span per attempt");
    let by_pod: BTreeMap<String, &Span> = cycles
        .iter()
        .filter(|s| attr(s, "result").as_deref() == Some("scheduled"))
        .filter_map(|s| Some((attr(s, "pod")?, *s)))
        .collect();
    assert_eq!(by_pod.len(), bound.len());
    let Some(first) = bound.first() else {
        bail!("nothing was bound");
    };
    let span = by_pod.get(first).context("the first bound pod's span")?;
    let (ns, name) = first.split_once('/').context("namespace/name")?;
    assert_eq!(attr(span, "k8s.pod.name").as_deref(), Some(name));
    assert_eq!(attr(span, "k8s.namespace.name").as_deref(), Some(ns));
    assert_eq!(attr(span, "profile").as_deref(), Some("default-scheduler"));
    assert!(attr(span, "node").is_some());
    // Its binding cycle is its child, in the same trace.
    let binding = spans
        .iter()
        .find(|s| s.name == "binding_cycle" && s.parent_span_id == span.span_id)
        .context("binding_cycle child")?;
    assert_eq!(binding.trace_id, span.trace_id);
    assert_eq!(attr(binding, "result").as_deref(), Some("scheduled"));
    assert_eq!(attr(binding, "node"), attr(span, "node"));
    assert!(binding.start_time_unix_nano >= span.start_time_unix_nano);
    // Extension point spans are DEBUG: not exported at the default level.
    assert!(!spans.iter().any(|s| s.name == "extension_point"));
    let unschedulable = cycles
        .iter()
        .filter(|s| attr(s, "result").as_deref() == Some("unschedulable"))
        .count();
    assert_eq!(unschedulable, failed);
    Ok(())
}

/// Starts an in-test OTLP collector; returns its endpoint and the spans.
async fn collector() -> Result<(
    String,
    mpsc::UnboundedReceiver<Span>,
    tokio::task::JoinHandle<()>,
)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    Ok((format!("http://{addr}"), rx, server))
}

#[tokio::test]
async fn preemption_counts_victims_and_debug_spans_cover_extension_points() -> Result<()> {
    let (endpoint, mut rx, server) = collector().await?;
    let cluster = berth_e2e::workspace_root().join("tests/scenarios/preemption.yaml");
    let cluster = cluster.to_str().context("path")?;
    let mut b = Berthd::start(&[
        "--cluster",
        cluster,
        "--http-listen",
        "127.0.0.1:0",
        "--otlp-endpoint",
        &endpoint,
        "--trace-level",
        "debug",
    ])
    .await?;
    let http = b.http_addr()?;
    b.wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/urgent")
        .await?;
    b.wait_idle().await?;
    let m = Scrape::parse(&get(&http, "/metrics").await?.1)?;
    // urgent evicted low-1 and low-2 in one preemption.
    assert_eq!(m.get("scheduler_preemption_victims_count", &[]), 1.0);
    assert_eq!(m.get("scheduler_preemption_victims_sum", &[]), 2.0);
    assert_eq!(
        m.get("scheduler_preemption_victims_bucket", &[("le", "1")]),
        0.0
    );
    assert_eq!(
        m.get("scheduler_preemption_victims_bucket", &[("le", "2")]),
        1.0
    );
    // Preemption ran for each unschedulable attempt (urgent's first, and
    // polite's, which is not eligible).
    let unschedulable = m.get(
        "scheduler_schedule_attempts_total",
        &[
            ("profile", "default-scheduler"),
            ("result", "unschedulable"),
        ],
    );
    assert!(unschedulable >= 2.0, "{unschedulable}");
    assert_eq!(
        m.get("scheduler_preemption_attempts_total", &[]),
        unschedulable
    );
    // urgent was bound at its second attempt.
    assert_eq!(
        m.get("scheduler_pod_scheduling_attempts_bucket", &[("le", "1")]),
        0.0
    );
    assert_eq!(
        m.get("scheduler_pod_scheduling_attempts_bucket", &[("le", "2")]),
        1.0
    );
    assert_eq!(
        m.get(
            "scheduler_pod_scheduling_sli_duration_seconds_count",
            &[("attempts", "2")]
        ),
        1.0
    );
    let status = b.stop().await?;
    ensure!(status.success(), "berthd exited with {status}");
    let mut spans = Vec::new();
    while let Ok(s) = rx.try_recv() {
        spans.push(s);
    }
    server.abort();

    let urgent: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.name == "scheduling_cycle" && attr(s, "k8s.pod.name").as_deref() == Some("urgent")
        })
        .collect();
    assert_eq!(urgent.len(), 2, "two attempts");
    let point_under = |parent: &Span, point: &str| {
        spans.iter().any(|s| {
            s.name == "extension_point"
                && s.parent_span_id == parent.span_id
                && attr(s, "extension_point").as_deref() == Some(point)
        })
    };
    let first = urgent
        .iter()
        .find(|s| attr(s, "result").as_deref() == Some("unschedulable"))
        .context("urgent's failed attempt")?;
    assert!(point_under(first, "PreFilter"));
    assert!(point_under(first, "PostFilter"));
    let second = urgent
        .iter()
        .find(|s| attr(s, "result").as_deref() == Some("scheduled"))
        .context("urgent's bound attempt")?;
    assert!(point_under(second, "Reserve"));
    assert!(point_under(second, "Permit"));
    assert!(!point_under(second, "PostFilter"));
    let binding = spans
        .iter()
        .find(|s| s.name == "binding_cycle" && s.parent_span_id == second.span_id)
        .context("binding_cycle")?;
    assert!(point_under(binding, "Bind"));
    assert!(point_under(binding, "PreBind"));
    Ok(())
}
