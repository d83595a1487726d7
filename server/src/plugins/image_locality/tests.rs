use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerImage, ImageVolumeSource, Volume};

use super::*;
use crate::cache::Snapshot;
use crate::testing::{make_node, make_pod};

/// A node with images given as (names, size in MiB).
fn node(name: &str, images: &[(&[&str], i64)]) -> NodeSpec {
    let mut obj = make_node(name).object();
    obj.status.as_mut().unwrap().images = Some(
        images
            .iter()
            .map(|(names, size)| ContainerImage {
                names: Some(names.iter().map(|n| n.to_string()).collect()),
                size_bytes: Some(size * MB),
            })
            .collect(),
    );
    NodeSpec::new(Arc::new(obj)).unwrap()
}

/// A pod with the given app container, init container and image volume
/// images.
fn pod(app: &[&str], init: &[&str], volumes: &[&str]) -> PodInfo {
    let mut obj = make_pod("p").object();
    let spec = obj.spec.as_mut().unwrap();
    let template = spec.containers[0].clone();
    let container = |i: usize, image: &str| {
        let mut c = template.clone();
        c.name = format!("c{i}");
        c.image = Some(image.to_string());
        c
    };
    spec.containers = app
        .iter()
        .enumerate()
        .map(|(i, im)| container(i, im))
        .collect();
    spec.init_containers = Some(
        init.iter()
            .enumerate()
            .map(|(i, im)| container(100 + i, im))
            .collect(),
    );
    spec.volumes = Some(
        volumes
            .iter()
            .enumerate()
            .map(|(i, im)| Volume {
                name: format!("v{i}"),
                image: Some(ImageVolumeSource {
                    reference: Some(im.to_string()),
                    pull_policy: None,
                }),
                ..Default::default()
            })
            .collect(),
    );
    PodInfo::new(Arc::new(obj)).unwrap()
}

/// The plugin over a snapshot of `nodes`, and the snapshot's nodes.
fn setup(nodes: Vec<NodeSpec>) -> (ImageLocality, Arc<Snapshot>) {
    let snapshot = Snapshot::from_nodes(
        nodes
            .into_iter()
            .map(|n| NodeInfo::new(Arc::new(n)))
            .collect(),
    );
    (ImageLocality::new(NoArgs), Arc::new(snapshot))
}

fn scores(pl: &ImageLocality, pod: &PodInfo, snapshot: &Arc<Snapshot>) -> Vec<i64> {
    let st = CycleState::with_snapshot(snapshot.clone());
    snapshot
        .list()
        .iter()
        .map(|n| pl.score(&st, pod, n).unwrap())
        .collect()
}

