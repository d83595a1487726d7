//! The extender-wide memory of reservation ids, which makes Unreserve
//! idempotent and orders it after its Reserve (see [`crate::Reserve`]).
//!
//! Each id goes `Reserving -> Reserved -> Unreserving -> Unreserved`
//! (or straight to `Unreserving` when its Reserve was never seen). Running
//! states carry a watch channel that waiters clone. Finished entries are
//! forgotten oldest first once the table holds more than its capacity.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::types::PriorReserve;

/// The outcome of an Unreserve handler, shared with concurrent duplicates.
pub(crate) type UnreserveOutcome = Result<(), String>;

#[derive(Debug)]
enum State {
    Reserving(watch::Receiver<bool>),
    Reserved { ok: bool },
    Unreserving(watch::Receiver<Option<UnreserveOutcome>>),
    Unreserved,
}

impl State {
    fn running(&self) -> bool {
        matches!(self, State::Reserving(_) | State::Unreserving(_))
    }
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// Which push into `order` this entry belongs to.
    generation: u64,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<String, Entry>,
    order: VecDeque<(String, u64)>,
    next_generation: u64,
}

impl Table {
    fn insert(&mut self, id: &str, state: State, capacity: usize) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.map.insert(id.to_string(), Entry { state, generation });
        self.order.push_back((id.to_string(), generation));
        self.evict(capacity);
    }

    fn set(&mut self, id: &str, state: State, capacity: usize) {
        match self.map.get_mut(id) {
            Some(e) => e.state = state,
            None => self.insert(id, state, capacity),
        }
    }

    fn evict(&mut self, capacity: usize) {
        // Every queue entry is looked at most once per call, so running
        // entries (which are never evicted) cannot make this loop forever.
        let mut budget = self.order.len();
        while self.map.len() > capacity && budget > 0 {
            budget -= 1;
            let Some((id, generation)) = self.order.pop_front() else {
                break;
            };
            match self.map.get(&id) {
                Some(e) if e.generation == generation => {
                    if e.state.running() {
                        self.order.push_back((id, generation));
                    } else {
                        self.map.remove(&id);
                    }
                }
                // Stale queue entry: the id was removed or re-inserted.
                _ => {}
            }
        }
    }
}

/// The memory of reservation ids, shared by every session of an extender.
#[derive(Debug)]
pub(crate) struct ReservationBook {
    table: Mutex<Table>,
    capacity: usize,
}

/// How an Unreserve goes on.
pub(crate) enum UnreserveStart {
    /// Already undone: acknowledge without calling the handler.
    AlreadyDone,
    /// A duplicate ran concurrently: its outcome.
    Joined(UnreserveOutcome),
    /// Call the handler, then finish the guard.
    Run(UnreserveGuard),
}

