//! A worker process: `concurrency` loops that each call a random key, with
//! a random think time, under a deadline. The work logs its start, sleeps,
//! writes its token to the fenced resource, and returns a value unique to
//! this execution (`v:<token>:<worker>:<call>`), so that the checker can tell
//! which execution every joiner's value came from. A few works fail or
//! panic on purpose instead, with a message that names the execution too.
//!
//! The worker obeys two files in the control directory: `stop` (finish the
//! calls in progress, close, exit 0) and `reopen-<worker>` (close this
//! process's `SingleFlight` with calls in progress and open a new one: its
//! connection drops, SPEC.md §8.7).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use single_flight::{Failure, FencingToken, Role, RunError, SingleFlight};

use crate::fence::{Fence, WriteResult, Written};
use crate::records::{Ending, LogFile, Record, now_us};
use crate::rng::Rng;

/// How often a worker looks at its control files: often enough that the
/// nemesis's "drop" lands while the calls it aimed at are still running.
const CONTROL_POLL: Duration = Duration::from_millis(20);

/// The longest a worker's think time between two calls of one loop.
const MAX_THINK_MS: u64 = 60;

/// Percent of works that take long (`SLOW_WORK_MS`), so that the nemesis
/// finds leaders in the middle of their work to pause.
const SLOW_WORK_PERCENT: u64 = 15;
const SLOW_WORK_MS: (u64, u64) = (150, 600);
const QUICK_WORK_MS: (u64, u64) = (5, 60);

/// Percent of works that fail on purpose, so that failures cross to joiners.
const FAILING_WORK_PERCENT: u64 = 3;

/// Percent of works that panic on purpose, so that panics cross to joiners
/// as the failure `Panic` while faults happen (SPEC.md §9.6). Fewer than the
/// failures: each one also unwinds through its caller.
const PANICKING_WORK_PERCENT: u64 = 1;

/// How a deliberate panic's message starts; the worker's panic hook keeps
/// these out of its log, where the checker counts panics.
pub const DELIBERATE_PANIC: &str = "deliberate panic of ";

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub dir: PathBuf,
    pub logs: PathBuf,
    pub fence: PathBuf,
    pub control: PathBuf,
    pub slot: usize,
    /// This process's number among every worker process of the run. Logs
    /// name workers by it, not by their pid: a long run spawns more
    /// processes than `pid_max`, and pids come back.
    pub worker: u32,
    pub seed: u64,
    pub keys: usize,
    pub concurrency: usize,
    pub grace_ms: u64,
    pub deadline_ms: u64,
    /// Cluster mode: elect through etcd and serve over TLS (SPEC.md §14)
    /// instead of the flight directory.
    pub cluster: Option<ClusterWorker>,
}

/// How a worker of a cluster run joins the cluster.
#[derive(Clone, Debug)]
pub struct ClusterWorker {
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    pub name: String,
    /// The address this process serves on when it coordinates: its host's,
    /// with a port that names the worker (the harness maps the address in
    /// the coordinator key back to it).
    pub listen: std::net::SocketAddr,
    /// The directory of `ca.pem`, `server.pem`, `server.key` and `crl.pem`.
    pub certs: PathBuf,
    pub ttl_ms: u64,
}

struct Context {
    config: WorkerConfig,
    worker: u32,
    log: Mutex<LogFile>,
    fence: Mutex<Fence>,
    flights: Mutex<SingleFlight>,
    stop: AtomicBool,
    next_call: AtomicU64,
}

impl Context {
    fn log(&self, record: Record) {
        self.log.lock().expect("log lock").write(&record);
    }
}

pub fn main(config: WorkerConfig) -> i32 {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let deliberate = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|message| message.starts_with(DELIBERATE_PANIC));
        if !deliberate {
            report(info);
        }
    }));
    // `RUST_LOG=single_flight=debug` shows what each worker's library does;
    // the orchestrator sends it to a file per worker.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(config))
}

