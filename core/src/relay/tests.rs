//! The relay's rules, one test per rule of SPEC.md §18.3, each comparing
//! the exact effects; and property tests over long random event sequences
//! (`properties.rs`).

use std::sync::Arc;

use super::*;
use crate::coordinator::{self, MAX_OPEN_REQUESTS_PER_CONNECTION};
use crate::protocol::{
    CoordinatorIdentity, Epoch, FencingToken, FlightStatus, GroupStatus, HostId, HostStatus,
    HostsStatus, Incoming, Outcome, Reason, RelayStatus, Request, Response, ReuseWindow,
    limits::MAX_OUTCOME_BYTES,
};
pub(crate) use crate::testing::{c, id, key, token, value};

mod properties;

fn request(connection: u64, request: Request) -> Event {
    Event::RequestReceived {
        connection: c(connection),
        request: Incoming::Request(request),
    }
}

fn run_request(i: &str, k: &str, flight: Option<FencingToken>) -> Request {
    Request::Run {
        id: id(i),
        key: key(k),
        flight,
        reuse: None,
        parent: None,
    }
}

fn run(connection: u64, i: &str, k: &str) -> Event {
    request(connection, run_request(i, k, None))
}

fn rejoin(connection: u64, i: &str, k: &str, t: FencingToken) -> Event {
    request(connection, run_request(i, k, Some(t)))
}

fn reassert_request(i: &str, k: &str, t: FencingToken, outcome: Option<Outcome>) -> Request {
    Request::Reassert {
        id: id(i),
        key: key(k),
        token: t,
        outcome,
        parent: None,
    }
}

fn land(connection: u64, i: &str, outcome: Outcome) -> Event {
    request(connection, Request::Land { id: id(i), outcome })
}

fn cancel(connection: u64, i: &str) -> Event {
    request(connection, Request::Cancel { id: id(i) })
}

fn detach(connection: u64, i: &str) -> Event {
    request(connection, Request::Detach { id: id(i) })
}

fn up(response: Response) -> Event {
    Event::UpstreamResponse(response)
}

fn send(connection: u64, response: Response) -> Effect {
    Effect::Send {
        connection: c(connection),
        response,
    }
}

fn upstream(request: Request) -> Effect {
    Effect::SendUpstream(request)
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

fn landed(connection: u64, i: &str, outcome: &Outcome) -> Effect {
    send(
        connection,
        Response::Landed {
            id: id(i),
            outcome: Arc::new(outcome.clone()),
        },
    )
}

fn interrupted(connection: u64, i: &str) -> Effect {
    send(connection, Response::Interrupted { id: id(i) })
}

/// A relay with an upstream connection ready and local connections 1 to
/// `connections` open.
fn connected(connections: u64) -> Relay {
    let mut relay = Relay::new();
    assert_eq!(relay.step(Event::UpstreamReady), vec![]);
    for n in 1..=connections {
        assert_eq!(
            relay.step(Event::ConnectionOpened { connection: c(n) }),
            vec![]
        );
    }
    relay
}

/// A relay whose plain group of `k` (upstream id "1") is led by
/// connection 1's run "1" with token `t`, and joined by connection 2's "1"
/// and connection 3's "1".
fn led_group(k: &str, t: FencingToken) -> Relay {
    let mut relay = connected(3);
    assert_eq!(
        relay.step(run(1, "1", k)),
        vec![upstream(run_request("1", k, None))]
    );
    assert_eq!(relay.step(run(3, "1", k)), vec![]);
    assert_eq!(relay.step(run(2, "1", k)), vec![]);
    assert_eq!(
        relay.step(up(Response::Lead {
            id: id("1"),
            token: t
        })),
        vec![lead(1, "1", t), joined(3, "1", t), joined(2, "1", t)]
    );
    relay
}

/// §18.3 "Collapsing": the plain runs of a key are one upstream `run`; the
/// first to arrive leads when upstream answers `lead`, the others join, in
/// arrival order, and a later plain run joins at once.
#[test]
fn plain_runs_of_a_key_share_one_upstream_run_and_its_first_party_leads_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    assert_eq!(relay.step(run(2, "2", "k")), vec![joined(2, "2", t)]);
    assert_eq!(relay.upstream_parties(), 1);
    // Another key is another group, with the relay's next upstream id.
    assert_eq!(
        relay.step(run(1, "2", "other")),
        vec![upstream(run_request("5", "other", None))]
    );
    assert_eq!(relay.upstream_parties(), 2);
}

/// §18.3 "Collapsing": a run with `reuse` or `parent`, and a `reassert`,
/// are each a group of their own, relayed as they are with the relay's id.
#[test]
fn runs_with_extensions_and_reasserts_go_upstream_as_they_are_18_3() {
    let mut relay = connected(2);
    let window = ReuseWindow::from_millis(1000);
    let with_reuse = |i: &str| Request::Run {
        id: id(i),
        key: key("k"),
        flight: None,
        reuse: window,
        parent: None,
    };
    let nested = |i: &str| Request::Run {
        id: id(i),
        key: key("k"),
        flight: None,
        reuse: None,
        parent: Some(token(2, 9)),
    };
    assert_eq!(
        relay.step(request(1, with_reuse("1"))),
        vec![upstream(with_reuse("1"))]
    );
    assert_eq!(
        relay.step(request(2, with_reuse("1"))),
        vec![upstream(with_reuse("2"))]
    );
    assert_eq!(
        relay.step(request(1, nested("2"))),
        vec![upstream(nested("3"))]
    );
    // A rejoin with a parent too (§17.2: its parent is checked upstream).
    let nested_rejoin = |i: &str| Request::Run {
        id: id(i),
        key: key("k"),
        flight: Some(token(1, 7)),
        reuse: None,
        parent: Some(token(2, 9)),
    };
    assert_eq!(
        relay.step(request(2, nested_rejoin("2"))),
        vec![upstream(nested_rejoin("4"))]
    );
    let landed_reassert = reassert_request("3", "k", token(1, 4), Some(value("v")));
    assert_eq!(
        relay.step(request(2, landed_reassert)),
        vec![upstream(reassert_request(
            "5",
            "k",
            token(1, 4),
            Some(value("v"))
        ))]
    );
    assert_eq!(relay.upstream_parties(), 5);
    // A plain run of the key is not collapsed into any of them.
    assert_eq!(
        relay.step(run(1, "9", "k")),
        vec![upstream(run_request("6", "k", None))]
    );
}

