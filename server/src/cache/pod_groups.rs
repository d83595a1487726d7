//! [`PodGroupManager`]: the PodGroups the scheduler knows, and where each
//! of their pods is (upstream's PodGroupManager and PodGroupState).
//!
//! Fed only with the `GenericWorkload` gate on, for pods that name a group
//! (`spec.schedulingGroup.podGroupName`). A member pod is in exactly one
//! of three states, moved by the cache's own transitions:
//!
//! ```text
//!   pending pod seen ─▶ Unscheduled ── assume ──▶ Assumed ── bound pod seen ──▶ Assigned
//!                          ▲                        │
//!                          └──────── forget ────────┘            (any) ── deleted ──▶ gone
//! ```
//!
//! * `all_pods_count`: every member the scheduler knows (unscheduled,
//!   assumed, assigned): what GangScheduling's PreEnqueue compares with
//!   `minCount` (are enough pods there to try?).
//! * `scheduled_pods_count`: assumed + assigned: what its Permit and
//!   PlacementFeasible count (are enough pods placed together?).
//!
//! A group's state outlives its PodGroup object (pods may come first, or
//! stay after it is deleted); it goes once it has neither.
//!
//! Its own lock, taken after the cache's (the cache updates it inside its
//! transitions) and never while taking another: plugins and the queue read
//! it without the cache.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::model::{GroupKey, PodGroupInfo, PodInfo, PodRef};

/// Where a member pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Pending: queued, in flight, or waiting for its group.
    Unscheduled,
    /// Assumed on a node by this scheduler, binding not yet observed.
    Assumed,
    /// Bound (observed with `spec.nodeName`).
    Assigned,
}

/// One group: its PodGroup (once observed) and its pods, by state.
#[derive(Debug, Clone, Default)]
pub struct PodGroupState {
    /// The PodGroup, if the scheduler has seen it.
    pub pod_group: Option<Arc<PodGroupInfo>>,
    /// Members by UID, in the order they became known (`seq`).
    members: crate::model::UidMap<(u64, MemberState, PodRef)>,
    /// How many members are in each state (by [`MemberState::slot`]):
    /// Permit counts the gang's placed pods once per pod, without a walk.
    counts: [usize; 3],
}

impl MemberState {
    fn slot(self) -> usize {
        match self {
            Self::Unscheduled => 0,
            Self::Assumed => 1,
            Self::Assigned => 2,
        }
    }
}

impl PodGroupState {
    fn pods_in(&self, state: Option<MemberState>) -> Vec<PodRef> {
        // One vector sorted once (Permit asks this once per pod of a gang).
        let mut v: Vec<(u64, PodRef)> = self
            .members
            .values()
            .filter(|(_, s, _)| state.is_none_or(|want| *s == want))
            .map(|(seq, _, p)| (*seq, p.clone()))
            .collect();
        v.sort_unstable_by_key(|(seq, _)| *seq);
        v.into_iter().map(|(_, p)| p).collect()
    }

    fn count(&self, state: MemberState) -> usize {
        self.counts[state.slot()]
    }

    /// Members still pending.
    pub fn unscheduled_pods_count(&self) -> usize {
        self.count(MemberState::Unscheduled)
    }

    /// Every member the scheduler knows.
    pub fn all_pods_count(&self) -> usize {
        self.members.len()
    }

    /// Members assumed or bound.
    pub fn scheduled_pods_count(&self) -> usize {
        self.count(MemberState::Assumed) + self.count(MemberState::Assigned)
    }

    /// Members pending, in the order they became known.
    pub fn unscheduled_pods(&self) -> Vec<PodRef> {
        self.pods_in(Some(MemberState::Unscheduled))
    }

    /// The member pending that became known first, if any (no copy of
    /// the others).
    pub fn first_unscheduled(&self) -> Option<PodRef> {
        self.members
            .values()
            .filter(|(_, s, _)| *s == MemberState::Unscheduled)
            .min_by_key(|(seq, _, _)| *seq)
            .map(|(_, _, p)| p.clone())
    }

    /// Members assumed, in the order they became known.
    pub fn assumed_pods(&self) -> Vec<PodRef> {
        self.pods_in(Some(MemberState::Assumed))
    }

