//! The runner: a world of hosts and processes, each process a shipped
//! `SingleFlight` over the simulated election and transport, driven by a
//! seeded workload and seeded faults, and the checks of the chaos
//! harness's must-be-zero rows (RELIABILITY.md) run over what happened.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use single_flight::_internal::shell::mutant::{Mutant, Seeded};
use single_flight::_internal::shell::{
    OpenCluster, Settings, open_sharded_on, open_sharded_tiered_on,
};
use single_flight::{Epoch, FencingToken, Role, RunError, ShardCount, SingleFlight};
use single_flight_core::protocol::HostId as RelayHost;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::election::{CALLER, Clock, Group, STEP_DOWN_MARGIN, SimElection, Spreader, Store, TTL};
use crate::host::{HostDirectory, HostElection};
use crate::network::{Address, HostId, HostTransport, Net, ProcessId, STORE, SimTransport};
use crate::trace::Trace;

/// The most election requests one process may make in one simulated
/// second: its polls every 100 ms, a campaign's reads, grant and
/// transaction, and its renewals come to a dozen; a retry on every wake-up
/// (the shell's bug 3) makes thousands.
pub const MAX_REQUESTS_PER_SECOND: u32 = 40;

/// How long after the last fault heals every call on a live host must
/// succeed: a lease's TTL for a dead coordinator's key to expire, the
/// campaign's spread, a grace window and a connect timeout, with room.
pub const SETTLE: Duration = Duration::from_secs(15);

/// How many calls a process on an untouched host must make before the
/// check that some were answered applies: a single call may fall in a
/// failover's pause.
const MIN_CALLS_FOR_LIVENESS: u32 = 4;

/// How many new terms of its shard a call through the host tier must
/// outlast without fault of its own host (SPEC.md §18.4): one failover's
/// pause fits in a deadline, two back to back may not.
const FAILOVERS_A_CALL_OUTLASTS: usize = 2;

/// How much later than its deadline a call may end: none, in simulated
/// time, but for the latency of the last message.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// How long past its last planned event a run may go before it counts as
/// hung: every call has a deadline, and a close its own.
const HANG_AFTER: Duration = Duration::from_secs(120);

/// Steps a process's election seed from one opening of the cluster to the
/// next (a host coordinator opens it at each of its terms): the golden
/// ratio's odd 64-bit multiple, so that the openings' seeds are far apart.
const OPENING_SEED_STEP: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixed into a scenario's seed for the draw of the host coordinators it
/// kills, so that the draw leaves the workload's stream as it was.
const KILLS_SEED: u64 = 0x6b69_6c6c;

/// One fault.
#[derive(Clone, Debug)]
pub enum Fault {
    /// The host of the current coordinator is cut off for good.
    CrashCoordinator,
    /// A host is cut off for good.
    Crash(HostId),
    /// A host is cut off from every other and the store for a while.
    Partition(HostId, Duration),
    /// A host is cut off from the election's store for a while.
    PartitionFromStore(HostId, Duration),
    /// The current coordinator's host and another are cut off from each
    /// other for a while (both ways).
    PartitionFromCoordinator(HostId, Duration),
    /// One direction between two hosts is cut for a while.
    OneWay(HostId, HostId, Duration),
    /// The current coordinator's host is stopped (its links held) for a
    /// while: past its lease when long enough.
    PauseCoordinator(Duration),
    /// A direction is paced to a bandwidth for a while (a slow reader).
    Slow(HostId, HostId, u64, Duration),
    /// A direction's packets are delayed for a while.
    Delay(HostId, HostId, Duration, Duration),
    /// Connections to the current coordinator that fail their handshake.
    JunkBurst(u32),
    /// The election's store refuses every request for a while, as etcd
    /// does when its members are down (SPEC.md §13.5, §14.6): each is
    /// answered at once, with a refusal, rather than never.
    StoreDown(Duration),
    /// The host tier's coordinator of a host, whichever process holds its
    /// host's claim now, is killed (kill -9): its calls and works end, its
    /// connections close both ways, its claim is freed, and it never comes
    /// back (SPEC.md §12.7, §18.4); its other tasks, cut off from
    /// everything, wind down without effect. Nothing when nobody holds the
    /// claim.
    KillHostCoordinator(HostId),
}

impl Fault {
    /// Whether it takes a host out of the cluster (so that its calls, and
    /// its flights' joiners, may fail); a slow or delayed link or junk
    /// peers take none out.
    fn takes_out(&self) -> bool {
        // A killed host coordinator takes out its own calls only; the other
        // processes of its host must be answered (SPEC.md §18.4).
        !matches!(
            self,
            Fault::Slow(..)
                | Fault::Delay(..)
                | Fault::JunkBurst(_)
                | Fault::KillHostCoordinator(_)
        )
    }
}

/// Which faults a run has.
#[derive(Clone, Debug)]
pub enum Faults {
    /// This many, drawn from the seed, between 1 s and `until`.
    Random { count: u32, until: Duration },
    /// These, at these times.
    Script(Vec<(Duration, Fault)>),
}

/// What one run simulates.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    /// Hosts of processes (the store has one more).
    pub hosts: u32,
    pub processes: u32,
    pub keys: u32,
    pub calls_per_process: u32,
    /// The time over which the processes start their calls.
    pub calls_over: Duration,
    /// How long a work takes: between these.
    pub work: (Duration, Duration),
    /// The size of every value.
    pub value_bytes: usize,
    pub deadline: Duration,
    pub grace_window: Duration,
    pub poll_interval: Duration,
    pub faults: Faults,
    /// The hosts' clock rates are drawn from this range.
    pub clock_rates: (f64, f64),
    /// The shell's seeded bug, in these processes (all when empty).
    pub mutant: Option<(Mutant, Vec<u32>)>,
    /// Keep the trace's lines (for the determinism test's report).
    pub keep_trace: bool,
    /// Whether a process closes as soon as its own calls are done, while
    /// others still call; otherwise every process closes once all are
    /// done. Closing mid-traffic once lost joiners' outcomes when a
    /// coordinator closed inside its own grace window (RELIABILITY.md,
    /// "Found by the simulation"; SPEC.md §10.4).
    pub close_mid_traffic: bool,
    /// Process `i` opens at `i` times this: a scripted run lets process 0
    /// become the first coordinator.
    pub stagger: Duration,
    /// The calls, instead of drawn ones: process, when, key, how long its
    /// work takes.
    pub script: Option<Vec<(u32, Duration, String, Duration)>>,
    /// The host tier (SPEC.md §18): the processes of a host meet in its
    /// host directory (`crate::host`), and only its coordinator reaches the
    /// cluster, relaying for the host. Otherwise every process is its own
    /// client of the cluster (`--direct`).
    pub tier: bool,
    /// The cluster's shards (SPEC.md §19): each process keeps one client
    /// per shard, each host one host directory per shard, and each shard
    /// has its own term in the store. 1 is a cluster of §14 unchanged.
    pub shards: u32,
    /// The normal latency of a call (RELIABILITY.md, "Simulation"): when
    /// set, a call of a shard whose coordinator no fault took out, on a
    /// host no fault touched, whose flight's leaders no fault touched,
    /// must be answered with at most this latency — its time not covered
    /// by the work that made its value (`latency`). Measured by the run
    /// of the same scenario without faults.
    pub normal_latency: Option<Duration>,
}

