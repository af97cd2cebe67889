//! The client side of one process (SPEC.md §9, §10): connects to the
//! coordinator, or campaigns when there is none, and runs the pure
//! [`Client`] over the connection. It runs on the process's single-flight
//! thread; calls talk to it through [`Command`]s and [`CallEvent`]s.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::error::Unavailable;
use crate::backend::BackendError;
use super::lines::{LineError, Lines};
use super::mutant::{Mutant, Seeded};
use super::options::{HANDSHAKE_TIMEOUT, Options};
use super::server::{self, Serving};
use super::stats::Counters;
use crate::client::{CallId, CallOptions, Client, Effect, Event, Resolution, StopReason};
use crate::coordinator::MAX_OPEN_REQUESTS_PER_CONNECTION;
use crate::election::{Election, Term};
use crate::protocol::{
    ClientHello, FencingToken, HandshakeError, Key, Outcome, Response, decode_coordinator_hello,
    decode_response, encode,
};
use crate::transport::{ConnectError, Connection, Transport};

/// How long a shutting-down process waits for its lands to be acknowledged,
/// so that its joiners get the values it produced (SPEC.md §9.3).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client reads on from a coordinator whose term is over before
/// it leaves, while no byte comes (SPEC.md §14.3). A term that ends cleanly
/// writes its last answers before its key goes, so they are already on the
/// way when the watch tells (a landed value of megabytes takes a while to
/// read); a dead host sends nothing, and costs this much more to leave.
const DRAIN_IDLE: Duration = Duration::from_millis(500);

/// What a call asks of the driver.
pub(super) enum Command {
    Start {
        call: CallId,
        key: Key,
        options: CallOptions,
        events: mpsc::UnboundedSender<CallEvent>,
    },
    WorkFinished {
        call: CallId,
        outcome: Outcome,
        /// Told when the land is settled (`ack` or `rejected`), or at once
        /// when there is no land to wait for; for a leader whose work
        /// panicked (§9.6).
        settled: Option<oneshot::Sender<()>>,
    },
    /// Withdraws the call. The driver forgets it: its event channel closes
    /// after the events already sent. A detached call that leads stays,
    /// for its work (SPEC.md §15.3).
    Cancel { call: CallId },
    /// Finish the lands in progress, end the term if this process
    /// coordinates, and stop.
    Close { done: oneshot::Sender<()> },
}

/// What the driver tells a call.
pub(super) enum CallEvent {
    Lead(FencingToken),
    Resolved(Resolution),
    Unavailable(Arc<Unavailable>),
    /// Drop the work of the detached call, whose caller has left: nobody
    /// waits for it (SPEC.md §15.3).
    Stop,
}

/// How long a leader whose work panicked waits for its land to be settled
/// before it resumes the panic (SPEC.md §9.6). A panic often ends its
/// process next, as a close does, so the same patience as a close: its
/// joiners then get the `Panic` failure rather than `interrupted`. Past it
/// the panic goes on, and the land is still kept and sent while the process
/// lives (§9.3).
pub const PANIC_LAND_TIMEOUT: Duration = CLOSE_TIMEOUT;

pub(super) struct Driver<E, T> {
    /// The election and the transport, lent to the attempt in progress to
    /// reach or become the coordinator; `None` while one runs.
    finder: Option<Finder<E, T>>,
    options: Options,
    client: Client,
    calls: BTreeMap<CallId, mpsc::UnboundedSender<CallEvent>>,
    /// Calls whose work runs, in their caller's task, or on this thread for
    /// a detached call (SPEC.md §15.3).
    leading: BTreeSet<CallId>,
    writer: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// The term this process serves, if it won the election.
    serving: Option<Serving>,
    /// Lands whose leader waits for them to be settled (§9.6).
    settling: BTreeMap<CallId, oneshot::Sender<()>>,
    /// The epoch of the last coordinator this process connected to, to
    /// count the failovers it lives through (SPEC.md §9.8).
    last_epoch: Option<String>,
    counters: Arc<Counters>,
}

