//! The API server's Priority admission plugin, for pods that reach berth
//! without an API server (cluster files, Apply, DryRun, Simulate): on
//! create, a pod gets `spec.priority` (and `spec.preemptionPolicy`) from
//! its PriorityClass, from the global default class if it names none, or
//! 0 when there is no default; a class that does not exist is refused
//! with the API server's Forbidden message. `system-node-critical` and
//! `system-cluster-critical` exist in every cluster.
//!
//! A pod that already carries `spec.priority` keeps it when it names no
//! class or its class is not at hand: a snapshot of a real cluster holds
//! pods its API server admitted (and berth's own files set priorities by
//! hand); when the named class is known, the two must agree, as upstream
//! requires.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;

/// `system-cluster-critical`'s value.
pub const SYSTEM_CLUSTER_CRITICAL: i32 = 2_000_000_000;
/// `system-node-critical`'s value.
pub const SYSTEM_NODE_CRITICAL: i32 = SYSTEM_CLUSTER_CRITICAL + 1000;
/// A pod's priority when it names no class and no class is the global
/// default.
pub const DEFAULT_PRIORITY: i32 = 0;
/// The default (and the built-in classes') preemption policy.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// The built-in class named `name`, if it is one.
pub fn builtin_class(name: &str) -> Option<i32> {
    match name {
        "system-node-critical" => Some(SYSTEM_NODE_CRITICAL),
        "system-cluster-critical" => Some(SYSTEM_CLUSTER_CRITICAL),
        _ => None,
    }
}

/// Why a pod was refused, as the API server words it (a Forbidden).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pods {name:?} is forbidden: {message}")]
pub struct PriorityRefused {
    /// The pod.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

/// Admits `pod` (on create) against the classes `classes` lists.
pub fn admit_priority<'a>(
    pod: &mut Pod,
    classes: impl IntoIterator<Item = &'a PriorityClass>,
) -> Result<(), PriorityRefused> {
    let classes: Vec<&PriorityClass> = classes.into_iter().collect();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let refuse = |message: String| PriorityRefused {
        name: name.clone(),
        message,
    };
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(());
    };
    let class_name = spec.priority_class_name.clone().unwrap_or_default();
    // (value, preemption policy) from the class; None: not at hand.
    let resolved: Option<(i32, Option<String>)> =
        if class_name.is_empty() && spec.priority.is_some() {
            // Set by hand or admitted elsewhere: taken as written.
            None
        } else if class_name.is_empty() {
            // The global default with the lowest value, else 0.
            let default = classes
                .iter()
                .filter(|c| c.global_default == Some(true))
                .min_by_key(|c| c.value.unwrap_or(0));
            match default {
                Some(c) => {
                    spec.priority_class_name = c.metadata.name.clone();
                    Some((c.value.unwrap_or(0), c.preemption_policy.clone()))
                }
                None => Some((DEFAULT_PRIORITY, Some(PREEMPT_LOWER_PRIORITY.into()))),
            }
        } else if let Some(c) = classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()))
        {
            Some((c.value.unwrap_or(0), c.preemption_policy.clone()))
        } else if let Some(v) = builtin_class(&class_name) {
            Some((v, Some(PREEMPT_LOWER_PRIORITY.into())))
        } else if spec.priority.is_some() {
            // Admitted by the API server that held the class.
            None
        } else {
            return Err(refuse(format!(
                "no PriorityClass with name {class_name} was found"
            )));
        };
    let Some((value, policy)) = resolved else {
        return Ok(());
    };
    if let Some(p) = spec.priority
        && p != value
    {
        return Err(refuse(format!(
            "the integer value of priority ({p}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
        )));
    }
    spec.priority = Some(value);
    if let Some(policy) = policy {
        if let Some(given) = &spec.preemption_policy
            && *given != policy
        {
            return Err(refuse(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
        spec.preemption_policy = Some(policy);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, value: i32, default: bool, policy: Option<&str>) -> PriorityClass {
        let mut c = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value, "globalDefault": default});
        if let Some(p) = policy {
            c["preemptionPolicy"] = json!(p);
        }
        serde_json::from_value(c).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "c"}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": s})).unwrap()
    }

    /// `(priorityClassName, priority, preemptionPolicy)` after admission.
    type Admitted = (Option<String>, Option<i32>, Option<String>);

    fn admitted(spec: serde_json::Value, classes: &[PriorityClass]) -> Result<Admitted, String> {
        let mut p = pod(spec);
        admit_priority(&mut p, classes).map_err(|e| e.to_string())?;
        let s = p.spec.unwrap();
        Ok((s.priority_class_name, s.priority, s.preemption_policy))
    }

    #[test]
    fn pods_get_their_class_s_priority_as_the_api_server_gives_it() {
        let high = class("high", 1000, false, Some("Never"));
        let low_default = class("low", 10, true, None);
        let lower_default = class("lower", 5, true, None);
        let plr = Some(PREEMPT_LOWER_PRIORITY.to_string());
        let cases: Vec<(&str, serde_json::Value, Vec<PriorityClass>, Result<_, String>)> = vec![
            (
                "class named",
                json!({"priorityClassName": "high"}),
                vec![high.clone()],
                Ok((Some("high".into()), Some(1000), Some("Never".into()))),
            ),
            ("no class, no default", json!({}), vec![high.clone()], Ok((None, Some(0), plr.clone()))),
            (
                "no class: the global default with the lowest value",
                json!({}),
                vec![high.clone(), low_default.clone(), lower_default.clone()],
                Ok((Some("lower".into()), Some(5), None)),
            ),
            (
                "built-in class",
                json!({"priorityClassName": "system-node-critical"}),
                vec![],
                Ok((Some("system-node-critical".into()), Some(2_000_001_000), plr.clone())),
            ),
            (
                "missing class",
                json!({"priorityClassName": "nope"}),
                vec![high.clone()],
                Err("pods \"p\" is forbidden: no PriorityClass with name nope was found".into()),
            ),
            (
                "a priority that disagrees with the class",
                json!({"priorityClassName": "high", "priority": 7}),
                vec![high.clone()],
                Err("pods \"p\" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name".into()),
            ),
            (
                "a priority without a class is taken as written",
                json!({"priority": 7}),
                vec![low_default.clone()],
                Ok((None, Some(7), None)),
            ),
            (
                "a snapshot's priority with its class not at hand is kept",
                json!({"priorityClassName": "gone", "priority": 7}),
                vec![],
                Ok((Some("gone".into()), Some(7), None)),
            ),
            (
                "a policy that disagrees with the class",
                json!({"priorityClassName": "high", "preemptionPolicy": "PreemptLowerPriority"}),
                vec![high.clone()],
                Err("pods \"p\" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name".into()),
            ),
        ];
        for (name, spec, classes, want) in cases {
            assert_eq!(admitted(spec, &classes), want, "{name}");
        }
    }
}
