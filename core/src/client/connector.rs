//! When a process tries the coordinator, how long it reads a gone one, and
//! when it stops (SPEC.md §9.4, §10.1, §10.4, §14.3, §14.6): the decisions
//! of the shell's connection loop, as a pure machine around the [`Client`].

use std::time::Duration;

use super::io::{self, CallId, CallOptions};
use super::machine::Client;
use super::mutant::{Mutant, Seeded};
use crate::protocol::{Key, Outcome, Response};

/// How long a closing process waits for its lands to be acknowledged, so
/// that its joiners get the values it produced (SPEC.md §10.4); past it the
/// process stops with lands unsettled, which its joiners see `interrupted`.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client reads on from a coordinator whose term is over while
/// no byte comes, before it leaves (SPEC.md §14.3). A term that ends cleanly
/// writes its last answers before its key goes, so they are already on the
/// way when the election tells (a landed value of megabytes takes a while to
/// read); a dead host sends nothing, and costs this much more to leave.
pub const DRAIN_IDLE: Duration = Duration::from_millis(500);

/// A fact the shell reports to the [`Connector`], in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The caller started a call for `key` (as [`io::Event::CallStarted`]).
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
    /// The caller gave up on `call`.
    CallCancelled {
        /// The call given up.
        call: CallId,
    },
    /// The attempt that [`Effect::StartAttempt`] started has ended.
    AttemptEnded {
        /// What it came to.
        attempt: Attempted,
    },
    /// The current connection closed, broke, or brought a malformed line.
    ConnectionLost,
    /// The election says that the coordinator of the current connection no
    /// longer holds its term (SPEC.md §14.3).
    CoordinatorGone {
        /// Bytes read on the current connection so far.
        received: u64,
    },
    /// The caller closes the process, or no handle is left: finish the
    /// lands, then stop (SPEC.md §10.4).
    CloseRequested,
    /// The time that [`Connector::poll_timeout`] gave has come.
    TimerFired {
        /// Bytes read on the current connection so far (0 with none): a
        /// gone coordinator is read while this grows (SPEC.md §14.3).
        received: u64,
    },
}

/// What one attempt to reach or become the coordinator came to (SPEC.md
/// §10.1, §14.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attempted {
    /// Connected, and the coordinator's hello was valid.
    Connected,
    /// This process won a term and serves it; it connects to itself next,
    /// at once.
    Won,
    /// No coordinator could be reached or elected this time; try again
    /// `pause` later, whatever happens meanwhile.
    Missed {
        /// How long after this the next attempt may start: the poll
        /// interval, or zero when the coordinator changed while connecting.
        pause: Duration,
    },
    /// The calls that wait for a coordinator end `Unavailable` (the
    /// election's store failed for good, or the coordinator refused this
    /// process or was refused); try again `pause` later.
    Failed {
        /// How long after this the next attempt may start.
        pause: Duration,
    },
}

/// A command for the shell, to be carried out in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// An effect of the [`Client`]: a request to send on the current
    /// connection, a work to start or stop, a call to resolve, a land
    /// settled.
    Call(io::Effect),
    /// Start one attempt to reach the coordinator, or to become it. It runs
    /// beside everything else; report its end with
    /// [`Event::AttemptEnded`].
    StartAttempt,
    /// Drop the current connection (reader, writer, the election's watch).
    Disconnect,
    /// End `call`, which waits for a coordinator: none could be had. The
    /// reason is the one the failed attempt gave.
    Unavailable {
        /// The call that ends.
        call: CallId,
    },
    /// Stop: abandon the attempt in progress, drop the connection, end the
    /// term if this process serves one, and tell the closer. The connector
    /// takes no event after it.
    Stop,
}

