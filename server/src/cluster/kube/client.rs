//! The HTTP client berth talks to the API server with, built as client-go
//! builds kube-scheduler's:
//!
//! * one client per purpose, as kube-scheduler has one clientset for the
//!   scheduler's reads and writes, one for events and one for leader
//!   election: each has its own token bucket of `clientConnection.qps`
//!   and `burst` (client-go's defaults for the scheduler: 50 and 100), so
//!   that a backlog of events never delays a binding and neither delays a
//!   Lease renewal;
//! * every request waits for its client's bucket first (a reservation, as
//!   `golang.org/x/time/rate` makes them: first come, first served);
//! * a 429 or 5xx answer carrying `Retry-After` is retried after that many
//!   seconds, through the bucket again, at most [`MAX_RETRIES`] times, as
//!   client-go retries; nothing else is retried here (a binding that
//!   timed out is the scheduler's to handle, not to send twice blindly);
//! * connections are kept alive and reused, with `TCP_NODELAY` (Nagle's
//!   algorithm would hold a small request until the server's delayed ACK);
//! * client-go's metrics, process-wide ([`rest_metrics`]):
//!   `rest_client_requests_total{code,method,host}`,
//!   `rest_client_request_duration_seconds{verb,host}` and
//!   `rest_client_rate_limiter_duration_seconds{verb,host}`.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

use super::KubeError;
use crate::outage::Outage;
use crate::prom::{Exposition, Histogram};

/// How often a request answered 429 or 5xx with `Retry-After` is sent
/// again at most (client-go's default).
pub const MAX_RETRIES: u32 = 10;

/// How a client talks to the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOptions {
    /// Requests per second on average; zero or negative: unlimited.
    pub qps: f32,
    /// Requests allowed at once above the average (at least 1 when
    /// limited).
    pub burst: i32,
    /// What the client is for, appended to the User-Agent as client-go's
    /// `AddUserAgent` does (`scheduler`, `leader-election`), or empty.
    pub purpose: &'static str,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            qps: 50.0,
            burst: 100,
            purpose: "",
        }
    }
}

impl ClientOptions {
    /// The same limits for another purpose.
    pub fn for_purpose(&self, purpose: &'static str) -> Self {
        Self {
            purpose,
            ..self.clone()
        }
    }
}

/// berthd's User-Agent, shaped as client-go's default
/// (`<binary>/<version> (<os>/<arch>) <project>/<commit>`), with the
/// purpose appended.
fn user_agent(purpose: &str) -> String {
    let mut ua = format!(
        "berthd/v{} ({}/{}) berth",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    );
    if !purpose.is_empty() {
        ua.push('/');
        ua.push_str(purpose);
    }
    ua
}

/// A client for `config` with its own token bucket.
pub fn build_client(
    mut config: kube::Config,
    options: &ClientOptions,
) -> Result<kube::Client, KubeError> {
    let err = |e: kube::Error| KubeError::Client(e.to_string());
    if let Ok(ua) = HeaderValue::from_str(&user_agent(options.purpose)) {
        config.headers.push((http::header::USER_AGENT, ua));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(Duration::from_secs(30)));
    http.set_connect_timeout(config.connect_timeout);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(err)?;
    let mut timeouts = hyper_timeout::TimeoutConnector::new(https);
    timeouts.set_read_timeout(config.read_timeout);
    timeouts.set_write_timeout(config.write_timeout);
    let hyper_client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(timeouts);
    let host = config
        .cluster_url
        .authority()
        .map_or_else(String::new, |a| a.to_string());
    let service = ServiceBuilder::new()
        .layer(ApiLayer {
            limiter: TokenBucket::new(options.qps, options.burst).map(Arc::new),
            host: Arc::from(host.as_str()),
        })
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(err)?)
        .layer(config.extra_headers_layer().map_err(err)?)
        .map_err(BoxError::from)
        .service(hyper_client);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// An error as one short line: the API's message for an answer, else the
/// chain of causes without repeats (`error trying to connect: tcp connect
/// error: Connection refused (os error 111)`), never a debug dump.
pub(crate) fn error_text(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return s.message.clone();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text = format!("{text}: {t}");
        }
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------
// The token bucket

