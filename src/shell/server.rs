//! The coordinator's side of the socket (SPEC.md §10, §11): accepts
//! connections, runs the handshake, feeds the term's pure machine (the
//! [`Coordinator`], or a host coordinator's relay, §18.3, through
//! `super::machine`) and carries out its orders, the relay's upstream ones
//! on its connection to the cluster (`super::upstream`). It runs on the
//! single-flight thread of the process that won the election.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::time::{DelayQueue, delay_queue};
use tracing::{debug, info, warn};

use super::backlog::{self, MAX_QUEUED_BYTES, MAX_UPSTREAM_QUEUED_BYTES, SlowReaders};
use super::clock::Clock;
use super::lines::{LineError, Lines};
use super::machine::{self, Coordinating, LogTarget, Machine, Order, Relaying};
use super::mutant::{Mutant, Seeded};
use super::options::{HANDSHAKE_TIMEOUT, Options};
use super::upstream::{NoUpstream, Reached, Unreached, Upstream};
use crate::client::connector::DRAIN_IDLE;
pub(super) use crate::coordinator::Lifetime;
use crate::coordinator::{
    self, ConnectionId, Coordinator, EndReason, Ending, Event, Needed, Timer,
};
use crate::election::{CHECK_INTERVAL, Term, Warrant};
use crate::protocol::{
    CoordinatorHello, CoordinatorIdentity, Epoch, HandshakeError, HostId, Incoming, Key,
    LineEncoder, MAX_HOST_BYTES, PROTOCOL_NAME, PROTOCOL_VERSION, Reason, Response,
    decode_client_hello, decode_request, decode_response, encode, limits::MAX_FRAME_BYTES,
};
use crate::relay::Relay;
use crate::transport::{Connection, Listener};

/// The tracing target of every line the coordinator logs, named rather than
/// left to the module path, so that moving this module changes no log
/// filter. The cluster chaos harness's checker matches it in the workers'
/// logs (the terms and their answers, RELIABILITY.md).
pub const LOG_TARGET: &str = "single_flight::coordinator";

/// The tracing target of every line a host term logs (SPEC.md §13.1,
/// §18.3): its own, so that a host coordinator's lines (its `coordinating`,
/// the answers it relays to its host's processes) are never read as the
/// cluster's coordinator's by a filter or by the chaos checker.
pub const RELAY_LOG_TARGET: &str = "single_flight::relay";

/// Logs an event of a term under its machine's target
/// ([`Machine::LOG_TARGET`]): `term_log!(target, level, fields and
/// message)`. Tracing keeps an event's target in a static of its call site,
/// which code generic over the machine cannot take from the machine's type,
/// so each target has a call site of its own here, and the server names
/// the machine's target, never which machine it serves.
macro_rules! term_log {
    ($target:expr, $level:ident, $($event:tt)+) => {
        match $target {
            LogTarget::Coordinator => tracing::$level!(target: LOG_TARGET, $($event)+),
            LogTarget::Relay => tracing::$level!(target: RELAY_LOG_TARGET, $($event)+),
        }
    };
}

/// Requests read ahead of the coordinator across all connections. When the
/// coordinator falls behind, readers wait, and the kernel's socket buffers
/// push back on the clients.
const EVENT_QUEUE: usize = 1024;

/// The pause after a failed `accept` (SPEC.md §11.3).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// How long an ending term waits for its last answers to be written, on
/// top of [`flush_time`] for the bytes still queued. A client that does not
/// read them in that time learns of the end from the closed connection
/// instead.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// The slowest a reading client is expected to take queued bytes at the
/// end of a term: a landed value of megabytes over TLS to a process on a
/// loaded host. 1 MiB/s gives the largest frame 8 s more, where a fixed
/// second would cut such a line off, and its joiner, which had its value all
/// but delivered, would be told `interrupted`.
const FLUSH_BYTES_PER_SECOND: f64 = (1 << 20) as f64;

/// How long `queued` bytes may take to reach a client at the end of a term.
fn flush_time(queued: usize) -> Duration {
    FLUSH_TIMEOUT + Duration::from_secs_f64(queued as f64 / FLUSH_BYTES_PER_SECOND)
}

/// How long an ending term waits for its last answers (SPEC.md §10.4), given
/// the bytes still queued for each connection: the writers drain at once,
/// so the wait is for the one with the most to write.
fn flush_patience(queued: impl IntoIterator<Item = usize>) -> Duration {
    queued
        .into_iter()
        .map(flush_time)
        .max()
        .unwrap_or(FLUSH_TIMEOUT)
}

/// What the connection tasks report to the coordinator's loop.
enum Report {
    Opened {
        connection: ConnectionId,
        writer: Writer,
        /// The host its client relays for, when its hello said so (SPEC.md
        /// §18.1).
        relay: Option<HostId>,
    },
    Request {
        connection: ConnectionId,
        request: Incoming,
    },
    Closed {
        connection: ConnectionId,
    },
    /// A connection to the cluster's coordinator finished its relay hello
    /// (SPEC.md §18.1); `relays` when that coordinator keeps relay windows.
    UpstreamOpened {
        writer: Writer,
        relays: bool,
        /// The coordinator reached, as its hello named it (SPEC.md §4.2).
        coordinator: Option<CoordinatorIdentity>,
        /// Dropped to make the upstream task leave the connection (its
        /// backlog, SPEC.md §18.3); the task then reports it lost.
        leave: oneshot::Sender<()>,
    },
    /// A line of the connection to the cluster's coordinator.
    UpstreamResponse(Response),
    /// The connection to the cluster's coordinator is gone.
    UpstreamLost,
    /// An attempt to reach the cluster's coordinator failed, for this
    /// reason (SPEC.md §18.3, "Unavailable").
    UpstreamUnavailable(Reason),
    /// The connection was refused or closed before it opened. `refused` when
    /// this side refused it (the transport's check of the peer, or its
    /// hello), not when the peer left before its hello (SPEC.md §8.11).
    Abandoned {
        connection: ConnectionId,
        refused: bool,
    },
}

