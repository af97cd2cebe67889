//! Nested calls (SPEC.md §17): a call made by a flight's work names that
//! flight as its parent, on its own (async, detached and blocking works) or
//! by `Call::parent` (work handed to another task), and a call that would
//! close a cycle of flights waiting for each other ends at once with
//! `RunError::Cycle`, where it used to wait for ever.
//!
//! Every call has a deadline far above what any of them takes, so that a
//! cycle left waiting fails the test with `DeadlineExceeded` rather than
//! hang it; no test asserts on time.

use std::path::PathBuf;

use single_flight::{Role, RunError, SingleFlight, blocking};

use crate::support::PATIENCE;

/// A fresh flight directory for `name`, removed when dropped.
struct Directory(PathBuf);

impl Directory {
    fn new(name: &str) -> Directory {
        let path = std::env::temp_dir().join(format!("sf-nested-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Directory(path)
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn keys(error: &RunError<std::io::Error>) -> Vec<&str> {
    match error {
        RunError::Cycle { keys, .. } => keys.iter().map(String::as_str).collect(),
        other => panic!("expected a cycle, got {other}"),
    }
}

/// §17.2: an async work that calls its own key gets the cycle at once; its
/// own flight goes on and lands.
#[test]
fn an_async_work_that_calls_its_own_key_is_refused() {
    let directory = Directory::new("async-self");
    runtime().block_on(async {
        let flights = SingleFlight::open(&directory.0).await.unwrap();
        let inner = flights.clone();
        let landed = flights
            .call("A")
            .deadline(PATIENCE)
            .run(|_| async move {
                let refused = inner
                    .call("A")
                    .deadline(PATIENCE)
                    .run(|_| async { Ok::<_, std::io::Error>(0) })
                    .await
                    .unwrap_err();
                assert_eq!(keys(&refused), ["A"]);
                assert!(
                    refused
                        .to_string()
                        .contains(r#""A" waits for itself (SPEC.md §17)"#),
                    "{refused}"
                );
                Ok::<_, std::io::Error>(1)
            })
            .await
            .unwrap();
        assert_eq!((landed.role, landed.value), (Role::Led, 1));
        assert_eq!(flights.stats().invalid, 1);
        flights.close().await;
    });
}

/// §17.2: A's work leads B, B's work calls A: refused naming B then A; a
/// call of a key that does not loop (C) is untouched.
#[test]
fn an_async_loop_through_two_keys_is_refused() {
    let directory = Directory::new("async-loop");
    runtime().block_on(async {
        let flights = SingleFlight::open(&directory.0).await.unwrap();
        let (outer, middle) = (flights.clone(), flights.clone());
        let landed = outer
            .call("A")
            .deadline(PATIENCE)
            .run(|_| async move {
                let inner = middle.clone();
                let b = middle
                    .call("B")
                    .deadline(PATIENCE)
                    .run(|_| async move {
                        let refused = inner
                            .call("A")
                            .deadline(PATIENCE)
                            .run(|_| async { Ok::<_, std::io::Error>(0) })
                            .await
                            .unwrap_err();
                        assert_eq!(keys(&refused), ["B", "A"]);
                        let c = inner
                            .call("C")
                            .deadline(PATIENCE)
                            .run(|_| async { Ok::<_, std::io::Error>(3) })
                            .await
                            .unwrap();
                        Ok::<_, std::io::Error>(c.value)
                    })
                    .await
                    .unwrap();
                Ok::<_, std::io::Error>(b.value)
            })
            .await
            .unwrap();
        assert_eq!(landed.value, 3);
        flights.close().await;
    });
}

/// §17.1: a work that hands a call to a task of its own names its flight
/// with `Call::parent`; without it the spawned task's call has no parent
/// (it would wait: a deadline ends it here). A detached work's calls name
/// it on their own.
#[test]
fn a_spawned_task_passes_the_token_on_and_a_detached_work_needs_nothing() {
    let directory = Directory::new("spawned");
    runtime().block_on(async {
        let flights = SingleFlight::open(&directory.0).await.unwrap();
        let inner = flights.clone();
        flights
            .call("A")
            .deadline(PATIENCE)
            .run(|token| async move {
                let handed = inner.clone();
                let refused = tokio::spawn(async move {
                    handed
                        .call("A")
                        .parent(token)
                        .deadline(PATIENCE)
                        .run(|_| async { Ok::<_, std::io::Error>(0) })
                        .await
                })
                .await
                .unwrap()
                .unwrap_err();
                assert_eq!(keys(&refused), ["A"]);
                let handed = inner.clone();
                let waited = tokio::spawn(async move {
                    handed
                        .call("A")
                        .deadline(std::time::Duration::from_millis(200))
                        .run(|_| async { Ok::<_, std::io::Error>(0) })
                        .await
                })
                .await
                .unwrap()
                .unwrap_err();
                assert!(
                    matches!(waited, RunError::DeadlineExceeded { .. }),
                    "{waited}"
                );
                Ok::<_, std::io::Error>(())
            })
            .await
            .unwrap();
        let inner = flights.clone();
        let refused = flights
            .call("D")
            .detached()
            .deadline(PATIENCE)
            .run(move |_| async move {
                inner
                    .call("D")
                    .deadline(PATIENCE)
                    .run(|_| async { Ok::<_, std::io::Error>(0) })
                    .await
                    .map(|landed| landed.value)
                    .map_err(|error| std::io::Error::other(error.to_string()))
            })
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains(r#""D" waits for itself"#),
            "{refused}"
        );
        flights.close().await;
    });
}

/// §17.2: blocking works name their flight on their own thread: A → B →
/// A is refused; a diamond (A → B, A → C, B → D, C → D) is not.
#[test]
fn blocking_works_loop_and_diamond() {
    let directory = Directory::new("blocking");
    let flights = blocking::SingleFlight::open(&directory.0).unwrap();
    let call = |key: &str, work: &dyn Fn() -> Result<u32, std::io::Error>| {
        flights.call(key).deadline(PATIENCE).run(|_| work())
    };
    let landed = call("A", &|| {
        let b = call("B", &|| {
            let refused = call("A", &|| Ok(0)).unwrap_err();
            assert_eq!(keys(&refused), ["B", "A"]);
            Ok(call("D", &|| Ok(4)).unwrap().value)
        })
        .unwrap();
        let c = call("C", &|| Ok(call("D", &|| Ok(40)).unwrap().value)).unwrap();
        Ok(b.value + c.value)
    })
    .unwrap();
    // D landed under B before C called it: no flight of D was in progress
    // then, and C led it again. The diamond of concurrent calls is the
    // command's test (tests/command/nested.rs) and the core's.
    assert_eq!(landed.value, 44);
    // Once A's work is over, nothing names it: a call of A runs.
    assert_eq!(call("A", &|| Ok(7)).unwrap().value, 7);
    flights.close();
}

/// §17.1: a blocking work that hands a call to another thread passes its
/// token on with the blocking `Call::parent`.
#[test]
fn a_blocking_work_passes_its_token_to_another_thread() {
    let directory = Directory::new("blocking-thread");
    let flights = blocking::SingleFlight::open(&directory.0).unwrap();
    let landed = flights
        .call("A")
        .deadline(PATIENCE)
        .run(|token| {
            let handed = flights.clone();
            let refused = std::thread::spawn(move || {
                handed
                    .call("A")
                    .parent(token)
                    .deadline(PATIENCE)
                    .run(|_| Ok::<_, std::io::Error>(0))
            })
            .join()
            .unwrap()
            .unwrap_err();
            assert_eq!(keys(&refused), ["A"]);
            Ok::<_, std::io::Error>(1)
        })
        .unwrap();
    assert_eq!(landed.value, 1);
    flights.close();
}
