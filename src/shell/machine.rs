//! What a term serves on its listener (SPEC.md §8, §18.3): the coordinator
//! of a directory or a cluster, or the relay of a host coordinator. The
//! server (`super::server`) accepts connections, runs their handshakes and
//! carries out the orders of either one through this seam, and never asks
//! which it serves.

use std::time::Duration;

use crate::coordinator::{self, ConnectionId, Coordinator, EndReason, Timer};
use crate::protocol::{CoordinatorIdentity, Reason, Request, Response};
use crate::relay::{self, Relay};

/// A fact the server reports to its machine, in the order it happened.
#[derive(Debug)]
pub(super) enum Event {
    /// A fact of the term's own listener, its connections and its timers,
    /// as the coordinator takes it (SPEC.md §8.1).
    Local(coordinator::Event),
    /// A fact of the connection to the cluster's coordinator (SPEC.md
    /// §18.3). Only a term that relays has one.
    Upstream(Upstream),
}

/// What happened to the connection to the cluster's coordinator.
#[derive(Debug)]
pub(super) enum Upstream {
    /// A connection finished its relay hello (SPEC.md §18.1), answered by
    /// this coordinator (§4.2).
    Ready {
        coordinator: Option<CoordinatorIdentity>,
    },
    /// A line of it decoded to a response.
    Response(Response),
    /// It is gone.
    Lost,
    /// An attempt to reach one failed, for this reason (SPEC.md §18.3).
    Unavailable(Reason),
}

/// What the server carries out, in the order given.
#[derive(Debug)]
pub(super) enum Order {
    /// Write `response` as one line on the local `connection`.
    Send {
        connection: ConnectionId,
        response: Response,
    },
    /// Close the local `connection`; the machine has withdrawn its parties.
    Close {
        connection: ConnectionId,
        reason: CloseReason,
    },
    /// Report `timer` after `after`.
    StartTimer { timer: Timer, after: Duration },
    /// End the term; the last order of its step.
    EndTerm { reason: EndReason },
    /// Write the request as one line on the connection to the cluster's
    /// coordinator, which is ready.
    SendUpstream(Request),
}

/// Why a machine closes a connection, for the log.
pub(super) enum CloseReason {
    Coordinator(coordinator::CloseReason),
    Relay(relay::CloseReason),
}

/// The machine's own reason, as the log showed it before the relay.
impl std::fmt::Debug for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseReason::Coordinator(reason) => std::fmt::Debug::fmt(reason, f),
            CloseReason::Relay(reason) => std::fmt::Debug::fmt(reason, f),
        }
    }
}

/// Under which tracing target a term logs its lines (SPEC.md §13.1): the
/// coordinator's decisions under [`LOG_TARGET`], which the chaos checker
/// and users' filters read as the coordinator's, and a host term's under
/// [`RELAY_LOG_TARGET`], so that a host coordinator's lines are never taken
/// for those of the cluster's coordinator.
///
/// [`LOG_TARGET`]: super::server::LOG_TARGET
/// [`RELAY_LOG_TARGET`]: super::server::RELAY_LOG_TARGET
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LogTarget {
    Coordinator,
    Relay,
}

/// A machine a term serves: the coordinator, or the relay.
pub(super) trait Machine: Send + 'static {
    /// The target of the term's log lines.
    const LOG_TARGET: LogTarget;

    /// Takes one event and appends the orders it gives to `orders`.
    fn step_into(&mut self, event: Event, orders: &mut Vec<Order>);

    /// Whether the local `connection` holds a slot for its handshake: not
    /// refused at accept (SPEC.md §11.3).
    fn in_handshake(&self, connection: ConnectionId) -> bool;

    /// Whether the term is in its grace window (SPEC.md §8.4).
    fn in_grace(&self) -> bool;

    /// Whether a flight (a relay's group) is in progress: a term that ends
    /// with one does not end cleanly (SPEC.md §10.4).
    fn in_progress(&self) -> bool;

    /// Whether the machine keeps relay windows, for the hello (SPEC.md
    /// §18.1).
    fn keeps_relay_windows(&self) -> bool;
}

/// The coordinator of a term (SPEC.md §8), with the buffer of its effects
/// so that a step allocates none.
pub(super) struct Coordinating {
    coordinator: Coordinator,
    effects: Vec<coordinator::Effect>,
}

impl Coordinating {
    pub(super) fn new(coordinator: Coordinator) -> Coordinating {
        Coordinating {
            coordinator,
            effects: Vec::new(),
        }
    }
}

impl Machine for Coordinating {
    const LOG_TARGET: LogTarget = LogTarget::Coordinator;

