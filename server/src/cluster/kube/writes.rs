//! The scheduler's writes, sent as upstream kube-scheduler v1.36 sends
//! them (`tests/k8s-api/` has the recordings):
//!
//! * bind: `POST pods/{name}/binding` with a `v1 Binding` carrying the
//!   pod's UID (201 on success; 409 when already bound or replaced, 404
//!   when gone: the pod is then read again so the mirror, and with it the
//!   scheduler's requeue decision, sees why, and nothing is retried
//!   blindly). A binding whose answer was lost (no answer, or a 5xx) may
//!   have been stored: the pod is read until the API server answers (or
//!   the watch tells), and only a pod still unbound fails the binding, so
//!   a bound pod is never marked unschedulable;
//! * a failed attempt: ONE strategic merge patch of the status
//!   subresource with the `PodScheduled=False` condition (its
//!   `observedGeneration` the pod's `metadata.generation`, as v1.36
//!   writes it) and, when it changes, `nominatedNodeName`, with
//!   `$setElementOrder/conditions` when the pod has conditions already, as
//!   client-go's two-way strategic merge patch makes it;
//! * `status.nominatedNodeName` alone (before a long PreBind, or cleared
//!   for a lower-priority pod): a strategic merge patch of it;
//! * preemption victims: a status patch adding the `DisruptionTarget`
//!   condition, then `DELETE` with a UID precondition; a victim already
//!   gone counts as evicted, one already terminating is left alone;
//! * other objects (volume binding, DRA claims): `PUT` with the
//!   resourceVersion read (409 Conflict when stale), `PUT` of a claim's
//!   `status` subresource, a strategic merge patch of it that removes one
//!   `reservedFor` entry (Unreserve); a claim for extended resources is
//!   `POST`ed (and `DELETE`d when its pod is not bound), and the pod's
//!   `status.extendedResourceClaimStatus` set by a strategic merge patch.
//!
//! Every failed write is logged with the object, the verb and the status
//! code.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::{KubeCluster, access, refusals};
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::{ClusterChange, ClusterSource, PodScheduledCondition, writes};
use crate::framework::{ClusterClient, ClusterError, EventRecorder, PodEvent};
use crate::model::PodInfo;

const JSON: &str = "application/json";
const STRATEGIC_MERGE: &str = "application/strategic-merge-patch+json";

/// The API error as one of the errors the scheduler tells apart.
pub(super) fn cluster_error(e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) if s.code == 404 => ClusterError::NotFound(s.message),
        kube::Error::Api(s) if s.code == 409 => ClusterError::Conflict(s.message),
        kube::Error::Api(s) => ClusterError::Other(format!("{} ({})", s.message, s.code)),
        other => ClusterError::Other(other.to_string()),
    }
}

fn pod_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{name}")
}

/// Where an object of `kind` lives in the API.
fn object_path(kind: ObjectKind, namespace: &str, name: &str) -> String {
    let (api_version, _) = kind.type_meta();
    let group = if kind.group().is_empty() {
        format!("/api/{api_version}")
    } else {
        format!("/apis/{api_version}")
    };
    let plural = kind.plural();
    if kind.namespaced() {
        format!("{group}/namespaces/{namespace}/{plural}/{name}")
    } else {
        format!("{group}/{plural}/{name}")
    }
}

/// A `v1 Binding`, written straight from the pod's fields.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Binding<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: BindingMeta<'a>,
    target: BindingTarget<'a>,
}

#[derive(serde::Serialize)]
struct BindingMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct BindingTarget<'a> {
    api_version: &'static str,
    kind: &'static str,
    name: &'a str,
}

/// The first pause before asking again whether a binding was stored.
const SETTLE_FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(200);
/// The longest pause between those questions.
const SETTLE_MAX_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a failed request may have been carried out all the same: no
/// answer came (the connection broke, the request timed out), or the
/// server answered 5xx (its own timeout: the write may still land). A 4xx
/// answer is a refusal: nothing was stored.
fn outcome_unknown(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500,
        _ => true,
    }
}

