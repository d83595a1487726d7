//! Node affinity, inter-pod affinity and topology spread constraints of a
//! pod, pre-parsed once when the pod is.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::selector::{LabelSelector, NodeSelector, NodeSelectorTerm, Operator, Requirement};
use super::{InvalidObject, Labels};

/// `requiredDuringScheduling...` and `preferredDuringScheduling...` node
/// affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAffinity {
    /// Nodes must match one of these terms.
    pub required: Option<NodeSelector>,
    /// Matching nodes score the term's weight (empty terms and zero weights
    /// left out, as upstream).
    pub preferred: Vec<(i32, NodeSelectorTerm)>,
}

/// A pod affinity term: pods matching `selector` in the namespaces it
/// names, within the same `topology_key` domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Which pods.
    pub selector: LabelSelector,
    /// Namespaces listed (the pod's own when neither these nor a selector
    /// are given).
    pub namespaces: Vec<Arc<str>>,
    /// Namespaces selected by labels (`None`: none; an empty selector: all).
    pub namespace_selector: LabelSelector,
    /// The node label defining the domain.
    pub topology_key: Arc<str>,
}

impl AffinityTerm {
    fn parse(
        term: &core::PodAffinityTerm,
        pod_ns: &str,
        pod_labels: &Labels,
        path: &str,
    ) -> Result<Self, InvalidObject> {
        let mut selector = LabelSelector::parse(
            term.label_selector.as_ref(),
            &format!("{path}.labelSelector"),
        )?;
        // matchLabelKeys / mismatchLabelKeys: the API server merges them into
        // the selector at creation; doing it again is harmless and covers
        // objects that did not go through it.
        if !selector.is_nothing() {
            for (keys, op) in [
                (&term.match_label_keys, Operator::In),
                (&term.mismatch_label_keys, Operator::NotIn),
            ] {
                for key in keys.iter().flatten() {
                    if let Some(v) = pod_labels.get(key) {
                        selector.add(Requirement {
                            key: Arc::from(key.as_str()),
                            op,
                            values: vec![Arc::from(v)],
                            bound: 0,
                        });
                    }
                }
            }
        }
        let ns_given = term.namespaces.as_ref().is_some_and(|n| !n.is_empty());
        let namespaces = if !ns_given && term.namespace_selector.is_none() {
            vec![Arc::from(pod_ns)]
        } else {
            term.namespaces
                .iter()
                .flatten()
                .map(|n| Arc::from(n.as_str()))
                .collect()
        };
        Ok(Self {
            selector,
            namespaces,
            namespace_selector: LabelSelector::parse(
                term.namespace_selector.as_ref(),
                &format!("{path}.namespaceSelector"),
            )?,
            topology_key: Arc::from(term.topology_key.as_str()),
        })
    }

    /// Whether this term's namespaces include `namespace` (whose labels are
    /// `ns_labels`).
    pub fn matches_namespace(&self, namespace: &str, ns_labels: &Labels) -> bool {
        self.namespaces.iter().any(|n| **n == *namespace)
            || self.namespace_selector.matches(ns_labels)
    }

    /// Whether `labels` of a pod in `namespace` match this term.
    pub fn matches(&self, namespace: &str, labels: &Labels, ns_labels: &Labels) -> bool {
        self.matches_namespace(namespace, ns_labels) && self.selector.matches(labels)
    }
}

/// An affinity term with its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedAffinityTerm {
    /// 1 to 100.
    pub weight: i32,
    /// The term.
    pub term: AffinityTerm,
}

/// Pod affinity or anti-affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinityTerms {
    /// Terms that must hold.
    pub required: Vec<AffinityTerm>,
    /// Terms that add (affinity) or subtract (anti-affinity) their weight.
    pub preferred: Vec<WeightedAffinityTerm>,
}

impl PodAffinityTerms {
    /// Whether there is any term.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

/// What a spread constraint does when it cannot be met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnsatisfiable {
    /// Filter: nodes that would break the skew are infeasible.
    DoNotSchedule,
    /// Score: nodes that break it less score higher.
    ScheduleAnyway,
}

