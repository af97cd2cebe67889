//! Who coordinates (SPEC.md §7): an [`Election`] picks one process of many
//! to serve a [`Term`] under a fresh epoch. The shell is written against
//! these two traits only; each backend is a folder:
//!
//! - [`local`]: the SQLite claim on `flight.lock`, the durable epoch in
//!   `flight.epoch` and the checks on the flight directory, for processes of
//!   one machine. Its items are re-exported here.
//! - `etcd` (feature `cluster`): a lease and a key in etcd, the epoch as an
//!   etcd counter, for processes of many machines (§14).
//!
//! # Driving contract (every backend)
//!
//! - [`Election::coordinator`] says where the current coordinator is, if
//!   anyone knows; a caller that cannot reach it calls
//!   [`Election::campaign`], which makes one attempt and never waits for
//!   another process.
//! - A won campaign returns a [`Term`] whose epoch is greater than every
//!   earlier term's and already durable (§7.3). Its holder calls
//!   [`Term::check`] every [`CHECK_INTERVAL`] and [`Term::still_holds`]
//!   before it answers anything; when either fails, the term is over: stop
//!   serving and [`Term::resign`].
//! - A holder never campaigns again while its term lasts (§7.2).
//!
//! # Driving contract (local)
//!
//! - Check the directory with [`prepare_directory`] (or let
//!   [`LeaderElection::new`] do it) before anything else touches it (§7.4).
//! - [`LeaderElection::campaign`] is synchronous and blocks the calling thread
//!   for up to its timeout, sleeping [`POLL_INTERVAL`] between attempts
//!   (§7.2). Async code calls it with a zero timeout, as [`LocalElection`]
//!   does, or from a thread of its own.
//! - A won campaign returns a [`Leadership`] whose epoch is already durable
//!   (§7.3). The holder polls [`Leadership::check`] (one `stat`, cheap enough
//!   for every [`POLL_INTERVAL`]); when it fails, the term is over: stop
//!   serving, then drop the `Leadership`.
//! - The term ends when the `Leadership` is resigned or dropped, or when its
//!   process dies: the kernel then releases the lock (§7.2).
//! - While a process holds the claim, nothing in it may open `flight.lock`
//!   except through this module: POSIX locks belong to the whole process, and
//!   closing any other descriptor on the file releases the claim (§7.2).

#[cfg(feature = "cluster")]
pub mod etcd;
pub mod local;

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use local::{
    CLEAN_FILE, DIRECTORY_MODE, DirectoryError, DirectoryOptions, DurableStep, EPOCH_FILE,
    EPOCH_TEMP_PREFIX, ElectionOptions, EpochProblem, LOCK_FILE, LeaderElection, Leadership,
    LocalElection, LocalTerm, NETWORK_FUSE_TYPES, NetworkDirectoryError, POLL_INTERVAL,
    prepare_directory,
};

use crate::protocol::Epoch;

/// How often a term's holder calls [`Term::check`] (SPEC.md §7.2, §11.1).
/// A local check is two `stat`s; 100 ms bounds how long a term goes on after
/// its lock file was replaced while costing nothing measurable.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Picks the coordinator among the processes of one flight directory or
/// cluster (SPEC.md §7, §10.1).
pub trait Election: Send + 'static {
    /// Where a coordinator can be reached, in the terms of the transport
    /// that goes with this election.
    type Address: Send + Sync + 'static;
    /// A term this process won.
    type Term: Term;

    /// Where the current coordinator is, or `None` when no term is being
    /// served; an error when the election itself cannot be asked.
    fn coordinator(
        &mut self,
    ) -> impl Future<Output = Result<Option<Self::Address>, ElectionError>> + Send;

    /// One attempt to become the coordinator: `Some` term if won, `None` if
    /// another process holds the term. It never waits for another process.
    fn campaign(
        &mut self,
    ) -> impl Future<Output = Result<Option<Self::Term>, ElectionError>> + Send;

    /// Resolves when the coordinator that [`coordinator`](Self::coordinator)
    /// last reported no longer holds its term, for a client connected to it
    /// that would not otherwise learn it (a dead host sends no FIN). Local
    /// coordinators share the client's kernel, which closes the connection
    /// when they die: this never resolves.
    fn coordinator_gone(&mut self) -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }
}

/// One term as the coordinator, from a won [`Election::campaign`] until
/// [`resign`](Term::resign) or the death of its process.
pub trait Term: Send + 'static {
    /// This term's epoch (SPEC.md §7.3).
    fn epoch(&self) -> Epoch;

    /// Whether an earlier term may have ended with flights in progress, so
    /// that this one opens a grace window (SPEC.md §10.2).
    fn follows_failover(&self) -> bool;

    /// The periodic check, every [`CHECK_INTERVAL`]: an error when the term
    /// is over.
    fn check(&mut self) -> Result<(), ElectionError>;

    /// Whether this process may still answer as the coordinator right now;
    /// cheap, called before every answer.
    fn still_holds(&self) -> bool;

    /// Ends the term. `clean` says that no flight is in progress, so that
    /// the next term needs no grace window (SPEC.md §10.2).
    fn resign(self, clean: bool) -> impl Future<Output = ()> + Send;
}

