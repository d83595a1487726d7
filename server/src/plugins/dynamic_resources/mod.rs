//! DynamicResources: allocates a pod's ResourceClaims (Dynamic Resource
//! Allocation with structured parameters) as part of scheduling it, as
//! kube-scheduler v1.36's plugin of the same name does:
//!
//! * PreEnqueue holds a pod until every claim it names exists (a claim
//!   from a template once the resourceclaim controller has made it), is
//!   not being deleted and, if made from a template, is owned by the pod;
//! * PreFilter reads the claims: allocated ones restrict the nodes to
//!   where their devices are; unallocated ones need existing device
//!   classes and no allocation in flight for another pod; their allocation
//!   is prepared ([`allocator`]) against the devices allocated right now;
//! * Filter runs the allocator per node (without keeping the result) and
//!   checks allocated claims' node selectors and binding conditions;
//! * PostFilter deallocates an allocated claim that kept the pod off every
//!   node, when no other pod uses it, before preemption evicts anyone;
//! * Score ranks nodes by how preferred the `firstAvailable` alternatives
//!   they can satisfy are;
//! * Reserve allocates on the chosen node and marks the allocation in
//!   flight (its devices count as taken from now on); Unreserve undoes it
//!   and removes the pod from claims it was already written into;
//! * PreBind writes each claim: the delete-protection finalizer, then one
//!   status write with the allocation and the pod in `reservedFor`; then,
//!   for devices with binding conditions, waits for them.
//!
//! Messages, codes, events and queueing hints are upstream's. Rejections
//! are `UnschedulableAndUnresolvable`, as upstream's are (preemption cannot
//! free devices; PostFilter deallocation does that).

pub mod allocator;
mod args;
mod binding;
mod events;
mod extended;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::resource::v1 as api;
use parking_lot::Mutex;

pub use args::*;

use crate::cache::NodeInfo;
use crate::cache::dra::DraStore;
use crate::cache::{KubeObject, ObjectKind};
use crate::extension_points;
use crate::framework::{
    ClusterEventWithHint, CycleState, FilterPlugin, Handle, NodeDetail, NodeScore, NodeToStatus,
    Plugin, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
    PreFilterResult, ReservePlugin, ScoreExtensions, ScorePlugin, StateKey, Status,
};
use crate::model::dra::{Claim, FINALIZER, Request, claim_from_template};
use crate::model::{ClaimSource, NodeSelector, NodeSpec, PodInfo};
use crate::plugins::helper::default_normalize_score;
use crate::plugins::names::DYNAMIC_RESOURCES;
use allocator::{Allocator, Outcome};

const STATE_KEY: StateKey<State> = StateKey::new("DynamicResources");

/// How many consumers a claim's `reservedFor` may list.
const RESERVED_FOR_MAX_SIZE: usize = 256;

/// What PreFilter learned, shared by the clones of the cycle state (as
/// upstream shares one pointer).
#[derive(Debug, Clone, Default)]
struct State(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// The pod's claims, in `spec.resourceClaims` order (those a template
    /// decided not to make are left out).
    claims: Vec<Arc<Claim>>,
    /// Per claim, where its allocation may be used (allocated claims).
    available_on: Vec<Option<NodeSelector>>,
    /// Indices of the pod's own claims the scheduler must allocate.
    to_allocate: Vec<usize>,
    /// Those claims.
    pending: Vec<Arc<Claim>>,
    /// The allocator for them (and why it could not be prepared, fatal
    /// for every node), as a variant with no special claim.
    base: Arc<extended::Variant>,
    /// The claim for extended resources backed by DRA, if the pod has one
    /// (the last of `claims`).
    extended: Option<extended::Extended>,
    /// The slices and allocated devices the allocators see.
    index: Arc<crate::cache::dra::SliceIndex>,
    allocated: Arc<crate::cache::dra::AllocatedState>,
    /// Whether any claim to allocate has a `firstAvailable` request
    /// (otherwise every node scores 0).
    scored: bool,
    /// Allocated claims that were not usable on some node (PostFilter).
    unavailable: Mutex<BTreeSet<usize>>,
    /// Per claim: the claim as Reserve allocated it, then as PreBind wrote
    /// it.
    reserved: Mutex<Vec<Option<Arc<api::ResourceClaim>>>>,
}

