//! The messages of SPEC.md §3, as Rust types, and their JSON text.
//!
//! Decoding reads each line once into a small typed view (`Json` over the
//! `*Fields` structs below) that keeps only the members the protocol knows,
//! with their text borrowed from the line unless it holds escapes, and then
//! checks every field by hand, so that a malformed message from another
//! process gets a [`DecodeError`] that names the field and what is wrong with
//! it, never a panic. It builds no `serde_json::Value`: a map of owned strings
//! per message would make decoding the coordinator's hot spot (BENCHMARKS.md,
//! "Hot spots").
//!
//! The view has a visitor of its own rather than `#[derive(Deserialize)]`
//! because a line must decode to the same message or error as when it was
//! read into a `Value` (SPEC.md §3.7), and a derived struct reads differently:
//! it refuses a repeated member, where the last one wins; it skips unknown
//! members without counting their nesting or checking their numbers, where
//! 200 nested arrays or `1e400` are not JSON wherever they are; and it stops at
//! the first member of the wrong type, where a line that is not JSON says so
//! whatever its members.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};

use super::error::DecodeError;
use super::handshake::{HostId, MAX_HOST_BYTES, is_host_name, term_number};
use super::limits::{
    MAX_CYCLE_KEYS, MAX_ID_BYTES, MAX_KEY_BYTES, MAX_OP_BYTES, MAX_OUTCOME_BYTES, MAX_REASON_BYTES,
    MAX_REUSE_WINDOW_MS,
};
use super::token::{Epoch, FencingToken};

/// A flight key: the name of the work that runs once (SPEC.md §3.1).
/// Any UTF-8 text of 1 to [`MAX_KEY_BYTES`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<str>);

/// The id of one request on one connection (SPEC.md §3.1).
/// Any UTF-8 text of 1 to [`MAX_ID_BYTES`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(Arc<str>);

/// Why a host coordinator cannot reach the cluster, as an `unavailable`
/// answer carries it (SPEC.md §18.3). Any UTF-8 text of 1 to
/// [`MAX_REASON_BYTES`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reason(Arc<str>);

macro_rules! bounded_text {
    ($type:ident, $field:literal, $max:ident) => {
        impl $type {
            /// Checks the length limit (SPEC.md §5).
            pub fn new(text: impl Into<Arc<str>>) -> Result<$type, DecodeError> {
                let text = text.into();
                if text.is_empty() {
                    return Err(DecodeError::Empty { field: $field });
                }
                if text.len() > $max {
                    return Err(DecodeError::TooLong {
                        field: $field,
                        len: text.len(),
                        max: $max,
                    });
                }
                Ok($type(text))
            }

            /// The text, as it is on the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
    };
}

bounded_text!(Key, "key", MAX_KEY_BYTES);
bounded_text!(RequestId, "id", MAX_ID_BYTES);
bounded_text!(Reason, "reason", MAX_REASON_BYTES);

impl Reason {
    /// `text` as a reason: cut at the last character that ends within
    /// [`MAX_REASON_BYTES`], and a placeholder for empty text, so that any
    /// error message of this process can be sent.
    pub fn lossy(text: &str) -> Reason {
        let mut end = text.len().min(MAX_REASON_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = match &text[..end] {
            "" => "no reason was given",
            cut => cut,
        };
        Reason(Arc::from(text))
    }
}

/// A leader's error as text, because an error value cannot cross a process
/// boundary (SPEC.md §3.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Failure {
    /// The error's name, such as `Error` or [`VALUE_TOO_LARGE`].
    pub name: String,
    /// The error's message.
    pub message: String,
    /// The error's code, when it has one; absent on the wire otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<FailureCode>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)?;
        match &self.code {
            Some(FailureCode::Text(code)) => write!(f, " ({code})"),
            Some(FailureCode::Number(code)) => write!(f, " (code {code})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Failure {}

/// The `code` of a failure, as Node.js and POSIX errors have one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum FailureCode {
    /// A code that is text, such as `ENOSPC`.
    Text(String),
    /// A code that is an integer in the signed 64-bit range.
    Number(i64),
}

/// How a flight landed: the value as the codec encoded it, or the leader's
/// failure (SPEC.md §3.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Outcome {
    /// The work's value, as the caller's codec encoded it: `{"value": …}`.
    #[serde(rename = "value")]
    Value(String),
    /// The work's error: `{"failure": {…}}`.
    #[serde(rename = "failure")]
    Failure(Failure),
}

impl Outcome {
    /// The length of the JSON text [`encode`] writes for this outcome,
    /// counted without keeping the text (SPEC.md §3.4).
    pub fn encoded_len(&self) -> usize {
        encoded_len(self)
    }

    /// This outcome when it can be shared, that is when its JSON text is at
    /// most [`MAX_OUTCOME_BYTES`]; otherwise the `ValueTooLarge` failure that
    /// takes its place for every joiner (SPEC.md §3.4, §8.5), saying how large
    /// it was and what to do.
    pub fn shareable(self) -> Result<Outcome, Failure> {
        // Each byte of a string takes at most six on the wire (`\u0001`), so
        // a value this short fits without being counted. Most values are, and
        // counting a large one costs a good part of what encoding it does.
        const AROUND_A_VALUE: usize = r#"{"value":""}"#.len();
        if let Outcome::Value(text) = &self
            && text.len() <= (MAX_OUTCOME_BYTES - AROUND_A_VALUE) / 6
        {
            return Ok(self);
        }
        let len = self.encoded_len();
        if len <= MAX_OUTCOME_BYTES {
            return Ok(self);
        }
        let message = match self {
            Outcome::Value(_) => format!(
                "the leader's value is {len} bytes as JSON, more than the {MAX_OUTCOME_BYTES} bytes a flight can share; share the path of a file instead"
            ),
            Outcome::Failure(_) => format!(
                "the leader's error is {len} bytes as JSON, more than the {MAX_OUTCOME_BYTES} bytes a flight can share; write its details to a file and share the path of a file in a shorter message"
            ),
        };
        Err(Failure {
            name: VALUE_TOO_LARGE.to_owned(),
            message,
            code: None,
        })
    }
}

/// The name of the failure that replaces an outcome too large to share
/// (SPEC.md §3.4).
pub const VALUE_TOO_LARGE: &str = "ValueTooLarge";

/// How long a leader's value may be kept for later callers, in milliseconds
/// (SPEC.md §16.1): from 1 to [`MAX_REUSE_WINDOW_MS`]. On the wire, a JSON
/// integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ReuseWindow(std::num::NonZeroU32);

impl ReuseWindow {
    /// The window of `millis` milliseconds; `None` outside 1 to
    /// [`MAX_REUSE_WINDOW_MS`].
    pub const fn from_millis(millis: u64) -> Option<ReuseWindow> {
        if millis > MAX_REUSE_WINDOW_MS as u64 {
            return None;
        }
        // Non-zero, so that an `Option<ReuseWindow>` takes four bytes, not
        // eight. The cast is exact: the window is at most an hour.
        match std::num::NonZeroU32::new(millis as u32) {
            Some(millis) => Some(ReuseWindow(millis)),
            None => None,
        }
    }

    /// The window for `duration`, rounded up to a whole millisecond; `None`
    /// when it is zero or longer than [`MAX_REUSE_WINDOW_MS`].
    pub fn from_duration(duration: std::time::Duration) -> Option<ReuseWindow> {
        let millis = duration.as_nanos().div_ceil(1_000_000);
        ReuseWindow::from_millis(u64::try_from(millis).ok()?)
    }

    /// The window in milliseconds, as it is on the wire.
    pub const fn as_millis(self) -> u32 {
        self.0.get()
    }

    /// The window as a [`Duration`](std::time::Duration).
    pub fn as_duration(self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.0.get()))
    }
}

