//! The tokio shell with real processes (SPEC.md §10, §11): the test binary
//! runs itself again as child processes, each a `SingleFlight` user, and the
//! test watches them through the coordinator's `status` (SPEC.md §3.5).
//!
//! No test asserts on time: every wait polls for a state and gives up after
//! a generous bound, so a slow machine only makes them slower.

// Tests are the shell's peers: they poll with real clocks and sleeps.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use single_flight::{Role, RunError, SingleFlight};
use single_flight_core::protocol::{FlightStatus, Response, decode_response};

/// The longest any wait of these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// The environment variable that makes the test binary a child.
const CHILD: &str = "SINGLE_FLIGHT_TEST_CHILD";

// ---------------------------------------------------------------- children

/// Runs as a child when the environment says so; as a test it does nothing.
#[test]
fn child() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    // `RUST_LOG=single_flight=debug` shows what each child does.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let code = runtime.block_on(run_child(&role));
    std::process::exit(code);
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

async fn run_child(role: &str) -> i32 {
    let dir = PathBuf::from(env("SF_DIR"));
    let mut builder = SingleFlight::builder(&dir);
    if let Ok(ms) = env("SF_GRACE_MS").parse() {
        builder = builder.grace_window(Duration::from_millis(ms));
    }
    let flights = builder.open().await.expect("open");
    match role {
        // Becomes the coordinator (when first) and stays until killed.
        "idle" => {
            let key = format!("warm-{}", std::process::id());
            let warm = flights.run(&key, |_| async { Ok::<_, std::io::Error>(0) });
            warm.await.expect("warm-up call");
            println!("READY");
            std::future::pending::<()>().await;
            0
        }
        "call" => {
            let key = env("SF_KEY");
            let runs = PathBuf::from(env("SF_RUNS"));
            let mut call = flights.call(&key);
            if let Ok(ms) = env("SF_DEADLINE_MS").parse() {
                call = call.deadline(Duration::from_millis(ms));
            }
            let running = call.run(|token| work(runs.clone(), key.clone(), token));
            // `SF_ABANDON=<file>`: the caller drops the call once the test
            // creates that file (SPEC.md §9.5).
            let abandon = env("SF_ABANDON");
            let result = tokio::select! {
                result = running => result,
                () = wait_for(runs.join(&abandon)), if !abandon.is_empty() => {
                    println!("RESULT abandoned");
                    flights.close().await;
                    return 0;
                }
            };
            let line = match result {
                Ok(landed) => {
                    let role = if landed.role == Role::Led {
                        "led"
                    } else {
                        "joined"
                    };
                    format!("{role} {} {}", landed.token, landed.value)
                }
                Err(RunError::FlightFailed { failure, .. }) => {
                    format!("failed {} {}", failure.name, failure.message)
                }
                Err(RunError::Work(error)) => format!("own-failure {error}"),
                Err(RunError::Interrupted { .. }) => "interrupted".to_owned(),
                Err(RunError::DeadlineExceeded { .. }) => "deadline".to_owned(),
                Err(other) => format!("error {other}"),
            };
            println!("RESULT {line}");
            flights.close().await;
            0
        }
        _ => 2,
    }
}

