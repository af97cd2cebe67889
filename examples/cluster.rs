//! One call in cluster mode (SPEC.md §14): run it on two hosts, or in two
//! shells of one laptop, at the same time, and one of them leads while the
//! other joins and prints the leader's value.
//!
//! ```text
//! export SINGLE_FLIGHT_ETCD=http://127.0.0.1:2379 SINGLE_FLIGHT_CLUSTER=demo
//! export SINGLE_FLIGHT_TLS_CA=ca.pem SINGLE_FLIGHT_TLS_CERT=server.pem SINGLE_FLIGHT_TLS_KEY=server.key
//! cargo run --example cluster -- 127.0.0.1:0 report     # in one shell
//! cargo run --example cluster -- 127.0.0.1:0 report     # in another, within 5 s
//! ```
//!
//! The first argument is the address to listen on when this process
//! coordinates (port 0: any free port); on a real host, give its address,
//! the one its certificate names. The second is the flight's key.

use std::time::Duration;

use single_flight::{Cluster, Role, SingleFlight};

/// How long the leader's work takes: long enough to start the second
/// process by hand.
const WORK: Duration = Duration::from_secs(5);

fn setting(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name} (see the top of examples/cluster.rs)"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(key)) = (args.next(), args.next()) else {
        return Err("usage: cluster LISTEN_ADDRESS KEY".into());
    };
    let endpoints = setting("SINGLE_FLIGHT_ETCD")?;
    let cluster = Cluster::etcd(endpoints.split(','), setting("SINGLE_FLIGHT_CLUSTER")?)
        .listen(listen.parse()?)
        .tls(
            setting("SINGLE_FLIGHT_TLS_CA")?,
            setting("SINGLE_FLIGHT_TLS_CERT")?,
            setting("SINGLE_FLIGHT_TLS_KEY")?,
        );
    let flights = SingleFlight::cluster(cluster).open().await?;
    let landed = flights
        .run(&key, |token| async move {
            println!("leading under token {token}; working for {WORK:?}");
            tokio::time::sleep(WORK).await;
            Ok::<_, std::io::Error>(format!("made by process {}", std::process::id()))
        })
        .await?;
    let role = match landed.role {
        Role::Led => "led",
        Role::Joined => "joined",
        Role::Reused => "reused",
    };
    println!("{role} (token {}): {}", landed.token, landed.value);
    flights.close().await;
    Ok(())
}
