//! [`Recent`]: a bounded memory of keys, the oldest forgotten first; what
//! a connection remembers of finished requests and decided reservations.

use std::collections::{HashMap, VecDeque};

/// How many finished requests (and decided reservations) a connection
/// remembers, to tell a duplicate or late message from an unknown one.
pub(super) const REMEMBERED: usize = 4096;

/// A bounded memory of keys, the oldest forgotten first.
pub(super) struct Recent<K, V, S = std::collections::hash_map::RandomState> {
    order: VecDeque<K>,
    map: HashMap<K, V, S>,
}

impl<K: std::hash::Hash + Eq + Clone, V, S: std::hash::BuildHasher + Default> Default
    for Recent<K, V, S>
{
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            map: HashMap::default(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V, S: std::hash::BuildHasher> Recent<K, V, S> {
    pub(super) fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
            if self.order.len() > REMEMBERED
                && let Some(old) = self.order.pop_front()
            {
                self.map.remove(&old);
            }
        }
    }

    pub(super) fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }
}
