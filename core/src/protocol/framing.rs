//! Newline-delimited framing (SPEC.md §4.1), pure: bytes in, lines out. The
//! tokio shell and the fuzzers use this same code.

use super::error::FrameError;

/// Cuts a byte stream into lines of at most `max` bytes (not counting `\n`).
///
/// Feed it whatever the socket returned with [`LineReader::push`], then take
/// lines with [`LineReader::next_line`] until it returns `None`. A partial
/// line is never held beyond `max` bytes: the push that would exceed it fails,
/// and so does every push after it. Complete lines that one chunk delivered at
/// once are held until taken, so the buffer stays below `max` plus one chunk.
#[derive(Debug)]
pub struct LineReader {
    buffer: Vec<u8>,
    /// Start of the first line not yet taken.
    start: usize,
    /// Bytes from `start` up to here are known to hold no `\n`.
    scanned: usize,
    /// Length of the line that has begun but not ended, kept as bytes arrive
    /// so that a long line costs time in proportion to its length, not to
    /// its length times the number of reads.
    partial: usize,
    max: usize,
    failed: bool,
}

impl LineReader {
    /// A reader of lines of at most `max` bytes, without their `\n`.
    pub fn new(max: usize) -> LineReader {
        LineReader {
            buffer: Vec::new(),
            start: 0,
            scanned: 0,
            partial: 0,
            max,
            failed: false,
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), FrameError> {
        if self.failed {
            return Err(FrameError::LineTooLong { max: self.max });
        }
        let mut partial = self.partial;
        let mut rest = chunk;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            if partial + newline > self.max {
                return Err(self.fail());
            }
            partial = 0;
            rest = &rest[newline + 1..];
        }
        partial += rest.len();
        if partial > self.max {
            return Err(self.fail());
        }
        self.partial = partial;
        self.compact();
        self.buffer.extend_from_slice(chunk);
        Ok(())
    }

    /// The next complete line, without its `\n`.
    pub fn next_line(&mut self) -> Option<Vec<u8>> {
        let unscanned = &self.buffer[self.scanned..];
        match unscanned.iter().position(|&b| b == b'\n') {
            Some(offset) => {
                let end = self.scanned + offset;
                let line = self.buffer[self.start..end].to_vec();
                self.start = end + 1;
                self.scanned = self.start;
                Some(line)
            }
            None => {
                self.scanned = self.buffer.len();
                None
            }
        }
    }

    /// Bytes of a line that has begun but not ended: at the end of the stream
    /// these are a message without its newline.
    pub fn partial_len(&self) -> usize {
        self.partial
    }

    /// Drops everything: nothing after an over-long line can be trusted to
    /// start at a message boundary.
    fn fail(&mut self) -> FrameError {
        self.failed = true;
        self.buffer = Vec::new();
        self.start = 0;
        self.scanned = 0;
        self.partial = 0;
        FrameError::LineTooLong { max: self.max }
    }

    /// Drops the lines already taken once they are most of the buffer, so
    /// that a long-lived connection does not grow its buffer forever. With
    /// nothing taken (`start` 0) only an empty buffer passes, whose drain is
    /// of nothing.
    fn compact(&mut self) {
        if self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(reader: &mut LineReader) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| reader.next_line()).collect()
    }

    /// A long-lived connection's buffer holds what is not yet taken, not
    /// every line it ever carried: after a thousand lines pushed and taken
    /// one by one, it holds at most about two lines.
    #[test]
    fn lines_taken_leave_the_buffer() {
        let mut reader = LineReader::new(16);
        for n in 0..1_000 {
            reader.push(format!("line {n:04}\n").as_bytes()).unwrap();
            assert_eq!(
                lines(&mut reader),
                vec![format!("line {n:04}").into_bytes()]
            );
        }
        assert!(
            reader.buffer.len() <= 2 * b"line 0000\n".len(),
            "{}",
            reader.buffer.len()
        );
        assert_eq!(reader.partial_len(), 0);
    }

    /// A line's start left unread between reads does not keep the lines
    /// taken before it: reads that each end inside the next line leave the
    /// buffer at about two lines, as reads that end at a newline do.
    #[test]
    fn a_partial_line_does_not_keep_the_lines_taken_before_it() {
        let mut reader = LineReader::new(16);
        reader.push(b"line 000").unwrap();
        for _ in 0..1_000 {
            reader.push(b"0\nline 000").unwrap();
            assert_eq!(lines(&mut reader), vec![b"line 0000".to_vec()]);
        }
        assert!(
            reader.buffer.len() <= 2 * b"line 0000\n".len(),
            "{}",
            reader.buffer.len()
        );
        assert_eq!(reader.partial_len(), b"line 000".len());
    }

    /// §4.1: lines split at any point come out whole.
    #[test]
    fn joins_split_lines() {
        let mut reader = LineReader::new(16);
        reader.push(b"{\"a\"").unwrap();
        assert!(lines(&mut reader).is_empty());
        reader.push(b":1}\n{}\n{").unwrap();
        assert_eq!(
            lines(&mut reader),
            vec![b"{\"a\":1}".to_vec(), b"{}".to_vec()]
        );
        assert_eq!(reader.partial_len(), 1);
        reader.push(b"}\n").unwrap();
        assert_eq!(lines(&mut reader), vec![b"{}".to_vec()]);
        assert_eq!(reader.partial_len(), 0);
    }

    /// §4.1: a line of exactly the limit passes; one byte more fails, and the
    /// reader stays failed.
    #[test]
    fn refuses_lines_over_the_limit() {
        let mut reader = LineReader::new(4);
        reader.push(b"abcd\n").unwrap();
        assert_eq!(lines(&mut reader), vec![b"abcd".to_vec()]);
        reader.push(b"abc").unwrap();
        assert_eq!(reader.push(b"de"), Err(FrameError::LineTooLong { max: 4 }));
        assert_eq!(reader.push(b"\n"), Err(FrameError::LineTooLong { max: 4 }));

        let mut reader = LineReader::new(4);
        assert!(reader.push(b"ab\nabcdef\nab\n").is_err());
        assert_eq!(reader.next_line(), None);
        assert_eq!(reader.partial_len(), 0);

        // Lines taken before the failure leave nothing to trip over after it.
        let mut reader = LineReader::new(4);
        reader.push(b"ab\n").unwrap();
        assert_eq!(reader.next_line(), Some(b"ab".to_vec()));
        assert!(reader.push(b"abcdef").is_err());
        assert_eq!(reader.next_line(), None);
        assert_eq!(reader.partial_len(), 0);
    }
}
