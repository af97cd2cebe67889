//! The pure client side of one process (SPEC.md §9): which requests to send,
//! when to start the work, how each call ends, and what to replay on a new
//! connection after a failover; and around it the [`Connector`], which
//! decides when to try the coordinator, how long to read a gone one, and
//! when to stop (§10, §14.3). Same shape as the coordinator: no I/O, no
//! clock; the shell feeds them events and carries out their effects.
//!
//! The connector is a machine of its own, beside the client and owning it,
//! rather than more states of the client: the client's rules are about one
//! connection's requests and answers, and are checked by the directory's
//! model over every interleaving of messages; the connector's are about time
//! (pauses, a drain, a deadline), which its own smaller model checks with
//! modelled time (SPEC.md §12.6).

pub mod connector;
mod io;
mod machine;
mod mutant;

pub use connector::Connector;
pub use io::{CallId, CallOptions, Effect, Event, Resolution, StopReason};
pub use machine::Client;
#[cfg(single_flight_mutants)]
pub use mutant::Mutant;

#[cfg(test)]
mod connector_tests;
#[cfg(test)]
mod tests;