/// The sending side of one connection.
struct Writer {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// A term being served. Dropping `stop` (or sending on it) ends the term
/// cleanly; the task then resigns.
pub(super) struct Serving {
    pub stop: oneshot::Sender<()>,
    pub done: tokio::task::JoinHandle<()>,
}

/// Serves `term` on `listener`, on the current (single-flight) runtime.
pub(super) fn start<T: Term, L: Listener>(term: T, listener: L, options: &Options) -> Serving {
    start_for(term, listener, options, Lifetime::UntilStopped)
}

/// [`start`], for the given [`Lifetime`].
pub(super) fn start_for<T: Term, L: Listener>(
    term: T,
    listener: L,
    options: &Options,
    lifetime: Lifetime,
) -> Serving {
    let kind = if term.follows_failover() {
        coordinator::Term::AfterFailover {
            grace_window: options.grace_window,
        }
    } else {
        coordinator::Term::First
    };
    info!(target: LOG_TARGET, epoch = %term.epoch(), term = ?kind, "coordinating");
    // §18.2: a relay window lasts the term's grace window length, also for a
    // term that opened without a grace window. Only a cluster's term keeps
    // them: nobody relays to a directory's.
    let mut coordinator = Coordinator::new(term.epoch(), kind);
    if term.takes_relays() {
        coordinator = coordinator.with_relay_window(options.grace_window);
    }
    start_with(
        term,
        listener,
        options,
        lifetime,
        Coordinating::new(coordinator),
        None::<NoUpstream>,
    )
}

/// Serves `term` of a host directory on `listener` with the relay (SPEC.md
/// §18.3), which reaches the cluster's coordinator through `upstream`.
#[cfg(test)]
pub(super) fn start_relay<T: Term, L: Listener, U: Upstream>(
    term: T,
    listener: L,
    options: &Options,
    lifetime: Lifetime,
    upstream: U,
) -> Serving {
    start_relay_for(None, term, listener, options, lifetime, upstream)
}

/// [`start_relay`] for the host `host` relays under (SPEC.md §18.6), which
/// the relay's `status` answers name (§3.5).
pub(super) fn start_relay_for<T: Term, L: Listener, U: Upstream>(
    host: Option<HostId>,
    term: T,
    listener: L,
    options: &Options,
    lifetime: Lifetime,
    upstream: U,
) -> Serving {
    info!(target: RELAY_LOG_TARGET, epoch = %term.epoch(), "coordinating the host, relaying to the cluster (SPEC.md §18.3)");
    let relay = match host {
        Some(host) => Relay::new().with_host(host),
        None => Relay::new(),
    };
    start_with(
        term,
        listener,
        options,
        lifetime,
        Relaying::new(relay),
        Some(upstream),
    )
}

/// Serves `term` on `listener` with `machine`, and `upstream` when the
/// machine relays.
fn start_with<T: Term, L: Listener, M: Machine, U: Upstream>(
    term: T,
    listener: L,
    options: &Options,
    lifetime: Lifetime,
    machine: M,
    upstream: Option<U>,
) -> Serving {
    let (stop, stopped) = oneshot::channel();
    let hello = CoordinatorHello {
        protocol: PROTOCOL_NAME.to_owned(),
        version: PROTOCOL_VERSION,
        epoch: term.epoch().to_string(),
        pid: std::process::id(),
        host: host_name(),
        // §18.1: the hello says that this term keeps relay windows.
        relays: machine.keeps_relay_windows(),
    };
    let server = Server {
        machine,
        epoch: term.epoch(),
        upstream,
        upstream_writer: None,
        upstream_leave: None,
        upstream_task: None,
        warned_no_relay_windows: false,
        hello,
        warrant: term.warrant(),
        term,
        listener,
        writers: BTreeMap::new(),
        readers: BTreeMap::new(),
        next_connection: 0,
        timers: DelayQueue::new(),
        reuse_timer_of: BTreeMap::new(),
        ending: Ending::new(lifetime),
        started: options.clock.now(),
        clock: options.clock,
        seeded: options.seeded,
        orders: Vec::new(),
    };
    let done = tokio::spawn(server.serve(stopped));
    Serving { stop, done }
}

struct Server<M, T, L, U> {
    /// What the term serves: the coordinator, or the relay.
    machine: M,
    /// The term's epoch, for the logs.
    epoch: Epoch,
    /// How the relay reaches the cluster's coordinator, until its task
    /// starts; `None` for a coordinator.
    upstream: Option<U>,
    /// The writer of the connection to the cluster's coordinator while one
    /// is ready (SPEC.md §18.3).
    upstream_writer: Option<Writer>,
    /// Held while that connection is ready; dropped, it makes the upstream
    /// task leave the connection (`Report::UpstreamOpened`).
    upstream_leave: Option<oneshot::Sender<()>>,
    /// The task that reaches and reads the cluster's coordinator.
    upstream_task: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// Whether this term said that the cluster's coordinator keeps no relay
    /// windows: once per term (SPEC.md §18.1).
    warned_no_relay_windows: bool,
    /// The first line of every connection of the term (SPEC.md §4.2).
    hello: CoordinatorHello,
    term: T,
    /// Asked before every answer, here and in each connection's writer
    /// (SPEC.md §14.2).
    warrant: Warrant,
    listener: L,
    writers: BTreeMap<ConnectionId, Writer>,
    readers: BTreeMap<ConnectionId, AbortHandle>,
    next_connection: u64,
    /// The timers the coordinator started ([`Effect::StartTimer`]): the
    /// grace window's, and the reuse windows of the values it keeps (SPEC.md
    /// §16.2), one per key: a key that lands again replaces its timer, as
    /// the coordinator replaces its value, so there are never more timers
    /// than keys landed within the longest window.
    timers: DelayQueue<Timer>,
    reuse_timer_of: BTreeMap<Key, delay_queue::Key>,
    /// When a term served while needed ends by itself (SPEC.md §16.4),
    /// decided by a pure machine; `started` is when the term began serving,
    /// for its time. A stop is the coordinator's to decide (§10.4).
    ending: Ending,
    started: tokio::time::Instant,
    /// What the periodic check ticks on (`super::clock`).
    clock: Clock,
    /// The shell's seeded bug, if any (SPEC.md §12.7).
    seeded: Seeded,
    /// The machine's orders of the step in progress, one buffer for the term
    /// so that a step allocates none (`Machine::step_into`).
    orders: Vec<Order>,
}

/// This machine's name for the hello (SPEC.md §4.2), when it is one a
/// client accepts; `None` leaves it out.
fn host_name() -> Option<String> {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let acceptable =
        !name.is_empty() && name.len() <= MAX_HOST_BYTES && !name.chars().any(char::is_control);
    acceptable.then_some(name)
}

/// How a term ends.
enum End {
    /// Asked to stop: the process is shutting down.
    Stopped,
    /// The term cannot go on (lost lock file, exhausted tokens).
    Lost,
}

impl<M: Machine, T: Term, L: Listener, U: Upstream> Server<M, T, L, U> {
    async fn serve(mut self, mut stopped: oneshot::Receiver<()>) {
        let (reports, mut inbox) = mpsc::channel(EVENT_QUEUE);
        let mut checks = self.clock.every(CHECK_INTERVAL);
        if let Some(upstream) = self.upstream.take() {
            let (stop, stopped) = oneshot::channel();
            let task = tokio::spawn(upstream_task(
                upstream,
                reports.clone(),
                self.warrant.clone(),
                self.seeded,
                stopped,
            ));
            self.upstream_task = Some((stop, task));
        }
        if let Err(end) = self.step(Event::TermBegan) {
            return self.end(end).await;
        }
        // The stop is reported once: a finished receiver is not polled again.
        let mut stop_reported = false;
        let end = loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(incoming) => {
                        if let Err(end) = self.accept(incoming, &reports) {
                            break end;
                        }
                    }
                    Err(error) => {
                        // Out of descriptors or memory: an immediate retry
                        // would fail the same way and spin.
                        term_log!(M::LOG_TARGET, warn, %error, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                Some(report) = inbox.recv() => {
                    if let Err(end) = self.report(report) {
                        break end;
                    }
                }
                Some(expired) = std::future::poll_fn(|context| self.timers.poll_expired(context)) => {
                    let timer = expired.into_inner();
                    match &timer {
                        Timer::GraceWindow => {
                            term_log!(M::LOG_TARGET, info, epoch = %self.epoch, "grace window over");
                        }
                        Timer::Reuse { key, .. } => {
                            self.reuse_timer_of.remove(key);
                        }
                        Timer::RelayWindow { host, .. } => {
                            term_log!(M::LOG_TARGET, debug, epoch = %self.epoch, %host, "a relay window is over (SPEC.md §18.2)");
                        }
                    }
                    if let Err(end) = self.step(Event::TimerFired { timer }) {
                        break end;
                    }
                }
                now = checks.tick() => {
                    if !self.check() {
                        break End::Lost;
                    }
                    let served = now.duration_since(self.started);
                    if self.ending.ends_at_check(served, &self.needed()) {
                        term_log!(M::LOG_TARGET, info, epoch = %self.epoch, "no client and no kept value left; ending the term (SPEC.md §16.4)");
                        break End::Stopped;
                    }
                }
                _ = &mut stopped, if !stop_reported => {
                    stop_reported = true;
                    if let Err(end) = self.step(Event::StopRequested) {
                        break end;
                    }
                    term_log!(M::LOG_TARGET, info, epoch = %self.epoch, "asked to stop inside the grace window; serving until it ends (SPEC.md §10.4)");
                }
            }
        };
        self.end(end).await;
    }

