//! What every part of a run shares, the local form's and the cluster
//! form's alike: its configuration and paths, the shared view of the
//! workers and the coordinator (`Shared`), the workers' supervision, the
//! tail of their logs, the status poller and the final probe. It uses none
//! of the modules that use it (the orchestrators `run` and `cluster`, the
//! lanes `nemesis` and `hostile`, the checker), so that the harness's
//! modules import each other in no circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use single_flight::_internal::LOG_TARGET;
use single_flight::Status;

use crate::records::{LogFile, Record, now_us};

/// How often the status poller asks the coordinator who it is: often
/// enough to see most terms, rarely enough to cost the coordinator nothing.
const STATUS_POLL: Duration = Duration::from_millis(50);

/// How often the orchestrator reads the workers' new log lines.
const TAIL_POLL: Duration = Duration::from_millis(15);

/// The pause between the last fault of the lanes and the calm phase, so
/// that the last failover's grace window is over.
pub const CALM_AFTER_FAULTS: Duration = Duration::from_millis(1500);

/// The final probe's deadline: a new term after the last workers closed.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// A killed worker is respawned after this pause, as a supervisor would.
pub const RESPAWN_DELAY: Duration = Duration::from_millis(100);

/// After the stop file, a worker ends its calls (each within its deadline
/// and the checker's bound) and closes (up to 2 s for lands, 1 s to flush).
/// Past this slack beyond the deadline it is reported as hung and killed.
pub const EXIT_SLACK: Duration = Duration::from_secs(12);

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub seconds: u64,
    pub workers: usize,
    pub keys: usize,
    pub concurrency: usize,
    pub grace_ms: u64,
    pub deadline_ms: u64,
    pub min_faults: u64,
    pub keep: bool,
    /// A soft limit on descriptors for the whole run (workers inherit it).
    pub nofile: Option<u64>,
    /// The cluster form (`--cluster`).
    pub cluster: bool,
    /// The cluster's lease TTL.
    pub ttl_ms: u64,
}

#[derive(Clone, Debug)]
pub struct Paths {
    pub root: PathBuf,
    pub flights: PathBuf,
    pub logs: PathBuf,
    pub control: PathBuf,
    pub fence: PathBuf,
    pub epochs: PathBuf,
    pub stderr: PathBuf,
}

impl Paths {
    pub fn new(root: &Path) -> Paths {
        Paths {
            root: root.to_owned(),
            flights: root.join("flights"),
            logs: root.join("logs"),
            control: root.join("control"),
            fence: root.join("fence.db"),
            epochs: root.join("epochs"),
            stderr: root.join("stderr"),
        }
    }

    pub fn nemesis_log(&self) -> PathBuf {
        self.logs.join("nemesis.jsonl")
    }
}

/// The workers as the supervisor knows them.
#[derive(Default)]
pub struct Procs {
    /// pid → (slot, worker number) of the processes running now.
    pub alive: BTreeMap<u32, (usize, u32)>,
    /// pids that the nemesis killed and that are not reaped yet.
    pub killed: BTreeSet<u32>,
    pub stopped: BTreeSet<u32>,
    pub spawned: Vec<u32>,
}

/// The coordinator as the status poller last saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub epoch: u32,
    pub pid: u32,
}

/// What the orchestrator knows of the workers' calls in progress, from
/// their logs: enough to find a leader in the middle of its work.
#[derive(Default)]
pub struct View {
    /// Calls in progress by worker number, then call number.
    pub workers: BTreeMap<u32, BTreeMap<u64, OpenCall>>,
    offsets: BTreeMap<PathBuf, u64>,
}

pub struct OpenCall {
    pub key: String,
    pub lead: Option<Lead>,
}

pub struct Lead {
    pub token: u64,
    pub t: u64,
    pub work_ms: u64,
    pub wrote: bool,
}

