//! The claim (SPEC.md §7.2): an exclusive SQLite transaction on
//! `flight.lock`, held for the whole term, so that the kernel ends the term
//! when the holder's process dies.

use std::ffi::c_int;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, DEFAULT_NAME, ErrorCode, FileControl, OpenFlags};

use crate::protocol::Epoch;

use super::LocalError;
use super::directory::{DirectoryOptions, prepare_directory};
use super::epoch::{self, EPOCH_FILE};

/// The name of the lock file in the flight directory (SPEC.md §7.1). It holds
/// no data: what matters is the lock on it.
pub const LOCK_FILE: &str = "flight.lock";

/// `flight.lock`'s mode: read and written by the owner only, like every file
/// of the flight directory (§7.1).
const LOCK_FILE_MODE: u32 = 0o600;

/// How long a campaign waits between two attempts at the claim (SPEC.md §7.2).
/// It bounds how long the processes go without a coordinator after one dies:
/// one attempt costs a few system calls, so 10 ms keeps a takeover within a
/// few milliseconds on average while a hundred waiting processes still cost
/// the machine almost nothing.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// A smaller poll interval than this is raised to it, so that a zero cannot
/// turn a campaign into a busy loop.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// How to campaign (SPEC.md §7.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionOptions {
    /// The time between two attempts at the claim; [`POLL_INTERVAL`] by
    /// default, and at least 1 ms.
    pub poll_interval: Duration,
    /// How the directory is judged (SPEC.md §7.4).
    pub directory: DirectoryOptions,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            poll_interval: POLL_INTERVAL,
            directory: DirectoryOptions::default(),
        }
    }
}

/// Elects the coordinator among the processes that share a flight directory
/// (SPEC.md §7.2).
#[derive(Debug)]
pub struct LeaderElection {
    directory: PathBuf,
    lock_path: PathBuf,
    epoch_path: PathBuf,
    poll_interval: Duration,
}

impl LeaderElection {
    /// Prepares `directory` with [`prepare_directory`] (creating it with mode
    /// 0700 if it is missing) and refuses it if it fails the checks of
    /// SPEC.md §7.4.
    pub fn new(
        directory: impl Into<PathBuf>,
        options: ElectionOptions,
    ) -> Result<LeaderElection, LocalError> {
        let directory = directory.into();
        prepare_directory(&directory, &options.directory)?;
        Ok(LeaderElection {
            lock_path: directory.join(LOCK_FILE),
            epoch_path: directory.join(EPOCH_FILE),
            directory,
            poll_interval: options.poll_interval.max(MIN_POLL_INTERVAL),
        })
    }

    /// The flight directory.
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// Tries to win the claim until `timeout` has passed: `Some` term if this
    /// process won, `None` if another process held the claim throughout
    /// (SPEC.md §7.2). A zero timeout makes exactly one attempt.
    ///
    /// Blocks the calling thread, sleeping the poll interval between
    /// attempts; from async code, call it on a blocking thread. A won term's
    /// epoch is durable before this returns (SPEC.md §7.3). An error means
    /// this process does not hold the claim.
    pub fn campaign(&self, timeout: Duration) -> Result<Option<Leadership>, LocalError> {
        // `None` when the timeout is too large to add: campaign until won.
        let deadline = Instant::now().checked_add(timeout);
        let mut connection = self.open_lock_file()?;
        loop {
            if self.try_claim(&connection)? {
                if !lock_file_moved(&connection, &self.lock_path)? {
                    return self.begin_term(connection).map(Some);
                }
                // §7.2: the file this connection opened was unlinked or
                // renamed before the claim was won, so another process may hold
                // a claim on the file now at the path. Closing the connection
                // releases the stale claim; campaign on the current file.
                tracing::debug!(path = %self.lock_path.display(), "won the claim on a lock file that has since moved; campaigning on the current one");
                drop(connection);
                connection = self.open_lock_file()?;
            }
            let remaining = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => self.poll_interval,
            };
            if remaining.is_zero() {
                tracing::debug!(directory = %self.directory.display(), ?timeout, "another process holds the claim; campaign timed out");
                return Ok(None);
            }
            thread::sleep(remaining.min(self.poll_interval));
        }
    }

    /// Opens `flight.lock`, creating it if it is missing.
    ///
    /// §7.2: this is the only place where the library opens the lock file,
    /// and nothing else in a process that may hold the claim must open it: the
    /// claim is a POSIX lock, which belongs to the whole process, and closing
    /// *any* descriptor on the file (a check, a hash, a backup) releases it
    /// silently. SQLite knows this and keeps its own connections' descriptors
    /// open while another connection of the process holds a lock, so a second
    /// campaign in the same process is safe; `std::fs::File::open` is not.
    fn open_lock_file(&self) -> Result<Connection, LocalError> {
        let failed = |error| LocalError::OpenLockFile {
            path: self.lock_path.clone(),
            error,
        };
        // No `SQLITE_OPEN_URI`: the path is a path, never a URI with options.
        // `NOFOLLOW`: a link put in place of the file is refused.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let connection = Connection::open_with_flags(&self.lock_path, flags).map_err(failed)?;
        // SQLite creates the file with mode 0644 (less the umask). The 0700
        // directory already keeps others out, but a file of the flight
        // directory is the owner's alone (§7.1). `chmod` by path opens no
        // descriptor on the file, so it cannot release a claim (above). A
        // failure only leaves the file as SQLite made it: worth a warning,
        // not a refusal to coordinate.
        if let Ok(metadata) = fs::symlink_metadata(&self.lock_path)
            && metadata.permissions().mode() & 0o7777 != LOCK_FILE_MODE
            && let Err(error) =
                fs::set_permissions(&self.lock_path, fs::Permissions::from_mode(LOCK_FILE_MODE))
        {
            tracing::warn!(path = %self.lock_path.display(), %error, "cannot make the lock file private (mode 0600)");
        }
        // §7.2: rusqlite gives every connection a 5 s busy timeout, which
        // would make each failed attempt sleep in SQLite's back-off for up to
        // 5 s. The campaign retries on its own schedule instead.
        connection.busy_timeout(Duration::ZERO).map_err(failed)?;
        Ok(connection)
    }

    /// One attempt at the claim: `BEGIN EXCLUSIVE` takes the write lock on
    /// the file at once or fails with `SQLITE_BUSY` (SPEC.md §7.2). Nothing is
    /// read before it: a connection holding a read lock while it waits would
    /// keep every other contender out. On the empty database it opens SQLite's
    /// journal, `flight.lock-journal`, and deletes a dead holder's first
    /// (§7.1).
    fn try_claim(&self, connection: &Connection) -> Result<bool, LocalError> {
        match connection.execute_batch("BEGIN EXCLUSIVE") {
            Ok(()) => Ok(true),
            Err(error) if error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => Ok(false),
            Err(error) => Err(LocalError::Claim {
                path: self.lock_path.clone(),
                error,
            }),
        }
    }

    /// Starts the term whose claim `connection` holds: the next epoch, written
    /// durably (SPEC.md §7.3). On error the connection is dropped, which
    /// releases the claim.
    fn begin_term(&self, connection: Connection) -> Result<Leadership, LocalError> {
        epoch::remove_stale_temp_files(&self.directory);
        let epoch = epoch::next_epoch(&self.epoch_path)?;
        epoch::write_epoch(&self.directory, &self.epoch_path, epoch)?;
        // §7.3: checked once more after the write. If the lock file was
        // replaced while this process read and wrote the epoch, a second
        // holder may have read the same old epoch; whichever of the two holds
        // the file that is still at the path wrote last, and only it serves.
        if lock_file_moved(&connection, &self.lock_path)? {
            return Err(LocalError::LockFileMoved {
                path: self.lock_path.clone(),
            });
        }
        tracing::info!(directory = %self.directory.display(), %epoch, "won the coordinator's claim; term begins");
        Ok(Leadership {
            epoch,
            directory: self.directory.clone(),
            lock_path: self.lock_path.clone(),
            connection: Some(connection),
        })
    }
}

