//! Item 4, fan-out: one leader and N joiners, each in its own process. The
//! figure is the time from the leader's land (its work returns) to the
//! moment the last joiner's call returns with the value, on the machine's
//! shared clock. The same for the flock baseline, where the joiners are a
//! chain of processes blocked on the key's lock file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};
use single_flight::{Role, SingleFlight};

use crate::process::{self, Scratch, WORKER_PATIENCE, Worker, say, stdin_lines, wall_nanos};

/// The value every leader lands: 64 bytes of JSON, a typical small result.
pub fn value_of(key: &str) -> String {
    format!("{key}:{}", "v".repeat(63usize.saturating_sub(key.len())))
}

/// How often the orchestrator looks whether the joiners are in place.
const POLL: Duration = Duration::from_millis(1);

/// How long after the land the orchestrator asks for the times: far longer
/// than a fan-out takes here (a few milliseconds for 64 processes). Asking
/// earlier would only disturb the measurement, not break it.
const REPORT_AFTER: Duration = Duration::from_millis(200);

/// Fan-out times in nanoseconds, one per flight, single-flight first, then
/// flock.
pub fn measure(joiners: usize, flights: usize) -> (Vec<f64>, Vec<f64>) {
    (
        single_flight(joiners, flights),
        flock_chain(joiners, flights),
    )
}

fn single_flight(joiners: usize, flights: usize) -> Vec<f64> {
    let scratch = Scratch::new("fanout-sf");
    let dir = scratch.join("flights");
    let dir_text = dir.to_str().expect("a UTF-8 temp dir").to_owned();
    let _serve = Worker::spawn(&["serve", &dir_text, "500"]).ready();
    let mut leader = Worker::spawn(&["sf-caller", &dir_text]).ready();
    let mut others = crate::process::spawn_ready(joiners, &["sf-caller", &dir_text]);
    let runtime = process::runtime();
    let mut times = Vec::with_capacity(flights);
    for flight in 0..flights {
        let key = format!("fan-{flight}");
        leader.send(&format!("call {key} hold"));
        runtime.block_on(wait_for_joiners(&dir, &key, 0));
        for joiner in &mut others {
            joiner.send(&format!("call {key}"));
        }
        runtime.block_on(wait_for_joiners(&dir, &key, joiners as u64));
        leader.send("land");
        times.push(collect(&mut leader, &mut others) as f64);
    }
    times
}

/// After a fan-out: asks every caller for its times and returns the time
/// from the leader's land to the last joiner's value. The callers print
/// nothing until asked, so that no process wakes the orchestrator while the
/// fan-out runs; the pause lets the fan-out finish first.
fn collect(leader: &mut Worker, joiners: &mut [Worker]) -> u64 {
    std::thread::sleep(REPORT_AFTER);
    leader.send("report");
    let landed: u64 = leader.expect("landed").parse().expect("a time");
    assert!(leader.expect("done").starts_with("led "), "the leader led");
    for joiner in joiners.iter_mut() {
        joiner.send("report");
    }
    let mut last = 0;
    for joiner in joiners.iter() {
        let done = joiner.expect("done");
        let (role, at) = done.split_once(' ').expect("role and time");
        assert_eq!(role, "joined", "every other caller joined");
        last = last.max(at.parse::<u64>().expect("a time"));
    }
    last.saturating_sub(landed)
}

