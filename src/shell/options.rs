//! The knobs of a [`SingleFlight`](super::SingleFlight), with their defaults
//! and the reasons for them.

use std::time::Duration;

use crate::election::{DirectoryOptions, POLL_INTERVAL};

/// The default grace window of a term that follows another (SPEC.md §10.2).
///
/// Leaders and joiners of the previous term learn of its end at once (their
/// connection closes), and reconnect within a poll interval (10 ms) and one
/// round trip. The window must also cover a process that is briefly starved
/// of CPU (a busy host, a large GC-like pause in the work's runtime), so it is
/// fifty times that, while keeping the pause that a failover imposes on new
/// keys well under a second.
pub const DEFAULT_GRACE_WINDOW: Duration = Duration::from_millis(500);

/// How long either side waits for the other's hello (SPEC.md §4.2). A
/// coordinator that has not answered by then is stopped (SIGSTOP) or
/// overloaded; a client that has not spoken is broken or hostile, and its
/// connection slot is freed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`SingleFlight`](super::SingleFlight) behaves. Build one with
/// [`SingleFlight::builder`](super::SingleFlight::builder).
#[derive(Clone, Debug)]
pub struct Options {
    /// The grace window a new coordinator opens after a failover.
    pub grace_window: Duration,
    /// The time between attempts to reach or elect a coordinator.
    pub poll_interval: Duration,
    /// How the directory is judged (SPEC.md §7.4).
    pub directory: DirectoryOptions,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            grace_window: DEFAULT_GRACE_WINDOW,
            poll_interval: POLL_INTERVAL,
            directory: DirectoryOptions::default(),
        }
    }
}
