//! [`PodGroupInfo`]: a `scheduling.k8s.io/v1beta1` PodGroup as the
//! scheduler reads it (KEP-4671, beta in v1.37 behind `GenericWorkload`).
//!
//! A pod joins a group through `spec.schedulingGroup.podGroupName` (the
//! group lives in the pod's namespace and need not exist yet when the pod
//! is created). The group says how its pods are scheduled:
//!
//! * `schedulingPolicy.gang.minCount`: at least that many of its pods must
//!   be scheduled (assumed or bound) at the same time, or none is;
//! * `schedulingPolicy.basic`: pods are scheduled as they fit, one group
//!   cycle at a time;
//! * `priority` (the pods must carry the same), `preemptionPolicy` (alpha,
//!   gate `PodGroupPreemptionPolicy`) and `disruptionMode` (`single`, the
//!   default, or `all`: its pods are preempted together or not at all).
//!
//! The Workload object (the template controllers make PodGroups from) is
//! not read by the scheduler; the stores keep it as any other object.

use std::sync::Arc;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::InvalidObject;

/// The condition kube-scheduler sets on a PodGroup after its first cycle.
pub const CONDITION_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";
/// Its reason once the group was scheduled (a bare literal upstream).
pub const REASON_SCHEDULED: &str = "Scheduled";
/// Its reason when the group did not fit.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// Its reason when the group's cycle failed with an error.
pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";
/// The finalizer the API server adds to every PodGroup (KEP-5832).
pub const FINALIZER_PROTECTION: &str = "scheduling.k8s.io/podgroup-protection";

/// Why a member whose PodGroup the scheduler has not seen waits, in
/// GangScheduling's PreEnqueue words (sic: upstream's "pods's"). Every
/// answer about such a pod says this: the queue, dry runs, simulations.
pub fn waiting_for_pod_group(name: &str) -> String {
    format!("waiting for pods's pod group {name:?} to appear in scheduling queue")
}

/// Why a member of a gang with fewer than `minCount` pods known waits, in
/// GangScheduling's PreEnqueue words.
pub const WAITING_FOR_MIN_COUNT_PODS: &str =
    "waiting for minCount pods from a gang to appear in scheduling queue";

/// How the group's pods are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Each pod as it fits (`schedulingPolicy.basic`).
    Basic,
    /// All or nothing (`schedulingPolicy.gang`).
    Gang {
        /// How many pods must be scheduled together (at least 1).
        min_count: u32,
    },
}

impl GroupPolicy {
    /// `minCount` for a gang; for a basic group, 1 (as PlacementFeasible
    /// reads it).
    pub fn min_count(&self) -> u32 {
        match self {
            Self::Basic => 1,
            Self::Gang { min_count } => *min_count,
        }
    }

    /// Whether this is a gang.
    pub fn is_gang(&self) -> bool {
        matches!(self, Self::Gang { .. })
    }
}

/// A pod's or a group's `preemptionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionPolicy {
    /// `PreemptLowerPriority` (the default).
    PreemptLowerPriority,
    /// `Never`.
    Never,
}

impl PreemptionPolicy {
    /// The API's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::PreemptLowerPriority => "PreemptLowerPriority",
            Self::Never => "Never",
        }
    }

    /// A pod's policy: `preemption_never` as [`super::PodInfo`] reads it.
    pub fn of_pod(preemption_never: bool) -> Self {
        if preemption_never {
            Self::Never
        } else {
            Self::PreemptLowerPriority
        }
    }
}

/// The `PodGroupInitiallyScheduled` condition as the object carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCondition {
    /// `True` or `False`.
    pub status: Arc<str>,
    /// Its reason.
    pub reason: Arc<str>,
    /// Its message.
    pub message: Arc<str>,
    /// Its observedGeneration (0 when unset).
    pub observed_generation: i64,
}

/// `namespace/name` of a group: how pods name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The namespace (the pods').
    pub namespace: Arc<str>,
    /// The PodGroup's name.
    pub name: Arc<str>,
}