/// The work of a child: records that it ran (a file named after the key and
/// the process, holding the token), then behaves as `SF_WORK` says.
async fn work(
    runs: PathBuf,
    key: String,
    token: single_flight::FencingToken,
) -> Result<String, std::io::Error> {
    let pid = std::process::id();
    // Written whole under a temporary name, so that the test never reads
    // a half-written token.
    let temp = runs.join(format!("{key}.{pid}.tmp"));
    std::fs::write(&temp, token.to_string())?;
    std::fs::rename(&temp, runs.join(format!("{key}.{pid}")))?;
    // `SF_WORK` is a comma-separated list of steps, done in order.
    for step in env("SF_WORK").split(',') {
        if let Some(release) = step.strip_prefix("wait:") {
            // Runs until the test creates the release file.
            while !runs.join(release).exists() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if let Some(other) = step.strip_prefix("needs:") {
            // Finishes only once the work of another key has started:
            // proves that the two run at the same time.
            while !has_run(&runs, other) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if step == "fail" {
            return Err(std::io::Error::other("the disk is on fire"));
        }
        // `value:N` / `error:N`: a value or an error message of N bytes.
        if let Some(len) = step.strip_prefix("value:") {
            return Ok("v".repeat(len.parse().expect("a length")));
        }
        if let Some(len) = step.strip_prefix("error:") {
            let message = "x".repeat(len.parse().expect("a length"));
            return Err(std::io::Error::other(message));
        }
    }
    Ok(format!("value-of-{key}-from-{pid}"))
}

async fn wait_for(file: PathBuf) {
    while !file.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn has_run(runs: &Path, key: &str) -> bool {
    executions(runs, key) > 0
}

fn executions(runs: &Path, key: &str) -> usize {
    std::fs::read_dir(runs)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(key)
                .is_some_and(|rest| rest.starts_with('.') && rest[1..].parse::<u32>().is_ok())
        })
        .count()
}

// ---------------------------------------------------------------- harness

struct Scene {
    root: PathBuf,
    dir: PathBuf,
    runs: PathBuf,
    children: Vec<Child>,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let root = std::env::temp_dir().join(format!("sf-shell-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("flights");
        let runs = root.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        Scene {
            root,
            dir,
            runs,
            children: Vec::new(),
        }
    }

    /// Starts a child; returns its index.
    fn spawn(&mut self, role: &str, vars: &[(&str, &str)]) -> usize {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(CHILD, role)
            .env("SF_DIR", &self.dir)
            .env("SF_RUNS", &self.runs)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            command.env(name, value);
        }
        self.children.push(command.spawn().unwrap());
        self.children.len() - 1
    }

    /// Waits for the line of a child that starts with `prefix`.
    fn line(&mut self, child: usize, prefix: &str) -> String {
        let stdout = self.children[child].stdout.as_mut().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            let read = reader.read_line(&mut line).unwrap();
            assert!(read > 0, "child {child} ended without a {prefix:?} line");
            // libtest prints "test child ... " before the child's own output.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    }

    /// The RESULT line of a child, and its exit.
    fn result(&mut self, child: usize) -> String {
        let result = self.line(child, "RESULT");
        let status = wait_bounded(&mut self.children[child]);
        assert!(status.success(), "child {child} exited with {status}");
        result
    }

    fn kill(&mut self, child: usize) {
        self.children[child].kill().unwrap();
        self.children[child].wait().unwrap();
    }

    /// Polls the coordinator's `status` until `ready` holds.
    fn until(&self, what: &str, ready: impl Fn(&[FlightStatus]) -> bool) -> Vec<FlightStatus> {
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
    fn until_answer(&self, what: &str, ready: impl Fn(&(Vec<FlightStatus>, Option<u64>)) -> bool) {
        let start = Instant::now();
        while !status_answer(&self.dir).is_some_and(|answer| ready(&answer)) {
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn release(&self, name: &str) {
        std::fs::write(self.runs.join(name), b"").unwrap();
    }

    /// The token of the run of `key`, once its work has recorded it (the
    /// coordinator's answer reaches `status` before the work starts).
    fn token_of_run(&self, key: &str) -> u64 {
        let start = Instant::now();
        loop {
            for entry in std::fs::read_dir(&self.runs).unwrap().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let run = name
                    .strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|pid| pid.parse::<u32>().is_ok());
                if run {
                    return std::fs::read_to_string(entry.path())
                        .unwrap()
                        .parse()
                        .unwrap();
                }
            }
            assert!(start.elapsed() < PATIENCE, "no run of {key}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("a child did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The flights in progress, as the coordinator reports them; `None` while
/// no coordinator answers.
fn status(dir: &Path) -> Option<Vec<FlightStatus>> {
    status_answer(dir).map(|(flights, _)| flights)
}

/// The coordinator's answer to `status`: the flights in progress, and the
/// runs waiting for its grace window (`None` when it is closed).
fn status_answer(dir: &Path) -> Option<(Vec<FlightStatus>, Option<u64>)> {
    let mut stream = UnixStream::connect(dir.join("flight.sock")).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(
            b"{\"protocol\":\"single-flight\",\"version\":1}\n{\"op\":\"status\",\"id\":\"s\"}\n",
        )
        .ok()?;
    let mut text = String::new();
    let mut reader = BufReader::new(stream.try_clone().ok()?);
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

fn joiners(flights: &[FlightStatus], key: &str) -> Option<u64> {
    flights
        .iter()
        .find(|f| f.key.as_str() == key)
        .map(|f| f.joiners)
}

// ---------------------------------------------------------------- tests

/// §8.2: processes calling one key at once: exactly one runs the work, all
/// get its value.
#[test]
fn one_key_many_processes_one_execution() {
    let mut scene = Scene::new("one-key");
    let callers: Vec<usize> = (0..6)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]))
        .collect();
    scene.until("five joiners", |f| joiners(f, "k") == Some(5));
    scene.release("go");
    let results: Vec<String> = callers.iter().map(|&c| scene.result(c)).collect();
    assert_eq!(executions(&scene.runs, "k"), 1);
    let led: Vec<&String> = results.iter().filter(|r| r.starts_with("led ")).collect();
    assert_eq!(led.len(), 1, "{results:?}");
    let value = led[0].strip_prefix("led ").unwrap();
    for result in &results {
        assert!(
            result.ends_with(value.split_once(' ').unwrap().1),
            "{results:?}"
        );
        assert!(
            result.starts_with("led ") || result.starts_with("joined "),
            "{results:?}"
        );
    }
}

/// §8.5: the leader's failure reaches every joiner as that failure.
#[test]
fn leader_failure_reaches_joiners() {
    let mut scene = Scene::new("failure");
    let callers: Vec<usize> = (0..4)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go,fail")]))
        .collect();
    scene.until("three joiners", |f| joiners(f, "k") == Some(3));
    scene.release("go");
    let mut results: Vec<String> = callers.iter().map(|&c| scene.result(c)).collect();
    results.sort();
    assert_eq!(executions(&scene.runs, "k"), 1);
    assert_eq!(
        results,
        [
            "failed Error the disk is on fire",
            "failed Error the disk is on fire",
            "failed Error the disk is on fire",
            "own-failure the disk is on fire",
        ]
    );
}

/// §3.4: a leader's value or error whose outcome is exactly
/// `MAX_OUTCOME_BYTES` reaches its joiner; one byte more and the joiner gets
/// the `ValueTooLarge` failure, saying how large it was, while the leader
/// keeps its own result. The leader never sends a line over the frame limit,
/// which would close its connection on every reconnect.
#[test]
fn outcomes_over_the_limit_reach_joiners_as_value_too_large() {
    use single_flight_core::protocol::limits::MAX_OUTCOME_BYTES;
    // The default codec writes a string as JSON (`"vv…"`), in an outcome
    // `{"value":"\"vv…\""}`: 16 bytes around the value.
    let value = |len: usize| format!("wait:go,value:{}", len - 16);
    // `{"failure":{"name":"Error","message":"xx…"}}`: 41 bytes around.
    let error = |len: usize| format!("wait:go,error:{}", len - 41);
    let cases = [
        ("value-at", value(MAX_OUTCOME_BYTES), "joined"),
        (
            "value-over",
            value(MAX_OUTCOME_BYTES + 1),
            "failed ValueTooLarge",
        ),
        ("error-at", error(MAX_OUTCOME_BYTES), "failed Error xxx"),
        (
            "error-over",
            error(MAX_OUTCOME_BYTES + 1),
            "failed ValueTooLarge",
        ),
    ];
    let mut scene = Scene::new("too-large");
    let coordinator = scene.spawn("idle", &[]);
    scene.line(coordinator, "READY");
    let mut callers = Vec::new();
    for (key, work, _) in &cases {
        let leader = scene.spawn("call", &[("SF_KEY", key), ("SF_WORK", work)]);
        scene.until("the leader", |f| joiners(f, key) == Some(0));
        let joiner = scene.spawn("call", &[("SF_KEY", key), ("SF_WORK", work)]);
        scene.until("the joiner", |f| joiners(f, key) == Some(1));
        callers.push((leader, joiner));
    }
    scene.release("go");
    for ((key, _, expected), (leader, joiner)) in cases.iter().zip(callers) {
        let led = scene.result(leader);
        assert!(
            led.starts_with("led ") || led.starts_with("own-failure xxx"),
            "{key}: the leader keeps its result"
        );
        let joined = scene.result(joiner);
        assert!(
            joined.starts_with(expected),
            "{key}: {}",
            &joined[..joined.len().min(200)]
        );
        if expected.ends_with("ValueTooLarge") {
            let size = (MAX_OUTCOME_BYTES + 1).to_string();
            assert!(joined.contains(&size), "{key}: {joined}");
        }
    }
}

/// §8.2: different keys run in parallel: each work finishes only once the
/// other has started.
#[test]
fn different_keys_run_in_parallel() {
    let mut scene = Scene::new("parallel");
    let a = scene.spawn("call", &[("SF_KEY", "a"), ("SF_WORK", "needs:b")]);
    let b = scene.spawn("call", &[("SF_KEY", "b"), ("SF_WORK", "needs:a")]);
    assert!(scene.result(a).starts_with("led "));
    assert!(scene.result(b).starts_with("led "));
}

/// §8.7: a leader killed with SIGKILL: its joiners are interrupted (and do
/// not run the work), and a new call leads a new flight with a larger token.
#[test]
fn killed_leader_interrupts_joiners() {
    let mut scene = Scene::new("killed-leader");
    let coordinator = scene.spawn("idle", &[]);
    scene.line(coordinator, "READY");
    let leader = scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:never")]);
    scene.until("a flight", |f| joiners(f, "k").is_some());
    let old_token = scene.token_of_run("k");
    let joiners_: Vec<usize> = (0..3)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:never")]))
        .collect();
    scene.until("three joiners", |f| joiners(f, "k") == Some(3));
    scene.kill(leader);
    for j in joiners_ {
        assert_eq!(scene.result(j), "interrupted");
    }
    assert_eq!(executions(&scene.runs, "k"), 1, "a joiner ran the work");
    let next = scene.spawn("call", &[("SF_KEY", "k")]);
    let result = scene.result(next);
    let token: u64 = result.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        result.starts_with("led ") && token > old_token,
        "{result} after {old_token}"
    );
}

/// §10: the coordinator's process killed with SIGKILL while another process
/// leads: a new coordinator is elected, the leader reasserts, its joiners
/// rejoin and receive its value, and nobody runs the work again.
#[test]
fn killed_coordinator_fails_over_without_rerun() {
    let mut scene = Scene::new("failover");
    let coordinator = scene.spawn("idle", &[]);
    scene.line(coordinator, "READY");
    let leader = scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]);
    scene.until("a flight", |f| joiners(f, "k").is_some());
    let token = scene.token_of_run("k");
    let joiners_: Vec<usize> = (0..3)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]))
        .collect();
    scene.until("three joiners", |f| joiners(f, "k") == Some(3));
    scene.kill(coordinator);
    // The new term shows the same flight, reasserted, with its joiners back.
    scene.until("the reasserted flight with its joiners", |f| {
        f.iter()
            .any(|f| f.key.as_str() == "k" && f.token.get() == token && f.joiners == 3)
    });
    scene.release("go");
    let led = scene.result(leader);
    assert!(led.starts_with(&format!("led {token} ")), "{led}");
    let value = led.rsplit(' ').next().unwrap().to_owned();
    for j in joiners_ {
        assert_eq!(scene.result(j), format!("joined {token} {value}"));
    }
    assert_eq!(executions(&scene.runs, "k"), 1, "the work ran again");
}

