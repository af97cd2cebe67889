//! Core bugs the model found and the core fixed (SPEC.md §8.3, §9.4: a
//! landed reassert carries its outcome and never revives its flight). Each
//! replays the path that showed the bug and checks that every property now
//! holds along it, and that the calls end as they should.

mod common;

use common::{plain_call, play_keeping_every_property, token};
use single_flight_core::client::{CallId, Effect};
use single_flight_model::{Directory, Ending};

use single_flight_model::Action::*;

/// Process 0's flight 1:1 lands; its coordinator sends `ack` and dies before
/// the ack is read. Process 1 meanwhile leads the key's next flight, 1:2.
/// In term 2, process 0 replays its land as a landed reassert: it is
/// acknowledged without 1:1 coming back, and process 1's reassert of 1:2,
/// the flight actually running, is accepted.
#[test]
fn a_landed_flight_no_longer_displaces_the_flight_in_progress() {
    let directory = Directory::small();
    let actions = [
        plain_call(0),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        plain_call(1),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        CoordinatorDies,
        Connects { process: 0 },
        RequestArrives { process: 0 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
    ];
    let (states, log) = play_keeping_every_property(&directory, &actions);
    assert!(log.contains(r#"coordinator sends Ack { id: "1" } on ConnectionId(0)"#));
    let last = states.last().unwrap();
    let in_progress: Vec<_> = last.coordinator.flights().map(|(_, t)| t).collect();
    assert_eq!(in_progress, vec![token(1, 2)]);
}

/// Process 1 starts a call after flight 1:1 landed; its run is lost with
/// the coordinator. In term 2 it waits for the grace window; process 0's
/// landed reassert of 1:1 does not bring 1:1 back, so process 1's call
/// leads a new flight when the window ends instead of receiving 1:1's old
/// outcome.
#[test]
fn a_later_call_no_longer_gets_an_earlier_flights_outcome() {
    let directory = Directory::small();
    let actions = [
        plain_call(0),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        plain_call(1),
        CoordinatorDies,
        Connects { process: 1 },
        RequestArrives { process: 1 },
        Connects { process: 0 },
        RequestArrives { process: 0 },
        GraceWindowEnds,
        ResponseArrives { process: 1 },
    ];
    let (_, log) = play_keeping_every_property(&directory, &actions);
    let leads = Effect::StartWork {
        call: CallId(1),
        token: token(2, 1),
    };
    assert!(
        log.contains(&format!("process 1: {leads:?}")),
        "process 1's call leads the key's next flight:\n{log}"
    );
}

/// One failover and one broken connection (found in `disconnect`). Process 1
/// leads 1:1; its connection breaks, which interrupts 1:1; it reconnects and
/// reasserts, and the coordinator answers `rejected`, but dies before
/// process 1 reads it. Meanwhile process 0 led the key's next flight, 1:2.
/// In term 2, process 2's new call waits for the grace window; process 1's
/// reassert of 1:1 arrives first and is accepted, but held (SPEC.md §8.3):
/// process 2's call does not join it. Process 0's reassert of 1:2 then
/// supersedes it, interrupting nobody, and process 2's call joins 1:2 when
/// the window ends. (The core used to let the call join 1:1 at once, and
/// the supersession interrupted it: `Mutant::JoinsHeldFlights`.)
#[test]
fn a_superseded_flight_no_longer_interrupts_the_runs_that_waited() {
    let directory = Directory {
        processes: 3,
        ..Directory::disconnect()
    };
    let actions = [
        plain_call(1),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        ConnectionBreaks { process: 1 },
        Connects { process: 1 },
        // The reassert is rejected; the answer waits to be read.
        RequestArrives { process: 1 },
        plain_call(0),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CoordinatorDies,
        plain_call(2),
        Connects { process: 2 },
        RequestArrives { process: 2 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
        Connects { process: 0 },
        RequestArrives { process: 0 },
        GraceWindowEnds,
        ResponseArrives { process: 2 },
    ];
    let (_, log) = play_keeping_every_property(&directory, &actions);
    assert!(log.contains(&format!("Lead {{ id: \"1\", token: {:?} }}", token(1, 2))));
    assert!(
        log.contains(r#"coordinator sends Rejected { id: "1" } on ConnectionId(1)"#),
        "in term 2, process 0's reassert of 1:2 supersedes 1:1, whose leader is rejected:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "coordinator sends Joined {{ id: \"1\", flight: {:?} }} on ConnectionId(0)",
            token(1, 2)
        )),
        "process 2's call joins 1:2 when the window ends:\n{log}"
    );
    assert!(
        !log.contains("Interrupted { id: \"1\" } on ConnectionId(2)"),
        "{log}"
    );
}

/// Two failovers and no lost message (found in `large`). Process 0 leads
/// 1:1 and misses term 2's whole grace window, so term 2 lets process 1
/// lead the key's next flight, 2:1. Term 2 dies; in term 3, process 0's
/// reassert of 1:1 arrives first and is held; process 1's reassert of 2:1
/// supersedes it, and the window's end leaves 2:1 the key's one flight.
#[test]
fn a_flight_that_missed_a_window_gives_way_to_the_later_one() {
    let directory = Directory {
        coordinator_deaths: 2,
        ..Directory::small()
    };
    let actions = [
        plain_call(0),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CoordinatorDies,
        GraceWindowEnds,
        plain_call(1),
        Connects { process: 1 },
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        CoordinatorDies,
        Connects { process: 0 },
        RequestArrives { process: 0 },
        Connects { process: 1 },
        RequestArrives { process: 1 },
        GraceWindowEnds,
    ];
    let (states, log) = play_keeping_every_property(&directory, &actions);
    assert!(log.contains(&format!("Lead {{ id: \"1\", token: {:?} }}", token(2, 1))));
    assert!(
        log.contains(r#"coordinator sends Rejected { id: "1" } on ConnectionId"#),
        "process 1's reassert of 2:1 supersedes 1:1, whose leader is rejected:\n{log}"
    );
    let last = states.last().unwrap();
    let in_progress: Vec<_> = last.coordinator.flights().map(|(_, t)| t).collect();
    assert_eq!(in_progress, vec![token(2, 1)]);
}
