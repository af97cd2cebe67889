//! Item 3, the uncontended call: `run` of a no-op on a fresh key, from the
//! call to its return (lead, work, land sent; the caller does not wait for
//! the `ack`, SPEC.md §9.3). The coordinator is another process (a `serve`),
//! as for most callers; the same is measured in the coordinator's own
//! process for comparison.

use std::time::{Duration, Instant};

use single_flight::{Role, SingleFlight};

use crate::floor::Timed;
use crate::process::{self, CpuMeter, Scratch, Worker, wall_nanos};
use crate::stats::median;

/// Calls before the timed ones: the connection is made and warm.
const WARM_UP: usize = 200;

/// How far apart the calls of [`now_and_then`] are: far past the thread's
/// `LEASE_CHECK` (50 ms) and a land's `ack`, so that everything a call
/// leaves behind in its process happens before the next.
pub const SPARSE_EVERY: Duration = Duration::from_millis(200);

/// The calls with the coordinator in another process (the CPU time counts
/// both processes), and in this one.
pub fn measure(calls: usize) -> (Timed, Timed) {
    let scratch = Scratch::new("uncontended");
    let remote_dir = scratch.join("remote");
    let dir_text = remote_dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let serve = Worker::spawn(&["serve", &dir_text, "500"]).ready();
    let remote = calls_in(&remote_dir, calls, Some(serve.pid()));
    let own = calls_in(&scratch.join("own"), calls, None);
    (remote, own)
}

fn calls_in(dir: &std::path::Path, calls: usize, coordinator: Option<u32>) -> Timed {
    let runtime = process::runtime();
    runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        let timed = timed_calls(&flights, calls, coordinator.as_slice()).await;
        flights.close().await;
        timed
    })
}

/// `calls` uncontended calls (a no-op on a fresh key each) after
/// [`WARM_UP`] untimed ones: their median time, and the CPU time per call
/// of this process and of its `peers` (the coordinator when it is another
/// process, and a host coordinator in between), and the times their
/// threads were given a CPU per call.
pub async fn timed_calls(flights: &SingleFlight, calls: usize, peers: &[u32]) -> Timed {
    let stamp = wall_nanos();
    let mut times = Vec::with_capacity(calls);
    let mut cpu = None;
    for n in 0..WARM_UP + calls {
        let key = format!("u{stamp}-{n}");
        if n == WARM_UP {
            cpu = Some(CpuMeter::start(peers));
        }
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
    let (used, switches) = cpu.map_or((0, 0), |cpu| (cpu.used(), cpu.switches()));
    Timed {
        median: median(&times),
        cpu: used as f64 / calls.max(1) as f64,
        switches: switches as f64 / calls.max(1) as f64,
    }
}

/// What a call now and then adds to an idle caller: `calls` calls on fresh
/// keys, one every [`SPARSE_EVERY`], against as many idle pauses of the
/// same length in the same process, after the same warm-up. Returns the
/// calls' median time, and the CPU time and the times a thread was given a
/// CPU that this process spent beyond its idle pauses, per call. The
/// coordinator is another process (a `serve`): its periodic checks (§7.2)
/// tick with the pauses, not with the calls, so neither side counts them;
/// what they cost it while nobody calls is the [`Idle`] returned.
pub fn now_and_then(calls: usize) -> (Timed, Idle) {
    let scratch = Scratch::new("now-and-then");
    let dir = scratch.join("flights");
    let dir_text = dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let serve = Worker::spawn(&["serve", &dir_text, "500"]).ready();
    let coordinator = serve.pid();
    let runtime = process::runtime();
    runtime.block_on(async {
        let flights = SingleFlight::open(&dir).await.expect("open the directory");
        process::warm_up(&flights).await;
        // The same pauses without calls, then with one after each but the
        // last: one pause more than calls, so that the last call's
        // after-effects count. What each spent: (CPU ns, wake-ups).
        let stamp = wall_nanos();
        let mut times = Vec::with_capacity(calls);
        let mut spent = [(0, 0); 2];
        // The coordinator's, the same way: (CPU ns, wake-ups, seconds).
        let mut theirs = [(0, 0, 0.0); 2];
        for calling in [false, true] {
            let meter = CpuMeter::start(&[]);
            let began = (
                Instant::now(),
                process::thread_cpu_nanos(Some(coordinator)),
                process::thread_switches(Some(coordinator)),
            );
            for n in 0..=calls {
                tokio::time::sleep(SPARSE_EVERY).await;
                if calling && n < calls {
                    let start = Instant::now();
                    flights
                        .run(&format!("sparse{stamp}-{n}"), |_token| async {
                            Ok::<u8, std::io::Error>(0)
                        })
                        .await
                        .expect("a call now and then succeeds");
                    times.push(start.elapsed().as_nanos() as f64);
                }
            }
            spent[usize::from(calling)] = (meter.used(), meter.switches());
            theirs[usize::from(calling)] = (
                process::thread_cpu_nanos(Some(coordinator)).saturating_sub(began.1),
                process::thread_switches(Some(coordinator)).saturating_sub(began.2),
                began.0.elapsed().as_secs_f64(),
            );
        }
        let [(idle_cpu, idle_switches), (cpu, switches)] = spent;
        flights.close().await;
        let per_call =
            |with: u64, without: u64| with.saturating_sub(without) as f64 / calls.max(1) as f64;
        let [
            (quiet_cpu, quiet_switches, quiet),
            (busy_cpu, busy_switches, _),
        ] = theirs;
        let idle = Idle {
            cpu_per_second: quiet_cpu as f64 / quiet,
            switches_per_second: quiet_switches as f64 / quiet,
            cpu_per_call: per_call(busy_cpu, quiet_cpu),
            switches_per_call: per_call(busy_switches, quiet_switches),
        };
        let timed = Timed {
            median: median(&times),
            cpu: per_call(cpu, idle_cpu),
            switches: per_call(switches, idle_switches),
        };
        (timed, idle)
    })
}

/// What the coordinator's process spends while nobody calls (its periodic
/// checks, §7.2, and whatever else wakes it), and what each call now and
/// then adds to that.
#[derive(Clone, Copy, Debug, Default)]
pub struct Idle {
    /// CPU time per second, in nanoseconds.
    pub cpu_per_second: f64,
    /// The times a thread of it was given a CPU, per second.
    pub switches_per_second: f64,
    /// CPU time a call adds, in nanoseconds.
    pub cpu_per_call: f64,
    /// The times a thread of it was given a CPU that a call adds.
    pub switches_per_call: f64,
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
