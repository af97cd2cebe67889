//! The shards of a cluster in etcd (SPEC.md §19.2, §19.3): the count that
//! a cluster keeps and the processes it refuses, and a term per shard.

use std::time::Duration;

use single_flight::_internal::election::etcd::client::Client;
use single_flight::_internal::election::etcd::{
    self as etcd_election, EtcdElection, EtcdError, EtcdOptions, REQUEST_TIMEOUT,
};
use single_flight::_internal::election::{Election, Term};
use single_flight::{Cluster, RunError, SingleFlight, Unavailable};
use single_flight_core::protocol::ShardCount;

use crate::support::etcd::{self, Etcd};

/// The options of shard `index` of `count` of the cluster `cluster`.
fn options(etcd: &Etcd, cluster: &str, index: u32, count: u64) -> EtcdOptions {
    let mut options = EtcdOptions::new(etcd.endpoints(), cluster);
    options.ttl = Duration::from_secs(2);
    options.shard = ShardCount::new(count)
        .expect("a count")
        .shard(index)
        .expect("a shard of it");
    options
}

async fn election(options: &EtcdOptions, advertise: &str) -> EtcdElection {
    EtcdElection::connect(options, advertise.to_owned())
        .await
        .expect("etcd answers")
}

/// The value of `key`, if it exists.
async fn value(client: &Client, key: &str) -> Option<String> {
    let answer = client.get(key).await.expect("etcd answers");
    answer
        .kvs
        .first()
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
}

fn client(etcd: &Etcd) -> Client {
    Client::connect(&etcd.endpoints(), None, REQUEST_TIMEOUT).expect("a client")
}

/// Asserts that `error` is §19.2's refusal, not an outage, and that its
/// message holds every one of `words`.
fn assert_refused(error: &EtcdError, words: &[&str]) {
    assert!(matches!(error, EtcdError::EtcdShardCount { .. }), "{error}");
    assert!(!EtcdElection::is_outage(error), "not tried again: {error}");
    let message = error.to_string();
    for word in words {
        assert!(message.contains(word), "{word:?} in {message}");
    }
}

/// Asserts that a process of `options` is refused, naming every one of
/// `named`, both when it looks for the coordinator and when it campaigns
/// (as `serve` does).
async fn assert_every_way_refused(options: &EtcdOptions, named: &[&str]) {
    let error = election(options, "10.0.0.2:1")
        .await
        .coordinator()
        .await
        .unwrap_err();
    assert_refused(&error, named);
    let error = election(options, "10.0.0.2:1")
        .await
        .campaign()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_refused(&error, named);
}

/// §19.2: a cluster first used with 4 shards keeps the count in etcd; a
/// process configured with 2 is refused at its first discovery, at a
/// campaign (as `serve` makes it) and by `status`, and a process of one
/// shard through the library has its call end `Unavailable` at once, each
/// naming the cluster, both numbers and the key.
#[tokio::test]
async fn s19_2_a_process_of_another_count_is_refused_naming_both() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut four = election(&options(&etcd, "c", 0, 4), "10.0.0.1:1").await;
    assert_eq!(four.coordinator().await.unwrap(), None);
    let term = four.campaign().await.unwrap().expect("the first term");
    let client = client(&etcd);
    assert_eq!(
        value(&client, "single-flight/c/shards").await.as_deref(),
        Some("4")
    );
    let two = options(&etcd, "c", 0, 2);
    let named = [
        "cluster \"c\" has 4 shards",
        "single-flight/c/shards",
        "configured with 2",
        "give it 4",
    ];
    assert_every_way_refused(&two, &named).await;
    let error = etcd_election::read_coordinator(&two).await.unwrap_err();
    assert_refused(&error, &named);
    // The library, with one shard: its call is refused, not retried until
    // a deadline (it has none).
    let cluster = Cluster::etcd(etcd.endpoints(), "c").insecure().direct();
    let flights = SingleFlight::cluster(cluster).open().await.expect("opens");
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        flights.run("k", |_| async { Ok::<_, std::io::Error>(()) }),
    )
    .await
    .expect("the call ends without waiting for etcd");
    match outcome {
        Err(RunError::Unavailable(unavailable))
            if matches!(*unavailable, Unavailable::Backend(_)) =>
        {
            let message = unavailable.to_string();
            for word in [
                "has 4 shards",
                "configured with 1",
                "single-flight/c/shards",
            ] {
                assert!(message.contains(word), "{word:?} in {message}");
            }
        }
        other => panic!("refused, not {other:?}"),
    }
    flights.close().await;
    term.resign(true).await;
}

