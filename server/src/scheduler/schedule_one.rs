//! One pod's way through the framework: the scheduling cycle (serial, on
//! the loop) and the binding cycle (a task of its own).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use super::algorithm::{Algorithm, NO_NODES_AVAILABLE, ScheduleError, ScheduleResult};
use super::idle::maybe_report_idle;
use super::{EventKind, SchedulingEvent, Shared};
use crate::cache::Snapshot;
use crate::cluster::PodScheduledCondition;
use crate::framework::FitError;
use crate::framework::TRACE_TARGET;
use crate::framework::{
    ClusterEvent, Code, CycleState, Diagnosis, EventObject, EventType, Eviction, Framework,
    NominatingInfo, PodEvent, QueuedPodInfo, Status,
};
use crate::metrics::AttemptResult;
use crate::model::{PodInfo, PodRef};
use crate::queue::Popped;

/// How many binding cycles past Permit may run at once before the loop
/// waits for one to finish. Upstream has no bound, and needs none: it
/// schedules more slowly than the API server binds. berth can assume pods
/// far faster than a client limited to `clientConnection.qps` writes
/// them, and each binding in flight holds its cycle's state; without a
/// bound a backlog of 10,000 pods kept thousands of them in memory at once.
/// Pods stay in the queue instead, where they are cheap.
pub(super) const MAX_BINDINGS_IN_FLIGHT: usize = 64;

/// Why an attempt failed, with what the requeue and the messages need.
pub(super) struct Failure {
    pub status: Status,
    /// The full message (a FitError's wording, or the status message).
    pub message: String,
    pub diagnosis: Option<Diagnosis>,
    pub nominating: Option<NominatingInfo>,
    /// Preemption's eviction of victims, to run once the pod's nomination
    /// is written.
    pub eviction: Option<Eviction>,
}

impl Failure {
    pub fn from_status(status: Status) -> Self {
        Self {
            message: status.message(),
            status,
            diagnosis: None,
            nominating: Some(NominatingInfo::Override(None)),
            eviction: None,
        }
    }

    /// A rejection on the one node chosen (at Reserve, Permit or while
    /// waiting): worded as a fit error over one node.
    pub fn rejected_on(node: &Arc<str>, status: Status) -> Self {
        let mut diagnosis = Diagnosis::default();
        diagnosis.add_plugin_status(&status);
        if let Some(p) = status.plugin() {
            diagnosis.unschedulable_plugins.insert(p);
        }
        diagnosis.node_to_status.set(node.clone(), status.clone());
        let fit = FitError {
            num_all_nodes: 1,
            diagnosis,
        };
        Self {
            message: fit.to_string(),
            status: Status::code_only(status.code()),
            diagnosis: Some(fit.diagnosis),
            nominating: Some(NominatingInfo::Override(None)),
            eviction: None,
        }
    }
}

/// The scheduling loop: owns the snapshot and the search state.
pub(crate) struct Loop {
    pub(super) shared: Arc<Shared>,
    pub(super) algorithm: Algorithm,
    pub(super) snapshot: Arc<Snapshot>,
}

impl Loop {
    pub fn new(shared: Arc<Shared>, algorithm: Algorithm) -> Self {
        Self {
            shared,
            algorithm,
            snapshot: Arc::new(Snapshot::new()),
        }
    }

    /// Waits while [`MAX_BINDINGS_IN_FLIGHT`] binding cycles are past
    /// Permit (pods waiting at Permit do not count, so a gang still
    /// gathering never blocks its own members).
    async fn wait_for_binding_room(&self) {
        let waiting = self.shared.handle.waiting_pods();
        loop {
            // Registered before the check, so a binding finishing in
            // between still wakes it.
            let done = self.shared.binding_done.notified();
            let active = self
                .shared
                .bindings_in_flight
                .load(Ordering::SeqCst)
                .saturating_sub(waiting.len());
            if active < MAX_BINDINGS_IN_FLIGHT || self.shared.queue.is_closed() {
                return;
            }
            done.await;
        }
    }

