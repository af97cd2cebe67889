//! Calls as users make them, with real processes: the blocking API (SPEC.md
//! §9.7), panicking works (§9.6), detached calls (§15) and the reuse window
//! (§16). The test binary runs itself again as child processes, each a
//! blocking or an async caller, and watches them through the coordinator's
//! `status` (§3.5); support/scene.rs is the stage.
//!
//! No test asserts on time: every wait polls for a state and gives up after
//! a generous bound, so a slow machine only makes them slower.

use std::any::Any;
use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use single_flight::{FencingToken, Role, RunError, SingleFlight, blocking};

use crate::support::PATIENCE;
use crate::support::child::{say, unknown, var};
use crate::support::scene::{
    Scene, describe, detached, executions, joiners, record_run, status, until_exists, work,
};

/// What a work whose payload is not a string lands as (§9.6).
const NOT_A_STRING: &str = "the work panicked with a payload that is not a string";

/// The scene of a test of this module, whose children play its roles.
fn scene(name: &str) -> Scene {
    Scene::new("calls", name)
}

// ---------------------------------------------------------------- children

/// A child of this module in `role` (support/child.rs); its exit code.
pub fn child(role: &str) -> i32 {
    match role {
        // A blocking caller: no runtime anywhere in its process but the
        // single-flight thread's.
        "blocking" => blocking_child(),
        "async" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async_child()),
        _ => unknown(role),
    }
}

fn blocking_child() -> i32 {
    let flights = blocking::SingleFlight::open(var("SF_DIR")).expect("open");
    let runs = PathBuf::from(var("SF_RUNS"));
    // `SF_IDLE=1`: becomes the coordinator (when first) and stays until
    // killed.
    if !var("SF_IDLE").is_empty() {
        let key = format!("warm-{}", std::process::id());
        flights
            .run(&key, |_| Ok::<_, std::io::Error>(0))
            .expect("a warm-up call");
        say("READY");
        loop {
            std::thread::park();
        }
    }
    // `SF_SIDE=<key>`: a call of this process on another thread, in
    // progress while the main call runs (and panics); its work waits for
    // `<key>-go`.
    let side = (!var("SF_SIDE").is_empty()).then(|| {
        let flights = flights.clone();
        let runs = runs.clone();
        let key = var("SF_SIDE");
        std::thread::spawn(move || {
            let release = format!("wait:{key}-go");
            let result = flights.run(&key, |token| blocking_work(&runs, &key, token, &release));
            describe(result)
        })
    });
    let key = var("SF_KEY");
    let mut call = flights.call(&key);
    if let Ok(ms) = var("SF_DEADLINE_MS").parse() {
        call = call.deadline(Duration::from_millis(ms));
    }
    if !var("SF_DETACHED").is_empty() {
        call = call.detached();
    }
    let steps = var("SF_WORK");
    let running = AssertUnwindSafe(|| call.run(|token| blocking_work(&runs, &key, token, &steps)));
    // `SF_UNCAUGHT=1`: a panic the call resumes ends this process, as it
    // ends a program whose main thread does not catch it.
    if !var("SF_UNCAUGHT").is_empty() {
        say(format_args!("RESULT {}", describe(running())));
        return 0;
    }
    let line = match std::panic::catch_unwind(running) {
        Ok(result) => describe(result),
        Err(payload) => format!("panicked {}", panic_text(&*payload)),
    };
    say(format_args!("RESULT {line}"));
    if let Some(side) = side {
        say(format_args!("SIDE {}", side.join().expect("the side call")));
    }
    // `SF_AFTER=<key>`: one more call, once the main call has ended.
    let after = var("SF_AFTER");
    if !after.is_empty() {
        let result = flights.run(&after, |token| blocking_work(&runs, &after, token, ""));
        say(format_args!("AFTER {}", describe(result)));
    }
    flights.close();
    0
}

