//! The second lane of the nemesis: hostile clients that speak to the
//! coordinator directly (SPEC.md §3.6, §3.7, §4, §8.8, §11.3): to its socket
//! in the local form, over TCP with TLS in the cluster form (`Target`),
//! where clients without a valid certificate join them (§11.4, §14.5).
//! Each one checks what the coordinator must do, and the verdict is logged:
//! as specified, a violation, or inconclusive when another fault (a killed
//! or stopped coordinator, a removed socket, a partition) got in the way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use single_flight_core::protocol::limits::MAX_FRAME_BYTES;
use single_flight_core::protocol::{Response, decode_coordinator_hello, decode_response};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::common::{Shared, fresh_status};
use crate::records::{Record, Verdict, now_us};
use crate::rng::Rng;
use crate::schedule::{Hostile, Planned, hostile_name};
#[cfg(feature = "cluster")]
use crate::tls::{Identity, TlsClients};

/// Where the hostile clients speak to the coordinator.
pub enum Target {
    /// `flight.sock` in the run's directory (the local form).
    Socket,
    /// The address in the cluster's coordinator key, over TLS (the cluster
    /// form).
    #[cfg(feature = "cluster")]
    Tls(Arc<TlsClients>),
}

const HELLO: &[u8] = b"{\"protocol\":\"single-flight\",\"version\":1}\n";

/// The longest one hostile client may take before it counts as stuck.
const ATTACK_BOUND: Duration = Duration::from_secs(40);

/// How long to wait for an answer the coordinator owes. Far above its
/// normal latency; a stopped coordinator makes the verdict inconclusive.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// Light clients at once, and heavy ones (megabytes, thousands of
/// connections) one at a time, so that the lane loads the coordinator
/// without starving the workers of a 2-core machine.
const LIGHT_AT_ONCE: usize = 4;

/// How long the client that never reads may be kept writing. The
/// coordinator reads its requests until it closes the connection, which
/// takes it well under a second on this machine; a stopped coordinator
/// blocks the writes longer, and makes the verdict inconclusive.
const WRITE_PATIENCE: Duration = Duration::from_secs(6);

/// Attempts of one hostile client while its verdict is inconclusive: the
/// cluster form's nemesis takes the coordinator away every few seconds
/// and does not wait for anyone (its faults are what the run must count),
/// so that a client that needs its coordinator for seconds sees it die
/// more often than not.
const CLIENT_ATTEMPTS: usize = 3;

/// How long a client looks for a coordinator that completes a handshake
/// before it gives up (inconclusive): longer than a cluster's failover, the
/// TTL, the watch and the grace window, with etcd's quorum coming back.
const FIND_PATIENCE: Duration = Duration::from_secs(15);

/// The wait between two attempts to reach a coordinator.
const FIND_RETRY: Duration = Duration::from_millis(100);

/// How long a client's own connection is tried again after its witness
/// reached the coordinator: the local form's socket may be being replaced
/// (the coordinator binds a new one within its check interval, SPEC.md
/// §11.1).
const CONNECT_PATIENCE: Duration = Duration::from_millis(1500);

/// Numbers of the calm phase's clients (used in their key names), far
/// above those of the lane.
const CALM_NUMBERS: u64 = 1_000_000;

/// The wait before a calm client is tried again.
pub const CALM_RETRY: Duration = Duration::from_secs(2);

/// Bytes per write of an oversized line.
const CHUNK: usize = 64 * 1024;

/// The bound on one connect of a flood: a coordinator that does not take a
/// connection that fast is overloaded or gone, and the flood goes on.
const FLOOD_CONNECT: Duration = Duration::from_millis(500);

/// Connections of a flood refused in a row after which it gives up.
const FLOOD_GIVE_UP: usize = 20;

/// Over TLS, one connection of a flood in this many completes a handshake
/// and says hello; the others open TCP and never speak TLS, which the
/// coordinator must close after its handshake timeout. A full handshake
/// for each of thousands would spend this 2-core machine's time on
/// cryptography in both processes rather than on the coordinator's limits.
#[cfg(feature = "cluster")]
const FLOOD_TLS_EVERY: usize = 64;

pub async fn run(
    shared: Arc<Shared>,
    target: Arc<Target>,
    plans: impl Iterator<Item = Planned<Hostile>>,
    until: Instant,
) -> Vec<JoinHandle<()>> {
    let light = Arc::new(Semaphore::new(LIGHT_AT_ONCE));
    let heavy = Arc::new(Semaphore::new(1));
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    for (number, planned) in plans.enumerate() {
        tokio::time::sleep(Duration::from_millis(planned.gap_ms)).await;
        if Instant::now() >= until {
            break;
        }
        let permits = if heavy_kind(planned.kind) {
            &heavy
        } else {
            &light
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (shared, target) = (shared.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            judge(&shared, &target, planned.kind, planned.draw, number as u64).await;
            drop(permit);
        }));
        tasks.retain(|task| !task.is_finished());
    }
    tasks
}

