//! gpu-share's extension points: Filter, Score, Reserve/Unreserve, PostBind.

use std::path::PathBuf;

use berth_extender::k8s_openapi::api::core::v1::Node;
use berth_extender::resources::{node_allocatable, parse_value, pod_request};
use berth_extender::*;
use parking_lot::Mutex;
use tracing::{error, info, warn};

use crate::ledger::{Gpus, Ledger};

/// Nodes advertise their GPU count as this extended resource.
pub const GPU_RESOURCE: &str = "example.com/gpu";
/// Nodes advertise each GPU's memory (MiB) in this annotation.
pub const GPU_MEMORY_ANNOTATION: &str = "example.com/gpu-memory-mib";
/// Pods request GPU memory (MiB) as this extended resource.
pub const GPU_MEM_RESOURCE: &str = "example.com/gpu-mem";
/// Why a node is rejected.
pub const NO_FIT: &str = "node(s) didn't have a GPU with enough free memory";

/// The extender: the ledger, shared by every session.
pub struct GpuShare {
    ledger: Mutex<Ledger>,
    state_file: Option<PathBuf>,
}

/// A node's GPUs, if it has any (both the resource and the annotation).
pub fn node_gpus(node: &Node) -> Option<Gpus> {
    let count = node_allocatable(node, GPU_RESOURCE, parse_value).ok()?;
    let mib_each = node
        .metadata
        .annotations
        .as_ref()?
        .get(GPU_MEMORY_ANNOTATION)?
        .trim()
        .parse::<u64>()
        .ok()?;
    (count > 0 && mib_each > 0).then_some(Gpus {
        count: usize::try_from(count).ok()?,
        mib_each,
    })
}

/// The pod's GPU memory request in MiB (0: not a GPU pod).
fn pod_mib(pod: &CyclePod) -> Result<u64, String> {
    let mib = pod_request(pod.object(), GPU_MEM_RESOURCE, parse_value)
        .map_err(|e| format!("invalid {GPU_MEM_RESOURCE} request: {e}"))?;
    u64::try_from(mib).map_err(|_| format!("negative {GPU_MEM_RESOURCE} request: {mib}"))
}

impl GpuShare {
    /// A ledger starting empty; with `state_file`, written as JSON after
    /// every change.
    pub fn new(state_file: Option<PathBuf>) -> Self {
        let this = Self {
            ledger: Mutex::new(Ledger::default()),
            state_file,
        };
        this.persist(&this.ledger.lock());
        this
    }

    /// A copy of the ledger.
    #[cfg(test)]
    pub fn ledger(&self) -> Ledger {
        self.ledger.lock().clone()
    }

    /// Called after every change, with the ledger locked (so writes follow
    /// changes in order): writes the ledger to the state file, if any
    /// (atomically: a temporary file, then a rename).
    /// Also checks the ledger's totals against its allocations (cheap at
    /// this scale), so a bookkeeping bug shows in the logs at once.
    fn persist(&self, ledger: &Ledger) {
        if let Err(e) = ledger.check() {
            error!("the ledger is inconsistent: {e}");
        }
        let Some(path) = &self.state_file else { return };
        let tmp = path.with_extension("tmp");
        let result = serde_json::to_vec_pretty(ledger)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = result {
            warn!(path = %path.display(), error = %e, "cannot write the state file");
        }
    }

    fn filter_node(&self, ledger: &Ledger, mib: u64, node: &NodeRef<'_>) -> Status {
        let fits = node
            .object()
            .and_then(node_gpus)
            .is_some_and(|g| ledger.best_fit(node.name(), g, mib).is_some());
        if fits {
            Status::success()
        } else {
            Status::unschedulable(NO_FIT)
        }
    }

    fn score_node(&self, ledger: &Ledger, mib: u64, node: &NodeRef<'_>) -> i64 {
        node.object()
            .and_then(node_gpus)
            .map_or(0, |g| ledger.score(node.name(), g, mib))
    }
}

#[async_trait]
impl Filter for GpuShare {
    fn filter(&self, _cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        match pod_mib(pod) {
            Ok(0) => Status::success(),
            Ok(mib) => self.filter_node(&self.ledger.lock(), mib, node),
            Err(e) => Status::unresolvable(e),
        }
    }

    /// The pod's request is parsed and the ledger locked once per cycle.
    async fn filter_batch(
        &self,
        _cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<NodeStatus>> {
        let mib = match pod_mib(pod) {
            Ok(0) => return Ok(Vec::new()),
            Ok(mib) => mib,
            Err(e) => {
                return Ok(nodes
                    .iter()
                    .map(|n| NodeStatus::new(n.name(), Status::unresolvable(e.clone())))
                    .collect());
            }
        };
        let ledger = self.ledger.lock();
        Ok(nodes
            .iter()
            .filter_map(|node| {
                let s = self.filter_node(&ledger, mib, node);
                (!s.is_success()).then(|| NodeStatus::new(node.name(), s))
            })
            .collect())
    }
}

#[async_trait]
impl Score for GpuShare {
    fn score(&self, _cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        match pod_mib(pod) {
            Ok(0) => Ok(0),
            Ok(mib) => Ok(self.score_node(&self.ledger.lock(), mib, node)),
            Err(e) => Err(HandlerError::msg(e)),
        }
    }

