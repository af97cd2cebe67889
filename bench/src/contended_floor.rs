//! The floor of the contended benchmark (issue 30, item 1): the same
//! processes, threads, keys and work as `contended.rs`, deduplicated by the
//! least any design has to do. Every caller thread has a blocking Unix
//! socket of its own to one server process, which runs one thread and one
//! epoll loop (tokio's current-thread runtime) and keeps, per key, the
//! flight in progress and the callers waiting for it:
//!
//! - a call writes `run KEY` and blocks in `read`;
//! - the first of a key is answered `lead`, runs the work and writes
//!   `land KEY VALUE`, which ends its call (no acknowledgement);
//! - every other caller of the key, until that land, is answered
//!   `value VALUE` when it comes.
//!
//! So a call costs one line each way and one wake-up of its own thread, and
//! the server's wake-ups are shared between the lines of each of its
//! wake-ups: no protocol, no JSON, no fencing, no election, no failover and
//! no thread between a caller and its socket. What single-flight does beyond
//! that is what its CPU per call over this floor's measures.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncBufReadExt;
use tokio::net::UnixListener;
use tokio::net::unix::OwnedWriteHalf;

use crate::process::{self, say};

/// The server's socket, in the run's directory.
pub const SOCKET: &str = "floor.sock";

/// One caller thread's connection to the floor's server.
pub struct Caller {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    line: String,
}

impl Caller {
    pub fn connect(path: &std::path::Path) -> std::io::Result<Caller> {
        let writer = UnixStream::connect(path)?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Caller {
            reader,
            writer,
            line: String::with_capacity(128),
        })
    }

    /// One call of `key`: `work` runs here when this call leads. Returns
    /// the value and whether this call led.
    pub fn call(
        &mut self,
        key: &str,
        work: impl FnOnce() -> String,
    ) -> std::io::Result<(String, bool)> {
        // One `write` per line: `writeln!` on a socket writes each piece
        // of its format with a system call of its own.
        self.writer.write_all(format!("run {key}\n").as_bytes())?;
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        match self.line.trim_end() {
            "lead" => {
                let value = work();
                self.writer
                    .write_all(format!("land {key} {value}\n").as_bytes())?;
                Ok((value, true))
            }
            answer => match answer.strip_prefix("value ") {
                Some(value) => Ok((value.to_owned(), false)),
                None => Err(std::io::Error::other(format!(
                    "the floor's server answered {answer:?}"
                ))),
            },
        }
    }
}

/// Each key's flight in progress: the write halves of the callers that
/// wait for its land.
type Flights = HashMap<String, Vec<Arc<OwnedWriteHalf>>>;

/// `worker contend-floor PATH`: the floor's server, listening on `PATH`,
/// until killed.
pub fn serve(path: &str) {
    let runtime = process::runtime();
    runtime.block_on(async {
        let listener = UnixListener::bind(path).expect("bind the floor's socket");
        let flights = Arc::new(Mutex::new(Flights::new()));
        say("READY");
        loop {
            let (stream, _) = listener.accept().await.expect("accept a caller");
            let (read, write) = stream.into_split();
            tokio::spawn(connection(read, Arc::new(write), flights.clone()));
        }
    });
}

/// Serves one caller thread until it closes its socket.
async fn connection(
    read: tokio::net::unix::OwnedReadHalf,
    write: Arc<OwnedWriteHalf>,
    flights: Arc<Mutex<Flights>>,
) {
    let mut lines = tokio::io::BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // The runtime has one thread: the lock is never contended, and
        // never held across an await.
        let mut flights = flights.lock().expect("no panic under the lock");
        if let Some(key) = line.strip_prefix("run ") {
            match flights.get_mut(key) {
                Some(waiting) => waiting.push(write.clone()),
                None => {
                    flights.insert(key.to_owned(), Vec::new());
                    send(&write, b"lead\n");
                }
            }
        } else if let Some((key, value)) =
            line.strip_prefix("land ").and_then(|l| l.split_once(' '))
        {
            let answer = format!("value {value}\n");
            for waiter in flights.remove(key).unwrap_or_default() {
                send(&waiter, answer.as_bytes());
            }
        } else {
            panic!("the floor's server got {line:?}");
        }
    }
}

/// Writes a whole line without waiting: a caller has one call at a time,
/// so its socket holds at most one answer, far below its buffer's size.
fn send(write: &OwnedWriteHalf, line: &[u8]) {
    match write.try_write(line) {
        Ok(written) if written == line.len() => {}
        // A caller that left (the run is over) has nothing to be told.
        Err(error) if error.kind() != std::io::ErrorKind::WouldBlock => {}
        other => panic!("a floor answer did not fit its socket at once: {other:?}"),
    }
}
