//! The scheduler configuration of each workload, and the extender
//! workload's Filter+Score logic served three ways.
//!
//! SchedulingWithExtender runs kube-scheduler's default profile plus one
//! more Filter and Score, the same logic in every variant:
//!
//! * Filter: a node labelled `bench.berth.dev/reject=true` is rejected (no
//!   workload node is, so the check runs and passes everywhere);
//! * Score: `100 - (n mod 101)` for a node named `node-<n>`.
//!
//! The variants:
//!
//! * [`ExtenderVariant::Native`]: a framework plugin in the scheduler's
//!   process, called per node on the CPU pool;
//! * [`ExtenderVariant::Grpc`]: a berth remote extender written with the
//!   berth-extender SDK, served in this process on a loopback TCP port on
//!   its own runtime thread, reached by berthd's client over the
//!   `berth.extender.v1.Extender/Session` stream (one batched Filter and one
//!   batched Score request per cycle);
//! * [`ExtenderVariant::Http`]: kube-scheduler's HTTP JSON extender
//!   protocol. Not available yet: berth's HTTP extender client is being
//!   built separately. To add it, serve the same logic as an HTTP extender
//!   (filter and prioritize verbs, `nodeCacheCapable: true`) on a loopback
//!   port here and return a config with an `extenders:` entry pointing at
//!   it; the runner needs nothing else.

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use berth_extender::CancellationToken;
use berth_extender::{
    Context as ExtenderContext, CyclePod, ExtenderBuilder, HandlerResult, NodeRef,
    Status as ExtenderStatus,
};
use berth_server::cache::NodeInfo;
use berth_server::config::{self, SchedulerConfig};
use berth_server::extension_points;
use berth_server::framework::{
    CycleState, FilterPlugin, NoArgs, Plugin, Registry, ScorePlugin, Status,
};
use berth_server::model::PodInfo;
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::Scheduler;

use crate::workloads::{ExtenderVariant, Profile};

/// The name of the extender workload's plugin (and remote extender).
pub const EXTENDER_NAME: &str = "BenchExtender";
/// Nodes with this label set to `true` are rejected by its Filter.
pub const REJECT_LABEL: &str = "bench.berth.dev/reject";

/// The Filter verdict, from the node's reject label.
pub fn passes(reject_label: Option<&str>) -> bool {
    reject_label != Some("true")
}

/// The Score of a node, from its name: `100 - (n mod 101)` for `node-<n>`.
pub fn score_of(node_name: &str) -> i64 {
    let digits = node_name.rsplit('-').next().unwrap_or("");
    100 - digits.parse::<i64>().map_or(0, |n| n % 101)
}

/// The logic as a native plugin.
#[derive(Debug, Default)]
pub struct NativeBenchPlugin;

impl Plugin for NativeBenchPlugin {
    fn name(&self) -> &'static str {
        EXTENDER_NAME
    }
    extension_points!(filter, score);
}

impl FilterPlugin for NativeBenchPlugin {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let label = node.node().and_then(|n| n.labels.get(REJECT_LABEL));
        if passes(label) {
            Status::success()
        } else {
            Status::unresolvable("node(s) were rejected by the benchmark")
        }
    }
}

impl ScorePlugin for NativeBenchPlugin {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(score_of(node.name()))
    }
}

/// The logic as a remote extender, through the SDK.
struct RemoteBench;

impl berth_extender::Filter for RemoteBench {
    fn filter(&self, _: &ExtenderContext, _: &CyclePod, node: &NodeRef<'_>) -> ExtenderStatus {
        let label = node
            .object()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(REJECT_LABEL))
            .map(String::as_str);
        if passes(label) {
            ExtenderStatus::success()
        } else {
            ExtenderStatus::unresolvable("node(s) were rejected by the benchmark")
        }
    }
}

impl berth_extender::Score for RemoteBench {
    fn score(&self, _: &ExtenderContext, _: &CyclePod, node: &NodeRef<'_>) -> HandlerResult<i64> {
        Ok(score_of(node.name()))
    }
}

