//! Coscheduling: gang scheduling, the framework proposal's example use of
//! Permit. Not in the default profile; enable it by configuration.
//!
//! A pod belongs to a group through the label `scheduling.x-k8s.io/pod-group`
//! (the group's name, within the pod's namespace); the group's size comes
//! from the annotation `scheduling.x-k8s.io/min-member` on its pods (a
//! positive integer; the largest value among the pods seen wins; without it
//! a pod is not gang-scheduled). Pods without the label are scheduled as
//! usual.
//!
//! * QueueSort: priority first; then pods of a group sort together, by when
//!   the group was first seen, before or after other pods by their own first
//!   attempt; then by group name; then by arrival.
//! * Permit: a member waits (up to `permitWaitingTimeSeconds`, default 60)
//!   until `min-member` members are reserved or bound; the member that
//!   completes the group allows every waiting one.
//! * Unreserve: when any member fails after Reserve (a timeout at Permit, a
//!   rejection, a bind error), every waiting member of its group is rejected
//!   too, so the group releases all it reserved and is retried together.
//!
//! To enable it (it replaces PrioritySort, as all profiles share one
//! QueueSort):
//!
//! ```yaml
//! profiles:
//! - schedulerName: default-scheduler
//!   plugins:
//!     multiPoint:
//!       enabled: [{name: Coscheduling}]
//!     queueSort:
//!       disabled: [{name: PrioritySort}]
//! ```

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::RwLock;
use serde::Deserialize;
use tokio::time::Instant;

use crate::config::{ConfigError, join_path};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, EventResource, Handle,
    PermitPlugin, Plugin, PluginArgs, PreEnqueuePlugin, QueueSortPlugin, QueuedEntity,
    QueueingHint, ReservePlugin, Status, ValidateArgs, parse_args,
};
use crate::model::PodInfo;
use crate::plugins::names::COSCHEDULING;

/// The label naming a pod's group.
pub const LABEL_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// The annotation giving the group's minimum size.
pub const ANNOTATION_MIN_MEMBER: &str = "scheduling.x-k8s.io/min-member";

/// Coscheduling's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CoschedulingArgs {
    /// How long a member waits at Permit for its group.
    pub permit_waiting_time_seconds: i64,
}

impl Default for CoschedulingArgs {
    fn default() -> Self {
        Self {
            permit_waiting_time_seconds: 60,
        }
    }
}

impl PluginArgs for CoschedulingArgs {
    fn parse(args: Option<&serde_json::Value>, path: &str) -> Result<Self, ConfigError> {
        parse_args::<Self>(args, path, "CoschedulingArgs")
    }
}

impl ValidateArgs for CoschedulingArgs {
    fn validate(&self, path: &str) -> Result<(), ConfigError> {
        if self.permit_waiting_time_seconds <= 0 {
            return Err(ConfigError::invalid(
                join_path(path, "permitWaitingTimeSeconds"),
                self.permit_waiting_time_seconds,
                "must be greater than 0",
            ));
        }
        Ok(())
    }
}

/// A pod's group: `namespace/name` and its minimum size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    key: String,
    min_member: usize,
}

fn group_of(pod: &PodInfo) -> Option<Group> {
    let name = pod.labels.get(LABEL_POD_GROUP)?;
    let min_member = pod
        .pod
        .annotation(ANNOTATION_MIN_MEMBER)
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)?;
    Some(Group {
        key: format!("{}/{name}", pod.namespace),
        min_member,
    })
}

fn group_key(pod: &PodInfo) -> Option<String> {
    pod.labels
        .get(LABEL_POD_GROUP)
        .map(|name| format!("{}/{name}", pod.namespace))
}

/// The Coscheduling plugin.
pub struct Coscheduling {
    args: CoschedulingArgs,
    handle: Handle,
    /// When each group was first seen, for QueueSort.
    first_seen: RwLock<HashMap<String, Instant>>,
}

impl Coscheduling {
    /// Builds the plugin.
    pub fn new(args: CoschedulingArgs, handle: &Handle) -> Self {
        Self {
            args,
            handle: handle.clone(),
            first_seen: RwLock::default(),
        }
    }

