//! What the scheduler writes to pods and events, computed in one place for
//! both backends (ARCHITECTURE decision 18): the embedded cluster applies
//! these values to its store; kube mode sends them to the API server,
//! wrapped as upstream's client-go wraps them (strategic merge patches of
//! the status subresource, `events.k8s.io/v1` creates; see
//! `kube::writes` and `kube::events`). So the two cannot drift: a field
//! one writes, the other writes too.
//!
//! * A victim of preemption: `DisruptionTarget=True`, reason
//!   `PreemptionByScheduler`, the preemption's message, `observedGeneration`
//!   the pod's `metadata.generation` (v1.36, PodObservedGenerationTracking),
//!   a new `lastTransitionTime` unless the condition was already True; and
//!   nothing at all for a victim whose deletion has started.
//! * A pod that did not fit: `PodScheduled=False` with the attempt's reason
//!   and message, `observedGeneration` likewise, the `lastTransitionTime`
//!   kept while the condition stays False.
//! * An event: the `events.k8s.io/v1` object upstream's scheduler writes
//!   (`reportingInstance` `<scheduler name>-<host name>`).

use std::sync::OnceLock;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::PodScheduledCondition;

/// The condition type preemption sets on its victims.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Its reason.
pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Now, as `metav1.Time` (second precision on the wire).
pub fn now() -> Time {
    Time(Timestamp::try_from(SystemTime::now()).unwrap_or_default())
}

/// The generation a condition observes: the pod's `metadata.generation`,
/// none when the pod has none (Go omits a zero).
fn observed(generation: Option<i64>) -> Option<i64> {
    generation.filter(|g| *g > 0)
}

/// The transition time of a condition of `type_` becoming `status`: kept
/// from the pod's condition of that type when its status does not change
/// (upstream's UpdatePodCondition), else `now`.
fn transition(existing: &[PodCondition], type_: &str, status: &str) -> Option<Time> {
    existing
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .or_else(|| Some(now()))
}

/// The condition preemption sets on a victim before deleting it (see the
/// module doc); `None` when the victim's deletion already started
/// (`terminating`): then nothing is written, not even the deletion.
pub fn disruption_target(
    existing: &[PodCondition],
    generation: Option<i64>,
    terminating: bool,
    message: &str,
) -> Option<PodCondition> {
    if terminating {
        return None;
    }
    Some(PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some(PREEMPTION_BY_SCHEDULER.into()),
        message: Some(message.to_string()),
        observed_generation: observed(generation),
        last_probe_time: None,
        last_transition_time: transition(existing, DISRUPTION_TARGET, "True"),
    })
}

/// The `PodScheduled=False` condition of a pod that did not fit.
pub fn pod_scheduled_false(
    existing: &[PodCondition],
    generation: Option<i64>,
    c: &PodScheduledCondition,
) -> PodCondition {
    PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(c.reason.clone()),
        message: Some(c.message.clone()),
        observed_generation: observed(generation),
        last_probe_time: None,
        last_transition_time: transition(existing, "PodScheduled", "False"),
    }
}

/// A condition as client-go's patch carries it: every field it sets, and
/// `lastProbeTime: null` when unset (as the recordings show).
pub fn condition_json(c: &PodCondition) -> Value {
    let mut v = serde_json::to_value(c).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.entry("lastProbeTime").or_insert(Value::Null);
    }
    v
}

/// Who reports the scheduler's events: `<scheduler name>-<host name>`.
pub fn reporting_instance(controller: &str) -> String {
    static HOST: OnceLock<String> = OnceLock::new();
    let host = HOST.get_or_init(super::hostname);
    format!("{controller}-{host}")
}

/// The pod an event is about.
#[derive(Debug, Clone, Copy)]
pub struct Regarding<'a> {
    /// metadata.namespace.
    pub namespace: &'a str,
    /// metadata.name.
    pub name: &'a str,
    /// metadata.uid.
    pub uid: &'a str,
    /// metadata.resourceVersion, when known.
    pub resource_version: Option<&'a str>,
}

