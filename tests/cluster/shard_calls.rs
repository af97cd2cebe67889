//! A cluster of several shards against a real etcd (SPEC.md §19): a
//! process keeps one client per shard, and each key's calls are decided by
//! its shard's coordinator alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use single_flight::{Cluster, Role, ShardCount, SingleFlight, Status};
use tokio::sync::Notify;

use crate::support::etcd::{self, Etcd};
use crate::support::{PATIENCE, certs};

/// A scratch directory of this test, with the cluster's certificates in
/// `certs`; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("sf-shards-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(path.join("certs")).unwrap();
        certs::make(&path.join("certs"), "").expect("the test certificates");
        Scratch(path)
    }

    /// A member of the cluster `name` of `etcd` with `shards` shards, on
    /// loopback with TLS, reaching it through the host directory in `host`.
    fn member(&self, etcd: &Etcd, name: &str, shards: u32, host: &str) -> Cluster {
        let certs = self.0.join("certs");
        Cluster::etcd(etcd.endpoints(), name)
            .listen("127.0.0.1:0".parse().unwrap())
            .tls(
                certs.join("ca.pem"),
                certs.join("server.pem"),
                certs.join("server.key"),
            )
            .shards(shards)
            .directory(self.0.join(host))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Keys of the four shards of a cluster of four, one each (SPEC.md §19.1's
/// test vectors).
const KEYS: [&str; 4] = ["build:0", "b", "a", "build:1"];

/// Waits until `ready` holds of the answers of every shard's coordinator,
/// looked at through the host.
async fn until(flights: &Cluster, ready: impl Fn(&[Status]) -> bool) -> Vec<Status> {
    let builder = SingleFlight::cluster(flights.clone());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answers: Vec<_> = builder.shard_statuses().await;
        if let Ok(statuses) = answers.into_iter().collect::<Result<Vec<_>, _>>()
            && ready(&statuses)
        {
            return statuses;
        }
        assert!(Instant::now() < deadline, "not ready in {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_4_each_keys_calls_are_decided_by_its_shards_coordinator_alone() {
    if !etcd::available() {
        return;
    }
    let count = ShardCount::new(4).unwrap();
    for (shard, key) in KEYS.iter().enumerate() {
        assert_eq!(count.of_bytes(key.as_bytes()).index() as usize, shard);
    }
    let etcd = Etcd::single();
    let scratch = Scratch::new("each-its-own");
    let member = scratch.member(&etcd, "c", 4, "host");
    let first = SingleFlight::cluster(member.clone())
        .open()
        .await
        .expect("the host's first process opens");
    let second = SingleFlight::cluster(member.clone())
        .open()
        .await
        .expect("the host's second process opens");

    // The first process leads a flight of every shard's key and holds it.
    let runs = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let mut leaders = Vec::new();
    for key in KEYS {
        let (runs, release, first) = (runs.clone(), release.clone(), first.clone());
        leaders.push(tokio::spawn(async move {
            first
                .run(key, move |token| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                    Ok::<_, std::io::Error>(format!("{key} under {token}"))
                })
                .await
        }));
    }
    // Every shard's coordinator has exactly its own key's flight in
    // progress: no shard decided another's key.
    let statuses = until(&member, |statuses| {
        statuses.iter().all(|status| !status.flights.is_empty())
    })
    .await;
    assert_eq!(statuses.len(), 4);
    for (shard, status) in statuses.iter().enumerate() {
        let keys: Vec<_> = status.flights.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, [KEYS[shard]], "shard {shard}: {status:?}");
    }

    // The second process joins each of them through its own shard's client.
    let mut joiners = Vec::new();
    for key in KEYS {
        let second = second.clone();
        joiners.push(tokio::spawn(async move {
            second
                .run(key, |_| async { Ok::<_, std::io::Error>(String::new()) })
                .await
        }));
    }
    until(&member, |statuses| {
        statuses.iter().all(|status| {
            status
                .relay
                .as_ref()
                .is_some_and(|relay| relay.groups.len() == 1 && relay.groups[0].parties == 2)
        })
    })
    .await;
    for _ in KEYS {
        release.notify_one();
    }
    for ((key, leader), joiner) in KEYS.iter().zip(leaders).zip(joiners) {
        let led = leader.await.unwrap().expect("the leader's value");
        let joined = joiner.await.unwrap().expect("the joiner's value");
        assert_eq!((led.role, joined.role), (Role::Led, Role::Joined), "{key}");
        assert_eq!(joined.value, led.value, "{key}");
        assert_eq!(joined.token, led.token, "{key}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4, "each work ran once");
    let stats = second.stats();
    assert_eq!((stats.joined, stats.led), (4, 0), "{stats:?}");
    first.close().await;
    second.close().await;
}

/// §19.5, §17.4: with two shards, `b` is of shard 0 and `a` of shard 1
/// (§19.1's test vectors). A loop within one shard — `b`'s work calling
/// `b` — is refused at once; a loop across the two — `b`'s work calling `a`,
/// whose work calls `b` — is not detected, and waits until its caller's
/// deadline, as §17.4 says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_5_a_loop_within_a_shard_is_refused_and_one_across_shards_is_not() {
    if !etcd::available() {
        return;
    }
    let count = ShardCount::new(2).unwrap();
    assert_eq!(count.of_bytes(b"b").index(), 0);
    assert_eq!(count.of_bytes(b"a").index(), 1);
    let etcd = Etcd::single();
    let scratch = Scratch::new("loops");
    let flights = SingleFlight::cluster(scratch.member(&etcd, "c", 2, "host"))
        .open()
        .await
        .expect("the process opens");

    let within = flights
        .run("b", {
            let flights = flights.clone();
            move |_| async move {
                let inner = flights
                    .run("b", |_| async { Ok::<_, std::io::Error>(()) })
                    .await;
                Ok::<_, std::io::Error>(format!("{inner:?}"))
            }
        })
        .await
        .expect("the outer call leads and lands");
    assert!(within.value.starts_with("Err(Cycle"), "{}", within.value);

    let across = flights
        .run("b", {
            let flights = flights.clone();
            move |_| async move {
                let inner = flights
                    .run("a", {
                        let flights = flights.clone();
                        move |_| async move {
                            let innermost = flights
                                .call("b")
                                .deadline(Duration::from_secs(1))
                                .run(|_| async { Ok::<_, std::io::Error>(()) })
                                .await;
                            Ok::<_, std::io::Error>(format!("{innermost:?}"))
                        }
                    })
                    .await;
                Ok::<_, std::io::Error>(format!("{inner:?}"))
            }
        })
        .await
        .expect("the outer call leads and lands");
    assert!(
        across.value.contains("DeadlineExceeded") && !across.value.contains("Cycle"),
        "{}",
        across.value
    );
    flights.close().await;
}
