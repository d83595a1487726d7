//! The names of the in-tree plugins, as configuration spells them: the
//! one place they are written (the default profile, the plugins'
//! registrations and their statuses all name them from here).

/// QueueSort by priority, then arrival.
pub const PRIORITY_SORT: &str = "PrioritySort";
/// PreEnqueue on `spec.schedulingGates`.
pub const SCHEDULING_GATES: &str = "SchedulingGates";
/// Filter on `spec.nodeName`.
pub const NODE_NAME: &str = "NodeName";
/// Filter on cordoned nodes.
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
/// Filter and Score on resource requests.
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
/// Score on how evenly a node's resources would be used.
pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
/// Filter and Score on node taints and the pod's tolerations.
pub const TAINT_TOLERATION: &str = "TaintToleration";
/// Filter and Score on `spec.nodeSelector` and node affinity.
pub const NODE_AFFINITY: &str = "NodeAffinity";
/// Filter on host ports in use.
pub const NODE_PORTS: &str = "NodePorts";
/// Score on the pod's images already present on a node.
pub const IMAGE_LOCALITY: &str = "ImageLocality";
/// Filter and Score on topology spread constraints.
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
/// Bind through the cluster's `pods/binding`.
pub const DEFAULT_BINDER: &str = "DefaultBinder";
/// PostFilter: preempt lower-priority pods.
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
/// Gang scheduling (QueueSort, PreEnqueue, Reserve, Permit); not default.
pub const COSCHEDULING: &str = "Coscheduling";
/// PodGroups' `minCount` (PreEnqueue, Permit, PlacementFeasible);
/// default with GenericWorkload.
pub const GANG_SCHEDULING: &str = "GangScheduling";
/// Filter and Score on inter-pod affinity and anti-affinity.
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
/// Filter on inline disks and ReadWriteOncePod claims that cannot be shared.
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
/// Filter on the zones of bound volumes.
pub const VOLUME_ZONE: &str = "VolumeZone";
/// Filter on CSI drivers' attachable volume limits.
pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";
/// Binds and provisions the pod's claims.
pub const VOLUME_BINDING: &str = "VolumeBinding";
/// Allocates the pod's ResourceClaims (Dynamic Resource Allocation).
pub const DYNAMIC_RESOURCES: &str = "DynamicResources";
/// Filter on the features a node declares (`status.declaredFeatures`).
pub const NODE_DECLARED_FEATURES: &str = "NodeDeclaredFeatures";
