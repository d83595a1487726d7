//! The elector against an in-process stand-in for the Lease API: a real
//! `kube::Client` sends real HTTP requests with Lease JSON to a tower
//! service that answers as kube-apiserver v1.36 did in the recordings in
//! `testdata/` (201 on create, 409 AlreadyExists, 200 on update with the
//! current resourceVersion, 409 Conflict on a stale one). Time is paused:
//! every instant asserted is exact.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep, sleep_until};

use super::*;

const BASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const ITEM: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/berth";

fn recorded(file: &str) -> Value {
    let text = match file {
        "lease-create.json" => include_str!("testdata/lease-create.json"),
        "lease-create-exists.json" => include_str!("testdata/lease-create-exists.json"),
        "lease-renew.json" => include_str!("testdata/lease-renew.json"),
        "lease-renew-stale.json" => include_str!("testdata/lease-renew-stale.json"),
        other => panic!("no recording {other}"),
    };
    serde_json::from_str(text).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answer as the API server does.
    Serve,
    /// Answer every request with 500.
    Fail,
    /// Never answer.
    Hang,
}

/// One request the stand-in answered.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    method: String,
    path: String,
    body: Option<Value>,
    status: u16,
    answer: Value,
}

struct Store {
    lease: Option<Value>,
    rv: u64,
    mode: Mode,
    /// Answer the next GET with 404 even though the Lease exists (so a
    /// candidate tries to create it).
    hide_next_get: bool,
    seen: Vec<Seen>,
    other_writes: u32,
}

#[derive(Clone)]
struct Fake {
    store: Arc<Mutex<Store>>,
    changed: Arc<Notify>,
    start: Instant,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason,
        "details": {"name": "berth", "group": "coordination.k8s.io", "kind": "leases"},
        "code": code,
    })
}

impl Fake {
    fn new() -> Self {
        Self {
            store: Arc::new(Mutex::new(Store {
                lease: None,
                rv: 0,
                mode: Mode::Serve,
                hide_next_get: false,
                seen: Vec::new(),
                other_writes: 0,
            })),
            changed: Arc::new(Notify::new()),
            start: Instant::now(),
        }
    }