    fn step_into(&mut self, event: Event, orders: &mut Vec<Order>) {
        // A coordinator has no upstream: nothing reports one to it.
        let Event::Local(event) = event else {
            return;
        };
        self.coordinator.step_into(event, &mut self.effects);
        orders.extend(self.effects.drain(..).map(|effect| match effect {
            coordinator::Effect::Send {
                connection,
                response,
            } => Order::Send {
                connection,
                response,
            },
            coordinator::Effect::Close { connection, reason } => Order::Close {
                connection,
                reason: CloseReason::Coordinator(reason),
            },
            coordinator::Effect::StartTimer { timer, after } => Order::StartTimer { timer, after },
            coordinator::Effect::EndTerm { reason } => Order::EndTerm { reason },
        }));
    }

    fn in_handshake(&self, connection: ConnectionId) -> bool {
        self.coordinator.in_handshake(connection)
    }

    fn in_grace(&self) -> bool {
        self.coordinator.in_grace()
    }

    fn in_progress(&self) -> bool {
        self.coordinator.flights().next().is_some()
    }

    fn keeps_relay_windows(&self) -> bool {
        self.coordinator.keeps_relay_windows()
    }
}

/// The relay of a host term (SPEC.md §18.3), with the buffer of its
/// effects.
pub(super) struct Relaying {
    relay: Relay,
    effects: Vec<relay::Effect>,
}

impl Relaying {
    pub(super) fn new(relay: Relay) -> Relaying {
        Relaying {
            relay,
            effects: Vec::new(),
        }
    }
}

impl Machine for Relaying {
    const LOG_TARGET: LogTarget = LogTarget::Relay;

    fn step_into(&mut self, event: Event, orders: &mut Vec<Order>) {
        let event = match event {
            Event::Local(event) => match event {
                coordinator::Event::ConnectionAccepted { connection } => {
                    relay::Event::ConnectionAccepted { connection }
                }
                coordinator::Event::ConnectionRefused { connection } => {
                    relay::Event::ConnectionRefused { connection }
                }
                // A process of the host that says it relays is served as
                // any other: relay windows are the cluster's (§18.2).
                coordinator::Event::ConnectionOpened { connection, .. } => {
                    relay::Event::ConnectionOpened { connection }
                }
                coordinator::Event::RequestReceived {
                    connection,
                    request,
                } => relay::Event::RequestReceived {
                    connection,
                    request,
                },
                coordinator::Event::ConnectionClosed { connection } => {
                    relay::Event::ConnectionClosed { connection }
                }
                // A host term has no grace window and the relay starts no
                // timer: a host coordinator's death is covered by the
                // cluster's relay window (§18.2, §18.4).
                coordinator::Event::TermBegan | coordinator::Event::TimerFired { .. } => return,
                // Nothing to serve out: the flights are the cluster's, and
                // the host's processes replay to the next host coordinator
                // (§18.4).
                coordinator::Event::StopRequested => {
                    orders.push(Order::EndTerm {
                        reason: EndReason::Stopped,
                    });
                    return;
                }
            },
            Event::Upstream(Upstream::Ready { coordinator }) => {
                // Who answered, for `status` (§3.5), then the connection.
                if let Some(coordinator) = coordinator {
                    self.relay.step_into(
                        relay::Event::UpstreamGreeted { coordinator },
                        &mut self.effects,
                    );
                }
                relay::Event::UpstreamReady
            }
            Event::Upstream(Upstream::Response(response)) => {
                relay::Event::UpstreamResponse(response)
            }
            Event::Upstream(Upstream::Lost) => relay::Event::UpstreamLost,
            Event::Upstream(Upstream::Unavailable(reason)) => {
                relay::Event::UpstreamUnavailable { reason }
            }
        };
        self.relay.step_into(event, &mut self.effects);
        orders.extend(self.effects.drain(..).map(|effect| match effect {
            relay::Effect::Send {
                connection,
                response,
            } => Order::Send {
                connection,
                response,
            },
            relay::Effect::Close { connection, reason } => Order::Close {
                connection,
                reason: CloseReason::Relay(reason),
            },
            relay::Effect::SendUpstream(request) => Order::SendUpstream(request),
        }));
    }

    fn in_handshake(&self, connection: ConnectionId) -> bool {
        self.relay.in_handshake(connection)
    }

    fn in_grace(&self) -> bool {
        false
    }

    fn in_progress(&self) -> bool {
        self.relay.groups() > 0
    }

    fn keeps_relay_windows(&self) -> bool {
        false
    }
}
