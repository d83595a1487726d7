//! berthd against careless and hostile clients (issue 14): each bad input
//! gets its status code and a message naming the field, berthd stays
//! alive and answers the next call, heavy calls are shed when too many
//! run, deadlines and departed clients stop the work, SIGTERM ends berthd
//! within --shutdown-timeout whatever a call is doing, and lists of 50,000
//! pods page.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_client::ClientError;
use berth_client::pb::scheduler_client::SchedulerClient;
use berth_client::pb::{self};
use berth_e2e::{Berthd, grpcurl_path, message};
use serde_json::{Value, json};
use tonic::Code;

/// A file of the test's, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> Result<Self> {
        let path =
            std::env::temp_dir().join(format!("berth-limits-{tag}-{}.yaml", std::process::id()));
        std::fs::write(&path, text)?;
        Ok(Self(path))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const TWO_NODES: &str = "\
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/zone: a}}
status: {allocatable: {cpu: '4', memory: 8Gi, pods: '110'}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {topology.kubernetes.io/zone: b}}
status: {allocatable: {cpu: '64', memory: 64Gi, pods: '110'}}
";

async fn start(tag: &str, cluster: &str, extra: &[&str]) -> Result<(Berthd, TempFile)> {
    let file = TempFile::new(tag, cluster)?;
    let mut args = vec!["--cluster", file.0.to_str().context("path")?, "--seed", "1"];
    args.extend_from_slice(extra);
    let berthd = Berthd::start(&args).await?;
    Ok((berthd, file))
}

fn status(r: Result<impl std::fmt::Debug, ClientError>) -> Result<tonic::Status> {
    match r {
        Err(ClientError::Status(s)) => Ok(s),
        other => bail!("expected an error status, got {other:?}"),
    }
}

fn web() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})
}

/// `{"a": {"a": ... {"x": 1}}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    let mut v = json!({"x": 1});
    for _ in 1..levels {
        v = json!({ "a": v });
    }
    v
}

