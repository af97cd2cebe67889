//! The cluster form's rows of the checker (SPEC.md §14.2, §14.6, §14.7):
//! two terms that answered in overlapping intervals, answers of a term
//! whose coordinator key was already gone, `Unavailable` calls while etcd
//! and a coordinator were reachable; and the failover times.
//!
//! When each term answered comes from the coordinators' own logs: every
//! worker logs its library's `coordinating` line (with the epoch) at info
//! and each answer it sends as coordinator at debug, both under the
//! coordinator's explicit log target ([`LOG_TARGET`]), each with the
//! wall-clock time of tracing's formatter, the clock the harness's records
//! use too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use single_flight::_internal::LOG_TARGET;

use crate::records::{Ending, Record};
use crate::rows::{CLOCK_SLACK_US, Row, percentile};

/// The library's answers as its server logs them (`trace_response`).
const ANSWERS: [&str; 5] = ["lead", "joined", "landed", "interrupted", "rejected"];

/// What the cluster rows need from the rest of the checker.
pub struct Input<'a> {
    pub nemesis: &'a [Record],
    pub worker_records: &'a [Record],
    /// Stops and resumes by worker: (t, stopped?).
    pub stops: &'a BTreeMap<u32, Vec<(u64, bool)>>,
    /// Work starts: (t, token, who).
    pub leads: &'a [(u64, u64, String)],
    pub stderr: &'a Path,
    pub grace_ms: u64,
}

pub struct Output {
    pub rows: Vec<Row>,
    pub text: String,
}

/// One term as its coordinator's log shows it.
#[derive(Default)]
struct Term {
    first: Option<u64>,
    last: u64,
    answers: Vec<u64>,
}

/// Microseconds since the Unix epoch of an RFC 3339 UTC time as tracing
/// writes it (`2026-12-01T14:20:00.123456Z`).
fn parse_time(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (hour, minute, second) = (hms.next()??, hms.next()??, hms.next()??);
    let digits: String = fraction.chars().chain("000000".chars()).take(6).collect();
    let micros: u64 = digits.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(((days * 86_400 + hour * 3_600 + minute * 60 + second) * 1_000_000) + micros)
}

/// The value of `name=` in a tracing line's fields.
fn field<'a>(fields: &'a str, name: &str) -> Option<&'a str> {
    fields
        .split_whitespace()
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