impl ReservationBook {
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(Table::default()),
            capacity: capacity.max(1),
        })
    }

    /// Starts a Reserve of `id`, or says why it must not run.
    pub(crate) fn begin_reserve(self: &Arc<Self>, id: &str) -> Result<ReserveGuard, String> {
        let mut t = self.table.lock();
        match t.map.get(id).map(|e| &e.state) {
            None => {
                let (tx, rx) = watch::channel(false);
                t.insert(id, State::Reserving(rx), self.capacity);
                Ok(ReserveGuard {
                    book: self.clone(),
                    id: id.to_string(),
                    tx,
                    finished: false,
                })
            }
            Some(State::Reserving(_) | State::Reserved { .. }) => {
                Err(format!("reservation {id} was already reserved"))
            }
            Some(State::Unreserving(_) | State::Unreserved) => {
                Err(format!("reservation {id} was already unreserved"))
            }
        }
    }

    /// Starts an Unreserve of `id`: waits for a running Reserve or a running
    /// duplicate Unreserve of the same id first.
    pub(crate) async fn begin_unreserve(self: &Arc<Self>, id: &str) -> UnreserveStart {
        enum Next {
            Start(UnreserveStart),
            Join(watch::Receiver<Option<UnreserveOutcome>>),
            AwaitReserve(watch::Receiver<bool>),
        }
        loop {
            let next = {
                let mut t = self.table.lock();
                let state = t.map.get(id).map(|e| &e.state);
                match state {
                    Some(State::Unreserved) => Next::Start(UnreserveStart::AlreadyDone),
                    Some(State::Unreserving(rx)) => Next::Join(rx.clone()),
                    Some(State::Reserving(rx)) => Next::AwaitReserve(rx.clone()),
                    Some(State::Reserved { ok }) => {
                        let prior = if *ok {
                            PriorReserve::Succeeded
                        } else {
                            PriorReserve::Failed
                        };
                        Next::Start(self.start_unreserve(&mut t, id, prior))
                    }
                    None => Next::Start(self.start_unreserve(&mut t, id, PriorReserve::Unseen)),
                }
            };
            match next {
                Next::Start(s) => return s,
                Next::Join(mut rx) => {
                    return UnreserveStart::Joined(match rx.wait_for(Option::is_some).await {
                        Ok(v) => v.clone().unwrap_or(Ok(())),
                        Err(_) => Err("the concurrent unreserve was interrupted".into()),
                    });
                }
                Next::AwaitReserve(mut rx) => {
                    // The guard of a Reserve always sends before going away;
                    // an error only means it is gone: look again either way.
                    let _ = rx.wait_for(|done| *done).await;
                }
            }
        }
    }

    fn start_unreserve(
        self: &Arc<Self>,
        t: &mut Table,
        id: &str,
        prior: PriorReserve,
    ) -> UnreserveStart {
        let (tx, rx) = watch::channel(None);
        t.set(id, State::Unreserving(rx), self.capacity);
        UnreserveStart::Run(UnreserveGuard {
            book: self.clone(),
            id: id.to_string(),
            prior,
            tx,
            finished: false,
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().map.len()
    }
}

/// A running Reserve. Dropping it unfinished records a failed Reserve.
pub(crate) struct ReserveGuard {
    book: Arc<ReservationBook>,
    id: String,
    tx: watch::Sender<bool>,
    finished: bool,
}

impl ReserveGuard {
    /// Records the Reserve's outcome and wakes a waiting Unreserve.
    pub(crate) fn finish(mut self, ok: bool) {
        self.record(ok);
    }

    fn record(&mut self, ok: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        let mut t = self.book.table.lock();
        t.set(&self.id, State::Reserved { ok }, self.book.capacity);
        drop(t);
        self.tx.send_replace(true);
    }
}

impl Drop for ReserveGuard {
    fn drop(&mut self) {
        self.record(false);
    }
}

/// A running Unreserve. Dropping it unfinished counts as a failure: the
/// reservation goes back to what it was, so the next Unreserve runs again.
pub(crate) struct UnreserveGuard {
    book: Arc<ReservationBook>,
    id: String,
    prior: PriorReserve,
    tx: watch::Sender<Option<UnreserveOutcome>>,
    finished: bool,
}

impl UnreserveGuard {
    /// What was seen of the Reserve.
    pub(crate) fn prior(&self) -> PriorReserve {
        self.prior
    }

    /// Records the handler's outcome and hands it to concurrent duplicates.
    pub(crate) fn finish(mut self, outcome: UnreserveOutcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: UnreserveOutcome) {
        if self.finished {
            return;
        }
        self.finished = true;
        let mut t = self.book.table.lock();
        let cap = self.book.capacity;
        match (&outcome, self.prior) {
            (Ok(()), _) => t.set(&self.id, State::Unreserved, cap),
            (Err(_), PriorReserve::Succeeded) => t.set(&self.id, State::Reserved { ok: true }, cap),
            (Err(_), PriorReserve::Failed) => t.set(&self.id, State::Reserved { ok: false }, cap),
            (Err(_), PriorReserve::Unseen) => {
                t.map.remove(&self.id);
            }
        }
        drop(t);
        self.tx.send_replace(Some(outcome));
    }
}

impl Drop for UnreserveGuard {
    fn drop(&mut self) {
        self.record(Err("the unreserve was interrupted".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: UnreserveStart) -> Option<PriorReserve> {
        match start {
            UnreserveStart::Run(g) => {
                let p = g.prior();
                g.finish(Ok(()));
                Some(p)
            }
            _ => None,
        }
    }

    #[tokio::test]
    async fn unreserve_runs_once_per_id() {
        let book = ReservationBook::new(10);
        book.begin_reserve("r1").map(|g| g.finish(true)).ok();
        assert_eq!(
            run(book.begin_unreserve("r1").await),
            Some(PriorReserve::Succeeded)
        );
        assert!(matches!(
            book.begin_unreserve("r1").await,
            UnreserveStart::AlreadyDone
        ));
        assert_eq!(
            run(book.begin_unreserve("never").await),
            Some(PriorReserve::Unseen)
        );
        assert!(book.begin_reserve("r1").is_err());
    }

    #[tokio::test]
    async fn failed_unreserve_runs_again() {
        let book = ReservationBook::new(10);
        book.begin_reserve("r").map(|g| g.finish(false)).ok();
        match book.begin_unreserve("r").await {
            UnreserveStart::Run(g) => {
                assert_eq!(g.prior(), PriorReserve::Failed);
                g.finish(Err("boom".into()));
            }
            _ => panic!("expected to run"),
        }
        assert_eq!(
            run(book.begin_unreserve("r").await),
            Some(PriorReserve::Failed)
        );
    }

    #[tokio::test]
    async fn dropped_reserve_counts_as_failed() {
        let book = ReservationBook::new(10);
        let g = book.begin_reserve("r");
        drop(g);
        assert_eq!(
            run(book.begin_unreserve("r").await),
            Some(PriorReserve::Failed)
        );
    }

    #[tokio::test]
    async fn unreserve_waits_for_a_running_reserve() {
        let book = ReservationBook::new(10);
        let Ok(g) = book.begin_reserve("r") else {
            panic!("reserve refused")
        };
        let b2 = book.clone();
        let waiter = tokio::spawn(async move { run(b2.begin_unreserve("r").await) });
        // Let the waiter reach its wait; it cannot finish before the guard.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        g.finish(true);
        assert_eq!(waiter.await.ok().flatten(), Some(PriorReserve::Succeeded));
    }

    #[tokio::test]
    async fn duplicates_join_the_running_unreserve() {
        let book = ReservationBook::new(10);
        let UnreserveStart::Run(g) = book.begin_unreserve("r").await else {
            panic!("expected to run")
        };
        let b2 = book.clone();
        let dup = tokio::spawn(async move {
            match b2.begin_unreserve("r").await {
                UnreserveStart::Joined(r) => Some(r),
                _ => None,
            }
        });
        tokio::task::yield_now().await;
        g.finish(Err("nope".into()));
        assert_eq!(dup.await.ok().flatten(), Some(Err("nope".to_string())));
    }

    #[tokio::test]
    async fn memory_is_bounded_oldest_first_and_spares_running_entries() {
        let book = ReservationBook::new(3);
        let Ok(running) = book.begin_reserve("running") else {
            panic!("reserve refused")
        };
        for i in 0..10 {
            let UnreserveStart::Run(g) = book.begin_unreserve(&format!("u{i}")).await else {
                panic!("expected to run")
            };
            g.finish(Ok(()));
        }
        assert_eq!(book.len(), 3);
        // The newest finished ids are remembered, the oldest forgotten.
        assert!(matches!(
            book.begin_unreserve("u9").await,
            UnreserveStart::AlreadyDone
        ));
        assert!(matches!(
            book.begin_unreserve("u0").await,
            UnreserveStart::Run(_)
        ));
        running.finish(true);
        assert_eq!(
            run(book.begin_unreserve("running").await),
            Some(PriorReserve::Succeeded)
        );
    }
}
