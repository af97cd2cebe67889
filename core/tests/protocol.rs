//! The wire protocol through its public API (SPEC.md §3–§6): the exact text
//! of every message both ways, what each kind of malformed line decodes to,
//! and property tests that round-trip arbitrary messages and throw arbitrary
//! bytes at the decoders and the line framer.

use std::sync::Arc;

use proptest::prelude::*;
use single_flight_core::fuzzing;
use single_flight_core::protocol::limits::{
    MAX_FRAME_BYTES, MAX_ID_BYTES, MAX_KEY_BYTES, MAX_NESTING_DEPTH, MAX_OP_BYTES,
    MAX_OUTCOME_BYTES, MAX_REASON_BYTES, MAX_REUSE_WINDOW_MS, OUTCOME_ENVELOPE_BYTES,
    STATUS_ENVELOPE_BYTES,
};
use single_flight_core::protocol::{
    ClientHello, CoordinatorIdentity, CoordinatorStats, DecodeError, Epoch, Failure, FailureCode,
    FencingToken, FlightStatus, FrameError, GroupStatus, HandshakeError, HostId, HostStatus,
    HostsStatus, Incoming, Key, LineEncoder, LineReader, MAX_SHARDS, Outcome, PROTOCOL_VERSION,
    ProtocolVersionError, Reason, RelayStatus, Request, RequestId, Response, ReuseWindow, Shard,
    ShardCount, ShardCountError, TokenError, decode_client_hello, decode_coordinator_hello,
    decode_request, decode_response, encode,
};

fn id(text: &str) -> RequestId {
    RequestId::new(text).expect("test ids are within the limits")
}

fn key(text: &str) -> Key {
    Key::new(text).expect("test keys are within the limits")
}

fn token(epoch: u64, sequence: u32) -> FencingToken {
    FencingToken::new(Epoch::new(epoch).expect("test epochs are valid"), sequence)
        .expect("test sequences start at 1")
}

/// The token of SPEC.md's examples: the first flight of the first term.
fn first_token() -> FencingToken {
    token(1, 1)
}

/// The value of SPEC.md's examples: JSON text, as the default codec writes it.
fn ok_value() -> Outcome {
    Outcome::Value(r#"{"ok":true}"#.to_owned())
}

fn failure(code: Option<FailureCode>) -> Outcome {
    Outcome::Failure(Failure {
        name: "Error".to_owned(),
        message: "disk full".to_owned(),
        code,
    })
}

/// A request encodes to exactly `line`, and `line` decodes to the request.
#[track_caller]
fn assert_request_line(request: Request, line: &str) {
    assert_eq!(encode(&request), line, "encoding {request:?}");
    assert_eq!(
        decode_request(line.as_bytes()),
        Ok(Incoming::Request(request)),
        "decoding {line}"
    );
}

/// A response encodes to exactly `line`, and `line` decodes to the response.
#[track_caller]
fn assert_response_line(response: Response, line: &str) {
    assert_eq!(encode(&response), line, "encoding {response:?}");
    assert_eq!(
        decode_response(line.as_bytes()),
        Ok(response),
        "decoding {line}"
    );
}

// ---------------------------------------------------------------------------
// Requests, one test per kind (SPEC.md §3.2).
// ---------------------------------------------------------------------------

/// §3.2: `run` without `flight` leads or joins.
#[test]
fn request_run() {
    assert_request_line(
        Request::Run {
            id: id("1"),
            key: key("build:app"),
            flight: None,
            reuse: None,
            parent: None,
        },
        r#"{"op":"run","id":"1","key":"build:app"}"#,
    );
}

/// §3.2, §6: `run` with `flight` is a rejoin; the token is decimal text.
#[test]
fn request_run_with_flight() {
    assert_request_line(
        Request::Run {
            id: id("2"),
            key: key("build:app"),
            flight: Some(first_token()),
            reuse: None,
            parent: None,
        },
        r#"{"op":"run","id":"2","key":"build:app","flight":"4294967297"}"#,
    );
}

/// §16.1: `run` with a reuse window in milliseconds.
#[test]
fn request_run_with_reuse() {
    assert_request_line(
        Request::Run {
            id: id("1"),
            key: key("build:app"),
            flight: None,
            reuse: ReuseWindow::from_millis(30_000),
            parent: None,
        },
        r#"{"op":"run","id":"1","key":"build:app","reuse":30000}"#,
    );
    // A reassert carries none (§16.2): the member is read and ignored.
    assert_eq!(
        decode_request(
            br#"{"op":"reassert","id":"1","key":"build:app","token":"4294967297","reuse":1}"#
        ),
        Ok(Incoming::Request(Request::Reassert {
            id: id("1"),
            key: key("build:app"),
            token: first_token(),
            outcome: None,
            parent: None,
        }))
    );
}

/// §16.1: a reuse window that is not an integer from 1 to 3 600 000 makes
/// the line malformed, and the error says what it must be.
#[test]
fn request_run_with_a_bad_reuse_window() {
    for bad in ["0", "3600001", "-5", "1.5", "\"30\"", "null", "1e3"] {
        let line = format!(r#"{{"op":"run","id":"1","key":"k","reuse":{bad}}}"#);
        assert_eq!(
            decode_request(line.as_bytes()),
            Err(DecodeError::WrongType {
                field: "reuse",
                expected: "an integer of milliseconds from 1 to 3600000",
            }),
            "{line}"
        );
    }
}

/// §3.5, §15.2: a detached flight in a `status` answer says so; the member
/// is absent otherwise, and must be a boolean when present.
#[test]
fn status_marks_detached_flights() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: vec![FlightStatus {
                key: key("k"),
                token: first_token(),
                joiners: 2,
                detached: true,
            }],
            waiting: None,
            omitted: None,
            stats: None,
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[{"key":"k","token":"4294967297","joiners":2,"detached":true}]}"#,
    );
    assert_eq!(
        decode_response(
            br#"{"op":"status","id":"9","flights":[{"key":"k","token":"4294967297","joiners":2,"detached":1}]}"#
        ),
        Err(DecodeError::WrongType {
            field: "detached",
            expected: "true or false",
        })
    );
}

