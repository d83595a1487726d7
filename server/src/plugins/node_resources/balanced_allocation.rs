//! NodeResourcesBalancedAllocation: favours nodes whose resource usage
//! would become (more) balanced with the pod, as kube-scheduler v1.36 scores
//! it.
//!
//! For each configured resource the node has (allocatable > 0), the
//! fraction requested / allocatable (capped at 1) is taken with and without
//! the pod; the balance of a set of fractions is `(1 - std) × 100`, truncated
//! (for two resources `std = |f1 - f2| / 2`). The score rewards the change:
//! `50 + (50 + balance_with - balance_without) / 2`, in [50, 100], 75 when
//! the pod changes nothing.
//!
//! Requests are the real ones: pods and containers without requests count
//! nothing (no 100m / 200Mi defaults, unlike NodeResourcesFit's scoring),
//! and a pod requesting none of the resources is not scored at all (Skip at
//! PreScore), so that best-effort pods do not pile onto one node.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use smallvec::SmallVec;

use super::args::ResourceSpec;
use crate::cache::NodeInfo;
use crate::config::{ConfigError, join_path};
use crate::extension_points;
use crate::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PluginArgs, PreScorePlugin, ScorePlugin, StateKey, Status,
    ValidateArgs, parse_args,
};
use crate::model::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, is_scalar_resource};
use crate::model::{PodInfo, ResourceName};
use crate::plugins::names::NODE_RESOURCES_BALANCED_ALLOCATION;

/// NodeResourcesBalancedAllocation's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// The resources whose balance is scored (default: cpu and memory).
    /// Weights must be 1 (0 or unset means 1).
    pub resources: Vec<ResourceSpec>,
}

impl Default for NodeResourcesBalancedAllocationArgs {
    fn default() -> Self {
        Self {
            resources: vec![
                ResourceSpec {
                    name: CPU.into(),
                    weight: 1,
                },
                ResourceSpec {
                    name: MEMORY.into(),
                    weight: 1,
                },
            ],
        }
    }
}

impl NodeResourcesBalancedAllocationArgs {
    /// The args with upstream's defaults applied: no resources means cpu and
    /// memory; a weight of 0 means 1.
    pub fn defaulted(mut self) -> Self {
        if self.resources.is_empty() {
            return Self::default();
        }
        for r in &mut self.resources {
            if r.weight == 0 {
                r.weight = 1;
            }
        }
        self
    }
}

impl PluginArgs for NodeResourcesBalancedAllocationArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "NodeResourcesBalancedAllocationArgs").map(Self::defaulted)
    }
}

impl ValidateArgs for NodeResourcesBalancedAllocationArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let args = self.clone().defaulted();
        for (i, r) in args.resources.iter().enumerate() {
            let p = join_path(path, &format!("resources[{i}]"));
            if args.resources[..i].iter().any(|o| o.name == r.name) {
                return Err(ConfigError::duplicate(format!("{p}.name"), &r.name));
            }
            if r.weight != 1 {
                return Err(ConfigError::invalid(
                    format!("{p}.weight"),
                    r.weight,
                    "must be 1",
                ));
            }
        }
        Ok(())
    }
}

/// A scored resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Balanced {
    Cpu,
    Memory,
    EphemeralStorage,
    Scalar(ResourceName),
    /// A name the scheduler does not track (`pods`, `storage`, ...): never
    /// requested, never scored.
    Untracked,
}

/// The pod's request of each configured resource, in order.
#[derive(Debug, Clone)]
struct PreScoreState(SmallVec<[i64; 4]>);

const PRE_SCORE_KEY: StateKey<PreScoreState> =
    StateKey::new("PreScoreNodeResourcesBalancedAllocation");

/// At most this many scored resources are handled without allocating.
const INLINE_RESOURCES: usize = 8;

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug)]
pub struct NodeResourcesBalancedAllocation {
    resources: Vec<Balanced>,
}

