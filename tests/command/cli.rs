//! The `single-flight` command end to end (SPEC.md §13), with real processes:
//! each test starts the binary several times on one flight directory and
//! watches the flights through the coordinator's `status` (SPEC.md §3.5).
//!
//! No test asserts on time: a command that must still run while others join
//! waits for a release file that the test creates once `status` shows them
//! all, and every wait gives up after a generous bound.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use single_flight::{Failure, FailureCode, SingleFlight, Status};

use crate::support::{BINARY, PATIENCE, child, openmetrics};

/// Starts every test command: records its process group (the shell leads
/// it) so that the test can kill whatever is left, and defines
/// `wait_for FILE`, which waits (boundedly) until the test creates FILE.
const PRELUDE: &str = r#"echo $$ >> pgids
wait_for() { n=0; while [ ! -e "$1" ] && [ $n -lt 3000 ]; do sleep 0.05; n=$((n+1)); done; }
"#;

// ---------------------------------------------------------------- harness

struct Scene {
    root: PathBuf,
    /// The flight directory.
    dir: PathBuf,
    /// The commands' working directory: release files, notes.
    work: PathBuf,
    runs: Vec<Started>,
}

struct Started {
    child: Option<Child>,
    pid: u32,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// How a process of the command ended, and what it wrote.
#[derive(Debug)]
struct Ended {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Ended {
    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

impl Scene {
    fn new(name: &str) -> Scene {
        let root = std::env::temp_dir().join(format!("sf-cli-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let work = root.join("work");
        fs::create_dir_all(&work).unwrap();
        Scene {
            dir: root.join("flights"),
            root,
            work,
            runs: Vec::new(),
        }
    }

    fn dir_arg(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// The binary, in the work directory, without the variables of the
    /// environment that would change what it does.
    fn command(&self) -> Command {
        let mut command = Command::new(BINARY);
        command
            .current_dir(&self.work)
            .env_remove("SINGLE_FLIGHT_DIR")
            .env_remove("SINGLE_FLIGHT_GRACE_MS")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        command
    }

    /// Starts `command`, its stdout and stderr going to files.
    fn start_command(&mut self, mut command: Command) -> usize {
        let index = self.runs.len();
        let stdout = self.root.join(format!("stdout.{index}"));
        let stderr = self.root.join(format!("stderr.{index}"));
        command
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap());
        let child = command.spawn().unwrap();
        self.runs.push(Started {
            pid: child.id(),
            child: Some(child),
            stdout,
            stderr,
        });
        index
    }

    /// Starts `single-flight` with `args`.
    fn start(&mut self, args: &[&str]) -> usize {
        let mut command = self.command();
        command.args(args);
        self.start_command(command)
    }

    /// Starts `single-flight run --key KEY -- sh -c SCRIPT`.
    fn start_run(&mut self, key: &str, script: &str) -> usize {
        let script = format!("{PRELUDE}{script}");
        let dir = self.dir_arg().to_owned();
        self.start(&[
            "run", "--dir", &dir, "--key", key, "--", "sh", "-c", &script,
        ])
    }

    /// Runs `single-flight` with `args` to its end.
    fn run(&mut self, args: &[&str]) -> Ended {
        let index = self.start(args);
        self.end(index)
    }

    fn pid(&self, index: usize) -> u32 {
        self.runs[index].pid
    }

    /// Waits (boundedly) for a process to end.
    fn end(&mut self, index: usize) -> Ended {
        let started = &mut self.runs[index];
        let mut process = started.child.take().expect("each process ends once");
        let Some(status) = child::wait(&mut process) else {
            panic!(
                "process {index} did not end in time; its stderr: {}",
                fs::read_to_string(&started.stderr).unwrap_or_default()
            );
        };
        Ended {
            code: status.code(),
            signal: status.signal(),
            stdout: fs::read(&started.stdout).unwrap(),
            stderr: fs::read(&started.stderr).unwrap(),
        }
    }

    /// Polls until `ready` holds.
    fn until(&self, what: &str, ready: impl Fn(&Scene) -> bool) {
        let start = Instant::now();
        while !ready(self) {
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The coordinator's status, through the library.
    fn status(&self) -> Option<Status> {
        block_on(single_flight::SingleFlight::builder(&self.dir).status()).ok()
    }

    fn joiners(&self, key: &str) -> Option<u64> {
        self.status()?
            .flights
            .iter()
            .find(|flight| flight.key.as_str() == key)
            .map(|flight| flight.joiners)
    }

    fn until_joiners(&self, key: &str, joiners: u64) {
        self.until(&format!("{joiners} joiners of {key:?}"), |scene| {
            scene.joiners(key) == Some(joiners)
        });
    }

    /// Lets the commands waiting for `name` go on.
    fn release(&self, name: &str) {
        fs::write(self.work.join(name), b"").unwrap();
    }

    /// A note a command wrote in the work directory, once it is complete.
    fn note(&self, name: &str) -> String {
        let path = self.work.join(name);
        self.until(&format!("the note {name}"), |_| {
            fs::read_to_string(&path).is_ok_and(|text| text.ends_with('\n'))
        });
        fs::read_to_string(&path).unwrap().trim().to_owned()
    }

    /// The index of the process whose pid a command wrote in `note`.
    fn index_of_pid_in(&self, note: &str) -> usize {
        let pid: u32 = self.note(note).parse().unwrap();
        self.runs
            .iter()
            .position(|started| started.pid == pid)
            .expect("the pid is one of this test's processes")
    }

    fn signal(&self, index: usize, signal: Signal) {
        let pid = Pid::from_raw(self.pid(index) as i32).unwrap();
        kill_process(pid, signal).unwrap();
    }

    /// The flight directory's files of the command (§13.2).
    fn output_files(&self) -> Vec<String> {
        fs::read_dir(&self.dir)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("flight.output."))
            .collect()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for started in &mut self.runs {
            if let Some(child) = &mut started.child {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Commands whose single-flight was killed are still running.
        if let Ok(groups) = fs::read_to_string(self.work.join("pgids")) {
            for group in groups.lines().filter_map(|line| line.parse().ok()) {
                if let Some(group) = Pid::from_raw(group) {
                    let _ = kill_process_group(group, Signal::KILL);
                }
            }
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Whether process `pid` has ended (a zombie has).
fn gone(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Runs `script` under `callers` concurrent `run`s of one key: waits until
/// all but the leader have joined, releases the command, and returns how
/// each ended.
fn one_flight(scene: &mut Scene, callers: usize, script: &str) -> Vec<Ended> {
    let indexes: Vec<usize> = (0..callers).map(|_| scene.start_run("k", script)).collect();
    scene.until_joiners("k", callers as u64 - 1);
    scene.release("release");
    indexes.into_iter().map(|index| scene.end(index)).collect()
}

fn assert_all_alike(ended: &[Ended]) {
    for other in &ended[1..] {
        assert_eq!(other.code, ended[0].code);
        assert_eq!(other.stdout, ended[0].stdout);
        assert_eq!(other.stderr, ended[0].stderr);
    }
}

// ---------------------------------------------------------------- tests

/// §13.2: eight concurrent runs of a key run the command once; all print
/// its stdout and stderr and exit with its status; the command sees its
/// token and key.
#[test]
fn eight_concurrent_runs_run_the_command_once() {
    let mut scene = Scene::new("eight");
    let ended = one_flight(
        &mut scene,
        8,
        r#"echo ran >> runs
echo "token=$SINGLE_FLIGHT_TOKEN key=$SINGLE_FLIGHT_KEY"
echo "to stderr" >&2
wait_for release
echo after"#,
    );
    assert_eq!(
        fs::read_to_string(scene.work.join("runs")).unwrap(),
        "ran\n"
    );
    assert_all_alike(&ended);
    assert_eq!(ended[0].code, Some(0));
    let stdout = String::from_utf8(ended[0].stdout.clone()).unwrap();
    // The first flight of the directory's first term (SPEC.md §6).
    assert_eq!(stdout, "token=4294967297 key=k\nafter\n");
    assert_eq!(ended[0].stderr_text(), "to stderr\n");
}

/// §13.3: every joiner exits with the leader's status, 128 + N for a
/// command that signal N killed.
#[test]
fn joiners_exit_with_the_commands_status() {
    for (script, code) in [
        ("wait_for release; echo three; exit 3", 3),
        ("wait_for release; kill -TERM $$", 128 + 15),
    ] {
        let mut scene = Scene::new(&format!("status-{code}"));
        let ended = one_flight(&mut scene, 3, script);
        assert_all_alike(&ended);
        assert_eq!(ended[0].code, Some(code), "{script}");
    }
}

/// §13.2: bytes that are not text (NUL, invalid UTF-8) reach every joiner
/// unchanged, on the stream they were written to.
#[test]
fn binary_output_survives_byte_for_byte() {
    let mut scene = Scene::new("binary");
    let ended = one_flight(
        &mut scene,
        3,
        r"printf 'a\000b\377\376c'; printf '\200\000err' >&2
wait_for release
printf '\000end\377'",
    );
    assert_all_alike(&ended);
    assert_eq!(ended[0].code, Some(0));
    assert_eq!(ended[0].stdout, b"a\0b\xff\xfec\0end\xff");
    assert_eq!(ended[0].stderr, b"\x80\0err");
}

/// §13.2: an output larger than a message may carry passes through a 0600
/// spill file, which is gone once every process is done.
#[test]
fn outputs_over_the_frame_limit_pass_through_a_spill_file() {
    let mut scene = Scene::new("spill");
    // 9 MiB of every byte value, more than MAX_FRAME_BYTES (8 MiB).
    let mut big = Vec::with_capacity(9 << 20);
    let mut state: u32 = 1;
    while big.len() < 9 << 20 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        big.push((state >> 24) as u8);
    }
    fs::write(scene.work.join("big"), &big).unwrap();
    let indexes: Vec<usize> = (0..3)
        .map(|_| scene.start_run("k", "cat big; wait_for release"))
        .collect();
    scene.until_joiners("k", 2);
    scene.until("the spill file", |scene| {
        scene
            .output_files()
            .iter()
            .any(|name| !name.ends_with(".lock"))
    });
    for name in scene.output_files() {
        let mode = fs::metadata(scene.dir.join(&name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
    scene.release("release");
    let ended: Vec<Ended> = indexes.into_iter().map(|index| scene.end(index)).collect();
    for ended in &ended {
        assert_eq!(ended.code, Some(0), "{}", ended.stderr_text());
        assert!(ended.stdout == big, "the output differs from the file");
    }
    assert_eq!(scene.output_files(), Vec::<String>::new());
}

/// §13.3: a command that does not exist exits 127, one that cannot be
/// executed 126, with a message, as in a shell.
#[test]
fn a_command_that_cannot_start_fails_as_in_a_shell() {
    let mut scene = Scene::new("cannot-start");
    fs::write(scene.work.join("not-executable"), "#!/bin/sh\necho no\n").unwrap();
    let dir = scene.dir_arg().to_owned();
    for (command, code, says) in [
        (
            "no-such-command-for-single-flight",
            127,
            "command not found",
        ),
        ("./not-executable", 126, "Permission denied"),
    ] {
        let ended = scene.run(&["run", "--dir", &dir, "--key", "k", "--", command]);
        assert_eq!(ended.code, Some(code), "{command}");
        let stderr = ended.stderr_text();
        assert!(stderr.starts_with("single-flight: cannot run"), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// §13.2: a leader that cannot start its command shares the failure: its
/// joiners exit 127 or 126 with the same message. The leader here is the
/// test itself, through the library, so that it can wait for its joiners
/// before it fails.
#[test]
fn joiners_of_a_command_that_cannot_start_fail_alike() {
    for (name, code) in [("CommandNotFound", 127), ("CommandNotExecutable", 126)] {
        let mut scene = Scene::new(&format!("cannot-start-joiners-{code}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let flights = runtime.block_on(SingleFlight::open(&scene.dir)).unwrap();
        let leading = {
            let flights = flights.clone();
            let dir = scene.dir.clone();
            runtime.spawn(async move {
                flights
                    .run("k", |_token| async move {
                        while !has_joiners(&dir, 2).await {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err::<String, _>(Failure {
                            name: name.into(),
                            message: "cannot run \"x\": it failed to start".into(),
                            code: Some(FailureCode::Number(2)),
                        })
                    })
                    .await
            })
        };
        // The test's call leads before any joiner starts.
        let start = Instant::now();
        while runtime
            .block_on(single_flight::SingleFlight::builder(&scene.dir).status())
            .map_or(true, |status| status.flights.is_empty())
        {
            assert!(start.elapsed() < PATIENCE, "the test's call did not lead");
            std::thread::sleep(Duration::from_millis(10));
        }
        let joiners: Vec<usize> = (0..2)
            .map(|_| scene.start_run("k", "echo ran >> runs"))
            .collect();
        let led = runtime.block_on(leading).unwrap();
        assert!(led.is_err());
        for index in joiners {
            let ended = scene.end(index);
            assert_eq!(ended.code, Some(code));
            assert_eq!(
                ended.stderr_text(),
                "single-flight: cannot run \"x\": it failed to start\n"
            );
        }
        assert!(
            !scene.work.join("runs").exists(),
            "no joiner ran the command"
        );
        runtime.block_on(flights.close());
    }
}

/// Whether the flight of "k" has `joiners` joiners.
async fn has_joiners(dir: &Path, joiners: u64) -> bool {
    single_flight::SingleFlight::builder(dir)
        .status()
        .await
        .is_ok_and(|status| {
            status
                .flights
                .iter()
                .any(|flight| flight.key.as_str() == "k" && flight.joiners == joiners)
        })
}

/// §13.3: a leader killed with SIGKILL interrupts its joiners, which say so
/// in one line and exit 75.
#[test]
fn a_killed_leader_interrupts_its_joiners() {
    let mut scene = Scene::new("killed-leader");
    let indexes: Vec<usize> = (0..3)
        .map(|_| scene.start_run("k", "echo $PPID > leader; wait_for release; echo late"))
        .collect();
    scene.until_joiners("k", 2);
    let leader = scene.index_of_pid_in("leader");
    scene.signal(leader, Signal::KILL);
    for index in indexes {
        let ended = scene.end(index);
        if index == leader {
            assert_eq!(ended.signal, Some(9));
            continue;
        }
        assert_eq!(ended.code, Some(75), "{}", ended.stderr_text());
        assert!(ended.stdout.is_empty());
        let stderr = ended.stderr_text();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        assert!(stderr.contains("run again"), "{stderr}");
    }
}

/// §13.4: SIGTERM to a leader stops its command and interrupts its
/// joiners; the leader exits 143.
#[test]
fn sigterm_on_a_leader_stops_its_command_and_interrupts_its_joiners() {
    let mut scene = Scene::new("sigterm-leader");
    let indexes: Vec<usize> = (0..3)
        .map(|_| {
            scene.start_run(
                "k",
                "echo $$ > command; echo $PPID > leader; wait_for release; echo late",
            )
        })
        .collect();
    scene.until_joiners("k", 2);
    let leader = scene.index_of_pid_in("leader");
    let command = scene.note("command");
    scene.signal(leader, Signal::TERM);
    for index in indexes {
        let ended = scene.end(index);
        let expected = if index == leader { 143 } else { 75 };
        assert_eq!(ended.code, Some(expected), "{}", ended.stderr_text());
        assert!(ended.stdout.is_empty());
    }
    scene.until("the command to end", |_| gone(&command));
}

/// §13.4, issue 28 item 8: a leader stopped by a signal kills COMMAND's
/// process group once COMMAND itself has exited, although a process it left
/// in the background (which ignores SIGINT, as a non-interactive shell's
/// background jobs do) still holds its output: the leader exits 130 then,
/// not when that process ends or `KILL_GRACE` (10 s) passes.
#[test]
fn a_stopped_leader_kills_what_its_command_left_behind() {
    let mut scene = Scene::new("stopped-leftovers");
    let script = "trap 'echo trapped > trapped; exit 3' INT; echo $PPID > leader; \
        sleep 120 & echo $! > background; wait";
    let leader = start_run_with(&mut scene, &[], script);
    let background = scene.note("background");
    assert_eq!(scene.index_of_pid_in("leader"), leader);
    let signalled = Instant::now();
    scene.signal(leader, Signal::INT);
    let ended = scene.end(leader);
    assert_eq!(ended.code, Some(130), "{}", ended.stderr_text());
    assert_eq!(scene.note("trapped"), "trapped");
    // The one bound on time here is far from both the 120 s that the
    // background process would hold the leader and the 10 s of KILL_GRACE.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "the leader waited {:?} for what its command left behind",
        signalled.elapsed()
    );
    scene.until("the background process to be killed", |_| gone(&background));
}

/// §15.4, issue 28 item 9: a second stop signal to a `--detach` leader
/// stops COMMAND at once, even one that ignores SIGTERM: it is killed, the
/// leader exits 143, and its joiner is interrupted (exit 75) rather than
/// handed what COMMAND wrote before it was killed.
#[test]
fn a_second_signal_stops_a_detached_leaders_command_at_once() {
    let mut scene = Scene::new("detach-twice");
    let script = "trap '' TERM; echo $$ > command; echo $PPID > leader; echo before; \
        wait_for never; echo after";
    let first = start_run_with(&mut scene, &["--detach"], script);
    let command = scene.note("command");
    let joiner = start_run_with(&mut scene, &[], script);
    scene.until_joiners("k", 1);
    assert_eq!(scene.index_of_pid_in("leader"), first);
    scene.signal(first, Signal::TERM);
    scene.until("the flight to be detached", |scene| {
        scene.status().is_some_and(|status| {
            status
                .flights
                .iter()
                .any(|flight| flight.key.as_str() == "k" && flight.detached)
        })
    });
    // §13.5: the JSON form marks the flight as the wire does.
    let dir = scene.dir_arg().to_owned();
    let json = scene.run(&["status", "--dir", &dir, "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["flights"][0]["detached"], true, "{report}");
    scene.signal(first, Signal::TERM);
    let led = scene.end(first);
    assert_eq!(led.code, Some(143), "{}", led.stderr_text());
    let joined = scene.end(joiner);
    assert_eq!(joined.code, Some(75), "{}", joined.stderr_text());
    assert!(joined.stdout.is_empty(), "{:?}", joined.stdout);
    scene.until("the command to be killed", |_| gone(&command));
}

/// §13.4: SIGTERM to a joiner only withdraws it: the flight goes on and
/// the others get its output.
#[test]
fn sigterm_on_a_joiner_only_withdraws_it() {
    let mut scene = Scene::new("sigterm-joiner");
    let indexes: Vec<usize> = (0..3)
        .map(|_| scene.start_run("k", "echo $PPID > leader; wait_for release; echo done"))
        .collect();
    scene.until_joiners("k", 2);
    let leader = scene.index_of_pid_in("leader");
    let quitter = indexes
        .iter()
        .copied()
        .find(|&index| index != leader)
        .unwrap();
    scene.signal(quitter, Signal::TERM);
    let ended = scene.end(quitter);
    assert_eq!(ended.code, Some(143));
    scene.until_joiners("k", 1);
    scene.release("release");
    for index in indexes.into_iter().filter(|&index| index != quitter) {
        let ended = scene.end(index);
        assert_eq!(ended.code, Some(0), "{}", ended.stderr_text());
        assert_eq!(ended.stdout, b"done\n");
    }
}

/// §13.4: `--timeout` stops a leader's command and exits 124.
#[test]
fn a_timeout_stops_the_command_and_exits_124() {
    let mut scene = Scene::new("timeout");
    let dir = scene.dir_arg().to_owned();
    let script = format!("{PRELUDE}echo $$ > command; wait_for release");
    let ended = scene.run(&[
        "run",
        "--dir",
        &dir,
        "--key",
        "k",
        "--timeout",
        "0.5",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(ended.code, Some(124));
    assert!(
        ended.stderr_text().contains("--timeout"),
        "{}",
        ended.stderr_text()
    );
    let command = scene.note("command");
    scene.until("the command to end", |_| gone(&command));
}

/// §13.2: a leader's command reads its standard input (not a terminal
/// here); §13.1: `SINGLE_FLIGHT_DIR` chooses the directory.
#[test]
fn the_command_reads_the_leaders_stdin() {
    let mut scene = Scene::new("stdin");
    let mut command = scene.command();
    command
        .env("SINGLE_FLIGHT_DIR", &scene.dir)
        .args(["run", "--key", "k", "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped());
    let index = scene.start_command(command);
    let child = scene.runs[index].child.as_mut().unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let ended = scene.end(index);
    assert_eq!(ended.code, Some(0), "{}", ended.stderr_text());
    assert_eq!(ended.stdout, b"HELLO\n");
    assert!(scene.dir.join("flight.epoch").exists());
}

/// §13.5: `status` reports the coordinator and the flights in progress, in
/// text and JSON, and exits 3 when no coordinator runs.
#[test]
fn status_reports_the_coordinator_and_its_flights() {
    let mut scene = Scene::new("status");
    let dir = scene.dir_arg().to_owned();

    let none = scene.run(&["status", "--dir", &dir, "--json"]);
    assert_eq!(none.code, Some(3));
    let report: serde_json::Value = serde_json::from_slice(&none.stdout).unwrap();
    assert_eq!(
        report,
        serde_json::json!({"directory": dir, "coordinator": null, "flights": [], "omitted": 0})
    );
    let none = scene.run(&["status", "--dir", &dir]);
    assert_eq!(none.code, Some(3));
    assert!(String::from_utf8_lossy(&none.stdout).contains("no coordinator"));

    let indexes: Vec<usize> = (0..3)
        .map(|_| {
            scene.start_run(
                "build:app",
                "echo $SINGLE_FLIGHT_TOKEN > token; wait_for release",
            )
        })
        .collect();
    scene.until_joiners("build:app", 2);
    let token = scene.note("token");
    let coordinator = scene.status().unwrap().pid;

    let json = scene.run(&["status", "--dir", &dir, "--json"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr_text());
    let mut report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let stats = report["coordinator"]["stats"].take();
    assert_eq!(
        report,
        serde_json::json!({
            "directory": dir,
            "coordinator": {"pid": coordinator, "epoch": "1", "grace_window": null, "stats": null},
            "flights": [{"key": "build:app", "token": token, "joiners": 2}],
            "omitted": 0,
        })
    );
    // §8.11: the three runs and this status are open; the test's own looks
    // at the status may be, too, until the coordinator reads their close.
    assert!(stats["connections_open"].as_u64().unwrap() >= 4, "{stats}");
    assert_eq!(
        (&stats["flights_led"], &stats["joins"]),
        (&1.into(), &2.into())
    );
    report["coordinator"]["stats"] = stats;
    let text = scene.run(&["status", "--dir", &dir]);
    assert_eq!(text.code, Some(0));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("pid {coordinator}, epoch 1")),
        "{text}"
    );
    assert!(text.contains("\"build:app\""), "{text}");
    assert!(text.contains(&token), "{text}");

    // `--help` documents every member the JSON form has.
    let help = scene.run(&["status", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    let mut members = Vec::new();
    collect_members(&report, &mut members);
    members.push("waiting".into()); // only inside an open grace window
    members.push("detached".into()); // only on a detached flight (§15.2)
    for member in members {
        assert!(
            help.contains(&format!("\"{member}\"")),
            "{member} in {help}"
        );
    }

    scene.release("release");
    for index in indexes {
        assert_eq!(scene.end(index).code, Some(0));
    }
}

/// §13.5, §8.11: after a stampede on a coordinator that `serve` holds,
/// `status --format openmetrics` parses as OpenMetrics and shows what the
/// term counted: one flight led, its five joiners, its value, and a
/// connection refused at its hello; the JSON and text forms show the same.
/// With no coordinator the exposition is complete too, and says so.
#[test]
fn status_in_openmetrics_counts_a_stampede() {
    let mut scene = Scene::new("openmetrics");
    let dir = scene.dir_arg().to_owned();
    let label = [("directory", dir.as_str())];
    let exposition = |scene: &mut Scene, code: i32| {
        let ended = scene.run(&["status", "--dir", &dir, "--format", "openmetrics"]);
        assert_eq!(ended.code, Some(code), "{}", ended.stderr_text());
        let text = String::from_utf8(ended.stdout).unwrap();
        openmetrics::read(&text)
    };

    let none = exposition(&mut scene, 3);
    assert_eq!(
        openmetrics::value(&none, "single_flight_coordinator_up", &label),
        0.0
    );

    let server = scene.start(&["serve", "--dir", &dir]);
    let pid = scene.pid(server);
    scene.until("serve to coordinate", |scene| {
        scene.status().is_some_and(|status| status.pid == pid)
    });
    // A peer that sends no hello of ours is refused at the handshake, by
    // the shell, before the coordinator hears of it (§4.2, §8.11).
    let mut stranger =
        std::os::unix::net::UnixStream::connect(scene.dir.join("flight.sock")).unwrap();
    stranger.write_all(b"not a hello\n").unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut stranger, &mut answer).unwrap();
    scene.until("the refusal to be counted", |scene| {
        scene
            .status()
            .and_then(|status| status.stats)
            .is_some_and(|stats| stats.connections_refused == 1)
    });

    let ended = one_flight(
        &mut scene,
        6,
        "echo ran >> runs; wait_for release; echo out",
    );
    assert_all_alike(&ended);
    assert_eq!(ended[0].code, Some(0));
    assert_eq!(
        fs::read_to_string(scene.work.join("runs")).unwrap(),
        "ran\n"
    );

    let samples = exposition(&mut scene, 0);
    let at = |name: &str, more: &[(&str, &str)]| {
        let mut labels = label.to_vec();
        labels.extend_from_slice(more);
        openmetrics::value(&samples, &format!("single_flight_{name}"), &labels)
    };
    assert_eq!(at("coordinator_up", &[]), 1.0);
    assert_eq!(at("coordinator_epoch", &[]), 1.0);
    assert_eq!(at("flights_in_progress", &[]), 0.0);
    assert_eq!(at("flights_led_total", &[]), 1.0);
    assert_eq!(at("joins_total", &[]), 5.0);
    assert_eq!(at("dedupe_ratio", &[]), 5.0 / 6.0);
    assert_eq!(at("lands_total", &[("outcome", "value")]), 1.0);
    assert_eq!(at("lands_total", &[("outcome", "failure")]), 0.0);
    assert_eq!(at("interruptions_total", &[]), 0.0);
    assert_eq!(at("grace_windows_total", &[]), 0.0);
    assert_eq!(at("connections_refused_total", &[]), 1.0);
    // This status's own connection is open while it is answered.
    assert!(at("connections_open", &[]) >= 1.0);

    let json = scene.run(&["status", "--dir", &dir, "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let stats = &report["coordinator"]["stats"];
    assert_eq!(stats["flights_led"], 1, "{report}");
    assert_eq!(stats["joins"], 5, "{report}");
    assert_eq!(stats["lands_value"], 1, "{report}");
    assert_eq!(stats["connections_refused"], 1, "{report}");
    assert_eq!(stats["dedupe_ratio"], 5.0 / 6.0, "{report}");
    let text = scene.run(&["status", "--dir", &dir]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("this term    1 flight led, 5 joins: 83% of the runs answered"),
        "{text}"
    );

    // `--json` is `--format json`: both at once is a usage error.
    let both = scene.run(&["status", "--dir", &dir, "--json", "--format", "json"]);
    assert_eq!(both.code, Some(125), "{}", both.stderr_text());

    scene.signal(server, Signal::TERM);
    assert_eq!(scene.end(server).code, Some(0));
}

/// The names of every member of every object in `value`.
fn collect_members(value: &serde_json::Value, names: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(members) => {
            for (name, member) in members {
                names.push(name.clone());
                collect_members(member, names);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                collect_members(item, names);
            }
        }
        _ => {}
    }
}

/// §13.5: `serve` holds the coordinator until SIGTERM, logging on stderr
/// (§13.1: in plain text, stderr being a file); flights go through it.
#[test]
fn serve_holds_the_coordinator_until_sigterm() {
    let mut scene = Scene::new("serve");
    let dir = scene.dir_arg().to_owned();
    let server = scene.start(&["serve", "--dir", &dir]);
    let pid = scene.pid(server);
    scene.until("serve to coordinate", |scene| {
        scene.status().is_some_and(|status| status.pid == pid)
    });
    let ran = scene.run(&["run", "--dir", &dir, "--key", "k", "--", "echo", "hi"]);
    assert_eq!(ran.code, Some(0));
    assert_eq!(ran.stdout, b"hi\n");
    assert_eq!(scene.status().unwrap().pid, pid, "the term lasts");
    scene.signal(server, Signal::TERM);
    let ended = scene.end(server);
    assert_eq!(ended.code, Some(0));
    let logs = ended.stderr_text();
    assert!(logs.contains("serving"), "{logs}");
    assert!(logs.contains("SIGTERM"), "{logs}");
    assert!(
        !ended.stderr.contains(&0x1b),
        "no ANSI escape in a log file: {logs:?}"
    );
    assert!(scene.status().is_none());
}

/// §13.1: the default directory is `$XDG_RUNTIME_DIR/single-flight` when
/// that is a private directory of the user's, otherwise
/// `single-flight-<uid>` in the temporary directory.
#[test]
fn the_default_directory_is_per_user() {
    let scene = Scene::new("default-dir");
    let runtime = scene.root.join("runtime");
    let temp = scene.root.join("temp");
    fs::create_dir_all(&runtime).unwrap();
    fs::create_dir_all(&temp).unwrap();
    let uid = rustix::process::getuid().as_raw();
    for (mode, expected) in [
        (0o700, runtime.join("single-flight")),
        (0o755, temp.join(format!("single-flight-{uid}"))),
    ] {
        fs::set_permissions(&runtime, fs::Permissions::from_mode(mode)).unwrap();
        let output = scene
            .command()
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("TMPDIR", &temp)
            .args(["run", "--key", "k", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let metadata = fs::symlink_metadata(&expected).unwrap();
        assert!(metadata.is_dir(), "{}", expected.display());
        assert_eq!(metadata.permissions().mode() & 0o777, 0o700);
        fs::remove_dir_all(&expected).unwrap();
    }
}

/// The help says how to use the command; §13.3: a usage error exits 125,
/// which no exit status of COMMAND is mistaken for.
#[test]
fn help_and_usage_errors() {
    let mut scene = Scene::new("help");
    let help = scene.run(&["--help"]);
    assert_eq!(help.code, Some(0));
    let help = String::from_utf8(help.stdout).unwrap();
    for word in ["run", "serve", "status", "--key"] {
        assert!(help.contains(word), "{word} in {help}");
    }
    let run_help = scene.run(&["run", "--help"]);
    assert_eq!(run_help.code, Some(0));
    let run_help = String::from_utf8(run_help.stdout).unwrap();
    for words in [
        "SINGLE_FLIGHT_TOKEN",
        "SINGLE_FLIGHT_KEY",
        "SINGLE_FLIGHT_DIR",
        "$XDG_RUNTIME_DIR/single-flight",
        "75",
        "124",
        "125",
        "126",
        "127",
        "--timeout",
    ] {
        assert!(run_help.contains(words), "{words} in {run_help}");
    }
    for wrong in [
        &["run", "--key", "k"][..],
        &["run", "--", "true"],
        &["run", "--key", "", "--", "true"],
        &["run", "--key", "k", "--timeout", "0", "--", "true"],
        &["frobnicate"],
    ] {
        let ended = scene.run(wrong);
        assert_eq!(ended.code, Some(125), "{wrong:?}");
        assert!(!ended.stderr.is_empty());
    }
}

/// §11.2: a coordinator served by another user is refused both ways: it
/// closes our connection without a hello, and `status` names its user id
/// instead of talking to it. Needs root, to run the coordinator as another
/// user (65534, `nobody`) in a directory of that user's, which root can
/// still reach.
#[test]
fn another_users_coordinator_is_refused_both_ways() {
    use std::io::Read;
    use std::os::unix::fs::chown;
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;

    const OTHER: u32 = 65534;
    if rustix::process::getuid().as_raw() != 0 {
        eprintln!(
            "§11.2 other-user test skipped: running a coordinator as another user needs root"
        );
        return;
    }
    let scene = Scene::new("other-user");
    // The build's own binary may sit where the other user cannot reach it.
    let bin = scene.root.join("bin");
    fs::create_dir(&bin).unwrap();
    for open in [&scene.root, &bin] {
        fs::set_permissions(open, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let binary = bin.join("single-flight");
    fs::copy(BINARY, &binary).unwrap();
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(&scene.dir).unwrap();
    fs::set_permissions(&scene.dir, fs::Permissions::from_mode(0o700)).unwrap();
    chown(&scene.dir, Some(OTHER), Some(OTHER)).unwrap();

    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut server = Killed(
        Command::new(&binary)
            .args(["serve", "--dir"])
            .arg(&scene.dir)
            .uid(OTHER)
            .gid(OTHER)
            .env_remove("XDG_RUNTIME_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let socket = scene.dir.join("flight.sock");
    let start = Instant::now();
    let mut stream = loop {
        if let Ok(stream) = UnixStream::connect(&socket) {
            break stream;
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            let mut logs = String::new();
            let _ = server.0.stderr.take().unwrap().read_to_string(&mut logs);
            panic!("the other user's coordinator exited with {status}: {logs}");
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the other user's coordinator never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    };

    // The coordinator's side: it closes the connection without a hello.
    // It may close it before the hello is written (EPIPE): either way
    // nothing comes back.
    let _ = stream.write_all(b"{\"protocol\":\"single-flight\",\"version\":1}\n");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(
        answer.is_empty(),
        "the coordinator answered another user: {}",
        String::from_utf8_lossy(&answer)
    );

    // The client's side: `status` refuses the socket and says whose it is.
    let refused = block_on(single_flight::SingleFlight::builder(&scene.dir).status());
    assert!(
        matches!(
            refused,
            Err(single_flight::StatusError::OtherUser { uid: OTHER, .. })
        ),
        "{refused:?}"
    );
    drop(server);
}

/// §13.5 (issue 28): against a coordinator too old for `status` (one that
/// answers `unsupported`), `status` says so on stderr, prints nothing on
/// stdout whatever the form, and exits 125.
#[test]
fn status_against_a_coordinator_too_old_for_it_exits_125() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;
    let mut scene = Scene::new("status-too-old");
    fs::create_dir(&scene.dir).unwrap();
    fs::set_permissions(&scene.dir, fs::Permissions::from_mode(0o700)).unwrap();
    let listener = UnixListener::bind(scene.dir.join("flight.sock")).unwrap();
    let forms: [&[&str]; 3] = [&[], &["--json"], &["--format", "openmetrics"]];
    // An older coordinator: a hello of this version, and `unsupported`
    // for the request it does not know.
    let older = std::thread::spawn(move || {
        for _ in 0..forms.len() {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut lines = BufReader::new(stream).lines();
            lines.next().unwrap().unwrap();
            writer
                .write_all(
                    b"{\"protocol\":\"single-flight\",\"version\":1,\"epoch\":\"1\",\"pid\":1}\n",
                )
                .unwrap();
            let request: serde_json::Value =
                serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            assert_eq!(request["op"], "status");
            let answer = serde_json::json!({"op": "unsupported", "id": request["id"]});
            writer.write_all(format!("{answer}\n").as_bytes()).unwrap();
        }
    });
    let dir = scene.dir_arg().to_owned();
    for form in forms {
        let mut args = vec!["status", "--dir", &dir];
        args.extend_from_slice(form);
        let ended = scene.run(&args);
        assert_eq!(ended.code, Some(125), "{form:?}: {}", ended.stderr_text());
        assert!(ended.stdout.is_empty(), "{form:?}: {:?}", ended.stdout);
        assert!(
            ended.stderr_text().contains("older"),
            "{}",
            ended.stderr_text()
        );
    }
    older.join().unwrap();
}

/// Starts `single-flight run` with `flags` before `--key k -- sh -c SCRIPT`.
fn start_run_with(scene: &mut Scene, flags: &[&str], script: &str) -> usize {
    let script = format!("{PRELUDE}{script}");
    let dir = scene.dir_arg().to_owned();
    let mut args = vec!["run", "--dir", &dir];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--key", "k", "--", "sh", "-c", &script]);
    scene.start(&args)
}

/// §16.4: `--reuse` runs after a landing within the window print the
/// leader's bytes and exit with its status without running COMMAND; once
/// the window is over it runs again.
#[test]
fn reuse_prints_the_kept_output_without_running() {
    let mut scene = Scene::new("reuse");
    let dir = scene.dir_arg().to_owned();
    // Kept outputs live as long as the coordinator's term (§16.2).
    let server = scene.start(&["serve", "--dir", &dir]);
    let pid = scene.pid(server);
    scene.until("serve to coordinate", |scene| {
        scene.status().is_some_and(|status| status.pid == pid)
    });
    let script = "echo ran >> runs; echo out; echo err >&2; exit 3";
    let first = start_run_with(&mut scene, &["--reuse", "30"], script);
    let first = scene.end(first);
    assert_eq!(first.code, Some(3), "{}", first.stderr_text());
    // The issue's shape: the second run a second after the first ended.
    std::thread::sleep(Duration::from_secs(1));
    let second = start_run_with(&mut scene, &["--reuse", "30", "--verbose"], script);
    let second = scene.end(second);
    assert_eq!(second.code, Some(3));
    assert_eq!(second.stdout, first.stdout);
    let said = second.stderr_text();
    assert!(said.starts_with("err\n"), "{said}");
    assert!(said.contains("reused"), "{said}");
    assert_eq!(scene.note("runs"), "ran", "COMMAND ran once");
    // Without --reuse it runs, and its landing replaces the kept output
    // with nothing (§16.2): the next run with --reuse runs too.
    let third = start_run_with(&mut scene, &[], script);
    assert_eq!(scene.end(third).code, Some(3));
    assert_eq!(scene.note("runs"), "ran\nran");
    let fourth = start_run_with(&mut scene, &["--reuse", "0.2"], script);
    assert_eq!(scene.end(fourth).code, Some(3));
    assert_eq!(scene.note("runs").lines().count(), 3);
    // After a window of 0.2 s, a run with --reuse runs again, sooner or
    // later (the expiry is the coordinator's timer; no time is judged).
    let start = Instant::now();
    loop {
        let again = start_run_with(&mut scene, &["--reuse", "0.2"], script);
        assert_eq!(scene.end(again).code, Some(3));
        if scene.note("runs").lines().count() == 4 {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the reused output never expired"
        );
    }
    scene.signal(server, Signal::TERM);
    scene.end(server);
}

/// §16.4, issue 28 item 7: with no other process running, a `run --reuse`
/// a second after another prints its output and runs nothing; the
/// coordinator that the first left behind ends once nothing is kept, and a
/// run without `--reuse` leaves nothing running.
#[test]
fn reuse_works_between_sequential_runs_with_nobody_else() {
    let mut scene = Scene::new("reuse-sequential");
    let script = "echo ran >> runs; echo out; echo err >&2; exit 3";
    let first = start_run_with(&mut scene, &["--reuse", "5"], script);
    let first = scene.end(first);
    assert_eq!(first.code, Some(3), "{}", first.stderr_text());
    assert_eq!(first.stderr_text(), "err\n");
    std::thread::sleep(Duration::from_secs(1));
    let second = start_run_with(&mut scene, &["--reuse", "5", "--verbose"], script);
    let second = scene.end(second);
    assert_eq!(second.code, Some(3), "{}", second.stderr_text());
    assert_eq!(second.stdout, b"out\n");
    let said = second.stderr_text();
    assert!(said.starts_with("err\n"), "{said}");
    assert!(said.contains("reused"), "{said}");
    assert_eq!(scene.note("runs"), "ran", "COMMAND ran once");
    // Nothing lingers past the window: the background coordinator ends.
    let pid = scene
        .status()
        .expect("a coordinator keeps the output")
        .pid
        .to_string();
    scene.until("the background coordinator to end", |scene| {
        scene.status().is_none() && gone(&pid)
    });
    let plain = start_run_with(&mut scene, &[], script);
    assert_eq!(scene.end(plain).code, Some(3));
    assert!(
        scene.status().is_none(),
        "a run without --reuse left a coordinator"
    );
}

/// §16.4: `--reuse` outside 0.001 <= SECS <= 3600, or not written as
/// decimal seconds, is a usage error.
#[test]
fn reuse_out_of_range_is_a_usage_error() {
    let mut scene = Scene::new("reuse-range");
    let dir = scene.dir_arg().to_owned();
    // Seconds are decimal digits with at most one point (§13.2), and the
    // window at least the protocol's millisecond (§16.1).
    for bad in ["0", "3601", "x", "1e3", "+5", "inf", " 5", "0.0001"] {
        let ended = scene.run(&[
            "run", "--dir", &dir, "--reuse", bad, "--key", "k", "--", "true",
        ]);
        assert_eq!(ended.code, Some(125), "{bad}: {}", ended.stderr_text());
    }
}

/// §15.4: SIGTERM to a `--detach` leader while another run waits: COMMAND
/// goes on, the joiner gets all of its output, the leader stops printing
/// it and exits 143 once COMMAND has ended; COMMAND ran once.
#[test]
fn a_detached_leader_keeps_its_command_for_its_joiner() {
    let mut scene = Scene::new("detach-joined");
    let script = "echo ran >> runs; echo $PPID > leader; echo before; wait_for go; echo after";
    let first = start_run_with(&mut scene, &["--detach"], script);
    scene.note("leader");
    let joiner = start_run_with(&mut scene, &["--detach"], script);
    scene.until_joiners("k", 1);
    assert_eq!(scene.index_of_pid_in("leader"), first);
    scene.signal(first, Signal::TERM);
    // The leader goes on while its command runs; the flight too.
    scene.until_joiners("k", 1);
    scene.release("go");
    let joined = scene.end(joiner);
    assert_eq!(joined.code, Some(0), "{}", joined.stderr_text());
    assert_eq!(joined.stdout, b"before\nafter\n");
    let led = scene.end(first);
    assert_eq!(led.code, Some(143), "{}", led.stderr_text());
    assert!(
        !String::from_utf8_lossy(&led.stdout).contains("after"),
        "the leader printed after it was stopped"
    );
    assert_eq!(scene.note("runs"), "ran");
}

/// §15.4: SIGTERM to a `--detach` leader that nobody waits for stops its
/// command (SIGTERM to its group) and exits 143.
#[test]
fn a_detached_leader_nobody_waits_for_stops() {
    let mut scene = Scene::new("detach-alone");
    let script =
        "trap 'echo stopped > stopped; exit 1' TERM; echo $PPID > leader; wait_for go & wait";
    let leader = start_run_with(&mut scene, &["--detach"], script);
    scene.note("leader");
    scene.signal(leader, Signal::TERM);
    let ended = scene.end(leader);
    assert_eq!(ended.code, Some(143), "{}", ended.stderr_text());
    assert_eq!(scene.note("stopped"), "stopped");
}

/// §15.4: a `--detach` leader whose `--timeout` passes while another run
/// waits lets COMMAND finish for it, then exits 124.
#[test]
fn a_detached_leaders_timeout_leaves_its_joiner_the_output() {
    let mut scene = Scene::new("detach-timeout");
    let dir = scene.dir_arg().to_owned();
    // The joiner must join before the leader's timeout. When a machine is
    // too slow for that, the leader, detached with nobody waiting, stops,
    // and the joiner leads a flight of its own: that proves nothing, and
    // the test tries again with a longer timeout.
    let mut timeout_ms: u64 = 500;
    loop {
        let key = format!("k{timeout_ms}");
        let runs = format!("runs-{key}");
        let script = format!(
            "{PRELUDE}echo ran >> {runs}; echo $PPID > leader-{key}; wait_for go-{key}; echo done"
        );
        let timeout = format!("{}", timeout_ms as f64 / 1000.0);
        let run = |scene: &mut Scene, flags: &[&str]| {
            let mut args = vec!["run", "--dir", &dir, "--key", &key];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "sh", "-c", &script]);
            scene.start(&args)
        };
        let first = run(&mut scene, &["--detach", "--timeout", &timeout]);
        scene.note(&format!("leader-{key}"));
        let joiner = run(&mut scene, &[]);
        // Released once the timeout has passed: the flight is detached,
        // with its joiner (§15.2), or the joiner came too late.
        scene.until("the detached flight, or a second run", |scene| {
            let detached = scene.status().is_some_and(|status| {
                status
                    .flights
                    .iter()
                    .any(|f| f.key.as_str() == key && f.detached && f.joiners == 1)
            });
            detached
                || fs::read_to_string(scene.work.join(&runs))
                    .is_ok_and(|runs| runs.lines().count() > 1)
        });
        scene.release(&format!("go-{key}"));
        let joined = scene.end(joiner);
        let led = scene.end(first);
        if scene.note(&runs).lines().count() > 1 {
            assert!(timeout_ms < 60_000, "no joiner joined within a minute");
            timeout_ms *= 2;
            continue;
        }
        assert_eq!(joined.code, Some(0), "{}", joined.stderr_text());
        assert_eq!(joined.stdout, b"done\n");
        assert_eq!(led.code, Some(124), "{}", led.stderr_text());
        assert!(
            led.stdout.is_empty(),
            "the leader printed after its timeout"
        );
        return;
    }
}

/// §9.2, §13.3: a joiner whose flight did not come back after a failover
/// says that the flight was lost in the failover, not that its leader was
/// killed: here the leader is only paused (SIGSTOP) while the coordinator
/// dies, so it cannot reassert within the grace window.
#[test]
fn a_flight_lost_in_a_failover_is_not_called_a_killed_leader() {
    let mut scene = Scene::new("lost-in-failover");
    let dir = scene.dir_arg().to_owned();
    let server = scene.start(&["serve", "--dir", &dir]);
    let pid = scene.pid(server);
    scene.until("serve to coordinate", |scene| {
        scene.status().is_some_and(|status| status.pid == pid)
    });
    let indexes: Vec<usize> = (0..2)
        .map(|_| scene.start_run("k", "echo $PPID > leader; wait_for release; echo late"))
        .collect();
    scene.until_joiners("k", 1);
    let leader = scene.index_of_pid_in("leader");
    let joiner = indexes.into_iter().find(|&index| index != leader).unwrap();
    // Stopped for certain before its coordinator dies, or it could see the
    // death and campaign first, then stop holding the claim.
    child::stop(scene.pid(leader));
    scene.signal(server, Signal::KILL);
    let ended = scene.end(joiner);
    assert_eq!(ended.code, Some(75), "{}", ended.stderr_text());
    assert!(ended.stdout.is_empty());
    let stderr = ended.stderr_text();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("when its coordinator changed"), "{stderr}");
    assert!(
        !stderr.contains("its leader was killed or stopped before the command finished"),
        "{stderr}"
    );
    assert!(stderr.contains("run again"), "{stderr}");
    scene.signal(leader, Signal::KILL);
}
