//! The runtime's explanations for dry runs: each Filter plugin's verdict
//! on a node (per-node plugins one node at a time, batch plugins over the
//! nodes that passed the others), and what plugins tell beyond a status.
//! A real cycle stops at the first failure; an explanation runs what it
//! can, and says which plugin could not judge which node.

use std::sync::Arc;

use super::{FilterVerdict, Framework};
use crate::cache::NodeInfo;
use crate::framework::CycleState;
use crate::framework::status::Status;
use crate::model::PodInfo;

impl Framework {
    /// Each Filter plugin's verdict on one node, for explanations: skipped
    /// for plugins whose PreFilter skipped them, and, unless `all`, not
    /// evaluated for plugins after the first that does not succeed (the
    /// scheduler does not run them). The decisive status is the first
    /// non-success.
    pub fn run_filter_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        all: bool,
    ) -> Vec<(&'static str, FilterVerdict)> {
        let mut out = Vec::with_capacity(self.filter.len());
        let mut rejected = false;
        for (i, p) in self.filter.iter().enumerate() {
            let verdict = if state.skip_filter.contains(i) {
                FilterVerdict::Skipped
            } else if self.batch_filter.contains(i) {
                // Judged later, with every node that passes the others.
                FilterVerdict::NotEvaluated
            } else if rejected && !all {
                FilterVerdict::NotEvaluated
            } else {
                let s = p.filter(state, pod, node);
                let s = if s.is_success() {
                    s
                } else {
                    self.filter_failure(p.name(), s)
                };
                rejected |= !s.is_success();
                FilterVerdict::Ran(s)
            };
            out.push((p.name(), verdict));
        }
        out
    }

    /// Dry runs: the details Filter plugins give about `node`; those of
    /// `plugins` on a node they rejected, or every plugin's on the node the
    /// pod would go to (`plugins` empty).
    pub fn explain_node(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        plugins: &[&str],
    ) -> Vec<(&'static str, super::NodeDetail)> {
        let rejected = !plugins.is_empty();
        self.filter
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                !state.skip_filter.contains(*i) && (!rejected || plugins.contains(&p.name()))
            })
            .flat_map(|(_, p)| {
                p.explain(state, pod, node, rejected)
                    .into_iter()
                    .map(|d| (p.name(), d))
            })
            .collect()
    }

    /// Dry runs: each batch Filter plugin's verdict on each of `nodes`
    /// (those that passed the per-node plugins), in the profile's order,
    /// aligned with `nodes`. A plugin judges the nodes no plugin before it
    /// rejected; a node a plugin could not judge ([`FilterVerdict::Unknown`]:
    /// it failed as a whole) is still put to the plugins after it, since a
    /// rejection there settles the node. An ignorable extender that failed
    /// and passed nodes as the scheduler would says so
    /// ([`FilterVerdict::Ignored`]), as the failures noted in the cycle's
    /// token tell.
    pub async fn run_batch_filters_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Vec<(&'static str, Vec<FilterVerdict>)> {
        let mut out = Vec::new();
        // The nodes no batch plugin rejected so far, by position.
        let mut open: Vec<usize> = (0..nodes.len()).collect();
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) {
                continue;
            }
            let name = p.name();
            let mut verdicts = vec![FilterVerdict::NotEvaluated; nodes.len()];
            if state.skip_filter.contains(i) {
                verdicts.fill(FilterVerdict::Skipped);
                out.push((name, verdicts));
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            if open.is_empty() {
                out.push((name, verdicts));
                continue;
            }
            let asked: Vec<Arc<NodeInfo>> = open.iter().map(|&k| nodes[k].clone()).collect();
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let noted = state.token().failure_count();
            match batch.filter_nodes(state, pod, &asked).await {
                Err(s) => {
                    let s = failure(s);
                    for &k in &open {
                        verdicts[k] = FilterVerdict::Unknown(s.clone());
                    }
                }
                Ok(statuses) if statuses.len() != asked.len() => {
                    let s = Status::error(format!(
                        "running {name:?} filter plugin: {} verdicts for {} nodes",
                        statuses.len(),
                        asked.len()
                    ))
                    .with_plugin(name);
                    for &k in &open {
                        verdicts[k] = FilterVerdict::Unknown(s.clone());
                    }
                }
                Ok(statuses) => {
                    for (&k, s) in open.iter().zip(statuses) {
                        let s = if s.is_success() { s } else { failure(s) };
                        verdicts[k] = FilterVerdict::Ran(s);
                    }
                }
            }
            for f in state.token().failures(noted) {
                if f.plugin != name || f.point != "Filter" || !f.ignored {
                    continue;
                }
                for &k in &open {
                    let this_node = f
                        .node_id
                        .is_none_or(|id| nodes[k].node().is_some_and(|n| n.feed_id == id));
                    if this_node && verdicts[k] == FilterVerdict::Ran(Status::success()) {
                        verdicts[k] = FilterVerdict::Ignored(f.reason.clone());
                    }
                }
            }
            open.retain(|&k| match &verdicts[k] {
                FilterVerdict::Ran(s) => s.is_success(),
                _ => true,
            });
            out.push((name, verdicts));
        }
        out
    }
}
