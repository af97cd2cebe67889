//! Item 6, failover: processes keep calling fresh keys; the coordinator's
//! process is killed with SIGKILL; the figure is the time from the kill to
//! the first flight led by the next term, minus the grace window that term
//! opens with (SPEC.md §10.2), in which no flight may be led.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use single_flight::SingleFlight;

use crate::process::{self, Scratch, WORKER_PATIENCE, Worker, say, wall_nanos};

/// How long the orchestrator keeps collecting reports of a new term after
/// the first one, so that the earliest lead of any process is seen.
const STRAGGLERS: Duration = Duration::from_millis(50);

/// The deadline of each load call: far beyond a local failover (the grace
/// window and a few milliseconds), so that only a call stuck for another
/// reason ends by it, and its thread goes on with a fresh key.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The shape of a failover run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Processes under load; the killed one is replaced each time.
    pub processes: usize,
    /// Caller threads per process.
    pub threads: usize,
    pub work: Duration,
    pub grace: Duration,
    pub kills: usize,
}

/// Failover times beyond the grace window, in nanoseconds, one per kill.
pub fn measure(shape: Shape) -> Vec<f64> {
    let scratch = Scratch::new("failover");
    let dir = scratch.join("flights");
    let dir_text = dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let grace = shape.grace.as_millis().to_string();
    let threads = shape.threads.to_string();
    let work = shape.work.as_micros().to_string();
    let args = ["load", &dir_text, &grace, &threads, &work];
    // The first process coordinates; then the others join it.
    let mut workers = vec![Worker::spawn(&args).ready()];
    workers.extend(crate::process::spawn_ready(shape.processes - 1, &args));
    let runtime = process::runtime();
    let mut times = Vec::with_capacity(shape.kills);
    for _ in 0..shape.kills {
        let status = runtime
            .block_on(single_flight::SingleFlight::builder(&dir).status())
            .expect("a coordinator answers");
        let at = workers
            .iter()
            .position(|w| w.pid() == status.pid)
            .expect("the coordinator is one of the load processes");
        // Reports of the current term are old news.
        for worker in &workers {
            while worker.try_line(Duration::ZERO).is_some() {}
        }
        let killed_at = wall_nanos();
        workers[at].kill();
        workers.swap_remove(at);
        let first = first_lead_after(&workers, status.epoch.get());
        times.push((first.saturating_sub(killed_at) as f64) - shape.grace.as_nanos() as f64);
        // Back to full strength before the next kill.
        workers.push(Worker::spawn(&args).ready());
    }
    times
}

/// The earliest time any worker reports leading a flight of a term after
/// `epoch`.
pub fn first_lead_after(workers: &[Worker], epoch: u32) -> u64 {
    let start = Instant::now();
    let mut first: Option<(u64, Instant)> = None;
    loop {
        for worker in workers {
            while let Some(line) = worker.try_line(Duration::ZERO) {
                let Some(report) = line.strip_prefix("epoch ") else {
                    continue;
                };
                let (term, at) = report.split_once(' ').expect("epoch and time");
                if term.parse::<u32>().expect("an epoch") > epoch {
                    let at: u64 = at.parse().expect("a time");
                    let earliest = first.map_or(at, |(t, _)| t.min(at));
                    let seen = first.map_or_else(Instant::now, |(_, seen)| seen);
                    first = Some((earliest, seen));
                }
            }
        }
        if let Some((at, seen)) = first
            && seen.elapsed() > STRAGGLERS
        {
            return at;
        }
        assert!(
            start.elapsed() < WORKER_PATIENCE,
            "no flight was led after the coordinator died"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `worker load DIR GRACE_MS THREADS WORK_US`: THREADS threads call fresh
/// keys in a loop; the first lead of each new term is printed as
/// `epoch E T`.
pub fn worker(args: &[String]) {
    let [dir, grace, threads, work] = args else {
        panic!("load takes DIR GRACE_MS THREADS WORK_US, not {args:?}");
    };
    let grace = Duration::from_millis(grace.parse().expect("a grace window in ms"));
    let threads: usize = threads.parse().expect("a number of threads");
    let work = Duration::from_micros(work.parse().expect("work in microseconds"));
    let runtime = process::runtime();
    let flights = runtime.block_on(async {
        let flights = SingleFlight::builder(dir)
            .grace_window(grace)
            .open()
            .await
            .expect("open the directory");
        process::warm_up(&flights).await;
        flights
    });
    // Ready before the load starts, so that every report follows READY.
    say("READY");
    start_load(
        &flights,
        threads,
        work,
        CALL_DEADLINE,
        &Arc::new(AtomicU64::new(0)),
    );
    // Runs until the orchestrator kills it, or its stdin closes.
    for _ in crate::process::stdin_lines() {}
}

/// Starts `threads` threads that call fresh keys of this process in a loop
/// with `work` and `deadline`, saying `epoch E T` when this process first
/// leads a flight of term E, and `lead T` for the first flight it leads
/// after the time in `mark` (wall nanoseconds; 0: none), which it then
/// clears: a host coordinator's death changes no cluster term.
pub fn start_load(
    flights: &SingleFlight,
    threads: usize,
    work: Duration,
    deadline: Duration,
    mark: &Arc<AtomicU64>,
) {
    let newest = Arc::new(AtomicU32::new(0));
    for thread in 0..threads {
        let flights = flights.clone();
        let newest = newest.clone();
        let mark = mark.clone();
        std::thread::spawn(move || call_forever(&flights, &newest, &mark, thread, work, deadline));
    }
}

fn call_forever(
    flights: &SingleFlight,
    newest: &AtomicU32,
    mark: &AtomicU64,
    thread: usize,
    work: Duration,
    deadline: Duration,
) {
    let runtime = process::runtime();
    let pid = std::process::id();
    for n in 0u64.. {
        let key = format!("load-{pid}-{thread}-{n}");
        let call = flights.call(&key).deadline(deadline).run(|token| {
            let epoch = token.epoch().get();
            if newest.fetch_max(epoch, Ordering::AcqRel) < epoch {
                say(format!("epoch {epoch} {}", wall_nanos()));
            }
            let since = mark.load(Ordering::Acquire);
            let now = wall_nanos();
            if since != 0
                && now > since
                && mark
                    .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                say(format!("lead {now}"));
            }
            async move {
                tokio::time::sleep(work).await;
                Ok::<_, std::io::Error>(0)
            }
        });
        // Interrupted calls and calls cut off by the failover are expected.
        let _ = runtime.block_on(call);
    }
}
