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
//!
//! What is kept is kept per signature, for the last few signatures seen
//! ([`KEPT_SIGNATURES`]), so that the pods of several Deployments arriving
//! interleaved each find their own.

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
/// (its raw scores are in [`Kept::scores`], flat).
#[derive(Debug, Default, Clone)]
struct Slot {
    node: Option<Arc<NodeInfo>>,
    verdict: Option<Status>,
    scored: bool,
}

/// How many signatures' verdicts are kept at once. Pods of several
/// Deployments arrive interleaved; with one signature kept, each change
/// of signature threw away what the previous one had judged, and a replay
/// of two kinds of pod mixed 8:2 (`berth-bench trace --template
/// default=8,low-priority=2` at 5000 nodes) cost four times the CPU per
/// pod of one kind alone. Each signature kept costs a slot and a row of
/// raw scores per node (about 120 bytes: 0.6 MiB at 5000 nodes) and keeps
/// the node versions it judged alive until it judges their positions
/// again or is dropped.
const KEPT_SIGNATURES: usize = 4;

/// The verdicts and raw scores kept for one signature.
#[derive(Debug, Default)]
struct Kept {
    filter_key: Option<FilterKey>,
    score_key: Option<ScoreKey>,
    slots: Vec<Slot>,
    /// Raw scores, `width` per slot, valid where the slot is `scored`.
    scores: Vec<i64>,
    width: usize,
    /// The cycle that last used it (the least recently used goes first).
    used: u64,
}

/// Verdicts and raw scores kept across cycles (see the module), for the
/// last [`KEPT_SIGNATURES`] signatures seen.
#[derive(Debug, Default)]
pub(super) struct Batch {
    enabled: bool,
    kept: Vec<Kept>,
    /// The entry of `kept` this cycle uses.
    current: usize,
    /// Cycles begun (for `Kept::used`).
    cycles: u64,
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
        self.cycles += 1;
        self.current = match self
            .kept
            .iter()
            .position(|k| k.filter_key.as_ref() == Some(&key))
        {
            Some(i) => i,
            None => {
                let i = if self.kept.len() < KEPT_SIGNATURES {
                    self.kept.push(Kept::default());
                    self.kept.len() - 1
                } else {
                    self.kept
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, k)| k.used)
                        .map_or(0, |(i, _)| i)
                };
                let k = &mut self.kept[i];
                k.filter_key = Some(key);
                k.score_key = None;
                k.slots.clear();
                i
            }
        };
        let k = &mut self.kept[self.current];
        k.used = self.cycles;
        k.slots.resize(snapshot.num_nodes(), Slot::default());
        k.scores.resize(k.slots.len() * k.width, 0);
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
        let slot = self.kept[self.current].slots.get(position)?;
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
        let Some(slot) = self.kept[self.current].slots.get_mut(position) else {
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
        let k = &mut self.kept[self.current];
        if k.score_key != Some(key) {
            k.score_key = Some(key);
            for slot in &mut k.slots {
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
        let k = &self.kept[self.current];
        nodes
            .iter()
            .zip(positions)
            .map(|(node, &p)| {
                let slot = k.slots.get(p)?;
                match &slot.node {
                    Some(kept) if slot.scored && Arc::ptr_eq(kept, node) => {
                        k.scores.get(p * k.width..(p + 1) * k.width)
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
        let k = &mut self.kept[self.current];
        if k.width != per_node {
            k.width = per_node;
            k.scores.clear();
            k.scores.resize(k.slots.len() * per_node, 0);
            for slot in &mut k.slots {
                slot.scored = false;
            }
        }
        for ((node, &p), row) in nodes.iter().zip(positions).zip(raw.chunks(per_node)) {
            if let Some(slot) = k.slots.get_mut(p)
                && slot
                    .node
                    .as_ref()
                    .is_some_and(|kept| Arc::ptr_eq(kept, node))
                && !slot.scored
            {
                slot.scored = true;
                k.scores[p * per_node..(p + 1) * per_node].copy_from_slice(row);
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

    /// The `i`th pod of the stream, of kind `k`: several kinds, including
    /// ones whose verdicts batching keeps only in part (spreading,
    /// anti-affinity) and one that never fits.
    fn pod_of_kind(k: usize, i: usize) -> PodInfo {
        {
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
        }
    }

    /// The pods of the stream: runs of identical pods of the `kinds` given
    /// (see [`pod_of_kind`]).
    fn stream(kinds: &[u64]) -> Vec<PodInfo> {
        let mut rng = FastRng::new(3);
        let mut out = Vec::new();
        while out.len() < 600 {
            let k = kinds[rng.below(kinds.len() as u64) as usize] as usize;
            for _ in 0..1 + rng.below(12) {
                let i = out.len();
                out.push(pod_of_kind(k, i));
            }
        }
        out
    }

    /// The pods of the stream: the `kinds` given, one pod each in turn.
    fn interleaved(kinds: &[u64]) -> Vec<PodInfo> {
        (0..600)
            .map(|i| pod_of_kind(kinds[i % kinds.len()] as usize, i))
            .collect()
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
    async fn run(batching: bool, pods: Vec<PodInfo>, remote: bool) -> (Placements, (u64, u64)) {
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
        for (i, pod) in pods.into_iter().enumerate() {
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
        same_both_ways_for(|| stream(kinds), remote).await
    }

    async fn same_both_ways_for(
        pods: impl Fn() -> Vec<PodInfo>,
        remote: bool,
    ) -> (Placements, (u64, u64)) {
        let (plain, none) = run(false, pods(), remote).await;
        let (batched, reused) = run(true, pods(), remote).await;
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

    /// Pods of several kinds arriving interleaved, one of each in turn (as
    /// the pods of several Deployments do), each kind keeps its own
    /// verdicts and scores: reused as much as when they come in runs.
    #[tokio::test]
    async fn interleaved_kinds_each_keep_their_verdicts() {
        let (placed, (verdicts, scores)) =
            same_both_ways_for(|| interleaved(&[0, 1, 2, 3]), false).await;
        // Every pod fits but those of kind 2 past the untainted nodes
        // (one per node: they ask for host port 8080).
        for (i, p) in placed.iter().enumerate() {
            assert!(p.is_ok() || i % 4 == 2, "pod p{i}: {p:?}");
        }
        assert!(placed.iter().any(Result::is_err), "the host ports run out");
        // 600 pods over a window of 45 of 150 nodes (30%): once each
        // kind's window went round, all but the nodes placed on since are
        // reused.
        assert!(verdicts > 20_000, "{verdicts} verdicts reused");
        assert!(scores > 5_000, "{scores} score rows reused");
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
