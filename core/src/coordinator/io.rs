//! What goes into the coordinator and what comes out (SPEC.md §8.1): plain
//! data, so that tests and the model checker can compare it.

use crate::protocol::{FencingToken, Incoming, Key, Response, ReuseWindow};

/// A connection, named by the shell. The shell never reuses a number within
/// one term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// How a term begins (SPEC.md §8.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Term {
    /// The directory's first term, or one whose predecessor resigned with no
    /// flight in progress: no grace window.
    First,
    /// A term after another: it opens with a grace window, which the shell
    /// ends with [`Event::GraceWindowEnded`].
    AfterFailover,
}

/// A fact the shell reports, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A client finished the handshake (SPEC.md §4.2) on a new connection.
    ConnectionOpened {
        /// The new connection's number.
        connection: ConnectionId,
    },
    /// A line of an open connection decoded to a request (SPEC.md §3).
    RequestReceived {
        /// The connection the line came on.
        connection: ConnectionId,
        /// The request, or the `op` and `id` of one this version does not
        /// know (§3.6).
        request: Incoming,
    },
    /// The connection is gone: its peer closed it, it failed, or the shell
    /// closed it (also after an [`Effect::Close`]).
    ConnectionClosed {
        /// The connection that is gone.
        connection: ConnectionId,
    },
    /// The grace window of a [`Term::AfterFailover`] is over (SPEC.md §8.4).
    GraceWindowEnded,
    /// The reuse window of the value that the flight `token` of `key`
    /// landed is over (SPEC.md §16.2): the timer of an
    /// [`Effect::KeepFor`] fired.
    ReuseExpired {
        /// The key of the kept value, as the [`Effect::KeepFor`] named it.
        key: Key,
        /// The token of the flight that landed it, as the
        /// [`Effect::KeepFor`] named it.
        token: FencingToken,
    },
}

/// A command for the shell, to be carried out in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Write `response` as one line on `connection`.
    Send {
        /// The connection to write on.
        connection: ConnectionId,
        /// The response to write.
        response: Response,
    },
    /// Close `connection`. The coordinator has already withdrawn its parties;
    /// events that still arrive for it are ignored.
    Close {
        /// The connection to close.
        connection: ConnectionId,
        /// Why it is closed.
        reason: CloseReason,
    },
    /// The value of the flight `token` of `key` is kept for reuse (SPEC.md
    /// §16.2): after `window`, report [`Event::ReuseExpired`] with the same
    /// key and token. A timer that fires after its value was replaced or
    /// evicted is harmless; timers need not be cancelled.
    KeepFor {
        /// The key of the kept value.
        key: Key,
        /// The token of the flight that landed it.
        token: FencingToken,
        /// How long it is kept.
        window: ReuseWindow,
    },
    /// This term cannot go on (SPEC.md §8.9): resign the claim and close
    /// every connection, so that the next term takes over with a greater
    /// epoch. The coordinator ignores every event after this.
    EndTerm,
}

/// Why the coordinator closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The connection has [`MAX_OPEN_REQUESTS_PER_CONNECTION`] open requests
    /// and sent one more (SPEC.md §8.9).
    ///
    /// [`MAX_OPEN_REQUESTS_PER_CONNECTION`]: super::MAX_OPEN_REQUESTS_PER_CONNECTION
    TooManyOpenRequests,
}
