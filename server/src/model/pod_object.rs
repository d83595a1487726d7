//! [`PodObject`]: a pod's Kubernetes object as the scheduler keeps it.
//!
//! The scheduler reads a pod through its [`PodInfo`](super::PodInfo); the
//! Kubernetes object is kept only for the edges (the API, extenders,
//! writes that need more than the name). Decoded, k8s-openapi's `Pod` is
//! large whatever it holds (the struct alone is 2.4 KiB, each container
//! 2.1 KiB more, each map a 0.5 KiB tree node), so a pod that came over
//! the wire is kept packed: the JSON of what berth decoded, without its
//! resourceVersion (kept beside it, so that two versions of the same
//! object compare byte for byte), decoded again when an edge asks. A pod
//! made in-process (the embedded cluster, the API's dry runs) is shared
//! with whoever made it, not copied. A status write in-process (the
//! embedded cluster's `nominatedNodeName`, conditions) shares the version
//! it was written over, whose metadata and spec it keeps, and holds only
//! its own status and resourceVersion: copying the object for each status
//! write cost more than the rest of the write. A binding in-process does
//! the same with `spec.nodeName` held beside the status.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

/// A pod's Kubernetes object: shared, patched or packed (see the module's
/// doc).
#[derive(Clone)]
pub struct PodObject(Repr);

#[derive(Clone)]
enum Repr {
    Shared(Arc<Pod>),
    Patched(Arc<Patched>),
    Packed(Arc<Packed>),
}

/// A version made by status writes (and a binding) over `base`.
struct Patched {
    /// The version written over: its metadata and spec are this one's (its
    /// status and resourceVersion are not, nor its nodeName when
    /// `node_name` is set).
    base: Arc<Pod>,
    /// `spec.nodeName` as a binding set it over `base`.
    node_name: Option<String>,
    status: Option<PodStatus>,
    resource_version: String,
}

struct Packed {
    /// The object's JSON, `metadata.resourceVersion` left out.
    json: Box<[u8]>,
    resource_version: Option<Box<str>>,
    /// What plugins and queueing hints read of the object in a cycle, kept
    /// decoded beside the JSON.
    hot: Hot,
}

/// The parts of a packed pod read in scheduling cycles (see the accessors
/// of [`PodObject`]).
struct Hot {
    volumes: Box<[Volume]>,
    tolerations: Box<[Toleration]>,
    owner_references: Box<[OwnerReference]>,
    annotations: Option<BTreeMap<String, String>>,
    start_time: Option<Time>,
}

impl PodObject {
    /// Shares `pod`.
    pub fn shared(pod: Arc<Pod>) -> Self {
        Self(Repr::Shared(pod))
    }

    /// Packs `pod`, which the caller gives up.
    pub fn pack(mut pod: Pod) -> Self {
        let resource_version = pod.metadata.resource_version.take().map(Box::from);
        // A k8s-openapi object always encodes: its maps are keyed by strings
        // and it holds no floats.
        let json = serde_json::to_vec(&pod)
            .unwrap_or_default()
            .into_boxed_slice();
        let hot = Hot {
            volumes: pod
                .spec
                .as_mut()
                .and_then(|s| s.volumes.take())
                .unwrap_or_default()
                .into(),
            tolerations: pod
                .spec
                .as_mut()
                .and_then(|s| s.tolerations.take())
                .unwrap_or_default()
                .into(),
            owner_references: pod
                .metadata
                .owner_references
                .take()
                .unwrap_or_default()
                .into(),
            annotations: pod.metadata.annotations.take().filter(|a| !a.is_empty()),
            start_time: pod.status.as_mut().and_then(|s| s.start_time.take()),
        };
        Self(Repr::Packed(Arc::new(Packed {
            json,
            resource_version,
            hot,
        })))
    }

    /// The object. Decodes a packed one (tens of microseconds): for the
    /// edges, not for every node a cycle visits.
    pub fn get(&self) -> Arc<Pod> {
        match &self.0 {
            Repr::Shared(p) => p.clone(),
            Repr::Patched(_) => Arc::new(self.to_pod()),
            Repr::Packed(p) => {
                let mut pod: Pod = match serde_json::from_slice(&p.json) {
                    Ok(pod) => pod,
                    Err(e) => {
                        // Not reachable: the bytes are what berth encoded
                        // from a decoded Pod.
                        tracing::error!(error = %e, "a packed pod did not decode");
                        Pod::default()
                    }
                };
                pod.metadata.resource_version = p.resource_version.as_deref().map(String::from);
                Arc::new(pod)
            }
        }
    }

