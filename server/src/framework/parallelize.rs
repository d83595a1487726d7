//! Fans per-node work out over a CPU pool.
//!
//! Filter and Score run once per node; with many nodes they run on a rayon
//! pool sized by the config's `parallelism` (at most the machine's cores:
//! more threads than cores only adds switching). Small batches run inline,
//! where the hand-off would cost more than the work.

use std::sync::Arc;

use rayon::prelude::*;

/// Below this many items, work runs on the calling thread.
const INLINE_BELOW: usize = 32;

/// The parallel executor plugins and the runtime share.
#[derive(Clone)]
pub struct Parallelizer {
    pool: Option<Arc<rayon::ThreadPool>>,
    parallelism: usize,
}

impl std::fmt::Debug for Parallelizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parallelizer")
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

impl Parallelizer {
    /// A pool of `min(parallelism, available cores)` threads; one thread
    /// means everything runs inline.
    pub fn new(parallelism: usize) -> Result<Self, rayon::ThreadPoolBuildError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = parallelism.clamp(1, cores.max(1));
        let pool = if threads > 1 {
            Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("berth-cpu-{i}"))
                    .build()?,
            ))
        } else {
            None
        };
        Ok(Self {
            pool,
            parallelism: threads,
        })
    }

    /// An executor that runs everything on the calling thread.
    pub fn inline() -> Self {
        Self {
            pool: None,
            parallelism: 1,
        }
    }

    /// The number of threads.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Calls `f(i, &mut out[i])` for every index, in parallel when worth it.
    pub fn for_each_mut<T: Send>(&self, out: &mut [T], f: impl Fn(usize, &mut T) + Sync + Send) {
        match &self.pool {
            Some(pool) if out.len() >= INLINE_BELOW => {
                let chunk = chunk_size(out.len(), self.parallelism);
                pool.install(|| {
                    out.par_iter_mut()
                        .with_min_len(chunk)
                        .enumerate()
                        .for_each(|(i, item)| f(i, item))
                })
            }
            _ => out.iter_mut().enumerate().for_each(|(i, item)| f(i, item)),
        }
    }

    /// Calls `f(i)` for every index in `0..n`, in parallel when worth it.
    pub fn for_each(&self, n: usize, f: impl Fn(usize) + Sync + Send) {
        match &self.pool {
            Some(pool) if n >= INLINE_BELOW => {
                let chunk = chunk_size(n, self.parallelism);
                pool.install(|| (0..n).into_par_iter().with_min_len(chunk).for_each(f))
            }
            _ => (0..n).for_each(f),
        }
    }
}

/// Work items per task: about sqrt(n), but no more than an even share per
/// thread, as upstream chunks its work.
fn chunk_size(n: usize, parallelism: usize) -> usize {
    let s = n.isqrt();
    let share = n / parallelism + 1;
    s.min(share).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn visits_every_index_once() {
        for p in [Parallelizer::inline(), Parallelizer::new(4).unwrap()] {
            let mut out = vec![0usize; 1000];
            p.for_each_mut(&mut out, |i, v| *v = i * 2);
            assert!(out.iter().enumerate().all(|(i, v)| *v == i * 2));
            let count = AtomicUsize::new(0);
            p.for_each(777, |_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(count.load(Ordering::Relaxed), 777);
        }
    }

    #[test]
    fn chunks() {
        assert_eq!(chunk_size(10_000, 2), 100);
        assert_eq!(chunk_size(100, 16), 7);
        assert_eq!(chunk_size(1, 16), 1);
    }
}
