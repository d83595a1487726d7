//! Concurrency limits of the expensive calls, as a tower layer in front of
//! the gRPC services: each limited method has a number of calls that may
//! run at once, and a call past it is refused at once with
//! RESOURCE_EXHAUSTED (load shedding) rather than queued, so that a burst
//! of clients can neither pile work up inside berthd nor hold its memory.
//! A permit is held until the call's answer has been sent: for a stream
//! (Watch, WatchEvents), until the stream ends.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tower::{Layer, Service};

/// The limited methods and how many calls of each may run at once.
///
/// * Simulate holds a copy of the snapshot and up to 100,000 placements:
///   two at a time.
/// * DryRun is a scheduling cycle without side effects (well under a
///   millisecond on the sample cluster): 64, enough for every client of a
///   busy CI, not enough to queue seconds of work.
/// * List and ListNodeUsage pages are at most 4 MiB each, GetQueue lists
///   every pending pod: 16 each.
/// * Apply parses up to 16 MiB of objects: 8.
/// * Watch and WatchEvents streams each hold a buffer: 256 each.
pub const LIMITS: &[(&str, usize)] = &[
    ("/berth.v1.Scheduler/Simulate", 2),
    ("/berth.v1.Scheduler/DryRun", 64),
    ("/berth.v1.Scheduler/GetQueue", 16),
    ("/berth.v1.Scheduler/ListNodeUsage", 16),
    ("/berth.v1.Scheduler/WatchEvents", 256),
    ("/berth.v1.Cluster/Apply", 8),
    ("/berth.v1.Cluster/List", 16),
    ("/berth.v1.Cluster/Watch", 256),
];

/// The layer: one semaphore per limited method, shared by every
/// connection.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimits {
    limits: Arc<HashMap<String, (usize, Arc<Semaphore>)>>,
}

impl ConcurrencyLimits {
    /// Limits as `limits` says (method path, calls at once).
    pub fn new(limits: &[(&str, usize)]) -> Self {
        Self {
            limits: Arc::new(
                limits
                    .iter()
                    .map(|(m, n)| (m.to_string(), (*n, Arc::new(Semaphore::new(*n)))))
                    .collect(),
            ),
        }
    }
}

impl Default for ConcurrencyLimits {
    fn default() -> Self {
        Self::new(LIMITS)
    }
}

impl<S> Layer<S> for ConcurrencyLimits {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Limited {
            inner,
            limits: self.limits.clone(),
        }
    }
}

/// A service behind [`ConcurrencyLimits`].
#[derive(Debug, Clone)]
pub struct Limited<S> {
    inner: S,
    limits: Arc<HashMap<String, (usize, Arc<Semaphore>)>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<http::Request<B>> for Limited<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let Some((limit, semaphore)) = self.limits.get(req.uri().path()) else {
            return Box::pin(self.inner.call(req));
        };
        let Ok(permit) = semaphore.clone().try_acquire_owned() else {
            let method = req
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string();
            tracing::debug!(method, limit, "call refused: too many running");
            let status = tonic::Status::resource_exhausted(format!(
                "berthd is busy: {limit} {method} calls are already running; retry later"
            ));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        };
        let call = self.inner.call(req);
        Box::pin(async move {
            let response = call.await?;
            Ok(response.map(|body| {
                Body::new(Permitted {
                    body,
                    _permit: permit,
                })
            }))
        })
    }
}

/// A response body holding its call's permit until it is dropped.
struct Permitted {
    body: Body,
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for Permitted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    /// A service whose calls answer when told to.
    #[derive(Clone)]
    struct Gate(Arc<tokio::sync::Notify>);

    impl Service<http::Request<()>> for Gate {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            let open = self.0.clone();
            Box::pin(async move {
                open.notified().await;
                Ok(http::Response::new(Body::empty()))
            })
        }
    }

    fn req(path: &str) -> http::Request<()> {
        http::Request::builder().uri(path).body(()).unwrap()
    }

    fn grpc_status(r: &http::Response<Body>) -> Option<String> {
        r.headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[tokio::test]
    async fn calls_past_the_limit_are_shed_until_a_permit_returns() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let svc = ConcurrencyLimits::new(&[("/x.S/Slow", 1)]).layer(Gate(gate.clone()));
        let first = tokio::spawn(svc.clone().oneshot(req("/x.S/Slow")));
        tokio::task::yield_now().await;
        let shed = svc.clone().oneshot(req("/x.S/Slow")).await.unwrap();
        assert_eq!(
            grpc_status(&shed).as_deref(),
            Some("8"),
            "RESOURCE_EXHAUSTED"
        );
        // Other methods are not limited.
        let other = tokio::spawn(svc.clone().oneshot(req("/x.S/Other")));
        tokio::task::yield_now().await;
        gate.notify_waiters();
        let answered = first.await.unwrap().unwrap();
        other.await.unwrap().unwrap();
        // The permit lives in the body: dropped with it.
        drop(answered);
        let again = tokio::spawn(svc.clone().oneshot(req("/x.S/Slow")));
        tokio::task::yield_now().await;
        gate.notify_waiters();
        let r = again.await.unwrap().unwrap();
        assert_eq!(grpc_status(&r), None, "served once the first call ended");
    }
}
