//! The coordinator's side of the socket (SPEC.md §10, §11): accepts
//! connections, runs the handshake, feeds the pure [`Coordinator`] and carries
//! out its effects. It runs on the single-flight thread of the process that
//! won the election.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

use super::lines::{LineError, Lines};
use super::options::{HANDSHAKE_TIMEOUT, Options};
use super::socket::{SocketDirectory, own_uid, peer_allowed};
use crate::coordinator::{ConnectionId, Coordinator, Effect, Event, Term};
use crate::election::Leadership;
use crate::protocol::{
    CoordinatorHello, HandshakeError, Incoming, LineEncoder, PROTOCOL_NAME, PROTOCOL_VERSION,
    decode_client_hello, decode_request, limits::MAX_FRAME_BYTES,
};

/// Connections served at once. Each costs two tasks and up to
/// [`MAX_QUEUED_BYTES`]; a flood beyond this is refused at accept, so that it
/// cannot exhaust descriptors or memory (SPEC.md §11.3).
pub const MAX_CONNECTIONS: usize = 4096;

/// Bytes of responses queued for one connection before the coordinator gives
/// up on it (SPEC.md §11.3). One whole frame must fit (a `landed` may be that
/// large) plus the small answers around it; a client that stops reading past
/// that is closed, so it can neither block the coordinator nor grow its
/// memory.
pub const MAX_QUEUED_BYTES: usize = MAX_FRAME_BYTES + 1024 * 1024;

/// Requests read ahead of the coordinator across all connections. When the
/// coordinator falls behind, readers wait, and the kernel's socket buffers
/// push back on the clients.
const EVENT_QUEUE: usize = 1024;

/// How often the term checks that its lock file and socket are still its own
/// (SPEC.md §7.2, §11.1). A check is two `stat`s.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The pause after a failed `accept` (SPEC.md §11.3).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// How long an ending term waits for its last answers to be written. A
/// client that does not read them in that time learns of the end from the
/// closed connection instead.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// A file whose presence tells the next term that this one ended with no
/// flight in progress, so that it needs no grace window (SPEC.md §10.2).
pub const CLEAN_FILE: &str = "flight.clean";

/// What the connection tasks report to the coordinator's loop.
enum Report {
    Opened {
        connection: ConnectionId,
        writer: Writer,
    },
    Request {
        connection: ConnectionId,
        request: Incoming,
    },
    Closed {
        connection: ConnectionId,
    },
}

