//! Victims, one rule for a pod's preemption and a PodGroup's (KEP-5710,
//! v1.37):
//!
//! * Victims are units. With the GenericWorkload gate on, a pod of a
//!   PodGroup counts with its group's priority, and a group with
//!   `disruptionMode: all` is one unit: all its scheduled pods, on whatever
//!   node, evicted together or not at all. Any other pod is a unit of its
//!   own, with its own priority. Only units of strictly lower priority than
//!   the preemptor are victims.
//! * Units are reprieved most important first (upstream's
//!   MoreImportantVictim): higher priority, then groups before single pods,
//!   then larger groups, then the earliest start.
//! * A unit violates a PodDisruptionBudget when any of its pods does.
//! * Eviction ([`evict`]): a victim waiting at Permit is rejected there;
//!   any other gets the `DisruptionTarget` condition and is deleted (both
//!   by the cluster backend, computed in one place: see
//!   `crate::cluster::writes`), then a `Preempted` event.

use std::collections::HashSet;
use std::sync::Arc;

use smallvec::{SmallVec, smallvec};

use super::{Budget, now_nanos, split_by_budget, start_time};
use crate::cache::{PodGroupManager, group_key_of};
use crate::framework::{EventType, Handle, PodEvent};
use crate::model::{GroupKey, PodInfo, PodRef};
use crate::plugins::names::DEFAULT_PREEMPTION;

/// A victim unit: one pod, or a `disruptionMode: all` group's pods.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub(super) priority: i32,
    /// The group, for a group unit.
    pub(super) group: Option<GroupKey>,
    /// Its pods (one, inline, for a single pod).
    pub(super) pods: SmallVec<[PodRef; 1]>,
}

impl Unit {
    /// The earliest start of its pods.
    pub(super) fn start(&self, now: i64) -> i64 {
        self.pods
            .iter()
            .map(|p| start_time(p, now))
            .min()
            .unwrap_or(now)
    }
}

/// Upstream's MoreImportantVictim: higher priority, then group units, then
/// larger ones, then those that started earlier.
pub(super) fn more_important(a: &Unit, b: &Unit, now: i64) -> std::cmp::Ordering {
    b.priority
        .cmp(&a.priority)
        .then(b.group.is_some().cmp(&a.group.is_some()))
        .then(b.pods.len().cmp(&a.pods.len()))
        .then(a.start(now).cmp(&b.start(now)))
}

/// Gathers the units of the pods it is given, each unit once.
pub(super) struct Units<'a> {
    /// The PodGroups (GenericWorkload on); without, every pod is a unit of
    /// its own with its own priority.
    groups: Option<&'a PodGroupManager>,
    /// Units of priority below this are kept.
    below: i32,
    /// The preemptor's own group, whose pods are never victims.
    own: Option<&'a GroupKey>,
    list: Vec<Unit>,
    /// `disruptionMode: all` groups already gathered.
    whole: HashSet<GroupKey>,
}

impl<'a> Units<'a> {
    pub(super) fn new(
        groups: Option<&'a PodGroupManager>,
        below: i32,
        own: Option<&'a GroupKey>,
    ) -> Self {
        Self {
            groups,
            below,
            own,
            list: Vec::new(),
            whole: HashSet::new(),
        }
    }

    /// Adds the unit of `p` (if it is of lower priority, and not already
    /// there); a `disruptionMode: all` group brings all its scheduled pods
    /// (`p` alone if none is known).
    pub(super) fn add(&mut self, p: &PodRef) {
        let Some(groups) = self.groups else {
            if p.priority < self.below {
                self.list.push(Unit {
                    priority: p.priority,
                    group: None,
                    pods: smallvec![p.clone()],
                });
            }
            return;
        };
        let key = group_key_of(p);
        if key.is_some() && key.as_ref() == self.own {
            return;
        }
        if key.as_ref().is_some_and(|k| self.whole.contains(k)) {
            // Its group is gathered already, with its pods.
            return;
        }
        let group = key.as_ref().and_then(|k| groups.pod_group(k));
        let priority = group.as_ref().map_or(p.priority, |g| g.priority);
        if priority >= self.below {
            return;
        }
        match group.filter(|g| g.disrupt_all) {
            Some(g) => {
                let mut pods: SmallVec<[PodRef; 1]> = groups
                    .get(&g.key)
                    .map(|s| s.scheduled_pods().into())
                    .unwrap_or_default();
                if !pods.iter().any(|q| q.uid == p.uid) {
                    pods.push(p.clone());
                }
                self.whole.insert(g.key.clone());
                self.list.push(Unit {
                    priority,
                    group: Some(g.key.clone()),
                    pods,
                });
            }
            None => self.list.push(Unit {
                priority,
                group: None,
                pods: smallvec![p.clone()],
            }),
        }
    }

    /// The units gathered.
    pub(super) fn into_vec(self) -> Vec<Unit> {
        self.list
    }
}

/// Orders `units` for reprieve: those whose eviction would violate a
/// budget first, then the others, each most important first. Returns how
/// many come first (the violating ones) and, per unit, how many of its
/// pods violate a budget.
pub(super) fn reprieve_order(units: &mut Vec<Unit>, budgets: &[Budget]) -> (usize, Vec<usize>) {
    let now = now_nanos();
    units.sort_by(|a, b| more_important(a, b, now));
    if budgets.is_empty() {
        return (0, vec![0; units.len()]);
    }
    let all: Vec<PodRef> = units.iter().flat_map(|u| u.pods.iter().cloned()).collect();
    let (violating, _) = split_by_budget(&all, budgets);
    let violating: HashSet<&str> = violating.iter().map(|p| &*p.uid).collect();
    let mut counted: Vec<(Unit, usize)> = std::mem::take(units)
        .into_iter()
        .map(|u| {
            let n = u
                .pods
                .iter()
                .filter(|p| violating.contains(&*p.uid))
                .count();
            (u, n)
        })
        .collect();
    // Stable: each part keeps the importance order.
    counted.sort_by_key(|(_, n)| *n == 0);
    let first = counted.iter().filter(|(_, n)| *n > 0).count();
    let (list, counts): (Vec<Unit>, Vec<usize>) = counted.into_iter().unzip();
    *units = list;
    (first, counts)
}

/// Evicts `victims`, in order: a victim waiting at Permit is rejected
/// there (`preempted`); any other is deleted by the cluster backend with
/// the `DisruptionTarget` condition carrying `message`, then gets a
/// `Preempted` event (action `Preempting`) with `note`, related to
/// `preemptor` when there is one. The error names the victim that could
/// not be evicted.
pub(super) async fn evict(
    handle: &Handle,
    controller: &Arc<str>,
    victims: &[PodRef],
    message: &str,
    note: &str,
    preemptor: Option<&Arc<PodInfo>>,
) -> Result<(), String> {
    for v in victims {
        if handle
            .waiting_pods()
            .reject(&v.uid, Some(DEFAULT_PREEMPTION), "preempted")
        {
            continue;
        }
        handle
            .cluster()
            .delete_pod(v, message)
            .await
            .map_err(|e| format!("deleting victim {}: {e}", v.key()))?;
        let event = PodEvent::new(
            v.clone(),
            controller.clone(),
            EventType::Normal,
            "Preempted",
            "Preempting",
            note,
        );
        // Upstream's event names the preemptor in its note only.
        handle.events().record(match preemptor {
            Some(p) => event.with_related(p.clone()),
            None => event,
        });
    }
    Ok(())
}
