//! What the integration tests share: the one harness for child processes
//! (`child`), the one bound on every wait (`PATIENCE`), the flight directory
//! that the tests of calls and of the shell stage (`scene`), and the parts of
//! a cluster's world (certificates, etcd, hosts, the machine's programs).
#![allow(dead_code)] // each test binary uses a part of it

use std::time::Duration;

/// The longest any wait of a test may take before the test fails instead of
/// hanging. It is a bound against a hang, never a timing assertion: no test
/// checks that a step is quick, only that it happens. A minute covers the
/// slowest wait there is, a cluster's failover (the 2 s lease the cluster
/// tests ask for, the 1 s grace window and etcd's own election), many times
/// over on a loaded 2-core machine that runs several multi-process tests at
/// once, and a test that hangs still fails within the minute.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The `single-flight` command of this build.
pub const BINARY: &str = env!("CARGO_BIN_EXE_single-flight");

/// How many times the work ran: the marks (`ran-PID`) that each
/// process whose work ran leaves in `runs`, where a test counts them.
pub fn times_ran(runs: &std::path::Path) -> usize {
    std::fs::read_dir(runs)
        .unwrap_or_else(|error| panic!("list {}: {error}", runs.display()))
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("ran-"))
        .count()
}

pub mod certs;
pub mod child;
pub mod etcd;
pub mod hosts;
pub mod openmetrics;
pub mod scene;
pub mod tools;
