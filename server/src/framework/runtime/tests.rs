//! The runtime's rules, each pinned by a test.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::*;
use crate::config;
use crate::framework::{BatchFilterCall, NodeScore, Registry};
use crate::testing::{make_node, make_pod};

/// What a test plugin does at each point.
#[derive(Clone, Default)]
struct Behaviour {
    pre_filter: Option<Status>,
    pre_filter_nodes: Option<Vec<&'static str>>,
    filter: HashMap<&'static str, Status>,
    pre_score: Option<Status>,
    score: HashMap<&'static str, i64>,
    normalize: Option<fn(&mut [NodeScore<'_>])>,
    reserve: Option<Status>,
    permit: Option<(Status, Duration)>,
    pre_bind: Option<Status>,
    bind: Option<Status>,
    /// Filter and Score through the batch traits.
    batch: bool,
    /// Batch Filter can also be sent ahead (and bring the scores).
    ahead: bool,
}

type Log = Arc<Mutex<Vec<String>>>;

struct TestPlugin {
    name: &'static str,
    b: Behaviour,
    log: Log,
}

impl TestPlugin {
    fn note(&self, what: &str) {
        self.log.lock().push(format!("{}.{what}", self.name));
    }
}

impl Plugin for TestPlugin {
    fn name(&self) -> &'static str {
        self.name
    }
    crate::extension_points!(
        pre_filter,
        filter,
        post_filter,
        pre_score,
        score,
        reserve,
        permit,
        pre_bind,
        bind,
        post_bind
    );
}

#[async_trait]
impl PreFilterPlugin for TestPlugin {
    async fn pre_filter(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        self.note("PreFilter");
        let result = self.b.pre_filter_nodes.as_ref().map(|n| PreFilterResult {
            node_names: Some(n.iter().map(|s| Arc::from(*s)).collect()),
        });
        (result, self.b.pre_filter.clone().unwrap_or_default())
    }
}

impl FilterPlugin for TestPlugin {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        self.note(&format!("Filter({})", node.name()));
        self.b.filter.get(node.name()).cloned().unwrap_or_default()
    }
    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        self.b.batch.then_some(self as &dyn BatchFilter)
    }
}

fn names(nodes: &[Arc<NodeInfo>]) -> String {
    nodes.iter().map(|n| n.name()).collect::<Vec<_>>().join(",")
}

#[async_trait]
impl BatchFilter for TestPlugin {
    async fn filter_nodes(
        &self,
        _: &CycleState,
        _: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, Status> {
        self.note(&format!("FilterBatch({})", names(nodes)));
        self.verdicts(nodes.iter())
    }

    fn start_filter_nodes(
        &self,
        _: &CycleState,
        _: &PodInfo,
        nodes: NodeWindow<'_>,
        score: bool,
    ) -> Option<BatchFilterCall> {
        if !self.b.ahead {
            return None;
        }
        let listed: Vec<Arc<NodeInfo>> = nodes.iter().cloned().collect();
        self.note(&format!(
            "FilterAhead({}{})",
            names(&listed),
            if score { " +score" } else { "" }
        ));
        let statuses = self.verdicts(listed.iter());
        let scores = score.then(|| {
            listed
                .iter()
                .map(|n| self.b.score.get(n.name()).copied().unwrap_or(0))
                .collect()
        });
        Some(Box::pin(async move {
            let mut answer = BatchFilterAnswer::from_statuses(statuses?);
            answer.scores = scores;
            Ok(answer)
        }))
    }
}

impl TestPlugin {
    /// Batch verdicts (a node's error is that node's status: the framework
    /// fails the attempt only for a node it still considers).
    fn verdicts<'a>(
        &self,
        nodes: impl Iterator<Item = &'a Arc<NodeInfo>>,
    ) -> Result<Vec<Status>, Status> {
        Ok(nodes
            .map(|n| self.b.filter.get(n.name()).cloned().unwrap_or_default())
            .collect())
    }
}

#[async_trait]
impl BatchScore for TestPlugin {
    async fn score_nodes(
        &self,
        _: &CycleState,
        _: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status> {
        self.note(&format!("ScoreBatch({})", names(nodes)));
        Ok(nodes
            .iter()
            .map(|n| self.b.score.get(n.name()).copied().unwrap_or(0))
            .collect())
    }

    async fn score_prefetched(
        &self,
        _: &CycleState,
        _: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        raw: Vec<i64>,
    ) -> Result<Vec<i64>, Status> {
        self.note(&format!("ScorePrefetched({})", names(nodes)));
        Ok(raw)
    }
}

#[async_trait]
impl PostFilterPlugin for TestPlugin {
    async fn post_filter(
        &self,
        _: &CycleState,
        _: &PodInfo,
        _: &NodeToStatus,
        _: &dyn ProfileFilters,
    ) -> (Option<PostFilterResult>, Status) {
        self.note("PostFilter");
        (
            None,
            Status::unschedulable(format!("{} could not help", self.name)),
        )
    }
}

#[async_trait]
impl PreScorePlugin for TestPlugin {
    async fn pre_score(&self, _: &mut CycleState, _: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        self.note("PreScore");
        self.b.pre_score.clone().unwrap_or_default()
    }
}

impl ScorePlugin for TestPlugin {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        self.note(&format!("Score({})", node.name()));
        Ok(self.b.score.get(node.name()).copied().unwrap_or(0))
    }
    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        self.b.normalize.map(|_| self as &dyn ScoreExtensions)
    }
    fn as_batch(&self) -> Option<&dyn BatchScore> {
        self.b.batch.then_some(self as &dyn BatchScore)
    }
}

