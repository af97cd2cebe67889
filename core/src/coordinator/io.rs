//! What goes into the coordinator and what comes out (SPEC.md §8.1): plain
//! data, so that tests and the model checker can compare it.

use std::time::Duration;

use crate::protocol::{FencingToken, HostId, Incoming, Key, Response};

/// A connection, named by the shell. The shell never reuses a number within
/// one term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// How a term begins (SPEC.md §8.4, §10.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Term {
    /// The directory's first term, or one whose predecessor resigned with no
    /// flight in progress: no grace window.
    First,
    /// A term after another: it opens with a grace window of `grace_window`,
    /// whose timer the coordinator starts ([`Timer::GraceWindow`]) when the
    /// shell reports [`Event::TermBegan`].
    AfterFailover {
        /// How long the grace window lasts (SPEC.md §10.2).
        grace_window: Duration,
    },
}

/// A timer the coordinator asks for with [`Effect::StartTimer`]; the shell
/// reports it with [`Event::TimerFired`] once it has run out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// The term's grace window (SPEC.md §8.4, §10.2).
    GraceWindow,
    /// The reuse window of the value that the flight `token` of `key` landed
    /// (SPEC.md §16.2).
    Reuse {
        /// The key of the kept value.
        key: Key,
        /// The token of the flight that landed it.
        token: FencingToken,
    },
    /// The relay window of `host` (SPEC.md §18.2), opened when its relay
    /// connection `closed` closed. A window opened again by a later close
    /// is named by that connection, so that the earlier timer, firing
    /// late, is told apart and ignored.
    RelayWindow {
        /// The host whose window it is.
        host: HostId,
        /// The relay connection whose close opened the window.
        closed: ConnectionId,
    },
}

/// A fact the shell reports, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The term began serving: the first event of every term, so that a
    /// term with a grace window starts its timer (SPEC.md §10.2).
    TermBegan,
    /// A connection was accepted; its handshake (SPEC.md §4.2) has not
    /// begun. It takes one of the term's [`MAX_CONNECTIONS`] slots, or is
    /// refused at once with [`Effect::Close`] when none is free (SPEC.md
    /// §11.3).
    ///
    /// [`MAX_CONNECTIONS`]: super::MAX_CONNECTIONS
    ConnectionAccepted {
        /// The new connection's number.
        connection: ConnectionId,
    },
    /// The shell refused an accepted connection before it opened: its peer
    /// failed the transport's check (SPEC.md §11.2, §14.5), or sent no
    /// acceptable hello in time (§4.2). Its slot is free again, and it
    /// counts as refused (§8.11). A connection whose peer closed it before
    /// its hello is [`Event::ConnectionClosed`] instead.
    ConnectionRefused {
        /// The refused connection.
        connection: ConnectionId,
    },
    /// A client finished the handshake (SPEC.md §4.2) on an accepted
    /// connection. A connection opened without [`Event::ConnectionAccepted`]
    /// (a driver that skips the handshake, as the model checker does) is
    /// accepted first.
    ConnectionOpened {
        /// The new connection's number.
        connection: ConnectionId,
        /// The host for which the client relays, when its hello said so
        /// (SPEC.md §18.1): its connection is then a relay connection
        /// (§18.2), if the coordinator keeps relay windows
        /// ([`Coordinator::with_relay_window`]).
        ///
        /// [`Coordinator::with_relay_window`]: super::Coordinator::with_relay_window
        relay: Option<HostId>,
    },
    /// A line of an open connection decoded to a request (SPEC.md §3).
    RequestReceived {
        /// The connection the line came on.
        connection: ConnectionId,
        /// The request, or the `op` and `id` of one this version does not
        /// know (§3.6).
        request: Incoming,
    },
    /// The connection is gone, open or still in its handshake: its peer
    /// closed it, it failed, or the shell closed it (also after an
    /// [`Effect::Close`]). Its slot is free again.
    ConnectionClosed {
        /// The connection that is gone.
        connection: ConnectionId,
    },
    /// The timer of an [`Effect::StartTimer`] ran out.
    TimerFired {
        /// The timer, as the effect named it.
        timer: Timer,
    },
    /// The process asks its term to stop (SPEC.md §10.4): the coordinator
    /// answers [`Effect::EndTerm`] with [`EndReason::Stopped`] at once, or,
    /// inside the grace window, once the window is over (at most the
    /// window). Asked again, it changes nothing.
    StopRequested,
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
    /// Report [`Event::TimerFired`] with `timer` after `after`. A timer that
    /// fires late (its window already over, its value replaced or evicted)
    /// is harmless, so timers need not be cancelled; a shell may drop a
    /// [`Timer::Reuse`] of a key that still runs when it starts the key's
    /// next one, since a key keeps at most one value (SPEC.md §16.2).
    StartTimer {
        /// Which timer.
        timer: Timer,
        /// How long from now.
        after: Duration,
    },
    /// End the term: resign the claim and close every connection (SPEC.md
    /// §8.9, §10.4), so that the next term takes over with a greater epoch.
    /// The coordinator ignores every event after this; it comes last among
    /// its step's effects.
    EndTerm {
        /// Why the term ends.
        reason: EndReason,
    },
}

/// Why the coordinator ends its term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The process asked it to stop ([`Event::StopRequested`]), and its
    /// grace window, if it had one, is over (SPEC.md §10.4): a clean end,
    /// which the shell records as such when no flight is in progress.
    Stopped,
    /// A flight must be led and the term has minted its last token (SPEC.md
    /// §6, §8.9): the term cannot go on.
    OutOfTokens,
}

/// Why the coordinator closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The connection has [`MAX_OPEN_REQUESTS_PER_CONNECTION`] open requests
    /// and sent one more (SPEC.md §8.9).
    ///
    /// [`MAX_OPEN_REQUESTS_PER_CONNECTION`]: super::MAX_OPEN_REQUESTS_PER_CONNECTION
    TooManyOpenRequests,
    /// An accepted connection found every one of the term's
    /// [`MAX_CONNECTIONS`] slots taken (SPEC.md §11.3): it is refused before
    /// its handshake, and counts as refused (§8.11).
    ///
    /// [`MAX_CONNECTIONS`]: super::MAX_CONNECTIONS
    TooManyConnections,
    /// A newer relay connection of the same host opened (SPEC.md §18.2): a
    /// host coordinator connects again only after it lost its connection or
    /// its process, so the older one is closed as a relay connection that
    /// ended.
    RelayReplaced,
}
