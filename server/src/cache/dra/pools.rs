//! Which resource pools can serve a node, as upstream's allocator gathers
//! them:
//!
//! * a slice counts for the node if it holds counter sets (every node of
//!   the pool needs those), names the node, is for all nodes, selects the
//!   node by labels, or (per-device node selection) has a device for it;
//! * per pool only the newest generation among those slices counts;
//! * a pool whose slices for the node are not all of `resourceSliceCount`
//!   is checked against all its slices: outdated (a newer generation exists
//!   elsewhere) pools are skipped, incomplete ones are kept but never
//!   allocated from (and make `All` requests fail);
//! * a pool is invalid when two of its device slices name the same device,
//!   two counter sets share a name, or a device consumes a counter its pool
//!   does not have;
//! * pools are ordered by driver then pool name, those with devices that
//!   have binding conditions last; slices inside a pool by name.
//!
//! The search is first-fit in that order, so drivers steer it by naming.

use std::collections::HashSet;
use std::sync::Arc;

use super::SliceIndex;
use crate::model::NodeSpec;
use crate::model::dra::{CounterSet, PoolKey, Slice, SliceNodes};

/// A pool as seen from one node.
#[derive(Debug, Clone)]
pub struct Pool {
    /// Driver.
    pub driver: Arc<str>,
    /// Pool name.
    pub pool: Arc<str>,
    /// Slices with devices the node may use, by name.
    pub slices: Vec<Arc<Slice>>,
    /// The pool's other device slices (for counters consumed elsewhere).
    pub other_slices: Vec<Arc<Slice>>,
    /// Counter sets of the pool.
    pub counter_sets: Vec<CounterSet>,
    /// Not all slices of the current generation are there yet.
    pub incomplete: bool,
    /// Why the pool is invalid, if it is.
    pub invalid: Option<String>,
}

impl Pool {
    /// `driver/pool`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.driver, self.pool)
    }

    fn has_binding_conditions(&self) -> bool {
        self.slices
            .iter()
            .any(|s| s.devices.iter().any(|d| !d.binding_conditions.is_empty()))
    }
}

fn relevant(slice: &Slice, node: &NodeSpec) -> bool {
    if !slice.shared_counters.is_empty() {
        return true;
    }
    match &slice.nodes {
        SliceNodes::Name(n) => *n == node.name,
        SliceNodes::All => true,
        SliceNodes::Selector(s) => s.matches(&node.labels, &node.name),
        SliceNodes::PerDevice => slice.devices.iter().any(|d| {
            d.node_selection
                .as_ref()
                .is_some_and(|s| s.matches(&node.labels, &node.name))
        }),
        // A future way of selecting nodes: not known to apply.
        SliceNodes::Unset => false,
    }
}

/// The pools with devices for `node`, in allocation order. Without
/// slices that select nodes by label or per device, the answer depends on
/// the node's name only and is kept with the index (computed on a node's
/// first Filter after the slices changed, then shared).
pub fn pools_for(index: &SliceIndex, node: &NodeSpec) -> Arc<[Pool]> {
    if index.shared.is_empty() {
        if let Some(p) = index.node_pools.read().get(&node.name) {
            return p.clone();
        }
        let p: Arc<[Pool]> = gather(index, node).into();
        index
            .node_pools
            .write()
            .insert(node.name.clone(), p.clone());
        return p;
    }
    gather(index, node).into()
}

fn gather(index: &SliceIndex, node: &NodeSpec) -> Vec<Pool> {
    let mut out = Vec::new();
    // Relevant slices, grouped by pool, newest generation only.
    let mut groups: Vec<(PoolKey, Vec<Arc<Slice>>)> = Vec::new();
    let on_node = index.by_node.get(&node.name).into_iter().flatten();
    let shared = index.shared.iter().filter(|s| relevant(s, node));
    for s in on_node.chain(shared) {
        match groups
            .iter_mut()
            .find(|((d, p), _)| *d == s.driver && *p == s.pool)
        {
            None => groups.push(((s.driver.clone(), s.pool.clone()), vec![s.clone()])),
            Some((_, v)) => {
                let generation = v[0].generation;
                if s.generation > generation {
                    *v = vec![s.clone()];
                } else if s.generation == generation {
                    v.push(s.clone());
                }
            }
        }
    }
    let mut with_binding_conditions = Vec::new();
    for ((driver, pool), mut slices) in groups {
        let generation = slices[0].generation;
        let want = slices[0].slice_count;
        let mut other_slices = Vec::new();
        if slices.len() as i64 != want {
            let all = index
                .by_pool
                .get(&(driver.clone(), pool.clone()))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if all.iter().any(|s| s.generation > generation) {
                // The driver is replacing this generation: ignore it.
                continue;
            }
            let current: Vec<&Arc<Slice>> =
                all.iter().filter(|s| s.generation == generation).collect();
            if current.len() as i64 != want {
                out.push(Pool {
                    driver,
                    pool,
                    slices: Vec::new(),
                    other_slices: Vec::new(),
                    counter_sets: Vec::new(),
                    incomplete: true,
                    invalid: None,
                });
                continue;
            }
            let names: HashSet<&str> = slices.iter().map(|s| &*s.name).collect();
            other_slices = current
                .into_iter()
                .filter(|s| !names.contains(&*s.name) && s.shared_counters.is_empty())
                .cloned()
                .collect();
        }
        slices.sort_by(|a, b| a.name.cmp(&b.name));
        let (counter_slices, device_slices): (Vec<_>, Vec<_>) = slices
            .into_iter()
            .partition(|s| !s.shared_counters.is_empty());
        let mut p = Pool {
            driver,
            pool,
            slices: device_slices,
            other_slices,
            counter_sets: Vec::new(),
            incomplete: false,
            invalid: None,
        };
        p.invalid = validate(&p, &counter_slices);
        if p.invalid.is_none() {
            p.counter_sets = counter_slices
                .iter()
                .flat_map(|s| s.shared_counters.iter().cloned())
                .collect();
        } else {
            p.slices.clear();
        }
        if p.has_binding_conditions() {
            with_binding_conditions.push(p);
        } else {
            out.push(p);
        }
    }
    let order = |a: &Pool, b: &Pool| a.driver.cmp(&b.driver).then_with(|| a.pool.cmp(&b.pool));
    out.sort_by(order);
    with_binding_conditions.sort_by(order);
    out.extend(with_binding_conditions);
    out
}

fn validate(p: &Pool, counter_slices: &[Arc<Slice>]) -> Option<String> {
    let mut names = HashSet::new();
    for d in p.slices.iter().flat_map(|s| s.devices.iter()) {
        if !names.insert(&*d.name) {
            return Some(format!("duplicate device name {}", d.name));
        }
    }
    let mut sets: Vec<&CounterSet> = Vec::new();
    for c in counter_slices.iter().flat_map(|s| s.shared_counters.iter()) {
        if sets.iter().any(|s| s.name == c.name) {
            return Some(format!("duplicate counter set name {}", c.name));
        }
        sets.push(c);
    }
    for d in p
        .slices
        .iter()
        .chain(p.other_slices.iter())
        .flat_map(|s| s.devices.iter())
    {
        for c in &d.consumes_counters {
            let Some(set) = sets.iter().find(|s| s.name == c.counter_set) else {
                return Some(format!("counter set {} not found", c.counter_set));
            };
            for (name, _) in &c.counters {
                if !set.counters.iter().any(|(n, _)| n == name) {
                    return Some(format!(
                        "counter {name} not found in counter set {}",
                        set.name
                    ));
                }
            }
        }
    }
    None
}
