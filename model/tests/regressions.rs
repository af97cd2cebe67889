//! Core bugs the model found and the core fixed (SPEC.md §8.3, §9.4: a
//! landed reassert carries its outcome and never revives its flight). Each
//! replays the path that showed the bug and checks that every property now
//! holds along it, and that the calls end as they should.

mod common;

use common::{broken_always, play, token};
use single_flight::client::{CallId, Effect};
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
        CallStarts { process: 0, key: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        CallStarts { process: 1, key: 0 },
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
    for state in &states {
        assert_eq!(broken_always(&directory, state), Vec::<&str>::new());
    }
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
        CallStarts { process: 0, key: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        CallStarts { process: 1, key: 0 },
        CoordinatorDies,
        Connects { process: 1 },
        RequestArrives { process: 1 },
        Connects { process: 0 },
        RequestArrives { process: 0 },
        GraceWindowEnds,
        ResponseArrives { process: 1 },
    ];
    let (states, log) = play(&directory, &actions);
    println!("{}", directory.narrate(&actions));
    for state in &states {
        assert_eq!(broken_always(&directory, state), Vec::<&str>::new());
    }
    let leads = Effect::StartWork {
        call: CallId(1),
        token: token(2, 1),
    };
    assert!(
        log.contains(&format!("process 1: {leads:?}")),
        "process 1's call leads the key's next flight:\n{log}"
    );
}