/// Where the connector is with the coordinator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
enum Link {
    /// No connection and no attempt: one starts when the pause is over.
    #[default]
    Idle,
    /// An attempt runs.
    Attempting,
    /// Connected and greeted.
    Connected,
    /// Connected to a coordinator whose term is over, read until `DRAIN_IDLE`
    /// passes without a byte (SPEC.md §14.3).
    Draining {
        /// When to see whether bytes still come.
        deadline: Duration,
        /// Bytes read by the last check.
        checked: u64,
        /// Bytes read by the latest report.
        latest: u64,
        /// Whether a response came since the last check.
        heard: bool,
    },
}

/// The connection loop of one process: reaches (or becomes) the coordinator,
/// paces its attempts, reads a gone coordinator out, reconnects, and closes,
/// around the [`Client`] that decides what to send on each connection.
///
/// # Driving contract
///
/// Time is a [`Duration`] since an origin the shell picks, and never goes
/// backwards; the connector reads no clock. Feed every fact through
/// [`Connector::step`] with the time it happened, and carry out the returned
/// [`Effect`]s in order. Then sleep until [`Connector::poll_timeout`] (or
/// the next fact) and report the timer with [`Event::TimerFired`]. The
/// first attempt starts on the first step; a shell may make it a
/// `TimerFired` at once (the first `poll_timeout` is the origin). Deliver a
/// response only while connected, that is from an [`Attempted::Connected`]
/// until the next [`Effect::Disconnect`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Connector {
    client: Client,
    link: Link,
    /// When the next attempt may start, after one that missed or failed
    /// (SPEC.md §10.1, §14.3); `None`: at once.
    next_attempt: Option<Duration>,
    /// When a close stops, lands settled or not (SPEC.md §10.4).
    closing: Option<Duration>,
    stopped: bool,
    now: Duration,
    pub(super) seeded: Seeded,
}

impl Connector {
    /// A connector with no calls, neither connected nor attempting.
    pub fn new() -> Connector {
        Connector::default()
    }

    /// The client machine whose connections this connector makes.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether the connector has stopped ([`Effect::Stop`]).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether arrivals must be read as they come (SPEC.md §10.1): a call
    /// waits for its answer ([`Client::awaits_answers`]), a gone
    /// coordinator is read out (§14.3: what it sent counts, not when), or a
    /// close waits for its lands' `ack`s (§10.4). Otherwise what comes,
    /// the `ack` of a land, may wait in the socket for the next read.
    pub fn awaits_answers(&self) -> bool {
        self.closing.is_some()
            || matches!(self.link, Link::Draining { .. })
            || self.client.awaits_answers()
    }

