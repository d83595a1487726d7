//! The in-tree plugins, one module each, and the registry listing them.

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod inter_pod_affinity;
pub mod names;
pub mod node_name;
pub mod node_resources;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod queue_sort;
pub mod scheduling_gates;
pub mod volume_binding;
pub mod volume_helpers;
pub mod volume_restrictions;
pub mod volume_zone;

use crate::framework::{NoArgs, Registry};

/// Every in-tree plugin, under its upstream name.
pub fn in_tree_registry() -> Registry {
    let mut r = Registry::new();
    let ok = "in-tree names are unique";
    r.register(names::PRIORITY_SORT, |a: NoArgs, _| {
        Ok(queue_sort::PrioritySort::new(a))
    })
    .expect(ok);
    r.register(names::SCHEDULING_GATES, |a: NoArgs, _| {
        Ok(scheduling_gates::SchedulingGates::new(a))
    })
    .expect(ok);
    r.register(names::NODE_NAME, |a: NoArgs, _| {
        Ok(node_name::NodeName::new(a))
    })
    .expect(ok);
    r.register(names::NODE_UNSCHEDULABLE, |a: NoArgs, _| {
        Ok(node_unschedulable::NodeUnschedulable::new(a))
    })
    .expect(ok);
    r.register(
        names::NODE_RESOURCES_FIT,
        |a: node_resources::NodeResourcesFitArgs, _| node_resources::NodeResourcesFit::new(a),
    )
    .expect(ok);
    r.register(
        names::COSCHEDULING,
        |a: coscheduling::CoschedulingArgs, h| Ok(coscheduling::Coscheduling::new(a, h)),
    )
    .expect(ok);
    r.register(
        names::DEFAULT_PREEMPTION,
        |a: default_preemption::DefaultPreemptionArgs, h| {
            Ok(default_preemption::DefaultPreemption::new(a, h))
        },
    )
    .expect(ok);
    r.register(
        names::INTER_POD_AFFINITY,
        |a: inter_pod_affinity::InterPodAffinityArgs, h| {
            Ok(inter_pod_affinity::InterPodAffinity::new(a, h))
        },
    )
    .expect(ok);
    r.register(names::VOLUME_RESTRICTIONS, |a: NoArgs, h| {
        Ok(volume_restrictions::VolumeRestrictions::new(a, h))
    })
    .expect(ok);
    r.register(names::VOLUME_ZONE, |a: NoArgs, h| {
        Ok(volume_zone::VolumeZone::new(a, h))
    })
    .expect(ok);
    r.register(names::NODE_VOLUME_LIMITS, |a: NoArgs, h| {
        Ok(node_volume_limits::NodeVolumeLimits::new(a, h))
    })
    .expect(ok);
    r.register(
        names::VOLUME_BINDING,
        |a: volume_binding::VolumeBindingArgs, h| Ok(volume_binding::VolumeBinding::new(a, h)),
    )
    .expect(ok);
    r.register(names::DEFAULT_BINDER, |a: NoArgs, h| {
        Ok(default_binder::DefaultBinder::new(a, h))
    })
    .expect(ok);
    r
}
