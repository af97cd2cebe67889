//! The busy host (issue 30): what the single-flight thread is for (SPEC.md
//! §10.1). Uncontended calls from this process go through the coordinator
//! of another process whose callers' runtime is saturated: a task that
//! computes without ever yielding on each of its worker threads, as many as
//! the machine has cores. The same calls through a coordinator process that
//! is idle are the comparison. Today the coordinator's sockets are served on
//! the single-flight thread's own runtime, so the busy process's callers
//! only take CPU from it, as any busy neighbour would; a design that served
//! them on the callers' runtime would leave these calls waiting until their
//! deadline.

use std::time::{Duration, Instant};

use single_flight::{Role, SingleFlight};

use crate::process::{self, Scratch, Worker, say, wall_nanos};
use crate::stats::percentile;

/// Calls before the timed ones: the connection is made and warm.
const WARM_UP: usize = 50;

/// Each timed call's deadline: far beyond any call on a busy but working
/// host, so that only a coordinator that does not answer at all reaches it.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// What one round measured, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Busy {
    pub idle_p50: f64,
    pub idle_p99: f64,
    pub busy_p50: f64,
    pub busy_p99: f64,
    /// Calls through the busy host that reached [`CALL_DEADLINE`].
    pub busy_missed: usize,
}

/// `calls` timed calls through an idle coordinator process, then through a
/// busy one.
pub fn measure(calls: usize) -> Busy {
    let scratch = Scratch::new("busy");
    let spinners = std::thread::available_parallelism().map_or(2, usize::from);
    let (idle_p50, idle_p99, _) = through(&scratch.join("idle"), 0, calls);
    let (busy_p50, busy_p99, busy_missed) = through(&scratch.join("busy"), spinners, calls);
    Busy {
        idle_p50,
        idle_p99,
        busy_p50,
        busy_p99,
        busy_missed,
    }
}

/// The p50 and p99 of `calls` calls through the coordinator of a `host`
/// worker with `spinners` spinning tasks, and the calls that missed their
/// deadline.
fn through(dir: &std::path::Path, spinners: usize, calls: usize) -> (f64, f64, usize) {
    let dir_text = dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let spinners = spinners.to_string();
    let host = Worker::spawn(&["busy-host", &dir_text, &spinners]).ready();
    let runtime = process::runtime();
    let measured = runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        let stamp = wall_nanos();
        let mut times = Vec::with_capacity(calls);
        let mut missed = 0;
        for n in 0..WARM_UP + calls {
            let key = format!("b{stamp}-{n}");
            let start = Instant::now();
            let called = flights
                .call(&key)
                .deadline(CALL_DEADLINE)
                .run(|_token| async { Ok::<u8, std::io::Error>(0) })
                .await;
            let elapsed = start.elapsed();
            if n < WARM_UP {
                continue;
            }
            match called {
                Ok(landed) => {
                    assert_eq!(landed.role, Role::Led, "a fresh key leads");
                    times.push(elapsed.as_nanos() as f64);
                }
                Err(_) => missed += 1,
            }
        }
        flights.close().await;
        let p = |q| {
            if times.is_empty() {
                f64::NAN
            } else {
                percentile(&times, q)
            }
        };
        (p(50.0), p(99.0), missed)
    });
    drop(host);
    measured
}

/// `worker busy-host DIR SPINNERS`: coordinates `DIR`, says `READY`, then
/// keeps each of `SPINNERS` worker threads of its callers' runtime computing
/// without a pause until killed.
pub fn host(dir: &str, spinners: &str) {
    let spinners: usize = spinners.parse().expect("a number of spinning tasks");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(spinners.max(1))
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        // The first process of the directory coordinates; one call makes
        // sure that it serves before anyone is timed.
        flights
            .run("busy-host", |_token| async { Ok::<u8, std::io::Error>(0) })
            .await
            .expect("a call of the host's own");
        for _ in 0..spinners {
            tokio::spawn(async {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            });
        }
        say("READY");
        // Holds `flights`, and so the term, until the process is killed.
        std::future::pending::<()>().await;
    });
}
