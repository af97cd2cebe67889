//! Replaying a scripted path through the model, for the scenario tests.
// Each test file uses some of these helpers; the rest would be dead code.
#![allow(dead_code)]

use single_flight_core::protocol::{Epoch, FencingToken};
use single_flight_model::check::Narrated;
use single_flight_model::{Action, Directory, State};
use stateright::Model;

/// Replays `actions` (each must be enabled where it is played), returning
/// every state, from the initial one, and what happened in each step.
pub fn play(directory: &Directory, actions: &[Action]) -> (Vec<State>, String) {
    let mut states = directory.init_states();
    let mut log = String::new();
    for action in actions {
        let state = states.last().expect("starts with the initial state");
        let mut enabled = Vec::new();
        directory.actions(state, &mut enabled);
        assert!(enabled.contains(action), "{action:?} is not enabled");
        let next = directory.apply(state, action, Some(&mut log));
        states.push(next);
    }
    (states, log)
}

/// Replays `actions` as [`play`] does, prints the path, and checks that
/// every `always` property holds in every state along it.
pub fn play_keeping_every_property(
    directory: &Directory,
    actions: &[Action],
) -> (Vec<State>, String) {
    let (states, log) = play(directory, actions);
    println!("{}", directory.narrate(actions));
    for state in &states {
        assert_eq!(broken_always(directory, state), Vec::<&str>::new());
    }
    (states, log)
}

/// Whether the property named `property` holds in `state`.
pub fn holds(directory: &Directory, property: &'static str, state: &State) -> bool {
    (directory.property(property).condition)(directory, state)
}

/// The `always` properties that `state` breaks.
pub fn broken_always(directory: &Directory, state: &State) -> Vec<&'static str> {
    directory
        .properties()
        .into_iter()
        .filter(|property| property.expectation == stateright::Expectation::Always)
        .filter(|property| !(property.condition)(directory, state))
        .map(|property| property.name)
        .collect()
}

pub fn token(epoch: u64, sequence: u32) -> FencingToken {
    FencingToken::new(Epoch::new(epoch).unwrap(), sequence).unwrap()
}

/// A caller of `process` starts a call for the first key, neither detached
/// nor with a reuse window.
pub fn plain_call(process: usize) -> Action {
    Action::CallStarts {
        process,
        key: 0,
        detached: false,
        reuse: false,
    }
}