/// After the lanes: every hostile client of `kinds` once, while no other
/// fault runs, so that each gets a conclusive verdict in every run. An
/// inconclusive one (a lingering fault) is tried again `retries` times,
/// `retry` apart. One at a time, or with `together` as the lane runs them:
/// the heavy clients one at a time first, then the light ones
/// `LIGHT_AT_ONCE` at a time (the cluster form, whose retries wait for a
/// failover and whose every client costs TLS handshakes, so that the calm
/// phase stays short enough for CI).
pub async fn calm(
    shared: Arc<Shared>,
    target: Arc<Target>,
    kinds: &[Hostile],
    draw: u64,
    retries: u64,
    retry: Duration,
    together: bool,
) {
    if !together {
        let mut rng = Rng::new(draw);
        for (number, &kind) in kinds.iter().enumerate() {
            for attempt in 0..=retries {
                let number = CALM_NUMBERS + number as u64 * (retries + 1) + attempt;
                if judge(&shared, &target, kind, rng.next_u64(), number).await
                    != Verdict::Inconclusive
                {
                    break;
                }
                tokio::time::sleep(retry).await;
            }
        }
        return;
    }
    let one = |index: usize, kind: Hostile| {
        let (shared, target) = (shared.clone(), target.clone());
        async move {
            let mut rng = Rng::fork(draw, index as u64);
            for attempt in 0..=retries {
                let number = CALM_NUMBERS + index as u64 * (retries + 1) + attempt;
                if judge(&shared, &target, kind, rng.next_u64(), number).await
                    != Verdict::Inconclusive
                {
                    break;
                }
                tokio::time::sleep(retry).await;
            }
        }
    };
    for (index, &kind) in kinds.iter().enumerate() {
        if heavy_kind(kind) {
            one(index, kind).await;
        }
    }
    let light = Arc::new(Semaphore::new(LIGHT_AT_ONCE));
    let mut tasks = Vec::new();
    for (index, &kind) in kinds.iter().enumerate() {
        if !heavy_kind(kind) {
            let permit = light.clone().acquire_owned().await;
            let client = one(index, kind);
            tasks.push(tokio::spawn(async move {
                client.await;
                drop(permit);
            }));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Runs one hostile client and logs its verdict. While a fault leaves it
/// inconclusive (its coordinator died under it, most often), it does the
/// same again with the next coordinator, `CLIENT_ATTEMPTS` times in all;
/// the detail says which attempt concluded and why the ones before did
/// not.
async fn judge(shared: &Shared, target: &Target, kind: Hostile, draw: u64, number: u64) -> Verdict {
    let t = now_us();
    let mut before = Vec::new();
    let (verdict, detail) = loop {
        // Each attempt's keys are its own (`duplicate_id` needs a key that
        // nobody leads, an earlier attempt's lead included).
        let numbered = number * CLIENT_ATTEMPTS as u64 + before.len() as u64;
        let (verdict, detail) = attempt(shared, target, kind, draw, numbered).await;
        if verdict != Verdict::Inconclusive || before.len() + 1 == CLIENT_ATTEMPTS {
            break (verdict, detail);
        }
        before.push(detail);
    };
    let detail = if before.is_empty() {
        detail
    } else {
        format!(
            "{detail} (attempt {} of {CLIENT_ATTEMPTS}; inconclusive before: {})",
            before.len() + 1,
            before.join(" / ")
        )
    };
    shared.log(Record::Hostile {
        t,
        kind: hostile_name(kind),
        verdict,
        detail,
    });
    verdict
}

/// One attempt of a hostile client, and its verdict.
async fn attempt(
    shared: &Shared,
    target: &Target,
    kind: Hostile,
    draw: u64,
    number: u64,
) -> (Verdict, String) {
    // A flood's connections past `MAX_CONNECTIONS` are closed at accept,
    // which is what the closing clients expect for another reason: nobody
    // speaks to the coordinator during a flood but the flood itself.
    let _alone = if kind == Hostile::Flood {
        (Some(FLOOD_ALONE.write().await), None)
    } else {
        (None, Some(FLOOD_ALONE.read().await))
    };
    let _quiet = if needs_quiet(kind) {
        Some(shared.quiet.read().await)
    } else {
        None
    };
    let found = Witness::find(shared, target).await;
    let t = now_us();
    let before = shared.seen().map(|s| (s.epoch, s.pid));
    let (outcome, lived, pid) = match found {
        Err(miss) => (Err(miss), false, None),
        Ok(mut witness) => {
            let outcome = tokio::time::timeout(
                ATTACK_BOUND,
                attack(shared, target, &witness.at, kind, draw, number),
            )
            .await
            .unwrap_or_else(|_| Err(Miss::Wrong(format!("did not end within {ATTACK_BOUND:?}"))));
            let lived = witness.answered().await;
            (outcome, lived, Some(witness.at.pid))
        }
    };
    let end = now_us();
    let after = shared.seen().map(|s| (s.epoch, s.pid));
    let (stopped, cut) = pid.map_or((true, true), |pid| shared.hindered(pid, t, end));
    let observed = Observed {
        lived,
        disturbed: before != after || shared.disturbed(t, end),
        stopped,
        cut,
    };
    decide(outcome, proof(kind), observed)
}

/// Taken for writing by a flood, for reading by every other client.
static FLOOD_ALONE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// What a client knows besides its own connection's answers and close.
#[derive(Clone, Copy, Debug)]
struct Observed {
    /// Its witness, opened before its own connection to the same
    /// coordinator, was answered after the attack: the coordinator's term
    /// lived through it.
    lived: bool,
    /// A fault the nemesis logged (a kill, a stop, a socket replaced, a
    /// partition, etcd's members down) overlapped the attack.
    disturbed: bool,
    /// The coordinator that was attacked was stopped during the attack:
    /// what it owed may have come late.
    stopped: bool,
    /// The harness's path to the coordinator's host was cut during the
    /// attack: bytes waited, and TCP may have aborted a connection that the
    /// coordinator would have kept.
    cut: bool,
}

/// What shows that a client's success was the coordinator's doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// Answers, judged by themselves: no fault makes a coordinator answer
    /// as specified.
    Answers,
    /// A close, which a dying coordinator or an aborted TCP connection
    /// gives too: the witness must show that the coordinator lived through
    /// it, with the path to it never cut.
    Close,
    /// A refusal at the TLS handshake that the coordinator logged naming
    /// the client, which nothing else writes; the witness must show that
    /// the same coordinator then went on answering (SPEC.md §14.5).
    Refusal,
}

/// The verdict on one client from what it saw and what it knows (SPEC.md
/// §11.3, §11.4). A success counts as specified when its `proof` holds. A
/// miss — a wrong answer, a connection kept open, an answer that never
/// came — is a violation when the coordinator lived and was neither stopped
/// nor cut off meanwhile (it had every chance to do right), or when no
/// fault at all came near it; otherwise nothing can be concluded.
fn decide(outcome: Attack, proof: Proof, observed: Observed) -> (Verdict, String) {
    let Observed {
        lived,
        disturbed,
        stopped,
        cut,
    } = observed;
    let witness = if lived {
        "; the coordinator answered the witness after"
    } else {
        "; the coordinator did not answer the witness after"
    };
    let proven = match proof {
        Proof::Answers => true,
        Proof::Close => lived && !cut,
        Proof::Refusal => lived,
    };
    match outcome {
        Ok(detail) if proof == Proof::Answers => (Verdict::AsSpecified, detail),
        Ok(detail) if proven => (Verdict::AsSpecified, detail + witness),
        Ok(detail) if !lived && !disturbed => (Verdict::Violation, detail + witness),
        Ok(detail) => (Verdict::Inconclusive, detail + witness),
        Err(Miss::Unreachable(detail)) => (Verdict::Inconclusive, detail),
        Err(Miss::Wrong(detail)) if (lived && !stopped && !cut) || (!lived && !disturbed) => {
            (Verdict::Violation, detail + witness)
        }
        // The flood has checked that no other fault coincided.
        Err(Miss::Sure(detail)) if lived => (Verdict::Violation, detail + witness),
        Err(Miss::Wrong(detail) | Miss::Sure(detail)) => (Verdict::Inconclusive, detail + witness),
    }
}

/// Clients that need their coordinator to live for seconds, and whose
/// success is a close that its death would give too: in the local form
/// they wait for the fault under way and no fault that may reach the
/// coordinator starts until they end (`Shared::quiet`). The local nemesis
/// kills a coordinator every two or three seconds, so that most of them
/// would otherwise see it die. Only the one whose wait SPEC.md fixes
/// (`HANDSHAKE_TIMEOUT`, 2 s, §11.3): each of them holds the nemesis back,
/// and a client that never reads, which takes as long, would cost the run
/// a third of its faults for a few clients more.
fn needs_quiet(kind: Hostile) -> bool {
    matches!(kind, Hostile::NoHello | Hostile::SilentTcp)
}

/// What proves a client's success.
fn proof(kind: Hostile) -> Proof {
    match kind {
        Hostile::NoCertificate
        | Hostile::OtherCaCertificate
        | Hostile::WrongKey
        | Hostile::RevokedCertificate
        | Hostile::ExpiredCertificate
        | Hostile::PlainTcp
        | Hostile::SilentTcp => Proof::Refusal,
        kind if closing_kind(kind) => Proof::Close,
        _ => Proof::Answers,
    }
}

/// Clients of megabytes or thousands of connections.
fn heavy_kind(kind: Hostile) -> bool {
    matches!(
        kind,
        Hostile::Flood
            | Hostile::NoRead
            | Hostile::NoReadJoins
            | Hostile::OversizeLine
            | Hostile::OversizeHello
    )
}

/// Clients whose success is that the coordinator closes their connection.
fn closing_kind(kind: Hostile) -> bool {
    matches!(
        kind,
        Hostile::OversizeLine
            | Hostile::OversizeHello
            | Hostile::NoNewline
            | Hostile::InvalidUtf8
            | Hostile::DeepNesting
            | Hostile::DeepHello
            | Hostile::NoRead
            | Hostile::WrongProtocol
            | Hostile::WrongVersion
            | Hostile::NoHello
            | Hostile::GarbageHello
    )
}

/// Why an attack did not go as SPEC.md says.
enum Miss {
    /// No coordinator to talk to (refused, or no hello in time).
    Unreachable(String),
    /// The coordinator answered or behaved otherwise than specified.
    Wrong(String),
    /// The same, where the attack has already checked that no other fault
    /// coincided: a violation unless the coordinator changed meanwhile.
    Sure(String),
}

type Attack = Result<String, Miss>;

/// Either half of a connection, on either transport.
type ReadHalf = BufReader<Box<dyn AsyncRead + Unpin + Send>>;
type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

struct Connection {
    reader: ReadHalf,
    writer: WriteHalf,
}

impl Connection {
    fn new<S: AsyncRead + AsyncWrite + Send + 'static>(stream: S) -> Connection {
        let (read, write) = tokio::io::split(stream);
        Connection {
            reader: BufReader::new(Box::new(read)),
            writer: Box::new(write),
        }
    }
}

/// Where a client's witness found the coordinator: the client speaks to
/// that coordinator and no other.
#[derive(Clone)]
struct At {
    /// The process that answered the witness's hello.
    pid: u32,
    /// The cluster form's advertised address and its worker; `None` in the
    /// local form, whose socket has one place.
    address: Option<(String, u32)>,
}

/// A valid connection opened before a hostile client's own and kept open
/// through it. A term's end closes every one of its connections (SPEC.md
/// §8.1), so a witness that is answered after the attack shows that the
/// coordinator that was attacked lived through it: a close the client saw
/// was that coordinator's decision, not its death.
struct Witness {
    connection: Connection,
    at: At,
}

impl Witness {
    /// Finds a coordinator: tries until one completes a handshake, for at
    /// most `FIND_PATIENCE` (a failover under way, a socket being replaced).
    async fn find(shared: &Shared, target: &Target) -> Result<Witness, Miss> {
        let started = Instant::now();
        loop {
            match Witness::open(shared, target).await {
                Err(Miss::Unreachable(_)) if started.elapsed() < FIND_PATIENCE => {
                    tokio::time::sleep(FIND_RETRY).await;
                }
                found => return found,
            }
        }
    }

    async fn open(shared: &Shared, target: &Target) -> Result<Witness, Miss> {
        let address = match target {
            Target::Socket => None,
            #[cfg(feature = "cluster")]
            Target::Tls(clients) => Some(
                clients
                    .coordinator()
                    .ok_or_else(|| Miss::Unreachable("no coordinator key".into()))?,
            ),
        };
        let mut connection = connect_once(shared, target, address.as_ref()).await?;
        send(&mut connection, HELLO).await?;
        match read_line(&mut connection, ANSWER_WAIT).await {
            Read::Line(line) => match decode_coordinator_hello(&line) {
                Ok(hello) => Ok(Witness {
                    connection,
                    at: At {
                        pid: hello.pid,
                        address,
                    },
                }),
                Err(e) => Err(Miss::Wrong(format!(
                    "the coordinator's hello does not decode: {e}"
                ))),
            },
            other => Err(Miss::Unreachable(format!(
                "no hello for the witness: {}",
                other.describe()
            ))),
        }
    }

    /// Whether the coordinator still answers a `status` on the witness.
    async fn answered(&mut self) -> bool {
        if send(
            &mut self.connection,
            b"{\"op\":\"status\",\"id\":\"witness\"}\n",
        )
        .await
        .is_err()
        {
            return false;
        }
        matches!(
            response(read_line(&mut self.connection, ANSWER_WAIT).await),
            Ok(Response::Status { id, .. }) if id.as_str() == "witness"
        )
    }
}

/// Connects to the coordinator at `at` (over TLS with the cluster's
/// certificate in the cluster form), trying again for a moment while the
/// socket is being replaced (the local form) or the connection is refused.
async fn connect(shared: &Shared, target: &Target, at: &At) -> Result<Connection, Miss> {
    let started = Instant::now();
    loop {
        match connect_once(shared, target, at.address.as_ref()).await {
            Err(Miss::Unreachable(_)) if started.elapsed() < CONNECT_PATIENCE => {
                tokio::time::sleep(FIND_RETRY).await;
            }
            connected => return connected,
        }
    }
}

#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
async fn connect_once(
    shared: &Shared,
    target: &Target,
    address: Option<&(String, u32)>,
) -> Result<Connection, Miss> {
    match target {
        Target::Socket => {
            let path = shared.paths.flights.join("flight.sock");
            let stream = tokio::time::timeout(Duration::from_secs(2), UnixStream::connect(&path))
                .await
                .map_err(|_| Miss::Unreachable("connect did not finish".into()))?
                .map_err(|e| Miss::Unreachable(format!("connect: {e}")))?;
            Ok(Connection::new(stream))
        }
        #[cfg(feature = "cluster")]
        Target::Tls(clients) => {
            let (address, _) =
                address.ok_or_else(|| Miss::Unreachable("no coordinator key".into()))?;
            match clients.connect_to(address, Identity::Cluster).await {
                Ok((stream, _)) => Ok(Connection::new(stream)),
                Err(error) => Err(Miss::Unreachable(error.why)),
            }
        }
    }
}

/// The coordinator's status, within a bound, and the pid of the process
/// that answered: `None` when nobody answers (no coordinator, a stopped one,
/// one cut off).
#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
async fn status_pid(shared: &Shared, target: &Target, at: &At) -> Option<u32> {
    match target {
        Target::Socket => fresh_status(&shared.paths.flights).await.map(|s| s.pid),
        #[cfg(feature = "cluster")]
        Target::Tls(_) => {
            let asked = async {
                let mut connection = connect_once(shared, target, at.address.as_ref())
                    .await
                    .ok()?;
                send(&mut connection, HELLO).await.ok()?;
                let Read::Line(line) = read_line(&mut connection, ANSWER_WAIT).await else {
                    return None;
                };
                let hello = decode_coordinator_hello(&line).ok()?;
                send(&mut connection, b"{\"op\":\"status\",\"id\":\"s\"}\n")
                    .await
                    .ok()?;
                match response(read_line(&mut connection, ANSWER_WAIT).await) {
                    Ok(Response::Status { .. }) => Some(hello.pid),
                    _ => None,
                }
            };
            tokio::time::timeout(Duration::from_millis(2500), asked)
                .await
                .ok()
                .flatten()
        }
    }
}

/// Connects and completes the handshake (SPEC.md §4.2).
async fn open(shared: &Shared, target: &Target, at: &At) -> Result<Connection, Miss> {
    let mut connection = connect(shared, target, at).await?;
    send(&mut connection, HELLO).await?;
    match read_line(&mut connection, ANSWER_WAIT).await {
        Read::Line(line) => decode_coordinator_hello(&line)
            .map(|_| connection)
            .map_err(|e| Miss::Wrong(format!("the coordinator's hello does not decode: {e}"))),
        other => Err(Miss::Unreachable(format!("no hello: {}", other.describe()))),
    }
}

/// Writes `bytes` and flushes them: over TLS, `write_all` ends once the
/// session has taken the bytes, and the last records stay in its buffer
/// until a flush when the socket was full (the coordinator would then wait
/// for the rest of a line that never comes).
async fn send(connection: &mut Connection, bytes: &[u8]) -> Result<(), Miss> {
    write_flushed(&mut connection.writer, bytes)
        .await
        .map_err(|e| Miss::Unreachable(format!("write: {e}")))
}

async fn write_flushed<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

enum Read {
    Line(Vec<u8>),
    Eof,
    Timeout,
    Error(String),
}

impl Read {
    fn describe(&self) -> String {
        match self {
            Read::Line(line) => format!("a line {:?}", String::from_utf8_lossy(line)),
            Read::Eof => "the end of the stream".into(),
            Read::Timeout => "nothing in time".into(),
            Read::Error(error) => format!("an error ({error})"),
        }
    }
}

/// One line without its newline.
async fn read_line(connection: &mut Connection, wait: Duration) -> Read {
    let mut line = Vec::new();
    match tokio::time::timeout(wait, connection.reader.read_until(b'\n', &mut line)).await {
        Err(_) => Read::Timeout,
        Ok(Err(error)) => Read::Error(error.to_string()),
        Ok(Ok(0)) => Read::Eof,
        Ok(Ok(_)) if line.last() == Some(&b'\n') => {
            line.pop();
            Read::Line(line)
        }
        // Bytes without a newline, then the end: no message (SPEC.md §4.1).
        Ok(Ok(_)) => Read::Eof,
    }
}

/// Reads until the coordinator closes the connection; the lines it sent
/// first, or `None` if it kept the connection open past `wait`. A reset
/// counts as closed.
async fn lines_until_closed(reader: &mut ReadHalf, wait: Duration) -> Option<Vec<Vec<u8>>> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        match tokio::time::timeout_at(deadline, reader.read_until(b'\n', &mut line)).await {
            Err(_) => return None,
            Ok(Err(_)) | Ok(Ok(0)) => return Some(lines),
            Ok(Ok(_)) => lines.push(line),
        }
    }
}

