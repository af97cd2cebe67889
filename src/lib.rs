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
pub mod shell;

pub use protocol::{Epoch, Failure, FailureCode, FencingToken};
pub use shell::{
    Builder, Call, Codec, DEFAULT_GRACE_WINDOW, IntoFailure, Json, Landed, OpenError, Options,
    Role, RunError, ServeError, SingleFlight, Status, StatusError, Unavailable, status,
};

#[doc(hidden)]
pub mod fuzzing;