/// §8.3, §8.4: after a failover a reasserted flight is held for the grace
/// window; a run that waits there and the flight that lands before the
/// window ends: the run receives its value, as a joiner, and the work does
/// not run again. The window is long (a minute) so that it is still open
/// when the flight lands; nothing in the test waits for it to end.
#[test]
fn a_flight_landing_in_the_grace_window_answers_the_runs_that_wait() {
    let mut scene = Scene::new("held");
    let grace = [("SF_GRACE_MS", "60000")];
    let coordinator = scene.spawn("idle", &grace);
    scene.line(coordinator, "READY");
    let leader = scene.spawn("call", &[grace[0], ("SF_KEY", "k"), ("SF_WORK", "wait:go")]);
    scene.until("a flight", |f| joiners(f, "k").is_some());
    let token = scene.token_of_run("k");
    scene.kill(coordinator);
    // The leader is the only process left: it coordinates the new term and
    // reasserts its flight there.
    let held = |waiting: u64| {
        move |(flights, in_grace): &(Vec<FlightStatus>, Option<u64>)| {
            *in_grace == Some(waiting)
                && flights
                    .iter()
                    .any(|f| f.key.as_str() == "k" && f.token.get() == token)
        }
    };
    scene.until_answer("the held flight in the new term's window", held(0));
    let waiter = scene.spawn("call", &[grace[0], ("SF_KEY", "k"), ("SF_WORK", "fail")]);
    scene.until_answer("the run waiting for the window", held(1));
    scene.release("go");
    let led = scene.result(leader);
    assert!(led.starts_with(&format!("led {token} ")), "{led}");
    let value = led.rsplit(' ').next().unwrap().to_owned();
    assert_eq!(scene.result(waiter), format!("joined {token} {value}"));
    assert_eq!(executions(&scene.runs, "k"), 1, "the work ran again");
}

