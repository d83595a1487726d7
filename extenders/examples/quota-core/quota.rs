//! quota-core's extension points: PreFilter, Filter, Reserve/Unreserve,
//! PostBind, and the end of cycles.

use std::collections::{BTreeMap, HashMap};

use berth_extender::resources::{node_allocatable, parse_milli, pod_request};
use berth_extender::*;
use parking_lot::Mutex;
use tracing::info;

/// Pods carrying this label are this core's.
pub const APP_LABEL: &str = "quota-core.example.com/app";

/// A pod admitted in a cycle, not bound yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Its namespace.
    pub namespace: String,
    /// namespace/name.
    pub pod: String,
    /// The node chosen.
    pub node: String,
    /// Its cpu request, millicores.
    pub cpu: i64,
    /// The cycle that admitted it.
    pub cycle: u64,
    /// The reservation of that cycle, once reserved.
    pub reservation: Option<String>,
}

/// A pod bound through this core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundPod {
    /// Its namespace.
    pub namespace: String,
    /// Its node.
    pub node: String,
    /// Its cpu request, millicores.
    pub cpu: i64,
}

#[derive(Debug, Default)]
struct Book {
    /// pod uid -> admission.
    in_progress: HashMap<String, Admission>,
    /// pod uid -> bound usage.
    bound: HashMap<String, BoundPod>,
}

impl Book {
    /// Millicores used in `ns`: in progress plus bound.
    fn namespace_used(&self, ns: &str) -> i64 {
        let a: i64 = self
            .in_progress
            .values()
            .filter(|a| a.namespace == ns)
            .map(|a| a.cpu)
            .sum();
        let b: i64 = self
            .bound
            .values()
            .filter(|b| b.namespace == ns)
            .map(|b| b.cpu)
            .sum();
        a + b
    }

    /// Millicores this core placed on `node`.
    fn node_used(&self, node: &str) -> i64 {
        let a: i64 = self
            .in_progress
            .values()
            .filter(|a| a.node == node)
            .map(|a| a.cpu)
            .sum();
        let b: i64 = self
            .bound
            .values()
            .filter(|b| b.node == node)
            .map(|b| b.cpu)
            .sum();
        a + b
    }
}

/// The core.
pub struct QuotaCore {
    quotas: BTreeMap<String, i64>,
    book: Mutex<Book>,
}

impl QuotaCore {
    /// A core enforcing `quotas` (namespace -> millicores).
    pub fn new(quotas: BTreeMap<String, i64>) -> Self {
        Self {
            quotas,
            book: Mutex::default(),
        }
    }

    /// Millicores used in `ns` (in progress plus bound).
    #[cfg(test)]
    pub fn namespace_used(&self, ns: &str) -> i64 {
        self.book.lock().namespace_used(ns)
    }

    /// The admission of pod `uid`, if in progress.
    #[cfg(test)]
    pub fn admission(&self, uid: &str) -> Option<Admission> {
        self.book.lock().in_progress.get(uid).cloned()
    }

    fn quota_line(&self, book: &Book, ns: &str) -> String {
        let used = book.namespace_used(ns);
        match self.quotas.get(ns) {
            Some(q) => format!("{used}m/{q}m"),
            None => format!("{used}m/unlimited"),
        }
    }
}

