//! ValidatePodCreate and ValidatePodSpec (v1.37), for the fields berth
//! stores and schedules by: containers (names, ports, resources), the
//! pod's resources and overhead, nodeSelector, tolerations, topology
//! spread constraints, scheduling gates, volumes' names, the restart
//! policy.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodSpec, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::{
    Errors, IS_NOT_POSITIVE, MAX_CONTAINERS_PER_POD, NameRule, compare, dns1123_label, key,
    label_value, labels_into, meta_into, port_into, qualified_name, quantity, quantity_value_into,
    selector_into,
};
use crate::model::InvalidObject;
use crate::model::resource::{is_extended_resource, is_hugepages_resource, is_native_resource};

/// Validates a pod as the API server does on create.
pub fn validate_pod(pod: &Pod) -> Result<(), InvalidObject> {
    let mut errs = Errors::default();
    meta_into(
        &mut errs,
        &pod.metadata,
        true,
        NameRule::Subdomain,
        "metadata",
    );
    match pod.spec.as_ref() {
        Some(spec) => spec_into(&mut errs, spec, "spec"),
        None => errs.required("spec", ""),
    }
    errs.into_result()
}

/// Validates a pod template's spec at `path` (`spec.template.spec`).
pub fn validate_pod_spec(errs: &mut Errors, spec: &PodSpec, path: &str) {
    spec_into(errs, spec, path);
}

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const TAINT_EFFECTS: [&str; 3] = ["NoExecute", "NoSchedule", "PreferNoSchedule"];

fn spec_into(errs: &mut Errors, spec: &PodSpec, path: &str) {
    let count = spec.containers.len()
        + spec.init_containers.as_ref().map_or(0, Vec::len)
        + spec.ephemeral_containers.as_ref().map_or(0, Vec::len);
    if count > MAX_CONTAINERS_PER_POD {
        // berth's own bound on the work of a cycle, not the API server's.
        errs.other(
            format!("{path}.containers"),
            format!(
                "Too many: {count}: must have at most {MAX_CONTAINERS_PER_POD} items (containers, initContainers and ephemeralContainers together)"
            ),
        );
        return;
    }
    volumes_into(errs, spec, path);
    // Container names are unique across every kind of container.
    let mut names: HashSet<&str> = HashSet::new();
    if spec.containers.is_empty() {
        errs.required(format!("{path}.containers"), "");
    }
    for (i, c) in spec.containers.iter().enumerate() {
        container_into(errs, c, &format!("{path}.containers[{i}]"), &mut names);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        container_into(errs, c, &format!("{path}.initContainers[{i}]"), &mut names);
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        if c.name.is_empty() {
            errs.required(format!("{p}.name"), "");
        } else if let Some(m) = dns1123_label(&c.name) {
            errs.invalid(format!("{p}.name"), &c.name, m);
        } else if !names.insert(&c.name) {
            errs.duplicate(format!("{p}.name"), &c.name);
        }
    }
    if let Some(policy) = spec.restart_policy.as_deref()
        && !RESTART_POLICIES.contains(&policy)
    {
        errs.not_supported(format!("{path}.restartPolicy"), policy, &RESTART_POLICIES);
    }
    labels_into(
        errs,
        spec.node_selector.as_ref(),
        &format!("{path}.nodeSelector"),
    );
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        toleration_into(errs, t, &format!("{path}.tolerations[{i}]"));
    }
    if let Some(r) = spec.resources.as_ref() {
        resources_into(errs, r, &format!("{path}.resources"));
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        // validateOverhead reuses the containers' rules, as limits.
        let as_limits = ResourceRequirements {
            limits: Some(overhead.clone()),
            ..Default::default()
        };
        resources_into(errs, &as_limits, &format!("{path}.overhead"));
    }
    spread_into(errs, spec.topology_spread_constraints.as_deref(), path);
    let mut gates = HashSet::new();
    for (i, g) in spec.scheduling_gates.iter().flatten().enumerate() {
        let p = format!("{path}.schedulingGates[{i}]");
        if let Some(m) = qualified_name(&g.name) {
            errs.invalid(&p, &g.name, m);
        }
        if !gates.insert(g.name.as_str()) {
            errs.duplicate(&p, &g.name);
        }
    }
    if let Some(name) = spec.node_name.as_deref().filter(|n| !n.is_empty())
        && let Some(m) = super::dns1123_subdomain(name)
    {
        errs.invalid(format!("{path}.nodeName"), name, m);
    }
    if let Some(p) = spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty())
        && let Some(m) = super::dns1123_subdomain(p)
    {
        errs.invalid(format!("{path}.priorityClassName"), p, m);
    }
}