    /// Pops and schedules pods until the queue closes; with `leader`,
    /// only while it says so.
    pub async fn run(mut self, mut leader: Option<watch::Receiver<bool>>) {
        loop {
            maybe_report_idle(&self.shared);
            if self.algorithm.has_look_ahead() && self.shared.queue.peek().is_none() {
                // The pod they were sent for left the queue: the extender
                // need not keep it while the loop waits.
                self.algorithm.drop_look_ahead();
            }
            let popped = match leader.as_mut() {
                None => self.shared.queue.pop_entity().await,
                Some(l) => {
                    if !*l.borrow_and_update() {
                        tracing::info!("not the leader: scheduling waits for leadership");
                        if l.wait_for(|leading| *leading).await.is_err() {
                            tracing::info!("leadership gone; scheduling loop stops");
                            return;
                        }
                        tracing::info!("leading: scheduling starts");
                        continue;
                    }
                    // Leadership first: once it is lost, nothing more is
                    // popped (pop takes a pod only when it returns, so
                    // dropping it loses nothing).
                    tokio::select! {
                        biased;
                        _ = l.wait_for(|leading| !*leading) => {
                            tracing::warn!("leadership lost: scheduling stops popping pods");
                            continue;
                        }
                        q = self.shared.queue.pop_entity() => q,
                    }
                }
            };
            let q = match popped {
                Some(Popped::Pod(q)) => q,
                Some(Popped::Group(g)) => {
                    let shared = self.shared.clone();
                    let _cycle = shared.cycle.lock().await;
                    if shared.queue.is_closed() {
                        tracing::info!("scheduling queue closed; scheduling loop stops");
                        return;
                    }
                    self.schedule_one_pod_group(g).await;
                    drop(_cycle);
                    self.wait_for_binding_room().await;
                    tokio::task::yield_now().await;
                    continue;
                }
                None => {
                    self.algorithm.drop_look_ahead();
                    tracing::info!("scheduling queue closed; scheduling loop stops");
                    return;
                }
            };
            let shared = self.shared.clone();
            let _cycle = shared.cycle.lock().await;
            if shared.queue.is_closed() {
                // Shutting down: the pod stays unscheduled.
                tracing::info!("scheduling queue closed; scheduling loop stops");
                return;
            }
            let pod = q.pod.clone();
            self.schedule_one(q).await;
            // Calls sent ahead for this pod and not used (its cycle ended
            // before Filter, or never started) are dropped.
            self.algorithm.end_cycle(&pod);
            drop(_cycle);
            self.wait_for_binding_room().await;
            // With pods ready, pop never waits, so without this the loop
            // would keep its worker thread for as long as the queue is full
            // and the binding cycle it just spawned (left in that worker's
            // next-task slot) would wait for another worker to steal it.
            tokio::task::yield_now().await;
        }
    }

