//! What a process's callers and its single-flight thread share (SPEC.md
//! §10): the [`Connector`] under one lock, the channels to the calls, and
//! the connection.
//!
//! A call steps the machine itself and writes its own `run` and `land`
//! (BENCHMARKS.md, "Issue 30's hot path", design 3), instead of handing each
//! to the single-flight thread: two of an uncontended call's seven thread
//! hand-offs were a caller waking that thread only to have it write a line.
//! The call that waits alone reads its own answer too ("Design 4, built"):
//! it borrows the connection for as long as it waits (`Hub::wait`). The
//! thread keeps what it is for: it reads the connection whenever it is not
//! lent, runs the timers, the election, the attempts and the term this
//! process serves, and writes whatever a caller could not write at once, so
//! that a busy caller never holds the connection up for long (§10.1). Only
//! the thread carries out the effects that touch those ([`Work`]); a
//! caller's step that gives one wakes it.
//!
//! The lock is held for a step and the reads and writes it makes, never
//! across an `.await`: a `read` or a `write` system call on a socket that
//! does not wait; bytes the socket does not take wait for the thread's next
//! turn at the connection (`Hub::poll_link`).

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::{debug, warn};

use super::clock::Clock;
use super::error::Unavailable;
use super::lines::Framer;
use super::mutant::Seeded;
use crate::client::connector::{self, Connector};
use crate::client::{CallId, CallOptions, Effect, Resolution, StopReason};
use crate::coordinator::MAX_OPEN_REQUESTS_PER_CONNECTION;
use crate::protocol::{FencingToken, Key, Outcome, decode_response, encode};
use crate::transport::wire::{Lent, Reader, Wire};

/// What a call asks of the process.
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
    /// Withdraws the call. Its event channel closes after the events
    /// already sent. A detached call that leads stays, for its work (SPEC.md
    /// §15.3).
    Cancel { call: CallId },
}

/// What a call is told.
pub(super) enum CallEvent {
    Lead(FencingToken),
    Resolved(Resolution),
    Unavailable(Arc<Unavailable>),
    /// Drop the work of the detached call, whose caller has left: nobody
    /// waits for it (SPEC.md §15.3).
    Stop,
}

/// The process has stopped: its thread takes no command.
#[derive(Debug)]
pub(super) struct Stopped;

/// How the callers reach the process: the hub, stepped in the caller's own
/// thread, and the single-flight thread's inbox for a close. Every handle
/// and every task that may still withdraw a call holds one; when the last
/// goes, the inbox closes and the thread closes the process (§10.4).
#[derive(Clone)]
pub(super) struct Commands {
    hub: Arc<Hub>,
    closes: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

/// The single-flight thread's end of [`Commands`]: the closes asked for.
pub(super) type Closes = mpsc::UnboundedReceiver<oneshot::Sender<()>>;

impl Commands {
    /// The callers' end, the thread's inbox of closes, and the hub both
    /// step; `clock` says which clock both read.
    pub(super) fn new(clock: Clock, seeded: Seeded) -> (Commands, Closes, Arc<Hub>) {
        let (closes, inbox) = mpsc::unbounded_channel();
        let hub = Arc::new(Hub::new(clock, seeded));
        let commands = Commands {
            hub: hub.clone(),
            closes,
        };
        (commands, inbox, hub)
    }

    /// Carries out `command` in the caller's thread.
    pub(super) fn send(&self, command: Command) -> Result<(), Stopped> {
        self.hub.command(command)
    }

    /// Waits for the first event of `call` (`Hub::wait`).
    pub(super) async fn wait(
        &self,
        call: CallId,
        events: &mut mpsc::UnboundedReceiver<CallEvent>,
    ) -> Option<CallEvent> {
        self.hub.wait(call, events).await
    }

    /// Waits for the first event of a call on this thread, blocking it; the
    /// single-flight thread reads for the call.
    pub(super) fn wait_blocking(
        &self,
        events: &mut mpsc::UnboundedReceiver<CallEvent>,
    ) -> Option<CallEvent> {
        // Its start left the reading to its wait (`Hub::step`).
        self.hub.lock().choose_reader(true);
        events.blocking_recv()
    }