/// The sending side of one connection.
struct Writer {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// A term being served. Dropping `stop` (or sending on it) ends the term
/// cleanly; the task then resigns.
pub struct Serving {
    pub stop: oneshot::Sender<()>,
    pub done: tokio::task::JoinHandle<()>,
}

/// Binds the socket for `leadership`'s term and starts serving it on the
/// current (single-flight) runtime.
pub fn start(
    leadership: Leadership,
    sockets: Arc<SocketDirectory>,
    options: &Options,
) -> std::io::Result<Serving> {
    sockets.remove_stale_temporaries();
    let (listener, inode) = sockets.bind(0)?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;
    let clean = leadership.directory().join(CLEAN_FILE);
    // §10.2: the first term, or one after a clean end, has nothing to wait for.
    let term = if leadership.epoch().get() == 1 || fs::remove_file(&clean).is_ok() {
        Term::First
    } else {
        Term::AfterFailover
    };
    info!(epoch = %leadership.epoch(), ?term, "coordinating");
    let (stop, stopped) = oneshot::channel();
    let server = Server {
        coordinator: Coordinator::new(leadership.epoch(), term),
        leadership,
        sockets,
        listener,
        inode,
        writers: BTreeMap::new(),
        readers: BTreeMap::new(),
        next_connection: 0,
        uid: own_uid(),
    };
    let grace = (term == Term::AfterFailover).then_some(options.grace_window);
    let done = tokio::spawn(server.serve(grace, stopped));
    Ok(Serving { stop, done })
}

struct Server {
    coordinator: Coordinator,
    leadership: Leadership,
    sockets: Arc<SocketDirectory>,
    listener: tokio::net::UnixListener,
    inode: u64,
    writers: BTreeMap<ConnectionId, Writer>,
    readers: BTreeMap<ConnectionId, AbortHandle>,
    next_connection: u64,
    uid: u32,
}

/// How a term ends.
enum End {
    /// Asked to stop: the process is shutting down.
    Stopped,
    /// The term cannot go on (lost lock file, exhausted tokens).
    Lost,
}

impl Server {
    async fn serve(mut self, grace: Option<Duration>, mut stopped: oneshot::Receiver<()>) {
        let (reports, mut inbox) = mpsc::channel(EVENT_QUEUE);
        let grace_over = async {
            match grace {
                Some(window) => tokio::time::sleep(window).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(grace_over);
        let mut grace_pending = grace.is_some();
        let mut checks = tokio::time::interval(CHECK_INTERVAL);
        let end = loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => self.accept(stream, &reports),
                    Err(error) => {
                        // Out of descriptors or memory: an immediate retry
                        // would fail the same way and spin.
                        warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                Some(report) = inbox.recv() => {
                    if !self.report(report) {
                        break End::Lost;
                    }
                }
                () = &mut grace_over, if grace_pending => {
                    grace_pending = false;
                    info!(epoch = %self.coordinator.epoch(), "grace window over");
                    if !self.step(Event::GraceWindowEnded) {
                        break End::Lost;
                    }
                }
                _ = checks.tick() => {
                    if !self.check() {
                        break End::Lost;
                    }
                }
                _ = &mut stopped => break End::Stopped,
            }
        };
        self.end(end).await;
    }

    fn accept(&mut self, stream: UnixStream, reports: &mpsc::Sender<Report>) {
        let peer = stream.peer_cred().map(|credentials| credentials.uid());
        match peer {
            Ok(uid) if peer_allowed(uid, self.uid) => {}
            Ok(uid) => {
                warn!(
                    uid,
                    "refused a connection from another user (SPEC.md §11.2)"
                );
                return;
            }
            Err(error) => {
                warn!(%error, "refused a connection whose user cannot be told");
                return;
            }
        }
        if self.readers.len() >= MAX_CONNECTIONS {
            warn!(
                limit = MAX_CONNECTIONS,
                "refused a connection: too many open"
            );
            return;
        }
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        let hello = CoordinatorHello {
            protocol: PROTOCOL_NAME.to_owned(),
            version: PROTOCOL_VERSION,
            epoch: self.coordinator.epoch().to_string(),
            pid: std::process::id(),
        };
        let task = tokio::spawn(connection_task(stream, connection, hello, reports.clone()));
        self.readers.insert(connection, task.abort_handle());
    }

    /// Feeds one report to the coordinator; `false` when the term must end.
    fn report(&mut self, report: Report) -> bool {
        match report {
            Report::Opened { connection, writer } => {
                self.writers.insert(connection, writer);
                self.step(Event::ConnectionOpened { connection })
            }
            Report::Request {
                connection,
                request,
            } => self.step(Event::RequestReceived {
                connection,
                request,
            }),
            Report::Closed { connection } => {
                self.forget(connection);
                self.step(Event::ConnectionClosed { connection })
            }
        }
    }

    /// Runs one event through the coordinator and carries out its effects
    /// in order; `false` when the term must end.
    fn step(&mut self, event: Event) -> bool {
        let mut closed = Vec::new();
        let mut encoder = LineEncoder::default();
        for effect in self.coordinator.step(event) {
            match effect {
                Effect::Send {
                    connection,
                    response,
                } => {
                    trace_response(connection, &response);
                    if !self.enqueue(connection, encoder.line(&response)) {
                        closed.push(connection);
                    }
                }
                Effect::Close { connection, reason } => {
                    warn!(?connection, ?reason, "closing a connection");
                    self.forget(connection);
                }
                Effect::EndTerm => {
                    warn!(epoch = %self.coordinator.epoch(), "this term has minted its last token; ending it (SPEC.md §8.9)");
                    return false;
                }
            }
        }
        // §11.3: a client too slow to read loses its connection, after the
        // step, so that the effects of this event stay in order.
        for connection in closed {
            warn!(
                ?connection,
                limit = MAX_QUEUED_BYTES,
                "closing a connection that does not read its responses"
            );
            self.forget(connection);
            if !self.step(Event::ConnectionClosed { connection }) {
                return false;
            }
        }
        true
    }

    /// Queues a line for a connection; `false` if its queue is over the bound.
    fn enqueue(&mut self, connection: ConnectionId, line: Vec<u8>) -> bool {
        let Some(writer) = self.writers.get(&connection) else {
            return true;
        };
        let queued = writer.queued.fetch_add(line.len(), Ordering::AcqRel) + line.len();
        queued <= MAX_QUEUED_BYTES && writer.lines.send(line).is_ok()
    }

    /// Stops both tasks of a connection, which closes it. The writer is
    /// aborted, not left to drain: a client that does not read would keep
    /// it blocked, and with it the socket open (SPEC.md §11.3).
    fn forget(&mut self, connection: ConnectionId) {
        if let Some(writer) = self.writers.remove(&connection) {
            writer.task.abort();
        }
        if let Some(reader) = self.readers.remove(&connection) {
            reader.abort();
        }
    }

    /// §7.2, §11.1: the term's lock file and socket must still be its own.
    fn check(&mut self) -> bool {
        if let Err(error) = self.leadership.check() {
            warn!(%error, "ending the term");
            return false;
        }
        if !self.sockets.still_bound(self.inode) {
            warn!("the socket was removed or replaced; binding it again (SPEC.md §11.1)");
            let rebound = self
                .sockets
                .bind(self.next_connection)
                .and_then(|(listener, inode)| {
                    listener.set_nonblocking(true)?;
                    Ok((tokio::net::UnixListener::from_std(listener)?, inode))
                });
            match rebound {
                Ok((listener, inode)) => {
                    self.listener = listener;
                    self.inode = inode;
                }
                Err(error) => {
                    warn!(%error, "cannot bind the socket again; ending the term");
                    return false;
                }
            }
        }
        true
    }

    async fn end(mut self, end: End) {
        let clean = matches!(end, End::Stopped) && self.coordinator.flights().next().is_none();
        for reader in std::mem::take(&mut self.readers).into_values() {
            reader.abort();
        }
        // The last answers (an `interrupted`, an `ack`) still reach their
        // clients: each writer drains its queue, then closes its connection.
        let writers: Vec<Writer> = std::mem::take(&mut self.writers).into_values().collect();
        let flushed = async {
            for writer in writers {
                drop(writer.lines);
                let _ = writer.task.await;
            }
        };
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
        if self.sockets.still_bound(self.inode) {
            let _ = fs::remove_file(self.sockets.socket());
        }
        if clean {
            // §10.2: written while the claim is still held, so that no other
            // term can have begun.
            // Mode 0600 like every file of the directory (§7.1); it is empty.
            let _ = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(self.leadership.directory().join(CLEAN_FILE));
        }
        info!(epoch = %self.coordinator.epoch(), clean, "term over");
        if let Err(error) = self.leadership.resign() {
            warn!(%error, "resigning");
        }
    }
}

fn trace_response(connection: ConnectionId, response: &crate::protocol::Response) {
    use crate::protocol::Response;
    match response {
        Response::Lead { id, token } => debug!(?connection, %id, %token, "lead"),
        Response::Joined { id, flight } => debug!(?connection, %id, %flight, "joined"),
        Response::Landed { id, .. } => debug!(?connection, %id, "landed"),
        Response::Interrupted { id } => debug!(?connection, %id, "interrupted"),
        Response::Rejected { id } => debug!(?connection, %id, "rejected"),
        _ => {}
    }
}

/// One connection: handshake, then requests until it closes (SPEC.md §4).
async fn connection_task(
    stream: UnixStream,
    connection: ConnectionId,
    hello: CoordinatorHello,
    reports: mpsc::Sender<Report>,
) {
    let (read, write) = stream.into_split();
    let (lines_out, outgoing) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(write_lines(write, outgoing, queued.clone()));
    let mut lines = Lines::new(read);
    let mut our_hello = serde_json::to_vec(&hello).expect("a hello always serializes");
    our_hello.push(b'\n');
    let first = match tokio::time::timeout(HANDSHAKE_TIMEOUT, lines.next()).await {
        Ok(Ok(line)) => line,
        Ok(Err(error)) => return debug!(?connection, %error, "closed before its hello"),
        Err(_) => return debug!(?connection, "no hello in time; closing"),
    };
    match decode_client_hello(&first) {
        Ok(_) => {}
        Err(error) => {
            // §4.2: a client of another version learns ours before the close.
            if matches!(error, HandshakeError::Version(_)) {
                let _ = lines_out.send(our_hello);
            }
            return warn!(?connection, %error, "refused a handshake");
        }
    }
    // The writer subtracts every line it writes from `queued`, the hello too.
    queued.fetch_add(our_hello.len(), Ordering::AcqRel);
    let _ = lines_out.send(our_hello);
    let writer = Writer {
        lines: lines_out,
        queued,
        task,
    };
    if reports
        .send(Report::Opened { connection, writer })
        .await
        .is_err()
    {
        return;
    }
    loop {
        let request = match lines.next().await {
            Ok(line) => match decode_request(&line) {
                Ok(request) => request,
                Err(error) => {
                    warn!(?connection, %error, "closing a connection that sent a malformed request (SPEC.md §3.7)");
                    break;
                }
            },
            Err(LineError::Closed) => break,
            Err(error) => {
                warn!(?connection, %error, "closing a connection");
                break;
            }
        };
        if reports
            .send(Report::Request {
                connection,
                request,
            })
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = reports.send(Report::Closed { connection }).await;
}

/// Writes queued lines, several per system call when they pile up.
async fn write_lines(
    mut write: OwnedWriteHalf,
    mut outgoing: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
) {
    let mut batch = Vec::new();
    while let Some(line) = outgoing.recv().await {
        batch.clear();
        batch.extend_from_slice(&line);
        while batch.len() < MAX_FRAME_BYTES {
            match outgoing.try_recv() {
                Ok(line) => batch.extend_from_slice(&line),
                Err(_) => break,
            }
        }
        if write.write_all(&batch).await.is_err() {
            return;
        }
        queued.fetch_sub(batch.len(), Ordering::AcqRel);
    }
    let _ = write.shutdown().await;
}