/// client-go's token bucket (`flowcontrol.NewTokenBucketRateLimiter`, on
/// `golang.org/x/time/rate`): `burst` tokens, refilled at `qps` per second.
/// Each request reserves one token, in arrival order; when none is left
/// the reservation is for the time the bucket will have refilled it, so
/// waiters are served first come, first served and the rate never exceeds
/// `qps` after the first `burst`.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens at `at` (negative: reserved ahead).
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A bucket, or `None` when `qps` is not positive (no limit, as a
    /// client-go config with a negative QPS).
    pub fn new(qps: f32, burst: i32) -> Option<Self> {
        if qps.is_nan() || qps <= 0.0 {
            return None;
        }
        let burst = f64::from(burst.max(1));
        Some(Self {
            qps: f64::from(qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        })
    }

    /// Reserves one token at `now`: how long to wait before using it.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut s = self.state.lock();
        let (tokens, at) = *s;
        let elapsed = now.saturating_duration_since(at).as_secs_f64();
        let tokens = (tokens + elapsed * self.qps).min(self.burst) - 1.0;
        *s = (tokens, now.max(at));
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }

    /// Gives back a token reserved but not used (its request was dropped
    /// while waiting).
    fn cancel(&self) {
        let mut s = self.state.lock();
        s.0 = (s.0 + 1.0).min(self.burst);
    }

    /// Waits for a token; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve_at(Instant::now());
        if !wait.is_zero() {
            // Dropped before the token was due: give it back.
            struct Pending<'a>(Option<&'a TokenBucket>);
            impl Drop for Pending<'_> {
                fn drop(&mut self) {
                    if let Some(b) = self.0 {
                        b.cancel();
                    }
                }
            }
            let mut pending = Pending(Some(self));
            tokio::time::sleep(wait).await;
            pending.0 = None;
        }
        wait
    }
}

// ---------------------------------------------------------------------------
// Metrics

/// client-go's buckets for request and rate limiter latencies.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The HTTP methods berth uses, in slot order.
const VERBS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn verb_slot(m: &http::Method) -> Option<usize> {
    VERBS.iter().position(|v| *v == m.as_str())
}

/// One host's instruments.
struct HostMetrics {
    latency: [Histogram; VERBS.len()],
    limiter: [Histogram; VERBS.len()],
    /// By (code, method): the code is the HTTP status, or `<error>` when
    /// no answer came.
    requests: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl HostMetrics {
    fn new() -> Self {
        Self {
            latency: std::array::from_fn(|_| Histogram::seconds(&LATENCY_BUCKETS)),
            limiter: std::array::from_fn(|_| Histogram::seconds(&LATENCY_BUCKETS)),
            requests: Mutex::new(BTreeMap::new()),
        }
    }
}

/// The process's REST client metrics, by API server host (client-go keeps
/// them process-wide too).
#[derive(Default)]
pub struct RestMetrics {
    hosts: Mutex<BTreeMap<Arc<str>, Arc<HostMetrics>>>,
}

impl std::fmt::Debug for RestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestMetrics").finish_non_exhaustive()
    }
}

impl RestMetrics {
    fn host(&self, host: &Arc<str>) -> Arc<HostMetrics> {
        self.hosts
            .lock()
            .entry(host.clone())
            .or_insert_with(|| Arc::new(HostMetrics::new()))
            .clone()
    }

    /// Requests answered, by (host, code, method).
    pub fn requests(&self) -> Vec<(String, String, &'static str, u64)> {
        let hosts: Vec<_> = self
            .hosts
            .lock()
            .iter()
            .map(|(h, m)| (h.clone(), m.clone()))
            .collect();
        let mut out = Vec::new();
        for (host, m) in hosts {
            for ((code, method), n) in m.requests.lock().iter() {
                out.push((host.to_string(), code.clone(), *method, *n));
            }
        }
        out
    }

