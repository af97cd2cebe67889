//! The pure client side of one process (SPEC.md §9): which requests to send,
//! when to start the work, how each call ends, and what to replay on a new
//! connection after a failover. Same shape as the coordinator: no I/O, no
//! clock; the shell feeds it [`Event`]s and carries out its [`Effect`]s.

mod io;
mod machine;

pub use io::{CallId, CallOptions, Effect, Event, Resolution, StopReason};
pub use machine::Client;

#[cfg(test)]
mod tests;
