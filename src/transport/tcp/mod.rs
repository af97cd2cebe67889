//! The coordinator of a cluster over TCP (SPEC.md §11): mutual TLS 1.3
//! between processes that hold certificates of the cluster's CA, or plain
//! TCP on loopback for trying things out.
//!
//! # Driving contract
//!
//! - [`TcpTransport::new`] loads the TLS files and binds the listen address
//!   once, to learn its real port ([`TcpTransport::local_address`]), which
//!   the election can advertise before it campaigns; then it lets the port
//!   go. [`Transport::listen`], called from a tokio runtime by the winner of
//!   a term, binds that same address again, and [`Listener::close`] lets it
//!   go at the end of the term, so a process that no longer coordinates
//!   accepts nothing. Between terms another program could take a port that
//!   was chosen by the kernel (port 0); `listen` then fails and the term is
//!   resigned. Give a fixed port where that matters.
//! - The coordinator's address is the text `host:port` that the election
//!   reports: an IP address (IPv6 in brackets, `[::1]:7000`) or a DNS name,
//!   which is also the name its certificate must be valid for.
//! - Under TLS a client learns that the coordinator refused its certificate
//!   only on its first read after the handshake (TLS 1.3 ends the client's
//!   handshake before the coordinator has checked it): that read fails with
//!   an [`io::Error`] of kind [`PermissionDenied`](io::ErrorKind) that says
//!   so. Every other refusal is an error of [`Transport::connect`] or
//!   [`Listener::establish`].
//! - Every connection, on both sides, has TCP keepalive and
//!   `TCP_USER_TIMEOUT` set, so that a peer whose host died or whose link
//!   went down is noticed within [`DEAD_PEER_BOUND`]: such a peer sends no
//!   FIN, and without them a read would wait for hours.

mod stream;
mod tls;
mod validity;

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::wire::Wire;
pub use stream::PeerStream;
#[cfg(not(feature = "_internal"))]
use tls::Reloader;
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use tls::{EXPIRY_WARNING, TLS_RELOAD_INTERVAL};
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use tls::{MAX_PEM_FILE_BYTES, Reloader, TlsConfigs, TlsFile};
pub use tls::{TlsConfigError, TlsFiles, certificate_expiry};
pub use validity::rfc3339;

use super::{ConnectError, Connection, Listener, PeerRefused, Transport};
use tls::{
    client_certificate_problem, coordinator_certificate_problem, handshake_problem, rustls_error,
};

/// How long either side waits for the other to complete the TLS handshake.
/// A handshake is two round trips and a few signatures: milliseconds on any
/// network a cluster runs on. The bound frees the connection slot of a
/// client that opens TCP and never speaks TLS, and stops a client from
/// waiting on a coordinator whose process is stopped (its kernel still
/// accepts connections). It equals the hello's own bound (SPEC.md §11.3).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client waits for the TCP connection (and the name's lookup)
/// to the coordinator. A coordinator whose host is dead answers nothing, and
/// the kernel would retry the connection for about two minutes; the shell's
/// loop waits for `connect`, so it must come back soon and let the process
/// campaign. Two seconds cover one lost SYN, which is resent after one.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle time of a connection before the first keepalive probe. Short,
/// because keepalive is the heartbeat that notices a dead host; a probe is
/// one empty segment, so even a coordinator with thousands of idle clients
/// sends only a few thousand tiny packets a second.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(1);

/// Time between unanswered keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// Unanswered keepalive probes before the kernel gives up on a connection
/// (where `TCP_USER_TIMEOUT` is not available to decide instead).
pub const KEEPALIVE_PROBES: u32 = 3;

/// `TCP_USER_TIMEOUT` (Linux): how long sent data, or keepalive probes, may
/// go unacknowledged before the kernel ends the connection. Without it a
/// connection with unacknowledged data ignores keepalive and retransmits
/// for about 15 minutes. It also ends a connection whose peer has not read
/// for this long while the send buffer is full; the coordinator closes such
/// a client anyway (SPEC.md §11.3).
pub const USER_TIMEOUT: Duration = Duration::from_secs(4);

