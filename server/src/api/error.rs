//! API errors and their gRPC codes, mapped in one place.

use tonic::{Code, Status};

/// A request the API refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// The object asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The operation is not possible in this mode.
    #[error("{0}")]
    FailedPrecondition(String),
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        let code = match &e {
            ApiError::InvalidArgument(_) => Code::InvalidArgument,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::FailedPrecondition(_) => Code::FailedPrecondition,
        };
        Status::new(code, e.to_string())
    }
}
