//! The client's rules, one test per rule of SPEC.md §9, comparing the exact
//! effects.

use std::sync::Arc;

use super::*;
use crate::protocol::{
    Epoch, FencingToken, Key, Outcome, Reason, Request, RequestId, Response, ReuseWindow,
};

fn id(n: u64) -> RequestId {
    RequestId::new(n.to_string()).unwrap()
}

fn key() -> Key {
    Key::new("k").unwrap()
}

fn token(sequence: u32) -> FencingToken {
    FencingToken::new(Epoch::FIRST, sequence).unwrap()
}

fn value() -> Outcome {
    Outcome::Value("v".into())
}

fn start(client: &mut Client, call: u64) -> Vec<Effect> {
    client.step(Event::CallStarted {
        call: CallId(call),
        key: key(),
        options: CallOptions::default(),
    })
}

fn receive(client: &mut Client, response: Response) -> Vec<Effect> {
    client.step(Event::ResponseReceived { response })
}

fn run(call: u64, flight: Option<FencingToken>) -> Effect {
    Effect::Send(Request::Run {
        id: id(call),
        key: key(),
        flight,
        reuse: None,
        parent: None,
    })
}

fn connected() -> Client {
    let mut client = Client::new();
    assert_eq!(client.step(Event::ConnectionReady), vec![]);
    client
}

/// §9.2: a call sends `run`; `lead` starts the work; when it finishes the
/// caller has its own result at once and the land goes out.
#[test]
fn leader_runs_work_and_lands() {
    let mut client = connected();
    assert_eq!(start(&mut client, 1), vec![run(1, None)]);
    assert_eq!(
        receive(
            &mut client,
            Response::Lead {
                id: id(1),
                token: token(1)
            }
        ),
        vec![Effect::StartWork {
            call: CallId(1),
            token: token(1)
        }]
    );
    let finished = Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    };
    assert_eq!(
        client.step(finished),
        vec![
            Effect::Resolve {
                call: CallId(1),
                resolution: Resolution::Led { token: token(1) }
            },
            Effect::Send(Request::Land {
                id: id(1),
                outcome: value()
            }),
        ]
    );
    assert!(
        !client.is_idle(),
        "§9.3: the land is kept until acknowledged"
    );
    assert_eq!(
        receive(&mut client, Response::Ack { id: id(1) }),
        vec![Effect::LandSettled { call: CallId(1) }],
        "§9.6: a leader that waits for its land is told"
    );
    assert!(client.is_idle());
}

/// §9.2: a joiner resolves with the flight's outcome, or as interrupted.
#[test]
fn joiner_resolves_with_outcome_or_interruption() {
    let mut client = connected();
    start(&mut client, 1);
    start(&mut client, 2);
    assert_eq!(
        receive(
            &mut client,
            Response::Joined {
                id: id(1),
                flight: token(4)
            }
        ),
        vec![]
    );
    assert_eq!(
        receive(
            &mut client,
            Response::Joined {
                id: id(2),
                flight: token(4)
            }
        ),
        vec![]
    );
    assert_eq!(
        receive(
            &mut client,
            Response::Landed {
                id: id(1),
                outcome: Arc::new(value())
            }
        ),
        vec![Effect::Resolve {
            call: CallId(1),
            resolution: Resolution::Joined {
                flight: token(4),
                outcome: value()
            }
        }]
    );
    assert_eq!(
        receive(&mut client, Response::Interrupted { id: id(2) }),
        vec![Effect::Resolve {
            call: CallId(2),
            resolution: Resolution::Interrupted
        }]
    );
    assert!(client.is_idle());
}