/// §8.6: a joiner that gives up (its deadline) leaves alone; a leader that
/// gives up interrupts its joiners.
#[test]
fn cancelled_calls() {
    let mut scene = Scene::new("cancel");
    let leader = scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]);
    scene.until("a flight", |f| joiners(f, "k").is_some());
    let impatient = scene.spawn("call", &[("SF_KEY", "k"), ("SF_DEADLINE_MS", "300")]);
    let patient = scene.spawn("call", &[("SF_KEY", "k")]);
    assert_eq!(scene.result(impatient), "deadline");
    scene.until("one joiner left", |f| joiners(f, "k") == Some(1));
    scene.release("go");
    assert!(scene.result(leader).starts_with("led "));
    assert!(scene.result(patient).starts_with("joined "));

    let leader = scene.spawn(
        "call",
        &[
            ("SF_KEY", "j"),
            ("SF_WORK", "wait:never"),
            ("SF_ABANDON", "drop"),
        ],
    );
    scene.until("a flight", |f| joiners(f, "j").is_some());
    let joiner = scene.spawn("call", &[("SF_KEY", "j")]);
    scene.until("a joiner", |f| joiners(f, "j") == Some(1));
    scene.release("drop");
    assert_eq!(scene.result(leader), "abandoned");
    assert_eq!(scene.result(joiner), "interrupted");
}