/// Within how long a connection whose peer vanished (dead host, downed
/// link) fails with an error: an idle connection sends its first probe
/// after [`KEEPALIVE_IDLE`] and is ended at the first probe past
/// [`USER_TIMEOUT`] (about 4–5 s after the last byte heard); a connection
/// with data in flight is ended [`USER_TIMEOUT`] after the oldest
/// unacknowledged byte. Stated for the documentation and the lead's
/// arithmetic; nothing waits for it.
#[cfg_attr(not(feature = "_internal"), allow(dead_code))]
pub const DEAD_PEER_BOUND: Duration = Duration::from_secs(5);

/// Connections the kernel holds for the coordinator before it accepts them.
/// After a failover every client of the cluster connects at once; 1024
/// absorbs that burst (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 1024;

/// How the processes of a cluster prove who they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Security {
    /// Mutual TLS 1.3: each process holds a certificate signed by the
    /// cluster's CA and valid for the host it advertises, and checks the
    /// other end's against that CA and the CA's revocation lists `crls`.
    /// All are PEM files, read again while the process runs (SPEC.md
    /// §14.5).
    Tls {
        ca: PathBuf,
        certificate: PathBuf,
        key: PathBuf,
        crls: Vec<PathBuf>,
    },
    /// Plain TCP, on loopback only. Without TLS nothing authenticates
    /// either end: anyone who can reach the port could take leadership of
    /// flights, read shared values or feed false ones, and anyone who can
    /// answer at an address could pose as the coordinator. On loopback only
    /// local programs can, as with the Unix socket (SPEC.md §11.2, which
    /// moreover checks the user).
    Insecure,
}

/// What a [`TcpTransport`] is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// Where this process listens when it coordinates; port 0 lets the
    /// kernel choose a free port once, at [`TcpTransport::new`].
    pub listen: SocketAddr,
    pub security: Security,
}

/// Why a [`TcpTransport`] cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TcpConfigError {
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    #[error(
        "cannot listen on {address}: {error}; give --listen an address of this host and a port that is free and that this user may use (or port 0 for any)"
    )]
    Bind {
        address: SocketAddr,
        error: io::Error,
    },
    #[error(
        "without TLS this process listens on loopback only, and {address} is not a loopback address: nothing would authenticate the processes that connect. Give --tls-ca, --tls-cert and --tls-key, or listen on 127.0.0.1 or [::1]"
    )]
    InsecureNotLoopback { address: SocketAddr },
}

/// [`Transport`] over TCP, with mutual TLS or, on loopback, without.
#[derive(Clone, Debug)]
pub struct TcpTransport {
    /// The listen address with its real port.
    listen: SocketAddr,
    /// False for a transport made by [`TcpTransport::client`], which
    /// never listens.
    listens: bool,
    /// `None` when insecure.
    tls: Option<Tls>,
}

/// The TLS files as this process uses them: every handshake takes the set
/// in use when it starts (SPEC.md §14.5).
type Tls = Arc<Reloader>;

impl TcpTransport {
    /// Loads the TLS files and binds the listen address once, to learn its
    /// real port. A fixed port that another process of this host listens on
    /// (its coordinator, this term) is accepted: this one binds it only when
    /// it wins a later term.
    pub fn new(options: TcpOptions) -> Result<TcpTransport, TcpConfigError> {
        if matches!(options.security, Security::Insecure) && !is_loopback(options.listen.ip()) {
            return Err(TcpConfigError::InsecureNotLoopback {
                address: options.listen,
            });
        }
        let tls = load(&options.security)?;
        let bind_error = |error| TcpConfigError::Bind {
            address: options.listen,
            error,
        };
        let listen = match bind(options.listen) {
            Ok(socket) => socket.local_addr().map_err(bind_error)?,
            Err(error)
                if error.kind() == io::ErrorKind::AddrInUse && options.listen.port() != 0 =>
            {
                options.listen
            }
            Err(error) => return Err(bind_error(error)),
        };
        if let Some(tls) = &tls {
            tls.read_each_interval();
        }
        Ok(TcpTransport {
            listen,
            listens: true,
            tls,
        })
    }

    /// A transport that only connects: it loads the TLS files and binds
    /// nothing, for a process that asks the coordinator and never
    /// coordinates (`status`, SPEC.md §13.5). Its `listen` fails. It does
    /// not read the files each interval: such a process connects once,
    /// soon after loading them, and ends.
    pub fn client(security: &Security) -> Result<TcpTransport, TcpConfigError> {
        let tls = load(security)?;
        Ok(TcpTransport {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            listens: false,
            tls,
        })
    }

