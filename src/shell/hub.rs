//! What a process's callers and its single-flight thread share (SPEC.md
//! §10): the [`Connector`] under one lock, the channels to the calls, and
//! the write half of the connection.
//!
//! A call steps the machine itself and writes its own `run` and `land`
//! (BENCHMARKS.md, "Issue 30's hot path", design 3), instead of handing each
//! to the single-flight thread: two of an uncontended call's seven thread
//! hand-offs were a caller waking that thread only to have it write a line.
//! The thread keeps what it is for: it reads the connection, runs the
//! timers, the election, the attempts and the term this process serves, and
//! writes whatever a caller could not write at once, so that a busy caller
//! never holds the connection up (§10.1). Only the thread carries out the
//! effects that touch those ([`Work`]); a caller's step that gives one
//! wakes it.
//!
//! The lock is held for a step and the writes it makes, never across an
//! `.await`: one `write` system call of a line on a socket whose buffer has
//! room, otherwise the bytes wait for the thread's writer task.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::debug;

use super::error::Unavailable;
use crate::client::connector::{self, Connector};
use crate::client::{CallId, CallOptions, Effect, Resolution, StopReason};
use crate::coordinator::MAX_OPEN_REQUESTS_PER_CONNECTION;
use crate::protocol::{FencingToken, Key, Outcome, encode};

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
    pub(super) fn new(clock: Clock) -> (Commands, Closes, Arc<Hub>) {
        let (closes, inbox) = mpsc::unbounded_channel();
        let hub = Arc::new(Hub::new(clock));
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

    /// Asks the single-flight thread to finish the lands in progress, end
    /// the term if this process coordinates, and stop; `done` is told when
    /// it has.
    pub(super) fn close(&self, done: oneshot::Sender<()>) -> Result<(), Stopped> {
        self.closes.send(done).map_err(|_| Stopped)
    }
}

/// Which clock the machine's time is read from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Clock {
    /// The system's: the single-flight thread's runtime never pauses its
    /// clock, and a caller's runtime may (a test with paused time), which
    /// must not move the connector's deadlines.
    System,
    /// The current runtime's, when every caller runs on the driver's
    /// runtime (the simulation's simulated time).
    Runtime,
}

impl Clock {
    fn now(self) -> tokio::time::Instant {
        match self {
            Clock::System => tokio::time::Instant::from_std(std::time::Instant::now()),
            Clock::Runtime => tokio::time::Instant::now(),
        }
    }
}

/// An effect of the connector that only the single-flight thread carries
/// out, in order: it owns the attempt, the reader, the watch and the term.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Work {
    StartAttempt,
    /// Drop the reader and the election's watch; the writer is gone already.
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
    /// The current connection's write half.
    out: Option<Outgoing>,
    /// Why the attempt that just ended failed, for the calls it ends.
    pub(super) failure: Option<Arc<Unavailable>>,
    /// The thread's share of the effects so far, in order.
    work: Vec<Work>,
}

impl Hub {
    fn new(clock: Clock) -> Hub {
        Hub {
            state: Mutex::new(State {
                connector: Connector::new(),
                calls: BTreeMap::new(),
                panicked: BTreeMap::new(),
                out: None,
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
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Feeds `event` to the connector with `state` locked, and carries out
    /// the effects that are not the thread's.
    pub(super) fn step(&self, state: &mut State, event: connector::Event) {
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
                self.step(&mut state, connector::Event::CallStarted { call, key, options });
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
        let earlier = match (state.connector.poll_timeout(), timer) {
            (Some(now), Some(before)) => now < before,
            (now, before) => now.is_some() && before.is_none(),
        };
        let wake = earlier || !state.work.is_empty();
        drop(state);
        if wake {
            self.thread.notify_one();
        }
        Ok(())
    }
}

impl State {
    /// The thread's work so far, taken.
    pub(super) fn take_work(&mut self) -> Vec<Work> {
        std::mem::take(&mut self.work)
    }

    /// The write half of a new connection, before the connector hears of it
    /// (its replay is written there, §9.4). Returns what wakes the writer
    /// task that `write_behind` runs for it.
    pub(super) fn connect(
        &mut self,
        write: Box<dyn AsyncWrite + Send + Unpin>,
        flush: bool,
    ) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        self.out = Some(Outgoing {
            write,
            pending: Vec::new(),
            behind: false,
            broken: false,
            flush,
            wake: wake.clone(),
        });
        wake
    }

    /// The process stops: the calls still in progress see their channels
    /// close (they end as the process shut down), and the connection goes.
    pub(super) fn stop(&mut self) {
        self.calls.clear();
        self.panicked.clear();
        self.drop_writer();
    }

    fn drop_writer(&mut self) {
        if let Some(out) = self.out.take() {
            // Its writer task, if waiting, wakes to find it gone and ends.
            out.wake.notify_one();
        }
    }

    fn apply(&mut self, effect: connector::Effect) {
        match effect {
            connector::Effect::Call(effect) => self.call_effect(effect),
            connector::Effect::StartAttempt => self.work.push(Work::StartAttempt),
            connector::Effect::Disconnect => {
                // At once, not when the thread gets to it: a request sent
                // after this belongs on the next connection, where the client
                // replays it (§9.4).
                self.drop_writer();
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
                if let Some(out) = &mut self.out {
                    let mut line = encode(&request).into_bytes();
                    line.push(b'\n');
                    out.send(&line);
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

/// The write half of the connection, written by whoever steps the machine.
struct Outgoing {
    write: Box<dyn AsyncWrite + Send + Unpin>,
    /// Bytes not yet taken by the socket, in order.
    pending: Vec<u8>,
    /// The writer task owns the write half: a write or a flush waits for
    /// the socket, and it has registered to be woken. A caller then only
    /// appends: its own poll would replace the task's waker.
    behind: bool,
    /// A write failed: the reader sees the connection end and the connector
    /// leaves it; until then, bytes are dropped as on a closed socket.
    broken: bool,
    /// Flush after each write: a TLS writer keeps records back until
    /// flushed (a Unix socket's flush does nothing). `false` only for a
    /// seeded bug (SPEC.md §12.7).
    flush: bool,
    wake: Arc<Notify>,
}

impl Outgoing {
    /// Writes `line` now if the socket takes it, otherwise leaves the rest
    /// to the writer task.
    fn send(&mut self, line: &[u8]) {
        if self.broken {
            return;
        }
        self.pending.extend_from_slice(line);
        if self.behind {
            return;
        }
        // No waker to register: if the socket is full, the writer task
        // polls again with its own.
        let mut cx = Context::from_waker(Waker::noop());
        if self.push(&mut cx).is_pending() {
            self.behind = true;
            self.wake.notify_one();
        }
    }

    /// Writes what is pending, then flushes.
    fn push(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.write).poll_write(cx, &self.pending) {
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
            match Pin::new(&mut self.write).poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => self.broken = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }
}

/// The writer task of one connection, on the single-flight thread's
/// runtime: writes what a step could not, whenever the socket takes it, and
/// ends when the connection is dropped.
pub(super) async fn write_behind(hub: Arc<Hub>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let connected = std::future::poll_fn(|cx| {
            let mut state = hub.lock();
            match &mut state.out {
                Some(out) if Arc::ptr_eq(&out.wake, &wake) => match out.push(cx) {
                    Poll::Ready(()) => {
                        out.behind = false;
                        Poll::Ready(true)
                    }
                    Poll::Pending => Poll::Pending,
                },
                _ => Poll::Ready(false),
            }
        })
        .await;
        if !connected {
            return;
        }
    }
}
