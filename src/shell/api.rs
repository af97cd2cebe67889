//! The public API: [`SingleFlight`] and its calls.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::codec::{Codec, Json};
use super::driver::PANIC_LAND_TIMEOUT;
use super::error::{RunError, Unavailable};
use super::failure::{IntoFailure, panic_failure};
use super::hub::{CallEvent, Command, Commands};
use super::landed::{Landed, Role};
use super::nested::{self, Working};
use super::stats::{Counters, Stats};
use super::thread::Shared;
use crate::client::{CallId, CallOptions, Resolution};
use crate::protocol::limits::MAX_REUSE_WINDOW_MS;
use crate::protocol::{Failure, FencingToken, Key, Outcome, ReuseWindow, ShardCount};

/// Single-flight for the processes that share one directory.
///
/// Open one per process (it is cheap to clone) and call [`run`](Self::run)
/// from anywhere. The first `open` in a directory elects this process as the
/// coordinator; others connect to it, and take over if it dies
/// (SPEC.md §10). All sockets and timers live on one dedicated thread per
/// `SingleFlight`, so a busy host cannot starve the coordinator.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use single_flight::{Role, SingleFlight};
///
/// let dir = std::env::temp_dir().join(format!("single-flight-doc-{}", std::process::id()));
/// let flights = SingleFlight::open(&dir).await?;
/// let landed = flights
///     .run("report:2026-11", |token| async move {
///         // Pass `token` to whatever the work writes, so that it can refuse
///         // a stale leader (SPEC.md §6).
///         Ok::<_, std::io::Error>(format!("built under token {token}"))
///     })
///     .await?;
/// assert_eq!(landed.role, Role::Led);
/// flights.close().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SingleFlight {
    /// What each shard's client shares with the single-flight thread, in
    /// shard order (SPEC.md §19.4): one for a directory or a cluster of one
    /// shard. They share one thread and one set of counters.
    shards: Arc<[Arc<Shared>]>,
    count: ShardCount,
}

impl SingleFlight {
    /// A handle of the single-flight thread that `shards` talk to, one per
    /// shard of `count`.
    pub(super) fn from_shards(shards: Vec<Arc<Shared>>, count: ShardCount) -> SingleFlight {
        assert_eq!(shards.len(), count.get() as usize, "one client per shard");
        SingleFlight {
            shards: shards.into(),
            count,
        }
    }

    /// The client of `key`'s shard (SPEC.md §19.1): the one that decides
    /// its calls. Keys that break §3.1's rules have a shard too, whose
    /// client refuses them.
    fn shard_of(&self, key: &str) -> &Arc<Shared> {
        &self.shards[self.count.of_bytes(key.as_bytes()).index() as usize]
    }

    /// The first shard's client, which holds what every shard's shares.
    fn first(&self) -> &Arc<Shared> {
        &self.shards[0]
    }
}

impl SingleFlight {
    /// The flight directory; `None` in cluster mode.
    pub fn directory(&self) -> Option<&Path> {
        self.first().directory.as_deref()
    }

    /// This process's calls so far, by outcome, and the failovers it lived
    /// through (SPEC.md §9.8), for every clone of this `SingleFlight` and
    /// every shard (§19.4). The coordinator's counters are in
    /// [`Status::stats`](super::Status::stats).
    pub fn stats(&self) -> Stats {
        self.first().counters.snapshot()
    }

    /// Runs `work` for `key` once among every concurrent caller of every
    /// process sharing the directory: this call either leads (runs `work`
    /// with the flight's fencing token) or joins the flight in progress and
    /// receives its value, encoded as JSON. See [`call`](Self::call) for a
    /// deadline or another codec.
    ///
    /// Dropping the returned future withdraws the call; a leader's drop
    /// interrupts its joiners (SPEC.md §8.6). A leader whose `work` panics
    /// hands its joiners the failure `Panic`, then the panic goes on here
    /// (SPEC.md §9.8).
    pub async fn run<T, E, F, Fut>(&self, key: &str, work: F) -> Result<Landed<T>, RunError<E>>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: IntoFailure,
    {
        self.call(key).run(work).await
    }

