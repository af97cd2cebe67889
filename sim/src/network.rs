//! The in-memory transport (SPEC.md §12.7): hosts reach each other's
//! listeners at `(host, port)` addresses over links that can be delayed,
//! paced to a bandwidth, held, or cut — one way too — all on the runtime's
//! simulated clock. What a writer writes stays buffered until it flushes,
//! as rustls keeps records back, so a writer that never flushes loses its
//! lines (the shell's seeded bug 1).
//!
//! It mirrors what the shell meets over TCP (src/transport/tcp/): a
//! connect that nothing answers gives up after [`CONNECT_TIMEOUT`]; a
//! connection whose link is cut breaks after [`USER_TIMEOUT`] (keepalive
//! and `TCP_USER_TIMEOUT`); a held link only stalls, as the kernel of a
//! stopped process keeps its connections open.
//!
//! The host tier's processes of one host also meet over a host-local
//! transport ([`HostTransport`]), their host directory's Unix socket:
//! faults of the links between hosts do not touch it, a host's crash or
//! pause does. A process can be killed ([`Net::kill`], kill -9): its
//! listeners go, and its connections close both ways at once, what it had
//! already sent arriving first, as the kernel closes a dead process's
//! sockets.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use single_flight::_internal::transport::{
    ConnectError, Connection, Listener, PeerRefused, Transport,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Sleep};

use crate::trace::Trace;

/// A simulated machine. Host 0 is the election's store (etcd's host).
pub type HostId = u32;

/// The election's store lives on this host; processes live on 1 and up.
pub const STORE: HostId = 0;

/// A simulated process, by its number in the run.
pub type ProcessId = u32;

/// As the TCP transport's `CONNECT_TIMEOUT`: a connect that nothing
/// answers gives up after this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// As the TCP transport's `USER_TIMEOUT`: a connection whose link is cut
/// breaks this long after the cut (the keepalive's probes go unanswered).
pub const USER_TIMEOUT: Duration = Duration::from_secs(4);

/// The one-way latency of every link, before any fault adds to it: a LAN.
pub const LATENCY: Duration = Duration::from_micros(200);

/// The latency of a host-local connection (a Unix socket): a context
/// switch.
pub const LOCAL_LATENCY: Duration = Duration::from_micros(20);

/// The most a flush sends at once on a paced link: a flush of megabytes
/// goes out in pieces, each when the link is free, so that a writer
/// stopped midway (an ending term's deadline) has sent only part.
const CHUNK: usize = 16 * 1024;

/// How many connections of one process are kept before the closed ones
/// are forgotten, and again at each doubling: the bookkeeping of a kill
/// stays proportional to the connections open.
const FORGET_CLOSED_AFTER: usize = 64;

/// Where a coordinator listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    pub host: HostId,
    pub port: u32,
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h{}:{}", self.host, self.port)
    }
}

/// One direction between two hosts.
#[derive(Clone, Debug, Default)]
pub struct Link {
    /// Added to [`LATENCY`].
    pub delay: Duration,
    /// `None`: as fast as the writer writes.
    pub bytes_per_second: Option<u64>,
    /// Stalls without breaking connections.
    pub held: bool,
    /// Stalls, breaks connections after [`USER_TIMEOUT`], refuses connects.
    cut_since: Option<Instant>,
}

/// The network of one run, shared by every transport and the election.
#[derive(Clone)]
pub struct Net {
    state: Arc<Mutex<State>>,
    changed: Arc<watch::Sender<u64>>,
    trace: Trace,
}

struct State {
    links: BTreeMap<(HostId, HostId), Link>,
    /// Hosts cut off from every other, and since when.
    isolated: BTreeMap<HostId, Instant>,
    /// Hosts whose every link is held (a stopped process's machine).
    paused: BTreeSet<HostId>,
    /// Hosts that refuse whatever reaches them (the store when etcd's
    /// members are down: a connection refused, at once).
    refusing: BTreeSet<HostId>,
    /// Hosts crashed for good, and since when: their host-local
    /// connections go with them.
    crashed: BTreeMap<HostId, Instant>,
    /// Processes killed (kill -9).
    dead: BTreeSet<ProcessId>,
    /// Who listens where, by address, and at each host's socket of each
    /// shard (one host directory per host and shard, SPEC.md §19.4).
    listeners: BTreeMap<Address, (ProcessId, mpsc::UnboundedSender<Incoming>)>,
    host_listeners: BTreeMap<(HostId, u32), (ProcessId, mpsc::UnboundedSender<Incoming>)>,
    /// Each process's ends of its connections: what it writes, what it
    /// reads; what a kill closes.
    ends: BTreeMap<ProcessId, Vec<End>>,
    /// The connections each listening address holds open, by the host
    /// they come from, and the most at once.
    held: BTreeMap<Address, Held>,
    /// Readers and writers that wait for a link to come back.
    waiting: Vec<Waker>,
    next_connection: u64,
}

