//! Item 3, the uncontended call: `run` of a no-op on a fresh key, from the
//! call to its return (lead, work, land sent; the caller does not wait for
//! the `ack`, SPEC.md §9.3). The coordinator is another process (a `serve`),
//! as for most callers; the same is measured in the coordinator's own
//! process for comparison.

use std::time::{Duration, Instant};

use single_flight::{Role, SingleFlight};

use crate::process::{self, Scratch, Worker, wall_nanos};
use crate::stats::median;

/// Calls before the timed ones: the connection is made and warm.
const WARM_UP: usize = 200;

/// Median call time in nanoseconds with the coordinator in another process,
/// and in this one.
pub fn measure(calls: usize) -> (f64, f64) {
    let scratch = Scratch::new("uncontended");
    let remote_dir = scratch.join("remote");
    let dir_text = remote_dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let _serve = Worker::spawn(&["serve", &dir_text, "500"]).ready();
    let remote = calls_in(&remote_dir, calls);
    let own = calls_in(&scratch.join("own"), calls);
    (remote, own)
}

fn calls_in(dir: &std::path::Path, calls: usize) -> f64 {
    let runtime = process::runtime();
    runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        let median = timed_calls(&flights, calls).await;
        flights.close().await;
        median
    })
}

/// The median time of `calls` uncontended calls (a no-op on a fresh key
/// each), in nanoseconds, after [`WARM_UP`] untimed ones.
pub async fn timed_calls(flights: &SingleFlight, calls: usize) -> f64 {
    let stamp = wall_nanos();
    let mut times = Vec::with_capacity(calls);
    for n in 0..WARM_UP + calls {
        let key = format!("u{stamp}-{n}");
        let start = Instant::now();
        let landed = flights
            .run(&key, |_token| async { Ok::<u8, std::io::Error>(0) })
            .await
            .expect("an uncontended call succeeds");
        let elapsed = start.elapsed();
        assert_eq!(landed.role, Role::Led, "a fresh key leads");
        if n >= WARM_UP {
            times.push(elapsed.as_nanos() as f64);
        }
    }
    median(&times)
}

/// `worker serve DIR GRACE_MS`: holds the coordinator of `DIR` in the
/// foreground until killed, and says `READY` once it answers.
pub fn serve(dir: &str, grace_ms: &str) {
    let grace = Duration::from_millis(grace_ms.parse().expect("a grace window in ms"));
    let runtime = process::runtime();
    runtime.block_on(async {
        let serving = tokio::spawn(
            SingleFlight::builder(dir)
                .grace_window(grace)
                .serve(std::future::pending()),
        );
        while single_flight::SingleFlight::builder(&*dir)
            .status()
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        crate::process::say("READY");
        let ended = serving.await;
        panic!("serve ended: {ended:?}");
    });
}
