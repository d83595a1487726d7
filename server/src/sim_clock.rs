//! Waiting for the world on a simulated clock.
//!
//! Replay runs a scheduler on a paused tokio clock, which jumps to the next
//! timer whenever every task waits ([`crate::replay`]). A task waiting for
//! something outside the process, a remote extender's answer, waits in
//! real time: while it does, the clock must not jump, or the call's own
//! timeout would fire before the answer could come. A [`Hold`] keeps the
//! clock where it is for as long as it lives (a blocking task of tokio's,
//! which a paused clock never jumps over). Outside a replay it costs a
//! thread-local read.

use std::cell::Cell;

thread_local! {
    static SIMULATED: Cell<bool> = const { Cell::new(false) };
}

/// Says that this thread runs a simulated clock (a replay's thread).
pub fn simulated_here() {
    SIMULATED.with(|s| s.set(true));
}

/// Whether this thread runs a simulated clock: what happens on it is a
/// replay's, not this process's (its process-wide metrics leave it out).
pub fn is_simulated() -> bool {
    SIMULATED.with(|s| s.get())
}

/// Keeps a simulated clock from jumping while it lives.
#[must_use = "the clock is held only while the Hold lives"]
#[derive(Debug)]
pub struct Hold {
    _release: Option<std::sync::mpsc::Sender<()>>,
}

/// A [`Hold`] on this thread's simulated clock (nothing outside a replay).
pub fn hold() -> Hold {
    if !is_simulated() {
        return Hold { _release: None };
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Ends when the Hold (the sender) is dropped.
    drop(tokio::task::spawn_blocking(move || {
        let _ = rx.recv();
    }));
    Hold { _release: Some(tx) }
}