impl NodeResourcesBalancedAllocation {
    /// Builds the plugin from its (validated, defaulted) args.
    pub fn new(args: NodeResourcesBalancedAllocationArgs) -> Result<Self, String> {
        let resources = args
            .resources
            .iter()
            .map(|r| match r.name.as_str() {
                CPU => Balanced::Cpu,
                MEMORY => Balanced::Memory,
                EPHEMERAL_STORAGE => Balanced::EphemeralStorage,
                other if is_scalar_resource(other) => Balanced::Scalar(ResourceName::intern(other)),
                _ => Balanced::Untracked,
            })
            .collect();
        Ok(Self { resources })
    }

    fn pod_requests(&self, pod: &PodInfo) -> SmallVec<[i64; 4]> {
        let r = &pod.requests;
        self.resources
            .iter()
            .map(|res| match *res {
                Balanced::Cpu => r.milli_cpu,
                Balanced::Memory => r.memory,
                Balanced::EphemeralStorage => r.ephemeral_storage,
                Balanced::Scalar(n) => r.scalar(n),
                Balanced::Untracked => 0,
            })
            .collect()
    }

    /// The score of `node` given the pod's requests.
    fn score_node(&self, requests: &[i64], node: &NodeInfo) -> i64 {
        let alloc = node.allocatable();
        let used = node.requested();
        // Per resource the node has: (fraction with the pod, without it).
        let mut fractions: SmallVec<[(f64, f64); INLINE_RESOURCES]> = SmallVec::new();
        for (res, &want) in self.resources.iter().zip(requests) {
            let (capacity, in_use) = match *res {
                Balanced::Cpu => (alloc.milli_cpu, used.milli_cpu),
                Balanced::Memory => (alloc.memory, used.memory),
                Balanced::EphemeralStorage => (alloc.ephemeral_storage, used.ephemeral_storage),
                // An extended resource the pod does not request is not scored.
                Balanced::Scalar(_) if want == 0 => continue,
                Balanced::Scalar(n) => (alloc.scalar(n), used.scalar(n)),
                Balanced::Untracked => continue,
            };
            if capacity == 0 {
                continue;
            }
            let fraction = |requested: i64| (requested as f64 / capacity as f64).min(1.0);
            fractions.push((fraction(in_use.saturating_add(want)), fraction(in_use)));
        }
        let with = balance(fractions.iter().map(|f| f.0));
        let without = balance(fractions.iter().map(|f| f.1));
        MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with - without) / 2
    }
}

/// `(1 - std) × 100` of the fractions, truncated; 100 for fewer than two.
fn balance(fractions: impl Iterator<Item = f64> + Clone) -> i64 {
    let n = fractions.clone().count();
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let mut it = fractions;
            let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
            ((a - b) / 2.0).abs()
        }
        _ => {
            let mean = fractions.clone().sum::<f64>() / n as f64;
            let sum: f64 = fractions.map(|f| (f - mean) * (f - mean)).sum();
            (sum / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NODE_RESOURCES_BALANCED_ALLOCATION
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }
    extension_points!(pre_score, score);
}

#[async_trait]
impl PreScorePlugin for NodeResourcesBalancedAllocation {
    async fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Status {
        let requests = self.pod_requests(pod);
        if requests.iter().all(|&r| r == 0) {
            return Status::skip();
        }
        state.write(&PRE_SCORE_KEY, PreScoreState(requests));
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if self.resources.is_empty() {
            return Err(Status::error("resources not found"));
        }
        if let Some(s) = state.read(&PRE_SCORE_KEY) {
            return Ok(self.score_node(&s.0, node));
        }
        // PreScore did not run (disabled): compute here, as upstream does.
        let requests = self.pod_requests(pod);
        if requests.iter().all(|&r| r == 0) {
            return Ok(0);
        }
        Ok(self.score_node(&requests, node))
    }
}

#[cfg(test)]
#[path = "balanced_allocation_tests.rs"]
mod tests;
