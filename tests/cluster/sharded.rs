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
