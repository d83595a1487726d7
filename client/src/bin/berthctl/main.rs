//! berthctl: the command-line client for berthd.
//!
//! Exit codes: 0 on success, 1 on any error (connection, gRPC, file), 2 on
//! usage errors, 3 when a dry run's or simulation's answer is incomplete
//! (berthd could not run a point that applies, as an extender that is
//! down: see `berth_client::Conclusion`).

mod apply;
mod dryrun;
mod files;
mod get;
mod output;
mod quantity;
mod queue;
mod simulate;
mod table;
mod watch;

use std::process::ExitCode;

use anyhow::{Context, Result};
use berth_client::{Client, ClientError, ConnectOptions};
use clap::{Parser, Subcommand};

use output::{Output, StdoutClosed};

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

    /// PEM CA bundle to verify berthd's certificate with (TLS).
    #[arg(long, env = "BERTH_TLS_CA", global = true, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    /// PEM client certificate, for berthd's that require one (mTLS).
    #[arg(
        long,
        env = "BERTH_TLS_CERT",
        global = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<std::path::PathBuf>,

    /// PEM key of --tls-cert.
    #[arg(
        long,
        env = "BERTH_TLS_KEY",
        global = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<std::path::PathBuf>,

    /// The name berthd's certificate must carry, if not the address's host.
    #[arg(
        long,
        env = "BERTH_TLS_SERVER_NAME",
        global = true,
        value_name = "NAME"
    )]
    tls_server_name: Option<String>,

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
        override_usage = "berthctl delete KIND NAME [-n NS]\n       berthctl delete -f FILE..."
    )]
    Delete {
        /// The kind (node, pod, pvc, ...).
        #[arg(required_unless_present = "files")]
        kind: Option<String>,
        /// The object's name.
        #[arg(required_unless_present = "files")]
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
        /// nodes (no), pods (po), or any kind the server stores (pvc, sc,
        /// ns, svc, pdb, rs, sts, rc, pv, csinodes).
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
    /// Pods waiting to be scheduled, by queue, with why they wait.
    Queue {
        /// Only this namespace.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
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

/// A gRPC error from berthd: its code and message.
#[derive(Debug, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct RpcError {
    /// The status code.
    pub code: tonic::Code,
    /// The server's message.
    pub message: String,
}

/// Turns client errors into berthctl's wording: gRPC errors as
/// `Code: message`, the others (connection, address) as the client says.
pub trait Rpc<T> {
    /// Converts the error.
    fn rpc(self) -> Result<T>;
}

impl<T> Rpc<T> for Result<T, ClientError> {
    fn rpc(self) -> Result<T> {
        self.map_err(|e| match e {
            ClientError::Status(s) => RpcError {
                code: s.code(),
                message: s.message().to_string(),
            }
            .into(),
            other => anyhow::Error::new(other),
        })
    }
}

/// Where berthd is and how to reach it.
struct Target {
    server: String,
    options: ConnectOptions,
}

impl Target {
    /// Whether a TLS flag was given.
    fn options_want_tls(&self) -> bool {
        self.options.ca_cert.is_some()
            || self.options.client_identity.is_some()
            || self.options.server_name.is_some()
    }

    fn from_args(args: &Args) -> Result<Self> {
        let read = |p: &std::path::Path, flag: &str| {
            std::fs::read(p).with_context(|| format!("{flag} {}", p.display()))
        };
        let mut options = ConnectOptions::default();
        if let Some(ca) = &args.tls_ca {
            options.ca_cert = Some(read(ca, "--tls-ca")?);
        }
        if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
            options.client_identity = Some((read(cert, "--tls-cert")?, read(key, "--tls-key")?));
        }
        options.server_name = args.tls_server_name.clone();
        Ok(Self {
            server: args.server.clone(),
            options,
        })
    }
}

async fn connect(target: &Target) -> Result<Client> {
    Client::connect_with(&target.server, &target.options)
        .await
        .rpc()
}

/// Runs the command; the exit code it asks for (0 unless its answer says
/// otherwise).
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
        Command::Queue { namespace } => {
            queue::run(&mut connect(server).await?, format, &namespace).await?;
        }
        Command::Watch { namespace, kind } => {
            let c = &mut connect(server).await?;
            let shown = berth_client::normalize_addr(&server.server);
            watch::run(c, format, &shown, &namespace, kind.as_deref()).await?;
        }
    }
    Ok(0)
}

/// Whether the failure may be a plaintext connection that broke before any
/// answer: a TLS server's refusal of a plaintext HTTP/2 client reaches
/// tonic as "transport error", "operation was canceled" or an h2 protocol
/// error, depending on timing.
fn broke_in_plaintext(e: &anyhow::Error, target: &Target) -> bool {
    let plaintext = !target.server.starts_with("https://") && !target.options_want_tls();
    plaintext
        && e.downcast_ref::<RpcError>().is_some_and(|r| {
            matches!(
                r.code,
                tonic::Code::Unknown
                    | tonic::Code::Unavailable
                    | tonic::Code::Cancelled
                    | tonic::Code::Internal
            )
        })
}

/// Whether `server` completes a TLS handshake, or fails it for its
/// certificate: either way it speaks TLS.
async fn speaks_tls(server: &str) -> bool {
    let host_port = server.strip_prefix("http://").unwrap_or(server);
    match Client::connect(&format!("https://{host_port}")).await {
        Ok(_) => true,
        Err(ClientError::Connect { message, .. }) => message.contains("certificate"),
        Err(_) => false,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let target = Target::from_args(&args).ok();
    match run(args).await {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is::<StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            match &target {
                Some(t) if broke_in_plaintext(&e, t) && speaks_tls(&t.server).await => {
                    eprintln!(
                        "error: berthd at {} serves TLS, and berthctl spoke plaintext: give --tls-ca FILE (the CA of its certificate; and --tls-cert, --tls-key if it requires client certificates), or an https:// address ({e:#})",
                        t.server
                    );
                }
                _ => eprintln!("error: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}