impl GroupKey {
    /// The key of the group named `name` in `namespace`.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A PodGroup, pre-parsed. Built once per add or update of the object.
#[derive(Debug, Clone)]
pub struct PodGroupInfo {
    /// The Kubernetes object, kept for the edges (status writes, the API).
    pub object: Arc<PodGroup>,
    /// namespace/name.
    pub key: GroupKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.generation (the condition's observedGeneration; 0 unset).
    pub generation: i64,
    /// spec.schedulingPolicy.
    pub policy: GroupPolicy,
    /// spec.priority (0 when unset).
    pub priority: i32,
    /// spec.preemptionPolicy (`PreemptLowerPriority` when unset).
    pub preemption_policy: PreemptionPolicy,
    /// spec.disruptionMode is `all`: the group's pods are preempted as one.
    pub disrupt_all: bool,
    /// spec.schedulingConstraints.topology keys (TopologyAwareWorkloadScheduling).
    pub topology_keys: Vec<Arc<str>>,
    /// spec.parentCompositePodGroupName (CompositePodGroup).
    pub parent: Option<Arc<str>>,
    /// status.conditions' `PodGroupInitiallyScheduled`, if set.
    pub initially_scheduled: Option<GroupCondition>,
    /// metadata.deletionTimestamp is set.
    pub terminating: bool,
}

impl PodGroupInfo {
    /// Builds the view, rejecting what the API server would not have
    /// accepted and the scheduler cannot use.
    pub fn new(object: Arc<PodGroup>) -> Result<Self, InvalidObject> {
        validate_pod_group(&object)?;
        let meta = &object.metadata;
        let spec = &object.spec;
        let policy = match &spec.scheduling_policy.gang {
            Some(g) => GroupPolicy::Gang {
                min_count: u32::try_from(g.min_count).unwrap_or(1),
            },
            None => GroupPolicy::Basic,
        };
        let initially_scheduled = object
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| initially_scheduled(c))
            .map(|c| GroupCondition {
                status: Arc::from(c.status.as_str()),
                reason: Arc::from(c.reason.as_str()),
                message: Arc::from(c.message.as_str()),
                observed_generation: c.observed_generation.unwrap_or(0),
            });
        Ok(Self {
            key: GroupKey::new(
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or(""),
            ),
            uid: Arc::from(meta.uid.as_deref().unwrap_or("")),
            generation: meta.generation.unwrap_or(0),
            policy,
            priority: spec.priority.unwrap_or(0),
            preemption_policy: match spec.preemption_policy.as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            },
            disrupt_all: spec
                .disruption_mode
                .as_ref()
                .is_some_and(|d| d.all.is_some()),
            topology_keys: spec
                .scheduling_constraints
                .iter()
                .flat_map(|c| c.topology.iter().flatten())
                .map(|t| Arc::from(t.key.as_str()))
                .collect(),
            parent: spec
                .parent_composite_pod_group_name
                .as_deref()
                .map(Arc::from),
            initially_scheduled,
            terminating: meta.deletion_timestamp.is_some(),
            object,
        })
    }

    /// Whether the group was scheduled once (its condition is `True`):
    /// the condition never goes back to `False` after that.
    pub fn was_initially_scheduled(&self) -> bool {
        self.initially_scheduled
            .as_ref()
            .is_some_and(|c| &*c.status == "True")
    }
}

/// The `PodGroupInitiallyScheduled` condition among `conditions`.
pub fn initially_scheduled(conditions: &[Condition]) -> Option<&Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == CONDITION_INITIALLY_SCHEDULED)
}

/// The most resource claims a PodGroup may list (`MaxPodGroupResourceClaims`).
pub const MAX_POD_GROUP_RESOURCE_CLAIMS: usize = 4;

