//! Who coordinates (SPEC.md §7): an [`Election`] picks one process of many
//! to serve a [`Term`] under a fresh epoch. The shell is written against
//! these two traits only; each backend is a folder:
//!
//! - [`local`]: the SQLite claim on `flight.lock`, the durable epoch in
//!   `flight.epoch` and the checks on the flight directory, for processes of
//!   one machine.
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
//!   [`Term::check`] every [`CHECK_INTERVAL`] and asks the term's
//!   [`Warrant`] before it answers anything; when either fails, the term is
//!   over: stop serving and [`Term::resign`].
//! - A holder never campaigns again while its term lasts (§7.2).
//!
//! # Driving contract (local)
//!
//! - Check the directory with `prepare_directory` (`local/directory.rs`; or let
//!   [`LeaderElection::new`](local::LeaderElection::new) do it) before anything else touches it (§7.4).
//! - [`LeaderElection::campaign`](local::LeaderElection::campaign) is synchronous and blocks the calling thread
//!   for up to its timeout, sleeping [`POLL_INTERVAL`](local::POLL_INTERVAL) between attempts
//!   (§7.2). Async code calls it with a zero timeout, as [`LocalElection`](local::LocalElection)
//!   does, or from a thread of its own.
//! - A won campaign returns a [`Leadership`](local::Leadership) whose epoch is already durable
//!   (§7.3). The holder polls [`Leadership::check`](local::Leadership::check) (one `stat`, cheap enough
//!   for every [`POLL_INTERVAL`](local::POLL_INTERVAL)); when it fails, the term is over: stop
//!   serving, then drop the `Leadership`.
//! - The term ends when the `Leadership` is resigned or dropped, or when its
//!   process dies: the kernel then releases the lock (§7.2).
//! - While a process holds the claim, nothing in it may open `flight.lock`
//!   except through this module: POSIX locks belong to the whole process, and
//!   closing any other descriptor on the file releases the claim (§7.2).

#[cfg(feature = "cluster")]
pub mod etcd;
pub mod local;

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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
    /// Why the election cannot be asked or a campaign failed: each backend
    /// has its own, and the shell shows it whole (SPEC.md §7, §14).
    type Error: Error + Send + Sync + 'static;

    /// Where the current coordinator is, or `None` when no term is being
    /// served; an error when the election itself cannot be asked.
    fn coordinator(
        &mut self,
    ) -> impl Future<Output = Result<Option<Self::Address>, Self::Error>> + Send;

    /// One attempt to become the coordinator: `Some` term if won, `None` if
    /// another process holds the term. It never waits for another process.
    fn campaign(&mut self) -> impl Future<Output = Result<Option<Self::Term>, Self::Error>> + Send;

    /// Resolves when the coordinator that [`coordinator`](Self::coordinator)
    /// last reported no longer holds its term, for a client connected to it
    /// that would not otherwise learn it (a dead host sends no FIN). Local
    /// coordinators share the client's kernel, which closes the connection
    /// when they die: this never resolves.
    fn coordinator_gone(&mut self) -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }

    /// Whether [`coordinator_gone`](Self::coordinator_gone) tells when the
    /// key goes, so that a process whose coordinator does not answer waits
    /// for it rather than looking again every poll interval (SPEC.md
    /// §14.3). Local elections free a dead holder's claim at once and
    /// never tell: they keep the poll interval.
    const TELLS_GONE: bool = false;

    /// Whether `error` is an outage of what the election asks (no etcd
    /// member answers, quorum lost), which ends by itself, rather than a
    /// fault of the configuration or of stored data that someone must fix:
    /// a process that only coordinates campaigns on through the first and
    /// stops at the second (SPEC.md §13.5). Local elections fail only on
    /// their directory and files.
    fn is_outage(_error: &Self::Error) -> bool {
        false
    }
}

/// One term as the coordinator, from a won [`Election::campaign`] until
/// [`resign`](Term::resign) or the death of its process.
pub trait Term: Send + 'static {
    /// Why the term is over; the backend's own error.
    type Error: Error + Send + Sync + 'static;

    /// This term's epoch (SPEC.md §7.3).
    fn epoch(&self) -> Epoch;

    /// Whether an earlier term may have ended with flights in progress, so
    /// that this one opens a grace window (SPEC.md §10.2).
    fn follows_failover(&self) -> bool;

    /// Whether host coordinators may relay to this term, so that it keeps
    /// relay windows (SPEC.md §18.2): a cluster's term. A directory's term
    /// is reached over its Unix socket by its own processes only, and a
    /// host directory's is served by the relay.
    fn takes_relays(&self) -> bool;

    /// The periodic check, every [`CHECK_INTERVAL`]: an error when the term
    /// is over.
    fn check(&mut self) -> Result<(), Self::Error>;

    /// Whether this process may still answer as the coordinator, asked
    /// again at every answer (SPEC.md §14.2). Taken once, when the term
    /// begins serving.
    fn warrant(&self) -> Warrant;

    /// Ends the term. `clean` says that no flight is in progress, so that
    /// the next term needs no grace window (SPEC.md §10.2).
    fn resign(self, clean: bool) -> impl Future<Output = ()> + Send;
}

/// Whether a term may still answer right now (SPEC.md §14.2), as a value
/// that whoever answers for the term shares: the coordinator asks it before
/// every answer it queues, and each connection's writer again before it
/// writes what was queued. A process stopped between the two (SIGSTOP, a
/// paused VM) then writes nothing it queued before the pause once its lease
/// is gone. Cheap: a clock read and a comparison.
#[derive(Clone)]
pub struct Warrant(Arc<dyn Fn() -> bool + Send + Sync>);

impl Warrant {
    /// A warrant that asks `holds` each time.
    pub fn new(holds: impl Fn() -> bool + Send + Sync + 'static) -> Warrant {
        Warrant(Arc::new(holds))
    }

    /// A warrant that always holds: for a claim that cannot lapse while its
    /// process lives (the kernel's lock of a local term, §7.2).
    pub fn always() -> Warrant {
        Warrant::new(|| true)
    }

    /// Whether the term may answer now.
    pub fn holds(&self) -> bool {
        (self.0)()
    }
}

impl fmt::Debug for Warrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Warrant").finish_non_exhaustive()
    }
}
