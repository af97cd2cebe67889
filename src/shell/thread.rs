//! The single-flight thread (SPEC.md §10): one per `SingleFlight`, with a
//! runtime of its own that opens the backend and runs the driver, so that a
//! busy caller cannot starve the coordinator; and the runtime of the
//! detached works (§15.3).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::sync::oneshot;
use tracing::warn;

use super::clock::Clock;
use super::driver::Driver;
use super::error::OpenError;
use super::hub::{Closes, Commands, Hub};
use super::mutant::Seeded;
use super::options::Options;
use super::stats::Counters;
use super::upstream::Serves;
use crate::backend::{Backend, Place, Visit};
use crate::protocol::{Shard, ShardCount};

/// What every handle of one `SingleFlight` shares: the way to its thread.
pub(super) struct Shared {
    /// `None` in cluster mode.
    pub(super) directory: Option<PathBuf>,
    /// How calls reach the process (`super::hub`).
    pub(super) commands: Commands,
    /// The number of this process's next call (SPEC.md §9.1).
    pub(super) next_call: AtomicU64,
    /// The single-flight thread's runtime. Timers that must run while the
    /// caller cannot watch them (a blocking call's deadline, a panicking
    /// leader's wait for its land) run there (SPEC.md §9.6, §9.7).
    pub(super) runtime: tokio::runtime::Handle,
    /// This process's calls by outcome, and its failovers (SPEC.md §9.8).
    pub(super) counters: Arc<Counters>,
    /// Where detached works run (SPEC.md §15.3), started at the first one.
    pub(super) works: std::sync::OnceLock<Works>,
    /// This `SingleFlight`'s number in the process, which its works' calls
    /// check before they take a flight as their parent (SPEC.md §17.1): the
    /// same for each of its shards.
    pub(super) place: u64,
    /// The shard this client is of (SPEC.md §19.4): [`Shard::ONLY`] for a
    /// directory.
    pub(super) shard: Shard,
}

/// The runtime of the detached works (SPEC.md §15.3): one thread of its
/// own, not the single-flight thread, whose current-thread runtime serves
/// the coordinator's sockets for every process, and which a work that
/// computes or blocks would stall; not the caller's task, which the work
/// outlives. Shut down, dropping the works still running, when the last
/// handle of the `SingleFlight` goes.
pub(super) struct Works(Option<tokio::runtime::Runtime>);

/// The thread count of [`Works`]: one worker, as the single-flight thread
/// has. Detached leaders are the few callers that left; a work that needs
/// threads of its own spawns them (or uses `spawn_blocking`, which this
/// runtime has).
const WORK_THREADS: usize = 1;

impl Drop for Works {
    fn drop(&mut self) {
        // Not a plain drop: the last handle may go inside an async task,
        // where dropping a runtime (which waits for its threads) panics.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Shared {
    /// The runtime of the detached works; the single-flight thread's when
    /// this machine cannot start a thread for them (which it says).
    pub(super) fn works(&self) -> tokio::runtime::Handle {
        let works = self.works.get_or_init(|| {
            let built = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORK_THREADS)
                .thread_name("single-flight-work")
                .enable_all()
                .build();
            match built {
                Ok(runtime) => Works(Some(runtime)),
                Err(error) => {
                    warn!(%error, "cannot start the thread of detached works; they run on the single-flight thread (SPEC.md §15.3)");
                    Works(None)
                }
            }
        });
        match &works.0 {
            Some(runtime) => runtime.handle().clone(),
            None => self.runtime.clone(),
        }
    }
}

/// What the single-flight thread does with its backend: opens it, answers,
/// and drives it.
struct Drive {
    options: Options,
    counters: Arc<Counters>,
    answer: oneshot::Sender<Result<(), OpenError>>,
    inbox: Closes,
    hub: Arc<Hub>,
}

impl Visit for Drive {
    type Output = ();

    async fn visit<B: Backend>(self, backend: B) {
        let opened = match backend.open(self.options.poll_interval).await {
            Ok((election, transport)) => backend
                .upper()
                .map(|upper| (election, transport, Serves::new(upper))),
            Err(error) => Err(error),
        };
        match opened {
            Ok((election, transport, serves)) => {
                let _ = self.answer.send(Ok(()));
                Driver::new(
                    election,
                    transport,
                    self.options,
                    self.hub,
                    self.counters,
                    serves,
                )
                .run(self.inbox)
                .await;
            }
            Err(error) => {
                let _ = self.answer.send(Err(OpenError::Backend(error)));
            }
        }
    }
}

