//! The append-only logs: one file per process, one JSON object per line,
//! written with one `write` per line and never buffered, so that a `kill -9`
//! loses at most a torn last line, which the reader counts and skips.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Microseconds since the Unix epoch. The wall clock is the one clock that
/// every process of the run reads alike (the kernel's `CLOCK_REALTIME`);
/// NTP slews it by at most 500 ppm, far below the margins the checker uses.
pub fn now_us() -> u64 {
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as u64)
        .unwrap_or(0)
}

/// How a call ended, as the caller saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// A value, led or joined.
    Value,
    /// The work failed: this call's own (led) or its leader's (joined).
    Failure,
    Interrupted,
    Deadline,
    Unavailable,
    Invalid,
}

/// Whether a harness verdict held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The library did what SPEC.md says.
    AsSpecified,
    /// A fault of the nemesis got in the way; nothing can be concluded.
    Inconclusive,
    /// The library did something SPEC.md forbids.
    Violation,
}

/// One line of a log. Worker processes write the first group and name
/// themselves by their worker number; the orchestrator (nemesis, status
/// poller, supervisor) writes the second and names processes by pid, which
/// the checker maps to worker numbers through the `Spawn` records.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Record {
    // ------------------------------------------------------------ workers
    /// A worker process started.
    Start {
        worker: u32,
        pid: u32,
        slot: usize,
        t: u64,
    },
    /// A call began.
    Call {
        worker: u32,
        call: u64,
        key: String,
        t: u64,
        deadline_ms: u64,
    },
    /// A call leads: its work starts under `token`, and will produce `value`
    /// (unique per execution) after about `work_ms`.
    Work {
        worker: u32,
        call: u64,
        key: String,
        token: u64,
        t: u64,
        work_ms: u64,
        value: String,
    },
    /// The work's fenced write: accepted, refused (a newer token wrote
    /// first) or failed.
    Write {
        worker: u32,
        call: u64,
        key: String,
        token: u64,
        t: u64,
        /// When the write began and ended on the worker's one thread: the
        /// worker's other calls could not be answered in between.
        began: u64,
        ended: u64,
        accepted: bool,
        highest: Option<u64>,
        error: Option<String>,
    },
    /// A call ended. `text` is the value, or the failure's message.
    Done {
        worker: u32,
        call: u64,
        key: String,
        t: u64,
        end: Ending,
        led: Option<bool>,
        token: Option<u64>,
        text: Option<String>,
    },
    /// The worker closed its `SingleFlight` and opened a new one: its
    /// connection to the coordinator dropped while calls were in progress.
    Reopen {
        worker: u32,
        t: u64,
    },
    /// The worker stopped cleanly: every call it started has ended.
    Exit {
        worker: u32,
        t: u64,
    },

    // ------------------------------------------------------- orchestrator
    /// The run's parameters, first line of the nemesis log.
    Params {
        seed: u64,
        seconds: u64,
        workers: usize,
        keys: usize,
        concurrency: usize,
        grace_ms: u64,
        deadline_ms: u64,
        schedule: String,
        /// The fewest faults the run must inject to pass.
        min_faults: u64,
    },
    /// A worker process was spawned into `slot`.
    Spawn {
        pid: u32,
        /// The worker's number in the run (its logs' name); pids come back.
        worker: u32,
        slot: usize,
        t: u64,
    },
    /// A worker process ended; `expected` when the nemesis killed it or the
    /// run was stopping and it exited with 0.
    Exited {
        pid: u32,
        worker: u32,
        slot: usize,
        t: u64,
        status: String,
        expected: bool,
    },
    /// A fault was injected.
    Fault {
        t: u64,
        kind: String,
        target: Option<u32>,
        detail: String,
    },
    /// A fault of the schedule found no target (no leader, …) and was
    /// skipped; it is not counted as injected.
    Skipped {
        t: u64,
        kind: String,
        why: String,
    },
    /// `SIGKILL` of `pid`; `epoch` when the nemesis had just seen it serve
    /// that term as coordinator.
    Kill {
        t: u64,
        pid: u32,
        epoch: Option<u32>,
    },
    Stop {
        t: u64,
        pid: u32,
    },
    Cont {
        t: u64,
        pid: u32,
    },
    /// A worker was told to drop its connection (close and reopen).
    ReopenAsked {
        t: u64,
        pid: u32,
        worker: u32,
    },
    /// The status poller saw this term serving.
    Term {
        t: u64,
        epoch: u32,
        pid: u32,
    },
    /// A raw (hostile) client was answered `lead` for a real key.
    RawLead {
        t: u64,
        key: String,
        token: u64,
    },
    /// A hostile client's outcome.
    Hostile {
        t: u64,
        kind: String,
        verdict: Verdict,
        detail: String,
    },
    /// A campaign in a directory with a damaged epoch file.
    EpochCheck {
        t: u64,
        variant: String,
        verdict: Verdict,
        detail: String,
    },
    /// How long the coordinator's status took while a hostile client
    /// (a flood, one that never reads) held it busy.
    Latency {
        t: u64,
        what: String,
        ms: u64,
        /// Whether a fault hit the coordinator meanwhile.
        disturbed: bool,
    },
    /// A cluster run's own parameters (`--cluster`), after `Params`.
    ClusterParams {
        /// Worker hosts; a worker's host is its slot modulo this.
        hosts: usize,
        ttl_ms: u64,
        /// The library's step-down margin (SPEC.md §14.2).
        margin_ms: u64,
        /// How long etcd's quorum and a coordinator must have been reachable
        /// before an `Unavailable` call counts against the library.
        unavailable_bound_ms: u64,
    },
    /// The coordinator key as the harness's etcd poller saw it change: the
    /// term's epoch and the worker whose address it holds; both `None`
    /// once the key is gone.
    Coordinator {
        t: u64,
        epoch: Option<u32>,
        worker: Option<u32>,
    },
    /// The nemesis cut `host` (every host when `None`) off from etcd or
    /// from the coordinator, from `from` to `to`: an `Unavailable` call in
    /// it proves nothing.
    Outage {
        from: u64,
        to: u64,
        host: Option<usize>,
        what: String,
    },
    /// A fault took the coordinator of `epoch` away (its host killed or cut
    /// off, its process killed or stopped past its lease): the failover
    /// that the checker times starts at `t`.
    Failover {
        t: u64,
        kind: String,
        epoch: u32,
    },
    /// What was left when the run ended, last line of the nemesis log.
    Final {
        t: u64,
        files: Vec<String>,
        temp_files: Vec<String>,
        processes_alive: Vec<u32>,
        hung_workers: Vec<u32>,
        fds_before: usize,
        fds_after: usize,
        probe: String,
        probe_epoch: Option<u32>,
        epoch_file: String,
        coordinator_fds_max: usize,
    },
}

