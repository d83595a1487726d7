//! Logs and traces.
//!
//! Logs go to stderr as text or JSON, filtered by `RUST_LOG` (default
//! `info`; kube-runtime's watcher is silenced unless `RUST_LOG` names
//! `kube_runtime`, as berth logs its watches' failures itself); text is coloured only when stderr is a terminal (and
//! `NO_COLOR` is unset), so files and pipes get plain lines. Trace spans use the `berth::trace` target: one INFO span per
//! scheduling attempt (`scheduling_cycle`, with its `binding_cycle`) and
//! DEBUG spans per extension point. They are never logged; with an OTLP
//! endpoint they are exported over gRPC, at the configured level. Without
//! one, no subscriber wants them, so each span site costs one cached
//! callsite check.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use crate::framework::TRACE_TARGET;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// The cause.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// A global subscriber was already set.
    #[error("installing the log subscriber: {0}")]
    Init(#[from] tracing_subscriber::util::TryInitError),
}

/// Where spans go.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// The OTLP gRPC endpoint (e.g. `http://collector:4317`); `None`: no
    /// export.
    pub otlp_endpoint: Option<String>,
    /// `INFO`: scheduling attempts only; `DEBUG`: extension points too.
    pub level: tracing::Level,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// Keeps the exporter alive; [`Telemetry::shutdown`] flushes it.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "flushing trace spans failed");
        }
    }
}

/// Whether log lines may carry ANSI colours: only on a terminal, and not
/// when `NO_COLOR` is set (no-color.org).
fn colour() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber: logs in `format`, and spans exported
/// over OTLP when `trace.otlp_endpoint` is set. Must run inside a tokio
/// runtime when exporting.
pub fn init(format: LogFormat, trace: &TraceConfig) -> Result<Telemetry, TelemetryError> {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .add_directive(
            format!("{TRACE_TARGET}=off")
                .parse()
                .expect("a valid directive"),
        );
    // berth reports its watches' failures itself (one line naming the rule
    // a 403 needs; the outage reporter for an unreachable API server);
    // kube-runtime's own lines would say each of them again, with a debug
    // dump. Asked for by name in RUST_LOG, they are kept.
    let asked = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube_runtime"));
    if !asked {
        filter = filter.add_directive(
            "kube_runtime::watcher=off"
                .parse()
                .expect("a valid directive"),
        );
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour());
    let fmt = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let Some(endpoint) = trace.otlp_endpoint.clone() else {
        tracing_subscriber::registry().with(fmt).try_init()?;
        return Ok(Telemetry { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: endpoint.clone(),
            source,
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(trace.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("berth");
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TRACE_TARGET, trace.level),
        );
    tracing_subscriber::registry()
        .with(fmt)
        .with(spans)
        .try_init()?;
    Ok(Telemetry {
        provider: Some(provider),
    })
}
