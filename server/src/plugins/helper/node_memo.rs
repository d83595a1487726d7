//! [`NodeMemo`]: per-node answers to one question, kept from cycle to
//! cycle and recomputed only where a node changed.
//!
//! PodTopologySpread and InterPodAffinity ask, every cycle, questions whose
//! answers sum over every pod of the cluster ("how many pods match this
//! selector in each zone?"). A node's share of the answer changes only when
//! the node does, and a `NodeInfo` is copied on write: a node that changed
//! is a new `Arc`. So a memo entry keeps, per position of the node list, the
//! `Arc` it read and what it found there, and a cycle recomputes only the
//! positions whose `Arc` is not the one kept, folding the difference into a
//! running aggregate. Holding the `Arc` keeps the node's allocation alive,
//! so its address cannot be reused by another node while the entry
//! compares against it.
//!
//! The cost of a cycle is one pointer comparison per node plus the work on
//! the nodes that changed since the entry was last used (usually the one
//! the previous pod went to), instead of a walk over every pod.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::cache::NodeInfo;
use crate::framework::{Parallelizer, WorkCost};

/// Below this many stale nodes, they are recomputed inline.
const PARALLEL_FROM: usize = 64;

/// Entries unused for this many lookups of other questions are dropped: an
/// idle entry holds the versions of nodes it last read, and a few cycles
/// change only a few nodes, so this bounds both the entries and the old
/// versions they keep alive.
const MAX_IDLE_LOOKUPS: u64 = 64;

/// A running sum of per-node answers.
pub trait Aggregate: Default + Send + 'static {
    /// One node's answer.
    type Node: Default + Send + Sync + 'static;

    /// Adds a node's answer (which may record where it went, for
    /// [`Aggregate::sub`]).
    fn add(&mut self, node: &mut Self::Node);

    /// Takes back an answer [`Aggregate::add`] added.
    fn sub(&mut self, node: &Self::Node);
}

/// One question's answers, per position of the node list they were last
/// computed for.
#[derive(Default)]
pub struct MemoEntry<A: Aggregate> {
    read: Vec<Option<Arc<NodeInfo>>>,
    nodes: Vec<A::Node>,
    aggregate: A,
}

impl<A: Aggregate> MemoEntry<A> {
    /// The sum of every node's answer.
    pub fn aggregate(&self) -> &A {
        &self.aggregate
    }

    /// Each node's answer, aligned with the node list.
    pub fn nodes(&self) -> &[A::Node] {
        &self.nodes
    }

    fn refresh<F>(&mut self, list: &[Arc<NodeInfo>], par: &Parallelizer, cost: &WorkCost, f: F)
    where
        F: Fn(&NodeInfo) -> A::Node + Sync,
    {
        while self.read.len() > list.len() {
            let node = self.nodes.pop().unwrap_or_default();
            if self.read.pop().flatten().is_some() {
                self.aggregate.sub(&node);
            }
        }
        self.read.resize(list.len(), None);
        self.nodes.resize_with(list.len(), Default::default);
        let stale: Vec<usize> = (0..list.len())
            .filter(|&i| {
                !self.read[i]
                    .as_ref()
                    .is_some_and(|kept| Arc::ptr_eq(kept, &list[i]))
            })
            .collect();
        if stale.is_empty() {
            return;
        }
        let mut fresh: Vec<A::Node> = stale.iter().map(|_| A::Node::default()).collect();
        let compute = |j: usize, out: &mut A::Node| *out = f(&list[stale[j]]);
        if stale.len() >= PARALLEL_FROM {
            par.for_each_mut_measured(cost, &mut fresh, compute);
        } else {
            fresh
                .iter_mut()
                .enumerate()
                .for_each(|(j, out)| compute(j, out));
        }
        for (&i, mut node) in stale.iter().zip(fresh) {
            if self.read[i].is_some() {
                self.aggregate.sub(&self.nodes[i]);
            }
            self.aggregate.add(&mut node);
            self.nodes[i] = node;
            self.read[i] = Some(list[i].clone());
        }
    }
}

/// An entry with the question it answers (kept once, when first asked).
type Shared<K, A> = Arc<Mutex<(K, MemoEntry<A>)>>;

type Slots<K, A> = HashMap<K, Slot<K, A>>;

struct Slot<K, A: Aggregate> {
    last_used: u64,
    entry: Shared<K, A>,
}

/// Answers to questions of type `K`, each an [`Aggregate`] `A` over the
/// nodes. Shared by every cycle (and dry run) asking the same question;
/// correct for any node list, fastest when consecutive lists share nodes.
pub struct NodeMemo<K, A: Aggregate> {
    /// The lookup clock and the questions.
    slots: Mutex<(u64, Slots<K, A>)>,
    cost: WorkCost,
}

