//! Request parsing at the gRPC edge: JSON objects into Kubernetes types and
//! pre-parsed pods, with field paths in every error.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Pod;

use super::ApiError;
use crate::model::PodInfo;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A UID for a pod that has none (dry runs and simulations).
fn fresh_uid(prefix: &str) -> String {
    format!("{prefix}-{:012x}", NEXT_UID.fetch_add(1, Ordering::Relaxed))
}

/// The JSON of a request field that must be an object.
pub fn object(field: &str, s: Option<&prost_types::Struct>) -> Result<serde_json::Value, ApiError> {
    let s = s.ok_or_else(|| ApiError::InvalidArgument(format!("{field}: Required value")))?;
    Ok(berth_proto::json::from_struct(s))
}

/// Parses a pod given as JSON at request field `field`. A missing namespace
/// is `default`, a missing UID a generated one (`uid_prefix-...`).
pub fn pod_from_json(
    field: &str,
    value: serde_json::Value,
    uid_prefix: &str,
) -> Result<PodInfo, ApiError> {
    if let Some(kind) = value.get("kind").and_then(|k| k.as_str())
        && kind != "Pod"
    {
        return Err(ApiError::InvalidArgument(format!(
            "{field}.kind: expected \"Pod\", got {kind:?}"
        )));
    }
    let mut pod: Pod = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            field.to_string()
        } else {
            format!("{field}.{path}")
        };
        ApiError::InvalidArgument(format!("{path}: {}", e.into_inner()))
    })?;
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".into());
    }
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        pod.metadata.uid = Some(fresh_uid(uid_prefix));
    }
    PodInfo::new(Arc::new(pod))
        .map_err(|e| ApiError::InvalidArgument(format!("{field}.{}: {}", e.path, e.message)))
}

/// The pods an object stands for in a simulation: a Pod itself, or a
/// workload's pod template `replicas` times (`<name>-<i>`).
pub fn simulated_pods(
    field: &str,
    value: serde_json::Value,
    replicas: Option<u32>,
) -> Result<Vec<PodInfo>, ApiError> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("Pod")
        .to_string();
    let bad = |m: String| ApiError::InvalidArgument(m);
    let (template, base, count): (serde_json::Value, String, u32) = match kind.as_str() {
        "Pod" => {
            let name = value["metadata"]["name"].as_str().unwrap_or("").to_string();
            (value, name, replicas.unwrap_or(1))
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "ReplicationController" | "Job" => {
            let meta = &value["metadata"];
            let name = meta["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad(format!("{field}.metadata.name: Required value")))?
                .to_string();
            let spec = &value["spec"];
            let template = spec
                .get("template")
                .filter(|t| t.is_object())
                .ok_or_else(|| bad(format!("{field}.spec.template: Required value")))?;
            let own = if kind == "Job" {
                spec["parallelism"]
                    .as_u64()
                    .or_else(|| spec["completions"].as_u64())
            } else {
                spec["replicas"].as_u64()
            };
            let count = replicas.unwrap_or(own.unwrap_or(1) as u32);
            let mut pod = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": template.get("metadata").cloned().unwrap_or_else(|| serde_json::json!({})),
                "spec": template.get("spec").cloned().unwrap_or_default(),
            });
            if let Some(ns) = meta.get("namespace") {
                pod["metadata"]["namespace"] = ns.clone();
            }
            (pod, name, count)
        }
        other => {
            return Err(bad(format!(
                "{field}.kind: {other:?} cannot be simulated (Pod, Deployment, ReplicaSet, StatefulSet, ReplicationController, Job)"
            )));
        }
    };
    let template_path = if kind == "Pod" {
        field.to_string()
    } else {
        format!("{field}.spec.template")
    };
    (0..count)
        .map(|i| {
            let mut p = template.clone();
            let name = if count == 1 && kind == "Pod" {
                base.clone()
            } else {
                format!("{base}-{i}")
            };
            if !name.is_empty() {
                p["metadata"]["name"] = serde_json::Value::String(name);
            }
            if let Some(m) = p["metadata"].as_object_mut() {
                m.remove("uid");
            }
            pod_from_json(&template_path, p, "simulated")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_parse_with_defaults_and_field_paths() {
        let p = pod_from_json(
            "pod",
            json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}),
            "t",
        )
        .unwrap();
        assert_eq!(&*p.namespace, "default");
        assert!(p.uid.starts_with("t-"));
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
        ];
        for (v, want) in cases {
            let e = pod_from_json("pod", v, "t").unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}\nwanted {want}");
        }
    }

    #[test]
    fn workloads_expand_to_their_replicas() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}});
        let pods = simulated_pods("pods[0]", d.clone(), None).unwrap();
        assert_eq!(
            pods.iter().map(|p| p.name.to_string()).collect::<Vec<_>>(),
            ["web-0", "web-1", "web-2"]
        );
        assert_eq!(&*pods[0].namespace, "shop");
        assert_eq!(pods[0].labels.get("app"), Some("web"));
        assert_eq!(simulated_pods("pods[0]", d, Some(40)).unwrap().len(), 40);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            simulated_pods("pods[0]", pod.clone(), None).unwrap()[0]
                .name
                .as_ref(),
            "p"
        );
        assert_eq!(
            simulated_pods("pods[0]", pod, Some(2)).unwrap()[1]
                .name
                .as_ref(),
            "p-1"
        );
        let e = simulated_pods("pods[0]", json!({"kind": "DaemonSet"}), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("pods[0].kind: \"DaemonSet\" cannot be simulated"),
            "{e}"
        );
    }
}
