//! Counting (SPEC.md §8.11, §9.8) through the public API: two
//! `SingleFlight`s on one directory, each with its own single-flight thread
//! and connection as two processes would have, count their own calls by
//! outcome and the terms they moved through, and the coordinator's counters
//! reach both through `status`.
//!
//! No test asserts on time: every wait polls for a state and gives up after
//! a generous bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use single_flight::{RunError, SingleFlight, Stats};
use tokio::sync::oneshot;

use crate::support::PATIENCE;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sf-stats-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Polls until the flight of `key` has `joiners` joiners.
async fn until_joiners(dir: &Path, key: &str, joiners: u64) {
    let start = Instant::now();
    loop {
        let status = single_flight::SingleFlight::builder(dir).status().await;
        let joined = status.ok().and_then(|status| {
            status
                .flights
                .iter()
                .find(|flight| flight.key.as_str() == key)
                .map(|flight| flight.joiners)
        });
        if joined == Some(joiners) {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "gave up waiting for {joiners} joiners of {key:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Leads `key` in `leader` until `release` fires, while `joiner` joins it;
/// returns the joiner's result.
async fn joined_flight<T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static>(
    dir: &Path,
    leader: &SingleFlight,
    joiner: &SingleFlight,
    key: &str,
    result: Result<T, std::io::Error>,
) -> Result<single_flight::Landed<T>, RunError<std::io::Error>> {
    let (release, released) = oneshot::channel::<()>();
    let leader = leader.clone();
    let leading_key = key.to_owned();
    let leading = tokio::spawn(async move {
        let work = |_| async move {
            let _ = released.await;
            result
        };
        leader.run(&leading_key, work).await.map(|_| ())
    });
    until_joiners(dir, key, 0).await;
    let joining = joiner.run(key, |_| async {
        Err::<T, _>(std::io::Error::other("the joiner must not run the work"))
    });
    let joined = async {
        until_joiners(dir, key, 1).await;
        let _ = release.send(());
    };
    let (result, ()) = tokio::join!(joining, joined);
    let _ = leading.await;
    result
}

/// §9.8, §8.11: each `SingleFlight` counts its calls in the outcome each
/// came to (led, joined, failed, interrupted, deadline, unavailable,
/// invalid), a dropped call in none, and the change of term it lived
/// through; the coordinator's counters show the flights of the term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_process_counts_its_own_calls_and_failovers() {
    let dir = scratch("calls");
    // a coordinates: it is alone when its thread finds no coordinator, and
    // b opens only once a's term answers.
    let a = SingleFlight::open(&dir).await.unwrap();
    let start = Instant::now();
    while single_flight::SingleFlight::builder(&dir)
        .status()
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < PATIENCE,
            "gave up waiting for a to coordinate"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b = SingleFlight::open(&dir).await.unwrap();

    // a leads and b joins: a value, then a failure.
    let joined = joined_flight(&dir, &a, &b, "value", Ok(7)).await;
    assert_eq!(joined.unwrap().value, 7);
    let failed = joined_flight::<u8>(
        &dir,
        &a,
        &b,
        "failure",
        Err(std::io::Error::other("disk full")),
    )
    .await;
    assert!(
        matches!(failed, Err(RunError::FlightFailed { .. })),
        "{failed:?}"
    );

    // b joins a flight whose leader drops its call: b is interrupted, and
    // a's dropped call counts in nothing.
    let leader = a.clone();
    let abandoned = tokio::spawn(async move {
        let _ = leader
            .run("dropped", |_| {
                std::future::pending::<Result<u8, std::io::Error>>()
            })
            .await;
    });
    until_joiners(&dir, "dropped", 0).await;
    let interrupted = async {
        b.run("dropped", |_| async { Ok::<u8, std::io::Error>(0) })
            .await
    };
    let drop_the_leader = async {
        until_joiners(&dir, "dropped", 1).await;
        abandoned.abort();
    };
    let (interrupted, ()) = tokio::join!(interrupted, drop_the_leader);
    assert!(
        matches!(interrupted, Err(RunError::Interrupted { .. })),
        "{interrupted:?}"
    );

    // b's own deadline; a's key over the limits.
    let late = b
        .call("slow")
        .deadline(Duration::from_millis(1))
        .run(|_| std::future::pending::<Result<u8, std::io::Error>>())
        .await;
    assert!(
        matches!(late, Err(RunError::DeadlineExceeded { .. })),
        "{late:?}"
    );
    let invalid = a.run("", |_| async { Ok::<u8, std::io::Error>(0) }).await;
    assert!(
        matches!(invalid, Err(RunError::InvalidCall { .. })),
        "{invalid:?}"
    );

    // The term's counters, through `status`: a led three flights and b one
    // (its deadline's); b joined three of them; two ended without an
    // outcome, the dropped one and the one whose deadline passed (whose
    // cancel may still be on its way: polled for, boundedly).
    let start = Instant::now();
    loop {
        let counted = single_flight::SingleFlight::builder(&dir)
            .status()
            .await
            .unwrap()
            .stats
            .unwrap();
        let seen = (
            counted.flights_led,
            counted.joins,
            counted.lands_value,
            counted.lands_failure,
            counted.interruptions,
        );
        if seen == (4, 3, 1, 1, 2) {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "the term counted {counted:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // a closes: its term ends, and b's next call finds the next one, of
    // another epoch. After its close a's handles are unavailable.
    let closed = a.clone();
    a.close().await;
    let after = b
        .run("after", |_| async { Ok::<u8, std::io::Error>(1) })
        .await;
    assert_eq!(after.unwrap().value, 1);
    let unavailable = closed
        .run("k", |_| async { Ok::<u8, std::io::Error>(0) })
        .await;
    assert!(
        matches!(unavailable, Err(RunError::Unavailable(_))),
        "{unavailable:?}"
    );

    let mut expected_a = Stats::default();
    (expected_a.led, expected_a.invalid, expected_a.unavailable) = (2, 1, 1);
    assert_eq!(closed.stats(), expected_a);
    let b_stats = b.stats();
    assert_eq!(
        (b_stats.led, b_stats.joined, b_stats.failed),
        (1, 1, 1),
        "{b_stats:?}"
    );
    assert_eq!(
        (b_stats.interrupted, b_stats.deadline, b_stats.failovers),
        (1, 1, 1),
        "{b_stats:?}"
    );
    assert_eq!(b_stats.calls(), 5);
    assert_eq!(b_stats.dedupe_ratio(), Some(2.0 / 5.0));
    b.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