/// §19.2: a cluster whose epoch key exists without a count was used
/// before shards, with one: a process of 4 is refused, one of 1 goes on
/// with the cluster's epochs, and nothing records a count for it. A count
/// that is not one fails every process closed, naming the key.
#[tokio::test]
async fn s19_2_a_cluster_used_before_shards_has_one() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let one = options(&etcd, "old", 0, 1);
    let mut first = election(&one, "10.0.0.1:1").await;
    let term = first.campaign().await.unwrap().expect("the first term");
    assert_eq!(term.epoch().get(), 1);
    term.resign(true).await;
    let client = client(&etcd);
    assert_eq!(value(&client, "single-flight/old/shards").await, None);
    let four = options(&etcd, "old", 2, 4);
    let named = [
        "cluster \"old\" has 1 shard ",
        "used before shards",
        "single-flight/old/epoch",
        "configured with 4",
        "give it 1",
    ];
    assert_every_way_refused(&four, &named).await;
    assert_eq!(value(&client, "single-flight/old/shards").await, None);
    let mut again = election(&one, "10.0.0.3:1").await;
    assert_eq!(again.coordinator().await.unwrap(), None);
    let term = again.campaign().await.unwrap().expect("the next term");
    assert_eq!(term.epoch().get(), 2);
    term.resign(true).await;
    assert_eq!(value(&client, "single-flight/old/shards").await, None);
    // §19.2: fails closed on a count that is not one.
    client
        .put("single-flight/old/shards", "4 ", 0)
        .await
        .unwrap();
    let error = election(&one, "10.0.0.3:1")
        .await
        .coordinator()
        .await
        .unwrap_err();
    assert!(
        matches!(error, EtcdError::EtcdShardsCorrupt { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("single-flight/old/shards"),
        "{error}"
    );
}

/// §19.2, §19.3: two shards of one cluster each win a term at once, with
/// epochs of their own, under their own keys; each term's host key names
/// its host (the host id given, or else the advertised address without its
/// port) and goes
/// with its lease; the next term of one shard leaves the other's alone.
#[tokio::test]
async fn s19_3_two_shards_win_terms_at_once_with_their_own_epochs() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut zero_options = options(&etcd, "sharded", 0, 2);
    zero_options.host = Some("host-a".to_owned());
    let mut zero = election(&zero_options, "10.0.0.1:1").await;
    let mut one = election(&options(&etcd, "sharded", 1, 2), "10.0.0.2:1").await;
    assert_eq!(zero.coordinator().await.unwrap(), None);
    assert_eq!(one.coordinator().await.unwrap(), None);
    let (won_zero, won_one) = tokio::join!(zero.campaign(), one.campaign());
    let term_zero = won_zero.unwrap().expect("shard 0's term");
    let term_one = won_one.unwrap().expect("shard 1's term");
    assert_eq!((term_zero.epoch().get(), term_one.epoch().get()), (1, 1));
    let client = client(&etcd);
    let key = |name: &str| format!("single-flight/sharded/{name}");
    for (name, expected) in [
        ("shards", Some("2")),
        ("shard-0/coordinator", Some("10.0.0.1:1")),
        ("shard-0/epoch", Some("1")),
        ("shard-0/host", Some("host-a")),
        ("shard-1/coordinator", Some("10.0.0.2:1")),
        ("shard-1/epoch", Some("1")),
        ("shard-1/host", Some("10.0.0.2")),
        ("coordinator", None),
        ("epoch", None),
    ] {
        assert_eq!(
            value(&client, &key(name)).await.as_deref(),
            expected,
            "{name}"
        );
    }
    let mut other_zero = election(&options(&etcd, "sharded", 0, 2), "10.0.0.3:1").await;
    assert_eq!(
        other_zero.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.1:1")
    );
    assert!(other_zero.campaign().await.unwrap().is_none(), "held");
    term_zero.resign(true).await;
    assert_eq!(value(&client, &key("shard-0/host")).await, None);
    assert_eq!(other_zero.coordinator().await.unwrap(), None);
    let term = other_zero.campaign().await.unwrap().expect("shard 0 again");
    assert_eq!(term.epoch().get(), 2);
    assert!(!term.follows_failover(), "shard 0's last term ended clean");
    assert_eq!(
        value(&client, &key("shard-0/host")).await.as_deref(),
        Some("10.0.0.3")
    );
    assert_eq!(
        value(&client, &key("shard-1/epoch")).await.as_deref(),
        Some("1")
    );
    assert_eq!(
        one.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.2:1")
    );
    term.resign(true).await;
    term_one.resign(true).await;
}
