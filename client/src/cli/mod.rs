//! What berthctl and kubectl-berth share: the commands that talk to berthd
//! (dry-run, simulate, queue, why, ...) and how they print. Both binaries
//! use this one module of the library, so the two faces of the client
//! take the same code path; each uses its part (kubectl berth asks, it
//! does not write: apply, get and watch are berthctl's).

pub mod apply;
pub mod dryrun;
pub mod files;
pub mod get;
pub mod output;
pub mod quantity;
pub mod queue;
pub mod replay;
pub mod replay_html;
pub mod replay_report;
pub mod simulate;
pub mod table;
pub mod tls;
pub mod watch;
pub mod why;

use crate::ClientError;
use anyhow::Result;

/// A gRPC error from berthd: its code and message.
#[derive(Debug, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct RpcError {
    /// The status code.
    pub code: tonic::Code,
    /// The server's message.
    pub message: String,
}

/// Turns client errors into the CLI's wording: gRPC errors as
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