    async fn schedule_one(&mut self, q: QueuedPodInfo) {
        let shared = self.shared.clone();
        let pod = q.pod.clone();
        let Some(fw) = shared.profiles.get(&pod.scheduler_name).cloned() else {
            tracing::error!(pod = %pod.key(), scheduler = %pod.scheduler_name, "profile not found for scheduler name");
            shared.queue.done(&pod.uid);
            return;
        };
        if pod.terminating {
            record(
                &fw,
                &pod,
                EventType::Warning,
                "FailedScheduling",
                "Scheduling",
                &format!("skip schedule deleting pod: {}", pod.key()),
            );
            shared.queue.done(&pod.uid);
            return;
        }
        if shared.cache.lock().is_assumed(&pod.uid) {
            shared.queue.done(&pod.uid);
            return;
        }

        // The attempt's span covers the scheduling cycle; its binding cycle
        // is a child span; its result is recorded when the attempt ends.
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "scheduling_cycle",
            pod = %pod.key(),
            k8s.namespace.name = %pod.namespace,
            k8s.pod.name = %pod.name,
            profile = %fw.profile_name(),
            attempt = q.attempts,
            result = Empty,
            node = Empty,
        );
        self.scheduling_cycle(shared, fw, q, pod, span.clone())
            .instrument(span)
            .await;
    }

    async fn scheduling_cycle(
        &mut self,
        shared: Arc<Shared>,
        fw: Arc<Framework>,
        q: QueuedPodInfo,
        pod: PodRef,
        span: tracing::Span,
    ) {
        let start = Instant::now();
        // Take the handle's reference back first, so that the update below
        // changes the snapshot in place instead of copying it.
        shared.handle.set_snapshot(Snapshot::empty());
        shared
            .cache
            .lock()
            .update_snapshot(Arc::make_mut(&mut self.snapshot));
        shared.handle.set_snapshot(self.snapshot.clone());
        let nominated = shared.handle.nominated_pods();
        let mut state = CycleState::with_snapshot(self.snapshot.clone());
        state.record_plugin_metrics = shared.prom.sample_cycle();
        if let Some(token) = self.algorithm.look_ahead_token(&pod) {
            // Calls were sent for this pod while the cycle before waited:
            // this cycle is their context.
            state.set_token(token);
        }

        let result = self
            .algorithm
            .schedule_pod(&fw, &mut state, &pod, &self.snapshot, &nominated)
            .await;
        if result.is_ok() {
            shared
                .prom
                .algorithm_duration
                .observe_duration(start.elapsed());
        }
        shared
            .next_start_node_index
            .store(self.algorithm.next_start_node_index, Ordering::Relaxed);
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let failure = self.on_schedule_error(&fw, &state, &pod, e).await;
                failure_handler(&shared, &fw, q, failure, start).await;
                return;
            }
        };
        match self
            .reserve_and_permit(&fw, &mut state, &pod, &result)
            .await
        {
            Ok(assumed) => {
                spawn_binding(&shared, fw, state, q, assumed, result, start, span);
            }
            Err(failure) => {
                failure_handler(&shared, &fw, q, failure, start).await;
            }
        }
    }

    async fn on_schedule_error(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        e: ScheduleError,
    ) -> Failure {
        match e {
            ScheduleError::NoNodesAvailable => {
                Failure::from_status(Status::unresolvable(NO_NODES_AVAILABLE))
            }
            ScheduleError::Error(s) => Failure::from_status(s),
            ScheduleError::Fit(mut fit) => {
                let mut nominating = Some(NominatingInfo::Override(None));
                let mut eviction = None;
                if fw.has_post_filter_plugins() {
                    let (result, s) = fw
                        .run_post_filter(state, pod, &fit.diagnosis.node_to_status)
                        .await;
                    fit.diagnosis.post_filter_msg = Some(s.message()).filter(|m| !m.is_empty());
                    nominating = result.map(|r| {
                        eviction = r.eviction;
                        r.nominating_info
                    });
                }
                Failure {
                    message: fit.to_string(),
                    status: Status::code_only(Code::Unschedulable),
                    diagnosis: Some(fit.diagnosis),
                    nominating,
                    eviction,
                }
            }
        }
    }

    /// Assume, Reserve, Permit. On success the pod counts against its node
    /// and its binding may start.
    async fn reserve_and_permit(
        &self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodRef,
        result: &ScheduleResult,
    ) -> Result<PodRef, Failure> {
        reserve_and_permit(&self.shared, fw, state, pod, result, None, None).await
    }
}

/// Assume, Reserve, Permit. On success the pod counts against its node
/// and its binding may start. `assumed`: the pod with its node set, when
/// the caller has it already (a group cycle's placement), and `trial`
/// its node as the group cycle's trial left it.
pub(super) async fn reserve_and_permit(
    shared: &Arc<Shared>,
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodRef,
    result: &ScheduleResult,
    assumed: Option<PodRef>,
    trial: Option<crate::cache::TrialNode>,
) -> Result<PodRef, Failure> {
    let host = &result.suggested_host;
    let assumed = match assumed {
        Some(a) if a.node_name.as_deref() == Some(&**host) => a,
        _ => Arc::new(pod.assumed_on(host)),
    };
    let assumed_now = shared
        .cache
        .lock()
        .assume_placed_pod(assumed.clone(), trial.as_ref());
    // Let go of the trial's nodes now: held, they would make the cache
    // copy the node at its next change (a forget after a failed Reserve).
    drop(trial);
    if let Err(e) = assumed_now {
        return Err(Failure::from_status(Status::error(e.to_string())));
    }
    shared.queue.delete_nominated_pod_if_exists(&pod.uid);

    let s = fw.run_reserve(state, &assumed, host).await;
    if !s.is_success() {
        fw.run_unreserve(state, &assumed, host).await;
        forget(shared, &assumed, host);
        return Err(if s.is_rejected() {
            Failure::rejected_on(host, s)
        } else {
            Failure::from_status(s)
        });
    }
    let s = fw.run_permit(state, &assumed, host).await;
    if !s.is_success() && !s.is_wait() {
        fw.run_unreserve(state, &assumed, host).await;
        forget(shared, &assumed, host);
        return Err(if s.is_rejected() {
            Failure::rejected_on(host, s)
        } else {
            Failure::from_status(s)
        });
    }
    if s.is_wait() {
        tracing::debug!(pod = %pod.key(), node = %host, "waiting at Permit");
        let mut event = SchedulingEvent::new(EventKind::Waiting, pod);
        event.node = Some(host.clone());
        event.message = s.message();
        let _ = shared.events.send(event);
    }
    Ok(assumed)
}