/// Why a campaign failed or a term ended (SPEC.md §7). Each message names the
/// file involved and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// The directory was refused (§7.4).
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error(
        "cannot open the lock file {}: {error}; check that the flight directory exists and that you may write to it",
        path.display()
    )]
    OpenLockFile {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error(
        "cannot claim the lock file {}: {error}; if it is damaged (not an SQLite database), stop every process that uses the flight directory and delete it: it holds no data (SPEC.md §7.1)",
        path.display()
    )]
    Claim {
        path: PathBuf,
        error: rusqlite::Error,
    },
    /// The lock file this term holds is no longer the one at its path, so
    /// another process can win a claim on a new file: the term must end
    /// (§7.2).
    #[error(
        "the lock file {} was deleted, renamed or replaced while this process held the coordinator's claim; another process can now win a claim on a new file, so this term has ended. Keep cleaners (systemd-tmpfiles, tmpreaper) and people away from the flight directory",
        path.display()
    )]
    LockFileMoved { path: PathBuf },
    #[error(
        "cannot check that the lock file {} is still the file at its path: {error}; a claim that cannot be verified is no claim, so this process does not coordinate",
        path.display()
    )]
    CheckLockFile {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error(
        "cannot read the epoch file {}: {error}; refusing to start a term without the last epoch, because a guess could reuse fencing tokens. Make the file readable by this user, or restore it from a backup",
        path.display()
    )]
    EpochUnreadable { path: PathBuf, error: io::Error },
    /// The epoch file exists but holds no epoch; the election fails closed
    /// (§7.3).
    #[error(
        "the epoch file {} holds no epoch: {problem}. Refusing to start a term, because a guess could reuse fencing tokens. Restore the file from a backup, or write into it a number larger than every epoch this directory has used (a fencing token's epoch is the token divided by 4294967296); deleting it restarts tokens at epoch 1 and breaks fencing",
        path.display()
    )]
    EpochCorrupt {
        path: PathBuf,
        problem: EpochProblem,
    },
    /// The previous term had the largest epoch there is (§6, §7.3).
    #[error(
        "the epoch file {} holds {}, the largest epoch (SPEC.md §6): no further term can start in this directory, because its fencing tokens could not grow. Use a new flight directory, and reset the highest token that each fenced resource has stored",
        path.display(),
        Epoch::MAX
    )]
    EpochExhausted { path: PathBuf },
    /// The new epoch could not be written durably; the term never began and
    /// the write is not retried (§7.3).
    #[error(
        "cannot write the epoch file {} durably: {step} failed: {error}; the term has ended without serving. The write is not retried, because after a failed fsync the data can be lost even when a retry reports success: check the disk and the kernel log (dmesg), then start again",
        path.display()
    )]
    EpochWrite {
        path: PathBuf,
        step: DurableStep,
        error: io::Error,
    },
    /// A cluster name that could reach into other clusters' keys (§14.1).
    #[error(
        "the cluster name {name:?} is not allowed: use 1 to 128 letters, digits, '.', '_' or '-' (SPEC.md §14.1)"
    )]
    ClusterName { name: String },
    /// No etcd member answers (§14.6).
    #[error(
        "cannot reach etcd at {endpoints}: {error}; check that the members run and that these URLs (--etcd, SINGLE_FLIGHT_ETCD) are right"
    )]
    EtcdUnreachable { endpoints: String, error: String },
    /// etcd did not answer a request in time or refused it: quorum lost,
    /// members unreachable (§14.6).
    #[error(
        "etcd at {endpoints} failed while {what}: {error}; if a majority of its members is down or cut off, service resumes when they are back"
    )]
    EtcdRequest {
        what: &'static str,
        endpoints: String,
        error: String,
    },
    /// `https://` endpoints without certificates.
    #[error(
        "the etcd endpoints {endpoints} use https, but no CA, certificate and key were given; give --tls-ca, --tls-cert and --tls-key"
    )]
    EtcdTlsMissing { endpoints: String },
    #[error("cannot read the {what} file {} for etcd: {error}", path.display())]
    EtcdTlsFile {
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// The epoch counter holds no epoch; the election fails closed (§14.1).
    #[error(
        "the etcd key {key} holds {value:?}, which is not an epoch: refusing to start a term, because a guess could reuse fencing tokens. Put into it a number larger than every epoch this cluster has used (a fencing token divided by 4294967296)"
    )]
    EtcdEpochCorrupt { key: String, value: String },
    /// The epoch counter reached the largest epoch (§6, §14.1).
    #[error(
        "the etcd key {key} holds {}, the largest epoch (SPEC.md §6): no further term can start in this cluster. Use a new cluster name, and reset the highest token that each fenced resource has stored",
        Epoch::MAX
    )]
    EtcdEpochExhausted { key: String },
    /// The term can no longer prove that its lease lives (§14.2).
    #[error(
        "the coordinator's lease on {key} can no longer be proven alive ({reason}); this term has ended"
    )]
    LeaseLost { key: String, reason: String },
    /// Ending the term reported an error; the claim is released anyway when
    /// the lock file is closed (§7.2).
    #[error(
        "ending the term on {} reported an error: {error}; the claim was released anyway, because closing the lock file releases it",
        path.display()
    )]
    Resign {
        path: PathBuf,
        error: rusqlite::Error,
    },
}
