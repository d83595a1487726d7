//! The SDK driven as berthd drives it: a real tonic client on loopback opens
//! Session streams and checks every answer.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use berth_extender::proto::{
    self as pb, extender_message::Message as Out, request::Kind, response::Result as Reply,
    scheduler_message::Message as In,
};
use berth_extender::*;
use common::*;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{Notify, oneshot};

// ---------------------------------------------------------------- handlers

/// Filter: rejects nodes whose label `ok` is not "true" (read from the node
/// cache) and panics on a node named "boom". Score: the node's label
/// `score`, per node.
struct Labels;

impl Filter for Labels {
    fn filter(&self, _cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        if node.name() == "boom" {
            panic!("boom on purpose");
        }
        let Some(n) = node.object() else {
            return Status::error(format!("node {} is not in the cache", node.name()));
        };
        let ok = n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("ok"))
            .is_some_and(|v| v == "true");
        if ok {
            Status::success()
        } else {
            Status::unschedulable(format!("node(s) were not ok for {}", pod.name()))
        }
    }
}

impl Score for Labels {
    fn score(&self, _cx: &Context, _pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        let label = node
            .object()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get("score"))
            .cloned()
            .unwrap_or_default();
        Ok(label.parse::<i64>()?)
    }
}

/// Score overriding the batch, with extender normalization.
struct Batch;

#[async_trait]
impl Score for Batch {
    fn score(&self, _: &Context, _: &CyclePod, _: &NodeRef<'_>) -> HandlerResult<i64> {
        Err(HandlerError::msg("the batch is overridden"))
    }

    async fn score_batch(
        &self,
        _cx: &Context,
        _pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<i64>> {
        Ok((0..nodes.len() as i64).map(|i| i * 1000).collect())
    }

    fn normalization(&self) -> ScoreNormalization {
        ScoreNormalization::Extender
    }
}

/// Reserve/Unreserve that records every call. The reserve of a pod labelled
/// `hold=true` waits for its cancellation or `release` (after signalling
/// `started`); a pod
/// labelled `fail=true` is refused; `panic=true` panics.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    unreserves: AtomicUsize,
    started: Mutex<Option<oneshot::Sender<()>>>,
    release: Notify,
}

#[async_trait]
impl Reserve for Recorder {
    async fn reserve(
        &self,
        cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<Status> {
        self.calls.lock().push(format!("reserve {} start", r.id));
        if pod.label("hold") == Some("true") {
            if let Some(s) = self.started.lock().take() {
                let _ = s.send(());
            }
            tokio::select! {
                _ = cx.cancellation().cancelled() => {
                    self.calls.lock().push(format!("reserve {} saw the cancel", r.id));
                }
                _ = self.release.notified() => {}
            }
        }
        if pod.label("panic") == Some("true") {
            panic!("reserve panics on purpose");
        }
        self.calls.lock().push(format!("reserve {} end", r.id));
        if pod.label("fail") == Some("true") {
            return Ok(Status::unschedulable("refused on purpose"));
        }
        Ok(Status::success())
    }

    async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
        self.unreserves.fetch_add(1, Ordering::SeqCst);
        self.calls.lock().push(format!(
            "unreserve {} {:?} {}/{}",
            u.id, u.prior, u.pod.namespace, u.pod.name
        ));
        Ok(())
    }
}

/// Permit: pods labelled `wait=<seconds>` wait and leave their decider
/// behind; `self=allow` decide for themselves before answering Wait;
/// others are allowed.
#[derive(Default)]
struct Waiter {
    deciders: Mutex<Vec<(String, PermitDecider)>>,
}

#[async_trait]
impl Permit for Waiter {
    async fn permit(
        &self,
        cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<PermitOutcome> {
        let d = cx.permit_decider();
        if pod.label("self") == Some("allow") {
            d.allow(&r.id)?;
            return Ok(PermitOutcome::Wait(Duration::from_secs(60)));
        }
        if let Some(secs) = pod.label("wait") {
            self.deciders.lock().push((r.id.clone(), d));
            return Ok(PermitOutcome::Wait(Duration::from_secs(secs.parse()?)));
        }
        Ok(PermitOutcome::Allow)
    }
}

/// PreBind that never answers until dropped: signals `started` when it
/// runs and `dropped` when its future is dropped; records whether the
/// context was cancelled by then.
#[derive(Default)]
struct Stuck {
    started: Mutex<Option<oneshot::Sender<()>>>,
    dropped: Mutex<Option<oneshot::Sender<bool>>>,
    release: Notify,
}

struct OnDrop(
    Option<oneshot::Sender<bool>>,
    tokio_util::sync::CancellationToken,
);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = s.send(self.1.is_cancelled());
        }
    }
}

