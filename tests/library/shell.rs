//! The tokio shell with real processes (SPEC.md §10, §11): the test binary
//! runs itself again as child processes, each a `SingleFlight` user, and the
//! test watches them through the coordinator's `status` (SPEC.md §3.5);
//! support/scene.rs is the stage.
//!
//! No test asserts on time: every wait polls for a state and gives up after
//! a generous bound, so a slow machine only makes them slower.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use single_flight::SingleFlight;
use single_flight_core::protocol::FlightStatus;

use crate::support::PATIENCE;
use crate::support::child::{say, unknown, var};
use crate::support::scene::{Scene, describe, executions, idle, joiners, until_exists, work};

/// The scene of a test of this module, whose children play its roles.
fn scene(name: &str) -> Scene {
    Scene::new("shell", name)
}

// ---------------------------------------------------------------- children

/// A child of this module in `role` (support/child.rs); its exit code.
pub fn child(role: &str) -> i32 {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run_child(role))
}

async fn run_child(role: &str) -> i32 {
    let dir = PathBuf::from(var("SF_DIR"));
    let mut builder = SingleFlight::builder(&dir);
    if let Ok(ms) = var("SF_GRACE_MS").parse() {
        builder = builder.grace_window(Duration::from_millis(ms));
    }
    let flights = builder.open().await.expect("open");
    match role {
        "idle" => idle(&flights).await,
        // One call of `SF_KEY`, whose work does `SF_WORK` (support/scene.rs).
        "call" => {
            let key = var("SF_KEY");
            let runs = PathBuf::from(var("SF_RUNS"));
            let mut call = flights.call(&key);
            if let Ok(ms) = var("SF_DEADLINE_MS").parse() {
                call = call.deadline(Duration::from_millis(ms));
            }
            let running = call.run(|token| work(runs.clone(), key.clone(), token, var("SF_WORK")));
            // `SF_ABANDON=<file>`: the caller drops the call once the test
            // creates that file (SPEC.md §9.5).
            let abandon = var("SF_ABANDON");
            let result = tokio::select! {
                result = running => result,
                () = until_exists(runs.join(&abandon)), if !abandon.is_empty() => {
                    say("RESULT abandoned");
                    flights.close().await;
                    return 0;
                }
            };
            say(format_args!("RESULT {}", describe(result)));
            flights.close().await;
            0
        }
        _ => unknown(role),
    }
}

// ---------------------------------------------------------------- tests

