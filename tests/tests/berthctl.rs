//! The real `berthctl` binary against a real berthd on a small cluster:
//! every subcommand's table, JSON and YAML output, and its errors.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use berth_e2e::{Berthd, berthctl_path};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Four nodes (n3 tainted, n4 cordoned), three bound pods, one pod too big
/// for any node and one held by a scheduling gate.
///
/// Requested after startup: n1 2 CPU / 1.5Gi (pods a, b), n2 1 CPU / 2Gi
/// (pod c), n3 and n4 nothing.
const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {topology.kubernetes.io/zone: z1}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: n2
  labels: {topology.kubernetes.io/zone: z2}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: n3
  labels: {topology.kubernetes.io/zone: z1}
spec:
  taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
status:
  allocatable: {cpu: "2", memory: 4Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: n4
  labels: {topology.kubernetes.io/zone: z2}
spec:
  unschedulable: true
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default}
spec:
  nodeName: n1
  containers:
  - {name: one, resources: {requests: {cpu: "1", memory: 512Mi}}}
  - {name: two, resources: {requests: {cpu: 500m, memory: 512Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default}
spec:
  nodeName: n1
  containers:
  - {name: c, resources: {requests: {cpu: 500m, memory: 512Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: c, namespace: shop}
spec:
  nodeName: n2
  priority: 100
  containers:
  - {name: c, resources: {requests: {cpu: "1", memory: 2Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: default}
spec:
  containers:
  - {name: c, resources: {requests: {cpu: "16"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default}
spec:
  schedulingGates: [{name: example.com/wait}]
  containers:
  - {name: c}
"#;

/// A pod n1 and n2 fit; n2, the emptier, wins.
const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - {name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}
"#;

/// Three replicas of 1.5 CPU: n2 (3 CPU free), then n1 (2 free, emptier
/// in memory), then n2 again; a fourth fits nowhere.
const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default}
spec:
  replicas: 3
  template:
    spec:
      containers:
      - {name: c, resources: {requests: {cpu: 1500m, memory: 1Gi}}}
"#;

/// How long any one berthctl run may take before the test calls it hung.
const GUARD: Duration = Duration::from_secs(60);

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berthctl-e2e-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn write(&self, name: &str, text: &str) -> Result<String> {
        let p = self.0.join(name);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// berthd on the small cluster, with every pending pod tried once.
async fn start(dir: &TempDir) -> Result<Berthd> {
    let cluster = dir.write("cluster.yaml", CLUSTER)?;
    let mut b = Berthd::start(&["--cluster", &cluster]).await?;
    b.wait_idle().await?;
    Ok(b)
}

/// Runs berthctl against `addr` with `args`, feeding `stdin`.
async fn ctl_with_stdin(addr: &str, args: &[&str], stdin: &str) -> Result<Output> {
    let mut child = Command::new(berthctl_path()?)
        .arg("--server")
        .arg(addr)
        .args(args)
        .env_remove("BERTH_SERVER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting berthctl")?;
    let mut input = child.stdin.take().context("berthctl stdin")?;
    input.write_all(stdin.as_bytes()).await?;
    drop(input);
    tokio::time::timeout(GUARD, child.wait_with_output())
        .await
        .with_context(|| format!("berthctl {args:?} hung"))?
        .context("running berthctl")
}

async fn ctl(addr: &str, args: &[&str]) -> Result<Output> {
    ctl_with_stdin(addr, args, "").await
}

/// Runs berthctl, which must succeed; returns its stdout.
async fn ctl_ok(addr: &str, args: &[&str]) -> Result<String> {
    let out = ctl(addr, args).await?;
    if !out.status.success() {
        bail!(
            "berthctl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Runs berthctl, which must fail with `code`; returns its stderr.
async fn ctl_err(addr: &str, args: &[&str], code: i32) -> Result<String> {
    let out = ctl(addr, args).await?;
    assert_eq!(
        out.status.code(),
        Some(code),
        "berthctl {args:?}: stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8(out.stderr)?)
}

/// The cells of a table line (columns are separated by 3+ spaces).
fn cells(line: &str) -> Vec<&str> {
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The line of a table whose cells include `key` exactly.
fn row<'a>(table: &'a str, key: &str) -> &'a str {
    table
        .lines()
        .find(|l| cells(l).contains(&key))
        .unwrap_or_else(|| panic!("no row {key:?} in\n{table}"))
}

#[tokio::test]
async fn get_tables_show_requests_status_and_kinds() -> Result<()> {
    let dir = TempDir::new("get")?;
    let berthd = start(&dir).await?;
    let addr = berthd.addr.as_str();

    let nodes = ctl_ok(addr, &["get", "nodes"]).await?;
    assert_eq!(
        cells(nodes.lines().next().unwrap_or("")),
        ["NAME", "STATUS", "CPU", "MEMORY", "PODS", "TAINTS", "ZONE"]
    );
    assert_eq!(
        cells(row(&nodes, "n1")),
        [
            "n1",
            "Ready",
            "2/4 (50%)",
            "1.5Gi/8Gi (18%)",
            "2/10",
            "<none>",
            "z1"
        ]
    );
    assert_eq!(
        cells(row(&nodes, "n2")),
        [
            "n2",
            "Ready",
            "1/4 (25%)",
            "2Gi/8Gi (25%)",
            "1/10",
            "<none>",
            "z2"
        ]
    );
    assert_eq!(
        cells(row(&nodes, "n3")),
        [
            "n3",
            "Ready",
            "0/2 (0%)",
            "0/4Gi (0%)",
            "0/10",
            "dedicated=gpu:NoSchedule",
            "z1"
        ]
    );
    assert_eq!(
        cells(row(&nodes, "n4")),
        [
            "n4",
            "Ready,SchedulingDisabled",
            "0/8 (0%)",
            "0/16Gi (0%)",
            "0/10",
            "<none>",
            "z2"
        ]
    );
    // Aliases and a single node.
    let one = ctl_ok(addr, &["get", "no", "n2"]).await?;
    assert_eq!(one.lines().count(), 2, "{one}");
    assert_eq!(cells(row(&one, "n2"))[2], "1/4 (25%)");

    let pods = ctl_ok(addr, &["get", "po"]).await?;
    assert_eq!(
        cells(pods.lines().next().unwrap_or("")),
        ["NAMESPACE", "NAME", "NODE", "STATUS", "PRIORITY"]
    );
    assert_eq!(
        cells(row(&pods, "a")),
        ["default", "a", "n1", "Scheduled", "0"]
    );
    assert_eq!(
        cells(row(&pods, "c")),
        ["shop", "c", "n2", "Scheduled", "100"]
    );
    assert_eq!(
        cells(row(&pods, "big")),
        ["default", "big", "<none>", "Unschedulable", "0"]
    );
    assert_eq!(
        cells(row(&pods, "gated")),
        ["default", "gated", "<none>", "SchedulingGated", "0"]
    );
    let shop = ctl_ok(addr, &["get", "pods", "-n", "shop"]).await?;
    assert_eq!(shop.lines().count(), 2, "{shop}");

    // Kinds the server stores beyond nodes and pods.
    ctl_ok(
        addr,
        &["apply", "-f", &dir.write("pvc.yaml", "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: shop}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n")?],
    )
    .await?;
    let pvcs = ctl_ok(addr, &["get", "pvc"]).await?;
    assert_eq!(pvcs, "NAMESPACE   NAME\nshop        data\n");

    let e = ctl_err(addr, &["get", "widgets"], 1).await?;
    assert!(
        e.starts_with("error: InvalidArgument: kind: unsupported kind \"widgets\""),
        "{e}"
    );
    let e = ctl_err(addr, &["get", "pod", "nope"], 1).await?;
    assert_eq!(e, "error: NotFound: pod \"nope\" not found\n");
    Ok(())
}

#[tokio::test]
async fn dry_run_explains_the_choice_as_a_matrix() -> Result<()> {
    let dir = TempDir::new("dry-run")?;
    let berthd = start(&dir).await?;
    let addr = berthd.addr.as_str();
    let web = dir.write("web.yaml", WEB)?;

    let text = ctl_ok(addr, &["dry-run", "-f", &web]).await?;
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("Pod default/web, profile default-scheduler: Successfully assigned default/web to n2")
    );
    assert_eq!(lines.next(), Some("4 nodes, 4 evaluated, 2 feasible."));
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("NODE"))
        .context("matrix header")?;
    let columns = cells(header);
    for c in ["NODE", "NRF", "TT", "TOTAL", "FILTER"] {
        assert!(columns.contains(&c), "{c} in {header}");
    }
    assert!(text.contains("NRF=NodeResourcesFit"), "legend:\n{text}");
    // The selected node comes first and is marked; n1 follows, feasible.
    let matrix: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("NODE"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(matrix.len(), 4, "{text}");
    let first = cells(matrix[0]);
    assert_eq!(&first[..2], ["*", "n2"], "{text}");
    assert_eq!(first.last(), Some(&"ok"));
    let second = cells(matrix[1]);
    assert_eq!(second[0], "n1", "{text}");
    assert_eq!(second.last(), Some(&"ok"));
    let total = |cells: &[&str]| -> i64 { cells[cells.len() - 2].parse().unwrap_or(-1) };
    assert!(total(&first) > total(&second), "{text}");
    // The rejected nodes say which plugin rejected them and why.
    assert!(
        row(&text, "n3").ends_with("-   TaintToleration: node(s) had untolerated taint(s)"),
        "{text}"
    );
    assert!(
        row(&text, "n4").ends_with("-   NodeUnschedulable: node(s) were unschedulable"),
        "{text}"
    );

    // A pod nothing fits: no selection, preemption cannot help.
    let huge = dir.write(
        "huge.yaml",
        "kind: Pod\nmetadata: {name: huge}\nspec: {containers: [{name: c, resources: {requests: {cpu: '64'}}}]}\n",
    )?;
    let text = ctl_ok(addr, &["dry-run", "-f", &huge, "--all-nodes"]).await?;
    assert!(
        text.starts_with("Pod default/huge, profile default-scheduler: 0/4 nodes are available:"),
        "{text}"
    );
    assert!(!text.contains("\n*"), "nothing selected:\n{text}");
    assert!(
        row(&text, "n1").ends_with("NodeResourcesFit: Insufficient cpu"),
        "{text}"
    );
    assert!(text.contains("\nPreemption would not help: "), "{text}");
    Ok(())
}

/// Three nodes: n1 publishes two A100s, n2 one T4, n3 nothing; a class for
/// them, templates asking for an A100 pair and for three GPUs, and a pod
/// already holding n2's T4 through a claim.
const DRA_CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: n3}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpus}
spec:
  nodeName: n1
  driver: gpu.example.com
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-0, attributes: {model: {string: a100}}}
  - {name: gpu-1, attributes: {model: {string: a100}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-gpus}
spec:
  nodeName: n2
  driver: gpu.example.com
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-0, attributes: {model: {string: t4}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: a100-pair, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu
          count: 2
          selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "a100"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: three, namespace: default}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: gpu, count: 3}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: t4, namespace: default}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu}}
---
apiVersion: v1
kind: Pod
metadata: {name: holder, namespace: default}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n2]}]}]
  containers: [{name: c}]
  resourceClaims: [{name: gpu, resourceClaimName: t4}]
