//! Storage capacity for claims to provision (CSIStorageCapacity, GA): what
//! upstream's `hasEnoughCapacity` works out, the node-independent part once
//! per claim at PreFilter, so that Filter only matches node labels.

use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};

use super::{Binder, UnboundClaim, name_of};
use crate::model::LabelSelector;
use crate::model::quantity::Quantity;

/// Upstream's `hasEnoughCapacity`, worked out once per claim: which
/// CSIStorageCapacity objects could take it.
#[derive(Debug, Clone, Default)]
pub enum CapacityCheck {
    /// Nothing to check: no storage request, or the provisioner is not a
    /// CSI driver that sets `storageCapacity`.
    #[default]
    Unchecked,
    /// The capacities of the claim's class large enough for it, in the
    /// store's order; a node needs one whose `nodeTopology` matches it.
    Candidates(Vec<RoomFor>),
}

/// A CSIStorageCapacity with room for a claim.
#[derive(Debug, Clone)]
pub struct RoomFor {
    /// Its `nodeTopology`.
    pub(super) topology: LabelSelector,
    /// Its `capacity` in bytes (what Score compares the request with).
    pub(super) capacity: i64,
}

/// A CSIStorageCapacity's limit for one volume: `maximumVolumeSize` if
/// set (it is more precise), else `capacity`.
fn volume_limit(c: &CSIStorageCapacity) -> Option<i64> {
    c.maximum_volume_size
        .as_ref()
        .or(c.capacity.as_ref())
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| q.value().unwrap_or(i64::MAX))
}

impl Binder {
    /// Upstream's `hasEnoughCapacity`, node-independent part: only for a
    /// claim with a storage request whose provisioner is a CSIDriver with
    /// `storageCapacity: true`, the capacities of its class that are large
    /// enough (`maximumVolumeSize`, else `capacity`) and reachable from
    /// some node (a `nodeTopology` is set).
    pub(super) fn capacity_check(
        &self,
        claim: &UnboundClaim,
        class: &StorageClass,
    ) -> CapacityCheck {
        if !claim.has_request {
            return CapacityCheck::Unchecked;
        }
        let Some(driver) = self.objects().csi_driver("", &class.provisioner) else {
            return CapacityCheck::Unchecked;
        };
        if driver.spec.storage_capacity != Some(true) {
            return CapacityCheck::Unchecked;
        }
        let class_name = name_of(&class.metadata);
        let room = self
            .objects()
            .csi_storage_capacities("")
            .into_iter()
            .filter(|c| c.storage_class_name == class_name)
            .filter(|c| volume_limit(c).is_some_and(|l| l >= claim.request))
            .filter_map(|c| {
                let selector = c.node_topology.as_ref()?;
                let topology = LabelSelector::parse(Some(selector), "nodeTopology").ok()?;
                let capacity = c
                    .capacity
                    .as_ref()
                    .and_then(|q| Quantity::parse(&q.0).ok())
                    .map_or(0, |q| q.value().unwrap_or(i64::MAX));
                Some(RoomFor { topology, capacity })
            })
            .collect();
        CapacityCheck::Candidates(room)
    }
}
