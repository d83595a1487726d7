//! PreBind: writing each claim's allocation and reservation, as upstream
//! writes them, then waiting for devices' binding conditions.
//!
//! Per claim not yet reserved for the pod:
//! 1. if the scheduler allocated it: a `PUT` of the claim adding the
//!    `resource.kubernetes.io/delete-protection` finalizer (unless present);
//! 2. one `PUT` of its status with the allocation (and, with binding
//!    conditions on, its `allocationTimestamp`) and the pod appended to
//!    `reservedFor`;
//!
//! retried on conflicts (re-reading the claim) up to five times, 10 ms
//! apart. The written claim goes into the DRA store's assume cache; the
//! in-flight allocation is dropped whether the write worked or not.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{DynamicResources, Inner};
use crate::cache::{KubeObject, ObjectKind};
use crate::framework::{ClusterError, EventType, PodEvent, Status};
use crate::model::PodInfo;
use crate::model::dra::{Claim, FINALIZER};

/// upstream's retry.DefaultRetry: five steps, 10 ms apart.
const RETRIES: usize = 5;
const RETRY_DELAY: Duration = Duration::from_millis(10);
/// How often PreBind looks at binding conditions.
const BINDING_POLL: Duration = Duration::from_secs(5);

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now()).unwrap_or_default())
}

fn claim_of(obj: KubeObject) -> Result<Arc<api::ResourceClaim>, String> {
    match obj {
        KubeObject::ResourceClaim(c) => Ok(c),
        other => Err(format!(
            "expected a ResourceClaim, got a {:?}",
            other.kind()
        )),
    }
}

pub(super) async fn pre_bind(
    pl: &DynamicResources,
    st: &Inner,
    pod: &PodInfo,
    node: &str,
) -> Status {
    let special = st.extended.as_ref().map(|e| e.index);
    for (i, claim) in st.claims.iter().enumerate() {
        if claim.reserved_for_pod(&pod.uid) {
            continue;
        }
        let allocation = st.reserved.lock()[i]
            .as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.allocation.clone());
        if Some(i) == special {
            match bind_extended_claim(pl, st, claim, allocation, pod).await {
                Ok(()) => continue,
                Err(e) => return Status::error(e),
            }
        }
        let result = bind_claim(pl, claim, allocation.clone(), pod).await;
        if allocation.is_some() {
            pl.dra().remove_pending_allocation(&claim.uid);
        }
        match result {
            Ok(written) => {
                if let Err(e) = pl.dra().assume_claim(written.clone()) {
                    tracing::debug!(claim = %claim.key(), error = %e, "claim not stored in the assume cache");
                }
                st.reserved.lock()[i] = Some(written);
            }
            Err(e) => return Status::error(e),
        }
    }
    // Devices with binding conditions: wait until they are ready.
    let waiting = {
        let written = st.reserved.lock();
        st.claims
            .iter()
            .enumerate()
            .any(|(i, c)| has_binding_conditions(written[i].as_deref().unwrap_or(&c.object)))
    };
    if !waiting {
        return Status::success();
    }
    pl.handle.events().record(PodEvent::new(
        Arc::new(pod.clone()),
        Arc::from(pod.scheduler_name.as_ref()),
        EventType::Normal,
        "BindingConditionsPending",
        "Scheduling",
        &format!("waiting for binding conditions for device on node {node}"),
    ));
    let deadline = tokio::time::Instant::now() + pl.args.binding_timeout();
    loop {
        match pod_ready_for_binding(pl, st, pl.args.binding_timeout()) {
            Ok(true) => return Status::success(),
            Ok(false) => {}
            Err(e) => return Status::error(e),
        }
        if tokio::time::Instant::now() + BINDING_POLL > deadline {
            return Status::error("device binding timeout");
        }
        tokio::time::sleep(BINDING_POLL).await;
    }
}