/// Every term of every worker, from the coordinators' logs: (worker,
/// epoch) → when it answered.
fn read_terms(stderr: &Path) -> BTreeMap<(u32, u32), Term> {
    let mut terms: BTreeMap<(u32, u32), Term> = BTreeMap::new();
    // How tracing's formatter writes the target between the level and the
    // message.
    let target = format!(" {LOG_TARGET}: ");
    let Ok(entries) = std::fs::read_dir(stderr) else {
        return terms;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(worker) = name
            .strip_prefix("worker-")
            .and_then(|n| n.strip_suffix(".txt"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(content) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut epoch: Option<u32> = None;
        for line in content.lines() {
            let Some((_, message)) = line.split_once(&target) else {
                continue;
            };
            let Some(t) = line.split_whitespace().next().and_then(parse_time) else {
                continue;
            };
            let (word, fields) = message.split_once(' ').unwrap_or((message, ""));
            if message.starts_with("coordinating") {
                epoch = field(fields, "epoch").and_then(|e| e.parse().ok());
            } else if message.starts_with("term over") {
                epoch = None;
            } else if ANSWERS.contains(&word)
                && let Some(epoch) = epoch
            {
                let term = terms.entry((worker, epoch)).or_default();
                term.first.get_or_insert(t);
                term.last = term.last.max(t);
                term.answers.push(t);
            }
        }
    }
    terms
}

pub fn check(input: &Input) -> Output {
    let mut text = String::new();
    let mut ttl_ms = 0;
    let mut margin_ms = 0;
    let mut hosts = 1;
    let mut bound_ms = 0;
    let mut slots: BTreeMap<u32, usize> = BTreeMap::new();
    let mut coordinator_reads: Vec<(u64, Option<u32>)> = Vec::new();
    let mut outages: Vec<(u64, u64, Option<usize>)> = Vec::new();
    let mut failovers: Vec<(u64, String, u32)> = Vec::new();
    for record in input.nemesis {
        match record {
            Record::ClusterParams {
                hosts: h,
                ttl_ms: ttl,
                margin_ms: margin,
                unavailable_bound_ms,
            } => {
                hosts = (*h).max(1);
                ttl_ms = *ttl;
                margin_ms = *margin;
                bound_ms = *unavailable_bound_ms;
            }
            Record::Spawn { worker, slot, .. } => {
                slots.insert(*worker, *slot);
            }
            Record::Coordinator { t, epoch, .. } => coordinator_reads.push((*t, *epoch)),
            Record::Outage { from, to, host, .. } => outages.push((*from, *to, *host)),
            Record::Failover { t, kind, epoch } => failovers.push((*t, kind.clone(), *epoch)),
            _ => {}
        }
    }
    coordinator_reads.sort();
    let ttl_us = ttl_ms * 1000;
    let margin_us = margin_ms * 1000;
    let bound_us = bound_ms * 1000;
    // The stops of a worker longer than the margin: (from, to).
    let long_stops = |worker: u32| -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        let mut since = None;
        for &(t, stopped) in input.stops.get(&worker).map_or(&[][..], |v| &v[..]) {
            match (stopped, since) {
                (true, None) => since = Some(t),
                (false, Some(from)) => {
                    if t - from > margin_us {
                        found.push((from, t));
                    }
                    since = None;
                }
                _ => {}
            }
        }
        if let Some(from) = since {
            found.push((from, u64::MAX));
        }
        found
    };
    let stopped_in = |worker: u32, from: u64, to: u64| -> bool {
        let mut since = None;
        for &(t, stopped) in input.stops.get(&worker).map_or(&[][..], |v| &v[..]) {
            match (stopped, since) {
                (true, None) => since = Some(t),
                (false, Some(start)) => {
                    if start <= to && from <= t {
                        return true;
                    }
                    since = None;
                }
                _ => {}
            }
        }
        since.is_some_and(|start| start <= to)
    };

    // ---------------------------------------------------- overlapping terms
    let terms = read_terms(input.stderr);
    // Every cluster run elects at least one coordinator, so no term read
    // means the checker cannot see the coordinators' lines (a log target
    // that moved, a log level): the rows below would pass blind.
    let mut blind = Row::new(
        "runs whose coordinators' logs show no term (the rows about terms could not be judged)",
    );
    if terms.is_empty() {
        blind.hit(|| {
            format!(
                "no line of target {} was read from the workers' logs",
                single_flight::_internal::LOG_TARGET
            )
        });
    }
    let mut overlapping = Row::new(
        "coordinators of the cluster that answered in overlapping intervals (no long pause)",
    );
    let mut excused_pause = 0;
    let ordered: Vec<(&(u32, u32), &Term)> = {
        let mut ordered: Vec<_> = terms.iter().collect();
        ordered.sort_by_key(|((_, epoch), _)| *epoch);
        ordered
    };
    for (i, &(&(old_worker, old_epoch), old)) in ordered.iter().enumerate() {
        for &(&(new_worker, new_epoch), new) in &ordered[i + 1..] {
            if new_epoch == old_epoch {
                continue;
            }
            let Some(new_first) = new.first else { continue };
            if old.last <= new_first + CLOCK_SLACK_US {
                continue;
            }
            // SPEC.md §14.2: only a process stopped longer than the margin
            // may answer once its lease is gone.
            let paused = long_stops(old_worker).iter().any(|&(from, to)| {
                from <= old.last && to + CLOCK_SLACK_US >= new_first.saturating_sub(ttl_us)
            });
            if paused {
                excused_pause += 1;
            } else {
                overlapping.hit(|| {
                    format!(
                        "epoch {old_epoch} (worker {old_worker}) answered until {} µs, after epoch {new_epoch} (worker {new_worker}) answered from {new_first} µs",
                        old.last
                    )
                });
            }
        }
    }

    // ------------------------------------------- answers after the key went
    let mut after_lease =
        Row::new("answers of a coordinator after its lease was gone (its key read as gone)");
    let mut judged_terms = 0;
    for (&(worker, epoch), term) in &terms {
        let Some(seen) = coordinator_reads
            .iter()
            .position(|&(_, e)| e == Some(epoch))
        else {
            continue;
        };
        let Some(&(gone, _)) = coordinator_reads[seen..]
            .iter()
            .find(|&&(_, e)| e != Some(epoch))
        else {
            continue;
        };
        judged_terms += 1;
        let late: Vec<u64> = term
            .answers
            .iter()
            .copied()
            .filter(|&t| t > gone + CLOCK_SLACK_US)
            .collect();
        if let Some(&first) = late.first() {
            after_lease.hit(|| {
                format!(
                    "epoch {epoch} (worker {worker}) answered {} times after its key was read as gone at {gone} µs, the first {} ms after",
                    late.len(),
                    (first - gone) / 1000
                )
            });
        }
    }

    // ------------------------------------------------------- unavailable
    let mut unavailable = Row::new(
        "calls ended Unavailable while etcd's quorum and a coordinator were reachable (bound)",
    );
    let mut unavailable_total = 0;
    for record in input.worker_records {
        let Record::Done {
            worker,
            call,
            t,
            end: Ending::Unavailable,
            text: reason,
            ..
        } = record
        else {
            continue;
        };
        unavailable_total += 1;
        let host = slots.get(worker).map(|slot| slot % hosts);
        let from = t.saturating_sub(bound_us);
        let outage = outages.iter().any(|&(a, b, h)| {
            (h.is_none() || h == host) && a <= *t && from <= b.saturating_add(bound_us)
        });
        // The coordinator key must have been there at every read of the
        // window, and read before it.
        let before = coordinator_reads.iter().rev().find(|&&(r, _)| r <= from);
        let present = before.is_some_and(|&(_, e)| e.is_some())
            && coordinator_reads
                .iter()
                .filter(|&&(r, _)| from < r && r <= *t)
                .all(|&(_, e)| e.is_some());
        if !outage && present && !stopped_in(*worker, from, *t) {
            unavailable.hit(|| {
                format!(
                    "worker {worker} call {call} on host {host:?} at {t} µs: {}",
                    reason.as_deref().unwrap_or("")
                )
            });
        }
    }

    // ---------------------------------------------------------- failovers
    let mut by_kind: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut unrecovered: BTreeMap<String, usize> = BTreeMap::new();
    for (t, kind, epoch) in &failovers {
        match input
            .leads
            .iter()
            .find(|&&(lead, token, _)| lead >= *t && token >> 32 > u64::from(*epoch))
        {
            Some(&(lead, ..)) => {
                by_kind.entry(kind.clone()).or_default().push(lead - t);
                by_kind.entry("all".into()).or_default().push(lead - t);
            }
            None => *unrecovered.entry(kind.clone()).or_default() += 1,
        }
    }
    let _ = writeln!(
        text,
        "\ncluster: TTL {ttl_ms} ms, step-down margin {margin_ms} ms, grace window {} ms; {} terms answered (in the coordinators' logs), {judged_terms} of them seen to end in etcd; {excused_pause} overlaps excused by a pause past the margin",
        input.grace_ms,
        terms.len()
    );
    let _ = writeln!(
        text,
        "  calls ended Unavailable: {unavailable_total}, judged against a bound of {bound_ms} ms with etcd and a coordinator reachable"
    );
    let _ = writeln!(
        text,
        "  failover, fault → first lead of a newer term (TTL + grace = {} ms):",
        ttl_ms + input.grace_ms
    );
    for (kind, times) in &mut by_kind {
        times.sort_unstable();
        let _ = writeln!(
            text,
            "    {kind:<24} {:>4}  p50 {} ms, p90 {} ms, p99 {} ms, max {} ms{}",
            times.len(),
            percentile(times, 0.50) / 1000,
            percentile(times, 0.90) / 1000,
            percentile(times, 0.99) / 1000,
            times.last().copied().unwrap_or(0) / 1000,
            match unrecovered.get(kind.as_str()) {
                Some(n) => format!(" ({n} more with no new lead before the end)"),
                None => String::new(),
            }
        );
    }
    Output {
        rows: vec![blind, overlapping, after_lease, unavailable],
        text,
    }
}

#[cfg(test)]
mod tests {
    use single_flight::_internal::LOG_TARGET;

    /// The checker finds a term and its answers in a log written as a
    /// worker writes it (worker.rs: tracing's formatter, no colours) under
    /// the coordinator's target: a change of either would blind the
    /// overlapping-terms row without failing it.
    #[test]
    fn reads_the_terms_from_a_workers_log() {
        let dir = std::env::temp_dir().join(format!("chaos-check-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let log = std::fs::File::create(dir.join("worker-7.txt")).expect("a log file");
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::sync::Mutex::new(log))
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: LOG_TARGET, epoch = 3, term = "First", "coordinating");
            tracing::debug!(target: LOG_TARGET, connection = 1, id = 1, token = "3.1", "lead");
            tracing::debug!(target: LOG_TARGET, connection = 1, id = 2, "landed");
            tracing::info!(target: LOG_TARGET, epoch = 3, clean = true, "term over");
            tracing::debug!(target: LOG_TARGET, connection = 2, id = 3, "lead");
        });
        let terms = super::read_terms(&dir);
        std::fs::remove_dir_all(&dir).expect("remove the temporary directory");
        assert_eq!(terms.keys().copied().collect::<Vec<_>>(), [(7, 3)]);
        assert_eq!(
            terms[&(7, 3)].answers.len(),
            2,
            "the answers within the term"
        );
    }

    /// A worker that coordinates its host (SPEC.md §18.3) logs its relay's
    /// term and the answers it relays under the relay's own target: the
    /// checker reads only the cluster coordinator's term, and none of the
    /// host's answers, in it or out of it.
    #[test]
    fn reads_no_host_coordinators_line_as_the_coordinators() {
        use single_flight::_internal::RELAY_LOG_TARGET;
        let dir = std::env::temp_dir().join(format!("chaos-check-relay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let log = std::fs::File::create(dir.join("worker-4.txt")).expect("a log file");
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::sync::Mutex::new(log))
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: RELAY_LOG_TARGET, epoch = 9, "coordinating the host, relaying to the cluster (SPEC.md §18.3)");
            tracing::debug!(target: RELAY_LOG_TARGET, connection = 1, id = 1, token = "3.1", "lead");
            tracing::info!(target: LOG_TARGET, epoch = 3, term = "First", "coordinating");
            tracing::debug!(target: RELAY_LOG_TARGET, connection = 2, id = 2, flight = "3.1", "joined");
            tracing::debug!(target: LOG_TARGET, connection = 1, id = 1, token = "3.1", "lead");
            tracing::debug!(target: RELAY_LOG_TARGET, connection = 2, id = 2, "landed");
            tracing::info!(target: LOG_TARGET, epoch = 3, clean = true, "term over");
            tracing::debug!(target: RELAY_LOG_TARGET, connection = 3, id = 3, "interrupted");
        });
        let terms = super::read_terms(&dir);
        std::fs::remove_dir_all(&dir).expect("remove the temporary directory");
        assert_eq!(terms.keys().copied().collect::<Vec<_>>(), [(4, 3)]);
        assert_eq!(
            terms[&(4, 3)].answers.len(),
            1,
            "the coordinator's lead alone"
        );
    }

    #[test]
    fn parses_tracing_times() {
        assert_eq!(
            super::parse_time("1970-01-01T00:00:01.000002Z"),
            Some(1_000_002)
        );
        assert_eq!(
            super::parse_time("2026-12-01T14:20:00.123456Z"),
            Some(1_796_134_800_123_456)
        );
    }
}