/// What an event says.
#[derive(Debug, Clone, Copy)]
pub struct EventFields<'a> {
    /// Its name (`<pod>.<unix nanos in hex>`).
    pub name: &'a str,
    /// When it happened.
    pub at: Timestamp,
    /// The reporting controller (the profile's scheduler name).
    pub controller: &'a str,
    /// Who reports it ([`reporting_instance`]).
    pub instance: &'a str,
    /// `Scheduling`, `Binding`, `Preempting`, ...
    pub action: &'a str,
    /// `Scheduled`, `FailedScheduling`, `Preempted`, ...
    pub reason: &'a str,
    /// `Normal` or `Warning`.
    pub event_type: &'a str,
    /// The note.
    pub note: &'a str,
    /// The pod it is about.
    pub regarding: Regarding<'a>,
}

/// The `events.k8s.io/v1` Event upstream's scheduler creates (client-go's
/// events broadcaster): no related object, no deprecated fields.
pub fn event_json(e: &EventFields<'_>) -> Value {
    let r = e.regarding;
    let mut regarding = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "name": r.name,
        "namespace": r.namespace,
        "uid": r.uid,
    });
    if let Some(rv) = r.resource_version {
        regarding["resourceVersion"] = json!(rv);
    }
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": e.name, "namespace": r.namespace},
        "eventTime": serde_json::to_value(MicroTime(e.at)).unwrap_or(Value::Null),
        "reportingController": e.controller,
        "reportingInstance": e.instance,
        "action": e.action,
        "reason": e.reason,
        "regarding": regarding,
        "note": e.note,
        "type": e.event_type,
    })
}

/// An event's name: `<pod>.<unix nanos in hex>`, as client-go names them.
pub fn event_name(pod: &str, at: Timestamp) -> String {
    format!("{pod}.{:x}", at.as_nanosecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduled(status: &str, at: &str) -> PodCondition {
        PodCondition {
            type_: "PodScheduled".into(),
            status: status.into(),
            last_transition_time: Some(serde_json::from_value(json!(at)).unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn a_victim_gets_disruption_target_with_its_generation_unless_terminating() {
        let c = disruption_target(
            &[scheduled("True", "2026-11-24T06:21:33Z")],
            Some(1),
            false,
            "default-scheduler: preempting to accommodate a higher priority pod",
        )
        .unwrap();
        let v = condition_json(&c);
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| &**k).collect();
        keys.sort();
        // The keys of the recorded patch (preemption-victim-disruption-target).
        assert_eq!(
            keys,
            [
                "lastProbeTime",
                "lastTransitionTime",
                "message",
                "observedGeneration",
                "reason",
                "status",
                "type"
            ]
        );
        assert_eq!(v["observedGeneration"], 1);
        assert_eq!(v["reason"], "PreemptionByScheduler");
        assert!(v["lastProbeTime"].is_null());
        assert!(disruption_target(&[], Some(1), true, "m").is_none());
        // No generation, no observedGeneration.
        let c = disruption_target(&[], None, false, "m").unwrap();
        assert!(condition_json(&c).get("observedGeneration").is_none());
    }

    #[test]
    fn pod_scheduled_false_keeps_its_transition_time_while_false() {
        let want = PodScheduledCondition {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available".into(),
        };
        let was_false = [scheduled("False", "2026-11-24T06:21:00Z")];
        let c = pod_scheduled_false(&was_false, Some(2), &want);
        assert_eq!(
            condition_json(&c)["lastTransitionTime"],
            "2026-11-24T06:21:00Z"
        );
        assert_eq!(c.observed_generation, Some(2));
        let c = pod_scheduled_false(&[scheduled("True", "2026-11-24T06:21:00Z")], None, &want);
        assert_ne!(
            condition_json(&c)["lastTransitionTime"],
            "2026-11-24T06:21:00Z"
        );
    }
}
