//! Detached calls (SPEC.md §15) and the reuse window (§16), step by step:
//! the paths the new configurations explore among millions, replayed with
//! what each call ends with. Every property holds along each of them.

mod common;

use common::{play_keeping_every_property, token};
use single_flight_core::client::{CallId, Effect, Resolution};
use single_flight_core::protocol::{Key, Outcome};
use single_flight_model::{Action, Choice, Directory, Ending, Witness};

use single_flight_model::Action::*;

/// [`Directory::detach`] with each call detached or not, so that a path may
/// have a plain joiner beside a detached leader.
fn detach() -> Directory {
    Directory {
        detached: Choice::PerCall,
        ..Directory::detach()
    }
}

fn call(process: usize, detached: bool, reuse: bool) -> Action {
    CallStarts {
        process,
        key: 0,
        detached,
        reuse,
    }
}

/// Process 1's detached call leads 1:1 and process 0's call joins it. The
/// leader's caller leaves: the flight goes on, its work lands, and the
/// joiner receives the value.
#[test]
fn a_detached_flight_lands_for_its_joiner_after_its_caller_left() {
    let actions = [
        call(1, true, false),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        call(0, false, false),
        RequestArrives { process: 0 },
        CallerCancels {
            process: 1,
            call: CallId(1),
        },
        // The coordinator reads `detach`: a joiner waits, so nothing is sent.
        RequestArrives { process: 1 },
        WorkFinishes {
            process: 1,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 1 },
        ResponseArrives { process: 0 },
        ResponseArrives { process: 0 },
    ];
    let (states, log) = play_keeping_every_property(&detach(), &actions);
    assert!(!log.contains("Stop"), "{log}");
    let joined = Effect::Resolve {
        call: CallId(1),
        resolution: Resolution::Joined {
            flight: token(1, 1),
            outcome: Outcome::Value(token(1, 1).to_string()),
        },
    };
    assert!(log.contains(&format!("process 0: {joined:?}")), "{log}");
    assert!(
        states
            .last()
            .unwrap()
            .last_step
            .saw(Witness::DetachedFlightLanded)
    );
}

