//! NodeResourcesFit: a node fits if its allocatable covers what its pods
//! already request plus the pod's requests; nodes are scored by the
//! configured strategy over the configured resources.

use std::sync::Arc;

use async_trait::async_trait;

use super::args::{LEAST_ALLOCATED, MOST_ALLOCATED, NodeResourcesFitArgs};
use super::scoring::Scorer;
use crate::cache::dra::is_dra_extended_resource;
use crate::cache::{NodeInfo, ObjectStore};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, EventResource, FilterPlugin,
    Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, QueueingHint, Reason, ScorePlugin,
    StateKey, Status,
};
use crate::model::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, is_extended_resource};
use crate::model::{NodeSpec, PodInfo, Resource, ResourceName};
use crate::plugins::names::NODE_RESOURCES_FIT;

/// The reason a node that is full (by pod count) is rejected.
pub const TOO_MANY_PODS: &str = "Too many pods";

/// A scored resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scored {
    Cpu,
    Memory,
    EphemeralStorage,
    Scalar(ResourceName),
}

/// What PreScore computed: the pod's request for each scored resource
/// (CPU and memory with unset requests counted as 100m / 200Mi).
#[derive(Debug, Clone)]
struct PreScoreState(Vec<i64>);

const PRE_SCORE_KEY: StateKey<PreScoreState> = StateKey::new("PreScoreNodeResourcesFit");

/// The NodeResourcesFit plugin.
#[derive(Debug)]
pub struct NodeResourcesFit {
    ignored_resources: Vec<ResourceName>,
    ignored_groups: Vec<String>,
    scored: Vec<Scored>,
    weights: Vec<i64>,
    scorer: Scorer,
    /// The cluster's objects, for extended resources backed by DRA.
    objects: Option<Arc<ObjectStore>>,
}

impl NodeResourcesFit {
    /// Builds the plugin from its (validated, defaulted) args.
    pub fn new(args: NodeResourcesFitArgs) -> Result<Self, String> {
        let strategy = args.strategy();
        let scorer = match strategy.strategy_type.as_str() {
            LEAST_ALLOCATED => Scorer::LeastAllocated,
            MOST_ALLOCATED => Scorer::MostAllocated,
            _ => Scorer::requested_to_capacity_ratio(
                &strategy
                    .requested_to_capacity_ratio
                    .as_ref()
                    .ok_or("scoring strategy not specified")?
                    .shape,
            ),
        };
        let scored = strategy
            .resources
            .iter()
            .map(|r| match r.name.as_str() {
                CPU => Scored::Cpu,
                MEMORY => Scored::Memory,
                EPHEMERAL_STORAGE => Scored::EphemeralStorage,
                other => Scored::Scalar(ResourceName::intern(other)),
            })
            .collect();
        Ok(Self {
            // Upstream ignores only extended resources; other names listed
            // (hugepages, `kubernetes.io/` ones) are still checked.
            ignored_resources: args
                .ignored_resources
                .iter()
                .filter(|r| is_extended_resource(r))
                .map(|r| ResourceName::intern(r))
                .collect(),
            ignored_groups: args.ignored_resource_groups.clone(),
            scored,
            weights: strategy.resources.iter().map(|r| r.weight).collect(),
            scorer,
            objects: None,
        })
    }

