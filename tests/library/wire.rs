//! The protocol as a client written from SPEC.md alone meets it: raw lines on
//! the Unix socket of a real `single-flight serve` process (SPEC.md §3–§6,
//! §8.5), with each limit tested on both sides of its edge. Every test starts
//! its own coordinator on a directory of its own, in its first term (no grace
//! window).
//!
//! No test asserts on time: every read waits for a line or for the end of
//! the stream, and gives up after a generous bound.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use single_flight_core::protocol::limits::{MAX_FRAME_BYTES, MAX_ID_BYTES, MAX_OP_BYTES};
use single_flight_core::protocol::limits::{MAX_NESTING_DEPTH, MAX_OUTCOME_BYTES};
use single_flight_core::protocol::{Outcome, Response, decode_response, encode};

use crate::support::{BINARY, PATIENCE, child};

const CLIENT_HELLO: &[u8] = br#"{"protocol":"single-flight","version":1}"#;

// ---------------------------------------------------------------- harness

/// A `single-flight serve` on a directory of its own, stopped with SIGTERM
/// when dropped.
struct Server {
    root: PathBuf,
    dir: PathBuf,
    child: Child,
}

impl Server {
    fn start(name: &str) -> Server {
        let root = std::env::temp_dir().join(format!("sf-wire-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let dir = root.join("flights");
        let child = Command::new(BINARY)
            .args(["serve", "--dir"])
            .arg(&dir)
            .env_remove("SINGLE_FLIGHT_GRACE_MS")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(root.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let server = Server { root, dir, child };
        let start = Instant::now();
        while UnixStream::connect(server.dir.join("flight.sock")).is_err() {
            assert!(start.elapsed() < PATIENCE, "serve did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// A connection that has sent `hello` as its first line.
    fn raw(&self, hello: &[u8]) -> Peer {
        let stream = UnixStream::connect(self.dir.join("flight.sock")).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut peer = Peer {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        };
        peer.send(hello);
        peer
    }

    /// A connection past its handshake (§4.2).
    fn connect(&self) -> Peer {
        let mut peer = self.raw(CLIENT_HELLO);
        let hello = peer.line().expect("the coordinator's hello");
        assert!(hello.starts_with(br#"{"protocol":"single-flight","version":1,"#));
        peer
    }

    /// Sends `line` on a new connection and expects the coordinator to close
    /// it without an answer (§3.7).
    fn assert_closes(&self, line: &[u8]) {
        let mut peer = self.connect();
        peer.send(line);
        peer.assert_closed(line);
    }

    /// Runs `single-flight run --key KEY -- sh -c SCRIPT` on this directory.
    fn run(&self, key: &str, script: &str) -> Child {
        Command::new(BINARY)
            .args(["run", "--key", key, "--dir"])
            .arg(&self.dir)
            .args(["--", "sh", "-c", script])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The number of joiners of the flight of `key`, by `status` (§3.5).
    fn joiners(&self, key: &str) -> Option<u64> {
        let mut peer = self.connect();
        peer.send(br#"{"op":"status","id":"s"}"#);
        let Response::Status { flights, .. } = peer.response() else {
            panic!("a status answer");
        };
        flights
            .iter()
            .find(|flight| flight.key.as_str() == key)
            .map(|flight| flight.joiners)
    }

    fn until_joiners(&self, key: &str, joiners: u64) {
        let start = Instant::now();
        while self.joiners(key) != Some(joiners) {
            assert!(start.elapsed() < PATIENCE, "{joiners} joiners of {key}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, Signal::TERM);
        }
        // Killed when it has not stopped within the bound.
        let _ = child::wait(&mut self.child);
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// One connection, as raw lines.
struct Peer {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Peer {
    fn send(&mut self, line: &[u8]) {
        let mut framed = line.to_vec();
        framed.push(b'\n');
        self.writer.write_all(&framed).unwrap();
    }

    /// The next line without its newline; `None` when the coordinator closed
    /// the connection.
    fn line(&mut self) -> Option<Vec<u8>> {
        let mut line = Vec::new();
        let read = self.reader.read_until(b'\n', &mut line).unwrap();
        if read == 0 {
            return None;
        }
        assert_eq!(line.pop(), Some(b'\n'), "a line ends with its newline");
        Some(line)
    }

    /// The next line, which must be a response within the frame limit.
    fn response(&mut self) -> Response {
        let line = self.line().expect("a response, not the end of the stream");
        assert!(
            line.len() <= MAX_FRAME_BYTES,
            "a line of {} bytes",
            line.len()
        );
        decode_response(&line).expect("a valid response")
    }

    fn assert_closed(&mut self, after: &[u8]) {
        let shown = String::from_utf8_lossy(&after[..after.len().min(200)]).into_owned();
        assert_eq!(self.line(), None, "the connection closes after {shown}");
    }
}

/// A `run` line.
fn run(id: &str, key: &str) -> Vec<u8> {
    format!(r#"{{"op":"run","id":{},"key":"{key}"}}"#, encode(&id)).into_bytes()
}

/// A `land` line.
fn land(id: &str, outcome: &Outcome) -> Vec<u8> {
    format!(
        r#"{{"op":"land","id":{},"outcome":{}}}"#,
        encode(&id),
        encode(outcome)
    )
    .into_bytes()
}

/// The longest id there is on the wire: `MAX_ID_BYTES` control characters,
/// each written as `\u0001`, ending in `last`.
fn longest_id(last: char) -> String {
    let mut id = "\u{1}".repeat(MAX_ID_BYTES - 1);
    id.push(last);
    id
}

/// A value whose outcome is exactly `len` bytes of JSON.
fn value_of_len(len: usize) -> Outcome {
    Outcome::Value("v".repeat(len - r#"{"value":""}"#.len()))
}

/// Leads a flight of `key` on `leader` and has each of `joiners` join it.
fn fly(leader: &mut Peer, key: &str, joiners: &mut [(&mut Peer, &str)]) {
    leader.send(&run("L", key));
    assert!(matches!(leader.response(), Response::Lead { .. }));
    for (joiner, id) in joiners {
        joiner.send(&run(id, key));
        assert!(matches!(joiner.response(), Response::Joined { .. }));
    }
}

// ---------------------------------------------------------------- §3.4, §8.5

/// §3.4, §8.5: an outcome of exactly `MAX_OUTCOME_BYTES` reaches joiners
/// whose ids are the longest there are, in lines within the frame, and the
/// leader gets `ack`; one byte more, or a `land` of a whole frame, and the
/// joiners get the `ValueTooLarge` failure, the leader `rejected`, and every
/// connection stays open.
#[test]
fn an_outcome_over_the_limit_reaches_the_joiners_as_a_failure() {
    let server = Server::start("outcome-limit");
    let (mut leader, mut first, mut second) =
        (server.connect(), server.connect(), server.connect());
    let (id_1, id_2) = (longest_id('1'), longest_id('2'));

    fly(
        &mut leader,
        "k",
        &mut [(&mut first, &id_1), (&mut second, &id_2)],
    );
    let at_limit = value_of_len(MAX_OUTCOME_BYTES);
    leader.send(&land("L", &at_limit));
    for (joiner, id) in [(&mut first, &id_1), (&mut second, &id_2)] {
        let landed = joiner.response();
        assert_eq!(
            landed,
            Response::Landed {
                id: single_flight_core::protocol::RequestId::new(id.as_str()).unwrap(),
                outcome: std::sync::Arc::new(at_limit.clone())
            }
        );
    }
    assert!(matches!(leader.response(), Response::Ack { .. }));

    let whole_frame = {
        let envelope = land("L", &value_of_len(20)).len() - 20;
        value_of_len(MAX_FRAME_BYTES - envelope)
    };
    assert_eq!(land("L", &whole_frame).len(), MAX_FRAME_BYTES);
    for too_large in [value_of_len(MAX_OUTCOME_BYTES + 1), whole_frame] {
        fly(
            &mut leader,
            "k",
            &mut [(&mut first, &id_1), (&mut second, &id_2)],
        );
        leader.send(&land("L", &too_large));
        for joiner in [&mut first, &mut second] {
            let Response::Landed { outcome, .. } = joiner.response() else {
                panic!("the joiner gets a failure");
            };
            let Outcome::Failure(failure) = std::sync::Arc::unwrap_or_clone(outcome) else {
                panic!("the joiner gets a failure");
            };
            assert_eq!(failure.name, "ValueTooLarge");
            assert!(
                failure
                    .message
                    .contains(&too_large.encoded_len().to_string()),
                "{failure:?}"
            );
        }
        assert!(matches!(leader.response(), Response::Rejected { .. }));
    }
}

/// A value of `single-flight run`'s format (§13.2) that prints "hi" and exits
/// 0, padded with white space so that its outcome is `len` bytes of JSON.
fn command_value_of_len(len: usize) -> Outcome {
    let text = |padding: usize| {
        format!(
            r#"{{"format":1,"exit":{{"code":0}},"output":"AQAAAANoaQo="{}}}"#,
            " ".repeat(padding)
        )
    };
    let unpadded = Outcome::Value(text(0)).encoded_len();
    Outcome::Value(text(len - unpadded))
}

/// §3.4, §13.3: a `single-flight run` joiner of a flight whose leader lands
/// an outcome of exactly `MAX_OUTCOME_BYTES` prints the output and exits 0;
/// one byte more and it says why and exits 125, rather than being
/// interrupted (75) while its leader is told the outcome was handed over.
#[test]
fn a_command_joiner_gets_an_outcome_at_the_limit_and_a_failure_past_it() {
    let server = Server::start("command-joiner");
    let mut leader = server.connect();
    for (len, code) in [(MAX_OUTCOME_BYTES, 0), (MAX_OUTCOME_BYTES + 1, 125)] {
        fly(&mut leader, "cmd", &mut []);
        let joiner = server.run("cmd", "echo the leader is elsewhere");
        server.until_joiners("cmd", 1);
        leader.send(&land("L", &command_value_of_len(len)));
        let answer = leader.response();
        let ended = wait_bounded(joiner);
        let stderr = String::from_utf8_lossy(&ended.stderr);
        assert_eq!(ended.status.code(), Some(code), "{stderr}");
        if code == 0 {
            assert!(matches!(answer, Response::Ack { .. }), "{answer:?}");
            assert_eq!(ended.stdout, b"hi\n");
        } else {
            assert!(matches!(answer, Response::Rejected { .. }), "{answer:?}");
            assert!(stderr.contains("ValueTooLarge"), "{stderr}");
        }
    }
}

fn wait_bounded(mut run: Child) -> std::process::Output {
    child::wait(&mut run).expect("a run ends in time");
    run.wait_with_output().unwrap()
}

/// §8.5: the joiners of one connection are answered by the bytes of their
/// ids, not in the order they joined.
#[test]
fn joiners_are_answered_in_connection_and_id_order() {
    let server = Server::start("order");
    let (mut leader, mut joiner) = (server.connect(), server.connect());
    leader.send(&run("L", "k"));
    assert!(matches!(leader.response(), Response::Lead { .. }));
    for id in ["10", "9", "2", "Z", "a", "é"] {
        joiner.send(&run(id, "k"));
        assert!(matches!(joiner.response(), Response::Joined { .. }));
    }
    leader.send(&land("L", &Outcome::Value("v".into())));
    let order: Vec<String> = (0..6)
        .map(|_| joiner.response().id().as_str().to_owned())
        .collect();
    assert_eq!(order, ["10", "2", "9", "Z", "a", "é"]);
}

// ---------------------------------------------------------------- §3.7, §5

/// A `status` request nested `depth` levels deep in arrays or objects, the
/// message object being the first level.
fn nested(depth: usize, objects: bool) -> Vec<u8> {
    let inner = depth - 1;
    let (open, close) = if objects {
        (r#"{"x":"#.repeat(inner), format!("1{}", "}".repeat(inner)))
    } else {
        ("[".repeat(inner), "]".repeat(inner))
    };
    format!(r#"{{"op":"status","id":"d","x":{open}{close}}}"#).into_bytes()
}

/// §3.7: a line nested `MAX_NESTING_DEPTH` levels deep is answered; one
/// level deeper closes the connection. Arrays and objects alike.
#[test]
fn nesting_is_refused_one_level_past_the_limit() {
    let server = Server::start("nesting");
    for objects in [false, true] {
        let mut peer = server.connect();
        peer.send(&nested(MAX_NESTING_DEPTH, objects));
        assert!(matches!(peer.response(), Response::Status { .. }));
        server.assert_closes(&nested(MAX_NESTING_DEPTH + 1, objects));
    }
}

/// §3.6, §5: an unknown `op` of `MAX_OP_BYTES` is answered `unsupported` and
/// the connection stays open; one byte more closes it.
#[test]
fn an_unknown_op_is_answered_up_to_the_limit() {
    let server = Server::start("op");
    let mut peer = server.connect();
    let op = |len: usize| format!(r#"{{"op":"{}","id":"1"}}"#, "o".repeat(len)).into_bytes();
    peer.send(&op(MAX_OP_BYTES));
    assert!(matches!(peer.response(), Response::Unsupported { .. }));
    peer.send(br#"{"op":"status","id":"2"}"#);
    assert!(matches!(peer.response(), Response::Status { .. }));
    server.assert_closes(&op(MAX_OP_BYTES + 1));
}

/// §3.4: a failure's integer `code` covers the signed 64-bit range; `-0`,
/// `5.0`, `1e3` and numbers past the range are not integers and close the
/// connection. (A `land` of no flight is answered `rejected` once it
/// decodes.)
#[test]
fn failure_codes_are_integers_without_fraction_or_exponent() {
    let server = Server::start("codes");
    let land = |code: &str| {
        format!(r#"{{"op":"land","id":"1","outcome":{{"failure":{{"name":"E","message":"m","code":{code}}}}}}}"#)
            .into_bytes()
    };
    let mut peer = server.connect();
    for code in ["-9223372036854775808", "9223372036854775807", "0", "-1"] {
        peer.send(&land(code));
        assert!(
            matches!(peer.response(), Response::Rejected { .. }),
            "{code}"
        );
    }
    for code in [
        "-0",
        "5.0",
        "1e3",
        "9223372036854775808",
        "-9223372036854775809",
    ] {
        server.assert_closes(&land(code));
    }
}

/// §6: a token of 19 digits is a token up to `i64::MAX` (a rejoin of a
/// flight not in progress is answered `interrupted`); above it the line is
/// malformed and the connection closes.
#[test]
fn tokens_above_i64_max_are_refused() {
    let server = Server::start("tokens");
    let rejoin = |flight: &str| {
        format!(r#"{{"op":"run","id":"1","key":"k","flight":"{flight}"}}"#).into_bytes()
    };
    let mut peer = server.connect();
    peer.send(&rejoin("9223372036854775807"));
    assert!(matches!(peer.response(), Response::Interrupted { .. }));
    server.assert_closes(&rejoin("9223372036854775808"));
}

// ---------------------------------------------------------------- §4.2

/// §4.2: a hello whose version is another integer from 0 to 2^32 − 1 gets
/// the coordinator's hello and then the end of the connection; a version
/// outside that range is no hello, and the connection ends without one.
#[test]
fn hello_versions_are_32_bit_unsigned_integers() {
    let server = Server::start("versions");
    let hello = |version: &str| {
        format!(r#"{{"protocol":"single-flight","version":{version}}}"#).into_bytes()
    };
    for version in ["0", "2", "4294967295"] {
        let line = hello(version);
        let mut peer = server.raw(&line);
        let answer = peer.line().expect("the coordinator's hello");
        assert!(answer.starts_with(br#"{"protocol":"single-flight","version":1,"#));
        peer.assert_closed(&line);
    }
    for version in ["4294967296", "-1"] {
        let line = hello(version);
        server.raw(&line).assert_closed(&line);
    }
}

/// §3.5, §13.5: with more flights than one answer can list, `status` lists
/// the first ones in key order, in a line within the frame, and counts the
/// others in `omitted`; `single-flight status` shows both, in text and in
/// JSON. With every flight listed there is no `omitted`.
#[test]
fn a_status_answer_counts_the_flights_that_do_not_fit() {
    let server = Server::start("status-limit");
    let mut leader = server.connect();
    // Each flight takes about 4 KiB of the answer: 2 100 of them are more
    // than 8 MiB.
    let key = |n: usize| format!("{n:05}{}", "k".repeat(4091));
    let total = 2100;
    let status = |peer: &mut Peer| {
        peer.send(br#"{"op":"status","id":"s"}"#);
        let Response::Status {
            flights, omitted, ..
        } = peer.response()
        else {
            panic!("a status answer");
        };
        (flights, omitted)
    };
    let mut peer = server.connect();
    for batch in (0..total).collect::<Vec<_>>().chunks(100) {
        for &n in batch {
            leader.send(&run(&n.to_string(), &key(n)));
        }
        for _ in batch {
            assert!(matches!(leader.response(), Response::Lead { .. }));
        }
        if batch[0] == 0 {
            assert_eq!(status(&mut peer).1, None, "100 flights fit");
        }
    }
    let (listed, omitted) = status(&mut peer);
    let omitted = omitted.expect("flights left out");
    assert_eq!(listed.len() as u64 + omitted, total as u64);
    let first: Vec<String> = (0..listed.len()).map(key).collect();
    let keys: Vec<String> = listed.iter().map(|f| f.key.to_string()).collect();
    assert!(keys == first, "the first flights in key order");

    let json = Command::new(BINARY)
        .args(["status", "--json", "--dir"])
        .arg(&server.dir)
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["omitted"], omitted);
    assert_eq!(report["flights"].as_array().unwrap().len(), listed.len());
    let text = Command::new(BINARY)
        .args(["status", "--dir"])
        .arg(&server.dir)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("{total} in progress")),
        "{}",
        &text[..200]
    );
    assert!(text.contains(&format!("and {omitted} more")));
}
