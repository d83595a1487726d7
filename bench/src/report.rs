//! The results of a benchmark run: per-workload outcomes, the machine they
//! ran on, and the markdown table for docs/performance.md.

use serde::{Deserialize, Serialize};

use crate::api::ApiResult;
use crate::run::RunResult;
use crate::transport::TransportResult;

/// What became of one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// It ran to the end; the figures.
    Done(RunResult),
    /// The API workload ran to the end; its figures.
    Api(ApiResult),
    /// The transport workload ran to the end; its figures.
    Transport(TransportResult),
    /// It cannot run here (a variant not built yet).
    Skipped {
        /// The workload's name.
        workload: String,
        /// Why.
        reason: String,
    },
    /// It failed (stuck, wrong placement, error).
    Failed {
        /// The workload's name.
        workload: String,
        /// What went wrong.
        error: String,
    },
}

impl Outcome {
    /// The workload's name.
    pub fn workload(&self) -> &str {
        match self {
            Self::Done(r) => &r.workload,
            Self::Api(r) => &r.workload,
            Self::Transport(r) => &r.workload,
            Self::Skipped { workload, .. } | Self::Failed { workload, .. } => workload,
        }
    }
}

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// The CPU model, from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory, from /proc/meminfo, in MiB.
    pub memory_mib: u64,
    /// The load average when the run started (1 minute), from /proc/loadavg.
    pub load_average: f64,
}

impl Machine {
    /// This machine.
    pub fn current() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_mib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024);
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|l| l.parse().ok()))
            .unwrap_or(0.0);
        Self {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_mib,
            load_average,
        }
    }
}

/// A whole run: the machine and every workload's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// Whether the workloads were the small `--quick` ones.
    pub quick: bool,
    /// The command that produced it.
    pub command: String,
    /// One per workload, in run order.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// Whether any workload failed.
    pub fn any_failed(&self) -> bool {
        self.outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Failed { .. }))
    }

    /// The table, as markdown with aligned columns (and a line about the
    /// machine). Skipped and failed workloads say why in the Pods/s column;
    /// Runs says how many times a workload ran (a row of several is the
    /// median run by pods/s).
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "Machine: {} CPUs ({}), {} MiB memory; load average {:.2} at start. Command: `{}`\n\n",
            m.cpus, m.cpu_model, m.memory_mib, m.load_average, self.command
        );
        let repeated = self
            .outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Done(r) if !r.runs_pods_per_second.is_empty()));
        if repeated {
            out.push_str(
                "A workload measured in under a second ran several times (Runs); its row is the median run by pods/s.\n\n",
            );
        }
        // Groups/s only when a gang workload ran (after Pods/s).
        let gangs = self
            .outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Done(r) if r.groups > 0));
        let mut header = vec![
            "Workload",
            "Nodes",
            "Existing pods",
            "Measured pods",
            "Pods/s",
            "CPU µs/pod",
            "Attempt p50 (ms)",
            "p90 (ms)",
            "p99 (ms)",
            "Peak RSS (MiB)",
            "Runs",
        ];
        if gangs {
            header.insert(5, "Groups/s");
        }
        let mut rows: Vec<Vec<String>> = Vec::new();
        for o in &self.outcomes {
            let row = match o {
                Outcome::Api(_) | Outcome::Transport(_) => continue,
                Outcome::Done(r) => {
                    let mut measured = r.measured_pods.to_string();
                    if r.groups > 0 {
                        measured.push_str(&format!(" in {} gangs", r.groups));
                    }
                    if r.unschedulable_pods > 0 {
                        measured.push_str(&format!(" (+{} that never fit)", r.unschedulable_pods));
                    }
                    let mut row = vec![
                        r.workload.clone(),
                        r.nodes.to_string(),
                        r.existing_pods.to_string(),
                        measured,
                        format!("{:.0}", r.pods_per_second),
                        format!("{:.0}", r.cpu_us_per_pod),
                        format!("{:.3}", r.attempt_p50_ms),
                        format!("{:.3}", r.attempt_p90_ms),
                        format!("{:.3}", r.attempt_p99_ms),
                        format!("{:.0}", r.peak_rss_mib),
                        r.runs_pods_per_second.len().max(1).to_string(),
                    ];
                    if gangs {
                        let groups = if r.groups > 0 {
                            format!("{:.1}", r.groups_per_second)
                        } else {
                            String::new()
                        };
                        row.insert(5, groups);
                    }
                    row
                }
                Outcome::Skipped { workload, reason } => {
                    let mut row = vec![String::new(); header.len()];
                    row[0] = workload.clone();
                    row[4] = format!("skipped: {reason}");
                    row
                }
                Outcome::Failed { workload, error } => {
                    let short: String = error.chars().take(120).collect();
                    let mut row = vec![String::new(); header.len()];
                    row[0] = workload.clone();
                    row[4] = format!("FAILED: {}", short.replace('|', "/"));
                    row
                }
            };
            rows.push(row);
        }
        // Widths from the header and the rows of figures; a skip or failure
        // message overflows its column rather than widening it.
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        let tabled = self
            .outcomes
            .iter()
            .filter(|o| !matches!(o, Outcome::Api(_) | Outcome::Transport(_)));
        for (o, row) in tabled.zip(&rows) {
            for (i, cell) in row.iter().enumerate() {
                if i == 0 || matches!(o, Outcome::Done(_)) {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                if i == 0 {
                    l.push_str(&format!(" {c}{} |", " ".repeat(pad)));
                } else {
                    l.push_str(&format!(" {}{c} |", " ".repeat(pad)));
                }
            }
            l.push('\n');
            l
        };
        // With only API workloads, their table alone.
        if !rows.is_empty() {
            let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
            out.push_str(&line(&header));
        }
        let mut rule = String::from("|");
        for (i, w) in widths.iter().enumerate() {
            if i == 0 {
                rule.push_str(&format!(" {} |", "-".repeat(*w)));
            } else {
                rule.push_str(&format!(" {}: |", "-".repeat(w.saturating_sub(1))));
            }
        }
        rule.push('\n');
        if !rows.is_empty() {
            out.push_str(&rule);
        }
        for row in &rows {
            out.push_str(&line(row));
        }
        let api: Vec<&ApiResult> = self
            .outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Api(r) => Some(r),
                _ => None,
            })
            .collect();
        if !api.is_empty() {
            if !rows.is_empty() {
                out.push('\n');
            }
            out.push_str(&api_table(&api));
        }
        let transport: Vec<&TransportResult> = self
            .outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Transport(r) => Some(r),
                _ => None,
            })
            .collect();
        if !transport.is_empty() {
            if !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(&transport_table(&transport));
        }
        out
    }
}

