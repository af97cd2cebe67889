//! `single-flight status` (SPEC.md §13.5): one look at a directory's
//! coordinator and its flights in progress (SPEC.md §3.5).

use serde::Serialize;
use single_flight::{Status, StatusError};

use super::StatusArgs;
use super::exit;
use super::place::Place;

/// Runs the subcommand; returns the exit code: 0 when a coordinator
/// answered, 3 when none runs, 125 when its status could not be had.
pub async fn status(args: StatusArgs) -> u8 {
    let place = match args.place.place() {
        Ok(place) => place,
        Err(error) => {
            eprintln!("single-flight: {error}");
            return exit::FAILED;
        }
    };
    // A directory that does not exist has no coordinator; `status` creates
    // nothing.
    let answer = match place.directory() {
        Some(directory) if !directory.exists() => None,
        _ => Some(place.status().await),
    };
    match answer {
        Some(Ok(status)) => {
            if args.json {
                println!("{}", json(&place, Some(&status)));
            } else {
                print!("{}", text(&place, &status));
            }
            exit::SUCCESS
        }
        None | Some(Err(StatusError::NoCoordinator { .. })) => {
            if args.json {
                println!("{}", json(&place, None));
            } else {
                println!(
                    "no coordinator runs in {}: no process uses it now",
                    place.describe()
                );
            }
            exit::NOT_RUNNING
        }
        Some(Err(error)) => {
            eprintln!("single-flight: {error}");
            exit::FAILED
        }
    }
}

