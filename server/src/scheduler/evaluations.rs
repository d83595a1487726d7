//! scheduler_plugin_evaluation_total: how many times each PreFilter,
//! Filter, PreScore and Score plugin was called, as upstream's instrumented
//! plugins count their calls.
//!
//! The counting stays out of the per-node loops: a cycle notes, for each
//! node it judged, which run of Filter plugins ran there (from the first
//! plugin of the run to the one that rejected the node, or to the end),
//! as two marks in a difference array, and turns the marks into per-plugin
//! counts once, when the cycle's search is over. Dry runs and simulations
//! count nothing, as they record no other metric.

use std::ops::Range;

use crate::framework::{CycleState, ExtensionPoint, Framework, PluginMask, Status};

/// The Filter plugins one cycle called, per plugin position.
pub(super) struct FilterTally<'f> {
    names: &'f [&'static str],
    /// Plugins whose PreFilter skipped them, and batch plugins (counted
    /// by [`FilterTally::batch`]): never called per node here.
    not_run: PluginMask,
    /// `marks[i]`: runs starting at `i` minus runs ending at `i`.
    marks: Vec<i64>,
}

impl<'f> FilterTally<'f> {
    /// A tally for this cycle; none in dry runs or without metrics.
    pub(super) fn new(fw: &'f Framework, state: &CycleState) -> Option<Self> {
        if state.dry_run || fw.metrics().is_none() {
            return None;
        }
        let names = fw.plugin_names(ExtensionPoint::Filter);
        let mut not_run = state.skip_filter;
        if fw.has_batch_filters() {
            let batch = fw.batch_filter_names();
            for (i, n) in names.iter().enumerate() {
                if batch.contains(n) {
                    not_run.insert(i);
                }
            }
        }
        Some(Self {
            names,
            not_run,
            marks: vec![0; names.len() + 1],
        })
    }

    /// One node judged by the plugins at `plugins` (clamped to the
    /// profile's), ending with `status`: they ran up to the one that did
    /// not succeed.
    pub(super) fn node(&mut self, plugins: Range<usize>, status: &Status) {
        let len = self.names.len();
        let start = plugins.start.min(len);
        let end = plugins.end.min(len);
        let end = if status.is_success() {
            end
        } else {
            status
                .plugin()
                .and_then(|p| self.names[start..end].iter().position(|n| *n == p))
                .map_or(end, |at| start + at + 1)
        };
        if start < end {
            self.marks[start] += 1;
            self.marks[end] -= 1;
        }
    }

    /// Adds the cycle's counts to the metric.
    pub(super) fn record(self, fw: &Framework) {
        let Some(m) = fw.metrics() else { return };
        let mut running = 0i64;
        for i in 0..self.names.len() {
            running += self.marks[i];
            if !self.not_run.contains(i) {
                m.evaluated(ExtensionPoint::Filter, i, running.max(0) as u64);
            }
        }
    }
}

/// A point whose plugins are called once per cycle (PreFilter, PreScore)
/// stops at the first that does not succeed: those up to it were called.
pub(super) fn record_once_each(
    fw: &Framework,
    state: &CycleState,
    point: ExtensionPoint,
    status: &Status,
) {
    let Some(m) = fw.metrics().filter(|_| !state.dry_run) else {
        return;
    };
    let metric = match point {
        ExtensionPoint::PreFilter => ExtensionPoint::PreFilter,
        ExtensionPoint::PreScore => ExtensionPoint::PreScore,
        _ => return,
    };
    let names = fw.plugin_names(point);
    let end = if status.is_success() {
        names.len()
    } else {
        status
            .plugin()
            .and_then(|p| names.iter().position(|n| *n == p))
            .map_or(names.len(), |at| at + 1)
    };
    for i in 0..end {
        m.evaluated(metric, i, 1);
    }
}

/// Score plugins not skipped were called for `nodes` nodes each.
pub(super) fn record_score(fw: &Framework, state: &CycleState, nodes: usize) {
    let Some(m) = fw.metrics().filter(|_| !state.dry_run) else {
        return;
    };
    for i in 0..fw.plugin_names(ExtensionPoint::Score).len() {
        if !state.skip_score.contains(i) {
            m.evaluated(ExtensionPoint::Score, i, nodes as u64);
        }
    }
}

/// The batch Filter plugins (remote extenders) were called once for
/// `nodes` nodes each.
pub(super) fn record_batch_filters(fw: &Framework, state: &CycleState, nodes: usize) {
    let Some(m) = fw.metrics().filter(|_| !state.dry_run) else {
        return;
    };
    if nodes == 0 || !fw.has_batch_filters() {
        return;
    }
    let batch = fw.batch_filter_names();
    for (i, n) in fw.plugin_names(ExtensionPoint::Filter).iter().enumerate() {
        if batch.contains(n) && !state.skip_filter.contains(i) {
            m.evaluated(ExtensionPoint::Filter, i, nodes as u64);
        }
    }
}
