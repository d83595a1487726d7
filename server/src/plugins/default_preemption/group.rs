//! DefaultPreemption's PodGroupPostFilter: workload-aware preemption
//! (KEP-5710, v1.37), when a PodGroup's cycle ends `Unschedulable`.
//!
//! * The preemptor is the group: its priority is the PodGroup's (its pods
//!   carry the same, validation saw to it); with PodGroupPreemptionPolicy
//!   off, any member with `preemptionPolicy: Never` makes the group not
//!   eligible (`not eligible due to preemptionPolicy=Never.`).
//! * A member nominated to a node where a lower-priority pod is already
//!   being deleted by a preemption: the preemption under way is waited for
//!   (`Success`, the nominations kept).
//! * Victims are units ([`super::victims`], the rule a pod's preemption
//!   follows too), over the whole cluster (the domain `cluster`), the
//!   group's own pods left alone. Only units of strictly lower priority
//!   are candidates (`No preemption victims found for incoming preemptor`
//!   without any).
//! * All candidates are removed from a copy of the snapshot and the group's
//!   algorithm rerun: if the group still does not fit, that is the answer.
//! * Units are reprieved, most important first (higher priority, groups
//!   before pods, larger groups, earlier start), those whose eviction would
//!   violate a PodDisruptionBudget first: a unit is put back, and spared
//!   if every pod of the placement found still passes Filter on its node
//!   (the placement is fixed: a reprieve never costs the group a pod).
//! * The remaining victims are evicted once the group's pods' statuses are
//!   written ([`super::victims::evict`]), each with a `Preempted` event
//!   (`Preempted by podgroup <uid> on node cluster`), and
//!   the group's pods are nominated where the placement put them:
//!   `found a placement for podgroup, preempting N victims`.
//!
//! Every message is prefixed `pod group preemption: `.

use std::sync::Arc;

use async_trait::async_trait;

use super::victims::{Unit, Units, evict, reprieve_order};
use super::{Budget, DefaultPreemption, terminating_by_preemption};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    CycleState, Eviction, GroupAttempt, PodGroupCycleInfo, PodGroupPostFilterPlugin,
    PodGroupPostFilterResult, PodGroupSchedulingFunc, ProfileFilters, ProposedAssignment, Status,
};
use crate::model::{GroupKey, PodRef, PreemptionPolicy};

/// Why a group finds nothing to preempt.
pub const NO_GROUP_VICTIMS: &str = "No preemption victims found for incoming preemptor";

impl DefaultPreemption {
    /// The units of lower priority than `priority`, over the snapshot,
    /// leaving the preemptor group's own pods alone.
    fn victim_units(&self, snapshot: &Snapshot, preemptor: &GroupKey, priority: i32) -> Vec<Unit> {
        let mut units = Units::new(Some(&**self.handle.pod_groups()), priority, Some(preemptor));
        for node in snapshot.list() {
            for p in node.pods() {
                units.add(p);
            }
        }
        units.into_vec()
    }

    /// Whether every pod of `placement` still passes Filter on its node of
    /// `snapshot`, each seeing those placed before it.
    fn placement_holds(
        &self,
        profile: &dyn ProfileFilters,
        snapshot: &Snapshot,
        placement: &[ProposedAssignment],
        extra: &[PodRef],
    ) -> bool {
        let nominated = self.handle.nominated_pods();
        let mut placed: Vec<(&Arc<str>, PodRef)> = Vec::new();
        for a in placement {
            let Some(node) = snapshot.get(&a.node) else {
                return false;
            };
            let mut node: NodeInfo = (**node).clone();
            let mut state: CycleState = a.state.clone();
            // The pods put back since the placement was found, and the
            // placement's pods before this one.
            for v in extra {
                let Some(on) = snapshot.get(v.node_name.as_deref().unwrap_or("")) else {
                    continue;
                };
                if !profile
                    .run_pre_filter_extension_add_pod(&mut state, &a.pod, v, on)
                    .is_success()
                {
                    return false;
                }
            }
            // The placement's pods before this one are in its PreFilter
            // data already (it ran with them assumed); the node needs them.
            for (n, p) in &placed {
                if *n == &a.node {
                    node.add_pod(p.clone());
                }
            }
            if !profile
                .run_filter_with_nominated_pods(&state, &a.pod, &node, &nominated)
                .is_success()
            {
                return false;
            }
            placed.push((&a.node, Arc::new(a.pod.assumed_on(&a.node))));
        }
        true
    }

