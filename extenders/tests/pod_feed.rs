//! The pod feed as the SDK keeps it: an extender built with `wants_pods`
//! says so at Hello and finds the pods berthd streams (PodUpsert,
//! PodDelete) in `Context::pods`, per node, when its handlers run.

mod common;

use anyhow::{Result, bail};
use berth_extender::proto::{
    self as pb, request::Kind, response::Result as Reply, scheduler_message::Message as In,
};
use berth_extender::*;
use common::*;
use serde_json::json;

/// Score: fewer pods on the node (bound or assumed) is better, 10 points a
/// pod; from the session's pod table.
struct Fewest;

impl Score for Fewest {
    fn score(&self, cx: &Context, _pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        Ok(100 - 10 * cx.pods().count_on(node.name()).min(10) as i64)
    }
}

fn pod_upsert(id: u32, name: &str, node: &str, assumed: bool) -> Result<In> {
    Ok(In::PodUpsert(pb::PodUpsert {
        id,
        node_id: common::id(node),
        node: node.into(),
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        assumed,
        pod: serde_json::to_vec(&pod(name, &format!("uid-{name}"), json!({})))?,
    }))
}

async fn scores(s: &mut Session, request: u64) -> Result<Vec<i64>> {
    s.request(
        request,
        1,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["a", "b"]),
        }),
    )?;
    match s.response(request).await? {
        Reply::Score(sc) => Ok(sc.scores),
        other => bail!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn an_extender_that_wants_pods_scores_from_the_pods_berthd_streams() -> Result<()> {
    let ext = ExtenderBuilder::new("fewest")
        .score(Fewest)
        .wants_pods(true)
        .build();
    assert!(ext.wants_pods());
    let served = Served::start(ext).await?;
    let mut s = served.session().await?;
    assert!(s.hello.wants_pods);
    assert!(!s.hello.wants_nodes);
    s.known(&["a", "b"])?;
    // The table as berthd sends it, before NodesSynced.
    s.send(pod_upsert(1, "web-0", "a", false)?)?;
    s.send(pod_upsert(2, "web-1", "a", true)?)?;
    s.send(In::NodesSynced(pb::NodesSynced { nodes: 2 }))?;
    s.cycle(1, &pod("new", "u-new", json!({})))?;
    assert_eq!(scores(&mut s, 1).await?, [80, 100]);

    // Assumed becomes bound: the same pod, counted once.
    s.send(pod_upsert(2, "web-1", "a", false)?)?;
    // A pod moves to b, one leaves a.
    s.send(pod_upsert(3, "web-2", "b", false)?)?;
    s.send(In::PodDelete(pb::PodDelete {
        id: 1,
        node_id: id("a"),
        uid: "uid-web-0".into(),
    }))?;
    assert_eq!(scores(&mut s, 2).await?, [90, 90]);
    served.shutdown().await
}

#[tokio::test]
async fn an_extender_without_wants_pods_says_so_and_keeps_an_empty_table() -> Result<()> {
    let served = Served::start(ExtenderBuilder::new("plain").score(Fewest).build()).await?;
    let mut s = served.session().await?;
    assert!(!s.hello.wants_pods);
    s.known(&["a", "b"])?;
    s.send(In::NodesSynced(pb::NodesSynced { nodes: 2 }))?;
    s.cycle(1, &pod("new", "u-new", json!({})))?;
    assert_eq!(scores(&mut s, 1).await?, [100, 100]);
    served.shutdown().await
}

/// Filter: at most one pod named `busy-*` per node, counted from the pod
/// table (a verdict that depends on the pods).
struct OneBusy;

impl Filter for OneBusy {
    fn filter(&self, cx: &Context, _pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        let busy = cx
            .pods()
            .on_node(node.name())
            .iter()
            .filter(|p| p.name.starts_with("busy-"))
            .count();
        if busy == 0 {
            Status::success()
        } else {
            Status::unschedulable("node(s) were busy")
        }
    }
}

fn candidate(node: &str, pods: &[(u32, &str, bool)]) -> pb::PreemptionCandidate {
    pb::PreemptionCandidate {
        node_id: id(node),
        pods: pods
            .iter()
            .map(|(pid, name, victim)| pb::CandidatePod {
                id: *pid,
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                name: (*name).into(),
                victim: *victim,
                node_id: id(node),
            })
            .collect(),
    }
}

/// Preemption's what-if, answered by the SDK from the same Filter on a pod
/// table without the pods asked about as gone: a node that stays busy with
/// every listed pod gone is rejected; one the victims free passes; one
/// where another pod keeps it busy needs that pod gone (given back in
/// order, as upstream reprieves).
#[tokio::test]
async fn the_sdk_answers_preemptions_what_if_from_the_pod_table() -> Result<()> {
    let ext = ExtenderBuilder::new("one-busy")
        .filter(OneBusy)
        .wants_pods(true)
        .build();
    let served = Served::start(ext).await?;
    let mut s = served.session().await?;
    assert!(s.hello.preemption_filter);
    assert!(!s.hello.filter_ignores_pods);
    s.known(&["a", "b", "c"])?;
    s.send(pod_upsert(1, "busy-a", "a", false)?)?;
    s.send(pod_upsert(6, "idle-a", "a", false)?)?;
    s.send(pod_upsert(2, "busy-b", "b", false)?)?;
    s.send(pod_upsert(3, "idle-b", "b", false)?)?;
    s.send(pod_upsert(4, "busy-c", "c", false)?)?;
    s.send(pod_upsert(5, "idle-c", "c", false)?)?;
    s.send(In::NodesSynced(pb::NodesSynced { nodes: 3 }))?;
    s.cycle(1, &pod("new", "u-new", json!({})))?;
    s.request(
        1,
        1,
        Kind::PreemptionFilter(pb::PreemptionFilterRequest {
            candidates: vec![
                // busy-a may not be evicted (not listed): still busy.
                candidate("a", &[(6, "idle-a", true)]),
                // The victim is the busy one.
                candidate("b", &[(2, "busy-b", true), (3, "idle-b", false)]),
                // The victim is the idle one; busy-c must go instead.
                candidate("c", &[(4, "busy-c", false), (5, "idle-c", true)]),
            ],
            dry_run: true,
        }),
    )?;
    let Reply::PreemptionFilter(r) = s.response(1).await? else {
        bail!("not a PreemptionFilter answer");
    };
    assert_eq!(
        r.rejected
            .iter()
            .map(|x| (x.node_id, x.reasons.clone()))
            .collect::<Vec<_>>(),
        [(id("a"), names(&["node(s) were busy"]))]
    );
    assert_eq!(
        r.needed
            .iter()
            .map(|n| (n.node_id, n.uids.clone(), n.reasons.clone()))
            .collect::<Vec<_>>(),
        [(
            id("c"),
            names(&["uid-busy-c"]),
            names(&["node(s) were busy"])
        )]
    );
    Ok(())
}