/// Whether a spread constraint counts nodes the pod could not run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InclusionPolicy {
    /// Only nodes matching (affinity / tolerating taints) count.
    Honor,
    /// Every node counts.
    Ignore,
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadConstraint {
    /// The largest allowed difference in matching pods between domains.
    pub max_skew: i32,
    /// The node label defining domains.
    pub topology_key: Arc<str>,
    /// Filter or Score.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods count (with `matchLabelKeys` merged in).
    pub selector: LabelSelector,
    /// The fewest eligible domains assumed (1 when unset).
    pub min_domains: i32,
    /// Whether nodes outside the pod's node affinity count.
    pub node_affinity_policy: InclusionPolicy,
    /// Whether nodes with taints the pod does not tolerate count.
    pub node_taints_policy: InclusionPolicy,
}

impl SpreadConstraint {
    /// Parses one constraint of `pod`.
    pub fn parse(
        c: &core::TopologySpreadConstraint,
        pod_labels: &Labels,
        path: &str,
    ) -> Result<Self, InvalidObject> {
        if c.max_skew <= 0 {
            return Err(InvalidObject::new(
                format!("{path}.maxSkew"),
                format!("Invalid value: {}: must be greater than zero", c.max_skew),
            ));
        }
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(InvalidObject::new(
                    format!("{path}.whenUnsatisfiable"),
                    format!(
                        "Unsupported value: {other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                    ),
                ));
            }
        };
        let policy =
            |v: &Option<String>, default, field: &str| -> Result<InclusionPolicy, InvalidObject> {
                match v.as_deref() {
                    None | Some("") => Ok(default),
                    Some("Honor") => Ok(InclusionPolicy::Honor),
                    Some("Ignore") => Ok(InclusionPolicy::Ignore),
                    Some(other) => Err(InvalidObject::new(
                        format!("{path}.{field}"),
                        format!(
                            "Unsupported value: {other:?}: supported values: \"Honor\", \"Ignore\""
                        ),
                    )),
                }
            };
        let min_domains = match c.min_domains {
            None => 1,
            Some(n) if n > 0 => {
                if when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule {
                    return Err(InvalidObject::new(
                        format!("{path}.minDomains"),
                        format!(
                            "Invalid value: {n}: can only use minDomains if whenUnsatisfiable=DoNotSchedule"
                        ),
                    ));
                }
                n
            }
            Some(n) => {
                return Err(InvalidObject::new(
                    format!("{path}.minDomains"),
                    format!("Invalid value: {n}: must be greater than 0"),
                ));
            }
        };
        let mut selector =
            LabelSelector::parse(c.label_selector.as_ref(), &format!("{path}.labelSelector"))?;
        if !selector.is_nothing() {
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = pod_labels.get(key) {
                    selector.add(Requirement {
                        key: Arc::from(key.as_str()),
                        op: Operator::In,
                        values: vec![Arc::from(v)],
                        bound: 0,
                    });
                }
            }
        }
        Ok(Self {
            max_skew: c.max_skew,
            topology_key: Arc::from(c.topology_key.as_str()),
            when_unsatisfiable,
            selector,
            min_domains,
            node_affinity_policy: policy(
                &c.node_affinity_policy,
                InclusionPolicy::Honor,
                "nodeAffinityPolicy",
            )?,
            node_taints_policy: policy(
                &c.node_taints_policy,
                InclusionPolicy::Ignore,
                "nodeTaintsPolicy",
            )?,
        })
    }
}

/// A pod (anti-)affinity's required and preferred terms, as the API has them.
type RawTerms<'a> = (
    &'a Option<Vec<core::PodAffinityTerm>>,
    &'a Option<Vec<core::WeightedPodAffinityTerm>>,
);

/// Everything about placement a pod's spec asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// `spec.nodeSelector`.
    pub node_selector: Vec<(Arc<str>, Arc<str>)>,
    /// `spec.affinity.nodeAffinity`.
    pub node_affinity: NodeAffinity,
    /// `spec.affinity.podAffinity`.
    pub pod_affinity: PodAffinityTerms,
    /// `spec.affinity.podAntiAffinity`.
    pub pod_anti_affinity: PodAffinityTerms,
    /// `spec.topologySpreadConstraints`.
    pub spread: Vec<SpreadConstraint>,
}

