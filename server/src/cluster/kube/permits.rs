//! Permits for the event writers, handed out first to waiters that write
//! an event of the first rank (a pod's success), then to the others, each
//! rank in arrival order: after an outage, a `Scheduled` event goes out
//! ahead of the older `FailedScheduling` ones queued behind the writers.
//! A permit is held for one write, never across a retry's pause.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::oneshot;

#[derive(Debug)]
struct State {
    free: usize,
    /// Waiters by rank: `[first, second]`.
    waiting: [VecDeque<oneshot::Sender<()>>; 2],
}

/// A fixed number of permits, given by rank.
#[derive(Debug)]
pub(super) struct Permits {
    state: Mutex<State>,
}

/// A permit; given to the next waiter when dropped.
#[derive(Debug)]
pub(super) struct Permit<'a> {
    permits: &'a Permits,
}

impl Permits {
    pub(super) fn new(n: usize) -> Self {
        Self {
            state: Mutex::new(State {
                free: n,
                waiting: [VecDeque::new(), VecDeque::new()],
            }),
        }
    }

    /// Waits for a permit; `first` ranks ahead of every waiter that is not.
    pub(super) async fn acquire(&self, first: bool) -> Permit<'_> {
        let rx = {
            let mut st = self.state.lock();
            if st.free > 0 {
                st.free -= 1;
                return Permit { permits: self };
            }
            let (tx, rx) = oneshot::channel();
            st.waiting[usize::from(!first)].push_back(tx);
            rx
        };
        // Handed over by a dropped permit (the sender is only dropped
        // unsent when the permits are, which they never are while a
        // writer waits).
        let _ = rx.await;
        Permit { permits: self }
    }

    fn release(&self) {
        let mut st = self.state.lock();
        for rank in 0..2 {
            while let Some(tx) = st.waiting[rank].pop_front() {
                if tx.send(()).is_ok() {
                    return;
                }
                // That waiter went away: the next one.
            }
        }
        st.free += 1;
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.permits.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn the_first_rank_goes_ahead_of_older_waiters_each_rank_in_order() {
        let p = Arc::new(Permits::new(1));
        let held = p.acquire(false).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, first) in [
            ("fail-1", false),
            ("fail-2", false),
            ("ok-1", true),
            ("ok-2", true),
        ] {
            let (p, order) = (p.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = p.acquire(first).await;
                order.lock().push(name);
            }));
            // Each waits before the next arrives.
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock(), ["ok-1", "ok-2", "fail-1", "fail-2"]);
    }

    #[tokio::test]
    async fn a_waiter_that_left_passes_its_turn_on() {
        let p = Permits::new(1);
        let held = p.acquire(false).await;
        {
            use futures::FutureExt;
            // Polled once (it queues), then dropped.
            assert!(p.acquire(true).now_or_never().is_none());
        }
        drop(held);
        // The permit is free again, not handed to the one that left.
        let _again = p.acquire(false).await;
    }
}