/// What a binding whose answer was lost came to, the pod being on `on`.
fn settled(
    pod: &PodInfo,
    node: &str,
    on: Option<&str>,
    lost: ClusterError,
    asked: u32,
) -> Result<(), ClusterError> {
    match on {
        Some(n) if n == node => {
            tracing::info!(pod = %pod.key(), node, asked, "the binding was stored though its answer was lost ({lost}): the pod is bound to {node}");
            Ok(())
        }
        Some(other) => Err(ClusterError::Conflict(format!(
            "pod {} is already assigned to node {other:?}",
            pod.key()
        ))),
        None => Err(lost),
    }
}

/// The RBAC verb of a write's method.
fn rbac_verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    }
}

/// The (group, resource with subresource) an API path names:
/// `/api/v1/namespaces/ns/pods/p/binding` is ("", "pods/binding").
fn resource_of(path: &str) -> (&str, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", g, _, rest @ ..] => (*g, rest),
        _ => return ("", String::new()),
    };
    let rest = match rest {
        ["namespaces", _, r @ ..] if !r.is_empty() => r,
        r => r,
    };
    let resource = match rest {
        [plural, _, sub, ..] => format!("{plural}/{sub}"),
        [plural, ..] => plural.to_string(),
        [] => String::new(),
    };
    (group, resource)
}

/// The API's status code in an error, for logs (0: no answer).
fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

/// The status patch that adds or replaces `condition` among the pod's
/// `existing` condition types, as client-go's two-way strategic merge
/// patch of the status writes it: the element order is given when the pod
/// had conditions before.
fn conditions_patch(existing: &[String], condition: Value) -> serde_json::Map<String, Value> {
    let mut status = serde_json::Map::new();
    if !existing.is_empty() {
        let kind = condition["type"].as_str().unwrap_or_default().to_string();
        let mut order: Vec<Value> = existing.iter().map(|t| json!({"type": t})).collect();
        if !existing.contains(&kind) {
            order.push(json!({"type": kind}));
        }
        status.insert("$setElementOrder/conditions".into(), Value::Array(order));
    }
    status.insert("conditions".into(), json!([condition]));
    status
}

