//! The rules of the protocol's extensions, one test per rule: detached
//! flights (SPEC.md §15.2) and the reuse window (§16.2, §16.3).

use super::*;
use crate::protocol::ReuseWindow;
use crate::protocol::limits::{MAX_KEPT_BYTES, MAX_KEPT_VALUES};

fn window(millis: u64) -> ReuseWindow {
    ReuseWindow::from_millis(millis).unwrap()
}

fn run_reusing(connection: u64, i: &str, k: &str, millis: u64) -> Event {
    request(
        c(connection),
        Request::Run {
            id: id(i),
            key: key(k),
            flight: None,
            reuse: Some(window(millis)),
            parent: None,
        },
    )
}

fn reused(connection: u64, i: &str, t: FencingToken, outcome: Outcome) -> Effect {
    send(
        connection,
        Response::Reused {
            id: id(i),
            flight: t,
            outcome: Box::new(outcome),
        },
    )
}

fn keep_for(k: &str, t: FencingToken, millis: u64) -> Effect {
    Effect::StartTimer {
        timer: Timer::Reuse {
            key: key(k),
            token: t,
        },
        after: window(millis).as_duration(),
    }
}

/// §15.2: a detached flight with joiners goes on without an answer; new
/// runs still join it, and its land reaches all of them.
#[test]
fn detached_flight_goes_on_while_joined() {
    let mut co = coordinator(1, Term::First, 3);
    let t = token(1, 1);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(detach(1, "1")), vec![]);
    assert_eq!(co.step(run(3, "1", "k")), vec![joined(3, "1", t)]);
    assert_eq!(co.detached().collect::<Vec<_>>(), vec![(&key("k"), t, 2)]);
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![
            landed(2, "1", value("v")),
            landed(3, "1", value("v")),
            ack(1, "1")
        ]
    );
}

/// §15.2: a detach with nobody joined stops the flight at once.
#[test]
fn detach_without_joiners_stops() {
    let mut co = coordinator(1, Term::First, 1);
    co.step(run(1, "1", "k"));
    assert_eq!(co.step(detach(1, "1")), vec![stop(1, "1")]);
    assert_eq!(co.flights().count(), 0);
    assert_eq!(co.counters().interruptions, 1);
    // The leader's late land finds no flight.
    assert_eq!(co.step(land(1, "1", value("v"))), vec![rejected(1, "1")]);
}

/// §15.2: when the last joiner of a detached flight leaves, by cancel or by
/// its connection closing, the flight is stopped.
#[test]
fn last_joiner_leaving_stops_a_detached_flight() {
    let mut co = coordinator(1, Term::First, 3);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    co.step(run(3, "1", "k"));
    co.step(detach(1, "1"));
    assert_eq!(co.step(cancel(2, "1")), vec![]);
    assert_eq!(
        co.step(Event::ConnectionClosed { connection: c(3) }),
        vec![stop(1, "1")]
    );
    assert_eq!(co.flights().count(), 0);
}

/// §15.2: a flight that is not detached goes on when its joiners leave, and
/// a leader's cancel still interrupts them (§8.6).
#[test]
fn flights_not_detached_are_unchanged() {
    let mut co = coordinator(1, Term::First, 3);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(cancel(2, "1")), vec![]);
    assert_eq!(co.flights().count(), 1);
    co.step(run(3, "1", "k"));
    assert_eq!(co.step(cancel(1, "1")), vec![interrupted(3, "1")]);
}

/// §15.2: a flight that is not detached stays so while another flight is:
/// its last joiner leaving stops nothing, and `status` shows only the
/// detached one as detached.
#[test]
fn one_detached_flight_detaches_no_other() {
    let mut co = coordinator(1, Term::First, 3);
    co.step(run(1, "1", "a"));
    co.step(run(2, "1", "a"));
    co.step(detach(1, "1"));
    co.step(run(1, "2", "b"));
    co.step(run(3, "1", "b"));
    assert_eq!(co.step(cancel(3, "1")), vec![]);
    assert_eq!(co.flights().count(), 2);
    let detached: Vec<crate::protocol::Key> = co.detached().map(|(k, _, _)| k.clone()).collect();
    assert_eq!(detached, vec![key("a")]);
}

/// §15.2: `detach` of anything but a leading party is ignored.
#[test]
fn detach_of_a_joiner_or_unknown_id_is_ignored() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(detach(2, "1")), vec![]);
    assert_eq!(co.step(detach(2, "9")), vec![]);
    assert_eq!(co.detached().count(), 0);
    assert_eq!(co.step(cancel(2, "1")), vec![]);
    assert_eq!(co.flights().count(), 1);
}

