//! Cluster events and queueing hints.
//!
//! A pod rejected by some plugins waits among the unschedulable pods until a
//! cluster event arrives that one of those plugins registered for and whose
//! queueing hint says the event may make the pod schedulable. An event is a
//! resource and an action; registrations are matched against incoming events
//! by [`ClusterEvent::matches`].

use std::fmt;
use std::sync::Arc;

pub use crate::model::EventResource;
use crate::model::{NodeSpec, PodInfo, PodRef};

/// What happened to the object: a bit set, so that one registration can
/// cover several actions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionType(u32);

impl ActionType {
    /// Created.
    pub const ADD: Self = Self(1);
    /// Deleted.
    pub const DELETE: Self = Self(1 << 1);
    /// A node's allocatable changed.
    pub const UPDATE_NODE_ALLOCATABLE: Self = Self(1 << 2);
    /// A node's labels changed.
    pub const UPDATE_NODE_LABEL: Self = Self(1 << 3);
    /// A node's taints changed, or it was uncordoned.
    pub const UPDATE_NODE_TAINT: Self = Self(1 << 4);
    /// A node's condition statuses changed.
    pub const UPDATE_NODE_CONDITION: Self = Self(1 << 5);
    /// A node's annotations changed.
    pub const UPDATE_NODE_ANNOTATION: Self = Self(1 << 6);
    /// A node's `status.declaredFeatures` changed.
    pub const UPDATE_NODE_DECLARED_FEATURE: Self = Self(1 << 7);
    /// A pod's labels changed.
    pub const UPDATE_POD_LABEL: Self = Self(1 << 8);
    /// A pod's requests went down.
    pub const UPDATE_POD_SCALE_DOWN: Self = Self(1 << 9);
    /// A pod's tolerations changed.
    pub const UPDATE_POD_TOLERATION: Self = Self(1 << 10);
    /// A pod's last scheduling gate was removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: Self = Self(1 << 11);
    /// A pod's `status.resourceClaimStatuses` changed (the resourceclaim
    /// controller created a claim from one of its templates).
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: Self = Self(1 << 12);
    /// Any update.
    pub const UPDATE: Self = Self(((1 << 13) - 1) & !3);
    /// Anything.
    pub const ALL: Self = Self((1 << 13) - 1);

    /// Whether the two sets share an action.
    pub fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether every action of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    fn name(self) -> String {
        const NAMES: [&str; 13] = [
            "Add",
            "Delete",
            "UpdateNodeAllocatable",
            "UpdateNodeLabel",
            "UpdateNodeTaint",
            "UpdateNodeCondition",
            "UpdateNodeAnnotation",
            "UpdateNodeDeclaredFeature",
            "UpdatePodLabel",
            "UpdatePodScaleDown",
            "UpdatePodToleration",
            "UpdatePodSchedulingGatesEliminated",
            "UpdatePodGeneratedResourceClaim",
        ];
        if self == Self::ALL {
            return "All".into();
        }
        if self == Self::UPDATE {
            return "Update".into();
        }
        NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join("|")
    }
}

impl std::ops::BitOr for ActionType {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Debug for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A resource and an action, optionally with a custom label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// What kind of object.
    pub resource: EventResource,
    /// What happened to it.
    pub action: ActionType,
    /// A label replacing the default `<Resource><Action>` one.
    pub label: Option<&'static str>,
}

