//! The example extenders as processes: each is started with `--listen
//! 127.0.0.1:0`, found through its first stderr line, and driven through a
//! Session like berthd would drive it. Waits are on answers and log lines.

mod common;

use std::process::Stdio;

use anyhow::{Context as _, Result, anyhow, bail};
use berth_extender::proto::{
    self as pb, request::Kind, response::Result as Reply, scheduler_message::Message as In,
};
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// A running example extender.
struct Proc {
    child: Child,
    logs: Lines<BufReader<ChildStderr>>,
    addr: std::net::SocketAddr,
}

impl Proc {
    /// Starts `exe` with JSON logs and `args`; reads the address from the
    /// first line.
    async fn start(exe: &str, args: &[&str]) -> Result<Self> {
        let mut child = Command::new(exe)
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {exe}"))?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut logs = BufReader::new(stderr).lines();
        let first = tokio::time::timeout(GUARD, logs.next_line())
            .await
            .map_err(|_| anyhow!("{exe} logged nothing within {GUARD:?}"))??
            .context("no first line")?;
        let line: Value = serde_json::from_str(&first)?;
        let msg = line["fields"]["message"].as_str().unwrap_or_default();
        let addr = msg
            .strip_prefix("listening on ")
            .with_context(|| format!("the first line is not 'listening on': {first}"))?
            .parse()?;
        assert_eq!(
            line["fields"]["addr"].as_str(),
            Some(addr_str(&addr).as_str())
        );
        Ok(Self { child, logs, addr })
    }

    /// Reads log lines until one's message starts with `prefix`.
    async fn wait_log(&mut self, prefix: &str) -> Result<Value> {
        let read = async {
            loop {
                let Some(line) = self.logs.next_line().await? else {
                    bail!("the extender exited before logging {prefix:?}");
                };
                let v: Value = serde_json::from_str(&line)?;
                if v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(prefix))
                {
                    return Ok(v);
                }
            }
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("no log line {prefix:?} within {GUARD:?}"))?
    }

    /// SIGTERM, then a clean exit.
    async fn stop(mut self) -> Result<()> {
        if let Some(pid) = self.child.id() {
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
        }
        let status = tokio::time::timeout(GUARD, self.child.wait()).await??;
        assert!(status.success(), "exit status {status}");
        Ok(())
    }
}

fn addr_str(a: &std::net::SocketAddr) -> String {
    a.to_string()
}

fn msg(v: &Value) -> &str {
    v["fields"]["message"].as_str().unwrap_or_default()
}

fn with(mut base: Value, path: &[&str], value: Value) -> Value {
    let mut cur = &mut base;
    for p in &path[..path.len() - 1] {
        cur = &mut cur[*p];
    }
    cur[path[path.len() - 1]] = value;
    base
}

