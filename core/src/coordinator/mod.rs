//! The pure coordinator (SPEC.md §8): who leads, who joins, what a failover
//! keeps. No I/O, no clock, no threads, no randomness: the shell feeds it
//! [`Event`]s and carries out the [`Effect`]s it returns.

mod cycles;
mod io;
mod lifetime;
mod machine;
mod mutant;
mod table;

pub use cycles::{MAX_SEARCH_EDGES, MAX_WAIT_EDGES};
pub use io::{CloseReason, ConnectionId, Effect, EndReason, Event, Term, Timer};
pub use lifetime::{Ending, FIRST_CONNECTION_PATIENCE, Lifetime, Needed};
pub use machine::{
    Coordinator, MAX_CONNECTIONS, MAX_HOST_ENDINGS, MAX_OPEN_REQUESTS_PER_CONNECTION,
};
#[cfg(single_flight_mutants)]
pub use mutant::Mutant;

#[cfg(test)]
mod tests;
