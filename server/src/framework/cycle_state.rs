//! [`CycleState`]: data a scheduling context's plugins share.
//!
//! Written at PreFilter/PreScore/Reserve (serial), read at Filter/Score
//! (concurrently, across nodes: hence `&CycleState` there and `Send + Sync`
//! data). Preemption and dry-runs clone it and update the clones through
//! PreFilter's AddPod/RemovePod; every value must therefore be `Clone`.
//!
//! Keys are typed: a [`StateKey<T>`] can only store and load a `T`. The state
//! also carries the sets of plugins that asked, by returning `Skip` at
//! PreFilter/PreScore, not to be run at Filter/Score in this cycle, and the
//! cycle's [`CycleToken`]: its id, what to do when the cycle is over, and
//! the plugin calls that failed in it ([`PluginFailure`]), so that dry runs
//! and simulations can say what they could not judge and which ignorable
//! extenders they went without.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::status::Status;
use crate::cache::Snapshot;

/// A value stored in a [`CycleState`].
pub trait StateData: Any + Send + Sync {
    /// A boxed copy of the value.
    fn clone_box(&self) -> Box<dyn StateData>;
    /// The value as `Any`, for typed access.
    fn as_any(&self) -> &dyn Any;
    /// The value as mutable `Any`, for typed access.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A typed key: it stores and loads values of type `T` only.
pub struct StateKey<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> StateKey<T> {
    /// A key; by convention named `"<Plugin>/<what>"`, e.g.
    /// `"PreFilterNodeResourcesFit"`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }

    /// The key's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// A bit set over the plugins of one extension point, by position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginMask(u64);

impl PluginMask {
    /// The most plugins one extension point may have.
    pub const CAPACITY: usize = 64;

    /// Adds the plugin at `index`.
    pub fn insert(&mut self, index: usize) {
        debug_assert!(index < Self::CAPACITY);
        self.0 |= 1 << index;
    }

    /// Whether the plugin at `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        self.0 & (1 << index) != 0
    }

    /// How many plugins are in the set.
    pub fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// Identifies one scheduling context (a pod's attempt, a dry-run, one pod
/// of a simulation), shared by every copy of its [`CycleState`]. When the
/// last copy is dropped (the attempt is over: failed, or bound and past
/// PostBind), the callbacks registered with [`CycleToken::on_end`] run;
/// remote plugins use this to tell extenders to forget the pod.
pub struct CycleToken {
    id: u64,
    on_end: Mutex<Vec<EndCallback>>,
    /// Failed plugin calls, in the order they failed (failure paths only:
    /// a cycle where every call succeeds never takes the lock).
    failures: Mutex<Vec<PluginFailure>>,
}

/// A plugin call that failed in a scheduling context: a remote extender
/// that could not be reached, timed out or answered out of protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginFailure {
    /// The plugin (the extender's configured name).
    pub plugin: &'static str,
    /// The extension point: "PreFilter", "Filter", "Score", ...
    pub point: &'static str,
    /// What went wrong.
    pub reason: String,
    /// Whether the failure was ignored (an ignorable extender, skipped as
    /// the scheduler skips it) rather than failing the point.
    pub ignored: bool,
    /// When the failure was about one node of a batch (an extender's
    /// CODE_ERROR for it): that node's feed id.
    pub node_id: Option<u32>,
}

type EndCallback = Box<dyn FnOnce(u64) + Send>;

static NEXT_CYCLE_ID: AtomicU64 = AtomicU64::new(1);

impl CycleToken {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            id: NEXT_CYCLE_ID.fetch_add(1, Ordering::Relaxed),
            on_end: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
        })
    }

    /// Records a failed plugin call.
    pub fn note_failure(&self, failure: PluginFailure) {
        self.failures.lock().push(failure);
    }

    /// The failed plugin calls so far, from the `from`-th on (a caller that
    /// read `n` of them earlier asks for those after with `from = n`).
    pub fn failures(&self, from: usize) -> Vec<PluginFailure> {
        self.failures
            .lock()
            .get(from..)
            .map_or_else(Vec::new, <[_]>::to_vec)
    }

    /// How many plugin calls failed so far.
    pub fn failure_count(&self) -> usize {
        self.failures.lock().len()
    }

    /// The context's id, unique in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Runs `f` (with the id) once the context is over. Must not block.
    pub fn on_end(&self, f: impl FnOnce(u64) + Send + 'static) {
        self.on_end.lock().push(Box::new(f));
    }
}