/// §9.2: a joined call whose rejoin is answered `interrupted` lost its
/// flight in the failover; once the rejoin is answered `joined`, a later
/// `interrupted` is its leader's doing again.
#[test]
fn an_interrupted_rejoin_is_a_flight_lost_in_a_failover() {
    let mut client = connected();
    start(&mut client, 1);
    start(&mut client, 2);
    for call in [1, 2] {
        receive(
            &mut client,
            Response::Joined {
                id: id(call),
                flight: token(4),
            },
        );
    }
    client.step(Event::ConnectionLost);
    assert_eq!(
        client.step(Event::ConnectionReady),
        vec![run(1, Some(token(4))), run(2, Some(token(4)))]
    );
    assert_eq!(
        receive(&mut client, Response::Interrupted { id: id(1) }),
        vec![Effect::Resolve {
            call: CallId(1),
            resolution: Resolution::Lost
        }]
    );
    receive(
        &mut client,
        Response::Joined {
            id: id(2),
            flight: token(4),
        },
    );
    assert_eq!(
        receive(&mut client, Response::Interrupted { id: id(2) }),
        vec![Effect::Resolve {
            call: CallId(2),
            resolution: Resolution::Interrupted
        }]
    );
    assert!(client.is_idle());
}

/// §9.4: on a new connection the client reasserts what it leads (and lands
/// again what was not acknowledged), rejoins what it joined, and runs again
/// what got no answer; calls started while disconnected wait for it.
#[test]
fn replay_after_lost_connection() {
    let mut client = connected();
    start(&mut client, 1);
    start(&mut client, 2);
    start(&mut client, 3);
    start(&mut client, 4);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    receive(
        &mut client,
        Response::Lead {
            id: id(2),
            token: token(2),
        },
    );
    receive(
        &mut client,
        Response::Joined {
            id: id(3),
            flight: token(7),
        },
    );
    client.step(Event::ConnectionLost);
    let finished = Event::WorkFinished {
        call: CallId(2),
        outcome: value(),
    };
    assert_eq!(
        client.step(finished),
        vec![Effect::Resolve {
            call: CallId(2),
            resolution: Resolution::Led { token: token(2) }
        }]
    );
    assert_eq!(start(&mut client, 5), vec![]);
    assert_eq!(
        client.step(Event::ConnectionReady),
        vec![
            Effect::Send(Request::Reassert {
                id: id(1),
                key: key(),
                token: token(1),
                outcome: None,
                parent: None,
            }),
            Effect::Send(Request::Reassert {
                id: id(2),
                key: key(),
                token: token(2),
                outcome: Some(value()),
                parent: None,
            }),
            run(3, Some(token(7))),
            run(4, None),
            run(5, None),
        ]
    );
}

/// §9.3: a rejected reassert orphans the call: the work goes on, its result
/// is the caller's alone, and no land is sent for it.
#[test]
fn rejected_reassert_orphans_the_leader() {
    let mut client = connected();
    start(&mut client, 1);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client.step(Event::ConnectionLost);
    client.step(Event::ConnectionReady);
    assert_eq!(
        receive(&mut client, Response::Rejected { id: id(1) }),
        vec![]
    );
    let finished = Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    };
    assert_eq!(
        client.step(finished),
        vec![
            Effect::Resolve {
                call: CallId(1),
                resolution: Resolution::Led { token: token(1) }
            },
            // §9.6: no land is sent, so a leader that waits for it goes on.
            Effect::LandSettled { call: CallId(1) },
        ]
    );
    assert!(client.is_idle());
    client.step(Event::ConnectionLost);
    assert_eq!(client.step(Event::ConnectionReady), vec![]);
}

/// §9.3: a land that is rejected (reassert too late) is dropped.
#[test]
fn rejected_land_is_dropped() {
    let mut client = connected();
    start(&mut client, 1);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client.step(Event::ConnectionLost);
    client.step(Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    });
    client.step(Event::ConnectionReady);
    assert_eq!(
        receive(&mut client, Response::Rejected { id: id(1) }),
        vec![Effect::LandSettled { call: CallId(1) }]
    );
    assert!(client.is_idle());
    assert_eq!(
        receive(&mut client, Response::Rejected { id: id(1) }),
        vec![]
    );
}

/// §9.5: cancelling sends `cancel` for anything the coordinator knows, and
/// nothing while disconnected; answers that arrive later are ignored.
#[test]
fn cancel_withdraws() {
    let mut client = connected();
    start(&mut client, 1);
    let cancel = |call| Event::CallCancelled { call: CallId(call) };
    assert_eq!(
        client.step(cancel(1)),
        vec![Effect::Send(Request::Cancel { id: id(1) })]
    );
    assert_eq!(
        receive(
            &mut client,
            Response::Lead {
                id: id(1),
                token: token(1)
            }
        ),
        vec![]
    );
    start(&mut client, 2);
    client.step(Event::ConnectionLost);
    assert_eq!(client.step(cancel(2)), vec![]);
    assert_eq!(client.step(Event::ConnectionReady), vec![]);
    assert!(client.is_idle());
}