    async fn score_batch(
        &self,
        _cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<i64>> {
        let mib = pod_mib(pod).map_err(HandlerError::msg)?;
        if mib == 0 {
            return Ok(vec![0; nodes.len()]);
        }
        let ledger = self.ledger.lock();
        Ok(nodes
            .iter()
            .map(|node| self.score_node(&ledger, mib, node))
            .collect())
    }
}

#[async_trait]
impl Reserve for GpuShare {
    async fn reserve(
        &self,
        cx: &Context,
        pod: &CyclePod,
        r: &Reservation,
    ) -> HandlerResult<Status> {
        let mib = match pod_mib(pod) {
            Ok(0) => return Ok(Status::success()),
            Ok(mib) => mib,
            Err(e) => return Ok(Status::unresolvable(e)),
        };
        let Some(gpus) = cx.nodes().get(&r.node).as_deref().and_then(node_gpus) else {
            return Ok(Status::unschedulable(NO_FIT));
        };
        let who = pod.identity().to_string();
        let mut ledger = self.ledger.lock();
        let Some(done) = ledger.reserve(pod.uid(), &who, &r.node, gpus, mib, &r.id) else {
            // Another pod took the memory since Filter.
            return Ok(Status::unschedulable(NO_FIT));
        };
        // Written before the lines are logged, so that a reader who saw a
        // line finds the file already up to date.
        self.persist(&ledger);
        if let Some(old) = &done.replaced {
            info!(
                pod = %who, node = %old.node, gpu = old.gpu, mib = old.mib,
                reservation = %old.reservation,
                "replaced the allocation of an earlier attempt"
            );
        }
        info!(
            pod = %who, node = %r.node, gpu = done.gpu, mib, used = done.used_after,
            capacity = gpus.mib_each, reservation = %r.id,
            "reserved pod={who} node={} gpu={} mib={mib} used={}/{}",
            r.node, done.gpu, done.used_after, gpus.mib_each
        );
        Ok(Status::success())
    }