    fn client(&self) -> kube::Client {
        let me = self.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let me = me.clone();
            async move { me.handle(req).await }
        });
        kube::Client::new(svc, "default")
    }

    async fn handle(
        &self,
        req: http::Request<kube::client::Body>,
    ) -> Result<http::Response<Full<Bytes>>, Infallible> {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let body: Option<Value> = serde_json::from_slice(&bytes).ok();
        if self.store.lock().mode == Mode::Hang {
            std::future::pending::<()>().await;
        }
        let method = parts.method.to_string();
        let path = parts.uri.path().to_string();
        let (code, answer) = self.answer(&method, &path, body.as_ref());
        self.store.lock().seen.push(Seen {
            at: Instant::now(),
            method,
            path,
            body,
            status: code,
            answer: answer.clone(),
        });
        self.changed.notify_waiters();
        Ok(http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(answer.to_string())))
            .unwrap())
    }

    fn answer(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut s = self.store.lock();
        if s.mode == Mode::Fail {
            return (
                500,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
            );
        }
        let not_found = || {
            (
                404,
                status(
                    404,
                    "NotFound",
                    "leases.coordination.k8s.io \"berth\" not found",
                ),
            )
        };
        match (method, path) {
            ("GET", ITEM) => {
                if std::mem::take(&mut s.hide_next_get) {
                    return not_found();
                }
                match &s.lease {
                    Some(l) => (200, l.clone()),
                    None => not_found(),
                }
            }
            ("POST", BASE) => {
                if s.lease.is_some() {
                    return (
                        409,
                        recorded("lease-create-exists.json")["response"]["body"].clone(),
                    );
                }
                let mut l = body.cloned().unwrap_or(Value::Null);
                s.rv += 1;
                l["metadata"]["uid"] = json!("387927e4-0346-4781-97e7-3254c0c58c09");
                l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                l["metadata"]["creationTimestamp"] = json!("2026-11-21T22:59:14Z");
                s.lease = Some(l.clone());
                (201, l)
            }
            ("PUT", ITEM) => {
                let Some(current) = s.lease.clone() else {
                    return not_found();
                };
                let mut l = body.cloned().unwrap_or(Value::Null);
                if l["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                    return (
                        409,
                        recorded("lease-renew-stale.json")["response"]["body"].clone(),
                    );
                }
                s.rv += 1;
                l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                s.lease = Some(l.clone());
                (200, l)
            }
            _ => (
                405,
                status(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method",
                ),
            ),
        }
    }

    /// Another candidate holds (or renews) the Lease: `renewTime` is set to
    /// a moment long past, to show that only local observation counts.
    fn other_holds(&self, holder: &str, transitions: i32) {
        let mut s = self.store.lock();
        s.other_writes += 1;
        s.rv += 1;
        let renew = format!("2000-01-01T00:00:{:02}.000000Z", s.other_writes % 60);
        s.lease = Some(json!({
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"name": "berth", "namespace": "kube-system",
                         "uid": "387927e4-0346-4781-97e7-3254c0c58c09",
                         "resourceVersion": s.rv.to_string(),
                         "creationTimestamp": "2026-11-21T22:59:14Z"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "acquireTime": "2000-01-01T00:00:00.000000Z", "renewTime": renew,
                     "leaseTransitions": transitions},
        }));
    }

    /// A write that changes only metadata (a label), as another client
    /// might make: the resourceVersion moves on, the record does not.
    fn touch(&self) {
        let mut s = self.store.lock();
        s.rv += 1;
        let rv = s.rv.to_string();
        if let Some(l) = s.lease.as_mut() {
            l["metadata"]["resourceVersion"] = json!(rv);
            l["metadata"]["labels"] = json!({"touched": "yes"});
        }
    }

    fn set_mode(&self, m: Mode) {
        self.store.lock().mode = m;
    }

    fn lease(&self) -> Value {
        self.store.lock().lease.clone().unwrap_or(Value::Null)
    }

    fn seen(&self) -> Vec<Seen> {
        self.store.lock().seen.clone()
    }

    /// (seconds since start, method, status) of every request.
    fn trace(&self) -> Vec<(u64, String, u16)> {
        self.seen()
            .iter()
            .map(|s| ((s.at - self.start).as_secs(), s.method.clone(), s.status))
            .collect()
    }

    async fn wait_requests(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.store.lock().seen.len() >= n {
                return;
            }
            changed.await;
        }
    }
}