/// The single-flight thread's answer to opening.
pub(super) type Opened = oneshot::Receiver<Result<(), OpenError>>;

/// `flights` once the single-flight thread has answered `answer`.
pub(super) fn opened_with<T>(
    flights: T,
    answer: Result<Result<(), OpenError>, oneshot::error::RecvError>,
) -> Result<T, OpenError> {
    match answer {
        Ok(Ok(())) => Ok(flights),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(OpenError::Thread(std::io::Error::other(
            "it stopped while opening (see its log)",
        ))),
    }
}

/// Starts the process's single-flight thread, which opens each of `places`
/// (one per shard, SPEC.md §19.4; one for a directory) on its own runtime,
/// answers on [`Opened`] once every one opened (or with the first error),
/// and runs their drivers until every handle is gone.
///
/// The backends are opened there, not on the caller's runtime: a blocking
/// caller has none, and a runtime made only to open would take the tasks of
/// a backend's client (a cluster's channel to its election) with it when
/// dropped. The thread's runtime lives as long as the elections that use
/// them. The shards share the thread, as every connection of one shard
/// does: their work is the sockets' and timers', which one thread serves.
pub(super) fn start_thread(
    places: Vec<Place>,
    options: Options,
) -> Result<(Vec<Arc<Shared>>, Opened), OpenError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OpenError::Thread)?;
    let counters = Arc::new(Counters::default());
    let count = ShardCount::new(places.len() as u64)
        .map_err(|error| OpenError::Thread(std::io::Error::other(format!("{error}"))))?;
    let place = super::nested::new_place();
    let mut shards = Vec::with_capacity(places.len());
    let mut drivers = Vec::with_capacity(places.len());
    let mut answers = Vec::with_capacity(places.len());
    for (shard, backend) in count.shards().zip(places) {
        let directory = backend.directory().map(Path::to_owned);
        let (answer, opened) = oneshot::channel();
        answers.push(opened);
        let options = options.clone();
        let (shared, driver) = start(
            directory,
            runtime.handle(),
            options.seeded,
            options.clock,
            (counters.clone(), place, shard),
            move |inbox, hub, counters| {
                backend.with(Drive {
                    options,
                    counters,
                    answer,
                    inbox,
                    hub,
                })
            },
        );
        shards.push(shared);
        drivers.push(driver);
    }
    let (answer, opened) = oneshot::channel();
    runtime.spawn(async move {
        let mut result = Ok(());
        for opened in answers {
            match opened.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    result = Err(error);
                    break;
                }
                Err(_) => {
                    result = Err(OpenError::Thread(std::io::Error::other(
                        "it stopped while opening (see its log)",
                    )));
                    break;
                }
            }
        }
        let _ = answer.send(result);
    });
    std::thread::Builder::new()
        .name("single-flight".into())
        .spawn(move || {
            runtime.block_on(async move {
                for driver in drivers {
                    let _ = driver.await;
                }
            })
        })
        .map_err(OpenError::Thread)?;
    Ok((shards, opened))
}

/// Spawns `drive`, given the driver's inbox, the hub and the counters, on
/// `runtime`; the hub reads `clock`. `(counters, place, shard)` is what the
/// client shares with its `SingleFlight`'s other shards (the counters, the
/// number its works' calls check, §17.1) and which shard it is (§19.4). Returns the handles' shared part and
/// the driver's task, which ends when every handle is gone.
fn start<F, D>(
    directory: Option<PathBuf>,
    runtime: &tokio::runtime::Handle,
    seeded: Seeded,
    clock: Clock,
    (counters, place, shard): (Arc<Counters>, u64, Shard),
    drive: D,
) -> (Arc<Shared>, tokio::task::JoinHandle<()>)
where
    D: FnOnce(Closes, Arc<Hub>, Arc<Counters>) -> F + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (commands, inbox, hub) = Commands::new(clock, seeded);
    let driver = runtime.spawn(drive(inbox, hub, counters.clone()));
    let shared = Arc::new(Shared {
        directory,
        commands,
        next_call: AtomicU64::new(1),
        runtime: runtime.clone(),
        counters,
        works: std::sync::OnceLock::new(),
        place,
        shard,
    });
    (shared, driver)
}

