//! Worker processes: this binary run again as `bench worker KIND ARGS…`,
//! driven by lines on its stdin and answering by lines on its stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest the orchestrator waits for any one line of a worker before
/// it gives up: far above anything a healthy run takes, so that a broken
/// benchmark stops with a message instead of hanging.
pub const WORKER_PATIENCE: Duration = Duration::from_secs(60);

/// A worker process and the lines it prints.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    name: String,
}

impl Worker {
    /// Starts `bench worker <args…>`.
    pub fn spawn(args: &[&str]) -> Worker {
        Worker::start(Command::new(exe()), args)
    }

    /// Starts `command` (this binary, or a command that runs it elsewhere,
    /// such as `ip netns exec HOST` before it) with `worker <args…>`.
    pub fn start(mut command: Command, args: &[&str]) -> Worker {
        let mut child = command
            .arg("worker")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a worker process starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Worker {
            stdin: child.stdin.take(),
            child,
            lines,
            name: args.first().copied().unwrap_or("worker").to_owned(),
        }
    }

    /// Waits for `READY` and returns the worker.
    pub fn ready(self) -> Worker {
        self.expect("READY");
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the worker is not closed");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|error| panic!("worker {} stopped reading: {error}", self.name));
    }

    /// The rest of the next line that starts with `prefix`; other lines are
    /// passed on to stderr.
    pub fn expect(&self, prefix: &str) -> String {
        loop {
            let line = match self.lines.recv_timeout(WORKER_PATIENCE) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "worker {} (pid {}) printed no {prefix:?} line within {WORKER_PATIENCE:?}",
                    self.name,
                    self.child.id()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "worker {} (pid {}) ended before its {prefix:?} line (its stderr is above)",
                    self.name,
                    self.child.id()
                ),
            };
            match line.strip_prefix(prefix) {
                Some(rest) => return rest.trim().to_owned(),
                None => eprintln!("[{} {}] {line}", self.name, self.child.id()),
            }
        }
    }

    /// The next line, if one arrives within `wait`.
    pub fn try_line(&self, wait: Duration) -> Option<String> {
        self.lines.recv_timeout(wait).ok()
    }

    /// `kill -9`, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// This benchmark's own executable, which the workers run.
pub fn exe() -> PathBuf {
    std::env::current_exe().expect("the bench binary knows its own path")
}

/// Starts `count` workers at once and waits until each printed `READY`.
pub fn spawn_ready(count: usize, args: &[&str]) -> Vec<Worker> {
    let workers: Vec<Worker> = (0..count).map(|_| Worker::spawn(args)).collect();
    for worker in &workers {
        worker.expect("READY");
    }
    workers
}

/// A scratch directory for one benchmark, removed when dropped. Short, so
/// that socket paths stay far below the 107-byte limit.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("sf-bench-{}/{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a scratch directory in the temp dir");
        Scratch { path }
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        // The run's own directory goes with its last benchmark.
        if let Some(parent) = self.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Nanoseconds since the Unix epoch: the one clock that every process of
/// the machine reads alike, for times compared across processes.
pub fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos() as u64
}

/// Prints one line for the orchestrator (stdout is line-buffered).
pub fn say(line: impl std::fmt::Display) {
    println!("{line}");
}

/// The lines of stdin, read on a thread of their own.
pub fn stdin_lines() -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

/// A worker's opening: says `READY` and waits for the orchestrator's `go`
/// on `lines`, so that every worker starts its calls at once.
pub fn ready_then_go(lines: &mpsc::Receiver<String>) {
    say("READY");
    assert_eq!(
        lines.recv().as_deref(),
        Ok("go"),
        "the orchestrator says go"
    );
}

/// CPU time a process has used (all its threads, user and system), in
/// nanoseconds, from `/proc/<pid>/stat` (`None`: this process). The kernel
/// counts it in ticks of 1/100 s (`USER_HZ` on Linux), which is fine over
/// runs of seconds.
pub fn cpu_nanos(pid: Option<u32>) -> u64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is the first, utime the 12th, stime the 13th.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |at: usize| fields.get(at).and_then(|f| f.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) * 10_000_000,
        _ => 0,
    }
}

/// CPU time, to the nanosecond, that the live threads of a process have
/// used (`None`: this process), the sum of the first field of each
/// `/proc/<pid>/task/<tid>/schedstat`. Finer than [`cpu_nanos`]'s ticks, so
/// that a round of a few thousand calls can be counted; the threads that
/// exited are not counted, so measure only where both ends keep theirs (a
/// runtime and the library's thread that live through the timed part).
pub fn thread_cpu_nanos(pid: Option<u32>) -> u64 {
    schedstat_sum(pid, 0)
}

/// How many times the live threads of a process were given a CPU (`None`:
/// this process), the sum of the third field of each
/// `/proc/<pid>/task/<tid>/schedstat`: every time a thread that slept is
/// woken, and every time one that was preempted resumes. A call's hand-offs
/// between sleeping threads are what its CPU time is made of (BENCHMARKS.md,
/// "Issue 30's hot path"), and unlike a time, a count barely moves with the
/// machine's load. As [`thread_cpu_nanos`], exited threads are not counted.
pub fn thread_switches(pid: Option<u32>) -> u64 {
    schedstat_sum(pid, 2)
}

/// The sum over the live threads of a process (`None`: this process) of
/// field `field` (from 0) of `/proc/<pid>/task/<tid>/schedstat`; 0 where
/// it cannot be read.
fn schedstat_sum(pid: Option<u32>, field: usize) -> u64 {
    let tasks = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_owned(),
    };
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().nth(field)?.parse::<u64>().ok())
        .sum()
}

/// CPU time of this process and of its peers (a coordinator; a host
/// coordinator too, through the host tier), for a timed part, and the times
/// their threads were given a CPU: started before it, read after it.
pub struct CpuMeter {
    peers: Vec<u32>,
    start: u64,
    switches: u64,
}

impl CpuMeter {
    pub fn start(peers: &[u32]) -> CpuMeter {
        CpuMeter {
            peers: peers.to_vec(),
            start: CpuMeter::now(peers),
            switches: CpuMeter::switches_now(peers),
        }
    }

    fn now(peers: &[u32]) -> u64 {
        thread_cpu_nanos(None)
            + peers
                .iter()
                .map(|&pid| thread_cpu_nanos(Some(pid)))
                .sum::<u64>()
    }

    fn switches_now(peers: &[u32]) -> u64 {
        thread_switches(None)
            + peers
                .iter()
                .map(|&pid| thread_switches(Some(pid)))
                .sum::<u64>()
    }

    /// Nanoseconds of CPU all used since [`start`](Self::start).
    pub fn used(&self) -> u64 {
        CpuMeter::now(&self.peers).saturating_sub(self.start)
    }

    /// The times their threads were given a CPU since
    /// [`start`](Self::start).
    pub fn switches(&self) -> u64 {
        CpuMeter::switches_now(&self.peers).saturating_sub(self.switches)
    }
}

/// The resident set of process `pid` in bytes (`VmRSS` of
/// `/proc/<pid>/status`), or `None` when it cannot be read.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kilobytes = text
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix(" kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kilobytes * 1024)
}

/// The runtime every process of the benchmarks uses: one thread, like the
/// library's own (the shell runs on a current-thread runtime too).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One call on a key of this process's own, so that it is connected (or
/// coordinates) before anything is timed.
pub async fn warm_up(flights: &single_flight::SingleFlight) {
    let warm = format!("warm-{}", std::process::id());
    flights
        .run(&warm, |_| async { Ok::<_, std::io::Error>(0) })
        .await
        .expect("a warm-up call");
}