#[async_trait]
impl PreFilter for QuotaCore {
    async fn pre_filter(&self, cx: &Context, pod: &CyclePod) -> HandlerResult<PreFilterResult> {
        if pod.label(APP_LABEL).is_none() {
            return Ok(PreFilterResult::skip());
        }
        let who = pod.identity().to_string();
        let ns = pod.namespace();
        let cpu = match pod_request(pod.object(), "cpu", parse_milli) {
            Ok(c) => c,
            Err(e) => {
                return Ok(
                    Status::unresolvable(format!("pod {who}: invalid cpu request: {e}")).into(),
                );
            }
        };
        let mut book = self.book.lock();
        // An earlier cycle of this pod that never got undone: start over.
        if let Some(old) = book.in_progress.remove(pod.uid()) {
            info!(
                pod = %who, node = %old.node, cycle = old.cycle,
                "dropped the admission of an earlier cycle pod={who}"
            );
        }
        if let Some(&quota) = self.quotas.get(ns) {
            let used = book.namespace_used(ns);
            if used + cpu > quota {
                let reason = format!(
                    "namespace {ns} over quota: requested {cpu}m, used {used}m of {quota}m"
                );
                info!(pod = %who, namespace = %ns, cpu, used, quota, "rejected pod={who}: {reason}");
                return Ok(Status::unresolvable(reason).into());
            }
        }
        // The node with the most cpu free; the first by name among equals.
        let mut best: Option<(String, i64)> = None;
        for (name, node) in cx.nodes().snapshot() {
            if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                continue;
            }
            let Ok(alloc) = node_allocatable(&node, "cpu", parse_milli) else {
                continue;
            };
            let free = alloc - book.node_used(&name);
            if free >= cpu && best.as_ref().is_none_or(|(_, f)| free > *f) {
                best = Some((name, free));
            }
        }
        let Some((node, free)) = best else {
            let reason = format!("quota-core found no node with {cpu}m of cpu free");
            info!(pod = %who, cpu, "rejected pod={who}: {reason}");
            return Ok(Status::unschedulable(reason).into());
        };
        book.in_progress.insert(
            pod.uid().to_string(),
            Admission {
                namespace: ns.to_string(),
                pod: who.clone(),
                node: node.clone(),
                cpu,
                cycle: pod.cycle_id(),
                reservation: None,
            },
        );
        let quota = self.quota_line(&book, ns);
        info!(
            pod = %who, node = %node, cpu, free_before = free, namespace = %ns,
            "admitted pod={who} node={node} cpu={cpu}m namespace={ns} used={quota}"
        );
        Ok(PreFilterResult::restrict([node]))
    }
}

impl Filter for QuotaCore {
    fn filter(&self, _cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        let book = self.book.lock();
        match book.in_progress.get(pod.uid()) {
            Some(a) if a.node == node.name() => Status::success(),
            Some(a) => {
                Status::unresolvable(format!("quota-core placed the pod on node {}", a.node))
            }
            None => Status::unresolvable("quota-core has not admitted the pod"),
        }
    }
}

#[async_trait]
impl Reserve for QuotaCore {
    async fn reserve(
        &self,
        _cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<Status> {
        if pod.label(APP_LABEL).is_none() {
            return Ok(Status::success());
        }
        let mut book = self.book.lock();
        match book.in_progress.get_mut(pod.uid()) {
            Some(a) if a.cycle == pod.cycle_id() && a.node == r.node => {
                a.reservation = Some(r.id.clone());
                Ok(Status::success())
            }
            _ => Ok(Status::unschedulable(format!(
                "quota-core has no admission of pod {} on node {}",
                pod.identity(),
                r.node
            ))),
        }
    }

    /// Releases the admission this reservation made; anything else (an
    /// unknown or repeated reservation) changes nothing.
    async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
        let mut book = self.book.lock();
        let ours = book
            .in_progress
            .get(&u.pod.uid)
            .is_some_and(|a| a.reservation.as_deref() == Some(u.id.as_str()));
        if ours && let Some(a) = book.in_progress.remove(&u.pod.uid) {
            let quota = self.quota_line(&book, &a.namespace);
            info!(
                pod = %a.pod, node = %a.node, cpu = a.cpu, namespace = %a.namespace,
                "released pod={} cpu={}m namespace={} used={quota}",
                a.pod, a.cpu, a.namespace
            );
        }
        Ok(())
    }
}