    /// Lets the plugin see DeviceClasses: an extended resource a node does
    /// not offer but a DeviceClass backs is left to DynamicResources
    /// (DRAExtendedResource, on by default in v1.36).
    pub fn with_objects(mut self, objects: Arc<ObjectStore>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Whether DynamicResources, not this plugin, checks the pod's request
    /// for `name` on a node with `allocatable` of it: the node offers none
    /// (no device plugin) and a DeviceClass backs the name.
    fn delegated_to_dra(&self, name: ResourceName, allocatable: i64) -> bool {
        if allocatable > 0 {
            return false;
        }
        let Some(objects) = &self.objects else {
            return false;
        };
        let text = name.as_str();
        is_dra_extended_resource(&text)
            && objects.dra().class_for_extended_resource(&text).is_some()
    }

    fn ignored(&self, name: ResourceName) -> bool {
        if self.ignored_resources.contains(&name) {
            return true;
        }
        if self.ignored_groups.is_empty() {
            return false;
        }
        let text = name.as_str();
        is_extended_resource(&text)
            && text
                .split_once('/')
                .is_some_and(|(group, _)| self.ignored_groups.iter().any(|g| g == group))
    }

    /// The reasons `node` cannot take `pod`, and whether some request
    /// exceeds the node's whole allocatable (then no preemption helps).
    fn insufficient(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> (smallvec::SmallVec<[Reason; 2]>, bool) {
        let mut reasons = smallvec::SmallVec::new();
        let mut unresolvable = false;
        let alloc = node.allocatable();
        let used = node.requested();
        if node.pods().len() as i64 + 1 > alloc.allowed_pod_number {
            reasons.push(Reason::Borrowed(TOO_MANY_PODS));
        }
        let req = &pod.requests;
        let mut check = |want: i64, have: i64, in_use: i64, reason: &'static str| {
            if want > 0 && want > have - in_use {
                reasons.push(Reason::Borrowed(reason));
                unresolvable |= want > have;
            }
        };
        check(
            req.milli_cpu,
            alloc.milli_cpu,
            used.milli_cpu,
            "Insufficient cpu",
        );
        check(req.memory, alloc.memory, used.memory, "Insufficient memory");
        check(
            req.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
            "Insufficient ephemeral-storage",
        );
        for &(name, want) in &req.scalar {
            if want == 0 || self.ignored(name) || self.delegated_to_dra(name, alloc.scalar(name)) {
                continue;
            }
            check(
                want,
                alloc.scalar(name),
                used.scalar(name),
                name.insufficient_reason(),
            );
        }
        (reasons, unresolvable)
    }

    /// Whether `pod` would fit `node` if it were empty: if not, no change
    /// short of a bigger node helps.
    fn fits_empty(&self, pod: &PodInfo, node: &NodeSpec) -> bool {
        let a = &node.allocatable;
        let r = &pod.requests;
        a.allowed_pod_number >= 1
            && r.milli_cpu <= a.milli_cpu
            && r.memory <= a.memory
            && r.ephemeral_storage <= a.ephemeral_storage
            && r.scalar.iter().all(|&(n, v)| {
                v == 0
                    || self.ignored(n)
                    || v <= a.scalar(n)
                    || self.delegated_to_dra(n, a.scalar(n))
            })
    }

    fn pod_request(&self, pod: &PodInfo, r: Scored) -> i64 {
        match r {
            Scored::Cpu => pod.non_zero_milli_cpu,
            Scored::Memory => pod.non_zero_memory,
            Scored::EphemeralStorage => pod.requests.ephemeral_storage,
            Scored::Scalar(n) => pod.requests.scalar(n),
        }
    }
}

/// Whether any requested resource grew from `old` to `new` allocatable.
/// Whether `new` requests less than `old` of something `pod` requests.
fn resources_shrank(pod: &PodInfo, old: &Resource, new: &Resource) -> bool {
    let r = &pod.requests;
    (r.milli_cpu > 0 && new.milli_cpu < old.milli_cpu)
        || (r.memory > 0 && new.memory < old.memory)
        || (r.ephemeral_storage > 0 && new.ephemeral_storage < old.ephemeral_storage)
        || r.scalar
            .iter()
            .any(|&(n, v)| v > 0 && new.scalar(n) < old.scalar(n))
}

fn allocatable_grew(pod: &PodInfo, old: &Resource, new: &Resource) -> bool {
    let r = &pod.requests;
    new.allowed_pod_number > old.allowed_pod_number
        || (r.milli_cpu > 0 && new.milli_cpu > old.milli_cpu)
        || (r.memory > 0 && new.memory > old.memory)
        || (r.ephemeral_storage > 0 && new.ephemeral_storage > old.ephemeral_storage)
        || r.scalar
            .iter()
            .any(|&(n, v)| v > 0 && new.scalar(n) > old.scalar(n))
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NODE_RESOURCES_FIT
    }