    /// What may still need the term, for its [`Ending`]: a connection is
    /// open or in its handshake while it has a reader or a writer.
    fn needed(&self) -> Needed {
        Needed {
            in_grace: self.machine.in_grace(),
            connections: self.readers.len().max(self.writers.len()),
            flights: self.machine.in_progress(),
            kept: self.reuse_timer_of.len(),
        }
    }

    /// Starts the handshake of an accepted connection, unless the
    /// coordinator refused it (SPEC.md §11.3); an error when the term ends.
    fn accept(&mut self, incoming: L::Incoming, reports: &mpsc::Sender<Report>) -> Result<(), End> {
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        self.step(Event::ConnectionAccepted { connection })?;
        if !self.machine.in_handshake(connection) {
            // Refused: dropping `incoming` closes it.
            return Ok(());
        }
        self.ending.connection_accepted();
        let task = tokio::spawn(connection_task::<L>(
            M::LOG_TARGET,
            incoming,
            connection,
            self.hello.clone(),
            reports.clone(),
            self.warrant.clone(),
            self.seeded,
        ));
        self.readers.insert(connection, task.abort_handle());
        Ok(())
    }

    /// Feeds one report to the coordinator; an error when the term ends.
    fn report(&mut self, report: Report) -> Result<(), End> {
        match report {
            Report::Opened {
                connection,
                writer,
                relay,
            } => {
                self.writers.insert(connection, writer);
                self.step(Event::ConnectionOpened { connection, relay })
            }
            Report::Request {
                connection,
                request,
            } => self.step(Event::RequestReceived {
                connection,
                request,
            }),
            Report::Closed { connection } => {
                self.forget(connection);
                self.step(Event::ConnectionClosed { connection })
            }
            Report::UpstreamOpened {
                writer,
                relays,
                coordinator,
                leave,
            } => {
                if !relays && !self.warned_no_relay_windows {
                    self.warned_no_relay_windows = true;
                    term_log!(M::LOG_TARGET, warn, epoch = %self.epoch, "the cluster's coordinator keeps no relay windows: this host's flights are interrupted at once if this process dies (SPEC.md §18.1)");
                }
                self.upstream_writer = Some(writer);
                self.upstream_leave = Some(leave);
                self.step_machine(machine::Event::Upstream(machine::Upstream::Ready {
                    coordinator,
                }))
            }
            Report::UpstreamResponse(response) => self.step_machine(machine::Event::Upstream(
                machine::Upstream::Response(response),
            )),
            Report::UpstreamLost => {
                term_log!(M::LOG_TARGET, info, epoch = %self.epoch, "the connection to the cluster's coordinator is lost; this host's processes replay their calls through the next one (SPEC.md §18.3)");
                self.leave_upstream();
                self.step_machine(machine::Event::Upstream(machine::Upstream::Lost))
            }
            Report::UpstreamUnavailable(reason) => self.step_machine(machine::Event::Upstream(
                machine::Upstream::Unavailable(reason),
            )),
            Report::Abandoned {
                connection,
                refused,
            } => {
                self.readers.remove(&connection);
                // §11.3: either way its slot is free again; §8.11: only a
                // refusal counts.
                self.step(if refused {
                    Event::ConnectionRefused { connection }
                } else {
                    Event::ConnectionClosed { connection }
                })
            }
        }
    }

    /// Runs one local event through the machine (SPEC.md §8.1).
    fn step(&mut self, event: Event) -> Result<(), End> {
        self.step_machine(machine::Event::Local(event))
    }

    /// Runs one event through the machine and carries out its orders in
    /// order; an error when the term ends, and how.
    fn step_machine(&mut self, event: machine::Event) -> Result<(), End> {
        // A term that can no longer prove it holds answers nothing more,
        // not even to the event that woke it: another coordinator may serve
        // already (SPEC.md §7).
        if !self.still_holds() {
            return Err(End::Lost);
        }
        let mut slow = SlowReaders::default();
        let mut encoder = LineEncoder::default();
        // Taken while the orders are carried out: a nested step (below)
        // finds it empty and uses a buffer of its own.
        let mut orders = std::mem::take(&mut self.orders);
        self.machine.step_into(event, &mut orders);
        for order in orders.drain(..) {
            match order {
                Order::Send {
                    connection,
                    response,
                } => {
                    // Asked again at every answer: one event can answer
                    // thousands of joiners, and a process stopped among
                    // them must not go on answering when it resumes.
                    if !self.still_holds() {
                        return Err(End::Lost);
                    }
                    trace_response(M::LOG_TARGET, connection, &response);
                    self.enqueue(connection, encoder.line(&response), &mut slow);
                }
                Order::Close { connection, reason } => {
                    // A relay that lost the cluster closes every process of
                    // its host at once (SPEC.md §18.3), which is logged once
                    // with the loss; a line each would be noise.
                    if matches!(
                        reason,
                        machine::CloseReason::Relay(crate::relay::CloseReason::UpstreamLost)
                    ) {
                        term_log!(
                            M::LOG_TARGET,
                            debug,
                            ?connection,
                            ?reason,
                            "closing a connection"
                        );
                    } else {
                        term_log!(
                            M::LOG_TARGET,
                            warn,
                            ?connection,
                            ?reason,
                            "closing a connection"
                        );
                    }
                    self.close_after_queued(connection);
                }
                Order::StartTimer { timer, after } => self.start_timer(timer, after),
                Order::SendUpstream(request) => {
                    // The relay orders it only while a connection is ready
                    // (SPEC.md §18.3); one whose writer is gone is reported
                    // lost by its reader, and so is one given up for its
                    // backlog: the requests of the step meanwhile go nowhere,
                    // as on a connection that broke.
                    if let Some(writer) = &self.upstream_writer {
                        let mut line = encode(&request).into_bytes();
                        line.push(b'\n');
                        let unwritten = writer.queued.load(Ordering::Acquire);
                        if backlog::upstream_admits(unwritten, line.len()) {
                            writer.queued.fetch_add(line.len(), Ordering::AcqRel);
                            let _ = writer.lines.send(line);
                        } else {
                            term_log!(
                                M::LOG_TARGET,
                                warn,
                                limit = MAX_UPSTREAM_QUEUED_BYTES,
                                "the cluster's coordinator does not read this host's requests; leaving it, and the host's processes replay on the next connection (SPEC.md §18.3)"
                            );
                            self.leave_upstream();
                        }
                    }
                }
                // The last effect of its step: the coordinator ignores
                // every event from now on.
                Order::EndTerm {
                    reason: EndReason::Stopped,
                } => return Err(End::Stopped),
                Order::EndTerm {
                    reason: EndReason::OutOfTokens,
                } => {
                    term_log!(M::LOG_TARGET, warn, epoch = %self.epoch, "this term has minted its last token; ending it (SPEC.md §8.9)");
                    return Err(End::Lost);
                }
            }
        }
        self.orders = orders;
        // §11.3: a client too slow to read loses its connection, after the
        // step, so that the effects of this event stay in order.
        for connection in slow.take() {
            term_log!(
                M::LOG_TARGET,
                warn,
                ?connection,
                limit = MAX_QUEUED_BYTES,
                "closing a connection that does not read its responses"
            );
            self.forget(connection);
            self.step(Event::ConnectionClosed { connection })?;
        }
        Ok(())
    }