/// What a client asks of the coordinator (SPEC.md §3.2), in the order SPEC.md
/// lists them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Leads the flight of `key`, or joins the one in progress; with `flight`,
    /// a rejoin that never leads.
    Run {
        /// The request's id (§3.1).
        id: RequestId,
        /// The key of the flight to lead or join.
        key: Key,
        /// Only on a rejoin: the token of the flight to join again (§8.2).
        #[serde(skip_serializing_if = "Option::is_none")]
        flight: Option<FencingToken>,
        /// Extension (SPEC.md §16.1): the call takes a kept value of its key,
        /// and its own value, if it leads, is kept this long.
        #[serde(skip_serializing_if = "Option::is_none")]
        reuse: Option<ReuseWindow>,
        /// Extension (SPEC.md §17.1): the token of the flight whose work
        /// makes this call, which waits for it.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent: Option<FencingToken>,
    },
    /// The leader of `id` ends its flight with `outcome`.
    Land {
        /// The id of the `run` that leads the flight.
        id: RequestId,
        /// How the work ended.
        outcome: Outcome,
    },
    /// Withdraws a run, a joiner, or a leader (which interrupts its flight).
    Cancel {
        /// The id of the `run` to withdraw.
        id: RequestId,
    },
    /// A leader from an earlier term claims its flight again; with
    /// `outcome`, a leader whose work already finished hands the outcome to
    /// the flight's rejoiners without making the flight live again.
    Reassert {
        /// The request's id (§3.1): the party it opens when accepted.
        id: RequestId,
        /// The key of the flight claimed.
        key: Key,
        /// The token the flight was led under in the earlier term.
        token: FencingToken,
        /// Only from a leader whose work already finished: how it ended.
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
        /// Extension (SPEC.md §17.1): the token of the flight whose work
        /// made the call that leads this flight.
        #[serde(skip_serializing_if = "Option::is_none")]
        parent: Option<FencingToken>,
    },
    /// Asks for the coordinator's view of its flights (SPEC.md §3.5, an
    /// extension that older coordinators answer `unsupported`).
    Status {
        /// The request's id (§3.1).
        id: RequestId,
    },
    /// Extension (SPEC.md §15.1): the caller of the leading call `id` left;
    /// its work goes on while anyone waits for the flight.
    Detach {
        /// The id of the `run` that leads the flight.
        id: RequestId,
    },
}

/// What the coordinator answers (SPEC.md §3.3), in the order SPEC.md lists them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Response {
    /// The run leads a new flight: run the work under `token`.
    Lead {
        /// The id of the `run`.
        id: RequestId,
        /// The fresh token of the flight (§6).
        token: FencingToken,
    },
    /// The run joined the flight in progress; `landed` or `interrupted`
    /// follows.
    Joined {
        /// The id of the `run`.
        id: RequestId,
        /// The token of the flight joined.
        flight: FencingToken,
    },
    /// The joined flight landed with `outcome`. Final.
    Landed {
        /// The id of the `run`.
        id: RequestId,
        /// The outcome its leader landed, or the `ValueTooLarge` failure in
        /// its place (§3.4): one for all the flight's joiners, shared rather
        /// than copied for each.
        outcome: Arc<Outcome>,
    },
    /// The joined (or rejoining) flight ended without an outcome. Final.
    Interrupted {
        /// The id of the `run`.
        id: RequestId,
    },
    /// The `land` (or landed `reassert`) of `id` was accepted and its
    /// outcome handed to the joiners. Final.
    Ack {
        /// The id of the `land` or `reassert`.
        id: RequestId,
    },
    /// The `land` or `reassert` of `id` came too late, from a party that
    /// does not lead that flight, or with an outcome too large to share
    /// (§8.3, §8.5). Final.
    Rejected {
        /// The id of the `land` or `reassert`.
        id: RequestId,
    },
    /// The coordinator does not know the request's `op` (§3.6). Final.
    Unsupported {
        /// The id of the request.
        id: RequestId,
    },
    /// Extension (SPEC.md §15.1): nobody waits for the detached flight that
    /// `id` leads any more; stop its work. Final.
    Stop {
        /// The id of the `run` that leads the flight.
        id: RequestId,
    },
    /// Extension (SPEC.md §16.1): the run receives the value that the flight
    /// `flight` of its key landed within its reuse window. Final.
    Reused {
        /// The id of the `run`.
        id: RequestId,
        /// The token of the flight whose value is reused.
        flight: FencingToken,
        /// Boxed: inline, it would make every `Response` and every
        /// coordinator effect larger, for an answer most terms never send
        /// (BENCHMARKS.md, "Detached calls and the reuse window").
        outcome: Box<Outcome>,
    },
    /// Extension (SPEC.md §17.1): the run, made by the work of the flight
    /// its `parent` names, would wait for a flight that waits for that one:
    /// it is refused, at once and for good.
    Cycle {
        /// The id of the `run`.
        id: RequestId,
        /// The keys of the cycle, each waiting for the next and the last for
        /// the first: the parent's key, the run's own key, and those between
        /// (one key alone when a flight's work called its own key). At most
        /// [`MAX_CYCLE_KEYS`] of them.
        keys: Vec<Key>,
    },
    /// Extension (SPEC.md §18.3): a host coordinator could not reach the
    /// cluster for this `run` (the run waited for it, and was not sent),
    /// for `reason`. Final: the call ends as a direct process's ends when
    /// no coordinator can be had (§14.6).
    Unavailable {
        /// The id of the `run`.
        id: RequestId,
        /// The host coordinator's error, as it logged it.
        reason: Reason,
    },
    /// The answer to `status` (SPEC.md §3.5).
    Status {
        /// The id of the `status` request.
        id: RequestId,
        /// The flights in progress, in key order; during a grace window, the
        /// held ones.
        flights: Vec<FlightStatus>,
        /// Only while the grace window is open (§8.4): how many runs wait
        /// for it to end. Absent on the wire otherwise, and from
        /// coordinators older than the field.
        #[serde(skip_serializing_if = "Option::is_none")]
        waiting: Option<u64>,
        /// Only when the flights in progress do not all fit in one line
        /// (§3.5): how many were left out, after the last one listed.
        /// Absent on the wire otherwise, and from coordinators older than
        /// the field.
        #[serde(skip_serializing_if = "Option::is_none")]
        omitted: Option<u64>,
        /// The coordinator's counters of its term (§3.5, §8.11). Absent
        /// from coordinators older than the field. Boxed: inline, its 88
        /// bytes would make every `Response` and every coordinator effect
        /// that much larger, and the moves of effects in `step` measurably
        /// slower (BENCHMARKS.md, "Counting in the core").
        #[serde(skip_serializing_if = "Option::is_none")]
        stats: Option<Box<CoordinatorStats>>,
        /// Extension (SPEC.md §3.5, §18.2): the connections of a
        /// coordinator that keeps relay windows, by host. Absent from other
        /// coordinators and from those older than the field. Boxed, as
        /// `stats` is.
        #[serde(skip_serializing_if = "Option::is_none")]
        hosts: Option<Box<HostsStatus>>,
        /// Extension (SPEC.md §3.5, §18.3): only from a host coordinator,
        /// which adds its own view to the cluster's answer that it returns.
        #[serde(skip_serializing_if = "Option::is_none")]
        relay: Option<Box<RelayStatus>>,
    },
}

