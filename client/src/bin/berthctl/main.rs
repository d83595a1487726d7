//! berthctl: the command-line client for berthd.
//!
//! Exit codes: 0 on success, 1 on any error (connection, gRPC, file), 2 on
//! usage errors, 3 when a dry run's or simulation's answer is incomplete
//! (berthd could not run a point that applies, as an extender that is
//! down: see `berth_client::Conclusion`); `why` answers 0 when the pod
//! would fit now, 1 when not (or when berthd could not tell), and 2 on any
//! error.

use std::process::ExitCode;

use anyhow::Result;
use berth_client::{Client, ConnectOptions, cli};
use clap::{Parser, Subcommand};

use cli::Rpc;
use cli::output::{Output, StdoutClosed};
use cli::tls::TlsArgs;
use cli::{apply, dryrun, files, get, queue, replay, simulate, watch, why};

/// Command-line client for berthd: inspect and change its cluster, and ask
/// its scheduler where pods would go and why.
#[derive(Debug, Parser)]
#[command(name = "berthctl", version)]
struct Args {
    /// berthd's gRPC address (host:port or URI).
    #[arg(
        long,
        short = 's',
        env = "BERTH_SERVER",
        default_value = "127.0.0.1:50051",
        global = true
    )]
    server: String,

    #[command(flatten)]
    tls: TlsArgs,

    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or update objects from files (YAML documents, Lists or JSON).
    Apply {
        /// A file to apply; `-` reads stdin. Repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
    },
    /// Delete an object by kind and name, or the objects in files.
    #[command(
        override_usage = "berthctl delete KIND NAME [-n NS]\n       berthctl delete KIND/NAME [-n NS]\n       berthctl delete -f FILE..."
    )]
    Delete {
        /// The kind (node, pod, pvc, podgroup, ... any kind apply takes),
        /// or KIND/NAME.
        #[arg(required_unless_present = "files")]
        kind: Option<String>,
        /// The object's name (unless given as KIND/NAME).
        name: Option<String>,
        /// The namespace (default: "default"); with -f, for objects that
        /// name none.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
        /// Delete each object in this file; `-` reads stdin. Repeatable.
        #[arg(short = 'f', long = "filename", conflicts_with_all = ["kind", "name"])]
        files: Vec<String>,
        /// Succeed when an object does not exist.
        #[arg(long)]
        ignore_not_found: bool,
    },
    /// List objects of a kind, or show one.
    Get {
        /// nodes (no), pods (po), or any kind apply takes (pvc, sc, ns,
        /// svc, pdb, rs, sts, rc, pv, pc, csinodes, podgroups, ...), or
        /// KIND/NAME for one object.
        kind: String,
        /// Only this object.
        name: Option<String>,
        /// Only this namespace (default: every namespace; for a NAME,
        /// "default").
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
    },
    /// Explain where a pod would be scheduled: every node's Filter verdict
    /// and Score plugin scores.
    DryRun {
        /// The pod (YAML or JSON); `-` reads stdin.
        #[arg(short = 'f', long = "filename")]
        file: String,
        /// Evaluate every node with every Filter plugin.
        #[arg(long)]
        all_nodes: bool,
        /// The scheduler profile (default: the pod's schedulerName).
        #[arg(long, default_value = "")]
        profile: String,
    },
    /// Place a batch of pods (or workloads' templates) on a copy of the
    /// cluster and show where each went.
    Simulate {
        /// Pods, Deployments, ReplicaSets, StatefulSets or Jobs; `-` reads
        /// stdin. Repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
        /// With one object: how many copies to place (default: its replicas).
        #[arg(long, default_value_t = 0)]
        replicas: u32,
        /// The scheduler profile.
        #[arg(long, default_value = "")]
        profile: String,
    },
    /// Play a trace (`berthd --record`, or `berth-bench trace`) through
    /// configurations on berthd, in simulated time, each on its own copy
    /// of the cluster, and compare them: pods scheduled and pending (and
    /// why), time to schedule, preemptions, gangs, utilization and
    /// fragmentation over time, and where they placed pods differently.
    Replay {
        /// The trace's files, in order (rotated segments oldest first:
        /// FILE.2 FILE.1 FILE).
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<std::path::PathBuf>,
        /// A KubeSchedulerConfiguration file to replay through
        /// (repeatable: configurations run side by side, one per core).
        #[arg(long = "config", required = true, value_name = "FILE")]
        configs: Vec<std::path::PathBuf>,
        /// Feature gates for every configuration (as berthd's
        /// --feature-gates).
        #[arg(long, value_name = "Name=bool,...")]
        feature_gates: Vec<String>,
        /// How long a binding takes in simulated time (Go duration;
        /// default 0s).
        #[arg(long, value_name = "DURATION", value_parser = replay::parse_duration)]
        bind_latency: Option<std::time::Duration>,
        /// Seed for breaking ties between equally scored nodes (default:
        /// the recorded berthd's --seed, else 1).
        #[arg(long)]
        seed: Option<u64>,
        /// How long the schedulers may go on after the trace's last record
        /// while pods are still tried (Go duration; default 10m).
        #[arg(long, value_name = "DURATION", value_parser = replay::parse_duration)]
        settle: Option<std::time::Duration>,
        /// Also write the report as an HTML page with plots to this file.
        #[arg(long, value_name = "FILE")]
        html: Option<std::path::PathBuf>,
    },
    /// Pods waiting to be scheduled, by queue, with why they wait.
    Queue {
        /// Only this namespace.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
    },
    /// What berth's scheduler says about a pod of its cluster now: why it
    /// is pending, per node the plugin that rejects it, what preemption
    /// would do. Exit code 0 when it would fit now, 1 when not, 2 on
    /// errors.
    Why {
        /// The pod's name.
        pod: String,
        /// The pod's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Ask this profile (default: the pod's schedulerName, or berth's
        /// only profile).
        #[arg(long, default_value = "")]
        profile: String,
        /// Show every node's scores and every rejecting plugin.
        #[arg(long)]
        wide: bool,
    },
    /// Stream scheduling events (or, with --kind, object changes) until
    /// Ctrl-C.
    Watch {
        /// Only this namespace.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
        /// Watch changes to objects of this kind instead (`all` for every
        /// kind).
        #[arg(long)]
        kind: Option<String>,
    },
}

