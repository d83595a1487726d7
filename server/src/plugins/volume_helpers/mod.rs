//! Storage helpers the volume plugins share, with the semantics of
//! upstream's `component-helpers/storage/volume` and `.../ephemeral`:
//! storage classes of claims and volumes, claim names of a pod's volumes,
//! volume node affinity, zone label sets and API-style "not found" texts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, TopologySelectorTerm, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cache::KubeObject;
use crate::framework::{EventObject, QueueingHint};
use crate::model::{Labels, NodeSelectorTerm, PodInfo};

/// Set by the scheduler on claims it wants provisioned on a node.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PV controller once a claim is bound.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on volumes the controller (or the scheduler) bound.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The beta annotation naming a storage class (read before the spec field).
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of classes without dynamic provisioning.
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The CSINode annotation listing in-tree plugins migrated to CSI.
pub const ANN_MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// `volumeBindingMode` of classes whose claims wait for a pod.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
/// The legacy zone label.
pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// The legacy region label.
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// The separator of several zones in one zone label value.
pub const MULTI_ZONE_DELIMITER: &str = "__";

/// The API's message for a missing object, as listers report it, e.g.
/// `persistentvolumeclaim "data" not found`.
pub fn not_found(resource: &str, name: &str) -> String {
    format!("{resource} {name:?} not found")
}

/// The storage class of a claim: the beta annotation, else
/// `spec.storageClassName`, else "".
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    if let Some(c) = annotation(&pvc.metadata, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// The storage class of a volume: the beta annotation, else
/// `spec.storageClassName`, else "".
pub fn volume_class(pv: &PersistentVolume) -> &str {
    if let Some(c) = annotation(&pv.metadata, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// An annotation's value.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// `spec.volumeName` of a claim ("" when unset).
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Whether the claim's access modes include `mode`.
pub fn claim_has_access_mode(pvc: &PersistentVolumeClaim, mode: &str) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .is_some_and(|m| m.iter().any(|x| x == mode))
}

/// The claim a volume of `pod` uses: `(name, is a generic ephemeral volume)`,
/// or `None` for volumes without a claim. Ephemeral volumes' claims are
/// named `<pod>-<volume>`.
pub fn volume_claim(pod: &PodInfo, vol: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &vol.persistent_volume_claim {
        return Some((c.claim_name.clone(), false));
    }
    vol.ephemeral
        .as_ref()
        .map(|_| (format!("{}-{}", pod.name, vol.name), true))
}

/// The pod's volumes.
pub fn pod_volumes(pod: &PodInfo) -> &[Volume] {
    pod.pod.volumes()
}

/// The queueing hint of a PersistentVolumeClaim that was added (or
/// changed): it may help `pod` only if it is one of the pod's claims (in
/// its namespace, named by one of its volumes). One rule for every plugin
/// that waits for a pod's claims (NodeVolumeLimits, VolumeBinding); `what`
/// names the hint in the error for objects of another kind.
pub fn claim_queueing_hint(
    pod: &PodInfo,
    new: Option<&EventObject>,
    what: &str,
) -> Result<QueueingHint, String> {
    let Some(KubeObject::PersistentVolumeClaim(pvc)) = new.and_then(|n| n.as_object()) else {
        return Err(format!("unexpected objects in {what}"));
    };
    if pvc.metadata.namespace.as_deref() != Some(&*pod.namespace) {
        return Ok(QueueingHint::Skip);
    }
    let name = pvc.metadata.name.as_deref().unwrap_or("");
    let used = pod_volumes(pod)
        .iter()
        .filter_map(|v| volume_claim(pod, v))
        .any(|(c, _)| c == name);
    Ok(if used {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

/// Checks that the claim of a generic ephemeral volume was made for `pod`:
/// in its namespace and controlled by it.
pub fn volume_is_for_pod(pod: &PodInfo, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let ns = pvc.metadata.namespace.as_deref().unwrap_or("default");
    let controlled = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid.as_str() == &*pod.uid);
    if ns != &*pod.namespace || !controlled {
        return Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            ns,
            pvc.metadata.name.as_deref().unwrap_or(""),
            pod.namespace,
            pod.name
        ));
    }
    Ok(())
}

/// The zones of a zone (or region) label value: `a__b` is `{a, b}`;
/// `None` when an entry is empty (the label is then ignored).
pub fn label_zones_to_set(value: &str) -> Option<Vec<String>> {
    let mut zones = Vec::new();
    for z in value.split(MULTI_ZONE_DELIMITER) {
        let z = z.trim();
        if z.is_empty() {
            return None;
        }
        if !zones.iter().any(|x: &String| x == z) {
            zones.push(z.to_string());
        }
    }
    zones.sort();
    Some(zones)
}

/// A volume's required node affinity, pre-parsed. Terms that do not parse
/// match no node (as upstream's lazy-error selector treats them).
#[derive(Debug, Clone, Default)]
pub struct VolumeNodeAffinity {
    /// `None`: no requirement, every node matches.
    terms: Option<Vec<Option<NodeSelectorTerm>>>,
}

impl VolumeNodeAffinity {
    /// Parses `spec.nodeAffinity.required` of `pv`.
    pub fn of(pv: &PersistentVolume) -> Self {
        let required = pv
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref());
        Self {
            terms: required.map(|r| {
                r.node_selector_terms
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        NodeSelectorTerm::parse(
                            t,
                            &format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}]"),
                        )
                        .ok()
                    })
                    .collect()
            }),
        }
    }

    /// Whether a node with `labels` satisfies the affinity (upstream's
    /// `CheckNodeAffinity`, which matches on labels alone: field selectors
    /// see an empty node name).
    pub fn matches(&self, labels: &Labels) -> bool {
        match &self.terms {
            None => true,
            Some(terms) => terms.iter().flatten().any(|t| t.matches(labels, "")),
        }
    }
}

