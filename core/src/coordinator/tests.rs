//! The coordinator's rules, one test per rule of SPEC.md §8, each comparing
//! the exact effects; and property tests over long random event sequences.

use std::sync::Arc;

use super::*;
use crate::protocol::{
    CoordinatorStats, Epoch, FencingToken, Incoming, Outcome, Request, Response,
};
pub(crate) use crate::testing::{c, id, key, token, value};

mod cycles;
mod extensions;
mod properties;
mod relay;

/// A term after a failover, with the default grace window of a directory.
const AFTER_FAILOVER: Term = Term::AfterFailover {
    grace_window: std::time::Duration::from_millis(500),
};

/// The shell's report that the grace window's timer ran out.
const GRACE_ENDED: Event = Event::TimerFired {
    timer: Timer::GraceWindow,
};

fn request(connection: ConnectionId, request: Request) -> Event {
    Event::RequestReceived {
        connection,
        request: Incoming::Request(request),
    }
}

fn run(connection: u64, i: &str, k: &str) -> Event {
    request(
        c(connection),
        Request::Run {
            id: id(i),
            key: key(k),
            flight: None,
            reuse: None,
            parent: None,
        },
    )
}

fn rejoin(connection: u64, i: &str, k: &str, flight: FencingToken) -> Event {
    request(
        c(connection),
        Request::Run {
            id: id(i),
            key: key(k),
            flight: Some(flight),
            reuse: None,
            parent: None,
        },
    )
}

fn land(connection: u64, i: &str, outcome: Outcome) -> Event {
    request(c(connection), Request::Land { id: id(i), outcome })
}

fn cancel(connection: u64, i: &str) -> Event {
    request(c(connection), Request::Cancel { id: id(i) })
}

fn reassert(connection: u64, i: &str, k: &str, t: FencingToken) -> Event {
    request(
        c(connection),
        Request::Reassert {
            id: id(i),
            key: key(k),
            token: t,
            outcome: None,
            parent: None,
        },
    )
}

fn send(connection: u64, response: Response) -> Effect {
    Effect::Send {
        connection: c(connection),
        response,
    }
}

fn lead(connection: u64, i: &str, t: FencingToken) -> Effect {
    send(
        connection,
        Response::Lead {
            id: id(i),
            token: t,
        },
    )
}

fn joined(connection: u64, i: &str, t: FencingToken) -> Effect {
    send(
        connection,
        Response::Joined {
            id: id(i),
            flight: t,
        },
    )
}

fn landed(connection: u64, i: &str, outcome: Outcome) -> Effect {
    send(
        connection,
        Response::Landed {
            id: id(i),
            outcome: Arc::new(outcome),
        },
    )
}

fn interrupted(connection: u64, i: &str) -> Effect {
    send(connection, Response::Interrupted { id: id(i) })
}

fn ack(connection: u64, i: &str) -> Effect {
    send(connection, Response::Ack { id: id(i) })
}

fn rejected(connection: u64, i: &str) -> Effect {
    send(connection, Response::Rejected { id: id(i) })
}

/// A coordinator of `epoch` with connections 1..=`connections` open.
fn coordinator(epoch: u64, term: Term, connections: u64) -> Coordinator {
    let mut coordinator = Coordinator::new(Epoch::new(epoch).unwrap(), term);
    for n in 1..=connections {
        assert_eq!(
            coordinator.step(Event::ConnectionOpened {
                connection: c(n),
                relay: None
            }),
            vec![]
        );
    }
    coordinator
}

/// §8.2: a plain run leads when no flight of its key is in progress, with a
/// fresh token; a later run of the same key joins; another key leads its own.
#[test]
fn run_leads_then_joins() {
    let mut co = coordinator(1, Term::First, 3);
    assert_eq!(co.step(run(1, "1", "k")), vec![lead(1, "1", token(1, 1))]);
    assert_eq!(co.step(run(2, "1", "k")), vec![joined(2, "1", token(1, 1))]);
    assert_eq!(co.step(run(3, "7", "k")), vec![joined(3, "7", token(1, 1))]);
    assert_eq!(
        co.step(run(3, "8", "other")),
        vec![lead(3, "8", token(1, 2))]
    );
}

/// §8.2: after a flight ends, the next run leads a new flight with a greater token.
#[test]
fn run_after_landing_leads_a_new_flight() {
    let mut co = coordinator(2, Term::First, 1);
    co.step(run(1, "1", "k"));
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    assert_eq!(co.step(run(1, "2", "k")), vec![lead(1, "2", token(2, 2))]);
}

/// §8.2: a rejoin joins its flight while it is in progress.
#[test]
fn rejoin_joins_flight_in_progress() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    assert_eq!(
        co.step(rejoin(2, "5", "k", token(1, 1))),
        vec![joined(2, "5", token(1, 1))]
    );
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![landed(2, "5", value("v")), ack(1, "1")]
    );
}

/// §8.2: a rejoin of a flight that is not in progress is interrupted and
/// never leads, outside the grace window or for a flight of this term.
#[test]
fn rejoin_of_gone_flight_is_interrupted_never_leads() {
    let mut co = coordinator(3, Term::First, 1);
    assert_eq!(
        co.step(rejoin(1, "1", "k", token(2, 9))),
        vec![interrupted(1, "1")]
    );
    let mut co = coordinator(3, AFTER_FAILOVER, 1);
    assert_eq!(
        co.step(rejoin(1, "1", "k", token(3, 9))),
        vec![interrupted(1, "1")]
    );
    // The key is free, yet nothing leads: the next plain run mints sequence 1.
    co.step(GRACE_ENDED);
    assert_eq!(co.step(run(1, "2", "k")), vec![lead(1, "2", token(3, 1))]);
}

/// §8.2: a rejoin naming a token of another flight of the key is interrupted.
#[test]
fn rejoin_of_another_flight_of_the_key_is_interrupted() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    assert_eq!(
        co.step(rejoin(2, "1", "k", token(1, 5))),
        vec![interrupted(2, "1")]
    );
}

