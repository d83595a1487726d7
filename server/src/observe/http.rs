//! The HTTP server for `/metrics`, `/healthz`, `/livez` and `/readyz`
//! (plain HTTP/1.1; `GET` and `HEAD`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::health::{Endpoint, HealthChecks};
use crate::scheduler::Scheduler;

/// The Prometheus text format's content type.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds `addr` (port 0 picks one) and returns the bound address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    r
}

/// Answers one request.
pub fn route(
    scheduler: &Scheduler,
    health: &HealthChecks,
    method: &Method,
    path: &str,
    query: &str,
) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n".into(),
        );
    }
    if path == "/metrics" {
        return text(
            StatusCode::OK,
            METRICS_CONTENT_TYPE,
            super::render(scheduler),
        );
    }
    let path = path.trim_end_matches('/');
    let (endpoint, rest) = [Endpoint::Healthz, Endpoint::Livez, Endpoint::Readyz]
        .into_iter()
        .find_map(|e| {
            let rest = path.strip_prefix('/')?.strip_prefix(e.name())?;
            (rest.is_empty() || rest.starts_with('/')).then_some((e, rest))
        })
        .unzip();
    let Some(endpoint) = endpoint else {
        return text(StatusCode::NOT_FOUND, PLAIN, "404 page not found\n".into());
    };
    let check = rest.and_then(|r| r.strip_prefix('/'));
    let a = health.answer(endpoint, check, query);
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    text(status, PLAIN, a.body)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    scheduler: Scheduler,
    health: Arc<HealthChecks>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let scheduler = scheduler.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let r = route(
                    &scheduler,
                    &health,
                    req.method(),
                    req.uri().path(),
                    req.uri().query().unwrap_or(""),
                );
                async move { Ok::<_, Infallible>(r) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
}
