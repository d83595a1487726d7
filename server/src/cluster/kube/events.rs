//! Events through `events.k8s.io/v1`, as upstream's scheduler writes them,
//! rate-limited per pod.
//!
//! `reportingController` is the profile's scheduler name (upstream writes
//! `default-scheduler`, its profile's name; a berth profile named `berth`
//! writes `berth`), `reportingInstance` is `<scheduler name>-<host name>`.
//! Recording never blocks the scheduler: events go through a bounded
//! channel (dropped with a log line when 1000 are waiting, as upstream's
//! broadcaster drops them) to one writer task.
//!
//! Rate limit: a token bucket per regarded pod (its UID), holding
//! [`EVENT_BURST`] tokens and regaining one every [`EVENT_REFILL_EVERY`],
//! the defaults of client-go's event spam filter (burst 25, 1/300 qps).
//! A pod that fails scheduling over and over thus gets its first 25
//! FailedScheduling events at once, then one every five minutes.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::writes::cluster_error;
use crate::framework::PodEvent;

/// Tokens each pod's bucket holds.
pub const EVENT_BURST: u32 = 25;
/// How often a pod's bucket regains a token.
pub const EVENT_REFILL_EVERY: Duration = Duration::from_secs(300);
/// Events waiting to be written before new ones are dropped.
const QUEUE: usize = 1000;
/// Buckets kept before full ones are forgotten.
const MAX_BUCKETS: usize = 4096;

/// Per-object token buckets.
#[derive(Debug)]
pub(super) struct RateLimiter {
    burst: f64,
    refill: Duration,
    buckets: HashMap<String, (f64, Instant)>,
}

impl RateLimiter {
    pub(super) fn new(burst: u32, refill: Duration) -> Self {
        Self {
            burst: f64::from(burst),
            refill,
            buckets: HashMap::new(),
        }
    }

    fn tokens_at(&self, (tokens, at): (f64, Instant), now: Instant) -> f64 {
        let gained = now.saturating_duration_since(at).as_secs_f64() / self.refill.as_secs_f64();
        (tokens + gained).min(self.burst)
    }

    /// Takes a token for `key` at `now`; false when its bucket is empty.
    pub(super) fn allow(&mut self, key: &str, now: Instant) -> bool {
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(key) {
            let burst = self.burst;
            let full: Vec<String> = self
                .buckets
                .iter()
                .filter(|(_, b)| self.tokens_at(**b, now) >= burst)
                .map(|(k, _)| k.clone())
                .collect();
            for k in full {
                self.buckets.remove(&k);
            }
            if self.buckets.len() >= MAX_BUCKETS {
                self.buckets.clear();
            }
        }
        let current = match self.buckets.get(key) {
            Some(b) => self.tokens_at(*b, now),
            None => self.burst,
        };
        if current < 1.0 {
            return false;
        }
        self.buckets.insert(key.to_string(), (current - 1.0, now));
        true
    }
}

/// Now, as `metav1.MicroTime` is written.
pub(super) fn now_micro() -> (Value, i128) {
    let now = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap_or_default();
    let v = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        now,
    ))
    .unwrap_or(Value::Null);
    (v, now.as_nanosecond())
}

fn pod_ref(p: &crate::model::PodInfo) -> Value {
    let mut r = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "name": &*p.name,
        "namespace": &*p.namespace,
        "uid": &*p.uid,
    });
    if let Some(rv) = &p.pod.metadata.resource_version {
        r["resourceVersion"] = json!(rv);
    }
    r
}

/// The `events.k8s.io/v1` Event for `e`, named `<pod>.<unix nanos in hex>`
/// as upstream names them.
pub(super) fn event_body(e: &PodEvent, identity: &str) -> Value {
    let (time, nanos) = now_micro();
    let mut body = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{:x}", e.pod.name, nanos),
            "namespace": &*e.pod.namespace,
        },
        "eventTime": time,
        "reportingController": &*e.controller,
        "reportingInstance": format!("{}-{}", e.controller, identity),
        "action": e.action,
        "reason": e.reason,
        "regarding": pod_ref(&e.pod),
        "note": e.note,
        "type": e.event_type.as_str(),
    });
    if let Some(r) = &e.related {
        body["related"] = pod_ref(r);
    }
    body
}

/// Where events go: a bounded queue to the writer task.
#[derive(Debug)]
pub(super) struct EventSink {
    tx: mpsc::Sender<PodEvent>,
}

impl EventSink {
    pub(super) fn start(client: kube::Client, identity: String) -> Self {
        let (tx, mut rx) = mpsc::channel::<PodEvent>(QUEUE);
        tokio::spawn(async move {
            let mut limiter = RateLimiter::new(EVENT_BURST, EVENT_REFILL_EVERY);
            while let Some(e) = rx.recv().await {
                if !limiter.allow(&e.pod.uid, Instant::now()) {
                    tracing::debug!(pod = %e.pod.key(), reason = e.reason, "event rate-limited; dropped");
                    continue;
                }
                let body = event_body(&e, &identity);
                let path = format!(
                    "/apis/events.k8s.io/v1/namespaces/{}/events",
                    e.pod.namespace
                );
                let req = serde_json::to_vec(&body)
                    .map_err(|e| e.to_string())
                    .and_then(|b| {
                        http::Request::post(path)
                            .header(http::header::CONTENT_TYPE, "application/json")
                            .header(http::header::ACCEPT, "application/json")
                            .body(b)
                            .map_err(|e| e.to_string())
                    });
                let result = match req {
                    Ok(req) => client
                        .request::<Value>(req)
                        .await
                        .map_err(|e| cluster_error(e).to_string()),
                    Err(e) => Err(e),
                };
                if let Err(err) = result {
                    tracing::warn!(pod = %e.pod.key(), reason = e.reason, error = %err, "writing event failed");
                }
            }
        });
        Self { tx }
    }

    pub(super) fn record(&self, e: PodEvent) {
        tracing::debug!(pod = %e.pod.key(), reason = e.reason, note = %e.note, "event");
        if let Err(mpsc::error::TrySendError::Full(e)) = self.tx.try_send(e) {
            tracing::warn!(pod = %e.pod.key(), reason = e.reason, "event queue full; event dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pod_gets_a_burst_then_one_event_per_refill() {
        let mut l = RateLimiter::new(3, Duration::from_secs(300));
        let t0 = Instant::now();
        assert!((0..3).all(|_| l.allow("a", t0)));
        assert!(!l.allow("a", t0), "the burst is spent");
        assert!(l.allow("b", t0), "other pods have their own bucket");
        assert!(!l.allow("a", t0 + Duration::from_secs(299)));
        assert!(l.allow("a", t0 + Duration::from_secs(300)));
        assert!(!l.allow("a", t0 + Duration::from_secs(301)));
    }
}