/// §9.5: cancelling a call that already has its result changes nothing: its
/// land still reaches the joiners.
#[test]
fn cancel_after_result_keeps_the_land() {
    let mut client = connected();
    start(&mut client, 1);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client.step(Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    });
    assert_eq!(
        client.step(Event::CallCancelled { call: CallId(1) }),
        vec![]
    );
    assert!(!client.is_idle());
}

/// §9.2: answers for ids the client never used, or that do not fit the
/// call's state, are ignored; `unsupported` ends the call.
#[test]
fn odd_answers() {
    let mut client = connected();
    start(&mut client, 1);
    let stray = Response::Ack {
        id: RequestId::new("01").unwrap(),
    };
    assert_eq!(receive(&mut client, stray), vec![]);
    assert_eq!(receive(&mut client, Response::Ack { id: id(1) }), vec![]);
    assert_eq!(
        receive(&mut client, Response::Unsupported { id: id(1) }),
        vec![Effect::Resolve {
            call: CallId(1),
            resolution: Resolution::Unsupported
        }]
    );
}

fn start_with(client: &mut Client, call: u64, options: CallOptions) -> Vec<Effect> {
    client.step(Event::CallStarted {
        call: CallId(call),
        key: key(),
        options,
    })
}

const DETACHED: CallOptions = CallOptions {
    detached: true,
    reuse: None,
    parent: None,
};

/// A connected client whose detached call 1 leads flight 1.
fn detached_leader() -> Client {
    let mut client = connected();
    start_with(&mut client, 1, DETACHED);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client
}

fn cancelled(client: &mut Client, call: u64) -> Vec<Effect> {
    client.step(Event::CallCancelled { call: CallId(call) })
}

/// §15.3: the caller of a detached leader leaves: `detach`, not `cancel`,
/// and the work runs on; when it finishes, its land goes out as any.
#[test]
fn detached_leader_detaches_and_still_lands() {
    let mut client = detached_leader();
    assert_eq!(
        cancelled(&mut client, 1),
        vec![Effect::Send(Request::Detach { id: id(1) })]
    );
    assert!(client.is_detached(CallId(1)));
    assert_eq!(
        cancelled(&mut client, 1),
        vec![],
        "a second cancel is nothing"
    );
    let effects = client.step(Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    });
    assert_eq!(
        effects[1],
        Effect::Send(Request::Land {
            id: id(1),
            outcome: value()
        })
    );
}

/// §15.3: `stop` ends a detached call and its work; `unsupported` falls
/// back to the cancel of before the extension; a refused flight stops too.
#[test]
fn detached_leader_stops() {
    let stop = |why| {
        vec![Effect::StopWork {
            call: CallId(1),
            why,
        }]
    };
    let mut client = detached_leader();
    cancelled(&mut client, 1);
    assert_eq!(
        receive(&mut client, Response::Stop { id: id(1) }),
        stop(StopReason::NobodyWaits)
    );
    assert!(client.is_idle());

    let mut client = detached_leader();
    cancelled(&mut client, 1);
    let mut expected = vec![Effect::Send(Request::Cancel { id: id(1) })];
    expected.extend(stop(StopReason::DetachUnsupported));
    assert_eq!(
        receive(&mut client, Response::Unsupported { id: id(1) }),
        expected
    );

    let mut client = detached_leader();
    cancelled(&mut client, 1);
    assert_eq!(
        receive(&mut client, Response::Rejected { id: id(1) }),
        stop(StopReason::FlightLost)
    );
}

/// §15.3: a call that is not detached, or that does not lead, cancels as
/// before.
#[test]
fn only_a_detached_leader_detaches() {
    let mut client = connected();
    start_with(&mut client, 1, DETACHED);
    assert_eq!(
        cancelled(&mut client, 1),
        vec![Effect::Send(Request::Cancel { id: id(1) })]
    );
    start(&mut client, 2);
    receive(
        &mut client,
        Response::Lead {
            id: id(2),
            token: token(1),
        },
    );
    assert_eq!(
        cancelled(&mut client, 2),
        vec![Effect::Send(Request::Cancel { id: id(2) })]
    );
}