/// Whether the file `connection` has open is no longer the one at `path`
/// (unlinked, renamed, or replaced), by SQLite's `SQLITE_FCNTL_HAS_MOVED`,
/// which compares the inode with a `stat` of the path and never opens the
/// file (SPEC.md §7.2).
fn lock_file_moved(connection: &Connection, path: &Path) -> Result<bool, LocalError> {
    let mut moved: c_int = 0;
    connection
        .file_control(DEFAULT_NAME, FileControl::HasMoved(&mut moved))
        .map_err(|error| LocalError::CheckLockFile {
            path: path.to_owned(),
            error,
        })?;
    Ok(moved != 0)
}

/// One term as the coordinator (SPEC.md §7.2). It lasts until [`resign`],
/// until it is dropped, or until its process dies, when the kernel releases
/// the claim and another campaigner can win.
///
/// [`resign`]: Leadership::resign
#[derive(Debug)]
pub struct Leadership {
    epoch: Epoch,
    directory: PathBuf,
    lock_path: PathBuf,
    /// The connection whose open `BEGIN EXCLUSIVE` transaction is the claim;
    /// `None` once the term has ended. §7.2: the only descriptor on
    /// `flight.lock` this process may have while it holds the claim, apart
    /// from other SQLite connections.
    connection: Option<Connection>,
}

impl Leadership {
    /// This term's epoch, greater than every earlier term's in this directory
    /// and already durable (SPEC.md §7.3).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The flight directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// Whether the claim still holds (SPEC.md §7.2). Poll it while serving:
    /// it costs one `stat` of the lock file's path. An error means the term is
    /// over (another process may already coordinate on a new lock file):
    /// stop serving and drop the `Leadership`.
    pub fn check(&self) -> Result<(), LocalError> {
        let connection = self.connection.as_ref().expect(
            "the connection is only taken when the term ends, which consumes the Leadership",
        );
        if lock_file_moved(connection, &self.lock_path)? {
            tracing::warn!(path = %self.lock_path.display(), epoch = %self.epoch, "the lock file was deleted or renamed; the term must end");
            return Err(LocalError::LockFileMoved {
                path: self.lock_path.clone(),
            });
        }
        Ok(())
    }

    /// Ends the term and releases the claim. Dropping the `Leadership` does
    /// the same; this reports an error, although the claim is released
    /// whatever happens, because closing the connection closes the file.
    pub fn resign(mut self) -> Result<(), LocalError> {
        self.end("resigned")
    }

    fn end(&mut self, how: &'static str) -> Result<(), LocalError> {
        let Some(connection) = self.connection.take() else {
            return Ok(());
        };
        // Closing the connection rolls back the claim's transaction and
        // closes the file, which releases the lock.
        let closed = connection.close();
        tracing::info!(directory = %self.directory.display(), epoch = %self.epoch, how, "coordinator term ended");
        closed.map_err(|(_connection, error)| LocalError::Resign {
            path: self.lock_path.clone(),
            error,
        })
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Err(error) = self.end("dropped") {
            tracing::warn!(%error, "ending a coordinator term reported an error");
        }
    }
}
