//! The client side of one process (SPEC.md §9, §10): connects to the
//! coordinator, or campaigns when there is none, and reads the connection
//! into the pure [`Connector`](crate::client::Connector) that the callers
//! step too (`super::hub`). It runs on the process's single-flight thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::error::Unavailable;
use super::hub::{Closes, Hub, Work};
use super::lines::Lines;
use super::mutant::{Mutant, Seeded};
use super::options::{HANDSHAKE_TIMEOUT, Options};
use super::server::{Lifetime, Serving};
use super::stats::Counters;
use super::unanswered::{Gone, Unanswered};
use super::upstream::{Above, Greeted, Serves, greet};
use crate::backend::BackendError;
use crate::client::connector::{self, Attempted, CLOSE_TIMEOUT};
use crate::election::{Election, Term};
use crate::protocol::{ClientHello, HandshakeError};
use crate::transport::{ConnectError, Connection, Transport};

/// How long a leader whose work panicked waits for its land to be settled
/// before it resumes the panic (SPEC.md §9.6). A panic often ends its
/// process next, as a close does, so the same patience as a close: its
/// joiners then get the `Panic` failure rather than `interrupted`. Past it
/// the panic goes on, and the land is still kept and sent while the process
/// lives (§9.3).
pub const PANIC_LAND_TIMEOUT: Duration = CLOSE_TIMEOUT;

/// Carries out the connector's decisions that are the thread's (SPEC.md §9,
/// §10, §14.3; `hub::Work`): it takes its turns at the connection in the
/// hub, and owns the election's watch, the attempt in progress and the term
/// it serves, and
/// holds no copy of what the machine decides (which calls lead, which lands
/// settle, when to try again or leave).
pub(super) struct Driver<E: Election, T: Transport, U> {
    /// How a term this process wins is served: the coordinator, or a host
    /// directory's relay (SPEC.md §18.1).
    serves: Serves<U>,
    /// The election and the transport, lent to the attempt in progress to
    /// reach or become the coordinator; `None` while one runs.
    finder: Option<Finder<E, T>>,
    options: Options,
    /// The connector, the calls and the writer, shared with the callers.
    hub: Arc<Hub>,
    /// A connection is in the hub, until the connector leaves it.
    connected: bool,
    gone: Option<Gone>,
    /// The attempt to reach or become the coordinator in progress. The loop
    /// polls it beside everything else, so that it never holds up a
    /// command; dropping it abandons the attempt.
    attempting: Option<Attempting<E, T>>,
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
    /// A close, or `None`: no handle is left.
    Close(Option<oneshot::Sender<()>>),
    /// A caller's step left the thread work, bytes to write, or an earlier
    /// timer.
    Hub,
    /// The thread's turn at the connection stepped the connector.
    Link,
    /// The election says the coordinator this process is connected to no
    /// longer holds its term (§14.3).
    CoordinatorGone,
    /// An attempt to reach or become the coordinator has ended.
    Attempted(Finder<E, T>, Attempt<E, T>),
    /// The time the connector asked to be woken at has come.
    Timer,
}

/// An attempt in progress, which gives the election and transport back.
type Attempting<E, T> = Pin<Box<dyn Future<Output = (Finder<E, T>, Attempt<E, T>)> + Send>>;