/// One process's end of a connection: the direction it writes and the one
/// it reads, forgotten once both are gone.
type End = (Weak<Mutex<Pipe>>, Weak<Mutex<Pipe>>);

/// Whether a direction carries bytes now, and since when it is cut.
#[derive(Clone, Copy, Debug)]
pub struct Reach {
    pub stalled: bool,
    /// The other end refuses: an answer comes back, and it is a refusal.
    pub refused: bool,
    pub cut_since: Option<Instant>,
    pub delay: Duration,
    pub bytes_per_second: Option<u64>,
}

impl Reach {
    /// Whether what is sent this way is answered.
    pub fn answers(&self) -> bool {
        !self.stalled && !self.refused
    }
}

impl Net {
    pub fn new(trace: Trace) -> Net {
        Net {
            state: Arc::new(Mutex::new(State {
                links: BTreeMap::new(),
                isolated: BTreeMap::new(),
                paused: BTreeSet::new(),
                refusing: BTreeSet::new(),
                crashed: BTreeMap::new(),
                dead: BTreeSet::new(),
                listeners: BTreeMap::new(),
                host_listeners: BTreeMap::new(),
                ends: BTreeMap::new(),
                held: BTreeMap::new(),
                waiting: Vec::new(),
                next_connection: 0,
            })),
            changed: Arc::new(watch::channel(0).0),
            trace,
        }
    }

    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Told after every change of a link or host.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// How `from` reaches `to` now.
    pub fn reach(&self, from: HostId, to: HostId) -> Reach {
        self.state.lock().expect("never poisoned").reach(from, to)
    }