/// §8.3, §8.4: a reassert during the grace window makes its party lead its
/// flight again, with its old token and no answer; the flight is held until
/// the window ends, when its rejoins and the plain runs of its key join it.
#[test]
fn reassert_in_grace_leads_again_silently() {
    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    let old = token(1, 4);
    assert_eq!(co.step(reassert(1, "1", "k", old)), vec![]);
    assert_eq!(co.step(rejoin(2, "3", "k", old)), vec![]);
    assert_eq!(co.step(run(2, "4", "k")), vec![]);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![joined(2, "3", old), joined(2, "4", old)]
    );
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![
            landed(2, "3", value("v")),
            landed(2, "4", value("v")),
            ack(1, "1")
        ]
    );
}

/// §8.3: a reassert after the grace window, without one, of this term's
/// token, or of a flight older than one of its key reasserted already, is
/// rejected.
#[test]
fn reassert_rejected_when_too_late_or_taken() {
    let mut co = coordinator(2, Term::First, 1);
    assert_eq!(
        co.step(reassert(1, "1", "k", token(1, 1))),
        vec![rejected(1, "1")]
    );

    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    assert_eq!(
        co.step(reassert(1, "1", "k", token(2, 1))),
        vec![rejected(1, "1")]
    );
    assert_eq!(co.step(reassert(1, "2", "k", token(1, 2))), vec![]);
    assert_eq!(
        co.step(reassert(2, "2", "k", token(1, 1))),
        vec![rejected(2, "2")]
    );
    co.step(GRACE_ENDED);
    assert_eq!(
        co.step(reassert(2, "3", "j", token(1, 3))),
        vec![rejected(2, "3")]
    );
    // The rejected ids are not open: they can be used again.
    assert_eq!(co.step(run(2, "3", "j")), vec![lead(2, "3", token(2, 1))]);
}

/// §8.4: plain runs wait during the grace window; when it ends each waiting
/// key gets one leader, the first to arrive, and the others join.
#[test]
fn grace_window_holds_plain_runs() {
    let mut co = coordinator(5, AFTER_FAILOVER, 3);
    assert_eq!(co.step(run(1, "1", "a")), vec![]);
    assert_eq!(co.step(run(2, "1", "b")), vec![]);
    assert_eq!(co.step(run(3, "1", "a")), vec![]);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![
            lead(1, "1", token(5, 1)),
            lead(2, "1", token(5, 2)),
            joined(3, "1", token(5, 1)),
        ]
    );
    assert!(!co.in_grace());
    assert_eq!(co.step(GRACE_ENDED), vec![]);
}

/// §8.4: rejoins still waiting when the window ends are interrupted.
#[test]
fn waiting_rejoins_interrupted_at_end_of_grace() {
    let mut co = coordinator(2, AFTER_FAILOVER, 1);
    assert_eq!(co.step(rejoin(1, "1", "k", token(1, 1))), vec![]);
    assert_eq!(co.step(GRACE_ENDED), vec![interrupted(1, "1")]);
}

/// §8.3, §8.4: a reassert interrupts the waiting rejoins of an older flight
/// of its key at once; its own rejoins and the key's plain runs wait for the
/// window's end and then join it, in arrival order.
#[test]
fn reassert_releases_waiting_runs_of_its_key() {
    let mut co = coordinator(3, AFTER_FAILOVER, 2);
    co.step(run(2, "1", "k"));
    co.step(rejoin(2, "2", "k", token(2, 1)));
    co.step(rejoin(2, "3", "k", token(1, 1)));
    co.step(run(2, "4", "other"));
    assert_eq!(
        co.step(reassert(1, "1", "k", token(2, 1))),
        vec![interrupted(2, "3")]
    );
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![
            joined(2, "1", token(2, 1)),
            joined(2, "2", token(2, 1)),
            lead(2, "4", token(3, 1)),
        ]
    );
}

/// §8.4: a held flight that lands in the window hands its outcome to its
/// rejoins and to the key's plain runs waiting (each answered `joined`, then
/// `landed`); one interrupted in the window leaves the plain runs waiting,
/// to lead when it ends.
#[test]
fn held_flight_ending_in_the_window_settles_its_key() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    let old = token(1, 7);
    co.step(reassert(1, "1", "k", old));
    co.step(rejoin(2, "1", "k", old));
    co.step(run(3, "1", "k"));
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![
            landed(2, "1", value("v")),
            joined(3, "1", old),
            landed(3, "1", value("v")),
            ack(1, "1"),
        ]
    );

    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    co.step(reassert(1, "1", "k", old));
    co.step(rejoin(2, "1", "k", old));
    co.step(run(3, "1", "k"));
    assert_eq!(co.step(cancel(1, "1")), vec![interrupted(2, "1")]);
    assert_eq!(co.step(GRACE_ENDED), vec![lead(3, "1", token(2, 1))]);
}

/// §8.4: a rejoin that arrives after its reasserted flight ended in this
/// grace window gets that flight's ending.
#[test]
fn late_rejoin_in_grace_gets_the_ending() {
    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    co.step(reassert(1, "1", "k", token(1, 1)));
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    assert_eq!(
        co.step(rejoin(2, "1", "k", token(1, 1))),
        vec![landed(2, "1", value("v"))]
    );
    co.step(reassert(1, "2", "j", token(1, 2)));
    co.step(cancel(1, "2"));
    assert_eq!(
        co.step(rejoin(2, "2", "j", token(1, 2))),
        vec![interrupted(2, "2")]
    );
    // A flight that ended cannot be reasserted again.
    assert_eq!(
        co.step(reassert(1, "3", "k", token(1, 1))),
        vec![rejected(1, "3")]
    );
}

