//! The group points: a PodGroup's scheduling cycle (berthd's
//! `GenericWorkload` gate on) as an extender sees it.
//!
//! berthd schedules the pods of a `scheduling.k8s.io/v1beta1` PodGroup
//! together: each pod in turn is evaluated (its own cycle: PreFilter,
//! Filter, Score, as a lone pod's) and placed in a copy of the cluster; a
//! gang fits only if `minCount` of its pods are placed, or none is. An
//! extender serving a group point gets, per group cycle, the group
//! ([`CycleGroup`]: the PodGroup, the pods to place in order, the pods
//! already scheduled) and:
//!
//! * [`PlacementFeasible`]: before the first pod and after each, may the
//!   group's placement still meet the extender's constraint?
//! * [`PodGroupPostFilter`]: the group did not fit; may the extender make
//!   room for it (and nominate nodes)?
//! * [`GroupPermit`]: the group fits; may it go on, as a whole?
//!
//! The rules are in the proto's header ("Group cycles").

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use berth_proto::extender::v1 as pb;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use pb::request::Kind;
use pb::response::Result as Reply;

use crate::context::Context;
use crate::types::{Code, HandlerResult, PodIdentity, Status, check_code};

/// A pod of a group: who it is, its object, and its node when it is
/// already scheduled.
#[derive(Debug, Clone)]
pub struct GroupMember {
    /// Namespace, name and uid.
    pub identity: PodIdentity,
    /// The v1 Pod.
    pub pod: Arc<Pod>,
    /// Its node, for a pod already scheduled (assumed or bound).
    pub node: Option<String>,
}

/// The group a group cycle schedules: parsed once from the cycle's
/// `GroupCycleStart` and shared by every request of the cycle.
#[derive(Debug, Clone)]
pub struct CycleGroup {
    cycle_id: u64,
    namespace: String,
    name: String,
    uid: String,
    object: Arc<PodGroup>,
    pods: Vec<GroupMember>,
    scheduled: Vec<GroupMember>,
    by_uid: HashMap<String, usize>,
}

impl CycleGroup {
    /// A group cycle's group. Mostly for unit tests of handlers.
    pub fn new(
        cycle_id: u64,
        pod_group: PodGroup,
        pods: Vec<GroupMember>,
        scheduled: Vec<GroupMember>,
    ) -> Self {
        let meta = &pod_group.metadata;
        let (namespace, name, uid) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
        );
        let by_uid = pods
            .iter()
            .chain(&scheduled)
            .enumerate()
            .map(|(i, m)| (m.identity.uid.clone(), i))
            .collect();
        Self {
            cycle_id,
            namespace,
            name,
            uid,
            object: Arc::new(pod_group),
            pods,
            scheduled,
            by_uid,
        }
    }

    /// The group cycle's id (unique on its stream).
    pub fn cycle_id(&self) -> u64 {
        self.cycle_id
    }

    /// `metadata.namespace` of the PodGroup (and of its pods).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name` of the PodGroup.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.uid` of the PodGroup.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The PodGroup.
    pub fn object(&self) -> &PodGroup {
        &self.object
    }

    /// `spec.schedulingPolicy.gang.minCount`, or 1 for a basic group.
    pub fn min_count(&self) -> i32 {
        self.object
            .spec
            .scheduling_policy
            .gang
            .as_ref()
            .map_or(1, |g| g.min_count)
    }

    /// The pods this cycle tries to place, in the order it evaluates them.
    pub fn pods(&self) -> &[GroupMember] {
        &self.pods
    }

    /// The group's pods already scheduled when the cycle started.
    pub fn scheduled(&self) -> &[GroupMember] {
        &self.scheduled
    }

    /// A pod of the group (to place or scheduled) by uid.
    pub fn member(&self, uid: &str) -> Option<&GroupMember> {
        let i = *self.by_uid.get(uid)?;
        self.pods
            .get(i)
            .or_else(|| self.scheduled.get(i - self.pods.len()))
    }
}

/// A pod of the group and the node the cycle placed it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The pod's uid (see [`CycleGroup::member`]).
    pub uid: String,
    /// The node.
    pub node: String,
}

/// How far a group cycle got, as PlacementFeasible is asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementProgress {
    /// The group's pods scheduled: before the cycle plus placed by it.
    pub scheduled: u32,
    /// The cycle's pods not evaluated yet.
    pub remaining: u32,
    /// The cycle's pods evaluated that did not fit.
    pub failed: u32,
    /// The pods this cycle placed so far, in order.
    pub placed: Vec<Placement>,
}

/// One pod's outcome in a group cycle that did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAttempt {
    /// The pod's uid.
    pub uid: String,
    /// Where it would have gone, if it fit.
    pub node: Option<String>,
    /// Why it did not fit (empty if it did).
    pub message: String,
}

