//! Dynamic Resource Allocation (`resource.k8s.io/v1`), pre-parsed.
//!
//! DeviceClasses, ResourceClaims and ResourceSlices are turned once, when
//! stored, into the compact forms the allocator reads: names shared as
//! `Arc<str>`, quantities (capacities, counters, capacity requests) as
//! integers of nano units, versions parsed, node selectors parsed, CEL
//! selectors compiled (one [`Selector`] per distinct expression, shared
//! through [`SelectorCache`]). Each device gets a `slot` (its identity,
//! `driver/pool/device`, as a small integer the allocator indexes by) and a
//! `key` (this version of it, for remembering selector verdicts).
//!
//! Nothing here allocates or parses while scheduling.
//!
//! Each kind lives in its own file: claims (`claim.rs`), classes
//! (`class.rs`), slices and their devices' slots (`slice.rs`), one device
//! and its parts (`device.rs`), with the pieces they share below them:
//! nano-unit quantities (`nano.rs`), versions (`semver.rs`), CEL selectors
//! (`cel.rs`) and their cache (`selectors.rs`). The claims the
//! resourceclaim controller makes from templates are in `template.rs`.

pub mod cel;
mod claim;
mod class;
mod device;
mod nano;
mod selectors;
mod semver;
mod slice;
mod template;

pub use self::cel::{Selector, SelectorError};
pub use claim::{
    AllocatedDevice, AllocationMode, Claim, Constraint, Consumer, ControllerRef, DeviceToleration,
    Request, RequestSpec, parse_claim, parse_claim_spec,
};
pub use class::{Class, parse_class};
pub use device::{
    Attr, AttrValue, Capacity, CounterConsumption, CounterSet, Device, DeviceTaint,
    DeviceTaintEffect, NodeSelection, RequestPolicy, qualify,
};
pub use nano::{CelQuantity, Nano};
pub use selectors::SelectorCache;
pub use semver::Semver;
pub use slice::{DeviceKey, DeviceSlots, PoolKey, Slice, SliceNodes, parse_slice};
pub use template::{POD_CLAIM_NAME_ANNOTATION, claim_from_template};

/// The finalizer the scheduler puts on claims it allocates.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// Most devices one claim's allocation may hold.
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;
/// Most alternatives a `firstAvailable` request may list (and the base of
/// DynamicResources' score).
pub const FIRST_AVAILABLE_MAX_SIZE: i64 = 8;

#[cfg(test)]
mod tests;
