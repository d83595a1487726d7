//! DefaultBinder: binds through the cluster (`pods/binding`).

use async_trait::async_trait;

use crate::extension_points;
use crate::framework::{BindPlugin, CycleState, Handle, NoArgs, Plugin, Status};
use crate::model::PodInfo;
use crate::plugins::names::DEFAULT_BINDER;

/// The DefaultBinder plugin.
pub struct DefaultBinder {
    handle: Handle,
}

impl DefaultBinder {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs, handle: &Handle) -> Self {
        Self {
            handle: handle.clone(),
        }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        DEFAULT_BINDER
    }
    extension_points!(bind);
}

#[async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
        match self.handle.cluster().bind(pod, node).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e.to_string()),
        }
    }
}