impl View {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Call {
                worker, call, key, ..
            } => {
                self.workers
                    .entry(worker)
                    .or_default()
                    .insert(call, OpenCall { key, lead: None });
            }
            Record::Work {
                worker,
                call,
                token,
                t,
                work_ms,
                ..
            } => {
                if let Some(open) = self.workers.get_mut(&worker).and_then(|p| p.get_mut(&call)) {
                    open.lead = Some(Lead {
                        token,
                        t,
                        work_ms,
                        wrote: false,
                    });
                }
            }
            Record::Write { worker, call, .. } => {
                if let Some(lead) = self
                    .workers
                    .get_mut(&worker)
                    .and_then(|p| p.get_mut(&call))
                    .and_then(|open| open.lead.as_mut())
                {
                    lead.wrote = true;
                }
            }
            Record::Done { worker, call, .. } => {
                if let Some(calls) = self.workers.get_mut(&worker) {
                    calls.remove(&call);
                }
            }
            Record::Exit { worker, .. } => {
                self.workers.remove(&worker);
            }
            _ => {}
        }
    }

    /// The worker leading `token`, and its lead.
    pub fn leader_of(&self, token: u64) -> Option<(u32, &OpenCall)> {
        self.workers.iter().find_map(|(&worker, calls)| {
            calls
                .values()
                .find(|open| open.lead.as_ref().is_some_and(|l| l.token == token))
                .map(|open| (worker, open))
        })
    }
}

/// How the workers of the cluster form are started: each on its host, with
/// the cluster's options. The local form starts them as plain children.
pub struct Launch {
    /// The command prefix that runs a program on each host.
    pub prefixes: Vec<Vec<String>>,
    /// Each host's address, which its workers listen on.
    pub addresses: Vec<std::net::IpAddr>,
    /// Options that every worker gets (etcd, certificates, TTL).
    pub args: Vec<String>,
}

impl Launch {
    /// The host of a slot: slots take the hosts in turn.
    pub fn host_of(&self, slot: usize) -> usize {
        slot % self.addresses.len()
    }
}

/// The first port of the workers' listen addresses: worker `n` listens on
/// `WORKER_PORT_BASE + n`, so that the address in the coordinator key names
/// the worker (ports of one host never repeat within a run).
pub const WORKER_PORT_BASE: u16 = 20_000;

/// The most workers one run can name by port: their ports stay below
/// Linux's ephemeral range (from 32 768), where outgoing connections of the
/// same host could hold them.
pub const MAX_WORKERS: u32 = 12_000;

/// How long after a stop or a cut ends it may still hinder a hostile client:
/// a resumed coordinator works off what waited, and a healed link carries
/// the retransmissions that were waiting.
const HINDRANCE_SLACK_US: u64 = 1_000_000;

pub struct Shared {
    pub config: RunConfig,
    /// The cluster form's hosts; `None` in the local form.
    pub launch: Option<Launch>,
    pub paths: Paths,
    log: Mutex<LogFile>,
    pub procs: Mutex<Procs>,
    pub view: Mutex<View>,
    pub seen: Mutex<Option<Seen>>,
    /// Times when the coordinator was down, stopped or unreachable because
    /// of a fault: a hostile client's surprise then proves nothing.
    disturbances: Mutex<Vec<(u64, u64)>>,
    /// When each process was stopped by the nemesis (pid, from, to; `to`
    /// is `u64::MAX` until it is resumed): a coordinator stopped during a
    /// hostile client may have kept it waiting.
    stops: Mutex<Vec<(u32, u64, u64)>>,
    /// When the harness's own path to the coordinator's host was cut (the
    /// cluster form's partitions of that host): bytes wait, and a connection
    /// may be aborted by TCP while the coordinator lives.
    cuts: Mutex<Vec<(usize, u64, u64)>>,
    /// Held for reading by the hostile clients that need a living
    /// coordinator for seconds (`hostile::needs_quiet`), for writing by the
    /// local form's nemesis while it injects a fault: those clients run
    /// while the harness knows that it disturbs nobody, and each fault
    /// waits for at most one of them.
    pub quiet: tokio::sync::RwLock<()>,
    pub stopping: AtomicBool,
    /// The number of the next worker process.
    next_worker: AtomicU32,
    /// The most descriptors a coordinator process held at one sample.
    pub coordinator_fds_max: Mutex<usize>,
}

