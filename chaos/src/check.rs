//! The checker: reads the nemesis log, every worker's log and the fenced
//! resource's own record of writes, and reports. Any must-be-zero row that
//! is not zero fails the run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use crate::common::{Paths, RunConfig};
use crate::fence::{WriteRow, read_writes};
use crate::records::{Ending, Record, Verdict, read_log};
use crate::rows::{CLOCK_SLACK_US, Row, percentile};
use crate::worker::DELIBERATE_PANIC;
use single_flight::_internal::shell::PANIC_LAND_TIMEOUT;

/// How much later than its deadline a call may end, not counting the time
/// its process was stopped or its thread blocked in a fenced write
/// (`held_within`): scheduling on a loaded 2-core machine.
const LATE_SLACK_US: u64 = 1_000_000;

/// How long before a term change a worker's reopen may have started to end
/// that term: its close waits up to 2 s for lands and 1 s to flush; the
/// rest is slack for a loaded machine.
const CLOSE_SPAN_US: u64 = 4_000_000;

pub struct Report {
    pub text: String,
    pub failed: bool,
}

#[derive(Clone)]
struct CallRecord {
    key: String,
    t: u64,
    deadline_ms: u64,
}

#[derive(Clone)]
struct WorkRecord {
    key: String,
    token: u64,
    t: u64,
    value: String,
}

#[derive(Clone)]
struct DoneRecord {
    t: u64,
    end: Ending,
    led: Option<bool>,
    token: Option<u64>,
    text: Option<String>,
}

type CallId = (u32, u64);

fn epoch_of(token: u64) -> u64 {
    token >> 32
}

/// The execution a value or failure message names: `v:<token>:<worker>:<call>`.
fn value_id(text: &str) -> Option<String> {
    let start = text.find("v:")?;
    let rest = &text[start..];
    let end = rest
        .char_indices()
        .skip(2)
        .find(|(_, c)| !(c.is_ascii_digit() || *c == ':'))
        .map_or(rest.len(), |(i, _)| i);
    // The message may go on with a colon after the call number.
    Some(rest[..end].trim_end_matches(':').to_owned())
}

