//! Exhaustive checks of the host tier's model (SPEC.md §18, §12.1): every
//! property holds in every state the bounds allow, every `sometimes` one is
//! reached, and each seeded bug of the tier is caught.

use single_flight_model::tier::{self, Tier, TierAction};
use stateright::{Checker, Expectation, Model};

/// Threads of the checker: CI machines have two cores.
const THREADS: usize = 2;

/// Checks `tier` to the end; returns the unique states, and fails with the
/// path of every property broken or never reached.
fn keeps_every_property(tier: Tier) -> usize {
    let checker = tier.clone().checker().threads(THREADS).spawn_dfs().join();
    let mut problems = String::new();
    for property in tier.properties() {
        let found = checker.discovery(property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, None) => {
                problems.push_str(&format!("never reached: {:?}\n", property.name));
            }
            (Expectation::Always | Expectation::Eventually, Some(path)) => {
                problems.push_str(&format!("violated: {:?}, by this path:\n", property.name));
                problems.push_str(&tier.narrate(&path.into_actions()));
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{problems}");
    checker.unique_state_count()
}

/// The path to the first state that breaks one of `tier`'s `always`
/// properties, and its name.
fn hunt(tier: Tier) -> Option<(&'static str, Vec<TierAction>)> {
    let checker = tier.clone().checker().threads(THREADS).spawn_dfs().join();
    tier.properties()
        .into_iter()
        .filter(|property| property.expectation == Expectation::Always)
        .find_map(|property| {
            checker
                .discovery(property.name)
                .map(|path| (property.name, path.into_actions()))
        })
}

#[test]
fn two_hosts_through_both_coordinators_deaths() {
    let states = keeps_every_property(Tier::two_hosts());
    eprintln!("two_hosts: {states} unique states");
}

#[test]
fn two_hosts_with_a_cancel() {
    let states = keeps_every_property(Tier::cancel());
    eprintln!("cancel: {states} unique states");
}

#[test]
fn a_relay_that_acks_before_the_cluster_is_caught() {
    let tier = Tier::two_hosts().with_mutants(
        None,
        Some(single_flight_core::relay::Mutant::AcksBeforeUpstream),
    );
    let (name, path) = hunt(tier.clone()).expect("the seeded bug is caught");
    eprintln!("caught by {name:?}:\n{}", tier.narrate(&path));
    assert_eq!(name, tier::ACKED_LAND_REACHES_JOINERS);
}

#[test]
fn a_coordinator_that_interrupts_relayed_flights_at_once_is_caught() {
    let tier = Tier::two_hosts().with_mutants(
        Some(single_flight_core::coordinator::Mutant::InterruptsRelayedAtOnce),
        None,
    );
    let (name, path) = hunt(tier.clone()).expect("the seeded bug is caught");
    eprintln!("caught by {name:?}:\n{}", tier.narrate(&path));
    // The window's end interrupts the joiners of a leader that lives
    // (caught as that), and lets the key be led again while its work runs
    // (caught as that, when the next call comes first).
    assert!(
        [tier::LIVE_LEADER_NOT_INTERRUPTED, tier::NO_TWO_WORKS].contains(&name),
        "caught by {name:?}"
    );
}
