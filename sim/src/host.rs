//! The host level of the host tier (SPEC.md §18, §12.7): the processes of
//! one host meet in its host directory, a flight directory as in local mode
//! (§7), whose coordinator alone reaches the cluster.
//!
//! What is modelled of the directory, after src/election/local/:
//! - the claim (`flight.lock`'s SQLite lock, §7.2): one holder at a time,
//!   taken by a campaign that never waits, and freed at once when its
//!   holder resigns, drops its term or is killed (the kernel releases a
//!   dead process's lock, kill -9 included);
//! - the durable epoch (`flight.epoch`, §7.3): one counter per host, raised
//!   by each won claim, never lost;
//! - the clean mark (§10.2): a term that resigns cleanly lets the next one
//!   open no grace window;
//! - the socket: [`HostTransport`](crate::network::HostTransport), which
//!   the holder listens on and the host's processes connect to.
//!
//! What is not: the directory's files, their permissions and checks
//! (§7.4), SQLite's own locking and fsyncs, peer credentials of the socket,
//! a lock file replaced under a holder (§7.2's `check`), and a host
//! directory shared by two hosts. Those are tested with real processes.

use std::fmt;
use std::sync::{Arc, Mutex};

use single_flight::_internal::election::{Election, Term, Warrant};
use single_flight::Epoch;

use crate::network::{Net, ProcessId};

/// The state of one host's directory.
#[derive(Default)]
struct Claim {
    /// The process that holds the claim.
    holder: Option<ProcessId>,
    /// The last epoch of the host (`flight.epoch`).
    epoch: u64,
    /// The clean mark (§10.2).
    clean: bool,
}

/// One host's directory, shared by its processes.
#[derive(Clone, Default)]
pub struct HostDirectory(Arc<Mutex<Claim>>);

impl HostDirectory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Claim> {
        self.0.lock().expect("never poisoned")
    }

    /// The process that holds the claim now: the host coordinator.
    pub fn holder(&self) -> Option<ProcessId> {
        self.lock().holder
    }

    /// Frees the claim if `process` holds it, as the kernel releases the
    /// lock of a process that died.
    pub fn release(&self, process: ProcessId) {
        let mut claim = self.lock();
        if claim.holder == Some(process) {
            claim.holder = None;
        }
    }
}

/// Why a host's election failed: never, but for a killed process.
#[derive(Debug)]
pub struct HostError;

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the host's claim was lost")
    }
}

impl std::error::Error for HostError {}

/// One process's view of its host directory's election.
pub struct HostElection {
    directory: HostDirectory,
    process: ProcessId,
    net: Net,
}

impl HostElection {
    pub fn new(directory: HostDirectory, process: ProcessId, net: Net) -> HostElection {
        HostElection {
            directory,
            process,
            net,
        }
    }
}

impl Election for HostElection {
    /// The directory's socket, as a local election's.
    type Address = ();
    type Term = HostTerm;
    type Error = HostError;

    /// As locally: the coordinator is always at the socket; only
    /// connecting tells whether one listens (§10.1).
    async fn coordinator(&mut self) -> Result<Option<()>, HostError> {
        Ok(Some(()))
    }

    async fn campaign(&mut self) -> Result<Option<HostTerm>, HostError> {
        // A killed process never comes back.
        if self.net.is_dead(self.process) {
            return Ok(None);
        }
        let mut claim = self.directory.lock();
        if claim.holder.is_some() {
            return Ok(None);
        }
        claim.holder = Some(self.process);
        claim.epoch += 1;
        let epoch = Epoch::new(claim.epoch).expect("fewer than 2^31 host terms");
        let follows_failover = !(claim.epoch == 1 || std::mem::take(&mut claim.clean));
        self.net.trace().record(format_args!(
            "host claim p{} won epoch {epoch}",
            self.process
        ));
        Ok(Some(HostTerm {
            directory: self.directory.clone(),
            process: self.process,
            net: self.net.clone(),
            epoch,
            follows_failover,
        }))
    }
}

/// A host term: the claim held.
pub struct HostTerm {
    directory: HostDirectory,
    process: ProcessId,
    net: Net,
    epoch: Epoch,
    follows_failover: bool,
}

impl Drop for HostTerm {
    /// A term dropped frees the claim, as closing the lock file does.
    fn drop(&mut self) {
        self.directory.release(self.process);
    }
}

impl Term for HostTerm {
    type Error = HostError;

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn follows_failover(&self) -> bool {
        self.follows_failover
    }

    /// A host directory's term, served by the relay.
    fn takes_relays(&self) -> bool {
        false
    }

    fn check(&mut self) -> Result<(), HostError> {
        if self.directory.holder() == Some(self.process) {
            Ok(())
        } else {
            Err(HostError)
        }
    }

    /// The lock cannot lapse while its process lives (§7.2); a killed
    /// process answers nothing.
    fn warrant(&self) -> Warrant {
        let (net, process) = (self.net.clone(), self.process);
        Warrant::new(move || !net.is_dead(process))
    }

    /// Marks the host clean if asked while the claim is still held; the
    /// term's drop then frees the claim.
    async fn resign(self, clean: bool) {
        if clean && !self.net.is_dead(self.process) {
            let mut claim = self.directory.lock();
            if claim.holder == Some(self.process) {
                claim.clean = true;
            }
        }
    }
}
