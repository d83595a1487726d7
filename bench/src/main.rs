//! berth-bench: runs scheduler_perf-style workloads through the real berth
//! scheduler and prints throughput, attempt latencies and peak memory per
//! workload (a markdown table, or JSON with `--json`).
//!
//! Each workload runs in a child process of its own (this binary again,
//! with `--child`), so that its peak RSS is its own.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use berth_bench::profile::ExtenderProcess;
use berth_bench::report::{Machine, Outcome, Report};
use berth_bench::runner::{self, RunOptions, RunResult};
use berth_bench::workloads::{self, ExtenderVariant, Profile, Workload};
use clap::Parser;

/// berthd's allocator, so that the scheduler measured here allocates as
/// berthd does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs scheduler_perf-style workloads through the berth scheduler.
#[derive(Debug, Parser)]
#[command(name = "berth-bench", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Sub>,

    /// Run every workload small (a smoke test: no timing is meaningful).
    #[arg(long)]
    quick: bool,

    /// Run only the workloads whose name starts with NAME, or whose family
    /// is NAME; a NAME ending in `$` selects that one name exactly
    /// (case-insensitive; repeatable).
    #[arg(long = "workload", value_name = "NAME")]
    workloads: Vec<String>,

    /// Print JSON instead of a markdown table.
    #[arg(long)]
    json: bool,

    /// List the workloads and exit.
    #[arg(long)]
    list: bool,

    /// Run every workload in this process (peak RSS then accumulates).
    #[arg(long)]
    in_process: bool,

    /// Give up on a workload after this many seconds (a guard against a
    /// hung scheduler; stuck workloads are detected without it).
    #[arg(long, default_value_t = 600)]
    timeout: u64,

    /// Seed for the scheduler's tie-breaking.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Override the configuration's `parallelism` (default 16, capped at
    /// the machine's cores; 1 runs Filter and Score on the scheduling
    /// thread).
    #[arg(long)]
    parallelism: Option<usize>,

    /// The kube workloads record a trace to this file while they run, as
    /// `berthd --record` does (the figures then include its cost).
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,

    /// Log the scheduler's output to stderr with this filter (e.g. `info`).
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,

    /// Internal: run the one workload named exactly by --workload and print
    /// its result as JSON.
    #[arg(long, hide = true)]
    child: bool,

    /// Internal: serve the kube workload's stand-in API server with
    /// --nodes and --pods (see berth_bench::kube).
    #[arg(long, hide = true)]
    serve_apiserver: bool,

    /// Internal: the stand-in's nodes.
    #[arg(long, hide = true, default_value_t = 0)]
    nodes: usize,

    /// Internal: the stand-in's pending pods.
    #[arg(long, hide = true, default_value_t = 0)]
    pods: usize,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Write a trace for `berthctl replay`: a cluster file (or generated
    /// nodes) and pods of berth-bench's templates arriving as a Poisson
    /// process, each deleted after an exponentially distributed lifetime.
    Trace {
        /// Kubernetes YAML (a file or a directory): the first state's
        /// nodes, pods and other objects.
        #[arg(long, value_name = "PATH")]
        cluster: Option<std::path::PathBuf>,
        /// Nodes to generate besides the cluster file's (4 CPU, 32Gi, 110
        /// pods, in zones zone1..zone3).
        #[arg(long, default_value_t = 0)]
        nodes: usize,
        /// Pods that arrive.
        #[arg(long)]
        pods: usize,
        /// Over how long (Go duration).
        #[arg(long, default_value = "1h", value_parser = duration)]
        duration: Duration,
        /// Mean lifetime of a pod (Go duration).
        #[arg(long, default_value = "30m", value_parser = duration)]
        lifetime: Duration,
        /// Templates and their weights: name=weight,... (default,
        /// low-priority, high-priority, high-priority-large-cpu,
        /// pod-anti-affinity, pod-affinity, topology-spreading,
        /// preferred-topology-spreading, node-affinity).
        #[arg(long, default_value = "default")]
        template: String,
        /// How many times a node leaves (coming back ten minutes later).
        #[arg(long, default_value_t = 0)]
        node_churn: usize,
        /// The seed: the same seed makes the same trace.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The file to write (gzip JSON lines).
        #[arg(long, short = 'o', value_name = "FILE")]
        out: std::path::PathBuf,
    },
}

