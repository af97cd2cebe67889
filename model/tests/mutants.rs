//! The checker bites (SPEC.md §12.3): every seeded bug of the coordinator
//! breaks a property that the shipped coordinator keeps, with a path to
//! show it.

use single_flight_core::coordinator::Mutant;
use single_flight_model::Directory;
use single_flight_model::check::{Narrated, hunt, must_hold};
use single_flight_model::slots::Slots;
use stateright::{Checker, Expectation, Model};

#[test]
fn every_seeded_bug_is_caught() {
    let must_hold = must_hold();
    let mut missed = Vec::new();
    for mutant in Mutant::ALL {
        // The connection slots (SPEC.md §11.3) are a model of their own.
        if mutant == Mutant::KeepsRefusedSlots {
            if !slots_catch(mutant) {
                missed.push(mutant);
            }
            continue;
        }
        // A directory has no relay (SPEC.md §18): the model of the host
        // tier hunts this one (tests/tier.rs).
        if mutant == Mutant::InterruptsRelayedAtOnce {
            continue;
        }
        // This one needs two flights of a key in one window (a broken
        // connection is the smallest budget that gives them) and a third
        // process whose run arrives before the older one's reassert.
        let directory = match mutant {
            Mutant::JoinsHeldFlights => Directory {
                processes: 3,
                ..Directory::disconnect()
            },
            // The rules of detached calls (SPEC.md §15) and of the reuse
            // window (§16) are reached in their own configurations.
            Mutant::DetachStopsWaitedFlights | Mutant::KeepsUnwantedFlights => Directory::detach(),
            Mutant::ReusesWithoutWindow
            | Mutant::KeepsFailures
            | Mutant::ReusesPastExpiry
            | Mutant::ReusesOlderValues => Directory::reuse(),
            // Cycles of nested flights (SPEC.md §17) need nested calls.
            Mutant::SkipsCycleCheck | Mutant::RefusesNonCycle => Directory::nested(),
            // The stop (SPEC.md §10.4) is an action of its own configuration.
            Mutant::StopsInGraceAtOnce => Directory::stop(),
            _ => Directory::small(),
        };
        let report = hunt(directory.with_mutant(Some(mutant)));
        let caught = report
            .discoveries
            .iter()
            .find(|(name, _)| must_hold.contains(*name));
        match caught {
            Some((name, path)) => {
                println!("{mutant:?} breaks {name:?} ({}):", report.summary());
                print!("{}", report.directory.narrate(path));
            }
            None => {
                println!("{mutant:?} is NOT caught ({})", report.summary());
                missed.push(mutant);
            }
        }
    }
    println!(
        "{} of {} seeded bugs caught",
        Mutant::ALL.len() - missed.len(),
        Mutant::ALL.len()
    );
    assert!(missed.is_empty(), "not caught: {missed:?}");
}

/// Whether the slots model, with the coordinator carrying `mutant`, breaks
/// one of its `always` properties (which the shipped coordinator keeps:
/// tests/slots.rs).
fn slots_catch(mutant: Mutant) -> bool {
    let slots = Slots::small().with_mutant(Some(mutant));
    let always: Vec<&'static str> = slots
        .properties()
        .into_iter()
        .filter(|property| property.expectation == Expectation::Always)
        .map(|property| property.name)
        .collect();
    let checker = slots.checker().spawn_bfs().join();
    let broken: Vec<_> = always
        .into_iter()
        .filter_map(|name| checker.discovery(name).map(|path| (name, path)))
        .collect();
    for (name, path) in &broken {
        println!(
            "{mutant:?} breaks {name:?} (slots): {:?}",
            path.clone().into_actions()
        );
    }
    if broken.is_empty() {
        println!("{mutant:?} is NOT caught (slots)");
    }
    !broken.is_empty()
}