async fn async_child() -> i32 {
    let flights = SingleFlight::open(var("SF_DIR")).await.expect("open");
    let runs = PathBuf::from(var("SF_RUNS"));
    let key = var("SF_KEY");
    let steps = var("SF_WORK");
    // A task of its own, so that a panic the call resumes ends the task
    // and is handed over here (§9.6); the call's future must be `Send`.
    let call = {
        let flights = flights.clone();
        let runs = runs.clone();
        tokio::spawn(async move {
            let mut call = flights.call(&key);
            if let Ok(ms) = var("SF_DEADLINE_MS").parse() {
                call = call.deadline(Duration::from_millis(ms));
            }
            // `SF_REUSE_MS=<ms>`: a reuse window (§16).
            if let Ok(ms) = var("SF_REUSE_MS").parse() {
                call = call.reuse_for(Duration::from_millis(ms));
            }
            // `SF_DETACHED=1`: a detached call (§15), whose work runs on the
            // single-flight thread.
            if !var("SF_DETACHED").is_empty() {
                let key = key.clone();
                return call
                    .detached()
                    .run(move |token| work(runs, key, token, steps))
                    .await;
            }
            call.run(|token| work(runs, key.clone(), token, steps))
                .await
        })
    };
    // `SF_LEAVE=<file>`: the caller leaves (the call's task is aborted,
    // which drops its future) once the test creates the file.
    let leave = var("SF_LEAVE");
    let left = async {
        if leave.is_empty() {
            std::future::pending::<()>().await;
        }
        until_exists(runs.join(&leave)).await;
    };
    let abort = call.abort_handle();
    let line = tokio::select! {
        ended = call => match ended {
            Ok(result) => describe(result),
            Err(error) => format!("panicked {}", panic_text(&*error.into_panic())),
        },
        () = left => {
            abort.abort();
            "left".to_owned()
        }
    };
    say(format_args!("RESULT {line}"));
    // `SF_HOLD=<file>`: the process stays (for a detached work that
    // outlives its caller) until the test creates the file.
    let hold = var("SF_HOLD");
    if !hold.is_empty() {
        until_exists(runs.join(&hold)).await;
    }
    let after = var("SF_AFTER");
    if !after.is_empty() {
        let result = flights
            .run(&after, |token| {
                work(runs.clone(), after.clone(), token, String::new())
            })
            .await;
        say(format_args!("AFTER {}", describe(result)));
    }
    flights.close().await;
    0
}

/// A resumed panic's payload, as the test expects to see it: the payload
/// itself, not a copy of its message (§9.6).
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        format!("str {text}")
    } else if let Some(text) = payload.downcast_ref::<String>() {
        format!("string {text}")
    } else if let Some(number) = payload.downcast_ref::<u32>() {
        format!("u32 {number}")
    } else {
        "something else".to_owned()
    }
}

