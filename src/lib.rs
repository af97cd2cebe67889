//! Cross-process single-flight with fencing tokens and coordinator failover.
//!
//! Processes on one machine that share a directory call `run(key, work)`; one
//! of them leads and runs the work under a [`FencingToken`], every other
//! concurrent caller receives its outcome. See `SPEC.md` for the protocol.
//!
//! Layers, from the bottom: [`protocol`] (wire format, pure), [`coordinator`]
//! and [`client`] (the pure state machines), [`election`] (who coordinates),
//! and the tokio shell that runs them over Unix sockets.
#![forbid(unsafe_code)]

pub mod client;
pub mod coordinator;
pub mod election;
pub mod protocol;

pub use protocol::{Epoch, FencingToken};

#[doc(hidden)]
pub mod fuzzing;
