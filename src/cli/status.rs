//! `single-flight status` (SPEC.md §13.5): one look at a directory's
//! coordinator and its flights in progress (SPEC.md §3.5).

use serde::Serialize;
use single_flight::{CoordinatorStats, HostCoordinator, HostsStatus, Status, StatusError};

use super::exit;
use super::metrics;
use super::place::Place;
use super::{Format, StatusArgs};

/// What the command says of a coordinator that does not report counters
/// (SPEC.md §3.5, §13.5).
const NO_COUNTERS: &str = "the coordinator does not report counters (older version)";

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
    // `--json` is short for `--format json`; clap refuses both at once.
    let format = if args.json { Format::Json } else { args.format };
    if place.shard_count().get() > 1 {
        return shards(&place, format).await;
    }
    // A directory that does not exist has no coordinator; `status` creates
    // nothing.
    let answer = match place.directory() {
        Some(directory) if !directory.exists() => None,
        _ => Some(place.status().await),
    };
    match answer {
        Some(Ok(status)) => {
            match format {
                Format::Text => print!("{}", text(&place, &status)),
                Format::Json => println!("{}", json(&place, Some(&status))),
                Format::Openmetrics => {
                    if status.stats.is_none() {
                        // The format has no comments: people read stderr.
                        eprintln!("single-flight: {NO_COUNTERS}");
                    }
                    print!("{}", openmetrics(&place, Some(&status)));
                }
            }
            exit::SUCCESS
        }
        None | Some(Err(StatusError::NoCoordinator { .. })) => {
            match format {
                Format::Text => println!(
                    "no coordinator runs in {}: no process uses it now",
                    place.describe()
                ),
                Format::Json => println!("{}", json(&place, None)),
                Format::Openmetrics => print!("{}", openmetrics(&place, None)),
            }
            exit::NOT_RUNNING
        }
        Some(Err(error @ StatusError::NotAnswering { .. })) => {
            // No coordinator answers, as above, but the cluster is in use:
            // the text says why instead of "no process uses it".
            match format {
                Format::Text => println!("{error}"),
                Format::Json => println!("{}", json(&place, None)),
                Format::Openmetrics => print!("{}", openmetrics(&place, None)),
            }
            exit::NOT_RUNNING
        }
        Some(Err(error)) => {
            eprintln!("single-flight: {error}");
            exit::FAILED
        }
    }
}

/// The status of a cluster of several shards (SPEC.md §19.6): one look at
/// each shard's coordinator, shown in shard order. Exits 125 when a look
/// failed (said on stderr too), 3 when some shard has no coordinator, and
/// 0 when every shard's coordinator answered.
async fn shards(place: &Place, format: Format) -> u8 {
    let answers = place.shard_statuses().await;
    let count = answers.len();
    let mut code = exit::SUCCESS;
    for answer in &answers {
        match answer {
            Ok(_) => {}
            Err(StatusError::NoCoordinator { .. } | StatusError::NotAnswering { .. }) => {
                if code == exit::SUCCESS {
                    code = exit::NOT_RUNNING;
                }
            }
            Err(error) => {
                eprintln!("single-flight: {error}");
                code = exit::FAILED;
            }
        }
    }
    match format {
        Format::Text => {
            for (shard, answer) in answers.iter().enumerate() {
                println!("shard {shard} of {count}:");
                let shown = match answer {
                    Ok(status) => text(place, status),
                    Err(StatusError::NoCoordinator { .. }) => {
                        "no coordinator runs for this shard: no process uses it now\n".to_owned()
                    }
                    Err(error) => format!("{error}\n"),
                };
                for line in shown.lines() {
                    println!("  {line}");
                }
            }
        }
        Format::Json => {
            let reports: Vec<serde_json::Value> = answers
                .iter()
                .enumerate()
                .map(|(shard, answer)| {
                    let report = json(place, answer.as_ref().ok());
                    let mut report: serde_json::Value =
                        serde_json::from_str(&report).expect("the report is JSON");
                    report["shard"] = shard.into();
                    report["shards"] = count.into();
                    report
                })
                .collect();
            println!("{}", serde_json::Value::from(reports));
        }
        Format::Openmetrics => {
            let statuses: Vec<_> = answers.iter().map(|answer| answer.as_ref().ok()).collect();
            let name = place.cluster().map_or("", |(name, _)| name);
            print!(
                "{}",
                metrics::exposition_of_shards("cluster", name, &statuses)
            );
        }
    }
    code
}

