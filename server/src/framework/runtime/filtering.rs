//! PreFilter (with AddPod/RemovePod), Filter (per node and in batches),
//! PostFilter.

use super::*;

impl Framework {
    /// Runs PreFilter plugins. Returns the merged node restriction, the
    /// status, and the plugins that restricted the nodes.
    pub async fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        self.run_pre_filter_recorded(state, pod, nodes, &mut |_, _, _| {})
            .await
    }

    /// [`Framework::run_pre_filter`], also telling `record` each plugin's
    /// status and result as it runs (for explanations).
    pub async fn run_pre_filter_recorded(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status, Option<&PreFilterResult>) + Send),
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        let t = self.point_timer(state);
        let out = self
            .pre_filter_plugins(state, pod, nodes, record)
            .instrument(point_span(ExtensionPoint::PreFilter))
            .await;
        self.point_done(ExtensionPoint::PreFilter, out.1.code(), t);
        out
    }

    async fn pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        record: &mut (dyn FnMut(&'static str, &Status, Option<&PreFilterResult>) + Send),
    ) -> (Option<PreFilterResult>, Status, BTreeSet<&'static str>) {
        let mut result: Option<PreFilterResult> = None;
        let mut with_nodes = BTreeSet::new();
        let mut returned = Status::success();
        for (i, entry) in self.pre_filter.iter().enumerate() {
            let name = entry.plugin.name();
            let t = self.plugin_timer(state);
            let (r, s) = entry.plugin.pre_filter(state, pod, nodes).await;
            self.plugin_done(ExtensionPoint::PreFilter, i, s.code(), t);
            record(name, &s, r.as_ref());
            if s.is_skip() {
                state.skip_pre_filter.insert(i);
                if let Some(fi) = entry.filter_index {
                    state.skip_filter.insert(fi);
                }
                continue;
            }
            if !s.is_success() {
                let s = s.with_plugin(name);
                match s.code() {
                    Code::UnschedulableAndUnresolvable => return (None, s, BTreeSet::new()),
                    Code::Unschedulable | Code::Pending => {
                        returned = s;
                        continue;
                    }
                    _ => {
                        return (
                            None,
                            Status::error(format!(
                                "running PreFilter plugin {name:?}: {}",
                                s.message()
                            ))
                            .with_plugin(name),
                            BTreeSet::new(),
                        );
                    }
                }
            }
            let Some(r) = r.filter(|r| !r.all_nodes()) else {
                continue;
            };
            with_nodes.insert(name);
            match &mut result {
                None => result = Some(r),
                Some(acc) => acc.merge(&r),
            }
            if result
                .as_ref()
                .and_then(|r| r.node_names.as_ref())
                .is_some_and(|n| n.is_empty())
            {
                let msg = if with_nodes.len() == 1 {
                    format!("node(s) didn't satisfy plugin {name}")
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) {} simultaneously",
                        go_list(&with_nodes)
                    )
                };
                return (result, Status::unresolvable(msg), with_nodes);
            }
        }
        if !returned.is_success() {
            return (None, returned, BTreeSet::new());
        }
        (result, returned, with_nodes)
    }

    /// Runs AddPod of every PreFilter plugin with extensions (not skipped).
    pub fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for (i, entry) in self.pre_filter.iter().enumerate() {
            if state.skip_pre_filter.contains(i) {
                continue;
            }
            let Some(ext) = entry.plugin.extensions() else {
                continue;
            };
            let t = self.per_node_timer(state);
            let s = ext.add_pod(state, pod, pod_to_add, node);
            self.plugin_done(ExtensionPoint::PreFilterExtensionAddPod, i, s.code(), t);
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!(
                    "running AddPod on PreFilter plugin {name:?}: {}",
                    s.message()
                ))
                .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Runs RemovePod of every PreFilter plugin with extensions (not skipped).
    pub fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for (i, entry) in self.pre_filter.iter().enumerate() {
            if state.skip_pre_filter.contains(i) {
                continue;
            }
            let Some(ext) = entry.plugin.extensions() else {
                continue;
            };
            let t = self.per_node_timer(state);
            let s = ext.remove_pod(state, pod, pod_to_remove, node);
            self.plugin_done(ExtensionPoint::PreFilterExtensionRemovePod, i, s.code(), t);
            if !s.is_success() {
                let name = entry.plugin.name();
                return Status::error(format!(
                    "running RemovePod on PreFilter plugin {name:?}: {}",
                    s.message()
                ))
                .with_plugin(name);
            }
        }
        Status::success()
    }

    /// Runs the Filter plugins on one node; the first that does not succeed
    /// decides.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.run_filter_range(state, pod, node, 0..self.filter.len())
    }

    /// [`Framework::run_filter`] for the Filter plugins at `plugins` (their
    /// positions in the profile's order) only: running `0..k` and then, if
    /// that succeeds, `k..` gives the same status as running them all.
    pub fn run_filter_range(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        plugins: std::ops::Range<usize>,
    ) -> Status {
        let to = plugins.end.min(self.filter.len());
        for i in plugins.start.min(to)..to {
            let p = &self.filter[i];
            if state.skip_filter.contains(i) || self.batch_filter.contains(i) {
                continue;
            }
            let t = self.per_node_timer(state);
            let s = p.filter(state, pod, node);
            self.plugin_done(ExtensionPoint::Filter, i, s.code(), t);
            if !s.is_success() {
                return self.filter_failure(p.name(), s);
            }
        }
        Status::success()
    }

    /// Whether any Filter plugin judges nodes in batches.
    pub fn has_batch_filters(&self) -> bool {
        !self.batch_filter.is_empty()
    }

    /// Whether the batch Filter calls may be sent for the next pod before
    /// its cycle starts: every batch Filter plugin of the profile allows it
    /// (see [`BatchFilter::looks_ahead`]).
    pub fn can_look_ahead(&self) -> bool {
        !self.batch_filter.is_empty()
            && self.filter.iter().enumerate().all(|(i, p)| {
                !self.batch_filter.contains(i) || p.as_batch().is_some_and(|b| b.looks_ahead())
            })
    }

    /// The Filter plugins that judge nodes in batches, in order.
    pub fn batch_filter_names(&self) -> Vec<&'static str> {
        self.filter
            .iter()
            .enumerate()
            .filter(|(i, _)| self.batch_filter.contains(*i))
            .map(|(_, p)| p.name())
            .collect()
    }

    /// Runs the batch Filter plugins (those not skipped by their PreFilter)
    /// in order, each on the nodes that passed the ones before; the nodes
    /// passing all are kept in `nodes`, in order, and `reject` is told about
    /// every other (with the status naming the plugin). `Err` when a plugin
    /// fails as a whole or says a node errored.
    pub async fn run_batch_filters(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &mut Vec<Arc<NodeInfo>>,
        reject: &mut (dyn FnMut(&'static str, &Arc<NodeInfo>, Status) + Send),
    ) -> Result<(), Status> {
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) || nodes.is_empty() {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let name = p.name();
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let statuses = batch
                .filter_nodes(state, pod, nodes)
                .await
                .map_err(failure)?;
            if statuses.len() != nodes.len() {
                return Err(Status::error(format!(
                    "running {name:?} filter plugin: {} verdicts for {} nodes",
                    statuses.len(),
                    nodes.len()
                ))
                .with_plugin(name));
            }
            let mut kept = Vec::with_capacity(nodes.len());
            for (node, s) in nodes.drain(..).zip(statuses) {
                if s.is_success() {
                    kept.push(node);
                    continue;
                }
                let s = failure(s);
                if s.code() == Code::Error {
                    return Err(s);
                }
                reject(name, &node, s);
            }
            *nodes = kept;
        }
        Ok(())
    }

    /// Sends the batch Filter plugins' calls for `window` (the cycle's
    /// candidates, in evaluation order) now, before the per-node plugins
    /// run, asking for the scores of plugins that also score in this
    /// profile without a PreScore. [`Framework::finish_batch_filters`]
    /// awaits them. `None` when no batch plugin can be asked ahead.
    pub fn start_batch_filters(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        window: NodeWindow<'_>,
    ) -> Option<BatchFiltersAhead> {
        if self.batch_filter.is_empty() || window.is_empty() {
            return None;
        }
        let mut calls = Vec::new();
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let score = self.fused_score[i];
            if let Some(call) = batch.start_filter_nodes(state, pod, window, score.is_some()) {
                calls.push(AheadCall {
                    filter_index: i,
                    score_index: score,
                    call,
                });
            }
        }
        (!calls.is_empty()).then_some(BatchFiltersAhead {
            calls,
            sent: window.len(),
            origin: None,
        })
    }

    /// Runs the batch Filter plugins on `nodes` (those the per-node plugins
    /// kept), as [`Framework::run_batch_filters`] does, using the calls
    /// `ahead` sent: `offsets[k]` is the position of `nodes[k]` in the
    /// window sent (in any order); a node outside the window (at or past
    /// its length) is judged by a second call with such nodes only. The
    /// result (kept nodes, rejections, errors) is that of
    /// `run_batch_filters` on `nodes`: each plugin only counts for the
    /// nodes the plugins before it kept. Scores that came along are kept in
    /// `state` for [`Framework::run_score`] on the nodes kept.
    pub async fn finish_batch_filters(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        ahead: Option<BatchFiltersAhead>,
        nodes: &mut Vec<Arc<NodeInfo>>,
        offsets: &[usize],
        reject: &mut (dyn FnMut(&'static str, &Arc<NodeInfo>, Status) + Send),
    ) -> Result<(), Status> {
        state.prefetched_scores = None;
        state.window_verdicts = None;
        state.unsettled = None;
        let Some(mut ahead) = ahead else {
            return self.run_batch_filters(state, pod, nodes, reject).await;
        };
        let mut offsets = offsets.to_vec();
        // Per Score plugin, a raw score per node of `nodes`.
        let mut fused: Vec<(usize, Vec<i64>)> = Vec::new();
        // The answers about the whole window, for preemption to reuse.
        let mut windows: Vec<WindowVerdicts> = Vec::new();
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) || nodes.is_empty() {
                continue;
            }
            let Some(batch) = p.as_batch() else {
                continue;
            };
            let name = p.name();
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let bad_count = |got: usize, want: usize| {
                Status::error(format!(
                    "running {name:?} filter plugin: {got} verdicts for {want} nodes"
                ))
                .with_plugin(name)
            };
            let early = ahead
                .calls
                .iter()
                .position(|c| c.filter_index == i)
                .map(|at| ahead.calls.swap_remove(at));
            // The nodes (by position in `nodes`) this plugin did not pass,
            // ascending, and the raw scores of all of them if they came.
            let (rejected, scores): (Rejected, Option<(usize, Vec<i64>)>) = match early {
                None => {
                    let statuses = batch
                        .filter_nodes(state, pod, nodes)
                        .await
                        .map_err(failure)?;
                    if statuses.len() != nodes.len() {
                        return Err(bad_count(statuses.len(), nodes.len()));
                    }
                    let rejected = statuses
                        .into_iter()
                        .enumerate()
                        .filter(|(_, s)| !s.is_success())
                        .collect();
                    (rejected, None)
                }
                Some(c) => {
                    let mut answer = c.call.await.map_err(failure)?;
                    if !answer.rejected.is_sorted_by_key(|(at, _)| *at) {
                        answer.rejected.sort_by_key(|(at, _)| *at);
                    }
                    if answer.nodes != ahead.sent {
                        return Err(bad_count(answer.nodes, ahead.sent));
                    }
                    // Nodes past the window sent: asked about now.
                    let beyond: Vec<usize> = (0..nodes.len())
                        .filter(|k| offsets[*k] >= ahead.sent)
                        .collect();
                    let rest = if beyond.is_empty() {
                        None
                    } else {
                        let listed: Vec<Arc<NodeInfo>> =
                            beyond.iter().map(|k| nodes[*k].clone()).collect();
                        let call = batch.start_filter_nodes(
                            state,
                            pod,
                            NodeWindow::of(&listed),
                            c.score_index.is_some(),
                        );
                        let rest = match call {
                            Some(call) => call.await.map_err(failure)?,
                            None => BatchFilterAnswer::from_statuses(
                                batch
                                    .filter_nodes(state, pod, &listed)
                                    .await
                                    .map_err(failure)?,
                            ),
                        };
                        if rest.nodes != listed.len() {
                            return Err(bad_count(rest.nodes, listed.len()));
                        }
                        let mut rest = rest;
                        rest.rejected.sort_by_key(|(at, _)| *at);
                        Some(rest)
                    };
                    // Offsets need not ascend (a window sent ahead may
                    // start before the cycle's, and wrap): each is looked
                    // up among the few rejections.
                    let mut rejected = Vec::new();
                    for (k, &o) in offsets.iter().enumerate() {
                        if o >= ahead.sent {
                            continue;
                        }
                        if let Ok(at) = answer.rejected.binary_search_by_key(&o, |(at, _)| *at) {
                            rejected.push((k, answer.rejected[at].1.clone()));
                        }
                    }
                    if let Some(r) = &rest {
                        for (j, s) in &r.rejected {
                            if let Some(k) = beyond.get(*j) {
                                rejected.push((*k, s.clone()));
                            }
                        }
                    }
                    rejected.sort_by_key(|(k, _)| *k);
                    if let Some((start, nodes)) = ahead.origin {
                        windows.push(WindowVerdicts {
                            filter_index: i,
                            start,
                            len: ahead.sent,
                            nodes,
                            rejected: std::mem::take(&mut answer.rejected),
                        });
                    }
                    let scores = c.score_index.and_then(|j| {
                        let head = answer.scores.as_ref()?;
                        let tail = match &rest {
                            None => None,
                            Some(r) => Some(r.scores.as_ref()?),
                        };
                        let mut next_beyond = 0;
                        let v = offsets
                            .iter()
                            .map(|&o| {
                                if o < ahead.sent {
                                    head.get(o).copied().unwrap_or(0)
                                } else {
                                    next_beyond += 1;
                                    tail.and_then(|t| t.get(next_beyond - 1).copied())
                                        .unwrap_or(0)
                                }
                            })
                            .collect();
                        Some((j, v))
                    });
                    (rejected, scores)
                }
            };
            if let Some(s) = scores {
                fused.push(s);
            }
            if rejected.is_empty() {
                // Every node passed: nothing to compact.
                continue;
            }
            let mut kept = 0;
            let mut rejected = rejected.into_iter().peekable();
            for k in 0..nodes.len() {
                if let Some((_, s)) = rejected.next_if(|(at, _)| *at == k) {
                    let s = failure(s);
                    if s.code() == Code::Error {
                        return Err(s);
                    }
                    reject(name, &nodes[k], s);
                    continue;
                }
                nodes.swap(kept, k);
                offsets.swap(kept, k);
                for (_, v) in &mut fused {
                    v.swap(kept, k);
                }
                kept += 1;
            }
            nodes.truncate(kept);
            offsets.truncate(kept);
            for (_, v) in &mut fused {
                v.truncate(kept);
            }
        }
        if !windows.is_empty() {
            state.window_verdicts = Some(Arc::new(windows));
        }
        // Calls the cycle did not need (no node left for them to judge):
        // those of plugins that reuse their cycle's verdicts are kept for
        // preemption to read instead of asking again; the others are
        // cancelled now, as they always were.
        ahead.calls.retain(|c| {
            self.filter[c.filter_index]
                .as_batch()
                .is_some_and(|b| b.reuses_cycle_verdicts())
        });
        if !ahead.calls.is_empty() && ahead.origin.is_some() {
            state.unsettled = Some(Arc::new(parking_lot::Mutex::new(Some(ahead))));
        }
        if !fused.is_empty() && !nodes.is_empty() {
            state.prefetched_scores = Some(Arc::new(PrefetchedScores {
                nodes: nodes.iter().map(|n| Arc::as_ptr(n) as usize).collect(),
                scores: fused,
            }));
        }
        Ok(())
    }

    /// The Score plugins and their weights, in order.
    pub fn score_weights(&self) -> Vec<(&'static str, i64)> {
        self.score
            .iter()
            .map(|e| (e.plugin.name(), e.weight))
            .collect()
    }

    pub(super) fn filter_failure(&self, name: &'static str, s: Status) -> Status {
        if s.is_rejected() {
            s.with_plugin(name)
        } else {
            Status::error(format!("running {name:?} filter plugin: {}", s.message()))
                .with_plugin(name)
        }
    }

    /// What a batch Filter plugin's failing status becomes: a rejection
    /// (or any failure of a plugin that wraps its errors) as Filter
    /// failures are reported, anything else an error naming the plugin.
    pub(super) fn batch_filter_failure(
        &self,
        name: &'static str,
        wraps: bool,
    ) -> impl Fn(Status) -> Status + Copy + '_ {
        move |s: Status| {
            if wraps || s.is_rejected() {
                self.filter_failure(name, s)
            } else {
                Status::error(s.message()).with_plugin(name)
            }
        }
    }

    /// Runs the Filter plugins on one node, taking into account pods
    /// nominated to it with at least the pod's priority: the node must fit
    /// the pod both with them (they will land there) and without them (they
    /// might not, and the pod must not rely on their absence... nor on
    /// their presence, for affinity).
    pub fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &NominatedPods,
    ) -> Status {
        let Some(candidates) = nominated.get(node.name()) else {
            return self.run_filter(state, pod, node);
        };
        let mut relevant = candidates
            .iter()
            .filter(|np| np.priority >= pod.priority && np.uid != pod.uid)
            .peekable();
        if relevant.peek().is_none() {
            return self.run_filter(state, pod, node);
        }
        let mut node_with = node.clone();
        let mut state_with = state.clone();
        for np in relevant {
            node_with.add_pod(np.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_with, pod, np, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter(&state_with, pod, &node_with);
        if !s.is_success() {
            return s;
        }
        self.run_filter(state, pod, node)
    }

    /// Whether preemption's what-if asks a batch Filter plugin of this
    /// profile ([`Framework::run_batch_filters_preemption`]).
    pub fn has_preemption_batch_filters(&self) -> bool {
        self.filter.iter().enumerate().any(|(i, p)| {
            self.batch_filter.contains(i) && p.as_batch().is_some_and(|b| b.judges_preemption())
        })
    }

    /// Preemption's what-if on the batch Filter plugins (remote extenders):
    /// each plugin, in order, is asked once about the candidates the ones
    /// before it kept ([`BatchFilter::filter_preemption`]); plugins whose
    /// PreFilter skipped them this cycle are not asked. The combined
    /// verdict of a candidate: rejected by the first plugin that rejects it
    /// (its status naming the plugin), else the pods every plugin needs
    /// gone (`Victims` when each said the victims do). A plugin that fails
    /// as a whole refuses every candidate it was asked about with its
    /// error. `filtered` is the cycle's diagnosis (its rejections are
    /// verdicts a plugin gave).
    pub async fn run_batch_filters_preemption(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        candidates: &[PreemptionCandidate<'_>],
        filtered: &NodeToStatus,
    ) -> Vec<PreemptionVerdict> {
        let settled = self.settle_batch_filters(state).await;
        // Per candidate: rejected, or the union of what the plugins need
        // (and whether one needs the victims).
        let mut rejected: Vec<Option<Status>> = vec![None; candidates.len()];
        let mut needs: Vec<Option<Vec<usize>>> = vec![None; candidates.len()];
        let mut victims = vec![false; candidates.len()];
        for (i, p) in self.filter.iter().enumerate() {
            if !self.batch_filter.contains(i) || state.skip_filter.contains(i) {
                continue;
            }
            let Some(batch) = p.as_batch().filter(|b| b.judges_preemption()) else {
                continue;
            };
            let asked: Vec<usize> = (0..candidates.len())
                .filter(|k| rejected[*k].is_none())
                .collect();
            if asked.is_empty() {
                break;
            }
            let sent: Vec<PreemptionCandidate<'_>> = asked.iter().map(|k| candidates[*k]).collect();
            let name = p.name();
            let window = settled
                .iter()
                .chain(state.window_verdicts.as_deref().into_iter().flatten())
                .find(|w| w.filter_index == i);
            let known = KnownVerdicts {
                plugin: name,
                filtered: Some(filtered),
                window,
                snapshot: Some(state.snapshot()),
            };
            let failure = self.batch_filter_failure(name, p.wraps_errors());
            let verdicts = match batch.filter_preemption(state, pod, &sent, &known).await {
                Ok(v) if v.len() == sent.len() => v,
                Ok(v) => {
                    let s = Status::error(format!(
                        "running {name:?} filter plugin at preemption: {} verdicts for {} candidates",
                        v.len(),
                        sent.len()
                    ))
                    .with_plugin(name);
                    vec![PreemptionVerdict::Rejected(s); sent.len()]
                }
                Err(s) => vec![PreemptionVerdict::Rejected(s); sent.len()],
            };
            for (k, v) in asked.into_iter().zip(verdicts) {
                match v {
                    PreemptionVerdict::Rejected(s) => rejected[k] = Some(failure(s)),
                    PreemptionVerdict::Victims => victims[k] = true,
                    PreemptionVerdict::Needs(pods) => {
                        let all = needs[k].get_or_insert_with(Vec::new);
                        all.extend(pods);
                    }
                }
            }
        }
        rejected
            .into_iter()
            .zip(needs)
            .zip(victims)
            .zip(candidates)
            .map(|(((r, n), v), c)| match (r, n) {
                (Some(s), _) => PreemptionVerdict::Rejected(s),
                (None, None) => PreemptionVerdict::Victims,
                (None, Some(mut pods)) => {
                    if v {
                        pods.extend((0..c.pods.len()).filter(|i| c.victims[*i]));
                    }
                    pods.sort_unstable();
                    pods.dedup();
                    PreemptionVerdict::Needs(pods)
                }
            })
            .collect()
    }

    /// The answers of the batch Filter calls this cycle sent ahead and did
    /// not need (see `CycleState::unsettled`), awaited now.
    async fn settle_batch_filters(&self, state: &CycleState) -> Vec<WindowVerdicts> {
        let ahead = state.unsettled.as_ref().and_then(|u| u.lock().take());
        let Some(ahead) = ahead else {
            return Vec::new();
        };
        let Some((start, nodes)) = ahead.origin else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(ahead.calls.len());
        for c in ahead.calls {
            // A call that failed tells nothing: the plugin is asked again.
            if let Ok(mut answer) = c.call.await
                && answer.nodes == ahead.sent
            {
                answer.rejected.sort_by_key(|(at, _)| *at);
                out.push(WindowVerdicts {
                    filter_index: c.filter_index,
                    start,
                    len: ahead.sent,
                    nodes,
                    rejected: answer.rejected,
                });
            }
        }
        out
    }

    /// Runs PostFilter plugins (when no node fits).
    pub async fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let t = self.point_timer(state);
        let (r, s) = self
            .post_filter_plugins(state, pod, filtered)
            .instrument(point_span(ExtensionPoint::PostFilter))
            .await;
        self.point_done(ExtensionPoint::PostFilter, s.code(), t);
        if let (Some(_), Some(m)) = (t, self.metrics.get()) {
            m.global.preemption_attempts.inc();
            if let Some(r) = r.as_ref().filter(|_| s.is_success()) {
                m.global.preemption_victims.observe(r.victims.len() as u64);
            }
        }
        (r, s)
    }

    async fn post_filter_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        filtered: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let mut reasons = Vec::new();
        let mut rejector: Option<&'static str> = None;
        let mut last_result: Option<PostFilterResult> = None;
        for (i, p) in self.post_filter.iter().enumerate() {
            let t = self.plugin_timer(state);
            let (r, s) = p.post_filter(state, pod, filtered, self).await;
            self.plugin_done(ExtensionPoint::PostFilter, i, s.code(), t);
            if s.is_success() {
                return (r, s);
            }
            match s.code() {
                Code::UnschedulableAndUnresolvable => return (r, s.with_plugin(p.name())),
                Code::Unschedulable => {
                    reasons.extend(s.reasons().iter().cloned());
                    rejector.get_or_insert(p.name());
                    if let Some(r) =
                        r.filter(|r| r.nominating_info != crate::framework::NominatingInfo::Noop)
                    {
                        last_result = Some(r);
                    }
                }
                _ => return (None, Status::error(s.message()).with_plugin(p.name())),
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        if let Some(p) = rejector {
            s = s.with_plugin(p);
        }
        (last_result, s)
    }
}
