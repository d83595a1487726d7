//! PodGroups in `berth.v1.Scheduler`'s DryRun and Simulate (GenericWorkload):
//! the request's PodGroup and pods read and checked, the group's answer
//! put in proto form.

use std::sync::Arc;

use berth_proto::v1 as pb;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::ApiError;
use super::convert::{object, pod_from_json_with_priority};
use crate::cache::group_key_of;
use crate::model::decode::{check_bounds, decode_strict};
use crate::model::{GroupKey, PodGroupInfo, PodInfo, PodRef};
use crate::scheduler::{GroupDryRunReport, PodIdentity, Scheduler};

/// Why a PodGroup in a request is refused while the gate is off.
pub const GATE_OFF: &str =
    "PodGroups are scheduled as groups only with --feature-gates=GenericWorkload=true";

fn at(field: &str, e: crate::model::InvalidObject) -> ApiError {
    if e.path.is_empty() {
        ApiError::InvalidArgument(format!("{field}: {}", e.message))
    } else {
        ApiError::InvalidArgument(format!("{field}.{}: {}", e.path, e.message))
    }
}

/// A request's PodGroup, admitted as the API server admits one on create
/// (`disruptionMode` defaulted, validated), in namespace `default` when it
/// names none, with a generated UID when it has none.
pub fn pod_group_from_json(
    field: &str,
    s: Option<&prost_types::Struct>,
) -> Result<Arc<PodGroupInfo>, ApiError> {
    let value = object(field, s)?;
    match value.get("kind") {
        None => {}
        Some(serde_json::Value::String(k)) if k == "PodGroup" => {}
        Some(k) => {
            return Err(ApiError::InvalidArgument(format!(
                "{field}.kind: expected \"PodGroup\", got {k}"
            )));
        }
    }
    check_bounds(&value).map_err(|e| at(field, e))?;
    let mut pg: PodGroup = decode_strict(value).map_err(|e| at(field, e))?;
    if pg.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::InvalidArgument(format!(
            "{field}.metadata.name: Required value"
        )));
    }
    if pg.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pg.metadata.namespace = Some("default".into());
    }
    if pg.metadata.uid.is_none() {
        let name = pg.metadata.name.as_deref().unwrap_or("");
        pg.metadata.uid = Some(format!("dry-run-podgroup-{name}"));
    }
    crate::model::pod_group::admit_pod_group(&mut pg).map_err(|e| at(field, e))?;
    PodGroupInfo::new(Arc::new(pg))
        .map(Arc::new)
        .map_err(|e| at(field, e))
}

/// The request's pods of `group`, each checked to name it.
pub fn group_pods(
    field: &str,
    group: &GroupKey,
    pods: &[prost_types::Struct],
    admit: impl Fn(
        &mut k8s_openapi::api::core::v1::Pod,
    ) -> Result<(), crate::model::priority::PriorityRefused>,
) -> Result<Vec<PodRef>, ApiError> {
    if pods.is_empty() {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: Required value"
        )));
    }
    if pods.len() > super::convert::MAX_SIMULATED_PODS {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: Too many: {}: at most {} pods",
            pods.len(),
            super::convert::MAX_SIMULATED_PODS
        )));
    }
    pods.iter()
        .enumerate()
        .map(|(i, s)| {
            let f = format!("{field}[{i}]");
            let pod = pod_from_json_with_priority(&f, object(&f, Some(s))?, "dry-run", &admit)?;
            check_member(&f, group, &pod)?;
            Ok(Arc::new(pod))
        })
        .collect()
}

fn check_member(field: &str, group: &GroupKey, pod: &PodInfo) -> Result<(), ApiError> {
    match group_key_of(pod) {
        Some(k) if k == *group => Ok(()),
        Some(k) => Err(ApiError::InvalidArgument(format!(
            "{field}.spec.schedulingGroup.podGroupName: Invalid value: \"{}/{}\": must be the pod_group {}/{}",
            k.namespace, k.name, group.namespace, group.name
        ))),
        None => Err(ApiError::InvalidArgument(format!(
            "{field}.spec.schedulingGroup.podGroupName: Required value: must name the pod_group {}/{}",
            group.namespace, group.name
        ))),
    }
}

