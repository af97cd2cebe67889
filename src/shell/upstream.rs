//! How a host coordinator reaches the cluster's coordinator (SPEC.md
//! §18.1, §18.3): one connection at a time, opened with the relay hello,
//! whose lines the server reports to its relay. The greeting is the
//! client's (§4.2), shared with the driver (`super::driver`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use super::lines::{LineError, Lines};
use super::options::HANDSHAKE_TIMEOUT;
use crate::protocol::{ClientHello, CoordinatorHello, HandshakeError, decode_coordinator_hello};
use crate::transport::Connection;

/// A future that resolves when the coordinator reached is no longer the
/// cluster's (SPEC.md §14.3); one that never resolves where the connection's
/// close says it (a local coordinator).
pub(super) type Gone = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection to the cluster's coordinator whose relay hello was answered.
pub(super) struct Reached<R, W> {
    pub(super) lines: Lines<R>,
    pub(super) writer: W,
    pub(super) hello: CoordinatorHello,
    pub(super) gone: Gone,
}

/// Reaches the cluster's coordinator for a host's relay, again after each
/// loss: the server runs one attempt at a time, and the next only after the
/// connection it made is gone.
pub(super) trait Upstream: Send + 'static {
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;

    /// One attempt: the connection, greeted with the relay hello, or the
    /// pause before the next attempt.
    fn reach(
        &mut self,
    ) -> impl Future<Output = Result<Reached<Self::Reader, Self::Writer>, Duration>> + Send;
}

/// The upstream of a term that does not relay: the coordinator's. It has
/// no value, so the server never runs one.
pub(super) enum NoUpstream {}

impl Upstream for NoUpstream {
    type Reader = tokio::io::Empty;
    type Writer = tokio::io::Sink;

    async fn reach(&mut self) -> Result<Reached<Self::Reader, Self::Writer>, Duration> {
        match *self {}
    }
}

/// What a greeting came to (SPEC.md §4.2).
pub(super) enum Greeted<R, W> {
    /// The coordinator answered with a hello this process accepts.
    Answered {
        lines: Lines<R>,
        writer: W,
        hello: CoordinatorHello,
    },
    /// Nobody answered, or the connection closed: try again.
    Nobody,
    /// The coordinator refused this process's certificate (SPEC.md §14.5);
    /// waiting would not change that.
    Rejected(io::Error),
    /// The coordinator's hello cannot be used: another version, or not a
    /// hello.
    Unusable(HandshakeError),
}

/// Sends `hello` on `connection` and reads the coordinator's (SPEC.md §4.2).
pub(super) async fn greet<R, W>(connection: Connection<R, W>, hello: &ClientHello) -> Greeted<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Connection {
        reader: read,
        writer: mut write,
    } = connection;
    let mut line = serde_json::to_vec(hello).expect("a hello serializes");
    line.push(b'\n');
    if write.write_all(&line).await.is_err() || write.flush().await.is_err() {
        return Greeted::Nobody;
    }
    let mut lines = Lines::new(read);
    let answer = match tokio::time::timeout(HANDSHAKE_TIMEOUT, lines.next()).await {
        Ok(Ok(line)) => line,
        Ok(Err(LineError::Io(error))) if error.kind() == io::ErrorKind::PermissionDenied => {
            warn!(%error, "the coordinator refused this process");
            return Greeted::Rejected(error);
        }
        Ok(Err(error)) => {
            debug!(%error, "the coordinator closed during the handshake");
            return Greeted::Nobody;
        }
        Err(_) => {
            warn!("the coordinator did not answer the handshake in time; is its process stopped?");
            return Greeted::Nobody;
        }
    };
    match decode_coordinator_hello(&answer) {
        Ok(hello) => Greeted::Answered {
            lines,
            writer: write,
            hello,
        },
        Err(error) => {
            warn!(%error, "cannot use the coordinator");
            Greeted::Unusable(error)
        }
    }
}