/// §18.3 "Collapsing": a rejoin of T joins a group answered with T at once,
/// waits with a group that rejoins T, and otherwise rejoins upstream.
#[test]
fn a_rejoin_joins_a_group_answered_with_its_token_or_one_that_rejoins_it_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    assert_eq!(relay.step(rejoin(2, "7", "k", t)), vec![joined(2, "7", t)]);
    let older = token(1, 5);
    assert_eq!(
        relay.step(rejoin(1, "8", "j", older)),
        vec![upstream(run_request("5", "j", Some(older)))]
    );
    assert_eq!(relay.step(rejoin(2, "8", "j", older)), vec![]);
    // A plain run of `j` is not a rejoin: it has its own group.
    assert_eq!(
        relay.step(run(3, "8", "j")),
        vec![upstream(run_request("7", "j", None))]
    );
    assert_eq!(
        relay.step(up(Response::Joined {
            id: id("5"),
            flight: older
        })),
        vec![joined(1, "8", older), joined(2, "8", older)]
    );
    // Answered with `older`, it takes the later rejoins of it at once.
    assert_eq!(
        relay.step(rejoin(3, "9", "j", older)),
        vec![joined(3, "9", older)]
    );
}

/// §18.3 "Answers": an upstream `joined` answers every party of the group
/// `joined`, and the later plain runs of the key at once.
#[test]
fn an_upstream_joined_answers_every_party_and_later_ones_at_once_18_3() {
    let t = token(2, 3);
    let mut relay = connected(2);
    relay.step(run(1, "1", "k"));
    relay.step(run(2, "1", "k"));
    assert_eq!(
        relay.step(up(Response::Joined {
            id: id("1"),
            flight: t
        })),
        vec![joined(1, "1", t), joined(2, "1", t)]
    );
    assert_eq!(relay.step(run(2, "2", "k")), vec![joined(2, "2", t)]);
    let outcome = value("v");
    assert_eq!(
        relay.step(up(Response::Landed {
            id: id("1"),
            outcome: Arc::new(outcome.clone())
        })),
        vec![
            landed(1, "1", &outcome),
            landed(2, "1", &outcome),
            landed(2, "2", &outcome)
        ]
    );
    assert_eq!(relay.groups(), 0);
    assert_eq!(relay.upstream_parties(), 0);
}

/// §18.3 "Answers": `landed`, `interrupted`, `reused`, `cycle` and
/// `unsupported` answer every waiting party with it, in the order of §8.5,
/// and end the group: the key's next plain run opens a new one.
#[test]
fn a_final_upstream_answer_reaches_every_waiting_party_and_ends_the_group_18_3() {
    let finals = [
        Response::Landed {
            id: id("1"),
            outcome: Arc::new(value("v")),
        },
        Response::Interrupted { id: id("1") },
        Response::Reused {
            id: id("1"),
            flight: token(2, 2),
            outcome: Box::new(value("v")),
        },
        Response::Cycle {
            id: id("1"),
            keys: vec![key("k")],
        },
        Response::Unsupported { id: id("1") },
    ];
    for answer in finals {
        let mut relay = connected(2);
        relay.step(run(2, "b", "k"));
        relay.step(run(1, "a", "k"));
        relay.step(run(2, "a", "k"));
        let as_for = |connection: u64, i: &str| {
            let mut response = answer.clone();
            match &mut response {
                Response::Landed { id: old, .. }
                | Response::Interrupted { id: old }
                | Response::Reused { id: old, .. }
                | Response::Cycle { id: old, .. }
                | Response::Unsupported { id: old } => *old = id(i),
                _ => unreachable!(),
            }
            send(connection, response)
        };
        assert_eq!(
            relay.step(up(answer.clone())),
            vec![as_for(1, "a"), as_for(2, "a"), as_for(2, "b")],
            "{answer:?}"
        );
        assert_eq!(relay.groups(), 0);
        assert_eq!(
            relay.step(run(1, "c", "k")),
            vec![upstream(run_request("4", "k", None))]
        );
    }
}

/// §18.3 "Land": the leader's land goes upstream and nobody is answered
/// until upstream acknowledges it; then the joiners receive the outcome in
/// the order of §8.5, and the leader `ack` last.
#[test]
fn a_leader_is_acknowledged_only_after_the_cluster_acknowledged_its_land_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    let outcome = value("v");
    assert_eq!(
        relay.step(land(1, "1", outcome.clone())),
        vec![upstream(Request::Land {
            id: id("1"),
            outcome: outcome.clone()
        })]
    );
    // The group takes no new run once its leader landed: the run's call
    // came after the outcome was made.
    assert_eq!(
        relay.step(run(2, "2", "k")),
        vec![upstream(run_request("4", "k", None))]
    );
    // Nor a rejoin of its flight: it rejoins upstream, as a group of its
    // own.
    assert_eq!(
        relay.step(rejoin(3, "2", "k", t)),
        vec![upstream(run_request("5", "k", Some(t)))]
    );
    assert_eq!(
        relay.step(up(Response::Ack { id: id("1") })),
        vec![
            landed(2, "1", &outcome),
            landed(3, "1", &outcome),
            send(1, Response::Ack { id: id("1") })
        ]
    );
    assert_eq!(relay.upstream_parties(), 2);
    // The ended group's parties are free: their ids may be used again.
    assert_eq!(
        relay.step(run(3, "1", "j")),
        vec![upstream(run_request("6", "j", None))]
    );
}

