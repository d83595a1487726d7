//! The workloads, modelled on upstream's scheduler_perf
//! (`test/integration/scheduler_perf/*/performance-config.yaml`): each
//! creates nodes, then pods the scheduler places before measuring starts
//! ("existing" pods), then the measured pods.

use crate::objects::PodTemplate;

/// How a workload's scheduler is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// kube-scheduler's default profile.
    Default,
    /// The default profile plus the benchmark's Filter+Score logic, served
    /// as `variant` says (see [`crate::extender`]).
    Extender(ExtenderVariant),
    /// The default profile in kube mode, against a stand-in API server
    /// holding the nodes and the measured pods as a backlog (see
    /// [`crate::kube`]).
    Kube,
    /// No pods are created: berthd's gRPC API is measured over the sample
    /// cluster ([`crate::api`]).
    Api(crate::api::ApiSize),
    /// No scheduler: bare exchanges over a remote extender's gRPC stream
    /// ([`crate::transport`]).
    Transport(crate::transport::TransportSize),
}

/// Where the extender workload's Filter+Score logic runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtenderVariant {
    /// An in-process plugin of the framework.
    Native,
    /// A berth remote extender over its gRPC stream (the berth-extender
    /// SDK, served on a loopback port).
    Grpc,
    /// kube-scheduler's HTTP JSON extender protocol (extender v1).
    Http,
}

impl ExtenderVariant {
    /// The variant's name in workload names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Grpc => "grpc",
            Self::Http => "http",
        }
    }
}

/// A set of pods made from one template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodSet {
    /// The template.
    pub template: PodTemplate,
    /// How many.
    pub count: usize,
    /// Their namespace.
    pub namespace: &'static str,
}

/// Sizes of one run of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Nodes.
    pub nodes: usize,
    /// Pods placed before measuring.
    pub existing: usize,
    /// Measured pods (those that must be bound).
    pub measured: usize,
    /// Pods that never fit, spread evenly through the measured stream.
    pub unschedulable: usize,
}

