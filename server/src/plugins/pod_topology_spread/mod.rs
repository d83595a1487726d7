//! PodTopologySpread: spreads matching pods evenly over topology domains.
//!
//! A pod's `topologySpreadConstraints` (or, when it has none, the plugin's
//! default constraints) say, per node label (`topologyKey`), how unevenly
//! pods matching a selector may be spread over the label's values (the
//! domains). `DoNotSchedule` constraints filter: a node is infeasible if
//! placing the pod there would make its domain exceed the global minimum by
//! more than `maxSkew`. `ScheduleAnyway` constraints score: nodes in domains
//! with fewer matching pods score higher.
//!
//! * `args`: `PodTopologySpreadArgs` (default constraints, `System` or
//!   `List` defaulting) and their validation;
//! * `filtering`: PreFilter (per-domain counts and the two smallest domains
//!   per constraint), AddPod/RemovePod, Filter;
//! * `scoring`: PreScore, Score, NormalizeScore.

mod args;
mod domains;
mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use args::*;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::cache::ObjectStore;
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, Handle, Plugin,
    QueueingHint,
};
use crate::model::node::LABEL_ZONE;
use crate::model::{
    InclusionPolicy, LabelSelector, NodeSpec, PodInfo, PodRef, SpreadConstraint, TaintEffect,
    WhenUnsatisfiable, taint,
};
use crate::plugins::helper::NodeMemo;
use crate::plugins::names::POD_TOPOLOGY_SPREAD;

/// The reason a node that would break a `DoNotSchedule` constraint is
/// rejected.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// The reason a node without one of the constraints' topology keys is
/// rejected.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// `kubernetes.io/hostname`: domains of one node, counted at Score.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// A default constraint, parsed: a spread constraint without its selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DefaultSpec {
    max_skew: i32,
    topology_key: Arc<str>,
    when_unsatisfiable: WhenUnsatisfiable,
    min_domains: i32,
    node_affinity_policy: InclusionPolicy,
    node_taints_policy: InclusionPolicy,
}

impl DefaultSpec {
    /// Upstream's system defaults: hostname then zone, both `ScheduleAnyway`.
    fn system() -> Vec<Self> {
        [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]
            .into_iter()
            .map(|(key, max_skew)| Self {
                max_skew,
                topology_key: Arc::from(key),
                when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                min_domains: 1,
                node_affinity_policy: InclusionPolicy::Honor,
                node_taints_policy: InclusionPolicy::Ignore,
            })
            .collect()
    }

    /// From validated args. A policy other than `Honor` or `Ignore` is not
    /// rejected by upstream's args validation; it behaves as `Ignore` there
    /// (only `Honor` is tested for), and here.
    fn from_args(c: &DefaultConstraint) -> Self {
        let policy = |v: &Option<String>, default| match v.as_deref() {
            None => default,
            Some("Honor") => InclusionPolicy::Honor,
            Some(_) => InclusionPolicy::Ignore,
        };
        Self {
            max_skew: c.max_skew,
            topology_key: Arc::from(c.topology_key.as_str()),
            when_unsatisfiable: if c.when_unsatisfiable == DO_NOT_SCHEDULE {
                WhenUnsatisfiable::DoNotSchedule
            } else {
                WhenUnsatisfiable::ScheduleAnyway
            },
            min_domains: c.min_domains.unwrap_or(1),
            node_affinity_policy: policy(&c.node_affinity_policy, InclusionPolicy::Honor),
            node_taints_policy: policy(&c.node_taints_policy, InclusionPolicy::Ignore),
        }
    }
}

/// Where a pod's constraints come from: its own, or the defaults with a
/// selector deduced from the objects selecting the pod. Shared with the
/// queueing hints.
#[derive(Debug)]
struct ConstraintSource {
    defaults: Vec<DefaultSpec>,
    system_defaulted: bool,
    objects: Arc<ObjectStore>,
}

impl ConstraintSource {
    /// The pod's constraints of kind `action`: its own if it has any (of
    /// either kind), else the default constraints of that kind with the
    /// deduced selector (none if the deduced selector is empty).
    fn constraints(&self, pod: &PodInfo, action: WhenUnsatisfiable) -> Vec<SpreadConstraint> {
        if !pod.placement.spread.is_empty() {
            return pod
                .placement
                .spread
                .iter()
                .filter(|c| c.when_unsatisfiable == action)
                .cloned()
                .collect();
        }
        if !self.defaults.iter().any(|d| d.when_unsatisfiable == action) {
            return Vec::new();
        }
        let selector = default_selector(&self.objects, pod);
        if selector.is_everything() {
            return Vec::new();
        }
        self.defaults
            .iter()
            .filter(|d| d.when_unsatisfiable == action)
            .map(|d| SpreadConstraint {
                max_skew: d.max_skew,
                topology_key: d.topology_key.clone(),
                when_unsatisfiable: d.when_unsatisfiable,
                selector: selector.clone(),
                min_domains: d.min_domains,
                node_affinity_policy: d.node_affinity_policy,
                node_taints_policy: d.node_taints_policy,
            })
            .collect()
    }
}