/// §18.3 "Land": a land that upstream refuses interrupts the joiners and is
/// answered `rejected`: its outcome was not handed over.
#[test]
fn a_land_refused_upstream_interrupts_the_joiners_and_rejects_the_leader_18_3() {
    let mut relay = led_group("k", token(2, 1));
    relay.step(land(1, "1", value("v")));
    assert_eq!(
        relay.step(up(Response::Rejected { id: id("1") })),
        vec![
            interrupted(2, "1"),
            interrupted(3, "1"),
            send(1, Response::Rejected { id: id("1") })
        ]
    );
    assert_eq!(relay.groups(), 0);
}

/// §18.3 "Land", §3.4: an outcome over `MAX_OUTCOME_BYTES`, which upstream
/// refuses, hands the joiners the `ValueTooLarge` failure, as the cluster's
/// coordinator hands its own.
#[test]
fn a_land_too_large_hands_the_joiners_value_too_large_18_3() {
    let mut relay = led_group("k", token(2, 1));
    let too_large = Outcome::Value("x".repeat(MAX_OUTCOME_BYTES));
    let Err(failure) = too_large.clone().shareable() else {
        panic!("{MAX_OUTCOME_BYTES} bytes of text are over the limit as JSON");
    };
    let failure = Outcome::Failure(failure);
    relay.step(land(1, "1", too_large));
    assert_eq!(
        relay.step(up(Response::Rejected { id: id("1") })),
        vec![
            landed(2, "1", &failure),
            landed(3, "1", &failure),
            send(1, Response::Rejected { id: id("1") })
        ]
    );
}

/// §18.3 "Land": a land that is not from a group's leader (a joiner, an id
/// that is not open, a leader whose land is already upstream) is answered
/// `rejected` by the relay and changes nothing.
#[test]
fn a_land_not_from_a_leader_is_rejected_by_the_relay_18_3() {
    let mut relay = led_group("k", token(2, 1));
    let rejected = |connection, i| send(connection, Response::Rejected { id: id(i) });
    assert_eq!(relay.step(land(2, "1", value("v"))), vec![rejected(2, "1")]);
    assert_eq!(relay.step(land(2, "9", value("v"))), vec![rejected(2, "9")]);
    relay.step(land(1, "1", value("v")));
    assert_eq!(relay.step(land(1, "1", value("w"))), vec![rejected(1, "1")]);
    assert_eq!(relay.upstream_parties(), 1);
}

/// §18.3 "Withdrawals", §8.6: a leader's cancel relays `cancel` and
/// interrupts the group's joiners.
#[test]
fn a_leader_s_cancel_relays_cancel_and_interrupts_its_joiners_18_3() {
    let mut relay = led_group("k", token(2, 1));
    assert_eq!(
        relay.step(cancel(1, "1")),
        vec![
            upstream(Request::Cancel { id: id("1") }),
            interrupted(2, "1"),
            interrupted(3, "1")
        ]
    );
    assert_eq!(relay.groups(), 0);
    assert_eq!(relay.upstream_parties(), 0);
    // A late answer for the cancelled party is ignored.
    assert_eq!(relay.step(up(Response::Ack { id: id("1") })), vec![]);
}

/// §18.3 "Withdrawals", §8.7: a leader's closed connection does the same;
/// nothing is sent on its connection, to its joiners there neither.
#[test]
fn a_leader_s_closed_connection_relays_cancel_and_sends_nothing_on_it_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    assert_eq!(relay.step(run(1, "2", "k")), vec![joined(1, "2", t)]);
    assert_eq!(
        relay.step(Event::ConnectionClosed { connection: c(1) }),
        vec![
            upstream(Request::Cancel { id: id("1") }),
            interrupted(2, "1"),
            interrupted(3, "1")
        ]
    );
}

/// §18.3 "Withdrawals": a waiting or joining party leaves its group
/// silently; the last one to leave relays `cancel`.
#[test]
fn the_last_party_to_leave_a_group_relays_cancel_18_3() {
    let mut relay = connected(2);
    relay.step(run(1, "1", "k"));
    relay.step(run(2, "1", "k"));
    assert_eq!(relay.step(cancel(1, "1")), vec![]);
    assert_eq!(
        relay.step(Event::ConnectionClosed { connection: c(2) }),
        vec![upstream(Request::Cancel { id: id("1") })]
    );
    assert_eq!(relay.groups(), 0);
    // Upstream's answer, crossing the cancel, is ignored.
    assert_eq!(
        relay.step(up(Response::Lead {
            id: id("1"),
            token: token(2, 1)
        })),
        vec![]
    );
    // A joiner leaves a led group silently too.
    let mut relay = led_group("k", token(2, 1));
    assert_eq!(relay.step(cancel(2, "1")), vec![]);
    assert_eq!(relay.step(cancel(3, "1")), vec![]);
    assert_eq!(relay.upstream_parties(), 1);
}