/// One flight in progress, as `status` reports it (SPEC.md §3.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct FlightStatus {
    /// The flight's key.
    pub key: Key,
    /// The flight's token.
    pub token: FencingToken,
    /// How many callers wait for this flight's outcome besides its leader.
    pub joiners: u64,
    /// Its leader's caller left, and it goes on for its joiners (SPEC.md
    /// §3.5, §15.2). On the wire only when true; absent from coordinators
    /// older than the field.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub detached: bool,
}

/// What a coordinator counted in its term, as `status` reports it (SPEC.md
/// §3.5, §8.11): what the pure core decided, the connections open, and the
/// connections its shell refused before they opened. Every count starts at 0
/// with the term; a new term starts again from 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct CoordinatorStats {
    /// Flights led: runs answered `lead`.
    pub flights_led: u64,
    /// Runs answered `joined` (plain runs and rejoins).
    pub joins: u64,
    /// Outcomes a leader handed over (a `land`, or a landed `reassert`)
    /// that were values.
    pub lands_value: u64,
    /// … that were failures, the `ValueTooLarge` failure that replaces an
    /// outcome too large to share included (§3.4).
    pub lands_failure: u64,
    /// Flights in progress that ended without an outcome (§8.6, §8.3).
    pub interruptions: u64,
    /// `reassert`s accepted, running or landed (§8.3).
    pub reasserts_accepted: u64,
    /// `reassert`s answered `rejected` without being accepted.
    pub reasserts_rejected: u64,
    /// Rejoins received: `run`s with a `flight` (§8.2).
    pub rejoins: u64,
    /// Grace windows the term opened: 1 after a failover, otherwise 0.
    pub grace_windows: u64,
    /// Connections open at the moment of the answer (a gauge).
    pub connections_open: u64,
    /// Connections closed before they opened: over `MAX_CONNECTIONS`, or
    /// refused at the transport's check or at the hello (§11.2, §11.3).
    pub connections_refused: u64,
}

impl CoordinatorStats {
    /// Joins ÷ the runs answered `lead` or `joined`: the share of those runs
    /// that did not run the work. `None` before the first.
    pub fn dedupe_ratio(&self) -> Option<f64> {
        ratio(self.joins, self.flights_led.saturating_add(self.joins))
    }
}

/// The connections of a cluster's coordinator that keeps relay windows, as
/// `status` reports them (SPEC.md §3.5, §18.2): how many are ordinary
/// (direct processes, `serve`, `status` itself) and, by host id, the relay
/// connections of host coordinators and the hosts whose relay window is
/// open.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct HostsStatus {
    /// Open connections that are not relay connections.
    pub direct: u64,
    /// The hosts with an open relay connection or relay window, in host id
    /// order: all of them, or as many as fit in the answer.
    pub relays: Vec<HostStatus>,
    /// How many hosts the answer left out, after the last one of `relays`,
    /// to fit in one line; absent on the wire when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted: u64,
}

/// One host of [`HostsStatus`] (SPEC.md §3.5, §18.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct HostStatus {
    /// The host id its coordinator relays under (§18.1).
    pub host: HostId,
    /// Its open relay connections: 1, or 0 while only its relay window is
    /// open (a coordinator keeps at most one per host, §18.2).
    pub connections: u64,
    /// The parties open on its relay connection: the host's groups that
    /// the cluster's coordinator decides (§18.3).
    pub parties: u64,
    /// Whether its relay window is open (§18.2); on the wire only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub window: bool,
    /// The flights it led that wait, orphaned, for its next host
    /// coordinator (§18.2); on the wire only when not 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub orphans: u64,
}

/// What a host coordinator adds to the cluster's `status` answer that it
/// returns (SPEC.md §3.5, §18.3): itself, its host's groups, and the
/// cluster's coordinator it relays to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct RelayStatus {
    /// The host id it relays under (§18.6); absent when it was not given
    /// one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostId>,
    /// The host's connections open on the host directory's socket.
    pub connections: u64,
    /// Its groups (§18.3), in key order: all of them, or as many as fit.
    pub groups: Vec<GroupStatus>,
    /// How many groups the answer left out, after the last one of
    /// `groups`; absent on the wire when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted: u64,
    /// The cluster's coordinator that answered, as its hello named it
    /// (§4.2); absent when the host coordinator does not know it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<CoordinatorIdentity>,
}

/// One group of a host coordinator (SPEC.md §3.5, §18.3): the host's local
/// parties that one request to the cluster stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GroupStatus {
    /// The key of its flight.
    pub key: Key,
    /// The flight's token once the cluster answered `lead` or `joined` (or
    /// the group reasserts or rejoins it); absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<FencingToken>,
    /// Its local parties: its leader, if it has one, and those that wait or
    /// join.
    pub parties: u64,
}

/// A coordinator as its hello names it (SPEC.md §4.2): its term, its
/// process and its host name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct CoordinatorIdentity {
    /// Its term.
    #[serde(serialize_with = "decimal")]
    pub epoch: Epoch,
    /// Its process id.
    pub pid: u32,
    /// Its host name, when its hello gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// An epoch as decimal text, as a hello writes it (§4.2).
