//! Cluster mode with real processes, a real etcd and real hosts (SPEC.md
//! §14): hosts are network namespaces joined by a bridge (tests/support/
//! hosts.rs); every process is a child of this test binary, run on its host
//! with `ip netns exec`. Without etcd, or without root for the namespaces,
//! the tests say so and skip (CI requires both).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use single_flight::{Cluster, SingleFlight};

use crate::support::child::{self, Children, say, unknown, var};
use crate::support::etcd::{self, Etcd};
use crate::support::hosts::Hosts;
use crate::support::scene::{describe, idle};
use crate::support::{BINARY, PATIENCE, certs, times_ran};

/// The lease the children ask for: etcd's minimum (§14.2), so that a dead
/// host's term ends soon. It leaves a term only a second of proven lease
/// beyond each renewal, which a loaded test machine can miss: scenarios
/// that must see no failover ask for the default instead (`SF_TTL_S`).
const TTL: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------- children

/// A child of this module in `role` (support/child.rs); its exit code.
pub fn child(role: &str) -> i32 {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run_child(role))
}

fn cluster_of_env() -> Cluster {
    let certs = PathBuf::from(var("SF_CERTS"));
    let prefix = var("SF_CERT");
    Cluster::etcd(var("SF_ETCD").split(','), var("SF_CLUSTER"))
        .listen(var("SF_LISTEN").parse().expect("SF_LISTEN"))
        .tls(
            certs.join(format!("{}ca.pem", var("SF_CA"))),
            certs.join(format!("{prefix}.pem")),
            certs.join(format!("{prefix}.key")),
        )
        .ttl(match var("SF_TTL_S").parse() {
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => TTL,
        })
        .shards(var("SF_SHARDS").parse().unwrap_or(1))
}

/// The cluster as a child reaches it: through the host tier (SPEC.md
/// §18.6), each child a host of its own unless the test gives two the same
/// host directory, or directly with `SF_DIRECT`.
fn place_of_env() -> Cluster {
    let cluster = cluster_of_env().directory(var("SF_HOST_DIR"));
    if var("SF_DIRECT").is_empty() {
        cluster
    } else {
        cluster.direct()
    }
}

async fn run_child(role: &str) -> i32 {
    let grace = var("SF_GRACE_MS")
        .parse()
        .map_or(Duration::from_secs(1), Duration::from_millis);
    let flights = match SingleFlight::cluster(place_of_env())
        .grace_window(grace)
        .open()
        .await
    {
        Ok(flights) => flights,
        Err(error) => {
            say(format_args!("RESULT open-error {error}"));
            return 0;
        }
    };
    match role {
        "idle" => idle(&flights).await,
        "call" => {
            let key = var("SF_KEY");
            let runs = PathBuf::from(var("SF_RUNS"));
            let mut call = flights.call(&key);
            if let Ok(ms) = var("SF_DEADLINE_MS").parse() {
                call = call.deadline(Duration::from_millis(ms));
            }
            let result = call
                .run(|token| async move {
                    let pid = std::process::id();
                    std::fs::write(runs.join(format!("ran-{pid}")), token.to_string())?;
                    say("LEADING");
                    // The test lets the work finish by creating `release`
                    // (or the file that `SF_RELEASE` names).
                    let release = match var("SF_RELEASE") {
                        name if name.is_empty() => "release".to_owned(),
                        name => name,
                    };
                    while !runs.join(&release).exists() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let verdict = fenced_write(&runs.join("resource"), token.get());
                    say(format_args!("WRITE {verdict}"));
                    Ok::<_, std::io::Error>(format!("value-of-{pid}"))
                })
                .await;
            say(format_args!("RESULT {}", describe(result)));
            flights.close().await;
            0
        }
        _ => unknown(role),
    }
}

/// A fenced resource (SPEC.md §6) shared by every host through the file
/// system, which no partition cuts: it keeps the highest token that wrote
/// and refuses a lower or equal one, in one step under an exclusive lock.
fn fenced_write(path: &Path, token: u64) -> &'static str {
    use std::io::{Read, Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("the resource opens");
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).expect("a lock");
    let mut text = String::new();
    file.read_to_string(&mut text).expect("the resource reads");
    let highest: u64 = text.trim().parse().unwrap_or(0);
    if token <= highest {
        return "refused";
    }
    file.set_len(0).unwrap();
    file.rewind().unwrap();
    write!(file, "{token}").unwrap();
    "accepted"
}

// ---------------------------------------------------------------- harness

/// One test's world: etcd, certificates, a scratch directory, where each
/// process runs, and the children of the test binary that run there.
struct World {
    scratch: PathBuf,
    etcd: Etcd,
    cluster: String,
    /// `None`: everything on loopback.
    hosts: Option<Hosts>,
    children: Children,
}

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sf-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(path.join("runs")).unwrap();
    std::fs::create_dir_all(path.join("certs")).unwrap();
    path
}

impl World {
    /// `count` hosts in namespaces plus one for etcd (the last), or `None`
    /// when namespaces cannot be made here.
    fn hosts(name: &str, count: usize) -> Option<World> {
        if !etcd::available() || !Hosts::available() {
            return None;
        }
        let hosts = Hosts::new(count + 1);
        let scratch = scratch(name);
        let sans: Vec<String> = (0..count)
            .map(|index| format!("IP:{}", hosts.address(index)))
            .collect();
        certs::make(&scratch.join("certs"), &sans.join(",")).expect("the test certificates");
        let etcd = Etcd::start(&[(hosts.address(count), hosts.prefix(count))]);
        Some(World {
            scratch,
            etcd,
            cluster: name.to_owned(),
            hosts: Some(hosts),
            children: Children::new(),
        })
    }

    /// Everything on loopback, with an etcd of `members`.
    fn loopback(name: &str, members: usize) -> Option<World> {
        if !etcd::available() {
            return None;
        }
        let scratch = scratch(name);
        certs::make(&scratch.join("certs"), "").expect("the test certificates");
        let etcd = if members == 1 {
            Etcd::single()
        } else {
            Etcd::three()
        };
        Some(World {
            scratch,
            etcd,
            cluster: name.to_owned(),
            hosts: None,
            children: Children::new(),
        })
    }

    fn runs(&self) -> PathBuf {
        self.scratch.join("runs")
    }

    /// The directory in which the host `host`'s children meet (SPEC.md
    /// §18.6): the namespaces share one file system, so each host has its
    /// own.
    fn host_directory(&self, host: usize) -> PathBuf {
        self.scratch.join(format!("hosts/{host}"))
    }

    /// The host directory of a host the test names, which several children
    /// share (`SF_HOST_DIR`).
    fn host_directory_named(&self, host: &str) -> String {
        self.scratch
            .join(format!("hosts/{host}"))
            .display()
            .to_string()
    }

    fn release(&self) {
        std::fs::write(self.runs().join("release"), b"").unwrap();
    }

    /// Starts a child on `host` (`None`: loopback) in `role`; returns its
    /// index.
    fn spawn(&mut self, host: Option<usize>, role: &str, extra: &[(&str, &str)]) -> usize {
        let binary = child::binary();
        let (mut command, listen) = match (host, &self.hosts) {
            (Some(index), Some(hosts)) => (
                hosts.command(index, &binary),
                format!("{}:0", hosts.address(index)),
            ),
            _ => (Command::new(&binary), "127.0.0.1:0".to_owned()),
        };
        child::as_child(&mut command, "processes", role)
            .env("SF_ETCD", self.etcd.endpoints().join(","))
            .env("SF_CLUSTER", &self.cluster)
            .env("SF_LISTEN", listen)
            .env("SF_CERTS", self.scratch.join("certs"))
            .env("SF_CERT", "server")
            .env("SF_CA", "")
            .env("SF_RUNS", self.runs())
            .env("SF_HOST_DIR", self.host_directory(self.children.count()));
        for (name, value) in extra {
            command.env(name, value);
        }
        self.children.spawn(command)
    }

    /// The rest of a child's next report that starts with `prefix`.
    fn line(&mut self, child: usize, prefix: &str) -> String {
        self.children.line(child, prefix)
    }

    /// The RESULT line of a child.
    fn result(&mut self, child: usize) -> String {
        self.line(child, "RESULT ")
    }