impl Scenario {
    /// A small cluster under random faults, the shape of the fresh-seed
    /// runs in CI (through the host tier in a quarter of them, `tier`).
    pub fn chaos(seed: u64) -> Scenario {
        Scenario {
            seed,
            hosts: 5,
            processes: 15,
            keys: 4,
            calls_per_process: 12,
            calls_over: Duration::from_secs(40),
            work: (Duration::from_millis(50), Duration::from_millis(1500)),
            value_bytes: 64,
            deadline: Duration::from_secs(20),
            grace_window: Duration::from_secs(2),
            poll_interval: Duration::from_millis(100),
            faults: Faults::Random {
                count: 6,
                until: Duration::from_secs(25),
            },
            clock_rates: (0.9, 1.1),
            mutant: None,
            keep_trace: false,
            close_mid_traffic: false,
            stagger: Duration::ZERO,
            script: None,
            tier: false,
            shards: 1,
            normal_latency: None,
        }
    }

    /// A term that ends while a landed value of megabytes is still on its
    /// way to a joiner over a slow link (SPEC.md §10.4): process 0
    /// coordinates and leads, process 1 joins over a link of 1 MiB/s, and
    /// process 0 closes as soon as its call returns. Bug 6 cuts the value
    /// off.
    pub fn end_of_term_flush(seed: u64) -> Scenario {
        let second = Duration::from_secs(1);
        Scenario {
            hosts: 2,
            processes: 2,
            keys: 1,
            calls_per_process: 1,
            value_bytes: 3 << 20,
            faults: Faults::Script(vec![(
                Duration::ZERO,
                Fault::Slow(1, 2, 1 << 20, Duration::from_secs(600)),
            )]),
            close_mid_traffic: true,
            stagger: second,
            script: Some(vec![
                (0, 2 * second, "big".to_owned(), second),
                (1, 2 * second + second / 4, "big".to_owned(), second),
            ]),
            ..Scenario::chaos(seed)
        }
    }

    /// The coordinator's host is cut off while a leader on another host
    /// runs and a third process joins (SPEC.md §14.3, §14.4; issue 28 item
    /// 2): the leader's connection breaks a little before the coordinator's
    /// key expires, and its next connection attempt goes to the dead
    /// address. The grace window is shorter than the connect timeout, so
    /// that an attempt not abandoned when the key changes (bug 7) misses it
    /// for certain rather than by milliseconds.
    pub fn coordinator_cut_off(seed: u64, cut_at: Duration) -> Scenario {
        let second = Duration::from_secs(1);
        Scenario {
            hosts: 4,
            processes: 4,
            keys: 1,
            calls_per_process: 1,
            grace_window: second,
            deadline: Duration::from_secs(40),
            faults: Faults::Script(vec![(cut_at, Fault::Crash(1))]),
            stagger: second,
            script: Some(vec![
                (1, 4 * second, "x".to_owned(), 12 * second),
                (2, 4 * second + second / 2, "x".to_owned(), second),
            ]),
            ..Scenario::chaos(seed)
        }
    }

    /// A term that ends cleanly while a landed line is still on its way to
    /// a joiner (SPEC.md §14.3): the link from the coordinator's host to
    /// the joiner's is 200 ms slow, and the coordinator (process 0) closes
    /// right after the leader (process 1) lands, so that the joiner
    /// (process 2) hears from the election that the term is over before
    /// the line arrives. The connector's bug 2 leaves at once and loses
    /// it.
    pub fn answers_on_the_way(seed: u64) -> Scenario {
        let second = Duration::from_secs(1);
        let ms = Duration::from_millis;
        Scenario {
            hosts: 3,
            processes: 3,
            keys: 2,
            calls_per_process: 1,
            faults: Faults::Script(vec![(
                Duration::ZERO,
                Fault::Delay(1, 3, ms(200), Duration::from_secs(600)),
            )]),
            close_mid_traffic: true,
            stagger: second,
            script: Some(vec![
                (0, 3 * second, "own".to_owned(), 2 * second),
                (1, 3 * second, "x".to_owned(), ms(1900)),
                (2, ms(3500), "x".to_owned(), second),
            ]),
            ..Scenario::chaos(seed)
        }
    }

    /// The election's store refuses every request for eight seconds while
    /// the processes call (SPEC.md §13.5, §14.6): every attempt fails at
    /// once, and the connector's bug 3 makes the next one at once too.
    pub fn store_down(seed: u64) -> Scenario {
        Scenario {
            faults: Faults::Script(vec![(
                Duration::from_secs(5),
                Fault::StoreDown(Duration::from_secs(8)),
            )]),
            ..Scenario::chaos(seed)
        }
    }

    /// Issue 27 item 6: a thousand processes on a hundred hosts call a
    /// thousand keys at once, and the coordinator's host is cut off for
    /// good in the middle of the stampede.
    pub fn scale(seed: u64) -> Scenario {
        Scenario {
            hosts: 100,
            processes: 1000,
            keys: 1000,
            calls_per_process: 3,
            calls_over: Duration::from_secs(2),
            work: (Duration::from_millis(500), Duration::from_secs(3)),
            deadline: Duration::from_secs(30),
            faults: Faults::Script(vec![(Duration::from_millis(1500), Fault::CrashCoordinator)]),
            ..Scenario::chaos(seed)
        }
    }

    /// Issue 45 item 6: `processes` processes on `hosts` hosts call 3 keys
    /// each out of `keys` within 2 s, through the host tier (SPEC.md §18),
    /// with no fault: `scale`'s shape with more processes.
    pub fn tier(seed: u64, processes: u32, hosts: u32, keys: u32) -> Scenario {
        Scenario {
            hosts,
            processes,
            keys,
            tier: true,
            faults: Faults::Script(Vec::new()),
            ..Scenario::scale(seed)
        }
    }

    /// [`tier`](Scenario::tier) with issue 45 item 6's faults: the cluster
    /// coordinator's host crashed mid-stampede (at 1.5 s, as `scale`'s),
    /// and the host coordinators of `killed` hosts, drawn from the seed,
    /// killed mid-flight at times drawn between 1 s and 3 s (calls start
    /// within 2 s and their works last 0.5–3 s).
    pub fn with_tier_faults(mut self, killed: u32) -> Scenario {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ KILLS_SEED);
        let mut hosts: Vec<HostId> = (1..=self.hosts).collect();
        let mut faults = vec![(Duration::from_millis(1500), Fault::CrashCoordinator)];
        for n in 0..killed.min(self.hosts) as usize {
            // A partial shuffle: the first `killed` hosts, drawn.
            let pick = n + below(&mut rng, self.hosts - n as u32) as usize;
            hosts.swap(n, pick);
            let at = uniform(&mut rng, Duration::from_secs(1), Duration::from_secs(3));
            faults.push((at, Fault::KillHostCoordinator(hosts[n])));
        }
        faults.sort_by_key(|(at, _)| *at);
        self.faults = Faults::Script(faults);
        self
    }

    /// This scenario with `shards` shards (SPEC.md §19); 1 changes nothing.
    pub fn with_shards(self, shards: u32) -> Scenario {
        Scenario { shards, ..self }
    }

    /// The replay line printed with a failure: the run is a function of
    /// its scenario, so its seed replays it in the same scenario (the
    /// chaos scenario's through `fresh_seeds`, a fixed scenario's through
    /// its test).
    pub fn replay(&self) -> String {
        format!(
            "seed {}: (cd sim && SINGLE_FLIGHT_SIM_SEED={} cargo test --test sim fresh_seeds -- --nocapture) replays it if this is the chaos scenario; a fixed scenario replays with its own test",
            self.seed, self.seed
        )
    }
}

