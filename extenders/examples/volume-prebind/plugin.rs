//! volume-prebind's extension points: Reserve/Unreserve, PreBind, PostBind.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use berth_extender::resources::parse_value;
use berth_extender::*;
use parking_lot::Mutex;
use regex::Regex;
use tracing::{info, warn};

/// Pods that need a volume say how big in this annotation (a quantity).
pub const SIZE_ANNOTATION: &str = "example.com/volume-size";

/// When PreBind fails on purpose.
#[derive(Debug, Clone, Default)]
pub struct FailRules {
    /// Pods whose name matches.
    pub pods: Option<Regex>,
    /// Every Nth provisioning attempt.
    pub every: Option<u64>,
}

/// A provisioned volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// namespace/name of the pod.
    pub pod: String,
    /// The node it was provisioned for.
    pub node: String,
    /// The size as the annotation wrote it.
    pub size: String,
    /// The reservation of the attempt that provisioned it, if known.
    pub reservation: Option<String>,
    /// Whether the pod was bound (then no Unreserve releases it).
    pub bound: bool,
}

#[derive(Debug, Default)]
struct State {
    /// pod uid -> the reservation of its current attempt.
    reservations: HashMap<String, String>,
    /// pod uid -> its volume.
    volumes: BTreeMap<String, Volume>,
}

/// The extender.
pub struct VolumePrebind {
    rules: FailRules,
    attempts: AtomicU64,
    state: Mutex<State>,
}

impl VolumePrebind {
    /// An extender with no volumes yet.
    pub fn new(rules: FailRules) -> Self {
        Self {
            rules,
            attempts: AtomicU64::new(0),
            state: Mutex::default(),
        }
    }

    /// The volumes provisioned and not released, by pod uid.
    #[cfg(test)]
    pub fn volumes(&self) -> BTreeMap<String, Volume> {
        self.state.lock().volumes.clone()
    }

    /// Why this attempt must fail, if it must.
    fn failure(&self, pod: &CyclePod, attempt: u64) -> Option<String> {
        if let Some(re) = &self.rules.pods
            && re.is_match(pod.name())
        {
            return Some(format!(
                "volume provisioning failed for pod {}: its name matches --fail-pods {}",
                pod.identity(),
                re.as_str()
            ));
        }
        match self.rules.every {
            Some(n) if attempt.is_multiple_of(n) => Some(format!(
                "volume provisioning failed for pod {}: attempt {attempt} is a multiple of --fail-every {n}",
                pod.identity()
            )),
            _ => None,
        }
    }
}

#[async_trait]
impl Reserve for VolumePrebind {
    /// Remembers which attempt of the pod is current, so that a late
    /// Unreserve of an earlier attempt does not release a newer volume.
    async fn reserve(
        &self,
        _cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<Status> {
        if pod.annotation(SIZE_ANNOTATION).is_some() {
            self.state
                .lock()
                .reservations
                .insert(pod.uid().to_string(), r.id.clone());
        }
        Ok(Status::success())
    }

    /// Releases the volume the undone attempt provisioned (if any).
    async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
        let mut st = self.state.lock();
        if st.reservations.get(&u.pod.uid) == Some(&u.id) {
            st.reservations.remove(&u.pod.uid);
        }
        let ours = st
            .volumes
            .get(&u.pod.uid)
            .is_some_and(|v| match &v.reservation {
                _ if v.bound => false,
                Some(r) => *r == u.id,
                // Provisioned without a Reserve seen here: any undo of the pod
                // releases it.
                None => true,
            });
        if ours && let Some(v) = st.volumes.remove(&u.pod.uid) {
            info!(
                pod = %v.pod, node = %v.node, size = %v.size, reservation = %u.id,
                "released volume pod={} node={} size={}", v.pod, v.node, v.size
            );
        }
        Ok(())
    }
}

