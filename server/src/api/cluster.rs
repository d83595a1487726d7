//! `berth.v1.Cluster`: the embedded cluster's objects.

use std::sync::Arc;

use berth_proto::json::to_struct;
use berth_proto::v1::cluster_server::Cluster;
use berth_proto::v1::{GetRequest, GetResponse, ListRequest, ListResponse};
use tonic::{Request, Response, Status};

use super::ApiError;
use crate::cluster::embedded::{EmbeddedCluster, Kind};

/// The Cluster service over the embedded store.
#[derive(Debug, Clone)]
pub struct ClusterApi {
    cluster: Arc<EmbeddedCluster>,
}

impl ClusterApi {
    /// The service over `cluster`.
    pub fn new(cluster: Arc<EmbeddedCluster>) -> Self {
        Self { cluster }
    }
}

fn kind(s: &str) -> Result<Kind, ApiError> {
    Kind::parse(s).ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "kind: unsupported kind {s:?}: supported kinds: {}",
            crate::cluster::embedded::SUPPORTED_KINDS
        ))
    })
}

fn to_json<T: serde::Serialize>(obj: &T) -> prost_types::Struct {
    let v = serde_json::to_value(obj).unwrap_or_default();
    to_struct(&v).unwrap_or_default()
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let req = req.into_inner();
        let items = match kind(&req.kind)? {
            Kind::Node => self.cluster.nodes().iter().map(|n| to_json(&**n)).collect(),
            Kind::Pod => self
                .cluster
                .pods()
                .iter()
                .filter(|p| {
                    req.namespace.is_empty()
                        || p.metadata.namespace.as_deref() == Some(req.namespace.as_str())
                })
                .map(|p| to_json(&**p))
                .collect(),
            Kind::Object(k) => self
                .cluster
                .objects(k)
                .iter()
                .filter(|o| {
                    req.namespace.is_empty() || !k.namespaced() || o.key().1 == req.namespace
                })
                .map(|o| to_struct(&o.to_json()).unwrap_or_default())
                .collect(),
        };
        Ok(Response::new(ListResponse { items }))
    }

    async fn get(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let req = req.into_inner();
        if req.name.is_empty() {
            return Err(ApiError::InvalidArgument("name: Required value".into()).into());
        }
        let object = match kind(&req.kind)? {
            Kind::Node => self.cluster.node(&req.name).map(|n| to_json(&*n)),
            Kind::Pod => {
                let ns = if req.namespace.is_empty() {
                    "default"
                } else {
                    &req.namespace
                };
                crate::cluster::ClusterSource::get_pod(&*self.cluster, ns, &req.name)
                    .map(|p| to_json(&*p))
            }
            Kind::Object(k) => self
                .cluster
                .object(k, &req.namespace, &req.name)
                .map(|o| to_struct(&o.to_json()).unwrap_or_default()),
        };
        match object {
            Some(o) => Ok(Response::new(GetResponse { object: Some(o) })),
            None => Err(ApiError::NotFound(format!(
                "{} {:?} not found",
                req.kind.to_lowercase(),
                req.name
            ))
            .into()),
        }
    }
}
