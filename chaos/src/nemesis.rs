//! The first lane of the nemesis: process and file system faults, one at a
//! time, each logged with its target and details (SPEC.md §7, §10, §11).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use single_flight::Status;

use crate::common::{Procs, Shared, fresh_status};
use crate::epoch;
use crate::records::{Record, now_us};
use crate::rng::Rng;
use crate::schedule::{Fault, Planned, Schedule, fault_name};

/// Faults name fake pids above Linux's largest (`pid_max` ≤ 2^22), so
/// that a stale temporary file can never be mistaken for a live process's.
const FAKE_PID_BASE: u64 = 1 << 22;

pub async fn run(shared: Arc<Shared>, schedule: Schedule, until: Instant) {
    let lane_shared = shared.clone();
    lane(
        &shared,
        schedule.faults(),
        until,
        fault_name,
        move |fault, draw, number| {
            let shared = lane_shared.clone();
            async move {
                // After the hostile clients that need a quiet coordinator;
                // none starts while the fault runs.
                let _quiet = if may_reach_the_coordinator(fault) {
                    Some(shared.quiet.write().await)
                } else {
                    None
                };
                inject(&shared, fault, draw, number).await
            }
        },
    )
    .await;
}

/// Faults that may kill, stop or close the coordinator (a leader or a
/// joiner may be its process). The others touch files only: a replaced
/// socket fails new connections for a moment, never an open one.
fn may_reach_the_coordinator(fault: Fault) -> bool {
    !matches!(
        fault,
        Fault::RemoveSocket
            | Fault::RenameSocket
            | Fault::ReplaceSocket
            | Fault::LeftoverTemps
            | Fault::CorruptEpoch
    )
}

/// Runs one lane of faults until `until`: each after its gap, logged as
/// injected (with its target and details) or skipped (with the reason).
pub async fn lane<K, F, Fut>(
    shared: &Shared,
    plans: impl Iterator<Item = Planned<K>>,
    until: Instant,
    name: fn(K) -> String,
    mut inject: F,
) where
    K: Copy,
    F: FnMut(K, u64, u64) -> Fut,
    Fut: std::future::Future<Output = Injected>,
{
    for (number, planned) in plans.enumerate() {
        tokio::time::sleep(Duration::from_millis(planned.gap_ms)).await;
        if Instant::now() >= until {
            break;
        }
        let t = now_us();
        let kind = name(planned.kind);
        match inject(planned.kind, planned.draw, number as u64).await {
            Ok((target, detail)) => shared.log(Record::Fault {
                t,
                kind,
                target,
                detail,
            }),
            Err(why) => shared.log(Record::Skipped { t, kind, why }),
        }
    }
}

pub type Injected = Result<(Option<u32>, String), String>;

