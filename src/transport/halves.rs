//! The two halves of a connected Unix socket as the runtime should watch
//! it: for arrivals alone, and for room only while a write waits for it.
//!
//! tokio registers a socket for both, and a Unix socket signals room
//! (`EPOLLOUT`) every time its peer reads: a coordinator whose clients'
//! sockets were registered so was woken after every line a client read,
//! two wake-ups for nothing per call when calls come now and then
//! (BENCHMARKS.md, "Calls now and then"). Here the reader's registration
//! asks for arrivals (and the end, which the kernel always reports), and
//! the writer writes straight to the socket: only a write that finds the
//! socket full registers a second descriptor of it for room, dropped again
//! by the next write that goes through.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use super::wire::register;

/// The reading half: registered with the current runtime for arrivals.
pub struct Reader(AsyncFd<Arc<UnixStream>>);

/// The writing half.
pub struct Writer {
    socket: Arc<UnixStream>,
    /// A second descriptor of the socket, registered for room while a
    /// write waits for it.
    room: Option<AsyncFd<OwnedFd>>,
}

/// Splits `stream`, which must be non-blocking, registering its reader with
/// the current runtime.
pub(super) fn split(stream: UnixStream) -> io::Result<(Reader, Writer)> {
    let socket = Arc::new(stream);
    let reader = Reader(register(socket.clone(), Interest::READABLE)?);
    Ok((reader, Writer { socket, room: None }))
}

/// The socket of `reader` and `writer` again, whole and unregistered.
pub(super) fn reunite(reader: Reader, writer: Writer) -> io::Result<UnixStream> {
    drop(writer.room);
    let socket = reader.0.into_inner();
    if !Arc::ptr_eq(&socket, &writer.socket) {
        return Err(io::Error::other("the halves of two different sockets"));
    }
    drop(writer.socket);
    Arc::into_inner(socket).ok_or_else(|| io::Error::other("a half is still shared"))
}

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match ready.try_io(|socket| (&**socket.get_ref()).read(unfilled)) {
                Ok(Ok(read)) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                // Nothing there: the readiness was cleared; wait for more.
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match (&*self.socket).write(buf) {
                Ok(written) => {
                    self.room = None;
                    return Poll::Ready(Ok(written));
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if self.room.is_none() {
                        let second = OwnedFd::from(self.socket.try_clone()?);
                        self.room = Some(register(second, Interest::WRITABLE)?);
                    }
                    let room = self.room.as_ref().expect("registered above");
                    // Cleared before the next write: room made after it
                    // sets the readiness again.
                    ready!(room.poll_write_ready(cx))?.clear_ready();
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A socket keeps nothing back.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pair() -> (UnixStream, UnixStream) {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        (ours, theirs)
    }

    /// Lines go both ways; the end is read as the end.
    #[tokio::test]
    async fn the_halves_carry_lines_and_the_end() {
        let (ours, mut theirs) = pair();
        let (mut reader, mut writer) = split(ours).expect("registered");
        writer.write_all(b"hello\n").await.expect("written");
        let mut line = [0; 6];
        theirs.read_exact(&mut line).expect("read");
        assert_eq!(&line, b"hello\n");
        theirs.write_all(b"world\n").expect("written");
        let mut line = [0; 6];
        reader.read_exact(&mut line).await.expect("read");
        assert_eq!(&line, b"world\n");
        writer.shutdown().await.expect("shut down");
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).expect("the end");
        drop(theirs);
        assert_eq!(reader.read(&mut line).await.expect("the end"), 0);
    }

    /// A write that finds the socket full waits for room, registered for
    /// it only meanwhile, and goes on once the peer reads.
    #[tokio::test]
    async fn a_full_socket_is_waited_for() {
        let (ours, mut theirs) = pair();
        let (_reader, mut writer) = split(ours).expect("registered");
        let big = vec![7u8; 4 << 20];
        let reading = std::thread::spawn(move || {
            let mut all = Vec::new();
            theirs.read_to_end(&mut all).expect("read");
            all.len()
        });
        writer.write_all(&big).await.expect("written");
        assert!(writer.room.is_none(), "the last write went through");
        writer.shutdown().await.expect("shut down");
        drop(writer);
        assert_eq!(reading.join().expect("the reader"), big.len());
    }

    /// The halves give back their socket, whole.
    #[tokio::test]
    async fn the_halves_reunite() {
        let (ours, _theirs) = pair();
        let (reader, writer) = split(ours).expect("registered");
        let socket = reunite(reader, writer).expect("reunited");
        assert!(socket.peer_addr().is_ok());
    }
}
