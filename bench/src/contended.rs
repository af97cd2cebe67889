//! Item 5, throughput under contention: P processes, each with one thread per
//! key calling that key in a loop, K keys shared by all processes. The same
//! work (a blocking sleep, then a 64-byte value) and the same threads for
//! single-flight, the flock baseline and the Redis baseline.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use single_flight::{Role, SingleFlight};

use crate::contended_floor;
use crate::fanout::{flock_call, value_of};
use crate::process::{
    self, Scratch, Worker, cpu_nanos, say, stdin_lines, thread_cpu_nanos, thread_switches,
};
use crate::redis;
use crate::stats::{Cdf, percentile};

/// What one contended run measured.
#[derive(Clone, Debug)]
pub struct Throughput {
    pub calls_per_second: f64,
    /// Call latency percentiles, in nanoseconds.
    pub p50: f64,
    pub p99: f64,
    /// Calls that ran the work, of all calls.
    pub led_share: f64,
    /// CPU time per call of every process involved (the callers, the
    /// coordinator among them, and `redis-server`), in nanoseconds.
    pub cpu_per_call: f64,
    /// Calls that ended with an error (none are expected).
    pub failed: u64,
    /// CPU time per call of each of the placement's watched processes
    /// ([`Placement::watched`]), in its order, in nanoseconds.
    pub watched_cpu_per_call: Vec<f64>,
    /// The times a thread of each watched process was given a CPU, per
    /// call ([`process::thread_switches`]).
    pub watched_switches_per_call: Vec<f64>,
    /// The distribution of the call latencies, in nanoseconds, for the
    /// picture of BENCHMARKS.md (`crate::figures`).
    pub latency: Cdf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    SingleFlight,
    Flock,
    Redis,
    /// The least the shape needs, without a library (`crate::contended_floor`).
    Floor,
    /// single-flight in cluster mode (the workers' environment says where
    /// the cluster is: `crate::cluster`).
    #[cfg(feature = "cluster")]
    Cluster,
    /// The same through the host tier (SPEC.md §18): each host's processes
    /// reach the cluster through their host's coordinator.
    #[cfg(feature = "cluster")]
    ClusterTier,
    /// etcd's Lock API: lock, the work, unlock (`crate::etcd_lock`).
    #[cfg(feature = "cluster")]
    EtcdLock,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::SingleFlight => "single-flight",
            System::Flock => "flock",
            System::Redis => "redis",
            System::Floor => "floor",
            #[cfg(feature = "cluster")]
            System::Cluster => "cluster",
            #[cfg(feature = "cluster")]
            System::ClusterTier => "cluster-tier",
            #[cfg(feature = "cluster")]
            System::EtcdLock => "etcd-lock",
        }
    }

    /// Whether this is single-flight (locally, or in cluster mode).
    fn is_single_flight(self) -> bool {
        match self {
            System::SingleFlight => true,
            #[cfg(feature = "cluster")]
            System::Cluster | System::ClusterTier => true,
            _ => false,
        }
    }

    fn parse(text: &str) -> System {
        match text {
            "single-flight" => System::SingleFlight,
            "flock" => System::Flock,
            "redis" => System::Redis,
            "floor" => System::Floor,
            #[cfg(feature = "cluster")]
            "cluster" => System::Cluster,
            #[cfg(feature = "cluster")]
            "cluster-tier" => System::ClusterTier,
            #[cfg(feature = "cluster")]
            "etcd-lock" => System::EtcdLock,
            other => panic!("unknown system {other:?}"),
        }
    }
}

/// The shape of a contended run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub processes: usize,
    /// The keys shared by all processes, one caller thread of each process
    /// per key; with `distinct`, each process's caller threads.
    pub keys: usize,
    pub duration: Duration,
    pub work: Duration,
    /// Each call on a key of its own, so that every call leads and lands
    /// (the shards' item, `crate::shards`), instead of `keys` keys shared
    /// by all.
    pub distinct: bool,
}

/// Where the Redis baseline's server is: its address, and its process when
/// this run started it (to count its CPU time).
#[derive(Clone, Debug)]
pub struct RedisTarget {
    pub address: String,
    pub pid: Option<u32>,
}

/// `ours`'s calls per second over `other`'s, from one round's rates of
/// each system; `None` when `other` did not run.
pub fn ratio(round: &[(System, f64)], ours: System, other: System) -> Option<f64> {
    let rate = |wanted| {
        round
            .iter()
            .find(|(system, _)| *system == wanted)
            .map(|(_, rate)| *rate)
    };
    Some(rate(ours)? / rate(other)?)
}

