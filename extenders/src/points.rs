//! The extension-point traits an extender implements, one per point served.
//!
//! Every handler receives a [`Context`] (the request's id, deadline,
//! cancellation, the session's node cache and the Permit decider) and, except
//! for Unreserve, the cycle's pod. Handlers run concurrently, each request in
//! its own task, so they take `&self`: keep mutable state behind a lock (a
//! `parking_lot::Mutex` held for a short, non-async section is the usual
//! choice). The same handler value serves every session, so state kept in it
//! survives berthd reconnecting.
//!
//! The traits use [`async_trait`](macro@crate::async_trait): annotate impls
//! with `#[berth_extender::async_trait]`.

use std::sync::Arc;

use async_trait::async_trait;

use crate::candidates::{PreemptionCandidate, PreemptionVerdict};
use crate::context::Context;
use crate::types::{
    CyclePod, HandlerResult, NodeRef, NodeStatus, PermitOutcome, PostFilterResult, PreFilterResult,
    Reservation, ScoreNormalization, Status, Unreservation,
};

/// PreFilter: once per cycle, before filtering. May reject the pod, skip
/// (then this extender's Filter is not called this cycle), or restrict the
/// nodes considered.
#[async_trait]
pub trait PreFilter: Send + Sync + 'static {
    /// Decides for the cycle's pod.
    async fn pre_filter(&self, cx: &Context, pod: &CyclePod) -> HandlerResult<PreFilterResult>;
}