/// The strategic merge patch kube-scheduler sends to a PodGroup's
/// `status` subresource to set `new` (client-go's two-way patch of the
/// status before and after): the element order when the group had
/// conditions, and of the condition its `type` with the fields that
/// changed (all of them when it is new; `null` for one no longer set).
fn pod_group_status_patch(
    old: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    new: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
) -> Value {
    let types: Vec<String> = old.iter().map(|c| c.type_.clone()).collect();
    let new_json = serde_json::to_value(new).unwrap_or_default();
    let element = match old.iter().find(|c| c.type_ == new.type_) {
        None => new_json,
        Some(before) => {
            let before = serde_json::to_value(before).unwrap_or_default();
            let mut diff = serde_json::Map::new();
            diff.insert("type".into(), json!(new.type_));
            let (Value::Object(b), Value::Object(a)) = (&before, &new_json) else {
                return json!({"status": {"conditions": [new_json]}});
            };
            for (k, v) in a {
                if b.get(k) != Some(v) {
                    diff.insert(k.clone(), v.clone());
                }
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    diff.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(diff)
        }
    };
    json!({"status": conditions_patch(&types, element)})
}

impl KubeCluster {
    /// Writes `obj` with `method` to `path` and returns the object as the
    /// API server stored it.
    async fn write_object(
        &self,
        method: http::Method,
        path: &str,
        obj: &KubeObject,
        subject: &str,
    ) -> Result<KubeObject, ClusterError> {
        let stored = self
            .send::<_, Value>(method, path, JSON, &obj.to_json(), subject)
            .await?;
        KubeObject::from_json(obj.kind(), stored).map_err(|e| ClusterError::Other(e.to_string()))
    }

    /// Sends one request; a failure is logged with `subject` (the object
    /// written), the verb and the status code.
    pub(super) async fn send<B: serde::Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: &B,
        subject: &str,
    ) -> Result<R, ClusterError> {
        self.send_raw(method, path, content_type, body, subject)
            .await
            .map_err(cluster_error)
    }

    /// [`Self::send`], with the API's error as it came.
    async fn send_raw<B: serde::Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: &B,
        subject: &str,
    ) -> Result<R, kube::Error> {
        let body = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
        let req = http::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, JSON)
            .body(body)
            .map_err(kube::Error::HttpError)?;
        let result = self
            .client
            .request::<R>(req)
            .await
            .inspect_err(|e| self.write_failed(&method, path, subject, e));
        if result.is_ok() {
            self.write_allowed(&method, path);
        }
        result
    }

    /// A write went through: the end of any refusal of it. A claim's status
    /// written is its allocation or reservation, which DRA authorizes on
    /// `resourceclaims/binding` too.
    fn write_allowed(&self, method: &http::Method, path: &str) {
        let reporter = refusals::global();
        if !reporter.any() {
            return;
        }
        let (group, resource) = resource_of(path);
        let verb = rbac_verb(method);
        reporter.allowed(&refusals::Key::new(verb, group, &resource));
        if group == "resource.k8s.io" && resource == "resourceclaims/status" {
            reporter.allowed(&refusals::Key::new(verb, group, "resourceclaims/binding"));
        }
    }

    /// The permission a failed write lacked: a 403, or a 422 naming the
    /// permission a field needs (DRA's claim status); as the key of its
    /// refusals and the API server's message.
    fn refusal_of(
        method: &http::Method,
        path: &str,
        e: &kube::Error,
    ) -> Option<(refusals::Key, String)> {
        let kube::Error::Api(s) = e else {
            return None;
        };
        let (group, resource) = resource_of(path);
        match s.code {
            403 => Some((
                refusals::Key::new(rbac_verb(method), group, &resource),
                s.message.clone(),
            )),
            422 => {
                let (resource, verb) = refusals::permission_named(&s.message)?;
                Some((
                    refusals::Key::new(&verb, group, &resource),
                    s.message.clone(),
                ))
            }
            _ => None,
        }
    }

    /// Logs a failed write as a person reads it: one short line with the
    /// object, verb, code and the server's message once; a refusal (403,
    /// or a 422 naming the permission a field needs) once per verb and
    /// resource when it has lasted the grace of [`refusals`], naming the
    /// rule berthd needs (the attempts are the scheduler's retries, with
    /// backoff, at DEBUG); no answer or a 5xx at DEBUG (the API server's
    /// outage reporter speaks for those).
    fn write_failed(&self, method: &http::Method, path: &str, subject: &str, e: &kube::Error) {
        let code = status_code(e);
        let message = super::client::error_text(e);
        if outcome_unknown(e) {
            tracing::debug!(object = subject, verb = %method, path, code, error = %message, "API write failed");
            return;
        }
        if let Some((key, api_message)) = Self::refusal_of(method, path, e) {
            let rule = || {
                access::rule_for(&key.group, &key.resource, None)
                    .map_or_else(|| "the rule".to_string(), |r| r.to_string())
            };
            match refusals::global().refused(&key, rule, &api_message) {
                refusals::Verdict::Report(lasted) => {
                    let (verb, resource) = (&key.verb, &key.resource);
                    let rule = rule();
                    tracing::error!(
                        object = subject, verb = %verb, code, resource = %resource, %rule,
                        "forbidden to {verb} {resource} ({subject}): its ClusterRole must grant {rule}; refused for {}, the writes that need it fail and are retried with backoff (a summary follows every {} while it lasts); the API server says: {message}",
                        crate::outage::human(lasted),
                        crate::outage::human(crate::outage::summary_every())
                    );
                }
                _ => {
                    tracing::debug!(object = subject, verb = %key.verb, code, resource = %key.resource, "forbidden: {message}")
                }
            }
            return;
        }
        tracing::warn!(object = subject, verb = %method, code, "API write failed: {code} {method} {subject}: {message}");
    }

    /// A binding whose answer was lost (see [`outcome_unknown`]) may have
    /// been stored: asks the API server where the pod is before the
    /// scheduler writes anything about it, with a GET of the pod retried
    /// with backoff while the server cannot answer (or the watch, if it
    /// tells first). Bound to `node`: the binding happened. Bound
    /// elsewhere: a conflict. Unbound: `lost`, the binding's own error.
    /// Gone or replaced: not found.
    async fn settle_binding(
        &self,
        pod: &PodInfo,
        node: &str,
        lost: ClusterError,
    ) -> Result<(), ClusterError> {
        let mut delay = SETTLE_FIRST_RETRY;
        let mut asked = 0u32;
        loop {
            // The watch may have told already.
            let mirrored = self
                .get_pod_inner(&pod.namespace, &pod.name)
                .filter(|p| p.metadata.uid.as_deref() == Some(&*pod.uid))
                .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()));
            if let Some(on) = mirrored {
                return settled(pod, node, Some(&on), lost, asked);
            }
            let req = http::Request::get(pod_path(&pod.namespace, &pod.name))
                .header(http::header::ACCEPT, JSON)
                .body(Vec::new())
                .map_err(|e| ClusterError::Other(e.to_string()))?;
            asked += 1;
            match self.client.request::<super::SlimPod>(req).await {
                Ok(p) => {
                    let p = p.0;
                    let uid = p.metadata.uid.clone();
                    let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, Some(p));
                    if uid.as_deref() != Some(&*pod.uid) {
                        return Err(ClusterError::NotFound(format!(
                            "pod {} was replaced while its binding's answer was lost",
                            pod.key()
                        )));
                    }
                    return settled(pod, node, on.as_deref(), lost, asked);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, None);
                    return Err(ClusterError::NotFound(s.message));
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.key(), node, error = %super::client::error_text(&e), retry_in = ?delay, "cannot tell yet whether the binding was stored; asking again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(SETTLE_MAX_RETRY);
                }
            }
        }
    }

    /// Reads the pod again after a write the API refused, so the mirror
    /// knows it is gone or bound before the scheduler decides whether to
    /// requeue it.
    async fn reread_pod(&self, pod: &PodInfo) {
        let req = http::Request::get(pod_path(&pod.namespace, &pod.name))
            .header(http::header::ACCEPT, JSON)
            .body(Vec::new());
        let Ok(req) = req else { return };
        match self.client.request::<super::SlimPod>(req).await {
            Ok(p) => self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, Some(p.0)),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.refresh_pod(&pod.namespace, &pod.name, &pod.uid, None)
            }
            Err(e) => {
                tracing::debug!(pod = %pod.key(), error = %e, "re-reading the pod failed")
            }
        }
    }

    /// The pod's condition types in order, and the `PodScheduled=False`
    /// condition with its transition time kept when it was already False,
    /// as the mirror knows the pod.
    fn condition_patch(
        &self,
        pod: &PodInfo,
        c: &PodScheduledCondition,
    ) -> serde_json::Map<String, Value> {
        let known = self.get_pod_inner(&pod.namespace, &pod.name);
        let conditions = known
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let generation = known
            .as_ref()
            .and_then(|p| p.metadata.generation)
            .or(pod.generation);
        let condition = writes::pod_scheduled_false(conditions, generation, c);
        let types: Vec<String> = conditions.iter().map(|c| c.type_.clone()).collect();
        conditions_patch(&types, writes::condition_json(&condition))
    }
}

