//! The one harness for child processes. A test that needs other processes
//! runs its own test binary again, as a child in a role; a test of the
//! command runs the `single-flight` binary instead, and waits for it here too
//! ([`wait`]).
//!
//! The child's side: every test binary's root has an ignored test named
//! `child` that calls [`enter`]. [`command`] runs the binary again with
//! `--exact child --ignored`, so that libtest runs that one test and nothing
//! else, with the role in [`ROLE`]; without it, as an ordinary test run
//! with `--ignored`, `child` returns at once. A child reports what happened
//! on its standard output, one fact a line, through [`say`]: behind
//! [`MARK`], since libtest prints `test child ... ` on the same line first.
//!
//! The test's side: [`Children`] starts children and keeps one reader per
//! child, a thread that reads its standard output for the child's whole life
//! (what it has read ahead stays in its one buffer) and hands each report on,
//! with the instant it read it. Every wait gives up after
//! [`PATIENCE`](super::PATIENCE).

use std::collections::VecDeque;
use std::fmt::Display;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::PATIENCE;

/// The environment variable that makes a test binary a child: `MODULE:ROLE`,
/// the test module whose child it is and the role it plays there.
const ROLE: &str = "SINGLE_FLIGHT_TEST_CHILD";

/// Marks the lines a child reports, apart from what libtest prints.
const MARK: &str = "@single-flight-child@ ";

/// The name of every test binary's entry point for its children.
const ENTRY: &str = "child";

// ---------------------------------------------------------------- the child

/// Runs this process as the child that its environment names and exits
/// with the code that `dispatch` returns for the module and the role; it
/// returns at once in a process that is no child.
pub fn enter(dispatch: impl FnOnce(&str, &str) -> i32) {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // `RUST_LOG=single_flight=debug` shows what each child does.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let code = match role.split_once(':') {
        Some((module, role)) => dispatch(module, role),
        None => unknown(&role),
    };
    std::process::exit(code);
}

/// What a dispatcher answers for a role it does not know: it says so, and
/// the child exits 2.
pub fn unknown(role: &str) -> i32 {
    say(format_args!("error unknown role {role}"));
    2
}

/// Reports one fact to the test.
pub fn say(fact: impl Display) {
    println!("{MARK}{fact}");
}

/// A setting the test gave its child, empty when it gave none.
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

// ---------------------------------------------------------------- the test

/// This test binary, to be run again as a child (through another program,
/// such as `ip netns exec`, with [`as_child`]).
pub fn binary() -> std::path::PathBuf {
    std::env::current_exe().expect("the test binary's path")
}

/// This test binary, run again as a child in `role` of `module`.
pub fn command(module: &str, role: &str) -> Command {
    let mut command = Command::new(binary());
    as_child(&mut command, module, role);
    command
}

/// Makes `command`, which runs [`binary`] (perhaps through another
/// program), a child in `role` of `module`.
pub fn as_child<'a>(command: &'a mut Command, module: &str, role: &str) -> &'a mut Command {
    command
        .args([
            "--exact",
            ENTRY,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, format!("{module}:{role}"))
}