enum Wake<E: Election, T: Transport> {
    Command(Option<Command>),
    Line(Result<Vec<u8>, LineError>),
    /// The election says the coordinator this process is connected to no
    /// longer holds its term (§14.3).
    CoordinatorGone,
    /// Time to see whether a gone coordinator's connection still brings
    /// bytes.
    DrainCheck,
    /// An attempt to reach or become the coordinator has ended.
    Attempted(Finder<E, T>, Attempt<E, T>),
    Retry,
}

/// A future that resolves when the connected coordinator's term is over.
type Gone = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An attempt in progress, which gives the election and transport back.
type Attempting<E, T> = Pin<Box<dyn Future<Output = (Finder<E, T>, Attempt<E, T>)> + Send>>;

/// What reaches or elects the coordinator. An attempt owns it while it
/// runs, so that the driver's loop goes on reading commands meanwhile: a
/// call's deadline, a signal or a close is never held up by an election
/// that does not answer (SPEC.md §14.6).
struct Finder<E, T> {
    election: E,
    transport: T,
}

/// What one attempt to reach or become the coordinator came to (§10.1).
enum Attempt<E: Election, T: Transport> {
    /// Connected and greeted: the coordinator's hello was valid.
    Connected {
        lines: Lines<T::Reader>,
        writer: T::Writer,
        epoch: String,
        /// Resolves when that coordinator's term is over (§14.3).
        gone: Gone,
    },
    /// This process won a term and listens for it; it connects to itself
    /// next.
    Won(E::Term, T::Listener),
    /// No coordinator could be reached or elected this time; try again
    /// after `pause`.
    Missed { pause: Duration },
    /// The calls that wait for a coordinator end with `reason`; try again
    /// after `pause`.
    Failed {
        reason: Unavailable,
        pause: Duration,
    },
}

