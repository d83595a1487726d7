//! The scheduler's store of the cluster's objects other than nodes and
//! pods ([`KubeObject`], defined with the object model), fed by the
//! cluster source's change stream (as kube-scheduler keeps informer
//! caches); plugins read it through the framework handle.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use parking_lot::RwLock;

use crate::model::Labels;
use crate::model::objects::LABEL_METADATA_NAME;
pub use crate::model::objects::{KubeObject, ObjectDecodeError, ObjectKind};

type Key = (ObjectKind, String, String);

/// The scheduler's copy of the cluster's other objects.
#[derive(Debug, Default)]
pub struct ObjectStore {
    objects: RwLock<BTreeMap<Key, KubeObject>>,
    /// DRA objects, also kept pre-parsed.
    dra: super::dra::DraStore,
    /// Namespace labels, with `kubernetes.io/metadata.name` as the API
    /// server sets it.
    namespace_labels: RwLock<HashMap<String, Labels>>,
}

macro_rules! getter {
    ($name:ident, $list:ident, $variant:ident, $ty:ty) => {
        /// The object by namespace (empty for cluster-scoped kinds) and name.
        pub fn $name(&self, namespace: &str, name: &str) -> Option<Arc<$ty>> {
            match self.get(ObjectKind::$variant, namespace, name)? {
                KubeObject::$variant(o) => Some(o),
                _ => None,
            }
        }

        /// Every object of the kind in `namespace` (empty: all).
        pub fn $list(&self, namespace: &str) -> Vec<Arc<$ty>> {
            self.list(ObjectKind::$variant, namespace)
                .into_iter()
                .filter_map(|o| match o {
                    KubeObject::$variant(o) => Some(o),
                    _ => None,
                })
                .collect()
        }
    };
}

impl ObjectStore {
    /// The DRA objects, pre-parsed, with allocation bookkeeping.
    pub fn dra(&self) -> &super::dra::DraStore {
        &self.dra
    }

    /// Stores (adds or replaces) an object.
    pub fn upsert(&self, obj: KubeObject) {
        match &obj {
            KubeObject::DeviceClass(c) => self.dra.upsert_class(c.clone()),
            KubeObject::ResourceClaim(c) => self.dra.upsert_claim(c.clone()),
            KubeObject::ResourceSlice(s) => self.dra.upsert_slice(s),
            KubeObject::DeviceTaintRule(r) => self.dra.upsert_taint_rule(r.clone()),
            _ => {}
        }
        if let KubeObject::Namespace(ns) = &obj {
            let name = ns.metadata.name.clone().unwrap_or_default();
            let mut labels = ns.metadata.labels.clone().unwrap_or_default();
            labels.insert(LABEL_METADATA_NAME.into(), name.clone());
            self.namespace_labels
                .write()
                .insert(name, Labels::from_map(Some(&labels)));
        }
        self.objects.write().insert(obj.key(), obj);
    }

    /// Removes an object.
    pub fn remove(&self, obj: &KubeObject) {
        let key = obj.key();
        match obj {
            KubeObject::DeviceClass(_) => self.dra.remove_class(&key.2),
            KubeObject::ResourceClaim(_) => self.dra.remove_claim(&key.1, &key.2),
            KubeObject::ResourceSlice(_) => self.dra.remove_slice(&key.2),
            KubeObject::DeviceTaintRule(_) => self.dra.remove_taint_rule(&key.2),
            _ => {}
        }
        if key.0 == ObjectKind::Namespace {
            self.namespace_labels.write().remove(&key.2);
        }
        self.objects.write().remove(&key);
    }