/// Volume names: required, DNS-1123 labels, unique.
fn volumes_into(errs: &mut Errors, spec: &PodSpec, path: &str) {
    let mut names = HashSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let p = format!("{path}.volumes[{i}].name");
        if v.name.is_empty() {
            errs.required(p, "");
        } else if let Some(m) = dns1123_label(&v.name) {
            errs.invalid(p, &v.name, m);
        } else if !names.insert(v.name.as_str()) {
            errs.duplicate(p, &v.name);
        }
    }
}

fn container_into<'a>(
    errs: &mut Errors,
    c: &'a Container,
    path: &str,
    names: &mut HashSet<&'a str>,
) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.required(name_path, "");
    } else if let Some(m) = dns1123_label(&c.name) {
        errs.invalid(name_path, &c.name, m);
    } else if !names.insert(&c.name) {
        errs.duplicate(name_path, &c.name);
    }
    ports_into(errs, c.ports.as_deref(), &format!("{path}.ports"));
    if let Some(r) = c.resources.as_ref() {
        resources_into(errs, r, &format!("{path}.resources"));
    }
}

fn ports_into(errs: &mut Errors, ports: Option<&[ContainerPort]>, path: &str) {
    let mut names = HashSet::new();
    for (i, p) in ports.into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}]");
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            match port_name(name) {
                Some(m) => errs.invalid(format!("{at}.name"), name, m),
                None if !names.insert(name) => errs.duplicate(format!("{at}.name"), name),
                None => {}
            }
        }
        if p.container_port == 0 {
            errs.required(format!("{at}.containerPort"), "");
        } else {
            port_into(errs, p.container_port, &format!("{at}.containerPort"));
        }
        if let Some(h) = p.host_port.filter(|h| *h != 0) {
            port_into(errs, h, &format!("{at}.hostPort"));
        }
        if let Some(proto) = p.protocol.as_deref()
            && !PROTOCOLS.contains(&proto)
        {
            errs.not_supported(format!("{at}.protocol"), proto, &PROTOCOLS);
        }
    }
}

/// IsValidPortName: at most 15 characters, lower-case letters, digits and
/// '-', at least one letter, no leading, trailing or double '-'.
fn port_name(name: &str) -> Option<&'static str> {
    if name.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        return Some("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        return Some("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("must not begin or end with a hyphen");
    }
    None
}

/// The resource names a container may ask for (validateContainerResourceName).
fn container_resource_name_into(errs: &mut Errors, name: &str, path: &str) {
    if let Some(m) = qualified_name(name) {
        errs.invalid(path, name, m);
    }
    if !name.contains('/') {
        let standard =
            matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_hugepages_resource(name);
        if !standard {
            errs.invalid(
                path,
                name,
                "must be a standard resource type or fully qualified",
            );
            errs.invalid(path, name, "must be a standard resource for containers");
        }
    } else if !is_native_resource(name) && !is_extended_resource(name) {
        errs.invalid(path, name, "doesn't follow extended resource name standard");
    }
}

/// Whether requests of `name` may be below its limit
/// (IsOvercommitAllowed: native resources other than hugepages).
fn overcommit_allowed(name: &str) -> bool {
    (is_native_resource(name) || !name.contains('/')) && !is_hugepages_resource(name)
}

/// ValidateContainerResourceRequirements: names, values, and each request
/// against its limit (the path of that error is `requests`, without the
/// resource, as the API server's is).
fn resources_into(errs: &mut Errors, r: &ResourceRequirements, path: &str) {
    let empty = BTreeMap::new();
    let limits: &BTreeMap<String, K8sQuantity> = r.limits.as_ref().unwrap_or(&empty);
    let lim_path = format!("{path}.limits");
    let req_path = format!("{path}.requests");
    for (name, q) in limits {
        let p = key(&lim_path, name);
        container_resource_name_into(errs, name, &p);
        quantity_value_into(errs, name, &q.0, &p);
    }
    for (name, q) in r.requests.iter().flatten() {
        let p = key(&req_path, name);
        container_resource_name_into(errs, name, &p);
        quantity_value_into(errs, name, &q.0, &p);
        match limits.get(name) {
            Some(limit) => {
                let ord = quantity(&q.0)
                    .zip(quantity(&limit.0))
                    .and_then(|(a, b)| compare(&a, &b));
                if !overcommit_allowed(name) && ord.is_some_and(|o| o.is_ne()) {
                    errs.invalid(
                        &req_path,
                        &q.0,
                        format!("must be equal to {name} limit of {}", limit.0),
                    );
                } else if ord.is_some_and(|o| o.is_gt()) {
                    errs.invalid(
                        &req_path,
                        &q.0,
                        format!("must be less than or equal to {name} limit of {}", limit.0),
                    );
                }
            }
            None if !overcommit_allowed(name) => {
                errs.required(
                    &lim_path,
                    "Limit must be set for non overcommitable resources",
                );
            }
            None => {}
        }
    }
}