/// The API workloads' table: DryRun latency on one connection, throughput
/// with several clients.
fn api_table(results: &[&ApiResult]) -> String {
    let header = [
        "Workload",
        "Nodes",
        "Pods",
        "DryRun p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "Clients",
        "DryRuns/s",
        "CPU µs/DryRun",
        "Peak RSS (MiB)",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.nodes.to_string(),
                r.pods.to_string(),
                format!("{:.3}", r.dry_run_p50_ms),
                format!("{:.3}", r.dry_run_p90_ms),
                format!("{:.3}", r.dry_run_p99_ms),
                r.clients.to_string(),
                format!("{:.0}", r.dry_runs_per_second),
                format!("{:.0}", r.cpu_us_per_dry_run),
                format!("{:.0}", r.peak_rss_mib),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// The transport workloads' table: exchanges per second, the CPU of each
/// side per exchange, the round trip of a write.
fn transport_table(results: &[&TransportResult]) -> String {
    let header = [
        "Workload",
        "Node ids",
        "Per write",
        "Exchanges",
        "Exchanges/s",
        "CPU µs/exchange",
        "Extender CPU µs/exchange",
        "Round trip p50 (ms)",
        "p99 (ms)",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.node_ids.to_string(),
                r.per_write.to_string(),
                r.exchanges.to_string(),
                format!("{:.0}", r.exchanges_per_second),
                format!("{:.1}", r.cpu_us_per_exchange),
                format!("{:.1}", r.extender_cpu_us_per_exchange),
                format!("{:.3}", r.round_trip_p50_ms),
                format!("{:.3}", r.round_trip_p99_ms),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// A markdown table with aligned columns: the first left-aligned, the
/// figures right-aligned.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::from("|");
        for (i, c) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
            if i == 0 {
                l.push_str(&format!(" {c}{pad} |"));
            } else {
                l.push_str(&format!(" {pad}{c} |"));
            }
        }
        l.push('\n');
        l
    };
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    out.push('|');
    for (i, w) in widths.iter().enumerate() {
        if i == 0 {
            out.push_str(&format!(" {} |", "-".repeat(*w)));
        } else {
            out.push_str(&format!(" {}: |", "-".repeat(w.saturating_sub(1))));
        }
    }
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: Vec<Outcome>) -> Report {
        Report {
            machine: Machine {
                cpus: 2,
                cpu_model: "test".into(),
                memory_mib: 1024,
                load_average: 0.0,
            },
            quick: true,
            command: "berth-bench".into(),
            outcomes,
        }
    }

    fn done(workload: &str, groups: usize, groups_per_second: f64) -> Outcome {
        Outcome::Done(RunResult {
            workload: workload.into(),
            measured_pods: 100,
            unschedulable_pods: 6,
            pods_per_second: 1000.0,
            groups,
            groups_per_second,
            ..RunResult::default()
        })
    }

    #[test]
    fn groups_per_second_is_a_column_only_when_a_gang_workload_ran() {
        let plain = report(vec![done("SchedulingBasic/x", 0, 0.0)]).markdown();
        assert!(!plain.contains("Groups/s"), "{plain}");

        let text = report(vec![
            done("SchedulingBasic/x", 0, 0.0),
            done("GangScheduling/x", 10, 97.24),
        ])
        .markdown();
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
        let cells = |l: &str| -> Vec<String> {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        };
        let header = cells(lines[0]);
        assert_eq!(header[4..6], ["Pods/s", "Groups/s"]);
        let gang = cells(lines[3]);
        assert_eq!(gang[3], "100 in 10 gangs (+6 that never fit)");
        assert_eq!(gang[5], "97.2");
        assert_eq!(cells(lines[2])[5], "", "no groups for a workload of pods");

        let json = serde_json::to_value(done("GangScheduling/x", 10, 97.24)).unwrap();
        assert_eq!(json["groups"], 10);
        assert_eq!(json["groups_per_second"], 97.24);
        let json = serde_json::to_value(done("SchedulingBasic/x", 0, 0.0)).unwrap();
        assert!(json.get("groups").is_none(), "{json}");
    }
}