/// Where the worker processes of a run start, and which other processes
/// serve it.
pub struct Placement<'a> {
    /// Starts worker number `index` (from 0, in start order) with `args`.
    pub spawn: &'a dyn Fn(usize, &[&str]) -> Worker,
    /// Processes besides the workers and Redis whose CPU time the run
    /// counts (etcd, for the systems that use it).
    pub services: Vec<u32>,
    /// Processes whose CPU time the run also reports one by one
    /// ([`Throughput::watched_cpu_per_call`]): the shards' coordinators.
    pub watched: Vec<u32>,
}

/// Runs `system` with `shape`, every process on this machine as it is.
pub fn measure(system: System, shape: Shape, redis: Option<&RedisTarget>) -> Throughput {
    let local = |_: usize, args: &[&str]| Worker::spawn(args);
    let placement = Placement {
        spawn: &local,
        services: Vec::new(),
        watched: Vec::new(),
    };
    measure_on(system, shape, redis, &placement)
}

/// Runs `system` with `shape`, its processes started by `placement`.
pub fn measure_on(
    system: System,
    shape: Shape,
    redis: Option<&RedisTarget>,
    placement: &Placement<'_>,
) -> Throughput {
    let scratch = Scratch::new(&format!("contended-{}", system.name()));
    let dir = scratch.join("flights");
    let dir_text = dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let keys = shape.keys.to_string();
    let work = shape.work.as_micros().to_string();
    let redis_pid = redis.and_then(|r| r.pid);
    let redis = redis.map_or("-", |r| r.address.as_str());
    // The floor's server, a process of its own, counted with the services.
    let floor = (system == System::Floor).then(|| {
        std::fs::create_dir_all(&dir).expect("the benchmark's directory");
        let socket = dir.join(contended_floor::SOCKET);
        Worker::spawn(&["contend-floor", socket.to_str().expect("a UTF-8 temp dir")]).ready()
    });
    let services: Vec<u32> = placement
        .services
        .iter()
        .copied()
        .chain(floor.as_ref().map(Worker::pid))
        .collect();
    let keys_of = if shape.distinct { DISTINCT } else { SHARED };
    let args = [
        "contend",
        system.name(),
        &dir_text,
        &keys,
        keys_of,
        &work,
        redis,
        "",
    ];
    // The first process opens the directory first and so coordinates, as
    // the first of a group of real processes would.
    let mut workers = Vec::with_capacity(shape.processes);
    for index in 0..shape.processes {
        let index = index.to_string();
        let mut args = args;
        args[7] = &index;
        workers.push((placement.spawn)(workers.len(), &args).ready());
    }
    let go = format!("go {}", shape.duration.as_millis());
    let redis_cpu = redis_pid.map(|pid| cpu_nanos(Some(pid)));
    let services_cpu: u64 = services.iter().map(|&p| cpu_nanos(Some(p))).sum();
    // To the nanosecond (the ticks of `cpu_nanos` are 10 ms, a few percent
    // of a process's share in a run of seconds): a coordinator's threads
    // live through the run.
    let watched_cpu = each(&placement.watched, thread_cpu_nanos);
    let watched_switches = each(&placement.watched, thread_switches);
    for worker in &mut workers {
        worker.send(&go);
    }
    let mut latencies = Vec::new();
    let mut calls = 0u64;
    let mut led = 0u64;
    let mut longest = 0u64;
    let mut cpu = 0u64;
    let mut failed = 0u64;
    for worker in &workers {
        let result = worker.expect("result");
        let fields: Vec<&str> = result.split_whitespace().collect();
        let [
            worker_calls,
            worker_led,
            worker_failed,
            elapsed,
            worker_cpu,
            file,
        ] = fields[..]
        else {
            panic!("a result line {result:?}");
        };
        failed += worker_failed.parse::<u64>().expect("a count");
        cpu += worker_cpu.parse::<u64>().expect("nanoseconds");
        calls += worker_calls.parse::<u64>().expect("a count");
        led += worker_led.parse::<u64>().expect("a count");
        longest = longest.max(elapsed.parse().expect("nanoseconds"));
        let bytes = std::fs::read(file).expect("the worker's latency file");
        latencies.extend(
            bytes
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as f64),
        );
    }
    // Read before the workers close, which their coordinators would count.
    let watched_used = since(&placement.watched, &watched_cpu, thread_cpu_nanos);
    let watched_switched = since(&placement.watched, &watched_switches, thread_switches);
    for worker in &mut workers {
        worker.send("quit");
    }
    if let (Some(pid), Some(before)) = (redis_pid, redis_cpu)
        && system == System::Redis
    {
        cpu += cpu_nanos(Some(pid)).saturating_sub(before);
    }
    let services_after: u64 = services.iter().map(|&p| cpu_nanos(Some(p))).sum();
    cpu += services_after.saturating_sub(services_cpu);
    drop(floor);
    assert!(calls > 0, "{} made no call", system.name());
    Throughput {
        calls_per_second: calls as f64 / (longest as f64 / 1e9),
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        led_share: led as f64 / calls as f64,
        cpu_per_call: cpu as f64 / calls as f64,
        failed,
        watched_cpu_per_call: watched_used
            .iter()
            .map(|&used| used as f64 / calls as f64)
            .collect(),
        watched_switches_per_call: watched_switched
            .iter()
            .map(|&switched| switched as f64 / calls as f64)
            .collect(),
        latency: Cdf::of(&latencies),
    }
}

