//! Scenarios that the tests of several modules play, each over its own
//! wiring (in-memory pipes, a directory's socket): what is checked is
//! written once.

use crate::protocol::{Outcome, Response};

/// One process's greeted connection in a test: it writes request lines
/// and reads responses.
pub(super) trait Caller {
    async fn send(&mut self, line: &str);
    async fn response(&mut self) -> Response;
}

/// §18.3: two processes of one host call one key through their host
/// coordinator's relay, and a process of another host, a client of the
/// cluster's coordinator, calls it too. The host's first caller leads under
/// the cluster's token, the second joins without a party at the cluster
/// (whose status shows one flight with no joiner), the other host's caller
/// joins the same flight, and the land reaches both joiners before the
/// leader's `ack`.
pub(super) async fn a_hosts_two_calls_are_one_party<C: Caller>(
    first: &mut C,
    second: &mut C,
    other_host: &mut C,
) {
    first.send(r#"{"op":"run","id":"a","key":"k"}"#).await;
    let Response::Lead { token, .. } = first.response().await else {
        panic!("the host's first caller leads");
    };
    second.send(r#"{"op":"run","id":"b","key":"k"}"#).await;
    match second.response().await {
        Response::Joined { flight, .. } => assert_eq!(flight, token),
        other => panic!("the host's second caller was answered {other:?}"),
    }
    other_host.send(r#"{"op":"status","id":"s"}"#).await;
    match other_host.response().await {
        Response::Status { flights, .. } => {
            assert_eq!(flights.len(), 1);
            assert_eq!(flights[0].token, token, "the cluster's token");
            assert_eq!(flights[0].joiners, 0, "one party of the host, its leader");
        }
        other => panic!("the status was answered {other:?}"),
    }
    other_host.send(r#"{"op":"run","id":"c","key":"k"}"#).await;
    assert!(matches!(
        other_host.response().await,
        Response::Joined { .. }
    ));
    first
        .send(r#"{"op":"land","id":"a","outcome":{"value":"v"}}"#)
        .await;
    for joiner in [second, other_host] {
        match joiner.response().await {
            Response::Landed { outcome, .. } => {
                assert_eq!(*outcome, Outcome::Value("v".to_owned()));
            }
            other => panic!("a joiner was answered {other:?}"),
        }
    }
    assert!(matches!(first.response().await, Response::Ack { .. }));
}
