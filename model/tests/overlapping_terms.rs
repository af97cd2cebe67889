//! Overlapping terms (SPEC.md §12.5), step by step: the path on which two
//! coordinators each lead one key and both works run, which no protocol
//! without a clock can rule out, and what still holds along it.

mod common;

use common::{plain_call, play_keeping_every_property, token};
use single_flight_core::client::CallId;
use single_flight_model::properties::{TWO_TERMS_RUN_ONE_KEY, two_terms_run_one_key};
use single_flight_model::{Action, Directory, Ending};
use stateright::Model;

use single_flight_model::Action::*;

/// The work of `process`'s first call, under 1:1 or 2:1, finishes.
fn work_finishes(process: usize, (epoch, sequence): (u64, u32)) -> Action {
    WorkFinishes {
        process,
        call: CallId(1),
        ending: Ending::of(token(epoch, sequence)),
    }
}

/// SPEC.md §12.4, "at most one running leader per key across terms" cannot
/// hold: term 2 begins while term 1's coordinator still serves process 0.
/// Process 1's connection breaks and reaches term 2, whose window ends with
/// nothing to take back. Then each process runs the key: term 1 leads
/// process 0 under 1:1, term 2 leads process 1 under 2:1, and both works
/// run at once. Every `always` property holds along the path: each term
/// runs one flight of the key, 2:1 is greater than every token of term 1,
/// and each leader's land is acknowledged by its own term. What keeps the
/// two works apart is the fence of SPEC.md §6: a resource that accepted a
/// write under 2:1 refuses the later writes under 1:1.
#[test]
fn overlapping_terms_run_one_key_twice_and_fencing_orders_them() {
    let directory = Directory::overlap();
    let both_running = [
        TermOverlaps,
        ConnectionBreaks { process: 1 },
        Connects { process: 1 },
        GraceWindowEnds,
        plain_call(0),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        plain_call(1),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
    ];
    let landing = [
        work_finishes(0, (1, 1)),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        work_finishes(1, (2, 1)),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        DeposedStops,
    ];
    let path: Vec<Action> = both_running.iter().chain(&landing).cloned().collect();
    let (states, log) = play_keeping_every_property(&directory, &path);

    let running = &states[both_running.len()];
    assert!(two_terms_run_one_key(running), "{log}");
    let works: Vec<_> = running.running().into_iter().collect();
    assert_eq!(works, [token(1, 1), token(2, 1)], "{log}");
    assert!(token(2, 1) > token(1, 1));
    // The property that names the path is reached, and is a `sometimes`:
    // the checker reports it found, never as a violation.
    assert!(
        directory
            .properties()
            .iter()
            .any(|property| property.name == TWO_TERMS_RUN_ONE_KEY
                && property.expectation == stateright::Expectation::Sometimes)
    );
    // Each term acknowledged its own leader's land: both lands are
    // answered `ack`, neither `rejected`.
    assert_eq!(log.matches("coordinator sends Ack").count(), 2, "{log}");
    assert!(!log.contains("Rejected"), "{log}");
    assert!(states.last().unwrap().deposed.is_none(), "{log}");
}
