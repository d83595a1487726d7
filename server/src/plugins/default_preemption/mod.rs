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
//! * on each candidate all lower-priority pods are removed (through the
//!   filters' RemovePod, on cloned state), the pod must then fit; victims are
//!   reprieved one by one, most important first, those whose eviction would
//!   violate a PodDisruptionBudget before the others, keeping every reprieve
//!   that still lets the pod fit;
//! * the node chosen has, in order: the fewest budget violations, the lowest
//!   highest-priority victim, the lowest sum of priorities, the fewest
//!   victims, the latest start of its most important victims;
//! * extenders that process preemption (upstream's HTTP extenders with a
//!   `preemptVerb`) narrow the candidates and their victims, in order; an
//!   ignorable one that fails is skipped, and so is a node it returns without
//!   victims;
//! * the preemptor is nominated to the node; once that is written (with
//!   its `PodScheduled=False` condition, in one status update), the victims
//!   get the `DisruptionTarget` condition and are deleted (a victim waiting
//!   at Permit is rejected instead), and lower-priority pods nominated to
//!   the node lose their nomination ([`Eviction`], run by the scheduler).

mod args;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use parking_lot::Mutex;

pub use args::DefaultPreemptionArgs;

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{
    Code, CycleState, EventType, Eviction, FitError, Framework, Handle, NodeToStatus, NodeVictims,
    NominatingInfo, Plugin, PodEvent, PostFilterPlugin, PostFilterResult, Status, Victims,
};
use crate::model::{LabelSelector, PodInfo, PodRef};
use crate::plugins::names::DEFAULT_PREEMPTION;
use crate::rng::FastRng;

/// Nodes where preemption cannot help are reported with this reason.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Why a node without lower-priority pods is no candidate.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The DefaultPreemption plugin.
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    handle: Handle,
    rng: Mutex<FastRng>,
}

/// A node where preemption works, with its victims (most important first).
#[derive(Debug, Clone)]
struct Candidate {
    node: Arc<str>,
    victims: Vec<PodRef>,
    pdb_violations: usize,
}

/// The victims found on a node and how many of them violate a budget, or
/// why the node is no candidate.
type Selection = Result<(Vec<PodRef>, usize), Status>;

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