#[tokio::test]
async fn each_bad_input_gets_its_code_and_field_and_berthd_stays_up() -> Result<()> {
    let (berthd, _file) = start("inputs", TWO_NODES, &[]).await?;
    let mut c = berthd.client().await?;
    let mut cases: Vec<(&str, tonic::Status, Code, String)> = Vec::new();

    // 3. Typos are refused, not silently dropped.
    let mut typo = web();
    typo["spec"]["nodeSelektor"] = json!({"topology.kubernetes.io/zone": "a"});
    cases.push((
        "nodeSelektor",
        status(c.dry_run(&typo, "", false).await)?,
        Code::InvalidArgument,
        "pod.spec.nodeSelektor: unknown field \"nodeSelektor\"".into(),
    ));
    let mut typo = web();
    typo["spec"]["containers"][0]["resourcez"] = json!({"requests": {"cpu": "64"}});
    cases.push((
        "resourcez",
        status(c.simulate(&[typo], 3, "").await)?,
        Code::InvalidArgument,
        "pods[0].spec.containers[0].resourcez: unknown field \"resourcez\"".into(),
    ));
    // Annotations over 256 KiB in total; a 15 MiB one is larger than any
    // object the API server stores.
    let mut big = web();
    big["metadata"]["annotations"] =
        json!({"a": "x".repeat(200 << 10), "b": "y".repeat(100 << 10)});
    cases.push((
        "annotations over 256 KiB",
        status(c.apply(&[big], "").await)?,
        Code::InvalidArgument,
        "objects[0]: metadata.annotations: Too long: may not be more than 262144 bytes".into(),
    ));
    let mut huge = web();
    huge["metadata"]["annotations"] = json!({"a": "x".repeat(15 << 20)});
    cases.push((
        "15 MiB annotation",
        status(c.apply(&[huge], "").await)?,
        Code::InvalidArgument,
        "objects[0]: Too long: the object is".into(),
    ));
    let mut name = web();
    name["metadata"]["name"] = json!("Web_1");
    cases.push((
        "a name that is not a DNS subdomain",
        status(c.apply(&[name], "").await)?,
        Code::InvalidArgument,
        "objects[0]: metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain"
            .into(),
    ));
    let mut ns = web();
    ns["metadata"]["namespace"] = json!("nowhere");
    cases.push((
        "a namespace that does not exist",
        status(c.apply(&[ns], "").await)?,
        Code::NotFound,
        "objects[0]: metadata.namespace: namespaces \"nowhere\" not found".into(),
    ));
    let mut over = web();
    over["spec"]["containers"][0]["resources"]["limits"] = json!({"cpu": "500m"});
    cases.push((
        "limits below requests",
        status(c.apply(&[over], "").await)?,
        Code::InvalidArgument,
        "objects[0]: spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit of 500m".into(),
    ));

    // 2. A hundred million replicas: refused before anything is built
    // (the count is checked first; only that check words these messages).
    cases.push((
        "replicas",
        status(c.simulate(&[web()], 100_000_000, "").await)?,
        Code::InvalidArgument,
        "replicas: Invalid value: 100000000: at most 100000 pods can be simulated at once".into(),
    ));
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 100_000_000, "selector": {}, "template": {"spec": {"containers": [{"name": "c"}]}}}});
    cases.push((
        "a workload's own replicas",
        status(c.simulate(&[deployment], 0, "").await)?,
        Code::InvalidArgument,
        "pods[0]: Too many: 100000000 pods in all: at most 100000".into(),
    ));

    // 5. A Struct nested 40 deep.
    let mut deep = web();
    deep["metadata"]["annotations"] = json!({});
    deep["spec"]["overhead"] = nested(40);
    let mut raw = SchedulerClient::new(c.channel().clone());
    let deep_status = raw
        .dry_run(pb::DryRunRequest {
            pod: berth_proto::json::to_struct(&deep),
            ..Default::default()
        })
        .await
        .err()
        .context("deep JSON accepted")?;
    cases.push((
        "Struct nested 40 deep",
        deep_status,
        Code::InvalidArgument,
        format!("pod.spec.overhead{}: nested too deeply", ".a".repeat(30)),
    ));

    for (what, s, code, want) in &cases {
        assert_eq!(s.code(), *code, "{what}: {}", s.message());
        assert!(
            s.message().starts_with(want.as_str()),
            "{what}: {:?} does not start with {want:?}",
            s.message()
        );
        assert!(
            s.message().len() < 1024,
            "{what}: {} bytes",
            s.message().len()
        );
    }

    // 4. Requests default from limits, as the API server defaults them: a
    // pod limited to 64 CPUs needs the 64-CPU node.
    let mut limited = web();
    limited["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "64", "memory": "1Gi"}});
    let answer = c.dry_run(&limited, "", false).await?;
    assert_eq!(answer.selected_node, "n2", "{}", answer.message);
    let n1 = answer.nodes.iter().find(|n| n.node == "n1").context("n1")?;
    let fit = n1
        .filters
        .iter()
        .find(|f| f.plugin == "NodeResourcesFit")
        .context("NodeResourcesFit on n1")?;
    assert_eq!(fit.reasons, ["Insufficient cpu"]);

    // Nothing was stored, and berthd answers on.
    assert!(c.list("pods", "").await?.is_empty());
    assert!(!c.dry_run(&web(), "", false).await?.selected_node.is_empty());
    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn grpcurl_sees_invalid_argument_for_deep_json() -> Result<()> {
    let (berthd, _file) = start("grpcurl-deep", TWO_NODES, &[]).await?;
    let mut pod = web();
    pod["spec"]["overhead"] = nested(40);
    let body = json!({ "pod": pod }).to_string();
    let out = tokio::process::Command::new(grpcurl_path()?)
        .args([
            "-plaintext",
            "-d",
            &body,
            &berthd.addr,
            "berth.v1.Scheduler/DryRun",
        ])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("Code: InvalidArgument"), "{stderr}");
    assert!(
        stderr.contains("pod.spec.overhead.a.a.a") && stderr.contains("nested too deeply"),
        "{stderr}"
    );
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// A cluster of `nodes` nodes of 110 pods, and `pods` pods bound across
/// them, as YAML.
fn bound_cluster(nodes: usize, pods: usize) -> String {
    let mut y = String::new();
    for i in 0..nodes {
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}}}\nstatus: {{allocatable: {{cpu: '64', memory: 256Gi, pods: '110'}}, conditions: [{{type: Ready, status: 'True'}}]}}\n"
        ));
    }
    for i in 0..pods {
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: pod-{i:05}, namespace: load, labels: {{app: load}}}}\nspec: {{nodeName: node-{}, containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]}}\n",
            i % nodes
        ));
    }
    y
}