impl<E, T> Driver<E, T>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    pub(super) fn new(
        election: E,
        transport: T,
        options: Options,
        counters: Arc<Counters>,
    ) -> Driver<E, T> {
        Driver {
            finder: Some(Finder {
                election,
                transport,
            }),
            options,
            client: Client::new(),
            calls: BTreeMap::new(),
            leading: BTreeSet::new(),
            writer: None,
            serving: None,
            settling: BTreeMap::new(),
            last_epoch: None,
            counters,
        }
    }

    /// Runs until every handle is gone or [`Command::Close`] arrives.
    pub(super) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut lines: Option<Lines<T::Reader>> = None;
        let mut gone: Option<Gone> = None;
        // The attempt to reach or become the coordinator in progress. The
        // loop polls it beside everything else, so that it never holds up a
        // command; dropping it abandons the attempt.
        let mut attempting: Option<Attempting<E, T>> = None;
        // After the coordinator's term is over: when to look again, and the
        // bytes read by then.
        let mut draining: Option<(tokio::time::Instant, u64)> = None;
        let mut closing: Option<(tokio::time::Instant, Option<oneshot::Sender<()>>)> = None;
        let mut handles_left = true;
        // After an attempt to reach a coordinator failed, the next one comes
        // a poll interval later (§7.2, §14.3), whatever wakes the loop in
        // between: a caller that retries at once on `Unavailable` must not
        // turn the attempts, each a read from the election's store in a cluster, into a busy
        // loop.
        let mut next_attempt: Option<tokio::time::Instant> = None;
        loop {
            if lines.is_none()
                && attempting.is_none()
                && next_attempt.is_none_or(|at| deadline_after(Duration::ZERO) >= at)
                && let Some(finder) = self.finder.take()
            {
                // §7.2: a process that holds the claim never campaigns
                // again; that would open the lock file a second time and
                // could drop the claim. It waits for its own socket instead.
                let serving = self.serving.as_ref().is_some_and(|s| !s.done.is_finished());
                if !serving {
                    self.serving = None;
                }
                attempting = Some(Box::pin(finder.attempt(
                    serving,
                    self.options.poll_interval,
                    self.options.seeded,
                )));
                next_attempt = None;
            }
            if let Some((deadline, _)) = &closing {
                let late = tokio::time::Instant::now() >= *deadline;
                // An attempt still in progress is abandoned (§14.6): with
                // nothing left to land, a close waits for no coordinator.
                if self.client.is_idle() || late {
                    break;
                }
            }
            let wake = tokio::select! {
                command = commands.recv(), if handles_left => Wake::Command(command),
                line = async { lines.as_mut().expect("guarded").next().await }, if lines.is_some() => Wake::Line(line),
                () = async { gone.as_mut().expect("guarded").await }, if gone.is_some() && lines.is_some() => Wake::CoordinatorGone,
                () = async { tokio::time::sleep_until(draining.expect("guarded").0).await }, if draining.is_some() && lines.is_some() => Wake::DrainCheck,
                (finder, attempt) = async { attempting.as_mut().expect("guarded").await }, if attempting.is_some() => Wake::Attempted(finder, attempt),
                () = async {
                    match next_attempt {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => tokio::time::sleep(self.options.poll_interval).await,
                    }
                }, if (lines.is_none() && attempting.is_none()) || closing.is_some() => Wake::Retry,
            };
            match wake {
                Wake::Command(Some(Command::Close { done })) => {
                    closing = Some((deadline_after(CLOSE_TIMEOUT), Some(done)));
                }
                Wake::Command(Some(command)) => self.command(command),
                Wake::Command(None) => {
                    if closing.is_none() {
                        closing = Some((deadline_after(CLOSE_TIMEOUT), None));
                    }
                    // No handle is left to send commands; only lands remain.
                    handles_left = false;
                }
                Wake::Attempted(finder, attempt) => {
                    self.finder = Some(finder);
                    attempting = None;
                    match attempt {
                        Attempt::Connected {
                            lines: connected,
                            writer,
                            epoch,
                            gone: ends,
                        } => {
                            self.connected(writer, epoch);
                            lines = Some(connected);
                            gone = Some(ends);
                            draining = None;
                        }
                        Attempt::Won(term, listener) => {
                            self.serving = Some(server::start(term, listener, &self.options));
                            // It connects to itself at once.
                        }
                        Attempt::Missed { pause } => {
                            next_attempt = Some(deadline_after(pause));
                        }
                        Attempt::Failed { reason, pause } => {
                            self.fail_waiting(reason);
                            next_attempt = Some(deadline_after(pause));
                        }
                    }
                }
                Wake::Line(Ok(line)) => match decode_response(&line) {
                    Ok(response) => {
                        let settles = self.settles(&response);
                        let effects = self.client.step(Event::ResponseReceived { response });
                        self.apply(effects);
                        if let Some(settled) = settles.and_then(|call| self.settling.remove(&call))
                        {
                            let _ = settled.send(());
                        }
                    }
                    Err(error) => {
                        warn!(%error, "the coordinator sent a malformed response; reconnecting");
                        lines = None;
                        self.lost();
                    }
                },
                Wake::Line(Err(error)) => {
                    debug!(%error, "lost the coordinator");
                    lines = None;
                    self.lost();
                }
                Wake::CoordinatorGone => {
                    info!(
                        "the coordinator's term is over; reading what it sent, then leaving it (SPEC.md §14.3)"
                    );
                    gone = None;
                    let received = lines.as_ref().map_or(0, Lines::received);
                    draining = Some((deadline_after(DRAIN_IDLE), received));
                }
                Wake::DrainCheck => {
                    let received = lines.as_ref().map_or(0, Lines::received);
                    match draining {
                        Some((_, before)) if received > before => {
                            draining = Some((deadline_after(DRAIN_IDLE), received));
                        }
                        _ => {
                            info!("leaving the coordinator whose term is over (SPEC.md §14.3)");
                            lines = None;
                            draining = None;
                            self.lost();
                        }
                    }
                }
                Wake::Retry => {}
            }
        }
        drop(attempting);
        drop(lines);
        self.writer = None;
        if let Some(serving) = self.serving.take() {
            let _ = serving.stop.send(());
            let _ = serving.done.await;
        }
        if let Some((_, Some(done))) = closing {
            let _ = done.send(());
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Start {
                call,
                key,
                options,
                events,
            } => {
                let in_progress = self.client.calls_in_progress();
                if in_progress >= MAX_OPEN_REQUESTS_PER_CONNECTION {
                    let _ = events.send(CallEvent::Unavailable(Arc::new(
                        Unavailable::TooManyCalls(in_progress),
                    )));
                    return;
                }
                self.calls.insert(call, events);
                let effects = self.client.step(Event::CallStarted { call, key, options });
                self.apply(effects);
            }
            Command::WorkFinished {
                call,
                outcome,
                settled,
            } => {
                self.leading.remove(&call);
                let before = self.client.calls_in_progress();
                let effects = self.client.step(Event::WorkFinished { call, outcome });
                self.apply(effects);
                if let Some(settled) = settled {
                    // Waiters that gave up (PANIC_LAND_TIMEOUT) leave their
                    // entry behind when their land is never answered.
                    self.settling.retain(|_, waiter| !waiter.is_closed());
                    if self.client.calls_in_progress() < before {
                        // The client forgot the call: it had lost its flight
                        // (§9.3), and no land will be sent.
                        let _ = settled.send(());
                    } else {
                        self.settling.insert(call, settled);
                    }
                }
            }
            Command::Cancel { call } => {
                let effects = self.client.step(Event::CallCancelled { call });
                if !self.client.is_detached(call) {
                    self.calls.remove(&call);
                    self.leading.remove(&call);
                }
                self.apply(effects);
            }
            Command::Close { .. } => unreachable!("handled by the loop"),
        }
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Send(request) => {
                    if let Some(writer) = &self.writer {
                        let mut line = encode(&request).into_bytes();
                        line.push(b'\n');
                        let _ = writer.send(line);
                    }
                }
                Effect::StartWork { call, token } => {
                    debug!(call = call.0, %token, "leading");
                    self.leading.insert(call);
                    if let Some(events) = self.calls.get(&call) {
                        let _ = events.send(CallEvent::Lead(token));
                    }
                }
                Effect::Resolve { call, resolution } => {
                    if let Some(events) = self.calls.remove(&call) {
                        let _ = events.send(CallEvent::Resolved(resolution));
                    }
                }
                Effect::StopWork { call, why } => {
                    match why {
                        StopReason::NobodyWaits => {
                            debug!(
                                call = call.0,
                                "nobody waits for the detached flight; stopping its work (SPEC.md §15.3)"
                            );
                        }
                        StopReason::DetachUnsupported => warn!(
                            call = call.0,
                            "the coordinator does not know detached calls (SPEC.md §15); the flight was cancelled, which interrupted its joiners, and its work stopped"
                        ),
                        StopReason::FlightLost => {
                            debug!(
                                call = call.0,
                                "a detached call lost its flight; stopping its work"
                            );
                        }
                    }
                    self.leading.remove(&call);
                    if let Some(events) = self.calls.remove(&call) {
                        let _ = events.send(CallEvent::Stop);
                    }
                }
            }
        }
    }

    /// The call whose land `response` settles, if a leader waits for it:
    /// a landing call leaves the client on `ack` or `rejected` (§9.3).
    fn settles(&self, response: &Response) -> Option<CallId> {
        if self.settling.is_empty() {
            return None;
        }
        let (Response::Ack { id } | Response::Rejected { id }) = response else {
            return None;
        };
        // A call's id is its number in decimal (§9.1); only that text names it.
        self.settling
            .keys()
            .copied()
            .find(|call| call.0.to_string() == id.as_str())
    }

    fn lost(&mut self) {
        self.writer = None;
        let effects = self.client.step(Event::ConnectionLost);
        self.apply(effects);
    }

    /// A new connection to the coordinator of `epoch` is ready: the
    /// client replays its calls on it (§9.4).
    fn connected(&mut self, write: T::Writer, epoch: String) {
        if self
            .last_epoch
            .replace(epoch.clone())
            .is_some_and(|last| last != epoch)
        {
            self.counters.failover();
        }
        let (writer, outgoing) = mpsc::unbounded_channel();
        tokio::spawn(write_requests(write, outgoing, self.options.seeded));
        self.writer = Some(writer);
        let effects = self.client.step(Event::ConnectionReady);
        self.apply(effects);
    }

    /// Ends every call that waits for a coordinator with `reason`; calls
    /// whose work runs go on (their result is their own).
    fn fail_waiting(&mut self, reason: Unavailable) {
        let reason = Arc::new(reason);
        let waiting: Vec<CallId> = self
            .calls
            .keys()
            .filter(|call| !self.leading.contains(call))
            .copied()
            .collect();
        for call in waiting {
            if let Some(events) = self.calls.remove(&call) {
                let _ = events.send(CallEvent::Unavailable(reason.clone()));
            }
            let effects = self.client.step(Event::CallCancelled { call });
            self.apply(effects);
        }
    }
}

