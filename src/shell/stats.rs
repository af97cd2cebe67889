//! What one process's calls came to, counted (SPEC.md §9.8): by the callers'
//! tasks as each call returns, and by the single-flight thread for the
//! failovers it lives through. Atomics, because both sides count without
//! waiting for each other; relaxed ones, because each counter stands alone
//! and a look at them may be a moment behind.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::RunError;
use super::landed::{Landed, Role};

/// This process's calls since its [`SingleFlight`](super::SingleFlight)
/// opened, by how each returned, and the failovers it lived through
/// (SPEC.md §9.8). Every call that returns counts once, in one of the
/// outcomes; a call whose future is dropped before it returns counts in none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Calls that led: they ran the work, whatever it returned.
    pub led: u64,
    /// Calls that joined a flight and received its value.
    pub joined: u64,
    /// Calls that received a value kept for reuse (SPEC.md §16).
    pub reused: u64,
    /// Calls that joined a flight and received its failure
    /// ([`RunError::FlightFailed`]).
    pub failed: u64,
    /// Calls whose flight ended without an outcome
    /// ([`RunError::Interrupted`]).
    pub interrupted: u64,
    /// Calls whose deadline passed first ([`RunError::DeadlineExceeded`]).
    pub deadline: u64,
    /// Calls that could not reach a coordinator
    /// ([`RunError::Unavailable`]).
    pub unavailable: u64,
    /// Calls refused as invalid: a key over the limits, a value this call's
    /// codec cannot decode, or that the coordinator answered against the
    /// protocol ([`RunError::InvalidCall`], [`RunError::Codec`],
    /// [`RunError::Protocol`]).
    pub invalid: u64,
    /// Times this process found a coordinator of another term than the one
    /// it was connected to before: the failovers it lived through, and the
    /// clean handovers of a coordinator that closed.
    pub failovers: u64,
}

impl Stats {
    /// Every call counted, whatever its outcome.
    pub fn calls(&self) -> u64 {
        [
            self.led,
            self.joined,
            self.reused,
            self.failed,
            self.interrupted,
            self.deadline,
            self.unavailable,
            self.invalid,
        ]
        .iter()
        .fold(0, |sum, count| sum.saturating_add(*count))
    }

    /// The calls that received another call's outcome (joined, reused or
    /// failed) ÷ every call counted: the share of calls that did not run
    /// the work. `None` before the first call returns.
    pub fn dedupe_ratio(&self) -> Option<f64> {
        let calls = self.calls();
        let shared = self
            .joined
            .saturating_add(self.reused)
            .saturating_add(self.failed);
        // Counts far beyond 2^53 lose precision in an `f64`, which a ratio
        // can afford.
        (calls > 0).then(|| shared as f64 / calls as f64)
    }
}

/// The counters behind [`Stats`], shared by a `SingleFlight`'s handles and
/// its single-flight thread.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    led: AtomicU64,
    joined: AtomicU64,
    reused: AtomicU64,
    failed: AtomicU64,
    interrupted: AtomicU64,
    deadline: AtomicU64,
    unavailable: AtomicU64,
    invalid: AtomicU64,
    failovers: AtomicU64,
}

impl Counters {
    /// Counts a call that returned `result`.
    pub(crate) fn call<T, E>(&self, result: &Result<Landed<T>, RunError<E>>) {
        let counter = match result {
            Ok(Landed {
                role: Role::Led, ..
            })
            | Err(RunError::Work(_)) => &self.led,
            Ok(Landed {
                role: Role::Joined, ..
            }) => &self.joined,
            Ok(Landed {
                role: Role::Reused, ..
            }) => &self.reused,
            Err(RunError::FlightFailed { .. }) => &self.failed,
            Err(RunError::Interrupted { .. }) => &self.interrupted,
            Err(RunError::DeadlineExceeded { .. }) => &self.deadline,
            Err(RunError::Unavailable(_)) => &self.unavailable,
            Err(
                RunError::InvalidCall { .. }
                | RunError::Codec { .. }
                | RunError::Protocol { .. }
                | RunError::Cycle { .. },
            ) => &self.invalid,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a leader whose work panicked (SPEC.md §9.6): it led, and its
    /// caller gets the panic instead of a result.
    pub(crate) fn panicked(&self) {
        self.led.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection to a coordinator of a new term.
    pub(crate) fn failover(&self) {
        self.failovers.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts of this moment.
    pub(crate) fn snapshot(&self) -> Stats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            led: read(&self.led),
            joined: read(&self.joined),
            reused: read(&self.reused),
            failed: read(&self.failed),
            interrupted: read(&self.interrupted),
            deadline: read(&self.deadline),
            unavailable: read(&self.unavailable),
            invalid: read(&self.invalid),
            failovers: read(&self.failovers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Epoch, Failure, FencingToken};
    use std::sync::Arc;
    use std::time::Duration;

    /// §9.8: each outcome of a call counts in its own counter, once; the
    /// dedupe ratio is the calls that received another's outcome over all.
    #[test]
    fn each_outcome_counts_once_in_its_own_counter() {
        let counters = Counters::default();
        let token = FencingToken::new(Epoch::FIRST, 1).unwrap();
        let key = || "k".to_owned();
        let landed = |role| {
            Ok(Landed {
                value: (),
                role,
                token,
            })
        };
        let results: Vec<Result<Landed<()>, RunError<&str>>> = vec![
            landed(Role::Led),
            Err(RunError::Work("no")),
            landed(Role::Joined),
            landed(Role::Joined),
            Err(RunError::FlightFailed {
                key: key(),
                failure: Failure {
                    name: "Error".into(),
                    message: "no".into(),
                    code: None,
                },
            }),
            Err(RunError::Interrupted {
                key: key(),
                lost_in_failover: false,
            }),
            Err(RunError::DeadlineExceeded {
                key: key(),
                deadline: Duration::from_secs(1),
            }),
            Err(RunError::Unavailable(Arc::new(
                crate::shell::Unavailable::ShutDown,
            ))),
            Err(RunError::InvalidCall {
                key: key(),
                reason: "too long".into(),
            }),
        ];
        assert_eq!(counters.snapshot().dedupe_ratio(), None);
        for result in &results {
            counters.call(result);
        }
        counters.failover();
        let stats = counters.snapshot();
        assert_eq!(
            stats,
            Stats {
                led: 2,
                joined: 2,
                reused: 0,
                failed: 1,
                interrupted: 1,
                deadline: 1,
                unavailable: 1,
                invalid: 1,
                failovers: 1,
            }
        );
        assert_eq!(stats.calls(), results.len() as u64);
        assert_eq!(stats.dedupe_ratio(), Some(3.0 / 9.0));
    }
}
