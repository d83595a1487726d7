//! What one configuration's report is made of, gathered as its scheduler
//! sees the cluster change and records its decisions (an
//! [`Observer`]): counts, times to schedule, and use of the nodes sampled
//! over simulated time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::report::{ConfigReport, Histogram, Series};
use crate::cluster::{ClusterChange, WatchEvent};
use crate::framework::PodEvent;
use crate::model::{NodeSpec, PodInfo};
use crate::recording::Observer;

/// How many samples a series keeps at most: past it, every other sample
/// is dropped and the step doubles.
const MAX_SAMPLES: usize = 512;

/// Where a pod's placement goes once decided (uid, node or none).
pub(crate) type Placements = std::sync::mpsc::Sender<(usize, Arc<str>, Option<Arc<str>>)>;

#[derive(Default, Clone, Copy)]
struct Amounts {
    cpu: i64,
    memory: i64,
    pods: i64,
}

struct NodeUse {
    alloc: Amounts,
    used: Amounts,
    scalar_alloc: Vec<(usize, i64)>,
    schedulable: bool,
}

struct Pending {
    arrived: u64,
    gated: bool,
    last_message: Option<Arc<str>>,
    group: Option<(Arc<str>, Arc<str>)>,
}

struct BoundPod {
    node: Arc<str>,
    req: Amounts,
    scalar: Vec<(usize, i64)>,
}

#[derive(Default)]
struct Gang {
    members: u64,
    bound: u64,
}

pub(crate) struct State {
    origin: Instant,
    profiles: HashSet<Arc<str>>,
    placements: Placements,
    column: usize,
    pending: HashMap<Arc<str>, Pending>,
    bound: HashMap<Arc<str>, BoundPod>,
    nodes: HashMap<Arc<str>, NodeUse>,
    /// Extended resources nodes announced, in the order first seen.
    scalar_names: Vec<String>,
    scalar_used: Vec<i64>,
    scalar_alloc: Vec<i64>,
    used: Amounts,
    alloc: Amounts,
    ttl: Histogram,
    preemptors: HashSet<Arc<str>>,
    gangs: HashMap<(Arc<str>, Arc<str>), Gang>,
    report: ConfigReport,
    step: u64,
    next_sample: u64,
}

/// The [`Observer`] a configuration's scheduler reports to.
pub(crate) struct Collector {
    pub state: Mutex<State>,
}

fn amounts_of_pod(p: &PodInfo, names: &mut Vec<String>) -> (Amounts, Vec<(usize, i64)>) {
    let r = &p.requests;
    let scalar = r
        .scalar
        .iter()
        .map(|(n, v)| (scalar_index(names, &n.as_str()), *v))
        .collect();
    (
        Amounts {
            cpu: r.milli_cpu,
            memory: r.memory,
            pods: 1,
        },
        scalar,
    )
}

fn scalar_index(names: &mut Vec<String>, name: &str) -> usize {
    match names.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
    }
}

impl Collector {
    pub fn new(
        name: String,
        column: usize,
        profiles: HashSet<Arc<str>>,
        placements: Placements,
        origin: Instant,
    ) -> Self {
        Self {
            state: Mutex::new(State {
                origin,
                profiles,
                placements,
                column,
                pending: HashMap::new(),
                bound: HashMap::new(),
                nodes: HashMap::new(),
                scalar_names: Vec::new(),
                scalar_used: Vec::new(),
                scalar_alloc: Vec::new(),
                used: Amounts::default(),
                alloc: Amounts::default(),
                ttl: Histogram::default(),
                preemptors: HashSet::new(),
                gangs: HashMap::new(),
                report: ConfigReport {
                    name,
                    ..Default::default()
                },
                step: 1_000_000,
                next_sample: 0,
            }),
        }
    }
}