    /// The object, owned (one copy; a packed one decoded).
    pub fn to_pod(&self) -> Pod {
        match &self.0 {
            Repr::Shared(p) => (**p).clone(),
            Repr::Patched(p) => Pod {
                metadata: ObjectMeta {
                    resource_version: Some(p.resource_version.clone()),
                    ..p.base.metadata.clone()
                },
                spec: match &p.node_name {
                    None => p.base.spec.clone(),
                    Some(node) => {
                        let mut spec = p.base.spec.clone().unwrap_or_default();
                        spec.node_name = Some(node.clone());
                        Some(spec)
                    }
                },
                status: p.status.clone(),
            },
            Repr::Packed(_) => Arc::unwrap_or_clone(self.get()),
        }
    }

    /// The version a status write makes of this one: `status` and
    /// `resource_version` over this one's metadata and spec, which it
    /// shares (a packed object is decoded first).
    pub fn with_status(&self, status: Option<PodStatus>, resource_version: String) -> Self {
        let node_name = match &self.0 {
            Repr::Patched(p) => p.node_name.clone(),
            Repr::Shared(_) | Repr::Packed(_) => None,
        };
        self.patched(node_name, status, resource_version)
    }

    /// The version a binding makes of this one: `spec.nodeName` set to
    /// `node`, with `status` and `resource_version`, over this one's
    /// metadata and (but for its nodeName) spec, which it shares.
    pub fn bound(&self, node: &str, status: Option<PodStatus>, resource_version: String) -> Self {
        self.patched(Some(node.to_string()), status, resource_version)
    }

    fn patched(
        &self,
        node_name: Option<String>,
        status: Option<PodStatus>,
        resource_version: String,
    ) -> Self {
        let base = match &self.0 {
            Repr::Shared(p) => p.clone(),
            Repr::Patched(p) => p.base.clone(),
            Repr::Packed(_) => self.get(),
        };
        Self(Repr::Patched(Arc::new(Patched {
            base,
            node_name,
            status,
            resource_version,
        })))
    }

    /// `spec.nodeName`; `None` when packed (or absent).
    pub fn node_name(&self) -> Option<&str> {
        match &self.0 {
            Repr::Patched(p) if p.node_name.is_some() => p.node_name.as_deref(),
            _ => self
                .base()
                .and_then(|p| p.spec.as_ref())
                .and_then(|s| s.node_name.as_deref()),
        }
    }

    /// The object whose metadata (but for its resourceVersion) and spec
    /// (but for its nodeName: [`Self::node_name`]) are this one's, shared;
    /// `None` when packed. Two versions with the same base (pointer-equal)
    /// differ at most in their status and nodeName.
    pub fn base(&self) -> Option<&Arc<Pod>> {
        match &self.0 {
            Repr::Shared(p) => Some(p),
            Repr::Patched(p) => Some(&p.base),
            Repr::Packed(_) => None,
        }
    }

    /// `status`; `None` when packed (or absent).
    pub fn status(&self) -> Option<&PodStatus> {
        match &self.0 {
            Repr::Shared(p) => p.status.as_ref(),
            Repr::Patched(p) => p.status.as_ref(),
            Repr::Packed(_) => None,
        }
    }

    /// The object's JSON, as the API would serve it (without managed
    /// fields and what berth does not keep). A packed pod's is its kept
    /// JSON with the resourceVersion put back, not decoded and encoded
    /// again (a remote extender gets it every cycle).
    pub fn to_json(&self) -> Vec<u8> {
        // How k8s-openapi encodes every Pod: these first, always.
        const HEAD: &[u8] = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"#;
        match &self.0 {
            Repr::Packed(p) => match (p.resource_version.as_deref(), p.json.strip_prefix(HEAD)) {
                (None, _) => p.json.to_vec(),
                (Some(rv), Some(rest)) => {
                    let mut out = Vec::with_capacity(p.json.len() + rv.len() + 24);
                    out.extend_from_slice(HEAD);
                    out.extend_from_slice(br#""resourceVersion":"#);
                    // A string always encodes.
                    let _ = serde_json::to_writer(&mut out, rv);
                    if rest.first() != Some(&b'}') {
                        out.push(b',');
                    }
                    out.extend_from_slice(rest);
                    out
                }
                (Some(_), None) => serde_json::to_vec(&*self.get()).unwrap_or_default(),
            },
            Repr::Shared(p) => serde_json::to_vec(&**p).unwrap_or_default(),
            Repr::Patched(_) => serde_json::to_vec(&self.to_pod()).unwrap_or_default(),
        }
    }

    /// The shared object, when it is neither patched nor packed.
    pub fn as_shared(&self) -> Option<&Arc<Pod>> {
        match &self.0 {
            Repr::Shared(p) => Some(p),
            Repr::Patched(_) | Repr::Packed(_) => None,
        }
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        match &self.0 {
            Repr::Shared(p) => p.metadata.resource_version.as_deref(),
            Repr::Patched(p) => Some(&p.resource_version),
            Repr::Packed(p) => p.resource_version.as_deref(),
        }
    }

    /// Whether this and `other` are the same object but for their
    /// resourceVersion: byte for byte when both are packed.
    pub fn same_but_version(&self, other: &PodObject) -> bool {
        match (&self.0, &other.0) {
            (Repr::Packed(a), Repr::Packed(b)) => a.json == b.json,
            _ => {
                let (a, b) = (self.get(), other.get());
                let (mut ma, mut mb) = (a.metadata.clone(), b.metadata.clone());
                ma.resource_version = None;
                mb.resource_version = None;
                ma.managed_fields = None;
                mb.managed_fields = None;
                ma == mb && a.spec == b.spec && a.status == b.status
            }
        }
    }

    /// `spec.volumes`.
    pub fn volumes(&self) -> &[Volume] {
        match self.base_or_hot() {
            Ok(p) => p
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_deref())
                .unwrap_or(&[]),
            Err(hot) => &hot.volumes,
        }
    }

