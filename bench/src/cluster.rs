//! The cluster rows of BENCHMARKS.md, each measured between two hosts
//! (network namespaces, `crate::lab`) with etcd in a third:
//!
//! - `cluster-uncontended`: a call on a fresh key from host 1 with the
//!   coordinator on host 0, against the floor of one TLS round trip between
//!   the two (`crate::tls_floor`);
//! - `cluster-contended`: 8 processes (4 on each host) × 16 keys, 1 ms of
//!   work, single-flight against etcd's Lock API (`crate::etcd_lock`) and the
//!   Redis baseline (`crate::redis`, its server in etcd's namespace);
//! - `cluster-failover`: the coordinator's host killed while a leader on
//!   the other host runs (`crate::cluster_failover`);
//! - `cluster-host-failover`: through the host tier (SPEC.md §18), a host's
//!   coordinator killed while a leader on its host runs.
//!
//! The uncontended and contended items also measure the host tier beside
//! direct connections, in the same round: a call from host 1 through its
//! host's coordinator (another process), and the contended shape with each
//! host's processes meeting in their host directory.
//!
//! They need root (for the namespaces) and etcd; without either they are
//! skipped with a line that says why.

use std::time::Duration;

use single_flight::_internal::election::etcd::DEFAULT_TTL;
use single_flight::DEFAULT_CLUSTER_GRACE_WINDOW;

use crate::cluster_failover::{self, HostKill, Kill};
use crate::contended::{self, Placement, RedisTarget, System, Throughput};
use crate::floor::Timed;
use crate::lab::{self, Lab, Settings};
use crate::process::{Worker, say};
use crate::stats::{Cdf, MICROS, MILLIS, percentile, shown};

/// The hosts of these items: the cluster rows of BENCHMARKS.md were
/// measured between two.
pub const HOSTS: usize = 2;

/// Joiners of the flight that runs through a kill: enough that "every
/// waiter answered" means more than one process.
const FAILOVER_JOINERS: usize = 2;

/// Caller threads of the load that shows the next successful lead, and the
/// work of each call (as the local failover's).
const FAILOVER_LOAD_THREADS: usize = 2;
const FAILOVER_WORK: Duration = Duration::from_millis(1);

/// The shapes of the cluster benchmarks.
#[derive(Clone, Copy, Debug)]
struct Shapes {
    /// Timed uncontended calls per round.
    calls: usize,
    /// Timed round trips of the TLS floor per round.
    pings: usize,
    /// The contended run; its processes are split evenly between the hosts.
    contended: contended::Shape,
    failover: cluster_failover::Shape,
}

impl Shapes {
    fn of(config: &crate::Config) -> Shapes {
        Shapes {
            calls: config.uncontended_calls,
            pings: config.floor_pings,
            contended: config.contended,
            failover: cluster_failover::Shape {
                ttl: config.cluster.ttl.unwrap_or(DEFAULT_TTL),
                grace: config.cluster.grace.unwrap_or(DEFAULT_CLUSTER_GRACE_WINDOW),
                kills: config.cluster.kills,
                joiners: FAILOVER_JOINERS,
                load_threads: FAILOVER_LOAD_THREADS,
                work: FAILOVER_WORK,
            },
        }
    }
}

/// The figures of the cluster benchmarks, per round.
#[derive(Default)]
struct Figures {
    floor: Vec<f64>,
    call: Vec<f64>,
    call_in_floors: Vec<f64>,
    floor_cpu: Vec<f64>,
    call_cpu: Vec<f64>,
    call_cpu_in_floors: Vec<f64>,
    floor_switches: Vec<f64>,
    call_switches: Vec<f64>,
    call_switches_in_floors: Vec<f64>,
    /// The same call through the host tier, and its ratios to the direct
    /// call of its round.
    tier_call: Vec<f64>,
    tier_call_over_direct: Vec<f64>,
    tier_call_cpu: Vec<f64>,
    tier_call_cpu_over_direct: Vec<f64>,
    tier_call_switches: Vec<f64>,
    contended: Vec<(System, Vec<Throughput>)>,
    over_etcd: Vec<f64>,
    over_redis: Vec<f64>,
    /// Contended completed calls/s through the host tier ÷ direct, and its
    /// CPU per call ÷ direct's, per round.
    tier_over_direct: Vec<f64>,
    tier_cpu_over_direct: Vec<f64>,
    kills: Vec<Kill>,
    host_kills: Vec<HostKill>,
    memory: Vec<f64>,
    memory_failed: Option<String>,
}

