//! What the extender e2e tests share: berthd with extenders connected,
//! pod objects, and the reading of extenders' request lines.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use berth_client::Client;
use berth_client::pb::EventType;
use berth_e2e::{Berthd, Events, Extender, message};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Setup

/// berthd with the extenders of a test connected, a client, and the events
/// from before the first pod was applied.
pub struct Setup {
    pub berthd: Berthd,
    pub client: Client,
    pub events: Events,
    pub dir: PathBuf,
}

/// Starts berthd on `cluster` (YAML) with `config` (YAML) and waits until
/// every extender in `connected` has completed its handshake.
pub async fn start(test: &str, cluster: &str, config: &str, connected: &[&str]) -> Result<Setup> {
    let dir = std::env::temp_dir().join(format!("berth-extenders-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cluster_file = dir.join("cluster.yaml");
    let config_file = dir.join("config.yaml");
    std::fs::write(&cluster_file, cluster)?;
    std::fs::write(&config_file, config)?;
    let mut berthd = Berthd::start(&[
        "--seed",
        "1",
        "--cluster",
        &cluster_file.display().to_string(),
        "--config",
        &config_file.display().to_string(),
    ])
    .await?;
    wait_connected(&mut berthd, connected).await?;
    let mut client = berthd.client().await?;
    let events = Events::watch(&mut client).await?;
    Ok(Setup {
        berthd,
        client,
        events,
        dir,
    })
}

impl Setup {
    /// Applies `pods`, with the namespaces they live in first (the API
    /// server, and so berthd, refuses a pod whose namespace does not
    /// exist).
    pub async fn apply(&mut self, pods: &[Value]) -> Result<()> {
        let mut objects: Vec<Value> = Vec::new();
        let mut seen = BTreeSet::new();
        for p in pods {
            if let Some(ns) = p["metadata"]["namespace"].as_str()
                && seen.insert(ns.to_string())
            {
                objects.push(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                );
            }
        }
        objects.extend(pods.iter().cloned());
        self.client.apply(&objects, "").await?;
        Ok(())
    }

    pub async fn pod(&mut self, ns: &str, name: &str) -> Result<Value> {
        Ok(self.client.get("Pod", ns, name).await?)
    }

    pub async fn uid(&mut self, ns: &str, name: &str) -> Result<String> {
        let p = self.pod(ns, name).await?;
        Ok(p["metadata"]["uid"].as_str().context("uid")?.to_string())
    }

    /// Waits for the pod's Scheduled event and returns its node.
    pub async fn bound(&mut self, ns: &str, name: &str) -> Result<String> {
        self.events
            .wait_count(EventType::Scheduled, ns, name, 1)
            .await?;
        let node = self.pod(ns, name).await?["spec"]["nodeName"]
            .as_str()
            .with_context(|| format!("{ns}/{name} has a Scheduled event but no nodeName"))?
            .to_string();
        Ok(node)
    }

    /// Waits for `n` FailedScheduling events of the pod and returns the last
    /// one's message.
    pub async fn failed(&mut self, ns: &str, name: &str, n: usize) -> Result<String> {
        self.events
            .wait_count(EventType::Failed, ns, name, n)
            .await?;
        let all = self.events.of(EventType::Failed, ns, name);
        Ok(all.last().map(|e| e.message.clone()).unwrap_or_default())
    }

    /// The PodScheduled=False condition's (reason, message) of a pod.
    pub async fn condition(&mut self, ns: &str, name: &str) -> Result<(String, String)> {
        let p = self.pod(ns, name).await?;
        let c = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"))
            .with_context(|| format!("{ns}/{name} has no PodScheduled condition: {p}"))?;
        ensure!(c["status"] == "False", "{ns}/{name}: {c}");
        Ok((
            c["reason"].as_str().unwrap_or_default().to_string(),
            c["message"].as_str().unwrap_or_default().to_string(),
        ))
    }

    /// No pod lost, none bound twice: every pod is bound with exactly one
    /// Scheduled event (naming its node), or unbound, in the queue and with
    /// none. Returns each pod's node.
    pub async fn accounting(
        &mut self,
        pods: &[(&str, &str)],
    ) -> Result<BTreeMap<String, Option<String>>> {
        let queue = self.client.get_queue("").await?;
        let mut out = BTreeMap::new();
        for &(ns, name) in pods {
            let key = format!("{ns}/{name}");
            let p = self.pod(ns, name).await?;
            let node = p["spec"]["nodeName"].as_str().map(str::to_string);
            match &node {
                Some(node) => {
                    self.events
                        .wait_count(EventType::Scheduled, ns, name, 1)
                        .await?;
                    let scheduled = self.events.of(EventType::Scheduled, ns, name);
                    ensure!(
                        scheduled.len() == 1,
                        "{key} was bound {} times: {scheduled:?}",
                        scheduled.len()
                    );
                    ensure!(scheduled[0].node == *node, "{key}: {scheduled:?} vs {node}");
                    ensure!(
                        !queue.iter().any(|q| q.namespace == ns && q.name == name),
                        "{key} is bound to {node} and still queued"
                    );
                }
                None => {
                    let scheduled = self.events.of(EventType::Scheduled, ns, name);
                    ensure!(
                        scheduled.is_empty(),
                        "{key} is unbound but has Scheduled events: {scheduled:?}"
                    );
                    ensure!(
                        queue.iter().any(|q| q.namespace == ns && q.name == name),
                        "{key} is unbound and not in the queue: lost"
                    );
                }
            }
            out.insert(key, node);
        }
        Ok(out)
    }

    pub async fn stop(self) -> Result<()> {
        drop(self.events);
        let status = self.berthd.stop().await?;
        ensure!(status.success(), "berthd exited with {status}");
        std::fs::remove_dir_all(&self.dir).ok();
        Ok(())
    }
}

/// Waits until berthd logged "extender connected" for every name (in any
/// order).
pub async fn wait_connected(berthd: &mut Berthd, names: &[&str]) -> Result<()> {
    let mut missing: BTreeSet<&str> = names.iter().copied().collect();
    while !missing.is_empty() {
        let line = berthd
            .wait_for(|l| message(l) == "extender connected")
            .await?;
        if let Some(name) = line["fields"]["extender"].as_str() {
            missing.remove(name);
        }
    }
    Ok(())
}

/// Waits for the next "extender connected" of `name`.
pub async fn wait_reconnected(berthd: &mut Berthd, name: &str) -> Result<()> {
    berthd
        .wait_for(|l| message(l) == "extender connected" && l["fields"]["extender"] == name)
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Objects

/// A pod requesting 100m of cpu.
pub fn pod(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    })
}

pub fn with_cpu(mut p: Value, cpu: &str) -> Value {
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu.into();
    p
}

/// Adds a request (and limit, as extended resources want) of `mib` MiB of
/// `example.com/gpu-mem`.
pub fn with_gpu_mem(mut p: Value, mib: u64) -> Value {
    let r = &mut p["spec"]["containers"][0]["resources"];
    r["requests"]["example.com/gpu-mem"] = mib.to_string().into();
    r["limits"]["example.com/gpu-mem"] = mib.to_string().into();
    p
}

pub fn annotated(mut p: Value, k: &str, v: &str) -> Value {
    p["metadata"]["annotations"][k] = v.into();
    p
}

pub fn labelled(mut p: Value, k: &str, v: &str) -> Value {
    p["metadata"]["labels"][k] = v.into();
    p
}

// ---------------------------------------------------------------------------
// Extender logs

pub fn field<'a>(l: &'a Value, name: &str) -> &'a str {
    l["fields"][name].as_str().unwrap_or_default()
}