/// Where berthd is and how to reach it.
struct Target {
    server: String,
    options: ConnectOptions,
}

impl Target {
    fn from_args(args: &Args) -> Result<Self> {
        Ok(Self {
            server: args.server.clone(),
            options: args.tls.options()?,
        })
    }
}

async fn connect(target: &Target) -> Result<Client> {
    Client::connect_with(&target.server, &target.options)
        .await
        .rpc()
}

/// Runs the command; the exit code it asks for (0 unless its answer says
/// otherwise: see the exit codes above).
async fn run(args: Args) -> Result<u8> {
    let format = args.output;
    let target = Target::from_args(&args)?;
    let server = &target;
    // Files are read (once: one may be stdin) before connecting, so that a
    // bad file is reported as such whether or not berthd is up.
    match args.command {
        Command::Apply { files } => {
            let inputs = files::read_all(&files)?;
            apply::apply(&mut connect(server).await?, format, &inputs).await?;
        }
        Command::Delete {
            kind,
            name,
            namespace,
            files,
            ignore_not_found,
        } => {
            // `kind` and `name` were checked (and KIND/NAME split) by
            // `split_kind_and_name` while parsing.
            let targets = match (kind, name) {
                (Some(kind), Some(name)) if files.is_empty() => apply::Targets::One { kind, name },
                _ => apply::Targets::Files(files::read_all(&files)?),
            };
            let c = &mut connect(server).await?;
            apply::delete(c, format, targets, &namespace, ignore_not_found).await?;
        }
        Command::Get {
            kind,
            name,
            namespace,
        } => {
            let c = &mut connect(server).await?;
            get::run(c, format, &kind, name.as_deref(), &namespace).await?;
        }
        Command::DryRun {
            file,
            all_nodes,
            profile,
        } => {
            let src = files::Source::read(&file)?;
            let docs = src.objects()?;
            let c = &mut connect(server).await?;
            return dryrun::run(c, format, &src, &docs, all_nodes, &profile).await;
        }
        Command::Simulate {
            files,
            replicas,
            profile,
        } => {
            let inputs = files::read_all(&files)?;
            let c = &mut connect(server).await?;
            return simulate::run(c, format, &inputs, replicas, &profile).await;
        }
        Command::Replay {
            traces,
            configs,
            feature_gates,
            bind_latency,
            seed,
            settle,
            html,
        } => {
            let args = replay::ReplayArgs {
                traces,
                configs,
                feature_gates,
                bind_latency,
                seed,
                settle,
                html,
            };
            // The configurations are read before connecting.
            replay::start_of(&args)?;
            replay::run(&mut connect(server).await?, format, &args).await?;
        }
        Command::Queue { namespace } => {
            queue::run(&mut connect(server).await?, format, &namespace).await?;
        }
        Command::Watch { namespace, kind } => {
            let c = &mut connect(server).await?;
            let shown = berth_client::normalize_addr(&server.server);
            watch::run(c, format, &shown, &namespace, kind.as_deref()).await?;
        }
        Command::Why {
            pod,
            namespace,
            profile,
            wide,
        } => {
            let c = &mut connect(server).await?;
            let object = c.get("Pod", &namespace, &pod).await.rpc()?;
            let answer = why::ask(c, object, &profile, wide).await?;
            why::print(&answer, format, wide)?;
            return Ok(if answer.fits() { 0 } else { 1 });
        }
    }
    Ok(0)
}