/// The DynamicResources plugin.
pub struct DynamicResources {
    handle: Handle,
    args: DynamicResourcesArgs,
}

impl DynamicResources {
    /// Builds the plugin.
    pub fn new(args: DynamicResourcesArgs, handle: &Handle) -> Self {
        Self {
            handle: handle.clone(),
            args,
        }
    }

    fn dra(&self) -> &DraStore {
        self.handle.objects().dra()
    }

    /// Dry runs: the claims the resourceclaim controller would make for
    /// the pod's template entries it has not made yet, from the templates
    /// as stored (embedded cluster) or read from the API (kube mode, where
    /// templates are not watched). Named with the generateName and
    /// `?????` for the random suffix. A template that cannot be read is
    /// left out (the pod is then told its claim is not created yet).
    async fn imagine_claims(&self, pod: &PodInfo) -> Vec<(Arc<str>, Arc<Claim>)> {
        let mut out = Vec::new();
        for pc in &pod.resource_claims {
            let ClaimSource::Template {
                template,
                generated: None,
            } = &pc.source
            else {
                continue;
            };
            let kind = ObjectKind::ResourceClaimTemplate;
            let stored = match self.handle.objects().get(kind, &pod.namespace, template) {
                Some(o) => Some(o),
                None => self
                    .handle
                    .cluster()
                    .get_object(kind, &pod.namespace, template)
                    .await
                    .ok(),
            };
            let Some(KubeObject::ResourceClaimTemplate(t)) = stored else {
                continue;
            };
            let name = format!("{}-{}-?????", pod.name, pc.name);
            let mut claim = claim_from_template(&pod.pod.get(), &pc.name, &t, name);
            claim.metadata.uid = Some(format!("dry-run/{}/{}", pod.uid, pc.name));
            out.push((
                pc.name.clone(),
                self.dra().parse_unstored_claim(Arc::new(claim)),
            ));
        }
        out
    }
}

/// The pod's claims, each checked as PreEnqueue checks them; the first
/// problem is the error.
pub(crate) fn pod_claims(dra: &DraStore, pod: &PodInfo) -> Result<Vec<Arc<Claim>>, String> {
    pod_claims_with(dra, pod, &[])
}

/// [`pod_claims`], with claims a dry run imagines the resourceclaim
/// controller made (by the pod's claim name) for template entries it has
/// not made yet.
fn pod_claims_with(
    dra: &DraStore,
    pod: &PodInfo,
    imagined: &[(Arc<str>, Arc<Claim>)],
) -> Result<Vec<Arc<Claim>>, String> {
    let mut out = Vec::with_capacity(pod.resource_claims.len());
    for pc in &pod.resource_claims {
        let (name, must_check_owner) = match &pc.source {
            ClaimSource::Claim(n) => (n.clone(), false),
            ClaimSource::Template { generated, .. } => match generated {
                None if let Some((_, c)) = imagined.iter().find(|(n, _)| *n == pc.name) => {
                    out.push(c.clone());
                    continue;
                }
                None => {
                    return Err(format!(
                        "pod \"{}/{}\": ResourceClaim not created yet",
                        pod.namespace, pod.name
                    ));
                }
                // The controller decided no claim is needed.
                Some(None) => continue,
                Some(Some(n)) => (n.clone(), true),
            },
            ClaimSource::Unsupported => {
                return Err(format!(
                    "pod \"{}/{}\", spec.resourceClaim {:?}: none of the supported fields are set",
                    pod.namespace, pod.name, &*pc.name
                ));
            }
        };
        let Some(claim) = dra.claim(&pod.namespace, &name) else {
            return Err(format!(
                "could not find ResourceClaim \"{}/{name}\"",
                pod.namespace
            ));
        };
        if claim.deleting {
            return Err(format!("resourceclaim {:?} is being deleted", &*claim.name));
        }
        if must_check_owner && claim.controller.as_ref().is_none_or(|o| o.uid != pod.uid) {
            return Err(format!(
                "ResourceClaim {}/{} was not created for Pod {}/{} (Pod is not owner)",
                claim.namespace, claim.name, pod.namespace, pod.name
            ));
        }
        out.push(claim);
    }
    Ok(out)
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        DYNAMIC_RESOURCES
    }

    fn node_local(&self, pod: &PodInfo) -> bool {
        // Without claims (or extended resources DRA may serve) there is no
        // state, and Score gives every node 0.
        pod.resource_claims.is_empty() && pod.requests.scalar.is_empty()
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(events::registrations(self.handle.objects().clone()))
    }

    extension_points!(
        pre_enqueue,
        pre_filter,
        filter,
        post_filter,
        score,
        reserve,
        pre_bind
    );
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.resource_claims.is_empty() {
            return Status::success();
        }
        match pod_claims(self.dra(), pod) {
            Ok(_) => Status::success(),
            Err(e) => Status::unresolvable(e),
        }
    }
}