/// §8.5: `land` from anyone but the leader is rejected and changes nothing.
#[test]
fn land_from_non_leader_rejected() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(land(2, "1", value("x"))), vec![rejected(2, "1")]);
    assert_eq!(co.step(land(2, "9", value("x"))), vec![rejected(2, "9")]);
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![landed(2, "1", value("v")), ack(1, "1")]
    );
    assert_eq!(co.step(land(1, "1", value("v"))), vec![rejected(1, "1")]);
}

/// §8.6: cancel withdraws a waiting run or a joiner silently, and a
/// leader's cancel interrupts its joiners.
#[test]
fn cancel_rules() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    co.step(run(1, "1", "k"));
    assert_eq!(co.step(cancel(1, "1")), vec![]);
    assert_eq!(co.step(cancel(1, "404")), vec![]);
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(GRACE_ENDED), vec![lead(2, "1", token(2, 1))]);
    co.step(run(3, "1", "k"));
    co.step(run(3, "2", "k"));
    assert_eq!(co.step(cancel(3, "1")), vec![]);
    assert_eq!(co.step(cancel(2, "1")), vec![interrupted(3, "2")]);
    assert_eq!(co.flights().count(), 0);
}

/// §8.7: a closed connection withdraws all its parties; nothing is sent on
/// it, even to a joiner of its own leader.
#[test]
fn closed_connection_withdraws_everything() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "a"));
    co.step(run(1, "2", "a"));
    co.step(run(2, "1", "a"));
    co.step(run(2, "2", "b"));
    co.step(run(1, "3", "b"));
    assert_eq!(
        co.step(Event::ConnectionClosed { connection: c(1) }),
        vec![interrupted(2, "1")]
    );
    assert!(!co.is_open(c(1)));
    assert_eq!(co.step(run(1, "4", "a")), vec![]);
    assert_eq!(co.step(land(2, "2", value("v"))), vec![ack(2, "2")]);
}

/// §8.8: an unknown op is answered `unsupported` and the connection keeps its
/// parties; a second request with an open id is ignored.
#[test]
fn unknown_ops_and_duplicate_ids() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    let unknown = Event::RequestReceived {
        connection: c(1),
        request: Incoming::Unknown {
            op: "teleport".into(),
            id: id("2"),
        },
    };
    assert_eq!(
        co.step(unknown),
        vec![send(1, Response::Unsupported { id: id("2") })]
    );
    assert_eq!(co.step(run(1, "1", "k")), vec![]);
    assert_eq!(co.step(reassert(1, "1", "k", token(1, 1))), vec![]);
    co.step(run(2, "1", "k"));
    assert_eq!(co.step(run(2, "1", "other")), vec![]);
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![landed(2, "1", value("v")), ack(1, "1")]
    );
}

/// §3.5: `status` lists the flights in progress in key order.
#[test]
fn status_lists_flights() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "b"));
    co.step(run(1, "2", "a"));
    co.step(run(2, "1", "b"));
    let status = request(c(2), Request::Status { id: id("9") });
    let flights = vec![
        crate::protocol::FlightStatus {
            key: key("a"),
            token: token(1, 2),
            joiners: 0,
            detached: false,
        },
        crate::protocol::FlightStatus {
            key: key("b"),
            token: token(1, 1),
            joiners: 1,
            detached: false,
        },
    ];
    assert_eq!(
        co.step(status),
        vec![send(
            2,
            Response::Status {
                id: id("9"),
                flights,
                waiting: None,
                omitted: None,
                stats: Some(Box::new(CoordinatorStats {
                    flights_led: 2,
                    joins: 1,
                    connections_open: 2,
                    ..CoordinatorStats::default()
                })),
                hosts: None,
                relay: None,
            }
        )]
    );
}

/// §3.5, §8.4: during a grace window `status` says how many runs wait for
/// it, and lists the held flights.
#[test]
fn status_counts_the_runs_waiting_for_the_window() {
    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    co.step(reassert(1, "1", "a", token(1, 3)));
    co.step(run(2, "1", "a"));
    co.step(run(2, "2", "b"));
    co.step(rejoin(2, "3", "a", token(1, 3)));
    co.step(cancel(2, "2"));
    let status = |co: &mut Coordinator| co.step(request(c(2), Request::Status { id: id("9") }));
    let held = vec![crate::protocol::FlightStatus {
        key: key("a"),
        token: token(1, 3),
        joiners: 0,
        detached: false,
    }];
    assert_eq!(
        status(&mut co),
        vec![send(
            2,
            Response::Status {
                id: id("9"),
                flights: held,
                waiting: Some(2),
                omitted: None,
                stats: Some(Box::new(CoordinatorStats {
                    reasserts_accepted: 1,
                    rejoins: 1,
                    grace_windows: 1,
                    connections_open: 2,
                    ..CoordinatorStats::default()
                })),
                hosts: None,
                relay: None,
            }
        )]
    );
    co.step(GRACE_ENDED);
    let joined = vec![crate::protocol::FlightStatus {
        key: key("a"),
        token: token(1, 3),
        joiners: 2,
        detached: false,
    }];
    assert_eq!(
        status(&mut co),
        vec![send(
            2,
            Response::Status {
                id: id("9"),
                flights: joined,
                waiting: None,
                omitted: None,
                stats: Some(Box::new(CoordinatorStats {
                    joins: 2,
                    reasserts_accepted: 1,
                    rejoins: 1,
                    grace_windows: 1,
                    connections_open: 2,
                    ..CoordinatorStats::default()
                })),
                hosts: None,
                relay: None,
            }
        )]
    );
}

