//! `berth.v1.Cluster`: the cluster's objects. Over the embedded cluster it
//! reads and writes; over a real cluster (kube mode) it reads and watches
//! what berth's watchers have seen, and refuses writes: the real cluster is
//! changed through its Kubernetes API.

use std::pin::Pin;
use std::sync::Arc;

use berth_proto::json::to_struct;
use berth_proto::v1 as pb;
use berth_proto::v1::cluster_server::Cluster;
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::paging::{Page, page};
use super::{ApiError, Closing};
use crate::cache::{KubeObject, ObjectKind};
use crate::cluster::embedded::{
    Applied, ApplyError, EmbeddedCluster, Kind, parse_objects, supported_kinds,
};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{ClusterChange, ClusterSource, WatchEvent};
use k8s_openapi::api::core::v1::{Node, Pod};

/// The cluster the service shows.
#[derive(Debug, Clone)]
pub enum ClusterBackend {
    /// The embedded store: readable and writable.
    Embedded(Arc<EmbeddedCluster>),
    /// A real cluster: readable; writes go through its API server.
    Kube(Arc<KubeCluster>),
}

impl From<Arc<EmbeddedCluster>> for ClusterBackend {
    fn from(c: Arc<EmbeddedCluster>) -> Self {
        Self::Embedded(c)
    }
}

impl From<Arc<KubeCluster>> for ClusterBackend {
    fn from(c: Arc<KubeCluster>) -> Self {
        Self::Kube(c)
    }
}

/// The answer to writes in kube mode.
const KUBE_READ_ONLY: &str = "berthd runs against a Kubernetes cluster (--kubeconfig/--in-cluster): its objects are changed through the Kubernetes API (e.g. kubectl), not through berth.v1.Cluster";

impl ClusterBackend {
    fn embedded(&self) -> Result<&Arc<EmbeddedCluster>, ApiError> {
        match self {
            Self::Embedded(c) => Ok(c),
            Self::Kube(_) => Err(ApiError::FailedPrecondition(KUBE_READ_ONLY.into())),
        }
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        match self {
            Self::Embedded(c) => c.nodes(),
            Self::Kube(c) => c.nodes(),
        }
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        match self {
            Self::Embedded(c) => c.node(name),
            Self::Kube(c) => c.node(name),
        }
    }

    fn pods(&self) -> Vec<Arc<Pod>> {
        match self {
            Self::Embedded(c) => c.pods(),
            Self::Kube(c) => c.pods(),
        }
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        match self {
            Self::Embedded(c) => c.get_pod(namespace, name),
            Self::Kube(c) => c.get_pod(namespace, name),
        }
    }

    fn objects(&self, kind: ObjectKind) -> Vec<KubeObject> {
        match self {
            Self::Embedded(c) => c.objects(kind),
            Self::Kube(c) => c.objects(kind),
        }
    }

    fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<KubeObject> {
        match self {
            Self::Embedded(c) => c.object(kind, namespace, name),
            Self::Kube(c) => c.object(kind, namespace, name),
        }
    }

    fn resource_version(&self) -> String {
        match self {
            Self::Embedded(c) => c.resource_version(),
            Self::Kube(_) => String::new(),
        }
    }

    fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<ClusterChange> {
        match self {
            Self::Embedded(c) => c.subscribe(),
            Self::Kube(c) => c.subscribe(),
        }
    }
}

/// The Cluster service.
#[derive(Debug, Clone)]
pub struct ClusterApi {
    cluster: ClusterBackend,
    closing: Closing,
}

impl ClusterApi {
    /// The service over `cluster`.
    pub fn new(cluster: impl Into<ClusterBackend>) -> Self {
        Self {
            cluster: cluster.into(),
            closing: Closing::never(),
        }
    }

    /// Ends watch streams when `closing` closes.
    pub fn closing_on(self, closing: Closing) -> Self {
        Self { closing, ..self }
    }
}

fn kind(s: &str) -> Result<Kind, ApiError> {
    Kind::parse(s).ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "kind: unsupported kind {s:?}: supported kinds: {}",
            supported_kinds()
        ))
    })
}

fn kind_name(k: Kind) -> String {
    match k {
        Kind::Node => "Node".into(),
        Kind::Pod => "Pod".into(),
        Kind::Object(o) => o.type_meta().1.into(),
    }
}