impl ScoreExtensions for TestPlugin {
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        self.note("NormalizeScore");
        if let Some(f) = self.b.normalize {
            f(scores);
        }
        Status::success()
    }
}

#[async_trait]
impl ReservePlugin for TestPlugin {
    async fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        self.note("Reserve");
        self.b.reserve.clone().unwrap_or_default()
    }
    async fn unreserve(&self, _: &CycleState, _: &PodInfo, _: &str) {
        self.note("Unreserve");
    }
}

#[async_trait]
impl PermitPlugin for TestPlugin {
    async fn permit(&self, _: &CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
        self.note("Permit");
        self.b
            .permit
            .clone()
            .unwrap_or((Status::success(), Duration::ZERO))
    }
}

#[async_trait]
impl PreBindPlugin for TestPlugin {
    async fn pre_bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        self.note("PreBind");
        self.b.pre_bind.clone().unwrap_or_default()
    }
}

#[async_trait]
impl BindPlugin for TestPlugin {
    async fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        self.note("Bind");
        self.b.bind.clone().unwrap_or_else(Status::skip)
    }
}

#[async_trait]
impl PostBindPlugin for TestPlugin {
    async fn post_bind(&self, _: &CycleState, _: &PodInfo, _: &str) {
        self.note("PostBind");
    }
}

/// A queue-sort-only plugin, so profiles built from test plugins are valid.
struct Sort;
impl Plugin for Sort {
    fn name(&self) -> &'static str {
        "Sort"
    }
    crate::extension_points!(queue_sort);
}
impl QueueSortPlugin for Sort {
    fn less(
        &self,
        _: crate::framework::QueuedEntity<'_>,
        _: crate::framework::QueuedEntity<'_>,
    ) -> bool {
        false
    }
}

struct Fixture {
    fw: Framework,
    log: Log,
    nodes: Vec<Arc<NodeInfo>>,
}

fn handle() -> Handle {
    crate::testing::embedded_handle()
}

/// Builds a profile from YAML `plugins` (and optional pluginConfig) over
/// test plugins A, B, C with the given behaviours.
fn fixture(
    plugins_yaml: &str,
    behaviours: &[(&'static str, Behaviour)],
) -> Result<Fixture, ConfigError> {
    let log: Log = Arc::default();
    let mut registry = Registry::new();
    registry
        .register("Sort", |_: crate::framework::NoArgs, _| Ok(Sort))
        .unwrap();
    registry
        .register("Binder", |_: crate::framework::NoArgs, _| Ok(NullBinder))
        .unwrap();
    for (name, b) in behaviours {
        let (name, b, log) = (*name, b.clone(), log.clone());
        registry
            .register_factory(
                name,
                Arc::new(move |_, _, _| {
                    Ok(Arc::new(TestPlugin {
                        name,
                        b: b.clone(),
                        log: log.clone(),
                    }) as Arc<dyn Plugin>)
                }),
            )
            .unwrap();
    }
    // Profiles need a binder; tests about Bind bring their own.
    let binder = if plugins_yaml.contains("bind:") {
        ""
    } else {
        "    bind:\n      enabled: [{name: Binder}]\n"
    };
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: test\n  plugins:\n    queueSort:\n      enabled: [{{name: Sort}}]\n{binder}{plugins_yaml}"
    );
    let cfg = config::parse(&yaml, &|n| registry.contains(n))?;
    let fw = Framework::new(&cfg.profiles[0], &registry, &handle())?;
    let nodes = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Arc::new(NodeInfo::new(Arc::new(make_node(n).cpu("1").build()))))
        .collect();
    Ok(Fixture { fw, log, nodes })
}

fn indent(yaml: &str) -> String {
    yaml.lines().map(|l| format!("    {l}\n")).collect()
}

fn taken(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock())
}

fn pod() -> PodRef {
    Arc::new(make_pod("p").build())
}