/// The extender's "request KIND ..." lines (the SDK's debug lines, and
/// faulty's) of `kind` about pod `ns/name`.
pub fn requests<'a>(lines: &'a [Value], kind: &str, pod: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| {
            message(l).starts_with("request ") && field(l, "kind") == kind && field(l, "pod") == pod
        })
        .collect()
}

/// The reservation ids of the Reserve (or Unreserve) requests of a pod.
pub fn reservations(lines: &[Value], kind: &str, pod: &str) -> BTreeSet<String> {
    requests(lines, kind, pod)
        .into_iter()
        .map(|l| field(l, "reservation").to_string())
        .collect()
}

/// The reservations of a pod that no Unreserve undid.
pub fn outstanding(lines: &[Value], pod: &str) -> BTreeSet<String> {
    let undone = reservations(lines, "Unreserve", pod);
    reservations(lines, "Reserve", pod)
        .into_iter()
        .filter(|r| !undone.contains(r))
        .collect()
}

/// Every reservation the extender saw was undone, except one per bound pod
/// (the attempt that bound it): waits for that to hold, since an Unreserve
/// may still be on its way when the pod's failure is reported.
pub async fn every_rejected_reservation_undone(
    ext: &Extender,
    pods: &BTreeMap<String, Option<String>>,
) -> Result<()> {
    let what = "an Unreserve for every reservation of an attempt that failed";
    let check = |lines: &[Value]| {
        pods.iter().all(|(pod, node)| {
            let left = outstanding(lines, pod).len();
            left == usize::from(node.is_some())
        })
    };
    ext.wait_until(what, check).await.with_context(|| {
        let lines = ext.lines();
        let left: BTreeMap<&String, BTreeSet<String>> =
            pods.keys().map(|p| (p, outstanding(&lines, p))).collect();
        format!("reservations not undone: {left:?}")
    })
}