    /// The time an entity sorts by: its group's first sighting, or its own
    /// first attempt.
    fn sort_time(&self, q: QueuedEntity<'_>) -> Instant {
        let own = q.initial_attempt_timestamp().unwrap_or(q.timestamp());
        match q.pod().and_then(|p| group_key(p)) {
            Some(g) => self
                .first_seen
                .read()
                .get(&g)
                .copied()
                .unwrap_or(own)
                .min(own),
            None => own,
        }
    }

    /// Members of `group` other than `pod` that are bound or assumed (in the
    /// snapshot) or waiting at Permit.
    fn members_placed(&self, state: &CycleState, group: &Group, pod: &PodInfo) -> usize {
        let is_member =
            |p: &PodInfo| p.uid != pod.uid && group_key(p).as_deref() == Some(group.key.as_str());
        let waiting = self
            .handle
            .waiting_pods()
            .list()
            .into_iter()
            .filter(|w| is_member(w.pod()))
            .count();
        let placed = state
            .snapshot()
            .list()
            .iter()
            .flat_map(|n| n.pods().iter())
            .filter(|p| is_member(p) && self.handle.waiting_pods().get(&p.uid).is_none())
            .count();
        waiting + placed
    }
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        COSCHEDULING
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        // A new member of the group may complete it.
        Some(vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(EventResource::Pod, ActionType::ADD),
            |pod, _, new| {
                let same = match (group_key(pod), new.and_then(|n| n.as_pod())) {
                    (Some(g), Some(p)) => {
                        p.uid != pod.uid && group_key(p).as_deref() == Some(g.as_str())
                    }
                    _ => false,
                };
                Ok(if same {
                    QueueingHint::Queue
                } else {
                    QueueingHint::Skip
                })
            },
        )])
    }

    extension_points!(queue_sort, pre_enqueue, reserve, permit);
}

impl QueueSortPlugin for Coscheduling {
    /// A PodGroup entity (GenericWorkload) sorts as its first member.
    fn less(&self, a: QueuedEntity<'_>, b: QueuedEntity<'_>) -> bool {
        if a.priority() != b.priority() {
            return a.priority() > b.priority();
        }
        let (ta, tb) = (self.sort_time(a), self.sort_time(b));
        if ta != tb {
            return ta < tb;
        }
        let (ga, gb) = (
            a.pod().and_then(|p| group_key(p)),
            b.pod().and_then(|p| group_key(p)),
        );
        if ga != gb {
            return ga < gb;
        }
        a.timestamp() < b.timestamp()
    }
}

impl PreEnqueuePlugin for Coscheduling {
    /// Never holds a pod back; notes when its group was first seen.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if let Some(g) = group_key(pod)
            && !self.first_seen.read().contains_key(&g)
        {
            self.first_seen
                .write()
                .entry(g)
                .or_insert_with(Instant::now);
        }
        Status::success()
    }
}

#[async_trait]
impl ReservePlugin for Coscheduling {
    async fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        Status::success()
    }

    /// A member failed after Reserve: the whole waiting group gives way.
    async fn unreserve(&self, _: &CycleState, pod: &PodInfo, _: &str) {
        let Some(g) = group_key(pod) else { return };
        for w in self.handle.waiting_pods().list() {
            if w.pod().uid != pod.uid && group_key(w.pod()).as_deref() == Some(g.as_str()) {
                w.reject(
                    Some(COSCHEDULING),
                    &format!("rejected: member {} of pod group {g} failed", pod.key()),
                );
            }
        }
    }
}

#[async_trait]
impl PermitPlugin for Coscheduling {
    async fn permit(&self, state: &CycleState, pod: &PodInfo, _: &str) -> (Status, Duration) {
        let Some(group) = group_of(pod) else {
            return (Status::success(), Duration::ZERO);
        };
        let placed = self.members_placed(state, &group, pod) + 1;
        if placed < group.min_member {
            let wait = Duration::from_secs(self.args.permit_waiting_time_seconds as u64);
            return (
                Status::new(
                    Code::Wait,
                    format!(
                        "waiting for pod group {}: {placed} of {} members",
                        group.key, group.min_member
                    ),
                ),
                wait,
            );
        }
        // This member completes the group: let every waiting one go.
        for w in self.handle.waiting_pods().list() {
            if group_key(w.pod()).as_deref() == Some(group.key.as_str()) {
                w.allow(COSCHEDULING);
            }
        }
        (Status::success(), Duration::ZERO)
    }
}

#[cfg(test)]
mod tests;
