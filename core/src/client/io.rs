//! What goes into the client state machine and what comes out (SPEC.md §9.1).

use crate::protocol::{
    FencingToken, Key, Outcome, Reason, Request, RequestId, Response, ReuseWindow,
};

/// One call of this process, numbered by the shell; its decimal text is the
/// request id on the wire (SPEC.md §3.1, §9.1). Never reused within a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

impl CallId {
    /// The wire id of this call: its number in decimal (SPEC.md §9.1). The
    /// one place that writes it, for the client, the shell and the model.
    pub fn request_id(self) -> RequestId {
        RequestId::new(self.0.to_string()).expect("a decimal u64 is a valid id")
    }

    /// The call that the wire id `id` names; `None` for an id this client
    /// never sends. Only the canonical decimal text of a number names a
    /// call (SPEC.md §9.1), so that `"01"` or `"+1"` cannot alias call 1.
    pub fn from_request_id(id: &RequestId) -> Option<CallId> {
        let text = id.as_str();
        let number: u64 = text.parse().ok()?;
        (number.to_string() == text).then_some(CallId(number))
    }
}

/// A fact the shell reports, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The caller started a call for `key`.
    CallStarted {
        /// The call's number, new in this process.
        call: CallId,
        /// The key of the flight to lead or join.
        key: Key,
        /// What the caller chose for the call.
        options: CallOptions,
    },
    /// A response arrived on the current connection.
    ResponseReceived {
        /// The response, decoded.
        response: Response,
    },
    /// The work that `call` leads finished with `outcome`.
    WorkFinished {
        /// The call whose work finished.
        call: CallId,
        /// How the work ended.
        outcome: Outcome,
    },
    /// The caller gave up on `call` (dropped it, or its deadline passed).
    CallCancelled {
        /// The call given up.
        call: CallId,
    },
    /// The connection to the coordinator is gone.
    ConnectionLost,
    /// A connection to a coordinator (perhaps a new one) finished its
    /// handshake and can carry requests.
    ConnectionReady,
}

/// What a caller chose for one call, beyond its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallOptions {
    /// When the caller leaves while the call leads, its work goes on for
    /// the flight's joiners (SPEC.md §15).
    pub detached: bool,
    /// The call takes a kept value of its key, and its own value is kept
    /// this long if it leads (SPEC.md §16).
    pub reuse: Option<ReuseWindow>,
    /// The flight whose work makes this call (SPEC.md §17): the coordinator
    /// refuses the call, rather than let it wait for ever, when it would
    /// close a cycle of flights waiting for each other.
    pub parent: Option<FencingToken>,
}

/// A command for the shell, to be carried out in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Write `request` on the current connection.
    Send(Request),
    /// `call` leads: start its work under `token`.
    StartWork {
        /// The call that leads.
        call: CallId,
        /// The flight's token, which the work passes to what it writes (§6).
        token: FencingToken,
    },
    /// `call` is over; tell its caller.
    Resolve {
        /// The call that is over.
        call: CallId,
        /// How it ended.
        resolution: Resolution,
    },
    /// Stop the work of the detached call `call`, whose caller has left
    /// (SPEC.md §15.3): drop it, and forget the call.
    StopWork {
        /// The detached call.
        call: CallId,
        /// Why its work is stopped.
        why: StopReason,
    },
    /// The work of `call` finished, and its land is settled (answered `ack`,
    /// `rejected` or `stop`), or no land is sent for it (its flight was lost,
    /// or the client no longer knows the call): a leader that waits for its
    /// land before it resumes a panic goes on (SPEC.md §9.3, §9.6). Given
    /// once for each `WorkFinished` of a call the client knew as a leader.
    LandSettled {
        /// The call whose land is settled.
        call: CallId,
    },
}

/// Why a detached call's work is stopped (SPEC.md §15.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The coordinator said that nobody waits for the flight any more.
    NobodyWaits,
    /// The coordinator does not know `detach`; the flight was cancelled as
    /// before the extension, which interrupted its joiners.
    DetachUnsupported,
    /// The flight is no longer this call's (its reassert was refused), so
    /// its result would have gone to its caller alone, who left.
    FlightLost,
}

/// How a call ended (SPEC.md §9.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The call led the flight `token` and its work finished: the caller's
    /// result is its own work's.
    Led {
        /// The token of the flight it led.
        token: FencingToken,
    },
    /// The call joined the flight `flight`, which landed with `outcome`.
    Joined {
        /// The token of the flight it joined.
        flight: FencingToken,
        /// The outcome its leader landed.
        outcome: Outcome,
    },
    /// The call received the value that the flight `flight` had landed
    /// within its reuse window (SPEC.md §16.3).
    Reused {
        /// The token of the flight that landed the value.
        flight: FencingToken,
        /// The value that flight landed.
        outcome: Outcome,
    },
    /// The flight ended without an outcome for this caller (SPEC.md §3.3):
    /// its leader stopped, cancelled or lost it. The work is not rerun.
    Interrupted,
    /// The call had joined a flight, lost its coordinator, and rejoined the
    /// flight on the new one, which answered `interrupted` (SPEC.md §9.2):
    /// the flight was lost in the failover. Its leader did not bring it
    /// back within the grace window (its process may have finished, stopped,
    /// or not reached the new coordinator in time), or ended it without an
    /// outcome right after. The work is not rerun.
    Lost,
    /// The coordinator answered `unsupported` to a request every version
    /// knows: it does not speak this protocol correctly.
    Unsupported,
    /// The call was refused because it would close a cycle of nested
    /// flights (SPEC.md §17.1): `keys` from its parent's key, each waiting
    /// for the next and the last for the first.
    Cycle {
        /// The keys of the cycle, the parent's first, then the call's own.
        keys: Vec<Key>,
    },
    /// The host's coordinator could not reach the cluster for the call
    /// (SPEC.md §18.3): it ends as when no coordinator can be had (§14.6).
    Unavailable {
        /// Why, as the host coordinator said.
        reason: Reason,
    },
}
