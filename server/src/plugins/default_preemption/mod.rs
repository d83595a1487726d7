//! DefaultPreemption (PostFilter): when no node fits a pod, find a node
//! where evicting lower-priority pods would make it fit, evict the fewest
//! and least important of them, and nominate the pod to that node.
//!
//! As upstream:
//! * pods with `preemptionPolicy: Never` do not preempt; nor does a pod whose
//!   nominated node still has a lower-priority victim terminating;
//! * only nodes not rejected as unresolvable are candidates; a random offset
//!   and `max(minCandidateNodesPercentage% of them, minCandidateNodesAbsolute)`
//!   bound how many are dry-run;
//! * on each candidate every unit of lower priority (a pod, or with the
//!   GenericWorkload gate a PodGroup evicted whole; see [`victims`]) is
//!   removed (through the filters' RemovePod, on cloned state), the pod
//!   must then fit; units are reprieved one by one, most important first,
//!   those whose eviction would violate a PodDisruptionBudget before the
//!   others, keeping every reprieve that still lets the pod fit;
//! * every Filter of the profile takes part in that what-if: the per-node
//!   plugins on each node, the batch ones (remote extenders) once per
//!   attempt with all the candidates the per-node ones found, saying which
//!   they reject and which pods they need gone
//!   ([`Framework::run_batch_filters_preemption`]); a candidate is chosen
//!   again with those pods kept evicted. Only when they keep no candidate
//!   free of budget violations are more nodes dry-run and put to them;
//! * a candidate where the pod fits with nothing evicted is no candidate
//!   (`No preemption victims found for incoming pod`), unless an extender
//!   that processes preemption may name victims there (v1.38,
//!   kubernetes#135486);
//! * the node chosen has, in order: the fewest budget violations, the lowest
//!   highest-priority victim, the lowest sum of priorities, the fewest
//!   victims, the latest start of its most important victims;
//! * extenders that process preemption (upstream's HTTP extenders with a
//!   `preemptVerb`) narrow the candidates and their victims, in order; an
//!   ignorable one that fails is skipped, and so is a node it empties of
//!   victims;
//! * the preemptor is nominated to the node; once that is written (with
//!   its `PodScheduled=False` condition, in one status update), the victims
//!   are evicted ([`victims::evict`]: the `DisruptionTarget` condition and
//!   a deletion, or a rejection at Permit), and lower-priority pods
//!   nominated to the node lose their nomination ([`Eviction`], run by the
//!   scheduler).

mod args;
mod group;
mod victims;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use parking_lot::Mutex;

pub use args::DefaultPreemptionArgs;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    Code, CycleState, Eviction, FitError, Handle, NodeToStatus, NodeVictims, NominatingInfo,
    Plugin, PostFilterPlugin, PostFilterResult, PreemptionCandidate, PreemptionVerdict,
    ProfileFilters, Status, Victims,
};
use crate::model::{LabelSelector, PodInfo, PodRef};
use crate::plugins::names::DEFAULT_PREEMPTION;
use crate::rng::FastRng;
use victims::{Unit, Units, evict, reprieve_order};

/// Nodes where preemption cannot help are reported with this reason.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Why a node without lower-priority pods is no candidate.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The DefaultPreemption plugin.
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    handle: Handle,
    rng: Mutex<FastRng>,
    /// PodGroupPreemptionPolicy: a group preempts by its own policy (off:
    /// `Never` when any of its pods says so). Read once, when built.
    group_preemption_policy: bool,
    /// GenericWorkload: victims in PodGroups count by their group (see
    /// [`victims`]). Read once, when built.
    pod_groups: bool,
}

/// A node where preemption works, with its victims (most important first).
#[derive(Debug, Clone)]
struct Candidate {
    node: Arc<str>,
    victims: Vec<PodRef>,
    pdb_violations: usize,
}

/// What the per-node Filter plugins' dry run found on a node.
struct Found {
    node: Arc<NodeInfo>,
    /// The victims, most important first.
    victims: Vec<PodRef>,
    /// How many of them violate a budget.
    pdb_violations: usize,
    /// Every pod preemption may evict for the node, in reprieve order.
    pods: Vec<PodRef>,
    /// Per pod of `pods`: whether it is a victim.
    marked: Vec<bool>,
}

