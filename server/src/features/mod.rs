//! Feature gates: kube-scheduler v1.37's and v1.36's, with upstream's
//! versioned specs (default, pre-release stage, lock), parsed from
//! `--feature-gates` as component-base parses it.
//!
//! This module is a leaf: it imports nothing of the crate, so that the
//! configuration, the framework and every plugin may read it.
//!
//! The rules, as component-base's `featuregate` has them:
//!
//! * The spec in force for a gate is its last spec whose version is at most
//!   the release berth follows (component-base's emulation version: in kube
//!   mode the API server's own minor release, see [`follow`]; else
//!   [`RELEASE`]) and, where a spec names a
//!   minimum compatibility version, whose minimum the compatibility version
//!   (the release minus one) reaches. A gate with no such spec is
//!   unavailable (PreAlpha) and cannot be set.
//! * `--feature-gates` takes `Name=bool` pairs separated by commas (the
//!   flag may be given several times; later values win). A value is read
//!   like Go's `strconv.ParseBool` (`1 t T TRUE true True 0 f F FALSE false
//!   False`). An unknown name stops the parse; a locked gate set to another
//!   value than its default, or an unavailable one, is an error; so is a
//!   gate left on whose dependencies are off.
//! * `AllAlpha` and `AllBeta` set every alpha (beta) gate that is not named
//!   on its own.
//!
//! What berth adds: each gate says which of its values berth implements
//! ([`Serves`]). A value berth does not implement stops startup too,
//! naming the gate, rather than leaving a decision that differs from
//! kube-scheduler's unannounced.
//!
//! The values are read once, when profiles and plugins are built, into
//! [`Features`]: plain booleans a plugin copies into itself. Nothing looks a
//! gate up in a hot loop.

mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

pub use table::{Feature, GATES};

/// The newest kube-scheduler release berth knows: v1.`RELEASE` (its
/// "binary version", as component-base calls it).
pub const RELEASE: u16 = 37;

/// The oldest release berth knows: the one before [`RELEASE`]. Between the
/// two, the behaviours a release changed sit behind gates whose defaults
/// [`FeatureGates::at_release`] gives.
pub const OLDEST: u16 = RELEASE - 1;

/// The release berth follows for an API server of minor version
/// `server_minor`, and why, in words for the startup line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    /// The minor release whose gate defaults apply (the emulation
    /// version, 1.`release`).
    pub release: u16,
    /// Why this release, for people.
    pub reason: String,
}

/// The release to follow for an API server whose (emulated) version is
/// 1.`server_minor`: its own when berth knows it; berth's newest for a
/// newer server (kube-scheduler may be older than its API server); berth's
/// oldest, outside the supported skew, for an older one.
pub fn follow(server_minor: u16, server_version: &str) -> Followed {
    if (OLDEST..=RELEASE).contains(&server_minor) {
        Followed {
            release: server_minor,
            reason: format!("the API server's own release ({server_version})"),
        }
    } else if server_minor > RELEASE {
        Followed {
            release: RELEASE,
            reason: format!(
                "the API server ({server_version}) is newer than the releases berth knows (v1.{OLDEST} and v1.{RELEASE}): following berth's newest, v1.{RELEASE}"
            ),
        }
    } else {
        Followed {
            release: OLDEST,
            reason: format!(
                "the API server ({server_version}) is older than the releases berth knows (v1.{OLDEST} and v1.{RELEASE}), outside the supported skew: following berth's oldest, v1.{OLDEST}"
            ),
        }
    }
}

/// A gate's maturity, as the `stage` label of `kubernetes_feature_enabled`
/// spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Not available at this release.
    PreAlpha,
    /// Off by default, may change or go.
    Alpha,
    /// Usually on by default.
    Beta,
    /// Generally available (the label is empty).
    Ga,
    /// To be removed.
    Deprecated,
}

impl Stage {
    /// component-base's spelling (`""` for GA).
    pub fn label(self) -> &'static str {
        match self {
            Self::PreAlpha => "PRE-ALPHA",
            Self::Alpha => "ALPHA",
            Self::Beta => "BETA",
            Self::Ga => "",
            Self::Deprecated => "DEPRECATED",
        }
    }

    /// A name for people (docs, logs).
    pub fn human(self) -> &'static str {
        match self {
            Self::PreAlpha => "pre-alpha",
            Self::Alpha => "alpha",
            Self::Beta => "beta",
            Self::Ga => "GA",
            Self::Deprecated => "deprecated",
        }
    }
}

/// One entry of a gate's versioned specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The minor version (1.x) from which this spec holds.
    pub since: u16,
    /// The default value.
    pub default: bool,
    /// The maturity.
    pub stage: Stage,
    /// Whether the value is locked to the default.
    pub locked: bool,
    /// The compatibility version this spec needs, when it has one (upstream's
    /// `MinCompatibilityVersion`).
    pub min_compat: Option<u16>,
}