    fn changed(&self, mut state: std::sync::MutexGuard<'_, State>) {
        let waiting = std::mem::take(&mut state.waiting);
        drop(state);
        for waker in waiting {
            waker.wake();
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Changes the link from `from` to `to`.
    pub fn set_link(&self, from: HostId, to: HostId, change: impl FnOnce(&mut Link)) {
        let mut state = self.state.lock().expect("never poisoned");
        change(state.links.entry((from, to)).or_default());
        self.changed(state);
    }

    /// Cuts (or heals) the link from `from` to `to`.
    pub fn cut(&self, from: HostId, to: HostId, cut: bool) {
        let now = Instant::now();
        self.trace
            .record(format_args!("net cut h{from}->h{to} {cut}"));
        self.set_link(from, to, |link| {
            link.cut_since = if cut {
                link.cut_since.or(Some(now))
            } else {
                None
            }
        });
    }

    /// Cuts `host` off from every other host and the store (or heals
    /// it): for good, its process is as good as crashed (its lease
    /// expires, its connections break).
    pub fn isolate(&self, host: HostId, isolated: bool) {
        self.trace
            .record(format_args!("net isolate h{host} {isolated}"));
        let mut state = self.state.lock().expect("never poisoned");
        if isolated {
            state.isolated.entry(host).or_insert_with(Instant::now);
        } else {
            state.isolated.remove(&host);
        }
        self.changed(state);
    }

    /// Holds (or releases) every link of `host`.
    pub fn pause(&self, host: HostId, paused: bool) {
        self.mark("pause", host, paused, |state| &mut state.paused);
    }

    /// Makes `host` refuse whatever reaches it (or answer again).
    pub fn refuse(&self, host: HostId, refusing: bool) {
        self.mark("refuse", host, refusing, |state| &mut state.refusing);
    }

    /// Puts `host` in the set of hosts that `of` picks (or takes it out),
    /// and tells whoever waits for a change.
    fn mark(
        &self,
        what: &str,
        host: HostId,
        on: bool,
        of: impl FnOnce(&mut State) -> &mut BTreeSet<HostId>,
    ) {
        self.trace.record(format_args!("net {what} h{host} {on}"));
        let mut state = self.state.lock().expect("never poisoned");
        let hosts = of(&mut state);
        if on {
            hosts.insert(host);
        } else {
            hosts.remove(&host);
        }
        self.changed(state);
    }

    /// A connection to `address` that the transport refuses before its
    /// hello: a junk peer, or one whose certificate does not verify.
    pub fn junk_connection(&self, from: HostId, address: Address) {
        let mut state = self.state.lock().expect("never poisoned");
        let Some((owner, listener)) = state.listeners.get(&address).cloned() else {
            return;
        };
        // Not counted as held: a junk peer fails its handshake before it
        // takes a slot (SPEC.md §11.3), and is no host of the cluster.
        let (_, server) = state.pair(self, (from, None), (address.host, Some(owner)), false, None);
        drop(state);
        let _ = listener.send(Incoming {
            connection: server,
            from,
            junk: true,
        });
    }
}

impl Net {
    /// Crashes `host` for good: cut off from every other host and the
    /// store, and its host-local connections with it.
    pub fn crash(&self, host: HostId) {
        self.state
            .lock()
            .expect("never poisoned")
            .crashed
            .entry(host)
            .or_insert_with(Instant::now);
        self.isolate(host, true);
    }

    /// Kills `process` (kill -9): its listeners go at once, and each of its
    /// connections closes both ways, what it had sent (flushed) arriving
    /// before the end, what it had not sent lost. Its transports and its
    /// election's requests fail from now on; it never comes back.
    pub fn kill(&self, process: ProcessId) {
        self.trace.record(format_args!("net kill p{process}"));
        let ends = {
            let mut state = self.state.lock().expect("never poisoned");
            state.dead.insert(process);
            state.listeners.retain(|_, (owner, _)| *owner != process);
            state
                .host_listeners
                .retain(|_, (owner, _)| *owner != process);
            state.ends.remove(&process).unwrap_or_default()
        };
        for (writes, reads) in ends {
            if let Some(writes) = writes.upgrade() {
                let mut pipe = writes.lock().expect("never poisoned");
                pipe.writer_dead = true;
                pipe.end();
            }
            if let Some(reads) = reads.upgrade() {
                let mut pipe = reads.lock().expect("never poisoned");
                pipe.reader_dead = true;
                pipe.reader_gone = true;
                if let Some(reader) = pipe.reader.take() {
                    reader.wake();
                }
            }
        }
        self.changed(self.state.lock().expect("never poisoned"));
    }

    /// Whether `process` was killed.
    pub fn is_dead(&self, process: ProcessId) -> bool {
        self.state
            .lock()
            .expect("never poisoned")
            .dead
            .contains(&process)
    }

    /// The most connections `address`'s listener held open at once, in
    /// all and from one host.
    pub fn held_at_most(&self, address: Address) -> (u32, u32) {
        self.state
            .lock()
            .expect("never poisoned")
            .held
            .get(&address)
            .map_or((0, 0), |held| (held.most, held.most_from_one_host))
    }

    /// How a connection of `from` to `to` carries bytes now: a host-local
    /// one (`local`) only stops with its host.
    fn pipe_reach(&self, from: HostId, to: HostId, local: bool) -> Reach {
        let state = self.state.lock().expect("never poisoned");
        if local {
            state.local_reach(from)
        } else {
            state.reach(from, to)
        }
    }
}

/// The connections one listening address holds open.
#[derive(Default)]
struct Held {
    from: BTreeMap<HostId, u32>,
    open: u32,
    most: u32,
    most_from_one_host: u32,
}

/// One connection held open at a listening address, until the listener's
/// side drops both its halves.
struct Hold {
    net: Net,
    address: Address,
    from: HostId,
}

impl Hold {
    fn new(state: &mut State, net: &Net, address: Address, from: HostId) -> Arc<Hold> {
        let held = state.held.entry(address).or_default();
        held.open += 1;
        held.most = held.most.max(held.open);
        let from_host = held.from.entry(from).or_default();
        *from_host += 1;
        held.most_from_one_host = held.most_from_one_host.max(*from_host);
        Arc::new(Hold {
            net: net.clone(),
            address,
            from,
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut state = self.net.state.lock().expect("never poisoned");
        if let Some(held) = state.held.get_mut(&self.address) {
            held.open -= 1;
            if let Some(from) = held.from.get_mut(&self.from) {
                *from -= 1;
            }
        }
    }
}

impl State {
    /// How a host-local connection on `host` carries bytes now: stopped
    /// with its host (paused), broken with it (crashed).
    fn local_reach(&self, host: HostId) -> Reach {
        let cut_since = self.crashed.get(&host).copied();
        Reach {
            stalled: cut_since.is_some() || self.paused.contains(&host),
            refused: false,
            cut_since,
            delay: LOCAL_LATENCY,
            bytes_per_second: None,
        }
    }

    fn reach(&self, from: HostId, to: HostId) -> Reach {
        let link = self.links.get(&(from, to)).cloned().unwrap_or_default();
        let isolated = [from, to]
            .iter()
            .filter_map(|host| self.isolated.get(host).copied())
            .min();
        let cut_since = match (link.cut_since, isolated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Reach {
            stalled: cut_since.is_some()
                || link.held
                || self.paused.contains(&from)
                || self.paused.contains(&to),
            refused: self.refusing.contains(&to),
            cut_since,
            delay: LATENCY + link.delay,
            bytes_per_second: link.bytes_per_second,
        }
    }

    /// A connection between `a` and `b`, each a host and the process
    /// there if known: `a`'s side and `b`'s. A host-local one (`local`)
    /// stays on one host; one that `b` accepts at a listening address
    /// (`at`) counts as held there while `b`'s side lives.
    fn pair(
        &mut self,
        net: &Net,
        a: (HostId, Option<ProcessId>),
        b: (HostId, Option<ProcessId>),
        local: bool,
        at: Option<Address>,
    ) -> (Side, Side) {
        let id = self.next_connection;
        self.next_connection += 1;
        let ab = Pipe::new(id, a.0, b.0, local);
        let ba = Pipe::new(id, b.0, a.0, local);
        for ((_, process), writes, reads) in [(a, &ab, &ba), (b, &ba, &ab)] {
            if let Some(process) = process {
                let ends = self.ends.entry(process).or_default();
                // A process that connects again and again (a host
                // coordinator across cluster terms) forgets its closed
                // connections now and then.
                if ends.len() >= FORGET_CLOSED_AFTER && ends.len().is_power_of_two() {
                    ends.retain(|(writes, reads)| {
                        writes.strong_count() > 0 || reads.strong_count() > 0
                    });
                }
                ends.push((Arc::downgrade(writes), Arc::downgrade(reads)));
            }
        }
        let hold = at.map(|address| Hold::new(self, net, address, a.0));
        let side = |read: &Arc<Mutex<Pipe>>, write: &Arc<Mutex<Pipe>>, hold: Option<Arc<Hold>>| {
            Connection {
                reader: SimReader {
                    net: net.clone(),
                    pipe: read.clone(),
                    sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
                    _hold: hold.clone(),
                },
                writer: SimWriter {
                    net: net.clone(),
                    pipe: write.clone(),
                    buffer: Vec::new(),
                    sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
                    shut: false,
                    _hold: hold,
                },
            }
        };
        (side(&ba, &ab, None), side(&ab, &ba, hold))
    }
}

type Side = Connection<SimReader, SimWriter>;

/// One direction of one connection.
struct Pipe {
    connection: u64,
    from: HostId,
    to: HostId,
    /// Bytes on the way, each piece with when it arrives; `None` is the
    /// end of the stream.
    packets: VecDeque<(Instant, Option<Vec<u8>>)>,
    /// How much of the first piece was read.
    offset: usize,
    /// Until when the link is busy sending (its bandwidth).
    busy_until: Instant,
    /// When the last piece arrives: pieces arrive in order.
    last_arrival: Instant,
    reader: Option<Waker>,
    reader_gone: bool,
    ended: bool,
    /// Host-local: it only stops with its host.
    local: bool,
    /// The writing process was killed: it writes nothing more.
    writer_dead: bool,
    /// The reading process was killed: it reads nothing more.
    reader_dead: bool,
}

impl Pipe {
    fn new(connection: u64, from: HostId, to: HostId, local: bool) -> Arc<Mutex<Pipe>> {
        let now = Instant::now();
        Arc::new(Mutex::new(Pipe {
            connection,
            from,
            to,
            packets: VecDeque::new(),
            offset: 0,
            busy_until: now,
            last_arrival: now,
            reader: None,
            reader_gone: false,
            ended: false,
            local,
            writer_dead: false,
            reader_dead: false,
        }))
    }

    fn push(&mut self, at: Instant, bytes: Option<Vec<u8>>) {
        let at = at.max(self.last_arrival);
        self.last_arrival = at;
        self.packets.push_back((at, bytes));
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            let latency = if self.local { LOCAL_LATENCY } else { LATENCY };
            self.push(Instant::now() + latency, None);
        }
    }
}

/// When a connection between `from` and `to` breaks, if a link of it is
/// cut (for a host-local one, `local`: when its host crashed).
fn breaks_at(net: &Net, from: HostId, to: HostId, local: bool) -> Option<Instant> {
    let state = net.state.lock().expect("never poisoned");
    if local {
        return state
            .local_reach(from)
            .cut_since
            .map(|since| since + USER_TIMEOUT);
    }
    let there = state.reach(from, to).cut_since;
    let back = state.reach(to, from).cut_since;
    match (there, back) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|since| since + USER_TIMEOUT)
}

fn killed() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "this process was killed")
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the connection timed out (its link is cut)",
    )
}

