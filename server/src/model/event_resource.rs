//! The kinds of object cluster events are about: below the cache, which
//! names the kind of each object it stores, and the framework, whose
//! plugins register for events by kind.

/// The kind of object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// Any pod. Registering for `Pod` matches the three sub-kinds below.
    Pod,
    /// A pod bound to a node (incoming events only).
    AssignedPod,
    /// A pod not bound to a node (incoming events only).
    UnscheduledPod,
    /// A node.
    Node,
    /// A PersistentVolume.
    PersistentVolume,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A StorageClass.
    StorageClass,
    /// A CSINode.
    CsiNode,
    /// A PodDisruptionBudget.
    PodDisruptionBudget,
    /// A resource.k8s.io DeviceClass.
    DeviceClass,
    /// A resource.k8s.io ResourceClaim.
    ResourceClaim,
    /// A resource.k8s.io ResourceSlice.
    ResourceSlice,
    /// A resource.k8s.io DeviceTaintRule.
    DeviceTaintRule,
    /// A storage.k8s.io CSIDriver.
    CsiDriver,
    /// A storage.k8s.io CSIStorageCapacity.
    CsiStorageCapacity,
    /// Every resource.
    WildCard,
}

impl EventResource {
    /// The resource's name as upstream labels it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::AssignedPod => "AssignedPod",
            Self::UnscheduledPod => "UnschedulablePod",
            Self::Node => "Node",
            Self::PersistentVolume => "PersistentVolume",
            Self::PersistentVolumeClaim => "PersistentVolumeClaim",
            Self::StorageClass => "storage.k8s.io/StorageClass",
            Self::CsiNode => "storage.k8s.io/CSINode",
            Self::PodDisruptionBudget => "policy/PodDisruptionBudget",
            Self::DeviceClass => "resource.k8s.io/DeviceClass",
            Self::ResourceClaim => "resource.k8s.io/ResourceClaim",
            Self::ResourceSlice => "resource.k8s.io/ResourceSlice",
            Self::DeviceTaintRule => "resource.k8s.io/DeviceTaintRule",
            Self::CsiDriver => "storage.k8s.io/CSIDriver",
            Self::CsiStorageCapacity => "storage.k8s.io/CSIStorageCapacity",
            Self::WildCard => "*",
        }
    }
}
