//! The multi-process benchmarks of BENCHMARKS.md (items 2 to 6): the floor
//! of one Unix-socket round trip, an uncontended call, fan-out to N joiners,
//! throughput under contention against flock, Redis and the floor of its shape, and failover.
//!
//! ```text
//! cargo run --release -p single-flight-bench                # the full run (a few minutes)
//! cargo run --release -p single-flight-bench -- smoke       # every benchmark once, small (seconds)
//! cargo run --release -p single-flight-bench -- full --rounds 3 --only floor,uncontended
//! ```
//!
//! Options: `--rounds N`, `--only LIST` (of floor, uncontended, now-and-then, busy-host,
//! fanout, contended, failover, memory, staggered, cluster-uncontended,
//! cluster-contended, cluster-failover, cluster-host-failover,
//! cluster-memory, cluster-shards, cluster-shard-failover), `--contenders LIST` (the local contended run's
//! systems, of single-flight, flock,
//! redis, floor), `--clients N` (the memory per client's idle clients),
//! `--figures DIR` (draw the latency picture there, `figures.rs`),
//! `--redis auto|off|HOST:PORT` (`auto` starts
//! `redis-server` from PATH on a free loopback port, or skips the baseline
//! with a message), `--work-us N` (the contended work), `--duration-ms N`
//! (each contended run), `--kills N` (per failover round), `--pings N` (of
//! the floor), `--calls N` (uncontended calls per round, busy-host's too),
//! `--cluster-kills N` (per cluster failover round, the shards' failover
//! too), `--cluster-ttl-ms N` and `--cluster-grace-ms N` (the cluster
//! failovers' lease and window), `--shard-threads N` (caller threads per
//! process of `cluster-shards`; the contended shape's keys by default).
//!
//! The cluster benchmarks (`cluster.rs`) run between two network
//! namespaces with etcd in a third, the shards' (`shards.rs`) on four with
//! etcd in a fifth; they need root and etcd, and say why they are skipped
//! without them.
//!
//! Every figure is the median over rounds with the range of the rounds in
//! parentheses; ratios are taken within a round, then summarised, because
//! the machine is shared and absolute times drift. The binary runs itself
//! again as worker processes (`bench worker KIND …`). Smoke mode checks only
//! that everything runs and prints; it never judges a time.

mod busy;
mod contended;
mod contended_floor;
mod failover;
mod fanout;
mod figures;
mod floor;
mod memory;
mod process;
mod redis;
mod staggered;
mod stats;
mod uncontended;

// Cluster mode (BENCHMARKS.md, "Cluster mode"), on the multi-host tests'
// own harness.
#[cfg(feature = "cluster")]
#[path = "../../tests/support/certs.rs"]
mod certs;
#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "cluster")]
mod cluster_failover;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/etcd.rs"]
mod etcd;
#[cfg(feature = "cluster")]
mod etcd_lock;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/hosts.rs"]
mod hosts;
#[cfg(feature = "cluster")]
mod lab;
#[cfg(feature = "cluster")]
mod shards;
#[cfg(feature = "cluster")]
mod tls_floor;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/tools.rs"]
mod tools;

use std::time::{Duration, Instant};

use contended::System;
use stats::{MICROS, MILLIS, percentile, shown};

/// What one run measures, and how much of it.
#[derive(Clone, Debug)]
struct Config {
    mode: &'static str,
    rounds: usize,
    only: Vec<String>,
    redis: String,
    floor_pings: usize,
    uncontended_calls: usize,
    /// Calls of the now-and-then item per round, one every
    /// `uncontended::SPARSE_EVERY`.
    sparse_calls: usize,
    fanout_joiners: usize,
    fanout_flights: usize,
    contended: contended::Shape,
    failover: failover::Shape,
    failover_rounds: usize,
    staggered: staggered::Shape,
    cluster: ClusterFailover,
    /// Idle clients connected for the memory per client.
    memory_clients: usize,
    /// The contended run's systems; all of them when empty.
    contenders: Vec<String>,
    /// Caller threads per process of the shards' item (`--shard-threads`);
    /// `None`: the contended shape's keys.
    shard_threads: Option<usize>,
    /// Where the pictures are written (`--figures DIR`); none without it,
    /// so that only `bash bench/run`'s full run replaces the repository's.
    figures: Option<std::path::PathBuf>,
}

/// The cluster failover's settings; the other cluster benchmarks take the
/// shapes of their local counterparts (calls, pings, the contended shape).
#[derive(Clone, Copy, Debug)]
struct ClusterFailover {
    /// The lease TTL; `None`: the library's default.
    ttl: Option<Duration>,
    /// The grace window; `None`: the library's default for a cluster.
    grace: Option<Duration>,
    /// Kills per round.
    kills: usize,
}

