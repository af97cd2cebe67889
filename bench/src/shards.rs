//! The shards' rows of BENCHMARKS.md ("Shards (issue 47)"), on a lab of
//! four hosts (`crate::lab`) with etcd in a fifth namespace:
//!
//! - `cluster-shards`: the contended item with distinct keys (every call
//!   leads and lands, so that the coordinating work is per call) on a
//!   cluster of S = 1, 2 and 4 shards, side by side in each round, each S
//!   on a fresh cluster (S is fixed when a cluster is first used, SPEC.md
//!   §19.2): calls/s, CPU per call, and the CPU per call of the busiest
//!   process that holds a shard's term;
//! - `cluster-shard-failover`: S = 4, the host coordinating shard 0 killed
//!   while calls of every shard's keys run on the other hosts: what the
//!   calls of the untouched shards see between the kill and shard 0's next
//!   term, and when shard 0 leads again.
//!
//! The callers reach the cluster directly (`Cluster::direct`), one client
//! per shard (§19.4): through the host tier every host's calls would pass
//! its one host coordinator whatever S is, a relaying work that shards do
//! not split (BENCHMARKS.md says more). Each host runs one dedicated
//! coordinator process, which makes no call but its warm-up, started at
//! once before any caller: through the host tier, so that it is its
//! host's candidate for every shard's term and §19.3's spread places the
//! S terms on S hosts (a direct process advertises another port for each
//! shard, and the spread counts each as a host of its own: BENCHMARKS.md,
//! "Shards (issue 47)"). No caller uses a host directory, so these
//! processes relay nothing: their CPU is the shards' coordinating. The
//! benchmark checks the placement (each shard's status names its holder)
//! and takes another cluster when two terms share a host: a figure of the
//! coordinating work must not depend on where the terms happened to land.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use single_flight::{ShardCount, Status};

use crate::cluster_failover::Watch;
use crate::contended::{self, Placement, System, Throughput};
use crate::lab::{self, Lab, Settings};
use crate::process::{
    self, Scratch, WORKER_PATIENCE, Worker, ready_then_go, say, stdin_lines, wall_nanos,
};
use crate::stats::{MICROS, MILLIS, percentile, shown};

/// The hosts of the shards' items: as many as the most shards measured,
/// so that each shard's term has a host of its own.
const HOSTS: usize = 4;

/// The shard counts measured side by side, each on a fresh cluster.
const SHARD_COUNTS: [u32; 3] = [1, 2, 4];

/// The failover item's shards: one per host.
const FAILOVER_SHARDS: u32 = 4;

/// The shard whose coordinator's host the failover item kills.
const KILLED_SHARD: u32 = 0;

/// Clusters tried for one measurement before the benchmark gives up on
/// the spread (SPEC.md §19.3) placing S terms on S hosts: its guarantee
/// holds for campaigns that see each other's keys, which a loaded machine
/// can delay past a window.
const PLACEMENT_ATTEMPTS: usize = 3;

/// Caller threads per shard of each loading process in the failover item,
/// each calling fresh keys of its shard only, so that the threads of the
/// untouched shards are never held by a call of the killed one.
const FAILOVER_THREADS_PER_SHARD: usize = 2;

/// The work of each call in the failover item (as the other failovers').
const FAILOVER_WORK: Duration = Duration::from_millis(1);

/// How long the calls run before the kill: long enough that every loader
/// is past its start and the window compared below is steady.
const BEFORE_KILL: Duration = Duration::from_secs(2);

/// The window before the kill that the calls during the stall are
/// compared with: the last second of [`BEFORE_KILL`].
const COMPARED_BEFORE: Duration = Duration::from_secs(1);

/// How long the calls run after shard 0's next term and grace window, so
/// that its first lead of the next term is among them.
const AFTER_FAILOVER: Duration = Duration::from_secs(1);

/// One S of one round of `cluster-shards`.
struct Sharded {
    result: Throughput,
    /// The CPU per call of the process that holds each shard's term, in
    /// shard order (ns).
    coordinators: Vec<f64>,
    /// Clusters given up before this one ([`Placed::retried`]).
    retried: usize,
}

impl Sharded {
    /// The CPU per call of the busiest process that holds a term (ns).
    fn busiest(&self) -> f64 {
        self.coordinators.iter().copied().fold(0.0, f64::max)
    }

