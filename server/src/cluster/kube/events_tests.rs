//! The event recorder's tests: the spam filter's bursts, series as
//! kube-scheduler writes them, retries, refusals and flushes.

use super::*;
use crate::model::PodInfo;
use crate::testing::make_pod;
use tokio::sync::Semaphore;

#[test]
fn each_pod_gets_a_burst_then_one_event_per_refill() {
    let mut l = RateLimiter::new(3, Duration::from_secs(300));
    let t0 = Instant::now();
    let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
    assert!((0..3).all(|_| l.allow(&a, t0)));
    assert!(!l.allow(&a, t0), "the burst is spent");
    assert!(l.allow(&b, t0), "other pods have their own bucket");
    assert!(!l.allow(&a, t0 + Duration::from_secs(299)));
    assert!(l.allow(&a, t0 + Duration::from_secs(300)));
    assert!(!l.allow(&a, t0 + Duration::from_secs(301)));
}

/// Records every write; fails as told.
#[derive(Clone, Default)]
struct Recorder {
    writes: Arc<Mutex<Vec<Write>>>,
    /// Answers to give, in order, before answering Ok.
    answers: Arc<Mutex<VecDeque<Result<(), WriteError>>>>,
    /// Signalled after each write.
    wrote: Arc<tokio::sync::Notify>,
    /// Writes wait for this many permits when set.
    gate: Option<Arc<Semaphore>>,
}

#[async_trait]
impl EventApi for Recorder {
    async fn write(&self, w: &Write) -> Result<(), WriteError> {
        if let Some(g) = &self.gate {
            g.acquire().await.map(|p| p.forget()).ok();
        }
        self.writes.lock().push(w.clone());
        let answer = self.answers.lock().pop_front().unwrap_or(Ok(()));
        self.wrote.notify_waiters();
        answer
    }
}

impl Recorder {
    fn summary(&self) -> Vec<String> {
        self.writes
            .lock()
            .iter()
            .map(|w| match w {
                Write::Create { body, .. } => format!(
                    "POST {} {}@{}{}",
                    body["reason"].as_str().unwrap_or(""),
                    body["regarding"]["name"].as_str().unwrap_or(""),
                    body["regarding"]["resourceVersion"].as_str().unwrap_or(""),
                    body["series"]["count"]
                        .as_u64()
                        .map(|c| format!(" series {c}"))
                        .unwrap_or_default()
                ),
                Write::Patch { body, .. } => {
                    format!("PATCH series {}", body["series"]["count"])
                }
            })
            .collect()
    }

    /// Waits until `n` writes were made. The sink's timers keep the
    /// paused clock moving, so a guard of a (virtual) day fails a test
    /// whose writes never come instead of spinning.
    async fn wait_for(&self, n: usize) {
        let wait = async {
            loop {
                let wrote = self.wrote.notified();
                tokio::pin!(wrote);
                wrote.as_mut().enable();
                if self.writes.lock().len() >= n {
                    return;
                }
                wrote.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(86_400), wait)
            .await
            .is_err()
        {
            panic!("{n} writes expected, got {:?}", self.summary());
        }
    }
}

fn event(name: &str, rv: &str, reason: &'static str) -> PodEvent {
    let mut p = make_pod(name).uid(&format!("uid-{name}")).object();
    p.metadata.resource_version = Some(rv.into());
    let info = Arc::new(PodInfo::new(Arc::new(p)).unwrap());
    PodEvent::new(
        info,
        Arc::from("default-scheduler"),
        EventType::Warning,
        reason,
        "Scheduling",
        "0/5 nodes are available",
    )
}

/// Lets spawned writers run to their next wait.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn repeats_become_a_series_as_upstream_writes_them() {
    let api = Recorder::default();
    let sink = EventSink::start(api.clone(), "host".into());
    // Attempt 1, then the status patch changes the pod's RV.
    sink.record(event("big-0", "271", "FailedScheduling"));
    api.wait_for(1).await;
    // Attempt 2: a new key (new RV), a new event.
    sink.record(event("big-0", "272", "FailedScheduling"));
    api.wait_for(2).await;
    // Attempt 3: isomorphic with attempt 2: a series of 2, patched.
    sink.record(event("big-0", "272", "FailedScheduling"));
    api.wait_for(3).await;
    // Attempts 4..8: counted, not written.
    for _ in 4..=8 {
        sink.record(event("big-0", "272", "FailedScheduling"));
    }
    settle().await;
    assert_eq!(
        api.summary(),
        [
            "POST FailedScheduling big-0@271",
            "POST FailedScheduling big-0@272",
            "PATCH series 2"
        ]
    );
    let third = api.writes.lock()[2].clone();
    let Write::Patch { body, name, .. } = &third else {
        panic!("a patch")
    };
    assert!(name.starts_with("big-0."), "{name}");
    assert_eq!(
        body.as_object().map(|o| o.keys().collect::<Vec<_>>()),
        Some(vec![&"series".to_string()]),
        "the patch carries the series only"
    );
    // Six minutes after the last failure the series is finished: its
    // count (attempts 3..8 of the second event: 7 occurrences in all)
    // is written once, and the events are forgotten.
    tokio::time::sleep(FINISH_EVERY * 2).await;
    api.wait_for(4).await;
    assert_eq!(api.summary()[3], "PATCH series 7");
    settle().await;
    assert_eq!(sink.cached(), 0, "finished and old events are forgotten");
}

