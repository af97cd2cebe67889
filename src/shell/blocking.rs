//! Single-flight for callers without an async runtime (SPEC.md §9.7): build
//! tools, command lines, test harnesses, synchronous servers.
//!
//! ```
//! use single_flight::Role;
//! use single_flight::blocking::SingleFlight;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let directory = std::env::temp_dir().join(format!("sf-doc-blocking-{}", std::process::id()));
//! // A directory private to this user (created with mode 0700 if missing).
//! let flights = SingleFlight::open(&directory)?;
//! let landed = flights.run("thumbnail:cat.jpg", |token| {
//!     // Only the leader runs this, on the calling thread; give `token` to
//!     // what the work writes.
//!     Ok::<_, std::io::Error>(format!("rendered under {token}"))
//! })?;
//! assert_eq!(landed.role, Role::Led); // nobody else was asking
//! flights.close(); // lets this process's results reach its joiners
//! # std::fs::remove_dir_all(&directory)?;
//! # Ok(())
//! # }
//! ```
//!
//! The same API as [`crate::SingleFlight`], blocking: the same process's
//! single-flight thread, the same calls, errors and tokens. A blocking and
//! an async caller of one key, in one process or in two, share one flight.
//! A process opens a directory once (SPEC.md §10.1): a program with both
//! kinds of callers converts one handle into the other with [`From`].
//!
//! # Panics
//!
//! Every function here that blocks panics when it is called on a thread
//! that drives a tokio runtime (inside `Runtime::block_on` or an async
//! task), before it does anything, with tokio's own message: blocking there
//! would stall every task of that runtime, and deadlock when a flight's
//! leader is one of them (SPEC.md §9.7). Call it from
//! `tokio::task::spawn_blocking` or a thread of your own, or use the async
//! API there.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use super::api::{self, Answer, Finished};
use super::codec::{Codec, Json};
use super::error::{OpenError, RunError};
use super::failure::IntoFailure;
use super::landed::Landed;
use super::nested;
use super::thread;
use crate::protocol::FencingToken;

/// Single-flight for the processes that share one directory, for blocking
/// callers; see [`crate::SingleFlight`] for what it does.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use single_flight::blocking::SingleFlight;
///
/// let dir = std::env::temp_dir().join(format!("single-flight-doc-blocking-{}", std::process::id()));
/// let flights = SingleFlight::builder(&dir)
///     .grace_window(Duration::from_secs(1))
///     .open()?;
/// let report = std::thread::scope(|scope| {
///     // Any thread may call; a clone is cheap and shares the process's
///     // single-flight thread.
///     let caller = scope.spawn(|| {
///         flights
///             .call("report:2026-11")
///             .deadline(Duration::from_secs(30))
///             .run(|token| Ok::<_, std::io::Error>(format!("built under token {token}")))
///     });
///     caller.join().unwrap()
/// })?;
/// println!("{}", report.value);
/// flights.close();
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SingleFlight {
    flights: api::SingleFlight,
}

/// Configures a blocking [`SingleFlight`] before it opens. Every option of
/// the async [`Builder`](crate::Builder) is reached through [`From`].
#[derive(Clone, Debug)]
pub struct Builder {
    builder: super::Builder,
}

/// One call, configured by [`SingleFlight::call`].
pub struct Call<'a, C> {
    call: api::Call<'a, C>,
}

impl From<super::Builder> for Builder {
    fn from(builder: super::Builder) -> Builder {
        Builder { builder }
    }
}

impl From<api::SingleFlight> for SingleFlight {
    fn from(flights: api::SingleFlight) -> SingleFlight {
        SingleFlight { flights }
    }
}

impl From<SingleFlight> for api::SingleFlight {
    fn from(flights: SingleFlight) -> api::SingleFlight {
        flights.flights
    }
}

impl Builder {
    /// See [`crate::Builder::grace_window`].
    pub fn grace_window(self, window: Duration) -> Builder {
        self.builder.grace_window(window).into()
    }

    /// See [`crate::Builder::poll_interval`].
    pub fn poll_interval(self, interval: Duration) -> Builder {
        self.builder.poll_interval(interval).into()
    }

    /// See [`crate::Builder::trust_fuse_type`].
    pub fn trust_fuse_type(self, fuse_type: impl Into<String>) -> Builder {
        self.builder.trust_fuse_type(fuse_type).into()
    }