impl Shared {
    pub fn new(config: &RunConfig, paths: &Paths, launch: Option<Launch>) -> Arc<Shared> {
        let log = LogFile::create(&paths.nemesis_log()).expect("cannot create the nemesis log");
        Arc::new(Shared {
            config: config.clone(),
            launch,
            paths: paths.clone(),
            log: Mutex::new(log),
            procs: Mutex::new(Procs::default()),
            view: Mutex::new(View::default()),
            seen: Mutex::new(None),
            disturbances: Mutex::new(Vec::new()),
            stops: Mutex::new(Vec::new()),
            cuts: Mutex::new(Vec::new()),
            quiet: tokio::sync::RwLock::new(()),
            stopping: AtomicBool::new(false),
            next_worker: AtomicU32::new(1),
            coordinator_fds_max: Mutex::new(0),
        })
    }

    pub fn log(&self, record: Record) {
        self.log.lock().expect("log lock").write(&record);
    }

    /// Records that the coordinator is disturbed from `from` to `to`;
    /// returns a handle to move the end once it is known.
    pub fn disturb(&self, from: u64, to: u64) -> usize {
        let mut disturbances = self.disturbances.lock().expect("disturbances lock");
        disturbances.push((from, to));
        disturbances.len() - 1
    }

    pub fn end_disturbance(&self, handle: usize, to: u64) {
        if let Some(disturbance) = self
            .disturbances
            .lock()
            .expect("disturbances lock")
            .get_mut(handle)
        {
            disturbance.1 = to;
        }
    }

    pub fn disturbed(&self, from: u64, to: u64) -> bool {
        self.disturbances
            .lock()
            .expect("disturbances lock")
            .iter()
            .any(|&(a, b)| a <= to && from <= b)
    }

    /// Whether a disturbance other than `except` overlaps `[from, to]`.
    pub fn disturbed_apart(&self, from: u64, to: u64, except: usize) -> bool {
        self.disturbances
            .lock()
            .expect("disturbances lock")
            .iter()
            .enumerate()
            .any(|(handle, &(a, b))| handle != except && a <= to && from <= b)
    }

    /// Records that the harness's path to the host `host` is cut from
    /// `from` to `to`; returns a handle to move the end once the link is
    /// healed.
    #[cfg(feature = "cluster")]
    pub fn cut(&self, host: usize, from: u64, to: u64) -> usize {
        let mut cuts = self.cuts.lock().expect("cuts lock");
        cuts.push((host, from, to));
        cuts.len() - 1
    }

    #[cfg(feature = "cluster")]
    pub fn end_cut(&self, handle: usize, to: u64) {
        if let Some(cut) = self.cuts.lock().expect("cuts lock").get_mut(handle) {
            cut.2 = cut.2.max(to);
        }
    }

    /// Whether the coordinator process `pid` was stopped, and whether the
    /// harness's path to its host was cut, at some time in `[from, to]` (or
    /// in the `HINDRANCE_SLACK_US` after): what it owed a hostile client may
    /// have come late, or TCP may have aborted its connection, through no
    /// fault of its own.
    pub fn hindered(&self, pid: u32, from: u64, to: u64) -> (bool, bool) {
        let overlaps = |a: u64, b: u64| a <= to && from <= b.saturating_add(HINDRANCE_SLACK_US);
        // The host of a process that is no longer known is not known
        // either: every cut counts then.
        let host = self.launch.as_ref().and_then(|launch| {
            let slot = self.procs.lock().expect("procs lock").alive.get(&pid)?.0;
            Some(launch.host_of(slot))
        });
        let stopped = self
            .stops
            .lock()
            .expect("stops lock")
            .iter()
            .any(|&(stopped, a, b)| stopped == pid && overlaps(a, b));
        let cut = self
            .cuts
            .lock()
            .expect("cuts lock")
            .iter()
            .any(|&(cut, a, b)| host.is_none_or(|host| host == cut) && overlaps(a, b));
        (stopped, cut)
    }

    pub fn seen(&self) -> Option<Seen> {
        self.seen.lock().expect("seen lock").clone()
    }

    /// The pid of the live worker `worker`.
    pub fn pid_of(&self, worker: u32) -> Option<u32> {
        self.procs
            .lock()
            .expect("procs lock")
            .alive
            .iter()
            .find(|(_, (_, w))| *w == worker)
            .map(|(&pid, _)| pid)
    }

