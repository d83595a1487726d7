//! The HTTP side of an HTTP extender: a pooled hyper client (rustls for
//! https) behind a tower stack (a concurrency limit, then the per-call
//! `httpTimeout`, which covers connecting, sending and reading the whole
//! answer, as Go's `http.Client.Timeout` does). Each call POSTs JSON to
//! `urlPrefix/verb` and wants `200 OK`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use crate::config::ConfigError;
use crate::config::extenders::{DEFAULT_MAX_CONCURRENT_CALLS, HttpExtenderConfig};

/// Why a POST to an extender failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// Connecting, sending or reading failed.
    #[error("Post {url:?}: {error}")]
    Transport {
        /// The URL.
        url: String,
        /// What went wrong.
        error: String,
    },
    /// No complete answer within the timeout.
    #[error("Post {url:?}: no answer within {timeout:?} (httpTimeout)")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// An answer other than 200 OK (upstream's wording).
    #[error("failed {verb} with extender at URL {url}, code {code}")]
    Status {
        /// The verb.
        verb: String,
        /// The URL.
        url: String,
        /// The HTTP status code.
        code: u16,
    },
}

/// One POST: the URL and the JSON body.
struct Post {
    url: String,
    body: Bytes,
}

type HyperClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The innermost service: one POST, the whole answer read.
#[derive(Clone)]
struct RawPost(HyperClient);

impl Service<Post> for RawPost {
    type Response = (u16, Bytes);
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<(u16, Bytes), BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, post: Post) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move {
            let req = http::Request::post(post.url.as_str())
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(post.body))?;
            let resp = client.request(req).await?;
            let code = resp.status().as_u16();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok((code, body))
        })
    }
}

type Stack = tower::limit::ConcurrencyLimit<tower::timeout::Timeout<RawPost>>;

/// POSTs to one extender.
pub struct Transport {
    url_prefix: String,
    timeout: Duration,
    stack: Stack,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("url_prefix", &self.url_prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The full error chain of a hyper error, which hides the cause (such as
/// "Connection refused") behind "client error (Connect)".
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

impl Transport {
    /// The transport for `cfg`; TLS files are read now, so that a missing or
    /// bad one stops startup naming its field.
    pub fn new(cfg: &HttpExtenderConfig) -> Result<Self, ConfigError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.http_timeout));
        let https = cfg.url_prefix.starts_with("https://");
        let tls = tls_config(cfg, https)?;
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let server_name = cfg.tls.as_ref().and_then(|t| t.server_name.clone());
        let builder = match server_name {
            Some(name) => {
                let sn = ServerName::try_from(name.clone()).map_err(|e| {
                    ConfigError::invalid(
                        format!("{}.tlsConfig.serverName", cfg.path),
                        format!("{name:?}"),
                        &e.to_string(),
                    )
                })?;
                builder.with_server_name_resolver(FixedServerNameResolver::new(sn))
            }
            None => builder,
        };
        let connector = builder.enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let stack = ServiceBuilder::new()
            .concurrency_limit(DEFAULT_MAX_CONCURRENT_CALLS)
            .timeout(cfg.http_timeout)
            .service(RawPost(client));
        Ok(Self {
            url_prefix: cfg.url_prefix.trim_end_matches('/').to_string(),
            timeout: cfg.http_timeout,
            stack,
        })
    }

    /// The URL of `verb`.
    pub fn url(&self, verb: &str) -> String {
        format!("{}/{verb}", self.url_prefix)
    }

    /// POSTs `body` to `verb` and returns the body of a 200 answer.
    pub async fn post(&self, verb: &str, body: Vec<u8>) -> Result<Bytes, PostError> {
        // A replay's clock waits for the answer (see crate::sim_clock).
        let _hold = crate::sim_clock::hold();
        let url = self.url(verb);
        let post = Post {
            url: url.clone(),
            body: Bytes::from(body),
        };
        let result = match self.stack.clone().ready().await {
            Ok(svc) => svc.call(post).await,
            Err(e) => Err(e),
        };
        match result {
            Ok((200, body)) => Ok(body),
            Ok((code, _)) => Err(PostError::Status {
                verb: verb.to_string(),
                url,
                code,
            }),
            Err(e) if e.is::<tower::timeout::error::Elapsed>() => Err(PostError::Timeout {
                url,
                timeout: self.timeout,
            }),
            Err(e) => Err(PostError::Transport {
                url,
                error: chain(&*e),
            }),
        }
    }
}

fn read_file(path: &str, file: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(file).map_err(|e| ConfigError::new(path, format!("cannot read {file:?}: {e}")))
}

/// PEM data from `<field>Data` (which wins, as in client-go) or `<field>File`.
fn pem_source(
    data: Option<&Vec<u8>>,
    file: Option<&String>,
    base: &str,
    field: &str,
) -> Result<Option<(Vec<u8>, String)>, ConfigError> {
    if let Some(d) = data {
        return Ok(Some((d.clone(), format!("{base}.{field}Data"))));
    }
    if let Some(f) = file {
        let path = format!("{base}.{field}File");
        return Ok(Some((read_file(&path, f)?, path)));
    }
    Ok(None)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration as upstream's `makeTransport` arranges it: the
/// CA when given; no verification when `insecure`, or when `enableHTTPS` is
/// set without a CA; else the system's roots. A client certificate when
/// given.
fn tls_config(cfg: &HttpExtenderConfig, https: bool) -> Result<ClientConfig, ConfigError> {
    let base = format!("{}.tlsConfig", cfg.path);
    let t = cfg.tls.clone().unwrap_or_default();
    let ca = pem_source(t.ca_data.as_ref(), t.ca_file.as_ref(), &base, "ca")?;
    let cert = pem_source(t.cert_data.as_ref(), t.cert_file.as_ref(), &base, "cert")?;
    let key = pem_source(t.key_data.as_ref(), t.key_file.as_ref(), &base, "key")?;
    let insecure = t.insecure || (cfg.enable_https && ca.is_none());
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(&base, e.to_string()))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &ca {
            Some((pem, path)) => {
                let mut n = 0;
                for c in CertificateDer::pem_slice_iter(pem) {
                    let c = c.map_err(|e| ConfigError::new(path, format!("bad PEM: {e}")))?;
                    roots
                        .add(c)
                        .map_err(|e| ConfigError::new(path, e.to_string()))?;
                    n += 1;
                }
                if n == 0 {
                    return Err(ConfigError::new(path, "holds no PEM certificate"));
                }
            }
            // The system's roots matter only for https URLs.
            None if https => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
            None => {}
        }
        builder.with_root_certificates(roots)
    };
    match (cert, key) {
        (Some((cert, cert_path)), Some((key, key_path))) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<_, _>>()
                .map_err(|e| ConfigError::new(&cert_path, format!("bad PEM: {e}")))?;
            if chain.is_empty() {
                return Err(ConfigError::new(cert_path, "holds no PEM certificate"));
            }
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| ConfigError::new(&key_path, format!("no PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConfigError::new(&base, e.to_string()))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(ConfigError::new(
            base,
            "a client certificate needs both the certificate and its key",
        )),
    }
}

/// Accepts any server certificate (`insecure`), still checking that the
/// handshake is signed by the certificate's key.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
