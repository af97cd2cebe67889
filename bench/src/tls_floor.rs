//! The floor of a cluster call: one small line each way between two hosts
//! over an established TCP connection with mutual TLS 1.3, with blocking
//! reads and writes and no parsing. The rustls configuration is of the
//! library's class (TLS 1.3 only, ring, a client certificate required and
//! checked against the cluster's CA, the server's checked for its address,
//! no resumption), built here from the same files rather than taken from
//! the library, so that the floor owes nothing to the code it is the floor
//! of.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use tokio_rustls::rustls::{
    self, ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
    StreamOwned,
};

use crate::floor::{ANSWER, REQUEST};
use crate::lab::Lab;
use crate::process::say;

/// Where the echo end listens on its host (a namespace of the lab's own,
/// so the port is free there).
const PORT: u16 = 7400;

/// The longest line either end reads: both lines are under 64 bytes.
const LINE_BYTES: usize = 128;

/// The median of `pings` timed round trips from host 1 to host 0, in
/// nanoseconds.
pub fn measure(lab: &Lab, pings: usize) -> f64 {
    let address = SocketAddr::new(lab.address(0), PORT).to_string();
    let certs = lab.certs();
    let certs = certs.to_str().expect("a UTF-8 temp dir");
    let _echo =
        crate::process::Worker::start(lab.command(0), &["tls-echo", &address, certs]).ready();
    let ping = crate::process::Worker::start(
        lab.command(1),
        &["tls-ping", &address, certs, &pings.to_string()],
    );
    ping.expect("result").parse().expect("nanoseconds")
}

/// Both ends' configurations from the lab's files: each end presents the
/// process certificate, as every process of a cluster does.
fn configs(certs: &Path) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let read = |name: &str| std::fs::read(certs.join(name)).expect("the lab's certificates");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read("server.pem"))
        .collect::<Result<_, _>>()
        .expect("a PEM certificate");
    let key = PrivateKeyDer::from_pem_slice(&read("server.key")).expect("a PEM key");
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&read("ca.pem")) {
        roots.add(ca.expect("a PEM CA")).expect("a trust anchor");
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(ring::default_provider());
    let tls13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .expect("a client verifier");
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(tls13)
        .expect("TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .expect("the certificate and its key");
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(tls13)
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("the certificate and its key");
    client.resumption = rustls::client::Resumption::disabled();
    (Arc::new(server), Arc::new(client))
}

/// Reads one line (up to its newline) into `line`; `false` at the end.
fn read_line(stream: &mut impl Read, line: &mut Vec<u8>) -> bool {
    line.clear();
    let mut buffer = [0u8; LINE_BYTES];
    while !line.ends_with(b"\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return false,
            Ok(read) => line.extend_from_slice(&buffer[..read]),
        }
        assert!(line.len() <= LINE_BYTES, "a line of the floor is short");
    }
    true
}

/// `worker tls-echo ADDRESS CERTS`: accepts one connection, completes the
/// handshake, and answers each line with one line until it closes.
pub fn echo(address: &str, certs: &str) {
    let (server, _) = configs(Path::new(certs));
    let listener = TcpListener::bind(address).expect("bind the floor's port");
    say("READY");
    let (socket, _) = listener.accept().expect("the pinger connects");
    socket.set_nodelay(true).expect("TCP_NODELAY");
    let connection = ServerConnection::new(server).expect("a TLS server connection");
    let mut stream = StreamOwned::new(connection, socket);
    let mut line = Vec::with_capacity(LINE_BYTES);
    while read_line(&mut stream, &mut line) {
        if stream
            .write_all(ANSWER)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
}

/// `worker tls-ping ADDRESS CERTS PINGS`: connects, completes the
/// handshake, and prints `result MEDIAN_NS` of PINGS timed round trips.
pub fn ping(address: &str, certs: &str, pings: &str) {
    let pings: usize = pings.parse().expect("a number of pings");
    let (_, client) = configs(Path::new(certs));
    let target: SocketAddr = address.parse().expect("an address");
    let socket = TcpStream::connect(target).expect("connect to the echo");
    socket.set_nodelay(true).expect("TCP_NODELAY");
    let name = ServerName::IpAddress(match target.ip() {
        IpAddr::V4(ip) => ip.into(),
        IpAddr::V6(ip) => ip.into(),
    });
    let connection = ClientConnection::new(client, name).expect("a TLS client connection");
    let mut stream = StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("the TLS handshake");
    }
    let mut line = Vec::with_capacity(LINE_BYTES);
    let median = crate::floor::timed(pings, || {
        stream
            .write_all(REQUEST)
            .and_then(|()| stream.flush())
            .expect("the echo reads");
        assert!(read_line(&mut stream, &mut line), "the echo answers");
        assert_eq!(line, ANSWER, "the echo's answer");
    });
    say(format!("result {median}"));
}
