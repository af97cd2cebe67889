//! `status --format openmetrics` (SPEC.md §13.5): the coordinator's status
//! and counters in the OpenMetrics text format, for Prometheus'
//! node-exporter textfile collector or any scraper that reads it.
//!
//! Every family is written with its `TYPE` and `HELP` lines before its
//! samples, counters as `<name>_total`, every sample labelled with the place
//! (`directory` or `cluster`), and the exposition ends with `# EOF`, as the
//! OpenMetrics specification requires. The format has no comments: what a
//! person should know (an older coordinator without counters) goes to
//! stderr instead.

use std::fmt::Write;

use single_flight::{CoordinatorStats, Status};

/// Every metric's name begins with this, so that ours never clash with
/// another exporter's in one scraper.
const PREFIX: &str = "single_flight_";

/// One metric family: its name without the prefix, its type, its help, and
/// its samples (labels besides the place's, and the value).
struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    samples: Vec<(Option<(&'static str, &'static str)>, Value)>,
}

impl Family {
    /// The name it is exposed under, with the project's prefix.
    fn exposed_name(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

#[derive(Clone, Copy)]
enum Value {
    Count(u64),
    /// A ratio, `None` when it is undefined (written `NaN`).
    Ratio(Option<f64>),
}

/// The exposition for the place labelled `label` (`directory` or `cluster`)
/// named `place`, whose coordinator answered `status`, or none runs.
pub fn exposition(label: &str, place: &str, status: Option<&Status>) -> String {
    write(label, place, &[(None, status)])
}

/// The exposition of a cluster of several shards (SPEC.md §19.6): each
/// shard's coordinator's answer in `statuses`, in shard order, every sample
/// labelled with its `shard` as well, each family written once.
pub fn exposition_of_shards(label: &str, place: &str, statuses: &[Option<&Status>]) -> String {
    let shards: Vec<_> = statuses
        .iter()
        .enumerate()
        .map(|(shard, status)| (Some(shard), *status))
        .collect();
    write(label, place, &shards)
}

/// The families of one coordinator's answer, or of none.
fn families(status: Option<&Status>) -> Vec<Family> {
    let mut families = vec![gauge(
        "coordinator_up",
        "Whether a coordinator answered: 1, or 0 when none runs.",
        u64::from(status.is_some()),
    )];
    if let Some(status) = status {
        families.extend(term(status));
        if let Some(stats) = &status.stats {
            families.extend(counters(stats));
        }
    }
    families
}

/// Writes the families of each answer, each family once with the samples
/// of every answer, in the order they first appear.
fn write(label: &str, place: &str, statuses: &[(Option<usize>, Option<&Status>)]) -> String {
    let mut merged: Vec<(Family, Vec<String>)> = Vec::new();
    let place = format!("{label}=\"{}\"", escape_label(place));
    for (shard, status) in statuses {
        let place = match shard {
            Some(shard) => format!("{place},shard=\"{shard}\""),
            None => place.clone(),
        };
        for family in families(*status) {
            let samples = family.samples.iter().map(|(labels, value)| {
                let labels = match labels {
                    Some((label, value)) => format!("{place},{label}=\"{value}\""),
                    None => place.clone(),
                };
                (labels, *value)
            });
            let suffix = match family.kind {
                Kind::Counter => "_total",
                Kind::Gauge => "",
            };
            let name = family.exposed_name();
            let lines: Vec<String> = samples
                .map(|(labels, value)| format!("{name}{suffix}{{{labels}}} {}", number(value)))
                .collect();
            match merged
                .iter_mut()
                .find(|(known, _)| known.name == family.name)
            {
                Some((_, known)) => known.extend(lines),
                None => merged.push((family, lines)),
            }
        }
    }
    let mut text = String::new();
    for (family, lines) in merged {
        let name = family.exposed_name();
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(text, "# TYPE {name} {kind}");
        let _ = writeln!(text, "# HELP {name} {}", family.help);
        for line in lines {
            let _ = writeln!(text, "{line}");
        }
    }
    text.push_str("# EOF\n");
    text
}

/// The gauges of the term: its epoch, its flights, its grace window.
fn term(status: &Status) -> Vec<Family> {
    let waiting = status.waiting_in_grace;
    vec![
        gauge(
            "coordinator_epoch",
            "The epoch of the coordinator's term (SPEC.md §7.3); the counters start again at 0 with each term.",
            u64::from(status.epoch.get()),
        ),
        gauge(
            "flights_in_progress",
            "Flights in progress.",
            status.flights.len() as u64 + status.omitted,
        ),
        gauge(
            "grace_window_open",
            "Whether the term's grace window is open (SPEC.md §8.4): 1 or 0.",
            u64::from(waiting.is_some()),
        ),
        gauge(
            "grace_window_waiting_runs",
            "Runs that wait for the grace window to end; 0 when none is open.",
            waiting.unwrap_or(0),
        ),
    ]
}

/// The coordinator's counters of its term (SPEC.md §8.11).
fn counters(stats: &CoordinatorStats) -> Vec<Family> {
    vec![
        counter(
            "flights_led",
            "Runs answered lead in this term: flights whose work ran.",
            stats.flights_led,
        ),
        counter(
            "joins",
            "Runs answered joined in this term: calls that did not run the work.",
            stats.joins,
        ),
        Family {
            name: "dedupe_ratio",
            kind: Kind::Gauge,
            help: "Joins divided by the runs answered lead or joined in this term; NaN before the first.",
            samples: vec![(None, Value::Ratio(stats.dedupe_ratio()))],
        },
        Family {
            name: "lands",
            kind: Kind::Counter,
            help: "Outcomes that leaders handed over in this term, by kind.",
            samples: vec![
                (Some(("outcome", "value")), Value::Count(stats.lands_value)),
                (
                    Some(("outcome", "failure")),
                    Value::Count(stats.lands_failure),
                ),
            ],
        },
        counter(
            "interruptions",
            "Flights that ended without an outcome in this term.",
            stats.interruptions,
        ),
        Family {
            name: "reasserts",
            kind: Kind::Counter,
            help: "Reasserts of flights of earlier terms in this term, by result (SPEC.md §8.3).",
            samples: vec![
                (
                    Some(("result", "accepted")),
                    Value::Count(stats.reasserts_accepted),
                ),
                (
                    Some(("result", "rejected")),
                    Value::Count(stats.reasserts_rejected),
                ),
            ],
        },
        counter(
            "rejoins",
            "Rejoins received in this term (SPEC.md §8.2).",
            stats.rejoins,
        ),
        counter(
            "grace_windows",
            "Grace windows this term opened: 1 after a failover, else 0.",
            stats.grace_windows,
        ),
        gauge(
            "connections_open",
            "Connections open to the coordinator.",
            stats.connections_open,
        ),
        counter(
            "connections_refused",
            "Connections the coordinator refused before they opened in this term.",
            stats.connections_refused,
        ),
    ]
}

fn counter(name: &'static str, help: &'static str, count: u64) -> Family {
    Family {
        name,
        kind: Kind::Counter,
        help,
        samples: vec![(None, Value::Count(count))],
    }
}

fn gauge(name: &'static str, help: &'static str, count: u64) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        help,
        samples: vec![(None, Value::Count(count))],
    }
}