    /// The UIDs of the members assumed (in no particular order).
    pub fn assumed_uids(&self) -> Vec<Arc<str>> {
        self.members
            .iter()
            .filter(|(_, (_, s, _))| *s == MemberState::Assumed)
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// Members bound.
    pub fn assigned_pods(&self) -> Vec<PodRef> {
        self.pods_in(Some(MemberState::Assigned))
    }

    /// Members assumed or bound.
    pub fn scheduled_pods(&self) -> Vec<PodRef> {
        let mut v = self.assumed_pods();
        v.extend(self.assigned_pods());
        v
    }

    /// Where the member with `uid` is.
    pub fn state_of(&self, uid: &str) -> Option<MemberState> {
        self.members.get(uid).map(|(_, s, _)| *s)
    }
}

/// The groups, by key. Cheap to share; every method holds the lock briefly.
#[derive(Debug, Default)]
pub struct PodGroupManager {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    groups: HashMap<GroupKey, PodGroupState, foldhash::fast::RandomState>,
    next_seq: u64,
}

/// The key of the group `pod` names, if it names one.
pub fn group_key_of(pod: &PodInfo) -> Option<GroupKey> {
    pod.scheduling_group
        .as_ref()
        .map(|g| GroupKey::new(pod.namespace.clone(), g.clone()))
}

impl Inner {
    fn drop_if_empty(&mut self, key: &GroupKey) {
        if self
            .groups
            .get(key)
            .is_some_and(|g| g.pod_group.is_none() && g.members.is_empty())
        {
            self.groups.remove(key);
        }
    }

    fn set_member(&mut self, pod: &PodRef, state: MemberState) {
        let Some(key) = group_key_of(pod) else { return };
        self.next_seq += 1;
        let seq = self.next_seq;
        let g = self.groups.entry(key).or_default();
        match g.members.get_mut(&pod.uid) {
            Some(m) => {
                g.counts[m.1.slot()] -= 1;
                m.1 = state;
                m.2 = pod.clone();
            }
            None => {
                g.members.insert(pod.uid.clone(), (seq, state, pod.clone()));
            }
        }
        g.counts[state.slot()] += 1;
    }
}

impl PodGroupManager {
    /// The PodGroup was added or changed.
    pub fn set_pod_group(&self, group: Arc<PodGroupInfo>) {
        let key = group.key.clone();
        self.inner.write().groups.entry(key).or_default().pod_group = Some(group);
    }

    /// The PodGroup was deleted (its pods, if any, keep their state).
    pub fn remove_pod_group(&self, key: &GroupKey) {
        let mut inner = self.inner.write();
        if let Some(g) = inner.groups.get_mut(key) {
            g.pod_group = None;
        }
        inner.drop_if_empty(key);
    }

    /// The PodGroup named `key`, if observed.
    pub fn pod_group(&self, key: &GroupKey) -> Option<Arc<PodGroupInfo>> {
        self.inner
            .read()
            .groups
            .get(key)
            .and_then(|g| g.pod_group.clone())
    }

    /// A copy of the group's state (`None` if nothing is known of it).
    pub fn get(&self, key: &GroupKey) -> Option<PodGroupState> {
        self.inner.read().groups.get(key).cloned()
    }

    /// Reads the group's state without copying it.
    pub fn with<R>(&self, key: &GroupKey, f: impl FnOnce(Option<&PodGroupState>) -> R) -> R {
        f(self.inner.read().groups.get(key))
    }

    /// A pending member was seen (added or updated).
    pub fn add_unscheduled(&self, pod: &PodRef) {
        let mut inner = self.inner.write();
        let keep = group_key_of(pod)
            .and_then(|k| inner.groups.get(&k))
            .and_then(|g| g.state_of(&pod.uid));
        // An update of an assumed pod's pending object does not undo the
        // assumption.
        let state = match keep {
            Some(MemberState::Assumed) => MemberState::Assumed,
            _ => MemberState::Unscheduled,
        };
        inner.set_member(pod, state);
    }

    /// The member was assumed on a node.
    pub fn assume(&self, pod: &PodRef) {
        self.inner.write().set_member(pod, MemberState::Assumed);
    }

