//! Fans per-node work out over a CPU pool.
//!
//! Filter and Score run once per node; with many nodes they run on a rayon
//! pool sized by the config's `parallelism` (at most the machine's cores:
//! more threads than cores only adds switching). Work runs inline when the
//! hand-off would cost more than it saves: batches of fewer than 32 items,
//! and batches whose expected cost, learned from earlier runs of the same
//! work ([`WorkCost`]), is below 100µs. Measured on 2 cores with the
//! default plugins, per-node Filter and Score work is tens of nanoseconds:
//! waking the pool for 500 such nodes cost more than it saved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;

/// Below this many items, work runs on the calling thread.
const INLINE_BELOW: usize = 32;
/// Below this much expected work, work runs on the calling thread.
const PARALLEL_WORTH_NS: u64 = 100_000;

/// What one item of some kind of work costs, learned as it runs (an
/// exponentially weighted mean of nanoseconds per item).
#[derive(Debug, Default)]
pub struct WorkCost(AtomicU64);

impl WorkCost {
    /// The current estimate, in nanoseconds per item.
    pub fn ns_per_item(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn observe(&self, ns_per_item: u64) {
        let old = self.0.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns_per_item
        } else {
            // A run the OS interrupted (the thread lost its core for a
            // time slice) says little about the work: it moves the
            // estimate by at most a doubling.
            (old * 7 + ns_per_item.min(old.saturating_mul(8))) / 8
        };
        self.0.store(new.max(1), Ordering::Relaxed);
    }
}

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

    /// Like [`Parallelizer::for_each_mut`], but runs inline unless the work,
    /// as `cost` estimates it, is worth the pool; measures the run to refine
    /// the estimate.
    ///
    /// The estimate is of the work alone: on the pool each chunk times
    /// itself, so the time spent waking the pool's threads (or waiting for a
    /// core while the machine is busy) does not count. Counting it made the
    /// estimate feed itself: one slow run sent the next to the pool, whose
    /// hand-off looked like more work, and scheduling stayed on the pool at
    /// twice the CPU per pod (15000 nodes on 2 cores).
    pub fn for_each_mut_measured<T: Send>(
        &self,
        cost: &WorkCost,
        out: &mut [T],
        f: impl Fn(usize, &mut T) + Sync + Send,
    ) {
        self.for_each_mut_timed(&Monotonic, cost, out, f)
    }

    /// [`Parallelizer::for_each_mut_measured`] with the clock that times
    /// the work as a parameter, so that tests can say what the work cost.
    fn for_each_mut_timed<T: Send>(
        &self,
        clock: &impl WorkClock,
        cost: &WorkCost,
        out: &mut [T],
        f: impl Fn(usize, &mut T) + Sync + Send,
    ) {
        let n = out.len();
        if n == 0 {
            return;
        }
        let expected = cost.ns_per_item().saturating_mul(n as u64);
        let work_ns = match &self.pool {
            Some(pool) if n >= INLINE_BELOW && expected >= PARALLEL_WORTH_NS => {
                let chunk = chunk_size(n, self.parallelism);
                let total = AtomicU64::new(0);
                pool.install(|| {
                    out.par_chunks_mut(chunk)
                        .enumerate()
                        .for_each(|(c, items)| {
                            let start = clock.now_ns();
                            let base = c * chunk;
                            for (j, item) in items.iter_mut().enumerate() {
                                f(base + j, item);
                            }
                            let took = clock.now_ns().saturating_sub(start);
                            total.fetch_add(took, Ordering::Relaxed);
                        })
                });
                total.into_inner()
            }
            _ => {
                let start = clock.now_ns();
                out.iter_mut().enumerate().for_each(|(i, item)| f(i, item));
                clock.now_ns().saturating_sub(start)
            }
        };
        cost.observe(work_ns / n as u64);
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

/// What times a run of work: the thread's view of the passing time, in
/// nanoseconds. Only differences between two readings on one thread count.
trait WorkClock: Sync {
    fn now_ns(&self) -> u64;
}

/// The monotonic clock, read from one process-wide origin.
struct Monotonic;

impl WorkClock for Monotonic {
    fn now_ns(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
    fn one_interrupted_run_moves_the_estimate_by_at_most_a_doubling() {
        let cost = WorkCost::default();
        cost.observe(100);
        assert_eq!(cost.ns_per_item(), 100);
        // A run that lost its core for 4ms over 500 items.
        cost.observe(8_000);
        assert_eq!(cost.ns_per_item(), 187);
        cost.observe(100);
        assert_eq!(cost.ns_per_item(), 176);
    }

    std::thread_local! {
        /// The work done on this thread so far, in nanoseconds, as the
        /// test's work declares it.
        static WORK_DONE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// A clock that only moves when the work on its thread says it cost
    /// something: the measurement sees exactly the declared cost, whatever
    /// the machine's load.
    struct DeclaredCost;

    impl WorkClock for DeclaredCost {
        fn now_ns(&self) -> u64 {
            WORK_DONE.with(|w| w.get())
        }
    }

    fn costs(ns: u64) {
        WORK_DONE.with(|w| w.set(w.get() + ns));
    }

    #[test]
    fn cheap_work_stays_inline_and_costly_work_fans_out() {
        // Two threads whatever the machine has, so that the pool exists.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let p = Parallelizer {
            pool: Some(Arc::new(pool)),
            parallelism: 2,
        };
        let main = std::thread::current().id();
        let threads = |cost: &WorkCost, ns: u64| {
            let mut out = vec![None; 200];
            p.for_each_mut_timed(&DeclaredCost, cost, &mut out, |_, slot| {
                costs(ns);
                *slot = Some(std::thread::current().id());
            });
            out.into_iter().flatten().filter(|id| *id != main).count()
        };
        let cheap = WorkCost::default();
        assert_eq!(threads(&cheap, 50), 0, "no estimate yet: inline");
        assert_eq!(cheap.ns_per_item(), 50);
        assert_eq!(threads(&cheap, 50), 0, "cheap: 10µs for 200 stays inline");
        let costly = WorkCost::default();
        assert_eq!(threads(&costly, 5_000), 0, "no estimate yet: inline");
        assert_eq!(costly.ns_per_item(), 5_000, "1ms for 200");
        assert_eq!(threads(&costly, 5_000), 200, "costly work runs on the pool");
        assert_eq!(
            costly.ns_per_item(),
            5_000,
            "each chunk times its own work, on its own thread"
        );
        // Work that turns cheap goes back inline once the estimate follows.
        let runs_until_inline = (1..=40)
            .find(|_| threads(&costly, 10) == 0)
            .expect("back inline");
        assert_eq!(runs_until_inline, 19, "{}", costly.ns_per_item());
    }

    #[test]
    fn too_few_items_stay_inline_however_costly() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let p = Parallelizer {
            pool: Some(Arc::new(pool)),
            parallelism: 2,
        };
        let main = std::thread::current().id();
        let cost = WorkCost::default();
        cost.observe(1_000_000);
        let mut out = vec![None; INLINE_BELOW - 1];
        p.for_each_mut_timed(&DeclaredCost, &cost, &mut out, |_, slot| {
            costs(1_000_000);
            *slot = Some(std::thread::current().id());
        });
        assert!(out.iter().all(|id| *id == Some(main)));
    }

    #[test]
    fn chunks() {
        assert_eq!(chunk_size(10_000, 2), 100);
        assert_eq!(chunk_size(100, 16), 7);
        assert_eq!(chunk_size(1, 16), 1);
    }
}
