//! Memory per connected client at the coordinator (issue 30's last point):
//! the coordinator's resident set with N idle clients connected, less its
//! resident set before they connected, divided by N. Each client finishes
//! the hello (SPEC.md §4.2) and then says nothing, as a process does
//! between calls. Locally the coordinator is a `serve` process and the
//! clients Unix-socket connections of this one; in a cluster
//! (`memory_on_hosts`), the coordinator is a process on host 0 and the
//! clients TCP + mutual-TLS connections of one process on host 1.
//!
//! The resident set counts what the coordinator's process touched: its
//! heap, the tasks' stacks and buffers; the kernel's socket buffers are
//! not in it (they are the kernel's, and empty while a client is idle).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::process::{Scratch, Worker, resident_bytes};

/// The hello a client sends (SPEC.md §4.2).
pub const HELLO: &[u8] = b"{\"protocol\":\"single-flight\",\"version\":1}\n";

/// Descriptors a process needs besides one per client: its standard
/// streams, the runtime's, the library's (socket, lock file, etcd), with
/// room to spare.
const SPARE_DESCRIPTORS: u64 = 64;

/// How long a connection waits for the coordinator's hello: the
/// coordinator answers at once; a loaded machine takes longer, and far
/// less than this.
const HELLO_PATIENCE: Duration = Duration::from_secs(10);

/// How long the coordinator may take to answer `status` after it started.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// Raises this process's soft limit of open descriptors to what `clients`
/// connections need (and so the limit of the processes it starts), within
/// the hard limit; says so when the hard limit is too low.
pub fn allow_descriptors(clients: usize) -> Result<(), String> {
    let needed = clients as u64 + SPARE_DESCRIPTORS;
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= needed) {
        return Ok(());
    }
    if limit.maximum.is_some_and(|maximum| maximum < needed) {
        return Err(format!(
            "{clients} clients need {needed} open descriptors and the hard limit is {:?}: raise it (ulimit -Hn) or measure fewer",
            limit.maximum
        ));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(needed),
            maximum: limit.maximum,
        },
    )
    .map_err(|error| format!("cannot raise the limit of open descriptors: {error}"))
}

/// Bytes of the coordinator's resident set per idle connected client, with
/// `clients` Unix-socket clients of a `serve` process.
pub fn measure(clients: usize) -> Result<f64, String> {
    allow_descriptors(clients)?;
    let scratch = Scratch::new("memory");
    let dir = scratch.join("flights");
    let dir_text = dir.to_str().expect("a UTF-8 temp dir");
    let serve = Worker::spawn(&["serve", dir_text, "500"]).ready();
    let socket = dir.join("flight.sock");
    per_client(serve.pid(), clients, || {
        let mut streams = Vec::with_capacity(clients);
        for _ in 0..clients {
            streams.push(connect(&socket)?);
        }
        Ok(streams)
    })
}

/// The coordinator's resident set before `connect` and after it returned
/// its clients (all connected and greeted), per client.
pub fn per_client<T>(
    coordinator: u32,
    clients: usize,
    connect: impl FnOnce() -> Result<T, String>,
) -> Result<f64, String> {
    let unreadable = || format!("cannot read the resident set of process {coordinator}");
    let before = resident_bytes(coordinator).ok_or_else(unreadable)?;
    let connected = connect()?;
    let after = resident_bytes(coordinator).ok_or_else(unreadable)?;
    drop(connected);
    Ok((after as f64 - before as f64) / clients as f64)
}

/// One client: connected, the hello sent and the coordinator's read.
fn connect(socket: &Path) -> Result<UnixStream, String> {
    let started = Instant::now();
    let stream = loop {
        match UnixStream::connect(socket) {
            Ok(stream) => break stream,
            Err(error) if started.elapsed() > START_PATIENCE => {
                return Err(format!("no coordinator at {}: {error}", socket.display()));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let failed = |error: std::io::Error| format!("a client's hello: {error}");
    stream
        .set_read_timeout(Some(HELLO_PATIENCE))
        .map_err(failed)?;
    (&stream).write_all(HELLO).map_err(failed)?;
    read_hello(&stream).map_err(failed)?;
    Ok(stream)
}

/// Reads the coordinator's hello, byte by byte so that nothing after it is
/// taken from the socket (and no buffer of this side outlives the read).
pub fn read_hello(stream: impl std::io::Read) -> std::io::Result<()> {
    let mut line = Vec::new();
    BufReader::with_capacity(1, stream).read_until(b'\n', &mut line)?;
    if line.ends_with(b"\n") {
        Ok(())
    } else {
        Err(std::io::ErrorKind::UnexpectedEof.into())
    }
}