/// Counts bytes until the coordinator closes; `None` if it did not within
/// `wait`.
async fn bytes_until_closed(reader: &mut ReadHalf, wait: Duration) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut total = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, reader.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Err(_)) | Ok(Ok(0)) => return Some(total),
            Ok(Ok(n)) => total += n as u64,
        }
    }
}

fn response(read: Read) -> Result<Response, Miss> {
    match read {
        Read::Line(line) => decode_response(&line)
            .map_err(|e| Miss::Wrong(format!("an answer that does not decode ({e})"))),
        other => Err(Miss::Wrong(format!(
            "expected an answer, got {}",
            other.describe()
        ))),
    }
}

/// Expects the coordinator to close the connection without answering.
async fn closed_silently(connection: &mut Connection, what: &str) -> Attack {
    match lines_until_closed(&mut connection.reader, ANSWER_WAIT).await {
        Some(lines) if lines.is_empty() => Ok(format!("{what}: closed without an answer")),
        Some(lines) => Err(Miss::Wrong(format!(
            "{what}: answered {:?} before closing",
            String::from_utf8_lossy(&lines[0])
        ))),
        None => Err(Miss::Wrong(format!(
            "{what}: the connection stayed open for {ANSWER_WAIT:?}"
        ))),
    }
}

/// How long a `status` takes now: a slow client must not delay anyone
/// else's answers (SPEC.md §11.3).
async fn status_latency(shared: &Shared, target: &Target, at: &At, what: &str) -> String {
    let started = Instant::now();
    let t = now_us();
    let answered = status_pid(shared, target, at).await.is_some();
    let ms = started.elapsed().as_millis() as u64;
    shared.log(Record::Latency {
        t,
        what: what.to_owned(),
        ms,
        disturbed: shared.disturbed(t, now_us()),
    });
    if answered {
        format!("status answered in {ms} ms meanwhile")
    } else {
        format!("status did not answer meanwhile ({ms} ms)")
    }
}