/// §8.11: the counters follow the term's decisions: reasserts accepted and
/// rejected, a landed reassert's value, rejoins, the window, runs that lead
/// and join when it ends, a failure landed, and a flight interrupted by its
/// leader's cancel; a land that is rejected counts nothing.
#[test]
fn counters_count_what_the_term_decided() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    assert_eq!(co.counters().grace_windows, 1);
    assert_eq!(co.step(reassert(1, "1", "a", token(1, 3))), vec![]);
    assert_eq!(
        co.step(reassert(2, "1", "a", token(1, 2))),
        vec![rejected(2, "1")]
    );
    let landed_before = request(
        c(2),
        Request::Reassert {
            id: id("2"),
            key: key("b"),
            token: token(1, 5),
            outcome: Some(value("v")),
            parent: None,
        },
    );
    assert_eq!(co.step(landed_before), vec![ack(2, "2")]);
    assert_eq!(co.step(rejoin(3, "1", "a", token(1, 3))), vec![]);
    assert_eq!(co.step(run(3, "2", "c")), vec![]);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![joined(3, "1", token(1, 3)), lead(3, "2", token(2, 1))]
    );
    assert_eq!(co.step(run(2, "3", "c")), vec![joined(2, "3", token(2, 1))]);
    let failure = Outcome::Failure(crate::protocol::Failure {
        name: "Error".into(),
        message: "disk full".into(),
        code: None,
    });
    assert_eq!(
        co.step(land(2, "3", failure.clone())),
        vec![rejected(2, "3")]
    );
    assert_eq!(
        co.step(land(3, "2", failure.clone())),
        vec![landed(2, "3", failure), ack(3, "2")]
    );
    assert_eq!(co.step(cancel(1, "1")), vec![interrupted(3, "1")]);
    assert_eq!(
        co.counters(),
        CoordinatorStats {
            flights_led: 1,
            joins: 2,
            lands_value: 1,
            lands_failure: 1,
            interruptions: 1,
            reasserts_accepted: 2,
            reasserts_rejected: 1,
            rejoins: 1,
            grace_windows: 1,
            connections_open: 3,
            connections_refused: 0,
        }
    );
}

/// §8.11, §12: the counters are not part of the coordinator's equality or
/// hash, so that the model checker's states do not multiply with them.
#[test]
fn counters_stay_out_of_equality_and_hash() {
    use std::hash::{BuildHasher, RandomState};
    let fresh = coordinator(2, Term::First, 1);
    let mut counted = fresh.clone();
    assert_eq!(
        counted.step(reassert(1, "1", "k", token(1, 1))),
        vec![rejected(1, "1")]
    );
    assert_ne!(counted.counters(), fresh.counters());
    assert_eq!(counted, fresh);
    let hasher = RandomState::new();
    assert_eq!(hasher.hash_one(&counted), hasher.hash_one(&fresh));
}

/// §8.9: when a term's sequence is used up the coordinator ends its term
/// instead of minting a token that is not greater.
#[test]
fn exhausted_sequence_ends_the_term() {
    let mut co = coordinator(1, Term::First, 0).with_next_sequence(u32::MAX);
    co.step(Event::ConnectionOpened {
        connection: c(1),
        relay: None,
    });
    assert_eq!(
        co.step(run(1, "1", "a")),
        vec![lead(1, "1", token(1, u32::MAX))]
    );
    assert_eq!(
        co.step(run(1, "2", "b")),
        vec![Effect::EndTerm {
            reason: EndReason::OutOfTokens
        }]
    );
    assert_eq!(co.step(run(1, "3", "c")), vec![]);
}

/// The coordinator's answer that the term is over at a stop (§10.4).
const STOPPED: Effect = Effect::EndTerm {
    reason: EndReason::Stopped,
};

/// §10.4: a stop outside the grace window ends the term at once, and every
/// later event is ignored, a second stop included.
#[test]
fn s10_4_a_stop_outside_the_grace_window_ends_the_term_at_once() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(1, "1", "k"));
    assert_eq!(co.step(Event::StopRequested), vec![STOPPED]);
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(co.step(Event::StopRequested), vec![]);
}

/// §10.4: a stop inside the grace window is served out: the window's
/// rejoins still get the outcome of a flight that landed in it, and the
/// term ends with the window, after the window's last answers.
#[test]
fn s10_4_a_stop_inside_the_grace_window_ends_the_term_with_the_window() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    let old = token(1, 1);
    co.step(reassert(1, "1", "k", old));
    assert_eq!(co.step(land(1, "1", value("v"))), vec![ack(1, "1")]);
    co.step(run(3, "1", "j"));
    assert_eq!(co.step(Event::StopRequested), vec![]);
    assert_eq!(co.step(Event::StopRequested), vec![], "asked again");
    assert_eq!(
        co.step(rejoin(2, "1", "k", old)),
        vec![landed(2, "1", value("v"))]
    );
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![lead(3, "1", token(2, 1)), STOPPED]
    );
    assert_eq!(co.step(GRACE_ENDED), vec![]);
    assert_eq!(co.step(run(2, "2", "k")), vec![]);
}

/// §8.9, §10.4: a term ends once, however many reasons it has: a term
/// asked to stop in its window that runs out of tokens as the window
/// settles ends for want of tokens, and says so once.
#[test]
fn a_term_that_runs_out_of_tokens_at_a_stopped_window_ends_once() {
    let mut co = coordinator(2, AFTER_FAILOVER, 2).with_next_sequence(u32::MAX);
    co.step(run(1, "1", "a"));
    co.step(run(2, "1", "b"));
    co.step(Event::StopRequested);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![
            lead(1, "1", token(2, u32::MAX)),
            Effect::EndTerm {
                reason: EndReason::OutOfTokens
            },
        ]
    );
}

/// §8.9: a connection with too many open requests is closed, and its
/// parties withdrawn.
#[test]
fn too_many_open_requests_closes_the_connection() {
    let mut co = coordinator(1, Term::First, 2);
    co.step(run(2, "leader", "k"));
    for n in 0..MAX_OPEN_REQUESTS_PER_CONNECTION {
        let effects = co.step(run(1, &n.to_string(), "k"));
        assert_eq!(effects.len(), 1);
    }
    assert_eq!(
        co.step(run(1, "one-more", "k")),
        vec![Effect::Close {
            connection: c(1),
            reason: CloseReason::TooManyOpenRequests
        }]
    );
    assert_eq!(
        co.step(land(2, "leader", value("v"))),
        vec![ack(2, "leader")]
    );
}