    /// `single-flight run --key KEY -- sh -c SCRIPT` on `host` in this
    /// cluster, with the command line's cluster flags (SPEC.md §14.8); the
    /// script runs in the scratch directory's `runs`.
    fn command_run(&self, host: usize, key: &str, script: &str) -> Command {
        let mut command = self.command(host, "run");
        command.args(["--key", key, "--", "sh", "-c", script]);
        command
    }

    /// [`World::command_run`] in the flight directory `dir` on `host`,
    /// which the test gives to each command of one host (SPEC.md §18.6).
    fn command_run_in(&self, host: usize, dir: &Path, key: &str, script: &str) -> Command {
        let hosts = self.hosts.as_ref().expect("command tests run on hosts");
        let mut command = hosts.command(host, BINARY);
        command.arg("run");
        certs::member_flags_in(
            &mut command,
            &self.etcd.endpoints(),
            &self.cluster,
            &format!("{}:0", hosts.address(host)),
            &self.scratch.join("certs/ca.pem"),
            &self.scratch.join("certs/server"),
            dir,
        );
        command
            .args(["--key", key, "--", "sh", "-c", script])
            .current_dir(self.runs())
            .env_remove("SINGLE_FLIGHT_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// `single-flight SUBCOMMAND` on `host` with this cluster's flags.
    fn command(&self, host: usize, subcommand: &str) -> Command {
        self.command_as(host, subcommand, &self.scratch.join("certs/server"))
    }

    /// `single-flight SUBCOMMAND` on `host` with this cluster's flags and
    /// the certificate `pair`.pem with its key `pair`.key.
    fn command_as(&self, host: usize, subcommand: &str, pair: &Path) -> Command {
        let hosts = self.hosts.as_ref().expect("command tests run on hosts");
        let mut command = hosts.command(host, BINARY);
        command.arg(subcommand);
        certs::member_flags_as(
            &mut command,
            &self.etcd.endpoints(),
            &self.cluster,
            &format!("{}:0", hosts.address(host)),
            &self.scratch.join("certs/ca.pem"),
            pair,
        );
        command
            .current_dir(self.runs())
            .env_remove("SINGLE_FLIGHT_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// The cluster's status as a client of it sees it (SPEC.md §3.5).
    fn status(&self) -> Result<single_flight::Status, single_flight::StatusError> {
        let cluster = Cluster::etcd(self.etcd.endpoints(), &self.cluster).tls(
            self.scratch.join("certs/ca.pem"),
            self.scratch.join("certs/client.pem"),
            self.scratch.join("certs/client.key"),
        );
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(single_flight::SingleFlight::cluster(cluster.clone()).status())
    }

    /// Waits until the coordinator reports a flight of `key` with
    /// `joiners` joiners.
    fn wait_for_joiners(&self, key: &str, joiners: u64) {
        self.wait_for_joiners_where(key, joiners, || Some(self.status()));
    }

    /// Waits until the status that `look` takes shows a flight of `key`
    /// with at least `joiners` joiners.
    fn wait_for_joiners_where<E: std::fmt::Debug>(
        &self,
        key: &str,
        joiners: u64,
        look: impl Fn() -> Option<Result<single_flight::Status, E>>,
    ) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = look();
            if let Some(Ok(status)) = &status
                && status
                    .flights
                    .iter()
                    .any(|flight| flight.key.as_str() == key && flight.joiners >= joiners)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no flight of {key} with {joiners} joiners: {status:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.children.kill_all();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

impl World {
    /// Each shard's coordinator's status, of a cluster of `shards` shards,
    /// as a client of it sees it directly (SPEC.md §19.6).
    fn shard_statuses(
        &self,
        shards: u32,
    ) -> Vec<Result<single_flight::Status, single_flight::StatusError>> {
        let cluster = Cluster::etcd(self.etcd.endpoints(), &self.cluster)
            .tls(
                self.scratch.join("certs/ca.pem"),
                self.scratch.join("certs/client.pem"),
                self.scratch.join("certs/client.key"),
            )
            .shards(shards)
            .direct();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(single_flight::SingleFlight::cluster(cluster).shard_statuses())
    }

    /// Waits until shard `shard`'s coordinator of a cluster of `shards`
    /// reports a flight of `key` with `joiners` joiners.
    fn wait_for_joiners_of_shard(&self, shards: u32, shard: usize, key: &str, joiners: u64) {
        self.wait_for_joiners_where(key, joiners, || {
            self.shard_statuses(shards).into_iter().nth(shard)
        });
    }
}

/// The token of a `led` or `joined` result line.
fn token(result: &str) -> &str {
    result.split(' ').nth(1).unwrap_or_default()
}

// ---------------------------------------------------------------- scenarios

/// §14: a stampede from processes on three hosts runs the work once, and
/// every caller receives its value under one token.
#[test]
fn s14_a_stampede_from_three_hosts_runs_the_work_once() {
    let Some(mut world) = World::hosts("stampede", 3) else {
        return;
    };
    let callers: Vec<usize> = (0..6)
        .map(|index| {
            world.spawn(
                Some(index % 3),
                "call",
                &[("SF_KEY", "artifact"), ("SF_TTL_S", "5")],
            )
        })
        .collect();
    world.wait_for_joiners("artifact", 5);
    world.release();
    let results: Vec<String> = callers.iter().map(|&caller| world.result(caller)).collect();
    assert_eq!(
        times_ran(&world.runs()),
        1,
        "the work ran once: {results:?}"
    );
    let led = results.iter().filter(|r| r.starts_with("led ")).count();
    let joined = results.iter().filter(|r| r.starts_with("joined ")).count();
    assert_eq!((led, joined), (1, 5), "{results:?}");
    let leader = results.iter().find(|r| r.starts_with("led ")).unwrap();
    for result in &results {
        assert_eq!(token(result), token(leader), "one token: {results:?}");
        assert_eq!(
            result.split(' ').nth(2),
            leader.split(' ').nth(2),
            "one value"
        );
    }
}

/// What a `single-flight run` printed and how it exited.
struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Starts a stampede of `single-flight run` for `key`: the first on host
/// 0, then, once its COMMAND runs, one on each of `joiner_hosts`; lets
/// COMMAND end once all of them have joined, and returns what each printed
/// (the leader first) and what `status --json` said on the last host while
/// they waited.
fn command_stampede(
    world: &World,
    key: &str,
    joiner_hosts: &[usize],
    output: &str,
) -> (Vec<Ran>, serde_json::Value) {
    // COMMAND counts its runs, waits to be let go, then writes `output`.
    let script =
        format!("echo ran > ran-$$; while [ ! -e release ]; do sleep 0.02; done; {output}");
    let mut children = vec![
        world
            .command_run(0, key, &script)
            .spawn()
            .expect("run starts"),
    ];
    let deadline = Instant::now() + PATIENCE;
    while times_ran(&world.runs()) == 0 {
        assert!(Instant::now() < deadline, "the leader's COMMAND never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    for &host in joiner_hosts {
        children.push(
            world
                .command_run(host, key, &script)
                .spawn()
                .expect("run starts"),
        );
    }
    world.wait_for_joiners(key, joiner_hosts.len() as u64);
    let last = *joiner_hosts.last().expect("joiners");
    let status = world
        .command(last, "status")
        .arg("--json")
        .output()
        .expect("status runs");
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status = serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    world.release();
    let ran = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("run ends");
            Ran {
                code: output.status.code(),
                stdout: output.stdout,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        })
        .collect();
    (ran, status)
}

/// §18.3, §18.6: three `single-flight run`s on one host and two on
/// another, each host's sharing its flight directory: COMMAND runs once,
/// every caller prints its output, and the cluster's coordinator never
/// sees more than one party of each host (the other host's, as the one
/// joiner of the flight).
#[test]
fn s18_3_the_runs_of_a_host_are_one_party_at_the_cluster() {
    let Some(world) = World::hosts("host-party", 2) else {
        return;
    };
    let script = "echo ran > ran-$$; while [ ! -e release ]; do sleep 0.02; done; echo made";
    let dirs = [world.scratch.join("h0"), world.scratch.join("h1")];
    let mut children = vec![
        world
            .command_run_in(0, &dirs[0], "k", script)
            .spawn()
            .expect("run starts"),
    ];
    let deadline = Instant::now() + PATIENCE;
    while times_ran(&world.runs()) == 0 {
        assert!(Instant::now() < deadline, "the leader's COMMAND never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    for host in [0, 0, 1, 1] {
        children.push(
            world
                .command_run_in(host, &dirs[host], "k", script)
                .spawn()
                .expect("run starts"),
        );
    }
    world.wait_for_joiners("k", 1);
    // A look now and then while the flight runs: a party more would be a
    // host's call that its host coordinator did not collapse.
    for _ in 0..10 {
        let status = world.status().expect("the coordinator answers");
        for flight in &status.flights {
            assert!(flight.joiners <= 1, "one party per host: {status:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    world.release();
    for child in children {
        let output = child.wait_with_output().expect("run ends");
        assert_eq!(
            (output.status.code(), output.stdout.as_slice()),
            (Some(0), &b"made\n"[..]),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(times_ran(&world.runs()), 1, "COMMAND ran once");
}

/// §14.8, §13.2: `single-flight run` from three hosts runs COMMAND once;
/// every caller prints its bytes (binary, both streams, megabytes of them)
/// and exits with its status.
#[test]
fn s14_8_the_command_runs_once_across_hosts_and_every_caller_gets_its_output() {
    let Some(world) = World::hosts("command", 3) else {
        return;
    };
    // 3 MiB and a little binary on stdout, a line on stderr, status 7: well
    // within the 4 MiB that a cluster's flights carry.
    let output =
        "head -c 3145728 /dev/zero | tr '\\0' x; printf 'end\\0\\377'; echo oops >&2; exit 7";
    let (ran, status) = command_stampede(&world, "artifact", &[1, 2], output);
    assert_eq!(times_ran(&world.runs()), 1, "COMMAND ran once");
    // §13.5: the coordinator (the first run, on host 0) as another host
    // sees it. The namespaces share one host name.
    let hosts = world.hosts.as_ref().unwrap();
    let coordinator = &status["coordinator"];
    assert!(
        coordinator["address"]
            .as_str()
            .is_some_and(|address| address.starts_with(&format!("{}:", hosts.address(0)))),
        "{status}"
    );
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    assert_eq!(coordinator["host"], host.as_str(), "{status}");
    assert!(coordinator["pid"].as_u64().is_some() && coordinator["epoch"].is_string());
    assert_eq!(status["cluster"]["name"], "command");
    assert_eq!(status["flights"][0]["joiners"], 2, "{status}");
    let mut expected = vec![b'x'; 3 << 20];
    expected.extend_from_slice(b"end\0\xff");
    for (index, run) in ran.iter().enumerate() {
        assert_eq!(run.code, Some(7), "run {index}: {}", run.stderr);
        assert!(
            run.stdout == expected,
            "run {index}: {} bytes",
            run.stdout.len()
        );
        assert!(
            run.stderr.starts_with("oops\n"),
            "run {index}: {}",
            run.stderr
        );
    }
}

/// §14.8: an output over the inline limit has no directory to spill into
/// in a cluster: the leader prints it all and exits with COMMAND's status,
/// and its joiners exit 75 saying why, having run nothing.
#[test]
fn s14_8_an_output_too_large_for_a_cluster_fails_its_joiners_clearly() {
    let Some(world) = World::hosts("command-large", 2) else {
        return;
    };
    let output = "head -c 5242880 /dev/zero; exit 0";
    let (ran, _) = command_stampede(&world, "huge", &[1], output);
    assert_eq!(times_ran(&world.runs()), 1, "COMMAND ran once");
    let (leader, joiner) = (&ran[0], &ran[1]);
    assert_eq!(leader.code, Some(0), "{}", leader.stderr);
    assert_eq!(leader.stdout.len(), 5 << 20);
    assert!(
        leader.stderr.contains("its joiners exit 75"),
        "{}",
        leader.stderr
    );
    assert_eq!(joiner.code, Some(75), "{}", joiner.stderr);
    assert!(joiner.stdout.is_empty());
    assert!(joiner.stderr.contains("§14.8"), "{}", joiner.stderr);
}

/// §14.3, §10: the coordinator's host dies (every process on it, `kill
/// -9`) while a leader on another host runs: a survivor coordinates, the
/// leader reasserts, the joiners on every host rejoin and receive its
/// value, and nothing runs twice.
#[test]
fn s14_3_the_coordinators_host_dies_and_the_flight_goes_on_elsewhere() {
    let Some(mut world) = World::hosts("host-death", 3) else {
        return;
    };
    let coordinator = world.spawn(Some(0), "idle", &[]);
    world.line(coordinator, "READY");
    let leader = world.spawn(Some(1), "call", &[("SF_KEY", "refill")]);
    world.line(leader, "LEADING");
    let joiners: Vec<usize> = [1, 2, 2]
        .into_iter()
        .map(|host| world.spawn(Some(host), "call", &[("SF_KEY", "refill")]))
        .collect();
    world.wait_for_joiners("refill", 3);
    world.hosts.as_ref().unwrap().kill_all(0);
    world.children.kill(coordinator);
    // The new term's grace window holds the reasserted flight; the status
    // of the new coordinator shows it with its rejoined joiners.
    world.wait_for_joiners("refill", 3);
    world.release();
    let led = world.result(leader);
    assert!(led.starts_with("led "), "{led}");
    for joiner in joiners {
        let joined = world.result(joiner);
        assert!(joined.starts_with("joined "), "{joined}");
        assert_eq!(token(&joined), token(&led));
    }
    assert_eq!(times_ran(&world.runs()), 1, "nothing ran twice");
}

/// Which coordinators a failover of the host tier kills (SPEC.md §18.4).
#[derive(Clone, Copy, PartialEq)]
enum Killed {
    /// The leader's host's coordinator.
    HostCoordinator,
    /// The cluster's coordinator, a host of its own.
    ClusterCoordinator,
    /// Both, one after the other at once.
    Both,
    /// One process that coordinates both the cluster and the leader's host.
    OneCoordinatingBoth,
}

/// §18.4: the cluster's coordinator, and two hosts: on host A its
/// coordinator, a leader and a joiner (one party at the cluster, §18.3);
/// on host B a joiner. `killed` dies (`kill -9`) while the leader runs.
/// The leader's flight survives it: the leader and host A's joiner replay
/// through host A's next coordinator (the leader's process, when the first
/// one died), the relay window (§18.2) or the next cluster term's grace
/// window takes the flight back, every joiner on both hosts receives the
/// leader's value under its token, and the work ran once.
fn a_flight_survives_in_the_tier(name: &str, killed: Killed) {
    let Some(mut world) = World::loopback(name, 1) else {
        return;
    };
    let host = |world: &World, name: &str| world.host_directory_named(name);
    // A window long enough for a process to win its host's claim, reach the
    // cluster and reassert on a loaded machine: its length decides no
    // outcome here, only whether the window is missed.
    let grace = ("SF_GRACE_MS", "10000");
    let cluster_host = match killed {
        Killed::OneCoordinatingBoth => host(&world, "a"),
        _ => host(&world, "c"),
    };
    let cluster = world.spawn(None, "idle", &[("SF_HOST_DIR", &cluster_host), grace]);
    world.line(cluster, "READY");
    let host_a = if killed == Killed::OneCoordinatingBoth {
        cluster
    } else {
        let host_a = world.spawn(None, "idle", &[("SF_HOST_DIR", &host(&world, "a")), grace]);
        world.line(host_a, "READY");
        host_a
    };
    let call = |world: &mut World, on: &str| {
        let directory = host(world, on);
        world.spawn(
            None,
            "call",
            &[("SF_KEY", "refill"), ("SF_HOST_DIR", &directory), grace],
        )
    };
    let leader = call(&mut world, "a");
    world.line(leader, "LEADING");
    let joiners = [call(&mut world, "a"), call(&mut world, "b")];
    // Host B's party joined at the cluster; host A's joiner is its host's
    // (§18.3), and joins before or after the kill alike.
    world.wait_for_joiners("refill", 1);
    let dying: &[usize] = match killed {
        Killed::HostCoordinator => &[host_a],
        Killed::ClusterCoordinator | Killed::OneCoordinatingBoth => &[cluster],
        Killed::Both => &[cluster, host_a],
    };
    for &child in dying {
        world.children.kill(child);
    }
    // The flight is back at the cluster's coordinator (the leader's
    // reassert, host B's rejoin) before the leader may finish: a leader
    // that ends its process while its land waits out a failover longer
    // than its close lasts loses the land, in the tier as directly (§9.4).
    world.wait_for_joiners("refill", 1);
    world.release();
    let led = world.result(leader);
    assert!(led.starts_with("led "), "{led}");
    for (joiner, host) in joiners.into_iter().zip(["a", "b"]) {
        let joined = world.result(joiner);
        assert!(
            joined.starts_with("joined "),
            "host {host}'s joiner: {joined}"
        );
        assert_eq!(token(&joined), token(&led));
    }
    assert_eq!(times_ran(&world.runs()), 1, "nothing ran twice");
}

/// §18.2, §18.4: a host coordinator's death leaves its host's flight to its
/// next one, within the relay window.
#[test]
fn s18_4_a_host_coordinators_death_loses_no_flight() {
    a_flight_survives_in_the_tier("tier-host", Killed::HostCoordinator);
}

/// §18.4: the cluster coordinator's death: every host replays through its
/// own coordinator to the next cluster term.
#[test]
fn s18_4_the_cluster_coordinators_death_loses_no_flight() {
    a_flight_survives_in_the_tier("tier-cluster", Killed::ClusterCoordinator);
}

/// §18.4: both coordinators die at once.
#[test]
fn s18_4_both_coordinators_dying_at_once_lose_no_flight() {
    a_flight_survives_in_the_tier("tier-both", Killed::Both);
}

/// §18.4: one process coordinates both the cluster and the leader's host,
/// and dies.
#[test]
fn s18_4_a_process_coordinating_its_host_and_the_cluster_dies_and_no_flight_is_lost() {
    a_flight_survives_in_the_tier("tier-one", Killed::OneCoordinatingBoth);
}

/// §14.5: a client whose certificate comes from another CA is refused; its
/// call ends `Unavailable` with the reason, and the coordinator logs who.
#[test]
fn s14_5_a_client_of_another_ca_is_refused_with_the_reason() {
    let Some(mut world) = World::loopback("other-ca", 1) else {
        return;
    };
    let coordinator = world.spawn(None, "idle", &[]);
    world.line(coordinator, "READY");
    let stranger = world.spawn(
        None,
        "call",
        &[
            ("SF_KEY", "k"),
            ("SF_CERT", "other-client"),
            ("SF_DEADLINE_MS", "20000"),
        ],
    );
    let result = world.result(stranger);
    assert!(result.starts_with("unavailable "), "{result}");
    // §18.3: the stranger is its host's coordinator, which the cluster's
    // refused; its call is told so by its host's relay.
    assert!(
        result.contains("this host's coordinator cannot reach the cluster"),
        "{result}"
    );
    assert!(
        result.to_lowercase().contains("certificate") || result.contains("CA"),
        "the reason names the certificate: {result}"
    );
    assert_eq!(times_ran(&world.runs()), 0);
}

/// §11.3: connections that never finish their handshake (here: TCP
/// connections closed before TLS) give their slot back. Had they kept it,
/// `MAX_CONNECTIONS` of them would shut every client out for the term.
#[test]
fn s11_3_failed_handshakes_do_not_use_up_the_connections() {
    let Some(mut world) = World::loopback("handshakes", 1) else {
        return;
    };
    let coordinator = world.spawn(None, "idle", &[("SF_TTL_S", "5")]);
    world.line(coordinator, "READY");
    let address = world
        .status()
        .expect("the coordinator answers")
        .address
        .expect("a cluster's status has the address");
    for _ in 0..=single_flight::_internal::shell::MAX_CONNECTIONS {
        // Connected, then closed without a byte: the TLS handshake fails.
        drop(std::net::TcpStream::connect(&address).expect("the coordinator accepts"));
    }
    let caller = world.spawn(
        None,
        "call",
        &[
            ("SF_KEY", "after"),
            ("SF_DEADLINE_MS", "30000"),
            ("SF_TTL_S", "5"),
        ],
    );
    world.line(caller, "LEADING");
    world.release();
    let result = world.result(caller);
    assert!(result.starts_with("led "), "{result}");
    // And a new connection still gets a slot. (Whether the flight is still
    // listed depends on when its land arrived: the leader's call returns
    // before that.)
    let status = world.status().expect("the coordinator still answers");
    assert!(status.address.is_some_and(|again| again == address));
}

/// §14.6: one etcd member of three dies and service goes on; two die and
/// calls end `Unavailable` within their deadline; quorum returns and
/// service resumes.
#[test]
fn s14_6_losing_etcds_quorum_ends_calls_unavailable_and_service_resumes() {
    let Some(mut world) = World::loopback("quorum", 3) else {
        return;
    };
    world.release();
    let first = world.spawn(None, "call", &[("SF_KEY", "a")]);
    let result = world.result(first);
    assert!(result.starts_with("led "), "{result}");
    world.etcd.kill(0);
    let second = world.spawn(None, "call", &[("SF_KEY", "b")]);
    let result = world.result(second);
    assert!(result.starts_with("led "), "one member down: {result}");
    world.etcd.kill(1);
    let third = world.spawn(
        None,
        "call",
        &[("SF_KEY", "c"), ("SF_DEADLINE_MS", "15000")],
    );
    let result = world.result(third);
    assert!(
        result.starts_with("unavailable")
            || result.starts_with("open-error")
            || result == "deadline",
        "no quorum: {result}"
    );
    world.etcd.restart(0);
    world.etcd.restart(1);
    world.etcd.wait_healthy();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let again = world.spawn(None, "call", &[("SF_KEY", "d")]);
        let result = world.result(again);
        if result.starts_with("led ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "service did not resume: {result}"
        );
    }
}

/// §14.2, §6: the coordinator's host is cut off (its link down) while a
/// leader on it runs: the coordinator steps down, another host coordinates,
/// the cut-off flight's joiners elsewhere end `interrupted` (its leader
/// cannot reassert), a new flight leads under a greater token and writes
/// first, and the cut-off leader's late write is refused by the fence.
#[test]
fn s14_2_a_partitioned_coordinator_steps_down_and_the_fence_refuses_its_leader() {
    let Some(mut world) = World::hosts("partition", 3) else {
        return;
    };
    let coordinator = world.spawn(Some(0), "idle", &[]);
    world.line(coordinator, "READY");
    let cut_off = world.spawn(
        Some(0),
        "call",
        &[("SF_KEY", "report"), ("SF_RELEASE", "release-old")],
    );
    world.line(cut_off, "LEADING");
    let joiner = world.spawn(Some(1), "call", &[("SF_KEY", "report")]);
    world.wait_for_joiners("report", 1);
    world.hosts.as_ref().unwrap().partition(0);
    let interrupted = world.result(joiner);
    assert_eq!(interrupted, "interrupted", "its leader cannot reassert");
    // A new flight of the key, on a host that can reach the new term.
    std::fs::write(world.runs().join("release"), b"").unwrap();
    let fresh = world.spawn(Some(2), "call", &[("SF_KEY", "report")]);
    assert_eq!(world.line(fresh, "WRITE "), "accepted");
    let led = world.result(fresh);
    assert!(led.starts_with("led "), "{led}");
    // The cut-off leader, released now, writes after the new flight with
    // an older token.
    std::fs::write(world.runs().join("release-old"), b"").unwrap();
    assert_eq!(world.line(cut_off, "WRITE "), "refused");
    let old: u64 = std::fs::read_to_string(world.runs().join("resource"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        old.to_string(),
        token(&led),
        "the resource holds the newer token"
    );
    world.hosts.as_ref().unwrap().heal(0);
}

/// How many times [`s14_4_a_leader_reasserts_in_time_when_the_coordinators_host_is_cut_off`]
/// repeats its partition: `SINGLE_FLIGHT_PARTITION_LOOPS`, 1 by default
/// (RELIABILITY.md says when to run it 20 or 50 times).
fn partition_loops() -> usize {
    std::env::var("SINGLE_FLIGHT_PARTITION_LOOPS")
        .ok()
        .and_then(|loops| loops.parse().ok())
        .unwrap_or(1)
}

/// §14.3, §14.4: the coordinator's host is cut off while a leader runs on
/// another host with joiners on both: the leader's connection to the old
/// coordinator may fail before its key expires, so that it connects again
/// to the address the key still names; when the key goes, that attempt is
/// abandoned at once, and the leader reasserts within the new term's grace
/// window. Every joiner receives the leader's value; nothing runs twice.
#[test]
fn s14_4_a_leader_reasserts_in_time_when_the_coordinators_host_is_cut_off() {
    for round in 0..partition_loops() {
        let Some(mut world) = World::hosts(&format!("cut-leader-{round}"), 3) else {
            return;
        };
        // A lease that outlives the connections' keepalive (about 5 s,
        // §11.4): every survivor has lost its connection before the old key
        // expires, and is connecting again to the host the key still names,
        // which answers nothing, when it does.
        let ttl = ("SF_TTL_S", "10");
        let coordinator = world.spawn(Some(0), "idle", &[ttl]);
        world.line(coordinator, "READY");
        let standby = world.spawn(Some(2), "idle", &[ttl]);
        world.line(standby, "READY");
        let leader = world.spawn(Some(1), "call", &[("SF_KEY", "refill"), ttl]);
        world.line(leader, "LEADING");
        let joiners: Vec<usize> = [1, 2]
            .into_iter()
            .map(|host| world.spawn(Some(host), "call", &[("SF_KEY", "refill"), ttl]))
            .collect();
        world.wait_for_joiners("refill", 2);
        world.hosts.as_ref().unwrap().partition(0);
        // The next term holds the reasserted flight with its rejoined
        // joiners.
        world.wait_for_joiners("refill", 2);
        world.release();
        let led = world.result(leader);
        assert!(led.starts_with("led "), "round {round}: {led}");
        for joiner in joiners {
            let joined = world.result(joiner);
            assert!(joined.starts_with("joined "), "round {round}: {joined}");
            assert_eq!(token(&joined), token(&led), "round {round}");
        }
        assert_eq!(
            times_ran(&world.runs()),
            1,
            "round {round}: nothing ran twice"
        );
        world.hosts.as_ref().unwrap().heal(0);
    }
}

/// How long a `single-flight run` may take to exit after its `--timeout`
/// or a stop signal while etcd cannot be reached: far above the few
/// milliseconds it takes, far below the 8 s it took when it waited for its
/// requests to etcd to give up first (SPEC.md §14.6).
const STOP_BOUND: Duration = Duration::from_secs(6);

/// §13.4, §14.6: on a host cut off from etcd, `--timeout` and SIGTERM end
/// a run on time; the requests to etcd in progress are abandoned.
#[test]
fn s14_6_a_timeout_and_a_signal_are_honoured_while_etcd_is_unreachable() {
    let Some(world) = World::hosts("etcd-unreachable", 1) else {
        return;
    };
    let hosts = world.hosts.as_ref().unwrap();
    hosts.partition(0);
    let started = Instant::now();
    let mut timed = world
        .command(0, "run")
        .args(["--timeout", "1", "--key", "k", "--", "true"])
        .spawn()
        .expect("run starts");
    let mut signalled = world
        .command_run(0, "k", "true")
        .spawn()
        .expect("run starts");
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&signalled),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM is sent");
    let signalled_code = signalled.wait().expect("run ends").code();
    let after_signal = sent.elapsed();
    let timed_code = timed.wait().expect("run ends").code();
    let after_start = started.elapsed();
    hosts.heal(0);
    let mut stderr = String::new();
    for child in [&mut signalled, &mut timed] {
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    }
    assert_eq!(signalled_code, Some(143), "{stderr}");
    assert!(
        after_signal < STOP_BOUND,
        "exit {after_signal:?} after SIGTERM"
    );
    assert_eq!(timed_code, Some(124), "after {after_start:?}: {stderr}");
    assert!(
        after_start < Duration::from_secs(1) + STOP_BOUND,
        "exit {after_start:?} after the start, with --timeout 1"
    );
}

/// §13.5, §14.6: `serve` campaigns on through an etcd outage (its host cut
/// off longer than its lease) and coordinates again after it; meanwhile
/// `status` says that the coordinator named in etcd does not answer.
#[test]
fn s13_5_serve_outlives_an_etcd_outage_and_status_names_the_silent_coordinator() {
    let Some(world) = World::hosts("serve-outage", 1) else {
        return;
    };
    let mut serve = world.command(0, "serve").spawn().expect("serve starts");
    let pid = serve.id();
    let deadline = Instant::now() + PATIENCE;
    while !world.status().is_ok_and(|status| status.pid == pid) {
        assert!(Instant::now() < deadline, "serve never coordinated");
        std::thread::sleep(Duration::from_millis(50));
    }
    let hosts = world.hosts.as_ref().unwrap();
    hosts.partition(0);
    let cut = Instant::now();
    // The key lives on for its lease (5 s), naming a host that is gone.
    let status = world.status();
    match &status {
        Err(error @ single_flight::StatusError::NotAnswering { .. }) => {
            assert!(error.to_string().contains("failover"), "{error}");
        }
        other => panic!("a silent coordinator, not {other:?}"),
    }
    // Past the lease, every campaign fails until the host is back.
    std::thread::sleep(Duration::from_secs(10).saturating_sub(cut.elapsed()));
    hosts.heal(0);
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(
            serve.try_wait().expect("serve waits").is_none(),
            "serve exited during the outage"
        );
        if world.status().is_ok_and(|status| status.pid == pid) {
            break;
        }
        assert!(Instant::now() < deadline, "serve never coordinated again");
        std::thread::sleep(Duration::from_millis(100));
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&serve),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM is sent");
    let output = serve.wait_with_output().expect("serve ends");
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    // No flood: the election's own retries (§14.6) may carry a campaign
    // through an outage shorter than their patience without it failing at
    // all; otherwise serve says so once.
    assert!(
        log.matches("trying again until the election answers")
            .count()
            <= 1,
        "at most one line for the outage: {log}"
    );
}

/// §14.4: a grace window too short for a leader to come back is refused,
/// saying why, before anything starts.
#[test]
fn s14_4_a_grace_window_too_short_for_a_cluster_is_refused() {
    let output = Command::new(BINARY)
        .args(["run", "--etcd", "http://127.0.0.1:9", "--insecure"])
        .args(["--grace", "500", "--key", "k", "--", "true"])
        .env_remove("SINGLE_FLIGHT_GRACE_MS")
        .output()
        .expect("run runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("--grace 500") && stderr.contains("1000"),
        "{stderr}"
    );
}

/// §16.4 (issue 28 item 7): a cluster keeps outputs only while a
/// coordinator's term lasts, and a run with `--reuse` starts none in the
/// background there; one that finds no coordinator says on stderr that its
/// output lasts only until it exits, and what keeps it.
#[test]
fn s16_4_a_reuse_run_without_a_coordinator_in_a_cluster_says_so() {
    let Some(world) = World::hosts("reuse-alone", 1) else {
        return;
    };
    let output = world
        .command(0, "run")
        .args(["--reuse", "30", "--key", "r", "--", "sh", "-c", "echo out"])
        .output()
        .expect("run runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(output.stdout, b"out\n");
    assert!(stderr.contains("single-flight serve"), "{stderr}");
    assert!(stderr.contains("§16.4"), "{stderr}");
    // Nothing was left coordinating.
    assert!(world.status().is_err(), "a coordinator was left behind");
}

/// A command line as `sh` reads it, each word in single quotes.
fn shell_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| quoted(&word.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// §17.3: A's COMMAND on host 0 runs B on host 1, whose COMMAND runs A on
/// host 0 again: that run exits 78 at once, naming the cycle, and B's and
/// A's commands go on (it used to hang until --timeout). Every run has a
/// --timeout far above what they take, which a cycle left waiting would
/// reach (exit 124) instead of hanging the test.
#[test]
fn s17_3_a_loop_across_two_hosts_exits_at_once() {
    let Some(world) = World::hosts("nested", 2) else {
        return;
    };
    let run = |host: usize, key: &str| {
        let mut command = world.command(host, "run");
        command.args(["--timeout", "60", "--key", key, "--"]);
        shell_line(&command)
    };
    let deep = format!(r#"{} echo deep; echo "deep exited $?""#, run(0, "A"));
    let middle = format!(
        r#"{} sh -c {}; echo "B exited $?""#,
        run(1, "B"),
        quoted(&deep)
    );
    let mut outer = world.command(0, "run");
    outer.args(["--timeout", "60", "--key", "A", "--", "sh", "-c", &middle]);
    let output = outer.output().expect("run ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "deep exited 78\nB exited 0\n",
        "{stderr}"
    );
    assert!(
        stderr.contains(r#""B" waits for itself through "A""#),
        "{stderr}"
    );
}

/// §14.6: an etcd that answers nothing for longer than one request's
/// timeout (a member swamped by a stampede; here stopped) makes a call
/// wait and try again, not end `Unavailable`: once etcd answers, the call
/// leads.
#[test]
fn s14_6_a_call_waits_for_an_etcd_that_answers_late() {
    let Some(mut world) = World::loopback("late-etcd", 1) else {
        return;
    };
    world.release();
    world.etcd.pause(0);
    let caller = world.spawn(None, "call", &[("SF_KEY", "late")]);
    // Several of the library's 2 s request timeouts (REQUEST_TIMEOUT) pass
    // while etcd is stopped; the call is still waiting when it resumes.
    std::thread::sleep(Duration::from_secs(6));
    world.etcd.resume(0);
    let result = world.result(caller);
    assert!(result.starts_with("led "), "{result}");
}

/// §14.3: when the coordinator's term ends while its connections stay open
/// (here its process is stopped, and its lease expires), the processes
/// connected to it learn it together from the watch, and few of them
/// campaign for the next term: the rest see the winner's key put during
/// their pause.
#[test]
fn s14_3_after_a_failover_few_of_the_waiting_processes_campaign() {
    /// Enough processes that a herd would show plainly.
    const PROCESSES: usize = 24;
    let Some(mut world) = World::loopback("herd", 1) else {
        return;
    };
    let coordinator = world.spawn(None, "idle", &[]);
    world.line(coordinator, "READY");
    let others: Vec<usize> = (0..PROCESSES)
        .map(|_| world.spawn(None, "idle", &[]))
        .collect();
    for &other in &others {
        world.line(other, "READY");
    }
    let before = world.etcd.requests();
    let pid = rustix::process::Pid::from_raw(world.children.pid(coordinator) as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    // The next term: a coordinator answers again.
    let deadline = Instant::now() + PATIENCE;
    while !world.status().is_ok_and(|status| status.address.is_some()) {
        assert!(
            Instant::now() < deadline,
            "no coordinator after the failover"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every process has found the new term by then: it campaigned after its
    // pause at the latest, or saw the winner's key.
    std::thread::sleep(SETTLE);
    let after = world.etcd.requests();
    let grants = after.get("LeaseGrant").copied().unwrap_or(0)
        - before.get("LeaseGrant").copied().unwrap_or(0);
    eprintln!("{PROCESSES} processes after a failover: {grants} campaigns");
    assert!(grants >= 1, "someone campaigned");
    assert!(
        (grants as usize) <= PROCESSES / 3,
        "{grants} of {PROCESSES} processes campaigned for one term"
    );
}

/// How long after the new term the campaigns of a failover are counted:
/// past the longest pause before a campaign (`LONGEST_SPREAD`, 4 s, §14.3).
/// A longer wait would only count more.
const SETTLE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- trust

/// Ends `serve` with SIGTERM; its exit code and what it logged.
fn stop_serve(serve: std::process::Child) -> (Option<i32>, String) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&serve),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM is sent");
    let output = serve.wait_with_output().expect("serve ends");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Waits until the cluster's status, as a client with the cluster's
/// certificate sees it, satisfies `done`; returns it.
fn status_until(
    world: &World,
    what: &str,
    done: impl Fn(&Result<single_flight::Status, single_flight::StatusError>) -> bool,
) -> Result<single_flight::Status, single_flight::StatusError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = world.status();
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "never {what}: {status:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a status failed with a message that contains `text`.
fn refused_with(
    status: &Result<single_flight::Status, single_flight::StatusError>,
    text: &str,
) -> bool {
    status
        .as_ref()
        .is_err_and(|error| error.to_string().contains(text))
}

/// Copies the pair `from`.pem, `from`.key to `to`.pem, `to`.key, each by a
/// rename over the old file, as renewal agents write.
fn replace_pair(from: &Path, to: &Path) {
    for extension in ["pem", "key"] {
        let target = to.with_extension(extension);
        let written = to.with_extension(format!("{extension}.new"));
        std::fs::copy(from.with_extension(extension), &written).unwrap();
        std::fs::rename(&written, &target).unwrap();
    }
}

/// §14.5: a `serve` whose certificate expired is refused by its clients
/// with the time it expired; its files are renewed while it serves, first
/// by renaming new files over the old ones, then by swapping the symbolic
/// link to their directory as Kubernetes does (`..data`), and each renewal
/// takes effect for new clients without a restart: a client is served by
/// the same process in the same term. Each step's certificate is one that
/// clients refuse for a reason of its own (expired, then valid for another
/// name), so no step can pass on an older certificate.
#[test]
fn s14_5_a_serve_takes_up_renewed_certificates_in_the_same_term() {
    use std::os::unix::fs::symlink;
    let Some(world) = World::hosts("rotation", 1) else {
        return;
    };
    let certs = world.scratch.join("certs");
    // The layout of a mounted Kubernetes secret: the files are links
    // through `..data`, a link to the directory of the current version.
    let mounted = world.scratch.join("mounted");
    std::fs::create_dir_all(mounted.join("..first")).unwrap();
    std::fs::create_dir_all(mounted.join("..second")).unwrap();
    replace_pair(
        &certs.join("expired-server"),
        &mounted.join("..first/server"),
    );
    symlink("..first", mounted.join("..data")).unwrap();
    symlink("..data/server.pem", mounted.join("server.pem")).unwrap();
    symlink("..data/server.key", mounted.join("server.key")).unwrap();

    let serve = world
        .command_as(0, "serve", &mounted.join("server"))
        .spawn()
        .expect("serve starts");
    let pid = serve.id();
    let _ = status_until(&world, "refused as expired", |status| {
        refused_with(status, "expired at 2020-01-02T00:00:00Z")
    });
    let refused = world.command_run(0, "k", "echo ran").output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("presented an expired certificate: it expired at 2020-01-02T00:00:00Z"),
        "{stderr}"
    );

    // A renewal by rename, in the directory the links lead to.
    replace_pair(
        &certs.join("elsewhere-server"),
        &mounted.join("..first/server"),
    );
    let _ = status_until(&world, "refused for its name", |status| {
        refused_with(status, "elsewhere.invalid")
    });

    // A renewal by swapping the directory link.
    replace_pair(&certs.join("server"), &mounted.join("..second/server"));
    symlink("..second", mounted.join("..data.new")).unwrap();
    std::fs::rename(mounted.join("..data.new"), mounted.join("..data")).unwrap();
    let status = status_until(&world, "served", Result::is_ok).unwrap();
    assert_eq!(status.pid, pid, "the same process coordinates");
    assert_eq!(
        status.epoch,
        single_flight::Epoch::FIRST,
        "in its first term"
    );

    let served = world.command_run(0, "k", "echo ran").output().unwrap();
    let stderr = String::from_utf8_lossy(&served.stderr);
    assert_eq!(served.status.code(), Some(0), "{stderr}");
    assert_eq!(served.stdout, b"ran\n");
    let status = world.status().expect("the coordinator answers");
    assert_eq!(
        (status.pid, status.epoch),
        (pid, single_flight::Epoch::FIRST)
    );

    let (code, log) = stop_serve(serve);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains(&format!(
            "this process's certificate {} (--tls-cert) expired at 2020-01-02T00:00:00Z",
            mounted.join("server.pem").display()
        )),
        "the expiry is warned of: {log}"
    );
    assert_eq!(
        log.matches("the TLS files changed").count(),
        2,
        "each renewal is taken up once: {log}"
    );
}

/// `single-flight SUBCOMMAND` on loopback in `cluster`, with the cluster's
/// certificate `certs`/server and etcd's own files: etcd's members verified
/// with `certs`/ca.pem, and the pair `etcd_pair`.pem, `etcd_pair`.key
/// presented to them (SPEC.md §14.8).
fn command_with_etcd_pair(
    etcd: &Etcd,
    cluster: &str,
    certs: &Path,
    etcd_pair: &Path,
    subcommand: &str,
) -> Command {
    let mut command = Command::new(BINARY);
    command.arg(subcommand);
    certs::member_flags(
        &mut command,
        &etcd.endpoints(),
        cluster,
        "127.0.0.1:0",
        certs,
    );
    command
        .arg("--etcd-ca")
        .arg(certs.join("ca.pem"))
        .arg("--etcd-cert")
        .arg(etcd_pair.with_extension("pem"))
        .arg("--etcd-key")
        .arg(etcd_pair.with_extension("key"))
        .env_remove("SINGLE_FLIGHT_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// §14.5: etcd's client certificate is renewed on disk while a `serve`
/// coordinates (by a rename of each file), and etcd's CA is rotated: etcd
/// first trusts the old CA and the new one, then restarts trusting only the
/// new one, so that only the renewed certificate can reconnect. The serve's
/// connections to etcd (its renewals' own and its campaigns') reconnect
/// with the renewed files: etcd sees a lease renewal from it after its
/// restart, and the serve keeps its term or wins a new one, answering
/// calls. Nothing here waits for a clock: with the files read once, the
/// serve never reaches the restarted etcd.
#[test]
fn s14_5_a_serve_reconnects_to_etcd_with_its_renewed_etcd_certificate() {
    if !etcd::available() {
        return;
    }
    let scratch = scratch("etcd-rotation");
    let certs = scratch.join("certs");
    certs::make(&certs, "").expect("the test certificates");
    // etcd's own certificate is the cluster's process certificate (valid for
    // 127.0.0.1, signed by ca); the clients it trusts are those of ca and,
    // during the rotation, of other-ca.
    let etcd_certs = scratch.join("etcd-certs");
    std::fs::create_dir_all(&etcd_certs).unwrap();
    for extension in ["pem", "key"] {
        std::fs::copy(
            certs.join("server").with_extension(extension),
            etcd_certs.join("server").with_extension(extension),
        )
        .unwrap();
    }
    let old_ca = std::fs::read(certs.join("ca.pem")).unwrap();
    let new_ca = std::fs::read(certs.join("other-ca.pem")).unwrap();
    std::fs::write(etcd_certs.join("ca.pem"), [old_ca, new_ca.clone()].concat()).unwrap();
    let mut etcd = Etcd::single_tls(&etcd_certs);
    // The serve's etcd identity: first a client certificate of the old CA.
    let etcd_pair = scratch.join("etcd-identity/client");
    std::fs::create_dir_all(scratch.join("etcd-identity")).unwrap();
    replace_pair(&certs.join("client"), &etcd_pair);

    let cluster = "etcd-rotation";
    let serve = command_with_etcd_pair(&etcd, cluster, &certs, &etcd_pair, "serve")
        .spawn()
        .expect("serve starts");
    let pid = serve.id();
    // The status is asked with the new CA's client certificate for etcd,
    // which etcd accepts throughout.
    let endpoints = etcd.endpoints();
    let status = || {
        let cluster = Cluster::etcd(endpoints.clone(), cluster)
            .tls(
                certs.join("ca.pem"),
                certs.join("client.pem"),
                certs.join("client.key"),
            )
            .etcd_tls(
                certs.join("ca.pem"),
                certs.join("other-client.pem"),
                certs.join("other-client.key"),
            );
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(SingleFlight::cluster(cluster).status())
    };
    let deadline = Instant::now() + PATIENCE;
    while !status().is_ok_and(|status| status.pid == pid) {
        assert!(
            Instant::now() < deadline,
            "serve never coordinated: {:?}",
            status()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The renewal: the new CA's certificate and key, each renamed over the
    // old file. Then etcd restarts trusting the new CA only, and every
    // connection to it is made again.
    replace_pair(&certs.join("other-client"), &etcd_pair);
    etcd.kill(0);
    std::fs::write(etcd_certs.join("ca.pem"), &new_ca).unwrap();
    etcd.restart(0);
    etcd.wait_healthy();

    // Only this cluster's serve renews a lease, and only over a connection
    // made with the renewed certificate: etcd's counts start again at its
    // restart.
    let deadline = Instant::now() + PATIENCE;
    while etcd.requests().get("LeaseKeepAlive").copied().unwrap_or(0) == 0 {
        assert!(
            Instant::now() < deadline,
            "the serve never renewed a lease with the restarted etcd: {:?}",
            etcd.requests()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = status();
        if status.as_ref().is_ok_and(|status| status.pid == pid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve never coordinated again: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut run = command_with_etcd_pair(&etcd, cluster, &certs, &etcd_pair, "run");
    run.args(["--key", "k", "--", "echo", "ran"]);
    let served = run.output().unwrap();
    let stderr = String::from_utf8_lossy(&served.stderr);
    assert_eq!(served.status.code(), Some(0), "{stderr}");
    assert_eq!(served.stdout, b"ran\n");
    assert_eq!(status().expect("the coordinator answers").pid, pid);

    let (code, log) = stop_serve(serve);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("etcd's TLS files changed; new connections to etcd use them"),
        "the renewal is taken up: {log}"
    );
    drop(etcd);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// §14.5: a client whose certificate the cluster's CRL lists is refused by
/// the coordinator; the client's message says that its certificate was
/// revoked, naming the file, and the coordinator logs who it refused.
#[test]
fn s14_5_a_revoked_client_is_refused_with_the_reason() {
    let Some(world) = World::hosts("revoked-client", 1) else {
        return;
    };
    let certs = world.scratch.join("certs");
    let serve = world
        .command(0, "serve")
        .arg("--tls-crl")
        .arg(certs.join("crl.pem"))
        .spawn()
        .expect("serve starts");
    let pid = serve.id();
    let _ = status_until(&world, "served", |status| {
        status.as_ref().is_ok_and(|status| status.pid == pid)
    });
    let refused = world
        .command_as(0, "run", &certs.join("revoked-client"))
        .args(["--key", "k", "--", "echo", "ran"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{stderr}");
    assert!(refused.stdout.is_empty(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "this process's certificate (--tls-cert {}) was revoked by the cluster's CRL",
            certs.join("revoked-client.pem").display()
        )),
        "{stderr}"
    );
    // A certificate the list does not name is still served.
    assert_eq!(world.status().expect("served").pid, pid);

    let (code, log) = stop_serve(serve);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("presented a revoked certificate: the cluster's CRL (--tls-crl) lists it"),
        "{log}"
    );
}

/// §14.5: a client whose CRL lists the coordinator's certificate refuses
/// it, naming the coordinator and the reason.
#[test]
fn s14_5_a_revoked_coordinator_is_refused_by_its_client() {
    let Some(world) = World::hosts("revoked-coordinator", 1) else {
        return;
    };
    let certs = world.scratch.join("certs");
    let serve = world
        .command_as(0, "serve", &certs.join("revoked-server"))
        .spawn()
        .expect("serve starts");
    let pid = serve.id();
    let status = status_until(&world, "served", |status| {
        status.as_ref().is_ok_and(|status| status.pid == pid)
    })
    .unwrap();
    let address = status.address.expect("a cluster's status has the address");
    let refusing = world
        .command(0, "run")
        .arg("--tls-crl")
        .arg(certs.join("crl.pem"))
        .args(["--key", "k", "--", "echo", "ran"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refusing.stderr);
    assert_eq!(refusing.status.code(), Some(125), "{stderr}");
    assert!(refusing.stdout.is_empty(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the coordinator at {address} presented a revoked certificate"
        )),
        "{stderr}"
    );
    let (code, log) = stop_serve(serve);
    assert_eq!(code, Some(0), "{log}");
}

/// How long the rotation soak runs, in minutes (issue 46's acceptance run:
/// 10); `SINGLE_FLIGHT_ROTATION_MINUTES` sets another.
fn rotation_minutes() -> u64 {
    std::env::var("SINGLE_FLIGHT_ROTATION_MINUTES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(10)
}

/// Issues a certificate of the cluster's CA for `names`, valid from a
/// minute ago (clocks differ) for `minutes` more, as `pair`.pem and
/// `pair`.key, written by a rename over the old ones (make-certs.sh keeps
/// the CA's `openssl ca` database beside its files).
fn issue_short_lived(certs: &Path, pair: &Path, names: &str, minutes: u64) {
    let script = r#"set -eu
cd "$1"
start=$(date -u -d '-1 minute' +%Y%m%d%H%M%SZ)
end=$(date -u -d "+$4 minutes" +%Y%m%d%H%M%SZ)
work=$(mktemp -d)
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/new.key" 2>/dev/null
openssl req -new -key "$work/new.key" -subj "/CN=a rotated process" -out "$work/new.csr"
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=$3" >"$work/new.ext"
openssl ca -batch -config ca-db/ca.cnf -in "$work/new.csr" -extfile "$work/new.ext" -notext \
  -startdate "$start" -enddate "$end" -out "$work/new.pem" 2>/dev/null
mv "$work/new.pem" "$2.pem.new" && mv "$work/new.key" "$2.key.new"
mv "$2.pem.new" "$2.pem" && mv "$2.key.new" "$2.key"
rm -rf "$work""#;
    let status = Command::new("sh")
        .args(["-c", script, "issue"])
        .arg(certs)
        .arg(pair)
        .arg(names)
        .arg(minutes.to_string())
        .status()
        .expect("sh runs");
    assert!(status.success(), "issuing a short-lived certificate failed");
}

/// §14.5, issue 46's acceptance run (`--ignored`; 10 minutes unless
/// `SINGLE_FLIGHT_ROTATION_MINUTES` says otherwise): a `serve` whose
/// certificate is valid for two minutes and renewed on disk every minute
/// serves, in one term, a call from another host every second, each a new
/// process with a new TLS handshake: every call is answered. Without the
/// reload, every call after the second minute would be refused.
#[test]
#[ignore = "minutes long: issue 46's acceptance run, see RELIABILITY.md"]
fn s14_5_a_serve_renewed_every_minute_answers_every_call_in_one_term() {
    const VALID_MINUTES: u64 = 2;
    const RENEW_EVERY: Duration = Duration::from_secs(60);
    const CALL_EVERY: Duration = Duration::from_secs(1);
    let Some(world) = World::hosts("rotation-soak", 2) else {
        return;
    };
    let certs = world.scratch.join("certs");
    let hosts = world.hosts.as_ref().expect("on hosts");
    let names = format!("IP:{}", hosts.address(0));
    let pair = world.scratch.join("rotated");
    issue_short_lived(&certs, &pair, &names, VALID_MINUTES);
    let serve = world
        .command_as(0, "serve", &pair)
        .spawn()
        .expect("serve starts");
    let pid = serve.id();
    let _ = status_until(&world, "served", |status| {
        status.as_ref().is_ok_and(|status| status.pid == pid)
    });

    let started = Instant::now();
    let until = started + Duration::from_secs(60 * rotation_minutes());
    let mut renewed = started;
    let mut calls = Vec::new();
    let mut next = started;
    while Instant::now() < until {
        if renewed.elapsed() >= RENEW_EVERY {
            issue_short_lived(&certs, &pair, &names, VALID_MINUTES);
            renewed = Instant::now();
        }
        let number = calls.len();
        let call = world
            .command_run(1, &format!("k{number}"), &format!("echo ran-{number}"))
            .spawn()
            .expect("a call starts");
        calls.push((number, call));
        next += CALL_EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let total = calls.len();
    let mut failed = Vec::new();
    for (number, call) in calls {
        let output = call.wait_with_output().expect("a call ends");
        if output.status.code() != Some(0) || output.stdout != format!("ran-{number}\n").as_bytes()
        {
            failed.push(format!(
                "call {number}: {:?}, {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    let status = world.status().expect("the coordinator answers");
    let (code, log) = stop_serve(serve);
    println!(
        "{total} calls over {:.0} s, {} failed; {} renewals taken up",
        started.elapsed().as_secs_f64(),
        failed.len(),
        log.matches("the TLS files changed").count()
    );
    assert!(failed.is_empty(), "calls failed: {failed:#?}");
    assert_eq!(
        (status.pid, status.epoch),
        (pid, single_flight::Epoch::FIRST),
        "one process, one term"
    );
    assert_eq!(code, Some(0), "{log}");
}

/// Keys of shard 0, 1, 2 and 3 of a cluster of four (SPEC.md §19.1): the
/// flights in progress when a host dies, and the calls made after.
const FLIGHTS: [&str; 4] = ["flight-1", "flight-6", "flight-0", "flight-2"];
const AFTER: [&str; 4] = ["after-1", "after-7", "after-0", "after-3"];

/// §19.3, §19.4 (issue 47 item 6): four hosts, four shards. A process
/// opened on each host at once makes it a candidate for every shard's term,
/// and the spread puts the terms on several hosts. A flight of every
/// shard's key is in progress, led and joined on hosts other than the one
/// that coordinates shard 0, when that host dies (`kill -9` of every
/// process on it). Calls of the shards it did not coordinate, made after
/// the death, lead and land while its dead terms still hold their leases
/// (a TTL of 15 s): they wait for no failover. Its shards fail over as a
/// cluster of one shard does: their next terms take the leaders'
/// reasserts and the joiners' rejoins, and every joiner receives its
/// leader's value; nothing runs twice.
#[test]
fn s19_a_hosts_death_stalls_only_the_keys_of_its_shards() {
    // etcdctl reads the dead term's key, as an operator would.
    if !etcd::ctl_available() {
        return;
    }
    let Some(mut world) = World::hosts("shards", 4) else {
        return;
    };
    let (shards, ttl, grace) = (
        ("SF_SHARDS", "4"),
        ("SF_TTL_S", "15"),
        ("SF_GRACE_MS", "10000"),
    );
    let idles: Vec<usize> = (0..4)
        .map(|host| world.spawn(Some(host), "idle", &[shards, ttl, grace]))
        .collect();
    for idle in idles {
        world.line(idle, "READY");
    }
    // Which host coordinates each shard, once every shard has a term.
    let deadline = Instant::now() + PATIENCE;
    let holders: Vec<usize> = loop {
        let holders: Option<Vec<usize>> = world
            .shard_statuses(4)
            .iter()
            .map(|status| {
                let address = status.as_ref().ok()?.address.clone()?;
                (0..4).find(|&host| {
                    let ip = world.hosts.as_ref().unwrap().address(host).to_string();
                    address.starts_with(&format!("{ip}:"))
                })
            })
            .collect();
        if let Some(holders) = holders {
            break holders;
        }
        assert!(Instant::now() < deadline, "not every shard has a term");
        std::thread::sleep(Duration::from_millis(50));
    };
    let dying = holders[0];
    let untouched: Vec<usize> = (0..4).filter(|&shard| holders[shard] != dying).collect();
    assert!(
        !untouched.is_empty(),
        "the spread put the four shards' terms on one host: {holders:?}"
    );
    let others: Vec<usize> = (0..4).filter(|&host| host != dying).collect();
    let mut leaders = Vec::new();
    let mut joiners = Vec::new();
    for (shard, key) in FLIGHTS.iter().enumerate() {
        let (leader_host, joiner_host) = (others[shard % 3], others[(shard + 1) % 3]);
        let leader = world.spawn(
            Some(leader_host),
            "call",
            &[shards, ttl, grace, ("SF_KEY", key)],
        );
        world.line(leader, "LEADING");
        leaders.push(leader);
        joiners.push(world.spawn(
            Some(joiner_host),
            "call",
            &[shards, ttl, grace, ("SF_KEY", key)],
        ));
        world.wait_for_joiners_of_shard(4, shard, key, 1);
    }
    world.hosts.as_ref().unwrap().kill_all(dying);
    // Calls of the untouched shards, made after the death, are answered
    // while the dead host's terms still hold their leases.
    std::fs::write(world.runs().join("now"), b"").unwrap();
    let after: Vec<(usize, usize)> = untouched
        .iter()
        .enumerate()
        .map(|(index, &shard)| {
            let child = world.spawn(
                Some(others[index % 3]),
                "call",
                &[
                    shards,
                    ttl,
                    grace,
                    ("SF_KEY", AFTER[shard]),
                    ("SF_RELEASE", "now"),
                ],
            );
            (child, shard)
        })
        .collect();
    for &(child, shard) in &after {
        let result = world.result(child);
        assert!(result.starts_with("led "), "{}: {result}", AFTER[shard]);
    }
    let held = world.etcd.etcdctl(
        None,
        &[
            "get",
            &format!("single-flight/{}/shard-0/coordinator", world.cluster),
        ],
    );
    assert!(
        held.contains("coordinator"),
        "the untouched shards' calls were answered while shard 0's dead term held its lease"
    );
    // The dead host's shards fail over: their next terms have the flights
    // back, with their joiners.
    for shard in (0..4).filter(|&shard| holders[shard] == dying) {
        world.wait_for_joiners_of_shard(4, shard, FLIGHTS[shard], 1);
    }
    world.release();
    for ((leader, joiner), key) in leaders.into_iter().zip(joiners).zip(FLIGHTS) {
        let led = world.result(leader);
        assert!(led.starts_with("led "), "{key}: {led}");
        let joined = world.result(joiner);
        assert!(joined.starts_with("joined "), "{key}: {joined}");
        assert_eq!(token(&joined), token(&led), "{key}");
    }
    assert_eq!(
        times_ran(&world.runs()),
        4 + after.len(),
        "nothing ran twice"
    );
}
