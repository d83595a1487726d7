//! The replay report as one HTML file: the summary table, then plots
//! (inline SVG, no script, nothing fetched) of utilization, pending pods
//! and the largest free CPU over simulated time, one line per
//! configuration. It opens in a browser from disk.

use std::fmt::Write;

use crate::pb;

/// Line colours, one per configuration (colour-blind safe, Okabe-Ito).
const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000",
];

const W: f64 = 760.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a plot: its name and (t in µs, value) points.
struct Line<'a> {
    name: &'a str,
    points: Vec<(u64, f64)>,
}

/// A plot of `lines` with the value axis labelled by `fmt`.
fn plot(
    id: &str,
    title: &str,
    lines: &[Line],
    fmt: &dyn Fn(f64) -> String,
    max_hint: Option<f64>,
) -> String {
    let t_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let v_max = max_hint.unwrap_or_else(|| {
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max)
    });
    let v_max = if v_max <= 0.0 { 1.0 } else { v_max };
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / t_max;
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / v_max);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure id="{id}"><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
    let _ = write!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>"##,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    for i in 0..=4 {
        let v = v_max * i as f64 / 4.0;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="#333">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            esc(&fmt(v))
        );
        let t = t_max * i as f64 / 4.0;
        let xx = x(t);
        let _ = write!(
            svg,
            r##"<text x="{xx:.1}" y="{}" font-size="11" text-anchor="middle" fill="#333">{}</text>"##,
            H - BOTTOM + 16.0,
            esc(&super::replay_report::sim_time(t as u64))
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#333">simulated time</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 6.0
    );
    for (i, l) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<String> = l
            .points
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t as f64), y(*v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline class="series" data-config="{}" fill="none" stroke="{colour}" stroke-width="2.5" points="{}"/>"#,
            esc(l.name),
            pts.join(" ")
        );
    }
    svg.push_str("</svg>");
    svg.push_str(&legend(lines.iter().map(|l| l.name)));
    svg.push_str("</figure>\n");
    svg
}

fn legend<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut s = String::from(r#"<p class="legend">"#);
    for (i, n) in names.enumerate() {
        let _ = write!(
            s,
            r#"<span><i style="background:{}"></i>{}</span>"#,
            COLOURS[i % COLOURS.len()],
            esc(n)
        );
    }
    s.push_str("</p>");
    s
}

fn series_of(c: &pb::ReplayConfigReport) -> pb::ReplaySeries {
    c.series.clone().unwrap_or_default()
}

/// The page.
pub fn render(r: &pb::ReplayReport, trace: &str) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>berth replay: {}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 820px; }}
pre {{ background: #f4f4f4; padding: 12px; overflow-x: auto; font-size: 12px; }}
figure {{ margin: 24px 0; }} figcaption {{ font-weight: 600; margin-bottom: 6px; }}
.legend span {{ margin-right: 18px; font-size: 13px; }}
.legend i {{ display: inline-block; width: 14px; height: 4px; margin-right: 6px; vertical-align: middle; }}
</style></head><body>
<h1>Replay of {}</h1>
<pre>{}</pre>
"#,
        esc(trace),
        esc(trace),
        esc(&super::replay_report::table(r))
    );
    let util = |res: &str| -> Vec<Line> {
        r.configs
            .iter()
            .map(|c| {
                let s = series_of(c);
                let v = s
                    .utilization
                    .iter()
                    .find(|u| u.resource == res)
                    .map(|u| u.ratio.clone())
                    .unwrap_or_default();
                Line {
                    name: &c.name,
                    points: s.t_micros.iter().copied().zip(v).collect(),
                }
            })
            .collect()
    };
    let pct = |v: f64| format!("{:.0}%", v * 100.0);
    html.push_str(&plot(
        "cpu",
        "CPU requested / allocatable",
        &util("cpu"),
        &pct,
        Some(1.0),
    ));
    html.push_str(&plot(
        "memory",
        "Memory requested / allocatable",
        &util("memory"),
        &pct,
        Some(1.0),
    ));
    let pending: Vec<Line> = r
        .configs
        .iter()
        .map(|c| {
            let s = series_of(c);
            Line {
                name: &c.name,
                points: s
                    .t_micros
                    .iter()
                    .copied()
                    .zip(s.pending.iter().map(|v| *v as f64))
                    .collect(),
            }
        })
        .collect();
    html.push_str(&plot(
        "pending",
        "Pods pending",
        &pending,
        &|v| format!("{v:.0}"),
        None,
    ));
    let free: Vec<Line> = r
        .configs
        .iter()
        .map(|c| {
            let s = series_of(c);
            Line {
                name: &c.name,
                points: s
                    .t_micros
                    .iter()
                    .copied()
                    .zip(s.largest_free_cpu_milli.iter().map(|v| *v as f64))
                    .collect(),
            }
        })
        .collect();
    html.push_str(&plot(
        "fragmentation",
        "Largest pod that still fits, by CPU (most CPU free on one node)",
        &free,
        &|v| format!("{v:.0}m"),
        None,
    ));
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_gets_a_line_in_every_plot() {
        let config = |name: &str, cpu: f64| pb::ReplayConfigReport {
            name: name.into(),
            series: Some(pb::ReplaySeries {
                t_micros: vec![0, 1_000_000, 2_000_000],
                pending: vec![3, 1, 0],
                running: vec![0, 2, 3],
                utilization: vec![
                    pb::ReplayUtilization {
                        resource: "cpu".into(),
                        ratio: vec![0.0, cpu / 2.0, cpu],
                    },
                    pb::ReplayUtilization {
                        resource: "memory".into(),
                        ratio: vec![0.0, 0.1, 0.2],
                    },
                ],
                largest_free_cpu_milli: vec![4000, 3000, 2000],
                largest_free_memory_bytes: vec![1, 1, 1],
                cpu_fragmentation: vec![0.0, 0.1, 0.2],
            }),
            ..Default::default()
        };
        let r = pb::ReplayReport {
            configs: vec![config("least", 0.5), config("<most>", 0.7)],
            ..Default::default()
        };
        let html = render(&r, "day.trace.gz");
        assert_eq!(html.matches("<svg").count(), 4);
        assert_eq!(html.matches(r#"class="series""#).count(), 8);
        assert!(html.contains("&lt;most&gt;") && !html.contains("<most>"));
        assert!(
            !html.contains("<script"),
            "no script: it opens from disk anywhere"
        );
    }
}