#[async_trait]
impl ClusterClient for KubeCluster {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ClusterError> {
        let body = Binding {
            api_version: "v1",
            kind: "Binding",
            metadata: BindingMeta {
                name: &pod.name,
                namespace: &pod.namespace,
                uid: &pod.uid,
            },
            target: BindingTarget {
                api_version: "v1",
                kind: "Node",
                name: node,
            },
        };
        let path = format!("{}/binding", pod_path(&pod.namespace, &pod.name));
        match self
            .send_raw::<_, IgnoredAny>(http::Method::POST, &path, JSON, &body, &pod.key())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if outcome_unknown(&e) => self.settle_binding(pod, node, cluster_error(e)).await,
            Err(e) => match cluster_error(e) {
                e @ (ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                    self.reread_pod(pod).await;
                    Err(e)
                }
                e => Err(e),
            },
        }
    }

    async fn delete_pod(&self, pod: &PodInfo, message: &str) -> Result<(), ClusterError> {
        let known = self.get_pod_inner(&pod.namespace, &pod.name);
        let conditions = known
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let generation = known
            .as_ref()
            .and_then(|p| p.metadata.generation)
            .or(pod.generation);
        let terminating = known
            .as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        let Some(condition) =
            writes::disruption_target(conditions, generation, terminating, message)
        else {
            // Its deletion has started: nothing more to send, as upstream.
            return Ok(());
        };
        let existing: Vec<String> = conditions.iter().map(|c| c.type_.clone()).collect();
        let patch = json!({
            "status": conditions_patch(&existing, writes::condition_json(&condition))
        });
        let path = pod_path(&pod.namespace, &pod.name);
        let key = pod.key();
        match self
            .send::<_, IgnoredAny>(
                http::Method::PATCH,
                &format!("{path}/status"),
                STRATEGIC_MERGE,
                &patch,
                &key,
            )
            .await
        {
            // Already gone: evicted as far as the preemptor is concerned.
            Err(ClusterError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let options = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": &*pod.uid},
        });
        match self
            .send::<_, IgnoredAny>(http::Method::DELETE, &path, JSON, &options, &key)
            .await
        {
            Ok(_) | Err(ClusterError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn update_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, name) = obj.key();
        let path = object_path(kind, &namespace, &name);
        self.write_object(http::Method::PUT, &path, &obj, &subject(&namespace, &name))
            .await
    }

    async fn set_nominated_node_name(
        &self,
        pod: &PodInfo,
        node: Option<&str>,
    ) -> Result<(), ClusterError> {
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        let patch = json!({"status": {"nominatedNodeName": node}});
        self.send::<_, IgnoredAny>(
            http::Method::PATCH,
            &path,
            STRATEGIC_MERGE,
            &patch,
            &pod.key(),
        )
        .await
        .map(|_| ())
    }

    async fn update_object_status(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, name) = obj.key();
        let path = format!("{}/status", object_path(kind, &namespace, &name));
        self.write_object(http::Method::PUT, &path, &obj, &subject(&namespace, &name))
            .await
    }

    async fn get_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<KubeObject, ClusterError> {
        let req = http::Request::get(object_path(kind, namespace, name))
            .header(http::header::ACCEPT, JSON)
            .body(Vec::new())
            .map_err(|e| ClusterError::Other(e.to_string()))?;
        let got = self
            .client
            .request::<Value>(req)
            .await
            .map_err(cluster_error)?;
        KubeObject::from_json(kind, got).map_err(|e| ClusterError::Other(e.to_string()))
    }

    async fn remove_claim_reservation(
        &self,
        namespace: &str,
        name: &str,
        claim_uid: &str,
        consumer_uid: &str,
    ) -> Result<(), ClusterError> {
        let path = format!(
            "{}/status",
            object_path(ObjectKind::ResourceClaim, namespace, name)
        );
        let patch = json!({
            "metadata": {"uid": claim_uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": consumer_uid}]},
        });
        self.send::<_, IgnoredAny>(
            http::Method::PATCH,
            &path,
            STRATEGIC_MERGE,
            &patch,
            &subject(namespace, name),
        )
        .await
        .map(|_| ())
    }

    async fn create_object(&self, obj: KubeObject) -> Result<KubeObject, ClusterError> {
        let (kind, namespace, _) = obj.key();
        let path = object_path(kind, &namespace, "");
        let generate = obj.metadata().generate_name.clone().unwrap_or_default();
        self.write_object(
            http::Method::POST,
            path.trim_end_matches('/'),
            &obj,
            &subject(&namespace, &generate),
        )
        .await
    }

    async fn delete_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ClusterError> {
        let path = object_path(kind, namespace, name);
        self.send::<_, IgnoredAny>(
            http::Method::DELETE,
            &path,
            JSON,
            &json!({}),
            &subject(namespace, name),
        )
        .await
        .map(|_| ())
    }

    async fn set_pod_group_condition(
        &self,
        group: &crate::model::PodGroupInfo,
        condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    ) -> Result<(), ClusterError> {
        let old = group
            .object
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let patch = pod_group_status_patch(old, &condition);
        let path = format!(
            "{}/status",
            object_path(ObjectKind::PodGroup, &group.key.namespace, &group.key.name)
        );
        self.send::<_, IgnoredAny>(
            http::Method::PATCH,
            &path,
            STRATEGIC_MERGE,
            &patch,
            &group.key.to_string(),
        )
        .await
        .map(|_| ())
    }

    async fn set_extended_resource_claim_status(
        &self,
        pod: &PodInfo,
        status: k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), ClusterError> {
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        let patch = json!({"status": {"extendedResourceClaimStatus": status}});
        self.send::<_, IgnoredAny>(
            http::Method::PATCH,
            &path,
            STRATEGIC_MERGE,
            &patch,
            &pod.key(),
        )
        .await
        .map(|_| ())
    }
}