/// Runs the cluster benchmarks that `config` asks for and prints their
/// section of the report; returns the contended run's latencies of each
/// system, all rounds pooled, for the picture (`crate::figures`).
pub fn run(config: &crate::Config) -> Vec<(System, Cdf)> {
    let shapes = Shapes::of(config);
    // The shards' items have a section and a lab of their own
    // (`crate::shards`).
    let items: Vec<&str> = crate::CLUSTER_ITEMS
        .into_iter()
        .filter(|i| config.runs(i) && !crate::SHARD_ITEMS.contains(i))
        .collect();
    let Some(lab) = Lab::section("Cluster mode", &items, HOSTS) else {
        return Vec::new();
    };
    println!(
        "- hosts: {} network namespaces on one bridge ({}, {}); etcd and Redis in a third ({}), {}, one member, data in the temp dir",
        HOSTS,
        lab.address(0),
        lab.address(1),
        lab.endpoints().join(","),
        Lab::etcd_version(),
    );
    let contended = config.runs("cluster-contended");
    let redis = match config.redis.as_str() {
        _ if !contended => None,
        "auto" => match lab.redis() {
            Ok(server) => {
                println!(
                    "- redis baseline: {} on {}",
                    crate::redis_version(),
                    server.address
                );
                Some(server)
            }
            Err(reason) => {
                println!("- redis baseline: skipped: {reason}");
                None
            }
        },
        other => {
            println!(
                "- redis baseline: skipped (--redis {other}): across hosts it needs a server of its own in the lab (--redis auto)"
            );
            None
        }
    };
    let redis_target = redis.as_ref().map(|server| RedisTarget {
        address: server.address.clone(),
        pid: Some(server.pid()),
    });
    println!("- load average before: {}", crate::load_average());
    println!();
    let mut figures = Figures::default();
    let mut systems = vec![System::Cluster, System::ClusterTier, System::EtcdLock];
    if redis_target.is_some() {
        systems.push(System::Redis);
    }
    figures.contended = systems.iter().map(|&s| (s, Vec::new())).collect();
    for round in 1..=config.rounds {
        eprintln!("cluster round {round} of {}", config.rounds);
        if config.runs("cluster-uncontended") {
            let floor = crate::tls_floor::measure(&lab, shapes.pings);
            let call = uncontended(&lab, round, shapes.calls);
            figures.floor.push(floor.median);
            figures.call.push(call.median);
            figures.call_in_floors.push(call.median / floor.median);
            figures.floor_cpu.push(floor.cpu);
            figures.call_cpu.push(call.cpu);
            figures.call_cpu_in_floors.push(call.cpu / floor.cpu);
            figures.floor_switches.push(floor.switches);
            figures.call_switches.push(call.switches);
            figures
                .call_switches_in_floors
                .push(call.switches / floor.switches);
            let tier = uncontended_through_host(&lab, round, shapes.calls);
            figures.tier_call.push(tier.median);
            figures
                .tier_call_over_direct
                .push(tier.median / call.median);
            figures.tier_call_cpu.push(tier.cpu);
            figures.tier_call_cpu_over_direct.push(tier.cpu / call.cpu);
            figures.tier_call_switches.push(tier.switches);
        }
        if contended {
            contended_round(&lab, round, shapes, redis_target.as_ref(), &mut figures);
        }
        if config.runs("cluster-failover") {
            let kills = cluster_failover::measure(&lab, round, shapes.failover);
            figures.kills.extend(kills);
        }
        if config.runs("cluster-host-failover") {
            let kills = cluster_failover::measure_host(&lab, round, shapes.failover);
            figures.host_kills.extend(kills);
        }
        if config.runs("cluster-memory") {
            match memory(&lab, round, config.memory_clients) {
                Ok(bytes) => figures.memory.push(bytes),
                Err(reason) => figures.memory_failed = Some(reason),
            }
        }
    }
    report(shapes, config.memory_clients, &figures);
    println!();
    println!("- load average after: {}", crate::load_average());
    drop(redis);
    figures
        .contended
        .iter()
        .map(|(system, results)| (*system, Cdf::pooled(results.iter().map(|r| &r.latency))))
        .collect()
}

