//! The checks on the flight directory (SPEC.md §7.4): it must be a real
//! directory, owned by the user who runs the process, closed to everyone else,
//! and on a local file system.
//!
//! Everything the election guarantees rests on these: another user who can
//! write into the directory can replace `flight.epoch` or `flight.lock`, and a
//! network file system does not give POSIX locks, renames and `fsync` the
//! meaning the claim and the epoch need (SPEC.md §7.2, §7.3).

use std::fmt;
use std::fs::{self, DirBuilder, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The mode a missing directory is created with: the owner may do anything,
/// nobody else anything (SPEC.md §7.4), as tmux and ssh-agent do for theirs.
pub const DIRECTORY_MODE: u32 = 0o700;

/// The permission bits that must all be clear: any access for group or others.
const GROUP_AND_OTHER_BITS: u32 = 0o077;

/// How to judge a directory beyond the fixed rules (SPEC.md §7.4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectoryOptions {
    /// FUSE file system types that the user vouches are local to this
    /// machine, as `/proc/self/mountinfo` names them (`fuse.sshfs`) or by
    /// their subtype alone (`sshfs`). A FUSE type on the built-in list of
    /// network file systems ([`NETWORK_FUSE_TYPES`](super::network::NETWORK_FUSE_TYPES))
    /// is refused unless it is listed here; every other FUSE type is accepted
    /// anyway. Linux only (SPEC.md §7.5).
    pub trusted_fuse_types: Vec<String>,
}

/// Why a directory cannot hold the election's files (SPEC.md §7.4). Each
/// message says what was found and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    #[error(
        "cannot create the flight directory {}: {error}; create it yourself with `mkdir -m 700`, or choose a directory in a place you can write to",
        path.display()
    )]
    Create { path: PathBuf, error: io::Error },
    #[error(
        "cannot inspect the flight directory {}: {error}; check that it exists and that you may search every directory above it",
        path.display()
    )]
    Inspect { path: PathBuf, error: io::Error },
    #[error(
        "the flight directory {} is a symbolic link; refusing it, because whoever made the link chooses where the lock and the epoch live: replace the link with a real directory (`mkdir -m 700`), or pass the path it points to if you made it yourself",
        path.display()
    )]
    Symlink { path: PathBuf },
    #[error(
        "the flight directory {} exists but is not a directory; remove it or choose another path",
        path.display()
    )]
    NotADirectory { path: PathBuf },
    #[error(
        "the flight directory {} belongs to user id {owner}, but this process runs as user id {user}; another user could replace the lock or the epoch, so use a directory of your own (for example under $XDG_RUNTIME_DIR)",
        path.display()
    )]
    NotOwned {
        path: PathBuf,
        owner: u32,
        user: u32,
    },
    #[error(
        "the flight directory {} has mode {mode:04o}, which lets group or others in; run `chmod 700 {}` (the directory must have mode 0700 or stricter)",
        path.display(),
        path.display()
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error(transparent)]
    Network(#[from] NetworkDirectoryError),
    #[error(
        "cannot tell whether the flight directory {} is on a local file system: it is on a FUSE file system, and {reason}; use a directory on a local disk",
        path.display()
    )]
    UnidentifiedFuse { path: PathBuf, reason: String },
}

/// The directory is on a network file system (SPEC.md §7.4). SQLite's locks,
/// `rename` and `fsync` are not reliable there, and a directory shared with
/// other machines would let processes on them coordinate without seeing each
/// other's locks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct NetworkDirectoryError {
    /// The directory that was refused.
    pub path: PathBuf,
    /// The file system's name: a kernel file system (`NFS`, `SMB2`, ...) or a
    /// FUSE type as `/proc/self/mountinfo` names it (`fuse.sshfs`).
    pub file_system: String,
    /// Whether the file system is a FUSE one, which the user may vouch for
    /// with [`DirectoryOptions::trusted_fuse_types`].
    pub fuse: bool,
}

impl fmt::Display for NetworkDirectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the flight directory {} is on {}, a network file system; its locks, renames and fsync cannot be trusted to elect one coordinator, so use a directory on a local disk (for example under $XDG_RUNTIME_DIR)",
            self.path.display(),
            self.file_system,
        )?;
        if self.fuse {
            write!(
                f,
                "; if this FUSE file system is in fact local to this machine, list \"{}\" in the trusted FUSE types",
                self.file_system,
            )?;
        }
        Ok(())
    }
}

/// Makes sure `path` can hold the election's files (SPEC.md §7.4), creating
/// it (and any missing parent) with mode 0700 if it is missing.
///
/// Refuses a symbolic link, anything that is not a directory, a directory
/// owned by another user, one with any permission bit for group or others,
/// and, on Linux, one on a network file system. Only the last component of
/// `path` is checked, as tmux checks `/tmp/tmux-<uid>`: the directories above
/// it are the user's choice. Other platforms get every check except the one
/// for network file systems (SPEC.md §7.5).
pub fn prepare_directory(path: &Path, options: &DirectoryOptions) -> Result<(), DirectoryError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIRECTORY_MODE)
                .create(path)
                .map_err(|error| DirectoryError::Create {
                    path: path.to_owned(),
                    error,
                })?;
            // Look again rather than trust the creation: another user may have
            // put a link or a directory of theirs there first, and `create`
            // accepts an existing directory (even through a link).
            fs::symlink_metadata(path).map_err(|error| inspect_error(path, error))?
        }
        Err(error) => return Err(inspect_error(path, error)),
    };
    check_metadata(path, &metadata)?;
    super::network::check_local(path, &metadata, options)
}

fn inspect_error(path: &Path, error: io::Error) -> DirectoryError {
    DirectoryError::Inspect {
        path: path.to_owned(),
        error,
    }
}

/// The rules on what the directory is and who owns it (SPEC.md §7.4).
fn check_metadata(path: &Path, metadata: &Metadata) -> Result<(), DirectoryError> {
    let path = path.to_owned();
    if metadata.file_type().is_symlink() {
        return Err(DirectoryError::Symlink { path });
    }
    if !metadata.is_dir() {
        return Err(DirectoryError::NotADirectory { path });
    }
    let user = rustix::process::getuid().as_raw();
    if metadata.uid() != user {
        return Err(DirectoryError::NotOwned {
            path,
            owner: metadata.uid(),
            user,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & GROUP_AND_OTHER_BITS != 0 {
        return Err(DirectoryError::Permissions { path, mode });
    }
    Ok(())
}
