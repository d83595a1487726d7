//! Compiles the .proto files with protox (a pure-Rust protobuf compiler), so a
//! fresh machine needs no protoc, and writes the encoded descriptor sets: the
//! public API's (which berthd's reflection service publishes) and the
//! extender protocol's (which extenders' reflection publishes), kept apart so
//! each server advertises only the services it serves.

use std::{env, path::PathBuf};

use prost::Message;

const API: &[&str] = &["berth/v1/scheduler.proto", "berth/v1/cluster.proto"];
const EXTENDER: &[&str] = &["berth/extender/v1/extender.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    for (protos, descriptor) in [
        (API, "berth_descriptor.bin"),
        (EXTENDER, "extender_descriptor.bin"),
    ] {
        for proto in protos {
            println!("cargo:rerun-if-changed={proto}");
        }
        let fds = protox::compile(protos, ["."])?;
        std::fs::write(out_dir.join(descriptor), fds.encode_to_vec())?;
        let builder = tonic_prost_build::configure()
            .build_server(true)
            .build_client(true);
        if protos == API {
            // The public services decode through `codec::ApiCodec`, which
            // checks a message's nesting before prost decodes it; it finds
            // a message's descriptor by its type name.
            let mut config = tonic_prost_build::Config::new();
            config.enable_type_names();
            builder
                .codec_path("crate::codec::ApiCodec")
                .compile_fds_with_config(fds, config)?;
        } else {
            builder.compile_fds(fds)?;
        }
    }
    Ok(())
}
