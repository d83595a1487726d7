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

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, Result, anyhow, bail};
use berth_server::config::{self, SchedulerConfig};
use berth_server::features::{Feature, FeatureGates};
use berth_server::framework::{NoArgs, Registry};
use berth_server::plugins::in_tree_registry;
use berth_server::scheduler::Scheduler;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::extender::{EXTENDER_NAME, NativeBenchPlugin};
use crate::workloads::{ExtenderVariant, Profile};

/// An extender process, killed when dropped.
pub struct ExtenderProcess {
    child: tokio::process::Child,
    /// Where it listens.
    pub addr: String,
}

impl ExtenderProcess {
    /// The `berth-bench-extender` binary: `$BERTH_BENCH_EXTENDER`, or the
    /// one beside this executable. `cargo run -p berth-bench` builds only
    /// the harness, so when the extender is missing it is built here, with
    /// the harness's profile (`cargo build [--release] -p berth-bench --bin
    /// berth-bench-extender`); if that fails, the error gives the command.
    pub fn binary() -> Result<PathBuf> {
        if let Some(p) = std::env::var_os("BERTH_BENCH_EXTENDER") {
            return Ok(PathBuf::from(p));
        }
        let exe = std::env::current_exe().context("finding this executable")?;
        let p = exe.with_file_name(format!(
            "berth-bench-extender{}",
            std::env::consts::EXE_SUFFIX
        ));
        if p.exists() {
            return Ok(p);
        }
        let release = exe
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "release");
        let command = format!(
            "cargo build{} -p berth-bench --bin berth-bench-extender",
            if release { " --release" } else { "" }
        );
        eprintln!("{} is missing; building it: {command}", p.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "-p",
                "berth-bench",
                "--bin",
                "berth-bench-extender",
            ])
            .stdin(Stdio::null());
        if release {
            cmd.arg("--release");
        }
        let built = cmd.status();
        match built {
            Ok(s) if s.success() && p.exists() => Ok(p),
            Ok(s) => bail!(
                "{} is missing and `{command}` did not build it ({s}); run that command from the workspace, or set BERTH_BENCH_EXTENDER",
                p.display()
            ),
            Err(e) => bail!(
                "{} is missing and `{command}` could not run ({e}); run that command from the workspace, or set BERTH_BENCH_EXTENDER",
                p.display()
            ),
        }
    }

    /// The process's id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Starts the extender with `protocol` (`grpc`, `http` or `echo`) on a loopback
    /// port and waits for its `listening on ADDR` line.
    pub async fn start(protocol: &str) -> Result<Self> {
        let bin = Self::binary()?;
        let mut child = tokio::process::Command::new(&bin)
            .args(["--protocol", protocol, "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("the extender's stderr was not captured"))?;
        let mut lines = BufReader::new(stderr).lines();
        let first = lines
            .next_line()
            .await
            .context("reading the extender's first line")?
            .ok_or_else(|| anyhow!("the extender exited before saying where it listens"))?;
        let addr = first
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow!("unexpected first line from the extender: {first:?}"))?
            .trim()
            .to_string();
        // Keep its stderr drained (and visible) for the rest of the run.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[berth-bench-extender] {line}");
            }
        });
        Ok(Self { child, addr })
    }
}

impl Drop for ExtenderProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

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
