//! The host tier against a real etcd (SPEC.md §18): processes of one host
//! meet in a host directory, and its coordinator alone reaches the
//! cluster, over TCP with mutual TLS and the relay hello.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use single_flight::_internal::transport::unix::UnixTransport;
use single_flight::_internal::transport::{Connection, Transport};
use single_flight::{Cluster, Role, SingleFlight};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, oneshot};

use crate::support::etcd::{self, Etcd};
use crate::support::{PATIENCE, certs};

/// A scratch directory of this test, with the cluster's certificates in
/// `certs`; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("sf-tier-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(path.join("certs")).unwrap();
        certs::make(&path.join("certs"), "").expect("the test certificates");
        Scratch(path)
    }

    /// A member of the cluster `name` of `etcd`, on loopback with TLS.
    fn cluster(&self, etcd: &Etcd, name: &str) -> Cluster {
        let certs = self.0.join("certs");
        Cluster::etcd(etcd.endpoints(), name)
            .listen("127.0.0.1:0".parse().unwrap())
            .tls(
                certs.join("ca.pem"),
                certs.join("server.pem"),
                certs.join("server.key"),
            )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process of the host that speaks the protocol itself (SPEC.md §4), so
/// that the test knows when its call is answered `joined`.
struct Raw {
    lines: tokio::io::Lines<BufReader<<UnixTransport as Transport>::Reader>>,
    writer: <UnixTransport as Transport>::Writer,
}

impl Raw {
    async fn connect(directory: &Path) -> Raw {
        let transport = UnixTransport::new(directory).expect("the host directory's socket");
        let Connection { reader, writer } = transport
            .connect(&())
            .await
            .expect("the host coordinator listens");
        let mut raw = Raw {
            lines: BufReader::new(reader).lines(),
            writer,
        };
        raw.send(r#"{"protocol":"single-flight","version":1}"#)
            .await;
        let hello = raw.line().await;
        assert!(
            hello.contains(r#""epoch""#),
            "the host coordinator's hello: {hello}"
        );
        raw
    }

    async fn send(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("an answer in time")
            .expect("the connection reads")
            .expect("a line")
    }
}

/// §18.1, §18.3: a `serve` holds the cluster's term; processes of one host
/// share a host directory, and the one that coordinates it relays to the
/// cluster over TCP with mutual TLS. A call of each process of the host for
/// one key is one party at the cluster's coordinator: the first caller
/// leads under the cluster's token, the second is answered `joined` by the
/// host coordinator without a party at the cluster, the work runs once and
/// both get its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s18_3_a_hosts_two_processes_are_one_party_at_the_cluster() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let scratch = Scratch::new("one-party");
    let (stop, stopped) = oneshot::channel::<()>();
    // The `serve` and the look at the cluster reach it directly (§18.6),
    // as processes of other hosts.
    let serve = SingleFlight::cluster(scratch.cluster(&etcd, "c").direct());
    let serving = tokio::spawn(async move {
        serve
            .serve(async {
                let _ = stopped.await;
            })
            .await
    });
    let status = SingleFlight::cluster(scratch.cluster(&etcd, "c").direct());
    let deadline = Instant::now() + PATIENCE;
    while status.status().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "no cluster coordinator in {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let member = scratch
        .cluster(&etcd, "c")
        .directory(scratch.0.join("host"));
    let host = member.host_directory().expect("a host directory");
    let first = SingleFlight::cluster(member)
        .open()
        .await
        .expect("the host directory opens");
    let runs = Arc::new(AtomicUsize::new(0));
    let leading = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let leader = tokio::spawn({
        let (runs, leading, release) = (runs.clone(), leading.clone(), release.clone());
        async move {
            let landed = first
                .run("k", move |token| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    leading.notify_one();
                    release.notified().await;
                    Ok::<_, std::io::Error>(format!("made under {token}"))
                })
                .await;
            first.close().await;
            landed
        }
    });
    tokio::time::timeout(PATIENCE, leading.notified())
        .await
        .expect("the first call leads");
    // The first process coordinates the host directory: it won its claim
    // to make its call.
    let mut second = Raw::connect(&host).await;
    second.send(r#"{"op":"run","id":"b","key":"k"}"#).await;
    let joined = second.line().await;
    assert!(
        joined.contains(r#""op":"joined""#),
        "the second call: {joined}"
    );
    let look = status.status().await.expect("the cluster answers");
    let flight = look
        .flights
        .iter()
        .find(|flight| flight.key.as_str() == "k")
        .expect("the flight of k at the cluster")
        .clone();
    assert_eq!(flight.joiners, 0, "the host is one party at the cluster");
    assert!(
        joined.contains(&format!(r#""flight":"{}""#, flight.token)),
        "joined under the cluster's token: {joined}"
    );

    // §3.5: the cluster's coordinator lists the host's one relay
    // connection, with its one party, apart from its direct connections.
    let cluster_hosts = look.hosts.clone().expect("the cluster reports its hosts");
    assert_eq!(cluster_hosts.relays.len(), 1, "{cluster_hosts:?}");
    let relayed = &cluster_hosts.relays[0];
    assert_eq!(
        (relayed.connections, relayed.parties, relayed.window),
        (1, 1, false),
        "{cluster_hosts:?}"
    );
    assert!(look.relay.is_none(), "asked directly: {look:?}");
    // Asked through the host, `status` describes both levels: the host
    // coordinator (its term, its host id, its two callers of k in one
    // group under the cluster's token), and the cluster's coordinator,
    // whose term, flights and hosts the direct look showed.
    let through_host = SingleFlight::cluster(
        scratch
            .cluster(&etcd, "c")
            .directory(scratch.0.join("host")),
    )
    .status()
    .await
    .expect("the host coordinator answers");
    let relay = through_host
        .relay
        .clone()
        .expect("the host coordinator's view");
    assert_eq!(
        relay.id.as_ref(),
        Some(&relayed.host),
        "one host id at both levels"
    );
    assert_eq!(
        relay.connections, 3,
        "two processes of the host and the asker: {relay:?}"
    );
    assert_eq!(relay.groups.len(), 1, "{relay:?}");
    assert_eq!(
        (
            relay.groups[0].key.as_str(),
            relay.groups[0].token,
            relay.groups[0].parties
        ),
        ("k", Some(flight.token), 2)
    );
    assert_eq!(
        (through_host.epoch, through_host.pid, &through_host.flights),
        (look.epoch, look.pid, &look.flights),
        "the cluster's coordinator, as the direct look saw it"
    );
    assert_eq!(
        through_host.hosts.map(|hosts| hosts.relays),
        Some(cluster_hosts.relays.clone()),
        "the cluster's hosts, carried through"
    );
    release.notify_one();
    let led = leader.await.unwrap().expect("the leader's value");
    assert_eq!(led.role, Role::Led);
    assert_eq!(led.token, flight.token, "the cluster's token");
    let landed = second.line().await;
    assert!(
        landed.contains(r#""op":"landed""#) && landed.contains(&led.token.to_string()),
        "the second call receives the value: {landed}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the work ran once");

    let _ = stop.send(());
    serving.await.unwrap().expect("the serve ends cleanly");
}