/// The staggered stampede's name, for `--only`: counted, not timed, and
/// reported apart from the local items' table.
const STAGGERED: &str = "staggered";

/// The local benchmarks' names, for `--only`.
const LOCAL_ITEMS: [&str; 8] = [
    "floor",
    "uncontended",
    "now-and-then",
    "busy-host",
    "fanout",
    "contended",
    "failover",
    "memory",
];

/// The cluster benchmarks' names, for `--only`, also where the build has
/// no cluster mode to run them.
const CLUSTER_ITEMS: [&str; 7] = [
    "cluster-uncontended",
    "cluster-contended",
    "cluster-failover",
    "cluster-host-failover",
    "cluster-memory",
    SHARD_ITEMS[0],
    SHARD_ITEMS[1],
];

/// The cluster benchmarks of shards (SPEC.md §19), on a lab of their own
/// (`shards.rs`).
const SHARD_ITEMS: [&str; 2] = ["cluster-shards", "cluster-shard-failover"];

/// Idle clients of the memory per client in the full run: issue 30's N,
/// many enough that what the coordinator allocates once (a grown table, a
/// new page of its allocator) is lost in the quotient.
const MEMORY_CLIENTS: usize = 1000;

impl Config {
    /// The figures of BENCHMARKS.md: the shapes the issue names.
    fn full() -> Config {
        Config {
            mode: "full",
            rounds: 5,
            only: Vec::new(),
            redis: "auto".into(),
            floor_pings: 20_000,
            uncontended_calls: 2_000,
            sparse_calls: 20,
            fanout_joiners: 64,
            fanout_flights: 8,
            contended: contended::Shape {
                processes: 8,
                keys: 16,
                duration: Duration::from_secs(3),
                work: Duration::from_millis(1),
                distinct: false,
            },
            failover: failover::Shape {
                processes: 4,
                threads: 4,
                work: Duration::from_millis(1),
                grace: Duration::from_millis(200),
                kills: 12,
            },
            failover_rounds: 3,
            // The issue's shape: callers every 100 ms for 5 s against a 1 s
            // command.
            staggered: staggered::Shape {
                callers: 50,
                every: Duration::from_millis(100),
                work: Duration::from_secs(1),
                reuse: Duration::from_secs(30),
            },
            // The defaults a cluster gets (a 5 s lease, a 2 s window): a
            // kill costs about 8 s.
            cluster: ClusterFailover {
                ttl: None,
                grace: None,
                kills: 2,
            },
            memory_clients: MEMORY_CLIENTS,
            contenders: Vec::new(),
            shard_threads: None,
            figures: None,
        }
    }

    /// Every benchmark once, small: that it runs and prints, in seconds.
    fn smoke() -> Config {
        Config {
            mode: "smoke",
            rounds: 1,
            only: Vec::new(),
            redis: "auto".into(),
            floor_pings: 300,
            uncontended_calls: 50,
            sparse_calls: 2,
            fanout_joiners: 8,
            fanout_flights: 2,
            contended: contended::Shape {
                processes: 2,
                keys: 2,
                duration: Duration::from_millis(300),
                work: Duration::from_millis(1),
                distinct: false,
            },
            failover: failover::Shape {
                processes: 2,
                threads: 2,
                work: Duration::from_millis(1),
                grace: Duration::from_millis(50),
                kills: 2,
            },
            failover_rounds: 1,
            staggered: staggered::Shape {
                callers: 8,
                every: Duration::from_millis(100),
                work: Duration::from_millis(300),
                reuse: Duration::from_secs(30),
            },
            // etcd's shortest lease (SPEC.md §14.2) and a short window: one
            // kill in about 3 s.
            cluster: ClusterFailover {
                ttl: Some(Duration::from_secs(2)),
                grace: Some(Duration::from_millis(200)),
                kills: 1,
            },
            memory_clients: 20,
            contenders: Vec::new(),
            shard_threads: None,
            figures: None,
        }
    }