    fn node_local(&self, pod: &PodInfo) -> bool {
        // Extended resources may be served by DRA device classes, which
        // Filter reads from the object store.
        pod.requests.scalar.is_empty()
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let fit = Arc::new(Self {
            ignored_resources: self.ignored_resources.clone(),
            ignored_groups: self.ignored_groups.clone(),
            scored: Vec::new(),
            weights: Vec::new(),
            scorer: Scorer::LeastAllocated,
            objects: self.objects.clone(),
        });
        Some(vec![
            // A pod went away and freed its requests (an unbound pod that was
            // nominated nowhere freed nothing), or a bound pod was resized
            // in place to request less of something this pod needs.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::DELETE | ActionType::UPDATE_POD_SCALE_DOWN,
                ),
                |pod, old, new| {
                    let old = old.and_then(|o| o.as_pod());
                    Ok(match (old, new.and_then(|n| n.as_pod())) {
                        (Some(old), Some(new)) => {
                            if new.node_name.is_some()
                                && resources_shrank(pod, &old.requests, &new.requests)
                            {
                                QueueingHint::Queue
                            } else {
                                QueueingHint::Skip
                            }
                        }
                        (Some(p), None)
                            if p.node_name.is_none() && p.nominated_node_name.is_none() =>
                        {
                            QueueingHint::Skip
                        }
                        _ => QueueingHint::Queue,
                    })
                },
            ),
            // A node appeared or grew.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
                ),
                move |pod, old, new| {
                    let Some(new) = new.and_then(|n| n.as_node()) else {
                        return Ok(QueueingHint::Skip);
                    };
                    if !fit.fits_empty(pod, new) {
                        return Ok(QueueingHint::Skip);
                    }
                    Ok(match old.and_then(|o| o.as_node()) {
                        None => QueueingHint::Queue,
                        Some(old) if allocatable_grew(pod, &old.allocatable, &new.allocatable) => {
                            QueueingHint::Queue
                        }
                        Some(_)
                            if pod.requests.scalar.iter().any(|&(n, v)| {
                                v > 0 && fit.delegated_to_dra(n, new.allocatable.scalar(n))
                            }) =>
                        {
                            QueueingHint::Queue
                        }
                        Some(_) => QueueingHint::Skip,
                    })
                },
            ),
            // A DeviceClass may now back an extended resource the pod asks
            // for (DRAExtendedResource).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::DeviceClass,
                    ActionType::ADD | ActionType::UPDATE,
                ),
                |pod, old, new| {
                    let class = |o: Option<&crate::framework::EventObject>| match o
                        .and_then(|o| o.as_object())
                    {
                        Some(crate::cache::KubeObject::DeviceClass(c)) => Some(c.clone()),
                        _ => None,
                    };
                    let Some(new) = class(new) else {
                        return Err(
                            "unexpected object in isSchedulableAfterDeviceClassEvent".into()
                        );
                    };
                    let extended_name = |c: &k8s_openapi::api::resource::v1::DeviceClass| {
                        c.spec
                            .as_ref()
                            .and_then(|s| s.extended_resource_name.clone())
                    };
                    let requests = |name: &str| {
                        pod.requests
                            .scalar
                            .iter()
                            .any(|(n, _)| *n.as_str() == *name)
                    };
                    match class(old) {
                        Some(old) => {
                            if extended_name(&old) == extended_name(&new) {
                                return Ok(QueueingHint::Skip);
                            }
                        }
                        None => {
                            let implicit = format!(
                                "{}{}",
                                crate::cache::dra::IMPLICIT_EXTENDED_RESOURCE_PREFIX,
                                new.metadata.name.as_deref().unwrap_or("")
                            );
                            if requests(&implicit) {
                                return Ok(QueueingHint::Queue);
                            }
                        }
                    }
                    Ok(match extended_name(&new).as_deref() {
                        Some(name) if requests(name) => QueueingHint::Queue,
                        _ => QueueingHint::Skip,
                    })
                },
            ),
        ])
    }

    extension_points!(pre_filter, filter, pre_score, score);
}