fn builder(config: &WorkerConfig) -> single_flight::Builder {
    let grace = Duration::from_millis(config.grace_ms);
    #[cfg(feature = "cluster")]
    if let Some(cluster) = &config.cluster {
        let certs = &cluster.certs;
        let cluster = single_flight::Cluster::etcd(cluster.etcd.clone(), cluster.name.clone())
            .listen(cluster.listen)
            .tls(
                certs.join("ca.pem"),
                certs.join("server.pem"),
                certs.join("server.key"),
            )
            // The CRL that revokes the hostile lane's revoked client
            // (SPEC.md §14.5): a coordinator must refuse it.
            .crl(certs.join("crl.pem"))
            .ttl(Duration::from_millis(cluster.ttl_ms))
            // Each slot is a host of its own (SPEC.md §18.6): the worker
            // that replaces a killed one is its host's next coordinator,
            // and takes back what the relay window kept (§18.2).
            .directory(config.dir.join(format!("slot-{}", config.slot)));
        return SingleFlight::cluster(cluster).grace_window(grace);
    }
    SingleFlight::builder(&config.dir).grace_window(grace)
}

async fn run(config: WorkerConfig) -> i32 {
    let worker = config.worker;
    let log = LogFile::create(&config.logs.join(format!("worker-{worker}.jsonl")))
        .expect("cannot create the worker's log");
    let fence = Fence::open(&config.fence).expect("cannot open the fenced resource");
    let flights = match builder(&config).open().await {
        Ok(flights) => flights,
        Err(error) => {
            eprintln!("chaos worker: cannot open the flight directory: {error}");
            return 3;
        }
    };
    let context = Arc::new(Context {
        worker,
        log: Mutex::new(log),
        fence: Mutex::new(fence),
        flights: Mutex::new(flights),
        stop: AtomicBool::new(false),
        next_call: AtomicU64::new(1),
        config,
    });
    context.log(Record::Start {
        worker,
        pid: std::process::id(),
        slot: context.config.slot,
        t: now_us(),
    });
    let mut loops = Vec::new();
    for lane in 0..context.config.concurrency {
        let rng = Rng::fork(context.config.seed, lane as u64);
        loops.push(tokio::spawn(caller(context.clone(), rng)));
    }
    let stop_file = context.config.control.join("stop");
    let reopen_file = context.config.control.join(format!("reopen-{worker}"));
    loop {
        tokio::time::sleep(CONTROL_POLL).await;
        if stop_file.exists() {
            context.stop.store(true, Ordering::SeqCst);
            break;
        }
        if std::fs::remove_file(&reopen_file).is_ok() {
            reopen(&context).await;
        }
    }
    for caller in loops {
        let _ = caller.await;
    }
    context.log(Record::Exit {
        worker,
        t: now_us(),
    });
    let flights = context.flights.lock().expect("flights lock").clone();
    flights.close().await;
    0
}

/// Drops this process's connection with calls in progress: the new calls
/// go to a new `SingleFlight`, the old one closes (its lands get up to 2 s,
/// then its connection closes and the coordinator withdraws its parties).
async fn reopen(context: &Arc<Context>) {
    context.log(Record::Reopen {
        worker: context.worker,
        t: now_us(),
    });
    let fresh = match builder(&context.config).open().await {
        Ok(fresh) => fresh,
        Err(error) => {
            eprintln!("chaos worker: cannot reopen the flight directory: {error}");
            return;
        }
    };
    let old = std::mem::replace(&mut *context.flights.lock().expect("flights lock"), fresh);
    tokio::spawn(old.close());
}

/// What one call's work will do, drawn before the call so that the log
/// says what was planned.
struct Plan {
    work_ms: u64,
    fail: bool,
    panic: bool,
}

