//! The pure core of [single-flight](https://docs.rs/single-flight): the wire
//! protocol and the state machines that the `single-flight` crate's
//! tokio shell drives and the model checker explores.
//!
//! Nothing here reads a clock, sleeps, spawns, draws randomness or does I/O,
//! and this crate depends on none of the crates that could (tokio, SQLite,
//! etcd, TLS): its purity is a fact of its manifest. Each machine takes facts
//! that happened as events and returns what to do as plain data:
//!
//! - [`protocol`]: messages, framing, handshake, limits and the fencing token
//!   (SPEC.md §3–§6); it knows nothing of the machines;
//! - [`coordinator`]: who leads, who joins, what a failover keeps (§8);
//! - [`client`]: one process's calls, their replay after a failover (§9);
//! - [`relay`]: a host coordinator's relay, which stands for its host's
//!   processes at the cluster's coordinator (§18.3; not yet used by the
//!   shell, §18.5).
//!
//! Applications use the `single-flight` crate, which re-exports what they
//! need from here. This crate is public so that the model checker and the
//! fuzz targets (in the single-flight repository) build on it alone.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod client;
pub mod coordinator;
pub mod protocol;
pub mod relay;
mod seeded;
#[cfg(test)]
mod testing;

/// Entry points for the fuzz targets and the property tests: they call this
/// crate's own code, never a copy of it.
#[doc(hidden)]
pub mod fuzzing;