fn unreserve(rid: &str, p: &Value, node: &str) -> Kind {
    Kind::Unreserve(pb::UnreserveRequest {
        node: node.into(),
        reservation_id: rid.into(),
        namespace: p["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
        uid: p["metadata"]["uid"].as_str().unwrap_or_default().into(),
    })
}

fn reserve(rid: &str, node: &str) -> Kind {
    Kind::Reserve(pb::ReserveRequest {
        node: node.into(),
        reservation_id: rid.into(),
    })
}

fn status_of(r: Reply) -> Result<(Option<pb::Code>, Vec<String>)> {
    let s = match r {
        Reply::Reserve(r) => r.status,
        Reply::PreBind(r) => r.status,
        Reply::PreFilter(r) => r.status,
        Reply::Permit(r) => r.status,
        Reply::PlacementFeasible(r) => r.status,
        Reply::GroupPermit(r) => r.status,
        Reply::PodGroupPostFilter(r) => r.status,
        other => bail!("no status in {other:?}"),
    };
    Ok((code(&s), s.map(|s| s.reasons).unwrap_or_default()))
}

#[tokio::test]
async fn gpu_share_keeps_its_ledger_exact_through_the_protocol() -> Result<()> {
    let state = std::env::temp_dir().join(format!("gpu-share-e2e-{}.json", std::process::id()));
    let state_arg = state.to_string_lossy().to_string();
    let mut p = Proc::start(
        env!("CARGO_BIN_EXE_gpu-share"),
        &["--state-file", &state_arg],
    )
    .await?;
    let mut s = Session::open(p.addr).await?;
    assert_eq!(s.hello.name, "gpu-share");
    assert!(s.hello.wants_nodes);
    let gpu_node = |name: &str, count: &str| {
        with(
            with(
                node(name, json!({})),
                &["metadata", "annotations"],
                json!({"example.com/gpu-memory-mib": "16384"}),
            ),
            &["status"],
            json!({"allocatable": {"example.com/gpu": count}}),
        )
    };
    s.nodes(&[
        gpu_node("g1", "1"),
        gpu_node("g2", "2"),
        node("cpu", json!({})),
    ])?;
    let gpu_pod = |name: &str, uid: &str, mib: &str| {
        with(
            pod(name, uid, json!({})),
            &["spec", "containers"],
            json!([{"name": "c", "image": "x", "resources": {"requests": {"example.com/gpu-mem": mib}}}]),
        )
    };
    let a = gpu_pod("a", "ua", "12000");
    s.cycle(1, &a)?;
    s.request(
        1,
        1,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["g1", "g2", "cpu"]),
            score: false,
        }),
    )?;
    match s.response(1).await? {
        Reply::Filter(f) => {
            let rejected: Vec<(u32, &str)> = f
                .rejected
                .iter()
                .map(|r| (r.node_id, r.reasons[0].as_str()))
                .collect();
            assert_eq!(
                rejected,
                vec![(
                    id("cpu"),
                    "node(s) didn't have a GPU with enough free memory"
                )]
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(2, 1, reserve("ra", "g1"))?;
    assert_eq!(status_of(s.response(2).await?)?.0, Some(pb::Code::Success));
    let line = p.wait_log("reserved pod=default/a").await?;
    assert_eq!(
        msg(&line),
        "reserved pod=default/a node=g1 gpu=0 mib=12000 used=12000/16384"
    );

    // g1 is nearly full: a second 12000 MiB pod only fits g2, and scores
    // prefer the fuller GPU for a small pod.
    let b = gpu_pod("b", "ub", "4000");
    s.cycle(2, &b)?;
    s.request(
        3,
        2,
        Kind::Score(pb::ScoreRequest {
            node_ids: ids(&["g1", "g2"]),
        }),
    )?;
    match s.response(3).await? {
        Reply::Score(sc) => assert_eq!(sc.scores, vec![97, 24]),
        other => bail!("unexpected {other:?}"),
    }
    s.request(4, 2, reserve("rb", "g1"))?;
    assert_eq!(status_of(s.response(4).await?)?.0, Some(pb::Code::Success));
    let line = p.wait_log("reserved pod=default/b").await?;
    assert_eq!(
        msg(&line),
        "reserved pod=default/b node=g1 gpu=0 mib=4000 used=16000/16384"
    );
    // g1 is full now.
    let c = gpu_pod("c", "uc", "1000");
    s.cycle(3, &c)?;
    s.request(5, 3, reserve("rc", "g1"))?;
    assert_eq!(
        status_of(s.response(5).await?)?,
        (
            Some(pb::Code::Unschedulable),
            vec!["node(s) didn't have a GPU with enough free memory".to_string()]
        )
    );

    // Undo a: three times, on two streams; c's failed reservation too.
    s.request(6, 0, unreserve("ra", &a, "g1"))?;
    s.request(7, 0, unreserve("ra", &a, "g1"))?;
    s.request(8, 0, unreserve("rc", &c, "g1"))?;
    for id in [6, 7, 8] {
        assert!(matches!(s.response(id).await?, Reply::Unreserve(_)));
    }
    s.close();
    let mut s2 = Session::open(p.addr).await?;
    s2.request(1, 0, unreserve("ra", &a, "g1"))?;
    assert!(matches!(s2.response(1).await?, Reply::Unreserve(_)));
    let line = p.wait_log("released pod=").await?;
    assert_eq!(
        msg(&line),
        "released pod=default/a node=g1 gpu=0 mib=12000 used=4000"
    );
    // The state file says the same: only b's 4000 MiB are used.
    let v: Value = serde_json::from_slice(&std::fs::read(&state)?)?;
    assert_eq!(v["used"], json!({"g1": [4000]}));
    assert_eq!(
        v["allocations"],
        json!({"ub": {"pod": "default/b", "node": "g1", "gpu": 0, "mib": 4000,
                      "reservation": "rb", "committed": false}})
    );

    p.stop().await?;
    std::fs::remove_file(&state)?;
    Ok(())
}

#[tokio::test]
async fn volume_prebind_provisions_fails_on_purpose_and_releases() -> Result<()> {
    let mut p = Proc::start(
        env!("CARGO_BIN_EXE_volume-prebind"),
        &["--fail-pods", "^bad-"],
    )
    .await?;
    let mut s = Session::open(p.addr).await?;
    assert_eq!(
        s.hello.points,
        vec![
            pb::ExtensionPoint::Reserve as i32,
            pb::ExtensionPoint::PreBind as i32,
            pb::ExtensionPoint::PostBind as i32
        ]
    );
    let vol = |name: &str, uid: &str| {
        with(
            pod(name, uid, json!({})),
            &["metadata", "annotations"],
            json!({"example.com/volume-size": "5Gi"}),
        )
    };
    let good = vol("pg-0", "u1");
    s.cycle(1, &good)?;
    s.request(1, 1, reserve("r1", "n1"))?;
    assert_eq!(status_of(s.response(1).await?)?.0, Some(pb::Code::Success));
    s.request(
        2,
        1,
        Kind::PreBind(pb::PreBindRequest { node: "n1".into() }),
    )?;
    assert_eq!(status_of(s.response(2).await?)?.0, Some(pb::Code::Success));
    let line = p.wait_log("provisioned volume").await?;
    assert_eq!(
        msg(&line),
        "provisioned volume pod=default/pg-0 node=n1 size=5Gi"
    );

    let bad = vol("bad-0", "u2");
    s.cycle(2, &bad)?;
    s.request(3, 2, reserve("r2", "n1"))?;
    assert_eq!(status_of(s.response(3).await?)?.0, Some(pb::Code::Success));
    s.request(
        4,
        2,
        Kind::PreBind(pb::PreBindRequest { node: "n1".into() }),
    )?;
    assert_eq!(
        status_of(s.response(4).await?)?,
        (
            Some(pb::Code::Error),
            vec![
                "volume provisioning failed for pod default/bad-0: its name matches --fail-pods ^bad-"
                    .to_string()
            ]
        )
    );
    p.wait_log("provisioning failed pod=default/bad-0").await?;

    // The good pod's attempt is undone later (say its Bind failed).
    s.request(5, 1, unreserve("r1", &good, "n1"))?;
    s.request(6, 1, unreserve("r1", &good, "n1"))?;
    assert!(matches!(s.response(5).await?, Reply::Unreserve(_)));
    assert!(matches!(s.response(6).await?, Reply::Unreserve(_)));
    let line = p.wait_log("released volume").await?;
    assert_eq!(
        msg(&line),
        "released volume pod=default/pg-0 node=n1 size=5Gi"
    );
    p.stop().await?;
    Ok(())
}

#[tokio::test]
async fn gang_permit_allows_the_group_once_complete() -> Result<()> {
    let p = Proc::start(
        env!("CARGO_BIN_EXE_gang-permit"),
        &["--wait-timeout", "45s"],
    )
    .await?;
    let mut s = Session::open(p.addr).await?;
    let member = |name: &str| {
        with(
            pod(
                name,
                &format!("uid-{name}"),
                json!({"pod-group.example.com/name": "job"}),
            ),
            &["metadata", "annotations"],
            json!({"pod-group.example.com/min-member": "2"}),
        )
    };
    let permit = |rid: &str| {
        Kind::Permit(pb::PermitRequest {
            node: "n".into(),
            reservation_id: rid.into(),
        })
    };
    // A pod in no group is allowed at once.
    s.cycle(1, &pod("solo", "u0", json!({})))?;
    s.request(1, 1, permit("r0"))?;
    assert_eq!(status_of(s.response(1).await?)?.0, Some(pb::Code::Success));

    s.cycle(2, &member("w1"))?;
    s.request(2, 2, reserve("r1", "n"))?;
    assert_eq!(status_of(s.response(2).await?)?.0, Some(pb::Code::Success));
    s.request(3, 2, permit("r1"))?;
    match s.response(3).await? {
        Reply::Permit(pr) => {
            assert_eq!(code(&pr.status), Some(pb::Code::Wait));
            assert_eq!(
                pr.wait_timeout,
                Some(prost_duration(std::time::Duration::from_secs(45)))
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    s.cycle(3, &member("w2"))?;
    s.request(4, 3, reserve("r2", "n"))?;
    assert_eq!(status_of(s.response(4).await?)?.0, Some(pb::Code::Success));
    s.request(5, 3, permit("r2"))?;
    assert_eq!(status_of(s.response(5).await?)?.0, Some(pb::Code::Success));
    let d = s.decision().await?;
    assert_eq!((d.reservation_id.as_str(), d.allow), ("r1", true));
    p.stop().await?;
    Ok(())
}

#[tokio::test]
async fn quota_core_admits_within_quota_and_picks_the_node() -> Result<()> {
    let mut p = Proc::start(
        env!("CARGO_BIN_EXE_quota-core"),
        &["--quota", "team-a=1000"],
    )
    .await?;
    let mut s = Session::open(p.addr).await?;
    let cpu_node = |name: &str, cpu: &str| {
        with(
            node(name, json!({})),
            &["status"],
            json!({"allocatable": {"cpu": cpu}}),
        )
    };
    s.nodes(&[cpu_node("n1", "2"), cpu_node("n2", "4")])?;
    let app = |name: &str, cpu: &str| {
        let p = pod(
            name,
            &format!("uid-{name}"),
            json!({"quota-core.example.com/app": "batch"}),
        );
        let p = with(p, &["metadata", "namespace"], json!("team-a"));
        with(
            p,
            &["spec", "containers"],
            json!([{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]),
        )
    };
    // Not ours: skipped.
    s.cycle(1, &pod("web", "u0", json!({})))?;
    s.request(1, 1, Kind::PreFilter(pb::PreFilterRequest {}))?;
    assert_eq!(status_of(s.response(1).await?)?.0, Some(pb::Code::Skip));

    // Ours: restricted to the freest node.
    let a = app("a", "600m");
    s.cycle(2, &a)?;
    s.request(2, 2, Kind::PreFilter(pb::PreFilterRequest {}))?;
    match s.response(2).await? {
        Reply::PreFilter(pf) => {
            assert_eq!(code(&pf.status), Some(pb::Code::Success));
            assert_eq!(pf.node_names.map(|n| n.names), Some(names(&["n2"])));
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(
        3,
        2,
        Kind::Filter(pb::FilterRequest {
            node_ids: ids(&["n1", "n2"]),
            score: false,
        }),
    )?;
    match s.response(3).await? {
        Reply::Filter(f) => {
            assert_eq!(f.rejected.len(), 1);
            assert_eq!(f.rejected[0].node_id, id("n1"));
            assert_eq!(
                f.rejected[0].reasons,
                vec!["quota-core placed the pod on node n2"]
            );
        }
        other => bail!("unexpected {other:?}"),
    }
    s.request(4, 2, reserve("ra", "n2"))?;
    assert_eq!(status_of(s.response(4).await?)?.0, Some(pb::Code::Success));
    s.request(
        5,
        2,
        Kind::PostBind(pb::PostBindRequest { node: "n2".into() }),
    )?;
    assert!(matches!(s.response(5).await?, Reply::PostBind(_)));
    s.send(In::CycleEnd(pb::CycleEnd { cycle_id: 2 }))?;
    let line = p.wait_log("bound pod=team-a/a").await?;
    assert_eq!(
        msg(&line),
        "bound pod=team-a/a node=n2 cpu=600m namespace=team-a used=600m/1000m"
    );

    // Over quota now.
    s.cycle(3, &app("b", "500m"))?;
    s.request(6, 3, Kind::PreFilter(pb::PreFilterRequest {}))?;
    assert_eq!(
        status_of(s.response(6).await?)?,
        (
            Some(pb::Code::UnschedulableAndUnresolvable),
            vec!["namespace team-a over quota: requested 500m, used 600m of 1000m".to_string()]
        )
    );
    p.stop().await?;
    Ok(())
}

/// A pod of PodGroup `group`.
fn group_pod(name: &str, group: &str) -> Value {
    with(
        pod(name, &format!("uid-{name}"), json!({})),
        &["spec", "schedulingGroup"],
        json!({"podGroupName": group}),
    )
}

fn group_start(cycle_id: u64, group: &str, pods: &[&str], scheduled: &[(&str, &str)]) -> In {
    let member = |name: &str, node: &str| pb::GroupMember {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        pod: serde_json::to_vec(&group_pod(name, group)).unwrap_or_default(),
        node: node.into(),
        node_id: if node.is_empty() { 0 } else { id(node) },
    };
    In::GroupCycleStart(pb::GroupCycleStart {
        cycle_id,
        pod_group: serde_json::to_vec(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": group, "namespace": "default", "uid": format!("uid-{group}")},
            "spec": {"schedulingPolicy": {"gang": {"minCount": pods.len() + scheduled.len()}}},
        }))
        .unwrap_or_default(),
        namespace: "default".into(),
        name: group.into(),
        uid: format!("uid-{group}"),
        pods: pods.iter().map(|p| member(p, "")).collect(),
        scheduled: scheduled.iter().map(|(p, n)| member(p, n)).collect(),
    })
}

fn placement_feasible(scheduled: u32, remaining: u32, placed: &[(&str, &str)]) -> Kind {
    Kind::PlacementFeasible(pb::PlacementFeasibleRequest {
        scheduled,
        remaining,
        placed: placed
            .iter()
            .map(|(p, n)| pb::Placement {
                uid: format!("uid-{p}"),
                node: n.to_string(),
                node_id: id(n),
            })
            .collect(),
        failed: 0,
    })
}

fn filter(nodes: &[&str]) -> Kind {
    Kind::Filter(pb::FilterRequest {
        node_ids: ids(nodes),
        score: false,
    })
}

/// The rejected nodes of a Filter answer, by name.
fn rejected(r: Reply) -> Result<Vec<String>> {
    match r {
        Reply::Filter(f) => {
            let by_id: std::collections::HashMap<u32, &str> = ["a1", "a2", "b1", "b2"]
                .iter()
                .map(|n| (id(n), *n))
                .collect();
            Ok(f.rejected
                .iter()
                .map(|s| by_id.get(&s.node_id).copied().unwrap_or("?").to_string())
                .collect())
        }
        other => bail!("not a Filter answer: {other:?}"),
    }
}

#[tokio::test]
async fn gang_zone_keeps_a_gang_in_the_zone_of_its_first_pod() -> Result<()> {
    let p = Proc::start(env!("CARGO_BIN_EXE_gang-zone"), &[]).await?;
    let mut s = Session::open(p.addr).await?;
    let zone = |z: &str| json!({"topology.kubernetes.io/zone": z});
    s.nodes(&[
        node("a1", zone("a")),
        node("a2", zone("a")),
        node("b1", zone("b")),
        node("b2", zone("b")),
    ])?;
    let all = ["a1", "a2", "b1", "b2"];
    // A group cycle of two pods: nothing placed yet, every node passes.
    s.send(group_start(10, "train", &["w0", "w1"], &[]))?;
    s.request(1, 10, placement_feasible(0, 2, &[]))?;
    assert_eq!(status_of(s.response(1).await?)?.0, Some(pb::Code::Success));
    s.cycle(11, &group_pod("w0", "train"))?;
    s.request(2, 11, filter(&all))?;
    assert!(rejected(s.response(2).await?)?.is_empty());
    // w0 went to b2: the next pod of the cycle is kept to zone b.
    s.request(3, 10, placement_feasible(1, 1, &[("w0", "b2")]))?;
    assert_eq!(status_of(s.response(3).await?)?.0, Some(pb::Code::Success));
    s.cycle(12, &group_pod("w1", "train"))?;
    s.request(4, 12, filter(&all))?;
    assert_eq!(rejected(s.response(4).await?)?, names(&["a1", "a2"]));
    // A placement across zones is refused, naming them.
    s.request(
        5,
        10,
        placement_feasible(2, 0, &[("w0", "b2"), ("w1", "a1")]),
    )?;
    let (c, reasons) = status_of(s.response(5).await?)?;
    assert_eq!(c, Some(pb::Code::Unschedulable));
    assert_eq!(
        reasons,
        names(&["pod group default/train would span zones a, b"])
    );
    // A pod outside any group is not constrained.
    s.cycle(13, &pod("solo", "uid-solo", json!({})))?;
    s.request(6, 13, filter(&all))?;
    assert!(rejected(s.response(6).await?)?.is_empty());
    // The next cycle of a gang already running in zone a starts there.
    s.send(group_start(20, "serve", &["s1"], &[("s0", "a2")]))?;
    s.request(7, 20, placement_feasible(1, 1, &[]))?;
    assert_eq!(status_of(s.response(7).await?)?.0, Some(pb::Code::Success));
    s.cycle(21, &group_pod("s1", "serve"))?;
    s.request(8, 21, filter(&all))?;
    assert_eq!(rejected(s.response(8).await?)?, names(&["b1", "b2"]));
    // A group request naming a cycle never started is answered an error.
    s.request(9, 99, placement_feasible(0, 1, &[]))?;
    assert!(
        s.error(9)
            .await?
            .contains("group cycle 99, which was not started")
    );
    p.stop().await?;
    Ok(())
}
