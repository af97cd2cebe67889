//! One TCP connection's bytes, plain or under TLS, with read errors put in
//! words that a log can show.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;
use tokio_rustls::rustls;

use super::tls::{refused_certificate, refuses_certificate, rustls_error};
use crate::transport::wire::{Socket, SocketWire, Wire};

/// The stream of one connection, which the transport splits into its
/// [`TcpReader`](super::TcpReader) and [`TcpWriter`](super::TcpWriter).
///
/// One type for plain TCP and TLS, on both sides, keeps one [`Transport`]
/// implementation instead of four, at the cost of a branch per call.
/// [`tokio::io::split`] shares it between the reading and the writing task:
/// a TLS session has one state for both directions, so it cannot be split
/// into owned halves the way a [`TcpStream`] can.
///
/// [`Transport`]: crate::transport::Transport
#[derive(Debug)]
pub struct PeerStream {
    inner: Inner,
    /// Who is at the other end, for messages ("the coordinator at
    /// 10.0.0.1:7000").
    peer: String,
    /// A TLS client's own certificate file (`--tls-cert`), which a refusal
    /// names: only a client learns after the handshake that its
    /// certificate was refused. `None` on the coordinator's end.
    certificate: Option<PathBuf>,
}

#[derive(Debug)]
enum Inner {
    Plain(TcpStream),
    /// Boxed: a TLS session is a few kilobytes, a plain stream a few words.
    Tls(Box<TlsStream<TcpStream>>),
}

impl PeerStream {
    pub(super) fn plain(stream: TcpStream, peer: String) -> PeerStream {
        PeerStream {
            inner: Inner::Plain(stream),
            peer,
            certificate: None,
        }
    }

    /// A TLS connection; `certificate` is this process's certificate file
    /// on a client's end, `None` on the coordinator's.
    pub(super) fn tls(
        stream: TlsStream<TcpStream>,
        peer: String,
        certificate: Option<PathBuf>,
    ) -> PeerStream {
        PeerStream {
            inner: Inner::Tls(Box::new(stream)),
            peer,
            certificate,
        }
    }

    /// The TCP connection underneath.
    #[cfg(test)]
    pub(super) fn tcp(&self) -> &TcpStream {
        match &self.inner {
            Inner::Plain(stream) => stream,
            Inner::Tls(stream) => stream.get_ref().0,
        }
    }

    /// What a failed TLS read means, in words; `Ok` for an end of stream.
    fn explain(&self, error: io::Error) -> io::Result<()> {
        // A peer that closes without TLS's close_notify (a process that
        // exits or is killed) ends the stream as a plain TCP peer would.
        // Cutting a stream short can only cut an unfinished line, which is
        // discarded (SPEC.md §4.1), so no message is lost unnoticed.
        if error.kind() == io::ErrorKind::UnexpectedEof && rustls_error(&error).is_none() {
            return Ok(());
        }
        let message = match rustls_error(&error) {
            Some(rustls::Error::AlertReceived(alert)) if refuses_certificate(*alert) => {
                if let Some(certificate) = &self.certificate {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        refused_certificate(&self.peer, *alert, certificate),
                    ));
                }
                format!("TLS with {}: alert {alert:?}", self.peer)
            }
            Some(tls) => format!("TLS with {}: {tls}", self.peer),
            None => return Err(error),
        };
        Err(io::Error::new(error.kind(), message))
    }
}

impl PeerStream {
    /// The connection as the client's process drives it (SPEC.md §10.1):
    /// its socket, and the TLS session read and written over it by whoever
    /// holds the process's hub, so that it lends as a Unix socket does.
    pub(super) fn into_wire(self) -> io::Result<Box<dyn Wire>> {
        match self.inner {
            Inner::Plain(stream) => Ok(Box::new(SocketWire::new(stream.into_std()?)?)),
            Inner::Tls(stream) => match *stream {
                TlsStream::Client(stream) => {
                    let (tcp, session) = stream.into_inner();
                    let socket = TlsSocket {
                        tcp: tcp.into_std()?,
                        session,
                    };
                    Ok(Box::new(SocketWire::new(socket)?))
                }
                // Only a client's connection becomes a wire: the
                // coordinator's connections are read by tasks (§10.1).
                TlsStream::Server(_) => Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a coordinator's connection is not lent to a call",
                )),
            },
        }
    }
}

/// A client's TLS session over its non-blocking TCP socket.
struct TlsSocket {
    tcp: std::net::TcpStream,
    session: rustls::ClientConnection,
}

impl std::os::fd::AsFd for TlsSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.tcp.as_fd()
    }
}

impl Socket for TlsSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match io::Read::read(&mut self.session.reader(), buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                // A peer that closes without TLS's close_notify ends the
                // stream as a plain TCP peer would (see `explain`).
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                done => return done,
            }
            if self.session.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            self.session
                .process_new_packets()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            if self.session.wants_write() {
                // A key update to answer; what does not fit now goes with
                // the next flush.
                match self.flush() {
                    Err(error) if error.kind() != io::ErrorKind::WouldBlock => return Err(error),
                    _ => {}
                }
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(&mut self.session.writer(), buf)
    }

    /// Records that a read decrypted beyond what it returned (it reads
    /// all that the socket holds, up to rustls's buffer), or the end it
    /// saw: anything but "nothing there".
    fn buffered(&mut self) -> bool {
        !matches!(
            io::BufRead::fill_buf(&mut self.session.reader()),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock
        )
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            if self.session.write_tls(&mut self.tcp)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Plain(stream) => Pin::new(stream).poll_read(context, buffer),
            Inner::Tls(stream) => match Pin::new(stream.as_mut()).poll_read(context, buffer) {
                Poll::Ready(Err(error)) => Poll::Ready(this.explain(error)),
                other => other,
            },
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_write(context, bytes),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, bytes),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_flush(context),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    /// Under TLS, sends close_notify before the TCP FIN.
    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }
}