    /// Writes the three families in the exposition format.
    pub fn render(&self, e: &mut Exposition) {
        let hosts: Vec<_> = self
            .hosts
            .lock()
            .iter()
            .map(|(h, m)| (h.clone(), m.clone()))
            .collect();
        if hosts.is_empty() {
            return;
        }
        e.family(
            "rest_client_requests_total",
            "counter",
            "Number of HTTP requests, partitioned by status code, method, and host.",
        );
        for (host, m) in &hosts {
            for ((code, method), n) in m.requests.lock().iter() {
                e.sample(
                    "rest_client_requests_total",
                    &[("code", code), ("host", host), ("method", method)],
                    *n,
                );
            }
        }
        for (name, help, pick) in [
            (
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
                (|m: &HostMetrics, i: usize| &m.latency[i])
                    as fn(&HostMetrics, usize) -> &Histogram,
            ),
            (
                "rest_client_rate_limiter_duration_seconds",
                "Client side rate limiter latency in seconds. Broken down by verb, and host.",
                |m: &HostMetrics, i: usize| &m.limiter[i],
            ),
        ] {
            e.family(name, "histogram", help);
            for (host, m) in &hosts {
                for (i, verb) in VERBS.iter().enumerate() {
                    let h = pick(m, i);
                    if h.count() > 0 {
                        e.histogram(name, &[("host", host), ("verb", verb)], h);
                    }
                }
            }
        }
    }
}

static REST_METRICS: LazyLock<RestMetrics> = LazyLock::new(RestMetrics::default);

static OUTAGES: LazyLock<Mutex<BTreeMap<String, Arc<Outage>>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// The outage reporter of the API server at `host` (one per process and
/// host, shared by the scheduler's, the events' and leader election's
/// clients, as they share the server): every request's outcome feeds it.
pub fn api_outage(host: &str) -> Arc<Outage> {
    OUTAGES
        .lock()
        .entry(host.to_string())
        .or_insert_with(|| {
            let o = Outage::new(format!("the API server {host}"));
            if tokio::runtime::Handle::try_current().is_ok() {
                o.spawn();
            }
            o
        })
        .clone()
}

/// What goes on while the API server is down, as its first line says.
fn meanwhile() -> String {
    "berth keeps its cache and queue; bindings, status writes and events fail and are retried with backoff, and watches resume where they were".into()
}

/// Logs client-go's client-side throttling line for waits over a second,
/// at most once every [`THROTTLE_LOG_EVERY`] (client-go's throttled
/// logger at the default verbosity), saying how many waited meanwhile.
#[derive(Debug, Default)]
struct ThrottleLog {
    /// When the last line was written, and the long waits since.
    state: Mutex<(Option<Instant>, u64)>,
}

/// A request that waited longer than this for its token is logged.
pub const LONG_THROTTLE: Duration = Duration::from_secs(1);
/// Those lines come at most this often.
pub const THROTTLE_LOG_EVERY: Duration = Duration::from_secs(10);

impl ThrottleLog {
    /// Notes a request's wait for its token; the line written, if any.
    fn waited(&self, waited: Duration, method: &str, uri: &http::Uri) -> Option<String> {
        if waited <= LONG_THROTTLE {
            return None;
        }
        let now = Instant::now();
        let mut st = self.state.lock();
        st.1 += 1;
        if st
            .0
            .is_some_and(|t| now.saturating_duration_since(t) < THROTTLE_LOG_EVERY)
        {
            return None;
        }
        let others = st.1 - 1;
        *st = (Some(now), 0);
        drop(st);
        let also = if others > 0 {
            format!(" ({others} more requests waited over 1s since the last such line)")
        } else {
            String::new()
        };
        let line = format!(
            "Waited for {:.3}s due to client-side throttling, not priority and fairness, request: {method}:{uri}{also}",
            waited.as_secs_f64()
        );
        tracing::info!(
            waited_ms = waited.as_millis() as u64,
            method,
            others,
            "{line}"
        );
        Some(line)
    }
}

/// The process's REST client metrics.
pub fn rest_metrics() -> &'static RestMetrics {
    &REST_METRICS
}

// ---------------------------------------------------------------------------
// The layer

/// Rate limit, Retry-After retries, metrics and outage reports around
/// each request.
#[derive(Clone)]
struct ApiLayer {
    limiter: Option<Arc<TokenBucket>>,
    host: Arc<str>,
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            limiter: self.limiter.clone(),
            metrics: rest_metrics().host(&self.host),
            outage: api_outage(&self.host),
            throttle: Arc::new(ThrottleLog::default()),
        }
    }
}