/// A value as OpenMetrics writes numbers: integers in decimal, ratios as
/// Rust writes an `f64` (digits and a point, never an exponent), `NaN` for
/// an undefined one.
fn number(value: Value) -> String {
    match value {
        Value::Count(count) => count.to_string(),
        Value::Ratio(Some(ratio)) => ratio.to_string(),
        Value::Ratio(None) => "NaN".to_owned(),
    }
}

/// A label value as OpenMetrics escapes it: a backslash, a double quote and
/// a newline are the only characters escaped (its ABNF's `escaped-string`).
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The strict reading of an exposition that tests/command/cli.rs uses too.
#[cfg(test)]
#[path = "../../tests/support/openmetrics.rs"]
mod read;

#[cfg(test)]
mod tests {
    use super::*;
    use single_flight::Epoch;
    use single_flight_core::protocol::{FencingToken, FlightStatus, Key};

    fn status(stats: Option<CoordinatorStats>) -> Status {
        Status {
            epoch: Epoch::new(7).unwrap(),
            pid: 42,
            host: None,
            address: None,
            flights: vec![FlightStatus {
                key: Key::new("k").unwrap(),
                token: FencingToken::new(Epoch::new(7).unwrap(), 1).unwrap(),
                joiners: 2,
                detached: false,
            }],
            omitted: 3,
            waiting_in_grace: Some(5),
            stats,
            hosts: None,
            relay: None,
        }
    }

