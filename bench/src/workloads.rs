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
    /// The measured pods come in PodGroup gangs, and the scheduler runs
    /// with `GenericWorkload` on (GangScheduling).
    pub gangs: Option<Gangs>,
}

/// The gangs of a gang workload (upstream's `podgroup/gangscheduling`):
/// PodGroups with a gang policy whose `minCount` is their size, created
/// before measuring; their pods (the measured template plus
/// `spec.schedulingGroup.podGroupName`) are the measured stream, gang
/// after gang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gangs {
    /// Gangs that fit; every pod of theirs must be bound.
    pub fit: usize,
    /// Gangs that cannot fit as a whole (their last pod asks for more CPU
    /// than any node has), spread evenly among the others; every pod of
    /// theirs must stay unbound, waiting among the unschedulable pods.
    pub never_fit: usize,
    /// The smallest gang.
    pub min_size: usize,
    /// The largest; sizes step by `min_size` from `min_size` to this,
    /// round robin.
    pub max_size: usize,
}

impl Gangs {
    /// The size of gang `i` (counting the gangs that fit and those that
    /// do not separately).
    pub fn size(&self, i: usize) -> usize {
        let steps = self.max_size / self.min_size;
        self.min_size * (1 + i % steps)
    }

    /// The pods of the first `n` gangs.
    pub fn pods(&self, n: usize) -> usize {
        (0..n).map(|i| self.size(i)).sum()
    }
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

/// The namespace of the gangs (upstream's `gang-ns-0`).
pub const GANG_NAMESPACE: &str = "gang-ns-0";

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
        gangs: None,
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
    let preemption = pick(size(500, 2000, 500), size(20, 80, 20));
    add(
        "PreemptionBasic",
        preemption,
        ZONES,
        (T::LowPriority, d),
        (T::HighPriority, d),
        Profile::Default,
    );
    // PreemptionBasic with the gRPC extender's Filter and Score in the
    // profile: every preemption attempt asks it the what-if too, one
    // PreemptionFilterRequest with all its candidates.
    out.push(workload(
        "PreemptionWithExtender",
        &format!("grpc/{}", label(preemption)),
        preemption,
        ZONES,
        (T::LowPriority, d),
        (T::HighPriority, d),
        Profile::Extender(ExtenderVariant::Grpc),
    ));
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
    // scheduler_perf's podgroup/gangscheduling (GenericWorkload on), at
    // SchedulingBasic's 5000 nodes and 1000 existing pods so that their
    // costs per pod compare: gangs of 8 to 64 pods of the default pod
    // (10,080 pods in 280 gangs); once all fitting, once with 10 more
    // gangs that cannot fit as a whole.
    for never_fit in [0, if quick { 2 } else { 10 }] {
        let gangs = if quick {
            Gangs {
                fit: 6,
                never_fit,
                min_size: 2,
                max_size: 8,
            }
        } else {
            Gangs {
                fit: 280,
                never_fit,
                min_size: 8,
                max_size: 64,
            }
        };
        let s = Size {
            nodes: if quick { 40 } else { 5000 },
            existing: if quick { 20 } else { 1000 },
            measured: gangs.pods(gangs.fit),
            unschedulable: gangs.pods(gangs.never_fit),
        };
        let mut label = format!(
            "{}Nodes/{}Init/{}Gangs_{}Pods",
            s.nodes, s.existing, gangs.fit, s.measured
        );
        if never_fit > 0 {
            label.push_str(&format!("/{never_fit}GangsNeverFit"));
        }
        let mut gang = workload(
            "GangScheduling",
            &label,
            s,
            ZONES,
            basic,
            (T::Default, GANG_NAMESPACE),
            Profile::Default,
        );
        gang.gangs = Some(gangs);
        out.push(gang);
    }
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
        gangs: None,
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
            gangs: None,
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
/// it, or equals its family, case-insensitively; one ending in `$`, only
/// the workload of that name (a gang row without its never-fit sibling,
/// whose name extends it).
pub fn select(all: Vec<Workload>, filters: &[String]) -> Vec<Workload> {
    if filters.is_empty() {
        return all;
    }
    all.into_iter()
        .filter(|w| {
            filters.iter().any(|f| {
                let f = f.to_ascii_lowercase();
                if let Some(exact) = f.strip_suffix('$') {
                    return w.name.to_ascii_lowercase() == exact;
                }
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
        let gangs = select(all(false), &["GangScheduling".into()]);
        assert_eq!(gangs.len(), 2);
        for w in &gangs {
            let g = w.gangs.expect("gangs");
            assert_eq!((g.min_size, g.max_size, g.fit), (8, 64, 280));
            assert_eq!(w.size.nodes, 5000);
            assert_eq!(w.size.measured, g.pods(280));
            assert_eq!(w.size.unschedulable, g.pods(g.never_fit));
        }
        assert_eq!(gangs[1].gangs.map(|g| g.never_fit), Some(10));
        // `$` ends a name: the gang row alone, not the row whose name
        // extends it.
        let exact = select(
            all(false),
            &["gangscheduling/5000Nodes/1000Init/280Gangs_10080Pods$".into()],
        );
        assert_eq!(exact.len(), 1);
        assert_eq!(exact[0].name, gangs[0].name);
        assert!(select(all(false), &["GangScheduling$".into()]).is_empty());
        let sizes: Vec<usize> = (0..9).map(|i| gangs[0].gangs.unwrap().size(i)).collect();
        assert_eq!(sizes, [8, 16, 24, 32, 40, 48, 56, 64, 8]);
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
