//! One search on one node ([`Run`]): first-fit and exhaustive with early
//! exit, as the module's header describes, with the buffers it reuses
//! ([`Scratch`], per thread for Filter) and how it ends ([`Outcome`]).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use super::capacity;
use super::claims::{Allocator, Alternative, Fatal};
use super::constraints::ConstraintState;
use crate::cache::dra::Pool;
use crate::model::NodeSpec;
use crate::model::dra::{
    ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, Device, DeviceTaintEffect,
    FIRST_AVAILABLE_MAX_SIZE, Nano, RequestSpec,
};

/// How an allocation attempt on a node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every claim can be allocated here; the score DynamicResources gives
    /// the node (from the `firstAvailable` alternatives chosen).
    Fits {
        /// The node's raw score.
        score: i64,
    },
    /// No combination of devices works.
    NoFit,
    /// No combination works, and some pool for the node is invalid.
    InvalidPools,
    /// The search ran past its time limit.
    TimedOut,
}

/// A device's place in the node's pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub(super) pool: usize,
    pub(super) slice: usize,
    pub(super) dev: usize,
}

/// One picked device.
#[derive(Debug, Clone)]
pub(super) struct Pick {
    pub(super) claim: usize,
    pub(super) request: usize,
    pub(super) alt: usize,
    pub(super) loc: Loc,
    pub(super) slot: u32,
    pub(super) shared: bool,
    pub(super) counters: bool,
    pub(super) consumed: Vec<(Arc<str>, Nano)>,
}

/// `(counter set, counter, amount)` of one pool.
type CounterAmounts = Vec<(Arc<str>, Arc<str>, Nano)>;

/// Reusable buffers of one search (per thread for Filter).
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Per claim, per request: the first index into `alts` of its
    /// alternatives.
    offsets: Vec<Vec<usize>>,
    /// Per alternative: how many devices, and for `All`, which.
    alts: Vec<AltData>,
    /// Per claim, per request: the alternative chosen.
    pub(super) selected: Vec<Vec<usize>>,
    pub(super) picks: Vec<Vec<Pick>>,
    constraints: Vec<Vec<ConstraintState>>,
    /// Devices picked in this attempt: `(slot, claim)`.
    allocating: Vec<(u32, usize)>,
    /// Capacity consumed from shared devices in this attempt.
    allocating_capacity: Vec<(u32, Arc<str>, Nano)>,
    /// Counters consumed in this attempt: `(pool, set, counter, amount)`.
    consumed_counters: Vec<(usize, Arc<str>, Arc<str>, Nano)>,
    /// Counters available per pool (minus allocated devices), computed on
    /// first need.
    available_counters: Vec<Option<CounterAmounts>>,
}

#[derive(Debug, Default, Clone)]
struct AltData {
    num_devices: usize,
    all: Vec<Loc>,
}

