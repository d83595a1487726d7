//! Request parsing at the gRPC edge: JSON objects into Kubernetes types and
//! pre-parsed pods, with field paths in every error. Every object is
//! admitted as the API server would admit it
//! ([`crate::model::admission`]): bounded, strictly decoded, defaulted,
//! validated.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use prost::Message;
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::model::admission::{self, MAX_OBJECT_BYTES};
use crate::model::decode::{check_bounds, decode_strict};
use crate::model::validation::dns1123_subdomain;
use crate::model::{InvalidObject, PodInfo};

/// Most pods a simulation places.
pub const MAX_SIMULATED_PODS: usize = 100_000;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A UID for a pod that has none (dry runs and simulations).
fn fresh_uid(prefix: &str) -> String {
    format!("{prefix}-{:012x}", NEXT_UID.fetch_add(1, Ordering::Relaxed))
}

/// `field.path: message` (or `field: message` for the object itself), or
/// several as the API server lists them: `[field.a: ..., field.b: ...]`.
fn at(field: &str, e: InvalidObject) -> ApiError {
    ApiError::InvalidArgument(e.under(field))
}

/// A request's `namespace` field: empty (every namespace, or the default)
/// or a DNS-1123 label, as the API server's paths take them; anything
/// else would match nothing and answer nothing.
pub fn namespace_arg(ns: &str) -> Result<(), ApiError> {
    if ns.is_empty() {
        return Ok(());
    }
    match crate::model::validation::dns1123_label(ns) {
        None => Ok(()),
        Some(m) => Err(ApiError::InvalidArgument(format!(
            "namespace: Invalid value: {ns:?}: {m}"
        ))),
    }
}

/// The JSON of a request field that must be an object, refused unread when
/// larger than any Kubernetes object can be.
pub fn object(field: &str, s: Option<&prost_types::Struct>) -> Result<serde_json::Value, ApiError> {
    let s = s.ok_or_else(|| ApiError::InvalidArgument(format!("{field}: Required value")))?;
    let len = s.encoded_len();
    if len > MAX_OBJECT_BYTES {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: Too long: the object is {len} bytes, may not be more than {MAX_OBJECT_BYTES} bytes (the largest request etcd stores by default)"
        )));
    }
    Ok(berth_proto::json::from_struct(s))
}

fn check_kind(field: &str, value: &serde_json::Value, want: &str) -> Result<(), ApiError> {
    match value.get("kind") {
        None => Ok(()),
        Some(serde_json::Value::String(k)) if k == want => Ok(()),
        Some(k) => Err(ApiError::InvalidArgument(format!(
            "{field}.kind: expected {want:?}, got {}",
            brief(k)
        ))),
    }
}

/// A value for a message: short ones as they are, long ones cut.
fn brief(v: &serde_json::Value) -> String {
    let text = v.to_string();
    if text.len() <= 64 {
        text
    } else {
        let mut cut = 64;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}... ({} bytes)", &text[..cut], text.len())
    }
}

/// The pre-parsed pod of an admitted pod object. A missing namespace is
/// `default`, a missing UID a generated one (`uid_prefix-...`).
fn pod_info(field: &str, mut pod: Pod, uid_prefix: &str) -> Result<PodInfo, ApiError> {
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".into());
    }
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        pod.metadata.uid = Some(fresh_uid(uid_prefix));
    }
    PodInfo::new(Arc::new(pod)).map_err(|e| at(field, e))
}

/// Parses a pod given as JSON at request field `field`, as the API server
/// would admit it (without PriorityClasses).
#[cfg(test)]
pub fn pod_from_json(
    field: &str,
    value: serde_json::Value,
    uid_prefix: &str,
) -> Result<PodInfo, ApiError> {
    pod_from_json_with_priority(field, value, uid_prefix, |_| Ok(()))
}

/// Parses a pod given as JSON at request field `field`, as the API server
/// would admit it, the Priority admission run by `admit` (against the
/// cluster's PriorityClasses) before the pod is parsed for scheduling.
pub fn pod_from_json_with_priority(
    field: &str,
    value: serde_json::Value,
    uid_prefix: &str,
    admit: impl FnOnce(&mut Pod) -> Result<(), crate::model::priority::PriorityRefused>,
) -> Result<PodInfo, ApiError> {
    check_kind(field, &value, "Pod")?;
    let mut pod = admission::pod_from_json(value).map_err(|e| at(field, e))?;
    admit(&mut pod).map_err(|e| ApiError::InvalidArgument(format!("{field}: {e}")))?;
    pod_info(field, pod, uid_prefix)
}