impl State {
    fn now(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.origin)
            .as_micros() as u64
    }

    fn ours(&self, p: &Pod) -> bool {
        let name = p
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.contains(name)
    }

    /// Samples the state if a sampling time passed (the state held since
    /// the last change, so it is exact for that time).
    fn maybe_sample(&mut self, now: u64) {
        while now >= self.next_sample {
            let at = self.next_sample;
            self.sample(at);
            self.next_sample = at + self.step;
        }
    }

    /// Samples the state as it is now, at time `at`.
    pub fn sample(&mut self, at: u64) {
        let s = &mut self.report.series;
        if s.t.last().is_some_and(|&t| t >= at) {
            return;
        }
        s.t.push(at);
        s.pending.push(self.pending.len() as u64);
        s.running.push(self.bound.len() as u64);
        let ratio = |u: i64, a: i64| if a > 0 { u as f64 / a as f64 } else { 0.0 };
        let mut values = vec![
            ("cpu".to_string(), ratio(self.used.cpu, self.alloc.cpu)),
            (
                "memory".to_string(),
                ratio(self.used.memory, self.alloc.memory),
            ),
            ("pods".to_string(), ratio(self.used.pods, self.alloc.pods)),
        ];
        for (i, n) in self.scalar_names.iter().enumerate() {
            if self.scalar_alloc.get(i).copied().unwrap_or(0) > 0 {
                values.push((n.clone(), ratio(self.scalar_used[i], self.scalar_alloc[i])));
            }
        }
        let len = s.t.len();
        for (name, v) in values {
            let col = match s.utilization.iter().position(|(n, _)| *n == name) {
                Some(c) => c,
                None => {
                    s.utilization.push((name, vec![0.0; len - 1]));
                    s.utilization.len() - 1
                }
            };
            s.utilization[col].1.push(v);
        }
        for (_, col) in s.utilization.iter_mut() {
            col.resize(len, 0.0);
        }
        let (mut cpu, mut mem, mut free_cpu) = (0i64, 0i64, 0i64);
        for n in self.nodes.values().filter(|n| n.schedulable) {
            let c = (n.alloc.cpu - n.used.cpu).max(0);
            let pods_free = n.alloc.pods - n.used.pods > 0;
            if pods_free {
                cpu = cpu.max(c);
                mem = mem.max((n.alloc.memory - n.used.memory).max(0));
            }
            free_cpu += c;
        }
        s.largest_free_cpu_milli.push(cpu);
        s.largest_free_memory.push(mem);
        s.cpu_fragmentation.push(if free_cpu > 0 {
            1.0 - cpu as f64 / free_cpu as f64
        } else {
            0.0
        });
        if s.t.len() > MAX_SAMPLES {
            thin(s);
            self.step *= 2;
        }
    }

    fn node_changed(&mut self, node: &Arc<Node>, deleted: bool) {
        let Ok(spec) = NodeSpec::new(node.clone()) else {
            return;
        };
        if let Some(old) = self.nodes.remove(&spec.name) {
            self.alloc.cpu -= old.alloc.cpu;
            self.alloc.memory -= old.alloc.memory;
            self.alloc.pods -= old.alloc.pods;
            for (i, v) in &old.scalar_alloc {
                self.scalar_alloc[*i] -= v;
            }
            if deleted {
                return;
            }
            let mut n = self.node_use(&spec);
            n.used = old.used;
            self.nodes.insert(spec.name.clone(), n);
        } else if !deleted {
            let n = self.node_use(&spec);
            self.nodes.insert(spec.name.clone(), n);
        }
    }

    fn node_use(&mut self, spec: &NodeSpec) -> NodeUse {
        let a = &spec.allocatable;
        let alloc = Amounts {
            cpu: a.milli_cpu,
            memory: a.memory,
            pods: a.allowed_pod_number,
        };
        let schedulable = !spec.unschedulable;
        let mut scalar_alloc = Vec::new();
        for (name, v) in &a.scalar {
            let i = scalar_index(&mut self.scalar_names, &name.as_str());
            self.grow_scalars();
            scalar_alloc.push((i, *v));
        }
        if schedulable {
            self.alloc.cpu += alloc.cpu;
            self.alloc.memory += alloc.memory;
            self.alloc.pods += alloc.pods;
            for (i, v) in &scalar_alloc {
                self.scalar_alloc[*i] += v;
            }
        }
        NodeUse {
            alloc: if schedulable {
                alloc
            } else {
                Amounts::default()
            },
            used: Amounts::default(),
            scalar_alloc: if schedulable {
                scalar_alloc
            } else {
                Vec::new()
            },
            schedulable,
        }
    }

    fn grow_scalars(&mut self) {
        let n = self.scalar_names.len();
        self.scalar_used.resize(n, 0);
        self.scalar_alloc.resize(n, 0);
    }

    fn pod_bound(&mut self, pod: &Arc<Pod>, node: &str, now: u64) {
        let Ok(info) = PodInfo::new(pod.clone()) else {
            return;
        };
        let (req, scalar) = amounts_of_pod(&info, &mut self.scalar_names);
        self.grow_scalars();
        let node: Arc<str> = Arc::from(node);
        if let Some(n) = self.nodes.get_mut(&node) {
            n.used.cpu += req.cpu;
            n.used.memory += req.memory;
            n.used.pods += 1;
        }
        self.used.cpu += req.cpu;
        self.used.memory += req.memory;
        self.used.pods += 1;
        for (i, v) in &scalar {
            self.scalar_used[*i] += v;
        }
        if let Some(p) = self.pending.remove(&info.uid) {
            self.report.scheduled += 1;
            self.ttl.record(now.saturating_sub(p.arrived));
            if let Some(g) = p.group
                && let Some(gang) = self.gangs.get_mut(&g)
            {
                gang.bound += 1;
            }
            let _ = self
                .placements
                .send((self.column, info.uid.clone(), Some(node.clone())));
        }
        self.bound
            .insert(info.uid.clone(), BoundPod { node, req, scalar });
    }

    fn pod_gone(&mut self, pod: &Arc<Pod>) {
        let uid: Arc<str> = Arc::from(pod.metadata.uid.as_deref().unwrap_or(""));
        if let Some(b) = self.bound.remove(&uid) {
            if let Some(n) = self.nodes.get_mut(&b.node) {
                n.used.cpu -= b.req.cpu;
                n.used.memory -= b.req.memory;
                n.used.pods -= 1;
            }
            self.used.cpu -= b.req.cpu;
            self.used.memory -= b.req.memory;
            self.used.pods -= 1;
            for (i, v) in &b.scalar {
                self.scalar_used[*i] -= v;
            }
        }
        if self.pending.remove(&uid).is_some() {
            self.report.deleted_pending += 1;
            let _ = self.placements.send((self.column, uid, None));
        }
    }

    fn pod_arrived(&mut self, pod: &Arc<Pod>, now: u64) {
        let uid: Arc<str> = Arc::from(pod.metadata.uid.as_deref().unwrap_or(""));
        let group = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref())
            .filter(|n| !n.is_empty())
            .map(|g| {
                (
                    Arc::from(pod.metadata.namespace.as_deref().unwrap_or("default")),
                    Arc::from(g),
                )
            });
        if let Some(g) = &group {
            self.gangs.entry(g.clone()).or_default().members += 1;
        }
        self.report.arrived += 1;
        self.pending.insert(
            uid,
            Pending {
                arrived: now,
                gated: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_some_and(|g| !g.is_empty()),
                last_message: None,
                group,
            },
        );
    }

    /// The report, with the pods still pending counted as they stand.
    pub fn finish(&mut self, now: u64) -> ConfigReport {
        self.sample(now);
        let mut reasons: HashMap<String, u64> = HashMap::new();
        for p in self.pending.values() {
            match &p.last_message {
                Some(m) => {
                    for r in reasons_of(m) {
                        *reasons.entry(r).or_default() += 1;
                    }
                }
                None if p.gated => {
                    *reasons
                        .entry("waiting for scheduling gates".into())
                        .or_default() += 1
                }
                None => *reasons.entry("not tried yet".into()).or_default() += 1,
            }
        }
        for uid in self.pending.keys() {
            let _ = self.placements.send((self.column, uid.clone(), None));
        }
        let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut r = std::mem::take(&mut self.report);
        r.pending = self.pending.len() as u64;
        r.pending_reasons = reasons;
        r.time_to_schedule = self.ttl.percentiles();
        r.preemptors = self.preemptors.len() as u64;
        r.gangs = self.gangs.len() as u64;
        r.gangs_whole = self
            .gangs
            .values()
            .filter(|g| g.members > 0 && g.bound == g.members)
            .count() as u64;
        r.gangs_partial = self
            .gangs
            .values()
            .filter(|g| g.bound > 0 && g.bound < g.members)
            .count() as u64;
        r.simulated_micros = now;
        r
    }
}

