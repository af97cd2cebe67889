//! Deliberately wrong variants of the coordinator (SPEC.md §12.3), so that
//! the model checker can show that it catches each of them. Only a build
//! with `--cfg single_flight_mutants` makes them reachable
//! (`Coordinator::with_mutant`): the model's own workspace sets it
//! (model/.cargo/config.toml). A `cfg` and not a Cargo feature, because
//! features unify: a feature that any crate in a build turns on would seed
//! the bugs into every user of the core in that build. Without it `Seeded`
//! is zero-sized and every hook is its shipped value.
//!
//! The seeded bugs live in this file, not in machine.rs, for mutation testing
//! (model/README.md, "Mutation score"): cargo-mutants mutates machine.rs and
//! cannot see that a hook is off in a shipped build, so a hook written there
//! as `!self.mutant(..)`, `.. && self.mutant(..)` or a match guard would
//! give mutants that change only the seeded bugs, and the choice itself
//! (`==`, a function returning `bool`) would give more. Each hook in machine.rs is instead
//! one call of `Coordinator::hook` that takes the shipped value and the seeded
//! one: a call is not mutated, and the shipped expression passed in gives
//! the mutants it would give without the hook. So in machine.rs the result
//! of `hook` is never combined with an operator or used as a match guard,
//! and its seeded argument holds no operator either.

use super::machine::Coordinator;

/// One seeded bug. Each names the rule of SPEC.md it breaks.
///
/// Without `--cfg single_flight_mutants` it exists only to name the hooks, and
/// nothing outside the coordinator sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    not(single_flight_mutants),
    allow(unreachable_pub, reason = "public only where the model re-exports it")
)]
pub enum Mutant {
    /// §8.2: a rejoin whose flight is gone leads a new flight.
    RejoinMayLead,
    /// §8.3: a reassert is accepted after the grace window.
    ReassertAfterGrace,
    /// §8.4: plain runs lead during the grace window.
    GraceLetsRunsLead,
    /// §8.7: a leader's closed connection ends its flight without
    /// answering its joiners.
    LeaderCloseStrandsJoiners,
    /// §6: tokens restart in every term (the epoch part is always 1).
    TokenIgnoresEpoch,
    /// §8.2: a plain run leads a second flight for a key in progress.
    SecondLeaderWhileInProgress,
    /// §8.4: a flight of an earlier term that lands during the grace window
    /// is forgotten, so its late rejoiners wait and are interrupted.
    ForgetsLandingsInGrace,
    /// §8.3: a reasserted flight is not held: the waiting runs of its key
    /// join it at once, so a later flight of the key reasserted after it
    /// interrupts them when it supersedes it.
    JoinsHeldFlights,
    /// §15.2: a leader's detach stops its flight although callers join it,
    /// who are interrupted.
    DetachStopsWaitedFlights,
    /// §15.2: a detached flight whose last joiner left goes on, with nobody
    /// waiting for it.
    KeepsUnwantedFlights,
    /// §16.3: a run without a reuse window receives a kept value.
    ReusesWithoutWindow,
    /// §16.2: a failure is kept for reuse like a value.
    KeepsFailures,
    /// §16.2: a kept value outlives its reuse window.
    ReusesPastExpiry,
    /// §16.2: a landing without a window leaves its key's older kept value
    /// in place, so a later call reuses a value older than the latest.
    ReusesOlderValues,
    /// §17.2: a run that closes a cycle of nested flights is not refused,
    /// and waits for ever.
    SkipsCycleCheck,
    /// §17.2: a nested run that would wait for any flight in progress is
    /// refused as a cycle, whether or not that flight waits for its parent.
    RefusesNonCycle,
    /// §11.3: a connection refused in its handshake keeps its slot for the
    /// rest of the term, so that enough failed handshakes shut every client
    /// out (issue 27's bug 5).
    KeepsRefusedSlots,
    /// §10.4: a term asked to stop inside its grace window ends at once,
    /// so that the rejoiners of the flights that landed in the window,
    /// which only this term knows, are told by the next term that their
    /// flights were lost (the stop's bug once shipped, when the shell
    /// decided it).
    StopsInGraceAtOnce,
    /// §18.2: a relay connection's close withdraws its parties as any
    /// connection's does (§8.7), so that its host's flights are interrupted
    /// at once instead of waiting a relay window for the host's next
    /// coordinator. Hunted in the model of the host tier, not in a
    /// directory's, which has no relay.
    InterruptsRelayedAtOnce,
}

#[cfg(single_flight_mutants)]
impl Mutant {
    /// Every seeded bug, in the order declared.
    pub const ALL: [Mutant; 19] = [
        Mutant::RejoinMayLead,
        Mutant::ReassertAfterGrace,
        Mutant::GraceLetsRunsLead,
        Mutant::LeaderCloseStrandsJoiners,
        Mutant::TokenIgnoresEpoch,
        Mutant::SecondLeaderWhileInProgress,
        Mutant::ForgetsLandingsInGrace,
        Mutant::JoinsHeldFlights,
        Mutant::DetachStopsWaitedFlights,
        Mutant::KeepsUnwantedFlights,
        Mutant::ReusesWithoutWindow,
        Mutant::KeepsFailures,
        Mutant::ReusesPastExpiry,
        Mutant::ReusesOlderValues,
        Mutant::SkipsCycleCheck,
        Mutant::RefusesNonCycle,
        Mutant::KeepsRefusedSlots,
        Mutant::StopsInGraceAtOnce,
        Mutant::InterruptsRelayedAtOnce,
    ];
}

/// The seeded bug that a coordinator carries, if any.
pub(super) type Seeded = crate::seeded::Seeded<Mutant>;

#[cfg(single_flight_mutants)]
impl Coordinator {
    /// This coordinator with one seeded bug (SPEC.md §12.3).
    pub fn with_mutant(mut self, mutant: Option<Mutant>) -> Coordinator {
        self.seeded = Seeded::new(mutant);
        self
    }
}

impl Coordinator {
    /// A hook of the seeded bugs: `shipped`, or `seeded` in a coordinator
    /// that carries `bug`.
    #[inline(always)]
    pub(super) fn hook<T>(&self, bug: Mutant, shipped: T, seeded: T) -> T {
        self.seeded.hook(bug, shipped, seeded)
    }
}

/// The shipped configuration: every build but the model's.
#[cfg(all(test, not(single_flight_mutants)))]
mod tests {
    use super::*;
    use crate::coordinator::Term;
    use crate::protocol::Epoch;

    /// A shipped coordinator carries no seeded bug (SPEC.md §12.3): its hook
    /// state takes no bytes, and a hook is its shipped value.
    #[test]
    fn a_shipped_build_carries_no_seeded_bug() {
        assert_eq!(std::mem::size_of::<Seeded>(), 0);
        let coordinator = Coordinator::new(
            Epoch::new(2).unwrap(),
            Term::AfterFailover {
                grace_window: std::time::Duration::from_millis(500),
            },
        );
        assert!(coordinator.hook(Mutant::GraceLetsRunsLead, true, false));
        assert_eq!(coordinator.hook(Mutant::TokenIgnoresEpoch, 2, 1), 2);
    }
}