#[async_trait]
impl PostBind for QuotaCore {
    async fn post_bind(&self, _cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<()> {
        let mut book = self.book.lock();
        if let Some(a) = book.in_progress.remove(pod.uid()) {
            book.bound.insert(
                pod.uid().to_string(),
                BoundPod {
                    namespace: a.namespace.clone(),
                    node: node.to_string(),
                    cpu: a.cpu,
                },
            );
            let quota = self.quota_line(&book, &a.namespace);
            info!(
                pod = %a.pod, node, cpu = a.cpu, namespace = %a.namespace,
                "bound pod={} node={node} cpu={}m namespace={} used={quota}",
                a.pod, a.cpu, a.namespace
            );
        }
        Ok(())
    }
}

impl CycleHooks for QuotaCore {
    /// A cycle that admitted its pod but ended without reserving it (berthd's
    /// own Filter rejected the node, for example) gets no Unreserve: release
    /// its admission here.
    fn cycle_end(&self, pod: &CyclePod) {
        let mut book = self.book.lock();
        let stale = book
            .in_progress
            .get(pod.uid())
            .is_some_and(|a| a.cycle == pod.cycle_id() && a.reservation.is_none());
        if stale && let Some(a) = book.in_progress.remove(pod.uid()) {
            let quota = self.quota_line(&book, &a.namespace);
            info!(
                pod = %a.pod, node = %a.node, cpu = a.cpu, namespace = %a.namespace,
                "released pod={} cpu={}m namespace={} used={quota} (the cycle ended unreserved)",
                a.pod, a.cpu, a.namespace
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_extender::k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn node(name: &str, cpu: &str, unschedulable: bool) -> Node {
        let n = json!({
            "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu}},
        });
        serde_json::from_value(n).unwrap_or_else(|e| panic!("bad test node: {e}"))
    }

    fn pod(cycle: u64, ns: &str, name: &str, cpu: &str, ours: bool) -> CyclePod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        });
        if ours {
            p["metadata"]["labels"] = json!({APP_LABEL: "batch"});
        }
        let p: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("bad test pod: {e}"));
        CyclePod::new(cycle, p)
    }

    fn core() -> (QuotaCore, Context) {
        let q = QuotaCore::new(BTreeMap::from([("team-a".to_string(), 2000)]));
        let cx = Context::standalone(Nodes::from_nodes([
            node("n1", "4", false),
            node("n2", "3", false),
            node("n3", "16", true),
        ]));
        (q, cx)
    }

    fn r(id: &str, node: &str) -> Reservation {
        Reservation {
            id: id.into(),
            node: node.into(),
        }
    }

    fn un(id: &str, p: &CyclePod) -> Unreservation {
        Unreservation {
            id: id.into(),
            node: String::new(),
            pod: p.identity().clone(),
            prior: PriorReserve::Succeeded,
        }
    }

    #[tokio::test]
    async fn other_pods_pass_straight_through() -> HandlerResult<()> {
        let (q, cx) = core();
        let p = pod(1, "team-a", "web", "100m", false);
        let res = q.pre_filter(&cx, &p).await?;
        assert_eq!(res.status.code, Code::Skip);
        assert!(q.reserve(&cx, &p, &r("r", "n1")).await?.is_success());
        assert_eq!(q.namespace_used("team-a"), 0);
        Ok(())
    }

    #[tokio::test]
    async fn admits_within_quota_on_the_freest_node() -> HandlerResult<()> {
        let (q, cx) = core();
        // n3 is cordoned; n1 has the most cpu free.
        let a = pod(1, "team-a", "a", "1500m", true);
        let res = q.pre_filter(&cx, &a).await?;
        assert_eq!(res, PreFilterResult::restrict(["n1"]));
        // Filter accepts only the node chosen.
        let n1 = NodeRef::new("n1", cx.nodes().get("n1"));
        let n2 = NodeRef::new("n2", cx.nodes().get("n2"));
        assert!(q.filter(&cx, &a, &n1).is_success());
        assert_eq!(
            q.filter(&cx, &a, &n2).reasons,
            vec!["quota-core placed the pod on node n1"]
        );
        assert!(q.reserve(&cx, &a, &r("ra", "n1")).await?.is_success());

        // n1 now has 2500m free, n2 3000m: the next pod goes to n2.
        let b = pod(2, "team-b", "b", "500m", true);
        assert_eq!(
            q.pre_filter(&cx, &b).await?,
            PreFilterResult::restrict(["n2"])
        );

        // team-a: 1500m used of 2000m; 500m more is refused.
        let c = pod(3, "team-a", "c", "600m", true);
        let res = q.pre_filter(&cx, &c).await?;
        assert_eq!(res.status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            res.status.reasons,
            vec!["namespace team-a over quota: requested 600m, used 1500m of 2000m"]
        );
        assert_eq!(q.admission("team-a-c"), None);
        Ok(())
    }

