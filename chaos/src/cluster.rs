//! The cluster form of the harness (`--cluster`, SPEC.md §14): worker
//! processes on three hosts (network namespaces joined by one bridge,
//! tests/support/hosts.rs), a three-member etcd on three hosts of its own
//! (tests/support/etcd.rs), mutual TLS between the workers, and a nemesis
//! lane of the faults only a cluster has: partitions (whole, from etcd only,
//! from the other hosts only), host deaths, etcd members killed or stopped,
//! quorum lost, and coordinators stopped past their lease.
//!
//! The fenced resource, the logs and the checker are the local form's. The
//! resource stays in the harness's own directory and the workers reach it
//! through the file system, which no partition cuts: a partitioned leader's
//! late write still arrives, and must be refused.
//!
//! What the checker needs beyond the local form comes from three places:
//! the harness polls etcd's coordinator key (who serves which epoch, and
//! when its key went), the nemesis logs outages (who could not reach etcd
//! or the coordinator, when), and every worker logs its library's
//! coordinator lines ("coordinating", each answer at debug, "term over"),
//! from which the checker reads when each term answered.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use single_flight::_internal::election::etcd::client::{Client, describe};
use single_flight::{Cluster, SingleFlight};

use crate::certs_support;
use crate::common::{self, Launch, Paths, RunConfig, Seen, Shared};
use crate::etcd_support::{self, Etcd};
use crate::hostile::{self, Target};
use crate::hosts_support::Hosts;
use crate::nemesis::Injected;
use crate::records::{Record, now_us};
use crate::rng::Rng;
use crate::schedule::{ClusterFault, Hostile, Schedule, TLS_HOSTILES, cluster_fault_name};
use crate::tls::TlsClients;

/// Hosts that run workers; etcd's members get `ETCD_MEMBERS` more.
pub const WORKER_HOSTS: usize = 3;

/// etcd's members, one per host of their own, so that a host can be cut
/// from etcd alone.
/// The second octet of the harness's networks, `10.250.*`: the tests use
/// `10.100`–`10.199` and the benchmarks `10.200`–`10.249`, so the three can
/// run side by side on one machine.
const NETWORK_OCTET: u8 = 250;

const ETCD_MEMBERS: usize = 3;

/// The cluster's name in etcd (its keys are `single-flight/chaos/…`).
const CLUSTER_NAME: &str = "chaos";

/// How often the harness reads the coordinator key: the checker's
/// "answered after its key was gone" is judged against these reads, so
/// they bound how late a violation can be seen, never whether.
const COORDINATOR_POLL: Duration = Duration::from_millis(50);

/// The bound on one of the harness's own requests to etcd: a read that
/// takes longer is skipped (quorum lost, a member stopped) and retried.
const ETCD_REQUEST: Duration = Duration::from_millis(800);

/// How long etcd's quorum and a coordinator must have been reachable from
/// a worker's host before an `Unavailable` call of that worker counts as a
/// violation: two of the library's etcd requests (`REQUEST_TIMEOUT`, 2 s
/// each) after the last fault, a term's TTL and grace window to find a new
/// coordinator, and as much again for a member restarted by the nemesis to
/// rejoin and etcd to elect a leader on a loaded 2-core machine. Generous
/// on purpose: the row is about calls refused while everything was up.
pub const UNAVAILABLE_BOUND: Duration = Duration::from_secs(12);

/// The library's step-down margin (SPEC.md §14.2); faults are drawn
/// against it ("shorter than the margin").
pub const STEP_DOWN_MARGIN_MS: u64 = 1000;

/// How long a worker gets to start before the harness gives up on the
/// first coordinator: etcd elections and TLS on a loaded machine.
const FIRST_TERM_PATIENCE: Duration = Duration::from_secs(60);

/// How often a hostile client of the calm phase is tried again when its
/// verdict was inconclusive (a failover under way, etcd's quorum back but
/// no term yet).
const CALM_RETRIES: u64 = 3;

/// The final probe's deadline: an etcd read, a campaign and a TLS
/// handshake after the last workers closed, on a loaded machine.
const PROBE_DEADLINE: Duration = Duration::from_secs(30);

/// The hosts, etcd and certificates of a run; dropping it kills every
/// process on the hosts, stops etcd and removes the namespaces, also when
/// the harness panics.
pub struct Scene {
    hosts: Hosts,
    etcd: Mutex<Etcd>,
    certs: PathBuf,
    endpoints: Vec<String>,
    /// etcd members the nemesis killed and has not restarted yet.
    etcd_down: Mutex<Vec<usize>>,
    /// etcd members' pids the nemesis stopped.
    etcd_stopped: Mutex<Vec<u32>>,
    /// Hosts whose link is down, and cuts in place, to undo at the end.
    partitioned: Mutex<Vec<usize>>,
    cuts: Mutex<Vec<(usize, usize)>>,
    /// The coordinator as the poller last read it: (epoch, worker).
    coordinator: Mutex<Option<(u32, u32)>>,
    /// The address in the coordinator key and the worker it names, for the
    /// hostile clients over TLS.
    advertised: Arc<Mutex<Option<(String, u32)>>>,
}