/// Filter: which candidate nodes can run the pod.
///
/// berthd batches Filter: one request per cycle with the cycle's candidate
/// nodes, sent while berthd's own Filter plugins run (so it may name nodes
/// those reject; berthd uses the verdicts of the nodes they keep). Judge
/// each node on its own: the verdict for a node must not depend on which
/// other nodes the request names. The SDK calls [`Filter::filter_batch`],
/// whose default calls [`Filter::filter`] once per node; override
/// `filter_batch` to do per-cycle work once (parse the pod's request, take
/// a lock) instead of once per node.
#[async_trait]
pub trait Filter: Send + Sync + 'static {
    /// Whether `node` can run `pod`: success, or a rejection
    /// (`CODE_UNSCHEDULABLE`, `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE`) or
    /// `CODE_ERROR`, with reasons.
    fn filter(&self, cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status;

    /// The rejected nodes among `nodes` (every node not listed passes),
    /// named by [`NodeRef::name`]. An entry with a success status is
    /// dropped; an entry naming a node not in `nodes`, or with
    /// `CODE_SKIP`/`CODE_WAIT`, makes the SDK answer the request with an
    /// error. A `CODE_ERROR` entry is that node's verdict: berthd fails the
    /// attempt with it only if the node is still a candidate.
    async fn filter_batch(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<NodeStatus>> {
        let mut rejected = Vec::new();
        for node in nodes {
            let status = self.filter(cx, pod, node);
            if !status.is_success() {
                rejected.push(NodeStatus::new(node.name(), status));
            }
        }
        Ok(rejected)
    }

    /// Whether this Filter's verdict for a node depends on the node alone
    /// (its labels, taints, conditions), never on the pods on it. Declared
    /// in the handshake (`Hello.filter_ignores_pods`): when a pod preempts,
    /// berthd then reuses this cycle's verdicts instead of asking, since
    /// evicting pods cannot change them. Default: `false`.
    fn ignores_pods(&self) -> bool {
        false
    }

    /// Preemption's what-if: one verdict per candidate, in order (see the
    /// [`preemption`](crate::preemption) module). The default judges each
    /// candidate with [`Filter::filter`] on a pod table without the pods
    /// asked about as gone ([`judge`]): right for a handler that reads the
    /// node's pods from [`Context::pods`]; a handler that keeps its own
    /// account of them answers for the node as it is, which can only
    /// refuse a candidate. Override to answer from your own account. An
    /// error fails the whole request (berthd then treats every candidate
    /// as not judged); a `CODE_ERROR` verdict is one node's.
    async fn filter_preemption(
        &self,
        cx: &Context,
        pod: &CyclePod,
        candidates: &[PreemptionCandidate<'_>],
    ) -> HandlerResult<Vec<PreemptionVerdict>> {
        Ok(candidates.iter().map(|c| judge(self, cx, pod, c)).collect())
    }
}

/// PostFilter: no node fits; the extender may make room itself (for example
/// by evicting pods through the Kubernetes API) and nominate a node.
#[async_trait]
pub trait PostFilter: Send + Sync + 'static {
    /// `statuses` says why each node was rejected, and by which plugin.
    async fn post_filter(
        &self,
        cx: &Context,
        pod: &CyclePod,
        statuses: &[NodeStatus],
    ) -> HandlerResult<PostFilterResult>;
}

/// PreScore: once per cycle, before scoring, with the feasible nodes.
#[async_trait]
pub trait PreScore: Send + Sync + 'static {
    /// Success, `CODE_SKIP` (this extender's Score is then not called this
    /// cycle) or `CODE_ERROR`.
    async fn pre_score(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Status>;
}

/// Score: a score for each feasible node.
///
/// Batched like Filter: the SDK calls [`Score::score_batch`], whose default
/// calls [`Score::score`] per node. The range of the scores depends on
/// [`Score::normalization`]. When the extender also serves Filter (and no
/// PreScore), berthd asks for the scores with the Filter request: the SDK
/// then scores the nodes this extender's Filter passed, some of which
/// berthd's own Filter plugins may reject; so, with
/// [`ScoreNormalization::None`], a node's score must not depend on the
/// other nodes of the request (scale relative to the set with
/// `ScoreNormalization::Scale` or `Extender`, which berthd applies to the
/// feasible nodes only).
#[async_trait]
pub trait Score: Send + Sync + 'static {
    /// The score of `node` for `pod`. An error fails the whole request.
    fn score(&self, cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64>;

    /// One score per node of `nodes`, in the same order. The SDK checks the
    /// length and the range (see [`ScoreNormalization`]) and answers an error
    /// instead of a malformed answer.
    async fn score_batch(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<i64>> {
        nodes.iter().map(|n| self.score(cx, pod, n)).collect()
    }

    /// How berthd turns the scores into 0..=100 (declared in the handshake):
    /// `None` (default): scores are already in 0..=100; `Scale`: any
    /// non-negative scores, berthd scales the highest to 100; `Extender`:
    /// raw scores, then [`Score::normalize`] maps them.
    fn normalization(&self) -> ScoreNormalization {
        ScoreNormalization::None
    }

    /// With [`ScoreNormalization::Extender`]: maps the raw `scores` of
    /// `nodes` (as this extender answered them) to 0..=100, same order. The
    /// default scales linearly so the highest becomes 100 (negative scores
    /// become 0).
    async fn normalize(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
        scores: Vec<i64>,
    ) -> HandlerResult<Vec<i64>> {
        let _ = (cx, pod, nodes);
        let max = scores.iter().copied().max().unwrap_or(0);
        Ok(scores
            .into_iter()
            .map(|s| {
                if max <= 0 || s <= 0 {
                    0
                } else {
                    // i128: s * 100 cannot overflow.
                    (i128::from(s) * 100 / i128::from(max)) as i64
                }
            })
            .collect())
    }
}

/// Reserve and Unreserve: the pod is assumed on a node; reserve what the
/// extender tracks, and undo it on Unreserve.
///
/// What the SDK guarantees (per extender value, across sessions):
///
/// - Reserve and Unreserve handlers are never dropped half-way: a Cancel, a
///   timeout or the stream breaking cancels the context's token and stops
///   the SDK from waiting, but the handler runs to completion, so the
///   author's state is never left half-updated.
/// - An Unreserve waits for a Reserve of the same reservation id that is
///   still running, then runs; the two never overlap.
/// - [`Reserve::unreserve`] is called at most once per reservation id once it
///   returned `Ok`: repeated Unreserves (berthd re-sends until acknowledged,
///   also after reconnecting) are acknowledged without calling it, and
///   concurrent duplicates wait for the running call and share its result.
///   If it returns an error or panics, the error is answered and the next
///   re-sent Unreserve calls it again.
/// - An Unreserve of a reservation this process never saw reserved (the
///   Reserve request was lost, the process restarted) still calls
///   `unreserve`, once, with [`PriorReserve::Unseen`](crate::PriorReserve):
///   the handler must tolerate undoing something it does not have.
/// - The memory of reservation ids is bounded (100,000 by default, see
///   `ExtenderBuilder::reservation_memory`); the oldest finished ones are
///   forgotten first, so an Unreserve re-sent after that many newer
///   reservations calls the handler again. Keep the handler idempotent by
///   reservation id if that matters.
#[async_trait]
pub trait Reserve: Send + Sync + 'static {
    /// Reserves for `pod` on `reservation.node`. A non-success status (or
    /// an error) fails the attempt; berthd then sends Unreserve.
    async fn reserve(
        &self,
        cx: &Context,
        pod: &CyclePod,
        reservation: &Reservation,
    ) -> HandlerResult<Status>;

    /// Undoes the reservation `unreservation.id`. The cycle may have ended
    /// (there is no cycle pod); the pod is named by `unreservation.pod`.
    async fn unreserve(&self, cx: &Context, unreservation: &Unreservation) -> HandlerResult<()>;
}

/// Permit: allow, reject or hold the pod before binding.
///
/// To hold it, answer [`PermitOutcome::Wait`] and keep
/// [`Context::permit_decider`]; later call
/// [`PermitDecider::decide`](crate::PermitDecider::decide) with the
/// reservation id. A decision made while the Permit handler of that
/// reservation is still running (for example by another member of a gang
/// completing the group) is applied to its answer: a `Wait` then becomes the
/// decision itself.
#[async_trait]
pub trait Permit: Send + Sync + 'static {
    /// Decides for `pod` on `reservation.node`.
    async fn permit(
        &self,
        cx: &Context,
        pod: &CyclePod,
        reservation: &Reservation,
    ) -> HandlerResult<PermitOutcome>;
}

