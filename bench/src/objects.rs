//! The nodes and pods of the workloads, built directly as Kubernetes
//! objects, shaped like upstream scheduler_perf's templates
//! (`test/integration/scheduler_perf/templates/`): nodes of 4 CPU, 32Gi and
//! 110 pods, Ready; pods of one pause container requesting 100m and 500Mi,
//! with the affinity, spreading or priority of each template.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Node, NodeAffinity, NodeCondition, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, NodeStatus, Pod, PodAffinity, PodAffinityTerm,
    PodAntiAffinity, PodResourceClaim, PodSchedulingGroup, PodSpec, ResourceClaim,
    ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

/// The zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The hostname label.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), Quantity((*v).to_string())))
        .collect()
}

/// Node `i` of a workload: upstream's `node-default.yaml` (4 CPU, 32Gi, 110
/// pods, Ready), with the hostname label and its zone from `zones` (round
/// robin; no zone label when `zones` is empty).
pub fn node(i: usize, zones: &[&str]) -> Node {
    let name = node_name(i);
    let mut labels = BTreeMap::from([(HOSTNAME_LABEL.to_string(), name.clone())]);
    if !zones.is_empty() {
        labels.insert(ZONE_LABEL.into(), zones[i % zones.len()].to_string());
    }
    let resources = quantities(&[("cpu", "4"), ("memory", "32Gi"), ("pods", "110")]);
    Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(Default::default()),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// The DRA driver of scheduler_perf's DRA workloads.
pub const DRA_DRIVER: &str = "test-driver.cdi.k8s.io";
/// Its DeviceClass.
pub const DEVICE_CLASS: &str = "test-class";
/// The ResourceClaimTemplate the claim template pods name.
pub const CLAIM_TEMPLATE: &str = "test-claim-template";

/// The DeviceClass of the DRA workloads: every device of the test driver,
/// selected by CEL as upstream's `deviceclass.yaml` does.
pub fn device_class() -> DeviceClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}}]},
    }))
    .expect("a valid DeviceClass")
}

/// Node `i`'s ResourceSlice: one pool named after the node, `devices`
/// devices (`device-00`, ...), as upstream's `resourceslice.yaml`.
pub fn resource_slice(i: usize, devices: usize) -> ResourceSlice {
    let node = node_name(i);
    let devices: Vec<_> = (0..devices)
        .map(|d| serde_json::json!({"name": format!("device-{d:02}")}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{node}-{DRA_DRIVER}")},
        "spec": {
            "nodeName": node,
            "driver": DRA_DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
    .expect("a valid ResourceSlice")
}

/// The ResourceClaimTemplate in `namespace`: one request for one device of
/// the class.
pub fn claim_template(namespace: &str) -> ResourceClaimTemplate {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": CLAIM_TEMPLATE, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "req-0", "exactly": {"deviceClassName": DEVICE_CLASS}},
        ]}}},
    }))
    .expect("a valid ResourceClaimTemplate")
}

/// The pod templates of upstream's scheduler_perf that the workloads use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodTemplate {
    /// `pod-default.yaml`: 100m CPU, 500Mi.
    Default,
    /// `pod-low-priority.yaml`: 900m CPU, 500Mi, priority 0.
    LowPriority,
    /// `pod-high-priority.yaml`: 3 CPU, 500Mi, priority 10.
    HighPriority,
    /// `pod-high-priority-large-cpu.yaml`: 9 CPU (more than any node has),
    /// priority 10: never fits.
    HighPriorityLargeCpu,
    /// `pod-with-pod-anti-affinity.yaml`: label color=green, required
    /// anti-affinity to color=green pods by hostname (namespaces sched-0 and
    /// sched-1).
    PodAntiAffinity,
    /// `pod-with-pod-affinity.yaml`: label color=blue, required affinity to
    /// color=blue pods by zone (namespaces sched-0 and sched-1).
    PodAffinity,
    /// `pod-with-topology-spreading.yaml`: color=blue, maxSkew 5 by zone,
    /// DoNotSchedule.
    TopologySpreading,
    /// `pod-with-preferred-topology-spreading.yaml`: the same with
    /// ScheduleAnyway.
    PreferredTopologySpreading,
    /// `pod-with-node-affinity.yaml`: required zone in [zone1, zone2].
    NodeAffinity,
    /// `pod-with-claim-template.yaml`: the default pod with one claim made
    /// from [`CLAIM_TEMPLATE`], used by its container.
    ClaimTemplate,
    /// A replica of a Deployment behind a Service: the default pod labelled
    /// `app=web` and controlled by the ReplicaSet [`REPLICA_SET`], with no
    /// constraints of its own, so that the system default spreading
    /// constraints apply (see [`deployment_objects`]).
    Replicated,
}

/// The ReplicaSet (and Service) the replicated pods belong to.
pub const REPLICA_SET: &str = "web";