/// Whether node labels satisfy a class's `allowedTopologies` (no terms:
/// any node; a term with no expression selects nothing; each expression
/// is `key In values`).
pub fn match_topology_selector_terms(
    terms: Option<&Vec<TopologySelectorTerm>>,
    labels: &Labels,
) -> bool {
    let Some(terms) = terms.filter(|t| !t.is_empty()) else {
        return true;
    };
    terms.iter().any(|term| {
        let exprs = term.match_label_expressions.as_deref().unwrap_or(&[]);
        !exprs.is_empty()
            && exprs.iter().all(|e| {
                !e.values.is_empty()
                    && labels
                        .get(&e.key)
                        .is_some_and(|v| e.values.iter().any(|x| x == v))
            })
    })
}

/// An object's resourceVersion as a number (0 when unset or not numeric).
pub fn resource_version(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Node labels as a [`Labels`] set, from a label map.
pub fn labels_of(map: Option<&BTreeMap<String, String>>) -> Labels {
    Labels::from_map(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn zone_sets() {
        let cases = [
            ("single", "a", Some(vec!["a"])),
            ("several", "b__a", Some(vec!["a", "b"])),
            ("trimmed", " a __ b ", Some(vec!["a", "b"])),
            ("empty entry", "a____b", None),
            ("empty", "", None),
        ];
        for (name, value, want) in cases {
            let want = want.map(|w| w.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(label_zones_to_set(value), want, "{name}");
        }
    }

    #[test]
    fn classes_prefer_the_beta_annotation() {
        let c: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {ANN_BETA_STORAGE_CLASS: "beta"}},
            "spec": {"storageClassName": "ga"}
        }))
        .unwrap();
        assert_eq!(claim_class(&c), "beta");
        let c: PersistentVolumeClaim = serde_json::from_value(
            json!({"metadata": {"name": "c"}, "spec": {"storageClassName": "ga"}}),
        )
        .unwrap();
        assert_eq!(claim_class(&c), "ga");
        let v = pv(json!({"metadata": {"name": "v"}, "spec": {}}));
        assert_eq!(volume_class(&v), "");
    }

    #[test]
    fn node_affinity() {
        let labels = |z: &str| {
            labels_of(Some(&BTreeMap::from([(
                "topology.kubernetes.io/zone".to_string(),
                z.to_string(),
            )])))
        };
        let none = VolumeNodeAffinity::of(&pv(json!({"metadata": {"name": "v"}, "spec": {}})));
        assert!(none.matches(&labels("a")));
        let zoned = VolumeNodeAffinity::of(&pv(json!({"metadata": {"name": "v"}, "spec": {
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "Bogus"}]},
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}
            ]}}
        }})));
        assert!(zoned.matches(&labels("a")));
        assert!(!zoned.matches(&labels("b")));
        let empty = VolumeNodeAffinity::of(&pv(json!({"metadata": {"name": "v"}, "spec": {
            "nodeAffinity": {"required": {"nodeSelectorTerms": []}}
        }})));
        assert!(!empty.matches(&labels("a")), "no term matches nothing");
    }

    #[test]
    fn allowed_topologies() {
        let terms: Vec<TopologySelectorTerm> = serde_json::from_value(json!([
            {"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}
        ]))
        .unwrap();
        let l = |z: &str| labels_of(Some(&BTreeMap::from([("zone".to_string(), z.to_string())])));
        assert!(match_topology_selector_terms(None, &l("x")));
        assert!(match_topology_selector_terms(Some(&vec![]), &l("x")));
        assert!(match_topology_selector_terms(Some(&terms), &l("b")));
        assert!(!match_topology_selector_terms(Some(&terms), &l("c")));
        let empty_term = vec![TopologySelectorTerm::default()];
        assert!(!match_topology_selector_terms(Some(&empty_term), &l("a")));
    }
}

/// Fixtures the volume plugins' tests share.
#[cfg(test)]
pub mod testing {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use crate::cache::{KubeObject, NodeInfo, ObjectKind};
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::framework::{Handle, Parallelizer};
    use crate::model::{NodeSpec, PodInfo};

    /// A handle over an empty embedded cluster.
    pub fn handle() -> Handle {
        let c = EmbeddedCluster::new();
        Handle::new(c.clone(), c, Parallelizer::inline())
    }

    /// Puts an object given as JSON into the handle's object store.
    pub fn put(h: &Handle, kind: ObjectKind, v: Value) {
        h.objects()
            .upsert(KubeObject::from_json(kind, v).expect("valid object"));
    }

    /// A claim in `default` with the given spec (and optional status).
    pub fn pvc(name: &str, spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1"},
               "spec": spec, "status": status})
    }

    /// A volume with the given labels and spec.
    pub fn pv(name: &str, labels: Value, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
               "metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
               "spec": spec, "status": {"phase": "Available"}})
    }

    /// A storage class.
    pub fn class(name: &str, provisioner: &str, mode: Option<&str>) -> Value {
        let mut v = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": name}, "provisioner": provisioner});
        if let Some(m) = mode {
            v["volumeBindingMode"] = json!(m);
        }
        v
    }

    /// A pod volume using claim `claim`.
    pub fn claim_vol(name: &str, claim: &str) -> Value {
        json!({"name": name, "persistentVolumeClaim": {"claimName": claim}})
    }

    /// A node info holding `pods`.
    pub fn node_with(node: NodeSpec, pods: Vec<PodInfo>) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(node));
        for p in pods {
            n.add_pod(Arc::new(p));
        }
        n
    }
}