/// Drops every other sample (keeping the first).
fn thin(s: &mut Series) {
    fn keep<T: Clone>(v: &mut Vec<T>) {
        *v = v.iter().step_by(2).cloned().collect();
    }
    keep(&mut s.t);
    keep(&mut s.pending);
    keep(&mut s.running);
    for (_, v) in s.utilization.iter_mut() {
        keep(v);
    }
    keep(&mut s.largest_free_cpu_milli);
    keep(&mut s.largest_free_memory);
    keep(&mut s.cpu_fragmentation);
}

/// The reasons a FailedScheduling message gives, without their node
/// counts: "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had
/// untolerated taint(s). preemption: ..." gives "Insufficient cpu" and
/// "node(s) had untolerated taint(s)". A message of another shape is its
/// own reason.
pub fn reasons_of(message: &str) -> Vec<String> {
    let Some((_, rest)) = message.split_once(" nodes are available: ") else {
        return vec![message.trim().to_string()];
    };
    // What follows the first sentence is PostFilter's and preemption's.
    let rest = rest.split(". ").next().unwrap_or(rest);
    let rest = rest.trim_end_matches('.');
    rest.split(", ")
        .map(|part| {
            let part = part.trim();
            match part.split_once(' ') {
                Some((n, r)) if n.parse::<u64>().is_ok() => r.to_string(),
                _ => part.to_string(),
            }
        })
        .filter(|r| !r.is_empty())
        .collect()
}