/// The blocking twin of the async children's work (support/scene.rs):
/// records that the work of `key` ran in this process, then does `steps`,
/// a comma-separated list: `wait:<file>` waits until the test creates the
/// file, `panic:<text>` panics with that text, `fail` returns an error.
fn blocking_work(
    runs: &Path,
    key: &str,
    token: FencingToken,
    steps: &str,
) -> Result<String, std::io::Error> {
    record_run(runs, key, token)?;
    for step in steps.split(',') {
        if let Some(release) = step.strip_prefix("wait:") {
            while !runs.join(release).exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if let Some(text) = step.strip_prefix("panic:") {
            panic!("{text}");
        }
        if step == "fail" {
            return Err(std::io::Error::other("the disk is on fire"));
        }
    }
    Ok(format!("value-of-{key}-from-{}", std::process::id()))
}

// ---------------------------------------------------------------- harness

/// Starts a leader of `key` of the given kind, waits for its work to run,
/// then starts a joiner of each kind in `joiners_of`, in processes of their
/// own, and waits until they have all joined.
fn stampede(
    scene: &mut Scene,
    leader: (&str, &[(&str, &str)]),
    key: &str,
    joiners_of: &[&str],
) -> (usize, Vec<usize>) {
    let (kind, vars) = leader;
    let mut leader_vars = vec![("SF_KEY", key)];
    leader_vars.extend_from_slice(vars);
    let leader = scene.spawn(kind, &leader_vars);
    scene.until_run(key);
    // A joiner that led would run `fail`, and say so.
    let joiner_vars = [("SF_KEY", key), ("SF_WORK", "fail")];
    let joining: Vec<usize> = joiners_of
        .iter()
        .map(|kind| scene.spawn(kind, &joiner_vars))
        .collect();
    let count = joiners_of.len() as u64;
    scene.until("every joiner", |flights| {
        joiners(flights, key) == Some(count)
    });
    (leader, joining)
}

// ---------------------------------------------------------------- tests

/// §9.7, §8.2: a blocking leader and async (and blocking) joiners in other
/// processes share one run: the work runs once, every joiner gets its value
/// and token.
#[test]
fn a_blocking_leader_and_async_joiners_share_one_run() {
    one_run_shared(
        "blocking-leads",
        "blocking",
        &["async", "async", "blocking"],
    );
}

/// §9.7, §8.2: the reverse: an async leader and blocking joiners.
#[test]
fn an_async_leader_and_blocking_joiners_share_one_run() {
    one_run_shared("async-leads", "async", &["blocking", "blocking", "async"]);
}

/// A leader of the kind `leader` and joiners of the kinds `joiners_of`:
/// the work runs once, and every joiner gets the leader's value and token.
fn one_run_shared(name: &str, leader: &str, joiners_of: &[&str]) {
    let mut scene = scene(name);
    let (leader, joining) = stampede(
        &mut scene,
        (leader, &[("SF_WORK", "wait:go")]),
        "k",
        joiners_of,
    );
    scene.release("go");
    let led = scene.result(leader);
    let shared = led.strip_prefix("led ").unwrap_or_else(|| panic!("{led}"));
    for joiner in joining {
        assert_eq!(scene.result(joiner), format!("joined {shared}"));
        scene.exit(joiner);
    }
    scene.exit(leader);
    assert_eq!(executions(&scene.runs, "k"), 1);
}

/// §9.6: a blocking leader's work panics: every joiner, in every other
/// process, blocking or async, gets the failure `Panic` with the panic's
/// message, and does not run the work; the leader's caller gets the panic
/// back with its own payload; the leader's process goes on: a call of
/// another thread, in progress across the panic, and a call after it.
#[test]
fn a_blocking_leaders_panic_reaches_every_joiner() {
    let mut scene = scene("blocking-panics");
    let (leader, joining) = stampede(
        &mut scene,
        (
            "blocking",
            &[
                ("SF_WORK", "wait:go,panic:the cat is on fire"),
                ("SF_SIDE", "side"),
                ("SF_AFTER", "after"),
            ],
        ),
        "k",
        &["async", "blocking", "async"],
    );
    scene.until("the side call", |flights| {
        joiners(flights, "side").is_some()
    });
    scene.release("go");
    for joiner in joining {
        assert_eq!(scene.result(joiner), "failed Panic: the cat is on fire");
        scene.exit(joiner);
    }
    // `panic!` with an argument makes a `String` payload.
    assert_eq!(scene.result(leader), "panicked string the cat is on fire");
    scene.release("side-go");
    assert!(scene.line(leader, "SIDE ").starts_with("led "));
    assert!(scene.line(leader, "AFTER ").starts_with("led "));
    scene.exit(leader);
    assert_eq!(executions(&scene.runs, "k"), 1, "a joiner ran the work");
}

/// §9.6: a leader whose panic ends its process (its main thread does not
/// catch it) waits for its land before the panic goes on: its joiners get
/// `Panic`, not `interrupted`. The coordinator is another process, which
/// outlives the leader.
#[test]
fn a_panic_that_ends_its_process_still_reaches_the_joiners() {
    let mut scene = scene("panic-ends-process");
    let coordinator = scene.spawn("blocking", &[("SF_IDLE", "1")]);
    scene.line(coordinator, "READY");
    let (leader, joining) = stampede(
        &mut scene,
        (
            "blocking",
            &[("SF_WORK", "wait:go,panic:gone"), ("SF_UNCAUGHT", "1")],
        ),
        "k",
        &["async", "blocking"],
    );
    scene.release("go");
    for joiner in joining {
        assert_eq!(scene.result(joiner), "failed Panic: gone");
        scene.exit(joiner);
    }
    let status = scene.wait(leader);
    assert!(!status.success(), "the leader's process survived its panic");
}

/// §9.6: an async leader's work panics when polled after an await, with a
/// payload that is not a string: every joiner gets `Panic` with the fixed
/// text, the leader's task ends with the panic's own payload, and the
/// leader's process goes on calling.
#[test]
fn an_async_leaders_panic_reaches_every_joiner() {
    let mut scene = scene("async-panics");
    let (leader, joining) = stampede(
        &mut scene,
        (
            "async",
            &[("SF_WORK", "wait:go,panic-number"), ("SF_AFTER", "after")],
        ),
        "k",
        &["blocking", "async"],
    );
    scene.release("go");
    for joiner in joining {
        assert_eq!(
            scene.result(joiner),
            format!("failed Panic: {NOT_A_STRING}")
        );
        scene.exit(joiner);
    }
    assert_eq!(scene.result(leader), "panicked u32 7");
    assert!(scene.line(leader, "AFTER ").starts_with("led "));
    scene.exit(leader);
    assert_eq!(executions(&scene.runs, "k"), 1, "a joiner ran the work");
}

/// §9.7, §8.6: a blocking joiner whose deadline passes leaves alone; the
/// flight and its leader go on.
#[test]
fn a_blocking_joiners_deadline_leaves_the_flight_alone() {
    let mut scene = scene("joiner-deadline");
    let leader = scene.spawn("blocking", &[("SF_KEY", "k"), ("SF_WORK", "wait:go")]);
    scene.until_run("k");
    let impatient = scene.spawn("blocking", &[("SF_KEY", "k"), ("SF_DEADLINE_MS", "300")]);
    assert_eq!(scene.result(impatient), "deadline");
    scene.exit(impatient);
    scene.until("no joiner", |flights| joiners(flights, "k") == Some(0));
    scene.release("go");
    assert!(scene.result(leader).starts_with("led "));
    scene.exit(leader);
}

/// §9.7, §8.6: a blocking leader's deadline withdraws its call from the
/// single-flight thread while its work still runs (the work cannot be
/// stopped; it waits for a file the test has not made): the flight is gone
/// from the coordinator before the work ends, and the caller gets the
/// deadline once it does.
#[test]
fn a_blocking_leaders_deadline_withdraws_its_call_while_the_work_runs() {
    let mut scene = scene("leader-deadline");
    // The lead must come before the deadline. A process too slow for that
    // ends with the deadline before its work starts; it proves nothing,
    // and the test tries again with a longer deadline.
    let mut deadline_ms: u64 = 300;
    loop {
        let key = format!("k{deadline_ms}");
        let release = format!("{key}-go");
        let work = format!("wait:{release}");
        let deadline = deadline_ms.to_string();
        let vars = [
            ("SF_KEY", key.as_str()),
            ("SF_WORK", work.as_str()),
            ("SF_DEADLINE_MS", deadline.as_str()),
        ];
        let leader = scene.spawn("blocking", &vars);
        if !scene.until_run_or_exit(&key, leader) {
            assert_eq!(scene.result(leader), "deadline");
            assert!(deadline_ms < 60_000, "no lead came within a minute");
            deadline_ms *= 2;
            continue;
        }
        scene.until("the withdrawn flight", |flights| {
            joiners(flights, &key).is_none()
        });
        scene.release(&release);
        assert_eq!(scene.result(leader), "deadline");
        scene.exit(leader);
        return;
    }
}

/// §9.7: a blocking call on a thread that drives a tokio runtime panics,
/// with tokio's message, before it does anything: the work does not run and
/// the directory is not even opened. From `spawn_blocking` it works.
#[test]
fn blocking_calls_refuse_a_thread_that_drives_a_runtime() {
    let scene = scene("inside-runtime");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refusal = |payload: Box<dyn Any + Send>| panic_text(&*payload);
    let opened = runtime.block_on(async {
        std::panic::catch_unwind(|| blocking::SingleFlight::open(&scene.dir).is_ok())
    });
    let expected = "Cannot block the current thread from within a runtime";
    let refused = refusal(opened.unwrap_err());
    assert!(refused.contains(expected), "{refused}");
    assert!(!scene.dir.exists(), "open did something before refusing");

    let flights = blocking::SingleFlight::open(&scene.dir).unwrap();
    let ran = AtomicBool::new(false);
    let called = runtime.block_on(async {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            flights.run("k", |_| {
                ran.store(true, Ordering::SeqCst);
                Ok::<_, std::io::Error>(1)
            })
        }))
    });
    let refused = refusal(called.expect_err("refused"));
    assert!(refused.contains(expected), "{refused}");
    assert!(!ran.load(Ordering::SeqCst), "the work ran");

    let clone = flights.clone();
    let landed = runtime.block_on(async {
        let call =
            tokio::task::spawn_blocking(move || clone.run("k", |_| Ok::<_, std::io::Error>(2)));
        call.await.unwrap().unwrap()
    });
    assert_eq!((landed.role, landed.value), (Role::Led, 2));
    flights.close();
}