impl<K, A: Aggregate> Default for NodeMemo<K, A> {
    fn default() -> Self {
        Self {
            slots: Mutex::new((0, HashMap::new())),
            cost: WorkCost::default(),
        }
    }
}

impl<K, A: Aggregate> std::fmt::Debug for NodeMemo<K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMemo")
            .field("questions", &self.slots.lock().1.len())
            .finish()
    }
}

impl<K: Hash + Eq + Clone, A: Aggregate> NodeMemo<K, A> {
    /// Brings the answer to `key` up to date for `list` (computing a node's
    /// answer with `f`, given the question) and reads it with `read`.
    pub fn with<R, F>(
        &self,
        key: K,
        list: &[Arc<NodeInfo>],
        par: &Parallelizer,
        f: F,
        read: impl FnOnce(&MemoEntry<A>) -> R,
    ) -> R
    where
        F: Fn(&K, &NodeInfo) -> A::Node + Sync,
        K: Sync,
    {
        let entry = {
            let mut guard = self.slots.lock();
            let (clock, slots) = &mut *guard;
            *clock += 1;
            let now = *clock;
            slots.retain(|_, s| now - s.last_used <= MAX_IDLE_LOOKUPS);
            let slot = match slots.get_mut(&key) {
                Some(slot) => slot,
                None => slots.entry(key.clone()).or_insert(Slot {
                    last_used: now,
                    entry: Arc::new(Mutex::new((key, MemoEntry::default()))),
                }),
            };
            slot.last_used = now;
            slot.entry.clone()
        };
        let mut guard = entry.lock();
        let (key, entry) = &mut *guard;
        let key = &*key;
        entry.refresh(list, par, &self.cost, |info| f(key, info));
        read(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    /// Pods per node, summed.
    #[derive(Default)]
    struct Total(i64);

    impl Aggregate for Total {
        type Node = i64;
        fn add(&mut self, n: &mut i64) {
            self.0 += *n;
        }
        fn sub(&mut self, n: &i64) {
            self.0 -= *n;
        }
    }

    fn node(name: &str, pods: usize) -> Arc<NodeInfo> {
        let mut n = NodeInfo::new(Arc::new(make_node(name).build()));
        for i in 0..pods {
            n.add_pod(Arc::new(
                make_pod(&format!("{name}-{i}")).node(name).build(),
            ));
        }
        Arc::new(n)
    }

    #[test]
    fn recomputes_only_changed_nodes_and_follows_any_list() {
        let memo: NodeMemo<&str, Total> = NodeMemo::default();
        let par = Parallelizer::inline();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let count = |_: &&str, n: &NodeInfo| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            n.pods().len() as i64
        };
        let mut list: Vec<Arc<NodeInfo>> = (0..10).map(|i| node(&format!("n{i}"), i)).collect();
        assert_eq!(memo.with("q", &list, &par, count, |e| e.aggregate().0), 45);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 10);
        // Unchanged: nothing recomputed.
        assert_eq!(memo.with("q", &list, &par, count, |e| e.aggregate().0), 45);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 10);
        // One node copied on write and changed: only it is recomputed.
        let mut changed = (*list[3]).clone();
        changed.add_pod(Arc::new(make_pod("extra").node("n3").build()));
        list[3] = Arc::new(changed);
        assert_eq!(memo.with("q", &list, &par, count, |e| e.aggregate().0), 46);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 11);
        // A shorter, reordered list: the positions that moved are redone
        // and the dropped ones taken back.
        let short: Vec<Arc<NodeInfo>> = vec![list[9].clone(), list[3].clone()];
        assert_eq!(memo.with("q", &short, &par, count, |e| e.aggregate().0), 13);
        assert_eq!(
            memo.with("q", &short, &par, count, |e| e.nodes().to_vec()),
            [9, 4]
        );
        // Another question has its own answers.
        assert_eq!(memo.with("r", &short, &par, count, |e| e.aggregate().0), 13);
    }

    #[test]
    fn idle_questions_are_dropped() {
        let memo: NodeMemo<u64, Total> = NodeMemo::default();
        let par = Parallelizer::inline();
        let list = vec![node("n", 1)];
        for q in 0..(MAX_IDLE_LOOKUPS + 10) {
            memo.with(q, &list, &par, |_, n| n.pods().len() as i64, |_| ());
        }
        assert_eq!(memo.slots.lock().1.len() as u64, MAX_IDLE_LOOKUPS + 1);
    }
}