impl Scene {
    fn etcd_host(member: usize) -> usize {
        WORKER_HOSTS + member
    }

    fn cluster(&self, listen: SocketAddr, ttl: Duration) -> Cluster {
        Cluster::etcd(self.endpoints.clone(), CLUSTER_NAME)
            .listen(listen)
            .tls(
                self.certs.join("ca.pem"),
                self.certs.join("server.pem"),
                self.certs.join("server.key"),
            )
            // The workers' CRL (worker.rs), for the final probe alike.
            .crl(self.certs.join("crl.pem"))
            .ttl(ttl)
    }

    fn coordinator(&self) -> Option<(u32, u32)> {
        *self.coordinator.lock().expect("coordinator lock")
    }

    /// Undoes every partition, cut and etcd fault still in place.
    fn heal_all(&self) {
        for host in std::mem::take(&mut *self.partitioned.lock().expect("lock")) {
            self.hosts.heal(host);
        }
        for (a, b) in std::mem::take(&mut *self.cuts.lock().expect("lock")) {
            self.hosts.uncut(a, b);
        }
        for pid in std::mem::take(&mut *self.etcd_stopped.lock().expect("lock")) {
            common::signal(pid, Signal::CONT);
        }
        let down = std::mem::take(&mut *self.etcd_down.lock().expect("lock"));
        let mut etcd = self.etcd.lock().expect("etcd lock");
        for member in down {
            etcd.restart(member);
        }
    }
}