impl ClusterEvent {
    /// An event without a custom label.
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        Self {
            resource,
            action,
            label: None,
        }
    }

    /// Pods stayed among the unschedulable pods past the maximum stay.
    pub const UNSCHEDULABLE_TIMEOUT: Self = Self {
        resource: EventResource::WildCard,
        action: ActionType::ALL,
        label: Some("UnschedulableTimeout"),
    };
    /// A pod was activated explicitly.
    pub const FORCE_ACTIVATE: Self = Self {
        resource: EventResource::WildCard,
        action: ActionType::ALL,
        label: Some("ForceActivate"),
    };
    /// A pod failed a scheduling attempt (the label of the requeue).
    pub const SCHEDULE_ATTEMPT_FAILURE: Self = Self {
        resource: EventResource::WildCard,
        action: ActionType::ALL,
        label: Some("ScheduleAttemptFailure"),
    };
    /// A pod's backoff ended.
    pub const BACKOFF_COMPLETE: Self = Self {
        resource: EventResource::WildCard,
        action: ActionType::ALL,
        label: Some("BackoffComplete"),
    };
    /// A bound pod appeared.
    pub const ASSIGNED_POD_ADD: Self = Self::new(EventResource::AssignedPod, ActionType::ADD);
    /// A bound pod went away (or an assumed pod was forgotten).
    pub const ASSIGNED_POD_DELETE: Self = Self::new(EventResource::AssignedPod, ActionType::DELETE);
    /// A pending pod appeared.
    pub const UNSCHEDULED_POD_ADD: Self = Self::new(EventResource::UnscheduledPod, ActionType::ADD);
    /// A node appeared.
    pub const NODE_ADD: Self = Self::new(EventResource::Node, ActionType::ADD);
    /// A node went away.
    pub const NODE_DELETE: Self = Self::new(EventResource::Node, ActionType::DELETE);

    /// Whether this is the match-everything event.
    pub fn is_wildcard(&self) -> bool {
        self.resource == EventResource::WildCard && self.action == ActionType::ALL
    }

    /// Whether an incoming event matches this registered one: the registered
    /// event is the wildcard, or the resources match (a registered `Pod`
    /// covers assigned and unscheduled pods; a registered `*` any resource),
    /// the actions intersect and the incoming action is no broader than the
    /// registered one.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        if self.is_wildcard() {
            return true;
        }
        let resource = self.resource == EventResource::WildCard
            || self.resource == incoming.resource
            || (self.resource == EventResource::Pod
                && matches!(
                    incoming.resource,
                    EventResource::AssignedPod | EventResource::UnscheduledPod
                ));
        resource
            && self.action.intersects(incoming.action)
            && incoming.action.bits() <= self.action.bits()
    }

    /// The event's label, e.g. `NodeAdd` or `UnschedulableTimeout`.
    pub fn label(&self) -> String {
        match self.label {
            Some(l) => l.to_string(),
            None => format!("{}{}", self.resource.as_str(), self.action.name()),
        }
    }
}

/// The object an event carries (before or after the change).
#[derive(Debug, Clone)]
pub enum EventObject {
    /// A pod.
    Pod(PodRef),
    /// A node.
    Node(Arc<NodeSpec>),
    /// Another object (volume, claim, storage class, ...).
    Object(crate::cache::KubeObject),
}

impl EventObject {
    /// The pod, if this is one.
    pub fn as_pod(&self) -> Option<&PodInfo> {
        match self {
            Self::Pod(p) => Some(p),
            _ => None,
        }
    }

    /// The node, if this is one.
    pub fn as_node(&self) -> Option<&NodeSpec> {
        match self {
            Self::Node(n) => Some(n),
            _ => None,
        }
    }

    /// The other object, if this is one.
    pub fn as_object(&self) -> Option<&crate::cache::KubeObject> {
        match self {
            Self::Object(o) => Some(o),
            _ => None,
        }
    }
}

/// A plugin's verdict on whether an event may make a pod it rejected
/// schedulable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    /// The event cannot help the pod.
    Skip,
    /// The event may help; requeue the pod.
    Queue,
}

/// Decides, for a pod the plugin rejected, whether an event may help it.
/// Arguments: the pending pod, the object before and after the event. An
/// error is treated as `Queue`.
pub type QueueingHintFn = Arc<
    dyn Fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> Result<QueueingHint, String>
        + Send
        + Sync,
>;

/// A registration: an event and, optionally, the hint deciding whether it
/// requeues a rejected pod (none: it always does).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    /// The event registered for.
    pub event: ClusterEvent,
    /// The hint; `None` means always `Queue`.
    pub hint: Option<QueueingHintFn>,
}

impl ClusterEventWithHint {
    /// A registration without a hint: the event always requeues.
    pub fn always(event: ClusterEvent) -> Self {
        Self { event, hint: None }
    }

    /// A registration with a hint.
    pub fn with_hint(
        event: ClusterEvent,
        hint: impl Fn(
            &PodInfo,
            Option<&EventObject>,
            Option<&EventObject>,
        ) -> Result<QueueingHint, String>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            event,
            hint: Some(Arc::new(hint)),
        }
    }
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}",
            self.event.label(),
            if self.hint.is_some() { " (hint)" } else { "" }
        )
    }
}

/// The registrations of a plugin that declares none: every event of every
/// resource, each always requeueing.
pub fn wildcard_registrations() -> Vec<ClusterEventWithHint> {
    use EventResource::*;
    [
        Pod,
        Node,
        PersistentVolume,
        PersistentVolumeClaim,
        StorageClass,
        CsiNode,
        PodDisruptionBudget,
        DeviceClass,
        ResourceClaim,
        ResourceSlice,
        DeviceTaintRule,
        CsiDriver,
        CsiStorageCapacity,
    ]
    .into_iter()
    .map(|r| ClusterEventWithHint::always(ClusterEvent::new(r, ActionType::ALL)))
    .collect()
}

