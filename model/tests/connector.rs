//! The connector's model (SPEC.md §12.6): the shipped connector keeps every
//! property in every state its budgets allow, and each of its seeded bugs
//! (SPEC.md §12.3) is caught, exhaustively and by a random walk.

use single_flight_core::client::Mutant;
use single_flight_model::connector::{ConnectorModel, check, hunt, walk};

/// Unique states of [`ConnectorModel::small`]. A change means the explored
/// space changed (the connector, the client or the model gained or lost a
/// behaviour): find out why before updating the number.
const SMALL_UNIQUE_STATES: usize = 98_086;

/// The seed of the random walks that must find each seeded bug, and their
/// budget of traces.
const WALK_SEED: u64 = 5;
const WALK_TRACES: u64 = 10_000;

#[test]
fn the_shipped_connector_keeps_every_property() {
    let report = check(ConnectorModel::small());
    println!(
        "connector small: {} unique states, depth {}",
        report.unique_states, report.max_depth
    );
    assert!(report.complete, "the check did not finish: {report:?}");
    let model = ConnectorModel::small();
    use stateright::{Expectation, Model};
    for property in model.properties() {
        let found = report.discoveries.get(property.name);
        match property.expectation {
            Expectation::Always => {
                assert!(found.is_none(), "{:?} breaks by {found:?}", property.name)
            }
            Expectation::Sometimes => {
                assert!(found.is_some(), "never reached: {:?}", property.name)
            }
            Expectation::Eventually => {}
        }
    }
    assert_eq!(report.unique_states, SMALL_UNIQUE_STATES);
}

/// Each seeded bug breaks the property named after the shell bug it brings
/// back (issue 27's bugs 2 and 3).
#[test]
fn every_seeded_bug_of_the_connector_is_caught() {
    for (mutant, property) in [
        (
            Mutant::LeavesGoneCoordinatorAtOnce,
            "a landed answer that reached a client before its coordinator was seen gone is delivered",
        ),
        (
            Mutant::RetriesOnEveryWake,
            "no attempt starts within the pause after a missed or failed one",
        ),
    ] {
        let report = hunt(ConnectorModel::small().with_mutant(Some(mutant)));
        let path = report.discoveries.get(property);
        println!("{mutant:?} breaks {property:?} by {path:?}");
        assert!(path.is_some(), "{mutant:?} is not caught: {report:?}");
        let walked = walk(
            &ConnectorModel::small().with_mutant(Some(mutant)),
            WALK_SEED,
            WALK_TRACES,
        );
        println!("{mutant:?}: the walk from seed {WALK_SEED} breaks {walked:?}");
        assert_eq!(walked.map(|(_, broken)| broken), Some(property));
    }
    assert_eq!(
        Mutant::ALL.len(),
        2,
        "every seeded bug of the connector is hunted here"
    );
}

/// The shipped connector survives the same walks.
#[test]
fn random_walks_of_the_shipped_connector_keep_every_property() {
    assert_eq!(walk(&ConnectorModel::small(), WALK_SEED, WALK_TRACES), None);
}

/// How often one random trace from a fresh seed catches each seeded bug of
/// the connector: the figure of RELIABILITY.md ("Simulation", the seeded
/// shell bugs). A measurement, not a check: run it with
/// `cargo test --release --test connector catch_rates -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement for RELIABILITY.md"]
fn catch_rates() {
    /// Fresh seeds, one trace each: the same seeds as the simulation's rates.
    const SEEDS: std::ops::Range<u64> = 1_000_000..1_001_000;
    for mutant in Mutant::ALL {
        let model = ConnectorModel::small().with_mutant(Some(mutant));
        let caught = SEEDS
            .filter(|&seed| walk(&model, seed, 1).is_some())
            .count();
        println!(
            "{mutant:?}: {caught}/{} single traces from fresh seeds",
            SEEDS.end - SEEDS.start
        );
    }
}