/// `KIND NAME`, or kubectl's `KIND/NAME` (`podgroup/train`), for `get`
/// and `delete`: splits KIND/NAME into the two arguments, so that `run`
/// sees them as if given apart. A malformed pair, or `delete` without a
/// name or files, is a usage error (exit 2), as clap's own are.
fn split_kind_and_name(args: &mut Args) -> Result<(), clap::Error> {
    use clap::CommandFactory;
    use clap::error::ErrorKind;
    let (sub, kind, name, needs_name) = match &mut args.command {
        Command::Get { kind, name, .. } => ("get", Some(kind), name, false),
        Command::Delete {
            kind, name, files, ..
        } => ("delete", kind.as_mut(), name, files.is_empty()),
        _ => return Ok(()),
    };
    let usage = |kind: ErrorKind, msg: String| {
        let mut cmd = Args::command();
        // Built, the subcommand's usage names berthctl.
        cmd.build();
        let sub = cmd.find_subcommand_mut(sub).map(|c| c.clone());
        sub.unwrap_or(cmd).error(kind, msg)
    };
    if let Some(kind) = kind
        && let Some((k, n)) = kind.split_once('/')
    {
        if let Some(name) = name {
            return Err(usage(
                ErrorKind::ArgumentConflict,
                format!(
                    "{kind:?} {name:?}: give the kind and name as KIND NAME or as KIND/NAME, not both"
                ),
            ));
        }
        if k.is_empty() || n.is_empty() || n.contains('/') {
            return Err(usage(
                ErrorKind::InvalidValue,
                format!("{kind:?}: expected KIND/NAME"),
            ));
        }
        let (k, n) = (k.to_string(), n.to_string());
        *kind = k;
        *name = Some(n);
    }
    if needs_name && name.is_none() {
        return Err(usage(
            ErrorKind::MissingRequiredArgument,
            "the following required argument was not provided: <NAME> (give KIND NAME or KIND/NAME)"
                .to_string(),
        ));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = Args::parse();
    if let Err(e) = split_kind_and_name(&mut args) {
        e.exit();
    }
    let target = Target::from_args(&args).ok();
    // `why` answers with its exit code: 1 when the pod would not fit, so
    // its errors are 2.
    let error_code = if matches!(args.command, Command::Why { .. }) {
        2
    } else {
        1
    };
    match run(args).await {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is::<StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            let line = match &target {
                Some(t) => cli::tls::explain(&e, &t.server, &t.options, "berthctl").await,
                None => format!("{e:#}"),
            };
            eprintln!("error: {line}");
            ExitCode::from(error_code)
        }
    }
}