/// Polls the coordinator until the flight of `key` is in progress with
/// `joiners` joiners.
async fn wait_for_joiners(dir: &Path, key: &str, joiners: u64) {
    let start = Instant::now();
    loop {
        if let Ok(status) = single_flight::SingleFlight::builder(dir).status().await
            && status
                .flights
                .iter()
                .any(|f| f.key.as_str() == key && f.joiners == joiners)
        {
            return;
        }
        assert!(
            start.elapsed() < WORKER_PATIENCE,
            "the flight {key} never had {joiners} joiners"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// `worker sf-caller DIR`: calls keys when told. `call KEY hold` leads and
/// holds its work until `land`; `call KEY` expects to join. Prints
/// `landed T` when a held work returns and `done ROLE T` when a call
/// returns.
pub fn sf_caller(dir: &str) {
    let runtime = process::runtime();
    runtime.block_on(async {
        let flights = SingleFlight::open(dir).await.expect("open the directory");
        process::warm_up(&flights).await;
        // Commands arrive on a thread; forward them into the runtime.
        let (sender, mut commands) = tokio::sync::mpsc::unbounded_channel();
        let lines = stdin_lines();
        std::thread::spawn(move || {
            while let Ok(line) = lines.recv() {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let release = Arc::new(tokio::sync::Notify::new());
        let (finished, mut results) = tokio::sync::mpsc::unbounded_channel();
        say("READY");
        while let Some(line) = commands.recv().await {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("call"), Some(key), hold) => {
                    let flights = flights.clone();
                    let key = key.to_owned();
                    let release = release.clone();
                    let hold = hold.is_some();
                    let finished = finished.clone();
                    tokio::spawn(async move {
                        let value = value_of(&key);
                        let mut landed_at = None;
                        let landed = flights
                            .run(&key, |_token| async {
                                if hold {
                                    release.notified().await;
                                }
                                landed_at = Some(wall_nanos());
                                Ok::<_, std::io::Error>(value)
                            })
                            .await
                            .expect("a fan-out call succeeds");
                        let at = wall_nanos();
                        let role = match landed.role {
                            Role::Led => "led",
                            Role::Joined => "joined",
                            Role::Reused => "reused",
                        };
                        let _ = finished.send((landed_at, role, at));
                    });
                }
                (Some("land"), ..) => release.notify_one(),
                (Some("report"), ..) => {
                    let (landed_at, role, at) = results.recv().await.expect("a call ended");
                    if let Some(landed_at) = landed_at {
                        say(format!("landed {landed_at}"));
                    }
                    say(format!("done {role} {at}"));
                }
                _ => panic!("unknown command {line:?}"),
            }
        }
    });
}

/// The flock baseline of one fan-out, as scripts do it today
/// (`flock key.lock sh -c 'test -f key.result || make key.result'`): the
/// leader holds the key's lock while its work runs; the others block on the
/// lock and, one after another, find the fresh result and read it.
fn flock_chain(joiners: usize, flights: usize) -> Vec<f64> {
    let scratch = Scratch::new("fanout-flock");
    let dir = scratch
        .path()
        .to_str()
        .expect("a UTF-8 temp dir")
        .to_owned();
    let mut leader = Worker::spawn(&["flock-caller", &dir]).ready();
    let mut others = crate::process::spawn_ready(joiners, &["flock-caller", &dir]);
    let mut times = Vec::with_capacity(flights);
    for flight in 0..flights {
        let key = format!("fan-{flight}");
        leader.send(&format!("call {key} hold"));
        leader.expect("working");
        for joiner in &mut others {
            joiner.send(&format!("call {key}"));
        }
        let inode = std::fs::metadata(lock_path(scratch.path(), &key))
            .expect("the leader created the lock file")
            .ino();
        let start = Instant::now();
        while blocked_on(inode) < joiners {
            assert!(
                start.elapsed() < WORKER_PATIENCE,
                "the flock waiters never all blocked"
            );
            std::thread::sleep(POLL);
        }
        leader.send("land");
        times.push(collect(&mut leader, &mut others) as f64);
    }
    times
}

/// Processes blocked in `flock` on the file with `inode`: the kernel lists
/// each waiter in /proc/locks with `->` before its line.
fn blocked_on(inode: u64) -> usize {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let device_and_inode = format!(":{inode} ");
    locks
        .lines()
        .filter(|line| line.contains("->") && line.contains(&device_and_inode))
        .count()
}

pub fn lock_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.lock"))
}

pub fn result_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.result"))
}

/// One call of the flock baseline: lock the key's file; if the result file
/// is missing or stale (finished before this call started), run the work
/// and write the result with its time; unlock. `work` runs under the lock.
/// Returns the value and whether this call ran the work.
pub fn flock_call(dir: &Path, key: &str, work: impl FnOnce() -> String) -> (String, bool) {
    let started = wall_nanos();
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(dir, key))
        .expect("open the lock file");
    flock(&lock, FlockOperation::LockExclusive).expect("flock");
    let result = match fresh_result(dir, key, started) {
        Some(value) => (value, false),
        None => {
            let value = work();
            let text = format!("{} {value}", wall_nanos());
            std::fs::write(result_path(dir, key), text).expect("write the result file");
            (value, true)
        }
    };
    flock(&lock, FlockOperation::Unlock).expect("unlock");
    drop::<File>(lock);
    result
}

/// The result of `key` if it finished at or after `since`.
fn fresh_result(dir: &Path, key: &str, since: u64) -> Option<String> {
    let text = std::fs::read_to_string(result_path(dir, key)).ok()?;
    let (finished, value) = text.split_once(' ')?;
    (finished.parse::<u64>().ok()? >= since).then(|| value.to_owned())
}

/// `worker flock-caller DIR`: like `sf-caller`, for the flock baseline;
/// prints `working` when a held work starts.
pub fn flock_caller(dir: &str) {
    let dir = PathBuf::from(dir);
    let (release_sender, release) = std::sync::mpsc::channel::<()>();
    let release = Arc::new(std::sync::Mutex::new(release));
    let (finished, results) = std::sync::mpsc::channel();
    say("READY");
    let lines = stdin_lines();
    while let Ok(line) = lines.recv() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("call"), Some(key), hold) => {
                let dir = dir.clone();
                let key = key.to_owned();
                let hold = hold.is_some();
                let release = release.clone();
                let finished = finished.clone();
                std::thread::spawn(move || {
                    let value = value_of(&key);
                    let mut landed_at = None;
                    let (_, led) = flock_call(&dir, &key, || {
                        if hold {
                            say("working");
                            let _ = release.lock().expect("one holder").recv();
                        }
                        landed_at = Some(wall_nanos());
                        value
                    });
                    let at = wall_nanos();
                    let role = if led { "led" } else { "joined" };
                    let _ = finished.send((landed_at, role, at));
                });
            }
            (Some("land"), ..) => release_sender.send(()).expect("the holder waits"),
            (Some("report"), ..) => {
                let (landed_at, role, at) = results.recv().expect("a call ended");
                if let Some(landed_at) = landed_at {
                    say(format!("landed {landed_at}"));
                }
                say(format!("done {role} {at}"));
            }
            _ => panic!("unknown command {line:?}"),
        }
    }
}