/// The coordinator's resident set per idle client (`crate::memory`): the
/// coordinator on host 0, `clients` TCP + mutual-TLS connections from one
/// process on host 1.
fn memory(lab: &Lab, round: usize, clients: usize) -> Result<f64, String> {
    // Before the coordinator starts, which inherits the limit.
    crate::memory::allow_descriptors(clients)?;
    let settings = Settings::new(&format!("bench-memory-{round}"));
    let _coordinator = lab.worker(0, &settings, &["cluster-idle"]).ready();
    let status = lab.status(&settings.cluster);
    let address = status
        .address
        .clone()
        .ok_or("the coordinator advertises no address")?;
    let certs = lab.certs();
    let certs = certs.to_str().expect("a UTF-8 temp dir");
    crate::memory::per_client(status.pid, clients, || {
        let holder = Worker::start(
            lab.command(1),
            &["tls-clients", &address, certs, &clients.to_string()],
        );
        holder.expect("READY");
        Ok(holder)
    })
}

/// One round of uncontended calls, the CPU time per call the caller's and
/// the coordinator's.
fn uncontended(lab: &Lab, round: usize, calls: usize) -> Timed {
    let settings = Settings::new(&format!("bench-uncontended-{round}"));
    let _coordinator = lab.worker(0, &settings, &["cluster-idle"]).ready();
    let status = lab.status(&settings.cluster);
    assert_eq!(lab.host_of(&status), 0, "the first process coordinates");
    let caller = lab.worker(
        1,
        &settings,
        &["cluster-calls", &calls.to_string(), &status.pid.to_string()],
    );
    Timed::parse(&caller.expect("result"))
}

/// The same through the host tier (SPEC.md §18): the caller on host 1
/// reaches the coordinator on host 0 through host 1's coordinator, another
/// process there (the first of its host); the CPU time per call is the
/// caller's, the host coordinator's and the cluster coordinator's.
fn uncontended_through_host(lab: &Lab, round: usize, calls: usize) -> Timed {
    let settings = Settings::tiered(&format!("bench-uncontended-tier-{round}"));
    let _coordinator = lab.worker(0, &settings, &["cluster-idle"]).ready();
    let status = lab.status(&settings.cluster);
    assert_eq!(lab.host_of(&status), 0, "the first process coordinates");
    let host_coordinator = lab.worker(1, &settings, &["cluster-idle"]).ready();
    let peers = format!("{},{}", status.pid, host_coordinator.pid());
    let caller = lab.worker(1, &settings, &["cluster-calls", &calls.to_string(), &peers]);
    Timed::parse(&caller.expect("result"))
}

