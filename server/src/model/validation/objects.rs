//! The API server's create validation of the other kinds berth stores:
//! Namespace, PersistentVolume, PersistentVolumeClaim (core), StorageClass
//! and CSINode (storage.k8s.io), PodDisruptionBudget (policy), Service,
//! ReplicaSet, StatefulSet, ReplicationController (their pod templates as
//! pods), and the resource.k8s.io kinds (DeviceClass, ResourceClaim,
//! ResourceClaimTemplate, ResourceSlice); for DeviceTaintRule, CSIDriver,
//! CSIStorageCapacity and PriorityClass, their metadata (their specs are
//! checked where they are used).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, PodTemplateSpec, ReplicationController,
    Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceRequest, DeviceTaintRule, ResourceClaim, ResourceClaimSpec,
    ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    Errors, IS_NEGATIVE, IS_NOT_POSITIVE, NameRule, dns1123_label, dns1123_subdomain, key,
    labels_into, meta_into, nonnegative_into, port_into, positive_quantity_into, qualified_name,
    selector_into, validate_pod_spec,
};
use crate::model::InvalidObject;

/// Any object of the kinds below, by reference.
pub enum ObjectRef<'a> {
    /// A namespace.
    Namespace(&'a Namespace),
    /// A persistent volume.
    PersistentVolume(&'a PersistentVolume),
    /// A persistent volume claim.
    PersistentVolumeClaim(&'a PersistentVolumeClaim),
    /// A storage class.
    StorageClass(&'a StorageClass),
    /// A CSI node.
    CsiNode(&'a CSINode),
    /// A disruption budget.
    PodDisruptionBudget(&'a PodDisruptionBudget),
    /// A service.
    Service(&'a Service),
    /// A replica set.
    ReplicaSet(&'a ReplicaSet),
    /// A stateful set.
    StatefulSet(&'a StatefulSet),
    /// A replication controller.
    ReplicationController(&'a ReplicationController),
    /// A device class.
    DeviceClass(&'a DeviceClass),
    /// A resource claim.
    ResourceClaim(&'a ResourceClaim),
    /// A device taint rule (metadata only).
    DeviceTaintRule(&'a DeviceTaintRule),
    /// A CSI driver (metadata only).
    CsiDriver(&'a CSIDriver),
    /// A CSI storage capacity (metadata only).
    CsiStorageCapacity(&'a CSIStorageCapacity),
    /// A priority class (metadata only).
    PriorityClass(&'a PriorityClass),
    /// A PodGroup (metadata here; its spec by the pod group admission).
    PodGroup(&'a k8s_openapi::api::scheduling::v1beta1::PodGroup),
    /// A Workload (metadata only).
    Workload(&'a k8s_openapi::api::scheduling::v1beta1::Workload),
    /// A resource claim template.
    ResourceClaimTemplate(&'a ResourceClaimTemplate),
    /// A resource slice.
    ResourceSlice(&'a ResourceSlice),
}

/// Validates an object as the API server does on create.
pub fn validate_object(obj: ObjectRef<'_>) -> Result<(), InvalidObject> {
    let mut e = Errors::default();
    let errs = &mut e;
    let meta = |errs: &mut Errors, m: &ObjectMeta, namespaced: bool, rule: NameRule| {
        meta_into(errs, m, namespaced, rule, "metadata")
    };
    match obj {
        ObjectRef::Namespace(o) => meta(errs, &o.metadata, false, NameRule::Label),
        ObjectRef::PersistentVolume(o) => {
            meta(errs, &o.metadata, false, NameRule::Subdomain);
            persistent_volume(errs, o);
        }
        ObjectRef::DeviceTaintRule(o) => meta(errs, &o.metadata, false, NameRule::Subdomain),
        ObjectRef::CsiDriver(o) => meta(errs, &o.metadata, false, NameRule::Subdomain),
        ObjectRef::CsiStorageCapacity(o) => meta(errs, &o.metadata, true, NameRule::Subdomain),
        ObjectRef::PriorityClass(o) => meta(errs, &o.metadata, false, NameRule::Subdomain),
        ObjectRef::PodGroup(o) => meta(errs, &o.metadata, true, NameRule::Subdomain),
        ObjectRef::Workload(o) => meta(errs, &o.metadata, true, NameRule::Subdomain),
        ObjectRef::PersistentVolumeClaim(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            persistent_volume_claim(errs, o);
        }
        ObjectRef::StorageClass(o) => {
            meta(errs, &o.metadata, false, NameRule::Subdomain);
            storage_class(errs, o);
        }
        ObjectRef::CsiNode(o) => {
            meta(errs, &o.metadata, false, NameRule::Subdomain);
            csi_node(errs, o);
        }
        ObjectRef::PodDisruptionBudget(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            pod_disruption_budget(errs, o);
        }
        ObjectRef::Service(o) => {
            meta(errs, &o.metadata, true, NameRule::Dns1035);
            service(errs, o);
        }
        ObjectRef::ReplicaSet(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            let s = &o.spec;
            nonnegative_into(errs, s.replicas.unwrap_or(1).into(), "spec.replicas");
            workload(errs, Some(&s.selector), s.template.as_ref(), &["Always"]);
        }
        ObjectRef::StatefulSet(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            let s = &o.spec;
            nonnegative_into(errs, s.replicas.unwrap_or(1).into(), "spec.replicas");
            workload(errs, Some(&s.selector), Some(&s.template), &["Always"]);
        }
        ObjectRef::ReplicationController(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            if let Some(s) = o.spec.as_ref() {
                nonnegative_into(errs, s.replicas.unwrap_or(1).into(), "spec.replicas");
                replication_controller(errs, s.selector.as_ref(), s.template.as_ref());
            }
        }
        ObjectRef::DeviceClass(o) => {
            meta(errs, &o.metadata, false, NameRule::Subdomain);
            let selectors = o.spec.as_ref().and_then(|s| s.selectors.as_ref());
            for (i, s) in selectors.into_iter().flatten().enumerate() {
                let p = format!("spec.selectors[{i}]");
                match s.cel.as_ref() {
                    None => errs.required(format!("{p}.cel"), ""),
                    Some(c) if c.expression.trim().is_empty() => {
                        errs.required(format!("{p}.cel.expression"), "")
                    }
                    Some(_) => {}
                }
            }
        }
        ObjectRef::ResourceClaim(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            if let Some(spec) = o.spec.as_ref() {
                claim_spec(errs, spec, "spec");
            }
        }
        ObjectRef::ResourceClaimTemplate(o) => {
            meta(errs, &o.metadata, true, NameRule::Subdomain);
            if let Some(spec) = o.spec.as_ref().and_then(|s| s.spec.as_ref()) {
                claim_spec(errs, spec, "spec.spec");
            }
        }
        ObjectRef::ResourceSlice(o) => {
            meta(errs, &o.metadata, false, NameRule::Subdomain);
            resource_slice(errs, o);
        }
    }
    e.into_result()
}

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// The volume sources a PersistentVolume may have (one).
const PV_SOURCES: [&str; 22] = [
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

fn access_modes(errs: &mut Errors, modes: Option<&Vec<String>>, path: &str, detail: &str) {
    let modes = modes.map(Vec::as_slice).unwrap_or_default();
    if modes.is_empty() {
        errs.required(path, detail);
    }
    for m in modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            errs.not_supported(path, m, &ACCESS_MODES);
        }
    }
}

fn class_name(errs: &mut Errors, name: Option<&str>, path: &str) {
    if let Some(n) = name.filter(|n| !n.is_empty())
        && let Some(m) = dns1123_subdomain(n)
    {
        errs.invalid(path, n, m);
    }
}

/// ValidatePersistentVolumeSpec.
fn persistent_volume(errs: &mut Errors, pv: &PersistentVolume) {
    let Some(spec) = pv.spec.as_ref() else {
        errs.required("spec", "must specify a volume type");
        return;
    };
    access_modes(errs, spec.access_modes.as_ref(), "spec.accessModes", "");
    let empty = BTreeMap::new();
    let capacity = spec.capacity.as_ref().unwrap_or(&empty);
    if capacity.is_empty() {
        errs.required("spec.capacity", "");
    }
    for (name, q) in capacity {
        if name != "storage" {
            errs.not_supported("spec.capacity", name, &["storage"]);
        }
        positive_quantity_into(errs, &q.0, &key("spec.capacity", name));
    }
    if let Some(p) = spec.persistent_volume_reclaim_policy.as_deref()
        && !["Delete", "Recycle", "Retain"].contains(&p)
    {
        errs.not_supported(
            "spec.persistentVolumeReclaimPolicy",
            p,
            &["Delete", "Recycle", "Retain"],
        );
    }
    class_name(
        errs,
        spec.storage_class_name.as_deref(),
        "spec.storageClassName",
    );
    if let Some(m) = spec.volume_mode.as_deref()
        && !["Block", "Filesystem"].contains(&m)
    {
        errs.not_supported("spec.volumeMode", m, &["Block", "Filesystem"]);
    }
    let json = serde_json::to_value(spec).unwrap_or_default();
    let sources = PV_SOURCES
        .iter()
        .filter(|s| json.get(**s).is_some_and(|v| !v.is_null()))
        .count();
    match sources {
        0 => errs.required("spec", "must specify a volume type"),
        1 => {}
        _ => errs.forbidden("spec", "may not specify more than 1 volume type"),
    }
}

/// ValidatePersistentVolumeClaimSpec.
fn persistent_volume_claim(errs: &mut Errors, pvc: &PersistentVolumeClaim) {
    let Some(spec) = pvc.spec.as_ref() else {
        errs.required("spec.accessModes", "at least 1 access mode is required");
        return;
    };
    access_modes(
        errs,
        spec.access_modes.as_ref(),
        "spec.accessModes",
        "at least 1 access mode is required",
    );
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    match storage {
        None => errs.required(key("spec.resources", "storage"), ""),
        Some(q) => positive_quantity_into(errs, &q.0, &key("spec.resources", "storage")),
    }
    class_name(
        errs,
        spec.storage_class_name.as_deref(),
        "spec.storageClassName",
    );
    if let Some(m) = spec.volume_mode.as_deref()
        && !["Block", "Filesystem"].contains(&m)
    {
        errs.not_supported("spec.volumeMode", m, &["Block", "Filesystem"]);
    }
}

/// ValidateStorageClass.
fn storage_class(errs: &mut Errors, sc: &StorageClass) {
    if sc.provisioner.is_empty() {
        errs.required("provisioner", "");
    } else if sc.provisioner.len() > 63 {
        errs.other("provisioner", "Too long: may not be more than 63 bytes");
    } else if let Some(m) = qualified_name(&sc.provisioner.to_ascii_lowercase()) {
        errs.invalid("provisioner", &sc.provisioner, m);
    }
    if let Some(p) = sc.reclaim_policy.as_deref()
        && !["Delete", "Retain"].contains(&p)
    {
        errs.not_supported("reclaimPolicy", p, &["Delete", "Retain"]);
    }
    if let Some(m) = sc.volume_binding_mode.as_deref()
        && !["Immediate", "WaitForFirstConsumer"].contains(&m)
    {
        errs.not_supported(
            "volumeBindingMode",
            m,
            &["Immediate", "WaitForFirstConsumer"],
        );
    }
}

/// ValidateCSINode's spec: drivers named (CSI driver names), unique, with
/// a node id and a non-negative volume count.
fn csi_node(errs: &mut Errors, n: &CSINode) {
    let mut names = HashSet::new();
    for (i, d) in n.spec.drivers.iter().enumerate() {
        let p = format!("spec.drivers[{i}]");
        if d.name.is_empty() {
            errs.required(format!("{p}.name"), "");
        } else if d.name.len() > 63 {
            errs.other(
                format!("{p}.name"),
                "Too long: may not be more than 63 bytes",
            );
        } else if let Some(m) = dns1123_subdomain(&d.name.to_ascii_lowercase()) {
            errs.invalid(format!("{p}.name"), &d.name, m);
        } else if !names.insert(d.name.as_str()) {
            errs.duplicate(format!("{p}.name"), &d.name);
        }
        if d.node_id.is_empty() {
            errs.required(format!("{p}.nodeID"), "");
        }
        if let Some(c) = d.allocatable.as_ref().and_then(|a| a.count) {
            nonnegative_into(errs, c.into(), &format!("{p}.allocatable.count"));
        }
        for (j, k) in d.topology_keys.iter().flatten().enumerate() {
            if let Some(m) = qualified_name(k) {
                errs.invalid(format!("{p}.topologyKeys[{j}]"), k, m);
            }
        }
    }
}

/// ValidatePositiveIntOrPercent with IsNotMoreThan100Percent.
fn int_or_percent(errs: &mut Errors, v: &IntOrString, path: &str) {
    match v {
        IntOrString::Int(i) => nonnegative_into(errs, (*i).into(), path),
        IntOrString::String(s) => {
            let number = s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok());
            match number {
                None => errs.invalid(path, s, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"),
                Some(n) if n > 100 => errs.invalid(path, s, "must not be greater than 100%"),
                Some(_) => {}
            }
        }
    }
}

/// ValidatePodDisruptionBudgetSpec.
fn pod_disruption_budget(errs: &mut Errors, pdb: &PodDisruptionBudget) {
    let Some(spec) = pdb.spec.as_ref() else {
        return;
    };
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        errs.other(
            "spec",
            "Invalid value: \"minAvailable and maxUnavailable\": minAvailable and maxUnavailable cannot be both set",
        );
    }
    if let Some(v) = spec.min_available.as_ref() {
        int_or_percent(errs, v, "spec.minAvailable");
    }
    if let Some(v) = spec.max_unavailable.as_ref() {
        int_or_percent(errs, v, "spec.maxUnavailable");
    }
    if let Some(sel) = spec.selector.as_ref() {
        selector_into(errs, sel, "spec.selector");
    }
    if let Some(p) = spec.unhealthy_pod_eviction_policy.as_deref()
        && !["AlwaysAllow", "IfHealthyBudget"].contains(&p)
    {
        errs.not_supported(
            "spec.unhealthyPodEvictionPolicy",
            p,
            &["AlwaysAllow", "IfHealthyBudget"],
        );
    }
}

/// ValidateService, for what the scheduler reads: the selector and the
/// ports.
fn service(errs: &mut Errors, svc: &Service) {
    let Some(spec) = svc.spec.as_ref() else {
        return;
    };
    labels_into(errs, spec.selector.as_ref(), "spec.selector");
    let mut names = HashSet::new();
    let ports = spec.ports.as_deref().unwrap_or_default();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        match p.name.as_deref().filter(|n| !n.is_empty()) {
            None if ports.len() > 1 => errs.required(format!("{at}.name"), ""),
            None => {}
            Some(n) => {
                if let Some(m) = dns1123_label(n) {
                    errs.invalid(format!("{at}.name"), n, m);
                } else if !names.insert(n) {
                    errs.duplicate(format!("{at}.name"), n);
                }
            }
        }
        port_into(errs, p.port, &format!("{at}.port"));
        if let Some(proto) = p.protocol.as_deref()
            && !["SCTP", "TCP", "UDP"].contains(&proto)
        {
            errs.not_supported(format!("{at}.protocol"), proto, &["SCTP", "TCP", "UDP"]);
        }
    }
    if let Some(t) = spec.type_.as_deref()
        && !["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"].contains(&t)
    {
        errs.not_supported(
            "spec.type",
            t,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        );
    }
}

/// A template's labels as a selector sees them.
fn template_labels(t: Option<&PodTemplateSpec>) -> BTreeMap<String, String> {
    t.and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// Whether `sel` selects a pod labelled `labels`.
fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let parsed = crate::model::LabelSelector::parse(Some(sel), "spec.selector");
    let set = crate::model::Labels::from_map(Some(labels));
    parsed.is_ok_and(|s| s.matches(&set))
}

/// ReplicaSet and StatefulSet: a non-empty selector that selects the
/// template's labels, and the template as a pod (restart policy Always).
fn workload(
    errs: &mut Errors,
    selector: Option<&LabelSelector>,
    template: Option<&PodTemplateSpec>,
    restart: &[&str],
) {
    let empty = selector.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    });
    match selector {
        Some(s) if !empty => {
            selector_into(errs, s, "spec.selector");
            let labels = template_labels(template);
            if !selects(s, &labels) {
                errs.other(
                    "spec.template.metadata.labels",
                    format!(
                        "Invalid value: {}: `selector` does not match template `labels`",
                        go_map(&labels)
                    ),
                );
            }
        }
        _ => errs.required("spec.selector", ""),
    }
    template_into(errs, template, restart);
}

fn template_into(errs: &mut Errors, template: Option<&PodTemplateSpec>, restart: &[&str]) {
    let Some(t) = template else {
        errs.required("spec.template", "");
        return;
    };
    if let Some(m) = t.metadata.as_ref() {
        labels_into(errs, m.labels.as_ref(), "spec.template.metadata.labels");
    }
    match t.spec.as_ref() {
        None => errs.required("spec.template.spec", ""),
        Some(spec) => {
            validate_pod_spec(errs, spec, "spec.template.spec");
            let policy = spec.restart_policy.as_deref().unwrap_or("Always");
            if !restart.contains(&policy) {
                errs.not_supported("spec.template.spec.restartPolicy", policy, restart);
            }
        }
    }
}

/// ValidateReplicationControllerSpec: a non-empty selector map matching
/// the template's labels.
fn replication_controller(
    errs: &mut Errors,
    selector: Option<&BTreeMap<String, String>>,
    template: Option<&PodTemplateSpec>,
) {
    match selector.filter(|s| !s.is_empty()) {
        None => errs.required("spec.selector", ""),
        Some(sel) => {
            labels_into(errs, Some(sel), "spec.selector");
            let labels = template_labels(template);
            if template.is_some() && !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                errs.other(
                    "spec.template.metadata.labels",
                    format!(
                        "Invalid value: {}: `selector` does not match template `labels`",
                        go_map(&labels)
                    ),
                );
            }
        }
    }
    template_into(errs, template, &["Always"]);
}

/// A label map as Go's %#v prints it in the API server's message.
fn go_map(m: &BTreeMap<String, String>) -> String {
    let entries: Vec<String> = m.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
    format!("map[string]string{{{}}}", entries.join(", "))
}

/// A ResourceClaim's spec (resource.k8s.io validateResourceClaimSpec):
/// requests named (DNS labels, unique), each exactly one of `exactly` and
/// `firstAvailable`, with a device class and a count that fits the mode.
fn claim_spec(errs: &mut Errors, spec: &ResourceClaimSpec, path: &str) {
    let Some(devices) = spec.devices.as_ref() else {
        return;
    };
    let mut names = HashSet::new();
    for (i, r) in devices.requests.iter().flatten().enumerate() {
        let p = format!("{path}.devices.requests[{i}]");
        request_name(errs, &r.name, &format!("{p}.name"), &mut names);
        device_request(errs, r, &p);
    }
}

fn request_name<'a>(errs: &mut Errors, name: &'a str, path: &str, names: &mut HashSet<&'a str>) {
    if name.is_empty() {
        errs.required(path, "");
    } else if let Some(m) = dns1123_label(name) {
        errs.invalid(path, name, m);
    } else if !names.insert(name) {
        errs.duplicate(path, name);
    }
}

fn device_request(errs: &mut Errors, r: &DeviceRequest, path: &str) {
    match (r.exactly.as_ref(), r.first_available.as_ref()) {
        (None, None) => errs.required(path, "exactly one of `exactly` or `firstAvailable` is required"),
        (Some(_), Some(_)) => errs.other(
            path,
            "Invalid value: \"{`exactly`, `firstAvailable`}\": exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        ),
        (Some(e), None) => exact(
            errs,
            &e.device_class_name,
            e.allocation_mode.as_deref(),
            e.count,
            &format!("{path}.exactly"),
        ),
        (None, Some(subs)) => {
            if subs.is_empty() {
                errs.required(format!("{path}.firstAvailable"), "");
            }
            let mut names = HashSet::new();
            for (j, s) in subs.iter().enumerate() {
                let p = format!("{path}.firstAvailable[{j}]");
                request_name(errs, &s.name, &format!("{p}.name"), &mut names);
                exact(
                    errs,
                    &s.device_class_name,
                    s.allocation_mode.as_deref(),
                    s.count,
                    &p,
                );
            }
        }
    }
}

fn exact(errs: &mut Errors, class: &str, mode: Option<&str>, count: Option<i64>, path: &str) {
    if class.is_empty() {
        errs.required(format!("{path}.deviceClassName"), "");
    } else if let Some(m) = dns1123_subdomain(class) {
        errs.invalid(format!("{path}.deviceClassName"), class, m);
    }
    match mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            if let Some(c) = count.filter(|c| *c <= 0) {
                errs.invalid_raw(format!("{path}.count"), c, IS_NOT_POSITIVE);
            }
        }
        "All" => {
            if let Some(c) = count.filter(|c| *c != 0) {
                errs.invalid_raw(
                    format!("{path}.count"),
                    c,
                    "must not be specified when allocationMode is 'All'",
                );
            }
        }
        other => errs.not_supported(
            format!("{path}.allocationMode"),
            other,
            &["All", "ExactCount"],
        ),
    }
}

/// A ResourceSlice's spec: a driver, a pool, exactly one way of naming
/// its nodes, devices named (DNS labels, unique).
fn resource_slice(errs: &mut Errors, s: &ResourceSlice) {
    let spec = &s.spec;
    if spec.driver.is_empty() {
        errs.required("spec.driver", "");
    } else if spec.driver.len() > 63 {
        errs.other("spec.driver", "Too long: may not be more than 63 bytes");
    } else if let Some(m) = dns1123_subdomain(&spec.driver) {
        errs.invalid("spec.driver", &spec.driver, m);
    }
    if spec.pool.name.is_empty() {
        errs.required("spec.pool.name", "");
    }
    if spec.pool.generation < 0 {
        errs.invalid_raw("spec.pool.generation", spec.pool.generation, IS_NEGATIVE);
    }
    if spec.pool.resource_slice_count <= 0 {
        errs.invalid_raw(
            "spec.pool.resourceSliceCount",
            spec.pool.resource_slice_count,
            IS_NOT_POSITIVE,
        );
    }
    let mut set = Vec::new();
    if let Some(n) = spec.node_name.as_deref() {
        set.push("`nodeName`");
        if let Some(m) = dns1123_subdomain(n) {
            errs.invalid("spec.nodeName", n, m);
        }
    }
    if spec.node_selector.is_some() {
        set.push("`nodeSelector`");
    }
    if spec.all_nodes == Some(true) {
        set.push("`allNodes`");
    }
    if spec.per_device_node_selection == Some(true) {
        set.push("`perDeviceNodeSelection`");
    }
    const WHICH: &str = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => errs.required("spec", WHICH),
        1 => {}
        _ => errs.invalid(
            "spec",
            &format!("{{{}}}", set.join(", ")),
            format!("{WHICH}, but multiple fields are set"),
        ),
    }
    let mut names = HashSet::new();
    for (i, d) in spec.devices.iter().flatten().enumerate() {
        request_name(
            errs,
            &d.name,
            &format!("spec.devices[{i}].name"),
            &mut names,
        );
    }
}