#[derive(Clone)]
struct ApiService<S> {
    inner: S,
    limiter: Option<Arc<TokenBucket>>,
    metrics: Arc<HostMetrics>,
    outage: Arc<Outage>,
    throttle: Arc<ThrottleLog>,
}

/// A transport error as one line: its chain of causes without repeats.
fn box_error_text(e: &BoxError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text = format!("{text}: {t}");
        }
        source = s.source();
    }
    text
}

/// The seconds of a `Retry-After` header, if the answer asks for a retry
/// (429 or a server error, as client-go's `checkWait`).
fn retry_after<B>(res: &Response<B>) -> Option<Duration> {
    let status = res.status();
    if status != http::StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let secs: u64 = res
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

fn copy_request(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut out = Request::new(body);
    *out.method_mut() = req.method().clone();
    *out.uri_mut() = req.uri().clone();
    *out.version_mut() = req.version();
    *out.headers_mut() = req.headers().clone();
    *out.extensions_mut() = req.extensions().clone();
    Some(out)
}

impl<S, B> Service<Request<Body>> for ApiService<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // Each attempt takes a clone of the inner service through
        // `oneshot`, which polls it ready first.
        let svc = self.inner.clone();
        let limiter = self.limiter.clone();
        let metrics = self.metrics.clone();
        let outage = self.outage.clone();
        let throttle = self.throttle.clone();
        Box::pin(async move {
            let slot = verb_slot(req.method());
            let method: &'static str = slot.map_or("other", |i| VERBS[i]);
            let mut req = req;
            let mut attempt = 0;
            loop {
                if let Some(l) = &limiter {
                    let waited = l.acquire().await;
                    if let Some(i) = slot {
                        metrics.limiter[i].observe_duration(waited);
                    }
                    throttle.waited(waited, method, req.uri());
                }
                // Keep a copy in case the answer asks for a retry.
                let again = (attempt < MAX_RETRIES)
                    .then(|| copy_request(&req))
                    .flatten();
                let uri = req.uri().clone();
                let start = Instant::now();
                let result = svc.clone().oneshot(req).await.map_err(Into::into);
                if let Some(i) = slot {
                    metrics.latency[i].observe_duration(start.elapsed());
                }
                let code = match &result {
                    Ok(res) => res.status().as_u16().to_string(),
                    Err(_) => "<error>".to_string(),
                };
                *metrics.requests.lock().entry((code, method)).or_default() += 1;
                // An answer below 500 says the server is up; none, or a
                // 5xx, is an attempt of an outage (each one DEBUG).
                match &result {
                    Ok(res) if !res.status().is_server_error() => outage.succeeded_sent_at(start),
                    Ok(res) => {
                        let status = res.status();
                        tracing::debug!(method, %uri, status = status.as_u16(), "API request answered {status}");
                        outage.failed_sent_at(start, &format!("it answers {status}"), &meanwhile);
                    }
                    Err(e) => {
                        let error = box_error_text(e);
                        tracing::debug!(method, %uri, %error, "API request failed");
                        outage.failed_sent_at(start, &error, &meanwhile);
                    }
                }
                let (Ok(res), Some(next)) = (&result, again) else {
                    return result;
                };
                let Some(delay) = retry_after(res) else {
                    return result;
                };
                tracing::debug!(method, uri = %next.uri(), status = res.status().as_u16(), ?delay, attempt, "the API server asked for a retry after a delay");
                tokio::time::sleep(delay).await;
                attempt += 1;
                req = next;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_the_burst_then_qps_first_come_first_served() {
        let b = TokenBucket::new(10.0, 5).unwrap();
        let t0 = Instant::now();
        // The burst goes at once.
        for _ in 0..5 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        // Then one every 100 ms, each waiter after the one before.
        let waits: Vec<Duration> = (0..3).map(|_| b.reserve_at(t0)).collect();
        assert_eq!(
            waits,
            [100, 200, 300].map(Duration::from_millis).to_vec(),
            "reservations queue up"
        );
        // A second later the bucket has refilled what was reserved ahead
        // and is full again: the burst, never more.
        let t1 = t0 + Duration::from_secs(1);
        let mut free = 0;
        while b.reserve_at(t1).is_zero() {
            free += 1;
        }
        assert_eq!(free, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_thousand_requests_take_as_long_as_qps_and_burst_say() {
        let b = Arc::new(TokenBucket::new(50.0, 100).unwrap());
        let start = Instant::now();
        let tasks: Vec<_> = (0..1000)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move {
                    b.acquire().await;
                    Instant::now()
                })
            })
            .collect();
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap() - start);
        }
        done.sort();
        // 100 at once, then 900 at 50 per second: the last at 18 s.
        assert_eq!(done[99], Duration::ZERO);
        assert!(done[100] > Duration::ZERO);
        let last = done[999].as_secs_f64();
        assert!((17.99..=18.01).contains(&last), "last request at {last}s");
        // Never more than burst + qps × t requests by any time t.
        for (i, at) in done.iter().enumerate() {
            let allowed = 100.0 + 50.0 * at.as_secs_f64();
            assert!((i + 1) as f64 <= allowed + 1e-6, "request {i} at {at:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_waiter_gives_its_token_back() {
        let b = TokenBucket::new(1.0, 1).unwrap();
        assert_eq!(b.acquire().await, Duration::ZERO);
        let waiting = tokio::time::timeout(Duration::from_millis(10), b.acquire()).await;
        assert!(waiting.is_err(), "the second request had to wait");
        // The abandoned reservation is returned: the next one waits one
        // refill from the start, not two.
        let waited = b.acquire().await;
        assert!(waited <= Duration::from_secs(1), "waited {waited:?}");
    }

    /// As client-go's throttled logger: waits over a second, at most one
    /// line every ten seconds, which counts the ones it did not write.
    #[tokio::test(start_paused = true)]
    async fn long_throttling_waits_are_logged_as_client_go_logs_them() {
        let log = ThrottleLog::default();
        let uri: http::Uri = "https://10.0.0.1:6443/api/v1/namespaces/d/pods/p/binding"
            .parse()
            .unwrap();
        let ms = Duration::from_millis;
        assert_eq!(log.waited(ms(900), "POST", &uri), None);
        assert_eq!(
            log.waited(ms(1500), "POST", &uri).as_deref(),
            Some(
                "Waited for 1.500s due to client-side throttling, not priority and fairness, request: POST:https://10.0.0.1:6443/api/v1/namespaces/d/pods/p/binding"
            )
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(log.waited(ms(2000), "POST", &uri), None);
        assert_eq!(log.waited(ms(3000), "POST", &uri), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        let line = log.waited(ms(1200), "POST", &uri).unwrap();
        assert!(
            line.ends_with("(2 more requests waited over 1s since the last such line)"),
            "{line}"
        );
    }

    #[test]
    fn no_bucket_without_a_positive_qps() {
        assert!(TokenBucket::new(-1.0, 10).is_none());
        assert!(TokenBucket::new(0.0, 10).is_none());
        assert!(TokenBucket::new(f32::NAN, 10).is_none());
    }

    #[test]
    fn retry_after_only_on_429_and_server_errors_that_ask() {
        let res = |status: u16, header: Option<&str>| {
            let mut r = Response::builder().status(status);
            if let Some(h) = header {
                r = r.header(http::header::RETRY_AFTER, h);
            }
            r.body(()).unwrap()
        };
        assert_eq!(
            retry_after(&res(429, Some("2"))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&res(503, Some("1"))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(retry_after(&res(504, None)), None, "no header, no retry");
        assert_eq!(retry_after(&res(409, Some("1"))), None);
        assert_eq!(retry_after(&res(429, Some("soon"))), None);
    }

    #[test]
    fn user_agents_name_the_purpose_as_client_go_does() {
        let ua = user_agent("scheduler");
        assert!(ua.starts_with("berthd/v"), "{ua}");
        assert!(ua.ends_with(" berth/scheduler"), "{ua}");
        assert!(user_agent("").ends_with(" berth"));
    }
}