/// §9.6: in one process, an async work that panics when it is called
/// (before it returns its future): its joiner of the same process gets
/// `Panic`, the leader's task gets the panic, and the next call leads.
#[test]
fn a_work_that_panics_when_called_lands_panic() {
    let scene = scene("panic-at-call");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let flights = SingleFlight::open(&scene.dir).await.unwrap();
        let (started, on_started) = tokio::sync::oneshot::channel();
        let (go, on_go) = std::sync::mpsc::channel::<()>();
        let leader = tokio::spawn({
            let flights = flights.clone();
            async move {
                flights
                    .run(
                        "k",
                        move |_| -> std::future::Ready<Result<u8, std::io::Error>> {
                            let _ = started.send(());
                            // Waits on this thread (a worker of its own) for the
                            // joiner, then panics before any future exists.
                            let _ = on_go.recv();
                            panic!("no future for you")
                        },
                    )
                    .await
            }
        });
        on_started.await.unwrap();
        let joiner = tokio::spawn({
            let flights = flights.clone();
            async move {
                flights
                    .run("k", |_| async { Ok::<u8, std::io::Error>(1) })
                    .await
            }
        });
        let dir = scene.dir.clone();
        tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            while status(&dir).and_then(|flights| joiners(&flights, "k")) != Some(1) {
                assert!(start.elapsed() < PATIENCE, "the joiner never joined");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .await
        .unwrap();
        go.send(()).unwrap();
        let payload = leader.await.unwrap_err().into_panic();
        assert_eq!(panic_text(&*payload), "str no future for you");
        match joiner.await.unwrap() {
            Err(RunError::FlightFailed { failure, .. }) => {
                assert_eq!(
                    (failure.name.as_str(), failure.message.as_str()),
                    ("Panic", "no future for you")
                );
            }
            other => panic!("{other:?}"),
        }
        let next = flights.run("k", |_| async { Ok::<u8, std::io::Error>(2) });
        assert_eq!(next.await.unwrap().role, Role::Led);
        flights.close().await;
    });
}