/// The selector upstream deduces for a pod without constraints: the union of
/// the selectors of the Services in its namespace that select it, plus the
/// selector of its controller if that is a ReplicationController,
/// ReplicaSet or StatefulSet. Matches everything (is empty) when nothing
/// selects the pod.
fn default_selector(objects: &ObjectStore, pod: &PodInfo) -> LabelSelector {
    let ns = &*pod.namespace;
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    for svc in objects.services(ns) {
        // A Service without a selector selects nothing, not everything.
        let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        if sel
            .iter()
            .all(|(k, v)| pod.labels.get(k) == Some(v.as_str()))
        {
            set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut selector = LabelSelector::from_map(&set);
    let owner = pod
        .pod
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true));
    let Some(owner) = owner else {
        return selector;
    };
    let workload_selector = match (owner.api_version.as_str(), owner.kind.as_str()) {
        ("v1", "ReplicationController") => {
            if let Some(rc_sel) = objects
                .replication_controller(ns, &owner.name)
                .and_then(|rc| rc.spec.as_ref().and_then(|s| s.selector.clone()))
            {
                set.extend(rc_sel);
                selector = LabelSelector::from_map(&set);
            }
            return selector;
        }
        ("apps/v1", "ReplicaSet") => objects
            .replica_set(ns, &owner.name)
            .map(|rs| rs.spec.selector.clone()),
        ("apps/v1", "StatefulSet") => objects
            .stateful_set(ns, &owner.name)
            .map(|ss| ss.spec.selector.clone()),
        _ => None,
    };
    if let Some(parsed) = workload_selector
        .as_ref()
        .and_then(|s| LabelSelector::parse(Some(s), "spec.selector").ok())
    {
        for r in parsed.requirements() {
            selector.add(r.clone());
        }
    }
    selector
}

/// Whether `node` has every constraint's topology key.
fn has_all_keys(node: &NodeSpec, constraints: &[SpreadConstraint]) -> bool {
    constraints
        .iter()
        .all(|c| node.labels.contains_key(&c.topology_key))
}

/// Whether `node` counts for constraint `c` of `pod` under its node
/// inclusion policies: with `Honor`, the node must match the pod's node
/// selector and required node affinity, and must carry no NoSchedule or
/// NoExecute taint the pod does not tolerate.
fn node_included(c: &SpreadConstraint, pod: &PodInfo, node: &NodeSpec) -> bool {
    if c.node_affinity_policy == InclusionPolicy::Honor
        && !pod.placement.node_matches(&node.labels, &node.name)
    {
        return false;
    }
    if c.node_taints_policy == InclusionPolicy::Honor
        && node.taints.iter().any(|t| {
            matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
                && !taint::tolerates(&pod.tolerations, t)
        })
    {
        return false;
    }
    true
}

/// The pods among `pods` that count for `selector`: in namespace `ns`, not
/// terminating, matching. An empty selector counts none (as upstream).
fn count_matching(pods: &[PodRef], selector: &LabelSelector, ns: &str) -> i64 {
    if selector.is_everything() {
        return 0;
    }
    pods.iter()
        .filter(|p| !p.terminating && *p.namespace == *ns && selector.matches(&p.labels))
        .count() as i64
}

/// The PodTopologySpread plugin.
#[derive(Debug)]
pub struct PodTopologySpread {
    source: Arc<ConstraintSource>,
    handle: Handle,
    /// Matching pods per domain, per question, kept across cycles.
    counts: NodeMemo<domains::SpreadKey, domains::DomainTotals>,
}

impl PodTopologySpread {
    /// Builds the plugin from its (validated, defaulted) args.
    pub fn new(args: PodTopologySpreadArgs, handle: &Handle) -> Result<Self, String> {
        let system_defaulted = args.system_defaulted();
        let defaults = if system_defaulted {
            DefaultSpec::system()
        } else {
            args.default_constraints
                .iter()
                .map(DefaultSpec::from_args)
                .collect()
        };
        Ok(Self {
            source: Arc::new(ConstraintSource {
                defaults,
                system_defaulted,
                objects: handle.objects().clone(),
            }),
            handle: handle.clone(),
            counts: NodeMemo::default(),
        })
    }
}

/// Whether `incoming` takes part in the spreading of `pod`: it is the pod
/// itself, or a pod bound to a node in the same namespace.
fn involved(incoming: &PodInfo, pod: &PodInfo) -> bool {
    incoming.uid == pod.uid || (incoming.node_name.is_some() && incoming.namespace == pod.namespace)
}

