//! The local election (SPEC.md §7): the SQLite claim on `flight.lock`, the
//! durable epoch in `flight.epoch`, `flight.clean`, and the checks on the
//! directory, for processes of one machine that share a flight directory.

mod claim;
mod directory;
mod epoch;
mod error;
mod network;

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use claim::{ElectionOptions, LeaderElection, Leadership, POLL_INTERVAL};
pub use directory::{DirectoryError, DirectoryOptions};
// A sharded cluster's host directories (src/backend/tiered.rs), and what the
// tests and harnesses check against.
#[cfg(any(feature = "cluster", feature = "_internal"))]
pub use directory::prepare_directory;
pub use epoch::{DurableStep, EpochProblem};
pub use error::LocalError;
// What the tests and harnesses check against.
#[cfg(feature = "_internal")]
pub use {
    claim::LOCK_FILE,
    directory::{DIRECTORY_MODE, NetworkDirectoryError},
    epoch::{EPOCH_FILE, EPOCH_TEMP_PREFIX},
    network::NETWORK_FUSE_TYPES,
};

use super::{Election, Term, Warrant};
use crate::protocol::Epoch;

/// A file whose presence tells the next term that the previous one ended
/// with no flight in progress, so that it needs no grace window (SPEC.md
/// §10.2).
pub const CLEAN_FILE: &str = "flight.clean";

/// [`Election`] among the processes that share a flight directory.
#[derive(Debug)]
pub struct LocalElection {
    election: LeaderElection,
}

impl LocalElection {
    /// See [`LeaderElection::new`]: checks (or creates) the directory.
    pub fn new(
        directory: impl Into<PathBuf>,
        options: ElectionOptions,
    ) -> Result<LocalElection, LocalError> {
        Ok(LocalElection {
            election: LeaderElection::new(directory, options)?,
        })
    }
}

impl Election for LocalElection {
    /// The directory's socket, the one place a local coordinator listens:
    /// nothing to name.
    type Address = ();
    type Term = LocalTerm;
    type Error = LocalError;

    /// A local coordinator is always found at the directory's socket; only
    /// connecting tells whether one listens there (§10.1).
    async fn coordinator(&mut self) -> Result<Option<()>, LocalError> {
        Ok(Some(()))
    }

    /// One attempt at the claim. It blocks for a few system calls (and, when
    /// won, the epoch's fsyncs), which the single-flight thread can afford:
    /// nothing else of this process waits on it while it has no coordinator.
    async fn campaign(&mut self) -> Result<Option<LocalTerm>, LocalError> {
        let Some(leadership) = self.election.campaign(Duration::ZERO)? else {
            return Ok(None);
        };
        let clean = leadership.directory().join(CLEAN_FILE);
        // §10.2: the first term, or one after a clean end, has nothing to
        // wait for.
        let follows_failover = !(leadership.epoch().get() == 1 || fs::remove_file(&clean).is_ok());
        Ok(Some(LocalTerm {
            leadership,
            follows_failover,
        }))
    }
}

/// One term won by [`LocalElection`]: the claim on `flight.lock`.
#[derive(Debug)]
pub struct LocalTerm {
    leadership: Leadership,
    follows_failover: bool,
}

impl LocalTerm {
    fn directory(&self) -> &Path {
        self.leadership.directory()
    }
}

impl Term for LocalTerm {
    type Error = LocalError;

    fn epoch(&self) -> Epoch {
        self.leadership.epoch()
    }

    fn follows_failover(&self) -> bool {
        self.follows_failover
    }

    fn takes_relays(&self) -> bool {
        false
    }

    /// One `stat` of the lock file's path (§7.2).
    fn check(&mut self) -> Result<(), LocalError> {
        self.leadership.check()
    }

    /// The kernel's lock cannot lapse while the process lives: a claim that
    /// `check` last found in place still holds.
    fn warrant(&self) -> Warrant {
        Warrant::always()
    }

    async fn resign(self, clean: bool) {
        if clean {
            // §10.2: written while the claim is still held, so that no other
            // term can have begun. Mode 0600 like every file of the
            // directory (§7.1); it is empty.
            let _ = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(self.directory().join(CLEAN_FILE));
        }
        if let Err(error) = self.leadership.resign() {
            tracing::warn!(%error, "resigning");
        }
    }
}