    #[tokio::test]
    async fn releases_at_unreserve_or_unreserved_cycle_end_and_binds_at_postbind()
    -> HandlerResult<()> {
        let (q, cx) = core();
        let a = pod(1, "team-a", "a", "1000m", true);
        q.pre_filter(&cx, &a).await?;
        assert!(q.reserve(&cx, &a, &r("ra", "n1")).await?.is_success());
        assert_eq!(q.namespace_used("team-a"), 1000);
        // A stale reservation id changes nothing; the right one releases once.
        q.unreserve(&cx, &un("other", &a)).await?;
        assert_eq!(q.namespace_used("team-a"), 1000);
        q.unreserve(&cx, &un("ra", &a)).await?;
        q.unreserve(&cx, &un("ra", &a)).await?;
        assert_eq!(q.namespace_used("team-a"), 0);

        // A cycle that ends before Reserve releases its admission.
        let b = pod(2, "team-a", "b", "800m", true);
        q.pre_filter(&cx, &b).await?;
        assert_eq!(q.namespace_used("team-a"), 800);
        q.cycle_end(&b);
        assert_eq!(q.namespace_used("team-a"), 0);

        // A reserved one survives its cycle's end, then binds.
        let c = pod(3, "team-a", "c", "700m", true);
        q.pre_filter(&cx, &c).await?;
        assert!(q.reserve(&cx, &c, &r("rc", "n1")).await?.is_success());
        q.cycle_end(&c);
        assert_eq!(q.namespace_used("team-a"), 700);
        q.post_bind(&cx, &c, "n1").await?;
        assert_eq!(q.admission("team-a-c"), None);
        assert_eq!(q.namespace_used("team-a"), 700);
        // Bound usage stays, even if a late Unreserve comes.
        q.unreserve(&cx, &un("rc", &c)).await?;
        assert_eq!(q.namespace_used("team-a"), 700);

        // And counts against the quota.
        let d = pod(4, "team-a", "d", "1500m", true);
        let res = q.pre_filter(&cx, &d).await?;
        assert_eq!(
            res.status.reasons,
            vec!["namespace team-a over quota: requested 1500m, used 700m of 2000m"]
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_retried_pod_replaces_its_earlier_admission() -> HandlerResult<()> {
        let (q, cx) = core();
        let first = pod(1, "team-a", "a", "1200m", true);
        q.pre_filter(&cx, &first).await?;
        let again = pod(2, "team-a", "a", "1200m", true);
        assert!(q.pre_filter(&cx, &again).await?.status.is_success());
        assert_eq!(q.namespace_used("team-a"), 1200);
        assert_eq!(q.admission("team-a-a").map(|a| a.cycle), Some(2));
        // The first cycle's end does not release the second's admission.
        q.cycle_end(&first);
        assert_eq!(q.namespace_used("team-a"), 1200);
        Ok(())
    }

    #[tokio::test]
    async fn no_node_with_room() -> HandlerResult<()> {
        let (q, cx) = core();
        let big = pod(1, "team-b", "big", "5", true);
        let res = q.pre_filter(&cx, &big).await?;
        assert_eq!(res.status.code, Code::Unschedulable);
        assert_eq!(
            res.status.reasons,
            vec!["quota-core found no node with 5000m of cpu free"]
        );
        Ok(())
    }
}
