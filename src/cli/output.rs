//! What a `run` flight lands (SPEC.md §13.2): how COMMAND ended and what it
//! wrote, as the leader read it, in a form that crosses processes byte for
//! byte; and how a joiner writes it out again.
//!
//! The output is a sequence of **records**, one per read from COMMAND's
//! pipes: a stream byte (1 stdout, 2 stderr), the length as 4 bytes big
//! endian, then that many bytes. Records keep the order in which the leader
//! read the two streams, so a joiner's terminal shows what the leader's did.

use std::io::{self, Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use single_flight::Codec;

use super::exit;

/// The bytes before each record's data: its stream and its length.
pub const RECORD_HEADER_BYTES: usize = 5;

/// The version of the value's format; a joiner refuses others (a leader of
/// another version of this command).
const FORMAT: u32 = 1;

/// Which of COMMAND's streams some output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn tag(self) -> u8 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }

    fn of_tag(tag: u8) -> Result<Stream, String> {
        match tag {
            1 => Ok(Stream::Stdout),
            2 => Ok(Stream::Stderr),
            other => Err(format!(
                "the output holds a record of stream {other}, not 1 or 2"
            )),
        }
    }
}

/// The header of a record of `length` bytes of `stream`.
pub fn record_header(stream: Stream, length: usize) -> [u8; RECORD_HEADER_BYTES] {
    let length = u32::try_from(length).expect("records are cut from reads far below 4 GiB");
    let [a, b, c, d] = length.to_be_bytes();
    [stream.tag(), a, b, c, d]
}

/// How COMMAND ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exit {
    /// It exited with this status.
    Code(u8),
    /// This signal killed it.
    Signal(i32),
}

impl Exit {
    /// The exit code that reports it, as shells do.
    pub fn status(self) -> u8 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => exit::of_signal(signal),
        }
    }
}

/// Where COMMAND's output is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The records themselves.
    Inline(Vec<u8>),
    /// This many bytes of records in the flight's spill file (§13.2).
    Spilled { bytes: u64 },
    /// The leader could not keep a copy (writing the spill file failed):
    /// its joiners are told why instead.
    Unshared(String),
}

/// A flight's value: how COMMAND ended and what it wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    pub exit: Exit,
    pub output: Output,
}

/// The value's text: `{"format":1,"exit":{"code":N}|{"signal":N}}` with
/// `"output":"<base64 of the records>"` or `"spilled":<bytes>`.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    format: u32,
    exit: Exit,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spilled: Option<u64>,
}

/// The codec of `run` flights (SPEC.md §13.2). Every process that runs a
/// key must use it; a joiner of a key led by another program gets an error.
#[derive(Clone, Copy, Debug, Default)]
pub struct RanCodec;

impl Codec<Ran> for RanCodec {
    fn encode(&self, ran: &Ran) -> Result<String, String> {
        let (output, spilled) = match &ran.output {
            Output::Inline(records) => (Some(BASE64.encode(records)), None),
            Output::Spilled { bytes } => (None, Some(*bytes)),
            Output::Unshared(reason) => return Err(reason.clone()),
        };
        let wire = Wire {
            format: FORMAT,
            exit: ran.exit,
            output,
            spilled,
        };
        serde_json::to_string(&wire).map_err(|error| error.to_string())
    }

    fn decode(&self, text: &str) -> Result<Ran, String> {
        let wire: Wire = serde_json::from_str(text).map_err(|error| {
            format!("the value is not the output of a `single-flight run`: {error}")
        })?;
        if wire.format != FORMAT {
            return Err(format!(
                "the leader runs a single-flight whose output format is {}, this one reads {FORMAT}; use the same version everywhere",
                wire.format
            ));
        }
        let output = match (wire.output, wire.spilled) {
            (Some(text), None) => Output::Inline(decode_output(&text)?),
            (None, Some(bytes)) => Output::Spilled { bytes },
            _ => return Err("the value must have exactly one of `output` and `spilled`".into()),
        };
        Ok(Ran {
            exit: wire.exit,
            output,
        })
    }
}

/// The records of a value's `output`: standard base64 with padding (RFC
/// 4648), nothing else accepted (SPEC.md §13.2). The text comes from another
/// process: anything malformed is an error that says what is wrong, never a
/// panic.
fn decode_output(text: &str) -> Result<Vec<u8>, String> {
    BASE64.decode(text).map_err(|error| {
        let what = match error {
            base64::DecodeError::InvalidByte(offset, byte) => {
                format!("the byte {byte:#04x} at offset {offset} is not in its alphabet")
            }
            base64::DecodeError::InvalidLength(length) => {
                format!("its {length} symbols do not make whole groups of four")
            }
            base64::DecodeError::InvalidLastSymbol(offset, byte) => format!(
                "its last symbol {:?} at offset {offset} leaves bits that are not zero",
                char::from(byte)
            ),
            base64::DecodeError::InvalidPadding => {
                "its padding `=` is missing, or not where standard base64 puts it".into()
            }
        };
        format!(
            "the value's output is not standard base64 with padding ({what}); the leader is not this version of single-flight"
        )
    })
}