    /// Asks the single-flight thread to finish the lands in progress, end
    /// the term if this process coordinates, and stop; `done` is told when
    /// it has.
    pub(super) fn close(&self, done: oneshot::Sender<()>) -> Result<(), Stopped> {
        self.closes.send(done).map_err(|_| Stopped)
    }
}

/// An effect of the connector that only the single-flight thread carries
/// out, in order: it owns the attempt, the election's watch and the term.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Work {
    StartAttempt,
    /// Drop the election's watch; the connection is gone already.
    Disconnect,
    Stop,
}

pub(super) struct Hub {
    state: Mutex<State>,
    /// Wakes the single-flight thread when a caller's step gave it
    /// [`Work`] or brought the connector's timer forward.
    pub(super) thread: Notify,
    clock: Clock,
    origin: tokio::time::Instant,
}

/// What the lock guards.
pub(super) struct State {
    connector: Connector,
    /// Each call's channel, until the call is resolved, withdrawn or told to
    /// stop.
    calls: BTreeMap<CallId, mpsc::UnboundedSender<CallEvent>>,
    /// Leaders whose work panicked, each told when the machine says its land
    /// is settled (§9.6).
    panicked: BTreeMap<CallId, oneshot::Sender<()>>,
    /// The current connection.
    link: Option<Link>,
    /// The number of the last connection made.
    links: u64,
    /// A step of a caller left bytes for the thread to write.
    behind: bool,
    /// Why the attempt that just ended failed, for the calls it ends.
    pub(super) failure: Option<Arc<Unavailable>>,
    /// The thread's share of the effects so far, in order.
    work: Vec<Work>,
}

impl Hub {
    fn new(clock: Clock, seeded: Seeded) -> Hub {
        Hub {
            state: Mutex::new(State {
                connector: seeded.connector(),
                calls: BTreeMap::new(),
                panicked: BTreeMap::new(),
                link: None,
                links: 0,
                behind: false,
                failure: None,
                work: Vec::new(),
            }),
            thread: Notify::new(),
            clock,
            origin: clock.now(),
        }
    }

    /// The connector's time: since the hub was made.
    fn now(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.origin)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock is a bug of this module; the state is the
        // machine's, whole after every step, so the next holder goes on.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `None` once the connector has stopped; otherwise when it wants
    /// [`connector::Event::TimerFired`], on the runtime's clock: `Some(None)`
    /// for never, or past what tokio can represent.
    pub(super) fn timer(&self) -> Option<Option<tokio::time::Instant>> {
        let state = self.lock();
        if state.connector.is_stopped() {
            return None;
        }
        let at = state.connector.poll_timeout();
        Some(at.and_then(|at| self.origin.checked_add(at)))
    }

    /// Feeds `event` to the connector with `state` locked, carries out
    /// the effects that are not the thread's, and sets who reads what
    /// arrives next (`State::choose_reader`). A call that starts does not
    /// make the thread read: its own wait borrows the connection, or hands
    /// the reading to the thread (`Hub::lend`).
    pub(super) fn step(&self, state: &mut State, event: connector::Event) {
        let started = matches!(event, connector::Event::CallStarted { .. });
        self.feed(state, event);
        state.choose_reader(!started);
    }

    /// Feeds `event` to the connector and carries out the effects that are
    /// not the thread's, leaving who reads to the caller: once per batch
    /// of lines read (`Hub::read`), not once per line.
    fn feed(&self, state: &mut State, event: connector::Event) {
        let now = self.now();
        for effect in state.connector.step(now, event) {
            state.apply(effect);
        }
        state.failure = None;
    }