/// A budget as the victim selection uses it.
struct Budget {
    namespace: String,
    selector: LabelSelector,
    allowed: i32,
    disrupted: Vec<String>,
}

impl Budget {
    fn from(pdb: &PodDisruptionBudget) -> Option<Self> {
        let selector = LabelSelector::parse(
            pdb.spec.as_ref().and_then(|s| s.selector.as_ref()),
            "spec.selector",
        )
        .ok()?;
        let status = pdb.status.as_ref();
        Some(Self {
            namespace: pdb
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            selector,
            allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        })
    }
}

/// Splits victims into those whose eviction would violate a budget and the
/// others, keeping their order.
fn split_by_budget(victims: &[PodRef], budgets: &[Budget]) -> (Vec<PodRef>, Vec<PodRef>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for v in victims {
        let mut violated = false;
        if !v.labels.is_empty() {
            for (i, b) in budgets.iter().enumerate() {
                // A budget with an empty selector matches nothing here.
                if b.namespace != *v.namespace
                    || b.selector.is_everything()
                    || !b.selector.matches(&v.labels)
                {
                    continue;
                }
                if b.disrupted.iter().any(|d| **d == *v.name) {
                    continue;
                }
                allowed[i] -= 1;
                violated |= allowed[i] < 0;
            }
        }
        if violated {
            violating.push(v.clone());
        } else {
            fine.push(v.clone());
        }
    }
    (violating, fine)
}

/// Now, as nanoseconds since the epoch: what a pod that has not started
/// counts as. Read once per decision, so that every comparison within it
/// sees the same value.
fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| d.as_nanos() as i64)
}

/// When a pod started, as nanoseconds since the epoch; a pod that has not
/// started counts as starting `now`, as upstream.
fn start_time(p: &PodInfo, now: i64) -> i64 {
    p.pod
        .start_time()
        .map(|t| t.0.as_nanosecond() as i64)
        .unwrap_or(now)
}

/// Whether the pod is being deleted by a preemption.
fn terminating_by_preemption(p: &PodInfo) -> bool {
    p.terminating
        && p.pod
            .get()
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
}

/// Why preemption stops when the extenders leave no candidate.
pub const NO_CANDIDATE: &str = "no candidate node for preemption";