/// What the simulation sets of a `SingleFlight` opened with [`open_on`]:
/// the options of `Builder`, and the seeded bug.
#[cfg(feature = "_internal")]
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// As `Builder::grace_window`.
    pub grace_window: std::time::Duration,
    /// As `Builder::poll_interval`.
    pub poll_interval: std::time::Duration,
    /// The shell's seeded bug (SPEC.md §12.7).
    pub seeded: super::mutant::Seeded,
}

#[cfg(feature = "_internal")]
impl Settings {
    /// The poll interval as `Builder::poll_interval` takes it: at least
    /// 1 ms, so that no attempt loop spins.
    fn poll_interval(&self) -> std::time::Duration {
        self.poll_interval.max(std::time::Duration::from_millis(1))
    }
}

/// A `SingleFlight` over the election and transport that `open` makes,
/// whose driver runs on the current runtime instead of a thread of its
/// own: for the simulation (sim/), which runs every process of a cluster
/// on one runtime with simulated time (SPEC.md §12.7). The code that runs
/// is the shipped driver, server and client; only where it runs differs.
/// As `start_thread` does, `open` runs where the driver runs, not in the
/// caller's task, so that whatever the backend starts in the background
/// lives as long as the driver, not as long as the caller.
///
/// # Panics
///
/// Outside a tokio runtime.
#[cfg(feature = "_internal")]
pub async fn open_on<E, T, O>(open: O, settings: Settings) -> super::SingleFlight
where
    E: crate::election::Election,
    T: crate::transport::Transport<Address = E::Address>,
    O: std::future::Future<Output = (E, T)> + Send + 'static,
{
    open_sharded_on(vec![open], settings).await
}

/// [`open_on`] for a process of a cluster of `shards.len()` shards that
/// reaches each directly (SPEC.md §19.4): one driver per shard, over the
/// election and transport that the shard's future makes, in shard order,
/// all on the current runtime and sharing the process's counters, as
/// `start_thread`'s drivers share its thread.
///
/// # Panics
///
/// Outside a tokio runtime, or with no shard or more than `MAX_SHARDS`.
#[cfg(feature = "_internal")]
pub async fn open_sharded_on<E, T, O>(shards: Vec<O>, settings: Settings) -> super::SingleFlight
where
    E: crate::election::Election,
    T: crate::transport::Transport<Address = E::Address>,
    O: std::future::Future<Output = (E, T)> + Send + 'static,
{
    // A direct process of the simulation relays to none: it is its own
    // host (SPEC.md §18.6).
    let shards = shards
        .into_iter()
        .map(|open| (open, Serves::<crate::backend::local::Directory>::new(None)))
        .collect();
    open_serving_on(shards, settings).await
}

/// What the simulation's host coordinators open to reach the cluster
/// (SPEC.md §12.7, §18.1): a fresh election and transport of the cluster
/// each time, as the real tier opens its cluster's backend.
#[cfg(feature = "_internal")]
pub type OpenCluster<E, T> = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = (E, T)> + Send>> + Send + Sync,
>;

/// [`open_on`] for a process of the host tier (SPEC.md §18): `open` makes
/// its host's election and transport (the host directory's, in the real
/// tier), and when it becomes its host's coordinator it relays for `host`
/// to the cluster that `cluster` opens, through the shipped relay and
/// upstream, as a process of `Place::Tiered` does.
///
/// # Panics
///
/// Outside a tokio runtime.
#[cfg(feature = "_internal")]
pub async fn open_tiered_on<E, T, O, CE, CT>(
    open: O,
    cluster: OpenCluster<CE, CT>,
    host: crate::protocol::HostId,
    settings: Settings,
) -> super::SingleFlight
where
    E: crate::election::Election,
    T: crate::transport::Transport<Address = E::Address>,
    O: std::future::Future<Output = (E, T)> + Send + 'static,
    CE: crate::election::Election<Address = CT::Address>,
    CT: crate::transport::Transport,
{
    open_sharded_tiered_on(vec![(open, cluster)], host, settings).await
}