    /// A caller's command, stepped here; wakes the thread when the step
    /// left it work or an earlier timer.
    fn command(&self, command: Command) -> Result<(), Stopped> {
        let mut state = self.lock();
        if state.connector.is_stopped() {
            return Err(Stopped);
        }
        let timer = state.connector.poll_timeout();
        let unread = state.reader() == Some(Reader::Nobody);
        match command {
            Command::Start {
                call,
                key,
                options,
                events,
            } => {
                let in_progress = state.connector.client().calls_in_progress();
                if in_progress >= MAX_OPEN_REQUESTS_PER_CONNECTION {
                    let _ = events.send(CallEvent::Unavailable(Arc::new(
                        Unavailable::TooManyCalls(in_progress),
                    )));
                    return Ok(());
                }
                state.calls.insert(call, events);
                if state
                    .link
                    .as_ref()
                    .is_some_and(|link| link.lender.is_some())
                {
                    // The caller that reads for itself may be on another
                    // runtime, or not polled for a while: the thread reads
                    // for every call again (§10.1).
                    state.take_back();
                }
                if unread && !state.connector.client().is_idle() {
                    // What came while nobody read (a land's `ack`) is read
                    // before this call's `run` is written, not after: the
                    // `run` wakes the coordinator onto this core (a Unix
                    // socket's sync wake-up), where reading it then would
                    // delay the answer (BENCHMARKS.md, "Calls now and
                    // then").
                    let _ = self.read_once(&mut state);
                }
                self.step(
                    &mut state,
                    connector::Event::CallStarted { call, key, options },
                );
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
                    state.panicked.retain(|_, waiter| !waiter.is_closed());
                    state.panicked.insert(call, settled);
                }
                self.step(&mut state, connector::Event::WorkFinished { call, outcome });
            }
            Command::Cancel { call } => {
                self.step(&mut state, connector::Event::CallCancelled { call });
                // A detached call that leads stays, for its work (§15.3).
                if !state.connector.client().is_detached(call) {
                    state.calls.remove(&call);
                }
            }
        }
        // A step that makes the thread read again (a panicked leader waits
        // for its `ack`, a detached leader for `stop`) needs no wake here:
        // the wire wakes it for what came meanwhile (`Wire::set_reader`).
        self.after_step(state, timer);
        Ok(())
    }

    /// Wakes the thread if the steps made since the connector's timer was
    /// `timer` left it work, bytes to write, or an earlier timer.
    fn after_step(&self, mut state: MutexGuard<'_, State>, timer: Option<Duration>) {
        let earlier = match (state.connector.poll_timeout(), timer) {
            (Some(now), Some(before)) => now < before,
            (now, before) => now.is_some() && before.is_none(),
        };
        let wake = earlier || !state.work.is_empty() || std::mem::take(&mut state.behind);
        drop(state);
        if wake {
            self.thread.notify_one();
        }
    }

    /// The single-flight thread's turn at the connection: writes what a
    /// step could not, then reads what has arrived and steps the connector
    /// with it. `Ready` when it stepped (the driver then carries out the
    /// thread's work); `Pending` once `cx` is registered to be woken by the
    /// connection.
    pub(super) fn poll_link(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        let Some(link) = &mut state.link else {
            // The driver's loop polls again once a connection is made.
            return Poll::Pending;
        };
        if link.behind && link.push(cx).is_ready() {
            link.behind = false;
        }
        let stepped = self.read(&mut state, |wire, buf| wire.poll_read(cx, buf));
        if stepped.is_ready() {
            // Lent, but the call did not read this within a check
            // (`LEASE_CHECK`): the thread reads for every call again.
            state.take_back();
        }
        stepped
    }

    /// Reads what `read` gives of the connection and steps the connector
    /// with each whole line, then with the connection's end if it came.
    /// `Ready` when it stepped.
    fn read(
        &self,
        state: &mut State,
        mut read: impl FnMut(&mut dyn Wire, &mut [u8]) -> Poll<io::Result<usize>>,
    ) -> Poll<()> {
        let Some(link) = &mut state.link else {
            return Poll::Pending;
        };
        let mut lines = Vec::new();
        let mut ended = None;
        let Link { wire, framer, .. } = link;
        loop {
            match framer.poll_line(|chunk| read(wire.as_mut(), chunk)) {
                Poll::Ready(Ok(line)) => lines.push(line),
                Poll::Pending => break,
                Poll::Ready(Err(error)) => {
                    ended = Some(error);
                    break;
                }
            }
        }
        if lines.is_empty() && ended.is_none() {
            return Poll::Pending;
        }
        for line in lines {
            let event = match decode_response(&line) {
                Ok(response) => connector::Event::ResponseReceived { response },
                Err(error) => {
                    warn!(%error, "the coordinator sent a malformed response; reconnecting");
                    connector::Event::ConnectionLost
                }
            };
            self.feed(state, event);
        }
        if let Some(error) = ended {
            debug!(%error, "lost the coordinator");
            // The connector leaves the connection (and the hub drops it);
            // what is left of it is never read again.
            state.link = None;
            self.feed(state, connector::Event::ConnectionLost);
        }
        state.choose_reader(true);
        Poll::Ready(())
    }

    /// Waits for the first event of `call`, reading the connection itself
    /// while it is the process's only call and the transport lends it
    /// (§10.1): its answer then wakes this caller's runtime alone, not the
    /// single-flight thread too. Otherwise, or once another call starts,
    /// the thread reads and hands the answer over.
    pub(super) async fn wait(
        &self,
        call: CallId,
        events: &mut mpsc::UnboundedReceiver<CallEvent>,
    ) -> Option<CallEvent> {
        match events.try_recv() {
            Ok(event) => return Some(event),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        let Some(lease) = self.lend(call) else {
            return events.recv().await;
        };
        loop {
            tokio::select! {
                biased;
                event = events.recv() => return event,
                ready = lease.lent().readable() => {
                    let Ok(mut ready) = ready else { break };
                    match self.read_lent(&lease) {
                        None => break,
                        Some(Drained::Yes) => ready.clear_ready(),
                        // What is left sets no readiness anew: read it at
                        // the next turn, unless the answer came.
                        Some(Drained::No) => {}
                    }
                }
            }
        }
        // The lease was taken back: the thread reads again.
        drop(lease);
        events.recv().await
    }

    /// The connection lent to `call`, if it is the process's only call
    /// that waits and the transport lends; otherwise the thread reads for
    /// it.
    fn lend(&self, call: CallId) -> Option<Lease<'_>> {
        let mut state = self.lock();
        let lease = self.lend_locked(&mut state, call);
        if lease.is_none() {
            // Its start left the reading to this wait (`Hub::step`).
            state.choose_reader(true);
        }
        lease
    }

    fn lend_locked(&self, state: &mut State, call: CallId) -> Option<Lease<'_>> {
        static UNLENDABLE: AtomicBool = AtomicBool::new(false);
        if UNLENDABLE.load(Ordering::Relaxed) || tokio::runtime::Handle::try_current().is_err() {
            return None;
        }
        // Another call that waits, on another runtime maybe, would wait for
        // this caller's reads; a leader that has returned (its receiver
        // dropped, its land's `ack` still to come) waits for nothing.
        let alone = state.calls.contains_key(&call)
            && state
                .calls
                .iter()
                .all(|(other, events)| *other == call || events.is_closed());
        if !alone {
            return None;
        }
        let link = state.link.as_mut()?;
        if link.lender.is_some() || link.behind {
            return None;
        }
        // A runtime without its I/O driver cannot register anything, and
        // tokio offers no way to ask but a panic; such a caller's process
        // never lends again (its calls wait for the thread, as always).
        let lent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| link.wire.lend()));
        let lent = match lent {
            Ok(Some(Ok(lent))) => lent,
            Ok(Some(Err(error))) => {
                debug!(%error, "cannot register the connection on the caller's runtime");
                return None;
            }
            Ok(None) => return None,
            Err(_) => {
                UNLENDABLE.store(true, Ordering::Relaxed);
                return None;
            }
        };
        link.loans += 1;
        let lease = link.loans;
        link.lender = Some(lease);
        link.set_reader(Reader::Caller);
        Some(Lease {
            hub: self,
            link: link.number,
            lease,
            lent: Some(lent),
        })
    }

    /// Reads the connection once for a call that holds `lease`, and steps
    /// what came: `None` when the lease was taken back, or the connection
    /// is gone. One read, not until the socket is empty: a call's answer
    /// is one line, which one read brings, and a second read would most
    /// often find nothing (a system call on the way of every answer;
    /// BENCHMARKS.md, "Calls now and then").
    fn read_lent(&self, lease: &Lease<'_>) -> Option<Drained> {
        let mut state = self.lock();
        let held = state
            .link
            .as_ref()
            .is_some_and(|link| link.number == lease.link && link.lender == Some(lease.lease));
        if !held {
            return None;
        }
        let timer = state.connector.poll_timeout();
        let (stepped, drained) = self.read_once(&mut state);
        if stepped.is_ready() {
            self.after_step(state, timer);
        }
        Some(drained)
    }

    /// Reads the connection once, registering nobody, and steps what came.
    /// A wire that the thread alone reads (`Polled`) has nothing for it.
    fn read_once(&self, state: &mut State) -> (Poll<()>, Drained) {
        let mut drained = Drained::No;
        let mut reads = 0;
        let stepped = self.read(state, |wire, buf| {
            if reads == 1 {
                return Poll::Pending;
            }
            reads += 1;
            match wire.try_read(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    drained = Drained::Yes;
                    Poll::Pending
                }
                done => Poll::Ready(done),
            }
        });
        (stepped, drained)
    }
}

