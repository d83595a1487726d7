//! Upstream's default profile: every default plugin enabled through
//! `multiPoint`, in kube-scheduler's order, with its Score weight.

use super::plugin_names as n;
use crate::features::{Feature, FeatureGates};

/// The default `multiPoint.enabled` list of `kubescheduler.config.k8s.io/v1`
/// as kube-scheduler v1.37 builds it with its default feature gates
/// (upstream's `getDefaultPlugins` and `applyFeatureGates`):
/// NodeDeclaredFeatures (GA, locked on) appended, DynamicResources
/// (DynamicResourceAllocation, GA, locked on) inserted before
/// DefaultPreemption with weight 2, so that PostFilter deallocates an idle
/// claim before preemption evicts anyone. GangScheduling (GenericWorkload,
/// beta, off by default) appended last, as upstream's applyFeatureGates
/// does. Plugins not in the registry are
/// left out of the default profile. [`default_multi_point`] gives the list
/// for other gates.
pub const DEFAULT_MULTI_POINT: &[(&str, Option<i32>)] = &[
    (n::SCHEDULING_GATES, None),
    (n::PRIORITY_SORT, None),
    (n::NODE_UNSCHEDULABLE, None),
    (n::NODE_NAME, None),
    (n::TAINT_TOLERATION, Some(3)),
    (n::NODE_AFFINITY, Some(2)),
    (n::NODE_PORTS, None),
    (n::NODE_RESOURCES_FIT, Some(1)),
    (n::VOLUME_RESTRICTIONS, None),
    (n::NODE_VOLUME_LIMITS, None),
    (n::VOLUME_BINDING, None),
    (n::VOLUME_ZONE, None),
    (n::POD_TOPOLOGY_SPREAD, Some(2)),
    (n::INTER_POD_AFFINITY, Some(2)),
    (n::DYNAMIC_RESOURCES, Some(2)),
    (n::DEFAULT_PREEMPTION, None),
    (n::NODE_RESOURCES_BALANCED_ALLOCATION, Some(1)),
    (n::IMAGE_LOCALITY, Some(1)),
    (n::DEFAULT_BINDER, None),
    (n::NODE_DECLARED_FEATURES, None),
    (n::GANG_SCHEDULING, None),
];

/// The default `multiPoint.enabled` list under `gates`: the gated entries
/// of [`DEFAULT_MULTI_POINT`] only where their gate is on.
pub fn default_multi_point(gates: &FeatureGates) -> Vec<(&'static str, Option<i32>)> {
    DEFAULT_MULTI_POINT
        .iter()
        .filter(|(name, _)| match *name {
            n::NODE_DECLARED_FEATURES => gates.enabled(Feature::NodeDeclaredFeatures),
            n::DYNAMIC_RESOURCES => gates.enabled(Feature::DynamicResourceAllocation),
            n::GANG_SCHEDULING => gates.enabled(Feature::GenericWorkload),
            _ => true,
        })
        .copied()
        .collect()
}

/// kube-scheduler's default parallelism.
pub const DEFAULT_PARALLELISM: i32 = 16;
/// Seconds of the first backoff.
pub const DEFAULT_POD_INITIAL_BACKOFF_SECONDS: i64 = 1;
/// Seconds the backoff doubles up to.
pub const DEFAULT_POD_MAX_BACKOFF_SECONDS: i64 = 10;
/// The scheduler name of a single unnamed profile.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