    fn runs(&self, benchmark: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|b| b == benchmark)
    }

    /// Whether the contended runs include `system`.
    fn contends(&self, system: System) -> bool {
        self.contenders.is_empty() || self.contenders.iter().any(|s| s == system.name())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        return worker(&args[1..]);
    }
    let (mut config, options) = match args.first().map(String::as_str) {
        None => (Config::full(), &args[..]),
        Some("full") => (Config::full(), &args[1..]),
        Some("smoke") => (Config::smoke(), &args[1..]),
        Some(option) if option.starts_with("--") => (Config::full(), &args[..]),
        Some(other) => {
            eprintln!("unknown mode {other:?}: use `full` (the default) or `smoke`");
            std::process::exit(2);
        }
    };
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let mut value = || {
            options.next().cloned().unwrap_or_else(|| {
                eprintln!("{option} needs a value");
                std::process::exit(2)
            })
        };
        let number = |text: String| -> u64 {
            text.parse().unwrap_or_else(|_| {
                eprintln!("{option} takes a number, not {text:?}");
                std::process::exit(2)
            })
        };
        match option.as_str() {
            "--rounds" => config.rounds = number(value()) as usize,
            "--only" => {
                config.only = value().split(',').map(str::to_owned).collect();
                if let Some(unknown) = config.only.iter().find(|name| {
                    !LOCAL_ITEMS.contains(&name.as_str())
                        && !CLUSTER_ITEMS.contains(&name.as_str())
                        && name.as_str() != STAGGERED
                }) {
                    eprintln!(
                        "unknown benchmark {unknown:?} in --only: use {}, {STAGGERED} or {}",
                        LOCAL_ITEMS.join(", "),
                        CLUSTER_ITEMS.join(", ")
                    );
                    std::process::exit(2);
                }
            }
            "--redis" => config.redis = value(),
            "--contenders" => {
                config.contenders = value().split(',').map(str::to_owned).collect();
                let known = [
                    System::SingleFlight,
                    System::Flock,
                    System::Redis,
                    System::Floor,
                ]
                .map(System::name);
                if let Some(unknown) = config
                    .contenders
                    .iter()
                    .find(|name| !known.contains(&name.as_str()))
                {
                    eprintln!(
                        "unknown system {unknown:?} in --contenders: use {}",
                        known.join(", ")
                    );
                    std::process::exit(2);
                }
            }
            "--clients" => config.memory_clients = number(value()) as usize,
            "--figures" => config.figures = Some(value().into()),
            "--work-us" => config.contended.work = Duration::from_micros(number(value())),
            "--duration-ms" => config.contended.duration = Duration::from_millis(number(value())),
            "--kills" => config.failover.kills = number(value()) as usize,
            "--pings" => config.floor_pings = number(value()) as usize,
            "--calls" => config.uncontended_calls = number(value()) as usize,
            "--cluster-kills" => config.cluster.kills = number(value()) as usize,
            "--shard-threads" => config.shard_threads = Some(number(value()) as usize),
            "--cluster-ttl-ms" => {
                config.cluster.ttl = Some(Duration::from_millis(number(value())));
            }
            "--cluster-grace-ms" => {
                config.cluster.grace = Some(Duration::from_millis(number(value())));
            }
            other => {
                eprintln!("unknown option {other:?} (see the top of bench/src/main.rs)");
                std::process::exit(2);
            }
        }
    }
    run(&config);
}

/// The worker processes the benchmarks start.
fn worker(args: &[String]) {
    // `RUST_LOG=single_flight=debug` shows what each worker's library does.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words[..] {
        ["echo", path] => floor::echo(path),
        ["echo-tokio", path] => floor::echo_tokio(path),
        ["fan-reader", path] => floor::fan_reader(path),
        ["fan-reader-runtime", path] => {
            floor::fan_reader_runtime(path, floor::Reader::Runtime);
        }
        ["fan-reader-watched", path] => {
            floor::fan_reader_runtime(path, floor::Reader::Watched);
        }
        ["fan-reader-watched-close", path] => {
            floor::fan_reader_runtime(path, floor::Reader::WatchedForClose);
        }
        ["serve", dir, grace] => uncontended::serve(dir, grace),
        ["busy-host", dir, spinners] => busy::host(dir, spinners),
        ["sf-caller", dir] => fanout::sf_caller(dir),
        ["flock-caller", dir] => fanout::flock_caller(dir),
        ["contend", ..] => contended::worker(&args[1..]),
        ["contend-floor", path] => contended_floor::serve(path),
        ["load", ..] => failover::worker(&args[1..]),
        ["stagger-call", dir, work, reuse] => staggered::caller(dir, work, reuse),
        #[cfg(feature = "cluster")]
        ["tls-echo", address, certs] => tls_floor::echo(address, certs),
        #[cfg(feature = "cluster")]
        ["tls-ping", address, certs, pings, echo] => tls_floor::ping(address, certs, pings, echo),
        #[cfg(feature = "cluster")]
        ["tls-clients", address, certs, count] => tls_floor::clients(address, certs, count),
        #[cfg(feature = "cluster")]
        ["cluster-idle"] => cluster_failover::idle(),
        #[cfg(feature = "cluster")]
        ["cluster-shard-load", threads, work, file] => shards::shard_load(threads, work, file),
        #[cfg(feature = "cluster")]
        ["cluster-calls", count, peers] => cluster::calls(count, peers),
        #[cfg(feature = "cluster")]
        ["cluster-lead", key] => cluster_failover::lead(key),
        #[cfg(feature = "cluster")]
        ["cluster-join", key] => cluster_failover::join(key),
        #[cfg(feature = "cluster")]
        ["cluster-load", threads, work] => cluster_failover::load(threads, work),
        _ => panic!("unknown worker {args:?}"),
    }
}