pub fn log_message_starts(l: &Value, prefix: &str) -> bool {
    message(l).starts_with(prefix)
}

/// How many lines' messages start with `prefix`.
pub fn count(lines: &[Value], prefix: &str) -> usize {
    lines
        .iter()
        .filter(|l| log_message_starts(l, prefix))
        .count()
}

/// Cluster YAML of `count` plain Ready nodes `n1`..`nN`, 4 cpu each.
pub fn plain_nodes(count: usize) -> String {
    (1..=count)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}}}\nstatus:\n  \
                 allocatable: {{cpu: \"4\", memory: 16Gi, pods: \"50\"}}\n  \
                 conditions: [{{type: Ready, status: \"True\"}}]\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Whether at some point of the log the pod had at least `min`
/// reservations and every one of them had been undone (checked line by
/// line, so that a retry reserving again right after does not hide it).
pub fn all_undone_at_some_point(lines: &[Value], pod: &str, min: usize) -> bool {
    let mut reserved = BTreeSet::new();
    let mut undone = BTreeSet::new();
    for l in lines {
        if !message(l).starts_with("request ") || field(l, "pod") != pod {
            continue;
        }
        match field(l, "kind") {
            "Reserve" => reserved.insert(field(l, "reservation")),
            "Unreserve" => undone.insert(field(l, "reservation")),
            _ => continue,
        };
        if reserved.len() >= min && reserved.is_subset(&undone) {
            return true;
        }
    }
    false
}

/// A berthd configuration with one profile enabling each extender at the
/// points given, and the `berthExtenders` entries (YAML, indented).
pub fn config(plugins: &str, extenders: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         profiles:\n\
         - schedulerName: default-scheduler\n  plugins:\n{plugins}\n\
         berthExtenders:\n{extenders}\n"
    )
}

/// A berthd log line satisfying `pred`: one already read, or the next one.
pub async fn berthd_line(berthd: &mut Berthd, pred: impl Fn(&Value) -> bool) -> Result<Value> {
    if let Some(l) = berthd.seen.iter().find(|l| pred(l)) {
        return Ok(l.clone());
    }
    berthd.wait_for(pred).await
}

/// berthd's line `msg` about extender `ext`, point `point` and pod `pod`
/// (`ns/name`), seen or still to come.
pub async fn extender_line(
    berthd: &mut Berthd,
    msg: &str,
    ext: &str,
    point: &str,
    pod: &str,
) -> Result<Value> {
    berthd_line(berthd, |l| {
        message(l) == msg
            && field(l, "extender") == ext
            && field(l, "point") == point
            && field(l, "pod") == pod
    })
    .await
}
