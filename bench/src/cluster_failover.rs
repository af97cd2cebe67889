//! Failover after a host's death in cluster mode: the coordinator's host
//! is killed (`kill -9` of every process in its namespace) while a leader
//! on the other host runs a flight with joiners there; the leader's work
//! ends right after the kill. Measured from the kill:
//!
//! - when the flight's waiters (its surviving joiners) are answered with
//!   the leader's value: the new term takes the landed reassert during its
//!   grace window and settles the rejoins at once (SPEC.md §8.4), so the
//!   grace window is not part of it;
//! - when a process on the surviving host next leads a new flight (a load
//!   of fresh keys): new flights wait for the window's end (§8.4);
//! - from etcd's watch, seen from outside the hosts: when the dead
//!   coordinator's key was deleted (its lease expired) and when the next
//!   term's key was put.
//!
//! The breakdown of the brief is TTL + grace + the rest, the rest being the
//! measured time less the two. The lease is renewed every TTL/3, so a
//! kill comes between 0 and TTL/3 after the last renewal and the lease
//! ends between 2/3 TTL and TTL after the kill (plus etcd's check of
//! expired leases, every 500 ms): the rest can be below zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use single_flight::_internal::election::etcd::REQUEST_TIMEOUT;
use single_flight::_internal::election::etcd::client::{Client, EventType};
use single_flight::{Role, RunError};

use crate::cluster::HOSTS;
use crate::lab::{self, Lab, Settings};
use crate::process::{self, WORKER_PATIENCE, Worker, ready_then_go, say, stdin_lines, wall_nanos};

/// How long the watcher waits for etcd before it looks whether it should
/// stop: its stop is then this late at most.
const WATCH_SLICE: Duration = Duration::from_millis(100);

/// The shape of a failover run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The lease TTL every process asks for (SPEC.md §14.2).
    pub ttl: Duration,
    pub grace: Duration,
    /// Kills per run (each run is one cluster).
    pub kills: usize,
    /// Joiners of the flight that runs through the kill, on the leader's
    /// host.
    pub joiners: usize,
    /// Caller threads of the load on the surviving host, and their work.
    pub load_threads: usize,
    pub work: Duration,
}

/// One kill, in nanoseconds after it.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    /// The last surviving joiner had the leader's value.
    pub answered: f64,
    /// The first flight of the next term was led.
    pub first_lead: f64,
    /// etcd deleted the dead coordinator's key (its lease ended).
    pub expired: f64,
    /// The next term's coordinator key was put.
    pub elected: f64,
    /// Joiners that ended otherwise than with the leader's value.
    pub not_answered: usize,
}

