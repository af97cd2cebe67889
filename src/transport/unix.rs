//! The coordinator's Unix socket in the flight directory (SPEC.md §11):
//! where it is, how it is replaced, who may use it.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::halves::{self, Reader, Writer};
use super::{ConnectError, Connection, Listener, PeerRefused, Transport};

/// [`Transport`] over the flight directory's Unix socket.
#[derive(Debug, Clone)]
pub struct UnixTransport {
    sockets: Arc<SocketDirectory>,
    uid: u32,
}

impl UnixTransport {
    /// The transport of `directory`, which must already be checked
    /// (§7.4).
    pub fn new(directory: &Path) -> io::Result<UnixTransport> {
        Ok(UnixTransport {
            sockets: Arc::new(SocketDirectory::new(directory)?),
            uid: own_uid(),
        })
    }
}

/// Splits a stream whose peer is the same user, or says who it is (§11.2).
fn same_user(stream: UnixStream, own: u32) -> Result<Connection<Reader, Writer>, PeerRefused> {
    let uid = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|error| PeerRefused::Unknown(error.into()))?
        .uid
        .as_raw();
    if !peer_allowed(uid, own) {
        return Err(PeerRefused::OtherUser { uid });
    }
    // Watched for arrivals alone (`super::halves`): tokio's own halves
    // would wake this side whenever the peer reads.
    let setup = |error: io::Error| PeerRefused::Setup {
        peer: "the peer on the flight directory's socket".to_owned(),
        reason: error.to_string(),
    };
    let (reader, writer) = halves::split(stream).map_err(setup)?;
    Ok(Connection { reader, writer })
}

impl Transport for UnixTransport {
    /// The socket of the flight directory, which the transport knows: a
    /// local coordinator has no address to name.
    type Address = ();
    type Reader = Reader;
    type Writer = Writer;
    type Listener = UnixSocketListener;

    async fn connect(&self, _: &()) -> Result<Connection<Reader, Writer>, ConnectError> {
        let stream = tokio::net::UnixStream::connect(self.sockets.socket())
            .await
            .and_then(tokio::net::UnixStream::into_std)
            .map_err(ConnectError::Unreachable)?;
        Ok(same_user(stream, self.uid)?)
    }

    /// The socket itself, which lends (§10.1).
    fn wire(connection: Connection<Reader, Writer>) -> io::Result<Box<dyn super::wire::Wire>> {
        let stream = halves::reunite(connection.reader, connection.writer)?;
        Ok(Box::new(super::wire::SocketWire::new(stream)?))
    }

    fn listen(&self) -> io::Result<UnixSocketListener> {
        self.sockets.remove_stale_temporaries();
        let (listener, inode) = self.sockets.bind(0)?;
        Ok(UnixSocketListener {
            listener: registered_listener(listener)?,
            inode,
            binds: 1,
            sockets: self.sockets.clone(),
            uid: self.uid,
        })
    }
}

/// `listener` registered with the current runtime. Not tokio's listener,
/// which would register every accepted socket as tokio does (for arrivals
/// and room), only for [`halves`] to register it again: a registration
/// per connection more in the runtime's table, 0.4 KiB per idle client.
fn registered_listener(listener: UnixListener) -> io::Result<AsyncFd<UnixListener>> {
    listener.set_nonblocking(true)?;
    super::wire::register(listener, Interest::READABLE)
}

/// The socket of a term, bound in the flight directory.
#[derive(Debug)]
pub struct UnixSocketListener {
    listener: AsyncFd<UnixListener>,
    inode: u64,
    /// How many times the term bound its socket, which names the next
    /// temporary file.
    binds: u64,
    sockets: Arc<SocketDirectory>,
    uid: u32,
}

impl Listener for UnixSocketListener {
    type Reader = Reader;
    type Writer = Writer;
    type Incoming = (UnixStream, u32);

    async fn accept(&mut self) -> io::Result<(UnixStream, u32)> {
        loop {
            let mut ready = self.listener.readable().await?;
            if let Ok(accepted) = ready.try_io(|listener| listener.get_ref().accept()) {
                let (stream, _) = accepted?;
                stream.set_nonblocking(true)?;
                return Ok((stream, self.uid));
            }
        }
    }

    async fn establish(
        (stream, uid): (UnixStream, u32),
    ) -> Result<Connection<Reader, Writer>, PeerRefused> {
        same_user(stream, uid)
    }

    /// §11.1: a socket that a cleaner or a person removed or replaced is
    /// bound again.
    fn check(&mut self) -> io::Result<()> {
        if self.sockets.still_bound(self.inode) {
            return Ok(());
        }
        tracing::warn!("the socket was removed or replaced; binding it again (SPEC.md §11.1)");
        let (listener, inode) = self.sockets.bind(self.binds)?;
        self.binds += 1;
        self.listener = registered_listener(listener)?;
        self.inode = inode;
        Ok(())
    }

    /// Removes the socket unless another term's socket has replaced it.
    fn close(self) {
        if self.sockets.still_bound(self.inode) {
            let _ = fs::remove_file(self.sockets.socket());
        }
    }
}