impl<E, T> Finder<E, T>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    /// One attempt to reach the coordinator, or to become it (SPEC.md
    /// §10.1); `serving` says that this process holds a term already, and
    /// only waits for its own listener. Gives the finder back.
    async fn attempt(
        mut self,
        serving: bool,
        poll: Duration,
        seeded: Seeded,
    ) -> (Self, Attempt<E, T>) {
        let attempt = self.reach_or_campaign(serving, poll, seeded).await;
        (self, attempt)
    }

    async fn reach_or_campaign(
        &mut self,
        serving: bool,
        poll: Duration,
        seeded: Seeded,
    ) -> Attempt<E, T> {
        match self.election.coordinator().await {
            Ok(Some(address)) => {
                // §14.3: the key is watched from the revision read while
                // the connection is made. A coordinator whose key is
                // deleted or replaced meanwhile is no longer the one to
                // reach: the attempt is abandoned at once and the next one
                // reads the new address, instead of waiting out a dead
                // host's connection timeout and missing the new term's
                // grace window (§14.4).
                let mut gone: Gone = Box::pin(self.election.coordinator_gone());
                let watch_gone = seeded.hook(Mutant::ConnectIgnoresGone, true, false);
                let reached = tokio::select! {
                    reached = Self::reach(&self.transport, &address, poll) => reached,
                    () = &mut gone, if watch_gone => {
                        info!("the coordinator changed while connecting to it; looking again (SPEC.md §14.3)");
                        return Attempt::Missed {
                            pause: Duration::ZERO,
                        };
                    }
                };
                match reached {
                    Ok(Some((lines, writer, epoch))) => {
                        return Attempt::Connected {
                            lines,
                            writer,
                            epoch,
                            gone,
                        };
                    }
                    Ok(None) => {}
                    Err(failed) => return failed,
                }
            }
            Ok(None) => debug!("no coordinator serves"),
            Err(error) => {
                warn!(%error, "cannot find the coordinator");
                return Attempt::Failed {
                    reason: Unavailable::Backend(BackendError::new(error)),
                    pause: poll,
                };
            }
        }
        if serving {
            return Attempt::Missed { pause: poll };
        }
        match self.election.campaign().await {
            Ok(Some(term)) => {
                let epoch = term.epoch();
                match self.transport.listen() {
                    Ok(listener) => Attempt::Won(term, listener),
                    Err(error) => {
                        warn!(%epoch, %error, "won the election but cannot serve; resigning");
                        term.resign(false).await;
                        Attempt::Missed { pause: poll }
                    }
                }
            }
            Ok(None) => Attempt::Missed { pause: poll },
            Err(error) => {
                warn!(%error, "cannot elect a coordinator");
                Attempt::Failed {
                    reason: Unavailable::Backend(BackendError::new(error)),
                    pause: poll,
                }
            }
        }
    }

    /// Connects to the coordinator at `address` and greets it (§4.2):
    /// `Ok(None)` when nobody answers there, `Err` when the calls that wait
    /// must end.
    #[allow(clippy::type_complexity)]
    async fn reach(
        transport: &T,
        address: &E::Address,
        poll: Duration,
    ) -> Result<Option<(Lines<T::Reader>, T::Writer, String)>, Attempt<E, T>> {
        match transport.connect(address).await {
            Ok(connection) => Self::handshake(connection, poll).await,
            Err(ConnectError::Unreachable(error)) => {
                debug!(%error, "no coordinator answers");
                Ok(None)
            }
            Err(error) => {
                warn!(%error, "refusing the coordinator (SPEC.md §11.2, §14.5)");
                Err(Attempt::Failed {
                    reason: Unavailable::Refused(BackendError::new(error)),
                    pause: poll,
                })
            }
        }
    }

    #[allow(clippy::type_complexity)]
    async fn handshake(
        connection: Connection<T::Reader, T::Writer>,
        poll: Duration,
    ) -> Result<Option<(Lines<T::Reader>, T::Writer, String)>, Attempt<E, T>> {
        let Connection {
            reader: read,
            writer: mut write,
        } = connection;
        let mut hello = serde_json::to_vec(&ClientHello::current()).expect("a hello serializes");
        hello.push(b'\n');
        if write.write_all(&hello).await.is_err() || write.flush().await.is_err() {
            return Ok(None);
        }
        let mut lines = Lines::new(read);
        let answer = match tokio::time::timeout(HANDSHAKE_TIMEOUT, lines.next()).await {
            Ok(Ok(line)) => line,
            Ok(Err(LineError::Io(error)))
                if error.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                // §14.5: the coordinator refused this process's certificate;
                // waiting would not change that.
                warn!(%error, "the coordinator refused this process");
                return Err(Attempt::Failed {
                    reason: Unavailable::Rejected(error),
                    pause: poll,
                });
            }
            Ok(Err(error)) => {
                debug!(%error, "the coordinator closed during the handshake");
                return Ok(None);
            }
            Err(_) => {
                warn!(
                    "the coordinator did not answer the handshake in time; is its process stopped?"
                );
                return Ok(None);
            }
        };
        let hello = match decode_coordinator_hello(&answer) {
            Ok(hello) => hello,
            Err(error) => {
                warn!(%error, "cannot use the coordinator");
                // Do not hammer a coordinator of another version.
                let pause = if matches!(error, HandshakeError::Version(_)) {
                    HANDSHAKE_TIMEOUT / 4
                } else {
                    Duration::MAX
                };
                return Err(Attempt::Failed {
                    reason: Unavailable::Handshake(error),
                    pause,
                });
            }
        };
        info!(epoch = %hello.epoch, pid = hello.pid, "connected to the coordinator");
        Ok(Some((lines, write, hello.epoch)))
    }
}

fn deadline_after(duration: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now + duration
}

async fn write_requests(
    mut write: impl AsyncWrite + Unpin,
    mut outgoing: mpsc::UnboundedReceiver<Vec<u8>>,
    seeded: Seeded,
) {
    let flush = seeded.hook(Mutant::WritersNeverFlush, true, false);
    let mut batch = Vec::new();
    while let Some(line) = outgoing.recv().await {
        batch.clear();
        batch.extend_from_slice(&line);
        while let Ok(line) = outgoing.try_recv() {
            batch.extend_from_slice(&line);
        }
        // A flush after every batch: a TLS writer keeps records back until
        // flushed (a Unix socket's flush does nothing).
        if write.write_all(&batch).await.is_err() || (flush && write.flush().await.is_err()) {
            return;
        }
    }
}
