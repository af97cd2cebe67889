//! The orchestrator of one run of the local form: sets up a temporary
//! root, keeps `workers` worker processes alive (respawning the ones the
//! nemesis kills; `scene` has what both forms share), runs the two nemesis
//! lanes, stops everything, takes stock of what is left, and hands the logs
//! to the checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use single_flight::SingleFlight;

use crate::check::verdict;
use crate::common::{
    CALM_AFTER_FAULTS, PROBE_DEADLINE, Paths, RunConfig, Shared, final_probe, leftover_files,
    own_descriptors, poll_status, prepare, processes_alive, stop_workers, supervise, tail_logs,
};
use crate::records::{Record, now_us};
use crate::schedule::{Hostile, Schedule};
use crate::{hostile, nemesis};

pub fn main(config: RunConfig) -> i32 {
    #[cfg(feature = "cluster")]
    if config.cluster {
        return crate::cluster::main(config);
    }
    let schedule = Schedule::new(config.seed);
    println!(
        "chaos: seed {} (replay with --seed {}), schedule {}",
        config.seed,
        config.seed,
        schedule.fingerprint()
    );
    if let Some(limit) = config.nofile {
        let current = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let wanted = rustix::process::Rlimit {
            current: Some(limit),
            maximum: current.maximum,
        };
        if let Err(error) = rustix::process::setrlimit(rustix::process::Resource::Nofile, wanted) {
            eprintln!("chaos: cannot set the descriptor limit to {limit}: {error}");
            return 2;
        }
    }
    let root =
        std::env::temp_dir().join(format!("sf-chaos-{}-{}", config.seed, std::process::id()));
    let paths = Paths::new(&root);
    if let Err(error) = prepare(&paths) {
        eprintln!("chaos: cannot prepare {}: {error}", root.display());
        return 2;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let passed = runtime.block_on(orchestrate(config.clone(), paths.clone(), schedule));
    drop(runtime);
    verdict(&config, &paths, passed, started)
}

/// Runs the whole scene; `false` when the harness itself could not do its
/// job (the checker's verdict comes after).
async fn orchestrate(config: RunConfig, paths: Paths, schedule: Schedule) -> bool {
    let shared = Shared::new(&config, &paths, None);
    shared.log(Record::Params {
        seed: config.seed,
        seconds: config.seconds,
        workers: config.workers,
        keys: config.keys,
        concurrency: config.concurrency,
        grace_ms: config.grace_ms,
        deadline_ms: config.deadline_ms,
        schedule: schedule.fingerprint(),
        min_faults: config.min_faults,
    });
    let fds_before = own_descriptors();

    let watching = Arc::new(AtomicBool::new(true));
    let tail = tokio::spawn(tail_logs(shared.clone(), watching.clone()));
    let poller = tokio::spawn(poll_status(shared.clone(), watching.clone()));
    let supervisors: Vec<_> = (0..config.workers)
        .map(|slot| tokio::spawn(supervise(shared.clone(), slot)))
        .collect();

    // The scene starts once a coordinator serves and the workers call.
    let started = Instant::now();
    while shared.seen().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            eprintln!("chaos: no coordinator answered within 30 s of starting the workers");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "chaos: {} workers × {} keys × {} loops, grace window {} ms, deadline {} ms, {} s of faults",
        config.workers,
        config.keys,
        config.concurrency,
        config.grace_ms,
        config.deadline_ms,
        config.seconds
    );
    let until = Instant::now() + Duration::from_secs(config.seconds);
    let lane_one = tokio::spawn(nemesis::run(shared.clone(), schedule.clone(), until));
    let target = Arc::new(hostile::Target::Socket);
    let lane_two = tokio::spawn(hostile::run(
        shared.clone(),
        target.clone(),
        schedule.hostiles(),
        until,
    ));
    let _ = lane_one.await;
    let hostile_tasks = lane_two.await.unwrap_or_default();
    for task in hostile_tasks {
        let _ = task.await;
    }
    // The calm phase: every hostile client once, with no other fault.
    tokio::time::sleep(CALM_AFTER_FAULTS).await;
    hostile::calm(
        shared.clone(),
        target,
        &Hostile::ALL,
        crate::rng::Rng::fork(config.seed, 3).next_u64(),
        1,
        hostile::CALM_RETRY,
        false,
    )
    .await;

    let hung = stop_workers(&shared, supervisors).await;
    watching.store(false, Ordering::SeqCst);
    let _ = poller.await;
    let _ = tail.await;

    // A last process elects a new term: it must lead, with a larger epoch,
    // and the election must clear every temporary file left behind.
    let probe = final_probe(
        SingleFlight::builder(&shared.paths.flights)
            .grace_window(Duration::from_millis(shared.config.grace_ms)),
        PROBE_DEADLINE,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (files, temp_files) = leftover_files(&paths.flights);
    let processes_alive = processes_alive(&shared);
    let epoch_file = std::fs::read_to_string(paths.flights.join("flight.epoch"))
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|error| format!("unreadable: {error}"));
    let fds_after = own_descriptors();
    shared.log(Record::Final {
        t: now_us(),
        files,
        temp_files,
        processes_alive,
        hung_workers: hung,
        fds_before,
        fds_after,
        probe: probe.0,
        probe_epoch: probe.1,
        epoch_file,
        coordinator_fds_max: *shared.coordinator_fds_max.lock().expect("fds lock"),
    });
    true
}