/// PreBind: prepare the node for the pod (for example provision a volume).
#[async_trait]
pub trait PreBind: Send + Sync + 'static {
    /// Success, or a failure (berthd then sends Unreserve and retries the
    /// pod).
    async fn pre_bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<Status>;
}

/// Bind: bind the pod to the node instead of the default binder.
#[async_trait]
pub trait Bind: Send + Sync + 'static {
    /// Success (the extender bound the pod), `CODE_SKIP` (the next binder
    /// binds) or a failure (berthd then sends Unreserve and retries).
    async fn bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<Status>;
}

/// PostBind: informational, after a successful bind.
#[async_trait]
pub trait PostBind: Send + Sync + 'static {
    /// The pod was bound to `node`. An error is only logged by berthd.
    async fn post_bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<()>;
}

/// Notifications of cycles starting and ending on a session (not an
/// extension point: nothing is declared to berthd for it).
///
/// Called on the session's reader in stream order, so they must be quick and
/// must not block. `cycle_end` is the place to drop per-cycle state that no
/// Unreserve will clean (for example an admission made at PreFilter for a
/// cycle that failed before Reserve).
pub trait CycleHooks: Send + Sync + 'static {
    /// A cycle started (its pod was received and parsed).
    fn cycle_start(&self, pod: &CyclePod) {
        let _ = pod;
    }

    /// A cycle ended: no request of it will come, other than Unreserve.
    fn cycle_end(&self, pod: &CyclePod) {
        let _ = pod;
    }
}

// One value often serves several points: pass `Arc` clones of it to the
// builder.

#[async_trait]
impl<T: PreFilter + ?Sized> PreFilter for Arc<T> {
    async fn pre_filter(&self, cx: &Context, pod: &CyclePod) -> HandlerResult<PreFilterResult> {
        (**self).pre_filter(cx, pod).await
    }
}