/// The reading half of a connection.
pub struct SimReader {
    net: Net,
    pipe: Arc<Mutex<Pipe>>,
    sleep: Pin<Box<Sleep>>,
    /// Held at a listening address while this side lives.
    _hold: Option<Arc<Hold>>,
}

impl AsyncRead for SimReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let now = Instant::now();
        let (from, to, local) = {
            let pipe = self.pipe.lock().expect("never poisoned");
            if pipe.reader_dead {
                return Poll::Ready(Err(killed()));
            }
            (pipe.from, pipe.to, pipe.local)
        };
        let breaks = breaks_at(&self.net, from, to, local);
        if breaks.is_some_and(|at| at <= now) {
            return Poll::Ready(Err(timed_out()));
        }
        let stalled = self.net.pipe_reach(from, to, local).stalled;
        let mut wake_at = breaks;
        {
            let mut pipe = self.pipe.lock().expect("never poisoned");
            if !stalled {
                match pipe.packets.front() {
                    Some((at, _)) if *at <= now => {
                        let offset = pipe.offset;
                        let connection = pipe.connection;
                        let (_, piece) = pipe.packets.front().expect("just seen");
                        let Some(bytes) = piece else {
                            return Poll::Ready(Ok(()));
                        };
                        let n = (bytes.len() - offset).min(buf.remaining());
                        buf.put_slice(&bytes[offset..offset + n]);
                        let done = offset + n == bytes.len();
                        if done {
                            pipe.packets.pop_front();
                            pipe.offset = 0;
                        } else {
                            pipe.offset += n;
                        }
                        drop(pipe);
                        self.net
                            .trace
                            .record(format_args!("deliver c{connection} h{from}->h{to} {n}B"));
                        return Poll::Ready(Ok(()));
                    }
                    Some((at, _)) => wake_at = Some(wake_at.map_or(*at, |w| w.min(*at))),
                    None => {}
                }
            }
            pipe.reader = Some(cx.waker().clone());
        }
        if stalled {
            self.net
                .state
                .lock()
                .expect("never poisoned")
                .waiting
                .push(cx.waker().clone());
        }
        if let Some(at) = wake_at {
            self.sleep.as_mut().reset(at);
            if self.sleep.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }
}

