//! A small, fast, seedable random generator, kept below every module that
//! breaks ties or jitters (the scheduling algorithm, preemption, leader
//! election), so that none of them imports another for it.

/// A small, fast random generator (wyrand) for tie-breaking; seedable so
/// that tests and simulations are reproducible.
#[derive(Debug, Clone)]
pub struct FastRng(u64);

impl FastRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator seeded from the clock and the process; or, while this
    /// thread builds a scheduler given a seed ([`with_seed`]), from that
    /// seed, so that every tie a seeded scheduler breaks (preemption's
    /// candidate offset too) is reproducible.
    pub fn from_entropy() -> Self {
        if let Some(seed) = SEEDED.with(|s| {
            let v = s.get();
            if let Some((seed, n)) = v {
                s.set(Some((seed, n + 1)));
            }
            v
        }) {
            let (seed, n) = seed;
            // A stream of its own for each generator made.
            return Self(seed ^ (n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self(t ^ u64::from(std::process::id()).rotate_left(32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) ^ t) as u64
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

thread_local! {
    /// The seed generators made on this thread take, and how many were.
    static SEEDED: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with [`FastRng::from_entropy`] seeded from `seed` on this
/// thread (when `seed` is given): what a scheduler builds with a seed
/// breaks its ties the same way each run.
pub fn with_seed<T>(seed: Option<u64>, f: impl FnOnce() -> T) -> T {
    let Some(seed) = seed else {
        return f();
    };
    let before = SEEDED.with(|s| s.replace(Some((seed, 0))));
    let out = f();
    SEEDED.with(|s| s.set(before));
    out
}