/// §8.1: events for connections that are not open change nothing.
#[test]
fn events_for_unknown_connections_are_ignored() {
    let mut co = coordinator(1, Term::First, 0);
    let before = co.clone();
    assert_eq!(co.step(run(9, "1", "k")), vec![]);
    assert_eq!(
        co.step(Event::ConnectionClosed { connection: c(9) }),
        vec![]
    );
    assert_eq!(co, before);
}

fn reassert_landed(connection: u64, i: &str, k: &str, t: FencingToken, outcome: Outcome) -> Event {
    request(
        c(connection),
        Request::Reassert {
            id: id(i),
            key: key(k),
            token: t,
            outcome: Some(outcome),
            parent: None,
        },
    )
}

/// §8.3: a flight that landed in a term that died before acknowledging it
/// hands its outcome to its rejoiners, but does not come back to life: it
/// displaces no flight in progress, and no later call joins it.
#[test]
fn landed_reassert_does_not_come_back() {
    let mut co = coordinator(2, AFTER_FAILOVER, 3);
    assert_eq!(co.step(run(3, "1", "a")), vec![]);
    assert_eq!(co.step(rejoin(3, "2", "a", token(1, 1))), vec![]);
    assert_eq!(
        co.step(reassert_landed(1, "1", "a", token(1, 1), value("old"))),
        vec![landed(3, "2", value("old")), ack(1, "1")]
    );
    assert_eq!(co.flights().count(), 0);
    assert_eq!(
        co.step(rejoin(3, "3", "a", token(1, 1))),
        vec![landed(3, "3", value("old"))]
    );
    // The key's next flight, in progress at the failover, comes back, and
    // the plain run that waited joins it when the window ends, not the
    // landed one.
    assert_eq!(co.step(reassert(2, "1", "a", token(1, 2))), vec![]);
    assert_eq!(co.step(GRACE_ENDED), vec![joined(3, "1", token(1, 2))]);
    assert_eq!(
        co.step(land(2, "1", value("new"))),
        vec![landed(3, "1", value("new")), ack(2, "1")]
    );
}

/// §8.3: of two flights of one key reasserted in a window, the later one
/// (the greater token) wins: the older had ended before the later was led.
/// The older was held, so only its own rejoins are interrupted: the plain
/// run that waited joins the later one when the window ends.
#[test]
fn greater_token_supersedes_an_older_reassert() {
    let mut co = coordinator(3, AFTER_FAILOVER, 4);
    assert_eq!(co.step(rejoin(3, "1", "a", token(2, 1))), vec![]);
    assert_eq!(co.step(reassert(1, "1", "a", token(1, 1))), vec![]);
    assert_eq!(co.step(rejoin(3, "2", "a", token(1, 1))), vec![]);
    assert_eq!(co.step(run(4, "1", "a")), vec![]);
    assert_eq!(
        co.step(reassert(2, "1", "a", token(2, 1))),
        vec![interrupted(3, "2"), rejected(1, "1")]
    );
    assert_eq!(
        co.step(reassert(1, "2", "a", token(1, 1))),
        vec![rejected(1, "2")]
    );
    assert_eq!(
        co.step(rejoin(3, "3", "a", token(1, 1))),
        vec![interrupted(3, "3")]
    );
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![joined(3, "1", token(2, 1)), joined(4, "1", token(2, 1))]
    );

    // The other order: the older one is refused at once.
    let mut co = coordinator(3, AFTER_FAILOVER, 2);
    assert_eq!(co.step(reassert(2, "1", "a", token(2, 1))), vec![]);
    assert_eq!(
        co.step(reassert(1, "1", "a", token(1, 1))),
        vec![rejected(1, "1")]
    );
    assert_eq!(
        co.step(rejoin(1, "2", "a", token(1, 1))),
        vec![interrupted(1, "2")]
    );
}

/// A value whose outcome is exactly `len` bytes of JSON (`{"value":"…"}`).
fn value_of_len(len: usize) -> Outcome {
    value(&"v".repeat(len - r#"{"value":""}"#.len()))
}

/// The longest id a joiner can have on the wire: `MAX_ID_BYTES` control
/// characters, each written as six bytes (`\u0001`).
fn longest_id(last: char) -> String {
    let mut id = "\u{1}".repeat(crate::protocol::limits::MAX_ID_BYTES - 1);
    id.push(last);
    id
}

/// The length of every line the coordinator would write for `effects`.
fn line_lengths(effects: &[Effect]) -> Vec<usize> {
    let mut encoder = crate::protocol::LineEncoder::default();
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send { response, .. } => Some(encoder.line(response).len() - 1),
            _ => None,
        })
        .collect()
}

