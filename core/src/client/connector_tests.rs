//! The connector's rules (SPEC.md §9.4, §10.1, §10.4, §14.3, §14.6), one test
//! per rule, comparing the exact effects at given times: no clock, so each
//! runs in microseconds.

use std::sync::Arc;
use std::time::Duration;

use super::connector::{Attempted, CLOSE_TIMEOUT, DRAIN_IDLE, Effect, Event};
use super::{CallId, CallOptions, Connector, Resolution};
use crate::client::Effect as ClientEffect;
use crate::protocol::{Epoch, FencingToken, Key, Outcome, Request, Response};

const POLL: Duration = Duration::from_millis(100);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key() -> Key {
    Key::new("k").unwrap()
}

fn token(sequence: u32) -> FencingToken {
    FencingToken::new(Epoch::FIRST, sequence).unwrap()
}

fn run(call: u64, flight: Option<FencingToken>) -> Effect {
    Effect::Call(ClientEffect::Send(Request::Run {
        id: CallId(call).request_id(),
        key: key(),
        flight,
        reuse: None,
        parent: None,
    }))
}

fn start(connector: &mut Connector, now: Duration, call: u64) -> Vec<Effect> {
    connector.step(
        now,
        Event::CallStarted {
            call: CallId(call),
            key: key(),
            options: CallOptions::default(),
        },
    )
}

fn receive(connector: &mut Connector, now: Duration, response: Response) -> Vec<Effect> {
    connector.step(now, Event::ResponseReceived { response })
}

fn ended(connector: &mut Connector, now: Duration, attempt: Attempted) -> Vec<Effect> {
    connector.step(now, Event::AttemptEnded { attempt })
}

fn timer(connector: &mut Connector, now: Duration, received: u64) -> Vec<Effect> {
    connector.step(now, Event::TimerFired { received })
}

/// A connector connected at time 0.
fn connected() -> Connector {
    let mut connector = Connector::new();
    assert_eq!(connector.poll_timeout(), Some(Duration::ZERO));
    assert_eq!(timer(&mut connector, ms(0), 0), vec![Effect::StartAttempt]);
    assert_eq!(ended(&mut connector, ms(0), Attempted::Connected), vec![]);
    assert_eq!(connector.poll_timeout(), None);
    connector
}

/// §10.1, §14.3: after a missed attempt the next one comes a pause later,
/// whatever wakes the connector meanwhile (a call, another call's cancel);
/// then at once.
#[test]
fn attempts_are_paced_after_a_miss() {
    let mut connector = Connector::new();
    assert_eq!(start(&mut connector, ms(0), 1), vec![Effect::StartAttempt]);
    assert_eq!(
        ended(&mut connector, ms(5), Attempted::Missed { pause: POLL }),
        vec![]
    );
    assert_eq!(connector.poll_timeout(), Some(ms(105)));
    assert_eq!(start(&mut connector, ms(6), 2), vec![]);
    assert_eq!(
        connector.step(ms(50), Event::CallCancelled { call: CallId(2) }),
        vec![]
    );
    assert_eq!(timer(&mut connector, ms(104), 0), vec![]);
    assert_eq!(
        timer(&mut connector, ms(105), 0),
        vec![Effect::StartAttempt]
    );
    assert_eq!(connector.poll_timeout(), None, "an attempt runs");
    // A second start while one runs starts nothing.
    assert_eq!(start(&mut connector, ms(106), 3), vec![]);
}

/// §14.3: a coordinator that changed while connecting is looked for again
/// with no pause; a winner connects to itself at once.
#[test]
fn a_changed_coordinator_or_a_won_term_is_tried_again_at_once() {
    let mut connector = Connector::new();
    assert_eq!(timer(&mut connector, ms(0), 0), vec![Effect::StartAttempt]);
    assert_eq!(
        ended(
            &mut connector,
            ms(3),
            Attempted::Missed {
                pause: Duration::ZERO
            }
        ),
        vec![Effect::StartAttempt]
    );
    assert_eq!(
        ended(&mut connector, ms(4), Attempted::Won),
        vec![Effect::StartAttempt]
    );
}

