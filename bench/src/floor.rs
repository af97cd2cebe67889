//! Item 2, the physical floor: one JSON line each way over a Unix socket
//! between two processes, with blocking reads and writes and no parsing.
//! Nothing that crosses processes on this machine can answer faster.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Instant;

use crate::process::{self, CpuMeter, Scratch, Worker};
use crate::stats::median;

/// A request and an answer of the sizes the protocol sends for a call.
pub const REQUEST: &[u8] = b"{\"op\":\"run\",\"id\":\"17\",\"key\":\"build:app/00000017\"}\n";
pub const ANSWER: &[u8] = b"{\"op\":\"lead\",\"id\":\"17\",\"token\":\"4294967313\"}\n";

/// Round trips before the timed ones, so that both processes are running
/// and their pages are touched.
const WARM_UP: usize = 500;

/// An echo worker of `kind` connected to a socket in a scratch directory of
/// its own; the scratch and the worker live as long as the caller keeps them.
fn echo_worker(name: &str, kind: &str) -> (Scratch, Worker, UnixStream) {
    let scratch = Scratch::new(name);
    let path = scratch.join("floor.sock");
    let listener = UnixListener::bind(&path).expect("bind the floor's socket");
    let path_text = path.to_str().expect("a UTF-8 temp dir");
    let echo = Worker::spawn(&[kind, path_text]);
    let (stream, _) = listener.accept().expect("the echo worker connects");
    (scratch, echo, stream)
}

/// What a series of timed round trips (or calls) measured.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    /// The median time of one, in nanoseconds.
    pub median: f64,
    /// CPU time per one of both processes (this one and its peer), in
    /// nanoseconds: issue 30's measure of a call's cost, which a loaded or
    /// an idle machine's wake-ups move far less than the time.
    pub cpu: f64,
    /// The times a thread of either process was given a CPU, per one
    /// ([`crate::process::thread_switches`]).
    pub switches: f64,
}

impl Timed {
    /// `MEDIAN_NS CPU_NS SWITCHES`, as a worker prints it.
    pub fn show(&self) -> String {
        format!("{} {} {}", self.median, self.cpu, self.switches)
    }

    /// What [`show`](Self::show) printed.
    pub fn parse(text: &str) -> Timed {
        let numbers: Vec<f64> = text
            .split_whitespace()
            .map(|n| n.parse().expect("nanoseconds"))
            .collect();
        let [median, cpu, switches] = numbers[..] else {
            panic!("a worker's result {text:?}: MEDIAN_NS CPU_NS SWITCHES");
        };
        Timed {
            median,
            cpu,
            switches,
        }
    }
}

/// `pings` timed round trips.
pub fn measure(pings: usize) -> Timed {
    let (_scratch, echo, stream) = echo_worker("floor", "echo");
    let peer = echo.pid();
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    let mut line = Vec::with_capacity(128);
    timed(pings, Some(peer), || {
        writer.write_all(REQUEST).expect("the echo worker reads");
        line.clear();
        reader
            .read_until(b'\n', &mut line)
            .expect("the echo worker answers");
        assert_eq!(line, ANSWER, "the echo worker's answer");
    })
}

/// `pings` runs of `round_trip` after [`WARM_UP`] untimed ones: their
/// median time, and the CPU time per run of this process and of `peer`.
pub fn timed(pings: usize, peer: Option<u32>, mut round_trip: impl FnMut()) -> Timed {
    for _ in 0..WARM_UP {
        round_trip();
    }
    let mut times = Vec::with_capacity(pings);
    let cpu = CpuMeter::start(peer.as_slice());
    for _ in 0..pings {
        let start = Instant::now();
        round_trip();
        times.push(start.elapsed().as_nanos() as f64);
    }
    Timed {
        median: median(&times),
        cpu: cpu.used() as f64 / pings as f64,
        switches: cpu.switches() as f64 / pings as f64,
    }
}

/// The other end: answers each line with one line, until the socket closes.
pub fn echo(path: &str) {
    let stream = UnixStream::connect(path).expect("connect to the floor's socket");
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    let mut line = Vec::with_capacity(128);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if writer.write_all(ANSWER).is_err() {
                    return;
                }
            }
        }
    }
}