/// What a group cycle that did not fit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAttempt {
    /// The group's status (a rejection, with its reasons).
    pub status: Status,
    /// The pods the cycle evaluated, in order (placements rolled back).
    pub pods: Vec<PodAttempt>,
    /// A what-if evaluation (DryRun, Simulate): answer, change nothing.
    pub dry_run: bool,
}

/// PodGroupPostFilter's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupPostFilterResult {
    /// Success (room is being made), `CODE_UNSCHEDULABLE` (cannot help),
    /// `CODE_UNSCHEDULABLE_AND_UNRESOLVABLE` (nothing can) or `CODE_ERROR`.
    pub status: Status,
    /// With success: nodes for some of the cycle's pods (by uid).
    pub nominations: Vec<Placement>,
}

impl GroupPostFilterResult {
    /// Cannot help: `CODE_UNSCHEDULABLE` with `reason`.
    pub fn cannot_help(reason: impl Into<String>) -> Self {
        Self {
            status: Status::unschedulable(reason),
            nominations: Vec::new(),
        }
    }
}

/// PlacementFeasible: judges the group's placement as its cycle goes, before
/// the first pod is evaluated and after each.
#[async_trait]
pub trait PlacementFeasible: Send + Sync + 'static {
    /// Success: the extender's constraints are met; `CODE_WAIT`: not yet,
    /// but still possible; a rejection: they can no longer be met (the
    /// cycle stops; the reasons reach the pods and the PodGroup);
    /// `CODE_ERROR`.
    async fn placement_feasible(
        &self,
        cx: &Context,
        group: &CycleGroup,
        progress: &PlacementProgress,
    ) -> HandlerResult<Status>;
}

/// PodGroupPostFilter: the group did not fit; the extender may make room
/// itself (for example by evicting pods through the Kubernetes API) and
/// nominate nodes for the group's pods.
#[async_trait]
pub trait PodGroupPostFilter: Send + Sync + 'static {
    /// What the extender does for the group (see [`GroupPostFilterResult`]).
    /// With `attempt.dry_run`, it must change nothing.
    async fn pod_group_post_filter(
        &self,
        cx: &Context,
        group: &CycleGroup,
        attempt: &GroupAttempt,
    ) -> HandlerResult<GroupPostFilterResult>;
}

/// GroupPermit (berth's point): the group fits; may it go on, as a whole?
#[async_trait]
pub trait GroupPermit: Send + Sync + 'static {
    /// Success lets every pod go on to its own Reserve and Permit; a
    /// rejection fails the whole group (no pod of it is assumed);
    /// `CODE_ERROR`. With `cx.dry_run()` (berthd's DryRun or Simulate), it
    /// must answer as it would and change nothing.
    async fn group_permit(
        &self,
        cx: &Context,
        group: &CycleGroup,
        placement: &[Placement],
    ) -> HandlerResult<Status>;
}

#[async_trait]
impl<T: PlacementFeasible + ?Sized> PlacementFeasible for Arc<T> {
    async fn placement_feasible(
        &self,
        cx: &Context,
        group: &CycleGroup,
        progress: &PlacementProgress,
    ) -> HandlerResult<Status> {
        (**self).placement_feasible(cx, group, progress).await
    }
}

#[async_trait]
impl<T: PodGroupPostFilter + ?Sized> PodGroupPostFilter for Arc<T> {
    async fn pod_group_post_filter(
        &self,
        cx: &Context,
        group: &CycleGroup,
        attempt: &GroupAttempt,
    ) -> HandlerResult<GroupPostFilterResult> {
        (**self).pod_group_post_filter(cx, group, attempt).await
    }
}

#[async_trait]
impl<T: GroupPermit + ?Sized> GroupPermit for Arc<T> {
    async fn group_permit(
        &self,
        cx: &Context,
        group: &CycleGroup,
        placement: &[Placement],
    ) -> HandlerResult<Status> {
        (**self).group_permit(cx, group, placement).await
    }
}

/// The group handlers registered with the builder.
#[derive(Clone, Default)]
pub(crate) struct GroupHandlers {
    pub(crate) placement_feasible: Option<Arc<dyn PlacementFeasible>>,
    pub(crate) pod_group_post_filter: Option<Arc<dyn PodGroupPostFilter>>,
    pub(crate) group_permit: Option<Arc<dyn GroupPermit>>,
}

