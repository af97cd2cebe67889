//! One look at the coordinator (`single-flight status`, SPEC.md §3.5).

use std::io;

use tokio::io::AsyncWriteExt;

use super::lines::Lines;
use super::options::HANDSHAKE_TIMEOUT;
use crate::backend::{Backend, BackendError, Place, Visit};
use crate::protocol::{
    ClientHello, CoordinatorStats, DecodeError, Epoch, FlightStatus, GroupStatus, HandshakeError,
    HostId, HostsStatus, RelayStatus, Response, decode_coordinator_hello, decode_response,
};
use crate::transport::{ConnectError, Connection, PeerRefused, Transport};

/// What the coordinator of a directory or cluster reports. Asked through a
/// host coordinator (SPEC.md §18), the coordinator's fields are the
/// cluster's coordinator's, which decides the flights, and
/// [`Status::relay`] describes the host coordinator (§3.5).
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
    /// The coordinator's connections by host: how many are direct, and the
    /// hosts that relay to it (SPEC.md §3.5, §18.2); `None` from a
    /// coordinator that keeps no relay windows or is too old to say.
    pub hosts: Option<HostsStatus>,
    /// The host coordinator that was asked, when the status was asked
    /// through one (SPEC.md §3.5, §18.3).
    pub relay: Option<HostCoordinator>,
}

/// A host coordinator through which a status was asked (SPEC.md §3.5,
/// §18.3): its own term, process and host, and what it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCoordinator {
    /// The host term.
    pub epoch: Epoch,
    /// Its process id.
    pub pid: u32,
    /// Its host name (SPEC.md §4.2), when its hello gave one.
    pub host: Option<String>,
    /// The host id it relays under (SPEC.md §18.6).
    pub id: Option<HostId>,
    /// The host's connections open on the host directory's socket.
    pub connections: u64,
    /// Its groups in key order (SPEC.md §18.3): all of them, or as many as
    /// fit in one answer.
    pub groups: Vec<GroupStatus>,
    /// How many groups the answer left out, after the last one of
    /// `groups`.
    pub omitted_groups: u64,
}

/// Why the status could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    /// Nobody coordinates there now.
    #[error("no coordinator answers in {place}: no process uses it now ({error})")]
    NoCoordinator {
        /// The flight directory, or the cluster.
        place: String,
        /// What reaching the coordinator failed with.
        error: io::Error,
    },
    /// The election names a coordinator that does not answer: its host
    /// died or is cut off and its lease has not expired yet, so a failover
    /// is in progress, or its process is stopped (SPEC.md §13.5, §14.3).
    #[error(
        "the coordinator that {place} names, at {address}, does not answer ({error}): a failover is in progress (its host died or is cut off, and its lease has not expired yet) or its process is stopped; ask again in a few seconds"
    )]
    NotAnswering {
        /// The cluster.
        place: String,
        /// The address the election names.
        address: String,
        /// What reaching it failed with.
        error: io::Error,
    },
    /// The directory's socket belongs to another user (SPEC.md §11.2).
    #[error("the socket in {place} is served by user id {uid}, not by you; refusing it")]
    OtherUser {
        /// The flight directory.
        place: String,
        /// The user that serves it.
        uid: u32,
    },
    /// The coordinator is not one this process speaks with (SPEC.md §4.2).
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The coordinator does not report its flights.
    #[error(
        "the coordinator runs an older single-flight that does not report its flights (it answered `unsupported`)"
    )]
    Unsupported,
    /// The coordinator's answer broke the protocol (SPEC.md §3.5).
    #[error("the coordinator's answer is not a status: {0}")]
    Protocol(#[from] DecodeError),
    /// The coordinator did not answer in time.
    #[error("the coordinator did not answer within {HANDSHAKE_TIMEOUT:?}; is its process stopped?")]
    Timeout,
    /// The connection failed.
    #[error("talking to the coordinator: {0}")]
    Io(#[from] io::Error),
    /// The place could not be used: the cluster's election, the certificates (SPEC.md §14),
    /// the directory.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Asks the coordinator of `place` for its term and flights.
pub(super) async fn look(place: Place) -> Result<Status, StatusError> {
    place.with(Look).await
}

/// [`look`] with whichever backend the place has.
struct Look;

impl Visit for Look {
    type Output = Result<Status, StatusError>;

    async fn visit<B: Backend>(self, backend: B) -> Result<Status, StatusError> {
        match look_at(&backend).await {
            // A host none of whose processes runs now: the place above may
            // still have a coordinator (SPEC.md §18.6).
            Err(StatusError::NoCoordinator { .. }) if backend.above().is_some() => {
                let above = backend.above().expect("checked just now");
                look_at(above).await
            }
            answer => answer,
        }
    }
}

/// One look at the coordinator of `backend`.
async fn look_at<B: Backend>(backend: &B) -> Result<Status, StatusError> {
    let place = backend.describe();
    let Some((transport, address)) = backend.find().await? else {
        return Err(StatusError::NoCoordinator {
            place,
            error: io::Error::new(io::ErrorKind::NotFound, "no coordinator is known there"),
        });
    };
    let shown = B::shown(&address);
    let Connection { reader, writer } =
        transport
            .connect(&address)
            .await
            .map_err(|error| match error {
                // A socket nobody listens on is a directory nobody
                // uses; an address that the election still names is a
                // coordinator gone without a word (§13.5).
                ConnectError::Unreachable(error) => match &shown {
                    None => StatusError::NoCoordinator {
                        place: place.clone(),
                        error,
                    },
                    Some(address) => StatusError::NotAnswering {
                        place: place.clone(),
                        address: address.clone(),
                        error,
                    },
                },
                ConnectError::Refused(PeerRefused::OtherUser { uid }) => StatusError::OtherUser {
                    place: place.clone(),
                    uid,
                },
                ConnectError::Refused(PeerRefused::Unknown(error)) => StatusError::Io(error),
                other => StatusError::Backend(BackendError::new(other)),
            })?;
    exchange(reader, writer, shown).await
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
            hosts,
            relay,
            ..
        } => {
            let asked = (epoch, hello.pid, hello.host);
            let (relay, answered) = match relay.map(|relay| *relay) {
                // §3.5: a host coordinator's answer is the cluster's, which
                // names the coordinator that decided it.
                Some(RelayStatus {
                    host,
                    connections,
                    groups,
                    omitted,
                    cluster,
                }) => {
                    let answered =
                        cluster.map(|cluster| (cluster.epoch, cluster.pid, cluster.host));
                    let relay = HostCoordinator {
                        epoch: asked.0,
                        pid: asked.1,
                        host: asked.2.clone(),
                        id: host,
                        connections,
                        groups,
                        omitted_groups: omitted,
                    };
                    (Some(relay), answered.unwrap_or(asked))
                }
                None => (None, asked),
            };
            let (epoch, pid, host) = answered;
            Ok(Status {
                epoch,
                pid,
                host,
                // The address of the coordinator asked; a host
                // coordinator's answer does not carry the cluster's.
                address: if relay.is_some() { None } else { address },
                flights,
                // §3.5: a missing count is none left out.
                omitted: omitted.unwrap_or(0),
                waiting_in_grace: waiting,
                stats: stats.map(|stats| *stats),
                hosts: hosts.map(|hosts| *hosts),
                relay,
            })
        }
        Response::Unsupported { .. } => Err(StatusError::Unsupported),
        other => Err(StatusError::Protocol(DecodeError::UnknownResponse {
            op: format!("{other:?}"),
        })),
    }
}

fn line_error(error: super::lines::LineError) -> StatusError {
    StatusError::Io(std::io::Error::other(error.to_string()))
}
