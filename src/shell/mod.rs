//! The tokio shell (SPEC.md §10, §11): sockets, timers and the thread that
//! drive the pure coordinator and client, and the public API. It is
//! generic over the backend (`crate::backend`) and never names one.

mod api;
mod backlog;
pub mod blocking;
mod builder;
#[cfg(test)]
mod captured;
mod clock;
mod codec;
mod driver;
mod error;
mod failure;
mod hub;
mod landed;
mod lines;
mod machine;
#[cfg(feature = "_internal")] // for the simulation only
pub mod mutant;
#[cfg(not(feature = "_internal"))]
mod mutant;
mod nested;
mod options;
mod outage;
#[cfg(test)]
mod scenarios;
mod serve;
mod server;
mod stats;
mod status;
mod thread;
mod unanswered;
mod upstream;

pub use api::{Call, Detached, SingleFlight};
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use backlog::MAX_QUEUED_BYTES;
pub use builder::Builder;
pub use codec::{Codec, Json};
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use driver::PANIC_LAND_TIMEOUT;
pub use error::{OpenError, RunError, Unavailable};
pub use failure::{ERROR_NAME, IntoFailure};
pub use landed::{Landed, Role};
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use options::HANDSHAKE_TIMEOUT;
pub use serve::ServeError;
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use server::{LOG_TARGET, RELAY_LOG_TARGET};
/// Connections a term serves at once (SPEC.md §11.3): the coordinator holds
/// the slots and refuses a connection at accept when none is free.
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use single_flight_core::coordinator::MAX_CONNECTIONS;
pub use stats::Stats;
pub use status::{HostCoordinator, Status, StatusError};
#[cfg(feature = "_internal")] // for the simulation only
pub use thread::{
    OpenCluster, Settings, open_on, open_sharded_on, open_sharded_tiered_on, open_tiered_on,
};