/// validateTolerations.
fn toleration_into(errs: &mut Errors, t: &Toleration, path: &str) {
    let key = t.key.as_deref().unwrap_or("");
    let op = t.operator.as_deref().unwrap_or("");
    let value = t.value.as_deref().unwrap_or("");
    if !key.is_empty()
        && let Some(m) = qualified_name(key)
    {
        errs.invalid(format!("{path}.key"), key, m);
    }
    if key.is_empty() && op != "Exists" {
        errs.invalid(
            format!("{path}.operator"),
            op,
            "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        );
    }
    if t.toleration_seconds.is_some() && t.effect.as_deref() != Some("NoExecute") {
        errs.invalid(
            format!("{path}.effect"),
            t.effect.as_deref().unwrap_or(""),
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        );
    }
    match op {
        "" | "Equal" => {
            if let Some(m) = label_value(value) {
                errs.invalid(format!("{path}.operator"), value, m);
            }
        }
        "Exists" => {
            if !value.is_empty() {
                errs.invalid(
                    format!("{path}.operator"),
                    value,
                    "value must be empty when `operator` is 'Exists'",
                );
            }
        }
        other => errs.not_supported(format!("{path}.operator"), other, &["Equal", "Exists"]),
    }
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && !TAINT_EFFECTS.contains(&effect)
    {
        errs.not_supported(format!("{path}.effect"), effect, &TAINT_EFFECTS);
    }
}

/// validateTopologySpreadConstraints.
fn spread_into(errs: &mut Errors, constraints: Option<&[TopologySpreadConstraint]>, path: &str) {
    let mut seen = HashSet::new();
    for (i, c) in constraints.into_iter().flatten().enumerate() {
        let p = format!("{path}.topologySpreadConstraints[{i}]");
        if c.max_skew <= 0 {
            errs.invalid_raw(format!("{p}.maxSkew"), c.max_skew, IS_NOT_POSITIVE);
        }
        if c.topology_key.is_empty() {
            errs.required(format!("{p}.topologyKey"), "can not be empty");
        } else if let Some(m) = qualified_name(&c.topology_key) {
            errs.invalid(format!("{p}.topologyKey"), &c.topology_key, m);
        }
        let action = c.when_unsatisfiable.as_str();
        if !["DoNotSchedule", "ScheduleAnyway"].contains(&action) {
            errs.not_supported(
                format!("{p}.whenUnsatisfiable"),
                action,
                &["DoNotSchedule", "ScheduleAnyway"],
            );
        }
        if let Some(min) = c.min_domains {
            if min <= 0 {
                errs.invalid_raw(format!("{p}.minDomains"), min, IS_NOT_POSITIVE);
            }
            if action != "DoNotSchedule" {
                errs.invalid_raw(
                    format!("{p}.minDomains"),
                    min,
                    format!(
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}"
                    ),
                );
            }
        }
        for (field, v) in [
            ("nodeAffinityPolicy", c.node_affinity_policy.as_deref()),
            ("nodeTaintsPolicy", c.node_taints_policy.as_deref()),
        ] {
            if let Some(v) = v
                && !["Honor", "Ignore"].contains(&v)
            {
                errs.not_supported(format!("{p}.{field}"), v, &["Honor", "Ignore"]);
            }
        }
        if let Some(sel) = c.label_selector.as_ref() {
            selector_into(errs, sel, &format!("{p}.labelSelector"));
        }
        if !seen.insert((c.topology_key.as_str(), action)) {
            errs.duplicate(&p, &format!("{{{}, {}}}", c.topology_key, action));
        }
    }
}