#[tokio::test]
async fn lists_of_fifty_thousand_pods_page_and_get_nodes_sums_on_the_server() -> Result<()> {
    const NODES: usize = 500;
    const PODS: usize = 50_000;
    let (berthd, _file) = start("fifty-thousand", &bound_cluster(NODES, PODS), &[]).await?;
    let mut berthd = berthd;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced"))
        .await?;
    let mut c = berthd.client().await?;

    // Pages as the Kubernetes API pages: limit and continue.
    let first = c.list_page("pods", "load", 1000, "").await?;
    assert_eq!(first.items.len(), 1000);
    assert_eq!(first.remaining_item_count, (PODS - 1000) as i64);
    assert!(!first.r#continue.is_empty());
    let second = c.list_page("pods", "load", 1000, &first.r#continue).await?;
    let name = |s: &prost_types::Struct| {
        berth_proto::json::from_struct(s)["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(name(&second.items[0]), "pod-01000");
    // Without a limit, each page still fits in 4 MiB; the client follows
    // the pages to the end.
    let unlimited = c.list_page("pods", "", 0, "").await?;
    assert!(
        !unlimited.r#continue.is_empty(),
        "50,000 pods are more than one page"
    );
    assert!(prost::Message::encoded_len(&unlimited) < 4 << 20);
    let all = c.list("pods", "").await?;
    assert_eq!(all.len(), PODS);

    // berthctl get nodes: one summary per node, summed by the server.
    let usage = c.node_usage("").await?;
    assert_eq!(usage.len(), NODES);
    let n0 = usage
        .iter()
        .find(|n| n.node == "node-0")
        .context("node-0")?;
    assert_eq!(n0.pods, (PODS / NODES) as i64);
    assert_eq!(n0.cpu_requested_milli, 100 * (PODS / NODES) as i64);
    assert_eq!(n0.ready, "True");
    let one = c.node_usage("node-7").await?;
    assert_eq!(one.len(), 1);
    assert_eq!(status(c.node_usage("nope").await)?.code(), Code::NotFound);

    // And through berthctl, as a user runs it.
    let ctl = berth_e2e::berthctl_path()?;
    for args in [
        vec!["get", "nodes"],
        vec!["get", "node", "node-3"],
        vec!["get", "pods", "-n", "load"],
    ] {
        let out = tokio::process::Command::new(&ctl)
            .args(["-s", &berthd.addr])
            .args(&args)
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "berthctl {args:?}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let want_rows = match args[1] {
            "nodes" => NODES,
            "node" => 1,
            _ => PODS,
        };
        assert_eq!(stdout.lines().count(), want_rows + 1, "berthctl {args:?}");
    }
    let nodes = tokio::process::Command::new(&ctl)
        .args(["-s", &berthd.addr, "get", "node", "node-3"])
        .output()
        .await?;
    let text = String::from_utf8_lossy(&nodes.stdout);
    assert!(
        text.contains("10/64 (15%)") && text.contains("100/110"),
        "{text}"
    );
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// A pod that fits anywhere, simulated many times: long work.
fn small() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]}})
}