fn cfg(identity: &str) -> ElectionConfig {
    ElectionConfig {
        namespace: "kube-system".into(),
        name: "berth".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        // No jitter, so that every instant is exact.
        jitter: 0.0,
        sync_timeout: DEFAULT_SYNC_TIMEOUT,
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, as kube-apiserver writes a MicroTime.
fn is_micro_time(v: &Value) -> bool {
    let b = v.as_str().unwrap_or("").as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            26 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn s(v: &str) -> String {
    v.to_string()
}

#[tokio::test(start_paused = true)]
async fn acquires_an_absent_lease_by_creating_it_as_recorded() {
    let fake = Fake::new();
    let election = Election::start(fake.client(), cfg("berth-a"));
    let mut leading = election.leading();
    leading.wait_for(|l| *l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::ZERO);
    assert_eq!(fake.trace(), [(0, s("GET"), 404), (0, s("POST"), 201)]);

    // The create request is the recorded one but for the times.
    let seen = fake.seen();
    let sent = seen[1].body.clone().unwrap();
    assert_eq!(seen[1].path, BASE);
    let spec = &sent["spec"];
    assert!(is_micro_time(&spec["acquireTime"]), "{spec}");
    assert_eq!(spec["acquireTime"], spec["renewTime"]);
    let mut expected = recorded("lease-create.json")["request"]["body"].clone();
    expected["spec"]["acquireTime"] = spec["acquireTime"].clone();
    expected["spec"]["renewTime"] = spec["renewTime"].clone();
    assert_eq!(sent, expected);
    drop(election);
}

#[tokio::test(start_paused = true)]
async fn the_leader_renews_every_retry_period_with_the_last_resource_version() {
    let fake = Fake::new();
    let election = Election::start(fake.client(), cfg("berth-a"));
    election.leading().wait_for(|l| *l).await.unwrap();
    fake.wait_requests(5).await;
    assert_eq!(
        fake.trace(),
        [
            (0, s("GET"), 404),
            (0, s("POST"), 201),
            (2, s("PUT"), 200),
            (4, s("PUT"), 200),
            (6, s("PUT"), 200)
        ]
    );
    let seen = fake.seen();
    let created = seen[1].answer.clone();
    let recorded_renew = recorded("lease-renew.json")["request"]["body"].clone();
    for (i, put) in seen[2..].iter().enumerate() {
        let body = put.body.clone().unwrap();
        assert_eq!(put.path, ITEM);
        // Each update carries the resourceVersion of the previous answer.
        assert_eq!(
            body["metadata"]["resourceVersion"],
            json!((i + 1).to_string())
        );
        assert_eq!(body["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(body["spec"]["holderIdentity"], "berth-a");
        assert_eq!(body["spec"]["acquireTime"], created["spec"]["acquireTime"]);
        assert_eq!(body["spec"]["leaseTransitions"], 0);
        assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
        assert!(is_micro_time(&body["spec"]["renewTime"]));
        // Same shape as the recorded renewal.
        let keys = |v: &Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&body), keys(&recorded_renew));
        assert_eq!(keys(&body["spec"]), keys(&recorded_renew["spec"]));
    }
    assert!(*election.leading().borrow());
    assert_eq!(election.release().await, Outcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_lease_of_another_holder_is_waited_out_on_the_local_clock_then_taken_over() {
    let fake = Fake::new();
    fake.other_holds("berth-b", 3);
    let election = Election::start(fake.client(), cfg("berth-a"));
    let leading = election.leading();
    // berth-b renews at t=1, 3, ..., 19 (its renewTime says the year 2000:
    // only the changes seen locally count).
    for k in 0..10u64 {
        sleep_until(fake.start + Duration::from_secs(2 * k + 1)).await;
        fake.other_holds("berth-b", 3);
        assert!(!*leading.borrow());
    }
    // Last change seen at t=20 (the read after t=19): valid until t=35,
    // so the read at t=34 still waits and the one at t=36 takes over.
    leading.clone().wait_for(|l| *l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::from_secs(36));
    let writes: Vec<_> = fake
        .trace()
        .into_iter()
        .filter(|(_, m, _)| m != "GET")
        .collect();
    assert_eq!(writes, [(36, s("PUT"), 200)]);
    let spec = fake.lease()["spec"].clone();
    assert_eq!(spec["holderIdentity"], "berth-a");
    assert_eq!(spec["leaseTransitions"], 4);
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["acquireTime"], spec["renewTime"]);
    assert_ne!(spec["acquireTime"], "2000-01-01T00:00:00.000000Z");
    drop(election);
}

#[tokio::test(start_paused = true)]
async fn a_create_that_loses_the_race_gets_409_and_does_not_lead() {
    let fake = Fake::new();
    fake.other_holds("berth-b", 0);
    fake.store.lock().hide_next_get = true;
    let election = Election::start(fake.client(), cfg("berth-a"));
    fake.wait_requests(3).await;
    assert_eq!(
        fake.trace(),
        [(0, s("GET"), 404), (0, s("POST"), 409), (2, s("GET"), 200)]
    );
    assert_eq!(
        fake.seen()[1].answer,
        recorded("lease-create-exists.json")["response"]["body"]
    );
    sleep(Duration::from_secs(10)).await;
    assert!(!*election.leading().borrow());
    assert_eq!(fake.lease()["spec"]["holderIdentity"], "berth-b");
    // Stopping a candidate that never led writes nothing.
    let n = fake.seen().len();
    assert_eq!(election.release().await, Outcome::Stopped);
    assert_eq!(fake.seen().len(), n);
}

#[tokio::test(start_paused = true)]
async fn a_stale_renewal_gets_409_then_rereads_and_renews_in_the_same_round() {
    let fake = Fake::new();
    let election = Election::start(fake.client(), cfg("berth-a"));
    let leading = election.leading();
    leading.clone().wait_for(|l| *l).await.unwrap();
    fake.touch();
    fake.wait_requests(5).await;
    assert_eq!(
        fake.trace(),
        [
            (0, s("GET"), 404),
            (0, s("POST"), 201),
            (2, s("PUT"), 409),
            (2, s("GET"), 200),
            (2, s("PUT"), 200)
        ]
    );
    let seen = fake.seen();
    assert_eq!(
        seen[2].answer,
        recorded("lease-renew-stale.json")["response"]["body"]
    );
    assert_eq!(
        seen[2].body.as_ref().unwrap()["metadata"]["resourceVersion"],
        "1"
    );
    assert_eq!(
        seen[4].body.as_ref().unwrap()["metadata"]["resourceVersion"],
        "2"
    );
    assert_eq!(
        seen[4].body.as_ref().unwrap()["spec"]["leaseTransitions"],
        0
    );
    assert!(*leading.borrow());
    drop(election);
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_at_the_renew_deadline_when_the_api_fails() {
    let fake = Fake::new();
    let election = Election::start(fake.client(), cfg("berth-a"));
    let leading = election.leading();
    leading.clone().wait_for(|l| *l).await.unwrap();
    fake.set_mode(Mode::Fail);
    // The round starting at t=2 has until t=12; attempts at 2, 4, ..., 10.
    sleep_until(fake.start + Duration::from_millis(11_999)).await;
    assert!(*leading.borrow());
    leading.clone().wait_for(|l| !*l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::from_secs(12));
    election.lost().await;
    let failed: Vec<u64> = fake
        .trace()
        .into_iter()
        .filter(|(_, m, c)| m == "PUT" && *c == 500)
        .map(|(t, _, _)| t)
        .collect();
    assert_eq!(failed, [2, 4, 6, 8, 10]);
    // Nothing more is tried once lost.
    let n = fake.seen().len();
    sleep(Duration::from_secs(60)).await;
    assert_eq!(fake.seen().len(), n);
    assert_eq!(election.release().await, Outcome::Lost);
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_at_the_renew_deadline_when_the_api_hangs() {
    let fake = Fake::new();
    let election = Election::start(fake.client(), cfg("berth-a"));
    let leading = election.leading();
    leading.clone().wait_for(|l| *l).await.unwrap();
    fake.set_mode(Mode::Hang);
    leading.clone().wait_for(|l| !*l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::from_secs(12));
    assert_eq!(election.release().await, Outcome::Lost);
}

#[tokio::test(start_paused = true)]
async fn release_on_shutdown_hands_over_at_once() {
    let fake = Fake::new();
    let a = Election::start(fake.client(), cfg("berth-a"));
    a.leading().wait_for(|l| *l).await.unwrap();
    sleep(Duration::from_secs(5)).await;
    let leading = a.leading();
    assert_eq!(a.release().await, Outcome::Released);
    assert!(!*leading.borrow());
    let released = fake.seen().last().unwrap().body.clone().unwrap();
    assert_eq!(released["metadata"]["resourceVersion"], "3");
    let spec = fake.lease()["spec"].clone();
    assert_eq!(spec["holderIdentity"], "");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], 0);

    // A standby takes the released Lease at its first attempt.
    let t = Instant::now();
    let b = Election::start(fake.client(), cfg("berth-b"));
    b.leading().wait_for(|l| *l).await.unwrap();
    assert_eq!(t.elapsed(), Duration::ZERO);
    let spec = fake.lease()["spec"].clone();
    assert_eq!(spec["holderIdentity"], "berth-b");
    assert_eq!(spec["leaseTransitions"], 1);
    assert_eq!(spec["leaseDurationSeconds"], 15);
    drop(b);
}

/// A leader whose cache cannot sync (its informers refused) gives the
/// Lease up at the first renewal after the sync timeout, as on shutdown;
/// the standby, which can serve, takes it at its next attempt; the one that
/// gave up does not campaign while it cannot serve, and once it can, the
/// standby's valid Lease keeps it waiting.
#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_serve_gives_the_lease_up_to_a_standby_that_can() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fake = Fake::new();
    let synced = Arc::new(AtomicBool::new(false));
    let s = synced.clone();
    let mut c = cfg("berth-a");
    c.sync_timeout = Duration::from_secs(10);
    let a = Election::start_serving(
        fake.client(),
        c,
        Arc::new(move || {
            if s.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("waiting for resourceslices.resource.k8s.io (forbidden)".into())
            }
        }),
    );
    a.leading().wait_for(|l| *l).await.unwrap();
    sleep(Duration::from_secs(1)).await;
    let b = Election::start(fake.client(), cfg("berth-b"));
    // a renews at 2, 4, 6, 8; at 10 it has led 10 s unsynced.
    a.leading().wait_for(|l| !*l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::from_secs(10));
    let spec = fake.lease()["spec"].clone();
    assert_eq!(spec["holderIdentity"], "");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    // b reads at 1, 3, ..., 9 (held) and takes it at 11.
    b.leading().wait_for(|l| *l).await.unwrap();
    assert_eq!(fake.start.elapsed(), Duration::from_secs(11));
    assert_eq!(fake.lease()["spec"]["holderIdentity"], "berth-b");
    // a sends nothing while it cannot serve.
    let before = fake.seen().len();
    sleep(Duration::from_secs(20)).await;
    let a_wrote = fake.seen()[before..]
        .iter()
        .filter(|x| x.method != "GET")
        .filter(|x| {
            x.body
                .as_ref()
                .is_some_and(|b| b["spec"]["holderIdentity"] == "berth-a")
        })
        .count();
    assert_eq!(a_wrote, 0);
    // Synced: a campaigns again, and waits behind b's valid Lease.
    synced.store(true, Ordering::SeqCst);
    sleep(Duration::from_secs(20)).await;
    assert!(!*a.leading().borrow());
    assert!(*b.leading().borrow());
    assert_eq!(fake.lease()["spec"]["holderIdentity"], "berth-b");
    drop(a);
    drop(b);
}

#[tokio::test(start_paused = true)]
async fn a_killed_leader_is_replaced_within_the_lease_duration() {
    let fake = Fake::new();
    let a = Election::start(fake.client(), cfg("berth-a"));
    a.leading().wait_for(|l| *l).await.unwrap();
    // berth-b reads at t=1, 3, 5, ...; berth-a renews at t=2, 4, 6.
    sleep(Duration::from_secs(1)).await;
    let b = Election::start(fake.client(), cfg("berth-b"));
    sleep_until(fake.start + Duration::from_millis(6_500)).await;
    assert!(!*b.leading().borrow());
    // Killed: no release. berth-a's last renewal was at t=6.
    a.task.abort();
    b.leading().wait_for(|l| *l).await.unwrap();
    // b saw the t=6 renewal at its t=7 read: valid until t=22, so the read
    // at t=21 waits and the one at t=23 takes over.
    let taken = fake.start.elapsed();
    assert_eq!(taken, Duration::from_secs(23));
    assert!(taken - Duration::from_secs(6) <= Duration::from_secs(15) + 2 * cfg("").retry_period);
    assert_eq!(fake.lease()["spec"]["leaseTransitions"], 1);
    drop(b);
}

#[test]
fn identities_are_host_underscore_uuid_and_unique() {
    let a = default_identity();
    let b = default_identity();
    assert_ne!(a, b);
    let (host, uuid) = a.rsplit_once('_').unwrap();
    assert!(!host.is_empty());
    assert_eq!(uuid.len(), 36);
    assert_eq!(&uuid[14..15], "4");
    assert_eq!(
        uuid.char_indices()
            .filter(|(_, c)| *c == '-')
            .map(|(i, _)| i)
            .collect::<Vec<_>>(),
        [8, 13, 18, 23]
    );
}
