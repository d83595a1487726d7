//! TLS for the gRPC port: a server certificate and key (PEM), and
//! optionally a CA whose certificates clients must present (mutual TLS).
//!
//! Every file is read and parsed at startup, so a wrong path or a file that
//! holds no certificate stops berthd with the flag and the file named,
//! instead of failing the first handshake.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The files TLS is configured from, with the flags that named them.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate chain (`--tls-cert`), leaf first.
    pub cert: PathBuf,
    /// The server certificate's private key (`--tls-key`).
    pub key: PathBuf,
    /// CA certificates client certificates must chain to (`--tls-client-ca`);
    /// `None` serves TLS without asking clients for certificates.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be configured. Every variant names the flag and file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file does not hold what the flag needs.
    #[error("{flag} {}: {message}", path.display())]
    Invalid {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The files parse but do not make a working TLS setup (for example a
    /// key that does not belong to the certificate).
    #[error("--tls-cert {} / --tls-key {}: {message}", cert.display(), key.display())]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The TLS library's reason, with its causes.
        message: String,
    },
}

/// A checked TLS configuration for [`super::serve`].
#[derive(Debug, Clone)]
pub struct TlsConfig {
    config: ServerTlsConfig,
    mutual: bool,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a PEM file that must hold at least one certificate.
fn read_certificates(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(flag, path)?;
    let invalid = |message: String| TlsError::Invalid {
        flag,
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            "no certificate found (expected a PEM \"BEGIN CERTIFICATE\" block)".into(),
        ));
    }
    Ok(pem)
}

/// Reads a PEM file that must hold a private key.
fn read_key(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(flag, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Invalid {
        flag,
        path: path.to_path_buf(),
        message: format!(
            "no private key found (expected a PEM PKCS#8, PKCS#1 or SEC1 \"PRIVATE KEY\" block): {e}"
        ),
    })?;
    Ok(pem)
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}

impl TlsConfig {
    /// Reads and checks the files, and builds the TLS acceptor once so that
    /// a certificate and key that do not go together are caught here.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let cert = read_certificates("--tls-cert", &files.cert)?;
        let key = read_key("--tls-key", &files.key)?;
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if let Some(ca) = &files.client_ca {
            let pem = read_certificates("--tls-client-ca", ca)?;
            config = config.client_ca_root(Certificate::from_pem(pem));
        }
        tonic::transport::Server::builder()
            .tls_config(config.clone())
            .map_err(|e| TlsError::Config {
                cert: files.cert.clone(),
                key: files.key.clone(),
                message: chain(&e),
            })?;
        Ok(Self {
            config,
            mutual: files.client_ca.is_some(),
        })
    }

    /// Whether clients must present a certificate signed by the client CA.
    pub fn mutual(&self) -> bool {
        self.mutual
    }

    pub(super) fn server_config(&self) -> ServerTlsConfig {
        self.config.clone()
    }
}
