//! The group points: PlacementFeasible, PodGroupPostFilter and berth's
//! GroupPermit (see the rules in the module doc).

use super::*;
use crate::framework::types::{
    GroupAttempt, PlacedPod, PlacementProgress, PodGroupCycleInfo, PodGroupPostFilterResult,
    ProposedAssignment,
};

impl Framework {
    /// Whether any plugin judges placements.
    pub fn has_placement_feasible_plugins(&self) -> bool {
        !self.placement_feasible.is_empty()
    }

    /// The plugins that judge placements, by name.
    pub fn placement_feasible_names(&self) -> Vec<&'static str> {
        self.placement_feasible.iter().map(|p| p.name()).collect()
    }

    /// Whether any PodGroupPostFilter plugin is enabled.
    pub fn has_pod_group_post_filter_plugins(&self) -> bool {
        !self.pod_group_post_filter.is_empty()
    }

    /// Whether any GroupPermit plugin is enabled.
    pub fn has_group_permit_plugins(&self) -> bool {
        !self.group_permit.is_empty()
    }

    /// Runs PlacementFeasible: an error or a rejection decides (the
    /// plugin named); else a `Wait` does; else `Success`.
    pub async fn run_placement_feasible(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        progress: PlacementProgress,
        placed: &[PlacedPod],
    ) -> Status {
        let t = self.point_timer(state);
        let mut out = Status::success();
        for (i, p) in self.placement_feasible.iter().enumerate() {
            let pt = self.plugin_timer(state);
            let s = p.placement_feasible(state, group, progress, placed).await;
            self.plugin_done(ExtensionPoint::PlacementFeasible, i, s.code(), pt);
            match s.code() {
                Code::Success => {}
                Code::Wait => {
                    if out.is_success() {
                        out = s.with_plugin(p.name());
                    }
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    out = s.with_plugin(p.name());
                    break;
                }
                _ => {
                    out = Status::error(format!(
                        "running PlacementFeasible plugin {:?}: {}",
                        p.name(),
                        s.message()
                    ))
                    .with_plugin(p.name());
                    break;
                }
            }
        }
        self.point_done(ExtensionPoint::PlacementFeasible, out.code(), t);
        out
    }

    /// Runs PodGroupPostFilter: until one succeeds (its result), says the
    /// group is unresolvable, or fails; otherwise `Unschedulable` with the
    /// plugins' messages.
    pub async fn run_pod_group_post_filter(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        attempt: &GroupAttempt,
        schedule: &dyn PodGroupSchedulingFunc,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let t = self.point_timer(state);
        let mut reasons = Vec::new();
        let mut out = None;
        for (i, p) in self.pod_group_post_filter.iter().enumerate() {
            let pt = self.plugin_timer(state);
            let (r, s) = p
                .pod_group_post_filter(state, group, attempt, schedule, self)
                .await;
            self.plugin_done(ExtensionPoint::PodGroupPostFilter, i, s.code(), pt);
            match s.code() {
                Code::Success | Code::UnschedulableAndUnresolvable => {
                    out = Some((r, s.with_plugin(p.name())));
                    break;
                }
                Code::Unschedulable => reasons.extend(s.reasons().iter().cloned()),
                _ => {
                    out = Some((None, s.with_plugin(p.name())));
                    break;
                }
            }
        }
        let out = out.unwrap_or_else(|| (None, Status::with_reasons(Code::Unschedulable, reasons)));
        self.point_done(ExtensionPoint::PodGroupPostFilter, out.1.code(), t);
        out
    }

    /// Runs GroupPermit: the first plugin that does not succeed decides.
    pub async fn run_group_permit(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        placement: &[ProposedAssignment],
    ) -> Status {
        for p in &self.group_permit {
            let s = p.permit_group(state, group, placement).await;
            if s.is_success() {
                continue;
            }
            return if s.is_rejected() {
                s.with_plugin(p.name())
            } else {
                Status::error(format!(
                    "running GroupPermit plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name())
            };
        }
        Status::success()
    }
}