/// §9.7, §7.4: a blocking open refuses what the async one refuses, with the
/// same error.
#[test]
fn a_blocking_open_refuses_a_symbolic_link() {
    let scene = scene("refused");
    let link = scene.root.join("link");
    std::os::unix::fs::symlink(&scene.runs, &link).unwrap();
    let error = blocking::SingleFlight::open(&link).err().expect("refused");
    assert!(error.to_string().contains("symbolic link"), "{error}");
}

/// §10.1: a call awaited on a runtime whose I/O nobody drives (a
/// current-thread runtime's `Handle::block_on` on a thread that does not
/// run it) still ends: the connection it would read itself is read by the
/// single-flight thread at its next check (`LEASE_CHECK`).
#[test]
fn a_call_on_a_runtime_that_nobody_drives_still_ends() {
    let scene = scene("undriven");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let dir = scene.dir.clone();
    let (ended, ends) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let flights = handle.block_on(SingleFlight::open(&dir)).unwrap();
        // The first call makes the connection; the next find it made, and
        // would read it on the runtime that nobody drives.
        for _ in 0..5 {
            let landed = handle.block_on(flights.run("k", |token| async move {
                Ok::<_, std::io::Error>(token.get())
            }));
            ended.send(landed.map(|landed| landed.role)).unwrap();
        }
    });
    for call in 0..5 {
        let role = ends.recv_timeout(PATIENCE);
        let role = role.unwrap_or_else(|_| panic!("call {call} never ended"));
        assert_eq!(role.unwrap(), Role::Led, "call {call}");
    }
    drop(runtime);
}

/// §9.7, §14: a blocking open in cluster mode connects to etcd on the
/// single-flight thread's runtime: the test thread has none, and calls go
/// through the election afterwards.
#[cfg(feature = "cluster")]
#[test]
fn a_blocking_cluster_opens_without_a_runtime() {
    if !crate::support::etcd::available() {
        return;
    }
    let etcd = crate::support::etcd::Etcd::single();
    // Through a host directory of its own (SPEC.md §18.6): the process is
    // its host's coordinator, relays to the cluster, and coordinates that too.
    let directory = std::env::temp_dir().join(format!("sf-blocking-{}", std::process::id()));
    let cluster = single_flight::Cluster::etcd(etcd.endpoints(), "blocking")
        .insecure()
        .directory(&directory);
    let flights = blocking::SingleFlight::cluster(cluster).open().unwrap();
    let first = flights.run("k", |token| Ok::<_, std::io::Error>(token.get()));
    let first = first.unwrap();
    let second = flights.run("k", |token| Ok::<_, std::io::Error>(token.get()));
    let second = second.unwrap();
    assert_eq!((first.role, second.role), (Role::Led, Role::Led));
    assert!(
        second.value > first.value,
        "{} then {}",
        first.value,
        second.value
    );
    flights.close();
    let _ = std::fs::remove_dir_all(directory);
}

