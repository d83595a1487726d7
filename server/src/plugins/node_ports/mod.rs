//! NodePorts: a node is infeasible if a host port the pod binds is in use
//! there: same protocol and port, on the same host IP or where either side
//! binds every address (`0.0.0.0`). The pod's host ports (app containers and
//! sidecars, `hostPort > 0`) are parsed with the pod; the node's are kept in
//! [`NodeInfo::used_ports`].

use std::sync::Arc;

use async_trait::async_trait;

use crate::cache::{DEFAULT_BIND_ALL_HOST_IP, NodeInfo};
use crate::extension_points;
use crate::framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EventObject, EventResource,
    FilterPlugin, NoArgs, Plugin, PreFilterPlugin, PreFilterResult, QueueingHint, Status,
};
use crate::model::{HostPort, PodInfo};
use crate::plugins::names::NODE_PORTS;

/// The reason a node with a clashing host port is rejected.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The NodePorts plugin.
#[derive(Debug, Default)]
pub struct NodePorts;

impl NodePorts {
    /// Builds the plugin (it takes no args).
    pub fn new(_: NoArgs) -> Self {
        Self
    }
}

/// Whether two host ports clash: same protocol and number, and the same
/// address or the wildcard on either side.
fn clash(a: &HostPort, b: &HostPort) -> bool {
    a.protocol == b.protocol
        && a.port == b.port
        && (a.ip == b.ip
            || &*a.ip == DEFAULT_BIND_ALL_HOST_IP
            || &*b.ip == DEFAULT_BIND_ALL_HOST_IP)
}

/// Whether every host port of `pod` is free on `node`.
fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    let used = node.used_ports();
    !pod.host_ports
        .iter()
        .any(|p| used.conflicts(&p.ip, p.protocol, p.port))
}

/// Requeues the pod when a pod that held one of its host ports, on a node or
/// nominated to one, goes away.
fn hint_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    _: Option<&EventObject>,
) -> Result<QueueingHint, String> {
    let deleted = old
        .and_then(EventObject::as_pod)
        .ok_or("expected the deleted pod in the event")?;
    if deleted.node_name.is_none() && deleted.nominated_node_name.is_none() {
        return Ok(QueueingHint::Skip);
    }
    let shared = deleted
        .host_ports
        .iter()
        .any(|d| pod.host_ports.iter().any(|p| clash(p, d)));
    Ok(if shared {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NODE_PORTS
    }

    fn node_local(&self, _pod: &PodInfo) -> bool {
        true
    }

    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // Container ports are immutable: only a deletion frees a port.
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                hint_pod_deleted,
            ),
            // A new node has every port free.
            ClusterEventWithHint::always(ClusterEvent::NODE_ADD),
        ])
    }

    extension_points!(pre_filter, filter);
}

#[async_trait]
impl PreFilterPlugin for NodePorts {
    async fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if pod.host_ports.is_empty() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerPort;

    use super::*;
    use crate::framework::Code;
    use crate::testing::{make_node, make_pod};

    /// A pod binding `(protocol, hostIP, hostPort)` triples; an empty
    /// protocol or IP is left unset. `sidecar` ports go on a restartable
    /// init container, `init` ports on a plain one.
    fn pod_with(name: &str, ports: &[(&str, &str, i32)], sidecar: &[i32], init: &[i32]) -> PodInfo {
        let mut obj = make_pod(name).object();
        let spec = obj.spec.as_mut().unwrap();
        spec.containers[0].ports = Some(
            ports
                .iter()
                .map(|(proto, ip, port)| ContainerPort {
                    container_port: 8000,
                    host_port: Some(*port),
                    host_ip: (!ip.is_empty()).then(|| ip.to_string()),
                    protocol: (!proto.is_empty()).then(|| proto.to_string()),
                    ..Default::default()
                })
                .collect(),
        );
        let init_container = |restart: Option<&str>, ports: &[i32]| {
            let mut c = spec.containers[0].clone();
            c.name = format!("init-{}", restart.unwrap_or("plain"));
            c.restart_policy = restart.map(str::to_string);
            c.ports = Some(
                ports
                    .iter()
                    .map(|p| ContainerPort {
                        container_port: 9000,
                        host_port: Some(*p),
                        ..Default::default()
                    })
                    .collect(),
            );
            c
        };
        let inits = vec![
            init_container(Some("Always"), sidecar),
            init_container(None, init),
        ];
        spec.init_containers = Some(inits);
        PodInfo::new(Arc::new(obj)).unwrap()
    }