    /// A call for `key` to configure before it runs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use single_flight::SingleFlight;
    /// # use std::time::Duration;
    /// # let dir = std::env::temp_dir().join(format!("single-flight-doc-call-{}", std::process::id()));
    /// let flights = SingleFlight::open(&dir).await?;
    /// let landed = flights
    ///     .call("slow")
    ///     .deadline(Duration::from_secs(30))
    ///     .run(|_token| async { Ok::<_, std::io::Error>(42) })
    ///     .await?;
    /// assert_eq!(landed.value, 42);
    /// # flights.close().await;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn call(&self, key: &str) -> Call<'_, Json> {
        Call {
            flights: self,
            key: key.to_owned(),
            deadline: None,
            reuse: None,
            detached: false,
            parent: None,
            codec: Json,
        }
    }

    /// Lets the lands of this process reach their joiners (waiting up to
    /// 2 s), ends its term if it coordinates (so that the next coordinator
    /// needs no grace window), and stops its thread. Calls still in progress
    /// in other clones end as unavailable.
    pub async fn close(self) {
        for closed in self.send_close() {
            let _ = closed.await;
        }
    }

    /// Asks every shard's client to close, all at once (SPEC.md §19.4); an
    /// answer comes once each has. None for a client that has stopped
    /// already.
    pub(super) fn send_close(&self) -> Vec<oneshot::Receiver<()>> {
        self.shards
            .iter()
            .filter_map(|shared| {
                let (done, closed) = oneshot::channel();
                let sent = shared.commands.close(done);
                sent.is_ok().then_some(closed)
            })
            .collect()
    }
}

/// One call, configured by [`SingleFlight::call`].
pub struct Call<'a, C> {
    flights: &'a SingleFlight,
    pub(super) key: String,
    pub(super) deadline: Option<Duration>,
    /// As given; checked when the call starts.
    reuse: Option<Duration>,
    detached: bool,
    /// Set by [`Call::parent`]; otherwise the flight whose work runs here.
    parent: Option<FencingToken>,
    pub(super) codec: C,
}