thread_local! {
    pub(super) static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Why the search stopped early.
enum Stop {
    Fatal(String),
    MaxSize,
    TimedOut,
}

/// One search on one node.
pub(super) struct Run<'a> {
    pub(super) a: &'a Allocator,
    pub(super) node: &'a NodeSpec,
    pub(super) pools: &'a [Pool],
    pub(super) s: &'a mut Scratch,
    steps: u64,
    deadline: Option<Instant>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        a: &'a Allocator,
        node: &'a NodeSpec,
        pools: &'a [Pool],
        s: &'a mut Scratch,
    ) -> Self {
        Self {
            a,
            node,
            pools,
            s,
            steps: 0,
            deadline: a.timeout.map(|t| Instant::now() + t),
        }
    }

    pub(super) fn device(&self, loc: Loc) -> &'a Device {
        &self.pools[loc.pool].slices[loc.slice].devices[loc.dev]
    }

    pub(super) fn alt(&self, claim: usize, request: usize, alt: usize) -> &'a Alternative {
        &self.a.claims[claim].requests[request][alt]
    }

    fn alt_index(&self, claim: usize, request: usize, alt: usize) -> usize {
        self.s.offsets[claim][request] + alt
    }

    /// Resets the buffers and sizes the requests (and `All` device lists).
    fn prepare(&mut self) -> Result<(), Stop> {
        let claims = &self.a.claims;
        let s = &mut *self.s;
        s.offsets.resize_with(claims.len(), Vec::new);
        s.selected.resize_with(claims.len(), Vec::new);
        s.picks.resize_with(claims.len(), Vec::new);
        s.constraints.resize_with(claims.len(), Vec::new);
        s.allocating.clear();
        s.allocating_capacity.clear();
        s.consumed_counters.clear();
        s.available_counters.clear();
        s.available_counters.resize(self.pools.len(), None);
        let mut n_alts = 0;
        for (c, claim) in claims.iter().enumerate() {
            s.offsets[c].clear();
            s.selected[c].clear();
            s.picks[c].clear();
            s.constraints[c].clear();
            for r in &claim.requests {
                s.offsets[c].push(n_alts);
                s.selected[c].push(0);
                n_alts += r.len();
            }
            s.constraints[c].extend(claim.claim.constraints.iter().map(ConstraintState::new));
        }
        if s.alts.len() < n_alts {
            s.alts.resize_with(n_alts, AltData::default);
        }
        for (c, claim) in claims.iter().enumerate() {
            for (r, alts) in claim.requests.iter().enumerate() {
                for (i, alt) in alts.iter().enumerate() {
                    let idx = self.s.offsets[c][r] + i;
                    self.s.alts[idx].all.clear();
                    match alt.spec.mode {
                        AllocationMode::ExactCount(n) => {
                            self.s.alts[idx].num_devices = usize::try_from(n).unwrap_or(usize::MAX);
                        }
                        _ => {
                            let all = self.all_devices(c, alt)?;
                            self.s.alts[idx].num_devices = all.len();
                            self.s.alts[idx].all = all;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Every device of the node's pools an `All` request would take.
    fn all_devices(&self, claim: usize, alt: &Alternative) -> Result<Vec<Loc>, Stop> {
        let key = self.a.claims[claim].claim.key();
        let mut out = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            if pool.incomplete {
                return Err(Stop::Fatal(format!(
                    "claim {key}, request {}: asks for all devices, but resource pool {} is currently being updated",
                    alt.full_name(),
                    pool.id()
                )));
            }
            if pool.invalid.is_some() {
                return Err(Stop::Fatal(format!(
                    "claim {key}, request {}: asks for all devices, but resource pool {} is currently invalid",
                    alt.full_name(),
                    pool.id()
                )));
            }
            for (si, slice) in pool.slices.iter().enumerate() {
                for (di, d) in slice.devices.iter().enumerate() {
                    if !self.selectable(claim, alt, d)? {
                        continue;
                    }
                    if self.capacity_fits(alt, d) != Ok(true) {
                        continue;
                    }
                    out.push(Loc {
                        pool: p,
                        slice: si,
                        dev: di,
                    });
                }
            }
        }
        Ok(out)
    }

    pub(super) fn search(&mut self) -> Result<Outcome, Fatal> {
        if let Err(stop) = self.prepare() {
            return match stop {
                Stop::Fatal(e) => Err(e),
                Stop::TimedOut => Ok(Outcome::TimedOut),
                Stop::MaxSize => Ok(Outcome::NoFit),
            };
        }
        match self.allocate_one(
            0,
            0,
            0,
            0,
            false,
            Loc {
                pool: 0,
                slice: 0,
                dev: 0,
            },
        ) {
            Ok(true) => Ok(Outcome::Fits {
                score: self.score(),
            }),
            Ok(false) | Err(Stop::MaxSize) => {
                Ok(if self.pools.iter().any(|p| p.invalid.is_some()) {
                    Outcome::InvalidPools
                } else {
                    Outcome::NoFit
                })
            }
            Err(Stop::TimedOut) => Ok(Outcome::TimedOut),
            Err(Stop::Fatal(e)) => Err(e),
        }
    }

    /// DynamicResources' score: for each `firstAvailable` request, 8 minus
    /// the position of the alternative chosen.
    fn score(&self) -> i64 {
        let mut score = 0;
        for (c, claim) in self.a.claims.iter().enumerate() {
            for (r, alts) in claim.requests.iter().enumerate() {
                if alts.first().is_some_and(|a| a.parent.is_some()) {
                    score += FIRST_AVAILABLE_MAX_SIZE - self.s.selected[c][r] as i64;
                }
            }
        }
        score
    }

    fn tick(&mut self) -> Result<(), Stop> {
        self.steps += 1;
        if self.steps.is_multiple_of(256)
            && let Some(d) = self.deadline
            && Instant::now() > d
        {
            return Err(Stop::TimedOut);
        }
        Ok(())
    }

    /// Picks the `dev`-th device of request `r` (alternative `alt`) of
    /// claim `c`, and everything after it. Candidates start at `start`
    /// within the same request.
    fn allocate_one(
        &mut self,
        c: usize,
        r: usize,
        alt: usize,
        dev: usize,
        in_sub: bool,
        start: Loc,
    ) -> Result<bool, Stop> {
        self.tick()?;
        let claims = &self.a.claims;
        if c >= claims.len() {
            return Ok(true);
        }
        if r >= claims[c].requests.len() {
            return match self.allocate_one(
                c + 1,
                0,
                0,
                0,
                false,
                Loc {
                    pool: 0,
                    slice: 0,
                    dev: 0,
                },
            ) {
                // Another claim's choices (and alternatives) may need fewer
                // devices: not a reason to stop backtracking here.
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            };
        }
        let alts = &claims[c].requests[r];
        if !in_sub && alts.first().is_some_and(|a| a.parent.is_some()) {
            let mut all_exceeded = true;
            for i in 0..alts.len() {
                match self.allocate_one(
                    c,
                    r,
                    i,
                    0,
                    true,
                    Loc {
                        pool: 0,
                        slice: 0,
                        dev: 0,
                    },
                ) {
                    Err(Stop::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(done) => {
                        all_exceeded = false;
                        if done {
                            self.s.selected[c][r] = i;
                            return Ok(true);
                        }
                    }
                }
            }
            return if all_exceeded {
                Err(Stop::MaxSize)
            } else {
                Ok(false)
            };
        }
        let ai = self.alt_index(c, r, alt);
        let spec = &self.alt(c, r, alt).spec;
        let all_mode = spec.mode == AllocationMode::All;
        let num_devices = self.s.alts[ai].num_devices;
        if all_mode && num_devices == 0 {
            return Ok(false);
        }
        if dev >= num_devices {
            return self.allocate_one(
                c,
                r + 1,
                0,
                0,
                false,
                Loc {
                    pool: 0,
                    slice: 0,
                    dev: 0,
                },
            );
        }
        if self.s.picks[c].len() + num_devices - dev > ALLOCATION_RESULTS_MAX_SIZE {
            return Err(Stop::MaxSize);
        }
        if all_mode {
            let loc = self.s.alts[ai].all[dev];
            let Some(undo) = self.allocate_device(c, r, alt, loc, true)? else {
                return Ok(false);
            };
            let done = self.allocate_one(
                c,
                r,
                alt,
                dev + 1,
                in_sub,
                Loc {
                    pool: 0,
                    slice: 0,
                    dev: 0,
                },
            );
            if !matches!(done, Ok(true)) {
                self.undo(c, undo);
            }
            return done;
        }
        let admin = spec.admin();
        for p in start.pool..self.pools.len() {
            let pool = &self.pools[p];
            if pool.incomplete || pool.invalid.is_some() {
                continue;
            }
            let slice_start = if p == start.pool { start.slice } else { 0 };
            for si in slice_start..pool.slices.len() {
                let dev_start = if p == start.pool && si == start.slice {
                    start.dev
                } else {
                    0
                };
                for di in dev_start..pool.slices[si].devices.len() {
                    let d = &pool.slices[si].devices[di];
                    if admin && self.allocating_for(d.slot, c) {
                        continue;
                    }
                    if !admin && self.in_use(d.slot) {
                        continue;
                    }
                    let a = self.alt(c, r, alt);
                    if !self.selectable(c, a, d)? {
                        continue;
                    }
                    if self.capacity_fits(a, d) != Ok(true) {
                        continue;
                    }
                    let loc = Loc {
                        pool: p,
                        slice: si,
                        dev: di,
                    };
                    let Some(undo) = self.allocate_device(c, r, alt, loc, false)? else {
                        continue;
                    };
                    let next = Loc {
                        pool: p,
                        slice: si,
                        dev: di + 1,
                    };
                    match self.allocate_one(c, r, alt, dev + 1, in_sub, next) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.undo(c, undo),
                        Err(e) => {
                            self.undo(c, undo);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    fn in_use(&self, slot: u32) -> bool {
        self.a.allocated.in_use(slot) || self.s.allocating.iter().any(|(s, _)| *s == slot)
    }

    fn allocating_for(&self, slot: u32, claim: usize) -> bool {
        self.s
            .allocating
            .iter()
            .any(|(s, c)| *s == slot && *c == claim)
    }

    /// Whether the device satisfies the class's and the request's
    /// selectors and may be used from the node.
    fn selectable(&self, claim: usize, alt: &Alternative, d: &Device) -> Result<bool, Stop> {
        for (i, sel) in alt.class.selectors.iter().enumerate() {
            match sel.matches(d) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(Stop::Fatal(format!(
                        "class {}: selector #{i}: {e}",
                        alt.class.name
                    )));
                }
            }
        }
        for (i, sel) in alt.spec.selectors.iter().enumerate() {
            match sel.matches(d) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(Stop::Fatal(format!(
                        "claim {}: selector #{i}: {e}",
                        self.a.claims[claim].claim.key()
                    )));
                }
            }
        }
        if let Some(sel) = &d.node_selection
            && !sel.matches(&self.node.labels, &self.node.name)
        {
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether a shared device has room for the request's capacity ask
    /// (`Err`: the request names a capacity the device lacks).
    fn capacity_fits(&self, alt: &Alternative, d: &Device) -> Result<bool, ()> {
        if alt.spec.capacity.is_empty() && d.capacity.is_empty() {
            return Ok(true);
        }
        let used = self
            .a
            .allocated
            .consumed
            .get(&d.slot)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let allocating = |name: &str| -> Nano {
            self.s
                .allocating_capacity
                .iter()
                .filter(|(s, n, _)| *s == d.slot && &**n == name)
                .map(|(_, _, q)| *q)
                .sum()
        };
        capacity::fits(&alt.spec.capacity, &d.capacity, used, allocating)
    }

    /// Takes one candidate if it is free, has counters left, is not
    /// tainted against the request and keeps the constraints; `None` if
    /// not. With `must`, a broken constraint is an error (an `All` request
    /// that cannot have all its devices is a badly written claim).
    fn allocate_device(
        &mut self,
        c: usize,
        r: usize,
        alt: usize,
        loc: Loc,
        must: bool,
    ) -> Result<Option<usize>, Stop> {
        let d = self.device(loc);
        let a = self.alt(c, r, alt);
        let admin = a.spec.admin();
        let shared = d.allow_multiple_allocations;
        if !shared && admin && self.allocating_for(d.slot, c) {
            return Ok(None);
        }
        if !admin && self.in_use(d.slot) {
            return Ok(None);
        }
        // Taints first (upstream checks them after the counters, and then
        // does not give the counters back; checking first gives the same
        // verdict without that leak).
        if taint_prevents(d, &a.spec) {
            return Ok(None);
        }
        let capacity_in_use = shared
            && (self.a.allocated.consumed.contains_key(&d.slot)
                || self
                    .s
                    .allocating_capacity
                    .iter()
                    .any(|(s, _, _)| *s == d.slot));
        let mut counters = false;
        if !capacity_in_use && !d.consumes_counters.is_empty() {
            if !self.take_counters(loc) {
                return Ok(None);
            }
            counters = true;
        }
        let (request_name, sub): (&str, Option<&str>) = match &a.parent {
            Some(p) => (p, Some(&a.spec.name)),
            None => (&a.spec.name, None),
        };
        let n_constraints = self.s.constraints[c].len();
        for i in 0..n_constraints {
            if !self.s.constraints[c][i].add(request_name, sub, d) {
                for j in 0..i {
                    self.s.constraints[c][j].remove(request_name, sub);
                }
                if counters {
                    self.give_counters(loc);
                }
                if must {
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                        self.a.claims[c].claim.key(),
                        a.spec.name,
                        d.id()
                    )));
                }
                return Ok(None);
            }
        }
        if self.capacity_fits(a, d) != Ok(true) {
            for j in 0..n_constraints {
                self.s.constraints[c][j].remove(request_name, sub);
            }
            if counters {
                self.give_counters(loc);
            }
            return Ok(None);
        }
        let mut consumed = Vec::new();
        if shared {
            consumed = capacity::consumption(&a.spec.capacity, &d.capacity);
            for (n, q) in &consumed {
                self.s.allocating_capacity.push((d.slot, n.clone(), *q));
            }
        } else {
            self.s.allocating.push((d.slot, c));
        }
        self.s.picks[c].push(Pick {
            claim: c,
            request: r,
            alt,
            loc,
            slot: d.slot,
            shared,
            counters,
            consumed,
        });
        Ok(Some(self.s.picks[c].len() - 1))
    }

    /// Gives back the pick at `index` of claim `c` (and everything after).
    fn undo(&mut self, c: usize, index: usize) {
        while self.s.picks[c].len() > index {
            let Some(p) = self.s.picks[c].pop() else {
                break;
            };
            let a = self.alt(p.claim, p.request, p.alt);
            let (request_name, sub): (&str, Option<&str>) = match &a.parent {
                Some(parent) => (parent, Some(&a.spec.name)),
                None => (&a.spec.name, None),
            };
            for cs in &mut self.s.constraints[c] {
                cs.remove(request_name, sub);
            }
            if p.shared {
                for (n, q) in &p.consumed {
                    if let Some(i) = self
                        .s
                        .allocating_capacity
                        .iter()
                        .rposition(|(s, nn, qq)| *s == p.slot && nn == n && qq == q)
                    {
                        self.s.allocating_capacity.remove(i);
                    }
                }
            } else if let Some(i) = self
                .s
                .allocating
                .iter()
                .rposition(|(s, cc)| *s == p.slot && *cc == c)
            {
                self.s.allocating.remove(i);
            }
            if p.counters {
                self.give_counters(p.loc);
            }
        }
    }

    /// The counters of a pool's counter sets, minus what allocated devices
    /// (on any node) consume.
    fn available_counters(&mut self, pool: usize) -> &[(Arc<str>, Arc<str>, Nano)] {
        if self.s.available_counters[pool].is_none() {
            let p = &self.pools[pool];
            let mut avail: Vec<(Arc<str>, Arc<str>, Nano)> = p
                .counter_sets
                .iter()
                .flat_map(|set| {
                    set.counters
                        .iter()
                        .map(|(n, q)| (set.name.clone(), n.clone(), *q))
                })
                .collect();
            for d in p
                .slices
                .iter()
                .chain(p.other_slices.iter())
                .flat_map(|s| s.devices.iter())
            {
                if !self.a.allocated.allocated(d.slot) {
                    continue;
                }
                for cc in &d.consumes_counters {
                    for (n, q) in &cc.counters {
                        if let Some(e) = avail
                            .iter_mut()
                            .find(|(s, nn, _)| *s == cc.counter_set && nn == n)
                        {
                            e.2 -= q;
                        }
                    }
                }
            }
            self.s.available_counters[pool] = Some(avail);
        }
        self.s.available_counters[pool].as_deref().unwrap_or(&[])
    }

    /// Consumes the device's counters if they are all left.
    fn take_counters(&mut self, loc: Loc) -> bool {
        let d = self.device(loc);
        let avail: Vec<(Arc<str>, Arc<str>, Nano)> = self.available_counters(loc.pool).to_vec();
        for cc in &d.consumes_counters {
            for (n, q) in &cc.counters {
                self.s
                    .consumed_counters
                    .push((loc.pool, cc.counter_set.clone(), n.clone(), *q));
            }
        }
        // Every counter of the pool must stay within what is available.
        for (set, name, available) in &avail {
            let used: Nano = self
                .s
                .consumed_counters
                .iter()
                .filter(|(p, s, n, _)| *p == loc.pool && s == set && n == name)
                .map(|(_, _, _, q)| *q)
                .sum();
            if *available < used {
                self.give_counters(loc);
                return false;
            }
        }
        true
    }

    fn give_counters(&mut self, loc: Loc) {
        let d = self.device(loc);
        for cc in &d.consumes_counters {
            for (n, q) in &cc.counters {
                if let Some(i) = self.s.consumed_counters.iter().rposition(|(p, s, nn, qq)| {
                    *p == loc.pool && *s == cc.counter_set && nn == n && qq == q
                }) {
                    self.s.consumed_counters.remove(i);
                }
            }
        }
    }
}

/// Whether a NoSchedule or NoExecute taint of the device is not tolerated
/// by the request.
pub(super) fn taint_prevents(d: &Device, spec: &RequestSpec) -> bool {
    d.taints.iter().any(|t| {
        matches!(
            t.effect,
            DeviceTaintEffect::NoSchedule | DeviceTaintEffect::NoExecute
        ) && !spec.tolerations.iter().any(|tol| tol.tolerates(t))
    })
}