/// §14.5, §14.6: a failed attempt ends the calls that wait for a
/// coordinator `Unavailable`, not a call whose work runs; the next attempt
/// comes a pause later.
#[test]
fn a_refusal_ends_the_waiting_calls() {
    let mut connector = connected();
    start(&mut connector, ms(1), 1);
    start(&mut connector, ms(1), 2);
    receive(
        &mut connector,
        ms(2),
        Response::Lead {
            id: CallId(1).request_id(),
            token: token(1),
        },
    );
    assert_eq!(
        connector.step(ms(3), Event::ConnectionLost),
        vec![Effect::Disconnect, Effect::StartAttempt]
    );
    assert_eq!(
        ended(&mut connector, ms(4), Attempted::Failed { pause: POLL }),
        vec![Effect::Unavailable { call: CallId(2) }]
    );
    assert_eq!(connector.client().waiting_calls(), vec![]);
    assert_eq!(
        connector.client().calls_in_progress(),
        1,
        "the leader goes on"
    );
    assert_eq!(connector.poll_timeout(), Some(ms(104)));
}

/// §9.4: after a lost connection the next attempt starts at once, and the
/// new connection carries the replay: a rejoin for a joined call.
#[test]
fn a_reconnect_replays_the_calls() {
    let mut connector = connected();
    assert_eq!(start(&mut connector, ms(1), 1), vec![run(1, None)]);
    receive(
        &mut connector,
        ms(2),
        Response::Joined {
            id: CallId(1).request_id(),
            flight: token(7),
        },
    );
    assert_eq!(
        connector.step(ms(3), Event::ConnectionLost),
        vec![Effect::Disconnect, Effect::StartAttempt]
    );
    // A line of the old connection delivered late is not the new one's.
    assert_eq!(
        receive(
            &mut connector,
            ms(4),
            Response::Interrupted {
                id: CallId(1).request_id()
            }
        ),
        vec![]
    );
    assert_eq!(
        ended(&mut connector, ms(5), Attempted::Connected),
        vec![run(1, Some(token(7)))]
    );
}

/// §14.3: a gone coordinator is read on while bytes come, and its answers
/// reach the calls; it is left once `DRAIN_IDLE` passes without a byte.
#[test]
fn a_gone_coordinator_is_read_while_bytes_come() {
    let mut connector = connected();
    start(&mut connector, ms(1), 1);
    receive(
        &mut connector,
        ms(2),
        Response::Joined {
            id: CallId(1).request_id(),
            flight: token(7),
        },
    );
    assert_eq!(
        connector.step(ms(10), Event::CoordinatorGone { received: 100 }),
        vec![]
    );
    assert_eq!(connector.poll_timeout(), Some(ms(10) + DRAIN_IDLE));
    // Part of a long landed line came meanwhile.
    assert_eq!(timer(&mut connector, ms(510), 4_000), vec![]);
    assert_eq!(connector.poll_timeout(), Some(ms(1010)));
    assert_eq!(
        receive(
            &mut connector,
            ms(700),
            Response::Landed {
                id: CallId(1).request_id(),
                outcome: Arc::new(Outcome::Value("v".into())),
            }
        ),
        vec![Effect::Call(ClientEffect::Resolve {
            call: CallId(1),
            resolution: Resolution::Joined {
                flight: token(7),
                outcome: Outcome::Value("v".into()),
            },
        })]
    );
    // The landed line was heard since the last look: read on once more.
    assert_eq!(timer(&mut connector, ms(1010), 4_000), vec![]);
    assert_eq!(
        timer(&mut connector, ms(1510), 4_000),
        vec![Effect::Disconnect, Effect::StartAttempt]
    );
}

/// §14.3: a gone coordinator that sends nothing (a dead host) is left
/// `DRAIN_IDLE` after the election told, not before.
#[test]
fn a_silent_gone_coordinator_is_left_after_the_drain() {
    let mut connector = connected();
    assert!(!connector.awaits_answers(), "no call waits");
    connector.step(ms(10), Event::CoordinatorGone { received: 0 });
    assert!(
        connector.awaits_answers(),
        "§10.1: a drain reads what comes as it comes"
    );
    assert_eq!(timer(&mut connector, ms(509), 0), vec![]);
    assert_eq!(
        timer(&mut connector, ms(510), 0),
        vec![Effect::Disconnect, Effect::StartAttempt]
    );
    // Its connection closing now is no news.
    assert_eq!(connector.step(ms(511), Event::ConnectionLost), vec![]);
}

/// §14.3: a gone coordinator that closes its connection is left at once.
#[test]
fn a_gone_coordinator_that_closes_is_left_at_once() {
    let mut connector = connected();
    connector.step(ms(10), Event::CoordinatorGone { received: 0 });
    assert_eq!(
        connector.step(ms(11), Event::ConnectionLost),
        vec![Effect::Disconnect, Effect::StartAttempt]
    );
}