/// §15.3: the caller of a detached leader leaves (its task is aborted)
/// while callers in two other processes wait: the work goes on, runs once,
/// and both get its value; the leader's caller got its deadline error.
#[test]
fn a_detached_leaders_work_outlives_its_caller_for_its_joiners() {
    let mut scene = scene("detached-joined");
    let (leader, joining) = stampede(
        &mut scene,
        (
            "async",
            &[
                ("SF_DETACHED", "1"),
                ("SF_LEAVE", "leave"),
                ("SF_WORK", "wait:go"),
                ("SF_HOLD", "exit"),
            ],
        ),
        "k",
        &["async", "blocking"],
    );
    scene.release("leave");
    assert_eq!(scene.result(leader), "left");
    // The flight is still in progress, detached, with both joiners.
    scene.until("the detached flight", |flights| {
        detached(flights, "k") == Some(2)
    });
    scene.release("go");
    for joiner in joining {
        let result = scene.result(joiner);
        assert!(
            result.starts_with("joined ") && result.contains("value-of-k-from-"),
            "{result}"
        );
        scene.exit(joiner);
    }
    assert_eq!(executions(&scene.runs, "k"), 1);
    assert!(!scene.runs.join("k.dropped").exists());
    scene.release("exit");
    scene.exit(leader);
}

/// §15.2, §15.3: when everyone has left a detached flight (the leader's
/// caller, then its one joiner), the coordinator stops it: the leader's
/// process drops the work, and the next call leads a new flight.
#[test]
fn a_detached_flight_that_nobody_waits_for_is_dropped() {
    let mut scene = scene("detached-dropped");
    let (leader, joining) = stampede(
        &mut scene,
        (
            "async",
            &[
                ("SF_DETACHED", "1"),
                ("SF_LEAVE", "leave"),
                ("SF_WORK", "wait:go"),
                ("SF_HOLD", "exit"),
            ],
        ),
        "k",
        &["async"],
    );
    scene.release("leave");
    assert_eq!(scene.result(leader), "left");
    scene.until("the detached flight", |flights| {
        detached(flights, "k") == Some(1)
    });
    // The joiner leaves: it is killed, its connection closes.
    let joiner = joining[0];
    scene.kill(joiner);
    scene.until_dropped("k");
    scene.until("the flight's end", |flights| {
        joiners(flights, "k").is_none()
    });
    let next = scene.spawn("async", &[("SF_KEY", "k")]);
    assert!(scene.result(next).starts_with("led "));
    scene.exit(next);
    scene.release("exit");
    scene.exit(leader);
}

/// §16: a call with a reuse window that comes after a flight with one
/// landed takes its value, with its token, and nothing runs; a call without
/// a window runs the work again.
#[test]
fn a_reuse_window_serves_a_late_caller() {
    let mut scene = scene("reuse");
    // A coordinator that outlives the callers: kept values live as long as
    // its term (§16.2).
    let coordinator = scene.spawn("blocking", &[("SF_IDLE", "1")]);
    scene.line(coordinator, "READY");
    let window = [("SF_KEY", "k"), ("SF_REUSE_MS", "600000")];
    let first = scene.spawn("async", &window);
    let led = scene.result(first);
    assert!(led.starts_with("led "), "{led}");
    scene.exit(first);
    let second = scene.spawn("async", &window);
    let reused = scene.result(second);
    assert_eq!(reused.strip_prefix("reused "), led.strip_prefix("led "));
    scene.exit(second);
    assert_eq!(executions(&scene.runs, "k"), 1);
    let third = scene.spawn("async", &[("SF_KEY", "k")]);
    assert!(scene.result(third).starts_with("led "));
    scene.exit(third);
    assert_eq!(executions(&scene.runs, "k"), 2);
}