#[tokio::test]
async fn plugins_run_in_configured_order() {
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: C}, {name: A}, {name: B}]\nreserve:\n  enabled: [{name: B}, {name: C}]"),
        &[("A", Behaviour::default()), ("B", Behaviour::default()), ("C", Behaviour::default())],
    )
    .unwrap();
    let mut st = CycleState::new();
    f.fw.run_pre_filter(&mut st, &pod(), &f.nodes).await;
    f.fw.run_reserve(&mut st, &pod(), "n1").await;
    assert_eq!(
        taken(&f.log),
        [
            "C.PreFilter",
            "A.PreFilter",
            "B.PreFilter",
            "B.Reserve",
            "C.Reserve"
        ]
    );
}

#[tokio::test]
async fn pre_filter_unresolvable_ends_at_once_unschedulable_lets_others_run() {
    let unresolvable = Behaviour {
        pre_filter: Some(Status::unresolvable("never")),
        ..Default::default()
    };
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", unresolvable), ("B", Behaviour::default())],
    )
    .unwrap();
    let (_, s, _) =
        f.fw.run_pre_filter(&mut CycleState::new(), &pod(), &f.nodes)
            .await;
    assert_eq!(
        (s.code(), s.plugin()),
        (Code::UnschedulableAndUnresolvable, Some("A"))
    );
    assert_eq!(taken(&f.log), ["A.PreFilter"], "B never ran");

    let unschedulable = Behaviour {
        pre_filter: Some(Status::unschedulable("not now")),
        ..Default::default()
    };
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", unschedulable), ("B", Behaviour::default())],
    )
    .unwrap();
    let (_, s, _) =
        f.fw.run_pre_filter(&mut CycleState::new(), &pod(), &f.nodes)
            .await;
    assert_eq!(
        (s.code(), s.plugin(), s.message().as_str()),
        (Code::Unschedulable, Some("A"), "not now")
    );
    assert_eq!(
        taken(&f.log),
        ["A.PreFilter", "B.PreFilter"],
        "B still prepares its state"
    );
}

#[tokio::test]
async fn pre_filter_error_ends_the_cycle_with_an_error() {
    let failing = Behaviour {
        pre_filter: Some(Status::error("boom")),
        ..Default::default()
    };
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", failing), ("B", Behaviour::default())],
    )
    .unwrap();
    let (_, s, _) =
        f.fw.run_pre_filter(&mut CycleState::new(), &pod(), &f.nodes)
            .await;
    assert_eq!(s.code(), Code::Error);
    assert_eq!(s.message(), "running PreFilter plugin \"A\": boom");
    assert_eq!(taken(&f.log), ["A.PreFilter"]);
}

#[tokio::test]
async fn pre_filter_results_intersect_and_an_empty_intersection_rejects() {
    let a = Behaviour {
        pre_filter_nodes: Some(vec!["n1", "n2"]),
        ..Default::default()
    };
    let b = Behaviour {
        pre_filter_nodes: Some(vec!["n2", "n3"]),
        ..Default::default()
    };
    let c = Behaviour {
        pre_filter_nodes: Some(vec!["n3"]),
        ..Default::default()
    };
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", a.clone()), ("B", b.clone())],
    )
    .unwrap();
    let (r, s, with) =
        f.fw.run_pre_filter(&mut CycleState::new(), &pod(), &f.nodes)
            .await;
    assert!(s.is_success());
    assert_eq!(
        r.unwrap().node_names.unwrap(),
        [Arc::from("n2")].into_iter().collect()
    );
    assert_eq!(with.into_iter().collect::<Vec<_>>(), ["A", "B"]);

    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}, {name: C}]"),
        &[("A", a), ("B", b), ("C", c)],
    )
    .unwrap();
    let (_, s, _) =
        f.fw.run_pre_filter(&mut CycleState::new(), &pod(), &f.nodes)
            .await;
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "node(s) didn't satisfy plugin(s) [A B C] simultaneously"
    );
}

#[tokio::test]
async fn filter_stops_at_the_first_plugin_that_does_not_succeed() {
    let rejects_n1 = Behaviour {
        filter: HashMap::from([("n1", Status::unschedulable("no room"))]),
        ..Default::default()
    };
    let f = fixture(
        &indent("filter:\n  enabled: [{name: A}, {name: B}, {name: C}]"),
        &[
            ("A", Behaviour::default()),
            ("B", rejects_n1),
            ("C", Behaviour::default()),
        ],
    )
    .unwrap();
    let st = CycleState::new();
    let s = f.fw.run_filter(&st, &pod(), &f.nodes[0]);
    assert_eq!(
        (s.code(), s.plugin(), s.message().as_str()),
        (Code::Unschedulable, Some("B"), "no room")
    );
    assert_eq!(
        taken(&f.log),
        ["A.Filter(n1)", "B.Filter(n1)"],
        "C not run on n1"
    );
    assert!(f.fw.run_filter(&st, &pod(), &f.nodes[1]).is_success());
    assert_eq!(
        taken(&f.log),
        ["A.Filter(n2)", "B.Filter(n2)", "C.Filter(n2)"]
    );
}