/// §18.3 "Withdrawals", §15: a leader's `detach` closes its group to new
/// runs, and is relayed once no other party of the group is left; upstream's
/// `stop` goes to the leader.
#[test]
fn a_detach_is_relayed_once_the_group_has_no_other_party_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    assert_eq!(relay.step(detach(1, "1")), vec![]);
    // A new run of the key is another upstream party, which keeps the
    // cluster's flight wanted.
    assert_eq!(
        relay.step(run(1, "2", "k")),
        vec![upstream(run_request("4", "k", None))]
    );
    assert_eq!(relay.step(cancel(2, "1")), vec![]);
    assert_eq!(
        relay.step(cancel(3, "1")),
        vec![upstream(Request::Detach { id: id("1") })]
    );
    assert_eq!(
        relay.step(up(Response::Stop { id: id("1") })),
        vec![send(1, Response::Stop { id: id("1") })]
    );
    assert_eq!(relay.upstream_parties(), 1);
    // A leader alone is relayed at once.
    let mut relay = connected(1);
    relay.step(run(1, "1", "k"));
    relay.step(up(Response::Lead {
        id: id("1"),
        token: t,
    }));
    assert_eq!(
        relay.step(detach(1, "1")),
        vec![upstream(Request::Detach { id: id("1") })]
    );
}

/// §18.3, §15.3: a cluster older than `detach` answers it `unsupported`;
/// that answer is the leader's alone, and its group goes on.
#[test]
fn unsupported_in_answer_to_a_relayed_detach_goes_to_the_leader_alone_18_3() {
    let t = token(2, 1);
    let mut relay = connected(1);
    relay.step(run(1, "1", "k"));
    relay.step(up(Response::Lead {
        id: id("1"),
        token: t,
    }));
    relay.step(detach(1, "1"));
    assert_eq!(
        relay.step(up(Response::Unsupported { id: id("1") })),
        vec![send(1, Response::Unsupported { id: id("1") })]
    );
    assert_eq!(
        relay.step(cancel(1, "1")),
        vec![upstream(Request::Cancel { id: id("1") })]
    );
}

/// §18.3 "`status`": relayed with the relay's id, and its answer returned to
/// the asker with its own.
#[test]
fn status_is_relayed_and_answered_to_its_asker_with_its_own_id_18_3() {
    let mut relay = connected(1);
    assert_eq!(
        relay.step(request(1, Request::Status { id: id("s") })),
        vec![upstream(Request::Status { id: id("1") })]
    );
    let answer = |i: &str, relay: Option<RelayStatus>| Response::Status {
        id: id(i),
        flights: vec![],
        waiting: None,
        omitted: None,
        stats: None,
        hosts: None,
        relay: relay.map(Box::new),
    };
    let own = RelayStatus {
        connections: 1,
        ..RelayStatus::default()
    };
    assert_eq!(
        relay.step(up(answer("1", None))),
        vec![send(1, answer("s", Some(own)))],
        "answered once"
    );
    assert_eq!(relay.step(up(answer("1", None))), vec![]);
}

/// §3.5, §18.3 "`status`": the cluster's answer comes back as the cluster
/// sent it, with the relay's own view added: its host id, its local
/// connections, its groups in key order (a token once answered, and how
/// many local callers each stands for), and the cluster's coordinator that
/// its upstream connection reached, forgotten with that connection.
#[test]
fn status_through_the_relay_adds_the_host_its_groups_and_the_cluster_coordinator_3_5() {
    let t = token(2, 1);
    let build_7 = HostId::new("build-7-3f2a9c0d11b4e587").unwrap();
    let cluster = CoordinatorIdentity {
        epoch: Epoch::new(2).unwrap(),
        pid: 4242,
        host: Some("ci-1".into()),
    };
    let mut relay = Relay::new().with_host(build_7.clone());
    relay.step(Event::UpstreamGreeted {
        coordinator: cluster.clone(),
    });
    relay.step(Event::UpstreamReady);
    for n in 1..=3 {
        relay.step(Event::ConnectionOpened { connection: c(n) });
    }
    relay.step(run(1, "1", "k"));
    relay.step(run(2, "1", "k"));
    relay.step(up(Response::Lead {
        id: id("1"),
        token: t,
    }));
    relay.step(run(3, "1", "a"));
    assert_eq!(
        relay.step(request(1, Request::Status { id: id("s") })),
        vec![upstream(Request::Status { id: id("4") })]
    );
    let flights = vec![FlightStatus {
        key: key("k"),
        token: t,
        joiners: 1,
        detached: false,
    }];
    let hosts = HostsStatus {
        direct: 1,
        relays: vec![HostStatus {
            host: build_7.clone(),
            connections: 1,
            parties: 2,
            window: false,
            orphans: 0,
        }],
        omitted: 0,
    };
    let answer = |i: &str, relay: Option<RelayStatus>| Response::Status {
        id: id(i),
        flights: flights.clone(),
        waiting: None,
        omitted: None,
        stats: Some(Box::default()),
        hosts: Some(Box::new(hosts.clone())),
        relay: relay.map(Box::new),
    };
    let own = RelayStatus {
        host: Some(build_7),
        connections: 3,
        groups: vec![
            GroupStatus {
                key: key("a"),
                token: None,
                parties: 1,
            },
            GroupStatus {
                key: key("k"),
                token: Some(t),
                parties: 2,
            },
        ],
        omitted: 0,
        cluster: Some(cluster),
    };
    assert_eq!(
        relay.step(up(answer("4", None))),
        vec![send(1, answer("s", Some(own)))]
    );

    // A new upstream connection whose hello the shell did not report: the
    // relay names no cluster's coordinator rather than the last one.
    relay.step(Event::UpstreamLost);
    relay.step(Event::UpstreamReady);
    relay.step(Event::ConnectionOpened { connection: c(4) });
    let asked = relay.step(request(4, Request::Status { id: id("s") }));
    let [Effect::SendUpstream(Request::Status { id: upstream_id })] = asked.as_slice() else {
        panic!("the status is relayed: {asked:?}");
    };
    let effects = relay.step(up(answer(upstream_id.as_str(), None)));
    let [Effect::Send { response, .. }] = effects.as_slice() else {
        panic!("one answer: {effects:?}");
    };
    let Response::Status {
        relay: Some(own), ..
    } = response
    else {
        panic!("a relay's answer: {response:?}");
    };
    assert_eq!((own.cluster.as_ref(), own.connections), (None, 1));
}