#[tokio::test]
async fn heavy_calls_are_shed_deadlines_stop_work_and_sigterm_ends_berthd_in_time() -> Result<()> {
    let (berthd, _file) = start("heavy", TWO_NODES, &["--shutdown-timeout", "3s"]).await?;
    let addr = berthd.addr.clone();
    // A deadline stops a long simulation, and the server goes on
    // answering. (tonic's server answers a passed deadline with CANCELLED,
    // "Timeout expired"; gRPC's own code would be DEADLINE_EXCEEDED.)
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut raw = SchedulerClient::new(channel.clone());
    let mut req = tonic::Request::new(pb::SimulateRequest {
        pods: vec![berth_proto::json::to_struct(&small()).context("struct")?],
        replicas: 100_000,
        ..Default::default()
    });
    req.set_timeout(Duration::from_millis(300));
    let e = raw
        .simulate(req)
        .await
        .err()
        .context("100,000 pods in 300 ms")?;
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{:?}: {}",
        e.code(),
        e.message()
    );
    assert!(e.message().contains("Timeout expired"), "{}", e.message());

    // The server drops the call when it sees the deadline or the reset,
    // which may come just after the client's answer: wait until two small
    // simulations at once are both accepted, so both permits are free.
    let mut c1 = berthd.client().await?;
    let mut c2 = berthd.client().await?;
    let one = [small()];
    loop {
        let (x, y) = tokio::join!(c1.simulate(&one, 1, ""), c2.simulate(&one, 1, ""));
        match (x, y) {
            (Ok(_), Ok(_)) => break,
            (Err(ClientError::Status(s)), _) | (_, Err(ClientError::Status(s)))
                if s.code() == Code::ResourceExhausted =>
            {
                tokio::task::yield_now().await
            }
            (x, y) => bail!("unexpected {x:?} {y:?}"),
        }
    }

    // Two simulations may run at once; of three long ones started
    // together, one is refused at once (whichever comes third) and two
    // run on.
    let long = || {
        let mut raw = SchedulerClient::new(channel.clone());
        let pod = berth_proto::json::to_struct(&small());
        tokio::spawn(async move {
            raw.simulate(pb::SimulateRequest {
                pods: pod.into_iter().collect(),
                replicas: 100_000,
                ..Default::default()
            })
            .await
        })
    };
    let (first, _, running) = futures::future::select_all([long(), long(), long()]).await;
    let shed = first?
        .err()
        .context("a simulation of 100,000 pods finished at once")?;
    assert_eq!(shed.code(), Code::ResourceExhausted, "{}", shed.message());
    assert!(
        shed.message()
            .starts_with("berthd is busy: 2 Simulate calls are already running"),
        "{}",
        shed.message()
    );
    let [a, b]: [_; 2] = running
        .try_into()
        .map_err(|_| anyhow::anyhow!("two calls left"))?;
    let mut c = berthd.client().await?;
    // Cheap calls are not held up.
    assert!(!c.dry_run(&web(), "", false).await?.selected_node.is_empty());

    // SIGTERM while both run: berthd does not wait for them past its
    // shutdown timeout (it says so, and exits cleanly); the timeout itself
    // runs on tokio time, not measured here on a wall clock.
    berthd.signal("TERM")?;
    let (code, lines) = berthd.wait_exit().await?;
    assert!(code.success(), "{code}");
    assert!(
        lines.iter().any(|l| message(l) == "shutdown complete"),
        "{:#?}",
        lines.iter().map(message).collect::<Vec<_>>()
    );
    for call in [a, b] {
        let r = call.await?;
        let s = r
            .err()
            .context("a simulation of 100,000 pods finished before SIGTERM")?;
        assert!(
            matches!(
                s.code(),
                Code::Unavailable | Code::Cancelled | Code::Unknown
            ),
            "{:?}: {}",
            s.code(),
            s.message()
        );
    }
    Ok(())
}
