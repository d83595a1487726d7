//! `kubectl berth` as an operator runs it: the real `kubectl-berth` binary
//! with a kubeconfig, against the stand-in API server
//! (`berth_e2e::fake_apiserver`) and a real berthd in kube mode watching
//! it. berthd is reached as in a cluster, through the API server: a
//! port-forward (the `pods/portforward` WebSocket) to a ready pod of the
//! `kube-system/berth` Service, the Lease holder's first; or directly with
//! `--berth`; with `--berth` and no kubeconfig at all, berthd alone on its
//! embedded cluster. kubectl itself finds the plugin on the PATH (tests/run.sh
//! installs kubectl; without one that test fails, as the deploy tests do).

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_e2e::fake_apiserver::{FakeApiServer, Recorded};
use berth_e2e::manifests::kubectl;
use berth_e2e::{Berthd, TempDir, kubectl_berth_path, message};
use serde_json::{Value, json};
use tokio::process::Command;

const PODS: &str = "/api/v1/namespaces/default/pods";
const SYSTEM_PODS: &str = "/api/v1/namespaces/kube-system/pods";

/// How long one kubectl-berth run may take before the test calls it hung.
const GUARD: Duration = Duration::from_secs(60);

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn pod(name: &str, cpu: &str, scheduler: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    })
}

/// A berthd replica as the Deployment runs it: bound, running, ready, its
/// gRPC port named as the Service's targetPort names it. The stand-in
/// forwards to `status.podIP`, where the test's berthd listens.
fn berthd_pod(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"app": "berth"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "berthd", "image": "ghcr.io/berth-scheduler/berthd:latest",
                "ports": [{"name": "grpc", "containerPort": port}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// The cluster: two 4-CPU nodes; pods of berth's profile (`berth`) that
/// fit, fit nowhere, or wait for a gate; pods of kube-scheduler's; berthd
/// in kube mode; its Service, two replicas' pods and the Lease naming the
/// leader (`berth-1`, listed second so that choosing the first ready pod
/// would pick the standby, whose port nothing serves).
struct Cluster {
    fake: FakeApiServer,
    berthd: Berthd,
    dir: TempDir,
    kubeconfig: String,
}

async fn start(tag: &str) -> Result<Cluster> {
    let fake = FakeApiServer::start().await?;
    for n in ["n1", "n2"] {
        fake.create("/api/v1/nodes", node(n))?;
    }
    for ns in ["default", "kube-system"] {
        fake.create("/api/v1/namespaces", json!({"metadata": {"name": ns}}))?;
    }
    fake.create(PODS, pod("web", "1", "berth"))?;
    fake.create(PODS, pod("huge", "64", "berth"))?;
    let mut gated = pod("gated", "100m", "berth");
    gated["spec"]["schedulingGates"] = json!([{"name": "example.com/quota"}]);
    fake.create(PODS, gated)?;
    fake.create(PODS, pod("theirs", "64", "default-scheduler"))?;
    fake.create(PODS, pod("theirs-small", "100m", "default-scheduler"))?;

    let dir = TempDir::new(tag)?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let kubeconfig = kubeconfig.display().to_string();
    let config = dir.write(
        "config.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         leaderElection: {leaderElect: false}\nprofiles:\n- schedulerName: berth\n",
    )?;
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &kubeconfig,
        "--config",
        &config,
        "--seed",
        "1",
    ])
    .await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    let port: u16 = berthd
        .addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .context("berthd's port")?;

    fake.create(
        "/api/v1/namespaces/kube-system/services",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "berth", "namespace": "kube-system"},
            "spec": {"selector": {"app": "berth"},
                     "ports": [{"name": "grpc", "port": 50051, "targetPort": "grpc"},
                               {"name": "http", "port": 10259, "targetPort": "http"}]},
        }),
    )?;
    // The standby's port: a listener closed at once, so nothing serves it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    fake.create(SYSTEM_PODS, berthd_pod("berth-0", closed))?;
    fake.create(SYSTEM_PODS, berthd_pod("berth-1", port))?;
    fake.create(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "berth", "namespace": "kube-system"},
            "spec": {"holderIdentity": "berth-1_2b6c1d2e-0c1f-4b7e-9a53-0f0b0d3f4c11",
                     "leaseDurationSeconds": 15},
        }),
    )?;

    // berth has tried its pods: `web` bound, `huge` failed.
    fake.wait_for_request(|r| is_binding_of(r, "web")).await?;
    fake.wait_for_request(|r| is_event(r, "FailedScheduling", "huge"))
        .await?;
    Ok(Cluster {
        fake,
        berthd,
        dir,
        kubeconfig,
    })
}