/// The events a change of a pod amounts to: which of the properties the
/// scheduler cares about changed. Falls back to a generic update.
pub fn pod_scheduling_property_changes(old: &PodInfo, new: &PodInfo) -> Vec<ClusterEvent> {
    let resource = if new.node_name.is_some() {
        EventResource::AssignedPod
    } else {
        EventResource::UnscheduledPod
    };
    let mut actions = Vec::new();
    if old.labels != new.labels {
        actions.push(ActionType::UPDATE_POD_LABEL);
    }
    if requests_went_down(&old.requests, &new.requests) {
        actions.push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    if !old.scheduling_gates.is_empty() && new.scheduling_gates.is_empty() {
        actions.push(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    if old.tolerations.len() != new.tolerations.len() {
        actions.push(ActionType::UPDATE_POD_TOLERATION);
    }
    if old.resource_claims != new.resource_claims {
        actions.push(ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM);
    }
    if actions.is_empty() {
        actions.push(ActionType::UPDATE);
    }
    actions
        .into_iter()
        .map(|a| ClusterEvent::new(resource, a))
        .collect()
}

fn requests_went_down(old: &crate::model::Resource, new: &crate::model::Resource) -> bool {
    new.milli_cpu < old.milli_cpu
        || new.memory < old.memory
        || new.ephemeral_storage < old.ephemeral_storage
        || old.scalar.iter().any(|&(n, v)| new.scalar(n) < v)
}

/// The events a change of a node amounts to; empty when nothing the
/// scheduler cares about changed (heartbeats).
pub fn node_scheduling_property_changes(old: &NodeSpec, new: &NodeSpec) -> Vec<ClusterEvent> {
    let mut actions = Vec::new();
    if old.unschedulable != new.unschedulable && !new.unschedulable {
        actions.push(ActionType::UPDATE_NODE_TAINT);
    }
    if old.allocatable != new.allocatable {
        actions.push(ActionType::UPDATE_NODE_ALLOCATABLE);
    }
    if old.labels != new.labels {
        actions.push(ActionType::UPDATE_NODE_LABEL);
    }
    if old.taints != new.taints {
        actions.push(ActionType::UPDATE_NODE_TAINT);
    }
    let conditions = |n: &NodeSpec| -> Vec<(String, String)> {
        let mut c: Vec<(String, String)> = n
            .node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        c.sort();
        c
    };
    if conditions(old) != conditions(new) {
        actions.push(ActionType::UPDATE_NODE_CONDITION);
    }
    if old.node.metadata.annotations != new.node.metadata.annotations {
        actions.push(ActionType::UPDATE_NODE_ANNOTATION);
    }
    let declared = |n: &NodeSpec| {
        n.node
            .status
            .as_ref()
            .and_then(|s| s.declared_features.clone())
    };
    if declared(old) != declared(new) {
        actions.push(ActionType::UPDATE_NODE_DECLARED_FEATURE);
    }
    actions.dedup();
    actions
        .into_iter()
        .map(|a| ClusterEvent::new(EventResource::Node, a))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventResource::*;

    #[test]
    fn matching_rules() {
        let node_add_taint =
            ClusterEvent::new(Node, ActionType::ADD | ActionType::UPDATE_NODE_TAINT);
        let pod_delete = ClusterEvent::new(Pod, ActionType::DELETE);
        let cases = [
            (
                "same resource and action",
                node_add_taint,
                ClusterEvent::NODE_ADD,
                true,
            ),
            (
                "one action of several",
                node_add_taint,
                ClusterEvent::new(Node, ActionType::UPDATE_NODE_TAINT),
                true,
            ),
            (
                "other action",
                node_add_taint,
                ClusterEvent::new(Node, ActionType::UPDATE_NODE_LABEL),
                false,
            ),
            (
                "other resource",
                node_add_taint,
                ClusterEvent::ASSIGNED_POD_ADD,
                false,
            ),
            (
                "Pod covers assigned pods",
                pod_delete,
                ClusterEvent::ASSIGNED_POD_DELETE,
                true,
            ),
            (
                "Pod covers unscheduled pods",
                pod_delete,
                ClusterEvent::new(UnscheduledPod, ActionType::DELETE),
                true,
            ),
            (
                "assigned does not cover unscheduled",
                ClusterEvent::ASSIGNED_POD_DELETE,
                ClusterEvent::new(UnscheduledPod, ActionType::DELETE),
                false,
            ),
            (
                "broad incoming update vs narrow registration",
                ClusterEvent::new(Node, ActionType::UPDATE_NODE_LABEL),
                ClusterEvent::new(Node, ActionType::UPDATE),
                false,
            ),
            (
                "wildcard registration matches all",
                ClusterEvent::new(WildCard, ActionType::ALL),
                ClusterEvent::NODE_DELETE,
                true,
            ),
            (
                "wildcard resource",
                ClusterEvent::new(WildCard, ActionType::ADD),
                ClusterEvent::NODE_ADD,
                true,
            ),
            (
                "incoming wildcard needs a wildcard registration",
                node_add_taint,
                ClusterEvent::UNSCHEDULABLE_TIMEOUT,
                false,
            ),
        ];
        for (name, registered, incoming, want) in cases {
            assert_eq!(registered.matches(&incoming), want, "{name}");
        }
    }

    #[test]
    fn pod_changes() {
        use crate::testing::make_pod;
        let base = make_pod("p").req_cpu("1").gate("g").build();
        let labelled = make_pod("p").req_cpu("1").gate("g").label("a", "b").build();
        let smaller = make_pod("p").req_cpu("500m").gate("g").build();
        let ungated = make_pod("p").req_cpu("1").build();
        let tolerant = make_pod("p")
            .req_cpu("1")
            .gate("g")
            .toleration("k", "Exists", "", "")
            .build();
        let bound = make_pod("p").req_cpu("1").gate("g").node("n").build();
        let act = |a: &PodInfo, b: &PodInfo| {
            pod_scheduling_property_changes(a, b)
                .iter()
                .map(|e| e.action)
                .collect::<Vec<_>>()
        };
        assert_eq!(act(&base, &labelled), [ActionType::UPDATE_POD_LABEL]);
        assert_eq!(act(&base, &smaller), [ActionType::UPDATE_POD_SCALE_DOWN]);
        assert_eq!(
            act(&base, &ungated),
            [ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED]
        );
        assert_eq!(act(&base, &tolerant), [ActionType::UPDATE_POD_TOLERATION]);
        assert_eq!(act(&base, &base), [ActionType::UPDATE]);
        assert_eq!(
            pod_scheduling_property_changes(&base, &bound)[0].resource,
            EventResource::AssignedPod
        );
    }

    #[test]
    fn node_changes() {
        use crate::testing::make_node;
        let base = make_node("n").cpu("1").unschedulable().build();
        let act = |a: &NodeSpec, b: &NodeSpec| {
            node_scheduling_property_changes(a, b)
                .iter()
                .map(|e| e.action)
                .collect::<Vec<_>>()
        };
        assert!(act(&base, &base).is_empty(), "heartbeat");
        assert_eq!(
            act(&base, &make_node("n").cpu("1").build()),
            [ActionType::UPDATE_NODE_TAINT],
            "uncordoned"
        );
        assert!(
            act(&make_node("n").cpu("1").build(), &base).is_empty(),
            "cordoning is no help to pending pods"
        );
        assert_eq!(
            act(&base, &make_node("n").cpu("2").unschedulable().build()),
            [ActionType::UPDATE_NODE_ALLOCATABLE]
        );
        assert_eq!(
            act(
                &base,
                &make_node("n")
                    .cpu("1")
                    .unschedulable()
                    .label("a", "b")
                    .build()
            ),
            [ActionType::UPDATE_NODE_LABEL]
        );
        assert_eq!(
            act(
                &base,
                &make_node("n")
                    .cpu("1")
                    .unschedulable()
                    .taint("k", "v", "NoSchedule")
                    .build()
            ),
            [ActionType::UPDATE_NODE_TAINT]
        );
    }

    #[test]
    fn labels() {
        assert_eq!(ClusterEvent::NODE_ADD.label(), "NodeAdd");
        assert_eq!(
            ClusterEvent::ASSIGNED_POD_DELETE.label(),
            "AssignedPodDelete"
        );
        assert_eq!(
            ClusterEvent::UNSCHEDULABLE_TIMEOUT.label(),
            "UnschedulableTimeout"
        );
        assert_eq!(
            ClusterEvent::new(Node, ActionType::ADD | ActionType::UPDATE_NODE_TAINT).label(),
            "NodeAdd|UpdateNodeTaint"
        );
    }
}