/// A workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// `Family/Size`, as in upstream's test names.
    pub name: String,
    /// The family (`SchedulingBasic`, ...), for filtering.
    pub family: &'static str,
    /// Node count and pod counts.
    pub size: Size,
    /// Zone label values, given to nodes round robin (empty: no zone).
    pub zones: &'static [&'static str],
    /// The template of the existing pods, and their namespace.
    pub existing: (PodTemplate, &'static str),
    /// The template of the measured pods, and their namespace.
    pub measured: (PodTemplate, &'static str),
    /// The template of the pods that never fit.
    pub unschedulable: PodTemplate,
    /// The scheduler's profile.
    pub profile: Profile,
    /// Devices each node publishes in a ResourceSlice (0: no DRA objects;
    /// otherwise also a DeviceClass and, in the pods' namespaces, the
    /// ResourceClaimTemplate).
    pub devices_per_node: usize,
    /// While the measured pods are created, objects are created and
    /// deleted alongside (SchedulingWithMixedChurn).
    pub churn: bool,
}

impl Workload {
    /// The existing pods.
    pub fn existing_pods(&self) -> PodSet {
        PodSet {
            template: self.existing.0,
            count: self.size.existing,
            namespace: self.existing.1,
        }
    }
}

/// Upstream's three zones of TopologySpreading.
const MOONS: &[&str] = &["moon-1", "moon-2", "moon-3"];
/// Three zones for workloads where zones do not matter.
const ZONES: &[&str] = &["zone1", "zone2", "zone3"];
/// One zone, as upstream labels nodes for the affinity workloads.
const ZONE1: &[&str] = &["zone1"];

fn size(nodes: usize, existing: usize, measured: usize) -> Size {
    Size {
        nodes,
        existing,
        measured,
        unschedulable: 0,
    }
}

#[allow(clippy::too_many_arguments)]
fn workload(
    family: &'static str,
    label: &str,
    size: Size,
    zones: &'static [&'static str],
    existing: (PodTemplate, &'static str),
    measured: (PodTemplate, &'static str),
    profile: Profile,
) -> Workload {
    Workload {
        name: format!("{family}/{label}"),
        family,
        size,
        zones,
        existing,
        measured,
        unschedulable: PodTemplate::HighPriorityLargeCpu,
        profile,
        devices_per_node: 0,
        churn: false,
    }
}

/// Every workload; with `quick`, each small enough for a CI smoke test.
pub fn all(quick: bool) -> Vec<Workload> {
    use PodTemplate as T;
    let d = "default";
    // (full size, quick size) per workload.
    let pick = |full: Size, small: Size| if quick { small } else { full };
    let label = |s: Size| {
        if s.unschedulable > 0 {
            format!(
                "{}Nodes/{}Init/{}Pods/{}Unschedulable",
                s.nodes, s.existing, s.measured, s.unschedulable
            )
        } else {
            format!("{}Nodes_{}Pods", s.nodes, s.measured)
        }
    };
    let mut out = Vec::new();
    let mut add = |family: &'static str,
                   s: Size,
                   zones: &'static [&'static str],
                   existing: (PodTemplate, &'static str),
                   measured: (PodTemplate, &'static str),
                   profile: Profile| {
        out.push(workload(
            family,
            &label(s),
            s,
            zones,
            existing,
            measured,
            profile,
        ));
    };
    let basic = (T::Default, d);
    for (full, small) in [
        (size(500, 1000, 1000), size(20, 20, 40)),
        (size(5000, 1000, 10000), size(200, 50, 200)),
        (size(15000, 1000, 10000), size(600, 50, 200)),
    ] {
        add(
            "SchedulingBasic",
            pick(full, small),
            ZONES,
            basic,
            basic,
            Profile::Default,
        );
    }
    add(
        "SchedulingPodAntiAffinity",
        pick(size(5000, 1000, 2000), size(120, 20, 60)),
        ZONE1,
        (T::PodAntiAffinity, "sched-0"),
        (T::PodAntiAffinity, "sched-1"),
        Profile::Default,
    );
    add(
        "SchedulingPodAffinity",
        pick(size(5000, 5000, 5000), size(120, 50, 100)),
        ZONE1,
        (T::PodAffinity, "sched-0"),
        (T::PodAffinity, "sched-1"),
        Profile::Default,
    );
    add(
        "TopologySpreading",
        pick(size(5000, 5000, 5000), size(120, 50, 100)),
        MOONS,
        basic,
        (T::TopologySpreading, d),
        Profile::Default,
    );
    add(
        "PreferredTopologySpreading",
        pick(size(5000, 5000, 5000), size(120, 50, 100)),
        MOONS,
        basic,
        (T::PreferredTopologySpreading, d),
        Profile::Default,
    );
    // Not in scheduler_perf: the pods of one Deployment behind a Service,
    // with no constraints of their own, so that PodTopologySpread's system
    // defaults (hostname and zone, ScheduleAnyway) score every node; what
    // most pods of a real cluster meet.
    add(
        "DefaultTopologySpreading",
        pick(size(5000, 5000, 5000), size(120, 50, 100)),
        MOONS,
        (T::Replicated, d),
        (T::Replicated, d),
        Profile::Default,
    );
    add(
        "SchedulingNodeAffinity",
        pick(size(5000, 5000, 10000), size(120, 50, 100)),
        ZONE1,
        (T::NodeAffinity, d),
        (T::NodeAffinity, d),
        Profile::Default,
    );
    let unsched = |nodes, existing, measured, unschedulable| Size {
        nodes,
        existing,
        measured,
        unschedulable,
    };
    add(
        "Unschedulable",
        pick(unsched(5000, 100, 10000, 100), unsched(120, 10, 100, 5)),
        ZONES,
        basic,
        basic,
        Profile::Default,
    );
    add(
        "PreemptionBasic",
        pick(size(500, 2000, 500), size(20, 80, 20)),
        ZONES,
        (T::LowPriority, d),
        (T::HighPriority, d),
        Profile::Default,
    );
    // scheduler_perf's SchedulingWithMixedChurn: nodes, pods that never
    // fit, Services and claims created and deleted while the measured pods
    // are scheduled (every 20 ms here, against upstream's 1 s: a run lasts
    // about a second).
    let s = pick(size(5000, 0, 2000), size(100, 0, 100));
    let mut churn = workload(
        "SchedulingWithMixedChurn",
        &label(s),
        s,
        ZONES,
        basic,
        basic,
        Profile::Default,
    );
    churn.churn = true;
    out.push(churn);
    // scheduler_perf's dra/SchedulingWithResourceClaimTemplateStructured
    // at 500 nodes: each node publishes 10 devices, every pod claims one
    // through a template (the embedded resourceclaim controller makes the
    // claims), and the measured pods take the last free devices.
    let s = pick(size(500, 2500, 2500), size(20, 40, 40));
    let mut dra = workload(
        "SchedulingWithResourceClaimTemplateStructured",
        &label(s),
        s,
        ZONES,
        (T::ClaimTemplate, d),
        (T::ClaimTemplate, d),
        Profile::Default,
    );
    dra.devices_per_node = if quick { 4 } else { 10 };
    out.push(dra);
    for variant in [
        ExtenderVariant::Native,
        ExtenderVariant::Grpc,
        ExtenderVariant::Http,
    ] {
        for (full, small) in [
            (size(500, 1000, 1000), size(20, 20, 40)),
            (size(5000, 1000, 10000), size(200, 50, 200)),
        ] {
            let s = pick(full, small);
            out.push(workload(
                "SchedulingWithExtender",
                &format!("{}/{}", variant.name(), label(s)),
                s,
                ZONES,
                basic,
                basic,
                Profile::Extender(variant),
            ));
        }
    }
    for (full, small) in [
        (size(500, 0, 2000), size(20, 0, 50)),
        (size(5000, 0, 10000), size(100, 0, 200)),
    ] {
        let s = pick(full, small);
        out.push(workload(
            "Kube",
            &label(s),
            s,
            ZONES,
            basic,
            basic,
            Profile::Kube,
        ));
    }
    let api = pick_api(quick);
    out.push(Workload {
        name: format!("Api/DryRun/SampleCluster/{}Clients", api.clients),
        family: "Api",
        size: Size {
            nodes: 40,
            existing: 0,
            measured: api.dry_runs,
            unschedulable: 0,
        },
        zones: &[],
        existing: (T::Default, d),
        measured: (T::Default, d),
        unschedulable: T::HighPriorityLargeCpu,
        profile: Profile::Api(api),
        devices_per_node: 0,
        churn: false,
    });
    // The floor under SchedulingWithExtender/grpc: 230 node ids is the
    // window berthd sends at 500 nodes.
    for per_write in [1, 2, 4] {
        let size = crate::transport::TransportSize {
            node_ids: 230,
            per_write,
            exchanges: if quick { 200 } else { 20_000 },
        };
        out.push(Workload {
            name: format!("ExtenderTransport/grpc/230NodeIds_{per_write}PerWrite"),
            family: "ExtenderTransport",
            size: Size {
                nodes: 0,
                existing: 0,
                measured: size.exchanges,
                unschedulable: 0,
            },
            zones: &[],
            existing: (T::Default, d),
            measured: (T::Default, d),
            unschedulable: T::HighPriorityLargeCpu,
            profile: Profile::Transport(size),
            devices_per_node: 0,
            churn: false,
        });
    }
    out
}

/// The API workload's size: 2000 timed DryRuns per client, 4 clients (50
/// with `quick`).
fn pick_api(quick: bool) -> crate::api::ApiSize {
    crate::api::ApiSize {
        dry_runs: if quick { 50 } else { 2000 },
        clients: 4,
    }
}

/// The workloads whose name or family matches one of `filters` (all when
/// `filters` is empty). A filter matches a workload whose name starts with
/// it, or equals its family, case-insensitively.
pub fn select(all: Vec<Workload>, filters: &[String]) -> Vec<Workload> {
    if filters.is_empty() {
        return all;
    }
    all.into_iter()
        .filter(|w| {
            filters.iter().any(|f| {
                let f = f.to_ascii_lowercase();
                w.name.to_ascii_lowercase().starts_with(&f) || w.family.eq_ignore_ascii_case(&f)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_filters_select_by_prefix() {
        for quick in [false, true] {
            let all = all(quick);
            let mut names: Vec<_> = all.iter().map(|w| w.name.clone()).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), all.len());
        }
        let basic = select(all(false), &["schedulingbasic".into()]);
        assert_eq!(basic.len(), 3);
        let one = select(all(false), &["SchedulingBasic/5000Nodes".into()]);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].size.measured, 10000);
        let grpc = select(all(true), &["SchedulingWithExtender/grpc".into()]);
        assert_eq!(grpc.len(), 2);
        let api = select(all(false), &["Api".into()]);
        assert_eq!(api.len(), 1);
        assert!(matches!(api[0].profile, Profile::Api(s) if s.clients == 4));
        let transport = select(all(false), &["ExtenderTransport".into()]);
        let per_write: Vec<usize> = transport
            .iter()
            .filter_map(|w| match w.profile {
                Profile::Transport(t) => Some(t.per_write),
                _ => None,
            })
            .collect();
        assert_eq!(per_write, [1, 2, 4]);
    }
}
