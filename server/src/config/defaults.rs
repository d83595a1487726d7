//! Upstream's default profile: every default plugin enabled through
//! `multiPoint`, in kube-scheduler's order, with its Score weight.

use crate::features::{Feature, FeatureGates};

/// The default `multiPoint.enabled` list of `kubescheduler.config.k8s.io/v1`
/// as kube-scheduler v1.37 builds it with its default feature gates
/// (upstream's `getDefaultPlugins` and `applyFeatureGates`):
/// NodeDeclaredFeatures (GA, locked on) appended, DynamicResources
/// (DynamicResourceAllocation, GA, locked on) inserted before
/// DefaultPreemption with weight 2, so that PostFilter deallocates an idle
/// claim before preemption evicts anyone. Plugins not in the registry are
/// left out of the default profile. [`default_multi_point`] gives the list
/// for other gates.
pub const DEFAULT_MULTI_POINT: &[(&str, Option<i32>)] = &[
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", Some(3)),
    ("NodeAffinity", Some(2)),
    ("NodePorts", None),
    ("NodeResourcesFit", Some(1)),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", Some(2)),
    ("InterPodAffinity", Some(2)),
    ("DynamicResources", Some(2)),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", Some(1)),
    ("ImageLocality", Some(1)),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
];

/// The default `multiPoint.enabled` list under `gates`: the gated entries
/// of [`DEFAULT_MULTI_POINT`] only where their gate is on.
pub fn default_multi_point(gates: &FeatureGates) -> Vec<(&'static str, Option<i32>)> {
    DEFAULT_MULTI_POINT
        .iter()
        .filter(|(name, _)| match *name {
            "NodeDeclaredFeatures" => gates.enabled(Feature::NodeDeclaredFeatures),
            "DynamicResources" => gates.enabled(Feature::DynamicResourceAllocation),
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