/// §3.5, §18.3 "`status`": an answer that the relay's view would take past
/// `MAX_FRAME_BYTES` is cut to fit one line: the host's groups first, then
/// the cluster's flights, each counted in its `omitted`.
#[test]
fn a_status_too_long_for_one_line_through_the_relay_is_cut_groups_first_3_5() {
    use crate::protocol::encoded_len;
    use crate::protocol::limits::{MAX_FRAME_BYTES, MAX_KEY_BYTES};

    let long_key = |prefix: usize| key(&format!("{prefix:08}{}", "x".repeat(MAX_KEY_BYTES - 8)));
    let mut relay = connected(1);
    let groups = 40;
    for n in 0..groups {
        relay.step(run(1, &n.to_string(), long_key(n).as_str()));
    }
    relay.step(request(1, Request::Status { id: id("s") }));
    // A cluster's answer whose flights come within 100 bytes of the frame,
    // as a coordinator of a later version with a larger envelope may send:
    // the relay's view does not fit beside it even without the groups.
    let mut flights = Vec::new();
    let mut length = 0;
    loop {
        let flight = FlightStatus {
            key: key(&format!("{:0100}", flights.len())),
            token: token(2, flights.len() as u32 + 1),
            joiners: 0,
            detached: false,
        };
        length += encoded_len(&flight) + 1;
        if length > MAX_FRAME_BYTES - 100 {
            break;
        }
        flights.push(flight);
    }
    let fit = flights.len();
    let effects = relay.step(up(Response::Status {
        id: id(&(groups + 1).to_string()),
        flights: flights.clone(),
        waiting: None,
        omitted: Some(3),
        stats: Some(Box::default()),
        hosts: None,
        relay: None,
    }));
    let [Effect::Send { response, .. }] = effects.as_slice() else {
        panic!("one answer: {effects:?}");
    };
    assert!(encoded_len(response) <= MAX_FRAME_BYTES, "fits in one line");
    let Response::Status {
        flights: listed,
        omitted,
        relay: Some(own),
        ..
    } = response
    else {
        panic!("a relay's answer: {response:?}");
    };
    assert!(own.groups.is_empty(), "the groups go first");
    assert_eq!(own.omitted, groups as u64);
    assert_eq!(
        listed.len() as u64 + omitted.unwrap() - 3,
        fit as u64,
        "every flight is listed or counted"
    );
    assert!(listed.len() < fit, "then the flights");
}

/// §3.5: a status through the relay cut past its groups and flights cuts
/// the hosts, counting each, and no more than it must: one host more would
/// not fit. Whatever the bytes the cuts stop at, the counts they add fit.
#[test]
fn a_status_through_the_relay_cut_past_its_flights_cuts_the_hosts_3_5() {
    use crate::protocol::encoded_len;
    use crate::protocol::limits::MAX_FRAME_BYTES;

    let host = |n: usize, pad: usize| HostStatus {
        host: HostId::new(format!("host-{n:08}{}", "h".repeat(pad))).unwrap(),
        connections: 1,
        parties: 0,
        window: false,
        orphans: 0,
    };
    // The first host's name longer by 0 to 63 bytes: the cuts stop at
    // each alignment of the entries against the frame.
    for pad in 0..64 {
        let mut relay = connected(1);
        let groups = 40;
        for n in 0..groups {
            relay.step(run(1, &n.to_string(), &format!("k{n}")));
        }
        relay.step(request(1, Request::Status { id: id("s") }));
        let flights: Vec<FlightStatus> = (1..=2)
            .map(|n| FlightStatus {
                key: key(&format!("k{n}")),
                token: token(2, n),
                joiners: 0,
                detached: false,
            })
            .collect();
        // Hosts past the frame by about 200 KB: thousands of cuts.
        let mut relays = vec![host(0, pad)];
        let mut length = 0;
        while length < MAX_FRAME_BYTES + 200_000 {
            let next = host(relays.len(), 0);
            length += encoded_len(&next) + 1;
            relays.push(next);
        }
        let sent = relays.len();
        let effects = relay.step(up(Response::Status {
            id: id(&(groups + 1).to_string()),
            flights,
            waiting: None,
            omitted: None,
            stats: Some(Box::default()),
            hosts: Some(Box::new(HostsStatus {
                direct: 0,
                relays,
                omitted: 0,
            })),
            relay: None,
        }));
        let [Effect::Send { response, .. }] = effects.as_slice() else {
            panic!("one answer: {effects:?}");
        };
        let line = encoded_len(response);
        assert!(
            line <= MAX_FRAME_BYTES,
            "fits in one line: {line} bytes, pad {pad}"
        );
        let Response::Status {
            flights,
            omitted,
            hosts: Some(hosts),
            relay: Some(own),
            ..
        } = response
        else {
            panic!("a status with hosts: {response:?}");
        };
        assert_eq!(own.omitted, groups as u64, "the groups go first");
        assert!(flights.is_empty(), "then the flights");
        assert_eq!(*omitted, Some(2));
        assert!(hosts.omitted > 0);
        assert_eq!(hosts.relays.len() as u64 + hosts.omitted, sent as u64);
        // One host more, with the room kept for the counts (four of the
        // largest `"omitted"` members), would not have fitted.
        let room = 4 * ",\"omitted\":18446744073709551615".len();
        assert!(
            line + encoded_len(&host(1, 0)) + 1 + room > MAX_FRAME_BYTES,
            "cut no more than it must: {line} bytes, pad {pad}"
        );
    }
}