fn is_binding_of(r: &Recorded, name: &str) -> bool {
    r.method == "POST" && r.path == format!("{PODS}/{name}/binding")
}

fn is_event(r: &Recorded, reason: &str, pod: &str) -> bool {
    r.method == "POST"
        && r.path == "/apis/events.k8s.io/v1/namespaces/default/events"
        && r.body["reason"] == reason
        && r.body["regarding"]["name"] == pod
}

/// Runs `program` with `args` (a kubectl-berth or a kubectl), with `PATH`
/// put first when given.
async fn run(program: &Path, args: &[&str], path: Option<&Path>) -> Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = path {
        let old = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&old));
        cmd.env("PATH", std::env::join_paths(dirs)?);
    }
    tokio::time::timeout(GUARD, cmd.output())
        .await
        .with_context(|| format!("{} {args:?} hung", program.display()))?
        .with_context(|| format!("running {}", program.display()))
}

impl Cluster {
    /// `kubectl-berth --kubeconfig FILE ARGS...`.
    async fn plugin(&self, args: &[&str]) -> Result<Output> {
        let mut all = vec!["--kubeconfig", &self.kubeconfig];
        all.extend_from_slice(args);
        run(&kubectl_berth_path()?, &all, None).await
    }

    /// The plugin, which must exit with `code`; its stdout.
    async fn expect(&self, args: &[&str], code: i32) -> Result<String> {
        let out = self.plugin(args).await?;
        let (stdout, stderr) = (
            String::from_utf8(out.stdout)?,
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        ensure!(
            out.status.code() == Some(code),
            "kubectl-berth {args:?}: {} (wanted {code})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        Ok(stdout)
    }

    fn forwards(&self) -> Vec<Recorded> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/portforward"))
            .collect()
    }
}

/// The table rows of `why` (after the NODE header).
fn rows(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .skip(1)
        .collect()
}

#[tokio::test]
async fn why_explains_a_pending_pod_through_a_port_forward_to_the_leader() -> Result<()> {
    let c = start("why").await?;

    // berth's own pod that fits nowhere: exit 1, the cluster's condition,
    // berth's queue, and per node the plugin that rejects it.
    let out = c.expect(&["why", "huge"], 1).await?;
    for want in [
        "Pod default/huge, scheduler berth\n",
        "PodScheduled: False (Unschedulable): 0/2 nodes are available: 2 Insufficient cpu.",
        "In berth's queue: unschedulable, 1 attempt\n",
        "  rejected by: NodeResourcesFit",
        "Now: does not fit. 0/2 nodes are available: 2 Insufficient cpu.",
    ] {
        ensure!(out.contains(want), "{want:?} in:\n{out}");
    }
    // One row for the reason both nodes share.
    let listed = rows(&out);
    ensure!(listed.len() == 1, "{out}");
    let cells: Vec<&str> = listed[0]
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    ensure!(
        cells
            == [
                "2",
                "unresolvable",
                "NodeResourcesFit",
                "Insufficient cpu",
                "n1, n2"
            ],
        "{out}"
    );
    // Reached through the leader's pod, as the Lease names it, not the
    // first ready pod.
    let forwards = c.forwards();
    ensure!(!forwards.is_empty(), "no port-forward");
    for f in &forwards {
        ensure!(
            f.path == "/api/v1/namespaces/kube-system/pods/berth-1/portforward" && f.status == 101,
            "{f:?}"
        );
    }

    // A bound pod: nothing to explain, exit 0.
    let out = c.expect(&["why", "web"], 0).await?;
    ensure!(out.contains("Bound to n"), "{out}");

    // A gated pod: would fit, but nothing tries it: exit 1.
    let out = c.expect(&["why", "gated"], 1).await?;
    ensure!(
        out.contains("Waiting for scheduling gates: [example.com/quota]"),
        "{out}"
    );
    ensure!(
        out.contains("Now: gated. Once its gates are removed berth would schedule it to n"),
        "{out}"
    );

    // kube-scheduler's pods: asked of berth's profile.
    let out = c.expect(&["why", "theirs"], 1).await?;
    ensure!(
        out.contains("scheduler default-scheduler (asked of berth's profile berth)"),
        "{out}"
    );
    ensure!(!out.contains("In berth's queue"), "{out}");
    let out = c.expect(&["why", "theirs-small", "-o", "json"], 0).await?;
    let v: Value = serde_json::from_str(&out)?;
    ensure!(v["fits"] == true && v["profile"] == "berth", "{v}");
    ensure!(v["pod"]["schedulerName"] == "default-scheduler", "{v}");
    ensure!(
        v["dryRun"]["selectedNode"]
            .as_str()
            .is_some_and(|n| n.starts_with('n')),
        "{v}"
    );
    ensure!(
        v["dryRun"]["nodes"][0]["verdict"] == "NODE_VERDICT_FEASIBLE",
        "{v}"
    );

    // -o yaml, -o wide.
    let out = c.expect(&["why", "huge", "-o", "yaml"], 1).await?;
    let v: Value = serde_yaml::from_str(&out)?;
    ensure!(v["queue"]["queue"] == "QUEUE_NAME_UNSCHEDULABLE", "{v}");
    let out = c.expect(&["why", "theirs-small", "-o", "wide"], 0).await?;
    ensure!(
        out.lines()
            .any(|l| l.starts_with("NODE") && l.contains("SCORE")),
        "{out}"
    );
    ensure!(rows(&out).len() == 2, "wide lists every node: {out}");

    // Errors: exit 2, worded as kubectl words the API's.
    let out = c.plugin(&["why", "missing"]).await?;
    ensure!(out.status.code() == Some(2), "{}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains(
            "pod default/missing: Error from server (NotFound): pods \"missing\" not found"
        ),
        "{err}"
    );