fn decimal<S: Serializer>(epoch: &Epoch, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(epoch)
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// `part ÷ whole`, or `None` when `whole` is 0. Counts far beyond 2^53 lose
/// precision in an `f64`, which a ratio can afford.
fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// A decoded request line: a request this version knows, or a well-formed
/// envelope with an `op` it does not know (SPEC.md §3.6), which a coordinator
/// answers `unsupported` while keeping the connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Incoming {
    /// A request this version knows.
    Request(Request),
    /// A request whose `op` this version does not know (§3.6).
    Unknown {
        /// The unknown `op`, within `MAX_OP_BYTES`.
        op: String,
        /// The request's id, for the `unsupported` answer.
        id: RequestId,
    },
}

impl Request {
    /// The request's id (§3.1).
    pub fn id(&self) -> &RequestId {
        match self {
            Request::Run { id, .. }
            | Request::Land { id, .. }
            | Request::Cancel { id }
            | Request::Reassert { id, .. }
            | Request::Status { id }
            | Request::Detach { id } => id,
        }
    }
}

impl Response {
    /// The id of the request this answers (§3.1).
    pub fn id(&self) -> &RequestId {
        match self {
            Response::Lead { id, .. }
            | Response::Joined { id, .. }
            | Response::Landed { id, .. }
            | Response::Interrupted { id }
            | Response::Ack { id }
            | Response::Rejected { id }
            | Response::Unsupported { id }
            | Response::Stop { id }
            | Response::Reused { id, .. }
            | Response::Cycle { id, .. }
            | Response::Unavailable { id, .. }
            | Response::Status { id, .. } => id,
        }
    }
}

/// The JSON text of a message, without the line's `\n`.
pub fn encode<M: Serialize>(message: &M) -> String {
    // Serializing these types cannot fail: every map key is a string and no
    // value is a float.
    serde_json::to_string(message).expect("protocol messages always serialize")
}

/// The length of the JSON text [`encode`] writes for `message`, counted
/// without keeping the text.
pub fn encoded_len<M: Serialize>(message: &M) -> usize {
    /// Counts what serde_json writes, and keeps none of it.
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // As in `encode`: protocol messages always serialize, and the counter
    // never fails a write.
    serde_json::to_writer(&mut counter, message).expect("protocol messages always serialize");
    counter.0
}

/// Encodes responses as lines (with their `\n`), writing the outcome of a
/// landed flight once for all its joiners: a flight's `landed` lines differ
/// only in their `id`, and escaping a large value again for each joiner
/// would be most of the coordinator's work in a fan-out (BENCHMARKS.md,
/// "Hot spots"). Each line is byte for byte what [`encode`] writes.
///
/// Keep one for the responses of one coordinator step: it holds the last
/// outcome it wrote (up to a frame) until it is dropped.
#[derive(Default)]
pub struct LineEncoder {
    /// The last landed outcome, and its JSON text.
    landed: Option<(Arc<Outcome>, String)>,
}

impl LineEncoder {
    /// The line of `response`: its JSON text and the `\n`.
    pub fn line(&mut self, response: &Response) -> Vec<u8> {
        let Response::Landed { id, outcome } = response else {
            let mut line = encode(response).into_bytes();
            line.push(b'\n');
            return line;
        };
        let text = match &mut self.landed {
            // The coordinator shares one outcome among a flight's joiners,
            // so the pointer usually tells; comparing costs one pass over
            // the text, escaping it several.
            Some((last, text)) if Arc::ptr_eq(last, outcome) || last == outcome => text,
            cached => &cached.insert((outcome.clone(), encode(outcome))).1,
        };
        // The field order of `Response::Landed`'s `Serialize`.
        const HEAD: &[u8] = br#"{"op":"landed","id":"#;
        const OUTCOME: &[u8] = br#","outcome":"#;
        let id = encode(id);
        let mut line = Vec::with_capacity(HEAD.len() + id.len() + OUTCOME.len() + text.len() + 2);
        line.extend_from_slice(HEAD);
        line.extend_from_slice(id.as_bytes());
        line.extend_from_slice(OUTCOME);
        line.extend_from_slice(text.as_bytes());
        line.extend_from_slice(b"}\n");
        line
    }
}

/// Decodes one request line (without its `\n`).
pub fn decode_request(line: &[u8]) -> Result<Incoming, DecodeError> {
    let mut json = Json::Other;
    let message = MessageFields::parse(line, &mut json)?;
    let op = op(message.op.take())?;
    let id = id(message.id.take())?;
    let request = match &*op {
        "run" => Request::Run {
            id,
            key: key(message.key.take())?,
            flight: optional_token(message.flight.take(), "flight")?,
            reuse: reuse(message.reuse.take())?,
            parent: optional_token(message.parent.take(), "parent")?,
        },
        "land" => Request::Land {
            id,
            outcome: outcome(message.outcome.take())?,
        },
        "cancel" => Request::Cancel { id },
        "reassert" => Request::Reassert {
            id,
            key: key(message.key.take())?,
            token: token(message.token.take(), "token")?,
            outcome: optional_outcome(message.outcome.take())?,
            parent: optional_token(message.parent.take(), "parent")?,
        },
        "status" => Request::Status { id },
        "detach" => Request::Detach { id },
        _ => {
            return Ok(Incoming::Unknown {
                op: op.into_owned(),
                id,
            });
        }
    };
    Ok(Incoming::Request(request))
}

/// Decodes one response line (without its `\n`). A response with an `op` this
/// version does not know is an error: a coordinator only sends new responses
/// to new requests, so it means the peer is not speaking this protocol.
pub fn decode_response(line: &[u8]) -> Result<Response, DecodeError> {
    let mut json = Json::Other;
    let message = MessageFields::parse(line, &mut json)?;
    let op = op(message.op.take())?;
    let id = id(message.id.take())?;
    Ok(match &*op {
        "lead" => Response::Lead {
            id,
            token: token(message.token.take(), "token")?,
        },
        "joined" => Response::Joined {
            id,
            flight: token(message.flight.take(), "flight")?,
        },
        "landed" => Response::Landed {
            id,
            outcome: Arc::new(outcome(message.outcome.take())?),
        },
        "interrupted" => Response::Interrupted { id },
        "ack" => Response::Ack { id },
        "rejected" => Response::Rejected { id },
        "unsupported" => Response::Unsupported { id },
        "stop" => Response::Stop { id },
        "reused" => Response::Reused {
            id,
            flight: token(message.flight.take(), "flight")?,
            outcome: Box::new(outcome(message.outcome.take())?),
        },
        "cycle" => Response::Cycle {
            id,
            keys: cycle_keys(message.keys.take())?,
        },
        "unavailable" => Response::Unavailable {
            id,
            reason: Reason::new(text(message.reason.take(), "reason")?)?,
        },
        "status" => Response::Status {
            id,
            flights: flights(message.flights.take())?,
            waiting: message
                .waiting
                .take()
                .map(|given| count(given, "waiting"))
                .transpose()?,
            omitted: message
                .omitted
                .take()
                .map(|given| count(given, "omitted"))
                .transpose()?,
            stats: message.stats.take().map(stats).transpose()?.map(Box::new),
            hosts: message.hosts.take().map(hosts).transpose()?.map(Box::new),
            relay: message.relay.take().map(relay).transpose()?.map(Box::new),
        },
        _ => {
            return Err(DecodeError::UnknownResponse {
                op: op.into_owned(),
            });
        }
    })
}