#[async_trait]
impl PreBind for Stuck {
    async fn pre_bind(&self, cx: &Context, _pod: &CyclePod, node: &str) -> HandlerResult<Status> {
        let _guard = OnDrop(self.dropped.lock().take(), cx.cancellation().clone());
        if let Some(s) = self.started.lock().take() {
            let _ = s.send(());
        }
        if node == "release-me" {
            self.release.notified().await;
            return Ok(Status::success());
        }
        std::future::pending::<()>().await;
        Ok(Status::success())
    }
}

// ------------------------------------------------------------------ tests

#[tokio::test]
async fn hello_declares_exactly_the_registered_points() -> Result<()> {
    let served = Served::start(
        ExtenderBuilder::new("probe")
            .filter(Labels)
            .reserve(Recorder::default())
            .permit(Waiter::default())
            .wants_nodes(true)
            .build(),
    )
    .await?;
    let s = served.session().await?;
    assert_eq!(s.hello.name, "probe");
    assert_eq!(
        s.hello.protocol_version,
        pb::ProtocolVersion::ProtocolVersion2 as i32
    );
    assert_eq!(
        s.hello.points,
        vec![
            pb::ExtensionPoint::Filter as i32,
            pb::ExtensionPoint::Reserve as i32,
            pb::ExtensionPoint::Permit as i32,
        ]
    );
    assert!(s.hello.wants_nodes);
    assert_eq!(
        s.hello.score_normalization,
        pb::ScoreNormalization::None as i32
    );

    let e = ExtenderBuilder::new("scorer").score(Batch).build();
    assert_eq!(e.points(), &[ExtensionPoint::Score]);
    assert_eq!(e.score_normalization(), ScoreNormalization::Extender);
    assert!(!e.hello().wants_nodes);
    Ok(())
}

#[tokio::test]
async fn batched_filter_and_score_use_the_node_cache_and_the_cycle_pod() -> Result<()> {
    let served = Served::start(
        ExtenderBuilder::new("labels")
            .filter(Labels)
            .score(Labels)
            .wants_nodes(true)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.nodes(&[
        node("a", json!({"ok": "true", "score": "10"})),
        node("b", json!({"ok": "false"})),
        node("c", json!({"ok": "true", "score": "30"})),
    ])?;
    s.cycle(1, &pod("web-0", "u1", json!({})))?;
    s.request(
        1,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a", "b", "c"]),
            score: false,
        }),
    )?;
    match s.response(1).await? {
        Reply::Filter(f) => {
            assert_eq!(f.rejected.len(), 1);
            assert_eq!(f.rejected[0].node_id, id("b"));
            assert_eq!(f.rejected[0].code, pb::Code::Unschedulable as i32);
            assert_eq!(f.rejected[0].reasons, vec!["node(s) were not ok for web-0"]);
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(
        2,
        1,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["c", "a"]),
        }),
    )?;
    match s.response(2).await? {
        Reply::Score(sc) => assert_eq!(sc.scores, vec![30, 10]),
        other => bail!("unexpected {other:?}"),
    }

    // A changed node is seen by the next request; a deleted one is gone.
    s.send(node_upsert(&node(
        "b",
        json!({"ok": "true", "score": "5"}),
    ))?)?;
    s.send(In::NodeDelete(pb::NodeDelete {
        name: "c".into(),
        id: id("c"),
    }))?;
    s.request(
        3,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["b", "c"]),
            score: false,
        }),
    )?;
    let e = s.error(3).await?;
    assert_eq!(
        e,
        format!(
            "Filter names node id {}, which is not in this session's node table (no NodeUpsert for it)",
            id("c")
        )
    );
    s.request(
        30,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["b"]),
            score: false,
        }),
    )?;
    assert!(matches!(s.response(30).await?, Reply::Filter(f) if f.rejected.is_empty()));

    // Filter with scores: the nodes the filter passed are scored, in the
    // request's order; a rejected node's score is 0.
    s.request(
        31,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a", "b"]),
            score: true,
        }),
    )?;
    match s.response(31).await? {
        Reply::Filter(f) => {
            assert!(f.rejected.is_empty());
            assert_eq!(f.scores, vec![10, 5]);
        }
        other => bail!("unexpected {other:?}"),
    }
    s.send(node_upsert(&node("b", json!({"ok": "false"})))?)?;
    s.request(
        32,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["b", "a"]),
            score: true,
        }),
    )?;
    match s.response(32).await? {
        Reply::Filter(f) => {
            assert_eq!(f.rejected.len(), 1);
            assert_eq!(f.rejected[0].node_id, id("b"));
            assert_eq!(f.scores, vec![0, 10]);
        }
        other => bail!("unexpected {other:?}"),
    }

    // A score that is not a number is the handler's error.
    s.send(node_upsert(&node("d", json!({"score": "high"})))?)?;
    s.request(
        4,
        1,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["a", "d"]),
        }),
    )?;
    let e = s.error(4).await?;
    assert!(e.contains("invalid digit"), "{e}");

    // A score out of 0..=100 under no normalization is refused by the SDK.
    s.send(node_upsert(&node("e", json!({"score": "150"})))?)?;
    s.request(
        5,
        1,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["e"]),
        }),
    )?;
    let e = s.error(5).await?;
    assert!(e.contains("outside 0..=100"), "{e}");

    // Requests of an ended cycle are refused: its pod is forgotten.
    s.send(In::CycleEnd(pb::CycleEnd { cycle_id: 1 }))?;
    s.request(
        6,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a"]),
            score: false,
        }),
    )?;
    let e = s.error(6).await?;
    assert!(e.contains("cycle 1, which was not started"), "{e}");
    Ok(())
}

