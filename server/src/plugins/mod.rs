//! The in-tree plugins, one module each, and the registry listing them.

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gang_scheduling;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
/// The in-tree plugins' names, owned by the configuration that spells
/// them ([`crate::config::plugin_names`]).
pub use crate::config::plugin_names as names;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod queue_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
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
        |a: node_resources::NodeResourcesFitArgs, h| {
            node_resources::NodeResourcesFit::new(a).map(|f| f.with_objects(h.objects().clone()))
        },
    )
    .expect(ok);
    r.register(
        names::COSCHEDULING,
        |a: coscheduling::CoschedulingArgs, h| Ok(coscheduling::Coscheduling::new(a, h)),
    )
    .expect(ok);
    r.register(names::GANG_SCHEDULING, |a: NoArgs, h| {
        Ok(gang_scheduling::GangScheduling::new(a, h))
    })
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
    r.register(
        names::NODE_RESOURCES_BALANCED_ALLOCATION,
        |a: node_resources::NodeResourcesBalancedAllocationArgs, _| {
            node_resources::NodeResourcesBalancedAllocation::new(a)
        },
    )
    .expect(ok);
    r.register(names::TAINT_TOLERATION, |a: NoArgs, _| {
        Ok(taint_toleration::TaintToleration::new(a))
    })
    .expect(ok);
    r.register(
        names::NODE_AFFINITY,
        |a: node_affinity::NodeAffinityArgs, _| node_affinity::NodeAffinity::new(a),
    )
    .expect(ok);
    r.register(names::NODE_PORTS, |a: NoArgs, _| {
        Ok(node_ports::NodePorts::new(a))
    })
    .expect(ok);
    r.register(names::IMAGE_LOCALITY, |a: NoArgs, _| {
        Ok(image_locality::ImageLocality::new(a))
    })
    .expect(ok);
    r.register(
        names::POD_TOPOLOGY_SPREAD,
        |a: pod_topology_spread::PodTopologySpreadArgs, h| {
            pod_topology_spread::PodTopologySpread::new(a, h)
        },
    )
    .expect(ok);
    r.register(
        names::DYNAMIC_RESOURCES,
        |a: dynamic_resources::DynamicResourcesArgs, h| {
            Ok(dynamic_resources::DynamicResources::new(a, h))
        },
    )
    .expect(ok);
    r.register(names::NODE_DECLARED_FEATURES, |a: NoArgs, _| {
        Ok(node_declared_features::NodeDeclaredFeatures::new(a))
    })
    .expect(ok);
    r.register(names::DEFAULT_BINDER, |a: NoArgs, h| {
        Ok(default_binder::DefaultBinder::new(a, h))
    })
    .expect(ok);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::framework::{Handle, Parallelizer};

    #[test]
    fn default_plugins_are_registered_under_upstream_names() {
        let registry = in_tree_registry();
        let cluster = EmbeddedCluster::new();
        let handle = Handle::new(cluster.clone(), cluster, Parallelizer::inline());
        for name in [
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "ImageLocality",
            "NodeResourcesBalancedAllocation",
        ] {
            let factory = registry.get(name).unwrap_or_else(|| panic!("{name}"));
            let plugin = factory(None, "args", &handle).unwrap();
            assert_eq!(plugin.name(), name);
            let empty = serde_json::json!({});
            assert!(factory(Some(&empty), "args", &handle).is_ok(), "{name}");
        }
        for name in ["TaintToleration", "NodePorts", "ImageLocality"] {
            let err =
                registry.get(name).unwrap()(Some(&serde_json::json!({"foo": 1})), "args", &handle)
                    .err()
                    .unwrap();
            assert_eq!(
                err.to_string(),
                "args: this plugin takes no arguments",
                "{name}"
            );
        }
    }
}