/// The `--json` form (see `status --help`). Epochs and tokens are decimal
/// strings, as on the wire (SPEC.md §6); `omitted` counts the flights left
/// out of an answer too long for one message (SPEC.md §3.5).
fn json(place: &Place, status: Option<&Status>) -> String {
    #[derive(Serialize)]
    struct Report<'a> {
        directory: Option<String>,
        /// Only in cluster mode: a local report is as it always was.
        #[serde(skip_serializing_if = "Option::is_none")]
        cluster: Option<Cluster<'a>>,
        coordinator: Option<Coordinator<'a>>,
        flights: Vec<Flight<'a>>,
        omitted: u64,
    }
    #[derive(Serialize)]
    struct Cluster<'a> {
        name: &'a str,
        etcd: &'a [String],
    }
    #[derive(Serialize)]
    struct Coordinator<'a> {
        pid: u32,
        /// Only in cluster mode: locally the coordinator is on this host.
        #[serde(skip_serializing_if = "Option::is_none")]
        host: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        address: Option<&'a str>,
        epoch: String,
        /// Open (with the runs that wait for it), or `null` (SPEC.md §8.4).
        grace_window: Option<GraceWindow>,
    }
    #[derive(Serialize)]
    struct GraceWindow {
        waiting: u64,
    }
    #[derive(Serialize)]
    struct Flight<'a> {
        key: &'a str,
        token: String,
        joiners: u64,
    }
    let report = Report {
        directory: place
            .directory()
            .map(|directory| directory.to_string_lossy().into_owned()),
        cluster: place.cluster().map(|(name, etcd)| Cluster { name, etcd }),
        coordinator: status.map(|status| Coordinator {
            pid: status.pid,
            host: place.cluster().and(status.host.as_deref()),
            address: status.address.as_deref(),
            epoch: status.epoch.to_string(),
            grace_window: status
                .waiting_in_grace
                .map(|waiting| GraceWindow { waiting }),
        }),
        flights: status
            .map(|status| {
                status
                    .flights
                    .iter()
                    .map(|flight| Flight {
                        key: flight.key.as_str(),
                        token: flight.token.to_string(),
                        joiners: flight.joiners,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        omitted: status.map_or(0, |status| status.omitted),
    };
    serde_json::to_string(&report).expect("a report of strings and numbers serializes")
}

/// The form for people. Keys are quoted and escaped: they may hold any
/// character, a newline included.
fn text(place: &Place, status: &Status) -> String {
    let mut text = match place.cluster() {
        None => format!("directory    {}\n", place.describe()),
        Some((name, etcd)) => format!("cluster      {name} (etcd {})\n", etcd.join(",")),
    };
    let mut coordinator = format!("coordinator  pid {}", status.pid);
    // Locally the coordinator is on this host, and the line is as it was.
    if let Some(host) = place.cluster().and(status.host.as_ref()) {
        coordinator.push_str(&format!(" on {host}"));
    }
    if let Some(address) = &status.address {
        coordinator.push_str(&format!(", at {address}"));
    }
    text.push_str(&format!("{coordinator}, epoch {}\n", status.epoch));
    if let Some(waiting) = status.waiting_in_grace {
        // SPEC.md §8.4: after a failover, new flights wait for the window.
        text.push_str(&format!(
            "grace window open: {waiting} {} for it to end, while the leaders of the last term reassert their flights\n",
            if waiting == 1 { "run waits" } else { "runs wait" }
        ));
    }
    if status.flights.is_empty() && status.omitted == 0 {
        text.push_str("flights      none in progress\n");
        return text;
    }
    text.push_str(&format!(
        "flights      {} in progress\n\n",
        status.flights.len() as u64 + status.omitted
    ));
    let keys: Vec<String> = status
        .flights
        .iter()
        .map(|flight| format!("{:?}", flight.key.as_str()))
        .collect();
    let width = keys
        .iter()
        .map(|key| key.chars().count())
        .max()
        .unwrap_or(0)
        .max(3);
    text.push_str(&format!(
        "  {:width$}  {:>20}  {:>7}\n",
        "KEY", "TOKEN", "JOINERS"
    ));
    for (key, flight) in keys.iter().zip(&status.flights) {
        text.push_str(&format!(
            "  {key:width$}  {:>20}  {:>7}\n",
            flight.token.to_string(),
            flight.joiners
        ));
    }
    if status.omitted > 0 {
        // SPEC.md §3.5: the answer is one line of at most 8 MiB.
        text.push_str(&format!(
            "  … and {} more, after these in key order, that do not fit in one answer\n",
            status.omitted
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use single_flight::Epoch;
    use single_flight::protocol::{FencingToken, FlightStatus, Key};

    fn status(waiting_in_grace: Option<u64>) -> Status {
        Status {
            epoch: Epoch::new(2).unwrap(),
            pid: 42,
            host: Some("ci-7".into()),
            address: None,
            flights: vec![FlightStatus {
                key: Key::new("a\nb").unwrap(),
                token: FencingToken::new(Epoch::FIRST, 7).unwrap(),
                joiners: 0,
            }],
            omitted: 0,
            waiting_in_grace,
            stats: None,
        }
    }

    /// §13.5: both forms say whether the grace window is open, and how many
    /// runs wait for it.
    #[test]
    fn the_grace_window_is_reported() {
        let directory = &Place::Directory("/d".into());
        let open = text(directory, &status(Some(3)));
        assert!(open.contains("grace window open: 3 runs wait"), "{open}");
        assert!(open.contains(r#""a\nb""#), "keys are quoted: {open}");
        let closed = text(directory, &status(None));
        assert!(!closed.contains("grace window"), "{closed}");

        let json_open: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&status(Some(1))))).unwrap();
        assert_eq!(
            json_open["coordinator"]["grace_window"],
            serde_json::json!({"waiting": 1})
        );
        let json_closed: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&status(None)))).unwrap();
        assert_eq!(
            json_closed["coordinator"]["grace_window"],
            serde_json::Value::Null
        );
    }

    /// §13.5: a cluster's report names it, and the coordinator's host and
    /// address; a directory's is as it always was.
    #[test]
    fn the_coordinators_host_and_address_are_reported_in_a_cluster() {
        let directory = &Place::Directory("/d".into());
        let shown = text(directory, &status(None));
        assert!(shown.contains("coordinator  pid 42, epoch 2"), "{shown}");
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&status(None)))).unwrap();
        assert_eq!(report["directory"], "/d");
        assert!(report.get("cluster").is_none());
        assert!(report["coordinator"].get("host").is_none());

        #[cfg(feature = "cluster")]
        {
            let cluster = &Place::Cluster {
                cluster: Box::new(single_flight::Cluster::etcd(["http://e:2379"], "ci")),
                name: "ci".into(),
                etcd: vec!["http://e:2379".into()],
            };
            let mut answer = status(None);
            answer.address = Some("10.0.0.1:7000".into());
            let shown = text(cluster, &answer);
            assert!(
                shown.contains("cluster      ci (etcd http://e:2379)"),
                "{shown}"
            );
            assert!(
                shown.contains("pid 42 on ci-7, at 10.0.0.1:7000, epoch 2"),
                "{shown}"
            );
            let report: serde_json::Value =
                serde_json::from_str(&json(cluster, Some(&answer))).unwrap();
            assert_eq!(report["directory"], serde_json::Value::Null);
            assert_eq!(
                report["cluster"],
                serde_json::json!({"name": "ci", "etcd": ["http://e:2379"]})
            );
            assert_eq!(report["coordinator"]["host"], "ci-7");
            assert_eq!(report["coordinator"]["address"], "10.0.0.1:7000");
        }
    }

    /// §13.5: flights that do not fit in one answer (SPEC.md §3.5) are
    /// counted in both forms.
    #[test]
    fn flights_left_out_of_the_answer_are_counted() {
        let directory = &Place::Directory("/d".into());
        let mut long = status(None);
        long.omitted = 5;
        let shown = text(directory, &long);
        assert!(shown.contains("flights      6 in progress"), "{shown}");
        assert!(shown.contains("and 5 more"), "{shown}");
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&long))).unwrap();
        assert_eq!(report["omitted"], 5);
        let report: serde_json::Value = serde_json::from_str(&json(directory, None)).unwrap();
        assert_eq!(report["omitted"], 0);
    }
}