/// How one call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Led,
    Joined,
    Reused,
    Interrupted { lost_in_failover: bool },
    DeadlineExceeded,
    Unavailable,
    Other(String),
}

#[derive(Clone, Debug)]
struct CallRecord {
    process: u32,
    key: String,
    started: Instant,
    ended: Instant,
    outcome: Ended,
    token: Option<FencingToken>,
    /// For a joined or reused call: whether its value was the one its
    /// token's leader made.
    value_ok: bool,
}

#[derive(Clone, Debug)]
struct Lead {
    process: u32,
    key: String,
    token: FencingToken,
    started: Instant,
    /// When the work ended, and whether it finished (not dropped).
    ended: Option<(Instant, bool)>,
}

#[derive(Default)]
struct Log {
    /// Election requests by process and simulated second.
    requests: BTreeMap<(Address, u64), u32>,
    /// Per shard and epoch: the first and last moment its coordinator said
    /// it still held its term, and where it serves.
    serving: BTreeMap<(u32, Epoch), (Instant, Instant, Address)>,
    /// Shards whose coordinator a fault took out (its host's crash,
    /// partition or pause, its own kill): their keys stall for a failover.
    stalled_shards: BTreeSet<u32>,
    leads: Vec<Lead>,
    calls: Vec<CallRecord>,
    /// The fenced resource: per key the highest token written.
    fenced: BTreeMap<String, FencingToken>,
    writes_accepted: u64,
    writes_refused: u64,
    /// Hosts a fault took out, and hosts crashed for good.
    taken_out: BTreeSet<HostId>,
    crashed: BTreeSet<HostId>,
    /// Processes killed (host coordinators, kill -9), and their hosts.
    killed: BTreeSet<ProcessId>,
    killed_on: BTreeSet<HostId>,
    /// Processes whose calls are all done (counted as done once).
    finished: BTreeSet<ProcessId>,
    /// Each process's call in progress: its key and start.
    calling: BTreeMap<ProcessId, (String, Instant)>,
    /// The calls in progress of killed processes, which never end: their
    /// key and start. A leader granted to one may never have run.
    killed_calls: Vec<(String, Instant)>,
    faults: u64,
    last_fault_healed: Option<Instant>,
}

impl Log {
    /// Where `shard`'s latest term serves.
    fn coordinator(&self, shard: u32) -> Option<Address> {
        self.serving
            .range((shard, Epoch::FIRST)..)
            .take_while(|((of, _), _)| *of == shard)
            .last()
            .map(|(_, (_, _, at))| *at)
    }

    /// Marks as stalled the shards whose latest term serves where `out`
    /// says a fault took it out.
    fn stall(&mut self, shards: u32, out: impl Fn(Address) -> bool) {
        for shard in 0..shards {
            if self.coordinator(shard).is_some_and(&out) {
                self.stalled_shards.insert(shard);
            }
        }
    }
}

/// What everything in the world records into.
#[derive(Clone)]
pub struct Record {
    log: Arc<Mutex<Log>>,
    origin: Instant,
    trace: Trace,
}

impl Record {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("never poisoned")
    }

    /// One request of `process`'s election: counted, and traced.
    pub fn election_request(&self, process: Address, what: &str) {
        self.trace
            .record(format_args!("election {process} sends {what}"));
        let second = (Instant::now() - self.origin).as_secs();
        *self.lock().requests.entry((process, second)).or_default() += 1;
    }

    /// The coordinator of `shard`'s `epoch` said it may answer.
    pub fn serving(&self, shard: u32, epoch: Epoch, at: Address) {
        let now = Instant::now();
        self.lock()
            .serving
            .entry((shard, epoch))
            .and_modify(|(_, last, _)| *last = now)
            .or_insert((now, now, at));
    }

    /// Where `shard`'s latest term serves.
    fn coordinator(&self, shard: u32) -> Option<Address> {
        self.lock().coordinator(shard)
    }
}

/// The outcome of a run.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub violations: Vec<String>,
    pub trace: (u64, u64),
    pub trace_lines: Option<Vec<String>>,
    pub calls: BTreeMap<String, u64>,
    pub faults: u64,
    pub simulated: Duration,
    pub terms: usize,
    pub stale_writes_refused: u64,
    /// Terms that answered while the one before still did: possible only
    /// with a clock slower than the step-down margin allows (§14.2).
    pub overlapping_terms: usize,
    /// The calls made, and those answered (led, joined or reused).
    pub calls_made: u64,
    pub answered: u64,
    /// The same of the processes that no fault took out (their host's
    /// crash, partition or pause, their own kill): what they did not get
    /// answered was interrupted with a leader a fault took out.
    pub live_calls: (u64, u64),
    /// The most connections a coordinator of the cluster held open at
    /// once: in all, and from one host.
    pub coordinator_connections: (u32, u32),
    /// Requests to the election's store (etcd), renewals included.
    pub store_requests: u64,
    /// Host coordinators killed.
    pub killed: usize,
    /// Shards whose coordinator a fault took out (SPEC.md §19).
    pub stalled_shards: BTreeSet<u32>,
    /// How many hosts the shards' first terms were won on: the shards'
    /// number when the spread put each on a host of its own (§19.3).
    pub first_terms_on: usize,
    /// The largest latency of an answered call (`latency`): the normal
    /// latency, measured in a run without faults.
    pub latency_max: Duration,
    /// The calls of the shards that no fault stalled, which must not wait
    /// for another shard's failover.
    pub other_shards: ShardCalls,
    /// The same of the stalled shards, whose calls may wait for their
    /// failover: what shows that the measurement sees a failover's delay.
    pub stalled_shard_calls: ShardCalls,
    pub replay: String,
}

/// Calls by processes on hosts no fault touched, of keys whose leads no
/// fault touched, of either the shards whose coordinator a fault took out
/// or the others (SPEC.md §19; RELIABILITY.md, "Simulation").
#[derive(Debug, Default)]
pub struct ShardCalls {
    pub calls: u64,
    pub answered: u64,
    /// Their largest latency (`latency`).
    pub latency_max: Duration,
    /// Those answered later than the scenario's normal latency, or not at
    /// all: must be 0 of the shards whose coordinator no fault took out.
    pub delayed: u64,
}

impl Report {
    /// Panics, printing the seed and how to replay it, if a check failed.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "seed {}: {} violation(s):\n  {}\n{}",
            self.seed,
            self.violations.len(),
            self.violations.join("\n  "),
            self.replay
        );
    }
}

/// The value a leader of `key` under `token` makes.
fn value_of(key: &str, token: FencingToken, bytes: usize) -> String {
    let mut value = format!("{key}@{token}");
    if value.len() < bytes {
        value.push_str(&"v".repeat(bytes - value.len()));
    }
    value
}

