//! `berthctl replay TRACE... --config A.yaml [--config B.yaml ...]`: plays
//! a trace through configurations on berthd (`Scheduler/Replay`), shows
//! progress on stderr (a bar on a terminal, a line every few seconds
//! otherwise) and prints the report: a table, JSON or YAML, and with
//! `--html FILE` a page with plots that opens in a browser.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{Client, pb};
use anyhow::{Context, Result, bail};

use super::Rpc;
use super::output::{Output, emit, emit_proto};
use super::replay_report::{micros, short, sim_time, table};

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayArgs {
    /// The trace's files, in order (rotated segments oldest first).
    pub traces: Vec<PathBuf>,
    /// The configurations' files.
    pub configs: Vec<PathBuf>,
    /// Feature gates for every configuration.
    pub feature_gates: Vec<String>,
    /// How long a binding takes in simulated time.
    pub bind_latency: Option<Duration>,
    /// The seed.
    pub seed: Option<u64>,
    /// How long to go on after the last record.
    pub settle: Option<Duration>,
    /// Where to write the HTML report.
    pub html: Option<PathBuf>,
}

/// Parses a duration as Go writes them (`10ms`, `1m30s`, `2h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration {s:?}: use a number and a unit (ns, us, ms, s, m, h), as 10ms or 1m30s"
        )
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let n: f64 = rest[..end].parse().map_err(|_| bad())?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

fn pb_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A configuration's name: its file's, without the extension.
fn config_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The trace files, one after another.
struct Files {
    paths: std::vec::IntoIter<PathBuf>,
    current: Option<std::fs::File>,
}

impl Read for Files {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(f) = self.current.as_mut() {
                let n = f.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.current = None;
            }
            match self.paths.next() {
                Some(p) => self.current = Some(std::fs::File::open(&p)?),
                None => return Ok(0),
            }
        }
    }
}

/// Runs the command.
pub async fn run(client: &mut Client, format: Output, args: &ReplayArgs) -> Result<()> {
    let start = start_of(args)?;
    // Every file opens before anything is sent.
    for t in &args.traces {
        std::fs::File::open(t).with_context(|| format!("reading {}", t.display()))?;
    }
    let trace = Files {
        paths: args.traces.clone().into_iter(),
        current: None,
    };
    let mut shown = Progress::new(std::io::stderr().is_terminal());
    let report = client
        .replay(start, trace, |p| shown.update(p))
        .await
        .rpc()?;
    shown.finish();
    if let Some(path) = &args.html {
        let title = args
            .traces
            .first()
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        std::fs::write(path, super::replay_html::render(&report, &title))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    match format {
        Output::Table => emit(&table(&report)),
        _ => emit_proto(format, &report),
    }
}

/// The request's first message, from the files named.
pub fn start_of(args: &ReplayArgs) -> Result<pb::ReplayStart> {
    if args.configs.is_empty() {
        bail!("--config: at least one configuration to replay the trace through");
    }
    let mut configs = Vec::new();
    for path in &args.configs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut name = config_name(path);
        // Two files of one name (a/x.yaml, b/x.yaml) get their paths.
        if args
            .configs
            .iter()
            .filter(|p| config_name(p) == name)
            .count()
            > 1
        {
            name = path.display().to_string();
        }
        configs.push(pb::ReplayConfig {
            name,
            config_yaml: text,
            feature_gates: args.feature_gates.clone(),
        });
    }
    Ok(pb::ReplayStart {
        configs,
        bind_latency: args.bind_latency.map(pb_duration),
        seed: args.seed,
        settle: args.settle.map(pb_duration),
    })
}

struct Progress {
    tty: bool,
    last_line: Option<Instant>,
    drawn: bool,
}

impl Progress {
    fn new(tty: bool) -> Self {
        Self {
            tty,
            last_line: None,
            drawn: false,
        }
    }

    fn line(p: &pb::ReplayProgress) -> String {
        let elapsed = micros(&p.elapsed).max(1);
        let parts: Vec<String> = p
            .configs
            .iter()
            .map(|c| {
                let rate = c.records as f64 / (elapsed as f64 / 1e6);
                format!(
                    "{}: {} events, {} simulated, {:.0} events/s{}",
                    c.name,
                    c.records,
                    sim_time(micros(&c.simulated)),
                    rate,
                    if c.done { ", done" } else { "" }
                )
            })
            .collect();
        format!(
            "replay {}: {} read{}; {}",
            short(elapsed),
            p.records_read,
            if p.read_all { " (all)" } else { "" },
            parts.join("; ")
        )
    }

    fn update(&mut self, p: &pb::ReplayProgress) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            // A bar per configuration, by events applied of those read.
            let width = 24usize;
            let bars: Vec<String> = p
                .configs
                .iter()
                .map(|c| {
                    let f = if p.records_read == 0 {
                        0.0
                    } else {
                        (c.records as f64 / p.records_read as f64).min(1.0)
                    };
                    let full = (f * width as f64) as usize;
                    format!(
                        "{} [{}{}]",
                        c.name,
                        "#".repeat(full),
                        ".".repeat(width - full)
                    )
                })
                .collect();
            let _ = write!(err, "\r\x1b[2K{}  {}", bars.join(" "), Self::line(p));
            let _ = err.flush();
            self.drawn = true;
        } else if self
            .last_line
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5))
        {
            let _ = writeln!(err, "{}", Self::line(p));
            self.last_line = Some(Instant::now());
        }
    }

    fn finish(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn times_read_at_a_glance() {
        assert_eq!(short(850), "850µs");
        assert_eq!(short(12_345), "12.3ms");
        assert_eq!(short(4_200_000), "4.20s");
        assert_eq!(sim_time(3_723_000_000), "1h02m");
        assert_eq!(sim_time(185_000_000), "3m05s");
    }
}