async fn caller(context: Arc<Context>, mut rng: Rng) {
    let deadline = Duration::from_millis(context.config.deadline_ms);
    while !context.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.below(MAX_THINK_MS + 1))).await;
        if context.stop.load(Ordering::SeqCst) {
            break;
        }
        let key = format!("k{}", rng.below(context.config.keys as u64));
        let call = context.next_call.fetch_add(1, Ordering::SeqCst);
        let (low, high) = if rng.chance(SLOW_WORK_PERCENT) {
            SLOW_WORK_MS
        } else {
            QUICK_WORK_MS
        };
        let work_ms = rng.range(low, high);
        // One draw for both, as before panics were planned, so that a seed's
        // calls stay what they were.
        let roll = rng.below(100);
        let plan = Plan {
            work_ms,
            fail: roll < FAILING_WORK_PERCENT,
            panic: (FAILING_WORK_PERCENT..FAILING_WORK_PERCENT + PANICKING_WORK_PERCENT)
                .contains(&roll),
        };
        context.log(Record::Call {
            worker: context.worker,
            call,
            key: key.clone(),
            t: now_us(),
            deadline_ms: context.config.deadline_ms,
        });
        let flights = context.flights.lock().expect("flights lock").clone();
        let work_context = context.clone();
        let work_key = key.clone();
        let call_key = key.clone();
        // A task of its own, so that a panic resumed in the leader's call
        // (SPEC.md §9.6) ends that task and not this loop.
        let running = tokio::spawn(async move {
            flights
                .call(&call_key)
                .deadline(deadline)
                .run(move |token| work(work_context, work_key, call, token, plan))
                .await
        });
        let result = running.await.map_err(|error| match error.try_into_panic() {
            Ok(payload) => payload
                .downcast::<String>()
                .map_or_else(|_| "a panic of another payload".to_owned(), |m| *m),
            Err(error) => error.to_string(),
        });
        let (end, led, token, text) = match result {
            // The leader's own panic: its joiners got its message as the
            // failure `Panic`, which the checker matches like any failure.
            Err(message) => (Ending::Failure, Some(true), None, Some(message)),
            Ok(result) => match result {
                Ok(landed) => (
                    Ending::Value,
                    Some(landed.role == Role::Led),
                    Some(landed.token.get()),
                    Some(landed.value),
                ),
                Err(RunError::Work(failure)) => {
                    (Ending::Failure, Some(true), None, Some(failure.message))
                }
                Err(RunError::FlightFailed { failure, .. }) => {
                    (Ending::Failure, Some(false), None, Some(failure.message))
                }
                Err(RunError::Interrupted { .. }) => (Ending::Interrupted, None, None, None),
                Err(RunError::DeadlineExceeded { .. }) => (Ending::Deadline, None, None, None),
                Err(
                    RunError::InvalidCall { reason, .. }
                    | RunError::Codec { reason, .. }
                    | RunError::Protocol { reason, .. },
                ) => (Ending::Invalid, None, None, Some(reason)),
                Err(other) => (Ending::Unavailable, None, None, Some(other.to_string())),
            },
        };
        context.log(Record::Done {
            worker: context.worker,
            call,
            key,
            t: now_us(),
            end,
            led,
            token,
            text,
        });
    }
}

/// The work: start → sleep → fenced write → end (or, as planned, a failure
/// or a panic before the write). The write is synchronous
/// inside one poll of the work's future, so a deadline either drops the work
/// before the write or lets the write finish: never half of it.
async fn work(
    context: Arc<Context>,
    key: String,
    call: u64,
    token: FencingToken,
    plan: Plan,
) -> Result<String, Failure> {
    let token = token.get();
    let worker = context.worker;
    let value = format!("v:{token}:{worker}:{call}");
    context.log(Record::Work {
        worker,
        call,
        key: key.clone(),
        token,
        t: now_us(),
        work_ms: plan.work_ms,
        value: value.clone(),
    });
    tokio::time::sleep(Duration::from_millis(plan.work_ms)).await;
    if plan.fail {
        return Err(failure(
            "Deliberate",
            format!("deliberate failure of {value}"),
        ));
    }
    if plan.panic {
        panic!("{DELIBERATE_PANIC}{value}");
    }
    let Written {
        result,
        t,
        began,
        ended,
    } = context
        .fence
        .lock()
        .expect("fence lock")
        .write(&key, token, worker, call);
    let (accepted, highest, error) = match &result {
        WriteResult::Accepted { previous } => (true, *previous, None),
        WriteResult::Refused { highest } => (false, Some(*highest), None),
        WriteResult::Failed(error) => (false, None, Some(error.clone())),
    };
    context.log(Record::Write {
        worker,
        call,
        key,
        token,
        t,
        began,
        ended,
        accepted,
        highest,
        error,
    });
    match result {
        WriteResult::Accepted { .. } => Ok(value),
        WriteResult::Refused { highest } => Err(failure(
            "Fenced",
            format!("the fence refused {value}: token {highest} wrote first"),
        )),
        WriteResult::Failed(error) => Err(failure(
            "FenceError",
            format!("the fence failed for {value}: {error}"),
        )),
    }
}

fn failure(name: &str, message: String) -> Failure {
    Failure {
        name: name.to_owned(),
        message,
        code: None,
    }
}