/// Waits for `child` to exit, for [`PATIENCE`] at most; when it has not
/// exited by then, kills and reaps it and returns `None`.
pub fn wait(child: &mut Child) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for a child") {
            return Some(status);
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops process `pid` (SIGSTOP) and waits, for [`PATIENCE`] at most, until
/// the kernel shows it stopped. The signal only marks the process: its
/// threads stop when they next run, and on a loaded machine one of them
/// may run on long enough to see a fault the test makes next (a
/// coordinator killed right after) and act on it, as a test that stops a
/// process "before" the fault must not let it.
pub fn stop(pid: u32) {
    let id = rustix::process::Pid::from_raw(pid as i32).expect("a process id");
    rustix::process::kill_process(id, rustix::process::Signal::STOP).expect("SIGSTOP");
    let start = Instant::now();
    // Every thread: a process's state in /proc is its first thread's, and
    // the one that would act may be another.
    while let Some(running) = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|task| std::fs::read_to_string(task.path().join("stat")).unwrap_or_default())
        .find(|stat| {
            // The state is the field after the command's name, which is in
            // parentheses and may hold spaces.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('T' | 't') | None)
        })
    {
        assert!(
            start.elapsed() < PATIENCE,
            "process {pid} did not stop: {running}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One fact a child reported, and when its reader read it.
#[derive(Debug)]
pub struct Report {
    /// The child's index among its [`Children`].
    pub child: usize,
    /// The fact, without the mark.
    pub line: String,
    pub at: Instant,
}

/// What a child's reader hands on.
enum Event {
    Said(Report),
    /// The child's standard output ended: it has exited, or closed it.
    Ended(usize),
}

struct Process {
    child: Child,
    /// Open until [`Children::close_stdin`]: a child may wait for its end.
    stdin: Option<ChildStdin>,
    /// Once the child is reaped.
    status: Option<ExitStatus>,
    /// Once its reader has read the end of its output.
    ended: bool,
}

/// The children of one test; dropping it kills those still running.
pub struct Children {
    sender: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
    /// Reports received while waiting for another child's, in the order
    /// they came.
    pending: VecDeque<Report>,
    processes: Vec<Process>,
}

impl Default for Children {
    fn default() -> Children {
        Children::new()
    }
}

impl Children {
    pub fn new() -> Children {
        let (sender, events) = mpsc::channel();
        Children {
            sender,
            events,
            pending: VecDeque::new(),
            processes: Vec::new(),
        }
    }

    /// How many children were started.
    pub fn count(&self) -> usize {
        self.processes.len()
    }

    /// Starts `command` (from [`command`] or [`as_child`]) and returns the
    /// child's index. Its standard input is a pipe that stays open until
    /// [`Children::close_stdin`]; its standard error is the test's.
    pub fn spawn(&mut self, mut command: Command) -> usize {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a child starts");
        let index = self.processes.len();
        let stdout = child.stdout.take().expect("a piped stdout");
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(start) = line.find(MARK) {
                    let report = Report {
                        child: index,
                        line: line[start + MARK.len()..].to_owned(),
                        at: Instant::now(),
                    };
                    if sender.send(Event::Said(report)).is_err() {
                        return;
                    }
                }
            }
            let _ = sender.send(Event::Ended(index));
        });
        self.processes.push(Process {
            stdin: child.stdin.take(),
            child,
            status: None,
            ended: false,
        });
        index
    }

    /// The next event, before `deadline`.
    fn receive(&mut self, deadline: Instant, what: &str) -> Event {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(left) {
            Ok(event) => event,
            Err(_) => panic!("gave up waiting for {what} after {PATIENCE:?}"),
        }
    }

    /// The next report of any child.
    pub fn next(&mut self) -> Report {
        if let Some(report) = self.pending.pop_front() {
            return report;
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.receive(deadline, "a report of any child") {
                Event::Said(report) => return report,
                Event::Ended(index) => self.processes[index].ended = true,
            }
        }
    }

    /// The rest of the next report of `child` that starts with `prefix`,
    /// trimmed; the child's other reports before it are passed over, other
    /// children's are kept. Fails when the child's output ends first.
    pub fn line(&mut self, child: usize, prefix: &str) -> String {
        while let Some(at) = self.pending.iter().position(|report| report.child == child) {
            let report = self.pending.remove(at).expect("a pending report");
            if let Some(rest) = report.line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
        let deadline = Instant::now() + PATIENCE;
        let what = format!("a {prefix:?} line of child {child}");
        loop {
            assert!(
                !self.processes[child].ended,
                "child {child} ended without a {prefix:?} line"
            );
            match self.receive(deadline, &what) {
                Event::Said(report) if report.child == child => {
                    if let Some(rest) = report.line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Event::Said(report) => self.pending.push_back(report),
                Event::Ended(index) => self.processes[index].ended = true,
            }
        }
    }

    /// Waits until children have reported `line` `count` times in all,
    /// keeping their other reports for later.
    pub fn until_said(&mut self, line: &str, count: usize) {
        let mut said = 0;
        self.pending.retain(|report| {
            let this = said < count && report.line == line;
            said += usize::from(this);
            !this
        });
        let deadline = Instant::now() + PATIENCE;
        let what = format!("{count} reports {line:?}");
        while said < count {
            match self.receive(deadline, &what) {
                Event::Said(report) if report.line == line => said += 1,
                Event::Said(report) => self.pending.push_back(report),
                Event::Ended(index) => self.processes[index].ended = true,
            }
        }
    }

    /// Fails if any child reports anything within `window`.
    pub fn assert_silent_for(&mut self, window: Duration) {
        assert_eq!(self.pending.pop_front().map(|report| report.line), None);
        let deadline = Instant::now() + window;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Said(report)) => {
                    panic!("a child reported while none should: {report:?}")
                }
                Ok(Event::Ended(index)) => self.processes[index].ended = true,
                Err(_) => return,
            }
        }
    }

    /// Closes the child's standard input.
    pub fn close_stdin(&mut self, child: usize) {
        self.processes[child].stdin.take();
    }

    /// The child's process id (for signals other than `kill -9`).
    pub fn pid(&self, child: usize) -> u32 {
        self.processes[child].child.id()
    }

    /// Kills the child (`kill -9`) and reaps it; returns the instant just
    /// before the signal.
    pub fn kill(&mut self, child: usize) -> Instant {
        let process = &mut self.processes[child];
        assert!(process.status.is_none(), "child {child} is already reaped");
        let at = Instant::now();
        process.child.kill().expect("kill -9");
        process.status = Some(process.child.wait().expect("reaping a killed child"));
        at
    }

    /// Waits for the child to exit.
    pub fn wait(&mut self, child: usize) -> ExitStatus {
        let process = &mut self.processes[child];
        if let Some(status) = process.status {
            return status;
        }
        let status = wait(&mut process.child)
            .unwrap_or_else(|| panic!("child {child} did not exit within {PATIENCE:?}"));
        process.status = Some(status);
        status
    }

    /// Waits for the child to exit, successfully.
    pub fn exit(&mut self, child: usize) {
        let status = self.wait(child);
        assert!(status.success(), "child {child} exited with {status}");
    }

    /// Whether the child has exited, without waiting.
    pub fn has_exited(&mut self, child: usize) -> bool {
        let process = &mut self.processes[child];
        if process.status.is_none() {
            process.status = process.child.try_wait().expect("waiting for a child");
        }
        process.status.is_some()
    }

    /// Kills every child still running, and reaps them.
    pub fn kill_all(&mut self) {
        for process in &mut self.processes {
            if process.status.is_none() {
                let _ = process.child.kill();
                process.status = process.child.wait().ok();
            }
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.kill_all();
    }
}