#[tokio::test]
async fn filter_errors_are_wrapped() {
    let broken = Behaviour {
        filter: HashMap::from([("n1", Status::error("disk on fire"))]),
        ..Default::default()
    };
    let f = fixture(&indent("filter:\n  enabled: [{name: A}]"), &[("A", broken)]).unwrap();
    let s = f.fw.run_filter(&CycleState::new(), &pod(), &f.nodes[0]);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::Error, "running \"A\" filter plugin: disk on fire")
    );
}

#[tokio::test]
async fn skip_at_pre_filter_skips_filter_and_skip_at_pre_score_skips_score() {
    let skipper = Behaviour {
        pre_filter: Some(Status::skip()),
        pre_score: Some(Status::skip()),
        filter: HashMap::from([("n1", Status::unschedulable("would reject"))]),
        score: HashMap::from([("n1", 100)]),
        ..Default::default()
    };
    let f = fixture(
        &indent("preFilter:\n  enabled: [{name: A}, {name: B}]\nfilter:\n  enabled: [{name: A}, {name: B}]\npreScore:\n  enabled: [{name: A}, {name: B}]\nscore:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", skipper), ("B", Behaviour::default())],
    )
    .unwrap();
    let mut st = CycleState::new();
    let (_, s, _) = f.fw.run_pre_filter(&mut st, &pod(), &f.nodes).await;
    assert!(s.is_success());
    assert!(
        f.fw.run_filter(&st, &pod(), &f.nodes[0]).is_success(),
        "A's rejection is never asked for"
    );
    assert!(
        f.fw.run_pre_score(&mut st, &pod(), &f.nodes)
            .await
            .is_success()
    );
    let r = f.fw.run_score(&st, &pod(), &f.nodes).await.unwrap();
    assert_eq!(r.plugins, ["B"]);
    let log = taken(&f.log);
    assert!(
        !log.iter()
            .any(|l| l.starts_with("A.Filter") || l.starts_with("A.Score")),
        "{log:?}"
    );
    assert!(log.iter().any(|l| l == "B.Filter(n1)"));
}

#[tokio::test]
async fn node_total_is_the_weighted_sum_of_normalized_scores() {
    let a = Behaviour {
        score: HashMap::from([("n1", 10), ("n2", 20), ("n3", 40)]),
        // Scale so the best node gets 100.
        normalize: Some(|scores| {
            let max = scores.iter().map(|s| s.score).max().unwrap_or(1).max(1);
            for s in scores.iter_mut() {
                s.score = s.score * 100 / max;
            }
        }),
        ..Default::default()
    };
    let b = Behaviour {
        score: HashMap::from([("n1", 90), ("n2", 50), ("n3", 0)]),
        ..Default::default()
    };
    let f = fixture(
        &indent("score:\n  enabled: [{name: A, weight: 2}, {name: B, weight: 3}]"),
        &[("A", a), ("B", b)],
    )
    .unwrap();
    let r =
        f.fw.run_score(&CycleState::new(), &pod(), &f.nodes)
            .await
            .unwrap();
    assert_eq!(r.weights, [2, 3]);
    assert_eq!(r.raw, [10, 90, 20, 50, 40, 0]);
    assert_eq!(r.normalized, [25, 90, 50, 50, 100, 0]);
    assert_eq!(r.totals, [2 * 25 + 3 * 90, 2 * 50 + 3 * 50, 2 * 100]);
}

