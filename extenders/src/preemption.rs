//! Preemption's what-if for Filter handlers (`PreemptionFilterRequest`,
//! see "Preemption" in the protocol's header).
//!
//! When a pod preempts, berthd asks every Filter of the profile, once per
//! attempt, about each candidate node: would the pod fit once pods are
//! evicted there? A candidate lists every pod preemption may evict
//! ([`PreemptionCandidate::pods`], the most important first) and marks
//! those berthd's own Filter plugins need evicted (the victims).
//!
//! The SDK answers for any [`Filter`](crate::Filter) handler by calling its
//! per-node [`Filter::filter`](crate::Filter::filter) with a context whose
//! pod table leaves the evicted pods out ([`Context::pods`](crate::Context::pods),
//! [`Pods::without`](crate::Pods::without)), as kube-scheduler runs its own
//! Filter plugins on a node with the victims removed ([`judge`]):
//!
//! 1. with every listed pod gone: a rejection refuses the candidate;
//! 2. with the victims gone: a pass keeps berthd's victims;
//! 3. otherwise, every listed pod gone, each given back in the order
//!    listed and kept back if the pod still fits: the ones that stay gone
//!    are the pods this extender needs evicted.
//!
//! A handler that reads the pods of a node from
//! [`Context::pods`](crate::Context::pods) (the pod
//! feed, [`ExtenderBuilder::wants_pods`](crate::ExtenderBuilder::wants_pods))
//! gets the what-if right with no more code. One that keeps its own
//! account (of its reservations, say) overrides
//! [`Filter::filter_preemption`](crate::Filter::filter_preemption), or
//! otherwise answers for the node as it is: that can only refuse a
//! candidate, never approve an eviction it would refuse. One whose verdict
//! never depends on the pods says so
//! ([`Filter::ignores_pods`](crate::Filter::ignores_pods)): berthd then
//! reuses the cycle's verdicts instead of asking.

pub use crate::candidates::{CandidatePod, PreemptionCandidate, PreemptionVerdict};
pub use crate::points::judge;