async fn attack(
    shared: &Shared,
    target: &Target,
    at: &At,
    kind: Hostile,
    draw: u64,
    number: u64,
) -> Attack {
    let mut rng = Rng::new(draw);
    match kind {
        Hostile::OversizeLine | Hostile::OversizeHello => {
            let connection = if kind == Hostile::OversizeLine {
                open(shared, target, at).await?
            } else {
                connect(shared, target, at).await?
            };
            let Connection { mut reader, writer } = connection;
            // The writer stops at the first refused write and hands its half
            // back, so that the stream is not ended by us.
            let total = MAX_FRAME_BYTES + 4 * CHUNK;
            let writing = tokio::spawn(async move {
                let mut writer = writer;
                let chunk = vec![b'a'; CHUNK];
                let mut written = 0;
                while written < total {
                    if write_flushed(&mut writer, &chunk).await.is_err() {
                        break;
                    }
                    written += CHUNK;
                }
                (writer, written)
            });
            let closed = bytes_until_closed(&mut reader, Duration::from_secs(20)).await;
            let (_writer, written) = writing.await.map_err(|e| Miss::Wrong(e.to_string()))?;
            match closed {
                Some(_) => Ok(format!(
                    "closed; {written} bytes of one line were sent (limit {MAX_FRAME_BYTES})"
                )),
                None => Err(Miss::Wrong(format!(
                    "a line of {written} bytes without a newline, over the limit of {MAX_FRAME_BYTES}, did not close the connection"
                ))),
            }
        }
        Hostile::NoNewline => {
            let mut connection = open(shared, target, at).await?;
            send(&mut connection, b"{\"op\":\"status\",\"id\":\"nl\"}").await?;
            let early = read_line(&mut connection, Duration::from_millis(300)).await;
            if let Read::Line(line) = early {
                return Err(Miss::Wrong(format!(
                    "answered a request without its newline: {:?}",
                    String::from_utf8_lossy(&line)
                )));
            }
            let _ = connection.writer.shutdown().await;
            closed_silently(&mut connection, "a request without a newline, then the end").await
        }
        Hostile::InvalidUtf8 => {
            let mut connection = open(shared, target, at).await?;
            send(
                &mut connection,
                b"{\"op\":\"run\",\"id\":\"1\",\"key\":\"\xff\xfe\xfd\"}\n",
            )
            .await?;
            closed_silently(&mut connection, "a run whose key is not UTF-8").await
        }
        Hostile::DeepNesting | Hostile::DeepHello => {
            let depth = rng.range(1_000, 400_000) as usize;
            let mut line = Vec::with_capacity(depth * 2 + 64);
            if kind == Hostile::DeepNesting {
                line.extend_from_slice(b"{\"op\":\"status\",\"id\":\"deep\",\"x\":");
            }
            line.extend(std::iter::repeat_n(b'[', depth));
            line.extend(std::iter::repeat_n(b']', depth));
            if kind == Hostile::DeepNesting {
                line.push(b'}');
            }
            line.push(b'\n');
            let mut connection = if kind == Hostile::DeepNesting {
                open(shared, target, at).await?
            } else {
                connect(shared, target, at).await?
            };
            send(&mut connection, &line).await?;
            let what = format!("{depth} levels of nesting");
            if kind == Hostile::DeepNesting {
                closed_silently(&mut connection, &what).await
            } else {
                refused_hello(&mut connection, &what, false).await
            }
        }
        Hostile::NoCertificate
        | Hostile::OtherCaCertificate
        | Hostile::WrongKey
        | Hostile::RevokedCertificate
        | Hostile::ExpiredCertificate => refused_identity(target, at, kind).await,
        Hostile::PlainTcp | Hostile::SilentTcp => not_tls(target, at, kind).await,
        Hostile::Flood => flood(shared, target, at, &mut rng).await,
        Hostile::NoRead => no_read(shared, target, at, &mut rng).await,
        Hostile::NoReadJoins => {
            let mut connection = open(shared, target, at).await?;
            let key = format!("k{}", rng.below(shared.config.keys as u64));
            let runs = rng.range(5_000, 20_000);
            let mut batch = Vec::new();
            for i in 0..runs {
                batch.extend_from_slice(
                    format!("{{\"op\":\"run\",\"id\":\"j{i}\",\"key\":\"{key}\"}}\n").as_bytes(),
                );
            }
            send(&mut connection, &batch).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let latency = status_latency(
                shared,
                target,
                at,
                "status while a client with joins never reads",
            )
            .await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            // Before leaving, learn whether the first run led (its token is
            // then one minted to us).
            let mut led = None;
            if let Read::Line(line) = read_line(&mut connection, Duration::from_millis(200)).await
                && let Ok(Response::Lead { token, .. }) = decode_response(&line)
            {
                led = Some(token.get());
                shared.log(Record::RawLead {
                    t: now_us(),
                    key: key.clone(),
                    token: token.get(),
                });
            }
            Ok(format!(
                "{runs} runs of {key} never read for 2 s (led: {led:?}); {latency}"
            ))
        }
        Hostile::UnknownOp => {
            let mut connection = open(shared, target, at).await?;
            send(
                &mut connection,
                b"{\"op\":\"frobnicate\",\"id\":\"u1\"}\n{\"op\":\"status\",\"id\":\"s1\"}\n",
            )
            .await?;
            let first = response(read_line(&mut connection, ANSWER_WAIT).await)?;
            let second = response(read_line(&mut connection, ANSWER_WAIT).await)?;
            match (&first, &second) {
                (Response::Unsupported { id }, Response::Status { id: status, .. })
                    if id.as_str() == "u1" && status.as_str() == "s1" =>
                {
                    Ok("unsupported, and the connection still answers".into())
                }
                _ => Err(Miss::Wrong(format!(
                    "an unknown op was answered {first:?}, then {second:?}"
                ))),
            }
        }
        Hostile::WrongProtocol => {
            let mut connection = connect(shared, target, at).await?;
            send(&mut connection, b"{\"protocol\":\"other\",\"version\":1}\n").await?;
            refused_hello(&mut connection, "a hello of another protocol", false).await
        }
        Hostile::WrongVersion => {
            let mut connection = connect(shared, target, at).await?;
            send(
                &mut connection,
                b"{\"protocol\":\"single-flight\",\"version\":2}\n",
            )
            .await?;
            refused_hello(&mut connection, "a hello of version 2", true).await
        }
        Hostile::NoHello => {
            let mut connection = connect(shared, target, at).await?;
            let started = Instant::now();
            match lines_until_closed(
                &mut connection.reader,
                single_flight::_internal::shell::HANDSHAKE_TIMEOUT + ANSWER_WAIT,
            )
            .await
            {
                Some(lines) if lines.is_empty() => Ok(format!(
                    "closed after {} ms of silence",
                    started.elapsed().as_millis()
                )),
                Some(_) => Err(Miss::Wrong(
                    "sent something to a client that said nothing".into(),
                )),
                None => Err(Miss::Wrong(format!(
                    "a client that sent no hello was kept for {:?}",
                    started.elapsed()
                ))),
            }
        }
        Hostile::GarbageHello => {
            let mut connection = connect(shared, target, at).await?;
            send(&mut connection, b"hello there\n").await?;
            refused_hello(&mut connection, "a first line that is not JSON", false).await
        }
        Hostile::DropMidFlight => {
            let mut connection = open(shared, target, at).await?;
            let key = format!("k{}", rng.below(shared.config.keys as u64));
            send(
                &mut connection,
                format!("{{\"op\":\"run\",\"id\":\"1\",\"key\":\"{key}\"}}\n").as_bytes(),
            )
            .await?;
            let wait = ANSWER_WAIT + Duration::from_millis(shared.config.grace_ms);
            let answer = response(read_line(&mut connection, wait).await)?;
            let role = match answer {
                Response::Lead { token, .. } => {
                    shared.log(Record::RawLead {
                        t: now_us(),
                        key: key.clone(),
                        token: token.get(),
                    });
                    format!("led {key} with token {token}")
                }
                Response::Joined { flight, .. } => format!("joined {key}'s flight {flight}"),
                other => return Err(Miss::Wrong(format!("a run was answered {other:?}"))),
            };
            tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
            Ok(format!("{role}, then dropped the connection"))
        }
        Hostile::LandWithoutLead => {
            let mut connection = open(shared, target, at).await?;
            send(
                &mut connection,
                b"{\"op\":\"land\",\"id\":\"x\",\"outcome\":{\"value\":\"1\"}}\n{\"op\":\"cancel\",\"id\":\"nobody\"}\n{\"op\":\"status\",\"id\":\"s\"}\n",
            )
            .await?;
            let first = response(read_line(&mut connection, ANSWER_WAIT).await)?;
            let second = response(read_line(&mut connection, ANSWER_WAIT).await)?;
            match (&first, &second) {
                (Response::Rejected { id }, Response::Status { id: status, .. })
                    if id.as_str() == "x" && status.as_str() == "s" =>
                {
                    Ok("land rejected, cancel ignored".into())
                }
                _ => Err(Miss::Wrong(format!(
                    "a land without a lead and a cancel of nobody were answered {first:?}, then {second:?}"
                ))),
            }
        }
        Hostile::DuplicateId => {
            let mut connection = open(shared, target, at).await?;
            let key = format!("hostile-dup-{number}");
            send(
                &mut connection,
                format!("{{\"op\":\"run\",\"id\":\"d\",\"key\":\"{key}\"}}\n").as_bytes(),
            )
            .await?;
            let wait = ANSWER_WAIT + Duration::from_millis(shared.config.grace_ms);
            let token = match response(read_line(&mut connection, wait).await)? {
                Response::Lead { id, token } if id.as_str() == "d" => token,
                other => {
                    return Err(Miss::Wrong(format!(
                        "the run of a fresh key was answered {other:?}"
                    )));
                }
            };
            shared.log(Record::RawLead {
                t: now_us(),
                key: key.clone(),
                token: token.get(),
            });
            send(
                &mut connection,
                format!("{{\"op\":\"run\",\"id\":\"d\",\"key\":\"{key}\"}}\n{{\"op\":\"status\",\"id\":\"s\"}}\n").as_bytes(),
            )
            .await?;
            match response(read_line(&mut connection, ANSWER_WAIT).await)? {
                Response::Status { id, .. } if id.as_str() == "s" => {}
                other => {
                    return Err(Miss::Wrong(format!(
                        "a run with the id of an open party was answered {other:?}"
                    )));
                }
            }
            send(
                &mut connection,
                b"{\"op\":\"land\",\"id\":\"d\",\"outcome\":{\"value\":\"\\\"dup\\\"\"}}\n",
            )
            .await?;
            match response(read_line(&mut connection, ANSWER_WAIT).await)? {
                Response::Ack { id } if id.as_str() == "d" => {
                    Ok(format!("duplicate run ignored; the lead of {token} landed"))
                }
                other => Err(Miss::Wrong(format!(
                    "the land after a duplicate run was answered {other:?}"
                ))),
            }
        }
    }
}