    /// When the connector next needs [`Event::TimerFired`], if ever: the
    /// next attempt after a pause, the next look at a gone coordinator, a
    /// close's deadline.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.stopped {
            return None;
        }
        let attempt = match self.link {
            Link::Idle => Some(self.next_attempt.unwrap_or(self.now)),
            _ => None,
        };
        let drain = match self.link {
            Link::Draining { deadline, .. } => Some(deadline),
            _ => None,
        };
        [attempt, drain, self.closing].into_iter().flatten().min()
    }

    /// Takes one fact that happened at `now` and returns what the shell must
    /// do.
    pub fn step(&mut self, now: Duration, event: Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.stopped {
            return effects;
        }
        self.now = self.now.max(now);
        match event {
            Event::CallStarted { call, key, options } => {
                self.client_step(io::Event::CallStarted { call, key, options }, &mut effects);
            }
            Event::ResponseReceived { response } => match &mut self.link {
                Link::Connected => {
                    self.client_step(io::Event::ResponseReceived { response }, &mut effects);
                }
                Link::Draining { heard, .. } => {
                    *heard = true;
                    self.client_step(io::Event::ResponseReceived { response }, &mut effects);
                }
                // Not from a connection the client knows (§9.4).
                Link::Idle | Link::Attempting => {}
            },
            Event::WorkFinished { call, outcome } => {
                self.client_step(io::Event::WorkFinished { call, outcome }, &mut effects);
            }
            Event::CallCancelled { call } => {
                self.client_step(io::Event::CallCancelled { call }, &mut effects);
            }
            Event::AttemptEnded { attempt } => self.attempted(attempt, &mut effects),
            Event::ConnectionLost => {
                if matches!(self.link, Link::Connected | Link::Draining { .. }) {
                    self.leave(&mut effects);
                }
            }
            Event::CoordinatorGone { received } => {
                if self.link == Link::Connected {
                    // §14.3: read on what the gone coordinator already sent.
                    let idle = self.hook(
                        Mutant::LeavesGoneCoordinatorAtOnce,
                        DRAIN_IDLE,
                        Duration::ZERO,
                    );
                    self.link = Link::Draining {
                        deadline: self.now.saturating_add(idle),
                        checked: received,
                        latest: received,
                        heard: false,
                    };
                }
            }
            Event::CloseRequested => {
                self.closing
                    .get_or_insert(self.now.saturating_add(CLOSE_TIMEOUT));
            }
            Event::TimerFired { received } => {
                if let Link::Draining { latest, .. } = &mut self.link {
                    *latest = received.max(*latest);
                }
            }
        }
        self.poll(&mut effects);
        effects
    }

    fn client_step(&mut self, event: io::Event, effects: &mut Vec<Effect>) {
        effects.extend(self.client.step(event).into_iter().map(Effect::Call));
    }

    fn attempted(&mut self, attempt: Attempted, effects: &mut Vec<Effect>) {
        if self.link != Link::Attempting {
            return;
        }
        self.link = Link::Idle;
        match attempt {
            Attempted::Connected => {
                self.link = Link::Connected;
                // §9.4: the new coordinator learns what it must know.
                self.client_step(io::Event::ConnectionReady, effects);
            }
            // It connects to itself at once.
            Attempted::Won => self.next_attempt = None,
            Attempted::Missed { pause } => self.next_attempt = Some(self.now.saturating_add(pause)),
            Attempted::Failed { pause } => {
                // §14.6: the calls whose work runs go on; their result is
                // their own.
                for call in self.client.waiting_calls() {
                    self.client_step(io::Event::CallCancelled { call }, effects);
                    effects.push(Effect::Unavailable { call });
                }
                self.next_attempt = Some(self.now.saturating_add(pause));
            }
        }
    }

    /// Leaves the current connection; the next attempt starts at once.
    fn leave(&mut self, effects: &mut Vec<Effect>) {
        self.link = Link::Idle;
        self.next_attempt = None;
        effects.push(Effect::Disconnect);
        self.client_step(io::Event::ConnectionLost, effects);
    }

    /// What the time and the state call for after each step: a drain's
    /// look, a close's end, the next attempt.
    fn poll(&mut self, effects: &mut Vec<Effect>) {
        let now = self.now;
        if let Link::Draining {
            deadline,
            checked,
            latest,
            heard,
        } = &mut self.link
            && now >= *deadline
        {
            if *heard || *latest > *checked {
                // §14.3: bytes still come; read on.
                *deadline = now.saturating_add(DRAIN_IDLE);
                *checked = *latest;
                *heard = false;
            } else {
                self.leave(effects);
            }
        }
        if let Some(deadline) = self.closing
            && (self.client.is_idle() || now >= deadline)
        {
            // §10.4, §14.6: an attempt in progress is abandoned; with
            // nothing left to land, a close waits for no coordinator.
            self.stopped = true;
            effects.push(Effect::Stop);
            return;
        }
        if self.link == Link::Idle {
            // §10.1, §14.3: after an attempt that missed or failed, the next
            // one comes its pause later, whatever woke the process: a caller
            // that retries at once on `Unavailable` must not turn attempts,
            // each a read from the election's store, into a busy loop.
            let due = self.hook(
                Mutant::RetriesOnEveryWake,
                self.next_attempt.is_none_or(|at| now >= at),
                true,
            );
            if due {
                self.link = Link::Attempting;
                self.next_attempt = None;
                effects.push(Effect::StartAttempt);
            }
        }
    }
}