impl<'a, C> Call<'a, C> {
    /// Gives up after `deadline`: the call is withdrawn and, if it leads,
    /// its work is dropped and its joiners interrupted.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Encodes the value with `codec` instead of JSON. Every process calling
    /// the key must use the same codec.
    pub fn codec<D>(self, codec: D) -> Call<'a, D> {
        Call {
            flights: self.flights,
            key: self.key,
            deadline: self.deadline,
            reuse: self.reuse,
            detached: self.detached,
            parent: self.parent,
            codec,
        }
    }

    /// Takes a value that a flight of this key landed less than `window`
    /// ago, if the coordinator still keeps one, instead of running or
    /// joining; and if this call leads, its value is kept for `window` for
    /// the calls that come after it (SPEC.md §16). Failures are never kept.
    /// The window is from 1 ms to 1 hour; another is refused when the call
    /// runs, with [`RunError::InvalidCall`].
    ///
    /// The coordinator keeps values in memory, boundedly, for its term
    /// only: after a failover the first call runs the work again.
    pub fn reuse_for(mut self, window: Duration) -> Self {
        self.reuse = Some(window);
        self
    }

    /// Names the flight whose work makes this call: the flight of `token`
    /// of this `SingleFlight` (SPEC.md §17). A call made by a work on the
    /// work's own task or thread names it without this (the work of a
    /// leader, a detached leader or a blocking leader); a work that hands
    /// the call to another task or thread passes its token on with this.
    ///
    /// The coordinator then refuses the call at once, with
    /// [`RunError::Cycle`], when waiting would close a cycle of flights
    /// that wait for each other (the flight's work calling its own key,
    /// or a key whose work calls it back), instead of leaving every one of
    /// them waiting for ever. A token that is not of a flight in progress
    /// of this directory or cluster changes nothing.
    ///
    /// In a cluster of several shards (SPEC.md §19.5) a token names a
    /// flight of its shard only: pass it only to a call whose key is of the
    /// flight's key's shard ([`ShardCount::of`](crate::ShardCount::of)), as
    /// the calls made on a work's own task or thread do by themselves. A
    /// token of another shard's flight may name a flight of this call's
    /// shard, and have the call refused for a cycle that does not exist.
    pub fn parent(mut self, token: FencingToken) -> Self {
        self.parent = Some(token);
        self
    }

    /// Makes the call detached (SPEC.md §15): when this caller leaves while
    /// the call leads (the future is dropped or its deadline passes), the
    /// work goes on, on a thread of detached works that the `SingleFlight`
    /// starts for them (not the thread that serves the coordinator), for as long as
    /// any caller of the key, in any process, waits for the flight, and its
    /// outcome reaches them; when nobody waits any more, the work is dropped
    /// and the flight ends interrupted. The work must therefore be `Send`
    /// and `'static`.
    pub fn detached(mut self) -> Detached<'a, C> {
        self.detached = true;
        Detached { call: self }
    }

    /// Runs the call; see [`SingleFlight::run`].
    pub async fn run<T, E, F, Fut>(self, work: F) -> Result<Landed<T>, RunError<E>>
    where
        C: Codec<T>,
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: IntoFailure,
    {
        let key = self.key.clone();
        let counters = self.flights.first().counters.clone();
        let deadline = self.deadline;
        conclude(key, counters, deadline, self.run_now(work)).await
    }

    async fn run_now<T, E, F, Fut>(self, work: F) -> Finished<T, E>
    where
        C: Codec<T>,
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: IntoFailure,
    {
        let mut started = match self.start() {
            Ok(started) => started,
            Err(error) => return Finished::Returned(Err(error)),
        };
        let event = started.wait().await;
        match started.answer(event, &self.codec) {
            Answer::Done(result) => Finished::Returned(result),
            Answer::Lead(leading) => {
                let working = leading.working();
                let result = nested::scope(working, catch_panic(work, leading.token)).await;
                leading.finish(&self.codec, result)
            }
        }
    }

    /// Gives the call to the single-flight thread (SPEC.md §9.1). What
    /// follows is [`Started::answer`] with its first event, then, for a
    /// leader, [`Leading::finish`] with what its work came to: the async and
    /// the blocking API differ only in how they wait and run the work.
    /// The counters of the process this call is made in (SPEC.md §9.8).
    pub(super) fn is_detached(&self) -> bool {
        self.detached
    }

    pub(super) fn counters(&self) -> Arc<Counters> {
        self.flights.first().counters.clone()
    }

    pub(super) fn start<E>(&self) -> Result<Started<'a>, RunError<E>> {
        let shared: &'a Shared = self.flights.shard_of(&self.key);
        let key = Key::new(self.key.as_str()).map_err(|error| RunError::InvalidCall {
            key: self.key.clone(),
            reason: error.to_string(),
        })?;
        let reuse =
            match self.reuse {
                None => None,
                Some(window) => Some(ReuseWindow::from_duration(window).ok_or_else(|| {
                    RunError::InvalidCall {
                        key: self.key.clone(),
                        reason: format!(
                            "the reuse window {window:?} is not from 1 ms to {} s (SPEC.md §16.1)",
                            MAX_REUSE_WINDOW_MS / 1000
                        ),
                    }
                })?),
            };
        let options = CallOptions {
            detached: self.detached,
            reuse,
            parent: self
                .parent
                .or_else(|| nested::current(shared.place, shared.shard, &key)),
        };
        let call = CallId(shared.next_call.fetch_add(1, Ordering::Relaxed));
        let (events_out, events) = mpsc::unbounded_channel();
        shared
            .commands
            .send(Command::Start {
                call,
                key,
                options,
                events: events_out,
            })
            .map_err(|_| shut_down())?;
        Ok(Started {
            shared,
            key: self.key.clone(),
            call,
            events,
            withdraw: Withdraw {
                commands: &shared.commands,
                call,
                armed: true,
            },
        })
    }
}

fn shut_down<E>() -> RunError<E> {
    RunError::Unavailable(Arc::new(Unavailable::ShutDown))
}

/// A call the single-flight thread knows, until its first event.
pub(super) struct Started<'a> {
    shared: &'a Shared,
    key: String,
    call: CallId,
    /// What the driver tells the call. The first event decides: the call
    /// leads, or it has ended.
    pub(super) events: mpsc::UnboundedReceiver<CallEvent>,
    withdraw: Withdraw<'a>,
}