/// A remote extender served on its own runtime thread until dropped.
struct ServedExtender {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ServedExtender {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A workload's scheduler configuration, with whatever serves it.
pub struct Setup {
    /// The configuration.
    pub config: SchedulerConfig,
    /// The plugins.
    pub registry: Registry,
    _served: Option<ServedExtender>,
}

impl Setup {
    /// Waits until the scheduler can use everything the profile needs (the
    /// remote extender's session is up).
    pub async fn ready(&self, scheduler: &Scheduler) -> Result<()> {
        for conn in scheduler.extenders().connections() {
            let mut connected = conn.connected();
            connected
                .wait_for(|n| *n > 0)
                .await
                .map_err(|_| anyhow!("the extender connection closed"))?;
        }
        Ok(())
    }
}

fn parse(yaml: &str, registry: &Registry) -> Result<SchedulerConfig> {
    let known = |n: &str| registry.contains(n);
    config::parse(yaml, &known).map_err(|e| anyhow!("benchmark config: {e}"))
}

/// Why `profile` cannot run here, if it cannot.
pub fn unavailable(profile: Profile) -> Option<&'static str> {
    match profile {
        Profile::Extender(ExtenderVariant::Http) => {
            Some("the HTTP JSON extender variant needs berth's HTTP extender client, not built yet")
        }
        _ => None,
    }
}

/// The configuration and registry for `profile`, starting what serves it.
pub async fn setup(profile: Profile) -> Result<Setup> {
    let mut registry = in_tree_registry();
    match profile {
        Profile::Default => {
            let known = |n: &str| registry.contains(n);
            let config = config::default_config(&known);
            Ok(Setup {
                config,
                registry,
                _served: None,
            })
        }
        Profile::Extender(ExtenderVariant::Native) => {
            registry
                .register(EXTENDER_NAME, |_: NoArgs, _| Ok(NativeBenchPlugin))
                .map_err(|e| anyhow!("{e}"))?;
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: {EXTENDER_NAME}, weight: 1}}]
"
            );
            let config = parse(&yaml, &registry)?;
            Ok(Setup {
                config,
                registry,
                _served: None,
            })
        }
        Profile::Extender(ExtenderVariant::Grpc) => {
            let std_listener = std::net::TcpListener::bind("127.0.0.1:0")
                .context("binding the extender's port")?;
            std_listener.set_nonblocking(true)?;
            let addr = std_listener.local_addr()?;
            let stop = CancellationToken::new();
            let token = stop.clone();
            let thread = std::thread::Builder::new()
                .name("bench-extender".into())
                .spawn(move || {
                    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    else {
                        return;
                    };
                    rt.block_on(async move {
                        let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                            return;
                        };
                        let logic = Arc::new(RemoteBench);
                        let extender = ExtenderBuilder::new(EXTENDER_NAME)
                            .filter(logic.clone())
                            .score(logic)
                            .wants_nodes(true)
                            .build();
                        let _ = extender
                            .serve_with_incoming_shutdown(listener, token.cancelled_owned())
                            .await;
                    });
                })
                .context("starting the extender thread")?;
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: {EXTENDER_NAME}, weight: 1}}]
berthExtenders:
- name: {EXTENDER_NAME}
  endpoint: http://{addr}
  points: [filter, score]
"
            );
            let config = parse(&yaml, &registry)?;
            Ok(Setup {
                config,
                registry,
                _served: Some(ServedExtender {
                    stop,
                    thread: Some(thread),
                }),
            })
        }
        Profile::Extender(ExtenderVariant::Http) => bail!(
            "the HTTP JSON extender variant is not available yet (berth's HTTP extender client is not built); see bench/src/profile.rs"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logic_scores_by_node_number_and_rejects_only_labelled_nodes() {
        assert_eq!(score_of("node-00000"), 100);
        assert_eq!(score_of("node-00100"), 0);
        assert_eq!(score_of("node-00101"), 100);
        assert_eq!(score_of("odd"), 100);
        assert!(passes(None));
        assert!(passes(Some("false")));
        assert!(!passes(Some("true")));
    }
}