/// The socket's name in the flight directory (SPEC.md §7.1).
pub const SOCKET_FILE: &str = "flight.sock";

/// Prefix of the temporary names a new coordinator binds before renaming
/// over [`SOCKET_FILE`] (SPEC.md §11.1).
const SOCKET_TEMP_PREFIX: &str = "flight.sock.tmp.";

/// The longest path a Unix socket address holds on Linux (`sun_path` is 108
/// bytes with its terminating NUL).
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Longest temporary name this module makes: prefix, pid, a counter.
const TEMP_NAME_BYTES: usize = SOCKET_TEMP_PREFIX.len() + 10 + 1 + 20;

/// Where the socket and its temporary names are, as this process reaches
/// them. When the directory's path is too long for a socket address, they are
/// reached through `/proc/self/fd/<n>` of a descriptor on the directory, which
/// this value keeps open (SPEC.md §11.1).
#[derive(Debug)]
pub(crate) struct SocketDirectory {
    base: PathBuf,
    _handle: Option<File>,
}

impl SocketDirectory {
    pub(crate) fn new(directory: &Path) -> io::Result<SocketDirectory> {
        let longest = directory.as_os_str().len() + 1 + TEMP_NAME_BYTES;
        if longest <= MAX_SOCKET_PATH_BYTES {
            return Ok(SocketDirectory {
                base: directory.to_owned(),
                _handle: None,
            });
        }
        let handle = File::open(directory)?;
        let base = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
        if !base.is_dir() {
            return Err(io::Error::other(format!(
                "the path is longer than the {MAX_SOCKET_PATH_BYTES} bytes a Unix socket address holds, and /proc is not mounted to reach it another way; use a shorter directory path"
            )));
        }
        Ok(SocketDirectory {
            base,
            _handle: Some(handle),
        })
    }

    /// The path to connect to.
    pub(crate) fn socket(&self) -> PathBuf {
        self.base.join(SOCKET_FILE)
    }

    /// Binds and listens on a temporary name with mode 0600, then renames it
    /// over the socket, so that the socket path always either refuses
    /// connections of a dead coordinator or reaches a listening one; never a
    /// bound socket that does not listen yet (SPEC.md §11.1). Only the holder
    /// of the claim may call this.
    pub(crate) fn bind(&self, attempt: u64) -> io::Result<(std::os::unix::net::UnixListener, u64)> {
        let temp = self.base.join(format!(
            "{SOCKET_TEMP_PREFIX}{}.{attempt}",
            std::process::id()
        ));
        let _ = fs::remove_file(&temp);
        let listener = std::os::unix::net::UnixListener::bind(&temp)?;
        let renamed = fs::set_permissions(&temp, fs::Permissions::from_mode(0o600))
            .and_then(|()| fs::rename(&temp, self.socket()));
        if let Err(error) = renamed {
            let _ = fs::remove_file(&temp);
            return Err(error);
        }
        let inode = fs::symlink_metadata(self.socket())?.ino();
        Ok((listener, inode))
    }

    /// Whether the socket path still names the socket bound with `inode`:
    /// a cleaner or a person may have removed or replaced it (SPEC.md §11.1).
    pub(crate) fn still_bound(&self, inode: u64) -> bool {
        fs::symlink_metadata(self.socket()).is_ok_and(|m| m.ino() == inode)
    }

    /// Removes temporary socket names that earlier coordinators left behind
    /// when they died between bind and rename. Only the holder of the claim
    /// may call this: no other process is binding then.
    pub(crate) fn remove_stale_temporaries(&self) {
        let Ok(entries) = fs::read_dir(&self.base) else {
            return;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(SOCKET_TEMP_PREFIX)
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Whether a peer with user id `peer` may use the socket of a process
/// running as `own` (SPEC.md §11.2): the same user only, as ssh-agent and
/// tmux decide. The directory's mode already keeps others out; this check
/// holds even if the mode is changed later.
pub(crate) fn peer_allowed(peer: u32, own: u32) -> bool {
    peer == own
}

/// This process's user id.
pub(crate) fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §11.2: only the same user.
    #[test]
    fn peers_of_other_users_are_refused() {
        assert!(peer_allowed(1000, 1000));
        assert!(!peer_allowed(0, 1000));
        assert!(!peer_allowed(1001, 1000));
    }

    /// §11.1: a directory whose path is too long for a socket address is
    /// reached through a descriptor.
    #[test]
    fn long_directories_go_through_proc() {
        let short = SocketDirectory::new(Path::new("/tmp")).unwrap();
        assert_eq!(short.socket(), Path::new("/tmp/flight.sock"));
        let temp = std::env::temp_dir().join("x".repeat(120));
        fs::create_dir_all(&temp).unwrap();
        let long = SocketDirectory::new(&temp).unwrap();
        assert!(long.socket().starts_with("/proc/self/fd/"));
        let (_listener, inode) = long.bind(1).unwrap();
        assert!(long.still_bound(inode));
        assert!(temp.join(SOCKET_FILE).exists());
        fs::remove_dir_all(&temp).unwrap();
    }
}
