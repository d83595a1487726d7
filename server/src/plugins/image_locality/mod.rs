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
use crate::model::node::image_hash;
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
/// The size of the node's image named `image` (normalized), with the
/// name as the node lists it.
fn find_on_node<'a>(node: &'a NodeSpec, image: &str, hash: u64) -> Option<(&'a str, i64)> {
    node.find_image(image, hash)
        .map(|e| (&*e.name, e.size_bytes))
}

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

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }
    extension_points!(score);
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let snapshot = state.snapshot();
        let total = snapshot.num_nodes();
        let mut sum = 0i64;
        let mut count = 0usize;
        for image in &pod.images {
            count += 1;
            let hash = image_hash(image);
            if let Some((name, size)) = node.node().and_then(|n| find_on_node(n, image, hash)) {
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