async fn inject(shared: &Arc<Shared>, fault: Fault, draw: u64, number: u64) -> Injected {
    let mut rng = Rng::new(draw);
    let grace = shared.config.grace_ms;
    let flights = shared.paths.flights.clone();
    match fault {
        Fault::KillCoordinator => {
            let status = mid_flight_status(&flights)
                .await
                .ok_or("no coordinator answers")?;
            kill_coordinator(shared, &status)?;
            Ok((
                Some(status.pid),
                format!(
                    "epoch {}, {} flights in progress",
                    status.epoch,
                    status.flights.len()
                ),
            ))
        }
        Fault::KillLeader => {
            let status = fresh_status(&flights)
                .await
                .ok_or("no coordinator answers")?;
            let mut candidates = leaders(shared, &status);
            if candidates.iter().any(|c| c.joiners > 0) {
                candidates.retain(|c| c.joiners > 0);
            }
            let chosen = rng
                .pick(&candidates)
                .ok_or("no leader outside the coordinator")?;
            shared.kill(chosen.pid, None);
            Ok((
                Some(chosen.pid),
                format!(
                    "leader of {} (token {}, {} joiners)",
                    chosen.key, chosen.token, chosen.joiners
                ),
            ))
        }
        Fault::KillJoiner => {
            let status = fresh_status(&flights)
                .await
                .ok_or("no coordinator answers")?;
            let joined: Vec<&str> = status
                .flights
                .iter()
                .filter(|f| f.joiners > 0)
                .map(|f| f.key.as_str())
                .collect();
            let candidates = joiners(shared, &status, &joined);
            let (pid, key) = rng
                .pick(&candidates)
                .ok_or("no joiner outside the coordinator")?;
            shared.kill(*pid, None);
            Ok((Some(*pid), format!("a joiner of {key}")))
        }
        Fault::PauseLeaderShort
        | Fault::PauseLeaderShortFailover
        | Fault::PauseLeaderLong
        | Fault::PauseLeaderLongFailover => {
            let status = fresh_status(&flights)
                .await
                .ok_or("no coordinator answers")?;
            let mut candidates = leaders(shared, &status);
            candidates.retain(|c| !c.wrote);
            let failover = matches!(
                fault,
                Fault::PauseLeaderShortFailover | Fault::PauseLeaderLongFailover
            );
            let chosen = if fault == Fault::PauseLeaderLongFailover {
                // The stale leader must still have its write ahead of it.
                candidates.into_iter().max_by_key(|c| c.remaining_ms)
            } else {
                rng.pick(&candidates).cloned()
            }
            .ok_or("no leader in the middle of its work outside the coordinator")?;
            let pause = match fault {
                Fault::PauseLeaderShort | Fault::PauseLeaderShortFailover => {
                    rng.range(50, grace.saturating_sub(150).max(60))
                }
                Fault::PauseLeaderLong => rng.range(grace + 100, grace + 1500),
                _ => rng.range(grace + 400, grace + 1500),
            };
            shared.stop(chosen.pid);
            let mut detail = format!(
                "leader of {} (token {}, {} joiners, {} ms of work left) stopped for {pause} ms",
                chosen.key, chosen.token, chosen.joiners, chosen.remaining_ms
            );
            let stopped_at = Instant::now();
            if failover {
                tokio::time::sleep(Duration::from_millis(10)).await;
                match fresh_status(&flights).await {
                    Some(status) if status.pid != chosen.pid => {
                        match kill_coordinator(shared, &status) {
                            Ok(()) => detail.push_str(&format!(
                                "; killed the coordinator {} of epoch {}",
                                status.pid, status.epoch
                            )),
                            Err(why) => detail.push_str(&format!("; no failover: {why}")),
                        }
                    }
                    _ => detail.push_str("; no failover: no coordinator answered"),
                }
            }
            let left = Duration::from_millis(pause).saturating_sub(stopped_at.elapsed());
            tokio::time::sleep(left).await;
            shared.cont(chosen.pid);
            Ok((Some(chosen.pid), detail))
        }
        Fault::PauseCoordinator => {
            let status = fresh_status(&flights)
                .await
                .ok_or("no coordinator answers")?;
            if !shared.is_worker(status.pid) {
                return Err(format!("the coordinator {} is not a worker", status.pid));
            }
            // Mostly brief; sometimes past the calls' deadline, so that
            // deadlines are what ends the calls.
            let deadline = shared.config.deadline_ms;
            let pause = if rng.chance(15) {
                rng.range(deadline + 500, deadline + 2000)
            } else {
                rng.range(50, 1000)
            };
            let t = now_us();
            shared.disturb(t, t + pause * 1000 + 500_000);
            shared.stop(status.pid);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            shared.cont(status.pid);
            Ok((
                Some(status.pid),
                format!(
                    "coordinator of epoch {} stopped for {pause} ms",
                    status.epoch
                ),
            ))
        }
        Fault::DropConnection => {
            let candidates: Vec<(u32, u32)> = {
                let view = shared.view.lock().expect("view lock");
                let procs = shared.procs.lock().expect("procs lock");
                let running = running(&procs);
                view.workers
                    .iter()
                    .filter(|(_, calls)| !calls.is_empty())
                    .filter_map(|(worker, _)| running.get(worker).map(|&pid| (pid, *worker)))
                    .collect()
            };
            let &(pid, worker) = rng
                .pick(&candidates)
                .ok_or("no worker with calls in progress")?;
            let coordinator = shared.seen().is_some_and(|seen| seen.pid == pid);
            if coordinator {
                // Its close ends its term (cleanly) within 3 s.
                let t = now_us();
                shared.disturb(t, t + 3_500_000);
            }
            std::fs::write(shared.paths.control.join(format!("reopen-{worker}")), b"")
                .map_err(|e| format!("cannot write the control file: {e}"))?;
            shared.log(Record::ReopenAsked {
                t: now_us(),
                pid,
                worker,
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok((
                Some(pid),
                format!(
                    "close and reopen with calls in progress{}",
                    if coordinator {
                        " (the coordinator)"
                    } else {
                        ""
                    }
                ),
            ))
        }
        Fault::RemoveSocket => {
            let t = now_us();
            shared.disturb(t, t + 500_000);
            match std::fs::remove_file(flights.join("flight.sock")) {
                Ok(()) => Ok((None, "removed flight.sock".into())),
                Err(error) => Err(format!("no flight.sock to remove: {error}")),
            }
        }
        Fault::RenameSocket => {
            let t = now_us();
            shared.disturb(t, t + 750_000);
            let moved = flights.join(format!("moved-{number}.sock"));
            std::fs::rename(flights.join("flight.sock"), &moved)
                .map_err(|e| format!("no flight.sock to rename: {e}"))?;
            // The coordinator binds a new socket within its check interval
            // (SPEC.md §11.1); the moved one is ours to clean up.
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = std::fs::remove_file(&moved);
            Ok((None, "renamed flight.sock away for 250 ms".into()))
        }
        Fault::ReplaceSocket => {
            let t = now_us();
            shared.disturb(t, t + 500_000);
            let fake = flights.join(format!("fake-{number}"));
            std::fs::write(&fake, b"not a socket\n")
                .map_err(|e| format!("cannot write a fake socket file: {e}"))?;
            if let Err(error) = std::fs::rename(&fake, flights.join("flight.sock")) {
                let _ = std::fs::remove_file(&fake);
                return Err(format!("cannot rename over flight.sock: {error}"));
            }
            Ok((None, "renamed a regular file over flight.sock".into()))
        }
        Fault::LeftoverTemps => {
            let fake_pid = FAKE_PID_BASE + number;
            let epoch_temp = flights.join(format!("flight.epoch.tmp.{fake_pid}.0"));
            std::fs::write(&epoch_temp, b"999999\n")
                .map_err(|e| format!("cannot write a stale epoch temp: {e}"))?;
            let socket_temp = flights.join(format!("flight.sock.tmp.{fake_pid}.0"));
            let kind = leave_socket(&socket_temp);
            Ok((
                None,
                format!(
                    "left flight.epoch.tmp.{fake_pid}.0 and flight.sock.tmp.{fake_pid}.0 ({kind})"
                ),
            ))
        }
        Fault::CorruptEpoch => {
            let (variant, verdict, detail) = epoch::check(shared, draw, number).await;
            shared.log(Record::EpochCheck {
                t: now_us(),
                variant: variant.clone(),
                verdict,
                detail: detail.clone(),
            });
            Ok((None, format!("{variant}: {verdict:?}: {detail}")))
        }
    }
}

/// A dead socket file at `path`, as a coordinator that died between bind
/// and rename leaves behind; a regular file if binding is impossible.
fn leave_socket(path: &Path) -> &'static str {
    match std::os::unix::net::UnixListener::bind(path) {
        Ok(listener) => {
            drop(listener);
            "a dead socket"
        }
        Err(_) => {
            let _ = std::fs::write(path, b"");
            "a regular file"
        }
    }
}

fn kill_coordinator(shared: &Shared, status: &Status) -> Result<(), String> {
    if !shared.is_worker(status.pid) {
        return Err(format!("the coordinator {} is not a worker", status.pid));
    }
    if shared.kill(status.pid, Some(status.epoch.get())) {
        Ok(())
    } else {
        Err(format!("cannot kill {}", status.pid))
    }
}

/// A status taken while flights are in progress, if one comes soon.
async fn mid_flight_status(flights: &Path) -> Option<Status> {
    let mut last = None;
    for _ in 0..15 {
        if let Some(status) = fresh_status(flights).await {
            if !status.flights.is_empty() {
                return Some(status);
            }
            last = Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

#[derive(Clone, Debug)]
struct Candidate {
    pid: u32,
    key: String,
    token: u64,
    joiners: u64,
    remaining_ms: i64,
    wrote: bool,
}

/// The workers running and not stopped: worker number → pid.
fn running(procs: &Procs) -> BTreeMap<u32, u32> {
    procs
        .alive
        .iter()
        .filter(|(pid, _)| !procs.stopped.contains(pid))
        .map(|(&pid, &(_, worker))| (worker, pid))
        .collect()
}

/// The workers (not the coordinator, not stopped) leading the flights that
/// `status` lists.
fn leaders(shared: &Shared, status: &Status) -> Vec<Candidate> {
    let view = shared.view.lock().expect("view lock");
    let procs = shared.procs.lock().expect("procs lock");
    let running = running(&procs);
    let now_ms = (now_us() / 1000) as i64;
    status
        .flights
        .iter()
        .filter_map(|flight| {
            let (worker, open) = view.leader_of(flight.token.get())?;
            let pid = *running.get(&worker)?;
            if pid == status.pid {
                return None;
            }
            let lead = open.lead.as_ref()?;
            Some(Candidate {
                pid,
                key: open.key.clone(),
                token: lead.token,
                joiners: flight.joiners,
                remaining_ms: (lead.t / 1000) as i64 + lead.work_ms as i64 - now_ms,
                wrote: lead.wrote,
            })
        })
        .collect()
}

/// Workers (not the coordinator, not stopped) with a call on one of `keys`
/// that does not lead: joiners. Those that lead nothing at all come first.
fn joiners(shared: &Shared, status: &Status, keys: &[&str]) -> Vec<(u32, String)> {
    let view = shared.view.lock().expect("view lock");
    let procs = shared.procs.lock().expect("procs lock");
    let running = running(&procs);
    let mut found: Vec<(bool, u32, String)> = Vec::new();
    for (worker, calls) in &view.workers {
        let Some(&pid) = running.get(worker) else {
            continue;
        };
        if pid == status.pid {
            continue;
        }
        let leads_something = calls.values().any(|c| c.lead.is_some());
        if let Some(open) = calls
            .values()
            .find(|c| c.lead.is_none() && keys.contains(&c.key.as_str()))
        {
            found.push((leads_something, pid, open.key.clone()));
        }
    }
    if found.iter().any(|(leads, ..)| !leads) {
        found.retain(|(leads, ..)| !leads);
    }
    found.into_iter().map(|(_, pid, key)| (pid, key)).collect()
}
