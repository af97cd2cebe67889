//! The world of the cluster benchmarks: hosts (network namespaces joined
//! by a bridge, tests/support/hosts.rs; two for the items of
//! `crate::cluster`, four for the shards' of `crate::shards`) where the
//! benchmark's processes run, one more namespace for the services they use
//! (etcd, and the Redis baseline's server), the cluster's certificates,
//! and how a worker process learns which cluster it belongs to.
//!
//! Everything is the tests' own harness (tests/support), so that the
//! benchmarks measure the setup the multi-host tests check. The lab is torn
//! down on drop, which a panic's unwinding runs too: every process in the
//! namespaces is killed, the namespaces and the bridge are deleted, and
//! etcd's data directory is removed.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use single_flight::{Cluster, SingleFlight, Status};

use crate::etcd::{self, Etcd};
use crate::hosts::Hosts;
use crate::process::{self, Scratch, WORKER_PATIENCE, Worker};
use crate::redis;

/// The names of the lab's namespaces and links start with this, apart from
/// the tests' (`sf…`) that other programs may be running at the same time.
const NAME_PREFIX: &str = "sfbn";

/// The second octet of the lab's /24 (`10.200+N.*`), apart from the tests'
/// `10.100–199.*`; N spreads runs of different process ids.
const NETWORK_OCTET_BASE: u8 = 200;

/// Where redis-server listens in the services' namespace (its own, so any
/// port is free there): the usual one.
const REDIS_PORT: u16 = 6379;

/// The environment of a worker process: where the cluster is.
const ENV_ETCD: &str = "SF_BENCH_ETCD";
const ENV_CLUSTER: &str = "SF_BENCH_CLUSTER";
const ENV_LISTEN: &str = "SF_BENCH_LISTEN";
const ENV_CERTS: &str = "SF_BENCH_CERTS";
const ENV_TTL_MS: &str = "SF_BENCH_TTL_MS";
const ENV_GRACE_MS: &str = "SF_BENCH_GRACE_MS";
/// The cluster's number of shards (SPEC.md §19.1).
const ENV_SHARDS: &str = "SF_BENCH_SHARDS";
/// Set when the worker reaches the cluster through its host's coordinator
/// (SPEC.md §18): the flight directory its host directory is made in, one
/// per host of the lab.
const ENV_HOST_DIR: &str = "SF_BENCH_HOST_DIR";

/// How often the orchestrator asks the coordinator whether a flight has
/// its joiners: each ask is a TLS connection, so not every millisecond.
const STATUS_POLL: Duration = Duration::from_millis(20);

/// One cluster of a benchmark: its name (each run of a benchmark has its
/// own, so that no run meets a coordinator key that an earlier run's
/// killed processes left in etcd until their lease ends), its lease TTL
/// (`None`: the library's default), its grace window, whether its
/// processes reach it through their host's coordinator (SPEC.md §18) or
/// each on its own, and its number of shards (§19).
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster: String,
    pub ttl: Option<Duration>,
    pub grace: Duration,
    pub tier: bool,
    pub shards: u32,
}

impl Settings {
    /// A cluster of this run named `name-PID`, with the library's default
    /// TTL and grace window, every process its own client of it.
    pub fn new(name: &str) -> Settings {
        Settings {
            cluster: format!("{name}-{}", std::process::id()),
            ttl: None,
            grace: single_flight::DEFAULT_CLUSTER_GRACE_WINDOW,
            tier: false,
            shards: 1,
        }
    }

    /// The same, its processes reaching it through their host's
    /// coordinator.
    pub fn tiered(name: &str) -> Settings {
        Settings {
            tier: true,
            ..Settings::new(name)
        }
    }
}

/// What a worker process finds in its environment.
pub struct Place {
    pub endpoints: Vec<String>,
    pub cluster: String,
    listen: String,
    certs: PathBuf,
    ttl: Option<Duration>,
    grace: Duration,
    host_directory: Option<PathBuf>,
    pub shards: u32,
}

impl Place {
    /// The place this worker was started in (by [`Lab::worker`]).
    pub fn from_env() -> Place {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the orchestrator"))
        };
        let millis = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|ms| Duration::from_millis(ms.parse().expect("milliseconds")))
        };
        Place {
            endpoints: var(ENV_ETCD).split(',').map(str::to_owned).collect(),
            cluster: var(ENV_CLUSTER),
            listen: var(ENV_LISTEN),
            certs: PathBuf::from(var(ENV_CERTS)),
            ttl: millis(ENV_TTL_MS),
            grace: millis(ENV_GRACE_MS).expect("a grace window"),
            host_directory: std::env::var_os(ENV_HOST_DIR).map(PathBuf::from),
            shards: var(ENV_SHARDS).parse().expect("a number of shards"),
        }
    }
}