/// The figures of one run, per round.
#[derive(Default)]
struct Figures {
    floor: Vec<f64>,
    floor_threads: Vec<f64>,
    floor_threads_ratio: Vec<f64>,
    floor_fanout: Vec<f64>,
    fanout_over_floor_fanout: Vec<f64>,
    uncontended: Vec<f64>,
    uncontended_own: Vec<f64>,
    uncontended_ratio: Vec<f64>,
    uncontended_own_ratio: Vec<f64>,
    floor_cpu: Vec<f64>,
    uncontended_cpu: Vec<f64>,
    uncontended_cpu_ratio: Vec<f64>,
    floor_switches: Vec<f64>,
    uncontended_switches: Vec<f64>,
    uncontended_switches_ratio: Vec<f64>,
    /// A call now and then: its time, and the CPU time and wake-ups it
    /// adds to its idle process.
    sparse: Vec<f64>,
    sparse_cpu: Vec<f64>,
    sparse_switches: Vec<f64>,
    /// A coordinator process while nobody calls: CPU time (ns) and wake-ups
    /// per second.
    idle_coordinator_cpu: Vec<f64>,
    idle_coordinator_switches: Vec<f64>,
    /// What a call now and then adds to the coordinator's process: CPU
    /// time (ns) and wake-ups.
    sparse_coordinator_cpu: Vec<f64>,
    sparse_coordinator_switches: Vec<f64>,
    fanout: Vec<f64>,
    fanout_flock: Vec<f64>,
    fanout_in_floors: Vec<f64>,
    flock_over_fanout: Vec<f64>,
    contended: Vec<(System, Vec<contended::Throughput>)>,
    over_flock: Vec<f64>,
    over_redis: Vec<f64>,
    /// The fan-out floor with tokio runtimes reading, over the plain floor,
    /// per round; then with each reader's socket also registered in a
    /// second, idle runtime.
    runtime_fanout: Vec<f64>,
    watched_fanout: Vec<f64>,
    close_watched_fanout: Vec<f64>,
    /// The contended floor's calls/s over flock's and Redis's, per round:
    /// the most any design can show against them.
    floor_over_flock: Vec<f64>,
    floor_over_redis: Vec<f64>,
    /// single-flight's CPU per call over the contended floor's, per round.
    cpu_over_floor: Vec<f64>,
    failover_p50: Vec<f64>,
    failover_p99: Vec<f64>,
    failover_all: Vec<f64>,
    memory: Vec<f64>,
    memory_failed: Option<String>,
    busy: Vec<busy::Busy>,
}