    /// Opens, as [`crate::Builder::open`] does, waiting on this thread. The
    /// parts that need a runtime (the election, in cluster mode) run on the
    /// single-flight thread's, which opening starts anyway, so the caller
    /// needs none and no other runtime is started.
    #[track_caller]
    pub fn open(self) -> Result<SingleFlight, OpenError> {
        refuse_inside_runtime();
        let (flights, opened) = self.builder.start()?;
        thread::opened_with(flights, opened.blocking_recv()).map(SingleFlight::from)
    }
}

impl SingleFlight {
    /// Opens `directory` with the default options. See [`Builder::open`].
    #[track_caller]
    pub fn open(directory: impl AsRef<Path>) -> Result<SingleFlight, OpenError> {
        SingleFlight::builder(directory).open()
    }

    /// Options other than the defaults.
    pub fn builder(directory: impl AsRef<Path>) -> Builder {
        api::SingleFlight::builder(directory).into()
    }

    /// Single-flight for the processes of a cluster of machines (SPEC.md
    /// §14); see [`crate::SingleFlight::cluster`].
    #[cfg(feature = "cluster")]
    pub fn cluster(cluster: crate::Cluster) -> Builder {
        api::SingleFlight::cluster(cluster).into()
    }

    /// The flight directory; `None` in cluster mode.
    pub fn directory(&self) -> Option<&Path> {
        self.flights.directory()
    }

    /// Runs `work` for `key` once among every concurrent caller of every
    /// process sharing the directory, as [`crate::SingleFlight::run`] does:
    /// this call leads (runs `work` on this thread, with the flight's
    /// fencing token) or joins the flight in progress and receives its
    /// value, encoded as JSON. See [`call`](Self::call) for a deadline or
    /// another codec.
    ///
    /// A leader whose `work` panics hands its joiners the failure `Panic`,
    /// then the panic goes on here (SPEC.md §9.6).
    #[track_caller]
    pub fn run<T, E, F>(&self, key: &str, work: F) -> Result<Landed<T>, RunError<E>>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: FnOnce(FencingToken) -> Result<T, E>,
        E: IntoFailure,
    {
        self.call(key).run(work)
    }

    /// A call for `key` to configure before it runs.
    pub fn call(&self, key: &str) -> Call<'_, Json> {
        Call {
            call: self.flights.call(key),
        }
    }

    /// Closes, as [`crate::SingleFlight::close`] does, waiting on this
    /// thread.
    #[track_caller]
    pub fn close(self) {
        refuse_inside_runtime();
        for closed in self.flights.send_close() {
            let _ = closed.blocking_recv();
        }
    }
}

impl<'a, C> Call<'a, C> {
    /// Gives up after `deadline`: the call is withdrawn then and, if it
    /// leads, its joiners are interrupted. The work, which runs on the
    /// calling thread, cannot be stopped: it runs to its end, its result is
    /// dropped, and the call ends with
    /// [`DeadlineExceeded`](RunError::DeadlineExceeded) (SPEC.md §9.7).
    pub fn deadline(self, deadline: Duration) -> Self {
        Call {
            call: self.call.deadline(deadline),
        }
    }

