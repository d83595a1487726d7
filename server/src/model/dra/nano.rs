//! Quantities as DRA holds them: integers of nano units ([`Nano`]),
//! parsed once when an object is stored, and the same number as CEL sees
//! it ([`CelQuantity`]).

use cel::objects::Opaque;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::model::InvalidObject;
use crate::model::quantity::Quantity;

/// A quantity in nano units (value × 10⁹), exact for what the API accepts.
pub type Nano = i128;

pub(super) fn nano(q: &K8sQuantity, path: &str) -> Result<Nano, InvalidObject> {
    Quantity::parse(&q.0)
        .and_then(|q| q.nano_value())
        .map_err(|e| InvalidObject::new(path, e.to_string()))
}

/// A quantity inside CEL: its value in nano units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CelQuantity(pub i128);

impl Opaque for CelQuantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}