#[tokio::test]
async fn batch_overrides_and_extender_normalization() -> Result<()> {
    let served = Served::start(ExtenderBuilder::new("batch").score(Batch).build()).await?;
    let mut s = served.session().await?;
    assert_eq!(
        s.hello.score_normalization,
        pb::ScoreNormalization::Extender as i32
    );
    // Nodes streamed without objects: this extender does not want them.
    s.known(&["x", "y", "z"])?;
    s.cycle(7, &pod("p", "u", json!({})))?;
    s.request(
        1,
        7,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["x", "y", "z"]),
        }),
    )?;
    match s.response(1).await? {
        Reply::Score(sc) => assert_eq!(sc.scores, vec![0, 1000, 2000]),
        other => bail!("unexpected {other:?}"),
    }
    s.request(
        2,
        7,
        Kind::NormalizeScore(pb::NormalizeScoreRequest {
            node_ids: ids(&["x", "y", "z"]),
            scores: vec![0, 1000, 2000],
        }),
    )?;
    match s.response(2).await? {
        Reply::NormalizeScore(n) => assert_eq!(n.scores, vec![0, 50, 100]),
        other => bail!("unexpected {other:?}"),
    }
    // A malformed NormalizeScore (lengths differ) is refused.
    s.request(
        3,
        7,
        Kind::NormalizeScore(pb::NormalizeScoreRequest {
            node_ids: ids(&["x"]),
            scores: vec![1, 2],
        }),
    )?;
    let e = s.error(3).await?;
    assert!(e.contains("1 nodes but 2 scores"), "{e}");
    Ok(())
}