/// §3.4, §8.5: an outcome of exactly `MAX_OUTCOME_BYTES` is handed to
/// joiners whose ids are as long as an id can be written, in lines within
/// the frame, and the leader is acknowledged; one byte more and the joiners
/// get the `ValueTooLarge` failure instead, and the leader `rejected`.
#[test]
fn an_outcome_over_the_limit_reaches_the_joiners_as_a_failure() {
    use crate::protocol::limits::{MAX_FRAME_BYTES, MAX_OUTCOME_BYTES};
    let (first, second) = (longest_id('1'), longest_id('2'));

    let mut co = coordinator(1, Term::First, 3);
    assert_eq!(co.step(run(1, "1", "k")), vec![lead(1, "1", token(1, 1))]);
    assert_eq!(co.step(run(2, &first, "k")).len(), 1);
    assert_eq!(co.step(run(3, &second, "k")).len(), 1);
    let at_limit = value_of_len(MAX_OUTCOME_BYTES);
    assert_eq!(at_limit.encoded_len(), MAX_OUTCOME_BYTES);
    let effects = co.step(land(1, "1", at_limit.clone()));
    assert_eq!(
        effects,
        vec![
            landed(2, &first, at_limit.clone()),
            landed(3, &second, at_limit),
            ack(1, "1")
        ]
    );
    let lengths = line_lengths(&effects);
    assert!(
        lengths.iter().all(|&len| len <= MAX_FRAME_BYTES),
        "{lengths:?}"
    );

    assert_eq!(co.step(run(1, "2", "k")), vec![lead(1, "2", token(1, 2))]);
    assert_eq!(co.step(run(2, &first, "k")).len(), 1);
    let effects = co.step(land(1, "2", value_of_len(MAX_OUTCOME_BYTES + 1)));
    let [Effect::Send { response, .. }, answer] = &effects[..] else {
        panic!("one landed and one answer, not {effects:?}");
    };
    let Response::Landed { outcome, .. } = response else {
        panic!("the joiner gets a failure, not {response:?}");
    };
    let Outcome::Failure(failure) = &**outcome else {
        panic!("the joiner gets a failure, not {response:?}");
    };
    assert_eq!(failure.name, "ValueTooLarge");
    assert!(
        failure
            .message
            .contains(&(MAX_OUTCOME_BYTES + 1).to_string()),
        "{failure:?}"
    );
    assert_eq!(*answer, rejected(1, "2"));
    assert_eq!(co.flights().count(), 0, "the flight ended");
}

/// §3.4: the `ValueTooLarge` failure that replaces an outcome too large,
/// a value or a failure, gives the size and says to share the path of a
/// file (issue 28 item 10: a failure's said to shorten its message only).
#[test]
fn value_too_large_gives_the_size_and_says_to_share_a_path() {
    use crate::protocol::limits::MAX_OUTCOME_BYTES;
    let long_failure = Outcome::Failure(crate::protocol::Failure {
        name: "Error".into(),
        message: "m".repeat(MAX_OUTCOME_BYTES),
        code: None,
    });
    for outcome in [value_of_len(MAX_OUTCOME_BYTES + 1), long_failure] {
        let len = outcome.encoded_len();
        let Err(failure) = outcome.shareable() else {
            panic!("an outcome over the limit is not shareable");
        };
        assert_eq!(failure.name, "ValueTooLarge");
        assert!(failure.message.contains(&len.to_string()), "{failure:?}");
        assert!(
            failure.message.contains("share the path of a file"),
            "{failure:?}"
        );
    }
}

/// §3.4, §8.3: a landed reassert whose outcome is over the limit hands the
/// `ValueTooLarge` failure to the rejoins that wait and to those that come
/// later in the window, and its leader is answered `rejected`.
#[test]
fn a_landed_reassert_over_the_limit_hands_over_a_failure() {
    use crate::protocol::limits::MAX_OUTCOME_BYTES;
    let too_large = value_of_len(MAX_OUTCOME_BYTES + 1);
    let Err(failure) = too_large.clone().shareable() else {
        panic!("an outcome one byte over the limit is not shareable");
    };
    let failure = Outcome::Failure(failure);
    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    assert_eq!(co.step(rejoin(2, "1", "k", token(1, 1))), vec![]);
    assert_eq!(
        co.step(reassert_landed(1, "1", "k", token(1, 1), too_large)),
        vec![landed(2, "1", failure.clone()), rejected(1, "1")]
    );
    assert_eq!(
        co.step(rejoin(2, "2", "k", token(1, 1))),
        vec![landed(2, "2", failure)]
    );
}

/// §8.3, §8.4: a plain run that waits in the window is not answered by a
/// landed reassert of its key (that flight may have landed before the run
/// was made); it keeps waiting, and leads a new flight when the window ends.
#[test]
fn a_plain_run_waits_through_a_landed_reassert_and_then_leads() {
    let mut co = coordinator(2, AFTER_FAILOVER, 2);
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(
        co.step(reassert_landed(1, "1", "k", token(1, 1), value("old"))),
        vec![ack(1, "1")]
    );
    assert_eq!(co.step(GRACE_ENDED), vec![lead(2, "1", token(2, 1))]);
}

/// §8.5: joiners are answered in (connection, id) order: connections in the
/// order the shell numbered them (as it accepted them), the ids of one
/// connection by their bytes, whatever the order they joined in.
#[test]
fn joiners_are_answered_in_connection_and_id_order() {
    let mut co = coordinator(1, Term::First, 3);
    assert_eq!(co.step(run(1, "1", "k")), vec![lead(1, "1", token(1, 1))]);
    assert_eq!(co.step(run(3, "x", "k")), vec![joined(3, "x", token(1, 1))]);
    for i in ["10", "9", "2", "Z", "a", "é"] {
        assert_eq!(co.step(run(2, i, "k")), vec![joined(2, i, token(1, 1))]);
    }
    let outcome = value("v");
    let mut expected: Vec<Effect> = ["10", "2", "9", "Z", "a", "é"]
        .iter()
        .map(|i| landed(2, i, outcome.clone()))
        .collect();
    expected.push(landed(3, "x", outcome.clone()));
    expected.push(ack(1, "1"));
    assert_eq!(co.step(land(1, "1", outcome)), expected);
}

