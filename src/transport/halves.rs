//! A Unix socket's two halves, each registered with the runtime for what it
//! waits for: the reader for arrivals, the writer for room only while a
//! write waits for it. tokio's own halves register a socket for both, and a
//! Unix socket signals room every time its peer reads: a coordinator's
//! thread, parked after writing a fan-out's lines, was woken once more for
//! each of the clients that read one (BENCHMARKS.md, "Design 4, built").

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use super::wire::register;

/// The reading half.
#[derive(Debug)]
pub struct SocketReader(Arc<AsyncFd<UnixStream>>);

/// The writing half.
#[derive(Debug)]
pub struct SocketWriter {
    socket: Arc<AsyncFd<UnixStream>>,
    /// A second descriptor of the socket registered for room, while a write
    /// waits for it.
    room: Option<AsyncFd<OwnedFd>>,
}

/// Splits `stream`, registering it with the current runtime.
pub(super) fn split(stream: tokio::net::UnixStream) -> io::Result<(SocketReader, SocketWriter)> {
    let socket = Arc::new(register(stream.into_std()?, Interest::READABLE)?);
    let writer = SocketWriter {
        socket: socket.clone(),
        room: None,
    };
    Ok((SocketReader(socket), writer))
}

/// The socket again, unregistered (still non-blocking), when `reader` and
/// `writer` are its two halves.
pub(super) fn reunite(reader: SocketReader, writer: SocketWriter) -> io::Result<UnixStream> {
    drop(writer);
    let socket = Arc::try_unwrap(reader.0)
        .map_err(|_| io::Error::other("the halves are of two sockets"))?;
    Ok(socket.into_inner())
}

impl AsyncRead for SocketReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.0.poll_read_ready(cx))?;
            let read = ready.try_io(|socket| (&mut socket.get_ref()).read(buf.initialize_unfilled()));
            match read {
                Ok(Ok(read)) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                // Nothing there after all: the readiness is cleared.
                Err(_) => {}
            }
        }
    }
}

impl AsyncWrite for SocketWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match (&mut self.socket.get_ref()).write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                done => {
                    self.room = None;
                    return Poll::Ready(done);
                }
            }
            if self.room.is_none() {
                let fd = self.socket.get_ref().as_fd().try_clone_to_owned()?;
                self.room = Some(register(fd, Interest::WRITABLE)?);
            }
            let room = self.room.as_ref().expect("registered above");
            // A registration reports the room there is when it is made.
            ready!(room.poll_write_ready(cx))?.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(std::net::Shutdown::Write))
    }
}
