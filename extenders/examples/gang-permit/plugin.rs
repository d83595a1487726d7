//! gang-permit's extension points: Reserve/Unreserve and Permit.

use std::time::Duration;

use berth_extender::*;
use parking_lot::Mutex;
use tracing::{info, warn};

use crate::groups::{Groups, Step};

/// Members carry their group's name in this label.
pub const GROUP_LABEL: &str = "pod-group.example.com/name";
/// And the group's quorum in this annotation.
pub const MIN_MEMBER_ANNOTATION: &str = "pod-group.example.com/min-member";

/// The extender.
pub struct GangPermit {
    wait: Duration,
    groups: Mutex<Groups<PermitDecider>>,
}

/// A pod's group (namespace/name) and quorum; None for pods in no group.
pub fn membership(pod: &CyclePod) -> Option<Result<(String, usize), String>> {
    let name = pod.label(GROUP_LABEL)?;
    let key = format!("{}/{name}", pod.namespace());
    let min = match pod.annotation(MIN_MEMBER_ANNOTATION) {
        None => Err(format!(
            "pod {} is in group {key} but has no {MIN_MEMBER_ANNOTATION} annotation",
            pod.identity()
        )),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "pod {}: {MIN_MEMBER_ANNOTATION} must be a positive integer, not {v:?}",
                pod.identity()
            )),
        },
    };
    Some(min.map(|m| (key, m)))
}

impl GangPermit {
    /// Members wait at most `wait` for their group.
    pub fn new(wait: Duration) -> Self {
        Self {
            wait,
            groups: Mutex::default(),
        }
    }

    /// (reserved, min) of a group.
    #[cfg(test)]
    pub fn count(&self, key: &str) -> Option<(usize, usize)> {
        self.groups.lock().count(key)
    }
}

#[async_trait]
impl Reserve for GangPermit {
    async fn reserve(
        &self,
        _cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<Status> {
        if let Some(Ok((key, min))) = membership(pod) {
            let mut groups = self.groups.lock();
            groups.reserved(&key, min, &r.id, &pod.identity().to_string());
            let (n, min) = groups.count(&key).unwrap_or((0, min));
            info!(
                group = %key, pod = %pod.identity(), reserved = n, min,
                "member reserved group={key} pod={} reserved={n}/{min}", pod.identity()
            );
        }
        Ok(Status::success())
    }

    async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
        let mut groups = self.groups.lock();
        if let Some(key) = groups.unreserved(&u.id) {
            let (n, min) = groups.count(&key).unwrap_or((0, 0));
            info!(
                group = %key, pod = %u.pod, reserved = n,
                "member unreserved group={key} pod={} reserved={n}/{min}", u.pod
            );
        }
        Ok(())
    }
}

#[async_trait]
impl Permit for GangPermit {
    async fn permit(
        &self,
        cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<PermitOutcome> {
        let (key, min) = match membership(pod) {
            None => return Ok(PermitOutcome::Allow),
            Some(Err(reason)) => {
                return Ok(PermitOutcome::Reject(Status::unresolvable(reason)));
            }
            Some(Ok(m)) => m,
        };
        let who = pod.identity().to_string();
        let mut groups = self.groups.lock();
        match groups.permit(&key, min, &r.id, &who, cx.permit_decider()) {
            Step::Wait => {
                let (n, min) = groups.count(&key).unwrap_or((0, min));
                info!(
                    group = %key, pod = %who, reserved = n, min,
                    "member waiting group={key} pod={who} reserved={n}/{min}"
                );
                Ok(PermitOutcome::Wait(self.wait))
            }
            Step::Allow { release } => {
                let (n, min) = groups.count(&key).unwrap_or((0, min));
                for (rid, member, decider) in release {
                    match decider.allow(&rid) {
                        Ok(()) => info!(
                            group = %key, pod = %member,
                            "member allowed group={key} pod={member}"
                        ),
                        // Its session is gone (berthd reconnected) or it was
                        // already rejected: berthd retries it.
                        Err(e) => warn!(
                            group = %key, pod = %member, error = %e,
                            "cannot allow waiting member group={key} pod={member}: {e}"
                        ),
                    }
                }
                info!(
                    group = %key, pod = %who, reserved = n, min,
                    "group complete group={key} pod={who} reserved={n}/{min}"
                );
                Ok(PermitOutcome::Allow)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_extender::k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(name: &str, group: Option<&str>, min: Option<&str>) -> CyclePod {
        let mut p = json!({"metadata": {"name": name, "namespace": "train", "uid": name}});
        if let Some(g) = group {
            p["metadata"]["labels"] = json!({GROUP_LABEL: g});
        }
        if let Some(m) = min {
            p["metadata"]["annotations"] = json!({MIN_MEMBER_ANNOTATION: m});
        }
        let p: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("bad test pod: {e}"));
        CyclePod::new(1, p)
    }

    fn r(id: &str) -> Reservation {
        Reservation {
            id: id.into(),
            node: "n".into(),
        }
    }

    #[tokio::test]
    async fn permit_answers() -> HandlerResult<()> {
        let g = GangPermit::new(Duration::from_secs(30));
        let cx = Context::standalone(Nodes::default());
        // No group: allowed at once.
        assert_eq!(
            g.permit(&cx, &pod("solo", None, None), &r("r0")).await?,
            PermitOutcome::Allow
        );
        // A group of two: the first waits, for the configured time.
        let w1 = pod("w1", Some("job"), Some("2"));
        assert!(g.reserve(&cx, &w1, &r("r1")).await?.is_success());
        assert_eq!(
            g.permit(&cx, &w1, &r("r1")).await?,
            PermitOutcome::Wait(Duration::from_secs(30))
        );
        // The second completes it (w1's decider has no session here, which
        // is logged, not an error).
        let w2 = pod("w2", Some("job"), Some("2"));
        assert!(g.reserve(&cx, &w2, &r("r2")).await?.is_success());
        assert_eq!(g.permit(&cx, &w2, &r("r2")).await?, PermitOutcome::Allow);
        assert_eq!(g.count("train/job"), Some((2, 2)));
        // Unreserve takes a member out of the count, once.
        let un = Unreservation {
            id: "r2".into(),
            node: "n".into(),
            pod: w2.identity().clone(),
            prior: PriorReserve::Succeeded,
        };
        g.unreserve(&cx, &un).await?;
        g.unreserve(&cx, &un).await?;
        assert_eq!(g.count("train/job"), Some((1, 2)));
        // A bad quorum is the pod's problem, for good.
        match g
            .permit(&cx, &pod("bad", Some("job"), Some("two")), &r("r3"))
            .await?
        {
            PermitOutcome::Reject(s) => {
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
                assert_eq!(
                    s.reasons,
                    vec![
                        "pod train/bad: pod-group.example.com/min-member must be a positive integer, not \"two\""
                    ]
                );
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        Ok(())
    }
}
