//! `berth.v1.Scheduler`: dry runs, simulations, the queue, events.

use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use berth_proto::v1 as pb;
use berth_proto::v1::scheduler_server::Scheduler as SchedulerService;
use futures::Stream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tonic::{Request, Response, Status};

pub use super::convert::MAX_SIMULATED_PODS;
use super::convert::{object, pod_from_json_with_priority, simulation_plan};
use super::paging::{MAX_PAGE_BYTES, Page, page};
use super::scheduler_groups::{
    GATE_OFF, group_dry_run_response, group_missing_response, group_pods, pod_group_from_json,
    scheduled_members,
};
use super::simulations::{Simulations, check_limit};
use super::{ApiError, Closing};
use crate::framework::{Code, FilterVerdict, NodeDetail, Status as PluginStatus};
use crate::queue::QueueName;
use crate::scheduler::{
    DryRunReport, EventKind, PluginNote, PluginOutcome, PodIdentity, Scheduler, SchedulingEvent,
    UnknownProfile, Verdict,
};

/// The Scheduler service.
#[derive(Debug, Clone)]
pub struct SchedulerApi {
    scheduler: Scheduler,
    closing: Closing,
    /// Simulations whose placements are paged out.
    simulations: std::sync::Arc<Simulations>,
    /// Whether a Replay is running (one at a time).
    replaying: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SchedulerApi {
    /// The service over a running scheduler.
    pub fn new(scheduler: Scheduler) -> Self {
        Self {
            scheduler,
            closing: Closing::never(),
            simulations: Default::default(),
            replaying: Default::default(),
        }
    }

    /// Ends event streams when `closing` closes.
    pub fn closing_on(self, closing: Closing) -> Self {
        Self { closing, ..self }
    }
}

impl From<UnknownProfile> for ApiError {
    fn from(e: UnknownProfile) -> Self {
        ApiError::NotFound(format!("profile: {e}"))
    }
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Converts a tokio instant into wall-clock time.
fn wall_clock(t: tokio::time::Instant) -> prost_types::Timestamp {
    let now = tokio::time::Instant::now();
    let wall = SystemTime::now();
    timestamp(if t >= now {
        wall + (t - now)
    } else {
        wall - (now - t)
    })
}

fn reasons(s: &PluginStatus) -> Vec<String> {
    s.reasons().iter().map(|r| r.to_string()).collect()
}

fn plugin_result(o: &PluginOutcome) -> pb::PluginResult {
    pb::PluginResult {
        plugin: o.plugin.to_string(),
        code: o.status.code().as_str().to_string(),
        reasons: reasons(&o.status),
        node_names: o.node_names.clone().unwrap_or_default(),
    }
}

fn pod_ref(p: &PodIdentity) -> pb::PodReference {
    pb::PodReference {
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        uid: p.uid.to_string(),
        priority: p.priority,
    }
}

/// The proto form of a dry run's explanation.
pub fn dry_run_response(r: &DryRunReport) -> pb::DryRunResponse {
    pb::DryRunResponse {
        selected_node: r.selected.as_deref().unwrap_or("").to_string(),
        profile: r.profile.to_string(),
        message: r.message.clone(),
        pre_filter: r.pre_filter.iter().map(plugin_result).collect(),
        pre_score: r.pre_score.iter().map(plugin_result).collect(),
        nodes: r
            .nodes
            .iter()
            .map(|n| pb::NodeResult {
                node: n.name.to_string(),
                verdict: match n.verdict {
                    Verdict::Feasible => pb::NodeVerdict::Feasible,
                    Verdict::Unschedulable => pb::NodeVerdict::Unschedulable,
                    Verdict::Unresolvable => pb::NodeVerdict::Unresolvable,
                    Verdict::Error => pb::NodeVerdict::Error,
                    Verdict::NotEvaluated => pb::NodeVerdict::NotEvaluated,
                    Verdict::Unknown => pb::NodeVerdict::Unknown,
                } as i32,
                filters: n
                    .filters
                    .iter()
                    .map(|(plugin, v)| {
                        let (code, reasons) = match v {
                            FilterVerdict::Ran(s) => (s.code().as_str().to_string(), reasons(s)),
                            FilterVerdict::Skipped => (Code::Skip.as_str().to_string(), Vec::new()),
                            FilterVerdict::NotEvaluated => ("NotEvaluated".to_string(), Vec::new()),
                            FilterVerdict::Unknown(s) => ("Unknown".to_string(), vec![s.message()]),
                            FilterVerdict::Ignored(why) => {
                                ("Ignored".to_string(), vec![why.clone()])
                            }
                        };
                        pb::FilterResult {
                            plugin: plugin.to_string(),
                            code,
                            reasons,
                        }
                    })
                    .collect(),
                scores: n
                    .scores
                    .iter()
                    .map(|s| pb::ScoreResult {
                        plugin: s.plugin.to_string(),
                        raw: s.raw,
                        normalized: s.normalized,
                        weight: s.weight,
                        weighted: s.weighted,
                    })
                    .collect(),
                total_score: n.total,
                selected: n.selected,
                top_score: n.top,
                unsatisfied: n.details.iter().filter_map(unsatisfied).collect(),
                devices: n.details.iter().filter_map(allocated_device).collect(),
                reason: n.reason.clone(),
            })
            .collect(),
        evaluated_nodes: r.evaluated as u32,
        feasible_nodes: r.feasible as u32,
        preemption: r.preemption.as_ref().map(|p| pb::Preemption {
            nominated_node: p.nominated_node.as_deref().unwrap_or("").to_string(),
            victims: p
                .victims
                .iter()
                .map(|v| pod_ref(&PodIdentity::from(&**v)))
                .collect(),
            message: p.message.clone(),
        }),
        pod_group: None,
        completeness: completeness(r.is_complete()) as i32,
        incomplete: r.incomplete.iter().map(plugin_note).collect(),
        skipped: r.skipped.iter().map(plugin_note).collect(),
    }
}

fn completeness(complete: bool) -> pb::Completeness {
    if complete {
        pb::Completeness::Complete
    } else {
        pb::Completeness::Incomplete
    }
}

fn plugin_note(n: &PluginNote) -> pb::PluginNote {
    pb::PluginNote {
        plugin: n.plugin.to_string(),
        point: n.point.to_string(),
        reason: n.reason.clone(),
        nodes: n.nodes as u32,
        pods: n.pods as u32,
    }
}

fn unsatisfied((plugin, d): &(&'static str, NodeDetail)) -> Option<pb::Unsatisfied> {
    match d {
        NodeDetail::Unsatisfied {
            claim,
            request,
            reason,
        } => Some(pb::Unsatisfied {
            plugin: plugin.to_string(),
            claim: claim.clone(),
            request: request.clone(),
            reason: reason.clone(),
        }),
        NodeDetail::Device { .. } => None,
    }
}

fn allocated_device((_, d): &(&'static str, NodeDetail)) -> Option<pb::AllocatedDevice> {
    match d {
        NodeDetail::Device {
            claim,
            request,
            driver,
            pool,
            device,
        } => Some(pb::AllocatedDevice {
            claim: claim.clone(),
            request: request.clone(),
            driver: driver.clone(),
            pool: pool.clone(),
            device: device.clone(),
        }),
        NodeDetail::Unsatisfied { .. } => None,
    }
}

fn event(e: &SchedulingEvent) -> pb::SchedulingEvent {
    pb::SchedulingEvent {
        r#type: match e.kind {
            EventKind::Scheduled => pb::EventType::Scheduled,
            EventKind::Failed => pb::EventType::Failed,
            EventKind::Preempted => pb::EventType::Preempted,
            EventKind::Waiting => pb::EventType::Waiting,
        } as i32,
        pod: Some(pod_ref(&e.pod)),
        node: e.node.as_deref().unwrap_or("").to_string(),
        message: e.message.clone(),
        preemptor: e.preemptor.as_ref().map(pod_ref),
        time: Some(timestamp(e.time)),
        reason: e.reason.to_string(),
    }
}

/// What `berthctl get nodes` shows of a node, from the scheduler's cache.
fn node_usage(n: &std::sync::Arc<crate::cache::NodeInfo>) -> pb::NodeUsage {
    let alloc = n.allocatable();
    let spec = n.node();
    let node = spec.map(|s| &s.node);
    let ready = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map_or("Unknown", |c| c.status.as_str());
    pb::NodeUsage {
        node: n.name().to_string(),
        ready: match ready {
            "True" | "False" => ready.to_string(),
            _ => "Unknown".to_string(),
        },
        unschedulable: spec.is_some_and(|s| s.unschedulable),
        taints: node
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| match t.value.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => format!("{}={v}:{}", t.key, t.effect),
                None => format!("{}:{}", t.key, t.effect),
            })
            .collect(),
        zone: spec
            .and_then(|s| s.labels.get(crate::model::node::LABEL_ZONE))
            .unwrap_or("")
            .to_string(),
        cpu_requested_milli: n.requested().milli_cpu,
        cpu_allocatable_milli: alloc.milli_cpu,
        memory_requested_bytes: n.requested().memory,
        memory_allocatable_bytes: alloc.memory,
        pods: n.pods().len() as i64,
        pods_allocatable: alloc.allowed_pod_number,
    }
}

/// One step of a simulation: a pod alone, a gang, or a pod whose
/// PodGroup exists nowhere.
enum Step {
    Pod(crate::model::PodInfo),
    Group(crate::model::GroupKey),
    Waiting(crate::model::PodInfo),
}

/// A simulation's steps, each gang at the place of its first pod.
#[derive(Default)]
struct Gangs {
    order: Vec<Step>,
    members: std::collections::HashMap<
        crate::model::GroupKey,
        (Arc<crate::model::PodGroupInfo>, Vec<crate::model::PodRef>),
    >,
}

impl Gangs {
    fn add(
        &mut self,
        scheduler: &Scheduler,
        requested: &std::collections::HashMap<
            crate::model::GroupKey,
            Arc<crate::model::PodGroupInfo>,
        >,
        key: crate::model::GroupKey,
        pod: crate::model::PodInfo,
    ) {
        if let Some((_, pods)) = self.members.get_mut(&key) {
            pods.push(Arc::new(pod));
            return;
        }
        let known = requested
            .get(&key)
            .cloned()
            .or_else(|| scheduler.pod_group_members(&key).and_then(|m| m.pod_group));
        match known {
            Some(g) => {
                self.order.push(Step::Group(key.clone()));
                self.members.insert(key, (g, vec![Arc::new(pod)]));
            }
            None => self.order.push(Step::Waiting(pod)),
        }
    }
}

/// A GetQueue page's `continue` token: the namespace asked for, where the
/// next page starts, and the uid of the pod before it (the page resumes
/// after that pod if it is still queued, else at the same position).
fn queue_token(ns: &str, next: usize, last_uid: &str) -> String {
    let text = format!("q1\0{ns}\0{next}\0{last_uid}");
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn queue_page_start(
    token: &str,
    ns: &str,
    entries: &[crate::queue::QueueEntry],
) -> Result<usize, ApiError> {
    if token.is_empty() {
        return Ok(0);
    }
    let invalid =
        |why: &str| ApiError::InvalidArgument(format!("continue: Invalid value: {token:?}: {why}"));
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = bytes
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| invalid("not a continue token of GetQueue"))?;
    let mut parts = text.splitn(4, '\0');
    let (Some("q1"), Some(tns), Some(next), Some(uid)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("not a continue token of GetQueue"));
    };
    if tns != ns {
        return Err(invalid(
            "the token belongs to another namespace: send the same namespace as for the first page",
        ));
    }
    let next: usize = next
        .parse()
        .map_err(|_| invalid("not a continue token of GetQueue"))?;
    Ok(entries
        .iter()
        .position(|e| *e.info.pod.uid == *uid)
        .map_or(next.min(entries.len()), |i| i + 1))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::SchedulingEvent, Status>> + Send>>;

#[tonic::async_trait]
impl SchedulerService for SchedulerApi {
    async fn dry_run(
        &self,
        req: Request<pb::DryRunRequest>,
    ) -> Result<Response<pb::DryRunResponse>, Status> {
        let req = req.into_inner();
        let profile = Some(req.profile.as_str()).filter(|p| !p.is_empty());
        if req.pod_group.is_some() {
            if req.pod.is_some() {
                return Err(ApiError::InvalidArgument(
                    "pod: Forbidden: with pod_group, the group's pods go in group_pods".into(),
                )
                .into());
            }
            if !self.scheduler.schedules_pod_groups() {
                return Err(ApiError::FailedPrecondition(format!("pod_group: {GATE_OFF}")).into());
            }
            let group = pod_group_from_json("pod_group", req.pod_group.as_ref())?;
            let pods = group_pods("group_pods", &group.key, &req.group_pods, |p| {
                self.scheduler.admit_priority(p)
            })?;
            let scheduled = scheduled_members(&self.scheduler, &group.key);
            let report = self
                .scheduler
                .dry_run_group(group, pods, scheduled, profile)
                .await
                .map_err(ApiError::from)?;
            return Ok(Response::new(group_dry_run_response(&report)));
        }
        if !req.group_pods.is_empty() {
            return Err(ApiError::InvalidArgument(
                "group_pods: Forbidden: only with pod_group".into(),
            )
            .into());
        }
        let pod =
            pod_from_json_with_priority("pod", object("pod", req.pod.as_ref())?, "dry-run", |p| {
                self.scheduler.admit_priority(p)
            })?;
        // A pod of a PodGroup the scheduler knows: the group is dry-run.
        if let Some((group, mut pods, scheduled)) = self.scheduler.pod_group_of(&pod) {
            pods.push(Arc::new(pod));
            let report = self
                .scheduler
                .dry_run_group(group, pods, scheduled, profile)
                .await
                .map_err(ApiError::from)?;
            return Ok(Response::new(group_dry_run_response(&report)));
        }
        // One whose PodGroup it does not know waits for it, as the queue
        // holds it: never a fit alone.
        if self.scheduler.schedules_pod_groups()
            && let Some(key) = crate::cache::group_key_of(&pod)
        {
            let fw = self
                .scheduler
                .profile_for(profile, &pod)
                .map_err(ApiError::from)?;
            return Ok(Response::new(group_missing_response(
                fw.profile_name(),
                &key,
                &pod,
            )));
        }
        let report = self
            .scheduler
            .dry_run(pod, profile, req.all_nodes)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(dry_run_response(&report)))
    }