/// The same round trip through the layout the library's shell uses: the
/// caller's runtime hands the request to a thread of its own (over a tokio
/// channel), which writes it and reads the answer, and hands that back; the
/// other process answers from a tokio runtime. No JSON is parsed and no
/// state machine runs: the difference to [`measure`] is the price of the
/// thread hops and runtimes alone. Median in nanoseconds.
pub fn measure_through_threads(pings: usize) -> f64 {
    let (_scratch, _echo, stream) = echo_worker("floor-threads", "echo-tokio");
    stream.set_nonblocking(true).expect("a non-blocking socket");
    let (requests, mut to_write) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel::<()>();
    let io_thread = std::thread::spawn(move || {
        let runtime = process::runtime();
        runtime.block_on(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let stream = tokio::net::UnixStream::from_std(stream).expect("a tokio socket");
            let (read, mut write) = stream.into_split();
            let mut read = tokio::io::BufReader::new(read);
            let mut line = Vec::with_capacity(128);
            while to_write.recv().await.is_some() {
                write
                    .write_all(REQUEST)
                    .await
                    .expect("the echo worker reads");
                line.clear();
                read.read_until(b'\n', &mut line)
                    .await
                    .expect("the echo worker answers");
                if answered.send(()).is_err() {
                    return;
                }
            }
        });
    });
    let runtime = process::runtime();
    let result = runtime.block_on(async {
        let mut times = Vec::with_capacity(pings);
        for n in 0..WARM_UP + pings {
            let start = Instant::now();
            requests.send(()).expect("the I/O thread runs");
            answers.recv().await.expect("the I/O thread answers");
            if n >= WARM_UP {
                times.push(start.elapsed().as_nanos() as f64);
            }
        }
        median(&times)
    });
    drop(requests);
    let _ = io_thread.join();
    result
}

/// The other end of [`measure_through_threads`], on a tokio runtime.
pub fn echo_tokio(path: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let runtime = process::runtime();
    runtime.block_on(async {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .expect("connect to the floor's socket");
        let (read, mut write) = stream.into_split();
        let mut read = tokio::io::BufReader::new(read);
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            match read.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if write.write_all(ANSWER).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// The floor of a fan-out: one process writes one line to each of
/// `receivers` processes blocked in `read`; the time from before the first
/// write to the last receiver's return from `read`, in nanoseconds, once per
/// flight. Each receiver keeps its time until asked, so that nothing else
/// runs meanwhile. `reader` is the receivers' kind: [`Reader::Alone`] for
/// the floor.
pub fn fan_out(receivers: usize, flights: usize, reader: Reader) -> Vec<f64> {
    let scratch = Scratch::new("floor-fanout");
    let path = scratch.join("floor.sock");
    let listener = UnixListener::bind(&path).expect("bind the floor's socket");
    let path_text = path.to_str().expect("a UTF-8 temp dir");
    let _readers: Vec<Worker> = (0..receivers)
        .map(|_| Worker::spawn(&[reader.worker(), path_text]))
        .collect();
    let mut streams: Vec<(BufReader<UnixStream>, UnixStream)> = (0..receivers)
        .map(|_| {
            let (stream, _) = listener.accept().expect("a reader connects");
            let reader = BufReader::new(stream.try_clone().expect("a second handle"));
            (reader, stream)
        })
        .collect();
    let mut times = Vec::with_capacity(flights);
    let mut line = String::new();
    for _ in 0..flights {
        // Every reader is blocked in read by now: the last flight's report
        // was its last line.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let start = crate::process::wall_nanos();
        for (_, stream) in &mut streams {
            stream.write_all(ANSWER).expect("a reader reads");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut last = 0u64;
        for (reader, stream) in &mut streams {
            stream.write_all(b"report\n").expect("a reader reads");
            line.clear();
            reader.read_line(&mut line).expect("a reader answers");
            last = last.max(line.trim().parse().expect("a time"));
        }
        times.push(last.saturating_sub(start) as f64);
    }
    times
}

/// How a receiver of [`fan_out`] waits for its line.
#[derive(Clone, Copy, Debug)]
pub enum Reader {
    /// Blocked in `read`, nothing else in the process: the floor.
    Alone,
    /// A tokio runtime reads it (parked in `epoll_wait` until the line
    /// comes), nothing else in the process.
    Runtime,
    /// A tokio runtime reads it, while a second, idle runtime on another
    /// thread of the process has the same socket registered and is parked
    /// in `epoll_wait` too. This prices the caveat of BENCHMARKS.md's
    /// design 4 (a caller reads its own answer while the single-flight
    /// thread's runtime keeps the connection registered): every arrival
    /// wakes that runtime as well, though it reads nothing.
    Watched,
    /// As [`Reader::Watched`], but the second runtime watches the socket
    /// only for its end: through an epoll instance of its own that has the
    /// socket registered for `EPOLLRDHUP` alone (hang-ups and errors are
    /// always reported), and that instance registered with the runtime.
    /// This prices the fix of that caveat: the kernel's wake-up on an
    /// arrival carries `EPOLLIN`, which that registration filters out
    /// before it wakes anybody, so the idle runtime should sleep on.
    WatchedForClose,
}

impl Reader {
    fn worker(self) -> &'static str {
        match self {
            Reader::Alone => "fan-reader",
            Reader::Runtime => "fan-reader-runtime",
            Reader::Watched => "fan-reader-watched",
            Reader::WatchedForClose => "fan-reader-watched-close",
        }
    }
}

/// A [`Reader::Runtime`] receiver, or a [`Reader::Watched`] or
/// [`Reader::WatchedForClose`] one.
pub fn fan_reader_runtime(path: &str, kind: Reader) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let stream = UnixStream::connect(path).expect("connect to the floor's socket");
    // Both handles share one file description, which tokio requires to be
    // non-blocking before either runtime registers it.
    stream.set_nonblocking(true).expect("a non-blocking socket");
    if matches!(kind, Reader::Watched | Reader::WatchedForClose) {
        let watched = stream.try_clone().expect("a second handle");
        let (registered, is_registered) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = process::runtime();
            runtime.block_on(async move {
                if matches!(kind, Reader::Watched) {
                    // Registered (edge-triggered, as tokio registers every
                    // socket) and never read.
                    let _watch = tokio::net::UnixStream::from_std(watched).expect("registered");
                    registered.send(()).expect("the reader waits");
                    std::future::pending::<()>().await;
                } else {
                    let watch = CloseWatch::new(&watched).expect("an epoll instance");
                    // Sound: the watch owns its descriptor (the I/O safety
                    // that the deprecation of the safe constructor is about).
                    #[allow(deprecated)]
                    let watch = tokio::io::unix::AsyncFd::new(watch).expect("registered");
                    registered.send(()).expect("the reader waits");
                    // Woken only when the socket ends (the floor closes it
                    // after the last flight).
                    let _ = watch.readable().await;
                    std::future::pending::<()>().await;
                }
            });
        });
        is_registered.recv().expect("the watching thread registers");
    }
    let runtime = process::runtime();
    runtime.block_on(async move {
        let stream = tokio::net::UnixStream::from_std(stream).expect("registered");
        let (read, mut write) = stream.into_split();
        let mut read = tokio::io::BufReader::new(read);
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            if !matches!(read.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
                return;
            }
            let at = process::wall_nanos();
            line.clear();
            if !matches!(read.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
                return;
            }
            if write.write_all(format!("{at}\n").as_bytes()).await.is_err() {
                return;
            }
        }
    });
}

