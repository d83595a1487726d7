//! kubectl-berth: the kubectl plugin (`kubectl berth ...`), berthctl's
//! questions asked of the berthd that schedules a cluster: why a pod is
//! pending, where a pod would go, whether N replicas fit, what waits.
//!
//! It follows kubectl's conventions: `--kubeconfig`, `--context`, `-n`
//! (default: the context's namespace), `-A`, `-o json|yaml|wide`. berthd is
//! reached through the API server, by a port-forward to a ready pod of the
//! berth Service (the Lease holder's first), or directly with
//! `--berth ADDR`. With `--berth` and no kubeconfig to be found, it asks
//! berthd alone, as berthctl does: pods come from berthd's Cluster service
//! and the namespace is `-n`, else `default`.
//!
//! Exit codes: 0 on success, 1 on errors, 2 on usage errors, 3 when a dry
//! run's or simulation's answer is incomplete (as berthctl's); `why`
//! answers 0 when the pod would be scheduled now, 1 when not (or when
//! berthd could not tell), and 2 on errors (as `kubectl diff` answers 0, 1
//! and above 1).

mod cluster;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use berth_client::{Client, ConnectOptions, cli};
use clap::{Parser, Subcommand, ValueEnum};

use cli::Rpc;
use cli::output::{Output, StdoutClosed};
use cli::tls::TlsArgs;
use cli::{dryrun, files, queue, simulate, why};
use cluster::{Access, Cluster, Forward, ObjectName, Search};

/// Output formats, as kubectl spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// JSON: berth's answers as canonical proto3 JSON.
    Json,
    /// The same as YAML.
    Yaml,
    /// The table with more columns (`why`: scores and every rejecting
    /// plugin).
    Wide,
}

/// Ask the berth scheduler of this cluster why a pod is pending, where a pod
/// would go, whether a batch fits, and what waits.
#[derive(Debug, Parser)]
#[command(name = "kubectl berth", bin_name = "kubectl berth", version)]
struct Args {
    /// Path to the kubeconfig file (default: KUBECONFIG, then
    /// ~/.kube/config, then the pod's service account).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,

    /// The namespace (default: the context's, or "default").
    #[arg(long, short = 'n', global = true, value_name = "NAMESPACE")]
    namespace: Option<String>,

    /// Output format: json, yaml or wide (default: a table).
    #[arg(long, short = 'o', global = true, value_enum)]
    output: Option<Format>,

    /// berthd's gRPC address (host:port or URI), instead of a port-forward
    /// through the API server.
    #[arg(long, global = true, value_name = "ADDR")]
    berth: Option<String>,

    /// The Service in front of berthd.
    #[arg(
        long,
        global = true,
        value_name = "NAMESPACE/NAME",
        default_value = "kube-system/berth"
    )]
    berth_service: ObjectName,

    /// The Service's gRPC port (its name).
    #[arg(long, global = true, value_name = "NAME", default_value = "grpc")]
    berth_port: String,

    /// The Lease berth's replicas elect a leader with; the holder's pod is
    /// asked first.
    #[arg(
        long,
        global = true,
        value_name = "NAMESPACE/NAME",
        default_value = "kube-system/berth"
    )]
    berth_lease: ObjectName,

    #[command(flatten)]
    tls: TlsArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Why is this pod pending? What berth's scheduler says about it now:
    /// the FailedScheduling summary, per node the first plugin that rejects
    /// it and why, what preemption would do, what claims and volumes lack,
    /// gates and waits. Exit code 0 when it would be scheduled now, 1 when
    /// not.
    Why {
        /// The pod's name (any pod, whichever scheduler owns it).
        pod: String,
        /// Ask this profile of berth (default: the pod's schedulerName when
        /// berth serves it, else berth's only profile).
        #[arg(long, default_value = "")]
        profile: String,
    },
    /// Where would this pod go, and why? Every node's verdict per Filter
    /// plugin and scores per Score plugin; nothing is bound.
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
    /// Would these pods fit, and where? Placed one after another on a copy
    /// of the cluster.
    Simulate {
        /// Pods, Deployments, ReplicaSets, StatefulSets or Jobs; `-` reads
        /// stdin. Repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
        /// With one object: how many copies to place (default: its
        /// replicas).
        #[arg(long, default_value_t = 0)]
        replicas: u32,
        /// The scheduler profile.
        #[arg(long, default_value = "")]
        profile: String,
    },
    /// The pods berth has yet to schedule, by queue, with why they wait.
    Queue {
        /// Every namespace.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
    },
}

/// How a command ended, for the exit code.
enum Outcome {
    Done,
    DoesNotFit,
    /// The exit code the answer asks for (dry-run, simulate: 3 when it is
    /// incomplete).
    Code(u8),
}

/// The flags' choices, resolved.
struct Context {
    format: Output,
    wide: bool,
    berth_options: ConnectOptions,
}

/// The cluster, once: commands that need it connect on first use.
struct Lazy<'a> {
    args: &'a Args,
    cluster: Option<Cluster>,
    /// The port-forward berthd is reached through, once made.
    forward: Option<Forward>,
    /// Set when berthd is asked alone: `--berth` given, neither
    /// `--kubeconfig` nor `--context`, and no kubeconfig where kubectl
    /// looks (what was looked at, for errors).
    alone: Option<String>,
}

