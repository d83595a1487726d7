//! berth-bench-extender: the SchedulingWithExtender workload's Filter+Score
//! logic as a process of its own, served as a berth remote extender
//! (`--protocol grpc`, the berth-extender SDK) or as a kube-scheduler HTTP
//! JSON extender (`--protocol http`, verbs `filter` and `prioritize`), or,
//! for the transport workload, as a bare gRPC stream that answers every
//! Filter request at once (`--protocol echo`).
//!
//! Its first line on stderr is `listening on ADDR`; berth-bench starts it
//! and reads that line. It serves until killed (or, for gRPC, SIGINT or
//! SIGTERM).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use berth_bench::extender::{EXTENDER_NAME, RemoteBench, serve_http};
use berth_extender::ExtenderBuilder;
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Protocol {
    /// A berth remote extender over the gRPC stream.
    Grpc,
    /// kube-scheduler's HTTP JSON extender protocol.
    Http,
    /// The bare gRPC stream, without the SDK: every FilterRequest answered
    /// at once (the ExtenderTransport workload; `berth_bench::transport`).
    Echo,
}

/// Serves the benchmark's extender logic.
#[derive(Debug, Parser)]
#[command(name = "berth-bench-extender", version)]
struct Args {
    /// Which protocol to serve.
    #[arg(long, value_enum)]
    protocol: Protocol,

    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // One thread: the extender's work per call is small, and on a 2-core
    // machine it shares the CPU with the scheduler it serves.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        eprintln!("listening on {addr}");
        match args.protocol {
            Protocol::Grpc => {
                let logic = Arc::new(RemoteBench);
                ExtenderBuilder::new(EXTENDER_NAME)
                    .filter(logic.clone())
                    .score(logic)
                    .wants_nodes(true)
                    .build()
                    .serve_with_incoming(listener)
                    .await
                    .context("serving the gRPC extender")
            }
            Protocol::Http => serve_http(listener)
                .await
                .context("serving the HTTP extender"),
            Protocol::Echo => berth_bench::transport::serve_echo(listener).await,
        }
    })
}