impl Drop for SimReader {
    fn drop(&mut self) {
        self.pipe.lock().expect("never poisoned").reader_gone = true;
    }
}

/// The writing half of a connection: bytes stay here until a flush.
pub struct SimWriter {
    net: Net,
    pipe: Arc<Mutex<Pipe>>,
    buffer: Vec<u8>,
    sleep: Pin<Box<Sleep>>,
    shut: bool,
    /// Held at a listening address while this side lives.
    _hold: Option<Arc<Hold>>,
}

impl SimWriter {
    fn broken(&self) -> Option<io::Error> {
        let pipe = self.pipe.lock().expect("never poisoned");
        if pipe.writer_dead {
            return Some(killed());
        }
        if pipe.reader_gone {
            return Some(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer closed the connection",
            ));
        }
        let (from, to, local) = (pipe.from, pipe.to, pipe.local);
        drop(pipe);
        breaks_at(&self.net, from, to, local)
            .is_some_and(|at| at <= Instant::now())
            .then(timed_out)
    }
}

impl AsyncWrite for SimWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(error) = self.broken() {
            return Poll::Ready(Err(error));
        }
        self.buffer.extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.buffer.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Some(error) = self.broken() {
                return Poll::Ready(Err(error));
            }
            let now = Instant::now();
            let shared = self.pipe.clone();
            let mut pipe = shared.lock().expect("never poisoned");
            if pipe.busy_until > now {
                let at = pipe.busy_until;
                drop(pipe);
                self.sleep.as_mut().reset(at);
                if self.sleep.as_mut().poll(cx).is_ready() {
                    continue;
                }
                return Poll::Pending;
            }
            let reach = self.net.pipe_reach(pipe.from, pipe.to, pipe.local);
            let n = match reach.bytes_per_second {
                Some(_) => self.buffer.len().min(CHUNK),
                None => self.buffer.len(),
            };
            let sending = Duration::from_secs_f64(
                reach
                    .bytes_per_second
                    .map_or(0.0, |rate| n as f64 / rate as f64),
            );
            pipe.busy_until = now + sending;
            let piece: Vec<u8> = self.buffer.drain(..n).collect();
            pipe.push(now + sending + reach.delay, Some(piece));
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.as_mut().poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                self.shut = true;
                self.pipe.lock().expect("never poisoned").end();
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl Drop for SimWriter {
    fn drop(&mut self) {
        // What was never flushed is lost, as a TLS writer's records are.
        self.pipe.lock().expect("never poisoned").end();
    }
}