    /// Every term holder's CPU per call together: the coordinating work of
    /// a call, wherever it was done (ns).
    fn together(&self) -> f64 {
        self.coordinators.iter().sum()
    }

    /// The times a thread of any term holder was given a CPU, per call.
    fn switches(&self) -> f64 {
        self.result.watched_switches_per_call.iter().sum()
    }

    /// The least busy term holder's CPU per call ÷ the busiest's: 1 when
    /// the coordinating work splits evenly.
    fn evenness(&self) -> f64 {
        let least = self
            .coordinators
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        least / self.busiest()
    }
}

/// One kill of `cluster-shard-failover`, times in nanoseconds after it.
struct ShardKill {
    /// shard 0's next term was put in etcd.
    elected: f64,
    /// A call of shard 0 led again (its work began) in the next term.
    next_lead: f64,
    /// The untouched shards' calls answered between the kill and the next
    /// term, per second, and in the window before the kill.
    rate_during: f64,
    rate_before: f64,
    /// Their latency percentiles in both (ns).
    p50_during: f64,
    p99_during: f64,
    p50_before: f64,
    p99_before: f64,
    /// Calls that ended otherwise than with a value: of the untouched
    /// shards, and of the killed one.
    failed_untouched: u64,
    failed_killed: u64,
    /// Clusters given up before this one ([`Placed::retried`]).
    retried: usize,
}

/// The figures of the shards' items, per round.
#[derive(Default)]
struct Figures {
    /// For each S of [`SHARD_COUNTS`], each round's run.
    sharded: Vec<Vec<Sharded>>,
    /// For each S but the first: per round, its busiest term holder's CPU
    /// per call ÷ S = 1's, and its calls/s ÷ S = 1's.
    busiest_over_one: Vec<Vec<f64>>,
    rate_over_one: Vec<Vec<f64>>,
    kills: Vec<ShardKill>,
}

/// Runs the shards' items that `config` asks for and prints their section
/// of the report.
pub fn run(config: &crate::Config) {
    let items: Vec<&str> = crate::SHARD_ITEMS
        .into_iter()
        .filter(|i| config.runs(i))
        .collect();
    let Some(lab) = Lab::section("Shards", &items, HOSTS) else {
        return;
    };
    let addresses: Vec<String> = (0..HOSTS).map(|h| lab.address(h).to_string()).collect();
    println!(
        "- hosts: {HOSTS} network namespaces on one bridge ({}); etcd in another ({}), {}, one member",
        addresses.join(", "),
        lab.endpoints().join(","),
        Lab::etcd_version(),
    );
    println!(
        "- callers direct (one client per shard); on each host a coordinator process of its own, its host's coordinator (the tier), which makes no call: the S terms are on S of them"
    );
    println!("- load average before: {}", crate::load_average());
    println!();
    let shape = contended::Shape {
        distinct: true,
        keys: config.shard_threads.unwrap_or(config.contended.keys),
        ..config.contended
    };
    let mut figures = Figures {
        sharded: SHARD_COUNTS.iter().map(|_| Vec::new()).collect(),
        busiest_over_one: SHARD_COUNTS[1..].iter().map(|_| Vec::new()).collect(),
        rate_over_one: SHARD_COUNTS[1..].iter().map(|_| Vec::new()).collect(),
        kills: Vec::new(),
    };
    let ttl = config
        .cluster
        .ttl
        .unwrap_or(single_flight::_internal::election::etcd::DEFAULT_TTL);
    let grace = config
        .cluster
        .grace
        .unwrap_or(single_flight::DEFAULT_CLUSTER_GRACE_WINDOW);
    for round in 1..=config.rounds {
        eprintln!("shards round {round} of {}", config.rounds);
        if config.runs("cluster-shards") {
            // Every other round in the opposite order, so that a drift of
            // the machine's load within a round favours no S.
            let mut this_round: Vec<(u32, Sharded)> = Vec::new();
            for index in 0..SHARD_COUNTS.len() {
                let index = match round % 2 {
                    0 => SHARD_COUNTS.len() - 1 - index,
                    _ => index,
                };
                let shards = SHARD_COUNTS[index];
                this_round.push((shards, sharded(&lab, round, shards, shape)));
            }
            this_round.sort_by_key(|(shards, _)| *shards);
            let this_round: Vec<Sharded> = this_round.into_iter().map(|(_, run)| run).collect();
            let one = &this_round[0];
            for (index, other) in this_round[1..].iter().enumerate() {
                figures.busiest_over_one[index].push(other.busiest() / one.busiest());
                figures.rate_over_one[index]
                    .push(other.result.calls_per_second / one.result.calls_per_second);
            }
            for (runs, run) in figures.sharded.iter_mut().zip(this_round) {
                runs.push(run);
            }
        }
        if config.runs("cluster-shard-failover") {
            for kill in 0..config.cluster.kills {
                let name = format!("bench-shard-failover-{round}-{kill}");
                figures.kills.push(failover(&lab, &name, ttl, grace));
            }
        }
    }
    report(shape, ttl, grace, &figures);
    println!();
    println!("- load average after: {}", crate::load_average());
}