/// §15.3: after a reconnect a detached leader reasserts its flight, then
/// detaches it again.
#[test]
fn detached_leader_replays_reassert_then_detach() {
    let mut client = detached_leader();
    cancelled(&mut client, 1);
    client.step(Event::ConnectionLost);
    assert_eq!(
        client.step(Event::ConnectionReady),
        vec![
            Effect::Send(Request::Reassert {
                id: id(1),
                key: key(),
                token: token(1),
                outcome: None,
                parent: None,
            }),
            Effect::Send(Request::Detach { id: id(1) }),
        ]
    );
}

/// §16.3: a call with a window sends it on its plain runs (never on a
/// rejoin), and resolves with a value reused; a call without one never
/// takes a kept value.
#[test]
fn reuse_window_on_the_wire_and_reused_values() {
    let reuse = ReuseWindow::from_millis(1500);
    let options = CallOptions {
        detached: false,
        reuse,
        parent: None,
    };
    let mut client = connected();
    assert_eq!(
        start_with(&mut client, 1, options),
        vec![Effect::Send(Request::Run {
            id: id(1),
            key: key(),
            flight: None,
            reuse,
            parent: None,
        })]
    );
    assert_eq!(
        receive(
            &mut client,
            Response::Reused {
                id: id(1),
                flight: token(3),
                outcome: Box::new(value()),
            }
        ),
        vec![Effect::Resolve {
            call: CallId(1),
            resolution: Resolution::Reused {
                flight: token(3),
                outcome: value()
            }
        }]
    );
    start(&mut client, 2);
    assert_eq!(
        receive(
            &mut client,
            Response::Reused {
                id: id(2),
                flight: token(3),
                outcome: Box::new(value()),
            }
        ),
        vec![Effect::Resolve {
            call: CallId(2),
            resolution: Resolution::Interrupted
        }]
    );
    start_with(&mut client, 3, options);
    receive(
        &mut client,
        Response::Joined {
            id: id(3),
            flight: token(4),
        },
    );
    client.step(Event::ConnectionLost);
    assert_eq!(
        client.step(Event::ConnectionReady),
        vec![run(3, Some(token(4)))]
    );
}

/// §8.9: the calls the coordinator may hold a party for, which the shell
/// bounds per connection: those in progress, and those landing until their
/// land is settled.
#[test]
fn calls_in_progress_count_landing_calls_until_settled() {
    let mut client = connected();
    assert_eq!(client.calls_in_progress(), 0);
    start(&mut client, 1);
    start(&mut client, 2);
    assert_eq!(client.calls_in_progress(), 2);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client.step(Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    });
    assert_eq!(client.calls_in_progress(), 2, "call 1 lands");
    receive(&mut client, Response::Ack { id: id(1) });
    assert_eq!(client.calls_in_progress(), 1);
    client.step(Event::CallCancelled { call: CallId(2) });
    assert_eq!(client.calls_in_progress(), 0);
}

/// A connected client whose call 1, with `options`, led flight 1 and lost it:
/// its reassert after a reconnect was rejected (§9.3).
fn orphaned(options: CallOptions) -> Client {
    let mut client = connected();
    start_with(&mut client, 1, options);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    client.step(Event::ConnectionLost);
    client.step(Event::ConnectionReady);
    receive(&mut client, Response::Rejected { id: id(1) });
    client
}

/// §9.5, §15.3: the caller of a call that lost its flight leaves. The
/// coordinator no longer knows the call, so nothing is sent. A detached
/// call's work, which would outlive its caller, is stopped; any other
/// call's work ends with its caller, so nothing is stopped.
#[test]
fn caller_of_an_orphaned_call_leaves() {
    let mut client = orphaned(DETACHED);
    assert_eq!(
        cancelled(&mut client, 1),
        vec![Effect::StopWork {
            call: CallId(1),
            why: StopReason::FlightLost,
        }]
    );
    assert!(client.is_idle());

    let mut client = orphaned(CallOptions::default());
    assert_eq!(cancelled(&mut client, 1), vec![]);
    assert!(client.is_idle());
}

