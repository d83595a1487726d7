//! The scheduler configuration of each workload, and what serves the
//! extender workload's logic ([`crate::extender`]):
//!
//! * [`ExtenderVariant::Native`]: [`NativeBenchPlugin`] registered in the
//!   scheduler's registry and enabled in the default profile (multiPoint);
//! * [`ExtenderVariant::Grpc`]: a `berth-bench-extender --protocol grpc`
//!   process, configured under `berthExtenders:` and enabled in the profile
//!   at Filter and Score;
//! * [`ExtenderVariant::Http`]: a `berth-bench-extender --protocol http`
//!   process, configured under upstream's `extenders:` (filter and
//!   prioritize verbs, weight 1, not node-cache capable: the nodes travel
//!   in every call, as a minimal extender without its own cache needs).

use anyhow::{Result, anyhow, bail};
use berth_server::config::{self, SchedulerConfig};
use berth_server::features::{Feature, FeatureGates};
use berth_server::framework::{NoArgs, Registry};
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::Scheduler;

use crate::extender::{EXTENDER_NAME, NativeBenchPlugin};
pub use crate::extender_process::ExtenderProcess;
use crate::workloads::{ExtenderVariant, Profile};

/// A workload's scheduler configuration, with whatever serves it.
pub struct Setup {
    /// The configuration.
    pub config: SchedulerConfig,
    /// The plugins.
    pub registry: Registry,
    _served: Option<ExtenderProcess>,
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

/// The configuration and registry for `profile`, starting what serves it;
/// with `generic_workload`, the default profile under
/// `--feature-gates=GenericWorkload=true` (PodGroups scheduled as groups,
/// GangScheduling in the profile).
pub async fn setup(profile: Profile, generic_workload: bool) -> Result<Setup> {
    let mut registry = in_tree_registry();
    if generic_workload && profile != Profile::Default {
        bail!("GenericWorkload is set up with the default profile only");
    }
    match profile {
        Profile::Default | Profile::Api(_) | Profile::Transport(_) => {
            let known = |n: &str| registry.contains(n);
            let gates = FeatureGates::default().with(Feature::GenericWorkload, generic_workload);
            let config = config::default_config_gated(&known, &gates);
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
    filter:
      enabled: [{{name: {EXTENDER_NAME}}}]
    score:
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
            let served = ExtenderProcess::start("grpc").await?;
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter:
      enabled: [{{name: {EXTENDER_NAME}}}]
    score:
      enabled: [{{name: {EXTENDER_NAME}, weight: 1}}]
berthExtenders:
- name: {EXTENDER_NAME}
  endpoint: http://{addr}
  points: [filter, score]
",
                addr = served.addr
            );
            let config = parse(&yaml, &registry)?;
            Ok(Setup {
                config,
                registry,
                _served: Some(served),
            })
        }
        Profile::Extender(ExtenderVariant::Http) => {
            let served = ExtenderProcess::start("http").await?;
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
extenders:
- urlPrefix: http://{addr}
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 1
  nodeCacheCapable: false
",
                addr = served.addr
            );
            let config = parse(&yaml, &registry)?;
            Ok(Setup {
                config,
                registry,
                _served: Some(served),
            })
        }
        Profile::Kube => bail!("the kube workloads set up their scheduler themselves"),
    }
}