    /// §13.5: every counter and gauge, each with its own value, parses as
    /// OpenMetrics and reads back where it belongs; the place's label keeps
    /// a path with a quote, a backslash and a newline.
    #[test]
    fn every_counter_reads_back_from_the_exposition() {
        let stats = CoordinatorStats {
            flights_led: 1,
            joins: 3,
            lands_value: 4,
            lands_failure: 5,
            interruptions: 6,
            reasserts_accepted: 7,
            reasserts_rejected: 8,
            rejoins: 9,
            grace_windows: 1,
            connections_open: 10,
            connections_refused: u64::MAX,
        };
        let path = "/tmp/a \"b\\c\nd";
        let text = exposition("directory", path, Some(&status(Some(stats))));
        let samples = read::read(&text);
        let at = |name: &str, more: &[(&str, &str)]| {
            let mut labels = vec![("directory", path)];
            labels.extend_from_slice(more);
            read::value(&samples, &format!("single_flight_{name}"), &labels)
        };
        assert_eq!(at("coordinator_up", &[]), 1.0);
        assert_eq!(at("coordinator_epoch", &[]), 7.0);
        assert_eq!(at("flights_in_progress", &[]), 4.0);
        assert_eq!(at("grace_window_open", &[]), 1.0);
        assert_eq!(at("grace_window_waiting_runs", &[]), 5.0);
        assert_eq!(at("flights_led_total", &[]), 1.0);
        assert_eq!(at("joins_total", &[]), 3.0);
        assert_eq!(at("dedupe_ratio", &[]), 0.75);
        assert_eq!(at("lands_total", &[("outcome", "value")]), 4.0);
        assert_eq!(at("lands_total", &[("outcome", "failure")]), 5.0);
        assert_eq!(at("interruptions_total", &[]), 6.0);
        assert_eq!(at("reasserts_total", &[("result", "accepted")]), 7.0);
        assert_eq!(at("reasserts_total", &[("result", "rejected")]), 8.0);
        assert_eq!(at("rejoins_total", &[]), 9.0);
        assert_eq!(at("grace_windows_total", &[]), 1.0);
        assert_eq!(at("connections_open", &[]), 10.0);
        assert_eq!(at("connections_refused_total", &[]), u64::MAX as f64);
        assert_eq!(samples.len(), 17, "{text}");
        assert!(
            text.contains("single_flight_connections_refused_total{directory=\"/tmp/a \\\"b\\\\c\\nd\"} 18446744073709551615\n"),
            "counts are written whole: {text}"
        );
    }

    /// §13.5: before the first run the dedupe ratio is NaN; a coordinator
    /// without counters gives the term's gauges alone; a cluster is labelled
    /// by its name. Each parses.
    #[test]
    fn partial_expositions_parse_too() {
        let fresh = exposition(
            "cluster",
            "ci",
            Some(&status(Some(CoordinatorStats::default()))),
        );
        let samples = read::read(&fresh);
        assert!(read::value(&samples, "single_flight_dedupe_ratio", &[("cluster", "ci")]).is_nan());
        let older = exposition("cluster", "ci", Some(&status(None)));
        let samples = read::read(&older);
        assert_eq!(samples.len(), 5, "{older}");
        assert_eq!(
            read::value(
                &samples,
                "single_flight_coordinator_epoch",
                &[("cluster", "ci")]
            ),
            7.0
        );
        assert_eq!(read::read(&exposition("cluster", "ci", None)).len(), 1);
    }

    /// §13.5: a label value keeps every character, with the three that
    /// OpenMetrics escapes escaped.
    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"/a\b"c"#), r#"/a\\b\"c"#);
        assert_eq!(escape_label("a\nb"), r"a\nb");
        assert_eq!(escape_label("été"), "été");
    }

    /// §13.5: with no coordinator the exposition still parses, and says so.
    #[test]
    fn no_coordinator_is_one_gauge_at_zero() {
        assert_eq!(
            exposition("directory", "/d", None),
            "# TYPE single_flight_coordinator_up gauge\n\
             # HELP single_flight_coordinator_up Whether a coordinator answered: 1, or 0 when none runs.\n\
             single_flight_coordinator_up{directory=\"/d\"} 0\n\
             # EOF\n"
        );
    }

    /// §19.6: a cluster of shards writes each family once, each shard's
    /// samples labelled with its shard; a shard with no coordinator has only
    /// its `coordinator_up` at 0, and the whole parses as OpenMetrics.
    #[test]
    fn every_shard_is_labelled_and_every_family_written_once() {
        let answered = status(None);
        let text = exposition_of_shards("cluster", "ci", &[Some(&answered), None]);
        let samples = read::read(&text);
        let at = |name: &str, shard: &str| {
            read::value(
                &samples,
                &format!("single_flight_{name}"),
                &[("cluster", "ci"), ("shard", shard)],
            )
        };
        assert_eq!(at("coordinator_up", "0"), 1.0);
        assert_eq!(at("coordinator_up", "1"), 0.0);
        assert_eq!(at("coordinator_epoch", "0"), 7.0);
        assert_eq!(
            text.matches("# TYPE single_flight_coordinator_up ").count(),
            1,
            "{text}"
        );
        assert!(!text.contains("coordinator_epoch{cluster=\"ci\",shard=\"1\"}"));
        assert!(text.ends_with("# EOF\n"));
    }
}
