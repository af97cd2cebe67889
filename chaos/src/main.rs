//! A seeded chaos harness for single-flight: worker processes calling a
//! fenced resource through `SingleFlight`, a nemesis that kills, stops and
//! starves them, damages the directory and speaks to the coordinator as a
//! hostile client, and a checker that fails the run when a promise of
//! SPEC.md was broken. See RELIABILITY.md for the figures and commands.
//!
//! ```text
//! cargo run --release -p single-flight-chaos -- --seconds 90           # short form
//! cargo run --release -p single-flight-chaos -- --minutes 30           # long form
//! cargo run --release -p single-flight-chaos -- --seed 42 --seconds 90 # replay a seed
//! cargo run --release -p single-flight-chaos -- --schedule 20 --seed 42
//! cargo run --release -p single-flight-chaos -- check <kept run directory>
//! cargo run --release -p single-flight-chaos -- --cluster --seconds 120 # hosts and etcd (root)
//! ```
//!
//! The binary runs itself again as each worker (`chaos worker …`).
//!
//! Layout: `run` orchestrates (workers, status poller, log tail, the end);
//! `schedule` draws the seeded fault sequences; `nemesis` injects process
//! and file system faults; `hostile` speaks the wire protocol badly;
//! `epoch` damages `flight.epoch` in directories of its own; `worker` is a
//! worker process; `fence` is the fenced resource; `records` the logs;
//! `check` the checker. `cluster` is the cluster form (`--cluster`, SPEC.md
//! §14): hosts in network namespaces, a three-member etcd, and its own
//! nemesis lane of partitions, host deaths, etcd failures and pauses past
//! the lease.
#![forbid(unsafe_code)]
// Built without `cluster` (for a machine without etcd), the schedule is the
// same code as with it: it can plan the cluster lane's faults and hostile
// TLS clients, which only the cluster form runs. Gating each of them would
// make the two builds' schedules two codes for one plan.
#![cfg_attr(not(feature = "cluster"), allow(dead_code))]

mod check;
mod check_cluster;
#[cfg(feature = "cluster")]
mod cluster;
mod common;
mod epoch;
mod fence;
mod hostile;
mod nemesis;
mod records;
mod rng;
mod rows;
mod run;
mod schedule;
#[cfg(feature = "cluster")]
mod tls;
mod worker;

// The cluster tests' etcd, hosts and certificates, shared with them rather
// than copied.
#[cfg(feature = "cluster")]
#[path = "../../tests/support/certs.rs"]
mod certs_support;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/etcd.rs"]
mod etcd_support;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/hosts.rs"]
mod hosts_support;
#[cfg(feature = "cluster")]
#[path = "../../tests/support/tools.rs"]
mod tools;

use std::path::PathBuf;

use common::RunConfig;
use worker::WorkerConfig;

/// The cluster form's lease: etcd's minimum (SPEC.md §14.2), so that a
/// dead host's term ends soon and a run fits many failovers.
const CLUSTER_TTL_MS: u64 = 2000;

/// The cluster form's grace window (see `run_config`).
const CLUSTER_GRACE_MS: u64 = 1000;

const USAGE: &str = "usage:
  chaos [--seed N] [--seconds S | --minutes M] [--workers W] [--keys K]
        [--concurrency C] [--grace-ms G] [--deadline-ms D] [--min-faults F]
        [--nofile N] [--keep] [--cluster [--ttl-ms T]]
  chaos --schedule N [--seed N]      print the first N faults of each lane
  chaos check <run directory>        check the logs of a kept run again

  --seed         the schedule's seed (default: drawn from the clock, printed)
  --seconds      how long faults are injected (default 90)
  --minutes      the same in minutes (the long form is --minutes 30)
  --workers      worker processes (default 6)
  --keys         flight keys (default 12)
  --concurrency  calling loops per worker (default 3)
  --grace-ms     every worker's grace window (default 500, the library's)
  --deadline-ms  every call's deadline (default 4000)
  --min-faults   fail if fewer faults were injected (default 2 per second, at most 200)
  --nofile       the soft limit on descriptors for the run and its workers
  --keep         keep the run's directory (logs, fenced resource) after a pass
  --cluster      cluster mode (root, etcd): workers on three hosts, a three-member
                 etcd, the cluster nemesis (grace window default 1000 ms)
  --ttl-ms       the cluster's lease TTL (default 2000, etcd's minimum)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("worker") => match worker_config(&args[1..]) {
            Ok(config) => worker::main(config),
            Err(error) => {
                eprintln!("chaos worker: {error}");
                2
            }
        },
        Some("check") => match args.get(1) {
            Some(root) => check::main(&PathBuf::from(root)),
            None => {
                eprintln!("{USAGE}");
                2
            }
        },
        _ => match run_config(&args) {
            Ok(Some(config)) => run::main(config),
            Ok(None) => 0,
            Err(error) => {
                eprintln!("chaos: {error}\n{USAGE}");
                2
            }
        },
    };
    std::process::exit(code);
}

/// `--name value` pairs, and bare flags.
struct Options {
    pairs: Vec<(String, Option<String>)>,
}