/// A cluster whose S terms are held by S different processes, one on
/// each of S hosts.
struct Placed {
    settings: Settings,
    /// The dedicated coordinator process of each host, in host order.
    workers: Vec<Worker>,
    /// Each shard's status, in shard order.
    statuses: Vec<Status>,
    /// Clusters given up before this one because two shards' terms were
    /// on one host.
    retried: usize,
}

/// Starts the dedicated coordinator process of each host at once (each
/// its host's coordinator in the host tier, SPEC.md §18), in a
/// cluster `settings(name)` for `name` = `base`, `base-a2`, … until the
/// spread places every shard's term on a host of its own, at most
/// [`PLACEMENT_ATTEMPTS`] times.
fn placed(lab: &Lab, base: &str, settings: impl Fn(&str) -> Settings) -> Placed {
    for attempt in 1..=PLACEMENT_ATTEMPTS {
        let name = match attempt {
            1 => base.to_owned(),
            n => format!("{base}-a{n}"),
        };
        let settings = settings(&name);
        // Through the host tier (the module's comment says why); the
        // callers are direct.
        let tiered = Settings {
            tier: true,
            ..settings.clone()
        };
        let workers: Vec<Worker> = (0..lab.hosts())
            .map(|host| lab.worker(host, &tiered, &["cluster-idle"]))
            .collect();
        for worker in &workers {
            worker.expect("READY");
        }
        let statuses = lab.shard_statuses_when(&settings, |_, _| true);
        let mut hosts: Vec<usize> = statuses.iter().map(|s| lab.host_of(s)).collect();
        hosts.sort_unstable();
        hosts.dedup();
        if hosts.len() == statuses.len() {
            return Placed {
                settings,
                workers,
                statuses,
                retried: attempt - 1,
            };
        }
        eprintln!(
            "cluster {}: two shards' terms on one host ({:?}); trying another cluster",
            settings.cluster,
            statuses
                .iter()
                .map(|s| s.address.clone())
                .collect::<Vec<_>>()
        );
    }
    panic!(
        "in {PLACEMENT_ATTEMPTS} clusters in a row the spread (SPEC.md §19.3) left two shards' terms on one host"
    );
}

/// One S of a round of `cluster-shards`: the contended shape with
/// distinct keys, its callers spread evenly over the hosts.
fn sharded(lab: &Lab, round: usize, shards: u32, shape: contended::Shape) -> Sharded {
    let Placed {
        settings,
        workers,
        statuses,
        retried,
    } = placed(lab, &format!("bench-shards-{round}-s{shards}"), |name| {
        Settings {
            shards,
            ..Settings::new(name)
        }
    });
    let spawn = |index: usize, args: &[&str]| -> Worker {
        lab.worker(index * lab.hosts() / shape.processes, &settings, args)
    };
    let placement = Placement {
        spawn: &spawn,
        services: lab
            .etcd_pids()
            .into_iter()
            .chain(workers.iter().map(Worker::pid))
            .collect(),
        watched: statuses.iter().map(|status| status.pid).collect(),
    };
    let result = contended::measure_on(System::Cluster, shape, None, &placement);
    Sharded {
        coordinators: result.watched_cpu_per_call.clone(),
        result,
        retried,
    }
}