/// A refused first line: the connection closes, after at most the
/// coordinator's hello (which it sends to a client of another version so
/// that it learns ours, SPEC.md §4.2). `hello_required` for a version
/// mismatch.
async fn refused_hello(connection: &mut Connection, what: &str, hello_required: bool) -> Attack {
    let Some(lines) = lines_until_closed(&mut connection.reader, ANSWER_WAIT).await else {
        return Err(Miss::Wrong(format!(
            "{what}: the connection stayed open for {ANSWER_WAIT:?}"
        )));
    };
    let hellos = lines
        .iter()
        .filter(|line| decode_coordinator_hello(line.trim_ascii_end()).is_ok())
        .count();
    match (lines.len(), hellos) {
        (0, 0) if !hello_required => Ok(format!("{what}: closed without a word")),
        (1, 1) => Ok(format!("{what}: the coordinator's hello, then closed")),
        _ => Err(Miss::Wrong(format!(
            "{what}: {} lines before the close ({hellos} hellos), expected {}",
            lines.len(),
            if hello_required {
                "its hello"
            } else {
                "at most its hello"
            }
        ))),
    }
}

/// Many connections at once: beyond `MAX_CONNECTIONS` they are closed at
/// accept; when they go, the coordinator must give back their descriptors.
async fn flood(shared: &Shared, target: &Target, at: &At, rng: &mut Rng) -> Attack {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024);
    // Keep our own descriptors for the rest of the run.
    let count = rng.range(200, 4_500).min(limit.saturating_sub(300)) as usize;
    let fds_before = descriptors_of(at.pid);
    // Connections past MAX_CONNECTIONS are closed at accept, as specified:
    // other clients' surprises meanwhile prove nothing.
    let t = now_us();
    let disturbance = shared.disturb(t, u64::MAX);
    let mut streams = Vec::with_capacity(count);
    let mut refused = 0;
    let mut refused_in_a_row = 0;
    for i in 0..count {
        match flood_connection(shared, target, at, i).await {
            Some(stream) => {
                streams.push(stream);
                refused_in_a_row = 0;
            }
            None => {
                refused += 1;
                refused_in_a_row += 1;
            }
        }
        // Nobody listens (a coordinator gone, its key not yet): a flood of
        // nothing proves nothing.
        if refused_in_a_row == FLOOD_GIVE_UP {
            shared.end_disturbance(disturbance, now_us());
            return Err(Miss::Unreachable(format!(
                "{refused} connections refused, {FLOOD_GIVE_UP} in a row; {} opened",
                streams.len()
            )));
        }
    }
    let latency = status_latency(shared, target, at, "status during a flood of connections").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opened = streams.len();
    drop(streams);
    // The coordinator learns of each close from its reader, within moments.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answered = status_pid(shared, target, at).await;
    let end = now_us();
    shared.end_disturbance(disturbance, end);
    let Some(pid) = answered else {
        return Err(Miss::Unreachable(format!(
            "no status after a flood of {opened} connections ({refused} refused)"
        )));
    };
    let fds_after = descriptors_of(pid);
    let detail = format!(
        "{opened} connections ({refused} refused); {latency}; coordinator descriptors {fds_before} → {fds_after}"
    );
    match fds_before {
        before if at.pid == pid && fds_after > before + 64 => {
            let what = format!("descriptors not given back after a flood: {detail}");
            // The flood's own disturbance is for the other clients: its
            // verdict is inconclusive only when another fault coincided.
            if shared.disturbed_apart(t, end, disturbance) {
                Err(Miss::Wrong(what))
            } else {
                Err(Miss::Sure(what))
            }
        }
        _ => Ok(detail),
    }
}