/// Starts the binding cycle of a pod past Permit (or waiting at it).
#[allow(clippy::too_many_arguments)]
pub(super) fn spawn_binding(
    shared: &Arc<Shared>,
    fw: Arc<Framework>,
    mut state: CycleState,
    q: QueuedPodInfo,
    assumed: PodRef,
    result: ScheduleResult,
    start: Instant,
    span: tracing::Span,
) {
    state.release_snapshot();
    shared.metrics.record_cycle_found_node(start.elapsed());
    shared.bindings_in_flight.fetch_add(1, Ordering::SeqCst);
    let shared = shared.clone();
    span.record("node", &*result.suggested_host);
    let binding = tracing::info_span!(
        target: TRACE_TARGET,
        parent: &span,
        "binding_cycle",
        node = %result.suggested_host,
        result = Empty,
    );
    tokio::spawn(async move {
        let outcome = binding_cycle(&shared, &fw, state, q, assumed, result, start)
            .instrument(binding.clone())
            .await;
        binding.record("result", outcome);
        span.record("result", outcome);
        drop((binding, span));
        shared.bindings_in_flight.fetch_sub(1, Ordering::SeqCst);
        shared.binding_done.notify_waiters();
        maybe_report_idle(&shared);
    });
}

fn forget(shared: &Shared, assumed: &PodInfo, node: &str) {
    if let Err(e) = shared.cache.lock().forget_pod(&assumed.uid, node) {
        tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache forget failed");
    }
}

pub(super) fn record(
    fw: &Framework,
    pod: &PodRef,
    t: EventType,
    reason: &'static str,
    action: &'static str,
    note: &str,
) {
    fw.handle().events().record(PodEvent::new(
        pod.clone(),
        fw.profile_name().clone(),
        t,
        reason,
        action,
        note,
    ));
}

/// Waits at Permit, then PreBind, Bind, PostBind. Any failure runs
/// Unreserve, forgets the assumed pod and requeues it. Returns the
/// attempt's result label.
async fn binding_cycle(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    state: CycleState,
    q: QueuedPodInfo,
    assumed: PodRef,
    result: ScheduleResult,
    start: Instant,
) -> &'static str {
    let host = &result.suggested_host;
    if let Err(failure) = bind_steps(shared, fw, &state, &assumed, host).await {
        let label = if failure.status.is_rejected() {
            "unschedulable"
        } else {
            "error"
        };
        // Boxed: the failure path's state would double the size of every
        // binding task (moved whole into each spawn), bound or not.
        Box::pin(binding_failure(
            shared, fw, &state, q, &assumed, host, failure, start,
        ))
        .await;
        return label;
    }
    // Bound in the cluster: no longer pending.
    shared.queue.binding_finished(&assumed.uid);
    shared
        .cache
        .lock()
        .finish_binding(&assumed.uid, Instant::now());
    let note = format!(
        "Successfully assigned {}/{} to {}",
        assumed.namespace, assumed.name, host
    );
    record(
        fw,
        &assumed,
        EventType::Normal,
        "Scheduled",
        "Binding",
        &note,
    );
    tracing::info!(
        pod = %assumed.key(), node = %host, evaluated = result.evaluated_nodes, feasible = result.feasible_nodes,
        attempts = q.attempts, latency_ms = millis(start.elapsed()), "scheduled"
    );
    let took = start.elapsed();
    shared.metrics.record_scheduled(took);
    if let Some(m) = fw.metrics() {
        m.profile.attempt(AttemptResult::Scheduled, took);
    }
    let first = q.initial_attempt_timestamp.unwrap_or(start);
    shared
        .prom
        .pod_scheduled(q.attempts, Instant::now().saturating_duration_since(first));
    shared.decided.fetch_add(1, Ordering::SeqCst);
    let mut event = SchedulingEvent::new(EventKind::Scheduled, &assumed);
    event.node = Some(host.clone());
    let _ = shared.events.send(event);
    fw.run_post_bind(&state, &assumed, host).await;
    "scheduled"
}