/// One log file, appended to.
pub struct LogFile {
    file: File,
}

impl LogFile {
    pub fn create(path: &Path) -> std::io::Result<LogFile> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(LogFile { file })
    }

    /// Appends one record as one line, with one `write_all` of the whole
    /// line; an error means the run's disk is gone, and the harness stops.
    pub fn write(&mut self, record: &Record) {
        let mut line = serde_json::to_vec(record).expect("records serialize");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .expect("cannot append to a chaos log; is the disk full?");
    }
}

/// A log as read back.
pub struct ReadLog {
    pub records: Vec<Record>,
    /// 1 if the file ended in a partial line (its writer was killed).
    pub torn: usize,
    /// Complete lines that do not parse: a harness bug.
    pub malformed: Vec<String>,
}

/// Reads a log, tolerating a torn last line.
pub fn read_log(path: &Path) -> std::io::Result<ReadLog> {
    let bytes = std::fs::read(path)?;
    let mut log = ReadLog {
        records: Vec::new(),
        torn: 0,
        malformed: Vec::new(),
    };
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let last = lines.peek().is_none();
        if line.is_empty() {
            continue;
        }
        if last {
            // No newline after it: the writer died in the middle of the line.
            log.torn += 1;
            continue;
        }
        match serde_json::from_slice(line) {
            Ok(record) => log.records.push(record),
            Err(error) => log.malformed.push(format!(
                "{}: {error}: {}",
                path.display(),
                String::from_utf8_lossy(&line[..line.len().min(200)])
            )),
        }
    }
    Ok(log)
}