    async fn preempt_group(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        schedule: &dyn PodGroupSchedulingFunc,
        profile: &dyn ProfileFilters,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let pg = &group.group;
        if !pg.topology_keys.is_empty() {
            return (
                None,
                Status::unschedulable("not supported with topology constraints"),
            );
        }
        let policy = if self.group_preemption_policy {
            pg.preemption_policy
        } else if group.pods.iter().any(|p| p.preemption_never) {
            PreemptionPolicy::Never
        } else {
            PreemptionPolicy::PreemptLowerPriority
        };
        if policy == PreemptionPolicy::Never {
            return (
                None,
                Status::unschedulable("not eligible due to preemptionPolicy=Never."),
            );
        }
        let snapshot = schedule.snapshot().clone();
        // A preemption under way for the group: wait for it.
        let ongoing = group.pods.iter().any(|p| {
            p.nominated_node_name
                .as_deref()
                .and_then(|n| snapshot.get(n))
                .is_some_and(|n| {
                    n.pods()
                        .iter()
                        .any(|v| v.priority < pg.priority && terminating_by_preemption(v))
                })
        });
        if ongoing {
            let nominations = group
                .pods
                .iter()
                .filter_map(|p| Some((p.uid.clone(), p.nominated_node_name.clone()?)))
                .collect();
            return (
                Some(PodGroupPostFilterResult {
                    nominations,
                    ..Default::default()
                }),
                Status::new(
                    crate::framework::Code::Success,
                    "ongoing preemption on nominated nodes",
                ),
            );
        }
        let mut units = self.victim_units(&snapshot, &pg.key, pg.priority);
        if units.is_empty() {
            return (None, Status::unresolvable(NO_GROUP_VICTIMS));
        }
        let mut without = (*snapshot).clone();
        for u in &units {
            for p in &u.pods {
                without.remove_pod(p.node_name.as_deref().unwrap_or(""), &p.uid);
            }
        }
        let (placement, status) = schedule.schedule(Arc::new(without.clone())).await;
        if !status.is_success() {
            return (None, status);
        }
        // Reprieve, budget violators first, each part most important first.
        let budgets: Vec<Budget> = self
            .handle
            .objects()
            .pod_disruption_budgets("")
            .iter()
            .filter_map(|p| Budget::from(p))
            .collect();
        reprieve_order(&mut units, &budgets);
        let mut spared: Vec<PodRef> = Vec::new();
        let mut victims: Vec<Unit> = Vec::new();
        for u in units {
            let mut with = without.clone();
            for p in &u.pods {
                with.assume_pod(p.clone());
            }
            let mut extra = spared.clone();
            extra.extend(u.pods.iter().cloned());
            if self.placement_holds(profile, &with, &placement, &extra) {
                without = with;
                spared = extra;
            } else {
                victims.push(u);
            }
        }
        let count: usize = victims.iter().map(|u| u.pods.len()).sum();
        let nominations = placement
            .iter()
            .map(|a| (a.pod.uid.clone(), a.node.clone()))
            .collect();
        let victim_pods: Vec<PodRef> = victims
            .iter()
            .flat_map(|u| u.pods.iter().cloned())
            .collect();
        let eviction = (!state.dry_run).then(|| {
            tracing::info!(group = %pg.key, victims = count, "preempting for a pod group");
            self.group_eviction(profile, &pg.uid, victim_pods.clone())
        });
        (
            Some(PodGroupPostFilterResult {
                nominations,
                victims: victim_pods,
                units: victims.len(),
                eviction,
            }),
            Status::new(
                crate::framework::Code::Success,
                format!("found a placement for podgroup, preempting {count} victims"),
            ),
        )
    }

    /// Evicts the group's victims (see the module doc).
    fn group_eviction(
        &self,
        profile: &dyn ProfileFilters,
        group_uid: &Arc<str>,
        victims: Vec<PodRef>,
    ) -> Eviction {
        let handle = self.handle.clone();
        let controller = profile.profile_name().clone();
        let message = format!("{controller}: preempting to accommodate a higher priority podgroup");
        let note = format!("Preempted by podgroup {group_uid} on node cluster");
        Eviction::new(
            async move { evict(&handle, &controller, &victims, &message, &note, None).await },
        )
    }
}

#[async_trait]
impl PodGroupPostFilterPlugin for DefaultPreemption {
    async fn pod_group_post_filter(
        &self,
        state: &CycleState,
        group: &PodGroupCycleInfo,
        _: &GroupAttempt,
        schedule: &dyn PodGroupSchedulingFunc,
        profile: &dyn ProfileFilters,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let (result, status) = self.preempt_group(state, group, schedule, profile).await;
        let message = status.message();
        if message.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), format!("pod group preemption: {message}")),
        )
    }
}