/// What reaches or elects the coordinator. An attempt owns it while it
/// runs, so that the driver's loop goes on reading commands meanwhile: a
/// call's deadline, a signal or a close is never held up by an election
/// that does not answer (SPEC.md §14.6).
struct Finder<E, T> {
    election: E,
    transport: T,
    /// The waits while the coordinator the election names does not answer
    /// (§14.3).
    unanswered: Unanswered,
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

impl<E, T, U> Driver<E, T, U>
where
    E: Election,
    T: Transport<Address = E::Address>,
    U: Above,
{
    pub(super) fn new(
        election: E,
        transport: T,
        options: Options,
        hub: Arc<Hub>,
        counters: Arc<Counters>,
        serves: Serves<U>,
    ) -> Driver<E, T, U> {
        Driver {
            serves,
            finder: Some(Finder {
                election,
                transport,
                unanswered: Unanswered::new(options.poll_interval),
            }),
            options,
            hub,
            connected: false,
            gone: None,
            attempting: None,
            serving: None,
            last_epoch: None,
            closers: Vec::new(),
            counters,
        }
    }

    /// Runs until every handle is gone or a close is asked for, and the
    /// connector stops.
    pub(super) async fn run(mut self, mut closes: Closes) {
        let hub = self.hub.clone();
        let mut handles_left = true;
        while let Some(timer) = hub.timer() {
            let wake = tokio::select! {
                close = closes.recv(), if handles_left => Wake::Close(close),
                () = hub.thread.notified() => Wake::Hub,
                () = std::future::poll_fn(|cx| hub.poll_link(cx)) => Wake::Link,
                () = async { self.gone.as_mut().expect("guarded").await }, if self.gone.is_some() => Wake::CoordinatorGone,
                (finder, attempt) = async { self.attempting.as_mut().expect("guarded").await }, if self.attempting.is_some() => Wake::Attempted(finder, attempt),
                () = async { tokio::time::sleep_until(timer.expect("guarded")).await }, if timer.is_some() => Wake::Timer,
            };
            let mut failure = None;
            let event = match wake {
                Wake::Close(Some(done)) => {
                    self.closers.push(done);
                    Some(connector::Event::CloseRequested)
                }
                Wake::Close(None) => {
                    // No handle is left to send commands; only lands remain.
                    handles_left = false;
                    Some(connector::Event::CloseRequested)
                }
                Wake::Hub | Wake::Link => None,
                Wake::Attempted(finder, attempt) => {
                    self.finder = Some(finder);
                    self.attempting = None;
                    let (attempt, failed) = self.attempted(attempt);
                    failure = failed;
                    Some(connector::Event::AttemptEnded { attempt })
                }
                Wake::CoordinatorGone => {
                    info!(
                        "the coordinator's term is over; reading what it sent, then leaving it (SPEC.md §14.3)"
                    );
                    self.gone = None;
                    Some(connector::Event::CoordinatorGone {
                        received: self.received(),
                    })
                }
                Wake::Timer => Some(connector::Event::TimerFired {
                    received: self.received(),
                }),
            };
            self.step(event, failure);
        }
        drop(self.attempting.take());
        hub.lock().stop();
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
        self.hub.lock().received()
    }

    /// Feeds `event`, if any, to the connector, `failure` being why the
    /// attempt it reports failed; then carries out the thread's share of
    /// every step's effects so far, a caller's among them, in order.
    ///
    /// A line read from a connection that a caller's step has just left
    /// (its `Disconnect` still in the work) reaches a connector that is no
    /// longer connected, which ignores it; no new connection is made before
    /// this thread has carried that `Disconnect` out.
    fn step(&mut self, event: Option<connector::Event>, failure: Option<Arc<Unavailable>>) {
        let hub = self.hub.clone();
        let work = {
            let mut state = hub.lock();
            if let Some(event) = event {
                state.failure = failure;
                hub.step(&mut state, event);
            }
            state.take_work()
        };
        for work in work {
            self.apply(work);
        }
    }

    /// Takes the connection or the term an attempt brought: what the
    /// connector is told, and why it failed.
    fn attempted(&mut self, attempt: Attempt<E, T>) -> (Attempted, Option<Arc<Unavailable>>) {
        match attempt {
            Attempt::Connected {
                lines,
                writer,
                epoch,
                gone,
            } => match self.connect(lines, writer, epoch) {
                Ok(()) => {
                    self.gone = Some(gone);
                    (Attempted::Connected, None)
                }
                Err(error) => {
                    warn!(%error, "cannot use the connection to the coordinator; trying again");
                    let pause = self.options.poll_interval;
                    (Attempted::Missed { pause }, None)
                }
            },
            Attempt::Won(term, listener) => {
                self.serving =
                    Some(
                        self.serves
                            .start(term, listener, &self.options, Lifetime::UntilStopped),
                    );
                (Attempted::Won, None)
            }
            Attempt::Missed { pause } => (Attempted::Missed { pause }, None),
            Attempt::Failed { reason, pause } => {
                (Attempted::Failed { pause }, Some(Arc::new(reason)))
            }
        }
    }

    fn apply(&mut self, work: Work) {
        match work {
            Work::StartAttempt => {
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
                self.attempting = Some(Box::pin(finder.attempt(
                    serving,
                    self.options.poll_interval,
                    self.options.seeded,
                )));
            }
            Work::Disconnect => {
                if self.gone.is_none() && self.connected {
                    info!("leaving the coordinator whose term is over (SPEC.md §14.3)");
                }
                self.connected = false;
                self.gone = None;
            }
            // The loop ends on it.
            Work::Stop => {}
        }
    }

    /// A new connection to the coordinator of `epoch` is ready: it goes to
    /// the hub, where the connector's replay (§9.4) and every later request
    /// is written, and where whoever holds the hub reads it (§10.1).
    fn connect(
        &mut self,
        lines: Lines<T::Reader>,
        writer: T::Writer,
        epoch: String,
    ) -> std::io::Result<()> {
        let (reader, framer) = lines.into_parts();
        let wire = T::wire(Connection { reader, writer })?;
        if self
            .last_epoch
            .replace(epoch.clone())
            .is_some_and(|last| last != epoch)
        {
            self.counters.failover();
        }
        let flush = self
            .options
            .seeded
            .hook(Mutant::WritersNeverFlush, true, false);
        self.hub.lock().connect(wire, framer, flush);
        self.connected = true;
        Ok(())
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
        // The watch of a key whose coordinator did not answer, kept for
        // the wait below.
        let mut silent: Option<Gone> = None;
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
                        self.unanswered.reset();
                        return Attempt::Connected {
                            lines,
                            writer,
                            epoch,
                            gone,
                        };
                    }
                    Ok(None) => silent = Some(gone),
                    Err(failed) => return failed,
                }
            }
            Ok(None) => {
                self.unanswered.reset();
                debug!("no coordinator serves");
            }
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
                self.unanswered.reset();
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
            // §14.3: a key whose coordinator is silent (killed, or not yet
            // listening) is waited out, not asked of etcd every poll.
            Ok(None) => Attempt::Missed {
                pause: self.unanswered.wait_out(silent, E::TELLS_GONE, poll).await,
            },
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
        match greet(connection, &ClientHello::current()).await {
            Greeted::Answered {
                lines,
                writer,
                hello,
            } => {
                info!(epoch = %hello.epoch, pid = hello.pid, "connected to the coordinator");
                Ok(Some((lines, writer, hello.epoch)))
            }
            Greeted::Nobody => Ok(None),
            Greeted::Rejected(error) => Err(Attempt::Failed {
                reason: Unavailable::Rejected(error),
                pause: poll,
            }),
            Greeted::Unusable(error) => {
                // Do not hammer a coordinator of another version.
                let pause = if matches!(error, HandshakeError::Version(_)) {
                    HANDSHAKE_TIMEOUT / 4
                } else {
                    Duration::MAX
                };
                Err(Attempt::Failed {
                    reason: Unavailable::Handshake(error),
                    pause,
                })
            }
        }
    }
}
