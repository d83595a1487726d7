//! The names of the in-tree plugins, as configuration spells them.

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
/// Filter and Score on topology spread constraints.
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
/// Bind through the cluster's `pods/binding`.
pub const DEFAULT_BINDER: &str = "DefaultBinder";