    async fn simulate(
        &self,
        req: Request<pb::SimulateRequest>,
    ) -> Result<Response<pb::SimulateResponse>, Status> {
        let req = req.into_inner();
        let limit = check_limit(req.limit)?;
        if !req.r#continue.is_empty() {
            if !req.pods.is_empty() || req.replicas > 0 || !req.profile.is_empty() {
                return Err(ApiError::InvalidArgument(
                    "continue: Forbidden: a continue token asks for the rest of an earlier simulation: pods, replicas and profile must be empty".into(),
                )
                .into());
            }
            return Ok(Response::new(
                self.simulations.next_page(&req.r#continue, limit)?,
            ));
        }
        // Bounded before anything is built: the replicas asked for, then
        // each object's count as its own fields say.
        if req.replicas as usize > MAX_SIMULATED_PODS {
            return Err(ApiError::InvalidArgument(format!(
                "replicas: Invalid value: {}: at most {MAX_SIMULATED_PODS} pods can be simulated at once",
                req.replicas
            ))
            .into());
        }
        if req.pods.is_empty() {
            return Err(ApiError::InvalidArgument("pods: Required value".into()).into());
        }
        if req.replicas > 0 && req.pods.len() != 1 {
            return Err(ApiError::InvalidArgument(format!(
                "replicas: Invalid value: {}: only with exactly one pod or template",
                req.replicas
            ))
            .into());
        }
        let replicas = (req.replicas > 0).then_some(req.replicas);
        let mut plans = Vec::with_capacity(req.pods.len());
        let mut total = 0usize;
        for (i, s) in req.pods.iter().enumerate() {
            let field = format!("pods[{i}]");
            let mut plan = simulation_plan(&field, object(&field, Some(s))?, replicas)?;
            plan.admit_priority(|p| self.scheduler.admit_priority(p))?;
            total = total.saturating_add(plan.count);
            if total > MAX_SIMULATED_PODS {
                return Err(ApiError::InvalidArgument(format!(
                    "{field}: Too many: {total} pods in all: at most {MAX_SIMULATED_PODS} pods can be simulated at once"
                ))
                .into());
            }
            plans.push(plan);
        }
        let profile = Some(req.profile.as_str()).filter(|p| !p.is_empty());
        if !req.pod_groups.is_empty() && !self.scheduler.schedules_pod_groups() {
            return Err(ApiError::FailedPrecondition(format!("pod_groups: {GATE_OFF}")).into());
        }
        let mut groups = std::collections::HashMap::new();
        for (i, s) in req.pod_groups.iter().enumerate() {
            let g = pod_group_from_json(&format!("pod_groups[{i}]"), Some(s))?;
            groups.insert(g.key.clone(), g);
        }
        let grouping = self.scheduler.schedules_pod_groups();
        let mut sim = self.scheduler.simulation();
        let mut gangs = Gangs::default();
        for plan in &plans {
            for i in 0..plan.count {
                // Between pods: give way to other tasks, and so to the
                // server, which drops this call when its client goes away
                // or its deadline passes; and stop when berthd stops.
                tokio::task::yield_now().await;
                if self.closing.is_closed() {
                    return Err(Status::unavailable(format!(
                        "berthd is shutting down; the simulation stopped after {} of {total} pods",
                        sim.len()
                    )));
                }
                let pod = plan.pod(i)?;
                if !grouping {
                    // Placed as it comes: nothing is kept up front.
                    sim.place(pod, profile).await.map_err(ApiError::from)?;
                    continue;
                }
                // With GenericWorkload, a PodGroup's pods go together, at
                // the place of the first.
                match crate::cache::group_key_of(&pod) {
                    Some(key) => gangs.add(&self.scheduler, &groups, key, pod),
                    None => gangs.order.push(Step::Pod(pod)),
                }
            }
        }
        for step in gangs.order {
            tokio::task::yield_now().await;
            if self.closing.is_closed() {
                return Err(Status::unavailable(format!(
                    "berthd is shutting down; the simulation stopped after {} of {total} pods",
                    sim.len()
                )));
            }
            match step {
                Step::Pod(pod) => sim.place(pod, profile).await.map_err(ApiError::from)?,
                Step::Waiting(pod) => {
                    let name = crate::cache::group_key_of(&pod)
                        .map(|k| k.name)
                        .unwrap_or_default();
                    sim.refuse(&pod, crate::model::pod_group::waiting_for_pod_group(&name));
                }
                Step::Group(key) => {
                    let (group, pods) = gangs.members.remove(&key).expect("gathered");
                    let scheduled = scheduled_members(&self.scheduler, &key);
                    sim.place_group(group, pods, scheduled, profile)
                        .await
                        .map_err(ApiError::from)?;
                }
            }
        }
        let report = sim.finish();
        let scheduled = report.pods.iter().filter(|p| p.node.is_some()).count() as u32;
        let unknown = report.pods.iter().filter(|p| p.unknown).count() as u32;
        let summary = pb::SimulateResponse {
            scheduled,
            unschedulable: report.pods.len() as u32 - scheduled - unknown,
            unknown,
            completeness: completeness(report.incomplete.is_empty()) as i32,
            incomplete: report.incomplete.iter().map(plugin_note).collect(),
            skipped: report.skipped.iter().map(plugin_note).collect(),
            pods: Vec::new(),
            nodes: report
                .nodes
                .iter()
                .map(|u| {
                    let n = &u.node;
                    let alloc = n.allocatable();
                    pb::NodeUtilization {
                        node: n.name().to_string(),
                        cpu_requested_milli: n.requested().milli_cpu,
                        cpu_allocatable_milli: alloc.milli_cpu,
                        memory_requested_bytes: n.requested().memory,
                        memory_allocatable_bytes: alloc.memory,
                        pods: n.pods().len() as i64,
                        pods_allocatable: alloc.allowed_pod_number,
                        placed: u.placed,
                    }
                })
                .collect(),
            pod_groups: report
                .groups
                .iter()
                .map(|g| pb::SimulatedPodGroup {
                    namespace: g.group.key.namespace.to_string(),
                    name: g.group.key.name.to_string(),
                    fits: g.fits,
                    placed: g.placed as u32,
                    message: g.message.clone(),
                })
                .collect(),
            r#continue: String::new(),
            remaining_pods: 0,
        };
        Ok(Response::new(self.simulations.first_page(
            summary,
            report.pods,
            limit,
        )))
    }

