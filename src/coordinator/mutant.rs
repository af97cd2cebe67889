//! Deliberately wrong variants of the coordinator (SPEC.md §12.3), compiled
//! only with the `mutants` feature, so that the model checker can show that
//! it catches each of them. Never enable the feature in a build you ship.

/// One seeded bug. Each names the rule of SPEC.md it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// interrupts them when it supersedes it (the rule before the model
    /// found this).
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
}

impl Mutant {
    pub const ALL: [Mutant; 14] = [
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
    ];
}
