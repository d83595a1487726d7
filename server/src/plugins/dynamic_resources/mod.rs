//! DynamicResources: allocates a pod's ResourceClaims (Dynamic Resource
//! Allocation with structured parameters) as part of scheduling it.

pub mod allocator;
