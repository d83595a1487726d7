//! What pods ask of nodes, computed from their JSON as the scheduler
//! counts it: app containers summed, init containers one at a time (the
//! largest wins), sidecars (restartable init containers) running alongside
//! both, pod-level requests replacing the containers' total, overhead on top.

use serde_json::Value;

use crate::quantity::{Quantity, QuantityError};

/// A pod's or a node's CPU and memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
}

impl Resources {
    fn add(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
    }

    fn max_with(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
    }
}

/// A quantity in an object that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {source}")]
pub struct BadQuantity {
    /// Where it is, e.g. `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    /// What is wrong with it.
    pub source: QuantityError,
}

fn quantity(v: &Value, path: String) -> Result<Option<Quantity>, BadQuantity> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Quantity::parse(s)
            .map(Some)
            .map_err(|source| BadQuantity { path, source }),
        // Numbers are accepted by the API server as quantities too.
        Value::Number(n) => Quantity::parse(&n.to_string())
            .map(Some)
            .map_err(|source| BadQuantity { path, source }),
        other => Err(BadQuantity {
            path,
            source: QuantityError::Invalid(other.to_string()),
        }),
    }
}

/// CPU and memory of a ResourceList (`{"cpu": "500m", "memory": "1Gi"}`);
/// each flag says whether the list names that resource.
fn list(v: &Value, path: &str) -> Result<(Resources, bool, bool), BadQuantity> {
    let cpu = quantity(&v["cpu"], format!("{path}.cpu"))?;
    let memory = quantity(&v["memory"], format!("{path}.memory"))?;
    Ok((
        Resources {
            milli_cpu: cpu.map_or(0, |q| q.milli()),
            memory: memory.map_or(0, |q| q.value()),
        },
        cpu.is_some(),
        memory.is_some(),
    ))
}

fn container_requests(c: &Value, path: &str) -> Result<Resources, BadQuantity> {
    Ok(list(
        &c["resources"]["requests"],
        &format!("{path}.resources.requests"),
    )?
    .0)
}

/// The CPU and memory a pod requests.
pub fn pod_requests(pod: &Value) -> Result<Resources, BadQuantity> {
    let spec = &pod["spec"];
    let mut total = Resources::default();
    for (i, c) in spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        total.add(&container_requests(c, &format!("spec.containers[{i}]"))?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let r = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        if c["restartPolicy"] == "Always" {
            total.add(&r);
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut while_running = r;
            while_running.add(&sidecars);
            init_peak.max_with(&while_running);
        }
    }
    total.max_with(&init_peak);
    let (pod_level, has_cpu, has_memory) =
        list(&spec["resources"]["requests"], "spec.resources.requests")?;
    if has_cpu {
        total.milli_cpu = pod_level.milli_cpu;
    }
    if has_memory {
        total.memory = pod_level.memory;
    }
    total.add(&list(&spec["overhead"], "spec.overhead")?.0);
    Ok(total)
}

/// Whether a pod still holds its node's resources (not Succeeded or Failed).
pub fn is_active(pod: &Value) -> bool {
    !matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// A node's allocatable CPU, memory and pod count.
pub fn node_allocatable(node: &Value) -> Result<(Resources, i64), BadQuantity> {
    let alloc = &node["status"]["allocatable"];
    let (r, _, _) = list(alloc, "status.allocatable")?;
    let pods = quantity(&alloc["pods"], "status.allocatable.pods".into())?;
    Ok((r, pods.map_or(0, |q| q.value())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(cpu: &str, memory: &str) -> Value {
        json!({"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}})
    }

    #[test]
    fn containers_add_up() {
        let pod =
            json!({"spec": {"containers": [c("500m", "1Gi"), c("1", "512Mi"), {"name": "bare"}]}});
        assert_eq!(
            pod_requests(&pod),
            Ok(Resources {
                milli_cpu: 1500,
                memory: 1536 << 20
            })
        );
        assert_eq!(pod_requests(&json!({})), Ok(Resources::default()));
    }

    #[test]
    fn init_containers_take_the_peak_and_sidecars_add() {
        let mut side = c("100m", "10Mi");
        side["restartPolicy"] = json!("Always");
        let pod = json!({"spec": {
            "containers": [c("500m", "100Mi")],
            "initContainers": [c("2", "50Mi"), side, c("300m", "300Mi")],
            "overhead": {"cpu": "10m"},
        }});
        // apps + sidecar: 600m / 110Mi; init peak: max(2000m, 300m + 100m)
        // cpu and max(50Mi, 10Mi, 300Mi + 10Mi) memory; + 10m overhead.
        assert_eq!(
            pod_requests(&pod),
            Ok(Resources {
                milli_cpu: 2010,
                memory: 310 << 20
            })
        );
    }

    #[test]
    fn pod_level_requests_replace_what_they_name() {
        let pod = json!({"spec": {
            "containers": [c("1", "1Gi")],
            "resources": {"requests": {"cpu": "3"}},
        }});
        assert_eq!(
            pod_requests(&pod),
            Ok(Resources {
                milli_cpu: 3000,
                memory: 1 << 30
            })
        );
    }

    #[test]
    fn bad_quantities_name_their_field() {
        let pod = json!({"spec": {"containers": [c("1", "1Gi"), c("lots", "1")]}});
        assert_eq!(
            pod_requests(&pod).unwrap_err().to_string(),
            "spec.containers[1].resources.requests.cpu: invalid quantity \"lots\""
        );
    }

    #[test]
    fn nodes_and_phases() {
        let node =
            json!({"status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}});
        assert_eq!(
            node_allocatable(&node),
            Ok((
                Resources {
                    milli_cpu: 4000,
                    memory: 16 << 30
                },
                110
            ))
        );
        assert!(is_active(&json!({"status": {"phase": "Running"}})));
        assert!(is_active(&json!({})));
        assert!(!is_active(&json!({"status": {"phase": "Succeeded"}})));
    }
}
