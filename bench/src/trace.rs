//! `berth-bench trace`: a trace made from a cluster file (or generated
//! nodes) and an arrival process, so that replay can be tried without a
//! cluster. Pods of berth-bench's templates (upstream scheduler_perf's)
//! arrive as a Poisson process over the duration, each living an
//! exponentially distributed time (then deleted); optionally nodes leave
//! and come back. Everything follows from the seed.
//!
//! Written streaming: memory holds the pods alive at once, not the trace.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use berth_server::recording::format::{self, Body, Deleted, Header, VERSION};

use crate::objects::{self, PodTemplate};

/// What to generate.
#[derive(Debug, Clone)]
pub struct TraceSpec {
    /// Nodes, pods and other objects of the first state (Kubernetes YAML:
    /// a file or a directory); none: only generated nodes.
    pub cluster: Option<PathBuf>,
    /// Nodes to generate (berth-bench's: 4 CPU, 32Gi, 110 pods; zones
    /// round robin), besides the cluster file's.
    pub nodes: usize,
    /// Pods that arrive.
    pub pods: usize,
    /// Over how long.
    pub duration: Duration,
    /// Mean lifetime of a pod.
    pub lifetime: Duration,
    /// Templates and their weights.
    pub templates: Vec<(PodTemplate, u32)>,
    /// How many times a node leaves (and comes back ten minutes later).
    pub node_churn: usize,
    /// The seed.
    pub seed: u64,
    /// The file to write.
    pub out: PathBuf,
}

/// The templates by the names `--template` takes.
pub fn template_named(name: &str) -> Option<PodTemplate> {
    use PodTemplate as T;
    Some(match name {
        "default" => T::Default,
        "low-priority" => T::LowPriority,
        "high-priority" => T::HighPriority,
        "high-priority-large-cpu" => T::HighPriorityLargeCpu,
        "pod-anti-affinity" => T::PodAntiAffinity,
        "pod-affinity" => T::PodAffinity,
        "topology-spreading" => T::TopologySpreading,
        "preferred-topology-spreading" => T::PreferredTopologySpreading,
        "node-affinity" => T::NodeAffinity,
        _ => return None,
    })
}

/// Parses `name=weight,name=weight` (a name alone weighs 1).
pub fn parse_templates(s: &str) -> Result<Vec<(PodTemplate, u32)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, weight) = match part.split_once('=') {
            Some((n, w)) => (
                n.trim(),
                w.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{part:?}: the weight must be a whole number"))?,
            ),
            None => (part, 1),
        };
        let t = template_named(name).ok_or_else(|| {
            format!("{name:?}: not a template (default, low-priority, high-priority, high-priority-large-cpu, pod-anti-affinity, pod-affinity, topology-spreading, preferred-topology-spreading, node-affinity)")
        })?;
        out.push((t, weight));
    }
    if out.iter().all(|(_, w)| *w == 0) {
        return Err("at least one template with a weight above 0".into());
    }
    Ok(out)
}

/// splitmix64: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Exponentially distributed with mean `mean`.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

const ZONES: [&str; 3] = ["zone1", "zone2", "zone3"];

/// What is due at a time: a pod's deletion, a node's leaving or return.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    DeletePod(u64),
    NodeLeaves(usize),
    NodeBack(usize),
}