// ---------------------------------------------------------------------------
// Reading a line. Nothing here fails except on text that is not JSON: what a
// member holds is only recorded, and judged by the checks further down once
// the whole line has been read.
// ---------------------------------------------------------------------------

/// One JSON value, kept as far as the checks need it: text (borrowed from the
/// line unless it holds escapes), an integer, an object as the `F` fields the
/// protocol reads from it, an array as the `I` items it reads from it, or
/// anything else. Every value is read through `deserialize_any`, as
/// `serde_json::Value` reads it, so the nesting limit and the checks of
/// numbers and strings apply to all of a line (SPEC.md §3.7).
enum Json<'a, F = Skipped, I = Skipped> {
    Text(Cow<'a, str>),
    Unsigned(u64),
    Signed(i64),
    Bool(bool),
    Object(F),
    Array(I),
    /// `null`, or a number that serde_json reads as a float
    /// (with a fraction or an exponent, or beyond 64 bits).
    Other,
}

/// The members of one kind of JSON object that the protocol reads. A member
/// that appears twice counts once, with its last value, and members of other
/// names are read and dropped (SPEC.md §3).
trait Fields<'a>: Default {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error>;
}

/// The items of one kind of JSON array that the protocol reads.
trait Items<'a>: Default {
    /// Reads the next item; false at the end of the array.
    fn read<A: SeqAccess<'a>>(&mut self, items: &mut A) -> Result<bool, A::Error>;
}

/// A value nobody reads: an unknown member, or an array or object where the
/// protocol wants text or a number. It is still read in full, and keeps
/// nothing.
#[derive(Default)]
struct Skipped;

impl<'a> Fields<'a> for Skipped {
    fn read<A: MapAccess<'a>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
        skip(map)
    }
}

impl<'a> Items<'a> for Skipped {
    fn read<A: SeqAccess<'a>>(&mut self, items: &mut A) -> Result<bool, A::Error> {
        Ok(items.next_element::<Skipped>()?.is_some())
    }
}

impl<'a> Deserialize<'a> for Skipped {
    fn deserialize<D: Deserializer<'a>>(deserializer: D) -> Result<Skipped, D::Error> {
        Place(&mut Json::<Skipped>::Other).deserialize(deserializer)?;
        Ok(Skipped)
    }
}

/// Reads the value of a member nobody reads.
fn skip<'a, A: MapAccess<'a>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<Skipped>()?;
    Ok(())
}

/// Reads the value of a member into its field; a member read before under
/// the same name is replaced.
fn member<'a, A, F, I>(map: &mut A, field: &mut Option<Json<'a, F, I>>) -> Result<(), A::Error>
where
    A: MapAccess<'a>,
    F: Fields<'a>,
    I: Items<'a>,
{
    map.next_value_seed(Place(field.insert(Json::Other)))
}

/// Reads one JSON value into the place it is kept. Reading in place, rather
/// than returning each value up through serde_json's layers, keeps a message's
/// fields from being copied at every layer, which would be a large share of
/// the time a `run` line takes to decode (BENCHMARKS.md, "Hot spots").
struct Place<'p, T>(&'p mut T);

impl<'a, F: Fields<'a>, I: Items<'a>> DeserializeSeed<'a> for Place<'_, Json<'a, F, I>> {
    type Value = ();

    fn deserialize<D: Deserializer<'a>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'a, F: Fields<'a>, I: Items<'a>> Visitor<'a> for Place<'_, Json<'a, F, I>> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<Error>(self, value: bool) -> Result<(), Error> {
        *self.0 = Json::Bool(value);
        Ok(())
    }

    fn visit_i64<Error>(self, number: i64) -> Result<(), Error> {
        *self.0 = Json::Signed(number);
        Ok(())
    }

    fn visit_u64<Error>(self, number: u64) -> Result<(), Error> {
        *self.0 = Json::Unsigned(number);
        Ok(())
    }

    fn visit_f64<Error>(self, _: f64) -> Result<(), Error> {
        *self.0 = Json::Other;
        Ok(())
    }

    fn visit_borrowed_str<Error>(self, text: &'a str) -> Result<(), Error> {
        *self.0 = Json::Text(Cow::Borrowed(text));
        Ok(())
    }

    /// Text with escapes, which serde_json has unescaped into a buffer.
    fn visit_str<Error>(self, text: &str) -> Result<(), Error> {
        *self.0 = Json::Text(Cow::Owned(text.to_owned()));
        Ok(())
    }

    fn visit_string<Error>(self, text: String) -> Result<(), Error> {
        *self.0 = Json::Text(Cow::Owned(text));
        Ok(())
    }

    fn visit_unit<Error>(self) -> Result<(), Error> {
        *self.0 = Json::Other;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'a>>(self, mut items: A) -> Result<(), A::Error> {
        let mut array = I::default();
        while array.read(&mut items)? {}
        *self.0 = Json::Array(array);
        Ok(())
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        // The fields are filled where they are kept, for the reason above.
        *self.0 = Json::Object(F::default());
        let Json::Object(fields) = self.0 else {
            return Ok(()); // Never: it was made an object on the line above.
        };
        let mut name = Json::<Skipped>::Other;
        while map.next_key_seed(Place(&mut name))?.is_some() {
            match &name {
                Json::Text(name) => fields.read(name, &mut map)?,
                // serde_json's keys are always strings; anything else would
                // be no member the protocol knows.
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

/// The members of a request or response (SPEC.md §3.2, §3.3). A member is
/// `None` when the line does not have it.
#[derive(Default)]
struct MessageFields<'a> {
    op: Option<Json<'a>>,
    id: Option<Json<'a>>,
    key: Option<Json<'a>>,
    token: Option<Json<'a>>,
    flight: Option<Json<'a>>,
    outcome: Option<Json<'a, OutcomeFields<'a>>>,
    flights: Option<Json<'a, Skipped, FlightList>>,
    waiting: Option<Json<'a>>,
    omitted: Option<Json<'a>>,
    stats: Option<Json<'a, StatsFields<'a>>>,
    reuse: Option<Json<'a>>,
    parent: Option<Json<'a>>,
    keys: Option<Json<'a, Skipped, KeyList>>,
    reason: Option<Json<'a>>,
    hosts: Option<Json<'a, Members>>,
    relay: Option<Json<'a, Members>>,
}

impl<'a> MessageFields<'a> {
    /// Reads `line` into `message`, in place, and returns its fields.
    fn parse<'m>(
        line: &'a [u8],
        message: &'m mut Json<'a, MessageFields<'a>>,
    ) -> Result<&'m mut MessageFields<'a>, DecodeError> {
        // What `serde_json::from_slice` does, with the value read in place.
        let mut deserializer = serde_json::Deserializer::from_slice(line);
        let read = Place(&mut *message).deserialize(&mut deserializer);
        if let Err(error) = read.and_then(|()| deserializer.end()) {
            return Err(DecodeError::NotJson {
                reason: error.to_string(),
            });
        }
        match message {
            Json::Object(fields) => Ok(fields),
            _ => Err(DecodeError::NotAnObject),
        }
    }
}

impl<'a> Fields<'a> for MessageFields<'a> {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "op" => member(map, &mut self.op),
            "id" => member(map, &mut self.id),
            "key" => member(map, &mut self.key),
            "token" => member(map, &mut self.token),
            "flight" => member(map, &mut self.flight),
            "outcome" => member(map, &mut self.outcome),
            "flights" => member(map, &mut self.flights),
            "waiting" => member(map, &mut self.waiting),
            "omitted" => member(map, &mut self.omitted),
            "stats" => member(map, &mut self.stats),
            "reuse" => member(map, &mut self.reuse),
            "parent" => member(map, &mut self.parent),
            "keys" => member(map, &mut self.keys),
            "reason" => member(map, &mut self.reason),
            "hosts" => member(map, &mut self.hosts),
            "relay" => member(map, &mut self.relay),
            _ => skip(map),
        }
    }
}

