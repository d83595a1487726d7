//! Batching identical pods: per-node Filter verdicts and raw scores kept
//! from one cycle to the next and reused where nothing they depend on
//! moved.
//!
//! The pods of a Deployment come to the scheduler one after another with
//! the same spec. When every Filter and Score plugin still running for a
//! pod is node-local ([`Plugin::node_local`](crate::framework::Plugin)), a
//! node's verdict and raw scores depend only on the pod's [`Signature`] and
//! the node's `NodeInfo`, which is copied on write: a node that changed is
//! a new `Arc`. So each position of the node list keeps the `Arc` it was
//! judged on with the verdict and the raw scores, and the next pod with the
//! same signature takes them for every node whose `Arc` is the same,
//! running the plugins only on the nodes that changed (usually the one the
//! previous pod went to). The sampling, NormalizeScore, the weights and the
//! tie-break run as always, so placements are those of the unbatched path.
//!
//! Unlike upstream's opportunistic batching (which hands the next pod the
//! previous pod's sorted node list), nothing is approximated: a nominated
//! pod anywhere or a PreFilter result that narrows the nodes turns
//! batching off for that cycle. Batch plugins (remote extenders) are never
//! kept: they judge and score, every cycle, the nodes the per-node plugins
//! pass. A pod whose Filter plugins are not all node-local (spreading or
//! affinity terms that are not skipped, volumes, claims) keeps the verdicts
//! of the node-local plugins that come before the first that is not
//! ([`Framework::node_local_filter_prefix`]): a kept rejection stands, and a
//! node the prefix passed runs the other plugins every cycle, in order,
//! which gives the verdict running them all would. Likewise a kept row of
//! raw scores is reused for the node-local Score plugins only
//! ([`Framework::score_plugins_node_local`]), and the others (spreading,
//! inter-pod affinity) score every node every cycle. ImageLocality reads
//! how many nodes have each image: the scores are kept only while the
//! snapshot's image counts and node count stay.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Framework, NominatedPods, PluginMask, Status};
use crate::model::{HostPort, NodeAffinity, PodInfo, Resource, Toleration};

/// What the node-local plugins read of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    requests: Resource,
    non_zero: (i64, i64),
    host_ports: Vec<HostPort>,
    tolerations: Vec<Toleration>,
    node_selector: Vec<(Arc<str>, Arc<str>)>,
    node_affinity: NodeAffinity,
    images: Vec<Arc<str>>,
    node_name: Option<Arc<str>>,
}

impl Signature {
    fn of(pod: &PodInfo) -> Self {
        Self {
            requests: pod.requests.clone(),
            non_zero: (pod.non_zero_milli_cpu, pod.non_zero_memory),
            host_ports: pod.host_ports.clone(),
            tolerations: pod.tolerations.clone(),
            node_selector: pod.placement.node_selector.clone(),
            node_affinity: pod.placement.node_affinity.clone(),
            images: pod.images.clone(),
            node_name: pod.node_name.clone(),
        }
    }
}

/// For which pod, under which framework and with which plugins running,
/// the kept verdicts hold.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FilterKey {
    framework: usize,
    signature: Signature,
    skip_filter: PluginMask,
    /// The Filter plugins whose verdicts are kept: those before this
    /// position (all of them when they are all node-local).
    prefix: usize,
}

/// What the kept raw scores also depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScoreKey {
    skip_score: PluginMask,
    /// The plugins whose kept raw scores are reused; the others score
    /// every cycle.
    local: PluginMask,
    images_version: u64,
    num_nodes: usize,
}

/// One position of the node list: the node judged there and its verdict
/// (its raw scores are in [`Batch::scores`], flat).
#[derive(Debug, Default, Clone)]
struct Slot {
    node: Option<Arc<NodeInfo>>,
    verdict: Option<Status>,
    scored: bool,
}

/// Verdicts and raw scores kept across cycles (see the module).
#[derive(Debug, Default)]
pub(super) struct Batch {
    enabled: bool,
    filter_key: Option<FilterKey>,
    score_key: Option<ScoreKey>,
    slots: Vec<Slot>,
    /// Raw scores, `width` per slot, valid where the slot is `scored`.
    scores: Vec<i64>,
    width: usize,
    /// Whether this cycle reuses (decided after PreFilter).
    filters_on: bool,
    /// In this cycle, where the plugins not covered by a kept verdict
    /// start, when some are (the kept verdicts are then the first
    /// plugins'); `None` when kept verdicts are whole.
    rest_from: Option<usize>,
    /// Whether this cycle's scores are reused (decided after PreScore).
    scores_on: bool,
    /// Verdicts and score rows reused so far (for tests and metrics).
    pub(super) reused_verdicts: u64,
    pub(super) reused_scores: u64,
}

