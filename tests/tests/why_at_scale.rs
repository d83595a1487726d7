//! `why` at a few hundred nodes (issue 36, item 3): the real berthd on an
//! embedded cluster of 300 nodes, asked by the real berthctl. The default
//! answer has a row per reason, not per node, so it fits on a screen at any
//! size: the nodes a PreFilter left out are one row naming the plugin and
//! what it kept, the nodes that pass are counted; `--wide` lists every node.

use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use berth_e2e::{Berthd, TempDir, berthctl_path};
use tokio::process::Command;

const NODES: usize = 300;

/// The node the volume pins `pinned` to.
const PINNED_TO: &str = "n-117";

/// 300 nodes of 4 CPUs; a local PersistentVolume on n-117, bound to the
/// claim `data`; `pinned` (8 CPUs, more than any node has) uses the claim,
/// `small` fits anywhere.
fn cluster() -> String {
    let mut y = String::new();
    for i in 0..NODES {
        y.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n-{i:03}, labels: {{kubernetes.io/hostname: n-{i:03}}}}}\n\
             status:\n  allocatable: {{cpu: \"4\", memory: 16Gi, pods: \"110\"}}\n  conditions: [{{type: Ready, status: \"True\"}}]\n---\n"
        ));
    }
    y.push_str(&format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: local-data}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  local: {{path: /mnt/disks/ssd1}}
  claimRef: {{namespace: default, name: data}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{PINNED_TO}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: default}}
spec:
  storageClassName: ""
  volumeName: local-data
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 5Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: pinned, namespace: default}}
spec:
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]
  containers:
  - {{name: c, resources: {{requests: {{cpu: "8"}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: small, namespace: default}}
spec:
  schedulingGates: [{{name: example.com/hold}}]
  containers:
  - {{name: c, resources: {{requests: {{cpu: 100m}}}}}}
"#
    ));
    y
}

async fn ctl(addr: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(berthctl_path()?)
        .arg("--server")
        .arg(addr)
        .args(args)
        .env_remove("BERTH_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .with_context(|| format!("berthctl {args:?} hung"))?
        .context("running berthctl")
}

/// `why` (exit 1: neither pod would be scheduled now); its stdout.
async fn why(addr: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["why"];
    all.extend_from_slice(args);
    let out = ctl(addr, &all).await?;
    let text = String::from_utf8(out.stdout)?;
    ensure!(
        out.status.code() == Some(1),
        "berthctl {all:?}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(text)
}

/// The cells of the table's rows (columns are separated by 3+ spaces).
fn rows(text: &str, header: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            l.split("   ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn why_fits_on_a_screen_at_300_nodes() -> Result<()> {
    let dir = TempDir::new("why-at-scale")?;
    let cluster = dir.write("cluster.yaml", &cluster())?;
    let mut b = Berthd::start(&["--cluster", &cluster]).await?;
    b.wait_idle().await?;

    // The pinned pod: its node is too small, and VolumeBinding's PreFilter
    // left the other 299 out. Two rows, naming the plugin.
    let text = why(&b.addr, &["pinned"]).await?;
    ensure!(text.lines().count() <= 15, "{text}");
    ensure!(
        text.contains(&format!(
            "Now: does not fit. 0/{NODES} nodes are available: 1 Insufficient cpu, 299 node(s) didn't satisfy plugin(s) [VolumeBinding]."
        )),
        "{text}"
    );
    let table = rows(&text, "NODES");
    ensure!(
        table
            == [
                vec![
                    "1",
                    "unresolvable",
                    "NodeResourcesFit",
                    "Insufficient cpu",
                    PINNED_TO
                ],
                vec![
                    "299",
                    "excluded",
                    "VolumeBinding",
                    "PreFilter kept only n-117 (the node affinity of the pod's bound local PersistentVolumes)",
                    "n-000, n-001, n-002 and 296 more",
                ],
            ],
        "{text}"
    );

    // A pod that fits (held by a gate): the selected node, the other
    // feasible nodes counted, the nodes the search did not reach counted.
    let text = why(&b.addr, &["small"]).await?;
    ensure!(text.lines().count() <= 15, "{text}");
    let table = rows(&text, "NODES");
    ensure!(
        table.len() == 3
            && table[0][..2] == ["1", "feasible (selected)"]
            && table[1][1] == "feasible"
            && table[2][1] == "not evaluated",
        "{text}"
    );
    let counted: usize = table
        .iter()
        .map(|r| r[0].parse::<usize>())
        .sum::<Result<_, _>>()?;
    ensure!(counted == NODES, "{text}");

    // --wide: every node, the excluded ones naming the plugin.
    let text = why(&b.addr, &["pinned", "--wide"]).await?;
    let table = rows(&text, "NODE ");
    ensure!(table.len() == NODES, "{text}");
    let excluded = table
        .iter()
        .filter(|r| {
            r.last().is_some_and(|c| {
                c.starts_with("excluded by VolumeBinding: PreFilter kept only n-117")
            })
        })
        .count();
    ensure!(excluded == NODES - 1, "{text}");
    b.stop().await?;
    Ok(())
}