/// As above, but the joiner leaves before the work ends: nobody waits any
/// more, so the coordinator tells the leader to stop, and its work is
/// dropped (SPEC.md §15.2).
#[test]
fn the_last_joiner_leaving_stops_a_detached_flight() {
    let actions = [
        call(1, true, false),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        call(0, false, false),
        RequestArrives { process: 0 },
        CallerCancels {
            process: 1,
            call: CallId(1),
        },
        RequestArrives { process: 1 },
        CallerCancels {
            process: 0,
            call: CallId(1),
        },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        ResponseArrives { process: 1 },
    ];
    let (states, log) = play_keeping_every_property(&detach(), &actions);
    assert!(
        log.contains(r#"coordinator sends Stop { id: "1" } on ConnectionId(1)"#),
        "{log}"
    );
    assert!(!log.contains("Interrupted"), "{log}");
    let leader = states.last().unwrap().processes[1].as_ref().unwrap();
    assert!(leader.work.is_empty());
    assert!(leader.client.is_idle());
}

/// A detached flight across a failover, whose joiner reconnects only after
/// the grace window. The leader's reassert and detach arrive in the window;
/// when it ends no rejoin has arrived, so nobody waits and the flight is
/// stopped; the late rejoin is then interrupted, and its call resolves as
/// lost in the failover. (Had the leader's caller
/// stayed, the flight would still be in progress and the late rejoin would
/// join it: a detached flight counts its waiters from the rejoins that
/// arrive in the window, SPEC.md §15.2.) This is why "a joiner of a detached flight whose
/// leader's caller left receives the flight's outcome" excuses a flight of
/// an earlier term.
#[test]
fn a_rejoin_after_the_window_finds_its_detached_flight_stopped() {
    let actions = [
        call(1, true, false),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        call(0, false, false),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CallerCancels {
            process: 1,
            call: CallId(1),
        },
        RequestArrives { process: 1 },
        CoordinatorDies,
        Connects { process: 1 },
        RequestArrives { process: 1 },
        RequestArrives { process: 1 },
        GraceWindowEnds,
        Connects { process: 0 },
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        ResponseArrives { process: 1 },
    ];
    let (states, log) = play_keeping_every_property(&detach(), &actions);
    assert!(
        log.contains(r#"coordinator sends Stop { id: "1" } on ConnectionId(0)"#),
        "{log}"
    );
    // The rejoin found its flight gone: lost in the failover (§9.2).
    let interrupted = Effect::Resolve {
        call: CallId(1),
        resolution: Resolution::Lost,
    };
    assert!(
        log.contains(&format!("process 0: {interrupted:?}")),
        "{log}"
    );
    let leader = states.last().unwrap().processes[1].as_ref().unwrap();
    assert!(leader.work.is_empty());
}

/// The same path with the leader's caller staying: the reasserted flight
/// is in progress after the window, and the late rejoin joins it.
#[test]
fn a_rejoin_after_the_window_joins_a_flight_whose_caller_stayed() {
    let actions = [
        call(1, true, false),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        call(0, false, false),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        CoordinatorDies,
        Connects { process: 1 },
        RequestArrives { process: 1 },
        GraceWindowEnds,
        Connects { process: 0 },
        RequestArrives { process: 0 },
    ];
    let (_, log) = play_keeping_every_property(&detach(), &actions);
    assert!(!log.contains("Stop"), "{log}");
    assert!(
        log.contains(&format!(
            r#"coordinator sends Joined {{ id: "1", flight: {:?} }} on ConnectionId(1)"#,
            token(1, 1)
        )),
        "{log}"
    );
}

/// Process 0's call with a reuse window leads 1:1 and lands a value, which
/// the coordinator keeps. Process 1's call with a window receives it at
/// once; after the window's expiry, its next call leads 1:2.
#[test]
fn a_kept_value_is_reused_until_its_window_ends() {
    let actions = [
        call(0, false, true),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        call(1, false, true),
        RequestArrives { process: 1 },
        ResponseArrives { process: 1 },
        ReuseExpires {
            key: Key::new("a").unwrap(),
            token: token(1, 1),
        },
        call(1, false, true),
        RequestArrives { process: 1 },
    ];
    let (states, log) = play_keeping_every_property(&Directory::reuse(), &actions);
    let reused = Effect::Resolve {
        call: CallId(1),
        resolution: Resolution::Reused {
            flight: token(1, 1),
            outcome: Outcome::Value(token(1, 1).to_string()),
        },
    };
    assert!(log.contains(&format!("process 1: {reused:?}")), "{log}");
    assert!(
        log.contains(&format!(
            r#"coordinator sends Lead {{ id: "2", token: {:?} }}"#,
            token(1, 2)
        )),
        "{log}"
    );
    assert!(states.last().unwrap().reuse_timers.is_empty());
}

/// A kept value is not for a call without a window: it leads a flight of
/// its own.
#[test]
fn a_call_without_a_window_does_not_take_a_kept_value() {
    let actions = [
        call(0, false, true),
        RequestArrives { process: 0 },
        ResponseArrives { process: 0 },
        WorkFinishes {
            process: 0,
            call: CallId(1),
            ending: Ending::Value,
        },
        RequestArrives { process: 0 },
        call(1, false, false),
        RequestArrives { process: 1 },
    ];
    let (states, log) = play_keeping_every_property(&Directory::reuse(), &actions);
    assert!(!log.contains("Reused"), "{log}");
    assert!(
        log.contains(&format!(
            r#"coordinator sends Lead {{ id: "1", token: {:?} }}"#,
            token(1, 2)
        )),
        "{log}"
    );
    let kept: Vec<_> = states
        .last()
        .unwrap()
        .coordinator
        .kept()
        .map(|(_, t, _)| t)
        .collect();
    assert_eq!(kept, vec![token(1, 1)]);
}
