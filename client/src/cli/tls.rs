//! How to reach berthd over TLS: the flags both clients take, the options
//! they make, and the hint given when a plaintext client meets a TLS
//! berthd.

use std::path::{Path, PathBuf};

use crate::{Client, ClientError, ConnectOptions};
use anyhow::{Context, Result};

use crate::cli::RpcError;

/// TLS flags (global to every command).
#[derive(Debug, Clone, clap::Args)]
pub struct TlsArgs {
    /// PEM CA bundle to verify berthd's certificate with (TLS).
    #[arg(long, env = "BERTH_TLS_CA", global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// PEM client certificate, for berthd's that require one (mTLS).
    #[arg(
        long,
        env = "BERTH_TLS_CERT",
        global = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM key of --tls-cert.
    #[arg(
        long,
        env = "BERTH_TLS_KEY",
        global = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// The name berthd's certificate must carry, if not the address's host.
    #[arg(
        long,
        env = "BERTH_TLS_SERVER_NAME",
        global = true,
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// The connect options the flags ask for (reading the files).
    pub fn options(&self) -> Result<ConnectOptions> {
        let read = |p: &Path, flag: &str| {
            std::fs::read(p).with_context(|| format!("{flag} {}", p.display()))
        };
        let mut options = ConnectOptions::default();
        if let Some(ca) = &self.tls_ca {
            options.ca_cert = Some(read(ca, "--tls-ca")?);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options.client_identity = Some((read(cert, "--tls-cert")?, read(key, "--tls-key")?));
        }
        options.server_name = self.tls_server_name.clone();
        Ok(options)
    }
}

/// Whether TLS options ask for TLS.
pub fn options_want_tls(options: &ConnectOptions) -> bool {
    options.ca_cert.is_some() || options.client_identity.is_some() || options.server_name.is_some()
}

/// Whether the failure may be a plaintext connection that broke before any
/// answer: a TLS server's refusal of a plaintext HTTP/2 client reaches
/// tonic as "transport error", "operation was canceled" or an h2 protocol
/// error, depending on timing.
pub fn broke_in_plaintext(e: &anyhow::Error, server: &str, options: &ConnectOptions) -> bool {
    let plaintext = !server.starts_with("https://") && !options_want_tls(options);
    plaintext
        && e.downcast_ref::<RpcError>().is_some_and(|r| {
            matches!(
                r.code,
                tonic::Code::Unknown
                    | tonic::Code::Unavailable
                    | tonic::Code::Cancelled
                    | tonic::Code::Internal
            )
        })
}

/// Whether `server` completes a TLS handshake, or fails it for its
/// certificate: either way it speaks TLS.
pub async fn speaks_tls(server: &str) -> bool {
    let host_port = server.strip_prefix("http://").unwrap_or(server);
    match Client::connect(&format!("https://{host_port}")).await {
        Ok(_) => true,
        Err(ClientError::Connect { message, .. }) => message.contains("certificate"),
        Err(_) => false,
    }
}

/// The error line for `e`, with the TLS hint when a plaintext client broke
/// against a berthd that serves TLS (`client` names the program).
pub async fn explain(
    e: &anyhow::Error,
    server: &str,
    options: &ConnectOptions,
    client: &str,
) -> String {
    if broke_in_plaintext(e, server, options) && speaks_tls(server).await {
        format!(
            "berthd at {server} serves TLS, and {client} spoke plaintext: give --tls-ca FILE (the CA of its certificate; and --tls-cert, --tls-key if it requires client certificates), or an https:// address ({e:#})"
        )
    } else {
        format!("{e:#}")
    }
}