#[async_trait]
impl<T: Filter + ?Sized> Filter for Arc<T> {
    fn filter(&self, cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> Status {
        (**self).filter(cx, pod, node)
    }

    async fn filter_batch(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<NodeStatus>> {
        (**self).filter_batch(cx, pod, nodes).await
    }
}

#[async_trait]
impl<T: PostFilter + ?Sized> PostFilter for Arc<T> {
    async fn post_filter(
        &self,
        cx: &Context,
        pod: &CyclePod,
        statuses: &[NodeStatus],
    ) -> HandlerResult<PostFilterResult> {
        (**self).post_filter(cx, pod, statuses).await
    }
}

#[async_trait]
impl<T: PreScore + ?Sized> PreScore for Arc<T> {
    async fn pre_score(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Status> {
        (**self).pre_score(cx, pod, nodes).await
    }
}

#[async_trait]
impl<T: Score + ?Sized> Score for Arc<T> {
    fn score(&self, cx: &Context, pod: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        (**self).score(cx, pod, node)
    }

    async fn score_batch(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
    ) -> HandlerResult<Vec<i64>> {
        (**self).score_batch(cx, pod, nodes).await
    }

    fn normalization(&self) -> ScoreNormalization {
        (**self).normalization()
    }

    async fn normalize(
        &self,
        cx: &Context,
        pod: &CyclePod,
        nodes: &[NodeRef<'_>],
        scores: Vec<i64>,
    ) -> HandlerResult<Vec<i64>> {
        (**self).normalize(cx, pod, nodes, scores).await
    }
}

#[async_trait]
impl<T: Reserve + ?Sized> Reserve for Arc<T> {
    async fn reserve(
        &self,
        cx: &Context,
        pod: &CyclePod,
        reservation: &Reservation,
    ) -> HandlerResult<Status> {
        (**self).reserve(cx, pod, reservation).await
    }

    async fn unreserve(&self, cx: &Context, unreservation: &Unreservation) -> HandlerResult<()> {
        (**self).unreserve(cx, unreservation).await
    }
}

#[async_trait]
impl<T: Permit + ?Sized> Permit for Arc<T> {
    async fn permit(
        &self,
        cx: &Context,
        pod: &CyclePod,
        reservation: &Reservation,
    ) -> HandlerResult<PermitOutcome> {
        (**self).permit(cx, pod, reservation).await
    }
}

#[async_trait]
impl<T: PreBind + ?Sized> PreBind for Arc<T> {
    async fn pre_bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<Status> {
        (**self).pre_bind(cx, pod, node).await
    }
}

#[async_trait]
impl<T: Bind + ?Sized> Bind for Arc<T> {
    async fn bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<Status> {
        (**self).bind(cx, pod, node).await
    }
}

#[async_trait]
impl<T: PostBind + ?Sized> PostBind for Arc<T> {
    async fn post_bind(&self, cx: &Context, pod: &CyclePod, node: &str) -> HandlerResult<()> {
        (**self).post_bind(cx, pod, node).await
    }
}

impl<T: CycleHooks + ?Sized> CycleHooks for Arc<T> {
    fn cycle_start(&self, pod: &CyclePod) {
        (**self).cycle_start(pod)
    }

    fn cycle_end(&self, pod: &CyclePod) {
        (**self).cycle_end(pod)
    }
}

/// The SDK's what-if for one candidate with `filter`'s per-node verdict
/// (see [`crate::preemption`]): `cx`'s pod table without the pods asked
/// about as gone.
pub fn judge<F: Filter + ?Sized>(
    filter: &F,
    cx: &Context,
    pod: &CyclePod,
    candidate: &PreemptionCandidate<'_>,
) -> PreemptionVerdict {
    let pods = &candidate.pods;
    let verdict = |gone: &mut dyn Iterator<Item = u32>| {
        let view = cx.clone().with_pods(cx.pods().without(gone));
        filter.filter(&view, pod, &candidate.node)
    };
    let all = verdict(&mut pods.iter().map(|p| p.id));
    if !all.is_success() {
        return PreemptionVerdict::Rejected(all);
    }
    let victims = verdict(&mut candidate.victims().map(|p| p.id));
    if victims.is_success() {
        return PreemptionVerdict::Victims;
    }
    // As kube-scheduler reprieves: all gone, each given back in turn and
    // kept back while the pod still fits.
    let mut gone = vec![true; pods.len()];
    for i in 0..pods.len() {
        gone[i] = false;
        let fits = verdict(
            &mut pods
                .iter()
                .zip(&gone)
                .filter(|(_, g)| **g)
                .map(|(p, _)| p.id),
        )
        .is_success();
        if !fits {
            gone[i] = true;
        }
    }
    PreemptionVerdict::Needs {
        uids: pods
            .iter()
            .zip(&gone)
            .filter(|(_, g)| **g)
            .map(|(p, _)| p.uid.clone())
            .collect(),
        reasons: victims.reasons,
    }
}