    pub fn is_worker(&self, pid: u32) -> bool {
        self.procs
            .lock()
            .expect("procs lock")
            .alive
            .contains_key(&pid)
    }

    /// `SIGKILL`s a worker; `epoch` when it was just seen coordinating.
    pub fn kill(&self, pid: u32, epoch: Option<u32>) -> bool {
        let t = now_us();
        self.procs.lock().expect("procs lock").killed.insert(pid);
        self.log(Record::Kill { t, pid, epoch });
        // A worker killed as a leader may have just become the coordinator
        // (as the poller saw it): its connections close all the same.
        if epoch.is_some() || self.seen().is_some_and(|seen| seen.pid == pid) {
            // Every connection to the old term closes; the next term serves
            // within about a hundred milliseconds.
            self.disturb(t, t + 1_000_000);
        }
        signal(pid, Signal::KILL)
    }

    pub fn stop(&self, pid: u32) -> bool {
        self.procs.lock().expect("procs lock").stopped.insert(pid);
        let t = now_us();
        self.stops
            .lock()
            .expect("stops lock")
            .push((pid, t, u64::MAX));
        self.log(Record::Stop { t, pid });
        signal(pid, Signal::STOP)
    }

    pub fn cont(&self, pid: u32) -> bool {
        let resumed = signal(pid, Signal::CONT);
        self.procs.lock().expect("procs lock").stopped.remove(&pid);
        let t = now_us();
        if let Some(stop) = self
            .stops
            .lock()
            .expect("stops lock")
            .iter_mut()
            .rev()
            .find(|(stopped, _, to)| *stopped == pid && *to == u64::MAX)
        {
            stop.2 = t;
        }
        self.log(Record::Cont { t, pid });
        resumed
    }
}

pub fn signal(pid: u32, signal: Signal) -> bool {
    Pid::from_raw(pid as i32).is_some_and(|pid| kill_process(pid, signal).is_ok())
}

/// The coordinator's status, within a bound: `None` when nobody answers
/// (no coordinator, or a stopped one).
pub async fn fresh_status(dir: &Path) -> Option<Status> {
    tokio::time::timeout(
        Duration::from_millis(2500),
        single_flight::SingleFlight::builder(dir).status(),
    )
    .await
    .ok()?
    .ok()
}

pub fn prepare(paths: &Paths) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::remove_dir_all(&paths.root);
    std::fs::create_dir_all(&paths.root)?;
    for dir in [&paths.logs, &paths.control, &paths.epochs, &paths.stderr] {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&paths.flights)?;
    crate::fence::create(&paths.fence).map_err(std::io::Error::other)?;
    Ok(())
}