    /// Encodes the value with `codec` instead of JSON. Every process calling
    /// the key must use the same codec.
    pub fn codec<D>(self, codec: D) -> Call<'a, D> {
        Call {
            call: self.call.codec(codec),
        }
    }

    /// See [`crate::Call::reuse_for`] (SPEC.md §16).
    pub fn reuse_for(self, window: Duration) -> Self {
        Call {
            call: self.call.reuse_for(window),
        }
    }

    /// Names the flight whose work makes this call (SPEC.md §17); see
    /// [`crate::Call::parent`]. A call made on the thread of a blocking
    /// work names that work's flight without this; a work that hands the
    /// call to another thread passes its token on with this.
    pub fn parent(self, token: FencingToken) -> Self {
        Call {
            call: self.call.parent(token),
        }
    }

    /// Makes the call detached (SPEC.md §15): when its deadline passes
    /// while it leads, the flight is not interrupted while any caller of
    /// the key waits for it. The work, which runs on the calling thread,
    /// goes on to its end, its outcome is landed for the joiners, and then
    /// the call ends with [`DeadlineExceeded`](RunError::DeadlineExceeded).
    /// When nobody waits any more, the flight ends interrupted; the work
    /// still runs to its end, and its result is dropped.
    pub fn detached(self) -> Self {
        Call {
            call: self.call.detached().into_call(),
        }
    }

    /// Runs the call; see [`SingleFlight::run`].
    #[track_caller]
    pub fn run<T, E, F>(self, work: F) -> Result<Landed<T>, RunError<E>>
    where
        C: Codec<T>,
        F: FnOnce(FencingToken) -> Result<T, E>,
        E: IntoFailure,
    {
        refuse_inside_runtime();
        // Counted as the async API counts (SPEC.md §9.8); a panic is counted
        // where it is resumed.
        let counters = self.call.counters();
        let result = self.run_uncounted(work);
        counters.call(&result);
        result
    }

    #[track_caller]
    fn run_uncounted<T, E, F>(self, work: F) -> Result<Landed<T>, RunError<E>>
    where
        C: Codec<T>,
        F: FnOnce(FencingToken) -> Result<T, E>,
        E: IntoFailure,
    {
        let call = self.call;
        // From the start, as the async API's timeout counts.
        let expiry = call
            .deadline
            .map(|deadline| (deadline, deadline_after(deadline)));
        let mut started = call.start()?;
        let expiry = expiry.map(|(deadline, at)| Expiry::arm(&started, deadline, at));
        let passed = |expiry: &Expiry| RunError::DeadlineExceeded {
            key: call.key.clone(),
            deadline: expiry.deadline,
        };
        let event = started.wait_blocking();
        if let Some(expiry) = &expiry
            && event.is_none()
            && expiry.passed()
        {
            // The timer withdrew the call, which closed its events.
            return Err(passed(expiry));
        }
        let leading = match started.answer(event, &call.codec) {
            Answer::Done(result) => return result,
            Answer::Lead(leading) => leading,
        };
        if let Some(expiry) = &expiry
            && expiry.passed()
        {
            // The lead came as the deadline passed: the call is withdrawn,
            // and the work does not start.
            return Err(passed(expiry));
        }
        // `AssertUnwindSafe`: the caller gets the panic back once it is
        // landed (SPEC.md §9.6), and sees what the work left as if nothing
        // had caught it.
        let working = leading.working();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            nested::on_this_thread(working, || work(leading.token))
        }));
        if let Some(expiry) = &expiry
            && !expiry.claim()
        {
            // The deadline passed while the work ran: the timer withdrew the
            // call then, which interrupted its joiners, or detached it
            // (SPEC.md §15.3), whose joiners still get what it came to. For
            // the caller it is dropped, as an async leader's work is; its
            // panic is the caller's still.
            if call.is_detached() {
                let (result, landed) = leading.land_only(&call.codec, result);
                if let Err(payload) = result {
                    if let Some(landed) = landed {
                        let _ = landed.blocking_recv();
                    }
                    call.counters().panicked();
                    std::panic::resume_unwind(payload);
                }
                return Err(passed(expiry));
            }
            drop(leading);
            if let Err(payload) = result {
                call.counters().panicked();
                std::panic::resume_unwind(payload);
            }
            return Err(passed(expiry));
        }
        match leading.finish(&call.codec, result) {
            Finished::Returned(result) => result,
            Finished::Panicked(panicked) => panicked.resume_blocking(),
        }
    }
}

/// A blocking call's deadline, kept by the single-flight thread: the
/// calling thread is blocked in a receive or busy in the work, and cannot
/// watch the time. At the deadline the timer withdraws the call (which ends
/// its events), unless the caller has claimed the call's end first.
struct Expiry {
    deadline: Duration,
    /// Set by whichever of the timer and the caller decides the call's end.
    settled: Arc<AtomicBool>,
    timer: tokio::task::JoinHandle<()>,
}

impl Expiry {
    fn arm(started: &api::Started<'_>, deadline: Duration, at: tokio::time::Instant) -> Expiry {
        let settled = Arc::new(AtomicBool::new(false));
        let timer = started.withdraw_at(at, settled.clone());
        Expiry {
            deadline,
            settled,
            timer,
        }
    }

    /// Whether the timer withdrew the call: the deadline passed first.
    fn passed(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Takes the call's end from the timer: `false` when the deadline
    /// passed first.
    fn claim(&self) -> bool {
        !self.settled.swap(true, Ordering::AcqRel)
    }
}

impl Drop for Expiry {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

fn deadline_after(deadline: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now + deadline
}

/// Panics, at the caller's line and with tokio's message, when this thread
/// drives a tokio runtime, and does nothing otherwise (SPEC.md §9.7). tokio
/// has no public question for it, but its blocking receive asks exactly
/// that before it waits (a thread of `spawn_blocking` or `block_in_place`
/// may block, one that polls tasks may not), so receiving from a channel
/// that has its value already asks it without waiting.
#[track_caller]
fn refuse_inside_runtime() {
    let (answer, question) = oneshot::channel();
    let _ = answer.send(());
    let _ = question.blocking_recv();
}
