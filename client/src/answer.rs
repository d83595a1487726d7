//! What a DryRun or Simulate answer lets a caller conclude, and the exit
//! code a command-line face of this crate (`berthctl`, `kubectl berth`)
//! gives it, so that every face decides alike.
//!
//! An answer is incomplete when berthd could not run a point that applies
//! (a non-ignorable extender down, a plugin's error): some nodes'
//! verdicts or pods' placements are unknown, and nothing may be concluded
//! from it. A script must be able to tell that from the exit code alone.

use crate::pb::{Completeness, DryRunResponse, NodeVerdict, PluginNote, SimulateResponse};

/// The exit code of a command whose answer is incomplete.
pub const EXIT_INCOMPLETE: u8 = 3;

/// What an answer lets a caller conclude.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conclusion {
    /// Complete: the pod fits (a dry run), or every pod was placed (a
    /// simulation).
    Fits,
    /// Complete: the pod fits no node, or some pod of the simulation fits
    /// nowhere.
    DoesNotFit,
    /// Incomplete: what could not run, one line each ("label-tier at
    /// Filter: ... (3 nodes unjudged)").
    Incomplete(Vec<String>),
}

impl Conclusion {
    /// What a dry run's answer says. An answer of a berthd that predates
    /// `completeness` is incomplete when a node's verdict is an error.
    pub fn of_dry_run(r: &DryRunResponse) -> Self {
        let incomplete = match r.completeness() {
            Completeness::Incomplete => true,
            Completeness::Complete => false,
            Completeness::Unspecified => r.nodes.iter().any(|n| {
                matches!(
                    n.verdict(),
                    NodeVerdict::Error | NodeVerdict::Unknown | NodeVerdict::Unspecified
                )
            }),
        };
        if incomplete {
            Self::incomplete(&r.incomplete, || r.message.clone())
        } else if let Some(g) = &r.pod_group {
            // A group's answer: it fits as a whole, or not (a group held
            // before any cycle, waiting for its PodGroup or its pods, does
            // not).
            if g.fits && g.pre_enqueue.is_none() {
                Self::Fits
            } else {
                Self::DoesNotFit
            }
        } else if r.selected_node.is_empty() {
            Self::DoesNotFit
        } else {
            Self::Fits
        }
    }

    /// What a simulation's answer says.
    pub fn of_simulation(r: &SimulateResponse) -> Self {
        let incomplete = match r.completeness() {
            Completeness::Incomplete => true,
            Completeness::Complete => false,
            Completeness::Unspecified => r.unknown > 0,
        };
        if incomplete {
            Self::incomplete(&r.incomplete, || {
                format!("{} pods could not be judged", r.unknown)
            })
        } else if r.unschedulable > 0 {
            Self::DoesNotFit
        } else {
            Self::Fits
        }
    }

    fn incomplete(notes: &[PluginNote], fallback: impl FnOnce() -> String) -> Self {
        let mut lines: Vec<String> = notes.iter().map(describe).collect();
        if lines.is_empty() {
            lines.push(fallback());
        }
        Self::Incomplete(lines)
    }

    /// The exit code: 0 for a complete answer (fits or not: the answer is
    /// the scheduler's), [`EXIT_INCOMPLETE`] for an incomplete one.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Fits | Self::DoesNotFit => 0,
            Self::Incomplete(_) => EXIT_INCOMPLETE,
        }
    }

    /// For an incomplete answer, the line that says so (for stderr).
    pub fn warning(&self) -> Option<String> {
        match self {
            Self::Incomplete(lines) => Some(format!(
                "the answer is incomplete; do not conclude the pod fits or does not: {}",
                lines.join("; ")
            )),
            _ => None,
        }
    }
}

/// One note as a line: "label-tier at Filter: why (3 nodes, 2 pods)".
pub fn describe(n: &PluginNote) -> String {
    let who = match (n.plugin.is_empty(), n.point.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("{}: ", n.plugin),
        (true, false) => format!("at {}: ", n.point),
        (false, false) => format!("{} at {}: ", n.plugin, n.point),
    };
    let plural = |k: u32, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
    let mut counts = Vec::new();
    if n.nodes > 0 {
        counts.push(plural(n.nodes, "node"));
    }
    if n.pods > 0 {
        counts.push(plural(n.pods, "pod"));
    }
    let counts = if counts.is_empty() {
        String::new()
    } else {
        format!(" ({})", counts.join(", "))
    };
    format!("{who}{}{counts}", n.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::NodeResult;

    fn note(plugin: &str, point: &str, nodes: u32, pods: u32) -> PluginNote {
        PluginNote {
            plugin: plugin.into(),
            point: point.into(),
            reason: "extender \"x\" failed at Filter: not connected".into(),
            nodes,
            pods,
        }
    }

    #[test]
    fn dry_runs_conclude_from_completeness_first() {
        let mut r = DryRunResponse {
            selected_node: "n1".into(),
            completeness: Completeness::Complete as i32,
            ..Default::default()
        };
        assert_eq!(Conclusion::of_dry_run(&r), Conclusion::Fits);
        assert_eq!(Conclusion::of_dry_run(&r).exit_code(), 0);
        r.selected_node.clear();
        assert_eq!(Conclusion::of_dry_run(&r), Conclusion::DoesNotFit);
        assert_eq!(Conclusion::of_dry_run(&r).exit_code(), 0);
        r.completeness = Completeness::Incomplete as i32;
        r.incomplete = vec![note("x", "Filter", 3, 0)];
        let c = Conclusion::of_dry_run(&r);
        assert_eq!(c.exit_code(), EXIT_INCOMPLETE);
        assert_eq!(
            c.warning().unwrap(),
            "the answer is incomplete; do not conclude the pod fits or does not: \
             x at Filter: extender \"x\" failed at Filter: not connected (3 nodes)"
        );
    }

    #[test]
    fn an_older_berthds_answer_is_incomplete_when_a_node_errored() {
        let r = DryRunResponse {
            message: "running \"x\" filter plugin: boom".into(),
            nodes: vec![NodeResult {
                verdict: NodeVerdict::Error as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            Conclusion::of_dry_run(&r),
            Conclusion::Incomplete(vec!["running \"x\" filter plugin: boom".into()])
        );
    }

    #[test]
    fn simulations_conclude_alike() {
        let mut r = SimulateResponse {
            scheduled: 3,
            completeness: Completeness::Complete as i32,
            ..Default::default()
        };
        assert_eq!(Conclusion::of_simulation(&r), Conclusion::Fits);
        r.unschedulable = 1;
        assert_eq!(Conclusion::of_simulation(&r), Conclusion::DoesNotFit);
        r.completeness = Completeness::Incomplete as i32;
        r.unknown = 2;
        r.incomplete = vec![note("x", "Filter", 0, 2)];
        assert_eq!(
            Conclusion::of_simulation(&r),
            Conclusion::Incomplete(vec![
                "x at Filter: extender \"x\" failed at Filter: not connected (2 pods)".into()
            ])
        );
        assert_eq!(Conclusion::of_simulation(&r).exit_code(), 3);
    }
}
