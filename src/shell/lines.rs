//! Lines over an async byte stream, through the pure framer of the protocol
//! (SPEC.md §4.1).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

use crate::protocol::{FrameError, LineReader, limits::MAX_FRAME_BYTES};

/// Bytes asked of the socket per read. Every connection holds one such
/// buffer on each side, so it bounds the coordinator's memory per client
/// (BENCHMARKS.md, "Hot spots", item 2); 8 KiB holds any ordinary
/// message in one read, and a large value merely takes more reads.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// The framing of one connection's bytes into lines of at most
/// [`MAX_FRAME_BYTES`], whoever reads its socket: [`Lines`] on a task, or
/// the hub's connection under its lock (SPEC.md §10.1).
pub(super) struct Framer {
    reader: LineReader,
    chunk: Box<[u8]>,
    /// Bytes read so far: progress that a line not yet whole does not show
    /// (the drain of a gone coordinator, §14.3).
    received: u64,
}

/// Why no further line can be read.
#[derive(Debug)]
pub(super) enum LineError {
    /// The stream ended (the bytes of an unfinished line are discarded,
    /// SPEC.md §4.1).
    Closed,
    Io(std::io::Error),
    Frame(FrameError),
}

impl Framer {
    pub(super) fn new() -> Framer {
        Framer {
            reader: LineReader::new(MAX_FRAME_BYTES),
            chunk: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            received: 0,
        }
    }

    /// Bytes read so far.
    pub(super) fn received(&self) -> u64 {
        self.received
    }

    /// The next whole line, without its newline, reading with `read` into
    /// the framer's buffer until one is whole; `Pending` when `read` is.
    /// Nothing is lost across a `Pending`: a line is only taken out of the
    /// buffer when it is returned.
    pub(super) fn poll_line(
        &mut self,
        mut read: impl FnMut(&mut [u8]) -> Poll<io::Result<usize>>,
    ) -> Poll<Result<Vec<u8>, LineError>> {
        loop {
            if let Some(line) = self.reader.next_line() {
                return Poll::Ready(Ok(line));
            }
            let read = match ready!(read(&mut self.chunk)) {
                Ok(0) => return Poll::Ready(Err(LineError::Closed)),
                Ok(read) => read,
                Err(error) => return Poll::Ready(Err(LineError::Io(error))),
            };
            self.received += read as u64;
            if let Err(error) = self.reader.push(&self.chunk[..read]) {
                return Poll::Ready(Err(LineError::Frame(error)));
            }
        }
    }
}

/// Reads lines of at most [`MAX_FRAME_BYTES`] from an async byte stream.
pub(super) struct Lines<R> {
    stream: R,
    framer: Framer,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    pub(super) fn new(stream: R) -> Lines<R> {
        Lines {
            stream,
            framer: Framer::new(),
        }
    }

    /// The stream, and the framer with what it holds of the next line.
    pub(super) fn into_parts(self) -> (R, Framer) {
        (self.stream, self.framer)
    }

    /// The next line, without its newline. Cancel-safe: a line is only
    /// taken out of the buffer when it is returned.
    pub(super) async fn next(&mut self) -> Result<Vec<u8>, LineError> {
        let Lines { stream, framer } = self;
        poll_fn(|cx| {
            framer.poll_line(|chunk| {
                let mut buf = ReadBuf::new(chunk);
                ready!(Pin::new(&mut *stream).poll_read(cx, &mut buf))?;
                Poll::Ready(Ok(buf.filled().len()))
            })
        })
        .await
    }
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Closed => f.write_str("the peer closed the connection"),
            LineError::Io(error) => write!(f, "{error}"),
            LineError::Frame(error) => write!(f, "{error}"),
        }
    }
}