/// The steps of a binding cycle that can fail.
async fn bind_steps(
    shared: &Shared,
    fw: &Framework,
    state: &CycleState,
    assumed: &PodRef,
    host: &Arc<str>,
) -> Result<(), Failure> {
    // As v1.35+: when PreBind has work to do (volumes to bind, claims to
    // allocate) or the pod waits at Permit, the pod is nominated to its
    // node first, so that other components (the cluster autoscaler) see
    // where it is about to land meanwhile.
    let pre = fw.run_pre_bind_pre_flights(state, assumed, host);
    if !pre.is_success() && !pre.is_skip() {
        return Err(Failure::from_status(pre));
    }
    if (pre.is_success() || fw.will_wait_on_permit(assumed))
        && assumed.nominated_node_name.as_deref() != Some(&**host)
        && let Err(e) = shared
            .cluster
            .set_nominated_node_name(assumed, Some(host))
            .await
    {
        if shared.cluster.unreachable() || shared.cluster.refusal_reported(&e.to_string()) {
            tracing::debug!(pod = %assumed.key(), node = %host, error = %e, "setting the nominated node before binding failed; binding goes on");
        } else {
            tracing::warn!(pod = %assumed.key(), node = %host, error = %e, "setting the nominated node before binding failed; binding goes on");
        }
    }
    let s = fw.wait_on_permit(assumed).await;
    if !s.is_success() {
        return Err(if s.is_rejected() {
            Failure::rejected_on(host, s)
        } else {
            Failure::from_status(s)
        });
    }
    // From here the pod cannot come back as unschedulable through events
    // seen while it was in flight (GetQueue still lists it in flight until
    // it is bound or requeued).
    shared.queue.binding_started(&assumed.uid);
    let s = fw.run_pre_bind(state, assumed, host).await;
    if !s.is_success() {
        return Err(Failure::from_status(s));
    }
    let s = fw.run_bind(state, assumed, host).await;
    if !s.is_success() {
        return Err(Failure::from_status(s));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn binding_failure(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    state: &CycleState,
    q: QueuedPodInfo,
    assumed: &PodRef,
    host: &Arc<str>,
    failure: Failure,
    start: Instant,
) {
    fw.run_unreserve(state, assumed, host).await;
    let forgotten = shared.cache.lock().forget_pod(&assumed.uid, host);
    let rejected = failure.status.is_rejected();
    if let Err(e) = &forgotten {
        tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache forget failed");
    } else if !rejected {
        // The pod's room on the node is free again.
        shared.queue.move_all_to_active_or_backoff(
            ClusterEvent::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(assumed.clone())),
            None,
            None,
        );
    }
    failure_handler(shared, fw, q, failure, start).await;
    if forgotten.is_ok() && rejected {
        let uid = assumed.uid.clone();
        shared.queue.move_all_to_active_or_backoff(
            ClusterEvent::ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(assumed.clone())),
            None,
            Some(&|p: &PodInfo| p.uid != uid),
        );
    }
}