/// What a call's first event means.
pub(super) enum Answer<'a, T, E> {
    /// The call leads: run the work under `token`, then
    /// [`finish`](Leading::finish).
    Lead(Leading<'a>),
    /// The call has ended.
    Done(Result<Landed<T>, RunError<E>>),
}

impl<'a> Started<'a> {
    /// Waits for the call's first event (`None`: the thread stopped),
    /// reading the connection itself when it may (SPEC.md §10.1).
    pub(super) async fn wait(&mut self) -> Option<CallEvent> {
        self.shared.commands.wait(self.call, &mut self.events).await
    }

    /// Waits for the call's first event on this thread, which the
    /// single-flight thread reads for it (the blocking API, §9.7).
    pub(super) fn wait_blocking(&mut self) -> Option<CallEvent> {
        self.shared.commands.wait_blocking(&mut self.events)
    }

    /// What `event` (`None`: the thread stopped) means for the call.
    pub(super) fn answer<T, E, C: Codec<T>>(
        mut self,
        event: Option<CallEvent>,
        codec: &C,
    ) -> Answer<'a, T, E> {
        let resolution = match event {
            None => return Answer::Done(Err(shut_down())),
            Some(CallEvent::Lead(token)) => {
                return Answer::Lead(Leading {
                    shared: self.shared,
                    call: self.call,
                    token,
                    events: self.events,
                    withdraw: self.withdraw,
                });
            }
            // Only a detached leader's work is told to stop, after its
            // caller left; never a call's first event.
            Some(CallEvent::Stop) => {
                return Answer::Done(Err(RunError::Interrupted {
                    key: self.key,
                    lost_in_failover: false,
                }));
            }
            Some(CallEvent::Unavailable(reason)) => {
                self.withdraw.armed = false;
                return Answer::Done(Err(RunError::Unavailable(reason)));
            }
            Some(CallEvent::Resolved(resolution)) => resolution,
        };
        self.withdraw.armed = false;
        let key = self.key;
        let (flight, outcome, role) = match resolution {
            Resolution::Joined { flight, outcome } => (flight, outcome, Role::Joined),
            Resolution::Reused { flight, outcome } => (flight, outcome, Role::Reused),
            Resolution::Interrupted | Resolution::Led { .. } => {
                return Answer::Done(Err(RunError::Interrupted {
                    key,
                    lost_in_failover: false,
                }));
            }
            Resolution::Lost => {
                return Answer::Done(Err(RunError::Interrupted {
                    key,
                    lost_in_failover: true,
                }));
            }
            Resolution::Cycle { keys } => {
                return Answer::Done(Err(RunError::Cycle {
                    key,
                    keys: keys.iter().map(|key| key.as_str().to_owned()).collect(),
                }));
            }
            // §18.3: the host's coordinator could not reach the cluster;
            // the call ends as a direct one does when no coordinator can be
            // had (§14.6).
            Resolution::Unavailable { reason } => {
                return Answer::Done(Err(RunError::Unavailable(Arc::new(
                    Unavailable::Host(reason.as_str().to_owned()),
                ))));
            }
            Resolution::Unsupported => return Answer::Done(Err(RunError::Protocol {
                key,
                reason: "the coordinator answered that it does not support a run; it does not speak this protocol correctly".into(),
            })),
        };
        Answer::Done(match outcome {
            Outcome::Value(text) => match codec.decode(&text) {
                Ok(value) => Ok(Landed {
                    value,
                    role,
                    token: flight,
                }),
                Err(reason) => Err(RunError::Codec {
                    key,
                    reason: format!(
                        "the leader's value does not decode with this call's codec: {reason}; every process must use the same type and codec for a key"
                    ),
                }),
            },
            Outcome::Failure(failure) => Err(RunError::FlightFailed { key, failure }),
        })
    }

    /// Withdraws the call at `at` from the single-flight thread, unless
    /// `settled` is set first; sets it when it withdraws. Whoever sets it
    /// decides how the call ends: a blocking call's deadline (SPEC.md §9.7).
    pub(super) fn withdraw_at(
        &self,
        at: tokio::time::Instant,
        settled: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let commands = self.shared.commands.clone();
        let call = self.call;
        self.shared.runtime.spawn(async move {
            tokio::time::sleep_until(at).await;
            if !settled.swap(true, Ordering::AcqRel) {
                let _ = commands.send(Command::Cancel { call });
            }
        })
    }
}

