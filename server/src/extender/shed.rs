//! A concurrency limit that sheds instead of queueing, as a tower layer:
//! a call finding `max` calls already in flight fails at once with
//! [`CallError::Overloaded`] (an extender that slow is better skipped or
//! failed than waited for in a queue); otherwise it goes through and holds
//! its place until its future completes or is dropped.
//!
//! One atomic counter shared by every clone: no semaphore, no allocation,
//! always ready (tower's `LoadShed` over `ConcurrencyLimit` does the same
//! with a semaphore permit per call).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::call_error::CallError;

/// The layer.
#[derive(Debug, Clone)]
pub struct ShedLayer {
    in_flight: Arc<AtomicUsize>,
    max: usize,
}

impl ShedLayer {
    /// At most `max` calls in flight.
    pub fn new(max: usize) -> Self {
        Self {
            in_flight: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = Shed<S>;

    fn layer(&self, inner: S) -> Shed<S> {
        Shed {
            inner,
            in_flight: self.in_flight.clone(),
            max: self.max,
        }
    }
}

/// The service.
#[derive(Debug, Clone)]
pub struct Shed<S> {
    inner: S,
    in_flight: Arc<AtomicUsize>,
    max: usize,
}

/// Gives a call's place back when it completes or is dropped.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, R> Service<R> for Shed<S>
where
    S: Service<R>,
    S::Response: Send + 'static,
    S::Error: From<CallError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Box::pin(std::future::ready(Err(
                CallError::Overloaded(self.max).into()
            )));
        }
        let place = Place(self.in_flight.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            drop(place);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn calls_beyond_the_limit_fail_at_once_and_places_come_back() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rx = Arc::new(parking_lot::Mutex::new(Some(rx)));
        let inner = tower::service_fn(move |hold: bool| {
            let rx = rx.clone();
            let taken = if hold { rx.lock().take() } else { None };
            async move {
                if let Some(rx) = taken {
                    let _ = rx.await;
                }
                Ok::<_, CallError>(())
            }
        });
        let svc = ShedLayer::new(1).layer(inner);
        let mut held = svc.clone();
        let first = held.ready().await.unwrap().call(true);
        tokio::pin!(first);
        assert!(futures::poll!(first.as_mut()).is_pending());
        assert_eq!(
            svc.clone().oneshot(false).await,
            Err(CallError::Overloaded(1))
        );
        tx.send(()).unwrap();
        assert_eq!(first.await, Ok(()));
        assert_eq!(svc.clone().oneshot(false).await, Ok(()));
        // A dropped call gives its place back too.
        let mut s = svc.clone();
        drop(s.ready().await.unwrap().call(false));
        assert_eq!(svc.clone().oneshot(false).await, Ok(()));
    }
}
