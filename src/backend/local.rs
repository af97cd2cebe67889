//! The local backend: the processes of one machine that share a flight
//! directory, elected through its SQLite claim and reaching the coordinator
//! through its Unix socket (SPEC.md §7, §11.1).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Backend, BackendError, Upper};
use crate::election::local::{DirectoryOptions, ElectionOptions, LocalElection, POLL_INTERVAL};
use crate::transport::unix::UnixTransport;

/// The default grace window of a local term that follows another (SPEC.md
/// §10.2).
///
/// Leaders and joiners of the previous term learn of its end at once (their
/// connection closes), and reconnect within a poll interval (10 ms) and one
/// round trip. The window must also cover a process that is briefly starved
/// of CPU (a busy host, a large GC-like pause in the work's runtime), so it is
/// fifty times that, while keeping the pause that a failover imposes on new
/// keys well under a second.
pub const DEFAULT_GRACE_WINDOW: Duration = Duration::from_millis(500);

/// A flight directory and how it is judged.
#[derive(Clone, Debug)]
pub(crate) struct Directory {
    path: PathBuf,
    options: DirectoryOptions,
}

/// The directory exists but its socket cannot be reached through it.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the flight directory {path} to reach its socket: {error}")]
struct SocketDirectoryError {
    path: String,
    error: io::Error,
}

impl Directory {
    /// The flight directory at `path`, judged with the default options.
    pub(crate) fn new(path: &Path) -> Directory {
        Directory {
            path: path.to_owned(),
            options: DirectoryOptions::default(),
        }
    }

    /// The flight directory at `path`, judged as this one is.
    #[cfg(feature = "cluster")]
    pub(crate) fn at(&self, path: &Path) -> Directory {
        Directory {
            path: path.to_owned(),
            options: self.options.clone(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Vouches that the FUSE file system type is local (SPEC.md §7.4).
    pub(crate) fn trust_fuse_type(&mut self, fuse_type: String) {
        self.options.trusted_fuse_types.push(fuse_type);
    }

    /// Checks the directory, creating it with mode 0700 if missing (SPEC.md
    /// §7.4), without opening its election.
    #[cfg(feature = "cluster")]
    pub(crate) fn prepare(&self) -> Result<(), BackendError> {
        crate::election::local::prepare_directory(&self.path, &self.options)
            .map_err(BackendError::new)
    }

    fn transport(&self) -> io::Result<UnixTransport> {
        UnixTransport::new(&self.path)
    }

    fn socket_error(&self, error: io::Error) -> BackendError {
        BackendError::new(SocketDirectoryError {
            path: self.path.display().to_string(),
            error,
        })
    }
}

impl Backend for Directory {
    type Election = LocalElection;
    type Transport = UnixTransport;

    const GRACE_WINDOW: Duration = DEFAULT_GRACE_WINDOW;
    const POLL_INTERVAL: Duration = POLL_INTERVAL;

    /// Checks the directory (creating it with mode 0700 if missing, SPEC.md
    /// §7.4) and opens what reaches its socket.
    async fn open(
        &self,
        poll_interval: Duration,
    ) -> Result<(LocalElection, UnixTransport), BackendError> {
        let election = LocalElection::new(
            &self.path,
            ElectionOptions {
                poll_interval,
                directory: self.options.clone(),
            },
        )
        .map_err(BackendError::new)?;
        let transport = self.transport().map_err(|error| self.socket_error(error))?;
        Ok((election, transport))
    }

    /// A local coordinator is at the directory's socket, if anywhere: a
    /// directory that does not exist has none, and is not created.
    async fn find(&self) -> Result<Option<(UnixTransport, ())>, BackendError> {
        match self.transport() {
            Ok(transport) => Ok(Some((transport, ()))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.socket_error(error)),
        }
    }

    fn shown((): &()) -> Option<String> {
        None
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn serving_at(&self, _: &UnixTransport) -> String {
        self.describe()
    }

    /// A directory of its own relays to nothing.
    type Upper = Directory;

    fn above(&self) -> Option<&Directory> {
        None
    }

    fn upper(&self) -> Result<Option<Upper<Directory>>, BackendError> {
        Ok(None)
    }
}
