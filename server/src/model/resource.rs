//! Resource amounts as integers: milli-CPU, bytes, counts.
//!
//! Built once from a pod's or node's resource lists; the scheduling hot path
//! only adds and compares integers. Extended and other scalar resources are
//! keyed by an interned [`ResourceName`], so comparing two names is comparing
//! two integers.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use parking_lot::RwLock;
use smallvec::SmallVec;

use super::quantity::{Quantity, QuantityError};

/// `cpu`
pub const CPU: &str = "cpu";
/// `memory`
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`: the number of pods a node accepts.
pub const PODS: &str = "pods";

/// Milli-CPU counted for a container that requests no CPU, for scoring only.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Bytes counted for a container that requests no memory, for scoring only.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An interned scalar resource name (extended resources, hugepages, ...).
///
/// Names are interned process-wide and never freed; the set of resource names
/// in a cluster is small and fixed by its device plugins and admins.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceName(u32);

struct Interner {
    ids: BTreeMap<Arc<str>, u32>,
    names: Vec<Arc<str>>,
    insufficient: Vec<&'static str>,
}

static INTERNER: LazyLock<RwLock<Interner>> = LazyLock::new(|| {
    RwLock::new(Interner {
        ids: BTreeMap::new(),
        names: Vec::new(),
        insufficient: Vec::new(),
    })
});

impl ResourceName {
    /// Interns `name`.
    pub fn intern(name: &str) -> Self {
        if let Some(&id) = INTERNER.read().ids.get(name) {
            return Self(id);
        }
        let mut w = INTERNER.write();
        if let Some(&id) = w.ids.get(name) {
            return Self(id);
        }
        let id = u32::try_from(w.names.len()).expect("fewer than 2^32 resource names");
        let name: Arc<str> = Arc::from(name);
        w.ids.insert(name.clone(), id);
        w.names.push(name.clone());
        // The reason NodeResourcesFit gives for this resource, made once so
        // that rejecting a node never allocates. Bounded like the names.
        w.insufficient
            .push(Box::leak(format!("Insufficient {name}").into_boxed_str()));
        Self(id)
    }

    /// The name as text.
    pub fn as_str(&self) -> Arc<str> {
        INTERNER.read().names[self.0 as usize].clone()
    }

    /// `Insufficient <name>`, the reason a node lacks this resource.
    pub fn insufficient_reason(&self) -> &'static str {
        INTERNER.read().insufficient[self.0 as usize]
    }
}

impl fmt::Debug for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_str())
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_str())
    }
}

/// Whether a resource name is a "native" Kubernetes resource: unprefixed or
/// in the `kubernetes.io/` domain.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || is_prefixed_native_resource(name)
}

/// Whether `name` is in the `kubernetes.io/` domain.
pub fn is_prefixed_native_resource(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// Whether `name` is an extended resource (a domain-prefixed name outside
/// `kubernetes.io/`).
pub fn is_extended_resource(name: &str) -> bool {
    !is_native_resource(name) && !name.starts_with("requests.")
}

/// Whether `name` is a hugepages resource.
pub fn is_hugepages_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Whether `name` is tracked as a scalar resource: extended, hugepages,
/// prefixed native or attachable volumes.
pub fn is_scalar_resource(name: &str) -> bool {
    is_extended_resource(name)
        || is_hugepages_resource(name)
        || is_prefixed_native_resource(name)
        || name.starts_with("attachable-volumes-")
}

/// Amounts of every resource the scheduler tracks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in thousandths of a core.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Local ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Pods a node accepts (`pods` in a node's allocatable); unused for pods.
    pub allowed_pod_number: i64,
    /// Scalar resources, sorted by name.
    pub scalar: SmallVec<[(ResourceName, i64); 2]>,
}

/// A resource list entry that is not a valid quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {error}")]
pub struct ResourceListError {
    /// The resource name (the key in the list).
    pub name: String,
    /// What is wrong with its quantity.
    pub error: QuantityError,
}

impl Resource {
    /// Parses a Kubernetes resource list (`requests`, `allocatable`, ...).
    /// Names the scheduler does not track are ignored, as upstream does.
    pub fn from_list(
        list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    ) -> Result<Self, ResourceListError> {
        let mut r = Self::default();
        for (name, q) in list {
            let err = |error| ResourceListError {
                name: name.clone(),
                error,
            };
            let q = Quantity::parse(&q.0).map_err(err)?;
            match name.as_str() {
                CPU => r.milli_cpu = q.milli_value().map_err(err)?,
                MEMORY => r.memory = q.value().map_err(err)?,
                EPHEMERAL_STORAGE => r.ephemeral_storage = q.value().map_err(err)?,
                PODS => r.allowed_pod_number = q.value().map_err(err)?,
                other if is_scalar_resource(other) => {
                    r.set_scalar(ResourceName::intern(other), q.value().map_err(err)?)
                }
                _ => {}
            }
        }
        Ok(r)
    }

    /// The amount of a scalar resource (0 when absent).
    pub fn scalar(&self, name: ResourceName) -> i64 {
        self.scalar
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Sets the amount of a scalar resource.
    pub fn set_scalar(&mut self, name: ResourceName, value: i64) {
        match self.scalar.binary_search_by_key(&name, |(n, _)| *n) {
            Ok(i) => self.scalar[i].1 = value,
            Err(i) => self.scalar.insert(i, (name, value)),
        }
    }

    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_add(other.allowed_pod_number);
        for &(name, v) in &other.scalar {
            let cur = self.scalar(name);
            self.set_scalar(name, cur.saturating_add(v));
        }
    }

    /// Subtracts `other` from `self`.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for &(name, v) in &other.scalar {
            let cur = self.scalar(name);
            self.set_scalar(name, cur - v);
        }
    }

    /// Raises each amount of `self` to at least the one in `other`.
    pub fn max_with(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for &(name, v) in &other.scalar {
            if v > self.scalar(name) {
                self.set_scalar(name, v);
            }
        }
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar.iter().all(|(_, v)| *v == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

    fn list(items: &[(&str, &str)]) -> BTreeMap<String, Q> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), Q(v.to_string())))
            .collect()
    }

    #[test]
    fn parses_known_names_and_ignores_others() {
        let r = Resource::from_list(&list(&[
            ("cpu", "1500m"),
            ("memory", "1Gi"),
            ("pods", "110"),
            ("example.com/gpu", "2"),
            ("hugepages-2Mi", "4Mi"),
            ("storage", "10Gi"),
        ]))
        .unwrap();
        assert_eq!(r.milli_cpu, 1500);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.allowed_pod_number, 110);
        assert_eq!(r.scalar(ResourceName::intern("example.com/gpu")), 2);
        assert_eq!(r.scalar(ResourceName::intern("hugepages-2Mi")), 4 << 20);
        assert_eq!(r.scalar.len(), 2, "storage is not tracked");
    }

    #[test]
    fn bad_quantity_names_the_resource() {
        let err = Resource::from_list(&list(&[("cpu", "lots")])).unwrap_err();
        assert_eq!(err.name, "cpu");
        assert!(err.to_string().starts_with("cpu: quantities must match"));
    }

    #[test]
    fn add_sub_max() {
        let gpu = ResourceName::intern("example.com/gpu");
        let mut a = Resource {
            milli_cpu: 100,
            memory: 10,
            ..Default::default()
        };
        a.set_scalar(gpu, 1);
        let mut b = Resource {
            milli_cpu: 50,
            memory: 20,
            ..Default::default()
        };
        b.set_scalar(gpu, 3);
        let mut sum = a.clone();
        sum.add(&b);
        assert_eq!((sum.milli_cpu, sum.memory, sum.scalar(gpu)), (150, 30, 4));
        sum.sub(&b);
        assert_eq!(sum, a);
        a.max_with(&b);
        assert_eq!((a.milli_cpu, a.memory, a.scalar(gpu)), (100, 20, 3));
    }

    #[test]
    fn resource_name_classes() {
        assert!(is_extended_resource("example.com/gpu"));
        assert!(!is_extended_resource("cpu"));
        assert!(!is_extended_resource("kubernetes.io/foo"));
        assert!(is_scalar_resource("kubernetes.io/foo"));
        assert!(is_scalar_resource("hugepages-1Gi"));
        assert!(is_scalar_resource("attachable-volumes-csi-x"));
        assert!(!is_scalar_resource("storage"));
    }
}
