//! [`NodeInfo`]: a node and the aggregate of the pods on it.

use std::sync::Arc;

use crate::model::{HostPort, NodeSpec, PodInfo, PodRef, Protocol, Resource};

/// Host ports in use on a node, with how many pods use each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPortInfo(Vec<(HostPort, u32)>);

/// The wildcard host IP: the port on every address.
pub const DEFAULT_BIND_ALL_HOST_IP: &str = "0.0.0.0";

impl HostPortInfo {
    fn add(&mut self, port: &HostPort) {
        match self.0.iter_mut().find(|(p, _)| p == port) {
            Some((_, n)) => *n += 1,
            None => self.0.push((port.clone(), 1)),
        }
    }

    fn remove(&mut self, port: &HostPort) {
        if let Some(i) = self.0.iter().position(|(p, _)| p == port) {
            self.0[i].1 -= 1;
            if self.0[i].1 == 0 {
                self.0.swap_remove(i);
            }
        }
    }

    /// Whether binding `port` on `ip` would clash with a port in use: the same
    /// protocol and number on the same address, or on the wildcard address
    /// on either side.
    pub fn conflicts(&self, ip: &str, protocol: Protocol, port: i32) -> bool {
        self.0.iter().any(|(p, _)| {
            p.protocol == protocol
                && p.port == port
                && (ip == DEFAULT_BIND_ALL_HOST_IP
                    || &*p.ip == DEFAULT_BIND_ALL_HOST_IP
                    || &*p.ip == ip)
        })
    }

    /// The ports in use.
    pub fn iter(&self) -> impl Iterator<Item = &HostPort> {
        self.0.iter().map(|(p, _)| p)
    }

    /// Whether no port is in use.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The key of a claim in [`NodeInfo::pvc_ref_count`]: `namespace/name`.
pub fn pvc_key(namespace: &str, claim: &str) -> Arc<str> {
    Arc::from(format!("{namespace}/{claim}").as_str())
}

/// A node and what its pods use. Cloned (copy-on-write, through `Arc`) only
/// when it changes while a snapshot holds it.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct NodeInfo {
    /// The node's name, first (`repr(C)`): beside the `Arc`'s counts, so
    /// that a cycle reading the names of the nodes it cloned touches no
    /// other cache line of a node it did not otherwise read.
    name: Arc<str>,
    node: Option<Arc<NodeSpec>>,
    pods: Vec<PodRef>,
    /// Pods with pod affinity or anti-affinity terms.
    pods_with_affinity: Vec<PodRef>,
    /// Pods with required anti-affinity terms.
    pods_with_required_anti_affinity: Vec<PodRef>,
    /// PersistentVolumeClaims used by the pods, `namespace/name` -> pods.
    pvc_ref_counts: std::collections::HashMap<Arc<str>, u32>,
    requested: Resource,
    non_zero_milli_cpu: i64,
    non_zero_memory: i64,
    used_ports: HostPortInfo,
}

impl NodeInfo {
    /// A node with no pods.
    pub fn new(node: Arc<NodeSpec>) -> Self {
        Self {
            name: node.name.clone(),
            node: Some(node),
            ..Self::default()
        }
    }

    /// The node; `None` for a node deleted while pods still referred to it.
    pub fn node(&self) -> Option<&Arc<NodeSpec>> {
        self.node.as_ref()
    }

    /// The node's name (empty for a deleted node).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's allocatable resources.
    pub fn allocatable(&self) -> &Resource {
        static EMPTY: Resource = Resource {
            milli_cpu: 0,
            memory: 0,
            ephemeral_storage: 0,
            allowed_pod_number: 0,
            scalar: smallvec::SmallVec::new_const(),
        };
        self.node.as_ref().map_or(&EMPTY, |n| &n.allocatable)
    }

    /// The pods on the node (bound and assumed).
    pub fn pods(&self) -> &[PodRef] {
        &self.pods
    }

    /// The sum of the pods' effective requests.
    pub fn requested(&self) -> &Resource {
        &self.requested
    }

    /// The pods' CPU requests with unset ones counted as 100m.
    pub fn non_zero_milli_cpu(&self) -> i64 {
        self.non_zero_milli_cpu
    }

    /// The pods' memory requests with unset ones counted as 200Mi.
    pub fn non_zero_memory(&self) -> i64 {
        self.non_zero_memory
    }

    /// Pods with pod affinity or anti-affinity terms.
    pub fn pods_with_affinity(&self) -> &[PodRef] {
        &self.pods_with_affinity
    }

