//! Cross-process single-flight with fencing tokens and coordinator failover.
//!
//! Processes on one machine that share a directory call `run(key, work)`; one
//! of them leads and runs the work under a [`FencingToken`], every other
//! concurrent caller receives its outcome (value or failure). There is no
//! daemon: the processes elect a coordinator among themselves, and when it
//! dies another takes over without running any flight again.
//!
//! ```
//! use single_flight::{Role, SingleFlight};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let directory = std::env::temp_dir().join(format!("sf-doc-{}", std::process::id()));
//! // A directory private to this user (created with mode 0700 if missing).
//! let flights = SingleFlight::open(&directory).await?;
//! let landed = flights
//!     .run("thumbnail:cat.jpg", |token| async move {
//!         // Only the leader runs this; give `token` to what the work writes.
//!         Ok::<_, std::io::Error>(format!("rendered under {token}"))
//!     })
//!     .await?;
//! assert_eq!(landed.role, Role::Led); // nobody else was asking
//! println!("{} (token {})", landed.value, landed.token);
//! flights.close().await; // lets this process's results reach its joiners
//! # std::fs::remove_dir_all(&directory)?;
//! # Ok(())
//! # }
//! ```
//!
//! - [`SingleFlight::call`] sets a deadline or another [`Codec`] for one
//!   call; values cross processes as JSON by default.
//! - [`Call::detached`] lets a leader's work outlive its caller while other
//!   callers wait for it (SPEC.md §15); [`Call::reuse_for`] hands callers
//!   that come just after a landing its value, as [`Role::Reused`] (§16).
//! - A call ends with [`Landed`] (its value, whether it [`Role::Led`] or
//!   [`Role::Joined`], and the flight's token) or a [`RunError`]: its own
//!   work's error (`Work`), the leader's failure (`FlightFailed`), a flight
//!   that ended without an outcome (`Interrupted`: the work is not rerun for
//!   this caller; call again to start a new flight), the deadline, or no
//!   coordinator (`Unavailable`). A work may fail with any error that has a
//!   text (`std::error::Error`, `anyhow::Error`, `Box<dyn Error + Send +
//!   Sync>`): [`IntoFailure`] says what its joiners receive (SPEC.md §3.4).
//! - A fencing token only protects what checks it: the resource the work
//!   writes must keep the highest token it has seen and refuse a lower one in
//!   the same atomic step as the write, e.g. `UPDATE t SET body = ?, token = ?
//!   WHERE id = ? AND token < ?`. Tokens grow across coordinator changes.
//! - A call made by a flight's work names that flight as its parent (on the
//!   work's own task or thread, or with [`Call::parent`]); one that would wait
//!   for its own flight, through nested calls in any process, ends at once
//!   with [`RunError::Cycle`] naming the keys, instead of hanging (SPEC.md
//!   §17).
//! - A leader whose work panics hands its joiners the failure `Panic`, then
//!   the panic goes on in its own caller (SPEC.md §9.6).
//! - [`blocking::SingleFlight`] is the same API for callers without an
//!   async runtime; its works are closures run on the calling thread.
//! - [`Builder::status`] asks the coordinator of a directory or a cluster
//!   for its term and flights.
//!
//! `SPEC.md` is the normative protocol, with what is and is not guaranteed;
//! `RELIABILITY.md` and `BENCHMARKS.md` measure it. The default feature `cli`
//! builds the `single-flight` command; embedders can turn it off
//! (`default-features = false`).
//!
//! Layers, from the bottom: the pure core ([`single_flight_core`]: the wire
//! format and the coordinator and client state machines, also driven by the
//! model checker), the backends (who coordinates and how the others reach
//! it: a directory's SQLite claim and Unix socket, a cluster's etcd and TCP
//! with TLS), and the tokio shell that drives the core over any backend.
#![forbid(unsafe_code)]
// The public API is documented. Not checked with `_internal`, which makes
// the library's insides public for its tests and harnesses.
#![cfg_attr(not(feature = "_internal"), warn(missing_docs))]
#![cfg_attr(feature = "_internal", warn(unreachable_pub))]
// docs.rs builds with `--cfg docsrs` on nightly (Cargo.toml): `doc_cfg` marks
// each item that a cargo feature gates with that feature's name. (Nightly
// rustdoc does not know `doc_auto_cfg`: `doc_cfg` alone does this.)
#![cfg_attr(docsrs, feature(doc_cfg))]

use single_flight_core::{client, coordinator, protocol, relay};

// The library's inner modules: private, or public (and hidden) with the
// `_internal` feature, for the tests, benchmarks and chaos harness only,
// which reach them through [`_internal`]. Written out rather than declared
// by a macro: rustfmt does not follow modules that a macro declares, so
// `cargo fmt` would leave them unformatted and unchecked.
#[cfg(feature = "_internal")]
#[doc(hidden)]
pub mod backend;
#[cfg(not(feature = "_internal"))]
mod backend;
#[cfg(feature = "_internal")]
#[doc(hidden)]
pub mod election;
#[cfg(not(feature = "_internal"))]
mod election;
// The reading of TLS files again while the process runs, shared by the
// transport and etcd's client (SPEC.md §14.5). Its documentation is its
// own `//!` text: rustdoc resolves the links of an outer `///` and an inner
// `//!` text of one module in the parent's scope, where the module's items
// are not.
#[cfg(feature = "cluster")]
mod reload;
#[cfg(feature = "_internal")]
#[doc(hidden)]
pub mod shell;
#[cfg(not(feature = "_internal"))]
mod shell;
#[cfg(feature = "_internal")]
#[doc(hidden)]
pub mod transport;
#[cfg(not(feature = "_internal"))]
mod transport;

pub use backend::BackendError;
#[cfg(feature = "cluster")]
pub use backend::cluster::{Cluster, DEFAULT_CLUSTER_GRACE_WINDOW};
pub use backend::default_directory::default_directory;
pub use backend::local::DEFAULT_GRACE_WINDOW;
pub use shell::blocking;
pub use shell::{
    Builder, Call, Codec, Detached, ERROR_NAME, HostCoordinator, IntoFailure, Json, Landed,
    OpenError, Role, RunError, ServeError, SingleFlight, Stats, Status, StatusError, Unavailable,
};
pub use single_flight_core::protocol::{
    CoordinatorStats, DecodeError, Epoch, Failure, FailureCode, FencingToken, FlightStatus,
    GroupStatus, HandshakeError, HostId, HostStatus, HostsStatus, Key, MAX_SHARDS, Shard,
    ShardCount, ShardCountError,
};

/// What the tests, benchmarks and chaos harness reach of the library's
/// insides, behind the `_internal` feature that only they turn on: no
/// stability promise, not for applications.
#[cfg(feature = "_internal")]
#[doc(hidden)]
pub mod _internal {
    pub use crate::shell::{LOG_TARGET, RELAY_LOG_TARGET};
    #[cfg(feature = "cluster")]
    pub use crate::transport::tcp::TlsConfigs;
    pub use crate::{backend, election, shell, transport};
}
