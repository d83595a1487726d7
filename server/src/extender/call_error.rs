//! [`CallError`]: why a call to an extender failed, as every layer of the
//! call stack (breaker, shedding, timeout, the stream) and the answer
//! checks say it. It sits below them all, so that each can name it without
//! importing the connection that stacks them.

use std::time::Duration;

/// Why a call to an extender failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No stream is open (the extender is down or still being dialed); why.
    #[error("not connected ({0})")]
    NotConnected(String),
    /// The stream broke while the call was in flight.
    #[error("the stream broke while the call was in flight")]
    Disconnected,
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Too many calls in flight; this one was shed.
    #[error("overloaded: {0} calls already in flight (maxConcurrentCalls)")]
    Overloaded(usize),
    /// The extender answered with an error.
    #[error("extender error: {0}")]
    Remote(String),
    /// The answer does not fit the request.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The circuit breaker refused the call; why, and for how long.
    #[error("{0}")]
    CircuitOpen(String),
}

impl CallError {
    /// An error answer, never with an empty text.
    pub fn remote(message: impl Into<String>) -> Self {
        let m = message.into();
        Self::Remote(if m.trim().is_empty() {
            "(an error without a message)".into()
        } else {
            m
        })
    }
}
