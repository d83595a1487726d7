//! DeviceClasses, pre-parsed ([`Class`], [`parse_class`]).

use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;

use super::cel::Selector;
use super::selectors::{SelectorCache, selectors};
use crate::model::InvalidObject;

/// A DeviceClass, pre-parsed.
#[derive(Debug)]
pub struct Class {
    /// The object.
    pub object: Arc<api::DeviceClass>,
    /// metadata.name.
    pub name: Arc<str>,
    /// Selectors every device of the class satisfies.
    pub selectors: Vec<Arc<Selector>>,
    /// `extendedResourceName` (DRAExtendedResource): pods asking for this
    /// extended resource get devices of this class.
    pub extended_resource_name: Option<Arc<str>>,
}

/// Parses a DeviceClass.
pub fn parse_class(
    cache: &mut SelectorCache,
    class: Arc<api::DeviceClass>,
) -> Result<Class, InvalidObject> {
    let spec = class.spec.as_ref();
    Ok(Class {
        name: Arc::from(class.metadata.name.as_deref().unwrap_or("")),
        selectors: selectors(
            cache,
            spec.and_then(|s| s.selectors.as_ref()),
            "spec.selectors",
        )?,
        extended_resource_name: spec
            .and_then(|s| s.extended_resource_name.as_deref())
            .map(Arc::from),
        object: class,
    })
}
