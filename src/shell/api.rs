//! The public API: [`SingleFlight`] and its calls.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::codec::{Codec, Json};
use super::driver::{CallEvent, Command, Driver};
use super::error::{OpenError, RunError, Unavailable};
use super::failure::IntoFailure;
use super::options::Options;
use super::stats::{Counters, Stats};
use crate::client::{CallId, Resolution};
use crate::election::{Election, ElectionError, ElectionOptions, LocalElection};
use crate::protocol::{Failure, FencingToken, Key, Outcome};
use crate::transport::Transport;
use crate::transport::unix::UnixTransport;

/// Whether a call ran the work or received another's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// This call led the flight: the value is its own work's.
    Led,
    /// This call joined a flight led elsewhere (in this process or another).
    Joined,
}

/// A call's value, and how it got it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Landed<T> {
    pub value: T,
    pub role: Role,
    /// The flight's fencing token (SPEC.md §6).
    pub token: FencingToken,
}

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
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` in cluster mode.
    directory: Option<PathBuf>,
    commands: mpsc::UnboundedSender<Command>,
    next_call: AtomicU64,
    /// This process's calls by outcome, and its failovers (SPEC.md §9.6).
    counters: Arc<Counters>,
}

/// Configures a [`SingleFlight`] before it opens.
#[derive(Clone, Debug)]
pub struct Builder {
    pub(crate) place: Place,
    pub(crate) options: Options,
}

/// Where the processes meet: the one place that chooses a backend; the
/// shell below it is generic over the election and the transport.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    /// A flight directory on this machine (SPEC.md §7, §11).
    Directory(PathBuf),
    /// A cluster of machines (SPEC.md §14).
    #[cfg(feature = "cluster")]
    Cluster(Box<super::cluster::Cluster>),
}

impl Builder {
    /// The grace window a new coordinator opens after a failover
    /// (SPEC.md §10.2); [`DEFAULT_GRACE_WINDOW`](super::DEFAULT_GRACE_WINDOW)
    /// by default. Every process of a directory should use the same.
    pub fn grace_window(mut self, window: Duration) -> Builder {
        self.options.grace_window = window;
        self
    }

    /// The time between attempts to reach or elect a coordinator
    /// (SPEC.md §7.2); 10 ms by default.
    pub fn poll_interval(mut self, interval: Duration) -> Builder {
        self.options.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// FUSE file system types that you vouch are local to this machine
    /// (SPEC.md §7.4), such as `"fuse.mergerfs"`.
    pub fn trust_fuse_type(mut self, fuse_type: impl Into<String>) -> Builder {
        self.options
            .directory
            .trusted_fuse_types
            .push(fuse_type.into());
        self
    }

    /// Checks the directory (creating it with mode 0700 if missing,
    /// SPEC.md §7.4), or connects to etcd and loads the certificates in
    /// cluster mode (§14), and starts this process's single-flight thread.
    /// It connects to the coordinator, or becomes it, at the first call.
    pub async fn open(self) -> Result<SingleFlight, OpenError> {
        let directory = match self.place {
            Place::Directory(directory) => directory,
            #[cfg(feature = "cluster")]
            Place::Cluster(cluster) => {
                let (election, transport) = cluster.connect().await?;
                let counters = Arc::new(Counters::default());
                let driver = Driver::new(election, transport, self.options, counters.clone());
                let commands = start_thread(driver)?;
                return Ok(SingleFlight {
                    shared: Arc::new(Shared {
                        directory: None,
                        commands,
                        next_call: AtomicU64::new(1),
                        counters,
                    }),
                });
            }
        };
        let election = LocalElection::new(
            &directory,
            ElectionOptions {
                poll_interval: self.options.poll_interval,
                directory: self.options.directory.clone(),
            },
        )
        .map_err(|error| match error {
            ElectionError::Directory(error) => OpenError::Directory(error),
            other => OpenError::Socket {
                path: directory.display().to_string(),
                error: std::io::Error::other(other.to_string()),
            },
        })?;
        let transport = UnixTransport::new(&directory).map_err(|error| OpenError::Socket {
            path: directory.display().to_string(),
            error,
        })?;
        let counters = Arc::new(Counters::default());
        let driver = Driver::new(election, transport, self.options, counters.clone());
        let commands = start_thread(driver)?;
        Ok(SingleFlight {
            shared: Arc::new(Shared {
                directory: Some(directory),
                commands,
                next_call: AtomicU64::new(1),
                counters,
            }),
        })
    }
}

/// Starts the process's single-flight thread, which runs `driver` until
/// every handle is gone; returns the way to send it commands.
pub(crate) fn start_thread<E, T>(
    driver: Driver<E, T>,
) -> Result<mpsc::UnboundedSender<Command>, OpenError>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    let (commands, inbox) = mpsc::unbounded_channel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OpenError::Thread)?;
    #[allow(clippy::disallowed_methods)] // the shell owns threads
    std::thread::Builder::new()
        .name("single-flight".into())
        .spawn(move || runtime.block_on(driver.run(inbox)))
        .map_err(OpenError::Thread)?;
    Ok(commands)
}

impl SingleFlight {
    /// Opens `directory` with the default options. See [`Builder::open`].
    pub async fn open(directory: impl AsRef<Path>) -> Result<SingleFlight, OpenError> {
        SingleFlight::builder(directory).open().await
    }

    /// Options other than the defaults.
    pub fn builder(directory: impl AsRef<Path>) -> Builder {
        Builder {
            place: Place::Directory(directory.as_ref().to_owned()),
            options: Options::default(),
        }
    }

    /// The flight directory; `None` in cluster mode.
    pub fn directory(&self) -> Option<&Path> {
        self.shared.directory.as_deref()
    }

    /// This process's calls so far, by outcome, and the failovers it lived
    /// through (SPEC.md §9.6), for every clone of this `SingleFlight`. The
    /// coordinator's counters are in [`Status::stats`](super::Status::stats).
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Runs `work` for `key` once among every concurrent caller of every
    /// process sharing the directory: this call either leads (runs `work`
    /// with the flight's fencing token) or joins the flight in progress and
    /// receives its value, encoded as JSON. See [`call`](Self::call) for a
    /// deadline or another codec.
    ///
    /// Dropping the returned future withdraws the call; a leader's drop
    /// interrupts its joiners (SPEC.md §8.6).
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
            codec: Json,
        }
    }

    /// Lets the lands of this process reach their joiners (waiting up to
    /// 2 s), ends its term if it coordinates (so that the next coordinator
    /// needs no grace window), and stops its thread. Calls still in progress
    /// in other clones end as unavailable.
    pub async fn close(self) {
        let (done, closed) = oneshot::channel();
        if self.shared.commands.send(Command::Close { done }).is_ok() {
            let _ = closed.await;
        }
    }
}

/// One call, configured by [`SingleFlight::call`].
pub struct Call<'a, C> {
    flights: &'a SingleFlight,
    key: String,
    deadline: Option<Duration>,
    codec: C,
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
            codec,
        }
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
        let flights = self.flights;
        let result = match self.deadline {
            None => self.run_now(work).await,
            Some(deadline) => tokio::time::timeout(deadline, self.run_now(work))
                .await
                .unwrap_or(Err(RunError::DeadlineExceeded { key, deadline })),
        };
        flights.shared.counters.call(&result);
        result
    }

    async fn run_now<T, E, F, Fut>(self, work: F) -> Result<Landed<T>, RunError<E>>
    where
        C: Codec<T>,
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: IntoFailure,
    {
        let shared = &self.flights.shared;
        let key = Key::new(self.key.as_str()).map_err(|error| RunError::Invalid {
            key: self.key.clone(),
            reason: error.to_string(),
        })?;
        let call = CallId(shared.next_call.fetch_add(1, Ordering::Relaxed));
        let (events_out, mut events) = mpsc::unbounded_channel();
        let shut_down = || RunError::Unavailable(Arc::new(Unavailable::ShutDown));
        shared
            .commands
            .send(Command::Start {
                call,
                key,
                events: events_out,
            })
            .map_err(|_| shut_down())?;
        let mut withdraw = Withdraw {
            commands: &shared.commands,
            call,
            armed: true,
        };
        let mut work = Some(work);
        loop {
            let Some(event) = events.recv().await else {
                return Err(shut_down());
            };
            let resolution = match event {
                CallEvent::Lead(token) => {
                    let Some(work) = work.take() else { continue };
                    let result = work(token).await;
                    let outcome = shareable(match &result {
                        Ok(value) => outcome_of(&self.codec, value),
                        Err(error) => Outcome::Failure(error.to_failure()),
                    });
                    withdraw.armed = false;
                    let _ = shared
                        .commands
                        .send(Command::WorkFinished { call, outcome });
                    return match result {
                        Ok(value) => Ok(Landed {
                            value,
                            role: Role::Led,
                            token,
                        }),
                        Err(error) => Err(RunError::Work(error)),
                    };
                }
                CallEvent::Resolved(resolution) => resolution,
                CallEvent::Unavailable(reason) => {
                    withdraw.armed = false;
                    return Err(RunError::Unavailable(reason));
                }
            };
            withdraw.armed = false;
            return match resolution {
                Resolution::Joined { flight, outcome } => match outcome {
                    Outcome::Value(text) => match self.codec.decode(&text) {
                        Ok(value) => Ok(Landed {
                            value,
                            role: Role::Joined,
                            token: flight,
                        }),
                        Err(reason) => Err(RunError::Invalid {
                            key: self.key,
                            reason: format!(
                                "the leader's value does not decode with this call's codec: {reason}; every process must use the same type and codec for a key"
                            ),
                        }),
                    },
                    Outcome::Failure(failure) => Err(RunError::FlightFailed {
                        key: self.key,
                        failure,
                    }),
                },
                Resolution::Interrupted | Resolution::Led { .. } => {
                    Err(RunError::Interrupted { key: self.key })
                }
                Resolution::Unsupported => Err(RunError::Invalid {
                    key: self.key,
                    reason: "the coordinator answered that it does not support a run; it does not speak this protocol correctly".into(),
                }),
            };
        }
    }
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
    commands: &'a mpsc::UnboundedSender<Command>,
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