/// The contend worker's KEYS_OF: KEYS keys shared by all processes, or
/// KEYS threads each calling a key of its own every time.
const SHARED: &str = "shared";
const DISTINCT: &str = "distinct";

/// `worker contend SYSTEM DIR KEYS KEYS_OF WORK_US REDIS INDEX`: one thread
/// per key; on `go MS`, every thread calls its key in a loop for MS
/// milliseconds (KEYS_OF `shared`), or a fresh key of its own every time
/// (`distinct`). Prints `result CALLS LED FAILED ELAPSED_NS CPU_NS
/// LATENCY_FILE`, then waits for `quit`.
pub fn worker(args: &[String]) {
    let [system, dir, keys, keys_of, work, redis_address, index] = args else {
        panic!("contend takes SYSTEM DIR KEYS KEYS_OF WORK_US REDIS INDEX, not {args:?}");
    };
    let distinct = match keys_of.as_str() {
        SHARED => false,
        DISTINCT => true,
        other => panic!("KEYS_OF is {SHARED} or {DISTINCT}, not {other:?}"),
    };
    let system = System::parse(system);
    let dir = PathBuf::from(dir);
    if system != System::SingleFlight {
        // single-flight makes its directory itself, with mode 0700.
        std::fs::create_dir_all(&dir).expect("the benchmark's directory");
    }
    let keys: usize = keys.parse().expect("a number of keys");
    let work = Duration::from_micros(work.parse().expect("work in microseconds"));
    let flights = match system {
        _ if distinct && !system.is_single_flight() => {
            panic!(
                "{} has a client per key: distinct keys are for single-flight's systems",
                system.name()
            )
        }
        System::SingleFlight => Some(open(&dir)),
        #[cfg(feature = "cluster")]
        // The worker's environment says how it reaches the cluster.
        System::Cluster | System::ClusterTier => Some(crate::lab::open_from_env()),
        _ => None,
    };
    // Every thread has made its connections before READY, so that none of
    // it is timed or counted.
    let connected = Arc::new(Barrier::new(keys + 1));
    let go = Arc::new(Barrier::new(keys + 1));
    let (duration_sender, duration) = std::sync::mpsc::channel::<Duration>();
    let duration = Arc::new(std::sync::Mutex::new(duration));
    let threads: Vec<_> = (0..keys)
        .map(|k| {
            let key = format!("key-{k}");
            let connected = connected.clone();
            let go = go.clone();
            let duration = duration.clone();
            let flights = flights.clone();
            let dir = dir.clone();
            let redis_address = redis_address.clone();
            std::thread::spawn(move || {
                let runtime = process::runtime();
                let mut caller = match (flights, system) {
                    (Some(flights), _) => Caller::Flights(flights),
                    (None, System::Floor) => Caller::Floor(
                        contended_floor::Caller::connect(&dir.join(contended_floor::SOCKET))
                            .expect("connect to the floor's server"),
                    ),
                    (None, System::Redis) => {
                        let owner = format!("{}-{k}", std::process::id());
                        let redis = redis::Caller::new(&redis_address, &key, owner);
                        Caller::Redis(Box::new(redis.expect("connect to Redis")))
                    }
                    #[cfg(feature = "cluster")]
                    (None, System::EtcdLock) => Caller::EtcdLock(Box::new(
                        runtime
                            .block_on(crate::etcd_lock::Caller::connect(&key))
                            .expect("connect to etcd"),
                    )),
                    (None, _) => Caller::Flock(dir),
                };
                connected.wait();
                go.wait();
                let duration = duration.lock().expect("one reader").recv().ok();
                let duration = duration.expect("a duration");
                let mut latencies: Vec<u64> = Vec::new();
                let mut led = 0u64;
                let mut failed = 0u64;
                let start = Instant::now();
                for call in 0u64.. {
                    if start.elapsed() >= duration {
                        break;
                    }
                    let begin = Instant::now();
                    let key: Cow<'_, str> = if distinct {
                        Cow::Owned(format!("{}-{k}-{call}", std::process::id()))
                    } else {
                        Cow::Borrowed(&key)
                    };
                    let work = || {
                        std::thread::sleep(work);
                        value_of(&key)
                    };
                    let did_lead = match &mut caller {
                        Caller::Flights(flights) => runtime.block_on(async {
                            flights
                                .run(&key, |_token| async { Ok::<_, std::io::Error>(work()) })
                                .await
                                .map(|landed| landed.role == Role::Led)
                                .map_err(|error| error.to_string())
                        }),
                        Caller::Redis(redis) => redis
                            .call(work)
                            .map(|(_, led)| led)
                            .map_err(|error| error.to_string()),
                        #[cfg(feature = "cluster")]
                        Caller::EtcdLock(lock) => lock
                            .call(&runtime, work)
                            .map(|(_, led)| led)
                            .map_err(|error| error.to_string()),
                        Caller::Flock(dir) => Ok(flock_call(dir, &key, work).1),
                        Caller::Floor(floor) => floor
                            .call(&key, work)
                            .map(|(_, led)| led)
                            .map_err(|error| error.to_string()),
                    };
                    match did_lead {
                        Ok(did_lead) => {
                            latencies.push(begin.elapsed().as_nanos() as u64);
                            led += u64::from(did_lead);
                        }
                        // Counted and reported: a benchmark shows what
                        // happens rather than stopping at it.
                        Err(error) => {
                            if failed == 0 {
                                eprintln!("a {} call failed: {error}", system.name());
                            }
                            failed += 1;
                        }
                    }
                }
                (latencies, led, failed, start.elapsed())
            })
        })
        .collect();
    connected.wait();
    say("READY");
    let lines = stdin_lines();
    let line = lines.recv().expect("a go line");
    let milliseconds: u64 = line
        .strip_prefix("go ")
        .and_then(|ms| ms.parse().ok())
        .expect("go MS");
    for _ in 0..keys {
        duration_sender
            .send(Duration::from_millis(milliseconds))
            .expect("threads wait");
    }
    let cpu_before = cpu_nanos(None);
    go.wait();
    let mut latencies = Vec::new();
    let mut led = 0;
    let mut failed = 0;
    let mut longest = Duration::ZERO;
    for thread in threads {
        let (thread_latencies, thread_led, thread_failed, elapsed) =
            thread.join().expect("a caller thread");
        latencies.extend(thread_latencies);
        led += thread_led;
        failed += thread_failed;
        longest = longest.max(elapsed);
    }
    let cpu = cpu_nanos(None).saturating_sub(cpu_before);
    let file = dir.join(format!("latencies.{index}"));
    let bytes: Vec<u8> = latencies.iter().flat_map(|l| l.to_le_bytes()).collect();
    std::fs::write(&file, bytes).expect("write the latency file");
    say(format!(
        "result {} {led} {failed} {} {cpu} {}",
        latencies.len(),
        longest.as_nanos(),
        file.display()
    ));
    // The coordinator is one of these processes: none leaves before every
    // process has finished, or the last calls of the others would see a
    // failover.
    let _ = lines.recv();
    if let Some(flights) = flights {
        let runtime = process::runtime();
        runtime.block_on(flights.close());
    }
}