impl Spec {
    const UNAVAILABLE: Spec = Spec {
        since: 0,
        default: false,
        stage: Stage::PreAlpha,
        locked: false,
        min_compat: None,
    };
}

/// Which values of a gate berth implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Both: the gate changes what berth does, as upstream's changes what
    /// kube-scheduler does (or changes only upstream's speed, and berth
    /// decides alike either way).
    Both,
    /// Only the default of the release followed; the other value stops
    /// startup.
    DefaultOnly,
}

/// A gate: its name, its specs by version, what berth does with it.
#[derive(Debug, Clone, Copy)]
pub struct GateDef {
    /// The gate.
    pub feature: Feature,
    /// Upstream's name.
    pub name: &'static str,
    /// Upstream's versioned specs, oldest first.
    pub specs: &'static [Spec],
    /// Gates that must be on while this one is.
    pub depends_on: &'static [Feature],
    /// The values berth implements.
    pub serves: Serves,
    /// What the gate changes in berth (for the docs and errors).
    pub effect: &'static str,
}

impl GateDef {
    /// The spec in force at release 1.`minor` (compatibility version
    /// 1.`minor - 1`).
    pub fn spec_at(&self, minor: u16) -> Spec {
        let compat = minor.saturating_sub(1);
        self.specs
            .iter()
            .rev()
            .find(|s| s.since <= minor && s.min_compat.is_none_or(|m| compat >= m))
            .copied()
            .unwrap_or(Spec::UNAVAILABLE)
    }

    /// The spec in force at [`RELEASE`].
    pub fn spec(&self) -> Spec {
        self.spec_at(RELEASE)
    }
}

impl Feature {
    /// The gate's definition.
    pub fn def(self) -> &'static GateDef {
        &GATES[self as usize]
    }

    /// Upstream's name.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The gate named `name`.
    pub fn from_name(name: &str) -> Option<Feature> {
        GATES.iter().find(|g| g.name == name).map(|g| g.feature)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// component-base's generic gates: each sets every gate of its stage that
/// is not named on its own.
pub const ALL_ALPHA: &str = "AllAlpha";
/// See [`ALL_ALPHA`].
pub const ALL_BETA: &str = "AllBeta";

/// Why `--feature-gates` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// A value component-base refuses, with its message, wrapped as pflag
    /// wraps a flag's error.
    #[error("invalid argument {value:?} for \"--feature-gates\" flag: {message}")]
    Flag {
        /// The flag's value as given.
        value: String,
        /// component-base's message.
        message: String,
    },
    /// A value berth does not implement.
    #[error(
        "feature gate {gate}={value} is not implemented by berth (it follows kube-scheduler v1.{release} with {gate}={default}): {effect}"
    )]
    NotImplemented {
        /// The release followed.
        release: u16,
        /// The gate.
        gate: &'static str,
        /// The value asked for.
        value: bool,
        /// The value berth implements.
        default: bool,
        /// What the gate does.
        effect: &'static str,
    },
}

/// The gates in force: the defaults of the release followed with what
/// `--feature-gates` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGates {
    /// Every name set, as upstream's `enabledRaw` (the generic gates too).
    raw: BTreeMap<String, bool>,
    /// Resolved value of each gate, by [`Feature`] index.
    enabled: Vec<bool>,
    /// The release whose specs apply.
    release: u16,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self::at_release(RELEASE)
    }
}

impl FeatureGates {
    /// The defaults of release 1.`minor`.
    pub fn at_release(minor: u16) -> Self {
        Self {
            raw: BTreeMap::new(),
            enabled: GATES.iter().map(|g| g.spec_at(minor).default).collect(),
            release: minor,
        }
    }

    /// Parses each `--feature-gates` value in turn (as pflag calls `Set`
    /// once per occurrence), then checks that berth implements what was
    /// asked.
    pub fn from_flags<S: AsRef<str>>(values: &[S]) -> Result<Self, FeatureGateError> {
        Self::from_flags_at(RELEASE, values)
    }

    /// [`Self::from_flags`] on the defaults of release 1.`minor` (the
    /// emulation version: locks, stages and the gates that exist are that
    /// release's too).
    pub fn from_flags_at<S: AsRef<str>>(
        minor: u16,
        values: &[S],
    ) -> Result<Self, FeatureGateError> {
        let mut g = Self::at_release(minor);
        for v in values {
            g.set(v.as_ref())?;
        }
        g.check_implemented()?;
        Ok(g)
    }

