//! Maps and sets keyed by the request and cycle ids berthd assigns, hashed
//! by one multiply.

use std::collections::{HashMap, HashSet};

/// A hasher for the request and cycle ids berthd assigns (unique, mostly
/// sequential numbers): one multiply instead of SipHash, on the path of
/// every request and answer.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(super) type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;
pub(super) type IdSet = HashSet<u64, std::hash::BuildHasherDefault<IdHasher>>;