/// The members of an object of a `status` answer's tier extensions
/// (`hosts`, `relay`: SPEC.md §3.5), kept as JSON values and checked by
/// hand below. Only `status` answers have them, which are not a hot path; a
/// repeated member counts with its last value, as everywhere.
#[derive(Default)]
struct Members(serde_json::Map<String, serde_json::Value>);

impl<'a> Fields<'a> for Members {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        let value = map.next_value::<serde_json::Value>()?;
        self.0.insert(name.to_owned(), value);
        Ok(())
    }
}

/// The members of an outcome (SPEC.md §3.4). Which others it has does not
/// matter: any makes it malformed.
#[derive(Default)]
struct OutcomeFields<'a> {
    value: Option<Json<'a>>,
    failure: Option<Json<'a, FailureFields<'a>>>,
    others: bool,
}

impl<'a> Fields<'a> for OutcomeFields<'a> {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "value" => member(map, &mut self.value),
            "failure" => member(map, &mut self.failure),
            _ => {
                self.others = true;
                skip(map)
            }
        }
    }
}

/// The members of an outcome's `failure` (SPEC.md §3.4).
#[derive(Default)]
struct FailureFields<'a> {
    name: Option<Json<'a>>,
    message: Option<Json<'a>>,
    code: Option<Json<'a>>,
}

impl<'a> Fields<'a> for FailureFields<'a> {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "name" => member(map, &mut self.name),
            "message" => member(map, &mut self.message),
            "code" => member(map, &mut self.code),
            _ => skip(map),
        }
    }
}

/// The `flights` of a `status` answer (SPEC.md §3.5), checked as they are
/// read so that a long array holds no more than its valid flights: the ones
/// before the first that is malformed, and what is wrong with that one.
#[derive(Default)]
struct FlightList {
    flights: Vec<FlightStatus>,
    error: Option<DecodeError>,
}

impl<'a> Items<'a> for FlightList {
    fn read<A: SeqAccess<'a>>(&mut self, items: &mut A) -> Result<bool, A::Error> {
        let mut item = Json::<FlightFields>::Other;
        if items.next_element_seed(Place(&mut item))?.is_none() {
            return Ok(false);
        }
        if self.error.is_none() {
            match flight(item) {
                Ok(flight) => self.flights.push(flight),
                Err(error) => self.error = Some(error),
            }
        }
        Ok(true)
    }
}

/// The `keys` of a `cycle` answer (SPEC.md §17.1), checked as they are read,
/// so that a hostile array holds no more than [`MAX_CYCLE_KEYS`] keys: the
/// valid ones before the first fault, and what that fault is.
#[derive(Default)]
struct KeyList {
    keys: Vec<Key>,
    error: Option<DecodeError>,
}

impl<'a> Items<'a> for KeyList {
    fn read<A: SeqAccess<'a>>(&mut self, items: &mut A) -> Result<bool, A::Error> {
        let mut item = Json::<Skipped>::Other;
        if items.next_element_seed(Place(&mut item))?.is_none() {
            return Ok(false);
        }
        if self.error.is_none() {
            if self.keys.len() == MAX_CYCLE_KEYS {
                self.error = Some(DecodeError::WrongType {
                    field: "keys",
                    expected: "an array of at most 64 keys",
                });
            } else {
                match key(Some(item)) {
                    Ok(key) => self.keys.push(key),
                    Err(error) => self.error = Some(error),
                }
            }
        }
        Ok(true)
    }
}

/// The members of one flight in a `status` answer (SPEC.md §3.5).
#[derive(Default)]
struct FlightFields<'a> {
    key: Option<Json<'a>>,
    token: Option<Json<'a>>,
    joiners: Option<Json<'a>>,
    detached: Option<Json<'a>>,
}

impl<'a> Fields<'a> for FlightFields<'a> {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "key" => member(map, &mut self.key),
            "token" => member(map, &mut self.token),
            "joiners" => member(map, &mut self.joiners),
            "detached" => member(map, &mut self.detached),
            _ => skip(map),
        }
    }
}

/// The members of a `status` answer's `stats` (SPEC.md §3.5). Members of
/// other names are read and dropped: a later version may count more.
#[derive(Default)]
struct StatsFields<'a> {
    flights_led: Option<Json<'a>>,
    joins: Option<Json<'a>>,
    lands_value: Option<Json<'a>>,
    lands_failure: Option<Json<'a>>,
    interruptions: Option<Json<'a>>,
    reasserts_accepted: Option<Json<'a>>,
    reasserts_rejected: Option<Json<'a>>,
    rejoins: Option<Json<'a>>,
    grace_windows: Option<Json<'a>>,
    connections_open: Option<Json<'a>>,
    connections_refused: Option<Json<'a>>,
}