pub fn check(paths: &Paths) -> Report {
    let mut text = String::new();
    let mut harness = Row::new("harness errors (unreadable log lines, writes of no execution)");

    // ------------------------------------------------------------ load
    let nemesis = match read_log(&paths.nemesis_log()) {
        Ok(log) => log,
        Err(error) => {
            return Report {
                text: format!("chaos check: cannot read the nemesis log: {error}"),
                failed: true,
            };
        }
    };
    for line in &nemesis.malformed {
        harness.hit(|| line.clone());
    }
    let mut worker_records = Vec::new();
    let mut torn = 0;
    let mut worker_logs = 0;
    if let Ok(entries) = std::fs::read_dir(&paths.logs) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("worker-") {
                continue;
            }
            worker_logs += 1;
            match read_log(&entry.path()) {
                Ok(log) => {
                    torn += log.torn;
                    for line in &log.malformed {
                        harness.hit(|| line.clone());
                    }
                    worker_records.extend(log.records);
                }
                Err(error) => harness.hit(|| format!("{name}: {error}")),
            }
        }
    }
    let writes: Vec<WriteRow> = match read_writes(&paths.fence) {
        Ok(writes) => writes,
        Err(error) => {
            harness.hit(|| format!("cannot read the fenced resource: {error}"));
            Vec::new()
        }
    };

    // ------------------------------------------------------------ index
    let mut params = None;
    let mut calls: BTreeMap<CallId, CallRecord> = BTreeMap::new();
    let mut works: BTreeMap<CallId, Vec<WorkRecord>> = BTreeMap::new();
    // Per worker, when its one thread was blocked in a fenced write.
    let mut blocked: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut works_by_token: BTreeMap<u64, Vec<CallId>> = BTreeMap::new();
    let mut dones: BTreeMap<CallId, Vec<DoneRecord>> = BTreeMap::new();
    // When each worker began its last close, at its stop (its `Exit`).
    let mut exits: BTreeMap<u32, u64> = BTreeMap::new();
    let mut reopens: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut leads: Vec<(u64, u64, String)> = Vec::new(); // (t, token, who)
    for record in &worker_records {
        match record.clone() {
            Record::Call {
                worker,
                call,
                key,
                t,
                deadline_ms,
            } => {
                calls.insert(
                    (worker, call),
                    CallRecord {
                        key,
                        t,
                        deadline_ms,
                    },
                );
            }
            Record::Work {
                worker,
                call,
                key,
                token,
                t,
                value,
                ..
            } => {
                works.entry((worker, call)).or_default().push(WorkRecord {
                    key,
                    token,
                    t,
                    value,
                });
                works_by_token
                    .entry(token)
                    .or_default()
                    .push((worker, call));
                leads.push((t, token, format!("worker {worker} call {call}")));
            }
            Record::Done {
                worker,
                call,
                t,
                end,
                led,
                token,
                text,
                ..
            } => dones.entry((worker, call)).or_default().push(DoneRecord {
                t,
                end,
                led,
                token,
                text,
            }),
            Record::Write {
                worker,
                began,
                ended,
                ..
            } => blocked.entry(worker).or_default().push((began, ended)),
            Record::Reopen { worker, t } => reopens.entry(worker).or_default().push(t),
            Record::Exit { worker, t } => {
                exits.insert(worker, t);
            }
            _ => {}
        }
    }
    // The orchestrator names processes by pid, which come back over a long
    // run: a pid at a time names the worker last spawned with it.
    let mut spawns: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
    for record in &nemesis.records {
        if let Record::Spawn { pid, worker, t, .. } = record {
            spawns.entry(*pid).or_default().push((*t, *worker));
        }
    }
    let worker_at = |pid: u32, t: u64| -> u32 {
        spawns.get(&pid).map_or(0, |history| {
            history
                .iter()
                .rev()
                .find(|&&(spawned, _)| spawned <= t)
                .or(history.first())
                .map_or(0, |&(_, worker)| worker)
        })
    };
    let mut kills: Vec<(u64, u32, Option<u32>)> = Vec::new();
    let mut stops: BTreeMap<u32, Vec<(u64, bool)>> = BTreeMap::new(); // (t, stopped?)
    let mut deaths: BTreeMap<u32, u64> = BTreeMap::new();
    let mut terms: Vec<(u64, u32, u32)> = Vec::new();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut coordinator_pauses: Vec<u64> = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut hostile: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let mut crashes = Row::new("worker processes that died of something else than the nemesis");
    let mut hostile_row = Row::new("hostile clients not handled as SPEC.md says");
    let mut epoch_row =
        Row::new("damaged epoch files not refused with an error naming them, or changed");
    let mut epoch_checks = 0;
    let mut raw_leads: Vec<(u64, u64, String)> = Vec::new();
    let mut latencies: BTreeMap<String, u64> = BTreeMap::new();
    let mut final_record = None;
    let mut spawned = 0;
    for record in &nemesis.records {
        match record.clone() {
            Record::Params { .. } => params = Some(record.clone()),
            Record::Spawn { .. } => spawned += 1,
            Record::Kill { t, pid, epoch } => kills.push((t, worker_at(pid, t), epoch)),
            Record::Stop { t, pid } => stops.entry(worker_at(pid, t)).or_default().push((t, true)),
            Record::Cont { t, pid } => stops.entry(worker_at(pid, t)).or_default().push((t, false)),
            Record::Exited {
                worker,
                t,
                status,
                expected,
                slot,
                ..
            } => {
                deaths.insert(worker, t);
                if !expected {
                    crashes.hit(|| format!("worker {worker} (slot {slot}) exited with {status}"));
                }
            }
            Record::Term { t, epoch, pid } => terms.push((t, epoch, worker_at(pid, t))),
            Record::Fault { kind, t, .. } => {
                if kind == "pause_coordinator" {
                    coordinator_pauses.push(t);
                }
                *faults.entry(kind).or_default() += 1;
            }
            Record::Skipped { kind, .. } => *skipped.entry(kind).or_default() += 1,
            Record::Hostile {
                kind,
                verdict,
                detail,
                ..
            } => {
                let counts = hostile.entry(kind.clone()).or_default();
                match verdict {
                    Verdict::AsSpecified => counts[0] += 1,
                    Verdict::Inconclusive => counts[1] += 1,
                    Verdict::Violation => {
                        counts[2] += 1;
                        hostile_row.hit(|| format!("{kind}: {detail}"));
                    }
                }
            }
            Record::EpochCheck {
                variant,
                verdict,
                detail,
                ..
            } => {
                epoch_checks += 1;
                if verdict != Verdict::AsSpecified {
                    epoch_row.hit(|| format!("{variant}: {detail}"));
                }
            }
            Record::RawLead { t, key, token } => {
                raw_leads.push((t, token, format!("a hostile client on {key}")));
                leads.push((t, token, format!("a hostile client on {key}")));
            }
            Record::Latency {
                what,
                ms,
                disturbed,
                ..
            } => {
                let what = if disturbed {
                    format!("{what} (coordinator disturbed)")
                } else {
                    what
                };
                let max = latencies.entry(what).or_default();
                *max = (*max).max(ms);
            }
            Record::Final { .. } => final_record = Some(record.clone()),
            _ => {}
        }
    }
    let Some(Record::Params {
        seed,
        seconds,
        workers,
        keys,
        concurrency,
        grace_ms,
        deadline_ms,
        schedule,
        min_faults,
    }) = params
    else {
        return Report {
            text: "chaos check: the nemesis log has no parameters".into(),
            failed: true,
        };
    };
    let grace_us = grace_ms * 1000;
    kills.sort();
    terms.sort();
    leads.sort();
    // The cluster form (SPEC.md §14) has no flight directory and no
    // `status` poller: a few lines of the report are the local form's.
    let cluster_form = nemesis
        .records
        .iter()
        .any(|r| matches!(r, Record::ClusterParams { .. }));

    // When a process was stopped: (from, to), to the process's death for a
    // stop it never came back from.
    let stopped_spans = |worker: u32| -> Vec<(u64, u64)> {
        let mut spans = Vec::new();
        let mut since: Option<u64> = None;
        for &(t, stopped) in stops.get(&worker).into_iter().flatten() {
            match (stopped, since) {
                (true, None) => since = Some(t),
                (false, Some(start)) => {
                    spans.push((start, t));
                    since = None;
                }
                _ => {}
            }
        }
        if let Some(start) = since {
            spans.push((start, deaths.get(&worker).copied().unwrap_or(u64::MAX)));
        }
        spans
    };
    // Time a process spent stopped within [from, to].
    let stopped_within =
        |worker: u32, from: u64, to: u64| -> u64 { covered(stopped_spans(worker), from, to) };
    // Time within [from, to] in which a process could not answer a call for
    // a reason of the harness's: stopped by the nemesis, or its one thread
    // blocked in a fenced write (`fence::BUSY_TIMEOUT`).
    let held_within = |worker: u32, from: u64, to: u64| -> u64 {
        let mut spans = stopped_spans(worker);
        spans.extend(blocked.get(&worker).into_iter().flatten().copied());
        covered(spans, from, to)
    };
    let reopened_within = |worker: u32, from: u64, to: u64| -> bool {
        reopens
            .get(&worker)
            .is_some_and(|ts| ts.iter().any(|&t| from <= t && t <= to))
    };

    // ------------------------------------------------------------ fence
    let mut stale = Row::new("stale writes accepted by the fenced resource");
    let mut overlapping =
        Row::new("executions of one key that overlapped in time and were both accepted");
    let mut excused_failover = 0;
    let mut excused_drop = 0;
    let mut accepted = 0;
    let mut refused = 0;
    let mut refused_after_pause = 0;
    let mut by_key: BTreeMap<&str, Vec<&WriteRow>> = BTreeMap::new();
    for write in &writes {
        by_key.entry(write.key.as_str()).or_default().push(write);
        let Some(work) = works
            .get(&(write.worker, write.call))
            .and_then(|w| w.first())
        else {
            harness.hit(|| {
                format!(
                    "the fence recorded a write of token {} by worker {} call {} that logged no work",
                    write.token, write.worker, write.call
                )
            });
            continue;
        };
        if write.accepted {
            accepted += 1;
        } else {
            refused += 1;
            // Stopped at any time during the call: between its lead and its
            // work's start counts too.
            let since = calls
                .get(&(write.worker, write.call))
                .map_or(work.t, |call| call.t);
            if stopped_within(write.worker, since, write.t) > 0 {
                refused_after_pause += 1;
            }
        }
    }
    for (key, attempts) in &by_key {
        let accepted_writes: Vec<&&WriteRow> = attempts.iter().filter(|w| w.accepted).collect();
        let mut highest: Option<u64> = None;
        for write in &accepted_writes {
            if let Some(h) = highest
                && write.token <= h
            {
                stale.hit(|| {
                    format!(
                        "{key}: token {} accepted after token {h} (write #{})",
                        write.token, write.sequence
                    )
                });
            }
            highest = Some(highest.map_or(write.token, |h| h.max(write.token)));
        }
        for (j, second) in accepted_writes.iter().enumerate() {
            let Some(second_work) = works
                .get(&(second.worker, second.call))
                .and_then(|w| w.first())
            else {
                continue;
            };
            for first in accepted_writes[..j].iter().rev() {
                if first.t <= second_work.t {
                    break;
                }
                let Some(first_work) = works
                    .get(&(first.worker, first.call))
                    .and_then(|w| w.first())
                else {
                    continue;
                };
                if epoch_of(first.token) < epoch_of(second.token) {
                    // SPEC.md §10.3 item 5: a leader that missed the new
                    // term's grace window lost its flight; its token is below
                    // the new term's, and it wrote before the newer flight.
                    excused_failover += 1;
                } else if reopened_within(first.worker, first_work.t, second_work.t) {
                    // §8.7: its connection dropped, which interrupted its
                    // flight; its work went on.
                    excused_drop += 1;
                } else {
                    overlapping.hit(|| {
                        format!(
                            "{key}: token {} (worker {} call {}, work {}..{} µs) and token {} (worker {} call {}, work from {} µs), same term",
                            first.token,
                            first.worker,
                            first.call,
                            first_work.t,
                            first.t,
                            second.token,
                            second.worker,
                            second.call,
                            second_work.t
                        )
                    });
                }
            }
        }
    }

    // ------------------------------------------------------------ grace
    let mut grace_row = Row::new("flights led inside the grace window after a failover");
    let mut recoveries = Vec::new();
    let mut clean_recoveries = Vec::new();
    let mut status_recoveries = Vec::new();
    let mut unrecovered = 0;
    let coordinator_kills: Vec<(u64, u32, u32)> = kills
        .iter()
        .filter_map(|&(t, worker, epoch)| epoch.map(|e| (t, worker, e)))
        .collect();
    for &(t_kill, worker, epoch) in &coordinator_kills {
        let epoch = u64::from(epoch);
        let next_term_earlier = leads
            .iter()
            .any(|&(t, token, _)| epoch_of(token) > epoch && t < t_kill);
        let closing = reopens.get(&worker).is_some_and(|ts| {
            ts.iter()
                .any(|&t| t + CLOSE_SPAN_US >= t_kill && t <= t_kill)
        });
        if !next_term_earlier && !closing {
            for (t, token, who) in &leads {
                if epoch_of(*token) == epoch + 1 && *t + CLOCK_SLACK_US < t_kill + grace_us {
                    grace_row.hit(|| {
                        format!(
                            "token {token} led by {who} {} ms after the coordinator of epoch {epoch} was killed (grace window {grace_ms} ms)",
                            (t.saturating_sub(t_kill)) / 1000
                        )
                    });
                }
            }
        }
        match leads
            .iter()
            .find(|&&(t, token, _)| t >= t_kill && epoch_of(token) > epoch)
        {
            Some(&(t, ..)) => {
                recoveries.push(t - t_kill);
                // Another fault on the coordinator before the new lead (the
                // new coordinator killed or stopped in turn) makes this
                // recovery longer for a reason of its own.
                let interrupted = coordinator_kills
                    .iter()
                    .any(|&(other, ..)| other > t_kill && other < t)
                    || coordinator_pauses
                        .iter()
                        .any(|&other| other > t_kill && other < t);
                if !interrupted {
                    clean_recoveries.push(t - t_kill);
                }
            }
            None => unrecovered += 1,
        }
        if let Some(&(t, ..)) = terms
            .iter()
            .find(|&&(t, e, _)| t >= t_kill && u64::from(e) > epoch)
        {
            status_recoveries.push(t - t_kill);
        }
    }
    recoveries.sort_unstable();
    clean_recoveries.sort_unstable();
    status_recoveries.sort_unstable();

    // ------------------------------------------------------------ calls
    let mut never_ended = Row::new("calls that never ended (in processes that exited cleanly)");
    let mut late = Row::new(
        "calls that ended later than their deadline + bound (stopped or blocked time not counted)",
    );
    let mut twice = Row::new("calls answered twice, or whose work ran twice");
    let mut values = Row::new("values other than what their flight's leader produced");
    let mut endings: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost_with_process = 0;
    let mut max_late_us = 0u64;
    for (id @ &(worker, call), record) in &calls {
        let Some(done) = dones.get(id) else {
            if exits.contains_key(&worker) {
                never_ended.hit(|| format!("worker {worker} call {call} on {}", record.key));
            } else {
                lost_with_process += 1;
            }
            continue;
        };
        let last = &done[done.len() - 1];
        let elapsed = last.t.saturating_sub(record.t);
        let held = held_within(worker, record.t, last.t);
        // A leader whose work panicked waits for its land to be settled
        // before the panic goes on, up to `PANIC_LAND_TIMEOUT`, whatever
        // its deadline (SPEC.md §9.6): a failover then makes it wait that
        // long.
        let panicked = last.end == Ending::Failure
            && last.led == Some(true)
            && last
                .text
                .as_deref()
                .is_some_and(|text| text.starts_with(DELIBERATE_PANIC));
        let deadline_us = record.deadline_ms * 1000
            + if panicked {
                PANIC_LAND_TIMEOUT.as_micros() as u64
            } else {
                0
            };
        let running = elapsed.saturating_sub(held);
        let bound = deadline_us + LATE_SLACK_US;
        max_late_us = max_late_us.max(running.saturating_sub(deadline_us));
        if running > bound {
            late.hit(|| {
                format!(
                    "worker {worker} call {call} on {} took {} ms ({} ms of it stopped or blocked in fenced writes), deadline {} ms",
                    record.key,
                    elapsed / 1000,
                    held / 1000,
                    record.deadline_ms
                )
            });
        }
    }
    for (id @ &(worker, call), done) in &dones {
        if done.len() > 1 {
            twice.hit(|| format!("worker {worker} call {call} ended {} times", done.len()));
        }
        if works.get(id).is_some_and(|w| w.len() > 1) {
            twice.hit(|| format!("worker {worker} call {call} ran its work twice"));
        }
        let done = &done[0];
        // A deliberate panic is a failure like any other for the checks
        // below (its joiners got the failure `Panic`, SPEC.md §9.6); it is
        // counted apart, to show that panics crossed.
        let panicked = done
            .text
            .as_deref()
            .is_some_and(|text| text.starts_with(DELIBERATE_PANIC));
        let ending = match (done.end, done.led) {
            (Ending::Value, Some(true)) => "value (led)",
            (Ending::Value, _) => "value (joined)",
            (Ending::Failure, Some(true)) if panicked => "panic (led)",
            (Ending::Failure, _) if panicked => "panic (joined)",
            (Ending::Failure, Some(true)) => "failure (led)",
            (Ending::Failure, _) => "failure (joined)",
            (Ending::Interrupted, _) => "interrupted",
            (Ending::Deadline, _) => "deadline",
            (Ending::Unavailable, _) => "unavailable",
            (Ending::Invalid, _) => "invalid",
        };
        *endings.entry(ending.to_owned()).or_default() += 1;
        let key = calls.get(id).map_or("?", |c| c.key.as_str());
        match (done.end, done.led) {
            (Ending::Value, Some(true)) => {
                let own = works.get(id).and_then(|w| w.first());
                let matches = own.is_some_and(|w| {
                    Some(w.token) == done.token && Some(&w.value) == done.text.as_ref()
                });
                if !matches {
                    values.hit(|| {
                        format!(
                            "worker {worker} call {call} led {key} and got {:?} under {:?}, its work says {:?}",
                            done.text,
                            done.token,
                            own.map(|w| (&w.value, w.token))
                        )
                    });
                }
            }
            (Ending::Value, _) => {
                let leader = done
                    .token
                    .and_then(|token| works_by_token.get(&token))
                    .and_then(|ids| ids.first())
                    .and_then(|leader| works.get(leader))
                    .and_then(|w| w.first());
                let matches =
                    leader.is_some_and(|w| Some(&w.value) == done.text.as_ref() && w.key == key);
                if !matches {
                    values.hit(|| {
                        format!(
                            "worker {worker} call {call} joined {key}'s flight {:?} and got {:?}; its leader produced {:?}",
                            done.token,
                            done.text,
                            leader.map(|w| (&w.key, &w.value))
                        )
                    });
                }
            }
            (Ending::Failure, Some(false)) => {
                let named = done.text.as_deref().and_then(value_id);
                let leader = named.as_ref().and_then(|value| {
                    let mut parts = value.split(':').skip(1);
                    let token: u64 = parts.next()?.parse().ok()?;
                    let ids = works_by_token.get(&token)?;
                    ids.iter().find_map(|leader| {
                        works
                            .get(leader)
                            .and_then(|w| w.first())
                            .filter(|w| &w.value == value)
                            .map(|w| (leader, w))
                    })
                });
                let consistent = leader.is_some_and(|(leader, w)| {
                    w.key == key
                        && dones.get(leader).is_none_or(|ds| {
                            ds[0].end == Ending::Failure && ds[0].text == done.text
                        })
                });
                if !consistent {
                    values.hit(|| {
                        format!(
                            "worker {worker} call {call} joined {key} and got the failure {:?}, which no leader of {key} produced",
                            done.text
                        )
                    });
                }
            }
            _ => {}
        }
    }
    let mut hung = Row::new("worker processes that did not exit after the stop");
    let mut leftover_processes = Row::new("processes left running");
    let mut temps = Row::new("temporary files left after a new term");
    let mut last_term = Row::new("terms whose epoch did not increase");

    // ------------------------------------------------------------ tokens
    let mut minted_twice = Row::new("tokens minted twice");
    for (token, ids) in &works_by_token {
        let distinct: BTreeSet<&CallId> = ids.iter().collect();
        if distinct.len() > 1 {
            minted_twice.hit(|| format!("token {token} led by {distinct:?}"));
        }
    }
    let mut raw_tokens: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, token, who) in &raw_leads {
        *raw_tokens.entry(*token).or_default() += 1;
        if works_by_token.contains_key(token) {
            minted_twice.hit(|| format!("token {token} led by a worker and by {who}"));
        }
    }
    for (token, count) in raw_tokens {
        if count > 1 {
            minted_twice.hit(|| format!("token {token} led by {count} hostile clients"));
        }
    }

    // ------------------------------------------------------------ terms
    let mut unexplained = Row::new("coordinator changes that no fault explains");
    for pair in terms.windows(2) {
        let (t1, e1, p1) = pair[0];
        let (t2, e2, p2) = pair[1];
        if e2 < e1 || (e2 == e1 && p2 != p1) {
            last_term.hit(|| {
                format!("epoch {e1} (worker {p1}) was followed by epoch {e2} (worker {p2})")
            });
        }
        if (e1, p1) == (e2, p2) {
            continue;
        }
        let killed = kills.iter().any(|&(t, worker, _)| worker == p1 && t <= t2);
        let reopened = reopens
            .get(&p1)
            .is_some_and(|ts| ts.iter().any(|&t| t + CLOSE_SPAN_US >= t1 && t <= t2));
        let died = deaths.get(&p1).is_some_and(|&t| t <= t2);
        // A worker's last close at the stop ends its term too (§10.4): the
        // next term may be seen before its process is reaped.
        let closed = exits.get(&p1).is_some_and(|&t| t <= t2);
        if !(killed || reopened || died || closed) {
            unexplained.hit(|| {
                format!(
                    "epoch {e1} served by {p1} (seen at {t1} µs) gave way to epoch {e2} served by {p2} (seen at {t2} µs)"
                )
            });
        }
    }
    let max_token_epoch = leads
        .iter()
        .map(|&(_, token, _)| epoch_of(token))
        .max()
        .unwrap_or(0);
    let max_term_epoch = terms
        .iter()
        .map(|&(_, e, _)| u64::from(e))
        .max()
        .unwrap_or(0);

    // ------------------------------------------------------------ stderr
    let mut panics = Row::new("panics in worker processes");
    if let Ok(entries) = std::fs::read_dir(&paths.stderr) {
        for entry in entries.flatten() {
            let content = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in content.lines().filter(|l| l.contains("panicked")) {
                panics.hit(|| format!("{}: {line}", entry.file_name().to_string_lossy()));
            }
        }
    }

    // ------------------------------------------------------------ final
    let mut leftovers = String::new();
    if let Some(Record::Final {
        files,
        temp_files,
        processes_alive,
        hung_workers,
        fds_before,
        fds_after,
        probe,
        probe_epoch,
        epoch_file,
        coordinator_fds_max,
        ..
    }) = &final_record
    {
        for pid in hung_workers {
            hung.hit(|| format!("process {pid}"));
        }
        for pid in processes_alive {
            leftover_processes.hit(|| format!("process {pid}"));
        }
        for name in temp_files {
            temps.hit(|| name.clone());
        }
        let newest = max_token_epoch.max(max_term_epoch);
        match probe_epoch {
            Some(epoch) if u64::from(*epoch) > newest => {}
            _ => last_term
                .hit(|| format!("the last election ({probe}) did not lead above epoch {newest}")),
        }
        if epoch_file.parse::<u64>().map_or(true, |e| e < newest) {
            last_term.hit(|| format!("flight.epoch holds {epoch_file:?}, below epoch {newest}"));
        }
        if cluster_form {
            let _ = writeln!(
                leftovers,
                "  last election: {probe}; the epoch key holds {epoch_file}"
            );
            let _ = writeln!(
                leftovers,
                "  processes left: {}; harness descriptors before/after: {fds_before}/{fds_after}",
                processes_alive.len()
            );
        } else {
            let _ = writeln!(
                leftovers,
                "  files in the flight directory: {}",
                files.join(", ")
            );
            let _ = writeln!(
                leftovers,
                "  last election: {probe}; flight.epoch holds {epoch_file}"
            );
            let _ = writeln!(
                leftovers,
                "  processes left: {}; harness descriptors before/after: {fds_before}/{fds_after}; most descriptors of a coordinator process: {coordinator_fds_max}",
                processes_alive.len()
            );
        }
        if fds_after > fds_before {
            leftover_processes.hit(|| {
                format!(
                    "the harness holds {} more descriptors than before the run",
                    fds_after - fds_before
                )
            });
        }
    } else {
        harness.hit(|| "the run did not finish (no final record)".into());
    }

    // ------------------------------------------------------------ report
    let injected_lane_one: usize = faults.values().sum();
    let injected_hostile: usize = hostile.values().map(|c| c.iter().sum::<usize>()).sum();
    let injected = injected_lane_one + injected_hostile;
    let mut enough = Row::new("fewer faults injected than required");
    // The cluster form's minimum is of cluster faults (partitions, hosts,
    // etcd, pauses): its hostile clients come on top.
    let counted = if cluster_form {
        injected_lane_one
    } else {
        injected
    };
    if (counted as u64) < min_faults {
        enough.hit(|| {
            format!(
                "{counted} {}injected, at least {min_faults} required",
                if cluster_form { "cluster faults " } else { "" }
            )
        });
    }
    let mut exercised = Row::new("guarantees never exercised");
    let long_failover = faults
        .get("pause_leader_long_failover")
        .copied()
        .unwrap_or(0);
    if long_failover > 0 && refused == 0 {
        exercised.hit(|| {
            format!("{long_failover} leaders paused past the grace window, yet the fence refused no write")
        });
    }
    if endings.get("value (joined)").copied().unwrap_or(0) == 0 {
        exercised.hit(|| "no call joined a flight".into());
    }
    if !coordinator_kills.is_empty() && recoveries.is_empty() {
        exercised.hit(|| "no coordinator kill was followed by a new lead".into());
    }

    let _ = writeln!(text, "\n==== chaos report (seed {seed}) ====");
    let _ = writeln!(
        text,
        "{seconds} s of faults, {workers} workers × {concurrency} loops on {keys} keys, grace window {grace_ms} ms, deadline {deadline_ms} ms, schedule {schedule}"
    );
    let _ = writeln!(
        text,
        "{spawned} worker processes over the run, {worker_logs} worker logs ({torn} torn last lines skipped)"
    );
    let _ = writeln!(
        text,
        "\nfaults injected: {injected} ({injected_lane_one} {}, {injected_hostile} hostile clients{})",
        if cluster_form {
            "cluster faults"
        } else {
            "process/file"
        },
        if cluster_form { " over TLS" } else { "" }
    );
    for (kind, count) in &faults {
        let _ = writeln!(text, "  {kind:<30} {count}");
    }
    for (kind, [ok, inconclusive, bad]) in &hostile {
        let _ = writeln!(
            text,
            "  hostile {kind:<22} {}  (as specified {ok}, inconclusive {inconclusive}, violations {bad})",
            ok + inconclusive + bad
        );
    }
    let inconclusive: usize = hostile
        .values()
        .map(|[_, inconclusive, _]| inconclusive)
        .sum();
    let conclusive = injected_hostile - inconclusive;
    let _ = writeln!(
        text,
        "  hostile clients: {injected_hostile}, conclusive {conclusive} ({:.0} %), inconclusive {inconclusive}",
        percent(conclusive, injected_hostile)
    );
    if !skipped.is_empty() {
        let list: Vec<String> = skipped.iter().map(|(k, c)| format!("{k} {c}")).collect();
        let _ = writeln!(
            text,
            "  skipped (no target at that moment): {}",
            list.join(", ")
        );
    }
    if !cluster_form {
        let _ = writeln!(text, "  damaged epoch files checked: {epoch_checks}");
    }
    let total_calls: usize = endings.values().sum();
    let _ = writeln!(
        text,
        "\ncalls by ending: {total_calls} ended, {lost_with_process} lost with their killed process"
    );
    for (ending, count) in &endings {
        let _ = writeln!(text, "  {ending:<20} {count}");
    }
    let _ = writeln!(
        text,
        "\nfenced resource: {accepted} writes accepted, {refused} refused (stale tokens); {refused_after_pause} refused writes came from leaders stopped during their call"
    );
    let _ = writeln!(
        text,
        "  overlapping accepted executions excused: {excused_failover} across a failover (SPEC.md §10.3 item 5), {excused_drop} after a dropped connection (§8.7)"
    );
    // The cluster form has no `status` poller (etcd's key says who serves)
    // and its failovers have a table of their own (check_cluster): these
    // lines are the local form's.
    if !cluster_form {
        let _ = writeln!(
            text,
            "\ncoordinator kills: {}; recovery, kill → next successful lead: p50 {} ms, p99 {} ms, max {} ms ({} with no lead before the end)",
            coordinator_kills.len(),
            percentile(&recoveries, 0.50) / 1000,
            percentile(&recoveries, 0.99) / 1000,
            recoveries.last().copied().unwrap_or(0) / 1000,
            unrecovered
        );
        let _ = writeln!(
            text,
            "  the {} of them with no other coordinator fault before that lead: p50 {} ms, p99 {} ms, max {} ms",
            clean_recoveries.len(),
            percentile(&clean_recoveries, 0.50) / 1000,
            percentile(&clean_recoveries, 0.99) / 1000,
            clean_recoveries.last().copied().unwrap_or(0) / 1000
        );
        let _ = writeln!(
            text,
            "  kill → status answered by the next term: p50 {} ms, p99 {} ms, max {} ms",
            percentile(&status_recoveries, 0.50) / 1000,
            percentile(&status_recoveries, 0.99) / 1000,
            status_recoveries.last().copied().unwrap_or(0) / 1000
        );
        let _ = writeln!(
            text,
            "  terms seen by status: {}, highest epoch {max_term_epoch}; highest token epoch {max_token_epoch}",
            terms.len()
        );
    }
    let _ = writeln!(
        text,
        "  latest call end past its deadline (stopped or blocked time not counted): {} ms",
        max_late_us / 1000
    );
    for (what, ms) in &latencies {
        let _ = writeln!(text, "  {what}: at most {ms} ms");
    }
    let cluster = cluster_form.then(|| {
        crate::check_cluster::check(&crate::check_cluster::Input {
            nemesis: &nemesis.records,
            worker_records: &worker_records,
            stops: &stops,
            leads: &leads,
            stderr: &paths.stderr,
            grace_ms,
        })
    });
    if let Some(cluster) = &cluster {
        text.push_str(&cluster.text);
    }
    let _ = writeln!(text, "\nleft at the end:\n{leftovers}");

    let mut rows = vec![
        stale,
        overlapping,
        grace_row,
        never_ended,
        late,
        twice,
        values,
        minted_twice,
        last_term,
        unexplained,
        crashes,
        panics,
        hostile_row,
    ];
    // The cluster form has no flight directory: no epoch file to damage and
    // no temporary files to leave, so these rows are the local form's.
    if !cluster_form {
        rows.extend([epoch_row, temps]);
    }
    rows.extend([hung, leftover_processes, harness, enough, exercised]);
    rows.extend(cluster.map(|c| c.rows).into_iter().flatten());
    let _ = writeln!(text, "must be zero:");
    let mut failed = false;
    for row in &rows {
        let mark = if row.count == 0 { "ok  " } else { "FAIL" };
        let _ = writeln!(text, "  {mark} {:<78} {}", row.name, row.count);
        for example in &row.examples {
            let _ = writeln!(text, "         {example}");
        }
        failed |= row.count > 0;
    }
    Report { text, failed }
}