/// Runs `shape.kills` kills in one cluster named after `round`.
pub fn measure(lab: &Lab, round: usize, shape: Shape) -> Vec<Kill> {
    let settings = Settings {
        ttl: Some(shape.ttl),
        grace: shape.grace,
        ..Settings::new(&format!("bench-failover-{round}"))
    };
    let watch = Watch::start(lab, &settings.cluster);
    // The processes of each host: the first coordinates.
    let mut on_host: Vec<Vec<Worker>> = (0..lab.hosts()).map(|_| Vec::new()).collect();
    on_host[0].push(lab.worker(0, &settings, &["cluster-idle"]).ready());
    let threads = shape.load_threads.to_string();
    let work = shape.work.as_micros().to_string();
    let mut kills = Vec::with_capacity(shape.kills);
    for kill in 0..shape.kills {
        let before = lab.status(&settings.cluster);
        let dying = lab.host_of(&before);
        let surviving = (dying + 1) % lab.hosts();
        let key = format!("through-kill-{kill}");
        let mut leader = lab
            .worker(surviving, &settings, &["cluster-lead", &key])
            .ready();
        leader.expect("LEADING");
        let mut joiners: Vec<Worker> = (0..shape.joiners)
            .map(|_| {
                lab.worker(surviving, &settings, &["cluster-join", &key])
                    .ready()
            })
            .collect();
        for joiner in &mut joiners {
            joiner.send("go");
        }
        let joined = shape.joiners as u64;
        lab.status_when(&settings.cluster, |status| {
            status
                .flights
                .iter()
                .any(|flight| flight.key.as_str() == key && flight.joiners >= joined)
        });
        let load = lab
            .worker(surviving, &settings, &["cluster-load", &threads, &work])
            .ready();
        load.expect("epoch ");
        // The term the kill ends, read again: it must still be the dying
        // host's, or the figures would time another failover.
        let term = lab.status(&settings.cluster);
        assert_eq!(
            lab.host_of(&term),
            dying,
            "the coordinator moved before the kill (a loaded machine can miss a renewal of a short lease)"
        );
        watch.forget();
        let killed_at = wall_nanos();
        lab.kill_host(dying);
        on_host[dying].clear();
        leader.send("release");
        let (answered, not_answered) = answers(&joiners, "the kill");
        let first_lead =
            crate::failover::first_lead_after(std::slice::from_ref(&load), term.epoch.get());
        let (expired, elected) = watch.expiry_and_election(killed_at);
        let since = |at: u64| at.saturating_sub(killed_at) as f64;
        kills.push(Kill {
            answered: if answered == 0 {
                f64::NAN
            } else {
                since(answered)
            },
            first_lead: since(first_lead),
            expired: since(expired),
            elected: since(elected),
            not_answered,
        });
        on_host[surviving].push(leader);
        on_host[surviving].extend(joiners);
        on_host[surviving].push(load);
    }
    kills
}

/// Waits for every joiner's answer (`cluster-join`'s line): the time the
/// last of those with the leader's value had it (0 when none had), and how
/// many ended otherwise, each said on stderr as ended `through` a fault.
fn answers(joiners: &[Worker], through: &str) -> (u64, usize) {
    let mut answered = 0u64;
    let mut not_answered = 0;
    for joiner in joiners {
        let line = joiner.expect("answered");
        let (kind, at) = line.split_once(' ').expect("a kind and a time");
        if kind == "joined" {
            answered = answered.max(at.parse().expect("a time"));
        } else {
            eprintln!("a joiner through {through} ended {kind}");
            not_answered += 1;
        }
    }
    (answered, not_answered)
}

/// One death of a host coordinator, in nanoseconds after it.
#[derive(Clone, Copy, Debug)]
pub struct HostKill {
    /// The last joiner (on either host) had the leader's value.
    pub answered: f64,
    /// A process of the dead host coordinator's host led a new flight.
    pub next_lead: f64,
    /// Joiners that ended otherwise than with the leader's value.
    pub not_answered: usize,
}

