//! Why the local election failed (SPEC.md §7). Each message names the file
//! involved and says what to do.

use std::io;
use std::path::PathBuf;

use super::{DirectoryError, DurableStep, EpochProblem};
use crate::protocol::Epoch;

/// Why a local campaign failed or a local term ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
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
