//! Stampedes of `single-flight run` processes in one cluster (SPEC.md §14.3,
//! §14.6): hundreds of processes of one key started at once, with etcd over
//! mutual TLS, run COMMAND once, and every caller prints its bytes and exits
//! with its status: none ends `Unavailable` (125) because etcd answered
//! late, none is interrupted (75) because the term was lost mid-stampede.
//!
//! Every host reaches the cluster through its host coordinator (SPEC.md
//! §18): each simulated host has a flight directory of its own (`--dir`),
//! as the namespaces share one file system, and its processes collapse
//! there into one party at the cluster's coordinator.
//!
//! CI runs [`CI_STAMPEDE`] processes on one host and the namespace
//! stampede of [`NAMESPACE_HOSTS`] hosts × [`PER_HOST`] processes. The heavy
//! ones (a thousand on one host, with and without a `serve`, and three hosts
//! of a third each) are `#[ignore]`d and sized by `SINGLE_FLIGHT_STAMPEDE`;
//! RELIABILITY.md says how to run them and how often they passed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use single_flight::{Cluster, SingleFlight, Status};

use crate::support::etcd::{self, Etcd};
use crate::support::hosts::Hosts;
use crate::support::{BINARY, certs, times_ran};

/// The processes of the stampede in CI's run: enough that every process
/// reaches etcd and the coordinator while the others do (a herd of
/// campaigns, discovery reads and TLS handshakes), few enough to take
/// seconds on two cores.
const CI_STAMPEDE: usize = 200;

/// The processes of the heavy stampedes: the thousand.
const HEAVY_STAMPEDE: usize = 1000;

/// The hosts of the namespace stampede (SPEC.md §18): the four.
const NAMESPACE_HOSTS: usize = 4;

/// The processes on each host of the namespace stampede: the 250,
/// a thousand in all.
const PER_HOST: usize = 250;

/// The most etcd requests per host over a stampede through the host tier
/// (SPEC.md §18): the host coordinator's campaign, its discovery reads and
/// watch, its lease, its renewals while the stampede lasts; the host's other
/// processes ask etcd nothing. The bound.
const ETCD_REQUESTS_PER_HOST: u64 = 40;

/// How long the processes of a stampede may take to join one flight before
/// the test gives up waiting: a bound against a hang, never a timing
/// assertion. A thousand processes on two cores shared with other builds
/// took up to 15 s; three minutes is many times that.
const GATHERING: Duration = Duration::from_secs(180);

/// Every `run` of a stampede ends by then (`--timeout`), so that a process
/// that never gets an outcome fails the test with 124 instead of hanging it.
const RUN_TIMEOUT_SECS: &str = "300";

/// COMMAND: records that it ran, waits until the test lets it go (once
/// every caller has joined), then prints and exits 4, as in the issue.
const SCRIPT: &str =
    "echo ran > ran-$$; while [ ! -e release ]; do sleep 0.05; done; printf out; exit 4";