/// The Service selecting the replicated pods and their ReplicaSet, in
/// `namespace`: what PodTopologySpread's system defaults derive their
/// selector from.
pub fn deployment_objects(namespace: &str) -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": REPLICA_SET, "namespace": namespace},
            "spec": {"selector": {"app": REPLICA_SET}, "ports": [{"port": 80}]},
        }),
        serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": REPLICA_SET, "namespace": namespace, "uid": "web-rs-uid"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": REPLICA_SET}},
                "template": {
                    "metadata": {"labels": {"app": REPLICA_SET}},
                    "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        }),
    ]
}

/// The objects one tick of SchedulingWithMixedChurn creates, as upstream's
/// churn op with `node-default.yaml`, `pod-high-priority-large-cpu.yaml`,
/// `service.yaml` and `pvc.yaml`: a node, a pod that never fits (its
/// preemption attempts run against the measured pods), a Service and a
/// claim, all named after `tick`.
pub fn churn_objects(tick: usize, zones: &[&str]) -> (Node, Pod, Vec<serde_json::Value>) {
    let mut n = node(tick, zones);
    let name = format!("churn-node-{tick}");
    n.metadata.name = Some(name.clone());
    if let Some(labels) = n.metadata.labels.as_mut() {
        labels.insert(HOSTNAME_LABEL.to_string(), name);
    }
    let pod = PodTemplate::HighPriorityLargeCpu.pod("default", &format!("churn-pod-{tick}"));
    let others = vec![
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": format!("churn-svc-{tick}"), "namespace": "default"},
            "spec": {"selector": {"app": "churn"}, "ports": [{"port": 80}]},
        }),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("churn-pvc-{tick}"), "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }),
    ];
    (n, pod, others)
}

/// A PodGroup of the gang workloads (upstream's
/// `podgroup/gangscheduling/templates/podgroup.yaml`): a gang policy whose
/// `minCount` is the gang's size.
pub fn pod_group(namespace: &str, name: &str, min_count: usize) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    })
}

/// The Namespace object named `name`.
pub fn namespace(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A member of the gang `group`: `template`'s pod naming the PodGroup in
/// `spec.schedulingGroup.podGroupName`; with `too_big`, asking for 9 CPUs
/// (more than any node has), so that its gang cannot fit as a whole.
pub fn gang_member(
    template: PodTemplate,
    namespace: &str,
    name: &str,
    group: &str,
    too_big: bool,
) -> Pod {
    let mut pod = template.pod(namespace, name);
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_group = Some(PodSchedulingGroup {
            pod_group_name: Some(group.to_string()),
        });
        if too_big {
            let cpu = Quantity("9".into());
            for c in &mut spec.containers {
                let Some(r) = c.resources.as_mut() else {
                    continue;
                };
                for q in [r.requests.as_mut(), r.limits.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    q.insert("cpu".into(), cpu.clone());
                }
            }
        }
    }
    pod
}