impl EventRecorder for KubeCluster {
    fn record(&self, event: PodEvent) {
        self.events.record(event);
    }
}

#[async_trait]
impl ClusterSource for KubeCluster {
    fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<ClusterChange> {
        self.subscribe_inner()
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.get_pod_inner(namespace, name)
    }

    async fn set_unschedulable(
        &self,
        pod: &PodInfo,
        condition: PodScheduledCondition,
        nominated_node: Option<Option<String>>,
    ) -> Result<(), ClusterError> {
        // One patch with the condition and the nomination, as upstream
        // writes a preemptor's before its victims go.
        let mut status = self.condition_patch(pod, &condition);
        if let Some(node) = nominated_node {
            status.insert("nominatedNodeName".into(), json!(node));
        }
        let path = format!("{}/status", pod_path(&pod.namespace, &pod.name));
        self.send::<_, IgnoredAny>(
            http::Method::PATCH,
            &path,
            STRATEGIC_MERGE,
            &json!({ "status": status }),
            &pod.key(),
        )
        .await
        .map(|_| ())
    }

    fn kind(&self) -> &'static str {
        "kube"
    }

    fn refusal_reported(&self, error: &str) -> bool {
        // The API server's words for a refusal, in a 403 and in a 422
        // naming a permission alike.
        refusals::global().any() && error.contains(" is forbidden: User ")
    }

    fn unreachable(&self) -> bool {
        // Bindings under way when it came back fail just after (they
        // asked until it answered): theirs too.
        self.outage
            .as_ref()
            .is_some_and(|o| o.down_or_back_within(SETTLE_MAX_RETRY * 2))
    }
}