/// Whether a caller's read found the socket empty, so that its
/// registration is ready again only once more arrives.
enum Drained {
    Yes,
    No,
}

/// A call's loan of the connection (§10.1); the thread reads again when it
/// is dropped.
struct Lease<'a> {
    hub: &'a Hub,
    link: u64,
    lease: u64,
    /// `Some` until dropped.
    lent: Option<Lent>,
}

impl Lease<'_> {
    fn lent(&self) -> &Lent {
        self.lent.as_ref().expect("lent until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let lent = self.lent.take().expect("dropped once");
        let mut state = self.hub.lock();
        if let Some(link) = &mut state.link
            && link.number == self.link
        {
            link.wire.give_back(lent);
            if link.lender == Some(self.lease) {
                link.lender = None;
                // What arrived since the caller's last read wakes the
                // thread now if it is to read: the watch reports a socket
                // that is readable when its interest changes.
                state.choose_reader(true);
            }
        }
    }
}

impl State {
    /// The thread's work so far, taken. The thread's next turn at the
    /// connection writes what its own steps could not.
    pub(super) fn take_work(&mut self) -> Vec<Work> {
        self.behind = false;
        std::mem::take(&mut self.work)
    }

    /// A new connection, before the connector hears of it (its replay is
    /// written there, §9.4), with the framer of its handshake and the
    /// bytes read so far.
    pub(super) fn connect(&mut self, wire: Box<dyn Wire>, framer: Framer, flush: bool) {
        self.links += 1;
        self.link = Some(Link {
            wire,
            framer,
            number: self.links,
            lender: None,
            loans: 0,
            pending: Vec::new(),
            behind: false,
            broken: false,
            flush,
        });
    }

