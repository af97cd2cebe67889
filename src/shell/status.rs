//! One look at the coordinator (`single-flight status`, SPEC.md §3.5).

use std::path::Path;

use tokio::io::AsyncWriteExt;

use super::lines::Lines;
use super::options::HANDSHAKE_TIMEOUT;
use crate::protocol::{
    ClientHello, CoordinatorStats, DecodeError, Epoch, FlightStatus, HandshakeError, Response,
    decode_coordinator_hello, decode_response,
};
use crate::transport::unix::{InDirectory, UnixTransport};
use crate::transport::{ConnectError, Connection, PeerRefused, Transport};

/// What the coordinator of a directory reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The current term.
    pub epoch: Epoch,
    /// The coordinator's process id.
    pub pid: u32,
    /// The coordinator's host name (SPEC.md §4.2); `None` from a
    /// coordinator that does not say.
    pub host: Option<String>,
    /// The address the coordinator advertises, in cluster mode.
    pub address: Option<String>,
    /// The flights in progress, in key order: all of them, or as many as
    /// fit in one answer (SPEC.md §3.5).
    pub flights: Vec<FlightStatus>,
    /// How many flights in progress the answer left out, after the last one
    /// of `flights`, to fit in one line (SPEC.md §3.5); 0 when it lists them
    /// all.
    pub omitted: u64,
    /// While the term's grace window is open (SPEC.md §8.4), how many runs
    /// wait for it to end; `None` once it has ended (or from a coordinator
    /// too old to say).
    pub waiting_in_grace: Option<u64>,
    /// The coordinator's counters of its term (SPEC.md §8.11); `None` from a
    /// coordinator too old to count.
    pub stats: Option<CoordinatorStats>,
}

/// Why the status could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    #[error("no coordinator answers in {directory}: no process uses it now ({error})")]
    NoCoordinator {
        directory: String,
        error: std::io::Error,
    },
    #[error("the socket in {directory} is served by user id {uid}, not by you; refusing it")]
    OtherUser { directory: String, uid: u32 },
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error(
        "the coordinator runs an older single-flight that does not report its flights (it answered `unsupported`)"
    )]
    Unsupported,
    #[error("the coordinator's answer is not a status: {0}")]
    Protocol(#[from] DecodeError),
    #[error("the coordinator did not answer within {HANDSHAKE_TIMEOUT:?}; is its process stopped?")]
    Timeout,
    #[error("talking to the coordinator: {0}")]
    Io(#[from] std::io::Error),
    /// Cluster mode could not start: etcd, certificates (SPEC.md §14).
    #[cfg(feature = "cluster")]
    #[error(transparent)]
    Cluster(Box<super::ClusterError>),
}

/// Asks the coordinator of `directory` for its term and flights.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let dir = std::env::temp_dir().join("single-flight-doc-status-nobody");
/// match single_flight::status(&dir).await {
///     Ok(status) => println!("term {} served by pid {}", status.epoch, status.pid),
///     Err(error) => println!("{error}"), // no coordinator answers in …
/// }
/// # }
/// ```
pub async fn status(directory: &Path) -> Result<Status, StatusError> {
    let name = directory.display().to_string();
    let no_coordinator = |error| StatusError::NoCoordinator {
        directory: name.clone(),
        error,
    };
    // A directory too long for a socket address is reached through a
    // descriptor on it (§11.1); when it does not exist, nobody coordinates
    // there, exactly as when its socket is missing.
    let transport = UnixTransport::new(directory).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => no_coordinator(error),
        _ => StatusError::Io(error),
    })?;
    let Connection {
        reader: read,
        writer: write,
    } = transport
        .connect(&InDirectory)
        .await
        .map_err(|error| match error {
            ConnectError::Unreachable(error) => no_coordinator(error),
            ConnectError::Refused(PeerRefused::OtherUser { uid }) => StatusError::OtherUser {
                directory: name.clone(),
                uid,
            },
            ConnectError::Refused(PeerRefused::Unknown(error)) => StatusError::Io(error),
            // The Unix transport refuses no other way; the rest are other
            // transports' errors.
            error => StatusError::Io(std::io::Error::other(error)),
        })?;
    exchange(read, write, None).await
}

/// Asks the coordinator at the end of a connection for its status.
async fn exchange<R, W>(
    read: R,
    mut write: W,
    address: Option<String>,
) -> Result<Status, StatusError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut request = serde_json::to_vec(&ClientHello::current()).expect("a hello serializes");
    request.extend_from_slice(b"\n{\"op\":\"status\",\"id\":\"status\"}\n");
    write.write_all(&request).await?;
    write.flush().await?;
    let mut lines = Lines::new(read);
    let exchange = async {
        let hello = decode_coordinator_hello(&lines.next().await.map_err(line_error)?)?;
        let answer = decode_response(&lines.next().await.map_err(line_error)?)?;
        Ok::<_, StatusError>((hello, answer))
    };
    let (hello, answer) = tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
        .await
        .map_err(|_| StatusError::Timeout)??;
    let epoch = hello
        .epoch
        .parse()
        .ok()
        .and_then(Epoch::new)
        .expect("a checked hello has a valid epoch");
    match answer {
        Response::Status {
            flights,
            waiting,
            omitted,
            stats,
            ..
        } => Ok(Status {
            epoch,
            pid: hello.pid,
            host: hello.host,
            address,
            flights,
            // §3.5: a missing count is none left out.
            omitted: omitted.unwrap_or(0),
            waiting_in_grace: waiting,
            stats: stats.map(|stats| *stats),
        }),
        Response::Unsupported { .. } => Err(StatusError::Unsupported),
        other => Err(StatusError::Protocol(DecodeError::UnknownResponse {
            op: format!("{other:?}"),
        })),
    }
}

/// Asks the coordinator of a cluster for its term and flights (SPEC.md
/// §14.3); its [`Status::address`] is the one it advertises.
#[cfg(feature = "cluster")]
pub async fn cluster_status(cluster: &super::Cluster) -> Result<Status, StatusError> {
    use crate::election::Election;
    let (mut election, transport) = cluster
        .connect()
        .await
        .map_err(|error| StatusError::Cluster(Box::new(error)))?;
    let address = election
        .coordinator()
        .await
        .map_err(|error| StatusError::Cluster(Box::new(error.into())))?
        .ok_or_else(|| StatusError::NoCoordinator {
            directory: format!("the cluster at {}", election.coordinator_key()),
            error: std::io::Error::new(std::io::ErrorKind::NotFound, "no coordinator key"),
        })?;
    let Connection { reader, writer } =
        transport
            .connect(&address)
            .await
            .map_err(|error| match error {
                ConnectError::Unreachable(error) => StatusError::NoCoordinator {
                    directory: format!("the cluster's coordinator at {address}"),
                    error,
                },
                other => StatusError::Io(std::io::Error::other(other)),
            })?;
    exchange(reader, writer, Some(address)).await
}

fn line_error(error: super::lines::LineError) -> StatusError {
    StatusError::Io(std::io::Error::other(error.to_string()))
}
