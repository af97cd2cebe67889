//! The stage of the tests of calls and of the shell (tests/library/): a
//! flight directory, a directory of runs, and children of the test binary
//! (support/child.rs) that call on that flight directory. A child's work
//! records each run in the runs directory and waits there for the files
//! that the test creates to let it go on; the test watches the flights
//! through the coordinator's `status` (SPEC.md §3.5), read from its socket.
//!
//! No wait asserts on time: every one polls for a state and gives up after
//! [`PATIENCE`], so a slow machine only makes the tests slower.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use single_flight::{FencingToken, Landed, Role, RunError, SingleFlight};
use single_flight_core::protocol::{FlightStatus, Response, decode_response};

use super::PATIENCE;
use super::child::{self, Children, say};

/// One test's flight directory and the children that use it; dropping it
/// kills them and removes both directories.
pub struct Scene {
    pub root: PathBuf,
    /// The flight directory (`SF_DIR` of the children).
    pub dir: PathBuf,
    /// Where the works record their runs and wait for files (`SF_RUNS`).
    pub runs: PathBuf,
    pub children: Children,
    /// The test module whose children these are.
    module: &'static str,
}

impl Scene {
    /// The scene of the test `name` of `module`, whose roles the children
    /// play.
    pub fn new(module: &'static str, name: &str) -> Scene {
        let root = std::env::temp_dir().join(format!("sf-{module}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("flights");
        let runs = root.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        Scene {
            root,
            dir,
            runs,
            children: Children::new(),
            module,
        }
    }

    /// Starts a child in `role`, with the further settings `vars`; returns
    /// its index.
    pub fn spawn(&mut self, role: &str, vars: &[(&str, &str)]) -> usize {
        let mut command = child::command(self.module, role);
        command.env("SF_DIR", &self.dir).env("SF_RUNS", &self.runs);
        for (name, value) in vars {
            command.env(name, value);
        }
        self.children.spawn(command)
    }

    /// The rest of a child's next report that starts with `prefix`.
    pub fn line(&mut self, child: usize, prefix: &str) -> String {
        self.children.line(child, prefix)
    }

    /// The RESULT line of a child.
    pub fn result(&mut self, child: usize) -> String {
        self.line(child, "RESULT ")
    }

    /// The RESULT line of a child, once it has exited successfully.
    pub fn finish(&mut self, child: usize) -> String {
        let result = self.result(child);
        self.exit(child);
        result
    }

    /// Waits for a child to exit, successfully.
    pub fn exit(&mut self, child: usize) {
        self.children.exit(child);
    }

    /// Waits for a child to exit.
    pub fn wait(&mut self, child: usize) -> ExitStatus {
        self.children.wait(child)
    }

    /// Kills a child (`kill -9`) and reaps it.
    pub fn kill(&mut self, child: usize) {
        self.children.kill(child);
    }

    /// Polls the coordinator's `status` until `ready` holds; returns the
    /// flights that it saw then.
    pub fn until(&self, what: &str, ready: impl Fn(&[FlightStatus]) -> bool) -> Vec<FlightStatus> {
        let start = Instant::now();
        loop {
            if let Some(flights) = status(&self.dir)
                && ready(&flights)
            {
                return flights;
            }
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Polls the coordinator's whole `status` answer until `ready` holds.
    pub fn until_answer(
        &self,
        what: &str,
        ready: impl Fn(&(Vec<FlightStatus>, Option<u64>)) -> bool,
    ) {
        let start = Instant::now();
        while !status_answer(&self.dir).is_some_and(|answer| ready(&answer)) {
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the work of `key` has started somewhere.
    pub fn until_run(&self, key: &str) {
        let start = Instant::now();
        while executions(&self.runs, key) == 0 {
            assert!(start.elapsed() < PATIENCE, "no run of {key}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the work of `key` has started (`true`), or `child` has
    /// exited first (`false`).
    pub fn until_run_or_exit(&mut self, key: &str, child: usize) -> bool {
        let start = Instant::now();
        loop {
            if executions(&self.runs, key) > 0 {
                return true;
            }
            if self.children.has_exited(child) {
                // A work that started holds its process until released.
                return executions(&self.runs, key) > 0;
            }
            assert!(start.elapsed() < PATIENCE, "no run of {key}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the work of `key` has been dropped before its end
    /// ([`work`] marks it).
    pub fn until_dropped(&self, key: &str) {
        let mark = self.runs.join(format!("{key}.dropped"));
        let start = Instant::now();
        while !mark.exists() {
            assert!(start.elapsed() < PATIENCE, "the work was never dropped");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets the works that wait for `name` go on.
    pub fn release(&self, name: &str) {
        std::fs::write(self.runs.join(name), b"").unwrap();
    }

    /// The token of the run of `key`, once its work has recorded it (the
    /// coordinator's answer reaches `status` before the work starts).
    pub fn token_of_run(&self, key: &str) -> u64 {
        let start = Instant::now();
        loop {
            if let Some(run) = runs_of(&self.runs, key).first() {
                return std::fs::read_to_string(run).unwrap().parse().unwrap();
            }
            assert!(start.elapsed() < PATIENCE, "no run of {key}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.children.kill_all();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The flights in progress, as the coordinator reports them; `None` while
/// no coordinator answers.
pub fn status(dir: &Path) -> Option<Vec<FlightStatus>> {
    status_answer(dir).map(|(flights, _)| flights)
}

/// The coordinator's answer to `status`: the flights in progress, and the
/// runs waiting for its grace window (`None` when it is closed).
pub fn status_answer(dir: &Path) -> Option<(Vec<FlightStatus>, Option<u64>)> {
    let mut stream = UnixStream::connect(dir.join("flight.sock")).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(
            b"{\"protocol\":\"single-flight\",\"version\":1}\n{\"op\":\"status\",\"id\":\"s\"}\n",
        )
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut text = String::new();
    reader.read_line(&mut text).ok()?; // the coordinator's hello
    text.clear();
    reader.read_line(&mut text).ok()?;
    match decode_response(text.trim_end().as_bytes()).ok()? {
        Response::Status {
            flights, waiting, ..
        } => Some((flights, waiting)),
        _ => None,
    }
}

/// The joiners of `key`'s flight.
pub fn joiners(flights: &[FlightStatus], key: &str) -> Option<u64> {
    flights
        .iter()
        .find(|flight| flight.key.as_str() == key)
        .map(|flight| flight.joiners)
}

/// The joiners of `key`'s flight when it is detached (§15.2).
pub fn detached(flights: &[FlightStatus], key: &str) -> Option<u64> {
    flights
        .iter()
        .find(|flight| flight.key.as_str() == key && flight.detached)
        .map(|flight| flight.joiners)
}

// ---------------------------------------------------------------- children

/// The runs of `key`'s work that have started: a file `KEY.PID` each.
fn runs_of(runs: &Path, key: &str) -> Vec<PathBuf> {
    std::fs::read_dir(runs)
        .unwrap()
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|pid| pid.parse::<u32>().is_ok())
        })
        .map(|entry| entry.path())
        .collect()
}

/// How many times the work of `key` has started.
pub fn executions(runs: &Path, key: &str) -> usize {
    runs_of(runs, key).len()
}

/// Records that the work of `key` runs in this process: a file `KEY.PID`
/// holding the token, written whole under a temporary name, so that the
/// test never reads a half-written token.
pub fn record_run(runs: &Path, key: &str, token: FencingToken) -> std::io::Result<()> {
    let pid = std::process::id();
    let temp = runs.join(format!("{key}.{pid}.tmp"));
    std::fs::write(&temp, token.to_string())?;
    std::fs::rename(&temp, runs.join(format!("{key}.{pid}")))
}

/// The role `idle` of a child: one call, so that its process coordinates
/// when it is the first, then `READY`, and nothing until it is killed.
pub async fn idle(flights: &SingleFlight) -> i32 {
    let key = format!("warm-{}", std::process::id());
    let warm = flights.run(&key, |_| async { Ok::<_, std::io::Error>(0) });
    warm.await.expect("a warm-up call");
    say("READY");
    std::future::pending().await
}

/// A call's end as a child reports it.
pub fn describe(result: Result<Landed<String>, RunError<std::io::Error>>) -> String {
    match result {
        Ok(landed) => {
            let role = match landed.role {
                Role::Led => "led",
                Role::Joined => "joined",
                Role::Reused => "reused",
            };
            format!("{role} {} {}", landed.token, landed.value)
        }
        Err(RunError::FlightFailed { failure, .. }) => {
            format!("failed {}: {}", failure.name, failure.message)
        }
        Err(RunError::Work(error)) => format!("own-failure {error}"),
        Err(RunError::Interrupted { .. }) => "interrupted".to_owned(),
        Err(RunError::DeadlineExceeded { .. }) => "deadline".to_owned(),
        Err(RunError::Unavailable(reason)) => format!("unavailable {reason}"),
        Err(other) => format!("error {other}"),
    }
}

/// The work of a child's async call: records its run ([`record_run`]),
/// then does `steps`, a comma-separated list, in order: `wait:FILE` waits
/// until the test creates FILE in `runs`; `needs:KEY` waits until the work
/// of KEY has started (which proves that the two run at once); `fail`
/// returns an error; `value:N` and `error:N` return a value or an error
/// message of N bytes; `panic-number` panics with a `u32` payload, in a
/// poll after the first (the future has awaited before). After its steps
/// it returns a value that names the key and the process. Dropped before
/// its end, it creates `KEY.dropped` in `runs` (§15.3).
pub async fn work(
    runs: PathBuf,
    key: String,
    token: FencingToken,
    steps: String,
) -> Result<String, std::io::Error> {
    record_run(&runs, &key, token)?;
    let mut dropped = DropMark(Some(runs.join(format!("{key}.dropped"))));
    let ended = run_steps(&runs, &steps).await;
    dropped.0 = None;
    ended.unwrap_or_else(|| Ok(format!("value-of-{key}-from-{}", std::process::id())))
}

/// The steps of [`work`]; `None` when they leave the result to it.
async fn run_steps(runs: &Path, steps: &str) -> Option<Result<String, std::io::Error>> {
    for step in steps.split(',') {
        if let Some(release) = step.strip_prefix("wait:") {
            until_exists(runs.join(release)).await;
        }
        if let Some(other) = step.strip_prefix("needs:") {
            while executions(runs, other) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if step == "panic-number" {
            tokio::task::yield_now().await;
            std::panic::panic_any(7_u32);
        }
        if step == "fail" {
            return Some(Err(std::io::Error::other("the disk is on fire")));
        }
        if let Some(len) = step.strip_prefix("value:") {
            return Some(Ok("v".repeat(len.parse().expect("a length"))));
        }
        if let Some(len) = step.strip_prefix("error:") {
            let message = "x".repeat(len.parse().expect("a length"));
            return Some(Err(std::io::Error::other(message)));
        }
    }
    None
}

/// Waits, in a child, until the test creates `file`.
pub async fn until_exists(file: PathBuf) {
    while !file.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Creates its file when dropped while it still holds one: a work dropped
/// before its end.
struct DropMark(Option<PathBuf>);

impl Drop for DropMark {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::write(path, b"");
        }
    }
}