impl Options {
    fn parse(args: &[String], flags: &[&str]) -> Result<Options, String> {
        let mut pairs = Vec::new();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if !arg.starts_with("--") {
                return Err(format!("unexpected argument {arg:?}"));
            }
            if flags.contains(&arg.as_str()) {
                pairs.push((arg.clone(), None));
            } else {
                let value = rest.next().ok_or(format!("{arg} needs a value"))?;
                pairs.push((arg.clone(), Some(value.clone())));
            }
        }
        Ok(Options { pairs })
    }

    fn flag(&self, name: &str) -> bool {
        self.pairs.iter().any(|(n, _)| n == name)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn number(&self, name: &str) -> Result<Option<u64>, String> {
        self.text(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("{name} wants a whole number, not {v:?}"))
            })
            .transpose()
    }

    fn path(&self, name: &str) -> Result<PathBuf, String> {
        self.text(name)
            .map(PathBuf::from)
            .ok_or(format!("{name} is required"))
    }

    fn check_known(&self, known: &[&str]) -> Result<(), String> {
        match self
            .pairs
            .iter()
            .find(|(n, _)| !known.contains(&n.as_str()))
        {
            Some((name, _)) => Err(format!("unknown option {name}")),
            None => Ok(()),
        }
    }
}

fn run_config(args: &[String]) -> Result<Option<RunConfig>, String> {
    let args = match args.first().map(String::as_str) {
        Some("run") => &args[1..],
        _ => args,
    };
    let options = Options::parse(args, &["--keep", "--help", "--cluster"])?;
    options.check_known(&[
        "--seed",
        "--seconds",
        "--minutes",
        "--workers",
        "--keys",
        "--concurrency",
        "--grace-ms",
        "--deadline-ms",
        "--min-faults",
        "--nofile",
        "--keep",
        "--schedule",
        "--help",
        "--cluster",
        "--ttl-ms",
    ])?;
    if options.flag("--help") {
        println!("{USAGE}");
        return Ok(None);
    }
    let seed = match options.number("--seed")? {
        Some(seed) => seed,
        None => rng::Rng::fork(records::now_us(), u64::from(std::process::id())).next_u64(),
    };
    if let Some(count) = options.number("--schedule")? {
        println!(
            "seed {seed}, schedule {}",
            schedule::Schedule::new(seed).fingerprint()
        );
        print!("{}", schedule::Schedule::new(seed).describe(count as usize));
        return Ok(None);
    }
    let seconds = match (options.number("--seconds")?, options.number("--minutes")?) {
        (Some(_), Some(_)) => return Err("give --seconds or --minutes, not both".into()),
        (Some(seconds), None) => seconds,
        (None, Some(minutes)) => minutes * 60,
        (None, None) => 90,
    };
    let cluster = options.flag("--cluster");
    if cluster && !cfg!(feature = "cluster") {
        return Err("--cluster needs the `cluster` feature (a default one)".into());
    }
    // A cluster's failover takes the TTL and the grace window; the
    // library's 2 s cluster window would halve the faults a run can fit.
    // 1 s still covers a survivor's watch, TLS handshake and reassert here.
    let default_grace = if cluster {
        CLUSTER_GRACE_MS
    } else {
        single_flight::DEFAULT_GRACE_WINDOW.as_millis() as u64
    };
    let config = RunConfig {
        seed,
        seconds,
        workers: options.number("--workers")?.unwrap_or(6) as usize,
        keys: options.number("--keys")?.unwrap_or(12).max(1) as usize,
        concurrency: options.number("--concurrency")?.unwrap_or(3).max(1) as usize,
        grace_ms: options.number("--grace-ms")?.unwrap_or(default_grace),
        deadline_ms: options.number("--deadline-ms")?.unwrap_or(4000),
        min_faults: options
            .number("--min-faults")?
            .unwrap_or((seconds * 2).min(200)),
        keep: options.flag("--keep"),
        nofile: options.number("--nofile")?,
        cluster,
        ttl_ms: options.number("--ttl-ms")?.unwrap_or(CLUSTER_TTL_MS),
    };
    if config.workers < 2 {
        return Err("--workers must be at least 2: the nemesis kills leaders and joiners".into());
    }
    Ok(Some(config))
}

fn worker_config(args: &[String]) -> Result<WorkerConfig, String> {
    let options = Options::parse(args, &[])?;
    let number = |name: &str| -> Result<u64, String> {
        options.number(name)?.ok_or(format!("{name} is required"))
    };
    Ok(WorkerConfig {
        dir: options.path("--dir")?,
        logs: options.path("--logs")?,
        fence: options.path("--fence")?,
        control: options.path("--control")?,
        slot: number("--slot")? as usize,
        worker: number("--worker")? as u32,
        seed: number("--seed")?,
        keys: number("--keys")? as usize,
        concurrency: number("--concurrency")? as usize,
        grace_ms: number("--grace-ms")?,
        deadline_ms: number("--deadline-ms")?,
        cluster: match options.text("--etcd") {
            None => None,
            Some(etcd) => Some(worker::ClusterWorker {
                etcd: etcd.split(',').map(str::to_owned).collect(),
                name: options.text("--cluster-name").unwrap_or("chaos").to_owned(),
                listen: options
                    .text("--listen")
                    .ok_or("--listen is required with --etcd")?
                    .parse()
                    .map_err(|_| "--listen wants IP:PORT")?,
                certs: options.path("--certs")?,
                ttl_ms: number("--ttl-ms")?,
            }),
        },
    })
}