/// Chooses among candidates as upstream's pickOneNodeForPreemption does.
fn pick(candidates: &[Candidate]) -> Option<&Candidate> {
    // One `now` for the whole choice: were it read per comparison, the
    // start-time criterion would differ between computing the best value
    // and keeping the candidates that have it, and drop them all.
    let now = now_nanos();
    if let Some(c) = candidates.iter().find(|c| c.victims.is_empty()) {
        return Some(c);
    }
    let criteria: [&dyn Fn(&Candidate) -> i64; 5] = [
        &|c| -(c.pdb_violations as i64),
        &|c| -i64::from(c.victims[0].priority),
        &|c| {
            -c.victims
                .iter()
                .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        &|c| -(c.victims.len() as i64),
        &|c| {
            // The earliest start among the most important victims: later is better.
            let top = c.victims[0].priority;
            c.victims
                .iter()
                .filter(|v| v.priority == top)
                .map(|v| start_time(v, now))
                .min()
                .unwrap_or(i64::MIN)
        },
    ];
    let mut pool: Vec<&Candidate> = candidates.iter().collect();
    for f in criteria {
        // Each value computed once: a victim that has not started counts
        // as starting now, which moves between two evaluations.
        let values: Vec<i64> = pool.iter().map(|c| f(c)).collect();
        let best = values.iter().copied().max()?;
        let mut i = 0;
        pool.retain(|_| {
            i += 1;
            values[i - 1] == best
        });
        if pool.len() == 1 {
            break;
        }
    }
    pool.first().copied()
}

impl DefaultPreemption {
    /// Builds the plugin.
    pub fn new(args: DefaultPreemptionArgs, handle: &Handle) -> Self {
        let features = handle.features();
        Self {
            args,
            handle: handle.clone(),
            rng: Mutex::new(FastRng::from_entropy()),
            group_preemption_policy: features.enable_pod_group_preemption_policy,
            pod_groups: features.enable_generic_workload,
        }
    }

    /// Whether `pod` may preempt at all, and why not.
    fn eligible(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
    ) -> Result<(), &'static str> {
        if pod.preemption_never {
            return Err("not eligible due to preemptionPolicy=Never.");
        }
        let Some(nnn) = pod.nominated_node_name.as_deref() else {
            return Ok(());
        };
        if filtered.get(nnn).code() == Code::UnschedulableAndUnresolvable {
            return Ok(());
        }
        if let Some(node) = state.snapshot().get(nnn)
            && node
                .pods()
                .iter()
                .any(|p| p.priority < pod.priority && terminating_by_preemption(p))
        {
            return Err("not eligible due to a terminating pod on the nominated node.");
        }
        Ok(())
    }

    /// The units preemption may evict for `pod` on `node` (see
    /// [`victims`]).
    fn units_on(&self, pod: &PodInfo, node: &NodeInfo) -> Vec<Unit> {
        let groups = self.pod_groups.then(|| &**self.handle.pod_groups());
        let mut units = Units::new(groups, pod.priority, None);
        for p in node.pods() {
            units.add(p);
        }
        units.into_vec()
    }

    /// Finds the victims on one node, on copies of the node and the state:
    /// every unit of lower priority is removed, the pod must then pass the
    /// per-node Filter plugins, and units are given back (reprieved) in
    /// order as long as it still does; the units holding a pod of `pinned`
    /// (uids the batch Filter plugins need gone) are never given back.
    /// With `listing`, the result also lists every pod it may evict (for
    /// the batch Filter plugins to be asked).
    #[allow(clippy::too_many_arguments)]
    fn select_victims(
        &self,
        profile: &dyn ProfileFilters,
        state: &CycleState,
        pod: &PodInfo,
        node: &Arc<NodeInfo>,
        budgets: &[Budget],
        pinned: &[Arc<str>],
        listing: bool,
    ) -> Result<Found, Status> {
        let mut units = self.units_on(pod, node);
        if units.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        let nominated = self.handle.nominated_pods();
        let snapshot = state.snapshot();
        let mut on: NodeInfo = (**node).clone();
        let mut state = state.clone();
        // A pod of a unit on another node (a group evicted whole) leaves
        // that node: PreFilter extensions hear of it with that node.
        let remove = |on: &mut NodeInfo, state: &mut CycleState, p: &PodRef| {
            if p.node_name.as_deref() == Some(on.name()) {
                on.remove_pod(&p.uid);
                return profile.run_pre_filter_extension_remove_pod(state, pod, p, on);
            }
            match p.node_name.as_deref().and_then(|n| snapshot.get(n)) {
                Some(other) => profile.run_pre_filter_extension_remove_pod(state, pod, p, other),
                None => Status::success(),
            }
        };
        let add = |on: &mut NodeInfo, state: &mut CycleState, p: &PodRef| {
            if p.node_name.as_deref() == Some(on.name()) {
                on.add_pod(p.clone());
                return profile.run_pre_filter_extension_add_pod(state, pod, p, on);
            }
            match p.node_name.as_deref().and_then(|n| snapshot.get(n)) {
                Some(other) => profile.run_pre_filter_extension_add_pod(state, pod, p, other),
                None => Status::success(),
            }
        };
        for p in units.iter().flat_map(|u| u.pods.iter()) {
            let s = remove(&mut on, &mut state, p);
            if !s.is_success() {
                return Err(s);
            }
        }
        let s = profile.run_filter_with_nominated_pods(&state, pod, &on, &nominated);
        if !s.is_success() {
            return Err(s);
        }
        let (first, violations) = reprieve_order(&mut units, budgets);
        let mut victim = vec![false; units.len()];
        let mut pdb_violations = 0;
        for (i, u) in units.iter().enumerate() {
            let pinned_here =
                !pinned.is_empty() && u.pods.iter().any(|p| pinned.iter().any(|q| *q == p.uid));
            if !pinned_here {
                for p in &u.pods {
                    let s = add(&mut on, &mut state, p);
                    if !s.is_success() {
                        return Err(s);
                    }
                }
                if profile
                    .run_filter_with_nominated_pods(&state, pod, &on, &nominated)
                    .is_success()
                {
                    continue; // reprieved
                }
                for p in &u.pods {
                    let s = remove(&mut on, &mut state, p);
                    if !s.is_success() {
                        return Err(s);
                    }
                }
            }
            victim[i] = true;
            if i < first {
                pdb_violations += violations[i];
            }
        }
        // Victims most important first, whichever part they came from.
        let now = now_nanos();
        let mut chosen: Vec<&Unit> = (0..units.len())
            .filter(|i| victim[*i])
            .map(|i| &units[i])
            .collect();
        chosen.sort_by(|a, b| victims::more_important(a, b, now));
        let (pods, marked) = if listing {
            (
                units.iter().flat_map(|u| u.pods.iter().cloned()).collect(),
                units
                    .iter()
                    .zip(&victim)
                    .flat_map(|(u, v)| std::iter::repeat_n(*v, u.pods.len()))
                    .collect(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(Found {
            node: node.clone(),
            victims: chosen.iter().flat_map(|u| u.pods.iter().cloned()).collect(),
            pdb_violations,
            pods,
            marked,
        })
    }

    /// Dry-runs preemption on the potential nodes from a random offset, in
    /// parallel batches, until enough candidates are found (at least one
    /// without budget violation). With batch Filter plugins (remote
    /// extenders) in the profile, the candidates the per-node plugins found
    /// are then put to them in one call each
    /// ([`Framework::run_batch_filters_preemption`]); only if they keep no
    /// candidate without a budget violation are more nodes dry-run and put
    /// to them (another round).
    async fn find_candidates(
        &self,
        profile: &dyn ProfileFilters,
        state: &CycleState,
        pod: &PodInfo,
        potential: &[Arc<NodeInfo>],
        budgets: &[Budget],
        filtered: &NodeToStatus,
    ) -> (Vec<Candidate>, NodeToStatus) {
        let mut statuses = NodeToStatus::default();
        let n = potential.len();
        if n == 0 {
            return (Vec::new(), statuses);
        }
        let remote = profile.has_preemption_batch_filters();
        // v1.38 (kubernetes#135486): a node that needs no victim is kept,
        // without victims, for an extender's preemptVerb to name some.
        let placeholders = self.extender_may_name_victims(pod);
        let offset = self.rng.lock().below(n as u64) as usize;
        let wanted = self.args.num_candidates(n);
        let (mut clean, mut violating) = (Vec::new(), Vec::new());
        let mut done = 0;
        let mut results: Vec<Option<Result<Found, Status>>> = Vec::new();
        while done < n {
            // The per-node plugins' dry run, a batch at a time.
            let mut round: Vec<Found> = Vec::new();
            while done < n {
                let batch = (wanted.max(1)).min(n - done);
                results.clear();
                results.resize_with(batch, || None);
                self.handle
                    .parallelizer()
                    .for_each_mut(&mut results, |i, slot| {
                        let node = &potential[(offset + done + i) % n];
                        *slot = Some(self.select_victims(
                            profile,
                            state,
                            pod,
                            node,
                            budgets,
                            &[],
                            remote,
                        ));
                    });
                for (i, r) in results.drain(..).enumerate() {
                    let node = &potential[(offset + done + i) % n];
                    match r {
                        Some(Ok(found)) => round.push(found),
                        Some(Err(s)) => statuses.set(Arc::from(node.name()), s),
                        None => {}
                    }
                }
                done += batch;
                let found_clean = clean.len()
                    + round
                        .iter()
                        .filter(|f| {
                            f.pdb_violations == 0
                                && (remote || placeholders || !f.victims.is_empty())
                        })
                        .count();
                let found_all = clean.len() + violating.len() + round.len();
                if found_clean > 0 && found_all >= wanted {
                    break;
                }
            }
            if remote && !round.is_empty() {
                round = self
                    .ask_batch_filters(profile, state, pod, round, budgets, filtered, &mut statuses)
                    .await;
            }
            for f in round {
                if f.victims.is_empty() && !placeholders {
                    statuses.set(Arc::from(f.node.name()), Status::unresolvable(NO_VICTIMS));
                    continue;
                }
                let c = Candidate {
                    node: Arc::from(f.node.name()),
                    victims: f.victims,
                    pdb_violations: f.pdb_violations,
                };
                if c.pdb_violations == 0 {
                    clean.push(c);
                } else {
                    violating.push(c);
                }
            }
            if !remote || !clean.is_empty() {
                break;
            }
        }
        clean.extend(violating);
        (clean, statuses)
    }

    /// Puts the candidates the per-node plugins found to the batch Filter
    /// plugins (one call each): a candidate they reject is recorded as
    /// such; one where they need other pods gone than the victims gets its
    /// victims chosen again with those pods kept evicted.
    #[allow(clippy::too_many_arguments)]
    async fn ask_batch_filters(
        &self,
        profile: &dyn ProfileFilters,
        state: &CycleState,
        pod: &PodInfo,
        round: Vec<Found>,
        budgets: &[Budget],
        filtered: &NodeToStatus,
        statuses: &mut NodeToStatus,
    ) -> Vec<Found> {
        let asked: Vec<PreemptionCandidate<'_>> = round
            .iter()
            .map(|f| PreemptionCandidate {
                node: &f.node,
                pods: &f.pods,
                victims: &f.marked,
            })
            .collect();
        let verdicts = profile
            .run_batch_filters_preemption(state, pod, &asked, filtered)
            .await;
        drop(asked);
        let mut kept = Vec::with_capacity(round.len());
        for (f, v) in round.into_iter().zip(verdicts) {
            match v {
                PreemptionVerdict::Victims => kept.push(f),
                PreemptionVerdict::Rejected(s) => statuses.set(Arc::from(f.node.name()), s),
                PreemptionVerdict::Needs(at) => {
                    if at.iter().all(|&k| f.marked.get(k).copied().unwrap_or(true)) {
                        // The victims cover what they need.
                        kept.push(f);
                        continue;
                    }
                    let pinned: Vec<Arc<str>> = at
                        .iter()
                        .filter_map(|&k| f.pods.get(k))
                        .map(|p| p.uid.clone())
                        .collect();
                    match self.select_victims(profile, state, pod, &f.node, budgets, &pinned, false)
                    {
                        Ok(again) => kept.push(again),
                        Err(s) => statuses.set(Arc::from(f.node.name()), s),
                    }
                }
            }
        }
        kept
    }

    /// Whether an extender that processes preemption (an HTTP extender's
    /// `preemptVerb`) is interested in `pod`: it may name victims where
    /// Filter plugins need none.
    fn extender_may_name_victims(&self, pod: &PodInfo) -> bool {
        self.handle
            .extenders()
            .iter()
            .any(|e| e.supports_preemption() && e.is_interested(pod))
    }

    /// Lets the extenders that process preemption narrow the candidates, as
    /// upstream's callExtenders: each gets what the one before kept. As
    /// v1.38 (kubernetes#135486): a candidate that came to an extender
    /// without victims may come back without (left to the next extender);
    /// one that came with victims and comes back without is an error (or,
    /// of an ignorable extender, dropped); candidates still without victims
    /// after the last extender are dropped.
    async fn call_extenders(
        &self,
        pod: &PodInfo,
        candidates: Vec<Candidate>,
        snapshot: &crate::cache::Snapshot,
    ) -> Result<Vec<Candidate>, Status> {
        let extenders = self.handle.extenders();
        if extenders.is_empty() || candidates.is_empty() {
            return Ok(candidates);
        }
        let mut map: NodeVictims = candidates
            .into_iter()
            .map(|c| {
                (
                    c.node,
                    Victims {
                        pods: c.victims,
                        num_pdb_violations: c.pdb_violations as i64,
                    },
                )
            })
            .collect();
        for ext in extenders.iter() {
            if !ext.supports_preemption() || !ext.is_interested(pod) {
                continue;
            }
            let came_empty: Vec<Arc<str>> = map
                .iter()
                .filter(|(_, v)| v.pods.is_empty())
                .map(|(n, _)| n.clone())
                .collect();
            let mut kept = match ext.process_preemption(pod, &map, snapshot).await {
                Ok(kept) => kept,
                Err(e) if ext.is_ignorable() => {
                    tracing::warn!(extender = ext.name(), point = "PostFilter", pod = %pod.key(), error = %e, "ignorable extender skipped");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(extender = ext.name(), point = "PostFilter", pod = %pod.key(), error = %e, "extender failed");
                    return Err(Status::error(e.to_string()));
                }
            };
            let emptied = |n: &Arc<str>, v: &Victims| v.pods.is_empty() && !came_empty.contains(n);
            if let Some((node, _)) = kept.iter().find(|(n, v)| emptied(n, v)) {
                if !ext.is_ignorable() {
                    return Err(Status::error(format!(
                        "expected at least one victim pod on node {node:?}"
                    )));
                }
                kept.retain(|n, v| !emptied(n, v));
            }
            map = kept;
            if map.is_empty() {
                break;
            }
        }
        Ok(map
            .into_iter()
            .filter(|(_, v)| !v.pods.is_empty())
            .map(|(node, v)| Candidate {
                node,
                victims: v.pods,
                pdb_violations: v.num_pdb_violations.max(0) as usize,
            })
            .collect())
    }

    /// The eviction of `c`'s victims, for the scheduler to run once the
    /// preemptor's nomination is written ([`victims::evict`]); then the
    /// lower-priority pods nominated to the node lose their nomination.
    fn eviction(&self, profile: &dyn ProfileFilters, pod: &PodInfo, c: &Candidate) -> Eviction {
        let handle = self.handle.clone();
        let controller = profile.profile_name().clone();
        let message = format!("{controller}: preempting to accommodate a higher priority pod");
        let preemptor = Arc::new(pod.clone());
        let node = c.node.clone();
        let note = format!("Preempted by pod {} on node {}", preemptor.uid, node);
        let victims = c.victims.clone();
        Eviction::new(async move {
            evict(
                &handle,
                &controller,
                &victims,
                &message,
                &note,
                Some(&preemptor),
            )
            .await?;
            let nominated = handle.nominated_pods();
            for np in nominated.get(&node).into_iter().flatten() {
                if np.priority < preemptor.priority
                    && np.uid != preemptor.uid
                    && let Err(e) = handle.cluster().set_nominated_node_name(np, None).await
                {
                    tracing::warn!(pod = %np.key(), error = %e, "clearing nominated node failed");
                }
            }
            Ok(())
        })
    }

    async fn preempt(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        profile: &dyn ProfileFilters,
    ) -> (Option<PostFilterResult>, Status) {
        if let Err(why) = self.eligible(state, pod, filtered) {
            return (None, Status::unschedulable(why));
        }
        let snapshot = state.snapshot().clone();
        let potential: Vec<Arc<NodeInfo>> = snapshot
            .list()
            .iter()
            .filter(|n| filtered.get(n.name()).code() != Code::UnschedulableAndUnresolvable)
            .cloned()
            .collect();
        let budgets: Vec<Budget> = self
            .handle
            .objects()
            .pod_disruption_budgets("")
            .iter()
            .filter_map(|p| Budget::from(p))
            .collect();
        let (candidates, mut statuses) = self
            .find_candidates(profile, state, pod, &potential, &budgets, filtered)
            .await;
        if candidates.is_empty() {
            statuses.set_absent_nodes_status(Status::unresolvable(NOT_HELPFUL));
            let fit = FitError {
                num_all_nodes: snapshot.num_nodes(),
                diagnosis: crate::framework::Diagnosis {
                    node_to_status: statuses,
                    ..Default::default()
                },
            };
            return (
                Some(PostFilterResult::nominate(None)),
                Status::unschedulable(fit.to_string()),
            );
        }
        let candidates = match self.call_extenders(pod, candidates, &snapshot).await {
            Ok(c) => c,
            Err(s) => return (None, s),
        };
        let Some(best) = pick(&candidates) else {
            return (None, Status::unschedulable(NO_CANDIDATE));
        };
        // A dry run only says what would happen.
        let eviction = (!state.dry_run).then(|| {
            tracing::info!(pod = %pod.key(), node = %best.node, victims = best.victims.len(), "preempting");
            self.eviction(profile, pod, best)
        });
        (
            Some(PostFilterResult {
                nominating_info: NominatingInfo::Override(Some(best.node.clone())),
                victims: best.victims.clone(),
                eviction,
            }),
            // v1.37 says what it found (PostFilter prefixes "preemption: ",
            // and the FailedScheduling event and the PodScheduled condition
            // end with it); v1.36 said nothing.
            Status::new(
                Code::Success,
                format!(
                    "found a potential placement for pod on node {}, preempting {} victims",
                    best.node,
                    best.victims.len()
                ),
            ),
        )
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        DEFAULT_PREEMPTION
    }
    extension_points!(post_filter, pod_group_post_filter);
}

#[async_trait]
impl PostFilterPlugin for DefaultPreemption {
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        profile: &dyn ProfileFilters,
    ) -> (Option<PostFilterResult>, Status) {
        let (result, status) = self.preempt(state, pod, filtered, profile).await;
        let message = status.message();
        if message.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code(), format!("preemption: {message}")),
        )
    }
}

#[cfg(test)]
mod tests;