#[async_trait]
impl PreFilterPlugin for DynamicResources {
    async fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        state.write(&STATE_KEY, State::default());
        if pod.resource_claims.is_empty() && !self.may_use_extended_resources(pod) {
            return (None, Status::skip());
        }
        let dra = self.dra();
        let imagined = if state.dry_run {
            self.imagine_claims(pod).await
        } else {
            Vec::new()
        };
        let mut claims = match pod_claims_with(dra, pod, &imagined) {
            Ok(c) => c,
            Err(e) => return (None, Status::unresolvable(e)),
        };
        let extended = match extended::Extended::prepare(dra, pod, claims.len()) {
            Some((e, claim)) => {
                claims.push(claim);
                Some(e)
            }
            None => None,
        };
        if claims.is_empty() {
            return (None, Status::skip());
        }
        let mut available_on = Vec::with_capacity(claims.len());
        let mut to_allocate = Vec::new();
        let mut scored = false;
        let special = extended.as_ref().map(|e| e.index);
        for (i, claim) in claims.iter().enumerate() {
            if claim.allocated()
                && claim.reserved_for.len() >= RESERVED_FOR_MAX_SIZE
                && !claim.reserved_for_pod(&pod.uid)
            {
                return (None, Status::unresolvable("resourceclaim in use"));
            }
            if claim.allocated() {
                available_on.push(claim.allocation_nodes.clone());
                continue;
            }
            available_on.push(None);
            if Some(i) != special {
                to_allocate.push(i);
            }
            if dra.claim_has_pending_allocation(&claim.uid) {
                return (
                    None,
                    Status::unresolvable(format!(
                        "resource claim {} is in the process of being allocated",
                        claim.key()
                    )),
                );
            }
            if Some(i) == special {
                // Its requests are made per node, in Filter.
                continue;
            }
            for r in &claim.requests {
                let classes: Vec<(String, &str)> = match r {
                    Request::Exact(s) => vec![(s.name.to_string(), &*s.class)],
                    Request::FirstAvailable { name, subrequests } => {
                        scored = true;
                        subrequests
                            .iter()
                            .map(|s| (format!("{name}/{}", s.name), &*s.class))
                            .collect()
                    }
                    Request::Unknown { name } => {
                        return (
                            None,
                            Status::unresolvable(format!(
                                "resource claim {}, request {name}: unknown request type",
                                claim.key()
                            )),
                        );
                    }
                };
                for (request, class) in classes {
                    if class.is_empty() {
                        return (
                            None,
                            Status::error(format!("request {request}: unsupported request type")),
                        );
                    }
                    if dra.class(class).is_none() {
                        return (
                            None,
                            Status::unresolvable(format!(
                                "request {request}: device class {class} does not exist"
                            )),
                        );
                    }
                }
            }
        }
        let index = dra.slice_index();
        let allocated = Arc::new(dra.allocated_state());
        let pending: Vec<Arc<Claim>> = to_allocate.iter().map(|i| claims[*i].clone()).collect();
        let (allocator, fatal) = if pending.is_empty() {
            (None, None)
        } else {
            match Allocator::new(
                &pending,
                |c| dra.class(c),
                index.clone(),
                allocated.clone(),
                self.args.filter_timeout(),
            ) {
                Ok(a) => (Some(a), None),
                Err(e) => (None, Some(e)),
            }
        };
        let n = claims.len();
        state.write(
            &STATE_KEY,
            State(Arc::new(Inner {
                claims,
                available_on,
                to_allocate,
                pending,
                base: Arc::new(extended::Variant {
                    object: None,
                    mappings: Vec::new(),
                    allocator,
                    fatal,
                }),
                extended,
                index,
                allocated,
                scored,
                unavailable: Mutex::default(),
                reserved: Mutex::new(vec![None; n]),
            })),
        );
        (None, Status::success())
    }
}