/// [`open_tiered_on`] for a process of a cluster of `shards.len()` shards
/// (SPEC.md §19.4): per shard, in shard order, its host directory's
/// election and transport and the shard's cluster, each shard's driver
/// relaying for `host` when it becomes its host's coordinator of that
/// shard; one host id for every shard, as `flight.host` keeps one.
///
/// # Panics
///
/// Outside a tokio runtime, or with no shard or more than `MAX_SHARDS`.
#[cfg(feature = "_internal")]
pub async fn open_sharded_tiered_on<E, T, O, CE, CT>(
    shards: Vec<(O, OpenCluster<CE, CT>)>,
    host: crate::protocol::HostId,
    settings: Settings,
) -> super::SingleFlight
where
    E: crate::election::Election,
    T: crate::transport::Transport<Address = E::Address>,
    O: std::future::Future<Output = (E, T)> + Send + 'static,
    CE: crate::election::Election<Address = CT::Address>,
    CT: crate::transport::Transport,
{
    let shards = shards
        .into_iter()
        .map(|(open, cluster)| {
            let above = SimulatedCluster {
                open: cluster,
                poll_interval: settings.poll_interval(),
            };
            let upper = crate::backend::Upper {
                backend: above,
                host: host.clone(),
            };
            (open, Serves::new(Some(upper)))
        })
        .collect();
    open_serving_on(shards, settings).await
}

/// The simulation's cluster as the place above a host (SPEC.md §18.1).
#[cfg(feature = "_internal")]
struct SimulatedCluster<E, T> {
    open: OpenCluster<E, T>,
    /// The cluster's poll interval (§14.3), the simulation's processes'.
    poll_interval: std::time::Duration,
}

#[cfg(feature = "_internal")]
impl<E, T> Clone for SimulatedCluster<E, T> {
    fn clone(&self) -> Self {
        SimulatedCluster {
            open: self.open.clone(),
            poll_interval: self.poll_interval,
        }
    }
}

#[cfg(feature = "_internal")]
impl<E, T> super::upstream::Above for SimulatedCluster<E, T>
where
    E: crate::election::Election<Address = T::Address>,
    T: crate::transport::Transport,
{
    type Election = E;
    type Transport = T;

    fn poll_interval(&self) -> std::time::Duration {
        self.poll_interval
    }

    async fn open_above(
        &self,
        _poll_interval: std::time::Duration,
    ) -> Result<(E, T), crate::backend::BackendError> {
        Ok((self.open)().await)
    }

    fn describe_above(&self) -> String {
        "the simulated cluster".to_owned()
    }
}

/// [`open_sharded_on`] with each shard's `serves`: one driver per shard on
/// the current runtime, sharing one set of counters (SPEC.md §9.8, §19.4).
#[cfg(feature = "_internal")]
async fn open_serving_on<E, T, O, U>(
    shards: Vec<(O, Serves<U>)>,
    settings: Settings,
) -> super::SingleFlight
where
    E: crate::election::Election,
    T: crate::transport::Transport<Address = E::Address>,
    O: std::future::Future<Output = (E, T)> + Send + 'static,
    U: super::upstream::Above,
{
    use super::mutant::Mutant;
    let count = crate::protocol::ShardCount::new(shards.len() as u64)
        .expect("the simulation opens 1 to MAX_SHARDS shards");
    let options = Options {
        grace_window: settings.grace_window,
        poll_interval: settings.poll_interval(),
        seeded: settings.seeded,
        clock: Clock::Runtime,
    };
    let counters = Arc::new(Counters::default());
    let place = super::nested::new_place();
    let mut clients = Vec::with_capacity(shards.len());
    for (shard, (open, serves)) in count.shards().zip(shards) {
        let on_caller = options
            .seeded
            .hook(Mutant::BackendOpenedByCaller, false, true);
        let opened: std::pin::Pin<Box<dyn std::future::Future<Output = (E, T)> + Send>> =
            if on_caller {
                let opened = open.await;
                Box::pin(async move { opened })
            } else {
                Box::pin(open)
            };
        let options = options.clone();
        let (shared, _driver) = start(
            None,
            &tokio::runtime::Handle::current(),
            options.seeded,
            options.clock,
            (counters.clone(), place, shard),
            move |inbox, hub, counters| async move {
                let (election, transport) = opened.await;
                Driver::new(election, transport, options, hub, counters, serves)
                    .run(inbox)
                    .await;
            },
        );
        clients.push(shared);
    }
    super::SingleFlight::from_shards(clients, count)
}