    // Directly with --berth: the same answer without a port-forward.
    let before = c.forwards().len();
    let out = c
        .expect(&["why", "huge", "--berth", &c.berthd.addr], 1)
        .await?;
    ensure!(out.contains("Now: does not fit."), "{out}");
    ensure!(c.forwards().len() == before, "--berth made a port-forward");
    drop(c.dir);
    Ok(())
}

#[tokio::test]
async fn dry_run_simulate_and_queue_ask_the_clusters_berthd() -> Result<()> {
    let c = start("cmds").await?;
    // No namespace in the file: the context's ("default"), as kubectl.
    let file = c.dir.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: probe}\nspec:\n  schedulerName: berth\n  containers: [{name: c, resources: {requests: {cpu: 500m}}}]\n",
    )?;
    let out = c.expect(&["dry-run", "-f", &file], 0).await?;
    ensure!(
        out.starts_with(
            "Pod default/probe, profile berth: Successfully assigned default/probe to n"
        ),
        "{out}"
    );
    let out = c
        .expect(&["dry-run", "-f", &file, "-n", "team-a", "-o", "json"], 0)
        .await?;
    let v: Value = serde_json::from_str(&out)?;
    ensure!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("team-a/probe")),
        "{v}"
    );

    let out = c
        .expect(&["simulate", "-f", &file, "--replicas", "3"], 0)
        .await?;
    ensure!(out.contains("3 scheduled, 0 unschedulable"), "{out}");

    let out = c.expect(&["queue"], 0).await?;
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    ensure!(names.contains(&"huge") && names.contains(&"gated"), "{out}");
    ensure!(
        !names.contains(&"theirs"),
        "berth queues only its own pods: {out}"
    );
    let out = c.expect(&["queue", "-n", "kube-system"], 0).await?;
    ensure!(out.is_empty(), "{out}");
    let out = c.expect(&["queue", "-A", "-o", "json"], 0).await?;
    let v: Value = serde_json::from_str(&out)?;
    ensure!(v["pods"].as_array().is_some_and(|p| p.len() == 2), "{v}");
    Ok(())
}