/// The pods one object of a simulation stands for: a pod, or a workload's
/// pod template, `count` times. Built one at a time by [`Plan::pod`], so
/// that a large count allocates nothing up front.
#[derive(Debug)]
pub struct Plan {
    field: String,
    template: Pod,
    base: String,
    /// How many pods.
    pub count: usize,
    /// Whether a single pod keeps its own name (a Pod, placed once).
    keep_name: bool,
}

impl Plan {
    /// Runs the Priority admission on the template (the classes are the
    /// cluster's), naming the field on refusal.
    pub fn admit_priority(
        &mut self,
        admit: impl FnOnce(&mut Pod) -> Result<(), crate::model::priority::PriorityRefused>,
    ) -> Result<(), ApiError> {
        admit(&mut self.template)
            .map_err(|e| ApiError::InvalidArgument(format!("{}: {e}", self.field)))
    }

    /// The `i`-th pod: `<name>-<i>`, with a fresh UID.
    pub fn pod(&self, i: usize) -> Result<PodInfo, ApiError> {
        let mut pod = self.template.clone();
        if !self.keep_name {
            pod.metadata.name = Some(format!("{}-{i}", self.base));
        }
        pod.metadata.uid = None;
        pod_info(&self.field, pod, "simulated")
    }
}

fn strict<T: DeserializeOwned>(field: &str, value: serde_json::Value) -> Result<T, ApiError> {
    check_bounds(&value).map_err(|e| at(field, e))?;
    decode_strict(value).map_err(|e| at(field, e))
}

/// Plans the pods `value` (at request field `field`) stands for in a
/// simulation: a Pod itself, or a workload's template `replicas` times
/// (default: its own replicas, or parallelism for a Job). The object is
/// admitted here, before any pod is built; the count is checked against
/// [`MAX_SIMULATED_PODS`] by the caller.
pub fn simulation_plan(
    field: &str,
    value: serde_json::Value,
    replicas: Option<u32>,
) -> Result<Plan, ApiError> {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ReplicationController;
    let bad = |m: String| ApiError::InvalidArgument(m);
    let kind = match value.get("kind") {
        None => "Pod".to_string(),
        Some(serde_json::Value::String(k)) => k.clone(),
        Some(k) => {
            return Err(bad(format!(
                "{field}.kind: expected a string, got {}",
                brief(k)
            )));
        }
    };
    let (meta, template, own): (
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        Option<PodTemplateSpec>,
        Option<i32>,
    ) = match kind.as_str() {
        "Pod" => {
            let pod = admission::pod_from_json(value).map_err(|e| at(field, e))?;
            let base = pod.metadata.name.clone().unwrap_or_default();
            let count = replicas.map_or(1, |r| r as usize);
            let plan = Plan {
                field: field.to_string(),
                template: pod,
                base,
                count,
                keep_name: replicas.is_none() || count == 1,
            };
            check_names(&plan)?;
            return Ok(plan);
        }
        "Deployment" => {
            let d: Deployment = strict(field, value)?;
            let s = d.spec;
            (d.metadata, Some(s.template), s.replicas)
        }
        "ReplicaSet" => {
            let d: ReplicaSet = strict(field, value)?;
            let s = d.spec;
            (d.metadata, s.template, s.replicas)
        }
        "StatefulSet" => {
            let d: StatefulSet = strict(field, value)?;
            let s = d.spec;
            (d.metadata, Some(s.template), s.replicas)
        }
        "ReplicationController" => {
            let d: ReplicationController = strict(field, value)?;
            let s = d.spec.unwrap_or_default();
            (d.metadata, s.template, s.replicas)
        }
        "Job" => {
            let d: Job = strict(field, value)?;
            let s = d.spec.unwrap_or_default();
            (
                d.metadata,
                Some(s.template),
                s.parallelism.or(s.completions),
            )
        }
        other => {
            return Err(bad(format!(
                "{field}.kind: {other:?} cannot be simulated (Pod, Deployment, ReplicaSet, StatefulSet, ReplicationController, Job)"
            )));
        }
    };
    let base = meta
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(format!("{field}.metadata.name: Required value")))?;
    let template = template
        .filter(|t| t.spec.is_some())
        .ok_or_else(|| bad(format!("{field}.spec.template: Required value")))?;
    let count = match (replicas, own) {
        (Some(r), _) => r as usize,
        (None, Some(n)) if n < 0 => {
            return Err(bad(format!(
                "{field}.spec.replicas: Invalid value: {n}: must be greater than or equal to 0"
            )));
        }
        (None, Some(n)) => n as usize,
        (None, None) => 1,
    };
    let mut pod_meta = template.metadata.unwrap_or_default();
    pod_meta.name = Some(base.clone());
    pod_meta.namespace = meta.namespace.clone();
    let mut pod = Pod {
        metadata: pod_meta,
        spec: template.spec,
        status: None,
    };
    let template_field = format!("{field}.spec.template");
    admission::admit_pod(&mut pod).map_err(|e| at(&template_field, e))?;
    let plan = Plan {
        field: template_field,
        template: pod,
        base,
        count,
        keep_name: false,
    };
    check_names(&plan)?;
    Ok(plan)
}

