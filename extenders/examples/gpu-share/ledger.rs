//! The GPU memory ledger: per node, per GPU, the MiB used by the pods this
//! extender reserved, with the allocation of each pod (by uid).
//!
//! Exactness: the used totals always equal the sum of the allocations
//! ([`Ledger::check`]); a reservation is undone only by its own reservation
//! id, so a late Unreserve of an earlier attempt cannot free the allocation
//! of a newer attempt of the same pod.

use std::collections::BTreeMap;

use serde::Serialize;

/// A node's GPUs: how many, and the memory of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpus {
    /// How many GPUs (allocatable `example.com/gpu`).
    pub count: usize,
    /// MiB of each (annotation `example.com/gpu-memory-mib`).
    pub mib_each: u64,
}

/// One pod's share of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// namespace/name of the pod (for people reading the ledger).
    pub pod: String,
    /// The node.
    pub node: String,
    /// The GPU's index on the node.
    pub gpu: usize,
    /// MiB taken.
    pub mib: u64,
    /// The reservation that made it.
    pub reservation: String,
    /// Whether the pod was bound (PostBind).
    pub committed: bool,
}

/// What a Reserve did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The GPU chosen.
    pub gpu: usize,
    /// MiB used on that GPU afterwards.
    pub used_after: u64,
    /// An allocation of an earlier attempt of the same pod, freed first.
    pub replaced: Option<Allocation>,
}

/// The ledger.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Ledger {
    /// node -> MiB used per GPU index.
    used: BTreeMap<String, Vec<u64>>,
    /// pod uid -> its allocation.
    allocations: BTreeMap<String, Allocation>,
}

impl Ledger {
    /// MiB used on `node`'s GPU `gpu`.
    pub fn used(&self, node: &str, gpu: usize) -> u64 {
        self.used
            .get(node)
            .and_then(|v| v.get(gpu))
            .copied()
            .unwrap_or(0)
    }

    /// MiB used over every node and GPU.
    #[cfg(test)]
    pub fn total_used(&self) -> u64 {
        self.used.values().flatten().sum()
    }

    /// The allocation of pod `uid`.
    #[cfg(test)]
    pub fn allocation(&self, uid: &str) -> Option<&Allocation> {
        self.allocations.get(uid)
    }

    /// The GPU of `node` that placing `mib` would leave with the least free
    /// memory (best fit; the lowest index among equals), and that free
    /// memory. None when no single GPU has `mib` free.
    pub fn best_fit(&self, node: &str, gpus: Gpus, mib: u64) -> Option<(usize, u64)> {
        (0..gpus.count)
            .filter_map(|i| {
                let free = gpus.mib_each.saturating_sub(self.used(node, i));
                (free >= mib).then(|| (i, free - mib))
            })
            .min_by_key(|&(i, free_after)| (free_after, i))
    }

    /// Bin-packing score in 0..=100: how full the best-fit GPU would be
    /// after placing `mib` (0 when nothing fits).
    pub fn score(&self, node: &str, gpus: Gpus, mib: u64) -> i64 {
        match self.best_fit(node, gpus, mib) {
            Some((_, free_after)) if gpus.mib_each > 0 => {
                ((gpus.mib_each - free_after) * 100 / gpus.mib_each) as i64
            }
            _ => 0,
        }
    }

    /// Gives pod `uid` `mib` on the best-fit GPU of `node`. Reserving again
    /// under the same reservation is a no-op; under another reservation
    /// (a new attempt whose predecessor's Unreserve is still on its way) it
    /// replaces the earlier allocation. None when no GPU fits.
    pub fn reserve(
        &mut self,
        uid: &str,
        pod: &str,
        node: &str,
        gpus: Gpus,
        mib: u64,
        reservation: &str,
    ) -> Option<Reserved> {
        if let Some(a) = self.allocations.get(uid)
            && a.reservation == reservation
        {
            return Some(Reserved {
                gpu: a.gpu,
                used_after: self.used(&a.node, a.gpu),
                replaced: None,
            });
        }
        // Free an earlier attempt first, but put it back if nothing fits.
        let replaced = self.allocations.remove(uid);
        if let Some(old) = &replaced {
            self.sub(&old.node, old.gpu, old.mib);
        }
        let Some((gpu, _)) = self.best_fit(node, gpus, mib) else {
            if let Some(old) = replaced {
                self.add(&old.node, old.gpu, old.mib);
                self.allocations.insert(uid.to_string(), old);
            }
            return None;
        };
        self.add(node, gpu, mib);
        self.allocations.insert(
            uid.to_string(),
            Allocation {
                pod: pod.to_string(),
                node: node.to_string(),
                gpu,
                mib,
                reservation: reservation.to_string(),
                committed: false,
            },
        );
        Some(Reserved {
            gpu,
            used_after: self.used(node, gpu),
            replaced,
        })
    }