#[tokio::test]
async fn a_score_outside_0_100_after_normalize_aborts() {
    let too_high = Behaviour {
        score: HashMap::from([("n1", 50)]),
        normalize: Some(|scores| scores.iter_mut().for_each(|s| s.score *= 3)),
        ..Default::default()
    };
    let f = fixture(
        &indent("score:\n  enabled: [{name: A}]"),
        &[("A", too_high)],
    )
    .unwrap();
    let err =
        f.fw.run_score(&CycleState::new(), &pod(), &f.nodes)
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::Error);
    assert_eq!(
        err.message(),
        "applying score defaultWeights on Score plugins: plugin \"A\" returns an invalid score 150, it should in the range of [0, 100] after normalizing"
    );
    // Without normalization the raw score is checked the same way.
    let negative = Behaviour {
        score: HashMap::from([("n2", -1)]),
        ..Default::default()
    };
    let f = fixture(
        &indent("score:\n  enabled: [{name: A}]"),
        &[("A", negative)],
    )
    .unwrap();
    assert!(
        f.fw.run_score(&CycleState::new(), &pod(), &f.nodes)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn batch_plugins_judge_the_survivors_of_per_node_plugins_in_one_call() {
    let per_node = Behaviour {
        filter: HashMap::from([("n1", Status::unschedulable("A says no"))]),
        score: HashMap::from([("n2", 10), ("n3", 20)]),
        ..Default::default()
    };
    let batch = Behaviour {
        filter: HashMap::from([("n2", Status::unschedulable("B says no"))]),
        score: HashMap::from([("n2", 100), ("n3", 50)]),
        batch: true,
        ..Default::default()
    };
    // The batch plugin comes first in the list, yet judges last.
    let f = fixture(
        &indent(
            "filter:\n  enabled: [{name: B}, {name: A}]\nscore:\n  enabled: [{name: B, weight: 2}, {name: A}]",
        ),
        &[("A", per_node), ("B", batch)],
    )
    .unwrap();
    let st = CycleState::new();
    assert!(
        f.fw.run_filter(&st, &pod(), &f.nodes[1]).is_success(),
        "per-node evaluation leaves batch plugins out"
    );
    let mut kept: Vec<Arc<NodeInfo>> = f
        .nodes
        .iter()
        .filter(|n| f.fw.run_filter(&st, &pod(), n).is_success())
        .cloned()
        .collect();
    let mut rejected = Vec::new();
    f.fw.run_batch_filters(&st, &pod(), &mut kept, &mut |p, n, s| {
        rejected.push((p, n.name().to_string(), s.message()))
    })
    .await
    .unwrap();
    assert_eq!(names(&kept), "n3");
    assert_eq!(rejected, [("B", "n2".to_string(), "B says no".to_string())]);

    let two = f.nodes[1..].to_vec();
    let r = f.fw.run_score(&st, &pod(), &two).await.unwrap();
    assert_eq!(r.plugins, ["B", "A"]);
    assert_eq!(r.raw, [100, 10, 50, 20]);
    assert_eq!(r.totals, [2 * 100 + 10, 2 * 50 + 20]);
    let log = taken(&f.log);
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with("B."))
            .cloned()
            .collect::<Vec<_>>(),
        ["B.FilterBatch(n2,n3)", "B.ScoreBatch(n2,n3)"],
        "one call per cycle, never per node"
    );
}

/// Batch Filter calls sent ahead with a window of candidates give what
/// judging the per-node survivors afterwards gives: the same nodes kept,
/// the same rejections (by the same plugin), the same error, the same
/// scores; whatever the window's length (nodes past it are asked about in
/// a second call), and with a later plugin's verdicts on nodes an earlier
/// one rejected ignored, as if never asked.
#[tokio::test]
async fn batch_filters_sent_ahead_give_the_outcome_of_judging_the_survivors_afterwards() {
    let names10: Vec<&'static str> =
        vec!["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"];
    let native = Behaviour {
        filter: HashMap::from([
            ("n1", Status::unschedulable("A says no")),
            ("n4", Status::unresolvable("A never")),
        ]),
        score: names10
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, i as i64))
            .collect(),
        ..Default::default()
    };
    let b = |ahead| Behaviour {
        filter: HashMap::from([
            ("n2", Status::unschedulable("B says no")),
            ("n7", Status::unresolvable("B never")),
        ]),
        score: names10
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, (i * 7 % 10) as i64 * 10))
            .collect(),
        batch: true,
        ahead,
        ..Default::default()
    };
    // C errs on n2, which B rejects first: never asked about it, so no error.
    let c = |ahead, error_on: &'static str| Behaviour {
        filter: HashMap::from([
            (error_on, Status::error("C broke")),
            ("n5", Status::unschedulable("C says no")),
        ]),
        score: names10
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, 100 - 10 * i as i64))
            .collect(),
        batch: true,
        ahead,
        ..Default::default()
    };
    let yaml = indent(
        "filter:\n  enabled: [{name: A}, {name: B}, {name: C}]\nscore:\n  enabled: [{name: A}, {name: B, weight: 2}, {name: C, weight: 3}]",
    );
    type Outcome = Result<(Vec<String>, Vec<(String, String, String)>, ScoreResult), String>;
    async fn run(f: &Fixture, all: &[Arc<NodeInfo>], window: Option<usize>) -> Outcome {
        let mut st = CycleState::new();
        let pod = pod();
        let ahead = window.and_then(|k| {
            f.fw.start_batch_filters(&st, &pod, NodeWindow::rotated(all, 0, k))
        });
        let mut kept = Vec::new();
        let mut offsets = Vec::new();
        for (i, n) in all.iter().enumerate() {
            if f.fw.run_filter(&st, &pod, n).is_success() {
                kept.push(n.clone());
                offsets.push(i);
            }
        }
        let mut rejected = Vec::new();
        let mut reject = |p: &'static str, n: &Arc<NodeInfo>, s: Status| {
            rejected.push((p.to_string(), n.name().to_string(), s.message()))
        };
        let r = match window {
            Some(_) => {
                f.fw.finish_batch_filters(&mut st, &pod, ahead, &mut kept, &offsets, &mut reject)
                    .await
            }
            None => {
                f.fw.run_batch_filters(&st, &pod, &mut kept, &mut reject)
                    .await
            }
        };
        r.map_err(|s| s.message())?;
        let scores =
            f.fw.run_score(&st, &pod, &kept)
                .await
                .map_err(|s| s.message())?;
        Ok((
            kept.iter().map(|n| n.name().to_string()).collect(),
            rejected,
            scores,
        ))
    }
    for error_on in ["n2", "n3"] {
        let sequential = fixture(
            &yaml,
            &[
                ("A", native.clone()),
                ("B", b(false)),
                ("C", c(false, error_on)),
            ],
        )
        .unwrap();
        let ten: Vec<Arc<NodeInfo>> = names10
            .iter()
            .map(|n| Arc::new(NodeInfo::new(Arc::new(make_node(n).cpu("1").build()))))
            .collect();
        let want = run(&sequential, &ten, None).await;
        if error_on == "n2" {
            let (kept, rejected, _) = want.as_ref().unwrap();
            assert_eq!(kept.join(","), "n0,n3,n6,n8,n9");
            assert_eq!(rejected.len(), 3);
        } else {
            assert_eq!(
                want.as_ref().unwrap_err(),
                "running \"C\" filter plugin: C broke"
            );
        }
        let ahead = fixture(
            &yaml,
            &[
                ("A", native.clone()),
                ("B", b(true)),
                ("C", c(true, error_on)),
            ],
        )
        .unwrap();
        for k in [1, 3, 6, 10] {
            let got = run(&ahead, &ten, Some(k)).await;
            assert_eq!(got, want, "error on {error_on}, window of {k}");
            let log = taken(&ahead.log);
            let calls: Vec<&String> = log
                .iter()
                .filter(|l| l.starts_with("B.") || l.starts_with("C."))
                .collect();
            // Filter goes ahead with the window, with the scores.
            assert!(
                calls[0].starts_with("B.FilterAhead(") && calls[0].ends_with(" +score)"),
                "{calls:?}"
            );
            if error_on == "n2" {
                // Never a separate Score call: the scores came along.
                assert!(!calls.iter().any(|l| l.contains("ScoreBatch")), "{calls:?}");
            }
        }
    }
}