impl DynamicResources {
    /// Whether the pod asks for an extended resource a DeviceClass backs.
    fn may_use_extended_resources(&self, pod: &PodInfo) -> bool {
        pod.requests.scalar.iter().any(|(name, q)| {
            *q != 0 && {
                let name = name.as_str();
                crate::cache::dra::is_dra_extended_resource(&name)
                    && self.dra().class_for_extended_resource(&name).is_some()
            }
        })
    }

    /// What `node` asks of DRA for the pod: the allocator for its own
    /// claims, or, when it leaves some extended resources to DRA, for
    /// those and the special claim's requests for it. `Ok(None)`: nothing
    /// (the pod's only claim is the special one and the node's device
    /// plugins offer everything). `Err`: the special claim is left from an
    /// earlier attempt (PostFilter deletes it).
    fn variant_for(
        &self,
        st: &Inner,
        pod: &PodInfo,
        node: &NodeSpec,
    ) -> Result<Option<Arc<extended::Variant>>, Status> {
        let Some(e) = &st.extended else {
            return Ok(Some(st.base.clone()));
        };
        let special = &st.claims[e.index];
        if &*special.name != extended::IN_MEMORY_NAME && !special.requests.is_empty() {
            return Err(Status::unresolvable(
                "cannot schedule extended resource claim",
            ));
        }
        let mask = if special.allocated() { 0 } else { e.mask(node) };
        if mask == 0 {
            return Ok((st.claims.len() > 1).then(|| st.base.clone()));
        }
        let dra = self.dra();
        Ok(Some(e.variant(mask, |mut v| {
            let (requests, mappings) = e.requests_for(pod, mask);
            let mut obj = (*special.object).clone();
            obj.spec.get_or_insert_default().devices = Some(api::DeviceClaim {
                requests: Some(requests),
                ..Default::default()
            });
            let obj = Arc::new(obj);
            let mut pending = st.pending.clone();
            pending.push(dra.parse_unstored_claim(obj.clone()));
            match Allocator::new(
                &pending,
                |c| dra.class(c),
                st.index.clone(),
                st.allocated.clone(),
                self.args.filter_timeout(),
            ) {
                Ok(a) => v.allocator = Some(a),
                Err(f) => v.fatal = Some(f),
            }
            v.object = Some(obj);
            v.mappings = mappings;
            v
        })))
    }