/// Writes the trace; returns (records written, bytes).
pub fn generate(spec: &TraceSpec) -> Result<(u64, u64)> {
    if spec.templates.is_empty() {
        bail!("--template: at least one template");
    }
    let file = std::fs::File::create(&spec.out)
        .with_context(|| format!("writing {}", spec.out.display()))?;
    let header = Header {
        berth_trace: VERSION,
        started: "1970-01-01T00:00:00Z".into(),
        source: "generated".into(),
        segment: 0,
        seed: Some(spec.seed),
        profiles: vec!["default-scheduler".into()],
    };
    let mut w = format::Writer::new(std::io::BufWriter::new(file), &header)?;
    let mut rng = Rng(spec.seed);
    let mut buf = Vec::with_capacity(1 << 20);
    let mut records = 0u64;
    let put = |w: &mut format::Writer<_>, buf: &mut Vec<u8>, force: bool| -> Result<()> {
        if force || buf.len() >= 1 << 20 {
            w.write_lines(buf)?;
            buf.clear();
        }
        Ok(())
    };
    // The first state: the cluster file's objects (kinds pods need first,
    // then nodes, then pods), then the generated nodes.
    let mut first: Vec<serde_json::Value> = Vec::new();
    if let Some(path) = &spec.cluster {
        for o in berth_server::cluster::embedded::read_objects(path)? {
            first.push(o.value);
        }
    }
    let namespaces = ["default", "sched-0", "sched-1"];
    for ns in namespaces {
        if !first
            .iter()
            .any(|v| v["kind"] == "Namespace" && v["metadata"]["name"].as_str() == Some(ns))
        {
            first.push(objects::namespace(ns));
        }
    }
    let order = |v: &serde_json::Value| match v["kind"].as_str() {
        Some("Namespace" | "PriorityClass") => 0,
        Some("Node") => 2,
        Some("Pod") => 3,
        _ => 1,
    };
    first.sort_by_key(order);
    for (i, mut v) in first.into_iter().enumerate() {
        if v["kind"] == "Pod" && v["metadata"]["uid"].as_str().is_none_or(str::is_empty) {
            v["metadata"]["uid"] = format!("first-{i}").into();
        }
        format::write_object(&mut buf, 0, "add", &serde_json::to_vec(&v)?);
        records += 1;
        put(&mut w, &mut buf, false)?;
    }
    let node_json = |i: usize| -> Result<Vec<u8>> {
        let mut n = objects::node(i, &ZONES);
        n.metadata.uid = Some(format!("node-uid-{i}"));
        Ok(serde_json::to_vec(&n)?)
    };
    for i in 0..spec.nodes {
        format::write_object(&mut buf, 0, "add", &node_json(i)?);
        records += 1;
        put(&mut w, &mut buf, false)?;
    }
    format::write_record(&mut buf, 0, &Body::Synced);
    records += 1;

    let total: u32 = spec.templates.iter().map(|(_, w)| *w).sum();
    let duration_us = spec.duration.as_micros() as f64;
    let gap = duration_us / spec.pods.max(1) as f64;
    let lifetime = spec.lifetime.as_micros() as f64;
    let mut due: BinaryHeap<Reverse<(u64, Due)>> = BinaryHeap::new();
    // Node churn: times spread at random over the duration.
    if spec.nodes > 0 {
        for _ in 0..spec.node_churn {
            let at = (rng.unit() * duration_us) as u64;
            let node = (rng.next() % spec.nodes as u64) as usize;
            due.push(Reverse((at, Due::NodeLeaves(node))));
        }
    }
    let mut names: Vec<String> = Vec::new();
    let mut t = 0f64;
    let mut next_pod = 0usize;
    let emit_due = |until: u64,
                    due: &mut BinaryHeap<Reverse<(u64, Due)>>,
                    buf: &mut Vec<u8>,
                    names: &mut Vec<String>,
                    records: &mut u64|
     -> Result<()> {
        while let Some(Reverse((at, _))) = due.peek() {
            if *at > until {
                break;
            }
            let Some(Reverse((at, what))) = due.pop() else {
                break;
            };
            match what {
                Due::DeletePod(i) => {
                    let name = std::mem::take(&mut names[i as usize]);
                    let (ns, name) = name.split_once('/').unwrap_or(("default", &name));
                    format::write_record(
                        buf,
                        at,
                        &Body::Delete(Deleted {
                            kind: "Pod".into(),
                            namespace: ns.to_string(),
                            name: name.to_string(),
                            uid: format!("pod-uid-{i}"),
                            preempted: false,
                        }),
                    );
                }
                Due::NodeLeaves(node) => {
                    // Leaves now, comes back ten minutes later.
                    format::write_record(
                        buf,
                        at,
                        &Body::Delete(Deleted {
                            kind: "Node".into(),
                            namespace: String::new(),
                            name: objects::node_name(node),
                            uid: format!("node-uid-{node}"),
                            preempted: false,
                        }),
                    );
                    due.push(Reverse((at + 600_000_000, Due::NodeBack(node))));
                }
                Due::NodeBack(node) => {
                    format::write_object(buf, at, "add", &node_json(node)?);
                }
            }
            *records += 1;
        }
        Ok(())
    };
    while next_pod < spec.pods {
        t += rng.exp(gap);
        let at = t as u64;
        emit_due(at, &mut due, &mut buf, &mut names, &mut records)?;
        let mut pick = (rng.next() % total as u64) as u32;
        let template = spec
            .templates
            .iter()
            .find(|(_, w)| {
                if pick < *w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .map(|(t, _)| *t)
            .unwrap_or(PodTemplate::Default);
        let ns = match template {
            PodTemplate::PodAffinity | PodTemplate::PodAntiAffinity => {
                namespaces[1 + (next_pod % 2)]
            }
            _ => "default",
        };
        let name = format!("{}-{next_pod}", template.stem());
        let mut pod = template.pod(ns, &name);
        pod.metadata.uid = Some(format!("pod-uid-{next_pod}"));
        format::write_object(&mut buf, at, "add", &serde_json::to_vec(&pod)?);
        records += 1;
        names.push(format!("{ns}/{name}"));
        let gone = at + rng.exp(lifetime) as u64;
        if (gone as f64) < duration_us {
            due.push(Reverse((gone, Due::DeletePod(next_pod as u64))));
        }
        next_pod += 1;
        put(&mut w, &mut buf, false)?;
    }
    emit_due(
        duration_us as u64,
        &mut due,
        &mut buf,
        &mut names,
        &mut records,
    )?;
    put(&mut w, &mut buf, true)?;
    let mut inner = w.finish()?;
    inner.flush()?;
    let bytes = std::fs::metadata(&spec.out).map(|m| m.len()).unwrap_or(0);
    Ok((records, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_trace() {
        let dir = std::env::temp_dir().join(format!("berth-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = |seed, out: &str| TraceSpec {
            cluster: None,
            nodes: 4,
            pods: 200,
            duration: Duration::from_secs(3600),
            lifetime: Duration::from_secs(600),
            templates: parse_templates("default=3,low-priority=1").unwrap(),
            node_churn: 1,
            seed,
            out: dir.join(out),
        };
        let (n, _) = generate(&spec(1, "a")).unwrap();
        generate(&spec(1, "b")).unwrap();
        generate(&spec(2, "c")).unwrap();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        assert_eq!(read("a"), read("b"));
        assert_ne!(read("a"), read("c"));
        let mut r =
            berth_server::recording::Reader::new(std::fs::File::open(dir.join("a")).unwrap())
                .unwrap();
        let (mut adds, mut deletes, mut last) = (0, 0, 0);
        let mut count = 0;
        while let Some(rec) = r.next_record().unwrap() {
            assert!(rec.t >= last, "records in time order");
            last = rec.t;
            count += 1;
            match rec.body {
                Body::Add(berth_server::recording::Object::Pod(_)) => adds += 1,
                Body::Delete(d) if d.kind == "Pod" => deletes += 1,
                _ => {}
            }
        }
        assert_eq!(count, n);
        assert_eq!(adds, 200);
        assert!(
            deletes > 100,
            "most pods live less than the hour: {deletes}"
        );
        assert!(parse_templates("nope").is_err());
    }
}