/// §3.5: a `status` answer is one line within the frame: with more flights
/// than fit, it lists the first ones in key order, as many as fit in
/// `STATUS_FLIGHTS_BYTES`, and counts the others in `omitted`; with all of
/// them listed it has no `omitted`.
#[test]
fn status_lists_the_flights_that_fit_and_counts_the_others() {
    use crate::protocol::limits::{MAX_FRAME_BYTES, STATUS_FLIGHTS_BYTES};
    let key_of = |n: usize| format!("{n:05}{}", "k".repeat(4091));
    let mut co = coordinator(1, Term::First, 2);
    let status_of = |co: &mut Coordinator| {
        let effects = co.step(request(
            c(2),
            Request::Status {
                id: id(&longest_id('s')),
            },
        ));
        let [Effect::Send { response, .. }] = &effects[..] else {
            panic!("one answer, not {effects:?}");
        };
        assert!(crate::protocol::encode(response).len() <= MAX_FRAME_BYTES);
        let Response::Status {
            flights, omitted, ..
        } = response.clone()
        else {
            panic!("a status answer");
        };
        (flights, omitted)
    };
    // Each flight's JSON and its comma: the same length for every key here.
    let one = {
        assert_eq!(co.step(run(1, "0", &key_of(0))).len(), 1);
        let (flights, _) = status_of(&mut co);
        crate::protocol::encoded_len(&flights[0]) + 1
    };
    let fit = STATUS_FLIGHTS_BYTES / one;
    for n in 1..fit {
        assert_eq!(co.step(run(1, &n.to_string(), &key_of(n))).len(), 1);
    }
    let (flights, omitted) = status_of(&mut co);
    assert_eq!((flights.len(), omitted), (fit, None), "all {fit} fit");
    assert_eq!(co.step(run(1, "last", &key_of(fit))).len(), 1);
    let (flights, omitted) = status_of(&mut co);
    assert_eq!(
        (flights.len(), omitted),
        (fit, Some(1)),
        "one more does not"
    );
    let listed: Vec<String> = flights.iter().map(|f| f.key.to_string()).collect();
    let first: Vec<String> = (0..fit).map(key_of).collect();
    assert_eq!(listed, first, "the first ones in key order");
}

/// §8.4, §8.11 (issue 28): when a held flight lands in the window, the
/// waiting runs of its key are answered in arrival order whatever their
/// kind, a plain run `joined` then `landed` and a rejoin `landed`; the
/// plain runs count as joins, the rejoins do not (they count as rejoins).
#[test]
fn a_held_flight_landing_in_the_window_answers_in_arrival_order() {
    let old = token(1, 1);
    let mut co = coordinator(2, AFTER_FAILOVER, 4);
    co.step(reassert(1, "1", "k", old));
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(co.step(rejoin(3, "1", "k", old)), vec![]);
    assert_eq!(co.step(run(4, "1", "k")), vec![]);
    assert_eq!(
        co.step(land(1, "1", value("v"))),
        vec![
            joined(2, "1", old),
            landed(2, "1", value("v")),
            landed(3, "1", value("v")),
            joined(4, "1", old),
            landed(4, "1", value("v")),
            ack(1, "1"),
        ]
    );
    let counters = co.counters();
    assert_eq!((counters.joins, counters.rejoins), (2, 1));
}

/// §8.4 (issue 28): when the window ends, plain runs and rejoins are
/// settled as one sequence in arrival order, whatever their kind.
#[test]
fn the_window_settles_plain_runs_and_rejoins_in_arrival_order() {
    let old = token(1, 1);
    let mut co = coordinator(2, AFTER_FAILOVER, 4);
    co.step(reassert(1, "1", "k", old));
    assert_eq!(co.step(run(2, "1", "k")), vec![]);
    assert_eq!(co.step(rejoin(3, "1", "k", old)), vec![]);
    assert_eq!(co.step(run(4, "1", "k")), vec![]);
    assert_eq!(
        co.step(GRACE_ENDED),
        vec![
            joined(2, "1", old),
            joined(3, "1", old),
            joined(4, "1", old)
        ]
    );
    assert_eq!(co.counters().joins, 3);
}

/// §10.2: a term after a failover starts its grace window's timer when it
/// begins, for the length it was created with; the window ends when the
/// timer fires. A first term asks for no timer.
#[test]
fn a_term_after_a_failover_starts_its_grace_timer() {
    let grace_window = std::time::Duration::from_millis(1234);
    let mut co = Coordinator::new(Epoch::new(2).unwrap(), Term::AfterFailover { grace_window });
    assert_eq!(
        co.step(Event::TermBegan),
        vec![Effect::StartTimer {
            timer: Timer::GraceWindow,
            after: grace_window,
        }]
    );
    assert!(co.in_grace());
    assert_eq!(co.step(GRACE_ENDED), vec![]);
    assert!(!co.in_grace());
    // Reported again after the window, it asks for nothing.
    assert_eq!(co.step(Event::TermBegan), vec![]);
    let mut first = coordinator(1, Term::First, 0);
    assert_eq!(first.step(Event::TermBegan), vec![]);
}

/// §11.3: every accepted connection holds a slot, in its handshake or open;
/// one accepted when all are held is refused at once, and counts as refused
/// (§8.11). A slot is free again once its connection is refused, closed in
/// its handshake, or closed after it opened.
#[test]
fn connections_hold_slots_until_refused_or_closed() {
    let accepted = |n| Event::ConnectionAccepted { connection: c(n) };
    let too_many = |n| Effect::Close {
        connection: c(n),
        reason: CloseReason::TooManyConnections,
    };
    let mut co = coordinator(1, Term::First, 0).with_connection_limit(2);
    assert_eq!(co.step(accepted(1)), vec![]);
    assert_eq!(co.step(accepted(2)), vec![]);
    assert!(co.in_handshake(c(1)) && co.in_handshake(c(2)));
    assert_eq!(co.step(accepted(3)), vec![too_many(3)]);
    assert!(!co.in_handshake(c(3)));
    // Refused in its handshake: the slot is free, and counted.
    assert_eq!(
        co.step(Event::ConnectionRefused { connection: c(1) }),
        vec![]
    );
    assert!(!co.in_handshake(c(1)));
    assert_eq!(co.step(accepted(4)), vec![]);
    // Opened: it keeps its slot, now as an open connection.
    assert_eq!(
        co.step(Event::ConnectionOpened {
            connection: c(4),
            relay: None
        }),
        vec![]
    );
    assert!(co.is_open(c(4)) && !co.in_handshake(c(4)));
    assert_eq!(co.step(accepted(5)), vec![too_many(5)]);
    // Its peer left before its hello: free, and not counted as refused.
    assert_eq!(
        co.step(Event::ConnectionClosed { connection: c(2) }),
        vec![]
    );
    assert_eq!(co.step(accepted(6)), vec![]);
    assert_eq!(
        co.step(Event::ConnectionClosed { connection: c(4) }),
        vec![]
    );
    assert_eq!(co.step(accepted(7)), vec![]);
    assert_eq!(co.step(accepted(8)), vec![too_many(8)]);
    // A late refusal, of a connection that is not in its handshake, changes
    // nothing and is not counted.
    assert_eq!(
        co.step(Event::ConnectionRefused { connection: c(4) }),
        vec![]
    );
    assert_eq!(
        co.step(Event::ConnectionRefused { connection: c(3) }),
        vec![]
    );
    let stats = co.counters();
    assert_eq!(stats.connections_refused, 4, "3, 1, 5 and 8");
    assert_eq!(stats.connections_open, 0);
}