#[tokio::test]
async fn a_port_forward_that_fails_says_why() -> Result<()> {
    let c = start("refused").await?;
    // The Lease now names the standby, whose port nothing serves.
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/berth";
    let mut l = c.fake.get(lease).context("the lease")?;
    l["spec"]["holderIdentity"] = json!("berth-0_5d1c");
    let rv = l["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    c.fake.replace(lease, l, &rv)?;
    let out = c.plugin(&["queue"]).await?;
    ensure!(out.status.code() == Some(1), "{}", out.status);
    // The error names the forward; the kubelet's own words ("error
    // forwarding port ...") come with it when kube-rs's forwarder hands
    // them over before the closed stream fails the call, which a client
    // writing at once may outrun, against a real API server as here.
    let err = String::from_utf8_lossy(&out.stderr);
    let closed = standby_port(&c)?;
    ensure!(
        err.contains(&format!(
            "port-forward to pod kube-system/berth-0 port {closed}"
        )),
        "{err}"
    );
    let forwards = c.forwards();
    ensure!(
        forwards.iter().any(|f| {
            f.path == "/api/v1/namespaces/kube-system/pods/berth-0/portforward" && f.status == 101
        }),
        "{forwards:?}"
    );

    // No Service: says which, and how to do without.
    let out = c
        .plugin(&["queue", "--berth-service", "kube-system/nope"])
        .await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("service kube-system/nope (berth's; --berth-service, or --berth ADDR): Error from server (NotFound)"),
        "{err}"
    );

    // No berth pod ready behind the Service (issue 33's finding 7): says
    // which, how to look, and how to reach berthd without the Service.
    for name in ["berth-0", "berth-1"] {
        let path = format!("{SYSTEM_PODS}/{name}");
        let mut p = c.fake.get(&path).context("a berth pod")?;
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        let rv = p["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        c.fake.replace(&path, p, &rv)?;
    }
    let out = c.plugin(&["queue"]).await?;
    ensure!(out.status.code() == Some(1), "{}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("service kube-system/berth has no ready pod (selector app=berth): ")
            && err.contains("give its gRPC address with --berth ADDR")
            && err.contains("kubectl port-forward -n kube-system POD 50051"),
        "{err}"
    );
    // docs/cli.md shows the line as printed (the stand-in's Service is
    // deploy/'s: kube-system/berth, selector app=berth).
    let printed = err
        .lines()
        .find(|l| l.starts_with("error: service kube-system/berth has no ready pod"))
        .with_context(|| format!("no error line:\n{err}"))?;
    berth_e2e::page_shows("docs/cli.md", printed)?;
    // And the way it names works.
    let addr = c.berthd.addr.clone();
    let out = c.expect(&["queue", "--berth", &addr], 0).await?;
    ensure!(out.contains("huge"), "{out}");
    Ok(())
}

/// The port the standby's pod names (nothing serves it).
fn standby_port(c: &Cluster) -> Result<u64> {
    let p = c
        .fake
        .get(&format!("{SYSTEM_PODS}/berth-0"))
        .context("the standby's pod")?;
    p["spec"]["containers"][0]["ports"][0]["containerPort"]
        .as_u64()
        .context("its port")
}

/// kubectl finds the plugin on the PATH by its name, as it finds every
/// plugin, and passes the arguments and the exit code through.
#[tokio::test]
async fn kubectl_runs_the_plugin_from_the_path() -> Result<()> {
    // tests/run.sh installs kubectl (for the deploy tests too): a machine
    // without one fails here rather than passing without the PATH lookup.
    let kubectl = kubectl()?;
    let c = start("kubectl").await?;
    let plugin = kubectl_berth_path()?;
    let dir = plugin.parent().context("the plugin's directory")?;
    let out = run(
        &kubectl,
        &["berth", "why", "huge", "--kubeconfig", &c.kubeconfig],
        Some(dir),
    )
    .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.code() == Some(1),
        "{}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(stdout.contains("Now: does not fit."), "{stdout}");
    let list = run(&kubectl, &["plugin", "list"], Some(dir)).await?;
    let text = String::from_utf8_lossy(&list.stdout);
    if !text.contains("kubectl-berth") {
        bail!("kubectl plugin list does not show kubectl-berth: {text}");
    }
    Ok(())
}

/// berthd alone: its embedded cluster, no API server anywhere.
const ALONE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
  - {name: c, resources: {requests: {cpu: "64"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: bound, namespace: shop}
spec:
  nodeName: n1
  containers:
  - {name: c, resources: {requests: {cpu: "1"}}}
"#;

/// A pod without a namespace, for dry-run and simulate.
const SMALL: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: small}\n\
                     spec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}\n";

/// Runs kubectl-berth with no kubeconfig anywhere: KUBECONFIG unset, HOME
/// an empty directory, not in a pod.
async fn alone(home: &Path, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new(kubectl_berth_path()?);
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tokio::time::timeout(GUARD, cmd.output())
        .await
        .with_context(|| format!("kubectl-berth {args:?} hung"))?
        .context("running kubectl-berth")
}

/// [`alone`], which must exit with `code`; its stdout and stderr.
async fn alone_expect(home: &Path, args: &[&str], code: i32) -> Result<(String, String)> {
    let out = alone(home, args).await?;
    let (stdout, stderr) = (
        String::from_utf8(out.stdout)?,
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    ensure!(
        out.status.code() == Some(code),
        "kubectl-berth {args:?}: {} (wanted {code})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    Ok((stdout, stderr))
}

/// Issue 36, item 2: with `--berth ADDR` and no kubeconfig, `why`,
/// `dry-run`, `simulate` and `queue` read what they need from berthd, as
/// berthctl does (the namespace is `-n`, else `default`); errors say what
/// was tried and what to pass.
#[tokio::test]
async fn with_berth_and_no_kubeconfig_it_asks_berthd_alone() -> Result<()> {
    let dir = TempDir::new("kubectl-berth-alone")?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home)?;
    let cluster = dir.write("cluster.yaml", ALONE)?;
    let pod = dir.write("small.yaml", SMALL)?;
    let mut b = Berthd::start(&["--cluster", &cluster]).await?;
    b.wait_idle().await?;
    let addr = b.addr.clone();
    let with = |args: &[&str]| {
        let mut all = vec!["--berth", addr.as_str()];
        all.extend_from_slice(args);
        all.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let expect = async |args: &[&str], code: i32| {
        let args = with(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        alone_expect(&home, &args, code).await
    };

    // why: the pod from berthd's cluster.
    let (out, _) = expect(&["why", "huge"], 1).await?;
    for want in [
        "Pod default/huge, scheduler default-scheduler\n",
        "In berth's queue: unschedulable, 1 attempt\n",
        "Now: does not fit. 0/2 nodes are available: 2 Insufficient cpu.",
    ] {
        ensure!(out.contains(want), "{want:?} in:\n{out}");
    }
    let (out, _) = expect(&["why", "bound", "-n", "shop"], 0).await?;
    ensure!(out.contains("Bound to n1: nothing to explain."), "{out}");
    let (_, err) = expect(&["why", "missing"], 2).await?;
    for want in [
        &format!("pod default/missing, read from berthd at {addr} as no kubeconfig was found"),
        "tried KUBECONFIG (not set), ",
        &format!("{}/.kube/config (absent)", home.display()),
        "--kubeconfig FILE reads it from the API server",
        "NotFound",
    ] {
        ensure!(err.contains(want), "{want:?} in:\n{err}");
    }

    // dry-run and simulate: objects without a namespace get `default`.
    let (out, _) = expect(&["dry-run", "-f", &pod], 0).await?;
    ensure!(out.contains("* selected"), "{out}");
    let (out, _) = expect(&["simulate", "-f", &pod, "--replicas", "3"], 0).await?;
    ensure!(out.contains("3 scheduled, 0 unschedulable"), "{out}");
    let (out, _) = expect(&["dry-run", "-f", &pod, "-o", "json"], 0).await?;
    let v: Value = serde_json::from_str(&out)?;
    ensure!(
        v["selectedNode"]
            .as_str()
            .is_some_and(|n| n.starts_with('n')),
        "{v}"
    );

    // queue: the namespace's, or every one with -A.
    let (out, _) = expect(&["queue"], 0).await?;
    ensure!(out.contains("huge"), "{out}");
    let (out, _) = expect(&["queue", "-n", "shop"], 0).await?;
    ensure!(!out.contains("huge"), "{out}");
    let (out, _) = expect(&["queue", "-A"], 0).await?;
    ensure!(out.contains("huge"), "{out}");

    // Without --berth there is nothing to ask: the error says what was
    // looked at and what to pass.
    let (_, err) = alone_expect(&home, &["why", "huge"], 2).await?;
    ensure!(
        err.contains(&format!(
            "no kubeconfig found (tried KUBECONFIG (not set), {}/.kube/config (absent), the in-cluster service account (KUBERNETES_SERVICE_HOST not set)): give --kubeconfig FILE, or --berth ADDR to ask berthd alone",
            home.display()
        )),
        "{err}"
    );
    let (_, err) = alone_expect(&home, &["queue"], 1).await?;
    ensure!(err.contains("--berth ADDR to ask berthd alone"), "{err}");
    b.stop().await?;
    Ok(())
}
