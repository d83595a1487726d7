//! A binary heap of queued entities (pods, or pod groups), keyed, with an
//! external ordering.
//!
//! The ordering comes from the profile's QueueSort plugin (activeQ) or the
//! backoff expiry (backoffQ), so it is passed to each operation. Items can
//! be updated or removed in place by key.
//!
//! Items the ordering ties come out in the order they were first pushed
//! (an update keeps an item's place). A binary heap alone takes ties in an
//! order its shape decides, which depends on everything pushed and popped
//! before: pods queued at one instant (a simulated clock ticks in whole
//! milliseconds, so a replay's burst of arrivals ties on its timestamp)
//! would be scheduled in another order than they came, and a replay of a
//! recorded day would not place them as the recorded berthd did.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{QueuedPodGroupInfo, QueuedPodInfo};

/// What a heap holds: an item with a key unique among the heap's items.
pub(crate) trait Keyed {
    /// The key: a pod's UID, a group's entity key.
    fn key(&self) -> &Arc<str>;
}

impl Keyed for QueuedPodInfo {
    fn key(&self) -> &Arc<str> {
        &self.pod.uid
    }
}

impl Keyed for QueuedPodGroupInfo {
    fn key(&self) -> &Arc<str> {
        &self.entity_key
    }
}

/// `less(a, b)`: whether `a` comes out before `b`.
pub(crate) type Less<'a, T = QueuedPodInfo> = &'a dyn Fn(&T, &T) -> bool;

#[derive(Debug)]
pub(crate) struct KeyedHeap<T = QueuedPodInfo> {
    items: Vec<T>,
    /// Each item's arrival number, beside it in `items`: the tie-break.
    arrivals: Vec<u64>,
    /// The arrival number the next new item gets.
    next_arrival: u64,
    /// Each item's place. Every swap of a sift updates two entries, so the
    /// hash is foldhash's (several times SipHash's speed on a UID; seeded
    /// at random per heap all the same).
    index: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
}

impl<T> Default for KeyedHeap<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            arrivals: Vec::new(),
            next_arrival: 0,
            index: HashMap::default(),
        }
    }
}