/// One connection of a flood, held until the flood ends.
#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
async fn flood_connection(
    shared: &Shared,
    target: &Target,
    at: &At,
    i: usize,
) -> Option<Box<dyn Send>> {
    match target {
        Target::Socket => {
            let path = shared.paths.flights.join("flight.sock");
            let connecting = UnixStream::connect(&path);
            let mut stream = tokio::time::timeout(FLOOD_CONNECT, connecting)
                .await
                .ok()?
                .ok()?;
            if i.is_multiple_of(2) {
                let _ = write_flushed(&mut stream, HELLO).await;
            }
            Some(Box::new(stream))
        }
        #[cfg(feature = "cluster")]
        Target::Tls(clients) => {
            let (address, _) = at.address.as_ref()?;
            if i.is_multiple_of(FLOOD_TLS_EVERY) {
                let (mut stream, _) = clients.connect_to(address, Identity::Cluster).await.ok()?;
                let _ = write_flushed(&mut stream, HELLO).await;
                Some(Box::new(stream))
            } else {
                let stream = clients.tcp_to(address, FLOOD_CONNECT).await.ok()?;
                Some(Box::new(stream))
            }
        }
    }
}

/// Tens of thousands of unknown-op requests with long ids, never reading
/// the answers: past `MAX_QUEUED_BYTES` of queued answers the coordinator
/// must close the connection (SPEC.md §11.3), and meanwhile answer others.
async fn no_read(shared: &Shared, target: &Target, at: &At, rng: &mut Rng) -> Attack {
    let connection = open(shared, target, at).await?;
    let Connection { mut reader, writer } = connection;
    let requests = rng.range(90_000, 120_000);
    let pad = "p".repeat(110);
    let mut batch = Vec::with_capacity(requests as usize * 150);
    for i in 0..requests {
        batch.extend_from_slice(
            format!("{{\"op\":\"x-never-read\",\"id\":\"{pad}{i:08}\"}}\n").as_bytes(),
        );
    }
    let sent_bytes = batch.len();
    let writing = tokio::spawn(async move {
        let mut writer = writer;
        let result = write_flushed(&mut writer, &batch).await;
        (writer, result.is_ok())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let latency = status_latency(shared, target, at, "status while a client never reads").await;
    // The coordinator reads until it closes the connection, so our writes
    // end (sent, or refused by the close) within moments.
    let abort = writing.abort_handle();
    let (_writer, all_sent) = match tokio::time::timeout(WRITE_PATIENCE, writing).await {
        Ok(Ok(done)) => done,
        _ => {
            // Our own half goes, so that neither side keeps the socket.
            abort.abort();
            return Err(Miss::Wrong(format!(
                "after {requests} requests whose answers were never read, the coordinator stopped reading and did not close the connection: our writes were blocked for {WRITE_PATIENCE:?}; {latency}"
            )));
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = bytes_until_closed(&mut reader, Duration::from_secs(10)).await;
    // Each answer is an `unsupported` line with the request's id.
    let answer_bytes =
        format!("{{\"op\":\"unsupported\",\"id\":\"{pad}00000000\"}}\n").len() as u64;
    let all_answers = requests * answer_bytes;
    match received {
        Some(bytes) if bytes < all_answers => Ok(format!(
            "{requests} requests ({sent_bytes} bytes, all sent: {all_sent}); closed after {bytes} of {all_answers} bytes of answers; {latency}"
        )),
        Some(bytes) => Err(Miss::Wrong(format!(
            "all {bytes} bytes of answers were queued for a client that did not read; {latency}"
        ))),
        None => Err(Miss::Wrong(format!(
            "a client that never read {all_answers} bytes of answers was never closed; {latency}"
        ))),
    }
}

/// A client that must be refused at the TLS handshake (SPEC.md §11.4,
/// §14.5): no certificate, one of another CA, or the cluster's certificate
/// with another key. The coordinator must close the connection without a
/// byte of the protocol, log the refusal naming the client's address, and
/// go on answering everyone else.
#[cfg(feature = "cluster")]
async fn refused_identity(target: &Target, at: &At, kind: Hostile) -> Attack {
    let Target::Tls(clients) = target else {
        return Err(Miss::Unreachable(
            "a TLS client needs the cluster form".into(),
        ));
    };
    // What the coordinator's log must say of the refusal, beyond naming the
    // client: for a certificate that verifies but for its revocation or
    // its dates, the reason itself (SPEC.md §14.5).
    let (identity, what, reason) = match kind {
        Hostile::NoCertificate => (Identity::Anonymous, "a client without a certificate", ""),
        Hostile::OtherCaCertificate => (Identity::OtherCa, "a client of another CA", ""),
        Hostile::RevokedCertificate => (
            Identity::Revoked,
            "a client whose certificate is revoked",
            "revoked",
        ),
        Hostile::ExpiredCertificate => (
            Identity::Expired,
            "a client whose certificate expired",
            "expired",
        ),
        _ => (
            Identity::WrongKey,
            "the cluster's certificate with another key",
            "",
        ),
    };
    let (address, worker) = at
        .address
        .clone()
        .ok_or_else(|| Miss::Unreachable("no coordinator key".into()))?;
    let log = clients.log_of(worker);
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
    let (closed, local) = match clients.connect_to(&address, identity).await {
        Ok((mut stream, local)) => {
            // TLS 1.3: the client's handshake ends before the coordinator
            // has checked its certificate; the refusal comes on the first
            // read (SPEC.md §11.4).
            let _ = write_flushed(&mut stream, HELLO).await;
            let mut received = Vec::new();
            let read = tokio::time::timeout(ANSWER_WAIT, stream.read_to_end(&mut received));
            match read.await {
                Err(_) => {
                    return Err(Miss::Wrong(format!(
                        "{what}: the connection stayed open for {ANSWER_WAIT:?}"
                    )));
                }
                Ok(_) if !received.is_empty() => {
                    return Err(Miss::Wrong(format!(
                        "{what}: the coordinator sent {:?}",
                        String::from_utf8_lossy(&received)
                    )));
                }
                Ok(Ok(_)) => ("closed without an alert".to_owned(), local),
                Ok(Err(error)) => (format!("closed: {error}"), local),
            }
        }
        Err(error) if error.reached => (error.why, error.local),
        Err(error) => return Err(Miss::Unreachable(error.why)),
    };
    let logged = refusal_logged(&log, offset, local).await.ok_or_else(|| {
        Miss::Wrong(format!(
            "{what}: {closed}, but the coordinator (worker {worker}) logged no refusal naming {local:?}"
        ))
    })?;
    if !logged.contains(reason) {
        return Err(Miss::Wrong(format!(
            "{what}: {closed}; the coordinator logged {logged:?}, which does not say {reason:?}"
        )));
    }
    // That the same coordinator then answers a valid client is the
    // witness's to show (`judge`).
    Ok(format!(
        "{what}: {closed}; the coordinator logged {logged:?}"
    ))
}

/// A client that does not speak TLS to a TLS coordinator: the protocol's
/// hello in plain text (`plain_tcp`), or nothing at all (`silent_tcp`,
/// closed after `TLS_HANDSHAKE_TIMEOUT`, SPEC.md §11.4). Either way no
/// byte of the protocol may come back, and the refusal is logged.
#[cfg(feature = "cluster")]
async fn not_tls(target: &Target, at: &At, kind: Hostile) -> Attack {
    use single_flight::_internal::transport::tcp::TLS_HANDSHAKE_TIMEOUT;
    let Target::Tls(clients) = target else {
        return Err(Miss::Unreachable(
            "a TCP client needs the cluster form".into(),
        ));
    };
    let (address, worker) = at
        .address
        .clone()
        .ok_or_else(|| Miss::Unreachable("no coordinator key".into()))?;
    let log = clients.log_of(worker);
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
    let mut stream = clients
        .tcp_to(&address, Duration::from_secs(2))
        .await
        .map_err(Miss::Unreachable)?;
    let local = stream.local_addr().ok();
    let what = if kind == Hostile::PlainTcp {
        let _ = write_flushed(&mut stream, HELLO).await;
        "the protocol's hello without TLS"
    } else {
        "a TCP client that never speaks TLS"
    };
    let started = Instant::now();
    let mut received = Vec::new();
    let wait = TLS_HANDSHAKE_TIMEOUT + ANSWER_WAIT;
    if tokio::time::timeout(wait, stream.read_to_end(&mut received))
        .await
        .is_err()
    {
        return Err(Miss::Wrong(format!(
            "{what}: the connection stayed open for {wait:?}"
        )));
    }
    let elapsed = started.elapsed().as_millis();
    // A TLS alert may come back; the coordinator's hello never may.
    if received.windows(13).any(|w| w == b"single-flight") {
        return Err(Miss::Wrong(format!(
            "{what}: the coordinator answered {:?}",
            String::from_utf8_lossy(&received)
        )));
    }
    let logged = refusal_logged(&log, offset, local).await.ok_or_else(|| {
        Miss::Wrong(format!(
            "{what}: closed after {elapsed} ms, but the coordinator (worker {worker}) logged no refusal naming {local:?}"
        ))
    })?;
    Ok(format!(
        "{what}: closed after {elapsed} ms ({} bytes back); the coordinator logged {logged:?}",
        received.len()
    ))
}

#[cfg(not(feature = "cluster"))]
async fn refused_identity(_: &Target, _: &At, _: Hostile) -> Attack {
    Err(Miss::Unreachable(
        "a TLS client needs the cluster form".into(),
    ))
}

#[cfg(not(feature = "cluster"))]
async fn not_tls(_: &Target, _: &At, _: Hostile) -> Attack {
    Err(Miss::Unreachable(
        "a TCP client needs the cluster form".into(),
    ))
}

/// How long the coordinator's log may take to show a refusal: tracing
/// writes it at once, but the coordinator's task may wait for a core.
#[cfg(feature = "cluster")]
const LOG_PATIENCE: Duration = Duration::from_secs(3);

/// The coordinator's log line, written after `offset` of its log, that
/// refuses the connection from `local` (SPEC.md §14.5: it names the client's
/// address and the reason), trimmed to its message.
#[cfg(feature = "cluster")]
async fn refusal_logged(
    log: &std::path::Path,
    offset: u64,
    local: Option<std::net::SocketAddr>,
) -> Option<String> {
    use std::io::{Read as _, Seek as _};
    let needle = format!("the client at {}", local?);
    let started = Instant::now();
    loop {
        let mut text = Vec::new();
        if let Ok(mut file) = std::fs::File::open(log)
            && file.seek(std::io::SeekFrom::Start(offset)).is_ok()
        {
            let _ = file.read_to_end(&mut text);
        }
        let text = String::from_utf8_lossy(&text);
        let found = text.lines().find(|line| {
            line.contains("refused a connection")
                && line.match_indices(&needle).any(|(at, _)| {
                    // The port ends there, not in a longer one.
                    !line[at + needle.len()..].starts_with(|c: char| c.is_ascii_digit())
                })
        });
        if let Some(line) = found {
            let message = line.find("error=").map_or(line, |at| &line[at + 6..]);
            return Some(message.to_owned());
        }
        if started.elapsed() > LOG_PATIENCE {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn descriptors_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coordinator lived, and nothing came near it.
    const CALM: Observed = Observed {
        lived: true,
        disturbed: false,
        stopped: false,
        cut: false,
    };

    /// Faults elsewhere (a worker killed, a socket replaced, etcd's leader
    /// stopped) while the attacked coordinator lived, running and reachable.
    const BUSY: Observed = Observed {
        disturbed: true,
        ..CALM
    };

    /// The attacked coordinator died during the attack.
    const DIED: Observed = Observed {
        lived: false,
        disturbed: true,
        ..CALM
    };

    fn closed() -> Attack {
        Ok("closed without an answer".into())
    }

    fn kept_open() -> Attack {
        Err(Miss::Wrong("the connection stayed open for 5s".into()))
    }

    #[test]
    fn s11_3_a_close_while_the_witness_lived_is_as_specified_whatever_else_went_on() {
        assert_eq!(decide(closed(), Proof::Close, CALM).0, Verdict::AsSpecified);
        assert_eq!(decide(closed(), Proof::Close, BUSY).0, Verdict::AsSpecified);
        // A stop delays a close; it never makes one.
        let stopped = Observed {
            stopped: true,
            ..BUSY
        };
        assert_eq!(
            decide(closed(), Proof::Close, stopped).0,
            Verdict::AsSpecified
        );
    }

    #[test]
    fn s11_3_a_close_proves_nothing_when_the_coordinator_died_or_its_link_was_cut() {
        assert_eq!(
            decide(closed(), Proof::Close, DIED).0,
            Verdict::Inconclusive
        );
        let cut = Observed { cut: true, ..BUSY };
        assert_eq!(decide(closed(), Proof::Close, cut).0, Verdict::Inconclusive);
    }

    #[test]
    fn s14_5_a_logged_refusal_counts_over_a_cut_link_once_the_coordinator_answers_after() {
        let refused = || Ok("closed: UnknownCA; the coordinator logged a refusal".into());
        let cut = Observed { cut: true, ..BUSY };
        assert_eq!(
            decide(refused(), Proof::Refusal, cut).0,
            Verdict::AsSpecified
        );
        assert_eq!(
            decide(refused(), Proof::Refusal, DIED).0,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn s11_3_a_coordinator_that_stops_answering_with_no_fault_near_is_a_violation() {
        let silent = Observed {
            lived: false,
            ..CALM
        };
        assert_eq!(decide(closed(), Proof::Close, silent).0, Verdict::Violation);
        let refused = Ok("the coordinator logged a refusal".into());
        assert_eq!(
            decide(refused, Proof::Refusal, silent).0,
            Verdict::Violation
        );
    }

    #[test]
    fn s11_3_a_connection_kept_open_by_a_live_running_coordinator_is_a_violation_under_faults() {
        assert_eq!(
            decide(kept_open(), Proof::Close, CALM).0,
            Verdict::Violation
        );
        assert_eq!(
            decide(kept_open(), Proof::Close, BUSY).0,
            Verdict::Violation
        );
        let stopped = Observed {
            stopped: true,
            ..BUSY
        };
        assert_eq!(
            decide(kept_open(), Proof::Close, stopped).0,
            Verdict::Inconclusive
        );
        let cut = Observed { cut: true, ..BUSY };
        assert_eq!(
            decide(kept_open(), Proof::Close, cut).0,
            Verdict::Inconclusive
        );
        assert_eq!(
            decide(kept_open(), Proof::Close, DIED).0,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn s11_3_answers_are_judged_by_themselves() {
        let answered = || Ok("unsupported, and the connection still answers".into());
        assert_eq!(
            decide(answered(), Proof::Answers, DIED).0,
            Verdict::AsSpecified
        );
        let wrong = || Err(Miss::Wrong("an unknown op was answered Lead".into()));
        assert_eq!(decide(wrong(), Proof::Answers, BUSY).0, Verdict::Violation);
        let unreachable = || Err(Miss::Unreachable("connect: refused".into()));
        assert_eq!(
            decide(unreachable(), Proof::Answers, CALM).0,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn s11_3_a_flood_that_kept_descriptors_is_a_violation_while_its_coordinator_lived() {
        let kept = || Err(Miss::Sure("descriptors not given back".into()));
        let stopped = Observed {
            stopped: true,
            ..BUSY
        };
        assert_eq!(
            decide(kept(), Proof::Answers, stopped).0,
            Verdict::Violation
        );
        assert_eq!(
            decide(kept(), Proof::Answers, DIED).0,
            Verdict::Inconclusive
        );
    }
}
