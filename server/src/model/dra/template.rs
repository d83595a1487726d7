//! The claims the resourceclaim controller makes from a pod's
//! `resourceClaimTemplateName` entries, as berth's embedded cluster makes
//! them in its place.

use k8s_openapi::api::resource::v1 as api;

/// The annotation the resourceclaim controller puts on claims it makes
/// from a pod's template: the pod's name for the claim.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// The claim the resourceclaim controller makes for a pod's
/// `resourceClaimTemplateName` entry `pod_claim`: named `name` (from
/// `generateName: <pod>-<podClaim>-`), annotated with the pod claim's name,
/// controlled by the pod, with the template's labels, annotations and spec.
pub fn claim_from_template(
    pod: &k8s_openapi::api::core::v1::Pod,
    pod_claim: &str,
    template: &api::ResourceClaimTemplate,
    name: String,
) -> api::ResourceClaim {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let tspec = template.spec.clone().unwrap_or_default();
    let tmeta = tspec.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(POD_CLAIM_NAME_ANNOTATION.into(), pod_claim.into());
    api::ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name),
            generate_name: Some(format!("{pod_name}-{pod_claim}-")),
            namespace: pod.metadata.namespace.clone(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name,
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: tspec.spec,
        status: Some(api::ResourceClaimStatus::default()),
    }
}