    /// Deletes the claim made for the pod's extended resources (its
    /// finalizer first), as upstream does with one left from an earlier
    /// attempt or made by a failed one.
    async fn delete_extended_claim(&self, claim: &api::ResourceClaim) -> Result<(), String> {
        let cluster = self.handle.cluster();
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let mut current = Arc::new(claim.clone());
        for attempt in 0..5 {
            if attempt > 0 {
                current = match cluster
                    .get_object(crate::cache::ObjectKind::ResourceClaim, &ns, &name)
                    .await
                {
                    Ok(KubeObject::ResourceClaim(c)) => c,
                    Ok(_) => return Err("not a ResourceClaim".into()),
                    Err(e) => return Err(format!("get resourceclaim {ns}/{name}: {e}")),
                };
            }
            let mut c = (*current).clone();
            let Some(f) = c
                .metadata
                .finalizers
                .as_mut()
                .filter(|f| f.iter().any(|f| f == FINALIZER))
            else {
                break;
            };
            f.retain(|f| f != FINALIZER);
            match cluster
                .update_object(KubeObject::ResourceClaim(Arc::new(c)))
                .await
            {
                Ok(_) => break,
                Err(crate::framework::ClusterError::Conflict(_)) => continue,
                Err(e) => return Err(format!("update resourceclaim {ns}/{name}: {e}")),
            }
        }
        self.dra().restore_claim(&ns, &name);
        cluster
            .delete_object(crate::cache::ObjectKind::ResourceClaim, &ns, &name)
            .await
            .map_err(|e| e.to_string())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            // No PreFilter (a what-if run of a pod PreFilter skipped).
            return Status::success();
        };
        if st.claims.is_empty() {
            return Status::success();
        }
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        let variant = match self.variant_for(st, pod, n) {
            Err(s) => return s,
            Ok(None) => return Status::success(),
            Ok(Some(v)) => v,
        };
        let mut unavailable: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for (i, claim) in st.claims.iter().enumerate() {
            if let Some(sel) = &st.available_on[i]
                && !sel.matches(&n.labels, &n.name)
            {
                unavailable.push(i);
                continue;
            }
            if claim.allocated() && !binding::ready_or_waiting(claim, self.args.binding_timeout()) {
                unavailable.push(i);
            }
        }
        if let Some(e) = &variant.fatal {
            return Status::error(e.clone());
        }
        if let Some(a) = &variant.allocator {
            match a.check(n) {
                Ok(Outcome::Fits { .. }) => {}
                Ok(Outcome::NoFit) => return Status::unresolvable("cannot allocate all claims"),
                Ok(Outcome::InvalidPools) => {
                    return Status::unresolvable("invalid resource pools were encountered");
                }
                Ok(Outcome::TimedOut) => {
                    return Status::unresolvable("timed out trying to allocate devices");
                }
                Err(e) => return Status::error(e),
            }
        }
        if !unavailable.is_empty() {
            st.unavailable.lock().extend(unavailable);
            return Status::unresolvable("resourceclaim not available on the node");
        }
        Status::success()
    }

    fn explain(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        rejected: bool,
    ) -> Vec<NodeDetail> {
        let (Some(State(st)), Some(n)) = (state.read(&STATE_KEY), node.node()) else {
            return Vec::new();
        };
        let why = |claim: String, request: String, reason: String| NodeDetail::Unsatisfied {
            claim,
            request,
            reason,
        };
        let variant = match self.variant_for(st, pod, n) {
            Ok(v) => v,
            Err(s) => {
                let e = st.extended.as_ref().map(|e| st.claims[e.index].key());
                return vec![why(
                    e.unwrap_or_default(),
                    String::new(),
                    format!(
                        "{} (made for the pod's extended resources by an earlier attempt; it is deleted so that the next attempt starts anew)",
                        s.message()
                    ),
                )];
            }
        };
        let Some(variant) = variant else {
            return Vec::new();
        };
        if !rejected {
            // The devices the pod would get here.
            let Some(a) = &variant.allocator else {
                return Vec::new();
            };
            let Ok(Some(allocs)) = a.allocate(n) else {
                return Vec::new();
            };
            return a
                .claims()
                .iter()
                .zip(allocs)
                .flat_map(|(c, alloc)| {
                    let claim = c.claim.key();
                    alloc.devices.into_iter().map(move |d| NodeDetail::Device {
                        claim: claim.clone(),
                        request: d.request,
                        driver: d.driver.to_string(),
                        pool: d.pool.to_string(),
                        device: d.device.to_string(),
                    })
                })
                .collect();
        }
        let mut out = Vec::new();
        for (i, claim) in st.claims.iter().enumerate() {
            let reason = match &st.available_on[i] {
                Some(sel) if !sel.matches(&n.labels, &n.name) => {
                    "allocated to devices this node cannot use"
                }
                _ if claim.allocated()
                    && !binding::ready_or_waiting(claim, self.args.binding_timeout()) =>
                {
                    "its devices' binding conditions failed or timed out"
                }
                _ => continue,
            };
            out.push(why(claim.key(), String::new(), reason.into()));
        }
        if let Some(e) = &variant.fatal {
            out.push(why(String::new(), String::new(), e.clone()));
        } else if let Some(a) = &variant.allocator
            && !matches!(a.check(n), Ok(Outcome::Fits { .. }))
        {
            out.extend(
                allocator::explain_node(a, n)
                    .into_iter()
                    .map(|w| why(w.claim, w.request, w.reason)),
            );
        }
        out
    }
}