/// One kill of `cluster-shard-failover` in a cluster of its own.
fn failover(lab: &Lab, name: &str, ttl: Duration, grace: Duration) -> ShardKill {
    let Placed {
        settings,
        mut workers,
        statuses,
        retried,
    } = placed(lab, name, |name| Settings {
        shards: FAILOVER_SHARDS,
        ttl: Some(ttl),
        grace,
        ..Settings::new(name)
    });
    let killed_host = lab.host_of(&statuses[KILLED_SHARD as usize]);
    let watch = Watch::shard(lab, &settings.cluster, KILLED_SHARD as usize);
    let scratch = Scratch::new("shard-failover");
    let threads = FAILOVER_THREADS_PER_SHARD.to_string();
    let work = FAILOVER_WORK.as_micros().to_string();
    // The loads on every host but the one that dies.
    let mut loads: Vec<Worker> = (0..lab.hosts())
        .filter(|&host| host != killed_host)
        .map(|host| {
            let file = scratch.join(&format!("calls.{host}"));
            let file = file.to_str().expect("a UTF-8 temp dir").to_owned();
            lab.worker(
                host,
                &settings,
                &["cluster-shard-load", &threads, &work, &file],
            )
            .ready()
        })
        .collect();
    for load in &mut loads {
        load.send("go");
    }
    std::thread::sleep(BEFORE_KILL);
    watch.forget();
    let killed_at = wall_nanos();
    lab.kill_host(killed_host);
    workers[killed_host].kill();
    let (_, elected) = watch.expiry_and_election(killed_at);
    // The next term's grace window, then a while for its first leads.
    std::thread::sleep(grace + AFTER_FAILOVER);
    let mut calls = Vec::new();
    for load in &mut loads {
        load.send("stop");
    }
    for load in &loads {
        let file = load.expect("result");
        let bytes = std::fs::read(&file).expect("the load's file of calls");
        calls.extend(bytes.chunks_exact(CALL_BYTES).map(Call::decode));
    }
    let since = |at: u64| at.saturating_sub(killed_at) as f64;
    // A lead granted before the kill may start its work just after it:
    // the next term's leads are the ones after its key was put.
    let next_lead = calls
        .iter()
        .filter(|call| call.shard == KILLED_SHARD && call.led_at > elected)
        .map(|call| call.led_at)
        .min()
        .map_or(f64::NAN, since);
    let untouched = |from: u64, to: u64| -> Vec<f64> {
        calls
            .iter()
            .filter(|call| call.shard != KILLED_SHARD && call.answered)
            .filter(|call| (from..to).contains(&call.end))
            .map(|call| call.end.saturating_sub(call.begin) as f64)
            .collect()
    };
    let during = untouched(killed_at, elected);
    let compared = COMPARED_BEFORE.as_nanos() as u64;
    let before = untouched(killed_at - compared, killed_at);
    let rate = |latencies: &[f64], nanos: u64| latencies.len() as f64 / (nanos as f64 / 1e9);
    let p = |latencies: &[f64], p| {
        if latencies.is_empty() {
            f64::NAN
        } else {
            percentile(latencies, p)
        }
    };
    let failed = |killed: bool| {
        calls
            .iter()
            .filter(|call| (call.shard == KILLED_SHARD) == killed && !call.answered)
            .count() as u64
    };
    ShardKill {
        elected: since(elected),
        next_lead,
        rate_during: rate(&during, elected.saturating_sub(killed_at)),
        rate_before: rate(&before, compared),
        p50_during: p(&during, 50.0),
        p99_during: p(&during, 99.0),
        p50_before: p(&before, 50.0),
        p99_before: p(&before, 99.0),
        failed_untouched: failed(false),
        failed_killed: failed(true),
        retried,
    }
}