/// How one thread of a worker calls its key. The clients are boxed: an
/// etcd client takes some 4 KB and Redis' two buffered connections 256
/// bytes, against a pointer for the others.
enum Caller {
    Flights(SingleFlight),
    Redis(Box<redis::Caller>),
    #[cfg(feature = "cluster")]
    EtcdLock(Box<crate::etcd_lock::Caller>),
    /// The flock baseline, in this directory.
    Flock(PathBuf),
    /// The floor: a socket of this thread's own to the floor's server.
    Floor(contended_floor::Caller),
}

/// Opens the directory and makes one call, so that this process is
/// connected (or coordinates) before the timed part.
fn open(dir: &Path) -> SingleFlight {
    let runtime = process::runtime();
    runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        process::warm_up(&flights).await;
        flights
    })
}

/// `read` of each process of `pids`.
fn each(pids: &[u32], read: fn(Option<u32>) -> u64) -> Vec<u64> {
    pids.iter().map(|&pid| read(Some(pid))).collect()
}

/// How much `read` of each process of `pids` grew since `before` (taken by
/// [`each`] in the same order).
fn since(pids: &[u32], before: &[u64], read: fn(Option<u32>) -> u64) -> Vec<u64> {
    pids.iter()
        .zip(before)
        .map(|(&pid, &before)| read(Some(pid)).saturating_sub(before))
        .collect()
}
