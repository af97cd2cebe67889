//! KNOWN CORE BUG found by the model (see `KNOWN_VIOLATIONS` and the
//! README): each test replays, step by step through the shipped coordinator
//! and client, a path on which the core breaks "one live leader per key",
//! and asserts that it does. They pass while the bug is there; when a fix
//! makes one fail, move it to `tests/regressions.rs` asserting the property
//! holds, and remove the property from `KNOWN_VIOLATIONS`.
//!
//! The rule behind them (SPEC.md §8.3): a new term accepts the running
//! reassert of a flight of an earlier term unless a greater token of its
//! key was reasserted first in the window. When the reassert of a flight
//! that a later flight of its key superseded arrives before the later one's,
//! the older flight is in progress again, and stays so until the later one
//! arrives (or for good, if it never does): the key has two live flights.

mod common;

use common::{holds, play, token};
use single_flight::client::{CallId, Effect, Resolution};
use single_flight_model::Directory;
use single_flight_model::properties::ONE_LIVE_LEADER;

use single_flight_model::Action::*;

/// One failover and one broken connection. Process 1 leads 1:1; its
/// connection breaks, which interrupts 1:1; it reconnects and reasserts, and
/// the coordinator answers `rejected`, but dies before process 1 reads it.
/// Meanwhile process 0 led the key's next flight, 1:2. In term 2, process
/// 2's new call waits for the grace window; process 1's reassert of 1:1
/// arrives first and is accepted, and process 2's call joins 1:1. When
/// process 0's reassert of 1:2 arrives, 1:1 is superseded: process 2's call
/// is interrupted, though the key's flight 1:2 still runs.
#[test]
fn known_core_bug_a_flight_interrupted_before_a_failover_comes_back() {
    let directory = Directory {
        processes: 3,
        ..Directory::disconnect()
    };
    let actions = [
        CallStarts { process: 1, key: 0 },
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        ConnectionBreaks { process: 1 },
        Connects { process: 1 },
        // The reassert is rejected; the answer waits to be read.
        RequestArrives { process: 1 },
        CallStarts { process: 0, key: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CoordinatorDies,
        CallStarts { process: 2, key: 0 },
        Connects { process: 2 },
        RequestArrives { process: 2 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
        Connects { process: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 2 },
        ResponseArrives { process: 2 },
    ];
    let (states, log) = play(&directory, &actions);
    println!("{}", directory.narrate(&actions));
    assert!(log.contains(&format!("Lead {{ id: \"1\", token: {:?} }}", token(1, 2))));
    let after_old_reassert = &states[15];
    assert!(!holds(&directory, ONE_LIVE_LEADER, after_old_reassert));
    assert!(log.contains(&format!(
        "coordinator sends Joined {{ id: \"1\", flight: {:?} }} on ConnectionId(0)",
        token(1, 1)
    )));
    let interrupted = Effect::Resolve {
        call: CallId(1),
        resolution: Resolution::Interrupted,
    };
    assert!(
        log.contains(&format!("process 2: {interrupted:?}")),
        "process 2's call joined 1:1 and is interrupted when 1:2 supersedes it:\n{log}"
    );
}

/// Two failovers and no lost message. Process 0 leads 1:1 and misses term
/// 2's whole grace window (it is slow to reconnect), so term 2 lets process
/// 1 lead the key's next flight, 2:1. Term 2 dies; in term 3, process 0's
/// reassert of 1:1 arrives first and is accepted: the key has two live
/// flights until process 1's reassert of 2:1 supersedes it.
#[test]
fn known_core_bug_a_superseded_flight_comes_back_until_the_later_one_arrives() {
    let directory = Directory {
        coordinator_deaths: 2,
        ..Directory::small()
    };
    let actions = [
        CallStarts { process: 0, key: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CoordinatorDies,
        GraceWindowEnds,
        CallStarts { process: 1, key: 0 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        CoordinatorDies,
        Connects { process: 0 },
        RequestArrives { process: 0 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
    ];
    let (states, log) = play(&directory, &actions);
    println!("{}", directory.narrate(&actions));
    assert!(log.contains(&format!("Lead {{ id: \"1\", token: {:?} }}", token(2, 1))));
    let after_old_reassert = &states[12];
    assert!(!holds(&directory, ONE_LIVE_LEADER, after_old_reassert));
    assert!(
        log.contains(r#"coordinator sends Rejected { id: "1" } on ConnectionId(0)"#),
        "process 1's reassert of 2:1 supersedes 1:1, whose leader is rejected:\n{log}"
    );
    assert!(holds(&directory, ONE_LIVE_LEADER, states.last().unwrap()));
}