"#;

#[tokio::test]
async fn dry_run_names_claim_requests_that_fail_and_devices_it_would_get() -> Result<()> {
    let dir = TempDir::new("dry-run-dra")?;
    let cluster = dir.write("cluster.yaml", DRA_CLUSTER)?;
    let mut berthd = Berthd::start(&["--cluster", &cluster]).await?;
    berthd.wait_idle().await?;
    let addr = berthd.addr.as_str();
    let pod = |name: &str, template: &str| {
        format!(
            "kind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c}}]\n  \
             resourceClaims: [{{name: gpus, resourceClaimTemplateName: {template}}}]\n"
        )
    };

    // The claim the controller would make from the template is imagined:
    // n1's two A100s.
    let pair = dir.write("pair.yaml", &pod("pair", "a100-pair"))?;
    let text = ctl_ok(addr, &["dry-run", "-f", &pair]).await?;
    assert!(
        text.starts_with(
            "Pod default/pair, profile default-scheduler: Successfully assigned default/pair to n1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "\nDevices the pod's claims would get on n1:\n  \
             claim default/pair-gpus-?????, request gpus: gpu.example.com/n1/gpu-0\n  \
             claim default/pair-gpus-?????, request gpus: gpu.example.com/n1/gpu-1\n"
        ),
        "{text}"
    );

    // Three GPUs: no node has them; each says which request fails and why.
    let three = dir.write("three.yaml", &pod("three", "three"))?;
    let text = ctl_ok(addr, &["dry-run", "-f", &three]).await?;
    assert!(
        text.starts_with(
            "Pod default/three, profile default-scheduler: 0/3 nodes are available: \
             3 cannot allocate all claims. still not schedulable, preemption: "
        ),
        "{text}"
    );
    let why = text
        .split("\nWhy nodes cannot give the pod what it asks for:\n")
        .nth(1)
        .context("no explanation")?;
    for expected in [
        "  n1:\n    DynamicResources: claim default/three-gpus-?????, request gpus: needs 3 device(s); \
         2 in the node's resource pools, 2 of class gpu, 2 not allocated\n",
        "  n2:\n    DynamicResources: claim default/three-gpus-?????, request gpus: needs 3 device(s); \
         1 in the node's resource pools, 1 of class gpu, 0 not allocated\n",
        "  n3:\n    DynamicResources: no ResourceSlice publishes devices for this node\n",
    ] {
        assert!(why.contains(expected), "{expected:?} in\n{text}");
    }
    // The same in JSON.
    let v: Value =
        serde_json::from_str(&ctl_ok(addr, &["dry-run", "-f", &three, "-o", "json"]).await?)?;
    let n2 = v["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == "n2"))
        .context("n2")?;
    assert_eq!(
        n2["unsatisfied"],
        serde_json::json!([{"plugin": "DynamicResources", "claim": "default/three-gpus-?????",
            "request": "gpus", "reason": "needs 3 device(s); 1 in the node's resource pools, 1 of class gpu, 0 not allocated"}])
    );

    // Nothing was made or allocated by the dry runs; the holder's claim is.
    let claims = ctl_ok(addr, &["get", "resourceclaims"]).await?;
    assert_eq!(claims.lines().count(), 2, "{claims}");
    assert_eq!(
        cells(row(&claims, "t4")),
        ["default", "t4", "allocated,reserved", "n2", "n2/gpu-0"]
    );
    let slices = ctl_ok(addr, &["get", "resourceslices"]).await?;
    assert_eq!(
        cells(row(&slices, "n1-gpus")),
        ["n1-gpus", "n1", "gpu.example.com", "n1", "2"]
    );
    Ok(())
}

#[tokio::test]
async fn json_and_yaml_are_canonical_proto3_and_kubernetes_objects() -> Result<()> {
    let dir = TempDir::new("json")?;
    let berthd = start(&dir).await?;
    let addr = berthd.addr.as_str();
    let web = dir.write("web.yaml", WEB)?;

    let v: Value =
        serde_json::from_str(&ctl_ok(addr, &["dry-run", "-f", &web, "-o", "json"]).await?)?;
    assert_eq!(v["selectedNode"], "n2");
    assert_eq!(v["profile"], "default-scheduler");
    assert_eq!(v["evaluatedNodes"], 4);
    assert_eq!(v["feasibleNodes"], 2);
    let node = |name: &str| {
        v["nodes"]
            .as_array()
            .and_then(|ns| ns.iter().find(|n| n["node"] == name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(node("n2")["verdict"], "NODE_VERDICT_FEASIBLE");
    assert_eq!(node("n2")["selected"], true);
    assert_eq!(node("n1")["verdict"], "NODE_VERDICT_FEASIBLE");
    assert_eq!(node("n1")["selected"], Value::Null, "false is left out");
    assert_eq!(node("n3")["verdict"], "NODE_VERDICT_UNRESOLVABLE");
    assert!(
        node("n3")["filters"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f["plugin"] == "TaintToleration"
                && f["code"] == "UnschedulableAndUnresolvable"
                && f["reasons"][0] == "node(s) had untolerated taint(s)")),
        "{}",
        node("n3")
    );
    assert_eq!(node("n4")["verdict"], "NODE_VERDICT_UNRESOLVABLE");
    // int64 fields are strings in proto3 JSON.
    let n2_total: i64 = node("n2")["totalScore"].as_str().unwrap_or("").parse()?;
    let n1_total: i64 = node("n1")["totalScore"].as_str().unwrap_or("").parse()?;
    assert!(n2_total > n1_total, "{n2_total} > {n1_total}");
    let fit = node("n2")["scores"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["plugin"] == "NodeResourcesFit"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(fit["weight"], "1", "{fit}");

    let y: Value =
        serde_yaml::from_str(&ctl_ok(addr, &["dry-run", "-f", &web, "-o", "yaml"]).await?)?;
    assert_eq!(y["selectedNode"], "n2");
    assert_eq!(y["nodes"].as_array().map(Vec::len), Some(4));

    let q: Value = serde_json::from_str(&ctl_ok(addr, &["queue", "-o", "json"]).await?)?;
    let big = q["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "big"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(big["queue"], "QUEUE_NAME_UNSCHEDULABLE", "{q}");
    assert_eq!(big["attempts"], 1);
    assert_eq!(big["unschedulablePlugins"][0], "NodeResourcesFit", "{big}");

    let deployment = dir.write("deploy.yaml", DEPLOYMENT)?;
    let s: Value =
        serde_json::from_str(&ctl_ok(addr, &["simulate", "-f", &deployment, "-o", "json"]).await?)?;
    assert_eq!(s["scheduled"], 3);
    assert_eq!(s["unschedulable"], Value::Null, "zero is left out");
    assert_eq!(s["pods"][0]["name"], "api-0");
    assert_eq!(s["pods"][0]["node"], "n2");

    // Objects are Kubernetes JSON: a List, or the object itself.
    let list: Value = serde_json::from_str(&ctl_ok(addr, &["get", "nodes", "-o", "json"]).await?)?;
    assert_eq!(list["kind"], "List");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .map(|i| {
            i.iter()
                .filter_map(|n| n["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    let n3: Value =
        serde_yaml::from_str(&ctl_ok(addr, &["get", "node", "n3", "-o", "yaml"]).await?)?;
    assert_eq!(n3["kind"], "Node");
    assert_eq!(n3["spec"]["taints"][0]["key"], "dedicated");
    Ok(())
}

#[tokio::test]
async fn simulate_and_queue_tables() -> Result<()> {
    let dir = TempDir::new("simulate")?;
    let berthd = start(&dir).await?;
    let addr = berthd.addr.as_str();
    let deployment = dir.write("deploy.yaml", DEPLOYMENT)?;

    let text = ctl_ok(addr, &["simulate", "-f", &deployment, "--replicas", "4"]).await?;
    assert_eq!(cells(row(&text, "api-0")), ["default", "api-0", "n2"]);
    assert_eq!(cells(row(&text, "api-1")), ["default", "api-1", "n1"]);
    assert_eq!(cells(row(&text, "api-2")), ["default", "api-2", "n2"]);
    let api3 = cells(row(&text, "api-3"));
    assert_eq!(&api3[..3], ["default", "api-3", "<none>"]);
    assert!(
        api3[3].starts_with("0/4 nodes are available:") && api3[3].contains("Insufficient cpu"),
        "{text}"
    );
    assert!(text.contains("\n3 scheduled, 1 unschedulable\n"), "{text}");
    let after = text
        .split("After the simulation:\n")
        .nth(1)
        .context("utilisation table")?;
    assert_eq!(
        cells(row(after, "n2")),
        ["n2", "2", "100% (4/4)", "50% (4Gi/8Gi)", "3/10"]
    );
    assert_eq!(
        cells(row(after, "n1")),
        ["n1", "1", "87% (3.5/4)", "31% (2.5Gi/8Gi)", "3/10"]
    );
    assert_eq!(
        after.lines().count(),
        3,
        "only nodes that took pods:\n{after}"
    );

    // The simulation changed nothing.
    let nodes = ctl_ok(addr, &["get", "nodes"]).await?;
    assert_eq!(cells(row(&nodes, "n2"))[2], "1/4 (25%)");

    let queue = ctl_ok(addr, &["queue"]).await?;
    let big = cells(row(&queue, "big"));
    assert_eq!(
        &big[..5],
        ["default", "big", "unschedulable", "0", "1"],
        "{queue}"
    );
    // (A BACKOFF-UNTIL time may come next, while the backoff lasts.)
    let reason = big.last().copied().unwrap_or("");
    assert!(
        reason.starts_with("0/4 nodes are available:") && reason.contains("2 Insufficient cpu"),
        "{queue}"
    );
    let gated = cells(row(&queue, "gated"));
    assert_eq!(gated[2], "gated");
    assert_eq!(
        gated.last(),
        Some(&"waiting for scheduling gates: [example.com/wait]")
    );
    let only_shop = ctl(addr, &["queue", "-n", "shop"]).await?;
    assert!(only_shop.status.success());
    assert_eq!(String::from_utf8(only_shop.stdout)?, "");
    Ok(())
}

/// `why` reads the pod from berthd's cluster and answers with its exit
/// code: 1 for a pod that fits nowhere (with the plugin that rejects each
/// node) or waits for a gate, 0 for a bound one, 2 for errors.
#[tokio::test]
async fn why_explains_a_pod_of_the_embedded_cluster() -> Result<()> {
    let dir = TempDir::new("why")?;
    let b = start(&dir).await?;
    let out = ctl(&b.addr, &["why", "big"]).await?;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout)?;
    assert!(
        text.starts_with("Pod default/big, scheduler default-scheduler\n"),
        "{text}"
    );
    assert!(
        text.contains("In berth's queue: unschedulable, 1 attempt\n"),
        "{text}"
    );
    assert!(
        text.contains("Now: does not fit. 0/4 nodes are available:"),
        "{text}"
    );
    // One row per reason, with how many nodes share it and which: the
    // cordoned node is rejected by NodeUnschedulable, the tainted one by
    // TaintToleration, the others by NodeResourcesFit.
    assert_eq!(
        cells(row(&text, "n4")),
        [
            "1",
            "unresolvable",
            "NodeUnschedulable",
            "node(s) were unschedulable",
            "n4"
        ],
        "{text}"
    );
    assert_eq!(
        cells(row(&text, "n1, n2")),
        [
            "2",
            "unresolvable",
            "NodeResourcesFit",
            "Insufficient cpu",
            "n1, n2"
        ],
        "{text}"
    );

    let out = ctl(&b.addr, &["why", "gated"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stdout)?.contains("Waiting for scheduling gates: [example.com/wait]")
    );

    let out = ctl_ok(&b.addr, &["why", "a"]).await?;
    assert!(out.contains("Bound to n1: nothing to explain."), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&ctl_ok(&b.addr, &["why", "c", "-n", "shop", "-o", "json"]).await?)?;
    assert_eq!(json["fits"], true);
    assert_eq!(json["pod"]["nodeName"], "n2");

    let err = ctl_err(&b.addr, &["why", "nope"], 2).await?;
    assert!(err.contains("NotFound"), "{err}");
    b.stop().await?;
    Ok(())
}

#[tokio::test]
async fn apply_and_delete_round_trip() -> Result<()> {
    let dir = TempDir::new("apply")?;
    let berthd = start(&dir).await?;
    let addr = berthd.addr.as_str();
    let file = dir.write(
        "objects.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\nkind: List\napiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: extra, namespace: team}\n  spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}\n",
    )?;

    assert_eq!(
        ctl_ok(addr, &["apply", "-f", &file]).await?,
        "namespace/team created\npod/team/extra created\n"
    );
    // The same objects again: kubectl's "unchanged"; a change: "configured".
    assert_eq!(
        ctl_ok(addr, &["apply", "-f", &file]).await?,
        "namespace/team unchanged\npod/team/extra unchanged\n"
    );
    let changed = dir.write(
        "changed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: team, labels: {v: '2'}}\nspec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}\n",
    )?;
    assert_eq!(
        ctl_ok(addr, &["apply", "-f", &changed]).await?,
        "pod/team/extra configured\n"
    );
    let pods = ctl_ok(addr, &["get", "pods", "-n", "team"]).await?;
    assert_eq!(cells(row(&pods, "extra"))[..2], ["team", "extra"]);
    // The API server's own namespaces are there too.
    assert_eq!(
        ctl_ok(addr, &["get", "ns"]).await?,
        "NAME\ndefault\nkube-node-lease\nkube-public\nkube-system\nshop\nteam\n"
    );
    // A pod in a namespace that does not exist is refused, as the API
    // server refuses it.
    let orphan = dir.write(
        "orphan.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lost, namespace: nowhere}\nspec: {containers: [{name: c}]}\n",
    )?;
    let e = ctl_err(addr, &["apply", "-f", &orphan], 1).await?;
    assert_eq!(
        e,
        format!(
            "error: NotFound: {orphan}: document 1: metadata.namespace: namespaces \"nowhere\" not found\n"
        )
    );

    // JSON from stdin; the answer as proto3 JSON.
    let out = ctl_with_stdin(
        addr,
        &["apply", "-f", "-", "-o", "json"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-stdin"}, "spec": {"containers": [{"name": "c"}]}}"#,
    )
    .await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        v,
        serde_json::json!({"applied": [{"kind": "Pod", "namespace": "default", "name": "from-stdin", "action": "APPLY_ACTION_CREATED"}]})
    );

    assert_eq!(
        ctl_ok(addr, &["delete", "pod", "from-stdin"]).await?,
        "pod/default/from-stdin deleted\n"
    );
    let e = ctl_err(addr, &["get", "pod", "from-stdin"], 1).await?;
    assert_eq!(e, "error: NotFound: pod \"from-stdin\" not found\n");

    assert_eq!(
        ctl_ok(addr, &["delete", "-f", &file]).await?,
        "namespace/team deleted\npod/team/extra deleted\n"
    );
    assert_eq!(ctl_ok(addr, &["get", "pods", "-n", "team"]).await?, "");
    // Deleting again: each failure named, exit 1; unless not-found is fine.
    let e = ctl_err(addr, &["delete", "-f", &file], 1).await?;
    assert!(
        e.contains(&format!(
            "error: {file}: document 2, items[0]: NotFound: pod \"extra\" not found\n"
        )),
        "{e}"
    );
    assert!(e.ends_with("error: 2 of 2 objects not deleted\n"), "{e}");
    assert_eq!(
        ctl_ok(addr, &["delete", "-f", &file, "--ignore-not-found"]).await?,
        ""
    );
    Ok(())
}

#[tokio::test]
async fn errors_name_the_server_the_file_and_the_field() -> Result<()> {
    // Nobody listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let e = ctl_err(&addr, &["get", "nodes"], 1).await?;
    assert!(
        e.starts_with(&format!(
            "error: cannot connect to berthd at http://{addr}: "
        )),
        "{e}"
    );
    assert!(e.contains("Connection refused"), "{e}");

    // Files are read before connecting.
    let e = ctl_err(&addr, &["apply", "-f", "/nonexistent/pod.yaml"], 1).await?;
    assert!(
        e.starts_with("error: reading /nonexistent/pod.yaml: No such file or directory"),
        "{e}"
    );
    let dir = TempDir::new("errors")?;
    let bad = dir.write(
        "bad.yaml",
        "kind: Pod\nmetadata: {name: a}\n---\nkind: [unclosed\n",
    )?;
    let e = ctl_err(&addr, &["dry-run", "-f", &bad], 1).await?;
    assert!(e.starts_with(&format!("error: {bad}: document 2: ")), "{e}");
    let e = ctl_err(&addr, &["simulate", "-f", &bad], 1).await?;
    assert!(e.starts_with(&format!("error: {bad}: document 2: ")), "{e}");

    // Usage errors exit 2.
    let e = ctl_err(&addr, &["delete", "pod"], 2).await?;
    assert!(e.contains("<NAME>"), "{e}");
    ctl_err(&addr, &["get", "nodes", "-o", "xml"], 2).await?;

    // The server's refusals name the file, document and field.
    let berthd = start(&dir).await?;
    let qty = dir.write(
        "qty.yaml",
        "kind: Namespace\napiVersion: v1\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
    )?;
    let e = ctl_err(&berthd.addr, &["apply", "-f", &qty], 1).await?;
    assert!(
        e.starts_with(&format!(
            "error: InvalidArgument: {qty}: document 2: spec.containers[0].resources.requests.cpu: quantities must match"
        )),
        "{e}"
    );
    let e = ctl_err(&berthd.addr, &["get", "ns", "ok"], 1).await?;
    assert_eq!(
        e, "error: NotFound: namespace \"ok\" not found\n",
        "nothing applied"
    );
    let e = ctl_err(&berthd.addr, &["dry-run", "-f", &qty], 1).await?;
    assert_eq!(
        e,
        format!(
            "error: {qty}: expected exactly one pod (or a PodGroup and its pods), found 2 objects\n"
        )
    );
    let e = ctl_err(
        &berthd.addr,
        &[
            "dry-run",
            "-f",
            &dir.write("p.yaml", WEB)?,
            "--profile",
            "nope",
        ],
        1,
    )
    .await?;
    assert!(e.starts_with("error: NotFound: profile: "), "{e}");
    Ok(())
}

/// Reads lines from `lines` until one satisfies `pred`.
async fn read_until<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> Result<String> {
    let read = async {
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await? {
            if pred(&line) {
                return Ok(line);
            }
            seen.push(line);
        }
        bail!("berthctl ended before {what}; it printed {seen:#?}")
    };
    tokio::time::timeout(GUARD, read)
        .await
        .with_context(|| format!("no {what} within {GUARD:?}"))?
}

/// Starts `berthctl watch ARGS` and waits until it says it is watching.
async fn watch(
    addr: &str,
    args: &[&str],
) -> Result<(
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
)> {
    let mut child = Command::new(berthctl_path()?)
        .args(["--server", addr, "watch"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut errs = BufReader::new(stderr).lines();
    read_until(&mut errs, "the watching notice", |l| {
        l.starts_with("Watching ")
    })
    .await?;
    let stdout = child.stdout.take().context("stdout")?;
    Ok((child, BufReader::new(stdout).lines()))
}

#[tokio::test]
async fn watch_streams_scheduling_events_and_object_changes() -> Result<()> {
    let dir = TempDir::new("watch")?;
    let berthd = start(&dir).await?;
    let mut client = berthd.client().await?;

    let (mut events, mut event_lines) = watch(&berthd.addr, &[]).await?;
    let (mut changes, mut change_lines) =
        watch(&berthd.addr, &["--kind", "pods", "-n", "default"]).await?;
    client
        .apply(&[], "apiVersion: v1\nkind: Pod\nmetadata: {name: watched}\nspec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}\n")
        .await?;

    let line = read_until(&mut event_lines, "the scheduled event", |l| {
        l.contains("default/watched")
    })
    .await?;
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts[1..], ["SCHEDULED", "default/watched", "n2"], "{line}");
    assert_eq!(parts[0].len(), "00:00:00.000".len(), "{line}");

    // The object watch lists what exists first, then follows changes.
    read_until(&mut change_lines, "pod a", |l| {
        l.ends_with("ADDED     pod/default/a  node n1")
    })
    .await?;
    read_until(&mut change_lines, "the added pod", |l| {
        l.ends_with("ADDED     pod/default/watched")
    })
    .await?;
    read_until(&mut change_lines, "the binding", |l| {
        l.ends_with("MODIFIED  pod/default/watched  node n2")
    })
    .await?;
    events.kill().await?;
    changes.kill().await?;

    // JSON lines: one canonical proto3 object per event.
    let (mut events, mut event_lines) = watch(&berthd.addr, &["-o", "json"]).await?;
    client.delete("pod", "default", "watched").await?;
    // Freed room lets nothing new in (big needs 16 CPUs); apply one more.
    client
        .apply(&[], "apiVersion: v1\nkind: Pod\nmetadata: {name: second}\nspec: {containers: [{name: c}]}\n")
        .await?;
    let line = read_until(&mut event_lines, "the second pod's event", |l| {
        l.contains("\"second\"")
    })
    .await?;
    let v: Value = serde_json::from_str(&line)?;
    assert_eq!(v["type"], "EVENT_TYPE_SCHEDULED", "{v}");
    assert_eq!(v["pod"]["namespace"], "default");
    assert!(
        v["node"]
            .as_str()
            .is_some_and(|n| ["n1", "n2"].contains(&n)),
        "{v}"
    );
    assert!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
    events.kill().await?;
    Ok(())
}

/// Issue 34 item 5: every kind Apply takes can be got (`KIND NAME` and
/// kubectl's `KIND/NAME`) and deleted with berthctl, is named in the
/// server's error for a kind it does not know and in docs/api.md, and a
/// value of the wrong type is refused naming its field, whatever the kind.
#[tokio::test]
async fn every_kind_apply_takes_can_be_got_and_deleted() -> Result<()> {
    let dir = TempDir::new("every-kind")?;
    let empty = dir.write("empty.yaml", "apiVersion: v1\nkind: List\nitems: []\n")?;
    let b = Berthd::start(&[
        "--cluster",
        &empty,
        "--feature-gates",
        "GenericWorkload=true",
    ])
    .await?;
    let addr = b.addr.clone();
    let fixture = berth_e2e::workspace_root().join("tests/fixtures/every-kind.yaml");
    let text = std::fs::read_to_string(&fixture)?;
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).map_err(anyhow::Error::from))
        .collect::<Result<_>>()?;
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    let every: Vec<&str> = ["Node", "Pod"]
        .into_iter()
        .chain(
            berth_server::cache::ObjectKind::ALL
                .iter()
                .map(|k| k.type_meta().1),
        )
        .collect();
    for k in &every {
        assert!(kinds.contains(k), "the fixture lacks a {k}");
    }
    ctl_ok(&addr, &["apply", "-f", &fixture.display().to_string()]).await?;

    let api_md = std::fs::read_to_string(berth_e2e::workspace_root().join("docs/api.md"))?;
    let listed = api_md
        .split("## berth.v1.Cluster")
        .nth(1)
        .and_then(|t| t.split("### Apply").next())
        .context("docs/api.md has no kinds paragraph under berth.v1.Cluster")?;
    let unknown = ctl_err(&addr, &["get", "gizmos"], 1).await?;
    for k in &every {
        assert!(listed.contains(k), "docs/api.md does not list {k}");
        assert!(
            unknown.contains(&format!(" {k}")),
            "the server's error omits {k}: {unknown}"
        );
    }

    for o in &objects {
        let kind = o["kind"].as_str().unwrap_or_default().to_lowercase();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let got: Value =
            serde_json::from_str(&ctl_ok(&addr, &["get", &kind, name, "-o", "json"]).await?)?;
        assert_eq!(got["metadata"]["name"], name, "{kind} {name}");
        let table = ctl_ok(&addr, &["get", &format!("{kind}/{name}")]).await?;
        assert!(table.contains(name), "get {kind}/{name}: {table}");

        // A wrong type anywhere is refused naming the field.
        let mut bad = o.clone();
        bad["metadata"]["labels"] = serde_json::json!(5);
        let file = dir.write(&format!("bad-{kind}.json"), &bad.to_string())?;
        let err = ctl_err(&addr, &["apply", "-f", &file], 1).await?;
        assert!(
            err.contains("document 1: metadata.labels: invalid type: integer `5`, expected a map"),
            "{kind}: {err}"
        );
    }
    // A malformed KIND/NAME is a usage error (exit 2), before any call.
    let e = ctl_err(&addr, &["get", "podgroup/"], 2).await?;
    assert!(e.contains("\"podgroup/\": expected KIND/NAME"), "{e}");
    let e = ctl_err(&addr, &["delete", "podgroup/a", "b"], 2).await?;
    assert!(e.contains("not both"), "{e}");

    // The issue's case: a PodGroup's minCount given as a word.
    let mut four = objects
        .iter()
        .find(|o| o["kind"] == "PodGroup")
        .context("no PodGroup")?
        .clone();
    four["spec"]["schedulingPolicy"]["gang"]["minCount"] = "four".into();
    let file = dir.write("four.json", &four.to_string())?;
    let err = ctl_err(&addr, &["apply", "-f", &file], 1).await?;
    assert!(
        err.contains(
            "document 1: spec.schedulingPolicy.gang.minCount: invalid type: string \"four\", expected i32"
        ),
        "{err}"
    );

    for o in objects.iter().rev() {
        let kind = o["kind"].as_str().unwrap_or_default().to_lowercase();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        ctl_ok(&addr, &["delete", &format!("{kind}/{name}")]).await?;
        let err = ctl_err(&addr, &["get", &kind, name], 1).await?;
        assert!(err.contains("NotFound"), "{kind} {name} still there: {err}");
    }
    Ok(())
}