    /// Pods with required pod anti-affinity terms.
    pub fn pods_with_required_anti_affinity(&self) -> &[PodRef] {
        &self.pods_with_required_anti_affinity
    }

    /// How many of the node's pods use the claim `namespace/name`.
    pub fn pvc_ref_count(&self, key: &str) -> u32 {
        self.pvc_ref_counts.get(key).copied().unwrap_or(0)
    }

    /// The claims (`namespace/name`) the node's pods use.
    pub fn pvc_refs(&self) -> impl Iterator<Item = &Arc<str>> {
        self.pvc_ref_counts.keys()
    }

    /// Host ports the pods bind.
    pub fn used_ports(&self) -> &HostPortInfo {
        &self.used_ports
    }

    pub(crate) fn set_node(&mut self, node: Option<Arc<NodeSpec>>) {
        self.name = node.as_ref().map_or_else(Arc::default, |n| n.name.clone());
        self.node = node;
    }

    /// Adds a pod and its usage.
    pub fn add_pod(&mut self, pod: PodRef) {
        self.requested.add(&pod.requests);
        self.non_zero_milli_cpu += pod.non_zero_milli_cpu;
        self.non_zero_memory += pod.non_zero_memory;
        for port in &pod.host_ports {
            self.used_ports.add(port);
        }
        for claim in &pod.pvc_claims {
            *self
                .pvc_ref_counts
                .entry(pvc_key(&pod.namespace, claim))
                .or_default() += 1;
        }
        if pod.placement.has_pod_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.placement.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `uid` and its usage. Returns the removed pod.
    pub fn remove_pod(&mut self, uid: &str) -> Option<PodRef> {
        let i = self.pods.iter().position(|p| &*p.uid == uid)?;
        let pod = self.pods.swap_remove(i);
        self.subtract(&pod);
        Some(pod)
    }

    fn subtract(&mut self, pod: &PodInfo) {
        self.requested.sub(&pod.requests);
        self.non_zero_milli_cpu -= pod.non_zero_milli_cpu;
        self.non_zero_memory -= pod.non_zero_memory;
        for port in &pod.host_ports {
            self.used_ports.remove(port);
        }
        for claim in &pod.pvc_claims {
            let key = pvc_key(&pod.namespace, claim);
            if let Some(n) = self.pvc_ref_counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.pvc_ref_counts.remove(&key);
                }
            }
        }
        self.pods_with_affinity.retain(|p| p.uid != pod.uid);
        self.pods_with_required_anti_affinity
            .retain(|p| p.uid != pod.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    #[test]
    fn add_and_remove_pods_keep_aggregates() {
        let mut n = NodeInfo::new(Arc::new(make_node("n1").cpu("4").memory("8Gi").build()));
        let a = Arc::new(
            make_pod("a")
                .req_cpu("1")
                .req_memory("1Gi")
                .host_port(80)
                .build(),
        );
        let b = Arc::new(make_pod("b").build());
        n.add_pod(a.clone());
        n.add_pod(b.clone());
        assert_eq!(n.requested().milli_cpu, 1000);
        assert_eq!(n.non_zero_milli_cpu(), 1100);
        assert_eq!(n.non_zero_memory(), (1 << 30) + (200 << 20));
        assert!(n.used_ports().conflicts("0.0.0.0", Protocol::Tcp, 80));
        assert!(n.used_ports().conflicts("10.0.0.1", Protocol::Tcp, 80));
        assert!(!n.used_ports().conflicts("0.0.0.0", Protocol::Udp, 80));
        assert_eq!(
            n.remove_pod(&a.uid).map(|p| p.uid.clone()),
            Some(a.uid.clone())
        );
        assert_eq!(n.requested().milli_cpu, 0);
        assert_eq!(n.non_zero_milli_cpu(), 100);
        assert!(n.used_ports().is_empty());
        assert!(n.remove_pod("missing").is_none());
        assert_eq!(n.pods().len(), 1);
    }

    #[test]
    fn specific_ips_only_clash_with_themselves_and_the_wildcard() {
        let mut ports = HostPortInfo::default();
        ports.add(&HostPort {
            ip: "10.0.0.1".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        });
        assert!(ports.conflicts("10.0.0.1", Protocol::Tcp, 8080));
        assert!(ports.conflicts("0.0.0.0", Protocol::Tcp, 8080));
        assert!(!ports.conflicts("10.0.0.2", Protocol::Tcp, 8080));
    }
}
