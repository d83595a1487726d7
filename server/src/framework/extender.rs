//! Extenders that DefaultPreemption consults: upstream's `Extender`
//! interface, its preemption part, through which kube-scheduler's HTTP
//! extenders narrow the preemption candidates (`callExtenders`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::cache::Snapshot;
use crate::model::{PodInfo, PodRef};

/// The pods to evict on one node, most important first.
#[derive(Debug, Clone, Default)]
pub struct Victims {
    /// The pods.
    pub pods: Vec<PodRef>,
    /// How many of the evictions violate a PodDisruptionBudget.
    pub num_pdb_violations: i64,
}

/// Victims per candidate node.
pub type NodeVictims = BTreeMap<Arc<str>, Victims>;

/// Why an extender could not process preemption; the text is the
/// extender's (or its transport's) own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExtenderError(pub String);

/// An extender consulted after the preemption candidates are found.
#[async_trait]
pub trait PreemptionExtender: Send + Sync {
    /// Its name, for logs.
    fn name(&self) -> &str;
    /// Whether it processes preemption at all.
    fn supports_preemption(&self) -> bool;
    /// Whether it wants to see this pod.
    fn is_interested(&self, pod: &PodInfo) -> bool;
    /// Whether its failures are skipped rather than failing preemption.
    fn is_ignorable(&self) -> bool;
    /// The candidates it keeps, with the victims it wants evicted there
    /// (pods looked up in `snapshot`).
    async fn process_preemption(
        &self,
        pod: &PodInfo,
        candidates: &NodeVictims,
        snapshot: &Snapshot,
    ) -> Result<NodeVictims, ExtenderError>;
}
