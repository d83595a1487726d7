//! ImageLocality: nodes that already have the pod's images score higher, by
//! the images' sizes, each scaled by how widely the image has spread over
//! the cluster (nodes having it / all nodes) so that pods do not all pile
//! onto the few nodes that have a large image.
//!
//! The images are those of the init containers, the app containers and the
//! image volumes (v1.36 added the latter). The sum is clamped to
//! `[23 MiB, 1000 MiB × images]` and mapped linearly onto 0-100. v1.36.0
//! still counted only containers in that upper bound, so that image volumes
//! could score higher than the same image in a container; upstream fixed
//! this after the release (kubernetes#138951) and berth follows the fix.
//! Pod image names get an implicit `:latest` tag when they have none; node
//! image names are taken as the node reports them.

use crate::cache::NodeInfo;
use crate::extension_points;
use crate::framework::{CycleState, MAX_NODE_SCORE, NoArgs, Plugin, ScorePlugin, Status};
use crate::model::{NodeSpec, PodInfo};
use crate::plugins::names::IMAGE_LOCALITY;

const MB: i64 = 1024 * 1024;
/// Image sizes (after scaling) below this score 0.
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Per image of the pod, sizes (after scaling) above this score 100.
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The ImageLocality plugin.
#[derive(Debug)]
pub struct ImageLocality;

impl ImageLocality {
    /// Builds the plugin (it takes no args; it reads the cycle's snapshot).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

/// Whether `image` names a tag or a digest: a `:` after the last `/`.
fn has_tag(image: &str) -> bool {
    match (image.rfind(':'), image.rfind('/')) {
        (None, _) => false,
        (Some(colon), Some(slash)) => colon > slash,
        (Some(_), None) => true,
    }
}

/// Whether the node's image name `name` is the pod's `image` once the latter
/// is normalized (`:latest` added when it has no tag), without building the
/// normalized name.
fn is_normalized(name: &str, image: &str) -> bool {
    const LATEST: &str = ":latest";
    if has_tag(image) {
        name == image
    } else {
        name.len() == image.len() + LATEST.len()
            && name.starts_with(image)
            && name.ends_with(LATEST)
    }
}

/// The images the pod needs: init containers, app containers, image volumes
/// (an image left empty counts, and matches nothing).
fn pod_images(pod: &PodInfo) -> impl Iterator<Item = &str> {
    let spec = pod.pod.spec.as_ref();
    let containers = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(|c| c.image.as_deref().unwrap_or(""));
    let volumes = spec
        .into_iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.image.as_ref())
        .map(|i| i.reference.as_deref().unwrap_or(""));
    containers.chain(volumes)
}

/// The name and size of the node's image that is the pod's `image`; when
/// several list the name, the last one, as upstream's per-node image map
/// keeps it.
fn find_on_node<'a>(node: &'a NodeSpec, image: &str) -> Option<(&'a str, i64)> {
    node.images.iter().rev().find_map(|img| {
        img.names
            .iter()
            .find(|n| is_normalized(n, image))
            .map(|n| (&**n, img.size_bytes))
    })
}

/// An image's size scaled by the fraction of nodes that have it.
fn scaled_image_score(size: i64, num_nodes: usize, total_nodes: usize) -> i64 {
    if total_nodes == 0 {
        return 0;
    }
    let spread = num_nodes as f64 / total_nodes as f64;
    (size as f64 * spread) as i64
}

/// Maps the summed scaled sizes onto 0-100 between the thresholds.
fn calculate_priority(sum: i64, num_images: usize) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD.saturating_mul(num_images as i64);
    let clamped = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else {
        sum.min(max_threshold)
    };
    let range = max_threshold - MIN_THRESHOLD;
    if range == 0 {
        return 0;
    }
    MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / range
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        IMAGE_LOCALITY
    }
    extension_points!(score);
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let snapshot = state.snapshot();
        let total = snapshot.num_nodes();
        let mut sum = 0i64;
        let mut count = 0usize;
        for image in pod_images(pod) {
            count += 1;
            if let Some((name, size)) = node.node().and_then(|n| find_on_node(n, image)) {
                sum = sum.saturating_add(scaled_image_score(
                    size,
                    snapshot.image_num_nodes(name),
                    total,
                ));
            }
        }
        Ok(calculate_priority(sum, count))
    }
}

#[cfg(test)]
mod tests;
