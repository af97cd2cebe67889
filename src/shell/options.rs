//! The knobs of a [`SingleFlight`](super::SingleFlight) that every backend
//! shares, and the reasons for their bounds.

use std::time::Duration;

/// How long either side waits for the other's hello (SPEC.md §4.2). A
/// coordinator that has not answered by then is stopped (SIGSTOP) or
/// overloaded; a client that has not spoken is broken or hostile, and its
/// connection slot is freed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`SingleFlight`](super::SingleFlight) behaves; each backend gives
/// the defaults (`Backend::GRACE_WINDOW`, `Backend::POLL_INTERVAL`).
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// The grace window a new coordinator opens after a failover.
    pub(crate) grace_window: Duration,
    /// The time between attempts to reach or elect a coordinator.
    pub(crate) poll_interval: Duration,
    /// The shell's seeded bug, if any (SPEC.md §12.7): none outside the
    /// simulation's build.
    pub(crate) seeded: super::mutant::Seeded,
    /// Where the shell's time comes from: the system's, except in the
    /// simulation.
    pub(crate) clock: super::clock::Clock,
}
