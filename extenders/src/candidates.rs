//! A preemption what-if's candidates and verdicts: [`PreemptionCandidate`]
//! (a node and the pods preemption may evict there), [`CandidatePod`] and
//! [`PreemptionVerdict`]. The what-if itself is described in
//! [`crate::preemption`].

use crate::types::{NodeRef, Status};

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