    async fn list_node_usage(
        &self,
        req: Request<pb::ListNodeUsageRequest>,
    ) -> Result<Response<pb::ListNodeUsageResponse>, Status> {
        let req = req.into_inner();
        let snapshot = self.scheduler.snapshot();
        let mut nodes: Vec<_> = snapshot
            .list()
            .iter()
            .filter(|n| req.name.is_empty() || n.name() == req.name)
            .cloned()
            .collect();
        if !req.name.is_empty() && nodes.is_empty() {
            return Err(ApiError::NotFound(format!("node {:?} not found", req.name)).into());
        }
        nodes.sort_by(|a, b| a.name().cmp(b.name()));
        let Page {
            items,
            next,
            remaining,
        } = page(
            &nodes,
            |n| n.name().to_string(),
            node_usage,
            req.limit,
            &req.r#continue,
            "",
        )?;
        Ok(Response::new(pb::ListNodeUsageResponse {
            nodes: items,
            r#continue: next,
            remaining_item_count: remaining,
        }))
    }

    async fn list_profiles(
        &self,
        _req: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        let mut profiles: Vec<pb::Profile> = self
            .scheduler
            .profiles()
            .keys()
            .map(|name| pb::Profile {
                scheduler_name: name.to_string(),
            })
            .collect();
        profiles.sort_by(|a, b| a.scheduler_name.cmp(&b.scheduler_name));
        Ok(Response::new(pb::ListProfilesResponse { profiles }))
    }

