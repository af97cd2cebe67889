//! What goes into the relay and what comes out (SPEC.md §18.3): plain data,
//! so that tests and a model checker can compare it. The local side's events
//! are the coordinator's (§8.1) and name connections as it does.

use crate::coordinator::{self, ConnectionId};
use crate::protocol::{CoordinatorIdentity, Incoming, Reason, Request, Response};

/// A fact the shell reports, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A local connection was accepted; its handshake (SPEC.md §4.2) has not
    /// begun. It takes one of the relay's [`MAX_CONNECTIONS`] slots, or is
    /// refused at once with [`Effect::Close`] when none is free (§11.3).
    ///
    /// [`MAX_CONNECTIONS`]: crate::coordinator::MAX_CONNECTIONS
    ConnectionAccepted {
        /// The new connection's number.
        connection: ConnectionId,
    },
    /// The shell refused an accepted local connection before it opened
    /// (SPEC.md §4.2, §11.2): its slot is free again.
    ConnectionRefused {
        /// The refused connection.
        connection: ConnectionId,
    },
    /// A process of the host finished the handshake on an accepted local
    /// connection. A connection opened without
    /// [`Event::ConnectionAccepted`] is accepted first, as by the
    /// coordinator.
    ConnectionOpened {
        /// The new connection's number.
        connection: ConnectionId,
    },
    /// A line of an open local connection decoded to a request (SPEC.md §3).
    RequestReceived {
        /// The connection the line came on.
        connection: ConnectionId,
        /// The request, or the `op` and `id` of one this version does not
        /// know (§3.6).
        request: Incoming,
    },
    /// The local connection is gone, open or still in its handshake (also
    /// after an [`Effect::Close`]). Its slot is free again.
    ConnectionClosed {
        /// The connection that is gone.
        connection: ConnectionId,
    },
    /// A new connection to the cluster's coordinator finished its relay
    /// hello (SPEC.md §18.1) and can carry requests. Reported once per
    /// upstream connection; reported while one is ready, it changes nothing.
    UpstreamReady,
    /// The cluster's coordinator that a new upstream connection reached,
    /// as its hello named it (SPEC.md §4.2), reported before that
    /// connection's [`Event::UpstreamReady`]. It decides nothing: `status`
    /// answers name it (§3.5). A shell that does not report it leaves the
    /// answers without it.
    UpstreamGreeted {
        /// The coordinator's term, process and host name.
        coordinator: CoordinatorIdentity,
    },
    /// A line of the upstream connection decoded to a response (SPEC.md
    /// §3.3). A response whose id names no upstream party that the relay
    /// has open is ignored: it answers a request the relay withdrew.
    UpstreamResponse(Response),
    /// The upstream connection is gone (SPEC.md §18.3). Reported once per
    /// [`Event::UpstreamReady`]; a failed attempt to connect is not
    /// reported, and a loss while none is ready changes nothing.
    UpstreamLost,
    /// An attempt to reach the cluster's coordinator failed for `reason`,
    /// while no upstream connection is ready: the cluster's election or
    /// its coordinator refused this host coordinator, or could not be had
    /// (SPEC.md §18.3, "Unavailable"). Reported at most once per failed
    /// attempt; an attempt that finds nobody to reach, which the next one
    /// may, is not a failure. Reported while one is ready, it changes
    /// nothing.
    UpstreamUnavailable {
        /// The host coordinator's error, as it logged it.
        reason: Reason,
    },
}

/// A command for the shell, to be carried out in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Write `response` as one line on the local `connection`.
    Send {
        /// The connection to write on.
        connection: ConnectionId,
        /// The response to write.
        response: Response,
    },
    /// Close the local `connection`. The relay has already withdrawn its
    /// parties; events that still arrive for it are ignored.
    Close {
        /// The connection to close.
        connection: ConnectionId,
        /// Why it is closed.
        reason: CloseReason,
    },
    /// Write the request as one line on the upstream connection. Its `id`
    /// is the relay's own (SPEC.md §18.3), never a local one. Only emitted
    /// while an upstream connection is ready.
    SendUpstream(Request),
}

/// Why the relay closes a local connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// A bound that the relay keeps as the coordinator does: too many open
    /// requests on the connection (SPEC.md §8.9), or too many connections
    /// (§11.3).
    Bound(coordinator::CloseReason),
    /// The connection to the cluster was lost (SPEC.md §18.3): the host's
    /// processes reconnect and replay their calls, as after a failover of
    /// their own coordinator.
    UpstreamLost,
}
