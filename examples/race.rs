//! Several processes race on one key: one leads and runs the work, the
//! others join its flight and receive its value, all under one fencing token.
//!
//! ```text
//! cargo run --example race          # 5 processes
//! cargo run --example race -- 8     # 8 processes
//! ```
//!
//! The example starts itself again as that many child processes. Each opens
//! the same flight directory and calls `run("report", work)`. The work of the
//! leader waits until every other process has joined (it asks the
//! coordinator with `Builder::status`), so that the race always ends
//! with one lead, however slowly the processes start.

use std::process::{Command, Stdio};
use std::time::Duration;

use single_flight::{FencingToken, Role, SingleFlight};

/// Set in the children's environment: the flight directory.
const CHILD_DIRECTORY: &str = "RACE_DIRECTORY";
/// Set in the children's environment: how many processes race.
const CHILD_RACERS: &str = "RACE_RACERS";
/// The key every process calls.
const KEY: &str = "report";
/// How long the leader waits for the others to join before it goes on
/// anyway (a process that failed to start must not hang the example).
const JOIN_PATIENCE: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var_os(CHILD_DIRECTORY) {
        Some(directory) => racer(directory.into()).await,
        None => race().await,
    }
}

/// The parent: starts the racers and shows what each got.
async fn race() -> Result<(), Box<dyn std::error::Error>> {
    let racers: usize = match std::env::args().nth(1) {
        Some(count) => count.parse().map_err(|_| "usage: race [PROCESSES]")?,
        None => 5,
    };
    let directory = std::env::temp_dir().join(format!("single-flight-race-{}", std::process::id()));
    println!(
        "{racers} processes call run({KEY:?}) in {}",
        directory.display()
    );
    let children = (0..racers)
        .map(|_| {
            Command::new(std::env::current_exe()?)
                .env(CHILD_DIRECTORY, &directory)
                .env(CHILD_RACERS, racers.to_string())
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut lines = Vec::new();
    for child in children {
        let output = child.wait_with_output()?;
        lines.extend(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    // The leader first.
    lines.sort_by_key(|line| !line.contains(" led "));
    for line in &lines {
        println!("  {line}");
    }
    let led = lines.iter().filter(|line| line.contains(" led ")).count();
    println!("{led} led, {} joined", lines.len() - led);
    std::fs::remove_dir_all(&directory)?;
    Ok(())
}

/// A child: one call, then one line saying how it went.
async fn racer(directory: std::path::PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let racers: u64 = std::env::var(CHILD_RACERS)?.parse()?;
    let flights = SingleFlight::open(&directory).await?;
    let landed = flights
        .run(KEY, |token| work(&directory, racers, token))
        .await?;
    let role = match landed.role {
        Role::Led => "led   ",
        Role::Joined => "joined",
        Role::Reused => "reused",
    };
    println!(
        "pid {:>7}: {role} token {} value {:?}",
        std::process::id(),
        landed.token,
        landed.value
    );
    // Lets the leader's value reach the joiners before this process exits.
    flights.close().await;
    Ok(())
}

/// The work, which only the leader runs. Real work would pass `token` to
/// whatever it writes, so that a stale leader's writes can be refused.
async fn work(
    directory: &std::path::Path,
    racers: u64,
    token: FencingToken,
) -> Result<String, std::io::Error> {
    let everyone_joined = async {
        loop {
            let joined = single_flight::SingleFlight::builder(directory)
                .status()
                .await
                .ok()
                .and_then(|status| {
                    status
                        .flights
                        .iter()
                        .find(|flight| flight.key.as_str() == KEY)
                        .map(|flight| flight.joiners)
                });
            if joined == Some(racers - 1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let _ = tokio::time::timeout(JOIN_PATIENCE, everyone_joined).await;
    Ok(format!(
        "report built by pid {} under token {token}",
        std::process::id()
    ))
}
