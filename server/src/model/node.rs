//! [`NodeSpec`]: a node as the scheduler reads it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::resource::Resource;
use super::taint::{Taint, TaintEffect};
use super::{InvalidObject, Labels};

/// `topology.kubernetes.io/zone`
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// The taint the node lifecycle controller puts on cordoned nodes.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A container image present on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// The names the image is known by (tags and digests).
    pub names: Vec<Arc<str>>,
    /// Its size in bytes.
    pub size_bytes: i64,
}

/// One image name of a node, in [`NodeSpec::image_index`]: the size of the
/// last of the node's images known by that name (as upstream's per-node
/// image map keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageEntry {
    /// [`image_hash`] of the name.
    pub hash: u64,
    /// The name.
    pub name: Arc<str>,
    /// Its size in bytes.
    pub size_bytes: i64,
}

/// A stable hash of an image name, for [`NodeSpec::image_index`].
pub fn image_hash(name: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x6265_7274_685f_696d).hash_one(name)
}

/// A node, pre-parsed for scheduling. Built once per add or update.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The Kubernetes object, kept for the edges.
    pub node: Arc<Node>,
    /// metadata.name.
    pub name: Arc<str>,
    /// metadata.labels.
    pub labels: Labels,
    /// spec.taints.
    pub taints: Vec<Taint>,
    /// spec.unschedulable (cordoned).
    pub unschedulable: bool,
    /// status.allocatable.
    pub allocatable: Resource,
    /// status.images.
    pub images: Vec<NodeImage>,
    /// Every name of `images` sorted by hash: one lookup finds a pod's
    /// image without walking the node's image and name lists (each a
    /// separate allocation, so a cache miss per step on a cold node).
    pub image_index: Box<[ImageEntry]>,
    /// The compact id remote extenders know the node by (assigned by the
    /// extender node feed before the cache sees the node; 0 without one).
    pub feed_id: u32,
    /// status.declaredFeatures, as a set of [`DECLARED_FEATURES`] bits
    /// (names this version does not know are left out, as upstream maps
    /// them).
    pub declared_features: u32,
}

/// The node features a pod may require, in upstream's registry (v1.36's
/// `k8s.io/component-helpers/nodedeclaredfeatures`), sorted by name: bit
/// `i` of a feature set stands for `DECLARED_FEATURES[i]`.
pub const DECLARED_FEATURES: [&str; 5] = [
    "ExtendWebSocketsToKubelet",
    "InPlacePodLevelResourcesVerticalScaling",
    "InPlacePodVerticalScalingInitContainers",
    "RestartAllContainersOnContainerExits",
    "UserNamespacesHostNetworkSupport",
];

/// The bit of a declared feature, if known.
pub fn declared_feature_bit(name: &str) -> Option<u32> {
    DECLARED_FEATURES
        .iter()
        .position(|f| *f == name)
        .map(|i| 1 << i)
}

/// [`NodeSpec::image_index`] of `images`: a name found in several images
/// keeps the last one's size.
fn index_images(images: &[NodeImage]) -> Box<[ImageEntry]> {
    let mut entries: Vec<ImageEntry> = images
        .iter()
        .flat_map(|img| {
            img.names.iter().map(|name| ImageEntry {
                hash: image_hash(name),
                name: name.clone(),
                size_bytes: img.size_bytes,
            })
        })
        .collect();
    // Stable: the entries of one name stay in the images' order, and the
    // last one's size is the one kept.
    entries.sort_by(|a, b| a.hash.cmp(&b.hash).then_with(|| a.name.cmp(&b.name)));
    entries.dedup_by(|later, kept| {
        let same = later.hash == kept.hash && later.name == kept.name;
        if same {
            kept.size_bytes = later.size_bytes;
        }
        same
    });
    entries.into_boxed_slice()
}

impl NodeSpec {
    /// The image the node knows by `name` (hashed with [`image_hash`] as
    /// `hash`), and its size.
    pub fn find_image(&self, name: &str, hash: u64) -> Option<&ImageEntry> {
        let idx = &self.image_index;
        let start = idx.partition_point(|e| e.hash < hash);
        idx[start..]
            .iter()
            .take_while(|e| e.hash == hash)
            .find(|e| &*e.name == name)
    }