/// §15.1: `detach`, `stop` and `reused`.
#[test]
fn detach_stop_and_reused() {
    assert_request_line(
        Request::Detach { id: id("3") },
        r#"{"op":"detach","id":"3"}"#,
    );
    assert_response_line(Response::Stop { id: id("3") }, r#"{"op":"stop","id":"3"}"#);
    assert_response_line(
        Response::Reused {
            id: id("4"),
            flight: first_token(),
            outcome: Box::new(ok_value()),
        },
        r#"{"op":"reused","id":"4","flight":"4294967297","outcome":{"value":"{\"ok\":true}"}}"#,
    );
    assert_eq!(
        decode_response(br#"{"op":"reused","id":"4","outcome":{"value":"1"}}"#),
        Err(DecodeError::MissingField { field: "flight" })
    );
}

/// §18.3: a host coordinator's `unavailable`, its reason required, not
/// empty and bounded.
#[test]
fn unavailable_carries_its_reason() {
    assert_response_line(
        Response::Unavailable {
            id: id("5"),
            reason: Reason::new("etcd refused \"ci\"").unwrap(),
        },
        r#"{"op":"unavailable","id":"5","reason":"etcd refused \"ci\""}"#,
    );
    assert_eq!(
        decode_response(br#"{"op":"unavailable","id":"5"}"#),
        Err(DecodeError::MissingField { field: "reason" })
    );
    assert_eq!(
        decode_response(br#"{"op":"unavailable","id":"5","reason":""}"#),
        Err(DecodeError::Empty { field: "reason" })
    );
    let long = format!(
        r#"{{"op":"unavailable","id":"5","reason":"{}"}}"#,
        "x".repeat(MAX_REASON_BYTES + 1)
    );
    assert!(matches!(
        decode_response(long.as_bytes()),
        Err(DecodeError::TooLong {
            field: "reason",
            ..
        })
    ));
}

/// §3.2, §3.4: `land` with a value outcome.
#[test]
fn request_land_value() {
    assert_request_line(
        Request::Land {
            id: id("1"),
            outcome: ok_value(),
        },
        r#"{"op":"land","id":"1","outcome":{"value":"{\"ok\":true}"}}"#,
    );
}

/// §3.2, §3.4: `land` with a failure whose `code` is a string.
#[test]
fn request_land_failure_with_text_code() {
    assert_request_line(
        Request::Land {
            id: id("1"),
            outcome: failure(Some(FailureCode::Text("ENOSPC".to_owned()))),
        },
        r#"{"op":"land","id":"1","outcome":{"failure":{"name":"Error","message":"disk full","code":"ENOSPC"}}}"#,
    );
}

/// §3.4: a failure's `code` may be an integer, negative included.
#[test]
fn request_land_failure_with_integer_code() {
    assert_request_line(
        Request::Land {
            id: id("1"),
            outcome: failure(Some(FailureCode::Number(-28))),
        },
        r#"{"op":"land","id":"1","outcome":{"failure":{"name":"Error","message":"disk full","code":-28}}}"#,
    );
}

/// §3.4: the integer `code` covers the whole signed 64-bit range.
#[test]
fn request_land_failure_with_extreme_integer_codes() {
    for code in [i64::MIN, i64::MAX] {
        assert_request_line(
            Request::Land {
                id: id("1"),
                outcome: failure(Some(FailureCode::Number(code))),
            },
            &format!(
                r#"{{"op":"land","id":"1","outcome":{{"failure":{{"name":"Error","message":"disk full","code":{code}}}}}}}"#
            ),
        );
    }
}

/// §3.4: a failure without `code` omits the member entirely.
#[test]
fn request_land_failure_without_code() {
    assert_request_line(
        Request::Land {
            id: id("1"),
            outcome: failure(None),
        },
        r#"{"op":"land","id":"1","outcome":{"failure":{"name":"Error","message":"disk full"}}}"#,
    );
}

/// §3.2: `cancel`.
#[test]
fn request_cancel() {
    assert_request_line(
        Request::Cancel { id: id("2") },
        r#"{"op":"cancel","id":"2"}"#,
    );
}

/// §3.2: `reassert` carries the key and the token of the earlier term.
#[test]
fn request_reassert() {
    assert_request_line(
        Request::Reassert {
            id: id("1"),
            key: key("build:app"),
            token: first_token(),
            outcome: None,
            parent: None,
        },
        r#"{"op":"reassert","id":"1","key":"build:app","token":"4294967297"}"#,
    );
}

/// §3.2: a `reassert` of a flight that already landed carries its outcome.
#[test]
fn request_reassert_with_outcome() {
    assert_request_line(
        Request::Reassert {
            id: id("1"),
            key: key("build:app"),
            token: first_token(),
            outcome: Some(Outcome::Value("{\"ok\":true}".into())),
            parent: None,
        },
        r#"{"op":"reassert","id":"1","key":"build:app","token":"4294967297","outcome":{"value":"{\"ok\":true}"}}"#,
    );
}

/// §3.2, §3.5: `status`.
#[test]
fn request_status() {
    assert_request_line(
        Request::Status { id: id("9") },
        r#"{"op":"status","id":"9"}"#,
    );
}

// ---------------------------------------------------------------------------
// Responses, one test per kind (SPEC.md §3.3).
// ---------------------------------------------------------------------------

/// §3.3: `lead`.
#[test]
fn response_lead() {
    assert_response_line(
        Response::Lead {
            id: id("1"),
            token: first_token(),
        },
        r#"{"op":"lead","id":"1","token":"4294967297"}"#,
    );
}

/// §3.3: `joined`.
#[test]
fn response_joined() {
    assert_response_line(
        Response::Joined {
            id: id("2"),
            flight: first_token(),
        },
        r#"{"op":"joined","id":"2","flight":"4294967297"}"#,
    );
}

/// §3.3, §3.4: `landed` with a value.
#[test]
fn response_landed_value() {
    assert_response_line(
        Response::Landed {
            id: id("2"),
            outcome: Arc::new(ok_value()),
        },
        r#"{"op":"landed","id":"2","outcome":{"value":"{\"ok\":true}"}}"#,
    );
}

/// §3.3, §3.4: `landed` with a failure, as a joiner receives it.
#[test]
fn response_landed_failure() {
    assert_response_line(
        Response::Landed {
            id: id("2"),
            outcome: Arc::new(failure(Some(FailureCode::Text("ENOSPC".to_owned())))),
        },
        r#"{"op":"landed","id":"2","outcome":{"failure":{"name":"Error","message":"disk full","code":"ENOSPC"}}}"#,
    );
}

/// §3.3: `interrupted`.
#[test]
fn response_interrupted() {
    assert_response_line(
        Response::Interrupted { id: id("2") },
        r#"{"op":"interrupted","id":"2"}"#,
    );
}

/// §3.3: `ack`.
#[test]
fn response_ack() {
    assert_response_line(Response::Ack { id: id("1") }, r#"{"op":"ack","id":"1"}"#);
}

/// §3.3: `rejected`.
#[test]
fn response_rejected() {
    assert_response_line(
        Response::Rejected { id: id("1") },
        r#"{"op":"rejected","id":"1"}"#,
    );
}

/// §3.3, §3.6: `unsupported`.
#[test]
fn response_unsupported() {
    assert_response_line(
        Response::Unsupported { id: id("7") },
        r#"{"op":"unsupported","id":"7"}"#,
    );
}

/// §3.3, §3.5: `status` lists each flight's key, token and joiner count.
#[test]
fn response_status() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: vec![FlightStatus {
                key: key("build:app"),
                token: first_token(),
                joiners: 3,
                detached: false,
            }],
            waiting: None,
            omitted: None,
            stats: None,
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[{"key":"build:app","token":"4294967297","joiners":3}]}"#,
    );
}

/// §3.5: during a grace window `status` also counts the runs that wait.
#[test]
fn response_status_in_a_grace_window() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: Vec::new(),
            waiting: Some(4),
            omitted: None,
            stats: None,
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[],"waiting":4}"#,
    );
}

/// §3.5: an answer that leaves flights out to fit in one line counts them.
#[test]
fn response_status_with_flights_left_out() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: vec![FlightStatus {
                key: key("build:app"),
                token: first_token(),
                joiners: 3,
                detached: false,
            }],
            waiting: None,
            omitted: Some(2048),
            stats: None,
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[{"key":"build:app","token":"4294967297","joiners":3}],"omitted":2048}"#,
    );
}

/// A coordinator's counters, each a different number so that no two members
/// can be swapped unnoticed.
fn some_stats() -> CoordinatorStats {
    CoordinatorStats {
        flights_led: 12,
        joins: 40,
        lands_value: 11,
        lands_failure: 1,
        interruptions: 2,
        reasserts_accepted: 3,
        reasserts_rejected: 4,
        rejoins: 5,
        grace_windows: 1,
        connections_open: 6,
        connections_refused: 7,
    }
}

/// §3.5: a coordinator that counts adds its term's counters, last.
#[test]
fn response_status_with_stats() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: Vec::new(),
            waiting: None,
            omitted: None,
            stats: Some(Box::new(some_stats())),
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[],"stats":{"flights_led":12,"joins":40,"lands_value":11,"lands_failure":1,"interruptions":2,"reasserts_accepted":3,"reasserts_rejected":4,"rejoins":5,"grace_windows":1,"connections_open":6,"connections_refused":7}}"#,
    );
}

/// §3, §3.5: the counters' members may come in any order, and members a
/// later version may add are ignored.
#[test]
fn status_stats_in_any_order_with_unknown_members() {
    let line = br#"{"stats":{"connections_refused":7,"connections_open":6,"grace_windows":1,"rejoins":5,"reasserts_rejected":4,"reasserts_accepted":3,"interruptions":2,"lands_failure":1,"lands_value":11,"joins":40,"flights_led":12,"flights_stolen":[1,{"x":null}]},"flights":[],"id":"9","op":"status"}"#;
    assert_eq!(
        decode_response(line),
        Ok(Response::Status {
            id: id("9"),
            flights: Vec::new(),
            waiting: None,
            omitted: None,
            stats: Some(Box::new(some_stats())),
            hosts: None,
            relay: None,
        })
    );
}

/// §3.5: everything in a `status` answer but its flights fits in the room
/// kept for it, with an id at its limit that takes six bytes per byte, both
/// counts and every counter at their largest. SPEC.md §3.5 and
/// `STATUS_ENVELOPE_BYTES` state the figure.
#[test]
fn the_longest_status_envelope_fits_its_room() {
    let all = u64::MAX;
    let response = Response::Status {
        id: RequestId::new("\u{1}".repeat(MAX_ID_BYTES)).unwrap(),
        flights: Vec::new(),
        waiting: Some(all),
        omitted: Some(all),
        stats: Some(Box::new(CoordinatorStats {
            flights_led: all,
            joins: all,
            lands_value: all,
            lands_failure: all,
            interruptions: all,
            reasserts_accepted: all,
            reasserts_rejected: all,
            rejoins: all,
            grace_windows: all,
            connections_open: all,
            connections_refused: all,
        })),
        hosts: Some(Box::new(HostsStatus {
            direct: all,
            relays: Vec::new(),
            omitted: all,
        })),
        // A host coordinator's view is not in a coordinator's envelope: the
        // host coordinator cuts the answer to fit when it adds it (§3.5).
        relay: None,
    };
    let envelope = encode(&response).len();
    assert_eq!(envelope, 1367);
    // The flights' list holds at most the room less one (the coordinator
    // counts a comma after every flight), and replaces the `[]` counted here.
    assert!(envelope <= STATUS_ENVELOPE_BYTES + 1);
}

/// §3.5, §18.2, §18.3: a cluster's coordinator lists its connections by
/// host, and a host coordinator adds its own view; `window` and `orphans`
/// only when set, a group's `token` only once answered.
#[test]
fn response_status_with_hosts_and_relay() {
    let host = |name: &str| HostId::new(name).unwrap();
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: Vec::new(),
            waiting: None,
            omitted: None,
            stats: None,
            hosts: Some(Box::new(HostsStatus {
                direct: 1,
                relays: vec![
                    HostStatus {
                        host: host("a-1"),
                        connections: 1,
                        parties: 2,
                        window: false,
                        orphans: 0,
                    },
                    HostStatus {
                        host: host("b-2"),
                        connections: 0,
                        parties: 0,
                        window: true,
                        orphans: 3,
                    },
                ],
                omitted: 4,
            })),
            relay: Some(Box::new(RelayStatus {
                host: Some(host("a-1")),
                connections: 250,
                groups: vec![
                    GroupStatus {
                        key: key("k"),
                        token: Some(first_token()),
                        parties: 250,
                    },
                    GroupStatus {
                        key: key("l"),
                        token: None,
                        parties: 1,
                    },
                ],
                omitted: 0,
                cluster: Some(CoordinatorIdentity {
                    epoch: Epoch::new(3).unwrap(),
                    pid: 4242,
                    host: Some("ci-7".into()),
                }),
            })),
        },
        r#"{"op":"status","id":"9","flights":[],"hosts":{"direct":1,"relays":[{"host":"a-1","connections":1,"parties":2},{"host":"b-2","connections":0,"parties":0,"window":true,"orphans":3}],"omitted":4},"relay":{"host":"a-1","connections":250,"groups":[{"key":"k","token":"4294967297","parties":250},{"key":"l","parties":1}],"cluster":{"epoch":"3","pid":4242,"host":"ci-7"}}}"#,
    );
}