impl Observer for Collector {
    fn change(&self, change: &ClusterChange) {
        let mut s = self.state.lock();
        let now = s.now();
        s.maybe_sample(now);
        match change {
            ClusterChange::Node(e) => match e {
                WatchEvent::Added(n) | WatchEvent::Modified { new: n, .. } => {
                    s.node_changed(n, false)
                }
                WatchEvent::Deleted(n) => s.node_changed(n, true),
            },
            ClusterChange::Pod(e) => match e {
                WatchEvent::Added(p) => {
                    let p = p.get();
                    match p.spec.as_ref().and_then(|sp| sp.node_name.as_deref()) {
                        Some(node) => s.pod_bound(&p, node, now),
                        None if s.ours(&p) => s.pod_arrived(&p, now),
                        None => {}
                    }
                }
                WatchEvent::Modified { old, new } => {
                    let (old, new) = (old.get(), new.get());
                    let was = old.spec.as_ref().and_then(|sp| sp.node_name.as_deref());
                    let is = new.spec.as_ref().and_then(|sp| sp.node_name.as_deref());
                    if let (None, Some(node)) = (was, is) {
                        s.pod_bound(&new, node, now);
                    }
                }
                WatchEvent::Deleted(p) => s.pod_gone(&p.get()),
            },
            ClusterChange::PodInfo(_) | ClusterChange::Object(_) | ClusterChange::Synced => {}
        }
    }

    fn event(&self, e: &PodEvent) {
        let mut s = self.state.lock();
        match e.reason {
            "FailedScheduling" => {
                s.report.failed_attempts += 1;
                let message: Arc<str> = Arc::from(e.note.as_str());
                if let Some(p) = s.pending.get_mut(&e.pod.uid) {
                    p.last_message = Some(message);
                }
            }
            "Preempted" => {
                s.report.victims += 1;
                if let Some(p) = &e.related {
                    s.preemptors.insert(p.uid.clone());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_read_from_the_fit_error() {
        assert_eq!(
            reasons_of(
                "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint(s). preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
            ),
            ["Insufficient cpu", "node(s) had untolerated taint(s)"]
        );
        assert_eq!(
            reasons_of(
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
            ),
            ["node(s) didn't match Pod's node affinity/selector"]
        );
        assert_eq!(
            reasons_of(
                "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            ),
            ["Insufficient cpu"]
        );
        assert_eq!(
            reasons_of("no nodes available to schedule pods"),
            ["no nodes available to schedule pods"]
        );
    }
}