/// The OpenMetrics form, labelled with the directory or the cluster's name.
fn openmetrics(place: &Place, status: Option<&Status>) -> String {
    match (place.directory(), place.cluster()) {
        (_, Some((name, _))) => metrics::exposition("cluster", name, status),
        (directory, None) => metrics::exposition(
            "directory",
            &directory.map_or_else(|| place.describe(), |d| d.to_string_lossy().into_owned()),
            status,
        ),
    }
}

/// The `--json` form (see `status --help`). Epochs and tokens are decimal
/// strings, as on the wire (SPEC.md §6); `omitted` counts the flights left
/// out of an answer too long for one message (SPEC.md §3.5).
fn json(place: &Place, status: Option<&Status>) -> String {
    #[derive(Serialize)]
    struct Report<'a> {
        directory: Option<String>,
        /// Only in cluster mode: a directory's report has no `cluster`.
        #[serde(skip_serializing_if = "Option::is_none")]
        cluster: Option<Cluster<'a>>,
        /// Only when asked through a host coordinator (SPEC.md §18.3).
        #[serde(skip_serializing_if = "Option::is_none")]
        host_coordinator: Option<HostReport<'a>>,
        coordinator: Option<Coordinator<'a>>,
        flights: Vec<Flight<'a>>,
        omitted: u64,
    }
    #[derive(Serialize)]
    struct HostReport<'a> {
        pid: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        host: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        host_id: Option<&'a str>,
        epoch: String,
        connections: u64,
        groups: Vec<Group<'a>>,
        omitted: u64,
    }
    #[derive(Serialize)]
    struct Group<'a> {
        key: &'a str,
        token: Option<String>,
        parties: u64,
    }
    #[derive(Serialize)]
    struct Cluster<'a> {
        name: &'a str,
        etcd: &'a [String],
        /// Only with TLS: each certificate file this process uses
        /// (SPEC.md §13.5).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        certificates: Vec<Certificate>,
    }
    #[derive(Serialize)]
    struct Certificate {
        file: String,
        /// RFC 3339, or `null` when the file cannot be read (`error`).
        not_after: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
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
        /// The term's counters, or `null` from a coordinator too old to
        /// count (SPEC.md §3.5).
        stats: Option<Stats>,
        /// Only from a cluster's coordinator: its connections by host
        /// (SPEC.md §3.5, §18.2). A directory's has no hosts.
        #[serde(skip_serializing_if = "Option::is_none")]
        hosts: Option<&'a HostsStatus>,
    }
    #[derive(Serialize)]
    struct Stats {
        #[serde(flatten)]
        counted: CoordinatorStats,
        dedupe_ratio: Option<f64>,
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
        /// Only for a detached flight (SPEC.md §15.2).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        detached: bool,
    }
    let report = Report {
        directory: place
            .directory()
            .map(|directory| directory.to_string_lossy().into_owned()),
        cluster: place.cluster().map(|(name, etcd)| Cluster {
            name,
            etcd,
            certificates: place
                .certificate_expiries()
                .into_iter()
                .map(|(file, expiry)| Certificate {
                    file: file.to_string_lossy().into_owned(),
                    not_after: expiry.as_ref().ok().cloned(),
                    error: expiry.err(),
                })
                .collect(),
        }),
        host_coordinator: status
            .and_then(|status| status.relay.as_ref())
            .map(|relay| HostReport {
                pid: relay.pid,
                host: relay.host.as_deref(),
                host_id: relay.id.as_ref().map(|id| id.as_str()),
                epoch: relay.epoch.to_string(),
                connections: relay.connections,
                groups: relay
                    .groups
                    .iter()
                    .map(|group| Group {
                        key: group.key.as_str(),
                        token: group.token.map(|token| token.to_string()),
                        parties: group.parties,
                    })
                    .collect(),
                omitted: relay.omitted_groups,
            }),
        coordinator: status.map(|status| Coordinator {
            pid: status.pid,
            host: place.cluster().and(status.host.as_deref()),
            address: status.address.as_deref(),
            epoch: status.epoch.to_string(),
            grace_window: status
                .waiting_in_grace
                .map(|waiting| GraceWindow { waiting }),
            stats: status.stats.map(|counted| Stats {
                counted,
                dedupe_ratio: counted.dedupe_ratio(),
            }),
            hosts: status.hosts.as_ref(),
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
                        detached: flight.detached,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        omitted: status.map_or(0, |status| status.omitted),
    };
    // A ratio is finite or absent, never NaN, so it serializes too.
    serde_json::to_string(&report).expect("a report of strings and numbers serializes")
}

/// The form for people. Keys are quoted and escaped: they may hold any
/// character, a newline included.
fn text(place: &Place, status: &Status) -> String {
    let mut text = match place.cluster() {
        None => format!("directory    {}\n", place.describe()),
        Some((name, etcd)) => format!("cluster      {name} (etcd {})\n", etcd.join(",")),
    };
    // SPEC.md §13.5: when each certificate file this process uses expires.
    for (file, expiry) in place.certificate_expiries() {
        match expiry {
            Ok(not_after) => text.push_str(&format!(
                "certificate  {} expires at {not_after}\n",
                file.display()
            )),
            Err(error) => text.push_str(&format!("certificate  {error}\n")),
        }
    }
    if let Some(relay) = &status.relay {
        text.push_str(&host_coordinator(relay));
    }
    let mut coordinator = format!("coordinator  pid {}", status.pid);
    // Locally the coordinator is on this host, so the line names no host.
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
    text.push_str(&counted(status.stats.as_ref()));
    if let Some(hosts) = &status.hosts
        && place.cluster().is_some()
    {
        text.push_str(&connections(hosts));
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
        // §15.2: its leader's caller left; it goes on for its joiners.
        let detached = if flight.detached { "  detached" } else { "" };
        text.push_str(&format!(
            "  {key:width$}  {:>20}  {:>7}{detached}\n",
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

/// The host coordinator that was asked, for people (SPEC.md §18.3): its
/// term and process, and what it serves.
fn host_coordinator(relay: &HostCoordinator) -> String {
    let plural = |count: u64, one: &str, many: &str| {
        format!("{count} {}", if count == 1 { one } else { many })
    };
    let mut line = format!("host         pid {}", relay.pid);
    if let Some(host) = &relay.host {
        line.push_str(&format!(" on {host}"));
    }
    if let Some(id) = &relay.id {
        line.push_str(&format!(", host id {id}"));
    }
    line.push_str(&format!(
        ", epoch {}: {}, {} relayed to the cluster's coordinator\n",
        relay.epoch,
        plural(relay.connections, "connection", "connections"),
        plural(
            relay.groups.len() as u64 + relay.omitted_groups,
            "group",
            "groups"
        ),
    ));
    for group in &relay.groups {
        let token = group.token.map_or_else(
            || "not answered yet".to_owned(),
            |token| format!("token {token}"),
        );
        line.push_str(&format!(
            "             {:?}: {}, {token}\n",
            group.key.as_str(),
            plural(group.parties, "caller", "callers"),
        ));
    }
    if relay.omitted_groups > 0 {
        line.push_str(&format!(
            "             … and {} more that do not fit in one answer\n",
            relay.omitted_groups
        ));
    }
    line
}

/// The cluster's coordinator's connections by host, for people (SPEC.md
/// §3.5, §18.2).
fn connections(hosts: &HostsStatus) -> String {
    let connected = hosts
        .relays
        .iter()
        .filter(|host| host.connections > 0)
        .count();
    let mut text = format!(
        "connections  {} direct, {} {} relaying\n",
        hosts.direct,
        connected,
        if connected == 1 { "host" } else { "hosts" }
    );
    for host in &hosts.relays {
        let mut line = if host.connections > 0 {
            format!(
                "             {}: relaying, {} open",
                host.host,
                if host.parties == 1 {
                    "1 party".to_owned()
                } else {
                    format!("{} parties", host.parties)
                }
            )
        } else {
            format!("             {}: no connection", host.host)
        };
        if host.window {
            line.push_str(&format!(
                ", relay window open with {} orphaned",
                host.orphans
            ));
        }
        text.push_str(&line);
        text.push('\n');
    }
    if hosts.omitted > 0 {
        text.push_str(&format!(
            "             … and {} more hosts that do not fit in one answer\n",
            hosts.omitted
        ));
    }
    text
}

/// The counters of the term, for people (SPEC.md §8.11).
fn counted(stats: Option<&CoordinatorStats>) -> String {
    let Some(stats) = stats else {
        return format!("counters     {NO_COUNTERS}\n");
    };
    let plural = |count: u64, one: &str, many: &str| {
        format!("{count} {}", if count == 1 { one } else { many })
    };
    let dedupe = match stats.dedupe_ratio() {
        Some(ratio) => format!(
            "{:.0}% of the runs answered did not run the work",
            ratio * 100.0
        ),
        None => "no run answered yet".to_owned(),
    };
    format!(
        "this term    {}, {}: {dedupe}\n\
         \x20            {} with a value, {} with a failure, {}\n\
         \x20            {} accepted, {} rejected, {}, {}\n\
         \x20            {} open, {} refused\n",
        plural(stats.flights_led, "flight led", "flights led"),
        plural(stats.joins, "join", "joins"),
        plural(stats.lands_value, "land", "lands"),
        stats.lands_failure,
        plural(stats.interruptions, "interruption", "interruptions"),
        plural(stats.reasserts_accepted, "reassert", "reasserts"),
        stats.reasserts_rejected,
        plural(stats.rejoins, "rejoin", "rejoins"),
        plural(stats.grace_windows, "grace window", "grace windows"),
        plural(stats.connections_open, "connection", "connections"),
        stats.connections_refused,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use single_flight::Epoch;
    use single_flight_core::protocol::{FencingToken, FlightStatus, Key};

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
                detached: false,
            }],
            omitted: 0,
            waiting_in_grace,
            stats: Some(CoordinatorStats {
                flights_led: 1,
                joins: 3,
                ..CoordinatorStats::default()
            }),
            hosts: None,
            relay: None,
        }
    }

    /// §13.5: both forms say whether the grace window is open, and how many
    /// runs wait for it.
    #[test]
    fn the_grace_window_is_reported() {
        let directory = &Place::from(single_flight::SingleFlight::builder("/d"));
        let open = text(directory, &status(Some(3)));
        assert!(open.contains("grace window open: 3 runs wait"), "{open}");
        assert!(open.contains(r#""a\nb""#), "keys are quoted: {open}");
        let closed = text(directory, &status(None));
        assert!(!closed.contains("grace window open"), "{closed}");

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
    /// address; a directory's names neither a cluster nor a host.
    #[test]
    fn the_coordinators_host_and_address_are_reported_in_a_cluster() {
        let directory = &Place::from(single_flight::SingleFlight::builder("/d"));
        let shown = text(directory, &status(None));
        assert!(shown.contains("coordinator  pid 42, epoch 2"), "{shown}");
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&status(None)))).unwrap();
        assert_eq!(report["directory"], "/d");
        assert!(report.get("cluster").is_none());
        assert!(report["coordinator"].get("host").is_none());

        #[cfg(feature = "cluster")]
        {
            let cluster = &Place::from(single_flight::SingleFlight::cluster(
                single_flight::Cluster::etcd(["http://e:2379"], "ci"),
            ));
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

    /// §13.5, §14.5: in a cluster with TLS both forms show when each
    /// certificate file this process uses expires, or why that cannot be
    /// read.
    #[cfg(feature = "cluster")]
    #[test]
    fn each_certificates_expiry_is_reported_in_a_cluster() {
        // A certificate whose notAfter is 2036-02-29T12:34:56Z.
        // The expiry walk's own test certificate (src/transport/tcp/tls.rs).
        const CERTIFICATE: &str = include_str!("../transport/tcp/testdata/utc-time.pem");
        let directory =
            std::env::temp_dir().join(format!("sf-status-certificate-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let file = directory.join("host.pem");
        std::fs::write(&file, CERTIFICATE).unwrap();
        // The same certificate stands for the CA: only its dates are read.
        let ca = directory.join("ca.pem");
        std::fs::write(&ca, CERTIFICATE).unwrap();
        let place = |certificate: &std::path::Path| {
            Place::from(single_flight::SingleFlight::cluster(
                single_flight::Cluster::etcd(["http://e:2379"], "ci").tls(
                    &ca,
                    certificate,
                    "host.key",
                ),
            ))
        };
        let shown = text(&place(&file), &status(None));
        for shown_file in [&file, &ca] {
            assert!(
                shown.contains(&format!(
                    "certificate  {} expires at 2036-02-29T12:34:56Z\n",
                    shown_file.display()
                )),
                "{shown}"
            );
        }
        let report: serde_json::Value =
            serde_json::from_str(&json(&place(&file), Some(&status(None)))).unwrap();
        assert_eq!(
            report["cluster"]["certificates"],
            serde_json::json!([
                {"file": file.to_str().unwrap(), "not_after": "2036-02-29T12:34:56Z"},
                {"file": ca.to_str().unwrap(), "not_after": "2036-02-29T12:34:56Z"},
            ])
        );

        let missing = directory.join("missing.pem");
        let shown = text(&place(&missing), &status(None));
        assert!(
            shown.contains(&format!(
                "certificate  cannot read the certificate file {}",
                missing.display()
            )),
            "{shown}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&json(&place(&missing), None)).unwrap();
        assert_eq!(
            report["cluster"]["certificates"][0]["not_after"],
            serde_json::Value::Null
        );
        assert!(report["cluster"]["certificates"][0]["error"].is_string());

        let insecure = Place::from(single_flight::SingleFlight::cluster(
            single_flight::Cluster::etcd(["http://e:2379"], "ci").insecure(),
        ));
        assert!(!text(&insecure, &status(None)).contains("certificate"));
        let report: serde_json::Value = serde_json::from_str(&json(&insecure, None)).unwrap();
        assert!(report["cluster"].get("certificates").is_none());
        std::fs::remove_dir_all(&directory).unwrap();
    }

    /// §13.5, §8.11: the text and JSON forms show the term's counters and
    /// the dedupe ratio, and say so when the coordinator does not count.
    #[test]
    fn the_counters_are_reported_or_said_to_be_missing() {
        let directory = &Place::from(single_flight::SingleFlight::builder("/d"));
        let shown = text(directory, &status(None));
        assert!(
            shown.contains("this term    1 flight led, 3 joins: 75% of the runs answered did not run the work\n"),
            "{shown}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&status(None)))).unwrap();
        assert_eq!(report["coordinator"]["stats"]["joins"], 3);
        assert_eq!(report["coordinator"]["stats"]["dedupe_ratio"], 0.75);

        let mut fresh = status(None);
        fresh.stats = Some(CoordinatorStats::default());
        let shown = text(directory, &fresh);
        assert!(shown.contains("0 joins: no run answered yet"), "{shown}");
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&fresh))).unwrap();
        assert_eq!(
            report["coordinator"]["stats"]["dedupe_ratio"],
            serde_json::Value::Null
        );

        let mut older = status(None);
        older.stats = None;
        let shown = text(directory, &older);
        assert!(
            shown.contains(
                "counters     the coordinator does not report counters (older version)\n"
            ),
            "{shown}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&json(directory, Some(&older))).unwrap();
        assert_eq!(report["coordinator"]["stats"], serde_json::Value::Null);
    }

    /// §13.5, §3.5: asked through a host coordinator in a cluster, both
    /// forms show the host coordinator and its groups, and the cluster's
    /// coordinator's connections by host.
    #[cfg(feature = "cluster")]
    #[test]
    fn both_levels_of_the_host_tier_are_reported() {
        use single_flight::{GroupStatus, HostId, HostStatus};
        let cluster = &Place::from(single_flight::SingleFlight::cluster(
            single_flight::Cluster::etcd(["http://e:2379"], "ci"),
        ));
        let mut answer = status(None);
        answer.hosts = Some(HostsStatus {
            direct: 1,
            relays: vec![
                HostStatus {
                    host: HostId::new("build-7").unwrap(),
                    connections: 1,
                    parties: 2,
                    window: false,
                    orphans: 0,
                },
                HostStatus {
                    host: HostId::new("build-8").unwrap(),
                    connections: 0,
                    parties: 0,
                    window: true,
                    orphans: 1,
                },
            ],
            omitted: 0,
        });
        answer.relay = Some(HostCoordinator {
            epoch: Epoch::new(5).unwrap(),
            pid: 7,
            host: Some("b7".into()),
            id: Some(HostId::new("build-7").unwrap()),
            connections: 250,
            groups: vec![GroupStatus {
                key: Key::new("k").unwrap(),
                token: Some(FencingToken::new(Epoch::FIRST, 7).unwrap()),
                parties: 250,
            }],
            omitted_groups: 0,
        });
        let shown = text(cluster, &answer);
        for line in [
            "host         pid 7 on b7, host id build-7, epoch 5: 250 connections, 1 group relayed to the cluster's coordinator\n",
            "             \"k\": 250 callers, token 4294967303\n",
            "coordinator  pid 42 on ci-7, epoch 2\n",
            "connections  1 direct, 1 host relaying\n",
            "             build-7: relaying, 2 parties open\n",
            "             build-8: no connection, relay window open with 1 orphaned\n",
        ] {
            assert!(shown.contains(line), "{line:?} in:\n{shown}");
        }
        let report: serde_json::Value =
            serde_json::from_str(&json(cluster, Some(&answer))).unwrap();
        assert_eq!(
            report["host_coordinator"],
            serde_json::json!({"pid": 7, "host": "b7", "host_id": "build-7", "epoch": "5",
                "connections": 250, "omitted": 0,
                "groups": [{"key": "k", "token": "4294967303", "parties": 250}]})
        );
        assert_eq!(report["coordinator"]["hosts"]["direct"], 1);
        assert_eq!(
            report["coordinator"]["hosts"]["relays"][1],
            serde_json::json!({"host": "build-8", "connections": 0, "parties": 0,
                "window": true, "orphans": 1})
        );
        let directly: serde_json::Value =
            serde_json::from_str(&json(cluster, Some(&status(None)))).unwrap();
        assert!(directly.get("host_coordinator").is_none());
        assert_eq!(directly["coordinator"]["hosts"], serde_json::Value::Null);
    }

    /// §13.5: flights that do not fit in one answer (SPEC.md §3.5) are
    /// counted in both forms.
    #[test]
    fn flights_left_out_of_the_answer_are_counted() {
        let directory = &Place::from(single_flight::SingleFlight::builder("/d"));
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