/// How a failed write names its object: `namespace/name`, or the name of a
/// cluster-scoped one.
fn subject(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_rbac_resource() {
        assert_eq!(
            resource_of("/api/v1/namespaces/ns/pods/p/binding"),
            ("", "pods/binding".to_string())
        );
        assert_eq!(
            resource_of("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status"),
            ("resource.k8s.io", "resourceclaims/status".to_string())
        );
        assert_eq!(
            resource_of("/api/v1/persistentvolumes/pv1"),
            ("", "persistentvolumes".to_string())
        );
        assert_eq!(
            resource_of("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"),
            ("resource.k8s.io", "resourceclaims".to_string())
        );
    }

    #[test]
    fn objects_live_where_the_api_serves_them() {
        assert_eq!(
            object_path(ObjectKind::PersistentVolume, "", "pv1"),
            "/api/v1/persistentvolumes/pv1"
        );
        assert_eq!(
            object_path(ObjectKind::PersistentVolumeClaim, "ns", "c"),
            "/api/v1/namespaces/ns/persistentvolumeclaims/c"
        );
        assert_eq!(
            object_path(ObjectKind::CsiNode, "", "n"),
            "/apis/storage.k8s.io/v1/csinodes/n"
        );
    }

    #[test]
    fn condition_patches_give_the_order_only_when_the_pod_had_conditions() {
        let c = json!({"type": "PodScheduled", "status": "False"});
        assert_eq!(
            Value::Object(conditions_patch(&[], c.clone())),
            json!({"conditions": [c]}),
            "a pod without conditions: the condition alone, as recorded"
        );
        let d = json!({"type": "DisruptionTarget", "status": "True"});
        assert_eq!(
            Value::Object(conditions_patch(&["PodScheduled".into()], d.clone())),
            json!({
                "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "DisruptionTarget"}],
                "conditions": [d],
            }),
        );
        // Replacing a condition keeps the order it had.
        let types = ["PodScheduled".to_string(), "Ready".to_string()];
        assert_eq!(
            conditions_patch(&types, c.clone())["$setElementOrder/conditions"],
            json!([{"type": "PodScheduled"}, {"type": "Ready"}]),
        );
    }

    #[test]
    fn pod_group_status_patches_are_two_way_diffs() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let cond = |status: &str, reason: &str, message: &str, generation: Option<i64>| {
            serde_json::from_value::<Condition>(json!({
                "type": "PodGroupInitiallyScheduled", "status": status, "reason": reason,
                "message": message, "lastTransitionTime": "2026-08-26T10:00:00Z",
                "observedGeneration": generation,
            }))
            .unwrap()
        };
        // An empty status: the whole condition, no order (the recording's
        // body, with no observedGeneration when the group has none).
        let t = cond("True", "Scheduled", "", None);
        assert_eq!(
            pod_group_status_patch(&[], &t),
            json!({"status": {"conditions": [{"type": "PodGroupInitiallyScheduled",
                "status": "True", "reason": "Scheduled", "message": "",
                "lastTransitionTime": "2026-08-26T10:00:00Z"}]}})
        );
        // A change of message only: the type and the message, in order.
        let before = cond("False", "Unschedulable", "old", Some(2));
        let after = cond("False", "Unschedulable", "new", Some(2));
        assert_eq!(
            pod_group_status_patch(std::slice::from_ref(&before), &after),
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "PodGroupInitiallyScheduled"}],
                "conditions": [{"type": "PodGroupInitiallyScheduled", "message": "new"}]}})
        );
        assert_eq!(
            object_path(ObjectKind::PodGroup, "ml", "train"),
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train"
        );
    }

    #[test]
    fn api_statuses_map_to_the_errors_the_scheduler_handles() {
        let status = |code: u16, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.into(),
                ..Default::default()
            }))
        };
        assert_eq!(
            cluster_error(status(404, "pods \"missing\" not found")),
            ClusterError::NotFound("pods \"missing\" not found".into())
        );
        assert!(matches!(
            cluster_error(status(409, "already assigned")),
            ClusterError::Conflict(_)
        ));
        assert!(matches!(
            cluster_error(status(500, "boom")),
            ClusterError::Other(_)
        ));
    }
}