/// A connection that reached a listener.
pub struct Incoming {
    connection: Side,
    from: HostId,
    junk: bool,
}

/// Why a killed process cannot connect.
fn connect_killed() -> ConnectError {
    ConnectError::Unreachable(killed())
}

/// One process's transport of the cluster: it listens at its own address.
pub struct SimTransport {
    net: Net,
    address: Address,
    process: ProcessId,
}

impl SimTransport {
    pub fn new(net: Net, address: Address, process: ProcessId) -> SimTransport {
        SimTransport {
            net,
            address,
            process,
        }
    }
}

impl Transport for SimTransport {
    type Address = Address;
    type Reader = SimReader;
    type Writer = SimWriter;
    type Listener = SimListener;

    async fn connect(&self, address: &Address) -> Result<Side, ConnectError> {
        if self.net.is_dead(self.process) {
            return Err(connect_killed());
        }
        let from = self.address.host;
        let there = self.net.reach(from, address.host);
        let back = self.net.reach(address.host, from);
        if there.stalled || back.stalled {
            tokio::time::sleep(CONNECT_TIMEOUT).await;
            return Err(ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{address} did not answer within {CONNECT_TIMEOUT:?}"),
            )));
        }
        tokio::time::sleep(there.delay).await;
        let paired = {
            let mut state = self.net.state.lock().expect("never poisoned");
            state
                .listeners
                .get(address)
                .cloned()
                .map(|(owner, listener)| {
                    let sides = state.pair(
                        &self.net,
                        (from, Some(self.process)),
                        (address.host, Some(owner)),
                        false,
                        Some(*address),
                    );
                    (listener, sides)
                })
        };
        let Some((listener, (client, server))) = paired else {
            return Err(ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens at {address}"),
            )));
        };
        let sent = listener.send(Incoming {
            connection: server,
            from,
            junk: false,
        });
        if sent.is_err() {
            return Err(ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("{address} stopped listening"),
            )));
        }
        tokio::time::sleep(back.delay).await;
        Ok(client)
    }

    fn listen(&self) -> io::Result<SimListener> {
        let (sender, incoming) = mpsc::unbounded_channel();
        self.net
            .state
            .lock()
            .expect("never poisoned")
            .listeners
            .insert(self.address, (self.process, sender));
        Ok(SimListener {
            net: self.net.clone(),
            at: Listening::Address(self.address),
            process: self.process,
            incoming,
        })
    }
}

