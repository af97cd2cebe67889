//! How processes reach the coordinator (SPEC.md §11): a [`Transport`]
//! connects a client to the coordinator and lets the coordinator listen, and
//! either side checks that the other is one it may trust. The bytes carried
//! (hello, framing, every message and limit: §4, §5) are the same on every
//! transport; the shell is written against these traits only. Each backend
//! is a module:
//!
//! - [`unix`]: the Unix socket in the flight directory, with peer
//!   credentials (§11.1, §11.2).
//! - `tcp` (feature `cluster`): TCP between the hosts of a cluster, with
//!   mutual TLS 1.3, or plain on loopback.

mod halves;
#[cfg(feature = "cluster")]
pub mod tcp;
pub mod unix;
pub mod wire;

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

use wire::{Polled, Wire};

/// One side's halves of an established connection.
pub struct Connection<R, W> {
    pub reader: R,
    pub writer: W,
}

/// Connects to the coordinator, and listens when this process is it.
pub trait Transport: Send + Sync + 'static {
    /// Where a coordinator listens (what the election reports).
    type Address: Send + Sync + 'static;
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;
    type Listener: Listener<Reader = Self::Reader, Writer = Self::Writer>;

    /// Connects to the coordinator at `address` and checks that it is one
    /// this process may trust (§11.2).
    fn connect(
        &self,
        address: &Self::Address,
    ) -> impl Future<Output = Result<Connection<Self::Reader, Self::Writer>, ConnectError>> + Send;

    /// Starts listening for a term this process won; only the winner of the
    /// election calls it (§11.1).
    fn listen(&self) -> io::Result<Self::Listener>;

    /// The connection as the client's process drives it once the handshake
    /// is done (§10.1). By default the single-flight thread reads it for
    /// every call; a transport whose connection is a socket lends it to the
    /// call that waits.
    fn wire(connection: Connection<Self::Reader, Self::Writer>) -> io::Result<Box<dyn Wire>> {
        Ok(Box::new(Polled::new(connection.reader, connection.writer)))
    }
}

/// The coordinator's end: accepts connections for one term.
pub trait Listener: Send + 'static {
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;
    /// A connection accepted but not yet checked.
    type Incoming: Send + 'static;

    /// The next connection. Errors are the listener's own (out of
    /// descriptors, …), not a peer's; the caller backs off and goes on.
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Incoming>> + Send;

    /// Checks who the peer is (§11.2). It runs in the connection's own task,
    /// so that a slow peer never holds up the accept loop.
    fn establish(
        incoming: Self::Incoming,
    ) -> impl Future<Output = Result<Connection<Self::Reader, Self::Writer>, PeerRefused>> + Send;

    /// The periodic check, every
    /// [`CHECK_INTERVAL`](crate::election::CHECK_INTERVAL): repairs what can
    /// be repaired (a removed socket is bound again, §11.1); an error ends
    /// the term.
    fn check(&mut self) -> io::Result<()>;

    /// Stops listening at the end of the term.
    fn close(self);
}

/// Why a client has no connection to the coordinator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Nothing answers at the address: no coordinator, or a dead one. The
    /// client may campaign.
    #[error("no coordinator answers: {0}")]
    Unreachable(io::Error),
    /// Something answers that this process must not trust.
    #[error(transparent)]
    Refused(#[from] PeerRefused),
    /// The coordinator's address cannot be used as it is written, or not
    /// with this transport's settings; trying again will not help.
    #[error("cannot use the coordinator's address {address}: {reason}")]
    // Only the cluster's transport has addresses to get wrong.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Address { address: String, reason: String },
}

/// Why the other end of a connection is not trusted (§11.2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerRefused {
    #[error("the peer runs as user id {uid}, not as this process's user")]
    OtherUser { uid: u32 },
    #[error("the peer's user cannot be told: {0}")]
    Unknown(io::Error),
    /// The peer's certificate is missing or does not verify. `peer` says
    /// who ("the client at 10.0.0.2:51234", "the coordinator at
    /// 10.0.0.1:7000"), `problem` what it presented.
    #[error("{peer} presented {problem}")]
    // Only the cluster's transport checks certificates and sets up TLS.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Certificate { peer: String, problem: String },
    /// The connection could not be set up for another reason (a TLS
    /// handshake that failed or took too long, a socket the runtime could
    /// not register).
    #[error("cannot set up the connection with {peer}: {reason}")]
    Setup { peer: String, reason: String },
}