impl Placement {
    /// Parses a pod spec's placement fields.
    pub fn parse(
        spec: &core::PodSpec,
        namespace: &str,
        labels: &Labels,
    ) -> Result<Self, InvalidObject> {
        let node_selector = spec
            .node_selector
            .iter()
            .flatten()
            .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
            .collect();
        let aff = spec.affinity.as_ref();
        let mut node_affinity = NodeAffinity::default();
        if let Some(na) = aff.and_then(|a| a.node_affinity.as_ref()) {
            let base = "spec.affinity.nodeAffinity";
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                node_affinity.required = Some(NodeSelector::parse(
                    req,
                    &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution"),
                )?);
            }
            for (i, p) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                if !(0..=100).contains(&p.weight) {
                    return Err(InvalidObject::new(
                        format!("{path}.weight"),
                        format!("Invalid value: {}: must be in the range 1-100", p.weight),
                    ));
                }
                let term = NodeSelectorTerm::parse(&p.preference, &format!("{path}.preference"))?;
                if p.weight != 0 && !(term.expressions.is_empty() && term.fields.is_empty()) {
                    node_affinity.preferred.push((p.weight, term));
                }
            }
        }
        let terms = |pa: Option<RawTerms<'_>>,
                     base: &str|
         -> Result<PodAffinityTerms, InvalidObject> {
            let mut out = PodAffinityTerms::default();
            let Some((req, pref)) = pa else {
                return Ok(out);
            };
            for (i, t) in req.iter().flatten().enumerate() {
                out.required.push(AffinityTerm::parse(
                    t,
                    namespace,
                    labels,
                    &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                )?);
            }
            for (i, w) in pref.iter().flatten().enumerate() {
                let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                if !(1..=100).contains(&w.weight) {
                    return Err(InvalidObject::new(
                        format!("{path}.weight"),
                        format!("Invalid value: {}: must be in the range 1-100", w.weight),
                    ));
                }
                out.preferred.push(WeightedAffinityTerm {
                    weight: w.weight,
                    term: AffinityTerm::parse(
                        &w.pod_affinity_term,
                        namespace,
                        labels,
                        &format!("{path}.podAffinityTerm"),
                    )?,
                });
            }
            Ok(out)
        };
        let pod_affinity = terms(
            aff.and_then(|a| a.pod_affinity.as_ref()).map(|p| {
                (
                    &p.required_during_scheduling_ignored_during_execution,
                    &p.preferred_during_scheduling_ignored_during_execution,
                )
            }),
            "spec.affinity.podAffinity",
        )?;
        let pod_anti_affinity = terms(
            aff.and_then(|a| a.pod_anti_affinity.as_ref()).map(|p| {
                (
                    &p.required_during_scheduling_ignored_during_execution,
                    &p.preferred_during_scheduling_ignored_during_execution,
                )
            }),
            "spec.affinity.podAntiAffinity",
        )?;
        let spread = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| {
                SpreadConstraint::parse(c, labels, &format!("spec.topologySpreadConstraints[{i}]"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            node_selector,
            node_affinity,
            pod_affinity,
            pod_anti_affinity,
            spread,
        })
    }

    /// Whether the pod has any pod affinity or anti-affinity term.
    pub fn has_pod_affinity(&self) -> bool {
        !self.pod_affinity.is_empty() || !self.pod_anti_affinity.is_empty()
    }

    /// Whether the pod has required anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        !self.pod_anti_affinity.required.is_empty()
    }

    /// Whether `spec.nodeSelector` and required node affinity both admit
    /// the node (`labels`, `name`).
    pub fn node_matches(&self, labels: &Labels, name: &str) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(&**v))
            && self
                .node_affinity
                .required
                .as_ref()
                .is_none_or(|s| s.matches(labels, name))
    }
}