#[test]
fn the_cycle_token_fires_once_the_last_copy_of_the_state_is_gone() {
    let fired: Arc<Mutex<Vec<u64>>> = Arc::default();
    let st = CycleState::new();
    let id = st.token().id();
    let sink = fired.clone();
    st.token().on_end(move |id| sink.lock().push(id));
    let copy = st.clone();
    assert_eq!(copy.token().id(), id, "copies share the cycle");
    drop(st);
    assert!(fired.lock().is_empty(), "a copy is still alive");
    drop(copy);
    assert_eq!(*fired.lock(), [id]);
    assert_ne!(CycleState::new().token().id(), id, "ids are unique");
}

#[test]
fn weights_that_could_overflow_are_rejected() {
    assert_eq!(check_weight(0, 1), Ok(100));
    let max = MAX_TOTAL_SCORE / MAX_NODE_SCORE;
    let total = check_weight(0, max).unwrap();
    assert_eq!(
        check_weight(total, 1),
        Err("total score of Score plugins could overflow".to_string())
    );
    assert!(check_weight(0, max + 1).is_err());
    // In configuration, a weight beyond an int32 is refused with its path.
    let err = fixture(
        &indent("score:\n  enabled: [{name: A, weight: 3000000000}]"),
        &[("A", Behaviour::default())],
    )
    .err()
    .unwrap();
    assert!(
        err.path
            .starts_with("profiles[0].plugins.score.enabled[0].weight"),
        "{err}"
    );
    let err = fixture(
        &indent("score:\n  enabled: [{name: A, weight: -1}]"),
        &[("A", Behaviour::default())],
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "profiles[0].plugins.score.enabled[0].weight: Invalid value: -1: must be greater than or equal to 0"
    );
}

#[tokio::test]
async fn reserve_failure_runs_unreserve_on_every_reserve_plugin_in_reverse() {
    let failing = Behaviour {
        reserve: Some(Status::unschedulable("no GPU slot")),
        ..Default::default()
    };
    let f = fixture(
        &indent("reserve:\n  enabled: [{name: A}, {name: B}, {name: C}]"),
        &[
            ("A", Behaviour::default()),
            ("B", failing),
            ("C", Behaviour::default()),
        ],
    )
    .unwrap();
    let mut st = CycleState::new();
    let s = f.fw.run_reserve(&mut st, &pod(), "n1").await;
    assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("B")));
    f.fw.run_unreserve(&st, &pod(), "n1").await;
    assert_eq!(
        taken(&f.log),
        [
            "A.Reserve",
            "B.Reserve",
            "C.Unreserve",
            "B.Unreserve",
            "A.Unreserve"
        ],
        "C never reserved but is unreserved too"
    );
}