/// §8.11: the coordinator counts the connections it refused, and `status`
/// reports them from its own counters: no shell edits its answer.
#[test]
fn status_reports_the_refused_connections() {
    let mut co = coordinator(1, Term::First, 1).with_connection_limit(2);
    co.step(Event::ConnectionAccepted { connection: c(2) });
    co.step(Event::ConnectionRefused { connection: c(2) });
    co.step(Event::ConnectionAccepted { connection: c(3) });
    co.step(Event::ConnectionAccepted { connection: c(4) });
    let effects = co.step(request(c(1), Request::Status { id: id("9") }));
    let [
        Effect::Send {
            response: Response::Status {
                stats: Some(stats), ..
            },
            ..
        },
    ] = effects.as_slice()
    else {
        panic!("one status answer: {effects:?}");
    };
    assert_eq!(stats.connections_refused, 2);
    assert_eq!(stats.connections_open, 1);
}

/// §11.3: a driver that opens connections without accepting them first (the
/// model checker skips the handshake) still has them take slots, within the
/// limit.
#[test]
fn a_connection_opened_without_accept_takes_a_slot() {
    let mut co = coordinator(1, Term::First, 0).with_connection_limit(1);
    assert_eq!(
        co.step(Event::ConnectionOpened {
            connection: c(1),
            relay: None
        }),
        vec![]
    );
    assert_eq!(
        co.step(Event::ConnectionOpened {
            connection: c(1),
            relay: None
        }),
        vec![]
    );
    assert_eq!(
        co.step(Event::ConnectionOpened {
            connection: c(2),
            relay: None
        }),
        vec![Effect::Close {
            connection: c(2),
            reason: CloseReason::TooManyConnections,
        }]
    );
    assert!(co.is_open(c(1)) && !co.is_open(c(2)));
}

/// `step_into` appends to the caller's buffer what `step` returns, and
/// leaves the coordinator as `step` does; a buffer that already holds effects
/// keeps them first.
#[test]
fn step_into_appends_what_step_returns() {
    let events = [
        run(1, "1", "k"),
        run(2, "1", "k"),
        run(3, "1", "k"),
        land(1, "1", value("v")),
    ];
    let mut by_step = coordinator(1, Term::First, 3);
    let mut by_buffer = by_step.clone();
    let end = Effect::EndTerm {
        reason: EndReason::Stopped,
    };
    let mut buffer = vec![end.clone()];
    for event in events {
        let returned = by_step.step(event.clone());
        by_buffer.step_into(event, &mut buffer);
        assert_eq!(buffer[0], end, "what was there stays first");
        assert_eq!(buffer[1..], returned[..]);
        assert_eq!(by_buffer, by_step);
        buffer.truncate(1);
    }
}

/// §8.5: the joiners of a flight are handed one outcome, shared rather than
/// copied for each (BENCHMARKS.md, "`step` with hash tables").
#[test]
fn joiners_share_one_outcome() {
    let mut co = coordinator(1, Term::First, 3);
    co.step(run(1, "1", "k"));
    co.step(run(2, "1", "k"));
    co.step(run(3, "1", "k"));
    let effects = co.step(land(1, "1", value("v")));
    let outcomes: Vec<&Arc<Outcome>> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send {
                response: Response::Landed { outcome, .. },
                ..
            } => Some(outcome),
            _ => None,
        })
        .collect();
    let [first, second] = outcomes[..] else {
        panic!("two joiners landed, not {effects:?}");
    };
    assert_eq!(**first, value("v"));
    assert!(Arc::ptr_eq(first, second), "one outcome for both");
}

// Shared by the tests of the extensions, of nested flights and of relay
// windows (tests/*.rs).

fn nested(connection: u64, i: &str, k: &str, parent: FencingToken) -> Event {
    request(
        c(connection),
        Request::Run {
            id: id(i),
            key: key(k),
            flight: None,
            reuse: None,
            parent: Some(parent),
        },
    )
}

fn nested_rejoin(
    connection: u64,
    i: &str,
    k: &str,
    t: FencingToken,
    parent: FencingToken,
) -> Event {
    request(
        c(connection),
        Request::Run {
            id: id(i),
            key: key(k),
            flight: Some(t),
            reuse: None,
            parent: Some(parent),
        },
    )
}

fn nested_reassert(
    connection: u64,
    i: &str,
    k: &str,
    t: FencingToken,
    parent: FencingToken,
) -> Event {
    request(
        c(connection),
        Request::Reassert {
            id: id(i),
            key: key(k),
            token: t,
            outcome: None,
            parent: Some(parent),
        },
    )
}

fn detach(connection: u64, i: &str) -> Event {
    request(c(connection), Request::Detach { id: id(i) })
}

fn stop(connection: u64, i: &str) -> Effect {
    send(connection, Response::Stop { id: id(i) })
}
