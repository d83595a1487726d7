//! SDK for writing berth remote extenders in Rust.
//!
//! An extender serves some of the Scheduling Framework's extension points
//! over the `berth.extender.v1.Extender` stream. The protocol and this SDK
//! are not released yet; this crate holds their place in the workspace.

#![warn(missing_docs)]