#[tokio::test(start_paused = true)]
async fn permit_rejection_rejects_at_once() {
    let wait = Behaviour {
        permit: Some((Status::code_only(Code::Wait), Duration::from_secs(10))),
        ..Default::default()
    };
    let deny = Behaviour {
        permit: Some((Status::unschedulable("quota exceeded"), Duration::ZERO)),
        ..Default::default()
    };
    let f = fixture(
        &indent("permit:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", wait), ("B", deny)],
    )
    .unwrap();
    let p = pod();
    let s =
        f.fw.run_permit(&CycleState::new(), &p, &Arc::from("n1"))
            .await;
    assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("B")));
    assert!(
        f.fw.handle().waiting_pods().is_empty(),
        "a rejected pod does not wait"
    );
}

#[tokio::test(start_paused = true)]
async fn permit_wait_proceeds_only_when_every_waiting_plugin_allows() {
    let wait = |secs| Behaviour {
        permit: Some((Status::code_only(Code::Wait), Duration::from_secs(secs))),
        ..Default::default()
    };
    let f = fixture(
        &indent("permit:\n  enabled: [{name: A}, {name: B}, {name: C}]"),
        &[
            ("A", wait(30)),
            ("B", Behaviour::default()),
            ("C", wait(60)),
        ],
    )
    .unwrap();
    let p = pod();
    let s =
        f.fw.run_permit(&CycleState::new(), &p, &Arc::from("n1"))
            .await;
    assert_eq!(s.code(), Code::Wait);
    assert_eq!(
        s.message(),
        "one or more plugins asked to wait and no plugin rejected pod \"p\""
    );
    let waiting = f.fw.handle().waiting_pods().get(&p.uid).unwrap();
    assert_eq!(waiting.pending_plugins(), ["A", "C"]);

    let fw = Arc::new(f.fw);
    let (fw2, p2) = (fw.clone(), p.clone());
    let outcome = tokio::spawn(async move { fw2.wait_on_permit(&p2).await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    waiting.allow("A");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!outcome.is_finished(), "C has not allowed yet");
    waiting.allow("C");
    assert!(outcome.await.unwrap().is_success());
}

#[tokio::test(start_paused = true)]
async fn permit_timeouts_are_capped_at_15_minutes() {
    let forever = Behaviour {
        permit: Some((
            Status::code_only(Code::Wait),
            Duration::from_secs(24 * 3600),
        )),
        ..Default::default()
    };
    let f = fixture(
        &indent("permit:\n  enabled: [{name: A}]"),
        &[("A", forever)],
    )
    .unwrap();
    let p = pod();
    f.fw.run_permit(&CycleState::new(), &p, &Arc::from("n1"))
        .await;
    let start = tokio::time::Instant::now();
    let s = f.fw.wait_on_permit(&p).await;
    assert_eq!(start.elapsed(), MAX_PERMIT_TIMEOUT);
    assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("A")));
    assert_eq!(
        s.message(),
        "rejected due to timeout after waiting 15m0s at plugin A"
    );
}

#[tokio::test]
async fn pre_bind_failure_is_reported_with_its_plugin() {
    let failing = Behaviour {
        pre_bind: Some(Status::error("volume not ready")),
        ..Default::default()
    };
    let f = fixture(
        &indent("preBind:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", failing), ("B", Behaviour::default())],
    )
    .unwrap();
    let s = f.fw.run_pre_bind(&CycleState::new(), &pod(), "n1").await;
    assert_eq!(
        (s.code(), s.message().as_str()),
        (
            Code::Error,
            "running PreBind plugin \"A\": volume not ready"
        )
    );
    assert_eq!(taken(&f.log), ["A.PreBind"]);
}

#[tokio::test]
async fn bind_plugins_are_tried_in_order_until_one_does_not_skip() {
    let binds = Behaviour {
        bind: Some(Status::success()),
        ..Default::default()
    };
    let f = fixture(
        &indent("bind:\n  enabled: [{name: A}, {name: B}, {name: C}]"),
        &[
            ("A", Behaviour::default()),
            ("B", binds.clone()),
            ("C", binds),
        ],
    )
    .unwrap();
    assert!(
        f.fw.run_bind(&CycleState::new(), &pod(), "n1")
            .await
            .is_success()
    );
    assert_eq!(
        taken(&f.log),
        ["A.Bind", "B.Bind"],
        "C not asked once B bound"
    );

    let f = fixture(
        &indent("bind:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", Behaviour::default()), ("B", Behaviour::default())],
    )
    .unwrap();
    let s = f.fw.run_bind(&CycleState::new(), &pod(), "n1").await;
    assert!(s.is_skip(), "nobody bound the pod");
}