fn report(shape: contended::Shape, ttl: Duration, grace: Duration, figures: &Figures) {
    let row = |figure: &str, value: Option<String>| {
        if let Some(value) = value {
            println!("| {figure} | {value} |");
        }
    };
    println!("| figure | median (range of the rounds) |");
    println!("|---|---|");
    for (&shards, runs) in SHARD_COUNTS.iter().zip(&figures.sharded) {
        let of = |f: &dyn Fn(&Sharded) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        row(
            &format!(
                "distinct keys, {} processes on {HOSTS} hosts × {} threads, work {} µs, S = {shards}: completed calls/s",
                shape.processes,
                shape.keys,
                shape.work.as_micros()
            ),
            shown(&of(&|r| r.result.calls_per_second), 1.0, 0),
        );
        row(
            &format!("… S = {shards}: call latency p50 / p99 (ms)"),
            shown(&of(&|r| r.result.p50), MILLIS, 2)
                .zip(shown(&of(&|r| r.result.p99), MILLIS, 2))
                .map(|(p50, p99)| format!("{p50} / {p99}")),
        );
        row(
            &format!("… S = {shards}: CPU time per call, all processes with etcd (µs)"),
            shown(&of(&|r| r.result.cpu_per_call), MICROS, 1),
        );
        row(
            &format!(
                "… S = {shards}: the busiest process holding a shard's term: its CPU time ÷ all calls (µs)"
            ),
            shown(&of(&|r| r.busiest()), MICROS, 1),
        );
        if shards > 1 {
            row(
                &format!("… S = {shards}: the least busy term holder's ÷ the busiest's"),
                shown(&of(&|r| r.evenness()), 1.0, 2),
            );
            row(
                &format!("… S = {shards}: every term holder's CPU time together ÷ all calls (µs)"),
                shown(&of(&|r| r.together()), MICROS, 1),
            );
        }
        row(
            &format!(
                "… S = {shards}: times a thread of a term holder was given a CPU, all of them together, per call"
            ),
            shown(&of(&|r| r.switches()), 1.0, 2),
        );
        let failed: u64 = runs.iter().map(|r| r.result.failed).sum();
        if failed > 0 {
            row(
                &format!("… S = {shards}: calls that failed, all rounds (their stderr is above)"),
                Some(failed.to_string()),
            );
        }
    }
    let retried: usize = figures
        .sharded
        .iter()
        .flatten()
        .map(|r| r.retried)
        .chain(figures.kills.iter().map(|k| k.retried))
        .sum();
    if retried > 0 {
        row(
            "clusters given up because two shards' terms were on one host (SPEC.md §19.3's spread), all rounds",
            Some(retried.to_string()),
        );
    }
    for (index, &shards) in SHARD_COUNTS[1..].iter().enumerate() {
        let target = if shards == 4 {
            " (target ≤ 0.35)"
        } else {
            ""
        };
        row(
            &format!(
                "S = {shards} ÷ S = 1, within each round: the busiest term holder's CPU per call{target}"
            ),
            shown(&figures.busiest_over_one[index], 1.0, 2),
        );
        let target = if shards == 4 { " (target ≥ 1)" } else { "" };
        row(
            &format!("S = {shards} ÷ S = 1, within each round: completed calls/s{target}"),
            shown(&figures.rate_over_one[index], 1.0, 2),
        );
    }
    let kills = &figures.kills;
    if kills.is_empty() {
        return;
    }
    let of = |f: fn(&ShardKill) -> f64| {
        kills
            .iter()
            .map(f)
            .filter(|v| v.is_finite())
            .collect::<Vec<f64>>()
    };
    row(
        &format!(
            "S = {FAILOVER_SHARDS}, shard {KILLED_SHARD}'s host killed (TTL {} ms, grace {} ms, {} kills): kill → its next term put in etcd (ms)",
            ttl.as_millis(),
            grace.as_millis(),
            kills.len()
        ),
        shown(&of(|k| k.elected), MILLIS, 0),
    );
    row(
        &format!("… kill → a call of shard {KILLED_SHARD} leads again (ms)"),
        shown(&of(|k| k.next_lead), MILLIS, 0),
    );
    row(
        &format!(
            "… the other shards' calls answered per second, kill → next term; in the {} ms before the kill",
            COMPARED_BEFORE.as_millis()
        ),
        shown(&of(|k| k.rate_during), 1.0, 0)
            .zip(shown(&of(|k| k.rate_before), 1.0, 0))
            .map(|(during, before)| format!("{during}; {before}")),
    );
    row(
        "… ÷, within each kill",
        shown(&of(|k| k.rate_during / k.rate_before), 1.0, 2),
    );
    row(
        "… their latency p50 / p99, kill → next term (ms)",
        shown(&of(|k| k.p50_during), MILLIS, 2)
            .zip(shown(&of(|k| k.p99_during), MILLIS, 2))
            .map(|(p50, p99)| format!("{p50} / {p99}")),
    );
    row(
        "… before the kill (ms)",
        shown(&of(|k| k.p50_before), MILLIS, 2)
            .zip(shown(&of(|k| k.p99_before), MILLIS, 2))
            .map(|(p50, p99)| format!("{p50} / {p99}")),
    );
    let failed_untouched: u64 = kills.iter().map(|k| k.failed_untouched).sum();
    let failed_killed: u64 = kills.iter().map(|k| k.failed_killed).sum();
    row(
        &format!(
            "… calls that ended with an error, all kills: the other shards'; shard {KILLED_SHARD}'s"
        ),
        Some(format!("{failed_untouched}; {failed_killed}")),
    );
}