impl Drop for CycleToken {
    fn drop(&mut self) {
        for f in self.on_end.get_mut().drain(..) {
            f(self.id);
        }
    }
}

impl fmt::Debug for CycleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CycleToken").field(&self.id).finish()
    }
}

/// The state of one scheduling context.
pub struct CycleState {
    entries: Vec<(&'static str, Box<dyn StateData>)>,
    /// The snapshot this cycle schedules against.
    snapshot: Arc<Snapshot>,
    /// A what-if evaluation (dry-run, simulation): plugins must not change
    /// the cluster (no evictions, no bindings).
    pub dry_run: bool,
    /// PreFilter plugins (by position) that returned `Skip`: their
    /// AddPod/RemovePod are not run either.
    pub skip_pre_filter: PluginMask,
    /// Filter plugins (by position) whose PreFilter returned `Skip`.
    pub skip_filter: PluginMask,
    /// Score plugins (by position) whose PreScore returned `Skip`.
    pub skip_score: PluginMask,
    /// This cycle records each plugin's execution time (a sampled share
    /// of cycles, as upstream).
    pub record_plugin_metrics: bool,
    /// Raw scores batch Score plugins gave with their Filter answer, for
    /// the feasible nodes (see `Framework::finish_batch_filters`).
    pub(super) prefetched_scores: Option<Arc<PrefetchedScores>>,
    /// Batch Filter plugins' answers about the candidates their calls went
    /// with (see `Framework::finish_batch_filters`).
    pub(super) window_verdicts: Option<Arc<Vec<WindowVerdicts>>>,
    /// Batch Filter calls sent ahead whose answers the cycle did not need
    /// (the per-node plugins rejected every node): kept, unawaited, for
    /// preemption to read instead of asking again.
    pub(super) unsettled: Option<Arc<Mutex<Option<super::batch_call::BatchFiltersAhead>>>>,
    token: Arc<CycleToken>,
}

/// What a batch Filter plugin answered about the window of candidates its
/// call went with, kept for preemption to reuse ([`super::KnownVerdicts`]):
/// the window is `len` nodes of the snapshot's list of `nodes` nodes,
/// starting at `start` and wrapping.
#[derive(Debug)]
pub struct WindowVerdicts {
    pub(super) filter_index: usize,
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) nodes: usize,
    /// The rejections, by position in the window, ascending.
    pub(super) rejected: Vec<(usize, Status)>,
}

/// Raw scores of batch Score plugins that came with their Filter answer.
#[derive(Debug)]
pub(super) struct PrefetchedScores {
    /// The feasible nodes they are for, by address, in order.
    pub nodes: Vec<usize>,
    /// Per Score plugin (by position): one raw score per node.
    pub scores: Vec<(usize, Vec<i64>)>,
}

impl Default for CycleState {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            snapshot: Arc::default(),
            dry_run: false,
            skip_pre_filter: PluginMask::default(),
            skip_filter: PluginMask::default(),
            skip_score: PluginMask::default(),
            record_plugin_metrics: false,
            prefetched_scores: None,
            window_verdicts: None,
            unsettled: None,
            token: CycleToken::new(),
        }
    }
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        Self {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (*k, (**v).clone_box()))
                .collect(),
            snapshot: self.snapshot.clone(),
            dry_run: self.dry_run,
            skip_pre_filter: self.skip_pre_filter,
            skip_filter: self.skip_filter,
            skip_score: self.skip_score,
            record_plugin_metrics: self.record_plugin_metrics,
            prefetched_scores: self.prefetched_scores.clone(),
            window_verdicts: self.window_verdicts.clone(),
            unsettled: self.unsettled.clone(),
            token: self.token.clone(),
        }
    }
}

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CycleState")
            .field(
                "keys",
                &self.entries.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .field("cycle", &self.token.id)
            .field("skip_filter", &self.skip_filter)
            .field("skip_score", &self.skip_score)
            .finish()
    }
}

impl CycleState {
    /// An empty state over an empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state for a cycle against `snapshot`.
    pub fn with_snapshot(snapshot: Arc<Snapshot>) -> Self {
        Self {
            snapshot,
            ..Self::default()
        }
    }