/// §18.3 "`status`", §3.6: an unknown op is answered `unsupported` by the
/// relay, with or without an upstream connection.
#[test]
fn an_unknown_op_is_answered_unsupported_by_the_relay_18_3() {
    let mut relay = Relay::new();
    relay.step(Event::ConnectionOpened { connection: c(1) });
    assert_eq!(
        relay.step(Event::RequestReceived {
            connection: c(1),
            request: Incoming::Unknown {
                op: "probe".into(),
                id: id("p")
            }
        }),
        vec![send(1, Response::Unsupported { id: id("p") })]
    );
}

/// §18.3 "Upstream lost": every local connection is closed, and every group
/// forgotten; the processes replay their calls, which go out on the next
/// upstream connection.
#[test]
fn losing_upstream_closes_every_local_connection_and_forgets_every_group_18_3() {
    let mut relay = led_group("k", token(2, 1));
    relay.step(Event::ConnectionAccepted { connection: c(4) });
    let closed = |n| Effect::Close {
        connection: c(n),
        reason: CloseReason::UpstreamLost,
    };
    assert_eq!(
        relay.step(Event::UpstreamLost),
        vec![closed(1), closed(2), closed(3)]
    );
    assert_eq!((relay.groups(), relay.upstream_parties()), (0, 0));
    assert!(
        relay.in_handshake(c(4)),
        "a connection in its handshake has no call yet"
    );
    assert_eq!(relay.step(Event::UpstreamLost), vec![]);
    // The replay waits for the next upstream connection.
    relay.step(Event::ConnectionOpened { connection: c(5) });
    assert_eq!(relay.step(run(5, "1", "k")), vec![]);
    assert_eq!(
        relay.step(Event::UpstreamReady),
        vec![upstream(run_request("4", "k", None))]
    );
}

/// §18.3 "Upstream lost": requests that arrive while there is no upstream
/// connection wait for one, and go out on it in arrival order.
#[test]
fn requests_wait_for_an_upstream_connection_and_go_in_arrival_order_18_3() {
    let mut relay = Relay::new();
    relay.step(Event::ConnectionOpened { connection: c(1) });
    relay.step(Event::ConnectionOpened { connection: c(2) });
    assert_eq!(relay.step(run(1, "1", "b")), vec![]);
    assert_eq!(
        relay.step(request(2, Request::Status { id: id("s") })),
        vec![]
    );
    assert_eq!(relay.step(run(2, "1", "a")), vec![]);
    assert_eq!(relay.step(run(1, "2", "b")), vec![]);
    let t = token(1, 1);
    assert_eq!(
        relay.step(request(2, reassert_request("2", "c", t, None))),
        vec![]
    );
    assert_eq!(
        relay.step(Event::UpstreamReady),
        vec![
            upstream(run_request("1", "b", None)),
            upstream(Request::Status { id: id("2") }),
            upstream(run_request("3", "a", None)),
            upstream(reassert_request("5", "c", t, None)),
        ]
    );
    assert_eq!(relay.step(Event::UpstreamReady), vec![]);
}

/// §18.3 "Unavailable": an attempt to reach the cluster that fails ends
/// every run and rejoin that waits to be sent, `unavailable` with the
/// reason, in §8.5's order; a leader's reassert and a `status` wait on and
/// go when an upstream connection is ready; and a failure reported while
/// one is ready changes nothing.
#[test]
fn a_failed_attempt_to_reach_the_cluster_ends_the_waiting_runs_unavailable_18_3() {
    let mut relay = Relay::new();
    for n in 1..=3 {
        relay.step(Event::ConnectionOpened { connection: c(n) });
    }
    let t = token(1, 1);
    assert_eq!(relay.step(run(2, "1", "a")), vec![]);
    assert_eq!(relay.step(run(1, "1", "a")), vec![]);
    assert_eq!(relay.step(rejoin(3, "1", "b", t)), vec![]);
    assert_eq!(
        relay.step(request(3, reassert_request("2", "c", t, None))),
        vec![]
    );
    assert_eq!(
        relay.step(request(1, Request::Status { id: id("s") })),
        vec![]
    );
    let reason = Reason::new("etcd refused the password of \"ci\"").unwrap();
    let unavailable = |connection, i: &str| {
        send(
            connection,
            Response::Unavailable {
                id: id(i),
                reason: reason.clone(),
            },
        )
    };
    assert_eq!(
        relay.step(Event::UpstreamUnavailable {
            reason: reason.clone()
        }),
        vec![
            unavailable(1, "1"),
            unavailable(2, "1"),
            unavailable(3, "1")
        ]
    );
    assert_eq!(relay.groups(), 1, "the reassert waits on");
    // A run after the failure waits for the next attempt, as any.
    assert_eq!(relay.step(run(1, "2", "a")), vec![]);
    assert_eq!(
        relay.step(Event::UpstreamReady),
        vec![
            upstream(reassert_request("4", "c", t, None)),
            upstream(Request::Status { id: id("5") }),
            upstream(run_request("6", "a", None)),
        ]
    );
    assert_eq!(
        relay.step(Event::UpstreamUnavailable { reason }),
        vec![],
        "an upstream connection is ready"
    );
}