    /// The address this process listens on when it coordinates, with the
    /// port the kernel chose for port 0.
    pub fn local_address(&self) -> SocketAddr {
        self.listen
    }

    /// Reads the TLS files now instead of at the next interval (SPEC.md
    /// §14.5), for the tests.
    #[cfg(feature = "_internal")]
    pub fn read_tls_files_now(&self) {
        if let Some(tls) = &self.tls {
            tls.read_now();
        }
    }
}

/// The TLS files of `security`, loaded; `None` for plain TCP. A handshake
/// reads them again when they are an interval old.
fn load(security: &Security) -> Result<Option<Tls>, TcpConfigError> {
    Ok(match security {
        Security::Insecure => None,
        Security::Tls {
            ca,
            certificate,
            key,
            crls,
        } => Some(Reloader::new(TlsFiles {
            ca: ca.clone(),
            certificate: certificate.clone(),
            key: key.clone(),
            crls: crls.clone(),
        })?),
    })
}

/// A socket bound to `address`, not yet listening. `SO_REUSEADDR` lets a
/// new term bind the port while connections of an earlier term linger in
/// `TIME_WAIT`; on Linux it does not let two sockets listen on one port.
fn bind(address: SocketAddr) -> io::Result<TcpSocket> {
    let socket = match address {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket)
}

/// Whether an address reaches this host only. An IPv4 address written as
/// IPv6 (`::ffff:127.0.0.1`) counts as the IPv4 one.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Keepalive, `TCP_USER_TIMEOUT` and `TCP_NODELAY` on a connection (see
/// [`DEAD_PEER_BOUND`]). No delay, because every message is a line that
/// waits for an answer: Nagle's algorithm would hold a small request back
/// for the previous one's acknowledgement.
fn configure(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = SockRef::from(stream);
    socket.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES),
    )?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}

/// A coordinator's address, taken apart.
#[derive(Debug)]
struct Target<'a> {
    /// Without brackets: what name lookup and the certificate check take.
    host: &'a str,
    port: u16,
}

impl Target<'_> {
    fn parse(address: &str) -> Result<Target<'_>, String> {
        let (host, port) = if let Some(bracketed) = address.strip_prefix('[') {
            let (host, port) = bracketed.split_once("]:").ok_or(
                "an IPv6 address is written in brackets followed by a port, like [::1]:7000",
            )?;
            if host.parse::<Ipv6Addr>().is_err() {
                return Err(format!("{host} in brackets is not an IPv6 address"));
            }
            (host, port)
        } else {
            let (host, port) = address
                .rsplit_once(':')
                .ok_or("it has no port; write host:port, like 10.0.0.1:7000")?;
            if host.contains(':') {
                return Err("an IPv6 address is written in brackets, like [::1]:7000".to_owned());
            }
            (host, port)
        };
        if host.is_empty() {
            return Err("it has no host; write host:port, like 10.0.0.1:7000".to_owned());
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| format!("its port {port:?} is not a number from 1 to 65535"))?;
        Ok(Target { host, port })
    }

    /// Whether the host is a loopback address or `localhost` (whose
    /// connection is checked again once made: a hosts file can map it
    /// anywhere).
    fn is_loopback(&self) -> bool {
        self.host.eq_ignore_ascii_case("localhost")
            || self.host.parse::<IpAddr>().is_ok_and(is_loopback)
    }
}

/// The connection's reading half.
pub type TcpReader = ReadHalf<PeerStream>;
/// The connection's writing half.
pub type TcpWriter = WriteHalf<PeerStream>;

fn split(stream: PeerStream) -> Connection<TcpReader, TcpWriter> {
    let (reader, writer) = tokio::io::split(stream);
    Connection { reader, writer }
}

impl Transport for TcpTransport {
    type Address = String;
    type Reader = TcpReader;
    type Writer = TcpWriter;
    type Listener = TcpSocketListener;

    /// The socket and the session over it, which lend (§10.1).
    fn wire(connection: Connection<TcpReader, TcpWriter>) -> io::Result<Box<dyn Wire>> {
        connection.reader.unsplit(connection.writer).into_wire()
    }