/// Runs `shape.kills` deaths of a host coordinator (SPEC.md §18.4), each in
/// a cluster of its own whose processes reach it through their hosts'
/// coordinators: the cluster's coordinator (and host 0's) on host 0, host
/// 1's coordinator a process of its own, and on host 1 a leader whose
/// flight has joiners on both hosts, and a load of fresh keys. Host 1's
/// coordinator is killed (`kill -9` of that process alone) while the
/// leader's work runs, which ends right after. Measured from the kill: when
/// every joiner has the leader's value (host 1's through the host's next
/// coordinator and the cluster's relay window, §18.2), and when the load
/// next leads a flight (host 1 elected its next coordinator, which reached
/// the cluster's). A host coordinator's death ends no cluster term, so no
/// lease or grace window is in either.
pub fn measure_host(lab: &Lab, round: usize, shape: Shape) -> Vec<HostKill> {
    let threads = shape.load_threads.to_string();
    let work = shape.work.as_micros().to_string();
    (0..shape.kills)
        .map(|kill| {
            let settings = Settings {
                ttl: Some(shape.ttl),
                grace: shape.grace,
                ..Settings::tiered(&format!("bench-host-failover-{round}-{kill}"))
            };
            // Started one after another, each ready before the next: the
            // first of host 0 coordinates it and the cluster, the first of
            // host 1 coordinates host 1.
            let _cluster = lab.worker(0, &settings, &["cluster-idle"]).ready();
            let mut host_coordinator = lab.worker(1, &settings, &["cluster-idle"]).ready();
            let status = lab.status(&settings.cluster);
            assert_eq!(lab.host_of(&status), 0, "the first process coordinates");
            let mut load = lab
                .worker(1, &settings, &["cluster-load", &threads, &work])
                .ready();
            load.expect("epoch ");
            let key = "through-host-kill";
            let mut leader = lab.worker(1, &settings, &["cluster-lead", key]).ready();
            leader.expect("LEADING");
            // Half of the joiners on the leader's host, half on the other,
            // host 1's first: host 0's joiner, the later, is seen at the
            // cluster's coordinator (host 1's are the relay's own, §18.3).
            let mut joiners: Vec<Worker> = (0..shape.joiners)
                .map(|index| {
                    lab.worker(1 - index % HOSTS, &settings, &["cluster-join", key])
                        .ready()
                })
                .collect();
            for joiner in &mut joiners {
                joiner.send("go");
            }
            lab.status_when(&settings.cluster, |status| {
                status
                    .flights
                    .iter()
                    .any(|flight| flight.key.as_str() == key && flight.joiners >= 1)
            });
            let killed_at = wall_nanos();
            host_coordinator.kill();
            load.send(&format!("mark {killed_at}"));
            leader.send("release");
            let (answered, not_answered) = answers(&joiners, "the host coordinator's death");
            let next_lead: u64 = load.expect("lead ").parse().expect("a time");
            let since = |at: u64| at.saturating_sub(killed_at) as f64;
            HostKill {
                answered: if answered == 0 {
                    f64::NAN
                } else {
                    since(answered)
                },
                next_lead: since(next_lead),
                not_answered,
            }
        })
        .collect()
}

/// The events of a cluster's coordinator key, as etcd's watch delivers
/// them to a thread of the orchestrator, with the time each arrived.
pub struct Watch {
    events: mpsc::Receiver<(EventType, u64)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// The coordinator key of a cluster of one shard (SPEC.md §14.1).
    fn start(lab: &Lab, cluster: &str) -> Watch {
        Watch::key(lab, format!("{cluster}/coordinator"))
    }

    /// The coordinator key of shard `shard` of a cluster of several
    /// (SPEC.md §19.2).
    pub fn shard(lab: &Lab, cluster: &str, shard: usize) -> Watch {
        Watch::key(lab, format!("{cluster}/shard-{shard}/coordinator"))
    }

    /// The key `key` under the library's prefix.
    fn key(lab: &Lab, key: String) -> Watch {
        let key = format!(
            "{}/{key}",
            single_flight::_internal::election::etcd::DEFAULT_PREFIX
        );
        let endpoints = lab.endpoints();
        let (sender, events) = mpsc::channel();
        let (started, watching) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            process::runtime().block_on(async move {
                let client = Client::connect(&endpoints, None, REQUEST_TIMEOUT)
                    .expect("the orchestrator's etcd endpoints are URLs");
                let mut stream = client.watch(key, 0).await.expect("a watch");
                started.send(()).expect("the orchestrator waits");
                while !stopped.load(Ordering::Relaxed) {
                    let Ok(message) = tokio::time::timeout(WATCH_SLICE, stream.message()).await
                    else {
                        continue;
                    };
                    let Some(response) = message.expect("the watch goes on") else {
                        return;
                    };
                    let at = wall_nanos();
                    for event in &response.events {
                        let _ = sender.send((event.r#type(), at));
                    }
                }
            });
        });
        watching
            .recv_timeout(WORKER_PATIENCE)
            .expect("the watch of the coordinator key starts");
        Watch {
            events,
            stop,
            thread: Some(thread),
        }
    }

    /// Drops the events seen so far.
    pub fn forget(&self) {
        while self.events.try_recv().is_ok() {}
    }