    /// component-base's `Set`: parses `Name=bool,...` and stores it on top
    /// of what earlier calls set. Nothing changes on error.
    pub fn set(&mut self, value: &str) -> Result<(), FeatureGateError> {
        let flag = |message: String| FeatureGateError::Flag {
            value: value.to_string(),
            message,
        };
        let mut m = BTreeMap::new();
        for s in value.split(',') {
            if s.is_empty() {
                continue;
            }
            let mut kv = s.splitn(2, '=');
            let k = kv.next().unwrap_or_default().trim();
            let Some(v) = kv.next() else {
                return Err(flag(format!("missing bool value for {k}")));
            };
            let v = v.trim();
            let b = parse_go_bool(v).ok_or_else(|| {
                flag(format!(
                    "invalid value of {k}={v}, err: strconv.ParseBool: parsing {}: invalid syntax",
                    go_quote(v)
                ))
            })?;
            m.insert(k.to_string(), b);
        }
        let mut raw = self.raw.clone();
        raw.extend(m);
        let enabled = self.resolve(&raw).map_err(flag)?;
        self.raw = raw;
        self.enabled = enabled;
        Ok(())
    }

    /// Upstream's `unsafeSetFromMap`: the values `raw` gives every gate.
    fn resolve(&self, raw: &BTreeMap<String, bool>) -> Result<Vec<bool>, String> {
        let mut errs = Vec::new();
        let mut explicit: Vec<Option<bool>> = vec![None; GATES.len()];
        let mut all_alpha = None;
        let mut all_beta = None;
        for (k, &v) in raw {
            match k.as_str() {
                ALL_ALPHA => {
                    all_alpha = Some(v);
                    continue;
                }
                ALL_BETA => {
                    all_beta = Some(v);
                    continue;
                }
                _ => {}
            }
            let Some(f) = Feature::from_name(k) else {
                // Upstream returns at the first unknown name.
                errs.push(format!("unrecognized feature gate: {k}"));
                return Err(aggregate(errs));
            };
            let spec = f.def().spec_at(self.release);
            if spec.locked && spec.default != v {
                errs.push(format!(
                    "cannot set feature gate {k} to {v}, feature is locked to {}",
                    spec.default
                ));
                continue;
            }
            if spec.stage == Stage::PreAlpha {
                errs.push(format!(
                    "cannot set feature gate {k} to {v}, feature is PreAlpha at emulated version 1.{}, min compatibility version 1.{}",
                    self.release,
                    self.release.saturating_sub(1)
                ));
                continue;
            }
            match spec.stage {
                Stage::Ga => tracing::warn!(
                    "Setting GA feature gate {k}={v}. It will be removed in a future release."
                ),
                Stage::Deprecated => tracing::warn!(
                    "Setting deprecated feature gate {k}={v}. It will be removed in a future release."
                ),
                _ => {}
            }
            explicit[f as usize] = Some(v);
        }
        if !errs.is_empty() {
            return Err(aggregate(errs));
        }
        let enabled: Vec<bool> = GATES
            .iter()
            .map(|g| {
                let spec = g.spec_at(self.release);
                explicit[g.feature as usize]
                    .or(match spec.stage {
                        Stage::Alpha => all_alpha,
                        Stage::Beta => all_beta,
                        _ => None,
                    })
                    .unwrap_or(spec.default)
            })
            .collect();
        for g in GATES.iter().filter(|g| enabled[g.feature as usize]) {
            let off: Vec<&str> = g
                .depends_on
                .iter()
                .filter(|d| !enabled[**d as usize])
                .map(|d| d.name())
                .collect();
            if !off.is_empty() {
                errs.push(format!(
                    "{} is enabled, but depends on features that are disabled: [{}]",
                    g.name,
                    off.join(" ")
                ));
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(errs));
        }
        Ok(enabled)
    }

    /// Refuses a value berth does not implement, naming the gate.
    pub fn check_implemented(&self) -> Result<(), FeatureGateError> {
        for g in GATES {
            let spec = g.spec_at(self.release);
            let v = self.enabled[g.feature as usize];
            if g.serves == Serves::DefaultOnly && v != spec.default {
                return Err(FeatureGateError::NotImplemented {
                    release: self.release,
                    gate: g.name,
                    value: v,
                    default: spec.default,
                    effect: g.effect,
                });
            }
        }
        Ok(())
    }

    /// Whether `f` is on.
    #[inline]
    pub fn enabled(&self, f: Feature) -> bool {
        self.enabled[f as usize]
    }

    /// The minor release whose specs apply (1.`release`).
    pub fn release(&self) -> u16 {
        self.release
    }

    /// Whether `f` was named by `--feature-gates` (on its own, not through
    /// `AllAlpha`/`AllBeta`).
    pub fn is_explicit(&self, f: Feature) -> bool {
        self.raw.contains_key(f.name())
    }