/// The longest replica name must still be a DNS subdomain.
fn check_names(plan: &Plan) -> Result<(), ApiError> {
    if plan.keep_name || plan.count == 0 {
        return Ok(());
    }
    let longest = format!("{}-{}", plan.base, plan.count - 1);
    match dns1123_subdomain(&longest) {
        None => Ok(()),
        Some(m) => Err(ApiError::InvalidArgument(format!(
            "{}.metadata.name: Invalid value: {longest:?}: {m}",
            plan.field
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_parse_with_defaults_and_field_paths() {
        let p = pod_from_json(
            "pod",
            json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "64"}}}]}}),
            "t",
        )
        .unwrap();
        assert_eq!(&*p.namespace, "default");
        assert!(p.uid.starts_with("t-"));
        assert_eq!(
            p.requests.milli_cpu, 64_000,
            "requests default to limits, as the API server defaults them"
        );
        let cases = [
            (
                json!({"metadata": {"name": "w"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}),
                "pod.spec.containers[0].resources.requests.cpu: quantities must match the regular expression",
            ),
            (
                json!({"metadata": {"name": "w"}, "spec": {"containers": "nope"}}),
                "pod.spec.containers: invalid type: string \"nope\", expected a sequence",
            ),
            (
                json!({"metadata": {"name": "w"}, "spec": {"containers": [{"name": "c"}], "priority": "high"}}),
                "pod.spec.priority: invalid type: string \"high\", expected i32",
            ),
            (
                json!({"spec": {"containers": [{"name": "c"}]}}),
                "pod.metadata.name: Required value",
            ),
            (
                json!({"kind": "Node", "metadata": {"name": "n"}}),
                "pod.kind: expected \"Pod\", got \"Node\"",
            ),
            (
                json!({"metadata": {"name": "w"}, "spec": {"nodeSelektor": {}, "containers": [{"name": "c"}]}}),
                "pod.spec.nodeSelektor: unknown field \"nodeSelektor\"",
            ),
        ];
        for (v, want) in cases {
            let e = pod_from_json("pod", v, "t").unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}\nwanted {want}");
        }
    }

    fn names(plan: &Plan) -> Vec<String> {
        (0..plan.count)
            .map(|i| plan.pod(i).unwrap().name.to_string())
            .collect()
    }

    #[test]
    fn workloads_expand_to_their_replicas() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}});
        let plan = simulation_plan("pods[0]", d.clone(), None).unwrap();
        assert_eq!(names(&plan), ["web-0", "web-1", "web-2"]);
        let first = plan.pod(0).unwrap();
        assert_eq!(&*first.namespace, "shop");
        assert_eq!(first.labels.get("app"), Some("web"));
        assert_ne!(first.uid, plan.pod(1).unwrap().uid);
        assert_eq!(simulation_plan("pods[0]", d, Some(40)).unwrap().count, 40);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            names(&simulation_plan("pods[0]", pod.clone(), None).unwrap()),
            ["p"]
        );
        assert_eq!(
            names(&simulation_plan("pods[0]", pod, Some(2)).unwrap()),
            ["p-0", "p-1"]
        );
        let e = simulation_plan("pods[0]", json!({"kind": "DaemonSet"}), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("pods[0].kind: \"DaemonSet\" cannot be simulated"),
            "{e}"
        );
        // A planned count allocates nothing: a hundred million replicas
        // plan in no time (the caller refuses the count).
        let huge = json!({"kind": "Deployment", "metadata": {"name": "w"},
            "spec": {"replicas": 100_000_000, "selector": {}, "template": {"spec": {"containers": [{"name": "c"}]}}}});
        assert_eq!(
            simulation_plan("pods[0]", huge, None).unwrap().count,
            100_000_000
        );
        let typo = json!({"kind": "Deployment", "metadata": {"name": "w"},
            "spec": {"replicas": 1, "selector": {}, "template": {"spec": {"containers": [{"name": "c", "resourcez": {}}]}}}});
        let e = simulation_plan("pods[0]", typo, None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "pods[0].spec.template.spec.containers[0].resourcez: unknown field \"resourcez\""
        );
    }
}
