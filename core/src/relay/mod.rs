//! The relay of a host coordinator (SPEC.md §18.3): it serves the processes
//! of one host as a coordinator does, and stands for them at the cluster's
//! coordinator over one upstream connection, collapsing their duplicate
//! calls into one upstream party. No I/O, no clock, no threads, no
//! randomness: the shell feeds it [`Event`]s and carries out the
//! [`Effect`]s it returns. Its local side reuses the coordinator's
//! connection names and bounds ([`crate::coordinator`]).

mod io;
mod machine;
mod mutant;

pub use io::{CloseReason, Effect, Event};
pub use machine::Relay;
#[cfg(single_flight_mutants)]
pub use mutant::Mutant;

#[cfg(test)]
mod tests;
