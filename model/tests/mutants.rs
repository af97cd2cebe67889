//! The checker bites (SPEC.md §12.3): every seeded bug of the coordinator
//! breaks a property that the shipped coordinator keeps, with a path to
//! show it.

use single_flight_core::coordinator::Mutant;
use single_flight_model::Directory;
use single_flight_model::check::{hunt, must_hold};

#[test]
fn every_seeded_bug_is_caught() {
    let must_hold = must_hold();
    let mut missed = Vec::new();
    for mutant in Mutant::ALL {
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
