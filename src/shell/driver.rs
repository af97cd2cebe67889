//! The client side of one process (SPEC.md §9, §10): connects to the
//! coordinator, or campaigns when there is none, and runs the pure
//! [`Client`] over the connection. It runs on the process's single-flight
//! thread; calls talk to it through [`Command`]s and [`CallEvent`]s.

use std::collections::BTreeMap;
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
use crate::client::connector::{self, Attempted, CLOSE_TIMEOUT};
use crate::client::{CallId, CallOptions, Connector, Effect, Resolution, StopReason};
use crate::coordinator::MAX_OPEN_REQUESTS_PER_CONNECTION;
use crate::election::{Election, Term};
use crate::protocol::{
    ClientHello, FencingToken, HandshakeError, Key, Outcome, decode_coordinator_hello,
    decode_response, encode,
};
use crate::transport::{ConnectError, Connection, Transport};

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

/// Carries out the [`Connector`]'s decisions (SPEC.md §9, §10, §14.3): it
/// owns the connection, the attempt in progress and the channels to the
/// callers, and holds no copy of what the machine decides (which calls lead,
/// which lands settle, when to try again or leave).
pub(super) struct Driver<E: Election, T: Transport> {
    /// The election and the transport, lent to the attempt in progress to
    /// reach or become the coordinator; `None` while one runs.
    finder: Option<Finder<E, T>>,
    options: Options,
    connector: Connector,
    /// Where the machine's time starts: it reads durations since then.
    origin: tokio::time::Instant,
    /// Each call's channel, until the call is resolved, withdrawn or told to
    /// stop.
    calls: BTreeMap<CallId, mpsc::UnboundedSender<CallEvent>>,
    /// Leaders whose work panicked, each told when the machine says its land
    /// is settled (§9.6).
    panicked: BTreeMap<CallId, oneshot::Sender<()>>,
    writer: Option<mpsc::UnboundedSender<Vec<u8>>>,
    lines: Option<Lines<T::Reader>>,
    gone: Option<Gone>,
    /// The attempt to reach or become the coordinator in progress. The loop
    /// polls it beside everything else, so that it never holds up a
    /// command; dropping it abandons the attempt.
    attempting: Option<Attempting<E, T>>,
    /// Why the attempt that just ended failed, for the calls it ends.
    failure: Option<Arc<Unavailable>>,
    /// The term this process serves, if it won the election.
    serving: Option<Serving>,
    /// The epoch of the last coordinator this process connected to, to
    /// count the failovers it lives through (SPEC.md §9.8).
    last_epoch: Option<String>,
    /// Who waits for the close to end.
    closers: Vec<oneshot::Sender<()>>,
    counters: Arc<Counters>,
}