fn run(config: &Config) {
    let started = Instant::now();
    println!("# single-flight benchmarks ({} mode)", config.mode);
    println!();
    println!("- date: {}", utc_now());
    println!("- machine: {}", machine());
    println!("- load average before: {}", load_average());
    let redis = match config.redis.as_str() {
        _ if !config.runs("contended") || !config.contends(System::Redis) => None,
        "off" => {
            println!("- redis baseline: skipped (--redis off)");
            None
        }
        "auto" => match redis::Server::start() {
            Ok(server) => {
                println!(
                    "- redis baseline: {} started on {}",
                    redis_version(),
                    server.address
                );
                Some((Some(server), String::new()))
            }
            Err(reason) => {
                println!("- redis baseline: skipped: {reason}");
                None
            }
        },
        address => {
            println!("- redis baseline: the server at {address}");
            Some((None, address.to_owned()))
        }
    };
    let redis_target = redis.as_ref().map(|(server, address)| match server {
        Some(server) => contended::RedisTarget {
            address: server.address.clone(),
            pid: Some(server.pid()),
        },
        None => contended::RedisTarget {
            address: address.clone(),
            pid: None,
        },
    });
    println!();
    let mut figures = Figures::default();
    let mut systems = vec![System::SingleFlight, System::Flock];
    if redis_target.is_some() {
        systems.push(System::Redis);
    }
    systems.push(System::Floor);
    systems.retain(|&system| config.contends(system));
    figures.contended = systems.iter().map(|&s| (s, Vec::new())).collect();
    for round in 1..=config.rounds {
        eprintln!("round {round} of {}", config.rounds);
        round_of(config, redis_target.as_ref(), &mut figures);
    }
    if config.runs("failover") {
        for round in 1..=config.failover_rounds {
            eprintln!("failover round {round} of {}", config.failover_rounds);
            let times = failover::measure(config.failover);
            figures.failover_p50.push(percentile(&times, 50.0));
            figures.failover_p99.push(percentile(&times, 99.0));
            figures.failover_all.extend(times);
        }
    }
    if LOCAL_ITEMS.iter().any(|item| config.runs(item)) {
        report(config, &figures);
        println!();
        println!("- load average after: {}", load_average());
    }
    drop(redis);
    if config.runs(STAGGERED) {
        staggered::run(config.staggered);
    }
    let local = figures::Panel {
        title: format!(
            "one host: {} processes × {} keys, {} µs of work",
            config.contended.processes,
            config.contended.keys,
            config.contended.work.as_micros()
        ),
        curves: figures
            .contended
            .iter()
            .map(|(system, results)| {
                let rounds = results.iter().map(|r| &r.latency);
                (*system, stats::Cdf::pooled(rounds))
            })
            .collect(),
    };
    #[cfg(feature = "cluster")]
    let cluster = figures::Panel {
        title: format!(
            "two hosts (cluster): {} processes × {} keys, {} µs of work",
            config.contended.processes,
            config.contended.keys,
            config.contended.work.as_micros()
        ),
        curves: cluster::run(config),
    };
    #[cfg(feature = "cluster")]
    shards::run(config);
    #[cfg(not(feature = "cluster"))]
    let cluster = figures::Panel {
        title: String::new(),
        curves: Vec::new(),
    };
    #[cfg(not(feature = "cluster"))]
    {
        let asked: Vec<&str> = CLUSTER_ITEMS
            .into_iter()
            .filter(|i| config.runs(i))
            .collect();
        if !asked.is_empty() {
            println!();
            println!(
                "- {}: skipped: this build has no cluster mode (the `cluster` feature)",
                asked.join(", ")
            );
        }
    }
    if let Some(dir) = &config.figures {
        let path = dir.join(figures::LATENCY_CDF);
        match figures::latency_cdf(&path, &[local, cluster]) {
            Ok(()) => println!("- latency picture: {}", path.display()),
            Err(reason) => println!("- latency picture: not drawn: {reason}"),
        }
    }
    println!(
        "- took {:.0} s; `{}` rounds",
        started.elapsed().as_secs_f64(),
        config.rounds
    );
}

fn round_of(config: &Config, redis: Option<&contended::RedisTarget>, figures: &mut Figures) {
    let needs_floor = config.runs("floor") || config.runs("uncontended") || config.runs("fanout");
    let floor_timed = needs_floor.then(|| floor::measure(config.floor_pings));
    let floor = floor_timed.map(|floor| floor.median);
    if let Some(timed) = floor_timed {
        let floor = timed.median;
        figures.floor.push(floor);
        figures.floor_cpu.push(timed.cpu);
        figures.floor_switches.push(timed.switches);
        let threads = floor::measure_through_threads(config.floor_pings);
        figures.floor_threads.push(threads);
        figures.floor_threads_ratio.push(threads / floor);
    }
    if config.runs("uncontended") {
        let (remote, own) = uncontended::measure(config.uncontended_calls);
        let floor_cpu = floor_timed.expect("measured with it").cpu;
        figures.uncontended_cpu.push(remote.cpu);
        figures.uncontended_cpu_ratio.push(remote.cpu / floor_cpu);
        let floor_switches = floor_timed.expect("measured with it").switches;
        figures.uncontended_switches.push(remote.switches);
        figures
            .uncontended_switches_ratio
            .push(remote.switches / floor_switches);
        let (remote, own) = (remote.median, own.median);
        let floor = floor.expect("measured with it");
        figures.uncontended.push(remote);
        figures.uncontended_own.push(own);
        figures.uncontended_ratio.push(remote / floor);
        figures.uncontended_own_ratio.push(own / floor);
    }
    if config.runs("now-and-then") {
        let (sparse, idle) = uncontended::now_and_then(config.sparse_calls);
        figures.idle_coordinator_cpu.push(idle.cpu_per_second);
        figures
            .idle_coordinator_switches
            .push(idle.switches_per_second);
        figures.sparse_coordinator_cpu.push(idle.cpu_per_call);
        figures
            .sparse_coordinator_switches
            .push(idle.switches_per_call);
        figures.sparse.push(sparse.median);
        figures.sparse_cpu.push(sparse.cpu);
        figures.sparse_switches.push(sparse.switches);
    }
    if config.runs("fanout") {
        let (ours, flock) = fanout::measure(config.fanout_joiners, config.fanout_flights);
        let fan_floor = |reader| {
            stats::median(&floor::fan_out(
                config.fanout_joiners,
                config.fanout_flights,
                reader,
            ))
        };
        let bare = fan_floor(floor::Reader::Alone);
        let runtime = fan_floor(floor::Reader::Runtime);
        let watched = fan_floor(floor::Reader::Watched);
        let watched_close = fan_floor(floor::Reader::WatchedForClose);
        let (ours, flock) = (stats::median(&ours), stats::median(&flock));
        figures.floor_fanout.push(bare);
        figures.runtime_fanout.push(runtime / bare);
        figures.watched_fanout.push(watched / bare);
        figures.close_watched_fanout.push(watched_close / bare);
        figures.fanout_over_floor_fanout.push(ours / bare);
        figures.fanout.push(ours);
        figures.fanout_flock.push(flock);
        figures
            .fanout_in_floors
            .push(ours / floor.expect("measured with it"));
        figures.flock_over_fanout.push(flock / ours);
    }
    if config.runs("busy-host") {
        figures.busy.push(busy::measure(config.uncontended_calls));
    }
    if config.runs("memory") {
        match memory::measure(config.memory_clients) {
            Ok(bytes) => figures.memory.push(bytes),
            Err(reason) => figures.memory_failed = Some(reason),
        }
    }
    if config.runs("contended") {
        let mut this_round = Vec::new();
        let mut cpu = Vec::new();
        for (system, results) in &mut figures.contended {
            let result = contended::measure(*system, config.contended, redis);
            this_round.push((*system, result.calls_per_second));
            cpu.push((*system, result.cpu_per_call));
            results.push(result);
        }
        figures
            .cpu_over_floor
            .extend(contended::ratio(&cpu, System::SingleFlight, System::Floor));
        let ratio = |other| contended::ratio(&this_round, System::SingleFlight, other);
        figures.over_flock.extend(ratio(System::Flock));
        figures.over_redis.extend(ratio(System::Redis));
        let floor_over = |other| contended::ratio(&this_round, System::Floor, other);
        figures.floor_over_flock.extend(floor_over(System::Flock));
        figures.floor_over_redis.extend(floor_over(System::Redis));
    }
}