impl<'a> Fields<'a> for StatsFields<'a> {
    fn read<A: MapAccess<'a>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        let field = match name {
            "flights_led" => &mut self.flights_led,
            "joins" => &mut self.joins,
            "lands_value" => &mut self.lands_value,
            "lands_failure" => &mut self.lands_failure,
            "interruptions" => &mut self.interruptions,
            "reasserts_accepted" => &mut self.reasserts_accepted,
            "reasserts_rejected" => &mut self.reasserts_rejected,
            "rejoins" => &mut self.rejoins,
            "grace_windows" => &mut self.grace_windows,
            "connections_open" => &mut self.connections_open,
            "connections_refused" => &mut self.connections_refused,
            _ => return skip(map),
        };
        member(map, field)
    }
}

// ---------------------------------------------------------------------------
// Checking what was read, field by field, in the order that decides which
// error a line with several faults gets.
// ---------------------------------------------------------------------------

fn required<T>(member: Option<T>, field: &'static str) -> Result<T, DecodeError> {
    member.ok_or(DecodeError::MissingField { field })
}

fn text<'a>(member: Option<Json<'a>>, field: &'static str) -> Result<Cow<'a, str>, DecodeError> {
    match required(member, field)? {
        Json::Text(text) => Ok(text),
        _ => Err(DecodeError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn op(member: Option<Json<'_>>) -> Result<Cow<'_, str>, DecodeError> {
    let op = text(member, "op")?;
    if op.is_empty() {
        return Err(DecodeError::Empty { field: "op" });
    }
    if op.len() > MAX_OP_BYTES {
        return Err(DecodeError::TooLong {
            field: "op",
            len: op.len(),
            max: MAX_OP_BYTES,
        });
    }
    Ok(op)
}

fn id(member: Option<Json<'_>>) -> Result<RequestId, DecodeError> {
    RequestId::new(text(member, "id")?)
}

fn key(member: Option<Json<'_>>) -> Result<Key, DecodeError> {
    Key::new(text(member, "key")?)
}

fn token(member: Option<Json<'_>>, field: &'static str) -> Result<FencingToken, DecodeError> {
    text(member, field)?
        .parse()
        .map_err(|reason| DecodeError::BadToken { field, reason })
}

fn optional_token(
    member: Option<Json<'_>>,
    field: &'static str,
) -> Result<Option<FencingToken>, DecodeError> {
    member.map(|given| token(Some(given), field)).transpose()
}

fn outcome(member: Option<Json<'_, OutcomeFields<'_>>>) -> Result<Outcome, DecodeError> {
    let Json::Object(fields) = required(member, "outcome")? else {
        return Err(DecodeError::BadOutcome);
    };
    // Exactly one member, `value` or `failure` (SPEC.md §3.4).
    let failure = match fields {
        OutcomeFields {
            value: Some(value),
            failure: None,
            others: false,
        } => return Ok(Outcome::Value(text(Some(value), "value")?.into_owned())),
        OutcomeFields {
            value: None,
            failure: Some(Json::Object(failure)),
            others: false,
        } => failure,
        _ => return Err(DecodeError::BadOutcome),
    };
    let wrong_code = DecodeError::WrongType {
        field: "code",
        expected: "a string or an integer",
    };
    let code = match failure.code {
        None => None,
        Some(Json::Text(text)) => Some(FailureCode::Text(text.into_owned())),
        Some(Json::Signed(number)) => Some(FailureCode::Number(number)),
        Some(Json::Unsigned(number)) => Some(FailureCode::Number(
            i64::try_from(number).map_err(|_| wrong_code)?,
        )),
        Some(_) => return Err(wrong_code),
    };
    Ok(Outcome::Failure(Failure {
        name: text(failure.name, "name")?.into_owned(),
        message: text(failure.message, "message")?.into_owned(),
        code,
    }))
}

/// A run's reuse window (SPEC.md §16.1), when it has one.
fn reuse(member: Option<Json<'_>>) -> Result<Option<ReuseWindow>, DecodeError> {
    let Some(given) = member else {
        return Ok(None);
    };
    let millis = match given {
        Json::Unsigned(number) => Some(number),
        _ => None,
    };
    millis
        .and_then(ReuseWindow::from_millis)
        .map(Some)
        .ok_or(DecodeError::WrongType {
            field: "reuse",
            expected: "an integer of milliseconds from 1 to 3600000",
        })
}

fn optional_outcome(
    member: Option<Json<'_, OutcomeFields<'_>>>,
) -> Result<Option<Outcome>, DecodeError> {
    member.map(|given| outcome(Some(given))).transpose()
}

fn flights(
    member: Option<Json<'_, Skipped, FlightList>>,
) -> Result<Vec<FlightStatus>, DecodeError> {
    let Json::Array(list) = required(member, "flights")? else {
        return Err(DecodeError::WrongType {
            field: "flights",
            expected: "an array",
        });
    };
    match list.error {
        Some(error) => Err(error),
        None => Ok(list.flights),
    }
}

/// A `cycle` answer's keys (SPEC.md §17.1): 1 to [`MAX_CYCLE_KEYS`] keys.
fn cycle_keys(member: Option<Json<'_, Skipped, KeyList>>) -> Result<Vec<Key>, DecodeError> {
    let Json::Array(list) = required(member, "keys")? else {
        return Err(DecodeError::WrongType {
            field: "keys",
            expected: "an array",
        });
    };
    match list.error {
        Some(error) => Err(error),
        None if list.keys.is_empty() => Err(DecodeError::Empty { field: "keys" }),
        None => Ok(list.keys),
    }
}

fn flight(item: Json<'_, FlightFields<'_>>) -> Result<FlightStatus, DecodeError> {
    let Json::Object(flight) = item else {
        return Err(DecodeError::WrongType {
            field: "flights",
            expected: "an array of objects",
        });
    };
    let joiners = count(required(flight.joiners, "joiners")?, "joiners")?;
    let detached = match flight.detached {
        None => false,
        Some(Json::Bool(detached)) => detached,
        Some(_) => {
            return Err(DecodeError::WrongType {
                field: "detached",
                expected: "true or false",
            });
        }
    };
    Ok(FlightStatus {
        key: key(flight.key)?,
        token: token(flight.token, "token")?,
        joiners,
        detached,
    })
}

/// A count: a non-negative JSON integer.
fn count(given: Json<'_>, field: &'static str) -> Result<u64, DecodeError> {
    match given {
        // serde_json reads every non-negative integer as unsigned, so a
        // signed one is negative.
        Json::Unsigned(number) => Some(number),
        _ => None,
    }
    .ok_or(DecodeError::WrongType {
        field,
        expected: "a non-negative integer",
    })
}

/// A `status` answer's `stats` (SPEC.md §3.5): an object whose every member
/// of this version is there and is a count.
fn stats(given: Json<'_, StatsFields<'_>>) -> Result<CoordinatorStats, DecodeError> {
    let Json::Object(fields) = given else {
        return Err(DecodeError::WrongType {
            field: "stats",
            expected: "an object",
        });
    };
    let counted = |member: Option<Json<'_>>, field| count(required(member, field)?, field);
    Ok(CoordinatorStats {
        flights_led: counted(fields.flights_led, "flights_led")?,
        joins: counted(fields.joins, "joins")?,
        lands_value: counted(fields.lands_value, "lands_value")?,
        lands_failure: counted(fields.lands_failure, "lands_failure")?,
        interruptions: counted(fields.interruptions, "interruptions")?,
        reasserts_accepted: counted(fields.reasserts_accepted, "reasserts_accepted")?,
        reasserts_rejected: counted(fields.reasserts_rejected, "reasserts_rejected")?,
        rejoins: counted(fields.rejoins, "rejoins")?,
        grace_windows: counted(fields.grace_windows, "grace_windows")?,
        connections_open: counted(fields.connections_open, "connections_open")?,
        connections_refused: counted(fields.connections_refused, "connections_refused")?,
    })
}

/// A value of a tier extension's object (SPEC.md §3.5) that is not what it
/// must be.
fn wrong(field: &'static str, expected: &'static str) -> DecodeError {
    DecodeError::WrongType { field, expected }
}

/// A count of a tier extension: a non-negative JSON integer.
fn value_count(value: Option<&serde_json::Value>, field: &'static str) -> Result<u64, DecodeError> {
    required(value, field)?
        .as_u64()
        .ok_or(wrong(field, "a non-negative integer"))
}

/// An optional count of a tier extension, 0 when absent.
fn optional_count(
    value: Option<&serde_json::Value>,
    field: &'static str,
) -> Result<u64, DecodeError> {
    value.map_or(Ok(0), |given| value_count(Some(given), field))
}

/// The members of a tier extension's object, or what is wrong with it.
fn object<'v>(
    value: &'v serde_json::Value,
    field: &'static str,
) -> Result<&'v serde_json::Map<String, serde_json::Value>, DecodeError> {
    value.as_object().ok_or(wrong(field, "an object"))
}

/// The items of a tier extension's array, or what is wrong with it.
fn array<'v>(
    value: Option<&'v serde_json::Value>,
    field: &'static str,
) -> Result<&'v [serde_json::Value], DecodeError> {
    required(value, field)?
        .as_array()
        .map(Vec::as_slice)
        .ok_or(wrong(field, "an array"))
}