enum Wake<E: Election, T: Transport> {
    Command(Option<Command>),
    Line(Result<Vec<u8>, LineError>),
    /// The election says the coordinator this process is connected to no
    /// longer holds its term (§14.3).
    CoordinatorGone,
    /// An attempt to reach or become the coordinator has ended.
    Attempted(Finder<E, T>, Attempt<E, T>),
    /// The time the connector asked to be woken at has come.
    Timer,
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
            connector: Connector::new(),
            origin: tokio::time::Instant::now(),
            calls: BTreeMap::new(),
            panicked: BTreeMap::new(),
            writer: None,
            lines: None,
            gone: None,
            attempting: None,
            failure: None,
            serving: None,
            last_epoch: None,
            closers: Vec::new(),
            counters,
        }
    }

    /// Runs until every handle is gone or [`Command::Close`] arrives, and
    /// the connector stops.
    pub(super) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        // The clock of the runtime that drives the loop, not of the thread
        // that built the driver.
        self.origin = tokio::time::Instant::now();
        let mut handles_left = true;
        while !self.connector.is_stopped() {
            // Past the last instant tokio can represent (a pause of
            // `Duration::MAX`): no timer.
            let timer = self
                .connector
                .poll_timeout()
                .and_then(|at| self.origin.checked_add(at));
            let wake = tokio::select! {
                command = commands.recv(), if handles_left => Wake::Command(command),
                line = async { self.lines.as_mut().expect("guarded").next().await }, if self.lines.is_some() => Wake::Line(line),
                () = async { self.gone.as_mut().expect("guarded").await }, if self.gone.is_some() => Wake::CoordinatorGone,
                (finder, attempt) = async { self.attempting.as_mut().expect("guarded").await }, if self.attempting.is_some() => Wake::Attempted(finder, attempt),
                () = async { tokio::time::sleep_until(timer.expect("guarded")).await }, if timer.is_some() => Wake::Timer,
            };
            let event = match wake {
                Wake::Command(Some(Command::Close { done })) => {
                    self.closers.push(done);
                    connector::Event::CloseRequested
                }
                Wake::Command(Some(command)) => match self.command(command) {
                    Some(event) => event,
                    None => continue,
                },
                Wake::Command(None) => {
                    // No handle is left to send commands; only lands remain.
                    handles_left = false;
                    connector::Event::CloseRequested
                }
                Wake::Attempted(finder, attempt) => {
                    self.finder = Some(finder);
                    self.attempting = None;
                    connector::Event::AttemptEnded {
                        attempt: self.attempted(attempt),
                    }
                }
                Wake::Line(Ok(line)) => match decode_response(&line) {
                    Ok(response) => connector::Event::ResponseReceived { response },
                    Err(error) => {
                        warn!(%error, "the coordinator sent a malformed response; reconnecting");
                        connector::Event::ConnectionLost
                    }
                },
                Wake::Line(Err(error)) => {
                    debug!(%error, "lost the coordinator");
                    connector::Event::ConnectionLost
                }
                Wake::CoordinatorGone => {
                    info!(
                        "the coordinator's term is over; reading what it sent, then leaving it (SPEC.md §14.3)"
                    );
                    self.gone = None;
                    connector::Event::CoordinatorGone {
                        received: self.received(),
                    }
                }
                Wake::Timer => connector::Event::TimerFired {
                    received: self.received(),
                },
            };
            self.step(event);
        }
        drop(self.attempting.take());
        drop(self.lines.take());
        self.writer = None;
        if let Some(serving) = self.serving.take() {
            let _ = serving.stop.send(());
            let _ = serving.done.await;
        }
        for done in self.closers {
            let _ = done.send(());
        }
    }

    /// Bytes read on the current connection so far.
    fn received(&self) -> u64 {
        self.lines.as_ref().map_or(0, Lines::received)
    }

    /// Feeds `event` to the connector, now, and carries out its effects.
    fn step(&mut self, event: connector::Event) {
        let now = tokio::time::Instant::now().saturating_duration_since(self.origin);
        let effects = self.connector.step(now, event);
        for effect in effects {
            self.apply(effect);
        }
        self.failure = None;
    }

    /// What `command` tells the connector, if anything.
    fn command(&mut self, command: Command) -> Option<connector::Event> {
        match command {
            Command::Start {
                call,
                key,
                options,
                events,
            } => {
                let in_progress = self.connector.client().calls_in_progress();
                if in_progress >= MAX_OPEN_REQUESTS_PER_CONNECTION {
                    let _ = events.send(CallEvent::Unavailable(Arc::new(
                        Unavailable::TooManyCalls(in_progress),
                    )));
                    return None;
                }
                self.calls.insert(call, events);
                Some(connector::Event::CallStarted { call, key, options })
            }
            Command::WorkFinished {
                call,
                outcome,
                settled,
            } => {
                if let Some(settled) = settled {
                    // Told by the machine's `LandSettled`, which this very
                    // step gives when no land is sent. Waiters that gave up
                    // (PANIC_LAND_TIMEOUT) leave their entry behind when
                    // their land is never answered.
                    self.panicked.retain(|_, waiter| !waiter.is_closed());
                    self.panicked.insert(call, settled);
                }
                Some(connector::Event::WorkFinished { call, outcome })
            }
            Command::Cancel { call } => {
                self.step(connector::Event::CallCancelled { call });
                // A detached call that leads stays, for its work (§15.3).
                if !self.connector.client().is_detached(call) {
                    self.calls.remove(&call);
                }
                None
            }
            Command::Close { .. } => unreachable!("handled by the loop"),
        }
    }

    /// Takes the connection or the term an attempt brought, and tells the
    /// connector what the attempt came to.
    fn attempted(&mut self, attempt: Attempt<E, T>) -> Attempted {
        match attempt {
            Attempt::Connected {
                lines,
                writer,
                epoch,
                gone,
            } => {
                self.connected(writer, epoch);
                self.lines = Some(lines);
                self.gone = Some(gone);
                Attempted::Connected
            }
            Attempt::Won(term, listener) => {
                self.serving = Some(server::start(term, listener, &self.options));
                Attempted::Won
            }
            Attempt::Missed { pause } => Attempted::Missed { pause },
            Attempt::Failed { reason, pause } => {
                self.failure = Some(Arc::new(reason));
                Attempted::Failed { pause }
            }
        }
    }

    fn apply(&mut self, effect: connector::Effect) {
        match effect {
            connector::Effect::Call(effect) => self.call_effect(effect),
            connector::Effect::StartAttempt => {
                let finder = self
                    .finder
                    .take()
                    .expect("the connector starts one attempt at a time");
                // §7.2: a process that holds the claim never campaigns
                // again; that would open the lock file a second time and
                // could drop the claim. It waits for its own socket instead.
                let serving = self.serving.as_ref().is_some_and(|s| !s.done.is_finished());
                if !serving {
                    self.serving = None;
                }
                self.attempting = Some(Box::pin(
                    finder.attempt(serving, self.options.poll_interval, self.options.seeded),
                ));
            }
            connector::Effect::Disconnect => {
                if self.gone.is_none() && self.lines.is_some() {
                    info!("leaving the coordinator whose term is over (SPEC.md §14.3)");
                }
                self.lines = None;
                self.gone = None;
                self.writer = None;
            }
            connector::Effect::Unavailable { call } => {
                let reason = self
                    .failure
                    .clone()
                    .expect("only a failed attempt ends calls unavailable");
                if let Some(events) = self.calls.remove(&call) {
                    let _ = events.send(CallEvent::Unavailable(reason));
                }
            }
            // The loop ends on it.
            connector::Effect::Stop => {}
        }
    }

    fn call_effect(&mut self, effect: Effect) {
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
                if let Some(events) = self.calls.remove(&call) {
                    let _ = events.send(CallEvent::Stop);
                }
            }
            Effect::LandSettled { call } => {
                if let Some(settled) = self.panicked.remove(&call) {
                    let _ = settled.send(());
                }
            }
        }
    }

    /// A new connection to the coordinator of `epoch` is ready; the
    /// connector then has the client replay its calls on it (§9.4).
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
