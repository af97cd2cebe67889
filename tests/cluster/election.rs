//! The cluster election against a real etcd (SPEC.md §14.1–§14.3).

use std::time::{Duration, Instant};

use single_flight::_internal::election::etcd::client::Client;
use single_flight::_internal::election::etcd::{
    EtcdElection, EtcdError, EtcdOptions, REQUEST_TIMEOUT,
};
use single_flight::_internal::election::{Election, Term};

use crate::support::PATIENCE;
use crate::support::etcd::{self, Etcd};

fn options(etcd: &Etcd, cluster: &str) -> EtcdOptions {
    let mut options = EtcdOptions::new(etcd.endpoints(), cluster);
    options.ttl = Duration::from_secs(2);
    options
}

async fn election(etcd: &Etcd, cluster: &str, advertise: &str) -> EtcdElection {
    EtcdElection::connect(&options(etcd, cluster), advertise.to_owned())
        .await
        .expect("etcd answers")
}

/// Campaigns until won; panics after [`PATIENCE`].
async fn win(election: &mut EtcdElection) -> impl Term + use<> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(term) = election.campaign().await.expect("a campaign") {
            return term;
        }
        assert!(Instant::now() < deadline, "no term won in {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// §14.1: one campaign wins; the others find its address and lose; a clean
/// resignation hands over without a grace window, with a greater epoch.
#[tokio::test]
async fn s14_1_one_campaign_wins_and_epochs_increase_across_terms() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut first = election(&etcd, "c", "10.0.0.1:7000").await;
    let mut second = election(&etcd, "c", "10.0.0.2:7000").await;
    assert_eq!(second.coordinator().await.unwrap(), None);
    let term = first
        .campaign()
        .await
        .unwrap()
        .expect("the first campaign wins");
    assert_eq!(term.epoch().get(), 1);
    assert!(!term.follows_failover(), "the first term waits for nobody");
    assert!(term.warrant().holds());
    assert_eq!(
        second.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.1:7000")
    );
    assert!(
        second.campaign().await.unwrap().is_none(),
        "the key is held"
    );
    term.resign(true).await;
    let term = second.campaign().await.unwrap().expect("the key is free");
    assert_eq!(term.epoch().get(), 2);
    assert!(!term.follows_failover(), "the previous term ended clean");
    assert_eq!(
        first.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.2:7000")
    );
    // §14.2: a term that stops renewing (its process died) loses the key
    // when the lease expires; the next term follows a failover.
    let gone = first.coordinator_gone();
    drop(term);
    tokio::time::timeout(PATIENCE, gone)
        .await
        .expect("the watch sees the key go");
    let term = win(&mut first).await;
    assert_eq!(term.epoch().get(), 3);
    assert!(
        term.follows_failover(),
        "the previous term did not end clean"
    );
    term.resign(false).await;
}

/// §14.2: a term renews its lease, so it holds the key for as long as it
/// lasts, far beyond one TTL, and the other processes go on seeing it.
#[tokio::test]
async fn s14_2_a_term_renews_its_lease_and_outlives_it() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut options = options(&etcd, "renewed");
    // A renewal every 1.3 s keeps the lease proven 3 s ahead: wide enough
    // for a loaded machine's scheduling delays.
    options.ttl = Duration::from_secs(4);
    let mut holder = EtcdElection::connect(&options, "10.0.0.1:7000".into())
        .await
        .expect("etcd answers");
    let mut other = election(&etcd, "renewed", "10.0.0.2:7000").await;
    let mut term = win(&mut holder).await;
    tokio::time::sleep(options.ttl * 3).await;
    term.check().expect("renewals keep the term");
    assert!(term.warrant().holds(), "the lease is proven");
    assert_eq!(
        other.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.1:7000"),
        "the key lives on under the renewed lease"
    );
    assert!(other.campaign().await.unwrap().is_none(), "the key is held");
    term.resign(true).await;
}

/// §14.1: clusters of one etcd do not see each other.
#[tokio::test]
async fn s14_1_clusters_share_an_etcd_without_seeing_each_other() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut a = election(&etcd, "a", "10.0.0.1:1").await;
    let mut b = election(&etcd, "b", "10.0.0.2:1").await;
    let term_a = a.campaign().await.unwrap().expect("a's first term");
    let term_b = b.campaign().await.unwrap().expect("b's first term");
    assert_eq!((term_a.epoch().get(), term_b.epoch().get()), (1, 1));
    assert_eq!(
        b.coordinator().await.unwrap().as_deref(),
        Some("10.0.0.2:1")
    );
    term_a.resign(true).await;
    term_b.resign(true).await;
}

/// §14.1: an epoch counter that holds no epoch, or the last one, fails
/// closed, naming the key.
#[tokio::test]
async fn s14_1_an_epoch_that_is_not_a_number_fails_closed_naming_the_key() {
    if !etcd::available() {
        return;
    }
    let etcd = Etcd::single();
    let mut election = election(&etcd, "damaged", "10.0.0.1:1").await;
    let key = election.epoch_key().to_owned();
    let client = Client::connect(&etcd.endpoints(), None, REQUEST_TIMEOUT).unwrap();
    client.put(key.clone(), "seven", 0).await.unwrap();
    let error = election.campaign().await.unwrap_err();
    assert!(
        matches!(error, EtcdError::EtcdEpochCorrupt { .. }),
        "{error}"
    );
    assert!(error.to_string().contains(&key), "{error}");
    client.put(key.clone(), "2147483647", 0).await.unwrap();
    let error = election.campaign().await.unwrap_err();
    assert!(
        matches!(error, EtcdError::EtcdEpochExhausted { .. }),
        "{error}"
    );
    assert!(error.to_string().contains(&key), "{error}");
    client.put(key.clone(), "41", 0).await.unwrap();
    let term = election.campaign().await.unwrap().expect("a term");
    assert_eq!(term.epoch().get(), 42);
    term.resign(true).await;
}

/// §14.6: etcd that nobody serves is an error that names the endpoints.
#[tokio::test]
async fn s14_6_an_unreachable_etcd_is_an_error_naming_its_endpoints() {
    let port = etcd::free_port("127.0.0.1".parse().unwrap());
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut options = EtcdOptions::new(vec![endpoint.clone()], "c");
    options.ttl = Duration::from_secs(2);
    let error = match EtcdElection::connect(&options, "127.0.0.1:1".into()).await {
        Err(error) => error,
        Ok(mut election) => election.campaign().await.map(|_| ()).unwrap_err(),
    };
    assert!(error.to_string().contains(&endpoint), "{error}");
}
