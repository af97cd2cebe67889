//! A deterministic simulation of whole single-flight clusters (SPEC.md
//! §12.7): the shipped shell — driver, server, client I/O loop — of every
//! process of a cluster, over an in-memory election with etcd's semantics
//! ([`election`]) and an in-memory transport ([`network`]), all on one
//! current-thread tokio runtime whose clock is paused (time jumps to the
//! next timer when every task waits) and whose scheduler is seeded, so
//! that one seed gives one trace ([`trace`]) and a failing seed replays.
//!
//! Why tokio itself and not turmoil or madsim: the shell is tokio code
//! whose election and transport are already seams (`Election`/`Term`,
//! `Transport`/`Listener`), so the real code runs unchanged on a runtime
//! the simulation owns; turmoil would need its own network types in the
//! shell, madsim a patched tokio in every build.
//!
//! The runner ([`world`]) draws a workload and faults from the seed and
//! checks the chaos harness's must-be-zero rows (RELIABILITY.md).
#![forbid(unsafe_code)]

pub mod election;
pub mod host;
pub mod network;
pub mod trace;
pub mod world;

pub use world::{Fault, Faults, Report, Scenario, ShardCalls, run};