    /// Stops writing to the connection to the cluster's coordinator, and
    /// makes its task leave it, which then reports it lost (SPEC.md §18.3).
    fn leave_upstream(&mut self) {
        if let Some(writer) = self.upstream_writer.take() {
            writer.task.abort();
        }
        self.upstream_leave = None;
    }

    /// Closes the connection to the cluster's coordinator once the lines
    /// queued for it are written, or once a reader that takes them at the
    /// slowest expected rate would have had them (as a local connection at
    /// the term's end), so that the cluster's coordinator sees this host
    /// coordinator gone at once (SPEC.md §18.2).
    async fn close_upstream_after_queued(&mut self) {
        self.upstream_leave = None;
        let Some(writer) = self.upstream_writer.take() else {
            return;
        };
        let patience = flush_patience([writer.queued.load(Ordering::Acquire)]);
        drop(writer.lines);
        let abort = writer.task.abort_handle();
        if tokio::time::timeout(patience, writer.task).await.is_err() {
            abort.abort();
        }
    }

    /// Whether the term may still answer (SPEC.md §14.2); says so when not.
    fn still_holds(&self) -> bool {
        let holds = self.warrant.holds();
        if !holds {
            term_log!(M::LOG_TARGET, warn, epoch = %self.epoch, "this term can no longer prove it holds; ending it before it answers");
        }
        holds
    }

    /// Starts a timer of the coordinator's. A key's reuse timer replaces the
    /// key's earlier one, whose value the coordinator has replaced already
    /// (SPEC.md §16.2).
    fn start_timer(&mut self, timer: Timer, after: Duration) {
        let key = match &timer {
            Timer::GraceWindow | Timer::RelayWindow { .. } => None,
            Timer::Reuse { key, .. } => Some(key.clone()),
        };
        let started = self.timers.insert(timer, after);
        if let Some(key) = key
            && let Some(earlier) = self.reuse_timer_of.insert(key, started)
        {
            self.timers.remove(&earlier);
        }
    }

    /// Queues a line for a connection, unless `slow` finds it over its
    /// bound (SPEC.md §11.3); a connection whose writer is gone is closed as
    /// well.
    fn enqueue(&mut self, connection: ConnectionId, line: Vec<u8>, slow: &mut SlowReaders) {
        let Some(writer) = self.writers.get(&connection) else {
            return;
        };
        let unwritten = writer.queued.load(Ordering::Acquire);
        if !slow.admits(connection, unwritten, line.len()) {
            return;
        }
        writer.queued.fetch_add(line.len(), Ordering::AcqRel);
        if writer.lines.send(line).is_err() {
            slow.writer_gone(connection);
        }
    }

    /// Stops both tasks of a connection, which closes it. The writer is
    /// aborted, not left to drain: a client that does not read would keep
    /// it blocked, and with it the socket open (SPEC.md §11.3).
    fn forget(&mut self, connection: ConnectionId) {
        if let Some(writer) = self.writers.remove(&connection) {
            writer.task.abort();
        }
        if let Some(reader) = self.readers.remove(&connection) {
            reader.abort();
        }
    }

    /// Closes `connection` once the lines its machine ordered before the
    /// close are written: effects are in order, and a relay that closes
    /// its host's connections when it loses the cluster (SPEC.md §18.3)
    /// has just ordered the `landed` that it read last sent to them. The
    /// writer gets as long as at the end of a term ([`flush_time`]); a
    /// client that does not read in that time loses the rest, as it would
    /// at the end of the term.
    fn close_after_queued(&mut self, connection: ConnectionId) {
        if let Some(reader) = self.readers.remove(&connection) {
            reader.abort();
        }
        let Some(Writer {
            lines,
            queued,
            task,
        }) = self.writers.remove(&connection)
        else {
            return;
        };
        drop(lines);
        let patience = flush_time(queued.load(Ordering::Acquire));
        let abort = task.abort_handle();
        tokio::spawn(async move {
            if tokio::time::timeout(patience, task).await.is_err() {
                abort.abort();
            }
        });
    }

    /// §7.2, §11.1: the term and its listener must still be its own.
    fn check(&mut self) -> bool {
        if let Err(error) = self.term.check() {
            term_log!(M::LOG_TARGET, warn, %error, "ending the term");
            return false;
        }
        if let Err(error) = self.listener.check() {
            term_log!(M::LOG_TARGET, warn, %error, "cannot listen any more; ending the term");
            return false;
        }
        true
    }