#[async_trait]
impl PostFilterPlugin for DynamicResources {
    async fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        _: &NodeToStatus,
        _: &dyn crate::framework::ProfileFilters,
    ) -> (Option<PostFilterResult>, Status) {
        let st = match state.read(&STATE_KEY) {
            Some(State(st)) if !st.claims.is_empty() => st.clone(),
            _ => {
                return (None, Status::unschedulable("no new claims to deallocate"));
            }
        };
        let special = st.extended.as_ref().map(|e| e.index);
        let unavailable: Vec<usize> = st.unavailable.lock().iter().copied().collect();
        for i in unavailable {
            if Some(i) == special {
                continue;
            }
            let claim = &st.claims[i];
            let others = claim.reserved_for.iter().any(|c| *c.uid != *pod.uid);
            if others {
                continue;
            }
            if state.dry_run {
                // A dry run changes nothing; it says what would be done.
                return (
                    None,
                    Status::unschedulable(format!(
                        "ResourceClaim {} would be deallocated (dry run)",
                        claim.key()
                    )),
                );
            }
            let mut obj = (*claim.object).clone();
            if let Some(s) = obj.status.as_mut() {
                s.reserved_for = None;
                s.allocation = None;
                s.devices = None;
            }
            tracing::debug!(pod = %pod.key(), claim = %claim.key(), "deallocating a resource claim");
            let cluster = self.handle.cluster();
            return match cluster
                .update_object_status(crate::cache::KubeObject::ResourceClaim(Arc::new(obj)))
                .await
            {
                Ok(_) => (
                    None,
                    Status::unschedulable("deallocation of ResourceClaim completed"),
                ),
                Err(e) => (None, Status::error(e.to_string())),
            };
        }
        if let Some(i) = special
            && &*st.claims[i].name != extended::IN_MEMORY_NAME
        {
            // Made by an earlier attempt: deleted, the next one starts anew.
            let claim = &st.claims[i];
            if state.dry_run {
                return (
                    None,
                    Status::unschedulable(format!(
                        "ResourceClaim {} would be deleted (dry run)",
                        claim.key()
                    )),
                );
            }
            return match self.delete_extended_claim(&claim.object).await {
                Ok(()) => (
                    None,
                    Status::unschedulable("deletion of ResourceClaim completed"),
                ),
                Err(e) => (None, Status::error(e)),
            };
        }
        (None, Status::unschedulable("still not schedulable"))
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            return Ok(0);
        };
        if !st.scored {
            return Ok(0);
        }
        let Some(n) = node.node() else {
            return Ok(0);
        };
        let Ok(Some(v)) = self.variant_for(st, pod, n) else {
            return Ok(0);
        };
        let Some(a) = &v.allocator else {
            return Ok(0);
        };
        match a.check(n) {
            Ok(Outcome::Fits { score }) => Ok(score),
            Ok(_) => Ok(0),
            Err(e) => Err(Status::error(e)),
        }
    }

    fn score_extensions(&self) -> Option<&dyn ScoreExtensions> {
        Some(self)
    }
}