/// The group's pods already assumed or bound, as the scheduler knows them.
pub fn scheduled_members(scheduler: &Scheduler, key: &GroupKey) -> Vec<PodRef> {
    scheduler
        .pod_group_members(key)
        .map(|m| m.scheduled)
        .unwrap_or_default()
}

/// The proto form of a group's dry run.
pub fn group_dry_run_response(r: &GroupDryRunReport) -> pb::DryRunResponse {
    let group = pb::PodGroupDryRun {
        namespace: r.group.key.namespace.to_string(),
        name: r.group.key.name.to_string(),
        fits: r.fits,
        code: r.code.as_str().to_string(),
        message: r.message.clone(),
        pods: r
            .pods
            .iter()
            .map(|p| pb::PodGroupPodResult {
                namespace: p.pod.namespace.to_string(),
                name: p.pod.name.to_string(),
                node: p.node.as_deref().unwrap_or("").to_string(),
                placed: p.placed,
                message: p.message.clone(),
                rejections: p
                    .rejections
                    .iter()
                    .map(|(node, s)| pb::NodeRejection {
                        node: node.to_string(),
                        plugin: s.plugin().unwrap_or("").to_string(),
                        code: s.code().as_str().to_string(),
                        reasons: s.reasons().iter().map(|r| r.to_string()).collect(),
                    })
                    .collect(),
            })
            .collect(),
        scheduled_pods: r.scheduled as u32,
        preemption: r.preemption.as_ref().map(|p| pb::PodGroupPreemption {
            found: p.found,
            victims: p
                .victims
                .iter()
                .map(|v| {
                    let id = PodIdentity::from(&**v);
                    pb::PodReference {
                        namespace: id.namespace.to_string(),
                        name: id.name.to_string(),
                        uid: id.uid.to_string(),
                        priority: id.priority,
                    }
                })
                .collect(),
            message: p.message.clone(),
        }),
        min_count: if r.group.policy.is_gang() {
            r.group.policy.min_count()
        } else {
            0
        },
        pre_enqueue: r.pre_enqueue.as_ref().map(pre_enqueue_result),
    };
    let message = if r.fits {
        format!(
            "pod group {}/{} fits: {} of {} pods placed",
            r.group.key.namespace,
            r.group.key.name,
            r.pods.iter().filter(|p| p.node.is_some()).count(),
            r.pods.len()
        )
    } else {
        r.message.clone()
    };
    pb::DryRunResponse {
        profile: r.profile.to_string(),
        message,
        pod_group: Some(group),
        ..Default::default()
    }
}

fn pre_enqueue_result(s: &crate::framework::Status) -> pb::PluginResult {
    pb::PluginResult {
        plugin: s.plugin().unwrap_or("").to_string(),
        code: s.code().as_str().to_string(),
        reasons: s.reasons().iter().map(|r| r.to_string()).collect(),
        node_names: Vec::new(),
    }
}

/// The dry run of `pod`, which names the PodGroup `key` the scheduler has
/// not seen: it waits for it, as GangScheduling's PreEnqueue holds it (and
/// as the queue lists it), whatever nodes would take it alone.
pub fn group_missing_response(profile: &str, key: &GroupKey, pod: &PodInfo) -> pb::DryRunResponse {
    let message = crate::model::pod_group::waiting_for_pod_group(&key.name);
    let s = crate::framework::Status::unresolvable(message.clone())
        .with_plugin(crate::plugins::names::GANG_SCHEDULING);
    pb::DryRunResponse {
        profile: profile.to_string(),
        message: message.clone(),
        pod_group: Some(pb::PodGroupDryRun {
            namespace: key.namespace.to_string(),
            name: key.name.to_string(),
            fits: false,
            code: s.code().as_str().to_string(),
            message: message.clone(),
            pods: vec![pb::PodGroupPodResult {
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                message,
                ..Default::default()
            }],
            pre_enqueue: Some(pre_enqueue_result(&s)),
            ..Default::default()
        }),
        ..Default::default()
    }
}