    /// Bytes read on the current connection so far.
    pub(super) fn received(&self) -> u64 {
        self.link.as_ref().map_or(0, |link| link.framer.received())
    }

    /// The process stops: the calls still in progress see their channels
    /// close (they end as the process shut down), and the connection goes.
    pub(super) fn stop(&mut self) {
        self.calls.clear();
        self.panicked.clear();
        self.link = None;
    }

    /// Ends a loan of the connection, if any: the thread reads again.
    fn take_back(&mut self) {
        if let Some(link) = &mut self.link
            && link.lender.take().is_some()
        {
            self.choose_reader(true);
        }
    }

    /// Sets who reads what arrives on a connection that no call borrows
    /// (SPEC.md §10.1): the thread while anyone waits for an answer (a
    /// call, a close, a drain, a leader whose work panicked), nobody
    /// otherwise, so that a land's `ack` after a call now and then wakes
    /// no thread; it waits in the socket until the connection is read
    /// next. With `promote` false, a connection that nobody reads stays so
    /// (a call that starts leaves it to its wait).
    fn choose_reader(&mut self, promote: bool) {
        let Some(link) = &self.link else {
            return;
        };
        if link.lender.is_some() || (!promote && link.wire.reader() == Reader::Nobody) {
            return;
        }
        self.panicked.retain(|_, waiter| !waiter.is_closed());
        let awaits = self.connector.awaits_answers() || !self.panicked.is_empty();
        let reader = if awaits {
            Reader::Thread
        } else {
            Reader::Nobody
        };
        if let Some(link) = &mut self.link {
            link.set_reader(reader);
        }
    }