fn contended_round(
    lab: &Lab,
    round: usize,
    shapes: Shapes,
    redis: Option<&RedisTarget>,
    figures: &mut Figures,
) {
    let shape = shapes.contended;
    let mut this_round = Vec::new();
    for (system, results) in &mut figures.contended {
        let name = format!("bench-contended-{round}-{}", system.name());
        let settings = match system {
            System::ClusterTier => Settings::tiered(&name),
            _ => Settings::new(&name),
        };
        // The first half on host 0, the rest on host 1; the first process
        // starts first and so coordinates.
        let spawn = |index: usize, args: &[&str]| -> Worker {
            let host = index * HOSTS / shape.processes;
            lab.worker(host, &settings, args)
        };
        let services = match system {
            System::Redis => Vec::new(),
            _ => lab.etcd_pids(),
        };
        let placement = Placement {
            spawn: &spawn,
            services,
            watched: Vec::new(),
        };
        let result = contended::measure_on(*system, shape, redis, &placement);
        this_round.push((*system, result.calls_per_second));
        results.push(result);
    }
    let ratio = |other| contended::ratio(&this_round, System::Cluster, other);
    figures.over_etcd.extend(ratio(System::EtcdLock));
    figures.over_redis.extend(ratio(System::Redis));
    figures.tier_over_direct.extend(contended::ratio(
        &this_round,
        System::ClusterTier,
        System::Cluster,
    ));
    let cpu = |wanted| {
        figures
            .contended
            .iter()
            .find(|(system, _)| *system == wanted)
            .and_then(|(_, results)| results.last())
            .map(|result| result.cpu_per_call)
    };
    if let (Some(tier), Some(direct)) = (cpu(System::ClusterTier), cpu(System::Cluster)) {
        figures.tier_cpu_over_direct.push(tier / direct);
    }
}

fn label(system: System) -> &'static str {
    match system {
        System::Cluster => "single-flight",
        System::ClusterTier => "single-flight through the host tier",
        System::EtcdLock => "etcd lock",
        other => other.name(),
    }
}