/// §15.2: a flight detached in the grace window is judged when the window
/// ends: kept when a rejoin joins it then, stopped when nobody does.
#[test]
fn detached_in_grace_is_judged_when_the_window_ends() {
    let old = token(1, 1);
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    co.step(reassert(1, "1", "k", old));
    co.step(detach(1, "1"));
    co.step(rejoin(2, "1", "k", old));
    assert_eq!(co.step(GRACE_ENDED), vec![joined(2, "1", old)]);
    assert_eq!(co.detached().collect::<Vec<_>>(), vec![(&key("k"), old, 1)]);

    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    co.step(reassert(1, "1", "k", old));
    assert_eq!(co.step(detach(1, "1")), vec![]);
    assert_eq!(co.step(GRACE_ENDED), vec![stop(1, "1")]);
}

/// §16.2, §16.3: a leader's value with a reuse window is kept and goes, at
/// once and with its flight's token, to later runs with a window; a run
/// without a window leads as before.
#[test]
fn kept_value_is_reused_by_runs_with_a_window_only() {
    let mut co = coordinator(1, Term::First, 3);
    let t = token(1, 1);
    assert_eq!(
        co.step(run_reusing(1, "1", "k", 5000)),
        vec![lead(1, "1", t)]
    );
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![ack(1, "1"), keep_for("k", t, 5000)]
    );
    assert_eq!(
        co.step(run_reusing(2, "1", "k", 10)),
        vec![reused(2, "1", t, value("v"))]
    );
    // The party is closed: its id may open another.
    assert_eq!(
        co.step(run_reusing(2, "1", "k", 10)),
        vec![reused(2, "1", t, value("v"))]
    );
    assert_eq!(co.step(run(3, "1", "k")), vec![lead(3, "1", token(1, 2))]);
}

/// §16.2: only a leader with a window has its value kept, and never a
/// failure.
#[test]
fn failures_and_leaders_without_a_window_are_not_kept() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    co.step(land(1, "1", value("v")));
    co.step(run_reusing(1, "2", "j", 5000));
    let failure = Outcome::Failure(crate::protocol::Failure {
        name: "Error".into(),
        message: "no".into(),
        code: None,
    });
    assert_eq!(co.step(land(1, "2", failure)), vec![ack(1, "2")]);
    assert_eq!(co.kept().count(), 0);
    assert_eq!(
        co.step(run_reusing(2, "1", "k", 10)),
        vec![lead(2, "1", token(1, 3))]
    );
}

/// §16.2: the expiry forgets the value; an expiry of another token
/// changes nothing.
#[test]
fn expiry_forgets_only_its_own_value() {
    let mut co = coordinator(1, Term::First, 1);
    let t = token(1, 1);
    co.step(run_reusing(1, "1", "k", 5000));
    co.step(land(1, "1", value("v")));
    let expired = |token| Event::TimerFired {
        timer: Timer::Reuse {
            key: key("k"),
            token,
        },
    };
    assert_eq!(co.step(expired(token(1, 9))), vec![]);
    assert_eq!(co.kept().count(), 1);
    assert_eq!(co.step(expired(t)), vec![]);
    assert_eq!(co.kept().count(), 0);
    assert_eq!(
        co.step(run_reusing(1, "2", "k", 5000)),
        vec![lead(1, "2", token(1, 2))]
    );
}

/// §16.2: a key that lands again replaces its kept value, with its own or
/// with nothing (a leader without a window, a failure): what is kept is
/// the key's latest landing. The timer of a replaced value, when it fires,
/// leaves the new one alone.
#[test]
fn a_new_landing_replaces_the_kept_value() {
    let mut co = coordinator(1, Term::First, 1);
    co.step(run_reusing(1, "1", "k", 5000));
    co.step(land(1, "1", value("one")));
    co.step(run_reusing(1, "2", "k", 5000));
    assert_eq!(co.flights().count(), 0, "the run took the kept value");
    // A run without a window leads; its landing forgets "one".
    co.step(run(1, "3", "k"));
    co.step(land(1, "3", value("not kept")));
    assert_eq!(co.kept().count(), 0);
    co.step(run_reusing(1, "4", "k", 5000));
    co.step(land(1, "4", value("two")));
    co.step(Event::TimerFired {
        timer: Timer::Reuse {
            key: key("k"),
            token: token(1, 1),
        },
    });
    assert_eq!(
        co.kept().collect::<Vec<_>>(),
        vec![(&key("k"), token(1, 3), &value("two"))]
    );
}

/// §16.2: over `MAX_KEPT_VALUES`, the least recently landed goes first.
#[test]
fn kept_values_are_bounded_in_number() {
    let mut co = coordinator(1, Term::First, 1);
    for n in 0..=MAX_KEPT_VALUES {
        let i = n.to_string();
        co.step(run_reusing(1, &i, &format!("k{n}"), 5000));
        co.step(land(1, &i, value("v")));
    }
    assert_eq!(co.kept().count(), MAX_KEPT_VALUES);
    assert_eq!(co.kept().next().unwrap().0, &key("k1"));
}