impl Batch {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }

    /// After PreFilter: whether this cycle's Filter verdicts can be kept
    /// and reused (the nodes evaluated are `snapshot.list()` in order).
    pub(super) fn begin_filter(
        &mut self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominated: &NominatedPods,
        restricted: bool,
    ) -> bool {
        self.filters_on = false;
        self.scores_on = false;
        self.rest_from = None;
        if !self.enabled || restricted || !nominated.is_empty() {
            return false;
        }
        let prefix = fw.node_local_filter_prefix(state, pod);
        if prefix == 0 {
            return false;
        }
        let key = FilterKey {
            framework: fw as *const Framework as usize,
            signature: Signature::of(pod),
            skip_filter: state.skip_filter,
            prefix,
        };
        if self.filter_key.as_ref() != Some(&key) {
            self.filter_key = Some(key);
            self.score_key = None;
            self.slots.clear();
        }
        self.slots.resize(snapshot.num_nodes(), Slot::default());
        self.scores.resize(self.slots.len() * self.width, 0);
        self.filters_on = true;
        self.rest_from = (prefix < fw.num_filter_plugins()).then_some(prefix);
        true
    }

    /// When the kept verdicts are those of the first Filter plugins only:
    /// the position of the first plugin they do not cover, which every
    /// node they pass runs from, every cycle.
    pub(super) fn rest_from(&self) -> Option<usize> {
        self.rest_from
    }

    /// The kept verdict for `node` at `position`, if it is still the node
    /// it was judged on.
    pub(super) fn verdict(&self, position: usize, node: &Arc<NodeInfo>) -> Option<&Status> {
        if !self.filters_on {
            return None;
        }
        let slot = self.slots.get(position)?;
        match &slot.node {
            Some(kept) if Arc::ptr_eq(kept, node) => slot.verdict.as_ref(),
            _ => None,
        }
    }

    /// Keeps the verdict just computed for `node` at `position`.
    pub(super) fn keep_verdict(&mut self, position: usize, node: &Arc<NodeInfo>, verdict: &Status) {
        if !self.filters_on {
            return;
        }
        let Some(slot) = self.slots.get_mut(position) else {
            return;
        };
        if !slot
            .node
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(kept, node))
        {
            *slot = Slot {
                node: Some(node.clone()),
                ..Slot::default()
            };
        }
        slot.verdict = Some(verdict.clone());
    }

    /// After PreScore: whether this cycle's raw scores can be kept and
    /// reused.
    pub(super) fn begin_score(
        &mut self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> bool {
        self.scores_on = false;
        if !self.filters_on {
            return false;
        }
        let local = fw.score_plugins_node_local(state, pod);
        if local.is_empty() {
            return false;
        }
        let key = ScoreKey {
            skip_score: state.skip_score,
            local,
            images_version: snapshot.images_version,
            num_nodes: snapshot.num_nodes(),
        };
        if self.score_key != Some(key) {
            self.score_key = Some(key);
            for slot in &mut self.slots {
                slot.scored = false;
            }
        }
        self.scores_on = true;
        true
    }

    /// The kept raw scores of each of `nodes` (at `positions`).
    pub(super) fn known_scores<'a>(
        &'a self,
        nodes: &[Arc<NodeInfo>],
        positions: &[usize],
    ) -> Vec<Option<&'a [i64]>> {
        if !self.scores_on {
            return Vec::new();
        }
        nodes
            .iter()
            .zip(positions)
            .map(|(node, &p)| {
                let slot = self.slots.get(p)?;
                match &slot.node {
                    Some(kept) if slot.scored && Arc::ptr_eq(kept, node) => {
                        self.scores.get(p * self.width..(p + 1) * self.width)
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Keeps the raw scores (`raw`, node-major, `per_node` per node) of
    /// `nodes` at `positions`.
    pub(super) fn keep_scores(
        &mut self,
        nodes: &[Arc<NodeInfo>],
        positions: &[usize],
        raw: &[i64],
        per_node: usize,
    ) {
        if !self.scores_on || per_node == 0 {
            return;
        }
        if self.width != per_node {
            self.width = per_node;
            self.scores.clear();
            self.scores.resize(self.slots.len() * per_node, 0);
            for slot in &mut self.slots {
                slot.scored = false;
            }
        }
        for ((node, &p), row) in nodes.iter().zip(positions).zip(raw.chunks(per_node)) {
            if let Some(slot) = self.slots.get_mut(p)
                && slot
                    .node
                    .as_ref()
                    .is_some_and(|kept| Arc::ptr_eq(kept, node))
                && !slot.scored
            {
                slot.scored = true;
                self.scores[p * per_node..(p + 1) * per_node].copy_from_slice(row);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::batch_judge::{BatchJudge, number};
    use super::super::{Algorithm, FastRng, ScheduleError, build_profiles};
    use crate::cache::{Cache, Snapshot};
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::config;
    use crate::framework::{CycleState, Handle, Parallelizer};
    use crate::plugins::in_tree_registry;
    use crate::testing::{make_node, make_pod};

    use super::*;

    /// The pods of the stream: runs of identical pods of several kinds,
    /// including ones whose verdicts batching keeps only in part (spreading,
    /// anti-affinity) and one that never fits; `kinds` picks which.
    fn stream(kinds_in: &[u64]) -> Vec<PodInfo> {
        let kinds = |k: usize, i: usize| {
            let name = format!("p{i}");
            match k {
                0 => make_pod(&name).req_cpu("100m").req_memory("200Mi"),
                1 => make_pod(&name)
                    .req_cpu("500m")
                    .toleration("dedicated", "Equal", "x", "NoSchedule")
                    .spec(
                        "affinity",
                        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 10, "preference": {"matchExpressions": [
                                {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}),
                    ),
                2 => make_pod(&name).req_cpu("200m").host_port(8080),
                3 => make_pod(&name)
                    .req_cpu("300m")
                    .spec("nodeSelector", json!({"zone": "z1"})),
                4 => make_pod(&name).req_cpu("9"),
                5 => make_pod(&name).req_cpu("100m").label("app", "s").spec(
                    "topologySpreadConstraints",
                    json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "s"}}}]),
                ),
                6 => make_pod(&name)
                    .req_cpu("100m")
                    .label("app", "a")
                    .spec(
                        "affinity",
                        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "rack", "labelSelector": {"matchLabels": {"app": "a"}}}]}}),
                    ),
                7 => make_pod(&name).req_cpu("150m").label("app", "p").spec(
                    "topologySpreadConstraints",
                    json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app": "p"}}}]),
                ),
                _ => make_pod(&name)
                    .req_cpu("120m")
                    .label("app", "q")
                    .spec(
                        "affinity",
                        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 50, "podAffinityTerm": {"topologyKey": "rack",
                                "labelSelector": {"matchLabels": {"app": "q"}}}}]}}),
                    ),
            }
            .build()
        };
        let mut rng = FastRng::new(3);
        let mut out = Vec::new();
        while out.len() < 600 {
            let k = kinds_in[rng.below(kinds_in.len() as u64) as usize] as usize;
            for _ in 0..1 + rng.below(12) {
                let i = out.len();
                out.push(kinds(k, i));
            }
        }
        out
    }

    fn node(i: usize) -> crate::testing::NodeBuilder {
        let mut b = make_node(&format!("n{i:03}"))
            .cpu(if i.is_multiple_of(7) { "2" } else { "8" })
            .memory("16Gi")
            .label("zone", ["z1", "z2", "z3"][i % 3])
            .label("rack", &format!("r{}", i % 40));
        if i.is_multiple_of(5) {
            b = b.taint("dedicated", "x", "NoSchedule");
        }
        if i.is_multiple_of(4) {
            b = b.label("disk", "ssd");
        }
        b
    }

    /// The batch plugin (as a remote extender's, answering ahead of the
    /// per-node plugins): it rejects every eleventh node and scores by the
    /// node's number.
    fn remote_plugin() -> BatchJudge {
        BatchJudge {
            name: "Remote",
            passes: |_, node| !number(node.name()).is_multiple_of(11),
            score: |_, node| (number(node.name()) % 7) as i64,
            looks_ahead: false,
            asked: Arc::default(),
        }
    }

    /// Schedules the stream of `kinds` against 150 nodes (a node tainted,
    /// then new nodes added, part way), assuming each placement, with the
    /// default profile and, with `remote`, [`remote_plugin`] in it; returns where
    /// each pod went (or why it did not) and how many verdicts and score
    /// rows were reused.
    async fn run(batching: bool, kinds: &[u64], remote: bool) -> (Placements, (u64, u64)) {
        let mut registry = in_tree_registry();
        remote_plugin().register(&mut registry);
        let mut yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 30\n".to_string();
        if remote {
            yaml.push_str("profiles:\n- schedulerName: default-scheduler\n  plugins:\n    filter:\n      enabled: [{name: Remote}]\n    score:\n      enabled: [{name: Remote, weight: 3}]\n");
        }
        let yaml = yaml.as_str();
        let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
        let cluster = EmbeddedCluster::new();
        let handle = Handle::new(cluster.clone(), cluster, Parallelizer::new(2).unwrap());
        let profiles = build_profiles(&cfg, &registry, &handle).unwrap();
        let fw = profiles.values().next().unwrap().clone();
        let mut cache = Cache::new(Duration::ZERO);
        for i in 0..150 {
            cache.add_node(Arc::new(node(i).build()));
        }
        let mut alg = Algorithm::new(30, FastRng::new(7)).with_batching(batching);
        let nominated = NominatedPods::default();
        let mut snap = Snapshot::new();
        let mut placed = Vec::new();
        for (i, pod) in stream(kinds).into_iter().enumerate() {
            if i == 200 {
                cache.update_node(Arc::new(
                    node(3).taint("dedicated", "x", "NoSchedule").build(),
                ));
            }
            if i == 350 {
                for j in 150..170 {
                    cache.add_node(Arc::new(node(j).build()));
                }
            }
            cache.update_snapshot(&mut snap);
            let shared = Arc::new(snap.clone());
            let mut state = CycleState::with_snapshot(shared.clone());
            match alg
                .schedule_pod(&fw, &mut state, &pod, &shared, &nominated)
                .await
            {
                Ok(r) => {
                    cache
                        .assume_pod(Arc::new(pod.assumed_on(&r.suggested_host)))
                        .unwrap();
                    placed.push(Ok(r.suggested_host.to_string()));
                }
                Err(e) => placed.push(Err(match e {
                    ScheduleError::Fit(fit) => fit.to_string(),
                    other => format!("{other:?}"),
                })),
            }
        }
        (placed, alg.reused())
    }

    type Placements = Vec<Result<String, String>>;

    /// Runs the stream both ways: the same placements, and the same reasons
    /// where a pod fits nowhere. Returns them, and what batching reused.
    async fn same_both_ways(kinds: &[u64], remote: bool) -> (Placements, (u64, u64)) {
        let (plain, none) = run(false, kinds, remote).await;
        let (batched, reused) = run(true, kinds, remote).await;
        assert_eq!(none, (0, 0));
        assert_eq!(plain.len(), batched.len());
        for (i, (a, b)) in plain.iter().zip(&batched).enumerate() {
            assert_eq!(a, b, "pod p{i}");
        }
        (plain, reused)
    }

    /// Every kind of pod: node-local ones, spreading and anti-affinity.
    const ALL_KINDS: [u64; 9] = [0, 1, 2, 3, 4, 5, 6, 7, 8];

    #[tokio::test]
    async fn batched_placements_are_the_unbatched_ones() {
        let (placed, (verdicts, scores)) = same_both_ways(&ALL_KINDS, false).await;
        assert!(placed.iter().any(Result::is_err), "some pods never fit");
        // Batching did happen, for most of the stream.
        assert!(verdicts > 10_000, "{verdicts} verdicts reused");
        assert!(scores > 10_000, "{scores} score rows reused");
    }

    /// Spreading and anti-affinity pods, required and preferred, keep the
    /// node-local plugins' verdicts and raw scores, while PodTopologySpread
    /// and InterPodAffinity judge and score every cycle: the required
    /// anti-affinity pods fill the racks and then fit nowhere, with the
    /// same reasons both ways.
    #[tokio::test]
    async fn spreading_and_anti_affinity_batch_in_part_with_the_same_placements() {
        let (placed, (verdicts, scores)) = same_both_ways(&[5, 6, 7, 8], false).await;
        assert!(placed.iter().any(Result::is_ok));
        assert!(placed.iter().any(Result::is_err), "the racks fill up");
        assert!(verdicts > 10_000, "{verdicts} verdicts reused");
        assert!(scores > 1_000, "{scores} score rows reused");
    }

    /// With a Filter and Score plugin served in batches (as a remote
    /// extender's, asked ahead of the per-node plugins), the per-node
    /// plugins' verdicts and scores are kept and the batch plugin judges
    /// and scores the nodes they pass every cycle: the same placements.
    #[tokio::test]
    async fn batched_placements_are_the_unbatched_ones_beside_a_batch_plugin() {
        let (placed, (verdicts, scores)) = same_both_ways(&ALL_KINDS, true).await;
        assert!(
            placed
                .iter()
                .filter_map(|p| p.as_ref().ok())
                .all(|n| n[1..].parse::<i64>().unwrap() % 11 != 0),
            "the batch plugin's rejections hold"
        );
        assert!(verdicts > 10_000, "{verdicts} verdicts reused");
        assert!(scores > 1_000, "{scores} score rows reused");
    }
}
