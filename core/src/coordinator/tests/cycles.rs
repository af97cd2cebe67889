//! Nested flights that would wait on each other (SPEC.md §17.2), one test per
//! rule.

use super::*;

fn cycle(connection: u64, i: &str, keys: &[&str]) -> Effect {
    send(
        connection,
        Response::Cycle {
            id: id(i),
            keys: keys.iter().map(|k| key(k)).collect(),
        },
    )
}

/// §17.2: a flight's work that calls its own key is refused at once, and
/// the flight goes on.
#[test]
fn a_flight_that_waits_for_itself_is_refused() {
    let mut co = coordinator(1, Term::First, 2);
    let a = token(1, 1);
    assert_eq!(co.step(run(1, "1", "A")), vec![lead(1, "1", a)]);
    assert_eq!(co.step(nested(2, "1", "A", a)), vec![cycle(2, "1", &["A"])]);
    assert_eq!(co.flights().collect::<Vec<_>>(), vec![(&key("A"), a)]);
    // The refused call's id is free again, and the leader lands as before.
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
}

/// §17.2: A's work leads B, B's work calls A: refused, naming A then B.
#[test]
fn a_loop_through_two_flights_is_refused() {
    let mut co = coordinator(1, Term::First, 3);
    let (a, b) = (token(1, 1), token(1, 2));
    co.step(run(1, "1", "A"));
    assert_eq!(co.step(nested(2, "1", "B", a)), vec![lead(2, "1", b)]);
    assert_eq!(
        co.step(nested(3, "1", "A", b)),
        vec![cycle(3, "1", &["B", "A"])]
    );
    // B's work gets the failure and decides: it lands, and A's work goes on.
    assert_eq!(co.step(land(2, "1", value("b"))), vec![ack(2, "1")]);
    // Once B landed, a call of A by another flight's work is no cycle.
    co.step(run(2, "2", "C"));
    assert_eq!(
        co.step(nested(3, "2", "A", token(1, 3))),
        vec![joined(3, "2", a)]
    );
}

/// §17.2: a joiner's edge counts as a leader's: A's work joins B, whose
/// leader is not nested; B's work then calls A.
#[test]
fn a_joiner_waits_as_a_leader_does() {
    let mut co = coordinator(1, Term::First, 3);
    let (b, a) = (token(1, 1), token(1, 2));
    co.step(run(1, "1", "B"));
    co.step(run(2, "1", "A"));
    assert_eq!(co.step(nested(2, "2", "B", a)), vec![joined(2, "2", b)]);
    assert_eq!(
        co.step(nested(3, "1", "A", b)),
        vec![cycle(3, "1", &["B", "A"])]
    );
    // When A's nested joiner leaves, the cycle is gone.
    co.step(cancel(2, "2"));
    assert_eq!(co.step(nested(3, "1", "A", b)), vec![joined(3, "1", a)]);
}

/// §17.2: a diamond (A → B, A → C, B → D, C → D) is no cycle.
#[test]
fn a_diamond_is_no_cycle() {
    let mut co = coordinator(1, Term::First, 5);
    let a = token(1, 1);
    co.step(run(1, "1", "A"));
    assert_eq!(
        co.step(nested(2, "1", "B", a)),
        vec![lead(2, "1", token(1, 2))]
    );
    assert_eq!(
        co.step(nested(3, "1", "C", a)),
        vec![lead(3, "1", token(1, 3))]
    );
    assert_eq!(
        co.step(nested(4, "1", "D", token(1, 2))),
        vec![lead(4, "1", token(1, 4))]
    );
    assert_eq!(
        co.step(nested(5, "1", "D", token(1, 3))),
        vec![joined(5, "1", token(1, 4))]
    );
}

/// §17.2: a parent that is not in progress (landed, or of another
/// directory) is ignored.
#[test]
fn a_parent_not_in_progress_is_ignored() {
    let mut co = coordinator(1, Term::First, 2);
    let a = token(1, 1);
    co.step(run(1, "1", "A"));
    assert_eq!(
        co.step(nested(2, "1", "A", token(7, 1))),
        vec![joined(2, "1", a)]
    );
}

/// §17.2: after a failover the graph comes back with the reasserts, and a
/// run that waited in the window is refused when the window ends if a
/// reassert closed a cycle through it.
#[test]
fn a_cycle_closed_in_the_grace_window_is_refused_when_it_ends() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    let (a, b) = (token(1, 1), token(1, 2));
    assert_eq!(co.step(reassert(1, "1", "A", a)), vec![]);
    // B's work calls A before A's nested leader of B has reasserted.
    assert_eq!(co.step(nested(3, "1", "A", b)), vec![]);
    assert_eq!(co.step(nested_reassert(2, "1", "B", b, a)), vec![]);
    assert_eq!(co.step(GRACE_ENDED), vec![cycle(3, "1", &["B", "A"])]);
    assert_eq!(co.step(land(1, "1", value("a"))), vec![ack(1, "1")]);
}

/// §17.2: a rejoin that would close a cycle is refused as a run is.
#[test]
fn a_rejoin_that_closes_a_cycle_is_refused() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    let (a, b) = (token(1, 1), token(1, 2));
    co.step(reassert(1, "1", "A", a));
    co.step(nested_reassert(2, "1", "B", b, a));
    co.step(GRACE_ENDED);
    assert_eq!(
        co.step(nested_rejoin(3, "1", "A", a, b)),
        vec![cycle(3, "1", &["B", "A"])]
    );
}