/// One process's transport of its host (the host tier, SPEC.md §18): its
/// host directory's socket, which one process at a time listens on, as a
/// Unix socket at one path; one per shard (SPEC.md §19.4). Faults of the
/// links between hosts do not touch it; its host's crash or pause does.
pub struct HostTransport {
    net: Net,
    host: HostId,
    shard: u32,
    process: ProcessId,
}

impl HostTransport {
    pub fn new(net: Net, (host, shard): (HostId, u32), process: ProcessId) -> HostTransport {
        HostTransport {
            net,
            host,
            shard,
            process,
        }
    }
}

impl Transport for HostTransport {
    /// The host directory's socket: nothing to name, as a local
    /// coordinator's.
    type Address = ();
    type Reader = SimReader;
    type Writer = SimWriter;
    type Listener = SimListener;

    async fn connect(&self, (): &()) -> Result<Side, ConnectError> {
        if self.net.is_dead(self.process) {
            return Err(connect_killed());
        }
        let reach = self.net.pipe_reach(self.host, self.host, true);
        if reach.stalled {
            tokio::time::sleep(CONNECT_TIMEOUT).await;
            return Err(ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("h{}'s socket did not answer", self.host),
            )));
        }
        let paired = {
            let mut state = self.net.state.lock().expect("never poisoned");
            state
                .host_listeners
                .get(&(self.host, self.shard))
                .cloned()
                .map(|(owner, listener)| {
                    let sides = state.pair(
                        &self.net,
                        (self.host, Some(self.process)),
                        (self.host, Some(owner)),
                        true,
                        None,
                    );
                    (listener, sides)
                })
        };
        // A socket nobody listens on refuses at once, as a Unix socket
        // whose process died does.
        let refused = || {
            ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on h{}'s socket", self.host),
            ))
        };
        let Some((listener, (client, server))) = paired else {
            return Err(refused());
        };
        if listener
            .send(Incoming {
                connection: server,
                from: self.host,
                junk: false,
            })
            .is_err()
        {
            return Err(refused());
        }
        tokio::time::sleep(reach.delay).await;
        Ok(client)
    }

    fn listen(&self) -> io::Result<SimListener> {
        let (sender, incoming) = mpsc::unbounded_channel();
        self.net
            .state
            .lock()
            .expect("never poisoned")
            .host_listeners
            .insert((self.host, self.shard), (self.process, sender));
        Ok(SimListener {
            net: self.net.clone(),
            at: Listening::Host(self.host, self.shard),
            process: self.process,
            incoming,
        })
    }
}

/// Where a listener listens.
enum Listening {
    Address(Address),
    /// A host's socket of a shard.
    Host(HostId, u32),
}

/// A coordinator's listener.
pub struct SimListener {
    net: Net,
    at: Listening,
    process: ProcessId,
    incoming: mpsc::UnboundedReceiver<Incoming>,
}

impl Listener for SimListener {
    type Reader = SimReader;
    type Writer = SimWriter;
    type Incoming = Incoming;

    async fn accept(&mut self) -> io::Result<Incoming> {
        match self.incoming.recv().await {
            Some(incoming) => Ok(incoming),
            None => std::future::pending().await,
        }
    }

    async fn establish(incoming: Incoming) -> Result<Side, PeerRefused> {
        if incoming.junk {
            return Err(PeerRefused::Setup {
                peer: format!("the client on h{}", incoming.from),
                reason: "a junk handshake".to_owned(),
            });
        }
        Ok(incoming.connection)
    }

    fn check(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn close(self) {
        // Only its own: a killed process's listener was taken away at
        // once, and another may listen there now.
        let mut state = self.net.state.lock().expect("never poisoned");
        let process = self.process;
        match self.at {
            Listening::Address(address) => {
                if state
                    .listeners
                    .get(&address)
                    .is_some_and(|(owner, _)| *owner == process)
                {
                    state.listeners.remove(&address);
                }
            }
            Listening::Host(host, shard) => {
                if state
                    .host_listeners
                    .get(&(host, shard))
                    .is_some_and(|(owner, _)| *owner == process)
                {
                    state.host_listeners.remove(&(host, shard));
                }
            }
        }
    }
}
