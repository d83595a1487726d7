//! The in-tree plugins, one module each, and the registry listing them.

pub mod default_binder;
pub mod names;
pub mod node_name;
pub mod node_resources;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod queue_sort;
pub mod scheduling_gates;

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
        names::POD_TOPOLOGY_SPREAD,
        |a: pod_topology_spread::PodTopologySpreadArgs, h| {
            pod_topology_spread::PodTopologySpread::new(a, h)
        },
    )
    .expect(ok);
    r.register(names::DEFAULT_BINDER, |a: NoArgs, h| {
        Ok(default_binder::DefaultBinder::new(a, h))
    })
    .expect(ok);
    r
}