impl<T: Keyed> KeyedHeap<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.index.contains_key(uid)
    }

    pub fn get(&self, uid: &str) -> Option<&T> {
        self.index.get(uid).map(|&i| &self.items[i])
    }

    pub fn peek(&self) -> Option<&T> {
        self.items.first()
    }

    /// Whether the item at `a` comes out before the one at `b`: the
    /// ordering's answer, and on a tie the earlier arrival.
    fn before(&self, a: usize, b: usize, less: Less<'_, T>) -> bool {
        let (x, y) = (&self.items[a], &self.items[b]);
        less(x, y) || (!less(y, x) && self.arrivals[a] < self.arrivals[b])
    }

    /// The first `k` items in the order `pop` takes them (ties included),
    /// without taking them: `pop` is played over the positions it would
    /// change (each moves the last item to the root and sifts it down),
    /// the heap untouched.
    pub fn first(&self, k: usize, less: Less<'_, T>) -> Vec<&T> {
        let mut out = Vec::with_capacity(k.min(self.items.len()));
        // Position -> index in `items`, where a played pop changed it.
        let mut moved: HashMap<usize, usize, foldhash::fast::FixedState> = HashMap::default();
        let at = |moved: &HashMap<usize, usize, _>, pos: usize| *moved.get(&pos).unwrap_or(&pos);
        let mut n = self.items.len();
        while out.len() < k && n > 0 {
            out.push(&self.items[at(&moved, 0)]);
            n -= 1;
            if n == 0 {
                break;
            }
            let last = at(&moved, n);
            moved.insert(0, last);
            let mut i = 0;
            loop {
                let l = 2 * i + 1;
                if l >= n {
                    break;
                }
                let before = |p: usize, q: usize| self.before(at(&moved, p), at(&moved, q), less);
                let mut child = l;
                if l + 1 < n && before(l + 1, l) {
                    child = l + 1;
                }
                if !before(child, i) {
                    break;
                }
                let (a, b) = (at(&moved, i), at(&moved, child));
                moved.insert(i, b);
                moved.insert(child, a);
                i = child;
            }
        }
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }

    /// Adds `item`, or replaces the item with the same UID.
    pub fn push(&mut self, item: T, less: Less<'_, T>) {
        if let Some(&i) = self.index.get(item.key()) {
            self.items[i] = item;
            self.fix(i, less);
            return;
        }
        let i = self.items.len();
        self.index.insert(item.key().clone(), i);
        self.items.push(item);
        self.arrivals.push(self.next_arrival);
        self.next_arrival += 1;
        self.up(i, less);
    }

    pub fn pop(&mut self, less: Less<'_, T>) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        Some(self.remove_at(0, less))
    }

    pub fn remove(&mut self, uid: &str, less: Less<'_, T>) -> Option<T> {
        let i = *self.index.get(uid)?;
        Some(self.remove_at(i, less))
    }

    fn remove_at(&mut self, i: usize, less: Less<'_, T>) -> T {
        let last = self.items.len() - 1;
        self.swap(i, last);
        let item = self.items.pop().expect("non-empty");
        self.arrivals.pop();
        self.index.remove(item.key());
        if i < self.items.len() {
            self.fix(i, less);
        }
        item
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.items.swap(a, b);
        self.arrivals.swap(a, b);
        *self.index.get_mut(self.items[a].key()).expect("indexed") = a;
        *self.index.get_mut(self.items[b].key()).expect("indexed") = b;
    }

    fn fix(&mut self, i: usize, less: Less<'_, T>) {
        if !self.up(i, less) {
            self.down(i, less);
        }
    }

    fn up(&mut self, mut i: usize, less: Less<'_, T>) -> bool {
        let start = i;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.before(i, parent, less) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i != start
    }

    fn down(&mut self, mut i: usize, less: Less<'_, T>) {
        let n = self.items.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let mut child = l;
            if l + 1 < n && self.before(l + 1, l, less) {
                child = l + 1;
            }
            if !self.before(child, i, less) {
                break;
            }
            self.swap(i, child);
            i = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;
    use tokio::time::Instant;

    fn item(name: &str, prio: i32) -> QueuedPodInfo {
        QueuedPodInfo::new(
            Arc::new(make_pod(name).priority(prio).build()),
            Instant::now(),
        )
    }

    #[test]
    fn orders_updates_and_removes() {
        let less = |a: &QueuedPodInfo, b: &QueuedPodInfo| a.pod.priority > b.pod.priority;
        let mut h: KeyedHeap = KeyedHeap::default();
        for (i, p) in [5, 1, 9, 3, 7, 2, 8].into_iter().enumerate() {
            h.push(item(&format!("p{i}"), p), &less);
        }
        assert_eq!(h.peek().unwrap().pod.priority, 9);
        h.remove("uid-default-p4", &less); // priority 7
        h.push(item("p1", 10), &less); // 1 -> 10
        let order: Vec<i32> = std::iter::from_fn(|| h.pop(&less))
            .map(|q| q.pod.priority)
            .collect();
        assert_eq!(order, [10, 9, 8, 5, 3, 2]);
        assert_eq!(h.len(), 0);
        assert!(h.index.is_empty());
    }

    #[test]
    fn first_k_are_what_pop_takes_next() {
        let less = |a: &QueuedPodInfo, b: &QueuedPodInfo| a.pod.priority > b.pod.priority;
        let prios = [5, 1, 9, 3, 7, 2, 8, 6, 4, 11, 0, 10];
        let mut h: KeyedHeap = KeyedHeap::default();
        for (i, p) in prios.into_iter().enumerate() {
            h.push(item(&format!("p{i}"), p), &less);
        }
        for k in 0..=prios.len() + 1 {
            let first: Vec<i32> = h.first(k, &less).iter().map(|q| q.pod.priority).collect();
            let mut sorted = prios.to_vec();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            sorted.truncate(k);
            assert_eq!(first, sorted, "k = {k}");
        }
        assert!(
            KeyedHeap::<QueuedPodInfo>::default()
                .first(3, &less)
                .is_empty()
        );
        // Ties come out in the order pop takes them: priorities in three
        // ties, after updates and a removal.
        let mut h: KeyedHeap = KeyedHeap::default();
        for i in 0..40 {
            h.push(item(&format!("t{i}"), i % 3), &less);
        }
        h.remove("uid-default-t7", &less);
        h.push(item("t9", 5), &less);
        let names = |v: Vec<&QueuedPodInfo>| -> Vec<String> {
            v.into_iter().map(|q| q.pod.name.to_string()).collect()
        };
        let first = names(h.first(12, &less));
        let popped: Vec<String> = std::iter::from_fn(|| h.pop(&less))
            .take(12)
            .map(|q| q.pod.name.to_string())
            .collect();
        assert_eq!(first, popped);
    }

    /// Items the ordering ties come out in the order they first came,
    /// whatever was pushed and popped before; an update keeps its place.
    #[test]
    fn ties_come_out_in_arrival_order() {
        let less = |a: &QueuedPodInfo, b: &QueuedPodInfo| a.pod.priority > b.pod.priority;
        let mut h: KeyedHeap = KeyedHeap::default();
        // Mixed priorities, some popped, so the heap's shape is no longer
        // the order of arrival.
        for i in 0..30 {
            h.push(item(&format!("a{i}"), i * 7 % 5), &less);
        }
        for _ in 0..9 {
            h.pop(&less);
        }
        for i in 0..30 {
            h.push(item(&format!("b{i}"), 2), &less);
        }
        // An update of b3 (same priority) keeps its place; b5 is removed.
        h.push(item("b3", 2), &less);
        h.remove("uid-default-b5", &less);
        let order: Vec<String> = std::iter::from_fn(|| h.pop(&less))
            .filter(|q| q.pod.priority == 2)
            .map(|q| q.pod.name.to_string())
            .collect();
        // The a-pods of priority 2 left came before every b-pod, in order.
        let a: Vec<String> = order
            .iter()
            .filter(|n| n.starts_with('a'))
            .cloned()
            .collect();
        let mut sorted_a = a.clone();
        sorted_a.sort_by_key(|n| n[1..].parse::<u32>().unwrap_or(0));
        assert_eq!(a, sorted_a);
        let want_b: Vec<String> = (0..30)
            .filter(|&i| i != 5)
            .map(|i| format!("b{i}"))
            .collect();
        assert_eq!(order[a.len()..], want_b[..]);
    }
}