/// Whether `a` is more important than `b`: higher priority, or equal
/// priority and started earlier.
fn more_important(a: &PodInfo, b: &PodInfo, now: i64) -> bool {
    a.priority > b.priority || (a.priority == b.priority && start_time(a, now) < start_time(b, now))
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
        Self {
            args,
            handle: handle.clone(),
            rng: Mutex::new(FastRng::from_entropy()),
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

    /// Finds the victims on one node, on copies of the node and the state.
    fn select_victims(
        &self,
        profile: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        budgets: &[Budget],
    ) -> Selection {
        let nominated = self.handle.nominated_pods();
        let mut node = node.clone();
        let mut state = state.clone();
        let mut potential: Vec<PodRef> = node
            .pods()
            .iter()
            .filter(|p| p.priority < pod.priority)
            .cloned()
            .collect();
        for v in &potential {
            node.remove_pod(&v.uid);
            let s = profile.run_pre_filter_extension_remove_pod(&mut state, pod, v, &node);
            if !s.is_success() {
                return Err(s);
            }
        }
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        let s = profile.run_filter_with_nominated_pods(&state, pod, &node, &nominated);
        if !s.is_success() {
            return Err(s);
        }
        let now = now_nanos();
        potential.sort_by(|a, b| {
            if more_important(a, b, now) {
                std::cmp::Ordering::Less
            } else if more_important(b, a, now) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let (violating, fine) = split_by_budget(&potential, budgets);
        let mut victims = Vec::new();
        let mut violations = 0;
        for (group, counts) in [(violating, true), (fine, false)] {
            for v in group {
                node.add_pod(v.clone());
                let s = profile.run_pre_filter_extension_add_pod(&mut state, pod, &v, &node);
                if !s.is_success() {
                    return Err(s);
                }
                if profile
                    .run_filter_with_nominated_pods(&state, pod, &node, &nominated)
                    .is_success()
                {
                    continue; // reprieved
                }
                node.remove_pod(&v.uid);
                let s = profile.run_pre_filter_extension_remove_pod(&mut state, pod, &v, &node);
                if !s.is_success() {
                    return Err(s);
                }
                if counts {
                    violations += 1;
                }
                victims.push(v);
            }
        }
        Ok((victims, violations))
    }

    /// Dry-runs preemption on the potential nodes from a random offset until
    /// enough candidates are found (at least one without budget violation).
    fn find_candidates(
        &self,
        profile: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        potential: &[Arc<NodeInfo>],
        budgets: &[Budget],
    ) -> (Vec<Candidate>, NodeToStatus) {
        let mut statuses = NodeToStatus::default();
        let n = potential.len();
        if n == 0 {
            return (Vec::new(), statuses);
        }
        let offset = self.rng.lock().below(n as u64) as usize;
        let wanted = self.args.num_candidates(n);
        let (mut clean, mut violating) = (Vec::new(), Vec::new());
        let mut done = 0;
        let mut results: Vec<Option<Selection>> = Vec::new();
        while done < n {
            let batch = (wanted.max(1)).min(n - done);
            results.clear();
            results.resize(batch, None);
            self.handle
                .parallelizer()
                .for_each_mut(&mut results, |i, slot| {
                    let node = &potential[(offset + done + i) % n];
                    *slot = Some(self.select_victims(profile, state, pod, node, budgets));
                });
            for (i, r) in results.drain(..).enumerate() {
                let node = &potential[(offset + done + i) % n];
                match r.expect("filled") {
                    Ok((victims, _)) if victims.is_empty() => statuses.set(
                        Arc::from(node.name()),
                        Status::error(format!(
                            "expected at least one victim pod on node {:?}",
                            node.name()
                        )),
                    ),
                    Ok((victims, violations)) => {
                        let c = Candidate {
                            node: Arc::from(node.name()),
                            victims,
                            pdb_violations: violations,
                        };
                        if violations == 0 {
                            clean.push(c);
                        } else {
                            violating.push(c);
                        }
                    }
                    Err(s) => statuses.set(Arc::from(node.name()), s),
                }
            }
            done += batch;
            if !clean.is_empty() && clean.len() + violating.len() >= wanted {
                break;
            }
        }
        clean.extend(violating);
        (clean, statuses)
    }

    /// Lets the extenders that process preemption narrow the candidates, as
    /// upstream's callExtenders: each gets what the one before kept.
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
            if let Some((node, _)) = kept.iter().find(|(_, v)| v.pods.is_empty()) {
                if !ext.is_ignorable() {
                    return Err(Status::error(format!(
                        "expected at least one victim pod on node {node:?}"
                    )));
                }
                kept.retain(|_, v| !v.pods.is_empty());
            }
            map = kept;
            if map.is_empty() {
                break;
            }
        }
        Ok(map
            .into_iter()
            .map(|(node, v)| Candidate {
                node,
                victims: v.pods,
                pdb_violations: v.num_pdb_violations.max(0) as usize,
            })
            .collect())
    }

    /// The eviction of `c`'s victims, for the scheduler to run once the
    /// preemptor's nomination is written: each victim waiting at Permit is
    /// rejected, the others get the `DisruptionTarget` condition and are
    /// deleted, each with a `Preempted` event; then the lower-priority
    /// pods nominated to the node lose their nomination.
    fn eviction(&self, profile: &Framework, pod: &PodInfo, c: &Candidate) -> Eviction {
        let handle = self.handle.clone();
        let controller = profile.profile_name().clone();
        let message = format!("{controller}: preempting to accommodate a higher priority pod");
        let preemptor = Arc::new(pod.clone());
        let node = c.node.clone();
        let victims = c.victims.clone();
        Eviction::new(async move {
            for v in &victims {
                if handle
                    .waiting_pods()
                    .reject(&v.uid, Some(DEFAULT_PREEMPTION), "preempted")
                {
                    continue;
                }
                handle
                    .cluster()
                    .delete_pod(v, &message)
                    .await
                    .map_err(|e| format!("deleting victim {}: {e}", v.key()))?;
                // Upstream's event names the preemptor in its note only.
                handle.events().record(
                    PodEvent::new(
                        v.clone(),
                        controller.clone(),
                        EventType::Normal,
                        "Preempted",
                        "Preempting",
                        &format!("Preempted by pod {} on node {}", preemptor.uid, node),
                    )
                    .with_related(preemptor.clone()),
                );
            }
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
        profile: &Framework,
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
        let (candidates, mut statuses) =
            self.find_candidates(profile, state, pod, &potential, &budgets);
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
    extension_points!(post_filter);
}

#[async_trait]
impl PostFilterPlugin for DefaultPreemption {
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
        profile: &Framework,
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