/// Stops the run's workers: resumes whatever is stopped, asks every worker
/// to finish, and waits for them within a bound; kills and returns those
/// that do not exit in time.
pub async fn stop_workers(
    shared: &Shared,
    supervisors: Vec<tokio::task::JoinHandle<()>>,
) -> Vec<u32> {
    shared.stopping.store(true, Ordering::SeqCst);
    let stopped: Vec<u32> = shared
        .procs
        .lock()
        .expect("procs lock")
        .stopped
        .iter()
        .copied()
        .collect();
    for pid in stopped {
        shared.cont(pid);
    }
    let _ = std::fs::write(shared.paths.control.join("stop"), b"");
    let exit_bound = Duration::from_millis(shared.config.deadline_ms) + EXIT_SLACK;
    let mut hung = Vec::new();
    let waiting = async {
        for supervisor in supervisors {
            let _ = supervisor.await;
        }
    };
    if tokio::time::timeout(exit_bound, waiting).await.is_err() {
        let alive: Vec<u32> = shared
            .procs
            .lock()
            .expect("procs lock")
            .alive
            .keys()
            .copied()
            .collect();
        for pid in alive {
            eprintln!(
                "chaos: worker {pid} did not exit within {exit_bound:?} of the stop; killing it"
            );
            hung.push(pid);
            signal(pid, Signal::KILL);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    hung
}

/// The workers spawned over the run that still run.
pub fn processes_alive(shared: &Shared) -> Vec<u32> {
    shared
        .procs
        .lock()
        .expect("procs lock")
        .spawned
        .iter()
        .copied()
        .filter(|&pid| still_ours(pid))
        .collect()
}

/// Keeps one worker process alive in `slot` until the run stops.
pub async fn supervise(shared: Arc<Shared>, slot: usize) {
    let exe = std::env::current_exe().expect("the harness knows its own path");
    let mut generation = 0u64;
    while !shared.stopping.load(Ordering::SeqCst) {
        generation += 1;
        let worker = shared.next_worker.fetch_add(1, Ordering::SeqCst);
        let config = &shared.config;
        let paths = &shared.paths;
        // Named by the worker's number, as its log is: the cluster checker
        // reads the coordinator's answers from it.
        let stderr = std::fs::File::create(paths.stderr.join(format!("worker-{worker}.txt")))
            .expect("cannot create a worker's stderr file");
        let seed = crate::rng::Rng::fork(config.seed, 1000 + slot as u64 * 100_000 + generation)
            .next_u64();
        let mut command = match &shared.launch {
            None => tokio::process::Command::new(&exe),
            Some(launch) => {
                let host = launch.host_of(slot);
                let (program, rest) = launch.prefixes[host]
                    .split_first()
                    .expect("a host's prefix names a program");
                let mut command = tokio::process::Command::new(program);
                command.args(rest).arg(&exe);
                command
            }
        };
        command
            .arg("worker")
            .arg("--dir")
            .arg(&paths.flights)
            .arg("--logs")
            .arg(&paths.logs)
            .arg("--fence")
            .arg(&paths.fence)
            .arg("--control")
            .arg(&paths.control)
            .args(["--slot", &slot.to_string()])
            .args(["--worker", &worker.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--keys", &config.keys.to_string()])
            .args(["--concurrency", &config.concurrency.to_string()])
            .args(["--grace-ms", &config.grace_ms.to_string()])
            .args(["--deadline-ms", &config.deadline_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        match &shared.launch {
            None => {
                command.env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "single_flight=warn".into()),
                );
            }
            Some(launch) => {
                assert!(worker < MAX_WORKERS, "more workers than ports to name them");
                let listen = std::net::SocketAddr::new(
                    launch.addresses[launch.host_of(slot)],
                    WORKER_PORT_BASE + worker as u16,
                );
                command
                    .args(&launch.args)
                    .arg("--listen")
                    .arg(listen.to_string())
                    // The coordinator's answers (debug) and its terms (info)
                    // are what the cluster checker reads.
                    .env("RUST_LOG", format!("single_flight=info,{LOG_TARGET}=debug"));
            }
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                eprintln!("chaos: cannot spawn a worker: {error}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let pid = child.id().expect("a running child has a pid");
        {
            let mut procs = shared.procs.lock().expect("procs lock");
            procs.alive.insert(pid, (slot, worker));
            procs.spawned.push(pid);
        }
        shared.log(Record::Spawn {
            pid,
            worker,
            slot,
            t: now_us(),
        });
        let status = child.wait().await;
        let expected = {
            let mut procs = shared.procs.lock().expect("procs lock");
            procs.alive.remove(&pid);
            procs.stopped.remove(&pid);
            // Forgotten now: the pid may come back as another worker.
            let killed = procs.killed.remove(&pid);
            let clean = shared.stopping.load(Ordering::SeqCst)
                && status.as_ref().is_ok_and(|s| s.success());
            killed || clean
        };
        shared
            .view
            .lock()
            .expect("view lock")
            .workers
            .remove(&worker);
        let status = match status {
            Ok(status) => status.to_string(),
            Err(error) => format!("cannot wait: {error}"),
        };
        shared.log(Record::Exited {
            pid,
            worker,
            slot,
            t: now_us(),
            status,
            expected,
        });
        tokio::time::sleep(RESPAWN_DELAY).await;
    }
}

/// Watches who coordinates. Each change of term is logged; the checker
/// requires every new term to have a larger epoch.
pub async fn poll_status(shared: Arc<Shared>, watching: Arc<AtomicBool>) {
    let mut last: Option<(u32, u32)> = None;
    let mut sampled = Instant::now();
    while watching.load(Ordering::SeqCst) {
        if let Some(status) = fresh_status(&shared.paths.flights).await {
            let epoch = status.epoch.get();
            let t = now_us();
            if last != Some((epoch, status.pid)) {
                last = Some((epoch, status.pid));
                shared.log(Record::Term {
                    t,
                    epoch,
                    pid: status.pid,
                });
            }
            *shared.seen.lock().expect("seen lock") = Some(Seen {
                epoch,
                pid: status.pid,
            });
            if sampled.elapsed() > Duration::from_millis(500) {
                sampled = Instant::now();
                let fds = descriptors_of(status.pid);
                let mut max = shared.coordinator_fds_max.lock().expect("fds lock");
                *max = (*max).max(fds);
            }
        }
        tokio::time::sleep(STATUS_POLL).await;
    }
}

/// Follows the workers' logs (complete lines only), reading only what was
/// appended since the last look, and forgetting the logs of workers that
/// are gone once they have been read to the end.
pub async fn tail_logs(shared: Arc<Shared>, watching: Arc<AtomicBool>) {
    let mut finished: BTreeSet<PathBuf> = BTreeSet::new();
    while watching.load(Ordering::SeqCst) {
        let Ok(entries) = std::fs::read_dir(&shared.paths.logs) else {
            return;
        };
        let mut fresh = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if finished.contains(&path) {
                continue;
            }
            let Some(worker) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("worker-"))
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // Read before deciding that the worker is gone, so that its
            // last lines are never skipped.
            let gone = shared.pid_of(worker).is_none();
            let offset = shared
                .view
                .lock()
                .expect("view lock")
                .offsets
                .get(&path)
                .copied()
                .unwrap_or(0);
            let Some((lines, end)) = read_from(&path, offset) else {
                continue;
            };
            fresh.extend(lines);
            shared
                .view
                .lock()
                .expect("view lock")
                .offsets
                .insert(path.clone(), end);
            if gone {
                finished.insert(path);
            }
        }
        {
            let mut view = shared.view.lock().expect("view lock");
            for record in fresh {
                view.apply(record);
            }
        }
        tokio::time::sleep(TAIL_POLL).await;
    }
}

/// The complete lines appended to `path` after `offset`, and the offset
/// after the last of them.
fn read_from(path: &Path, offset: u64) -> Option<(Vec<Record>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let records = bytes[..complete]
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Record>(line).ok())
        .collect();
    Some((records, offset + complete as u64))
}

/// One call in a fresh process-like `SingleFlight` after every worker has
/// gone: it must lead, in a term whose epoch is above every earlier one.
pub async fn final_probe(
    builder: single_flight::Builder,
    deadline: Duration,
) -> (String, Option<u32>) {
    let flights = match builder.open().await {
        Ok(flights) => flights,
        Err(error) => return (format!("cannot open: {error}"), None),
    };
    let result = flights
        .call("probe")
        .deadline(deadline)
        .run(|token| async move { Ok::<_, std::io::Error>(token.get()) })
        .await;
    flights.close().await;
    match result {
        Ok(landed) => (
            format!("{:?} with token {}", landed.role, landed.token),
            Some(landed.token.epoch().get()),
        ),
        Err(error) => (format!("failed: {error}"), None),
    }
}

/// The flight directory's files after the run, and the temporary ones among
/// them (which the last election should have removed, SPEC.md §7.1).
pub fn leftover_files(flights: &Path) -> (Vec<String>, Vec<String>) {
    let mut files: Vec<String> = std::fs::read_dir(flights)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let temps = files
        .iter()
        .filter(|name| name.contains(".tmp."))
        .cloned()
        .collect();
    (files, temps)
}

/// Whether `pid` still runs this harness (a pid may be reused by another
/// program once ours is reaped).
pub fn still_ours(pid: u32) -> bool {
    let alive = Pid::from_raw(pid as i32).is_some_and(|p| test_kill_process(p).is_ok());
    alive
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("worker"))
}

pub fn own_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count())
}

fn descriptors_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count())
}