/// One of this process's own streams, written until it fails: a reader that
/// went away (`EPIPE`) stops the writing of that stream, not of the other.
pub struct Sink<W: Write> {
    writer: Option<W>,
}

impl<W: Write> Sink<W> {
    pub fn new(writer: W) -> Sink<W> {
        Sink {
            writer: Some(writer),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let failed = match &mut self.writer {
            Some(writer) => writer
                .write_all(bytes)
                .and_then(|()| writer.flush())
                .is_err(),
            None => false,
        };
        if failed {
            self.writer = None;
        }
    }
}

/// The largest piece of a record that a joiner copies at once.
const COPY_CHUNK_BYTES: usize = 64 * 1024;

/// Writes the records read from `records` to `stdout` and `stderr`, in
/// order. Fails when the records are malformed (cut short, or of an unknown
/// stream); output up to that point has been written.
pub fn replay<R: Read, O: Write, E: Write>(
    mut records: R,
    stdout: &mut Sink<O>,
    stderr: &mut Sink<E>,
) -> Result<(), String> {
    let mut chunk = vec![0; COPY_CHUNK_BYTES];
    loop {
        let mut header = [0; RECORD_HEADER_BYTES];
        match read_full(&mut records, &mut header) {
            Ok(0) => return Ok(()),
            Ok(RECORD_HEADER_BYTES) => {}
            Ok(_) => return Err("the output ends inside a record's header".into()),
            Err(error) => return Err(format!("cannot read the output: {error}")),
        }
        let stream = Stream::of_tag(header[0])?;
        let mut left = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        while left > 0 {
            let want = left.min(COPY_CHUNK_BYTES);
            let got = read_full(&mut records, &mut chunk[..want])
                .map_err(|error| format!("cannot read the output: {error}"))?;
            if got < want {
                return Err("the output ends inside a record".into());
            }
            match stream {
                Stream::Stdout => stdout.write(&chunk[..got]),
                Stream::Stderr => stderr.write(&chunk[..got]),
            }
            left -= got;
        }
    }
}

/// Reads until `buffer` is full or the input ends; returns how much it read.
fn read_full<R: Read>(reader: &mut R, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(parts: &[(Stream, &[u8])]) -> Vec<u8> {
        let mut records = Vec::new();
        for (stream, data) in parts {
            records.extend_from_slice(&record_header(*stream, data.len()));
            records.extend_from_slice(data);
        }
        records
    }

    #[test]
    fn values_cross_byte_for_byte() {
        let output = records(&[
            (Stream::Stdout, b"a\0b\xff\xfe"),
            (Stream::Stderr, b"\x80warn\n"),
        ]);
        for exit in [Exit::Code(0), Exit::Code(255), Exit::Signal(9)] {
            for output in [
                Output::Inline(output.clone()),
                Output::Spilled { bytes: 1 << 40 },
            ] {
                let ran = Ran { exit, output };
                let text = RanCodec.encode(&ran).unwrap();
                assert_eq!(RanCodec.decode(&text).unwrap(), ran, "{text}");
            }
        }
    }

    /// §13.2: the value's text for known records, byte for byte: standard
    /// base64 with padding, each count of padding, every byte value. The
    /// texts were made by an encoder independent of this crate's (Python's
    /// `base64.b64encode`).
    #[test]
    fn values_are_pinned_byte_for_byte() {
        let every_byte: Vec<u8> = (0..=255).collect();
        let cases: [(Vec<u8>, &str); 6] = [
            (records(&[]), ""),
            (records(&[(Stream::Stdout, b"hello\n")]), "AQAAAAZoZWxsbwo="),
            (
                records(&[
                    (Stream::Stdout, b"a\0b\xff\xfe"),
                    (Stream::Stderr, b"\x80warn\n"),
                ]),
                "AQAAAAVhAGL//gIAAAAGgHdhcm4K",
            ),
            (records(&[(Stream::Stderr, b"ab")]), "AgAAAAJhYg=="),
            (records(&[(Stream::Stdout, b"abcd")]), "AQAAAARhYmNk"),
            (
                records(&[(Stream::Stdout, &every_byte)]),
                "AQAAAQAAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTlJWWl5iZmpucnZ6foKGio6SlpqeoqaqrrK2ur7CxsrO0tba3uLm6u7y9vr/AwcLDxMXGx8jJysvMzc7P0NHS09TV1tfY2drb3N3e3+Dh4uPk5ebn6Onq6+zt7u/w8fLz9PX29/j5+vv8/f7/",
            ),
        ];
        for (records, output) in cases {
            let ran = Ran {
                exit: Exit::Code(0),
                output: Output::Inline(records),
            };
            let text = format!(r#"{{"format":1,"exit":{{"code":0}},"output":"{output}"}}"#);
            assert_eq!(RanCodec.encode(&ran).unwrap(), text);
            assert_eq!(RanCodec.decode(&text).unwrap(), ran, "{text}");
        }
    }

    /// §13.2: an output that is not standard base64 with padding is refused,
    /// with a message that says what is wrong with it.
    #[test]
    fn malformed_base64_is_refused_saying_what_is_wrong() {
        for (output, says) in [
            (
                "Zm\u{e9}",
                "the byte 0xc3 at offset 2 is not in its alphabet",
            ),
            ("Zm 9", "the byte 0x20 at offset 2 is not in its alphabet"),
            ("Zm9v-_", "the byte 0x2d at offset 4 is not in its alphabet"),
            (
                "Zg==Zg==",
                "the byte 0x3d at offset 2 is not in its alphabet",
            ),
            ("Zm9vY", "its 5 symbols do not make whole groups of four"),
            (
                "Zg=",
                "its padding `=` is missing, or not where standard base64 puts it",
            ),
            (
                "Zg",
                "its padding `=` is missing, or not where standard base64 puts it",
            ),
            (
                "Zh==",
                "its last symbol 'h' at offset 1 leaves bits that are not zero",
            ),
        ] {
            let text = format!(r#"{{"format":1,"exit":{{"code":0}},"output":"{output}"}}"#);
            let error = RanCodec.decode(&text).unwrap_err();
            assert!(error.contains(says), "{output:?}: {error}");
            assert!(
                error.starts_with("the value's output is not standard base64 with padding ("),
                "{output:?}: {error}"
            );
        }
    }

    #[test]
    fn the_wire_format_is_the_documented_one() {
        let ran = Ran {
            exit: Exit::Code(3),
            output: Output::Inline(records(&[(Stream::Stdout, b"hi\n")])),
        };
        assert_eq!(
            RanCodec.encode(&ran).unwrap(),
            r#"{"format":1,"exit":{"code":3},"output":"AQAAAANoaQo="}"#
        );
        let spilled = Ran {
            exit: Exit::Signal(15),
            output: Output::Spilled { bytes: 42 },
        };
        assert_eq!(
            RanCodec.encode(&spilled).unwrap(),
            r#"{"format":1,"exit":{"signal":15},"spilled":42}"#
        );
    }

    #[test]
    fn unshared_output_is_an_encoding_error_for_the_joiners() {
        let ran = Ran {
            exit: Exit::Code(0),
            output: Output::Unshared("disk full".into()),
        };
        assert_eq!(RanCodec.encode(&ran), Err("disk full".into()));
    }

    #[test]
    fn foreign_values_are_refused() {
        for text in [
            "42",
            r#"{"format":2,"exit":{"code":0},"output":""}"#,
            r#"{"format":1,"exit":{"code":0}}"#,
            r#"{"format":1,"exit":{"code":0},"output":"","spilled":1}"#,
            r#"{"format":1,"exit":{"code":300},"output":""}"#,
            r#"{"format":1,"exit":{"code":0},"output":"not base64!"}"#,
        ] {
            assert!(RanCodec.decode(text).is_err(), "{text}");
        }
    }

    #[test]
    fn replay_writes_each_stream_in_order() {
        let big = vec![7u8; COPY_CHUNK_BYTES * 2 + 3];
        let input = records(&[
            (Stream::Stdout, b"one "),
            (Stream::Stderr, b"two "),
            (Stream::Stdout, &big),
            (Stream::Stdout, b""),
        ]);
        let mut stdout = Sink::new(Vec::new());
        let mut stderr = Sink::new(Vec::new());
        replay(&input[..], &mut stdout, &mut stderr).unwrap();
        let mut expected = b"one ".to_vec();
        expected.extend_from_slice(&big);
        assert_eq!(stdout.writer.unwrap(), expected);
        assert_eq!(stderr.writer.unwrap(), b"two ");
    }

    #[test]
    fn malformed_records_are_errors() {
        let whole = records(&[(Stream::Stdout, b"hello")]);
        for cut in 1..whole.len() {
            let mut stdout = Sink::new(Vec::new());
            let mut stderr = Sink::new(Vec::new());
            assert!(replay(&whole[..cut], &mut stdout, &mut stderr).is_err());
        }
        let mut stdout = Sink::new(Vec::new());
        let mut stderr = Sink::new(Vec::new());
        assert!(replay(&[3, 0, 0, 0, 0][..], &mut stdout, &mut stderr).is_err());
    }

    /// A reader that went away stops one stream; the other goes on.
    #[test]
    fn a_closed_stream_does_not_stop_the_other() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let input = records(&[(Stream::Stdout, b"lost"), (Stream::Stderr, b"kept")]);
        let mut stdout = Sink::new(Closed);
        let mut stderr = Sink::new(Vec::new());
        replay(&input[..], &mut stdout, &mut stderr).unwrap();
        assert!(stdout.writer.is_none());
        assert_eq!(stderr.writer.unwrap(), b"kept");
    }
}
