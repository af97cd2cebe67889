//! The connection slots of a term (SPEC.md §11.3, §12.2): checked
//! exhaustively, with the state count pinned, and the seeded bug of issue
//! 27's bug 5 caught.

use single_flight_core::coordinator::Mutant;
use single_flight_model::slots::{REFUSED_HOLDS_NO_SLOT, Slots};
use stateright::{Checker, Model};

/// Unique states of `Slots::small()`: a change means the explored space
/// changed; find out why before updating it.
const SMALL_STATES: usize = 1_237;

#[test]
fn the_shipped_coordinator_keeps_every_slot_property() {
    let checker = Slots::small().checker().spawn_bfs().join();
    checker.assert_properties();
    println!(
        "slots: {} unique states, {} generated, depth {}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth()
    );
    assert_eq!(checker.unique_state_count(), SMALL_STATES);
}

/// §12.3: a connection refused in its handshake that keeps its slot is
/// caught, with a path.
#[test]
fn a_refused_connection_that_keeps_its_slot_is_caught() {
    let checker = Slots::small()
        .with_mutant(Some(Mutant::KeepsRefusedSlots))
        .checker()
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(REFUSED_HOLDS_NO_SLOT)
        .expect("the seeded bug breaks the property");
    println!("{REFUSED_HOLDS_NO_SLOT}: {:?}", path.into_actions());
}