    async fn get_queue(
        &self,
        req: Request<pb::GetQueueRequest>,
    ) -> Result<Response<pb::GetQueueResponse>, Status> {
        let req = req.into_inner();
        let ns = req.namespace;
        super::convert::namespace_arg(&ns)?;
        let limit = check_limit(req.limit)?;
        let queue = self.scheduler.queue();
        let waiting = self.scheduler.handle().waiting_pods();
        let now = tokio::time::Instant::now();
        let entries: Vec<_> = queue
            .list()
            .into_iter()
            .filter(|e| ns.is_empty() || *e.info.pod.namespace == *ns)
            .collect();
        let start = queue_page_start(&req.r#continue, &ns, &entries)?;
        let mut bytes = 0usize;
        let mut pods = Vec::new();
        let mut end = start;
        for e in &entries[start..] {
            if pods.len() >= limit {
                break;
            }
            let item = {
                let q = &e.info;
                pb::QueuedPod {
                    namespace: q.pod.namespace.to_string(),
                    name: q.pod.name.to_string(),
                    uid: q.pod.uid.to_string(),
                    queue: match e.queue {
                        QueueName::Active => pb::QueueName::Active,
                        QueueName::Backoff => pb::QueueName::Backoff,
                        QueueName::Unschedulable => pb::QueueName::Unschedulable,
                        QueueName::Gated => pb::QueueName::Gated,
                        QueueName::InFlight => pb::QueueName::InFlight,
                        QueueName::Incomplete => pb::QueueName::Incomplete,
                        QueueName::Pending => pb::QueueName::Pending,
                    } as i32,
                    priority: q.pod.priority,
                    scheduler_name: q.pod.scheduler_name.to_string(),
                    attempts: q.attempts,
                    backoff_expires_at: q.backoff_expiration.filter(|t| *t > now).map(wall_clock),
                    last_failure: q.last_failure.as_deref().unwrap_or("").to_string(),
                    unschedulable_plugins: q
                        .unschedulable_plugins
                        .iter()
                        .map(|p| p.to_string())
                        .collect(),
                    nominated_node_name: queue
                        .nominated_node(&q.pod.uid)
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    permit_wait: (e.queue == QueueName::InFlight)
                        .then(|| waiting.get(&q.pod.uid))
                        .flatten()
                        .map(|wp| pb::PermitWait {
                            node: wp.node().to_string(),
                            since: Some(wall_clock(wp.since())),
                            waiting_for: wp
                                .pending_until()
                                .into_iter()
                                .map(|(plugin, until)| pb::PermitWaiter {
                                    plugin: plugin.to_string(),
                                    until: Some(wall_clock(until)),
                                })
                                .collect(),
                        }),
                }
            };
            let len = prost::Message::encoded_len(&item) + 8;
            if !pods.is_empty() && bytes + len > MAX_PAGE_BYTES {
                break;
            }
            bytes += len;
            pods.push(item);
            end += 1;
        }
        let remaining = entries.len() - end;
        let next = if remaining > 0 && end > start {
            queue_token(&ns, end, &entries[end - 1].info.pod.uid)
        } else {
            String::new()
        };
        Ok(Response::new(pb::GetQueueResponse {
            pods,
            remaining_item_count: if next.is_empty() { 0 } else { remaining as i64 },
            r#continue: next,
        }))
    }

    type ReplayStream = super::replay::ReplayStream;

    async fn replay(
        &self,
        req: Request<tonic::Streaming<pb::ReplayRequest>>,
    ) -> Result<Response<Self::ReplayStream>, Status> {
        let stream = super::replay::replay(req.into_inner(), self.replaying.clone()).await?;
        Ok(Response::new(Box::pin(self.closing.end(stream))))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let ns = req.into_inner().namespace;
        super::convert::namespace_arg(&ns)?;
        let stream = BroadcastStream::new(self.scheduler.events()).filter_map(move |e| match e {
            Ok(e) if ns.is_empty() || *e.pod.namespace == *ns => Some(Ok(event(&e))),
            // A slow reader misses events rather than holding the scheduler up.
            _ => None,
        });
        Ok(Response::new(Box::pin(self.closing.end(stream))))
    }
}