/// What a host id and a coordinator's host name must be (SPEC.md §18.1,
/// §3.5), for the decode errors below. Written out because a
/// `DecodeError` holds static text; the assertion keeps the number
/// `MAX_HOST_BYTES`.
const HOST_ID_RULE: &str = "a host id: 1 to 255 bytes without control characters";
const HOST_NAME_RULE: &str = "a host name of at most 255 bytes without control characters";
const _: () = assert!(
    MAX_HOST_BYTES == 255,
    "HOST_ID_RULE and HOST_NAME_RULE name it"
);

/// A host id of a tier extension (the rules of SPEC.md §18.1).
fn host_id(value: Option<&serde_json::Value>) -> Result<HostId, DecodeError> {
    let text = required(value, "host")?
        .as_str()
        .ok_or(wrong("host", "a string"))?;
    HostId::new(text).map_err(|_| wrong("host", HOST_ID_RULE))
}

/// A `status` answer's `hosts` (SPEC.md §3.5): `direct`, `relays` and
/// `omitted`; members of other names are ignored.
fn hosts(given: Json<'_, Members>) -> Result<HostsStatus, DecodeError> {
    let Json::Object(Members(members)) = given else {
        return Err(wrong("hosts", "an object"));
    };
    let relays = array(members.get("relays"), "relays")?
        .iter()
        .map(|item| {
            let host = object(item, "relays")?;
            Ok(HostStatus {
                host: host_id(host.get("host"))?,
                connections: value_count(host.get("connections"), "connections")?,
                parties: value_count(host.get("parties"), "parties")?,
                window: match host.get("window") {
                    None => false,
                    Some(window) => window.as_bool().ok_or(wrong("window", "true or false"))?,
                },
                orphans: optional_count(host.get("orphans"), "orphans")?,
            })
        })
        .collect::<Result<_, DecodeError>>()?;
    Ok(HostsStatus {
        direct: value_count(members.get("direct"), "direct")?,
        relays,
        omitted: optional_count(members.get("omitted"), "omitted")?,
    })
}

/// A host coordinator's `relay` in a `status` answer (SPEC.md §3.5).
fn relay(given: Json<'_, Members>) -> Result<RelayStatus, DecodeError> {
    let Json::Object(Members(members)) = given else {
        return Err(wrong("relay", "an object"));
    };
    let groups = array(members.get("groups"), "groups")?
        .iter()
        .map(|item| {
            let group = object(item, "groups")?;
            let key_text = required(group.get("key"), "key")?
                .as_str()
                .ok_or(wrong("key", "a string"))?;
            let token = match group.get("token") {
                None => None,
                Some(token) => Some(
                    token
                        .as_str()
                        .ok_or(wrong("token", "a string"))?
                        .parse()
                        .map_err(|reason| DecodeError::BadToken {
                            field: "token",
                            reason,
                        })?,
                ),
            };
            Ok(GroupStatus {
                key: Key::new(key_text)?,
                token,
                parties: value_count(group.get("parties"), "parties")?,
            })
        })
        .collect::<Result<_, DecodeError>>()?;
    let cluster = match members.get("cluster") {
        None => None,
        Some(cluster) => Some(identity(object(cluster, "cluster")?)?),
    };
    Ok(RelayStatus {
        host: members
            .get("host")
            .map(|host| host_id(Some(host)))
            .transpose()?,
        connections: value_count(members.get("connections"), "connections")?,
        groups,
        omitted: optional_count(members.get("omitted"), "omitted")?,
        cluster,
    })
}

/// The cluster's coordinator as a host coordinator names it in `relay`
/// (SPEC.md §3.5): the members of its hello (§4.2), checked as a hello's.
fn identity(
    members: &serde_json::Map<String, serde_json::Value>,
) -> Result<CoordinatorIdentity, DecodeError> {
    let epoch = required(members.get("epoch"), "epoch")?
        .as_str()
        .and_then(term_number)
        .ok_or(wrong("epoch", "a term number as decimal text"))?;
    let pid = required(members.get("pid"), "pid")?
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .ok_or(wrong("pid", "a process id"))?;
    let host = match members.get("host") {
        None => None,
        Some(host) => {
            let text = host.as_str().ok_or(wrong("host", "a string"))?;
            if !is_host_name(text) {
                return Err(wrong("host", HOST_NAME_RULE));
            }
            Some(text.to_owned())
        }
    };
    Ok(CoordinatorIdentity { epoch, pid, host })
}