    fn pod(ports: &[(&str, &str, i32)]) -> PodInfo {
        pod_with("p", ports, &[], &[])
    }

    fn node_running(pods: &[PodInfo]) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(make_node("n").build()));
        for (i, p) in pods.iter().enumerate() {
            let mut bound = p.clone();
            bound.uid = Arc::from(format!("running-{i}").as_str());
            bound.node_name = Some(Arc::from("n"));
            n.add_pod(Arc::new(bound));
        }
        n
    }

    #[test]
    fn filter_verdicts() {
        type Ports<'a> = &'a [(&'a str, &'a str, i32)];
        let cases: &[(&str, Ports, Ports, bool)] = &[
            ("nothing in use", &[("UDP", "127.0.0.1", 8080)], &[], true),
            (
                "other port",
                &[("UDP", "127.0.0.1", 8080)],
                &[("UDP", "127.0.0.1", 9090)],
                true,
            ),
            (
                "same port, ip and protocol",
                &[("UDP", "127.0.0.1", 8080)],
                &[("UDP", "127.0.0.1", 8080)],
                false,
            ),
            (
                "same port and ip, other protocol",
                &[("TCP", "127.0.0.1", 8080)],
                &[("UDP", "127.0.0.1", 8080)],
                true,
            ),
            (
                "default protocol is TCP",
                &[("", "127.0.0.1", 8080)],
                &[("TCP", "127.0.0.1", 8080)],
                false,
            ),
            (
                "SCTP",
                &[("SCTP", "127.0.0.1", 8080)],
                &[("SCTP", "127.0.0.1", 8080)],
                false,
            ),
            (
                "same port and protocol, other ip",
                &[("TCP", "127.0.0.1", 8001)],
                &[("TCP", "127.0.0.2", 8001)],
                true,
            ),
            (
                "wanted on every address, in use on one",
                &[("TCP", "0.0.0.0", 8001)],
                &[("TCP", "127.0.0.1", 8001)],
                false,
            ),
            (
                "unset ip means every address",
                &[("TCP", "", 8001)],
                &[("TCP", "127.0.0.1", 8001)],
                false,
            ),
            (
                "wanted on one address, in use on every address",
                &[("TCP", "10.0.10.10", 8001)],
                &[("TCP", "0.0.0.0", 8001)],
                false,
            ),
            (
                "wildcard on both sides, other protocols",
                &[("UDP", "0.0.0.0", 8001)],
                &[("TCP", "0.0.0.0", 8001)],
                true,
            ),
            (
                "one of several ports clashes",
                &[("TCP", "", 8001), ("UDP", "", 8002), ("TCP", "", 8003)],
                &[("TCP", "", 9000), ("UDP", "127.0.0.1", 8002)],
                false,
            ),
        ];
        let st = CycleState::new();
        for (name, wanted, in_use, fits) in cases {
            let n = node_running(&[pod(in_use)]);
            let s = NodePorts.filter(&st, &pod(wanted), &n);
            if *fits {
                assert!(s.is_success(), "{name}: {s:?}");
            } else {
                assert_eq!(
                    (s.code(), s.message().as_str()),
                    (Code::Unschedulable, ERR_REASON),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn sidecar_ports_count_and_init_ports_do_not() {
        let st = CycleState::new();
        let sidecar = pod_with("s", &[], &[7000], &[]);
        let init_only = pod_with("i", &[], &[], &[7000]);
        let wants = pod(&[("TCP", "", 7000)]);
        assert!(
            !NodePorts
                .filter(&st, &wants, &node_running(std::slice::from_ref(&sidecar)))
                .is_success()
        );
        assert!(
            NodePorts
                .filter(&st, &wants, &node_running(&[init_only]))
                .is_success()
        );
        assert!(
            !NodePorts
                .filter(&st, &sidecar, &node_running(&[wants]))
                .is_success(),
            "the pod's own sidecar ports are checked too"
        );
    }

    #[tokio::test]
    async fn pre_filter_skips_pods_without_host_ports() {
        let cases = [
            ("no ports", make_pod("p").build(), Code::Skip),
            (
                "container port without host port",
                {
                    let mut obj = make_pod("p").object();
                    obj.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]);
                    PodInfo::new(Arc::new(obj)).unwrap()
                },
                Code::Skip,
            ),
            (
                "host port",
                make_pod("p").host_port(80).build(),
                Code::Success,
            ),
            (
                "only a plain init container's host port",
                pod_with("p", &[], &[], &[80]),
                Code::Skip,
            ),
            (
                "sidecar host port",
                pod_with("p", &[], &[80], &[]),
                Code::Success,
            ),
        ];
        for (name, p, code) in cases {
            let (result, s) = NodePorts.pre_filter(&mut CycleState::new(), &p, &[]).await;
            assert_eq!(s.code(), code, "{name}");
            assert!(result.is_none(), "{name}");
        }
    }

    #[test]
    fn hints() {
        let regs = NodePorts.events_to_register().unwrap();
        assert_eq!(regs.len(), 2);
        assert_eq!(
            regs[0].event,
            ClusterEvent::new(EventResource::Pod, ActionType::DELETE)
        );
        assert_eq!(regs[1].event, ClusterEvent::NODE_ADD);
        assert!(regs[1].hint.is_none(), "a new node always requeues");
        let hint = regs[0].hint.as_ref().unwrap();

        let wants = pod(&[("TCP", "", 8080), ("UDP", "10.0.0.1", 53)]);
        let deleted = |ports: &[(&str, &str, i32)], node: Option<&str>, nominated: Option<&str>| {
            let mut p = pod_with("gone", ports, &[], &[]);
            p.node_name = node.map(Arc::from);
            p.nominated_node_name = nominated.map(Arc::from);
            Some(EventObject::Pod(Arc::new(p)))
        };
        let cases = [
            (
                "bound pod freeing a wanted port",
                deleted(&[("TCP", "", 8080)], Some("n"), None),
                QueueingHint::Queue,
            ),
            (
                "nominated pod freeing a wanted port",
                deleted(&[("TCP", "", 8080)], None, Some("n")),
                QueueingHint::Queue,
            ),
            (
                "unscheduled pod frees nothing",
                deleted(&[("TCP", "", 8080)], None, None),
                QueueingHint::Skip,
            ),
            (
                "pod without host ports",
                deleted(&[], Some("n"), None),
                QueueingHint::Skip,
            ),
            (
                "other port",
                deleted(&[("TCP", "", 9090)], Some("n"), None),
                QueueingHint::Skip,
            ),
            (
                "same port, other protocol",
                deleted(&[("UDP", "", 8080)], Some("n"), None),
                QueueingHint::Skip,
            ),
            (
                "same port on a specific address vs the wildcard",
                deleted(&[("TCP", "10.0.0.7", 8080)], Some("n"), None),
                QueueingHint::Queue,
            ),
            (
                "wildcard vs a specific address",
                deleted(&[("UDP", "0.0.0.0", 53)], Some("n"), None),
                QueueingHint::Queue,
            ),
            (
                "other specific address",
                deleted(&[("UDP", "10.0.0.2", 53)], Some("n"), None),
                QueueingHint::Skip,
            ),
        ];
        for (name, old, want) in cases {
            assert_eq!(hint(&wants, old.as_ref(), None).unwrap(), want, "{name}");
        }
        assert!(hint(&wants, None, None).is_err(), "no pod");
    }
}