#[tokio::test(start_paused = true)]
async fn nothing_is_dropped_when_writes_are_slow() {
    // Writes blocked: everything recorded meanwhile waits, none lost.
    let gate = Arc::new(Semaphore::new(0));
    let api = Recorder {
        gate: Some(gate.clone()),
        ..Recorder::default()
    };
    let sink = EventSink::start(api.clone(), "host".into());
    for i in 0..3000 {
        sink.record(event(&format!("p{i}"), "1", "Scheduled"));
    }
    settle().await;
    assert!(api.writes.lock().is_empty());
    gate.add_permits(3000);
    api.wait_for(3000).await;
    let names: std::collections::HashSet<String> = api
        .writes
        .lock()
        .iter()
        .map(|w| match w {
            Write::Create { body, .. } => body["regarding"]["name"].to_string(),
            Write::Patch { .. } => "patch".into(),
        })
        .collect();
    assert_eq!(names.len(), 3000, "one event per pod, none dropped");
}

#[tokio::test(start_paused = true)]
async fn spam_counts_into_the_pods_latest_series_instead_of_being_dropped() {
    let api = Recorder::default();
    let sink = EventSink::start(api.clone(), "host".into());
    // 30 failures, each after a status patch (a new RV each time).
    for i in 0..30 {
        sink.record(event("p", &i.to_string(), "FailedScheduling"));
    }
    api.wait_for(25).await;
    settle().await;
    let s = api.summary();
    assert_eq!(s.len(), EVENT_BURST as usize, "{s:?}");
    // The 26th turned the 25th event into a series before that event
    // was written: it is created with its series, counted up to the
    // 30th (all were recorded before any write).
    assert_eq!(
        s.last().map(String::as_str),
        Some("POST FailedScheduling p@24 series 6")
    );
    // Once finished, the series is written once more.
    tokio::time::sleep(FINISH_EVERY * 2).await;
    api.wait_for(26).await;
    assert_eq!(
        api.summary().last().map(String::as_str),
        Some("PATCH series 6")
    );
}

#[tokio::test(start_paused = true)]
async fn transport_failures_are_retried_and_a_lost_event_is_created_again() {
    let api = Recorder::default();
    api.answers.lock().extend([
        Err(WriteError::Transport("connection refused".into())),
        Ok(()),
        // The series patch finds the event gone: it is created again,
        // with its series.
        Err(WriteError::NotFound),
    ]);
    let sink = EventSink::start(api.clone(), "host".into());
    sink.record(event("p", "1", "FailedScheduling"));
    api.wait_for(2).await;
    sink.record(event("p", "1", "FailedScheduling"));
    api.wait_for(4).await;
    assert_eq!(
        api.summary(),
        [
            "POST FailedScheduling p@1",
            "POST FailedScheduling p@1",
            "PATCH series 2",
            "POST FailedScheduling p@1 series 2",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn refused_events_are_given_up_not_retried() {
    let api = Recorder::default();
    api.answers.lock().push_back(Err(WriteError::Refused {
        code: 422,
        message: "invalid".into(),
    }));
    let sink = EventSink::start(api.clone(), "host".into());
    sink.record(event("p", "1", "Scheduled"));
    api.wait_for(1).await;
    tokio::time::sleep(RETRY_AFTER * 3).await;
    assert_eq!(api.writes.lock().len(), 1);
}

/// A 403 may be an API server that is starting: retried like a lost
/// answer, and the refusal counted (not named within the grace).
#[tokio::test(start_paused = true)]
async fn a_forbidden_event_is_retried_as_a_restart_may_refuse_it() {
    let api = Recorder::default();
    let forbidden = || {
        Err(WriteError::Refused {
            code: 403,
            message:
                "events.events.k8s.io is forbidden: User \"u\" cannot create resource \"events\""
                    .into(),
        })
    };
    api.answers.lock().extend([forbidden(), forbidden()]);
    let refusals = super::super::refusals::Refusals::new(
        super::super::refusals::GRACE,
        Duration::from_secs(60),
    );
    let sink = EventSink::start_with(api.clone(), "host".into(), refusals.clone());
    sink.record(event("p", "1", "Scheduled"));
    api.wait_for(2).await;
    let key = super::super::refusals::Key::new("create", "events.k8s.io", "events");
    assert!(refusals.is_refused(&key));
    api.wait_for(3).await;
    assert_eq!(api.summary().len(), 3, "written on the third try");
    settle().await;
    assert!(!refusals.is_refused(&key), "the success ends the refusal");
}

/// A flush wakes the writers waiting to retry: the event of a pod bound
/// just before the Lease was lost goes out within the bound, not
/// [`RETRY_AFTER`] later.
#[tokio::test(start_paused = true)]
async fn a_flush_sends_what_waits_to_be_retried_within_its_bound() {
    let api = Recorder::default();
    api.answers.lock().extend([
        Err(WriteError::Transport("connection refused".into())),
        Err(WriteError::Transport("connection refused".into())),
    ]);
    let sink = EventSink::start(api.clone(), "host".into());
    sink.record(event("p", "1", "Scheduled"));
    api.wait_for(1).await;
    let start = Instant::now();
    let left = sink.flush(Duration::from_secs(5)).await;
    assert_eq!(left, 0, "everything written");
    assert_eq!(api.summary(), ["POST Scheduled p@1"; 3]);
    assert!(
        start.elapsed() <= FLUSH_RETRY * 2,
        "retried at once, then after {FLUSH_RETRY:?}: {:?}",
        start.elapsed()
    );
    // With nothing pending a flush returns at once; with the API down
    // for good it gives up at its bound, saying what was left.
    assert_eq!(sink.flush(Duration::from_secs(5)).await, 0);
    api.answers
        .lock()
        .extend((0..100).map(|_| Err(WriteError::Transport("refused".into()))));
    sink.record(event("q", "1", "Scheduled"));
    let start = Instant::now();
    assert_eq!(sink.flush(Duration::from_secs(2)).await, 1);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}