    /// The object of `kind` by namespace and name.
    pub fn get(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<KubeObject> {
        let ns = if kind.namespaced() { namespace } else { "" };
        self.objects
            .read()
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `kind` in `namespace` (empty: all), sorted by namespace
    /// then name.
    pub fn list(&self, kind: ObjectKind, namespace: &str) -> Vec<KubeObject> {
        self.objects
            .read()
            .range((kind, String::new(), String::new())..)
            .take_while(|((k, _, _), _)| *k == kind)
            .filter(|((_, ns, _), _)| namespace.is_empty() || ns == namespace)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The labels of namespace `name`: its own plus
    /// `kubernetes.io/metadata.name`, even when the namespace object is not
    /// known (the API server always sets that label).
    pub fn namespace_labels(&self, name: &str) -> Labels {
        if let Some(l) = self.namespace_labels.read().get(name) {
            return l.clone();
        }
        let m = BTreeMap::from([(LABEL_METADATA_NAME.to_string(), name.to_string())]);
        Labels::from_map(Some(&m))
    }

    /// Names of the namespaces whose labels match `selector`, among the
    /// known namespaces.
    pub fn namespaces_matching(&self, selector: &crate::model::LabelSelector) -> Vec<String> {
        self.namespace_labels
            .read()
            .iter()
            .filter(|(_, l)| selector.matches(l))
            .map(|(n, _)| n.clone())
            .collect()
    }

    getter!(namespace, namespaces, Namespace, Namespace);
    getter!(
        persistent_volume,
        persistent_volumes,
        PersistentVolume,
        PersistentVolume
    );
    getter!(
        persistent_volume_claim,
        persistent_volume_claims,
        PersistentVolumeClaim,
        PersistentVolumeClaim
    );
    getter!(storage_class, storage_classes, StorageClass, StorageClass);
    getter!(csi_node, csi_nodes, CsiNode, CSINode);
    getter!(
        pod_disruption_budget,
        pod_disruption_budgets,
        PodDisruptionBudget,
        PodDisruptionBudget
    );
    getter!(service, services, Service, Service);
    getter!(replica_set, replica_sets, ReplicaSet, ReplicaSet);
    getter!(stateful_set, stateful_sets, StatefulSet, StatefulSet);
    getter!(
        replication_controller,
        replication_controllers,
        ReplicationController,
        ReplicationController
    );
    getter!(device_class, device_classes, DeviceClass, DeviceClass);
    getter!(
        resource_claim,
        resource_claims,
        ResourceClaim,
        ResourceClaim
    );
    getter!(
        resource_claim_template,
        resource_claim_templates,
        ResourceClaimTemplate,
        ResourceClaimTemplate
    );
    getter!(
        resource_slice,
        resource_slices,
        ResourceSlice,
        ResourceSlice
    );
    getter!(pod_group, pod_groups, PodGroup, PodGroup);
    getter!(workload, workloads, Workload, Workload);
    getter!(
        device_taint_rule,
        device_taint_rules,
        DeviceTaintRule,
        DeviceTaintRule
    );
    getter!(csi_driver, csi_drivers, CsiDriver, CSIDriver);
    getter!(
        csi_storage_capacity,
        csi_storage_capacities,
        CsiStorageCapacity,
        CSIStorageCapacity
    );
    getter!(
        priority_class,
        priority_classes,
        PriorityClass,
        PriorityClass
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn store_and_namespace_labels() {
        let s = ObjectStore::default();
        let ns = KubeObject::from_json(
            ObjectKind::Namespace,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"env": "prod"}}}),
        )
        .unwrap();
        s.upsert(ns.clone());
        let l = s.namespace_labels("team-a");
        assert_eq!(l.get("env"), Some("prod"));
        assert_eq!(l.get(LABEL_METADATA_NAME), Some("team-a"));
        assert_eq!(
            s.namespace_labels("unknown").get(LABEL_METADATA_NAME),
            Some("unknown")
        );
        let pvc = KubeObject::from_json(
            ObjectKind::PersistentVolumeClaim,
            json!({"metadata": {"name": "data", "namespace": "team-a"}, "spec": {}}),
        )
        .unwrap();
        s.upsert(pvc.clone());
        assert!(s.persistent_volume_claim("team-a", "data").is_some());
        assert_eq!(s.persistent_volume_claims("").len(), 1);
        assert_eq!(s.persistent_volume_claims("other").len(), 0);
        assert!(s.namespace("", "team-a").is_some());
        s.remove(&pvc);
        assert!(s.persistent_volume_claim("team-a", "data").is_none());
        s.remove(&ns);
        assert_eq!(s.namespace_labels("team-a").get("env"), None);
        assert_eq!(
            ObjectKind::parse("pvc"),
            Some(ObjectKind::PersistentVolumeClaim)
        );
        assert_eq!(
            ObjectKind::parse("StorageClasses"),
            Some(ObjectKind::StorageClass)
        );
        assert_eq!(
            ObjectKind::parse("csistoragecapacities"),
            Some(ObjectKind::CsiStorageCapacity)
        );
        assert_eq!(
            ObjectKind::parse("devicetaintrules"),
            Some(ObjectKind::DeviceTaintRule)
        );
        assert_eq!(ObjectKind::parse("pc"), Some(ObjectKind::PriorityClass));
    }
}