    /// Undoes reservation `reservation` of pod `uid`: frees its allocation
    /// if it is the one that reservation made (and not committed). Returns
    /// what was freed; None (and no change) otherwise, so repeating it is
    /// harmless.
    pub fn unreserve(&mut self, uid: &str, reservation: &str) -> Option<Allocation> {
        match self.allocations.get(uid) {
            Some(a) if a.reservation == reservation && !a.committed => {}
            _ => return None,
        }
        let a = self.allocations.remove(uid)?;
        self.sub(&a.node, a.gpu, a.mib);
        Some(a)
    }

    /// Marks pod `uid`'s allocation committed (bound). Returns it, or None if
    /// the pod has no allocation.
    pub fn commit(&mut self, uid: &str) -> Option<&Allocation> {
        let a = self.allocations.get_mut(uid)?;
        a.committed = true;
        Some(a)
    }

    /// Checks that every total equals the sum of its allocations.
    pub fn check(&self) -> Result<(), String> {
        let mut sums: BTreeMap<(&str, usize), u64> = BTreeMap::new();
        for a in self.allocations.values() {
            *sums.entry((&a.node, a.gpu)).or_default() += a.mib;
        }
        for (node, gpus) in &self.used {
            for (i, used) in gpus.iter().enumerate() {
                let expected = sums.remove(&(node.as_str(), i)).unwrap_or(0);
                if *used != expected {
                    return Err(format!(
                        "{node} gpu {i}: ledger says {used} MiB, allocations {expected} MiB"
                    ));
                }
            }
        }
        match sums.into_iter().next() {
            Some(((node, gpu), mib)) => Err(format!(
                "{node} gpu {gpu}: {mib} MiB allocated but not in the ledger"
            )),
            None => Ok(()),
        }
    }

    fn add(&mut self, node: &str, gpu: usize, mib: u64) {
        let v = self.used.entry(node.to_string()).or_default();
        if v.len() <= gpu {
            v.resize(gpu + 1, 0);
        }
        v[gpu] += mib;
    }