/// §8.2: processes calling one key at once: exactly one runs the work, all
/// get its value.
#[test]
fn one_key_many_processes_one_execution() {
    let mut scene = scene("one-key");
    let callers: Vec<usize> = (0..6)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]))
        .collect();
    scene.until("five joiners", |f| joiners(f, "k") == Some(5));
    scene.release("go");
    let results: Vec<String> = callers.iter().map(|&c| scene.finish(c)).collect();
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
    let mut scene = scene("failure");
    let callers: Vec<usize> = (0..4)
        .map(|_| scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go,fail")]))
        .collect();
    scene.until("three joiners", |f| joiners(f, "k") == Some(3));
    scene.release("go");
    let mut results: Vec<String> = callers.iter().map(|&c| scene.finish(c)).collect();
    results.sort();
    assert_eq!(executions(&scene.runs, "k"), 1);
    assert_eq!(
        results,
        [
            "failed Error: the disk is on fire",
            "failed Error: the disk is on fire",
            "failed Error: the disk is on fire",
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
        ("error-at", error(MAX_OUTCOME_BYTES), "failed Error: xxx"),
        (
            "error-over",
            error(MAX_OUTCOME_BYTES + 1),
            "failed ValueTooLarge",
        ),
    ];
    let mut scene = scene("too-large");
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
        let led = scene.finish(leader);
        assert!(
            led.starts_with("led ") || led.starts_with("own-failure xxx"),
            "{key}: the leader keeps its result"
        );
        let joined = scene.finish(joiner);
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
    let mut scene = scene("parallel");
    let a = scene.spawn("call", &[("SF_KEY", "a"), ("SF_WORK", "needs:b")]);
    let b = scene.spawn("call", &[("SF_KEY", "b"), ("SF_WORK", "needs:a")]);
    assert!(scene.finish(a).starts_with("led "));
    assert!(scene.finish(b).starts_with("led "));
}

/// §8.7: a leader killed with SIGKILL: its joiners are interrupted (and do
/// not run the work), and a new call leads a new flight with a larger token.
#[test]
fn killed_leader_interrupts_joiners() {
    let mut scene = scene("killed-leader");
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
        assert_eq!(scene.finish(j), "interrupted");
    }
    assert_eq!(executions(&scene.runs, "k"), 1, "a joiner ran the work");
    let next = scene.spawn("call", &[("SF_KEY", "k")]);
    let result = scene.finish(next);
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
    let mut scene = scene("failover");
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
    let led = scene.finish(leader);
    assert!(led.starts_with(&format!("led {token} ")), "{led}");
    let value = led.rsplit(' ').next().unwrap().to_owned();
    for j in joiners_ {
        assert_eq!(scene.finish(j), format!("joined {token} {value}"));
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
    let mut scene = scene("held");
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
    assert_eq!(scene.finish(waiter), format!("joined {token} {value}"));
    assert_eq!(executions(&scene.runs, "k"), 1, "the work ran again");
    // The leader coordinates a term whose 60 s window is still open: asked
    // to stop, it serves the window out (§10.4). Nothing is left to see.
    scene.kill(leader);
}

/// §8.6: a joiner that gives up (its deadline) leaves alone; a leader that
/// gives up interrupts its joiners.
#[test]
fn cancelled_calls() {
    let mut scene = scene("cancel");
    let leader = scene.spawn("call", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]);
    scene.until("a flight", |f| joiners(f, "k").is_some());
    let impatient = scene.spawn("call", &[("SF_KEY", "k"), ("SF_DEADLINE_MS", "300")]);
    let patient = scene.spawn("call", &[("SF_KEY", "k")]);
    assert_eq!(scene.finish(impatient), "deadline");
    scene.until("one joiner left", |f| joiners(f, "k") == Some(1));
    scene.release("go");
    assert!(scene.finish(leader).starts_with("led "));
    assert!(scene.finish(patient).starts_with("joined "));

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
    assert_eq!(scene.finish(leader), "abandoned");
    assert_eq!(scene.finish(joiner), "interrupted");
}

/// §7.4: a directory others may write to, or a symlink, is refused at open.
#[tokio::test]
async fn refused_directories() {
    use std::os::unix::fs::PermissionsExt;
    let scene = scene("refused");
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
    let scene = scene("serve");
    let missing = single_flight::SingleFlight::builder(&scene.dir)
        .status()
        .await;
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
        if let Ok(status) = single_flight::SingleFlight::builder(&scene.dir)
            .status()
            .await
        {
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
        single_flight::_internal::election::local::CLEAN_FILE,
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

/// §13.5: `serve`'s shutdown future need not be `Send`: a program that
/// serves on a current-thread runtime may stop it through an `Rc`.
#[tokio::test(flavor = "current_thread")]
async fn serve_stops_on_a_shutdown_future_that_is_not_send() {
    let scene = scene("serve-local");
    let stop = std::rc::Rc::new(tokio::sync::Notify::new());
    let stopped = stop.clone();
    let serving = SingleFlight::builder(&scene.dir).serve(async move {
        stopped.notified().await;
    });
    let watching = async {
        let start = Instant::now();
        while single_flight::SingleFlight::builder(&scene.dir)
            .status()
            .await
            .is_err()
        {
            assert!(start.elapsed() < PATIENCE, "serve never answered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.notify_one();
    };
    let (served, ()) = tokio::join!(serving, watching);
    served.unwrap();
}

/// §3.5, §11.1: a directory too long for a socket address that does not
/// exist has no coordinator, like a short one.
#[tokio::test]
async fn status_of_a_missing_long_directory() {
    let scene = scene("status-long");
    let long = scene.root.join("d".repeat(150)).join("missing");
    let missing = single_flight::SingleFlight::builder(&long).status().await;
    assert!(
        matches!(
            missing,
            Err(single_flight::StatusError::NoCoordinator { .. })
        ),
        "{missing:?}"
    );
}