/// The special claim for extended resources: nothing when the node's
/// device plugins serve them all; else created (`generateName:
/// <pod>-extended-resources-`), then written like any claim, stored ahead
/// of the watch, and named in the pod's `status.extendedResourceClaimStatus`.
async fn bind_extended_claim(
    pl: &DynamicResources,
    st: &Inner,
    claim: &Claim,
    allocation: Option<api::AllocationResult>,
    pod: &PodInfo,
) -> Result<(), String> {
    let Some(e) = &st.extended else {
        return Ok(());
    };
    let chosen = e.chosen.lock().clone();
    let Some((variant, object)) = chosen.and_then(|v| v.object.clone().map(|o| (v, o))) else {
        // Served by the node's device plugins.
        return Ok(());
    };
    let cluster = pl.handle.cluster();
    let mut obj = (*object).clone();
    obj.metadata.name = None;
    obj.metadata.uid = None;
    obj.status = None;
    let created = cluster
        .create_object(KubeObject::ResourceClaim(Arc::new(obj)))
        .await
        .and_then(|o| claim_of(o).map_err(ClusterError::Other));
    // Extended-resource claims never ask for admin access.
    crate::metrics::process::resource_claim_created(created.is_ok(), false);
    let created = match created {
        Ok(c) => c,
        Err(err) => {
            pl.dra().remove_pending_allocation(&claim.uid);
            return Err(format!(
                "create claim for extended resources {}/{}: {err}",
                pod.namespace,
                object.metadata.generate_name.as_deref().unwrap_or("")
            ));
        }
    };
    *e.created.lock() = Some(created.clone());
    let parsed = pl.dra().parse_unstored_claim(created.clone());
    let result = bind_claim(pl, &parsed, allocation, pod).await;
    match result {
        Ok(written) => {
            // Counted as allocated before the watch brings it (the
            // in-flight allocation under the temporary UID goes now).
            pl.dra().assume_created_claim(written.clone());
            pl.dra().remove_pending_allocation(&claim.uid);
            *e.created.lock() = Some(written.clone());
            if variant.mappings.is_empty() {
                return Err(format!(
                    "nil or empty request mappings, no update of pod {}/{} ExtendedResourceClaimStatus",
                    pod.namespace, pod.name
                ));
            }
            cluster
                .set_extended_resource_claim_status(
                    pod,
                    k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus {
                        request_mappings: variant.mappings.clone(),
                        resource_claim_name: written.metadata.name.clone().unwrap_or_default(),
                    },
                )
                .await
                .map_err(|err| {
                    format!(
                        "update pod {}/{} ExtendedResourceClaimStatus: {err}",
                        pod.namespace, pod.name
                    )
                })
        }
        Err(err) => {
            pl.dra().remove_pending_allocation(&claim.uid);
            Err(err)
        }
    }
}

/// Writes one claim; returns it as stored.
async fn bind_claim(
    pl: &DynamicResources,
    claim: &Claim,
    allocation: Option<api::AllocationResult>,
    pod: &PodInfo,
) -> Result<Arc<api::ResourceClaim>, String> {
    let cluster = pl.handle.cluster();
    let key = claim.key();
    let mut current: Arc<api::ResourceClaim> = claim.object.clone();
    let mut last = String::new();
    for attempt in 0..RETRIES {
        if attempt > 0 {
            tokio::time::sleep(RETRY_DELAY).await;
            current = match cluster
                .get_object(ObjectKind::ResourceClaim, &claim.namespace, &claim.name)
                .await
            {
                Ok(o) => claim_of(o)?,
                Err(e) => return Err(format!("get updated claim {key} after conflict: {e}")),
            };
        }
        if current.metadata.deletion_timestamp.is_some() {
            return Err(format!("claim {key} got deleted in the meantime"));
        }
        let mut c = (*current).clone();
        if let Some(alloc) = &allocation {
            if c.status.as_ref().is_some_and(|s| s.allocation.is_some()) {
                return Err(format!(
                    "claim {key} got allocated elsewhere in the meantime"
                ));
            }
            if !c
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
            {
                c.metadata
                    .finalizers
                    .get_or_insert_with(Vec::new)
                    .push(FINALIZER.into());
                match cluster
                    .update_object(KubeObject::ResourceClaim(Arc::new(c)))
                    .await
                {
                    Ok(o) => c = (*claim_of(o)?).clone(),
                    Err(ClusterError::Conflict(m)) => {
                        last = format!("add finalizer to claim {key}: {m}");
                        continue;
                    }
                    Err(e) => return Err(format!("add finalizer to claim {key}: {e}")),
                }
            }
            c.status.get_or_insert_with(Default::default).allocation = Some(alloc.clone());
        }
        let status = c.status.get_or_insert_with(Default::default);
        status.reserved_for.get_or_insert_with(Vec::new).push(
            api::ResourceClaimConsumerReference {
                api_group: None,
                resource: "pods".into(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
            },
        );
        if let Some(a) = status.allocation.as_mut()
            && a.allocation_timestamp.is_none()
        {
            a.allocation_timestamp = Some(now());
        }
        match cluster
            .update_object_status(KubeObject::ResourceClaim(Arc::new(c)))
            .await
        {
            Ok(o) => return claim_of(o),
            Err(ClusterError::Conflict(m)) => {
                last = if allocation.is_some() {
                    format!("add allocation and reservation to claim {key}: {m}")
                } else {
                    format!("add reservation to claim {key}: {m}")
                };
                continue;
            }
            Err(e) => {
                return Err(if allocation.is_some() {
                    format!("add allocation and reservation to claim {key}: {e}")
                } else {
                    format!("add reservation to claim {key}: {e}")
                });
            }
        }
    }
    Err(last)
}

fn has_binding_conditions(c: &api::ResourceClaim) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .is_some_and(|r| {
            r.iter()
                .any(|d| d.binding_conditions.as_ref().is_some_and(|b| !b.is_empty()))
        })
}