pub fn main(config: RunConfig) -> i32 {
    if !etcd_support::available() || !Hosts::available() {
        eprintln!("chaos: --cluster needs etcd and root (network namespaces); see RELIABILITY.md");
        return 2;
    }
    let schedule = Schedule::new(config.seed);
    println!(
        "chaos: cluster form, seed {} (replay with --cluster --seed {}), schedule {}",
        config.seed,
        config.seed,
        schedule.cluster_fingerprint()
    );
    let root = std::env::temp_dir().join(format!(
        "sf-chaos-cluster-{}-{}",
        config.seed,
        std::process::id()
    ));
    let paths = Paths::new(&root);
    if let Err(error) = common::prepare(&paths) {
        eprintln!("chaos: cannot prepare {}: {error}", root.display());
        return 2;
    }
    let started = Instant::now();
    let scene = Arc::new(set_up(&paths));
    let launch = Launch {
        prefixes: (0..WORKER_HOSTS).map(|h| scene.hosts.prefix(h)).collect(),
        addresses: (0..WORKER_HOSTS).map(|h| scene.hosts.address(h)).collect(),
        args: vec![
            "--etcd".into(),
            scene.endpoints.join(","),
            "--cluster-name".into(),
            CLUSTER_NAME.into(),
            "--certs".into(),
            scene.certs.display().to_string(),
            "--ttl-ms".into(),
            config.ttl_ms.to_string(),
        ],
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (passed, shared, mut last) = runtime.block_on(orchestrate(
        config.clone(),
        paths.clone(),
        schedule,
        scene.clone(),
        launch,
    ));
    // etcd's client keeps its connections in tasks of the runtime: the
    // harness's descriptors are counted once it is gone.
    drop(runtime);
    if let Record::Final { fds_after, .. } = &mut last {
        *fds_after = common::own_descriptors();
    }
    shared.log(last);
    // Every process on the hosts, etcd and the namespaces go before the
    // check, so that a failing check leaves nothing running.
    drop(scene);
    crate::check::verdict(&config, &paths, passed, started)
}

fn set_up(paths: &Paths) -> Scene {
    let hosts = Hosts::named("sfc", NETWORK_OCTET, WORKER_HOSTS + ETCD_MEMBERS);
    let certs = paths.root.join("certs");
    std::fs::create_dir_all(&certs).expect("a certificate directory");
    // Every worker host, and the bridge for the final probe.
    let sans: Vec<String> = (0..WORKER_HOSTS)
        .map(|h| hosts.address(h))
        .chain([hosts.bridge_address()])
        .map(|ip| format!("IP:{ip}"))
        .collect();
    certs_support::make(&certs, &sans.join(",")).expect("the cluster's certificates");
    let places: Vec<(IpAddr, Vec<String>)> = (0..ETCD_MEMBERS)
        .map(|m| {
            let host = Scene::etcd_host(m);
            (hosts.address(host), hosts.prefix(host))
        })
        .collect();
    let etcd = Etcd::start(&places);
    let endpoints = etcd.endpoints();
    Scene {
        hosts,
        etcd: Mutex::new(etcd),
        certs,
        endpoints,
        etcd_down: Mutex::new(Vec::new()),
        etcd_stopped: Mutex::new(Vec::new()),
        partitioned: Mutex::new(Vec::new()),
        cuts: Mutex::new(Vec::new()),
        coordinator: Mutex::new(None),
        advertised: Arc::new(Mutex::new(None)),
    }
}

async fn orchestrate(
    config: RunConfig,
    paths: Paths,
    schedule: Schedule,
    scene: Arc<Scene>,
    launch: Launch,
) -> (bool, Arc<Shared>, Record) {
    let shared = Shared::new(&config, &paths, Some(launch));
    shared.log(Record::Params {
        seed: config.seed,
        seconds: config.seconds,
        workers: config.workers,
        keys: config.keys,
        concurrency: config.concurrency,
        grace_ms: config.grace_ms,
        deadline_ms: config.deadline_ms,
        schedule: schedule.cluster_fingerprint(),
        min_faults: config.min_faults,
    });
    shared.log(Record::ClusterParams {
        hosts: WORKER_HOSTS,
        ttl_ms: config.ttl_ms,
        margin_ms: STEP_DOWN_MARGIN_MS,
        unavailable_bound_ms: UNAVAILABLE_BOUND.as_millis() as u64,
    });
    let fds_before = common::own_descriptors();
    let watching = Arc::new(AtomicBool::new(true));
    let tail = tokio::spawn(common::tail_logs(shared.clone(), watching.clone()));
    let poller = tokio::spawn(poll_coordinator(
        shared.clone(),
        scene.clone(),
        watching.clone(),
    ));
    let supervisors: Vec<_> = (0..config.workers)
        .map(|slot| tokio::spawn(common::supervise(shared.clone(), slot)))
        .collect();
    let started = Instant::now();
    while scene.coordinator().is_none() {
        if started.elapsed() > FIRST_TERM_PATIENCE {
            eprintln!(
                "chaos: no coordinator within {FIRST_TERM_PATIENCE:?} of starting the workers"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "chaos: {} workers on {WORKER_HOSTS} hosts × {} keys × {} loops, etcd of {ETCD_MEMBERS}, TTL {} ms, grace window {} ms, deadline {} ms, {} s of faults",
        config.workers,
        config.keys,
        config.concurrency,
        config.ttl_ms,
        config.grace_ms,
        config.deadline_ms,
        config.seconds
    );
    let clients = TlsClients::new(&scene.certs, scene.advertised.clone(), &paths.stderr)
        .unwrap_or_else(|error| panic!("the certificates that set_up made do not load: {error}"));
    let target = Arc::new(Target::Tls(Arc::new(clients)));
    let until = Instant::now() + Duration::from_secs(config.seconds);
    let lane = tokio::spawn(nemesis(
        shared.clone(),
        scene.clone(),
        schedule.clone(),
        until,
    ));
    let hostile_lane = tokio::spawn(hostile::run(
        shared.clone(),
        target.clone(),
        schedule.tls_hostiles(),
        until,
    ));
    let _ = lane.await;
    for task in hostile_lane.await.unwrap_or_default() {
        let _ = task.await;
    }
    // Whatever a fault left (a lane that ended early) is undone first.
    scene.heal_all();
    tokio::time::sleep(common::CALM_AFTER_FAULTS).await;
    // The calm phase: every hostile client once, with no other fault. A
    // failover that a fault of the lane started may still be under way:
    // an inconclusive client waits for one (TTL + grace window) and tries
    // again.
    let kinds: Vec<Hostile> = TLS_HOSTILES.iter().map(|&(kind, _)| kind).collect();
    hostile::calm(
        shared.clone(),
        target,
        &kinds,
        Rng::fork(config.seed, 6).next_u64(),
        CALM_RETRIES,
        Duration::from_millis(config.ttl_ms + config.grace_ms),
        true,
    )
    .await;

    let hung = common::stop_workers(&shared, supervisors).await;
    // One call from the harness's own namespace after every worker has
    // gone: it must lead, in a term above every earlier one.
    let listen = SocketAddr::new(scene.hosts.bridge_address(), 0);
    let probe = common::final_probe(
        SingleFlight::cluster(
            scene
                .cluster(listen, Duration::from_millis(config.ttl_ms))
                .directory(paths.flights.join("probe")),
        )
        .grace_window(Duration::from_millis(config.grace_ms)),
        PROBE_DEADLINE,
    )
    .await;
    watching.store(false, Ordering::SeqCst);
    let _ = poller.await;
    let _ = tail.await;
    let processes_alive = common::processes_alive(&shared);
    let epoch_key = read_epoch_key(&scene)
        .await
        .unwrap_or_else(|error| format!("unreadable: {error}"));
    let last = Record::Final {
        t: now_us(),
        files: Vec::new(),
        temp_files: Vec::new(),
        processes_alive,
        hung_workers: hung,
        fds_before,
        fds_after: 0,
        probe: probe.0,
        probe_epoch: probe.1,
        epoch_file: epoch_key,
        coordinator_fds_max: 0,
    };
    (true, shared, last)
}

fn key(name: &str) -> String {
    format!("single-flight/{CLUSTER_NAME}/{name}")
}

fn etcd_client(endpoints: &[String]) -> Result<Client, String> {
    Client::connect(endpoints, None, ETCD_REQUEST)
}

async fn read_epoch_key(scene: &Scene) -> Result<String, String> {
    let client = etcd_client(&scene.endpoints)?;
    let answer = tokio::time::timeout(ETCD_REQUEST * 5, client.get(key("epoch")))
        .await
        .map_err(|_| "etcd did not answer".to_owned())?
        .map_err(|error| describe(&error))?;
    let kv = answer.kvs.first().ok_or("no epoch key")?;
    String::from_utf8(kv.value.clone()).map_err(|e| e.to_string())
}

/// Reads the coordinator and epoch keys in one request every
/// `COORDINATOR_POLL`, and logs each change: the term's epoch and the
/// worker whose address the key holds, or that the key is gone.
async fn poll_coordinator(shared: Arc<Shared>, scene: Arc<Scene>, watching: Arc<AtomicBool>) {
    let mut client = None;
    let mut last: Option<Option<(u32, u32)>> = None;
    let prefix = key("");
    while watching.load(Ordering::SeqCst) {
        tokio::time::sleep(COORDINATOR_POLL).await;
        if client.is_none() {
            client = etcd_client(&scene.endpoints).ok();
        }
        let Some(etcd) = client.as_ref() else {
            continue;
        };
        let read = tokio::time::timeout(ETCD_REQUEST, etcd.get_prefix(prefix.clone()));
        let answer = match read.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) | Err(_) => continue,
        };
        let t = now_us();
        let mut epoch = None;
        let mut address = None;
        for kv in &answer.kvs {
            let value = std::str::from_utf8(&kv.value).ok();
            match std::str::from_utf8(&kv.key)
                .ok()
                .and_then(|k| k.strip_prefix(&prefix))
            {
                Some("epoch") => epoch = value.and_then(|v| v.parse::<u32>().ok()),
                Some("coordinator") => address = value.map(str::to_owned),
                _ => {}
            }
        }
        let worker = address
            .as_deref()
            .and_then(|a| a.rsplit(':').next())
            .and_then(|port| port.parse::<u16>().ok())
            .and_then(|port| port.checked_sub(common::WORKER_PORT_BASE))
            .map(u32::from);
        let now = match (address.is_some(), epoch, worker) {
            (true, Some(epoch), Some(worker)) => Some((epoch, worker)),
            _ => None,
        };
        // A key whose address names no worker is the final probe's.
        if address.is_some() && now.is_none() {
            continue;
        }
        *scene.coordinator.lock().expect("coordinator lock") = now;
        *scene.advertised.lock().expect("advertised lock") = address.zip(worker);
        if let Some((epoch, worker)) = now
            && let Some(pid) = shared.pid_of(worker)
        {
            *shared.seen.lock().expect("seen lock") = Some(Seen { epoch, pid });
        }
        if last != Some(now) {
            last = Some(now);
            shared.log(Record::Coordinator {
                t,
                epoch: now.map(|(e, _)| e),
                worker: now.map(|(_, w)| w),
            });
        }
    }
}

// ------------------------------------------------------------------ nemesis

async fn nemesis(shared: Arc<Shared>, scene: Arc<Scene>, schedule: Schedule, until: Instant) {
    let lane_shared = shared.clone();
    let plans = schedule.cluster_faults();
    crate::nemesis::lane(
        &shared,
        plans,
        until,
        cluster_fault_name,
        move |fault, draw, _| {
            let (shared, scene) = (lane_shared.clone(), scene.clone());
            async move { inject(&shared, &scene, fault, draw).await }
        },
    )
    .await;
}

/// A leader in the middle of its work, as the workers' logs show it.
struct Leader {
    worker: u32,
    pid: u32,
    key: String,
    token: u64,
    remaining_ms: i64,
}

/// Workers (running, not stopped, not `except`) leading a flight whose
/// fenced write is still ahead.
fn leaders(shared: &Shared, except: Option<u32>) -> Vec<Leader> {
    let view = shared.view.lock().expect("view lock");
    let procs = shared.procs.lock().expect("procs lock");
    let now_ms = (now_us() / 1000) as i64;
    let mut found = Vec::new();
    for (&pid, &(_, worker)) in &procs.alive {
        if procs.stopped.contains(&pid) || Some(worker) == except {
            continue;
        }
        let Some(calls) = view.workers.get(&worker) else {
            continue;
        };
        for open in calls.values() {
            if let Some(lead) = open.lead.as_ref().filter(|l| !l.wrote) {
                found.push(Leader {
                    worker,
                    pid,
                    key: open.key.clone(),
                    token: lead.token,
                    remaining_ms: (lead.t / 1000) as i64 + lead.work_ms as i64 - now_ms,
                });
            }
        }
    }
    found
}

/// Workers (running, not stopped, not `except`) with a call waiting on a
/// key that another worker leads: joiners, most likely.
fn joiners(shared: &Shared, except: Option<u32>) -> Vec<(u32, String)> {
    let led: Vec<String> = leaders(shared, None).into_iter().map(|l| l.key).collect();
    let view = shared.view.lock().expect("view lock");
    let procs = shared.procs.lock().expect("procs lock");
    let mut found = Vec::new();
    for (&pid, &(_, worker)) in &procs.alive {
        if procs.stopped.contains(&pid) || Some(worker) == except {
            continue;
        }
        let Some(calls) = view.workers.get(&worker) else {
            continue;
        };
        if calls.values().any(|c| c.lead.is_some()) {
            continue;
        }
        if let Some(open) = calls.values().find(|c| led.contains(&c.key)) {
            found.push((pid, open.key.clone()));
        }
    }
    found
}

/// The coordinator's epoch, worker, pid and host, if it runs.
fn coordinator(shared: &Shared, scene: &Scene) -> Option<(u32, u32, u32, usize)> {
    let (epoch, worker) = scene.coordinator()?;
    let pid = shared.pid_of(worker)?;
    let slot = shared.procs.lock().expect("procs lock").alive.get(&pid)?.0;
    let host = shared.launch.as_ref()?.host_of(slot);
    Some((epoch, worker, pid, host))
}

/// The worker that coordinates now. A fault that waits for its target reads
/// it again at every look: a failover during the wait makes another worker
/// the coordinator (excluding the one seen before the wait once let
/// `kill_leader` kill a new coordinator, unlogged as such).
fn serving(shared: &Shared, scene: &Scene) -> Option<u32> {
    coordinator(shared, scene).map(|(_, worker, _, _)| worker)
}

/// `kill -9` of a worker chosen as a leader or a joiner. Should it be the
/// coordinator by now (its election won between the choice and the kill),
/// the kill is logged as a coordinator's, with its failover and outage.
fn kill_worker(shared: &Shared, scene: &Scene, pid: u32) {
    match coordinator(shared, scene) {
        Some((epoch, _, coordinator_pid, _)) if coordinator_pid == pid => {
            kill_coordinator(shared, epoch, pid);
        }
        _ => {
            shared.kill(pid, None);
        }
    }
}

/// A target host: the coordinator's in `percent` of the draws.
fn pick_host(rng: &mut Rng, coordinator_host: Option<usize>, percent: u64) -> usize {
    match coordinator_host {
        Some(host) if rng.chance(percent) => host,
        _ => rng.below(WORKER_HOSTS as u64) as usize,
    }
}

/// Logs the outages of cutting `host` off for `[from, to]`: its own, and
/// everyone's when it holds the coordinator (its term ends or goes silent).
fn log_outage(shared: &Shared, from: u64, to: u64, host: usize, coordinator: bool, what: &str) {
    if coordinator {
        shared.disturb(from, to + DISTURBANCE_SLACK_US);
    }
    shared.log(Record::Outage {
        from,
        to,
        host: Some(host),
        what: what.to_owned(),
    });
    if coordinator {
        shared.log(Record::Outage {
            from,
            to,
            host: None,
            what: format!("{what} (the coordinator's host)"),
        });
    }
}

fn log_global_outage(shared: &Shared, from: u64, to: u64, what: &str) {
    shared.disturb(from, to + DISTURBANCE_SLACK_US);
    shared.log(Record::Outage {
        from,
        to,
        host: None,
        what: what.to_owned(),
    });
}

/// How long after an outage ends the coordinator still counts as disturbed
/// for the hostile clients' verdicts: a term that ended during it is
/// followed by a campaign and a grace window, and a healed link by the
/// retransmissions that were waiting.
const DISTURBANCE_SLACK_US: u64 = 1_000_000;

/// How long past a failover (TTL + grace window) a fault waits for its
/// target (a coordinator, a leader in its work, a joiner) before it is
/// skipped: a cluster spends much of a run failing over, when nobody leads,
/// and a skipped fault is not counted.
const TARGET_SLACK: Duration = Duration::from_millis(1000);

/// What `find` finds, as soon as it finds anything within `patience`.
async fn soon<T>(patience: Duration, find: impl Fn() -> Vec<T>) -> Vec<T> {
    let started = Instant::now();
    loop {
        let found = find();
        if !found.is_empty() || started.elapsed() > patience {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `kill -9` of the coordinator's process: a failover starts, and nobody
/// reaches a coordinator until its lease expires.
fn kill_coordinator(shared: &Shared, epoch: u32, pid: u32) {
    let t = now_us();
    shared.log(Record::Failover {
        t,
        kind: "kill_coordinator".into(),
        epoch,
    });
    let ttl = shared.config.ttl_ms;
    log_global_outage(shared, t, t + ttl * 1000, "the coordinator killed");
    shared.kill(pid, Some(epoch));
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The index of etcd's leader among the members, asked of each member in
/// turn (a stopped or dead one does not answer).
async fn etcd_leader(scene: &Scene) -> Option<usize> {
    for (index, endpoint) in scene.endpoints.iter().enumerate() {
        let Ok(client) = etcd_client(std::slice::from_ref(endpoint)) else {
            continue;
        };
        let Ok(Ok(status)) = tokio::time::timeout(ETCD_REQUEST, client.status()).await else {
            continue;
        };
        let own = status.header.map(|h| h.member_id);
        if own == Some(status.leader) {
            return Some(index);
        }
    }
    None
}

async fn inject(shared: &Arc<Shared>, scene: &Scene, fault: ClusterFault, draw: u64) -> Injected {
    let mut rng = Rng::new(draw);
    let ttl = shared.config.ttl_ms;
    let grace = shared.config.grace_ms;
    let patience = Duration::from_millis(ttl + grace) + TARGET_SLACK;
    let needs_coordinator = matches!(
        fault,
        ClusterFault::KillCoordinator
            | ClusterFault::PauseLeaderLongFailover
            | ClusterFault::PauseCoordinatorShort
            | ClusterFault::PauseCoordinatorLong
    );
    if needs_coordinator {
        soon(patience, || {
            coordinator(shared, scene).into_iter().collect()
        })
        .await;
    }
    let current = coordinator(shared, scene);
    let coordinator_worker = current.map(|(_, w, _, _)| w);
    let coordinator_host = current.map(|(_, _, _, h)| h);
    match fault {
        ClusterFault::KillCoordinator => {
            let (epoch, _, pid, host) = current.ok_or("no coordinator runs")?;
            kill_coordinator(shared, epoch, pid);
            Ok((
                Some(pid),
                format!("coordinator of epoch {epoch} on host {host}"),
            ))
        }
        ClusterFault::KillLeader => {
            let candidates = soon(patience, || leaders(shared, serving(shared, scene))).await;
            let chosen = rng
                .pick(&candidates)
                .ok_or("no leader outside the coordinator")?;
            kill_worker(shared, scene, chosen.pid);
            Ok((
                Some(chosen.pid),
                format!("leader of {} (token {})", chosen.key, chosen.token),
            ))
        }
        ClusterFault::KillJoiner => {
            let candidates = soon(patience, || joiners(shared, serving(shared, scene))).await;
            let (pid, key) = rng
                .pick(&candidates)
                .ok_or("no joiner outside the coordinator")?;
            kill_worker(shared, scene, *pid);
            Ok((Some(*pid), format!("a joiner of {key}")))
        }
        ClusterFault::PauseLeaderShort => {
            let candidates = soon(patience, || leaders(shared, serving(shared, scene))).await;
            let chosen = rng
                .pick(&candidates)
                .ok_or("no leader in the middle of its work outside the coordinator")?;
            if serving(shared, scene) == Some(chosen.worker) {
                return Err("the leader found became the coordinator".into());
            }
            let pause = rng.range(50, grace.saturating_sub(150).max(60));
            shared.stop(chosen.pid);
            sleep_ms(pause).await;
            shared.cont(chosen.pid);
            Ok((
                Some(chosen.pid),
                format!(
                    "leader of {} (token {}) stopped for {pause} ms",
                    chosen.key, chosen.token
                ),
            ))
        }
        ClusterFault::PauseLeaderLongFailover => {
            current.ok_or("no coordinator runs")?;
            // The stale leader must still have its write ahead of it. A
            // coordinator just found may be in its grace window, where
            // nobody leads yet: wait for a leader as `kill_leader` does.
            let chosen = soon(patience, || leaders(shared, serving(shared, scene)))
                .await
                .into_iter()
                .max_by_key(|l| l.remaining_ms)
                .ok_or("no leader in the middle of its work outside the coordinator")?;
            // The coordinator, read again after the wait: the one to kill,
            // which must not be the leader's own process.
            let (epoch, worker, coordinator_pid, _) =
                coordinator(shared, scene).ok_or("no coordinator runs")?;
            if worker == chosen.worker {
                return Err("the leader found became the coordinator".into());
            }
            // Past the dead coordinator's lease and the next term's grace
            // window, with time for a newer flight of its key to write.
            let pause = rng.range(ttl + grace + 800, ttl + grace + 2000);
            shared.stop(chosen.pid);
            kill_coordinator(shared, epoch, coordinator_pid);
            sleep_ms(pause).await;
            shared.cont(chosen.pid);
            Ok((
                Some(chosen.pid),
                format!(
                    "leader of {} (worker {}, token {}, {} ms of work left) stopped for {pause} ms; killed the coordinator of epoch {epoch}",
                    chosen.key, chosen.worker, chosen.token, chosen.remaining_ms
                ),
            ))
        }
        ClusterFault::PauseCoordinatorShort | ClusterFault::PauseCoordinatorLong => {
            let (epoch, _, pid, host) = current.ok_or("no coordinator runs")?;
            let long = fault == ClusterFault::PauseCoordinatorLong;
            let pause = if long {
                rng.range(ttl + 300, ttl + 1500)
            } else {
                // Under the margin, less a scheduling slack: the term must
                // survive it.
                rng.range(50, STEP_DOWN_MARGIN_MS - 300)
            };
            let t = now_us();
            if long {
                shared.log(Record::Failover {
                    t,
                    kind: "pause_coordinator_long".into(),
                    epoch,
                });
            }
            log_global_outage(shared, t, t + pause * 1000, "the coordinator stopped");
            shared.stop(pid);
            sleep_ms(pause).await;
            shared.cont(pid);
            Ok((
                Some(pid),
                format!("coordinator of epoch {epoch} on host {host} stopped for {pause} ms"),
            ))
        }
        ClusterFault::PartitionShort | ClusterFault::PartitionLong => {
            let host = pick_host(&mut rng, coordinator_host, 60);
            let long = fault == ClusterFault::PartitionLong;
            let span = if long {
                rng.range(ttl + 300, ttl + 1500)
            } else {
                rng.range(300, ttl.saturating_sub(300).max(400))
            };
            let holds = coordinator_host == Some(host);
            let t = now_us();
            if holds
                && long
                && let Some((epoch, ..)) = current
            {
                shared.log(Record::Failover {
                    t,
                    kind: "partition_long".into(),
                    epoch,
                });
            }
            log_outage(shared, t, t + span * 1000, host, holds, "partitioned");
            // The harness reaches the host through its link too: the
            // hostile clients of a coordinator there are cut off with it.
            let cut = shared.cut(host, t, t + span * 1000);
            scene.partitioned.lock().expect("lock").push(host);
            scene.hosts.partition(host);
            sleep_ms(span).await;
            scene.hosts.heal(host);
            shared.end_cut(cut, now_us());
            scene
                .partitioned
                .lock()
                .expect("lock")
                .retain(|&h| h != host);
            Ok((
                None,
                format!(
                    "host {host}{} cut off for {span} ms",
                    if holds { " (the coordinator's)" } else { "" }
                ),
            ))
        }
        ClusterFault::PartitionFromEtcd | ClusterFault::PartitionFromHosts => {
            let host = pick_host(&mut rng, coordinator_host, 60);
            let span = rng.range(300, ttl + 1500);
            let others: Vec<usize> = if fault == ClusterFault::PartitionFromEtcd {
                (0..ETCD_MEMBERS).map(Scene::etcd_host).collect()
            } else {
                (0..WORKER_HOSTS).filter(|&h| h != host).collect()
            };
            let holds = coordinator_host == Some(host);
            let t = now_us();
            if holds
                && fault == ClusterFault::PartitionFromEtcd
                && span > ttl
                && let Some((epoch, ..)) = current
            {
                shared.log(Record::Failover {
                    t,
                    kind: "partition_from_etcd".into(),
                    epoch,
                });
            }
            let what = if fault == ClusterFault::PartitionFromEtcd {
                "cut from etcd"
            } else {
                "cut from the other hosts"
            };
            log_outage(shared, t, t + span * 1000, host, holds, what);
            for &other in &others {
                scene.cuts.lock().expect("lock").push((host, other));
                scene.hosts.cut(host, other);
            }
            sleep_ms(span).await;
            for &other in &others {
                scene.hosts.uncut(host, other);
                scene
                    .cuts
                    .lock()
                    .expect("lock")
                    .retain(|&c| c != (host, other));
            }
            Ok((
                None,
                format!(
                    "host {host}{} {what} for {span} ms",
                    if holds { " (the coordinator's)" } else { "" }
                ),
            ))
        }
        ClusterFault::KillHost => {
            let host = pick_host(&mut rng, coordinator_host, 60);
            let holds = coordinator_host == Some(host);
            let t = now_us();
            if holds && let Some((epoch, ..)) = current {
                shared.log(Record::Failover {
                    t,
                    kind: "kill_host".into(),
                    epoch,
                });
                log_global_outage(shared, t, t + ttl * 1000, "the coordinator's host killed");
            }
            let launch = shared.launch.as_ref().expect("the cluster form has hosts");
            let victims: Vec<(u32, u32)> = shared
                .procs
                .lock()
                .expect("procs lock")
                .alive
                .iter()
                .filter(|(_, (slot, _))| launch.host_of(*slot) == host)
                .map(|(&pid, &(_, worker))| (pid, worker))
                .collect();
            for &(pid, worker) in &victims {
                let epoch = current.filter(|&(_, w, _, _)| w == worker).map(|(e, ..)| e);
                shared.kill(pid, epoch);
            }
            // Anything else in the namespace goes too, as with a host: a
            // worker that its supervisor is starting at this moment among
            // them. Each is marked killed before its signal, so that its
            // exit counts as the nemesis's (`kill_all` alone killed a worker
            // spawned after the list above, whose death then counted as a
            // crash); one that starts after this listing lives, as if it
            // started after the host died.
            for pid in scene.hosts.pids(host) {
                if !victims.iter().any(|&(victim, _)| victim == pid) {
                    shared.procs.lock().expect("procs lock").killed.insert(pid);
                    common::signal(pid, Signal::KILL);
                }
            }
            Ok((
                None,
                format!(
                    "host {host}{}: {} workers killed",
                    if holds { " (the coordinator's)" } else { "" },
                    victims.len()
                ),
            ))
        }
        ClusterFault::KillEtcdMember
        | ClusterFault::KillEtcdLeader
        | ClusterFault::KillEtcdQuorum => {
            let leader = etcd_leader(scene).await;
            let members: Vec<usize> = match fault {
                ClusterFault::KillEtcdLeader => vec![leader.ok_or("etcd has no leader")?],
                ClusterFault::KillEtcdMember => {
                    let followers: Vec<usize> =
                        (0..ETCD_MEMBERS).filter(|&m| Some(m) != leader).collect();
                    vec![*rng.pick(&followers).expect("three members")]
                }
                _ => {
                    let first = rng.below(ETCD_MEMBERS as u64) as usize;
                    vec![first, (first + 1) % ETCD_MEMBERS]
                }
            };
            let span = rng.range(300, ttl + 500);
            let t = now_us();
            log_global_outage(shared, t, t + span * 1000, "etcd members killed");
            {
                let mut etcd = scene.etcd.lock().expect("etcd lock");
                for &member in &members {
                    etcd.kill(member);
                }
            }
            scene.etcd_down.lock().expect("lock").extend(&members);
            sleep_ms(span).await;
            {
                let mut etcd = scene.etcd.lock().expect("etcd lock");
                for &member in &members {
                    etcd.restart(member);
                }
            }
            scene
                .etcd_down
                .lock()
                .expect("lock")
                .retain(|m| !members.contains(m));
            Ok((
                None,
                format!("etcd members {members:?} (leader {leader:?}) down for {span} ms"),
            ))
        }
        ClusterFault::StopEtcdLeader => {
            let leader = etcd_leader(scene).await.ok_or("etcd has no leader")?;
            let pids = scene.hosts.pids(Scene::etcd_host(leader));
            let span = rng.range(300, ttl + 500);
            let t = now_us();
            log_global_outage(shared, t, t + span * 1000, "etcd's leader stopped");
            for &pid in &pids {
                scene.etcd_stopped.lock().expect("lock").push(pid);
                common::signal(pid, Signal::STOP);
            }
            sleep_ms(span).await;
            for &pid in &pids {
                common::signal(pid, Signal::CONT);
            }
            scene
                .etcd_stopped
                .lock()
                .expect("lock")
                .retain(|p| !pids.contains(p));
            Ok((None, format!("etcd leader m{leader} stopped for {span} ms")))
        }
        ClusterFault::DropConnection => {
            let candidates: Vec<(u32, u32)> = {
                let view = shared.view.lock().expect("view lock");
                let procs = shared.procs.lock().expect("procs lock");
                procs
                    .alive
                    .iter()
                    .filter(|(pid, _)| !procs.stopped.contains(pid))
                    .filter(|(_, (_, w))| view.workers.get(w).is_some_and(|c| !c.is_empty()))
                    .map(|(&pid, &(_, worker))| (pid, worker))
                    .collect()
            };
            let &(pid, worker) = rng
                .pick(&candidates)
                .ok_or("no worker with calls in progress")?;
            let holds = coordinator_worker == Some(worker);
            if holds {
                let t = now_us();
                log_global_outage(shared, t, t + 3_500_000, "the coordinator closes");
            }
            std::fs::write(shared.paths.control.join(format!("reopen-{worker}")), b"")
                .map_err(|e| format!("cannot write the control file: {e}"))?;
            shared.log(Record::ReopenAsked {
                t: now_us(),
                pid,
                worker,
            });
            sleep_ms(100).await;
            Ok((
                Some(pid),
                format!(
                    "close and reopen with calls in progress{}",
                    if holds { " (the coordinator)" } else { "" }
                ),
            ))
        }
    }
}