impl PodTemplate {
    /// The name stem of pods made from the template.
    pub fn stem(self) -> &'static str {
        match self {
            Self::Default => "pod",
            Self::LowPriority => "low",
            Self::HighPriority => "high",
            Self::HighPriorityLargeCpu => "large",
            Self::PodAntiAffinity => "anti-affinity",
            Self::PodAffinity => "affinity",
            Self::TopologySpreading => "spreading",
            Self::PreferredTopologySpreading => "preferred-spreading",
            Self::NodeAffinity => "node-affinity",
            Self::ClaimTemplate => "claim",
            Self::Replicated => "web",
        }
    }

    /// A pod of this template named `name` in `namespace` (not bound).
    pub fn pod(self, namespace: &str, name: &str) -> Pod {
        let (cpu, priority) = match self {
            Self::LowPriority => ("900m", None),
            Self::HighPriority => ("3", Some(10)),
            Self::HighPriorityLargeCpu => ("9", Some(10)),
            _ => ("100m", None),
        };
        let requests = quantities(&[("cpu", cpu), ("memory", "500Mi")]);
        // The large-CPU template sets requests only; the others set limits
        // equal to requests.
        let limits = (self != Self::HighPriorityLargeCpu).then(|| requests.clone());
        let mut labels = BTreeMap::new();
        let color = |c: &str| LabelSelector {
            match_labels: Some(BTreeMap::from([("color".to_string(), c.to_string())])),
            ..Default::default()
        };
        let namespaces = Some(vec!["sched-1".to_string(), "sched-0".to_string()]);
        let mut affinity = None;
        let mut spread = None;
        match self {
            Self::PodAntiAffinity => {
                labels.insert("color".to_string(), "green".to_string());
                affinity = Some(Affinity {
                    pod_anti_affinity: Some(PodAntiAffinity {
                        required_during_scheduling_ignored_during_execution: Some(vec![
                            PodAffinityTerm {
                                label_selector: Some(color("green")),
                                topology_key: HOSTNAME_LABEL.into(),
                                namespaces,
                                ..Default::default()
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            Self::PodAffinity => {
                labels.insert("color".to_string(), "blue".to_string());
                affinity = Some(Affinity {
                    pod_affinity: Some(PodAffinity {
                        required_during_scheduling_ignored_during_execution: Some(vec![
                            PodAffinityTerm {
                                label_selector: Some(color("blue")),
                                topology_key: ZONE_LABEL.into(),
                                namespaces,
                                ..Default::default()
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            Self::TopologySpreading | Self::PreferredTopologySpreading => {
                labels.insert("color".to_string(), "blue".to_string());
                let when = if self == Self::TopologySpreading {
                    "DoNotSchedule"
                } else {
                    "ScheduleAnyway"
                };
                spread = Some(vec![TopologySpreadConstraint {
                    max_skew: 5,
                    topology_key: ZONE_LABEL.into(),
                    when_unsatisfiable: when.into(),
                    label_selector: Some(color("blue")),
                    ..Default::default()
                }]);
            }
            Self::NodeAffinity => {
                affinity = Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: Some(vec![NodeSelectorRequirement {
                                    key: ZONE_LABEL.into(),
                                    operator: "In".into(),
                                    values: Some(vec!["zone1".into(), "zone2".into()]),
                                }]),
                                ..Default::default()
                            }],
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            Self::Replicated => {
                labels.insert("app".to_string(), REPLICA_SET.to_string());
            }
            _ => {}
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: (!labels.is_empty()).then_some(labels),
                owner_references: (self == Self::Replicated).then(|| {
                    vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        name: REPLICA_SET.into(),
                        uid: "web-rs-uid".into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority,
                termination_grace_period_seconds: (self == Self::LowPriority).then_some(0),
                affinity,
                topology_spread_constraints: spread,
                containers: vec![Container {
                    name: "pause".into(),
                    image: Some("registry.k8s.io/pause:3.10".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        limits,
                        claims: (self == Self::ClaimTemplate).then(|| {
                            vec![ResourceClaim {
                                name: "resource".into(),
                                ..Default::default()
                            }]
                        }),
                    }),
                    ..Default::default()
                }],
                resource_claims: (self == Self::ClaimTemplate).then(|| {
                    vec![PodResourceClaim {
                        name: "resource".into(),
                        resource_claim_template_name: Some(CLAIM_TEMPLATE.into()),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use berth_server::model::{NodeSpec, PodInfo};

    use super::*;

    #[test]
    fn templates_parse_as_the_scheduler_reads_them() {
        let n = NodeSpec::new(Arc::new(node(4, &["a", "b", "c"]))).unwrap();
        assert_eq!(n.allocatable.milli_cpu, 4000);
        assert_eq!(n.allocatable.memory, 32 << 30);
        assert_eq!(n.allocatable.allowed_pod_number, 110);
        for t in [
            PodTemplate::Default,
            PodTemplate::LowPriority,
            PodTemplate::HighPriority,
            PodTemplate::HighPriorityLargeCpu,
            PodTemplate::PodAntiAffinity,
            PodTemplate::PodAffinity,
            PodTemplate::TopologySpreading,
            PodTemplate::PreferredTopologySpreading,
            PodTemplate::NodeAffinity,
            PodTemplate::ClaimTemplate,
        ] {
            let mut pod = t.pod("ns", "p");
            pod.metadata.uid = Some("u".into());
            let info = PodInfo::new(Arc::new(pod)).unwrap();
            let cpu = match t {
                PodTemplate::LowPriority => 900,
                PodTemplate::HighPriority => 3000,
                PodTemplate::HighPriorityLargeCpu => 9000,
                _ => 100,
            };
            assert_eq!(info.requests.milli_cpu, cpu, "{t:?}");
            assert_eq!(info.requests.memory, 500 << 20, "{t:?}");
            assert_eq!(
                info.resource_claims.len(),
                usize::from(t == PodTemplate::ClaimTemplate)
            );
        }
    }

    #[test]
    fn gang_members_name_their_group() {
        let mut pod = gang_member(PodTemplate::Default, "ns", "g-0-1", "g-0", false);
        pod.metadata.uid = Some("u".into());
        let info = PodInfo::new(Arc::new(pod)).unwrap();
        assert_eq!(info.scheduling_group.as_deref(), Some("g-0"));
        assert_eq!(info.requests.milli_cpu, 100);
        let mut big = gang_member(PodTemplate::Default, "ns", "g-0-2", "g-0", true);
        big.metadata.uid = Some("v".into());
        let info = PodInfo::new(Arc::new(big)).unwrap();
        assert_eq!(info.requests.milli_cpu, 9000);
        assert_eq!(info.priority, 0, "the PodGroup's priority");
        let pg = pod_group("ns", "g-0", 8);
        assert_eq!(pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 8);
    }

    #[test]
    fn dra_objects_parse() {
        use berth_server::model::dra::{DeviceSlots, SelectorCache, parse_class, parse_slice};
        let mut cache = SelectorCache::default();
        let mut slots = DeviceSlots::default();
        parse_class(&mut cache, Arc::new(device_class())).unwrap();
        let s = parse_slice(&mut slots, &resource_slice(3, 10)).unwrap();
        assert_eq!(s.devices.len(), 10);
        let t = claim_template("ns");
        assert_eq!(
            t.spec
                .unwrap()
                .spec
                .unwrap()
                .devices
                .unwrap()
                .requests
                .unwrap()
                .len(),
            1
        );
    }
}
