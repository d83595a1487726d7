//! Compiles the .proto files with protox (a pure-Rust protobuf compiler), so a
//! fresh machine needs no protoc, and writes the encoded descriptor set that
//! the server's reflection service publishes.

use std::{env, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &["berth/v1/scheduler.proto", "berth/v1/cluster.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("berth_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
