//! Stampedes of `single-flight run` processes in one cluster (SPEC.md §14.3,
//! §14.6): hundreds of processes of one key started at once, with etcd over
//! mutual TLS, run COMMAND once, and every caller prints its bytes and exits
//! with its status: none ends `Unavailable` (125) because etcd answered
//! late, none is interrupted (75) because the term was lost mid-stampede.
//!
//! The one CI runs is [`CI_STAMPEDE`] processes on one host. The heavy ones
//! (a thousand on one host, with and without a `serve`, and three hosts of a
//! third each) are `#[ignore]`d and sized by `SINGLE_FLIGHT_STAMPEDE`;
//! RELIABILITY.md says how to run them and how often they passed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use single_flight::{Cluster, SingleFlight};

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
        certs::member_flags(
            &mut command,
            &self.etcd.endpoints(),
            &self.cluster,
            &listen,
            &certs,
        );
        command
            .current_dir(self.runs())
            .env_remove("SINGLE_FLIGHT_DIR")
            .stdin(Stdio::null())
            .stdout(out("out"))
            .stderr(out("err"));
        command
    }

    /// The joiners of the flight of `key` as the coordinator reports them,
    /// or `None` while there is none (or no coordinator answers).
    fn joiners(&self, runtime: &tokio::runtime::Runtime, key: &str) -> Option<u64> {
        let cluster = Cluster::etcd(self.etcd.endpoints(), &self.cluster).tls(
            self.scratch.join("certs/ca.pem"),
            self.scratch.join("certs/client.pem"),
            self.scratch.join("certs/client.key"),
        );
        let status = runtime
            .block_on(SingleFlight::cluster(cluster).status())
            .ok()?;
        status
            .flights
            .iter()
            .find(|flight| flight.key.as_str() == key)
            .map(|flight| flight.joiners)
    }

    /// Starts `count` runs of one key spread over the hosts (or on
    /// loopback), lets COMMAND end once every other caller joined it, and
    /// checks the outcome: COMMAND ran once, every caller printed `out` and
    /// exited 4. Prints what the stampede cost etcd.
    fn stampede(&self, count: usize) {
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
        let mut joined = None;
        loop {
            joined = self.joiners(&runtime, "k").or(joined);
            if joined >= Some(count as u64 - 1) {
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
            "stampede of {count} on {}: all joined after {gathered:?} ({joined:?} joiners), ended after {:?}; etcd requests {requests:?}, {:.2} per caller; campaigns (lease grants) {}",
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
    }
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
        let cluster = Cluster::etcd(world.etcd.endpoints(), &world.cluster).tls(
            world.scratch.join("certs/ca.pem"),
            world.scratch.join("certs/client.pem"),
            world.scratch.join("certs/client.key"),
        );
        if runtime
            .block_on(SingleFlight::cluster(cluster).status())
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