/// Any text makes a reason: empty text has a placeholder, and
/// text past the bound is cut where a character ends.
#[test]
fn any_error_message_makes_a_reason_18_3() {
    use crate::protocol::limits::MAX_REASON_BYTES;
    assert_eq!(Reason::lossy("").as_str(), "no reason was given");
    let long = "é".repeat(MAX_REASON_BYTES);
    let cut = Reason::lossy(&long);
    assert!(cut.as_str().len() <= MAX_REASON_BYTES);
    assert!(cut.as_str().len() > MAX_REASON_BYTES - 2);
    assert!(Reason::new(long).is_err());
}

/// §18.3 "Land", §9.4: a leader that lands while its reassert waits for an
/// upstream connection has its outcome carried by the reassert, as a landed
/// reassert; its `ack` comes from upstream too.
#[test]
fn a_reassert_that_waits_for_upstream_carries_its_leader_s_land_18_3() {
    let mut relay = Relay::new();
    relay.step(Event::ConnectionOpened { connection: c(1) });
    let t = token(1, 1);
    relay.step(request(1, reassert_request("1", "k", t, None)));
    assert_eq!(relay.step(land(1, "1", value("v"))), vec![]);
    assert_eq!(
        relay.step(Event::UpstreamReady),
        vec![upstream(reassert_request("1", "k", t, Some(value("v"))))]
    );
    assert_eq!(
        relay.step(up(Response::Ack { id: id("1") })),
        vec![send(1, Response::Ack { id: id("1") })]
    );
}

/// §18.3, §8.3: a running reassert leads from the start, as at the
/// cluster's coordinator, where it is not answered; upstream's `rejected`
/// (refused, or superseded) goes to it.
#[test]
fn a_reassert_refused_upstream_is_answered_rejected_18_3() {
    let mut relay = connected(1);
    let t = token(1, 1);
    relay.step(request(1, reassert_request("1", "k", t, None)));
    assert_eq!(
        relay.step(up(Response::Rejected { id: id("1") })),
        vec![send(1, Response::Rejected { id: id("1") })]
    );
    assert_eq!(relay.groups(), 0);
    // A running reassert that upstream took lands as a leader does.
    relay.step(request(1, reassert_request("2", "k", t, None)));
    assert_eq!(
        relay.step(land(1, "2", value("v"))),
        vec![upstream(Request::Land {
            id: id("2"),
            outcome: value("v")
        })]
    );
}

/// §18.3 "Bounds": never more than the bound of upstream parties open; a
/// group beyond it waits until one closes. A `status` opens no party
/// upstream, and does not wait.
#[test]
fn a_group_beyond_the_upstream_bound_waits_until_one_closes_18_3() {
    let mut relay = Relay::new().with_upstream_limit(1);
    relay.step(Event::UpstreamReady);
    relay.step(Event::ConnectionOpened { connection: c(1) });
    assert_eq!(
        relay.step(run(1, "1", "a")),
        vec![upstream(run_request("1", "a", None))]
    );
    assert_eq!(relay.step(run(1, "2", "b")), vec![]);
    assert_eq!(
        relay.step(request(1, Request::Status { id: id("s") })),
        vec![upstream(Request::Status { id: id("3") })]
    );
    assert_eq!(relay.upstream_parties(), 1);
    assert_eq!(
        relay.step(up(Response::Interrupted { id: id("1") })),
        vec![interrupted(1, "1"), upstream(run_request("2", "b", None))]
    );
    // A group that waits for the bound and is withdrawn never goes up.
    relay.step(run(1, "4", "c"));
    assert_eq!(relay.step(cancel(1, "4")), vec![]);
    assert_eq!(
        relay.step(cancel(1, "2")),
        vec![upstream(Request::Cancel { id: id("2") })]
    );
    assert_eq!(relay.upstream_parties(), 0);
}

/// §18.3, §8.8: a run or reassert whose id is already an open party of its
/// connection is ignored.
#[test]
fn a_request_with_an_open_id_is_ignored_18_3() {
    let mut relay = connected(1);
    relay.step(run(1, "1", "k"));
    assert_eq!(relay.step(run(1, "1", "j")), vec![]);
    assert_eq!(
        relay.step(request(1, reassert_request("1", "j", token(1, 1), None))),
        vec![]
    );
    assert_eq!(relay.groups(), 1);
}

/// §18.3, §8.9: a connection that would have more than
/// `MAX_OPEN_REQUESTS_PER_CONNECTION` open requests, its `status`es
/// waiting for an answer included, is closed, and its parties withdrawn.
#[test]
fn a_connection_over_its_open_request_limit_is_closed_18_3() {
    let mut relay = connected(2);
    relay.step(run(2, "1", "k"));
    relay.step(request(1, Request::Status { id: id("s") }));
    for n in 1..MAX_OPEN_REQUESTS_PER_CONNECTION {
        assert_eq!(relay.step(run(1, &n.to_string(), "k")), vec![]);
    }
    assert_eq!(
        relay.step(run(1, "last", "k")),
        vec![Effect::Close {
            connection: c(1),
            reason: CloseReason::Bound(coordinator::CloseReason::TooManyOpenRequests),
        }]
    );
    assert!(!relay.is_open(c(1)));
    // Connection 2's party still waits in the group.
    assert_eq!(relay.groups(), 1);
}

