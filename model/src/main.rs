//! The model's command line (see this crate's README):
//!
//! - `explore [address]`: stateright's web explorer on the CI configuration,
//!   for a person to step through the protocol;
//! - `check [small|two-keys|disconnect|detach|reuse|detach-reuse|large|overlap|goal]`:
//!   an exhaustive check of a configuration of `Directory`, with its counts
//!   and time.
#![forbid(unsafe_code)]

use std::net::TcpListener;
use std::process::ExitCode;

use single_flight_model::Directory;
use stateright::Model;

/// Local only: the explorer has no authentication and runs the checker on
/// request.
const DEFAULT_ADDRESS: &str = "127.0.0.1:3000";

const USAGE: &str = "usage: single-flight-model explore [address]   (default 127.0.0.1:3000)
       single-flight-model check [CONFIGURATION]   (default small)
CONFIGURATION: small, two-keys, disconnect, detach, reuse, detach-reuse, large, overlap, goal";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    match arguments.as_slice() {
        ["explore"] => explore(DEFAULT_ADDRESS),
        ["explore", address] => explore(address),
        ["check"] | ["check", "small"] => check(Directory::small()),
        ["check", "two-keys"] => check(Directory::two_keys()),
        ["check", "disconnect"] => check(Directory::disconnect()),
        ["check", "detach"] => check(Directory::detach()),
        ["check", "reuse"] => check(Directory::reuse()),
        ["check", "detach-reuse"] => check(Directory::detach_and_reuse()),
        ["check", "large"] => check(Directory::large()),
        ["check", "overlap"] => check(Directory::overlap()),
        ["check", "goal"] => check(Directory::goal()),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn check(directory: Directory) -> ExitCode {
    println!("checking {directory:?}");
    let report = single_flight_model::check::check(directory);
    println!("{}", report.summary());
    print!("{}", report.known_violations());
    let problems = report.problems();
    if problems.is_empty() {
        println!("every other property holds; every `sometimes` property was reached");
        ExitCode::SUCCESS
    } else {
        print!("{problems}");
        ExitCode::FAILURE
    }
}

fn explore(address: &str) -> ExitCode {
    // The explorer panics on an address it cannot bind; check first, so that
    // the error says what to do.
    if let Err(error) = TcpListener::bind(address) {
        eprintln!(
            "cannot listen on {address}: {error}; pass a free address, e.g. \
             `explore 127.0.0.1:3001`"
        );
        return ExitCode::FAILURE;
    }
    let directory = Directory::small();
    println!("exploring {directory:?}");
    println!("open http://{address}/ (Ctrl-C stops)");
    // Blocks for as long as the explorer serves.
    directory.checker().serve(address);
    ExitCode::SUCCESS
}