/// The runtime that opens the cluster, kept for the life of the process
/// and driven by a thread of its own. The library's etcd client runs its
/// connection's tasks on the runtime that called `open` (BENCHMARKS.md,
/// "Cluster mode", what was found): opened on a short-lived runtime, every
/// later request to etcd fails at once (`Service was not ready`), and on a
/// current-thread runtime they advance only while it runs. A program's
/// main runtime lives as long as the program; this one stands for it.
static OPENED_ON: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();

/// Opens the cluster this worker was started in, and makes one call, so
/// that it is connected (or coordinates) before anything is timed.
pub fn open_from_env() -> SingleFlight {
    let place = Place::from_env();
    let certs = &place.certs;
    let mut cluster = Cluster::etcd(place.endpoints.iter(), place.cluster.as_str())
        .shards(place.shards)
        .listen(place.listen.parse().expect("a listen address"))
        .tls(
            certs.join("ca.pem"),
            certs.join("server.pem"),
            certs.join("server.key"),
        );
    if let Some(ttl) = place.ttl {
        cluster = cluster.ttl(ttl);
    }
    // Each process its own client of the cluster, as BENCHMARKS.md's
    // cluster figures were measured, unless the run benchmarks the host
    // tier (SPEC.md §18): then through the host's coordinator, met in the
    // host's own directory.
    cluster = match &place.host_directory {
        Some(directory) => cluster.directory(directory),
        None => cluster.direct(),
    };
    OPENED_ON
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .block_on(async {
            let flights = SingleFlight::cluster(cluster)
                .grace_window(place.grace)
                .open()
                .await
                .expect("open the cluster");
            process::warm_up(&flights).await;
            flights
        })
}

/// The namespaces, etcd and the certificates of one benchmark run.
pub struct Lab {
    // Dropped in this order: etcd's member, then every process left in the
    // namespaces and the namespaces themselves, then the certificates.
    etcd: Etcd,
    hosts: Hosts,
    /// How many hosts run the benchmark's processes: namespaces 0 to
    /// `count` − 1; namespace `count` is the services' (etcd,
    /// redis-server), so that killing a host's processes leaves them alone,
    /// and every caller reaches them across the bridge, as a cluster
    /// reaches its etcd.
    count: usize,
    certs: Scratch,
    /// The hosts' flight directories, for the host tier: the namespaces
    /// share one file system, and each host meets its own processes only.
    directories: Scratch,
}

impl Lab {
    /// Opens the report's section `title` for `items` and sets their lab of
    /// `count` hosts up; `None` when there is nothing to run, or when the
    /// lab cannot be here, which the section then says.
    pub fn section(title: &str, items: &[&str], count: usize) -> Option<Lab> {
        if items.is_empty() {
            return None;
        }
        println!();
        println!("## {title}");
        println!();
        Lab::start(count)
            .inspect_err(|reason| println!("- {}: skipped: {reason}", items.join(", ")))
            .ok()
    }

    /// Sets a lab of `count` hosts up, or says why it cannot be here.
    fn start(count: usize) -> Result<Lab, String> {
        if !Hosts::available() {
            return Err(format!(
                "needs root and iproute2's ip for the network namespaces of {count} hosts"
            ));
        }
        if !etcd::available() {
            return Err("etcd is not installed (Debian: apt-get install etcd-server)".into());
        }
        let octet = NETWORK_OCTET_BASE + (std::process::id() % 50) as u8;
        let hosts = Hosts::named(NAME_PREFIX, octet, count + 1);
        let certs = Scratch::new("cluster-certs");
        let names: Vec<String> = (0..count)
            .map(|host| format!("IP:{}", hosts.address(host)))
            .collect();
        crate::certs::make(certs.path(), &names.join(","))?;
        let etcd = Etcd::start(&[(hosts.address(count), hosts.prefix(count))]);
        Ok(Lab {
            etcd,
            hosts,
            count,
            certs,
            directories: Scratch::new("hosts"),
        })
    }

    /// etcd's version, for the report.
    pub fn etcd_version() -> String {
        // `etcd Version: 3.4.23`, then the Git and Go versions.
        crate::version_of("etcd", |word| {
            word.starts_with(|c: char| c.is_ascii_digit())
                .then_some(word)
        })
    }

    /// How many hosts run the benchmark's processes.
    pub fn hosts(&self) -> usize {
        self.count
    }

    /// The namespace of the services (etcd, redis-server): the one after
    /// the hosts'.
    fn services(&self) -> usize {
        self.count
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.etcd.endpoints()
    }

    /// etcd's processes, whose CPU time counts where a system uses it.
    pub fn etcd_pids(&self) -> Vec<u32> {
        self.etcd.pids()
    }

    pub fn address(&self, host: usize) -> IpAddr {
        self.hosts.address(host)
    }

    pub fn certs(&self) -> PathBuf {
        self.certs.path().to_owned()
    }