    fn sub(&mut self, node: &str, gpu: usize, mib: u64) {
        if let Some(v) = self.used.get_mut(node)
            && let Some(u) = v.get_mut(gpu)
        {
            *u = u.saturating_sub(mib);
        }
        // Drop a node's entry once nothing is used on it.
        if self
            .used
            .get(node)
            .is_some_and(|v| v.iter().all(|u| *u == 0))
        {
            self.used.remove(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_16G: Gpus = Gpus {
        count: 2,
        mib_each: 16384,
    };

    fn checked(l: &Ledger) {
        if let Err(e) = l.check() {
            panic!("ledger inconsistent: {e}");
        }
    }

    #[test]
    fn reserve_unreserve_and_duplicates_keep_totals_exact() {
        let mut l = Ledger::default();
        let r = l.reserve("u1", "ns/a", "n1", TWO_16G, 4096, "r1");
        assert_eq!(r.map(|r| (r.gpu, r.used_after)), Some((0, 4096)));
        // Best fit: the partly used GPU 0 is preferred.
        let r = l.reserve("u2", "ns/b", "n1", TWO_16G, 8192, "r2");
        assert_eq!(r.map(|r| (r.gpu, r.used_after)), Some((0, 12288)));
        // Doesn't fit GPU 0 any more: GPU 1.
        let r = l.reserve("u3", "ns/c", "n1", TWO_16G, 8192, "r3");
        assert_eq!(r.map(|r| (r.gpu, r.used_after)), Some((1, 8192)));
        checked(&l);
        assert_eq!(l.total_used(), 4096 + 8192 + 8192);

        // The same Reserve again changes nothing.
        assert!(l.reserve("u1", "ns/a", "n1", TWO_16G, 4096, "r1").is_some());
        assert_eq!(l.total_used(), 20480);

        // Unreserve frees exactly once.
        assert_eq!(l.unreserve("u2", "r2").map(|a| a.mib), Some(8192));
        assert_eq!(l.unreserve("u2", "r2"), None);
        assert_eq!(l.unreserve("u2", "r2"), None);
        checked(&l);
        assert_eq!(l.used("n1", 0), 4096);
        assert_eq!(l.total_used(), 4096 + 8192);

        // Never reserved: nothing happens.
        assert_eq!(l.unreserve("nobody", "rx"), None);
        assert_eq!(l.total_used(), 12288);

        assert!(l.unreserve("u1", "r1").is_some());
        assert!(l.unreserve("u3", "r3").is_some());
        checked(&l);
        assert_eq!(l.total_used(), 0);
    }

    #[test]
    fn a_late_unreserve_does_not_free_a_newer_attempt() {
        let mut l = Ledger::default();
        assert!(l.reserve("u", "ns/p", "n1", TWO_16G, 1000, "old").is_some());
        // The pod is retried before the old attempt's Unreserve arrives.
        let r = l.reserve("u", "ns/p", "n2", TWO_16G, 1000, "new");
        assert_eq!(
            r.and_then(|r| r.replaced).map(|a| a.reservation),
            Some("old".to_string())
        );
        assert_eq!(l.used("n1", 0), 0);
        assert_eq!(l.used("n2", 0), 1000);
        assert_eq!(l.unreserve("u", "old"), None);
        assert_eq!(l.used("n2", 0), 1000);
        checked(&l);
    }

    #[test]
    fn no_fit_changes_nothing() {
        let mut l = Ledger::default();
        assert!(
            l.reserve("u1", "ns/a", "n1", TWO_16G, 16000, "r1")
                .is_some()
        );
        assert!(
            l.reserve("u2", "ns/b", "n1", TWO_16G, 16000, "r2")
                .is_some()
        );
        assert_eq!(l.reserve("u3", "ns/c", "n1", TWO_16G, 1000, "r3"), None);
        // Even for a pod with an earlier allocation elsewhere, which stays.
        assert!(l.reserve("u4", "ns/d", "n2", TWO_16G, 1000, "r4").is_some());
        assert_eq!(l.reserve("u4", "ns/d", "n1", TWO_16G, 1000, "r5"), None);
        assert_eq!(l.used("n2", 0), 1000);
        assert_eq!(
            l.allocation("u4").map(|a| a.reservation.as_str()),
            Some("r4")
        );
        checked(&l);
        assert_eq!(l.total_used(), 33000);
    }

    #[test]
    fn committed_allocations_survive_unreserve() {
        let mut l = Ledger::default();
        assert!(l.reserve("u", "ns/p", "n1", TWO_16G, 500, "r").is_some());
        assert!(l.commit("u").is_some_and(|a| a.committed));
        assert_eq!(l.unreserve("u", "r"), None);
        assert_eq!(l.total_used(), 500);
        assert!(l.commit("other").is_none());
    }

    #[test]
    fn score_prefers_the_fullest_gpu_that_fits() {
        let mut l = Ledger::default();
        assert!(
            l.reserve("u1", "ns/a", "busy", TWO_16G, 12288, "r1")
                .is_some()
        );
        // 4096 more fills busy's GPU 0 completely.
        assert_eq!(l.score("busy", TWO_16G, 4096), 100);
        assert_eq!(l.score("empty", TWO_16G, 4096), 25);
        assert_eq!(l.score("empty", TWO_16G, 20000), 0);
        assert_eq!(l.best_fit("busy", TWO_16G, 8192), Some((1, 8192)));
    }
}