fn node_40_300_2000() -> NodeSpec {
    node(
        "machine1",
        &[
            (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
            (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
            (&["gcr.io/2000:latest"], 2000),
        ],
    )
}

fn node_250_10() -> NodeSpec {
    node(
        "machine2",
        &[
            (&["gcr.io/250:latest"], 250),
            (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
        ],
    )
}

#[test]
fn scores_by_size_spread_and_image_count() {
    let two = || vec![node_40_300_2000(), node_250_10()];
    let three = || vec![node_40_300_2000(), node_250_10(), node("machine3", &[])];
    type Case = (&'static str, Vec<NodeSpec>, PodInfo, Vec<i64>);
    let cases: Vec<Case> = vec![
        (
            // machine1: 40M/2 = 20M < 23M -> 0.
            // machine2: 250M/2 = 125M -> 100 * (125M - 23M) / (2000M - 23M) = 5.
            "two images on two nodes: the larger one wins",
            two(),
            pod(&["gcr.io/40", "gcr.io/250"], &[], &[]),
            vec![0, 5],
        ),
        (
            // machine1: (40M + 300M)/2 = 170M -> 100 * 147M / 1977M = 7.
            "two images on one node",
            two(),
            pod(&["gcr.io/40", "gcr.io/300"], &[], &[]),
            vec![7, 0],
        ),
        (
            // machine1: 2000M/2 = 1000M -> 100 * 977M / 1977M = 49.
            "a large image against a tiny one",
            two(),
            pod(&["gcr.io/10", "gcr.io/2000"], &[], &[]),
            vec![49, 0],
        ),
        (
            // machine1: 2000M/3 = 666.7M -> 32.
            "more nodes spread the image thinner",
            three(),
            pod(&["gcr.io/10", "gcr.io/2000"], &[], &[]),
            vec![32, 0, 0],
        ),
        (
            // 2000M on the only node exceeds 1000M x 1 image.
            "capped at the maximum",
            vec![node_40_300_2000()],
            pod(&["gcr.io/2000"], &[], &[]),
            vec![100],
        ),
        (
            "init container images count like app containers",
            two(),
            pod(&["gcr.io/10"], &["gcr.io/2000"], &[]),
            vec![49, 0],
        ),
        (
            // (300M + 40M)/2 = 170M over 2 images: 100 * 147M / 1977M = 7
            // (counting only the container would give 15).
            "image volumes count, in the sum and in the image count",
            two(),
            pod(&["gcr.io/40"], &[], &["gcr.io/300:v1"]),
            vec![7, 0],
        ),
        (
            // 300M/2 = 150M over 1 image: 100 * 127M / 977M = 12.
            "a tagged name matches as is",
            two(),
            pod(&["gcr.io/300:v1"], &[], &[]),
            vec![12, 0],
        ),
        (
            "an untagged name gets :latest",
            two(),
            pod(&["gcr.io/300"], &[], &[]),
            vec![12, 0],
        ),
        (
            "an unknown tag matches nothing",
            two(),
            pod(&["gcr.io/300:v2"], &[], &[]),
            vec![0, 0],
        ),
        (
            "a digest is not given a tag",
            vec![node(
                "machine1",
                &[(&["gcr.io/300@sha256:abc", "gcr.io/300:latest"], 300)],
            )],
            pod(&["gcr.io/300@sha256:abc"], &[], &[]),
            vec![28],
        ),
        (
            "a registry port is not a tag",
            vec![node("machine1", &[(&["localhost:5000/app:latest"], 300)])],
            pod(&["localhost:5000/app"], &[], &[]),
            vec![28],
        ),
        (
            "node names are not normalized",
            vec![node("machine1", &[(&["gcr.io/300"], 300)])],
            pod(&["gcr.io/300"], &[], &[]),
            vec![0],
        ),
        (
            // 500M on 2 of 3 nodes: 333.3M -> 100 * 310.3M / 977M = 31.
            "an image on more nodes scores higher on each",
            vec![
                node("x", &[(&["shared:latest"], 500)]),
                node("y", &[(&["shared:latest"], 500)]),
                node("z", &[]),
            ],
            pod(&["shared"], &[], &[]),
            vec![31, 31, 0],
        ),
        (
            // 500M on 1 of 3 nodes: 166.7M -> 14.
            "an image on one node of three",
            vec![
                node("x", &[(&["shared:latest"], 500)]),
                node("y", &[]),
                node("z", &[]),
            ],
            pod(&["shared"], &[], &[]),
            vec![14, 0, 0],
        ),
    ];
    for (name, nodes, p, want) in cases {
        let (pl, list) = setup(nodes);
        assert_eq!(scores(&pl, &p, &list), want, "{name}");
    }
}

#[test]
fn normalization_rules() {
    let cases = [
        ("root:latest", "root", true),
        ("root:latest", "root:latest", true),
        ("gcr.io:5000/root:latest", "gcr.io:5000/root", true),
        ("root:tag", "root:tag", true),
        ("root:tag:latest", "root:tag", false),
        ("root", "root", false),
        ("rootx:latest", "root", false),
        ("a/b@sha256:00", "a/b@sha256:00", true),
        (":latest", "", true),
    ];
    for (node_name, image, want) in cases {
        assert_eq!(
            *crate::model::normalized_image_name(image) == *node_name,
            want,
            "{node_name} vs {image}"
        );
    }
}

#[test]
fn priority_bounds() {
    assert_eq!(calculate_priority(0, 1), 0);
    assert_eq!(calculate_priority(MIN_THRESHOLD, 1), 0);
    assert_eq!(calculate_priority(MAX_CONTAINER_THRESHOLD, 1), 100);
    assert_eq!(calculate_priority(i64::MAX, 3), 100);
    assert_eq!(calculate_priority(0, 0), 0, "a pod without images");
    assert_eq!(scaled_image_score(100, 1, 0), 0, "no nodes");
}

#[test]
fn deleted_node_scores_zero_and_plugin_is_score_only() {
    let (pl, _) = setup(vec![node_40_300_2000()]);
    let p = pod(&["gcr.io/40"], &[], &[]);
    assert_eq!(
        pl.score(&CycleState::new(), &p, &NodeInfo::default())
            .unwrap(),
        0
    );
    let pl: Arc<dyn Plugin> = Arc::new(pl);
    assert_eq!(pl.name(), IMAGE_LOCALITY);
    assert!(pl.clone().as_filter().is_none());
    assert!(pl.clone().as_pre_score().is_none());
    assert!(pl.as_score().unwrap().score_extensions().is_none());
}