/// A call that leads: its work runs.
pub(super) struct Leading<'a> {
    shared: &'a Shared,
    call: CallId,
    pub(super) token: FencingToken,
    /// What the driver tells the call from now on: a detached leader's work
    /// hears `Stop` there (SPEC.md §15.3).
    events: mpsc::UnboundedReceiver<CallEvent>,
    /// Dropped armed (the work was dropped, or its deadline passed), it
    /// withdraws the call: it interrupts the flight's joiners (SPEC.md §8.6),
    /// or detaches a detached call (§15.3).
    withdraw: Withdraw<'a>,
}

/// How a leader's call ends.
pub(super) enum Finished<T, E> {
    Returned(Result<Landed<T>, RunError<E>>),
    /// The work panicked, and its failure is landed; the caller resumes the
    /// panic (SPEC.md §9.6).
    Panicked(Panicked),
}

impl Leading<'_> {
    /// The flight this call leads, as its work's calls name their parent
    /// (SPEC.md §17.1).
    pub(super) fn working(&self) -> Working {
        Working {
            place: self.shared.place,
            shard: self.shared.shard,
            token: self.token,
        }
    }

    /// Lands what the work came to (SPEC.md §9.3, §9.6) and says how the
    /// call ends: its own value or error, or its panic.
    pub(super) fn finish<T, E, C>(
        mut self,
        codec: &C,
        result: std::thread::Result<Result<T, E>>,
    ) -> Finished<T, E>
    where
        C: Codec<T>,
        E: IntoFailure,
    {
        self.withdraw.armed = false;
        let landed = land(self.shared, self.call, codec, &result);
        led(result, self.token, landed, &self.shared.counters)
    }

    /// Lands what the work came to for the joiners of a detached call whose
    /// caller's deadline passed (SPEC.md §15.3), and gives the result back
    /// with what answers once a panic's land is settled.
    pub(super) fn land_only<T, E, C>(
        mut self,
        codec: &C,
        result: std::thread::Result<Result<T, E>>,
    ) -> (
        std::thread::Result<Result<T, E>>,
        Option<oneshot::Receiver<()>>,
    )
    where
        C: Codec<T>,
        E: IntoFailure,
    {
        self.withdraw.armed = false;
        let landed = land(self.shared, self.call, codec, &result);
        (result, landed)
    }
}

/// Sends what a leader's work came to as its land (SPEC.md §9.3). For a work
/// that panicked, returns what answers once the land is settled or
/// [`PANIC_LAND_TIMEOUT`] passed, for the caller to wait on before it
/// resumes the panic (§9.6).
fn land<T, E, C>(
    shared: &Shared,
    call: CallId,
    codec: &C,
    result: &std::thread::Result<Result<T, E>>,
) -> Option<oneshot::Receiver<()>>
where
    C: Codec<T>,
    E: IntoFailure,
{
    let outcome = shareable(match result {
        Ok(Ok(value)) => outcome_of(codec, value),
        Ok(Err(error)) => Outcome::Failure(error.to_failure()),
        Err(payload) => Outcome::Failure(panic_failure(&**payload)),
    });
    if result.is_ok() {
        let _ = shared.commands.send(Command::WorkFinished {
            call,
            outcome,
            settled: None,
        });
        return None;
    }
    let (settled, on_settled) = oneshot::channel();
    let _ = shared.commands.send(Command::WorkFinished {
        call,
        outcome,
        settled: Some(settled),
    });
    // The bound runs on the single-flight thread: a blocking caller has no
    // timer, and an async caller's runtime may have none enabled.
    let (landed, on_landed) = oneshot::channel();
    shared.runtime.spawn(async move {
        let _ = tokio::time::timeout(PANIC_LAND_TIMEOUT, on_settled).await;
        let _ = landed.send(());
    });
    Some(on_landed)
}

