//! The groups' bookkeeping, apart from the protocol: who is reserved, who
//! waits, and when a group is complete. Generic over what a waiting member
//! keeps (the extender keeps its Permit decider).

use std::collections::{BTreeMap, HashMap};

/// A group's identity: namespace/name.
pub type GroupKey = String;

#[derive(Debug)]
struct Group<D> {
    min: usize,
    /// reservation id -> pod (namespace/name) of the members reserved.
    reserved: BTreeMap<String, String>,
    /// reservation id -> (pod, what to decide with) of the waiting members.
    waiting: BTreeMap<String, (String, D)>,
}

/// What a member's Permit gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<D> {
    /// The group is complete: allow this member and release the waiting
    /// ones (reservation id, pod, decider).
    Allow {
        /// The waiting members to allow now.
        release: Vec<(String, String, D)>,
    },
    /// Not yet: wait.
    Wait,
}

/// Every group.
#[derive(Debug)]
pub struct Groups<D> {
    groups: HashMap<GroupKey, Group<D>>,
    by_reservation: HashMap<String, GroupKey>,
}

impl<D> Default for Groups<D> {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            by_reservation: HashMap::new(),
        }
    }
}

impl<D> Groups<D> {
    /// A member was reserved (also called by Permit for a member whose
    /// Reserve was not seen). The latest min-member seen wins.
    pub fn reserved(&mut self, key: &str, min: usize, reservation: &str, pod: &str) {
        let g = self.groups.entry(key.to_string()).or_insert_with(|| Group {
            min,
            reserved: BTreeMap::new(),
            waiting: BTreeMap::new(),
        });
        g.min = min;
        g.reserved.insert(reservation.to_string(), pod.to_string());
        self.by_reservation
            .insert(reservation.to_string(), key.to_string());
    }

    /// A member reached Permit: allow (and release the waiting) if its group
    /// is complete, else record it waiting with `decider`.
    pub fn permit(
        &mut self,
        key: &str,
        min: usize,
        reservation: &str,
        pod: &str,
        decider: D,
    ) -> Step<D> {
        self.reserved(key, min, reservation, pod);
        let Some(g) = self.groups.get_mut(key) else {
            return Step::Wait; // unreachable: just inserted
        };
        if g.reserved.len() >= g.min {
            let release = std::mem::take(&mut g.waiting)
                .into_iter()
                .map(|(rid, (pod, d))| (rid, pod, d))
                .collect();
            Step::Allow { release }
        } else {
            g.waiting
                .insert(reservation.to_string(), (pod.to_string(), decider));
            Step::Wait
        }
    }

    /// A member's attempt was undone: it no longer counts or waits. Returns
    /// its group's key if it was a member.
    pub fn unreserved(&mut self, reservation: &str) -> Option<GroupKey> {
        let key = self.by_reservation.remove(reservation)?;
        if let Some(g) = self.groups.get_mut(&key) {
            g.reserved.remove(reservation);
            g.waiting.remove(reservation);
            if g.reserved.is_empty() && g.waiting.is_empty() {
                self.groups.remove(&key);
            }
        }
        Some(key)
    }

    /// (reserved, min) of a group.
    pub fn count(&self, key: &str) -> Option<(usize, usize)> {
        self.groups.get(key).map(|g| (g.reserved.len(), g.min))
    }

    /// How many members of a group wait.
    #[cfg(test)]
    pub fn waiting(&self, key: &str) -> usize {
        self.groups.get(key).map_or(0, |g| g.waiting.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_wait_until_the_group_is_complete() {
        let mut g: Groups<&str> = Groups::default();
        g.reserved("ns/job", 3, "r1", "ns/w1");
        assert_eq!(g.permit("ns/job", 3, "r1", "ns/w1", "d1"), Step::Wait);
        g.reserved("ns/job", 3, "r2", "ns/w2");
        assert_eq!(g.permit("ns/job", 3, "r2", "ns/w2", "d2"), Step::Wait);
        assert_eq!(g.waiting("ns/job"), 2);
        g.reserved("ns/job", 3, "r3", "ns/w3");
        assert_eq!(g.count("ns/job"), Some((3, 3)));
        assert_eq!(
            g.permit("ns/job", 3, "r3", "ns/w3", "d3"),
            Step::Allow {
                release: vec![
                    ("r1".into(), "ns/w1".into(), "d1"),
                    ("r2".into(), "ns/w2".into(), "d2"),
                ]
            }
        );
        assert_eq!(g.waiting("ns/job"), 0);
        // Later members of a complete group go straight through.
        assert_eq!(
            g.permit("ns/job", 3, "r4", "ns/w4", "d4"),
            Step::Allow { release: vec![] }
        );
    }

    #[test]
    fn an_undone_member_no_longer_counts() {
        let mut g: Groups<u8> = Groups::default();
        g.reserved("ns/job", 2, "r1", "ns/w1");
        assert_eq!(g.permit("ns/job", 2, "r1", "ns/w1", 1), Step::Wait);
        // w1 timed out at Permit: berthd unreserves it.
        assert_eq!(g.unreserved("r1"), Some("ns/job".to_string()));
        assert_eq!(g.unreserved("r1"), None);
        assert_eq!(g.count("ns/job"), None);
        g.reserved("ns/job", 2, "r2", "ns/w2");
        assert_eq!(g.permit("ns/job", 2, "r2", "ns/w2", 2), Step::Wait);
        assert_eq!(g.count("ns/job"), Some((1, 2)));
        // A Permit whose Reserve was not seen still counts its member.
        assert_eq!(
            g.permit("ns/job", 2, "r3", "ns/w3", 3),
            Step::Allow {
                release: vec![("r2".into(), "ns/w2".into(), 2)]
            }
        );
        // Unreserve of a pod that is in no group.
        assert_eq!(g.unreserved("stranger"), None);
    }
}