/// An epoll instance that watches one socket for its end only
/// ([`Reader::WatchedForClose`]), itself pollable: it is readable when the
/// socket has hung up or failed.
struct CloseWatch(std::os::fd::OwnedFd);

impl CloseWatch {
    fn new(socket: &impl std::os::fd::AsFd) -> std::io::Result<CloseWatch> {
        use rustix::event::epoll;
        let instance = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &instance,
            socket,
            epoll::EventData::new_u64(0),
            epoll::EventFlags::RDHUP,
        )?;
        Ok(CloseWatch(instance))
    }

    /// Whether the socket has ended, without waiting.
    #[cfg(test)]
    fn ended(&self) -> std::io::Result<bool> {
        use rustix::event::epoll;
        let mut events = Vec::with_capacity(1);
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        epoll::wait(
            &self.0,
            rustix::buffer::spare_capacity(&mut events),
            Some(&zero),
        )?;
        Ok(!events.is_empty())
    }
}

impl std::os::fd::AsRawFd for CloseWatch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// A receiver of [`fan_out`]: notes when each line arrives, and tells when
/// asked.
pub fn fan_reader(path: &str) {
    let stream = UnixStream::connect(path).expect("connect to the floor's socket");
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    let mut line = Vec::with_capacity(128);
    loop {
        line.clear();
        if !matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            return;
        }
        let at = crate::process::wall_nanos();
        line.clear();
        if !matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            return;
        }
        if writeln!(writer, "{at}").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel behaviour [`Reader::WatchedForClose`] relies on: bytes
    /// that arrive do not make the watch ready; the peer's close does.
    #[test]
    fn a_close_watch_sees_the_end_and_not_the_bytes() {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        let watch = CloseWatch::new(&ours).expect("an epoll instance");
        assert!(!watch.ended().expect("polled"), "nothing happened yet");
        (&theirs).write_all(b"a line\n").expect("written");
        assert!(!watch.ended().expect("polled"), "bytes are not an end");
        drop(theirs);
        assert!(watch.ended().expect("polled"), "the peer's close is");
    }

    #[test]
    fn a_workers_result_reads_back() {
        let timed = Timed {
            median: 9876.5,
            cpu: 10_250.0,
            switches: 2.25,
        };
        let read = Timed::parse(&timed.show());
        assert_eq!(
            (read.median, read.cpu, read.switches),
            (9876.5, 10_250.0, 2.25)
        );
    }
}
