//! A replay's report as text: the side-by-side table `berthctl replay`
//! prints (and the HTML report embeds), and the durations it shows.

use crate::pb;

use super::table::Table;

/// A protobuf duration in microseconds (0 when absent).
pub fn micros(d: &Option<prost_types::Duration>) -> u64 {
    d.as_ref().map_or(0, |d| {
        (d.seconds.max(0) as u64) * 1_000_000 + (d.nanos.max(0) as u64) / 1_000
    })
}

/// Simulated time, as a human reads it: `1h02m`, `3m05s`, `12.5s`.
pub fn sim_time(us: u64) -> String {
    let s = us / 1_000_000;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", us as f64 / 1e6)
    }
}

/// A duration as the report shows it: `850µs`, `12.3ms`, `4.20s`, `3m05s`.
pub fn short(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else if us < 60_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else {
        sim_time(us)
    }
}

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// Mean and maximum of a series.
fn mean_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let max = v.iter().cloned().fold(0.0, f64::max);
    (v.iter().sum::<f64>() / v.len() as f64, max)
}

fn bytes(b: i64) -> String {
    const GI: f64 = (1u64 << 30) as f64;
    const MI: f64 = (1u64 << 20) as f64;
    if b as f64 >= GI {
        format!("{:.1}Gi", b as f64 / GI)
    } else {
        format!("{:.0}Mi", b as f64 / MI)
    }
}

/// The report as text: the configurations side by side, why pods wait,
/// and where they placed pods differently.
pub fn table(r: &pb::ReplayReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Replayed {} records ({} segment{}) through {} configuration{}, seed {}.\n\n",
        r.records,
        r.segments,
        if r.segments == 1 { "" } else { "s" },
        r.configs.len(),
        if r.configs.len() == 1 { "" } else { "s" },
        r.seed
    ));
    let mut headers = vec![String::new()];
    headers.extend(r.configs.iter().map(|c| c.name.clone()));
    let mut t = Table::new(headers);
    for i in 1..=r.configs.len() {
        t = t.right(i);
    }
    let row = |t: &mut Table, label: &str, f: &dyn Fn(&pb::ReplayConfigReport) -> String| {
        let mut cells = vec![label.to_string()];
        cells.extend(r.configs.iter().map(f));
        t.row(cells);
    };
    let ttl = |c: &pb::ReplayConfigReport| c.time_to_schedule.unwrap_or_default();
    let series = |c: &pb::ReplayConfigReport| c.series.clone().unwrap_or_default();
    row(&mut t, "pods arrived", &|c| c.arrived.to_string());
    row(&mut t, "scheduled", &|c| c.scheduled.to_string());
    row(&mut t, "still pending", &|c| c.pending.to_string());
    row(&mut t, "deleted while pending", &|c| {
        c.deleted_pending.to_string()
    });
    row(&mut t, "deleted with their node", &|c| {
        c.deleted_with_node.to_string()
    });
    row(&mut t, "time to schedule p50", &|c| {
        short(ttl(c).p50_micros)
    });
    row(&mut t, "time to schedule p99", &|c| {
        short(ttl(c).p99_micros)
    });
    row(&mut t, "time to schedule max", &|c| {
        short(ttl(c).max_micros)
    });
    row(&mut t, "failed attempts", &|c| {
        c.failed_attempts.to_string()
    });
    row(&mut t, "preemptions (victims)", &|c| {
        format!("{} ({})", c.preemptors, c.victims)
    });
    row(&mut t, "gangs placed whole", &|c| {
        format!("{}/{}", c.gangs_whole, c.gangs)
    });
    let resources: Vec<String> = {
        let mut names: Vec<String> = Vec::new();
        for c in &r.configs {
            for u in series(c).utilization {
                if !names.contains(&u.resource) {
                    names.push(u.resource);
                }
            }
        }
        names
    };
    for res in &resources {
        row(&mut t, &format!("{res} use, mean/max"), &|c| {
            let s = series(c);
            let v = s
                .utilization
                .iter()
                .find(|u| &u.resource == res)
                .map(|u| u.ratio.clone())
                .unwrap_or_default();
            let (mean, max) = mean_max(&v);
            format!("{}/{}", pct(mean), pct(max))
        });
    }
    row(&mut t, "largest free cpu, end", &|c| {
        let s = series(c);
        s.largest_free_cpu_milli
            .last()
            .map_or("-".into(), |m| format!("{m}m"))
    });
    row(&mut t, "largest free memory, end", &|c| {
        let s = series(c);
        s.largest_free_memory_bytes
            .last()
            .map_or("-".into(), |b| bytes(*b))
    });
    row(&mut t, "simulated time", &|c| {
        sim_time(micros(&c.simulated))
    });
    row(&mut t, "wall time", &|c| short(micros(&c.wall)));
    out.push_str(&t.render());
    if let Some(n) = r.recorded_scheduled {
        out.push_str(&format!("\nThe recorded scheduler bound {n} pods.\n"));
    }
    let refused: Vec<String> = r
        .configs
        .iter()
        .filter(|c| c.refused_records > 0)
        .map(|c| {
            format!(
                "{}: {} records refused, the first {}",
                c.name, c.refused_records, c.first_refusal
            )
        })
        .collect();
    if !refused.is_empty() {
        out.push('\n');
        for l in refused {
            out.push_str(&format!("{l}\n"));
        }
    }
    if r.configs.iter().any(|c| !c.pending_reasons.is_empty()) {
        out.push_str("\nWhy pods are still pending (pods per reason of their last attempt):\n");
        let mut t = Table::new(["CONFIG", "PODS", "REASON"]).right(1);
        for c in &r.configs {
            for reason in c.pending_reasons.iter().take(5) {
                t.row([
                    c.name.clone(),
                    reason.pods.to_string(),
                    reason.reason.clone(),
                ]);
            }
        }
        out.push_str(&t.render());
    }
    if !r.comparisons.is_empty() {
        out.push_str("\nPlacements compared, pod by pod (pods either placed):\n");
        let mut t = Table::new([
            "A",
            "B",
            "PODS",
            "SAME NODE",
            "DIFFERENT",
            "ONLY A",
            "ONLY B",
        ]);
        for i in 2..=6 {
            t = t.right(i);
        }
        for c in &r.comparisons {
            let share = |n: u64| {
                if c.compared == 0 {
                    n.to_string()
                } else {
                    format!("{n} ({:.0}%)", n as f64 * 100.0 / c.compared as f64)
                }
            };
            t.row([
                c.a.clone(),
                c.b.clone(),
                c.compared.to_string(),
                share(c.same_node),
                share(c.different_node),
                share(c.only_a),
                share(c.only_b),
            ]);
        }
        out.push_str(&t.render());
    }
    out
}