// ----------------------------------------------------------------- workers

/// One call of the failover's load: its shard, when it began, when its
/// work began (0: it did not lead), when it ended, and whether it was
/// answered with a value; wall nanoseconds, as 5 little-endian u64.
struct Call {
    shard: u32,
    begin: u64,
    led_at: u64,
    end: u64,
    answered: bool,
}

const CALL_BYTES: usize = 5 * 8;

impl Call {
    fn encode(&self, bytes: &mut Vec<u8>) {
        for field in [
            u64::from(self.shard),
            self.begin,
            self.led_at,
            self.end,
            u64::from(self.answered),
        ] {
            bytes.extend(field.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Call {
        let field =
            |at: usize| u64::from_le_bytes(bytes[at * 8..at * 8 + 8].try_into().expect("8 bytes"));
        Call {
            shard: field(0) as u32,
            begin: field(1),
            led_at: field(2),
            end: field(3),
            answered: field(4) == 1,
        }
    }
}

/// `worker cluster-shard-load THREADS WORK_US FILE`: on the line `go`,
/// THREADS threads per shard of the cluster call fresh keys of their shard
/// in a loop, each call's work WORK_US; on `stop`, writes every call
/// (`Call`) to FILE and says `result FILE`, and stays.
pub fn shard_load(threads: &str, work: &str, file: &str) {
    let flights = lab::open_from_env();
    let place = lab::Place::from_env();
    let threads: usize = threads.parse().expect("a number of threads");
    let work = Duration::from_micros(work.parse().expect("work in microseconds"));
    let shards = place.shards;
    let lines = stdin_lines();
    ready_then_go(&lines);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(shards as usize * threads));
    let callers: Vec<_> = (0..shards)
        .flat_map(|shard| (0..threads).map(move |thread| (shard, thread)))
        .map(|(shard, thread)| {
            let flights = flights.clone();
            let stop = stop.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                let count = ShardCount::new(u64::from(shards)).expect("a valid shard count");
                let runtime = process::runtime();
                let pid = std::process::id();
                let mut calls = Vec::new();
                started.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = loop {
                        n += 1;
                        let key = format!("load-{pid}-{shard}-{thread}-{n}");
                        if count.of_bytes(key.as_bytes()).index() == shard {
                            break key;
                        }
                    };
                    let led_at = Arc::new(std::sync::atomic::AtomicU64::new(0));
                    let begin = wall_nanos();
                    let leading = led_at.clone();
                    let result =
                        runtime.block_on(flights.call(&key).deadline(WORKER_PATIENCE).run(
                            move |_token| async move {
                                leading.store(wall_nanos(), Ordering::Relaxed);
                                tokio::time::sleep(work).await;
                                Ok::<_, std::io::Error>(0)
                            },
                        ));
                    let end = wall_nanos();
                    let answered = match result {
                        Ok(_) => true,
                        Err(error) => {
                            eprintln!("a call of shard {shard} through the kill failed: {error}");
                            false
                        }
                    };
                    calls.push(Call {
                        shard,
                        begin,
                        led_at: led_at.load(Ordering::Relaxed),
                        end,
                        answered,
                    });
                }
                calls
            })
        })
        .collect();
    loop {
        match lines.recv().as_deref() {
            Ok("stop") => break,
            Ok(_) => continue,
            Err(_) => return,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut bytes = Vec::new();
    for caller in callers {
        for call in caller.join().expect("a caller thread") {
            call.encode(&mut bytes);
        }
    }
    std::fs::write(file, bytes).expect("write the file of calls");
    say(format!("result {file}"));
    while lines.recv().is_ok() {}
}