/// Checks a PodGroup's spec as the v1.37 API server's declarative
/// validation does for what the scheduler relies on, naming the field.
pub fn validate_pod_group(pg: &PodGroup) -> Result<(), InvalidObject> {
    let spec = &pg.spec;
    let policy = &spec.scheduling_policy;
    match (&policy.basic, &policy.gang) {
        (None, None) => {
            return Err(InvalidObject::new(
                "spec.schedulingPolicy",
                "Invalid value: must specify one of: `basic`, `gang`",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(InvalidObject::new(
                "spec.schedulingPolicy",
                "Invalid value: must specify exactly one of: `basic`, `gang`",
            ));
        }
        (None, Some(g)) if g.min_count < 1 => {
            return Err(InvalidObject::new(
                "spec.schedulingPolicy.gang.minCount",
                format!(
                    "Invalid value: {}: must be greater than or equal to 1",
                    g.min_count
                ),
            ));
        }
        _ => {}
    }
    if let Some(d) = &spec.disruption_mode {
        match (&d.single, &d.all) {
            (None, None) => {
                return Err(InvalidObject::new(
                    "spec.disruptionMode",
                    "Invalid value: must specify one of: `all`, `single`",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(InvalidObject::new(
                    "spec.disruptionMode",
                    "Invalid value: must specify exactly one of: `all`, `single`",
                ));
            }
            _ => {}
        }
    }
    if let Some(p) = spec.priority
        && p > 1_000_000_000
    {
        return Err(InvalidObject::new(
            "spec.priority",
            format!("Invalid value: {p}: must be less than or equal to 1000000000"),
        ));
    }
    if let Some(p) = spec.preemption_policy.as_deref()
        && p != "Never"
        && p != "PreemptLowerPriority"
    {
        return Err(InvalidObject::new(
            "spec.preemptionPolicy",
            format!(
                "Unsupported value: \"{p}\": supported values: \"Never\", \"PreemptLowerPriority\""
            ),
        ));
    }
    if let Some(c) = &spec.scheduling_constraints {
        let n = c.topology.as_ref().map_or(0, Vec::len);
        if n > 1 {
            return Err(InvalidObject::new(
                "spec.schedulingConstraints.topology",
                format!("Too many: {n}: must have at most 1 item"),
            ));
        }
    }
    if let Some(claims) = &spec.resource_claims {
        if claims.len() > MAX_POD_GROUP_RESOURCE_CLAIMS {
            return Err(InvalidObject::new(
                "spec.resourceClaims",
                format!(
                    "Too many: {}: must have at most {MAX_POD_GROUP_RESOURCE_CLAIMS} items",
                    claims.len()
                ),
            ));
        }
        for (i, c) in claims.iter().enumerate() {
            if c.resource_claim_name.is_some() == c.resource_claim_template_name.is_some() {
                return Err(InvalidObject::new(
                    format!("spec.resourceClaims[{i}]"),
                    "Invalid value: must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
                ));
            }
        }
    }
    Ok(())
}

/// Defaults and validates a PodGroup as the API server does on create:
/// `disruptionMode` defaults to `single`, the status starts empty.
pub fn admit_pod_group(pg: &mut PodGroup) -> Result<(), InvalidObject> {
    use k8s_openapi::api::scheduling::v1beta1::{DisruptionMode, SingleDisruptionMode};
    if pg.spec.disruption_mode.is_none() {
        pg.spec.disruption_mode = Some(DisruptionMode {
            single: Some(SingleDisruptionMode(serde_json::json!({}))),
            all: None,
        });
    }
    validate_pod_group(pg)
}

/// Checks an update of a PodGroup's spec: every field but
/// `schedulingPolicy.gang.minCount` is immutable in v1.37 (a gang stays a
/// gang, a basic group stays basic).
pub fn validate_pod_group_update(old: &PodGroup, new: &PodGroup) -> Result<(), InvalidObject> {
    let (o, n) = (&old.spec, &new.spec);
    let immutable = |path: &str| InvalidObject::new(path, "Invalid value: field is immutable");
    if o.scheduling_policy.basic.is_some() != n.scheduling_policy.basic.is_some()
        || o.scheduling_policy.gang.is_some() != n.scheduling_policy.gang.is_some()
    {
        return Err(immutable("spec.schedulingPolicy"));
    }
    let json = |v: &dyn erased::Json| v.to_json();
    let fields: [(&str, serde_json::Value, serde_json::Value); 8] = [
        (
            "spec.workloadRef",
            json(&o.workload_ref),
            json(&n.workload_ref),
        ),
        (
            "spec.disruptionMode",
            json(&o.disruption_mode),
            json(&n.disruption_mode),
        ),
        ("spec.priority", json(&o.priority), json(&n.priority)),
        (
            "spec.priorityClassName",
            json(&o.priority_class_name),
            json(&n.priority_class_name),
        ),
        (
            "spec.preemptionPolicy",
            json(&o.preemption_policy),
            json(&n.preemption_policy),
        ),
        (
            "spec.schedulingConstraints",
            json(&o.scheduling_constraints),
            json(&n.scheduling_constraints),
        ),
        (
            "spec.resourceClaims",
            json(&o.resource_claims),
            json(&n.resource_claims),
        ),
        (
            "spec.parentCompositePodGroupName",
            json(&o.parent_composite_pod_group_name),
            json(&n.parent_composite_pod_group_name),
        ),
    ];
    for (path, a, b) in fields {
        // `disruptionMode` is defaulted on create: an update that leaves it
        // out keeps it.
        if path == "spec.disruptionMode" && b.is_null() {
            continue;
        }
        if a != b {
            return Err(immutable(path));
        }
    }
    validate_pod_group(new)
}

mod erased {
    /// Any serializable field, compared as JSON (cold path: updates only).
    pub trait Json {
        fn to_json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or_default()
        }
    }
}

/// The `PodGroupInitiallyScheduled` condition kube-scheduler would write
/// on `group` after a cycle (`updatePodGroupCondition`), or `None` when it
/// writes nothing: the condition is `True` already and the new one is not
/// (it never goes back), or nothing would change. As
/// `meta.SetStatusCondition`, the transition time is kept while the status
/// stays; `observedGeneration` is the object's generation.
pub fn next_condition(
    group: &PodGroup,
    status: bool,
    reason: &str,
    message: &str,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Option<Condition> {
    let old = group
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(initially_scheduled);
    let status = if status { "True" } else { "False" };
    if old.is_some_and(|c| c.status == "True") && status != "True" {
        return None;
    }
    let generation = group.metadata.generation.filter(|g| *g != 0);
    let new = Condition {
        type_: CONDITION_INITIALLY_SCHEDULED.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: match old {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => now,
        },
    };
    if old.is_some_and(|c| {
        c.status == new.status
            && c.reason == new.reason
            && c.message == new.message
            && c.observed_generation.filter(|g| *g != 0) == new.observed_generation
    }) {
        return None;
    }
    Some(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pg(spec: serde_json::Value) -> Result<PodGroupInfo, InvalidObject> {
        let obj: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "generation": 3},
            "spec": spec,
        }))
        .unwrap();
        PodGroupInfo::new(Arc::new(obj))
    }

    #[test]
    fn reads_every_field_the_scheduler_uses() {
        let g = pg(json!({
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "priority": 100, "preemptionPolicy": "Never",
            "disruptionMode": {"all": {}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
            "workloadRef": {"workloadName": "job", "templateName": "workers"},
        }))
        .unwrap();
        assert_eq!(g.key.to_string(), "ml/train");
        assert_eq!(g.policy, GroupPolicy::Gang { min_count: 4 });
        assert_eq!(g.priority, 100);
        assert_eq!(g.preemption_policy, PreemptionPolicy::Never);
        assert!(g.disrupt_all);
        assert_eq!(g.generation, 3);
        assert_eq!(&*g.topology_keys[0], "topology.kubernetes.io/zone");
        let b = pg(json!({"schedulingPolicy": {"basic": {}}})).unwrap();
        assert_eq!(b.policy, GroupPolicy::Basic);
        assert_eq!(b.policy.min_count(), 1);
        assert_eq!(b.priority, 0);
        assert!(!b.disrupt_all);
        assert_eq!(b.preemption_policy, PreemptionPolicy::PreemptLowerPriority);
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let cases = [
            (json!({"schedulingPolicy": {}}), "spec.schedulingPolicy"),
            (
                json!({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}}),
                "spec.schedulingPolicy",
            ),
            (
                json!({"schedulingPolicy": {"gang": {"minCount": 0}}}),
                "spec.schedulingPolicy.gang.minCount",
            ),
            (
                json!({"schedulingPolicy": {"basic": {}}, "disruptionMode": {}}),
                "spec.disruptionMode",
            ),
            (
                json!({"schedulingPolicy": {"basic": {}}, "priority": 2000000000}),
                "spec.priority",
            ),
            (
                json!({"schedulingPolicy": {"basic": {}}, "preemptionPolicy": "Sometimes"}),
                "spec.preemptionPolicy",
            ),
            (
                json!({"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "c"}]}),
                "spec.resourceClaims[0]",
            ),
        ];
        for (spec, path) in cases {
            let e = pg(spec.clone()).unwrap_err();
            assert_eq!(e.path, path, "{spec}");
        }
    }

    #[test]
    fn reads_the_initially_scheduled_condition() {
        let obj: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True",
                "reason": "Scheduled", "message": "", "lastTransitionTime": "2026-08-26T10:00:00Z"}]},
        }))
        .unwrap();
        let g = PodGroupInfo::new(Arc::new(obj)).unwrap();
        assert!(g.was_initially_scheduled());
        assert_eq!(&*g.initially_scheduled.unwrap().reason, "Scheduled");
    }

    fn time(s: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        serde_json::from_value(json!(s)).unwrap()
    }

    fn with_condition(cond: Option<(&str, &str, &str)>, generation: Option<i64>) -> PodGroup {
        let mut v = json!({
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        });
        if let Some(g) = generation {
            v["metadata"]["generation"] = json!(g);
        }
        if let Some((status, reason, message)) = cond {
            v["status"] = json!({"conditions": [{"type": CONDITION_INITIALLY_SCHEDULED,
                "status": status, "reason": reason, "message": message,
                "lastTransitionTime": "2026-08-26T10:00:00Z"}]});
        }
        serde_json::from_value(v).unwrap()
    }

    /// Upstream's TestUpdatePodGroupCondition, transposed.
    #[test]
    fn condition_updates_as_upstream_writes_them() {
        let now = time("2026-08-26T11:00:00Z");
        let then = time("2026-08-26T10:00:00Z");
        let t = Some(("True", REASON_SCHEDULED, ""));
        let f = Some(("False", REASON_UNSCHEDULABLE, "no fit"));
        let e = Some(("False", REASON_SCHEDULER_ERROR, "boom"));
        // (name, existing, new status, reason, message, want written, want transition)
        let cases: [(&str, _, bool, &str, &str, bool, Option<&_>); 10] = [
            (
                "True on empty status",
                None,
                true,
                REASON_SCHEDULED,
                "",
                true,
                Some(&now),
            ),
            (
                "False/Unschedulable on empty",
                None,
                false,
                REASON_UNSCHEDULABLE,
                "m",
                true,
                Some(&now),
            ),
            (
                "False/SchedulerError on empty",
                None,
                false,
                REASON_SCHEDULER_ERROR,
                "m",
                true,
                Some(&now),
            ),
            (
                "Unschedulable to True",
                f,
                true,
                REASON_SCHEDULED,
                "",
                true,
                Some(&now),
            ),
            (
                "SchedulerError to True",
                e,
                true,
                REASON_SCHEDULED,
                "",
                true,
                Some(&now),
            ),
            (
                "True to Unschedulable is ignored",
                t,
                false,
                REASON_UNSCHEDULABLE,
                "m",
                false,
                None,
            ),
            (
                "True to SchedulerError is ignored",
                t,
                false,
                REASON_SCHEDULER_ERROR,
                "m",
                false,
                None,
            ),
            (
                "Unschedulable to SchedulerError keeps the time",
                f,
                false,
                REASON_SCHEDULER_ERROR,
                "boom",
                true,
                Some(&then),
            ),
            (
                "True with a new message keeps the time",
                t,
                true,
                REASON_SCHEDULED,
                "new",
                true,
                Some(&then),
            ),
            (
                "unchanged writes nothing",
                f,
                false,
                REASON_UNSCHEDULABLE,
                "no fit",
                false,
                None,
            ),
        ];
        for (name, existing, status, reason, message, written, transition) in cases {
            let pg = with_condition(existing, None);
            let got = next_condition(&pg, status, reason, message, now.clone());
            assert_eq!(got.is_some(), written, "{name}");
            if let Some(c) = got {
                assert_eq!(c.type_, CONDITION_INITIALLY_SCHEDULED, "{name}");
                assert_eq!(c.status, if status { "True" } else { "False" }, "{name}");
                assert_eq!(
                    (c.reason.as_str(), c.message.as_str()),
                    (reason, message),
                    "{name}"
                );
                assert_eq!(Some(&c.last_transition_time), transition, "{name}");
                assert_eq!(c.observed_generation, None, "{name}");
            }
        }
        let pg = with_condition(None, Some(7));
        let c = next_condition(&pg, true, REASON_SCHEDULED, "", now).unwrap();
        assert_eq!(c.observed_generation, Some(7), "generation copied");
    }

    #[test]
    fn create_defaults_and_update_immutability() {
        let mut pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": 5},
        }))
        .unwrap();
        admit_pod_group(&mut pg).unwrap();
        assert_eq!(
            serde_json::to_value(&pg.spec.disruption_mode).unwrap(),
            json!({"single": {}})
        );
        let mut more = pg.clone();
        more.spec.scheduling_policy.gang.as_mut().unwrap().min_count = 3;
        validate_pod_group_update(&pg, &more).expect("minCount is mutable");
        let mut basic = pg.clone();
        basic.spec.scheduling_policy = serde_json::from_value(json!({"basic": {}})).unwrap();
        assert_eq!(
            validate_pod_group_update(&pg, &basic).unwrap_err().path,
            "spec.schedulingPolicy"
        );
        let mut prio = pg.clone();
        prio.spec.priority = Some(6);
        assert_eq!(
            validate_pod_group_update(&pg, &prio)
                .unwrap_err()
                .to_string(),
            "spec.priority: Invalid value: field is immutable"
        );
    }
}