/// §15.3: a blocking detached leader's deadline passes while its work runs
/// on its thread: the flight goes on, detached, for its joiners in other
/// processes; the work lands for them, then the leader's call ends with
/// its deadline error.
#[test]
fn a_blocking_detached_leaders_deadline_leaves_its_joiners_their_value() {
    let mut scene = scene("blocking-detached");
    // The joiners must join before the leader's deadline. When a machine is
    // too slow for that, the flight, detached with nobody waiting, is
    // stopped, and the joiners lead flights of their own (their work fails
    // and they exit): that proves nothing, and the test tries again with a
    // longer deadline.
    let mut deadline_ms: u64 = 1000;
    loop {
        let key = format!("k{deadline_ms}");
        let release = format!("{key}-go");
        let work = format!("wait:{release}");
        let deadline = deadline_ms.to_string();
        let leader_vars = [
            ("SF_DETACHED", "1"),
            ("SF_DEADLINE_MS", deadline.as_str()),
            ("SF_WORK", work.as_str()),
        ];
        let leader = scene.spawn(
            "blocking",
            &[&leader_vars[..], &[("SF_KEY", key.as_str())]].concat(),
        );
        scene.until_run(&key);
        let joiner_vars = [("SF_KEY", key.as_str()), ("SF_WORK", "fail")];
        let joining: Vec<usize> = (0..2).map(|_| scene.spawn("async", &joiner_vars)).collect();
        let start = Instant::now();
        let ready = loop {
            if status(&scene.dir).is_some_and(|flights| detached(&flights, &key) == Some(2)) {
                break true;
            }
            if joining
                .iter()
                .any(|&joiner| scene.children.has_exited(joiner))
            {
                break false;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "gave up waiting for the detached flight"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        scene.release(&release);
        if !ready {
            assert_eq!(scene.result(leader), "deadline");
            assert!(deadline_ms < 60_000, "no joiner joined within a minute");
            deadline_ms *= 2;
            continue;
        }
        for joiner in joining {
            let result = scene.result(joiner);
            assert!(result.starts_with("joined "), "{result}");
            scene.exit(joiner);
        }
        assert_eq!(scene.result(leader), "deadline");
        scene.exit(leader);
        assert_eq!(executions(&scene.runs, &key), 1);
        return;
    }
}

/// §15.3: a coordinator older than detached calls answers `detach` with
/// `unsupported` (§3.6); the client then cancels as before the extension
/// and drops the work. The coordinator here is a script on the socket.
#[test]
fn a_coordinator_without_detach_gets_the_cancel_of_before() {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::net::UnixListener;

    let scene = scene("old-coordinator");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&scene.dir)
        .unwrap();
    let listener = UnixListener::bind(scene.dir.join("flight.sock")).unwrap();
    let script = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut lines = BufReader::new(stream).lines();
        let mut next = move || lines.next().unwrap().unwrap();
        assert!(next().contains("\"protocol\":\"single-flight\""));
        writer
            .write_all(
                b"{\"protocol\":\"single-flight\",\"version\":1,\"epoch\":\"1\",\"pid\":1}\n",
            )
            .unwrap();
        let run = next();
        assert!(run.contains("\"op\":\"run\""), "{run}");
        writer
            .write_all(b"{\"op\":\"lead\",\"id\":\"1\",\"token\":\"4294967297\"}\n")
            .unwrap();
        let detach = next();
        assert_eq!(detach, r#"{"op":"detach","id":"1"}"#);
        writer
            .write_all(b"{\"op\":\"unsupported\",\"id\":\"1\"}\n")
            .unwrap();
        next()
    });
    let runs = scene.runs.clone();
    let started = scene.runs.clone();
    let dir = scene.dir.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let flights = runtime.block_on(SingleFlight::open(&dir)).unwrap();
    let result = runtime.block_on(async {
        let call = flights
            .call("k")
            .detached()
            .run(move |token| work(runs.clone(), "k".into(), token, "wait:never".into()));
        // The caller leaves once the work has started: it leads.
        tokio::select! {
            result = call => describe(result),
            () = async {
                while executions(&started, "k") == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            } => "left".to_owned(),
        }
    });
    assert_eq!(result, "left");
    // The handle stays until the script is done: without one, the
    // single-flight thread would wait for the detached work's land at most
    // 2 s (§10.4), which a loaded machine may take to answer the detach.
    assert_eq!(script.join().unwrap(), r#"{"op":"cancel","id":"1"}"#);
    drop(flights);
    scene.until_dropped("k");
}