/// Parses a `GroupCycleStart`, naming what is not valid.
pub(crate) fn parse_start(g: pb::GroupCycleStart) -> Result<CycleGroup, String> {
    let pod_group: PodGroup = serde_json::from_slice(&g.pod_group).map_err(|e| {
        format!(
            "the PodGroup of group cycle {} is not a valid scheduling.k8s.io/v1beta1 PodGroup: {e}",
            g.cycle_id
        )
    })?;
    let member = |m: pb::GroupMember| -> Result<GroupMember, String> {
        let pod: Pod = serde_json::from_slice(&m.pod).map_err(|e| {
            format!(
                "pod {}/{} of group cycle {} is not a valid v1 Pod: {e}",
                m.namespace, m.name, g.cycle_id
            )
        })?;
        Ok(GroupMember {
            identity: PodIdentity {
                namespace: m.namespace,
                name: m.name,
                uid: m.uid,
            },
            pod: Arc::new(pod),
            node: (!m.node.is_empty()).then_some(m.node),
        })
    };
    let pods = g.pods.into_iter().map(member).collect::<Result<_, _>>()?;
    let scheduled = g
        .scheduled
        .into_iter()
        .map(member)
        .collect::<Result<_, _>>()?;
    let mut group = CycleGroup::new(g.cycle_id, pod_group, pods, scheduled);
    // What the message says wins over a PodGroup without metadata.
    group.namespace = g.namespace;
    group.name = g.name;
    group.uid = g.uid;
    Ok(group)
}

/// Whether a request kind is a group point's.
pub(crate) fn is_group_kind(kind: &Kind) -> bool {
    matches!(
        kind,
        Kind::PlacementFeasible(_) | Kind::PodGroupPostFilter(_) | Kind::GroupPermit(_)
    )
}

const PLACEMENT_CODES: &[Code] = &[
    Code::Success,
    Code::Wait,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];
const DECIDING_CODES: &[Code] = &[
    Code::Success,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Error,
];

fn placements(p: Vec<pb::Placement>) -> Vec<Placement> {
    p.into_iter()
        .map(|p| Placement {
            uid: p.uid,
            node: p.node,
        })
        .collect()
}

type Work = BoxFuture<'static, Result<Reply, String>>;

/// The work of a group request, or `Err` with the error to answer at once
/// (no handler for it).
pub(crate) fn work(
    h: &GroupHandlers,
    cx: Context,
    group: Arc<CycleGroup>,
    kind: Kind,
) -> Result<Work, String> {
    let unserved = |name: &str| format!("{name} has no handler in this extender");
    Ok(match kind {
        Kind::PlacementFeasible(r) => {
            let h = h
                .placement_feasible
                .clone()
                .ok_or_else(|| unserved("PlacementFeasible"))?;
            let progress = PlacementProgress {
                scheduled: r.scheduled,
                remaining: r.remaining,
                failed: r.failed,
                placed: placements(r.placed),
            };
            async move {
                let s = h
                    .placement_feasible(&cx, &group, &progress)
                    .await
                    .map_err(|e| e.to_string())?;
                check_code("PlacementFeasible", &s, PLACEMENT_CODES)?;
                Ok(Reply::PlacementFeasible(pb::PlacementFeasibleResponse {
                    status: Some(s.into_proto()),
                }))
            }
            .boxed()
        }
        Kind::PodGroupPostFilter(r) => {
            let h = h
                .pod_group_post_filter
                .clone()
                .ok_or_else(|| unserved("PodGroupPostFilter"))?;
            let attempt = GroupAttempt {
                status: Status::from_proto(r.status.unwrap_or_default()),
                pods: r
                    .pods
                    .into_iter()
                    .map(|p| PodAttempt {
                        uid: p.uid,
                        node: (!p.node.is_empty()).then_some(p.node),
                        message: p.message,
                    })
                    .collect(),
                dry_run: r.dry_run,
            };
            async move {
                let out = h
                    .pod_group_post_filter(&cx, &group, &attempt)
                    .await
                    .map_err(|e| e.to_string())?;
                check_code("PodGroupPostFilter", &out.status, DECIDING_CODES)?;
                if !out.status.is_success() && !out.nominations.is_empty() {
                    return Err(
                        "the PodGroupPostFilter handler nominated nodes without answering success"
                            .into(),
                    );
                }
                if let Some(n) = out
                    .nominations
                    .iter()
                    .find(|n| !group.pods.iter().any(|p| p.identity.uid == n.uid))
                {
                    return Err(format!(
                        "the PodGroupPostFilter handler nominated pod uid {:?}, which is not a pod of the cycle",
                        n.uid
                    ));
                }
                Ok(Reply::PodGroupPostFilter(pb::PodGroupPostFilterResponse {
                    status: Some(out.status.into_proto()),
                    nominations: out
                        .nominations
                        .into_iter()
                        .map(|n| pb::Nomination {
                            uid: n.uid,
                            node: n.node,
                        })
                        .collect(),
                }))
            }
            .boxed()
        }
        Kind::GroupPermit(r) => {
            let h = h
                .group_permit
                .clone()
                .ok_or_else(|| unserved("GroupPermit"))?;
            let placement = placements(r.placement);
            async move {
                let s = h
                    .group_permit(&cx, &group, &placement)
                    .await
                    .map_err(|e| e.to_string())?;
                check_code("GroupPermit", &s, DECIDING_CODES)?;
                Ok(Reply::GroupPermit(pb::GroupPermitResponse {
                    status: Some(s.into_proto()),
                }))
            }
            .boxed()
        }
        _ => return Err("not a group point's request".into()),
    })
}
