//! berth's public gRPC contract.
//!
//! The `.proto` files under `proto/berth/` are the product's contract; this
//! crate holds only the code generated from them (at build time, by protox and
//! tonic's builder, so no protoc is needed) and the conversions between JSON
//! and `google.protobuf.Struct` that every service taking Kubernetes objects
//! uses.

#![warn(missing_docs)]

/// `berth.v1`: the Scheduler and Cluster services.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("berth.v1");
}

/// `berth.extender.v1`: the protocol between berthd and remote extenders.
pub mod extender {
    /// Version 1 of the protocol.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("berth.extender.v1");
    }

    /// The encoded `FileDescriptorSet` of the extender protocol, for
    /// extenders' gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/extender_descriptor.bin"));
}

pub mod codec;

/// The largest request berthd accepts, in bytes.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// The largest answer berthd sends and berth's clients accept, in bytes.
/// Lists come in pages of at most 4 MiB; the rest is bounded by the
/// cluster's size (a DryRun explaining 15,000 nodes is about 8 MiB).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
pub mod json;

/// The encoded `FileDescriptorSet` of the `berth.v1` protos and their
/// imports, for berthd's gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/berth_descriptor.bin"));