/// §16.2: over `MAX_KEPT_BYTES`, the least recently landed goes first.
#[test]
fn kept_values_are_bounded_in_bytes() {
    let mut co = coordinator(1, Term::First, 1);
    let big = "x".repeat(1024 * 1024);
    let fit = MAX_KEPT_BYTES / (big.len() + r#"{"value":""}"#.len() + 3);
    for n in 0..=fit {
        let i = n.to_string();
        co.step(run_reusing(1, &i, &format!("k{n}"), 5000));
        co.step(land(1, &i, value(&big)));
    }
    assert_eq!(co.kept().count(), fit);
    assert_eq!(co.kept().next().unwrap().0, &key("k1"));
    // Each value more evicts one again: an eviction takes away exactly the
    // evicted value's bytes, so the count stays true past the first one.
    for n in fit + 1..fit + 4 {
        let i = n.to_string();
        co.step(run_reusing(1, &i, &format!("k{n}"), 5000));
        co.step(land(1, &i, value(&big)));
        assert_eq!(co.kept().count(), fit, "after k{n}");
    }
    assert_eq!(co.kept().next().unwrap().0, &key("k4"));
}

/// §16.2: a value whose window ended frees its bytes: afterwards the bound
/// of `MAX_KEPT_BYTES` holds exactly as much as on a coordinator that never
/// kept it. Values of exactly a mebibyte each (key and outcome) fill it to
/// the byte, so that a single byte still counted evicts one.
#[test]
fn an_expired_value_frees_its_bytes() {
    const ITEM: usize = 1024 * 1024;
    let key_of = |n: usize| format!("k{n:02}");
    let text = "x".repeat(ITEM - key_of(0).len() - r#"{"value":""}"#.len());
    assert_eq!(key_of(0).len() + value(&text).encoded_len(), ITEM);
    let fill = MAX_KEPT_BYTES / ITEM;
    assert_eq!(fill * ITEM, MAX_KEPT_BYTES);
    let mut co = coordinator(1, Term::First, 1);
    co.step(run_reusing(1, "first", &key_of(0), 5000));
    co.step(land(1, "first", value(&text)));
    co.step(Event::TimerFired {
        timer: Timer::Reuse {
            key: key(&key_of(0)),
            token: token(1, 1),
        },
    });
    assert_eq!(co.kept().count(), 0);
    for n in 0..fill {
        let i = n.to_string();
        co.step(run_reusing(1, &i, &key_of(n), 5000));
        co.step(land(1, &i, value(&text)));
    }
    assert_eq!(co.kept().count(), fill, "nothing evicted at the bound");
    assert_eq!(co.kept().next().unwrap().0, &key(&key_of(0)));
}

/// §16.2, §16.3: a reasserted flight keeps no value when it lands (its
/// window was its own term's); in the grace window, with nothing kept, a
/// run with a window waits as a plain run does, and leads when the window
/// ends, its value then kept.
#[test]
fn reuse_around_the_grace_window() {
    let old = token(1, 1);
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    co.step(reassert(1, "1", "k", old));
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    assert_eq!(co.kept().count(), 0);
    assert_eq!(co.step(run_reusing(2, "1", "k", 5000)), vec![]);
    let t = token(2, 1);
    assert_eq!(co.step(GRACE_ENDED), vec![lead(2, "1", t)]);
    assert_eq!(
        co.step(land(2, "1", value("w"))),
        vec![ack(2, "1"), keep_for("k", t, 5000)]
    );
    assert_eq!(
        co.step(run_reusing(3, "1", "k", 10)),
        vec![reused(3, "1", t, value("w"))]
    );
}

/// §16.1: a rejoin that carries `reuse` (which a client never sends) is a
/// rejoin: the member is ignored, so it never receives a kept value and
/// joins its flight as any rejoin does.
#[test]
fn a_rejoin_carrying_reuse_ignores_it() {
    let mut co = coordinator(1, Term::First, 3);
    let t = token(1, 1);
    co.step(run_reusing(1, "1", "k", 5000));
    co.step(land(1, "1", value("v")));
    let t2 = token(1, 2);
    assert_eq!(co.step(run(1, "2", "k")), vec![lead(1, "2", t2)]);
    let rejoin_reusing = |i: &str, flight: FencingToken| {
        request(
            c(2),
            Request::Run {
                id: id(i),
                key: key("k"),
                flight: Some(flight),
                reuse: Some(window(10)),
                parent: None,
            },
        )
    };
    // A value of "k" is kept, yet the rejoin of the flight in progress
    // joins it rather than take the kept value.
    assert_eq!(co.step(rejoin_reusing("1", t2)), vec![joined(2, "1", t2)]);
    // A rejoin of the landed flight is interrupted, not handed its value.
    assert_eq!(
        co.step(rejoin_reusing("2", t)),
        vec![send(2, Response::Interrupted { id: id("2") })]
    );
}
