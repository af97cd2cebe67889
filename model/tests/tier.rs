//! Exhaustive checks of the host tier's model (SPEC.md §18, §12.1): every
//! property holds in every state the bounds allow, every `sometimes` one is
//! reached, and each seeded bug of the tier is caught.

use single_flight_model::check::{Narrated, exhaust, first_broken};
use single_flight_model::tier::{self, Tier};

/// Unique states of each configuration. A change means the explored space
/// changed (a machine or the model gained or lost a behaviour): find out
/// why before updating the number.
const TWO_HOSTS_UNIQUE_STATES: usize = 2_008_363;
const CANCEL_UNIQUE_STATES: usize = 314_591;
const BOTH_AT_ONCE_UNIQUE_STATES: usize = 181_657;
const UNREACHABLE_UNIQUE_STATES: usize = 245_833;

/// Checks `tier` to the end; returns the unique states, and fails with the
/// path of every property broken or never reached.
fn keeps_every_property(tier: Tier) -> usize {
    exhaust(&tier).unwrap_or_else(|problems| panic!("{problems}"))
}

#[test]
fn two_hosts_through_both_coordinators_deaths() {
    let states = keeps_every_property(Tier::two_hosts());
    assert_eq!(states, TWO_HOSTS_UNIQUE_STATES);
}

#[test]
fn two_hosts_with_a_cancel() {
    let states = keeps_every_property(Tier::cancel());
    assert_eq!(states, CANCEL_UNIQUE_STATES);
}

#[test]
fn a_process_that_coordinates_its_host_and_the_cluster_dies() {
    let states = keeps_every_property(Tier::both_at_once());
    assert_eq!(states, BOTH_AT_ONCE_UNIQUE_STATES);
}

#[test]
fn a_host_that_cannot_reach_the_cluster_ends_its_waiting_calls_unavailable() {
    let states = keeps_every_property(Tier::unreachable());
    assert_eq!(states, UNREACHABLE_UNIQUE_STATES);
}

#[test]
fn a_relay_that_gives_up_reasserting_leaders_when_unreachable_is_caught() {
    let tier = Tier::unreachable().with_mutants(
        None,
        Some(single_flight_core::relay::Mutant::UnavailableEndsReasserts),
    );
    let (name, path) = first_broken(&tier).expect("the seeded bug is caught");
    eprintln!("caught by {name:?}:\n{}", tier.narrate(&path));
    // The reassert never reaches the cluster: the window's end lets the key
    // be led again while the work runs (caught as that), or interrupts the
    // joiners of a leader that lives (caught as that, when no call comes).
    assert!(
        [tier::NO_TWO_WORKS, tier::LIVE_LEADER_NOT_INTERRUPTED].contains(&name),
        "caught by {name:?}"
    );
}

#[test]
fn a_relay_that_acks_before_the_cluster_is_caught() {
    let tier = Tier::two_hosts().with_mutants(
        None,
        Some(single_flight_core::relay::Mutant::AcksBeforeUpstream),
    );
    let (name, path) = first_broken(&tier).expect("the seeded bug is caught");
    eprintln!("caught by {name:?}:\n{}", tier.narrate(&path));
    assert_eq!(name, tier::ACKED_LAND_REACHES_JOINERS);
}

#[test]
fn a_coordinator_that_interrupts_relayed_flights_at_once_is_caught() {
    let tier = Tier::two_hosts().with_mutants(
        Some(single_flight_core::coordinator::Mutant::InterruptsRelayedAtOnce),
        None,
    );
    let (name, path) = first_broken(&tier).expect("the seeded bug is caught");
    eprintln!("caught by {name:?}:\n{}", tier.narrate(&path));
    // The window's end interrupts the joiners of a leader that lives
    // (caught as that), and lets the key be led again while its work runs
    // (caught as that, when the next call comes first).
    assert!(
        [tier::LIVE_LEADER_NOT_INTERRUPTED, tier::NO_TWO_WORKS].contains(&name),
        "caught by {name:?}"
    );
}