/// The time within [from, to] covered by at least one of `spans`: spans
/// that overlap (a process stopped inside a write) count once.
fn covered(mut spans: Vec<(u64, u64)>, from: u64, to: u64) -> u64 {
    spans.sort_unstable();
    let mut total = 0;
    let mut reached = from;
    for (a, b) in spans {
        let (a, b) = (a.max(reached), b.min(to));
        if b > a {
            total += b - a;
            reached = b;
        }
    }
    total
}

/// Checks a kept run directory again.
pub fn main(root: &Path) -> i32 {
    let report = check(&Paths::new(root));
    println!("{}", report.text);
    i32::from(report.failed)
}

/// Checks the run's logs, prints the report and the verdict, and removes
/// the run's directory after a pass (unless `--keep`); the exit status.
pub fn verdict(config: &RunConfig, paths: &Paths, passed: bool, started: Instant) -> i32 {
    let root = &paths.root;
    let report = check(paths);
    println!("{}", report.text);
    println!(
        "chaos: {:.0} s of wall time",
        started.elapsed().as_secs_f64()
    );
    if !passed || report.failed {
        println!(
            "chaos: FAILED with seed {}; the logs are kept in {}",
            config.seed,
            root.display()
        );
        1
    } else {
        if config.keep {
            println!("chaos: logs kept in {}", root.display());
        } else {
            let _ = std::fs::remove_dir_all(root);
        }
        println!("chaos: passed with seed {}", config.seed);
        0
    }
}

/// `part` of `whole` in percent; 100 of nothing.
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        100.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