fn uniform(rng: &mut ChaCha8Rng, low: Duration, high: Duration) -> Duration {
    if high <= low {
        return low;
    }
    let span = (high - low).as_micros() as u64;
    low + Duration::from_micros(rng.next_u64() % (span + 1))
}

fn below(rng: &mut ChaCha8Rng, n: u32) -> u32 {
    (rng.next_u64() % u64::from(n.max(1))) as u32
}

/// Runs `scenario` on a fresh current-thread runtime with a paused clock
/// and a seeded scheduler, and checks it.
pub fn run(scenario: &Scenario) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(
            &scenario.seed.to_le_bytes(),
        ))
        .build()
        .expect("a current-thread runtime builds");
    let report = runtime.block_on(simulate(scenario.clone()));
    // The servers, renewals and the store's reaper still run: dropped with
    // the runtime.
    drop(runtime);
    report
}

async fn simulate(scenario: Scenario) -> Report {
    let trace = Trace::new(scenario.keep_trace);
    let net = Net::new(trace.clone());
    let store = Store::start(net.clone(), scenario.shards);
    let origin = Instant::now();
    let record = Record {
        log: Arc::new(Mutex::new(Log::default())),
        origin,
        trace: trace.clone(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(scenario.seed);
    let clocks: Vec<Clock> = (0..=scenario.hosts)
        .map(|_| {
            let (low, high) = scenario.clock_rates;
            let fraction = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            Clock::new(low + (high - low) * fraction)
        })
        .collect();
    let seeded_in = |process: u32| match &scenario.mutant {
        Some((mutant, processes)) if processes.is_empty() || processes.contains(&process) => {
            Seeded::new(Some(*mutant))
        }
        _ => Seeded::NONE,
    };
    let mut workloads = Vec::new();
    let (done, all_done) = tokio::sync::watch::channel(0u32);
    let done = Arc::new(done);
    // The host tier's directories, one per host and shard (SPEC.md §19.4;
    // index 0, the store's host, has none in use).
    let directories: Vec<Vec<HostDirectory>> = (0..=scenario.hosts)
        .map(|_| {
            (0..scenario.shards)
                .map(|_| HostDirectory::default())
                .collect()
        })
        .collect();
    for process in 0..scenario.processes {
        let host = 1 + process % scenario.hosts;
        // The spread (SPEC.md §19.3) counts a host coordinator's host, and
        // a direct process as a host of its own (§18.6).
        let spreader = if scenario.tier {
            Spreader::Host(host)
        } else {
            Spreader::Process(process)
        };
        // Per shard, the cluster's election and transport of this process:
        // opened once by a direct process, and by a host coordinator each
        // time it becomes its host's (SPEC.md §18.1), each time with a seed
        // of its own. Each shard's coordinator listens at an address of
        // its own (the shard's port of the process).
        let clusters: Vec<OpenCluster<SimElection, SimTransport>> = (0..scenario.shards)
            .map(|shard| {
                let address = Address {
                    host,
                    port: process * scenario.shards + shard,
                };
                let (store, net, clock, record) = (
                    store.clone(),
                    net.clone(),
                    clocks[host as usize],
                    record.clone(),
                );
                let seed = rng.next_u64();
                let opened = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let cluster: OpenCluster<SimElection, SimTransport> = Arc::new(move || {
                    let n = opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let seed = seed.wrapping_add(n.wrapping_mul(OPENING_SEED_STEP));
                    let (store, net, record) = (store.clone(), net.clone(), record.clone());
                    // Connected where the future runs, not where it is
                    // made: the election's client lives on the task that
                    // opens it.
                    Box::pin(async move {
                        let election = SimElection::connect(
                            store,
                            (address, process),
                            (shard, spreader),
                            clock,
                            record,
                            seed,
                        );
                        (election, SimTransport::new(net, address, process))
                    })
                });
                cluster
            })
            .collect();
        tokio::time::sleep_until(origin + scenario.stagger * process).await;
        let settings = Settings {
            grace_window: scenario.grace_window,
            poll_interval: scenario.poll_interval,
            seeded: seeded_in(process),
        };
        // The process is opened from a caller's runtime that ends right
        // after, as a runtime made only to open would (the shell's bug 4):
        // nothing the process needs may live on it.
        let opener = Group::default();
        let flights = if scenario.tier {
            let shards = (0..scenario.shards)
                .zip(clusters)
                .map(|(shard, cluster)| {
                    let directory = directories[host as usize][shard as usize].clone();
                    let net = net.clone();
                    let open = async move {
                        (
                            HostElection::new(directory, process, net.clone()),
                            HostTransport::new(net, (host, shard), process),
                        )
                    };
                    (open, cluster)
                })
                .collect();
            let relays_for = RelayHost::new(format!("h{host}")).expect("a valid host id");
            CALLER
                .scope(
                    opener.clone(),
                    open_sharded_tiered_on(shards, relays_for, settings),
                )
                .await
        } else {
            let shards = clusters.iter().map(|cluster| cluster()).collect();
            CALLER
                .scope(opener.clone(), open_sharded_on(shards, settings))
                .await
        };
        opener.end();
        let drawn = (0..scenario.calls_per_process).map(|_| {
            (
                uniform(&mut rng, Duration::ZERO, scenario.calls_over),
                format!("k{}", below(&mut rng, scenario.keys)),
                uniform(&mut rng, scenario.work.0, scenario.work.1),
            )
        });
        let plan: Vec<(Duration, String, Duration)> = match &scenario.script {
            Some(script) => script
                .iter()
                .filter(|(of, ..)| *of == process)
                .map(|(_, at, key, work)| (*at, key.clone(), *work))
                .collect(),
            None => drawn.collect(),
        };
        workloads.push(tokio::spawn(workload(
            flights,
            process,
            plan,
            scenario.clone(),
            record.clone(),
            (done.clone(), all_done.clone()),
        )));
    }
    let faults = match &scenario.faults {
        Faults::Script(script) => script.clone(),
        Faults::Random { count, until } => draw_faults(&mut rng, &scenario, *count, *until),
    };
    let last_planned = faults
        .iter()
        .map(|(at, _)| *at)
        .chain([scenario.calls_over])
        .max()
        .unwrap_or_default();
    let killer = Killer {
        directories,
        shards: scenario.shards,
        workloads: workloads.iter().map(|w| w.abort_handle()).collect(),
        done: done.clone(),
    };
    let chaos = tokio::spawn(inject(
        faults,
        (scenario.hosts, scenario.shards),
        net.clone(),
        record.clone(),
        rng.next_u64(),
        killer,
    ));
    let all = async {
        for workload in workloads {
            let _ = workload.await;
        }
    };
    // Each process's calls come one after another, each within its
    // deadline.
    let longest = last_planned + scenario.deadline * scenario.calls_per_process.max(1) + HANG_AFTER;
    let hung = tokio::time::timeout(longest, all).await.is_err();
    chaos.abort();
    check(&scenario, &record, &clocks, hung, &trace, &net)
}

/// What a kill of a process needs (`Fault::KillHostCoordinator`).
struct Killer {
    /// By host, then shard.
    directories: Vec<Vec<HostDirectory>>,
    shards: u32,
    workloads: Vec<AbortHandle>,
    done: Arc<tokio::sync::watch::Sender<u32>>,
}

impl Killer {
    /// Kills the process that holds `host`'s claim, if any (kill -9): of
    /// the first shard whose claim someone holds, with a cluster of shards.
    fn kill_host_coordinator(&self, host: HostId, net: &Net, record: &Record) {
        if record.lock().crashed.contains(&host) {
            return;
        }
        let directories = &self.directories[host as usize];
        let Some(process) = directories.iter().find_map(HostDirectory::holder) else {
            net.trace()
                .record(format_args!("nobody coordinates h{host} to kill"));
            return;
        };
        // Its connections close and its listeners go first, then its
        // claims, then its tasks: all at one instant of simulated time.
        net.kill(process);
        for directory in directories {
            directory.release(process);
        }
        self.workloads[process as usize].abort();
        let mut log = record.lock();
        // The shards whose term it held stall too.
        let shards = self.shards;
        log.stall(shards, |address| address.port / shards == process);
        log.killed.insert(process);
        log.killed_on.insert(host);
        if let Some(call) = log.calling.remove(&process) {
            log.killed_calls.push(call);
        }
        if log.finished.insert(process) {
            self.done.send_modify(|done| *done += 1);
        }
    }
}

/// Draws `count` faults between 1 s and `until`.
fn draw_faults(
    rng: &mut ChaCha8Rng,
    scenario: &Scenario,
    count: u32,
    until: Duration,
) -> Vec<(Duration, Fault)> {
    let hosts = scenario.hosts;
    let host = |rng: &mut ChaCha8Rng| 1 + below(rng, hosts);
    // At most a third of the hosts crash, so that a cluster is left.
    let mut crashes_left = hosts / 3;
    let mut faults: Vec<(Duration, Fault)> = (0..count)
        .map(|_| {
            let at = uniform(rng, Duration::from_secs(1), until);
            let lasting = |rng: &mut ChaCha8Rng| {
                uniform(rng, Duration::from_millis(500), Duration::from_secs(9))
            };
            let fault = loop {
                let fault = match below(rng, 10) {
                    0 | 1 if crashes_left > 0 => {
                        crashes_left -= 1;
                        if below(rng, 2) == 0 {
                            Fault::CrashCoordinator
                        } else {
                            Fault::Crash(host(rng))
                        }
                    }
                    0 | 1 => continue,
                    2 => Fault::Partition(host(rng), lasting(rng)),
                    3 => Fault::PartitionFromStore(host(rng), lasting(rng)),
                    4 => Fault::PartitionFromCoordinator(host(rng), lasting(rng)),
                    5 => Fault::OneWay(host(rng), host(rng), lasting(rng)),
                    6 => Fault::PauseCoordinator(lasting(rng)),
                    7 => Fault::Slow(
                        host(rng),
                        host(rng),
                        (1 << 20) * u64::from(1 + below(rng, 4)),
                        lasting(rng),
                    ),
                    8 => Fault::Delay(
                        host(rng),
                        host(rng),
                        uniform(rng, Duration::from_millis(1), Duration::from_millis(200)),
                        lasting(rng),
                    ),
                    // A store outage takes out every host (no term can be
                    // made or kept), which leaves the run's checks of
                    // untouched hosts nothing to judge: drawn seldom, in
                    // about one run in seven.
                    9 if below(rng, 4) == 0 => Fault::StoreDown(lasting(rng)),
                    _ => Fault::JunkBurst(50 + below(rng, 450)),
                };
                break fault;
            };
            // Through the host tier, a quarter of the faults kill a host
            // coordinator instead (SPEC.md §18.4); drawn only then, so that
            // a direct run's faults stay those of its seed.
            if scenario.tier && below(rng, 4) == 0 {
                return (at, Fault::KillHostCoordinator(host(rng)));
            }
            (at, fault)
        })
        .collect();
    faults.sort_by_key(|(at, _)| *at);
    faults
}

/// What ends a fault.
type Heal = Box<dyn FnOnce(&Net) + Send>;

/// Injects `faults` at their times; a fault of "the coordinator" takes
/// the coordinator of a shard drawn from `seed` when there are several.
async fn inject(
    faults: Vec<(Duration, Fault)>,
    (hosts, shards): (u32, u32),
    net: Net,
    record: Record,
    seed: u64,
    killer: Killer,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (at, fault) in faults {
        tokio::time::sleep_until(record.origin + at).await;
        // Drawn only with shards, so that a run of one shard draws what it
        // always drew.
        let shard = if shards > 1 {
            (rng.next_u64() % u64::from(shards)) as u32
        } else {
            0
        };
        if shards > 1 {
            net.trace()
                .record(format_args!("fault {fault:?} of shard {shard}"));
        } else {
            net.trace().record(format_args!("fault {fault:?}"));
        }
        let coordinator = record.coordinator(shard).map(|address| address.host);
        let mut taken_out = Vec::new();
        let mut heal: Option<(Duration, Heal)> = None;
        match fault.clone() {
            Fault::CrashCoordinator | Fault::Crash(_) => {
                let target = match fault {
                    Fault::Crash(host) => Some(host),
                    _ => coordinator,
                };
                if let Some(host) = target {
                    net.crash(host);
                    record.lock().crashed.insert(host);
                    taken_out.push(host);
                }
            }
            Fault::Partition(host, lasting) => {
                if !record.lock().crashed.contains(&host) {
                    net.isolate(host, true);
                    taken_out.push(host);
                    heal = Some((lasting, Box::new(move |net| net.isolate(host, false))));
                }
            }
            Fault::PartitionFromStore(host, lasting) => {
                net.cut(host, STORE, true);
                net.cut(STORE, host, true);
                taken_out.push(host);
                heal = Some((
                    lasting,
                    Box::new(move |net| {
                        net.cut(host, STORE, false);
                        net.cut(STORE, host, false);
                    }),
                ));
            }
            Fault::PartitionFromCoordinator(host, lasting) => {
                if let Some(coordinator) = coordinator.filter(|c| *c != host) {
                    net.cut(host, coordinator, true);
                    net.cut(coordinator, host, true);
                    taken_out.extend([host, coordinator]);
                    heal = Some((
                        lasting,
                        Box::new(move |net| {
                            net.cut(host, coordinator, false);
                            net.cut(coordinator, host, false);
                        }),
                    ));
                }
            }
            Fault::OneWay(from, to, lasting) => {
                if from != to {
                    net.cut(from, to, true);
                    taken_out.extend([from, to]);
                    heal = Some((lasting, Box::new(move |net| net.cut(from, to, false))));
                }
            }
            Fault::PauseCoordinator(lasting) => {
                if let Some(host) = coordinator {
                    net.pause(host, true);
                    taken_out.push(host);
                    heal = Some((lasting, Box::new(move |net| net.pause(host, false))));
                }
            }
            Fault::Slow(from, to, rate, lasting) => {
                net.set_link(from, to, |link| link.bytes_per_second = Some(rate));
                heal = Some((
                    lasting,
                    Box::new(move |net| {
                        net.set_link(from, to, |link| link.bytes_per_second = None)
                    }),
                ));
            }
            Fault::Delay(from, to, delay, lasting) => {
                net.set_link(from, to, |link| link.delay = delay);
                heal = Some((
                    lasting,
                    Box::new(move |net| net.set_link(from, to, |link| link.delay = Duration::ZERO)),
                ));
            }
            Fault::StoreDown(lasting) => {
                net.refuse(STORE, true);
                // No term can be proven or made meanwhile: every host's
                // flights may be lost.
                taken_out.extend(1..=hosts);
                heal = Some((lasting, Box::new(|net| net.refuse(STORE, false))));
            }
            Fault::KillHostCoordinator(host) => {
                killer.kill_host_coordinator(host, &net, &record);
            }
            Fault::JunkBurst(count) => {
                if let Some(address) = record.coordinator(shard) {
                    for _ in 0..count {
                        net.junk_connection(1 + (rng.next_u64() % 1000) as u32, address);
                    }
                }
            }
        }
        {
            let mut log = record.lock();
            log.faults += 1;
            if fault.takes_out() {
                log.stall(shards, |address| taken_out.contains(&address.host));
                log.taken_out.extend(taken_out);
            }
            let now = Instant::now();
            log.last_fault_healed = Some(log.last_fault_healed.map_or(now, |at| at.max(now)));
        }
        if let Some((lasting, heal)) = heal {
            let net = net.clone();
            let record = record.clone();
            tokio::spawn(async move {
                tokio::time::sleep(lasting).await;
                net.trace().record(format_args!("fault healed"));
                heal(&net);
                let now = Instant::now();
                let mut log = record.lock();
                log.last_fault_healed = Some(log.last_fault_healed.map_or(now, |at| at.max(now)));
            });
        }
    }
}

/// One process's calls, one after another, then its close.
async fn workload(
    flights: SingleFlight,
    process: u32,
    plan: Vec<(Duration, String, Duration)>,
    scenario: Scenario,
    record: Record,
    (done, mut all_done): (
        Arc<tokio::sync::watch::Sender<u32>>,
        tokio::sync::watch::Receiver<u32>,
    ),
) {
    let mut plan = plan;
    plan.sort_by_key(|(at, _, _)| *at);
    for (at, key, work) in plan {
        tokio::time::sleep_until(record.origin + at).await;
        let started = Instant::now();
        record
            .lock()
            .calling
            .insert(process, (key.clone(), started));
        let bytes = scenario.value_bytes;
        let lead_record = record.clone();
        let lead_key = key.clone();
        let result = flights
            .call(&key)
            .deadline(scenario.deadline)
            .run(move |token| async move {
                lead_record
                    .trace
                    .record(format_args!("lead p{process} {lead_key} {token}"));
                let index = {
                    let mut log = lead_record.lock();
                    log.leads.push(Lead {
                        process,
                        key: lead_key.clone(),
                        token,
                        started: Instant::now(),
                        ended: None,
                    });
                    log.leads.len() - 1
                };
                let mut guard = LeadGuard {
                    record: lead_record.clone(),
                    index,
                    finished: false,
                };
                tokio::time::sleep(work).await;
                {
                    let mut log = lead_record.lock();
                    let accepted = log.fenced.get(&lead_key).is_none_or(|last| token > *last);
                    if accepted {
                        log.fenced.insert(lead_key.clone(), token);
                        log.writes_accepted += 1;
                    } else {
                        log.writes_refused += 1;
                    }
                }
                guard.finished = true;
                drop(guard);
                Ok::<_, std::io::Error>(value_of(&lead_key, token, bytes))
            })
            .await;
        let ended = Instant::now();
        let (outcome, token, value_ok) = match &result {
            Ok(landed) => {
                let ok = landed.value == value_of(&key, landed.token, bytes);
                let role = match landed.role {
                    Role::Led => Ended::Led,
                    Role::Joined => Ended::Joined,
                    Role::Reused => Ended::Reused,
                };
                (role, Some(landed.token), ok)
            }
            Err(RunError::Interrupted {
                lost_in_failover, ..
            }) => (
                Ended::Interrupted {
                    lost_in_failover: *lost_in_failover,
                },
                None,
                true,
            ),
            Err(RunError::DeadlineExceeded { .. }) => (Ended::DeadlineExceeded, None, true),
            Err(RunError::Unavailable(_)) => (Ended::Unavailable, None, true),
            Err(error) => (Ended::Other(error.to_string()), None, true),
        };
        record.trace.record(format_args!(
            "call p{process} {key} {outcome:?} {}",
            token.map_or(String::new(), |t| t.to_string())
        ));
        let mut log = record.lock();
        log.calling.remove(&process);
        log.calls.push(CallRecord {
            process,
            key,
            started,
            ended,
            outcome,
            token,
            value_ok,
        });
    }
    if record.lock().finished.insert(process) {
        done.send_modify(|done| *done += 1);
    }
    if !scenario.close_mid_traffic {
        let _ = all_done.wait_for(|done| *done == scenario.processes).await;
    }
    flights.close().await;
}

/// Marks a lead's end, finished or dropped.
struct LeadGuard {
    record: Record,
    index: usize,
    finished: bool,
}

impl Drop for LeadGuard {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut log = self.record.lock();
        let lead = &mut log.leads[self.index];
        lead.ended = Some((now, self.finished));
        let (process, key, token, finished) =
            (lead.process, lead.key.clone(), lead.token, self.finished);
        drop(log);
        self.record.trace.record(format_args!(
            "lead p{process} {key} {token} ended, finished {finished}"
        ));
    }
}

/// The must-be-zero rows.
fn check(
    scenario: &Scenario,
    record: &Record,
    clocks: &[Clock],
    hung: bool,
    trace: &Trace,
    net: &Net,
) -> Report {
    let log = record.lock();
    let mut violations = Vec::new();
    let at = |instant: Instant| format!("{:.3}s", (instant - record.origin).as_secs_f64());
    let host_of = |process: u32| 1 + process % scenario.hosts;
    let count = ShardCount::new(u64::from(scenario.shards)).expect("1 to MAX_SHARDS shards");
    let shard_of = |key: &str| count.of_bytes(key.as_bytes()).index();
    if hung {
        violations.push("the run hung: a call or a close never ended".to_owned());
    }
    // One run per key at a time within a term (§8.1).
    let mut by_term: BTreeMap<(&str, Epoch), Vec<&Lead>> = BTreeMap::new();
    for lead in &log.leads {
        by_term
            .entry((lead.key.as_str(), lead.token.epoch()))
            .or_default()
            .push(lead);
    }
    for ((key, epoch), leads) in &by_term {
        for pair in leads.windows(2) {
            let end = pair[0].ended.map_or(Instant::now(), |(at, _)| at);
            if pair[1].started < end {
                violations.push(format!(
                    "two runs of {key} at once in term {epoch}: {} from {} and {} from {}",
                    pair[0].token,
                    at(pair[0].started),
                    pair[1].token,
                    at(pair[1].started)
                ));
            }
            if pair[1].token <= pair[0].token {
                violations.push(format!(
                    "tokens of {key} in term {epoch} did not increase: {} then {}",
                    pair[0].token, pair[1].token
                ));
            }
        }
    }
    // Tokens unique (§6), within a shard (§19.3).
    let mut tokens = BTreeSet::new();
    for lead in &log.leads {
        if !tokens.insert((shard_of(&lead.key), lead.token)) {
            violations.push(format!(
                "token {} granted twice in shard {}",
                lead.token,
                shard_of(&lead.key)
            ));
        }
    }
    // A process that a fault took out: its host's, or its own kill (a
    // killed leader's land may have died with it, SPEC.md §18.4).
    let crashed_or_out =
        |process: u32| log.taken_out.contains(&host_of(process)) || log.killed.contains(&process);
    let settled_after = log.last_fault_healed.map(|at| at + SETTLE);
    for call in &log.calls {
        // Joiners get their leader's value (§3.3).
        if matches!(call.outcome, Ended::Joined | Ended::Reused) {
            let made = log.leads.iter().any(|lead| {
                Some(lead.token) == call.token
                    && lead.key == call.key
                    && lead.ended.is_some_and(|(_, finished)| finished)
            });
            if !call.value_ok || !made {
                violations.push(format!(
                    "p{} {} {:?} a value its token's leader did not make ({:?})",
                    call.process, call.key, call.outcome, call.token
                ));
            }
        }
        // Every call ends by its deadline (§9.5).
        if call.ended - call.started > scenario.deadline + DEADLINE_SLACK {
            violations.push(format!(
                "p{} {} ended {:?} after its start, past its {:?} deadline",
                call.process,
                call.key,
                call.ended - call.started,
                scenario.deadline
            ));
        }
        // A joiner on a host no fault took out, whose leader on such a
        // host finished its work, gets its value (§10.3, §14.4).
        if let Ended::Interrupted { .. } = call.outcome
            && !crashed_or_out(call.process)
        {
            // The flights it may have joined: every lead of its key while
            // it waited. Only when each was led on such a host and
            // finished is its flight known to have had an outcome.
            let overlapping: Vec<&Lead> = log
                .leads
                .iter()
                .filter(|lead| {
                    lead.key == call.key
                        && lead.process != call.process
                        && lead.started < call.ended
                        && lead.ended.is_none_or(|(ended, _)| ended > call.started)
                })
                .collect();
            let all_made = overlapping.iter().all(|lead| {
                !crashed_or_out(lead.process) && lead.ended.is_some_and(|(_, finished)| finished)
            });
            // A process that a fault took out may have been granted the
            // lead and never heard of it.
            let out_caller = log.calls.iter().any(|other| {
                other.key == call.key
                    && crashed_or_out(other.process)
                    && other.started < call.ended
                    && other.ended > call.started
            });
            // A flight stays open at its coordinator after its work ends,
            // until its land arrives; a leader that a fault took out may
            // have finished before this call began and its land never
            // arrived (seed 1796240075828084369: the leader's host was cut
            // off as its work ended, and its joiners were interrupted when
            // its connection closed, four seconds later).
            let out_leader = log.leads.iter().any(|lead| {
                lead.key == call.key && crashed_or_out(lead.process) && lead.started < call.ended
            });
            let leader = overlapping
                .first()
                .filter(|_| all_made && !out_caller && !out_leader);
            if let Some(leader) = leader {
                violations.push(format!(
                    "p{} {} was told {:?} at {} though its leader p{} ({}) finished at {}, no fault touching either",
                    call.process,
                    call.key,
                    call.outcome,
                    at(call.ended),
                    leader.process,
                    leader.token,
                    at(leader.ended.expect("found so").0)
                ));
            }
        }
        // Through the host tier, every call of a process on a host no fault
        // took out is answered, or told that its flight was interrupted
        // (judged above): a host coordinator's death on its host costs it
        // a failover, not its call (SPEC.md §18.4).
        //
        // One failover, not failovers back to back: when the call's shard
        // had two or more new terms while the call waited, their pauses
        // together (a lease's TTL, the spread and a grace window each) may
        // outlast its deadline, as they may for a direct call (§9.5).
        if scenario.tier
            && !crashed_or_out(call.process)
            && matches!(
                call.outcome,
                Ended::DeadlineExceeded | Ended::Unavailable | Ended::Other(_)
            )
            && terms_began_within(&log, shard_of(&call.key), call.started, call.ended)
                < FAILOVERS_A_CALL_OUTLASTS
        {
            violations.push(format!(
                "p{} {} on h{}, which no fault took out{}, ended {:?} at {}",
                call.process,
                call.key,
                host_of(call.process),
                if log.killed_on.contains(&host_of(call.process)) {
                    " (its host coordinator was killed)"
                } else {
                    ""
                },
                call.outcome,
                at(call.ended)
            ));
        }
        // After the faults heal, a live host's calls succeed.
        let late = settled_after.is_none_or(|settled| call.started >= settled);
        if late
            && !log.crashed.contains(&host_of(call.process))
            && !matches!(call.outcome, Ended::Led | Ended::Joined | Ended::Reused)
        {
            violations.push(format!(
                "p{} {} started at {}, {:?} after the last fault healed, ended {:?}",
                call.process,
                call.key,
                at(call.started),
                SETTLE,
                call.outcome
            ));
        }
    }
    // A process on a host no fault took out gets some of its calls
    // answered: faults elsewhere cost it a failover's pause, not its
    // whole run.
    let mut answered: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for call in &log.calls {
        let entry = answered.entry(call.process).or_default();
        entry.0 += 1;
        if matches!(call.outcome, Ended::Led | Ended::Joined | Ended::Reused) {
            entry.1 += 1;
        }
    }
    if let Some((process, (calls, _))) = answered.iter().find(|(process, (calls, succeeded))| {
        !crashed_or_out(**process) && *calls >= MIN_CALLS_FOR_LIVENESS && *succeeded == 0
    }) {
        violations.push(format!(
            "p{process}, on a host no fault touched, had none of its {calls} calls answered"
        ));
    }
    // No busy loop (§7.2, §14.3).
    for ((process, second), count) in &log.requests {
        if *count > MAX_REQUESTS_PER_SECOND {
            violations.push(format!(
                "{process} made {count} election requests in second {second} (at most {MAX_REQUESTS_PER_SECOND})"
            ));
            break;
        }
    }
    // Within the step-down margin, no two coordinators answer at once
    // (§14.2); beyond it, only fencing protects (its refusals are counted).
    let slowest = clocks
        .iter()
        .map(|clock| clock.rate())
        .fold(f64::MAX, f64::min);
    let within_margin = slowest >= (TTL - STEP_DOWN_MARGIN).as_secs_f64() / TTL.as_secs_f64();
    let mut overlapping_terms = 0;
    let terms: Vec<_> = log.serving.iter().collect();
    for pair in terms.windows(2) {
        let ((shard, earlier), (_, last, _)) = pair[0];
        let ((later_shard, later), (first, _, _)) = pair[1];
        // A shard's terms follow each other; another shard's may answer
        // at any time (§19.3).
        if shard == later_shard && first <= last {
            overlapping_terms += 1;
            if within_margin {
                violations.push(format!(
                    "terms {earlier} and {later} of shard {shard} both answered at {} (clocks within the margin)",
                    at(*first)
                ));
            }
        }
    }
    // The cluster's coordinators hold at most one connection per host
    // through the tier (SPEC.md §18.1): only host coordinators connect.
    let coordinators: BTreeSet<Address> = log.serving.values().map(|(_, _, at)| *at).collect();
    let coordinator_connections = coordinators
        .iter()
        .map(|address| net.held_at_most(*address))
        .fold((0, 0), |(total, one), (t, o)| (total.max(t), one.max(o)));
    if scenario.tier && coordinator_connections.0 > scenario.hosts {
        violations.push(format!(
            "a coordinator of the cluster held {} connections at once, more than the {} hosts",
            coordinator_connections.0, scenario.hosts
        ));
    }
    // The calls that no fault should delay: of a shard whose coordinator
    // no fault took out, by a process on a host that no fault touched (its
    // crash, partition or pause, a kill of one of its processes: a host
    // coordinator's failover), of a key none of whose leads until then
    // was on such a host. Each must be answered within the normal latency
    // (SPEC.md §19: a failover stalls only its shards' keys).
    let touched =
        |process: u32| crashed_or_out(process) || log.killed_on.contains(&host_of(process));
    // Per key, the calls of processes that a fault touched, which may have
    // been granted a lead they never ran or never landed: from their start
    // to their end, or for good when their process was killed.
    let mut touched_calls: BTreeMap<&str, Vec<(Instant, Option<Instant>)>> = BTreeMap::new();
    let touching = log
        .calls
        .iter()
        .filter(|call| touched(call.process))
        .map(|call| (call.key.as_str(), call.started, Some(call.ended)))
        .chain(
            log.killed_calls
                .iter()
                .map(|(key, started)| (key.as_str(), *started, None)),
        );
    for (key, started, ended) in touching {
        touched_calls.entry(key).or_default().push((started, ended));
    }
    // Per key, the first lead of a process that a fault touched: its
    // flight stays open until its land arrives, which may never.
    let mut touched_leads: BTreeMap<&str, Instant> = BTreeMap::new();
    let mut made_by: BTreeMap<(&str, FencingToken), &Lead> = BTreeMap::new();
    for lead in &log.leads {
        made_by.insert((lead.key.as_str(), lead.token), lead);
        if touched(lead.process) {
            let first = touched_leads
                .entry(lead.key.as_str())
                .or_insert(lead.started);
            *first = (*first).min(lead.started);
        }
    }
    let (mut other_shards, mut stalled_shards) = (ShardCalls::default(), ShardCalls::default());
    let mut latency_max = Duration::ZERO;
    for call in &log.calls {
        let latency = latency(call, &made_by);
        if let Some(latency) = latency {
            latency_max = latency_max.max(latency);
        }
        let overlaps_touched = touched_calls.get(call.key.as_str()).is_some_and(|calls| {
            calls.iter().any(|(started, ended)| {
                *started < call.ended && ended.is_none_or(|ended| ended > call.started)
            })
        });
        if touched(call.process)
            || overlaps_touched
            || touched_leads
                .get(call.key.as_str())
                .is_some_and(|first| *first < call.ended)
        {
            continue;
        }
        let stalled = log.stalled_shards.contains(&shard_of(&call.key));
        let delayed = scenario
            .normal_latency
            .is_some_and(|normal| latency.is_none_or(|latency| latency > normal));
        let calls = if stalled {
            &mut stalled_shards
        } else {
            &mut other_shards
        };
        calls.calls += 1;
        if let Some(latency) = latency {
            calls.answered += 1;
            calls.latency_max = calls.latency_max.max(latency);
        }
        calls.delayed += u64::from(delayed);
        if delayed && !stalled {
            let normal = scenario.normal_latency.expect("delayed beyond it");
            violations.push(format!(
                "p{} {} of shard {}, whose coordinator no fault took out, started at {} and ended {:?} at {}, {} (normal: at most {normal:?})",
                call.process,
                call.key,
                shard_of(&call.key),
                at(call.started),
                call.outcome,
                at(call.ended),
                latency.map_or("unanswered".to_owned(), |latency| format!(
                    "{latency:?} of it not the work of its value"
                )),
            ));
        }
    }
    // The hosts of the shards' first terms: as many as shards when the
    // spread (§19.3) puts each on a host of its own.
    let first_terms_on = log
        .serving
        .iter()
        .filter(|((_, epoch), _)| *epoch == Epoch::FIRST)
        .map(|(_, (_, _, address))| address.host)
        .collect::<BTreeSet<HostId>>()
        .len();
    let answered = log
        .calls
        .iter()
        .filter(|call| matches!(call.outcome, Ended::Led | Ended::Joined | Ended::Reused))
        .count() as u64;
    let live: Vec<&CallRecord> = log
        .calls
        .iter()
        .filter(|call| !crashed_or_out(call.process))
        .collect();
    let live_calls = (
        live.len() as u64,
        live.iter()
            .filter(|call| matches!(call.outcome, Ended::Led | Ended::Joined | Ended::Reused))
            .count() as u64,
    );
    let mut calls = BTreeMap::new();
    for call in &log.calls {
        let name = match &call.outcome {
            Ended::Other(_) => "other".to_owned(),
            Ended::Interrupted { lost_in_failover } => {
                format!("interrupted (lost in failover: {lost_in_failover})")
            }
            outcome => format!("{outcome:?}"),
        };
        *calls.entry(name).or_insert(0u64) += 1;
    }
    Report {
        seed: scenario.seed,
        violations,
        trace: trace.digest(),
        trace_lines: trace.lines(),
        calls,
        faults: log.faults,
        simulated: trace.elapsed(),
        terms: log.serving.len(),
        stale_writes_refused: log.writes_refused,
        overlapping_terms,
        calls_made: log.calls.len() as u64,
        answered,
        live_calls,
        coordinator_connections,
        store_requests: log.requests.values().map(|n| u64::from(*n)).sum(),
        killed: log.killed.len(),
        stalled_shards: log.stalled_shards.clone(),
        first_terms_on,
        latency_max,
        other_shards,
        stalled_shard_calls: stalled_shards,
        replay: scenario.replay(),
    }
}

/// How many terms of `shard` first said they may answer while a call
/// waited, from `started` to `ended`: the failovers it sat through.
fn terms_began_within(log: &Log, shard: u32, started: Instant, ended: Instant) -> usize {
    log.serving
        .range((shard, Epoch::FIRST)..)
        .take_while(|((of, _), _)| *of == shard)
        .filter(|(_, (first, _, _))| (started..=ended).contains(first))
        .count()
}

/// A call's latency: its time not covered by the work that made its
/// value — its wait for a lead or a flight, and its answer's way back —
/// or `None` when it was not answered. A led call's is its time less its
/// own work's; a joiner's, its time less the part of it during which its
/// leader's work ran; a reused call's, all of it.
fn latency(call: &CallRecord, made_by: &BTreeMap<(&str, FencingToken), &Lead>) -> Option<Duration> {
    if !matches!(call.outcome, Ended::Led | Ended::Joined | Ended::Reused) {
        return None;
    }
    let took = call.ended - call.started;
    let worked = call
        .token
        .and_then(|token| made_by.get(&(call.key.as_str(), token)))
        .and_then(|lead| {
            let (ended, _) = lead.ended?;
            let from = lead.started.max(call.started);
            Some(ended.min(call.ended).saturating_duration_since(from))
        })
        .unwrap_or_default();
    Some(took.saturating_sub(worked))
}
