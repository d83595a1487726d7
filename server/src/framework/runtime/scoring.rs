//! PreScore, Score and NormalizeScore.

use super::*;

impl Framework {
    /// Runs PreScore plugins on the feasible nodes.
    pub async fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        self.run_pre_score_recorded(state, pod, nodes, &mut |_, _| {})
            .await
    }

    /// [`Framework::run_pre_score`], also telling `record` each plugin's
    /// status (for explanations).
    pub async fn run_pre_score_recorded(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status) + Send),
    ) -> Status {
        let t = self.point_timer(state);
        let s = self
            .pre_score_plugins(state, pod, nodes, record)
            .instrument(point_span(ExtensionPoint::PreScore))
            .await;
        self.point_done(ExtensionPoint::PreScore, s.code(), t);
        s
    }

    async fn pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status) + Send),
    ) -> Status {
        for (i, entry) in self.pre_score.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = entry.plugin.pre_score(state, pod, nodes).await;
            self.plugin_done(ExtensionPoint::PreScore, i, s.code(), t);
            record(entry.plugin.name(), &s);
            if s.is_skip() {
                if let Some(i) = entry.score_index {
                    state.skip_score.insert(i);
                }
                continue;
            }
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!("running PreScore plugin {name:?}: {}", s.message()))
                    .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Scores the feasible nodes: every (non-skipped) Score plugin on every
    /// node, fanned out over nodes; then NormalizeScore per plugin; then the
    /// range check and the weighted sum.
    pub async fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ScoreResult, Status> {
        self.run_score_reusing(state, pod, nodes, &[], None).await
    }

    /// Like [`Framework::run_score`], but a node whose entry in `known` is
    /// `Some` takes those raw scores (one per Score plugin running this
    /// cycle, in order, as [`ScoreResult::raw`] lays them out) instead of
    /// running the per-node plugins; NormalizeScore and the weights run as
    /// always. `known` may be empty (nothing known).
    /// `names`, when given, are the nodes' names in the same order (read
    /// from the snapshot, so that nodes whose scores are `known` are not
    /// touched).
    pub async fn run_score_reusing(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        known: &[Option<&[i64]>],
        names: Option<&[&str]>,
    ) -> Result<ScoreResult, Status> {
        let t = self.point_timer(state);
        let r = self
            .score_plugins(state, pod, nodes, known, names)
            .instrument(point_span(ExtensionPoint::Score))
            .await;
        let code = r.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
        self.point_done(ExtensionPoint::Score, code, t);
        r
    }

    /// How many of the Filter plugins, from the first in the profile's
    /// order, are node-local for `pod` this cycle, skipped, or batch
    /// plugins (which do not run per node: they judge the nodes the others
    /// pass, afterwards): the position of the first that is none of these,
    /// or the number of Filter plugins. The per-node verdict of those
    /// plugins depends only on the pod and the node, so it can be kept for
    /// the next identical pod even when a later plugin's (spreading,
    /// inter-pod affinity) cannot.
    pub fn node_local_filter_prefix(&self, state: &CycleState, pod: &PodInfo) -> usize {
        self.filter
            .iter()
            .enumerate()
            .position(|(i, p)| {
                !(state.skip_filter.contains(i)
                    || self.batch_filter.contains(i)
                    || p.node_local(pod))
            })
            .unwrap_or(self.filter.len())
    }

    /// The Score plugins still running after PreScore that are node-local
    /// for `pod` (and not batch plugins): their raw score on a node depends
    /// only on the pod and the node, so it can be kept for the next
    /// identical pod while the others score again.
    pub fn score_plugins_node_local(&self, state: &CycleState, pod: &PodInfo) -> PluginMask {
        let mut mask = PluginMask::default();
        for (i, e) in self.score.iter().enumerate() {
            if !state.skip_score.contains(i)
                && e.plugin.as_batch().is_none()
                && e.plugin.node_local(pod)
            {
                mask.insert(i);
            }
        }
        mask
    }

    async fn score_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        known: &[Option<&[i64]>],
        given_names: Option<&[&str]>,
    ) -> Result<ScoreResult, Status> {
        let active: Vec<&ScoreEntry> = self
            .score
            .iter()
            .enumerate()
            .filter(|(i, _)| !state.skip_score.contains(*i))
            .map(|(_, e)| e)
            .collect();
        // Each active plugin's position among all Score plugins.
        let slot: Vec<usize> = (0..self.score.len())
            .filter(|i| !state.skip_score.contains(*i))
            .collect();
        let np = active.len();
        let n = nodes.len();
        let mut raw = vec![0i64; n * np];
        // Scores that came with the batch Filter calls, if they are for
        // exactly these nodes.
        let prefetched = state.prefetched_scores.as_ref().filter(|p| {
            p.nodes.len() == n
                && p.nodes
                    .iter()
                    .zip(nodes)
                    .all(|(a, b)| *a == Arc::as_ptr(b) as usize)
        });
        // Batch plugins first: one call each for all nodes, sent now (the
        // first poll puts a remote request on its way) and awaited after
        // the per-node plugins ran, so that the two overlap.
        type Scores = Result<Vec<i64>, Status>;
        type BatchScores<'f> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Scores> + Send + 'f>>;
        // (position, timer, the call, its answer if it came at once)
        type Started<'f> = (usize, Option<Instant>, BatchScores<'f>, Option<Scores>);
        let mut batches: Vec<Started<'_>> = Vec::new();
        for (pi, e) in active.iter().enumerate() {
            let Some(batch) = e.plugin.as_batch() else {
                continue;
            };
            let t = self.plugin_timer(state);
            let early = prefetched
                .and_then(|p| p.scores.iter().find(|(j, _)| *j == slot[pi]))
                .map(|(_, v)| v.clone());
            let mut f = match early {
                Some(v) => batch.score_prefetched(state, pod, nodes, v),
                None => batch.score_nodes(state, pod, nodes),
            };
            let done = (&mut f).now_or_never();
            batches.push((pi, t, f, done));
        }
        let per_node = active.iter().any(|e| e.plugin.as_batch().is_none());
        let failure: Mutex<Option<Status>> = Mutex::new(None);
        if per_node {
            let parallelizer = self.handle.parallelizer();
            // One chunk of `np` scores per node.
            let mut chunks: Vec<&mut [i64]> = raw.chunks_mut(np).collect();
            // A kept row (see `scheduler::batching`) holds every active
            // plugin's raw score from an identical pod's cycle; only the
            // node-local plugins' are still right.
            let local = if known.is_empty() {
                PluginMask::default()
            } else {
                self.score_plugins_node_local(state, pod)
            };
            parallelizer.for_each_mut_measured(&self.score_cost, &mut chunks, |ni, row| {
                let kept = match known.get(ni) {
                    Some(Some(scores)) if scores.len() == row.len() => {
                        row.copy_from_slice(scores);
                        if local.len() == np {
                            return;
                        }
                        true
                    }
                    _ => false,
                };
                for (pi, e) in active.iter().enumerate() {
                    if e.plugin.as_batch().is_some() || (kept && local.contains(slot[pi])) {
                        continue;
                    }
                    let t = self.per_node_timer(state);
                    let r = e.plugin.score(state, pod, &nodes[ni]);
                    let code = r.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
                    self.plugin_done(ExtensionPoint::Score, slot[pi], code, t);
                    match r {
                        Ok(v) => row[pi] = v,
                        Err(s) => {
                            let mut f = failure.lock();
                            if f.is_none() {
                                *f = Some(Status::error(format!(
                                    "running Score plugins: plugin {:?} failed with: {}",
                                    e.plugin.name(),
                                    s.message()
                                )));
                            }
                            return;
                        }
                    }
                }
            });
        }
        for (pi, t, f, done) in batches {
            let e = active[pi];
            let name = e.plugin.name();
            let scores = match done {
                Some(r) => r,
                None => f.await,
            };
            let code = scores.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
            self.plugin_done(ExtensionPoint::Score, slot[pi], code, t);
            let scores = scores.map_err(|s| {
                Status::error(format!(
                    "running Score plugins: plugin {name:?} failed with: {}",
                    s.message()
                ))
            })?;
            if scores.len() != n {
                return Err(Status::error(format!(
                    "running Score plugins: plugin {name:?} returned {} scores for {n} nodes",
                    scores.len()
                )));
            }
            for (ni, v) in scores.into_iter().enumerate() {
                raw[ni * np + pi] = v;
            }
        }
        if let Some(s) = failure.into_inner() {
            return Err(s);
        }
        let mut normalized = raw.clone();
        // The nodes' names, read once for all the plugins that normalize.
        let given_names = given_names.filter(|g| g.len() == n);
        let mut names: Option<Vec<&str>> = None;
        for (pi, e) in active.iter().enumerate() {
            let Some(ext) = e.plugin.score_extensions() else {
                continue;
            };
            let names: &[&str] = match given_names {
                Some(g) => g,
                None => names.get_or_insert_with(|| nodes.iter().map(|n| n.name()).collect()),
            };
            let mut scores: Vec<NodeScore<'_>> = names
                .iter()
                .enumerate()
                .map(|(ni, &name)| NodeScore {
                    name,
                    score: normalized[ni * np + pi],
                })
                .collect();
            let t = self.plugin_timer(state);
            let s = ext.normalize_score(state, pod, &mut scores);
            self.plugin_done(
                ExtensionPoint::ScoreExtensionNormalize,
                slot[pi],
                s.code(),
                t,
            );
            if !s.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {:?} failed with: {}",
                    e.plugin.name(),
                    s.message()
                )));
            }
            for (ni, sc) in scores.iter().enumerate() {
                normalized[ni * np + pi] = sc.score;
            }
        }
        let mut totals = vec![0i64; n];
        for (ni, total) in totals.iter_mut().enumerate() {
            for (pi, e) in active.iter().enumerate() {
                let v = normalized[ni * np + pi];
                if !e.checked {
                    *total = total.saturating_add(v.saturating_mul(e.weight));
                    continue;
                }
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&v) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {v}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.plugin.name()
                    )));
                }
                *total += v * e.weight;
            }
        }
        Ok(ScoreResult {
            plugins: active.iter().map(|e| e.plugin.name()).collect(),
            weights: active.iter().map(|e| e.weight).collect(),
            raw,
            normalized,
            totals,
        })
    }
}