#[tokio::test]
async fn repeated_unreserve_calls_the_handler_once_across_sessions() -> Result<()> {
    let rec = Arc::new(Recorder::default());
    let served = Served::start(ExtenderBuilder::new("rec").reserve(rec.clone()).build()).await?;
    let mut s = served.session().await?;
    s.cycle(1, &pod("p1", "u1", json!({})))?;
    s.request(
        1,
        1,
        Kind::Reserve(pb::ReserveRequest {
            node: "n1".into(),
            reservation_id: "r1".into(),
        }),
    )?;
    match s.response(1).await? {
        Reply::Reserve(r) => assert_eq!(code(&r.status), Some(pb::Code::Success)),
        other => bail!("unexpected {other:?}"),
    }
    let unreserve = |rid: &str| {
        Kind::Unreserve(pb::UnreserveRequest {
            node: "n1".into(),
            reservation_id: rid.into(),
            namespace: "default".into(),
            name: "p1".into(),
            uid: "u1".into(),
        })
    };
    // Twice at once, then once more.
    s.request(2, 1, unreserve("r1"))?;
    s.request(3, 1, unreserve("r1"))?;
    for id in [2, 3] {
        assert!(matches!(s.response(id).await?, Reply::Unreserve(_)));
    }
    s.request(4, 0, unreserve("r1"))?;
    assert!(matches!(s.response(4).await?, Reply::Unreserve(_)));

    // berthd reconnects and re-sends it on the new stream.
    s.close();
    let mut s2 = served.session().await?;
    s2.request(1, 0, unreserve("r1"))?;
    assert!(matches!(s2.response(1).await?, Reply::Unreserve(_)));
    assert_eq!(rec.unreserves.load(Ordering::SeqCst), 1);

    // An Unreserve whose Reserve was never seen calls the handler once.
    s2.request(2, 0, unreserve("lost"))?;
    assert!(matches!(s2.response(2).await?, Reply::Unreserve(_)));
    s2.request(3, 0, unreserve("lost"))?;
    assert!(matches!(s2.response(3).await?, Reply::Unreserve(_)));

    // A refused Reserve is seen as Failed by its Unreserve.
    s2.cycle(2, &pod("p2", "u2", json!({"fail": "true"})))?;
    s2.request(
        4,
        2,
        Kind::Reserve(pb::ReserveRequest {
            node: "n1".into(),
            reservation_id: "r2".into(),
        }),
    )?;
    match s2.response(4).await? {
        Reply::Reserve(r) => {
            assert_eq!(code(&r.status), Some(pb::Code::Unschedulable));
            assert_eq!(
                r.status.map(|s| s.reasons).unwrap_or_default(),
                vec!["refused on purpose"]
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    s2.request(5, 2, unreserve("r2"))?;
    assert!(matches!(s2.response(5).await?, Reply::Unreserve(_)));
    // A Reserve re-sent for an undone reservation is refused.
    s2.request(
        6,
        2,
        Kind::Reserve(pb::ReserveRequest {
            node: "n1".into(),
            reservation_id: "r2".into(),
        }),
    )?;
    let e = s2.error(6).await?;
    assert!(e.contains("already unreserved"), "{e}");

    assert_eq!(rec.unreserves.load(Ordering::SeqCst), 3);
    assert_eq!(
        rec.calls.lock().clone(),
        vec![
            "reserve r1 start",
            "reserve r1 end",
            "unreserve r1 Succeeded default/p1",
            "unreserve lost Unseen default/p1",
            "reserve r2 start",
            "reserve r2 end",
            "unreserve r2 Failed default/p1",
        ]
    );
    Ok(())
}

#[tokio::test]
async fn cancelled_reserve_runs_to_completion_before_its_unreserve() -> Result<()> {
    let rec = Arc::new(Recorder::default());
    let (started, started_rx) = oneshot::channel();
    *rec.started.lock() = Some(started);
    let served = Served::start(ExtenderBuilder::new("rec").reserve(rec.clone()).build()).await?;
    let mut s = served.session().await?;
    s.cycle(1, &pod("held", "u1", json!({"hold": "true"})))?;
    s.request(
        1,
        1,
        Kind::Reserve(pb::ReserveRequest {
            node: "n".into(),
            reservation_id: "r".into(),
        }),
    )?;
    tokio::time::timeout(GUARD, started_rx).await??;
    // berthd gives up on the Reserve and undoes it.
    s.send(In::Cancel(pb::Cancel { id: 1 }))?;
    s.request(
        2,
        1,
        Kind::Unreserve(pb::UnreserveRequest {
            node: "n".into(),
            reservation_id: "r".into(),
            namespace: "default".into(),
            name: "held".into(),
            uid: "u1".into(),
        }),
    )?;
    // The Cancel lets the Reserve finish (it is not dropped); the
    // Unreserve runs after it.
    match s.next().await? {
        Out::Response(r) => {
            assert_eq!(r.id, 2, "the cancelled Reserve must not be answered");
            assert!(matches!(r.result, Some(Reply::Unreserve(_))));
        }
        other => bail!("unexpected {other:?}"),
    }
    assert_eq!(
        rec.calls.lock().clone(),
        vec![
            "reserve r start",
            "reserve r saw the cancel",
            "reserve r end",
            "unreserve r Succeeded default/held"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn permit_wait_then_a_later_decision() -> Result<()> {
    let waiter = Arc::new(Waiter::default());
    let served = Served::start(ExtenderBuilder::new("gang").permit(waiter.clone()).build()).await?;
    let mut s = served.session().await?;
    s.cycle(1, &pod("w1", "u1", json!({"wait": "30"})))?;
    s.request(
        1,
        1,
        Kind::Permit(pb::PermitRequest {
            node: "n".into(),
            reservation_id: "r1".into(),
        }),
    )?;
    match s.response(1).await? {
        Reply::Permit(p) => {
            assert_eq!(code(&p.status), Some(pb::Code::Wait));
            assert_eq!(
                p.wait_timeout,
                Some(prost_duration(Duration::from_secs(30)))
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    let decider = waiter.deciders.lock().first().map(|(_, d)| d.clone());
    let Some(decider) = decider else {
        bail!("the permit handler kept no decider")
    };
    assert!(decider.is_open());
    decider.allow("r1")?;
    let d = s.decision().await?;
    assert_eq!(d.reservation_id, "r1");
    assert!(d.allow);
    // Decided once; a second decision has nothing to decide.
    assert_eq!(
        decider.allow("r1"),
        Err(DecisionError::NotWaiting("r1".into()))
    );

    // A rejection carries its reasons.
    s.cycle(2, &pod("w2", "u2", json!({"wait": "5"})))?;
    s.request(
        2,
        2,
        Kind::Permit(pb::PermitRequest {
            node: "n".into(),
            reservation_id: "r2".into(),
        }),
    )?;
    assert!(matches!(s.response(2).await?, Reply::Permit(_)));
    decider.reject("r2", "group timed out")?;
    let d = s.decision().await?;
    assert_eq!(
        (d.reservation_id.as_str(), d.allow, d.reasons),
        ("r2", false, vec!["group timed out".to_string()])
    );

    // A decision made while the handler runs becomes its answer.
    s.cycle(3, &pod("w3", "u3", json!({"self": "allow"})))?;
    s.request(
        3,
        3,
        Kind::Permit(pb::PermitRequest {
            node: "n".into(),
            reservation_id: "r3".into(),
        }),
    )?;
    match s.response(3).await? {
        Reply::Permit(p) => {
            assert_eq!(code(&p.status), Some(pb::Code::Success));
            assert_eq!(p.wait_timeout, None);
        }
        other => bail!("unexpected {other:?}"),
    }

    // Once the session is gone, deciding fails.
    s.cycle(4, &pod("w4", "u4", json!({"wait": "5"})))?;
    s.request(
        4,
        4,
        Kind::Permit(pb::PermitRequest {
            node: "n".into(),
            reservation_id: "r4".into(),
        }),
    )?;
    assert!(matches!(s.response(4).await?, Reply::Permit(_)));
    s.close();
    // The extender ends its side once berthd's is closed.
    assert!(s.read().await?.is_none());
    assert_eq!(decider.allow("r4"), Err(DecisionError::SessionClosed));
    assert!(!decider.is_open());
    Ok(())
}

#[tokio::test]
async fn cancel_drops_the_handler_and_the_session_goes_on() -> Result<()> {
    let stuck = Arc::new(Stuck::default());
    let (started, started_rx) = oneshot::channel();
    let (dropped, dropped_rx) = oneshot::channel();
    *stuck.started.lock() = Some(started);
    *stuck.dropped.lock() = Some(dropped);
    let served = Served::start(
        ExtenderBuilder::new("stuck")
            .pre_bind(stuck.clone())
            .filter(Labels)
            .wants_nodes(true)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.nodes(&[node("a", json!({"ok": "true"}))])?;
    s.cycle(1, &pod("p", "u", json!({})))?;
    s.request(1, 1, Kind::PreBind(pb::PreBindRequest { node: "n".into() }))?;
    tokio::time::timeout(GUARD, started_rx).await??;
    s.send(In::Cancel(pb::Cancel { id: 1 }))?;
    let cancelled_first = tokio::time::timeout(GUARD, dropped_rx).await??;
    assert!(cancelled_first, "the context is cancelled before the drop");
    s.request(
        2,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a"]),
            score: false,
        }),
    )?;
    match s.next().await? {
        Out::Response(r) => {
            assert_eq!(r.id, 2, "the cancelled request must not be answered");
            assert!(matches!(r.result, Some(Reply::Filter(f)) if f.rejected.is_empty()));
        }
        other => bail!("unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn the_request_timeout_drops_the_handler_with_an_error() -> Result<()> {
    let stuck = Arc::new(Stuck::default());
    let (dropped, dropped_rx) = oneshot::channel();
    *stuck.dropped.lock() = Some(dropped);
    let served = Served::start(
        ExtenderBuilder::new("stuck")
            .pre_bind(stuck.clone())
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.cycle(1, &pod("p", "u", json!({})))?;
    s.request_with_timeout(
        1,
        1,
        Duration::from_millis(50),
        Kind::PreBind(pb::PreBindRequest { node: "n".into() }),
    )?;
    let e = s.error(1).await?;
    assert!(
        e.contains("did not answer within the request's timeout of 50ms"),
        "{e}"
    );
    assert!(tokio::time::timeout(GUARD, dropped_rx).await??);
    Ok(())
}

#[tokio::test]
async fn a_slow_request_does_not_hold_up_the_next_cycle() -> Result<()> {
    let stuck = Arc::new(Stuck::default());
    let (started, started_rx) = oneshot::channel();
    *stuck.started.lock() = Some(started);
    let served = Served::start(
        ExtenderBuilder::new("slow")
            .pre_bind(stuck.clone())
            .filter(Labels)
            .wants_nodes(true)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.nodes(&[node("a", json!({"ok": "true"}))])?;
    s.cycle(1, &pod("slow", "u1", json!({})))?;
    s.request(
        1,
        1,
        Kind::PreBind(pb::PreBindRequest {
            node: "release-me".into(),
        }),
    )?;
    tokio::time::timeout(GUARD, started_rx).await??;
    s.cycle(2, &pod("fast", "u2", json!({})))?;
    s.request(
        2,
        2,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a"]),
            score: false,
        }),
    )?;
    match s.next().await? {
        Out::Response(r) => assert_eq!(r.id, 2, "Filter of cycle 2 first"),
        other => bail!("unexpected {other:?}"),
    }
    stuck.release.notify_one();
    match s.next().await? {
        Out::Response(r) => {
            assert_eq!(r.id, 1);
            assert!(
                matches!(r.result, Some(Reply::PreBind(p)) if code(&p.status) == Some(pb::Code::Success))
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn panics_become_errors_and_the_session_goes_on() -> Result<()> {
    let rec = Arc::new(Recorder::default());
    let served = Served::start(
        ExtenderBuilder::new("panics")
            .filter(Labels)
            .reserve(rec.clone())
            .wants_nodes(true)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.nodes(&[node("a", json!({"ok": "true"})), node("boom", json!({}))])?;
    s.cycle(1, &pod("p", "u", json!({"panic": "true"})))?;
    s.request(
        1,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a", "boom"]),
            score: false,
        }),
    )?;
    let e = s.error(1).await?;
    assert_eq!(e, "the Filter handler panicked: boom on purpose");
    s.request(
        2,
        1,
        Kind::Reserve(pb::ReserveRequest {
            node: "a".into(),
            reservation_id: "r".into(),
        }),
    )?;
    let e = s.error(2).await?;
    assert_eq!(e, "the Reserve handler panicked: reserve panics on purpose");
    s.request(
        3,
        1,
        Kind::Unreserve(pb::UnreserveRequest {
            node: "a".into(),
            reservation_id: "r".into(),
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
        }),
    )?;
    assert!(matches!(s.response(3).await?, Reply::Unreserve(_)));
    assert_eq!(
        rec.calls.lock().last().cloned(),
        Some("unreserve r Failed default/p".to_string())
    );
    s.request(
        4,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["a"]),
            score: false,
        }),
    )?;
    assert!(matches!(s.response(4).await?, Reply::Filter(f) if f.rejected.is_empty()));
    Ok(())
}

/// Filter that rejects a node nobody asked about.
struct Liar;

#[async_trait]
impl Filter for Liar {
    fn filter(&self, _: &Context, _: &CyclePod, _: &NodeRef<'_>) -> Status {
        Status::success()
    }

    async fn filter_batch(
        &self,
        _: &Context,
        _: &CyclePod,
        _: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<NodeStatus>> {
        Ok(vec![NodeStatus::new("ghost", Status::unschedulable("no"))])
    }
}

#[tokio::test]
async fn malformed_and_unknown_messages_are_answered_or_logged() -> Result<()> {
    let served = Served::start(ExtenderBuilder::new("strict").filter(Liar).build()).await?;
    let mut s = served.session().await?;
    // A message of no known kind has no id: logged, not answered.
    s.send_raw(pb::SchedulerMessage { message: None })?;
    // A request of no known kind.
    s.send(In::Request(pb::Request {
        id: 1,
        cycle_id: 1,
        timeout: None,
        kind: None,
    }))?;
    let e = s.error(1).await?;
    assert!(e.contains("no kind"), "{e}");
    // A point that was not declared.
    s.request(2, 1, Kind::Bind(pb::BindRequest { node: "n".into() }))?;
    let e = s.error(2).await?;
    assert!(e.contains("does not serve Bind"), "{e}");
    // A cycle that never started.
    s.request(
        3,
        42,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["n"]),
            score: false,
        }),
    )?;
    let e = s.error(3).await?;
    assert!(e.contains("cycle 42, which was not started"), "{e}");
    // A pod that is not a Pod.
    s.send(In::CycleStart(pb::CycleStart {
        cycle_id: 5,
        pod: b"{not json".to_vec(),
        namespace: "default".into(),
        name: "bad".into(),
        uid: "u".into(),
    }))?;
    s.request(
        4,
        5,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["n"]),
            score: false,
        }),
    )?;
    let e = s.error(4).await?;
    assert!(
        e.contains("the pod of cycle 5 is not a valid v1 Pod"),
        "{e}"
    );
    // An answer that would be malformed is refused by the SDK.
    s.known(&["n"])?;
    s.cycle(6, &pod("p", "u", json!({})))?;
    s.request(
        5,
        6,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["n"]),
            score: false,
        }),
    )?;
    let e = s.error(5).await?;
    assert!(e.contains("\"ghost\", which was not in the request"), "{e}");
    // A node that is not a Node is skipped; the session goes on.
    s.send(In::NodeUpsert(pb::NodeUpsert {
        id: id("n"),
        name: "n".into(),
        node: b"[]".to_vec(),
    }))?;
    s.request(
        6,
        6,
        Kind::NormalizeScore(pb::NormalizeScoreRequest {
            node_ids: vec![],
            scores: vec![],
        }),
    )?;
    let e = s.error(6).await?;
    assert!(e.contains("does not serve NormalizeScore"), "{e}");
    Ok(())
}

#[tokio::test]
async fn the_first_message_must_be_open() -> Result<()> {
    let served = Served::start(ExtenderBuilder::new("x").filter(Labels).build()).await?;
    let mut s = Session::connect(
        served.addr,
        Some(In::NodesSynced(pb::NodesSynced { nodes: 0 })),
    )
    .await?;
    match s.read().await {
        Err(e) => {
            let status = e.downcast_ref::<tonic::Status>().map(|s| s.code());
            assert_eq!(status, Some(tonic::Code::FailedPrecondition), "{e:#}");
        }
        Ok(m) => bail!("expected the stream to fail, got {m:?}"),
    }
    Ok(())
}

/// PreFilter/PreScore/PostFilter/Bind/PostBind answers travel as written.
struct Everything;

#[async_trait]
impl PreFilter for Everything {
    async fn pre_filter(&self, _: &Context, pod: &CyclePod) -> HandlerResult<PreFilterResult> {
        Ok(match pod.label("app") {
            None => PreFilterResult::skip(),
            Some(_) => PreFilterResult::restrict(["n2"]),
        })
    }
}

#[async_trait]
impl PreScore for Everything {
    async fn pre_score(
        &self,
        _: &Context,
        _: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Status> {
        Ok(if nodes.len() > 1 {
            Status::success()
        } else {
            Status::skip()
        })
    }
}

#[async_trait]
impl PostFilter for Everything {
    async fn post_filter(
        &self,
        cx: &Context,
        _: &CyclePod,
        statuses: &[NodeStatus],
    ) -> HandlerResult<PostFilterResult> {
        if cx.dry_run() {
            // A what-if: say what would be done, evict nothing.
            return Ok(PostFilterResult::unschedulable("dry run: would evict"));
        }
        Ok(
            match statuses.iter().find(|s| s.plugin == "NodeResourcesFit") {
                Some(s) => PostFilterResult::nominate(s.node.clone()),
                None => PostFilterResult::unschedulable("nothing to evict"),
            },
        )
    }
}

#[async_trait]
impl Bind for Everything {
    async fn bind(&self, _: &Context, _: &CyclePod, node: &str) -> HandlerResult<Status> {
        Ok(if node == "mine" {
            Status::success()
        } else {
            Status::skip()
        })
    }
}

#[async_trait]
impl PostBind for Everything {
    async fn post_bind(&self, _: &Context, _: &CyclePod, _: &str) -> HandlerResult<()> {
        Ok(())
    }
}

#[tokio::test]
async fn every_other_point_answers_as_written() -> Result<()> {
    let e = Arc::new(Everything);
    let served = Served::start(
        ExtenderBuilder::new("all")
            .pre_filter(e.clone())
            .pre_score(e.clone())
            .post_filter(e.clone())
            .bind(e.clone())
            .post_bind(e)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.known(&["n2", "n9"])?;
    s.cycle(1, &pod("a", "u1", json!({"app": "x"})))?;
    s.cycle(2, &pod("b", "u2", json!({})))?;
    s.request(1, 1, Kind::PreFilter(pb::PreFilterRequest {}))?;
    s.request(2, 2, Kind::PreFilter(pb::PreFilterRequest {}))?;
    match s.response(1).await? {
        Reply::PreFilter(p) => {
            assert_eq!(code(&p.status), Some(pb::Code::Success));
            assert_eq!(p.node_names.map(|n| n.names), Some(names(&["n2"])));
        }
        other => bail!("unexpected {other:?}"),
    }
    match s.response(2).await? {
        Reply::PreFilter(p) => {
            assert_eq!(code(&p.status), Some(pb::Code::Skip));
            assert_eq!(p.node_names, None);
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(
        3,
        1,
        Kind::PreScore(pb::PreScoreRequest {
            node_ids: ids(&["n2"]),
        }),
    )?;
    assert!(
        matches!(s.response(3).await?, Reply::PreScore(p) if code(&p.status) == Some(pb::Code::Skip))
    );
    s.request(
        4,
        1,
        Kind::PostFilter(pb::PostFilterRequest {
            node_statuses: vec![pb::NodeStatus {
                node_id: id("n9"),
                code: pb::Code::Unschedulable as i32,
                reasons: vec!["Insufficient cpu".into()],
                plugin: "NodeResourcesFit".into(),
            }],
            dry_run: false,
        }),
    )?;
    match s.response(4).await? {
        Reply::PostFilter(p) => {
            assert_eq!(code(&p.status), Some(pb::Code::Success));
            assert_eq!(p.nominated_node, "n9");
        }
        other => bail!("unexpected {other:?}"),
    }
    // The handler hears that a request is a dry run's.
    s.request(
        40,
        1,
        Kind::PostFilter(pb::PostFilterRequest {
            node_statuses: vec![],
            dry_run: true,
        }),
    )?;
    match s.response(40).await? {
        Reply::PostFilter(p) => {
            assert_eq!(
                p.status.map(|s| s.reasons),
                Some(vec!["dry run: would evict".to_string()])
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(
        5,
        1,
        Kind::Bind(pb::BindRequest {
            node: "mine".into(),
        }),
    )?;
    s.request(
        6,
        2,
        Kind::Bind(pb::BindRequest {
            node: "other".into(),
        }),
    )?;
    assert!(
        matches!(s.response(5).await?, Reply::Bind(b) if code(&b.status) == Some(pb::Code::Success))
    );
    assert!(
        matches!(s.response(6).await?, Reply::Bind(b) if code(&b.status) == Some(pb::Code::Skip))
    );
    s.request(
        7,
        1,
        Kind::PostBind(pb::PostBindRequest {
            node: "mine".into(),
        }),
    )?;
    assert!(matches!(s.response(7).await?, Reply::PostBind(_)));
    Ok(())
}

#[tokio::test]
async fn health_and_reflection_are_served() -> Result<()> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let served = Served::start(ExtenderBuilder::new("h").filter(Labels).build()).await?;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", served.addr))?
        .connect()
        .await?;
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "berth.extender.v1.Extender"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await?
            .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut refl = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = refl
        .server_reflection_info(tokio_stream::iter([req]))
        .await?
        .into_inner();
    let Some(resp) = stream.message().await? else {
        bail!("no reflection answer")
    };
    let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
        bail!("unexpected reflection answer")
    };
    let services: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        services.contains(&"berth.extender.v1.Extender".to_string()),
        "{services:?}"
    );
    assert!(
        services.contains(&"grpc.health.v1.Health".to_string()),
        "{services:?}"
    );
    Ok(())
}

#[tokio::test]
async fn shutdown_ends_the_sessions_and_serve_returns() -> Result<()> {
    let served = Served::start(ExtenderBuilder::new("bye").filter(Labels).build()).await?;
    let mut s = served.session().await?;
    served.shutdown().await?;
    // The session ended cleanly from the extender's side.
    assert!(s.read().await?.is_none());
    Ok(())
}

/// A GroupPermit handler that refuses only what-ifs, to show it hears them.
struct RefusesWhatIfs;

#[async_trait]
impl GroupPermit for RefusesWhatIfs {
    async fn group_permit(
        &self,
        cx: &Context,
        _: &CycleGroup,
        placement: &[Placement],
    ) -> HandlerResult<Status> {
        Ok(if cx.dry_run() {
            Status::unschedulable(format!("dry run of {} pods", placement.len()))
        } else {
            Status::success()
        })
    }
}

/// Issue 34 item 4: GroupPermitRequest.dry_run reaches the handler as
/// `Context::dry_run`, as PostFilter's and PodGroupPostFilter's do.
#[tokio::test]
async fn group_permit_hears_a_dry_run() -> Result<()> {
    let served = Served::start(
        ExtenderBuilder::new("whatif")
            .group_permit(RefusesWhatIfs)
            .build(),
    )
    .await?;
    let mut s = served.session().await?;
    s.known(&["n1"])?;
    let member = |name: &str| pb::GroupMember {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        pod: serde_json::to_vec(&pod(name, &format!("uid-{name}"), json!({}))).unwrap_or_default(),
        ..Default::default()
    };
    s.send(In::GroupCycleStart(pb::GroupCycleStart {
        cycle_id: 5,
        pod_group: serde_json::to_vec(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default", "uid": "uid-g"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
        }))?,
        namespace: "default".into(),
        name: "g".into(),
        uid: "uid-g".into(),
        pods: vec![member("a")],
        scheduled: Vec::new(),
    }))?;
    let permit = |dry_run: bool| {
        Kind::GroupPermit(pb::GroupPermitRequest {
            placement: vec![pb::Placement {
                uid: "uid-a".into(),
                node: "n1".into(),
                node_id: id("n1"),
            }],
            dry_run,
        })
    };
    s.request(1, 5, permit(false))?;
    s.request(2, 5, permit(true))?;
    match s.response(1).await? {
        Reply::GroupPermit(r) => assert_eq!(code(&r.status), Some(pb::Code::Success)),
        other => bail!("unexpected {other:?}"),
    }
    match s.response(2).await? {
        Reply::GroupPermit(r) => {
            assert_eq!(code(&r.status), Some(pb::Code::Unschedulable));
            assert_eq!(
                r.status.map(|s| s.reasons),
                Some(names(&["dry run of 1 pods"]))
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    Ok(())
}
