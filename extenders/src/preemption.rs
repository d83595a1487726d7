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
//! pod table leaves the evicted pods out ([`Context::pods`],
//! [`Pods::without`](crate::Pods::without)), as kube-scheduler runs its own
//! Filter plugins on a node with the victims removed ([`judge`]):
//!
//! 1. with every listed pod gone: a rejection refuses the candidate;
//! 2. with the victims gone: a pass keeps berthd's victims;
//! 3. otherwise, every listed pod gone, each given back in the order
//!    listed and kept back if the pod still fits: the ones that stay gone
//!    are the pods this extender needs evicted.
//!
//! A handler that reads the pods of a node from [`Context::pods`] (the pod
//! feed, [`ExtenderBuilder::wants_pods`](crate::ExtenderBuilder::wants_pods))
//! gets the what-if right with no more code. One that keeps its own
//! account (of its reservations, say) overrides
//! [`Filter::filter_preemption`](crate::Filter::filter_preemption), or
//! otherwise answers for the node as it is: that can only refuse a
//! candidate, never approve an eviction it would refuse. One whose verdict
//! never depends on the pods says so
//! ([`Filter::ignores_pods`](crate::Filter::ignores_pods)): berthd then
//! reuses the cycle's verdicts instead of asking.

use crate::context::Context;
use crate::points::Filter;
use crate::types::{CyclePod, NodeRef, Status};

/// A pod preemption may evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidatePod {
    /// Its id in the pod feed (0 if berthd's feed has none for it).
    pub id: u32,
    /// metadata.uid.
    pub uid: String,
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// Whether berthd's own Filter plugins need it evicted.
    pub victim: bool,
    /// The name of the node it runs on (the candidate's, or another node's
    /// for a PodGroup evicted whole; empty if the session does not know it).
    pub node: String,
}

/// A candidate node of a preemption what-if.
#[derive(Debug, Clone)]
pub struct PreemptionCandidate<'a> {
    /// The node (as the session's table has it).
    pub node: NodeRef<'a>,
    /// Every pod preemption may evict for it, the most important first
    /// (the order berthd gives them back in). Never empty.
    pub pods: Vec<CandidatePod>,
}

impl PreemptionCandidate<'_> {
    /// The pods berthd's own Filter plugins need evicted.
    pub fn victims(&self) -> impl Iterator<Item = &CandidatePod> {
        self.pods.iter().filter(|p| p.victim)
    }
}

/// A Filter handler's verdict on a preemption candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreemptionVerdict {
    /// The pod fits once the victims are gone.
    Victims,
    /// The pod fits once these pods (uids, of the candidate's) are gone,
    /// and with any more of the listed pods gone; `reasons` says why the
    /// victims are not enough.
    Needs {
        /// The pods that must be gone.
        uids: Vec<String>,
        /// Why the victims alone are not enough.
        reasons: Vec<String>,
    },
    /// The pod does not fit even with every listed pod gone (a rejection),
    /// or the handler cannot judge the node (`CODE_ERROR`).
    Rejected(Status),
}

/// The SDK's what-if for one candidate with `filter`'s per-node verdict
/// (see the module documentation): `cx`'s pod table without the pods asked
/// about as gone.
pub fn judge<F: Filter + ?Sized>(
    filter: &F,
    cx: &Context,
    pod: &CyclePod,
    candidate: &PreemptionCandidate<'_>,
) -> PreemptionVerdict {
    let pods = &candidate.pods;
    let verdict = |gone: &mut dyn Iterator<Item = u32>| {
        let view = cx.clone().with_pods(cx.pods().without(gone));
        filter.filter(&view, pod, &candidate.node)
    };
    let all = verdict(&mut pods.iter().map(|p| p.id));
    if !all.is_success() {
        return PreemptionVerdict::Rejected(all);
    }
    let victims = verdict(&mut candidate.victims().map(|p| p.id));
    if victims.is_success() {
        return PreemptionVerdict::Victims;
    }
    // As kube-scheduler reprieves: all gone, each given back in turn and
    // kept back while the pod still fits.
    let mut gone = vec![true; pods.len()];
    for i in 0..pods.len() {
        gone[i] = false;
        let fits = verdict(
            &mut pods
                .iter()
                .zip(&gone)
                .filter(|(_, g)| **g)
                .map(|(p, _)| p.id),
        )
        .is_success();
        if !fits {
            gone[i] = true;
        }
    }
    PreemptionVerdict::Needs {
        uids: pods
            .iter()
            .zip(&gone)
            .filter(|(_, g)| **g)
            .map(|(p, _)| p.uid.clone())
            .collect(),
        reasons: victims.reasons,
    }
}