fn report(shapes: Shapes, clients: usize, figures: &Figures) {
    let row = |figure: &str, value: Option<String>| {
        if let Some(value) = value {
            println!("| {figure} | {value} |");
        }
    };
    // Rows of figures shown as their spread over the rounds: each a
    // figure, its values, and their scale and digits (`Spread::show`).
    let rows = |rows: &[(&str, &[f64], f64, usize)]| {
        for &(figure, values, scale, digits) in rows {
            row(figure, shown(values, scale, digits));
        }
    };
    println!("| figure | median (range of the rounds) |");
    println!("|---|---|");
    rows(&[
        (
            "TLS floor: one line each way, TCP + mutual TLS 1.3, host 1 → host 0 (µs)",
            &figures.floor,
            MICROS,
            1,
        ),
        (
            "uncontended call on host 1, coordinator on host 0 (µs)",
            &figures.call,
            MICROS,
            1,
        ),
        (
            "… as TLS floor round trips",
            &figures.call_in_floors,
            1.0,
            2,
        ),
        (
            "TLS floor: CPU time per round trip, both processes (µs)",
            &figures.floor_cpu,
            MICROS,
            1,
        ),
        (
            "uncontended call: CPU time per call, caller and coordinator (µs)",
            &figures.call_cpu,
            MICROS,
            1,
        ),
        (
            "… ÷ the TLS floor's CPU per round trip, median of the rounds' ratios (issue 30: ≤ 1.5)",
            &figures.call_cpu_in_floors,
            1.0,
            2,
        ),
        (
            "TLS floor: times a thread of either process was given a CPU, per round trip",
            &figures.floor_switches,
            1.0,
            2,
        ),
        (
            "uncontended call: the same, caller and coordinator, per call",
            &figures.call_switches,
            1.0,
            2,
        ),
        (
            "… ÷ the TLS floor's, median of the rounds' ratios",
            &figures.call_switches_in_floors,
            1.0,
            2,
        ),
        (
            "uncontended call on host 1 through its host's coordinator (another process), cluster's coordinator on host 0 (µs)",
            &figures.tier_call,
            MICROS,
            1,
        ),
        (
            "… ÷ the direct call of its round",
            &figures.tier_call_over_direct,
            1.0,
            2,
        ),
        (
            "… CPU time per call, caller, host coordinator and cluster coordinator (µs)",
            &figures.tier_call_cpu,
            MICROS,
            1,
        ),
        (
            "… ÷ the direct call's of its round",
            &figures.tier_call_cpu_over_direct,
            1.0,
            2,
        ),
        (
            "… times a thread of the three was given a CPU, per call",
            &figures.tier_call_switches,
            1.0,
            2,
        ),
    ]);
    let shape = shapes.contended;
    for (system, results) in &figures.contended {
        let name = label(*system);
        let values = |f: fn(&Throughput) -> f64| results.iter().map(f).collect::<Vec<f64>>();
        rows(&[
            (
                &format!(
                    "contended, {} processes on {HOSTS} hosts × {} keys, work {} µs, {name}: completed calls/s",
                    shape.processes,
                    shape.keys,
                    shape.work.as_micros()
                ),
                &values(|r| r.calls_per_second),
                1.0,
                0,
            ),
            (
                &format!("… {name}: work runs/s"),
                &values(|r| r.calls_per_second * r.led_share),
                1.0,
                0,
            ),
            (
                &format!("… {name}: calls that ran the work (%)"),
                &values(|r| r.led_share * 100.0),
                1.0,
                1,
            ),
            (
                &format!("… {name}: call latency p50 (ms)"),
                &values(|r| r.p50),
                MILLIS,
                2,
            ),
            (
                &format!("… {name}: call latency p99 (ms)"),
                &values(|r| r.p99),
                MILLIS,
                2,
            ),
            (
                &format!("… {name}: CPU time per call, all processes (µs)"),
                &values(|r| r.cpu_per_call),
                MICROS,
                1,
            ),
        ]);
        let failed: u64 = results.iter().map(|r| r.failed).sum();
        if failed > 0 {
            row(
                &format!("… {name}: calls that failed, all rounds (their stderr is above)"),
                Some(failed.to_string()),
            );
        }
    }
    rows(&[
        (
            "… single-flight ÷ etcd lock (completed calls/s)",
            &figures.over_etcd,
            1.0,
            2,
        ),
        (
            "… single-flight ÷ Redis (completed calls/s)",
            &figures.over_redis,
            1.0,
            2,
        ),
        (
            "… through the host tier ÷ direct (completed calls/s)",
            &figures.tier_over_direct,
            1.0,
            2,
        ),
        (
            "… through the host tier ÷ direct (CPU time per call, all processes)",
            &figures.tier_cpu_over_direct,
            1.0,
            2,
        ),
    ]);
    failover_rows(shapes.failover, &figures.kills, row);
    host_failover_rows(&figures.host_kills, shapes.failover.grace, row);
    row(
        &format!(
            "coordinator's resident set per idle connected client, {clients} TLS clients (KiB)"
        ),
        shown(&figures.memory, 1024.0, 1),
    );
    if let Some(reason) = &figures.memory_failed {
        row("… not measured in a round", Some(reason.clone()));
    }
}

/// The failover rows: p50 and max over every kill of the run.
fn failover_rows(
    shape: cluster_failover::Shape,
    kills: &[Kill],
    row: impl Fn(&str, Option<String>),
) {
    if kills.is_empty() {
        return;
    }
    let (ttl, grace) = (shape.ttl.as_nanos() as f64, shape.grace.as_nanos() as f64);
    let spread = p50_and_max;
    let of = |f: fn(&Kill) -> f64| kills.iter().map(f).collect::<Vec<f64>>();
    let settings = format!(
        "TTL {} ms, grace {} ms, {} kills",
        shape.ttl.as_millis(),
        shape.grace.as_millis(),
        kills.len()
    );
    row(
        &format!(
            "failover after a host's death ({settings}): kill → the flight's waiters answered, p50 / max (ms)"
        ),
        spread(of(|k| k.answered), MILLIS, 0),
    );
    row(
        "… the rest: that − TTL (the window does not delay them), p50 / max (ms)",
        spread(
            of(|k| k.answered).into_iter().map(|a| a - ttl).collect(),
            MILLIS,
            0,
        ),
    );
    row(
        "kill → next successful lead, p50 / max (ms)",
        spread(of(|k| k.first_lead), MILLIS, 0),
    );
    row(
        "… the rest: that − TTL − grace, p50 / max (ms)",
        spread(
            of(|k| k.first_lead)
                .into_iter()
                .map(|l| l - ttl - grace)
                .collect(),
            MILLIS,
            0,
        ),
    );
    row(
        "seen in etcd: kill → the dead coordinator's key deleted (its lease ended), p50 / max (ms)",
        spread(of(|k| k.expired), MILLIS, 0),
    );
    row(
        "… deleted → the next term's key put, p50 / max (ms)",
        spread(of(|k| k.elected - k.expired), MILLIS, 1),
    );
    row(
        "… next term → the waiters answered, p50 / max (ms)",
        spread(of(|k| k.answered - k.elected), MILLIS, 1),
    );
    row(
        "… next term → next lead, less the grace window, p50 / max (ms)",
        spread(
            of(|k| k.first_lead - k.elected)
                .into_iter()
                .map(|l| l - grace)
                .collect(),
            MILLIS,
            1,
        ),
    );
    let lost: usize = kills.iter().map(|k| k.not_answered).sum();
    row(
        "joiners through a kill that did not get the leader's value",
        Some(lost.to_string()),
    );
}