/// A leader's land settled by `ack`, and a land never sent (the flight was
/// lost), are both told to the shell (§9.3, §9.6).
#[test]
fn lands_settle_by_ack_or_by_a_lost_flight() {
    let mut connector = connected();
    start(&mut connector, ms(1), 1);
    start(&mut connector, ms(1), 2);
    for call in [1, 2] {
        receive(
            &mut connector,
            ms(2),
            Response::Lead {
                id: CallId(call).request_id(),
                token: token(call as u32),
            },
        );
    }
    receive(
        &mut connector,
        ms(3),
        Response::Rejected {
            id: CallId(2).request_id(),
        },
    );
    let finished = |call: u64| Event::WorkFinished {
        call: CallId(call),
        outcome: Outcome::Value("v".into()),
    };
    assert_eq!(
        connector.step(ms(4), finished(2)),
        vec![
            Effect::Call(ClientEffect::Resolve {
                call: CallId(2),
                resolution: Resolution::Led { token: token(2) },
            }),
            Effect::Call(ClientEffect::LandSettled { call: CallId(2) }),
        ]
    );
    let effects = connector.step(ms(5), finished(1));
    assert!(!effects.contains(&Effect::Call(ClientEffect::LandSettled { call: CallId(1) })));
    assert_eq!(
        receive(
            &mut connector,
            ms(6),
            Response::Ack {
                id: CallId(1).request_id()
            }
        ),
        vec![Effect::Call(ClientEffect::LandSettled { call: CallId(1) })]
    );
}

/// §10.4: a close with nothing to land stops at once, abandoning the
/// attempt in progress.
#[test]
fn an_idle_close_stops_at_once() {
    let mut connector = Connector::new();
    assert_eq!(timer(&mut connector, ms(0), 0), vec![Effect::StartAttempt]);
    assert!(!connector.is_stopped());
    assert_eq!(
        connector.step(ms(1), Event::CloseRequested),
        vec![Effect::Stop]
    );
    assert!(connector.is_stopped());
    assert_eq!(connector.poll_timeout(), None);
    assert_eq!(ended(&mut connector, ms(2), Attempted::Connected), vec![]);
}

/// §10.4: a close waits for its lands, up to `CLOSE_TIMEOUT`: it stops when
/// the land is settled, or at the deadline.
#[test]
fn a_close_waits_for_lands_until_its_deadline() {
    for acknowledged in [true, false] {
        let mut connector = connected();
        start(&mut connector, ms(1), 1);
        receive(
            &mut connector,
            ms(2),
            Response::Lead {
                id: CallId(1).request_id(),
                token: token(1),
            },
        );
        connector.step(
            ms(3),
            Event::WorkFinished {
                call: CallId(1),
                outcome: Outcome::Value("v".into()),
            },
        );
        assert!(
            !connector.awaits_answers(),
            "§10.1: a land's ack may wait for the next read"
        );
        assert_eq!(connector.step(ms(10), Event::CloseRequested), vec![]);
        assert!(connector.awaits_answers(), "§10.4: a close waits for it");
        assert_eq!(connector.poll_timeout(), Some(ms(10) + CLOSE_TIMEOUT));
        if acknowledged {
            assert_eq!(
                receive(
                    &mut connector,
                    ms(20),
                    Response::Ack {
                        id: CallId(1).request_id()
                    }
                ),
                vec![
                    Effect::Call(ClientEffect::LandSettled { call: CallId(1) }),
                    Effect::Stop
                ]
            );
        } else {
            assert_eq!(timer(&mut connector, ms(2009), 0), vec![]);
            assert_eq!(timer(&mut connector, ms(2010), 0), vec![Effect::Stop]);
        }
    }
}

/// §9.1: only the canonical decimal text of a number names a call.
#[test]
fn call_ids_map_to_request_ids_and_back() {
    let id = CallId(17).request_id();
    assert_eq!(id.as_str(), "17");
    assert_eq!(CallId::from_request_id(&id), Some(CallId(17)));
    for alias in ["017", "+17", "17 ", "x", "18446744073709551616"] {
        let id = crate::protocol::RequestId::new(alias.to_owned()).unwrap();
        assert_eq!(CallId::from_request_id(&id), None, "{alias:?}");
    }
}