fn to_json<T: serde::Serialize>(obj: &T) -> prost_types::Struct {
    let v = serde_json::to_value(obj).unwrap_or_default();
    to_struct(&v).unwrap_or_default()
}

fn change_json(c: &ClusterChange) -> Option<(&'static str, Kind, serde_json::Value)> {
    fn ev<T>(e: &WatchEvent<T>) -> (&'static str, &T) {
        match e {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified { new, .. } => ("MODIFIED", new),
            WatchEvent::Deleted(o) => ("DELETED", o),
        }
    }
    match c {
        ClusterChange::Node(e) => {
            let (t, o) = ev(e);
            Some((t, Kind::Node, serde_json::to_value(&**o).ok()?))
        }
        ClusterChange::Pod(e) => {
            let (t, o) = ev(e);
            Some((t, Kind::Pod, serde_json::to_value(o).ok()?))
        }
        ClusterChange::PodInfo(e) => {
            let (t, o) = ev(e);
            Some((t, Kind::Pod, serde_json::to_value(&o.pod).ok()?))
        }
        ClusterChange::Object(e) => {
            let (t, o) = ev(e);
            Some((t, Kind::Object(o.kind()), o.to_json()))
        }
        ClusterChange::Synced => None,
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn apply(
        &self,
        req: Request<pb::ApplyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        let cluster = self.cluster.embedded()?;
        let req = req.into_inner();
        let mut objects: Vec<(String, serde_json::Value)> = Vec::with_capacity(req.objects.len());
        for (i, s) in req.objects.iter().enumerate() {
            let field = format!("objects[{i}]");
            let value = super::convert::object(&field, Some(s))?;
            objects.push((field, value));
        }
        if !req.yaml.is_empty() {
            let docs = parse_objects(&req.yaml, "yaml")
                .map_err(|e| ApiError::InvalidArgument(e.to_string()))?;
            objects.extend(docs.into_iter().map(|o| (o.origin, o.value)));
        }
        if objects.is_empty() {
            return Err(ApiError::InvalidArgument(
                "objects: Required value: no object given".into(),
            )
            .into());
        }
        // All or nothing: every object is admitted, and its namespace
        // found, before any is stored.
        let (origins, values): (Vec<String>, Vec<serde_json::Value>) = objects.into_iter().unzip();
        let applied = cluster.apply_all(values).map_err(|(i, e)| {
            let origin = &origins[i];
            // `objects[1]: spec.x: ...` or `yaml: document 2: spec.x: ...`,
            // which berthctl turns into the file and document.
            match e {
                ApplyError::NamespaceNotFound(_) => ApiError::NotFound(format!("{origin}: {e}")),
                other => ApiError::InvalidArgument(format!("{origin}: {other}")),
            }
        })?;
        let applied = applied
            .into_iter()
            .map(|(k, namespace, name, action)| pb::ObjectReference {
                kind: kind_name(k),
                namespace,
                name,
                action: match action {
                    Applied::Created => pb::ApplyAction::Created,
                    Applied::Configured => pb::ApplyAction::Configured,
                    Applied::Unchanged => pb::ApplyAction::Unchanged,
                } as i32,
            })
            .collect();
        Ok(Response::new(pb::ApplyResponse { applied }))
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let cluster = self.cluster.embedded()?;
        let req = req.into_inner();
        let k = kind(&req.kind)?;
        super::convert::namespace_arg(&req.namespace)?;
        if req.name.is_empty() {
            return Err(ApiError::InvalidArgument("name: Required value".into()).into());
        }
        if !cluster.delete(k, &req.namespace, &req.name) {
            return Err(ApiError::NotFound(format!(
                "{} {:?} not found",
                kind_name(k).to_lowercase(),
                req.name
            ))
            .into());
        }
        let namespace = match k {
            Kind::Node => String::new(),
            Kind::Object(o) if !o.namespaced() => String::new(),
            _ if req.namespace.is_empty() => "default".into(),
            _ => req.namespace,
        };
        Ok(Response::new(pb::DeleteResponse {
            deleted: Some(pb::ObjectReference {
                kind: kind_name(k),
                namespace,
                name: req.name,
                action: pb::ApplyAction::Unspecified as i32,
            }),
        }))
    }

    async fn list(
        &self,
        req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let req = req.into_inner();
        let k = kind(&req.kind)?;
        super::convert::namespace_arg(&req.namespace)?;
        let ns = req.namespace.as_str();
        let scope = format!("{}/{ns}", kind_name(k));
        // Sorted by key; only the page's objects are converted.
        let Page {
            items,
            next,
            remaining,
        } = match k {
            Kind::Node => {
                let mut nodes = self.cluster.nodes();
                sort_by_key(&mut nodes, |n| object_key(&n.metadata));
                page(
                    &nodes,
                    |n| object_key(&n.metadata),
                    |n| to_json(&**n),
                    req.limit,
                    &req.r#continue,
                    &scope,
                )?
            }
            Kind::Pod => {
                let mut pods = self.cluster.pods();
                if !ns.is_empty() {
                    pods.retain(|p| p.metadata.namespace.as_deref() == Some(ns));
                }
                sort_by_key(&mut pods, |p| object_key(&p.metadata));
                page(
                    &pods,
                    |p| object_key(&p.metadata),
                    |p| to_json(&**p),
                    req.limit,
                    &req.r#continue,
                    &scope,
                )?
            }
            Kind::Object(k) => {
                let mut objects = self.cluster.objects(k);
                if !ns.is_empty() && k.namespaced() {
                    objects.retain(|o| o.key().1 == ns);
                }
                sort_by_key(&mut objects, |o| object_key(o.metadata()));
                page(
                    &objects,
                    |o| object_key(o.metadata()),
                    |o| to_struct(&o.to_json()).unwrap_or_default(),
                    req.limit,
                    &req.r#continue,
                    &scope,
                )?
            }
        };
        Ok(Response::new(pb::ListResponse {
            items,
            r#continue: next,
            remaining_item_count: remaining,
            resource_version: self.cluster.resource_version(),
        }))
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let req = req.into_inner();
        if req.name.is_empty() {
            return Err(ApiError::InvalidArgument("name: Required value".into()).into());
        }
        let k = kind(&req.kind)?;
        super::convert::namespace_arg(&req.namespace)?;
        let object = match k {
            Kind::Node => self.cluster.node(&req.name).map(|n| to_json(&*n)),
            Kind::Pod => {
                let ns = if req.namespace.is_empty() {
                    "default"
                } else {
                    &req.namespace
                };
                self.cluster.get_pod(ns, &req.name).map(|p| to_json(&*p))
            }
            Kind::Object(o) => self
                .cluster
                .object(o, &req.namespace, &req.name)
                .map(|o| to_struct(&o.to_json()).unwrap_or_default()),
        };
        match object {
            Some(o) => Ok(Response::new(pb::GetResponse { object: Some(o) })),
            None => Err(ApiError::NotFound(format!(
                "{} {:?} not found",
                kind_name(k).to_lowercase(),
                req.name
            ))
            .into()),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let req = req.into_inner();
        let want = if req.kind.is_empty() {
            None
        } else {
            Some(kind(&req.kind)?)
        };
        super::convert::namespace_arg(&req.namespace)?;
        let ns = req.namespace;
        let mut changes = self.cluster.subscribe();
        // The store hands every change to an unbounded channel; a relay
        // moves them to a bounded one as they come, and a watcher that
        // falls that far behind is ended (as the API server ends a watch
        // whose client is too slow) instead of holding more and more.
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        tokio::spawn(async move {
            while let Some(c) = changes.recv().await {
                let Some((t, k, json)) = change_json(&c) else {
                    continue;
                };
                if want.is_some_and(|w| w != k) {
                    continue;
                }
                if !ns.is_empty()
                    && json["metadata"]["namespace"]
                        .as_str()
                        .is_some_and(|n| n != ns)
                {
                    continue;
                }
                let event = Ok(pb::WatchEvent {
                    r#type: t.into(),
                    object: to_struct(&json),
                });
                match tx.try_send(event) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                        let _ = tx
                            .send(Err(Status::resource_exhausted(format!(
                                "the watch fell more than {WATCH_BUFFER} changes behind; list and watch again"
                            ))))
                            .await;
                        return;
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            self.closing.end(ReceiverStream::new(rx)),
        )))
    }
}

/// Changes a Watch may hold for a slow client before it is ended.
const WATCH_BUFFER: usize = 4096;

/// `namespace\0name`: sorts as (namespace, name) does.
fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}\0{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Sorts unless already sorted (the embedded store lists in order).
fn sort_by_key<T>(items: &mut [T], key: impl Fn(&T) -> String) {
    if !items.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
        items.sort_by_cached_key(|t| key(t));
    }
}