/// Requeues a pod whose attempt failed, records the FailedScheduling event
/// and sets its PodScheduled=False condition, as upstream does.
pub(super) async fn failure_handler(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    mut q: QueuedPodInfo,
    f: Failure,
    start: Instant,
) {
    let reason = if f.status.is_rejected() {
        "Unschedulable"
    } else {
        "SchedulerError"
    };
    let pod = q.pod.clone();
    match &f.diagnosis {
        Some(d) => {
            q.unschedulable_plugins = d.unschedulable_plugins.clone();
            q.pending_plugins = d.pending_plugins.clone();
        }
        None => {
            q.unschedulable_plugins.clear();
            q.pending_plugins.clear();
            // A rejection that names its plugin without a diagnosis (a pod
            // of a group a group point refused): the plugin's hints decide.
            if let Some(p) = f.status.plugin().filter(|_| f.status.is_rejected()) {
                q.unschedulable_plugins.insert(p);
            }
        }
    }
    if f.status.is_rejected() {
        if q.last_failure.as_deref() == Some(f.message.as_str()) {
            // The same failure again: counted, summarized now and then
            // (see `repeats`).
            shared.repeats.pod();
            tracing::debug!(pod = %pod.key(), attempts = q.attempts, "unschedulable: {}", f.message);
        } else {
            tracing::info!(pod = %pod.key(), attempts = q.attempts, "unschedulable: {}", f.message);
        }
    } else if !f.status.is_skip() {
        let outage = shared.cluster.unreachable()
            || shared.cluster.refusal_reported(&f.message)
            || f.status
                .plugin()
                .is_some_and(|p| shared.extenders.is_down(p));
        if outage {
            // The API server's outage reporter speaks for these.
            tracing::debug!(pod = %pod.key(), attempts = q.attempts, "error scheduling pod; retrying: {}", f.message);
        } else {
            tracing::warn!(pod = %pod.key(), attempts = q.attempts, "error scheduling pod; retrying: {}", f.message);
        }
    }
    q.last_failure = Some(Arc::from(f.message.as_str()));
    q.error_plugin = if f.status.is_rejected() {
        None
    } else {
        f.status.plugin()
    };

    // Requeue only if the pod still exists and is still unbound.
    let current = shared.cluster.get_pod(&pod.namespace, &pod.name);
    let current = current.filter(|p| p.metadata.uid.as_deref() == Some(&*pod.uid));
    let requeued_pod = match current.clone().map(PodInfo::new) {
        None => {
            tracing::info!(pod = %pod.key(), "pod doesn't exist any more; not requeued");
            shared.queue.done(&pod.uid);
            None
        }
        Some(Err(e)) => {
            tracing::error!(pod = %pod.key(), error = %e, "pod became invalid; not requeued");
            shared.queue.done(&pod.uid);
            None
        }
        Some(Ok(p)) if p.node_name.is_some() => {
            tracing::info!(pod = %pod.key(), node = ?p.node_name, "pod has been assigned to node; not requeued");
            shared.queue.done(&pod.uid);
            None
        }
        Some(Ok(p)) => {
            let p = Arc::new(p);
            q.pod = p.clone();
            if let Err(e) = shared.queue.add_unschedulable_if_not_present(q) {
                tracing::error!(pod = %pod.key(), error = %e, "requeue failed");
            }
            Some(p)
        }
    };
    let nominating = f.nominating.clone().unwrap_or(NominatingInfo::Noop);
    if let Some(p) = &requeued_pod {
        shared.queue.add_nominated_pod(p, &nominating);
    }
    if f.status.is_skip() {
        // No bind plugin took the pod: upstream records nothing.
        return;
    }
    shared.decided.fetch_add(1, Ordering::SeqCst);
    let mut event = SchedulingEvent::new(EventKind::Failed, &pod);
    event.reason = reason;
    event.message = f.message.clone();
    let _ = shared.events.send(event);
    record(
        fw,
        &pod,
        EventType::Warning,
        "FailedScheduling",
        "Scheduling",
        &f.message,
    );
    let nominated = match &nominating {
        NominatingInfo::Override(n) if n.as_deref() != pod.nominated_node_name.as_deref() => {
            Some(n.as_deref().map(str::to_string))
        }
        _ => None,
    };
    // Write the condition only when it changes, as upstream does: an
    // unchanged status makes no event to wake pods.
    let unchanged = current.as_ref().is_some_and(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some(reason)
                    && c.message.as_deref() == Some(f.message.as_str())
                    && c.observed_generation == p.metadata.generation
            })
    });
    if requeued_pod.is_some() && (!unchanged || nominated.is_some()) {
        let cond = PodScheduledCondition {
            reason: reason.to_string(),
            message: f.message,
        };
        if let Err(e) = shared
            .cluster
            .set_unschedulable(&pod, cond, nominated)
            .await
        {
            if shared.cluster.unreachable() || shared.cluster.refusal_reported(&e.to_string()) {
                tracing::debug!(pod = %pod.key(), error = %e, "error updating pod status");
            } else {
                tracing::warn!(pod = %pod.key(), error = %e, "error updating pod status");
            }
        }
    }
    // The victims go once the cluster knows where the preemptor is
    // nominated (as upstream orders its writes), unless the preemptor is
    // gone or placed meanwhile.
    if let Some(eviction) = f.eviction
        && requeued_pod.is_some()
        && let Err(e) = eviction.run().await
    {
        // Retry soon rather than wait for an event that may not come.
        tracing::warn!(pod = %pod.key(), error = %e, "preemption failed; the pod goes back to the active queue");
        if let Some(p) = &requeued_pod {
            shared.queue.activate(std::slice::from_ref(p));
        }
    }
    let took = start.elapsed();
    shared
        .metrics
        .record_failed(took, reason == "Unschedulable");
    let result = if reason == "Unschedulable" {
        AttemptResult::Unschedulable
    } else {
        AttemptResult::Error
    };
    if let Some(m) = fw.metrics() {
        m.profile.attempt(result, took);
    }
    tracing::Span::current().record("result", result.label());
    tracing::trace!(elapsed_ms = millis(start.elapsed()), "attempt done");
}

/// A duration in milliseconds, rounded to the microsecond, for logs
/// (`latency_ms=0.035`, not `0.035036000000000005`).
fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