/// §7.4: a directory others may write to, or a symlink, is refused at open.
#[tokio::test]
async fn refused_directories() {
    use std::os::unix::fs::PermissionsExt;
    let scene = Scene::new("refused");
    std::fs::create_dir_all(&scene.dir).unwrap();
    std::fs::set_permissions(&scene.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = SingleFlight::open(&scene.dir).await.err().expect("refused");
    assert!(error.to_string().contains("chmod 700"), "{error}");
    let link = scene.root.join("link");
    std::os::unix::fs::symlink(&scene.runs, &link).unwrap();
    let error = SingleFlight::open(&link).await.err().expect("refused");
    assert!(error.to_string().contains("symbolic link"), "{error}");
}

/// §3.5, §10.4: `serve` holds the coordinator in the foreground; `status`
/// reports its term; a clean stop leaves `flight.clean` for the next term.
#[tokio::test]
async fn serve_and_status() {
    let scene = Scene::new("serve");
    let missing = single_flight::status(&scene.dir).await;
    assert!(
        matches!(
            missing,
            Err(single_flight::StatusError::NoCoordinator { .. })
        ),
        "{missing:?}"
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(SingleFlight::builder(&scene.dir).serve(async {
        let _ = stopped.await;
    }));
    let start = Instant::now();
    let status = loop {
        if let Ok(status) = single_flight::status(&scene.dir).await {
            break status;
        }
        assert!(start.elapsed() < PATIENCE, "serve never answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status.pid, std::process::id());
    assert_eq!(status.epoch, single_flight::Epoch::FIRST);
    assert!(status.flights.is_empty());
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    // §7.1: every file of the directory is the owner's alone.
    for file in [
        single_flight::_internal::shell::CLEAN_FILE,
        "flight.lock",
        "flight.epoch",
    ] {
        let mode = std::fs::metadata(scene.dir.join(file))
            .unwrap_or_else(|error| panic!("{file}: {error}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file} has mode {mode:o}");
    }
}

/// §3.5, §11.1: a directory too long for a socket address that does not
/// exist has no coordinator, like a short one.
#[tokio::test]
async fn status_of_a_missing_long_directory() {
    let scene = Scene::new("status-long");
    let long = scene.root.join("d".repeat(150)).join("missing");
    let missing = single_flight::status(&long).await;
    assert!(
        matches!(
            missing,
            Err(single_flight::StatusError::NoCoordinator { .. })
        ),
        "{missing:?}"
    );
}