/// The number of processes: `SINGLE_FLIGHT_STAMPEDE`, or `default`.
fn size(default: usize) -> usize {
    std::env::var("SINGLE_FLIGHT_STAMPEDE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// One stampede's world: the certificates, etcd over mutual TLS, and the
/// hosts (`None`: loopback).
struct World {
    scratch: PathBuf,
    etcd: Etcd,
    /// The hosts the processes are spread over; `None`: loopback.
    hosts: Option<(Hosts, usize)>,
    cluster: String,
}

impl World {
    fn new(name: &str, hosts: usize) -> Option<World> {
        if !etcd::available() || (hosts > 0 && !Hosts::available()) {
            return None;
        }
        let scratch =
            std::env::temp_dir().join(format!("sf-stampede-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        for folder in ["runs", "certs", "out"] {
            std::fs::create_dir_all(scratch.join(folder)).unwrap();
        }
        let (etcd, hosts) = if hosts == 0 {
            certs::make(&scratch.join("certs"), "").expect("the test certificates");
            (Etcd::single_tls(&scratch.join("certs")), None)
        } else {
            // The last namespace is etcd's.
            let namespaces = Hosts::new(hosts + 1);
            let sans: Vec<String> = (0..=hosts)
                .map(|index| format!("IP:{}", namespaces.address(index)))
                .collect();
            certs::make(&scratch.join("certs"), &sans.join(",")).expect("the test certificates");
            let etcd = Etcd::start_with(
                &[(namespaces.address(hosts), namespaces.prefix(hosts))],
                Some(&scratch.join("certs")),
            );
            (etcd, Some((namespaces, hosts)))
        };
        Some(World {
            scratch,
            etcd,
            hosts,
            cluster: name.to_owned(),
        })
    }

    fn runs(&self) -> PathBuf {
        self.scratch.join("runs")
    }

    /// The flight directory of `host` (loopback: 0), which holds its host
    /// directory (SPEC.md §18.6): one per host, as on real machines, and
    /// none of the user's default directory, which other runs may share.
    fn directory(&self, host: usize) -> PathBuf {
        self.scratch.join(format!("host-{host}"))
    }

    /// The cluster as the library reaches it from `host`'s directory.
    fn cluster(&self, host: usize) -> Cluster {
        Cluster::etcd(self.etcd.endpoints(), &self.cluster)
            .tls(
                self.scratch.join("certs/ca.pem"),
                self.scratch.join("certs/client.pem"),
                self.scratch.join("certs/client.key"),
            )
            .directory(self.directory(host))
    }

    /// The number of hosts: the namespaces, or 1 on loopback.
    fn host_count(&self) -> usize {
        self.hosts.as_ref().map_or(1, |(_, count)| *count)
    }

    /// `single-flight SUBCOMMAND` with the cluster's flags, on `host` (or
    /// loopback), its output into `out/NAME.out` and `.err`. With a
    /// `barrier`, a FIFO, it starts only once the barrier opens (see
    /// [`World::stampede`]).
    fn command(
        &self,
        host: Option<usize>,
        subcommand: &str,
        name: &str,
        barrier: Option<&Path>,
    ) -> Command {
        let certs = self.scratch.join("certs");
        let program = if barrier.is_some() { "sh" } else { BINARY };
        let (mut command, listen) = match (host, &self.hosts) {
            (Some(index), Some((hosts, _))) => (
                hosts.command(index, program),
                format!("{}:0", hosts.address(index)),
            ),
            _ => (Command::new(program), "127.0.0.1:0".to_owned()),
        };
        if let Some(fifo) = barrier {
            // Reads a line of the FIFO, which comes when the stampede
            // starts, then becomes the command (same pid).
            command
                .args(["-c", "read _ < \"$0\"; exec \"$@\""])
                .arg(fifo)
                .arg(BINARY);
        }
        let out = |extension: &str| {
            std::fs::File::create(self.scratch.join(format!("out/{name}.{extension}")))
                .map(Stdio::from)
                .expect("an output file")
        };
        command.arg(subcommand);
        // The host's processes share its directory (SPEC.md §18.6), where
        // `member_flags` would make each a host of its own.
        certs::member_flags_in(
            &mut command,
            &self.etcd.endpoints(),
            &self.cluster,
            &listen,
            &certs.join("ca.pem"),
            &certs.join("server"),
            &self.directory(host.unwrap_or(0)),
        );
        command
            .current_dir(self.runs())
            .env_remove("SINGLE_FLIGHT_DIR")
            .stdin(Stdio::null())
            .stdout(out("out"))
            .stderr(out("err"));
        command
    }

    /// The callers of `key` on every host, as each host coordinator
    /// reports its groups (SPEC.md §3.5), and the last answer, which names
    /// the cluster's coordinator and its connections by host.
    fn callers(&self, runtime: &tokio::runtime::Runtime, key: &str) -> (u64, Option<Status>) {
        let mut callers = 0;
        let mut last = None;
        for host in 0..self.host_count() {
            let Ok(status) = runtime.block_on(SingleFlight::cluster(self.cluster(host)).status())
            else {
                continue;
            };
            callers += match &status.relay {
                Some(relay) => relay
                    .groups
                    .iter()
                    .filter(|group| group.key.as_str() == key)
                    .map(|group| group.parties)
                    .sum(),
                // No host coordinator runs there: the cluster's answer.
                None => status
                    .flights
                    .iter()
                    .find(|flight| flight.key.as_str() == key)
                    .map_or(0, |flight| flight.joiners + 1),
            };
            last = Some(status);
        }
        (callers, last)
    }

    /// Starts `count` runs of one key spread over the hosts (or on
    /// loopback), lets COMMAND end once every caller joined its flight, and
    /// checks the outcome: COMMAND ran once, every caller printed `out` and
    /// exited 4. Prints what the stampede cost etcd, and returns it with
    /// the cluster's `status` once every caller had joined.
    fn stampede(&self, count: usize) -> Stampeded {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A stampede starts at once: every process waits at a barrier, a
        // FIFO that this test holds open, reading a line, until the test
        // writes a line for each. Started one after another instead, the
        // first would win its term before the others came, and nothing of
        // the herd would be tested.
        let barrier = self.scratch.join("barrier");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &barrier,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("a FIFO");
        let mut gate = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&barrier)
            .expect("the barrier opens");
        let hosts = self.hosts.as_ref().map_or(0, |(_, count)| *count);
        let mut children: Vec<Child> = (0..count)
            .map(|index| {
                let host = (hosts > 0).then(|| index % hosts);
                self.command(host, "run", &index.to_string(), Some(&barrier))
                    .args(["--timeout", RUN_TIMEOUT_SECS, "--key", "k", "--"])
                    .args(["sh", "-c", SCRIPT])
                    .spawn()
                    .expect("run starts")
            })
            .collect();
        let deadline = Instant::now() + GATHERING;
        while !children.iter().all(|child| at_barrier(child.id())) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let before = self.etcd.requests();
        let started = Instant::now();
        std::io::Write::write_all(&mut gate, &vec![b'\n'; count]).expect("the barrier opens");
        let deadline = Instant::now() + GATHERING;
        let mut joined;
        let mut gathered_status;
        loop {
            (joined, gathered_status) = self.callers(&runtime, "k");
            if joined >= count as u64 {
                break;
            }
            // A caller that already ended will never join: the outcome says
            // why.
            if children
                .iter_mut()
                .any(|child| child.try_wait().ok().flatten().is_some())
            {
                break;
            }
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let gathered = started.elapsed();
        std::fs::write(self.runs().join("release"), b"").unwrap();
        let mut codes: BTreeMap<String, usize> = BTreeMap::new();
        let mut wrong_output = Vec::new();
        let mut complaints: BTreeMap<String, usize> = BTreeMap::new();
        for (index, child) in children.iter_mut().enumerate() {
            let code = child.wait().expect("run ends").code();
            *codes.entry(format!("{code:?}")).or_default() += 1;
            let out = std::fs::read(self.scratch.join(format!("out/{index}.out"))).unwrap();
            if out != b"out" {
                wrong_output.push(index);
            }
            if code != Some(4) {
                let err = std::fs::read_to_string(self.scratch.join(format!("out/{index}.err")))
                    .unwrap_or_default();
                let last = err.lines().last().unwrap_or("").to_owned();
                *complaints.entry(last).or_default() += 1;
            }
        }
        drop(gate);
        let after = self.etcd.requests();
        let requests: BTreeMap<&String, u64> = after
            .iter()
            .map(|(method, n)| (method, n - before.get(method).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let total: u64 = requests.values().sum();
        eprintln!(
            "stampede of {count} on {}: {joined} callers joined after {gathered:?}, ended after {:?}; etcd requests {requests:?}, {:.2} per caller; campaigns (lease grants) {}",
            if hosts == 0 {
                "one host".to_owned()
            } else {
                format!("{hosts} hosts")
            },
            started.elapsed(),
            total as f64 / count as f64,
            requests.get(&"LeaseGrant".to_owned()).copied().unwrap_or(0),
        );
        assert_eq!(
            codes.get("Some(4)").copied(),
            Some(count),
            "every caller exits 4: {codes:?}; last lines of the others: {complaints:#?}"
        );
        assert!(
            wrong_output.is_empty(),
            "every caller prints COMMAND's output; these did not: {wrong_output:?}"
        );
        assert_eq!(times_ran(&self.runs()), 1, "COMMAND ran once");
        assert_eq!(
            joined, count as u64,
            "every caller joined before the release"
        );
        Stampeded {
            etcd_requests: total,
            status: gathered_status,
        }
    }
}

/// What a stampede cost, for the assertions of the one that asks.
struct Stampeded {
    /// The requests etcd started over the stampede.
    etcd_requests: u64,
    /// The cluster's `status`, asked through a host, once every caller had
    /// joined.
    status: Option<Status>,
}

/// Whether the process `pid` waits at the stampede's barrier: blocked in
/// reading a pipe (its wait channel is `pipe_read`, or `anon_pipe_read` on
/// newer kernels).
fn at_barrier(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|wchan| wchan.contains("pipe"))
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// §14.3, §14.6: a stampede of processes on one host runs COMMAND once and
/// every caller gets its output and status: few of them campaign, and a
/// request that etcd answers late is tried again, not turned into an
/// `Unavailable` call. [`CI_STAMPEDE`] processes unless
/// `SINGLE_FLIGHT_STAMPEDE` says otherwise (the thousand: see
/// RELIABILITY.md).
#[test]
fn s14_3_a_stampede_on_one_host_runs_the_command_once() {
    let Some(world) = World::new("stampede-one", 0) else {
        return;
    };
    world.stampede(size(CI_STAMPEDE));
}

/// §14.2, §14.3: the same with a `serve` that coordinates before the
/// stampede: its term survives the handshakes of every process connecting
/// to it (its renewals have their own thread and connection).
#[test]
#[ignore = "heavy: a thousand processes; RELIABILITY.md says how to run it"]
fn s14_2_a_stampede_on_one_host_with_serve_running_runs_the_command_once() {
    let Some(world) = World::new("stampede-serve", 0) else {
        return;
    };
    let mut serve = world
        .command(None, "serve", "serve", None)
        .spawn()
        .expect("serve starts");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Instant::now() + GATHERING;
    loop {
        // Asked directly (SPEC.md §18.6): through a host, the answer has
        // no address of the cluster's coordinator (§13.5).
        if runtime
            .block_on(SingleFlight::cluster(world.cluster(0).direct()).status())
            .is_ok_and(|status| status.address.is_some())
        {
            break;
        }
        assert!(Instant::now() < deadline, "serve never coordinated");
        std::thread::sleep(Duration::from_millis(100));
    }
    world.stampede(size(HEAVY_STAMPEDE));
    let _ = serve.kill();
    let _ = serve.wait();
}

/// §14.3: a stampede from three hosts (network namespaces), a third of the
/// processes on each, runs COMMAND once.
#[test]
#[ignore = "heavy: a thousand processes on three hosts; RELIABILITY.md says how to run it"]
fn s14_3_a_stampede_from_three_hosts_runs_the_command_once() {
    let Some(world) = World::new("stampede-hosts", 3) else {
        return;
    };
    world.stampede(size(HEAVY_STAMPEDE));
}

/// §18, §3.5: four hosts (network namespaces) of 250 processes each, one
/// key at once, over mutual TLS and a real etcd: COMMAND runs once and
/// every caller gets its bytes and status; the cluster's coordinator holds
/// one relay connection per host and no other, and etcd serves at most
/// [`ETCD_REQUESTS_PER_HOST`] requests per host over the stampede.
#[test]
fn s18_a_stampede_from_four_hosts_reaches_the_cluster_through_one_connection_per_host() {
    let Some(world) = World::new("stampede-tier", NAMESPACE_HOSTS) else {
        return;
    };
    let stampeded = world.stampede(NAMESPACE_HOSTS * PER_HOST);
    let status = stampeded
        .status
        .expect("a host coordinator answered status during the stampede");
    assert!(
        status.relay.is_some(),
        "asked through a host coordinator: {status:?}"
    );
    let hosts = status
        .hosts
        .expect("the cluster's coordinator reports its connections by host");
    let relaying = hosts
        .relays
        .iter()
        .filter(|host| host.connections > 0)
        .count();
    assert!(
        relaying <= NAMESPACE_HOSTS && hosts.direct == 0 && hosts.omitted == 0,
        "at most one relay connection per host and no direct one: {hosts:?}"
    );
    assert_eq!(
        status.stats.map(|stats| stats.connections_open),
        Some(relaying as u64),
        "the relay connections are all the cluster's coordinator holds"
    );
    assert!(
        stampeded.etcd_requests <= ETCD_REQUESTS_PER_HOST * NAMESPACE_HOSTS as u64,
        "etcd served {} requests over the stampede, more than {ETCD_REQUESTS_PER_HOST} per host",
        stampeded.etcd_requests
    );
}