/// How a leader's call ends once its work's result is landed: its value or
/// error, or its panic, to resume after `landed` (SPEC.md §9.6).
fn led<T, E>(
    result: std::thread::Result<Result<T, E>>,
    token: FencingToken,
    landed: Option<oneshot::Receiver<()>>,
    counters: &Arc<Counters>,
) -> Finished<T, E> {
    match (result, landed) {
        (Ok(Ok(value)), _) => Finished::Returned(Ok(Landed {
            value,
            role: Role::Led,
            token,
        })),
        (Ok(Err(error)), _) => Finished::Returned(Err(RunError::Work(error))),
        (Err(payload), landed) => Finished::Panicked(Panicked {
            payload,
            landed: landed.unwrap_or_else(|| {
                // Never: `land` waits on every panic's land. A closed
                // receiver resumes the panic at once.
                oneshot::channel().1
            }),
            counters: counters.clone(),
        }),
    }
}

/// Waits for a call within its deadline, counts how it ended (SPEC.md
/// §9.8), and resumes a leader's panic (§9.6), which comes back whatever
/// the deadline.
async fn conclude<T, E>(
    key: String,
    counters: Arc<Counters>,
    deadline: Option<Duration>,
    running: impl Future<Output = Finished<T, E>>,
) -> Result<Landed<T>, RunError<E>> {
    let finished = match deadline {
        None => running.await,
        Some(deadline) => {
            tokio::time::timeout(deadline, running)
                .await
                .unwrap_or(Finished::Returned(Err(RunError::DeadlineExceeded {
                    key,
                    deadline,
                })))
        }
    };
    match finished {
        Finished::Returned(result) => {
            counters.call(&result);
            result
        }
        Finished::Panicked(panicked) => panicked.resume().await,
    }
}

/// A detached call, configured by [`Call::detached`] (SPEC.md §15).
pub struct Detached<'a, C> {
    call: Call<'a, C>,
}

impl<'a, C> Detached<'a, C> {
    /// The call, still detached: the blocking API's detached call runs its
    /// work on its caller's thread, with the bounds of any call (SPEC.md
    /// §9.7, §15.3).
    pub(super) fn into_call(self) -> Call<'a, C> {
        self.call
    }

    /// Gives up after `deadline`: the caller gets
    /// [`DeadlineExceeded`](RunError::DeadlineExceeded), and a work that
    /// leads goes on while anyone waits for it.
    pub fn deadline(self, deadline: Duration) -> Self {
        Detached {
            call: self.call.deadline(deadline),
        }
    }

    /// Encodes the value with `codec` instead of JSON; see [`Call::codec`].
    pub fn codec<D>(self, codec: D) -> Detached<'a, D> {
        Detached {
            call: self.call.codec(codec),
        }
    }

    /// See [`Call::reuse_for`].
    pub fn reuse_for(self, window: Duration) -> Self {
        Detached {
            call: self.call.reuse_for(window),
        }
    }

    /// See [`Call::parent`].
    pub fn parent(self, token: FencingToken) -> Self {
        Detached {
            call: self.call.parent(token),
        }
    }

    /// Runs the call; see [`SingleFlight::run`]. A leader's work runs on the
    /// thread of detached works (SPEC.md §15.3), so that it outlives its
    /// caller.
    pub async fn run<T, E, F, Fut>(self, work: F) -> Result<Landed<T>, RunError<E>>
    where
        C: Codec<T> + 'static,
        T: Send + 'static,
        E: IntoFailure + Send + 'static,
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let call = self.call;
        let key = call.key.clone();
        let counters = call.counters();
        let deadline = call.deadline;
        conclude(key, counters, deadline, call.run_detached(work)).await
    }
}