impl<'a> Lazy<'a> {
    fn new(args: &'a Args) -> Self {
        let alone = match (&args.berth, &args.kubeconfig, &args.context) {
            (Some(_), None, None) => {
                let search = Search::now();
                (!search.found).then_some(search.tried)
            }
            _ => None,
        };
        Self {
            args,
            cluster: None,
            forward: None,
            alone,
        }
    }

    async fn get(&mut self) -> Result<&Cluster> {
        if self.cluster.is_none() {
            let access = Access {
                kubeconfig: self.args.kubeconfig.clone(),
                context: self.args.context.clone(),
            };
            self.cluster = Some(Cluster::connect(&access).await?);
        }
        Ok(self.cluster.as_ref().expect("connected just above"))
    }

    /// `-n`, else the context's namespace (berthd alone: `default`, as
    /// berthctl's).
    async fn namespace(&mut self) -> Result<String> {
        match &self.args.namespace {
            Some(n) => Ok(n.clone()),
            None if self.alone.is_some() => Ok("default".into()),
            None => Ok(self.get().await?.namespace.clone()),
        }
    }

    async fn berthd(&mut self, cx: &Context) -> Result<Client> {
        match &self.args.berth {
            Some(addr) => Client::connect_with(addr, &cx.berth_options).await.rpc(),
            None => {
                let args = self.args;
                let (client, forward) = self
                    .get()
                    .await?
                    .berthd(&args.berth_service, &args.berth_port, &args.berth_lease)
                    .await?;
                self.forward = Some(forward);
                Ok(client)
            }
        }
    }
}

/// Objects without a namespace get the one kubectl would give them.
fn default_namespace(docs: &mut [files::Doc], namespace: &str) {
    for d in docs {
        let meta = &mut d.value["metadata"];
        if meta
            .get("namespace")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .is_empty()
            && let Some(m) = meta.as_object_mut()
        {
            m.insert("namespace".into(), namespace.into());
        }
    }
}

async fn run(args: &Args, lazy: &mut Lazy<'_>) -> Result<Outcome> {
    let (format, wide) = match args.output {
        None => (Output::Table, false),
        Some(Format::Wide) => (Output::Table, true),
        Some(Format::Json) => (Output::Json, false),
        Some(Format::Yaml) => (Output::Yaml, false),
    };
    let cx = Context {
        format,
        wide,
        berth_options: args.tls.options()?,
    };
    match &args.command {
        Command::Why { pod, profile } => {
            let namespace = lazy.namespace().await?;
            let (object, mut c) = match (lazy.alone.clone(), &args.berth) {
                // berthd alone: the pod from its Cluster service, as
                // berthctl reads it.
                (Some(tried), Some(addr)) => {
                    let mut c = lazy.berthd(&cx).await?;
                    let object = c.get("Pod", &namespace, pod).await.rpc().with_context(|| {
                        format!(
                            "pod {namespace}/{pod}, read from berthd at {addr} as no kubeconfig was found \
                             (tried {tried}; --kubeconfig FILE reads it from the API server)"
                        )
                    })?;
                    (object, c)
                }
                _ => {
                    let object = lazy.get().await?.pod(&namespace, pod).await?;
                    (serde_json::to_value(&object)?, lazy.berthd(&cx).await?)
                }
            };
            let answer = why::ask(&mut c, object, profile, cx.wide).await?;
            why::print(&answer, cx.format, cx.wide)?;
            Ok(if answer.fits() {
                Outcome::Done
            } else {
                Outcome::DoesNotFit
            })
        }
        Command::DryRun {
            file,
            all_nodes,
            profile,
        } => {
            let src = files::Source::read(file)?;
            let mut docs = src.objects()?;
            let namespace = lazy.namespace().await?;
            default_namespace(&mut docs, &namespace);
            let c = &mut lazy.berthd(&cx).await?;
            let code =
                dryrun::run(c, cx.format, &src, &docs, *all_nodes || cx.wide, profile).await?;
            Ok(Outcome::Code(code))
        }
        Command::Simulate {
            files: paths,
            replicas,
            profile,
        } => {
            let mut inputs = files::read_all(paths)?;
            let namespace = lazy.namespace().await?;
            for (_, docs) in &mut inputs {
                default_namespace(docs, &namespace);
            }
            let c = &mut lazy.berthd(&cx).await?;
            let code = simulate::run(c, cx.format, &inputs, *replicas, profile).await?;
            Ok(Outcome::Code(code))
        }
        Command::Queue { all_namespaces } => {
            let namespace = if *all_namespaces {
                String::new()
            } else {
                lazy.namespace().await?
            };
            let c = &mut lazy.berthd(&cx).await?;
            queue::run(c, cx.format, &namespace).await?;
            Ok(Outcome::Done)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let error_code = if matches!(args.command, Command::Why { .. }) {
        2
    } else {
        1
    };
    let mut lazy = Lazy::new(&args);
    match run(&args, &mut lazy).await {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::DoesNotFit) => ExitCode::from(1),
        Ok(Outcome::Code(code)) => ExitCode::from(code),
        Err(e) if e.is::<StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            let line = match (&args.berth, args.tls.options(), &lazy.forward) {
                (Some(addr), Ok(options), _) => {
                    cli::tls::explain(&e, addr, &options, "kubectl berth").await
                }
                // A call that broke on the port-forward says what the
                // forward reported.
                (None, _, Some(f)) if e.downcast_ref::<cli::RpcError>().is_some() => {
                    format!("{e:#} ({})", f.failure())
                }
                _ => format!("{e:#}"),
            };
            eprintln!("error: {line}");
            ExitCode::from(error_code)
        }
    }
}