    /// A command that runs this benchmark's binary on `host`.
    pub fn command(&self, host: usize) -> Command {
        self.hosts.command(host, process::exe())
    }

    /// Starts `bench worker ARGS…` on `host`, a member of `settings`'s
    /// cluster (it listens on the host's address when it coordinates).
    pub fn worker(&self, host: usize, settings: &Settings, args: &[&str]) -> Worker {
        let mut command = self.command(host);
        command
            .env(ENV_ETCD, self.endpoints().join(","))
            .env(ENV_CLUSTER, &settings.cluster)
            .env(ENV_LISTEN, format!("{}:0", self.address(host)))
            .env(ENV_CERTS, self.certs())
            .env(ENV_GRACE_MS, settings.grace.as_millis().to_string())
            .env(ENV_SHARDS, settings.shards.to_string());
        if let Some(ttl) = settings.ttl {
            command.env(ENV_TTL_MS, ttl.as_millis().to_string());
        }
        if settings.tier {
            // Each cluster makes its own host directory in it (`cluster-NAME`,
            // SPEC.md §18.6).
            command.env(ENV_HOST_DIR, self.directories.join(&format!("h{host}")));
        }
        Worker::start(command, args)
    }

    /// Kills every process on `host` (`kill -9`), as the host's death.
    pub fn kill_host(&self, host: usize) {
        self.hosts.kill_all(host);
    }

    /// A redis-server in the services' namespace, or why there is none.
    pub fn redis(&self) -> Result<redis::Server, String> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if !installed {
            return Err(
                "redis-server is not installed; `bash bench/run` installs it with apt-get as root"
                    .into(),
            );
        }
        redis::Server::start_with(
            self.hosts.command(self.services(), "redis-server"),
            self.address(self.services()),
            REDIS_PORT,
        )
    }

    /// The orchestrator's view of a cluster of one shard: a client
    /// certificate only, from outside the hosts (through the bridge).
    fn observer(&self, cluster: &str) -> Cluster {
        let certs = self.certs();
        Cluster::etcd(self.endpoints(), cluster)
            .tls(
                certs.join("ca.pem"),
                certs.join("client.pem"),
                certs.join("client.key"),
            )
            .direct()
    }

    /// The status of `cluster`'s coordinator, waiting for one to answer.
    pub fn status(&self, cluster: &str) -> Status {
        self.status_when(cluster, |_| true)
    }

    /// The first status of `cluster`'s coordinator for which `ready` holds.
    pub fn status_when(&self, cluster: &str, ready: impl Fn(&Status) -> bool) -> Status {
        let observer = self.observer(cluster);
        let runtime = process::runtime();
        let start = Instant::now();
        loop {
            let status =
                runtime.block_on(single_flight::SingleFlight::cluster(observer.clone()).status());
            if let Ok(status) = &status
                && ready(status)
            {
                return status.clone();
            }
            assert!(
                start.elapsed() < WORKER_PATIENCE,
                "the coordinator of {cluster} did not report what was awaited: {status:?}"
            );
            std::thread::sleep(STATUS_POLL);
        }
    }

    /// The status of each shard's coordinator of `settings`'s cluster, in
    /// shard order (SPEC.md §19.6), once every shard has one that answers
    /// and `ready` holds for each.
    pub fn shard_statuses_when(
        &self,
        settings: &Settings,
        ready: impl Fn(usize, &Status) -> bool,
    ) -> Vec<Status> {
        let observer = self.observer(&settings.cluster).shards(settings.shards);
        let runtime = process::runtime();
        let start = Instant::now();
        loop {
            let answers = runtime
                .block_on(single_flight::SingleFlight::cluster(observer.clone()).shard_statuses());
            let statuses: Vec<Status> = answers
                .iter()
                .filter_map(|answer| answer.as_ref().ok().cloned())
                .collect();
            if statuses.len() == answers.len()
                && statuses
                    .iter()
                    .enumerate()
                    .all(|(shard, status)| ready(shard, status))
            {
                return statuses;
            }
            assert!(
                start.elapsed() < WORKER_PATIENCE,
                "the shards' coordinators of {} did not report what was awaited: {answers:?}",
                settings.cluster
            );
            std::thread::sleep(STATUS_POLL);
        }
    }

    /// The host whose address a coordinator advertises.
    pub fn host_of(&self, status: &Status) -> usize {
        let address = status.address.as_deref().unwrap_or_default();
        let ip: IpAddr = address
            .rsplit_once(':')
            .and_then(|(ip, _)| ip.parse().ok())
            .unwrap_or_else(|| panic!("the coordinator advertises {address:?}"));
        (0..self.count)
            .find(|&host| self.address(host) == ip)
            .unwrap_or_else(|| panic!("the coordinator at {address} is on no host of the lab"))
    }
}