fn report(config: &Config, figures: &Figures) {
    // A row for each figure this run measured.
    let row = |figure: &str, value: Option<String>, target: &str| {
        if let Some(value) = value {
            println!("| {figure} | {value} | {target} |");
        }
    };
    // Rows of figures shown as their spread over the rounds: each a
    // figure, its values, their scale and digits (`Spread::show`), and
    // its target.
    let rows = |rows: &[(&str, &[f64], f64, usize, &str)]| {
        for &(figure, values, scale, digits, target) in rows {
            row(figure, shown(values, scale, digits), target);
        }
    };
    println!("| figure | value | target |");
    println!("|---|---|---|");
    rows(&[
        (
            "floor: one JSON line each way, Unix socket, 2 processes (µs)",
            &figures.floor,
            MICROS,
            1,
            "",
        ),
        (
            "floor through the shell's thread layout: caller thread → I/O thread → socket → tokio peer (µs)",
            &figures.floor_threads,
            MICROS,
            1,
            "",
        ),
        (
            "… as floor round trips",
            &figures.floor_threads_ratio,
            1.0,
            2,
            "",
        ),
        (
            "uncontended call, coordinator in another process (µs)",
            &figures.uncontended,
            MICROS,
            1,
            "",
        ),
        // Issue 30 set the target on CPU time instead (the rows below): on
        // a virtual machine the time of a round trip is mostly wake-ups.
        (
            "… as floor round trips",
            &figures.uncontended_ratio,
            1.0,
            2,
            "",
        ),
        (
            "floor: CPU time per round trip, both processes (µs)",
            &figures.floor_cpu,
            MICROS,
            1,
            "",
        ),
        (
            "uncontended call, coordinator in another process: CPU time per call, both processes (µs)",
            &figures.uncontended_cpu,
            MICROS,
            1,
            "",
        ),
        (
            "… ÷ the floor's CPU per round trip, median of the rounds' ratios",
            &figures.uncontended_cpu_ratio,
            1.0,
            2,
            "≤ 1.5",
        ),
        (
            "floor: times a thread of either process was given a CPU, per round trip",
            &figures.floor_switches,
            1.0,
            2,
            "",
        ),
        (
            "uncontended call, coordinator in another process: the same, per call",
            &figures.uncontended_switches,
            1.0,
            2,
            "",
        ),
        // Not a target of its own: what the CPU ratio above is made of
        // (BENCHMARKS.md, "Issue 30's hot path"), as a count, which the
        // load barely moves.
        (
            "… ÷ the floor's, median of the rounds' ratios",
            &figures.uncontended_switches_ratio,
            1.0,
            2,
            "",
        ),
        (
            &format!(
                "a call now and then (one every {} ms), coordinator in another process (µs)",
                uncontended::SPARSE_EVERY.as_millis()
            ),
            &figures.sparse,
            MICROS,
            1,
            "",
        ),
        (
            "… CPU time it adds to its idle process, per call (µs)",
            &figures.sparse_cpu,
            MICROS,
            1,
            "",
        ),
        (
            "… times a thread of that process was given a CPU, beyond its idle pauses, per call",
            &figures.sparse_switches,
            1.0,
            2,
            "",
        ),
        (
            "… CPU time it adds to the coordinator's process (a `serve`), per call (µs)",
            &figures.sparse_coordinator_cpu,
            MICROS,
            1,
            "",
        ),
        (
            "… times a thread of the coordinator's process was given a CPU, beyond its idle pauses, per call",
            &figures.sparse_coordinator_switches,
            1.0,
            2,
            "",
        ),
        // Not a target of an issue: one per periodic check (100 ms,
        // `CHECK_INTERVAL`) is what it takes.
        (
            "a coordinator process while nobody calls: times a thread was given a CPU, per second",
            &figures.idle_coordinator_switches,
            1.0,
            1,
            "",
        ),
        (
            "… its CPU time per second (µs)",
            &figures.idle_coordinator_cpu,
            MICROS,
            0,
            "",
        ),
        (
            "uncontended call, coordinator in the caller's process (µs)",
            &figures.uncontended_own,
            MICROS,
            1,
            "",
        ),
        (
            "… as floor round trips",
            &figures.uncontended_own_ratio,
            1.0,
            2,
            "",
        ),
    ]);
    // Two figures in one cell, `first{between}second`, when both were
    // measured.
    let both = |first: Option<String>, second: Option<String>, between: &str| {
        first
            .zip(second)
            .map(|(first, second)| format!("{first}{between}{second}"))
    };
    let busy = |pick: fn(&busy::Busy) -> f64| figures.busy.iter().map(pick).collect::<Vec<_>>();
    let busy_percentiles = |p50, p99| {
        both(
            shown(&busy(p50), MILLIS, 2),
            shown(&busy(p99), MILLIS, 2),
            " / ",
        )
    };
    row(
        "uncontended call through an idle coordinator process: p50 / p99 (ms)",
        busy_percentiles(|b| b.idle_p50, |b| b.idle_p99),
        "",
    );
    row(
        "… through a coordinator process whose callers' runtime spins on every core: p50 / p99 (ms)",
        busy_percentiles(|b| b.busy_p50, |b| b.busy_p99),
        "bounded",
    );
    row(
        "… calls through it past their 5 s deadline, all rounds",
        (!figures.busy.is_empty()).then(|| {
            figures
                .busy
                .iter()
                .map(|b| b.busy_missed)
                .sum::<usize>()
                .to_string()
        }),
        "0",
    );
    let joiners = config.fanout_joiners;
    rows(&[
        (
            &format!("fan-out: land → last of {joiners} joiners has the value (µs)"),
            &figures.fanout,
            MICROS,
            0,
            "",
        ),
        // Issue 9's "≤ 10", which issue 30 replaced by the 64-write floor
        // below: the uncontended round trip is no floor for 64 wake-ups.
        (
            "… as floor round trips",
            &figures.fanout_in_floors,
            1.0,
            1,
            "",
        ),
        (
            &format!(
                "floor of a fan-out: one process writes a line to each of {joiners} blocked readers → the last read returns (µs)"
            ),
            &figures.floor_fanout,
            MICROS,
            0,
            "",
        ),
        (
            "… the same, each reader a tokio runtime, ÷ this floor",
            &figures.runtime_fanout,
            1.0,
            2,
            "",
        ),
        (
            "… and each reader's socket also registered in a second, idle runtime of its process (design 4's caveat), ÷ this floor",
            &figures.watched_fanout,
            1.0,
            2,
            "",
        ),
        (
            "… registered in the idle runtime only through an epoll instance that watches it for its end (`EPOLLRDHUP`), ÷ this floor",
            &figures.close_watched_fanout,
            1.0,
            2,
            "",
        ),
        (
            "… single-flight fan-out ÷ this floor",
            &figures.fanout_over_floor_fanout,
            1.0,
            1,
            "≤ 1.5",
        ),
        (
            &format!("flock chain: land → last of {joiners} waiters has the value (µs)"),
            &figures.fanout_flock,
            MICROS,
            0,
            "",
        ),
        (
            "… flock chain ÷ single-flight fan-out",
            &figures.flock_over_fanout,
            1.0,
            2,
            "≥ 5",
        ),
    ]);
    let shape = config.contended;
    for (system, results) in &figures.contended {
        let values = |pick: fn(&contended::Throughput) -> f64| {
            results.iter().map(pick).collect::<Vec<f64>>()
        };
        let name = system.name();
        rows(&[
            (
                &format!(
                    "contended, {} processes × {} keys, work {} µs, {name}: calls/s",
                    shape.processes,
                    shape.keys,
                    shape.work.as_micros()
                ),
                &values(|r| r.calls_per_second),
                1.0,
                0,
                "",
            ),
            (
                &format!("… {name}: call latency p50 (ms)"),
                &values(|r| r.p50),
                MILLIS,
                2,
                "",
            ),
            (
                &format!("… {name}: call latency p99 (ms)"),
                &values(|r| r.p99),
                MILLIS,
                2,
                "",
            ),
            (
                &format!("… {name}: calls that ran the work (%)"),
                &values(|r| r.led_share * 100.0),
                1.0,
                1,
                "",
            ),
            (
                &format!("… {name}: CPU time per call, all processes (µs)"),
                &values(|r| r.cpu_per_call),
                MICROS,
                1,
                "",
            ),
        ]);
        let failed: u64 = results.iter().map(|r| r.failed).sum();
        if failed > 0 {
            row(
                &format!("… {name}: calls that failed, all rounds (their stderr is above)"),
                Some(failed.to_string()),
                "0",
            );
        }
    }
    rows(&[
        (
            "… single-flight ÷ flock (calls/s)",
            &figures.over_flock,
            1.0,
            2,
            "≥ 5",
        ),
        (
            "… single-flight ÷ Redis (calls/s)",
            &figures.over_redis,
            1.0,
            2,
            "≥ 3.5",
        ),
    ]);
    row(
        "… the floor ÷ flock; ÷ Redis (calls/s): the most any design shows here",
        both(
            shown(&figures.floor_over_flock, 1.0, 2),
            shown(&figures.floor_over_redis, 1.0, 2),
            "; ",
        ),
        "",
    );
    rows(&[
        // Issue 30 item 1 as BENCHMARKS.md reads it: 12 µs is below this
        // shape's floor on 2 cores.
        (
            "… single-flight's CPU time per call ÷ the floor's, median of the rounds' ratios",
            &figures.cpu_over_floor,
            1.0,
            2,
            "≤ 1.5",
        ),
        (
            &format!(
                "coordinator's resident set per idle connected client, {} Unix-socket clients (KiB)",
                config.memory_clients
            ),
            &figures.memory,
            1024.0,
            1,
            "no more than before issue 30",
        ),
    ]);
    if let Some(reason) = &figures.memory_failed {
        row("… not measured in a round", Some(reason.clone()), "");
    }
    let failover = config.failover;
    let kills = figures.failover_all.len();
    if kills > 0 {
        let grace = failover.grace.as_millis();
        for (p, target) in [(50.0, ""), (99.0, "≤ 15")] {
            row(
                &format!(
                    "failover beyond the {grace} ms grace window, p{p} of all {kills} kills (ms)"
                ),
                Some(format!(
                    "{:.1}",
                    percentile(&figures.failover_all, p) / MILLIS
                )),
                target,
            );
        }
        let round = failover.kills;
        rows(&[
            (
                &format!("… p50 per round of {round} kills (ms)"),
                &figures.failover_p50,
                MILLIS,
                1,
                "",
            ),
            (
                &format!("… p99 per round of {round} kills (ms)"),
                &figures.failover_p99,
                MILLIS,
                1,
                "",
            ),
        ]);
    }
}

/// CPU model, cores and kernel, read from /proc.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().strip_suffix(" kB")?.parse::<u64>().ok())
        .map_or(String::new(), |kb| format!(", {} GiB", kb / 1024 / 1024));
    format!("{model}, {cores} cores{memory}, Linux {}", kernel.trim())
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn redis_version() -> String {
    version_of("redis-server", |word| word.strip_prefix("v="))
}

/// `PROGRAM VERSION` for the report, the version being the first word of
/// `PROGRAM --version`'s output that `version` finds one in; the program's
/// name alone when none does.
fn version_of(program: &str, version: impl Fn(&str) -> Option<&str>) -> String {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            text.split_whitespace()
                .find_map(&version)
                .map(str::to_owned)
        })
        .map_or(program.into(), |v| format!("{program} {v}"))
}

/// The date and time in UTC (RFC 3339), from the system clock, in the
/// library's own words for times (no date crate is needed).
fn utc_now() -> String {
    single_flight::_internal::transport::tcp::rfc3339(process::wall_nanos() / 1_000_000_000)
}
