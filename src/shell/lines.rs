//! Lines over an async byte stream, through the pure framer of the protocol
//! (SPEC.md §4.1).

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::protocol::{FrameError, LineReader, limits::MAX_FRAME_BYTES};

/// Bytes asked of the socket per read. Every connection holds one such
/// buffer on each side, so it bounds the coordinator's memory per client
/// (BENCHMARKS.md, "Hot spots", item 2); 8 KiB holds any ordinary
/// message in one read, and a large value merely takes more reads.
pub(super) const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Reads lines of at most [`MAX_FRAME_BYTES`].
pub(super) struct Lines<R> {
    stream: R,
    reader: LineReader,
    chunk: Box<[u8]>,
    /// Bytes read so far: progress that a line not yet whole does not show.
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

impl<R: AsyncRead + Unpin> Lines<R> {
    pub(super) fn new(stream: R) -> Lines<R> {
        Lines {
            stream,
            reader: LineReader::new(MAX_FRAME_BYTES),
            chunk: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            received: 0,
        }
    }

    /// The stream, the framer with what it holds of the next line, and the
    /// bytes read so far.
    pub(super) fn into_parts(self) -> (R, LineReader, u64) {
        (self.stream, self.reader, self.received)
    }

    /// The next line, without its newline. Cancel-safe: a line is only
    /// taken out of the buffer when it is returned.
    pub(super) async fn next(&mut self) -> Result<Vec<u8>, LineError> {
        loop {
            if let Some(line) = self.reader.next_line() {
                return Ok(line);
            }
            let read = self
                .stream
                .read(&mut self.chunk)
                .await
                .map_err(LineError::Io)?;
            if read == 0 {
                return Err(LineError::Closed);
            }
            self.received += read as u64;
            self.reader
                .push(&self.chunk[..read])
                .map_err(LineError::Frame)?;
        }
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