impl ScoreExtensions for DynamicResources {
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        default_normalize_score(crate::framework::MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

#[async_trait]
impl ReservePlugin for DynamicResources {
    async fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            return Status::success();
        };
        let snapshot = state.snapshot().clone();
        let Some(n) = snapshot.get(node).and_then(|i| i.node().cloned()) else {
            if st.claims.is_empty() {
                return Status::success();
            }
            return Status::error(format!("node {node:?} not found"));
        };
        let variant = match self.variant_for(st, pod, &n) {
            Ok(Some(v)) => v,
            Ok(None) => return Status::success(),
            Err(s) => return s,
        };
        let Some(a) = &variant.allocator else {
            return Status::success();
        };
        let allocations = match a.allocate(&n) {
            Ok(Some(v)) => v,
            Ok(None) => return Status::error("claim allocation not found for node"),
            Err(e) => return Status::error(e),
        };
        // The pod's own claims, then the special one when this node needs it.
        let special = st.extended.as_ref().map(|e| e.index);
        let targets: Vec<usize> = st
            .to_allocate
            .iter()
            .copied()
            .chain(special.filter(|_| variant.object.is_some()))
            .collect();
        if allocations.len() != targets.len() {
            return Status::error(format!(
                "internal error, have {} allocations, {} claims to allocate",
                allocations.len(),
                targets.len()
            ));
        }
        let mut reserved = st.reserved.lock();
        for (alloc, &i) in allocations.iter().zip(&targets) {
            let claim = &st.claims[i];
            let source = match (&variant.object, Some(i) == special) {
                (Some(o), true) => o.clone(),
                _ => claim.object.clone(),
            };
            let mut obj = (*source).clone();
            let finalizers = obj.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|f| f == FINALIZER) {
                finalizers.push(FINALIZER.into());
            }
            obj.status.get_or_insert_with(Default::default).allocation = Some(alloc.to_api());
            let obj = Arc::new(obj);
            self.dra().signal_pending_allocation(obj.clone());
            tracing::debug!(claim = %claim.key(), node, "reserved devices in an allocation result");
            reserved[i] = Some(obj);
        }
        if let Some(e) = &st.extended {
            *e.chosen.lock() = Some(variant.clone());
        }
        Status::success()
    }

    async fn unreserve(&self, state: &CycleState, pod: &PodInfo, _node: &str) {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            return;
        };
        let special = st.extended.as_ref().map(|e| e.index);
        let written: Vec<Option<Arc<api::ResourceClaim>>> = st.reserved.lock().clone();
        for (i, claim) in st.claims.iter().enumerate() {
            if self.dra().remove_pending_allocation(&claim.uid) {
                self.dra().restore_claim(&claim.namespace, &claim.name);
            }
            if Some(i) == special {
                continue;
            }
            // The claim as PreBind left it, if it wrote it.
            let latest = written[i]
                .as_ref()
                .filter(|o| o.metadata.resource_version != claim.object.metadata.resource_version)
                .map(|o| o.status.as_ref());
            let status = latest.unwrap_or(claim.object.status.as_ref());
            let reserved_for_pod = status.is_some_and(|s| {
                s.allocation.is_some() && s.reserved_for.iter().flatten().any(|r| r.uid == *pod.uid)
            });
            if reserved_for_pod {
                tracing::debug!(claim = %claim.key(), pod = %pod.key(), "unreserve");
                if let Err(e) = self
                    .handle
                    .cluster()
                    .remove_claim_reservation(&claim.namespace, &claim.name, &claim.uid, &pod.uid)
                    .await
                {
                    // Retried when the pod is scheduled again.
                    tracing::warn!(claim = %claim.key(), error = %e, "unreserve failed");
                }
            }
        }
        // A claim made for the pod's extended resources goes again.
        let created = st.extended.as_ref().and_then(|e| e.created.lock().take());
        if let Some(c) = created {
            tracing::debug!(pod = %pod.key(), claim = ?c.metadata.name, "deleting the extended resource claim");
            if let Err(e) = self.delete_extended_claim(&c).await {
                tracing::warn!(pod = %pod.key(), error = %e, "deleting the extended resource claim failed");
            }
        }
    }
}

#[async_trait]
impl PreBindPlugin for DynamicResources {
    /// Work for PreBind: a claim not yet reserved for the pod (to allocate
    /// or to reserve), or a claim to create for extended resources on a
    /// node whose device plugins do not serve them all. `Skip` when the pod
    /// has no claims, or every one is allocated and reserved for it.
    fn pre_bind_pre_flight(&self, state: &CycleState, pod: &PodInfo, _node: &str) -> Status {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            return Status::skip();
        };
        let special = st.extended.as_ref().map(|e| e.index);
        let work = st.claims.iter().enumerate().any(|(i, claim)| {
            if claim.reserved_for_pod(&pod.uid) {
                return false;
            }
            match (Some(i) == special, &st.extended) {
                (true, Some(e)) => e.chosen.lock().as_ref().is_some_and(|v| v.object.is_some()),
                _ => true,
            }
        });
        if work {
            Status::success()
        } else {
            Status::skip()
        }
    }

    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(State(st)) = state.read(&STATE_KEY) else {
            return Status::success();
        };
        if st.claims.is_empty() {
            return Status::success();
        }
        binding::pre_bind(self, st, pod, node).await
    }
}

#[cfg(test)]
mod tests;
