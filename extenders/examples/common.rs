//! What every example extender binary shares: `--listen`, `--log-format`,
//! logging to stderr, and the `listening on ADDR` line that tests parse.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use berth_extender::Extender;
use clap::ValueEnum;

/// Log line format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (`fields.message`, `fields.<name>`).
    Json,
}

/// Flags every example takes.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// Address to serve gRPC on (port 0 picks a free port; the address bound
    /// is the first line logged: "listening on ADDR").
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// Log format (stderr). RUST_LOG filters (default: info).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl Common {
    /// Sets up logging to stderr.
    pub fn init_logging(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_target(false);
        match self.log_format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().init(),
        }
    }

    /// Binds, logs `listening on ADDR` (the first log line), and serves
    /// until SIGINT/SIGTERM.
    pub async fn serve(&self, extender: Extender) -> Result<()> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("listening on {}", self.listen))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "listening on {addr}");
        extender.serve_with_incoming(listener).await?;
        tracing::info!("stopped");
        Ok(())
    }
}
