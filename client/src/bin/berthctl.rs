//! berthctl: talk to a running berthd.

use std::process::ExitCode;

use berth_client::{Client, QueueName};
use clap::{Parser, Subcommand, ValueEnum};

/// Command-line client for berthd.
#[derive(Debug, Parser)]
#[command(name = "berthctl", version)]
struct Args {
    /// berthd's gRPC address.
    #[arg(
        long,
        short = 's',
        env = "BERTH_SERVER",
        default_value = "127.0.0.1:50051",
        global = true
    )]
    server: String,

    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pods waiting to be scheduled, by queue, with why they wait.
    Queue {
        /// Only this namespace.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
    },
    /// List nodes or pods.
    Get {
        /// `nodes` or `pods`.
        kind: String,
        /// Only this namespace (pods).
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
    },
}

fn queue_name(q: i32) -> &'static str {
    match QueueName::try_from(q).unwrap_or(QueueName::Unspecified) {
        QueueName::Active => "active",
        QueueName::Backoff => "backoff",
        QueueName::Unschedulable => "unschedulable",
        QueueName::Gated => "gated",
        QueueName::InFlight => "in-flight",
        QueueName::Unspecified => "?",
    }
}

fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(headers.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
}

fn str_at<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

async fn run(args: Args) -> Result<(), berth_client::ClientError> {
    let mut client = Client::connect(&args.server).await?;
    match args.command {
        Command::Queue { namespace } => {
            let pods = client.get_queue(&namespace).await?;
            match args.output {
                Output::Json => {
                    let v: Vec<serde_json::Value> = pods
                        .iter()
                        .map(|p| {
                            serde_json::json!({
                                "namespace": p.namespace, "name": p.name, "queue": queue_name(p.queue),
                                "priority": p.priority, "attempts": p.attempts,
                                "unschedulablePlugins": p.unschedulable_plugins, "lastFailure": p.last_failure,
                                "nominatedNodeName": p.nominated_node_name,
                            })
                        })
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                }
                Output::Table => print_table(
                    &[
                        "NAMESPACE",
                        "NAME",
                        "QUEUE",
                        "PRIORITY",
                        "ATTEMPTS",
                        "REASON",
                    ],
                    pods.iter()
                        .map(|p| {
                            vec![
                                p.namespace.clone(),
                                p.name.clone(),
                                queue_name(p.queue).into(),
                                p.priority.to_string(),
                                p.attempts.to_string(),
                                p.last_failure.clone(),
                            ]
                        })
                        .collect(),
                ),
            }
        }
        Command::Get { kind, namespace } => {
            let items = client.list(&kind, &namespace).await?;
            match args.output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&items).unwrap_or_default()
                ),
                Output::Table if kind.starts_with("no") => print_table(
                    &["NAME", "CPU", "MEMORY", "PODS", "UNSCHEDULABLE"],
                    items
                        .iter()
                        .map(|n| {
                            vec![
                                str_at(n, &["metadata", "name"]).into(),
                                str_at(n, &["status", "allocatable", "cpu"]).into(),
                                str_at(n, &["status", "allocatable", "memory"]).into(),
                                str_at(n, &["status", "allocatable", "pods"]).into(),
                                n["spec"]["unschedulable"]
                                    .as_bool()
                                    .unwrap_or(false)
                                    .to_string(),
                            ]
                        })
                        .collect(),
                ),
                Output::Table => print_table(
                    &["NAMESPACE", "NAME", "NODE", "STATUS"],
                    items
                        .iter()
                        .map(|p| {
                            let node = str_at(p, &["spec", "nodeName"]);
                            let reason = p["status"]["conditions"]
                                .as_array()
                                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
                                .map(|c| match c["status"].as_str() {
                                    Some("True") => "Scheduled".to_string(),
                                    _ => str_at(c, &["reason"]).to_string(),
                                })
                                .unwrap_or_else(|| "Pending".into());
                            vec![
                                str_at(p, &["metadata", "namespace"]).into(),
                                str_at(p, &["metadata", "name"]).into(),
                                if node.is_empty() {
                                    "<none>".into()
                                } else {
                                    node.into()
                                },
                                reason,
                            ]
                        })
                        .collect(),
                ),
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