    /// Frees the allocation this reservation made, if any: an Unreserve of a
    /// reservation never made here (or already undone) changes nothing.
    async fn unreserve(&self, _cx: &Context, u: &Unreservation) -> HandlerResult<()> {
        let mut ledger = self.ledger.lock();
        if let Some(a) = ledger.unreserve(&u.pod.uid, &u.id) {
            self.persist(&ledger);
            let used = ledger.used(&a.node, a.gpu);
            info!(
                pod = %u.pod, node = %a.node, gpu = a.gpu, mib = a.mib, used,
                reservation = %u.id,
                "released pod={} node={} gpu={} mib={} used={used}",
                u.pod, a.node, a.gpu, a.mib
            );
        }
        Ok(())
    }
}

#[async_trait]
impl PostBind for GpuShare {
    async fn post_bind(&self, _cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<()> {
        let mut ledger = self.ledger.lock();
        if let Some((gpu, mib)) = ledger.commit(pod.uid()).map(|a| (a.gpu, a.mib)) {
            self.persist(&ledger);
            info!(
                pod = %pod.identity(), node, gpu, mib,
                "committed pod={} node={node} gpu={gpu}", pod.identity()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_extender::k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn node(name: &str, gpus: u32, mib: &str) -> Node {
        let n = json!({
            "metadata": {"name": name, "annotations": {GPU_MEMORY_ANNOTATION: mib}},
            "status": {"allocatable": {GPU_RESOURCE: gpus.to_string(), "cpu": "8"}},
        });
        serde_json::from_value(n).unwrap_or_else(|e| panic!("bad test node: {e}"))
    }

    fn pod(uid: &str, mib: &str) -> CyclePod {
        let p = json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": "ml", "uid": uid},
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {GPU_MEM_RESOURCE: mib}}},
            ]},
        });
        let p: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("bad test pod: {e}"));
        CyclePod::new(1, p)
    }

    fn cx() -> Context {
        Context::standalone(Nodes::from_nodes([
            node("big", 2, "16384"),
            node("small", 1, "8192"),
            node("cpu-only", 0, "16384"),
        ]))
    }

    fn reservation(id: &str, node: &str) -> Reservation {
        Reservation {
            id: id.into(),
            node: node.into(),
        }
    }

    fn unreservation(id: &str, uid: &str, node: &str) -> Unreservation {
        Unreservation {
            id: id.into(),
            node: node.into(),
            pod: PodIdentity {
                namespace: "ml".into(),
                name: format!("p-{uid}"),
                uid: uid.into(),
            },
            prior: PriorReserve::Succeeded,
        }
    }

    #[tokio::test]
    async fn filter_and_score_batches() -> HandlerResult<()> {
        let g = GpuShare::new(None);
        let cx = cx();
        let all: Vec<NodeRef<'_>> = ["big", "small", "cpu-only", "unknown"]
            .iter()
            .map(|n| NodeRef::new(n, cx.nodes().get(n)))
            .collect();
        let rejected = g.filter_batch(&cx, &pod("u1", "10000"), &all).await?;
        assert_eq!(
            rejected
                .iter()
                .map(|r| (r.node.as_str(), r.status.reasons[0].as_str()))
                .collect::<Vec<_>>(),
            vec![("small", NO_FIT), ("cpu-only", NO_FIT), ("unknown", NO_FIT)]
        );
        // A pod without a GPU request is not this extender's business.
        assert!(g.filter_batch(&cx, &pod("u0", "0"), &all).await?.is_empty());
        assert_eq!(
            g.score_batch(&cx, &pod("u0", "0"), &all).await?,
            vec![0, 0, 0, 0]
        );
        // 4096 of 16384 is 25, of 8192 is 50: small packs tighter.
        assert_eq!(
            g.score_batch(&cx, &pod("u1", "4096"), &all).await?,
            vec![25, 50, 0, 0]
        );
        // The per-node methods agree with the batches.
        let one = NodeRef::new("small", cx.nodes().get("small"));
        assert_eq!(g.score(&cx, &pod("u1", "4096"), &one)?, 50);
        assert_eq!(
            g.filter(&cx, &pod("u1", "10000"), &one).reasons,
            vec![NO_FIT]
        );
        // A request that is not a quantity rejects every node for good.
        let bad = g.filter_batch(&cx, &pod("u2", "lots"), &all[..1]).await?;
        assert_eq!(bad[0].status.code, Code::UnschedulableAndUnresolvable);
        Ok(())
    }

    #[tokio::test]
    async fn reserve_then_repeated_unreserve_keeps_the_ledger_exact() -> HandlerResult<()> {
        let g = GpuShare::new(None);
        let cx = cx();
        let s = g
            .reserve(&cx, &pod("u1", "6000"), &reservation("r1", "small"))
            .await?;
        assert!(s.is_success());
        // The small node's only GPU has 2192 MiB left.
        let s = g
            .reserve(&cx, &pod("u2", "6000"), &reservation("r2", "small"))
            .await?;
        assert_eq!(s.reasons, vec![NO_FIT]);
        let s = g
            .reserve(&cx, &pod("u3", "6000"), &reservation("r3", "big"))
            .await?;
        assert!(s.is_success());
        assert_eq!(g.ledger().total_used(), 12000);

        // r2 failed at Reserve: its Unreserve frees nothing.
        g.unreserve(&cx, &unreservation("r2", "u2", "small"))
            .await?;
        assert_eq!(g.ledger().total_used(), 12000);
        for _ in 0..3 {
            g.unreserve(&cx, &unreservation("r1", "u1", "small"))
                .await?;
        }
        let l = g.ledger();
        assert_eq!(l.check(), Ok(()));
        assert_eq!(l.total_used(), 6000);
        assert_eq!(l.used("small", 0), 0);
        assert_eq!(l.used("big", 0), 6000);

        // Bound pods keep their memory.
        g.post_bind(&cx, &pod("u3", "6000"), "big").await?;
        g.unreserve(&cx, &unreservation("r3", "u3", "big")).await?;
        assert_eq!(g.ledger().total_used(), 6000);
        assert!(g.ledger().allocation("u3").is_some_and(|a| a.committed));
        Ok(())
    }

    #[tokio::test]
    async fn the_state_file_follows_every_change() -> Result<(), Box<dyn std::error::Error>> {
        let path = std::env::temp_dir().join(format!(
            "gpu-share-test-{}-{}.json",
            std::process::id(),
            line!()
        ));
        let g = GpuShare::new(Some(path.clone()));
        let cx = cx();
        let read = || -> Result<serde_json::Value, Box<dyn std::error::Error>> {
            Ok(serde_json::from_slice(&std::fs::read(&path)?)?)
        };
        assert_eq!(read()?, json!({"used": {}, "allocations": {}}));
        g.reserve(&cx, &pod("u1", "1024"), &reservation("r1", "big"))
            .await
            .map_err(|e| e.to_string())?;
        let v = read()?;
        assert_eq!(v["used"]["big"], json!([1024]));
        assert_eq!(v["allocations"]["u1"]["gpu"], json!(0));
        assert_eq!(v["allocations"]["u1"]["pod"], json!("ml/p-u1"));
        g.unreserve(&cx, &unreservation("r1", "u1", "big"))
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(read()?, json!({"used": {}, "allocations": {}}));
        std::fs::remove_file(&path)?;
        Ok(())
    }
}