    /// `spec.tolerations` as written (an absent list is empty).
    pub fn tolerations(&self) -> &[Toleration] {
        match self.base_or_hot() {
            Ok(p) => p
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or(&[]),
            Err(hot) => &hot.tolerations,
        }
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> &[OwnerReference] {
        match self.base_or_hot() {
            Ok(p) => p.metadata.owner_references.as_deref().unwrap_or(&[]),
            Err(hot) => &hot.owner_references,
        }
    }

    /// The annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let map = match self.base_or_hot() {
            Ok(p) => p.metadata.annotations.as_ref(),
            Err(hot) => hot.annotations.as_ref(),
        };
        map.and_then(|m| m.get(key)).map(String::as_str)
    }

    /// `status.startTime`.
    pub fn start_time(&self) -> Option<&Time> {
        match &self.0 {
            Repr::Packed(p) => p.hot.start_time.as_ref(),
            _ => self.status().and_then(|s| s.start_time.as_ref()),
        }
    }

    /// Whether the object is kept packed.
    pub fn is_packed(&self) -> bool {
        matches!(self.0, Repr::Packed(_))
    }

    /// The base (see [`Self::base`]), or what a packed object keeps
    /// decoded.
    fn base_or_hot(&self) -> Result<&Pod, &Hot> {
        match &self.0 {
            Repr::Shared(p) => Ok(p),
            Repr::Patched(p) => Ok(&p.base),
            Repr::Packed(p) => Err(&p.hot),
        }
    }
}

/// Encodes as the object (a packed one is decoded first).
impl serde::Serialize for PodObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Shared(p) => p.serialize(s),
            Repr::Patched(_) => self.to_pod().serialize(s),
            Repr::Packed(_) => self.get().serialize(s),
        }
    }
}