fn tolerations_changed(old: &PodInfo, new: &PodInfo) -> bool {
    // As the API's semantic equality: an absent list equals an empty one.
    fn raw(p: &PodInfo) -> &[Toleration] {
        p.pod.tolerations()
    }
    raw(old) != raw(new)
}

fn taints_changed(old: &NodeSpec, new: &NodeSpec) -> bool {
    fn raw(n: &NodeSpec) -> &[Taint] {
        n.node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }
    raw(old) != raw(new)
}

/// The pod an event carries, if any; an error if it carries something else.
fn event_pod(o: Option<&EventObject>) -> Result<Option<&PodInfo>, String> {
    match o {
        None => Ok(None),
        Some(o) => o
            .as_pod()
            .map(Some)
            .ok_or_else(|| format!("expected a pod, got {o:?}")),
    }
}

/// The node an event carries, if any; an error if it carries something else.
fn event_node(o: Option<&EventObject>) -> Result<Option<&NodeSpec>, String> {
    match o {
        None => Ok(None),
        Some(o) => o
            .as_node()
            .map(Some)
            .ok_or_else(|| format!("expected a node, got {o:?}")),
    }
}

/// Whether a pod change may make `pod`, rejected by this plugin,
/// schedulable.
fn pod_change_hint(
    source: &ConstraintSource,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let (old, new) = (event_pod(old)?, event_pod(new)?);
    if new.is_some_and(|p| !involved(p, pod)) || old.is_some_and(|p| !involved(p, pod)) {
        return Ok(QueueingHint::Skip);
    }
    let constraints = source.constraints(pod, WhenUnsatisfiable::DoNotSchedule);
    let any_matches = |p: &PodInfo| constraints.iter().any(|c| c.selector.matches(&p.labels));
    let queue = |b: bool| {
        if b {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        }
    };
    Ok(match (old, new) {
        (Some(old), Some(new)) => {
            if pod.uid == new.uid
                && tolerations_changed(old, new)
                && constraints
                    .iter()
                    .any(|c| c.node_taints_policy == InclusionPolicy::Honor)
            {
                return Ok(QueueingHint::Queue);
            }
            if old.labels == new.labels {
                return Ok(QueueingHint::Skip);
            }
            queue(
                constraints
                    .iter()
                    .any(|c| c.selector.matches(&old.labels) != c.selector.matches(&new.labels)),
            )
        }
        (None, Some(added)) => queue(any_matches(added)),
        (Some(deleted), None) => queue(any_matches(deleted)),
        (None, None) => return Err("a pod event without a pod".into()),
    })
}

/// Whether a node change may make `pod`, rejected by this plugin,
/// schedulable.
fn node_change_hint(
    source: &ConstraintSource,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let (old, new) = (event_node(old)?, event_node(new)?);
    let constraints = source.constraints(pod, WhenUnsatisfiable::DoNotSchedule);
    let old_matching = old.is_some_and(|n| has_all_keys(n, &constraints));
    let new_matching = new.is_some_and(|n| has_all_keys(n, &constraints));
    let queue = |b: bool| {
        if b {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        }
    };
    Ok(match (old, new) {
        (Some(old), Some(new)) => {
            if old_matching != new_matching {
                return Ok(QueueingHint::Queue);
            }
            let keys_changed = constraints.iter().any(|c| {
                old.labels.get(&c.topology_key).unwrap_or("")
                    != new.labels.get(&c.topology_key).unwrap_or("")
            });
            queue(new_matching && (keys_changed || taints_changed(old, new)))
        }
        (None, Some(_)) => queue(new_matching),
        (Some(_), None) => queue(old_matching),
        (None, None) => return Err("a node event without a node".into()),
    })
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        POD_TOPOLOGY_SPREAD
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let pods = self.source.clone();
        let nodes = self.source.clone();
        Some(vec![
            // A matching pod was bound or went away, a bound pod's labels
            // changed, or the pod itself got a toleration (NodeTaintsPolicy
            // Honor counts nodes by the pod's tolerations).
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD
                        | ActionType::UPDATE_POD_LABEL
                        | ActionType::UPDATE_POD_TOLERATION
                        | ActionType::DELETE,
                ),
                move |pod, old, new| pod_change_hint(&pods, pod, old, new),
            ),
            // Nodes change the domains: they appear, go, are relabelled or
            // retainted.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD
                        | ActionType::DELETE
                        | ActionType::UPDATE_NODE_LABEL
                        | ActionType::UPDATE_NODE_TAINT,
                ),
                move |pod, old, new| node_change_hint(&nodes, pod, old, new),
            ),
        ])
    }

    extension_points!(pre_filter, filter, pre_score, score);
}