/// §3, §3.5: members of `hosts` and `relay` that a later version may add are
/// ignored; a `relay` without `host` or `cluster` reads as not knowing them.
#[test]
fn status_hosts_and_relay_with_unknown_members() {
    let line = br#"{"op":"status","id":"9","flights":[],"hosts":{"relays":[{"host":"h","parties":0,"connections":1,"since":5}],"direct":0,"later":[]},"relay":{"connections":1,"groups":[],"later":{}}}"#;
    let Ok(Response::Status {
        hosts: Some(hosts),
        relay: Some(relay),
        ..
    }) = decode_response(line)
    else {
        panic!("decodes: {:?}", decode_response(line));
    };
    assert_eq!((hosts.direct, hosts.relays.len(), hosts.omitted), (0, 1, 0));
    assert_eq!(
        *relay,
        RelayStatus {
            connections: 1,
            ..RelayStatus::default()
        }
    );
}

/// §3.5, §3.7: `hosts` and `relay` of the wrong shape make the line
/// malformed, each with the field that is wrong.
#[test]
fn status_hosts_and_relay_of_the_wrong_shape_are_malformed() {
    let wrong = |field: &'static str| {
        move |error: DecodeError| match error {
            DecodeError::WrongType { field: named, .. }
            | DecodeError::MissingField { field: named } => {
                assert_eq!(named, field)
            }
            other => panic!("{field}: {other:?}"),
        }
    };
    for (line, field) in [
        (r#""hosts":[]"#, "hosts"),
        (r#""hosts":{"relays":[]}"#, "direct"),
        (r#""hosts":{"direct":-1,"relays":[]}"#, "direct"),
        (r#""hosts":{"direct":0,"relays":{}}"#, "relays"),
        (
            r#""hosts":{"direct":0,"relays":[{"host":"","connections":1,"parties":0}]}"#,
            "host",
        ),
        (
            r#""hosts":{"direct":0,"relays":[{"host":"a\u0007","connections":1,"parties":0}]}"#,
            "host",
        ),
        (
            r#""hosts":{"direct":0,"relays":[{"host":"a","connections":1,"parties":0,"window":null}]}"#,
            "window",
        ),
        (
            r#""hosts":{"direct":0,"relays":[{"host":"a","connections":1.0,"parties":0}]}"#,
            "connections",
        ),
        (r#""relay":null"#, "relay"),
        (r#""relay":{"groups":[]}"#, "connections"),
        (
            r#""relay":{"connections":1,"groups":[{"key":"k","token":"x","parties":1}]}"#,
            "token",
        ),
        (
            r#""relay":{"connections":1,"groups":[],"cluster":{"epoch":"0","pid":1}}"#,
            "epoch",
        ),
        (
            r#""relay":{"connections":1,"groups":[],"cluster":{"epoch":"3","pid":4294967296}}"#,
            "pid",
        ),
    ] {
        let line = format!(r#"{{"op":"status","id":"9","flights":[],{line}}}"#);
        match decode_response(line.as_bytes()) {
            Err(DecodeError::BadToken { field: named, .. }) => assert_eq!(named, field),
            Err(error) => wrong(field)(error),
            Ok(decoded) => panic!("{line} decoded: {decoded:?}"),
        }
    }
}

/// §3.5: a coordinator with no flight in progress answers an empty list.
#[test]
fn response_status_without_flights() {
    assert_response_line(
        Response::Status {
            id: id("9"),
            flights: Vec::new(),
            waiting: None,
            omitted: None,
            stats: None,
            hosts: None,
            relay: None,
        },
        r#"{"op":"status","id":"9","flights":[]}"#,
    );
}

// ---------------------------------------------------------------------------
// What receivers accept beyond the exact text (SPEC.md §3, §3.1, §3.6).
// ---------------------------------------------------------------------------

/// §3: members may come in any order, and members a receiver does not know
/// are ignored so that later versions can add optional ones.
#[test]
fn member_order_and_unknown_members_do_not_matter() {
    assert_eq!(
        decode_request(br#"{"key":"build:app","extra":[1,{"a":null}],"id":"1","op":"run"}"#),
        Ok(Incoming::Request(Request::Run {
            id: id("1"),
            key: key("build:app"),
            flight: None,
            reuse: None,
            parent: None,
        }))
    );
    assert_eq!(
        decode_response(br#"{"token":"4294967297","id":"1","op":"lead","since":"v2"}"#),
        Ok(Response::Lead {
            id: id("1"),
            token: first_token(),
        })
    );
    // §3.4: members of `failure` other than name, message and code are ignored.
    assert_eq!(
        decode_request(
            br#"{"op":"land","id":"1","outcome":{"failure":{"name":"Error","message":"disk full","stack":"at x"}}}"#
        ),
        Ok(Incoming::Request(Request::Land {
            id: id("1"),
            outcome: failure(None),
        }))
    );
}

/// §3.1, §5: an id of exactly `MAX_ID_BYTES` bytes and a key of exactly
/// `MAX_KEY_BYTES` bytes are accepted; the limits count bytes, not characters.
#[test]
fn ids_and_keys_at_the_limit_are_accepted() {
    let longest_id = "é".repeat(MAX_ID_BYTES / 2);
    let longest_key = "k".repeat(MAX_KEY_BYTES - 3) + "€";
    assert_eq!(longest_id.len(), MAX_ID_BYTES);
    assert_eq!(longest_key.len(), MAX_KEY_BYTES);
    assert_request_line(
        Request::Run {
            id: id(&longest_id),
            key: key(&longest_key),
            flight: None,
            reuse: None,
            parent: None,
        },
        &format!(r#"{{"op":"run","id":"{longest_id}","key":"{longest_key}"}}"#),
    );
}

/// §3.6, §5: an `op` of exactly `MAX_OP_BYTES` bytes that the coordinator
/// does not know is an unknown request, to be answered `unsupported`; one
/// byte more is malformed (in the table below).
#[test]
fn ops_at_the_limit_are_unknown_requests() {
    let op = "o".repeat(MAX_OP_BYTES);
    assert_eq!(
        decode_request(format!(r#"{{"op":"{op}","id":"1"}}"#).as_bytes()),
        Ok(Incoming::Unknown { op, id: id("1") })
    );
}

/// A key or an id of `len` bytes that each take six bytes on the wire.
fn escaped_text(len: usize) -> String {
    "\u{1}".repeat(len)
}

/// §3.4, §5: an outcome of exactly `MAX_OUTCOME_BYTES` fits in every line
/// that carries one, with the longest envelope each can have: a `land` and a
/// `landed` whose ids, and a landed `reassert` whose id and key, are at their
/// limits and written with an escape for every byte.
#[test]
fn an_outcome_at_the_limit_fits_in_every_line_that_carries_it() {
    let outcome = Outcome::Value("v".repeat(MAX_OUTCOME_BYTES - r#"{"value":""}"#.len()));
    assert_eq!(outcome.encoded_len(), MAX_OUTCOME_BYTES);
    let longest_id = id(&escaped_text(MAX_ID_BYTES));
    let longest_key = key(&escaped_text(MAX_KEY_BYTES));
    let largest_token: FencingToken = i64::MAX.to_string().parse().unwrap();
    let reassert = encode(&Request::Reassert {
        id: longest_id.clone(),
        key: longest_key,
        token: largest_token,
        outcome: Some(outcome.clone()),
        parent: None,
    });
    let land = encode(&Request::Land {
        id: longest_id.clone(),
        outcome: outcome.clone(),
    });
    let landed = encode(&Response::Landed {
        id: longest_id,
        outcome: Arc::new(outcome.clone()),
    });
    assert_eq!(reassert.len() - MAX_OUTCOME_BYTES, 25_419);
    for line in [reassert, land, landed] {
        assert!(line.len() - MAX_OUTCOME_BYTES <= OUTCOME_ENVELOPE_BYTES);
        assert!(line.len() <= MAX_FRAME_BYTES);
    }
}

/// §3.4: an outcome over `MAX_OUTCOME_BYTES`, a value or a failure, is
/// replaced by the `ValueTooLarge` failure, whose message says how large it
/// was and what to do; one at the limit is kept.
#[test]
fn an_outcome_over_the_limit_is_replaced_by_value_too_large() {
    let value = |len: usize| Outcome::Value("v".repeat(len - r#"{"value":""}"#.len()));
    assert_eq!(
        value(MAX_OUTCOME_BYTES).shareable(),
        Ok(value(MAX_OUTCOME_BYTES))
    );
    let failure = value(MAX_OUTCOME_BYTES + 1)
        .shareable()
        .expect_err("one byte over the limit");
    assert_eq!(failure.name, "ValueTooLarge");
    assert!(
        failure.message.contains("8355841 bytes"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("a file"), "{}", failure.message);
    // Where every byte is written as an escape of six.
    let escapes = |count: usize| Outcome::Value(escaped_text(count));
    let most = (MAX_OUTCOME_BYTES - r#"{"value":""}"#.len()) / 6;
    assert_eq!(escapes(most).encoded_len(), MAX_OUTCOME_BYTES);
    assert_eq!(escapes(most).shareable(), Ok(escapes(most)));
    assert!(escapes(most + 1).shareable().is_err());
    let huge_error = Outcome::Failure(Failure {
        name: "Error".into(),
        message: "m".repeat(MAX_OUTCOME_BYTES),
        code: None,
    });
    let failure = huge_error
        .shareable()
        .expect_err("a failure over the limit");
    assert_eq!(failure.name, "ValueTooLarge");
    assert!(
        failure.message.contains("shorter message"),
        "{}",
        failure.message
    );
}

/// §6: the smallest and the largest tokens cross the wire as decimal text.
#[test]
fn extreme_tokens() {
    let largest = token(u64::from(Epoch::MAX.get()), u32::MAX);
    assert_response_line(
        Response::Lead {
            id: id("1"),
            token: largest,
        },
        r#"{"op":"lead","id":"1","token":"9223372036854775807"}"#,
    );
    assert_response_line(
        Response::Joined {
            id: id("1"),
            flight: first_token(),
        },
        r#"{"op":"joined","id":"1","flight":"4294967297"}"#,
    );
}

/// §3.6: a request with a well-formed envelope but an `op` this version does
/// not know decodes to `Unknown`, whatever its other members, so that the
/// coordinator can answer `unsupported` and keep the connection.
#[test]
fn unknown_request_op_keeps_the_envelope() {
    assert_eq!(
        decode_request(br#"{"op":"frobnicate","id":"7","flight":12,"outcome":[]}"#),
        Ok(Incoming::Unknown {
            op: "frobnicate".to_owned(),
            id: id("7"),
        })
    );
    // Op names are case-sensitive: `RUN` is not `run`.
    assert_eq!(
        decode_request(br#"{"op":"RUN","id":"1","key":"k"}"#),
        Ok(Incoming::Unknown {
            op: "RUN".to_owned(),
            id: id("1"),
        })
    );
    // The envelope must still be well formed for the line to be "unknown".
    assert_eq!(
        decode_request(br#"{"op":"frobnicate"}"#),
        Err(DecodeError::MissingField { field: "id" })
    );
    assert_eq!(
        decode_request(br#"{"op":"frobnicate","id":""}"#),
        Err(DecodeError::Empty { field: "id" })
    );
}

/// §3.6: a response with an unknown `op` is a decode error for the client,
/// because coordinators only send new responses to new requests.
#[test]
fn unknown_response_op_is_an_error() {
    assert_eq!(
        decode_response(br#"{"op":"frobnicated","id":"7"}"#),
        Err(DecodeError::UnknownResponse {
            op: "frobnicated".to_owned()
        })
    );
    // A request's op is not a response either.
    assert_eq!(
        decode_response(br#"{"op":"run","id":"1","key":"k"}"#),
        Err(DecodeError::UnknownResponse {
            op: "run".to_owned()
        })
    );
}

// ---------------------------------------------------------------------------
// Malformed lines (SPEC.md §3.7, §6).
// ---------------------------------------------------------------------------

/// What a malformed line decodes to. `NotJson` carries serde_json's own
/// explanation, which is not part of our contract (it may change with
/// serde_json), so for it the table pins only a fragment of the reason.
enum Expected {
    Error(DecodeError),
    NotJson(&'static str),
}

#[track_caller]
fn assert_malformed(
    name: &str,
    got: Result<impl std::fmt::Debug, DecodeError>,
    expected: &Expected,
) {
    match (got, expected) {
        (Err(error), Expected::Error(expected)) => {
            assert_eq!(&error, expected, "{name}");
        }
        (Err(DecodeError::NotJson { reason }), Expected::NotJson(fragment)) => {
            assert!(
                reason.contains(fragment),
                "{name}: reason {reason:?} does not mention {fragment:?}"
            );
        }
        (got, _) => panic!("{name}: decoded to {got:?}"),
    }
}

fn wrong_type(field: &'static str, expected: &'static str) -> Expected {
    Expected::Error(DecodeError::WrongType { field, expected })
}

fn missing(field: &'static str) -> Expected {
    Expected::Error(DecodeError::MissingField { field })
}

fn bad_token(field: &'static str, reason: TokenError) -> Expected {
    Expected::Error(DecodeError::BadToken { field, reason })
}

fn too_long(field: &'static str, len: usize, max: usize) -> Expected {
    Expected::Error(DecodeError::TooLong { field, len, max })
}

/// A `status` request whose unknown member `x` nests arrays (`[`) or
/// objects (`{`) so that the line has `depth` levels, the message object
/// being the first (§3.7).
fn nested(depth: usize, open: char, close: char) -> Vec<u8> {
    let inner = depth - 1;
    let (open, close) = if open == '{' {
        (r#"{"x":"#.repeat(inner), "}".repeat(inner))
    } else {
        (
            open.to_string().repeat(inner),
            close.to_string().repeat(inner),
        )
    };
    let core = if open.starts_with('{') { "1" } else { "" };
    format!(r#"{{"op":"status","id":"d","x":{open}{core}{close}}}"#).into_bytes()
}

/// §3.7, §5: a line nested exactly `MAX_NESTING_DEPTH` levels deep, in
/// arrays or in objects, is a message; one level more is not JSON (in the
/// malformed table).
#[test]
fn nesting_at_the_limit_is_accepted() {
    for open in ['[', '{'] {
        let close = if open == '[' { ']' } else { '}' };
        let line = nested(MAX_NESTING_DEPTH, open, close);
        assert_eq!(
            decode_request(&line),
            Ok(Incoming::Request(Request::Status { id: id("d") })),
            "{}",
            String::from_utf8_lossy(&line)
        );
        assert!(
            matches!(
                decode_request(&nested(MAX_NESTING_DEPTH + 1, open, close)),
                Err(DecodeError::NotJson { reason }) if reason.contains("recursion limit exceeded")
            ),
            "one level more is not JSON"
        );
    }
}

/// Lines that are malformed as any message, request or response alike.
fn malformed_lines() -> Vec<(&'static str, Vec<u8>, Expected)> {
    let long_id = "i".repeat(MAX_ID_BYTES + 1);
    let long_multibyte_id = "é".repeat(MAX_ID_BYTES / 2 + 1);
    let long_op = "o".repeat(MAX_OP_BYTES + 1);
    vec![
        (
            "empty line (§4.1)",
            b"".to_vec(),
            Expected::NotJson("EOF while parsing"),
        ),
        (
            "only spaces",
            b"   ".to_vec(),
            Expected::NotJson("EOF while parsing"),
        ),
        (
            "not JSON",
            b"GET / HTTP/1.1".to_vec(),
            Expected::NotJson("expected value"),
        ),
        (
            "invalid UTF-8 in a string",
            b"{\"op\":\"cancel\",\"id\":\"\xff\"}".to_vec(),
            Expected::NotJson("invalid unicode code point"),
        ),
        (
            "invalid UTF-8 outside strings",
            b"\xfe\xff".to_vec(),
            Expected::NotJson("expected value"),
        ),
        (
            "lone surrogate escape",
            br#"{"op":"cancel","id":"\ud800"}"#.to_vec(),
            Expected::NotJson("hex escape"),
        ),
        (
            "truncated object",
            br#"{"op":"cancel","id":"1""#.to_vec(),
            Expected::NotJson("EOF while parsing"),
        ),
        (
            "two objects on one line",
            br#"{"op":"cancel","id":"1"}{"op":"cancel","id":"2"}"#.to_vec(),
            Expected::NotJson("trailing characters"),
        ),
        (
            "10 000 nested arrays",
            "[".repeat(10_000).into_bytes(),
            Expected::NotJson("recursion limit exceeded"),
        ),
        (
            "deep nesting inside an unknown member",
            format!(
                r#"{{"op":"cancel","id":"1","x":{}1{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
            .into_bytes(),
            Expected::NotJson("recursion limit exceeded"),
        ),
        (
            "arrays one level past the nesting limit (§3.7)",
            nested(MAX_NESTING_DEPTH + 1, '[', ']'),
            Expected::NotJson("recursion limit exceeded"),
        ),
        (
            "objects one level past the nesting limit (§3.7)",
            nested(MAX_NESTING_DEPTH + 1, '{', '}'),
            Expected::NotJson("recursion limit exceeded"),
        ),
        (
            "JSON array",
            br#"[{"op":"cancel","id":"1"}]"#.to_vec(),
            Expected::Error(DecodeError::NotAnObject),
        ),
        (
            "JSON string",
            br#""cancel""#.to_vec(),
            Expected::Error(DecodeError::NotAnObject),
        ),
        (
            "JSON null",
            b"null".to_vec(),
            Expected::Error(DecodeError::NotAnObject),
        ),
        (
            "JSON number",
            b"4294967297".to_vec(),
            Expected::Error(DecodeError::NotAnObject),
        ),
        ("empty object", b"{}".to_vec(), missing("op")),
        ("missing op", br#"{"id":"1"}"#.to_vec(), missing("op")),
        (
            "op a number",
            br#"{"op":1,"id":"1"}"#.to_vec(),
            wrong_type("op", "a string"),
        ),
        (
            "op null",
            br#"{"op":null,"id":"1"}"#.to_vec(),
            wrong_type("op", "a string"),
        ),
        (
            "op over the limit",
            format!(r#"{{"op":"{long_op}","id":"1"}}"#).into_bytes(),
            too_long("op", MAX_OP_BYTES + 1, MAX_OP_BYTES),
        ),
        ("missing id", br#"{"op":"cancel"}"#.to_vec(), missing("id")),
        (
            "id a number",
            br#"{"op":"cancel","id":1}"#.to_vec(),
            wrong_type("id", "a string"),
        ),
        (
            "empty id",
            br#"{"op":"cancel","id":""}"#.to_vec(),
            Expected::Error(DecodeError::Empty { field: "id" }),
        ),
        (
            "empty op",
            br#"{"op":"","id":"1"}"#.to_vec(),
            Expected::Error(DecodeError::Empty { field: "op" }),
        ),
        (
            "id over 128 bytes",
            format!(r#"{{"op":"cancel","id":"{long_id}"}}"#).into_bytes(),
            too_long("id", MAX_ID_BYTES + 1, MAX_ID_BYTES),
        ),
        (
            "id over 128 bytes in 65 characters",
            format!(r#"{{"op":"cancel","id":"{long_multibyte_id}"}}"#).into_bytes(),
            too_long("id", MAX_ID_BYTES + 2, MAX_ID_BYTES),
        ),
    ]
}

/// Request lines whose envelope is fine but whose body is not.
fn malformed_requests() -> Vec<(&'static str, Vec<u8>, Expected)> {
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let run_with_flight = |flight: &str| -> Vec<u8> {
        format!(r#"{{"op":"run","id":"1","key":"k","flight":{flight}}}"#).into_bytes()
    };
    let reassert_with_token = |token: &str| -> Vec<u8> {
        format!(r#"{{"op":"reassert","id":"1","key":"k","token":{token}}}"#).into_bytes()
    };
    let land_with = |outcome: &str| -> Vec<u8> {
        format!(r#"{{"op":"land","id":"1","outcome":{outcome}}}"#).into_bytes()
    };
    vec![
        (
            "run without key",
            br#"{"op":"run","id":"1"}"#.to_vec(),
            missing("key"),
        ),
        (
            "run with an empty key",
            br#"{"op":"run","id":"1","key":""}"#.to_vec(),
            Expected::Error(DecodeError::Empty { field: "key" }),
        ),
        (
            "run with a key over 4096 bytes",
            format!(r#"{{"op":"run","id":"1","key":"{long_key}"}}"#).into_bytes(),
            too_long("key", MAX_KEY_BYTES + 1, MAX_KEY_BYTES),
        ),
        (
            "run with a key that is an array",
            br#"{"op":"run","id":"1","key":["a"]}"#.to_vec(),
            wrong_type("key", "a string"),
        ),
        (
            "flight with a leading zero",
            run_with_flight(r#""01""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight with a sign",
            run_with_flight(r#""-1""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight not a number",
            run_with_flight(r#""abc""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight zero",
            run_with_flight(r#""0""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight with a space",
            run_with_flight(r#"" 4294967297""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight with a fraction",
            run_with_flight(r#""4294967297.0""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight in full-width digits",
            run_with_flight(r#""４２""#),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "flight empty",
            run_with_flight(r#""""#),
            bad_token("flight", TokenError::Empty),
        ),
        (
            "flight with epoch 0",
            run_with_flight(r#""7""#),
            bad_token("flight", TokenError::OutOfRange),
        ),
        (
            "flight with sequence 0",
            run_with_flight(r#""4294967296""#),
            bad_token("flight", TokenError::OutOfRange),
        ),
        (
            "flight above i64::MAX",
            run_with_flight(r#""9223372036854775808""#),
            bad_token("flight", TokenError::TooLarge),
        ),
        (
            "flight of 20 digits",
            run_with_flight(r#""18446744073709551615""#),
            bad_token("flight", TokenError::TooLarge),
        ),
        (
            "flight as a JSON number",
            run_with_flight("4294967297"),
            wrong_type("flight", "a string"),
        ),
        (
            "flight null",
            run_with_flight("null"),
            wrong_type("flight", "a string"),
        ),
        (
            "reassert without token",
            br#"{"op":"reassert","id":"1","key":"k"}"#.to_vec(),
            missing("token"),
        ),
        (
            "reassert without key",
            br#"{"op":"reassert","id":"1","token":"4294967297"}"#.to_vec(),
            missing("key"),
        ),
        (
            "reassert token as a JSON number",
            reassert_with_token("4294967297"),
            wrong_type("token", "a string"),
        ),
        (
            "reassert token with a leading zero",
            reassert_with_token(r#""04294967297""#),
            bad_token("token", TokenError::NotDecimal),
        ),
        (
            "land without outcome",
            br#"{"op":"land","id":"1"}"#.to_vec(),
            missing("outcome"),
        ),
        (
            "outcome with both value and failure",
            land_with(r#"{"value":"1","failure":{"name":"E","message":"m"}}"#),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "outcome empty",
            land_with("{}"),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "outcome a string",
            land_with(r#""done""#),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "outcome with an unknown member",
            land_with(r#"{"result":"1"}"#),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "outcome value a number",
            land_with(r#"{"value":1}"#),
            wrong_type("value", "a string"),
        ),
        (
            "outcome value null",
            land_with(r#"{"value":null}"#),
            wrong_type("value", "a string"),
        ),
        (
            "failure a string",
            land_with(r#"{"failure":"disk full"}"#),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "failure without name",
            land_with(r#"{"failure":{"message":"disk full"}}"#),
            missing("name"),
        ),
        (
            "failure without message",
            land_with(r#"{"failure":{"name":"Error"}}"#),
            missing("message"),
        ),
        (
            "failure name a number",
            land_with(r#"{"failure":{"name":1,"message":"m"}}"#),
            wrong_type("name", "a string"),
        ),
        (
            "failure code a float",
            land_with(r#"{"failure":{"name":"E","message":"m","code":1.5}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code with a zero fraction (§3.4: not an integer)",
            land_with(r#"{"failure":{"name":"E","message":"m","code":5.0}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code negative zero (§3.4: not an integer)",
            land_with(r#"{"failure":{"name":"E","message":"m","code":-0}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code below i64::MIN",
            land_with(r#"{"failure":{"name":"E","message":"m","code":-9223372036854775809}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code in exponent form",
            land_with(r#"{"failure":{"name":"E","message":"m","code":1e3}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code above i64::MAX",
            land_with(r#"{"failure":{"name":"E","message":"m","code":9223372036854775808}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code null",
            land_with(r#"{"failure":{"name":"E","message":"m","code":null}}"#),
            wrong_type("code", "a string or an integer"),
        ),
        (
            "failure code an object",
            land_with(r#"{"failure":{"name":"E","message":"m","code":{}}}"#),
            wrong_type("code", "a string or an integer"),
        ),
    ]
}

/// Response lines whose envelope is fine but whose body is not.
fn malformed_responses() -> Vec<(&'static str, Vec<u8>, Expected)> {
    let status_with = |flights: &str| -> Vec<u8> {
        format!(r#"{{"op":"status","id":"9","flights":{flights}}}"#).into_bytes()
    };
    vec![
        (
            "lead without token",
            br#"{"op":"lead","id":"1"}"#.to_vec(),
            missing("token"),
        ),
        (
            "lead token as a JSON number",
            br#"{"op":"lead","id":"1","token":4294967297}"#.to_vec(),
            wrong_type("token", "a string"),
        ),
        (
            "lead token with a leading zero",
            br#"{"op":"lead","id":"1","token":"01"}"#.to_vec(),
            bad_token("token", TokenError::NotDecimal),
        ),
        (
            "joined without flight",
            br#"{"op":"joined","id":"2"}"#.to_vec(),
            missing("flight"),
        ),
        (
            "joined flight with a sign",
            br#"{"op":"joined","id":"2","flight":"-1"}"#.to_vec(),
            bad_token("flight", TokenError::NotDecimal),
        ),
        (
            "landed outcome with both value and failure",
            br#"{"op":"landed","id":"2","outcome":{"value":"1","failure":{"name":"E","message":"m"}}}"#.to_vec(),
            Expected::Error(DecodeError::BadOutcome),
        ),
        (
            "landed without outcome",
            br#"{"op":"landed","id":"2"}"#.to_vec(),
            missing("outcome"),
        ),
        (
            "status without flights",
            br#"{"op":"status","id":"9"}"#.to_vec(),
            missing("flights"),
        ),
        (
            "status flights an object",
            status_with("{}"),
            wrong_type("flights", "an array"),
        ),
        (
            "status flight a string",
            status_with(r#"["build:app"]"#),
            wrong_type("flights", "an array of objects"),
        ),
        (
            "status flight without joiners",
            status_with(r#"[{"key":"k","token":"4294967297"}]"#),
            missing("joiners"),
        ),
        (
            "status joiners negative",
            status_with(r#"[{"key":"k","token":"4294967297","joiners":-1}]"#),
            wrong_type("joiners", "a non-negative integer"),
        ),
        (
            "status joiners a float",
            status_with(r#"[{"key":"k","token":"4294967297","joiners":1.5}]"#),
            wrong_type("joiners", "a non-negative integer"),
        ),
        (
            "status joiners a string",
            status_with(r#"[{"key":"k","token":"4294967297","joiners":"3"}]"#),
            wrong_type("joiners", "a non-negative integer"),
        ),
        (
            "status flight with an empty key",
            status_with(r#"[{"key":"","token":"4294967297","joiners":0}]"#),
            Expected::Error(DecodeError::Empty { field: "key" }),
        ),
        (
            "status flight with a bad token",
            status_with(r#"[{"key":"k","token":"abc","joiners":0}]"#),
            bad_token("token", TokenError::NotDecimal),
        ),
        (
            "status waiting negative",
            br#"{"op":"status","id":"9","flights":[],"waiting":-1}"#.to_vec(),
            wrong_type("waiting", "a non-negative integer"),
        ),
        (
            "status waiting null",
            br#"{"op":"status","id":"9","flights":[],"waiting":null}"#.to_vec(),
            wrong_type("waiting", "a non-negative integer"),
        ),
        (
            "status stats an array",
            br#"{"op":"status","id":"9","flights":[],"stats":[]}"#.to_vec(),
            wrong_type("stats", "an object"),
        ),
        (
            "status stats null",
            br#"{"op":"status","id":"9","flights":[],"stats":null}"#.to_vec(),
            wrong_type("stats", "an object"),
        ),
        (
            "status stats without a counter",
            stats_without("rejoins"),
            missing("rejoins"),
        ),
        (
            "status stats with a negative counter",
            stats_with("joins", "-1"),
            wrong_type("joins", "a non-negative integer"),
        ),
        (
            "status stats with a counter past 64 bits",
            stats_with("flights_led", "18446744073709551616"),
            wrong_type("flights_led", "a non-negative integer"),
        ),
        (
            "status stats with a fraction",
            stats_with("connections_open", "1.0"),
            wrong_type("connections_open", "a non-negative integer"),
        ),
        (
            "status stats with a counter as text",
            stats_with("connections_refused", r#""7""#),
            wrong_type("connections_refused", "a non-negative integer"),
        ),
    ]
}

/// §3.7: every malformed request line decodes to the error that says what is
/// wrong with it.
#[test]
fn malformed_requests_are_typed_errors() {
    for (name, line, expected) in malformed_lines().iter().chain(&malformed_requests()) {
        assert_malformed(name, decode_request(line), expected);
    }
}

/// §3.7: the same for response lines.
#[test]
fn malformed_responses_are_typed_errors() {
    for (name, line, expected) in malformed_lines().iter().chain(&malformed_responses()) {
        assert_malformed(name, decode_response(line), expected);
    }
}

/// §3.7: every decode error's text names what is wrong.
#[test]
fn decode_errors_say_what_is_wrong() {
    let error = decode_request(br#"{"op":"run","id":"1","key":"k","flight":"01"}"#)
        .expect_err("a leading zero is not a token");
    let text = error.to_string();
    assert!(text.contains("\"flight\""), "{text}");
    assert!(text.contains("leading zeros"), "{text}");

    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let text = decode_request(format!(r#"{{"op":"run","id":"1","key":"{long_key}"}}"#).as_bytes())
        .expect_err("the key is over the limit")
        .to_string();
    assert!(text.contains("4097") && text.contains("4096"), "{text}");
}

// ---------------------------------------------------------------------------
// Handshake (SPEC.md §4.2).
// ---------------------------------------------------------------------------

/// §4.2: the client's hello, exactly as SPEC.md shows it.
#[test]
fn client_hello_line() {
    let line = r#"{"protocol":"single-flight","version":1}"#;
    assert_eq!(encode(&ClientHello::current()), line);
    assert_eq!(
        decode_client_hello(line.as_bytes()),
        Ok(ClientHello::current())
    );
}

/// §4.2: the coordinator's hello, exactly as SPEC.md shows it.
#[test]
fn coordinator_hello_line() {
    let hello = decode_coordinator_hello(
        br#"{"protocol":"single-flight","version":1,"epoch":"3","pid":4242}"#,
    )
    .expect("SPEC.md's example is a valid hello");
    assert_eq!(hello.version, PROTOCOL_VERSION);
    assert_eq!(hello.epoch, "3");
    assert_eq!(hello.pid, 4242);
    assert_eq!(
        encode(&hello),
        r#"{"protocol":"single-flight","version":1,"epoch":"3","pid":4242}"#
    );
}

/// §4.2: `version` is an integer from 0 to 2^32 − 1. Every such version but
/// ours is a `ProtocolVersionError` (the coordinator answers it with its
/// hello before it closes); a version outside that range, or not an integer,
/// makes the line no hello at all.
#[test]
fn hello_versions_are_32_bit_unsigned_integers() {
    let hello = |version: &str| {
        decode_client_hello(
            format!(r#"{{"protocol":"single-flight","version":{version}}}"#).as_bytes(),
        )
    };
    for theirs in [0, 2, u32::MAX] {
        assert_eq!(
            hello(&theirs.to_string()),
            Err(HandshakeError::Version(ProtocolVersionError {
                ours: PROTOCOL_VERSION,
                theirs,
            }))
        );
    }
    for version in ["4294967296", "-1", "1.0", "1e0", "-0", r#""1""#, "null"] {
        assert!(
            matches!(hello(version), Err(HandshakeError::NotAHello { .. })),
            "version {version}"
        );
    }
    assert_eq!(hello("1"), Ok(ClientHello::current()));
}

/// §4.2: another version is a `ProtocolVersionError` naming both versions;
/// another protocol, or no JSON at all, is not a hello.
#[test]
fn hello_mismatches() {
    assert_eq!(
        decode_coordinator_hello(
            br#"{"protocol":"single-flight","version":2,"epoch":"3","pid":1}"#
        ),
        Err(HandshakeError::Version(ProtocolVersionError {
            ours: PROTOCOL_VERSION,
            theirs: 2,
        }))
    );
    let text = decode_client_hello(br#"{"protocol":"single-flight","version":0}"#)
        .expect_err("version 0 is not ours")
        .to_string();
    assert!(
        text.contains("version 1") && text.contains("version 0"),
        "{text}"
    );
    for line in [
        &br#"{"protocol":"other","version":1}"#[..],
        br#"{"op":"run","id":"1","key":"k"}"#,
        b"",
        b"\xff",
    ] {
        assert!(
            matches!(
                decode_client_hello(line),
                Err(HandshakeError::NotAHello { .. })
            ),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

// ---------------------------------------------------------------------------
// Framing (SPEC.md §4.1).
// ---------------------------------------------------------------------------

/// §4.1, §5: a line of exactly `MAX_FRAME_BYTES` is accepted, one byte more
/// is refused, even when it arrives in pieces.
#[test]
fn frame_limit_is_exact() {
    let mut reader = LineReader::new(MAX_FRAME_BYTES);
    let line = vec![b'x'; MAX_FRAME_BYTES];
    for piece in line.chunks(64 * 1024) {
        reader.push(piece).expect("within the limit");
    }
    reader.push(b"\n").expect("a line of exactly the limit");
    assert_eq!(reader.next_line(), Some(line));
    assert_eq!(reader.next_line(), None);

    let mut reader = LineReader::new(MAX_FRAME_BYTES);
    reader
        .push(&vec![b'x'; MAX_FRAME_BYTES])
        .expect("a partial line of exactly the limit");
    assert_eq!(
        reader.push(b"x"),
        Err(FrameError::LineTooLong {
            max: MAX_FRAME_BYTES
        })
    );
    assert_eq!(
        reader.push(b"\n"),
        Err(FrameError::LineTooLong {
            max: MAX_FRAME_BYTES
        }),
        "a failed reader stays failed"
    );
}

/// §4.1: a message is complete only with its newline; an empty line comes
/// out as an empty line (which then decodes as malformed, §3.7).
#[test]
fn partial_and_empty_lines() {
    let mut reader = LineReader::new(64);
    reader
        .push(b"{\"op\":\"cancel\",\"id\":\"1\"}\n\n{\"op\"")
        .expect("within the limit");
    let first = reader.next_line().expect("a complete line");
    assert_eq!(
        decode_request(&first),
        Ok(Incoming::Request(Request::Cancel { id: id("1") }))
    );
    let empty = reader.next_line().expect("an empty line");
    assert!(matches!(
        decode_request(&empty),
        Err(DecodeError::NotJson { .. })
    ));
    assert_eq!(reader.next_line(), None);
    assert_eq!(reader.partial_len(), 5);
}

// ---------------------------------------------------------------------------
// Property tests.
// ---------------------------------------------------------------------------

/// Text of 1 to `max_bytes` bytes of any characters (control characters,
/// newlines, quotes, astral planes), cut at a character boundary so that it
/// stays within the limit. Half the time short, half the time long enough to
/// reach the limit.
fn bounded_text(max_bytes: usize) -> impl Strategy<Value = String> {
    let short = prop::collection::vec(any::<char>(), 1..=8);
    let long = prop::collection::vec(any::<char>(), 1..=max_bytes);
    prop_oneof![short, long].prop_map(move |chars| {
        let mut text = String::new();
        for c in chars {
            if text.len() + c.len_utf8() > max_bytes {
                break;
            }
            text.push(c);
        }
        text
    })
}

fn arbitrary_id() -> impl Strategy<Value = RequestId> {
    bounded_text(MAX_ID_BYTES).prop_map(|text| RequestId::new(text).expect("within the limit"))
}

fn arbitrary_key() -> impl Strategy<Value = Key> {
    bounded_text(MAX_KEY_BYTES).prop_map(|text| Key::new(text).expect("within the limit"))
}

fn arbitrary_token() -> impl Strategy<Value = FencingToken> {
    let max_epoch = u64::from(Epoch::MAX.get());
    let epoch = prop_oneof![Just(1), Just(max_epoch), 1..=max_epoch];
    let sequence = prop_oneof![Just(1), Just(u32::MAX), 1..=u32::MAX];
    (epoch, sequence).prop_map(|(epoch, sequence)| token(epoch, sequence))
}

fn arbitrary_outcome() -> impl Strategy<Value = Outcome> {
    let code = prop_oneof![
        any::<String>().prop_map(FailureCode::Text),
        any::<i64>().prop_map(FailureCode::Number),
    ];
    prop_oneof![
        any::<String>().prop_map(Outcome::Value),
        (any::<String>(), any::<String>(), prop::option::of(code)).prop_map(
            |(name, message, code)| Outcome::Failure(Failure {
                name,
                message,
                code
            })
        ),
    ]
}

fn arbitrary_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            arbitrary_id(),
            arbitrary_key(),
            prop::option::of(arbitrary_token()),
            prop::option::of(arbitrary_token()),
        )
            .prop_map(|(id, key, flight, parent)| Request::Run {
                id,
                key,
                flight,
                reuse: None,
                parent,
            }),
        (
            arbitrary_id(),
            arbitrary_key(),
            prop::option::of(arbitrary_token()),
            arbitrary_reuse(),
        )
            .prop_map(|(id, key, flight, reuse)| Request::Run {
                id,
                key,
                flight,
                reuse: Some(reuse),
                parent: None,
            }),
        (arbitrary_id(), arbitrary_outcome())
            .prop_map(|(id, outcome)| Request::Land { id, outcome }),
        arbitrary_id().prop_map(|id| Request::Cancel { id }),
        (
            arbitrary_id(),
            arbitrary_key(),
            arbitrary_token(),
            prop::option::of(arbitrary_outcome()),
            prop::option::of(arbitrary_token()),
        )
            .prop_map(|(id, key, token, outcome, parent)| Request::Reassert {
                id,
                key,
                token,
                outcome,
                parent,
            }),
        arbitrary_id().prop_map(|id| Request::Status { id }),
        arbitrary_id().prop_map(|id| Request::Detach { id }),
    ]
}

/// A reuse window at its edges or anywhere between (SPEC.md §16.1).
fn arbitrary_reuse() -> impl Strategy<Value = ReuseWindow> {
    let max = u64::from(MAX_REUSE_WINDOW_MS);
    prop_oneof![Just(1), Just(max), 1..=max]
        .prop_map(|millis| ReuseWindow::from_millis(millis).unwrap())
}

/// A `status` answer whose counters are those of [`some_stats`] but with
/// `name` holding `raw` (JSON text).
fn stats_with(name: &str, raw: &str) -> Vec<u8> {
    let stats = serde_json::to_value(some_stats()).unwrap();
    let mut members: Vec<String> = stats
        .as_object()
        .unwrap()
        .iter()
        .map(|(member, value)| format!("{member:?}:{value}"))
        .collect();
    for member in &mut members {
        if member.starts_with(&format!("{name:?}:")) {
            *member = format!("{name:?}:{raw}");
        }
    }
    format!(
        r#"{{"op":"status","id":"9","flights":[],"stats":{{{}}}}}"#,
        members.join(",")
    )
    .into_bytes()
}

/// A `status` answer whose counters lack `name`.
fn stats_without(name: &str) -> Vec<u8> {
    let mut stats = serde_json::to_value(some_stats()).unwrap();
    stats.as_object_mut().unwrap().remove(name);
    format!(r#"{{"op":"status","id":"9","flights":[],"stats":{stats}}}"#).into_bytes()
}

fn arbitrary_stats() -> impl Strategy<Value = CoordinatorStats> {
    prop::array::uniform11(any::<u64>()).prop_map(|counts| CoordinatorStats {
        flights_led: counts[0],
        joins: counts[1],
        lands_value: counts[2],
        lands_failure: counts[3],
        interruptions: counts[4],
        reasserts_accepted: counts[5],
        reasserts_rejected: counts[6],
        rejoins: counts[7],
        grace_windows: counts[8],
        connections_open: counts[9],
        connections_refused: counts[10],
    })
}

fn arbitrary_response() -> impl Strategy<Value = Response> {
    let flight = (
        arbitrary_key(),
        arbitrary_token(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(key, token, joiners, detached)| FlightStatus {
            key,
            token,
            joiners,
            detached,
        });
    prop_oneof![
        (arbitrary_id(), arbitrary_token()).prop_map(|(id, token)| Response::Lead { id, token }),
        (arbitrary_id(), arbitrary_token())
            .prop_map(|(id, flight)| Response::Joined { id, flight }),
        (arbitrary_id(), arbitrary_outcome()).prop_map(|(id, outcome)| Response::Landed {
            id,
            outcome: Arc::new(outcome)
        }),
        arbitrary_id().prop_map(|id| Response::Interrupted { id }),
        arbitrary_id().prop_map(|id| Response::Ack { id }),
        arbitrary_id().prop_map(|id| Response::Rejected { id }),
        arbitrary_id().prop_map(|id| Response::Unsupported { id }),
        arbitrary_id().prop_map(|id| Response::Stop { id }),
        (arbitrary_id(), arbitrary_token(), arbitrary_outcome()).prop_map(
            |(id, flight, outcome)| Response::Reused {
                id,
                flight,
                outcome: Box::new(outcome)
            }
        ),
        (arbitrary_id(), prop::collection::vec(arbitrary_key(), 1..4))
            .prop_map(|(id, keys)| Response::Cycle { id, keys }),
        (
            arbitrary_id(),
            prop::collection::vec(flight, 0..4),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
            prop::option::of(arbitrary_stats().prop_map(Box::new)),
        )
            .prop_map(|(id, flights, waiting, omitted, stats)| Response::Status {
                id,
                flights,
                waiting,
                omitted,
                stats,
                hosts: None,
                relay: None,
            }),
    ]
}

/// A valid message line with a few bytes overwritten, inserted or removed:
/// inputs that get past the JSON parser far more often than random bytes.
fn mutated(line: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<prop::sample::Index>(), any::<u8>(), 0..3u8);
    (line, prop::collection::vec(edit, 1..4)).prop_map(|(line, edits)| {
        let mut bytes = line.into_bytes();
        for (at, byte, kind) in edits {
            let position = at.index(bytes.len() + 1);
            match kind {
                0 if position < bytes.len() => bytes[position] = byte,
                1 => bytes.insert(position, byte),
                _ if position < bytes.len() => {
                    bytes.remove(position);
                }
                _ => {}
            }
        }
        bytes
    })
}

/// Bytes of the JSON vocabulary of our messages, so that random lines are
/// often JSON and sometimes nearly messages.
fn json_ish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let words = prop::sample::select(vec![
        &b"{"[..],
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"",
        b"\\",
        b"\"op\":",
        b"\"id\":",
        b"\"key\":",
        b"\"flight\":",
        b"\"token\":",
        b"\"outcome\":",
        b"\"value\":",
        b"\"failure\":",
        b"\"name\":",
        b"\"message\":",
        b"\"code\":",
        b"\"flights\":",
        b"\"joiners\":",
        b"\"run\"",
        b"\"land\"",
        b"\"lead\"",
        b"\"status\"",
        b"\"4294967297\"",
        b"\"1\"",
        b"1",
        b"-1",
        b"1.5",
        b"null",
        b"true",
        b"\\u0000",
        b"\\ud800",
        b"\xff",
        b"\n",
    ]);
    prop::collection::vec(words, 0..40).prop_map(|words| words.concat())
}

/// Bytes for the framer: plenty of newlines, so that many short lines, empty
/// lines and lines just over a small limit all occur.
fn framed_bytes() -> impl Strategy<Value = Vec<u8>> {
    let newline_heavy =
        prop::collection::vec(prop_oneof![3 => Just(b'\n'), 7 => any::<u8>()], 0..512);
    let lines = prop::collection::vec(
        (0..40usize, any::<u8>()).prop_map(|(len, byte)| {
            let mut line = vec![byte.max(b' '); len];
            line.push(b'\n');
            line
        }),
        0..32,
    )
    .prop_map(|lines| lines.concat());
    let few_newlines = prop::collection::vec(any::<u8>(), 0..2048);
    prop_oneof![newline_heavy, lines, few_newlines]
}

fn frame_limit() -> impl Strategy<Value = usize> {
    prop_oneof![
        0..8usize,
        0..64usize,
        0..4096usize,
        Just(MAX_FRAME_BYTES),
        any::<usize>()
    ]
}

proptest! {
    /// §3.2: every request survives encoding and decoding, and its line holds
    /// no raw newline (§4.1).
    #[test]
    fn requests_round_trip(request in arbitrary_request()) {
        let line = encode(&request);
        prop_assert!(!line.contains('\n'));
        prop_assert_eq!(decode_request(line.as_bytes()), Ok(Incoming::Request(request)));
    }

    /// §3.4: an outcome's length is counted exactly as `encode` writes it,
    /// escapes included.
    #[test]
    fn outcome_lengths_are_counted_as_encoded(outcome in arbitrary_outcome()) {
        prop_assert_eq!(outcome.encoded_len(), encode(&outcome).len());
    }

    /// §3.3: every response survives encoding and decoding, and its line holds
    /// no raw newline (§4.1).
    #[test]
    fn responses_round_trip(response in arbitrary_response()) {
        let line = encode(&response);
        prop_assert!(!line.contains('\n'));
        prop_assert_eq!(decode_response(line.as_bytes()), Ok(response));
    }

    /// §3.3: the line encoder writes every response byte for byte as
    /// `encode` does, with its newline, also when it writes a landed
    /// outcome it wrote before for another joiner.
    #[test]
    fn line_encoder_writes_what_encode_writes(
        responses in prop::collection::vec(
            prop_oneof![
                arbitrary_response(),
                (arbitrary_id(), arbitrary_outcome())
                    .prop_map(|(id, outcome)| Response::Landed { id, outcome: Arc::new(outcome) }),
            ],
            1..8,
        ),
        repeats in prop::collection::vec(arbitrary_id(), 0..4),
    ) {
        let mut encoder = LineEncoder::default();
        let mut all = responses.clone();
        // The joiners of the last flight that landed, if one did: its
        // outcome shared, as the coordinator sends it, or an equal copy.
        if let Some(Response::Landed { outcome, .. }) = responses.last() {
            all.extend(repeats.into_iter().enumerate().map(|(n, id)| {
                let outcome = if n % 2 == 0 { outcome.clone() } else { Arc::new(Outcome::clone(outcome)) };
                Response::Landed { id, outcome }
            }));
        }
        for response in &all {
            let mut expected = encode(response).into_bytes();
            expected.push(b'\n');
            prop_assert_eq!(encoder.line(response), expected);
        }
    }

    /// §6: a token's text parses back to the same token, and tokens are
    /// ordered by epoch first, then by sequence, like the numbers they are.
    #[test]
    fn tokens_round_trip(a in arbitrary_token(), b in arbitrary_token()) {
        prop_assert_eq!(a.to_string().parse::<FencingToken>(), Ok(a));
        prop_assert_eq!(a.cmp(&b), a.get().cmp(&b.get()));
        prop_assert_eq!(a.cmp(&b), (a.epoch(), a.sequence()).cmp(&(b.epoch(), b.sequence())));
    }

    /// §3.7: no bytes panic a decoder, and whatever decodes encodes back to
    /// the same message (the checks of `single_flight_core::fuzzing`).
    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            json_ish_bytes(),
            mutated(arbitrary_request().prop_map(|request| encode(&request))),
            mutated(arbitrary_response().prop_map(|response| encode(&response))),
        ]
    ) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
        let _ = decode_client_hello(&bytes);
        let _ = decode_coordinator_hello(&bytes);
        fuzzing::request(&bytes);
        fuzzing::response(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// §4.1: whatever the bytes, the chunk boundaries and the limit, the
    /// framer yields exactly the lines of the stream, or fails exactly when
    /// a line is over the limit (`fuzzing::framer` asserts both).
    #[test]
    fn framer_keeps_its_invariants(
        bytes in framed_bytes(),
        cuts in prop::collection::vec(any::<u16>(), 0..64),
        max in frame_limit(),
    ) {
        fuzzing::framer(&bytes, &cuts, max);
    }
}

/// The fuzz targets' seeds at the edges of §5's limits (fuzz/seeds/) are on
/// the side of the edge their names say: a seed named `…at-limit…`,
/// `…longest…` or `…i64-max`/`…i64-min`/`…u32-max` decodes, one named
/// `…over…`, `…above…` or `…negative-zero` does not; a hello seed is judged
/// as a hello (of any version).
#[test]
fn fuzz_seeds_sit_on_the_side_of_the_edge_they_name() {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    // The seeds are the repository's: a package of the core alone (as the
    // registry has it) has no fuzz targets beside it, and nothing to check.
    // In the repository a missing seeds folder fails below.
    if !fuzz.is_dir() {
        eprintln!("no fuzz/ beside the core: not in the repository, nothing to check");
        return;
    }
    let seeds = fuzz.join("seeds");
    let mut checked = 0;
    for target in ["request_decode", "response_decode"] {
        for entry in std::fs::read_dir(seeds.join(target)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let line = std::fs::read(&path).unwrap();
            // A hello of another version is still a hello (§4.2).
            let is_hello = |result: Result<(), HandshakeError>| {
                !matches!(result, Err(HandshakeError::NotAHello { .. }))
            };
            let decodes = match (target, name.contains("hello")) {
                ("request_decode", true) => is_hello(decode_client_hello(&line).map(|_| ())),
                (_, true) => is_hello(decode_coordinator_hello(&line).map(|_| ())),
                ("request_decode", false) => decode_request(&line).is_ok(),
                _ => decode_response(&line).is_ok(),
            };
            let refused = ["over", "above", "negative-zero"];
            let accepted = ["at-limit", "longest", "i64-max", "i64-min", "u32-max"];
            if refused.iter().any(|word| name.contains(word)) {
                assert!(!decodes, "{target}/{name} should not decode");
                checked += 1;
            } else if accepted.iter().any(|word| name.contains(word)) {
                assert!(decodes, "{target}/{name} should decode");
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} edge seeds");
}

/// §3.3: a `reason` is 1 to `MAX_REASON_BYTES` bytes, so any error message
/// is made one: cut back to the last character that ends within the bound,
/// never into one, and a placeholder for none.
#[test]
fn s3_3_any_text_is_a_reason() {
    let short = "etcd refused \"ci\"";
    assert_eq!(Reason::lossy(short).as_str(), short);
    // A two-byte character across the bound is left out whole.
    let across = format!("{}é and more", "a".repeat(MAX_REASON_BYTES - 1));
    assert_eq!(
        Reason::lossy(&across).as_str(),
        "a".repeat(MAX_REASON_BYTES - 1)
    );
    let within = format!("{}é", "a".repeat(MAX_REASON_BYTES - 2));
    assert_eq!(Reason::lossy(&within).as_str(), within);
    assert_eq!(Reason::lossy("").as_str(), "no reason was given");
}

/// §3.4: a leader's failure as a caller's error shows its name, message
/// and code.
#[test]
fn s3_4_a_failure_shows_its_name_message_and_code() {
    let failure = |code| Failure {
        name: "IoError".into(),
        message: "disk full".into(),
        code,
    };
    assert_eq!(failure(None).to_string(), "IoError: disk full");
    assert_eq!(
        failure(Some(FailureCode::Text("ENOSPC".into()))).to_string(),
        "IoError: disk full (ENOSPC)"
    );
    assert_eq!(
        failure(Some(FailureCode::Number(28))).to_string(),
        "IoError: disk full (code 28)"
    );
}

/// §16.1: a reuse window from a duration is rounded up to a whole
/// millisecond, within 1 to `MAX_REUSE_WINDOW_MS`, and is on the wire in
/// milliseconds.
#[test]
fn s16_1_a_reuse_window_from_a_duration() {
    use std::time::Duration;
    let millis = |duration| ReuseWindow::from_duration(duration).map(ReuseWindow::as_millis);
    assert_eq!(millis(Duration::from_millis(250)), Some(250));
    assert_eq!(millis(Duration::from_nanos(1)), Some(1));
    assert_eq!(millis(Duration::from_micros(1_500)), Some(2));
    let longest = Duration::from_millis(u64::from(MAX_REUSE_WINDOW_MS));
    assert_eq!(millis(longest), Some(MAX_REUSE_WINDOW_MS));
    assert_eq!(millis(Duration::ZERO), None);
    assert_eq!(millis(longest + Duration::from_nanos(1)), None);
    assert_eq!(millis(Duration::MAX), None);
    let window = ReuseWindow::from_millis(250).unwrap();
    assert_eq!(window.as_duration(), Duration::from_millis(250));
}

/// §3.5: the dedupe ratio is joins ÷ the runs answered `lead` or `joined`,
/// none before the first.
#[test]
fn s3_5_the_dedupe_ratio_is_joins_over_answered_runs() {
    let stats = |flights_led, joins| CoordinatorStats {
        flights_led,
        joins,
        ..CoordinatorStats::default()
    };
    assert_eq!(stats(0, 0).dedupe_ratio(), None);
    assert_eq!(stats(1, 3).dedupe_ratio(), Some(0.75));
    assert_eq!(stats(2, 0).dedupe_ratio(), Some(0.0));
    assert_eq!(
        stats(u64::MAX, 1).dedupe_ratio(),
        Some(1.0 / u64::MAX as f64)
    );
}

/// §17.1: a `cycle` answer names 1 or more keys; none is no answer.
#[test]
fn s17_1_a_cycle_names_at_least_one_key() {
    assert_eq!(
        decode_response(br#"{"op":"cycle","id":"1","keys":[]}"#),
        Err(DecodeError::Empty { field: "keys" })
    );
    assert_eq!(
        decode_response(br#"{"op":"cycle","id":"1","keys":["a"]}"#),
        Ok(Response::Cycle {
            id: RequestId::new("1").unwrap(),
            keys: vec![Key::new("a").unwrap()],
        })
    );
}

/// §19.1, §19.6: shards and shard counts as an operator reads them, and
/// a count out of range named with its bounds.
#[test]
fn s19_shards_show_as_an_operator_reads_them() {
    let count = ShardCount::new(4).unwrap();
    assert_eq!(count.to_string(), "4");
    let shards: Vec<String> = count
        .shards()
        .map(|shard: Shard| shard.to_string())
        .collect();
    assert_eq!(
        shards,
        [
            "shard 0 of 4",
            "shard 1 of 4",
            "shard 2 of 4",
            "shard 3 of 4"
        ]
    );
    assert_eq!(
        ShardCount::new(0).unwrap_err(),
        ShardCountError(0),
        "no cluster has no shard"
    );
    assert_eq!(
        ShardCountError(0).to_string(),
        format!("0 shards: a cluster has 1 to {MAX_SHARDS} shards (SPEC.md §19.1)")
    );
}

/// §6: the term after one is the next number, up to `Epoch::MAX`; a token
/// is debugged as its epoch and sequence.
#[test]
fn s6_the_next_term_and_a_tokens_debug_form() {
    assert_eq!(Epoch::new(7).unwrap().next(), Epoch::new(8));
    assert_eq!(Epoch::MAX.next(), None);
    let token = FencingToken::new(Epoch::new(7).unwrap(), 3).unwrap();
    assert_eq!(format!("{token:?}"), "FencingToken(7:3)");
}
