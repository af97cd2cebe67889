//! The errors of the public API, each saying what happened and what to do.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::BackendError;
use crate::protocol::{DecodeError, Failure, HandshakeError};

/// Why [`SingleFlight::open`](super::SingleFlight::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The place could not be used: the directory was refused (SPEC.md
    /// §7.4), or cluster mode could not start (§14: its election, the certificates
    /// or the listen address). The message says why and what to do.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The process could not start its single-flight thread.
    #[error(
        "cannot start the single-flight thread: {0}; the process may be out of threads or memory"
    )]
    Thread(io::Error),
}

/// Why no coordinator could be reached or elected: the call could not take
/// part in any flight. Shared by every call it ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// The election failed (a damaged epoch file, a lost lock file, a cluster's
    /// election out of reach, …; SPEC.md §7, §14). The message names the file or
    /// setting and what to do.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The coordinator speaks another protocol version, or is not a
    /// single-flight coordinator at all (SPEC.md §4.2).
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The coordinator sent a line that is not a response (SPEC.md §3.7).
    #[error("the coordinator sent a malformed response: {0}")]
    Protocol(#[from] DecodeError),
    /// The coordinator, or what answers at its address, is not one this
    /// process may trust (SPEC.md §11.2, §14.5): another user's socket, a
    /// certificate that does not verify, or one that refused ours.
    #[error("refusing the coordinator: {0}")]
    Refused(BackendError),
    /// The coordinator refused this process (SPEC.md §14.5): its
    /// certificate is not one of the cluster's.
    #[error("{0}")]
    Rejected(io::Error),
    /// This host's coordinator could not reach the cluster for the call
    /// (SPEC.md §18.3): its reason names what refused it or what is out of
    /// reach, as a direct process's error would.
    #[error("this host's coordinator cannot reach the cluster: {0}")]
    Host(String),
    /// The `SingleFlight` this call belongs to was shut down, or its thread
    /// stopped.
    #[error("this SingleFlight has shut down; open a new one")]
    ShutDown,
    /// The process has too many calls in progress (SPEC.md §8.9).
    #[error(
        "this process has {0} calls in progress, the most one connection may carry; wait for some to finish"
    )]
    TooManyCalls(usize),
}

/// How a call of [`SingleFlight::run`](super::SingleFlight::run) failed. `E`
/// is the work's own error type.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError<E> {
    /// This call led, and its own work returned this error (which its
    /// joiners received as a [`Failure`]).
    Work(E),
    /// This call joined a flight whose work failed in its leader's process,
    /// or panicked there: the failure `Panic` (SPEC.md §9.6).
    FlightFailed {
        /// The call's key.
        key: String,
        /// What the leader's work failed with.
        failure: Failure,
    },
    /// This call joined (or was about to join) a flight that ended without
    /// an outcome: its leader's process stopped, cancelled, or lost the
    /// flight. The work is not rerun for this call; a new call starts a new
    /// flight.
    Interrupted {
        /// The call's key.
        key: String,
        /// Whether the flight was lost in a failover rather than ended by
        /// its leader: this call had rejoined it on a new coordinator,
        /// which did not receive it back from its leader within the grace
        /// window (SPEC.md §9.2, §10.3). The leader may have finished its
        /// work; its outcome could not reach this call.
        lost_in_failover: bool,
    },
    /// The call's deadline passed first; it was withdrawn (a leader's work
    /// was dropped and its joiners interrupted).
    DeadlineExceeded {
        /// The call's key.
        key: String,
        /// The deadline it was given.
        deadline: Duration,
    },
    /// The caller's mistake: the key or the reuse window is not valid
    /// (SPEC.md §5, §16.1). Nothing was sent.
    InvalidCall {
        /// The call's key, as given.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// The value did not cross: the leader's value does not encode with its
    /// call's codec, or a joiner's codec cannot decode it (every process
    /// must use the same type and codec for a key, SPEC.md §3.4).
    Codec {
        /// The call's key, as given.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// The coordinator broke the protocol (SPEC.md §3.7): a peer's fault,
    /// not the caller's.
    Protocol {
        /// The call's key, as given.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// No coordinator could be reached or elected.
    Unavailable(Arc<Unavailable>),
    /// The call was made by the work of a flight (its parent, SPEC.md §17)
    /// and would have waited for a flight that waits for that one: it was
    /// refused at once instead of waiting for ever. The flights go on; the
    /// work that made the call decides what to do.
    Cycle {
        /// The call's key, as given.
        key: String,
        /// The keys of the cycle: the parent's first, then this call's,
        /// then each key whose flight waits for the next, the last waiting
        /// for the parent's. One key when a flight's work called its own.
        keys: Vec<String>,
    },
}

/// The cycle of `keys` as a phrase: `"A" waits for itself through "B"`
/// (SPEC.md §17.1).
fn describe_cycle(keys: &[String]) -> String {
    let mut text = match keys.first() {
        Some(first) => format!("{first:?} waits for itself"),
        None => "a flight waits for itself".to_owned(),
    };
    for (n, key) in keys.iter().enumerate().skip(1) {
        text.push_str(if n == 1 { " through " } else { ", then " });
        text.push_str(&format!("{key:?}"));
    }
    text
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Work(error) => write!(f, "the work failed: {error}"),
            RunError::FlightFailed { key, failure } => write!(
                f,
                "the flight of {key:?} that this call joined failed in its leader's process: {failure}"
            ),
            RunError::Interrupted {
                key,
                lost_in_failover: false,
            } => write!(
                f,
                "the flight of {key:?} that this call joined ended without an outcome (its leader stopped, cancelled, or lost the flight); the work was not rerun for this call, so call again to start a new flight"
            ),
            RunError::Interrupted {
                key,
                lost_in_failover: true,
            } => write!(
                f,
                "the flight of {key:?} that this call joined was interrupted when its coordinator changed: its leader did not bring the flight back to the new one within the grace window (it was killed or stopped, or finished or went on but did not reach the new coordinator in time); the work was not rerun for this call, so call again to start a new flight"
            ),
            RunError::DeadlineExceeded { key, deadline } => write!(
                f,
                "the call for {key:?} did not finish within its deadline of {deadline:?}; it was withdrawn"
            ),
            RunError::InvalidCall { key, reason } => {
                write!(f, "the call for {key:?} is not valid: {reason}")
            }
            RunError::Codec { key, reason } => {
                write!(
                    f,
                    "the value of the call for {key:?} did not cross: {reason}"
                )
            }
            RunError::Protocol { key, reason } => write!(
                f,
                "the coordinator broke the protocol in the call for {key:?}: {reason}"
            ),
            RunError::Unavailable(reason) => write!(f, "no single-flight coordinator: {reason}"),
            RunError::Cycle { key, keys } => write!(
                f,
                "the call for {key:?} was refused: {} (SPEC.md §17); a flight's work must not wait, through the calls it makes, for its own flight",
                describe_cycle(keys)
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RunError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Work(error) => Some(error),
            RunError::FlightFailed { failure, .. } => Some(failure),
            RunError::Unavailable(reason) => Some(&**reason),
            _ => None,
        }
    }
}