    /// The member's assumption was forgotten: it is pending again, unless
    /// it was deleted meanwhile.
    pub fn forget(&self, pod: &PodRef) {
        let mut inner = self.inner.write();
        let known = group_key_of(pod)
            .and_then(|k| inner.groups.get(&k))
            .is_some_and(|g| g.members.contains_key(&pod.uid));
        if known {
            inner.set_member(pod, MemberState::Unscheduled);
        }
    }

    /// The member was observed bound.
    pub fn assign(&self, pod: &PodRef) {
        self.inner.write().set_member(pod, MemberState::Assigned);
    }

    /// The member went away.
    pub fn remove(&self, pod: &PodInfo) {
        let Some(key) = group_key_of(pod) else { return };
        let mut inner = self.inner.write();
        if let Some(g) = inner.groups.get_mut(&key)
            && let Some((_, state, _)) = g.members.remove(&pod.uid)
        {
            g.counts[state.slot()] -= 1;
        }
        inner.drop_if_empty(&key);
    }

    /// How many groups are known (with an object or pods).
    pub fn len(&self) -> usize {
        self.inner.read().groups.len()
    }

    /// Whether no group is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;
    use serde_json::json;

    fn pod(name: &str) -> PodRef {
        Arc::new(make_pod(name).group("train").build())
    }

    fn group(min: i32) -> Arc<PodGroupInfo> {
        let obj = serde_json::from_value(json!({
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
        }))
        .unwrap();
        Arc::new(PodGroupInfo::new(Arc::new(obj)).unwrap())
    }

    #[test]
    fn counts_follow_the_pods_through_their_states() {
        let m = PodGroupManager::default();
        let key = GroupKey::new("default", "train");
        let (a, b, c) = (pod("a"), pod("b"), pod("c"));
        m.add_unscheduled(&a);
        m.add_unscheduled(&b);
        let s = m.get(&key).unwrap();
        assert!(s.pod_group.is_none(), "pods may come before their group");
        assert_eq!((s.all_pods_count(), s.scheduled_pods_count()), (2, 0));
        m.set_pod_group(group(3));
        m.assume(&a);
        m.add_unscheduled(&a); // an update of the pending object
        let s = m.get(&key).unwrap();
        assert_eq!((s.all_pods_count(), s.scheduled_pods_count()), (2, 1));
        assert_eq!(s.assumed_pods()[0].name.as_ref(), "a");
        // Bound: still scheduled; a bound pod of the group counts.
        m.assign(&Arc::new(make_pod("a").group("train").node("n1").build()));
        m.assign(&Arc::new(make_pod("c").group("train").node("n2").build()));
        let s = m.get(&key).unwrap();
        assert_eq!((s.all_pods_count(), s.scheduled_pods_count()), (3, 2));
        assert_eq!(s.unscheduled_pods().len(), 1);
        assert_eq!(s.first_unscheduled().unwrap().name.as_ref(), "b");
        // Forget: pending again.
        m.assume(&b);
        m.forget(&b);
        assert_eq!(m.get(&key).unwrap().scheduled_pods_count(), 2);
        let s = m.get(&key).unwrap();
        assert_eq!(s.unscheduled_pods_count(), s.unscheduled_pods().len());
        // Deletions; the group stays while its object does. The kept counts
        // follow: removing one state's member leaves the others'.
        m.remove(&c);
        let s = m.get(&key).unwrap();
        assert_eq!(
            (s.scheduled_pods_count(), s.unscheduled_pods_count()),
            (1, 1)
        );
        for p in [&a, &b] {
            m.remove(p);
        }
        let s = m.get(&key).unwrap();
        assert_eq!(
            (
                s.all_pods_count(),
                s.scheduled_pods_count(),
                s.unscheduled_pods_count()
            ),
            (0, 0, 0)
        );
        m.remove_pod_group(&key);
        assert!(m.get(&key).is_none() && m.is_empty());
    }

    #[test]
    fn pods_without_a_group_are_not_tracked() {
        let m = PodGroupManager::default();
        m.add_unscheduled(&Arc::new(make_pod("solo").build()));
        assert!(m.is_empty());
    }
}