    async fn end(mut self, end: End) {
        let clean = matches!(end, End::Stopped) && !self.machine.in_progress();
        // The relay's connection to the cluster closes with the term: the
        // cluster keeps the host's flights for its next coordinator (§18.2).
        // It closes first, its queued lines written: the cluster's term
        // this process serves, if any, is asked to stop after it, and one
        // asked inside its grace window serves the window out (§10.4); a
        // connection it still took for open would be granted leads that
        // nobody reads, and its host's flights lost to the other hosts'
        // joiners (§18.5). That term ends on its own, awaited last: this
        // host term ends and resigns at once, so that the host's next
        // coordinator relays its processes' replays while that grace window
        // still takes them.
        self.close_upstream_after_queued().await;
        let cluster_term = self.upstream_task.take().map(|(stop, task)| {
            let _ = stop.send(());
            task
        });
        for reader in std::mem::take(&mut self.readers).into_values() {
            reader.abort();
        }
        // The last answers (an `interrupted`, an `ack`) still reach their
        // clients: each writer drains its queue, then closes its connection.
        // They drain at once; the wait is for the one with the most to write.
        let writers = std::mem::take(&mut self.writers).into_values();
        let mut queued = Vec::new();
        let tasks: Vec<_> = writers
            .map(|writer| {
                queued.push(writer.queued.load(Ordering::Acquire));
                drop(writer.lines);
                writer.task
            })
            .collect();
        let patience = self.seeded.hook(
            Mutant::FixedEndOfTermFlush,
            flush_patience(queued),
            FLUSH_TIMEOUT,
        );
        let aborts: Vec<AbortHandle> = tasks.iter().map(|task| task.abort_handle()).collect();
        let flushed = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(patience, flushed).await.is_err() {
            // Whoever did not read in time is closed now, not at exit.
            for abort in aborts {
                abort.abort();
            }
        }
        self.listener.close();
        term_log!(M::LOG_TARGET, info, epoch = %self.epoch, clean, "term over");
        self.term.resign(clean).await;
        // The process may exit only once the cluster's term it serves has
        // ended (§10.4).
        if let Some(task) = cluster_term {
            let _ = task.await;
        }
    }
}

fn trace_response(target: LogTarget, connection: ConnectionId, response: &Response) {
    match response {
        Response::Lead { id, token } => {
            term_log!(target, debug, ?connection, %id, %token, "lead")
        }
        Response::Joined { id, flight } => {
            term_log!(target, debug, ?connection, %id, %flight, "joined")
        }
        Response::Landed { id, .. } => term_log!(target, debug, ?connection, %id, "landed"),
        Response::Interrupted { id } => term_log!(target, debug, ?connection, %id, "interrupted"),
        Response::Rejected { id } => term_log!(target, debug, ?connection, %id, "rejected"),
        Response::Stop { id } => term_log!(target, debug, ?connection, %id, "stop: nobody waits"),
        Response::Reused { id, flight, .. } => {
            term_log!(target, debug, ?connection, %id, %flight, "reused")
        }
        _ => {}
    }
}

/// One connection: handshake, then requests until it closes (SPEC.md §4).
async fn connection_task<L: Listener>(
    target: LogTarget,
    incoming: L::Incoming,
    connection: ConnectionId,
    hello: CoordinatorHello,
    reports: mpsc::Sender<Report>,
    warrant: Warrant,
    seeded: Seeded,
) {
    let (mut lines, writer, relay) =
        match handshake::<L>(target, incoming, connection, hello, warrant, seeded).await {
            Ok(open) => open,
            Err(refused) => {
                // The slot is freed, or failed handshakes would fill the table of
                // connections and shut every client out (§11.3).
                let refused = refused == NotOpened::Refused;
                let _ = reports
                    .send(Report::Abandoned {
                        connection,
                        refused,
                    })
                    .await;
                return;
            }
        };
    if reports
        .send(Report::Opened {
            connection,
            writer,
            relay,
        })
        .await
        .is_err()
    {
        return;
    }
    loop {
        let request = match lines.next().await {
            Ok(line) => match decode_request(&line) {
                Ok(request) => request,
                Err(error) => {
                    term_log!(target, warn, ?connection, %error, "closing a connection that sent a malformed request (SPEC.md §3.7)");
                    break;
                }
            },
            Err(LineError::Closed) => break,
            Err(error) => {
                term_log!(target, warn, ?connection, %error, "closing a connection");
                break;
            }
        };
        if reports
            .send(Report::Request {
                connection,
                request,
            })
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = reports.send(Report::Closed { connection }).await;
}

/// Why a connection closed before it opened.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NotOpened {
    /// This side refused it: the peer failed the transport's check (§11.2,
    /// §14.5), or sent no acceptable hello (§4.2) within
    /// [`HANDSHAKE_TIMEOUT`].
    Refused,
    /// The peer closed it before its hello.
    Left,
}

/// Checks the peer and exchanges hellos (SPEC.md §4.2, §11.2); an error when
/// the connection is refused or closed before it is open.
async fn handshake<L: Listener>(
    target: LogTarget,
    incoming: L::Incoming,
    connection: ConnectionId,
    hello: CoordinatorHello,
    warrant: Warrant,
    seeded: Seeded,
) -> Result<(Lines<L::Reader>, Writer, Option<HostId>), NotOpened> {
    let Connection { reader, writer } = match L::establish(incoming).await {
        Ok(established) => established,
        Err(error) => {
            term_log!(target, warn, ?connection, %error, "refused a connection (SPEC.md §11.2)");
            return Err(NotOpened::Refused);
        }
    };
    let (lines_out, outgoing) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(write_lines(
        writer,
        outgoing,
        queued.clone(),
        warrant,
        seeded,
    ));
    let mut lines = Lines::new(reader);
    let mut our_hello = serde_json::to_vec(&hello).expect("a hello always serializes");
    our_hello.push(b'\n');
    let first = match tokio::time::timeout(HANDSHAKE_TIMEOUT, lines.next()).await {
        Ok(Ok(line)) => line,
        Ok(Err(error)) => {
            term_log!(target, debug, ?connection, %error, "closed before its hello");
            return Err(NotOpened::Left);
        }
        Err(_) => {
            term_log!(target, debug, ?connection, "no hello in time; closing");
            return Err(NotOpened::Refused);
        }
    };
    let client = match decode_client_hello(&first) {
        Ok(client) => client,
        Err(error) => {
            // §4.2: a client of another version learns ours before the close.
            if matches!(error, HandshakeError::Version(_)) {
                let _ = lines_out.send(our_hello);
            }
            term_log!(target, warn, ?connection, %error, "refused a handshake");
            return Err(NotOpened::Refused);
        }
    };
    let relay = client.relay.map(|relay| relay.host);
    if let Some(host) = &relay {
        term_log!(target, debug, ?connection, %host, "a host coordinator relays on this connection (SPEC.md §18.1)");
    }
    // The writer subtracts every line it writes from `queued`, the hello too.
    queued.fetch_add(our_hello.len(), Ordering::AcqRel);
    let _ = lines_out.send(our_hello);
    let writer = Writer {
        lines: lines_out,
        queued,
        task,
    };
    Ok((lines, writer, relay))
}

/// Reaches the cluster's coordinator, reports each connection's lines to the
/// server, and reaches it again once the connection is gone (SPEC.md §18.3).
/// A coordinator whose term is over (§14.3) is read on until it is quiet
/// for `DRAIN_IDLE`, as a client does, so that its last answers (a landed
/// value) reach the relay.
async fn upstream_task<U: Upstream>(
    mut upstream: U,
    reports: mpsc::Sender<Report>,
    warrant: Warrant,
    seeded: Seeded,
    stopped: oneshot::Receiver<()>,
) {
    tokio::select! {
        () = relay_upstream(&mut upstream, reports, warrant, seeded) => {}
        _ = stopped => {}
    }
    upstream.close().await;
}

/// The loop of [`upstream_task`] until its term ends.
async fn relay_upstream<U: Upstream>(
    upstream: &mut U,
    reports: mpsc::Sender<Report>,
    warrant: Warrant,
    seeded: Seeded,
) {
    loop {
        let Reached {
            mut lines,
            writer,
            hello,
            mut gone,
        } = match upstream.reach().await {
            Ok(reached) => reached,
            Err(Unreached { pause, error }) => {
                if let Some(error) = error {
                    let reason = Reason::lossy(&error);
                    if reports
                        .send(Report::UpstreamUnavailable(reason))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        info!(target: RELAY_LOG_TARGET, epoch = %hello.epoch, pid = hello.pid, "relaying to the cluster's coordinator (SPEC.md §18.1)");
        let (lines_out, outgoing) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(write_lines(
            writer,
            outgoing,
            queued.clone(),
            warrant.clone(),
            seeded,
        ));
        let writer = Writer {
            lines: lines_out,
            queued,
            task,
        };
        let (leave, mut left) = oneshot::channel();
        // A checked hello's epoch is a term number (§4.2).
        let coordinator =
            hello
                .epoch
                .parse()
                .ok()
                .and_then(Epoch::new)
                .map(|epoch| CoordinatorIdentity {
                    epoch,
                    pid: hello.pid,
                    host: hello.host.clone(),
                });
        let opened = Report::UpstreamOpened {
            writer,
            relays: hello.relays,
            coordinator,
            leave,
        };
        if reports.send(opened).await.is_err() {
            return;
        }
        let mut draining = false;
        loop {
            let drain = draining;
            let lines = &mut lines;
            let next = async move {
                if drain {
                    tokio::time::timeout(DRAIN_IDLE, lines.next()).await.ok()
                } else {
                    Some(lines.next().await)
                }
            };
            let line = tokio::select! {
                // The server gave the connection up (its backlog, §18.3):
                // the relay learns of the loss from the report below.
                _ = &mut left => break,
                () = &mut gone, if !draining => {
                    info!(target: RELAY_LOG_TARGET, "the cluster's coordinator's term is over; reading what it sent, then leaving it (SPEC.md §14.3)");
                    draining = true;
                    continue;
                }
                line = next => match line {
                    Some(line) => line,
                    None => break,
                },
            };
            let response = match line {
                Ok(line) => match decode_response(&line) {
                    Ok(response) => response,
                    Err(error) => {
                        warn!(target: RELAY_LOG_TARGET, %error, "the cluster's coordinator sent a malformed response; leaving it (SPEC.md §3.7)");
                        break;
                    }
                },
                Err(error) => {
                    debug!(target: RELAY_LOG_TARGET, %error, "the connection to the cluster's coordinator is gone");
                    break;
                }
            };
            if reports
                .send(Report::UpstreamResponse(response))
                .await
                .is_err()
            {
                return;
            }
        }
        if reports.send(Report::UpstreamLost).await.is_err() {
            return;
        }
    }
}

/// Writes queued lines, several per system call when they pile up, while
/// the term may still answer: lines queued before the process was stopped
/// past its lease are dropped with the connection, not written (SPEC.md
/// §14.2).
async fn write_lines(
    mut write: impl AsyncWrite + Unpin,
    mut outgoing: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    warrant: Warrant,
    seeded: Seeded,
) {
    let flush = seeded.hook(Mutant::WritersNeverFlush, true, false);
    let mut batch = Vec::new();
    while let Some(line) = outgoing.recv().await {
        batch.clear();
        batch.extend_from_slice(&line);
        while batch.len() < MAX_FRAME_BYTES {
            match outgoing.try_recv() {
                Ok(line) => batch.extend_from_slice(&line),
                Err(_) => break,
            }
        }
        if !warrant.holds() {
            return;
        }
        // A flush after every batch: a TLS writer keeps records back until
        // flushed (a Unix socket's flush does nothing).
        if write.write_all(&batch).await.is_err() || (flush && write.flush().await.is_err()) {
            return;
        }
        queued.fetch_sub(batch.len(), Ordering::AcqRel);
    }
    let _ = write.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

    use crate::protocol::{Epoch, Response, decode_response};
    use crate::transport::PeerRefused;

    /// A term whose warrant holds for as many more asks as `asks` says: a
    /// test sets it to stop the process, as SIGSTOP would, right after the
    /// coordinator's last successful ask, and resume it past its lease.
    struct Lapsing {
        asks: Arc<AtomicUsize>,
    }

    impl Term for Lapsing {
        type Error = io::Error;

        fn epoch(&self) -> Epoch {
            Epoch::FIRST
        }

        fn follows_failover(&self) -> bool {
            false
        }

        /// As a cluster's: the tests relay to it.
        fn takes_relays(&self) -> bool {
            true
        }

        fn check(&mut self) -> Result<(), io::Error> {
            Ok(())
        }

        fn warrant(&self) -> Warrant {
            let asks = self.asks.clone();
            Warrant::new(move || {
                asks.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
            })
        }

        async fn resign(self, _clean: bool) {}
    }

    /// The second term of a directory, after a failover, which records
    /// whether it resigned cleanly.
    struct Second {
        clean: Arc<std::sync::Mutex<Option<bool>>>,
    }

    impl Term for Second {
        type Error = io::Error;

        fn epoch(&self) -> Epoch {
            Epoch::new(2).unwrap()
        }

        fn follows_failover(&self) -> bool {
            true
        }

        /// As a cluster's: the tests relay to it.
        fn takes_relays(&self) -> bool {
            true
        }

        fn check(&mut self) -> Result<(), io::Error> {
            Ok(())
        }

        fn warrant(&self) -> Warrant {
            Warrant::always()
        }

        async fn resign(self, clean: bool) {
            *self.clean.lock().unwrap() = Some(clean);
        }
    }

    /// Connections in memory: the test keeps the client's end of each.
    struct Pipes(mpsc::UnboundedReceiver<DuplexStream>);

    impl Listener for Pipes {
        type Reader = ReadHalf<DuplexStream>;
        type Writer = WriteHalf<DuplexStream>;
        type Incoming = DuplexStream;

        async fn accept(&mut self) -> io::Result<DuplexStream> {
            match self.0.recv().await {
                Some(stream) => Ok(stream),
                None => std::future::pending().await,
            }
        }

        async fn establish(
            stream: DuplexStream,
        ) -> Result<Connection<Self::Reader, Self::Writer>, PeerRefused> {
            let (reader, writer) = tokio::io::split(stream);
            Ok(Connection { reader, writer })
        }

        fn check(&mut self) -> io::Result<()> {
            Ok(())
        }

        fn close(self) {}
    }

    struct Client(BufReader<DuplexStream>);

    impl Client {
        async fn connect(connect: &mpsc::UnboundedSender<DuplexStream>) -> Client {
            let hello = r#"{"protocol":"single-flight","version":1}"#;
            Client::connect_with(connect, hello).await.0
        }

        /// A client whose hello is `hello`, and the coordinator's hello.
        async fn connect_with(
            connect: &mpsc::UnboundedSender<DuplexStream>,
            hello: &str,
        ) -> (Client, CoordinatorHello) {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            connect.send(theirs).expect("the server listens");
            let mut client = Client(BufReader::new(ours));
            client.send(hello).await;
            let hello = client.line().await.expect("the coordinator's hello");
            let hello = crate::protocol::decode_coordinator_hello(hello.trim_end().as_bytes())
                .expect("the coordinator's hello");
            (client, hello)
        }

        async fn send(&mut self, line: &str) {
            let stream = self.0.get_mut();
            stream.write_all(line.as_bytes()).await.unwrap();
            stream.write_all(b"\n").await.unwrap();
        }

        /// The next line, or `None` once the coordinator closed the
        /// connection.
        async fn line(&mut self) -> Option<String> {
            let mut line = String::new();
            match self.0.read_line(&mut line).await {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        }

        async fn response(&mut self) -> Response {
            let line = self.line().await.expect("a response");
            decode_response(line.trim_end().as_bytes()).expect("a response")
        }
    }

    impl crate::shell::scenarios::Caller for Client {
        async fn send(&mut self, line: &str) {
            Client::send(self, line).await;
        }

        async fn response(&mut self) -> Response {
            Client::response(self).await
        }
    }

    /// A term's options for these tests: a grace window and a clock.
    fn options(grace_window: Duration, clock: Clock) -> Options {
        Options {
            grace_window,
            poll_interval: Duration::from_millis(10),
            seeded: Seeded::NONE,
            clock,
        }
    }

    /// A term of `Lapsing`, a leader of `k` and three joiners of its flight.
    async fn flight_of_three(asks: &Arc<AtomicUsize>) -> (Serving, Client, Vec<Client>) {
        let (connect, incoming) = mpsc::unbounded_channel();
        let options = options(Duration::from_secs(1), Clock::System);
        let term = Lapsing { asks: asks.clone() };
        let serving = start(term, Pipes(incoming), &options);
        let mut leader = Client::connect(&connect).await;
        leader.send(r#"{"op":"run","id":"L","key":"k"}"#).await;
        assert!(matches!(leader.response().await, Response::Lead { .. }));
        let mut joiners = Vec::new();
        for n in 0..3 {
            let mut joiner = Client::connect(&connect).await;
            joiner
                .send(&format!(r#"{{"op":"run","id":"j{n}","key":"k"}}"#))
                .await;
            assert!(matches!(joiner.response().await, Response::Joined { .. }));
            joiners.push(joiner);
        }
        (serving, leader, joiners)
    }

    /// §14.2: a process stopped in the middle of one event's answers (a
    /// `land` answers every joiner) and resumed past its lease answers none
    /// of those left: the coordinator asks its warrant before every answer,
    /// not only before the event. The chaos harness caught a coordinator
    /// stopped among 14 000 joiners' answers that wrote 7 253 of them after
    /// its key was gone.
    #[tokio::test]
    async fn a_term_stopped_among_one_events_answers_gives_none_of_them_after() {
        let asks = Arc::new(AtomicUsize::new(usize::MAX));
        let (serving, mut leader, mut joiners) = flight_of_three(&asks).await;
        // The event's own ask holds; the process stops right after it.
        asks.store(1, Ordering::Release);
        leader
            .send(r#"{"op":"land","id":"L","outcome":{"value":"v"}}"#)
            .await;
        for joiner in &mut joiners {
            let line = joiner.line().await;
            assert_eq!(line, None, "no answer after the lease is gone");
        }
        assert_eq!(leader.line().await, None);
        serving.done.await.unwrap();
    }

    /// §18.1, §18.2: a host coordinator's hello is answered `relays: true`,
    /// and its connection is a relay connection: lost, it leaves its flight
    /// orphaned for the host's next connection, whose landed reassert (a
    /// first term accepts no other reassert, §8.3) lands it for the joiner.
    #[tokio::test]
    async fn s18_2_a_relay_connection_that_closes_leaves_its_flight_to_its_host() {
        let (connect, incoming) = mpsc::unbounded_channel();
        let options = options(Duration::from_secs(60), Clock::System);
        let term = Lapsing {
            asks: Arc::new(AtomicUsize::new(usize::MAX)),
        };
        let serving = start(term, Pipes(incoming), &options);
        let relay_hello = r#"{"protocol":"single-flight","version":1,"relay":{"host":"build-7"}}"#;
        let (mut relay, hello) = Client::connect_with(&connect, relay_hello).await;
        assert!(
            hello.relays,
            "§18.1: the hello says that it keeps relay windows"
        );
        relay.send(r#"{"op":"run","id":"r1","key":"k"}"#).await;
        let Response::Lead { token, .. } = relay.response().await else {
            panic!("the host's run leads");
        };
        let mut joiner = Client::connect(&connect).await;
        joiner.send(r#"{"op":"run","id":"j","key":"k"}"#).await;
        assert!(matches!(joiner.response().await, Response::Joined { .. }));
        drop(relay);
        let (mut next, _) = Client::connect_with(&connect, relay_hello).await;
        let token = serde_json::to_string(&token).unwrap();
        next.send(&format!(
            r#"{{"op":"reassert","id":"r1","key":"k","token":{token},"outcome":{{"value":"v"}}}}"#
        ))
        .await;
        assert!(matches!(next.response().await, Response::Ack { .. }));
        match joiner.response().await {
            Response::Landed { outcome, .. } => {
                assert_eq!(*outcome, crate::protocol::Outcome::Value("v".to_owned()));
            }
            other => panic!("the joiner was answered {other:?}"),
        }
        drop(serving.stop);
        serving.done.await.unwrap();
    }

    /// The cluster's coordinator of these tests, reached in memory with the
    /// relay hello of `host` (SPEC.md §18.1).
    struct PipeUpstream {
        connect: mpsc::UnboundedSender<DuplexStream>,
        host: HostId,
    }

    /// The end `ours` of a pipe to a cluster's coordinator, greeted with
    /// the relay hello of `host`: what a test's upstream reaches.
    async fn greeted(
        ours: DuplexStream,
        host: HostId,
    ) -> Reached<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>> {
        let (reader, writer) = tokio::io::split(ours);
        let hello = crate::protocol::ClientHello::relaying(host);
        match super::super::upstream::greet(Connection { reader, writer }, &hello).await {
            super::super::upstream::Greeted::Answered {
                lines,
                writer,
                hello,
            } => Reached {
                lines,
                writer,
                hello,
                gone: Box::pin(std::future::pending()),
            },
            _ => panic!("the cluster's coordinator greets the relay"),
        }
    }

    impl Upstream for PipeUpstream {
        type Reader = ReadHalf<DuplexStream>;
        type Writer = WriteHalf<DuplexStream>;

        async fn reach(&mut self) -> Result<Reached<Self::Reader, Self::Writer>, Unreached> {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            self.connect.send(theirs).expect("the cluster listens");
            Ok(greeted(ours, self.host.clone()).await)
        }

        /// It holds no term of the cluster.
        async fn close(self) {}
    }

    /// §18.3: two processes of one host call one key through their host
    /// coordinator's relay; the cluster's coordinator sees one party of the
    /// host, which leads, and a caller of another host joins it. The first
    /// caller leads under the cluster's token, the second joins without a
    /// party at the cluster, and the land reaches both other callers before
    /// the leader's `ack`.
    #[tokio::test]
    async fn s18_3_a_hosts_two_calls_of_one_key_are_one_party_at_the_cluster() {
        a_hosts_two_calls_through_its_relay().await;
    }

    /// The scenario of the test above: a cluster's coordinator, a host term
    /// that relays to it, and their callers, each stopped at the end.
    async fn a_hosts_two_calls_through_its_relay() {
        let options = options(Duration::from_secs(1), Clock::System);
        let (cluster_connect, cluster_incoming) = mpsc::unbounded_channel();
        let cluster = start(
            Lapsing {
                asks: Arc::new(AtomicUsize::new(usize::MAX)),
            },
            Pipes(cluster_incoming),
            &options,
        );
        let (host_connect, host_incoming) = mpsc::unbounded_channel();
        let upstream = PipeUpstream {
            connect: cluster_connect.clone(),
            host: HostId::new("build-7").unwrap(),
        };
        let host = start_relay(
            Lapsing {
                asks: Arc::new(AtomicUsize::new(usize::MAX)),
            },
            Pipes(host_incoming),
            &options,
            Lifetime::UntilStopped,
            upstream,
        );
        let mut first = Client::connect(&host_connect).await;
        let mut second = Client::connect(&host_connect).await;
        let mut other_host = Client::connect(&cluster_connect).await;
        crate::shell::scenarios::a_hosts_two_calls_are_one_party(
            &mut first,
            &mut second,
            &mut other_host,
        )
        .await;
        drop(host.stop);
        host.done.await.unwrap();
        drop(cluster.stop);
        cluster.done.await.unwrap();
    }

    /// §13.1, §18.3: a host term logs under a target of its own: its
    /// `coordinating` line and the answers it relays to its host's processes
    /// are never lines of the coordinator's target, whose lines are exactly
    /// the cluster coordinator's (its term and the answers it sent: the
    /// host's one party leads, the other host's caller joins and receives
    /// the land). Before the target of its own, the host term's lead,
    /// joined and landed were logged as the coordinator's.
    #[tokio::test]
    async fn s13_1_a_host_term_logs_under_the_relays_target() {
        use crate::shell::captured::Captured;
        let (captured, _guard) = Captured::start();
        a_hosts_two_calls_through_its_relay().await;
        for (target, coordinating, lead, joined, landed) in
            [(LOG_TARGET, 1, 1, 1, 1), (RELAY_LOG_TARGET, 0, 1, 1, 1)]
        {
            assert_eq!(
                captured.count(target, "coordinating epoch="),
                coordinating,
                "{target}"
            );
            assert_eq!(captured.count(target, "lead "), lead, "{target}");
            assert_eq!(captured.count(target, "joined "), joined, "{target}");
            assert_eq!(captured.count(target, "landed "), landed, "{target}");
        }
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "coordinating the host"),
            1,
            "{:#?}",
            captured.lines()
        );
        assert_eq!(captured.count(LOG_TARGET, "coordinating the host"), 0);
        assert_eq!(
            captured.count(RELAY_LOG_TARGET, "relaying to the cluster's coordinator"),
            1
        );
    }

    /// A cluster's coordinator of these tests that answers the relay hello
    /// and leads the first `leads` runs relayed to it, then reads nothing
    /// more, as a coordinator whose host is cut off without a reset. It is
    /// reached once; `reached` counts the attempts.
    struct StalledUpstream {
        leads: usize,
        reached: Arc<AtomicUsize>,
    }

    impl Upstream for StalledUpstream {
        type Reader = ReadHalf<DuplexStream>;
        type Writer = WriteHalf<DuplexStream>;

        async fn reach(&mut self) -> Result<Reached<Self::Reader, Self::Writer>, Unreached> {
            if self.reached.fetch_add(1, Ordering::AcqRel) > 0 {
                return Err(Unreached::missed(Duration::from_secs(3600)));
            }
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let leads = self.leads;
            tokio::spawn(async move {
                let mut theirs = BufReader::new(theirs);
                let mut line = String::new();
                theirs.read_line(&mut line).await.unwrap();
                let epoch = Epoch::new(5).unwrap();
                let hello = CoordinatorHello {
                    protocol: PROTOCOL_NAME.to_owned(),
                    version: PROTOCOL_VERSION,
                    epoch: epoch.to_string(),
                    pid: 1,
                    host: None,
                    relays: true,
                };
                let mut answer = serde_json::to_string(&hello).unwrap();
                answer.push('\n');
                theirs.get_mut().write_all(answer.as_bytes()).await.unwrap();
                for sequence in 1..=leads {
                    line.clear();
                    theirs.read_line(&mut line).await.unwrap();
                    let run: serde_json::Value = serde_json::from_str(&line).unwrap();
                    let token = crate::protocol::FencingToken::new(epoch, sequence as u32);
                    let answer = format!(
                        "{{\"op\":\"lead\",\"id\":{},\"token\":{}}}\n",
                        run["id"],
                        serde_json::to_string(&token.unwrap()).unwrap()
                    );
                    theirs.get_mut().write_all(answer.as_bytes()).await.unwrap();
                }
                // Held, never read again.
                std::future::pending::<()>().await;
            });
            Ok(greeted(ours, HostId::new("build-7").unwrap()).await)
        }

        /// It holds no term of the cluster.
        async fn close(self) {}
    }

    /// §18.3: a host's leaders land values of a whole frame each to a
    /// cluster's coordinator that reads nothing: the host coordinator
    /// queues the lands up to `MAX_UPSTREAM_QUEUED_BYTES`, and the one past
    /// it makes it leave the connection, take it for lost and close its
    /// host's connections, so that their processes replay, and reach the
    /// cluster again. Before the bound it queued every land, and its memory
    /// grew with them.
    #[tokio::test]
    async fn s18_3_a_cluster_coordinator_that_does_not_read_is_left_at_the_upstreams_bound() {
        let lands = MAX_UPSTREAM_QUEUED_BYTES / MAX_FRAME_BYTES + 1;
        let options = options(Duration::from_secs(1), Clock::System);
        let reached = Arc::new(AtomicUsize::new(0));
        let (host_connect, host_incoming) = mpsc::unbounded_channel();
        let host = start_relay(
            Lapsing {
                asks: Arc::new(AtomicUsize::new(usize::MAX)),
            },
            Pipes(host_incoming),
            &options,
            Lifetime::UntilStopped,
            StalledUpstream {
                leads: lands,
                reached: reached.clone(),
            },
        );
        let mut process = Client::connect(&host_connect).await;
        for key in 0..lands {
            process
                .send(&format!(r#"{{"op":"run","id":"{key}","key":"k{key}"}}"#))
                .await;
            assert!(matches!(process.response().await, Response::Lead { .. }));
        }
        let value = "v".repeat(MAX_FRAME_BYTES - 64 * 1024);
        for key in 0..lands {
            process
                .send(&format!(
                    r#"{{"op":"land","id":"{key}","outcome":{{"value":"{value}"}}}}"#
                ))
                .await;
        }
        assert_eq!(
            process.line().await,
            None,
            "the host's connection is closed, unanswered"
        );
        while reached.load(Ordering::Acquire) < 2 {
            tokio::task::yield_now().await;
        }
        drop(host.stop);
        host.done.await.unwrap();
    }

    /// §10.4, §8.9: a term asked to stop inside its grace window serves the
    /// window out, as its coordinator decides: a rejoin that comes after the
    /// stop still receives the outcome of the flight that landed in the
    /// window, and the term ends, cleanly, only when the window does. The
    /// runtime's clock is paused, so the window's minute passes when
    /// nothing else is left to do.
    #[tokio::test(start_paused = true)]
    async fn s10_4_a_term_asked_to_stop_in_its_window_serves_it_out() {
        let (connect, incoming) = mpsc::unbounded_channel();
        let options = options(Duration::from_secs(60), Clock::Runtime);
        let clean = Arc::new(std::sync::Mutex::new(None));
        let term = Second {
            clean: clean.clone(),
        };
        let serving = start(term, Pipes(incoming), &options);
        // The flight 1:1 of the first term landed; its leader replays the
        // land that the first term did not acknowledge (§8.3).
        let mut leader = Client::connect(&connect).await;
        leader
            .send(r#"{"op":"reassert","id":"L","key":"k","token":"4294967297","outcome":{"value":"v"}}"#)
            .await;
        assert!(matches!(leader.response().await, Response::Ack { .. }));
        serving.stop.send(()).unwrap();
        let mut joiner = Client::connect(&connect).await;
        joiner
            .send(r#"{"op":"run","id":"J","key":"k","flight":"4294967297"}"#)
            .await;
        match joiner.response().await {
            Response::Landed { outcome, .. } => {
                assert_eq!(*outcome, crate::protocol::Outcome::Value("v".to_owned()));
            }
            other => panic!("the rejoin was answered {other:?}"),
        }
        assert!(!serving.done.is_finished(), "the window is still open");
        serving.done.await.unwrap();
        assert_eq!(*clean.lock().unwrap(), Some(true));
        assert_eq!(joiner.line().await, None, "closed with the term");
    }

    /// §14.2: lines queued while the term held, then left unwritten while
    /// the process was stopped past its lease, are dropped with the
    /// connection rather than written when it resumes.
    #[tokio::test]
    async fn a_writer_writes_nothing_queued_once_its_term_no_longer_holds() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (lines, outgoing) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let holds = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let warrant = Warrant::new({
            let holds = holds.clone();
            move || holds.load(Ordering::Acquire)
        });
        let writer = tokio::spawn(write_lines(theirs, outgoing, queued, warrant, Seeded::NONE));
        let mut client = BufReader::new(ours);
        lines.send(b"while it held\n".to_vec()).unwrap();
        let mut line = String::new();
        client.read_line(&mut line).await.unwrap();
        assert_eq!(line, "while it held\n");
        holds.store(false, Ordering::Release);
        lines.send(b"after the lease\n".to_vec()).unwrap();
        drop(lines);
        writer.await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"", "the connection closes with nothing written");
    }

    /// What an ending term once gave its writers whatever they had queued
    /// (issue 27's bug 6): it cut off a 4 MiB landed line over TLS.
    const OLD_FIXED_PATIENCE: Duration = Duration::from_secs(1);

    /// §10.4: a 4 MiB landed line still queued at a term's end gets the time
    /// it takes at the slowest rate a reading client is expected to take
    /// it, on top of the flush timeout, where the old fixed second was a
    /// quarter of what it needs.
    #[test]
    fn an_ending_term_waits_for_a_large_landed_line() {
        let line = 4 << 20;
        let needed = Duration::from_secs_f64(line as f64 / FLUSH_BYTES_PER_SECOND);
        assert_eq!(needed, Duration::from_secs(4));
        assert!(OLD_FIXED_PATIENCE < needed, "the old second cut it off");
        let patience = flush_patience([120, line, 0]);
        assert_eq!(patience, FLUSH_TIMEOUT + needed);
        assert_eq!(patience, flush_time(line));
    }

    /// §10.4: the wait is for the connection with the most to write, and
    /// nothing queued (or no connection) waits the flush timeout alone.
    #[test]
    fn an_ending_term_waits_for_its_fullest_writer() {
        assert_eq!(flush_patience([]), FLUSH_TIMEOUT);
        assert_eq!(flush_patience([0, 0]), FLUSH_TIMEOUT);
        assert_eq!(
            flush_patience([1 << 20, 2 << 20, 1 << 20]),
            FLUSH_TIMEOUT + Duration::from_secs(2)
        );
        // The most one connection may have queued (§11.3): a full frame and
        // the answers around it, 9 s at 1 MiB/s.
        assert_eq!(
            flush_patience([MAX_QUEUED_BYTES]),
            FLUSH_TIMEOUT + Duration::from_secs(9)
        );
    }
}