/// Whether an allocated claim's devices are ready for binding: `Ok(true)`
/// when every binding condition is true (or there are none), `Err` when a
/// binding failure condition is true.
fn claim_ready(c: &api::ResourceClaim) -> Result<bool, String> {
    let Some(status) = c.status.as_ref() else {
        return Ok(false);
    };
    let Some(alloc) = status.allocation.as_ref() else {
        return Ok(false);
    };
    for r in alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
    {
        let conds = r.binding_conditions.as_deref().unwrap_or(&[]);
        if conds.is_empty() {
            continue;
        }
        let Some(dev) = status
            .devices
            .iter()
            .flatten()
            .find(|d| d.device == r.device && d.driver == r.driver && d.pool == r.pool)
        else {
            return Ok(false);
        };
        let cond = |t: &str| dev.conditions.iter().flatten().find(|c| c.type_ == t);
        for f in r.binding_failure_conditions.iter().flatten() {
            if let Some(fc) = cond(f).filter(|c| c.status == "True") {
                return Err(format!(
                    "claim {} binding failed: reason={}, message={:?}",
                    c.metadata.name.as_deref().unwrap_or(""),
                    fc.reason,
                    fc.message
                ));
            }
        }
        if !conds
            .iter()
            .all(|t| cond(t).is_some_and(|c| c.status == "True"))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the binding conditions timed out (`allocationTimestamp` plus
/// the binding timeout is past).
fn timed_out(c: &api::ResourceClaim, timeout: Duration) -> bool {
    let Some(alloc) = c.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return false;
    };
    let Some(ts) = &alloc.allocation_timestamp else {
        return false;
    };
    if !has_binding_conditions(c) {
        return false;
    }
    let deadline = ts.0.as_second().saturating_add(timeout.as_secs() as i64);
    let now = k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now())
        .map(|t| t.as_second())
        .unwrap_or(0);
    deadline < now
}

/// For Filter: whether an allocated claim is usable for binding: ready,
/// or still within its binding timeout (not failed).
pub(super) fn ready_or_waiting(claim: &Claim, timeout: Duration) -> bool {
    if !claim.allocated() || !has_binding_conditions(&claim.object) {
        return true;
    }
    match claim_ready(&claim.object) {
        Ok(true) => true,
        Ok(false) => !timed_out(&claim.object, timeout),
        Err(_) => false,
    }
}

/// Re-reads the pod's claims and checks their binding conditions.
fn pod_ready_for_binding(
    pl: &DynamicResources,
    st: &Inner,
    timeout: Duration,
) -> Result<bool, String> {
    for claim in &st.claims {
        let Some(c) = pl.dra().claim(&claim.namespace, &claim.name) else {
            return Err(format!(
                "could not find ResourceClaim \"{}/{}\"",
                claim.namespace, claim.name
            ));
        };
        match claim_ready(&c.object)? {
            true => {}
            false => {
                if timed_out(&c.object, timeout) {
                    return Err(format!("claim {} binding timeout", c.name));
                }
                return Ok(false);
            }
        }
    }
    Ok(true)
}