    /// The first deletion of the key after `since`, and the first put
    /// after that.
    pub fn expiry_and_election(&self, since: u64) -> (u64, u64) {
        let start = Instant::now();
        let mut expired = None;
        loop {
            let left = WORKER_PATIENCE.saturating_sub(start.elapsed());
            let (kind, at) = self
                .events
                .recv_timeout(left)
                .expect("etcd reports the coordinator key's end and the next term");
            match (kind, expired) {
                (EventType::Delete, None) if at >= since => expired = Some(at),
                (EventType::Put, Some(expired)) => return (expired, at),
                _ => {}
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ----------------------------------------------------------------- workers

/// Keeps a worker (and its cluster membership) alive until its stdin
/// closes; the orchestrator usually kills it first.
fn stay(lines: &mpsc::Receiver<String>) {
    while lines.recv().is_ok() {}
}

/// `worker cluster-lead KEY`: leads KEY, says `LEADING`, and holds the work
/// until the line `release`; then says `landed ROLE`, and stays.
pub fn lead(key: &str) {
    let flights = lab::open_from_env();
    let lines = stdin_lines();
    say("READY");
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (forward, rest) = mpsc::channel();
    std::thread::spawn(move || {
        let mut release = Some(release);
        for line in lines {
            if line == "release"
                && let Some(release) = release.take()
            {
                let _ = release.send(());
            } else if forward.send(line).is_err() {
                return;
            }
        }
    });
    let landed = process::runtime().block_on(flights.call(key).deadline(WORKER_PATIENCE).run(
        |_token| async move {
            say("LEADING");
            let _ = released.await;
            Ok::<_, std::io::Error>(format!("made by {}", std::process::id()))
        },
    ));
    match landed {
        Ok(landed) if landed.role == Role::Led => say("landed led"),
        Ok(_) => say("landed joined"),
        Err(error) => say(format!("landed error {error}")),
    }
    stay(&rest);
}

/// `worker cluster-join KEY`: on the line `go`, calls KEY; says
/// `answered KIND TIME` when the call returns (KIND: `joined` with the
/// leader's value, or what else it ended with), and stays.
pub fn join(key: &str) {
    let flights = lab::open_from_env();
    let lines = stdin_lines();
    ready_then_go(&lines);
    let result = process::runtime().block_on(
        flights
            .call(key)
            .deadline(WORKER_PATIENCE)
            .run(|_token| async { Ok::<_, std::io::Error>(String::new()) }),
    );
    let at = wall_nanos();
    let kind = match result {
        Ok(landed) if landed.role == Role::Joined && landed.value.starts_with("made by") => {
            "joined"
        }
        Ok(_) => "led",
        Err(RunError::Interrupted { .. }) => "interrupted",
        Err(RunError::DeadlineExceeded { .. }) => "deadline",
        Err(error) => {
            eprintln!("a joiner's call through the kill failed: {error}");
            "error"
        }
    };
    say(format!("answered {kind} {at}"));
    stay(&lines);
}

/// `worker cluster-load THREADS WORK_US`: THREADS threads call fresh keys
/// in a loop (crate::failover's load), saying `epoch E TIME` at the first
/// lead of each term, and `lead TIME` at the first lead after each line
/// `mark SINCE` (wall nanoseconds); stays until its stdin closes.
pub fn load(threads: &str, work: &str) {
    let flights = lab::open_from_env();
    let threads: usize = threads.parse().expect("a number of threads");
    let work = Duration::from_micros(work.parse().expect("work in microseconds"));
    let lines = stdin_lines();
    say("READY");
    let mark = Arc::new(AtomicU64::new(0));
    crate::failover::start_load(&flights, threads, work, WORKER_PATIENCE, &mark);
    while let Ok(line) = lines.recv() {
        if let Some(since) = line.strip_prefix("mark ") {
            mark.store(since.parse().expect("a time"), Ordering::Release);
        }
    }
}

/// `worker cluster-idle`: a member that only makes its warm-up call (the
/// first of a cluster thereby coordinates) and stays.
pub fn idle() {
    let _flights = lab::open_from_env();
    let lines = stdin_lines();
    say("READY");
    stay(&lines);
}