impl<C> Call<'_, C> {
    async fn run_detached<T, E, F, Fut>(self, work: F) -> Finished<T, E>
    where
        C: Codec<T> + 'static,
        T: Send + 'static,
        E: IntoFailure + Send + 'static,
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let mut started = match self.start() {
            Ok(started) => started,
            Err(error) => return Finished::Returned(Err(error)),
        };
        let event = started.wait().await;
        let codec = Arc::new(self.codec);
        let mut leading = match started.answer(event, &*codec) {
            Answer::Done(result) => return Finished::Returned(result),
            Answer::Lead(leading) => leading,
        };
        let shared = self.flights.shard_of(&self.key).clone();
        let (call, token) = (leading.call, leading.token);
        let working = leading.working();
        let mut events = std::mem::replace(&mut leading.events, mpsc::unbounded_channel().1);
        let key = self.key;
        let (done, on_done) = oneshot::channel();
        self.flights.first().works().spawn(async move {
            let work = nested::scope(working, catch_panic(work, token));
            tokio::pin!(work);
            let result = loop {
                tokio::select! {
                    result = &mut work => break result,
                    event = events.recv() => match event {
                        // §15.3: nobody waits; the work is dropped here.
                        Some(CallEvent::Stop) => return,
                        Some(_) => {}
                        // The driver has stopped: nobody can be told, but
                        // the caller may still be there for its value.
                        None => break (&mut work).await,
                    },
                }
            };
            let landed = land(&shared, call, &*codec, &result);
            if let Err((Err(payload), _)) = done.send((result, landed)) {
                warn!(
                    key,
                    panic = %panic_failure(&*payload).message,
                    "the work of a detached call panicked after its caller left; its joiners got the failure Panic (SPEC.md §9.6)"
                );
            }
        });
        let Ok((result, landed)) = on_done.await else {
            // The work was stopped, or the runtime is gone.
            return Finished::Returned(Err(shut_down()));
        };
        leading.withdraw.armed = false;
        led(result, token, landed, &self.flights.first().counters)
    }
}

/// A leader's panic, caught so that its failure could be landed first.
pub(super) struct Panicked {
    payload: Box<dyn Any + Send>,
    /// Answers once the land is settled, or [`PANIC_LAND_TIMEOUT`] passed.
    landed: oneshot::Receiver<()>,
    counters: Arc<Counters>,
}

impl Panicked {
    async fn resume<R>(self) -> R {
        let _ = self.landed.await;
        self.counters.panicked();
        std::panic::resume_unwind(self.payload)
    }

    pub(super) fn resume_blocking<R>(self) -> R {
        let _ = self.landed.blocking_recv();
        self.counters.panicked();
        std::panic::resume_unwind(self.payload)
    }
}

/// `work(token).await`, returning a panic of the work, when it is called or
/// whenever its future is polled, instead of unwinding through the call, so
/// that its failure can be landed first (SPEC.md §9.6). No crate is needed
/// for that: `poll_fn` and `catch_unwind` around each poll.
///
/// `AssertUnwindSafe`: after a panic the work is never polled again (it is
/// dropped) and its caller gets the panic back, so whatever the work left
/// half-changed is seen by that caller exactly as if nothing had caught it.
async fn catch_panic<T, F, Fut>(work: F, token: FencingToken) -> std::thread::Result<T>
where
    F: FnOnce(FencingToken) -> Fut,
    Fut: Future<Output = T>,
{
    let work = std::panic::catch_unwind(AssertUnwindSafe(|| work(token)))?;
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|context| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(context))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    })
    .await
}

/// The outcome a leader lands: its value's text, or a failure that says why
/// the value cannot cross (SPEC.md §3.4). The leader itself keeps its value
/// either way.
fn outcome_of<T, C: Codec<T>>(codec: &C, value: &T) -> Outcome {
    match codec.encode(value) {
        Ok(text) => Outcome::Value(text),
        Err(reason) => Outcome::Failure(Failure {
            name: "EncodeError".into(),
            message: format!("the leader's value could not be encoded: {reason}"),
            code: None,
        }),
    }
}

/// The outcome itself when it fits in every message that carries it,
/// otherwise the `ValueTooLarge` failure (SPEC.md §3.4): a land over the
/// frame limit would close the connection, and be replayed on every
/// reconnect without ever arriving.
fn shareable(outcome: Outcome) -> Outcome {
    outcome.shareable().unwrap_or_else(Outcome::Failure)
}

/// Withdraws the call if its future is dropped before it ends
/// (SPEC.md §9.5).
struct Withdraw<'a> {
    commands: &'a Commands,
    call: CallId,
    armed: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Cancel { call: self.call });
        }
    }
}