    async fn connect(
        &self,
        address: &String,
    ) -> Result<Connection<TcpReader, TcpWriter>, ConnectError> {
        let unusable = |reason: String| ConnectError::Address {
            address: address.clone(),
            reason,
        };
        let target = Target::parse(address).map_err(unusable)?;
        let peer = format!("the coordinator at {address}");
        let server_name = match &self.tls {
            Some(_) => Some(ServerName::try_from(target.host.to_owned()).map_err(|_| {
                unusable(format!(
                    "{} is neither an IP address nor a DNS name",
                    target.host
                ))
            })?),
            None if target.is_loopback() => None,
            None => {
                return Err(unusable(format!(
                    "{} is not a loopback address, and without TLS this process connects to loopback only: nothing would prove that the coordinator is one. Give --tls-ca, --tls-cert and --tls-key, or run the cluster on 127.0.0.1",
                    target.host
                )));
            }
        };

        let stream = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((target.host, target.port)),
        )
        .await
        .map_err(|_| {
            ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{peer} did not answer within {CONNECT_TIMEOUT:?}"),
            ))
        })?
        .map_err(ConnectError::Unreachable)?;
        configure(&stream).map_err(ConnectError::Unreachable)?;

        let (Some(tls), Some(server_name)) = (&self.tls, server_name) else {
            let peer_address = stream.peer_addr().map_err(ConnectError::Unreachable)?;
            if !is_loopback(peer_address.ip()) {
                return Err(unusable(format!(
                    "{} resolves to {}, which is not a loopback address; without TLS this process connects to loopback only",
                    target.host,
                    peer_address.ip()
                )));
            }
            return Ok(split(PeerStream::plain(stream, peer)));
        };
        let connector = TlsConnector::from(tls.current().client.clone());
        let handshake = tokio::time::timeout(
            TLS_HANDSHAKE_TIMEOUT,
            connector.connect(server_name, stream),
        )
        .await;
        match handshake {
            Ok(Ok(stream)) => Ok(split(PeerStream::tls(
                stream.into(),
                peer,
                Some(tls.certificate_file().to_owned()),
            ))),
            Ok(Err(error)) => Err(match rustls_error(&error) {
                Some(tls_error) => match coordinator_certificate_problem(tls_error, target.host) {
                    Some(problem) => PeerRefused::Certificate { peer, problem }.into(),
                    None => PeerRefused::Setup {
                        peer,
                        reason: handshake_problem(tls_error),
                    }
                    .into(),
                },
                None => ConnectError::Unreachable(io::Error::new(
                    error.kind(),
                    format!("{peer} closed the connection during the TLS handshake: {error}"),
                )),
            }),
            Err(_) => Err(ConnectError::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{peer} accepted the connection but did not complete the TLS handshake within {TLS_HANDSHAKE_TIMEOUT:?}; is its process stopped, or does it run without TLS?"
                ),
            ))),
        }
    }

    fn listen(&self) -> io::Result<TcpSocketListener> {
        if !self.listens {
            return Err(io::Error::other(
                "a transport made to ask the coordinator does not listen",
            ));
        }
        let listener = bind(self.listen)?.listen(LISTEN_BACKLOG)?;
        Ok(TcpSocketListener {
            listener,
            tls: self.tls.clone(),
        })
    }
}

/// The coordinator's listening socket for one term.
pub struct TcpSocketListener {
    listener: tokio::net::TcpListener,
    /// `None` when insecure.
    tls: Option<Tls>,
}

/// A connection accepted but not yet checked: the TLS handshake runs in
/// [`Listener::establish`], in the connection's own task.
pub struct TcpIncoming {
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
}

impl Listener for TcpSocketListener {
    type Reader = TcpReader;
    type Writer = TcpWriter;
    type Incoming = TcpIncoming;

    async fn accept(&mut self) -> io::Result<TcpIncoming> {
        let (stream, peer) = self.listener.accept().await?;
        // The set in use now: a rotation takes effect at the next
        // connection, and the connections made before keep theirs.
        Ok(TcpIncoming {
            stream,
            peer,
            acceptor: self
                .tls
                .as_ref()
                .map(|tls| TlsAcceptor::from(tls.current().server.clone())),
        })
    }