#[tokio::test]
async fn post_bind_is_informational_and_runs_all() {
    let f = fixture(
        &indent("postBind:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", Behaviour::default()), ("B", Behaviour::default())],
    )
    .unwrap();
    f.fw.run_post_bind(&CycleState::new(), &pod(), "n1").await;
    assert_eq!(taken(&f.log), ["A.PostBind", "B.PostBind"]);
}

#[tokio::test]
async fn post_filter_collects_reasons_until_one_helps() {
    let f = fixture(
        &indent("postFilter:\n  enabled: [{name: A}, {name: B}]"),
        &[("A", Behaviour::default()), ("B", Behaviour::default())],
    )
    .unwrap();
    let (_, s) =
        f.fw.run_post_filter(&CycleState::new(), &pod(), &NodeToStatus::default())
            .await;
    assert_eq!((s.code(), s.plugin()), (Code::Unschedulable, Some("A")));
    assert_eq!(s.message(), "A could not help, B could not help");
}

#[tokio::test]
async fn nominated_pods_of_higher_priority_are_counted_on_their_node() {
    // A filter that rejects nodes with more than one pod on them.
    struct OnePod;
    impl Plugin for OnePod {
        fn name(&self) -> &'static str {
            "OnePod"
        }
        crate::extension_points!(filter);
    }
    impl FilterPlugin for OnePod {
        fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
            if node.pods().is_empty() {
                Status::success()
            } else {
                Status::unschedulable("node has a pod")
            }
        }
    }
    let mut registry = Registry::new();
    registry
        .register("Sort", |_: crate::framework::NoArgs, _| Ok(Sort))
        .unwrap();
    registry
        .register("OnePod", |_: crate::framework::NoArgs, _| Ok(OnePod))
        .unwrap();
    registry
        .register("Binder", |_: crate::framework::NoArgs, _| Ok(NullBinder))
        .unwrap();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: t\n  plugins:\n    queueSort: {enabled: [{name: Sort}]}\n    filter: {enabled: [{name: OnePod}]}\n    bind: {enabled: [{name: Sort}]}\n";
    // Sort is not a Bind plugin: the profile is refused with the path.
    let cfg = config::parse(yaml, &|n| registry.contains(n)).unwrap();
    let err = Framework::new(&cfg.profiles[0], &registry, &handle()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "profiles[0].plugins.bind.enabled[0]: plugin \"Sort\" does not extend BindPlugin plugin"
    );

    let yaml = yaml.replace("    bind: {enabled: [{name: Sort}]}\n", "");
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).unwrap();
    let err = Framework::new(&cfg.profiles[0], &registry, &handle()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "profiles[0].plugins.bind: at least one bind plugin is needed for profile with scheduler name \"t\""
    );

    // With a binder the profile builds; check the nominated-pod rule.
    let yaml = format!("{yaml}    bind: {{enabled: [{{name: Binder}}]}}\n");
    let cfg = config::parse(&yaml, &|n| registry.contains(n)).unwrap();
    let fw = Framework::new(&cfg.profiles[0], &registry, &handle()).unwrap();
    let node = NodeInfo::new(Arc::new(make_node("n1").build()));
    let pod = make_pod("p").priority(10).build();
    let mut nominated = NominatedPods::new();
    let st = CycleState::new();
    nominated.insert(
        Arc::from("n1"),
        vec![Arc::new(
            make_pod("low").priority(5).nominated("n1").build(),
        )],
    );
    assert!(
        fw.run_filter_with_nominated_pods(&st, &pod, &node, &nominated)
            .is_success(),
        "lower priority: ignored"
    );
    nominated.insert(
        Arc::from("n1"),
        vec![Arc::new(
            make_pod("high").priority(10).nominated("n1").build(),
        )],
    );
    let s = fw.run_filter_with_nominated_pods(&st, &pod, &node, &nominated);
    assert_eq!(s.message(), "node has a pod", "equal priority: counted");
    // The pod's own nomination does not count against it.
    nominated.insert(
        Arc::from("n1"),
        vec![Arc::new(make_pod("p").priority(10).nominated("n1").build())],
    );
    assert!(
        fw.run_filter_with_nominated_pods(&st, &pod, &node, &nominated)
            .is_success()
    );
}

struct NullBinder;
impl Plugin for NullBinder {
    fn name(&self) -> &'static str {
        "Binder"
    }
    crate::extension_points!(bind);
}
#[async_trait]
impl BindPlugin for NullBinder {
    async fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        Status::success()
    }
}