/// §17.3: a nested call sends its parent with its run, with its rejoin and
/// its running reassert after a reconnect, and `cycle` resolves it.
#[test]
fn a_nested_call_carries_its_parent_and_resolves_a_cycle() {
    let parent = token(9);
    let mut client = connected();
    let nested = |call: u64| Event::CallStarted {
        call: CallId(call),
        key: key(),
        options: CallOptions {
            parent: Some(parent),
            ..CallOptions::default()
        },
    };
    let with_parent = |call: u64, flight: Option<FencingToken>| {
        Effect::Send(Request::Run {
            id: id(call),
            key: key(),
            flight,
            reuse: None,
            parent: Some(parent),
        })
    };
    assert_eq!(client.step(nested(1)), vec![with_parent(1, None)]);
    assert_eq!(client.step(nested(2)), vec![with_parent(2, None)]);
    receive(
        &mut client,
        Response::Lead {
            id: id(1),
            token: token(1),
        },
    );
    receive(
        &mut client,
        Response::Joined {
            id: id(2),
            flight: token(3),
        },
    );
    client.step(Event::ConnectionLost);
    assert_eq!(
        client.step(Event::ConnectionReady),
        vec![
            Effect::Send(Request::Reassert {
                id: id(1),
                key: key(),
                token: token(1),
                outcome: None,
                parent: Some(parent),
            }),
            with_parent(2, Some(token(3))),
        ]
    );
    let keys = vec![Key::new("p").unwrap(), key()];
    assert_eq!(
        receive(
            &mut client,
            Response::Cycle {
                id: id(2),
                keys: keys.clone(),
            }
        ),
        vec![Effect::Resolve {
            call: CallId(2),
            resolution: Resolution::Cycle { keys },
        }]
    );
}

/// §18.3: a call that asked, or rejoins, ends `Unavailable` with the host
/// coordinator's reason; a leader is not told it.
#[test]
fn a_run_the_host_could_not_send_on_ends_unavailable() {
    let mut client = connected();
    start(&mut client, 1);
    start(&mut client, 2);
    receive(
        &mut client,
        Response::Lead {
            id: id(2),
            token: token(1),
        },
    );
    let reason = Reason::new("the cluster refused this host").unwrap();
    assert_eq!(
        receive(
            &mut client,
            Response::Unavailable {
                id: id(1),
                reason: reason.clone(),
            }
        ),
        vec![Effect::Resolve {
            call: CallId(1),
            resolution: Resolution::Unavailable {
                reason: reason.clone()
            },
        }]
    );
    assert_eq!(
        receive(&mut client, Response::Unavailable { id: id(2), reason }),
        vec![],
        "the leader's work runs on"
    );
    assert_eq!(client.calls_in_progress(), 1);
}

/// §10.1: only a call that asked, joined, or leads detached waits for an
/// answer someone must be told of at once; a leader whose work runs, a land
/// that waits for its `ack` and a leader that lost its flight do not.
#[test]
fn only_asked_joined_and_detached_calls_await_answers() {
    let mut client = connected();
    assert!(!client.awaits_answers(), "no call");
    start(&mut client, 1);
    assert!(client.awaits_answers(), "asked");
    let lead = Response::Lead {
        id: id(1),
        token: token(1),
    };
    receive(&mut client, lead);
    assert!(!client.awaits_answers(), "leading: the work runs");
    client.step(Event::WorkFinished {
        call: CallId(1),
        outcome: value(),
    });
    assert!(
        !client.awaits_answers(),
        "landing: its ack changes no result"
    );
    start(&mut client, 2);
    let joined = Response::Joined {
        id: id(2),
        flight: token(1),
    };
    receive(&mut client, joined);
    assert!(client.awaits_answers(), "joined: waits for landed");
    receive(&mut client, Response::Ack { id: id(1) });
    assert!(client.awaits_answers(), "call 2 still waits");
    client.step(Event::CallCancelled { call: CallId(2) });
    assert!(!client.awaits_answers());

    let mut client = detached_leader();
    assert!(!client.awaits_answers(), "a detached call's caller is here");
    cancelled(&mut client, 1);
    assert!(client.awaits_answers(), "detached: waits for stop");

    assert!(!orphaned(CallOptions::default()).awaits_answers());
}