    /// Who reads what arrives on the connection, if there is one.
    fn reader(&self) -> Option<Reader> {
        self.link.as_ref().map(|link| link.wire.reader())
    }

    fn apply(&mut self, effect: connector::Effect) {
        match effect {
            connector::Effect::Call(effect) => self.call_effect(effect),
            connector::Effect::StartAttempt => self.work.push(Work::StartAttempt),
            connector::Effect::Disconnect => {
                // At once, not when the thread gets to it: a request sent
                // after this belongs on the next connection, where the client
                // replays it (§9.4), and a line still unread on this one is
                // for a connector that has left it.
                self.link = None;
                self.work.push(Work::Disconnect);
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
            connector::Effect::Stop => self.work.push(Work::Stop),
        }
    }

    fn call_effect(&mut self, effect: Effect) {
        match effect {
            Effect::Send(request) => {
                if let Some(link) = &mut self.link {
                    let mut line = encode(&request).into_bytes();
                    line.push(b'\n');
                    if link.send(&line) {
                        self.behind = true;
                    }
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
                    StopReason::NobodyWaits => debug!(
                        call = call.0,
                        "nobody waits for the detached flight; stopping its work (SPEC.md §15.3)"
                    ),
                    StopReason::DetachUnsupported => tracing::warn!(
                        call = call.0,
                        "the coordinator does not know detached calls (SPEC.md §15); the flight was cancelled, which interrupted its joiners, and its work stopped"
                    ),
                    StopReason::FlightLost => debug!(
                        call = call.0,
                        "a detached call lost its flight; stopping its work"
                    ),
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
}

/// The connection, read and written by whoever steps the machine.
struct Link {
    wire: Box<dyn Wire>,
    /// The framer, with the part of a line read so far.
    framer: Framer,
    /// Which connection of the process this is.
    number: u64,
    /// The lease of the call that reads it on its own runtime, if any.
    lender: Option<u64>,
    /// The number of the last lease of this connection to a call.
    loans: u64,
    /// Bytes not yet taken by the socket, in order.
    pending: Vec<u8>,
    /// A write or a flush waits for the socket: the thread's turn at the
    /// connection (`Hub::poll_link`) finishes it, with the thread's
    /// waker registered. A caller then only appends: its own poll would
    /// replace that waker.
    behind: bool,
    /// A write failed: the reader sees the connection end and the connector
    /// leaves it; until then, bytes are dropped as on a closed socket.
    broken: bool,
    /// Flush after each write: a TLS writer keeps records back until
    /// flushed (a Unix socket's flush does nothing). `false` only for a
    /// seeded bug (SPEC.md §12.7).
    flush: bool,
}

impl Link {
    fn set_reader(&mut self, reader: Reader) {
        if self.wire.reader() != reader {
            self.wire.set_reader(reader);
        }
    }

    /// Writes `line` now if the socket takes it; otherwise leaves the rest
    /// to the thread, and says so.
    fn send(&mut self, line: &[u8]) -> bool {
        if self.broken {
            return false;
        }
        self.pending.extend_from_slice(line);
        if self.behind {
            return false;
        }
        // No waker to register: if the socket is full, the thread polls
        // again with its own.
        let mut cx = Context::from_waker(Waker::noop());
        if self.push(&mut cx).is_pending() {
            self.behind = true;
            return true;
        }
        false
    }

    /// Writes what is pending, then flushes.
    fn push(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while !self.pending.is_empty() {
            match self.wire.poll_write(cx, &self.pending) {
                Poll::Ready(Ok(written)) if written > 0 => {
                    self.pending.drain(..written);
                }
                Poll::Ready(_) => {
                    self.broken = true;
                    self.pending = Vec::new();
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.flush {
            match self.wire.poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => self.broken = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::AtomicBool;
    use std::task::Wake;

    use super::*;
    use crate::client::connector::Attempted;
    use crate::transport::wire::SocketWire;

    /// A waker that remembers being woken: the single-flight thread's.
    #[derive(Default)]
    struct Woken(AtomicBool);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// The coordinator's end of a connection, read line by line.
    struct Coordinator {
        lines: BufReader<UnixStream>,
        socket: UnixStream,
    }

    impl Coordinator {
        /// Reads the next line, which must be an `op` request.
        fn reads(&mut self, op: &str) {
            let mut line = String::new();
            self.lines.read_line(&mut line).expect("a line");
            assert!(line.contains(&format!("\"op\":\"{op}\"")), "{line}");
        }

        fn writes(&mut self, line: &str) {
            self.socket.write_all(line.as_bytes()).expect("written");
        }
    }

    /// A hub connected over a socket pair, as the driver connects one.
    fn connected() -> (Arc<Hub>, Coordinator) {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        let (_, _, hub) = Commands::new(Clock::System, Seeded::NONE);
        let mut state = hub.lock();
        hub.step(&mut state, connector::Event::TimerFired { received: 0 });
        assert_eq!(state.take_work(), vec![Work::StartAttempt]);
        let wire = SocketWire::new(ours).expect("a wire");
        state.connect(Box::new(wire), Framer::new(), true);
        let attempt = Attempted::Connected;
        hub.step(&mut state, connector::Event::AttemptEnded { attempt });
        drop(state);
        let coordinator = Coordinator {
            lines: BufReader::new(theirs.try_clone().expect("a clone")),
            socket: theirs,
        };
        (hub, coordinator)
    }

    /// Whether the thread, parked on the connection with `woken`, has
    /// been woken once the runtime has turned (a sleep parks it in
    /// `epoll_wait`, which hands over what the kernel has noted already).
    async fn thread_woken(woken: &Arc<Woken>) -> bool {
        tokio::time::sleep(Duration::from_millis(1)).await;
        woken.0.swap(false, Ordering::SeqCst)
    }

    /// §10.1: after a call now and then, a leader's, nobody waits for
    /// what comes: its land's `ack` wakes no thread, and waits in the
    /// socket until someone must read. A close must (§10.4): it reads the
    /// `ack` at once, and stops.
    #[tokio::test]
    async fn a_lands_ack_wakes_nobody_until_a_close_waits_for_it() {
        let (hub, mut coordinator) = connected();
        let (events, mut received) = mpsc::unbounded_channel();
        let call = CallId(1);
        let key = Key::new("k").expect("a key");
        let options = CallOptions::default();
        let start = Command::Start {
            call,
            key,
            options,
            events,
        };
        hub.command(start).expect("started");
        coordinator.reads("run");
        coordinator.writes("{\"op\":\"lead\",\"id\":\"1\",\"token\":\"4294967297\"}\n");
        let lead = hub.wait(call, &mut received).await;
        assert!(matches!(lead, Some(CallEvent::Lead(_))), "the call leads");
        let woken = Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let polled = hub.poll_link(&mut Context::from_waker(&waker));
        assert!(polled.is_pending(), "nothing to read");
        let outcome = Outcome::Value("v".into());
        let finished = Command::WorkFinished {
            call,
            outcome,
            settled: None,
        };
        hub.command(finished).expect("landed");
        drop(received);
        coordinator.reads("land");
        coordinator.writes("{\"op\":\"ack\",\"id\":\"1\"}\n");
        assert!(!thread_woken(&woken).await, "the ack woke the thread");
        assert!(
            !hub.lock().connector.client().is_idle(),
            "the land waits for its ack"
        );
        {
            let mut state = hub.lock();
            hub.step(&mut state, connector::Event::CloseRequested);
            assert!(state.take_work().is_empty(), "the close waits for the ack");
        }
        assert!(thread_woken(&woken).await, "the close has the thread read");
        assert!(hub.poll_link(&mut Context::from_waker(&waker)).is_ready());
        assert_eq!(hub.lock().take_work(), vec![Work::Stop], "acknowledged");
    }
}