/// `p50 / max` of the finite `values`, divided by `scale`, with `digits`
/// decimals; `None` when none is finite.
fn p50_and_max(values: Vec<f64>, scale: f64, digits: usize) -> Option<String> {
    let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    (!values.is_empty()).then(|| {
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{:.digits$} / {:.digits$}",
            percentile(&values, 50.0) / scale,
            max / scale
        )
    })
}

/// The rows of a host coordinator's death: p50 and max over every kill, and
/// how many kills' next lead waited out the relay window (`window`, the
/// cluster's grace window's length, SPEC.md §18.2): those whose load's
/// `lead` was on its way through the host coordinator when it died, so
/// that its flight was orphaned with no leader (§18.4).
fn host_failover_rows(kills: &[HostKill], window: Duration, row: impl Fn(&str, Option<String>)) {
    if kills.is_empty() {
        return;
    }
    let spread = |values| p50_and_max(values, MILLIS, 1);
    let of = |f: fn(&HostKill) -> f64| kills.iter().map(f).collect::<Vec<f64>>();
    row(
        &format!(
            "host coordinator killed (kill -9, {} kills) while a leader on its host runs: kill → the flight's joiners on both hosts answered, p50 / max (ms)",
            kills.len()
        ),
        spread(of(|k| k.answered)),
    );
    row(
        "… kill → the next flight led on that host, p50 / max (ms)",
        spread(of(|k| k.next_lead)),
    );
    let window = window.as_nanos() as f64;
    let waited = kills.iter().filter(|k| k.next_lead >= window).count();
    row(
        &format!(
            "… of those, kills whose next lead waited out the relay window ({} ms: a `lead` lost with the host coordinator, SPEC.md §18.4)",
            window / MILLIS
        ),
        Some(format!("{waited} of {}", kills.len())),
    );
    let lost: usize = kills.iter().map(|k| k.not_answered).sum();
    row(
        "… joiners that did not get the leader's value",
        Some(lost.to_string()),
    );
}

// ----------------------------------------------------------------- workers

/// `worker cluster-calls N PIDS`: N timed uncontended calls after a
/// warm-up; prints `result MEDIAN_NS CPU_NS`, the CPU time per call its own
/// and that of the processes PIDS (comma-separated: the coordinator, and a
/// host coordinator in between).
pub fn calls(count: &str, peers: &str) {
    let count: usize = count.parse().expect("a number of calls");
    let peers: Vec<u32> = peers
        .split(',')
        .map(|pid| pid.parse().expect("a process id"))
        .collect();
    let flights = lab::open_from_env();
    let runtime = crate::process::runtime();
    let timed = runtime.block_on(async {
        let timed = crate::uncontended::timed_calls(&flights, count, &peers).await;
        flights.close().await;
        timed
    });
    say(format!("result {}", timed.show()));
}
