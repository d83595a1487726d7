//! `berth.v1.Scheduler`: the queue.

use berth_proto::v1::scheduler_server::Scheduler as SchedulerService;
use berth_proto::v1::{GetQueueRequest, GetQueueResponse, QueueName as PbQueue, QueuedPod};
use tonic::{Request, Response, Status};

use crate::queue::QueueName;
use crate::scheduler::Scheduler;

/// The Scheduler service.
#[derive(Debug, Clone)]
pub struct SchedulerApi {
    scheduler: Scheduler,
}

impl SchedulerApi {
    /// The service over a running scheduler.
    pub fn new(scheduler: Scheduler) -> Self {
        Self { scheduler }
    }
}

/// Converts a tokio instant into wall-clock time.
fn wall_clock(t: tokio::time::Instant) -> prost_types::Timestamp {
    let now = tokio::time::Instant::now();
    let wall = std::time::SystemTime::now();
    let at = if t >= now {
        wall + (t - now)
    } else {
        wall - (now - t)
    };
    let d = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

#[tonic::async_trait]
impl SchedulerService for SchedulerApi {
    async fn get_queue(
        &self,
        req: Request<GetQueueRequest>,
    ) -> Result<Response<GetQueueResponse>, Status> {
        let ns = req.into_inner().namespace;
        let queue = self.scheduler.queue();
        let now = tokio::time::Instant::now();
        let pods = queue
            .list()
            .into_iter()
            .filter(|e| ns.is_empty() || *e.info.pod.namespace == *ns)
            .map(|e| {
                let q = &e.info;
                QueuedPod {
                    namespace: q.pod.namespace.to_string(),
                    name: q.pod.name.to_string(),
                    uid: q.pod.uid.to_string(),
                    queue: match e.queue {
                        QueueName::Active => PbQueue::Active,
                        QueueName::Backoff => PbQueue::Backoff,
                        QueueName::Unschedulable => PbQueue::Unschedulable,
                        QueueName::Gated => PbQueue::Gated,
                        QueueName::InFlight => PbQueue::InFlight,
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
                }
            })
            .collect();
        Ok(Response::new(GetQueueResponse { pods }))
    }
}