    /// Sets `f` without the flag's checks (tests and embedders).
    pub fn with(mut self, f: Feature, on: bool) -> Self {
        self.enabled[f as usize] = on;
        self.raw.insert(f.name().to_string(), on);
        self
    }

    /// The stage of `f` at the release in force.
    pub fn stage(&self, f: Feature) -> Stage {
        f.def().spec_at(self.release).stage
    }

    /// The names set by flag, with their values (the generic gates too).
    pub fn explicitly_set(&self) -> impl Iterator<Item = (&str, bool)> {
        self.raw.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Every available gate with its stage and value, the generic gates
    /// (`AllAlpha`, `AllBeta`) included, sorted by name: what
    /// `kubernetes_feature_enabled` shows.
    pub fn all(&self) -> Vec<(&'static str, Stage, bool)> {
        let mut v: Vec<(&'static str, Stage, bool)> = GATES
            .iter()
            .filter_map(|g| {
                let s = g.spec_at(self.release);
                (s.stage != Stage::PreAlpha).then_some((
                    g.name,
                    s.stage,
                    self.enabled[g.feature as usize],
                ))
            })
            .collect();
        v.push((
            ALL_ALPHA,
            Stage::Alpha,
            self.raw.get(ALL_ALPHA).copied().unwrap_or(false),
        ));
        v.push((
            ALL_BETA,
            Stage::Beta,
            self.raw.get(ALL_BETA).copied().unwrap_or(false),
        ));
        v.sort_by_key(|(n, _, _)| *n);
        v
    }

    /// `Name=bool` for every gate, sorted, comma-separated (the startup log).
    pub fn summary(&self) -> String {
        self.all()
            .iter()
            .map(|(n, _, on)| format!("{n}={on}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The values plugins read.
    pub fn features(&self) -> Features {
        Features::from_gates(self)
    }
}

/// The `--feature-gates` value that turns off what v1.`RELEASE` turned on
/// since v1.`RELEASE - 1` (and on what it turned off), for every gate whose
/// default changed and that is not locked now: with it, berth decides as
/// the previous release did.
pub fn previous_release_flag() -> String {
    let prev = RELEASE - 1;
    GATES
        .iter()
        .filter_map(|g| {
            let (old, new) = (g.spec_at(prev), g.spec());
            (old.stage != Stage::PreAlpha && old.default != new.default && !new.locked)
                .then(|| format!("{}={}", g.name, old.default))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.Quote` for the characters a flag carries.
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

/// apimachinery's aggregate error: one message alone, several in brackets.
fn aggregate(errs: Vec<String>) -> String {
    if errs.len() == 1 {
        errs.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", errs.join(", "))
    }
}

/// The gate values plugins and the scheduler read, copied once when
/// profiles and plugins are built (upstream's `feature.Features`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// StorageCapacityScoring: VolumeBinding scores nodes by the storage
    /// capacity left for dynamic provisioning; `shape` is accepted.
    pub enable_storage_capacity_scoring: bool,
    /// VolumeLimitScaling: NodeVolumeLimits refuses a node whose CSINode
    /// lacks a driver whose CSIDriver sets `preventPodSchedulingIfMissing`.
    pub enable_volume_limit_scaling: bool,
    /// DRADeviceTaintRules: DeviceTaintRules taint the devices they select.
    pub enable_dra_device_taint_rules: bool,
    /// DRADeviceTaints: devices' taints (and their tolerations) count.
    pub enable_dra_device_taints: bool,
    /// OpportunisticBatching: pods with the same scheduling signature reuse
    /// the previous cycle's filtering and scoring.
    pub enable_opportunistic_batching: bool,
    /// GenericWorkload: Workload and PodGroup scheduling.
    pub enable_generic_workload: bool,
    /// PodGroupPreemptionPolicy: a PodGroup preempts by its own
    /// `preemptionPolicy` (off: by its pods').
    pub enable_pod_group_preemption_policy: bool,
}

impl Features {
    /// The values of `gates`.
    pub fn from_gates(gates: &FeatureGates) -> Self {
        Self {
            enable_storage_capacity_scoring: gates.enabled(Feature::StorageCapacityScoring),
            enable_volume_limit_scaling: gates.enabled(Feature::VolumeLimitScaling),
            enable_dra_device_taint_rules: gates.enabled(Feature::DRADeviceTaintRules),
            enable_dra_device_taints: gates.enabled(Feature::DRADeviceTaints),
            enable_opportunistic_batching: gates.enabled(Feature::OpportunisticBatching),
            enable_generic_workload: gates.enabled(Feature::GenericWorkload),
            enable_pod_group_preemption_policy: gates.enabled(Feature::PodGroupPreemptionPolicy),
        }
    }
}

impl Default for Features {
    /// v1.37's defaults.
    fn default() -> Self {
        Self::from_gates(&FeatureGates::default())
    }
}