    async fn establish(
        incoming: TcpIncoming,
    ) -> Result<Connection<TcpReader, TcpWriter>, PeerRefused> {
        let TcpIncoming {
            stream,
            peer,
            acceptor,
        } = incoming;
        let peer = format!("the client at {peer}");
        if let Err(error) = configure(&stream) {
            return Err(PeerRefused::Setup {
                peer,
                reason: format!("cannot set TCP keepalive on the connection: {error}"),
            });
        }
        let Some(acceptor) = acceptor else {
            return Ok(split(PeerStream::plain(stream, peer)));
        };
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => Ok(split(PeerStream::tls(stream.into(), peer, None))),
            Ok(Err(error)) => Err(match rustls_error(&error) {
                Some(tls_error) => match client_certificate_problem(tls_error) {
                    Some(problem) => PeerRefused::Certificate { peer, problem },
                    None => PeerRefused::Setup {
                        peer,
                        reason: handshake_problem(tls_error),
                    },
                },
                None => PeerRefused::Setup {
                    peer,
                    reason: format!("the connection failed during the TLS handshake: {error}"),
                },
            }),
            Err(_) => Err(PeerRefused::Setup {
                peer,
                reason: format!(
                    "it did not complete the TLS handshake within {TLS_HANDSHAKE_TIMEOUT:?}"
                ),
            }),
        }
    }

    /// Nothing can be taken from a bound TCP port the way a socket file can
    /// be removed, so there is nothing to repair.
    fn check(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Closing the socket frees the port for the next term, here or in
    /// another process of this host.
    fn close(self) {
        drop(self.listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stated bound follows from the constants: a vanished peer is
    /// noticed at the first probe past the user timeout.
    #[test]
    fn the_dead_peer_bound_covers_the_keepalive_settings() {
        assert!(KEEPALIVE_IDLE <= USER_TIMEOUT);
        assert!(USER_TIMEOUT + KEEPALIVE_INTERVAL <= DEAD_PEER_BOUND);
        let probes_until_given_up = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES;
        assert!(probes_until_given_up <= DEAD_PEER_BOUND);
    }

    /// Both ends of a connection, the client's from `connect` and the
    /// coordinator's from `establish`, carry the heartbeat settings.
    #[tokio::test]
    async fn both_ends_have_keepalive_and_no_delay() {
        let options = |listen: &str| TcpOptions {
            listen: listen.parse().unwrap(),
            security: Security::Insecure,
        };
        let coordinator = TcpTransport::new(options("127.0.0.1:0")).unwrap();
        let client = TcpTransport::new(options("127.0.0.1:0")).unwrap();
        let mut listener = coordinator.listen().unwrap();
        let address = coordinator.local_address().to_string();
        let accept = async {
            let incoming = listener.accept().await.unwrap();
            TcpSocketListener::establish(incoming).await
        };
        let (connected, accepted) = tokio::join!(client.connect(&address), accept);
        for connection in [connected.ok().unwrap(), accepted.ok().unwrap()] {
            let stream = connection.reader.unsplit(connection.writer);
            let socket = SockRef::from(stream.tcp());
            assert!(socket.tcp_nodelay().unwrap());
            assert!(socket.keepalive().unwrap());
            assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
            assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
            assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
            #[cfg(any(target_os = "linux", target_os = "android"))]
            assert_eq!(socket.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
        }
        listener.close();
    }

    #[test]
    fn addresses_are_taken_apart() {
        let target = Target::parse("[::1]:7000").unwrap();
        assert_eq!((target.host, target.port), ("::1", 7000));
        assert!(target.is_loopback());
        let target = Target::parse("coordinator.example:443").unwrap();
        assert_eq!((target.host, target.port), ("coordinator.example", 443));
        assert!(!target.is_loopback());
        assert!(Target::parse("LocalHost:1").unwrap().is_loopback());
        assert!(Target::parse("[::ffff:127.0.0.1]:1").unwrap().is_loopback());
        assert!(Target::parse("127.1.2.3:1").unwrap().is_loopback());
        assert!(!Target::parse("0.0.0.0:1").unwrap().is_loopback());
    }
}
