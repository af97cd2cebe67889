//! The tokio shell (SPEC.md §10, §11): sockets, timers and the thread that
//! drive the pure coordinator and client, and the public API.

mod api;
pub mod blocking;
#[cfg(feature = "cluster")]
mod cluster;
mod codec;
mod driver;
mod error;
mod failure;
mod lines;
mod options;
mod serve;
mod server;
mod stats;
mod status;

pub use crate::election::CLEAN_FILE;
pub use crate::transport::unix::SOCKET_FILE;
pub use api::{Builder, Call, Detached, Landed, Role, SingleFlight};
#[cfg(feature = "cluster")]
pub use cluster::{CLUSTER_POLL_INTERVAL, Cluster, ClusterError, DEFAULT_CLUSTER_GRACE_WINDOW};
pub use codec::{Codec, Json};
pub use driver::PANIC_LAND_TIMEOUT;
pub use error::{OpenError, RunError, Unavailable};
pub use failure::IntoFailure;
pub use options::{DEFAULT_GRACE_WINDOW, HANDSHAKE_TIMEOUT, Options};
pub use serve::ServeError;
pub use server::{LOG_TARGET, MAX_CONNECTIONS, MAX_QUEUED_BYTES};
pub use stats::Stats;
#[cfg(feature = "cluster")]
pub use status::cluster_status;
pub use status::{Status, StatusError, status};