fn duration(s: &str) -> Result<Duration, String> {
    berth_server::config::parse_go_duration(s)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    // As berthd runs (`berth_server::worker_threads`).
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(berth_server::worker_threads(None))
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

fn run_here(w: &Workload, opts: &RunOptions) -> Outcome {
    if let Profile::Api(size) = w.profile {
        return match berth_bench::api::run(&w.name, size, opts.seed, opts.timeout) {
            Ok(r) => Outcome::Api(r),
            Err(e) => Outcome::Failed {
                workload: w.name.clone(),
                error: format!("{e:#}"),
            },
        };
    }
    if let Profile::Transport(size) = w.profile {
        let result = runtime()
            .and_then(|rt| rt.block_on(berth_bench::transport::run(&w.name, size, opts.timeout)));
        return match result {
            Ok(r) => Outcome::Transport(r),
            Err(e) => Outcome::Failed {
                workload: w.name.clone(),
                error: format!("{e:#}"),
            },
        };
    }
    let result = runtime().and_then(|rt| rt.block_on(runner::run(w, opts)));
    match result {
        Ok(r) => Outcome::Done(r),
        Err(e) => Outcome::Failed {
            workload: w.name.clone(),
            error: format!("{e:#}"),
        },
    }
}

fn run_child(w: &Workload, args: &Args) -> Outcome {
    let failed = |error: String| Outcome::Failed {
        workload: w.name.clone(),
        error,
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return failed(format!("cannot find this executable: {e}")),
    };
    let mut cmd = Command::new(exe);
    cmd.args(["--child", "--workload", &w.name])
        .args(["--timeout", &args.timeout.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(
            args.record
                .iter()
                .flat_map(|r| ["--record".into(), r.display().to_string()]),
        )
        .args(
            args.parallelism
                .map(|p| vec!["--parallelism".to_string(), p.to_string()])
                .unwrap_or_default(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if args.quick {
        cmd.arg("--quick");
    }
    if let Some(l) = &args.log {
        cmd.args(["--log", l]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return failed(format!("running the child process: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<Outcome>(text.trim()) {
        Ok(o) => o,
        Err(e) => failed(format!(
            "the child process ({}) printed no result ({e}): {}",
            out.status,
            text.trim()
        )),
    }
}

/// Logging is optional: berth_server logs through `tracing`; without a
/// subscriber its per-pod lines cost next to nothing.
fn init_logging(filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(Sub::Trace {
        cluster,
        nodes,
        pods,
        duration,
        lifetime,
        template,
        node_churn,
        seed,
        out,
    }) = args.command
    {
        let templates = berth_bench::trace::parse_templates(&template)
            .map_err(|e| anyhow::anyhow!("--template: {e}"))?;
        let spec = berth_bench::trace::TraceSpec {
            cluster,
            nodes,
            pods,
            duration,
            lifetime,
            templates,
            node_churn,
            seed,
            out,
        };
        let (records, bytes) = berth_bench::trace::generate(&spec)?;
        eprintln!(
            "wrote {}: {records} records, {:.1} MiB",
            spec.out.display(),
            bytes as f64 / (1u64 << 20) as f64
        );
        return Ok(());
    }
    if let Some(filter) = &args.log {
        init_logging(filter);
    }
    let opts = RunOptions {
        timeout: Duration::from_secs(args.timeout),
        seed: args.seed,
        parallelism: args.parallelism,
        record: args.record.clone(),
    };
    let all = workloads::all(args.quick);
    if args.serve_apiserver {
        let zones = args
            .workloads
            .first()
            .and_then(|n| all.iter().find(|w| &w.name == n))
            .map_or(&[][..], |w| w.zones);
        return runtime()?.block_on(berth_bench::kube::serve_apiserver(
            args.nodes, args.pods, zones,
        ));
    }
    if args.child {
        let [name] = args.workloads.as_slice() else {
            bail!("--child takes exactly one --workload");
        };
        let Some(w) = all.iter().find(|w| &w.name == name) else {
            bail!("no workload named {name:?}");
        };
        let outcome = run_here(w, &opts);
        println!("{}", serde_json::to_string(&outcome)?);
        return Ok(());
    }
    let selected = workloads::select(all, &args.workloads);
    if selected.is_empty() {
        bail!("no workload matches {:?} (see --list)", args.workloads);
    }
    if args.list {
        for w in &selected {
            if let Profile::Api(a) = w.profile {
                println!(
                    "{}\tthe sample cluster; {} timed DryRuns on one connection, then {} from each of {} clients",
                    w.name, a.dry_runs, a.dry_runs, a.clients
                );
                continue;
            }
            if let Profile::Transport(t) = w.profile {
                println!(
                    "{}\t{} FilterRequests of {} node ids, {} per write, to a bare echo extender",
                    w.name, t.exchanges, t.node_ids, t.per_write
                );
                continue;
            }
            if let Some(g) = w.gangs {
                println!(
                    "{}\t{} nodes, {} existing; PodGroup gangs of {} to {} pods (GenericWorkload on): {} gangs of {} pods measured, {} gangs of {} pods that never fit",
                    w.name,
                    w.size.nodes,
                    w.size.existing,
                    g.min_size,
                    g.max_size,
                    g.fit,
                    w.size.measured,
                    g.never_fit,
                    w.size.unschedulable
                );
                continue;
            }
            println!(
                "{}\t{} nodes, {} existing, {} measured, {} never fit",
                w.name, w.size.nodes, w.size.existing, w.size.measured, w.size.unschedulable
            );
        }
        return Ok(());
    }

    // The extender workloads need the extender's binary: built once here
    // if missing, rather than failing each of them.
    if selected.iter().any(|w| {
        matches!(
            w.profile,
            Profile::Extender(ExtenderVariant::Grpc | ExtenderVariant::Http)
                | Profile::Transport(_)
        )
    }) && std::env::var_os("BERTH_BENCH_EXTENDER").is_none()
    {
        ExtenderProcess::binary()?;
    }
    let machine = Machine::current();
    let mut outcomes = Vec::new();
    for w in &selected {
        eprintln!("running {} ...", w.name);
        let run = || {
            if args.in_process {
                run_here(w, &opts)
            } else {
                run_child(w, &args)
            }
        };
        let o = match run() {
            Outcome::Done(first)
                if !args.quick && first.measured_seconds < runner::SHORT_RUN_SECONDS =>
            {
                repeated(first, run)
            }
            o => o,
        };
        match &o {
            Outcome::Done(r) => eprintln!("  {}", summary(r)),
            Outcome::Api(r) => eprintln!(
                "  DryRun p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms on one connection; {:.0} DryRuns/s from {} clients ({:.0} µs CPU each); peak RSS {:.0} MiB",
                r.dry_run_p50_ms,
                r.dry_run_p90_ms,
                r.dry_run_p99_ms,
                r.dry_runs_per_second,
                r.clients,
                r.cpu_us_per_dry_run,
                r.peak_rss_mib
            ),
            Outcome::Transport(r) => eprintln!(
                "  {:.0} exchanges/s, {:.1} µs CPU per exchange here and {:.1} µs in the extender; round trip p50 {:.3} ms, p99 {:.3} ms",
                r.exchanges_per_second,
                r.cpu_us_per_exchange,
                r.extender_cpu_us_per_exchange,
                r.round_trip_p50_ms,
                r.round_trip_p99_ms
            ),
            Outcome::Skipped { reason, .. } => eprintln!("  skipped: {reason}"),
            Outcome::Failed { error, .. } => eprintln!("  FAILED: {error}"),
        }
        outcomes.push(o);
    }
    let mut command = String::from("cargo run --release -p berth-bench --");
    if args.quick {
        command.push_str(" --quick");
    }
    for w in &args.workloads {
        command.push_str(&format!(" --workload {w}"));
    }
    if let Some(p) = args.parallelism {
        command.push_str(&format!(" --parallelism {p}"));
    }
    let report = Report {
        machine,
        quick: args.quick,
        command,
        outcomes,
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(stdout, "{}", report.markdown())?;
    }
    // A closing line test-result readers understand.
    let count = |f: fn(&Outcome) -> bool| report.outcomes.iter().filter(|o| f(o)).count();
    eprintln!(
        "berth-bench: {} passed, {} failed, {} skipped",
        count(|o| matches!(
            o,
            Outcome::Done(_) | Outcome::Api(_) | Outcome::Transport(_)
        )),
        count(|o| matches!(o, Outcome::Failed { .. })),
        count(|o| matches!(o, Outcome::Skipped { .. })),
    );
    if report.any_failed() {
        bail!("some workloads failed");
    }
    Ok(())
}

/// Runs a workload whose first run was short until it has
/// [`runner::RUNS_WHEN_SHORT`] runs, and keeps the median one; a run that
/// fails is the outcome.
fn repeated(first: RunResult, run: impl Fn() -> Outcome) -> Outcome {
    let mut more = Vec::new();
    while more.len() + 1 < runner::RUNS_WHEN_SHORT {
        match run() {
            Outcome::Done(r) => more.push(r),
            other => return other,
        }
    }
    Outcome::Done(runner::median_run(first, more))
}

fn summary(r: &RunResult) -> String {
    format!(
        "{:.0} pods/s over {:.2}s ({:.0} µs CPU per pod); attempt p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms; cycle p99 {:.3} ms; peak RSS {:.0} MiB ({:.0} MiB before the scheduler); existing pods placed in {:.2}s",
        r.pods_per_second,
        r.measured_seconds,
        r.cpu_us_per_pod,
        r.attempt_p50_ms,
        r.attempt_p90_ms,
        r.attempt_p99_ms,
        r.cycle_p99_ms,
        r.peak_rss_mib,
        r.rss_before_scheduler_mib,
        r.setup_seconds
    ) + &groups_note(r)
        + &runs_note(r)
}

/// "; 280 gangs bound whole, 75.2 groups/s" for a gang workload, else "".
fn groups_note(r: &RunResult) -> String {
    if r.groups == 0 {
        return String::new();
    }
    format!(
        "; {} gangs bound whole, {:.1} groups/s",
        r.groups, r.groups_per_second
    )
}

/// "; the median of 5 runs (… pods/s)" for a repeated workload, else "".
fn runs_note(r: &RunResult) -> String {
    if r.runs_pods_per_second.is_empty() {
        return String::new();
    }
    let each: Vec<String> = r
        .runs_pods_per_second
        .iter()
        .map(|p| format!("{p:.0}"))
        .collect();
    format!(
        "; the median of {} runs ({} pods/s)",
        each.len(),
        each.join(", ")
    )
}