/// §18.3, §11.3: the relay holds the host's connection slots as the
/// coordinator does.
#[test]
fn local_connections_take_slots_as_at_a_coordinator_18_3() {
    let mut relay = Relay::new().with_connection_limit(1);
    assert_eq!(
        relay.step(Event::ConnectionAccepted { connection: c(1) }),
        vec![]
    );
    let refused = |n| {
        vec![Effect::Close {
            connection: c(n),
            reason: CloseReason::Bound(coordinator::CloseReason::TooManyConnections),
        }]
    };
    assert_eq!(
        relay.step(Event::ConnectionAccepted { connection: c(2) }),
        refused(2)
    );
    relay.step(Event::ConnectionRefused { connection: c(1) });
    assert_eq!(
        relay.step(Event::ConnectionOpened { connection: c(3) }),
        vec![]
    );
    assert!(relay.is_open(c(3)));
    assert_eq!(
        relay.step(Event::ConnectionAccepted { connection: c(4) }),
        refused(4)
    );
    relay.step(Event::ConnectionClosed { connection: c(3) });
    assert_eq!(
        relay.step(Event::ConnectionAccepted { connection: c(4) }),
        vec![]
    );
}

/// §11.3: an accept of a connection that already holds its slot, in its
/// handshake or open, changes nothing: it is not refused, and takes no
/// second slot.
#[test]
fn an_accept_of_a_connection_that_holds_a_slot_changes_nothing_11_3() {
    let mut relay = Relay::new().with_connection_limit(1);
    for _ in 0..2 {
        assert_eq!(
            relay.step(Event::ConnectionAccepted { connection: c(1) }),
            vec![]
        );
        assert!(relay.in_handshake(c(1)));
    }
    relay.step(Event::ConnectionOpened { connection: c(1) });
    assert_eq!(
        relay.step(Event::ConnectionAccepted { connection: c(1) }),
        vec![]
    );
    assert!(relay.is_open(c(1)) && !relay.in_handshake(c(1)));
}

/// §18.3 "Withdrawals", "Land": a leader that leaves after its land went
/// upstream leaves its joiners their ending; nothing is sent on its closed
/// connection, nor on a joiner's.
#[test]
fn a_leader_that_leaves_after_its_land_leaves_its_joiners_their_ending_18_3() {
    let mut relay = led_group("k", token(2, 1));
    let outcome = value("v");
    relay.step(land(1, "1", outcome.clone()));
    assert_eq!(
        relay.step(Event::ConnectionClosed { connection: c(1) }),
        vec![]
    );
    assert_eq!(
        relay.step(Event::ConnectionClosed { connection: c(3) }),
        vec![]
    );
    assert_eq!(
        relay.step(up(Response::Ack { id: id("1") })),
        vec![landed(2, "1", &outcome)]
    );
    assert_eq!(relay.upstream_parties(), 0);
}

/// §18.3: upstream answers that do not fit what it said before (which the
/// cluster's coordinator never sends), and answers to ids the relay never
/// used, change nothing.
#[test]
fn upstream_answers_that_fit_no_open_party_are_ignored_18_3() {
    let t = token(2, 1);
    let mut relay = led_group("k", t);
    let before = relay.clone();
    for answer in [
        Response::Lead {
            id: id("1"),
            token: token(2, 2),
        },
        Response::Joined {
            id: id("1"),
            flight: t,
        },
        Response::Interrupted { id: id("1") },
        Response::Ack { id: id("1") },
        Response::Interrupted { id: id("01") },
        Response::Interrupted { id: id("x") },
        Response::Interrupted { id: id("2") },
    ] {
        assert_eq!(relay.step(up(answer.clone())), vec![], "{answer:?}");
    }
    assert_eq!(relay, before);
    // A group not led yet takes no answer meant for a leader: its run was
    // neither a land nor a reassert (§8.5, §8.3), nor led to be stopped
    // (§15.2).
    let mut relay = connected(1);
    assert_eq!(
        relay.step(run(1, "1", "k")),
        vec![upstream(run_request("1", "k", None))]
    );
    let before = relay.clone();
    for answer in [
        Response::Rejected { id: id("1") },
        Response::Stop { id: id("1") },
    ] {
        assert_eq!(relay.step(up(answer.clone())), vec![], "{answer:?}");
    }
    assert_eq!(relay, before);
}

/// §18.3 "Withdrawals", §15.3: a leader that detaches while its reassert
/// waits for an upstream connection has its `detach` relayed right after
/// the reassert.
#[test]
fn a_detach_of_a_waiting_reassert_follows_it_upstream_18_3() {
    let mut relay = Relay::new();
    relay.step(Event::ConnectionOpened { connection: c(1) });
    let t = token(1, 1);
    relay.step(request(1, reassert_request("1", "k", t, None)));
    assert_eq!(relay.step(detach(1, "1")), vec![]);
    assert_eq!(
        relay.step(Event::UpstreamReady),
        vec![
            upstream(reassert_request("1", "k", t, None)),
            upstream(Request::Detach { id: id("1") })
        ]
    );
}

/// §18.3 "`status`", §3.5: a cluster older than `status` answers it
/// `unsupported`, which goes to the asker with its own id.
#[test]
fn unsupported_in_answer_to_a_relayed_status_goes_to_its_asker_18_3() {
    let mut relay = connected(1);
    relay.step(request(1, Request::Status { id: id("s") }));
    assert_eq!(
        relay.step(up(Response::Unsupported { id: id("1") })),
        vec![send(1, Response::Unsupported { id: id("s") })]
    );
}
