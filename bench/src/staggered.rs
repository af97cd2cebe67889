//! A staggered stampede (BENCHMARKS.md, "The reuse window"): callers of one
//! key arrive one by one, every `every`, for a while, against a work that
//! takes longer than the gap; single-flight dedupes only the callers that
//! overlap a flight, the reuse window (SPEC.md §16) also the ones that come
//! just after. Counted, not timed: how many times the work ran.

use std::time::{Duration, Instant};

use single_flight::{Role, SingleFlight};

use crate::process::{self, Scratch, Worker};

/// One stampede.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Callers, one process each.
    pub callers: usize,
    /// The gap between two callers' starts.
    pub every: Duration,
    /// How long the work takes.
    pub work: Duration,
    /// The reuse window of the runs with one.
    pub reuse: Duration,
}

/// How the callers of one stampede ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ended {
    pub led: usize,
    pub joined: usize,
    pub reused: usize,
}

/// Runs the stampede without a window and with one, each against a
/// coordinator of its own that outlives the callers (kept values belong to
/// its term, SPEC.md §16.2), and prints the counts.
pub fn run(shape: Shape) {
    let without = measure(shape, None);
    let with = measure(shape, Some(shape.reuse));
    println!();
    println!(
        "## Staggered stampede: {} callers, one every {:?}, a work of {:?}",
        shape.callers, shape.every, shape.work
    );
    println!();
    println!("| calls | runs of the work | joined | reused |");
    println!("|---|---|---|---|");
    for (name, ended) in [
        ("without a window".to_owned(), without),
        (format!("`reuse_for({:?})`", shape.reuse), with),
    ] {
        println!(
            "| {name} | {} | {} | {} |",
            ended.led, ended.joined, ended.reused
        );
    }
}

/// One stampede: `shape.callers` processes started `shape.every` apart,
/// each making one call of the key.
pub fn measure(shape: Shape, reuse: Option<Duration>) -> Ended {
    let scratch = Scratch::new("staggered");
    let dir = scratch.join("flights");
    let dir = dir.to_str().expect("a UTF-8 scratch path");
    let _coordinator = Worker::spawn(&["serve", dir, "500"]).ready();
    let work_ms = shape.work.as_millis().to_string();
    let reuse_ms = reuse.map_or(0, |reuse| reuse.as_millis()).to_string();
    let start = Instant::now();
    let mut callers = Vec::with_capacity(shape.callers);
    for n in 0..shape.callers {
        let at = shape.every * n as u32;
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        callers.push(Worker::spawn(&["stagger-call", dir, &work_ms, &reuse_ms]));
    }
    let mut ended = Ended::default();
    for caller in &callers {
        match caller.expect("ROLE").as_str() {
            "led" => ended.led += 1,
            "joined" => ended.joined += 1,
            "reused" => ended.reused += 1,
            other => panic!("a staggered caller ended {other:?}"),
        }
    }
    ended
}

/// `bench worker stagger-call DIR WORK_MS REUSE_MS`: one call of the key,
/// whose work sleeps WORK_MS, with a reuse window of REUSE_MS (0: none);
/// prints how it ended.
pub fn caller(dir: &str, work_ms: &str, reuse_ms: &str) {
    let work = Duration::from_millis(work_ms.parse().expect("a work in ms"));
    let reuse: u64 = reuse_ms.parse().expect("a window in ms");
    process::runtime().block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open");
        let mut call = flights.call("staggered");
        if reuse > 0 {
            call = call.reuse_for(Duration::from_millis(reuse));
        }
        let landed = call
            .run(|_| async move {
                tokio::time::sleep(work).await;
                Ok::<_, std::io::Error>(7)
            })
            .await
            .expect("a staggered call succeeds");
        process::say(format!(
            "ROLE {}",
            match landed.role {
                Role::Led => "led",
                Role::Joined => "joined",
                Role::Reused => "reused",
            }
        ));
        flights.close().await;
    });
}
