//! Simulate's answers a page at a time. A simulation of 100,000 pods lists
//! 100,000 placements, about 12 MiB: more than grpcurl and tonic clients
//! accept by default (4 MiB). The first answer carries the summary (counts,
//! nodes, completeness) and as many placements as fit in a page; the rest
//! are kept here, and `continue` tokens fetch them, as List pages objects.
//!
//! Kept: at most [`KEPT`] simulations, each for [`KEEP_FOR`] after its
//! answer (tokio time); a token of one dropped since is refused with
//! FAILED_PRECONDITION (simulate again). The placements kept are the
//! report's own, whose node and reason strings are shared between pods.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::v1 as pb;
use parking_lot::Mutex;
use prost::Message;
use tokio::time::Instant;

use super::ApiError;
use super::paging::{MAX_LIMIT, MAX_PAGE_BYTES};
use crate::scheduler::SimulatedPod;

/// How many simulations' placements are kept for their later pages.
pub const KEPT: usize = 4;
/// How long they are kept after the answer that started them.
pub const KEEP_FOR: Duration = Duration::from_secs(300);

struct Kept {
    id: u64,
    until: Instant,
    pods: Arc<Vec<SimulatedPod>>,
}

/// The simulations whose placements clients may still page through.
#[derive(Default)]
pub struct Simulations {
    kept: Mutex<VecDeque<Kept>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Simulations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulations")
            .field("kept", &self.kept.lock().len())
            .finish()
    }
}

/// One placement as the answer carries it.
pub fn placement(p: &SimulatedPod) -> pb::SimulatedPod {
    pb::SimulatedPod {
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        node: p.node.as_deref().unwrap_or("").to_string(),
        reason: p.reason.to_string(),
        pod_group: p.pod_group.as_deref().unwrap_or("").to_string(),
        outcome: if p.node.is_some() {
            pb::SimulatedOutcome::Placed
        } else if p.unknown {
            pb::SimulatedOutcome::Unknown
        } else {
            pb::SimulatedOutcome::Unschedulable
        } as i32,
    }
}

fn token(id: u64, offset: usize) -> String {
    format!("sim-{id}-{offset}")
}

fn parse(token: &str) -> Option<(u64, usize)> {
    let rest = token.strip_prefix("sim-")?;
    let (id, offset) = rest.split_once('-')?;
    Some((id.parse().ok()?, offset.parse().ok()?))
}

/// The `limit` of a request: 0 (as many as fit), or at most [`MAX_LIMIT`].
pub fn check_limit(limit: i64) -> Result<usize, ApiError> {
    if !(0..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::InvalidArgument(format!(
            "limit: Invalid value: {limit}: must be between 0 and {MAX_LIMIT}"
        )));
    }
    Ok(if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    })
}

impl Simulations {
    /// Fills `resp.pods` from `pods[offset..]`: at most `limit`, and no
    /// more than fit with the rest of `resp` in a page. When some are left,
    /// keeps `pods` (under `id`, or a new id) and sets `continue`.
    fn fill(
        &self,
        resp: &mut pb::SimulateResponse,
        pods: Arc<Vec<SimulatedPod>>,
        id: Option<u64>,
        offset: usize,
        limit: usize,
    ) {
        let mut bytes = resp.encoded_len();
        let mut end = offset;
        for p in &pods[offset.min(pods.len())..] {
            if end - offset >= limit {
                break;
            }
            let item = placement(p);
            let len = item.encoded_len() + 8;
            if end > offset && bytes + len > MAX_PAGE_BYTES {
                break;
            }
            bytes += len;
            resp.pods.push(item);
            end += 1;
        }
        let left = pods.len().saturating_sub(end);
        resp.remaining_pods = left as u32;
        if left == 0 {
            if let Some(id) = id {
                self.kept.lock().retain(|k| k.id != id);
            }
            return;
        }
        let id = id.unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let now = Instant::now();
        let mut kept = self.kept.lock();
        kept.retain(|k| k.until > now && k.id != id);
        while kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(Kept {
            id,
            until: now + KEEP_FOR,
            pods,
        });
        resp.r#continue = token(id, end);
    }

    /// The first answer of a simulation: `resp` (the summary) with the
    /// first page of `pods`.
    pub fn first_page(
        &self,
        mut resp: pb::SimulateResponse,
        pods: Vec<SimulatedPod>,
        limit: usize,
    ) -> pb::SimulateResponse {
        self.fill(&mut resp, Arc::new(pods), None, 0, limit);
        resp
    }

    /// The page a `continue` token asks for: placements only.
    pub fn next_page(&self, token: &str, limit: usize) -> Result<pb::SimulateResponse, ApiError> {
        let Some((id, offset)) = parse(token) else {
            return Err(ApiError::InvalidArgument(format!(
                "continue: Invalid value: {token:?}: not a continue token of a simulation"
            )));
        };
        let now = Instant::now();
        let pods = {
            let mut kept = self.kept.lock();
            kept.retain(|k| k.until > now);
            kept.iter().find(|k| k.id == id).map(|k| k.pods.clone())
        };
        let Some(pods) = pods else {
            return Err(ApiError::FailedPrecondition(format!(
                "continue: the simulation of token {token:?} is no longer kept (berthd keeps the last {KEPT} for {}s): simulate again",
                KEEP_FOR.as_secs()
            )));
        };
        if offset > pods.len() {
            return Err(ApiError::InvalidArgument(format!(
                "continue: Invalid value: {token:?}: past the simulation's {} pods",
                pods.len()
            )));
        }
        let mut resp = pb::SimulateResponse::default();
        self.fill(&mut resp, pods, Some(id), offset, limit);
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(n: usize) -> Vec<SimulatedPod> {
        let node: Arc<str> = Arc::from("n1");
        (0..n)
            .map(|i| SimulatedPod {
                namespace: Arc::from("default"),
                name: Arc::from(format!("web-{i}")),
                node: Some(node.clone()),
                reason: Arc::from(""),
                unknown: false,
                pod_group: None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn pages_follow_tokens_then_expire() {
        let s = Simulations::default();
        let first = s.first_page(pb::SimulateResponse::default(), pods(7), 3);
        assert_eq!(first.pods.len(), 3);
        assert_eq!(first.remaining_pods, 4);
        let second = s.next_page(&first.r#continue, 3).unwrap();
        assert_eq!(second.pods[0].name, "web-3");
        let third = s.next_page(&second.r#continue, 3).unwrap();
        assert_eq!(third.pods.len(), 1);
        assert!(third.r#continue.is_empty());
        assert_eq!(third.remaining_pods, 0);
        // Finished: dropped at once.
        let again = s.next_page(&second.r#continue, 3).unwrap_err();
        assert!(matches!(again, ApiError::FailedPrecondition(_)), "{again}");

        let first = s.first_page(pb::SimulateResponse::default(), pods(7), 3);
        tokio::time::advance(KEEP_FOR).await;
        let late = s.next_page(&first.r#continue, 3).unwrap_err();
        assert!(late.to_string().contains("simulate again"), "{late}");
    }

    #[test]
    fn a_page_without_a_limit_stops_before_four_mebibytes() {
        let s = Simulations::default();
        let first = s.first_page(pb::SimulateResponse::default(), pods(200_000), usize::MAX);
        assert!(first.encoded_len() <= MAX_PAGE_BYTES);
        assert!(!first.r#continue.is_empty());
        assert_eq!(first.pods.len() + first.remaining_pods as usize, 200_000);
    }
}