#[async_trait]
impl PreFilterPlugin for NodeResourcesFit {
    async fn pre_filter(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        // The pod's requests are computed once when the pod is parsed
        // (PodInfo::requests); nothing else to prepare.
        (None, Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let (reasons, unresolvable) = self.insufficient(pod, node);
        if reasons.is_empty() {
            return Status::success();
        }
        let code = if unresolvable {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, reasons)
    }
}

#[async_trait]
impl PreScorePlugin for NodeResourcesFit {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        let requests = self
            .scored
            .iter()
            .map(|r| self.pod_request(pod, *r))
            .collect();
        state.write(&PRE_SCORE_KEY, PreScoreState(requests));
        Status::success()
    }
}

/// At most this many scored resources are handled without allocating.
const INLINE_RESOURCES: usize = 8;

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if self.scored.is_empty() {
            return Err(Status::error("resources not found"));
        }
        let computed;
        let pod_requests: &[i64] = match state.read(&PRE_SCORE_KEY) {
            Some(s) => &s.0,
            None => {
                computed = self
                    .scored
                    .iter()
                    .map(|r| self.pod_request(pod, *r))
                    .collect::<Vec<_>>();
                &computed
            }
        };
        let mut requested =
            smallvec::SmallVec::<[i64; INLINE_RESOURCES]>::from_elem(0, self.scored.len());
        let mut capacity =
            smallvec::SmallVec::<[i64; INLINE_RESOURCES]>::from_elem(0, self.scored.len());
        let alloc = node.allocatable();
        for (i, r) in self.scored.iter().enumerate() {
            let want = pod_requests[i];
            let (cap, req) = match *r {
                Scored::Cpu => (alloc.milli_cpu, node.non_zero_milli_cpu() + want),
                Scored::Memory => (alloc.memory, node.non_zero_memory() + want),
                Scored::EphemeralStorage => (
                    alloc.ephemeral_storage,
                    node.requested().ephemeral_storage + want,
                ),
                // A scalar resource the pod does not request is not scored.
                Scored::Scalar(_) if want == 0 => (0, 0),
                Scored::Scalar(n) => (alloc.scalar(n), node.requested().scalar(n) + want),
            };
            capacity[i] = cap;
            requested[i] = req;
        }
        Ok(self.scorer.score(&requested, &capacity, &self.weights))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::EventObject;
    use crate::framework::PluginArgs;
    use crate::testing::{make_node, make_pod};
    use serde_json::json;

    fn plugin(args: serde_json::Value) -> NodeResourcesFit {
        NodeResourcesFit::new(NodeResourcesFitArgs::parse(Some(&args), "args").unwrap()).unwrap()
    }

    fn node_with(cpu: &str, mem: &str, pods: &[(&str, &str, &str)]) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(
            make_node("n")
                .cpu(cpu)
                .memory(mem)
                .pods(3)
                .alloc("example.com/gpu", "2")
                .build(),
        ));
        for (name, c, m) in pods {
            n.add_pod(Arc::new(
                make_pod(name).req_cpu(c).req_memory(m).node("n").build(),
            ));
        }
        n
    }

    #[test]
    fn filter_verdicts() {
        let pl = plugin(json!({}));
        let st = CycleState::new();
        let node = node_with("4", "8Gi", &[("a", "2", "4Gi")]);
        let cases: Vec<(&str, PodInfo, Code, Vec<&str>)> = vec![
            (
                "fits",
                make_pod("p").req_cpu("2").req_memory("4Gi").build(),
                Code::Success,
                vec![],
            ),
            (
                "cpu short",
                make_pod("p").req_cpu("3").build(),
                Code::Unschedulable,
                vec!["Insufficient cpu"],
            ),
            (
                "cpu and memory short",
                make_pod("p").req_cpu("3").req_memory("5Gi").build(),
                Code::Unschedulable,
                vec!["Insufficient cpu", "Insufficient memory"],
            ),
            (
                "more than the whole node",
                make_pod("p").req_cpu("5").build(),
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient cpu"],
            ),
            (
                "extended resource",
                make_pod("p").req("example.com/gpu", "3").build(),
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient example.com/gpu"],
            ),
            (
                "extended resource absent",
                make_pod("p").req("example.com/fpga", "1").build(),
                Code::UnschedulableAndUnresolvable,
                vec!["Insufficient example.com/fpga"],
            ),
            ("no requests", make_pod("p").build(), Code::Success, vec![]),
        ];
        for (name, pod, code, reasons) in cases {
            let s = pl.filter(&st, &pod, &node);
            assert_eq!(s.code(), code, "{name}");
            assert_eq!(
                s.reasons().iter().map(|r| &**r).collect::<Vec<_>>(),
                reasons,
                "{name}"
            );
        }
    }

    #[test]
    fn pod_count_is_checked_first_and_never_unresolvable() {
        let pl = plugin(json!({}));
        let node = node_with(
            "4",
            "8Gi",
            &[("a", "1", "1Gi"), ("b", "1", "1Gi"), ("c", "1", "1Gi")],
        );
        let s = pl.filter(
            &CycleState::new(),
            &make_pod("p").req_cpu("2").build(),
            &node,
        );
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), "Too many pods, Insufficient cpu");
        let s = pl.filter(&CycleState::new(), &make_pod("p").build(), &node);
        assert_eq!(
            (s.code(), s.message().as_str()),
            (Code::Unschedulable, TOO_MANY_PODS)
        );
    }

    #[test]
    fn ignored_resources_and_groups() {
        let node = node_with("4", "8Gi", &[]);
        let pod = make_pod("p")
            .req("example.com/fpga", "1")
            .req("vendor.io/nic", "1")
            .build();
        let st = CycleState::new();
        assert!(
            !plugin(json!({"ignoredResources": ["example.com/fpga"]}))
                .filter(&st, &pod, &node)
                .is_success()
        );
        assert!(plugin(json!({"ignoredResources": ["example.com/fpga"], "ignoredResourceGroups": ["vendor.io"]}))
            .filter(&st, &pod, &node)
            .is_success());
        // Only extended resources can be ignored.
        let hugepages = make_pod("h").req("hugepages-2Mi", "4Mi").build();
        let s =
            plugin(json!({"ignoredResources": ["hugepages-2Mi"]})).filter(&st, &hugepages, &node);
        assert_eq!(s.message(), "Insufficient hugepages-2Mi");
    }

    #[tokio::test]
    async fn least_allocated_score_counts_non_zero_requests() {
        let pl = plugin(json!({}));
        // Node: 4 cpu, 10000 bytes... use round numbers in milli/bytes.
        let node = node_with("4", "10000", &[("a", "1", "2500")]);
        let pod = make_pod("p").req_cpu("2").req_memory("2500").build();
        let mut st = CycleState::new();
        assert!(pl.pre_score(&mut st, &pod, &[]).await.is_success());
        // cpu: (4000-3000)*100/4000 = 25; memory: (10000-5000)*100/10000 = 50
        assert_eq!(pl.score(&st, &pod, &node).unwrap(), 37);
        // A pod without requests counts 100m and 200Mi (more than this node has).
        let empty = make_pod("e").build();
        let mut st = CycleState::new();
        pl.pre_score(&mut st, &empty, &[]).await;
        // cpu: (4000-1100)*100/4000 = 72; memory over capacity: 0
        assert_eq!(pl.score(&st, &empty, &node).unwrap(), 36);
    }

    #[tokio::test]
    async fn most_allocated_and_weights() {
        let pl = plugin(
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}}),
        );
        let node = node_with("4", "10000", &[("a", "1", "2500")]);
        let pod = make_pod("p").req_cpu("2").req_memory("2500").build();
        let mut st = CycleState::new();
        pl.pre_score(&mut st, &pod, &[]).await;
        // cpu 75 * 3 + memory 50 * 1 = 275 / 4 = 68
        assert_eq!(pl.score(&st, &pod, &node).unwrap(), 68);
    }

    #[tokio::test]
    async fn scalar_resources_score_only_when_requested() {
        let pl = plugin(
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu"}, {"name": "example.com/gpu", "weight": 2}]}}),
        );
        let node = node_with("4", "8Gi", &[]);
        let cpu_only = make_pod("p").req_cpu("2").build();
        let mut st = CycleState::new();
        pl.pre_score(&mut st, &cpu_only, &[]).await;
        assert_eq!(pl.score(&st, &cpu_only, &node).unwrap(), 50);
        let with_gpu = make_pod("g")
            .req_cpu("2")
            .req("example.com/gpu", "1")
            .build();
        let mut st = CycleState::new();
        pl.pre_score(&mut st, &with_gpu, &[]).await;
        // (50*1 + 50*2)/3 = 50
        assert_eq!(pl.score(&st, &with_gpu, &node).unwrap(), 50);
    }

    #[test]
    fn hints() {
        let pl = plugin(json!({}));
        let regs = pl.events_to_register().unwrap();
        let pod = make_pod("p").req_cpu("2").build();
        let as_pod = |b: crate::testing::PodBuilder| Some(EventObject::Pod(Arc::new(b.build())));
        let delete = regs[0].hint.as_ref().unwrap();
        assert_eq!(
            delete(&pod, as_pod(make_pod("x").node("n")).as_ref(), None).unwrap(),
            QueueingHint::Queue
        );
        assert_eq!(
            delete(&pod, as_pod(make_pod("x")).as_ref(), None).unwrap(),
            QueueingHint::Skip
        );
        assert_eq!(
            delete(&pod, as_pod(make_pod("x").nominated("n")).as_ref(), None).unwrap(),
            QueueingHint::Queue
        );
        // In-place resize: only a bound pod shrinking something this pod
        // requests can make room.
        let resize = |old: crate::testing::PodBuilder, new: crate::testing::PodBuilder| {
            delete(&pod, as_pod(old).as_ref(), as_pod(new).as_ref()).unwrap()
        };
        let bound = |cpu: &str, mem: &str| make_pod("x").node("n").req_cpu(cpu).req_memory(mem);
        assert_eq!(
            resize(bound("2", "1Gi"), bound("1", "1Gi")),
            QueueingHint::Queue
        );
        assert_eq!(
            resize(bound("2", "2Gi"), bound("2", "1Gi")),
            QueueingHint::Skip,
            "memory shrank, the pod requests no memory"
        );
        assert_eq!(
            resize(bound("1", "1Gi"), bound("2", "1Gi")),
            QueueingHint::Skip,
            "grew"
        );
        assert_eq!(
            resize(make_pod("x").req_cpu("2"), make_pod("x").req_cpu("1")),
            QueueingHint::Skip,
            "an unbound pod holds nothing"
        );

        let node_ev = regs[1].hint.as_ref().unwrap();
        let as_node = |b: crate::testing::NodeBuilder| Some(EventObject::Node(Arc::new(b.build())));
        let small = as_node(make_node("n").cpu("1"));
        let big = as_node(make_node("n").cpu("4"));
        assert_eq!(
            node_ev(&pod, None, small.as_ref()).unwrap(),
            QueueingHint::Skip,
            "too small even empty"
        );
        assert_eq!(
            node_ev(&pod, None, big.as_ref()).unwrap(),
            QueueingHint::Queue
        );
        assert_eq!(
            node_ev(&pod, small.as_ref(), big.as_ref()).unwrap(),
            QueueingHint::Queue,
            "grew"
        );
        assert_eq!(
            node_ev(&pod, big.as_ref(), big.as_ref()).unwrap(),
            QueueingHint::Skip,
            "no growth"
        );
    }
}