#[async_trait]
impl PreBind for VolumePrebind {
    async fn pre_bind(&self, _cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<Status> {
        let Some(size) = pod.annotation(SIZE_ANNOTATION) else {
            return Ok(Status::success());
        };
        if let Err(e) = parse_value(size) {
            return Ok(Status::unresolvable(format!(
                "pod {} has an invalid {SIZE_ANNOTATION}: {e}",
                pod.identity()
            )));
        }
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(reason) = self.failure(pod, attempt) {
            warn!(
                pod = %pod.identity(), node, attempt,
                "provisioning failed pod={} node={node}: {reason}", pod.identity()
            );
            return Ok(Status::error(reason));
        }
        let who = pod.identity().to_string();
        let mut st = self.state.lock();
        let reservation = st.reservations.get(pod.uid()).cloned();
        if let Some(v) = st.volumes.get_mut(pod.uid()) {
            // Provisioned by an earlier attempt not undone yet: adopt it.
            info!(pod = %who, node, "volume already provisioned pod={who} node={}", v.node);
            v.reservation = reservation;
            return Ok(Status::success());
        }
        st.volumes.insert(
            pod.uid().to_string(),
            Volume {
                pod: who.clone(),
                node: node.to_string(),
                size: size.to_string(),
                reservation,
                bound: false,
            },
        );
        info!(
            pod = %who, node, size, attempt,
            "provisioned volume pod={who} node={node} size={size}"
        );
        Ok(Status::success())
    }
}

#[async_trait]
impl PostBind for VolumePrebind {
    /// The pod is bound: its volume stays; the attempt is no longer undone.
    async fn post_bind(&self, _cx: &Context, pod: &CyclePod, _node: &str) -> HandlerResult<()> {
        let mut st = self.state.lock();
        st.reservations.remove(pod.uid());
        if let Some(v) = st.volumes.get_mut(pod.uid()) {
            v.bound = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_extender::k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(name: &str, uid: &str, size: Option<&str>) -> CyclePod {
        let mut p = json!({"metadata": {"name": name, "namespace": "db", "uid": uid}});
        if let Some(s) = size {
            p["metadata"]["annotations"] = json!({SIZE_ANNOTATION: s});
        }
        let p: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("bad test pod: {e}"));
        CyclePod::new(1, p)
    }

    fn cx() -> Context {
        Context::standalone(Nodes::default())
    }

    fn unreserve(id: &str, uid: &str) -> Unreservation {
        Unreservation {
            id: id.into(),
            node: "n1".into(),
            pod: PodIdentity {
                namespace: "db".into(),
                name: "x".into(),
                uid: uid.into(),
            },
            prior: PriorReserve::Succeeded,
        }
    }

    async fn attempt(v: &VolumePrebind, p: &CyclePod, rid: &str) -> HandlerResult<Status> {
        let r = Reservation {
            id: rid.into(),
            node: "n1".into(),
        };
        assert!(v.reserve(&cx(), p, &r).await?.is_success());
        v.pre_bind(&cx(), p, "n1").await
    }

    #[tokio::test]
    async fn provisions_and_releases_once() -> HandlerResult<()> {
        let v = VolumePrebind::new(FailRules::default());
        let p = pod("pg-0", "u1", Some("10Gi"));
        assert!(attempt(&v, &p, "r1").await?.is_success());
        assert_eq!(
            v.volumes()
                .get("u1")
                .map(|v| (v.node.as_str(), v.size.as_str())),
            Some(("n1", "10Gi"))
        );
        // A later failure undoes the attempt: released, once.
        v.unreserve(&cx(), &unreserve("r1", "u1")).await?;
        v.unreserve(&cx(), &unreserve("r1", "u1")).await?;
        assert!(v.volumes().is_empty());
        // Pods without the annotation are not provisioned.
        assert!(
            attempt(&v, &pod("web", "u2", None), "r2")
                .await?
                .is_success()
        );
        assert!(v.volumes().is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn a_late_unreserve_keeps_a_newer_attempts_volume() -> HandlerResult<()> {
        let v = VolumePrebind::new(FailRules::default());
        let p = pod("pg-0", "u1", Some("1Gi"));
        assert!(attempt(&v, &p, "old").await?.is_success());
        // Retried before the old Unreserve arrived: the volume is adopted.
        assert!(attempt(&v, &p, "new").await?.is_success());
        v.unreserve(&cx(), &unreserve("old", "u1")).await?;
        assert_eq!(
            v.volumes().get("u1").and_then(|v| v.reservation.clone()),
            Some("new".to_string())
        );
        // Bound: no Unreserve releases it any more.
        v.post_bind(&cx(), &p, "n1").await?;
        v.unreserve(&cx(), &unreserve("new", "u1")).await?;
        assert_eq!(v.volumes().len(), 1);
        Ok(())
    }

    #[tokio::test]
    async fn fails_on_purpose() -> HandlerResult<()> {
        let v = VolumePrebind::new(FailRules {
            pods: Regex::new("^bad-").ok(),
            every: Some(3),
        });
        let s = attempt(&v, &pod("bad-1", "u1", Some("1Gi")), "r1").await?;
        assert_eq!(s.code, Code::Error);
        assert_eq!(
            s.reasons,
            vec!["volume provisioning failed for pod db/bad-1: its name matches --fail-pods ^bad-"]
        );
        assert!(
            attempt(&v, &pod("ok-2", "u2", Some("1Gi")), "r2")
                .await?
                .is_success()
        );
        // The third attempt fails by count.
        let s = attempt(&v, &pod("ok-3", "u3", Some("1Gi")), "r3").await?;
        assert_eq!(
            s.reasons,
            vec![
                "volume provisioning failed for pod db/ok-3: attempt 3 is a multiple of --fail-every 3"
            ]
        );
        assert!(
            attempt(&v, &pod("ok-4", "u4", Some("1Gi")), "r4")
                .await?
                .is_success()
        );
        assert_eq!(v.volumes().keys().collect::<Vec<_>>(), vec!["u2", "u4"]);
        // An invalid size is the pod's problem, for good.
        let s = attempt(&v, &pod("odd", "u5", Some("big")), "r5").await?;
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        Ok(())
    }
}