    /// Makes this state's context the one `token` names: a cycle whose
    /// first calls were sent ahead, before it started, under that token.
    pub fn set_token(&mut self, token: Arc<CycleToken>) {
        self.token = token;
    }

    /// The context's token, shared by all copies of this state.
    pub fn token(&self) -> &Arc<CycleToken> {
        &self.token
    }

    /// The snapshot the cycle schedules against: every node, as plugins
    /// that need more than the node at hand (affinity, spreading, image
    /// counts, preemption) must see it.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// Lets go of the snapshot once the scheduling cycle is over. The
    /// binding cycle runs against the live cluster, not this snapshot; and
    /// while a binding in flight kept a reference to it, the next cycle's
    /// update could not change the scheduler's snapshot in place and had to
    /// copy every node of it (and drop the copy later): a cost per pod that
    /// grew with the cluster.
    pub fn release_snapshot(&mut self) {
        self.snapshot = Arc::default();
    }

    /// Points this state at `snapshot` (a group cycle's, after it placed
    /// the pods before this one).
    pub fn set_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.snapshot = snapshot;
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub fn write<T: Any + Clone + Send + Sync>(&mut self, key: &StateKey<T>, value: T) {
        match self.entries.iter_mut().find(|(k, _)| *k == key.name) {
            Some(entry) => entry.1 = Box::new(value),
            None => self.entries.push((key.name, Box::new(value))),
        }
    }

    /// Loads the value under `key`.
    pub fn read<T: Any>(&self, key: &StateKey<T>) -> Option<&T> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key.name)
            .and_then(|(_, v)| (**v).as_any().downcast_ref())
    }

    /// Loads the value under `key` for update.
    pub fn read_mut<T: Any>(&mut self, key: &StateKey<T>) -> Option<&mut T> {
        self.entries
            .iter_mut()
            .find(|(k, _)| *k == key.name)
            .and_then(|(_, v)| (**v).as_any_mut().downcast_mut())
    }

    /// Loads the value under `key`, or an `Error` status naming the key, as a
    /// plugin reports state its own PreFilter should have written.
    pub fn require<T: Any>(&self, key: &StateKey<T>) -> Result<&T, Status> {
        self.read(key).ok_or_else(|| {
            Status::error(format!("reading {:?} from cycleState: not found", key.name))
        })
    }

    /// Removes the value under `key`.
    pub fn delete<T>(&mut self, key: &StateKey<T>) {
        self.entries.retain(|(k, _)| *k != key.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Counter(u32);

    const COUNTER: StateKey<Counter> = StateKey::new("test/counter");
    const NAMES: StateKey<Vec<String>> = StateKey::new("test/names");

    #[test]
    fn typed_read_write() {
        let mut s = CycleState::new();
        assert!(s.read(&COUNTER).is_none());
        s.write(&COUNTER, Counter(1));
        s.write(&NAMES, vec!["a".into()]);
        assert_eq!(s.read(&COUNTER), Some(&Counter(1)));
        s.read_mut(&COUNTER).unwrap().0 += 1;
        assert_eq!(s.read(&COUNTER), Some(&Counter(2)));
        s.write(&COUNTER, Counter(9));
        assert_eq!(s.read(&COUNTER), Some(&Counter(9)));
        s.delete(&COUNTER);
        assert!(s.read(&COUNTER).is_none());
        assert_eq!(s.read(&NAMES).unwrap().len(), 1);
    }

    #[test]
    fn clone_is_deep() {
        let mut s = CycleState::new();
        s.write(&COUNTER, Counter(1));
        s.skip_filter.insert(3);
        let mut c = s.clone();
        c.read_mut(&COUNTER).unwrap().0 = 5;
        assert_eq!(s.read(&COUNTER), Some(&Counter(1)));
        assert_eq!(c.read(&COUNTER), Some(&Counter(5)));
        assert!(c.skip_filter.contains(3));
    }

    #[test]
    fn require_names_the_missing_key() {
        let s = CycleState::new();
        let err = s.require(&COUNTER).unwrap_err();
        assert!(err.is_error());
        assert_eq!(
            err.message(),
            "reading \"test/counter\" from cycleState: not found"
        );
    }
}