    /// Builds a `NodeSpec` from a Kubernetes node.
    pub fn new(node: Arc<Node>) -> Result<Self, InvalidObject> {
        let name = node
            .metadata
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidObject::new("metadata.name", "Required value"))?;
        let spec = node.spec.as_ref();
        let mut taints = Vec::new();
        for (i, t) in spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
                InvalidObject::new(
                    format!("spec.taints[{i}].effect"),
                    format!("Unsupported value: \"{}\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"", t.effect),
                )
            })?;
            taints.push(Taint {
                key: Arc::from(t.key.as_str()),
                value: Arc::from(t.value.as_deref().unwrap_or("")),
                effect,
            });
        }
        let status = node.status.as_ref();
        let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
            Some(list) => Resource::from_list(list).map_err(|e| {
                InvalidObject::new(
                    format!("status.allocatable.{}", e.name),
                    e.error.to_string(),
                )
            })?,
            None => Resource::default(),
        };
        let images: Vec<NodeImage> = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .map(|img| NodeImage {
                names: img
                    .names
                    .iter()
                    .flatten()
                    .map(|n| Arc::from(n.as_str()))
                    .collect(),
                size_bytes: img.size_bytes.unwrap_or(0),
            })
            .collect();
        let image_index = index_images(&images);
        Ok(Self {
            name: Arc::from(name),
            labels: Labels::from_map(node.metadata.labels.as_ref()),
            taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable,
            images,
            image_index,
            feed_id: 0,
            declared_features: status
                .and_then(|s| s.declared_features.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|f| declared_feature_bit(f))
                .fold(0, |a, b| a | b),
            node,
        })
    }

    /// The node with the id the extender node feed gave it.
    pub fn with_feed_id(mut self, id: u32) -> Self {
        self.feed_id = id;
        self
    }

    /// The zone the node is in, as `region:\0:zone` (empty when unlabelled):
    /// the key by which nodes are interleaved for sampling.
    pub fn zone_key(&self) -> String {
        let region = self.labels.get(LABEL_REGION).unwrap_or("");
        let zone = self.labels.get(LABEL_ZONE).unwrap_or("");
        if region.is_empty() && zone.is_empty() {
            String::new()
        } else {
            format!("{region}:\x00:{zone}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_node() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "images": [{"names": ["nginx:1"], "sizeBytes": 1000}]}
        }))
        .unwrap();
        let n = NodeSpec::new(Arc::new(node)).unwrap();
        assert_eq!(&*n.name, "n1");
        assert!(n.unschedulable);
        assert_eq!(n.taints[0].effect, TaintEffect::NoSchedule);
        assert_eq!(n.allocatable.milli_cpu, 4000);
        assert_eq!(n.allocatable.allowed_pod_number, 110);
        assert_eq!(n.images[0].size_bytes, 1000);
        assert_eq!(n.zone_key(), ":\x00:a");
    }

    #[test]
    fn images_are_found_by_any_name_with_the_last_size_of_a_repeated_name() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"images": [
                {"names": ["reg/a@sha256:1", "reg/a:1"], "sizeBytes": 100},
                {"names": ["reg/b:2"], "sizeBytes": 200},
                {"names": ["reg/a:1"], "sizeBytes": 300},
            ]}
        }))
        .unwrap();
        let n = NodeSpec::new(Arc::new(node)).unwrap();
        let find = |name: &str| n.find_image(name, image_hash(name)).map(|e| e.size_bytes);
        assert_eq!(find("reg/a@sha256:1"), Some(100));
        assert_eq!(find("reg/b:2"), Some(200));
        assert_eq!(find("reg/a:1"), Some(300));
        assert_eq!(find("reg/c:3"), None);
        assert_eq!(n.image_index.len(), 3);
    }

    #[test]
    fn bad_allocatable_names_the_field() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "four"}}
        }))
        .unwrap();
        let err = NodeSpec::new(Arc::new(node)).unwrap_err();
        assert_eq!(err.path, "status.allocatable.cpu");
    }
}