impl std::fmt::Debug for PodObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Shared(p) => f.debug_tuple("Shared").field(&p.metadata.name).finish(),
            Repr::Patched(p) => f
                .debug_struct("Patched")
                .field("name", &p.base.metadata.name)
                .field("resource_version", &p.resource_version)
                .finish(),
            Repr::Packed(p) => f
                .debug_struct("Packed")
                .field("bytes", &p.json.len())
                .field("resource_version", &p.resource_version)
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(rv: &str, label: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                         "labels": {"app": label}},
            "spec": {"containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "1"}}}],
                     "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    #[test]
    fn a_packed_pod_decodes_to_what_was_packed() {
        let p = pod("7", "a");
        let packed = PodObject::pack(p.clone());
        assert!(packed.is_packed());
        assert_eq!(*packed.get(), p);
        assert_eq!(packed.resource_version(), Some("7"));
        assert_eq!(
            packed.tolerations(),
            p.spec.as_ref().unwrap().tolerations.as_deref().unwrap()
        );
        assert_eq!(packed.annotation("a"), None);
        let json = packed.to_json();
        assert!(
            json.starts_with(
                br#"{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"7","#
            ),
            "the version put back, not decoded and encoded again"
        );
        let back: Pod = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, p);
        // Metadata with nothing but the version, and a version that needs
        // escaping.
        let mut bare = Pod::default();
        bare.metadata.resource_version = Some("7\"".into());
        let back: Pod = serde_json::from_slice(&PodObject::pack(bare.clone()).to_json()).unwrap();
        assert_eq!(back, bare);
        bare.metadata.resource_version = None;
        let back: Pod = serde_json::from_slice(&PodObject::pack(bare.clone()).to_json()).unwrap();
        assert_eq!(back, bare);
    }

    #[test]
    fn a_status_write_shares_what_it_does_not_change() {
        let v1 = Arc::new(pod("7", "a"));
        let shared = PodObject::shared(v1.clone());
        let status: PodStatus = serde_json::from_value(json!({
            "phase": "Pending", "nominatedNodeName": "n1",
            "startTime": "2026-11-29T00:00:00Z"}))
        .unwrap();
        let patched = shared.with_status(Some(status.clone()), "8".into());
        assert!(!patched.is_packed() && patched.as_shared().is_none());
        assert!(
            Arc::ptr_eq(patched.base().unwrap(), &v1),
            "metadata and spec are shared, not copied"
        );
        assert_eq!(patched.resource_version(), Some("8"));
        assert_eq!(patched.status(), Some(&status));
        assert_eq!(patched.tolerations(), shared.tolerations());
        assert_eq!(patched.start_time(), status.start_time.as_ref());
        // The object as the API serves it: the write's status and version
        // over the rest.
        let mut whole = (*v1).clone();
        whole.status = Some(status.clone());
        whole.metadata.resource_version = Some("8".into());
        assert_eq!(*patched.get(), whole);
        assert_eq!(patched.to_pod(), whole);
        let back: Pod = serde_json::from_slice(&patched.to_json()).unwrap();
        assert_eq!(back, whole);
        assert_eq!(
            serde_json::to_value(&patched).unwrap(),
            serde_json::to_value(&whole).unwrap()
        );
        // A second write keeps the first base; a packed object is decoded
        // to be one.
        let again = patched.with_status(None, "9".into());
        assert!(Arc::ptr_eq(again.base().unwrap(), &v1));
        assert_eq!(
            (again.status(), again.resource_version()),
            (None, Some("9"))
        );
        assert!(again.same_but_version(&PodObject::shared(Arc::new(Pod {
            status: None,
            ..(*v1).clone()
        }))));
        let from_packed = PodObject::pack(pod("7", "a")).with_status(None, "8".into());
        assert_eq!(
            from_packed.base().unwrap().metadata.labels,
            v1.metadata.labels
        );
    }

    #[test]
    fn a_binding_shares_what_it_does_not_change() {
        let v1 = Arc::new(pod("7", "a"));
        let shared = PodObject::shared(v1.clone());
        assert_eq!(shared.node_name(), None);
        let status: PodStatus = serde_json::from_value(
            json!({"conditions": [{"type": "PodScheduled", "status": "True"}]}),
        )
        .unwrap();
        let bound =
            shared
                .with_status(None, "8".into())
                .bound("n1", Some(status.clone()), "9".into());
        assert!(Arc::ptr_eq(bound.base().unwrap(), &v1));
        assert_eq!(bound.node_name(), Some("n1"));
        assert_eq!(bound.status(), Some(&status));
        // Whole: the node in the spec, the rest of the spec as it was.
        let mut whole = (*v1).clone();
        whole.spec.as_mut().unwrap().node_name = Some("n1".into());
        whole.status = Some(status);
        whole.metadata.resource_version = Some("9".into());
        assert_eq!(bound.to_pod(), whole);
        assert_eq!(*bound.get(), whole);
        let back: Pod = serde_json::from_slice(&bound.to_json()).unwrap();
        assert_eq!(back, whole);
        // A status write over the bound version keeps the node.
        let later = bound.with_status(None, "10".into());
        assert_eq!(later.node_name(), Some("n1"));
        assert_eq!(
            later.to_pod().spec.unwrap().node_name.as_deref(),
            Some("n1")
        );
        assert!(later.same_but_version(&PodObject::shared(Arc::new({
            let mut p = whole.clone();
            p.status = None;
            p
        }))));
    }

    #[test]
    fn versions_compare_without_their_resource_version() {
        let a = PodObject::pack(pod("7", "a"));
        assert!(a.same_but_version(&PodObject::pack(pod("8", "a"))));
        assert!(!a.same_but_version(&PodObject::pack(pod("8", "b"))));
        let shared = PodObject::shared(Arc::new(pod("9", "a")));
        assert!(shared.same_but_version(&a) && a.same_but_version(&shared));
        assert!(shared.same_but_version(&PodObject::shared(Arc::new(pod("10", "a")))));
        assert!(!shared.same_but_version(&PodObject::shared(Arc::new(pod("10", "b")))));
    }
}
